//! Feasibility: the filters a node must pass to hold a bundle of a placement group, as one
//! list of named checks. Placement (`usable`), lifting an infeasible verdict when a node joins
//! (`node_passes_filters`, then `infeasible_reason` again) and the infeasibility message
//! (`infeasible_reason`, which names the first filter no node passes) all read the same list.
//! Past the filters, the nodes that pass them must be enough for the whole required gang
//! (`Tally`): a STRICT_SPREAD gang of five can never run on three nodes, however empty.

use super::cluster::{Cluster, Node, NodeIx, NodeState};
use super::pg::PlacementGroup;
use crate::resources::{format_milli, Resources};
use crate::spec::Strategy;
use std::collections::BTreeMap;

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
            Filter::FitsWhenEmpty => {
                let per_node = bundles_per_node(pg);
                let what = match per_node {
                    1 => "bundle".to_string(),
                    n => format!("STRICT_PACK gang of {n} bundles on one node"),
                };
                shortfall(survivors, &pg.bundle.times(per_node), &what)
            }
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

/// Does `node` pass the group's static filters, and is it ALIVE, with an agent that can start
/// work? (An unhealthy node still counts towards what could ever hold a gang: it may recover.)
pub fn usable(node: &Node, pg: &PlacementGroup) -> bool {
    node.problem.is_none() && usable_if_healthy(node, pg)
}

/// `usable`, whether or not the node's agent can start work.
pub fn usable_if_healthy(node: &Node, pg: &PlacementGroup) -> bool {
    node.state == NodeState::Alive && STATIC_FILTERS.iter().all(|f| f.passes(node, pg))
}

/// Could `pg` put one of its bundles on `node` right now? Only where it could once the node
/// is freed, too: a blocked STRICT_PACK group holds no node too small for its gang.
pub fn could_use_now(node: &Node, ix: NodeIx, pg: &PlacementGroup) -> bool {
    could_use_once_freed(node, ix, pg) && node.room_for(&pg.demand, 1) == 1
}

/// Could `pg` put a bundle on `node` once what others hold there is freed? The node is ALIVE
/// and passes the static filters; the strategy allows it (none of the group's own for
/// STRICT_SPREAD, only the group's node for a STRICT_PACK group that holds one); and, unless
/// the group is there already, it is big enough (`Filter::FitsWhenEmpty`: for a STRICT_PACK
/// group, the whole required gang).
pub fn could_use_once_freed(node: &Node, ix: NodeIx, pg: &PlacementGroup) -> bool {
    let allowed = match pg.strategy {
        Strategy::StrictSpread => !pg.hosts(ix),
        Strategy::StrictPack => pg.on_nodes.is_empty() || pg.hosts(ix),
        Strategy::Spread | Strategy::Pack => true,
    };
    allowed && usable(node, pg) && (pg.hosts(ix) || Filter::FitsWhenEmpty.passes(node, pg))
}

/// Could `node` (a new arrival) ever hold `pg`'s bundle? Only such a node can lift an
/// infeasible verdict, so the others spare the re-check of every node.
pub fn node_passes_filters(node: &Node, pg: &PlacementGroup) -> bool {
    FILTERS.iter().all(|f| f.passes(node, pg))
}

/// Why the nodes ever seen, alive or not, could never hold `pg`'s required gang — or `None` if
/// they could. The reason names the first filter that leaves no node, else that too few pass.
pub fn infeasible_reason(cluster: &Cluster, pg: &PlacementGroup) -> Option<Infeasible> {
    // The common case first, without building the per-filter lists the reason needs (a
    // submission to 10,000 nodes paid ~1 ms for them): the count stops once the gang fits.
    let mut tally = Tally::default();
    for (_, node) in cluster.all() {
        if node_passes_filters(node, pg) && tally.add(node, pg) {
            return None;
        }
    }
    let reason = first_rejection(cluster, pg).unwrap_or_else(|| tally.too_few(pg));
    Some(Infeasible { reason, tally })
}

/// The first filter that leaves no node of the cluster, as its message.
fn first_rejection(cluster: &Cluster, pg: &PlacementGroup) -> Option<String> {
    if cluster.is_empty() {
        return Some("infeasible: no node has joined the cluster yet".to_string());
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

/// A group the nodes ever seen could never hold: why, and the count behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Infeasible {
    pub reason: String,
    pub tally: Tally,
}

impl Infeasible {
    /// `node`, new to the cluster, joined and passes every filter: counted on top of the
    /// others, without counting them again (a gang wider than the cluster, re-counted from
    /// scratch, made 10,000 joins take 150 times as long). `None`: the gang fits now.
    pub fn after_new_node(mut self, node: &Node, pg: &PlacementGroup) -> Option<Infeasible> {
        if self.tally.add(node, pg) {
            return None;
        }
        Some(Infeasible { reason: self.tally.too_few(pg), tally: self.tally })
    }
}

/// How many of a group's bundles the nodes that pass every filter could hold, empty, by
/// `pack_by` domain ("" without one), and how many nodes those are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    room_by_domain: BTreeMap<String, u64>,
    nodes: usize,
}

