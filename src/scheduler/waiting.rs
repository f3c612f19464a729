//! Why a request the cluster could hold still waits: the room the matching nodes have for it
//! now and which jobs hold the rest, or the work ahead of it that room is held for (what
//! Slurm's `Reason` and a Kubernetes pod's `FailedScheduling` event tell their users).
//!
//! Read when a view is built, never by a pass: a pass only asks whether an item fits, so a
//! blocked item costs it nothing more. The request a user waits on is the required gang before
//! admission, and afterwards a lost bundle's replacement; spares and growth waiting for room are
//! the normal state of an elastic job and get no reason.

use super::cluster::{Node, NodeIx, NodeState, NO_PORT_LEFT_FIX};
use super::feasibility::{could_use_now, node_passes_filters};
use super::pg::{BundleState, PlacementGroup};
use super::queue::{QueueClass, QueueKey, GANG};
use super::{policy, PgId, Scheduler, Shape};
use crate::spec::Strategy;
use std::collections::{BTreeMap, BTreeSet};

/// Names shown before "and N more": a reason stays one line.
const NAMES_SHOWN: usize = 3;

/// Queue items ahead of a held request looked at for the work it is held for: after a rack's
/// loss thousands of restorations may be ahead, and a reason is read with every view.
const MAX_AHEAD_EXAMINED: usize = 1_000;

/// Nodes looked at, in all, to tell whether the items ahead could use the room a held request
/// waits on; past it, an item ahead is named unchecked. Work ahead that could not use a roomy
/// fleet's first nodes is rare, and a thousand such reasons on 10,000 nodes must stay cheap.
const MAX_HOLD_CHECKS: usize = 10_000;

/// The first few distinct groups met (nodes in join order, then bundles), and whether there
/// were more. Not every holder: a full fleet holds tens of thousands of bundles, and collecting
/// them all made one reason cost milliseconds.
#[derive(Clone, Default)]
struct FirstFew {
    first: Vec<PgId>,
    more: bool,
}

impl FirstFew {
    fn note(&mut self, id: PgId) {
        if self.first.contains(&id) {
            return;
        }
        if self.first.len() < NAMES_SHOWN {
            self.first.push(id);
        } else {
            self.more = true;
        }
    }

    /// Nothing more can change what is shown.
    fn is_settled(&self) -> bool {
        self.more
    }
}

/// The item of a group a user waits on, and how many bundles it asks for at once.
struct Request {
    key: QueueKey,
    count: u32,
    /// The lost bundles it restores, in index order (none for a gang).
    restores: Vec<u32>,
}

/// What the nodes that pass a group's filters have for it now.
#[derive(Default)]
struct Room {
    /// ALIVE nodes that pass every filter.
    matching: usize,
    /// Nodes that pass every filter but are DEAD, or DRAINING.
    dead: usize,
    draining: usize,
    /// Matching nodes left out because the head suspects them (DESIGN §3).
    suspects: Vec<NodeIx>,
    /// Matching nodes left out because their agents cannot start work (AG-6).
    unhealthy: usize,
    /// Matching nodes with no rendezvous port left to give a bundle (PS-2).
    portless: usize,
    /// Bundles placeable now, in the roomiest `pack_by` domain ("" without one).
    best: u64,
    best_domain: String,
    /// Other groups holding capacity on the matching nodes: the first few met.
    holders: FirstFew,
    /// Matching nodes a STRICT_SPREAD group is on already, which it cannot use again.
    own: usize,
    /// The matching nodes, not suspect, with room for one of its bundles now: what a hold
    /// could keep from it.
    with_room: Vec<NodeIx>,
}

/// Rooms counted for gangs not yet placed, by shape, while one listing is built: a thousand
/// look-alike pending jobs on a full 10,000-node fleet share one count (each took ~3 ms).
/// Valid only while the scheduler does not change.
#[derive(Default)]
pub struct WaitingMemo {
    rooms: BTreeMap<Shape, Room>,
}

