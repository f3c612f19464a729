//! What the head writes down so that restarting it loses no work (DESIGN §10), and how a head
//! is rebuilt from it.
//!
//! - **DU-1 write-ahead.** Every input that changes what must survive ends with
//!   `Effect::Persist` for each job, node and counter it touched; a runtime makes those durable
//!   before it carries out any effect of the same input (a start sent to an agent, an answer to
//!   a client). So whatever an agent or a client has seen is on disk.
//! - **DU-2 exact re-adoption.** A job is stored as its driver's state (placements, live
//!   attempts with their ports and rendezvous, cycles, budgets, timers), its spec (once) and its
//!   ledger (an entry at a time). The counters of ids handed out are written only when a job
//!   is forgotten: while a job's record exists, `Head::restore` takes them from it — so a
//!   submission writes one record, and no id is ever handed out twice. `Head::restore` rebuilds drivers, placements — every port
//!   taken again before anything else is placed — and the attempts each node should be
//!   running, so that an attempt an agent reports is re-bound with its attempt number, cycle,
//!   node and port, and nothing restarts.
//! - **DU-3 a recovery window.** A restored head places nothing until every node it knew has
//!   registered again or `node_timeout_ms` has passed; a node silent by then is lost with its
//!   attempts (`node_lost`). The window is never shorter than the node timeout of the head
//!   that last welcomed the agents (`Counters::grace_bound_ms`): their supervisors keep an
//!   agent's attempts that long (SV-1), so a head restarted with a shorter timeout while an
//!   agent is down must not re-place what still runs there. A node's registration names the attempts it runs and those whose
//!   end it still owes; any other attempt the head saw start there is lost.

use super::{pg_spec, Head, JobSlot};
use crate::config::HeadConfig;
use crate::driver::{Bundle, Driver, LedgerEntry};
use crate::ids::{JobId, JobIdMint, NodeId};
use crate::protocol::AttemptKey;
use crate::resources::{Devices, Labels, Resources};
use crate::scheduler::{Need, NodeIx, NodeOffer, NodeState, PgId};
use crate::spec::JobSpec;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// What changed, for `Effect::Persist`: the runtime reads the record with `Head::job_record`,
/// `Head::node_record` or `Head::counters`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Durable {
    Job(JobId),
    Node(NodeId),
    /// Retention dropped a finished job: its records go.
    Forgotten {
        id: JobId,
        pg: PgId,
    },
    /// A DEAD node was forgotten (`forget.rs`): its record goes.
    ForgottenNode(NodeId),
    Counters,
}

/// Numbers never handed out twice, and the grace bound of DU-3.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub next_job_number: u64,
    pub next_pg: u64,
    /// The longest re-attach grace a supervisor may hold (agents cap theirs at the node
    /// timeout their head announced): the largest node timeout of the heads whose agents may
    /// not have heard a later one yet.
    #[serde(default)]
    pub grace_bound_ms: u64,
}

/// A node as the head knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub name: NodeId,
    pub resources: Resources,
    pub labels: Labels,
    #[serde(default)]
    pub devices: Devices,
    pub addr: String,
    /// The port space its ports come from (PS-1), empty for a pool of its own: a restored
    /// node draws from the same pool, so that its bundles keep their ports and no other gets
    /// them.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub port_space: String,
    pub incarnation: u64,
    pub state: NodeState,
    /// Its agent announced that the machine is going away (the drain is not the operator's).
    #[serde(default)]
    pub leaving: bool,
    /// The operator drained it; kept while it is DEAD, so that it comes back DRAINING.
    #[serde(default)]
    pub cordoned: bool,
    /// The ends its restarted agent owes, each dated when the run before was last heard
    /// (SL-1): an end reported to a head restarted meanwhile keeps its incident's date, so the
    /// attempts one crash ended are still one fault (swarm seed 7467259).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owed_since: Vec<(AttemptKey, Instant)>,
    /// The date the node's latest supervisors lost without a record were given (SL-1): the
    /// rest of that incident, reported to a head restarted meanwhile before the node is heard
    /// again, keep it, so one crash stays one fault (swarm seed 7851619).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_supervisors_at: Option<Instant>,
}

