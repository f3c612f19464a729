//! Text for people: job and node tables, event lines, the ledger.

use ftdrive::driver::{ActorState, Budget, Cause, JobState, LedgerEntry};
use ftdrive::event::{Event, EventLine, JobEvent};
use ftdrive::scheduler::NodeState;
use ftdrive::view::{ActorView, JobView, NodeView, Suspect};
use ftdrive::{ActorId, JobId};
use std::fmt::Write;

/// One line for an event, or `None` for events not worth a line. Times are shown relative to
/// `origin_ms` (when the follower started); `nproc` is the job's workers per actor.
pub fn event_line(line: &EventLine, origin_ms: u64, nproc: u32) -> Option<String> {
    // An attempt's end is shown when it happened, as the ledger has it: heard of late (its
    // agent or the head away), the event itself is later.
    let at_ms = match &line.event {
        Event::Job { detail: JobEvent::Ledger { entry }, .. } => entry.end_ms,
        _ => line.t_ms,
    };
    let t = at_ms.saturating_sub(origin_ms) as f64 / 1000.0;
    let text = match &line.event {
        Event::Job { job, detail } => job_event_text(job, detail, nproc, line.t_ms)?,
        Event::NodeState { node, state, evidence } => format!("node {node} {}: {evidence}", state_text(state)),
        Event::NodeHealth { node, problem: Some(problem) } => format!("node {node} is given no new work: {problem}"),
        Event::NodeHealth { node, problem: None } => format!("node {node} can start work again"),
        Event::AgentRestarted { node, reattached, lost, reconfigured } => {
            let offer = if *reconfigured { ", offering other resources or labels" } else { "" };
            format!("node {node}: its agent restarted{offer} and re-attached to {reattached} attempt(s), {lost} gone")
        }
        Event::NodeForgotten { node, evidence } => format!("node {node} {evidence}"),
        Event::JobSubmitted { .. } | Event::Placed { .. } | Event::Released { .. } => return None,
    };
    Some(format!("{t:>8.1}s  {text}"))
}

/// An actor's rank is its node's rank in the cycle (torchrun's GROUP_RANK); with several
/// workers each, torchrun's RANK is a worker's, so the text says which it means.
fn rank_text(rank: u32, nproc: u32) -> String {
    match nproc {
        0 | 1 => format!(" rank {rank}"),
        n => format!(" node rank {rank} (ranks {}-{})", rank * n, rank * n + n - 1),
    }
}

fn job_event_text(job: &JobId, detail: &JobEvent, nproc: u32, t_ms: u64) -> Option<String> {
    Some(match detail {
        JobEvent::Transition { actor, from, to, attempt, cycle, rank, node } => {
            let place = node.as_ref().map(|n| format!(" on {n}")).unwrap_or_default();
            let rank = rank.map(|r| rank_text(r, nproc)).unwrap_or_default();
            format!("{actor} {from} → {to}{place}{rank} (attempt {attempt}, cycle {cycle})")
        }
        JobEvent::CycleFormed { cycle, world_size, master_addr, master_port, .. } => {
            let members = match nproc {
                0 | 1 => format!("{world_size} rank(s)"),
                n => format!("{world_size} node(s) of {n} workers (WORLD_SIZE {})", world_size * n),
            };
            format!("cycle {cycle} formed: {members}, rendezvous {master_addr}:{master_port}")
        }
        JobEvent::JobState { to, message, .. } => {
            format!("job {job} {to}{}", message.as_ref().map(|m| format!(": {m}")).unwrap_or_default())
        }
        JobEvent::Ledger { entry: l } => {
            // What the failure cost, in words: `→ none budget` read as a budget named none.
            let charged = match l.remaining.get(l.budget) {
                None => "nothing charged".to_string(),
                Some(left) => format!("charged to the {} budget ({left} left)", l.budget),
            };
            format!("{} attempt {} ended: {}, {charged} — {}", l.actor, l.attempt, l.cause, l.evidence)
        }
        JobEvent::Promoted { spare, replaces } => format!("spare {spare} takes the rank of {replaces}"),
        JobEvent::PortMoved { actor, from, to } => {
            format!("{actor}: something else listens on port {from}; its next rendezvous is served on {to}")
        }
        JobEvent::Feasibility { infeasible } => match infeasible {
            Some(why) => why.clone(),
            None => "the job is feasible again".to_string(),
        },
        // A start's confirmation follows its transition within moments: a line for each would
        // double the output for news that `status` shows.
        JobEvent::Closing { .. }
        | JobEvent::Stale { .. }
        | JobEvent::ReleasedUnused { .. }
        | JobEvent::StartConfirmed { .. } => return None,
        // Counted from the event's own time: the head's clock on both sides.
        JobEvent::BackingOff { actor, until_ms } => restart_text(actor.as_ref(), until_ms.saturating_sub(t_ms)),
    })
}

