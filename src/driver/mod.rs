//! The driver: one per job. It creates every command actor up front, steps each through the
//! actor state machine, forms cycles (rendezvous rounds), classifies and charges failures, and
//! asks the scheduler for bundles in the right queue class. No IO: inputs in, effects out.
//!
//! ```text
//!  Placed / BundleLost / Draining / Started / Exited / SpawnFailed / Stop / timeouts
//!        │
//!        ▼
//!  per-actor step (one transition at a time) ──► ledger + budgets (cause table, §6)
//!        │
//!        ▼
//!  reconcile: refresh bundle requests (class 1 replacements up to min_nodes, 3 spares,
//!             4 elastic) ─► gang: form the next cycle when nothing runs and ≥ min are placed
//!                         ─► actor: start each placed rank on its own
//!        │
//!        ▼
//!  effects: Request / Cancel / Release / Start / Stop / Event / Finished
//! ```

mod actor;
mod budget;
mod env;
mod ledger;

pub use actor::{Actor, ActorState, Bundle, NodeRef, Role, Run, StopReason};
pub use budget::{backoff_ms, BudgetKind, Budgets, Cause, Charge, Remaining};
pub use env::{contract as env_contract, Placement as EnvPlacement};
pub use ledger::LedgerEntry;

use crate::ids::{actor_name, ActorIx, JobId, NodeId};
use crate::protocol::{AttemptKey, ExitStatus, StartSpec};
use crate::scheduler::QueueClass;
use crate::spec::{JobSpec, RestartMode};
use crate::time::{earliest, Instant};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;

/// Job life cycle (DESIGN §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    Pending,
    Running,
    Succeeded,
    Failed,
    Stopped,
}

impl JobState {
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed | JobState::Stopped)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = serde_json::to_value(self).expect("state serializes");
        f.write_str(text.as_str().expect("state is a string"))
    }
}

/// Why the rendezvous was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CloseReason {
    Succeeded,
    Failed,
    Stopped,
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CloseReason::Succeeded => "succeeded",
            CloseReason::Failed => "failed",
            CloseReason::Stopped => "stopped",
        })
    }
}

impl CloseReason {
    fn final_state(self) -> JobState {
        match self {
            CloseReason::Succeeded => JobState::Succeeded,
            CloseReason::Failed => JobState::Failed,
            CloseReason::Stopped => JobState::Stopped,
        }
    }
}

/// A bundle lost with its node, as the head saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Loss {
    pub node: NodeId,
    pub preemptible: bool,
    pub draining: bool,
    /// When the node was last heard from: its processes may have died any time after.
    pub silent_since: Instant,
    /// "node n2 missed heartbeats for 3000 ms".
    pub evidence: String,
}

/// A rank lost with its node in some cycle, kept to attribute peers' failures to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct LossRecord {
    cycle: u32,
    actor: ActorIx,
    node: NodeId,
    silent_since: Instant,
}

/// A failure whose cause is not decided yet (the actor waits in FAILING): a rank that exits
/// non-zero may only be reacting to a peer whose node died unnoticed so far.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct PendingFailure {
    run: Run,
    status: Option<ExitStatus>,
    evidence: String,
    at: Instant,
    decide_by: Instant,
}

/// One bundle of this job reserved on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundlePlaced {
    pub actor: ActorIx,
    pub node: NodeRef,
    pub port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverInput {
    /// Bundles reserved in one scheduling pass.
    Placed(Vec<BundlePlaced>),
    /// Every bundle of this job on one node, lost with it.
    BundlesLost {
        actors: Vec<ActorIx>,
        loss: Loss,
    },
    /// The node under this actor's bundle received a preemption notice.
    Draining {
        actor: ActorIx,
        deadline: Instant,
    },
    Started {
        key: AttemptKey,
    },
    Exited {
        key: AttemptKey,
        status: ExitStatus,
    },
    SpawnFailed {
        key: AttemptKey,
        message: String,
    },
    /// The job's bundle became infeasible (with the reason) or feasible again.
    Feasibility(Option<String>),
    /// The user stops the job.
    Stop,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverEffect {
    /// Queue the required gang (bundles `0..min_nodes`).
    RequestGang,
    Request {
        actor: ActorIx,
        class: QueueClass,
        since: Instant,
    },
    Cancel {
        actor: ActorIx,
    },
    Release {
        actor: ActorIx,
    },
    /// Keep this job's later placements off preemptible nodes.
    AvoidPreemptible,
    Start {
        node: NodeId,
        spec: StartSpec,
    },
    Stop {
        node: NodeId,
        key: AttemptKey,
        grace_ms: u64,
    },
    /// The process of this attempt is gone (exit seen, or its node lost).
    AttemptEnded {
        node: NodeId,
        key: AttemptKey,
    },
    Event(JobEvent),
    /// Every actor is terminal and nothing is held: the job has reached its final state.
    Finished,
}

/// Things worth telling a follower of the job, and worth a line in a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum JobEvent {
    Transition {
        actor: String,
        from: ActorState,
        to: ActorState,
        attempt: u32,
        cycle: u32,
        rank: Option<u32>,
        node: Option<NodeId>,
    },
    CycleFormed {
        cycle: u32,
        world_size: u32,
        master_addr: String,
        master_port: u16,
        /// Actor names in rank order.
        ranks: Vec<String>,
    },
    Ledger {
        entry: LedgerEntry,
    },
    JobState {
        from: JobState,
        to: JobState,
        message: Option<String>,
    },
    Promoted {
        spare: String,
        replaces: String,
    },
    Closing {
        reason: CloseReason,
    },
    /// A message about an older attempt or cycle, ignored.
    Stale {
        key: AttemptKey,
        what: String,
    },
    Feasibility {
        infeasible: Option<String>,
    },
    /// Placed while the job could no longer use it (terminating or closed): released at once.
    ReleasedUnused {
        actor: String,
    },
}

/// What a job had been through before the head restarted: enough to go on without reusing an
/// attempt number or forgetting a charge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobHistory {
    /// Attempts started so far, per actor.
    pub attempts: Vec<u32>,
    /// The last cycle formed.
    pub cycle: u32,
    pub ledger: Vec<LedgerEntry>,
    pub remaining: Remaining,
}

