//! The deterministic simulator (DESIGN §8): the real head state machine under a virtual clock,
//! simulated agents and processes, and a simulated network — all driven by one `u64` seed.
//! Nothing here decides policy; it only produces inputs and carries out the head's effects.
//!
//! ```text
//!   event queue (time, seq) ──► fault / heartbeat / delivery / process end
//!        ▲                              │
//!        │ network: delay, drop,        ▼
//!        │ duplicate (seeded)     Head::handle / handle_timeout
//!        │                              │ effects
//!        └──────── Send ◄───────────────┤
//!                                       ▼
//!                          Notify ──► trace line + checkers (after every step)
//! ```
//!
//! One file, over 600 lines: the step loop, the fault injection and the simulated machines
//! share the one `Simulation` state; split, they would only hand it back and forth.

mod agent;
pub mod check;
mod network;
mod queue;
pub mod scenario;
pub mod store;
pub mod summary;
pub mod swarm;
pub mod trace;

pub use check::{Checker, FenceSeen, Violation};
pub use scenario::{Fault, FaultEvent, JobDef, NetworkSpec, NodeDef, Scenario, ScenarioError};
pub use store::MemoryStore;

use crate::agent::{AgentEffect, AgentInput};
use crate::config::HeadConfig;
use crate::event::Event;
use crate::head::{Effect, Head, Input, Rejected};
use crate::ids::{JobId, NodeId};
use crate::protocol::{AttemptKey, ExitStatus, StartSpec, ToAgent, ToHead};
use crate::scheduler::PolicyFault;
use crate::spec::RestartMode;
use crate::time::{earliest, Instant};
use crate::view::JobView;
use agent::{SimAgent, SimProcess};
use network::Network;
use queue::{Entry, EventQueue, PeriodicTimers};
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use trace::Trace;

/// Most steps one run may take; a run that needs more is stuck in a loop (a bug).
pub const MAX_STEPS: u64 = 2_000_000_000;
/// Longest a simulated process takes to exit after SIGTERM, if it does not ignore it.
const MAX_TERM_MS: u64 = 2_000;

/// How to run a scenario.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// Keep the trace lines (for `--trace`); the hash is kept either way when hashing.
    pub keep_trace: bool,
    /// Hash the trace (needed to compare runs); costs a JSON line per event.
    pub hash_trace: bool,
    /// Run the invariant checkers after every step.
    pub checks: bool,
    /// Stop at the first violation.
    pub stop_on_violation: bool,
    /// Test-only: run a deliberately wrong scheduling policy.
    pub policy_fault: PolicyFault,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            keep_trace: false,
            hash_trace: true,
            checks: true,
            stop_on_violation: true,
            policy_fault: PolicyFault::None,
        }
    }
}

/// Counters of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimStats {
    pub steps: u64,
    pub messages: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub heartbeats: u64,
    pub processes_started: u64,
    /// Scenario events that found nothing to act on (a `process_exit` of a rank not running).
    pub faults_without_target: u64,
}

/// The outcome of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimReport {
    pub seed: u64,
    pub end_ms: u64,
    pub trace_hash: String,
    pub trace_events: u64,
    #[serde(skip)]
    pub trace: Vec<String>,
    pub jobs: Vec<JobView>,
    pub violations: Vec<Violation>,
    pub stats: SimStats,
}

enum SimEvent {
    Fault(Box<Fault>),
    Submit(JobId),
    /// Messages belong to one run of the head (`epoch`): a restart loses those in flight.
    ToHead {
        node: u32,
        epoch: u64,
        msg: Box<ToHead>,
    },
    ToAgent {
        node: u32,
        epoch: u64,
        msg: Box<ToAgent>,
    },
    /// The head starts again from what it made durable.
    HeadUp,
    /// An agent finds the restarted head and registers again — the agent run that lost its
    /// link: one started since connected on its own (a second link-up without a link-down
    /// is no real link's).
    Reconnect {
        node: u32,
        incarnation: u64,
        epoch: u64,
    },
    Rejected {
        node: u32,
        incarnation: u64,
    },
    /// The connection of an agent run that ended on a live machine closes: the head's
    /// runtime sees it (`Input::LinkLost`) unless a later run of the node registered first.
    LinkClosed {
        node: u32,
        incarnation: u64,
        epoch: u64,
    },
    /// Machine events carry the machine's boot: they end with it, but outlive an agent restart.
    /// `stopped`: the end of a stop the head asked for.
    ProcessEnd {
        node: u32,
        boot: u64,
        stopped: bool,
        key: AttemptKey,
        status: ExitStatus,
    },
    DrainDeadline {
        node: u32,
        boot: u64,
    },
    /// The agent protocol's own timer (its fence, AG-7), for one agent run.
    AgentTimer {
        node: u32,
        incarnation: u64,
        at: Instant,
    },
    Heal,
}

impl SimEvent {
    /// A message between the head and an agent (a cut of the head's network holds it).
    fn crosses_the_head_network(&self) -> bool {
        matches!(
            self,
            SimEvent::ToHead { .. }
                | SimEvent::ToAgent { .. }
                | SimEvent::Rejected { .. }
                | SimEvent::LinkClosed { .. }
        )
    }
}

