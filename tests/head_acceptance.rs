//! The core's acceptance scenarios, each driving the head with explicit inputs.

mod support;

use ftdrive::config::HeadConfig;
use ftdrive::driver::{ActorState, Budget, BudgetKind, Cause, JobState};
use ftdrive::event::JobEvent;
use ftdrive::protocol::AttemptKey;
use ftdrive::protocol::ExitStatus;
use ftdrive::spec::RestartMode;
use ftdrive::{JobId, Labels, Resources};
use std::collections::BTreeSet;
use support::{config, cpu, spec, TestCluster};

use ActorState::*;

fn three_node_cluster() -> TestCluster {
    let mut c = TestCluster::new(config());
    for n in ["n1", "n2", "n3"] {
        c.join(n, cpu(1));
    }
    c
}

fn replacement_beats_pending_job(b_priority: i32) {
    let mut c = three_node_cluster();
    let a = c.submit(spec("a", 3, 3));
    assert_eq!(c.view(&a).state, JobState::Running);
    let mut b_spec = spec("b", 1, 1);
    b_spec.priority = b_priority;
    let b = c.submit(b_spec);
    c.advance(1_000);
    assert_eq!(c.view(&b).state, JobState::Pending);

    let on_n2 = c.view(&a).actors.iter().position(|x| x.node.as_deref() == Some("n2")).unwrap();
    let actor = format!("{a}/{on_n2}");
    c.crash("n2");
    c.advance(5_000);
    assert_eq!(c.actor_state(&a, on_n2 as u32), Scheduling, "waiting for a replacement bundle");
    assert_eq!(c.view(&a).actors[on_n2].node, None, "waiting, it shows no node: the dead n2 is not where it will run");
    c.join("n4", cpu(1));
    c.advance(1_000);

    let view = c.view(&a);
    assert_eq!(view.actors[on_n2].node.as_deref(), Some("n4"), "the lost bundle went to n4");
    assert_eq!(view.actors[on_n2].state, Running);
    assert_eq!(c.view(&b).state, JobState::Pending, "the pending job did not get n4");
    let path = c.transitions(&actor);
    assert_eq!(&path[path.len() - 3..], &[(Running, Failing), (Failing, Scheduling), (Scheduling, Running)]);
    let failing = c.job_events().find_map(|e| match e {
        JobEvent::Transition { actor: a, to: Failing, node, rank, .. } if *a == actor => Some((node, rank)),
        _ => None,
    });
    let (node, rank) = failing.expect("a transition to FAILING");
    assert_eq!(node.as_ref().map(|n| n.as_str()), Some("n2"), "the lost node is named though its bundle is gone");
    assert!(rank.is_some(), "and the rank that ran there");
    let entry = view.ledger.iter().find(|e| e.actor == actor).expect("ledger entry for the lost attempt");
    assert_eq!((entry.cause, entry.budget), (Cause::NodeLost, BudgetKind::System));
    assert!(entry.evidence.contains("n2 missed heartbeats"), "{}", entry.evidence);
    assert_eq!(entry.remaining.system.as_i64(), 2);
}

#[test]
fn lost_bundle_is_replaced_before_a_pending_job() {
    replacement_beats_pending_job(0);
}

#[test]
fn replacement_wins_even_against_a_higher_priority_pending_job() {
    replacement_beats_pending_job(100);
}

#[test]
fn strict_spread_gang_is_placed_whole_or_not_at_all() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(4));
    c.join("n2", cpu(4));
    let job = c.submit(spec("g", 3, 3));
    c.advance(2_000);
    let view = c.view(&job);
    assert_eq!(view.state, JobState::Pending);
    assert!(view.actors.iter().all(|a| a.node.is_none()), "nothing placed: {:?}", view.actors);
    assert!(c.placements_after(0).is_empty());
    assert_eq!(c.head.scheduler().allocated(0), Resources::new(), "no capacity held by a half gang");

    let joined = c.mark();
    c.join("n3", cpu(4));
    let placed = c.placements_after(joined);
    assert_eq!(placed.len(), 3, "all three at once: {placed:?}");
    let mut nodes: Vec<&str> = placed.iter().map(|(_, n)| n.as_str()).collect();
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2", "n3"]);
    assert_eq!(c.view(&job).state, JobState::Running);
}

