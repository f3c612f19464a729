//! The head state machine: the cluster's membership and failure detection, the scheduler,
//! and one driver per job, composed behind one shape — `handle(now, input)`,
//! `handle_timeout(now)`, `poll_effect()`, `poll_timeout()`. The daemon and the simulator
//! feed it inputs and carry out its effects; neither holds any policy of its own.
//!
//! ```text
//!   Input ──► membership.rs (register, heartbeats, drains, losses) ──┐
//!         ──► drivers ◄──────────────────────────────────────────────┤  BundlesLost, Draining, Exited, ...
//!                │ DriverEffect                                       │
//!                ▼                                                    │
//!            scheduler ── Placed ─────────────────────────────────────┘  (repeat until nothing changes: "settle")
//!                │
//!                ▼
//!   Effect: Send (to an agent) · Notify (events) · Persist (a job's durable state changed)
//! ```
//!
//! Over 600 lines: the head's one `handle`/`poll` surface and the settle loop that ties the
//! drivers to the scheduler; membership, attempts, liveness and durability live in their own
//! files.

mod attempts;
mod durable;
mod forget;
mod liveness;
mod membership;
mod ports;

pub use durable::{Counters, Durable, DurableState, JobRecord, NodeRecord, StoredJob};

use crate::config::HeadConfig;
use crate::driver::{BundlePlaced, Driver, DriverEffect, DriverInput, JobState, Loss, NodeRef};
use crate::event::Event;
use crate::ids::{ActorId, JobId, JobIdMint, NodeId};
use crate::protocol::{AttemptKey, ExitStatus, Registration, ToAgent, ToHead};
use crate::scheduler::{
    BundleState, NodeIx, NodeState, PgId, PgSpec, PolicyFault, QueueClass, QueueKey, SchedEvent, Scheduler,
    SchedulerConfig, WaitingMemo,
};
use crate::spec::JobSpec;
use crate::time::{earliest, Instant};
use crate::view::{self, JobView, NodeView};
use attempts::AttemptIndex;
use durable::{DirtyKey, Recovery};
use liveness::Liveness;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// Most rounds of driver ⇄ scheduler exchange one input may cause; more is a bug (a loop).
const MAX_SETTLE_ROUNDS: usize = 10_000;
const MAX_NAME_LEN: usize = 253;

/// Everything that can happen to the head.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Input {
    /// An agent (re)connects. A new `incarnation` for a known node means its agent restarted.
    Register(Box<Registration>),
    /// `running`: the attempts the agent has processes for; `seq` orders one agent's heartbeats.
    Heartbeat {
        node: NodeId,
        incarnation: u64,
        seq: u64,
        running: Vec<AttemptKey>,
        problem: Option<String>,
    },
    /// The ports listening on the node's machine (`ToHead::Listening`).
    Listening {
        node: NodeId,
        incarnation: u64,
        ports: Vec<u16>,
    },
    /// A start confirmed by the agent run `incarnation`.
    ProcessStarted {
        node: NodeId,
        incarnation: u64,
        key: AttemptKey,
    },
    ProcessExited {
        node: NodeId,
        key: AttemptKey,
        status: ExitStatus,
    },
    /// `node_fault`: the node could not start it, not the program (`ToHead::SpawnFailed`).
    SpawnFailed {
        node: NodeId,
        key: AttemptKey,
        message: String,
        node_fault: bool,
    },
    /// What keeps the node's agent from starting work, or `None` (`ToHead::Health`).
    Health {
        node: NodeId,
        incarnation: u64,
        problem: Option<String>,
    },
    /// The node's own agent says its machine goes away within `deadline_ms` (SIGTERM, a
    /// cloud's notice): only a new registration brings it back. A notice from an agent run
    /// older than the node's current one is refused (the machine came back since).
    PreemptionNotice {
        node: NodeId,
        incarnation: Option<u64>,
        deadline_ms: u64,
    },
    /// The operator's `ftdrive drain`: handled as a preemption notice, but the machine stays,
    /// so the operator may withdraw it. It lasts until `Undrain`, across the node's death.
    Drain {
        node: NodeId,
        deadline_ms: u64,
    },
    /// The operator's `ftdrive undrain`: `Drain`'s cordon is lifted, and a node it kept
    /// DRAINING is ALIVE again.
    Undrain {
        node: NodeId,
    },
    /// The operator's `ftdrive forget`: a DEAD node leaves the head, records and all; a node
    /// registering in its name later is new (`forget.rs`).
    Forget {
        node: NodeId,
    },
    /// A job submission; `id` is minted by the head when absent.
    Submit {
        id: Option<JobId>,
        spec: Box<JobSpec>,
    },
    Stop {
        job: JobId,
    },
    /// The runtime saw a node's agent connection drop: the node is suspect (DESIGN §3) until
    /// it is heard from again or declared DEAD.
    LinkLost {
        node: NodeId,
    },
}

