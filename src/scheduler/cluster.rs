//! The scheduler's view of the cluster: nodes with integer capacities, what is allocated on
//! each, their ports, and an index of ALIVE nodes ordered by load (the "rank" step).
//!
//! Ports (`MASTER_PORT`) are part of a node's capacity, `ports_per_node` bundles at most:
//!
//! - **PS-1 one machine's ports are given once.** Nodes whose agents report the same port space
//!   (their machine and network namespace: several agents on one machine, or an embedded
//!   cluster) draw from one pool, so two bundles on that machine never hold the same port,
//!   whichever node each is on. A node that names none has a pool of its own.
//! - **PS-2 a space never runs dry.** A space's pool holds every port from `master_port_base`
//!   to 65535, and each member reserves up to `ports_per_node` of them as it joins: what is
//!   left, which is none once the members hold all (36 nodes of 1,000 from 29500 on one
//!   machine). A node's cap bounds what it takes, the caps together never pass the pool, so a
//!   selection that fits every node's room always finds its ports, and no node ever draws from
//!   a range another uses. A member that dies gives its share to the members short of theirs,
//!   in the order the head first knew them, so no member stays short while ports are free.
//! - **PS-3 busy ports are passed over.** A port some process on the machine listens on (its
//!   agent reports them, `ToHead::Listening`; a forgotten `torchrun` on 29500, say) is handed
//!   out only when the pool has no other left: a hint, never a limit, so PS-2 stands.
//! - **PS-4 a bundle moves off a port taken under it.** A listener can start after its port
//!   went to a bundle (the bundle was waiting, or its rank 0 had not bound the port yet). The
//!   head moves such a bundle to a free port nothing listens on while no attempt of it runs
//!   (`head/ports.rs`), before its next rank 0 would fail with `EADDRINUSE`: when a report
//!   shows the port busy, or when an attempt of it ends and the port is still busy — agents
//!   read what listens again before they report an end, so the rank 0's own listener is gone
//!   from that reading.

use super::PgId;
use crate::ids::NodeId;
use crate::resources::{is_preemptible, Devices, Labels, Resources};
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Why a node may have no rendezvous port left and what to change (PS-2), for every place
/// that tells a user so: a waiting job's reason and `ftdrive nodes`.
pub const NO_PORT_LEFT_FIX: &str = "a machine's agents share its ports from `--master-port-base` to 65535, \
     `--ports-per-node` each: lower it to run more agents per machine";

/// A node's position in the cluster table; stable while the head knows the node, across its
/// death and rejoin. A node forgotten (`Cluster::forget`) frees its position for the next new
/// name.
pub type NodeIx = u32;

/// Index of a resource name in the [`ResourceTable`].
pub type ResIx = u16;

/// Node life cycle (DESIGN §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum NodeState {
    Alive,
    /// A preemption notice was received; nothing new is placed here.
    Draining,
    Dead,
}

impl NodeState {
    /// As the API and the command line spell it.
    pub fn name(self) -> &'static str {
        match self {
            NodeState::Alive => "ALIVE",
            NodeState::Draining => "DRAINING",
            NodeState::Dead => "DEAD",
        }
    }
}

/// Resource names interned to small indices so that fit checks index vectors, not maps.
#[derive(Clone, Debug, Default)]
pub struct ResourceTable {
    names: Vec<String>,
    index: BTreeMap<String, ResIx>,
}

impl ResourceTable {
    pub fn intern(&mut self, name: &str) -> ResIx {
        if let Some(ix) = self.index.get(name) {
            return *ix;
        }
        let ix = ResIx::try_from(self.names.len()).expect("fewer than 65536 resource names");
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), ix);
        ix
    }

    pub fn name(&self, ix: ResIx) -> &str {
        &self.names[usize::from(ix)]
    }
}

/// A bundle's demand: (resource, milli-units) pairs, zero quantities dropped, sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Demand(pub Vec<(ResIx, u64)>);

impl Demand {
    pub fn from_resources(table: &mut ResourceTable, resources: &Resources) -> Demand {
        let mut pairs: Vec<(ResIx, u64)> =
            resources.iter().filter(|(_, q)| *q > 0).map(|(n, q)| (table.intern(n), q)).collect();
        pairs.sort_unstable();
        Demand(pairs)
    }
}

/// Ports handed out as `MASTER_PORT`, one per bundle placed, lowest first (so that they stay
/// near `master_port_base`, below the kernel's ephemeral range).
#[derive(Clone, Debug)]
struct PortPool {
    base: u16,
    /// Ports from here up to `end` were never handed out (u32: `end` may be 65536).
    next: u32,
    end: u32,
    free: BTreeSet<u16>,
    /// Ports held by more than one bundle: placements restored under another configuration
    /// (a changed `master_port_base`) may overlap; each extra holder is counted here, so that
    /// the port is free again only when the last one gives it back.
    shared: BTreeMap<u16, u32>,
    /// Ports something on the machine listens on, as last reported (PS-3).
    busy: BTreeSet<u16>,
}

impl PortPool {
    fn new(base: u16, count: u32) -> Self {
        let end = (u32::from(base) + count).min(65_536);
        PortPool {
            base,
            next: u32::from(base),
            end,
            free: BTreeSet::new(),
            shared: BTreeMap::new(),
            busy: BTreeSet::new(),
        }
    }

    fn remaining(&self) -> u32 {
        self.free.len() as u32 + self.end.saturating_sub(self.next)
    }

    /// The lowest port free, passing over busy ones while another is left (PS-3).
    fn take(&mut self) -> Option<u16> {
        self.take_idle().or_else(|| self.take_busy())
    }

    /// The lowest free port nothing listens on.
    fn take_idle(&mut self) -> Option<u16> {
        if let Some(&port) = self.free.iter().find(|p| !self.busy.contains(p)) {
            self.free.remove(&port);
            return Some(port);
        }
        let mut fresh = self.next;
        while fresh < self.end && self.busy.contains(&(fresh as u16)) {
            fresh += 1;
        }
        if fresh < self.end {
            self.take_exactly(fresh as u16);
            return Some(fresh as u16);
        }
        None
    }

    /// The lowest free port, busy as every free one is.
    fn take_busy(&mut self) -> Option<u16> {
        if let Some(port) = self.free.pop_first() {
            return Some(port);
        }
        if self.next < self.end {
            let port = self.next as u16;
            self.next += 1;
            return Some(port);
        }
        None
    }

