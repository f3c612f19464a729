//! The driver: one per job. It creates every command actor up front, steps each through the
//! actor state machine, forms cycles (rendezvous rounds), classifies and charges failures, and
//! tells the scheduler what bundles it needs. No IO: inputs in, effects out.
//!
//! ```text
//!  Placed / BundlesLost / Draining / Started / Exited / SpawnFailed / Stop / timers
//!        │  inputs.rs
//!        ▼
//!  per-actor step (one transition at a time) ──► failure.rs: classify.rs verdict, ledger, budgets
//!        │
//!        ▼
//!  reconcile: failure.rs (waiting actors off preemptible nodes once the last attempt must
//!             be; waiting ranks to standing-by spares) · requests.rs (what bundles the job
//!             needs) ─► the restart mode makes progress:
//!             gang.rs (form the next cycle) · actor_mode.rs (start each placed rank)
//!        │
//!        ▼
//!  effects: Request / Cancel / Release / Start / Stop / Event / Finished
//! ```
//!
//! What differs between the two restart modes is the [`Mode`] trait, chosen in one place
//! ([`Driver::mode`]); everything else is shared.

mod actor;
mod actor_mode;
mod attempts;
mod budget;
pub mod classify;
mod closing;
mod env;
mod failure;
mod gang;
mod inputs;
mod ledger;
mod requests;
mod timers;

pub use actor::{Actor, ActorState, Bundle, DrainSource, NodeRef, Role, Run, StopReason};
pub use budget::{backoff_ms, Budget, BudgetKind, Budgets, Charge, Remaining};
pub use classify::{Cause, CauseRow, Fault, CAUSES};
pub use env::{contract as env_contract, worker_vars as env_worker_vars, Placement as EnvPlacement};
pub use ledger::LedgerEntry;
pub use timers::{Timer, TimerTable};

use crate::event::JobEvent;
use crate::ids::{ActorId, ActorIx, JobId, NodeId};
use crate::protocol::{AttemptKey, ExitStatus, StartSpec};
use crate::scheduler::{Need, PolicyFault};
use crate::spec::{JobSpec, RestartMode};
use crate::time::Instant;
use failure::Decide;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
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
    pub const ALL: [JobState; 5] =
        [JobState::Pending, JobState::Running, JobState::Succeeded, JobState::Failed, JobState::Stopped];

    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::Failed | JobState::Stopped)
    }

    /// A state by its name (`RUNNING`), in any case.
    pub fn parse(name: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|s| s.to_string().eq_ignore_ascii_case(name.trim()))
    }

    /// Every state's name, for a message that refuses another: "PENDING, RUNNING, …".
    pub fn names() -> String {
        JobState::ALL.map(|s| s.to_string()).join(", ")
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
    /// The head restarted and never heard from the node again: when it went silent is not
    /// known, perhaps before anything the run before the restart saw (AT-2 in `failure.rs`).
    pub unheard_since_restart: bool,
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
    #[serde(default)]
    unheard_since_restart: bool,
    /// Its number among the job's loss records (from 1; 0 in a record older than the count,
    /// which excuses as before): attempts started after it are not excused by it (AT-4).
    #[serde(default)]
    seq: u64,
}

impl LossRecord {
    fn of(cycle: u32, actor: ActorIx, loss: &Loss, seq: u64) -> Self {
        let (node, silent_since, unheard_since_restart) =
            (loss.node.clone(), loss.silent_since, loss.unheard_since_restart);
        LossRecord { cycle, actor, node, silent_since, unheard_since_restart, seq }
    }

    /// Whether it was recorded after `run` started, so that `run` ran while the loss was not
    /// yet known (AT-4).
    fn after_start_of(&self, run: &Run) -> bool {
        self.seq == 0 || self.seq > run.losses_before
    }
}

/// The most loss records a job keeps: an actor-mode job's cycle never ends, and only records
/// newer than a running attempt's start can excuse its failure (AT-4).
const MAX_LOSS_RECORDS: usize = 64;