impl From<ToHead> for Input {
    fn from(msg: ToHead) -> Input {
        match msg {
            ToHead::Register(registration) => Input::Register(registration),
            ToHead::Heartbeat { node, incarnation, seq, running, problem } => {
                Input::Heartbeat { node, incarnation, seq, running, problem }
            }
            ToHead::Started { node, incarnation, key } => Input::ProcessStarted { node, incarnation, key },
            ToHead::Exited { node, key, status } => Input::ProcessExited { node, key, status },
            ToHead::SpawnFailed { node, key, message, node_fault } => {
                Input::SpawnFailed { node, key, message, node_fault }
            }
            ToHead::Health { node, incarnation, problem } => Input::Health { node, incarnation, problem },
            ToHead::PreemptionNotice { node, incarnation, deadline_ms } => {
                Input::PreemptionNotice { node, incarnation, deadline_ms }
            }
            ToHead::Listening { node, incarnation, ports } => Input::Listening { node, incarnation, ports },
        }
    }
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
    #[error("the head knows no node `{0}` (none registered, or it was forgotten); `ftdrive nodes` lists the nodes")]
    NoSuchNode(NodeId),
    #[error("node `{0}` sent a message from an older agent run; only its newest registration counts")]
    StaleIncarnation(NodeId),
    #[error("no job `{}`; `ftdrive status` lists the jobs", shortened(.0.as_str()))]
    UnknownJob(JobId),
    /// An id the head handed out once whose job it no longer keeps.
    #[error(
        "job `{job}` has ended and was forgotten: the head keeps the last {kept} finished jobs for \
         {hours} hours (`ftdrive head --retain-finished`, `--retain-finished-hours`); its logs stay \
         on its nodes for their `--keep-logs-hours`, under `node-NAME/logs/{job}/` in each agent's `--state-dir`"
    )]
    ForgottenJob { job: JobId, kept: usize, hours: u64 },
    #[error("a job with id `{0}` exists already; choose another id")]
    DuplicateJob(JobId),
    #[error("{}; use 1 to 253 letters, digits, `-`, `_` or `.`, not dots alone", name_is_bad(.0))]
    BadName(String),
    #[error("the head holds {0} jobs, its limit (`max_jobs`); remove finished jobs or raise the limit")]
    TooManyJobs(usize),
    #[error(
        "the job has {asked} actors and the head holds {held} of other jobs, and it keeps at most {limit} \
         (`max_actors`); wait for jobs to end and be forgotten (`--retain-finished`), or ask for fewer nodes, \
         spares or workers"
    )]
    TooManyActors { asked: usize, held: usize, limit: usize },
    #[error("the cluster has {0} nodes, the head's limit (`max_nodes`)")]
    TooManyNodes(usize),
    #[error("node `{0}`'s registration {1}")]
    BadRegistration(NodeId, String),
    #[error("node `{0}` reported on attempt {1}, which runs on another node; a node reports only on its own")]
    NotItsAttempt(NodeId, AttemptKey),
    #[error("the drain deadline {0}; give a shorter one")]
    DeadlineTooLong(String),
    #[error(
        "node `{0}` cannot be undrained: its own agent announced that the machine is going away (SIGTERM or a \
         cloud's preemption notice); the node is ALIVE again once its agent starts anew and registers"
    )]
    LeavingNode(NodeId),
    #[error("{}", not_dead(.0, .1))]
    NotDead(NodeId, crate::scheduler::NodeState),
}

/// Why a live node cannot be forgotten, and how it becomes DEAD: an ALIVE one is drained first
/// so that its work moves; a DRAINING one already is.
fn not_dead(node: &NodeId, state: &crate::scheduler::NodeState) -> String {
    let drain_first = match state {
        crate::scheduler::NodeState::Alive => format!(" (after `ftdrive drain {node}` to move its work away)"),
        _ => String::new(),
    };
    let state = state.name();
    format!(
        "node `{node}` is {state}, and only a DEAD node can be forgotten: stop its agent{drain_first}; the head \
         declares it DEAD once `node_timeout_ms` passes without a heartbeat"
    )
}

/// What the head asks its runtime to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Deliver a message to a node's agent.
    Send { node: NodeId, msg: ToAgent },
    /// Tell followers (and the trace) what happened.
    Notify(Event),
    /// Something that must survive a restart changed: make it durable before carrying out
    /// any other effect of the same input (DU-1 in `durable.rs`).
    Persist(Durable),
}

/// A bundle waiting for re-placement, as the simulator's checkers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitingBundle {
    pub job: JobId,
    pub actor: u32,
    pub avoid_preemptible: bool,
}

/// A waiting item of the scheduler's queue, as the simulator's checkers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitingItem {
    pub bundle: WaitingBundle,
    pub class: QueueClass,
    /// The item stands for the job's whole required gang.
    pub gang: bool,
}

/// One page of a job listing, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobList {
    pub views: Vec<JobView>,
    /// The oldest job shown, when older ones would match too: where the next page ends.
    pub older: Option<String>,
}

