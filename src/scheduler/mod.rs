//! Placement-group scheduler (DESIGN §3): the cluster view, the four-class queue, and the
//! pipeline that turns waiting requests into reservations.
//!
//! ```text
//!  request / request_gang ──► queue (class 1 replacements > 2 pending gangs > 3 spares > 4 elastic)
//!                                │  one pass, in queue order, whenever something changed
//!                                ▼
//!            ┌──────────── feasibility ───────────┐   alive, node_selector, preemptible
//!            │  static filters + holds            │   avoidance, pack_by label; not capacity
//!            └────────────────┬───────────────────┘   a held (blocked, protected) item could use
//!                             ▼
//!                          rank        ALIVE nodes least loaded first, ties by name
//!                             ▼
//!                          select      per strategy (STRICT_SPREAD, SPREAD, PACK, STRICT_PACK)
//!                             ▼        and pack_by domain; nothing changes yet ("prepare")
//!                          commit      every bundle of the item reserved at once, or none
//!                             ▼
//!                     SchedEvent::Placed ──► the head hands it to the job's driver
//! ```
//!
//! Backfill with aging: an item that cannot be placed does not stop lower items, unless it is
//! *protected* — a replacement (always), or anything that has waited `starvation_ms`. A
//! protected item holds the room it could use now on every node; lower items may take the rest
//! of a node, not that, except a restoration of a job whose reservation it waits for (HO-1, in
//! `policy`).
//! An item that fails keeps its key, hence its place. Infeasible groups (no node ever seen
//! could hold a bundle) are reported at once and re-checked when a node joins. Why a feasible
//! item still waits is worked out when a view asks (`waiting.rs`), never by a pass.

mod cluster;
mod feasibility;
mod pg;
pub mod policy;
mod queue;
mod select;
#[cfg(test)]
mod tests;
mod waiting;

pub use cluster::{Node, NodeIx, NodeOffer, NodeState, ResourceTable, NO_PORT_LEFT_FIX};
pub use feasibility::{Filter, Infeasible, FILTERS};
pub use pg::{BundleState, PgSpec, PgState, PlacementGroup};
pub use policy::Need;
use queue::WaitQueue;
pub use queue::{QueueClass, QueueKey, GANG};
pub use waiting::WaitingMemo;

use crate::ids::NodeId;
use crate::resources::{Devices, Labels, Resources};
use crate::spec::Strategy;
use crate::time::Instant;
use cluster::{Cluster, Demand};
use policy::Holds;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A placement group's id: the head uses the job's sequence number.
pub type PgId = u64;

/// One bundle reserved on one node, with the port it may use as `MASTER_PORT` and the GPU
/// devices it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub pg: PgId,
    pub bundle: u32,
    pub node: NodeIx,
    pub port: u16,
    pub devices: Devices,
    /// The queue class it was placed from.
    pub class: QueueClass,
}

/// What the scheduler reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchedEvent {
    Placed(Placement),
    /// A group became infeasible (`Some(reason)`) or feasible again (`None`).
    Feasibility {
        pg: PgId,
        infeasible: Option<String>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    pub starvation_ms: u64,
    pub master_port_base: u16,
    pub ports_per_node: u16,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig { starvation_ms: 60_000, master_port_base: 29_500, ports_per_node: 1_000 }
    }
}

