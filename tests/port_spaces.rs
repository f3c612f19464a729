//! Rendezvous ports per machine (scheduler/cluster.rs, PS-1 and PS-2): agents that share a
//! machine's ports never give two bundles the same `MASTER_PORT`, across head restarts too,
//! and an agent back in another port space (a reboot) is a new machine; ports something on the
//! machine listens on are passed over (PS-3), and a bundle moves off one taken under it (PS-4).

mod support;

use ftdrive::driver::{Budget, BudgetKind, Cause, LedgerEntry, Role};
use ftdrive::ids::JobId;
use ftdrive::scheduler::NodeState;
use ftdrive::spec::JobSpec;
use support::{config, cpu, spec, TestCluster};

/// The `MASTER_PORT` each of `job`'s running workers was started with.
fn master_ports(c: &TestCluster, job: &JobId) -> Vec<String> {
    c.worker_envs(job).into_iter().map(|(_, env)| env["MASTER_PORT"].clone()).collect()
}

/// `spec` with room for a few user errors.
fn retried(mut spec: JobSpec) -> JobSpec {
    spec.retries.user = Budget::from_i64(5).expect("a budget");
    spec
}

fn last_entry(c: &TestCluster, job: &JobId) -> LedgerEntry {
    c.view(job).ledger.last().cloned().expect("a ledger entry")
}

#[test]
fn agents_on_one_machine_give_two_jobs_two_ports_across_a_head_restart() {
    let mut c = TestCluster::new(config());
    c.join_on_machine("n1", cpu(2), "m1");
    c.join_on_machine("n2", cpu(1), "m1");
    c.join("n3", cpu(1));
    let a = c.submit(spec("a", 1, 1));
    let b = c.submit(spec("b", 1, 1));
    let other = c.submit(spec("other", 1, 1));
    let (on_a, on_b) = (master_ports(&c, &a), master_ports(&c, &b));
    assert_ne!(on_a, on_b, "two bundles of machine m1");
    assert_eq!(master_ports(&c, &other), ["29500"], "n3's machine is its own");
    c.restart_head();
    let after = c.submit(spec("after", 1, 1));
    let on_after = master_ports(&c, &after);
    assert_eq!(on_after, ["29502"], "the restored head still knows m1's ports: a has {on_a:?}, b {on_b:?}");
}

/// PS-3: a forgotten `torchrun` on 29500 is passed over; once it is gone, 29500 is given again.
#[test]
fn a_port_something_listens_on_is_given_to_no_bundle() {
    let mut c = TestCluster::new(config());
    c.join_on_machine("n1", cpu(2), "m1");
    c.join_on_machine("n2", cpu(2), "m1");
    c.listening("n2", &[29_500, 40_000]);
    let a = c.submit(spec("a", 1, 1));
    assert_eq!(master_ports(&c, &a), ["29501"], "the report of either node is the machine's");
    c.listening("n2", &[]);
    let b = c.submit(spec("b", 1, 1));
    assert_eq!(master_ports(&c, &b), ["29500"]);
}

/// A job waiting for nodes is placed as the first one registers: what listens on its machine
/// comes with the registration, not a heartbeat later, or rank 0 got the busy port.
#[test]
fn work_waiting_for_a_node_is_given_none_of_the_ports_busy_as_it_registers() {
    let mut c = TestCluster::new(config());
    let job = c.submit(spec("waiting", 1, 1));
    c.join_with_listeners("n1", cpu(1), "m1", &[29_500, 29_501]);
    assert_eq!(master_ports(&c, &job), ["29502"]);
}

/// Nodes registered before agents reported port spaces keep pools of their own when their
/// agents are upgraded: the processes run on, and nothing is charged.
#[test]
fn an_upgraded_agent_naming_a_port_space_keeps_its_running_work() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    let job = c.submit(spec("j", 1, 1));
    c.restart_head();
    c.restart_agent_in("n1", "boot-1/net:[1]");
    c.advance(5_000);
    assert!(c.view(&job).ledger.is_empty(), "{:?}", c.view(&job).ledger);
    assert_eq!(master_ports(&c, &job), ["29500"]);
    assert_eq!(c.node_state("n1"), NodeState::Alive);
}

