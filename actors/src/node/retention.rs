//! How long the logs of ended attempts stay on the agent's disk (`ftdrive node
//! --keep-logs-hours`): `logcap` bounds each running attempt's log, and this deletes a whole
//! attempt's logs once it has ended and nothing was written to them for that long, as a
//! kubelet deletes a dead container's logs with the container. Its end counts as a write
//! (`touch`), so a job silent for a week keeps its log for the full time after it ends. The
//! head forgets finished jobs after `--retain-finished-hours` (the same 168 by default), and
//! `ftdrive logs` finds no job it forgot.

use ftdrive::protocol::AttemptKey;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How often the agent looks for logs to delete (and once as it starts).
pub const SWEEP_EVERY: Duration = Duration::from_secs(3_600);

/// An attempt, as its logs are filed: `logs/<job>/<actor>/attempt-<attempt>[.<local rank>].log`.
pub type LogKey = (String, u32, u32);

pub fn log_key(key: &AttemptKey) -> LogKey {
    (key.job.to_string(), key.actor, key.attempt)
}

/// What one sweep deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub files: u64,
    /// The disk they took: a log bounded by `--max-log-mb` is mostly a hole, so its length
    /// says nothing of what deleting it frees.
    pub bytes: u64,
}

impl std::ops::AddAssign for Swept {
    fn add_assign(&mut self, other: Swept) {
        self.files += other.files;
        self.bytes += other.bytes;
    }
}

/// Deletes, under `logs_dir`, every log of an attempt not in `live` last written before
/// `now - keep`, and the job and actor directories it leaves empty. What it cannot read or
/// delete it leaves, and says so.
pub fn sweep(logs_dir: &Path, keep: Duration, live: &BTreeSet<LogKey>, now: SystemTime) -> Swept {
    let mut swept = Swept::default();
    let Some(before) = now.checked_sub(keep) else { return swept };
    for job in entries(logs_dir) {
        let job_name = job.file_name().to_string_lossy().into_owned();
        for actor in entries(&job.path()) {
            let Some(actor_ix) = actor.file_name().to_str().and_then(|a| a.parse::<u32>().ok()) else { continue };
            for file in entries(&actor.path()) {
                let Some(attempt) = attempt_of(&file.file_name().to_string_lossy()) else { continue };
                if live.contains(&(job_name.clone(), actor_ix, attempt)) {
                    continue;
                }
                let Ok(meta) = file.metadata() else { continue };
                if meta.modified().is_ok_and(|at| at < before) {
                    match std::fs::remove_file(file.path()) {
                        Ok(()) => {
                            swept.files += 1;
                            swept.bytes += std::os::unix::fs::MetadataExt::blocks(&meta) * 512;
                        }
                        Err(e) => tracing::warn!("cannot delete the old log {}: {e}", file.path().display()),
                    }
                }
            }
            let _ = std::fs::remove_dir(actor.path()); // only if empty
        }
        let _ = std::fs::remove_dir(job.path());
    }
    swept
}

/// Sweeps the logs put aside when the agent joined another cluster (`logs-<cluster id>`, whose
/// attempts all ended: none runs or is owed here), as `sweep` does, and each such directory
/// once empty. Left alone, a machine moved between clusters kept them for good.
pub fn sweep_other_clusters(state_dir: &Path, keep: Duration, now: SystemTime) -> Swept {
    let mut swept = Swept::default();
    for dir in entries(state_dir).filter(|e| e.file_name().to_string_lossy().starts_with("logs-")) {
        swept += sweep(&dir.path(), keep, &BTreeSet::new(), now);
        let _ = std::fs::remove_dir(dir.path()); // only if empty
    }
    swept
}

/// The attempt an attempt's log file belongs to: `attempt-3.log` and `attempt-3.1.log` are 3.
fn attempt_of(file_name: &str) -> Option<u32> {
    let rest = file_name.strip_prefix("attempt-")?.strip_suffix(".log")?;
    rest.split('.').next()?.parse().ok()
}

fn entries(dir: &Path) -> impl Iterator<Item = std::fs::DirEntry> {
    std::fs::read_dir(dir).into_iter().flatten().flatten()
}

