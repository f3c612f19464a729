//! An attempt's local worker group, as the supervisor starts it: `nproc_per_node` copies of the
//! command, worker `L` with its own `RANK`, `LOCAL_RANK` and `ROLE_RANK` (DESIGN §4), each
//! leading its own process group and dying with the supervisor. A lone worker's output is
//! copied to the attempt's log as written; several have theirs relayed line by line into a log
//! of their own (`attempt-A.L.log`) and into the attempt's log with a `[rankR]: ` prefix, as
//! torchrun's `--tee 3` with a rank prefix does. What the attempt's log does not take (a full
//! disk) is dropped, and a line says how much once it takes writes again (`AttemptLog`), as
//! in a worker's own log. Each worker gets its own `$TORCHELASTIC_ERROR_FILE`, as torchrun's
//! do, where a PyTorch program decorated with `@record` writes why it failed.

use super::job_user::Credentials;
use std::ffi::CString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A relayed line longer than this is cut into pieces of this size (a progress bar that never
/// writes a newline must not grow the supervisor without bound).
const MAX_LINE_BYTES: u64 = 64 * 1024;

/// Where torchrun tells each worker to write why it failed.
const ERROR_FILE_VAR: &str = "TORCHELASTIC_ERROR_FILE";

/// What the supervisor is told about the group it runs.
#[derive(Clone, Debug)]
pub struct GroupSpec {
    pub command: Vec<String>,
    pub workers: u32,
    pub group_rank: u32,
    /// The attempt's log (the supervisor's own stdout); worker logs are named beside it.
    pub log: Option<PathBuf>,
    /// The attempt's own directory (absolute), in the agent's state dir.
    pub dir: PathBuf,
    /// Where the workers' error files are written: the attempt's directory, or one of the
    /// jobs' user's own (JU-3 in `job_user.rs`).
    pub error_dir: PathBuf,
    /// The job's variables that reach the workers and not the supervisor (`WORKER_ONLY_ENV`).
    pub env: Vec<(String, String)>,
    /// The user the workers run as (`--run-jobs-as`); `None`: the supervisor's.
    pub run_as: Option<Credentials>,
}

/// The most of a worker's error file that is read: PyTorch's holds a message and a traceback.
const MAX_ERROR_FILE_BYTES: u64 = 64 * 1024;

/// Worker `local_rank`'s `$TORCHELASTIC_ERROR_FILE`.
pub fn error_file(dir: &Path, local_rank: u32) -> PathBuf {
    dir.join(format!("error-{local_rank}.json"))
}

/// What a worker wrote of its failure in its error file, in torchelastic's format
/// (`{"message": {"message": "ValueError: ...", "extraInfo": {...}}}`, or an older
/// `{"message": "..."}`); `None` when it wrote nothing readable. Only a plain file, and with
/// `owner` one of that uid's (JU-3): the job made the file, and the supervisor, which may run
/// as root, must neither follow its link elsewhere nor wait on its pipe.
pub fn error_said(file: &Path, owner: Option<u32>) -> Option<String> {
    let opened =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(file).ok()?;
    let meta = opened.metadata().ok()?;
    if !meta.is_file() || owner.is_some_and(|uid| meta.uid() != uid) {
        return None;
    }
    let mut text = Vec::new();
    opened.take(MAX_ERROR_FILE_BYTES).read_to_end(&mut text).ok()?;
    let written: serde_json::Value = serde_json::from_slice(&text).ok()?;
    let message = &written["message"];
    message.as_str().or_else(|| message["message"].as_str()).map(str::to_string)
}

/// The running workers, by local rank.
pub struct Group {
    pub children: Vec<Child>,
    pub pgids: Vec<i32>,
    /// One message per relay that has copied all its worker wrote.
    relayed: Receiver<()>,
    relays: usize,
    /// The attempt's log, as the relays write it.
    combined: Arc<Mutex<AttemptLog<std::fs::File>>>,
}

impl Group {
    /// Waits, at most `limit`, for the relays to copy what the workers wrote before they ended
    /// (a descendant that left the worker's group may hold its pipe open for longer).
    pub fn drain_output(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        for _ in 0..self.relays {
            if self.relayed.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_err() {
                return;
            }
        }
    }

    /// Output the attempt's log dropped after the last write it took, and why: once the
    /// workers have ended, no later write can note it in the log itself.
    pub fn unlogged(&self) -> Option<String> {
        let log = self.combined.lock().unwrap_or_else(|e| e.into_inner());
        (log.dropped_bytes > 0).then(|| {
            format!(
                "{} bytes of output at its end were not logged: the log took no write ({})",
                log.dropped_bytes, log.why
            )
        })
    }
}

/// Every log of an attempt of `workers` workers: the attempt's, and each worker's own when
/// there are several.
pub fn logs_of(attempt_log: &Path, workers: u32) -> Vec<PathBuf> {
    let own = (workers > 1).then(|| (0..workers).map(|l| worker_log(attempt_log, l))).into_iter().flatten();
    std::iter::once(attempt_log.to_path_buf()).chain(own).collect()
}

/// Where worker `local_rank`'s own log lives, beside the attempt's `attempt-A.log`.
pub fn worker_log(attempt_log: &Path, local_rank: u32) -> PathBuf {
    let stem = attempt_log.file_stem().and_then(|s| s.to_str()).unwrap_or("attempt");
    attempt_log.with_file_name(format!("{stem}.{local_rank}.log"))
}

/// Why a worker did not start. `node_fault`: the node could not start it (no process, memory
/// or file descriptor left; its log would not open), not the program (not found, not
/// executable: the job's to fix).
#[derive(Debug)]
pub struct StartError {
    pub message: String,
    pub node_fault: bool,
}

/// Errors of `exec` that name the program or its arguments, not the machine.
const PROGRAM_ERRORS: [i32; 9] = [
    libc::ENOENT,
    libc::EACCES,
    libc::EPERM,
    libc::ENOEXEC,
    libc::ENOTDIR,
    libc::ELOOP,
    libc::ENAMETOOLONG,
    libc::E2BIG,
    libc::ETXTBSY,
];

/// Starts every worker; if one cannot start, those already started are killed.
pub fn start(spec: &GroupSpec) -> Result<Group, StartError> {
    let stdout = std::io::stdout().as_fd().try_clone_to_owned().map_err(|e| StartError {
        message: format!("cannot start the workers: cannot open the attempt's log: {e}"),
        node_fault: true,
    })?;
    let combined = Arc::new(Mutex::new(AttemptLog::new(std::fs::File::from(stdout))));
    let (done, relayed) = channel();
    let relays = spec.workers as usize;
    let mut group = Group { children: Vec::new(), pgids: Vec::new(), relayed, relays, combined: combined.clone() };
    for local_rank in 0..spec.workers {
        match start_worker(spec, local_rank, &combined, &done) {
            Ok(child) => {
                group.pgids.push(child.id() as i32);
                group.children.push(child);
            }
            Err((e, exec)) => {
                for pgid in &group.pgids {
                    signal_group(*pgid, libc::SIGKILL);
                }
                let program_error = exec && e.raw_os_error().is_some_and(|code| PROGRAM_ERRORS.contains(&code));
                let program = &spec.command[0];
                let hint = match exec {
                    true => format!("{}{}", not_found_hint(program, &e), job_user_hint(spec, &e)),
                    false => String::new(),
                };
                let message = format!("cannot start worker {local_rank} ({program}): {e}{hint}");
                return Err(StartError { message, node_fault: !program_error });
            }
        }
    }
    Ok(group)
}

/// What to do when `program` was not found: one named without a `/` is looked up on `$PATH`
/// only (as `execvp` and a shell do), never in the working directory, where a user's
/// `["train.py"]` most often is.
fn not_found_hint(program: &str, e: &std::io::Error) -> String {
    if e.raw_os_error() != Some(libc::ENOENT) || program.contains('/') {
        return String::new();
    }
    if Path::new(program).is_file() {
        format!("; `{program}` is in the working directory, and a program named without a `/` is looked up on $PATH only: write `./{program}` (or run it with its interpreter, [\"python3\", \"{program}\"])")
    } else {
        "; a program named without a `/` is looked up on $PATH: install it on this node, or give its path".to_string()
    }
}

/// What to do when the jobs' user (JU-2) was refused: its working directory or its program is
/// the agent's user's alone.
fn job_user_hint(spec: &GroupSpec, e: &std::io::Error) -> String {
    let Some(user) = spec.run_as.as_ref().filter(|_| e.raw_os_error() == Some(libc::EACCES)) else {
        return String::new();
    };
    let cwd = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default();
    format!(
        "; the job runs as uid {} (the agent's --run-jobs-as), which may not enter its working directory {cwd} \
         or run the program: make both that user's to reach, or set the job spec's `cwd`",
        user.uid
    )
}

/// A started worker, or why not — and whether the error came from its `exec` (true), or
/// before it, from the node (its pipe, its log).
fn start_worker(
    spec: &GroupSpec,
    local_rank: u32,
    combined: &Arc<Mutex<AttemptLog<std::fs::File>>>,
    done: &Sender<()>,
) -> Result<Child, (std::io::Error, bool)> {
    let mut cmd = Command::new(&spec.command[0]);
    cmd.args(&spec.command[1..]);
    cmd.envs(spec.env.iter().map(|(name, value)| (name, value)));
    // Worker 0's variables are already in the supervisor's environment.
    cmd.envs(ftdrive::driver::env_worker_vars(spec.group_rank, spec.workers, local_rank));
    cmd.env(ERROR_FILE_VAR, error_file(&spec.error_dir, local_rank));
    // JU-2: the user, and the working directory to enter again as that user, allocated before
    // the fork.
    let switch = match &spec.run_as {
        Some(user) => {
            let cwd = std::env::current_dir().map_err(|e| (e, false))?;
            Some((user.clone(), CString::new(cwd.as_os_str().as_bytes()).expect("a path holds no NUL byte")))
        }
        None => None,
    };
    // SAFETY: between fork and exec only async-signal-safe calls on the child's own state.
    unsafe {
        cmd.pre_exec(move || {
            if let Some((user, cwd)) = &switch {
                user.take_on(cwd)?;
            }
            // After the switch, which clears a parent-death signal set before it.
            if libc::setpgid(0, 0) != 0 || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // Output goes through a pipe even for a lone worker: written to the log file itself, a
    // program's prints would fail once the disk no longer takes the log (a full disk), and
    // fail the program with them; relayed, the output is dropped instead, as a container
    // runtime's log driver drops it.
    let node = |e| (e, false);
    let (reader, writer) = std::io::pipe().map_err(node)?;
    cmd.stdout(writer.try_clone().map_err(node)?).stderr(writer).stdin(Stdio::null());
    let own_log = match (&spec.log, spec.workers) {
        (Some(log), 2..) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(worker_log(log, local_rank))
                .map(AttemptLog::new)
                .map_err(node)?,
        ),
        _ => None,
    };
    let child = cmd.spawn().map_err(|e| (e, true))?;
    drop(cmd);
    let prefix = (spec.workers > 1).then(|| format!("[rank{}]: ", spec.group_rank * spec.workers + local_rank));
    let (combined, done) = (combined.clone(), done.clone());
    std::thread::spawn(move || {
        match prefix {
            Some(prefix) => relay(reader, own_log, &prefix, &combined),
            None => pass_through(reader, &combined),
        }
        let _ = done.send(());
    });
    Ok(child)
}

/// An attempt's log (or a worker's own) as the workers' output reaches it, unbuffered: what
/// the file does not take is dropped, so that a full disk fails no program's prints, and the
/// first write it takes after that starts with a line saying how many bytes were dropped and
/// why, so that a reader of the log sees the gap.
struct AttemptLog<W> {
    out: W,
    dropped_bytes: u64,
    why: String,
    /// Whether the last byte the log took ended a line: a note after a cut line starts a new one.
    at_line_start: bool,
}

impl<W: Write> AttemptLog<W> {
    fn new(out: W) -> Self {
        AttemptLog { out, dropped_bytes: 0, why: String::new(), at_line_start: true }
    }

    fn write(&mut self, bytes: &[u8]) {
        if self.dropped_bytes > 0 {
            let newline = if self.at_line_start { "" } else { "\n" };
            let note = format!(
                "{newline}[ftdrive: {} bytes of output were dropped here: the log took no write ({})]\n",
                self.dropped_bytes, self.why
            );
            if self.put(note.as_bytes()) < note.len() {
                self.dropped_bytes += bytes.len() as u64;
                return;
            }
            self.dropped_bytes = 0;
        }
        let taken = self.put(bytes);
        self.dropped_bytes += (bytes.len() - taken) as u64;
    }

    /// Writes what `out` takes of `bytes`; returns how much that was.
    fn put(&mut self, bytes: &[u8]) -> usize {
        let mut taken = 0;
        while taken < bytes.len() {
            match self.out.write(&bytes[taken..]) {
                Ok(0) => break,
                Ok(n) => taken += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.why = e.to_string();
                    break;
                }
            }
        }
        if taken > 0 {
            self.at_line_start = bytes[taken - 1] == b'\n';
        }
        taken
    }
}

/// Copies a lone worker's output to the attempt's log as written.
fn pass_through(mut pipe: impl Read, combined: &Mutex<AttemptLog<impl Write>>) {
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match pipe.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        combined.lock().unwrap_or_else(|e| e.into_inner()).write(&chunk[..n]);
    }
}

/// Copies a worker's output, line by line, to its own log as written and, prefixed, to the
/// attempt's (where every piece ends its line, so that the next one starts with its prefix).
fn relay(
    pipe: impl Read,
    mut own_log: Option<AttemptLog<impl Write>>,
    prefix: &str,
    combined: &Mutex<AttemptLog<impl Write>>,
) {
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.by_ref().take(MAX_LINE_BYTES).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if let Some(log) = own_log.as_mut() {
            log.write(&line);
        }
        if !line.ends_with(b"\n") {
            line.push(b'\n');
        }
        let mut prefixed = Vec::with_capacity(prefix.len() + line.len());
        prefixed.extend_from_slice(prefix.as_bytes());
        prefixed.extend_from_slice(&line);
        combined.lock().unwrap_or_else(|e| e.into_inner()).write(&prefixed);
    }
}