#[test]
fn an_agent_back_in_another_port_space_is_a_new_machine() {
    let mut c = TestCluster::new(config());
    c.join_on_machine("n1", cpu(1), "boot-1/net:[1]");
    c.join_on_machine("n2", cpu(1), "boot-2/net:[1]");
    let job = c.submit(spec("j", 1, 1));
    let node = c.worker_envs(&job)[0].0.clone();
    c.reboot_into(&node, "boot-3/net:[1]");
    let lost = c.view(&job).ledger.first().cloned().expect("the lost attempt");
    assert_eq!((lost.cause, lost.budget), (Cause::NodeLost, BudgetKind::System));
    assert!(lost.evidence.contains("restarted on another machine or network namespace"), "{}", lost.evidence);
    assert_eq!(c.node_state(&node), NodeState::Alive, "it registers anew");
    c.advance(10_000);
    assert_eq!(master_ports(&c, &job), ["29500"], "the retry runs, its port from its node's machine");
    assert_eq!(last_entry(&c, &job).attempt, 1, "only the lost attempt has ended");
}

/// PS-4: a listener that takes the port of a hot spare's bundle moves the bundle; when the
/// spare takes over as rank 0 it serves the rendezvous from an idle port.
#[test]
fn a_listener_on_a_spares_port_moves_it_before_the_spare_serves_the_rendezvous() {
    let mut c = TestCluster::new(config());
    c.join_on_machine("n1", cpu(1), "m1");
    let mut s = spec("j", 1, 1);
    s.hot_spares = 1;
    let job = c.submit(s);
    c.join_on_machine("n2", cpu(1), "m2");
    let spare = c.view(&job).actors.into_iter().find(|a| a.role == Role::Spare).expect("a spare");
    assert_eq!(spare.node.as_deref(), Some("n2"));
    c.listening("n2", &[29_500]);
    c.crash("n1");
    c.advance(5_000);
    assert_eq!(c.worker_envs(&job)[0].0, "n2");
    assert_eq!(master_ports(&c, &job), ["29501"], "the spare's bundle on n2 held m2's 29500");
}

/// PS-4: a listener that comes between two cycles (while the first rank 0's end is being
/// handled, say) moves the bundle, and the next cycle does not fail on it.
#[test]
fn a_listener_on_a_port_between_two_cycles_moves_the_next_rank_0() {
    let mut c = TestCluster::new(config());
    c.join_on_machine("n1", cpu(1), "m1");
    let job = c.submit(retried(spec("j", 1, 1)));
    assert_eq!(master_ports(&c, &job), ["29500"]);
    c.exit_rank(&job, 0, 1);
    c.listening("n1", &[29_500]);
    c.advance(1_000);
    assert_eq!(master_ports(&c, &job), ["29501"]);
    assert_eq!(c.view(&job).ledger.len(), 1, "only the user's own failure");
}

/// PS-4: a listener that comes while rank 0 runs may be rank 0 itself, so its port stays while
/// it runs. The agent reads what listens again before it reports an end: a listener still there
/// then is another's, and the bundle moves before the next rank 0 starts — none fails on it.
#[test]
fn a_listener_still_there_when_rank_0_ends_moves_the_next_one() {
    let mut c = TestCluster::new(config());
    c.join_on_machine("n1", cpu(1), "m1");
    let job = c.submit(retried(spec("j", 1, 1)));
    c.listening("n1", &[29_500]);
    c.advance(1_000);
    assert_eq!(master_ports(&c, &job), ["29500"], "a running rank 0 keeps its port");
    c.exit_rank(&job, 0, 1);
    c.advance(1_000);
    assert_eq!(master_ports(&c, &job), ["29501"], "still listened on once rank 0 was gone");
    c.listening("n1", &[29_500, 29_501]);
    c.restart_head();
    c.advance(5_000);
    assert_eq!(master_ports(&c, &job), ["29501"], "the moved port is the job's durable state");
    assert_eq!(c.view(&job).ledger.len(), 1, "only the user's own failure");
}

