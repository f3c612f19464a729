//! Scheduling policy (DESIGN §3), in one place. Drivers say what they need a bundle for
//! ([`Need`]); this module decides everything that follows from it:
//!
//! | need | class | order within the class |
//! |---|---|---|
//! | `Restore` a lost bundle a running job needs to stay at `min_nodes` (or rank 0 in actor mode) | 1 Replacement | loss time (FIFO), whatever the priority; a job's restorations together ([`placed_together`]) |
//! | `Admission`: the required gang of a pending job | 2 PendingGang | priority, then submit time |
//! | `Spare` | 3 Spare | priority, then submit time |
//! | `Growth` towards `max_nodes` | 4 Elastic | priority, then submit time |
//!
//! Classes are offered capacity in that order ([`class_order`]). Backfill with aging: an item
//! that cannot be placed lets lower items use capacity unless it is *protected* — a replacement
//! always, anything else once it has waited `starvation_ms` ([`is_protected`]); a protected
//! item holds the room it could use now on each node ([`Holds`]), but never from the
//! restoration of a job whose reservation it waits for (HO-1).
//!
//! A new queue rule belongs here; the recipe is in `docs/structure.md`.

use super::cluster::{Cluster, Demand, Node, NodeIx};
use super::feasibility::{could_use_now, could_use_once_freed};
use super::pg::PlacementGroup;
use super::queue::{QueueClass, QueueKey};
use super::{PgId, PolicyFault};
use crate::spec::Strategy;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What a job needs one bundle for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Need {
    /// A member of the required gang of a job not yet admitted (requested as one item).
    Admission,
    /// A bundle a running job lost and needs to stay at `min_nodes`, or rank 0 of an actor-mode
    /// job, without which none of its ranks starts.
    Restore { lost_at: Instant },
    /// A hot spare.
    Spare,
    /// A bundle between `min_nodes` and `max_nodes`.
    Growth,
}

/// The queue class a need is served from.
pub fn class_of(need: Need) -> QueueClass {
    match need {
        Need::Restore { .. } => QueueClass::Replacement,
        Need::Admission => QueueClass::PendingGang,
        Need::Spare => QueueClass::Spare,
        Need::Growth => QueueClass::Elastic,
    }
}

/// Where a need waits in its class: since its loss for a restoration, else since submission.
pub fn waiting_since(need: Need, submitted: Instant) -> Instant {
    match need {
        Need::Restore { lost_at } => lost_at,
        Need::Admission | Need::Spare | Need::Growth => submitted,
    }
}

/// Does a job's priority order items of `class`? Replacements are FIFO whatever the priority:
/// a running gang is admitted already.
pub fn orders_by_priority(class: QueueClass) -> bool {
    class != QueueClass::Replacement
}

/// Are a group's waiting items of `class` placed as one, all or none? A running job's lost
/// bundles are: the job runs again only once every one is back, and two jobs re-placed one
/// bundle at a time could each take half of what the other needs and wait for ever (DESIGN §3:
/// a gang is never left half-placed; swarm seed 666027). They go together where the first of
/// them waits in the queue, so a job's restoration keeps the place of its first loss.
pub fn placed_together(class: QueueClass) -> bool {
    class == QueueClass::Replacement
}

/// The order in which classes are offered capacity, highest first.
pub fn class_order(fault: PolicyFault) -> [QueueClass; 4] {
    use QueueClass::*;
    match fault {
        PolicyFault::GangsBeforeReplacements => [PendingGang, Replacement, Spare, Elastic],
        _ => [Replacement, PendingGang, Spare, Elastic],
    }
}

/// A blocked item that lower items may not take capacity from.
pub fn is_protected(key: &QueueKey, now: Instant, starvation_ms: u64) -> bool {
    key.class == QueueClass::Replacement || now.ms_since(key.since) >= starvation_ms
}

/// Capacity lower items must not take: on every node a blocked, protected group could use, the
/// room it could use there ([`room_wanted_per_node`]); and single nodes set aside whole for
/// the bundles of suspect nodes. What is left of a node beside a hold stays free for anyone, as
/// Slurm's backfill does: a starving gang that needs one GPU per node keeps one GPU of each
/// node, not all eight.
///
/// HO-1: a hold never binds the restoration of a job that holds a reservation the held group
/// could use once freed ([`Holds::binding`]). That job runs again, and so ends and frees what
/// it holds, only once restored: holding its restoration back for a group that waits for its
/// reservation would wait for ever (swarm seed 1997055).
///
/// HO-2: a held group stands for the equivalent groups held after it only while it has no
/// bundle of its own; once it has one (its spare placed later in the pass, say), it is no
/// longer their equal — STRICT_SPREAD keeps it off that node — and they hold room themselves
/// ([`Holds::binding`]). Else two lower items could take, one after the other, the room a
/// starving gang could use (swarm seed 6880744).
#[derive(Default)]
pub struct Holds {
    groups: Vec<PgId>,
    /// For a held group, the equivalent ones added after it, which it stands for (HO-2).
    stands_for: BTreeMap<PgId, Vec<PgId>>,
    nodes: BTreeSet<NodeIx>,
}

/// What the holds keep from one item: the nodes set aside, and the held groups that bind it.
pub struct HeldFrom<'a> {
    nodes: &'a BTreeSet<NodeIx>,
    groups: Vec<PgId>,
}

