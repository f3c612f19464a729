//! Events: what the head tells followers, traces and checkers, as types from end to end. The
//! core emits [`Event`]s; a trace line and a line of the runtime's NDJSON stream are both an
//! [`EventLine`] (the event and its time, one flat JSON object with sorted keys); a client
//! reads the stream back as [`StreamLine`]s. Field names here are a contract.

use crate::driver::{ActorState, CloseReason, JobState, LedgerEntry};
use crate::ids::{ActorId, JobId, NodeId};
use crate::protocol::AttemptKey;
use crate::resources::Devices;
use crate::scheduler::{NodeState, QueueClass};
use crate::time::Instant;
use crate::view::JobView;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Events for followers and traces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    JobSubmitted {
        job: JobId,
        name: String,
    },
    /// Something happened inside one job; written flat, with `job` beside the detail's fields.
    Job {
        job: JobId,
        detail: JobEvent,
    },
    Placed {
        job: JobId,
        actor: ActorId,
        node: NodeId,
        class: QueueClass,
        /// The GPU devices the bundle holds on `node` (written only when it holds some).
        #[serde(default, skip_serializing_if = "Devices::is_empty")]
        devices: Devices,
    },
    Released {
        job: JobId,
        actor: ActorId,
        node: NodeId,
    },
    NodeState {
        node: NodeId,
        state: NodeState,
        evidence: String,
    },
    /// A node's agent restarted: it re-attached to `reattached` attempts; `lost` were gone.
    /// `reconfigured`: it offers other resources or labels, and the node took them in place.
    AgentRestarted {
        node: NodeId,
        reattached: u32,
        lost: u32,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        reconfigured: bool,
    },
    /// A node's agent can no longer start work (`problem`: why), or can again (`None`).
    NodeHealth {
        node: NodeId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        problem: Option<String>,
    },
    /// A DEAD node left the head (`ftdrive forget`, or retention): `evidence` says which.
    NodeForgotten {
        node: NodeId,
        evidence: String,
    },
}

/// The `event` tags of [`Event`]'s own variants; every other tag is a [`JobEvent`]'s.
const OWN_TAGS: [&str; 7] =
    ["job_submitted", "placed", "released", "node_state", "node_health", "agent_restarted", "node_forgotten"];

impl Event {
    /// The job the event is about, if any.
    pub fn job(&self) -> Option<&JobId> {
        match self {
            Event::JobSubmitted { job, .. }
            | Event::Job { job, .. }
            | Event::Placed { job, .. }
            | Event::Released { job, .. } => Some(job),
            Event::NodeState { .. }
            | Event::NodeHealth { .. }
            | Event::AgentRestarted { .. }
            | Event::NodeForgotten { .. } => None,
        }
    }
}

/// Things worth telling a follower of a job, and worth a line in a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum JobEvent {
    Transition {
        actor: ActorId,
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
        /// Actors in rank order.
        ranks: Vec<ActorId>,
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
        spare: ActorId,
        replaces: ActorId,
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
        actor: ActorId,
    },
    /// Something else came to listen on the bundle's rendezvous port: its next attempt that
    /// serves the rendezvous listens on `to` (PS-4).
    PortMoved {
        actor: ActorId,
        from: u16,
        to: u16,
    },
    /// `actor`'s agent confirmed that `attempt`'s process runs (its view's `starting` ends):
    /// the one change of an actor's view that comes with no transition.
    StartConfirmed {
        actor: ActorId,
        attempt: u32,
        node: NodeId,
    },
    /// After a charged failure the job's next cycle (gang mode), or `actor`'s next attempt
    /// (actor mode), waits until `until_ms` (`retries.backoff_ms`), as the views'
    /// `restart_at_ms` say.
    BackingOff {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        actor: Option<ActorId>,
        until_ms: u64,
    },
}

/// One event at one time: a line of a trace, or of the head's event stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventLine {
    pub t_ms: u64,
    pub event: Event,
}

impl EventLine {
    pub fn new(now: Instant, event: Event) -> Self {
        EventLine { t_ms: now.as_ms(), event }
    }

    /// The line's text: one JSON object, keys sorted, so that equal runs print equal bytes.
    pub fn to_json(&self) -> String {
        line_json(self.t_ms, &self.event)
    }

    fn to_map(&self) -> Map<String, Value> {
        line_map(self.t_ms, &self.event)
    }

