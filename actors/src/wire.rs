//! The agent channel's messages as they travel (JSON text frames over a WebSocket), and how
//! they map onto the core's inputs and effects. The head adds only what the core does not
//! model: a welcome carrying the heartbeat interval, refusals, and where an agent serves logs.

use ftdrive::head::Input;
use ftdrive::protocol::{AttemptKey, ExitStatus, ToAgent};
use ftdrive::{Labels, NodeId, Resources};
use serde::{Deserialize, Serialize};

/// Agent → head.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMsg {
    Register {
        node: NodeId,
        incarnation: u64,
        resources: Resources,
        labels: Labels,
        /// Where other ranks reach this node (`MASTER_ADDR`).
        addr: String,
        /// Base URL of this agent's log server.
        log_url: String,
    },
    Heartbeat {
        node: NodeId,
        incarnation: u64,
        seq: u64,
        running: Vec<AttemptKey>,
    },
    Started {
        node: NodeId,
        key: AttemptKey,
    },
    Exited {
        node: NodeId,
        key: AttemptKey,
        status: ExitStatus,
    },
    SpawnFailed {
        node: NodeId,
        key: AttemptKey,
        message: String,
    },
    /// A preemption notice: this machine goes away within `deadline_ms`.
    PreemptionNotice {
        node: NodeId,
        deadline_ms: u64,
    },
}

impl AgentMsg {
    pub fn node(&self) -> &NodeId {
        match self {
            AgentMsg::Register { node, .. }
            | AgentMsg::Heartbeat { node, .. }
            | AgentMsg::Started { node, .. }
            | AgentMsg::Exited { node, .. }
            | AgentMsg::SpawnFailed { node, .. }
            | AgentMsg::PreemptionNotice { node, .. } => node,
        }
    }

    /// The core input this message is.
    pub fn into_input(self) -> Input {
        match self {
            AgentMsg::Register { node, incarnation, resources, labels, addr, .. } => {
                Input::Register { node, incarnation, resources, labels, addr }
            }
            AgentMsg::Heartbeat { node, incarnation, seq, running } => {
                Input::Heartbeat { node, incarnation, seq, running }
            }
            AgentMsg::Started { node, key } => Input::ProcessStarted { node, key },
            AgentMsg::Exited { node, key, status } => Input::ProcessExited { node, key, status },
            AgentMsg::SpawnFailed { node, key, message } => Input::SpawnFailed { node, key, message },
            AgentMsg::PreemptionNotice { node, deadline_ms } => Input::PreemptionNotice { node, deadline_ms },
        }
    }
}

/// Head → agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HeadMsg {
    /// The registration was accepted; heartbeat this often.
    Welcome { heartbeat_interval_ms: u64 },
    /// A start, stop or acknowledgement from the core.
    Do { msg: ToAgent },
    /// A message was refused. `register_again`: the head does not know this agent (declared
    /// dead, or the registration was lost) and it should register again.
    Refused { reason: String, register_again: bool },
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftdrive::JobId;

    #[test]
    fn messages_round_trip_as_tagged_json() {
        let key = AttemptKey { job: JobId::new("j1"), actor: 0, attempt: 1, cycle: 1 };
        let msg = AgentMsg::Exited { node: NodeId::new("n1"), key: key.clone(), status: ExitStatus::code(1) };
        let text = serde_json::to_string(&msg).unwrap();
        assert!(text.starts_with(r#"{"type":"exited""#), "{text}");
        assert_eq!(serde_json::from_str::<AgentMsg>(&text).unwrap(), msg);
        let down = HeadMsg::Do { msg: ToAgent::AckExit { key } };
        assert_eq!(serde_json::from_str::<HeadMsg>(&serde_json::to_string(&down).unwrap()).unwrap(), down);
    }
}