/// A job: its driver and its placement group's id in the scheduler.
struct JobSlot {
    pg: PgId,
    driver: Driver,
}

/// The head-node state machine.
pub struct Head {
    config: HeadConfig,
    scheduler: Scheduler,
    jobs: BTreeMap<JobId, JobSlot>,
    /// The actors of every job held (running, pending and finished): what bounds the memory
    /// the jobs take (`max_actors`).
    actors_held: usize,
    by_pg: BTreeMap<PgId, JobId>,
    next_pg: PgId,
    job_ids: JobIdMint,
    liveness: Liveness,
    attempts: AttemptIndex,
    /// Driver timers: (deadline, job's group), and each job's current entry.
    timers: BTreeSet<(Instant, PgId)>,
    timer_of: BTreeMap<PgId, Instant>,
    /// Jobs with a failure waiting to be attributed: told of heartbeats (AT-1 in the driver).
    attributing: BTreeSet<PgId>,
    effects: VecDeque<Effect>,
    /// What this input changed that must be written (`durable.rs`).
    dirty: BTreeSet<DirtyKey>,
    /// After a restart: the nodes still to report before anything is placed.
    recovery: Option<Recovery>,
    /// Finished jobs kept for `status`, oldest first.
    finished: BTreeSet<(Instant, PgId)>,
    /// Jobs that finished in the input being handled: kept until the next one.
    finished_now: Vec<PgId>,
    /// DEAD nodes, longest dead first (`forget.rs`).
    dead_nodes: BTreeSet<(Instant, NodeIx)>,
    /// A death was noted since retention last looked (`forget.rs`).
    trim_due: bool,
    /// DU-3 (`durable.rs`): the longest re-attach grace a running supervisor may hold.
    grace_bound_ms: u64,
}

impl Head {
    pub fn new(config: HeadConfig) -> Self {
        config.validate().unwrap_or_else(|e| panic!("invalid head config: {e}"));
        let scheduler = Scheduler::new(SchedulerConfig {
            starvation_ms: config.starvation_ms,
            master_port_base: config.master_port_base,
            ports_per_node: config.ports_per_node,
        });
        let grace_bound_ms = config.node_timeout_ms;
        Head {
            config,
            scheduler,
            jobs: BTreeMap::new(),
            actors_held: 0,
            by_pg: BTreeMap::new(),
            next_pg: 1,
            job_ids: JobIdMint::default(),
            liveness: Liveness::default(),
            attempts: AttemptIndex::default(),
            timers: BTreeSet::new(),
            timer_of: BTreeMap::new(),
            attributing: BTreeSet::new(),
            effects: VecDeque::new(),
            // The grace bound is written with the first input (DU-3).
            dirty: BTreeSet::from([durable::DirtyKey::Counters]),
            recovery: None,
            finished: BTreeSet::new(),
            finished_now: Vec::new(),
            dead_nodes: BTreeSet::new(),
            trim_due: false,
            grace_bound_ms,
        }
    }

    pub fn config(&self) -> &HeadConfig {
        &self.config
    }

    /// Minted job ids start at `j<first>` at the earliest (an embedded cluster numbers on
    /// across runs); never below what was handed out already.
    pub fn start_job_ids_at(&mut self, first: u64) {
        if first > self.job_ids.next_number() {
            self.job_ids = JobIdMint::starting_at(first);
        }
    }

    /// An id used before (a finished job kept elsewhere): never minted again.
    pub fn note_job_id(&mut self, id: &JobId) {
        self.job_ids.note(id);
    }

    /// Test-only switch: run a deliberately wrong policy.
    pub fn inject_policy_fault(&mut self, fault: PolicyFault) {
        self.scheduler.inject_policy_fault(fault);
        if fault == PolicyFault::ForgetAttemptsOnRestart && self.recovering() {
            self.attempts = AttemptIndex::default();
        }
        for slot in self.jobs.values_mut() {
            slot.driver.inject_policy_fault(fault);
        }
    }

    // ---- the state-machine shape ---------------------------------------------------------

