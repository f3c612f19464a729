//! Same inputs, same effects: a long random input sequence, run twice from one seed, must
//! yield identical effects. Random sequences must also never break an invariant (the test
//! cluster asserts them after every effect).

mod support;

use ftdrive::driver::Budget;
use ftdrive::driver::JobState;
use ftdrive::protocol::ExitStatus;
use ftdrive::spec::RestartMode;
use ftdrive::{JobId, Labels};
use proptest::prelude::*;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use support::{config, cpu, spec, TestCluster};

const NODE_NAMES: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];

/// Plays `steps` random inputs and returns every effect, printed.
fn random_run(seed: u64, steps: usize) -> (Vec<String>, TestCluster) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut c = TestCluster::new(config());
    let mut jobs: Vec<JobId> = Vec::new();
    for step in 0..steps {
        let pick = |rng: &mut ChaCha8Rng, n: u64| rng.next_u64() % n;
        match pick(&mut rng, 10) {
            0 | 1 => {
                let name = NODE_NAMES[pick(&mut rng, 8) as usize];
                let labels = if pick(&mut rng, 4) == 0 {
                    Labels::from([("preemptible".into(), "true".into())])
                } else {
                    Labels::new()
                };
                if c.agents.get(name).is_none_or(|a| !a.heartbeating) || pick(&mut rng, 5) == 0 {
                    c.join_labelled(name, cpu(1 + pick(&mut rng, 3)), labels);
                }
            }
            2 => {
                let name = NODE_NAMES[pick(&mut rng, 8) as usize];
                if c.agents.contains_key(name) {
                    c.crash(name);
                }
            }
            3 | 4 => {
                let min = 1 + pick(&mut rng, 3) as u32;
                let mut s = spec(&format!("job{step}"), min, min + pick(&mut rng, 3) as u32);
                s.hot_spares = pick(&mut rng, 2) as u32;
                s.restart = if pick(&mut rng, 2) == 0 { RestartMode::Gang } else { RestartMode::Actor };
                s.priority = pick(&mut rng, 3) as i32 - 1;
                s.retries.user = Budget::Left(pick(&mut rng, 3) as u32);
                s.retries.preemption = Budget::from_i64(2).unwrap();
                jobs.push(c.submit(s));
            }
            5 | 6 => {
                let running: Vec<_> = c.agents.values().flat_map(|a| a.running.keys().cloned()).collect();
                if !running.is_empty() {
                    let key = &running[pick(&mut rng, running.len() as u64) as usize];
                    let code = if pick(&mut rng, 3) == 0 { 1 } else { 0 };
                    c.exit_actor(&key.job.clone(), key.actor, ExitStatus::code(code));
                }
            }
            7 => {
                let name = NODE_NAMES[pick(&mut rng, 8) as usize];
                let alive = c
                    .head
                    .node_views(c.now)
                    .iter()
                    .any(|n| n.name == name && n.state == ftdrive::scheduler::NodeState::Alive);
                if alive {
                    c.drain(name, 5_000);
                }
            }
            8 if !jobs.is_empty() && pick(&mut rng, 4) == 0 => {
                let job = jobs[pick(&mut rng, jobs.len() as u64) as usize].clone();
                c.stop(&job);
            }
            _ => c.advance(100 + pick(&mut rng, 3_000)),
        }
    }
    let printed = c.effects.iter().map(|(t, e)| format!("{t:?} {e:?}")).collect();
    (printed, c)
}

#[test]
fn same_seed_same_effects() {
    let (first, cluster) = random_run(42, 600);
    let (second, _) = random_run(42, 600);
    assert!(first.len() > 1_000, "the run did something: {} effects", first.len());
    assert_eq!(first, second);
    let finished = cluster.head.job_views().iter().filter(|j| j.state.is_terminal()).count();
    assert!(finished >= 5, "jobs reached final states: {finished}");
    let (other, _) = random_run(43, 600);
    assert_ne!(first, other, "a different seed gives a different run");
}

/// 48 cases by default; `FTDRIVE_PROPTEST_CASES` runs more by hand.
#[allow(clippy::disallowed_methods)]
fn cases() -> u32 {
    std::env::var("FTDRIVE_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// Invariants hold after every effect of any random run, and once every node is healthy
    /// (and undrained) and every process finishes, every job ends.
    #[test]
    fn random_runs_keep_invariants_and_end(seed in any::<u64>()) {
        let (_, mut c) = random_run(seed, 250);
        for name in NODE_NAMES {
            c.join(name, cpu(4));
            // The operator's drains last until undrained, new machines or not.
            prop_assert!(c.undrain(name).is_ok(), "{name} was just registered");
        }
        for _ in 0..40 {
            c.advance(2_000);
            let jobs: Vec<JobId> = c.head.job_views().iter().map(|j| ftdrive::JobId::new(&j.id)).collect();
            for job in &jobs {
                c.finish(job);
            }
        }
        for job in c.head.job_views() {
            prop_assert!(job.state != JobState::Pending || job.infeasible.is_some() || job.min_nodes > 8, "{} stuck {:?}", job.id, job.actors);
            prop_assert!(job.state != JobState::Running, "{} still running: {:?}", job.id, job.actors);
        }
    }
}