    /// Takes one particular port: a placement restored after a head restart keeps its port.
    /// One already held is held once more (see `shared`); one outside the pool is not the
    /// pool's to track.
    fn take_exactly(&mut self, port: u16) {
        if !self.contains(port) {
            return;
        }
        if self.free.remove(&port) {
            return;
        }
        if u32::from(port) >= self.next {
            self.free.extend((self.next..u32::from(port)).map(|p| p as u16));
            self.next = u32::from(port) + 1;
            return;
        }
        *self.shared.entry(port).or_insert(0) += 1;
    }

    fn give(&mut self, port: u16) {
        if !self.contains(port) {
            return;
        }
        if let Some(extra) = self.shared.get_mut(&port) {
            *extra -= 1;
            if *extra == 0 {
                self.shared.remove(&port);
            }
            return;
        }
        assert!(u32::from(port) < self.next && self.free.insert(port), "port {port} returned twice");
    }

    fn contains(&self, port: u16) -> bool {
        port >= self.base && u32::from(port) < self.end
    }
}

/// Where a node's ports come from.
#[derive(Clone, Debug)]
enum NodePorts {
    /// A pool of its own: its agent named no port space.
    Own(PortPool),
    /// The pool of the port space it shares with the other nodes whose agents listen in the
    /// same network namespace (one machine's ports); `held` are its bundles' ports.
    Shared { space: String, held: Vec<u16>, cap: u32 },
}

/// A port space (PS-1): the nodes on one machine's ports, and the pool they share.
#[derive(Clone, Debug)]
struct PortSpace {
    pool: PortPool,
    /// Nodes in it that are not DEAD.
    members: u32,
    /// The ports its members may hold together: the sum of their caps, never more than the
    /// pool (PS-2).
    reserved: u32,
}

/// The pool of a space that has members (only members name one).
fn shared_pool<'a>(spaces: &'a mut BTreeMap<String, PortSpace>, space: &str) -> &'a mut PortPool {
    &mut spaces.get_mut(space).expect("a member's space is known").pool
}

/// What a node offers when it joins: its resources and labels, its GPU devices when its agent
/// names them (else `gpu` devices numbered from 0), and the port space its ports come from
/// (PS-1; empty: a pool of its own).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeOffer {
    pub resources: Resources,
    pub labels: Labels,
    pub devices: Option<Devices>,
    pub port_space: String,
}

impl NodeOffer {
    /// These resources, no labels, devices numbered from 0, a pool of its own.
    pub fn of(resources: Resources) -> Self {
        NodeOffer { resources, ..NodeOffer::default() }
    }
}

/// One node as the scheduler sees it.
#[derive(Clone, Debug)]
pub struct Node {
    pub name: NodeId,
    pub state: NodeState,
    pub labels: Labels,
    pub preemptible: bool,
    /// As declared, for display.
    pub resources: Resources,
    capacity: Vec<u64>,
    allocated: Vec<u64>,
    /// Bundles placed here.
    pub bundles: BTreeSet<(PgId, u32)>,
    ports: NodePorts,
    /// Its GPU devices, and those no bundle holds.
    pub devices: Devices,
    free_devices: Devices,
    /// Dominant share allocated, in permille; the key under which the node sits in the index.
    load: u32,
    /// What keeps its agent from starting work, as it says (`ToHead::Health`): nothing new is
    /// placed here meanwhile (`feasibility::usable`); what runs here stays.
    pub problem: Option<String>,
    /// Since when the head has known it unhealthy: one episode, whose failed starts a job is
    /// charged for once (FC-1).
    pub unhealthy_since: Option<Instant>,
    /// What its own agent last said listens on its machine (PS-4). Its space's busy set is the
    /// last report of any of the machine's agents, which may have read while this node's rank 0
    /// still listened; this node's own is read after each of its attempts' ends.
    listening: BTreeSet<u16>,
}

impl Node {
    fn capacity_of(&self, r: ResIx) -> u64 {
        self.capacity.get(usize::from(r)).copied().unwrap_or(0)
    }

    fn allocated_of(&self, r: ResIx) -> u64 {
        self.allocated.get(usize::from(r)).copied().unwrap_or(0)
    }

    /// How many more bundles of `demand` fit, capped at `cap` (so an empty demand is finite).
    pub fn room_for(&self, demand: &Demand, cap: u32) -> u32 {
        self.room_after(demand, cap, &Demand::default(), 0)
    }

    /// `room_for`, were `count` bundles of `taken` placed here first.
    pub fn room_after(&self, demand: &Demand, cap: u32, taken: &Demand, count: u32) -> u32 {
        let mut room = cap.min(self.port_room().saturating_sub(count));
        for &(r, d) in &demand.0 {
            let taken_of_r =
                taken.0.iter().find(|(t, _)| *t == r).map_or(0, |(_, q)| q.saturating_mul(u64::from(count)));
            let free = self.capacity_of(r).saturating_sub(self.allocated_of(r)).saturating_sub(taken_of_r);
            room = room.min(u32::try_from(free / d).unwrap_or(u32::MAX));
        }
        room
    }

    /// Rendezvous ports it may still take (PS-2): none once it holds its cap, or when its
    /// machine's other agents had reserved every port before it joined. Why a node may have
    /// none, and what to change, is `NO_PORT_LEFT_FIX`.
    pub fn port_room(&self) -> u32 {
        match &self.ports {
            NodePorts::Own(pool) => pool.remaining(),
            NodePorts::Shared { held, cap, .. } => cap.saturating_sub(held.len() as u32),
        }
    }

    /// The port space it draws its ports from (PS-1); empty when it has a pool of its own.
    pub fn port_space(&self) -> &str {
        match &self.ports {
            NodePorts::Own(_) => "",
            NodePorts::Shared { space, .. } => space,
        }
    }

    /// How many bundles of `demand` this node could hold if it were empty (ports aside).
    pub fn times_when_empty(&self, demand: &Demand) -> u64 {
        demand.0.iter().map(|&(r, d)| self.capacity_of(r) / d).min().unwrap_or(u64::MAX)
    }

    /// Could this node hold `times` bundles of `demand` if it were empty?
    pub fn could_ever_hold(&self, demand: &Demand, times: u64) -> bool {
        demand.0.iter().all(|&(r, d)| d.saturating_mul(times) <= self.capacity_of(r))
    }

    pub fn capacity_milli(&self, r: ResIx) -> u64 {
        self.capacity_of(r)
    }

    /// Allocated resources by name, for display.
    /// The GPU devices no bundle holds.
    pub fn free_devices(&self) -> Devices {
        self.free_devices
    }

    pub fn allocated(&self, table: &ResourceTable) -> Resources {
        let mut out = Resources::new();
        for (r, q) in self.allocated.iter().enumerate() {
            if *q > 0 {
                out = out.with_milli(table.name(r as ResIx), *q);
            }
        }
        out
    }

