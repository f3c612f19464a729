//! The node agent's protocol as a sans-IO state machine (DESIGN §10 "one agent protocol"),
//! driven by the real agent (`actors/src/node/`), the simulator and the test cluster alike:
//! `handle(now, input)`, `handle_timeout(now)`, `poll_effect()`, `poll_timeout()`.
//!
//! What it owns, with the invariants the runtimes rely on:
//!
//! - **AG-1 idempotent starts.** A start for an attempt that runs here is confirmed again; one
//!   for an attempt that ended here is ignored (the head may re-send a start it has not seen
//!   confirmed, and a late copy must not run the attempt twice).
//! - **AG-2 reports until acknowledged.** Every end of an attempt (exit, spawn failure, or a
//!   stop for an attempt that never started) is reported, and reported again with every
//!   heartbeat and at every registration, until the head acknowledges it.
//! - **AG-3 registration says what is here.** A registration lists the attempts with live
//!   processes (re-attached ones included) and those whose end report is still owed; the head
//!   re-adopts the first and waits for the second.
//! - **AG-4 stops are signalled once.** The first stop of a running attempt asks the runtime
//!   to stop it (TERM, then KILL after the grace); later copies do nothing; an exit after a
//!   stop is reported as signalled by the agent.
//! - **AG-5 a departure is told before its ends.** A shut-down agent ends once nothing runs
//!   and the head has acknowledged every end — waiting for an absent head until the deadline —
//!   and on every link it names its notice before the ends it owes, so that the head charges
//!   them to the departure (`preempted`), not to a lost node.
//! - **AG-6 unhealthy before the failure.** A start the node itself could not make (its state
//!   dir took no write, a fork failed: `node_fault`) makes the agent unhealthy, and the head
//!   hears so (`ToHead::Health`, then in every heartbeat and registration) before it hears of
//!   the failure: the head must not place the attempt's next try back here. Only the runtime,
//!   once what failed works again, makes it healthy (`AgentInput::Health(None)`).
//! - **AG-7 a fenced agent stops its work.** With a fence (`ftdrive node --fence-after-ms`),
//!   an agent that has heard nothing from a head that let it in for that long (no message, no
//!   answer to its pings: `AgentInput::HeadHeard`; a head that refuses it, say one of another
//!   cluster, does not count) stops every attempt it runs, once, and reports each end with
//!   that fence (`ExitStatus::fence`, one fault for all of them): a head that is up has
//!   declared the node lost and placed the work elsewhere, and a rank must not run twice. Without one (the default) an agent keeps its
//!   work however long the head is silent (DESIGN §10).
//! - **AG-8 a fence outlives the agent run that closed it.** Its stops name it
//!   (`AgentEffect::Stop::fence`), the supervisors record it with the ends, and an agent run
//!   that re-attaches a process its predecessor's fence was stopping reports the end with
//!   that fence: one fault, charged once (FC-1), however many runs its ends span. Reported as
//!   a bare stop, each end was charged on its own (swarm seed 6009450).
//!
//! The heartbeat cadence is the runtime's: it feeds `AgentInput::Heartbeat` on its own
//! periodic timer (at the interval the head's welcome names, `AgentEffect::HeartbeatEvery`).
//! The agent's own timers are the shutdown deadline and the fence (AG-7).
//!
//! About 1,100 lines, a third of them the unit tests beside the state machine.

use crate::ids::NodeId;
use crate::protocol::{AttemptKey, ExitStatus, Registration, StartSpec, ToAgent, ToHead};
use crate::resources::{Devices, Labels, Resources};
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// Most finished attempts an agent remembers (to ignore a start re-sent after the exit).
pub const MAX_REMEMBERED: usize = 4_096;
/// Heartbeat interval until the head says otherwise.
pub const DEFAULT_HEARTBEAT_MS: u64 = 1_000;

/// Who this agent is and what it offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentIdentity {
    pub name: NodeId,
    pub resources: Resources,
    pub labels: Labels,
    /// Where other ranks reach this node (`MASTER_ADDR`).
    pub addr: String,
    /// Its GPU devices, when it names them.
    pub devices: Option<Devices>,
    /// The machine's ports it shares with other agents (`Registration::port_space`).
    pub port_space: String,
    /// Where this agent serves attempt logs (the runtime's; empty in the simulator).
    pub log_url: String,
    /// The secret that tells this agent from another under the same name (the runtime's).
    pub identity: String,
    /// The cluster whose attempts it ran last (`Registration::cluster`; the runtime keeps it).
    pub cluster: String,
}

/// How an attempt ended, as the agent reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReport {
    Exited(ExitStatus),
    /// `node_fault`: the node could not start it, not the program (`ToHead::SpawnFailed`).
    SpawnFailed {
        message: String,
        node_fault: bool,
    },
}

