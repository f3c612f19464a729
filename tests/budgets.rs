//! Retry budgets and the ledger (DESIGN §6), one scenario per row of the cause table.

mod support;

use ftdrive::driver::Budget;
use ftdrive::driver::{ActorState, BudgetKind, Cause, JobState, LedgerEntry, Role};
use ftdrive::event::JobEvent;
use ftdrive::head::Input;
use ftdrive::protocol::ExitStatus;
use ftdrive::spec::{JobSpec, RestartMode};
use ftdrive::view::JobView;
use ftdrive::{HeadConfig, Labels, Resources};
use support::{config, cpu, spec, TestCluster};

fn preemptible() -> Labels {
    Labels::from([("preemptible".to_string(), "true".to_string())])
}

fn one_job(nodes: &[&str], s: JobSpec) -> (TestCluster, ftdrive::JobId) {
    let mut c = TestCluster::new(config());
    for n in nodes {
        c.join(n, cpu(1));
    }
    let job = c.submit(s);
    assert_eq!(c.view(&job).state, JobState::Running);
    (c, job)
}

/// Long enough for a lone node's loss to be declared: its silence could be the head's own
/// network's, so it is held that long first (FD-1 in `head/liveness.rs`).
fn past_the_hold_ms() -> u64 {
    config().disruption_hold_ms + 5_000
}

fn last_failure(c: &TestCluster, job: &ftdrive::JobId) -> LedgerEntry {
    c.view(job).ledger.iter().rev().find(|e| e.cause != Cause::Collateral).cloned().expect("a ledger entry")
}

/// n2 crashes (silent from now), and 100 ms later the rank after n2's exits with code 1, as a
/// peer of a vanished rank does: that rank's index.
fn crash_n2_then_fail_a_peer(c: &mut TestCluster, job: &ftdrive::JobId) -> u32 {
    let on_n2 = c.view(job).actors.iter().position(|a| a.node.as_deref() == Some("n2")).unwrap() as u32;
    let peer = (on_n2 + 1) % 3;
    c.crash("n2");
    c.advance(100);
    c.exit_actor(job, peer, ExitStatus::code(1));
    peer
}

#[test]
fn exit_1_is_a_user_error_charged_to_user() {
    let mut s = spec("u", 1, 1);
    s.retries.user = Budget::from_i64(2).unwrap();
    let (mut c, job) = one_job(&["n1"], s);
    c.exit_rank(&job, 0, 1);
    let e = last_failure(&c, &job);
    assert_eq!((e.cause, e.budget, e.exit_code), (Cause::UserError, BudgetKind::User, Some(1)));
    assert_eq!(e.remaining.user.as_i64(), 1);
    assert!(e.evidence.contains("exited with code 1"), "{}", e.evidence);
}

#[test]
fn signal_the_agent_did_not_send_is_a_user_error() {
    let mut s = spec("u", 1, 1);
    s.retries.user = Budget::from_i64(1).unwrap();
    let (mut c, job) = one_job(&["n1"], s);
    c.exit_actor(&job, 0, ExitStatus::signal(9, false));
    let e = last_failure(&c, &job);
    assert_eq!((e.cause, e.budget, e.signal), (Cause::UserError, BudgetKind::User, Some(9)));
}

#[test]
fn stop_under_a_drain_notice_is_preempted() {
    let (mut c, job) = one_job(&["n1", "n2"], spec("d", 1, 1));
    c.agent_notice("n1", 30_000);
    let e = last_failure(&c, &job);
    assert_eq!((e.cause, e.budget), (Cause::Preempted, BudgetKind::Preemption));
    assert!(e.evidence.starts_with("node n1 received a preemption notice (deadline in 30000 ms)"), "{}", e.evidence);
    c.advance(1_000);
    assert_eq!(c.view(&job).actors[0].node.as_deref(), Some("n2"), "moved off the draining node");
    assert_eq!(c.view(&job).actors[0].state, ActorState::Running);
}

#[test]
fn stop_under_an_operator_drain_is_preempted_and_says_who_drained() {
    let (mut c, job) = one_job(&["n1", "n2"], spec("d", 1, 1));
    c.drain("n1", 30_000);
    let e = last_failure(&c, &job);
    assert_eq!((e.cause, e.budget), (Cause::Preempted, BudgetKind::Preemption));
    let says = "node n1 was drained by the operator (deadline in 30000 ms); the process was stopped";
    assert_eq!(e.evidence, says);
    c.advance(1_000);
    assert_eq!(c.view(&job).actors[0].node.as_deref(), Some("n2"), "moved off the draining node");
    assert_eq!(c.view(&job).actors[0].state, ActorState::Running);
}

#[test]
fn preemptible_node_lost_is_preempted() {
    let mut c = TestCluster::new(config());
    c.join_labelled("p1", cpu(1), preemptible());
    let job = c.submit(spec("p", 1, 1));
    c.crash("p1");
    c.advance(past_the_hold_ms());
    let e = last_failure(&c, &job);
    assert_eq!((e.cause, e.budget), (Cause::Preempted, BudgetKind::Preemption));
    assert!(e.evidence.contains("preemptible=true"), "{}", e.evidence);
    assert_eq!(e.remaining.preemption.as_i64(), -1);
    assert_eq!(e.remaining.system.as_i64(), 3, "the system budget was not touched");
}

