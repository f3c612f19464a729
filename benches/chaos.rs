//! Faults injected into a real cluster while a real job runs: `cargo bench --bench chaos --
//! [--rounds N] [--seed S] [--machine-loss]`. Each round starts a head and five agents on
//! loopback, runs the ring all-reduce demo on three of them (it checks every reduction and
//! resumes from its checkpoint), and every 1–3 s applies one fault drawn from the seed:
//!
//! - `head_kill`: `kill -9` of the head, started again after 0–1.5 s (DESIGN §10);
//! - `head_stop`: the head stopped (`SIGSTOP`) for 0.3–5 s, as a swapping or frozen VM is;
//! - `agent_kill`: `kill -9` of one agent (not its processes), started again after 0–1 s;
//! - `agent_stop`: one agent stopped for 0.2–1.5 s, within its node timeout;
//! - `head_cut`: the head's network cut for 0.5–9 s, most of them longer than the node timeout
//!   (every agent reaches the head through one relay, which holds what passes either way, as
//!   a partition shorter than TCP's retransmission timeout does): the head hears from no node
//!   and holds them (FD-1, `docs/runtime.md`);
//! - with `--machine-loss`, `machine_loss`: one agent and every process it started killed, as
//!   a machine lost, and an agent of that name started again after 0–3 s.
//!
//! What must hold, checked at the end of every round: the job SUCCEEDED; its ledger holds only
//! `completed` entries, as many as the ranks, and every worker process of the job ran from
//! start to end (no pid replaced), unless machines were lost; with machine losses, only
//! `completed`, `node_lost` and `collateral` entries, at most one `node_lost` per lost
//! machine, and no two live workers of one rank at any instant (sampled every 20 ms). A round
//! that breaks one prints what broke and keeps its state dir (head and agent logs) for
//! reading; the bench then fails.
//!
//! The bench's own requests (submit, status) reach the head directly, so that a cut does not
//! stop the watch.
//!
//! This is a soak, not a figure: it is not part of `cargo test` (a round takes about half a
//! minute of wall clock).

// Only `wait_for_file` of the shared helpers is needed here.
#[allow(dead_code)]
mod common;
// The relay the real-cluster tests cut the head's network with (its `go_stale` unused here).
#[allow(dead_code)]
#[path = "../actors/tests/common/relay.rs"]
mod relay;

use common::wait_for_file;
use relay::Relay;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NODES: [&str; 5] = ["n1", "n2", "n3", "n4", "n5"];
/// The variable every process of one round inherits, so that a lost machine's processes (and
/// at the end, all of them) are found without touching anything else on this machine.
const MARK_VAR: &str = "FTDRIVE_CHAOS_MARK";
const ROUND_LIMIT: Duration = Duration::from_secs(240);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value =
        |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(|v| v.parse().unwrap());
    let rounds: u64 = value("--rounds").unwrap_or(3);
    let seed: u64 = value("--seed").unwrap_or(1);
    let machine_loss = args.iter().any(|a| a == "--machine-loss");
    let mut broken = 0;
    for round in 0..rounds {
        let outcome = Round::run(seed + round, machine_loss);
        println!("chaos: seed {} {}", seed + round, outcome.summary());
        if !outcome.violations.is_empty() {
            broken += 1;
            for violation in &outcome.violations {
                println!("chaos:   BROKEN: {violation}");
            }
            println!("chaos:   state and logs kept in {}", outcome.dir.display());
        }
    }
    println!("chaos: {rounds} round(s) from seed {seed}, machine loss {machine_loss}: {broken} broken");
    assert_eq!(broken, 0, "{broken} round(s) broke an invariant (above)");
}

/// splitmix64: the round's faults follow from its seed alone.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn ms(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.next() % (high - low + 1))
    }

    fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[(self.next() % from.len() as u64) as usize]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    HeadKill,
    HeadStop,
    HeadCut,
    AgentKill,
    AgentStop,
    MachineLoss,
}

struct Outcome {
    dir: PathBuf,
    faults: BTreeMap<Fault, u32>,
    ledger: Vec<String>,
    /// Disruptions the head recognised (FD-1): how often its log says it began holding nodes.
    holds: usize,
    violations: Vec<String>,
    took: Duration,
}

impl Outcome {
    fn summary(&self) -> String {
        let faults: Vec<String> = self.faults.iter().map(|(f, n)| format!("{f:?}×{n}")).collect();
        let (took, faults, ledger) = (self.took.as_secs_f64(), faults.join(" "), self.ledger.join(" "));
        format!("{took:.1} s, faults [{faults}], nodes held {} time(s), ledger [{ledger}]", self.holds)
    }
}