/// What an earlier run of this agent left behind: attempts whose processes still run (their
/// supervisors outlived the agent, with each one's stop grace), ends not yet acknowledged, and
/// attempts known to have ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    pub running: Vec<(AttemptKey, u64)>,
    pub ended: Vec<(AttemptKey, EndReport)>,
    pub finished: Vec<AttemptKey>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentInput {
    /// Connected to the head: register.
    LinkUp,
    LinkDown,
    FromHead(ToAgent),
    /// The head answered a ping: it hears this agent (AG-7).
    HeadHeard,
    /// The runtime's heartbeat timer fired.
    Heartbeat,
    /// The TCP ports listening on this machine now, as the runtime read them (lowest first).
    Listening(Vec<u16>),
    /// The attempt's command runs.
    Spawned {
        key: AttemptKey,
    },
    /// The attempt's command could not be started; `node_fault`: because of the node (AG-6).
    SpawnFailed {
        key: AttemptKey,
        message: String,
        node_fault: bool,
    },
    /// What keeps this node from starting work, as the runtime found it, or `None` once it
    /// works again (AG-6).
    Health(Option<String>),
    /// The attempt's process ended (`signalled_by_agent`: whether a stop reached it first; the
    /// agent reports it only if it sent one). A runtime
    /// gives `Listening` read after the end first, so that the head takes no listener of the
    /// attempt's own rank 0 for another's (PS-4 in `scheduler/cluster.rs`).
    Exited {
        key: AttemptKey,
        status: ExitStatus,
    },
    /// This machine goes away within `deadline_ms`: tell the head, which moves the work.
    PreemptionNotice {
        deadline_ms: u64,
    },
    /// The agent is asked to exit (SIGTERM): a preemption notice, every process stopped, and
    /// done once the head has every report or the deadline has passed.
    Shutdown {
        deadline_ms: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentEffect {
    Send(ToHead),
    /// Start this attempt's process; answer with `Spawned` or `SpawnFailed`, then `Exited`.
    Spawn(Box<StartSpec>),
    /// Stop this attempt's process: TERM now, KILL after `grace_ms`. A stop the fence makes
    /// names it (AG-7), for the process's supervisor to record with its end: an agent run
    /// that re-attaches the process later learns the end was that fence's (AG-8).
    Stop {
        key: AttemptKey,
        grace_ms: u64,
        fence: Option<std::num::NonZeroU32>,
    },
    /// The head has this attempt's end: whatever the runtime keeps of it may go.
    Forget {
        key: AttemptKey,
    },
    /// A head of another cluster than the last welcomed this agent (its attempts' records
    /// are forgotten, each with `Forget`): the runtime keeps the new one, and puts what it
    /// keeps of the old cluster's attempts (their logs) aside. `previous` is empty the first time.
    JoinedCluster {
        cluster: String,
        previous: String,
    },
    /// Heartbeat at this interval from now on.
    HeartbeatEvery {
        interval_ms: u64,
    },
    /// The fence closed (AG-7): nothing was heard from the head for `silent_ms`, and these
    /// attempts are being stopped (each also has its `Stop`).
    Fenced {
        silent_ms: u64,
        attempts: Vec<AttemptKey>,
    },
    /// Shutdown is complete: the agent may exit.
    ShutDown,
}

/// The effects waiting to be polled, in order. The first lives inline, beside the fields a
/// heartbeat reads (a heartbeat makes one effect); more spill into a queue.
#[derive(Clone, Debug, Default)]
struct Effects {
    first: Option<AgentEffect>,
    rest: VecDeque<AgentEffect>,
}

impl Effects {
    fn push(&mut self, effect: AgentEffect) {
        if self.first.is_none() {
            self.first = Some(effect);
        } else {
            self.rest.push_back(effect);
        }
    }

    fn pop(&mut self) -> Option<AgentEffect> {
        let next = self.first.take();
        self.first = self.rest.pop_front();
        next
    }
}

/// An attempt with a process here.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Proc {
    /// Its command runs (the start was confirmed to the runtime).
    started: bool,
    /// The agent asked for it to stop.
    signalled: bool,
    /// The stop was the fence's, closed then (AG-7).
    fence: Option<Instant>,
    /// Started by an earlier run of this agent, which may have stopped it (its supervisor
    /// says so; this run cannot know).
    reattached: bool,
    stop_grace_ms: u64,
}

/// A preemption notice this agent keeps telling the head about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Notice {
    deadline: Instant,
    /// Shutting down: stop everything and exit once reported.
    shutdown: bool,
}

/// The agent protocol state. The fields a heartbeat reads come first, together (`repr(C)`
/// keeps them so): a simulated cluster of ten thousand agents is memory-bound.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct Agent {
    linked: bool,
    /// It has a fence (AG-7); beside `linked`, in what was padding, so that an agent without
    /// one reads nothing more for it.
    fenced: bool,
    /// The head on this link let the agent in (welcomed it): its answers count as heard.
    welcomed: bool,
    seq: u64,
    incarnation: u64,
    name: NodeId,
    procs: BTreeMap<AttemptKey, Proc>,
    /// End reports the head has not acknowledged (AG-2).
    unacked: BTreeMap<AttemptKey, EndReport>,
    notice: Option<Notice>,
    effects: Effects,
    identity: AgentIdentity,
    heartbeat_ms: u64,
    finished: BTreeSet<AttemptKey>,
    finished_order: VecDeque<AttemptKey>,
    /// What listens on this machine, once the runtime has said (`ToHead::Listening`).
    listening: Option<Vec<u16>>,
    /// What keeps this node from starting work (AG-6).
    problem: Option<String>,
    /// Stop everything after hearing nothing from the head for this long (AG-7).
    fence_after_ms: Option<u64>,
    /// When the head was last heard (or this agent began, before it ever was).
    last_heard: Option<Instant>,
}

impl Agent {
    /// An agent run: a fresh `incarnation`, and whatever an earlier run left behind.
    pub fn new(identity: AgentIdentity, incarnation: u64, recovered: Recovered) -> Self {
        let mut agent = Agent {
            name: identity.name.clone(),
            incarnation,
            seq: 0,
            procs: BTreeMap::new(),
            linked: false,
            unacked: BTreeMap::new(),
            notice: None,
            identity,
            heartbeat_ms: DEFAULT_HEARTBEAT_MS,
            finished: BTreeSet::new(),
            finished_order: VecDeque::new(),
            effects: Effects::default(),
            listening: None,
            problem: None,
            fence_after_ms: None,
            last_heard: None,
            welcomed: false,
            fenced: false,
        };
        for key in recovered.finished {
            agent.remember(key);
        }
        for (key, stop_grace_ms) in recovered.running {
            let proc = Proc { started: true, signalled: false, fence: None, reattached: true, stop_grace_ms };
            agent.procs.insert(key, proc);
        }
        for (key, report) in recovered.ended {
            agent.remember(key.clone());
            agent.unacked.insert(key, report);
        }
        agent
    }

    /// AG-7: this agent stops its work after hearing nothing from the head for `fence_after_ms`.
    pub fn with_fence(mut self, fence_after_ms: Option<u64>) -> Self {
        self.fence_after_ms = fence_after_ms;
        self.fenced = fence_after_ms.is_some();
        self
    }

    // ---- the state-machine shape ---------------------------------------------------------

