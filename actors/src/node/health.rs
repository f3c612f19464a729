//! Whether this node can start work (AG-6 in `src/agent.rs`): after a start failed because of
//! the node, the agent probes what a start needs — its attempts' and logs' directories taking
//! a synced write, and their disk keeping `--min-free-disk-mb` and `MIN_FREE_INODES` free — every `PROBE_EVERY`,
//! and says it is healthy again once they do and its cool-down is over. The cool-down doubles with each failure in a row (`cool_down`): a fault
//! the probe cannot see (forks refused now and then) would otherwise make the node well again
//! at every probe, and fail a start of some job, charged, at every episode.

use std::path::Path;
use std::time::Duration;

/// How often an unhealthy agent probes: a full disk freed is taken up within this.
pub const PROBE_EVERY: Duration = Duration::from_secs(2);
/// How often a healthy agent probes: a disk that fills up is found within this, most often
/// before a start fails on it.
pub const PROBE_WHILE_WELL_EVERY: Duration = Duration::from_secs(10);

/// The longest a node stays unhealthy for failures the probe cannot see.
pub const MAX_COOL_DOWN: Duration = Duration::from_secs(300);

/// How long the node stays unhealthy at least after the `streak`-th episode in a row (from 1):
/// one probe interval, doubling, at most `MAX_COOL_DOWN`. A start that succeeds ends a streak.
pub fn cool_down(streak: u32) -> Duration {
    let doublings = streak.saturating_sub(1).min(16);
    (PROBE_EVERY * (1 << doublings)).min(MAX_COOL_DOWN)
}

/// What keeps this node from starting work, naming the directory, or `None`. A disk with a
/// few KiB left still takes the probe's write, but not an attempt's output: the attempt would
/// run with its log lost, and a failure in it could not be read.
pub fn probe(state_dir: &Path, min_free_bytes: u64) -> Option<String> {
    let dirs = [super::attempt::attempts_dir(state_dir), state_dir.join("logs")];
    dirs.iter().find_map(|dir| {
        let written = std::fs::create_dir_all(dir).and_then(|()| crate::paths::check_writable(dir));
        if let Err(e) = written {
            return Some(format!("{} takes no write: {e}", dir.display()));
        }
        let free = free_space(dir).ok()?;
        if free.bytes < min_free_bytes {
            return Some(format!(
                "{} has {} MiB free, under --min-free-disk-mb {}: free space on its disk",
                dir.display(),
                free.bytes >> 20,
                min_free_bytes >> 20
            ));
        }
        free.inodes.filter(|inodes| *inodes < MIN_FREE_INODES).map(|inodes| {
            format!(
                "{} has {inodes} inodes free, under the {MIN_FREE_INODES} an agent keeps: delete files on its disk \
                 (old logs: --keep-logs-hours), or give it more inodes",
                dir.display()
            )
        })
    })
}

/// The fewest free inodes a node takes work with. An attempt makes a few files and
/// directories (its record, socket, log directories and log): a disk out of inodes with space
/// to spare took the probe's one file, turned healthy, and failed every start placed on it,
/// charged to the jobs (as kubelet evicts on `nodefs.inodesFree`).
const MIN_FREE_INODES: u64 = 1_000;

/// What an unprivileged write may still take of the disk under `dir` (root's reserve aside).
struct FreeSpace {
    bytes: u64,
    /// `None` where the file system has no fixed number of inodes (it reports none at all).
    inodes: Option<u64>,
}

fn free_space(dir: &Path) -> std::io::Result<FreeSpace> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: statvfs writes only into the struct given, which outlives the call.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stats) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let inodes = (stats.f_files > 0).then_some(stats.f_favail);
    Ok(FreeSpace { bytes: stats.f_bavail.saturating_mul(stats.f_frsize), inodes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cool_down_doubles_with_each_failure_in_a_row_up_to_its_bound() {
        let secs: Vec<u64> = (1..=10).map(|n| cool_down(n).as_secs()).collect();
        assert_eq!(secs, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(cool_down(u32::MAX), MAX_COOL_DOWN);
    }

    /// A disk with space but out of inodes (tmpfs with few of them; root only, as mounting is).
    #[test]
    fn a_disk_out_of_inodes_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64m,nr_inodes=1100", "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status();
        if !mounted.is_ok_and(|s| s.success()) {
            return eprintln!("SKIPPED: cannot mount a tmpfs here (not root?)");
        }
        let state = dir.path().join("state");
        let first = probe(&state, 0);
        for i in 0..200 {
            std::fs::write(dir.path().join(i.to_string()), b"").unwrap();
        }
        let problem = probe(&state, 0);
        let _ = std::process::Command::new("umount").arg(dir.path()).status();
        assert_eq!(first, None, "over 1,000 inodes free");
        let problem = problem.expect("under 1,000 inodes free");
        assert!(problem.contains("inodes free, under the 1000 an agent keeps"), "{problem}");
    }

    #[test]
    fn a_state_dir_whose_attempts_dir_cannot_be_made_is_named() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(probe(dir.path(), 0), None);
        std::fs::remove_dir(dir.path().join("attempts")).unwrap();
        std::fs::write(dir.path().join("attempts"), b"a file where the directory goes").unwrap();
        let problem = probe(dir.path(), 0).expect("unhealthy");
        assert!(problem.contains("attempts takes no write"), "{problem}");
        std::fs::remove_file(dir.path().join("attempts")).unwrap();
        assert_eq!(probe(dir.path(), 0), None, "healthy once it can write again");
    }

    #[test]
    fn a_disk_with_less_free_than_the_bound_is_named_with_what_it_has() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_space(dir.path()).unwrap().bytes > 1 << 20);
        assert_eq!(probe(dir.path(), 1 << 20), None, "the test's disk has a MiB free");
        let problem = probe(dir.path(), u64::MAX).expect("no disk has that much free");
        let bound = format!("MiB free, under --min-free-disk-mb {}", u64::MAX >> 20);
        assert!(problem.starts_with(&format!("{} has ", dir.path().join("attempts").display())), "{problem}");
        assert!(problem.contains(&bound), "{problem}");
        assert!(problem.ends_with(": free space on its disk"), "{problem}");
    }
}