/// One simulated cluster run.
pub struct Simulation {
    seed: u64,
    now: Instant,
    until: Instant,
    head: Head,
    config: HeadConfig,
    /// What the head made durable; kept when the scenario restarts the head.
    store: Option<MemoryStore>,
    /// Runs of the head so far; messages of an earlier run are lost.
    head_epoch: u64,
    head_up: bool,
    agents: Vec<SimAgent>,
    agent_of: BTreeMap<NodeId, u32>,
    jobs: BTreeMap<JobId, JobDef>,
    queue: EventQueue<SimEvent>,
    /// Heartbeat timers, apart from the queue: one per agent incarnation, all one period.
    heartbeats: PeriodicTimers,
    next_seq: u64,
    network: Network,
    process_rng: ChaCha8Rng,
    checker: Option<Checker>,
    options: SimOptions,
    trace: Trace,
    step_events: Vec<Event>,
    violations: Vec<Violation>,
    stats: SimStats,
    next_stale_check: Instant,
    /// Faults have stopped: a node that goes away (its preemption deadline) comes back.
    healed: bool,
    /// Nodes the operator drained and has not undrained: the heal withdraws those drains.
    operator_drained: BTreeSet<NodeId>,
    /// Nodes the scenario starts with.
    initial_nodes: u64,
    /// Ports processes outside ftdrive listen on, by machine (`Fault::PortListener`).
    listeners: BTreeMap<String, BTreeSet<u16>>,
    /// The scenario starts such processes, so agents read what listens on their machines.
    models_listeners: bool,
    /// When every job must have ended (`liveness_at_ms`); taken once the check has run.
    liveness_at: Option<Instant>,
    /// The head's network is cut until then (`Fault::HeadCut`): messages to and from it wait.
    head_cut_until: Instant,
}

impl Simulation {
    /// Sets up `scenario` under `seed` (the scenario's own seed is only a default).
    pub fn new(scenario: &Scenario, seed: u64, options: SimOptions) -> Self {
        let mut config = scenario.config.clone();
        config.seed = seed;
        let mut head = Head::new(config.clone());
        head.inject_policy_fault(options.policy_fault);
        let streams = ChaCha8Rng::seed_from_u64(seed).next_u64();
        let max_grace = scenario.jobs.iter().map(|j| j.spec.stop_grace_ms).max().unwrap_or(0);
        // A stop sent into a cut of the head's network waits for its end.
        let cuts_ms: u64 =
            scenario.events.iter().map(|e| if let Fault::HeadCut { for_ms } = e.what { for_ms } else { 0 }).sum();
        let stale_bound_ms = 2 * config.node_timeout_ms
            + 10 * config.heartbeat_interval_ms
            + max_grace.max(MAX_TERM_MS)
            + 10 * scenario.network.max_delay_ms
            + cuts_ms;
        let restarts_head = scenario.events.iter().any(|e| matches!(e.what, Fault::HeadRestart { .. }));
        let mut sim = Simulation {
            seed,
            now: Instant::ZERO,
            until: Instant::from_ms(scenario.until_ms),
            head,
            config: config.clone(),
            store: restarts_head.then(MemoryStore::default),
            head_epoch: 0,
            head_up: true,
            agents: Vec::new(),
            agent_of: BTreeMap::new(),
            jobs: scenario.jobs.iter().map(|j| (j.id.clone(), j.clone())).collect(),
            queue: EventQueue::default(),
            heartbeats: PeriodicTimers::default(),
            next_seq: 0,
            network: Network::new(scenario.network, streams ^ 0x6e65_7477),
            process_rng: ChaCha8Rng::seed_from_u64(streams ^ 0x7072_6f63),
            checker: options.checks.then(|| {
                let mut checker = Checker::new(stale_bound_ms, scenario.network.drop_ppm == 0);
                checker.check_suspect_holds(config.suspect_after_ms() + scenario.network.max_delay_ms);
                checker.check_starvation_holds(config.starvation_ms);
                let delays_ms = 2 * scenario.network.max_delay_ms + cuts_ms;
                // Once a hold of the head ends, a held node's count starts over (FD-1).
                let recount_ms = config.node_timeout_ms + config.heartbeat_interval_ms + scenario.network.max_delay_ms;
                checker
                    .bound_incidents(config.node_timeout_ms + 2 * config.heartbeat_interval_ms + delays_ms, recount_ms);
                let net = scenario.network;
                // PS-4 moves a bundle to a free port: where a machine's pool is short of two
                // nodes' shares, a bundle on a busy port may have none to move to.
                let ports_to_spare = config.ports_per_machine() >= 2 * u32::from(config.ports_per_node);
                let orderly = net.drop_ppm == 0 && net.duplicate_ppm == 0 && net.min_delay_ms == net.max_delay_ms;
                if orderly && ports_to_spare {
                    checker.check_busy_ports();
                }
                checker
            }),
            trace: Trace { keep: options.keep_trace, ..Trace::default() },
            step_events: Vec::new(),
            violations: Vec::new(),
            stats: SimStats::default(),
            next_stale_check: Instant::ZERO,
            healed: false,
            operator_drained: BTreeSet::new(),
            initial_nodes: scenario.nodes.len() as u64,
            listeners: BTreeMap::new(),
            models_listeners: scenario.events.iter().any(|e| matches!(e.what, Fault::PortListener { .. })),
            liveness_at: scenario.liveness_at_ms.map(Instant::from_ms),
            head_cut_until: Instant::ZERO,
            options,
        };
        sim.schedule_scenario(scenario);
        sim
    }

    fn schedule_scenario(&mut self, scenario: &Scenario) {
        // Every heartbeat bumps its node name's reference count. Names allocated together, in
        // node order, turn those writes into a stride the memory system can predict.
        let names: Vec<NodeId> = scenario.nodes.iter().map(|n| NodeId::new(n.name.as_str())).collect();
        for (node, name) in scenario.nodes.iter().zip(names) {
            let ix = self.agents.len() as u32;
            let (resources, labels) = (node.resources.clone(), node.labels.clone());
            self.agents.push(SimAgent::new(name.clone(), resources, labels, node.port_space.clone()));
            self.agent_of.insert(name, ix);
        }
        for node in &scenario.nodes {
            self.push(Instant::ZERO, SimEvent::Fault(Box::new(Fault::NodeJoin { node: node.clone() })));
        }
        for job in &scenario.jobs {
            self.push(Instant::from_ms(job.submit_at_ms), SimEvent::Submit(job.id.clone()));
        }
        for event in &scenario.events {
            self.push(Instant::from_ms(event.at_ms), SimEvent::Fault(Box::new(event.what.clone())));
        }
        if let Some(at) = scenario.heal_at_ms {
            self.push(Instant::from_ms(at), SimEvent::Heal);
        }
    }