/// A non-zero exit whose cause is not decided yet (the actor waits in FAILING): the rank may
/// only be reacting to a peer whose node died unnoticed so far. Decided by `Timer::Attribution`
/// at the latest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct PendingFailure {
    run: Run,
    status: ExitStatus,
    at: Instant,
    /// Nodes heard from after `at` (AT-1 in `failure.rs`): a peer there can no longer excuse it.
    #[serde(default)]
    heard: BTreeSet<NodeId>,
}

/// One bundle of this job reserved on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundlePlaced {
    pub actor: ActorIx,
    pub node: NodeRef,
    pub port: u16,
    pub devices: crate::resources::Devices,
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
    /// The node under this actor's bundle started draining.
    Draining {
        actor: ActorIx,
        deadline: Instant,
        by: DrainSource,
    },
    Started {
        key: AttemptKey,
    },
    Exited {
        key: AttemptKey,
        status: ExitStatus,
    },
    /// `node_fault`: the node could not start it, not the program (`ToHead::SpawnFailed`): it
    /// has been unhealthy since then (one fault, charged once: FC-1).
    SpawnFailed {
        key: AttemptKey,
        message: String,
        node_fault: Option<Instant>,
    },
    /// The attempt's process is gone though its node lives on (its agent restarted without it).
    AttemptLost {
        key: AttemptKey,
        loss: Loss,
    },
    /// The node of the actor's bundle cannot start work (AG-6): the bundle is no use for a start.
    NodeUnhealthy {
        actor: ActorIx,
    },
    /// The actor's bundle holds another port now: something else on its machine listens on
    /// the old one (scheduler/cluster.rs, PS-4).
    PortMoved {
        actor: ActorIx,
        port: u16,
    },
    /// The job's bundle became infeasible (with the reason) or feasible again.
    Feasibility(Option<String>),
    /// Why its bundles wait now, as the scheduler counts it: given just before the schedule
    /// deadline fails the job, so that the failure says how short the cluster was.
    Waiting(String),
    /// The node was heard from (a heartbeat): a failure waiting for word from its peers'
    /// nodes may be decided (AT-1 in `failure.rs`). Given only where `awaits_word_from` says.
    NodeHeard(NodeId),
    /// The user stops the job.
    Stop,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverEffect {
    /// Queue the required gang (bundles `0..min_nodes`).
    RequestGang,
    /// Queue one bundle for what the job needs it for; the scheduler's policy decides its class.
    Request {
        actor: ActorIx,
        need: Need,
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

/// When a cycle formed, and how large its world was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CycleStart {
    pub cycle: u32,
    pub at_ms: u64,
    pub world_size: u32,
}

/// Cycle starts a driver keeps (the newest; a job that restarts more has its ledger).
const MAX_CYCLE_STARTS: usize = 256;

/// Most entries one job's ledger holds unless the head is configured otherwise
/// (`HeadConfig::max_ledger_entries`). A job with an unlimited budget whose program fails at
/// once, given no backoff, ended thousands of attempts a minute, each one an entry kept in
/// memory and on disk for as long as the job. At the bound the job fails, saying why; a job
/// of eight ranks preempted every hour reaches it after more than a year.
pub const DEFAULT_MAX_LEDGER_ENTRIES: usize = 100_000;

fn default_max_ledger_entries() -> usize {
    DEFAULT_MAX_LEDGER_ENTRIES
}

/// The rendezvous of the current cycle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Master {
    pub node: NodeId,
    pub addr: String,
    pub port: u16,
}

/// What differs between the restart modes (DESIGN §4 `restart`).
trait Mode {
    /// Starts what can start now: the next cycle (gang), or each ready rank (actor).
    fn make_progress(&self, d: &mut Driver, now: Instant);
    /// A rank that exits 0 while its peers run waits for them (gang) or completes (actor).
    fn success_waits_for_peers(&self) -> bool;
    /// A failure waits in FAILING to be attributed; gang mode stops its peers meanwhile.
    fn on_failure_noticed(&self, d: &mut Driver, now: Instant, failed: ActorIx);
    /// A failure will be retried after `delay_ms`: the world restarts (gang), or the rank.
    fn restart_after(&self, d: &mut Driver, now: Instant, failed: ActorIx, promoted: Option<ActorIx>, delay_ms: u64);
    /// An actor completed its work.
    fn on_completed(&self, d: &mut Driver);
    /// The current cycle's actors in rank order, and its world size.
    fn ranks(&self, d: &Driver) -> (Vec<ActorId>, u32);
    /// A newly placed active actor grows a running world by restarting it (gang).
    fn grows_by_restart(&self) -> bool;
    /// Rank 0 is replaced before any other rank (actor: nothing starts without its rendezvous).
    fn rank0_first(&self) -> bool;
}

