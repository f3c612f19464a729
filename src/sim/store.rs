//! A durable store in memory: what a head's `Effect::Persist` writes — the same records the
//! runtime writes to SQLite, serialized and read back the same way — so that the simulator's
//! `head_restart` (and a test) rebuilds the head from exactly what it made durable.

use crate::driver::{Driver, LedgerEntry};
use crate::head::{Counters, Durable, DurableState, Head, NodeRecord, StoredJob};
use crate::ids::{JobId, NodeId};
use crate::scheduler::PgId;
use crate::spec::JobSpec;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
struct JobRow {
    pg: PgId,
    spec: JobSpec,
    /// The driver's state snapshot, as JSON text.
    driver: String,
    ledger: Vec<LedgerEntry>,
}

#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    counters: Counters,
    nodes: BTreeMap<NodeId, NodeRecord>,
    jobs: BTreeMap<JobId, JobRow>,
}

impl MemoryStore {
    /// Writes what `durable` names, as the head has it now.
    pub fn write(&mut self, head: &Head, durable: Durable) {
        match durable {
            Durable::Counters => self.counters = head.counters(),
            Durable::Node(name) => {
                let record = head.node_record(&name).expect("a persisted node is known");
                self.nodes.insert(name, record);
            }
            Durable::Forgotten { id, .. } => {
                self.jobs.remove(&id);
            }
            Durable::ForgottenNode(name) => {
                self.nodes.remove(&name);
            }
            Durable::Job(id) => {
                let record = head.job_record(&id).expect("a persisted job is known");
                let driver = serde_json::to_string(record.driver).expect("drivers serialize");
                let row = self.jobs.entry(id).or_insert_with(|| JobRow {
                    pg: record.pg,
                    spec: record.spec.clone(),
                    driver: String::new(),
                    ledger: Vec::new(),
                });
                row.driver = driver;
                let known = row.ledger.len();
                row.ledger.extend(record.ledger[known..].iter().cloned());
            }
        }
    }

    /// Everything written, read back.
    pub fn read(&self) -> DurableState {
        let jobs = self
            .jobs
            .values()
            .map(|row| StoredJob {
                pg: row.pg,
                spec: row.spec.clone(),
                driver: serde_json::from_str::<Driver>(&row.driver).expect("a stored driver reads back"),
                ledger: row.ledger.clone(),
            })
            .collect();
        DurableState { counters: self.counters, nodes: self.nodes.values().cloned().collect(), jobs }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HeadConfig;
    use crate::head::{Input, Reply};
    use crate::time::Instant;

    fn submit(head: &mut Head, store: &mut MemoryStore, now: Instant) -> JobId {
        let spec = Box::new(JobSpec::minimal("j", &["true"], 1, 1));
        let Ok(Reply::Submitted(id)) = head.handle(now, Input::Submit { id: None, spec }) else { panic!("accepted") };
        persist(head, store);
        id
    }

    fn persist(head: &mut Head, store: &mut MemoryStore) {
        while let Some(effect) = head.poll_effect() {
            if let crate::head::Effect::Persist(durable) = effect {
                store.write(head, durable);
            }
        }
    }

    /// DU-2: a submission writes no counters, yet no id comes back after a restart — neither
    /// while the jobs are stored nor once retention has forgotten them.
    #[test]
    fn ids_are_not_handed_out_again_after_a_restart() {
        let config = HeadConfig { retain_finished: 0, ..HeadConfig::default() };
        let (mut head, mut store, now) = (Head::new(config.clone()), MemoryStore::default(), Instant::from_ms(0));
        assert_eq!(submit(&mut head, &mut store, now).as_str(), "j1");
        let first = store.read().counters;
        assert_eq!(first.grace_bound_ms, config.node_timeout_ms, "a new head writes its grace bound once (DU-3)");
        let mut head = Head::restore(config.clone(), store.read(), now);
        assert_eq!(submit(&mut head, &mut store, now).as_str(), "j2");
        let written = store.read().counters;
        assert_eq!(submit(&mut head, &mut store, now).as_str(), "j3");
        assert_eq!(store.read().counters, written, "a submission writes its job alone");
        for job in ["j1", "j2", "j3"] {
            head.handle(now, Input::Stop { job: JobId::new(job) }).expect("stopped");
            persist(&mut head, &mut store);
        }
        assert_eq!(store.read().jobs.len(), 1, "the job that finished in the last input stays until the next");
        head.handle_timeout(now);
        persist(&mut head, &mut store);
        assert!(store.read().jobs.is_empty(), "retention forgot every finished job");
        let mut head = Head::restore(config, store.read(), now);
        assert_eq!(submit(&mut head, &mut store, now).as_str(), "j4");
    }
}
