//! The scheduling queue: items ordered by class, then (where the policy says so) priority, then
//! waiting time. Which need goes to which class, and in what order, is `policy.rs`.
//!
//! An item keeps its key while it waits: a failed attempt does not move it to the back.

use super::PgId;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::ops::Bound;

/// Queue classes, highest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueClass {
    Replacement = 1,
    PendingGang = 2,
    Spare = 3,
    Elastic = 4,
}

/// Marks the item that stands for a whole required gang.
pub const GANG: u32 = u32::MAX;

/// Position of an item in the queue; the derived order is the scheduling order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct QueueKey {
    pub class: QueueClass,
    /// Higher priority first; zero for replacements, which are FIFO whatever the priority.
    pub neg_priority: i64,
    pub since: Instant,
    pub pg: PgId,
    pub bundle: u32,
}

impl QueueKey {
    pub fn new(class: QueueClass, priority: i32, since: Instant, pg: PgId, bundle: u32) -> Self {
        let neg_priority = if super::policy::orders_by_priority(class) { -i64::from(priority) } else { 0 };
        QueueKey { class, neg_priority, since, pg, bundle }
    }

    pub fn is_gang(&self) -> bool {
        self.bundle == GANG
    }
}

/// The waiting items: those a pass considers, and those of infeasible groups, parked aside —
/// no node ever seen could hold them, so a pass would only walk past them. They return when a
/// node that could joins.
#[derive(Clone, Debug, Default)]
pub struct WaitQueue {
    active: BTreeSet<QueueKey>,
    parked: BTreeSet<QueueKey>,
}

impl WaitQueue {
    pub fn insert(&mut self, key: QueueKey, infeasible: bool) {
        if infeasible {
            self.parked.insert(key);
        } else {
            self.active.insert(key);
        }
    }

    pub fn remove(&mut self, key: &QueueKey) -> bool {
        self.active.remove(key) || self.parked.remove(key)
    }

    pub fn contains(&self, key: &QueueKey) -> bool {
        self.active.contains(key) || self.parked.contains(key)
    }

    /// The group became infeasible: its items step aside.
    pub fn park(&mut self, pg: PgId) {
        let keys: Vec<QueueKey> = self.active.iter().filter(|k| k.pg == pg).copied().collect();
        for key in keys {
            self.active.remove(&key);
            self.parked.insert(key);
        }
    }

    /// The group is feasible again: its items wait where they did.
    pub fn unpark(&mut self, pg: PgId) {
        let keys: Vec<QueueKey> = self.parked.iter().filter(|k| k.pg == pg).copied().collect();
        for key in keys {
            self.parked.remove(&key);
            self.active.insert(key);
        }
    }

    /// The first item of `class` a pass considers after `after` (or from the class's start).
    pub fn next_in_class(&self, class: QueueClass, after: Option<QueueKey>) -> Option<QueueKey> {
        let start = match after {
            Some(key) => Bound::Excluded(key),
            None => Bound::Included(QueueKey { class, neg_priority: i64::MIN, since: Instant::ZERO, pg: 0, bundle: 0 }),
        };
        self.active.range((start, Bound::Unbounded)).next().copied().filter(|k| k.class == class)
    }

    /// Items a pass considers, in scheduling order.
    pub fn active(&self) -> impl Iterator<Item = &QueueKey> {
        self.active.iter()
    }

    /// Every waiting item, parked ones included.
    pub fn all(&self) -> impl Iterator<Item = &QueueKey> {
        self.active.iter().chain(self.parked.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_class_then_priority_then_time() {
        let t = Instant::from_ms;
        let mut keys = [
            QueueKey::new(QueueClass::Elastic, 9, t(0), 1, 3),
            QueueKey::new(QueueClass::PendingGang, 0, t(5), 2, GANG),
            QueueKey::new(QueueClass::PendingGang, 1, t(9), 3, GANG),
            QueueKey::new(QueueClass::Replacement, -5, t(7), 4, 0),
            QueueKey::new(QueueClass::Replacement, 100, t(8), 5, 0),
        ];
        keys.sort();
        let pgs: Vec<PgId> = keys.iter().map(|k| k.pg).collect();
        assert_eq!(pgs, [4, 5, 3, 2, 1], "replacements FIFO whatever the priority, then gangs by priority");
    }
}
