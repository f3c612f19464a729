//! The agent's side of an attempt's supervisor: launching it (argv, never a shell; the
//! attempt's environment; its own session; stdout and stderr into the attempt's log), the
//! connection over which it reports and takes stops, finding supervisors again after the agent
//! restarted, and the records each attempt leaves in `<state-dir>/attempts/`.

use super::cgroup::{self, Cgroups};
use super::job_user::JobUser;
use super::supervisor::{EXIT_RECORD, FAILED_RECORD, PID_RECORD, SOCKET, STATUS_FD};
use ftdrive::agent::{EndReport, Recovered};
use ftdrive::protocol::{AttemptKey, ExitStatus, StartSpec, MAX_SPAWN_MESSAGE_CHARS};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::mpsc::UnboundedSender;

/// Environment variables no attempt may see: the agent's own credentials.
pub const WITHHELD_ENV: [&str; 4] = ["FTDRIVE_TOKEN", "FTDRIVE_AGENT_TOKEN", "FTDRIVE_CA_CERT", "FTDRIVE_STATE_DIR"];

/// Variables of a job's `env` that change how a program is loaded or what code runs in it
/// (glibc's list of those it drops for a setuid program): given to the workers alone, so that
/// a job's `LD_PRELOAD` loads into its processes and not into the supervisor that stops them
/// and records their end.
pub const WORKER_ONLY_ENV: [&str; 23] = [
    "GCONV_PATH",
    "GETCONF_DIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LD_AUDIT",
    "LD_DEBUG",
    "LD_DEBUG_OUTPUT",
    "LD_DYNAMIC_WEAK",
    "LD_HWCAP_MASK",
    "LD_LIBRARY_PATH",
    "LD_ORIGIN_PATH",
    "LD_PRELOAD",
    "LD_PROFILE",
    "LD_SHOW_AUXV",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_TRACE",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TMPDIR",
    "TZDIR",
];

/// What the agent keeps of an attempt while it may still need it (`record.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Record {
    key: AttemptKey,
    stop_grace_ms: u64,
    /// The machine's boot the attempt started in (`boot_id`); none in records written before
    /// it was kept.
    #[serde(default)]
    boot: Option<String>,
    /// The attempt's cgroup (CG-1 in `cgroup.rs`), where it has one.
    #[serde(default)]
    cgroup: Option<PathBuf>,
}

/// This boot of the machine. Process ids recorded in another one name other processes now.
/// Read once: it cannot change while this process runs, and every start records it.
fn boot_id() -> Option<String> {
    static BOOT_ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT_ID
        .get_or_init(|| std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|id| id.trim().to_string()))
        .clone()
}

/// What a supervisor said about its attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// The workers' process groups, by local rank.
    Started {
        pgids: Vec<i32>,
    },
    SpawnFailed(String),
    Ended(ExitStatus),
}

/// A command to a supervisor.
#[derive(Clone, Copy, Debug)]
pub enum Command {
    /// With the fence that made the stop, if one did (AG-8): the supervisor records it.
    Stop {
        grace_ms: u64,
        fence: Option<std::num::NonZeroU32>,
    },
    Kill,
}

/// Where the agent keeps its attempts' records.
pub fn attempts_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("attempts")
}

/// One directory per attempt, named by a hash of its key: unix socket paths are short.
fn attempt_dir(state_dir: &Path, key: &AttemptKey) -> PathBuf {
    let text = format!("{}/{}/{}/{}", key.job, key.actor, key.attempt, key.cycle);
    attempts_dir(state_dir).join(format!("{:016x}", short_hash(text.as_bytes())))
}

/// FNV-1a: a short, stable name for a longer one (not a defence against a chosen collision).
pub fn short_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// Supervisors being started at once: a burst of starts forks one after another, as it did
/// on the agent's own thread, instead of a thread each competing for the machine.
static SPAWNING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Why an attempt did not start. `node_fault`: the node could not start it (its state dir took
/// no write, a fork failed: AG-6 in `src/agent.rs`), not the program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartFailure {
    pub message: String,
    pub node_fault: bool,
}

impl StartFailure {
    fn node(message: String) -> Self {
        StartFailure { message, node_fault: true }
    }

    fn program(message: String) -> Self {
        StartFailure { message, node_fault: false }
    }
}