#[test]
fn elastic_job_grows_with_a_membership_change_that_charges_nothing() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    let job = c.submit(spec("e", 1, 2));
    assert_eq!(c.cycles_formed(), vec![(1, "10.0.0.1".into(), vec![format!("{job}/0")])]);
    c.join("n2", cpu(1));
    c.advance(3_000);

    let view = c.view(&job);
    assert_eq!(view.cycles, 2);
    assert!(view.actors.iter().all(|a| a.state == Running));
    let cycles = c.cycles_formed();
    assert_eq!(cycles[1].2, vec![format!("{job}/0"), format!("{job}/1")], "survivor keeps rank 0, newcomer appends");
    let entry = &view.ledger[0];
    assert_eq!((entry.cause, entry.budget, entry.cycle), (Cause::MembershipChange, BudgetKind::None, 1));
    assert_eq!(
        view.remaining,
        ftdrive::driver::Remaining { user: Budget::Left(0), system: Budget::Left(3), preemption: Budget::Unlimited }
    );
    let counts: Vec<String> =
        c.worker_envs(&job).into_iter().map(|(_, env)| env["TORCHELASTIC_RESTART_COUNT"].clone()).collect();
    assert_eq!(counts, ["0", "0"], "as torchrun counts, a membership change is no restart");
}

/// `TORCHELASTIC_RESTART_COUNT` counts restarts after failures charged to the user budget,
/// which `TORCHELASTIC_MAX_RESTARTS` bounds, as torchrun's does: never past it.
#[test]
fn the_restart_count_is_torchruns_failures_within_the_user_budget() {
    let mut c = three_node_cluster();
    let mut s = spec("rc", 2, 2);
    s.retries.user = Budget::from_i64(1).unwrap();
    let job = c.submit(s);
    c.crash("n2");
    c.advance(5_000);
    let count = |c: &TestCluster| {
        let envs = c.worker_envs(&job);
        assert!(!envs.is_empty(), "the job runs");
        let counts: BTreeSet<String> = envs.iter().map(|(_, env)| env["TORCHELASTIC_RESTART_COUNT"].clone()).collect();
        (counts, envs[0].1["TORCHELASTIC_MAX_RESTARTS"].clone(), c.view(&job).cycles)
    };
    assert_eq!(count(&c), (BTreeSet::from(["0".to_string()]), "1".to_string(), 2), "a lost node is the system's");
    c.exit_rank(&job, 1, 1);
    c.advance(5_000);
    assert_eq!(count(&c), (BTreeSet::from(["1".to_string()]), "1".to_string(), 3), "a user failure is a restart");
}

#[test]
fn actor_mode_late_actor_never_starts_once_terminating() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    c.join("n2", cpu(1));
    let mut s = spec("torchx", 2, 3);
    s.restart = RestartMode::Actor;
    let job = c.submit(s);
    assert_eq!(c.view(&job).state, JobState::Running);
    c.exit_actor(&job, 0, ExitStatus::code(0));
    assert_eq!(c.actor_state(&job, 0), TaskCompleted);

    // Its request went with the completion: a node joining now is not taken and given back.
    let mark = c.mark();
    c.join("n3", cpu(1));
    assert_eq!(c.placements_after(mark), [], "nothing asks for n3");
    assert!(!c.job_events().any(|e| matches!(e, JobEvent::ReleasedUnused { .. })));
    assert_eq!(c.view(&job).actors[2].attempt, 0, "never started");
    assert!(c.processes_on("n3").is_empty());

    c.exit_actor(&job, 1, ExitStatus::code(0));
    let view = c.view(&job);
    assert_eq!(view.state, JobState::Succeeded);
    assert_eq!(view.actors[2].state, Stopped);
    assert!(c.head.scheduler().pg(1).is_none(), "no bundle held after the job ended");
}

/// Once the job is ending, a rank 0 that ran and is retried on a new node serves the
/// rendezvous there, on its new bundle's port: the old bundle's port went back to its pool,
/// and the address was a node it no longer runs on (swarm seed 31269).
#[test]
fn actor_mode_rank0_retried_while_terminating_moves_the_rendezvous_with_it() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    c.join("n2", cpu(1));
    let mut s = spec("torchx", 2, 2);
    s.restart = RestartMode::Actor;
    let job = c.submit(s);
    c.exit_actor(&job, 1, ExitStatus::code(0));
    c.join("n3", cpu(1));
    c.crash("n1");
    c.advance(6_000);
    let cycles = c.cycles_formed();
    let (cycle, master, _) = cycles.last().cloned().expect("a cycle");
    let (node, env) = c.worker_envs(&job).pop().expect("rank 0 runs again");
    assert_ne!(node, "n1");
    assert_eq!((cycle, env["RANK"].as_str()), (2, "0"), "a new cycle for the moved rendezvous: {cycles:?}");
    assert_eq!(env["MASTER_ADDR"], master, "rank 0 serves it where it runs");
    assert_ne!(master, "10.0.0.1");
    c.exit_actor(&job, 0, ExitStatus::code(0));
    assert_eq!(c.view(&job).state, JobState::Succeeded);
}

