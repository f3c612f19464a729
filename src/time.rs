//! Time as a plain value. The core never reads a clock: every caller passes `now` in.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A point in time, in milliseconds since an epoch chosen by the runtime (the daemon's start,
/// or zero in the simulator). Only differences between instants carry meaning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Instant(u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);

    pub const fn from_ms(ms: u64) -> Self {
        Instant(ms)
    }

    pub const fn as_ms(self) -> u64 {
        self.0
    }

    /// `self + ms`, saturating: a timer far in the future is still a timer.
    pub const fn plus_ms(self, ms: u64) -> Self {
        Instant(self.0.saturating_add(ms))
    }

    /// Milliseconds from `earlier` to `self`, zero if `earlier` is later.
    pub const fn ms_since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ms", self.0)
    }
}

/// The earliest of two optional deadlines.
pub fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Instant::from_ms(u64::MAX).plus_ms(5).as_ms(), u64::MAX);
        assert_eq!(Instant::from_ms(3).ms_since(Instant::from_ms(10)), 0);
        assert_eq!(Instant::from_ms(10).ms_since(Instant::from_ms(3)), 7);
    }

    #[test]
    fn earliest_ignores_missing() {
        let t = |ms| Some(Instant::from_ms(ms));
        assert_eq!(earliest(t(5), t(3)), t(3));
        assert_eq!(earliest(None, t(3)), t(3));
        assert_eq!(earliest(t(4), None), t(4));
        assert_eq!(earliest(None, None), None);
    }
}