/// Signals process group `pgid`. Ids come from records a job can write: 0 and 1 (this
/// process's own group, every process the user may signal) and negative ones are never
/// signalled.
pub fn signal_group(pgid: i32, signal: i32) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill has no memory preconditions; a group that is gone is simply not found.
    unsafe { libc::kill(-pgid, signal) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_logs_sit_beside_the_attempts() {
        let log = Path::new("/state/logs/j1/2/attempt-3.log");
        assert_eq!(worker_log(log, 5), PathBuf::from("/state/logs/j1/2/attempt-3.5.log"));
    }

    /// PyTorch's `@record` writes `{"message": {"message": ..., "extraInfo": ...}}`; older
    /// writers a bare string. Anything else, or no file, says nothing.
    #[test]
    fn a_workers_error_file_is_read_in_torchelastics_formats() {
        let dir = tempfile::tempdir().unwrap();
        let file = error_file(dir.path(), 1);
        assert_eq!(file, dir.path().join("error-1.json"));
        assert_eq!(error_said(&file, None), None, "no file");
        let record = r#"{"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": "Traceback", "timestamp": "1"}}}"#;
        std::fs::write(&file, record).unwrap();
        assert_eq!(error_said(&file, None).as_deref(), Some("ValueError: boom"));
        std::fs::write(&file, r#"{"message": "RuntimeError: old style"}"#).unwrap();
        assert_eq!(error_said(&file, None).as_deref(), Some("RuntimeError: old style"));
        for unreadable in ["not json", r#"{"message": 3}"#, r#"{"error": "x"}"#] {
            std::fs::write(&file, unreadable).unwrap();
            assert_eq!(error_said(&file, None), None, "{unreadable}");
        }
        let huge = format!(r#"{{"message": "{}"}}"#, "x".repeat(MAX_ERROR_FILE_BYTES as usize));
        std::fs::write(&file, huge).unwrap();
        assert_eq!(error_said(&file, None), None, "a file past the bound is not read whole");
    }

    /// JU-3: the job makes its error file, and the supervisor reading it may be root: a link
    /// is not followed, a pipe not waited on, and a file of another user not read.
    #[test]
    fn an_error_file_is_read_only_as_the_jobs_own_plain_file() {
        let dir = tempfile::tempdir().unwrap();
        let (file, target) = (error_file(dir.path(), 0), dir.path().join("elsewhere.json"));
        std::fs::write(&target, r#"{"message": "not the job's"}"#).unwrap();
        std::os::unix::fs::symlink(&target, &file).unwrap();
        assert_eq!(error_said(&file, None), None, "a link");
        std::fs::remove_file(&file).unwrap();
        let path = CString::new(file.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo makes a pipe at a path we own.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        assert_eq!(error_said(&file, None), None, "a pipe, not waited on");
        std::fs::remove_file(&file).unwrap();
        std::fs::write(&file, r#"{"message": "ValueError: mine"}"#).unwrap();
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        assert_eq!(error_said(&file, Some(me)).as_deref(), Some("ValueError: mine"));
        assert_eq!(error_said(&file, Some(me + 1)), None, "another user's file");
    }

    /// A worker's own log holds what it wrote, byte for byte; the attempt's log gives every
    /// piece a line of its own behind the worker's prefix.
    #[test]
    fn a_worker_s_own_log_is_what_it_wrote_and_the_attempt_s_is_prefixed_lines() {
        let (mut own, combined) = (Vec::new(), Mutex::new(AttemptLog::new(Vec::new())));
        relay(&b"a\nprogress 50%"[..], Some(AttemptLog::new(&mut own)), "[rank1]: ", &combined);
        assert_eq!(own, b"a\nprogress 50%");
        assert_eq!(combined.into_inner().unwrap().out, b"[rank1]: a\n[rank1]: progress 50%\n");
    }

    /// A file that takes `room` more bytes, then fails as a full disk does, until given more.
    struct Disk {
        file: Vec<u8>,
        room: usize,
    }

    impl Write for Disk {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let n = bytes.len().min(self.room);
            self.room -= n;
            self.file.extend_from_slice(&bytes[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Output the log does not take is dropped, and once it takes writes again a line says
    /// how much, on a line of its own, before what comes next.
    #[test]
    fn output_a_full_log_drops_is_noted_where_it_was_dropped() {
        let mut log = AttemptLog::new(Disk { file: Vec::new(), room: 10 });
        log.write(b"step 1\nstep 2\n"); // "step 2" is cut after "ste"
        log.write(b"step 3\n");
        log.write(b"step 4\n"); // the note does not fit: still dropped, still owed
        assert_eq!(log.dropped_bytes, 4 + 7 + 7);
        log.out.room = usize::MAX;
        log.write(b"step 5\n");
        log.write(b"step 6\n");
        let note = "[ftdrive: 18 bytes of output were dropped here: the log took no write \
                    (No space left on device (os error 28))]";
        let text = String::from_utf8(log.out.file).unwrap();
        assert_eq!(text, format!("step 1\nste\n{note}\nstep 5\nstep 6\n"), "the note starts a line of its own");
    }
}
