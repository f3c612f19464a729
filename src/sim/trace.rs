//! The trace: one JSON line per event the head reports (state transitions, placements, cycles,
//! ledger entries, node states), stamped with simulated time. Keys are sorted, so the same run
//! prints the same bytes in any process; a running hash lets two runs be compared cheaply.

use crate::head::Event;
use crate::time::Instant;
use serde_json::{Map, Value};

/// FNV-1a, 64 bit: stable, dependency-free, good enough to compare traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceHash(pub u64);

impl Default for TraceHash {
    fn default() -> Self {
        TraceHash(0xcbf2_9ce4_8422_2325)
    }
}

impl TraceHash {
    pub fn add(&mut self, line: &str) {
        for byte in line.bytes().chain(std::iter::once(b'\n')) {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// One trace line for `event` at `now`: the event's fields, `t_ms`, and for job events the
/// job id beside the job event's own fields.
pub fn line(now: Instant, event: &Event) -> String {
    let mut object = match event {
        Event::Job { job, detail } => {
            let mut map = as_object(serde_json::to_value(detail).expect("job events serialize"));
            map.insert("job".into(), Value::String(job.to_string()));
            map
        }
        other => as_object(serde_json::to_value(other).expect("events serialize")),
    };
    object.insert("t_ms".into(), Value::from(now.as_ms()));
    Value::Object(object).to_string()
}

fn as_object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("events serialize as objects, got {other}"),
    }
}

#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Keep the lines (for `--trace`), or only hash them.
    pub keep: bool,
    pub lines: Vec<String>,
    pub hash: TraceHash,
    pub count: u64,
}

impl Trace {
    pub fn record(&mut self, now: Instant, event: &Event) {
        let text = line(now, event);
        self.hash.add(&text);
        self.count += 1;
        if self.keep {
            self.lines.push(text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::NodeState;

    #[test]
    fn lines_are_flat_sorted_json() {
        let event = Event::NodeState { node: "n1".into(), state: NodeState::Dead, evidence: "gone".into() };
        assert_eq!(
            line(Instant::from_ms(5), &event),
            r#"{"event":"node_state","evidence":"gone","node":"n1","state":"DEAD","t_ms":5}"#
        );
    }
}