struct Round {
    dir: PathBuf,
    mark: String,
    listen: String,
    head: Child,
    /// Between every agent and the head.
    relay: Relay,
    agents: BTreeMap<&'static str, Child>,
}

impl Round {
    fn run(seed: u64, machine_loss: bool) -> Outcome {
        let dir = tempfile::Builder::new().prefix("ftdrive-chaos-").tempdir().unwrap().keep();
        let mark = format!("chaos-{}-{seed}", std::process::id());
        let mut round = Round::start(&dir, &mark);
        let watch = Workers::watch(&mark);
        let start = Instant::now();
        let job = round.submit();
        let mut rng = Rng(seed);
        let mut faults = BTreeMap::new();
        let end = loop {
            std::thread::sleep(rng.ms(1000, 3000));
            if let Some(view) = round.job(&job).filter(is_terminal) {
                break view;
            }
            if start.elapsed() > ROUND_LIMIT {
                break round.job(&job).unwrap_or(Value::Null);
            }
            let fault = round.inject(&mut rng, machine_loss);
            *faults.entry(fault).or_insert(0) += 1;
        };
        let took = start.elapsed();
        let seen = watch.stop();
        round.end();
        let lost = faults.get(&Fault::MachineLoss).copied().unwrap_or(0);
        let violations = judge(&end, &seen, lost);
        let head_log = std::fs::read_to_string(dir.join("head.log")).unwrap_or_default();
        let holds = head_log.matches("heard from no node for").count();
        if violations.is_empty() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        Outcome { dir, faults, ledger: ledger_summary(&end), holds, violations, took }
    }

    fn start(dir: &Path, mark: &str) -> Round {
        let head = spawn_head(dir, "127.0.0.1:0", mark);
        let url = wait_for_file(&dir.join("head.url"));
        let listen = url.trim().trim_start_matches("http://").to_string();
        let relay = Relay::to(&listen);
        let (dir, mark) = (dir.to_path_buf(), mark.to_string());
        let mut round = Round { dir, mark, listen, head, relay, agents: BTreeMap::new() };
        for name in NODES {
            let agent = round.spawn_agent(name);
            round.agents.insert(name, agent);
        }
        round
    }

    fn url(&self) -> String {
        format!("http://{}", self.listen)
    }