    fn push(&mut self, at: Instant, event: SimEvent) {
        self.next_seq += 1;
        self.queue.push(Entry { at, seq: self.next_seq, payload: event });
    }

    // ---- running -------------------------------------------------------------------------

    /// Runs to `until_ms` (or the first violation) and reports.
    pub fn run(mut self) -> SimReport {
        while self.step() {}
        self.finish()
    }

    /// One step: the earliest scenario event, delivery or timer — or the head's timeout when
    /// it comes first. Returns false when the run is over.
    pub fn step(&mut self) -> bool {
        let next_event = self.queue.peek_key();
        let next_beat = self.heartbeats.peek_key();
        let first = match (next_event, next_beat) {
            (Some(e), Some(b)) => Some(e.min(b)),
            (e, b) => e.or(b),
        };
        let next_timeout = if self.head_up { self.head.poll_timeout() } else { None };
        let Some(at) = earliest(first.map(|(t, _)| t), next_timeout) else { return false };
        if at > self.until {
            return false;
        }
        if self.liveness_at.is_some_and(|l| at > l) {
            self.check_liveness(); // on the state every input up to that moment left
        }
        self.now = self.now.max(at);
        self.queue.advance_to(self.now);
        self.stats.steps += 1;
        assert!(self.stats.steps < MAX_STEPS, "simulation of seed {} did not end", self.seed);
        match first {
            Some(key) if key.0 <= at && Some(key) == next_beat => {
                let (_, _, node) = self.heartbeats.pop().expect("peeked");
                self.heartbeat(node);
            }
            Some(key) if key.0 <= at => {
                let entry = self.queue.pop().expect("peeked");
                self.process(entry.payload);
            }
            _ => self.head.handle_timeout(self.now),
        }
        self.after_step();
        !self.options.stop_on_violation || self.violations.is_empty()
    }

    /// Every job must have ended by `liveness_at_ms`: checked once, when the run passes that
    /// moment or ends (the scenario puts it no later than `until_ms`).
    fn check_liveness(&mut self) {
        let Some(at) = self.liveness_at.take() else { return };
        if let Some(checker) = self.checker.as_mut().filter(|_| self.violations.is_empty()) {
            checker.check_liveness(at, &self.head);
            self.violations.extend(checker.take());
        }
    }

    fn finish(mut self) -> SimReport {
        self.check_liveness(); // nothing happens between the last step and `until_ms`
        self.stats.messages = self.network.sent;
        self.stats.dropped = self.network.dropped;
        self.stats.duplicated = self.network.duplicated;
        SimReport {
            seed: self.seed,
            end_ms: self.now.as_ms(),
            trace_hash: format!("{:016x}", self.trace.hash.0),
            trace_events: self.trace.count,
            trace: std::mem::take(&mut self.trace.lines),
            jobs: self.head.job_views(),
            violations: self.violations,
            stats: self.stats,
        }
    }

    /// Carries out the head's effects, records the trace and runs the checkers.
    fn after_step(&mut self) {
        self.carry_out_effects();
        if let (true, Some(checker)) = (self.head_up, self.checker.as_mut()) {
            checker.note_hold(self.now, self.head.nodes_held().0 > 0);
        }
        if self.step_events.is_empty() && self.now < self.next_stale_check {
            return;
        }
        let events = std::mem::take(&mut self.step_events);
        if self.options.hash_trace || self.options.keep_trace {
            for event in &events {
                self.trace.record(self.now, event);
            }
        }
        if let Some(checker) = self.checker.as_mut() {
            checker.observe(self.stats.steps, self.now, &events, &self.head);
            if self.now >= self.next_stale_check {
                checker.check_stale_processes(self.now);
                self.next_stale_check = self.now.plus_ms(1_000);
            }
            self.violations.extend(checker.take());
        }
        self.step_events = events;
        self.step_events.clear();
    }

    fn process(&mut self, event: SimEvent) {
        if let Some(until) = self.cut_until().filter(|_| event.crosses_the_head_network()) {
            self.push(until, event);
            return;
        }
        match event {
            SimEvent::Fault(fault) => self.fault(*fault),
            SimEvent::Submit(job) => self.submit(&job),
            SimEvent::ToHead { node, epoch, msg } => {
                if self.head_up && epoch == self.head_epoch {
                    self.deliver_to_head(node, *msg);
                }
            }
            SimEvent::ToAgent { node, epoch, msg } => {
                if epoch == self.head_epoch {
                    self.deliver_to_agent(node, *msg);
                }
            }
            SimEvent::HeadUp => self.head_up(),
            SimEvent::Reconnect { node, incarnation, epoch } => {
                if epoch == self.head_epoch && self.is_current(node, incarnation) {
                    self.agent_input(node, AgentInput::LinkUp);
                }
            }
            SimEvent::LinkClosed { node, incarnation, epoch } => self.link_closed(node, incarnation, epoch),
            SimEvent::Rejected { node, incarnation } => {
                if self.is_current(node, incarnation) {
                    let refusal = ToAgent::Refused { reason: "unknown node".into(), register_again: true };
                    self.agent_input(node, AgentInput::FromHead(refusal));
                }
            }
            SimEvent::ProcessEnd { node, boot, stopped, key, status } => {
                if self.is_current_boot(node, boot) {
                    let running = self.agents[node as usize].processes.contains_key(&key);
                    if let (true, true, Some(checker)) = (stopped, running, self.checker.as_mut()) {
                        checker.process_stopped(&key);
                    }
                    self.end_process(node, &key, status);
                }
            }
            SimEvent::DrainDeadline { node, boot } => {
                if self.is_current_boot(node, boot) {
                    self.crash(node);
                    if self.healed {
                        self.boot(node);
                    }
                }
            }
            SimEvent::AgentTimer { node, incarnation, at } => {
                if self.is_current(node, incarnation) && self.agents[node as usize].timer_at == Some(at) {
                    self.agents[node as usize].timer_at = None;
                    self.agents[node as usize].agent.handle_timeout(self.now);
                    self.carry_out_agent_effects(node);
                }
            }
            SimEvent::Heal => self.heal(),
        }
    }