impl Tally {
    /// Counts `node` (which passes every filter); true once the gang fits in its domain.
    fn add(&mut self, node: &Node, pg: &PlacementGroup) -> bool {
        let domain = pg.pack_by.as_ref().and_then(|key| node.labels.get(key)).map_or("", String::as_str);
        if !self.room_by_domain.contains_key(domain) {
            self.room_by_domain.insert(domain.to_string(), 0);
        }
        let room = self.room_by_domain.get_mut(domain).expect("inserted above");
        *room = room.saturating_add(bundles_when_empty(node, pg));
        self.nodes += 1;
        *room >= bundles_to_fit(pg)
    }

    /// The gang is larger than the nodes that could hold its bundles, even empty.
    fn too_few(&self, pg: &PlacementGroup) -> String {
        let need = pg.required;
        let nodes = self.nodes;
        let fix = "add nodes, or lower min_nodes";
        let best = self.room_by_domain.iter().max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)));
        let (domain, room) = best.map_or(("", 0), |(domain, room)| (domain.as_str(), *room));
        match &pg.pack_by {
            Some(key) => format!(
                "infeasible: min_nodes {need} must fit in one `{key}` domain, and the largest, {key}={domain}, \
                 holds {room} bundle(s) even empty; {fix}"
            ),
            None if pg.strategy == Strategy::StrictSpread => format!(
                "infeasible: min_nodes {need} with STRICT_SPREAD needs {need} distinct nodes, and only {nodes} \
                 node(s), DEAD ones included, could hold a bundle; {fix}"
            ),
            None => format!(
                "infeasible: min_nodes {need} bundles of {} do not fit on the {nodes} node(s) that could hold one, DEAD ones included: \
                 {room} at most, even empty; {fix}",
                pg.bundle
            ),
        }
    }
}

/// Before its gang is placed, a group needs room for all of it. Once placed, it only ever
/// asks for single bundles again (a lost node's), and the nodes that held the gang are still
/// counted (dead ones too), so one bundle's room is the test: counting the whole gang against
/// nodes it may use from now on (off preemptible ones) would park a replacement that fits.
fn bundles_to_fit(pg: &PlacementGroup) -> u64 {
    if pg.admitted {
        1
    } else {
        u64::from(pg.required)
    }
}

/// How many of `pg`'s bundles `node` could hold if it were empty.
fn bundles_when_empty(node: &Node, pg: &PlacementGroup) -> u64 {
    match pg.strategy {
        Strategy::StrictSpread => 1,
        // `FitsWhenEmpty` has checked that the node holds the whole gang.
        Strategy::StrictPack => u64::from(pg.required),
        Strategy::Spread | Strategy::Pack => node.times_when_empty(&pg.demand),
    }
}

/// Names every resource no single node has enough of for `what` (a bundle, or a whole
/// STRICT_PACK gang), each with the largest node's amount: naming only the first made a user
/// asking for too many CPUs and GPUs fix one, submit again, and only then hear of the other.
fn shortfall(matching: &[&Node], need: &Resources, what: &str) -> String {
    let short: Vec<String> = need
        .iter()
        .filter(|(_, q)| *q > 0)
        .filter_map(|(name, want)| {
            let largest = matching
                .iter()
                .map(|n| (n.resources.milli(name), &n.name))
                .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(a.1)));
            let (have, node) = largest.expect("matching is not empty");
            (have < want).then(|| {
                format!(
                    "{name}={}, largest node has {name}={} ({node}){}",
                    format_milli(want),
                    format_milli(have),
                    misspelt_hint(matching, name)
                )
            })
        })
        .collect();
    if short.is_empty() {
        return format!("infeasible: no single node has {need} together");
    }
    format!("infeasible: {what} needs {}", short.join("; and "))
}

/// A resource no node has by that name at all is likely misspelt (`cpus` for `cpu`): the
/// nearest name some node offers, as the spec's unknown fields are told. Only names with the
/// same first letter: resource names are short, and `tpu` is one edit from `cpu` but no typo.
fn misspelt_hint(matching: &[&Node], name: &str) -> String {
    let offered: std::collections::BTreeSet<&str> =
        matching.iter().flat_map(|n| n.resources.iter().map(|(offered, _)| offered)).collect();
    if offered.contains(name) {
        return String::new();
    }
    let first = |s: &str| s.chars().next().map(|c| c.to_ascii_lowercase());
    let alike = offered.into_iter().filter(|offered| first(offered) == first(name));
    match crate::spec::nearest(name, alike) {
        Some(known) => format!("; no node offers `{name}` at all: did you mean `{known}`?"),
        None => String::new(),
    }
}

fn labels_text(pg: &PlacementGroup) -> String {
    let parts: Vec<String> = pg.selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    parts.join(",")
}
