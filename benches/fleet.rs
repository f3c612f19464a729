//! The fleet load generator: one real `ftdrive head` and thousands of simulated agents in this
//! process, each on its own WebSocket to the head's `/v1/agent`, speaking the real agent
//! protocol through the core's agent state machine (`ftdrive::agent`) with no process behind
//! it. `cargo bench --bench fleet` runs 1,000, 5,000 and 10,000 agents, each size with a fresh
//! head; `cargo bench --bench fleet -- 2000` runs the sizes named.
//!
//! For each size, once every agent is welcomed and the fleet has settled (1 s heartbeats,
//! `--node-timeout-ms 3000`):
//!
//! - head CPU over a steady 10 s window, in cores (utime + stime from `/proc/<pid>/stat`), and
//!   head RSS (`VmRSS`); the same again once 8,000 attempts run;
//! - heartbeat lag. The protocol does not acknowledge heartbeats, so the lag is measured as
//!   the round trip of a heartbeat through the head: during a second 10 s window, one
//!   heartbeat in ten (per agent) also lists an attempt the head has never heard of, and the
//!   head's reconciliation of heartbeats (`src/head/attempts.rs`) answers it with a `Stop` for
//!   that attempt — the same session, mailbox, core step and send path as every heartbeat. The
//!   figure is from the heartbeat frame written to that `Stop` read. Beside it: the head's own
//!   `ftdrive_heartbeat_lag_seconds` histogram (arrival gaps beyond the interval, so it misses
//!   a steady delay) over the steady window, and how late this process's heartbeat timers
//!   fired (the load generator shares the machine with the head);
//! - time to place 1,000 gangs of 8: the jobs submitted through the HTTP API by concurrent
//!   clients, until all 8,000 `Start`s have reached agents;
//! - a stalled head: the head is stopped (`SIGSTOP`) for longer than `node_timeout_ms` — a
//!   swapped or starved machine — while every agent goes on heartbeating into its socket; once
//!   it runs again, how many nodes it still counts alive after two heartbeat intervals (all of
//!   them, if it reads what is queued before it expires anyone);
//! - recovery: 1% of the agents holding bundles drop their connections without a goodbye (as
//!   at a `kill -9`), until every bundle they held is started on another agent. The head
//!   waits `node_timeout_ms` after a node's last heartbeat before it declares it dead, so that
//!   part is printed apart.

mod common;

use common::{ms, percentile, wait_for_file};
use ftdrive::agent::{Agent, AgentEffect, AgentIdentity, AgentInput, Recovered};
use ftdrive::protocol::{AttemptKey, ExitStatus, ToAgent, ToHead};
use ftdrive::{ActorIx, Instant as CoreInstant, JobId, NodeId, Resources};
use ftdrive_actors::paths;
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Semaphore};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

const DEFAULT_SIZES: [usize; 3] = [1_000, 5_000, 10_000];
const HEARTBEAT_MS: u64 = 1_000;
/// Three missed heartbeats, the head's default.
const NODE_TIMEOUT_MS: u64 = 3_000;
/// Each agent's capacity, in bundles of the default `cpu=1`: room for all 8,000 bundles at
/// 1,000 agents, with room left to re-place what the killed agents held.
const CPU_PER_AGENT: u64 = 16;
const GANGS: usize = 1_000;
const GANG_SIZE: usize = 8;
const SUBMIT_CLIENTS: usize = 32;
const WINDOW: Duration = Duration::from_secs(10);
const SETTLE: Duration = Duration::from_secs(3);
/// How long the head is stopped: longer than the node timeout.
const STALL: Duration = Duration::from_millis(NODE_TIMEOUT_MS + 2_000);
/// Connections being opened at once: a storm of 10,000 would overflow the head's accept queue.
const CONNECTS_IN_FLIGHT: usize = 256;
/// One heartbeat in this many (per agent) is a round-trip probe while probing.
const PROBE_EVERY: u64 = 10;
/// The job id of the attempts that probes list; the head mints ids `j<n>`, never this one.
const PROBE_JOB: &str = "fleet-probe";
/// Descriptors beyond one per agent: the runtime, HTTP clients, files.
const SPARE_FDS: u64 = 256;

// ---- goals --------------------------------------------------------------------------------

const GOAL_CPU_CORES: f64 = 0.5;
const GOAL_RSS_MIB: f64 = 1024.0;
const GOAL_LAG_P99_MS: f64 = 100.0;

// ---- the head process ---------------------------------------------------------------------

/// A real head on loopback with its state in a fresh directory; killed when dropped, which
/// also happens while a panic unwinds.
struct HeadProcess {
    dir: tempfile::TempDir,
    child: Child,
    url: String,
}