    pub fn handle(&mut self, now: Instant, input: Input) -> Result<Reply, Rejected> {
        let reply = match input {
            Input::Register(mut registration) => {
                let (node, listening) = (registration.node.clone(), std::mem::take(&mut registration.listening));
                let problem = registration.problem.take();
                let reply = self.register(now, *registration)?;
                // Before anything is placed on the node (`settle`, below): PS-3, AG-6.
                let ix = self.scheduler.node_ix(&node).expect("a node just registered is known");
                self.note_listening(now, ix, listening);
                self.note_health(now, ix, problem);
                reply
            }
            Input::Heartbeat { node, incarnation, seq, running, problem } => {
                self.heartbeat(now, node, incarnation, seq, &running, problem)?
            }
            Input::Listening { node, incarnation, ports } => self.listening(now, node, incarnation, ports)?,
            Input::ProcessStarted { node, incarnation, key } => self.process_started(now, node, incarnation, key)?,
            Input::ProcessExited { node, key, status } => {
                let owed_since = self.take_owed_since(&node, &key);
                if status.supervisor_lost {
                    let loss = self.supervisor_loss(now, &node, owed_since);
                    self.process_ended(now, node, key, |key| DriverInput::AttemptLost { key, loss })?
                } else if let Some(loss) = self.forgotten_start(&node, &key, &status) {
                    self.process_ended(now, node, key, |key| DriverInput::AttemptLost { key, loss })?
                } else {
                    self.process_ended(now, node, key, |key| DriverInput::Exited { key, status })?
                }
            }
            Input::SpawnFailed { node, key, message, node_fault } => {
                let node_fault = match node_fault {
                    true => Some(self.node_could_not_start(now, &node, &key, &message)?),
                    false => None,
                };
                self.process_ended(now, node, key, |key| DriverInput::SpawnFailed { key, message, node_fault })?
            }
            Input::Health { node, incarnation, problem } => self.health(now, node, incarnation, problem)?,
            Input::PreemptionNotice { node, incarnation, deadline_ms } => {
                self.preemption_notice(now, node, incarnation, deadline_ms)?
            }
            Input::Drain { node, deadline_ms } => self.drain(now, node, deadline_ms)?,
            Input::Undrain { node } => self.undrain(now, node)?,
            Input::Forget { node } => self.forget_named(node)?,
            Input::Submit { id, spec } => self.submit(now, id, *spec)?,
            Input::Stop { job } => self.stop(now, job)?,
            Input::LinkLost { node } => self.link_lost(node),
        };
        self.hold_attributions();
        self.settle(now);
        self.trim_finished();
        self.trim_dead_nodes();
        self.emit_persists();
        Ok(reply)
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.expire_silent_nodes(now);
        self.end_recovery_at(now);
        self.hold_attributions();
        self.expire_finished(now);
        let due: Vec<(Instant, PgId)> = self.timers.range(..=(now, PgId::MAX)).copied().collect();
        for (at, pg) in due {
            self.timers.remove(&(at, pg));
            self.timer_of.remove(&pg);
            self.tell_why_unplaced(now, pg);
            self.driver_mut(pg).handle_timeout(now);
            self.touch_job(pg);
            self.flush_driver(pg);
        }
        self.settle(now);
        self.trim_finished();
        self.trim_dead_nodes();
        self.emit_persists();
    }

    /// FD-3: while nodes are held through a disruption, or not yet settled after one, failures
    /// waiting on a peer's loss wait until they are (a node heard from decides them sooner,
    /// AT-1).
    fn hold_attributions(&mut self) {
        let Some(until) = self.liveness.settled_by() else { return };
        for pg in self.attributing.clone() {
            self.driver_mut(pg).hold_attribution_until(until);
            self.flush_driver(pg);
        }
    }

