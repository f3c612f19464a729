//! The head state machine: the cluster's membership and failure detection, the scheduler,
//! and one driver per job, composed behind one shape — `handle(now, input)`,
//! `handle_timeout(now)`, `poll_effect()`, `poll_timeout()`. The daemon and the simulator
//! feed it inputs and carry out its effects; neither holds any policy of its own.
//!
//! ```text
//!   Input ──► membership / liveness ──┐
//!         ──► drivers ◄───────────────┤  BundleLost, Draining, Exited, ...
//!                │ DriverEffect        │
//!                ▼                     │
//!            scheduler ── Placed ──────┘  (repeat until nothing changes: "settle")
//!                │
//!                ▼
//!   Effect: Send (to an agent) · Notify (events) · Persist (a job's durable state changed)
//! ```

mod attempts;
mod liveness;

use crate::config::HeadConfig;
use crate::driver::{BundlePlaced, Driver, DriverEffect, DriverInput, JobEvent, JobHistory, Loss, NodeRef};
use crate::ids::{actor_name, JobId, NodeId};
use crate::protocol::{AttemptKey, ExitStatus, ToAgent};
use crate::resources::{Labels, Resources};
use crate::scheduler::{
    BundleState, NodeIx, NodeState, PgId, PgSpec, PolicyFault, QueueClass, SchedEvent, Scheduler, SchedulerConfig,
};
use crate::spec::JobSpec;
use crate::time::{earliest, Instant};
use crate::view::{ActorView, BundleStatus, BundleView, JobView, NodeView, PgView};
use attempts::AttemptIndex;
use liveness::Liveness;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Most rounds of driver ⇄ scheduler exchange one input may cause; more is a bug (a loop).
const MAX_SETTLE_ROUNDS: usize = 10_000;
const MAX_NAME_LEN: usize = 253;

/// Everything that can happen to the head.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Input {
    /// An agent (re)connects. A new `incarnation` for a known node means its agent restarted.
    Register {
        node: NodeId,
        incarnation: u64,
        resources: Resources,
        labels: Labels,
        addr: String,
    },
    /// `running`: the attempts the agent has processes for.
    Heartbeat {
        node: NodeId,
        incarnation: u64,
        seq: u64,
        running: Vec<AttemptKey>,
    },
    ProcessStarted {
        node: NodeId,
        key: AttemptKey,
    },
    ProcessExited {
        node: NodeId,
        key: AttemptKey,
        status: ExitStatus,
    },
    SpawnFailed {
        node: NodeId,
        key: AttemptKey,
        message: String,
    },
    /// A preemption notice: the node goes away within `deadline_ms`.
    Drain {
        node: NodeId,
        deadline_ms: u64,
    },
    /// A job submission; `id` is chosen by the head when absent.
    Submit {
        id: Option<JobId>,
        spec: Box<JobSpec>,
    },
    /// A job accepted by an earlier run of the head, taken up again with its history.
    Resume {
        id: JobId,
        spec: Box<JobSpec>,
        history: Box<JobHistory>,
    },
    Stop {
        job: JobId,
    },
}

/// What an accepted input answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Done,
    Submitted(JobId),
}

/// An input the head refused. A refused input changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    #[error("node `{0}` is not registered (or was declared dead); its agent must register again")]
    UnknownNode(NodeId),
    #[error("node `{0}` sent a message from an older agent run; only its newest registration counts")]
    StaleIncarnation(NodeId),
    #[error("no job `{0}`; `ftdrive status` lists the jobs")]
    UnknownJob(JobId),
    #[error("a job with id `{0}` exists already; choose another id")]
    DuplicateJob(JobId),
    #[error("`{0}` is not a valid name; use 1 to 253 letters, digits, `-`, `_` or `.`")]
    BadName(String),
    #[error("the head holds {0} jobs, its limit (`max_jobs`); remove finished jobs or raise the limit")]
    TooManyJobs(usize),
    #[error("the cluster has {0} nodes, the head's limit (`max_nodes`)")]
    TooManyNodes(usize),
}