/// The rendezvous of the current cycle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Master {
    pub node: NodeId,
    pub addr: String,
    pub port: u16,
}

/// One job's driver. Its fields are the durable part of a job (spec, actors, cycles, ledger,
/// budgets) and serialize as such; pending effects are transient.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Driver {
    id: JobId,
    spec: JobSpec,
    submitted: Instant,
    state: JobState,
    message: Option<String>,
    infeasible: Option<String>,
    closing: Option<CloseReason>,
    /// The required gang has been placed.
    admitted: bool,
    /// Actor mode: an actor has completed; nothing new starts.
    terminating: bool,
    cycle: u32,
    /// Gang mode: actors of the current cycle in rank order.
    world: Vec<ActorIx>,
    master: Option<Master>,
    actors: Vec<Actor>,
    budgets: Budgets,
    ledger: Vec<LedgerEntry>,
    /// Failures charged to a budget so far (the backoff exponent).
    charged_failures: u32,
    avoiding_preemptible: bool,
    restart_after: Option<Instant>,
    scale_up_at: Option<Instant>,
    placement_deadline: Option<Instant>,
    /// How long a failure waits for a peer's node loss to explain it (the head's node timeout).
    attribution_window_ms: u64,
    pending: BTreeMap<ActorIx, PendingFailure>,
    /// Ranks of the current cycle lost with their nodes.
    losses: Vec<LossRecord>,
    rng: ChaCha8Rng,
    #[serde(skip)]
    effects: VecDeque<DriverEffect>,
}

impl Driver {
    /// Creates the job's every actor in SCHEDULING and asks for its bundles: the required
    /// gang now, spares and elastic bundles deferred by the scheduler until admission.
    pub fn new(id: JobId, spec: JobSpec, now: Instant, seed: u64, attribution_window_ms: u64) -> Self {
        let actors = (0..spec.actor_count())
            .map(|i| {
                let active = i < spec.max_nodes;
                let role = if active { Role::Active } else { Role::Spare };
                Actor::new(actor_name(&id, i), role, active.then_some(i))
            })
            .collect();
        let mut driver = Driver {
            budgets: Budgets::new(&spec.retries),
            placement_deadline: spec.schedule_timeout_ms.map(|ms| now.plus_ms(ms)),
            id,
            submitted: now,
            state: JobState::Pending,
            message: None,
            infeasible: None,
            closing: None,
            admitted: false,
            terminating: false,
            cycle: 0,
            world: Vec::new(),
            master: None,
            actors,
            ledger: Vec::new(),
            charged_failures: 0,
            avoiding_preemptible: false,
            restart_after: None,
            scale_up_at: None,
            attribution_window_ms,
            pending: BTreeMap::new(),
            losses: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            effects: VecDeque::new(),
            spec,
        };
        driver.request_initial_bundles(now);
        driver
    }

    /// A job accepted before the head restarted: it starts over from SCHEDULING, but its next
    /// attempts and cycle number on from where it was, its ledger and budgets are kept.
    /// Attempts that were running when the head stopped are not in the ledger: nobody saw how
    /// they ended (their processes are stopped when their agents report them).
    pub fn resume(
        id: JobId,
        spec: JobSpec,
        now: Instant,
        seed: u64,
        attribution_window_ms: u64,
        history: JobHistory,
    ) -> Self {
        let mut driver = Driver::new(id, spec, now, seed, attribution_window_ms);
        for (actor, attempts) in driver.actors.iter_mut().zip(&history.attempts) {
            actor.attempts = *attempts;
        }
        driver.cycle = history.cycle;
        driver.charged_failures = history.ledger.iter().filter(|e| e.budget != BudgetKind::None).count() as u32;
        driver.ledger = history.ledger;
        driver.budgets = Budgets::resume(&driver.spec.retries, history.remaining);
        driver
    }

    fn request_initial_bundles(&mut self, now: Instant) {
        self.effects.push_back(DriverEffect::RequestGang);
        for ix in 0..self.spec.min_nodes {
            self.actors[ix as usize].bundle = Bundle::Requested { class: QueueClass::PendingGang };
        }
        for ix in self.spec.min_nodes..self.spec.actor_count() {
            let class = if ix < self.spec.max_nodes { QueueClass::Elastic } else { QueueClass::Spare };
            self.request(ix, class, now);
        }
    }

    // ---- the state-machine shape ---------------------------------------------------------

    pub fn handle(&mut self, now: Instant, input: DriverInput) {
        if self.state.is_terminal() {
            return;
        }
        match input {
            DriverInput::Placed(batch) => batch.into_iter().for_each(|p| self.on_placed(now, p)),
            DriverInput::BundlesLost { actors, loss } => self.on_bundles_lost(now, &actors, loss),
            DriverInput::Draining { actor, deadline } => self.on_draining(now, actor, deadline),
            DriverInput::Started { key } => self.on_started(key),
            DriverInput::Exited { key, status } => self.on_exited(now, key, status),
            DriverInput::SpawnFailed { key, message } => self.on_spawn_failed(now, key, message),
            DriverInput::Feasibility(infeasible) => {
                self.infeasible = infeasible.clone();
                self.event(JobEvent::Feasibility { infeasible });
            }
            DriverInput::Stop => self.close(now, CloseReason::Stopped, Some("stopped by the user".into())),
        }
        self.reconcile(now);
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        if self.state.is_terminal() {
            return;
        }
        if self.placement_deadline.is_some_and(|t| t <= now) {
            self.placement_deadline = None;
            let ms = self.spec.schedule_timeout_ms.unwrap_or_default();
            let why = self.infeasible.clone().unwrap_or_else(|| "not enough free capacity".into());
            let message =
                format!("could not place {} nodes within schedule_timeout_ms ({ms} ms): {why}", self.spec.min_nodes);
            self.close(now, CloseReason::Failed, Some(message));
        }
        if self.scale_up_at.is_some_and(|t| t <= now) {
            self.scale_up_at = None;
            self.begin_scale_up();
        }
        if self.restart_after.is_some_and(|t| t <= now) {
            self.restart_after = None;
        }
        for actor in &mut self.actors {
            if actor.retry_after.is_some_and(|t| t <= now) {
                actor.retry_after = None;
            }
        }
        self.reconcile(now);
    }