    // ---- scenario events -------------------------------------------------------------------

    fn fault(&mut self, fault: Fault) {
        match fault {
            Fault::NodeJoin { node } => self.join(node),
            Fault::NodeCrash { node } => {
                let ix = self.agent_of[&node];
                let lost: Vec<AttemptKey> = self.agents[ix as usize].processes.keys().cloned().collect();
                self.crash(ix);
                self.react_to_lost(&lost);
            }
            Fault::AgentCrash { node } => {
                let ix = self.agent_of[&node];
                self.crash_agent(ix);
            }
            Fault::AgentRestart { node, labels, resources } => {
                let ix = self.agent_of[&node];
                if self.agents[ix as usize].up {
                    self.offer(ix, labels, resources);
                    self.restart_agent(ix);
                }
            }
            Fault::NodeDrain { node, deadline_ms } => self.drain(&node, deadline_ms),
            Fault::ProcessExit { job, rank, exit_code, signal, local_rank } => {
                let status = match (exit_code, signal) {
                    (Some(code), _) => ExitStatus::code(code),
                    (None, sig) => ExitStatus::signal(sig.unwrap_or(9), false),
                };
                let status = ExitStatus { worker: local_rank, ..status };
                self.kill_rank(&job, rank, status);
            }
            Fault::StopJob { job } => {
                self.operator(Input::Stop { job });
            }
            Fault::OperatorDrain { node, deadline_ms } => {
                if self.operator(Input::Drain { node: node.clone(), deadline_ms }) {
                    self.note_cordon(node, true);
                }
            }
            Fault::OperatorUndrain { node } => {
                if self.operator(Input::Undrain { node: node.clone() }) {
                    self.note_cordon(node, false);
                }
            }
            Fault::OperatorForget { node } => {
                if self.operator(Input::Forget { node: node.clone() }) {
                    self.note_cordon(node, false); // FG-2: its cordon went with it
                }
            }
            Fault::HeadRestart { down_ms } => self.head_down(down_ms),
            Fault::HeadCut { for_ms } => self.cut_head(for_ms),
            Fault::PortListener { node, port } => {
                let ix = self.agent_of[&node];
                self.start_listener(ix, port);
            }
            Fault::DiskFull { node, for_ms } => {
                let ix = self.agent_of[&node];
                let until = self.now.plus_ms(for_ms);
                let machine = &mut self.agents[ix as usize];
                machine.disk_full_until = Some(machine.disk_full_until.map_or(until, |u| u.max(until)));
                if let Some(checker) = self.checker.as_mut() {
                    checker.disk_full(&node);
                }
            }
        }
    }

    /// The agent's probe (`actors/src/node/health.rs`), at its heartbeat: a disk that takes
    /// writes again makes an unhealthy agent well.
    fn probe_health(&mut self, ix: u32) {
        let machine = &self.agents[ix as usize];
        if machine.agent.problem().is_some() && !machine.disk_full(self.now) {
            self.agent_input(ix, AgentInput::Health(None));
        }
    }

    /// A process outside ftdrive binds `port` on the machine, unless a rank 0 listens there.
    fn start_listener(&mut self, ix: u32, port: u16) {
        let machine = self.agents[ix as usize].port_space_key().to_string();
        if self.listening_on(&machine).contains(&port) {
            self.stats.faults_without_target += 1;
            return;
        }
        self.listeners.entry(machine).or_default().insert(port);
    }

    /// What listens on a machine: processes outside ftdrive, and rank 0s of its agents.
    fn listening_on(&self, machine: &str) -> BTreeSet<u16> {
        let mut ports = self.listeners.get(machine).cloned().unwrap_or_default();
        let agents = self.agents.iter().filter(|a| a.port_space_key() == machine);
        ports.extend(agents.flat_map(|a| a.processes.values().filter_map(|p| p.listens_on)));
        ports
    }

    /// The agent reads what listens on its machine (`ftdrive node` does before it registers
    /// and at each heartbeat); only where the scenario starts listeners, so that other
    /// scenarios send what they always sent.
    fn read_listening(&mut self, ix: u32) {
        if self.models_listeners {
            let ports = self.listening_on(self.agents[ix as usize].port_space_key());
            self.agent_input(ix, AgentInput::Listening(ports.into_iter().collect()));
        }
    }

    /// A command of the operator's (`ftdrive stop`, `drain`, `undrain`); one the head refuses, or
    /// cannot be reached for, had no target. Returns whether the head took it.
    fn operator(&mut self, input: Input) -> bool {
        let taken = self.head_up && self.head.handle(self.now, input).is_ok();
        if !taken {
            self.stats.faults_without_target += 1;
        }
        taken
    }

    /// The head took the operator's drain (`drained`) or undrain of `node`.
    fn note_cordon(&mut self, node: NodeId, drained: bool) {
        if let Some(checker) = self.checker.as_mut() {
            checker.operator_cordon(&node, drained);
        }
        if drained {
            self.operator_drained.insert(node);
        } else {
            self.operator_drained.remove(&node);
        }
    }

    fn submit(&mut self, job: &JobId) {
        if !self.head_up {
            // The client retries until the head is back.
            let retry = self.now.plus_ms(self.config.heartbeat_interval_ms);
            return self.push(retry, SimEvent::Submit(job.clone()));
        }
        let def = self.jobs[job].clone();
        if let Some(checker) = self.checker.as_mut() {
            checker.job_submitted(job, &def.spec);
        }
        let input = Input::Submit { id: Some(job.clone()), spec: Box::new(def.spec) };
        if let Err(e) = self.head.handle(self.now, input) {
            self.violation("submission_rejected", format!("{job}: {e}"));
        }
    }

