//! The attempt supervisor, `ftdrive __attempt --dir DIR --reattach-grace-ms G [--workers N
//! --group-rank R --stop-grace-ms S --log FILE --max-log-bytes B --cgroup DIR
//! --worker-env NAME=VALUE...] -- COMMAND...`: a small process between the agent and one
//! attempt's worker group (`workers.rs`), in its own session so that nothing the agent's
//! terminal or process group receives reaches it. The job's loader variables (`LD_PRELOAD`
//! and the like) come as `--worker-env`, for the workers alone.
//!
//! It exists so that restarting the agent loses no work (DESIGN §10), and so that nothing
//! outlives its attempt:
//!
//! - **SV-1 outlives the agent, for a while.** The agent talks to it over a unix socket in the
//!   attempt's directory. When that connection drops, the supervisor waits `reattach_grace_ms`
//!   (as given at launch, or as the agent's pings last said) for an agent to connect again (a
//!   restarted agent scans its state dir and does); if none does, it kills the workers'
//!   process groups. A connected agent that says nothing for as long (it pings every
//!   `PING_MS`) is hung or stopped, and counts as gone: the head has declared its node dead by
//!   then and placed the rank elsewhere, so the workers must not run on beside their
//!   replacement.
//! - **SV-2 leaves a record.** When the group ends, the supervisor writes how (`exit`, an
//!   `ExitStatus` in JSON) before it tells a connected agent and exits, so that an agent that
//!   was away still learns it. Where the state dir takes no record, the end goes to the agent
//!   on its connection — held for one that connects within the re-attach grace. A group that
//!   cannot start leaves `failed` instead. A group that failed only after an agent ordered it
//!   stopped (or after the re-attach grace ran out) is recorded as `signalled_by_agent`: an
//!   agent that shut down while the head was away must not have its own stop charged to the
//!   user when it reports the end later.
//! - **SV-3 takes everything down.** Each worker leads its own process group and dies with the
//!   supervisor (parent-death signal); when a worker ends, whatever it left in its group is
//!   killed.
//! - **SV-4 stops escalate here.** `stop G` sends SIGTERM to every worker's group and SIGKILL
//!   after G ms, whether or not an agent is still connected by then.
//! - **SV-6 nothing escapes.** The supervisor is a child subreaper: whatever a worker leaves
//!   behind — a `setsid` child, a daemon that double-forked, a process that ignores SIGTERM —
//!   is re-parented to it, and before the end is recorded every such process is killed.
//! - **SV-5 one failing worker ends the group.** As torchrun's agent does: the first worker to
//!   fail has its peers stopped (SIGTERM, SIGKILL after the spec's `stop_grace_ms`), and the
//!   group ends with that worker's status, naming its local rank. A worker that succeeds waits
//!   for its peers; the group succeeds when all have.
//! - **SV-7 hears only the agent.** A connection from one of the attempt's own processes (a
//!   job that found the socket in its attempt's directory) is closed at once: a job that spoke
//!   as its agent could keep its supervisor alive past a stop by pinging it.
//! - **SV-8 logs stay bounded.** With `--max-log-bytes`, each log of the attempt keeps about
//!   its last that many bytes on disk (`logcap.rs`): a job that prints without end cannot fill
//!   its node's disk.
//! - **SV-9 a cgroup holds the attempt, where there is one.** With `--cgroup DIR`, the
//!   supervisor joins it before any worker starts, leaves it once they have, and removes it at
//!   the end (CG-2, CG-3 in `cgroup.rs`): what escapes its process tree after its own death is
//!   still there for the agent to kill.
//! - **SV-10 the workers may be another user.** With `--run-as`, each worker takes on the jobs'
//!   user before its exec, and the supervisor keeps its own (JU-1..3 in `job_user.rs`).
//!
//! Status pipe, supervisor → agent, once: `ok PGID`, `err MESSAGE` (the program could not
//! start; a `failed` record is left), `fault MESSAGE` (the node could not start it: AG-6).
//! Socket lines, supervisor → agent: `started PGID...` (one per worker), `exited` (the record
//! is written), `ended STATUS-JSON` (the record could not be: the end itself); agent →
//! supervisor: `stop GRACE_MS`, `kill`, `ping [REATTACH_GRACE_MS]` (the grace to keep from then
//! on, when the agent knows it), `fence ID` (the stop that follows is that fence's: recorded
//! with the end, AG-8 in the agent).