impl Holds {
    /// Adds a blocked group unless an equivalent one (same demand, filters and gang size, which
    /// a STRICT_PACK group's filters read) is held already.
    pub fn add(&mut self, id: PgId, pgs: &BTreeMap<PgId, PlacementGroup>) {
        let pg = &pgs[&id];
        let same = |h: &PgId| {
            let h = &pgs[h];
            h.demand == pg.demand
                && h.selector == pg.selector
                && h.avoid_preemptible == pg.avoid_preemptible
                && h.pack_by == pg.pack_by
                && h.strategy == pg.strategy
                && h.required == pg.required
                && h.on_nodes.is_empty()
                && pg.on_nodes.is_empty()
        };
        match self.groups.iter().find(|h| same(h)) {
            Some(&standing) => self.stands_for.entry(standing).or_default().push(id),
            None => self.groups.push(id),
        }
    }

    /// Sets `ix` aside whole (for a suspect node's bundle, which needs one node).
    pub fn hold_node(&mut self, ix: NodeIx) {
        self.nodes.insert(ix);
    }

    pub fn holds_node(&self, ix: NodeIx) -> bool {
        self.nodes.contains(&ix)
    }

    /// The holds that bind an item of `class` of the group `asker`: every one, except, for a
    /// restoration, those of groups that wait for a reservation of the asker's (HO-1).
    pub fn binding<'a>(
        &'a self,
        asker: &PlacementGroup,
        class: QueueClass,
        cluster: &Cluster,
        pgs: &BTreeMap<PgId, PlacementGroup>,
    ) -> HeldFrom<'a> {
        let mut held = Vec::with_capacity(self.groups.len());
        for &id in &self.groups {
            self.held_for(id, pgs, &mut held);
        }
        held.retain(|id| !hold_lifted(asker, class, &pgs[id], cluster));
        HeldFrom { nodes: &self.nodes, groups: held }
    }

    /// The held group `id`, and those it no longer stands for (HO-2): once it has a bundle,
    /// each equal that has one too is held itself, and the first without one stands for the
    /// rest.
    fn held_for(&self, id: PgId, pgs: &BTreeMap<PgId, PlacementGroup>, held: &mut Vec<PgId>) {
        held.push(id);
        if pgs[&id].on_nodes.is_empty() {
            return;
        }
        let mut standing = false;
        for &equal in self.stands_for.get(&id).into_iter().flatten() {
            let bare = pgs[&equal].on_nodes.is_empty();
            if !bare || !standing {
                held.push(equal);
                standing |= bare;
            }
        }
    }
}

/// HO-1: is an item of `class` of the group `asker` free of the hold of the group `held`? Only
/// a restoration is, and only of a group that could use, once freed, a node where the asker has
/// a reservation.
pub fn hold_lifted(asker: &PlacementGroup, class: QueueClass, held: &PlacementGroup, cluster: &Cluster) -> bool {
    class == QueueClass::Replacement
        && asker.on_nodes.keys().any(|&ix| could_use_once_freed(cluster.node(ix), ix, held))
}

impl HeldFrom<'_> {
    /// Would `count` bundles of `demand` on `node` take room a binding held group could use
    /// now, or is the node set aside?
    pub fn held(
        &self,
        node: &Node,
        ix: NodeIx,
        demand: &Demand,
        count: u32,
        pgs: &BTreeMap<PgId, PlacementGroup>,
    ) -> bool {
        self.nodes.contains(&ix) || self.groups.iter().any(|id| takes_held_room(node, ix, &pgs[id], demand, count))
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty() && self.nodes.is_empty()
    }
}

/// Would `count` bundles of `demand` on `node` take room the blocked group `held` could use
/// there now: its room on the node, counted up to what it could place on one node, would shrink.
pub fn takes_held_room(node: &Node, ix: NodeIx, held: &PlacementGroup, demand: &Demand, count: u32) -> bool {
    let wanted = room_wanted_per_node(held);
    could_use_now(node, ix, held)
        && node.room_after(&held.demand, wanted, demand, count) < node.room_for(&held.demand, wanted)
}

/// The most bundles a blocked group could want on one node: one under STRICT_SPREAD, else its
/// whole gang (PACK and SPREAD may put several on a node; STRICT_PACK puts them all on one).
pub fn room_wanted_per_node(pg: &PlacementGroup) -> u32 {
    match pg.strategy {
        Strategy::StrictSpread => 1,
        Strategy::Spread | Strategy::Pack | Strategy::StrictPack => pg.required.max(1),
    }
}

/// The most bundles of one item that may land on one node: its strategy's limit, as far as a
/// hold is concerned (`HeldFrom::held` is asked for this many at once).
pub fn most_per_node(pg: &PlacementGroup, count: u32) -> u32 {
    match pg.strategy {
        Strategy::StrictSpread => 1,
        Strategy::Spread | Strategy::Pack | Strategy::StrictPack => count.max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_map_to_classes_and_replacements_ignore_priority() {
        let t = Instant::from_ms(7);
        assert_eq!(class_of(Need::Restore { lost_at: t }), QueueClass::Replacement);
        assert_eq!(waiting_since(Need::Restore { lost_at: t }, Instant::ZERO), t);
        assert_eq!(waiting_since(Need::Growth, Instant::from_ms(3)), Instant::from_ms(3));
        assert!(!orders_by_priority(QueueClass::Replacement) && orders_by_priority(QueueClass::Spare));
        assert_eq!(class_order(PolicyFault::None)[0], QueueClass::Replacement);
    }
}