    fn spawn_agent(&self, name: &str) -> Child {
        let log = append(&self.dir.join(format!("agent-{name}.log")));
        let head = format!("http://{}", self.relay.addr);
        Command::new(env!("CARGO_BIN_EXE_ftdrive"))
            .args(["node", "--head", &head, "--name", name, "--resources", "cpu=1", "--addr", "127.0.0.1"])
            .env("FTDRIVE_STATE_DIR", &self.dir)
            .env_remove("FTDRIVE_TOKEN")
            .env(MARK_VAR, format!("{}:{name}", self.mark))
            .env("FTDRIVE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// The ring demo on three nodes: 80 steps of 0.25 s, a checked reduction at each, enough
    /// system budget for every machine a round can lose.
    fn submit(&self) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ring_allreduce.py");
        let spec = json!({
            "name": "chaos-ring",
            "command": [python_binary(), script, "--steps", "80", "--step-seconds", "0.25"],
            "cwd": self.dir,
            "min_nodes": 3, "max_nodes": 3, "bundle": {"cpu": 1},
            "retries": {"user": 0, "system": 100, "preemption": -1, "backoff_ms": {"initial": 200, "max": 1000}},
            "stop_grace_ms": 2000
        });
        let path = self.dir.join("job.json");
        std::fs::write(&path, spec.to_string()).unwrap();
        let out = self.ftdrive(&["submit", "--no-wait", "--output", "json", path.to_str().unwrap()]);
        assert!(out.status.success(), "submit: {}", String::from_utf8_lossy(&out.stderr));
        let view: Value = serde_json::from_slice(&out.stdout).unwrap();
        view["id"].as_str().unwrap().to_string()
    }

    fn ftdrive(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_ftdrive"))
            .args(args)
            .env("FTDRIVE_HEAD", self.url())
            .env("FTDRIVE_STATE_DIR", &self.dir)
            .env_remove("FTDRIVE_TOKEN")
            .output()
            .unwrap()
    }

    /// The job as the head shows it; `None` while the head does not answer.
    fn job(&self, id: &str) -> Option<Value> {
        let out = self.ftdrive(&["status", id, "--output", "json"]);
        out.status.success().then(|| serde_json::from_slice(&out.stdout).ok()).flatten()
    }

    fn inject(&mut self, rng: &mut Rng, machine_loss: bool) -> Fault {
        let mut kinds = vec![Fault::HeadKill, Fault::HeadStop, Fault::HeadCut, Fault::AgentKill, Fault::AgentStop];
        if machine_loss {
            kinds.extend([Fault::MachineLoss, Fault::MachineLoss]);
        }
        let fault = *rng.pick(&kinds);
        let node = *rng.pick(&NODES);
        match fault {
            Fault::HeadKill => {
                kill_child(&mut self.head);
                std::thread::sleep(rng.ms(0, 1500));
                self.head = spawn_head(&self.dir, &self.listen, &self.mark);
            }
            Fault::HeadStop => pause(self.head.id(), rng.ms(300, 5000)),
            Fault::HeadCut => {
                self.relay.cut(true);
                std::thread::sleep(rng.ms(500, 9000));
                self.relay.cut(false);
            }
            Fault::AgentKill => {
                kill_child(self.agents.get_mut(node).unwrap());
                std::thread::sleep(rng.ms(0, 1000));
                let agent = self.spawn_agent(node);
                self.agents.insert(node, agent);
            }
            Fault::AgentStop => pause(self.agents[node].id(), rng.ms(200, 1500)),
            Fault::MachineLoss => {
                kill_child(self.agents.get_mut(node).unwrap());
                kill_marked(&format!("{}:{node}", self.mark));
                std::thread::sleep(rng.ms(0, 3000));
                let agent = self.spawn_agent(node);
                self.agents.insert(node, agent);
            }
        }
        fault
    }

    /// Ends every process of the round: the head, the agents and whatever they started.
    fn end(&mut self) {
        kill_child(&mut self.head);
        for agent in self.agents.values_mut() {
            kill_child(agent);
        }
        kill_marked(&self.mark);
    }
}

/// The Python interpreter itself: `python3` on the `PATH` may be a shell script (pyenv's
/// shim), whose forks would look like more workers.
fn python_binary() -> String {
    let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
    assert!(out.status.success(), "python3: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim_end().to_string()
}

fn is_terminal(view: &Value) -> bool {
    matches!(view["state"].as_str(), Some("SUCCEEDED" | "FAILED" | "STOPPED"))
}

fn ledger_summary(view: &Value) -> Vec<String> {
    let entries = view["ledger"].as_array().cloned().unwrap_or_default();
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for entry in &entries {
        *counts.entry(entry["cause"].as_str().unwrap_or("?").to_string()).or_insert(0) += 1;
    }
    counts.into_iter().map(|(cause, n)| format!("{cause}×{n}")).collect()
}

/// What the round broke, if anything.
fn judge(view: &Value, seen: &Seen, machines_lost: u32) -> Vec<String> {
    let mut broken = Vec::new();
    if view["state"] != "SUCCEEDED" {
        broken.push(format!("the job ended {} ({})", view["state"], view["message"]));
    }
    let entries = view["ledger"].as_array().cloned().unwrap_or_default();
    let cause = |e: &Value| e["cause"].as_str().unwrap_or("?").to_string();
    let node_lost = entries.iter().filter(|e| cause(e) == "node_lost").count() as u32;
    if machines_lost == 0 {
        if let Some(e) = entries.iter().find(|e| cause(e) != "completed") {
            broken.push(format!("a control-plane fault reached the ledger: {e}"));
        }
        if entries.len() != 3 {
            broken.push(format!("{} ledger entries for 3 ranks: {entries:?}", entries.len()));
        }
        if seen.pids.len() != 3 {
            broken.push(format!("{} worker processes ran for 3 ranks: {:?}", seen.pids.len(), seen.pids));
        }
    } else {
        if let Some(e) = entries.iter().find(|e| !matches!(cause(e).as_str(), "completed" | "node_lost" | "collateral"))
        {
            broken.push(format!("an entry no lost machine explains: {e}"));
        }
        if node_lost > machines_lost {
            broken.push(format!("{node_lost} node_lost entries for {machines_lost} machines lost"));
        }
    }
    if let Some(twice) = &seen.rank_twice {
        broken.push(format!("two live workers of one rank at once: {twice}"));
    }
    broken
}

/// What the watcher saw of the job's workers.
#[derive(Default)]
struct Seen {
    pids: BTreeSet<u32>,
    rank_twice: Option<String>,
}

/// Samples the round's live worker processes (the demo's Python, not their supervisors) every
/// 20 ms from /proc.
struct Workers {
    running: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    thread: std::thread::JoinHandle<()>,
}

impl Workers {
    fn watch(mark: &str) -> Workers {
        let (running, seen) = (Arc::new(AtomicBool::new(true)), Arc::new(Mutex::new(Seen::default())));
        let (go_on, record, mark) = (running.clone(), seen.clone(), mark.to_string());
        let thread = std::thread::spawn(move || {
            while go_on.load(Ordering::Relaxed) {
                let live = live_workers(&mark);
                let mut seen = record.lock().unwrap();
                let mut by_rank: BTreeMap<&str, Vec<&Worker>> = BTreeMap::new();
                for worker in &live {
                    seen.pids.insert(worker.pid);
                    by_rank.entry(&worker.rank).or_default().push(worker);
                }
                if let Some(two) = by_rank.values().find(|w| w.len() > 1) {
                    if seen.rank_twice.is_none() {
                        seen.rank_twice = Some(format!("{two:?}"));
                    }
                }
                drop(seen);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Workers { running, seen, thread }
    }

    fn stop(self) -> Seen {
        self.running.store(false, Ordering::Relaxed);
        self.thread.join().unwrap();
        Arc::try_unwrap(self.seen).ok().unwrap().into_inner().unwrap()
    }
}

#[derive(Debug)]
#[allow(dead_code)] // read through Debug, in what a broken round prints
struct Worker {
    pid: u32,
    ppid: u32,
    cmdline: String,
    rank: String,
    cycle: String,
    node: String,
}

/// The live (not zombie) demo processes of the round, with their rank, cycle and node.
fn live_workers(mark: &str) -> Vec<Worker> {
    let mut workers = Vec::new();
    for (pid, env) in marked_processes(mark) {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let has = |needle: &[u8]| cmdline.windows(needle.len()).any(|w| w == needle);
        // A supervisor (`ftdrive __attempt ... -- python3 ring_allreduce.py`) names it too.
        let is_demo = has(b"ring_allreduce.py") && !has(b"__attempt");
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = state.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'));
        if is_demo && !zombie {
            let var = |name: &str| env.get(name).cloned().unwrap_or_default();
            let ppid =
                state.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(1)).and_then(|p| p.parse().ok());
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            workers.push(Worker {
                pid,
                ppid: ppid.unwrap_or(0),
                cmdline,
                rank: var("RANK"),
                cycle: var("FTDRIVE_CYCLE"),
                node: var("FTDRIVE_NODE"),
            });
        }
    }
    // A process a worker forked is part of it.
    let pids: BTreeSet<u32> = workers.iter().map(|w| w.pid).collect();
    workers.retain(|w| !pids.contains(&w.ppid));
    workers
}

/// Every process whose `MARK_VAR` begins with `mark`, with its environment.
fn marked_processes(mark: &str) -> Vec<(u32, BTreeMap<String, String>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        let env: BTreeMap<String, String> = environ
            .split(|b| *b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok()?.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect();
        if env.get(MARK_VAR).is_some_and(|m| m == mark || m.starts_with(&format!("{mark}:"))) {
            found.push((pid, env));
        }
    }
    found
}

/// SIGKILL to every process of `mark` (a node's, or the round's), until none is left.
fn kill_marked(mark: &str) {
    for _ in 0..100 {
        let left = marked_processes(mark);
        if left.is_empty() {
            return;
        }
        for (pid, _) in left {
            // SAFETY: a signal to a process this round started (it carries the round's mark).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill_child(child: &mut Child) {
    // SAFETY: SIGCONT first, in case it was stopped; to a child this round started.
    unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
    let _ = child.kill();
    let _ = child.wait();
}

/// `SIGSTOP` for `how_long`, then `SIGCONT`.
fn pause(pid: u32, how_long: Duration) {
    // SAFETY: signals to a child this round started and has not reaped.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    std::thread::sleep(how_long);
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
}

fn spawn_head(dir: &Path, listen: &str, mark: &str) -> Child {
    let _ = std::fs::remove_file(dir.join("head.url"));
    Command::new(env!("CARGO_BIN_EXE_ftdrive"))
        .args(["head", "--listen", listen, "--state-dir"])
        .arg(dir)
        .env_remove("FTDRIVE_TOKEN")
        .env(MARK_VAR, mark)
        .env("FTDRIVE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(append(&dir.join("head.log")))
        .spawn()
        .unwrap()
}

fn append(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap()
}