    pub fn poll_effect(&mut self) -> Option<DriverEffect> {
        self.effects.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.state.is_terminal() {
            return None;
        }
        let actor_timers = self.actors.iter().filter_map(|a| a.retry_after).min();
        let decisions = self.pending.values().map(|p| p.decide_by).min();
        [self.placement_deadline, self.scale_up_at, self.restart_after, actor_timers, decisions]
            .into_iter()
            .fold(None, earliest)
    }

    // ---- read access -----------------------------------------------------------------------

    pub fn id(&self) -> &JobId {
        &self.id
    }

    pub fn spec(&self) -> &JobSpec {
        &self.spec
    }

    pub fn state(&self) -> JobState {
        self.state
    }

    pub fn cycle(&self) -> u32 {
        self.cycle
    }

    pub fn actors(&self) -> &[Actor] {
        &self.actors
    }

    pub fn ledger(&self) -> &[LedgerEntry] {
        &self.ledger
    }

    pub fn remaining(&self) -> Remaining {
        self.budgets.remaining()
    }

    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    pub fn infeasible(&self) -> Option<&str> {
        self.infeasible.as_deref()
    }

    pub fn master(&self) -> Option<&Master> {
        self.master.as_ref()
    }

    pub fn submitted(&self) -> Instant {
        self.submitted
    }

    pub fn closing(&self) -> Option<CloseReason> {
        self.closing
    }

    // ---- inputs ----------------------------------------------------------------------------

    fn on_placed(&mut self, now: Instant, placed: BundlePlaced) {
        let ix = placed.actor;
        let actor = &mut self.actors[ix as usize];
        let expected = matches!(actor.bundle, Bundle::Requested { .. });
        actor.bundle = Bundle::Placed { node: placed.node, port: placed.port, draining: false };
        if !expected || self.closing.is_some() || actor.state.is_terminal() {
            self.release_unused(ix);
            return;
        }
        if self.terminating && (actor.role == Role::Spare || actor.attempts == 0) {
            self.actors[ix as usize].parked = true;
            self.release_unused(ix);
            return;
        }
        if actor.role == Role::Spare && actor.state == ActorState::Scheduling {
            self.transition(ix, ActorState::Standby);
        }
        if !self.admitted && (0..self.spec.min_nodes).all(|i| self.actors[i as usize].bundle.is_placed()) {
            self.admitted = true;
        }
        self.note_possible_growth(now, ix);
    }

    /// Gang mode: a newly placed active actor outside the running world grows it after
    /// `scale_up_delay_ms`, so that joins arriving close together make one restart.
    fn note_possible_growth(&mut self, now: Instant, ix: ActorIx) {
        let actor = &self.actors[ix as usize];
        let cycle_running = self.world.iter().any(|w| self.actors[*w as usize].state == ActorState::Running);
        if self.spec.restart == RestartMode::Gang
            && actor.role == Role::Active
            && actor.state == ActorState::Scheduling
            && cycle_running
            && self.scale_up_at.is_none()
        {
            self.scale_up_at = Some(now.plus_ms(self.spec.scale_up_delay_ms));
        }
    }

    /// All of them first lose their bundles, then each reacts: a reaction (say, closing the
    /// job) must not try to release a bundle that is already gone.
    fn on_bundles_lost(&mut self, now: Instant, actors: &[ActorIx], loss: Loss) {
        for &ix in actors {
            let actor = &mut self.actors[ix as usize];
            assert!(actor.bundle.is_placed(), "{} lost a bundle it did not hold", actor.name);
            actor.bundle = Bundle::None;
            actor.lost_at = Some(now);
            if let Some(run) = actor.run.as_ref().filter(|r| r.exited.is_none()) {
                let record = LossRecord {
                    cycle: run.cycle,
                    actor: ix,
                    node: loss.node.clone(),
                    silent_since: loss.silent_since,
                };
                self.losses.push(record);
            }
        }
        for &ix in actors {
            self.on_bundle_lost(now, ix, loss.clone());
        }
    }

    fn on_bundle_lost(&mut self, now: Instant, ix: ActorIx, loss: Loss) {
        match self.actors[ix as usize].state {
            ActorState::Standby => self.transition(ix, ActorState::Scheduling),
            ActorState::Running => self.run_lost_with_node(now, ix, loss),
            // FAILING: its process has ended already; it only loses the bundle.
            ActorState::Scheduling
            | ActorState::Failing
            | ActorState::Stopped
            | ActorState::TaskCompleted
            | ActorState::Failed => {}
        }
    }

    fn run_lost_with_node(&mut self, now: Instant, ix: ActorIx, loss: Loss) {
        let run = self.actors[ix as usize].run.as_ref().expect("a running actor has a run");
        if run.exited.is_some() {
            return; // finished its work already; it only loses the bundle
        }
        let key = self.key_of(ix);
        self.effects.push_back(DriverEffect::AttemptEnded { node: run.node.clone(), key });
        let lost_cause =
            if loss.draining || loss.preemptible || run.draining { Cause::Preempted } else { Cause::NodeLost };
        let (cause, evidence) = match &run.stop {
            // Stopped because a peer failed — but this node went silent before that failure:
            // the loss came first, and the peer was reacting to it.
            Some(StopReason::Collateral { at, .. }) if loss.silent_since <= *at => (lost_cause, loss.evidence),
            Some(reason) => stop_cause(reason, &format!("; {} before the exit was reported", loss.evidence)),
            None => (lost_cause, loss.evidence),
        };
        self.end_attempt(now, ix, cause, None, evidence);
    }

    fn on_draining(&mut self, now: Instant, ix: ActorIx, deadline: Instant) {
        let actor = &mut self.actors[ix as usize];
        let Bundle::Placed { draining, node, .. } = &mut actor.bundle else {
            return;
        };
        *draining = true;
        let node = node.name.clone();
        match actor.state {
            ActorState::Standby => {
                self.drop_bundle(ix);
                self.actors[ix as usize].lost_at = Some(now);
                self.transition(ix, ActorState::Scheduling);
            }
            ActorState::Scheduling | ActorState::Failing => {
                self.drop_bundle(ix);
                self.actors[ix as usize].lost_at = Some(now);
            }
            ActorState::Running => {
                let run = actor.run.as_mut().expect("a running actor has a run");
                run.draining = true;
                if run.stop.is_none() && run.exited.is_none() {
                    let deadline_ms = deadline.ms_since(now);
                    let grace = self.spec.stop_grace_ms.min(deadline_ms);
                    self.stop_run(ix, StopReason::Drain { node, deadline_ms }, grace);
                }
            }
            other => panic!("{} held a bundle while {other}", actor.name),
        }
    }