    fn join(&mut self, def: NodeDef) {
        let fence_after_ms = def.fence_after_ms;
        let ix = match self.agent_of.get(&def.name) {
            Some(&ix) => {
                let agent = &mut self.agents[ix as usize];
                (agent.resources, agent.labels, agent.port_space) = (def.resources, def.labels, def.port_space);
                if agent.up {
                    self.crash(ix);
                    if let Some(checker) = self.checker.as_mut() {
                        checker.machine_rebooted(&self.agents[ix as usize].name);
                    }
                }
                ix
            }
            None => {
                let ix = self.agents.len() as u32;
                self.agents.push(SimAgent::new(def.name.clone(), def.resources, def.labels, def.port_space));
                self.agent_of.insert(def.name, ix);
                ix
            }
        };
        self.agents[ix as usize].fence_after_ms = fence_after_ms;
        self.boot(ix);
    }

    /// The machine (re)starts its agent with nothing running.
    fn boot(&mut self, ix: u32) {
        let machine = &mut self.agents[ix as usize];
        machine.die();
        machine.boot += 1;
        let recovered = machine.agent.recoverable_after_reboot();
        machine.start_agent(recovered);
        let agent = &self.agents[ix as usize];
        if let Some(checker) = self.checker.as_mut() {
            checker.node_booted(&agent.name, &agent.resources, &agent.labels);
        }
        // An agent that comes back before its old timer fired keeps that timer (and phase).
        if !agent.ticking {
            let phase = self.heartbeat_phase(ix);
            self.agents[ix as usize].ticking = true;
            self.next_seq += 1;
            self.heartbeats.insert(self.now.plus_ms(phase), self.next_seq, ix);
        }
        self.read_listening(ix);
        self.agent_input(ix, AgentInput::LinkUp);
    }

    /// The head dies: agents lose their link (their messages in flight are lost with it) and
    /// keep their work; the head comes back `down_ms` later.
    fn head_down(&mut self, down_ms: u64) {
        if !self.head_up {
            self.stats.faults_without_target += 1;
            return;
        }
        self.head_up = false;
        self.head_epoch += 1;
        for ix in 0..self.agents.len() as u32 {
            if self.agents[ix as usize].up {
                self.agent_input(ix, AgentInput::LinkDown);
            }
        }
        self.push(self.now.plus_ms(down_ms), SimEvent::HeadUp);
    }

    /// The head's network is cut for `for_ms`: what crosses it waits for the end of the cut,
    /// and agents' pings go unanswered meanwhile (a fenced agent's let-in is no longer heard).
    fn cut_head(&mut self, for_ms: u64) {
        self.head_cut_until = self.head_cut_until.max(self.now.plus_ms(for_ms));
        for machine in &mut self.agents {
            machine.let_in_at = None;
        }
        let (now, until, in_flight_ms) = (self.now, self.head_cut_until, self.network.max_delay_ms());
        if let Some(checker) = self.checker.as_mut() {
            checker.head_cut(now, until, in_flight_ms);
        }
    }

    /// When the cut of the head's network ends, if it is cut now.
    fn cut_until(&self) -> Option<Instant> {
        Some(self.head_cut_until).filter(|until| *until > self.now)
    }

    /// The head starts from its durable state; each agent reconnects within a heartbeat.
    fn head_up(&mut self) {
        let state = self.store.as_ref().expect("a restarting head has a store").read();
        self.head = Head::restore(self.config.clone(), state, self.now);
        self.head.inject_policy_fault(self.options.policy_fault);
        self.head_up = true;
        if let Some(checker) = self.checker.as_mut() {
            checker.head_restarted(self.now);
        }
        self.withdraw_operator_drains();
        let interval = self.config.heartbeat_interval_ms;
        for ix in 0..self.agents.len() as u32 {
            let machine = &self.agents[ix as usize];
            if machine.up {
                let (incarnation, epoch) = (machine.incarnation, self.head_epoch);
                let after = 1 + self.process_rng.next_u64() % interval;
                self.push(self.now.plus_ms(after), SimEvent::Reconnect { node: ix, incarnation, epoch });
            }
        }
    }

    /// The machine's next agent offers other labels or resources.
    fn offer(&mut self, ix: u32, labels: Option<crate::Labels>, resources: Option<crate::Resources>) {
        let machine = &mut self.agents[ix as usize];
        machine.labels.extend(labels.unwrap_or_default());
        for (kind, milli) in resources.unwrap_or_default().iter() {
            machine.resources = machine.resources.clone().with_milli(kind, milli);
        }
        if let Some(checker) = self.checker.as_mut() {
            checker.agent_offers(&machine.name, &machine.resources, &machine.labels);
        }
    }

    /// The agent process restarts; the machine, its processes (under their supervisors) and
    /// its records of owed reports stay. The new agent re-attaches and registers.
    fn restart_agent(&mut self, ix: u32) {
        self.close_link(ix);
        let machine = &mut self.agents[ix as usize];
        let recovered = machine.agent.recoverable();
        machine.start_agent(recovered);
        self.read_listening(ix);
        self.agent_input(ix, AgentInput::LinkUp);
    }

    /// The agent and the processes it supervised are killed together; the machine stays up,
    /// and a new agent starts at once and finds their supervisors dead without a record.
    fn crash_agent(&mut self, ix: u32) {
        if !self.agents[ix as usize].up {
            self.stats.faults_without_target += 1;
            return;
        }
        self.close_link(ix);
        let machine = &mut self.agents[ix as usize];
        let recovered = machine.agent.recoverable_with_supervisors_killed();
        let lost: Vec<AttemptKey> = std::mem::take(&mut machine.processes).into_keys().collect();
        if let Some(checker) = self.checker.as_mut() {
            checker.agent_crashed(&machine.name);
            for key in &lost {
                checker.process_ended(&machine.name, key);
            }
        }
        machine.start_agent(recovered);
        self.read_listening(ix);
        self.agent_input(ix, AgentInput::LinkUp);
        self.react_to_lost(&lost);
    }

