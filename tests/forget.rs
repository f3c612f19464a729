//! Forgetting DEAD nodes (FG-1..3 in `src/head/forget.rs`): the operator's `forget`, the
//! retention bound on DEAD nodes, and room made under `max_nodes` — each durable across a head
//! restart, none touching a live node.

mod support;

use ftdrive::head::{Input, Rejected, Reply};
use ftdrive::scheduler::NodeState;
use ftdrive::{HeadConfig, Labels, NodeId};
use support::{config, cpu, spec, TestCluster};

fn names(c: &TestCluster) -> Vec<String> {
    c.head.node_views(c.now).into_iter().map(|v| v.name).collect()
}

fn cluster(config: HeadConfig, nodes: &[&str]) -> TestCluster {
    let mut c = TestCluster::new(config);
    for n in nodes {
        c.join(n, cpu(1));
    }
    c
}

#[test]
fn only_a_dead_node_is_forgotten_and_a_refusal_changes_nothing() {
    let mut c = cluster(config(), &["n1", "n2", "n3"]);
    let job = c.submit(spec("a", 2, 2));
    c.drain("n2", 30_000);
    c.advance(1_000);
    let before = (names(&c), c.effects.len(), c.view(&job));
    let refusal = c.refused_input(Input::Forget { node: NodeId::new("n1") });
    assert_eq!(refusal, Rejected::NotDead(NodeId::new("n1"), NodeState::Alive));
    let message = refusal.to_string();
    assert!(message.contains("only a DEAD node") && message.contains("stop its agent"), "{message}");
    assert_eq!(c.forget("n2"), Err(Rejected::NotDead(NodeId::new("n2"), NodeState::Draining)));
    assert_eq!(c.forget("n9"), Err(Rejected::NoSuchNode(NodeId::new("n9"))));
    assert_eq!((names(&c), c.effects.len(), c.view(&job)), before, "refused: no event, nothing persisted");
}

#[test]
fn a_forgotten_node_is_gone_and_a_machine_in_its_name_is_new() {
    let mut c = cluster(config(), &["n1", "n2", "n3"]);
    let job = c.submit(spec("a", 2, 2));
    c.drain("n2", 30_000);
    c.advance(1_000);
    c.crash("n2");
    c.advance(5_000);
    assert_eq!(c.node_state("n2"), NodeState::Dead);
    let ledger = c.view(&job).ledger.len();
    assert_eq!(c.forget("n2"), Ok(Reply::Done));
    assert_eq!(names(&c), ["n1", "n3"]);
    assert_eq!(c.view(&job).ledger.len(), ledger, "the job's history is untouched");
    assert!(c.view(&job).ledger.iter().any(|e| e.node == "n2"), "entries keep the node's name");

    c.restart_head();
    assert_eq!(names(&c), ["n1", "n3"], "forgotten durably: a restarted head does not bring it back");
    assert!(!c.head.recovering(), "nor waits for it");
    // The same name, other resources and labels: accepted as a new node, its cordon gone with
    // the old one (FG-2).
    let labels = Labels::from([("zone".to_string(), "b".to_string())]);
    c.join_labelled("n2", cpu(4), labels);
    let view = c.head.node_view(&NodeId::new("n2"), c.now).expect("joined");
    assert_eq!((view.state, view.cordoned, view.resources.milli("cpu")), (NodeState::Alive, false, 4_000));
}

#[test]
fn forgetting_the_only_node_a_selector_matched_makes_the_waiting_job_infeasible() {
    let mut c = cluster(config(), &["n1"]);
    c.join_labelled("gpu1", cpu(1), Labels::from([("kind".to_string(), "gpu".to_string())]));
    let mut wants_gpu = spec("g", 1, 1);
    wants_gpu.node_selector = Labels::from([("kind".to_string(), "gpu".to_string())]);
    c.crash("gpu1");
    c.advance(5_000);
    let job = c.submit(wants_gpu);
    c.advance(100);
    let waiting = c.view(&job).infeasible;
    assert_eq!(waiting, None, "a DEAD node that matches may come back: the job waits");
    assert_eq!(c.forget("gpu1"), Ok(Reply::Done));
    let reason = c.view(&job).infeasible.expect("no node left that could hold it");
    assert!(reason.contains("node_selector"), "{reason}");
    c.join_labelled("gpu2", cpu(1), Labels::from([("kind".to_string(), "gpu".to_string())]));
    assert_eq!(c.view(&job).actors[0].node.as_deref(), Some("gpu2"));
}