/// Deliberately wrong policies, so that tests can show the simulator's checkers catch them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PolicyFault {
    #[default]
    None,
    /// Pending gangs are offered capacity before replacements.
    GangsBeforeReplacements,
    /// A restarted head forgets which attempts run where (re-adoption broken).
    ForgetAttemptsOnRestart,
    /// Placements report a node's lowest GPU devices, whoever holds them.
    DevicesIgnoreHolders,
    /// Suspect nodes hold no capacity for their bundles.
    IgnoreSuspects,
    /// Every rank a node's loss or drain ends is charged (FC-1 broken; applied by drivers).
    ChargeEveryRank,
    /// Retention forgets DEAD nodes the operator drained too (FG-3 broken; applied by the head).
    ForgetCordoned,
    /// Placement ignores the static filters (`node_selector`, the `pack_by` label, preemptible
    /// avoidance): any ALIVE node with room will do.
    IgnoreStaticFilters,
    /// Bundles already on preemptible nodes are kept and used once `last_attempt_non_preemptible`
    /// keeps the job off those nodes: ranks restart there, spares standing by there take ranks
    /// (applied by drivers).
    KeepPreemptibleBundles,
    /// Only replacements hold capacity when blocked: an item that waited `starvation_ms` lets
    /// lower items take what it could use (backfill without aging).
    NoAgingHolds,
    /// A `pack_by` gang's new cycle keeps survivors first and newcomers after, whatever their
    /// domains (applied by drivers).
    RanksIgnoreDomains,
    /// Every node draws ports from a pool of its own, whatever machine it shares (PS-1 broken).
    PortsPerNode,
    /// A bundle keeps its port when something else comes to listen on it (PS-4 broken).
    BundlesKeepBusyPorts,
    /// New work goes to nodes whose agents cannot start it (AG-6's point lost).
    PlaceOnUnhealthy,
    /// A head that is up leaves fenced agents' pings unanswered (applied by the simulator's
    /// runtime): they stop their work at their fence (AG-7's "heard" lost).
    PingsUnheard,
    /// Nodes are declared DEAD when every node went silent at once too (FD-1 broken; applied by
    /// the head).
    NoDisruptionHold,
}

/// Identical gangs fail identically within one pass; remembering the failure keeps a pass over
/// many blocked look-alike gangs linear.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Shape {
    demand: Demand,
    selector: Labels,
    strategy: Strategy,
    pack_by: Option<String>,
    avoid_preemptible: bool,
    count: u32,
}

#[derive(Clone, Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    /// Alive nodes the head suspects (DESIGN §3): capacity their bundles could be re-placed on
    /// is held from pending gangs, spares and growth.
    suspects: BTreeSet<NodeIx>,
    cluster: Cluster,
    pgs: BTreeMap<PgId, PlacementGroup>,
    queue: WaitQueue,
    /// Groups the nodes ever seen could never hold, with the count behind each verdict.
    infeasible: BTreeMap<PgId, Infeasible>,
    events: VecDeque<SchedEvent>,
    /// Something changed since the last pass that could let an item be placed.
    dirty: bool,
    fault: PolicyFault,
    /// Passes run so far: shows that nothing spins while nothing changes.
    passes: u64,
    /// The groups whose blocked items held capacity in the last pass (protected: a replacement,
    /// or an item past `starvation_ms`): the only work ahead a waiting reason may name.
    holding: BTreeSet<PgId>,
}