    fn compute_load(&self) -> u32 {
        let mut load = 0u32;
        for (r, cap) in self.capacity.iter().enumerate() {
            if *cap > 0 {
                let used = self.allocated.get(r).copied().unwrap_or(0);
                load = load.max(u32::try_from(used.saturating_mul(1000) / cap).unwrap_or(u32::MAX));
            }
        }
        load
    }
}

/// Node name → index by open addressing on an FNV-1a hash: every heartbeat looks its node up,
/// and with ten thousand nodes a tree of string compares, or a detour through the node
/// record, costs cache misses. Each slot keeps the name itself, compared by pointer first (a
/// runtime that reuses the registered `NodeId` never reads the string). Lookup only —
/// nothing iterates it, so no hash order can reach a decision.
#[derive(Clone, Debug, Default)]
struct NameIndex {
    /// Power-of-two many slots, at most half full.
    slots: Vec<Option<(u64, NodeId, NodeIx)>>,
    len: usize,
}

impl NameIndex {
    /// FNV-1a, then a finalizer: FNV's low bits barely differ between names like `n00017` and
    /// `n00018`, and the table is indexed by low bits.
    fn hash(name: &str) -> u64 {
        let mut h = name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h
    }

    fn find(&self, name: &NodeId) -> Option<NodeIx> {
        if self.slots.is_empty() {
            return None;
        }
        let hash = Self::hash(name.as_str());
        let mask = self.slots.len() - 1;
        let mut at = hash as usize & mask;
        loop {
            match &self.slots[at] {
                None => return None,
                Some((h, stored, ix)) if *h == hash && stored.same_as(name) => return Some(*ix),
                Some(_) => at = (at + 1) & mask,
            }
        }
    }

    fn insert(&mut self, ix: NodeIx, name: &NodeId) {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        self.place(Self::hash(name.as_str()), name.clone(), ix);
        self.len += 1;
    }

    fn place(&mut self, hash: u64, name: NodeId, ix: NodeIx) {
        let mask = self.slots.len() - 1;
        let mut at = hash as usize & mask;
        while self.slots[at].is_some() {
            at = (at + 1) & mask;
        }
        self.slots[at] = Some((hash, name, ix));
    }

    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(64);
        let old = std::mem::replace(&mut self.slots, vec![None; size]);
        for (hash, name, ix) in old.into_iter().flatten() {
            self.place(hash, name, ix);
        }
    }
}

/// Every node the head knows (seen and not forgotten), and the load-ordered index of the ALIVE
/// ones.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub table: ResourceTable,
    /// By `NodeIx`; a forgotten node's position stays (vacant) until a new name takes it.
    nodes: Vec<Node>,
    /// Positions of forgotten nodes, reused lowest first.
    vacant: BTreeSet<NodeIx>,
    by_name: BTreeMap<NodeId, NodeIx>,
    lookup: NameIndex,
    /// Each node's name by index, compact: checks a `NodeId`'s hint without touching `nodes`.
    names: Vec<NodeId>,
    /// ALIVE nodes, least loaded first, then by name: the order candidates are tried in.
    by_load: BTreeSet<(u32, NodeId, NodeIx)>,
    /// Port spaces with members (PS-1), by the key their agents report.
    spaces: BTreeMap<String, PortSpace>,
    port_base: u16,
    ports_per_node: u16,
}

impl Cluster {
    pub fn new(port_base: u16, ports_per_node: u16) -> Self {
        Cluster {
            table: ResourceTable::default(),
            nodes: Vec::new(),
            vacant: BTreeSet::new(),
            by_name: BTreeMap::new(),
            lookup: NameIndex::default(),
            names: Vec::new(),
            by_load: BTreeSet::new(),
            spaces: BTreeMap::new(),
            port_base,
            ports_per_node,
        }
    }

    /// Adds a node, or brings a DEAD one back with what it offers now. Its GPUs are the
    /// devices its agent names (and `gpu` is then their count), else `0..gpu`; its ports come
    /// from its port space's pool (PS-1), or its own.
    pub fn join(&mut self, name: NodeId, offer: NodeOffer) -> NodeIx {
        let NodeOffer { resources, labels, devices, port_space } = offer;
        let (resources, capacity, devices) = self.offer(resources, devices);
        let ports = self.ports_in(&port_space);
        let node = Node {
            name: name.clone(),
            state: NodeState::Alive,
            preemptible: is_preemptible(&labels),
            labels,
            resources,
            allocated: vec![0; capacity.len()],
            capacity,
            bundles: BTreeSet::new(),
            ports,
            devices,
            free_devices: devices,
            load: 0,
            problem: None,
            unhealthy_since: None,
            listening: BTreeSet::new(),
        };
        let ix = match self.by_name.get(&name) {
            Some(&ix) => {
                let old = &self.nodes[ix as usize];
                assert!(old.state == NodeState::Dead, "node {name} joined while {:?}", old.state);
                assert!(old.bundles.is_empty(), "dead node {name} still holds bundles");
                self.nodes[ix as usize] = node;
                ix
            }
            None => {
                let ix = match self.vacant.pop_first() {
                    Some(ix) => {
                        self.nodes[ix as usize] = node;
                        self.names[ix as usize] = name.clone();
                        ix
                    }
                    None => {
                        let ix = NodeIx::try_from(self.nodes.len()).expect("fewer than 2^32 nodes");
                        self.nodes.push(node);
                        self.names.push(name.clone());
                        ix
                    }
                };
                self.by_name.insert(name.clone(), ix);
                self.lookup.insert(ix, &name);
                ix
            }
        };
        name.set_hint(ix);
        self.by_load.insert((0, name, ix));
        ix
    }

    /// What listens on `ix`'s machine now (PS-3): its pool passes over those ports.
    pub fn note_listening(&mut self, ix: NodeIx, ports: Vec<u16>) {
        let busy: BTreeSet<u16> = ports.into_iter().take(crate::protocol::MAX_LISTENING_PORTS).collect();
        self.nodes[ix as usize].listening = busy.clone();
        match &mut self.nodes[ix as usize].ports {
            NodePorts::Own(pool) => pool.busy = busy,
            NodePorts::Shared { space, .. } => {
                shared_pool(&mut self.spaces, space).busy = busy;
            }
        }
    }

    /// Whether something on `ix`'s machine listens on `port`, as last reported (PS-3).
    pub fn port_is_busy(&self, ix: NodeIx, port: u16) -> bool {
        match &self.nodes[ix as usize].ports {
            NodePorts::Own(pool) => pool.busy.contains(&port),
            NodePorts::Shared { space, .. } => self.spaces[space].pool.busy.contains(&port),
        }
    }

