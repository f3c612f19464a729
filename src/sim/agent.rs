//! A simulated machine: the core agent protocol (`crate::agent`) over a simulated process
//! table. The machine decides what processes do (run for the job's `run_ms`, take a while to
//! honour SIGTERM); the agent protocol decides what is said to the head.

use crate::agent::{Agent, AgentIdentity, Recovered};
use crate::ids::NodeId;
use crate::protocol::AttemptKey;
use crate::resources::{Labels, Resources};
use crate::time::Instant;
use std::collections::BTreeMap;

/// One simulated process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimProcess {
    pub rank: u32,
    pub started: Instant,
    /// The port it listens on (a group rank 0's `MASTER_PORT`).
    pub listens_on: Option<u16>,
}

/// What a heartbeat reads comes first (`repr(C)`), then the agent protocol's hot fields.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct SimAgent {
    pub up: bool,
    /// Has a heartbeat timer queued (a rebooted agent keeps its timer and phase).
    pub ticking: bool,
    /// Its agent runs have a fence (`fence_after_ms`); beside `up`, in what was padding.
    pub fenced: bool,
    /// The agent protocol of the current agent run.
    pub agent: Agent,
    pub processes: BTreeMap<AttemptKey, SimProcess>,
    /// Agent runs so far; each gets a new incarnation.
    pub incarnation: u64,
    /// Machine boots so far: processes and the preemption deadline belong to one boot.
    pub boot: u64,
    pub name: NodeId,
    pub resources: Resources,
    pub labels: Labels,
    /// `NodeDef::port_space`.
    pub port_space: String,
    /// The machine's disk takes no write until then (`Fault::DiskFull`), across reboots.
    pub disk_full_until: Option<Instant>,
    /// `NodeDef::fence_after_ms`, for each agent run.
    pub fence_after_ms: Option<u64>,
    /// When the agent protocol's timer is queued for (its fence, AG-7), if it is.
    pub timer_at: Option<Instant>,
    /// When the head let this agent run in (its welcome) on the link it has now: from then on
    /// a head that stays up answers its pings. None while unlinked or not let in.
    pub let_in_at: Option<Instant>,
}

impl SimAgent {
    pub fn new(name: NodeId, resources: Resources, labels: Labels, port_space: String) -> Self {
        let identity = identity(&name, &resources, &labels, &port_space);
        SimAgent {
            agent: Agent::new(identity, 0, Recovered::default()),
            fence_after_ms: None,
            fenced: false,
            timer_at: None,
            let_in_at: None,
            name,
            processes: BTreeMap::new(),
            up: false,
            ticking: false,
            incarnation: 0,
            boot: 0,
            resources,
            labels,
            port_space,
            disk_full_until: None,
        }
    }

    /// Whether the machine's disk takes no write at `now`.
    pub fn disk_full(&self, now: Instant) -> bool {
        self.disk_full_until.is_some_and(|until| now < until)
    }

    /// The ports its processes listen on, for the checker: its port space, or a machine of
    /// its own.
    pub fn port_space_key(&self) -> &str {
        if self.port_space.is_empty() {
            self.name.as_str()
        } else {
            &self.port_space
        }
    }

    /// Starts a new agent run on this machine. It keeps the machine's record of finished
    /// attempts (its state dir) and re-attaches to `running`.
    pub fn start_agent(&mut self, recovered: Recovered) {
        self.incarnation += 1;
        self.up = true;
        let identity = identity(&self.name, &self.resources, &self.labels, &self.port_space);
        self.fenced = self.fence_after_ms.is_some();
        self.agent = Agent::new(identity, self.incarnation, recovered).with_fence(self.fence_after_ms);
        self.timer_at = None;
        self.let_in_at = None;
    }

    /// The machine (or the agent) dies: its processes die with it.
    pub fn die(&mut self) {
        self.up = false;
        self.processes.clear();
    }
}

fn identity(name: &NodeId, resources: &Resources, labels: &Labels, port_space: &str) -> AgentIdentity {
    AgentIdentity {
        name: name.clone(),
        resources: resources.clone(),
        labels: labels.clone(),
        addr: format!("{name}.sim"),
        devices: None,
        port_space: port_space.to_string(),
        log_url: String::new(),
        identity: String::new(),
        cluster: String::new(),
    }
}