    /// Each process of a gang that reacts to lost peers (`JobDef::react_to_lost_peer_ms`)
    /// exits 1 soon after a peer of its cycle was lost with its machine or agent, if it still
    /// runs then: its ring broke. Not before a message could cross the network: a rank learns
    /// of its peer's death no sooner than a heartbeat the dead node sent before it dies reaches
    /// the head, which AT-1 assumes (a heartbeat read after the exit shows the node alive then).
    fn react_to_lost(&mut self, lost: &[AttemptKey]) {
        for key in lost {
            let Some(job) = self.jobs.get(&key.job) else { continue };
            let Some(within_ms) = job.react_to_lost_peer_ms.filter(|_| job.spec.restart == RestartMode::Gang) else {
                continue;
            };
            for ix in 0..self.agents.len() as u32 {
                let machine = &self.agents[ix as usize];
                let (boot, up) = (machine.boot, machine.up);
                let is_peer = |k: &&AttemptKey| k.job == key.job && k.cycle == key.cycle && k.actor != key.actor;
                let peers: Vec<AttemptKey> = machine.processes.keys().filter(is_peer).cloned().collect();
                for peer in peers.into_iter().filter(|_| up) {
                    let noticed_ms = self.network.max_delay_ms() + 1;
                    let at = self.now.plus_ms(noticed_ms + self.process_rng.next_u64() % within_ms.max(1));
                    let status = ExitStatus::code(1);
                    self.push(at, SimEvent::ProcessEnd { node: ix, boot, stopped: false, key: peer, status });
                }
            }
        }
    }

    /// When an agent's first heartbeat goes out. The scenario's nodes spread evenly over one
    /// interval in table order, so heartbeats sweep memory in order instead of hopping (a
    /// large cluster is memory-bound); nodes that join later start at a random phase.
    fn heartbeat_phase(&mut self, ix: u32) -> u64 {
        let interval = self.head.config().heartbeat_interval_ms;
        if self.now == Instant::ZERO && u64::from(ix) < self.initial_nodes {
            1 + u64::from(ix) * interval / self.initial_nodes
        } else {
            1 + self.process_rng.next_u64() % interval
        }
    }

    fn crash(&mut self, ix: u32) {
        let machine = &mut self.agents[ix as usize];
        if let Some(checker) = self.checker.as_mut() {
            checker.machine_lost(&machine.name, self.now);
            for key in machine.processes.keys() {
                checker.process_ended(&machine.name, key);
            }
        }
        machine.die();
    }

    fn drain(&mut self, node: &NodeId, deadline_ms: u64) {
        let ix = self.agent_of[node];
        let machine = &self.agents[ix as usize];
        if !machine.up || machine.agent.has_preemption_notice() {
            self.stats.faults_without_target += 1;
            return;
        }
        let boot = machine.boot;
        if let Some(checker) = self.checker.as_mut() {
            checker.node_drained(node);
        }
        self.push(self.now.plus_ms(deadline_ms), SimEvent::DrainDeadline { node: ix, boot });
        self.agent_input(ix, AgentInput::PreemptionNotice { deadline_ms });
    }

    fn kill_rank(&mut self, job: &JobId, rank: u32, status: ExitStatus) {
        let found = self.agents.iter().enumerate().find_map(|(ix, a)| {
            let key = a.processes.iter().find(|(k, p)| k.job == *job && p.rank == rank).map(|(k, _)| k.clone());
            key.filter(|_| a.up).map(|k| (ix as u32, k))
        });
        match found {
            Some((ix, key)) => {
                if let (false, Some(checker)) = (status.success(), self.checker.as_mut()) {
                    checker.process_failed(&key);
                }
                self.end_process(ix, &key, status)
            }
            None => self.stats.faults_without_target += 1,
        }
    }

    fn heal(&mut self) {
        self.healed = true;
        self.network.set_spec(NetworkSpec::perfect());
        for machine in &mut self.agents {
            machine.disk_full_until = None; // faults stop: the next probe finds the disk well
        }
        let down: Vec<u32> = (0..self.agents.len() as u32).filter(|ix| !self.agents[*ix as usize].up).collect();
        for ix in down {
            if let Some(checker) = self.checker.as_mut() {
                checker.machine_booted(&self.agents[ix as usize].name);
            }
            self.boot(ix);
        }
        self.withdraw_operator_drains();
    }

    /// Once healed, the operator undrains what it drained (with the head down, when it is
    /// back), so that the liveness check sees the cluster whole. A drain the machine itself
    /// announced stays: that machine goes away at its deadline and boots again.
    fn withdraw_operator_drains(&mut self) {
        if !self.healed || !self.head_up {
            return;
        }
        for node in std::mem::take(&mut self.operator_drained) {
            let undrain = Input::Undrain { node: node.clone() };
            self.head.handle(self.now, undrain).expect("the head takes back a drain it took (MB-1)");
            self.carry_out_effects();
            self.note_cordon(node, false);
        }
    }

    /// The effects of the head's last input, carried out before its next one (as the daemon
    /// does: a `Persist` writes the head's state as it is then).
    fn carry_out_effects(&mut self) {
        while let Some(effect) = self.head.poll_effect() {
            match effect {
                Effect::Send { node, msg } => self.send_to_agent(&node, msg),
                Effect::Notify(event) => self.step_events.push(event),
                Effect::Persist(durable) => {
                    if let Some(store) = self.store.as_mut() {
                        store.write(&self.head, durable);
                    }
                }
            }
        }
    }

    // ---- agents ----------------------------------------------------------------------------

    /// The agent run of `ix` ends on a live machine: its kernel closes its connection, and
    /// the close reaches the head as TCP delivers it — late, never lost (a machine's death
    /// closes nothing).
    fn close_link(&mut self, ix: u32) {
        if !self.head_up {
            return;
        }
        let (incarnation, epoch) = (self.agents[ix as usize].incarnation, self.head_epoch);
        let delay = self.network.max_delay_ms();
        self.push(self.now.plus_ms(delay), SimEvent::LinkClosed { node: ix, incarnation, epoch });
    }