#[test]
fn other_node_lost_is_node_lost_charged_to_system() {
    let (mut c, job) = one_job(&["n1"], spec("n", 1, 1));
    c.crash("n1");
    c.advance(past_the_hold_ms());
    let e = last_failure(&c, &job);
    assert_eq!((e.cause, e.budget, e.remaining.system.as_i64()), (Cause::NodeLost, BudgetKind::System, 2));
    assert!(e.evidence.contains(", as did every node; held 300000 ms (`--disruption-hold-ms`)"), "{}", e.evidence);
}

/// A lone node whose agent's connection closed (the agent killed, its machine up) is declared
/// after the node timeout, not held: the close crossed the head's network, so the silence
/// after it is the node's own (FD-4). A one-node cluster's job waited out the five-minute hold.
#[test]
fn a_lone_node_whose_connection_closed_is_declared_without_a_hold() {
    let (mut c, job) = one_job(&["n1"], spec("n", 1, 1));
    c.stop_agent("n1");
    c.input(Input::LinkLost { node: ftdrive::NodeId::new("n1") });
    c.advance(5_000);
    assert_eq!(c.node_state("n1"), ftdrive::scheduler::NodeState::Dead);
    let e = last_failure(&c, &job);
    assert_eq!((e.cause, e.budget), (Cause::NodeLost, BudgetKind::System));
    assert!(!e.evidence.contains("as did every node"), "{}", e.evidence);
}

/// The machine rebooted (its agent registers anew, with nothing to re-attach): what ran there
/// is lost with its agent — the design's "its agent crashed" row.
#[test]
fn an_agent_restart_that_lost_the_process_is_node_lost() {
    let (mut c, job) = one_job(&["n1"], spec("n", 1, 1));
    c.join("n1", cpu(1));
    let e = last_failure(&c, &job);
    assert_eq!((e.cause, e.budget), (Cause::NodeLost, BudgetKind::System));
    assert!(e.evidence.contains("on n1 was gone when its agent restarted"), "{}", e.evidence);
}

#[test]
fn non_retryable_exit_code_fails_the_job_at_once() {
    let mut s = spec("nr", 1, 1);
    s.retries.user = Budget::from_i64(5).unwrap();
    s.retries.non_retryable_exit_codes = vec![2];
    let (mut c, job) = one_job(&["n1"], s);
    c.exit_rank(&job, 0, 2);
    let view = c.view(&job);
    assert_eq!(view.state, JobState::Failed);
    let e = &view.ledger[0];
    assert_eq!((e.cause, e.budget), (Cause::NonRetryable, BudgetKind::None));
    assert_eq!(view.remaining.user.as_i64(), 5, "nothing charged");
    assert_eq!(view.actors[0].state, ActorState::Failed);
}

#[test]
fn exhausted_budget_fails_the_job_and_the_ledger_names_it() {
    let (mut c, job) = one_job(&["n1"], spec("x", 1, 1));
    c.exit_rank(&job, 0, 1);
    let view = c.view(&job);
    assert_eq!(view.state, JobState::Failed);
    let e = &view.ledger[0];
    assert_eq!((e.cause, e.budget, e.remaining.user.as_i64()), (Cause::UserError, BudgetKind::User, 0));
    assert!(e.evidence.contains("the user budget is exhausted"), "{}", e.evidence);
    assert!(view.message.as_deref().unwrap().contains("user retry budget is exhausted"), "{:?}", view.message);
}

#[test]
fn single_budget_charges_user_for_everything() {
    let mut s = spec("sb", 1, 1);
    s.retries.user = Budget::from_i64(1).unwrap();
    s.retries.single_budget = true;
    let (mut c, job) = one_job(&["n1", "n2"], s);
    c.crash("n1");
    c.advance(5_000);
    let e = last_failure(&c, &job);
    assert_eq!(
        (e.cause, e.budget, e.remaining.user.as_i64(), e.remaining.system.as_i64()),
        (Cause::NodeLost, BudgetKind::User, 0, 3)
    );
}

#[test]
fn last_attempt_runs_off_preemptible_nodes() {
    let mut c = TestCluster::new(config());
    c.join_labelled("p1", cpu(1), preemptible());
    c.join_labelled("p2", cpu(1), preemptible());
    c.join("s1", cpu(1));
    let mut s = spec("lanp", 1, 1);
    s.retries.preemption = Budget::from_i64(1).unwrap();
    s.last_attempt_non_preemptible = true;
    let job = c.submit(s);
    assert_eq!(c.view(&job).actors[0].node.as_deref(), Some("p1"));
    c.crash("p1");
    c.advance(5_000);
    let e = last_failure(&c, &job);
    assert_eq!((e.cause, e.remaining.preemption.as_i64()), (Cause::Preempted, 0));
    assert_eq!(c.view(&job).actors[0].node.as_deref(), Some("s1"), "p2 was free but preemptible");
}

/// A gang restarted by the failure that used up the budget starts the last allowed attempt of
/// every rank off preemptible nodes: the rank stopped with its gang on p2 gives p2 back.
#[test]
fn last_attempt_restarts_a_gang_s_ranks_off_preemptible_nodes() {
    let mut c = TestCluster::new(config());
    c.join_labelled("p1", cpu(1), preemptible());
    c.join_labelled("p2", cpu(1), preemptible());
    let mut s = spec("lanp-gang", 2, 2);
    s.retries.preemption = Budget::from_i64(1).unwrap();
    s.last_attempt_non_preemptible = true;
    let job = c.submit(s);
    c.join("s1", cpu(1));
    c.join("s2", cpu(1));
    let rank0 = c.view(&job).actors.iter().find(|a| a.rank == Some(0)).unwrap().node.clone().unwrap();
    c.crash(&rank0);
    c.advance(5_000);
    assert_eq!(last_failure(&c, &job).remaining.preemption.as_i64(), 0);
    let view = c.view(&job);
    let mut placed: Vec<(Option<String>, ActorState, u32)> =
        view.actors.iter().map(|a| (a.node.clone(), a.state, a.attempt)).collect();
    placed.sort();
    let running = |n: &str| (Some(n.to_string()), ActorState::Running, 2);
    assert_eq!(placed, [running("s1"), running("s2")], "{:?}", view.actors);
}

