//! Drains and their withdrawal: the operator's `ftdrive drain` is a cordon on the node that
//! lasts until `ftdrive undrain` (MB-1), even across the node's death; a machine that announced
//! its own departure cannot be undrained.

mod support;

use ftdrive::driver::{ActorState, Cause};
use ftdrive::event::Event;
use ftdrive::head::{Effect, Input, Rejected, Reply};
use ftdrive::protocol::ExitStatus;
use ftdrive::scheduler::NodeState;
use ftdrive::NodeId;
use support::{config, cpu, spec, TestCluster};

fn two_nodes_one_job() -> (TestCluster, ftdrive::JobId) {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    c.join("n2", cpu(1));
    let job = c.submit(spec("a", 1, 1));
    assert_eq!(c.view(&job).actors[0].node.as_deref(), Some("n1"));
    (c, job)
}

fn node_events(c: &TestCluster, node: &str) -> Vec<(NodeState, String)> {
    c.effects
        .iter()
        .filter_map(|(_, e)| match e {
            Effect::Notify(Event::NodeState { node: n, state, evidence }) if n.as_str() == node => {
                Some((*state, evidence.clone()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn an_undrained_node_takes_new_work_and_what_the_drain_moved_stays_moved() {
    let (mut c, a) = two_nodes_one_job();
    c.drain("n1", 30_000);
    c.advance(1_000);
    assert_eq!(c.view(&a).actors[0].node.as_deref(), Some("n2"), "the drain moved it");
    let b = c.submit(spec("b", 1, 1));
    c.advance(1_000);
    assert_eq!(c.view(&b).actors[0].state, ActorState::Scheduling, "n1 is draining, n2 is taken");

    assert_eq!(c.undrain("n1"), Ok(Reply::Done));
    assert_eq!(c.node_state("n1"), NodeState::Alive);
    assert_eq!(c.view(&b).actors[0].node.as_deref(), Some("n1"), "placed on the undrained node");
    assert_eq!(c.view(&b).actors[0].state, ActorState::Running);
    let view = c.view(&a);
    assert_eq!(view.actors[0].node.as_deref(), Some("n2"), "the moved actor is not moved back");
    assert_eq!(view.ledger.len(), 1, "the undrain charged nothing: {:?}", view.ledger);
    assert_eq!(view.ledger[0].cause, Cause::Preempted);
    let last = node_events(&c, "n1").pop().expect("an event for n1");
    assert_eq!(last.0, NodeState::Alive);
    assert!(last.1.contains("ftdrive undrain"), "{}", last.1);
}

#[test]
fn undrain_answers_alive_unknown_and_dead_nodes_without_changing_anything() {
    let (mut c, _) = two_nodes_one_job();
    let before = c.effects.len();
    assert_eq!(c.undrain("n2"), Ok(Reply::Done), "an ALIVE node: nothing to withdraw");
    assert_eq!(c.effects.len(), before, "no event, nothing persisted");
    assert_eq!(c.undrain("n9"), Err(Rejected::NoSuchNode(NodeId::new("n9"))));
    c.crash("n2");
    c.advance(5_000);
    assert_eq!(c.node_state("n2"), NodeState::Dead);
    let before = c.effects.len();
    assert_eq!(c.undrain("n2"), Ok(Reply::Done), "a DEAD node nobody drained: nothing to withdraw");
    assert_eq!(c.effects.len(), before, "no event, nothing persisted");
    assert_eq!(c.node_state("n2"), NodeState::Dead);
}

/// A machine that announced its departure and came back at once (a spot instance replaced in
/// its name) registers before its old agent's notice arrives: the stale notice is refused, and
/// the new machine is not left DRAINING for good.
#[test]
fn a_notice_from_an_agent_run_older_than_the_nodes_is_refused() {
    let (mut c, _) = two_nodes_one_job();
    let old = c.agents["n1"].protocol.incarnation();
    c.reboot_fresh("n1");
    let late = Input::PreemptionNotice { node: NodeId::new("n1"), incarnation: Some(old), deadline_ms: 5_000 };
    assert!(matches!(c.refused_input(late), Rejected::StaleIncarnation(_)));
    assert_eq!(c.node_state("n1"), NodeState::Alive);
    let current = c.agents["n1"].protocol.incarnation();
    c.input(Input::PreemptionNotice { node: NodeId::new("n1"), incarnation: Some(current), deadline_ms: 5_000 });
    assert_eq!(c.node_state("n1"), NodeState::Draining, "the current run's notice is taken");
}

#[test]
fn an_operator_drain_outlasts_the_nodes_death_and_a_new_machine_in_its_name() {
    let (mut c, a) = two_nodes_one_job();
    c.drain("n1", 30_000);
    c.crash("n1"); // rebooted for maintenance, and slower than the node timeout
    c.advance(5_000);
    assert_eq!(c.node_state("n1"), NodeState::Dead);
    let (_, died) = node_events(&c, "n1").pop().expect("n1 died");
    assert!(died.ends_with("(it was draining at the operator's request)"), "not a notice: {died}");
    c.join("n1", cpu(1));
    assert_eq!(c.node_state("n1"), NodeState::Draining, "the cordon stands");
    let (state, evidence) = node_events(&c, "n1").pop().expect("an event for n1");
    assert_eq!(state, NodeState::Draining, "registered straight into DRAINING, never ALIVE");
    assert!(evidence.contains("ftdrive undrain n1"), "{evidence}");
    let b = c.submit(spec("b", 1, 1));
    c.advance(1_000);
    assert_eq!(c.view(&b).actors[0].state, ActorState::Scheduling, "nothing new is placed on n1");

    assert_eq!(c.undrain("n1"), Ok(Reply::Done));
    assert_eq!(c.node_state("n1"), NodeState::Alive);
    assert_eq!(c.view(&b).actors[0].node.as_deref(), Some("n1"));
    assert_eq!(c.view(&a).actors[0].node.as_deref(), Some("n2"), "the drained job moved for good");
}

#[test]
fn a_dead_node_may_be_drained_and_comes_back_draining_even_across_a_head_restart() {
    let (mut c, _) = two_nodes_one_job();
    c.crash("n2");
    c.advance(5_000);
    c.drain("n2", 30_000);
    assert_eq!(c.node_state("n2"), NodeState::Dead, "a drain does not bring a node back");
    c.restart_head();
    c.advance(5_000);
    c.join("n2", cpu(1));
    assert_eq!(c.node_state("n2"), NodeState::Draining, "the cordon of a DEAD node is durable");
    c.restart_head();
    assert_eq!(c.node_state("n2"), NodeState::Draining);
    assert_eq!(c.undrain("n2"), Ok(Reply::Done));
    assert_eq!(c.node_state("n2"), NodeState::Alive);
}

#[test]
fn undraining_a_dead_node_lifts_its_cordon() {
    let (mut c, _) = two_nodes_one_job();
    c.drain("n2", 30_000);
    c.crash("n2");
    c.advance(5_000);
    assert_eq!(c.undrain("n2"), Ok(Reply::Done));
    c.restart_head(); // the withdrawal is durable
    c.join("n2", cpu(1));
    assert_eq!(c.node_state("n2"), NodeState::Alive);
}

#[test]
fn draining_an_unknown_node_is_refused() {
    let (mut c, _) = two_nodes_one_job();
    let refusal = c.refused_input(Input::Drain { node: NodeId::new("n9"), deadline_ms: 1_000 });
    assert_eq!(refusal, Rejected::NoSuchNode(NodeId::new("n9")));
    c.join("n9", cpu(1));
    assert_eq!(c.node_state("n9"), NodeState::Alive, "the refusal left no cordon");
}

/// A deadline is bounded as every `*_ms` of a job spec is: u64::MAX would never come.
#[test]
fn a_drain_deadline_longer_than_a_day_is_refused_and_changes_nothing() {
    let (mut c, _) = two_nodes_one_job();
    let too_long = 86_400_001;
    let refusal = c.refused_input(Input::Drain { node: NodeId::new("n1"), deadline_ms: too_long });
    assert_eq!(
        refusal.to_string(),
        "the drain deadline is 86400001 ms; at most 86400000 (one day) is allowed; give a shorter one"
    );
    assert_eq!(c.node_state("n1"), NodeState::Alive, "nor drained nor cordoned");
    c.drain("n1", 86_400_000);
    assert_eq!(c.node_state("n1"), NodeState::Draining, "a day is allowed");
}

#[test]
fn a_machine_that_announced_its_departure_cannot_be_undrained_even_across_a_head_restart() {
    let (mut c, a) = two_nodes_one_job();
    c.agent_notice("n1", 60_000);
    assert_eq!(c.node_state("n1"), NodeState::Draining);
    let refusal = c.undrain("n1").expect_err("the machine is leaving");
    assert_eq!(refusal, Rejected::LeavingNode(NodeId::new("n1")));
    assert!(refusal.to_string().contains("its agent starts anew"), "{refusal}");
    assert_eq!(c.node_state("n1"), NodeState::Draining, "the refusal changed nothing");

    c.restart_head();
    assert_eq!(c.node_state("n1"), NodeState::Draining);
    assert_eq!(c.undrain("n1"), Err(Rejected::LeavingNode(NodeId::new("n1"))), "the agent said so again at once");
    c.advance(2_000);
    assert_eq!(c.view(&a).actors[0].node.as_deref(), Some("n2"));
}

#[test]
fn an_operator_drain_and_its_withdrawal_survive_a_head_restart() {
    let (mut c, _) = two_nodes_one_job();
    c.drain("n1", 30_000);
    c.restart_head();
    assert_eq!(c.node_state("n1"), NodeState::Draining, "the drain is durable");
    assert_eq!(c.undrain("n1"), Ok(Reply::Done), "and still the operator's to withdraw");
    c.restart_head();
    c.advance(5_000);
    assert_eq!(c.node_state("n1"), NodeState::Alive, "the withdrawal is durable too");
}

#[test]
fn an_undrain_of_a_leaving_machine_lifts_only_the_operators_drain() {
    let (mut c, _) = two_nodes_one_job();
    c.drain("n1", 30_000);
    assert_eq!(c.undrain("n1"), Ok(Reply::Done));
    c.agent_notice("n1", 10_000);
    assert_eq!(c.node_state("n1"), NodeState::Draining, "the machine's own notice drains it again");

    c.drain("n2", 30_000);
    c.agent_notice("n2", 10_000);
    assert_eq!(c.undrain("n2"), Ok(Reply::Done), "the operator's drain is lifted");
    assert_eq!(c.node_state("n2"), NodeState::Draining, "but the machine is still leaving");
    assert_eq!(c.undrain("n2"), Err(Rejected::LeavingNode(NodeId::new("n2"))), "nothing left to lift");
    c.crash("n2");
    c.advance(5_000);
    c.join("n2", cpu(1)); // the VM returns
    assert_eq!(c.node_state("n2"), NodeState::Alive, "no cordon: a new machine takes work");
}

#[test]
fn an_operator_drain_outlasts_an_agent_restart() {
    let (mut c, a) = two_nodes_one_job();
    c.drain("n1", 30_000);
    c.advance(1_000);
    assert!(c.processes_on("n1").is_empty(), "the drain moved the work: {:?}", c.processes_on("n1"));
    c.restart_agent("n1");
    c.advance(5_000);
    assert_eq!(c.node_state("n1"), NodeState::Draining, "a cordon lasts until the operator lifts it");
    assert_eq!(c.undrain("n1"), Ok(Reply::Done));
    assert_eq!(c.view(&a).ledger.len(), 1, "the restart charged nothing");
}

/// The preempted machine reboots on the same disk and owes an end it recorded before going:
/// it still comes back as a new machine, not as the leaving one kept DRAINING for good.
#[test]
fn a_departed_machine_that_owes_an_end_comes_back_as_a_new_machine() {
    let (mut c, job) = two_nodes_one_job();
    c.agents.get_mut("n1").unwrap().slow_to_stop = true; // it checkpoints in its grace
    c.agent_notice("n1", 5_000);
    c.link_down("n1");
    c.exit_actor(&job, 0, ExitStatus::signal(15, true)); // recorded; the report never left
    assert_eq!(c.agents["n1"].protocol.unacknowledged().count(), 1);
    c.reboot("n1");
    assert_eq!(c.node_state("n1"), NodeState::Alive, "the preemption happened: a new machine");
}

#[test]
fn a_machine_that_announced_its_departure_comes_back_as_a_new_machine() {
    let (mut c, _) = two_nodes_one_job();
    c.agent_notice("n1", 5_000);
    c.advance(1_000);
    c.join("n1", cpu(1)); // the preempted VM returns: a new agent with nothing running
    c.advance(1_000);
    assert_eq!(c.node_state("n1"), NodeState::Alive);
}

#[test]
fn a_departure_the_agent_announced_is_durable() {
    let (mut c, _) = two_nodes_one_job();
    c.agent_notice("n1", 60_000);
    c.crash("n1"); // no agent to say it again after the restart
    c.restart_head();
    assert_eq!(c.undrain("n1"), Err(Rejected::LeavingNode(NodeId::new("n1"))));
}

#[test]
fn an_agent_shut_down_while_the_head_is_away_tells_the_returning_head_its_ends_were_a_departure() {
    let (mut c, a) = two_nodes_one_job();
    c.link_down("n1");
    c.agent_shutdown("n1", 30_000); // SIGTERM: the process is stopped, the head is not there
    assert!(c.processes_on("n1").is_empty());
    c.restart_head(); // back within the deadline: the agent links again
    let view = c.view(&a);
    assert_eq!(view.ledger.len(), 1, "{:?}", view.ledger);
    assert_eq!(view.ledger[0].cause, Cause::Preempted, "{:?}", view.ledger[0]);
    assert_eq!(c.node_state("n1"), NodeState::Draining);
    c.advance(2_000);
    assert_eq!(c.view(&a).actors[0].node.as_deref(), Some("n2"), "moved to the other node");
}

/// A drain stops a gang's other ranks at once, as a rank's failure does, not once the drained
/// rank has used up its stop grace: one grace of downtime per preemption, not two.
#[test]
fn a_drain_stops_the_whole_gang_at_once() {
    let mut c = TestCluster::new(config());
    for n in ["n1", "n2", "n3"] {
        c.join(n, cpu(1));
    }
    let job = c.submit(spec("g", 2, 2));
    let drained = c.view(&job).actors[0].node.clone().unwrap();
    let other = c.view(&job).actors[1].node.clone().unwrap();
    assert_eq!(c.processes_on(&other).len(), 1);
    c.agents.get_mut(&drained).unwrap().slow_to_stop = true; // it checkpoints in its grace
    c.drain(&drained, 30_000);
    assert!(c.processes_on(&other).is_empty(), "the peer on {other} was stopped with the drained rank");
    assert_eq!(c.processes_on(&drained).len(), 1, "the drained rank uses its grace");
    c.agents.get_mut(&drained).unwrap().slow_to_stop = false;
    c.crash(&drained); // the machine goes at last
    c.advance(10_000);
    let view = c.view(&job);
    assert_eq!((view.state, view.cycles), (ftdrive::driver::JobState::Running, 2), "{view:#?}");
    let causes: Vec<Cause> = view.ledger.iter().map(|e| e.cause).collect();
    assert!(causes.contains(&Cause::Preempted) && causes.contains(&Cause::Collateral), "{causes:?}");
    let peer = view.ledger.iter().find(|e| e.cause == Cause::Collateral).expect("the peer's entry");
    let says = format!("stopped with its gang after {job}/0 was moved off draining node {drained}");
    assert_eq!(peer.evidence, says, "g/0 did not fail");
}

/// A rank its gang re-formed without (its node drained, no other to go to) holds no rank of the
/// new cycle: `status` must not show it beside the actor that has that rank now.
#[test]
fn an_actor_left_out_of_the_next_cycle_shows_no_rank() {
    let mut c = TestCluster::new(config());
    for n in ["n1", "n2", "n3"] {
        c.join(n, cpu(1));
    }
    let job = c.submit(spec("g", 2, 3));
    let ranks: Vec<Option<u32>> = c.view(&job).actors.iter().map(|a| a.rank).collect();
    assert_eq!(ranks, [Some(0), Some(1), Some(2)]);
    let middle = c.view(&job).actors[1].node.clone().unwrap();
    c.drain(&middle, 30_000);
    c.advance(10_000);
    let view = c.view(&job);
    assert_eq!(view.cycles, 2, "{view:#?}");
    let shown: Vec<(ActorState, Option<u32>)> = view.actors.iter().map(|a| (a.state, a.rank)).collect();
    assert_eq!(
        shown,
        [(ActorState::Running, Some(0)), (ActorState::Scheduling, None), (ActorState::Running, Some(1))],
        "{view:#?}"
    );
}