/// The attempt of `log` (its `attempt-A.log`) ended now: each of its logs counts as written
/// now, so that `--keep-logs-hours` counts from its end.
pub fn touch(log: &Path) {
    let (Some(dir), Some(attempt)) = (log.parent(), log.file_name().and_then(|f| attempt_of(&f.to_string_lossy())))
    else {
        return;
    };
    let now = SystemTime::now();
    for file in entries(dir).filter(|f| attempt_of(&f.file_name().to_string_lossy()) == Some(attempt)) {
        let touched = std::fs::File::options().append(true).open(file.path()).and_then(|f| f.set_modified(now));
        if let Err(e) = touched {
            tracing::debug!("cannot mark {} as written now: {e}", file.path().display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, age: Duration) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"line\n").unwrap();
        let file = std::fs::File::options().append(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - age).unwrap();
    }

    #[test]
    fn old_logs_of_ended_attempts_go_and_the_rest_stay() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path();
        let day = Duration::from_secs(86_400);
        write(&logs.join("j1/0/attempt-1.log"), 8 * day);
        write(&logs.join("j1/0/attempt-1.0.log"), 8 * day);
        write(&logs.join("j1/0/attempt-2.log"), day);
        write(&logs.join("j2/0/attempt-1.log"), 8 * day);
        write(&logs.join("j3/1/attempt-4.log"), 30 * day);
        write(&logs.join("j3/1/notes.txt"), 30 * day);
        let live = BTreeSet::from([("j3".to_string(), 1, 4)]);
        let on_disk =
            |path: &str| std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(logs.join(path)).unwrap()) * 512;
        let bytes = ["j1/0/attempt-1.log", "j1/0/attempt-1.0.log", "j2/0/attempt-1.log"].map(on_disk).iter().sum();
        let swept = sweep(logs, 7 * day, &live, SystemTime::now());
        assert_eq!(swept, Swept { files: 3, bytes });
        assert!(!logs.join("j1/0/attempt-1.log").exists() && !logs.join("j1/0/attempt-1.0.log").exists());
        assert!(logs.join("j1/0/attempt-2.log").exists(), "a day old");
        assert!(!logs.join("j2").exists(), "an emptied job's directory goes too");
        assert!(logs.join("j3/1/attempt-4.log").exists(), "a live attempt's log stays, however old");
        assert!(logs.join("j3/1/notes.txt").exists(), "what is not an attempt's log stays");
    }

    #[test]
    fn old_logs_of_another_cluster_go_and_their_directory_with_them() {
        let state = tempfile::tempdir().unwrap();
        let day = Duration::from_secs(86_400);
        write(&state.path().join("logs-41/j1/0/attempt-1.log"), 8 * day);
        write(&state.path().join("logs-42/j1/0/attempt-1.log"), 8 * day);
        write(&state.path().join("logs-42/j2/0/attempt-1.log"), day);
        write(&state.path().join("logs/j1/0/attempt-1.log"), 8 * day);
        let swept = sweep_other_clusters(state.path(), 7 * day, SystemTime::now());
        assert_eq!(swept.files, 2);
        assert!(!state.path().join("logs-41").exists(), "emptied, it goes");
        assert!(state.path().join("logs-42/j2/0/attempt-1.log").exists(), "a day old");
        assert!(state.path().join("logs/j1/0/attempt-1.log").exists(), "this cluster's logs are `sweep`'s");
    }

    #[test]
    fn an_attempts_end_counts_as_a_write_to_each_of_its_logs() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("j1/0/attempt-2.log");
        let week = Duration::from_secs(7 * 86_400);
        for name in ["attempt-2.log", "attempt-2.0.log", "attempt-1.log"] {
            write(&dir.path().join("j1/0").join(name), 2 * week);
        }
        touch(&log);
        let swept = sweep(dir.path(), week, &BTreeSet::new(), SystemTime::now());
        assert_eq!(swept.files, 1, "only attempt 1's log was old");
        assert!(log.exists() && dir.path().join("j1/0/attempt-2.0.log").exists());
    }

    #[test]
    fn attempt_numbers_are_read_from_log_names() {
        assert_eq!(attempt_of("attempt-3.log"), Some(3));
        assert_eq!(attempt_of("attempt-3.12.log"), Some(3));
        assert_eq!(attempt_of("attempt-x.log"), None);
        assert_eq!(attempt_of("attempt-3.txt"), None);
    }
}