/// In actor mode a rank that goes on running on a preemptible node keeps running there; once
/// it fails and restarts, that attempt starts off preemptible nodes.
#[test]
fn last_attempt_leaves_a_running_rank_and_restarts_it_off_preemptible_nodes() {
    let mut c = TestCluster::new(config());
    c.join_labelled("p1", cpu(1), preemptible());
    c.join_labelled("p2", cpu(1), preemptible());
    let mut s = spec("lanp-actor", 2, 2);
    s.restart = RestartMode::Actor;
    s.retries.preemption = Budget::from_i64(1).unwrap();
    s.retries.user = Budget::from_i64(1).unwrap();
    s.last_attempt_non_preemptible = true;
    let job = c.submit(s);
    c.join("s1", cpu(1));
    c.join("s2", cpu(1));
    let on = |c: &TestCluster, rank: u32| {
        let view = c.view(&job);
        let a = view.actors.iter().find(|a| a.rank == Some(rank)).unwrap();
        (a.node.clone().unwrap(), a.state, a.attempt)
    };
    let (rank1_node, ..) = on(&c, 1);
    c.crash(if rank1_node == "p1" { "p2" } else { "p1" });
    c.advance(5_000);
    assert_eq!(last_failure(&c, &job).remaining.preemption.as_i64(), 0);
    assert_eq!(on(&c, 1), (rank1_node, ActorState::Running, 1), "the running rank is left alone");
    c.exit_rank(&job, 1, 1);
    c.advance(5_000);
    let (node, state, attempts) = on(&c, 1);
    assert!(node.starts_with('s') && state == ActorState::Running && attempts == 2, "{node} {state} {attempts}");
}

/// A spare standing by on a preemptible node does not take the last allowed attempt: the rank
/// is placed anew off preemptible nodes, and the spare gives its node back and waits for one
/// that is not preemptible.
#[test]
fn last_attempt_is_not_handed_to_a_spare_on_a_preemptible_node() {
    let mut c = TestCluster::new(config());
    c.join_labelled("p1", cpu(1), preemptible());
    c.join_labelled("p2", cpu(1), preemptible());
    let mut s = spec("lanp-spare", 1, 1);
    s.hot_spares = 1;
    s.retries.preemption = Budget::from_i64(1).unwrap();
    s.last_attempt_non_preemptible = true;
    let job = c.submit(s);
    c.join("s1", cpu(1));
    let view = c.view(&job);
    let rank0 = view.actors.iter().find(|a| a.rank == Some(0)).unwrap().node.clone().unwrap();
    let spare = view.actors.iter().find(|a| a.role == Role::Spare).unwrap().node.clone().unwrap();
    assert_ne!(rank0, spare);
    c.crash(&rank0);
    c.advance(5_000);
    let e = last_failure(&c, &job);
    assert_eq!((e.cause, e.remaining.preemption.as_i64()), (Cause::Preempted, 0));
    let view = c.view(&job);
    let rank0 = view.actors.iter().find(|a| a.rank == Some(0)).unwrap();
    assert_eq!((rank0.node.as_deref(), rank0.state), (Some("s1"), ActorState::Running), "{:?}", view.actors);
    let spare = view.actors.iter().find(|a| a.role == Role::Spare).unwrap();
    assert_eq!((spare.state, spare.node.as_deref()), (ActorState::Scheduling, None), "{:?}", view.actors);
    c.join("s2", cpu(1));
    let spare = c.view(&job).actors.into_iter().find(|a| a.role == Role::Spare).unwrap();
    assert_eq!((spare.state, spare.node.as_deref()), (ActorState::Standby, Some("s2")));
}

#[test]
fn gang_restart_charges_only_the_failed_rank() {
    let mut s = spec("col", 3, 3);
    s.retries.user = Budget::from_i64(3).unwrap();
    let (mut c, job) = one_job(&["n1", "n2", "n3"], s);
    c.exit_rank(&job, 1, 1);
    c.advance(1_000);
    let view = c.view(&job);
    let causes: Vec<(Cause, BudgetKind)> = view.ledger.iter().map(|e| (e.cause, e.budget)).collect();
    assert_eq!(causes.iter().filter(|c| c.0 == Cause::UserError).count(), 1);
    assert_eq!(causes.iter().filter(|c| **c == (Cause::Collateral, BudgetKind::None)).count(), 2);
    assert_eq!(view.remaining.user.as_i64(), 2);
    assert_eq!(view.cycles, 2);
    c.finish(&job);
    assert_eq!(c.view(&job).state, JobState::Succeeded);
}

#[test]
fn user_stop_ends_everything_as_stopped() {
    let mut s = spec("stop", 2, 2);
    s.hot_spares = 1;
    let (mut c, job) = one_job(&["n1", "n2", "n3"], s);
    c.stop(&job);
    let view = c.view(&job);
    assert_eq!(view.state, JobState::Stopped);
    assert!(view.actors.iter().all(|a| a.state == ActorState::Stopped), "{:?}", view.actors);
    assert!(view.ledger.iter().all(|e| (e.cause, e.budget) == (Cause::Stopped, BudgetKind::None)));
    assert_eq!(c.running_of(&job).count(), 0);
}