fn state_text<T: serde::Serialize>(state: &T) -> String {
    serde_json::to_value(state).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// Updates a followed view from an event (actor states and nodes), so the table stays live.
pub fn apply(view: &mut JobView, event: &Event) {
    let Event::Job { detail, .. } = event else { return };
    match detail {
        JobEvent::Transition { actor, to, attempt, rank, node, .. } => {
            if let Some(a) = view.actors.iter_mut().find(|a| a.name == *actor) {
                a.state = *to;
                // A waiting actor shows no node, as its view does: the last one is not where it
                // will run.
                a.node = match node {
                    Some(n) => Some(n.to_string()),
                    None if *to == ActorState::Scheduling => None,
                    None => a.node.take(),
                };
                a.rank = rank.or(a.rank);
                a.attempt = *attempt;
                // Sent, not yet confirmed: `start_confirmed` says when its agent has it.
                a.starting = *to == ActorState::Running;
            }
        }
        JobEvent::StartConfirmed { actor, attempt, .. } => {
            if let Some(a) = view.actors.iter_mut().find(|a| a.name == *actor && a.attempt == *attempt) {
                a.starting = false;
            }
        }
        JobEvent::JobState { to, .. } => view.state = *to,
        JobEvent::BackingOff { actor: None, until_ms } => view.restart_at_ms = Some(*until_ms),
        JobEvent::BackingOff { actor: Some(actor), until_ms } => {
            if let Some(a) = view.actors.iter_mut().find(|a| a.name == *actor) {
                a.restart_at_ms = Some(*until_ms);
            }
        }
        JobEvent::CycleFormed { cycle, ranks, .. } => {
            view.cycles = *cycle;
            // Those left out hold no rank of it; the members' starts name theirs.
            for a in view.actors.iter_mut().filter(|a| !ranks.contains(&a.name)) {
                a.rank = None;
            }
        }
        _ => {}
    }
}

/// Where a job stands, a line per actor: the start of a follower's output.
pub fn snapshot_lines(view: &JobView) -> String {
    let mut out = format!("     now  job {} {} · cycle {}\n", view.id, view.state, view.cycles);
    if let Some(why) = waits_because(view) {
        let _ = writeln!(out, "     now  {why}");
    }
    for a in &view.actors {
        let node = a.node.as_ref().map(|n| format!(" on {n}")).unwrap_or_default();
        let rank = a.rank.map(|r| rank_text(r, view.nproc_per_node)).unwrap_or_default();
        // No "(starting)" here: no later line of the stream would say the start was confirmed.
        let _ = writeln!(out, "     now  {} {}{node}{rank} (attempt {})", a.name, a.state, a.attempt);
    }
    out
}

/// A snapshot in mid-stream (the head's wait for its agents ended): why the job waits now,
/// where that changed.
pub fn new_wait<'a>(was: &JobView, now: &'a JobView) -> Option<&'a String> {
    waits_because(now).filter(|why| waits_because(was) != Some(*why))
}

/// Why a job that has not ended is not (wholly) placed: it never could be, or not yet.
fn waits_because(view: &JobView) -> Option<&String> {
    view.infeasible.as_ref().or(view.waiting.as_ref()).filter(|_| !view.state.is_terminal())
}

/// A job's one-line message: how it ended; while it ends (the outcome decided, its processes
/// inside their stop grace: Kubernetes' Terminating, Slurm's COMPLETING), why and that it waits
/// for them; while it backs off before a restart, when it restarts; else why it waits to be
/// placed. `now_ms` is this machine's clock, which a backoff's end is counted down against.
fn message(view: &JobView, now_ms: u64) -> Option<String> {
    match &view.message {
        Some(m) if !view.state.is_terminal() => Some(format!("ending ({m}): its processes are stopping")),
        Some(m) => Some(m.clone()),
        None => backoffs(view, now_ms).into_iter().next().or_else(|| waits_because(view).cloned()),
    }
}

/// The restarts the job backs off before (`retries.backoff_ms`), soonest first: the next
/// cycle's (gang restarts), or each actor's (`restart: "actor"`). A backoff whose end has gone
/// by on this machine's clock is over, and says nothing (as `kubectl` counts ages, against the
/// client's clock).
fn backoffs(view: &JobView, now_ms: u64) -> Vec<String> {
    let mut out: Vec<(u64, String)> = Vec::new();
    if let Some(at) = view.restart_at_ms.filter(|at| *at > now_ms) {
        out.push((at, restart_text(None, at - now_ms)));
    }
    for a in &view.actors {
        if let Some(at) = a.restart_at_ms.filter(|at| *at > now_ms) {
            out.push((at, restart_text(Some(&a.name), at - now_ms)));
        }
    }
    out.sort();
    out.into_iter().map(|(_, text)| text).collect()
}

/// "restarting in 5.2 s: …", of the job (its next cycle) or of one actor.
fn restart_text(actor: Option<&ActorId>, in_ms: u64) -> String {
    let who = actor.map(|a| format!("{a} ")).unwrap_or_default();
    format!("{who}restarting in {:.1} s: backing off after a failure (`retries.backoff_ms`)", in_ms as f64 / 1000.0)
}

/// An actor's state, and while it is RUNNING but its agent has not confirmed the start, that
/// it is still starting (kubectl's `ContainerCreating`): its process may not exist yet.
fn actor_state(a: &ActorView) -> String {
    match a.starting {
        true => format!("{} (starting)", a.state),
        false => a.state.to_string(),
    }
}

