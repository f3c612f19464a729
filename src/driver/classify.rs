//! How an attempt ended, and what that means (DESIGN §6): the cause table, and the one entry
//! point, [`classify`], from an attempt's end to its verdict — cause, evidence, and the budget
//! it is charged to. Nothing else in ftdrive decides a cause.
//!
//! Adding a cause is one variant of [`Cause`], one row of [`CAUSES`], one arm in [`classify`]
//! (or in [`stop_verdict`] for a new reason to stop), and one scenario file; the recipe is in
//! `docs/structure.md`.

use super::actor::{Run, StopReason};
use super::budget::{BudgetKind, Charge};
use super::{CloseReason, Loss};
use crate::ids::{ActorId, NodeId};
use crate::protocol::{one_line, ExitStatus};
use crate::spec::RetryPolicy;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Why an attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    Completed,
    NonRetryable,
    UserError,
    SpawnFailed,
    Preempted,
    NodeLost,
    Collateral,
    MembershipChange,
    Stopped,
}

/// One row of the cause table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CauseRow {
    pub cause: Cause,
    /// The budget it is charged to (before `single_budget`).
    pub budget: BudgetKind,
    /// Fails the job at once, whatever the budgets say.
    pub fails_job: bool,
    /// The actor itself failed (a restart follows), rather than being stopped by the driver.
    pub actor_failed: bool,
}

/// The most of a program's name a spawn failure's evidence repeats.
const MAX_PROGRAM_CHARS: usize = 200;

const fn row(cause: Cause, budget: BudgetKind, fails_job: bool, actor_failed: bool) -> CauseRow {
    CauseRow { cause, budget, fails_job, actor_failed }
}

/// DESIGN §6, in the order of [`Cause`]'s variants.
pub const CAUSES: [CauseRow; 9] = [
    row(Cause::Completed, BudgetKind::None, false, false),
    row(Cause::NonRetryable, BudgetKind::None, true, true),
    row(Cause::UserError, BudgetKind::User, false, true),
    row(Cause::SpawnFailed, BudgetKind::None, true, true),
    row(Cause::Preempted, BudgetKind::Preemption, false, true),
    row(Cause::NodeLost, BudgetKind::System, false, true),
    row(Cause::Collateral, BudgetKind::None, false, false),
    row(Cause::MembershipChange, BudgetKind::None, false, false),
    row(Cause::Stopped, BudgetKind::None, false, false),
];

impl Cause {
    pub fn row(self) -> &'static CauseRow {
        let row = &CAUSES[self as usize];
        debug_assert_eq!(row.cause, self, "CAUSES is in the order of Cause");
        row
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = serde_json::to_value(self).expect("cause serializes");
        f.write_str(text.as_str().expect("cause is a string"))
    }
}

/// A peer of the same cycle lost with a node that went silent — perhaps what a crash reacted to.
#[derive(Clone, Copy, Debug)]
pub struct PeerLoss<'a> {
    pub peer: &'a ActorId,
    pub node: &'a NodeId,
    pub silent_since: Instant,
    /// AT-2: lost across a head restart, when unknown.
    pub unheard_since_restart: bool,
}

/// How an attempt came to its end, as the driver observed it.
#[derive(Clone, Copy, Debug)]
pub enum Ending<'a> {
    /// The agent reported how the process ended. A non-zero exit is first classified with
    /// `reacting_to: None`; if it waited in FAILING for its peers, it is classified again with
    /// the peer loss that came first, if any.
    Exited { status: &'a ExitStatus, reacting_to: Option<PeerLoss<'a>> },
    /// The process could not be started; `node_fault`: because of the node, not the program,
    /// unhealthy since then.
    SpawnFailed { message: &'a str, node_fault: Option<Instant> },
    /// Its node was lost before an exit was reported.
    NodeLost(&'a Loss),
    /// It had exited 0 and waited for its peers; the driver ended it for this reason.
    EndedAfterSuccess(&'a StopReason),
    /// Every rank of its cycle exited 0.
    GangSucceeded,
}

/// What an attempt's end means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub cause: Cause,
    /// A sentence saying what was observed.
    pub evidence: String,
    /// The budget to charge (`None`: free).
    pub budget: BudgetKind,
    /// The machine-level fault behind a `node_lost` or `preempted` end, which every attempt
    /// it ended shares: it is charged once (FC-1 in `failure.rs`).
    pub fault: Option<Fault>,
}

/// One node's loss (when it went silent) or one drain of it (its deadline).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Fault {
    pub node: NodeId,
    pub at: Instant,
    /// The node went silent at `at` (its loss), rather than a drain's deadline or a fence:
    /// losses of several nodes can be one incident (FC-2 in `failure.rs`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub silence: bool,
}