impl Scheduler {
    /// Why `id`'s gang, or a replacement for a bundle it lost, waits though the nodes ever seen
    /// could hold it; `None` when nothing of it waits that way (infeasible groups have their
    /// own reason). `job` names a group in the text; `memo` carries counts between the groups
    /// of one listing (`&mut WaitingMemo::default()` for one group).
    pub fn waiting_reason(&self, id: PgId, job: &dyn Fn(PgId) -> String, memo: &mut WaitingMemo) -> Option<String> {
        let (pg, request) = self.request_of(id)?;
        // A gang not yet placed holds nothing, so its count depends on its shape alone.
        let own_room;
        let room: &Room = if request.key.is_gang() {
            let shape = Shape::of(pg, request.count);
            memo.rooms.entry(shape).or_insert_with(|| self.room_now(id, pg, request.count))
        } else {
            own_room = self.room_now(id, pg, request.count);
            &own_room
        };
        Some(if room.matching == 0 {
            no_node_up(room)
        } else if room.best < u64::from(request.count) {
            short_of_room(pg, &request, room, job)
        } else {
            self.held_for_others(pg, &request, room, job)
        })
    }

    /// Would `waiting_reason` give `id` a reason? Without counting anything.
    pub fn waits(&self, id: PgId) -> bool {
        self.request_of(id).is_some()
    }

    /// The group and the request of it a user waits on, unless infeasible (it has its own reason).
    fn request_of(&self, id: PgId) -> Option<(&PlacementGroup, Request)> {
        let pg = self.pgs.get(&id).filter(|pg| pg.infeasible.is_none())?;
        Some((pg, waited_on(id, pg)?))
    }

    fn room_now(&self, id: PgId, pg: &PlacementGroup, count: u32) -> Room {
        let mut room = Room::default();
        let mut by_domain: BTreeMap<&str, u64> = BTreeMap::new();
        for (ix, node) in self.cluster.all() {
            if !node_passes_filters(node, pg) {
                continue;
            }
            match node.state {
                NodeState::Alive => {}
                NodeState::Dead => {
                    room.dead += 1;
                    continue;
                }
                NodeState::Draining => {
                    room.draining += 1;
                    continue;
                }
            }
            room.matching += 1;
            if !room.holders.is_settled() {
                for &(holder, _) in &node.bundles {
                    if holder != id {
                        room.holders.note(holder);
                    }
                }
            }
            if pg.strategy == Strategy::StrictSpread && pg.hosts(ix) {
                room.own += 1;
            }
            if self.suspects.contains(&ix) {
                room.suspects.push(ix);
                continue;
            }
            if node.problem.is_some() {
                room.unhealthy += 1;
                continue;
            }
            if node.port_room() == 0 {
                room.portless += 1;
            }
            let domain = domain_of(node, pg);
            let here = bundles_now(node, ix, pg, count);
            if here > 0 {
                room.with_room.push(ix);
            }
            let total = by_domain.entry(domain).or_insert(0);
            *total = if pg.strategy == Strategy::StrictPack { (*total).max(here) } else { *total + here };
        }
        if let Some((domain, best)) = by_domain.iter().max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0))) {
            room.best = *best;
            room.best_domain = domain.to_string();
        }
        room
    }

    /// There is room, so a hold kept it: a protected item ahead (a replacement, or an item
    /// waiting past `starvation_ms`) that could use the room on a node and whose hold binds
    /// this request (`policy::hold_lifted`), or a suspect node's bundles.
    fn held_for_others(
        &self,
        pg: &PlacementGroup,
        request: &Request,
        room: &Room,
        job: &dyn Fn(PgId) -> String,
    ) -> String {
        let mut checks_left = MAX_HOLD_CHECKS;
        let mut could_hold = |held: &PlacementGroup| {
            if policy::hold_lifted(pg, request.key.class, held, &self.cluster) {
                return false;
            }
            for &ix in &room.with_room {
                if checks_left == 0 {
                    return true; // past the limit: name it rather than look further
                }
                checks_left -= 1;
                let per_node = policy::most_per_node(pg, request.count);
                if policy::takes_held_room(self.cluster.node(ix), ix, held, &pg.demand, per_node) {
                    return true;
                }
            }
            false
        };
        let (mut ahead, mut looked_at): (Vec<PgId>, BTreeSet<PgId>) = Default::default();
        for key in self.queue.active().take_while(|k| **k < request.key).take(MAX_AHEAD_EXAMINED) {
            // Only what held capacity in the last pass: an item ahead that has not waited
            // `starvation_ms` holds nothing, and naming it sent operators to the wrong job.
            let blocks = matches!(key.class, QueueClass::Replacement | QueueClass::PendingGang)
                && self.holding.contains(&key.pg);
            // A group with several items ahead (a job's restorations) is looked at once.
            if blocks && key.pg != request.key.pg && looked_at.insert(key.pg) && could_hold(&self.pgs[&key.pg]) {
                ahead.push(key.pg);
            }
        }
        let mut held_for = Vec::new();
        if !ahead.is_empty() {
            held_for.push(format!("work ahead of it in the queue ({})", names(&ahead, |p| job(*p))));
        }
        // Any suspect node's bundles have room set aside, on whichever nodes they could use:
        // the suspect need not be one this group could use itself.
        let suspects: Vec<NodeIx> =
            self.suspects.iter().copied().filter(|ix| !self.cluster.node(*ix).bundles.is_empty()).collect();
        if !suspects.is_empty() {
            let node = |ix: &NodeIx| self.cluster.node(*ix).name.to_string();
            held_for.push(format!("the bundles of node(s) that missed heartbeats ({})", names(&suspects, node)));
        }
        if held_for.is_empty() {
            // The count and the strategy's choice of nodes disagree: say what is known, promise nothing.
            return "waiting: the matching nodes have room for it now, but the last scheduling pass could not place \
                    it as its strategy asks"
                .to_string();
        }
        format!("waiting: the matching nodes have room for it now, held for {}", held_for.join(" and for "))
    }
}