/// A job as the head keeps it: the parts a store writes apart.
pub struct JobRecord<'a> {
    pub id: &'a JobId,
    pub pg: PgId,
    pub spec: &'a JobSpec,
    /// The state snapshot (serializes without spec and ledger).
    pub driver: &'a Driver,
    pub ledger: &'a [LedgerEntry],
}

/// A stored job, read back.
#[derive(Clone, Debug)]
pub struct StoredJob {
    pub pg: PgId,
    pub spec: JobSpec,
    pub driver: Driver,
    pub ledger: Vec<LedgerEntry>,
}

/// Everything a head is rebuilt from.
#[derive(Clone, Debug, Default)]
pub struct DurableState {
    pub counters: Counters,
    pub nodes: Vec<NodeRecord>,
    pub jobs: Vec<StoredJob>,
}

/// DU-3: the nodes a restored head waits for before it places anything.
#[derive(Clone, Debug)]
pub(super) struct Recovery {
    pub until: Instant,
    pub waiting: BTreeSet<NodeIx>,
}

impl Head {
    /// A head rebuilt from what an earlier run of it wrote down (DU-2), in its recovery window.
    pub fn restore(config: HeadConfig, state: DurableState, now: Instant) -> Head {
        let mut head = Head::new(config);
        head.job_ids = JobIdMint::starting_at(state.counters.next_job_number);
        head.next_pg = state.counters.next_pg.max(1);
        // DU-3: the supervisors of an agent that is down still hold the grace it was given.
        head.grace_bound_ms = head.grace_bound_ms.max(state.counters.grace_bound_ms);
        let window_ms = head.grace_bound_ms;
        let mut waiting = BTreeSet::new();
        let mut nodes = state.nodes;
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        for record in nodes {
            waiting.extend(head.restore_node(now, record, window_ms));
        }
        // AT-2: a loss that could excuse a pending failure is known once the window closes.
        let recovery_until = (!waiting.is_empty()).then(|| now.plus_ms(window_ms));
        let mut jobs = state.jobs;
        jobs.sort_by_key(|j| j.pg);
        for job in jobs {
            head.restore_job(job, recovery_until);
        }
        head.scheduler.settle_port_shares();
        // Placements restored, every port taken again: what the scheduler noticed meanwhile
        // (feasibility it already reported) is old news.
        while head.scheduler.poll_event().is_some() {}
        head.recovery = (!waiting.is_empty()).then(|| Recovery { until: now.plus_ms(window_ms), waiting });
        head
    }

    /// Returns the node if the head must wait for it to register.
    fn restore_node(&mut self, now: Instant, record: NodeRecord, window_ms: u64) -> Option<NodeIx> {
        let offer = NodeOffer {
            resources: record.resources,
            labels: record.labels,
            devices: Some(record.devices),
            port_space: record.port_space,
        };
        let ix = self.scheduler.add_node(record.name.clone(), offer);
        self.liveness.register(ix, record.addr, record.incarnation, now, window_ms);
        let restored = self.liveness.get_mut(ix).expect("just registered");
        (restored.leaving, restored.cordoned) = (record.leaving, record.cordoned);
        restored.owed_since = record.owed_since.into_iter().collect();
        restored.lost_supervisors = record.lost_supervisors_at.map(|at| (at, now));
        restored.unheard_since_restore = true;
        match record.state {
            NodeState::Alive => Some(ix),
            NodeState::Draining => {
                self.scheduler.drain_node(ix);
                Some(ix)
            }
            NodeState::Dead => {
                self.scheduler.kill_node(ix);
                self.liveness.mark_dead(ix);
                // Restored in name order at one instant: retention takes them in that order.
                self.note_dead(now, ix);
                None
            }
        }
    }