#[test]
fn gang_recovers_from_losing_rank_zero_with_a_new_master() {
    let mut c = three_node_cluster();
    c.join("n4", cpu(1));
    let job = c.submit(spec("g", 3, 3));
    let first = c.cycles_formed()[0].clone();
    assert_eq!(first.1, "10.0.0.1", "rank 0 on n1");
    c.crash("n1");
    c.advance(6_000);

    let cycles = c.cycles_formed();
    let second = cycles.last().unwrap();
    assert_eq!(second.0, 2);
    assert_eq!(second.1, "10.0.0.4", "rank 0 now on n4");
    assert_eq!(second.2, first.2, "actor 0 keeps rank 0 on its new bundle");
    assert!(c.processes_on("n2").iter().all(|(_, _, master)| master == "10.0.0.4"));
    c.finish(&job);
    assert_eq!(c.view(&job).state, JobState::Succeeded);
}

#[test]
fn hot_spare_takes_the_failed_rank_and_ends_gracefully() {
    let mut c = three_node_cluster();
    let mut s = spec("hs", 2, 2);
    s.hot_spares = 1;
    s.retries.user = Budget::from_i64(1).unwrap();
    let job = c.submit(s);
    assert_eq!(c.actor_state(&job, 2), Standby);
    assert_eq!(c.view(&job).actors[2].standby_since_ms, Some(c.now.as_ms()), "standing by since its placement");
    let failed_at = c.mark();
    let failed_ms = c.now.as_ms();
    c.exit_rank(&job, 1, 1);
    c.advance(1_000);

    let view = c.view(&job);
    assert_eq!(view.actors[2].standby_since_ms, None, "promoted: it waits no more");
    assert!(view.actors[1].standby_since_ms.is_some_and(|t| t >= failed_ms), "{:?}", view.actors[1]);
    assert_eq!(view.cycles, 2);
    assert_eq!(c.cycles_formed()[1].2, vec![format!("{job}/0"), format!("{job}/2")], "the spare holds rank 1");
    assert!(c.placements_after(failed_at).is_empty(), "no scheduling wait: nothing was placed");
    assert_eq!(view.actors[1].state, Standby, "the failed actor is the new spare");
    assert_eq!((view.actors[1].rank, view.actors[2].rank), (None, Some(1)), "rank 1 is the promoted spare's alone");
    assert!(c.job_events().any(|e| matches!(e, JobEvent::Promoted { .. })));

    c.finish(&job);
    let view = c.view(&job);
    assert_eq!(view.state, JobState::Succeeded);
    assert_eq!(view.actors[1].state, TaskCompleted);
    assert!(view.actors.iter().all(|a| a.standby_since_ms.is_none()), "{:?}", view.actors);
    assert_eq!(c.transitions(&format!("{job}/1")).last(), Some(&(Standby, TaskCompleted)));
    for node in ["n1", "n2", "n3"] {
        let ix = c.head.scheduler().node_ix(&node.into()).unwrap();
        assert_eq!(c.head.scheduler().allocated(ix), Resources::new(), "{node} still holds something");
    }
}