    fn on_started(&mut self, key: AttemptKey) {
        match self.current_run(&key) {
            Some(run) => run.acked = true,
            None => self.stale(key, "start confirmation"),
        }
    }

    fn on_exited(&mut self, now: Instant, key: AttemptKey, status: ExitStatus) {
        let gang = self.spec.restart == RestartMode::Gang;
        let closing = self.closing.is_some();
        let Some(run) = self.current_run(&key) else {
            return self.stale(key, "exit report");
        };
        let node = run.node.clone();
        if gang && status.success() && run.stop.is_none() && !closing {
            run.exited = Some((status, now));
            self.effects.push_back(DriverEffect::AttemptEnded { node, key });
            if self.world_exited_ok() {
                self.complete_gang(now);
            }
            return;
        }
        self.effects.push_back(DriverEffect::AttemptEnded { node, key: key.clone() });
        let (cause, evidence) = self.classify(key.actor, &status);
        self.end_attempt(now, key.actor, cause, Some(status), evidence);
    }

    fn on_spawn_failed(&mut self, now: Instant, key: AttemptKey, message: String) {
        let Some(run) = self.current_run(&key) else {
            return self.stale(key, "spawn failure");
        };
        let node = run.node.clone();
        self.effects.push_back(DriverEffect::AttemptEnded { node, key: key.clone() });
        let program = self.spec.command[0].clone();
        let evidence = format!("could not start `{program}`: {message}");
        self.end_attempt(now, key.actor, Cause::SpawnFailed, None, evidence);
    }

    /// The live, not yet exited run `key` names — or `None` if the message is stale.
    fn current_run(&mut self, key: &AttemptKey) -> Option<&mut Run> {
        let actor = self.actors.get_mut(key.actor as usize)?;
        let run = actor.run.as_mut()?;
        (run.attempt == key.attempt && run.cycle == key.cycle && run.exited.is_none()).then_some(run)
    }

    fn stale(&mut self, key: AttemptKey, what: &str) {
        self.event(JobEvent::Stale { key, what: what.to_string() });
    }

    // ---- classification and charging -------------------------------------------------------

    /// The cause of an attempt that ended with `status` (DESIGN §6).
    fn classify(&self, ix: ActorIx, status: &ExitStatus) -> (Cause, String) {
        let run = self.actors[ix as usize].run.as_ref().expect("classifying a live run");
        if let Some(reason) = &run.stop {
            return stop_cause(reason, "");
        }
        let node = &run.node;
        if status.success() {
            return (Cause::Completed, "process exited with code 0".into());
        }
        if let Some(code) = status.code.filter(|c| self.spec.retries.non_retryable_exit_codes.contains(c)) {
            return (
                Cause::NonRetryable,
                format!("process exited with code {code}, listed in non_retryable_exit_codes"),
            );
        }
        if run.draining {
            return (Cause::Preempted, format!("node {node} received a preemption notice and the process {status}"));
        }
        if status.signalled_by_agent {
            return (
                Cause::NodeLost,
                format!("the agent on {node} ended the process unasked (it {status}): the agent shut down"),
            );
        }
        (Cause::UserError, format!("process {status} on {node}"))
    }

    /// Ends the live attempt of `ix`: ledger entry, charge, and the next state.
    fn end_attempt(&mut self, now: Instant, ix: ActorIx, cause: Cause, status: Option<ExitStatus>, evidence: String) {
        let run = self.actors[ix as usize].run.take().expect("ending a live attempt");
        if cause == Cause::UserError && self.closing.is_none() {
            return self.await_attribution(now, ix, run, status, evidence);
        }
        self.settle_attempt(now, ix, run, cause, status, evidence);
    }

    /// A non-zero exit waits in FAILING until every peer of its cycle has ended (they are
    /// stopped now, in gang mode) or one node timeout has passed: if a peer's node went silent
    /// before this exit, the exit was a reaction to that loss and charges nothing.
    fn await_attribution(&mut self, now: Instant, ix: ActorIx, run: Run, status: Option<ExitStatus>, evidence: String) {
        self.transition_failing(ix, &run);
        let decide_by = now.plus_ms(self.attribution_window_ms);
        let failed = PendingFailure { run, status, evidence, at: now, decide_by };
        self.pending.insert(ix, failed);
        if self.spec.restart == RestartMode::Gang {
            let because = self.actors[ix as usize].name.clone();
            self.stop_world(now, &because);
        }
    }

    /// Decides every pending failure whose peers have all ended or whose window has passed.
    fn decide_pending(&mut self, now: Instant, force: bool) {
        let due: Vec<ActorIx> = self
            .pending
            .iter()
            .filter(|(ix, p)| force || p.decide_by <= now || !self.peers_live(**ix, p.run.cycle))
            .map(|(ix, _)| *ix)
            .collect();
        for ix in due {
            // Deciding one may close the job, which decides the rest.
            let Some(failed) = self.pending.remove(&ix) else { continue };
            let root = self
                .losses
                .iter()
                .find(|l| l.cycle == failed.run.cycle && l.actor != ix && l.silent_since <= failed.at);
            let (cause, evidence) = match root {
                Some(l) => {
                    let peer = &self.actors[l.actor as usize].name;
                    let silent = l.silent_since.as_ms();
                    (
                        Cause::Collateral,
                        format!(
                            "{}; {peer}'s node {} had gone silent first (last heard at {silent} ms)",
                            failed.evidence, l.node
                        ),
                    )
                }
                None => (Cause::UserError, failed.evidence),
            };
            self.settle_attempt(now, ix, failed.run, cause, failed.status, evidence);
        }
    }

    /// Does another rank of `cycle` still (possibly) run?
    fn peers_live(&self, ix: ActorIx, cycle: u32) -> bool {
        self.actors
            .iter()
            .enumerate()
            .any(|(i, a)| i as ActorIx != ix && a.run.as_ref().is_some_and(|r| r.cycle == cycle && r.exited.is_none()))
    }

