//! The attempt supervisor (`ftdrive __attempt AGENT_PID -- COMMAND...`): a tiny process between
//! the agent and the user's command, leading the attempt's process group.
//!
//! It exists so that nothing outlives its agent. The kernel tells it when the agent dies (the
//! parent-death signal), and it then kills the whole process group — grandchildren included —
//! which the agent itself cannot do once it is SIGKILLed. Otherwise it is transparent: the
//! command inherits stdio, environment and working directory, SIGTERM from a stop reaches the
//! command through the group, and the supervisor exits exactly as the command did.

use std::io::Write;
use std::os::fd::FromRawFd;
use std::os::unix::process::ExitStatusExt;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

/// The descriptor the agent reads "ok PID" or "err MESSAGE" from.
pub const STATUS_FD: i32 = 3;
/// How often the supervisor checks that its agent is still there (a missed signal costs this).
const WATCH_MS: u64 = 200;

extern "C" fn on_sigterm(_: libc::c_int) {
    // Nothing to do: the command got the same signal through the group; the loop below decides.
}

/// Runs the supervisor; never returns.
pub fn run(args: &[String]) -> ! {
    let (agent_pid, command) = match parse(args) {
        Some(parsed) => parsed,
        None => {
            eprintln!("usage: ftdrive __attempt AGENT_PID -- COMMAND [ARGS...]");
            std::process::exit(2);
        }
    };
    // SAFETY: prctl and signal only change this process's own signal state.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
        libc::signal(libc::SIGTERM, on_sigterm as *const () as libc::sighandler_t);
        libc::fcntl(STATUS_FD, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    if parent() != agent_pid {
        std::process::exit(1); // the agent died before we could watch it
    }
    // SAFETY: the agent put the write end of its status pipe at this descriptor for us.
    let mut status = unsafe { std::fs::File::from_raw_fd(STATUS_FD) };
    let child = std::process::Command::new(&command[0]).args(&command[1..]).spawn();
    let child = match child {
        Ok(child) => {
            let _ = writeln!(status, "ok {}", child.id());
            child
        }
        Err(e) => {
            let _ = writeln!(status, "err {e}");
            std::process::exit(127);
        }
    };
    drop(status);
    supervise(child, agent_pid)
}

fn parse(args: &[String]) -> Option<(i32, &[String])> {
    let pid = args.first()?.parse().ok()?;
    (args.get(1)? == "--" && args.len() > 2).then(|| (pid, &args[2..]))
}

fn parent() -> i32 {
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() }
}

fn supervise(mut child: std::process::Child, agent_pid: i32) -> ! {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    loop {
        match rx.recv_timeout(Duration::from_millis(WATCH_MS)) {
            Ok(Ok(status)) => exit_like(status),
            Ok(Err(_)) | Err(RecvTimeoutError::Disconnected) => std::process::exit(1),
            Err(RecvTimeoutError::Timeout) if parent() != agent_pid => {
                // The agent is gone: take the whole group with us.
                // SAFETY: signalling our own process group.
                unsafe { libc::kill(-libc::getpgrp(), libc::SIGKILL) };
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// Ends this process the way the command ended: same exit code, or the same signal.
fn exit_like(status: std::process::ExitStatus) -> ! {
    if let Some(code) = status.code() {
        std::process::exit(code);
    }
    let signal = status.signal().unwrap_or(libc::SIGKILL);
    // SAFETY: restoring the default action and raising a signal at ourselves.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    std::process::exit(128 + signal);
}
