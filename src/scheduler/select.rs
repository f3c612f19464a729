//! Select: choose nodes for `k` bundles of one placement group, per strategy, without changing
//! anything (the "prepare" half of the two-phase reserve). Candidates are tried in rank order
//! (least loaded first, ties by name), so every choice is deterministic.

use super::cluster::{Cluster, NodeIx};
use super::pg::PlacementGroup;
use crate::spec::Strategy;
use std::collections::BTreeMap;

/// Nodes for `k` bundles (one entry per bundle), or `None` if they cannot all be placed.
/// `ok` is the feasibility filter (static filters and holds).
pub fn prepare(cluster: &Cluster, pg: &PlacementGroup, k: u32, ok: &dyn Fn(NodeIx) -> bool) -> Option<Vec<NodeIx>> {
    match &pg.pack_by {
        None => by_strategy(cluster, pg, k, ok),
        Some(key) if pg.on_nodes.is_empty() && pg.strategy == Strategy::StrictPack => {
            // The domain must hold a node that `strict_pack` would choose: one its whole wait
            // fits, where there is one. The fullest domain that merely fits `k` sent a lost
            // group to a node its other ranks never fit, and they ran one after another
            // (swarm seed 1553240).
            let want = whole_wait(pg, k);
            let fits_all = |ix: NodeIx| ok(ix) && cluster.node(ix).room_for(&pg.demand, want) == want;
            fullest_domain(cluster, pg, k, key, &fits_all).or_else(|| fullest_domain(cluster, pg, k, key, ok))
        }
        Some(key) if pg.on_nodes.is_empty() => fullest_domain(cluster, pg, k, key, ok),
        Some(key) => same_domain_first(cluster, pg, k, key, ok),
    }
}

/// How many bundles a group with nothing placed waits for in all: the `k` asked for now, its
/// required gang, and the growth and spares it has asked for.
fn whole_wait(pg: &PlacementGroup, k: u32) -> u32 {
    k.max(pg.required).max(pg.waiting_count())
}

fn by_strategy(cluster: &Cluster, pg: &PlacementGroup, k: u32, accept: &dyn Fn(NodeIx) -> bool) -> Option<Vec<NodeIx>> {
    match pg.strategy {
        Strategy::StrictSpread => distinct(cluster, pg, k, accept),
        Strategy::Spread => spread(cluster, pg, k, accept),
        Strategy::Pack => pack(cluster, pg, k, accept),
        Strategy::StrictPack => strict_pack(cluster, pg, k, accept),
    }
}

/// First `k` accepted nodes with room, none already holding a bundle of the group.
fn distinct(cluster: &Cluster, pg: &PlacementGroup, k: u32, accept: &dyn Fn(NodeIx) -> bool) -> Option<Vec<NodeIx>> {
    let mut chosen = Vec::with_capacity(k as usize);
    for ix in cluster.ranked() {
        if chosen.len() == k as usize {
            break;
        }
        if !pg.hosts(ix) && accept(ix) && cluster.node(ix).room_for(&pg.demand, 1) == 1 {
            chosen.push(ix);
        }
    }
    (chosen.len() == k as usize).then_some(chosen)
}

/// One bundle per node while fresh nodes last, then round-robin over nodes with room.
fn spread(cluster: &Cluster, pg: &PlacementGroup, k: u32, accept: &dyn Fn(NodeIx) -> bool) -> Option<Vec<NodeIx>> {
    if let Some(fresh) = distinct(cluster, pg, k, accept) {
        return Some(fresh);
    }
    let with_room: Vec<NodeIx> =
        cluster.ranked().filter(|ix| accept(*ix) && cluster.node(*ix).room_for(&pg.demand, 1) == 1).collect();
    let (fresh, used): (Vec<NodeIx>, Vec<NodeIx>) = with_room.iter().partition(|ix| !pg.hosts(**ix));
    let order: Vec<NodeIx> = fresh.into_iter().chain(used).collect();
    let mut taken: BTreeMap<NodeIx, u32> = BTreeMap::new();
    let mut chosen = Vec::with_capacity(k as usize);
    while chosen.len() < k as usize {
        let before = chosen.len();
        for &ix in &order {
            if chosen.len() == k as usize {
                break;
            }
            let already = taken.get(&ix).copied().unwrap_or(0);
            if cluster.node(ix).room_for(&pg.demand, already + 1) > already {
                *taken.entry(ix).or_insert(0) += 1;
                chosen.push(ix);
            }
        }
        if chosen.len() == before {
            return None;
        }
    }
    Some(chosen)
}

