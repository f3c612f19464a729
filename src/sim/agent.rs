//! Simulated node agents and their process tables. An agent registers, heartbeats with the
//! attempts it runs, starts and stops simulated processes, and re-sends what the head has not
//! acknowledged (exit reports, a drain notice) with every heartbeat — as the real agent does.

use crate::head::Input;
use crate::ids::NodeId;
use crate::protocol::{AttemptKey, ExitStatus, StartSpec};
use crate::resources::{Labels, Resources};
use crate::time::Instant;
use std::collections::{BTreeMap, BTreeSet};

/// Most finished attempts an agent remembers (to ignore a start re-sent after the exit).
const MAX_REMEMBERED: usize = 4_096;

/// What a stop request did.
pub enum StopOutcome {
    Stopping,
    Report(Input),
    Nothing,
}

/// One simulated process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimProcess {
    pub rank: u32,
    pub started: Instant,
    /// A stop was requested (the end is already scheduled).
    pub stopping: bool,
}

/// `repr(C)` with the fields every heartbeat reads first: ten thousand agents do not fit in
/// cache, and a heartbeat should cost one cache line of agent, not four.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct SimAgent {
    pub name: NodeId,
    pub incarnation: u64,
    heartbeat_seq: u64,
    pub processes: BTreeMap<AttemptKey, SimProcess>,
    pub up: bool,
    /// Has a heartbeat timer queued (a rebooted agent keeps its timer and phase).
    pub ticking: bool,
    /// Anything in `unacked_exits` or `draining_until`: checked every heartbeat.
    resend: bool,
    unacked_exits: BTreeMap<AttemptKey, ExitStatus>,
    /// Preemption notice received: the node goes away at this time.
    pub draining_until: Option<Instant>,
    pub resources: Resources,
    pub labels: Labels,
    finished: BTreeSet<AttemptKey>,
    finished_order: std::collections::VecDeque<AttemptKey>,
}

impl SimAgent {
    pub fn new(name: NodeId, resources: Resources, labels: Labels) -> Self {
        SimAgent {
            name,
            resources,
            labels,
            up: false,
            incarnation: 0,
            heartbeat_seq: 0,
            processes: BTreeMap::new(),
            finished: BTreeSet::new(),
            finished_order: std::collections::VecDeque::new(),
            unacked_exits: BTreeMap::new(),
            draining_until: None,
            ticking: false,
            resend: false,
        }
    }

    /// Starts (or restarts) the agent: a new incarnation with nothing running.
    pub fn boot(&mut self) -> Input {
        self.die();
        self.up = true;
        self.incarnation += 1;
        self.heartbeat_seq = 0;
        self.register()
    }

    pub fn register(&self) -> Input {
        Input::Register {
            node: self.name.clone(),
            incarnation: self.incarnation,
            resources: self.resources.clone(),
            labels: self.labels.clone(),
            addr: format!("{}.sim", self.name),
        }
    }

    /// The machine (or the agent) dies: its processes die with it, unsent reports are lost.
    pub fn die(&mut self) {
        self.up = false;
        self.processes.clear();
        self.unacked_exits.clear();
        self.draining_until = None;
        self.update_resend();
    }

    /// A heartbeat: the attempts this agent runs.
    pub fn heartbeat(&mut self) -> Input {
        self.heartbeat_seq += 1;
        Input::Heartbeat {
            node: self.name.clone(),
            incarnation: self.incarnation,
            seq: self.heartbeat_seq,
            running: self.processes.keys().cloned().collect(),
        }
    }

    /// Anything to re-send with the heartbeat?
    pub fn has_unacknowledged(&self) -> bool {
        self.resend
    }

    fn update_resend(&mut self) {
        self.resend = !self.unacked_exits.is_empty() || self.draining_until.is_some();
    }

    /// A preemption notice: the machine goes away at `until`.
    pub fn drain_until(&mut self, until: Instant) {
        self.draining_until = Some(until);
        self.update_resend();
    }

    /// Every report the head has not acknowledged, sent again after each heartbeat.
    pub fn unacknowledged(&self, now: Instant) -> Vec<Input> {
        let mut out: Vec<Input> = self
            .unacked_exits
            .iter()
            .map(|(key, status)| Input::ProcessExited { node: self.name.clone(), key: key.clone(), status: *status })
            .collect();
        if let Some(until) = self.draining_until {
            out.push(Input::PreemptionNotice { node: self.name.clone(), deadline_ms: until.ms_since(now) });
        }
        out
    }

    /// A start request: a new process, or nothing if this attempt already ran here. Returns the
    /// confirmation to send, if any.
    pub fn start(&mut self, now: Instant, spec: &StartSpec) -> Option<Input> {
        let key = &spec.key;
        if self.finished.contains(key) {
            return None;
        }
        if !self.processes.contains_key(key) {
            let rank = spec.env.get("RANK").and_then(|r| r.parse().ok()).unwrap_or(0);
            self.processes.insert(key.clone(), SimProcess { rank, started: now, stopping: false });
        }
        Some(Input::ProcessStarted { node: self.name.clone(), key: key.clone() })
    }

    /// A stop request. A running process begins to stop (the caller schedules its end); an
    /// attempt never started here is reported as such and will not start later.
    pub fn stop(&mut self, key: &AttemptKey) -> StopOutcome {
        match self.processes.get_mut(key) {
            Some(p) if !p.stopping => {
                p.stopping = true;
                StopOutcome::Stopping
            }
            Some(_) => StopOutcome::Nothing,
            None if self.finished.contains(key) => StopOutcome::Nothing,
            None => {
                self.remember_finished(key.clone());
                let status = ExitStatus::never_started();
                self.unacked_exits.insert(key.clone(), status);
                self.update_resend();
                StopOutcome::Report(Input::ProcessExited { node: self.name.clone(), key: key.clone(), status })
            }
        }
    }

    /// A process ends; returns the report to send.
    pub fn end(&mut self, key: &AttemptKey, status: ExitStatus) -> Option<Input> {
        self.processes.remove(key)?;
        self.remember_finished(key.clone());
        self.unacked_exits.insert(key.clone(), status);
        self.update_resend();
        Some(Input::ProcessExited { node: self.name.clone(), key: key.clone(), status })
    }

    pub fn ack_exit(&mut self, key: &AttemptKey) {
        self.unacked_exits.remove(key);
        self.update_resend();
    }

    fn remember_finished(&mut self, key: AttemptKey) {
        if self.finished.insert(key.clone()) {
            self.finished_order.push_back(key);
        }
        while self.finished_order.len() > MAX_REMEMBERED {
            let old = self.finished_order.pop_front().expect("non-empty");
            self.finished.remove(&old);
        }
    }
}