/// What `classify` needs to know about the job.
pub struct JobContext<'a> {
    pub policy: &'a RetryPolicy,
    /// Workers per command actor: evidence names the worker when there are several.
    pub nproc_per_node: u32,
    /// The program (`command[0]`), named when it cannot start.
    pub program: &'a str,
    /// Once the job is closing its outcome is decided: nothing is charged any more.
    pub closing: Option<CloseReason>,
}

/// The one entry point: from an attempt's end to its verdict.
pub fn classify(job: &JobContext, run: &Run, ending: Ending) -> Verdict {
    let (cause, evidence) = match ending {
        Ending::Exited { status, reacting_to } => exited(job, run, status, reacting_to),
        Ending::SpawnFailed { message, node_fault: None } => {
            (Cause::SpawnFailed, format!("could not start `{}`: {message}", one_line(job.program, MAX_PROGRAM_CHARS)))
        }
        Ending::SpawnFailed { message, node_fault: Some(_) } => node_could_not_start(run, message),
        Ending::NodeLost(loss) => lost_with_node(run, loss),
        Ending::EndedAfterSuccess(reason) => stop_verdict(reason, "; it had exited 0"),
        Ending::GangSucceeded => (Cause::Completed, succeeded(job.nproc_per_node)),
    };
    let evidence = match unlogged(run, &ending) {
        Some(note) => format!("{evidence}; {note}"),
        None => evidence,
    };
    Verdict { fault: fault_of(run, &ending, cause), ..charge_to(job, cause, evidence) }
}

/// What the attempt's log never took at its end, said in the ledger since the log cannot:
/// from its exit as reported, or as kept while it waited for its gang after exiting 0.
fn unlogged<'a>(run: &'a Run, ending: &Ending<'a>) -> Option<&'a str> {
    let status = match ending {
        Ending::Exited { status, .. } => Some(*status),
        Ending::GangSucceeded | Ending::EndedAfterSuccess(_) => run.exited.as_ref().map(|(status, _)| status),
        Ending::SpawnFailed { .. } | Ending::NodeLost(_) => None,
    };
    status?.unlogged.as_deref()
}

/// The node-level fault a `node_lost` or `preempted` end came from: the drain that stopped
/// it, else the loss it was lost with.
fn fault_of(run: &Run, ending: &Ending, cause: Cause) -> Option<Fault> {
    if !matches!(cause, Cause::NodeLost | Cause::Preempted) {
        return None;
    }
    match (&run.stop, ending) {
        (Some(StopReason::Drain { node, deadline, .. }), _) => {
            Some(Fault { node: node.clone(), at: *deadline, silence: false })
        }
        (_, Ending::NodeLost(loss)) => Some(Fault { node: loss.node.clone(), at: loss.silent_since, silence: true }),
        (_, Ending::SpawnFailed { node_fault: Some(since), .. }) => {
            Some(Fault { node: run.node.clone(), at: *since, silence: false })
        }
        // On the agent's clock: it tells one fence of that node from another, which is all
        // FC-1 asks of it.
        (_, Ending::Exited { status, .. }) => status.fence.map(|ms| Fault {
            node: run.node.clone(),
            at: Instant::from_ms(ms.get().into()),
            silence: false,
        }),
        _ => None,
    }
}

