//! A bounded swarm on every CI run: random clusters, job mixes and fault schedules, a fault
//! phase then a healed phase, zero violations expected. `ftdrive sim --swarm` runs more.

use ftdrive::sim::scenario::Scenario;
use ftdrive::sim::swarm::{generate, run_seed};
use ftdrive::sim::{SimOptions, Simulation};

#[allow(clippy::disallowed_methods)]
fn seeds() -> u64 {
    std::env::var("FTDRIVE_SWARM_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(300)
}

/// Seeds a longer swarm once failed on (a bug in the head, or a checker too strict), named
/// where the fix is: each runs clean now.
const ONCE_FAILED: &[u64] = &[
    34_296, 41_772, 134_490, 196_998, 253_534, 346_478, 363_153, 383_555, 666_027, 1_553_240, 1_659_399, 1_997_055,
    2_064_375, 2_303_244, 2_567_382, 5_947_530, 6_009_450, 7_014_248, 7_748_293,
    // With agent crashes and ranks that react to a lost peer: SL-1 and its dating (949), AT-2
    // (2287, 9889), the checker's count of agent crashes (16843), the sim's reaction time (25768),
    // the ends of one agent crash reported around an old heartbeat still in flight (7337148).
    949, 2_287, 9_889, 16_843, 25_768, 7_337_148,
    // With cuts of the head's network: a lone node alive held too (467, 4527), the checker's
    // silence of a machine whose last heartbeat waited out a cut (82, 183), a failure pending
    // while nodes are held (FD-3: 19784, 31475).
    82, 183, 467, 4_527, 19_784, 31_475,
    // A rank's exit decided by the first of the losses a restarted head declared together at
    // the end of its window, before its peer's (AT-3).
    7_418_383,
    // A start the head had confirmed, reported never started by the node's rebooted agent
    // before it registered: lost with the machine, not stopped (SL-2).
    7_447_363,
    // The simulator's reconnect after a head restart reached an agent run started since,
    // which had linked on its own (7427995).
    7_427_995,
    // An owed end reported to a head restarted after the agent crash that owed it: its date
    // was in the old head's memory only (SL-1 dates now durable, 7467259).
    7_467_259,
    // A live machine rebooted while the head was down; its new agent answered a stop before
    // its registration reached the restarted head: the checker counted the reboot as a fault
    // only at the head's `AgentRestarted` (7670014).
    7_670_014,
    // Two machines went down 171 ms apart (one incident, FC-2), and two cuts of the head's
    // network held the second one's loss until 17 s after the first: the checker bounded an
    // incident by the cuts' length alone, not by the head's holds, each of which starts a held
    // node's count over (7823760).
    7_823_760,
    // A crash killed an agent and its supervisors; one end reached the head before the head
    // restarted and the rest after, and the date SL-1 gave the first (in memory only) was lost
    // with it: the job was charged twice for one crash (7851619).
    7_851_619,
    // Every node was gone (one dead, one crashed, one drained away), so the head held the
    // crashed one until the machines came back, and its loss, one incident with the first
    // (FC-2), settled 8.5 s after it: the checker bounded an incident without the head's
    // holds (7861599).
    7_861_599,
    // With scarce ports (PS-2): a machine's nodes had registered in another order than their
    // names', and a restarted head gave the machine's shares again in name order, so the node
    // holding bundles got a share below them and the other's room counted the same ports: the
    // head panicked placing a bundle with no port left (363).
    363,
    // An actor-mode rank failing at every start (its port held by another process, none free
    // to move to) was excused, for free and for ever, by a peer's node loss recorded before
    // those starts: the job never ended (AT-4, 8370927).
    8_370_927,
    // A machine crashed while the head was down and booted again (the heal) before the
    // restarted head had declared it: its new agent answered a stop before registering (SL-2),
    // and the checker counted the reboot as a fault only once the head heard of it (8943973).
    8_943_973,
];

#[test]
fn bounded_swarm_has_no_violations() {
    assert_eq!(failures(0..seeds()), Vec::<String>::new());
}

#[test]
fn seeds_that_once_failed_pass() {
    assert_eq!(failures(ONCE_FAILED.iter().copied()), Vec::<String>::new());
}

/// Seeds of `ONCE_FAILED` whose cases changed when the swarm began to draw scarce ports (in a
/// seventh of its cases, 7 of these seeds among them): their cases as they were found, kept as
/// scenario files (`ftdrive sim --swarm --seeds 1 --start-seed N --print-scenario`, from before
/// that change), so that each regression is still replayed as it failed.
#[test]
#[allow(clippy::disallowed_methods)] // the test reads its case files; the core reads none
fn cases_that_once_failed_before_scarce_ports_were_drawn_run_clean() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/swarm_cases");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 7, "{files:?}");
    for file in files {
        let case = Scenario::parse(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let seed: u64 = file.file_stem().unwrap().to_str().unwrap().trim_start_matches("seed_").parse().unwrap();
        assert!(ONCE_FAILED.contains(&seed) && case.seed == seed, "{}", file.display());
        assert_eq!(case.config.master_port_base, 29_500, "as drawn before scarce ports: {}", file.display());
        let report = Simulation::new(&case, case.seed, SimOptions::default()).run();
        assert_eq!(report.violations, Vec::new(), "{}", file.display());
    }
}

/// `--print-scenario` prints a case as a scenario file, heal and liveness check included:
/// run from that file, it replays the swarm's run step for step.
#[test]
fn a_printed_swarm_case_replays_the_same_run() {
    for seed in (0..20).chain(ONCE_FAILED.iter().copied()) {
        let text = serde_json::to_string_pretty(&generate(seed)).expect("a scenario serializes");
        let parsed = Scenario::parse(&text).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let replayed = Simulation::new(&parsed, parsed.seed, SimOptions::default()).run();
        let swarm = run_seed(seed, false);
        assert_eq!((replayed.trace_hash, replayed.stats.steps), (swarm.trace_hash, swarm.steps), "seed {seed}");
    }
}

fn failures(seeds: impl Iterator<Item = u64>) -> Vec<String> {
    let mut failures = Vec::new();
    for seed in seeds {
        let result = run_seed(seed, seed % 10 == 0);
        for v in &result.violations {
            failures.push(format!(
                "seed {seed}: {} at step {} (t={} ms): {}\n  replay: ftdrive sim --swarm --seeds 1 --start-seed {seed}",
                v.invariant, v.step, v.t_ms, v.detail
            ));
        }
    }
    failures
}
