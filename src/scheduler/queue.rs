//! The scheduling queue: items ordered by class, then (where the policy says so) priority, then
//! waiting time. Which need goes to which class, and in what order, is `policy.rs`.
//!
//! An item keeps its key while it waits: a failed attempt does not move it to the back.

use super::PgId;
use crate::time::Instant;
use serde::{Deserialize, Serialize};

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