/// The budget a cause costs this job, with the evidence saying so when it costs nothing.
fn charge_to(job: &JobContext, cause: Cause, evidence: String) -> Verdict {
    let table = cause.row().budget;
    match job.closing {
        Some(reason) if table != BudgetKind::None => Verdict {
            cause,
            evidence: format!("{evidence}; not charged: the job was already closing ({reason})"),
            budget: BudgetKind::None,
            fault: None,
        },
        _ if table != BudgetKind::None && job.policy.single_budget => {
            Verdict { cause, evidence, budget: BudgetKind::User, fault: None }
        }
        _ => Verdict { cause, evidence, budget: table, fault: None },
    }
}

fn exited(job: &JobContext, run: &Run, status: &ExitStatus, reacting_to: Option<PeerLoss>) -> (Cause, String) {
    let node = &run.node;
    if let Some(reason) = &run.stop {
        return match reason {
            StopReason::Collateral { because, drained: None, .. } if failed_before_its_stop(status) => {
                let who = process_name(job.nproc_per_node, run.rank, status);
                // Free all the same: one failure of a gang restarts it once (FC-1's spirit),
                // and which of two ranks failing together is "first" is the head's order.
                let evidence = format!("{who} {status} on {node}{}", saying(status));
                (Cause::Collateral, format!("{evidence} before its gang's stop reached it, as {because} failed"))
            }
            _ => stop_verdict(reason, ""),
        };
    }
    if status.success() {
        return (Cause::Completed, succeeded(job.nproc_per_node));
    }
    let who = process_name(job.nproc_per_node, run.rank, status);
    let saying = saying(status);
    if let Some(code) = status.code.filter(|c| job.policy.non_retryable_exit_codes.contains(c)) {
        return (
            Cause::NonRetryable,
            format!("{who} exited with code {code} on {node}{saying}, listed in non_retryable_exit_codes"),
        );
    }
    if run.draining {
        return (Cause::Preempted, format!("{} and the {who} {status}", run.drained_by.describe(node)));
    }
    if status.fence.is_some() {
        return (
            Cause::NodeLost,
            format!(
                "the agent on {node} heard nothing from the head for its --fence-after-ms and stopped the {who} \
                 (it {status}): the node was cut off"
            ),
        );
    }
    if status.orphaned {
        // Its own supervisor sent the signal: "not sent by the agent", as the status reads
        // it, would say the program was killed by someone else (a user error elsewhere).
        let how = match (status.code, status.signal) {
            (None, Some(signal)) => format!("with signal {signal}"),
            _ => format!("(it {status})"),
        };
        return (
            Cause::NodeLost,
            format!(
                "the agent on {node} went away and none came back within the re-attach grace: the {who}'s \
                 supervisor ended it {how}"
            ),
        );
    }
    if status.signalled_by_agent {
        return (
            Cause::NodeLost,
            format!("the agent on {node} ended the {who} unasked (it {status}): the agent shut down"),
        );
    }
    let evidence = format!("{who} {status} on {node}{saying}");
    match reacting_to {
        Some(root) if root.unheard_since_restart => (
            Cause::Collateral,
            format!(
                "{evidence}; {}'s node {} was lost unheard across a head restart, perhaps first",
                root.peer, root.node
            ),
        ),
        Some(root) => (
            Cause::Collateral,
            // Relative to this attempt's start: a daemon's clock reads as a date, not a time.
            format!(
                "{evidence}; {}'s node {} had gone silent first, {} ms into this attempt",
                root.peer,
                root.node,
                root.silent_since.ms_since(run.started)
            ),
        ),
        None => (Cause::UserError, evidence),
    }
}

/// A failure that came before the stop the driver sent: the agent's supervisor says no stop
/// reached the process first (a dead supervisor says nothing, so it is read as stopped).
fn failed_before_its_stop(status: &ExitStatus) -> bool {
    !status.success() && !status.signalled_by_agent && !status.supervisor_lost && !status.orphaned
}

fn succeeded(nproc: u32) -> String {
    match nproc {
        1 => "process exited with code 0".to_string(),
        n => format!("all {n} workers exited with code 0"),
    }
}

/// `, saying "ValueError: loss is NaN"` when the program left its own words on its failure.
fn saying(status: &ExitStatus) -> String {
    status.error.as_ref().map(|error| format!(", saying \"{error}\"")).unwrap_or_default()
}