pub fn job_table(view: &JobView) -> String {
    let workers =
        if view.nproc_per_node > 1 { format!(" · {} workers per actor", view.nproc_per_node) } else { String::new() };
    let priority = if view.priority != 0 { format!(" · priority {}", view.priority) } else { String::new() };
    let rendezvous =
        view.rendezvous.as_ref().map(|m| format!(" · rendezvous {}:{}", m.addr, m.port)).unwrap_or_default();
    let mut out = format!(
        "job {} ({}) {} · cycle {}{rendezvous}{workers}{priority}\n",
        view.id, view.name, view.state, view.cycles
    );
    // GPUs only where some actor holds them: most jobs have none.
    let gpus = view.actors.iter().any(|a| !a.devices.is_empty());
    let gpu_header = if gpus { "  GPUS" } else { "" };
    let names: Vec<String> = view.actors.iter().map(|a| a.name.to_string()).collect();
    let actor = column(14, names.iter().map(String::as_str));
    let states: Vec<String> = view.actors.iter().map(actor_state).collect();
    let state = column(15, states.iter().map(String::as_str));
    let node = column(14, view.actors.iter().filter_map(|a| a.node.as_deref()));
    // With several workers each, an actor's rank is its node's (torchrun's GROUP_RANK).
    let rank_header = if view.nproc_per_node > 1 { "NODE RANK" } else { "RANK" };
    let rank_width = rank_header.len();
    let _ = writeln!(
        out,
        "  {:<actor$} {:<state$} {:<node$} {:>rank_width$} {:>7}{gpu_header}",
        "ACTOR", "STATE", "NODE", rank_header, "ATTEMPT"
    );
    for (a, state_text) in view.actors.iter().zip(&states) {
        let rank = a.rank.map_or("-".to_string(), |r| r.to_string());
        let devices = match (gpus, a.devices.is_empty()) {
            (false, _) => String::new(),
            (true, true) => "  -".to_string(),
            (true, false) => format!("  {}", a.devices),
        };
        let _ = writeln!(
            out,
            "  {:<actor$} {:<state$} {:<node$} {:>rank_width$} {:>7}{devices}",
            a.name.to_string(),
            state_text,
            a.node.as_deref().unwrap_or("-"),
            rank,
            a.attempt
        );
    }
    out
}

/// The job, its actors, its ledger and what its budgets have left; restarts it backs off
/// before are counted down against `now_ms`, this machine's clock.
pub fn job_summary(view: &JobView, now_ms: u64) -> String {
    let mut out = job_table(view);
    let backoffs = if view.message.is_none() { backoffs(view, now_ms) } else { Vec::new() };
    if backoffs.is_empty() {
        if let Some(m) = message(view, now_ms) {
            let _ = writeln!(out, "  {m}");
        }
    }
    for backoff in backoffs {
        let _ = writeln!(out, "  {backoff}");
    }
    if let Some(limit) = time_limit_text(view, now_ms) {
        let _ = writeln!(out, "  {limit}");
    }
    out.push_str(&ledger(view));
    out
}

/// When a job with a `run_timeout_ms` is stopped and fails unless it ends first, counted
/// down against `now_ms` as a backoff is.
fn time_limit_text(view: &JobView, now_ms: u64) -> Option<String> {
    let at = view.run_deadline_ms.filter(|at| *at > now_ms && view.message.is_none())?;
    let left_s = (at - now_ms) / 1000;
    let (h, m, s) = (left_s / 3600, left_s / 60 % 60, left_s % 60);
    Some(format!("time limit: stopped and failed in {h}:{m:02}:{s:02} unless it ends first (`run_timeout_ms`)"))
}

/// Of a FAILED job, the program's last failure (an attempt that failed on its own:
/// `user_error` or `non_retryable`), whose output a user reads first, as torchrun's error
/// summary names the root cause. None for other outcomes, or a job failed by its nodes.
pub fn program_failure(view: &JobView) -> Option<&LedgerEntry> {
    (view.state == JobState::Failed).then_some(())?;
    view.ledger.iter().rev().find(|e| matches!(e.cause, Cause::UserError | Cause::NonRetryable))
}

/// The most of one log line shown under a failed job: a line can be a MiB of progress bar.
const MAX_FAILURE_LINE_CHARS: usize = 400;

/// The last lines a failed attempt wrote (`tail`, as its log ends), under a line naming it
/// and where all of it is (`all`).
pub fn failure_tail(failed: &LedgerEntry, tail: &str, all: &str) -> String {
    if tail.is_empty() {
        return format!("  {} attempt {} wrote no output ({all})\n", failed.actor, failed.attempt);
    }
    let mut out = format!("  the last lines of {} attempt {} (all of it: {all}):\n", failed.actor, failed.attempt);
    for line in tail.lines() {
        let shown: String = line.chars().take(MAX_FAILURE_LINE_CHARS).collect();
        let cut = if shown.len() < line.len() { " …" } else { "" };
        let _ = writeln!(out, "    {shown}{cut}");
    }
    out
}

/// In place of `failure_tail`, for a failed attempt whose output `--logs` printed whole, each
/// line under `prefix`.
pub fn failure_printed_above(failed: &LedgerEntry, prefix: &str) -> String {
    format!("  the output of {} attempt {} is above, its lines under `{prefix}`\n", failed.actor, failed.attempt)
}