/// The gang while it waits for admission, else the lost bundles waiting to be restored, which
/// are placed together where the first of them waits (`policy::placed_together`).
fn waited_on(id: PgId, pg: &PlacementGroup) -> Option<Request> {
    if !pg.admitted {
        let gang_queued = pg.bundles.first() == Some(&BundleState::InGang);
        let key = QueueKey::new(QueueClass::PendingGang, pg.priority, pg.submit, id, GANG);
        return gang_queued.then_some(Request { key, count: pg.required, restores: Vec::new() });
    }
    let keys = pg.queued_in(id, QueueClass::Replacement);
    let mut restores: Vec<u32> = keys.iter().map(|k| k.bundle).collect();
    restores.sort_unstable();
    Some(Request { key: *keys.first()?, count: keys.len() as u32, restores })
}

/// A gang not yet placed must fit in one `pack_by` domain; a replacement may go anywhere.
fn domain_of<'a>(node: &'a Node, pg: &PlacementGroup) -> &'a str {
    match &pg.pack_by {
        Some(key) if !pg.admitted => node.labels.get(key).map_or("", String::as_str),
        _ => "",
    }
}

/// How many of the `count` bundles `node` could take now, as its group's strategy places them.
fn bundles_now(node: &Node, ix: NodeIx, pg: &PlacementGroup, count: u32) -> u64 {
    let room = match pg.strategy {
        Strategy::StrictSpread => u32::from(could_use_now(node, ix, pg)),
        // A placed STRICT_PACK group only ever returns to its own node.
        Strategy::StrictPack if pg.on_nodes.keys().any(|home| *home != ix) => 0,
        Strategy::StrictPack | Strategy::Spread | Strategy::Pack => node.room_for(&pg.demand, count),
    };
    u64::from(room)
}

fn no_node_up(room: &Room) -> String {
    let undrain = if room.draining > 0 { " (`ftdrive undrain NODE` withdraws an operator's drain)" } else { "" };
    format!(
        "waiting for a node: none of the {} node(s) that could hold it is ALIVE ({}); it is placed once one \
         is{undrain}, or a new node joins",
        room.dead + room.draining,
        down_text(room)
    )
}

/// "2 DEAD", "1 DEAD, 1 DRAINING".
fn down_text(room: &Room) -> String {
    let kinds = [(room.dead, "DEAD"), (room.draining, "DRAINING")];
    let parts: Vec<String> = kinds.iter().filter(|(n, _)| *n > 0).map(|(n, state)| format!("{n} {state}")).collect();
    parts.join(", ")
}