    fn from_map(mut map: Map<String, Value>) -> Result<Self, String> {
        let t_ms = map.remove("t_ms").and_then(|t| t.as_u64()).ok_or("an event line needs `t_ms`")?;
        let tag = map.get("event").and_then(Value::as_str).ok_or("an event line needs `event`")?;
        let event = if OWN_TAGS.contains(&tag) {
            serde_json::from_value(Value::Object(map)).map_err(|e| e.to_string())?
        } else {
            let job = map.remove("job").ok_or("a job event line needs `job`")?;
            let job: JobId = serde_json::from_value(job).map_err(|e| e.to_string())?;
            let detail = serde_json::from_value(Value::Object(map)).map_err(|e| e.to_string())?;
            Event::Job { job, detail }
        };
        Ok(EventLine { t_ms, event })
    }
}

/// The text of the line `event` at `t_ms` makes, without building the line.
pub fn line_json(t_ms: u64, event: &Event) -> String {
    Value::Object(line_map(t_ms, event)).to_string()
}

fn line_map(t_ms: u64, event: &Event) -> Map<String, Value> {
    let mut map = match event {
        Event::Job { job, detail } => {
            let mut map = as_object(serde_json::to_value(detail).expect("job events serialize"));
            map.insert("job".into(), Value::String(job.to_string()));
            map
        }
        other => as_object(serde_json::to_value(other).expect("events serialize")),
    };
    map.insert("t_ms".into(), Value::from(t_ms));
    map
}

fn as_object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("events serialize as objects, got {other}"),
    }
}

impl Serialize for EventLine {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_map().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for EventLine {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        EventLine::from_map(Map::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

/// A line of the head's NDJSON event stream: where a job stands, or an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamLine {
    /// `{"event": "snapshot", "job": {...}}`: the job as `status JOB --output json` shows it.
    Snapshot(Box<JobView>),
    Event(EventLine),
    /// `{"event": "error", "error": "..."}`: the stream ends here, and why (the follower fell
    /// too far behind, say).
    Error(String),
    /// An event of a kind this version does not know, from a newer head: its tag. A reader
    /// skips it, as a Kubernetes client passes over fields it does not know, rather than stop
    /// following a job because the head was upgraded first.
    Unknown(String),
}

impl StreamLine {
    pub fn to_json(&self) -> String {
        match self {
            StreamLine::Snapshot(job) => serde_json::json!({"event": "snapshot", "job": job}).to_string(),
            StreamLine::Event(line) => line.to_json(),
            StreamLine::Error(error) => serde_json::json!({"event": "error", "error": error}).to_string(),
            StreamLine::Unknown(tag) => serde_json::json!({"event": tag}).to_string(),
        }
    }

    pub fn parse(text: &str) -> Result<StreamLine, String> {
        let mut map: Map<String, Value> = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if map.get("event").and_then(Value::as_str) == Some("snapshot") {
            let job = map.remove("job").ok_or("a snapshot needs `job`")?;
            return serde_json::from_value(job).map(|j| StreamLine::Snapshot(Box::new(j))).map_err(|e| e.to_string());
        }
        if map.get("event").and_then(Value::as_str) == Some("error") {
            let error = map.get("error").and_then(Value::as_str).ok_or("an error line needs `error`")?;
            return Ok(StreamLine::Error(error.to_string()));
        }
        let tag = map.get("event").and_then(Value::as_str).unwrap_or_default().to_string();
        match EventLine::from_map(map) {
            // serde's word for a tag no variant has (a test holds it to that).
            Err(e) if e.starts_with("unknown variant") => Ok(StreamLine::Unknown(tag)),
            read => read.map(StreamLine::Event),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_flat_sorted_json_and_read_back() {
        let line = EventLine::new(
            Instant::from_ms(5),
            Event::NodeState { node: "n1".into(), state: NodeState::Dead, evidence: "gone".into() },
        );
        let text = line.to_json();
        assert_eq!(text, r#"{"event":"node_state","evidence":"gone","node":"n1","state":"DEAD","t_ms":5}"#);
        assert_eq!(serde_json::from_str::<EventLine>(&text).unwrap(), line);
    }

    #[test]
    fn job_events_carry_the_job_beside_their_fields() {
        let job = JobId::new("j1");
        let detail = JobEvent::Promoted { spare: ActorId::new(job.clone(), 3), replaces: ActorId::new(job.clone(), 1) };
        let line = EventLine::new(Instant::from_ms(9), Event::Job { job, detail });
        let text = line.to_json();
        assert_eq!(text, r#"{"event":"promoted","job":"j1","replaces":"j1/1","spare":"j1/3","t_ms":9}"#);
        assert_eq!(StreamLine::parse(&text).unwrap(), StreamLine::Event(line));
        let newer = StreamLine::parse(r#"{"event":"meteor","job":"j1","t_ms":1}"#);
        assert_eq!(newer, Ok(StreamLine::Unknown("meteor".into())), "a newer head's event is skipped, not an error");
        assert!(StreamLine::parse(r#"{"event":"ledger","job":"j1","t_ms":1}"#).is_err(), "a known one must be whole");
    }
}