pub fn ledger(view: &JobView) -> String {
    let r = &view.remaining;
    let mut out = format!("  budgets left: user {}, system {}, preemption {}\n", r.user, r.system, r.preemption);
    if view.ledger.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "  {:<12} {:>4} {:>5} {:<10} {:<18} {:<11} {:<22} EVIDENCE",
        "ACTOR", "ATT", "CYCLE", "NODE", "CAUSE", "BUDGET", "LEFT u/s/p"
    );
    for e in &view.ledger {
        let r = &e.remaining;
        let left = format!("{}/{}/{}", left_cell(r.user), left_cell(r.system), left_cell(r.preemption));
        let _ = writeln!(
            out,
            "  {:<12} {:>4} {:>5} {:<10} {:<18} {:<11} {:<22} {}",
            e.actor.to_string(),
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

/// A budget in the ledger's narrow LEFT column: `∞` for unlimited, as the dashboard writes it
/// (`-1` is the job spec's spelling, and reads as a budget overdrawn).
fn left_cell(budget: Budget) -> String {
    match budget {
        Budget::Unlimited => "∞".to_string(),
        Budget::Left(n) => n.to_string(),
    }
}

/// A column as wide as its widest cell, and no narrower than `least`: a long job or node name
/// (names go up to 63 characters) pushes the columns after it along instead of into them.
fn column<'a>(least: usize, cells: impl IntoIterator<Item = &'a str>) -> usize {
    cells.into_iter().map(|c| c.chars().count()).max().unwrap_or(0).max(least)
}

/// Jobs, a line each; restarts they back off before are counted down against `now_ms`.
pub fn jobs_table(views: &[JobView], now_ms: u64) -> String {
    let id = column(10, views.iter().map(|v| v.id.as_str()));
    let name = column(20, views.iter().map(|v| v.name.as_str()));
    let mut out = format!(
        "{:<id$} {:<name$} {:<10} {:>8} {:>6} {:>8}  MESSAGE\n",
        "ID", "NAME", "STATE", "PRIORITY", "CYCLES", "RUNNING"
    );
    for v in views {
        let running = v.actors.iter().filter(|a| a.state == ActorState::Running).count();
        let message = message(v, now_ms).unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<id$} {:<name$} {:<10} {:>8} {:>6} {:>8}  {}",
            v.id,
            v.name,
            v.state.to_string(),
            v.priority,
            v.cycles,
            running,
            message
        );
    }
    out
}

/// The state, and who drained the node: `leaving` its own agent, `operator` the operator (a
/// DEAD node the operator drained comes back DRAINING); `unhealthy`: its agent cannot start
/// work; `suspect`: the head has not heard from it as it should (why, for both, is said below
/// the table).
fn node_state_text(n: &NodeView) -> String {
    let leaving = n.leaving && n.state == NodeState::Draining;
    let marks = [(leaving, "leaving"), (n.cordoned, "operator"), (n.problem.is_some(), "unhealthy")];
    let by: Vec<&str> = marks
        .into_iter()
        .chain([(n.suspect.is_some(), "suspect")])
        .filter_map(|(marked, name)| marked.then_some(name))
        .collect();
    let state = state_text(&n.state);
    if by.is_empty() {
        state
    } else {
        format!("{state} ({})", by.join(", "))
    }
}

pub fn nodes_table(nodes: &[NodeView]) -> String {
    let states: Vec<String> = nodes.iter().map(node_state_text).collect();
    // As wide as the widest state ("DRAINING (leaving, operator)" is rare), and no narrower than
    // "DRAINING (operator)".
    let width = column(19, states.iter().map(String::as_str));
    let name = column(14, nodes.iter().map(|n| n.name.as_str()));
    let addr = column(16, nodes.iter().map(|n| n.addr.as_str()));
    let resources: Vec<String> = nodes.iter().map(|n| n.resources.to_string()).collect();
    let allocated: Vec<String> = nodes.iter().map(allocated_text).collect();
    let held = column(28, resources.iter().map(String::as_str));
    let used = column(28, allocated.iter().map(String::as_str));
    let mut out = format!(
        "{:<name$} {:<width$} {:<addr$} {:<held$} {:<used$} LABELS\n",
        "NAME", "STATE", "ADDR", "RESOURCES", "ALLOCATED"
    );
    for (i, (n, state)) in nodes.iter().zip(states).enumerate() {
        let labels: Vec<String> = n.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            out,
            "{:<name$} {:<width$} {:<addr$} {:<held$} {:<used$} {}",
            n.name,
            state,
            n.addr,
            resources[i],
            allocated[i],
            labels.join(",")
        );
    }
    for n in nodes {
        if let Some(problem) = &n.problem {
            let _ = writeln!(out, "node {} is given no new work: {problem}", n.name);
        }
        if let Some(suspect) = &n.suspect {
            let _ = writeln!(out, "node {} is suspect: {}", n.name, suspect_text(suspect, !n.allocated.is_empty()));
        }
        if n.ports_left == Some(0) && n.state != NodeState::Dead {
            let more = if n.allocated.is_empty() { "" } else { " more" };
            let _ = writeln!(
                out,
                "node {} takes no{more} bundles: it has no rendezvous port left, as {}",
                n.name,
                ftdrive::scheduler::NO_PORT_LEFT_FIX
            );
        }
    }
    out
}

/// Why a node is suspect, and what happens next (DESIGN §3): room for the bundles it holds
/// is kept for them meanwhile.
fn suspect_text(s: &Suspect, holds_bundles: bool) -> String {
    let why = if s.link_lost { "its agent's connection dropped; nothing heard" } else { "no heartbeat" };
    let held = if holds_bundles { ". Room for its bundles is held meanwhile" } else { "" };
    let silent_s = s.silent_ms as f64 / 1000.0;
    let dead_in_s = s.dead_in_ms as f64 / 1000.0;
    if s.held {
        return format!(
            "{why} for {silent_s:.1} s, as from every node, so the head's own network is the likelier cause; \
             declared DEAD no sooner than {dead_in_s:.1} s after a node is heard from{held}"
        );
    }
    format!("{why} for {silent_s:.1} s; declared DEAD in {dead_in_s:.1} s unless heard from{held}")
}