/// PS-4: the listener that was there while rank 0 ran, and is gone once it ended, was rank 0's
/// own: the next cycle serves the rendezvous on the same port.
#[test]
fn a_rank_0s_own_listener_keeps_its_port_through_restarts() {
    let mut c = TestCluster::new(config());
    c.join_on_machine("n1", cpu(1), "m1");
    let job = c.submit(retried(spec("j", 1, 1)));
    for _ in 0..3 {
        c.listening("n1", &[29_500]);
        c.advance(1_000);
        c.listening("n1", &[]);
        c.exit_rank(&job, 0, 1);
        c.advance(1_000);
        assert_eq!(master_ports(&c, &job), ["29500"]);
    }
    assert_eq!(c.view(&job).ledger.len(), 3);
}

/// PS-4 moves a bundle only to a port nothing listens on: with none left it keeps its own.
#[test]
fn a_bundle_with_no_idle_port_left_keeps_its_own() {
    let mut config = config();
    config.master_port_base = 65_534;
    config.ports_per_node = 2;
    let mut c = TestCluster::new(config);
    c.join_on_machine("n1", cpu(1), "m1");
    let job = c.submit(spec("j", 2, 2));
    c.listening("n1", &[65_534, 65_535]);
    c.join_on_machine("n2", cpu(1), "m2");
    assert_eq!(master_ports(&c, &job), ["65534", "65534"]);
}

/// PS-4 on a machine of two agents: the other agent read what listens at its own rank's end,
/// while rank 0 still listened, and said so. When rank 0's gang stop ends it, rank 0's own
/// agent, which reads after the end, says nothing listens: the next cycle keeps the port.
#[test]
fn another_agents_reading_of_rank_0s_own_listener_moves_nothing() {
    let mut c = TestCluster::new(config());
    c.join_on_machine("n1", cpu(1), "m1");
    c.join_on_machine("n2", cpu(1), "m1");
    let job = c.submit(retried(spec("j", 2, 2)));
    let ranks = c.worker_envs(&job);
    let rank_1_node = ranks.iter().find(|(_, env)| env["RANK"] == "1").expect("rank 1").0.clone();
    c.listening(&rank_1_node, &[29_500]);
    c.exit_rank(&job, 1, 1);
    c.advance(5_000);
    assert_eq!(c.view(&job).cycles, 2, "the gang restarted");
    assert_eq!(master_ports(&c, &job), ["29500", "29500"]);
}

/// A restarted head hands a machine's shares out again in name order, not in the order its
/// nodes joined: a node may then hold more bundles than its new share. The others' room must
/// still leave out the ports it holds (PS-2), or a placement would find no port for it.
#[test]
fn a_restored_node_holding_more_than_its_new_share_leaves_no_room_counted_twice() {
    let config = ftdrive::HeadConfig { master_port_base: 65_531, ports_per_node: 3, ..config() };
    let mut c = TestCluster::new(config);
    c.join_on_machine("b", cpu(3), "m1"); // joins first: 3 of the machine's 5 ports
    c.join_on_machine("a", cpu(3), "m1"); // the 2 left
    let mut packed = spec("packed", 3, 3);
    packed.strategy = ftdrive::spec::Strategy::StrictPack;
    let first = c.submit(packed.clone());
    assert_eq!(c.view(&first).state, ftdrive::driver::JobState::Running);
    c.restart_head();
    let second = c.submit(packed);
    let view = c.view(&second);
    assert_eq!(view.state, ftdrive::driver::JobState::Pending, "2 ports are free on m1, not 3: {view:?}");
    c.finish(&first);
    assert_eq!(c.view(&second).state, ftdrive::driver::JobState::Running, "b's 3 ports are free again");
}