/// What the head asks its runtime to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Deliver a message to a node's agent.
    Send { node: NodeId, msg: ToAgent },
    /// Tell followers (and the trace) what happened.
    Notify(Event),
    /// This job's durable state changed; write `Head::job_record` out.
    Persist { job: JobId },
}

/// Events for followers and traces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    JobSubmitted { job: JobId, name: String },
    Job { job: JobId, detail: JobEvent },
    Placed { job: JobId, actor: String, node: NodeId, class: QueueClass },
    Released { job: JobId, actor: String, node: NodeId },
    NodeState { node: NodeId, state: NodeState, evidence: String },
}

/// A bundle waiting for re-placement, as the simulator's checkers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitingBundle {
    pub job: JobId,
    pub actor: u32,
    pub avoid_preemptible: bool,
}

struct JobSlot {
    seq: PgId,
    driver: Driver,
}

/// The head-node state machine.
pub struct Head {
    config: HeadConfig,
    scheduler: Scheduler,
    jobs: BTreeMap<JobId, JobSlot>,
    by_seq: BTreeMap<PgId, JobId>,
    next_seq: PgId,
    liveness: Liveness,
    attempts: AttemptIndex,
    /// Driver timers: (deadline, job seq), and each job's current entry.
    timers: BTreeSet<(Instant, PgId)>,
    timer_of: BTreeMap<PgId, Instant>,
    effects: VecDeque<Effect>,
}

impl Head {
    pub fn new(config: HeadConfig) -> Self {
        config.validate().unwrap_or_else(|e| panic!("invalid head config: {e}"));
        let scheduler = Scheduler::new(SchedulerConfig {
            starvation_ms: config.starvation_ms,
            master_port_base: config.master_port_base,
            ports_per_node: config.ports_per_node,
        });
        Head {
            config,
            scheduler,
            jobs: BTreeMap::new(),
            by_seq: BTreeMap::new(),
            next_seq: 1,
            liveness: Liveness::default(),
            attempts: AttemptIndex::default(),
            timers: BTreeSet::new(),
            timer_of: BTreeMap::new(),
            effects: VecDeque::new(),
        }
    }

    pub fn config(&self) -> &HeadConfig {
        &self.config
    }

    /// Test-only switch: run a deliberately wrong scheduling policy.
    pub fn inject_policy_fault(&mut self, fault: PolicyFault) {
        self.scheduler.inject_policy_fault(fault);
    }

    // ---- the state-machine shape ---------------------------------------------------------