use super::cgroup;
use super::job_user::Credentials;
use super::logcap::LogCap;
use super::workers::{self, signal_group, Group, GroupSpec};
use ftdrive::protocol::ExitStatus;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// The descriptor the agent reads "ok PID" or "err MESSAGE" from once the socket is bound.
pub const STATUS_FD: i32 = 3;
pub const SOCKET: &str = "sock";
/// How often a connected agent pings its supervisors (SV-1): well inside any re-attach grace,
/// which is the head's node timeout (over a heartbeat interval) unless set.
pub const PING_MS: u64 = 200;
pub const EXIT_RECORD: &str = "exit";
pub const FAILED_RECORD: &str = "failed";
/// The workers' process group ids, one per line.
pub const PID_RECORD: &str = "pid";
/// How long the workers' last output may take to reach the logs once they ended.
const DRAIN_OUTPUT_MS: u64 = 2_000;

struct Args {
    reattach_grace_ms: u64,
    stop_grace_ms: u64,
    /// Each log keeps about its last this many bytes on disk (`logcap`); 0: unbounded.
    max_log_bytes: u64,
    /// The attempt's cgroup (SV-9).
    cgroup: Option<PathBuf>,
    group: GroupSpec,
}

enum Event {
    Exited(u32, std::process::ExitStatus),
    Attached(u64, UnixStream),
    Line(u64, String),
    Detached(u64),
}

/// How the group stands: who still runs, and the first failure, if any (SV-5).
struct Progress {
    pgids: Vec<i32>,
    running: u32,
    /// The first failure: its local rank, how it ended, and whether the runtime had ordered
    /// the group to end by then (SV-2).
    failure: Option<(u32, std::process::ExitStatus, bool)>,
    /// An agent ordered a stop or a kill, or the re-attach grace ran out (SV-1).
    ordered_to_end: bool,
    /// It was the re-attach grace that ran out: no agent came back (the ledger says so).
    orphaned: bool,
    /// The agent's fence that ordered the stop, recorded with the end (AG-8 in the agent).
    fence: Option<std::num::NonZeroU32>,
}

