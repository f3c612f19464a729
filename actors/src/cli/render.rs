//! Text for people: job and node tables, event lines, the ledger.

use ftdrive::driver::ActorState;
use ftdrive::view::{JobView, NodeView};
use serde_json::Value;
use std::fmt::Write;

/// One line for an event, or `None` for events not worth a line.
pub fn event_line(e: &Value) -> Option<String> {
    let t = e["t_ms"].as_u64().unwrap_or(0) as f64 / 1000.0;
    let s = |k: &str| e[k].as_str().unwrap_or("-").to_string();
    let text = match e["event"].as_str()? {
        "transition" => {
            let place = e["node"].as_str().map(|n| format!(" on {n}")).unwrap_or_default();
            let rank = e["rank"].as_u64().map(|r| format!(" rank {r}")).unwrap_or_default();
            format!(
                "{} {} → {}{place}{rank} (attempt {}, cycle {})",
                s("actor"),
                s("from"),
                s("to"),
                e["attempt"],
                e["cycle"]
            )
        }
        "cycle_formed" => format!(
            "cycle {} formed: {} rank(s), rendezvous {}:{}",
            e["cycle"],
            e["world_size"],
            s("master_addr"),
            e["master_port"]
        ),
        "job_state" => format!(
            "job {} {}{}",
            s("job"),
            s("to"),
            e["message"].as_str().map(|m| format!(": {m}")).unwrap_or_default()
        ),
        "ledger" => {
            let l = &e["entry"];
            format!(
                "{} attempt {} ended: {} → {} budget — {}",
                l["actor"].as_str().unwrap_or("-"),
                l["attempt"],
                l["cause"].as_str().unwrap_or("-"),
                l["budget"].as_str().unwrap_or("-"),
                l["evidence"].as_str().unwrap_or("-")
            )
        }
        "promoted" => format!("spare {} takes the rank of {}", s("spare"), s("replaces")),
        "feasibility" => match e["infeasible"].as_str() {
            Some(why) => why.to_string(),
            None => "the job is feasible again".to_string(),
        },
        "node_state" => format!("node {} {}: {}", s("node"), s("state"), s("evidence")),
        _ => return None,
    };
    Some(format!("{t:>8.1}s  {text}"))
}

/// Updates a followed view from an event (actor states and nodes), so the table stays live.
pub fn apply(view: &mut JobView, e: &Value) {
    if e["event"] == "transition" {
        let name = e["actor"].as_str().unwrap_or_default();
        if let Some(actor) = view.actors.iter_mut().find(|a| a.name == name) {
            if let Ok(state) = serde_json::from_value::<ActorState>(e["to"].clone()) {
                actor.state = state;
            }
            actor.node = e["node"].as_str().map(str::to_string).or(actor.node.take());
            actor.rank = e["rank"].as_u64().map(|r| r as u32).or(actor.rank);
            actor.attempt = e["attempt"].as_u64().unwrap_or(actor.attempt as u64) as u32;
        }
    }
    if e["event"] == "job_state" {
        if let Ok(state) = serde_json::from_value(e["to"].clone()) {
            view.state = state;
        }
    }
    if e["event"] == "cycle_formed" {
        view.cycles = e["cycle"].as_u64().unwrap_or(view.cycles as u64) as u32;
    }
}

/// Where a job stands, a line per actor: the start of a follower's output.
pub fn snapshot_lines(view: &JobView) -> String {
    let mut out = format!("     now  job {} {} · cycle {}\n", view.id, view.state, view.cycles);
    for a in &view.actors {
        let node = a.node.as_ref().map(|n| format!(" on {n}")).unwrap_or_default();
        let rank = a.rank.map(|r| format!(" rank {r}")).unwrap_or_default();
        let _ = writeln!(out, "     now  {} {}{node}{rank} (attempt {})", a.name, a.state, a.attempt);
    }
    out
}

pub fn job_table(view: &JobView) -> String {
    let mut out = format!("job {} ({}) {} · cycle {}\n", view.id, view.name, view.state, view.cycles);
    let _ = writeln!(out, "  {:<14} {:<15} {:<14} {:>4} {:>7}", "ACTOR", "STATE", "NODE", "RANK", "ATTEMPT");
    for a in &view.actors {
        let rank = a.rank.map_or("-".to_string(), |r| r.to_string());
        let node = a.node.as_deref().unwrap_or("-");
        let _ = writeln!(out, "  {:<14} {:<15} {:<14} {:>4} {:>7}", a.name, a.state.to_string(), node, rank, a.attempt);
    }
    out
}

/// The job, its actors, its ledger and what its budgets have left.
pub fn job_summary(view: &JobView) -> String {
    let mut out = job_table(view);
    if let Some(m) = view.message.as_ref().or(view.infeasible.as_ref()) {
        let _ = writeln!(out, "  {m}");
    }
    out.push_str(&ledger(view));
    out
}

pub fn ledger(view: &JobView) -> String {
    let r = &view.remaining;
    let budget = |n: i64| if n < 0 { "unlimited".to_string() } else { n.to_string() };
    let mut out = format!(
        "  budgets left: user {}, system {}, preemption {}\n",
        budget(r.user),
        budget(r.system),
        budget(r.preemption)
    );
    if view.ledger.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "  {:<12} {:>4} {:>5} {:<10} {:<18} {:<11} {:<22} EVIDENCE",
        "ACTOR", "ATT", "CYCLE", "NODE", "CAUSE", "BUDGET", "LEFT u/s/p"
    );
    for e in &view.ledger {
        let left = format!("{}/{}/{}", e.remaining.user, e.remaining.system, e.remaining.preemption);
        let _ = writeln!(
            out,
            "  {:<12} {:>4} {:>5} {:<10} {:<18} {:<11} {:<22} {}",
            e.actor,
            e.attempt,
            e.cycle,
            e.node,
            e.cause.to_string(),
            e.budget.to_string(),
            left,
            e.evidence
        );
    }
    out
}

pub fn jobs_table(views: &[JobView]) -> String {
    let mut out = format!("{:<10} {:<20} {:<10} {:>6} {:>8}  MESSAGE\n", "ID", "NAME", "STATE", "CYCLES", "RUNNING");
    for v in views {
        let running = v.actors.iter().filter(|a| a.state == ActorState::Running).count();
        let message = v.message.as_ref().or(v.infeasible.as_ref()).cloned().unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<10} {:<20} {:<10} {:>6} {:>8}  {}",
            v.id,
            v.name,
            v.state.to_string(),
            v.cycles,
            running,
            message
        );
    }
    out
}

pub fn nodes_table(nodes: &[NodeView]) -> String {
    let mut out =
        format!("{:<14} {:<9} {:<16} {:<28} {:<28} LABELS\n", "NAME", "STATE", "ADDR", "RESOURCES", "ALLOCATED");
    for n in nodes {
        let labels: Vec<String> = n.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let state = serde_json::to_value(n.state).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<14} {:<9} {:<16} {:<28} {:<28} {}",
            n.name,
            state,
            n.addr,
            n.resources.to_string(),
            n.allocated.to_string(),
            labels.join(",")
        );
    }
    out
}