/// A lost rank's actor re-placed as the spare stands by on another node; ended with the job,
/// it is shown there, not on the DEAD node of its last attempt (its stand-by made no entry).
#[test]
fn a_spare_that_stood_by_and_ended_is_shown_where_it_stood_by() {
    let mut c = three_node_cluster();
    c.join("n4", cpu(1));
    let mut s = spec("hs", 2, 2);
    s.hot_spares = 1;
    let job = c.submit(s);
    let node_of = |c: &TestCluster, actor: usize| c.view(&job).actors[actor].node.clone().unwrap();
    let lost = node_of(&c, 1);
    c.crash(&lost);
    c.advance(10_000);
    assert_eq!(c.actor_state(&job, 1), Standby, "{:?}", c.view(&job).actors);
    let stood_by = node_of(&c, 1);
    assert_ne!(stood_by, lost);
    c.finish(&job);
    let view = c.view(&job);
    assert_eq!(view.state, JobState::Succeeded);
    assert_eq!((view.actors[1].state, view.actors[1].node.as_deref()), (TaskCompleted, Some(stood_by.as_str())));

    // A spare that never ran is shown where it stood by too.
    let mut c = three_node_cluster();
    let mut s = spec("idle-spare", 2, 2);
    s.hot_spares = 1;
    let job = c.submit(s);
    let stood_by = node_of_in(&c, &job, 2);
    c.finish(&job);
    assert_eq!(c.view(&job).actors[2].node, Some(stood_by), "{:?}", c.view(&job).actors);
}

fn node_of_in(c: &TestCluster, job: &ftdrive::JobId, actor: usize) -> String {
    c.view(job).actors[actor].node.clone().unwrap()
}

#[test]
fn a_node_cannot_report_on_another_nodes_attempt() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    c.join("n2", cpu(1));
    let job = c.submit(spec("mine", 1, 1));
    let key = c.running_of(&job).next().unwrap().clone();
    let owner = c.view(&job).actors[0].node.clone().unwrap();
    let other: ftdrive::NodeId = if owner == "n1" { "n2" } else { "n1" }.into();
    let before = c.view(&job);
    let forged =
        ftdrive::head::Input::ProcessExited { node: other.clone(), key: key.clone(), status: ExitStatus::code(1) };
    let refusal = c.refused_input(forged);
    assert!(matches!(refusal, ftdrive::head::Rejected::NotItsAttempt(ref n, ref k) if *n == other && *k == key));
    let forged_start =
        ftdrive::head::Input::SpawnFailed { node: other, key, message: "forged".into(), node_fault: false };
    c.refused_input(forged_start);
    assert_eq!(c.view(&job), before, "nothing changed");
}

#[test]
fn exit_of_an_old_attempt_changes_nothing() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    let mut s = spec("stale", 1, 1);
    s.retries.user = Budget::from_i64(2).unwrap();
    let job = c.submit(s);
    let first = c.running_of(&job).next().unwrap().clone();
    c.exit_rank(&job, 0, 1);
    c.advance(1_000);
    assert_eq!(c.view(&job).actors[0].attempt, 2);
    let before = c.view(&job);

    let old =
        ftdrive::head::Input::ProcessExited { node: "n1".into(), key: first.clone(), status: ExitStatus::code(1) };
    c.input(old);
    assert_eq!(c.view(&job), before, "nothing changed");
    assert!(c.job_events().any(|e| matches!(e, JobEvent::Stale { key, .. } if *key == first)));
}

#[test]
fn infeasible_bundle_names_the_resource_and_the_largest_node() {
    let mut c = TestCluster::new(config());
    c.join("n1", Resources::units(&[("cpu", 8), ("gpu", 4)]));
    c.join("n2", Resources::units(&[("cpu", 8), ("gpu", 2)]));
    let mut s = spec("big", 1, 1);
    s.bundle = Resources::units(&[("gpu", 8)]);
    let job = c.submit(s);
    let view = c.view(&job);
    assert_eq!(view.state, JobState::Pending);
    assert_eq!(view.infeasible.as_deref(), Some("infeasible: bundle needs gpu=8, largest node has gpu=4 (n1)"));

    c.join("n3", Resources::units(&[("gpu", 8)]));
    assert_eq!(c.view(&job).infeasible, None, "re-checked when a node joins");
    assert_eq!(c.view(&job).state, JobState::Running);
}