#[test]
fn past_the_retention_bound_the_longest_dead_go_but_never_a_drained_one() {
    let mut c = cluster(HeadConfig { retain_dead_nodes: 2, ..config() }, &["a", "b", "c", "d", "e", "f"]);
    c.drain("b", 1_000);
    for node in ["a", "b", "c", "d", "e"] {
        c.crash(node);
        c.advance(1_000); // each declared DEAD a second after the one before
    }
    c.advance(5_000);
    let dead = |c: &TestCluster| {
        c.head.node_views(c.now).into_iter().filter(|v| v.state == NodeState::Dead).map(|v| v.name).collect::<Vec<_>>()
    };
    assert_eq!(dead(&c), ["b", "d", "e"], "a and c, the longest dead, were forgotten; b is cordoned");
    c.restart_head();
    assert_eq!(dead(&c), ["b", "d", "e"], "the same after a restart");
    c.join("d", cpu(1));
    c.crash("f");
    c.advance(5_000);
    assert_eq!(dead(&c), ["b", "e", "f"], "d came back, so f's death forgot no one");
}

#[test]
fn a_new_node_at_max_nodes_takes_the_place_of_the_longest_dead() {
    let mut c = cluster(HeadConfig { max_nodes: 3, ..config() }, &["a", "b", "c"]);
    let refusal = c.refused_input(register("d"));
    assert_eq!(refusal, Rejected::TooManyNodes(3), "every node is alive: no room");
    c.crash("b");
    c.advance(5_000);
    c.join("d", cpu(1));
    assert_eq!(names(&c), ["a", "c", "d"], "b, DEAD, made room");
    c.drain("d", 1_000);
    c.crash("d");
    c.advance(5_000);
    assert_eq!(c.refused_input(register("e")), Rejected::TooManyNodes(3), "d is drained: its cordon stays");
    assert_eq!(c.forget("d"), Ok(Reply::Done), "the operator may forget it");
    c.join("e", cpu(1));
    assert_eq!(names(&c), ["a", "c", "e"]);
}

fn register(node: &str) -> Input {
    Input::Register(Box::new(ftdrive::protocol::Registration {
        node: NodeId::new(node),
        incarnation: 1,
        resources: cpu(1),
        labels: Labels::new(),
        addr: "10.0.0.99".into(),
        devices: None,
        port_space: String::new(),
        listening: Vec::new(),
        running: Vec::new(),
        ended: Vec::new(),
        log_url: String::new(),
        identity: String::new(),
        cluster: String::new(),
        problem: None,
    }))
}

#[test]
fn an_undrained_dead_node_is_the_last_that_retention_forgets() {
    let mut c = cluster(HeadConfig { retain_dead_nodes: 1, ..config() }, &["a", "b", "c", "d"]);
    c.drain("a", 1_000);
    for node in ["a", "b", "c"] {
        c.crash(node);
        c.advance(1_000);
    }
    c.advance(5_000);
    assert_eq!(names(&c), ["a", "c", "d"], "a, cordoned, is kept; of b and c, b died first");
    assert_eq!(c.undrain("a"), Ok(Reply::Done));
    assert_eq!(names(&c), ["a", "d"], "a, the node the operator just acted on, outlasts c");

    let mut c = cluster(HeadConfig { retain_dead_nodes: 0, ..config() }, &["a", "b"]);
    c.drain("a", 1_000);
    c.crash("a");
    c.advance(5_000);
    assert_eq!(c.undrain("a"), Ok(Reply::Done), "taken, though retention forgets it at once");
    assert_eq!(names(&c), ["b"]);
}

/// Swarm seed 1659399: a restarted head judged a running job as the gang it was at
/// submission. With the nodes it had lost forgotten, too few were left for that gang, so the
/// job was parked as infeasible and its replacements fell behind pending jobs.
#[test]
fn a_running_job_restored_after_its_lost_nodes_were_forgotten_is_not_infeasible() {
    let mut c = cluster(config(), &["n1", "n2", "n3", "n4"]);
    let job = c.submit(spec("a", 3, 3));
    let other = c.submit(spec("b", 1, 1));
    c.advance(1_000);
    assert_eq!(c.view(&other).actors[0].node.as_deref(), Some("n4"));
    for node in ["n2", "n3"] {
        c.crash(node);
    }
    c.advance(5_000);
    for node in ["n2", "n3"] {
        assert_eq!(c.forget(node), Ok(Reply::Done));
    }
    assert_eq!(c.view(&job).infeasible, None, "a running job needs one node per replacement");
    c.restart_head();
    c.advance(5_000);
    assert_eq!(c.view(&job).infeasible, None, "nor after a restart, with two of its three nodes forgotten");
}