    /// As the head's runtime does: the close of a connection the node's registered run
    /// still holds makes the node suspect; that of a run replaced since changes nothing.
    fn link_closed(&mut self, ix: u32, incarnation: u64, epoch: u64) {
        let node = self.agents[ix as usize].name.clone();
        let current = self.head.registered_incarnation(&node) == Some(incarnation);
        if !(self.head_up && epoch == self.head_epoch && current) {
            return;
        }
        if let Err(refused) = self.head.handle(self.now, Input::LinkLost { node }) {
            self.violation("unexpected_rejection", refused.to_string());
        }
    }

    fn is_current(&self, ix: u32, incarnation: u64) -> bool {
        let agent = &self.agents[ix as usize];
        agent.up && agent.incarnation == incarnation
    }

    fn is_current_boot(&self, ix: u32, boot: u64) -> bool {
        let machine = &self.agents[ix as usize];
        machine.up && machine.boot == boot
    }

    /// An agent's heartbeat timer fires. A dead agent's timer stops; a booted one restarts it.
    fn heartbeat(&mut self, ix: u32) {
        if !self.agents[ix as usize].up {
            self.agents[ix as usize].ticking = false;
            return;
        }
        self.stats.heartbeats += 1;
        let now = self.now;
        self.read_listening(ix);
        self.probe_health(ix);
        // A fenced agent pings the head; a head that is up answers (AG-7).
        let answered = self.options.policy_fault != PolicyFault::PingsUnheard;
        if self.head_up && self.cut_until().is_none() && self.agents[ix as usize].fenced && answered {
            self.agent_input(ix, AgentInput::HeadHeard);
        }
        self.agent_input(ix, AgentInput::Heartbeat);
        let interval = self.head.config().heartbeat_interval_ms;
        self.next_seq += 1;
        let seq = self.next_seq;
        self.heartbeats.insert_last(now.plus_ms(interval), seq, ix);
    }

    fn deliver_to_agent(&mut self, ix: u32, msg: ToAgent) {
        if self.agents[ix as usize].up {
            self.agent_input(ix, AgentInput::FromHead(msg));
        }
    }

    /// One input to a machine's agent, and its effects carried out by the machine.
    fn agent_input(&mut self, ix: u32, input: AgentInput) {
        if matches!(input, AgentInput::LinkDown) {
            self.agents[ix as usize].let_in_at = None;
        }
        self.agents[ix as usize].agent.handle(self.now, input);
        self.carry_out_agent_effects(ix);
    }

    /// The agent's effects, carried out by the machine; then its timer, queued where it moved.
    fn carry_out_agent_effects(&mut self, ix: u32) {
        while let Some(effect) = self.agents[ix as usize].agent.poll_effect() {
            match effect {
                AgentEffect::Send(msg) => self.send_to_head(ix, msg),
                AgentEffect::Spawn(spec) => self.spawn(ix, *spec),
                AgentEffect::Stop { key, grace_ms, fence } => self.signal_stop(ix, key, grace_ms, fence),
                // Its stops follow as their own effects.
                AgentEffect::Fenced { .. } => {
                    let machine = &self.agents[ix as usize];
                    let fence = FenceSeen {
                        let_in_at: machine.let_in_at,
                        fence_after_ms: machine.fence_after_ms.expect("only a fenced agent fences"),
                        ping_every_ms: self.config.heartbeat_interval_ms,
                    };
                    if let Some(checker) = self.checker.as_mut() {
                        checker.agent_fenced(&machine.name, fence);
                    }
                }
                AgentEffect::Forget { .. }
                | AgentEffect::HeartbeatEvery { .. }
                | AgentEffect::JoinedCluster { .. }
                | AgentEffect::ShutDown => {}
            }
        }
        self.arm_agent_timer(ix);
    }

    /// Queues the agent protocol's timer where it stands now; one queued before, found moved
    /// when it fires, does nothing. Only a fenced agent has one here (no shutdown is simulated).
    fn arm_agent_timer(&mut self, ix: u32) {
        let machine = &mut self.agents[ix as usize];
        if !machine.fenced {
            return;
        }
        let at = machine.agent.poll_timeout();
        if at == machine.timer_at {
            return;
        }
        machine.timer_at = at;
        if let Some(at) = at {
            let incarnation = machine.incarnation;
            self.push(at.max(self.now), SimEvent::AgentTimer { node: ix, incarnation, at });
        }
    }

    fn spawn(&mut self, ix: u32, spec: StartSpec) {
        let key = spec.key;
        // The agent's own part comes first: its state dir (AG-6).
        if self.agents[ix as usize].disk_full(self.now) {
            let name = &self.agents[ix as usize].name;
            let message = format!("cannot create /var/lib/ftdrive/node-{name}/attempts: No space left on device");
            let input = AgentInput::SpawnFailed { key, message, node_fault: true };
            return self.agents[ix as usize].agent.handle(self.now, input);
        }
        if let Some(message) = self.jobs.get(&key.job).and_then(|j| j.spawn_error.clone()) {
            return self.agents[ix as usize]
                .agent
                .handle(self.now, AgentInput::SpawnFailed { key, message, node_fault: false });
        }
        let rank = spec.group_rank;
        // Group rank 0 holds the rendezvous: it listens on MASTER_PORT on its machine, or
        // fails at once where something else does.
        let port = spec.env.get("MASTER_PORT").and_then(|p| p.parse::<u16>().ok()).filter(|_| rank == 0);
        let machine = self.agents[ix as usize].port_space_key();
        let in_use = port.filter(|p| self.listeners.get(machine).is_some_and(|l| l.contains(p)));
        let listens_on = port.filter(|_| in_use.is_none());
        self.agents[ix as usize].processes.insert(key.clone(), SimProcess { rank, started: self.now, listens_on });
        self.process_started(ix, &key, listens_on, in_use);
        self.agents[ix as usize].agent.handle(self.now, AgentInput::Spawned { key });
    }