    fn transition_failing(&mut self, ix: ActorIx, run: &Run) {
        // The transition event names the attempt that ended; put the run back for a moment.
        self.actors[ix as usize].run = Some(run.clone());
        self.transition(ix, ActorState::Failing);
        self.actors[ix as usize].run = None;
    }

    /// Charges and records an ended attempt, then takes the actor to its next state.
    fn settle_attempt(
        &mut self,
        now: Instant,
        ix: ActorIx,
        run: Run,
        cause: Cause,
        status: Option<ExitStatus>,
        evidence: String,
    ) {
        // Once the job is closing its outcome is decided: a failure is recorded as what it
        // was, but there is no retry left to pay for.
        let (charge, evidence) = match self.closing {
            Some(reason) if cause.default_budget() != BudgetKind::None => {
                (Charge::Free, format!("{evidence}; not charged: the job was already closing ({reason})"))
            }
            _ => (self.budgets.charge(cause), evidence),
        };
        self.record(ix, &run, now, cause, status, evidence, charge);
        if cause == Cause::Completed {
            self.transition(ix, ActorState::TaskCompleted);
            self.drop_bundle(ix);
            self.terminating = self.terminating || self.spec.restart == RestartMode::Actor;
            return;
        }
        if self.closing.is_some() {
            self.transition(ix, ActorState::Stopped);
            self.drop_bundle(ix);
            return;
        }
        if self.actors[ix as usize].state != ActorState::Failing {
            self.transition(ix, ActorState::Failing);
        }
        if cause.is_fatal() || matches!(charge, Charge::Exhausted(_)) {
            self.transition(ix, ActorState::Failed);
            self.drop_bundle(ix);
            let why = fatal_message(&self.actors[ix as usize].name, cause, charge);
            self.close(now, CloseReason::Failed, Some(why));
            return;
        }
        if let Charge::Charged(kind) = charge {
            self.charged_failures += 1;
            self.maybe_avoid_preemptible(kind);
        }
        if matches!(self.actors[ix as usize].bundle, Bundle::Placed { draining: true, .. }) {
            self.drop_bundle(ix);
            self.actors[ix as usize].lost_at = Some(now);
        }
        if cause.is_failure() {
            self.on_rank_failed(now, ix);
        } else {
            self.transition(ix, ActorState::Scheduling);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        ix: ActorIx,
        run: &Run,
        now: Instant,
        cause: Cause,
        status: Option<ExitStatus>,
        evidence: String,
        charge: Charge,
    ) {
        let evidence = match charge {
            Charge::Exhausted(kind) => format!("{evidence}; the {kind} budget is exhausted"),
            _ => evidence,
        };
        let entry = LedgerEntry {
            actor: self.actors[ix as usize].name.clone(),
            rank: Some(run.rank),
            attempt: run.attempt,
            cycle: run.cycle,
            node: run.node.to_string(),
            start_ms: run.started.as_ms(),
            end_ms: run.exited.map_or(now, |(_, t)| t).as_ms(),
            exit_code: status.and_then(|s| s.code),
            signal: status.and_then(|s| s.signal),
            cause,
            evidence,
            budget: charge.budget(),
            remaining: self.budgets.remaining(),
        };
        self.ledger.push(entry.clone());
        self.event(JobEvent::Ledger { entry });
    }

    /// `last_attempt_non_preemptible`: once a preemption or system charge leaves that budget
    /// at 0, the job's last allowed attempt must run where it will not be taken away.
    fn maybe_avoid_preemptible(&mut self, kind: BudgetKind) {
        let relevant = matches!(kind, BudgetKind::Preemption | BudgetKind::System);
        if self.spec.last_attempt_non_preemptible
            && relevant
            && self.budgets.left(kind) == 0
            && !self.avoiding_preemptible
        {
            self.avoiding_preemptible = true;
            self.effects.push_back(DriverEffect::AvoidPreemptible);
        }
    }

    /// A rank failed and will be retried: restart the gang (or just this rank), with a spare
    /// taking its place when one is standing by.
    fn on_rank_failed(&mut self, now: Instant, ix: ActorIx) {
        let delay = backoff_ms(&self.spec.retries.backoff_ms, self.charged_failures, &mut self.rng);
        let promoted = self.promote_spare(ix);
        match self.spec.restart {
            RestartMode::Gang => {
                self.restart_after = Some(now.plus_ms(delay));
                self.scale_up_at = None;
                let because = self.actors[ix as usize].name.clone();
                self.stop_world(now, &because);
            }
            RestartMode::Actor => {
                let rank_holder = promoted.unwrap_or(ix);
                self.actors[rank_holder as usize].retry_after = Some(now.plus_ms(delay));
            }
        }
        self.transition(ix, ActorState::Scheduling);
        let actor = &self.actors[ix as usize];
        if actor.role == Role::Spare && actor.bundle.is_usable() {
            self.transition(ix, ActorState::Standby);
        }
    }

    /// Swaps the first standing-by spare into `failed`'s rank. Returns the spare.
    fn promote_spare(&mut self, failed: ActorIx) -> Option<ActorIx> {
        if self.terminating {
            return None;
        }
        let spare = self
            .actors
            .iter()
            .position(|a| a.role == Role::Spare && a.state == ActorState::Standby && a.bundle.is_usable())?
            as ActorIx;
        let slot = self.actors[failed as usize].slot.take();
        self.actors[failed as usize].role = Role::Spare;
        let promoted = &mut self.actors[spare as usize];
        promoted.role = Role::Active;
        promoted.slot = slot;
        if let Some(pos) = self.world.iter().position(|w| *w == failed) {
            self.world[pos] = spare;
        }
        self.transition(spare, ActorState::Scheduling);
        let (spare_name, failed_name) =
            (self.actors[spare as usize].name.clone(), self.actors[failed as usize].name.clone());
        self.event(JobEvent::Promoted { spare: spare_name, replaces: failed_name });
        Some(spare)
    }

    /// Gang restart: every other running rank is stopped (collateral); ranks that already
    /// exited 0 in this cycle end their attempt the same way.
    fn stop_world(&mut self, now: Instant, because: &str) {
        for ix in 0..self.actors.len() as ActorIx {
            let Some(run) = &self.actors[ix as usize].run else { continue };
            if run.stop.is_some() {
                continue;
            }
            let reason = StopReason::Collateral { because: because.to_string(), at: now };
            if run.exited.is_some() {
                let (cause, evidence) = stop_cause(&reason, "; it had exited 0");
                let status = run.exited.map(|(s, _)| s);
                self.end_attempt(now, ix, cause, status, evidence);
            } else {
                self.stop_run(ix, reason, self.spec.stop_grace_ms);
            }
        }
    }

    /// Gang mode: stop the running world so that the next cycle includes newly placed ranks.
    fn begin_scale_up(&mut self) {
        let busy = self.actors.iter().any(|a| a.run.as_ref().is_some_and(|r| r.stop.is_some() || r.exited.is_some()));
        if self.closing.is_some() || busy {
            return;
        }
        let newcomers = self.startable().filter(|ix| !self.world.contains(ix)).count() as u32;
        let running: Vec<ActorIx> =
            self.world.iter().copied().filter(|w| self.actors[*w as usize].run.is_some()).collect();
        if newcomers == 0 || running.is_empty() {
            return;
        }
        let from = self.world.len() as u32;
        let to = (from + newcomers).min(self.spec.max_nodes);
        for ix in running {
            self.stop_run(ix, StopReason::MembershipChange { from, to }, self.spec.stop_grace_ms);
        }
    }

    fn stop_run(&mut self, ix: ActorIx, reason: StopReason, grace_ms: u64) {
        let key = self.key_of(ix);
        let run = self.actors[ix as usize].run.as_mut().expect("stopping a live attempt");
        run.stop = Some(reason);
        let node = run.node.clone();
        self.effects.push_back(DriverEffect::Stop { node, key, grace_ms });
    }

    // ---- closing -------------------------------------------------------------------------

    /// Gang success: every rank of the current cycle exited 0.
    fn world_exited_ok(&self) -> bool {
        self.world
            .iter()
            .all(|w| self.actors[*w as usize].run.as_ref().is_some_and(|r| r.exited.is_some_and(|(s, _)| s.success())))
    }

    fn complete_gang(&mut self, now: Instant) {
        for ix in self.world.clone() {
            let status = self.actors[ix as usize].run.as_ref().and_then(|r| r.exited).map(|(s, _)| s);
            self.end_attempt(now, ix, Cause::Completed, status, "process exited with code 0".into());
        }
        self.close(now, CloseReason::Succeeded, None);
    }

    /// Closes the rendezvous: spares end at once (gracefully on success), waiting actors stop,
    /// running ones are asked to stop. The job is final once nothing of it is held.
    fn close(&mut self, now: Instant, reason: CloseReason, message: Option<String>) {
        if self.closing.is_some() {
            return;
        }
        self.closing = Some(reason);
        self.message = message;
        (self.placement_deadline, self.scale_up_at, self.restart_after) = (None, None, None);
        self.event(JobEvent::Closing { reason });
        // Undecided failures are recorded as what they were; with the outcome decided, they
        // charge nothing.
        self.decide_pending(now, true);
        for ix in 0..self.actors.len() as ActorIx {
            self.close_actor(now, ix, reason);
        }
    }

    fn close_actor(&mut self, now: Instant, ix: ActorIx, reason: CloseReason) {
        let actor = &self.actors[ix as usize];
        match actor.state {
            ActorState::Running => {
                let run = actor.run.as_ref().expect("a running actor has a run");
                let stop = match reason {
                    CloseReason::Stopped => StopReason::User,
                    _ => StopReason::JobFailed { because: self.message.clone().unwrap_or_default() },
                };
                if let Some((status, _)) = run.exited {
                    // Exited 0 and waited for its peers: there is no process left to stop.
                    let (cause, evidence) = stop_cause(&stop, "; it had exited 0");
                    self.end_attempt(now, ix, cause, Some(status), evidence);
                } else if run.stop.is_none() {
                    self.stop_run(ix, stop, self.spec.stop_grace_ms);
                }
            }
            ActorState::Standby => {
                let to = if reason == CloseReason::Succeeded { ActorState::TaskCompleted } else { ActorState::Stopped };
                self.transition(ix, to);
                self.drop_bundle(ix);
            }
            ActorState::Scheduling => {
                self.transition(ix, ActorState::Stopped);
                self.drop_bundle(ix);
            }
            ActorState::Failing => panic!("{} left in FAILING", actor.name),
            ActorState::TaskCompleted | ActorState::Failed | ActorState::Stopped => {}
        }
    }

    fn finish_if_released(&mut self) {
        let Some(reason) = self.closing else { return };
        let done = self.actors.iter().all(|a| a.state.is_terminal() && a.bundle == Bundle::None);
        if done {
            self.set_job_state(reason.final_state());
            self.effects.push_back(DriverEffect::Finished);
        }
    }

    // ---- reconcile: requests and starts --------------------------------------------------

    fn reconcile(&mut self, now: Instant) {
        if self.state.is_terminal() {
            return;
        }
        self.decide_pending(now, false);
        if self.closing.is_some() {
            return self.finish_if_released();
        }
        self.refresh_requests();
        match self.spec.restart {
            RestartMode::Gang => self.try_form_cycle(now),
            RestartMode::Actor => self.start_ready_actors(now),
        }
        self.track_placement_deadline(now);
        if self.spec.restart == RestartMode::Actor && self.terminating && self.all_started_completed() {
            self.close(now, CloseReason::Succeeded, None);
            self.finish_if_released();
        }
    }

    /// Asks for every missing bundle in the right class: as many active ranks as the job
    /// needs to stay at `min_nodes` as replacements (FIFO by loss time), the rest as elastic
    /// growth, spares as spares.
    fn refresh_requests(&mut self) {
        if !self.admitted {
            return;
        }
        let placed_active = self
            .actors
            .iter()
            .filter(|a| a.role == Role::Active && !a.state.is_terminal() && a.bundle.is_placed())
            .count() as u32;
        let mut active: Vec<ActorIx> = self.waiting_for_bundle(Role::Active).collect();
        active.sort_by_key(|ix| self.replacement_order(*ix));
        let deficit = self.spec.min_nodes.saturating_sub(placed_active) as usize;
        for (n, ix) in active.into_iter().enumerate() {
            let lost_at = self.actors[ix as usize].lost_at.unwrap_or(self.submitted);
            let (class, since) =
                if n < deficit { (QueueClass::Replacement, lost_at) } else { (QueueClass::Elastic, self.submitted) };
            self.ensure_requested(ix, class, since);
        }
        let spares: Vec<ActorIx> = self.waiting_for_bundle(Role::Spare).collect();
        for ix in spares {
            self.ensure_requested(ix, QueueClass::Spare, self.submitted);
        }
    }

    /// Which waiting ranks become replacements first: in actor mode rank 0 (nothing starts
    /// without the rendezvous), then actors that lost a bundle in loss order, then the rest by
    /// index — a rank that never ran must not take the place of one that was lost.
    fn replacement_order(&self, ix: ActorIx) -> (bool, bool, Instant, ActorIx) {
        let actor = &self.actors[ix as usize];
        let rank0 = self.spec.restart == RestartMode::Actor && actor.slot == Some(0);
        (!rank0, actor.lost_at.is_none(), actor.lost_at.unwrap_or(Instant::ZERO), ix)
    }

    /// Actors of `role` without a bundle that could still use one. While terminating, actors
    /// that never started (and spares) get no new requests: they will never run.
    fn waiting_for_bundle(&self, role: Role) -> impl Iterator<Item = ActorIx> + '_ {
        (0..self.actors.len() as ActorIx).filter(move |ix| {
            let a = &self.actors[*ix as usize];
            let never_runs = self.terminating && (a.attempts == 0 || a.role == Role::Spare);
            a.role == role && a.state == ActorState::Scheduling && !a.bundle.is_placed() && !a.parked && !never_runs
        })
    }

