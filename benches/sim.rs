//! Simulator benchmarks: `cargo bench --bench sim`.
//!
//! 1. Simulated events per second on a 1,000-node cluster with jobs and faults (target: at
//!    least 2,000,000 events/s).
//! 2. Wall time of a simulated hour of a 10,000-node cluster (1 s heartbeats) with 500 jobs
//!    and node churn (target: under 20 s).
//!
//! An "event" is one simulation step: a delivered message, a timer, a fault, or a head
//! timeout. Each figure is the best of a few runs (the machine is shared); the checkers run.

use ftdrive::sim::{Fault, FaultEvent, JobDef, NetworkSpec, NodeDef, Scenario, SimOptions, Simulation};
use ftdrive::spec::{JobSpec, RestartMode};
use ftdrive::{HeadConfig, JobId, Labels, NodeId, Resources};
use std::time::Instant;

fn cluster(nodes: usize, jobs: usize, hours_ms: u64, churn_every_ms: u64) -> Scenario {
    let node_defs: Vec<NodeDef> = (0..nodes)
        .map(|i| {
            let mut labels = Labels::from([("rack".to_string(), format!("r{}", i / 40))]);
            if i % 10 == 9 {
                labels.insert("preemptible".into(), "true".into());
            }
            NodeDef {
                name: NodeId::new(&format!("n{i:05}")),
                resources: Resources::units(&[("cpu", 8)]),
                labels,
                port_space: String::new(),
                fence_after_ms: None,
            }
        })
        .collect();
    let job_defs: Vec<JobDef> = (0..jobs)
        .map(|i| {
            let min = 2 + (i % 15) as u32;
            let mut spec = JobSpec::minimal(&format!("train{i}"), &["python3", "train.py"], min, min + (i % 3) as u32);
            spec.hot_spares = (i % 2) as u32;
            spec.restart = if i % 4 == 0 { RestartMode::Actor } else { RestartMode::Gang };
            spec.retries.user = ftdrive::driver::Budget::Left(3);
            spec.retries.system = ftdrive::driver::Budget::Left(10);
            spec.bundle = Resources::units(&[("cpu", 4)]);
            let submit_at_ms = (i as u64 * hours_ms) / (jobs as u64 + 1);
            JobDef {
                id: JobId::new(&format!("j{i}")),
                submit_at_ms,
                spec,
                run_ms: 300_000 + (i as u64 % 10) * 90_000,
                spawn_error: None,
                react_to_lost_peer_ms: None,
            }
        })
        .collect();
    let mut events = Vec::new();
    let mut t = churn_every_ms;
    let mut victim = 7usize;
    while t < hours_ms {
        let node = node_defs[victim % nodes].clone();
        events.push(FaultEvent { at_ms: t, what: Fault::NodeCrash { node: node.name.clone() } });
        events.push(FaultEvent { at_ms: t + 60_000, what: Fault::NodeJoin { node } });
        victim += 7919;
        t += churn_every_ms;
    }
    Scenario {
        seed: 1,
        config: HeadConfig::default(),
        network: NetworkSpec { min_delay_ms: 1, max_delay_ms: 5, drop_ppm: 1_000, duplicate_ppm: 1_000 },
        nodes: node_defs,
        jobs: job_defs,
        events,
        until_ms: hours_ms,
        heal_at_ms: None,
        liveness_at_ms: None,
    }
}

/// Runs once; returns (steps, wall seconds, jobs finished).
fn measure(scenario: &Scenario) -> (u64, f64, usize) {
    let options = SimOptions { hash_trace: false, ..SimOptions::default() };
    let started = Instant::now();
    let report = Simulation::new(scenario, scenario.seed, options).run();
    let wall = started.elapsed().as_secs_f64();
    assert!(report.violations.is_empty(), "violations: {:?}", report.violations);
    let finished = report.jobs.iter().filter(|j| j.state.is_terminal()).count();
    (report.stats.steps, wall, finished)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("sim_events_per_second: bench\nsim_hour_10000_nodes: bench");
        return;
    }
    let only = |name: &str| std::env::args().skip(1).filter(|a| !a.starts_with('-')).all(|a| name.contains(&a));
    if only("sim_events_per_second") {
        events_per_second();
    }
    if only("sim_hour_10000_nodes") {
        hour();
    }
}

fn events_per_second() {
    let medium = cluster(1_000, 50, 600_000, 10_000);
    let best =
        (0..3).map(|_| measure(&medium)).max_by(|a, b| (a.0 as f64 / a.1).total_cmp(&(b.0 as f64 / b.1))).unwrap();
    println!(
        "sim_events_per_second: {:.0} events/s ({} events in {:.3} s; 1,000 nodes, 50 jobs, 10 simulated minutes, {} jobs ended)",
        best.0 as f64 / best.1,
        best.0,
        best.1,
        best.2
    );
}

fn hour() {
    let hour = cluster(10_000, 500, 3_600_000, 30_000);
    let runs: Vec<(u64, f64, usize)> = (0..2).map(|_| measure(&hour)).collect();
    let best = runs.iter().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
    println!(
        "sim_hour_10000_nodes: {:.2} s wall for one simulated hour ({} events, {:.0} events/s; 500 jobs, a node lost every 30 s, {} jobs ended)",
        best.1,
        best.0,
        best.0 as f64 / best.1,
        best.2
    );
}
