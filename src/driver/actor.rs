//! The command-actor state machine (DESIGN §2): an explicit enum, the table of legal
//! transitions, and the per-actor record the driver keeps.

use super::Master;
use crate::ids::{ActorId, NodeId};
use crate::protocol::ExitStatus;
use crate::resources::Devices;
use crate::scheduler::Need;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Exactly the states of DESIGN §2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ActorState {
    Scheduling,
    Standby,
    Running,
    Failing,
    TaskCompleted,
    Failed,
    Stopped,
}

impl ActorState {
    pub fn is_terminal(self) -> bool {
        matches!(self, ActorState::TaskCompleted | ActorState::Failed | ActorState::Stopped)
    }

    /// The transition table. Anything not listed is a bug.
    ///
    /// ```text
    /// SCHEDULING → RUNNING         bundle placed, cycle formed, process started
    /// SCHEDULING → STANDBY         placed as a spare
    /// STANDBY    → SCHEDULING      promoted (or its bundle was lost or drained)
    /// STANDBY    → TASK_COMPLETED  job succeeded: graceful end of a spare
    /// RUNNING    → TASK_COMPLETED  exit 0
    /// RUNNING    → FAILING         exit ≠ 0, node lost, preempted, stopped by the driver
    /// FAILING    → SCHEDULING      budget left (retry) or a free cause
    /// FAILING    → FAILED          no budget left, or a cause that is never retried
    /// any non-terminal → STOPPED   the job was stopped or closed
    /// ```
    pub fn can_become(self, to: ActorState) -> bool {
        use ActorState::*;
        matches!(
            (self, to),
            (Scheduling, Running)
                | (Scheduling, Standby)
                | (Standby, Scheduling)
                | (Standby, TaskCompleted)
                | (Running, TaskCompleted)
                | (Running, Failing)
                | (Failing, Scheduling)
                | (Failing, Failed)
        ) || (to == Stopped && !self.is_terminal())
    }
}

impl fmt::Display for ActorState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = serde_json::to_value(self).expect("state serializes");
        f.write_str(text.as_str().expect("state is a string"))
    }
}

/// Whether an actor is meant to be a member of the world or a hot spare. Roles swap when a
/// spare is promoted: the spare takes the failed actor's rank, the failed actor becomes a spare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Active,
    Spare,
}

/// A node as the driver needs to know it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRef {
    pub name: NodeId,
    /// Address other ranks reach this node at (`MASTER_ADDR`).
    pub addr: String,
    pub preemptible: bool,
    /// The node's value of the job's `pack_by` label, if any.
    pub domain: Option<String>,
}

/// An actor's bundle as the driver tracks it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Bundle {
    None,
    Requested { need: Need },
    Placed { node: NodeRef, port: u16, devices: Devices, draining: bool },
}

impl Bundle {
    pub fn node(&self) -> Option<&NodeRef> {
        match self {
            Bundle::Placed { node, .. } => Some(node),
            _ => None,
        }
    }

    pub fn is_placed(&self) -> bool {
        matches!(self, Bundle::Placed { .. })
    }

    /// Placed on a node that is not draining (nor unable to start work, which marks the bundle
    /// `draining` too: `on_node_unhealthy`): usable for a (re)start.
    pub fn is_usable(&self) -> bool {
        matches!(self, Bundle::Placed { draining: false, .. })
    }

    /// Placed on a node labelled `preemptible=true`.
    pub fn on_preemptible_node(&self) -> bool {
        self.node().is_some_and(|n| n.preemptible)
    }
}

/// Why the driver asked a running attempt to stop; decides the cause when it ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    /// Another rank failed (at `at`) and the gang restarts; `drained` names the node when that
    /// rank did not fail but was moved off a draining node.
    Collateral {
        because: ActorId,
        at: Instant,
        #[serde(default)]
        drained: Option<NodeId>,
    },
    /// The job failed; its other ranks are stopped.
    JobFailed { because: String },
    /// The world grows from `from` to `to` ranks.
    MembershipChange { from: u32, to: u32 },
    /// The node is draining (due at `deadline`, which with the node names the one drain every
    /// attempt it stopped shares).
    Drain {
        node: NodeId,
        deadline_ms: u64,
        #[serde(default)]
        deadline: Instant,
        #[serde(default)]
        by: DrainSource,
    },
    /// The user stopped the job.
    User,
}

