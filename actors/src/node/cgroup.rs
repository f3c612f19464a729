//! A cgroup v2 per attempt (DESIGN §11, "No escapes"): where the machine mounts cgroup v2 and
//! the agent may create groups, each attempt's supervisor and everything under it run in a
//! cgroup of their own, which no process leaves by changing its session, its process group or
//! its parent.
//!
//! - **CG-1 one cgroup per attempt, made by the agent.** `<parent>/<state>-<attempt>`: the
//!   parent is `--cgroup-parent` (by default `ftdrive` under the agent's own cgroup), `state`
//!   a hash of the agent's state dir (agents of one machine share the parent), `attempt` the
//!   attempt's directory name. Its path is kept in the attempt's record.
//! - **CG-2 every worker is born in it.** The supervisor joins it before any worker starts (a
//!   supervisor that cannot join says so as the node's fault, and starts nothing), and leaves
//!   it for the parent once they have: a job that kills or freezes its own cgroup reaches its
//!   own processes, not the supervisor that records how they ended.
//! - **CG-3 the supervisor empties and removes it** at the attempt's end, after its own
//!   subreaper sweep (SV-6) and before the end is recorded: it kills what is left, and removes
//!   the group with any the job made inside it.
//! - **CG-4 a dead supervisor's cgroup is killed by the agent**: without a supervisor to reap
//!   them, a worker's `setsid` children are in no recorded process group, but they are in the
//!   cgroup. The agent reports the end once the group is empty (`emptied`, bounded: a
//!   process with much memory takes a while to exit) and removes it when the head has the end
//!   (`forget`).
//!
//! Without cgroup v2 (none mounted, or no right to create groups: a container, an unprivileged
//! agent) the subreaper and the process groups keep SV-3 and SV-6 alone, as before.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The directory under the agent's own cgroup that attempts' cgroups go in by default.
const DEFAULT_PARENT: &str = "ftdrive";
/// Rounds of killing a cgroup's processes one by one, where the kernel has no `cgroup.kill`
/// (before Linux 5.14): each round takes what forked meanwhile.
const MAX_KILL_ROUNDS: usize = 64;
/// How long a supervisor waits for its emptied cgroup's last processes to be gone (CG-3).
const EMPTY_WAIT_MS: u64 = 1_000;
/// How long an agent holds an attempt's end for its cgroup to be empty (`emptied`): exiting
/// frees the memory a process held, about a tenth of a second per GiB.
const REPORT_EMPTY_WAIT_MS: u64 = 30_000;

/// Where attempts' cgroups are made (`--cgroup-parent`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// `ftdrive` under the agent's own cgroup, where cgroup v2 is mounted and writable.
    Auto,
    Off,
    At(PathBuf),
}

impl Choice {
    pub fn parse(flag: &str) -> Result<Choice, String> {
        match flag {
            "auto" => Ok(Choice::Auto),
            "off" => Ok(Choice::Off),
            dir if Path::new(dir).is_absolute() => Ok(Choice::At(PathBuf::from(dir))),
            _ => Err("give `auto`, `off`, or the absolute path of a directory on a cgroup v2 mount".to_string()),
        }
    }
}

/// The parent the agent makes its attempts' cgroups in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroups {
    parent: PathBuf,
    /// Tells this agent's attempts from those of other agents on the machine (CG-1).
    prefix: String,
}

impl Cgroups {
    /// Where `choice` puts this agent's attempts: `Ok(None)` where `auto` finds no cgroup v2
    /// the agent may use (the reason is logged), an error where a given directory is unusable.
    pub fn resolve(choice: &Choice, state_dir: &Path) -> Result<Option<Cgroups>, String> {
        let prefix = format!("{:08x}", super::attempt::short_hash(state_dir.as_os_str().as_encoded_bytes()) as u32);
        let found = match choice {
            Choice::Off => return Ok(None),
            Choice::At(dir) => return usable(dir).map(|()| Some(Cgroups { parent: dir.clone(), prefix })),
            Choice::Auto => default_parent().and_then(|dir| usable(&dir).map(|()| dir)),
        };
        match found {
            Ok(parent) => Ok(Some(Cgroups { parent, prefix })),
            Err(reason) => {
                tracing::info!("attempts run without a cgroup each ({reason}); the supervisor reaps what they leave");
                Ok(None)
            }
        }
    }