    /// A job its schedule deadline is about to fail hears the scheduler's current reason: the
    /// count it kept from the turn to infeasible may be stale, and a busy cluster sends none.
    fn tell_why_unplaced(&mut self, now: Instant, pg: PgId) {
        if !self.driver_of(pg).schedule_deadline_due(now) {
            return;
        }
        let infeasible = self.scheduler.pg(pg).and_then(|p| p.infeasible.clone());
        if let Some(why) = infeasible.or_else(|| self.waiting_reason(pg, &mut WaitingMemo::default())) {
            self.driver_mut(pg).handle(now, DriverInput::Waiting(why));
        }
    }

    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        let soonest = earliest(self.liveness.next_expiry(), self.timers.first().map(|(t, _)| *t));
        if self.recovery.is_none() && self.finished.is_empty() {
            return soonest; // the common case, asked after every step of a large simulation
        }
        let recovery = self.recovery.as_ref().map(|r| r.until);
        earliest(earliest(soonest, recovery), self.next_expiry())
    }

    // ---- processes -------------------------------------------------------------------------

    /// A confirmation counts only from the agent run the head knows: one from a run whose
    /// registration has not arrived yet is refused (the head re-sends the start, and that run
    /// confirms again once registered) — so a registration never overlooks what it confirmed.
    fn process_started(
        &mut self,
        now: Instant,
        node: NodeId,
        incarnation: u64,
        key: AttemptKey,
    ) -> Result<Reply, Rejected> {
        let ix = self.scheduler.node_ix(&node).ok_or_else(|| Rejected::UnknownNode(node.clone()))?;
        if self.liveness.get(ix).is_none_or(|r| r.incarnation != incarnation) {
            return Err(Rejected::StaleIncarnation(node));
        }
        if self.attempts.runs_elsewhere(ix, &key) {
            return Err(Rejected::NotItsAttempt(node, key));
        }
        self.confirm_started(now, ix, key);
        Ok(Reply::Done)
    }

    /// The agent runs the attempt: said by its `Started`, or by a heartbeat that lists it when
    /// that message was lost (HB-1 in `membership.rs`).
    fn confirm_started(&mut self, now: Instant, ix: NodeIx, key: AttemptKey) {
        self.attempts.acked(ix, &key);
        if let Some(pg) = self.jobs.get(&key.job).map(|j| j.pg) {
            self.feed(now, pg, DriverInput::Started { key });
        }
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
        let ix = self.reporting_node(&node, &key)?;
        self.effects.push_back(Effect::Send { node, msg: ToAgent::AckExit { key: key.clone() } });
        let was_live = self.attempts.ended(ix, &key);
        if let Some(pg) = self.jobs.get(&key.job).map(|j| j.pg) {
            if was_live {
                // PS-4, before the driver hears of the end, which may start the next attempt
                // at once: the agent read what listens after the attempt's processes were gone
                // and before it reported the end, so a listener on the port in its last report
                // is not its rank 0. Another agent of the machine may have read before the end.
                self.move_off_busy_port(now, pg, key.actor, true);
            }
            self.feed(now, pg, input(key));
        }
        Ok(Reply::Done)
    }

    /// SL-1: an attempt whose supervisor died without a record (killed outright, with the
    /// machine's other processes, or by the OOM killer) was lost as with its node, at a time
    /// nobody saw: no earlier than the node's agent was last heard before the report — the
    /// agent run before a restart, for an end the restarted one owes. A peer's crash after that
    /// may have been a reaction to it (AT-1), and it is charged as a lost node is (`node_lost`,
    /// or the drain's `preempted`). Reported as a bare exit, it read as stopped once its gang
    /// was stopped (free), and a restarted agent's first heartbeat had the peer's crash decided
    /// a user error first (a real cluster: an agent and its attempts killed, the agent back in
    /// a second). The date is kept in the node's durable record until the node is heard from
    /// after the incident, so that the rest of it, reported to a head restarted meanwhile,
    /// shares it (FC-1 charges it once).
    fn supervisor_loss(&mut self, now: Instant, node: &NodeId, owed_since: Option<Instant>) -> Loss {
        let ix = self.scheduler.node_ix(node);
        let interval_ms = self.config.heartbeat_interval_ms;
        let record = ix.and_then(|ix| self.liveness.get_mut(ix));
        let silent_since = match (owed_since, record) {
            (Some(at), _) => at,
            (None, None) => now,
            (None, Some(record)) => match record.incident_date(now, interval_ms) {
                Some(at) => at,
                None => {
                    record.lost_supervisors = Some((record.last_heard, now));
                    let at = record.last_heard;
                    self.touch_node(ix.expect("a node with a record")); // the date outlives a head restart
                    at
                }
            },
        };
        let draining = ix.is_some_and(|ix| self.scheduler.node(ix).state == NodeState::Draining);
        let evidence = format!("the attempt supervisor on {node} died without a record; the agent ended its workers");
        Loss { node: node.clone(), preemptible: false, draining, silent_since, unheard_since_restart: false, evidence }
    }

    /// When the agent run that `node`'s restarted agent owes `key`'s end for was last heard,
    /// if it owes one (SL-1); taken, since an end is reported once.
    fn take_owed_since(&mut self, node: &NodeId, key: &AttemptKey) -> Option<Instant> {
        let ix = self.scheduler.node_ix(node)?;
        let owed = self.liveness.get_mut(ix)?.owed_since.remove(key)?;
        self.touch_node(ix);
        Some(owed)
    }

    /// The node that reports an attempt's end, if the attempt may end there.
    fn reporting_node(&self, node: &NodeId, key: &AttemptKey) -> Result<NodeIx, Rejected> {
        let ix = self.scheduler.node_ix(node).ok_or_else(|| Rejected::UnknownNode(node.clone()))?;
        if self.attempts.runs_elsewhere(ix, key) {
            return Err(Rejected::NotItsAttempt(node.clone(), key.clone()));
        }
        Ok(ix)
    }

    // ---- jobs --------------------------------------------------------------------------------

    fn submit(&mut self, now: Instant, id: Option<JobId>, spec: JobSpec) -> Result<Reply, Rejected> {
        if self.jobs.len() >= self.config.max_jobs {
            return Err(Rejected::TooManyJobs(self.jobs.len()));
        }
        let (asked, held, limit) = (spec.actor_count() as usize, self.actors_held, self.config.max_actors);
        if held.saturating_add(asked) > limit {
            return Err(Rejected::TooManyActors { asked, held, limit });
        }
        let id = match id {
            Some(id) => {
                check_name(id.as_str())?;
                if self.jobs.contains_key(&id) {
                    return Err(Rejected::DuplicateJob(id));
                }
                self.job_ids.note(&id);
                id
            }
            None => self.job_ids.mint(|id| self.jobs.contains_key(id)),
        };
        let pg = self.next_pg;
        self.next_pg += 1;
        self.scheduler.create_pg(pg, pg_spec(&spec, now));
        let seed = self.config.seed ^ pg.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let name = spec.name.clone();
        let window = self.config.node_timeout_ms;
        let mut driver = Driver::new(id.clone(), spec, now, seed, window);
        driver.inject_policy_fault(self.scheduler.policy_fault());
        driver.take_head_settings(&self.config);
        self.actors_held += driver.spec().actor_count() as usize;
        self.jobs.insert(id.clone(), JobSlot { pg, driver });
        self.by_pg.insert(pg, id.clone());
        self.touch_job(pg);
        self.flush_driver(pg);
        self.notify(Event::JobSubmitted { job: id.clone(), name });
        Ok(Reply::Submitted(id))
    }

    fn stop(&mut self, now: Instant, job: JobId) -> Result<Reply, Rejected> {
        let Some(pg) = self.jobs.get(&job).map(|j| j.pg) else { return Err(self.no_job(job)) };
        self.feed(now, pg, DriverInput::Stop);
        Ok(Reply::Done)
    }

    // ---- settle: drivers ⇄ scheduler ---------------------------------------------------------

    /// Runs scheduling passes, handing placements to drivers, until nothing changes. While a
    /// restarted head waits for its nodes (DU-3), or the head for those it held through a
    /// disruption (FD-2 in `liveness.rs`), nothing is placed.
    fn settle(&mut self, now: Instant) {
        for _ in 0..MAX_SETTLE_ROUNDS {
            self.route_scheduler_events(now);
            if !self.scheduler.is_dirty() || self.recovery.is_some() || self.liveness.unsettled() {
                return;
            }
            self.scheduler.set_suspects(self.liveness.suspects(now, self.config.suspect_after_ms()));
            self.scheduler.schedule(now);
        }
        panic!("head did not settle after {MAX_SETTLE_ROUNDS} rounds");
    }

    /// One input to one driver, its effects applied at once: the scheduler and the driver
    /// never disagree between two inputs.
    fn feed(&mut self, now: Instant, pg: PgId, input: DriverInput) {
        self.driver_mut(pg).handle(now, input);
        self.touch_job(pg);
        self.flush_driver(pg);
    }

    /// Applies a driver's pending effects and re-arms its timer.
    fn flush_driver(&mut self, pg: PgId) {
        while let Some(effect) = self.driver_mut(pg).poll_effect() {
            self.apply(pg, effect);
        }
        let driver = &self.jobs[&self.by_pg[&pg]].driver;
        let wanted = driver.poll_timeout();
        match driver.awaits_attribution() {
            true => self.attributing.insert(pg),
            false => self.attributing.remove(&pg),
        };
        if let Some(old) = self.timer_of.remove(&pg) {
            self.timers.remove(&(old, pg));
        }
        if let Some(at) = wanted {
            self.timers.insert((at, pg));
            self.timer_of.insert(pg, at);
        }
    }

    fn apply(&mut self, pg: PgId, effect: DriverEffect) {
        let job = self.by_pg[&pg].clone();
        match effect {
            DriverEffect::RequestGang => self.scheduler.request_gang(pg),
            DriverEffect::Request { actor, need } => self.scheduler.request(pg, actor, need),
            DriverEffect::Cancel { actor } => self.scheduler.cancel(pg, actor),
            DriverEffect::Release { actor } => {
                let node = self.bundle_node(pg, actor);
                self.scheduler.release(pg, actor);
                self.notify(Event::Released { actor: ActorId::new(job.clone(), actor), job, node });
            }
            DriverEffect::AvoidPreemptible => self.scheduler.avoid_preemptible(pg),
            DriverEffect::Start { node, spec } => {
                let ix = self.scheduler.node_ix(&node).expect("starting on a known node");
                let spec = Arc::new(spec);
                self.attempts.started(ix, Arc::clone(&spec));
                self.effects.push_back(Effect::Send { node, msg: ToAgent::Start(spec) });
            }
            DriverEffect::Stop { node, key, grace_ms } => {
                let ix = self.scheduler.node_ix(&node).expect("stopping on a known node");
                self.attempts.stopping(ix, &key, grace_ms);
                self.effects.push_back(Effect::Send { node, msg: ToAgent::Stop { key, grace_ms } });
            }
            DriverEffect::AttemptEnded { node, key } => {
                let ix = self.scheduler.node_ix(&node).expect("attempt on a known node");
                let _ = self.attempts.ended(ix, &key);
            }
            DriverEffect::Event(detail) => self.notify(Event::Job { job, detail }),
            DriverEffect::Finished => {
                self.scheduler.remove_pg(pg);
                let at = self.jobs[&job].driver.finished_at().expect("a finished job knows when");
                self.note_finished(pg, at);
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
                    let job = self.by_pg[&p.pg].clone();
                    let actor = ActorId::new(job.clone(), p.bundle);
                    self.notify(Event::Placed {
                        actor,
                        job,
                        node: node.name.clone(),
                        class: p.class,
                        devices: p.devices,
                    });
                    let placed = BundlePlaced { actor: p.bundle, node, port: p.port, devices: p.devices };
                    batches.entry(p.pg).or_default().push(placed);
                }
                SchedEvent::Feasibility { pg, infeasible } => self.feed(now, pg, DriverInput::Feasibility(infeasible)),
            }
        }
        for (pg, batch) in batches {
            self.feed(now, pg, DriverInput::Placed(batch));
        }
    }

    fn node_ref(&self, pg: PgId, ix: NodeIx) -> NodeRef {
        let node = self.scheduler.node(ix);
        let pack_by = self.scheduler.pg(pg).and_then(|pg| pg.pack_by.as_ref());
        NodeRef {
            name: node.name.clone(),
            addr: self.liveness.get(ix).map_or_else(|| node.name.to_string(), |r| r.addr.clone()),
            preemptible: node.preemptible,
            domain: pack_by.and_then(|key| node.labels.get(key).cloned()),
        }
    }

    fn bundle_node(&self, pg: PgId, bundle: u32) -> NodeId {
        match self.scheduler.pg(pg).map(|pg| pg.bundles[bundle as usize]) {
            Some(BundleState::Placed { node, .. }) => self.scheduler.node(node).name.clone(),
            other => panic!("bundle {bundle} of group {pg} is {other:?}, not placed"),
        }
    }

    fn driver_of(&self, pg: PgId) -> &Driver {
        &self.jobs[&self.by_pg[&pg]].driver
    }

    fn driver_mut(&mut self, pg: PgId) -> &mut Driver {
        let id = &self.by_pg[&pg];
        &mut self.jobs.get_mut(id).expect("job of a known group").driver
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
        self.by_pg.values().map(|id| &self.jobs[id].driver)
    }

    pub fn job_view(&self, job: &JobId) -> Option<JobView> {
        self.job_view_sharing(job, &mut WaitingMemo::default(), usize::MAX)
    }

    fn job_view_sharing(&self, job: &JobId, memo: &mut WaitingMemo, ledger_kept: usize) -> Option<JobView> {
        let slot = self.jobs.get(job)?;
        let waiting = self.waiting_reason(slot.pg, memo);
        Some(view::job_view(&slot.driver, &self.scheduler, slot.pg, waiting, ledger_kept))
    }

    /// Why a job waits: for the agents after a restart (nothing is placed meanwhile, DU-3), or
    /// the scheduler's reason.
    fn waiting_reason(&self, pg: PgId, memo: &mut WaitingMemo) -> Option<String> {
        let Some(r) = &self.recovery else {
            let job = |p: PgId| self.by_pg[&p].to_string();
            return self.scheduler.waiting_reason(pg, &job, memo);
        };
        self.scheduler.waits(pg).then(|| {
            format!(
                "waiting for the agents to report after the head's restart: nothing is placed until every known \
                 node has ({} still to report) or {} ms have passed",
                r.waiting.len(),
                self.config.node_timeout_ms
            )
        })
    }

    /// Why the head has no job `job`: it never had one, or it forgot it (retention).
    pub fn no_job(&self, job: JobId) -> Rejected {
        if !self.job_ids.handed_out(&job) {
            return Rejected::UnknownJob(job);
        }
        let hours = self.config.retain_finished_ms / 3_600_000;
        Rejected::ForgottenJob { job, kept: self.config.retain_finished, hours }
    }

    /// Jobs held: running, pending, and finished ones kept for `status`.
    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// Every job, in submission order.
    pub fn job_views(&self) -> Vec<JobView> {
        self.job_views_where(|_| true, usize::MAX)
    }

    /// The newest `limit` jobs in a state `wanted` takes, in submission order, whole.
    pub fn job_views_where(&self, wanted: impl Fn(JobState) -> bool, limit: usize) -> Vec<JobView> {
        self.views_where(|_, state| wanted(state), limit, usize::MAX).views
    }

    /// A listing (`ftdrive status --state RUNNING --limit 20`): the newest `limit` jobs that
    /// `wanted` takes (given each job's id and state), each with its newest
    /// `LIST_LEDGER_ENTRIES` ledger entries.
    pub fn job_list(&self, wanted: impl Fn(&JobId, JobState) -> bool, limit: usize) -> JobList {
        self.views_where(wanted, limit, view::LIST_LEDGER_ENTRIES)
    }

    /// Builds only the views it shows.
    fn views_where(&self, wanted: impl Fn(&JobId, JobState) -> bool, limit: usize, ledger_kept: usize) -> JobList {
        let mut memo = WaitingMemo::default();
        let mut matching = self.by_pg.values().rev().filter(|id| wanted(id, self.jobs[*id].driver.state()));
        let shown: Vec<&JobId> = matching.by_ref().take(limit).collect();
        // Newest first here: the last shown is the oldest, where the next page ends.
        let older = matching.next().and(shown.last()).map(|id| id.to_string());
        let mut views: Vec<JobView> =
            shown.iter().map(|id| self.job_view_sharing(id, &mut memo, ledger_kept).expect("a job of by_pg")).collect();
        views.reverse();
        JobList { views, older }
    }

    /// How many nodes the head holds through a disruption rather than declaring them DEAD
    /// (FD-1), and how many it held until one was heard from that are neither heard from
    /// nor DEAD since (FD-2: placements wait for them).
    pub fn nodes_held(&self) -> (usize, usize) {
        self.liveness.held_counts()
    }

    /// The agent run the head has registered for an alive node: what a runtime compares a
    /// closed connection's run with, so that the close of a run replaced since is not taken
    /// for the node's.
    pub fn registered_incarnation(&self, node: &NodeId) -> Option<u64> {
        let ix = self.scheduler.node_ix(node)?;
        self.liveness.get(ix).filter(|r| r.alive).map(|r| r.incarnation)
    }

    /// Every node ever seen, by name, as of `now` (which of them are suspect).
    pub fn node_views(&self, now: Instant) -> Vec<NodeView> {
        self.scheduler.nodes().map(|(ix, _)| self.view_of_node(ix, now)).collect()
    }

    pub fn node_view(&self, node: &NodeId, now: Instant) -> Option<NodeView> {
        self.scheduler.node_ix(node).map(|ix| self.view_of_node(ix, now))
    }

    fn view_of_node(&self, ix: NodeIx, now: Instant) -> NodeView {
        let r = self.liveness.get(ix).expect("known node has a record");
        let suspect = self.liveness.suspect(ix, now, self.config.suspect_after_ms());
        let marks = view::NodeMarks { addr: r.addr.clone(), cordoned: r.cordoned, leaving: r.leaving, suspect };
        view::node_view(&self.scheduler, ix, marks)
    }

    /// Bundles waiting in the replacement class, in queue order.
    pub fn waiting_replacements(&self) -> Vec<WaitingBundle> {
        let queue = self.scheduler.queue();
        queue.take_while(|k| k.class == QueueClass::Replacement).map(|k| self.waiting_bundle(k)).collect()
    }

    /// Items waiting past the replacements that a pass offers capacity to (infeasible ones
    /// are parked and hold nothing), in queue order, with their class.
    pub fn waiting_items(&self) -> Vec<WaitingItem> {
        let queue = self.scheduler.queue().filter(|k| k.class != QueueClass::Replacement);
        queue.map(|k| WaitingItem { bundle: self.waiting_bundle(k), class: k.class, gang: k.is_gang() }).collect()
    }

    /// The bundle a queue item waits for; a pending gang's item stands for its bundle 0 (its
    /// bundles are alike).
    fn waiting_bundle(&self, k: &QueueKey) -> WaitingBundle {
        WaitingBundle {
            job: self.by_pg[&k.pg].clone(),
            actor: if k.is_gang() { 0 } else { k.bundle },
            avoid_preemptible: self.scheduler.pg(k.pg).is_some_and(|pg| pg.avoid_preemptible),
        }
    }

    /// Does the scheduler still hold or queue anything for this job?
    pub fn holds_anything(&self, job: &JobId) -> bool {
        self.jobs.get(job).is_some_and(|slot| self.scheduler.pg(slot.pg).is_some())
    }

    // ---- checks ------------------------------------------------------------------------------

    /// Asserts that drivers and scheduler agree: every bundle a driver believes placed is
    /// placed there, terminal actors hold nothing, finished jobs hold nothing; and that no
    /// cordoned node is ALIVE (MB-1).
    pub fn check_invariants(&self) {
        self.scheduler.check_invariants();
        self.check_cordons();
        let actors: usize = self.jobs.values().map(|slot| slot.driver.spec().actor_count() as usize).sum();
        assert_eq!(self.actors_held, actors, "the actors held are those of the jobs held");
        for slot in self.jobs.values() {
            let d = &slot.driver;
            let pg = self.scheduler.pg(slot.pg);
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
                    (
                        crate::driver::Bundle::Placed { node, port, .. },
                        Some(BundleState::Placed { node: at, port: held, .. }),
                    ) => {
                        assert_eq!(node.name, self.scheduler.node(at).name, "{} placed on two nodes", actor.name);
                        assert_eq!(*port, held, "{} on two ports (PS-4)", actor.name);
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

/// At most the first 100 characters of a name a client gave, for an error that quotes it: a
/// 5,000-character id was quoted whole.
fn shortened(name: &str) -> String {
    const SHOWN: usize = 100;
    match name.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}… ({} characters)", &name[..cut], name.chars().count()),
        None => name.to_string(),
    }
}

fn name_is_bad(name: &str) -> String {
    if name.is_empty() {
        "a name cannot be empty".to_string()
    } else {
        format!("`{}` is not a valid name", shortened(name))
    }
}

/// The one rule for job and node names: they become file names on agents (`node-NAME`,
/// `JOB/ACTOR/...`) and path segments in URLs, so nothing that could climb out of a directory,
/// nor `.` or `..`, which every HTTP client folds out of a path (`ftdrive drain ..` reached
/// no node).
pub fn check_name(name: &str) -> Result<(), Rejected> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.chars().all(|c| c == '.');
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