    /// Whether `ix`'s own agent last said something listens on `port` (PS-4).
    pub fn node_says_busy(&self, ix: NodeIx, port: u16) -> bool {
        self.nodes[ix as usize].listening.contains(&port)
    }

    /// Gives a bundle on `ix` that holds `port` the lowest free port nothing listens on instead
    /// (PS-4), and `port` back to its pool; `None`, and the bundle keeps `port`, when no such
    /// port is free. The node holds as many ports as before, so its cap (PS-2) stands.
    pub fn move_port(&mut self, ix: NodeIx, port: u16) -> Option<u16> {
        let node = &mut self.nodes[ix as usize];
        match &mut node.ports {
            NodePorts::Own(pool) => {
                let new = pool.take_idle()?;
                pool.give(port);
                Some(new)
            }
            NodePorts::Shared { space, held, .. } => {
                let pool = shared_pool(&mut self.spaces, space);
                let new = pool.take_idle()?;
                pool.give(port);
                let at = held.iter().position(|p| *p == port).expect("the bundle's port is the node's");
                held[at] = new;
                Some(new)
            }
        }
    }

    /// A joining node's ports: a member's share of its space (PS-1, PS-2), or a pool of its own
    /// when it names none.
    fn ports_in(&mut self, port_space: &str) -> NodePorts {
        let (base, per_node) = (self.port_base, u32::from(self.ports_per_node));
        if port_space.is_empty() {
            return NodePorts::Own(PortPool::new(base, per_node));
        }
        let all = 65_536 - u32::from(base);
        let new_space = || PortSpace { pool: PortPool::new(base, all), members: 0, reserved: 0 };
        let space = self.spaces.entry(port_space.to_string()).or_insert_with(new_space);
        let cap = per_node.min(all - space.reserved);
        space.members += 1;
        space.reserved += cap;
        NodePorts::Shared { space: port_space.to_string(), held: Vec::new(), cap }
    }

    /// A node leaves its space (it died) and gives back its bundles' ports; a space with no
    /// member left is forgotten, so that spaces stay as many as the machines in the cluster.
    fn leave_space(&mut self, ix: NodeIx) {
        let own = NodePorts::Own(PortPool::new(self.port_base, u32::from(self.ports_per_node)));
        let NodePorts::Shared { space: key, held, cap } = std::mem::replace(&mut self.nodes[ix as usize].ports, own)
        else {
            return;
        };
        let space = self.spaces.get_mut(&key).expect("a member's space is known");
        for port in held {
            space.pool.give(port);
        }
        space.members -= 1;
        space.reserved -= cap;
        if space.members == 0 {
            self.spaces.remove(&key);
            return;
        }
        self.top_up_spaces(Some(&key));
    }

    /// Gives what each space (or only `only`) has free to its members short of
    /// `ports_per_node`, lowest position first (PS-2): a node that joined when its machine's
    /// ports were all reserved takes a dead member's share at once, rather than staying empty
    /// until it rejoins.
    fn top_up_spaces(&mut self, only: Option<&str>) {
        let per_node = u32::from(self.ports_per_node);
        for node in &mut self.nodes {
            let NodePorts::Shared { space: key, cap, .. } = &mut node.ports else { continue };
            if *cap >= per_node || only.is_some_and(|only| only != key) {
                continue;
            }
            let space = self.spaces.get_mut(key.as_str()).expect("a member's space is known");
            let all = space.pool.end - u32::from(space.pool.base);
            let more = (per_node - *cap).min(all - space.reserved);
            *cap += more;
            space.reserved += more;
        }
    }

    /// After a head's restore (DU-2), gives each space's shares again so that every member's
    /// covers the ports of the pool it holds (PS-2): the head joins a machine's nodes again in
    /// name order, not in the order they first joined, so a node could hold more bundles than
    /// the share it was given back while another's room counted the same ports. The rest of
    /// the pool is topped up as at a death.
    pub fn settle_port_shares(&mut self) {
        for space in self.spaces.values_mut() {
            space.reserved = 0;
        }
        for node in &mut self.nodes {
            if let NodePorts::Shared { space: key, held, cap } = &mut node.ports {
                let space = self.spaces.get_mut(key.as_str()).expect("a member's space is known");
                *cap = held.iter().filter(|p| space.pool.contains(**p)).count() as u32;
                space.reserved += *cap;
                let all = space.pool.end - u32::from(space.pool.base);
                assert!(space.reserved <= all, "PS-1: the pool ports {key}'s members hold are distinct");
            }
        }
        self.top_up_spaces(None);
    }

    /// What a node offers: its resources (`gpu` the count of its devices), their capacities by
    /// resource index, and its GPU devices (`0..gpu` unless named).
    fn offer(&mut self, resources: Resources, devices: Option<Devices>) -> (Resources, Vec<u64>, Devices) {
        let devices = devices.unwrap_or_else(|| Devices::first((resources.milli("gpu") / 1000) as u32));
        let resources = if devices.is_empty() && resources.milli("gpu") == 0 {
            resources
        } else {
            resources.with_milli("gpu", u64::from(devices.count()) * 1000)
        };
        let mut capacity = Vec::new();
        for (n, q) in resources.iter() {
            let r = usize::from(self.table.intern(n));
            if capacity.len() <= r {
                capacity.resize(r + 1, 0);
            }
            capacity[r] = q;
        }
        (resources, capacity, devices)
    }

    /// A live node offers other resources, labels or devices (its agent restarted so
    /// configured) and keeps what it holds: done only if what is allocated there still fits
    /// and every device a bundle holds is still offered. Whether it was done.
    pub fn reconfigure(&mut self, ix: NodeIx, resources: Resources, labels: Labels, devices: Option<Devices>) -> bool {
        let (resources, mut capacity, devices) = self.offer(resources, devices);
        let node = &self.nodes[ix as usize];
        assert!(node.state != NodeState::Dead, "reconfiguring {}, which is DEAD", node.name);
        let held = node.devices.without(node.free_devices);
        capacity.resize(capacity.len().max(node.allocated.len()), 0);
        let fits = node.allocated.iter().zip(&capacity).all(|(used, cap)| used <= cap);
        if !fits || !devices.contains_all(held) {
            return false;
        }
        let node = &mut self.nodes[ix as usize];
        node.allocated.resize(capacity.len(), 0);
        node.capacity = capacity;
        node.preemptible = is_preemptible(&labels);
        node.labels = labels;
        node.resources = resources;
        node.free_devices = devices.without(held);
        node.devices = devices;
        self.reindex(ix);
        true
    }

    /// ALIVE → DRAINING: the node keeps its bundles but is no longer offered.
    pub fn drain(&mut self, ix: NodeIx) {
        let node = &mut self.nodes[ix as usize];
        if node.state == NodeState::Alive {
            self.by_load.remove(&(node.load, node.name.clone(), ix));
            node.state = NodeState::Draining;
        }
    }

