//! Placement groups: one per job, its bundles and where each stands.

use super::cluster::{Demand, NodeIx};
use super::queue::QueueKey;
use super::{PgId, QueueClass};
use crate::resources::{Devices, Labels, Resources};
use crate::spec::Strategy;
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What a job asks of the scheduler when it is submitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgSpec {
    pub priority: i32,
    pub submit: Instant,
    pub strategy: Strategy,
    pub bundle: Resources,
    pub node_selector: Labels,
    pub pack_by: Option<String>,
    /// Bundles in all: `max_nodes + hot_spares`.
    pub bundles: u32,
    /// The required gang: bundles `0..required`.
    pub required: u32,
}

/// Where one bundle stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BundleState {
    /// Not asked for (yet, or any more).
    Idle,
    /// Asked for in class 3 or 4 before the group was admitted; queued on admission.
    Deferred {
        class: QueueClass,
        since: Instant,
    },
    /// Waiting in the queue on its own.
    Queued {
        class: QueueClass,
        since: Instant,
    },
    /// Waiting as a member of the required gang.
    InGang,
    Placed {
        node: NodeIx,
        port: u16,
        devices: Devices,
    },
}

/// PG life cycle (DESIGN §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PgState {
    Pending,
    Created,
    /// Some placed bundle lost its node and is not re-placed yet.
    Rescheduling,
    Removed,
}

#[derive(Clone, Debug)]
pub struct PlacementGroup {
    pub priority: i32,
    pub submit: Instant,
    pub strategy: Strategy,
    pub bundle: Resources,
    pub demand: Demand,
    /// GPU devices each bundle holds.
    pub gpus: u32,
    pub selector: Labels,
    pub pack_by: Option<String>,
    pub required: u32,
    pub bundles: Vec<BundleState>,
    /// The required gang has been placed once; classes 1, 3 and 4 apply from then on.
    pub admitted: bool,
    /// `last_attempt_non_preemptible` has triggered: keep new placements off preemptible nodes.
    pub avoid_preemptible: bool,
    /// Nodes holding a bundle of this group, with how many.
    pub on_nodes: BTreeMap<NodeIx, u32>,
    /// Bundles that lost their node and are not re-placed yet.
    pub lost: BTreeSet<u32>,
    pub infeasible: Option<String>,
}

impl PlacementGroup {
    pub fn new(spec: PgSpec, demand: Demand) -> Self {
        assert!(spec.required >= 1 && spec.required <= spec.bundles, "bad gang size {spec:?}");
        PlacementGroup {
            priority: spec.priority,
            submit: spec.submit,
            strategy: spec.strategy,
            gpus: (spec.bundle.milli("gpu") / 1000) as u32,
            bundle: spec.bundle,
            demand,
            selector: spec.node_selector,
            pack_by: spec.pack_by,
            required: spec.required,
            bundles: vec![BundleState::Idle; spec.bundles as usize],
            admitted: false,
            avoid_preemptible: false,
            on_nodes: BTreeMap::new(),
            lost: BTreeSet::new(),
            infeasible: None,
        }
    }

    pub fn hosts(&self, node: NodeIx) -> bool {
        self.on_nodes.contains_key(&node)
    }

    pub fn note_placed(&mut self, bundle: u32, node: NodeIx, port: u16, devices: Devices) {
        self.bundles[bundle as usize] = BundleState::Placed { node, port, devices };
        *self.on_nodes.entry(node).or_insert(0) += 1;
        self.lost.remove(&bundle);
    }

    pub fn note_unplaced(&mut self, bundle: u32) -> Option<(NodeIx, u16, Devices)> {
        let BundleState::Placed { node, port, devices } = self.bundles[bundle as usize] else {
            return None;
        };
        self.bundles[bundle as usize] = BundleState::Idle;
        let count = self.on_nodes.get_mut(&node).expect("placed bundle counted on its node");
        *count -= 1;
        if *count == 0 {
            self.on_nodes.remove(&node);
        }
        Some((node, port, devices))
    }

    pub fn state(&self) -> PgState {
        if !self.admitted {
            PgState::Pending
        } else if !self.lost.is_empty() {
            PgState::Rescheduling
        } else {
            PgState::Created
        }
    }

    /// Bundles asked for and not placed, queued or not yet.
    pub fn waiting_count(&self) -> u32 {
        let waits = |b: &&BundleState| {
            matches!(b, BundleState::Deferred { .. } | BundleState::Queued { .. } | BundleState::InGang)
        };
        self.bundles.iter().filter(waits).count() as u32
    }

    /// Bundles queued on their own in `class`, with their keys, in queue order.
    pub fn queued_in(&self, id: PgId, class: QueueClass) -> Vec<QueueKey> {
        let mut keys: Vec<QueueKey> = (0..self.bundles.len() as u32).filter_map(|b| self.queued_key(id, b)).collect();
        keys.retain(|k| k.class == class);
        keys.sort();
        keys
    }

    /// The queue key of `bundle` while it waits in the queue on its own.
    pub fn queued_key(&self, id: PgId, bundle: u32) -> Option<QueueKey> {
        match self.bundles[bundle as usize] {
            BundleState::Queued { class, since } => Some(QueueKey::new(class, self.priority, since, id, bundle)),
            _ => None,
        }
    }

    pub fn placed_count(&self) -> usize {
        self.bundles.iter().filter(|b| matches!(b, BundleState::Placed { .. })).count()
    }
}