/// The live attempt of an actor: enough to start it again word for word (a head that
/// restarted re-sends unconfirmed starts) and to know how it must end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub attempt: u32,
    pub cycle: u32,
    pub rank: u32,
    pub world_size: u32,
    pub node: NodeId,
    /// Its bundle's port.
    pub port: u16,
    /// The GPU devices its bundle holds.
    #[serde(default)]
    pub devices: Devices,
    /// The rendezvous it was started with.
    pub master: Master,
    pub started: Instant,
    /// The agent confirmed the start.
    pub acked: bool,
    pub stop: Option<StopReason>,
    /// The grace its stop was asked with.
    pub stop_grace_ms: u64,
    /// Gang mode: exited 0 and waits for its peers before the cycle can succeed.
    pub exited: Option<(ExitStatus, Instant)>,
    /// The node started draining while this attempt ran.
    pub draining: bool,
    /// Who drained it, when `draining`.
    #[serde(default)]
    pub drained_by: DrainSource,
    /// User-budget retries charged before it started (`TORCHELASTIC_RESTART_COUNT`), fixed
    /// at its start so that its start is the same whenever it is sent.
    #[serde(default)]
    pub restarts: u32,
    /// How many peer losses the driver had recorded when it started (`Driver::losses_recorded`):
    /// only a loss recorded after may excuse its failure (AT-4 in `failure.rs`).
    #[serde(default)]
    pub losses_before: u64,
}

/// Who drained a node: its own agent, announcing that the machine goes away, or the operator.
/// Either way the attempts stopped there are `preempted` (DESIGN §6); the ledger's evidence
/// says which.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DrainSource {
    /// The agent's preemption notice (a cloud's spot reclaim, a SIGTERM to the agent).
    #[default]
    Notice,
    /// `ftdrive drain`.
    Operator,
}

impl DrainSource {
    /// Said of a node lost while it drained: "it was draining after a preemption notice".
    pub fn while_draining(self) -> &'static str {
        match self {
            DrainSource::Notice => "it was draining after a preemption notice",
            DrainSource::Operator => "it was draining at the operator's request",
        }
    }

    /// "node n3 received a preemption notice".
    pub fn describe(self, node: &NodeId) -> String {
        match self {
            DrainSource::Notice => format!("node {node} received a preemption notice"),
            DrainSource::Operator => format!("node {node} was drained by the operator"),
        }
    }
}

/// One command actor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    pub name: ActorId,
    pub state: ActorState,
    pub role: Role,
    pub bundle: Bundle,
    /// Attempts started so far; the current one's number.
    pub attempts: u32,
    pub run: Option<Run>,
    /// When it last lost its bundle (orders replacements, FIFO).
    pub lost_at: Option<Instant>,
    /// Never to start: its job is terminating and it never would (`never_runs_once_terminating`).
    pub parked: bool,
    /// Actor mode: the rank this actor holds.
    pub slot: Option<u32>,
    /// Rank of its latest attempt.
    pub rank: Option<u32>,
    /// While it is STANDBY: since when (the dashboard draws the wait as a bar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby_since: Option<Instant>,
    /// The node of the last bundle it held, once it holds none: where an ended actor is shown
    /// (a spare that stood by and ended has no ledger entry to say where).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_node: Option<NodeId>,
}

impl Actor {
    /// RUNNING, its start sent but not yet confirmed by its agent: its process may not exist
    /// yet (the API's `starting`, the `ftdrive_actors_starting` gauge).
    pub fn is_starting(&self) -> bool {
        self.state == ActorState::Running && self.run.as_ref().is_some_and(|r| !r.acked)
    }

    /// Gives up its bundle, remembering the node it was on (`last_node`).
    pub fn clear_bundle(&mut self) {
        if let Some(node) = self.bundle.node() {
            self.last_node = Some(node.name.clone());
        }
        self.bundle = Bundle::None;
    }

    pub fn new(name: ActorId, role: Role, slot: Option<u32>) -> Self {
        Actor {
            name,
            state: ActorState::Scheduling,
            role,
            bundle: Bundle::None,
            attempts: 0,
            run: None,
            lost_at: None,
            parked: false,
            slot,
            rank: None,
            standby_since: None,
            last_node: None,
        }
    }

    /// Once an actor-mode job is terminating (a rank completed), a spare or a rank that never
    /// started will not start: the one rule `requests`, `inputs` and `actor_mode` apply.
    pub fn never_runs_once_terminating(&self) -> bool {
        self.role == Role::Spare || self.attempts == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ActorState::*;

    #[test]
    fn transition_table_matches_the_design() {
        let all = [Scheduling, Standby, Running, Failing, TaskCompleted, Failed, Stopped];
        let legal: Vec<(ActorState, ActorState)> =
            all.iter().flat_map(|a| all.iter().map(move |b| (*a, *b))).filter(|(a, b)| a.can_become(*b)).collect();
        assert_eq!(
            legal,
            vec![
                (Scheduling, Standby),
                (Scheduling, Running),
                (Scheduling, Stopped),
                (Standby, Scheduling),
                (Standby, TaskCompleted),
                (Standby, Stopped),
                (Running, Failing),
                (Running, TaskCompleted),
                (Running, Stopped),
                (Failing, Scheduling),
                (Failing, Failed),
                (Failing, Stopped),
            ]
        );
        assert_eq!(Scheduling.to_string(), "SCHEDULING");
    }
}