/// A gang wider than the cluster: the view's reason counts the nodes as they join, the job's
/// events say only when it turns infeasible and feasible, and the gang runs once it fits.
#[test]
fn a_gang_wider_than_the_cluster_shows_the_count_until_it_fits() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    let job = c.submit(spec("wide", 3, 3));
    let only = |n: u32| {
        format!(
            "infeasible: min_nodes 3 with STRICT_SPREAD needs 3 distinct nodes, and only {n} node(s), DEAD ones included, could hold a bundle; \
             add nodes, or lower min_nodes"
        )
    };
    assert_eq!(c.view(&job).infeasible, Some(only(1)));
    c.join("n2", cpu(1));
    assert_eq!(c.view(&job).infeasible, Some(only(2)), "the count follows the cluster");
    c.join("n3", cpu(1));
    let view = c.view(&job);
    assert_eq!((view.infeasible, view.state), (None, JobState::Running));
    let turns: Vec<Option<String>> = c
        .job_events()
        .filter_map(|e| match e {
            JobEvent::Feasibility { infeasible } => Some(infeasible.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(turns, [Some(only(1)), None]);
}

/// A job the cluster could hold but is busy for says why it waits and who holds the room; a
/// restarted head, which places nothing until its agents report, says that instead.
#[test]
fn a_job_waiting_for_room_says_who_holds_it_and_why_nothing_moves() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    c.join("n2", cpu(1));
    let running = c.submit(spec("first", 2, 2));
    let waiting = c.submit(spec("second", 2, 2));
    assert_eq!(c.view(&running).waiting, None);
    assert_eq!(
        c.view(&waiting).waiting,
        Some(format!(
            "waiting for capacity: needs 2 nodes with room for a bundle of cpu=1 (STRICT_SPREAD), and 0 of the 2 \
             matching node(s) have it now; in use by {running}"
        ))
    );

    c.crash("n2");
    c.restart_head();
    assert!(c.head.recovering(), "n2 has not reported");
    let why = c.view(&waiting).waiting.unwrap();
    assert!(why.starts_with("waiting for the agents to report after the head's restart"), "{why}");
    assert!(why.contains("(1 still to report)"), "{why}");

    c.advance(config().node_timeout_ms + 1_000);
    assert!(!c.head.recovering());
    let lost = &c.view(&running).ledger[0];
    let says = "node n2 did not report to the restarted head within its recovery window";
    assert!(lost.evidence.starts_with(says), "the loss is the restart's silence: {}", lost.evidence);
    let replacement = c.view(&running).waiting.unwrap();
    assert!(replacement.starts_with(&format!("waiting for capacity: the replacement for {running}/")), "{replacement}");
    let why = c.view(&waiting).waiting.unwrap();
    assert!(why.contains("0 of the 1 matching node(s) have it now (besides them 1 DEAD)"), "{why}");
    c.join("n3", cpu(1));
    assert_eq!(c.view(&running).waiting, None, "the replacement went to n3");
}

#[test]
fn selector_nobody_matches_is_infeasible() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    let mut s = spec("sel", 1, 1);
    s.node_selector = Labels::from([("zone".to_string(), "b".to_string())]);
    let job = c.submit(s);
    assert_eq!(c.view(&job).infeasible.as_deref(), Some("infeasible: no node matches node_selector zone=b"));
}

/// A head that restarts re-adopts a running job from what it made durable: the same attempts
/// in the same cycle, nothing restarted or charged; an attempt that ended while the head was
/// away enters the ledger with its real cause.
#[test]
fn a_restarted_head_readopts_running_attempts_and_charges_nothing() {
    let mut c = TestCluster::new(config());
    for n in ["n1", "n2", "n3"] {
        c.join(n, cpu(1));
    }
    let mut s = spec("durable", 2, 2);
    s.retries.user = Budget::from_i64(2).unwrap();
    let job = c.submit(s);
    c.exit_rank(&job, 0, 1);
    c.advance(1_000);
    let before = c.view(&job);
    assert_eq!((before.actors[0].attempt, before.cycles, before.remaining.user.as_i64()), (2, 2, 1));
    let running: Vec<AttemptKey> = c.running_of(&job).cloned().collect();

    c.restart_head();
    assert!(!c.head.recovering(), "every node reported: the recovery window closed early");
    let after = c.view(&job);
    assert_eq!(after.ledger, before.ledger, "nothing charged, nothing forgotten");
    assert_eq!(c.running_of(&job).cloned().collect::<Vec<_>>(), running, "the same attempts run");
    assert_eq!((after.cycles, after.actors[0].attempt, after.actors[0].state), (2, 2, ActorState::Running));
    c.advance(5_000);
    assert_eq!(c.view(&job).ledger, before.ledger, "no restart happened later either");
    c.finish(&job);
    let done = c.view(&job);
    assert_eq!(done.state, JobState::Succeeded);
    assert!(done.ledger[before.ledger.len()..].iter().all(|e| e.cause == Cause::Completed && e.cycle == 2));
}

