//! The attempt supervisor, `ftdrive __attempt --dir DIR --reattach-grace-ms G -- COMMAND...`:
//! a small process between the agent and one attempt's command, in its own session so that
//! nothing the agent's terminal or process group receives reaches it.
//!
//! It exists so that restarting the agent loses no work (DESIGN §10), and so that nothing
//! outlives its attempt:
//!
//! - **SV-1 outlives the agent, for a while.** The agent talks to it over a unix socket in the
//!   attempt's directory. When that connection drops, the supervisor waits `reattach_grace_ms`
//!   for an agent to connect again (a restarted agent scans its state dir and does); if none
//!   does, it kills the command's process group.
//! - **SV-2 leaves a record.** When the command ends, the supervisor writes how (`exit`, an
//!   `ExitStatus` in JSON) before it tells a connected agent and exits, so that an agent that
//!   was away still learns it. A command that cannot start leaves `failed` instead.
//! - **SV-3 takes everything down.** The command leads its own process group and dies with the
//!   supervisor (parent-death signal); when it ends, whatever it left in its group is killed.
//! - **SV-4 stops escalate here.** `stop G` sends SIGTERM to the group and SIGKILL after G ms,
//!   whether or not an agent is still connected by then.
//!
//! Socket lines, supervisor → agent: `started PID`, `failed MESSAGE`, `exited` (the record is
//! written); agent → supervisor: `stop GRACE_MS`, `kill`.

use ftdrive::protocol::ExitStatus;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// The descriptor the agent reads "ok PID" or "err MESSAGE" from once the socket is bound.
pub const STATUS_FD: i32 = 3;
pub const SOCKET: &str = "sock";
pub const EXIT_RECORD: &str = "exit";
pub const FAILED_RECORD: &str = "failed";
pub const PID_RECORD: &str = "pid";

struct Args {
    dir: PathBuf,
    reattach_grace_ms: u64,
    command: Vec<String>,
}

enum Event {
    Exited(std::process::ExitStatus),
    Attached(u64, UnixStream),
    Line(u64, String),
    Detached(u64),
}

/// Runs the supervisor; never returns.
pub fn run(args: &[String]) -> ! {
    let Some(args) = parse(args) else {
        eprintln!("usage: ftdrive __attempt --dir DIR --reattach-grace-ms MS -- COMMAND [ARGS...]");
        std::process::exit(2);
    };
    // SAFETY: fcntl only changes a descriptor flag of this process.
    unsafe { libc::fcntl(STATUS_FD, libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: the agent put the write end of its status pipe at this descriptor for us.
    let mut status = unsafe { std::fs::File::from_raw_fd(STATUS_FD) };
    let listener = match bind(&args.dir) {
        Ok(listener) => listener,
        Err(e) => fail(&mut status, &args.dir, &format!("cannot listen in {}: {e}", args.dir.display())),
    };
    let child = match spawn(&args.command) {
        Ok(child) => child,
        Err(e) => fail(&mut status, &args.dir, &e.to_string()),
    };
    let pid = child.id() as i32;
    let _ = write_atomic(&args.dir.join(PID_RECORD), pid.to_string().as_bytes());
    let _ = writeln!(status, "ok {pid}");
    drop(status);
    supervise(child, pid, listener, &args)
}

fn parse(args: &[String]) -> Option<Args> {
    let mut dir = None;
    let mut grace = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--dir" => dir = rest.next().map(PathBuf::from),
            "--reattach-grace-ms" => grace = rest.next().and_then(|g| g.parse().ok()),
            "--" => break,
            _ => return None,
        }
    }
    let command: Vec<String> = rest.cloned().collect();
    (!command.is_empty()).then_some(Args { dir: dir?, reattach_grace_ms: grace?, command })
}

fn bind(dir: &Path) -> std::io::Result<UnixListener> {
    let path = dir.join(SOCKET);
    let _ = std::fs::remove_file(&path);
    UnixListener::bind(path)
}

