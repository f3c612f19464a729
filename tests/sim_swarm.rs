//! A bounded swarm on every CI run: random clusters, job mixes and fault schedules, a fault
//! phase then a healed phase, zero violations expected. `ftdrive sim --swarm` runs more.

use ftdrive::sim::swarm::run_seed;

#[allow(clippy::disallowed_methods)]
fn seeds() -> u64 {
    std::env::var("FTDRIVE_SWARM_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(300)
}

#[test]
fn bounded_swarm_has_no_violations() {
    let mut failures = Vec::new();
    for seed in 0..seeds() {
        let result = run_seed(seed, seed % 10 == 0);
        for v in &result.violations {
            failures.push(format!(
                "seed {seed}: {} at step {} (t={} ms): {}\n  replay: ftdrive sim --swarm --seeds 1 --start-seed {seed}",
                v.invariant, v.step, v.t_ms, v.detail
            ));
        }
    }
    assert!(failures.is_empty(), "{} failing:\n{}", failures.len(), failures.join("\n"));
}
