//! `ftdrive sim`: run a scenario (or a swarm of generated ones) in the deterministic simulator.

use super::args::{Output, SimArgs};
use super::error::{CliError, Outcome};
use super::out::{self, Progress};
use ftdrive::sim::swarm::{self, SeedResult};
use ftdrive::sim::Violation;
use ftdrive::sim::{summary, Scenario, SimOptions, Simulation};
use std::fmt::Write;
use std::path::Path;

pub fn run(args: SimArgs) -> Result<Outcome, CliError> {
    if args.swarm {
        return run_swarm(&args);
    }
    refuse_swarm_flags(&args)?;
    let path = args.scenario.as_deref().expect("clap requires a scenario without --swarm");
    let scenario = read_scenario(path)?;
    let seed = args.seed.unwrap_or(scenario.seed);
    let options = SimOptions { keep_trace: args.trace.is_some(), ..SimOptions::default() };
    let report = Simulation::new(&scenario, seed, options).run();
    if let Some(trace) = &args.trace {
        write_lines(trace, &report.trace)?;
    }
    match args.output {
        Output::Json => out::json(&summary::json(&report))?,
        Output::Text => out::text(&summary::text(&report))?,
    }
    Ok(if report.violations.is_empty() { Outcome::Done } else { Outcome::Failed })
}

/// The swarm's flags given with a scenario file would be ignored: refused, saying so. (clap's
/// `requires = "swarm"` cannot tell: a flag always has a value, `false` by default.)
fn refuse_swarm_flags(args: &SimArgs) -> Result<(), CliError> {
    let given = [
        ("--seeds", args.seeds.is_some()),
        ("--start-seed", args.start_seed.is_some()),
        ("--check-determinism", args.check_determinism),
        ("--print-scenario", args.print_scenario),
    ];
    match given.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(CliError::BadInput(format!(
            "{flag} is for --swarm; a scenario file runs once, with its own seed (or --seed N)"
        ))),
        None => Ok(()),
    }
}

fn read_scenario(path: &Path) -> Result<Scenario, CliError> {
    let why = "the most the simulator reads (its bounds on nodes, jobs and events fit well within it)";
    let text = super::read_text_file(path, "scenario", MAX_SCENARIO_FILE_BYTES, why)?;
    Scenario::parse(&text).map_err(|e| CliError::BadInput(format!("{}: {e}", path.display())))
}

fn write_lines(path: &Path, lines: &[String]) -> Result<(), CliError> {
    let mut text = lines.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    std::fs::write(path, text)
        .map_err(|e| CliError::BadInput(format!("--trace {}: cannot write it: {e}", path.display())))
}

/// The largest scenario file read: a million events of a hundred bytes or so, and room.
const MAX_SCENARIO_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// Seeds a swarm runs unless `--seeds` says.
const DEFAULT_SEEDS: u64 = 100;

fn run_swarm(args: &SimArgs) -> Result<Outcome, CliError> {
    if args.seed.is_some() {
        return Err(CliError::BadInput(
            "--seed is for a scenario file; a swarm runs the seeds --start-seed N --seeds M".into(),
        ));
    }
    let (start, seeds) = (args.start_seed.unwrap_or(0), args.seeds.unwrap_or(DEFAULT_SEEDS));
    if args.print_scenario && seeds != 1 {
        // Standard output is then one scenario file, which holds one object.
        return Err(CliError::BadInput(format!(
            "--print-scenario prints one seed's scenario file: give --seeds 1 (and --start-seed N), not {seeds} seeds"
        )));
    }
    let end = start.checked_add(seeds).ok_or_else(|| CliError::BadInput("--start-seed + --seeds overflows".into()))?;
    let json = args.output == Output::Json;
    // With `--print-scenario` standard output is the scenario file: `> case.json` must run.
    let report = if args.print_scenario { Progress::Stderr } else { Progress::Stdout };
    let (mut failed, mut steps, mut failures) = (0u64, 0u64, Vec::new());
    // The binary's hook aborts on any panic (a half-alive daemon would answer errors); a swarm
    // is no daemon, and takes the standard hook: the message and where, then the unwind that
    // `run_seed_or_panic` catches.
    drop(std::panic::take_hook());
    for seed in start..end {
        if args.print_scenario {
            let case = swarm::generate(seed);
            out::line(&serde_json::to_string_pretty(&case).expect("scenario serializes"))?;
        }
        let (result, trace) = run_seed_or_panic(seed, args.check_determinism, args.trace.is_some());
        if let Some(path) = &args.trace {
            write_lines(path, &trace)?;
        }
        steps += result.steps;
        if !result.violations.is_empty() {
            failed += 1;
            if json {
                failures.push(serde_json::json!({"seed": seed, "violations": result.violations}));
            } else {
                report.text(&failure_report(&result, args.check_determinism))?;
            }
        }
    }
    if json {
        let summary = serde_json::json!({
            "seeds": seeds, "start_seed": start, "failed": failed, "steps": steps, "failures": failures,
        });
        report.line(&serde_json::to_string_pretty(&summary).expect("a summary serializes"))?;
    } else {
        report.line(&format!("swarm: {seeds} seeds from {start}, {failed} failed, {steps} steps in all"))?;
    }
    Ok(if failed == 0 { Outcome::Done } else { Outcome::Failed })
}

/// One seed; a panic in it (an invariant the core asserts, broken) is that seed's failure,
/// reported with its replay line like any other, and the swarm goes on to the next seed.
fn run_seed_or_panic(seed: u64, determinism: bool, traced: bool) -> (SeedResult, Vec<String>) {
    let run = std::panic::catch_unwind(|| swarm::run_seed_traced(seed, determinism, traced));
    run.unwrap_or_else(|panic| {
        let said = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        let violation =
            Violation { invariant: "panic".into(), t_ms: 0, step: 0, detail: format!("the run panicked: {said}") };
        (SeedResult { seed, violations: vec![violation], trace_hash: String::new(), steps: 0 }, Vec::new())
    })
}

fn failure_report(result: &SeedResult, determinism: bool) -> String {
    let seed = result.seed;
    let mut out = String::new();
    for v in &result.violations {
        let _ = match v.invariant.as_str() {
            "panic" => writeln!(out, "seed {seed}: {}", v.detail),
            _ => writeln!(out, "seed {seed}: {} at step {} (t={} ms): {}", v.invariant, v.step, v.t_ms, v.detail),
        };
    }
    let flag = if determinism { " --check-determinism" } else { "" };
    let _ = writeln!(out, "  replay: ftdrive sim --swarm --seeds 1 --start-seed {seed}{flag} --print-scenario");
    out
}
