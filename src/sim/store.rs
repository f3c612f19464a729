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
            Durable::Forgotten(id) => {
                self.jobs.remove(&id);
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