/// What a node's bundles hold, with the GPU devices among them.
fn allocated_text(n: &NodeView) -> String {
    let mut allocated = n.allocated.to_string();
    if !n.devices_held.is_empty() {
        allocated.push_str(&format!(" (gpu {})", n.devices_held));
    }
    allocated
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftdrive::view::ActorView;

    fn node(name: &str, state: NodeState, cordoned: bool, leaving: bool) -> NodeView {
        NodeView {
            name: name.into(),
            state,
            resources: Default::default(),
            labels: Default::default(),
            allocated: Default::default(),
            addr: "127.0.0.1".into(),
            devices: Default::default(),
            devices_held: Default::default(),
            cordoned,
            leaving,
            problem: None,
            suspect: None,
            ports_left: Some(1000),
            metrics_url: None,
        }
    }

    #[test]
    fn the_nodes_table_says_who_drained_a_node_and_stays_aligned() {
        let nodes = [
            node("n1", NodeState::Alive, false, false),
            node("n2", NodeState::Draining, true, false),
            node("n3", NodeState::Draining, false, true),
            node("n4", NodeState::Draining, true, true),
            node("n5", NodeState::Dead, true, true),
        ];
        let table = nodes_table(&nodes);
        let lines: Vec<&str> = table.lines().collect();
        let states: Vec<&str> = lines[1..].iter().map(|l| l[15..l.find("127.").unwrap()].trim_end()).collect();
        assert_eq!(
            states,
            ["ALIVE", "DRAINING (operator)", "DRAINING (leaving)", "DRAINING (leaving, operator)", "DEAD (operator)"],
            "a DEAD machine is no longer leaving; only the operator's mark outlasts it:\n{table}"
        );
        let addr_at = lines[0].find("ADDR").unwrap();
        assert!(lines[1..].iter().all(|l| l.find("127.") == Some(addr_at)), "{table}");
    }

    #[test]
    fn a_suspect_node_is_marked_and_said_why_below_the_table() {
        let mut cut = node("n1", NodeState::Alive, false, false);
        cut.suspect = Some(Suspect { link_lost: true, silent_ms: 1_200, dead_in_ms: 1_800, held: false });
        cut.allocated = ftdrive::resources::Resources::units(&[("cpu", 1)]);
        let mut late = node("n2", NodeState::Draining, true, false);
        late.suspect = Some(Suspect { link_lost: false, silent_ms: 2_400, dead_in_ms: 600, held: false });
        let mut quiet = node("n4", NodeState::Alive, false, false);
        quiet.suspect = Some(Suspect { link_lost: false, silent_ms: 9_000, dead_in_ms: 3_000, held: true });
        let table = nodes_table(&[cut, late, node("n3", NodeState::Alive, false, false), quiet]);
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[1].contains(" ALIVE (suspect) ") && lines[2].contains(" DRAINING (operator, suspect) "),
            "{table}"
        );
        assert!(lines[3].contains(" ALIVE ") && !lines[3].contains("suspect"), "{table}");
        assert_eq!(
            &lines[5..],
            [
                "node n1 is suspect: its agent's connection dropped; nothing heard for 1.2 s; declared DEAD in 1.8 s \
                 unless heard from. Room for its bundles is held meanwhile",
                "node n2 is suspect: no heartbeat for 2.4 s; declared DEAD in 0.6 s unless heard from",
                "node n4 is suspect: no heartbeat for 9.0 s, as from every node, so the head's own network is the \
                 likelier cause; declared DEAD no sooner than 3.0 s after a node is heard from"
            ],
            "{table}"
        );
    }

    #[test]
    fn a_node_with_no_port_left_is_said_to_take_no_bundle_and_what_to_change() {
        let mut empty = node("n1", NodeState::Alive, false, false);
        empty.ports_left = Some(0);
        let mut full = node("n2", NodeState::Alive, false, false);
        full.ports_left = Some(0);
        full.allocated = ftdrive::resources::Resources::units(&[("cpu", 1)]);
        let mut dead = node("n3", NodeState::Dead, false, false);
        dead.ports_left = Some(0);
        let mut unsaid = node("n4", NodeState::Alive, false, false);
        unsaid.ports_left = None;
        let table = nodes_table(&[empty, full, dead, unsaid]);
        let notes: Vec<&str> = table.lines().skip(5).collect();
        let fix = ftdrive::scheduler::NO_PORT_LEFT_FIX;
        assert_eq!(
            notes,
            [
                format!("node n1 takes no bundles: it has no rendezvous port left, as {fix}"),
                format!("node n2 takes no more bundles: it has no rendezvous port left, as {fix}"),
            ],
            "a DEAD node takes nothing anyway, and a head that did not say is not guessed at:\n{table}"
        );
    }

    fn job(state: &str, message: Option<&str>) -> JobView {
        serde_json::from_value(serde_json::json!({
            "id": "j1", "name": "train", "state": state, "cycles": 1, "min_nodes": 1, "max_nodes": 1,
            "submit_ms": 0, "message": message, "infeasible": null,
            "remaining": {"user": 0, "system": 0, "preemption": 0},
            "actors": [], "ledger": [], "placement_groups": []
        }))
        .expect("a job view")
    }

    #[test]
    fn a_job_backing_off_says_when_it_restarts_until_the_backoff_is_over() {
        let mut gang = job("RUNNING", None);
        gang.restart_at_ms = Some(10_000);
        gang.waiting = Some("waiting for capacity".into());
        let table = jobs_table(&[gang.clone()], 4_800);
        assert!(table.contains("  restarting in 5.2 s: backing off after a failure (`retries.backoff_ms`)"), "{table}");
        let over = jobs_table(&[gang.clone()], 10_000);
        assert!(over.trim_end().ends_with("  waiting for capacity"), "a backoff gone by says nothing: {over}");
        let mut actors = job("RUNNING", None);
        let actor = |name: &str, at: Option<u64>| -> ActorView {
            serde_json::from_value(serde_json::json!({
                "name": name, "state": "SCHEDULING", "node": null, "rank": null, "attempt": 1,
                "role": "active", "restart_at_ms": at
            }))
            .expect("an actor view")
        };
        actors.actors = vec![actor("j1/0", Some(9_000)), actor("j1/1", None), actor("j1/2", Some(3_000))];
        let summary = job_summary(&actors, 1_000);
        let said: Vec<&str> = summary.lines().filter(|l| l.contains("restarting")).collect();
        assert_eq!(
            said,
            [
                "  j1/2 restarting in 2.0 s: backing off after a failure (`retries.backoff_ms`)",
                "  j1/0 restarting in 8.0 s: backing off after a failure (`retries.backoff_ms`)"
            ],
            "{summary}"
        );
        let ended = job_summary(&job("RUNNING", Some("stopped by the user")), 1_000);
        assert!(!ended.contains("restarting"), "{ended}");
    }

    #[test]
    fn a_job_inside_its_stop_grace_says_it_is_ending_not_that_it_stopped() {
        let ending = jobs_table(&[job("RUNNING", Some("stopped by the user"))], 0);
        assert!(
            ending.contains("RUNNING") && ending.contains("ending (stopped by the user): its processes are stopping"),
            "{ending}"
        );
        let stopped = jobs_table(&[job("STOPPED", Some("stopped by the user"))], 0);
        assert!(stopped.trim_end().ends_with("  stopped by the user"), "{stopped}");
        let summary =
            job_summary(&job("RUNNING", Some("j1/0 failed (user_error) and the user retry budget is exhausted")), 0);
        assert!(summary.contains("ending (j1/0 failed (user_error)"), "{summary}");
    }

    #[test]
    fn the_jobs_table_shows_each_jobs_priority_under_its_header() {
        let mut urgent = job("PENDING", None);
        urgent.priority = -5;
        let table = jobs_table(&[urgent, job("RUNNING", None)], 0);
        let lines: Vec<&str> = table.lines().collect();
        let end = lines[0].find("PRIORITY").unwrap() + "PRIORITY".len();
        let column: Vec<&str> = lines.iter().map(|l| l[..end].rsplit(' ').next().unwrap()).collect();
        assert_eq!(column, ["PRIORITY", "-5", "0"], "{table}");
        let mut urgent = job("PENDING", None);
        urgent.priority = 7;
        assert!(job_table(&urgent).starts_with("job j1 (train) PENDING · cycle 1 · priority 7\n"));
        assert!(job_table(&job("PENDING", None)).starts_with("job j1 (train) PENDING · cycle 1\n"), "0 goes unsaid");
    }

    #[test]
    fn the_ledger_writes_an_unlimited_budget_as_infinity_not_minus_one() {
        let mut view = job("FAILED", None);
        view.remaining =
            serde_json::from_value(serde_json::json!({"user": -1, "system": 3, "preemption": -1})).unwrap();
        view.ledger = serde_json::from_value(serde_json::json!([{
            "actor": "j1/0", "rank": 0, "attempt": 1, "cycle": 1, "node": "n1", "start_ms": 0, "end_ms": 5,
            "exit_code": 7, "signal": null, "cause": "user_error", "evidence": "process exited with code 7",
            "budget": "user", "remaining": {"user": -1, "system": 3, "preemption": 0}
        }]))
        .unwrap();
        let text = ledger(&view);
        assert!(text.starts_with("  budgets left: user unlimited, system 3, preemption unlimited\n"), "{text}");
        let row = text.lines().last().unwrap();
        assert!(row.contains(" ∞/3/0 ") && !row.contains("-1"), "{text}");
    }

    /// A follower's table: an actor the new cycle left out shows no rank, so the rank is not
    /// shown twice once its new holder starts.
    #[test]
    fn a_followed_cycle_takes_the_rank_from_whoever_it_left_out() {
        let mut view = job("RUNNING", None);
        view.actors = serde_json::from_value(serde_json::json!([
            {"name": "j1/0", "state": "RUNNING", "node": "n1", "rank": 0, "attempt": 1, "role": "active"},
            {"name": "j1/1", "state": "SCHEDULING", "node": "n2", "rank": 1, "attempt": 1, "role": "active"},
            {"name": "j1/2", "state": "SCHEDULING", "node": "n3", "rank": 2, "attempt": 1, "role": "active"}
        ]))
        .unwrap();
        let ranks = vec![view.actors[0].name.clone(), view.actors[2].name.clone()];
        let job = JobId::new("j1");
        let formed = JobEvent::CycleFormed { cycle: 2, world_size: 2, master_addr: "n1".into(), master_port: 1, ranks };
        apply(&mut view, &Event::Job { job: job.clone(), detail: formed });
        let rank = |v: &JobView| v.actors.iter().map(|a| a.rank).collect::<Vec<_>>();
        assert_eq!(rank(&view), [Some(0), None, Some(2)], "members keep theirs until they start");
        let name = view.actors[2].name.clone();
        let started = JobEvent::Transition {
            actor: name,
            from: ActorState::Scheduling,
            to: ActorState::Running,
            attempt: 2,
            cycle: 2,
            rank: Some(1),
            node: None,
        };
        apply(&mut view, &Event::Job { job, detail: started });
        assert_eq!(rank(&view), [Some(0), None, Some(1)]);
        assert_eq!(view.cycles, 2);
    }

    /// An actor that lost its node waits with none, as `status` shows it, not on the dead one.
    #[test]
    fn a_followed_actor_that_waits_again_shows_no_node() {
        let mut view = job("RUNNING", None);
        view.actors = serde_json::from_value(serde_json::json!([
            {"name": "j1/0", "state": "FAILING", "node": "n2", "rank": 0, "attempt": 1, "role": "active"}
        ]))
        .unwrap();
        let waits = JobEvent::Transition {
            actor: view.actors[0].name.clone(),
            from: ActorState::Failing,
            to: ActorState::Scheduling,
            attempt: 1,
            cycle: 1,
            rank: None,
            node: None,
        };
        apply(&mut view, &Event::Job { job: JobId::new("j1"), detail: waits });
        assert_eq!((view.actors[0].state, view.actors[0].node.as_deref()), (ActorState::Scheduling, None));
    }

    /// With several workers per actor, an actor's rank is its node's: the table and the
    /// follower's lines say "node rank" and which worker ranks it holds, as torchrun's RANK is
    /// a worker's.
    #[test]
    fn with_several_workers_each_a_rank_is_said_to_be_the_nodes() {
        let mut view = job("RUNNING", None);
        view.nproc_per_node = 8;
        view.actors = serde_json::from_value(serde_json::json!([
            {"name": "j1/0", "state": "RUNNING", "node": "n1", "rank": 1, "attempt": 1, "role": "active"}
        ]))
        .unwrap();
        let table = job_table(&view);
        let lines: Vec<&str> = table.lines().collect();
        let header_end = lines[1].find("NODE RANK").unwrap() + "NODE RANK".len();
        assert_eq!(lines[2].get(header_end - 1..header_end), Some("1"), "{table}");
        assert!(snapshot_lines(&view).contains("j1/0 RUNNING on n1 node rank 1 (ranks 8-15)"));
        let formed =
            JobEvent::CycleFormed { cycle: 2, world_size: 3, master_addr: "n1".into(), master_port: 1, ranks: vec![] };
        let text = job_event_text(&JobId::new("j1"), &formed, 8, 0).unwrap();
        assert_eq!(text, "cycle 2 formed: 3 node(s) of 8 workers (WORLD_SIZE 24), rendezvous n1:1");
        assert!(job_event_text(&JobId::new("j1"), &formed, 1, 0).unwrap().contains("3 rank(s)"));
    }

    /// An end heard of late (its agent or the head away) is shown when it happened, as the
    /// ledger has it, not when its event came, with what it cost.
    #[test]
    fn an_attempts_end_is_shown_when_it_happened_with_its_charge() {
        let ended = |cause: &str, budget: &str, evidence: &str| {
            let entry: ftdrive::driver::LedgerEntry = serde_json::from_value(serde_json::json!({
                "actor": "j1/0", "rank": 0, "attempt": 1, "cycle": 1, "node": "n1", "start_ms": 1_000,
                "end_ms": 6_000, "exit_code": 0, "signal": null, "cause": cause,
                "evidence": evidence, "budget": budget,
                "remaining": {"user": 0, "system": 4, "preemption": -1}
            }))
            .unwrap();
            let event = Event::Job { job: JobId::new("j1"), detail: JobEvent::Ledger { entry } };
            event_line(&EventLine { t_ms: 9_250, event }, 0, 1).unwrap()
        };
        assert_eq!(
            ended("completed", "none", "process exited with code 0"),
            "     6.0s  j1/0 attempt 1 ended: completed, nothing charged — process exited with code 0"
        );
        assert_eq!(
            ended("node_lost", "system", "node n1 missed heartbeats"),
            "     6.0s  j1/0 attempt 1 ended: node_lost, charged to the system budget (4 left) — node n1 missed heartbeats"
        );
        assert!(ended("preempted", "preemption", "x").contains("charged to the preemption budget (unlimited left)"));
    }

    /// A follower is told how long a restart waits, counted from the event (the head's clock),
    /// and its view knows it from then on.
    #[test]
    fn a_backoff_is_a_line_and_reaches_the_followed_view() {
        let mut view = job("RUNNING", None);
        for (actor, until_ms, said) in [
            (None, 12_500, "     4.0s  restarting in 8.5 s: backing off after a failure (`retries.backoff_ms`)"),
            (
                Some("j1/0"),
                6_000,
                "     4.0s  j1/0 restarting in 2.0 s: backing off after a failure (`retries.backoff_ms`)",
            ),
        ] {
            let actor = actor.map(|a| ActorId::new(JobId::new("j1"), a[3..].parse().unwrap()));
            let event = Event::Job { job: JobId::new("j1"), detail: JobEvent::BackingOff { actor, until_ms } };
            let line = EventLine { t_ms: 4_000, event };
            assert_eq!(event_line(&line, 0, 1).as_deref(), Some(said));
            view.actors = serde_json::from_value(serde_json::json!([
                {"name": "j1/0", "state": "SCHEDULING", "node": null, "rank": null, "attempt": 1, "role": "active"}
            ]))
            .unwrap();
            apply(&mut view, &line.event);
        }
        assert_eq!((view.restart_at_ms, view.actors[0].restart_at_ms), (Some(12_500), Some(6_000)));
    }

    /// A running job with a time limit says when it will be stopped; once ending, or past the
    /// time on this machine's clock, it says nothing of it.
    #[test]
    fn a_time_limit_is_counted_down_in_the_jobs_summary() {
        let mut view = job("RUNNING", None);
        view.run_deadline_ms = Some(3_723_000 + 10_000);
        let said = "  time limit: stopped and failed in 1:02:03 unless it ends first (`run_timeout_ms`)\n";
        assert!(job_summary(&view, 10_000).contains(said), "{}", job_summary(&view, 10_000));
        assert!(!job_summary(&view, 3_733_000).contains("time limit"), "its time has come");
        view.message = Some("stopped by the user".into());
        assert!(!job_summary(&view, 10_000).contains("time limit"), "an ending job");
    }

    /// An actor whose start its agent has not confirmed says so in the table, and the columns
    /// after it stay under their headers.
    #[test]
    fn a_start_not_confirmed_yet_is_shown_as_starting() {
        let mut view = job("RUNNING", None);
        view.actors = serde_json::from_value(serde_json::json!([
            {"name": "j1/0", "state": "RUNNING", "node": "n1", "rank": 0, "attempt": 1, "role": "active", "starting": true},
            {"name": "j1/1", "state": "RUNNING", "node": "n2", "rank": 1, "attempt": 1, "role": "active"}
        ]))
        .unwrap();
        let table = job_table(&view);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[2].starts_with("  j1/0           RUNNING (starting) n1"), "{table}");
        assert!(lines[3].starts_with("  j1/1           RUNNING            n2"), "{table}");
        let at = lines[1].find("NODE").unwrap();
        assert_eq!((lines[2].get(at..at + 2), lines[3].get(at..at + 2)), (Some("n1"), Some("n2")), "{table}");
        // A follower's snapshot lines say nothing of it: no line is printed when it comes.
        let snapshot = snapshot_lines(&view);
        assert!(snapshot.contains("j1/0 RUNNING on n1 rank 0 (attempt 1)"), "{snapshot}");
        // A follower's live table takes it from the events.
        let name = view.actors[0].name.clone();
        let confirmed = JobEvent::StartConfirmed { actor: name.clone(), attempt: 1, node: "n1".into() };
        apply(&mut view, &Event::Job { job: JobId::new("j1"), detail: confirmed });
        assert!(!job_table(&view).contains("(starting)"), "{}", job_table(&view));
        let restarted = JobEvent::Transition {
            actor: name,
            from: ActorState::Scheduling,
            to: ActorState::Running,
            attempt: 2,
            cycle: 2,
            rank: Some(0),
            node: Some("n1".into()),
        };
        apply(&mut view, &Event::Job { job: JobId::new("j1"), detail: restarted });
        assert!(job_table(&view).contains("j1/0           RUNNING (starting) n1"), "{}", job_table(&view));
    }

    /// A failed job's summary ends with what its program's last failure wrote: its own
    /// failure, not a peer stopped with it, nor a node's loss.
    #[test]
    fn the_programs_last_failure_is_the_one_whose_output_is_shown() {
        let entry = |actor: &str, attempt: u32, cause: &str| -> LedgerEntry {
            serde_json::from_value(serde_json::json!({
                "actor": actor, "rank": 0, "attempt": attempt, "cycle": attempt, "node": "n1", "start_ms": 0,
                "end_ms": 1, "exit_code": 1, "signal": null, "cause": cause, "evidence": "",
                "budget": "user", "remaining": {"user": 0, "system": 0, "preemption": 0}
            }))
            .expect("a ledger entry")
        };
        let mut failed = job("FAILED", Some("j1/1 failed"));
        failed.ledger = vec![
            entry("j1/0", 1, "user_error"),
            entry("j1/1", 1, "collateral"),
            entry("j1/1", 2, "non_retryable"),
            entry("j1/0", 2, "collateral"),
            entry("j1/2", 1, "node_lost"),
        ];
        let last = program_failure(&failed).map(|e| (e.actor.to_string(), e.attempt));
        assert_eq!(last, Some(("j1/1".to_string(), 2)));
        failed.state = JobState::Succeeded;
        assert!(program_failure(&failed).is_none(), "only of a failed job");
        failed.state = JobState::Failed;
        failed.ledger.retain(|e| e.cause == Cause::NodeLost);
        assert!(program_failure(&failed).is_none(), "a job its nodes failed");

        let one = entry("j1/1", 2, "non_retryable");
        let long = "x".repeat(MAX_FAILURE_LINE_CHARS + 10);
        let shown = failure_tail(&one, &format!("first\n{long}\n"), "ALL");
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines[0], "  the last lines of j1/1 attempt 2 (all of it: ALL):");
        assert_eq!(lines[1], "    first");
        assert_eq!(lines[2], format!("    {} …", "x".repeat(MAX_FAILURE_LINE_CHARS)));
        assert_eq!(failure_tail(&one, "", "ALL"), "  j1/1 attempt 2 wrote no output (ALL)\n");
    }

    /// Names go up to 63 characters: a long one widens its column instead of pushing its row's
    /// cells out from under their headers.
    #[test]
    fn long_names_keep_every_column_under_its_header() {
        let long = "a".repeat(63);
        let mut named = job("RUNNING", None);
        named.name = long.clone();
        named.actors = serde_json::from_value(serde_json::json!([
            {"name": "j1/0", "state": "RUNNING", "node": long, "rank": 0, "attempt": 1, "role": "active"},
            {"name": "j1/1", "state": "RUNNING", "node": "n2", "rank": 1, "attempt": 1, "role": "active"}
        ]))
        .unwrap();
        let under = |table: &str, header: &str, cell: &str| {
            let lines: Vec<&str> = table.lines().filter(|l| !l.starts_with("job ")).collect();
            let at = lines[0].find(header).unwrap();
            for line in &lines[1..] {
                assert_eq!(line.get(at..at + cell.len()), Some(cell), "{header}:\n{table}");
            }
        };
        let mut short = job("RUNNING", None);
        short.id = "j2".into();
        under(&jobs_table(&[named.clone(), short], 0), "STATE", "RUNNING");
        under(&job_table(&named), "RANK", "   ");
        let mut far = node("n1", NodeState::Alive, false, false);
        far.name = long;
        let nodes = nodes_table(&[far, node("n2", NodeState::Alive, false, false)]);
        under(&nodes, "ADDR", "127.0.0.1");
    }
}