/// Runs the supervisor; never returns.
pub fn run(args: &[String]) -> ! {
    let Some(mut args) = parse(args) else {
        crate::note!(
            "usage: ftdrive __attempt --dir DIR --reattach-grace-ms MS [--workers N --group-rank R \
             --stop-grace-ms MS --log FILE --max-log-bytes N --cgroup DIR --worker-env NAME=VALUE \
             --run-as UID:GID:GROUPS] -- COMMAND [ARGS...]"
        );
        std::process::exit(2);
    };
    // SAFETY: fcntl only changes a descriptor flag of this process; prctl only marks this
    // process as the reaper of its orphaned descendants (SV-6).
    unsafe {
        libc::fcntl(STATUS_FD, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
    }
    // SAFETY: the agent put the write end of its status pipe at this descriptor for us.
    let mut status = unsafe { std::fs::File::from_raw_fd(STATUS_FD) };
    let cgroup = args.cgroup.clone();
    let cgroup = cgroup.as_deref();
    // SV-9: before any thread or worker starts, so that all of them are in it.
    if let Some(Err(e)) = cgroup.map(cgroup::join) {
        let dir = cgroup.expect("joined one").display();
        fail_on_node(&mut status, &format!("cannot join the attempt's cgroup {dir}: {e}"), None);
    }
    // JU-3: the jobs' user writes its error files in a directory of its own.
    if let Some(user) = &args.group.run_as {
        let under = std::env::temp_dir();
        match user.private_dir(&under) {
            Ok(dir) => args.group.error_dir = dir,
            Err(e) => {
                let why = format!(
                    "cannot make the jobs' user a directory for its error files in {}: {e}; give the agent a \
                     writable $TMPDIR",
                    under.display()
                );
                fail_on_node(&mut status, &why, cgroup)
            }
        }
    }
    let started = bind(&args.group.dir)
        .map_err(|e| (format!("cannot listen in {}: {e}", args.group.dir.display()), true))
        .and_then(|listener| Ok((listener, workers::start(&args.group).map_err(|e| (e.message, e.node_fault))?)));
    let (listener, group) = match started {
        Ok(started) => started,
        Err((message, node_fault)) => {
            remove_error_dir(&args.group);
            match node_fault {
                true => fail_on_node(&mut status, &message, cgroup),
                false => fail(&mut status, &args.group.dir, &message, cgroup),
            }
        }
    };
    // SV-9: the workers are in it; what the job does to its cgroup (kill, freeze) reaches them
    // alone.
    if let Some(cgroup) = cgroup {
        cgroup::leave(cgroup);
    }
    let pgids: Vec<String> = group.pgids.iter().map(i32::to_string).collect();
    let _ = write_atomic(&args.group.dir.join(PID_RECORD), pgids.join("\n").as_bytes());
    let _ = writeln!(status, "ok {}", pgids[0]);
    drop(status);
    let cap = match (&args.group.log, args.max_log_bytes > 0) {
        (Some(log), true) => Some(LogCap::new(workers::logs_of(log, args.group.workers), args.max_log_bytes)),
        _ => None,
    };
    if let Some(cap) = &cap {
        cap.watch();
    }
    supervise(group, listener, &args, cap.as_deref())
}

fn parse(args: &[String]) -> Option<Args> {
    let (mut dir, mut grace, mut log, mut cgroup) = (None, None, None, None);
    let (mut workers, mut group_rank, mut stop_grace_ms, mut max_log_bytes) = (1, 0, 0, 0);
    let (mut env, mut run_as) = (Vec::new(), None);
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let mut value = || rest.next().cloned();
        match arg.as_str() {
            "--dir" => dir = value().map(PathBuf::from),
            "--reattach-grace-ms" => grace = value().and_then(|g| g.parse().ok()),
            "--workers" => workers = value()?.parse().ok().filter(|n| *n >= 1)?,
            "--group-rank" => group_rank = value()?.parse().ok()?,
            "--stop-grace-ms" => stop_grace_ms = value()?.parse().ok()?,
            "--log" => log = value().map(PathBuf::from),
            "--max-log-bytes" => max_log_bytes = value()?.parse().ok()?,
            "--cgroup" => cgroup = value().map(PathBuf::from),
            "--run-as" => run_as = Some(Credentials::parse_arg(&value()?)?),
            "--worker-env" => {
                let (name, val) = value()?.split_once('=').map(|(n, v)| (n.to_string(), v.to_string()))?;
                env.push((name, val));
            }
            "--" => break,
            _ => return None,
        }
    }
    let command: Vec<String> = rest.cloned().collect();
    let dir = dir?;
    let error_dir = dir.clone();
    let group = GroupSpec { command, workers, group_rank, log, dir, error_dir, env, run_as };
    (!group.command.is_empty()).then_some(Args {
        reattach_grace_ms: grace?,
        stop_grace_ms,
        max_log_bytes,
        cgroup,
        group,
    })
}

fn bind(dir: &Path) -> std::io::Result<UnixListener> {
    let path = dir.join(SOCKET);
    let _ = std::fs::remove_file(&path);
    UnixListener::bind(path)
}

/// SV-2 for a group that never ran because of its program.
fn fail(status: &mut std::fs::File, dir: &Path, message: &str, cgroup: Option<&Path>) -> ! {
    if let Some(cgroup) = cgroup {
        cgroup::leave_and_remove(cgroup);
    }
    let _ = write_atomic(&dir.join(FAILED_RECORD), message.as_bytes());
    let _ = writeln!(status, "err {message}");
    std::process::exit(127);
}

