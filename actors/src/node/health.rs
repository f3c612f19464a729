//! Whether this node can start work (AG-6 in `src/agent.rs`): after a start failed because of
//! the node, the agent probes what a start needs — its attempts' and logs' directories taking
//! a synced write — every `PROBE_EVERY`, and says it is healthy again once they do and its
//! cool-down is over. The cool-down doubles with each failure in a row (`cool_down`): a fault
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

/// What keeps this node from starting work, naming the directory, or `None`.
pub fn probe(state_dir: &Path) -> Option<String> {
    let dirs = [super::attempt::attempts_dir(state_dir), state_dir.join("logs")];
    dirs.iter().find_map(|dir| {
        let written = std::fs::create_dir_all(dir).and_then(|()| crate::paths::check_writable(dir));
        written.err().map(|e| format!("{} takes no write: {e}", dir.display()))
    })
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
        assert_eq!(probe(dir.path()), None);
        std::fs::remove_dir(dir.path().join("attempts")).unwrap();
        std::fs::write(dir.path().join("attempts"), b"a file where the directory goes").unwrap();
        let problem = probe(dir.path()).expect("unhealthy");
        assert!(problem.contains("attempts takes no write"), "{problem}");
        std::fs::remove_file(dir.path().join("attempts")).unwrap();
        assert_eq!(probe(dir.path()), None, "healthy once it can write again");
    }
}