/// DU-3: a head restarted with a shorter node timeout while an agent is down waits for that
/// agent as long as its supervisors keep its attempts (the old head's timeout): a rank
/// re-placed sooner would run beside its first attempt. Once every node reported, the bound
/// is the new head's own.
#[test]
fn a_head_restarted_with_a_shorter_node_timeout_waits_the_grace_the_supervisors_hold() {
    let long = HeadConfig { node_timeout_ms: 10_000, ..config() };
    let mut c = TestCluster::new(long.clone());
    c.join("n1", cpu(1));
    c.join("n2", cpu(1));
    let job = c.submit(spec("upgraded", 1, 1));
    let node = c.view(&job).actors[0].node.clone().expect("placed");
    c.stop_agent(&node);
    let short = HeadConfig { node_timeout_ms: 2_500, ..long };
    c.restart_head_with(short.clone());
    c.advance(9_000);
    assert!(c.view(&job).ledger.is_empty(), "re-placed while its supervisors may run it: {:?}", c.view(&job).ledger);
    c.restart_agent(&node);
    c.advance(1_000);
    assert!(c.view(&job).ledger.is_empty());
    assert_eq!(c.running_of(&job).count(), 1, "the first attempt runs on, re-attached");
    c.restart_head_with(short);
    assert!(!c.head.recovering(), "every node reported");
    c.stop_agent(&node);
    c.advance(3_000);
    let lost = c.view(&job).ledger;
    assert_eq!(lost.iter().map(|e| e.cause).collect::<Vec<_>>(), [Cause::NodeLost], "the new timeout rules now");
}

/// HB-1: a start whose confirmation was lost is confirmed by the next heartbeat that lists it,
/// durably; so a machine that comes back with nothing, even to a restarted head, has its
/// attempt counted lost and replaced, instead of a job waiting for an end that never comes.
#[test]
fn a_start_whose_confirmation_was_lost_is_confirmed_by_a_heartbeat() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    c.join("n2", cpu(1));
    c.agents.get_mut("n1").unwrap().loses_started = true;
    let job = c.submit(spec("unconfirmed", 1, 1));
    let sent = &c.view(&job).actors[0];
    assert_eq!((sent.node.as_deref(), sent.state, sent.starting), (Some("n1"), Running, true), "not confirmed yet");
    let confirmed = |c: &TestCluster| c.job_events().filter(|e| matches!(e, JobEvent::StartConfirmed { .. })).count();
    assert_eq!(confirmed(&c), 0, "nothing confirmed the start yet");
    c.advance(1_000); // a heartbeat lists it
    assert!(!c.view(&job).actors[0].starting, "confirmed");
    c.advance(3_000); // and the next ones again
    let said: Vec<&JobEvent> = c.job_events().filter(|e| matches!(e, JobEvent::StartConfirmed { .. })).collect();
    let name = c.view(&job).actors[0].name.clone();
    assert_eq!(
        said,
        [&JobEvent::StartConfirmed { actor: name, attempt: 1, node: "n1".into() }],
        "told once, for followers"
    );
    c.restart_head();
    assert!(!c.view(&job).actors[0].starting, "confirmed, durably");
    c.reboot_fresh("n1");
    let lost = c.view(&job).ledger;
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!((lost[0].cause, lost[0].budget), (Cause::NodeLost, BudgetKind::System));
    assert!(lost[0].evidence.contains("was gone when its agent restarted"), "{}", lost[0].evidence);
    c.advance(5_000);
    assert_eq!(c.actor_state(&job, 0), Running, "started again");
}

/// An agent's report to a restarted head can arrive after messages it sent later (the network
/// may reorder them): an attempt this head started since its restart is not judged by a report
/// written before the start reached the agent.
#[test]
fn a_report_overtaken_by_a_later_start_loses_nothing() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    let mut s = spec("overtaken", 1, 1);
    s.retries.user = Budget::from_i64(2).unwrap();
    let job = c.submit(s);
    let first: AttemptKey = c.running_of(&job).next().expect("running").clone();
    let incarnation = c.agents["n1"].protocol.incarnation();

    c.head = ftdrive::head::Head::restore(c.head.config().clone(), c.store.read(), c.now);
    assert!(c.head.recovering());
    c.exit_rank(&job, 0, 1); // reaches the new head before the agent's report does
    c.advance(500);
    let second: AttemptKey = c.running_of(&job).next().expect("restarted after its backoff").clone();
    assert_eq!(second.attempt, 2);
    let written_before_the_start = ftdrive::protocol::Registration {
        node: ftdrive::NodeId::new("n1"),
        incarnation,
        resources: cpu(1),
        labels: ftdrive::Labels::new(),
        addr: "10.0.0.1".into(),
        devices: None,
        port_space: String::new(),
        listening: Vec::new(),
        log_url: String::new(),
        identity: String::new(),
        cluster: String::new(),
        problem: None,
        running: Vec::new(),
        ended: vec![first],
    };
    c.input(ftdrive::head::Input::Register(Box::new(written_before_the_start)));
    assert!(!c.head.recovering(), "the report came");
    let view = c.view(&job);
    let causes: Vec<Cause> = view.ledger.iter().map(|e| e.cause).collect();
    assert_eq!(causes, [Cause::UserError], "attempt 2 was not taken for lost: {:?}", view.ledger);
    assert_eq!((view.actors[0].attempt, view.actors[0].state), (2, ActorState::Running));
}

