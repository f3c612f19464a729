//! The aging checker, `starved_item_held` (DESIGN §3, backfill with aging): once an item has
//! waited `starvation_ms`, nothing below it in the queue is placed on capacity it could use.

use super::{ActorKey, Checker};
use crate::head::WaitingItem;
use crate::ids::{JobId, NodeId};
use crate::scheduler::QueueClass;
use crate::time::Instant;
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// Where an item stands in the queue, re-stated from DESIGN §3: class, then priority (higher
/// first), then submit time — the fields' order is the order compared. Replacements are not
/// judged here (`replacement_first` is theirs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Standing {
    class: QueueClass,
    neg_priority: i64,
    submitted: Instant,
}

impl Checker {
    /// Enables `starved_item_held` with the head's `starvation_ms`.
    pub fn check_starvation_holds(&mut self, starvation_ms: u64) {
        self.starvation_ms = Some(starvation_ms);
    }

    /// `starved_item_held`, for one step's placements below the replacements (`placed`) and
    /// the items still waiting after it.
    pub(super) fn check_starved_holds(&mut self, placed: &[(ActorKey, NodeId, QueueClass)], waiting: &[WaitingItem]) {
        let Some(starvation_ms) = self.starvation_ms else { return };
        for item in waiting {
            let job = &item.bundle.job;
            let Some(&submitted) = self.submitted_at.get(job) else { continue };
            let waited_ms = self.now.ms_since(submitted);
            if waited_ms < starvation_ms {
                continue;
            }
            let standing = self.standing(job, item.class);
            let mut lower: BTreeMap<NodeId, Vec<ActorKey>> = BTreeMap::new();
            for (key, node, class) in placed {
                if self.is_below(key, *class, item, standing) {
                    lower.entry(node.clone()).or_default().push(key.clone());
                }
            }
            if !lower.is_empty() {
                let what = format!("a starving item (waiting {waited_ms} ms, starvation_ms {starvation_ms})");
                self.check_lower_placements("starved_item_held", &what, &lower, std::slice::from_ref(&item.bundle));
            }
        }
    }

    /// Is the placement of `key` from `class` surely below `item`? Two jobs alike in class,
    /// priority and submit time are not judged: their order is the head's tie-break.
    fn is_below(&self, key: &ActorKey, class: QueueClass, item: &WaitingItem, standing: Standing) -> bool {
        match self.standing(&key.0, class).cmp(&standing) {
            Ordering::Greater => true,
            Ordering::Less => false,
            // The same job's bundles wait in index order; a gang's item stands for all of them.
            Ordering::Equal => key.0 == item.bundle.job && !item.gang && key.1 > item.bundle.actor,
        }
    }

    fn standing(&self, job: &JobId, class: QueueClass) -> Standing {
        let priority = self.specs.get(job).map_or(0, |s| s.priority);
        let submitted = self.submitted_at.get(job).copied().unwrap_or(Instant::ZERO);
        Standing { class, neg_priority: -i64::from(priority), submitted }
    }
}
