//! A node whose agent cannot start work (its state dir takes no write, a fork fails) is the
//! node's failure, not the program's (AG-6 in `src/agent.rs`): the attempt is charged as a lost
//! node's, the node keeps what runs there and is given nothing new until its agent says it can
//! start work again — across a head restart too.

mod support;

use ftdrive::driver::{BudgetKind, Cause, JobState};
use ftdrive::event::Event;
use ftdrive::head::Effect;
use ftdrive::NodeId;
use support::{config, cpu, spec, TestCluster};

const FULL: &str = "cannot create /var/lib/ftdrive/attempts/j1-0-1-1: No space left on device (os error 28)";

fn problem(c: &TestCluster, node: &str) -> Option<String> {
    c.head.node_view(&NodeId::new(node), c.now).expect("known node").problem
}

fn health_events(c: &TestCluster) -> Vec<(String, Option<String>)> {
    c.effects
        .iter()
        .filter_map(|(_, e)| match e {
            Effect::Notify(Event::NodeHealth { node, problem }) => Some((node.to_string(), problem.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_start_the_node_could_not_make_is_charged_to_the_system_and_moves_elsewhere() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    c.break_disk("n1", FULL);
    let job = c.submit(spec("a", 1, 1));
    let view = c.view(&job);
    assert_ne!(view.state, JobState::Failed, "a full disk on one node fails no job: {:?}", view.message);
    let entry = &view.ledger[0];
    assert_eq!((entry.cause, entry.budget), (Cause::NodeLost, BudgetKind::System), "{entry:?}");
    assert!(entry.evidence.contains("node n1 could not start the attempt") && entry.evidence.contains("No space left"));
    let said = problem(&c, "n1").expect("n1 is unhealthy");
    assert!(said.contains("No space left on device"), "{said}");
    assert_eq!(health_events(&c), [("n1".to_string(), Some(said))]);

    // Nothing new goes to n1: the next attempt waits for a node that can start it.
    c.advance(2_000);
    let view = c.view(&job);
    assert_eq!(view.ledger.len(), 1, "the next attempt was not placed back on n1");
    let waiting = view.waiting.expect("it says why it waits");
    assert!(waiting.contains("1 cannot start work and are not counted"), "{waiting}");
    c.join("n2", cpu(1));
    assert_eq!(c.view(&job).actors[0].node.as_deref(), Some("n2"));
    c.finish(&job);
    assert_eq!(c.view(&job).state, JobState::Succeeded);
}

#[test]
fn an_unhealthy_node_keeps_what_runs_there_and_takes_work_again_once_its_agent_recovers() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(2));
    let running = c.submit(spec("running", 1, 1));
    assert_eq!(c.running_of(&running).count(), 1);
    c.break_disk("n1", FULL);
    let second = c.submit(spec("second", 1, 1));
    assert_eq!(c.view(&second).ledger[0].cause, Cause::NodeLost);
    assert!(problem(&c, "n1").is_some());

    c.advance(5_000);
    assert_eq!(c.running_of(&running).count(), 1, "what runs on an unhealthy node runs on");
    assert!(c.view(&running).ledger.is_empty(), "and nothing of it is charged");
    assert_eq!(c.running_of(&second).count(), 0, "nothing new starts there");

    c.repair_disk("n1");
    assert_eq!(problem(&c, "n1"), None);
    c.advance(1_000);
    assert_eq!(c.running_of(&second).count(), 1, "a recovered node takes work again");
    assert_eq!(health_events(&c).last(), Some(&("n1".to_string(), None)));
}

#[test]
fn a_spare_standing_by_on_a_node_that_falls_ill_moves_off_it() {
    let mut c = TestCluster::new(config());
    for n in ["n1", "n2"] {
        c.join(n, cpu(1));
    }
    let mut with_spare = spec("a", 1, 1);
    with_spare.hot_spares = 1;
    with_spare.retries.user = ftdrive::driver::Budget::Left(3);
    let job = c.submit(with_spare);
    assert_eq!(c.view(&job).actors[1].node.as_deref(), Some("n2"), "the spare stands by on n2");
    c.join("n3", cpu(1));
    let mark = c.mark();
    c.disk_fills("n2", FULL);
    assert_eq!(c.placements_after(mark), [("j1/1".to_string(), "n3".to_string())], "it moved to n3");
    // The rank fails: the spare takes over on n3, where it can start, and nothing is charged
    // to the system.
    c.exit_rank(&job, 0, 1);
    c.advance(1_000);
    let view = c.view(&job);
    assert!(view.ledger.iter().all(|e| e.cause != Cause::NodeLost), "{:?}", view.ledger);
    assert_eq!(c.running_of(&job).count(), 1);
}

#[test]
fn a_rank_does_not_restart_in_place_on_a_node_that_fell_ill() {
    let mut c = TestCluster::new(config());
    for n in ["n1", "n2"] {
        c.join(n, cpu(1));
    }
    let mut retried = spec("a", 1, 1);
    retried.retries.user = ftdrive::driver::Budget::Left(3);
    let job = c.submit(retried);
    assert_eq!(c.view(&job).actors[0].node.as_deref(), Some("n1"));
    c.disk_fills("n1", FULL);
    assert_eq!(c.running_of(&job).count(), 1, "what runs there runs on");
    c.exit_rank(&job, 0, 1);
    c.advance(1_000);
    let view = c.view(&job);
    let causes: Vec<Cause> = view.ledger.iter().map(|e| e.cause).collect();
    assert_eq!(causes, [Cause::UserError], "no start tried, and failed, on n1");
    assert_eq!(view.actors[0].node.as_deref(), Some("n2"), "{view:#?}");
    assert_eq!(c.running_of(&job).count(), 1);
}

#[test]
fn a_restarted_head_hears_from_the_registration_that_a_node_cannot_start_work() {
    let mut c = TestCluster::new(config());
    c.join("n1", cpu(1));
    c.join("n2", cpu(1));
    c.break_disk("n1", FULL);
    let job = c.submit(spec("a", 1, 1));
    let first_node = c.view(&job).ledger.first().map(|e| e.node.clone());
    if first_node.as_deref() != Some("n1") {
        // Placed on n2 first: make n1 unhealthy through a start of its own.
        let other = c.submit(spec("b", 1, 1));
        assert_eq!(c.view(&other).ledger[0].node, "n1");
    }
    assert!(problem(&c, "n1").is_some());
    c.restart_head();
    assert!(problem(&c, "n1").is_some(), "the registration carried it");
    let later = c.submit(spec("later", 1, 1));
    c.advance(2_000);
    assert!(c.view(&later).ledger.iter().all(|e| e.node != "n1"), "nothing placed on n1 after the restart");
}