/// Launches a supervisor for `spec` and connects to it. Its reports go to `reports`; commands
/// are read from the returned channel. An error means the supervisor itself could not start,
/// or its workers did not start within `limits.start_timeout` (`stuck`).
pub async fn launch(
    spec: &StartSpec,
    state_dir: &Path,
    log: &Path,
    cwd: &Path,
    extra_env: &[(&str, String)],
    limits: Limits,
    (reports, grace): (UnboundedSender<(AttemptKey, Report)>, &Grace),
) -> Result<UnboundedSender<Command>, StartFailure> {
    let dir = attempt_dir(state_dir, &spec.key);
    let cgroup = limits.cgroups.as_ref().map(|c| c.for_attempt(&dir_name(&dir)));
    // What may block — the synced record, the fork that waits for its child's exec — runs
    // off this thread, which also carries the agent's heartbeats: a burst of starts on a busy
    // machine would hold them back long enough for the head to declare a healthy node dead.
    let bound = limits.start_timeout;
    let deadline = bound.map(|b| tokio::time::Instant::now() + b);
    let start = Start {
        spec: spec.clone(),
        dir: dir.clone(),
        log: log.to_path_buf(),
        cwd: cwd.to_path_buf(),
        extra_env: extra_env.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        limits,
        cgroup: cgroup.clone(),
    };
    let mut spawning = tokio::spawn(async move {
        let _turn = SPAWNING.acquire().await.expect("never closed");
        tokio::task::spawn_blocking(move || start.spawn()).await
    });
    let spawned = match within(deadline, &mut spawning).await {
        Some(spawned) => spawned,
        None => {
            // A start that goes on after all runs workers no one would watch: once its
            // supervisor says whether they started (and where), it is killed with them.
            let (dir, cgroup) = (dir.clone(), cgroup.clone());
            // The agent's report of the failure may be acknowledged (`forget`) before this start
            // made its directory and cgroup: they are removed here too.
            tokio::spawn(async move {
                if let Ok(Ok(Ok((mut child, read_end)))) = spawning.await {
                    let _ = tokio::time::timeout(LATE_START_WAIT, handshake(read_end)).await;
                    kill_stuck(child.id(), cgroup.as_deref(), &dir);
                    let _ = child.wait().await;
                    if let Some(group) = &cgroup {
                        cgroup::emptied(group).await;
                        cgroup::remove(group);
                    }
                    let _ = std::fs::remove_dir_all(&dir);
                }
            });
            return Err(stuck(bound));
        }
    };
    let (mut child, read_end) = spawned
        .and_then(|joined| joined)
        .map_err(|e| StartFailure::node(format!("cannot start the attempt supervisor: {e}")))??;
    let supervisor = child.id();
    // The supervisor outlives us if we die; while we live, we reap it.
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    match within(deadline, handshake(read_end)).await {
        Some(handshake) => handshake?,
        None => {
            kill_stuck(supervisor, cgroup.as_deref(), &dir);
            return Err(stuck(bound));
        }
    }
    match attach(spec.key.clone(), &dir, reports.clone(), grace.clone()).await {
        Err(_) if dir.join(EXIT_RECORD).exists() => Ok(already_ended(spec.key.clone(), &dir, &reports)),
        attached => attached.map_err(StartFailure::node),
    }
}

/// `work` to its end, or `None` if `deadline` came first.
async fn within<T>(deadline: Option<tokio::time::Instant>, work: impl std::future::Future<Output = T>) -> Option<T> {
    match deadline {
        Some(at) => tokio::time::timeout_at(at, work).await.ok(),
        None => Some(work.await),
    }
}

/// The failure of a start that did not finish within `bound`: the node's, since a fork and an
/// exec take milliseconds where the node is well.
fn stuck(bound: Option<Duration>) -> StartFailure {
    let ms = bound.map_or(0, |b| b.as_millis());
    StartFailure::node(format!(
        "its workers had not started {ms} ms after the start was asked for (a hung disk or mount, a fork that \
         does not return; `ftdrive node --start-timeout-ms`): the attempt was killed"
    ))
}

/// How long a start that went on after its bound is given to say where its workers are, so
/// that they are killed with it.
const LATE_START_WAIT: Duration = Duration::from_secs(10);

