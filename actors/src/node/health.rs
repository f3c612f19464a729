//! Whether this node can start work (AG-6 in `src/agent.rs`): after a start failed because of
//! the node, the agent probes what a start needs — its attempts' and logs' directories taking
//! a synced write — every `PROBE_EVERY`, and says it is healthy again once they do.

use std::path::Path;
use std::time::Duration;

/// How often an unhealthy agent probes: a full disk freed is taken up within this.
pub const PROBE_EVERY: Duration = Duration::from_secs(2);

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