    /// Attempts' cgroups under `parent`, unchecked (tests).
    #[cfg(test)]
    pub fn unchecked(parent: PathBuf) -> Cgroups {
        Cgroups { parent, prefix: "0000000a".to_string() }
    }

    pub fn parent(&self) -> &Path {
        &self.parent
    }

    /// The cgroup of the attempt whose directory is named `attempt` (CG-1).
    pub fn for_attempt(&self, attempt: &str) -> PathBuf {
        self.parent.join(format!("{}-{attempt}", self.prefix))
    }
}

/// `ftdrive` under this process's cgroup on the cgroup v2 mount, or why there is none.
fn default_parent() -> Result<PathBuf, String> {
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("no /proc/self/mountinfo: {e}"))?;
    let (mount, root) = cgroup2_mount(&mountinfo).ok_or("no cgroup v2 hierarchy is mounted")?;
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("no /proc/self/cgroup: {e}"))?;
    let own = own_cgroup(&own).ok_or("this process is in no cgroup v2 group")?;
    // In a cgroup namespace the mount's root is where the namespace's paths start.
    let within = own.strip_prefix(root.trim_end_matches('/')).unwrap_or(own);
    Ok(mount.join(within.trim_start_matches('/')).join(DEFAULT_PARENT))
}

/// The first cgroup v2 mount in `/proc/self/mountinfo`: its mount point and the root of the
/// hierarchy it shows.
fn cgroup2_mount(mountinfo: &str) -> Option<(PathBuf, String)> {
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        if fs.split_whitespace().next() != Some("cgroup2") {
            return None;
        }
        let fields: Vec<&str> = mount.split_whitespace().collect();
        Some((PathBuf::from(unescape(fields.get(4)?)), unescape(fields.get(3)?)))
    })
}

