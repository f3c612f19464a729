//! Feasibility: the filters a node must pass to hold a bundle of a placement group, as one
//! list of named checks. Placement (`usable`), lifting an infeasible verdict when a node joins
//! (`node_makes_feasible`) and the infeasibility message (`infeasible_reason`, which names the
//! first filter no node passes) all read the same list.

use super::cluster::{Cluster, Node, NodeIx, NodeState};
use super::pg::PlacementGroup;
use crate::resources::{format_milli, Resources};
use crate::spec::Strategy;

/// One named check of a node against a placement group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    /// Every `node_selector` label matches.
    NodeSelector,
    /// The node has the `pack_by` label.
    PackByLabel,
    /// Not a preemptible node, once `last_attempt_non_preemptible` keeps the job off them.
    NotPreemptible,
    /// Empty, it could hold a bundle (STRICT_PACK: the whole required gang).
    FitsWhenEmpty,
}

/// Filters that do not depend on capacity, checked for every candidate at placement time.
pub const STATIC_FILTERS: [Filter; 3] = [Filter::NodeSelector, Filter::PackByLabel, Filter::NotPreemptible];
/// Every filter, in the order an infeasibility is reported.
pub const FILTERS: [Filter; 4] =
    [Filter::NodeSelector, Filter::PackByLabel, Filter::NotPreemptible, Filter::FitsWhenEmpty];

impl Filter {
    pub fn name(self) -> &'static str {
        match self {
            Filter::NodeSelector => "node_selector",
            Filter::PackByLabel => "pack_by",
            Filter::NotPreemptible => "not_preemptible",
            Filter::FitsWhenEmpty => "fits_when_empty",
        }
    }

    pub fn passes(self, node: &Node, pg: &PlacementGroup) -> bool {
        match self {
            Filter::NodeSelector => pg.selector.iter().all(|(k, v)| node.labels.get(k) == Some(v)),
            Filter::PackByLabel => pg.pack_by.as_ref().is_none_or(|key| node.labels.contains_key(key)),
            Filter::NotPreemptible => !(pg.avoid_preemptible && node.preemptible),
            Filter::FitsWhenEmpty => node.could_ever_hold(&pg.demand, bundles_per_node(pg)),
        }
    }

    /// Why no node is left once this filter has removed every candidate (`survivors` are the
    /// nodes that passed the filters before it).
    fn rejection(self, pg: &PlacementGroup, survivors: &[&Node]) -> String {
        match self {
            Filter::NodeSelector => format!("infeasible: no node matches node_selector {}", labels_text(pg)),
            Filter::PackByLabel => {
                let key = pg.pack_by.as_deref().unwrap_or_default();
                format!("infeasible: no matching node has the label `{key}` that pack_by needs")
            }
            Filter::NotPreemptible => {
                "infeasible: last_attempt_non_preemptible keeps the job off preemptible nodes, and no other node matches"
                    .to_string()
            }
            Filter::FitsWhenEmpty => shortfall(survivors, &pg.bundle.times(bundles_per_node(pg))),
        }
    }
}

/// How many bundles one node must hold: the whole required gang for STRICT_PACK, else one.
fn bundles_per_node(pg: &PlacementGroup) -> u64 {
    if pg.strategy == Strategy::StrictPack {
        u64::from(pg.required)
    } else {
        1
    }
}

/// Does `node` pass the group's static filters, and is it ALIVE?
pub fn usable(node: &Node, pg: &PlacementGroup) -> bool {
    node.state == NodeState::Alive && STATIC_FILTERS.iter().all(|f| f.passes(node, pg))
}

/// Could `pg` put one of its bundles on `node` right now?
pub fn could_use_now(node: &Node, ix: NodeIx, pg: &PlacementGroup) -> bool {
    let spread_conflict = pg.strategy == Strategy::StrictSpread && pg.hosts(ix);
    usable(node, pg) && !spread_conflict && node.room_for(&pg.demand, 1) == 1
}

/// Could `node` (a new arrival) ever hold `pg`'s bundle? Lifts an infeasible verdict without
/// re-scanning every node.
pub fn node_makes_feasible(node: &Node, pg: &PlacementGroup) -> bool {
    FILTERS.iter().all(|f| f.passes(node, pg))
}

/// Why no node, alive or ever seen, could hold one bundle of `pg` — or `None` if some could.
/// The reason names the first filter that leaves no node.
pub fn infeasible_reason(cluster: &Cluster, pg: &PlacementGroup) -> Option<String> {
    if cluster.is_empty() {
        return Some("infeasible: no node has joined the cluster yet".to_string());
    }
    // The common case first: some node passes every filter, found without building the
    // per-filter lists the reason needs (a submission to 10,000 nodes paid ~1 ms for them).
    if cluster.all().any(|(_, n)| FILTERS.iter().all(|f| f.passes(n, pg))) {
        return None;
    }
    let mut survivors: Vec<&Node> = cluster.all().map(|(_, n)| n).collect();
    for filter in FILTERS {
        let passed: Vec<&Node> = survivors.iter().copied().filter(|n| filter.passes(n, pg)).collect();
        if passed.is_empty() {
            return Some(filter.rejection(pg, &survivors));
        }
        survivors = passed;
    }
    None
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
