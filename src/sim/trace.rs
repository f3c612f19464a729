//! The trace: one JSON line per event the head reports (state transitions, placements, cycles,
//! ledger entries, node states), stamped with simulated time. Keys are sorted, so the same run
//! prints the same bytes in any process; a running hash lets two runs be compared cheaply.

use crate::event::{line_json, Event};
use crate::time::Instant;

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
        let text = line_json(now.as_ms(), event);
        self.hash.add(&text);
        self.count += 1;
        if self.keep {
            self.lines.push(text);
        }
    }
}