#[test]
fn spawn_failure_fails_the_job_and_names_the_command() {
    let (mut c, job) = one_job(&["n1"], spec("sp", 1, 1));
    let key = c.running_of(&job).next().unwrap().clone();
    c.agents.get_mut("n1").unwrap().running.clear();
    c.input(ftdrive::head::Input::SpawnFailed {
        node: "n1".into(),
        key,
        message: "No such file or directory".into(),
        node_fault: false,
    });
    let view = c.view(&job);
    assert_eq!(view.state, JobState::Failed);
    assert_eq!((view.ledger[0].cause, view.ledger[0].budget), (Cause::SpawnFailed, BudgetKind::None));
    assert_eq!(view.ledger[0].evidence, "could not start `train`: No such file or directory");
}

#[test]
fn schedule_timeout_fails_an_unplaceable_job() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    let mut s = spec("to", 3, 3);
    s.schedule_timeout_ms = Some(5_000);
    let job = c.submit(s);
    c.advance(4_000);
    assert_eq!(c.view(&job).state, JobState::Pending);
    c.join("n2", cpu(1)); // no event: only the count changed
    c.advance(2_000);
    let view = c.view(&job);
    assert_eq!(view.state, JobState::Failed);
    assert_eq!(
        view.message.as_deref(),
        Some(
            "not placed within schedule_timeout_ms (5000 ms): infeasible: min_nodes 3 with STRICT_SPREAD needs 3 \
             distinct nodes, and only 2 node(s), DEAD ones included, could hold a bundle; add nodes, or lower min_nodes"
        ),
        "the count as the deadline found it"
    );
}

/// A job the cluster could hold but is busy for fails at its deadline saying who held the room.
#[test]
fn schedule_timeout_on_a_busy_cluster_names_the_job_holding_the_room() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    let holder = c.submit(spec("holder", 1, 1));
    let mut s = spec("late", 1, 1);
    s.schedule_timeout_ms = Some(5_000);
    let job = c.submit(s);
    c.advance(6_000);
    let view = c.view(&job);
    assert_eq!(view.state, JobState::Failed);
    assert_eq!(
        view.message,
        Some(format!(
            "not placed within schedule_timeout_ms (5000 ms): waiting for capacity: needs 1 node with room for a \
             bundle of cpu=1 (STRICT_SPREAD), and 0 of the 1 matching node(s) have it now; in use by {holder}"
        ))
    );
    assert_eq!(view.waiting, None, "an ended job waits for nothing");
}

/// `run_timeout_ms` counts from the job's first RUNNING, through a restart of its gang and a
/// restart of the head: at the limit its processes are stopped, it fails saying why, and the
/// stop charges no budget (as Slurm's `TIMEOUT` and a Kubernetes Job's `DeadlineExceeded`).
#[test]
fn run_timeout_stops_and_fails_a_job_counted_from_when_it_first_ran() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    c.join("n2", cpu(1));
    c.advance(2_000);
    let mut s = spec("limited", 2, 2);
    s.retries.user = Budget::from_i64(5).unwrap();
    s.run_timeout_ms = Some(10_000);
    let job = c.submit(s);
    let view = c.view(&job);
    assert_eq!(view.state, JobState::Running);
    let deadline = view.run_deadline_ms.expect("a running job with a limit shows when it ends");
    assert_eq!(deadline, view.submit_ms + 10_000, "placed and started at once");
    c.advance(4_000);
    c.exit_rank(&job, 1, 1);
    c.advance(3_000);
    let view = c.view(&job);
    assert_eq!((view.state, view.cycles, view.remaining.user.as_i64()), (JobState::Running, 2, 4));
    assert_eq!(view.run_deadline_ms, Some(deadline), "a restart does not start the clock again");
    c.restart_head();
    assert_eq!(c.view(&job).run_deadline_ms, Some(deadline), "nor does a restart of the head");
    c.advance(2_900);
    assert_eq!(c.view(&job).state, JobState::Running);
    c.advance(200);
    let view = c.view(&job);
    assert_eq!(view.state, JobState::Failed);
    assert_eq!(
        view.message.as_deref(),
        Some("ran for its run_timeout_ms (10000 ms), counted from when it first ran; raise it, or null for no limit")
    );
    assert_eq!(view.remaining.user.as_i64(), 4, "only the exit was charged");
    let stopped: Vec<_> = view.ledger.iter().filter(|e| e.cycle == 2).map(|e| (e.cause, e.budget)).collect();
    assert_eq!(stopped, [(Cause::Collateral, BudgetKind::None); 2], "{:#?}", view.ledger);
    assert_eq!((view.run_deadline_ms, c.running_of(&job).count()), (None, 0));
}

/// A job that ends before its limit is not touched by it.
#[test]
fn run_timeout_leaves_a_job_that_ends_first_alone() {
    let mut s = spec("quick", 1, 1);
    s.run_timeout_ms = Some(10_000);
    let (mut c, job) = one_job(&["n1"], s);
    c.advance(5_000);
    c.finish(&job);
    c.advance(10_000);
    let view = c.view(&job);
    assert_eq!((view.state, view.message, view.run_deadline_ms), (JobState::Succeeded, None, None));
}

#[test]
fn resources_free_again_after_failure() {
    let (mut c, job) = one_job(&["n1"], spec("f", 1, 1));
    c.exit_rank(&job, 0, 1);
    assert_eq!(c.view(&job).state, JobState::Failed);
    assert_eq!(c.head.scheduler().allocated(0), Resources::new());
}