/// A group that never ran because of the node (AG-6). No record: its state dir may take none,
/// and an agent that restarts before it hears this finds no record and reports the attempt
/// lost with its supervisor — the node's failure either way.
fn fail_on_node(status: &mut std::fs::File, message: &str, cgroup: Option<&Path>) -> ! {
    if let Some(cgroup) = cgroup {
        cgroup::leave_and_remove(cgroup);
    }
    let _ = writeln!(status, "fault {message}");
    std::process::exit(127);
}

fn supervise(mut group: Group, listener: UnixListener, args: &Args, cap: Option<&LogCap>) -> ! {
    let (tx, rx) = channel();
    for (local_rank, mut child) in group.children.drain(..).enumerate() {
        let waiter = tx.clone();
        std::thread::spawn(move || {
            if let Ok(status) = child.wait() {
                let _ = waiter.send(Event::Exited(local_rank as u32, status));
            }
        });
    }
    std::thread::spawn(move || accept(listener, tx));
    let mut progress = Progress {
        pgids: group.pgids.clone(),
        running: args.group.workers,
        failure: None,
        ordered_to_end: false,
        orphaned: false,
        fence: None,
    };
    let mut agent: Option<(u64, UnixStream)> = None;
    let mut kill_at: Option<Instant> = None;
    // Since when no agent has been heard (SV-1): an agent is expected to connect at once, and
    // a connected one to ping; until it does, the grace runs.
    let mut alone_since = Some(Instant::now());
    let mut grace = Duration::from_millis(args.reattach_grace_ms);
    // An end the state dir took no record of, held for the next agent to connect (SV-2).
    let mut unrecorded: Option<ExitStatus> = None;
    loop {
        let deadline = [kill_at, alone_since.map(|t| t + grace)].into_iter().flatten().min();
        let wait = deadline.map_or(Duration::from_secs(3600), |d| d.saturating_duration_since(Instant::now()));
        match rx.recv_timeout(wait) {
            Ok(Event::Exited(local_rank, status)) => {
                if let Some(stop_at) = progress.worker_ended(local_rank, status, args.stop_grace_ms) {
                    kill_at = Some(kill_at.map_or(stop_at, |k| k.min(stop_at)));
                }
                if progress.running == 0 {
                    // Recorded with the end: an agent or head away hears of it later.
                    let ended_ms = crate::paths::unix_ms();
                    group.drain_output(Duration::from_millis(DRAIN_OUTPUT_MS));
                    // What stays on disk after the attempt is within the bound.
                    if let Some(cap) = cap {
                        cap.apply();
                    }
                    let (ended_ms, unlogged) = (Some(ended_ms), group.unlogged());
                    let ended = ExitStatus { ended_ms, unlogged, ..progress.outcome(&args.group) };
                    finish(&ended, args, agent.as_mut().map(|(_, s)| s));
                    // Not recorded, and no agent took it: held for the next one, a grace from now.
                    unrecorded = Some(ended);
                    agent = None;
                    alone_since = Some(Instant::now());
                }
            }
            Ok(Event::Attached(id, mut stream)) => {
                let pgids: Vec<String> = progress.pgids.iter().map(i32::to_string).collect();
                let _ = writeln!(stream, "started {}", pgids.join(" "));
                if let Some(ended) = &unrecorded {
                    if tell_end(&mut stream, ended).is_ok() {
                        done(&args.group.dir);
                    }
                    continue;
                }
                agent = Some((id, stream));
                alone_since = Some(Instant::now());
            }
            Ok(Event::Line(id, line)) if agent.as_ref().is_some_and(|(a, _)| *a == id) => {
                alone_since = alone_since.map(|_| Instant::now());
                if let Some(ms) = line.strip_prefix("ping ").and_then(|ms| ms.trim().parse().ok()) {
                    grace = Duration::from_millis(ms);
                }
                kill_at = progress.command(&line).or(kill_at);
            }
            Ok(Event::Line(..)) => {}
            Ok(Event::Detached(id)) if agent.as_ref().is_some_and(|(a, _)| *a == id) => {
                agent = None;
                alone_since = Some(Instant::now());
            }
            Ok(Event::Detached(_)) => {}
            Err(RecvTimeoutError::Timeout) if unrecorded.is_some() => {
                // No agent came for an end it could not record: its workers are long gone
                // (their group ids may be anyone's by now); the agent will find no record.
                std::process::exit(1);
            }
            Err(RecvTimeoutError::Timeout) => {
                // A stop's grace is over, or no agent came back in time (SV-1, SV-4, SV-5).
                if alone_since.is_some_and(|since| since.elapsed() >= grace) {
                    progress.ordered_to_end = true;
                    progress.orphaned = true;
                }
                signal_all(&progress.pgids, libc::SIGKILL);
                kill_at = None;
                alone_since = None;
            }
            Err(RecvTimeoutError::Disconnected) => std::process::exit(1),
        }
    }
}