    /// DRAINING → ALIVE: offered again, with whatever it still holds counted in its load.
    /// The node's agent says what keeps it from starting work (or `None`) at `now`; an episode
    /// starts when it first says something.
    pub fn set_problem(&mut self, ix: NodeIx, problem: Option<String>, now: Instant) {
        let node = &mut self.nodes[ix as usize];
        node.unhealthy_since = match (&problem, node.unhealthy_since) {
            (None, _) => None,
            (Some(_), since) => Some(since.unwrap_or(now)),
        };
        node.problem = problem;
    }

    pub fn undrain(&mut self, ix: NodeIx) {
        let node = &mut self.nodes[ix as usize];
        if node.state == NodeState::Draining {
            node.state = NodeState::Alive;
            self.by_load.insert((node.load, node.name.clone(), ix));
        }
    }

    /// → DEAD: frees everything on the node and returns the bundles it held.
    pub fn kill(&mut self, ix: NodeIx) -> Vec<(PgId, u32)> {
        let node = &mut self.nodes[ix as usize];
        if node.state == NodeState::Alive {
            self.by_load.remove(&(node.load, node.name.clone(), ix));
        }
        node.state = NodeState::Dead;
        let lost: Vec<(PgId, u32)> = std::mem::take(&mut node.bundles).into_iter().collect();
        node.allocated.iter_mut().for_each(|q| *q = 0);
        node.free_devices = node.devices;
        node.load = 0;
        node.problem = None; // its agent's word went with it
        node.unhealthy_since = None;
        self.leave_space(ix);
        lost
    }

    /// A DEAD node leaves the table: its name is unknown from now on (a node registering in it
    /// is new), and its position goes to the next new name.
    pub fn forget(&mut self, ix: NodeIx) {
        let node = &self.nodes[ix as usize];
        assert_eq!(node.state, NodeState::Dead, "forgetting {} which is {:?}", node.name, node.state);
        assert!(node.bundles.is_empty(), "forgetting {} which holds bundles", node.name);
        assert!(!self.vacant.contains(&ix), "forgetting {} twice", node.name);
        let removed = self.by_name.remove(&node.name);
        assert_eq!(removed, Some(ix), "{} is known by its name", node.name);
        // A stale hint on the old name must not find this position: the placeholder matches
        // no name a node can have (names are never empty).
        self.names[ix as usize] = NodeId::new("");
        self.vacant.insert(ix);
        // Open addressing has no cheap delete; forgetting is rare (an operator's command, or a
        // death past the retention bound), so the index is rebuilt.
        self.lookup = NameIndex::default();
        for (name, &ix) in &self.by_name {
            self.lookup.insert(ix, name);
        }
    }

    /// Reserves one bundle on a node (the commit of the two-phase reserve): its resources, a
    /// port, and `gpus` devices no other bundle holds.
    pub fn allocate(&mut self, ix: NodeIx, demand: &Demand, bundle: (PgId, u32), gpus: u32) -> (u16, Devices) {
        let node = &mut self.nodes[ix as usize];
        assert_eq!(node.state, NodeState::Alive, "placing on {} which is {:?}", node.name, node.state);
        assert!(node.room_for(demand, 1) == 1, "over-commit of {} by {:?}", node.name, bundle);
        let devices = node.free_devices.lowest(gpus).expect("room_for checked the gpu count");
        node.free_devices = node.free_devices.without(devices);
        for &(r, d) in &demand.0 {
            node.allocated[usize::from(r)] += d;
        }
        let port = match &mut node.ports {
            NodePorts::Own(pool) => pool.take(),
            NodePorts::Shared { space, held, .. } => {
                let port = shared_pool(&mut self.spaces, space).take();
                held.extend(port);
                port
            }
        };
        let port = port.expect("room_for checked ports, and a space holds every member's (PS-2)");
        assert!(node.bundles.insert(bundle), "bundle {bundle:?} placed twice on {}", node.name);
        self.reindex(ix);
        (port, devices)
    }

    /// Reserves one bundle on a node with the port it held before a head restart.
    pub fn allocate_exactly(&mut self, ix: NodeIx, demand: &Demand, bundle: (PgId, u32), port: u16, devices: Devices) {
        let node = &mut self.nodes[ix as usize];
        assert!(node.state != NodeState::Dead, "restoring {bundle:?} on dead node {}", node.name);
        match &mut node.ports {
            NodePorts::Own(pool) => pool.take_exactly(port),
            NodePorts::Shared { space, held, .. } => {
                shared_pool(&mut self.spaces, space).take_exactly(port);
                held.push(port);
            }
        }
        assert!(node.free_devices.contains_all(devices), "devices {devices} of {} given twice", node.name);
        node.free_devices = node.free_devices.without(devices);
        for &(r, d) in &demand.0 {
            node.allocated[usize::from(r)] += d;
        }
        assert!(node.bundles.insert(bundle), "bundle {bundle:?} placed twice on {}", node.name);
        self.reindex(ix);
    }

    /// Frees one bundle's reservation.
    pub fn free(&mut self, ix: NodeIx, demand: &Demand, bundle: (PgId, u32), port: u16, devices: Devices) {
        let node = &mut self.nodes[ix as usize];
        assert!(node.bundles.remove(&bundle), "bundle {bundle:?} is not on {}", node.name);
        node.free_devices = node.free_devices.union(devices);
        for &(r, d) in &demand.0 {
            let slot = &mut node.allocated[usize::from(r)];
            *slot = slot.checked_sub(d).expect("freeing more than was allocated");
        }
        match &mut node.ports {
            NodePorts::Own(pool) => pool.give(port),
            NodePorts::Shared { space, held, .. } => {
                let at = held.iter().position(|p| *p == port).expect("the bundle's port is the node's");
                held.swap_remove(at);
                shared_pool(&mut self.spaces, space).give(port);
            }
        }
        self.reindex(ix);
    }

    fn reindex(&mut self, ix: NodeIx) {
        let node = &mut self.nodes[ix as usize];
        let load = node.compute_load();
        if node.state == NodeState::Alive && load != node.load {
            self.by_load.remove(&(node.load, node.name.clone(), ix));
            self.by_load.insert((load, node.name.clone(), ix));
        }
        node.load = load;
    }

    pub fn node(&self, ix: NodeIx) -> &Node {
        &self.nodes[ix as usize]
    }

    pub fn ix(&self, name: &NodeId) -> Option<NodeIx> {
        let hinted = name.hint().filter(|h| self.names.get(*h as usize).is_some_and(|n| n.same_as(name)));
        hinted.or_else(|| self.lookup.find(name))
    }