/// An agent restarted to offer other labels or more resources keeps its running work, as a
/// kubelet restarted with new labels keeps its pods: nothing is lost, charged or started twice,
/// and what is placed from then on sees the new offer. One that no longer fits what runs there
/// is a new machine.
#[test]
fn an_agent_restarted_with_other_labels_keeps_its_running_work() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(2));
    let job = c.submit(spec("steady", 1, 1));
    let running: Vec<AttemptKey> = c.running_of(&job).cloned().collect();
    let gpu_type = Labels::from([("gpu-type".to_string(), "a100".to_string())]);
    c.restart_agent_offering("n1", cpu(4), gpu_type.clone());
    c.advance(5_000);
    let view = c.view(&job);
    assert!(view.ledger.is_empty(), "nothing lost or charged: {:?}", view.ledger);
    assert_eq!(c.running_of(&job).cloned().collect::<Vec<_>>(), running, "the same attempt runs, alone");
    assert_eq!(c.agents["n1"].running.len(), 1);
    let node = c.head.node_view(&ftdrive::NodeId::new("n1"), c.now).unwrap();
    assert_eq!(
        (node.labels, node.resources.milli("cpu"), node.allocated.milli("cpu")),
        (gpu_type.clone(), 4_000, 1_000)
    );
    let mut wants_a100 = spec("a100", 1, 1);
    wants_a100.node_selector = gpu_type;
    let placed = c.submit(wants_a100);
    assert_eq!(c.view(&placed).actors[0].state, Running, "the new label and the added cpu are offered");

    // Fewer resources than what runs there: a new machine, and what ran there is lost.
    c.restart_agent_offering("n1", Resources::units(&[("cpu", 1)]), Labels::new());
    c.advance(5_000);
    let lost: Vec<Cause> = c.view(&job).ledger.iter().map(|e| e.cause).collect();
    assert_eq!(lost, [Cause::NodeLost]);
}

/// `--retain-finished` and `--retain-finished-hours`: a finished job is kept until newer ones
/// push it past the count or it grows older than the age, in memory and in what a restarted
/// head reads back; a running job is never dropped, however old.
#[test]
fn finished_jobs_are_forgotten_by_count_and_by_age_and_stay_forgotten_after_a_restart() {
    let retain = ftdrive::config::HeadConfig { retain_finished: 2, retain_finished_ms: 60_000, ..config() };
    let mut c = TestCluster::new(retain);
    c.join("n1", cpu(4));
    let long = c.submit(spec("long", 1, 1));
    let mut done = Vec::new();
    for name in ["a", "b", "c"] {
        let job = c.submit(spec(name, 1, 1));
        c.finish(&job);
        done.push(job);
        c.advance(10_000);
    }
    let known = |c: &TestCluster| c.head.job_views().into_iter().map(|v| v.id.to_string()).collect::<Vec<_>>();
    let ids = |jobs: &[&ftdrive::JobId]| jobs.iter().map(|j| j.to_string()).collect::<Vec<_>>();
    assert_eq!(known(&c), ids(&[&long, &done[1], &done[2]]), "the count keeps the newest two");
    c.advance(41_000);
    assert_eq!(known(&c), ids(&[&long, &done[2]]), "b finished 61 s ago");
    c.restart_head();
    assert_eq!(known(&c), ids(&[&long, &done[2]]), "what was forgotten is gone from disk too");
    c.advance(10_000);
    assert_eq!(known(&c), ids(&[&long]), "c too; the running job stays, older than both");
    assert_eq!(c.view(&long).state, JobState::Running);
}