    pub fn handle(&mut self, now: Instant, input: AgentInput) {
        // Before the head is first heard, silence counts from this agent's first input.
        if self.fenced {
            self.last_heard.get_or_insert(now);
        }
        match input {
            AgentInput::LinkUp => {
                self.linked = true;
                self.welcomed = false;
                self.register();
                self.resend_notice(now); // AG-5
                self.resend_reports();
            }
            AgentInput::LinkDown => {
                self.linked = false;
                self.welcomed = false;
                self.check_shutdown_done(now);
            }
            AgentInput::FromHead(msg) => {
                self.heard_from(now, &msg);
                self.on_head_message(now, msg)
            }
            AgentInput::HeadHeard => {
                if self.welcomed {
                    self.last_heard = Some(now);
                }
            }
            AgentInput::Heartbeat => self.heartbeat(now),
            AgentInput::Listening(mut ports) => {
                ports.truncate(crate::protocol::MAX_LISTENING_PORTS);
                if self.listening.as_ref() != Some(&ports) {
                    self.listening = Some(ports);
                    self.send_listening();
                }
            }
            AgentInput::Spawned { key } => self.spawned(key),
            AgentInput::SpawnFailed { key, message, node_fault } => self.spawn_failed(key, message, node_fault),
            AgentInput::Health(problem) => self.set_health(problem),
            AgentInput::Exited { key, status } => self.exited(now, key, status),
            AgentInput::PreemptionNotice { deadline_ms } => self.notice(now, deadline_ms, false),
            AgentInput::Shutdown { deadline_ms } => self.notice(now, deadline_ms, true),
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        if self.fenced {
            self.last_heard.get_or_insert(now);
        }
        self.check_shutdown_done(now);
        self.check_fence(now);
    }

    pub fn poll_effect(&mut self) -> Option<AgentEffect> {
        self.effects.pop()
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        let shutdown = self.notice.filter(|n| n.shutdown).map(|n| n.deadline);
        match (shutdown, self.fence_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    // ---- read access -----------------------------------------------------------------------

    pub fn name(&self) -> &NodeId {
        &self.name
    }

    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// What this agent registers as (a restarted agent registers as the same).
    pub fn identity(&self) -> &AgentIdentity {
        &self.identity
    }

    /// Attempts with a process here, in key order.
    pub fn running(&self) -> impl Iterator<Item = &AttemptKey> {
        self.procs.keys()
    }

    pub fn is_running(&self, key: &AttemptKey) -> bool {
        self.procs.contains_key(key)
    }

    /// Ends not yet acknowledged by the head, in key order.
    pub fn unacknowledged(&self) -> impl Iterator<Item = (&AttemptKey, &EndReport)> {
        self.unacked.iter()
    }

    /// Attempts known to have ended here (bounded, oldest forgotten first).
    pub fn remembered_finished(&self) -> impl Iterator<Item = &AttemptKey> {
        self.finished_order.iter()
    }

    /// What the next agent run finds if the machine restarts now: no process survives, and only
    /// the ends not yet acknowledged are on disk (their exit records; `actors/src/node/attempt.rs`
    /// `recover`), each also known as finished.
    pub fn recoverable_after_reboot(&self) -> Recovered {
        let ended: Vec<(AttemptKey, EndReport)> = self.unacked.iter().map(|(k, r)| (k.clone(), r.clone())).collect();
        let finished = ended.iter().map(|(k, _)| k.clone()).collect();
        Recovered { running: Vec::new(), ended, finished }
    }

    /// What the next agent run finds if this agent and every process it supervised are killed
    /// now while the machine stays up (an OOM kill of the lot, `kill -9` of its process tree):
    /// the ends it owed, and each running attempt's supervisor dead without a record (SL-1).
    pub fn recoverable_with_supervisors_killed(&self) -> Recovered {
        let mut recovered = self.recoverable();
        for (key, _) in std::mem::take(&mut recovered.running) {
            recovered.ended.push((key, EndReport::Exited(ExitStatus::supervisor_lost())));
        }
        recovered
    }

    /// What a successor would recover if this agent process died now: the attempts whose
    /// supervisors keep running, the ends it owes the head, and what it knows to have ended.
    pub fn recoverable(&self) -> Recovered {
        Recovered {
            running: self.procs.iter().filter(|(_, p)| p.started).map(|(k, p)| (k.clone(), p.stop_grace_ms)).collect(),
            ended: self.unacked.iter().map(|(k, r)| (k.clone(), r.clone())).collect(),
            finished: self.finished_order.iter().cloned().collect(),
        }
    }

    /// A preemption notice is being sent to the head.
    pub fn has_preemption_notice(&self) -> bool {
        self.notice.is_some()
    }

    pub fn heartbeat_interval_ms(&self) -> u64 {
        self.heartbeat_ms
    }

    /// What keeps this node from starting work, if anything (AG-6).
    pub fn problem(&self) -> Option<&str> {
        self.problem.as_deref()
    }

    // ---- the head --------------------------------------------------------------------------

    /// Messages go out only while linked; what must not be lost (end reports, the notice) is
    /// sent again on the next link.
    fn send(&mut self, msg: ToHead) {
        if self.linked {
            self.effects.push(AgentEffect::Send(msg));
        }
    }

    /// AG-3: the registration lists what runs here and what ends are owed.
    fn register(&mut self) {
        let id = &self.identity;
        let msg = Registration {
            node: self.name.clone(),
            incarnation: self.incarnation,
            resources: id.resources.clone(),
            labels: id.labels.clone(),
            addr: id.addr.clone(),
            devices: id.devices,
            port_space: id.port_space.clone(),
            listening: self.listening.clone().unwrap_or_default(),
            log_url: id.log_url.clone(),
            identity: id.identity.clone(),
            cluster: id.cluster.clone(),
            problem: self.problem.clone(),
            running: self.procs.keys().cloned().collect(),
            ended: self.unacked.keys().cloned().collect(),
        };
        self.send(ToHead::Register(Box::new(msg)));
    }

    /// A head of another cluster welcomed this agent (it took the registration, so nothing
    /// runs or is owed): the attempts it remembers ending are another cluster's, whose ids this
    /// head hands out anew, so a start of one would be taken for a start already done.
    fn join_cluster(&mut self, cluster: String) {
        if cluster.is_empty() || cluster == self.identity.cluster {
            return;
        }
        let previous = std::mem::replace(&mut self.identity.cluster, cluster.clone());
        if !previous.is_empty() {
            self.finished.clear();
            for key in std::mem::take(&mut self.finished_order) {
                self.effects.push(AgentEffect::Forget { key });
            }
        }
        self.effects.push(AgentEffect::JoinedCluster { cluster, previous });
    }

    fn on_head_message(&mut self, now: Instant, msg: ToAgent) {
        match msg {
            ToAgent::Welcome { heartbeat_interval_ms, cluster, .. } => {
                let interval_ms = heartbeat_interval_ms.max(10);
                if interval_ms != self.heartbeat_ms {
                    self.heartbeat_ms = interval_ms;
                    self.effects.push(AgentEffect::HeartbeatEvery { interval_ms });
                }
                self.join_cluster(cluster);
            }
            // After a refusal the registration may race with the reports: they follow with the
            // next heartbeat.
            ToAgent::Refused { register_again, .. } => {
                if register_again {
                    self.register();
                }
            }
            // The runtime ends the agent; nothing here changes.
            ToAgent::NameInUse { .. } => {}
            ToAgent::Start(spec) => self.start(spec),
            ToAgent::Stop { key, grace_ms } => self.stop(key, grace_ms),
            ToAgent::AckExit { key } => {
                if self.unacked.remove(&key).is_some() {
                    self.effects.push(AgentEffect::Forget { key });
                }
                self.check_shutdown_done(now);
            }
        }
    }

    /// A heartbeat lists the processes running here (spawned: the head takes the listing as
    /// confirming their start, HB-1); every unacknowledged report and the preemption notice go
    /// again with it.
    fn heartbeat(&mut self, now: Instant) {
        if !self.linked {
            return;
        }
        self.seq += 1;
        let beat = ToHead::Heartbeat {
            node: self.name.clone(),
            incarnation: self.incarnation,
            seq: self.seq,
            running: self.procs.iter().filter(|(_, p)| p.started).map(|(k, _)| k.clone()).collect(),
            problem: self.problem.clone(),
        };
        self.send(beat);
        self.resend_reports();
        self.resend_notice(now);
        self.check_shutdown_done(now);
    }

    /// What listens here goes when it changes, and in each registration: the link is a stream,
    /// so a change sent on it arrives unless the link drops, and then the next registration
    /// carries the whole list.
    fn send_listening(&mut self) {
        if let Some(ports) = &self.listening {
            let msg =
                ToHead::Listening { node: self.name.clone(), incarnation: self.incarnation, ports: ports.clone() };
            self.send(msg);
        }
    }

    /// The notice goes with every heartbeat and right after every registration, so that a
    /// restarted head knows at once that this machine is leaving.
    fn resend_notice(&mut self, now: Instant) {
        if let Some(notice) = self.notice {
            let deadline_ms = notice.deadline.ms_since(now);
            self.send(ToHead::PreemptionNotice {
                node: self.name.clone(),
                incarnation: Some(self.incarnation),
                deadline_ms,
            });
        }
    }

    fn resend_reports(&mut self) {
        if self.unacked.is_empty() {
            return;
        }
        let reports: Vec<ToHead> = self.unacked.iter().map(|(key, report)| self.report_msg(key, report)).collect();
        for report in reports {
            self.send(report);
        }
    }

    fn report_msg(&self, key: &AttemptKey, report: &EndReport) -> ToHead {
        let (node, key) = (self.name.clone(), key.clone());
        match report {
            EndReport::Exited(status) => ToHead::Exited { node, key, status: status.clone() },
            EndReport::SpawnFailed { message, node_fault } => {
                ToHead::SpawnFailed { node, key, message: message.clone(), node_fault: *node_fault }
            }
        }
    }

    /// AG-2: report now, and again until acknowledged.
    fn report(&mut self, key: AttemptKey, report: EndReport) {
        let msg = self.report_msg(&key, &report);
        self.send(msg);
        self.unacked.insert(key, report);
    }

    // ---- attempts --------------------------------------------------------------------------

    /// AG-1.
    fn start(&mut self, spec: Arc<StartSpec>) {
        let key = spec.key.clone();
        if let Some(proc) = self.procs.get(&key) {
            if proc.started {
                self.send(ToHead::Started { node: self.name.clone(), incarnation: self.incarnation, key });
            }
            return;
        }
        if self.finished.contains(&key) {
            return; // ran already; its end is reported (or was acknowledged)
        }
        if self.notice.is_some_and(|n| n.shutdown) {
            return self.report_never_started(key);
        }
        let proc = Proc {
            started: false,
            signalled: false,
            fence: None,
            reattached: false,
            stop_grace_ms: spec.stop_grace_ms,
        };
        self.procs.insert(key, proc);
        // Over a real link the agent holds the only copy; the simulator shares the head's.
        self.effects.push(AgentEffect::Spawn(Box::new(Arc::unwrap_or_clone(spec))));
    }

    fn spawned(&mut self, key: AttemptKey) {
        let Some(proc) = self.procs.get_mut(&key) else { return };
        proc.started = true;
        self.send(ToHead::Started { node: self.name.clone(), incarnation: self.incarnation, key });
    }

    fn spawn_failed(&mut self, key: AttemptKey, message: String, node_fault: bool) {
        if self.procs.remove(&key).is_none() {
            return;
        }
        if node_fault && self.problem.is_none() {
            self.set_health(Some(crate::protocol::cannot_start(&message))); // AG-6
        }
        self.remember(key.clone());
        self.report(key, EndReport::SpawnFailed { message, node_fault });
    }

    /// AG-6: the head hears of every change at once; registrations and heartbeats carry the
    /// state of the moment.
    fn set_health(&mut self, problem: Option<String>) {
        let problem = problem.map(|p| crate::protocol::one_line(&p, crate::protocol::MAX_SPAWN_MESSAGE_CHARS));
        if problem == self.problem {
            return;
        }
        self.problem = problem.clone();
        self.send(ToHead::Health { node: self.name.clone(), incarnation: self.incarnation, problem });
    }

    fn exited(&mut self, now: Instant, key: AttemptKey, status: ExitStatus) {
        let Some(proc) = self.procs.remove(&key) else { return };
        self.remember(key.clone());
        // Signalled by its agent only if a stop was sent and reached the process before it
        // ended: a runtime's supervisor says whether the stop came first (a rank that failed
        // on its own while its gang's stop was on the way did not end of it). A supervisor
        // that died leaves no word: the agent's sending then decides.
        // One an earlier agent run started may have had its stop from that run (its fence, then
        // a restart within the grace): the supervisor's word stands, on the stop and on the
        // fence that made it (AG-8).
        let reached = status.signalled_by_agent || status.supervisor_lost;
        let by_agent = (proc.signalled && reached) || (proc.reattached && status.signalled_by_agent);
        let recorded = status.fence.filter(|_| proc.reattached);
        let fence = recorded.or(proc.fence.map(fence_id)).filter(|_| by_agent);
        let status = ExitStatus { signalled_by_agent: by_agent, fence, ..status };
        self.report(key, EndReport::Exited(status));
        self.check_shutdown_done(now);
    }

    /// AG-4. An attempt never started here is reported as such, and never starts afterwards.
    fn stop(&mut self, key: AttemptKey, grace_ms: u64) {
        match self.procs.get_mut(&key) {
            Some(proc) if !proc.signalled => {
                proc.signalled = true;
                self.effects.push(AgentEffect::Stop { key, grace_ms, fence: None });
            }
            Some(_) => {}
            None if self.finished.contains(&key) => {}
            None => self.report_never_started(key),
        }
    }

    fn report_never_started(&mut self, key: AttemptKey) {
        self.remember(key.clone());
        self.report(key, EndReport::Exited(ExitStatus::never_started()));
    }

    fn remember(&mut self, key: AttemptKey) {
        if self.finished.insert(key.clone()) {
            self.finished_order.push_back(key);
        }
        while self.finished_order.len() > MAX_REMEMBERED {
            let old = self.finished_order.pop_front().expect("non-empty");
            self.finished.remove(&old);
        }
    }

    // ---- the fence (AG-7) ------------------------------------------------------------------

    /// When the fence closes: only with a fence, and only while something runs here that it
    /// has not stopped yet.
    fn fence_deadline(&self) -> Option<Instant> {
        if !self.fenced {
            return None;
        }
        let fence_ms = self.fence_after_ms?;
        let last_heard = self.last_heard?;
        self.procs.values().any(|p| p.fence.is_none()).then(|| last_heard.plus_ms(fence_ms))
    }

    /// What comes from a head that let this agent in is heard (AG-7); a refusal is not.
    fn heard_from(&mut self, now: Instant, msg: &ToAgent) {
        match msg {
            ToAgent::Welcome { .. } => self.welcomed = true,
            ToAgent::Refused { .. } | ToAgent::NameInUse { .. } => return,
            ToAgent::Start(_) | ToAgent::Stop { .. } | ToAgent::AckExit { .. } => {}
        }
        if self.welcomed {
            self.last_heard = Some(now);
        }
    }

    fn check_fence(&mut self, now: Instant) {
        let Some(deadline) = self.fence_deadline() else { return };
        if now < deadline {
            return;
        }
        let silent_ms = self.last_heard.map_or(0, |heard| now.ms_since(heard));
        let mut attempts = Vec::new();
        let mut stops = Vec::new();
        for (key, proc) in self.procs.iter_mut().filter(|(_, p)| p.fence.is_none()) {
            proc.fence = Some(now);
            attempts.push(key.clone());
            // One stopped already (its gang's stop, a shutdown) keeps that stop and its grace.
            if !proc.signalled {
                proc.signalled = true;
                let fence = Some(fence_id(now));
                stops.push(AgentEffect::Stop { key: key.clone(), grace_ms: proc.stop_grace_ms, fence });
            }
        }
        self.effects.push(AgentEffect::Fenced { silent_ms, attempts });
        for stop in stops {
            self.effects.push(stop);
        }
    }

    // ---- preemption and shutdown -----------------------------------------------------------

    fn notice(&mut self, now: Instant, deadline_ms: u64, shutdown: bool) {
        let deadline = now.plus_ms(deadline_ms);
        self.notice = Some(Notice { deadline, shutdown });
        self.send(ToHead::PreemptionNotice {
            node: self.name.clone(),
            incarnation: Some(self.incarnation),
            deadline_ms,
        });
        if shutdown {
            let stops: Vec<(AttemptKey, u64)> = self
                .procs
                .iter()
                .filter(|(_, p)| !p.signalled)
                .map(|(k, p)| (k.clone(), p.stop_grace_ms.min(deadline_ms)))
                .collect();
            for (key, grace_ms) in stops {
                self.stop(key, grace_ms);
            }
            self.check_shutdown_done(now);
        }
    }

    /// Shut down once nothing runs and the head has every report, or at the deadline (AG-5: a
    /// head that is away, restarting, may be back in time to hear why the attempts ended).
    fn check_shutdown_done(&mut self, now: Instant) {
        let Some(notice) = self.notice.filter(|n| n.shutdown) else { return };
        let reported = self.procs.is_empty() && self.unacked.is_empty();
        if reported || notice.deadline <= now {
            self.notice = None;
            self.effects.push(AgentEffect::ShutDown);
        }
    }
}

/// What names a fence in the end reports of the attempts it stopped (`ExitStatus::fence`).
fn fence_id(closed: Instant) -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(closed.as_ms() as u32).unwrap_or(std::num::NonZeroU32::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::JobId;

    fn key(actor: u32) -> AttemptKey {
        AttemptKey { job: JobId::new("j1"), actor, attempt: 1, cycle: 1 }
    }

    fn spec(actor: u32) -> StartSpec {
        StartSpec {
            key: key(actor),
            actor_name: format!("j1/{actor}"),
            command: vec!["true".into()],
            env: BTreeMap::new(),
            cwd: None,
            stop_grace_ms: 500,
            nproc_per_node: 1,
            group_rank: 0,
        }
    }

    fn agent(recovered: Recovered) -> Agent {
        let identity = AgentIdentity {
            name: NodeId::new("n1"),
            resources: Resources::units(&[("cpu", 1)]),
            labels: Labels::new(),
            addr: "10.0.0.1".into(),
            devices: None,
            port_space: String::new(),
            log_url: String::new(),
            identity: String::new(),
            cluster: "c1".into(),
        };
        let mut a = Agent::new(identity, 7, recovered);
        a.handle(Instant::ZERO, AgentInput::LinkUp);
        a
    }

    fn effects(a: &mut Agent) -> Vec<AgentEffect> {
        std::iter::from_fn(|| a.poll_effect()).collect()
    }

    fn welcome(cluster: &str) -> AgentInput {
        AgentInput::FromHead(ToAgent::Welcome {
            heartbeat_interval_ms: DEFAULT_HEARTBEAT_MS,
            node_timeout_ms: 3_000,
            log_token: None,
            cluster: cluster.into(),
        })
    }

    #[test]
    fn a_head_of_another_cluster_makes_the_agent_forget_the_old_ones_ended_attempts() {
        let key = key(0);
        let mut a = agent(Recovered { finished: vec![key.clone()], ..Recovered::default() });
        a.handle(Instant::ZERO, welcome("c1"));
        assert!(!effects(&mut a).iter().any(|e| matches!(e, AgentEffect::JoinedCluster { .. })), "its own cluster");
        a.handle(Instant::ZERO, welcome("c2"));
        let joined = AgentEffect::JoinedCluster { cluster: "c2".into(), previous: "c1".into() };
        assert_eq!(effects(&mut a), [AgentEffect::Forget { key: key.clone() }, joined]);
        a.handle(Instant::ZERO, AgentInput::FromHead(ToAgent::Start(Arc::new(spec(0)))));
        assert!(effects(&mut a).iter().any(|e| matches!(e, AgentEffect::Spawn(_))), "c2's j1 is a job of its own");
    }

    fn from_head(a: &mut Agent, msg: ToAgent) -> Vec<AgentEffect> {
        a.handle(Instant::ZERO, AgentInput::FromHead(msg));
        effects(a)
    }

    fn health(problem: Option<&str>) -> AgentEffect {
        let problem = problem.map(str::to_string);
        AgentEffect::Send(ToHead::Health { node: NodeId::new("n1"), incarnation: 7, problem })
    }

    #[test]
    fn a_start_the_node_could_not_make_says_the_node_is_unhealthy_before_it_reports_the_failure() {
        let mut a = agent(Recovered::default());
        effects(&mut a);
        from_head(&mut a, ToAgent::Start(Arc::new(spec(0))));
        let full = "cannot create /s/attempts: No space left on device".to_string();
        a.handle(Instant::ZERO, AgentInput::SpawnFailed { key: key(0), message: full.clone(), node_fault: true });
        let failed =
            ToHead::SpawnFailed { node: NodeId::new("n1"), key: key(0), message: full.clone(), node_fault: true };
        let problem = format!("cannot start attempts: {full}");
        assert_eq!(effects(&mut a), [health(Some(&problem)), AgentEffect::Send(failed)], "AG-6: health first");

        // A second failure while unhealthy says nothing new of its health; a registration does.
        from_head(&mut a, ToAgent::Start(Arc::new(spec(1))));
        a.handle(Instant::ZERO, AgentInput::SpawnFailed { key: key(1), message: full, node_fault: true });
        assert!(!effects(&mut a).contains(&health(Some(&problem))));
        a.handle(Instant::ZERO, AgentInput::LinkUp);
        let registered = effects(&mut a).into_iter().find_map(|e| match e {
            AgentEffect::Send(ToHead::Register(r)) => Some(r),
            _ => None,
        });
        assert_eq!(registered.expect("registered").problem.as_deref(), Some(problem.as_str()));

        a.handle(Instant::ZERO, AgentInput::Health(None));
        assert_eq!(effects(&mut a), [health(None)]);
        assert_eq!(a.problem(), None);
    }

    #[test]
    fn a_program_that_cannot_start_leaves_the_node_healthy() {
        let mut a = agent(Recovered::default());
        effects(&mut a);
        from_head(&mut a, ToAgent::Start(Arc::new(spec(0))));
        let missing = "cannot start worker 0 (trian): No such file or directory".to_string();
        a.handle(Instant::ZERO, AgentInput::SpawnFailed { key: key(0), message: missing, node_fault: false });
        assert!(!effects(&mut a).iter().any(|e| matches!(e, AgentEffect::Send(ToHead::Health { .. }))));
        assert_eq!(a.problem(), None);
    }

    #[test]
    fn starts_are_idempotent_and_a_late_start_never_runs_an_ended_attempt() {
        let mut a = agent(Recovered::default());
        effects(&mut a);
        assert_eq!(from_head(&mut a, ToAgent::Start(Arc::new(spec(0)))), vec![AgentEffect::Spawn(Box::new(spec(0)))]);
        assert!(from_head(&mut a, ToAgent::Start(Arc::new(spec(0)))).is_empty(), "spawning: no second spawn");
        a.handle(Instant::ZERO, AgentInput::Spawned { key: key(0) });
        let started = ToHead::Started { node: NodeId::new("n1"), incarnation: 7, key: key(0) };
        assert_eq!(effects(&mut a), vec![AgentEffect::Send(started.clone())]);
        assert_eq!(from_head(&mut a, ToAgent::Start(Arc::new(spec(0)))), vec![AgentEffect::Send(started)]);
        a.handle(Instant::ZERO, AgentInput::Exited { key: key(0), status: ExitStatus::code(0) });
        effects(&mut a);
        assert!(from_head(&mut a, ToAgent::Start(Arc::new(spec(0)))).is_empty(), "ended: ignored");
    }

    #[test]
    fn listening_ports_go_when_they_change_and_in_every_registration() {
        let mut a = agent(Recovered::default());
        effects(&mut a);
        let said = |ports: &[u16]| {
            AgentEffect::Send(ToHead::Listening { node: NodeId::new("n1"), incarnation: 7, ports: ports.to_vec() })
        };
        a.handle(Instant::ZERO, AgentInput::Listening(vec![29_500]));
        assert_eq!(effects(&mut a), vec![said(&[29_500])]);
        a.handle(Instant::ZERO, AgentInput::Listening(vec![29_500]));
        assert!(effects(&mut a).is_empty(), "unchanged: nothing to say");
        a.handle(Instant::ZERO, AgentInput::LinkDown);
        a.handle(Instant::ZERO, AgentInput::Listening(vec![29_500, 29_501]));
        assert!(effects(&mut a).is_empty(), "no link");
        a.handle(Instant::ZERO, AgentInput::LinkUp);
        let sent = effects(&mut a);
        let registered = |e: &AgentEffect| match e {
            AgentEffect::Send(ToHead::Register(r)) => Some(r.listening.clone()),
            _ => None,
        };
        assert_eq!(sent.iter().find_map(registered), Some(vec![29_500, 29_501]), "the whole list in the registration");
        assert!(!sent.contains(&said(&[29_500, 29_501])), "and not again: {sent:?}");
    }

    /// The agent sent a stop, but the supervisor says the process had failed before it came:
    /// the end is not the stop's. One whose supervisor died says nothing: the sending decides.
    #[test]
    fn an_end_is_the_stops_only_if_the_stop_reached_it_first() {
        let mut a = agent(Recovered::default());
        for n in [1, 2, 3] {
            from_head(&mut a, ToAgent::Start(Arc::new(spec(n))));
            a.handle(Instant::ZERO, AgentInput::Spawned { key: key(n) });
            from_head(&mut a, ToAgent::Stop { key: key(n), grace_ms: 300 });
        }
        effects(&mut a);
        let ends = [(1, ExitStatus::code(7), false), (2, ExitStatus::signal(15, true), true)];
        let lost = (3, ExitStatus::supervisor_lost(), true);
        for (n, status, by_agent) in ends.into_iter().chain([lost]) {
            a.handle(Instant::ZERO, AgentInput::Exited { key: key(n), status: status.clone() });
            let reported = ExitStatus { signalled_by_agent: by_agent, ..status };
            let report = ToHead::Exited { node: NodeId::new("n1"), key: key(n), status: reported };
            assert_eq!(effects(&mut a), vec![AgentEffect::Send(report)], "attempt {n}");
        }
    }

    #[test]
    fn ends_are_reported_until_acknowledged_and_stops_signal_once() {
        let mut a = agent(Recovered::default());
        from_head(&mut a, ToAgent::Start(Arc::new(spec(1))));
        a.handle(Instant::ZERO, AgentInput::Spawned { key: key(1) });
        effects(&mut a);
        let stop = ToAgent::Stop { key: key(1), grace_ms: 300 };
        assert_eq!(
            from_head(&mut a, stop.clone()),
            vec![AgentEffect::Stop { key: key(1), grace_ms: 300, fence: None }]
        );
        assert!(from_head(&mut a, stop).is_empty(), "AG-4: signalled once");
        a.handle(Instant::ZERO, AgentInput::Exited { key: key(1), status: ExitStatus::signal(15, true) });
        let report = ToHead::Exited { node: NodeId::new("n1"), key: key(1), status: ExitStatus::signal(15, true) };
        assert_eq!(effects(&mut a), vec![AgentEffect::Send(report.clone())]);
        a.handle(Instant::ZERO, AgentInput::Heartbeat);
        let sent = effects(&mut a);
        assert_eq!(sent.len(), 2, "a heartbeat and the report again: {sent:?}");
        assert_eq!(sent[1], AgentEffect::Send(report));
        assert_eq!(from_head(&mut a, ToAgent::AckExit { key: key(1) }), vec![AgentEffect::Forget { key: key(1) }]);
        a.handle(Instant::ZERO, AgentInput::Heartbeat);
        assert_eq!(effects(&mut a).len(), 1, "acknowledged: not sent again");
    }

    #[test]
    fn a_stop_for_an_attempt_never_started_is_reported_and_blocks_the_start() {
        let mut a = agent(Recovered::default());
        effects(&mut a);
        let sent = from_head(&mut a, ToAgent::Stop { key: key(2), grace_ms: 1 });
        let never = ToHead::Exited { node: NodeId::new("n1"), key: key(2), status: ExitStatus::never_started() };
        assert_eq!(sent, vec![AgentEffect::Send(never)]);
        assert!(from_head(&mut a, ToAgent::Start(Arc::new(spec(2)))).is_empty());
    }

    #[test]
    fn a_restarted_agent_registers_what_it_reattached_and_what_it_owes() {
        let recovered = Recovered {
            running: vec![(key(3), 500)],
            ended: vec![(key(4), EndReport::Exited(ExitStatus::code(1)))],
            finished: vec![],
        };
        let mut a = agent(recovered);
        let sent = effects(&mut a);
        let AgentEffect::Send(ToHead::Register(r)) = &sent[0] else { panic!("{sent:?}") };
        assert_eq!((r.running.clone(), r.ended.clone()), (vec![key(3)], vec![key(4)]));
        assert!(
            matches!(&sent[1], AgentEffect::Send(ToHead::Exited { key: k, .. }) if *k == key(4)),
            "the owed report follows the registration: {sent:?}"
        );
        assert!(from_head(&mut a, ToAgent::Start(Arc::new(spec(4)))).is_empty(), "AG-1 holds across the restart");
    }

    #[test]
    fn shutdown_stops_everything_and_ends_once_reported() {
        let mut a = agent(Recovered { running: vec![(key(5), 10_000)], ..Recovered::default() });
        effects(&mut a);
        a.handle(Instant::ZERO, AgentInput::Shutdown { deadline_ms: 2_000 });
        let sent = effects(&mut a);
        assert!(sent.contains(&AgentEffect::Stop { key: key(5), grace_ms: 2_000, fence: None }), "{sent:?}");
        assert_eq!(a.poll_timeout(), Some(Instant::from_ms(2_000)));
        assert!(from_head(&mut a, ToAgent::Start(Arc::new(spec(6))))
            .iter()
            .all(|e| !matches!(e, AgentEffect::Spawn(_))));
        a.handle(Instant::from_ms(100), AgentInput::Exited { key: key(5), status: ExitStatus::signal(15, true) });
        effects(&mut a);
        a.handle(Instant::from_ms(150), AgentInput::FromHead(ToAgent::AckExit { key: key(5) }));
        a.handle(Instant::from_ms(150), AgentInput::FromHead(ToAgent::AckExit { key: key(6) }));
        assert!(effects(&mut a).contains(&AgentEffect::ShutDown));
        assert_eq!(a.poll_timeout(), None);
    }

    #[test]
    fn a_shut_down_agent_waits_for_an_absent_head_and_tells_it_the_notice_before_the_ends() {
        let mut a = agent(Recovered { running: vec![(key(5), 10_000)], ..Recovered::default() });
        effects(&mut a);
        a.handle(Instant::ZERO, AgentInput::LinkDown); // the head is away
        a.handle(Instant::ZERO, AgentInput::Shutdown { deadline_ms: 30_000 });
        a.handle(Instant::from_ms(100), AgentInput::Exited { key: key(5), status: ExitStatus::signal(15, true) });
        assert!(!effects(&mut a).contains(&AgentEffect::ShutDown), "the head has not heard of the end");
        a.handle(Instant::from_ms(2_000), AgentInput::LinkUp);
        let sent = effects(&mut a);
        let kinds: Vec<&str> = sent
            .iter()
            .map(|e| match e {
                AgentEffect::Send(ToHead::Register(_)) => "register",
                AgentEffect::Send(ToHead::PreemptionNotice { .. }) => "notice",
                AgentEffect::Send(ToHead::Exited { .. }) => "exited",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["register", "notice", "exited"], "{sent:?}");
        a.handle(Instant::from_ms(2_100), AgentInput::FromHead(ToAgent::AckExit { key: key(5) }));
        assert!(effects(&mut a).contains(&AgentEffect::ShutDown));

        let mut gone = agent(Recovered { running: vec![(key(5), 10_000)], ..Recovered::default() });
        gone.handle(Instant::ZERO, AgentInput::LinkDown);
        gone.handle(Instant::ZERO, AgentInput::Shutdown { deadline_ms: 30_000 });
        gone.handle(Instant::from_ms(100), AgentInput::Exited { key: key(5), status: ExitStatus::signal(15, true) });
        effects(&mut gone);
        gone.handle_timeout(Instant::from_ms(30_000));
        assert!(effects(&mut gone).contains(&AgentEffect::ShutDown), "a head that never returns: at the deadline");
    }

    #[test]
    fn a_reconnected_agent_repeats_its_notice_right_after_registering() {
        let mut a = agent(Recovered::default());
        a.handle(Instant::ZERO, AgentInput::PreemptionNotice { deadline_ms: 5_000 });
        effects(&mut a);
        a.handle(Instant::from_ms(1_000), AgentInput::LinkDown);
        a.handle(Instant::from_ms(1_200), AgentInput::LinkUp);
        let sent = effects(&mut a);
        assert!(matches!(&sent[0], AgentEffect::Send(ToHead::Register(_))), "{sent:?}");
        let notice = ToHead::PreemptionNotice {
            node: NodeId::new("n1"),
            incarnation: Some(a.incarnation()),
            deadline_ms: 3_800,
        };
        assert_eq!(
            sent[1..],
            [AgentEffect::Send(notice)],
            "a restarted head must not take the drain for the operator's"
        );
    }

    /// AG-7: an agent with a fence stops its work once, when the head has been silent that
    /// long, and says each end was the fence's; anything heard from the head moves the fence.
    #[test]
    fn a_fenced_agent_stops_its_work_once_the_head_is_silent_that_long() {
        let at = |ms| Instant::ZERO.plus_ms(ms);
        let mut a = agent(Recovered::default()).with_fence(Some(2_000));
        a.handle(Instant::ZERO, welcome("c1"));
        effects(&mut a);
        assert_eq!(a.poll_timeout(), None, "nothing runs: nothing to fence");
        from_head(&mut a, ToAgent::Start(Arc::new(spec(0))));
        a.handle(Instant::ZERO, AgentInput::Spawned { key: key(0) });
        effects(&mut a);
        a.handle(at(1_000), AgentInput::HeadHeard);
        assert_eq!(a.poll_timeout(), Some(at(3_000)));
        // A head that does not let this agent in (a link to another cluster's) is not heard.
        a.handle(at(1_500), AgentInput::LinkDown);
        a.handle(at(1_500), AgentInput::LinkUp);
        let refusal = ToAgent::Refused { reason: "another cluster's".into(), register_again: false };
        a.handle(at(2_000), AgentInput::FromHead(refusal));
        a.handle(at(2_500), AgentInput::HeadHeard);
        effects(&mut a);
        assert_eq!(a.poll_timeout(), Some(at(3_000)));
        a.handle_timeout(at(2_999));
        assert_eq!(effects(&mut a), []);
        a.handle_timeout(at(3_000));
        let fenced = AgentEffect::Fenced { silent_ms: 2_000, attempts: vec![key(0)] };
        let fence = std::num::NonZeroU32::new(3_000);
        assert_eq!(effects(&mut a), [fenced, AgentEffect::Stop { key: key(0), grace_ms: 500, fence }]);
        assert_eq!(a.poll_timeout(), None, "once");
        a.handle_timeout(at(9_000));
        assert_eq!(effects(&mut a), []);
        a.handle(at(3_400), AgentInput::Exited { key: key(0), status: ExitStatus::signal(15, true) });
        let status = ExitStatus { fence: std::num::NonZeroU32::new(3_000), ..ExitStatus::signal(15, true) };
        let report = ToHead::Exited { node: NodeId::new("n1"), key: key(0), status };
        assert_eq!(effects(&mut a), [AgentEffect::Send(report)]);

        // The head lets it in again: a start runs until the next silence.
        a.handle(at(4_000), welcome("c1"));
        from_head(&mut a, ToAgent::Start(Arc::new(spec(1))));
        a.handle(at(5_000), AgentInput::HeadHeard);
        assert_eq!(a.poll_timeout(), Some(at(7_000)));
    }

    /// AG-8: a process the fence of an earlier agent run was stopping ends after a restart; the
    /// new run reports the end with the fence its supervisor recorded (one fault, FC-1), and a
    /// bare stop of that earlier run as a bare stop.
    #[test]
    fn a_re_attached_process_the_last_runs_fence_stopped_ends_with_that_fence() {
        let running = vec![(key(0), 500), (key(1), 500)];
        let mut a = agent(Recovered { running, ..Recovered::default() });
        effects(&mut a);
        let fence = std::num::NonZeroU32::new(3_000);
        let fenced = ExitStatus { fence, ..ExitStatus::signal(15, true) };
        a.handle(Instant::from_ms(4_000), AgentInput::Exited { key: key(0), status: fenced.clone() });
        a.handle(Instant::from_ms(4_000), AgentInput::Exited { key: key(1), status: ExitStatus::signal(15, true) });
        let reported: Vec<ExitStatus> = effects(&mut a)
            .into_iter()
            .filter_map(|e| match e {
                AgentEffect::Send(ToHead::Exited { status, .. }) => Some(status),
                _ => None,
            })
            .collect();
        assert_eq!(reported, [fenced, ExitStatus::signal(15, true)]);
    }

    /// Without a fence an agent keeps its work however long the head is silent (DESIGN §10).
    #[test]
    fn an_agent_without_a_fence_keeps_its_work_through_any_silence() {
        let mut a = agent(Recovered::default());
        from_head(&mut a, ToAgent::Start(Arc::new(spec(0))));
        a.handle(Instant::ZERO, AgentInput::Spawned { key: key(0) });
        a.handle(Instant::ZERO, AgentInput::LinkDown);
        effects(&mut a);
        assert_eq!(a.poll_timeout(), None);
        a.handle_timeout(Instant::ZERO.plus_ms(86_400_000));
        assert_eq!(effects(&mut a), []);
    }

    /// An attempt an earlier run of this agent started, and stopped (its fence, then a
    /// restart within the grace), ends as its supervisor says: stopped by the agent, not
    /// killed by someone else and charged to the program.
    #[test]
    fn a_reattached_attempt_stopped_by_an_earlier_agent_run_says_so() {
        let running = vec![(key(0), 500), (key(1), 500)];
        let mut a = agent(Recovered { running, ..Recovered::default() });
        effects(&mut a);
        a.handle(Instant::ZERO, AgentInput::Exited { key: key(0), status: ExitStatus::signal(15, true) });
        a.handle(Instant::ZERO, AgentInput::Exited { key: key(1), status: ExitStatus::signal(15, false) });
        let reports: Vec<bool> = effects(&mut a)
            .into_iter()
            .filter_map(|e| match e {
                AgentEffect::Send(ToHead::Exited { status, .. }) => Some(status.signalled_by_agent),
                _ => None,
            })
            .collect();
        assert_eq!(reports, [true, false], "the supervisor's word stands; a signal it did not get is another's");
    }
}