/// What one pass has learnt so far.
#[derive(Default)]
struct PassState {
    holds: Holds,
    /// Gang shapes that did not fit: a look-alike gang behind them does not either.
    failed_shapes: BTreeSet<Shape>,
    /// Groups whose items of a class placed together were tried, at the first of them.
    tried_together: BTreeSet<(QueueClass, PgId)>,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig) -> Self {
        Scheduler {
            cluster: Cluster::new(config.master_port_base, config.ports_per_node),
            config,
            pgs: BTreeMap::new(),
            queue: WaitQueue::default(),
            infeasible: BTreeMap::new(),
            suspects: BTreeSet::new(),
            events: VecDeque::new(),
            dirty: false,
            fault: PolicyFault::None,
            passes: 0,
            holding: BTreeSet::new(),
        }
    }

    /// Test-only switch: run a deliberately wrong policy.
    pub fn inject_policy_fault(&mut self, fault: PolicyFault) {
        self.fault = fault;
    }

    pub fn policy_fault(&self) -> PolicyFault {
        self.fault
    }

    // ---- cluster -------------------------------------------------------------------------

    /// A node joins (or a DEAD one rejoins) with what it offers (its GPUs when its agent names
    /// them, its port space: cluster.rs, PS-1). Infeasible groups it could serve are
    /// checked again: feasible now, or a new reason (a gang still short of nodes, by fewer).
    pub fn add_node(&mut self, name: NodeId, mut offer: NodeOffer) -> NodeIx {
        let rejoined = self.cluster.ix(&name).is_some();
        // "No node has joined yet" is stale after any join, even of a node the group cannot use.
        let first = self.cluster.is_empty();
        if self.fault == PolicyFault::PortsPerNode {
            offer.port_space.clear();
        }
        let ix = self.cluster.join(name, offer);
        let node = self.cluster.node(ix);
        let touched: Vec<PgId> = self
            .infeasible
            .keys()
            .copied()
            .filter(|id| first || feasibility::node_passes_filters(node, &self.pgs[id]))
            .collect();
        for id in touched {
            let before = self.infeasible.remove(&id).expect("touched groups are infeasible");
            let pg = &self.pgs[&id];
            // A node seen before was counted with what it had then: count everything again
            // (as for the first node, where there is only that one to count).
            let after = if rejoined || first {
                feasibility::infeasible_reason(&self.cluster, pg)
            } else {
                before.after_new_node(self.cluster.node(ix), pg)
            };
            self.note_feasibility(id, after);
        }
        self.dirty = true;
        ix
    }

    /// Records a group's verdict (its items parked while infeasible). An event tells when it
    /// becomes infeasible or feasible; a reason that only changed its count (a node joined, the
    /// gang still does not fit) is shown by the group's view alone, or a gang wider than the
    /// cluster would send one event per node joining a fleet.
    fn note_feasibility(&mut self, id: PgId, verdict: Option<Infeasible>) {
        let was_infeasible = self.pgs[&id].infeasible.is_some();
        let reason = verdict.as_ref().map(|v| v.reason.clone());
        match verdict {
            Some(v) => {
                self.infeasible.insert(id, v);
                if !was_infeasible {
                    self.queue.park(id);
                }
            }
            None => {
                self.infeasible.remove(&id);
                if was_infeasible {
                    self.queue.unpark(id);
                }
            }
        }
        let pg = self.pgs.get_mut(&id).expect("known group");
        let turned = was_infeasible != reason.is_some();
        pg.infeasible = reason.clone();
        if turned {
            self.events.push_back(SchedEvent::Feasibility { pg: id, infeasible: reason });
        }
    }

    /// ALIVE → DRAINING: nothing new goes there; what is there stays until released.
    pub fn drain_node(&mut self, ix: NodeIx) {
        self.cluster.drain(ix);
    }

    /// DRAINING → ALIVE (the operator withdrew the drain): offered again from the next pass.
    pub fn undrain_node(&mut self, ix: NodeIx) {
        self.cluster.undrain(ix);
        self.dirty = true;
    }

    /// What keeps the node's agent from starting work, or `None`: it is offered again from the
    /// next pass.
    pub fn set_node_problem(&mut self, ix: NodeIx, problem: Option<String>, now: Instant) {
        self.dirty |= problem.is_none();
        self.cluster.set_problem(ix, problem, now);
    }

    /// → DEAD. Returns the bundles that were on it; they are now unplaced and marked lost, and
    /// the owning drivers decide how to ask for them again.
    pub fn kill_node(&mut self, ix: NodeIx) -> Vec<(PgId, u32)> {
        let lost = self.cluster.kill(ix);
        for &(id, bundle) in &lost {
            let pg = self.pgs.get_mut(&id).expect("bundle belongs to a live group");
            pg.note_unplaced(bundle).expect("lost bundle was placed");
            pg.lost.insert(bundle);
        }
        lost
    }

    /// A live node's agent restarted offering other resources or labels; the node keeps its
    /// bundles if they still fit (`Cluster::reconfigure`), and every group whose verdict the
    /// change could turn is judged again. Whether the node was reconfigured.
    /// The ports listening on a node's machine (cluster.rs, PS-3).
    pub fn note_listening(&mut self, ix: NodeIx, ports: Vec<u16>) {
        self.cluster.note_listening(ix, ports);
    }

    /// Moves a placed bundle off a port something on its machine listens on (cluster.rs,
    /// PS-4): its new port, or `None` when its port is not busy or no free one is idle.
    /// `by_its_node`: busy as its own node's agent last said (read after each end there), not
    /// as any agent of the machine last said.
    pub fn move_off_busy_port(&mut self, id: PgId, bundle: u32, by_its_node: bool) -> Option<u16> {
        let pg = self.pgs.get_mut(&id)?;
        let Some(&BundleState::Placed { node, port, devices }) = pg.bundles.get(bundle as usize) else { return None };
        let busy = match by_its_node {
            true => self.cluster.node_says_busy(node, port),
            false => self.cluster.port_is_busy(node, port),
        };
        if !busy || self.fault == PolicyFault::BundlesKeepBusyPorts {
            return None;
        }
        let new = self.cluster.move_port(node, port)?;
        pg.bundles[bundle as usize] = BundleState::Placed { node, port: new, devices };
        Some(new)
    }

    pub fn reconfigure_node(
        &mut self,
        ix: NodeIx,
        resources: Resources,
        labels: Labels,
        devices: Option<Devices>,
    ) -> bool {
        let could_hold: BTreeSet<PgId> = self.groups_the_node_could_hold(ix);
        if !self.cluster.reconfigure(ix, resources, labels, devices) {
            return false;
        }
        let mut touched = could_hold;
        touched.extend(self.groups_the_node_could_hold(ix));
        touched.extend(self.infeasible.keys().copied());
        self.judge_again(touched);
        true
    }

    /// Counts every node again for `groups` (the cluster changed under their verdicts), and
    /// lets the next pass look.
    fn judge_again(&mut self, groups: BTreeSet<PgId>) {
        for id in groups {
            let verdict = feasibility::infeasible_reason(&self.cluster, &self.pgs[&id]);
            self.note_feasibility(id, verdict);
        }
        self.dirty = true;
    }

    fn groups_the_node_could_hold(&self, ix: NodeIx) -> BTreeSet<PgId> {
        let node = self.cluster.node(ix);
        self.pgs.iter().filter(|(_, pg)| feasibility::node_passes_filters(node, pg)).map(|(id, _)| *id).collect()
    }

    /// A DEAD node is forgotten. The nodes ever seen counted it when judging whether a group
    /// could ever be placed: each group it could have held is judged again without it (a gang
    /// that needed it turns infeasible, with the count of what is left).
    pub fn forget_node(&mut self, ix: NodeIx) {
        let touched = self.groups_the_node_could_hold(ix);
        self.cluster.forget(ix);
        self.suspects.remove(&ix);
        self.judge_again(touched);
    }

    pub fn node_ix(&self, name: &NodeId) -> Option<NodeIx> {
        self.cluster.ix(name)
    }

    pub fn node(&self, ix: NodeIx) -> &Node {
        self.cluster.node(ix)
    }

    /// Every known node (seen and not forgotten), by name.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeIx, &Node)> {
        self.cluster.nodes_by_name()
    }

    pub fn node_count(&self) -> usize {
        self.cluster.len()
    }

    /// What is reserved on a node, by resource name.
    pub fn allocated(&self, ix: NodeIx) -> Resources {
        self.cluster.node(ix).allocated(&self.cluster.table)
    }

    // ---- placement groups ----------------------------------------------------------------

    pub fn create_pg(&mut self, id: PgId, spec: PgSpec) {
        self.insert_pg(id, spec, false);
    }

    /// A group from before a head restart, admitted again if its gang was placed (its later
    /// requests queue at once), and judged as such: an admitted group needs room for one
    /// bundle, not for its whole gang. Judged as a new gang on a cluster that had forgotten
    /// its DEAD nodes, it was parked as infeasible, and lower items took the room its
    /// replacements could use (swarm seed 1659399).
    pub fn restore_pg(&mut self, id: PgId, spec: PgSpec, admitted: bool) {
        self.insert_pg(id, spec, admitted);
    }

    fn insert_pg(&mut self, id: PgId, spec: PgSpec, admitted: bool) {
        assert!(!self.pgs.contains_key(&id), "placement group {id} created twice");
        let demand = Demand::from_resources(&mut self.cluster.table, &spec.bundle);
        let mut pg = PlacementGroup::new(spec, demand);
        pg.admitted = admitted;
        let verdict = feasibility::infeasible_reason(&self.cluster, &pg);
        self.pgs.insert(id, pg);
        if verdict.is_some() {
            self.note_feasibility(id, verdict);
        }
    }

    /// Queues the required gang (bundles `0..required`) as one all-or-nothing item.
    pub fn request_gang(&mut self, id: PgId) {
        let pg = self.pgs.get_mut(&id).expect("known group");
        assert!(!pg.admitted, "group {id} asked for its gang twice");
        for b in 0..pg.required as usize {
            assert_eq!(pg.bundles[b], BundleState::Idle, "gang bundle {b} of {id} busy");
            pg.bundles[b] = BundleState::InGang;
        }
        self.queue
            .insert(QueueKey::new(QueueClass::PendingGang, pg.priority, pg.submit, id, GANG), pg.infeasible.is_some());
        self.dirty = true;
    }

    /// Queues one bundle for `need` (not admission: the gang is requested whole), or moves it
    /// to its new class if already queued. Before the group is admitted the request is
    /// deferred until its gang is placed.
    pub fn request(&mut self, id: PgId, bundle: u32, need: Need) {
        assert_ne!(need, Need::Admission, "gang bundles are requested with request_gang");
        let pg = self.pgs.get_mut(&id).expect("known group");
        let (class, since) = (policy::class_of(need), policy::waiting_since(need, pg.submit));
        let slot = &mut pg.bundles[bundle as usize];
        match *slot {
            BundleState::Idle | BundleState::Deferred { .. } => {}
            BundleState::Queued { class: old, since: old_since } => {
                self.queue.remove(&QueueKey::new(old, pg.priority, old_since, id, bundle));
            }
            other => panic!("bundle {bundle} of group {id} requested while {other:?}"),
        }
        if pg.admitted {
            *slot = BundleState::Queued { class, since };
            self.queue.insert(QueueKey::new(class, pg.priority, since, id, bundle), pg.infeasible.is_some());
            self.dirty = true;
        } else {
            *slot = BundleState::Deferred { class, since };
        }
    }

    /// A placement from before a head restart: the bundle is on `node` with `port`, again.
    pub fn restore_placed(&mut self, id: PgId, bundle: u32, node: NodeIx, port: u16, devices: Devices) {
        let pg = self.pgs.get_mut(&id).expect("known group");
        self.cluster.allocate_exactly(node, &pg.demand, (id, bundle), port, devices);
        pg.note_placed(bundle, node, port, devices);
        self.dirty = true;
    }

    /// Once every placement is restored: each machine's port shares cover what its nodes hold
    /// (PS-2, `Cluster::settle_port_shares`).
    pub fn settle_port_shares(&mut self) {
        self.cluster.settle_port_shares();
        self.dirty = true;
    }

    /// Withdraws a waiting request (a gang member withdraws the whole gang). Idle is a no-op.
    pub fn cancel(&mut self, id: PgId, bundle: u32) {
        let pg = self.pgs.get_mut(&id).expect("known group");
        match pg.bundles[bundle as usize] {
            BundleState::Queued { class, since } => {
                self.queue.remove(&QueueKey::new(class, pg.priority, since, id, bundle));
            }
            BundleState::InGang => {
                self.queue.remove(&QueueKey::new(QueueClass::PendingGang, pg.priority, pg.submit, id, GANG));
                for b in pg.bundles.iter_mut().filter(|b| **b == BundleState::InGang) {
                    *b = BundleState::Idle;
                }
            }
            BundleState::Placed { .. } => panic!("bundle {bundle} of group {id} cancelled while placed; release it"),
            BundleState::Idle | BundleState::Deferred { .. } => {}
        }
        pg.bundles[bundle as usize] = BundleState::Idle;
        pg.lost.remove(&bundle);
    }

    /// Frees a placed bundle's reservation.
    pub fn release(&mut self, id: PgId, bundle: u32) {
        let pg = self.pgs.get_mut(&id).expect("known group");
        let (node, port, devices) =
            pg.note_unplaced(bundle).unwrap_or_else(|| panic!("bundle {bundle} of {id} released while not placed"));
        self.cluster.free(node, &pg.demand, (id, bundle), port, devices);
        self.dirty = true;
    }

    /// Drops a group: releases what it holds and withdraws what it waits for.
    pub fn remove_pg(&mut self, id: PgId) {
        let bundles = self.pgs[&id].bundles.len() as u32;
        for b in 0..bundles {
            match self.pgs[&id].bundles[b as usize] {
                BundleState::Placed { .. } => self.release(id, b),
                _ => self.cancel(id, b),
            }
        }
        self.infeasible.remove(&id);
        self.pgs.remove(&id);
    }

    /// From now on keep this group's new placements off nodes labelled `preemptible=true`.
    pub fn avoid_preemptible(&mut self, id: PgId) {
        let pg = self.pgs.get_mut(&id).expect("known group");
        pg.avoid_preemptible = true;
        if pg.infeasible.is_none() {
            let verdict = feasibility::infeasible_reason(&self.cluster, pg);
            if verdict.is_some() {
                self.note_feasibility(id, verdict);
            }
        }
    }

    pub fn pg(&self, id: PgId) -> Option<&PlacementGroup> {
        self.pgs.get(&id)
    }

    pub fn pgs(&self) -> impl Iterator<Item = (PgId, &PlacementGroup)> {
        self.pgs.iter().map(|(id, pg)| (*id, pg))
    }

    /// Waiting items a pass considers, in scheduling order (infeasible groups' are parked).
    pub fn queue(&self) -> impl Iterator<Item = &QueueKey> {
        self.queue.active()
    }

    /// Every waiting item, those parked as infeasible included, with the bundles it stands
    /// for: a pending gang's item stands for its whole required gang, any other for one.
    pub fn waiting_bundles(&self) -> impl Iterator<Item = (QueueClass, u32)> + '_ {
        self.queue.all().map(|key| match key.bundle {
            queue::GANG => (key.class, self.pgs[&key.pg].required),
            _ => (key.class, 1),
        })
    }

    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    pub fn passes(&self) -> u64 {
        self.passes
    }

    pub fn poll_event(&mut self) -> Option<SchedEvent> {
        self.events.pop_front()
    }

    // ---- the pass ------------------------------------------------------------------------

    /// One pass over the queue in order, placing what fits. Does nothing if nothing changed.
    pub fn schedule(&mut self, now: Instant) {
        if !std::mem::take(&mut self.dirty) {
            return;
        }
        self.passes += 1;
        self.holding.clear();
        let mut pass = PassState::default();
        let mut suspects_held = false;
        for class in policy::class_order(self.fault) {
            if class != QueueClass::Replacement && !suspects_held {
                self.hold_for_suspects(&mut pass.holds);
                suspects_held = true;
            }
            let mut cursor = None;
            // Re-read the queue after each item: an admission queues its deferred spares and
            // elastic bundles (classes 3 and 4) during this very pass.
            while let Some(key) = self.queue.next_in_class(class, cursor) {
                cursor = Some(key);
                self.try_place(key, now, &mut pass);
            }
        }
    }

    /// The head's view of which alive nodes are suspect. Capacity held for them is freed (and a
    /// pass is due) when one stops being suspect.
    pub fn set_suspects(&mut self, suspects: BTreeSet<NodeIx>) {
        if !self.suspects.is_subset(&suspects) {
            self.dirty = true;
        }
        self.suspects = suspects;
    }

    /// A suspect node was heard from again.
    pub fn clear_suspect(&mut self, ix: NodeIx) {
        if self.suspects.remove(&ix) {
            self.dirty = true;
        }
    }

    /// Each bundle on a suspect node has a node set aside that it could be re-placed on, the
    /// one its group's strategy would choose (after replacements have had theirs): a machine
    /// that joins before the loss is confirmed goes to the running job. Only as much is held
    /// as the bundles need, so a busy agent's late heartbeat does not stall the cluster.
    fn hold_for_suspects(&self, holds: &mut Holds) {
        if self.fault == PolicyFault::IgnoreSuspects {
            return;
        }
        for &ix in &self.suspects {
            for &(id, _) in &self.cluster.node(ix).bundles {
                let pg = &self.pgs[&id];
                let cluster = &self.cluster;
                let ok = |n: NodeIx| {
                    !self.suspects.contains(&n) && !holds.holds_node(n) && feasibility::usable(cluster.node(n), pg)
                };
                if let Some(chosen) = select::prepare(cluster, pg, 1, &ok) {
                    holds.hold_node(chosen[0]);
                }
            }
        }
    }

    fn try_place(&mut self, key: QueueKey, now: Instant, pass: &mut PassState) {
        let pg = &self.pgs[&key.pg];
        if pg.infeasible.is_some() {
            return;
        }
        let together = !key.is_gang() && policy::placed_together(key.class);
        if together && !pass.tried_together.insert((key.class, key.pg)) {
            return; // its group's first item in this class stood for it, this very pass
        }
        let bundles = self.bundles_of(&key);
        let count = bundles.len() as u32;
        let holds = pass.holds.binding(pg, key.class, &self.cluster, &self.pgs);
        let failed = &mut pass.failed_shapes;
        let shape = key.is_gang().then(|| Shape::of(pg, count));
        let plan = match &shape {
            Some(shape) if failed.contains(shape) => None,
            _ => {
                let (cluster, pgs) = (&self.cluster, &self.pgs);
                // Nothing new goes to a node that may be dead already.
                let suspects =
                    if self.fault == PolicyFault::IgnoreSuspects { &BTreeSet::new() } else { &self.suspects };
                let unfiltered = self.fault == PolicyFault::IgnoreStaticFilters;
                let ignore_health = self.fault == PolicyFault::PlaceOnUnhealthy;
                // Judged as if the most the strategy allows landed on one node: a PACK item
                // whose bundles could share a node must leave held room even so.
                let per_node = policy::most_per_node(pg, count);
                let ok = |ix: NodeIx| {
                    let node = cluster.node(ix);
                    (feasibility::usable(node, pg)
                        || unfiltered && node.state == NodeState::Alive
                        || ignore_health && feasibility::usable_if_healthy(node, pg))
                        && !suspects.contains(&ix)
                        && (holds.is_empty() || !holds.held(node, ix, &pg.demand, per_node, pgs))
                };
                select::prepare(cluster, pg, count, &ok)
            }
        };
        match plan {
            Some(nodes) => self.commit(key, &bundles, &nodes),
            None => {
                if let Some(shape) = shape {
                    failed.insert(shape);
                }
                let aging_off = self.fault == PolicyFault::NoAgingHolds && key.class != QueueClass::Replacement;
                if policy::is_protected(&key, now, self.config.starvation_ms) && !aging_off {
                    pass.holds.add(key.pg, &self.pgs);
                    self.holding.insert(key.pg);
                }
            }
        }
    }

    /// The bundles the item `key` places: the required gang; every bundle its group waits for
    /// in a class placed together (`policy::placed_together`); or its own bundle.
    fn bundles_of(&self, key: &QueueKey) -> Vec<u32> {
        let pg = &self.pgs[&key.pg];
        if key.is_gang() {
            (0..pg.required).collect()
        } else if policy::placed_together(key.class) {
            pg.queued_in(key.pg, key.class).iter().map(|k| k.bundle).collect()
        } else {
            vec![key.bundle]
        }
    }

    /// Reserves every bundle of the item on its chosen node (the commit of the two-phase
    /// reserve); an admitted gang releases its deferred requests into the queue.
    fn commit(&mut self, key: QueueKey, bundles: &[u32], nodes: &[NodeIx]) {
        let pg = self.pgs.get_mut(&key.pg).expect("queued group exists");
        let keys: Vec<QueueKey> = if key.is_gang() {
            vec![key]
        } else {
            bundles.iter().map(|b| pg.queued_key(key.pg, *b).expect("an item's bundles are queued")).collect()
        };
        for queued in keys {
            assert!(self.queue.remove(&queued), "committing {queued:?} which is not queued");
        }
        assert_eq!(bundles.len(), nodes.len(), "a plan names one node per bundle");
        for (&bundle, &node) in bundles.iter().zip(nodes) {
            let (port, mut devices) = self.cluster.allocate(node, &pg.demand, (key.pg, bundle), pg.gpus);
            if self.fault == PolicyFault::DevicesIgnoreHolders {
                devices = self.cluster.node(node).devices.lowest(pg.gpus).expect("the node has them");
            }
            pg.note_placed(bundle, node, port, devices);
            let placement = Placement { pg: key.pg, bundle, node, port, devices, class: key.class };
            self.events.push_back(SchedEvent::Placed(placement));
        }
        if key.is_gang() {
            pg.admitted = true;
            for (bundle, slot) in pg.bundles.iter_mut().enumerate() {
                if let BundleState::Deferred { class, since } = *slot {
                    *slot = BundleState::Queued { class, since };
                    self.queue.insert(QueueKey::new(class, pg.priority, since, key.pg, bundle as u32), false);
                }
            }
        }
    }

    // ---- checks --------------------------------------------------------------------------

    /// Asserts the scheduler's invariants: no over-commit, whole gangs, strategies respected,
    /// queue and bundle states agreeing. A failure is a bug.
    pub fn check_invariants(&self) {
        self.cluster.check_invariants();
        for (&id, pg) in &self.pgs {
            let placed = pg.placed_count();
            assert!(pg.admitted || placed == 0, "group {id} partly placed before its gang");
            let mut counted: BTreeMap<NodeIx, u32> = BTreeMap::new();
            for (b, state) in pg.bundles.iter().enumerate() {
                match *state {
                    BundleState::Placed { node, .. } => {
                        *counted.entry(node).or_insert(0) += 1;
                        assert!(
                            self.cluster.node(node).bundles.contains(&(id, b as u32)),
                            "bundle {id}/{b} not on its node"
                        );
                    }
                    BundleState::Queued { class, since } => {
                        assert!(
                            self.queue.contains(&QueueKey::new(class, pg.priority, since, id, b as u32)),
                            "{id}/{b} not queued"
                        );
                    }
                    BundleState::InGang => assert!(!pg.admitted, "{id}/{b} in a gang after admission"),
                    BundleState::Deferred { .. } => assert!(!pg.admitted, "{id}/{b} deferred after admission"),
                    BundleState::Idle => {}
                }
            }
            assert_eq!(counted, pg.on_nodes, "group {id} node counts");
            match pg.strategy {
                Strategy::StrictSpread => {
                    assert!(counted.values().all(|c| *c == 1), "STRICT_SPREAD group {id} doubled up")
                }
                Strategy::StrictPack => assert!(counted.len() <= 1, "STRICT_PACK group {id} on several nodes"),
                Strategy::Spread | Strategy::Pack => {}
            }
        }
        for key in self.queue.all() {
            assert!(self.pgs.contains_key(&key.pg), "queue holds removed group {}", key.pg);
        }
    }
}

impl Shape {
    fn of(pg: &PlacementGroup, count: u32) -> Shape {
        debug_assert!(pg.on_nodes.is_empty(), "shapes describe unplaced gangs only");
        Shape {
            demand: pg.demand.clone(),
            selector: pg.selector.clone(),
            strategy: pg.strategy,
            pack_by: pg.pack_by.clone(),
            avoid_preemptible: pg.avoid_preemptible,
            count,
        }
    }
}