/// One job's driver. Its fields are the durable part of a job and serialize as its state
/// snapshot — except the spec (written once when the job is accepted) and the ledger (written
/// an entry at a time), which the store keeps apart and [`Driver::restore`] puts back. Pending
/// effects are transient.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Driver {
    id: JobId,
    #[serde(skip, default = "JobSpec::placeholder")]
    spec: JobSpec,
    submitted: Instant,
    /// When it reached its final state.
    finished_at: Option<Instant>,
    state: JobState,
    message: Option<String>,
    infeasible: Option<String>,
    /// The scheduler's latest word on why the bundles wait (`DriverInput::Waiting`); only read in
    /// the step it is given in, so not kept across a head restart.
    #[serde(skip)]
    waiting: Option<String>,
    closing: Option<CloseReason>,
    /// The required gang has been placed.
    admitted: bool,
    /// Actor mode: an actor has completed; nothing new starts.
    terminating: bool,
    cycle: u32,
    /// Gang mode: actors of the current cycle in rank order.
    world: Vec<ActorIx>,
    cycle_starts: Vec<CycleStart>,
    master: Option<Master>,
    actors: Vec<Actor>,
    budgets: Budgets,
    #[serde(skip)]
    ledger: Vec<LedgerEntry>,
    /// At this many entries the job fails: the head's `max_ledger_entries`, set at submission
    /// and at every restore (`take_head_settings`), so not part of the record.
    #[serde(skip, default = "default_max_ledger_entries")]
    max_ledger_entries: usize,
    /// Failures charged to a budget so far (the backoff exponent).
    charged_failures: u32,
    avoiding_preemptible: bool,
    timers: TimerTable,
    /// How long a failure waits for a peer's node loss to explain it (the head's node timeout).
    attribution_window_ms: u64,
    pending: BTreeMap<ActorIx, PendingFailure>,
    /// Ranks of the current cycle lost with their nodes, the latest `MAX_LOSS_RECORDS`.
    losses: Vec<LossRecord>,
    /// Loss records made so far: each run notes the count at its start (AT-4).
    #[serde(default)]
    losses_recorded: u64,
    /// The latest faults charged, with the actor charged for each (FC-1 in `failure.rs`).
    #[serde(default)]
    charged_faults: VecDeque<(Fault, ActorId)>,
    /// The latest node losses charged, with the budget and the actor charged for each (FC-2).
    #[serde(default)]
    charged_losses: VecDeque<(Fault, BudgetKind, ActorId)>,
    /// Losses whose silences began within this many ms of each other are one incident
    /// (FC-2): the head's heartbeat interval and a half, set at submission and at every
    /// restore (`take_head_settings`), so not part of the record.
    #[serde(skip)]
    incident_window_ms: u64,
    /// Test-only: a deliberately wrong policy (`ChargeEveryRank`, `KeepPreemptibleBundles`,
    /// `RanksIgnoreDomains`), for the checkers to catch.
    #[serde(skip)]
    policy_fault: PolicyFault,
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
                Actor::new(ActorId::new(id.clone(), i), role, active.then_some(i))
            })
            .collect();
        let mut timers = TimerTable::default();
        if let Some(ms) = spec.schedule_timeout_ms {
            timers.set(Timer::ScheduleDeadline, now.plus_ms(ms));
        }
        let mut driver = Driver {
            budgets: Budgets::new(&spec.retries),
            id,
            submitted: now,
            finished_at: None,
            state: JobState::Pending,
            message: None,
            infeasible: None,
            waiting: None,
            closing: None,
            admitted: false,
            terminating: false,
            cycle: 0,
            world: Vec::new(),
            cycle_starts: Vec::new(),
            master: None,
            actors,
            ledger: Vec::new(),
            max_ledger_entries: DEFAULT_MAX_LEDGER_ENTRIES,
            charged_failures: 0,
            avoiding_preemptible: false,
            timers,
            attribution_window_ms,
            pending: BTreeMap::new(),
            losses: Vec::new(),
            losses_recorded: 0,
            charged_faults: VecDeque::new(),
            charged_losses: VecDeque::new(),
            incident_window_ms: 0,
            policy_fault: PolicyFault::None,
            rng: ChaCha8Rng::seed_from_u64(seed),
            effects: VecDeque::new(),
            spec,
        };
        driver.request_initial_bundles();
        driver
    }

    /// Test-only switch: run a deliberately wrong policy; the driver applies the faults that
    /// are its own and ignores the rest.
    pub fn inject_policy_fault(&mut self, fault: PolicyFault) {
        self.policy_fault = fault;
    }

    /// What the head's configuration of the moment sets, at submission and again at every
    /// restart: the bound on the ledger (`max_ledger_entries`) and the window of one
    /// incident (FC-2: a heartbeat interval and a half, since nodes failing together were
    /// each last heard at some point of the interval before).
    pub fn take_head_settings(&mut self, config: &crate::config::HeadConfig) {
        self.limit_ledger(config.max_ledger_entries);
        self.incident_window_ms = config.heartbeat_interval_ms.saturating_mul(3) / 2;
    }

    /// The head's bound on the ledger (`HeadConfig::max_ledger_entries`).
    fn limit_ledger(&mut self, entries: usize) {
        self.max_ledger_entries = entries.max(1);
    }

    /// A driver as a head that restarted finds it: its state snapshot, with the spec and
    /// ledger the store kept apart.
    pub fn restore(mut snapshot: Driver, spec: JobSpec, ledger: Vec<LedgerEntry>) -> Self {
        assert_eq!(snapshot.actors.len() as u32, spec.actor_count(), "job {}: snapshot and spec disagree", snapshot.id);
        snapshot.spec = spec;
        snapshot.ledger = ledger;
        snapshot
    }

    /// The rules of this job's restart mode: the one place the mode is looked at.
    fn mode(&self) -> &'static dyn Mode {
        match self.spec.restart {
            RestartMode::Gang => &gang::Gang,
            RestartMode::Actor => &actor_mode::ActorMode,
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
            DriverInput::Draining { actor, deadline, by } => self.on_draining(now, actor, deadline, by),
            DriverInput::Started { key } => self.on_started(key),
            DriverInput::Exited { key, status } => self.on_exited(now, key, status),
            DriverInput::SpawnFailed { key, message, node_fault } => {
                self.on_spawn_failed(now, key, message, node_fault)
            }
            DriverInput::AttemptLost { key, loss } => self.on_attempt_lost(now, key, &loss),
            DriverInput::NodeUnhealthy { actor } => self.on_node_unhealthy(now, actor),
            DriverInput::PortMoved { actor, port } => self.on_port_moved(actor, port),
            DriverInput::Feasibility(infeasible) => {
                self.infeasible = infeasible.clone();
                self.event(JobEvent::Feasibility { infeasible });
            }
            DriverInput::Waiting(why) => self.waiting = Some(why),
            DriverInput::NodeHeard(node) => self.on_node_heard(now, node),
            DriverInput::Stop => self.close(now, CloseReason::Stopped, Some("stopped by the user".into())),
        }
        self.reconcile(now);
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        if self.state.is_terminal() {
            return;
        }
        if self.timers.take_expired(Timer::ScheduleDeadline, now) {
            self.fail_unplaced(now);
        }
        if self.timers.take_expired(Timer::RunDeadline, now) {
            self.fail_overtime(now);
        }
        if self.timers.take_expired(Timer::ScaleUp, now) {
            self.begin_scale_up();
        }
        // Backoffs only keep things from starting; once over, reconcile starts them.
        self.timers.clear_expired_backoffs(now);
        self.decide_pending(now, Decide::WindowOver);
        self.reconcile(now);
    }

    pub fn poll_effect(&mut self) -> Option<DriverEffect> {
        self.effects.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.state.is_terminal() {
            return None;
        }
        self.timers.next()
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

    /// Will the schedule deadline fail the job at `now`, unless it is placed first?
    pub fn schedule_deadline_due(&self, now: Instant) -> bool {
        self.timers.get(Timer::ScheduleDeadline).is_some_and(|at| at <= now)
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

    pub fn finished_at(&self) -> Option<Instant> {
        self.finished_at
    }

    /// The required gang has been placed once.
    pub fn admitted(&self) -> bool {
        self.admitted
    }

    /// Later placements keep off preemptible nodes (`last_attempt_non_preemptible`).
    pub fn avoiding_preemptible(&self) -> bool {
        self.avoiding_preemptible
    }

    /// When each of the recent cycles formed.
    pub fn cycle_starts(&self) -> &[CycleStart] {
        &self.cycle_starts
    }

    pub fn timers(&self) -> &TimerTable {
        &self.timers
    }

    // ---- reconcile -------------------------------------------------------------------------

    /// After every input: decide what can be decided, ask for what is missing, start what can
    /// start.
    fn reconcile(&mut self, now: Instant) {
        if self.state.is_terminal() {
            return;
        }
        self.decide_pending(now, Decide::PeersHeard);
        if self.closing.is_some() {
            return self.finish_if_released(now);
        }
        self.keep_off_preemptible_nodes(now);
        self.hand_waiting_ranks_to_spares(now);
        self.refresh_requests();
        self.track_placement_deadline(now);
        self.mode().make_progress(self, now);
    }

    // ---- small helpers ---------------------------------------------------------------------

    fn key_of(&self, ix: ActorIx) -> AttemptKey {
        let run = self.actors[ix as usize].run.as_ref().expect("a live attempt");
        AttemptKey { job: self.id.clone(), actor: ix, attempt: run.attempt, cycle: run.cycle }
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

    fn transition(&mut self, ix: ActorIx, to: ActorState) {
        let actor = &mut self.actors[ix as usize];
        let from = actor.state;
        assert!(from.can_become(to), "{}: {from} → {to} is not a transition", actor.name);
        actor.state = to;
        if to != ActorState::Standby {
            actor.standby_since = None;
        }
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

    /// A spare with a usable bundle waits to take a rank's place, from `now`.
    fn stand_by(&mut self, now: Instant, ix: ActorIx) {
        self.transition(ix, ActorState::Standby);
        self.actors[ix as usize].standby_since = Some(now);
    }

    fn set_job_state(&mut self, now: Instant, to: JobState) {
        if self.state != to {
            let from = std::mem::replace(&mut self.state, to);
            let message = self.message.clone();
            self.event(JobEvent::JobState { from, to, message });
            if to == JobState::Running {
                self.start_run_clock(now);
            }
        }
    }

    /// `run_timeout_ms` counts from the job's first RUNNING, which it never leaves but for
    /// its end: restarts, waits for replacements and backoffs all count.
    fn start_run_clock(&mut self, now: Instant) {
        if let Some(ms) = self.spec.run_timeout_ms {
            self.timers.set(Timer::RunDeadline, now.plus_ms(ms));
        }
    }

    /// The job ran for its `run_timeout_ms`: it stops as `ftdrive stop` would stop it, and
    /// fails, charging no budget.
    fn fail_overtime(&mut self, now: Instant) {
        let ms = self.spec.run_timeout_ms.unwrap_or_default();
        let message = format!(
            "ran for its run_timeout_ms ({ms} ms), counted from when it first ran; raise it, or null for no limit"
        );
        self.close(now, CloseReason::Failed, Some(message));
    }

    fn event(&mut self, event: JobEvent) {
        self.effects.push_back(DriverEffect::Event(event));
    }

    /// Tells followers a restart waits out its backoff: the job's next cycle (`actor` None) or
    /// an actor's next attempt. A backoff of 0 is no wait and says nothing.
    fn backing_off(&mut self, actor: Option<ActorIx>, now: Instant, delay_ms: u64) {
        if delay_ms > 0 {
            let actor = actor.map(|ix| self.actors[ix as usize].name.clone());
            self.event(JobEvent::BackingOff { actor, until_ms: now.plus_ms(delay_ms).as_ms() });
        }
    }
}