/// SV-3: the command leads its own group and receives SIGKILL if the supervisor dies.
fn spawn(command: &[String]) -> std::io::Result<std::process::Child> {
    let mut cmd = std::process::Command::new(&command[0]);
    cmd.args(&command[1..]);
    // SAFETY: between fork and exec only async-signal-safe calls on the child's own state.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setpgid(0, 0) != 0 || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// SV-2 for a command that never ran.
fn fail(status: &mut std::fs::File, dir: &Path, message: &str) -> ! {
    let _ = write_atomic(&dir.join(FAILED_RECORD), message.as_bytes());
    let _ = writeln!(status, "err {message}");
    std::process::exit(127);
}

fn supervise(mut child: std::process::Child, pgid: i32, listener: UnixListener, args: &Args) -> ! {
    let (tx, rx) = channel();
    let waiter = tx.clone();
    std::thread::spawn(move || {
        if let Ok(status) = child.wait() {
            let _ = waiter.send(Event::Exited(status));
        }
    });
    std::thread::spawn(move || accept(listener, tx));
    let mut agent: Option<(u64, UnixStream)> = None;
    let mut kill_at: Option<Instant> = None;
    // An agent is expected to connect at once; until it does, the grace runs.
    let mut alone_since = Some(Instant::now());
    let grace = Duration::from_millis(args.reattach_grace_ms);
    loop {
        let deadline = [kill_at, alone_since.map(|t| t + grace)].into_iter().flatten().min();
        let wait = deadline.map_or(Duration::from_secs(3600), |d| d.saturating_duration_since(Instant::now()));
        match rx.recv_timeout(wait) {
            Ok(Event::Exited(status)) => finish(status, pgid, &args.dir, agent.as_mut().map(|(_, s)| s)),
            Ok(Event::Attached(id, mut stream)) => {
                let _ = writeln!(stream, "started {pgid}");
                agent = Some((id, stream));
                alone_since = None;
            }
            Ok(Event::Line(id, line)) if agent.as_ref().is_some_and(|(a, _)| *a == id) => {
                kill_at = command(&line, pgid).or(kill_at);
            }
            Ok(Event::Line(..)) => {}
            Ok(Event::Detached(id)) if agent.as_ref().is_some_and(|(a, _)| *a == id) => {
                agent = None;
                alone_since = Some(Instant::now());
            }
            Ok(Event::Detached(_)) => {}
            Err(RecvTimeoutError::Timeout) => {
                // The stop's grace is over, or no agent came back in time (SV-1, SV-4).
                signal_group(pgid, libc::SIGKILL);
                kill_at = None;
                alone_since = None;
            }
            Err(RecvTimeoutError::Disconnected) => std::process::exit(1),
        }
    }
}

fn accept(listener: UnixListener, tx: Sender<Event>) {
    for (id, stream) in listener.incoming().flatten().enumerate() {
        let id = id as u64;
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

/// Carries out one command from the agent; returns when to escalate to SIGKILL.
fn command(line: &str, pgid: i32) -> Option<Instant> {
    match line.split_once(' ').unwrap_or((line, "")) {
        ("stop", grace) => {
            signal_group(pgid, libc::SIGTERM);
            let grace_ms = grace.trim().parse::<u64>().unwrap_or(0);
            Some(Instant::now() + Duration::from_millis(grace_ms))
        }
        ("kill", _) => {
            signal_group(pgid, libc::SIGKILL);
            None
        }
        _ => None,
    }
}

/// SV-2 and SV-3: the command ended; kill what it left behind, record how it ended, tell the
/// agent if one is there, and go.
fn finish(status: std::process::ExitStatus, pgid: i32, dir: &Path, agent: Option<&mut UnixStream>) -> ! {
    signal_group(pgid, libc::SIGKILL);
    let ended = match (status.code(), status.signal()) {
        (Some(code), _) => ExitStatus::code(code),
        (None, signal) => ExitStatus::signal(signal.unwrap_or(libc::SIGKILL), false),
    };
    let record = serde_json::to_vec(&ended).expect("statuses serialize");
    if write_atomic(&dir.join(EXIT_RECORD), &record).is_err() {
        std::process::exit(1);
    }
    if let Some(stream) = agent {
        let _ = writeln!(stream, "exited");
    }
    let _ = std::fs::remove_file(dir.join(SOCKET));
    std::process::exit(0);
}

fn signal_group(pgid: i32, signal: i32) {
    // SAFETY: kill has no memory preconditions; a group that is gone is simply not found.
    unsafe { libc::kill(-pgid, signal) };
}

fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    crate::paths::write_atomic(path, contents)
}