    fn restore_job(&mut self, stored: StoredJob, recovery_until: Option<Instant>) {
        let StoredJob { pg, spec, driver, ledger } = stored;
        let mut driver = Driver::restore(driver, spec, ledger);
        driver.take_head_settings(&self.config);
        if let Some(until) = recovery_until {
            driver.hold_attribution_until(until);
        }
        let id = driver.id().clone();
        self.job_ids.note(&id);
        self.next_pg = self.next_pg.max(pg + 1);
        if !driver.state().is_terminal() {
            self.scheduler.restore_pg(pg, pg_spec(driver.spec(), driver.submitted()), driver.admitted());
            self.restore_bundles(pg, &driver);
            self.restore_attempts(&driver);
        } else if let Some(at) = driver.finished_at() {
            self.finished.insert((at, pg));
        }
        self.actors_held += driver.spec().actor_count() as usize;
        self.jobs.insert(id.clone(), JobSlot { pg, driver });
        self.by_pg.insert(pg, id);
        self.flush_driver(pg);
    }

    /// DU-2: placements with their ports, then what the job still waits for.
    fn restore_bundles(&mut self, pg: PgId, driver: &Driver) {
        if driver.avoiding_preemptible() {
            self.scheduler.avoid_preemptible(pg);
        }
        let mut gang_requested = false;
        for (bundle, actor) in driver.actors().iter().enumerate() {
            let bundle = bundle as u32;
            match &actor.bundle {
                Bundle::Placed { node, port, devices, .. } => {
                    let ix = self.scheduler.node_ix(&node.name).expect("a placement's node is known");
                    self.scheduler.restore_placed(pg, bundle, ix, *port, *devices);
                }
                Bundle::Requested { need: Need::Admission } if !gang_requested => {
                    self.scheduler.request_gang(pg);
                    gang_requested = true;
                }
                Bundle::Requested { need: Need::Admission } | Bundle::None => {}
                Bundle::Requested { need } => self.scheduler.request(pg, bundle, *need),
            }
        }
    }

    /// The attempts each node should run, as they were: unconfirmed starts are sent again,
    /// stops repeated.
    fn restore_attempts(&mut self, driver: &Driver) {
        for (ix, actor) in driver.actors().iter().enumerate() {
            let Some(run) = actor.run.as_ref().filter(|r| r.exited.is_none()) else { continue };
            let node = self.scheduler.node_ix(&run.node).expect("an attempt's node is known");
            let spec = driver.start_spec(ix as u32).expect("a live run has a start");
            let key = spec.key.clone();
            self.attempts.restored(node, spec);
            if run.acked {
                self.attempts.acked(node, &key);
            }
            if run.stop.is_some() {
                self.attempts.stopping(node, &key, run.stop_grace_ms);
            }
        }
    }

    /// Is the head still waiting for nodes to report after a restart?
    pub fn recovering(&self) -> bool {
        self.recovery.is_some()
    }

    /// A node registered: if the head was waiting for it, it has reported.
    pub(super) fn reported(&mut self, ix: NodeIx) -> bool {
        let Some(recovery) = self.recovery.as_mut() else { return false };
        let was_waiting = recovery.waiting.remove(&ix);
        if recovery.waiting.is_empty() {
            self.end_recovery();
        }
        was_waiting
    }

    /// The window closed: nodes that did not report were declared dead by now.
    pub(super) fn end_recovery_at(&mut self, now: Instant) {
        if self.recovery.as_ref().is_some_and(|r| r.until <= now) {
            self.end_recovery();
        }
    }

    /// Every agent has been welcomed by this head (and its supervisors follow its node
    /// timeout), or its supervisors' grace is over: the bound is this head's own again.
    fn end_recovery(&mut self) {
        self.recovery = None;
        if self.grace_bound_ms != self.config.node_timeout_ms {
            self.grace_bound_ms = self.config.node_timeout_ms;
            self.touch_counters();
        }
    }

    // ---- what to write -------------------------------------------------------------------

    pub(super) fn touch_job(&mut self, pg: PgId) {
        self.dirty.insert(DirtyKey::Job(pg));
    }

    pub(super) fn touch_node(&mut self, ix: NodeIx) {
        self.dirty.insert(DirtyKey::Node(ix));
    }

    pub(super) fn touch_counters(&mut self) {
        self.dirty.insert(DirtyKey::Counters);
    }