/// The matching nodes are short of room: how short, and who holds it.
fn short_of_room(pg: &PlacementGroup, request: &Request, room: &Room, job: &dyn Fn(PgId) -> String) -> String {
    let (bundle, matching) = (&pg.bundle, room.matching);
    let need = match request.restores.as_slice() {
        [] => format!("needs {}", room_wanted(pg, request.count, room, pg.pack_by.as_deref())),
        [one] => format!(
            "the replacement for {}/{one} needs a node with room for a bundle of {bundle}, and none of the \
             {matching} matching node(s) has it now",
            job(request.key.pg)
        ),
        several => format!(
            "the replacements for {} need {}",
            listed(several, |b| format!("{}/{b}", job(request.key.pg))),
            room_wanted(pg, request.count, room, None)
        ),
    };
    let mut notes = Vec::new();
    if room.own > 0 {
        notes.push(format!("{} already hold one of its bundles, and STRICT_SPREAD puts one per node", room.own));
    }
    if !room.suspects.is_empty() {
        notes.push(format!("{} missed heartbeats and are not counted", room.suspects.len()));
    }
    if room.unhealthy > 0 {
        let n = room.unhealthy;
        notes.push(format!("{n} cannot start work and are not counted, as `ftdrive nodes` explains"));
    }
    if room.portless > 0 {
        notes.push(format!("{} have no rendezvous port left, as {NO_PORT_LEFT_FIX}", room.portless));
    }
    if room.dead + room.draining > 0 {
        notes.push(format!("besides them {}", down_text(room)));
    }
    let mut out = format!("waiting for capacity: {need}");
    if !notes.is_empty() {
        out.push_str(&format!(" ({})", notes.join("; ")));
    }
    if !room.holders.first.is_empty() {
        let others = if room.holders.more { " and others" } else { "" };
        let shown: Vec<String> = room.holders.first.iter().map(|p| job(*p)).collect();
        out.push_str(&format!("; in use by {}{others}", shown.join(", ")));
    }
    out
}

/// What `n` bundles need as the group's strategy places them (in one `pack_by` domain where
/// `domain` names the key), against the room the matching nodes have now.
fn room_wanted(pg: &PlacementGroup, n: u32, room: &Room, domain: Option<&str>) -> String {
    let (best, matching, bundle) = (room.best, room.matching, &pg.bundle);
    match (domain, pg.strategy) {
        (Some(key), _) => format!(
            "room for {} of {bundle} in one `{key}` domain, and the roomiest, {key}={}, has room for {best} now",
            counted(n, "bundle"),
            room.best_domain
        ),
        (None, Strategy::StrictSpread) => format!(
            "{} with room for a bundle of {bundle} (STRICT_SPREAD), and {best} of the {matching} matching node(s) \
             have it now",
            counted(n, "node")
        ),
        (None, Strategy::StrictPack) => format!(
            "one node with room for all {n} bundles of {bundle} (STRICT_PACK), and the roomiest of the {matching} \
             matching node(s) has room for {best} now"
        ),
        (None, Strategy::Spread | Strategy::Pack) => format!(
            "room for {} of {bundle}, and the {matching} matching node(s) have room for {best} now",
            counted(n, "bundle")
        ),
    }
}

/// "a and b", "a, b and c"; beyond `NAMES_SHOWN`, "a, b, c and 4 more".
fn listed<T>(all: &[T], name: impl Fn(&T) -> String) -> String {
    if all.len() > NAMES_SHOWN {
        return names(all, name);
    }
    let named: Vec<String> = all.iter().map(name).collect();
    match named.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => named.join(""),
    }
}

/// "1 node", "3 nodes".
fn counted(n: u32, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// "a, b, c and 4 more": only the names shown are made.
fn names<T>(all: &[T], name: impl Fn(&T) -> String) -> String {
    let shown: Vec<String> = all.iter().take(NAMES_SHOWN).map(name).collect();
    match all.len().saturating_sub(NAMES_SHOWN) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::listed;

    #[test]
    fn a_list_names_up_to_three_and_counts_the_rest() {
        let name = |n: &u32| format!("j1/{n}");
        assert_eq!(listed(&[0], name), "j1/0");
        assert_eq!(listed(&[0, 1], name), "j1/0 and j1/1");
        assert_eq!(listed(&[0, 1, 2], name), "j1/0, j1/1 and j1/2");
        assert_eq!(listed(&[0, 1, 2, 3, 4], name), "j1/0, j1/1, j1/2 and 2 more");
    }
}
