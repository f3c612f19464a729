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
}

/// What a heartbeat reads comes first (`repr(C)`), then the agent protocol's hot fields.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct SimAgent {
    pub up: bool,
    /// Has a heartbeat timer queued (a rebooted agent keeps its timer and phase).
    pub ticking: bool,
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
}

impl SimAgent {
    pub fn new(name: NodeId, resources: Resources, labels: Labels) -> Self {
        let agent = Agent::new(identity(&name, &resources, &labels), 0, Recovered::default());
        SimAgent {
            name,
            agent,
            processes: BTreeMap::new(),
            up: false,
            ticking: false,
            incarnation: 0,
            boot: 0,
            resources,
            labels,
        }
    }

    /// Starts a new agent run on this machine. It keeps the machine's record of finished
    /// attempts (its state dir) and re-attaches to `running`.
    pub fn start_agent(&mut self, recovered: Recovered) {
        self.incarnation += 1;
        self.up = true;
        let identity = identity(&self.name, &self.resources, &self.labels);
        self.agent = Agent::new(identity, self.incarnation, recovered);
    }

    /// The machine (or the agent) dies: its processes die with it.
    pub fn die(&mut self) {
        self.up = false;
        self.processes.clear();
    }
}

fn identity(name: &NodeId, resources: &Resources, labels: &Labels) -> AgentIdentity {
    AgentIdentity {
        name: name.clone(),
        resources: resources.clone(),
        labels: labels.clone(),
        addr: format!("{name}.sim"),
        devices: None,
        log_url: String::new(),
        identity: String::new(),
    }
}