impl HeadProcess {
    /// Must be called on the main thread: the head is told to die with the thread that
    /// started it (so that it cannot outlive a bench stopped by a signal).
    fn start() -> HeadProcess {
        let dir = tempfile::tempdir().unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_ftdrive"));
        command
            .args(["head", "--listen", "127.0.0.1:0"])
            .args(["--heartbeat-interval-ms", &HEARTBEAT_MS.to_string()])
            .args(["--node-timeout-ms", &NODE_TIMEOUT_MS.to_string()])
            .arg("--state-dir")
            .arg(dir.path())
            // `$FTDRIVE_TOKEN` and `$FTDRIVE_AGENT_TOKEN` stay as they are: the head and this
            // bench then take each credential from the same place.
            .env("FTDRIVE_LOG", "error")
            .stdout(Stdio::null());
        // SAFETY: prctl is async-signal-safe and touches nothing of the parent.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        let mut head = HeadProcess { dir, child, url: String::new() };
        head.url = wait_for_file(&head.dir.path().join("head.url")).trim().to_string();
        head
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The client API's token, found as every client finds it.
    fn api(&self) -> Api {
        let (token, _) = paths::client_token(self.dir.path()).unwrap();
        Api { http: reqwest::Client::new(), url: self.url.clone(), token }
    }

    /// Where agents connect, and the credential they present, found as `ftdrive node` does.
    fn agent_link(&self) -> AgentLink {
        let ws_url = format!("{}/v1/agent", self.url.replacen("http://", "ws://", 1));
        AgentLink { ws_url, credential: paths::agent_credential(self.dir.path()) }
    }
}

impl Drop for HeadProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---- /proc --------------------------------------------------------------------------------

/// CPU time used so far by `pid` ("self" for this process), user and system, in seconds.
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The command name may hold spaces; the fields after it are fixed: utime and stime are
    // the 14th and 15th of the line, the 12th and 13th after the name.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf reads a constant.
    ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// A `kB` line of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in MiB.
fn status_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    let kib: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib / 1024.0
}

/// Raises this process's descriptor limit to its hard limit (the head inherits it); returns
/// the limit in force.
fn raise_fd_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: get/setrlimit on a struct this function owns.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        let before = limit.rlim_cur;
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            println!(
                "fleet: cannot raise RLIMIT_NOFILE from {before} to its hard limit {}: {}",
                limit.rlim_max,
                std::io::Error::last_os_error()
            );
            return before;
        }
        if before != limit.rlim_cur {
            println!("fleet: RLIMIT_NOFILE raised from {before} to {} (its hard limit)", limit.rlim_cur);
        }
    }
    limit.rlim_cur
}

// ---- the client API -----------------------------------------------------------------------

#[derive(Clone)]
struct Api {
    http: reqwest::Client,
    url: String,
    token: String,
}

impl Api {
    async fn get_text(&self, path: &str) -> String {
        let response = self.http.get(format!("{}{path}", self.url)).bearer_auth(&self.token).send().await.unwrap();
        assert!(response.status().is_success(), "GET {path}: {}", response.status());
        response.text().await.unwrap()
    }

    async fn get(&self, path: &str) -> Value {
        serde_json::from_str(&self.get_text(path).await).unwrap()
    }

    /// Submits a job; how long the head took to accept it (it answers once it is durable).
    async fn submit(&self, spec: &Value) -> Duration {
        let start = Instant::now();
        let request = self.http.post(format!("{}/v1/jobs", self.url)).bearer_auth(&self.token);
        let response = request.json(&json!({"spec": spec})).send().await.unwrap();
        let status = response.status();
        assert!(status.is_success(), "submit: {status}: {}", response.text().await.unwrap_or_default());
        start.elapsed()
    }