/// "process", or for one of several workers "worker 3 (rank 11)".
fn process_name(nproc: u32, group_rank: u32, status: &ExitStatus) -> String {
    match status.worker {
        Some(local) if nproc > 1 => format!("worker {local} (rank {})", group_rank * nproc + local),
        _ => "process".to_string(),
    }
}

fn lost_with_node(run: &Run, loss: &Loss) -> (Cause, String) {
    let lost_cause = if loss.draining || loss.preemptible || run.draining { Cause::Preempted } else { Cause::NodeLost };
    match &run.stop {
        // Stopped because a peer failed — but this node went silent before that failure (or
        // perhaps did, across a head restart: AT-2): the loss came first, and the peer was
        // reacting to it.
        Some(StopReason::Collateral { at, .. }) if loss.unheard_since_restart || loss.silent_since <= *at => {
            (lost_cause, loss.evidence.clone())
        }
        Some(reason) => stop_verdict(reason, &format!("; {} before the exit was reported", loss.evidence)),
        None => (lost_cause, loss.evidence.clone()),
    }
}

/// The node could not start the attempt (its agent's state dir took no write, a fork failed):
/// the node's failure, charged as a lost node's is, since the agent that cannot start work
/// has failed as a crashed one has; the node takes nothing new until its agent recovers
/// (AG-6). One the driver had already asked to stop ends as that stop.
fn node_could_not_start(run: &Run, message: &str) -> (Cause, String) {
    match &run.stop {
        Some(reason) => stop_verdict(reason, ""),
        None => (Cause::NodeLost, format!("node {} could not start the attempt: {message}", run.node)),
    }
}

/// The cause and evidence of an attempt the driver asked to stop.
fn stop_verdict(reason: &StopReason, suffix: &str) -> (Cause, String) {
    let (cause, text) = match reason {
        StopReason::Collateral { because, drained: None, .. } => {
            (Cause::Collateral, format!("stopped with its gang after {because} failed"))
        }
        StopReason::Collateral { because, drained: Some(node), .. } => {
            (Cause::Collateral, format!("stopped with its gang after {because} was moved off draining node {node}"))
        }
        StopReason::JobFailed { because } => (Cause::Collateral, format!("stopped because the job failed: {because}")),
        StopReason::MembershipChange { from, to } => {
            (Cause::MembershipChange, format!("stopped to grow the world from {from} to {to} ranks"))
        }
        StopReason::Drain { node, deadline_ms, by, .. } => {
            (Cause::Preempted, format!("{} (deadline in {deadline_ms} ms); the process was stopped", by.describe(node)))
        }
        StopReason::User => (Cause::Stopped, "stopped by the user".to_string()),
    };
    (cause, format!("{text}{suffix}"))
}