#[test]
fn last_attempt_with_only_preemptible_nodes_left_is_reported_infeasible() {
    let mut c = TestCluster::new(config());
    c.join_labelled("p1", cpu(1), preemptible());
    let mut s = spec("only-preemptible", 1, 1);
    s.retries.preemption = Budget::from_i64(1).unwrap();
    s.last_attempt_non_preemptible = true;
    let job = c.submit(s);
    c.crash("p1");
    c.advance(past_the_hold_ms());
    c.join_labelled("p2", cpu(1), preemptible());
    let view = c.view(&job);
    assert_eq!(view.actors[0].state, ActorState::Scheduling);
    assert!(view.infeasible.as_deref().unwrap().contains("last_attempt_non_preemptible"), "{:?}", view.infeasible);
    c.join("s1", cpu(1));
    assert_eq!(c.view(&job).infeasible, None);
    assert_eq!(c.view(&job).actors[0].node.as_deref(), Some("s1"));
}

/// A rank exits 1 because its peer's machine died — before the head notices the machine is
/// gone. The node loss is the cause; the exit charges nothing.
#[test]
fn a_peer_reacting_to_a_silent_node_loss_is_collateral() {
    let mut s = spec("react", 3, 3);
    s.retries.user = Budget::from_i64(1).unwrap();
    let (mut c, job) = one_job(&["n1", "n2", "n3"], s);
    c.advance(1_500);
    let on_n2 = c.view(&job).actors.iter().position(|a| a.node.as_deref() == Some("n2")).unwrap() as u32;
    let peer = crash_n2_then_fail_a_peer(&mut c, &job);
    assert_eq!(c.actor_state(&job, peer), ActorState::Failing, "undecided until n2's fate is known");
    c.advance(5_000);
    let view = c.view(&job);
    let entry = |actor: u32| {
        view.ledger.iter().find(|e| e.actor == format!("{job}/{actor}") && e.attempt == 1).unwrap().clone()
    };
    let (lost, reacted) = (entry(on_n2), entry(peer));
    assert_eq!((lost.cause, lost.budget), (Cause::NodeLost, BudgetKind::System));
    assert_eq!((reacted.cause, reacted.budget), (Cause::Collateral, BudgetKind::None));
    assert!(reacted.evidence.contains("had gone silent first"), "{}", reacted.evidence);
    assert_eq!((view.remaining.user.as_i64(), view.remaining.system.as_i64()), (1, 2));
    c.advance(2_000);
    c.join("n4", cpu(1));
    c.advance(2_000);
    c.finish(&job);
    assert_eq!(c.view(&job).state, JobState::Succeeded);
}

/// The same exit with every peer's machine healthy is the user's error, decided as soon as
/// the peers (stopped for the gang restart) have reported.
#[test]
fn a_crash_with_healthy_peers_is_charged_to_user_at_once() {
    let mut s = spec("bug", 3, 3);
    s.retries.user = Budget::from_i64(1).unwrap();
    let (mut c, job) = one_job(&["n1", "n2", "n3"], s);
    c.exit_rank(&job, 1, 1);
    let view = c.view(&job);
    let failed = view.ledger.iter().find(|e| e.cause == Cause::UserError).expect("decided without waiting");
    assert_eq!((failed.budget, view.remaining.user.as_i64()), (BudgetKind::User, 0));
}

/// AT-1: in actor mode the peers of a crashed rank run on, so waiting for them to end would
/// wait out the node timeout. Once every peer's node has been heard from since the exit, no
/// loss of theirs can excuse it: decided within a heartbeat. A peer whose node is silent keeps
/// the decision open until its fate is known.
#[test]
fn an_actor_mode_crash_is_decided_once_its_peers_nodes_are_heard_from() {
    let timeout_ms = HeadConfig::default().node_timeout_ms;
    let beat_ms = HeadConfig::default().heartbeat_interval_ms;
    assert!(timeout_ms >= 2 * beat_ms + 200, "a node timeout long enough to tell the two apart");
    let mut s = spec("solo", 3, 3);
    s.restart = RestartMode::Actor;
    s.retries.user = Budget::from_i64(1).unwrap();
    let (mut c, job) = one_job(&["n1", "n2", "n3"], s.clone());
    c.advance(500);
    c.exit_actor(&job, 1, ExitStatus::code(1));
    assert_eq!(c.actor_state(&job, 1), ActorState::Failing);
    c.advance(beat_ms + 100);
    let entry = last_failure(&c, &job);
    assert_eq!((entry.cause, entry.budget), (Cause::UserError, BudgetKind::User), "decided in a heartbeat");
    let states: Vec<ActorState> = [0, 2].iter().map(|a| c.actor_state(&job, *a)).collect();
    assert_eq!(states, [ActorState::Running; 2], "the peers run on");

    let (mut c, job) = one_job(&["n1", "n2", "n3"], s);
    c.advance(500);
    let peer = crash_n2_then_fail_a_peer(&mut c, &job);
    c.advance(2 * beat_ms + 100);
    assert_eq!(c.actor_state(&job, peer), ActorState::Failing, "n2 went silent first: its fate decides");
    c.advance(timeout_ms);
    let reacted = c.view(&job).ledger.iter().find(|e| e.actor == format!("{job}/{peer}")).unwrap().clone();
    assert_eq!((reacted.cause, reacted.budget), (Cause::Collateral, BudgetKind::None), "{reacted:?}");
}