    /// DU-1: one `Persist` per thing the input changed, after its other effects.
    pub(super) fn emit_persists(&mut self) {
        if self.dirty.is_empty() {
            return; // most inputs (heartbeats) change nothing durable
        }
        for key in std::mem::take(&mut self.dirty) {
            let durable = match key {
                DirtyKey::Counters => Durable::Counters,
                DirtyKey::Node(ix) => Durable::Node(self.scheduler.node(ix).name.clone()),
                DirtyKey::Job(pg) => match self.by_pg.get(&pg) {
                    Some(id) => Durable::Job(id.clone()),
                    None => continue,
                },
                DirtyKey::Forgotten(pg, id) => Durable::Forgotten { id, pg },
                DirtyKey::ForgottenNode(name) => Durable::ForgottenNode(name),
            };
            self.effects.push_back(super::Effect::Persist(durable));
        }
    }

    pub fn counters(&self) -> Counters {
        Counters {
            next_job_number: self.job_ids.next_number(),
            next_pg: self.next_pg,
            grace_bound_ms: self.grace_bound_ms,
        }
    }

    pub fn node_record(&self, name: &NodeId) -> Option<NodeRecord> {
        let ix = self.scheduler.node_ix(name)?;
        let node = self.scheduler.node(ix);
        let record = self.liveness.get(ix)?;
        Some(NodeRecord {
            name: node.name.clone(),
            resources: node.resources.clone(),
            labels: node.labels.clone(),
            devices: node.devices,
            addr: record.addr.clone(),
            port_space: node.port_space().to_string(),
            incarnation: record.incarnation,
            state: node.state,
            leaving: record.leaving,
            cordoned: record.cordoned,
            owed_since: record.owed_since.iter().map(|(key, at)| (key.clone(), *at)).collect(),
            lost_supervisors_at: record.lost_supervisors.map(|(at, _)| at),
        })
    }

    pub fn job_record(&self, id: &JobId) -> Option<JobRecord<'_>> {
        let slot = self.jobs.get(id)?;
        let driver = &slot.driver;
        Some(JobRecord { id: driver.id(), pg: slot.pg, spec: driver.spec(), driver, ledger: driver.ledger() })
    }

    // ---- retention -----------------------------------------------------------------------

    /// A job reached its final state; `trim_finished` applies the count once the input is done
    /// with its driver.
    pub(super) fn note_finished(&mut self, pg: PgId, at: Instant) {
        self.finished.insert((at, pg));
        self.finished_now.push(pg);
    }

    /// Keeps at most `retain_finished` finished jobs (none with 0), besides those that finished
    /// in this input: they stay until the next one, so that the runtime still finds each while
    /// it carries out this input's effects (its followers' final snapshot is its view).
    pub(super) fn trim_finished(&mut self) {
        let fresh = std::mem::take(&mut self.finished_now);
        while self.finished.len() > self.config.retain_finished + fresh.len() {
            let &(at, oldest) = self.finished.iter().find(|(_, pg)| !fresh.contains(pg)).expect("more than the fresh");
            self.finished.remove(&(at, oldest));
            self.forget(oldest);
        }
    }

    /// Drops finished jobs older than `retain_finished_ms`.
    pub(super) fn expire_finished(&mut self, now: Instant) {
        while let Some(&(at, pg)) = self.finished.first() {
            if now.ms_since(at) < self.config.retain_finished_ms {
                break;
            }
            self.finished.pop_first();
            self.forget(pg);
        }
    }

    pub(super) fn next_expiry(&self) -> Option<Instant> {
        self.finished.first().map(|(at, _)| at.plus_ms(self.config.retain_finished_ms))
    }

    fn forget(&mut self, pg: PgId) {
        let Some(id) = self.by_pg.remove(&pg) else { return };
        self.attributing.remove(&pg);
        if let Some(slot) = self.jobs.remove(&id) {
            self.actors_held -= slot.driver.spec().actor_count() as usize;
        }
        self.dirty.remove(&DirtyKey::Job(pg));
        self.dirty.insert(DirtyKey::Forgotten(pg, id));
        // DU-2: the counters were read from this job's record; once it is gone they are kept.
        self.touch_counters();
    }
}

/// Something an input changed that must be written.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum DirtyKey {
    Counters,
    Node(NodeIx),
    Job(PgId),
    Forgotten(PgId, JobId),
    ForgottenNode(NodeId),
}
