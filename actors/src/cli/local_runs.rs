//! Which embedded runs' directories stay (`ftdrive submit` with no head): each run keeps its
//! head's state and its agents' logs in `local/run-*` so that the user can read them after the
//! command ended, and each new run deletes those of the old ones that no run is using and that
//! are either last written more than `KEEP_RUN_HOURS` ago (as long as an agent keeps an ended
//! attempt's logs by default) or older than the `KEEP_RUNS` newest. Left alone, a user who runs
//! a job locally many times a day filled the disk with logs.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Runs kept whatever their age, newest first.
pub const KEEP_RUNS: usize = 20;
/// How long a run is kept after its last write, whatever the count (`ftdrive node
/// --keep-logs-hours`' default).
pub const KEEP_RUN_HOURS: u64 = 168;
/// No run written to more recently is deleted, whatever the count: one just made by a run
/// started at the same moment has not yet locked its state.
const MIN_AGE: Duration = Duration::from_secs(3600);
/// Most files looked at in one run's directory to find its last write: a run's tree is a
/// database, a few records and the logs of its attempts.
const MAX_FILES_SEEN: usize = 100_000;

/// What `sweep` deleted, and what it could not.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub runs: usize,
    pub bytes: u64,
    /// One line for each run it left for a reason the user should hear (`submit` has no log).
    pub problems: Vec<String>,
}

/// Deletes the old runs under `parent` (see the module doc), at `now`. What it cannot read or
/// delete, it leaves and says why.
pub fn sweep(parent: &Path, now: SystemTime) -> Swept {
    let runs = runs_newest_first(parent);
    let too_old = now.checked_sub(Duration::from_secs(KEEP_RUN_HOURS * 3600));
    let recent = now.checked_sub(MIN_AGE);
    let mut swept = Swept::default();
    for (n, (written, dir)) in runs.into_iter().enumerate() {
        let expired = too_old.is_some_and(|t| written < t) || n >= KEEP_RUNS;
        if expired && recent.is_some_and(|t| written < t) {
            match delete_unless_in_use(&dir) {
                Ok(Some(bytes)) => {
                    swept.runs += 1;
                    swept.bytes += bytes;
                }
                Ok(None) => {} // in use
                Err(problem) => swept.problems.push(problem),
            }
        }
    }
    swept
}

/// The runs' directories under `parent`, each with its last write, newest first.
fn runs_newest_first(parent: &Path) -> Vec<(SystemTime, PathBuf)> {
    let mut runs: Vec<(SystemTime, PathBuf)> = std::fs::read_dir(parent)
        .into_iter()
        .flatten()
        .flatten()
        // Directories only, not what a link named like one points to: that is not a run's.
        .filter(|e| e.file_name().to_string_lossy().starts_with("run-") && e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| (last_write(&e.path()), e.path()))
        .collect();
    runs.sort_by(|a, b| b.cmp(a));
    runs
}

/// The kept run whose agents hold `job`'s logs (job numbers go on from run to run, so one run
/// at most), else the newest run; None when no run is kept. For `ftdrive logs` and `status`
/// given no head: an embedded cluster ends with its `submit`, and what it kept is here.
pub fn run_of(parent: &Path, job: Option<&str>) -> Option<(PathBuf, bool)> {
    let runs = runs_newest_first(parent);
    let ran_job = |run: &Path| {
        let job = job.filter(|j| crate::node::logs::safe_component(j))?;
        let nodes = std::fs::read_dir(run).into_iter().flatten().flatten();
        nodes.into_iter().any(|node| node.path().join("logs").join(job).is_dir()).then_some(())
    };
    let of_job = runs.iter().find(|(_, run)| ran_job(run).is_some()).map(|(_, run)| (run.clone(), true));
    of_job.or_else(|| runs.first().map(|(_, run)| (run.clone(), false)))
}

/// Deletes `dir` unless a run's head holds the lock on its database (a run still going,
/// however quiet); returns the bytes its files held if it deleted it, and what went wrong if
/// it could not.
fn delete_unless_in_use(dir: &Path) -> Result<Option<u64>, String> {
    let database = dir.join("head").join(crate::head::DATABASE);
    // Held while deleting: a head starting on this directory now waits for the lock and then
    // finds nothing, rather than losing files under it.
    let _lock = match database.exists().then(|| crate::paths::lock_exclusive(&database)) {
        Some(Err(e)) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
        Some(Err(e)) => {
            return Err(format!(
                "kept the old run {}: cannot tell whether it is in use: {e}; delete it by hand once no `ftdrive \
                 submit` runs there",
                dir.display()
            ))
        }
        lock => lock,
    };
    let bytes = size(dir);
    std::fs::remove_dir_all(dir).map(|()| Some(bytes)).map_err(|e| {
        format!("cannot delete the old run {} (part of it may be gone): {e}; delete it by hand", dir.display())
    })
}

/// The newest modification time of anything in `dir`'s tree (the directory's own when empty).
fn last_write(dir: &Path) -> SystemTime {
    let mut newest = modified(dir);
    walk(dir, &mut |_, meta| newest = newest.max(meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)));
    newest
}

fn size(dir: &Path) -> u64 {
    let mut bytes = 0;
    walk(dir, &mut |_, meta| bytes += if meta.is_file() { meta.len() } else { 0 });
    bytes
}

fn modified(path: &Path) -> SystemTime {
    std::fs::metadata(path).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH)
}