    /// A stopped process takes up to MAX_TERM_MS to honour SIGTERM; past the grace it is killed.
    /// A stop reaches the process; its end, as its supervisor records it, names the fence
    /// that made the stop (AG-8).
    fn signal_stop(&mut self, ix: u32, key: AttemptKey, grace_ms: u64, fence: Option<std::num::NonZeroU32>) {
        if !self.agents[ix as usize].processes.contains_key(&key) {
            return;
        }
        let term_ms = self.process_rng.next_u64() % (MAX_TERM_MS + 1);
        let (after, signal) = if term_ms <= grace_ms { (term_ms, 15) } else { (grace_ms, 9) };
        let boot = self.agents[ix as usize].boot;
        let status = ExitStatus { fence, ..ExitStatus::signal(signal, true) };
        self.push(self.now.plus_ms(after), SimEvent::ProcessEnd { node: ix, boot, stopped: true, key, status });
    }

    /// A process runs for its job's `run_ms` and exits 0; a rank 0 whose port something else
    /// listens on (`in_use`) exits 1 within a few milliseconds.
    fn process_started(&mut self, ix: u32, key: &AttemptKey, listens_on: Option<u16>, in_use: Option<u16>) {
        self.stats.processes_started += 1;
        let agent = &self.agents[ix as usize];
        if let Some(checker) = self.checker.as_mut() {
            let listens = listens_on.map(|port| (agent.port_space_key().to_string(), port));
            checker.process_started(&agent.name, key, listens);
            if let Some(port) = in_use {
                checker.process_failed(key);
                checker.port_in_use(key, agent.port_space_key(), port);
            }
        }
        let (run_ms, status) = if in_use.is_some() {
            (1 + self.process_rng.next_u64() % 20, ExitStatus::code(1))
        } else {
            (self.jobs.get(&key.job).map_or(60_000, |j| j.run_ms), ExitStatus::code(0))
        };
        let agent = &self.agents[ix as usize];
        let event = SimEvent::ProcessEnd { node: ix, boot: agent.boot, stopped: false, key: key.clone(), status };
        self.push(self.now.plus_ms(run_ms), event);
    }

    fn end_process(&mut self, ix: u32, key: &AttemptKey, status: ExitStatus) {
        let machine = &mut self.agents[ix as usize];
        if machine.processes.remove(key).is_none() {
            return;
        }
        if let Some(checker) = self.checker.as_mut() {
            checker.process_ended(&machine.name, key);
        }
        // As `ftdrive node` does: what listens is read again before an end is reported, so
        // that the head does not take the rank 0's own closed listener for another (PS-4).
        self.read_listening(ix);
        self.agent_input(ix, AgentInput::Exited { key: key.clone(), status });
    }

    // ---- network -----------------------------------------------------------------------------

    fn send_to_head(&mut self, from: u32, msg: ToHead) {
        let fate = self.network.fate();
        let epoch = self.head_epoch;
        if let Some(delay) = fate.second {
            self.push(self.now.plus_ms(delay), SimEvent::ToHead { node: from, epoch, msg: Box::new(msg.clone()) });
        }
        if let Some(delay) = fate.first {
            self.push(self.now.plus_ms(delay), SimEvent::ToHead { node: from, epoch, msg: Box::new(msg) });
        }
    }

    fn send_to_agent(&mut self, node: &NodeId, msg: ToAgent) {
        let Some(&ix) = self.agent_of.get(node) else { return };
        let fate = self.network.fate();
        let epoch = self.head_epoch;
        if let Some(delay) = fate.second {
            self.push(self.now.plus_ms(delay), SimEvent::ToAgent { node: ix, epoch, msg: Box::new(msg.clone()) });
        }
        if let Some(delay) = fate.first {
            self.push(self.now.plus_ms(delay), SimEvent::ToAgent { node: ix, epoch, msg: Box::new(msg) });
        }
    }

    /// A message from an agent reaches the head. A heartbeat from an agent the head does not
    /// know (declared dead, or overtaken by its own registration) is refused; the refusal
    /// travels back and the agent registers again. It keeps its processes: once registered,
    /// its heartbeats list them and the head stops those it no longer expects. (Killing them
    /// on a refusal would race with a registration that already succeeded.)
    fn deliver_to_head(&mut self, from: u32, msg: ToHead) {
        let incarnation = match &msg {
            ToHead::Heartbeat { incarnation, .. } => Some(*incarnation),
            _ => None,
        };
        let registered = match &msg {
            ToHead::Register(r) => Some(r.incarnation),
            _ => None,
        };
        match self.head.handle(self.now, Input::from(msg)) {
            Ok(_) => {
                if let Some(incarnation) = registered {
                    self.welcome(from, incarnation);
                }
            }
            Err(Rejected::StaleIncarnation(_)) => {}
            Err(Rejected::UnknownNode(_)) => {
                if let Some(incarnation) = incarnation {
                    let fate = self.network.fate();
                    for delay in [fate.first, fate.second].into_iter().flatten() {
                        self.push(self.now.plus_ms(delay), SimEvent::Rejected { node: from, incarnation });
                    }
                }
            }
            Err(other) => self.violation("unexpected_rejection", other.to_string()),
        }
    }

    /// The daemon answers a registration it took with a welcome, on the same link (the core
    /// head has no part in it). Only a fenced agent heeds it (AG-7: a head that let it in is
    /// heard), so only a fenced agent gets one here, at once: the network's draws, and so every
    /// other seed, stay as they were.
    fn welcome(&mut self, ix: u32, incarnation: u64) {
        if !self.is_current(ix, incarnation) || !self.agents[ix as usize].fenced {
            return;
        }
        self.agents[ix as usize].let_in_at = Some(self.now);
        let config = self.head.config();
        let welcome = ToAgent::Welcome {
            heartbeat_interval_ms: config.heartbeat_interval_ms,
            node_timeout_ms: config.node_timeout_ms,
            log_token: None,
            cluster: String::new(),
        };
        self.agent_input(ix, AgentInput::FromHead(welcome));
    }

    fn violation(&mut self, invariant: &str, detail: String) {
        let step = self.stats.steps;
        self.violations.push(Violation { invariant: invariant.into(), t_ms: self.now.as_ms(), step, detail });
    }

    /// Read access for tests.
    pub fn head(&self) -> &Head {
        &self.head
    }

    pub fn now(&self) -> Instant {
        self.now
    }
}