/// AT-4: in actor mode a cycle never ends, and a peer's node loss excuses only the attempts
/// that ran when it was recorded: the rank restarted after it, failing again, is charged.
#[test]
fn a_loss_known_before_an_attempt_started_does_not_excuse_it() {
    let mut s = spec("again", 2, 3);
    s.restart = RestartMode::Actor;
    s.retries.user = Budget::from_i64(1).unwrap();
    let (mut c, job) = one_job(&["n1", "n2", "n3"], s);
    c.advance(500);
    let peer = crash_n2_then_fail_a_peer(&mut c, &job);
    let peers = |c: &TestCluster, attempt: u32| {
        let name = format!("{job}/{peer}");
        c.view(&job).ledger.iter().find(|e| e.actor == name && e.attempt == attempt).cloned().expect("its end")
    };
    c.advance(HeadConfig::default().node_timeout_ms + 2_000);
    let first = peers(&c, 1);
    assert_eq!((first.cause, first.budget), (Cause::Collateral, BudgetKind::None), "it ran when n2 went silent");
    assert_eq!(c.actor_state(&job, peer), ActorState::Running, "restarted, n2's loss known by now");
    c.exit_actor(&job, peer, ExitStatus::code(1));
    c.advance(HeadConfig::default().node_timeout_ms + 2_000);
    let second = peers(&c, 2);
    assert_eq!((second.cause, second.budget), (Cause::UserError, BudgetKind::User), "{second:?}");
}

/// SL-1: a node's agent and its attempts are killed outright, and the agent is back within a
/// second, before any node timeout: it reports the attempt's supervisor dead without a record
/// (or, from a fresh disk, knows nothing of it). A peer that crashed meanwhile (its ring
/// neighbour gone) was reacting to that loss: free, as for a lost node; the lost rank is
/// `node_lost`, charged to `system` once. Reported as a bare exit, the lost rank read as
/// stopped with its gang (free) and the restarted agent's first heartbeat had the peer's crash
/// decided a user error: the job failed on its user budget of 0 (a real cluster under `cargo
/// bench --bench chaos -- --machine-loss`).
#[test]
fn a_crash_after_a_peers_attempts_were_killed_with_its_agent_is_charged_to_the_loss() {
    let beat_ms = HeadConfig::default().heartbeat_interval_ms;
    type Restart = fn(&mut TestCluster, &str);
    let restarts: [(Restart, &str); 2] = [
        (TestCluster::kill_all_and_restart_agent, "died without a record"),
        (TestCluster::reboot_fresh, "was gone when its agent restarted"),
    ];
    for (restart, says) in restarts {
        let (mut c, job, lost_rank, peer) = a_ring_whose_rank_on_n2_is_lost_and_a_peer_crashes();
        c.advance(200);
        restart(&mut c, "n2");
        c.advance(2 * beat_ms);
        let lost = loss_charged_and_reaction_free(&c, &job, lost_rank, peer, "'s node n2 had gone silent first");
        assert!(lost.contains(says), "{lost}");
    }
}

/// AT-2: a node dies, a peer crashes on it, and the head restarts before the loss is declared.
/// The restarted head never hears from the node again, so it cannot tell when it went silent:
/// perhaps first, which excuses the crash. The crash waits for the recovery window (it closed
/// the attribution window before the loss was known, and was charged to `user`: swarm seeds
/// 2287 and 9889, whose ranks react to a lost peer), then the loss is `node_lost` (system) and
/// the crash `collateral`.
#[test]
fn a_crash_on_a_node_lost_across_a_head_restart_is_charged_to_the_loss() {
    let timeout_ms = HeadConfig::default().node_timeout_ms;
    let (mut c, job, lost_rank, peer) = a_ring_whose_rank_on_n2_is_lost_and_a_peer_crashes();
    c.advance(500);
    assert_eq!(c.node_state("n2"), ftdrive::scheduler::NodeState::Alive, "not declared lost before the restart");
    c.restart_head();
    c.advance(2 * timeout_ms);
    loss_charged_and_reaction_free(&c, &job, lost_rank, peer, "was lost unheard across a head restart, perhaps first");
}

/// A ring of three with no user retries on n1..n4: n2's machine goes, and 100 ms later the
/// next rank crashes on its vanished neighbour. The lost actor and the crashed one.
fn a_ring_whose_rank_on_n2_is_lost_and_a_peer_crashes() -> (TestCluster, ftdrive::JobId, u32, u32) {
    let mut s = spec("ring", 3, 3);
    s.retries.user = Budget::from_i64(0).unwrap();
    let (mut c, job) = one_job(&["n1", "n2", "n3", "n4"], s);
    c.advance(500);
    let on_n2 = c.view(&job).actors.iter().position(|a| a.node.as_deref() == Some("n2")).unwrap() as u32;
    let peer = (on_n2 + 1) % 3;
    c.crash("n2");
    c.advance(100);
    c.exit_actor(&job, peer, ExitStatus::code(1));
    (c, job, on_n2, peer)
}

/// The lost rank is `node_lost` (system) and the crash a free reaction whose evidence says
/// `why`; the job did not fail. The lost rank's evidence.
fn loss_charged_and_reaction_free(c: &TestCluster, job: &ftdrive::JobId, lost: u32, peer: u32, why: &str) -> String {
    let view = c.view(job);
    let entry = |actor: u32| view.ledger.iter().find(|e| e.actor == format!("{job}/{actor}")).unwrap().clone();
    let (lost, reacted) = (entry(lost), entry(peer));
    assert_eq!((lost.cause, lost.budget), (Cause::NodeLost, BudgetKind::System), "{:#?}", view.ledger);
    assert_eq!((reacted.cause, reacted.budget), (Cause::Collateral, BudgetKind::None), "{:#?}", view.ledger);
    assert!(reacted.evidence.contains(why), "{}", reacted.evidence);
    assert_ne!(view.state, JobState::Failed, "{:#?}", view.ledger);
    lost.evidence
}