    /// Every known node, by name.
    pub fn nodes_by_name(&self) -> impl Iterator<Item = (NodeIx, &Node)> {
        self.by_name.values().map(move |&ix| (ix, &self.nodes[ix as usize]))
    }

    /// Every known node, by position (cheaper than by name).
    pub fn all(&self) -> impl Iterator<Item = (NodeIx, &Node)> {
        let known = move |ix: &NodeIx| self.vacant.is_empty() || !self.vacant.contains(ix);
        (0..self.nodes.len() as NodeIx).filter(known).map(move |ix| (ix, &self.nodes[ix as usize]))
    }

    /// ALIVE nodes in rank order: least loaded first, ties by name.
    pub fn ranked(&self) -> impl Iterator<Item = NodeIx> + '_ {
        self.by_load.iter().map(|(_, _, ix)| *ix)
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Asserts that no node is over-committed, the index matches node states, and each port
    /// space counts its members and holds every port they hold (PS-1).
    pub fn check_invariants(&self) {
        let mut alive = 0;
        // Each space's members and the ports they reserve, counted again from the nodes.
        let mut members: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
        let mut short: BTreeSet<&str> = BTreeSet::new();
        for (ix, node) in self.all() {
            if let NodePorts::Shared { space, held, cap } = &node.ports {
                let counted = members.entry(space).or_default();
                *counted = (counted.0 + 1, counted.1 + cap);
                let pool = &self.spaces[space].pool;
                let in_pool = held.iter().filter(|p| pool.contains(**p)).count() as u32;
                assert!(
                    in_pool <= *cap,
                    "PS-2: {} holds {in_pool} of {space}'s ports, over its share {cap}",
                    node.name
                );
                if *cap < u32::from(self.ports_per_node) {
                    short.insert(space.as_str());
                }
                assert!(held
                    .iter()
                    .all(|p| !pool.contains(*p) || (u32::from(*p) < pool.next && !pool.free.contains(p))));
                assert_eq!(held.len(), node.bundles.len(), "{} holds a port per bundle", node.name);
            }
            for (r, used) in node.allocated.iter().enumerate() {
                assert!(
                    *used <= node.capacity[r],
                    "node {} over-committed on {}",
                    node.name,
                    self.table.name(r as ResIx)
                );
            }
            if node.state == NodeState::Alive {
                alive += 1;
                assert!(self.by_load.contains(&(node.load, node.name.clone(), ix)), "{} missing from index", node.name);
            }
            if node.state == NodeState::Dead {
                assert!(node.bundles.is_empty(), "dead node {} holds bundles", node.name);
            }
        }
        assert_eq!(alive, self.by_load.len(), "index holds non-ALIVE nodes");
        let kept: BTreeMap<&str, (u32, u32)> =
            self.spaces.iter().map(|(k, s)| (k.as_str(), (s.members, s.reserved))).collect();
        assert_eq!(members, kept, "port spaces count their live members and what they reserve");
        for (key, space) in &self.spaces {
            let all = space.pool.end - u32::from(space.pool.base);
            assert!(space.reserved <= all, "PS-2 in {key}");
            let has_short = short.contains(key.as_str());
            assert!(!has_short || space.reserved == all, "PS-2: a member of {key} is short while ports are free");
        }
        assert_eq!(self.by_name.len() + self.vacant.len(), self.nodes.len(), "a position is both known and vacant");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundles_hold_devices_no_other_bundle_holds() {
        let mut c = Cluster::new(29_500, 8);
        let gpus = Devices::from_indices(&[0, 1, 2, 3]).unwrap();
        let a = c.join(
            NodeId::new("a"),
            NodeOffer {
                resources: Resources::units(&[("cpu", 8), ("gpu", 1)]),
                devices: Some(gpus),
                ..NodeOffer::default()
            },
        );
        assert_eq!(c.node(a).resources.milli("gpu"), 4000, "gpu is the count of the named devices");
        let demand = Demand::from_resources(&mut c.table, &Resources::units(&[("gpu", 2)]));
        let (_, first) = c.allocate(a, &demand, (1, 0), 2);
        let (_, second) = c.allocate(a, &demand, (1, 1), 2);
        assert_eq!((first.to_string(), second.to_string()), ("0,1".into(), "2,3".into()));
        assert_eq!(c.node(a).room_for(&demand, 1), 0);
        c.free(a, &demand, (1, 0), 29_500, first);
        assert_eq!(c.allocate(a, &demand, (2, 0), 2).1, first);
        c.check_invariants();
    }

    fn cluster_with(nodes: &[(&str, u64)]) -> Cluster {
        let mut c = Cluster::new(29_500, 4);
        for (name, cpu) in nodes {
            c.join(NodeId::new(name), NodeOffer::of(Resources::units(&[("cpu", *cpu)])));
        }
        c
    }

    #[test]
    fn ranked_order_is_least_loaded_then_name() {
        let mut c = cluster_with(&[("b", 4), ("a", 4), ("c", 4)]);
        let demand = Demand::from_resources(&mut c.table, &Resources::units(&[("cpu", 1)]));
        let names = |c: &Cluster| c.ranked().map(|ix| c.node(ix).name.to_string()).collect::<Vec<_>>();
        assert_eq!(names(&c), ["a", "b", "c"]);
        c.allocate(c.ix(&NodeId::new("a")).unwrap(), &demand, (1, 0), 0);
        assert_eq!(names(&c), ["b", "c", "a"]);
        c.check_invariants();
    }

    #[test]
    fn ports_are_a_resource() {
        let mut c = cluster_with(&[("a", 100)]);
        let demand = Demand::from_resources(&mut c.table, &Resources::units(&[("cpu", 1)]));
        let a = c.ix(&NodeId::new("a")).unwrap();
        let ports: Vec<u16> = (0..4).map(|b| c.allocate(a, &demand, (1, b), 0).0).collect();
        assert_eq!(ports, [29_500, 29_501, 29_502, 29_503]);
        assert_eq!(c.node(a).room_for(&demand, 10), 0, "no port left");
        c.free(a, &demand, (1, 2), 29_502, Devices::NONE);
        assert_eq!(c.allocate(a, &demand, (1, 9), 0).0, 29_502);
    }

    #[test]
    fn a_restored_placement_keeps_its_port_and_no_other_gets_it() {
        let mut c = cluster_with(&[("a", 100)]);
        let demand = Demand::from_resources(&mut c.table, &Resources::units(&[("cpu", 1)]));
        let a = c.ix(&NodeId::new("a")).unwrap();
        c.allocate_exactly(a, &demand, (1, 0), 29_502, Devices::NONE);
        let ports: Vec<u16> = (1..4).map(|b| c.allocate(a, &demand, (1, b), 0).0).collect();
        assert!(!ports.contains(&29_502), "{ports:?}");
        c.check_invariants();
    }

    fn machine(c: &mut Cluster, names: &[&str], space: &str) -> Vec<NodeIx> {
        names
            .iter()
            .map(|n| {
                c.join(
                    NodeId::new(n),
                    NodeOffer {
                        resources: Resources::units(&[("cpu", 100)]),
                        port_space: space.into(),
                        ..NodeOffer::default()
                    },
                )
            })
            .collect()
    }

    #[test]
    fn nodes_of_one_machine_never_hold_the_same_port() {
        let mut c = Cluster::new(29_500, 4);
        let (ab, other) = (machine(&mut c, &["a", "b"], "m1"), machine(&mut c, &["c"], ""));
        let demand = Demand::from_resources(&mut c.table, &Resources::units(&[("cpu", 1)]));
        let mut ports: Vec<u16> = (0..8).map(|b| c.allocate(ab[b as usize % 2], &demand, (1, b), 0).0).collect();
        assert_eq!(c.node(ab[0]).room_for(&demand, 10), 0, "each node holds its own share (PS-2)");
        assert_eq!(c.allocate(other[0], &demand, (2, 0), 0).0, 29_500, "another machine's pool is its own");
        ports.sort_unstable();
        assert_eq!(ports, (29_500..29_508).collect::<Vec<_>>(), "PS-1");
        assert_eq!((c.node(ab[1]).port_space(), c.node(other[0]).port_space()), ("m1", ""));
        c.check_invariants();
    }

    #[test]
    fn a_dead_member_gives_its_ports_back_to_its_machine() {
        let mut c = Cluster::new(29_500, 4);
        let ab = machine(&mut c, &["a", "b"], "m1");
        let demand = Demand::from_resources(&mut c.table, &Resources::units(&[("cpu", 1)]));
        let on_a = c.allocate(ab[0], &demand, (1, 0), 0).0;
        let on_b = c.allocate(ab[1], &demand, (1, 1), 0).0;
        c.kill(ab[0]);
        assert_eq!(c.allocate(ab[1], &demand, (2, 0), 0).0, on_a, "a's port is the machine's again, lowest first");
        c.free(ab[1], &demand, (1, 1), on_b, Devices::NONE);
        c.kill(ab[1]);
        assert!(c.spaces.is_empty(), "a machine with no live node is forgotten");
        let again = machine(&mut c, &["a"], "m1");
        assert_eq!(c.allocate(again[0], &demand, (3, 0), 0).0, 29_500);
        c.check_invariants();
    }

    #[test]
    fn a_node_past_its_machines_ports_gets_what_is_left_then_a_dead_members_share() {
        // 10 ports below 65536: room for two members of 4, and 2 for a third.
        let mut c = Cluster::new(65_526, 4);
        let nodes = machine(&mut c, &["a", "b", "c", "d"], "m1");
        let demand = Demand::from_resources(&mut c.table, &Resources::units(&[("cpu", 1)]));
        let room: Vec<u32> = nodes.iter().map(|ix| c.node(*ix).room_for(&demand, 10)).collect();
        assert_eq!(room, [4, 4, 2, 0], "PS-2");
        c.kill(nodes[0]);
        let room: Vec<u32> = nodes[1..].iter().map(|ix| c.node(*ix).room_for(&demand, 10)).collect();
        assert_eq!(room, [4, 4, 2], "a's share goes to the short members at once, first joined first");
        c.check_invariants();
        let e = machine(&mut c, &["e"], "m1");
        assert_eq!(c.node(e[0]).room_for(&demand, 10), 0, "nothing is left for a newcomer");
        c.kill(nodes[1]);
        assert_eq!(c.node(e[0]).room_for(&demand, 10), 2, "b's share: d's last 2, then e's 2");
        c.check_invariants();
    }

    #[test]
    fn the_last_port_of_all_is_handed_out_once() {
        let mut c = Cluster::new(65_528, 4);
        let nodes = machine(&mut c, &["a", "b"], "m1");
        let demand = Demand::from_resources(&mut c.table, &Resources::units(&[("cpu", 1)]));
        let ports: BTreeSet<u16> =
            (0..8).zip(nodes.iter().cycle()).map(|(b, ix)| c.allocate(*ix, &demand, (1, b), 0).0).collect();
        assert_eq!(ports, (65_528..=65_535).collect());
        c.check_invariants();
    }

    #[test]
    fn ports_something_listens_on_are_passed_over_while_others_are_left() {
        let mut c = Cluster::new(29_500, 4);
        let ab = machine(&mut c, &["a", "b"], "m1");
        let own = machine(&mut c, &["c"], "");
        let demand = Demand::from_resources(&mut c.table, &Resources::units(&[("cpu", 1)]));
        c.note_listening(ab[1], vec![29_500, 29_502]);
        c.note_listening(own[0], vec![29_500]);
        let on_a: Vec<u16> = (0..3).map(|b| c.allocate(ab[0], &demand, (1, b), 0).0).collect();
        assert_eq!(on_a, [29_501, 29_503, 29_504], "b's report is the machine's (PS-3)");
        assert_eq!(c.allocate(own[0], &demand, (2, 0), 0).0, 29_501);
        c.free(ab[0], &demand, (1, 0), 29_501, Devices::NONE);
        c.note_listening(ab[0], vec![29_500, 29_501, 29_502]);
        assert_eq!(c.allocate(ab[1], &demand, (3, 0), 0).0, 29_505, "a freed port something listens on now");
        let rest: Vec<u16> = (1..4).map(|b| c.allocate(own[0], &demand, (2, b), 0).0).collect();
        assert_eq!(rest, [29_502, 29_503, 29_500], "a busy port when no other is left (PS-2)");
        c.check_invariants();
    }

    #[test]
    fn a_bundle_moves_off_a_port_taken_under_it_to_an_idle_one() {
        let mut c = Cluster::new(29_500, 4);
        let ab = machine(&mut c, &["a", "b"], "m1");
        let own = machine(&mut c, &["c"], "");
        let demand = Demand::from_resources(&mut c.table, &Resources::units(&[("cpu", 1)]));
        assert_eq!(c.allocate(ab[0], &demand, (1, 0), 0).0, 29_500);
        assert_eq!(c.allocate(own[0], &demand, (2, 0), 0).0, 29_500);
        c.note_listening(ab[1], vec![29_500, 29_501]);
        assert!(c.port_is_busy(ab[0], 29_500), "b's report is the machine's");
        assert_eq!(c.move_port(ab[0], 29_500), Some(29_502), "the lowest idle port");
        assert_eq!(c.allocate(ab[1], &demand, (3, 0), 0).0, 29_503, "29500 is back, and busy");
        c.free(ab[0], &demand, (1, 0), 29_502, Devices::NONE);
        c.note_listening(own[0], vec![29_500, 29_501, 29_502, 29_503]);
        assert_eq!(c.move_port(own[0], 29_500), None, "every other port of c's own pool is busy");
        c.check_invariants();
    }

    #[test]
    fn restored_placements_that_overlap_free_their_port_with_the_last_holder() {
        let mut c = Cluster::new(29_500, 4);
        let ab = machine(&mut c, &["a", "b"], "m1");
        let demand = Demand::from_resources(&mut c.table, &Resources::units(&[("cpu", 1)]));
        // Placed under another configuration: both hold 29501, and one a port outside the pool.
        c.allocate_exactly(ab[0], &demand, (1, 0), 29_501, Devices::NONE);
        c.allocate_exactly(ab[1], &demand, (2, 0), 29_501, Devices::NONE);
        c.allocate_exactly(ab[1], &demand, (3, 0), 40_000, Devices::NONE);
        assert_eq!(c.allocate(ab[0], &demand, (4, 0), 0).0, 29_500);
        c.free(ab[0], &demand, (1, 0), 29_501, Devices::NONE);
        assert_eq!(c.allocate(ab[0], &demand, (5, 0), 0).0, 29_502, "29501 is still held by b");
        c.free(ab[1], &demand, (2, 0), 29_501, Devices::NONE);
        c.free(ab[1], &demand, (3, 0), 40_000, Devices::NONE);
        assert_eq!(c.allocate(ab[1], &demand, (6, 0), 0).0, 29_501);
        c.check_invariants();
    }

    #[test]
    fn name_index_finds_every_node_and_nothing_else() {
        let mut c = Cluster::new(29_500, 4);
        for n in 0..5_000 {
            c.join(NodeId::new(&format!("node-{n}")), NodeOffer::of(Resources::units(&[("cpu", 1)])));
        }
        for n in (0..5_000).step_by(7) {
            assert_eq!(c.ix(&NodeId::new(&format!("node-{n}"))), Some(n), "a fresh NodeId, compared by text");
        }
        assert_eq!(c.ix(&NodeId::new("node-5000")), None);
        assert_eq!(c.ix(&NodeId::new("")), None);
    }

    #[test]
    fn kill_frees_and_returns_bundles_and_rejoin_reuses_index() {
        let mut c = cluster_with(&[("a", 2)]);
        let demand = Demand::from_resources(&mut c.table, &Resources::units(&[("cpu", 1)]));
        let a = c.ix(&NodeId::new("a")).unwrap();
        c.allocate(a, &demand, (3, 0), 0);
        c.allocate(a, &demand, (4, 1), 0);
        assert_eq!(c.kill(a), vec![(3, 0), (4, 1)]);
        assert_eq!(c.ranked().count(), 0);
        let again = c.join(NodeId::new("a"), NodeOffer::of(Resources::units(&[("cpu", 8)])));
        assert_eq!(again, a);
        assert_eq!(c.node(a).room_for(&demand, 100), 4, "limited by ports");
        c.check_invariants();
    }

    #[test]
    fn a_forgotten_node_is_unknown_and_its_position_goes_to_the_next_new_name() {
        let mut c = cluster_with(&[("a", 2), ("b", 2), ("c", 2)]);
        let ix = c.ix(&NodeId::new("a")).unwrap();
        let a = c.node(ix).name.clone();
        assert_eq!(a.hint(), Some(ix), "the name as registered carries its position");
        c.kill(ix);
        c.forget(ix);
        assert_eq!(c.ix(&a), None, "neither the hint nor the index finds it");
        assert_eq!(c.ix(&NodeId::new("a")), None);
        assert_eq!(c.len(), 2);
        assert_eq!(c.all().map(|(_, n)| n.name.to_string()).collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(c.ix(&NodeId::new("c")), Some(2), "the others are found as before");
        let d = c.join(NodeId::new("d"), NodeOffer::of(Resources::units(&[("cpu", 4)])));
        assert_eq!(d, ix, "the vacant position is reused");
        assert_eq!(c.ix(&a), None, "the old name's hint points at d now, and is not taken for it");
        assert_eq!(c.ix(&NodeId::new("d")), Some(ix));
        assert_eq!(c.ranked().count(), 3);
        let a_again = c.join(NodeId::new("a"), NodeOffer::of(Resources::units(&[("cpu", 1)])));
        assert_eq!(a_again, 3, "a name forgotten is new when it comes back");
        c.check_invariants();
    }

    #[test]
    #[should_panic(expected = "forgetting b which is Alive")]
    fn only_a_dead_node_is_forgotten() {
        let mut c = cluster_with(&[("a", 2), ("b", 2)]);
        c.forget(1);
    }

    #[test]
    fn a_reconfigured_node_keeps_its_bundles_only_where_they_still_fit() {
        let mut c = Cluster::new(29_500, 8);
        let four = Devices::from_indices(&[0, 1, 2, 3]).unwrap();
        let a = c.join(
            NodeId::new("a"),
            NodeOffer { resources: Resources::units(&[("cpu", 4)]), devices: Some(four), ..NodeOffer::default() },
        );
        let demand = Demand::from_resources(&mut c.table, &Resources::units(&[("cpu", 2), ("gpu", 2)]));
        c.allocate(a, &demand, (1, 0), 2);
        let held = c.node(a).devices.without(c.node(a).free_devices());
        let two = Devices::from_indices(&[2, 3]).unwrap();
        assert!(!c.reconfigure(a, Resources::units(&[("cpu", 4)]), Labels::new(), Some(two)), "its devices are gone");
        assert!(!c.reconfigure(a, Resources::units(&[("cpu", 1)]), Labels::new(), Some(four)), "too few cpus");
        assert_eq!(c.node(a).resources.milli("cpu"), 4_000, "a refused change changes nothing");
        let labels = Labels::from([("zone".to_string(), "b".to_string())]);
        let six = Devices::from_indices(&[0, 1, 2, 3, 4, 5]).unwrap();
        assert!(c.reconfigure(a, Resources::units(&[("cpu", 8)]), labels.clone(), Some(six)));
        let node = c.node(a);
        assert_eq!((node.labels.clone(), node.resources.milli("gpu")), (labels, 6_000));
        assert_eq!(node.free_devices(), six.without(held), "the held devices stay held");
        assert_eq!(node.room_for(&demand, 10), 2, "6 cpus and 4 devices left");
        c.check_invariants();
    }
}
