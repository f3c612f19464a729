//! Feasibility: the static filters a node must pass for a placement group (alive, selector,
//! preemptible avoidance, `pack_by` label), holds that keep lower items off capacity a waiting
//! item could use, and the reason an unplaceable request is infeasible.

use super::cluster::{Cluster, Node, NodeIx, NodeState};
use super::pg::PlacementGroup;
use super::PgId;
use crate::resources::{format_milli, Resources};
use crate::spec::Strategy;
use std::collections::BTreeMap;

/// Does `node` pass the placement group's static filters?
pub fn usable(node: &Node, pg: &PlacementGroup) -> bool {
    node.state == NodeState::Alive
        && selector_matches(node, pg)
        && !(pg.avoid_preemptible && node.preemptible)
        && pg.pack_by.as_ref().is_none_or(|key| node.labels.contains_key(key))
}

fn selector_matches(node: &Node, pg: &PlacementGroup) -> bool {
    pg.selector.iter().all(|(k, v)| node.labels.get(k) == Some(v))
}

/// Could `pg` put one of its bundles on `node` right now?
pub fn could_use_now(node: &Node, ix: NodeIx, pg: &PlacementGroup) -> bool {
    let spread_conflict = pg.strategy == Strategy::StrictSpread && pg.hosts(ix);
    usable(node, pg) && !spread_conflict && node.room_for(&pg.demand, 1) == 1
}

/// Why no node, alive or ever seen, could hold one bundle of `pg` — or `None` if some could.
/// For STRICT_PACK the whole required gang must fit on one node.
pub fn infeasible_reason(cluster: &Cluster, pg: &PlacementGroup) -> Option<String> {
    let per_node = if pg.strategy == Strategy::StrictPack { u64::from(pg.required) } else { 1 };
    if cluster.is_empty() {
        return Some("infeasible: no node has joined the cluster yet".to_string());
    }
    let matching: Vec<&Node> = cluster.all().map(|(_, n)| n).filter(|n| selector_matches(n, pg)).collect();
    if matching.is_empty() {
        return Some(format!("infeasible: no node matches node_selector {}", labels_text(pg)));
    }
    let matching: Vec<&Node> = match &pg.pack_by {
        Some(key) => matching.into_iter().filter(|n| n.labels.contains_key(key)).collect(),
        None => matching,
    };
    if matching.is_empty() {
        let key = pg.pack_by.as_deref().unwrap_or_default();
        return Some(format!("infeasible: no matching node has the label `{key}` that pack_by needs"));
    }
    let matching: Vec<&Node> = matching.into_iter().filter(|n| !(pg.avoid_preemptible && n.preemptible)).collect();
    if matching.is_empty() {
        return Some(
            "infeasible: last_attempt_non_preemptible keeps the job off preemptible nodes, and no other node matches"
                .to_string(),
        );
    }
    if matching.iter().any(|n| n.could_ever_hold(&pg.demand, per_node)) {
        return None;
    }
    Some(shortfall(&matching, &pg.bundle.times(per_node)))
}

/// Is `node` (a new arrival) able to hold `pg`'s bundle? Used to lift an infeasible verdict
/// without re-scanning every node.
pub fn node_makes_feasible(node: &Node, pg: &PlacementGroup) -> bool {
    let per_node = if pg.strategy == Strategy::StrictPack { u64::from(pg.required) } else { 1 };
    selector_matches(node, pg)
        && !(pg.avoid_preemptible && node.preemptible)
        && pg.pack_by.as_ref().is_none_or(|key| node.labels.contains_key(key))
        && node.could_ever_hold(&pg.demand, per_node)
}

/// Names the first resource no single node has enough of, with the largest node's amount.
fn shortfall(matching: &[&Node], need: &Resources) -> String {
    for (name, want) in need.iter().filter(|(_, q)| *q > 0) {
        let largest = matching
            .iter()
            .map(|n| (n.resources.milli(name), &n.name))
            .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(a.1)));
        let (have, node) = largest.expect("matching is not empty");
        if have < want {
            return format!(
                "infeasible: bundle needs {name}={}, largest node has {name}={} ({node})",
                format_milli(want),
                format_milli(have)
            );
        }
    }
    format!("infeasible: no single node has {need} together")
}

fn labels_text(pg: &PlacementGroup) -> String {
    let parts: Vec<String> = pg.selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(",")
}

/// Placement groups whose waiting items lower items must not take capacity from.
#[derive(Default)]
pub struct Holds {
    groups: Vec<PgId>,
}

impl Holds {
    /// Adds a blocked group unless an equivalent one (same demand and filters) is held already.
    pub fn add(&mut self, id: PgId, pgs: &BTreeMap<PgId, PlacementGroup>) {
        let pg = &pgs[&id];
        let same = |h: &PgId| {
            let h = &pgs[h];
            h.demand == pg.demand
                && h.selector == pg.selector
                && h.avoid_preemptible == pg.avoid_preemptible
                && h.pack_by == pg.pack_by
                && h.strategy == pg.strategy
                && h.on_nodes.is_empty()
                && pg.on_nodes.is_empty()
        };
        if !self.groups.iter().any(same) {
            self.groups.push(id);
        }
    }

    /// Is `node` capacity some held group could use now?
    pub fn held(&self, node: &Node, ix: NodeIx, pgs: &BTreeMap<PgId, PlacementGroup>) -> bool {
        self.groups.iter().any(|id| could_use_now(node, ix, &pgs[id]))
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}