/// Kills a supervisor whose workers did not start in time and what it started. Its directory
/// and cgroup go as every failed start's do, once the head has the report (`forget`).
fn kill_stuck(supervisor: Option<u32>, cgroup: Option<&Path>, dir: &Path) {
    if let Some(pid) = supervisor.and_then(|pid| i32::try_from(pid).ok()) {
        // SAFETY: a signal to our own child, which we have not reaped (the reaper task holds it).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    kill_started(dir, cgroup);
}

/// Kills an attempt's workers: the process groups its supervisor recorded, and what left them
/// (`setsid`) but is still in its cgroup (CG-4), where it has one (SV-9).
fn kill_started(dir: &Path, cgroup: Option<&Path>) {
    for pgid in recorded_pgids(dir) {
        super::workers::signal_group(pgid, libc::SIGKILL);
    }
    if let Some(group) = cgroup {
        cgroup::kill(group);
    }
}

/// A command that ends at once (`true`) may have its supervisor record the end and go before
/// the agent connects: report the start and the recorded end, as an attached agent would have
/// heard them. Commands to it have nowhere to go.
fn already_ended(
    key: AttemptKey,
    dir: &Path,
    reports: &UnboundedSender<(AttemptKey, Report)>,
) -> UnboundedSender<Command> {
    let _ = reports.send((key.clone(), Report::Started { pgids: recorded_pgids(dir) }));
    let _ = reports.send((key, ended(dir)));
    tokio::sync::mpsc::unbounded_channel().0
}

/// The workers' process groups, as the supervisor recorded them when they started.
fn recorded_pgids(dir: &Path) -> Vec<i32> {
    let pgids = std::fs::read_to_string(dir.join(PID_RECORD)).unwrap_or_default();
    pgids.lines().filter_map(|p| p.trim().parse().ok()).collect()
}

/// The agent's bounds on a supervisor.
#[derive(Clone, Debug)]
pub struct Limits {
    /// How long it waits for a restarted agent (SV-1).
    pub reattach_grace_ms: u64,
    /// About how much of each log it keeps on disk (`logcap`); 0: all.
    pub max_log_bytes: u64,
    /// Where attempts' cgroups are made; `None`: none are.
    pub cgroups: Option<Cgroups>,
    /// The user the workers run as (`job_user.rs`); `None`: the agent's.
    pub job_user: Option<Arc<JobUser>>,
    /// How long its workers may take to start (`ftdrive node --start-timeout-ms`); `None`: no bound.
    pub start_timeout: Option<Duration>,
}

/// What starting one supervisor needs, owned so that it can move to a blocking thread.
struct Start {
    spec: StartSpec,
    dir: PathBuf,
    log: PathBuf,
    cwd: PathBuf,
    extra_env: Vec<(String, String)>,
    limits: Limits,
    /// The attempt's cgroup, made before its supervisor starts (CG-1).
    cgroup: Option<PathBuf>,
}

impl Start {
    /// The attempt's directory and record, then its supervisor, started: the child and the
    /// read end of its status pipe.
    /// Everything up to the fork is the node's part: its state dir, its logs, a pipe.
    fn spawn(&self) -> Result<(tokio::process::Child, OwnedFd), StartFailure> {
        self.prepare().map_err(StartFailure::node)?;
        let (read_end, write_end) = pipe().map_err(StartFailure::node)?;
        let mut command = self.supervisor_command(&write_end).map_err(StartFailure::node)?;
        let child = command.spawn().map_err(|e| self.spawn_error(&e))?;
        Ok((child, read_end))
    }

    /// Why the supervisor did not start. It starts in the attempt's working directory, so a
    /// missing one fails here — the job's spec, not the node (the OS error alone, "No such file
    /// or directory", would send the user looking for the program instead); any other error
    /// (no process or memory left for a fork) is the node's.
    fn spawn_error(&self, error: &std::io::Error) -> StartFailure {
        if !self.cwd.is_dir() {
            return StartFailure::program(format!(
                "the working directory {} is not a directory on this node ({error}); create it there, or set the \
                 job spec's `cwd` (default: the agent's --work-dir) to one that exists",
                self.cwd.display()
            ));
        }
        StartFailure::node(format!("cannot start the attempt supervisor: {error}"))
    }

    /// The attempt's directory, with the record a restarted agent finds it by, and its cgroup.
    fn prepare(&self) -> Result<(), String> {
        let (dir, spec) = (&self.dir, &self.spec);
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let cgroup = self.cgroup.clone();
        let record = Record { key: spec.key.clone(), stop_grace_ms: spec.stop_grace_ms, boot: boot_id(), cgroup };
        let text = serde_json::to_vec(&record).expect("records serialize");
        // Recorded first: an agent that dies between the two still finds the cgroup to remove.
        crate::paths::write_atomic(&dir.join("record.json"), &text)
            .map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
        match &self.cgroup {
            Some(group) => cgroup::create(group)
                .map_err(|e| format!("cannot create the attempt's cgroup {}: {e}", group.display())),
            None => Ok(()),
        }
    }

    fn supervisor_command(&self, status: &OwnedFd) -> Result<tokio::process::Command, String> {
        let Start { spec, dir, log, cwd, extra_env, limits, .. } = self;
        if let Some(parent) = log.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("cannot create log dir {}: {e}", parent.display()))?;
        }
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("cannot open log {}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        // The running binary, even if its file was replaced or deleted since.
        let mut cmd = tokio::process::Command::new("/proc/self/exe");
        cmd.arg("__attempt")
            .arg("--dir")
            .arg(dir)
            .arg("--reattach-grace-ms")
            .arg(limits.reattach_grace_ms.to_string())
            .args(["--workers", &spec.nproc_per_node.to_string(), "--group-rank", &spec.group_rank.to_string()])
            .args(["--stop-grace-ms", &spec.stop_grace_ms.to_string()])
            .arg("--log")
            .arg(log)
            .args(["--max-log-bytes", &limits.max_log_bytes.to_string()]);
        if let Some(group) = &self.cgroup {
            cmd.arg("--cgroup").arg(group);
        }
        if let Some(user) = &limits.job_user {
            cmd.arg("--run-as").arg(user.credentials.to_arg());
        }
        let (workers_only, both): (Vec<_>, Vec<_>) =
            spec.env.iter().partition(|(name, _)| WORKER_ONLY_ENV.contains(&name.as_str()));
        for (name, value) in workers_only {
            cmd.arg("--worker-env").arg(format!("{name}={value}"));
        }
        cmd.arg("--").args(&spec.command);
        // The agent's own credentials are withheld; a variable the job's spec sets is its
        // user's to pass, whatever its name, except what the agent sets for each attempt (its
        // address), which wins as the contract's variables do.
        for name in WITHHELD_ENV {
            cmd.env_remove(name);
        }
        // `PWD` names the directory the command starts in, as a shell or torchrun's worker
        // sees it, not the one the agent was started in; the job's own `PWD` is its to set, as
        // are the jobs' user's login variables.
        let login = limits.job_user.as_ref().map(|user| user.login_env()).into_iter().flatten();
        cmd.env("PWD", cwd)
            .envs(login)
            .envs(both)
            .envs(extra_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(false);
        let fd = std::os::fd::AsRawFd::as_raw_fd(status);
        // SAFETY: between fork and exec only async-signal-safe calls: a new session (so that the
        // agent's terminal and group signals do not reach the supervisor), and the status pipe
        // placed where the supervisor reads it (dup2 clears close-on-exec on the copy).
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 || libc::dup2(fd, STATUS_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(cmd)
    }
}

/// "ok PID" once the supervisor listens and the command runs, or why not: "err MESSAGE" (the
/// program could not start) or "fault MESSAGE" (the node could not start it).
async fn handshake(status: OwnedFd) -> Result<(), StartFailure> {
    let mut line = String::new();
    let unread = |e: std::io::Error| StartFailure::node(format!("cannot read the attempt supervisor's status: {e}"));
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(status).map_err(unread)?;
    pipe.read_to_string(&mut line).await.map_err(unread)?;
    match line.trim_end().split_once(' ') {
        Some(("ok", _)) => Ok(()),
        Some(("err", message)) => Err(StartFailure::program(message.to_string())),
        Some(("fault", message)) => Err(StartFailure::node(message.to_string())),
        _ => Err(StartFailure::node("the attempt supervisor exited before starting the command".to_string())),
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into the array, which we then own.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if rc != 0 {
        return Err(format!("cannot create a pipe: {}", std::io::Error::last_os_error()));
    }
    // Only the read end is non-blocking (the tokio side); the supervisor writes blocking.
    // SAFETY: fds[1] is a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fds[1], libc::F_GETFL);
        libc::fcntl(fds[1], libc::F_SETFL, flags & !libc::O_NONBLOCK);
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

/// The re-attach grace supervisors keep under a head with `node_timeout_ms` and
/// `heartbeat_interval_ms` (a timeout of 0: an older head that does not say):
/// `--reattach-grace-ms` where given, but never longer than the node timeout less a heartbeat
/// interval. The head re-places a silent node's attempts a node timeout after the agent's last
/// heartbeat, which came up to an interval before the agent went: a supervisor that kept its
/// attempt for the whole node timeout from then would run a rank beside its replacement for
/// up to that interval. A longer one given comes with a warning that says so.
pub fn effective_grace_ms(
    given_ms: Option<u64>,
    node_timeout_ms: u64,
    heartbeat_interval_ms: u64,
) -> (u64, Option<String>) {
    if node_timeout_ms == 0 {
        return (given_ms.unwrap_or(0), None);
    }
    let most_ms = node_timeout_ms.saturating_sub(heartbeat_interval_ms).max(1);
    match given_ms {
        None => (most_ms, None),
        Some(given) if given > most_ms => (
            most_ms,
            Some(format!(
                "--reattach-grace-ms {given} is longer than the head's node timeout less a heartbeat interval \
                 ({node_timeout_ms} - {heartbeat_interval_ms} ms): the head re-places a silent node's attempts \
                 after that, so they would run twice; attempts wait {most_ms} ms for a restarted agent (start \
                 the head with a longer --node-timeout-ms for more)"
            )),
        ),
        Some(given) => (given, None),
    }
}

/// The re-attach grace (DESIGN §10) as the agent knows it: given by `--reattach-grace-ms`, else
/// the head's node timeout once a head has welcomed the agent; unknown before that.
#[derive(Clone, Debug)]
pub struct Grace(Arc<AtomicU64>);

impl Grace {
    pub fn new(given_ms: Option<u64>) -> Grace {
        Grace(Arc::new(AtomicU64::new(given_ms.unwrap_or(0))))
    }

    pub fn set_ms(&self, ms: u64) {
        self.0.store(ms, Ordering::Relaxed);
    }

    pub fn known_ms(&self) -> Option<u64> {
        Some(self.0.load(Ordering::Relaxed)).filter(|ms| *ms > 0)
    }

    /// The ping line for a supervisor: `ping GRACE_MS`, or a bare `ping` (the supervisor keeps
    /// the grace it has) while the grace is unknown.
    fn ping(&self) -> String {
        match self.known_ms() {
            Some(ms) => format!("ping {ms}\n"),
            None => "ping\n".to_string(),
        }
    }
}

/// Connects to a supervisor and relays: its reports to `reports`, commands to it. When the
/// connection ends without a report of the end, the record on disk says how it ended — or,
/// with no record, the supervisor died and its group is killed here.
async fn attach(
    key: AttemptKey,
    dir: &Path,
    reports: UnboundedSender<(AttemptKey, Report)>,
    grace: Grace,
) -> Result<UnboundedSender<Command>, String> {
    let stream =
        UnixStream::connect(dir.join(SOCKET)).await.map_err(|e| format!("cannot reach the attempt supervisor: {e}"))?;
    let (commands, mut incoming) = tokio::sync::mpsc::unbounded_channel::<Command>();
    let dir = dir.to_path_buf();
    tokio::spawn(async move {
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        let mut told_started = false;
        // The end itself, from a supervisor whose state dir took no record of it (SV-2).
        let mut told_end = None;
        let mut ping = tokio::time::interval(std::time::Duration::from_millis(super::supervisor::PING_MS));
        loop {
            tokio::select! {
                // SV-1: a supervisor that hears nothing from its agent for its grace takes the
                // agent for hung and ends the attempt.
                // Each ping carries the grace, once known: a head restarted with another node
                // timeout, or an agent with another --reattach-grace-ms, changes it for
                // supervisors already running.
                _ = ping.tick() => {
                    let _ = write.write_all(grace.ping().as_bytes()).await;
                }
                line = lines.next_line() => match line {
                    Ok(Some(line)) => {
                        if let Some(pgids) = line.strip_prefix("started ") {
                            let pgids = pgids.split_whitespace().filter_map(|p| p.parse().ok()).collect();
                            let _ = reports.send((key.clone(), Report::Started { pgids }));
                            told_started = true;
                        } else if let Some(status) = line.strip_prefix("ended ") {
                            let status = serde_json::from_str::<ExitStatus>(status).ok();
                            told_end = status.map(|s| Report::Ended(s.bounded()));
                        }
                    }
                    _ => break,
                },
                command = incoming.recv() => {
                    let text = match command {
                        // The fence on a line of its own, before the stop: a supervisor of
                        // an older build passes over a line it does not know.
                        Some(Command::Stop { grace_ms, fence: Some(fence) }) => format!("fence {fence}\nstop {grace_ms}\n"),
                        Some(Command::Stop { grace_ms, fence: None }) => format!("stop {grace_ms}\n"),
                        Some(Command::Kill) => "kill\n".to_string(),
                        None => continue,
                    };
                    let _ = write.write_all(text.as_bytes()).await;
                }
            }
        }
        let end = told_end.unwrap_or_else(|| ended(&dir));
        emptied(&dir).await;
        // Workers that ended before the supervisor took our connection: it went without a
        // word, but they ran (their groups are recorded), as an attached agent would have heard.
        if !told_started && matches!(end, Report::Ended(_)) {
            let pgids = recorded_pgids(&dir);
            if !pgids.is_empty() {
                let _ = reports.send((key.clone(), Report::Started { pgids }));
            }
        }
        let _ = reports.send((key, end));
    });
    Ok(commands)
}

/// The most of an attempt's record that is read. Its directory is writable by the job (it runs
/// as the agent's user): a record made huge must not become a report too large for the head,
/// which would close the connection and be sent it again for ever.
const MAX_RECORD_BYTES: u64 = 64 * 1024;

/// A record's bytes, if it is there and within `MAX_RECORD_BYTES`.
fn read_record_file(path: &Path) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path).ok()?.take(MAX_RECORD_BYTES + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= MAX_RECORD_BYTES).then_some(bytes)
}

/// How an attempt whose supervisor is gone ended, from its records.
fn ended(dir: &Path) -> Report {
    if let Some(text) = read_record_file(&dir.join(EXIT_RECORD)) {
        if let Ok(status) = serde_json::from_slice::<ExitStatus>(&text) {
            return Report::Ended(status.bounded());
        }
    }
    if let Some(message) = read_record_file(&dir.join(FAILED_RECORD)) {
        let message = ftdrive::protocol::one_line(&String::from_utf8_lossy(&message), MAX_SPAWN_MESSAGE_CHARS);
        return Report::SpawnFailed(message);
    }
    // The supervisor died without a record (killed outright): take its workers down too —
    // unless the machine restarted since (its workers went with it, and their ids may now
    // belong to anyone's processes).
    if started_this_boot(dir) {
        kill_started(dir, recorded_cgroup(dir).as_deref());
    }
    Report::Ended(ExitStatus::supervisor_lost())
}

/// Returns once what is left in the attempt's cgroup (what `ended` killed, a supervisor that
/// could not leave it) is gone, or after a bounded wait: the end is acknowledged at once once
/// reported, and the acknowledgement removes the group (`forget`, CG-4), which must be empty.
async fn emptied(dir: &Path) {
    if let Some(group) = recorded_cgroup(dir) {
        cgroup::emptied(&group).await;
    }
}

/// What an earlier run of this agent left in its state dir: supervisors still running (now
/// re-attached, their reports going to `reports`), ends not yet acknowledged, and the command
/// channels of the re-attached ones.
pub async fn recover(
    state_dir: &Path,
    reports: UnboundedSender<(AttemptKey, Report)>,
    grace: &Grace,
) -> (Recovered, Vec<(AttemptKey, UnboundedSender<Command>)>) {
    let mut recovered = Recovered::default();
    let mut attached = Vec::new();
    let Ok(entries) = std::fs::read_dir(attempts_dir(state_dir)) else { return (recovered, attached) };
    let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    dirs.sort();
    let mut ended_dirs = Vec::new();
    for dir in dirs {
        let Some(record) = read_record(&dir) else {
            let _ = std::fs::remove_dir_all(&dir);
            continue;
        };
        let key = record.key.clone();
        let finished = dir.join(EXIT_RECORD).exists() || dir.join(FAILED_RECORD).exists();
        if !finished {
            if let Ok(commands) = attach(key.clone(), &dir, reports.clone(), grace.clone()).await {
                recovered.running.push((key.clone(), record.stop_grace_ms));
                attached.push((key, commands));
                continue;
            }
            if machine_restarted_since(&record) {
                // Its processes went down with the machine, not of themselves: no end to
                // report. The head counts the attempt lost with the old agent (`node_lost`,
                // the system budget), as for any machine loss — not a SIGKILL the user pays for.
                let _ = std::fs::remove_dir_all(&dir);
                continue;
            }
        }
        let report = match ended(&dir) {
            Report::SpawnFailed(message) => EndReport::SpawnFailed { message, node_fault: false },
            Report::Ended(status) => EndReport::Exited(status),
            Report::Started { .. } => unreachable!("ended() reports an end"),
        };
        recovered.finished.push(key.clone());
        recovered.ended.push((key, report));
        ended_dirs.push(dir);
    }
    // Every cgroup `ended` killed was killed first, so their processes exit side by side.
    for dir in ended_dirs {
        emptied(&dir).await;
    }
    (recovered, attached)
}

/// The machine booted since the attempt started (both boots known, and different).
fn machine_restarted_since(record: &Record) -> bool {
    matches!((&record.boot, boot_id()), (Some(then), Some(now)) if *then != now)
}

fn started_this_boot(dir: &Path) -> bool {
    let started = read_record(dir).and_then(|r| r.boot);
    started.is_some() && started == boot_id()
}

fn read_record(dir: &Path) -> Option<Record> {
    serde_json::from_slice(&read_record_file(&dir.join("record.json"))?).ok()
}

/// The attempt's cgroup, as its record names it, if it is one an agent made for it (CG-4).
fn recorded_cgroup(dir: &Path) -> Option<PathBuf> {
    let group = read_record(dir)?.cgroup?;
    cgroup::is_attempt_cgroup(&group, &dir_name(dir)).then_some(group)
}

fn dir_name(dir: &Path) -> String {
    dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The head has the attempt's end: its records go (its log stays), and its cgroup, where its
/// supervisor could not remove it (CG-3, CG-4).
pub fn forget(state_dir: &Path, key: &AttemptKey) {
    let dir = attempt_dir(state_dir, key);
    if let Some(group) = recorded_cgroup(&dir) {
        cgroup::remove(&group);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::{CommandExt, ExitStatusExt};

    fn write_record(dir: &Path, boot: Option<String>) {
        let key = AttemptKey { job: "j1".into(), actor: 0, attempt: 1, cycle: 1 };
        let record = Record { key, stop_grace_ms: 0, boot, cgroup: None };
        std::fs::write(dir.join("record.json"), serde_json::to_vec(&record).unwrap()).unwrap();
    }

    /// A worker in a process group of its own, killed when the test ends however it ends.
    struct Worker(std::process::Child);

    impl Drop for Worker {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn true_spec() -> StartSpec {
        StartSpec {
            key: AttemptKey { job: "j1".into(), actor: 0, attempt: 1, cycle: 1 },
            actor_name: "j1/0".into(),
            command: vec!["true".into()],
            env: Default::default(),
            cwd: None,
            stop_grace_ms: 0,
            nproc_per_node: 1,
            group_rank: 0,
        }
    }

    #[tokio::test]
    async fn a_state_dir_that_takes_no_attempt_is_the_nodes_fault() {
        let state = tempfile::tempdir().unwrap();
        std::fs::write(attempts_dir(state.path()), b"a file where the directory goes").unwrap();
        let (reports, _) = tokio::sync::mpsc::unbounded_channel();
        let limits =
            Limits { reattach_grace_ms: 0, max_log_bytes: 0, cgroups: None, job_user: None, start_timeout: None };
        let log = state.path().join("attempt-1.log");
        let grace = Grace::new(None);
        let error = launch(&true_spec(), state.path(), &log, state.path(), &[], limits, (reports, &grace)).await;
        let error = error.unwrap_err();
        assert!(error.node_fault, "{error:?}");
        assert!(error.message.starts_with("cannot create "), "{error:?}");
    }

    #[tokio::test]
    async fn a_cgroup_that_cannot_be_made_is_the_nodes_fault_and_nothing_starts() {
        let state = tempfile::tempdir().unwrap();
        let (reports, _) = tokio::sync::mpsc::unbounded_channel();
        std::fs::write(state.path().join("a-file"), b"where the parent would go").unwrap();
        let cgroups = Some(Cgroups::unchecked(state.path().join("a-file/ftdrive")));
        let limits = Limits { reattach_grace_ms: 0, max_log_bytes: 0, cgroups, job_user: None, start_timeout: None };
        let log = state.path().join("attempt-1.log");
        let grace = Grace::new(None);
        let error = launch(&true_spec(), state.path(), &log, state.path(), &[], limits, (reports, &grace)).await;
        let error = error.unwrap_err();
        assert!(error.node_fault, "{error:?}");
        assert!(error.message.starts_with("cannot create the attempt's cgroup "), "{error:?}");
        assert!(!log.exists(), "no supervisor started");
    }

    #[tokio::test]
    async fn a_missing_working_directory_is_named_as_the_reason_an_attempt_did_not_start() {
        let state = tempfile::tempdir().unwrap();
        let cwd = state.path().join("no-such-dir");
        let spec = true_spec();
        let log = state.path().join("attempt-1.log");
        let (reports, _) = tokio::sync::mpsc::unbounded_channel();
        let limits =
            Limits { reattach_grace_ms: 0, max_log_bytes: 0, cgroups: None, job_user: None, start_timeout: None };
        let error =
            launch(&spec, state.path(), &log, &cwd, &[], limits, (reports, &Grace::new(None))).await.unwrap_err();
        let said = &error.message;
        assert!(said.contains(&format!("working directory {} is not a directory", cwd.display())), "{said}");
        assert!(!error.node_fault, "the job's cwd, not the node");
    }

    /// After a reboot, an attempt that was running has no end to report: the head counts it lost
    /// with the machine. One that ended before the reboot still reports its end; one whose boot
    /// is unknown is reported killed, as before.
    #[tokio::test]
    async fn an_attempt_the_machine_rebooted_under_reports_no_end() {
        let state = tempfile::tempdir().unwrap();
        let make = |actor: u32, boot: Option<String>, exited: bool| {
            let key = AttemptKey { job: "j1".into(), actor, attempt: 1, cycle: 1 };
            let dir = attempt_dir(state.path(), &key);
            std::fs::create_dir_all(&dir).unwrap();
            let record = Record { key: key.clone(), stop_grace_ms: 0, boot, cgroup: None };
            std::fs::write(dir.join("record.json"), serde_json::to_vec(&record).unwrap()).unwrap();
            if exited {
                std::fs::write(dir.join(EXIT_RECORD), serde_json::to_vec(&ExitStatus::code(0)).unwrap()).unwrap();
            }
            (key, dir)
        };
        let (_, rebooted) = make(0, Some("an-earlier-boot".into()), false);
        let (ended_before, _) = make(1, Some("an-earlier-boot".into()), true);
        let (unknown, _) = make(2, None, false);
        let (reports, _) = tokio::sync::mpsc::unbounded_channel();
        let (recovered, attached) = recover(state.path(), reports, &Grace::new(None)).await;
        assert!(attached.is_empty() && recovered.running.is_empty());
        let mut ended: Vec<(AttemptKey, EndReport)> = recovered.ended;
        ended.sort_by(|a, b| a.0.cmp(&b.0));
        let killed = EndReport::Exited(ExitStatus::supervisor_lost());
        assert_eq!(ended, [(ended_before, EndReport::Exited(ExitStatus::code(0))), (unknown, killed)]);
        assert!(!rebooted.exists(), "its records are gone: nothing is owed for it");
    }

    #[test]
    fn a_dead_supervisors_groups_are_killed_only_in_the_boot_they_started_in() {
        let dir = tempfile::tempdir().unwrap();
        let mut worker = Worker(std::process::Command::new("sleep").arg("600").process_group(0).spawn().unwrap());
        std::fs::write(dir.path().join(PID_RECORD), worker.0.id().to_string()).unwrap();
        let killed = Report::Ended(ExitStatus::supervisor_lost());

        write_record(dir.path(), Some("an-earlier-boot".into()));
        assert_eq!(ended(dir.path()), killed);
        write_record(dir.path(), None);
        assert_eq!(ended(dir.path()), killed);
        assert!(worker.0.try_wait().unwrap().is_none(), "a process group recorded in another boot is left alone");

        write_record(dir.path(), boot_id());
        assert_eq!(ended(dir.path()), killed);
        assert_eq!(worker.0.wait().unwrap().signal(), Some(libc::SIGKILL), "this boot's group is killed");
    }

    #[test]
    fn a_grace_longer_than_the_heads_node_timeout_less_an_interval_is_cut_to_it() {
        assert_eq!(effective_grace_ms(None, 3_000, 1_000), (2_000, None));
        assert_eq!(effective_grace_ms(Some(1_000), 3_000, 1_000), (1_000, None));
        let (grace, warning) = effective_grace_ms(Some(15_000), 1_500, 500);
        assert_eq!(grace, 1_000);
        let warning = warning.unwrap();
        assert!(
            warning.starts_with("--reattach-grace-ms 15000 is longer than the head's node timeout less a"),
            "{warning}"
        );
        assert_eq!(effective_grace_ms(Some(15_000), 0, 0), (15_000, None), "a head that does not say");
    }

    #[test]
    fn pings_carry_the_grace_once_it_is_known() {
        let grace = Grace::new(None);
        assert_eq!(grace.ping(), "ping\n", "unknown: the supervisor keeps its own");
        grace.clone().set_ms(8_000);
        assert_eq!(grace.ping(), "ping 8000\n", "every attempt's connection shares it");
        assert_eq!(Grace::new(Some(500)).ping(), "ping 500\n");
    }

    /// An attempt's directory is the job's to write: an exit record made huge is not read whole
    /// nor reported as is (a report over the head's message bound would be refused and sent
    /// again for ever), and a large message in a readable one is cut to the core's bound.
    #[test]
    fn a_huge_exit_record_becomes_no_huge_report() {
        let dir = tempfile::tempdir().unwrap();
        let record =
            |error: &str| serde_json::to_vec(&ExitStatus { error: Some(error.to_string()), ..ExitStatus::code(1) });
        std::fs::write(dir.path().join(EXIT_RECORD), record(&"A".repeat(50_000)).unwrap()).unwrap();
        let Report::Ended(status) = ended(dir.path()) else { panic!("an exit record is an end") };
        assert_eq!(status.error.map(|e| e.chars().count()), Some(ftdrive::protocol::MAX_ERROR_CHARS));
        std::fs::write(dir.path().join(EXIT_RECORD), record(&"A".repeat(6 << 20)).unwrap()).unwrap();
        let Report::Ended(status) = ended(dir.path()) else { panic!("an exit record is an end") };
        assert_eq!(status, ExitStatus::supervisor_lost(), "past the bound the record is not read");
    }
}