impl Progress {
    /// SV-3 and SV-5: a worker ended; what it left in its group goes, and the first failure
    /// stops its peers. Returns when to escalate that stop to SIGKILL.
    fn worker_ended(&mut self, local_rank: u32, status: std::process::ExitStatus, grace_ms: u64) -> Option<Instant> {
        self.running -= 1;
        signal_group(self.pgids[local_rank as usize], libc::SIGKILL);
        if status.success() || self.failure.is_some() {
            return None;
        }
        self.failure = Some((local_rank, status, self.ordered_to_end));
        if self.running == 0 {
            return None;
        }
        signal_all(&self.pgids, libc::SIGTERM);
        Some(Instant::now() + Duration::from_millis(grace_ms))
    }

    /// The group's end: the first failure, with what it wrote of itself, or success.
    fn outcome(&self, group: &GroupSpec) -> ExitStatus {
        let Some((local_rank, status, ordered)) = self.failure else { return ExitStatus::code(0) };
        let ended = match (status.code(), status.signal()) {
            (Some(code), _) => ExitStatus::code(code),
            (None, signal) => ExitStatus::signal(signal.unwrap_or(libc::SIGKILL), false),
        };
        let owner = group.run_as.as_ref().map(|user| user.uid);
        let ended = match workers::error_said(&workers::error_file(&group.error_dir, local_rank), owner) {
            Some(said) => ended.with_error(&said),
            None => ended,
        };
        let worker = (group.workers > 1).then_some(local_rank);
        let fence = self.fence.filter(|_| ordered);
        ExitStatus { worker, signalled_by_agent: ordered, orphaned: ordered && self.orphaned, fence, ..ended }
    }

    /// Carries out one command from the agent; returns when to escalate to SIGKILL.
    fn command(&mut self, line: &str) -> Option<Instant> {
        match line.split_once(' ').unwrap_or((line, "")) {
            ("stop", grace) => {
                self.ordered_to_end = true;
                signal_all(&self.pgids, libc::SIGTERM);
                let grace_ms = grace.trim().parse::<u64>().unwrap_or(0);
                Some(Instant::now() + Duration::from_millis(grace_ms))
            }
            ("kill", _) => {
                self.ordered_to_end = true;
                signal_all(&self.pgids, libc::SIGKILL);
                None
            }
            // Names the stop that follows (AG-8).
            ("fence", id) => {
                self.fence = id.trim().parse().ok();
                None
            }
            _ => None,
        }
    }
}

fn accept(listener: UnixListener, tx: Sender<Event>) {
    for (id, stream) in listener.incoming().flatten().enumerate() {
        let id = id as u64;
        if peer_pid(&stream).is_none_or(runs_under_this_supervisor) {
            continue; // SV-7: the attempt's own processes do not speak for the agent
        }
        let Ok(reader) = stream.try_clone() else { continue };
        if tx.send(Event::Attached(id, stream)).is_err() {
            return;
        }
        let lines = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(reader).lines().map_while(Result::ok) {
                if lines.send(Event::Line(id, line)).is_err() {
                    return;
                }
            }
            let _ = lines.send(Event::Detached(id));
        });
    }
}