/// Mountinfo writes spaces, tabs, newlines and backslashes in paths as octal escapes.
fn unescape(field: &str) -> String {
    let mut out = Vec::with_capacity(field.len());
    let bytes = field.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// This process's cgroup v2 path, from `/proc/self/cgroup` (the `0::PATH` line).
fn own_cgroup(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup.lines().find_map(|line| line.strip_prefix("0::"))
}

/// The parent is on a cgroup v2 mount, exists (made if need be), and takes processes.
fn usable(parent: &Path) -> Result<(), String> {
    let shown = parent.display();
    // Checked before anything is made: a mistyped path must not leave directories elsewhere.
    let existing = parent.ancestors().find(|dir| dir.exists()).unwrap_or(Path::new("/"));
    if !on_cgroup2(existing) {
        return Err(format!("{shown} is not on a cgroup v2 mount"));
    }
    std::fs::create_dir_all(parent).map_err(|e| format!("cannot create the cgroup {shown}: {e}"))?;
    let procs = parent.join("cgroup.procs");
    let c_path = std::ffi::CString::new(procs.as_os_str().as_encoded_bytes()).map_err(|_| format!("{shown}: a NUL"))?;
    // SAFETY: access only reads the NUL-terminated path it is given.
    if unsafe { libc::access(c_path.as_ptr(), libc::W_OK) } != 0 {
        return Err(format!("cannot move processes into {shown}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn on_cgroup2(dir: &Path) -> bool {
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    let Ok(c_path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: statfs writes into the zeroed struct it is given, and reads the path.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statfs(c_path.as_ptr(), &mut stat) }) == 0 && stat.f_type as i64 == CGROUP2_SUPER_MAGIC
}

/// Makes an attempt's cgroup (CG-1), and its parent again if it went (the default parent is
/// shared by the machine's agents, and anyone's cleanup of empty groups may take it); one
/// already there (an agent that restarted while making it) is taken as it is.
pub fn create(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

/// Moves this process, every thread of it, into `dir` (CG-2): before it starts any thread.
pub fn join(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string())
}

/// Whether `dir` names the cgroup an agent made for the attempt whose directory is named
/// `attempt`: the record that says where it is is writable by the job, and must not point the
/// agent at another group (CG-4).
pub fn is_attempt_cgroup(dir: &Path, attempt: &str) -> bool {
    let name = dir.file_name().and_then(|n| n.to_str());
    name.is_some_and(|n| n.strip_suffix(attempt).is_some_and(|prefix| prefix.len() == 9 && prefix.ends_with('-')))
        && on_cgroup2(dir)
}

/// Kills every process in `dir` and in the groups a job made inside it (CG-4): at once with
/// `cgroup.kill`, else one by one.
pub fn kill(dir: &Path) {
    if std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
        return;
    }
    kill_one_by_one(dir);
}

/// `kill` before Linux 5.14 (Debian 11's 5.10 mounts cgroup v2 alone): the group is frozen
/// first where it can be (5.2 on), so that nothing in it forks between a reading of its
/// processes and their signals; every process of it and of the groups inside it is killed (a
/// frozen process still dies of SIGKILL), and the group thawed, for whoever uses it next.
fn kill_one_by_one(dir: &Path) {
    let frozen = std::fs::write(dir.join("cgroup.freeze"), "1").is_ok();
    for _ in 0..MAX_KILL_ROUNDS {
        let mut pids = Vec::new();
        procs_within(dir, MAX_NESTED_DEPTH, &mut pids);
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            // SAFETY: signalling a process of this attempt's cgroup.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    if frozen {
        let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
    }
}

/// The processes in `dir` and in the groups inside it, `depth_left` levels down.
fn procs_within(dir: &Path, depth_left: usize, pids: &mut Vec<i32>) {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    pids.extend(procs.lines().filter_map(|p| p.trim().parse::<i32>().ok()));
    if depth_left > 0 {
        for inner in subgroups(dir) {
            procs_within(&inner, depth_left - 1, pids);
        }
    }
}

/// The groups directly inside `dir`.
fn subgroups(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect()
}

/// The deepest a job's own groups inside its attempt's are removed from (`remove`).
const MAX_NESTED_DEPTH: usize = 16;

/// Removes an attempt's cgroup, if it is there and empty of processes — with the groups a job
/// made inside it, which `cgroup.kill` emptied too but which keep their parent from going.
pub fn remove(dir: &Path) {
    remove_nested(dir, MAX_NESTED_DEPTH);
}

fn remove_nested(dir: &Path, depth_left: usize) {
    if depth_left > 0 {
        for inner in subgroups(dir) {
            remove_nested(&inner, depth_left - 1);
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// CG-2, in the supervisor once its workers run: it leaves their cgroup for the parent.
/// Whether it did (if not, it stays in, as before).
pub fn leave(dir: &Path) -> bool {
    dir.parent().is_some_and(|parent| join(parent).is_ok())
}

/// CG-3, in the supervisor: leaves its attempt's cgroup if it is still in it, kills what is
/// left in it, waits (a bounded time) for it to be empty, and removes it.
pub fn leave_and_remove(dir: &Path) {
    if !leave(dir) {
        return; // still in it: the agent removes it once the head has the end (`forget`)
    }
    kill(dir);
    let deadline = Instant::now() + Duration::from_millis(EMPTY_WAIT_MS);
    while populated(dir) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    remove(dir);
}

/// Waits, at most `REPORT_EMPTY_WAIT_MS`, for the processes `kill` signalled in `dir` to be
/// gone: the kill only sends SIGKILL, a process with much memory takes a while to exit, and a
/// group still populated when the head acknowledges the end cannot be removed (`remove`; rmdir:
/// EBUSY).
pub async fn emptied(dir: &Path) {
    let deadline = Instant::now() + Duration::from_millis(REPORT_EMPTY_WAIT_MS);
    while populated(dir) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether a live process is still in `dir` (`cgroup.events`: `populated 1`).
fn populated(dir: &Path) -> bool {
    let events = std::fs::read_to_string(dir.join("cgroup.events")).unwrap_or_default();
    events.lines().any(|line| line.trim() == "populated 1")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 28 0:20 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
31 25 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
35 25 0:30 /ns /sys/fs/cgroup/uni\\040fied rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn the_cgroup2_mount_is_found_with_its_root_and_escapes() {
        let (mount, root) = cgroup2_mount(MOUNTINFO).unwrap();
        assert_eq!(mount, PathBuf::from("/sys/fs/cgroup/uni fied"));
        assert_eq!(root, "/ns");
        assert_eq!(cgroup2_mount(&MOUNTINFO.lines().take(2).collect::<Vec<_>>().join("\n")), None, "v1 only");
    }

    #[test]
    fn the_own_cgroup_is_the_unified_line() {
        let proc_cgroup = "4:memory:/a\n0::/system.slice/ftdrive-node.service\n";
        assert_eq!(own_cgroup(proc_cgroup), Some("/system.slice/ftdrive-node.service"));
        assert_eq!(own_cgroup("4:memory:/a\n"), None);
    }

    #[test]
    fn the_flag_takes_auto_off_or_an_absolute_directory() {
        assert_eq!(Choice::parse("auto"), Ok(Choice::Auto));
        assert_eq!(Choice::parse("off"), Ok(Choice::Off));
        assert_eq!(Choice::parse("/sys/fs/cgroup/x"), Ok(Choice::At("/sys/fs/cgroup/x".into())));
        assert!(Choice::parse("sys/fs").unwrap_err().contains("absolute path"));
    }

    #[test]
    fn attempts_of_two_agents_get_two_cgroups() {
        let a = Cgroups::resolve(&Choice::Off, Path::new("/a")).unwrap();
        assert_eq!(a, None, "off is off");
        let one = Cgroups { parent: "/cg/ftdrive".into(), prefix: "0000000a".into() };
        let two = Cgroups { parent: "/cg/ftdrive".into(), prefix: "0000000b".into() };
        assert_ne!(one.for_attempt("00ff"), two.for_attempt("00ff"));
        assert_eq!(one.for_attempt("00ff"), PathBuf::from("/cg/ftdrive/0000000a-00ff"));
    }

    #[test]
    fn an_attempts_group_is_made_with_its_parent_and_removed_with_what_is_inside() {
        let dir = tempfile::tempdir().unwrap();
        let attempt = dir.path().join("ftdrive/0000000a-00ff");
        create(&attempt).expect("the parent, gone, is made again");
        std::fs::create_dir_all(attempt.join("inner/deeper")).unwrap();
        remove(&attempt);
        assert!(!attempt.exists() && dir.path().join("ftdrive").exists());
    }

    /// Without `cgroup.kill` (before Linux 5.14), on a real cgroup: processes in the group and
    /// in a group a job made inside it are killed, a shell that forks meanwhile included, and
    /// the group is left thawed and empty. Needs root and a cgroup v2 mount (as CI has).
    #[test]
    fn without_cgroup_kill_every_process_inside_is_killed_one_by_one() {
        let parent = match default_parent().and_then(|p| usable(&p).map(|()| p)) {
            Ok(parent) => parent,
            Err(why) => return eprintln!("skipped: no cgroup v2 group to make here ({why})"),
        };
        let dir = parent.join(format!("kill-test-{}", std::process::id()));
        create(&dir.join("inner")).unwrap();
        // Should a check fail, nothing of the test outlives it.
        struct Cleanup<'a>(&'a Path);
        impl Drop for Cleanup<'_> {
            fn drop(&mut self) {
                let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
                std::thread::sleep(Duration::from_millis(100));
                remove(self.0);
            }
        }
        let _cleanup = Cleanup(&dir);
        let spawn = |script: &str, group: &Path| {
            let child = std::process::Command::new("sh").args(["-c", script]).spawn().unwrap();
            std::fs::write(group.join("cgroup.procs"), child.id().to_string()).unwrap();
            child
        };
        let mut children = [
            spawn("sleep 60", &dir),
            spawn("while true; do sleep 60 & sleep 0.01; done", &dir),
            spawn("sleep 60 & sleep 60", &dir.join("inner")),
        ];
        std::thread::sleep(Duration::from_millis(100)); // the forking shell has children now
        kill_one_by_one(&dir);
        for child in &mut children {
            let status = child.wait().unwrap();
            assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while populated(&dir) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let thawed = std::fs::read_to_string(dir.join("cgroup.freeze")).unwrap_or_default();
        let emptied = !populated(&dir);
        remove(&dir);
        assert!(emptied, "every process inside, the forked ones and the inner group's included, is gone");
        assert_eq!(thawed.trim(), "0", "left thawed");
        assert!(!dir.exists());
    }

    #[test]
    fn a_directory_not_on_cgroup2_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = Cgroups::resolve(&Choice::At(dir.path().to_path_buf()), Path::new("/s")).unwrap_err();
        assert!(err.contains(&format!("{} is not on a cgroup v2 mount", dir.path().display())), "{err}");
        assert!(!is_attempt_cgroup(&dir.path().join("0000000a-00ff"), "00ff"), "not on cgroup2");
    }
}
