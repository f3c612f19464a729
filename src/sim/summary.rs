//! What `ftdrive sim` prints: a readable summary, or the JSON summary object of DESIGN §8.

use super::SimReport;
use serde_json::{json, Value};
use std::fmt::Write;

/// The JSON summary: `jobs[]` as `status --output json` prints them, and `violations[]`.
pub fn json(report: &SimReport) -> Value {
    json!({
        "seed": report.seed,
        "end_ms": report.end_ms,
        "trace_hash": report.trace_hash,
        "trace_events": report.trace_events,
        "jobs": report.jobs,
        "violations": report.violations,
        "stats": report.stats,
    })
}

/// A summary for people.
pub fn text(report: &SimReport) -> String {
    let mut out = String::new();
    let s = &report.stats;
    let _ = writeln!(
        out,
        "seed {} · simulated {} ms in {} steps · {} messages ({} dropped, {} duplicated) · trace {}",
        report.seed, report.end_ms, s.steps, s.messages, s.dropped, s.duplicated, report.trace_hash
    );
    for job in &report.jobs {
        let _ = writeln!(out, "\njob {} ({}) {} after {} cycle(s)", job.id, job.name, job.state, job.cycles);
        if let Some(message) = job.message.as_ref().or(job.infeasible.as_ref()) {
            let _ = writeln!(out, "  {message}");
        }
        for a in &job.actors {
            let node = a.node.as_deref().unwrap_or("-");
            let rank = a.rank.map_or("-".to_string(), |r| r.to_string());
            let _ = writeln!(
                out,
                "  {:<12} {:<15} node {:<8} rank {:<3} attempt {}",
                a.name,
                a.state.to_string(),
                node,
                rank,
                a.attempt
            );
        }
        for e in &job.ledger {
            let r = e.remaining;
            let _ = writeln!(
                out,
                "  ledger {} attempt {} cycle {} on {}: {} → {} (left: user {}, system {}, preemption {}) — {}",
                e.actor, e.attempt, e.cycle, e.node, e.cause, e.budget, r.user, r.system, r.preemption, e.evidence
            );
        }
    }
    if report.violations.is_empty() {
        let _ = writeln!(out, "\nno invariant violated");
    }
    for v in &report.violations {
        let _ = writeln!(out, "\nVIOLATION {} at step {} (t={} ms): {}", v.invariant, v.step, v.t_ms, v.detail);
    }
    out
}