/// Why the job failed because of one actor's attempt.
pub fn fatal_message(actor: &ActorId, cause: Cause, charge: Charge) -> String {
    match charge {
        Charge::Exhausted(kind) => format!("{actor} failed ({cause}) and the {kind} retry budget is exhausted"),
        _ => format!("{actor} failed ({cause}), which is never retried"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::RetryPolicy;

    fn run() -> Run {
        let node = NodeId::new("n1");
        let master = super::super::Master { node: node.clone(), addr: "n1".into(), port: 29_500 };
        Run {
            attempt: 1,
            cycle: 1,
            rank: 0,
            world_size: 1,
            node,
            port: 29_500,
            devices: crate::resources::Devices::NONE,
            master,
            started: Instant::ZERO,
            acked: true,
            stop: None,
            stop_grace_ms: 0,
            exited: None,
            draining: false,
            drained_by: crate::driver::DrainSource::Notice,
            restarts: 0,
            losses_before: 0,
        }
    }

    fn job(policy: &RetryPolicy, closing: Option<CloseReason>) -> JobContext<'_> {
        JobContext { policy, nproc_per_node: 1, program: "train", closing }
    }

    #[test]
    fn the_table_is_in_variant_order_and_matches_the_design() {
        for (i, row) in CAUSES.iter().enumerate() {
            assert_eq!(row.cause as usize, i, "{:?}", row.cause);
        }
        let charged: Vec<(Cause, BudgetKind)> =
            CAUSES.iter().filter(|r| r.budget != BudgetKind::None).map(|r| (r.cause, r.budget)).collect();
        assert_eq!(
            charged,
            [
                (Cause::UserError, BudgetKind::User),
                (Cause::Preempted, BudgetKind::Preemption),
                (Cause::NodeLost, BudgetKind::System)
            ]
        );
        let fatal: Vec<Cause> = CAUSES.iter().filter(|r| r.fails_job).map(|r| r.cause).collect();
        assert_eq!(fatal, [Cause::NonRetryable, Cause::SpawnFailed]);
    }

    #[test]
    fn a_start_the_node_could_not_make_is_the_nodes_failure_and_the_programs_is_the_programs() {
        let policy = RetryPolicy::default();
        let full = "cannot create /s/attempts/x: No space left on device";
        let since = Instant::from_ms(500);
        let node =
            classify(&job(&policy, None), &run(), Ending::SpawnFailed { message: full, node_fault: Some(since) });
        assert_eq!((node.cause, node.budget), (Cause::NodeLost, BudgetKind::System));
        assert_eq!(node.evidence, format!("node n1 could not start the attempt: {full}"));
        let fault = Fault { node: NodeId::new("n1"), at: since, silence: false };
        assert_eq!(node.fault, Some(fault), "FC-1: one fault per episode");
        let missing = "No such file or directory";
        let program = classify(&job(&policy, None), &run(), Ending::SpawnFailed { message: missing, node_fault: None });
        assert_eq!((program.cause, program.budget), (Cause::SpawnFailed, BudgetKind::None));
        assert_eq!(program.evidence, "could not start `train`: No such file or directory");
        let escapes = JobContext { program: "/x\u{1b}]0;PWNED\u{7}\u{1b}[2J", ..job(&policy, None) };
        let program = classify(&escapes, &run(), Ending::SpawnFailed { message: missing, node_fault: None });
        assert_eq!(program.evidence, "could not start `/x?]0;PWNED??[2J`: No such file or directory", "no escapes");
        let stopped = Run { stop: Some(StopReason::User), ..run() };
        let verdict =
            classify(&job(&policy, None), &stopped, Ending::SpawnFailed { message: full, node_fault: Some(since) });
        assert_eq!(verdict.cause, Cause::Stopped, "a stop asked for first ends as the stop");
    }

    #[test]
    fn exits_are_classified_by_the_design_table() {
        let mut policy = RetryPolicy { non_retryable_exit_codes: vec![2], ..RetryPolicy::default() };
        let verdict = |policy: &RetryPolicy, run: &Run, status: ExitStatus| {
            let v = classify(&job(policy, None), run, Ending::Exited { status: &status, reacting_to: None });
            (v.cause, v.budget)
        };
        let r = run();
        assert_eq!(verdict(&policy, &r, ExitStatus::code(0)), (Cause::Completed, BudgetKind::None));
        assert_eq!(verdict(&policy, &r, ExitStatus::code(2)), (Cause::NonRetryable, BudgetKind::None));
        assert_eq!(verdict(&policy, &r, ExitStatus::code(1)), (Cause::UserError, BudgetKind::User));
        assert_eq!(verdict(&policy, &r, ExitStatus::signal(9, false)), (Cause::UserError, BudgetKind::User));
        assert_eq!(verdict(&policy, &r, ExitStatus::signal(15, true)), (Cause::NodeLost, BudgetKind::System));
        let draining = Run { draining: true, ..run() };
        assert_eq!(verdict(&policy, &draining, ExitStatus::code(1)), (Cause::Preempted, BudgetKind::Preemption));
        // The table's first rows come first on a draining node too.
        assert_eq!(verdict(&policy, &draining, ExitStatus::code(0)), (Cause::Completed, BudgetKind::None));
        assert_eq!(verdict(&policy, &draining, ExitStatus::code(2)), (Cause::NonRetryable, BudgetKind::None));
        let stopped = Run { stop: Some(StopReason::User), ..run() };
        assert_eq!(verdict(&policy, &stopped, ExitStatus::signal(15, true)), (Cause::Stopped, BudgetKind::None));
        policy.single_budget = true;
        assert_eq!(verdict(&policy, &r, ExitStatus::signal(15, true)), (Cause::NodeLost, BudgetKind::User));
    }

    /// A worker killed by a signal nobody in ftdrive sent is the program's failure. (Its
    /// supervisor killed outright is ftdrive's: the head reports that as the attempt lost,
    /// SL-1, and `budgets.rs` shows it charged to `system`.)
    #[test]
    fn a_worker_killed_by_an_unknown_signal_is_the_programs_failure() {
        let policy = RetryPolicy::default();
        let j = job(&policy, None);
        let worker = classify(&j, &run(), Ending::Exited { status: &ExitStatus::signal(9, false), reacting_to: None });
        assert_eq!((worker.cause, worker.budget), (Cause::UserError, BudgetKind::User));
    }

    /// An attempt whose agent went away and stayed away past the re-attach grace was ended by
    /// its supervisor: the evidence says so (it said "the agent shut down").
    #[test]
    fn an_attempt_its_supervisor_ended_after_the_grace_says_the_agent_stayed_away() {
        let policy = RetryPolicy::default();
        let status = ExitStatus { orphaned: true, ..ExitStatus::signal(9, true) };
        let v = classify(&job(&policy, None), &run(), Ending::Exited { status: &status, reacting_to: None });
        assert_eq!((v.cause, v.budget), (Cause::NodeLost, BudgetKind::System));
        assert!(v.evidence.starts_with("the agent on n1 went away and none came back within the re-attach grace"));
        // The agent sent nothing (it was away): the supervisor's own SIGKILL is not read as
        // someone else's.
        let status = ExitStatus { orphaned: true, ..ExitStatus::signal(9, false) };
        let v = classify(&job(&policy, None), &run(), Ending::Exited { status: &status, reacting_to: None });
        assert!(v.evidence.ends_with("the process's supervisor ended it with signal 9"), "{}", v.evidence);
    }

    /// An attempt its agent stopped at the fence (AG-7) is the node's loss, and says why.
    #[test]
    fn an_attempt_stopped_at_the_fence_is_charged_to_the_system_budget() {
        let policy = RetryPolicy::default();
        let status = ExitStatus { fence: std::num::NonZeroU32::new(9_000), ..ExitStatus::signal(15, true) };
        let v = classify(&job(&policy, None), &run(), Ending::Exited { status: &status, reacting_to: None });
        assert_eq!((v.cause, v.budget), (Cause::NodeLost, BudgetKind::System));
        let fault = Fault { node: NodeId::new("n1"), at: Instant::from_ms(9_000), silence: false };
        assert_eq!(v.fault, Some(fault), "FC-1: the attempts one fence stops are one fault");
        let says = "the agent on n1 heard nothing from the head for its --fence-after-ms and stopped the process";
        assert!(v.evidence.starts_with(says), "{}", v.evidence);
    }

    /// Two ranks of a gang fail together: the second's supervisor says the gang's stop came
    /// after its own failure. Free as its gang's stop is, but its words say what happened (it
    /// read "stopped with its gang" though it had exited 7 on its own).
    #[test]
    fn a_rank_that_failed_before_its_gangs_stop_reached_it_says_so() {
        let policy = RetryPolicy::default();
        let because = ActorId::new(crate::ids::JobId::from("j3"), 2);
        let stop = StopReason::Collateral { because, at: Instant::ZERO, drained: None };
        let stopped = Run { stop: Some(stop), ..run() };
        let on_its_own = ExitStatus::code(7);
        let v = classify(&job(&policy, None), &stopped, Ending::Exited { status: &on_its_own, reacting_to: None });
        assert_eq!((v.cause, v.budget), (Cause::Collateral, BudgetKind::None));
        assert_eq!(v.evidence, "process exited with code 7 on n1 before its gang's stop reached it, as j3/2 failed");
        let of_the_stop = ExitStatus::signal(15, true);
        let v = classify(&job(&policy, None), &stopped, Ending::Exited { status: &of_the_stop, reacting_to: None });
        assert_eq!((v.cause, v.evidence.as_str()), (Cause::Collateral, "stopped with its gang after j3/2 failed"));
    }

    #[test]
    fn output_the_log_never_took_at_its_end_is_said_in_the_evidence() {
        let policy = RetryPolicy::default();
        let note = "8388608 bytes of output at its end were not logged: the log took no write (disk full)";
        let status = ExitStatus { unlogged: Some(note.into()), ..ExitStatus::code(3) };
        let v = classify(&job(&policy, None), &run(), Ending::Exited { status: &status, reacting_to: None });
        assert_eq!(v.evidence, format!("process exited with code 3 on n1; {note}"));
        // Exited 0 and kept while its gang finished: said when the gang succeeds.
        let waited = Run {
            exited: Some((ExitStatus { unlogged: Some(note.into()), ..ExitStatus::code(0) }, Instant::ZERO)),
            ..run()
        };
        let v = classify(&job(&policy, None), &waited, Ending::GangSucceeded);
        assert!(v.evidence.ends_with(&format!("; {note}")), "{}", v.evidence);
        let most = crate::protocol::MAX_ERROR_CHARS;
        let sent = ExitStatus { unlogged: Some("x ".repeat(most)), ..ExitStatus::code(0) };
        assert_eq!(sent.bounded().unlogged.unwrap().chars().count(), most, "an agent's note is cut");
    }

    #[test]
    fn the_evidence_names_the_failing_worker_of_a_group() {
        let policy = RetryPolicy::default();
        let mut eight = job(&policy, None);
        eight.nproc_per_node = 8;
        let group = Run { rank: 1, ..run() };
        let status = ExitStatus { worker: Some(3), ..ExitStatus::code(1) };
        let v = classify(&eight, &group, Ending::Exited { status: &status, reacting_to: None });
        assert_eq!((v.cause, v.evidence.as_str()), (Cause::UserError, "worker 3 (rank 11) exited with code 1 on n1"));
    }

    /// A program that left its own words on its failure (`$TORCHELASTIC_ERROR_FILE`) is
    /// quoted in the evidence, whatever the verdict on its exit.
    #[test]
    fn the_evidence_quotes_what_the_program_said_of_its_failure() {
        let policy = RetryPolicy { non_retryable_exit_codes: vec![3], ..RetryPolicy::default() };
        let j = job(&policy, None);
        let said = |code| ExitStatus::code(code).with_error("ValueError: loss is NaN");
        let v = classify(&j, &run(), Ending::Exited { status: &said(1), reacting_to: None });
        let says = r#"process exited with code 1 on n1, saying "ValueError: loss is NaN""#;
        assert_eq!((v.cause, v.evidence.as_str()), (Cause::UserError, says));
        let v = classify(&j, &run(), Ending::Exited { status: &said(3), reacting_to: None });
        let says =
            r#"process exited with code 3 on n1, saying "ValueError: loss is NaN", listed in non_retryable_exit_codes"#;
        assert_eq!((v.cause, v.evidence.as_str()), (Cause::NonRetryable, says));
    }

    #[test]
    fn a_closing_job_charges_nothing_and_says_so() {
        let policy = RetryPolicy::default();
        let v = classify(
            &job(&policy, Some(CloseReason::Failed)),
            &run(),
            Ending::Exited { status: &ExitStatus::code(1), reacting_to: None },
        );
        assert_eq!((v.cause, v.budget), (Cause::UserError, BudgetKind::None));
        assert!(v.evidence.ends_with("not charged: the job was already closing (failed)"), "{}", v.evidence);
    }

    #[test]
    fn a_crash_after_a_peer_went_silent_is_collateral() {
        let policy = RetryPolicy::default();
        let (peer, node) = (ActorId::new(crate::JobId::new("j1"), 2), NodeId::new("n2"));
        let root =
            PeerLoss { peer: &peer, node: &node, silent_since: Instant::from_ms(700), unheard_since_restart: false };
        let status = ExitStatus::code(1);
        let v = classify(&job(&policy, None), &run(), Ending::Exited { status: &status, reacting_to: Some(root) });
        assert_eq!((v.cause, v.budget), (Cause::Collateral, BudgetKind::None));
        assert_eq!(
            v.evidence,
            "process exited with code 1 on n1; j1/2's node n2 had gone silent first, 700 ms into this attempt"
        );
    }
}
