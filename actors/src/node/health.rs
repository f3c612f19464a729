//! Whether this node can start work (AG-6 in `src/agent.rs`): after a start failed because of
//! the node, the agent probes what a start needs — its attempts' and logs' directories taking
//! a synced write, and their disk keeping `--min-free-disk-mb` free — every `PROBE_EVERY`,
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
        let free = free_bytes(dir).ok()?;
        (free < min_free_bytes).then(|| {
            format!(
                "{} has {} MiB free, under --min-free-disk-mb {}: free space on its disk",
                dir.display(),
                free >> 20,
                min_free_bytes >> 20
            )
        })
    })
}

/// What an unprivileged write may still take of the disk under `dir` (root's reserve aside).
fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: statvfs writes only into the struct given, which outlives the call.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stats) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(stats.f_bavail.saturating_mul(stats.f_frsize))
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
        assert!(free_bytes(dir.path()).unwrap() > 1 << 20);
        assert_eq!(probe(dir.path(), 1 << 20), None, "the test's disk has a MiB free");
        let problem = probe(dir.path(), u64::MAX).expect("no disk has that much free");
        let bound = format!("MiB free, under --min-free-disk-mb {}", u64::MAX >> 20);
        assert!(problem.starts_with(&format!("{} has ", dir.path().join("attempts").display())), "{problem}");
        assert!(problem.contains(&bound), "{problem}");
        assert!(problem.ends_with(": free space on its disk"), "{problem}");
    }
}