/// Calls `each` for every file and directory under `dir`, symbolic links not followed, up to
/// `MAX_FILES_SEEN` of them.
fn walk(dir: &Path, each: &mut dyn FnMut(&Path, &std::fs::Metadata)) {
    let mut pending = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).into_iter().flatten().flatten() {
            seen += 1;
            if seen > MAX_FILES_SEEN {
                return;
            }
            let Ok(meta) = entry.metadata() else { continue };
            each(&entry.path(), &meta);
            if meta.is_dir() {
                pending.push(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    /// A run directory last written `age` ago, with a log of `bytes`.
    fn run(parent: &Path, name: &str, age: Duration, bytes: usize) -> PathBuf {
        let dir = parent.join(name);
        let log = dir.join("local-0/logs/j1/0/attempt-1.log");
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        std::fs::write(&log, vec![b'x'; bytes]).unwrap();
        let then = SystemTime::now() - age;
        std::fs::File::options().append(true).open(&log).unwrap().set_modified(then).unwrap();
        for d in [dir.join("local-0/logs/j1/0"), dir.join("local-0/logs/j1"), dir.join("local-0/logs")] {
            std::fs::File::open(&d).unwrap().set_modified(then).unwrap();
        }
        for d in [dir.join("local-0"), dir.clone()] {
            std::fs::File::open(&d).unwrap().set_modified(then).unwrap();
        }
        dir
    }

    #[test]
    fn runs_older_than_a_week_go_and_the_rest_stay() {
        let parent = tempfile::tempdir().unwrap();
        let old = run(parent.path(), "run-old", Duration::from_secs(KEEP_RUN_HOURS * 3600) + HOUR, 10);
        let week = run(parent.path(), "run-week", Duration::from_secs(KEEP_RUN_HOURS * 3600) - HOUR, 10);
        std::fs::write(parent.path().join("next-job-number"), b"7").unwrap();
        let swept = sweep(parent.path(), SystemTime::now());
        assert_eq!(swept, Swept { runs: 1, bytes: 10, problems: Vec::new() });
        assert!(!old.exists());
        assert!(week.exists());
        assert!(parent.path().join("next-job-number").exists(), "only run directories are swept");
    }

    #[test]
    fn only_the_newest_runs_stay_once_there_are_too_many_though_none_written_this_hour_goes() {
        let parent = tempfile::tempdir().unwrap();
        let runs: Vec<PathBuf> = (0..KEEP_RUNS + 3)
            .map(|i| run(parent.path(), &format!("run-{i:02}"), HOUR * 2 + Duration::from_secs(i as u64 * 60), 1))
            .collect();
        let fresh = run(parent.path(), "run-fresh", Duration::from_secs(60), 1);
        let older_fresh = run(parent.path(), "run-fresh-too", Duration::from_secs(120), 1);
        assert_eq!(sweep(parent.path(), SystemTime::now()).runs, 5);
        assert!(fresh.exists() && older_fresh.exists(), "written within the hour");
        let kept: Vec<bool> = runs.iter().map(|r| r.exists()).collect();
        let expected: Vec<bool> = (0..KEEP_RUNS + 3).map(|i| i < KEEP_RUNS - 2).collect();
        assert_eq!(kept, expected, "the newest {} with the two fresh ones", KEEP_RUNS);
    }

    #[test]
    fn the_run_of_a_job_is_the_one_that_holds_its_logs_else_the_newest() {
        let parent = tempfile::tempdir().unwrap();
        assert_eq!(run_of(parent.path(), Some("j1")), None, "no run kept");
        let older = run(parent.path(), "run-older", HOUR * 2, 1);
        let newer = run(parent.path(), "run-newer", HOUR, 1);
        std::fs::rename(newer.join("local-0/logs/j1"), newer.join("local-0/logs/j2")).unwrap();
        assert_eq!(run_of(parent.path(), Some("j1")), Some((older, true)));
        assert_eq!(run_of(parent.path(), Some("j2")), Some((newer.clone(), true)));
        assert_eq!(run_of(parent.path(), Some("j9")), Some((newer.clone(), false)), "not kept: the newest");
        assert_eq!(run_of(parent.path(), Some("..")), Some((newer.clone(), false)), "no path out of a run");
        assert_eq!(run_of(parent.path(), None), Some((newer, false)));
    }

    /// A link named like a run is not one: neither it nor what it points to is touched.
    #[test]
    fn a_link_named_like_a_run_is_left_alone() {
        let parent = tempfile::tempdir().unwrap();
        let elsewhere = run(parent.path(), "elsewhere", Duration::from_secs(KEEP_RUN_HOURS * 3600 * 2), 5);
        std::os::unix::fs::symlink(&elsewhere, parent.path().join("run-link")).unwrap();
        assert_eq!(sweep(parent.path(), SystemTime::now()), Swept::default());
        assert!(parent.path().join("run-link").exists() && elsewhere.join("local-0/logs/j1/0/attempt-1.log").exists());
    }

    #[test]
    fn a_run_whose_head_holds_its_lock_stays_however_old() {
        let parent = tempfile::tempdir().unwrap();
        let busy = run(parent.path(), "run-busy", Duration::from_secs(KEEP_RUN_HOURS * 3600 * 2), 1);
        let database = busy.join("head").join(crate::head::DATABASE);
        std::fs::create_dir_all(database.parent().unwrap()).unwrap();
        std::fs::write(&database, b"").unwrap();
        let held = crate::paths::lock_exclusive(&database).unwrap();
        let then = SystemTime::now() - Duration::from_secs(KEEP_RUN_HOURS * 3600 * 2);
        for p in [&database, &database.parent().unwrap().to_path_buf(), &busy] {
            std::fs::File::open(p).unwrap().set_modified(then).unwrap();
        }
        assert_eq!(sweep(parent.path(), SystemTime::now()).runs, 0);
        assert!(database.exists());
        drop(held);
        assert_eq!(sweep(parent.path(), SystemTime::now()).runs, 1);
        assert!(!busy.exists());
    }
}