/// A node that dies after a rank's own crash does not excuse the crash.
#[test]
fn a_node_lost_after_the_crash_does_not_excuse_it() {
    let mut s = spec("late", 2, 2);
    s.retries.user = Budget::from_i64(2).unwrap();
    let (mut c, job) = one_job(&["n1", "n2", "n3"], s);
    c.advance(1_000);
    c.exit_rank(&job, 0, 1);
    c.advance(100);
    c.crash("n2");
    c.advance(5_000);
    let user_errors =
        c.view(&job).ledger.iter().filter(|e| (e.cause, e.budget) == (Cause::UserError, BudgetKind::User)).count();
    assert_eq!(user_errors, 1);
}

/// The job's `count` `node_lost` entries: the one charged to `system`, and the rest, free.
fn losses_charged_once(view: &JobView, count: usize) -> (LedgerEntry, Vec<LedgerEntry>) {
    let lost = view.ledger.iter().filter(|e| e.cause == Cause::NodeLost).cloned();
    let (charged, free): (Vec<LedgerEntry>, Vec<LedgerEntry>) = lost.partition(|e| e.budget == BudgetKind::System);
    assert_eq!((charged.len(), free.len() + 1), (1, count), "{:#?}", view.ledger);
    assert!(free.iter().all(|e| e.budget == BudgetKind::None), "{:#?}", view.ledger);
    (charged.into_iter().next().expect("one charged"), free)
}

/// Four ranks packed on one machine, one machine lost: one fault, one `system` charge (FC-1);
/// the other three are `node_lost` too, free, naming the rank charged. The job re-forms on
/// the other node instead of failing at once on its default budget of 3.
#[test]
fn one_node_lost_with_several_ranks_of_a_packed_gang_is_charged_once() {
    let mut s = spec("packed", 4, 4);
    s.strategy = ftdrive::spec::Strategy::StrictPack;
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(4));
    let job = c.submit(s);
    assert_eq!(c.view(&job).state, JobState::Running);
    c.join("n2", cpu(4));
    c.crash("n1");
    c.advance(10_000);
    let view = c.view(&job);
    let (charged, lost_free) = losses_charged_once(&view, 4);
    let first = charged.actor.to_string();
    for free in &lost_free {
        assert!(
            free.evidence.ends_with(&format!("one fault of node n1, charged once, to {first}")),
            "{}",
            free.evidence
        );
    }
    assert_eq!(view.remaining.system.as_i64(), 2);
    assert_eq!((view.state, view.cycles), (JobState::Running, 2), "re-formed on n2");
}

/// A gang of four on four machines with three spares and a `system` budget of 1.
fn gang_with_spares() -> (TestCluster, ftdrive::JobId) {
    let mut s = spec("rack", 4, 4);
    s.retries.system = Budget::from_i64(1).unwrap();
    let (mut c, job) = one_job(&["n1", "n2", "n3", "n4"], s);
    for spare in ["s1", "s2", "s3"] {
        c.join(spare, cpu(1));
    }
    (c, job)
}

/// A rack lost at once: three machines of a gang's four go silent together. One incident, one
/// `system` charge (FC-2); the other two losses are `node_lost` too, free, naming the node and
/// the rank charged, and the job re-forms on the spares instead of failing on its budget of 1.
#[test]
fn machines_lost_together_are_one_incident_charged_once() {
    let (mut c, job) = gang_with_spares();
    for machine in ["n1", "n2", "n3"] {
        c.crash(machine);
    }
    c.advance(10_000);
    let view = c.view(&job);
    let (charged, lost_free) = losses_charged_once(&view, 3);
    let (node, actor) = (&charged.node, charged.actor.to_string());
    let grouped = format!(
        "lost in one incident with node {node} (silent within 1500 ms of each other), charged once, to {actor}"
    );
    for free in &lost_free {
        assert!(free.evidence.ends_with(&grouped), "{}", free.evidence);
    }
    assert_eq!((view.state, view.cycles, view.remaining.system.as_i64()), (JobState::Running, 2, 0), "{view:#?}");
}

/// Machines that go silent further apart than a heartbeat interval and a half are two
/// incidents, charged once each: the second exhausts the budget of 1 and fails the job.
#[test]
fn machines_lost_apart_are_charged_each() {
    let (mut c, job) = gang_with_spares();
    c.crash("n1");
    c.advance(2_000);
    c.crash("n2");
    c.advance(10_000);
    let view = c.view(&job);
    let lost: Vec<(&str, BudgetKind)> =
        view.ledger.iter().filter(|e| e.cause == Cause::NodeLost).map(|e| (e.node.as_str(), e.budget)).collect();
    assert_eq!(lost, [("n1", BudgetKind::System), ("n2", BudgetKind::System)], "{:#?}", view.ledger);
    assert_eq!(view.state, JobState::Failed, "{view:#?}");
    assert!(view.message.as_deref().is_some_and(|m| m.contains("system retry budget is exhausted")), "{view:#?}");
}

