//! The driver's timers, in one table (the quinn-proto shape): each [`Timer`] is set to a
//! deadline or not set; `poll_timeout` is the earliest of them; `handle_timeout` asks which
//! have expired. No timer lives anywhere else in the driver.

use crate::ids::ActorIx;
use crate::time::Instant;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Timer {
    /// `schedule_timeout_ms`: the job fails if it is still short of `min_nodes` placed.
    ScheduleDeadline,
    /// `run_timeout_ms`: the job is stopped and fails this long after it first ran.
    RunDeadline,
    /// Gang mode: stop the world to grow it, `scale_up_delay_ms` after the first join.
    ScaleUp,
    /// Gang mode: no new cycle before the backoff after a charged failure.
    CycleBackoff,
    /// Actor mode: this actor does not restart before its backoff.
    ActorBackoff(ActorIx),
    /// This actor's failure waits at most this long for a peer's node loss to explain it.
    Attribution(ActorIx),
}

impl Timer {
    fn is_backoff(self) -> bool {
        matches!(self, Timer::CycleBackoff | Timer::ActorBackoff(_))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimerTable {
    deadlines: BTreeMap<Timer, Instant>,
}

impl TimerTable {
    pub fn set(&mut self, timer: Timer, at: Instant) {
        self.deadlines.insert(timer, at);
    }

    pub fn stop(&mut self, timer: Timer) {
        self.deadlines.remove(&timer);
    }

    pub fn get(&self, timer: Timer) -> Option<Instant> {
        self.deadlines.get(&timer).copied()
    }

    pub fn is_set(&self, timer: Timer) -> bool {
        self.deadlines.contains_key(&timer)
    }

    /// Is `timer` set to a time after `now`?
    pub fn pending_at(&self, timer: Timer, now: Instant) -> bool {
        self.get(timer).is_some_and(|t| t > now)
    }

    /// Stops `timer` and returns true if it has expired by `now`.
    pub fn take_expired(&mut self, timer: Timer, now: Instant) -> bool {
        let expired = self.get(timer).is_some_and(|t| t <= now);
        if expired {
            self.stop(timer);
        }
        expired
    }

    /// Backoffs that have run out are simply over.
    pub fn clear_expired_backoffs(&mut self, now: Instant) {
        self.deadlines.retain(|timer, at| !(timer.is_backoff() && *at <= now));
    }

    /// The earliest deadline.
    pub fn next(&self) -> Option<Instant> {
        self.deadlines.values().min().copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = (Timer, Instant)> + '_ {
        self.deadlines.iter().map(|(t, at)| (*t, *at))
    }
}

// As a list of pairs: JSON map keys must be strings, and timers carry data.
impl Serialize for TimerTable {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.deadlines.iter())
    }
}

impl<'de> Deserialize<'de> for TimerTable {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let pairs: Vec<(Timer, Instant)> = Vec::deserialize(deserializer)?;
        Ok(TimerTable { deadlines: pairs.into_iter().collect() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_deadline_wins_and_backoffs_just_expire() {
        let t = Instant::from_ms;
        let mut table = TimerTable::default();
        table.set(Timer::ScaleUp, t(50));
        table.set(Timer::ActorBackoff(2), t(10));
        table.set(Timer::Attribution(1), t(10));
        assert_eq!(table.next(), Some(t(10)));
        table.clear_expired_backoffs(t(10));
        assert!(!table.is_set(Timer::ActorBackoff(2)) && table.is_set(Timer::Attribution(1)));
        assert!(!table.take_expired(Timer::ScaleUp, t(49)));
        assert!(table.take_expired(Timer::ScaleUp, t(50)) && !table.is_set(Timer::ScaleUp));
        let text = serde_json::to_string(&table).unwrap();
        assert_eq!(serde_json::from_str::<TimerTable>(&text).unwrap(), table);
    }
}