    fn ensure_requested(&mut self, ix: ActorIx, class: QueueClass, since: Instant) {
        if self.actors[ix as usize].bundle != (Bundle::Requested { class }) {
            self.request(ix, class, since);
        }
    }

    fn request(&mut self, ix: ActorIx, class: QueueClass, since: Instant) {
        self.actors[ix as usize].bundle = Bundle::Requested { class };
        self.effects.push_back(DriverEffect::Request { actor: ix, class, since });
    }

    /// Active actors that could start now: waiting, on a usable bundle.
    fn startable(&self) -> impl Iterator<Item = ActorIx> + '_ {
        (0..self.actors.len() as ActorIx).filter(|ix| {
            let a = &self.actors[*ix as usize];
            a.role == Role::Active && a.state == ActorState::Scheduling && a.bundle.is_usable() && !a.parked
        })
    }

    /// Gang mode: form the next cycle when nothing of the old one runs, the backoff has
    /// passed, and at least `min_nodes` active ranks have bundles.
    fn try_form_cycle(&mut self, now: Instant) {
        let busy = self.actors.iter().any(|a| matches!(a.state, ActorState::Running | ActorState::Failing));
        if !self.admitted || busy || self.restart_after.is_some_and(|t| t > now) {
            return;
        }
        let members: Vec<ActorIx> = self.startable().collect();
        if members.len() < self.spec.min_nodes as usize {
            return;
        }
        let order = self.rank_order(&members);
        self.cycle += 1;
        self.losses.clear();
        self.world = order.clone();
        let rank0 = self.actors[order[0] as usize].bundle.clone();
        let Bundle::Placed { node, port, .. } = rank0 else { unreachable!("members are placed") };
        self.master = Some(Master { node: node.name.clone(), addr: node.addr.clone(), port });
        self.announce_cycle(order.len() as u32);
        for (rank, ix) in order.into_iter().enumerate() {
            self.start(now, ix, rank as u32, self.world.len() as u32);
        }
        (self.restart_after, self.scale_up_at) = (None, None);
        self.set_job_state(JobState::Running);
    }

    /// Survivors keep their relative order, newcomers append by index; with `pack_by`, ranks
    /// are grouped by domain.
    fn rank_order(&self, members: &[ActorIx]) -> Vec<ActorIx> {
        let mut order: Vec<ActorIx> = self.world.iter().copied().filter(|w| members.contains(w)).collect();
        order.extend(members.iter().copied().filter(|m| !self.world.contains(m)));
        if self.spec.pack_by.is_some() {
            order.sort_by_key(|ix| self.actors[*ix as usize].bundle.node().and_then(|n| n.domain.clone()));
        }
        order
    }

    /// Actor mode: each placed rank starts on its own (after its backoff), with the rendezvous
    /// at rank 0's node; the cycle advances when rank 0 moves.
    fn start_ready_actors(&mut self, now: Instant) {
        if !self.admitted || !self.update_actor_mode_master() {
            return;
        }
        let ready: Vec<ActorIx> = self
            .startable()
            .filter(|ix| {
                let a = &self.actors[*ix as usize];
                a.retry_after.is_none_or(|t| t <= now) && !(self.terminating && a.attempts == 0)
            })
            .collect();
        for ix in ready {
            let rank = self.actors[ix as usize].slot.expect("active actors hold a rank");
            self.start(now, ix, rank, self.spec.max_nodes);
            self.set_job_state(JobState::Running);
        }
    }

    /// Returns whether a master is known; moves it (a new cycle) when rank 0 changed node.
    fn update_actor_mode_master(&mut self) -> bool {
        if self.terminating {
            // Rank 0 may be an actor that will never start now; the rendezvous stays put.
            return self.master.is_some();
        }
        let Some(rank0) = self.actors.iter().find(|a| a.slot == Some(0) && a.role == Role::Active) else {
            return false;
        };
        let Bundle::Placed { node, port, .. } = &rank0.bundle else {
            // Rank 0 finished (or runs on a node being lost): the rendezvous stays where it
            // is. Only a rank 0 waiting for a new bundle makes the others wait.
            return self.master.is_some() && (rank0.run.is_some() || rank0.state.is_terminal());
        };
        let moved = self.master.as_ref().is_none_or(|m| m.node != node.name || m.port != *port);
        if moved {
            self.master = Some(Master { node: node.name.clone(), addr: node.addr.clone(), port: *port });
            self.cycle += 1;
            self.announce_cycle(self.spec.max_nodes);
        }
        true
    }

    fn announce_cycle(&mut self, world_size: u32) {
        let master = self.master.clone().expect("a cycle has a master");
        let ranks = match self.spec.restart {
            RestartMode::Gang => self.world.iter().map(|w| self.actors[*w as usize].name.clone()).collect(),
            RestartMode::Actor => {
                let mut slots: Vec<(u32, String)> =
                    self.actors.iter().filter_map(|a| a.slot.map(|s| (s, a.name.clone()))).collect();
                slots.sort();
                slots.into_iter().map(|(_, n)| n).collect()
            }
        };
        self.event(JobEvent::CycleFormed {
            cycle: self.cycle,
            world_size,
            master_addr: master.addr,
            master_port: master.port,
            ranks,
        });
    }

    fn start(&mut self, now: Instant, ix: ActorIx, rank: u32, world_size: u32) {
        let master = self.master.clone().expect("starting without a master");
        let actor = &mut self.actors[ix as usize];
        let node = actor.bundle.node().expect("starting on a placed bundle").name.clone();
        actor.attempts += 1;
        actor.rank = Some(rank);
        let key = AttemptKey { job: self.id.clone(), actor: ix, attempt: actor.attempts, cycle: self.cycle };
        let env = env::contract(&EnvPlacement {
            job: &self.id,
            spec: &self.spec,
            actor_name: &actor.name,
            attempt: actor.attempts,
            cycle: self.cycle,
            rank,
            world_size,
            master_addr: &master.addr,
            master_port: master.port,
            node: &node,
        });
        let spec = StartSpec {
            key: key.clone(),
            actor_name: actor.name.clone(),
            command: self.spec.command.clone(),
            env,
            cwd: self.spec.cwd.clone(),
            stop_grace_ms: self.spec.stop_grace_ms,
        };
        actor.run = Some(Run {
            attempt: key.attempt,
            cycle: self.cycle,
            rank,
            node: node.clone(),
            started: now,
            acked: false,
            stop: None,
            exited: None,
            draining: false,
        });
        self.effects.push_back(DriverEffect::Start { node, spec });
        self.transition(ix, ActorState::Running);
    }

    /// Actor mode success: every rank that started has completed. A failed actor swapped out
    /// for a spare no longer holds a rank and does not count.
    fn all_started_completed(&self) -> bool {
        self.actors
            .iter()
            .filter(|a| a.attempts > 0 && a.role == Role::Active)
            .all(|a| a.state == ActorState::TaskCompleted)
    }

    /// `schedule_timeout_ms`: the job fails if it stays below `min_nodes` placed for that long.
    fn track_placement_deadline(&mut self, now: Instant) {
        let Some(timeout) = self.spec.schedule_timeout_ms else { return };
        let placed = self.actors.iter().filter(|a| a.role == Role::Active && a.bundle.is_placed()).count() as u32;
        let short = !self.admitted || placed < self.spec.min_nodes;
        match (short, self.placement_deadline) {
            (true, None) => self.placement_deadline = Some(now.plus_ms(timeout)),
            (false, Some(_)) => self.placement_deadline = None,
            _ => {}
        }
    }

    // ---- small helpers ---------------------------------------------------------------------

    fn key_of(&self, ix: ActorIx) -> AttemptKey {
        let run = self.actors[ix as usize].run.as_ref().expect("a live attempt");
        AttemptKey { job: self.id.clone(), actor: ix, attempt: run.attempt, cycle: run.cycle }
    }

    /// Gives up whatever bundle the actor has or waits for.
    fn drop_bundle(&mut self, ix: ActorIx) {
        let effect = match self.actors[ix as usize].bundle {
            Bundle::None => return,
            Bundle::Requested { .. } => DriverEffect::Cancel { actor: ix },
            Bundle::Placed { .. } => DriverEffect::Release { actor: ix },
        };
        self.actors[ix as usize].bundle = Bundle::None;
        self.effects.push_back(effect);
    }

    fn release_unused(&mut self, ix: ActorIx) {
        self.drop_bundle(ix);
        let actor = self.actors[ix as usize].name.clone();
        self.event(JobEvent::ReleasedUnused { actor });
    }

    fn transition(&mut self, ix: ActorIx, to: ActorState) {
        let actor = &mut self.actors[ix as usize];
        let from = actor.state;
        assert!(from.can_become(to), "{}: {from} → {to} is not a transition", actor.name);
        actor.state = to;
        let run = actor.run.as_ref();
        let event = JobEvent::Transition {
            actor: actor.name.clone(),
            from,
            to,
            attempt: actor.attempts,
            cycle: run.map_or(self.cycle, |r| r.cycle),
            rank: run.map(|r| r.rank),
            node: actor.bundle.node().map(|n| n.name.clone()).or_else(|| run.map(|r| r.node.clone())),
        };
        self.event(event);
    }

    fn set_job_state(&mut self, to: JobState) {
        if self.state != to {
            let from = std::mem::replace(&mut self.state, to);
            let message = self.message.clone();
            self.event(JobEvent::JobState { from, to, message });
        }
    }

    fn event(&mut self, event: JobEvent) {
        self.effects.push_back(DriverEffect::Event(event));
    }
}

/// The cause and evidence of an attempt the driver asked to stop.
fn stop_cause(reason: &StopReason, suffix: &str) -> (Cause, String) {
    let (cause, text) = match reason {
        StopReason::Collateral { because, .. } => {
            (Cause::Collateral, format!("stopped for a gang restart after {because} failed"))
        }
        StopReason::JobFailed { because } => (Cause::Collateral, format!("stopped because the job failed: {because}")),
        StopReason::MembershipChange { from, to } => {
            (Cause::MembershipChange, format!("stopped to grow the world from {from} to {to} ranks"))
        }
        StopReason::Drain { node, deadline_ms } => (
            Cause::Preempted,
            format!("node {node} received a preemption notice (deadline in {deadline_ms} ms); the process was stopped"),
        ),
        StopReason::User => (Cause::Stopped, "stopped by the user".to_string()),
    };
    (cause, format!("{text}{suffix}"))
}

fn fatal_message(actor: &str, cause: Cause, charge: Charge) -> String {
    match charge {
        Charge::Exhausted(kind) => format!("{actor} failed ({cause}) and the {kind} retry budget is exhausted"),
        _ => format!("{actor} failed ({cause}), which is never retried"),
    }
}