/// A listing shows the newest jobs in the states asked for, in submission order, and builds
/// no other job's view.
#[test]
fn a_listing_keeps_the_newest_jobs_in_the_states_asked_for() {
    let mut c = three_node_cluster();
    let ids: Vec<_> = ["a", "b", "c", "d"].iter().map(|n| c.submit(spec(n, 1, 1))).collect();
    c.finish(&ids[0]);
    c.finish(&ids[2]);
    let states = |views: Vec<ftdrive::view::JobView>| -> Vec<(String, JobState)> {
        views.into_iter().map(|v| (v.name, v.state)).collect()
    };
    let all = c.head.job_views();
    assert_eq!(all.len(), 4);
    let running = c.head.job_views_where(|s| s == JobState::Running, usize::MAX);
    assert_eq!(states(running), [("b".into(), JobState::Running), ("d".into(), JobState::Running)]);
    let newest_done = c.head.job_views_where(JobState::is_terminal, 1);
    assert_eq!(states(newest_done), [("c".into(), JobState::Succeeded)]);
    let newest_two = c.head.job_views_where(|_| true, 2);
    assert_eq!(states(newest_two), [("c".into(), JobState::Succeeded), ("d".into(), JobState::Running)]);
    assert_eq!(JobState::parse("running"), Some(JobState::Running));
    assert_eq!(JobState::parse("RUNNIN"), None);
}

/// A listing pages back through older jobs: each page says where the next one ends (its
/// oldest job) while older jobs match, and the last page says nothing.
#[test]
fn a_listing_cut_by_its_limit_names_where_the_older_jobs_begin() {
    let mut c = three_node_cluster();
    let ids: Vec<JobId> = ["a", "b", "c", "d", "e"].iter().map(|n| c.submit(spec(n, 1, 1))).collect();
    c.finish(&ids[1]);
    let names = |list: &ftdrive::head::JobList| -> Vec<String> { list.views.iter().map(|v| v.name.clone()).collect() };
    fn before(job: Option<&str>) -> impl Fn(&JobId, JobState) -> bool + '_ {
        move |id, _| job.is_none_or(|b| id.number() < JobId::new(b).number())
    }
    let newest = c.head.job_list(before(None), 2);
    assert_eq!((names(&newest), newest.older.as_deref()), (vec!["d".into(), "e".into()], Some(ids[3].as_str())));
    let next = c.head.job_list(before(newest.older.as_deref()), 2);
    assert_eq!((names(&next), next.older.as_deref()), (vec!["b".into(), "c".into()], Some(ids[1].as_str())));
    let last = c.head.job_list(before(next.older.as_deref()), 2);
    assert_eq!((names(&last), last.older), (vec!["a".into()], None), "nothing older");
    let whole = c.head.job_list(before(None), 5);
    assert_eq!((whole.views.len(), whole.older), (5, None), "a limit met exactly leaves nothing older");
    let running_before_c = c.head.job_list(|id, s| s == JobState::Running && id.number() < ids[2].number(), 1);
    assert_eq!((names(&running_before_c), running_before_c.older), (vec!["a".into()], None), "b ended");
}

/// `max_actors` bounds the actors of every job held together: a small spec asks for many, and
/// `max_jobs` alone let a client fill the head's memory. A refused submission changes nothing;
/// once a job is forgotten its actors no longer count.
#[test]
fn the_actors_of_the_jobs_held_are_bounded_and_forgotten_ones_free_room() {
    let bounded = HeadConfig { max_actors: 10, retain_finished: 0, ..config() };
    let mut c = TestCluster::new(bounded);
    c.join("n1", cpu(8));
    let first = c.submit(spec("six", 6, 6));
    let refusal = c.refused_input(ftdrive::head::Input::Submit { id: None, spec: Box::new(spec("five", 5, 5)) });
    let said = refusal.to_string();
    assert!(
        said.contains("the job has 5 actors and the head holds 6 of other jobs, and it keeps at most 10"),
        "{said}"
    );
    assert_eq!(c.head.job_count(), 1, "the refused submission changed nothing");
    c.stop(&first);
    c.advance(20_000);
    assert_eq!(c.head.job_count(), 0, "the stopped job is forgotten at once (retain_finished 0)");
    c.submit(spec("five", 5, 5));
    c.head.check_invariants();
}
