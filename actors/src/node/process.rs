//! Starting and stopping attempts as OS processes: argv (never through a shell), the attempt's
//! environment on top of the agent's, its own process group led by the supervisor (`shim`),
//! stdout and stderr into the attempt's log file.

use super::shim::STATUS_FD;
use ftdrive::protocol::{ExitStatus, StartSpec};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use tokio::io::AsyncReadExt;

/// A started supervisor and how to learn whether the command itself started.
pub struct Launched {
    /// The supervisor's pid, which is also the attempt's process group.
    pub pgid: i32,
    pub child: tokio::process::Child,
    status: OwnedFd,
}

/// Starts the supervisor for one attempt. An error here means the supervisor itself could not
/// start (the command's own failure comes from `Launched::started`).
pub fn launch(spec: &StartSpec, log: &Path, cwd: &Path, extra_env: &[(&str, String)]) -> Result<Launched, String> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create log dir {}: {e}", dir.display()))?;
    }
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("cannot open log {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let (read_end, write_end) = pipe()?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the ftdrive binary: {e}"))?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("__attempt")
        .arg(std::process::id().to_string())
        .arg("--")
        .args(&spec.command)
        .envs(extra_env.iter().map(|(k, v)| (*k, v.as_str())))
        .envs(&spec.env)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&write_end);
    // SAFETY: between fork and exec only async-signal-safe calls: dup2 places the pipe's
    // write end where the supervisor expects it (dup2 clears close-on-exec on the copy).
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, STATUS_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| format!("cannot start the attempt supervisor: {e}"))?;
    drop(write_end);
    let pgid = child.id().ok_or("the supervisor exited at once")? as i32;
    Ok(Launched { pgid, child, status: read_end })
}

impl Launched {
    /// Resolves to `Ok(())` once the command runs, or the reason it could not start.
    pub async fn started(status: OwnedFd) -> Result<(), String> {
        let mut line = String::new();
        let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(status).map_err(|e| e.to_string())?;
        pipe.read_to_string(&mut line).await.map_err(|e| e.to_string())?;
        match line.trim_end().split_once(' ') {
            Some(("ok", _)) => Ok(()),
            Some(("err", message)) => Err(message.to_string()),
            _ => Err("the attempt supervisor exited before starting the command".to_string()),
        }
    }

    pub fn into_parts(self) -> (i32, tokio::process::Child, OwnedFd) {
        (self.pgid, self.child, self.status)
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

/// Sends `signal` to an attempt's whole process group.
pub fn signal_group(pgid: i32, signal: i32) {
    // SAFETY: kill has no memory preconditions; a vanished group is reported and ignored.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

/// How the attempt ended, as the head wants to hear it.
pub fn exit_status(status: std::process::ExitStatus, signalled_by_agent: bool) -> ExitStatus {
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitStatus { code: Some(code), signal: None, signalled_by_agent },
        (None, Some(signal)) => ExitStatus::signal(signal, signalled_by_agent),
        (None, None) => ExitStatus::signal(libc::SIGKILL, signalled_by_agent),
    }
}