/// The same for a drain: one notice, one `preemption` charge, however many ranks it stops.
#[test]
fn one_drain_of_a_node_holding_several_ranks_is_charged_once() {
    let mut s = spec("packed", 2, 2);
    s.strategy = ftdrive::spec::Strategy::Pack;
    s.retries.preemption = Budget::from_i64(1).unwrap();
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(2));
    let job = c.submit(s);
    c.join("n2", cpu(2));
    c.drain("n1", 5_000);
    c.advance(20_000);
    let view = c.view(&job);
    let preempted: Vec<&LedgerEntry> = view.ledger.iter().filter(|e| e.cause == Cause::Preempted).collect();
    assert_eq!(preempted.len(), 2, "{:#?}", view.ledger);
    assert_eq!(preempted.iter().filter(|e| e.budget == BudgetKind::Preemption).count(), 1, "{:#?}", view.ledger);
    assert_eq!((view.state, view.remaining.preemption.as_i64()), (JobState::Running, 0), "it runs on n2: {view:#?}");
}

/// A failure that waits in FAILING for its peers (here a peer that takes its stop grace) is
/// recorded as ending when its process exited, not when the wait was over.
#[test]
fn a_failure_that_waited_for_its_peers_ends_in_the_ledger_when_it_exited() {
    let mut s = spec("waits", 2, 2);
    s.retries.user = Budget::from_i64(2).unwrap();
    let (mut c, job) = one_job(&["n1", "n2", "n3"], s);
    c.advance(1_000);
    let peer_node = c.view(&job).actors[1].node.clone().unwrap();
    c.agents.get_mut(&peer_node).unwrap().slow_to_stop = true;
    let exited_at = c.now.as_ms();
    c.exit_rank(&job, 0, 1);
    c.advance(2_000);
    c.agents.get_mut(&peer_node).unwrap().slow_to_stop = false;
    c.crash(&peer_node); // the peer's grace runs out with its machine; the wait ends
    c.advance(10_000);
    let view = c.view(&job);
    let failed = view.ledger.iter().find(|e| e.cause == Cause::UserError).expect("the crash was decided");
    assert_eq!(failed.end_ms, exited_at, "{:#?}", view.ledger);
}

/// A job with an unlimited budget whose program fails at once ended thousands of attempts a
/// minute, each a ledger entry held in memory and on disk: at `max_ledger_entries` (100,000
/// unless configured) it fails, saying why.
#[test]
fn a_crash_loop_with_an_unlimited_budget_fails_once_its_ledger_is_full() {
    let mut s = spec("loop", 1, 1);
    s.retries.user = Budget::from_i64(-1).unwrap();
    s.retries.backoff_ms.initial = 0;
    s.retries.backoff_ms.max = 0;
    let mut c = TestCluster::new(HeadConfig { max_ledger_entries: 50, ..config() });
    c.join("n1", cpu(1));
    let job = c.submit(s);
    for _ in 0..50 {
        assert_eq!(c.view(&job).state, JobState::Running);
        c.exit_rank(&job, 0, 1);
        c.advance(1);
    }
    let view = c.view(&job);
    assert_eq!(view.state, JobState::Failed);
    assert_eq!(view.ledger.len(), 50);
    let message = view.message.as_deref().unwrap();
    assert!(message.contains("the job's ledger is full: 50 attempts ended"), "{message}");
}

/// A job backing off before a restart says until when (Kubernetes' CrashLoopBackOff): the next
/// cycle's earliest start in gang mode, the failed actor's in actor mode; nothing once the
/// restart is made.
#[test]
fn a_backoff_shows_in_the_view_until_the_restart_is_made() {
    for mode in [RestartMode::Gang, RestartMode::Actor] {
        let mut s = spec("backoff", 2, 2);
        s.restart = mode;
        s.retries.user = Budget::from_i64(3).unwrap();
        (s.retries.backoff_ms.initial, s.retries.backoff_ms.max) = (10_000, 10_000);
        let (mut c, job) = one_job(&["n1", "n2"], s);
        c.exit_rank(&job, 1, 1);
        // Actor mode waits a moment for a node loss that would explain the failure.
        while c.view(&job).actors.iter().any(|a| a.state == ActorState::Failing) {
            c.advance(100);
        }
        let view = c.view(&job);
        let failed = view.actors.iter().find(|a| a.attempt == 1 && a.state == ActorState::Scheduling);
        let (job_at, actor_at) = (view.restart_at_ms, failed.and_then(|a| a.restart_at_ms));
        let at = match mode {
            RestartMode::Gang => {
                assert!(view.actors.iter().all(|a| a.restart_at_ms.is_none()), "{mode:?}: the job's, not an actor's");
                job_at
            }
            RestartMode::Actor => {
                assert_eq!(job_at, None, "{mode:?}: the actor's, not the job's");
                actor_at
            }
        };
        let wait_ms =
            at.unwrap_or_else(|| panic!("{mode:?}: a restart time while backing off: {view:#?}")) - c.now.as_ms();
        assert!((5_000..=10_000).contains(&wait_ms), "{mode:?}: equal jitter, half to all of 10 s: {wait_ms}");
        let told = c.job_events().any(|e| matches!(e, JobEvent::BackingOff { until_ms, .. } if Some(*until_ms) == at));
        assert!(told, "{mode:?}: followers are told when it restarts");
        c.advance(wait_ms);
        let view = c.view(&job);
        assert!(view.actors.iter().all(|a| a.state == ActorState::Running), "{mode:?}: restarted: {view:?}");
        assert!(view.restart_at_ms.is_none() && view.actors.iter().all(|a| a.restart_at_ms.is_none()), "{mode:?}");
    }
}