/// Fill the nodes already holding the group, then the first node with room, and so on.
fn pack(cluster: &Cluster, pg: &PlacementGroup, k: u32, accept: &dyn Fn(NodeIx) -> bool) -> Option<Vec<NodeIx>> {
    let hosting = pg.on_nodes.keys().copied();
    let others = cluster.ranked().filter(|ix| !pg.hosts(*ix));
    let mut chosen = Vec::with_capacity(k as usize);
    for ix in hosting.chain(others) {
        let remaining = k - chosen.len() as u32;
        if remaining == 0 {
            break;
        }
        if accept(ix) {
            let fit = cluster.node(ix).room_for(&pg.demand, remaining);
            chosen.extend(std::iter::repeat_n(ix, fit as usize));
        }
    }
    (chosen.len() == k as usize).then_some(chosen)
}

/// All on one node: the group's node if it has one. A group with nothing placed picks the
/// first node with room for every bundle it waits for, so that its growth and spares can join
/// it later (one lost bundle asked for alone must not settle on a node the rest never fit);
/// failing that, the first with room for the whole required gang.
fn strict_pack(cluster: &Cluster, pg: &PlacementGroup, k: u32, accept: &dyn Fn(NodeIx) -> bool) -> Option<Vec<NodeIx>> {
    let fits = |ix: NodeIx, need: u32| accept(ix) && cluster.node(ix).room_for(&pg.demand, need) == need;
    let node = match pg.on_nodes.keys().next() {
        Some(&home) => Some(home).filter(|ix| fits(*ix, k)),
        None => {
            let first_fit = |need: u32| cluster.ranked().find(|ix| fits(*ix, need));
            first_fit(whole_wait(pg, k)).or_else(|| first_fit(k.max(pg.required)))
        }
    }?;
    Some(vec![node; k as usize])
}

/// `pack_by` for a group with nothing placed: all `k` in one label domain, the fullest domain
/// that fits (fewest free bundle slots), ties by domain name.
fn fullest_domain(
    cluster: &Cluster,
    pg: &PlacementGroup,
    k: u32,
    key: &str,
    ok: &dyn Fn(NodeIx) -> bool,
) -> Option<Vec<NodeIx>> {
    let mut free_slots: BTreeMap<&str, u64> = BTreeMap::new();
    for ix in cluster.ranked().filter(|ix| ok(*ix)) {
        let node = cluster.node(ix);
        if let Some(value) = node.labels.get(key) {
            *free_slots.entry(value.as_str()).or_default() += u64::from(node.room_for(&pg.demand, 1 << 20));
        }
    }
    let mut best: Option<(u64, Vec<NodeIx>)> = None;
    for (domain, slots) in free_slots {
        if slots < u64::from(k) || best.as_ref().is_some_and(|(b, _)| slots >= *b) {
            continue;
        }
        let in_domain = |ix: NodeIx| ok(ix) && cluster.node(ix).labels.get(key).map(String::as_str) == Some(domain);
        if let Some(plan) = by_strategy(cluster, pg, k, &in_domain) {
            best = Some((slots, plan));
        }
    }
    best.map(|(_, plan)| plan)
}

/// `pack_by` for a group already placed somewhere: its own domain when possible, else anywhere.
fn same_domain_first(
    cluster: &Cluster,
    pg: &PlacementGroup,
    k: u32,
    key: &str,
    ok: &dyn Fn(NodeIx) -> bool,
) -> Option<Vec<NodeIx>> {
    let home = pg.on_nodes.keys().find_map(|ix| cluster.node(*ix).labels.get(key).cloned());
    if let Some(home) = &home {
        let in_home = |ix: NodeIx| ok(ix) && cluster.node(ix).labels.get(key) == Some(home);
        if let Some(plan) = by_strategy(cluster, pg, k, &in_home) {
            return Some(plan);
        }
    }
    by_strategy(cluster, pg, k, ok)
}
