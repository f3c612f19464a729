//! Durable job records: one JSON file per job under `<state-dir>/jobs/`, written atomically
//! whenever the core says a job's durable state changed — before a submission is answered.

use crate::paths::write_atomic;
use ftdrive::spec::JobSpec;
use ftdrive::view::JobView;
use ftdrive::JobId;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What is kept of a job: its spec (enough to run it again) and its last view.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobRecord {
    pub spec: JobSpec,
    pub view: JobView,
}

pub struct Store {
    dir: PathBuf,
}

impl Store {
    pub fn open(state_dir: &Path) -> std::io::Result<Store> {
        let dir = state_dir.join("jobs");
        std::fs::create_dir_all(&dir)?;
        Ok(Store { dir })
    }

    pub fn save(&self, job: &JobId, record: &JobRecord) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(record).expect("records serialize");
        write_atomic(&self.dir.join(format!("{job}.json")), &text)
    }

    /// Every record on disk, by job id. Unreadable files are reported and skipped.
    pub fn load_all(&self) -> Vec<JobRecord> {
        let mut records = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return records };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths.into_iter().filter(|p| p.extension().is_some_and(|x| x == "json")) {
            match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            {
                Ok(record) => records.push(record),
                Err(e) => tracing::warn!("skipping job record {}: {e}", path.display()),
            }
        }
        records
    }
}