/// SV-2: the group ended; record how, tell the agent if one is there, and go. Where the state
/// dir takes no record (a full disk), the end goes to the agent on its connection instead — a
/// program that succeeded must not be reported lost — and, with no agent to take it, this
/// returns: the end is held for the next agent to connect within the re-attach grace.
fn finish(ended: &ExitStatus, args: &Args, agent: Option<&mut UnixStream>) {
    kill_leftovers();
    remove_error_dir(&args.group);
    if let Some(cgroup) = &args.cgroup {
        cgroup::leave_and_remove(cgroup);
    }
    let dir = &args.group.dir;
    let record = serde_json::to_vec(ended).expect("statuses serialize");
    let recorded = write_atomic(&dir.join(EXIT_RECORD), &record).is_ok();
    let told = match agent {
        Some(stream) if recorded => {
            let _ = writeln!(stream, "exited");
            true
        }
        Some(stream) => tell_end(stream, ended).is_ok(),
        None => recorded, // a later agent reads the record
    };
    if told {
        done(dir)
    }
}

/// JU-3's directory, read by then: the attempt's own stays, with its records.
fn remove_error_dir(group: &GroupSpec) {
    if group.error_dir != group.dir {
        let _ = std::fs::remove_dir_all(&group.error_dir);
    }
}

/// The end, on the agent's connection: `ended STATUS-JSON`.
fn tell_end(stream: &mut UnixStream, ended: &ExitStatus) -> std::io::Result<()> {
    let json = serde_json::to_string(ended).expect("statuses serialize");
    writeln!(stream, "ended {json}")
}

fn done(dir: &Path) -> ! {
    let _ = std::fs::remove_file(dir.join(SOCKET));
    std::process::exit(0);
}

/// Rounds of killing re-parented leftovers: each round takes one generation (a killed
/// process's children are re-parented here in turn); a fork bomb cannot hold the end forever.
const MAX_LEFTOVER_ROUNDS: usize = 64;

/// SV-6: kills every process still re-parented to this supervisor, and reaps it. Called once
/// every worker has been reaped, so no worker's status can be taken from its waiter.
fn kill_leftovers() {
    for _ in 0..MAX_LEFTOVER_ROUNDS {
        let children = children_of(std::process::id() as i32);
        if children.is_empty() {
            return;
        }
        for pid in &children {
            // SAFETY: signalling and reaping our own children.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        for pid in children {
            // SAFETY: as above; SIGKILL cannot be ignored, so this returns.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        }
    }
}

/// The processes whose parent is `parent`, from `/proc/*/stat` (its fourth field).
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| parent_of(*pid) == Some(parent))
        .collect()
}

/// The process at the other end of a unix socket (`SO_PEERCRED`).
fn peer_pid(stream: &UnixStream) -> Option<i32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, which is that large.
    let read = unsafe {
        libc::getsockopt(
            std::os::fd::AsRawFd::as_raw_fd(stream),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (read == 0 && cred.pid > 0).then_some(cred.pid)
}

/// Whether `pid` descends from this supervisor: one of the attempt's own processes (as their
/// subreaper, it is the ancestor even of those that left their session).
fn runs_under_this_supervisor(pid: i32) -> bool {
    let me = std::process::id() as i32;
    let mut at = pid;
    // A bound on the walk: a chain of parents is short, and /proc may change under it.
    for _ in 0..256 {
        match parent_of(at) {
            Some(parent) if parent == me => return true,
            Some(parent) if parent > 1 && parent != at => at = parent,
            _ => return false,
        }
    }
    false
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

fn signal_all(pgids: &[i32], signal: i32) {
    for pgid in pgids {
        signal_group(*pgid, signal);
    }
}

fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    crate::paths::write_atomic(path, contents)
}