    /// Waits until the head counts `size` nodes alive.
    async fn wait_all_alive(&self, size: usize) {
        let start = Instant::now();
        loop {
            let health = self.get("/v1/health").await;
            if health["alive_nodes"] == size {
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(120), "the head never counted {size} nodes alive: {health}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The head's heartbeat lag histogram: (upper bound in seconds, cumulative count).
    async fn lag_histogram(&self) -> Vec<(f64, u64)> {
        let text = self.get_text("/metrics").await;
        let prefix = "ftdrive_heartbeat_lag_seconds_bucket{le=\"";
        text.lines()
            .filter_map(|line| line.strip_prefix(prefix))
            .filter_map(|rest| {
                let (le, count) = rest.split_once("\"}")?;
                Some((le.parse().unwrap_or(f64::INFINITY), count.trim().parse().ok()?))
            })
            .collect()
    }
}

// ---- what the agents share with the measuring code ----------------------------------------

#[derive(Default)]
struct Shared {
    /// Agents welcomed at least once.
    welcomed: AtomicUsize,
    /// Heartbeat timer delays are kept (a measuring window is open).
    recording: AtomicBool,
    /// Heartbeats carry round-trip probes.
    probing: AtomicBool,
    stats: Mutex<Stats>,
}

#[derive(Default)]
struct Stats {
    /// The attempts each agent runs, by agent index.
    holdings: Vec<BTreeSet<AttemptKey>>,
    /// When each agent last sent a heartbeat.
    last_beat: Vec<Option<Instant>>,
    /// Attempts started at agents (a `Start` for an attempt new to the agent).
    spawns: usize,
    probe_rtts: Vec<Duration>,
    probes_unanswered: usize,
    timer_delays: Vec<Duration>,
    /// Bundles of killed agents not yet started elsewhere: the attempt lost, by actor.
    awaiting: BTreeMap<(JobId, ActorIx), u32>,
    replaced_at: Option<Instant>,
    connect_errors: usize,
    first_connect_error: Option<String>,
    links_dropped: usize,
    refusals: usize,
}

impl Stats {
    fn for_agents(n: usize) -> Stats {
        Stats { holdings: vec![BTreeSet::new(); n], last_beat: vec![None; n], ..Stats::default() }
    }

    fn started(&mut self, agent: usize, key: &AttemptKey) {
        self.spawns += 1;
        self.holdings[agent].insert(key.clone());
        let actor = (key.job.clone(), key.actor);
        if self.awaiting.get(&actor).is_some_and(|lost| key.attempt > *lost) {
            self.awaiting.remove(&actor);
            if self.awaiting.is_empty() {
                self.replaced_at = Some(Instant::now());
            }
        }
    }
}

impl Shared {
    fn stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        self.stats.lock().unwrap()
    }
}

// ---- one simulated agent ------------------------------------------------------------------

/// How agents reach the head.
struct AgentLink {
    ws_url: String,
    credential: paths::Credential,
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

impl AgentLink {
    /// Opens the agent channel as `actors/src/node/link.rs` does: the credential read afresh,
    /// presented as a bearer token, Nagle's algorithm off. Only the buffers are smaller
    /// (tungstenite's default is 128 KiB each way per socket, too much times 10,000).
    async fn connect(&self) -> Result<Socket, String> {
        let token = self.credential.read()?;
        let mut request = self.ws_url.as_str().into_client_request().map_err(|e| e.to_string())?;
        request.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
        let config = WebSocketConfig::default().read_buffer_size(4096).write_buffer_size(0);
        let disable_nagle = true;
        let connecting = tokio_tungstenite::connect_async_with_config(request, Some(config), disable_nagle);
        let (socket, _) = connecting.await.map_err(|e| e.to_string())?;
        Ok(socket)
    }
}

/// Why a session ended.
enum Ended {
    Killed,
    Dropped,
    NameInUse,
}

struct SimAgent {
    ix: usize,
    protocol: Agent,
    shared: Arc<Shared>,
    epoch: Instant,
    welcomed: bool,
    /// The heartbeat interval the head asked for, once it differs from the current one.
    new_interval_ms: Option<u64>,
    /// The probe in flight: the attempt it listed, and when its heartbeat was written.
    probe: Option<(AttemptKey, Instant)>,
}

impl SimAgent {
    fn new(ix: usize, shared: Arc<Shared>, epoch: Instant) -> SimAgent {
        let identity = AgentIdentity {
            name: NodeId::new(&format!("f{ix:05}")),
            resources: Resources::units(&[("cpu", CPU_PER_AGENT)]),
            labels: Default::default(),
            addr: "127.0.0.1".to_string(),
            devices: None,
            port_space: String::new(),
            log_url: String::new(),
            identity: paths::random_token().unwrap(),
            cluster: String::new(),
        };
        let protocol = Agent::new(identity, paths::incarnation(), Recovered::default());
        SimAgent { ix, protocol, shared, epoch, welcomed: false, new_interval_ms: None, probe: None }
    }

    fn input(&mut self, input: AgentInput) {
        let now = CoreInstant::from_ms(self.epoch.elapsed().as_millis() as u64);
        self.protocol.handle(now, input);
    }

    /// Carries out the protocol's effects; processes "run" at once, and end when stopped.
    async fn carry_out(&mut self, sink: &mut SplitSink<Socket, Message>) -> Result<(), Ended> {
        while let Some(effect) = self.protocol.poll_effect() {
            match effect {
                AgentEffect::Send(msg) => self.send(sink, msg).await?,
                AgentEffect::Spawn(spec) => {
                    self.shared.stats().started(self.ix, &spec.key);
                    self.input(AgentInput::Spawned { key: spec.key });
                }
                AgentEffect::Stop { key, .. } => {
                    self.shared.stats().holdings[self.ix].remove(&key);
                    self.input(AgentInput::Exited { key, status: ExitStatus::signal(libc::SIGTERM, true) });
                }
                AgentEffect::HeartbeatEvery { interval_ms } => self.new_interval_ms = Some(interval_ms),
                AgentEffect::Fenced { .. }
                | AgentEffect::Forget { .. }
                | AgentEffect::JoinedCluster { .. }
                | AgentEffect::ShutDown => {}
            }
        }
        Ok(())
    }

    async fn send(&mut self, sink: &mut SplitSink<Socket, Message>, mut msg: ToHead) -> Result<(), Ended> {
        let mut probe = None;
        if let ToHead::Heartbeat { seq, running, .. } = &mut msg {
            self.shared.stats().last_beat[self.ix] = Some(Instant::now());
            if self.shared.probing.load(Ordering::Relaxed) && (*seq + self.ix as u64).is_multiple_of(PROBE_EVERY) {
                probe = Some(self.probe_key(*seq));
                running.extend(probe.clone());
            }
        }
        let text = serde_json::to_string(&msg).expect("agent messages serialize");
        if let Some(key) = probe {
            if self.probe.replace((key, Instant::now())).is_some() {
                self.shared.stats().probes_unanswered += 1;
            }
        }
        sink.send(Message::Text(text.into())).await.map_err(|_| Ended::Dropped)
    }

    fn probe_key(&self, seq: u64) -> AttemptKey {
        AttemptKey { job: JobId::new(PROBE_JOB), actor: self.ix as ActorIx, attempt: seq as u32, cycle: 0 }
    }

    /// A message from the head: the answer to a probe is taken here, the rest go to the
    /// protocol.
    fn on_head_message(&mut self, text: &str) -> Result<(), Ended> {
        let msg: ToAgent = serde_json::from_str(text).expect("the head's messages parse");
        match &msg {
            ToAgent::Stop { key, .. } if key.job.as_str() == PROBE_JOB => {
                if let Some((_, sent)) = self.probe.take_if(|(probe, _)| probe == key) {
                    self.shared.stats().probe_rtts.push(sent.elapsed());
                }
                return Ok(());
            }
            ToAgent::Welcome { .. } if !self.welcomed => {
                self.welcomed = true;
                self.shared.welcomed.fetch_add(1, Ordering::Relaxed);
            }
            ToAgent::Refused { .. } => self.shared.stats().refusals += 1,
            ToAgent::NameInUse { .. } => return Err(Ended::NameInUse),
            _ => {}
        }
        self.input(AgentInput::FromHead(msg));
        Ok(())
    }

    fn heartbeat(&mut self, due: tokio::time::Instant) {
        if self.shared.recording.load(Ordering::Relaxed) {
            self.shared.stats().timer_delays.push(due.elapsed());
        }
        self.input(AgentInput::Heartbeat);
    }

    /// One connection, until it drops or the agent is killed.
    async fn session(&mut self, socket: Socket, kill: &mut oneshot::Receiver<()>) -> Ended {
        let (mut sink, mut stream) = socket.split();
        self.input(AgentInput::LinkUp);
        let mut beat = heartbeat_timer(self.ix, self.protocol.heartbeat_interval_ms());
        // As `ftdrive node`'s link (without a fence): a ping twice within the silence
        // bound, and one unanswered (nothing heard since) for as long as that is a lost link.
        let silence = Duration::from_millis(ftdrive_actors::node::link::silence_ms(NODE_TIMEOUT_MS));
        let ping_every = silence / ftdrive_actors::node::link::PINGS_PER_SILENCE as u32;
        let mut pings = heartbeat_timer(self.ix, ping_every.as_millis() as u64);
        let mut unanswered_since: Option<tokio::time::Instant> = None;
        loop {
            if let Err(ended) = self.carry_out(&mut sink).await {
                return ended;
            }
            if let Some(interval_ms) = self.new_interval_ms.take() {
                beat = heartbeat_timer(self.ix, interval_ms);
            }
            let silent_at = unanswered_since.map(|asked| asked + silence);
            let step = tokio::select! {
                _ = &mut *kill => Err(Ended::Killed),
                due = beat.tick() => {
                    self.heartbeat(due);
                    Ok(())
                }
                asked = pings.tick() => {
                    unanswered_since.get_or_insert(asked);
                    sink.send(Message::Ping(Vec::new().into())).await.map_err(|_| Ended::Dropped)
                }
                _ = tokio::time::sleep_until(silent_at.unwrap_or_else(tokio::time::Instant::now)), if silent_at.is_some() => Err(Ended::Dropped),
                frame = stream.next() => {
                    if matches!(frame, Some(Ok(_))) {
                        unanswered_since = None;
                    }
                    self.frame(frame)
                }
            };
            if let Err(ended) = step {
                return ended;
            }
        }
    }

    fn frame(&mut self, frame: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>) -> Result<(), Ended> {
        match frame {
            Some(Ok(Message::Text(text))) => self.on_head_message(text.as_str()),
            // Pings are answered by tungstenite itself, with the next write.
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => Err(Ended::Dropped),
            Some(Ok(_)) => Ok(()),
        }
    }
}

/// A heartbeat timer whose phase is spread by agent index, so that the fleet's heartbeats
/// arrive evenly rather than in bursts of those that connected together.
fn heartbeat_timer(ix: usize, interval_ms: u64) -> tokio::time::Interval {
    let phase_ms = (ix as u64 * 7_919) % interval_ms;
    let start = tokio::time::Instant::now() + Duration::from_millis(phase_ms);
    let mut timer = tokio::time::interval_at(start, Duration::from_millis(interval_ms));
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    timer
}

/// An agent's life: connect (a few at a time across the fleet), run, reconnect after a drop
/// as `ftdrive node` does, until killed.
async fn run_agent(
    mut agent: SimAgent,
    link: Arc<AgentLink>,
    connects: Arc<Semaphore>,
    mut kill: oneshot::Receiver<()>,
) {
    let mut backoff_ms = 50;
    loop {
        let connected = {
            let _permit = connects.acquire().await.unwrap();
            link.connect().await
        };
        match connected {
            Ok(socket) => {
                backoff_ms = 50;
                match agent.session(socket, &mut kill).await {
                    Ended::Killed | Ended::NameInUse => return,
                    Ended::Dropped => agent.shared.stats().links_dropped += 1,
                }
                agent.input(AgentInput::LinkDown);
            }
            Err(e) => {
                let mut stats = agent.shared.stats();
                stats.connect_errors += 1;
                stats.first_connect_error.get_or_insert(e);
            }
        }
        tokio::select! {
            _ = &mut kill => return,
            _ = tokio::time::sleep(Duration::from_millis(backoff_ms)) => {}
        }
        backoff_ms = (backoff_ms * 2).min(HEARTBEAT_MS / 2);
    }
}

// ---- the fleet ----------------------------------------------------------------------------

struct Fleet {
    shared: Arc<Shared>,
    kills: Vec<Option<oneshot::Sender<()>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Fleet {
    fn start(size: usize, link: AgentLink) -> Fleet {
        let shared = Arc::new(Shared { stats: Mutex::new(Stats::for_agents(size)), ..Shared::default() });
        let (link, connects, epoch) = (Arc::new(link), Arc::new(Semaphore::new(CONNECTS_IN_FLIGHT)), Instant::now());
        let mut fleet = Fleet { shared: shared.clone(), kills: Vec::new(), tasks: Vec::new() };
        for ix in 0..size {
            let (kill, killed) = oneshot::channel();
            let agent = SimAgent::new(ix, shared.clone(), epoch);
            fleet.tasks.push(tokio::spawn(run_agent(agent, link.clone(), connects.clone(), killed)));
            fleet.kills.push(Some(kill));
        }
        fleet
    }

    /// Waits until every agent has been welcomed; how long it took.
    async fn registered(&self, started: Instant) -> Duration {
        let size = self.kills.len();
        while self.shared.welcomed.load(Ordering::Relaxed) < size {
            let waited = started.elapsed();
            let welcomed = self.shared.welcomed.load(Ordering::Relaxed);
            assert!(
                waited < Duration::from_secs(300),
                "only {welcomed} of {size} agents welcomed after {waited:?}; connect errors: {:?}",
                self.shared.stats().first_connect_error
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        started.elapsed()
    }

    fn spawns(&self) -> usize {
        self.shared.stats().spawns
    }

    /// Drops the connections of 1% of the agents that hold bundles (at least one), spread
    /// over the fleet; returns how many agents and bundles, and the latest moment the head
    /// can declare one of them dead (its last heartbeat plus the node timeout).
    fn kill_holders(&mut self) -> (usize, usize, Instant) {
        let mut stats = self.shared.stats();
        let holders: Vec<usize> = (0..self.kills.len()).filter(|ix| !stats.holdings[*ix].is_empty()).collect();
        let count = holders.len().div_ceil(100).max(1);
        let every = (holders.len() / count).max(1);
        let victims: Vec<usize> = holders.iter().step_by(every).take(count).copied().collect();
        let mut deadline = Instant::now();
        for &ix in &victims {
            for key in std::mem::take(&mut stats.holdings[ix]) {
                stats.awaiting.insert((key.job.clone(), key.actor), key.attempt);
            }
            let last_beat = stats.last_beat[ix].unwrap_or_else(Instant::now);
            deadline = deadline.max(last_beat + Duration::from_millis(NODE_TIMEOUT_MS));
        }
        let bundles = stats.awaiting.len();
        stats.replaced_at = None;
        drop(stats);
        for &ix in &victims {
            let _ = self.kills[ix].take().unwrap().send(());
        }
        (victims.len(), bundles, deadline)
    }

    /// Ends every agent's connection.
    async fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

// ---- measurements -------------------------------------------------------------------------

/// CPU used by the head and by this process over `window`, in cores.
async fn cpu_window(head_pid: u32, window: Duration) -> (f64, f64) {
    let (head, own, start) = (cpu_seconds(&head_pid.to_string()), cpu_seconds("self"), Instant::now());
    tokio::time::sleep(window).await;
    let elapsed = start.elapsed().as_secs_f64();
    ((cpu_seconds(&head_pid.to_string()) - head) / elapsed, (cpu_seconds("self") - own) / elapsed)
}

/// The smallest histogram bound that holds 99% of what was observed between two scrapes,
/// and how many were.
fn histogram_p99(before: &[(f64, u64)], after: &[(f64, u64)]) -> (f64, u64) {
    let delta: Vec<(f64, u64)> =
        after.iter().map(|(le, n)| (*le, n - before.iter().find(|(b, _)| b == le).map_or(0, |(_, m)| *m))).collect();
    let total = delta.last().map_or(0, |(_, n)| *n);
    let bound = delta.iter().find(|(_, n)| *n as f64 >= total as f64 * 0.99).map_or(f64::NAN, |(le, _)| *le);
    (bound, total)
}

#[derive(Default)]
struct Figures {
    size: usize,
    registered: Duration,
    connect_errors: usize,
    first_connect_error: Option<String>,
    cpu_cores: f64,
    own_cores: f64,
    rss_mib: f64,
    probe_p50: Duration,
    probe_p99: Duration,
    probe_max: Duration,
    probes: usize,
    probes_unanswered: usize,
    probing_cpu_cores: f64,
    head_lag_p99_s: f64,
    head_lag_beats: u64,
    timer_delay_p99: Duration,
    submitted: Duration,
    submit_p50: Duration,
    submit_p99: Duration,
    placed: Option<Duration>,
    running_cpu_cores: f64,
    running_rss_mib: f64,
    killed_agents: usize,
    lost_bundles: usize,
    detected: Duration,
    replaced: Option<Duration>,
    peak_rss_mib: f64,
    links_dropped: usize,
    refusals: usize,
    alive_after_stall: u64,
}

/// The steady window: head CPU and RSS, the head's own lag histogram, this process's timers.
async fn steady(head: &HeadProcess, api: &Api, fleet: &Fleet, figures: &mut Figures) {
    let before = api.lag_histogram().await;
    fleet.shared.stats().timer_delays.clear();
    fleet.shared.recording.store(true, Ordering::Relaxed);
    (figures.cpu_cores, figures.own_cores) = cpu_window(head.pid(), WINDOW).await;
    fleet.shared.recording.store(false, Ordering::Relaxed);
    figures.rss_mib = status_mib(head.pid(), "VmRSS:");
    (figures.head_lag_p99_s, figures.head_lag_beats) = histogram_p99(&before, &api.lag_histogram().await);
    let mut delays = std::mem::take(&mut fleet.shared.stats().timer_delays);
    delays.sort();
    figures.timer_delay_p99 = percentile(&delays, 0.99);
}

/// The probing window: heartbeat round trips through the head.
async fn probe(head: &HeadProcess, fleet: &Fleet, figures: &mut Figures) {
    fleet.shared.stats().probe_rtts.clear();
    fleet.shared.probing.store(true, Ordering::Relaxed);
    (figures.probing_cpu_cores, _) = cpu_window(head.pid(), WINDOW).await;
    fleet.shared.probing.store(false, Ordering::Relaxed);
    // The last probes' answers are still on their way.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut stats = fleet.shared.stats();
    let mut rtts = std::mem::take(&mut stats.probe_rtts);
    rtts.sort();
    figures.probes = rtts.len();
    figures.probes_unanswered = stats.probes_unanswered;
    figures.probe_p50 = percentile(&rtts, 0.5);
    figures.probe_p99 = percentile(&rtts, 0.99);
    figures.probe_max = rtts.last().copied().unwrap_or_default();
}

/// Submits the gangs through the API by concurrent clients, until all their `Start`s have
/// reached agents.
async fn place_gangs(api: &Api, fleet: &Fleet, figures: &mut Figures) {
    let spec = json!({"name": "fleet", "command": ["sleep", "3600"], "min_nodes": GANG_SIZE, "max_nodes": GANG_SIZE,
                      "stop_grace_ms": 100, "retries": {"system": -1, "backoff_ms": {"initial": 0, "max": 0}}});
    let target = fleet.spawns() + GANGS * GANG_SIZE;
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let clients: Vec<_> = (0..SUBMIT_CLIENTS)
        .map(|_| {
            let (api, spec, next) = (api.clone(), spec.clone(), next.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while next.fetch_add(1, Ordering::Relaxed) < GANGS {
                    latencies.push(api.submit(&spec).await);
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for client in clients {
        latencies.extend(client.await.unwrap());
    }
    figures.submitted = start.elapsed();
    latencies.sort();
    (figures.submit_p50, figures.submit_p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
    let placed = until(Duration::from_secs(300), || fleet.spawns() >= target).await;
    figures.placed = placed.then(|| start.elapsed());
}

/// Stops the head for `STALL`, then counts the nodes it holds alive two heartbeats after it
/// resumed.
async fn stall(head: &HeadProcess, api: &Api, figures: &mut Figures) {
    let pid = head.pid() as libc::pid_t;
    // SAFETY: signals to the head process this bench started and still owns.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    tokio::time::sleep(STALL).await;
    unsafe { libc::kill(pid, libc::SIGCONT) };
    tokio::time::sleep(Duration::from_millis(2 * HEARTBEAT_MS)).await;
    figures.alive_after_stall = api.get("/v1/health").await["alive_nodes"].as_u64().unwrap_or(0);
}

/// Polls `done` every few milliseconds until it holds (true) or `limit` passes (false).
async fn until(limit: Duration, done: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

/// Kills 1% of the holders; the time until their last bundle started elsewhere.
async fn recover(fleet: &mut Fleet, figures: &mut Figures) {
    let killed = Instant::now();
    let (agents, bundles, deadline) = fleet.kill_holders();
    (figures.killed_agents, figures.lost_bundles) = (agents, bundles);
    figures.detected = deadline.saturating_duration_since(killed);
    let shared = fleet.shared.clone();
    let replaced = until(Duration::from_secs(120), || shared.stats().awaiting.is_empty()).await;
    let replaced_at = shared.stats().replaced_at;
    figures.replaced = replaced.then(|| replaced_at.map_or(Duration::ZERO, |at| at.duration_since(killed)));
}

async fn run_size(head: &HeadProcess, size: usize) -> Figures {
    let api = head.api();
    let mut figures = Figures { size, ..Figures::default() };
    let started = Instant::now();
    let mut fleet = Fleet::start(size, head.agent_link());
    figures.registered = fleet.registered(started).await;
    api.wait_all_alive(size).await;
    tokio::time::sleep(SETTLE).await;
    steady(head, &api, &fleet, &mut figures).await;
    probe(head, &fleet, &mut figures).await;
    stall(head, &api, &mut figures).await;
    api.wait_all_alive(size).await;
    place_gangs(&api, &fleet, &mut figures).await;
    tokio::time::sleep(SETTLE).await;
    (figures.running_cpu_cores, _) = cpu_window(head.pid(), WINDOW).await;
    figures.running_rss_mib = status_mib(head.pid(), "VmRSS:");
    recover(&mut fleet, &mut figures).await;
    figures.peak_rss_mib = status_mib(head.pid(), "VmHWM:");
    {
        let stats = fleet.shared.stats();
        (figures.connect_errors, figures.links_dropped, figures.refusals) =
            (stats.connect_errors, stats.links_dropped, stats.refusals);
        figures.first_connect_error = stats.first_connect_error.clone();
    }
    fleet.stop().await;
    figures
}

// ---- report -------------------------------------------------------------------------------

/// "  (goal at 10,000 agents: < 0.5 cores: met)" for the largest size, else the goal alone.
fn goal(size: usize, value: f64, goal: f64, unit: &str) -> String {
    let verdict = match (size >= 10_000, value < goal) {
        (false, _) => String::new(),
        (true, true) => ": met".to_string(),
        (true, false) => ": NOT met".to_string(),
    };
    format!("(goal at 10,000 agents: < {goal} {unit}{verdict})")
}

fn optional_s(d: Option<Duration>) -> String {
    d.map_or_else(|| "not reached".to_string(), |d| format!("{:.2} s", d.as_secs_f64()))
}

impl Figures {
    fn print(&self) {
        let n = self.size;
        println!(
            "fleet_{n}: {n} agents, 1 s heartbeats, node_timeout_ms {NODE_TIMEOUT_MS}; all welcomed {:.1} s after the first connect",
            self.registered.as_secs_f64()
        );
        println!(
            "  head CPU, steady 10 s:                  {:.3} cores {}",
            self.cpu_cores,
            goal(n, self.cpu_cores, GOAL_CPU_CORES, "cores")
        );
        println!(
            "  head RSS:                               {:.0} MiB {}",
            self.rss_mib,
            goal(n, self.rss_mib, GOAL_RSS_MIB, "MiB")
        );
        println!(
            "  heartbeat round trip through the head:  p99 {:.1} ms {} — p50 {:.1} ms, max {:.1} ms, {} probes, {} unanswered; head CPU meanwhile {:.3} cores",
            ms(self.probe_p99),
            goal(n, ms(self.probe_p99), GOAL_LAG_P99_MS, "ms"),
            ms(self.probe_p50),
            ms(self.probe_max),
            self.probes,
            self.probes_unanswered,
            self.probing_cpu_cores
        );
        println!(
            "  head's own heartbeat lag histogram:     p99 <= {:.0} ms over {} heartbeats (arrival gap beyond 1 s)",
            self.head_lag_p99_s * 1e3,
            self.head_lag_beats
        );
        println!(
            "  this load generator:                    {:.3} cores; heartbeat timers fired p99 {:.1} ms late",
            self.own_cores,
            ms(self.timer_delay_p99)
        );
        println!(
            "  head stopped {:.0} s (SIGSTOP), then run 2 s:  {} of {n} nodes still alive (all should be)",
            STALL.as_secs_f64(),
            self.alive_after_stall
        );
        println!(
            "  place {GANGS} gangs of {GANG_SIZE}:                   all {} Starts at agents {} after the first submit ({SUBMIT_CLIENTS} clients; all accepted after {:.2} s, each in p50 {:.0} ms, p99 {:.0} ms)",
            GANGS * GANG_SIZE,
            optional_s(self.placed),
            self.submitted.as_secs_f64(),
            ms(self.submit_p50),
            ms(self.submit_p99)
        );
        println!(
            "  with {} attempts running:             head CPU {:.3} cores, RSS {:.0} MiB",
            GANGS * GANG_SIZE,
            self.running_cpu_cores,
            self.running_rss_mib
        );
        let after_detection = self.replaced.map(|r| r.saturating_sub(self.detected));
        println!(
            "  kill {} agents ({} bundles):            all re-placed {} after the kill = {:.2} s until the head may declare the last of them dead (last heartbeat + node_timeout_ms) + {}",
            self.killed_agents,
            self.lost_bundles,
            optional_s(self.replaced),
            self.detected.as_secs_f64(),
            optional_s(after_detection)
        );
        println!(
            "  head RSS peak {:.0} MiB; connect errors {}{}, links dropped by the head {}, messages refused {}",
            self.peak_rss_mib,
            self.connect_errors,
            self.first_connect_error.as_ref().map_or(String::new(), |e| format!(" (first: {e})")),
            self.links_dropped,
            self.refusals
        );
    }
}

/// Sizes named on the command line (numbers), else the default three.
fn sizes() -> Vec<usize> {
    let named: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.replace([',', '_'], "").parse().ok()).collect();
    if named.is_empty() {
        DEFAULT_SIZES.to_vec()
    } else {
        named
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        for size in DEFAULT_SIZES {
            println!("fleet_{size}: bench");
        }
        return;
    }
    let fd_limit = raise_fd_limit();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for size in sizes() {
        // One socket per agent here, and one per agent in the head, which inherits the limit.
        if size as u64 + SPARE_FDS > fd_limit {
            println!(
                "fleet_{size}: skipped: {size} agents need about {} descriptors, RLIMIT_NOFILE is {fd_limit}",
                size as u64 + SPARE_FDS
            );
            continue;
        }
        let head = HeadProcess::start();
        let figures = runtime.block_on(run_size(&head, size));
        drop(head);
        figures.print();
    }
}