    pub fn handle(&mut self, now: Instant, input: Input) -> Result<Reply, Rejected> {
        let reply = match input {
            Input::Register { node, incarnation, resources, labels, addr } => {
                self.register(now, node, incarnation, resources, labels, addr)?
            }
            Input::Heartbeat { node, incarnation, seq, running } => {
                self.heartbeat(now, node, incarnation, seq, &running)?
            }
            Input::ProcessStarted { node, key } => self.process_started(now, node, key)?,
            Input::ProcessExited { node, key, status } => {
                self.process_ended(now, node, key, |key| DriverInput::Exited { key, status })?
            }
            Input::SpawnFailed { node, key, message } => {
                self.process_ended(now, node, key, |key| DriverInput::SpawnFailed { key, message })?
            }
            Input::Drain { node, deadline_ms } => self.drain(now, node, deadline_ms)?,
            Input::Submit { id, spec } => self.submit(now, id, *spec, None)?,
            Input::Resume { id, spec, history } => self.submit(now, Some(id), *spec, Some(*history))?,
            Input::Stop { job } => self.stop(now, job)?,
        };
        self.settle(now);
        Ok(reply)
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        for ix in self.liveness.pop_expired(now) {
            let heard = self.liveness.get(ix).expect("expired node has a record").last_heard;
            let name = self.scheduler.node(ix).name.clone();
            self.lose_node(now, ix, format!("node {name} missed heartbeats for {} ms", now.ms_since(heard)));
        }
        let due: Vec<(Instant, PgId)> = self.timers.range(..=(now, PgId::MAX)).copied().collect();
        for (at, seq) in due {
            self.timers.remove(&(at, seq));
            self.timer_of.remove(&seq);
            self.driver_mut(seq).handle_timeout(now);
            self.drain_driver(seq);
        }
        self.settle(now);
    }

    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        earliest(self.liveness.next_expiry(), self.timers.first().map(|(t, _)| *t))
    }

    // ---- membership ------------------------------------------------------------------------

    fn register(
        &mut self,
        now: Instant,
        node: NodeId,
        incarnation: u64,
        resources: Resources,
        labels: Labels,
        addr: String,
    ) -> Result<Reply, Rejected> {
        check_name(node.as_str())?;
        let known = self.scheduler.node_ix(&node);
        if known.is_none() && self.scheduler.node_count() >= self.config.max_nodes {
            return Err(Rejected::TooManyNodes(self.scheduler.node_count()));
        }
        if let Some(ix) = known {
            let record = self.liveness.get(ix).expect("known node has a record");
            if record.alive && record.incarnation == incarnation {
                // The same agent reconnecting: nothing was lost.
                self.liveness.get_mut(ix).expect("record").addr = addr;
                self.liveness.heard(ix, now, self.config.node_timeout_ms);
                return Ok(Reply::Done);
            }
            if record.alive {
                self.lose_node(now, ix, format!("the agent on {node} restarted; its processes were lost"));
            }
        }
        let ix = self.scheduler.add_node(node.clone(), resources, labels);
        self.liveness.register(ix, addr, incarnation, now, self.config.node_timeout_ms);
        self.notify(Event::NodeState { node, state: NodeState::Alive, evidence: "registered".into() });
        Ok(Reply::Done)
    }

    fn heartbeat(
        &mut self,
        now: Instant,
        node: NodeId,
        incarnation: u64,
        seq: u64,
        running: &[AttemptKey],
    ) -> Result<Reply, Rejected> {
        let ix = self.alive_node(&node, incarnation)?;
        let record = self.liveness.get_mut(ix).expect("alive node has a record");
        if seq <= record.last_seq {
            return Ok(Reply::Done); // duplicated or overtaken by a newer heartbeat
        }
        record.last_seq = seq;
        self.liveness.heard(ix, now, self.config.node_timeout_ms);
        let grace = |key: &AttemptKey| self.jobs.get(&key.job).map_or(10_000, |j| j.driver.spec().stop_grace_ms);
        for msg in self.attempts.reconcile(ix, running, &grace) {
            self.effects.push_back(Effect::Send { node: node.clone(), msg });
        }
        Ok(Reply::Done)
    }

    /// The node's index if it is registered, alive, and this is its current agent.
    fn alive_node(&self, node: &NodeId, incarnation: u64) -> Result<NodeIx, Rejected> {
        let ix = self.scheduler.node_ix(node).ok_or_else(|| Rejected::UnknownNode(node.clone()))?;
        let record = self.liveness.get(ix).expect("known node has a record");
        if !record.alive {
            return Err(Rejected::UnknownNode(node.clone()));
        }
        if record.incarnation != incarnation {
            return Err(Rejected::StaleIncarnation(node.clone()));
        }
        Ok(ix)
    }

    fn drain(&mut self, now: Instant, node: NodeId, deadline_ms: u64) -> Result<Reply, Rejected> {
        let ix = self.scheduler.node_ix(&node).ok_or_else(|| Rejected::UnknownNode(node.clone()))?;
        if self.scheduler.node(ix).state != NodeState::Alive {
            return match self.scheduler.node(ix).state {
                NodeState::Draining => Ok(Reply::Done),
                _ => Err(Rejected::UnknownNode(node)),
            };
        }
        let deadline = now.plus_ms(deadline_ms);
        self.scheduler.drain_node(ix);
        let evidence = format!("preemption notice, deadline in {deadline_ms} ms");
        self.notify(Event::NodeState { node, state: NodeState::Draining, evidence });
        let bundles: Vec<(PgId, u32)> = self.scheduler.node(ix).bundles.iter().copied().collect();
        for (seq, actor) in bundles {
            self.feed(now, seq, DriverInput::Draining { actor, deadline });
        }
        Ok(Reply::Done)
    }

    /// Marks a node DEAD and tells every driver that had a bundle there.
    fn lose_node(&mut self, now: Instant, ix: NodeIx, evidence: String) {
        let silent_since = self.liveness.get(ix).map_or(now, |r| r.last_heard);
        let node = self.scheduler.node(ix);
        let (name, preemptible, draining) = (node.name.clone(), node.preemptible, node.state == NodeState::Draining);
        let evidence = match (preemptible, draining) {
            (_, true) => format!("{evidence} (it was draining after a preemption notice)"),
            (true, false) => format!("{evidence} (it is labelled preemptible=true)"),
            (false, false) => evidence,
        };
        self.liveness.mark_dead(ix);
        self.attempts.node_lost(ix);
        let lost = self.scheduler.kill_node(ix);
        self.notify(Event::NodeState { node: name.clone(), state: NodeState::Dead, evidence: evidence.clone() });
        let mut by_job: BTreeMap<PgId, Vec<u32>> = BTreeMap::new();
        for (seq, actor) in lost {
            by_job.entry(seq).or_default().push(actor);
        }
        for (seq, actors) in by_job {
            let loss = Loss { node: name.clone(), preemptible, draining, silent_since, evidence: evidence.clone() };
            self.feed(now, seq, DriverInput::BundlesLost { actors, loss });
        }
    }

    // ---- processes -------------------------------------------------------------------------

    fn process_started(&mut self, now: Instant, node: NodeId, key: AttemptKey) -> Result<Reply, Rejected> {
        let ix = self.scheduler.node_ix(&node).ok_or_else(|| Rejected::UnknownNode(node.clone()))?;
        self.attempts.acked(ix, &key);
        if let Some(seq) = self.jobs.get(&key.job).map(|j| j.seq) {
            self.feed(now, seq, DriverInput::Started { key });
        }
        Ok(Reply::Done)
    }

    /// An exit or spawn failure: acknowledged to the agent whatever it is (so it stops
    /// resending), and handed to the job's driver, which ignores it if stale.
    fn process_ended(
        &mut self,
        now: Instant,
        node: NodeId,
        key: AttemptKey,
        input: impl FnOnce(AttemptKey) -> DriverInput,
    ) -> Result<Reply, Rejected> {
        let ix = self.scheduler.node_ix(&node).ok_or_else(|| Rejected::UnknownNode(node.clone()))?;
        self.effects.push_back(Effect::Send { node, msg: ToAgent::AckExit { key: key.clone() } });
        self.attempts.ended(ix, &key);
        if let Some(seq) = self.jobs.get(&key.job).map(|j| j.seq) {
            self.feed(now, seq, input(key));
        }
        Ok(Reply::Done)
    }

    // ---- jobs --------------------------------------------------------------------------------

    fn submit(
        &mut self,
        now: Instant,
        id: Option<JobId>,
        spec: JobSpec,
        history: Option<JobHistory>,
    ) -> Result<Reply, Rejected> {
        if self.jobs.len() >= self.config.max_jobs {
            return Err(Rejected::TooManyJobs(self.jobs.len()));
        }
        let id = match id {
            Some(id) => {
                check_name(id.as_str())?;
                if self.jobs.contains_key(&id) {
                    return Err(Rejected::DuplicateJob(id));
                }
                id
            }
            None => self.fresh_job_id(),
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.scheduler.create_pg(seq, pg_spec(&spec, now));
        let seed = self.config.seed ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let name = spec.name.clone();
        let window = self.config.node_timeout_ms;
        let driver = match history {
            Some(history) => Driver::resume(id.clone(), spec, now, seed, window, history),
            None => Driver::new(id.clone(), spec, now, seed, window),
        };
        self.jobs.insert(id.clone(), JobSlot { seq, driver });
        self.by_seq.insert(seq, id.clone());
        self.drain_driver(seq);
        self.notify(Event::JobSubmitted { job: id.clone(), name });
        self.effects.push_back(Effect::Persist { job: id.clone() });
        Ok(Reply::Submitted(id))
    }

    fn fresh_job_id(&self) -> JobId {
        (self.next_seq..)
            .map(|n| JobId::new(&format!("j{n}")))
            .find(|id| !self.jobs.contains_key(id))
            .expect("some id is free")
    }

    fn stop(&mut self, now: Instant, job: JobId) -> Result<Reply, Rejected> {
        let seq = self.jobs.get(&job).map(|j| j.seq).ok_or(Rejected::UnknownJob(job))?;
        self.feed(now, seq, DriverInput::Stop);
        Ok(Reply::Done)
    }

    // ---- settle: drivers ⇄ scheduler ---------------------------------------------------------

    /// Runs scheduling passes, handing placements to drivers, until nothing changes.
    fn settle(&mut self, now: Instant) {
        for _ in 0..MAX_SETTLE_ROUNDS {
            self.route_scheduler_events(now);
            if !self.scheduler.is_dirty() {
                return;
            }
            self.scheduler.schedule(now);
        }
        panic!("head did not settle after {MAX_SETTLE_ROUNDS} rounds");
    }

    /// One input to one driver, its effects applied at once: the scheduler and the driver
    /// never disagree between two inputs.
    fn feed(&mut self, now: Instant, seq: PgId, input: DriverInput) {
        self.driver_mut(seq).handle(now, input);
        self.drain_driver(seq);
    }

    fn drain_driver(&mut self, seq: PgId) {
        while let Some(effect) = self.driver_mut(seq).poll_effect() {
            self.apply(seq, effect);
        }
        let wanted = self.jobs[&self.by_seq[&seq]].driver.poll_timeout();
        if let Some(old) = self.timer_of.remove(&seq) {
            self.timers.remove(&(old, seq));
        }
        if let Some(at) = wanted {
            self.timers.insert((at, seq));
            self.timer_of.insert(seq, at);
        }
    }

    fn apply(&mut self, seq: PgId, effect: DriverEffect) {
        let job = self.by_seq[&seq].clone();
        match effect {
            DriverEffect::RequestGang => self.scheduler.request_gang(seq),
            DriverEffect::Request { actor, class, since } => self.scheduler.request(seq, actor, class, since),
            DriverEffect::Cancel { actor } => self.scheduler.cancel(seq, actor),
            DriverEffect::Release { actor } => {
                let node = self.bundle_node(seq, actor);
                self.scheduler.release(seq, actor);
                self.notify(Event::Released { actor: actor_name(&job, actor), job, node });
            }
            DriverEffect::AvoidPreemptible => self.scheduler.avoid_preemptible(seq),
            DriverEffect::Start { node, spec } => {
                let ix = self.scheduler.node_ix(&node).expect("starting on a known node");
                self.attempts.started(ix, spec.clone());
                self.effects.push_back(Effect::Send { node, msg: ToAgent::Start(spec) });
            }
            DriverEffect::Stop { node, key, grace_ms } => {
                let ix = self.scheduler.node_ix(&node).expect("stopping on a known node");
                self.attempts.stopping(ix, &key, grace_ms);
                self.effects.push_back(Effect::Send { node, msg: ToAgent::Stop { key, grace_ms } });
            }
            DriverEffect::AttemptEnded { node, key } => {
                let ix = self.scheduler.node_ix(&node).expect("attempt on a known node");
                self.attempts.ended(ix, &key);
            }
            DriverEffect::Event(detail) => {
                let durable = matches!(
                    detail,
                    JobEvent::Ledger { .. } | JobEvent::JobState { .. } | JobEvent::CycleFormed { .. }
                );
                self.notify(Event::Job { job: job.clone(), detail });
                if durable {
                    self.effects.push_back(Effect::Persist { job });
                }
            }
            DriverEffect::Finished => {
                self.scheduler.remove_pg(seq);
                self.effects.push_back(Effect::Persist { job });
            }
        }
    }

    /// Hands the pass's placements to their drivers, one batch per job.
    fn route_scheduler_events(&mut self, now: Instant) {
        let mut batches: BTreeMap<PgId, Vec<BundlePlaced>> = BTreeMap::new();
        while let Some(event) = self.scheduler.poll_event() {
            match event {
                SchedEvent::Placed(p) => {
                    let node = self.node_ref(p.pg, p.node);
                    let job = self.by_seq[&p.pg].clone();
                    let actor = actor_name(&job, p.bundle);
                    self.notify(Event::Placed { actor, job, node: node.name.clone(), class: p.class });
                    batches.entry(p.pg).or_default().push(BundlePlaced { actor: p.bundle, node, port: p.port });
                }
                SchedEvent::Feasibility { pg, infeasible } => self.feed(now, pg, DriverInput::Feasibility(infeasible)),
            }
        }
        for (seq, batch) in batches {
            self.feed(now, seq, DriverInput::Placed(batch));
        }
    }

    fn node_ref(&self, seq: PgId, ix: NodeIx) -> NodeRef {
        let node = self.scheduler.node(ix);
        let pack_by = self.scheduler.pg(seq).and_then(|pg| pg.pack_by.as_ref());
        NodeRef {
            name: node.name.clone(),
            addr: self.liveness.get(ix).map_or_else(|| node.name.to_string(), |r| r.addr.clone()),
            preemptible: node.preemptible,
            domain: pack_by.and_then(|key| node.labels.get(key).cloned()),
        }
    }

    fn bundle_node(&self, seq: PgId, bundle: u32) -> NodeId {
        match self.scheduler.pg(seq).map(|pg| pg.bundles[bundle as usize]) {
            Some(BundleState::Placed { node, .. }) => self.scheduler.node(node).name.clone(),
            other => panic!("bundle {bundle} of job seq {seq} is {other:?}, not placed"),
        }
    }

    fn driver_mut(&mut self, seq: PgId) -> &mut Driver {
        let id = &self.by_seq[&seq];
        &mut self.jobs.get_mut(id).expect("job of a known seq").driver
    }

    fn notify(&mut self, event: Event) {
        self.effects.push_back(Effect::Notify(event));
    }

    // ---- read access -----------------------------------------------------------------------

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    pub fn driver(&self, job: &JobId) -> Option<&Driver> {
        self.jobs.get(job).map(|j| &j.driver)
    }

    /// Every job's driver, in submission order.
    pub fn drivers(&self) -> impl Iterator<Item = &Driver> {
        self.by_seq.values().map(|id| &self.jobs[id].driver)
    }

    /// The durable record of a job, for `Effect::Persist`.
    pub fn job_record(&self, job: &JobId) -> Option<serde_json::Value> {
        self.driver(job).map(|d| serde_json::to_value(d).expect("driver serializes"))
    }

    pub fn job_view(&self, job: &JobId) -> Option<JobView> {
        let slot = self.jobs.get(job)?;
        Some(self.view_of(slot))
    }

    /// Every job, in submission order.
    pub fn job_views(&self) -> Vec<JobView> {
        self.by_seq.values().map(|id| self.view_of(&self.jobs[id])).collect()
    }

    fn view_of(&self, slot: &JobSlot) -> JobView {
        let d = &slot.driver;
        let actors = d
            .actors()
            .iter()
            .map(|a| ActorView {
                name: a.name.clone(),
                state: a.state,
                node: a
                    .bundle
                    .node()
                    .map(|n| n.name.to_string())
                    .or_else(|| a.run.as_ref().map(|r| r.node.to_string()))
                    .or_else(|| d.ledger().iter().rev().find(|e| e.actor == a.name).map(|e| e.node.clone())),
                rank: a.rank,
                attempt: a.attempts,
                role: a.role,
            })
            .collect();
        JobView {
            id: d.id().to_string(),
            name: d.spec().name.clone(),
            state: d.state(),
            cycles: d.cycle(),
            min_nodes: d.spec().min_nodes,
            max_nodes: d.spec().max_nodes,
            submit_ms: d.submitted().as_ms(),
            message: d.message().map(str::to_string),
            infeasible: d.infeasible().map(str::to_string),
            remaining: d.remaining(),
            actors,
            ledger: d.ledger().to_vec(),
            placement_groups: vec![self.pg_view(slot)],
        }
    }

    fn pg_view(&self, slot: &JobSlot) -> PgView {
        let spec = slot.driver.spec();
        let pg = self.scheduler.pg(slot.seq);
        let count = spec.actor_count();
        let bundles = (0..count)
            .map(|index| {
                let (status, node) = match pg.map(|pg| (pg.bundles[index as usize], pg.lost.contains(&index))) {
                    Some((BundleState::Placed { node, .. }, _)) => {
                        (BundleStatus::Placed, Some(self.scheduler.node(node).name.to_string()))
                    }
                    Some((_, true)) => (BundleStatus::Lost, None),
                    Some((BundleState::Idle, false)) | None => (BundleStatus::Idle, None),
                    Some(_) => (BundleStatus::Pending, None),
                };
                BundleView { index, status, node }
            })
            .collect();
        PgView {
            id: format!("{}/pg", slot.driver.id()),
            state: pg.map_or(crate::scheduler::PgState::Removed, |pg| pg.state()),
            strategy: spec.strategy,
            bundle: spec.bundle.clone(),
            bundles,
        }
    }

    /// Bundles waiting in the replacement class, in queue order.
    pub fn waiting_replacements(&self) -> Vec<WaitingBundle> {
        self.scheduler
            .queue()
            .take_while(|k| k.class == QueueClass::Replacement)
            .map(|k| WaitingBundle {
                job: self.by_seq[&k.pg].clone(),
                actor: k.bundle,
                avoid_preemptible: self.scheduler.pg(k.pg).is_some_and(|pg| pg.avoid_preemptible),
            })
            .collect()
    }

    /// Does the scheduler still hold or queue anything for this job?
    pub fn holds_anything(&self, job: &JobId) -> bool {
        self.jobs.get(job).is_some_and(|slot| self.scheduler.pg(slot.seq).is_some())
    }

    /// Every node ever seen, by name.
    pub fn node_views(&self) -> Vec<NodeView> {
        self.scheduler
            .nodes()
            .map(|(ix, node)| NodeView {
                name: node.name.to_string(),
                state: node.state,
                resources: node.resources.clone(),
                labels: node.labels.clone(),
                allocated: self.scheduler.allocated(ix),
                addr: self.liveness.get(ix).map_or_else(String::new, |r| r.addr.clone()),
            })
            .collect()
    }

    // ---- checks ------------------------------------------------------------------------------

    /// Asserts that drivers and scheduler agree: every bundle a driver believes placed is
    /// placed there, terminal actors hold nothing, finished jobs hold nothing.
    pub fn check_invariants(&self) {
        self.scheduler.check_invariants();
        for slot in self.jobs.values() {
            let d = &slot.driver;
            let pg = self.scheduler.pg(slot.seq);
            assert_eq!(
                pg.is_none(),
                d.state().is_terminal(),
                "job {} state {} vs its placement group",
                d.id(),
                d.state()
            );
            for (ix, actor) in d.actors().iter().enumerate() {
                let in_scheduler = pg.map(|pg| pg.bundles[ix]);
                match (&actor.bundle, in_scheduler) {
                    (crate::driver::Bundle::Placed { node, .. }, Some(BundleState::Placed { node: at, .. })) => {
                        assert_eq!(node.name, self.scheduler.node(at).name, "{} placed on two nodes", actor.name);
                    }
                    (crate::driver::Bundle::Placed { .. }, other) => {
                        panic!("{} believes placed, scheduler says {other:?}", actor.name)
                    }
                    (_, Some(BundleState::Placed { .. })) => {
                        panic!("{} holds a bundle its driver does not know", actor.name)
                    }
                    _ => {}
                }
                if actor.state.is_terminal() {
                    assert!(actor.run.is_none(), "{} is {} with a live attempt", actor.name, actor.state);
                }
            }
        }
    }
}

fn check_name(name: &str) -> Result<(), Rejected> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Rejected::BadName(name.to_string()))
    }
}

fn pg_spec(spec: &JobSpec, now: Instant) -> PgSpec {
    PgSpec {
        priority: spec.priority,
        submit: now,
        strategy: spec.strategy,
        bundle: spec.bundle.clone(),
        node_selector: spec.node_selector.clone(),
        pack_by: spec.pack_by.clone(),
        bundles: spec.actor_count(),
        required: spec.min_nodes,
    }
}
