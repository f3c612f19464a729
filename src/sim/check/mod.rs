//! Invariant checkers, kept apart from the code under test: they keep their own accounting
//! from the events the head reports and the simulated process table, hold their own copies of
//! the transition table and the cause table, and read the head only through its views.
//!
//! | invariant | how it is checked |
//! |---|---|
//! | `no_overcommit` | own sum of placed bundle demands per node ≤ the node's registered capacity; no GPU device held by two bundles at once, or one the node lacks |
//! | `whole_gang` | a job's first placements include every required bundle, in one step |
//! | `placement_fits_spec` | every bundle is placed on a node with the job's `node_selector` labels (and its `pack_by` label), as its strategy allows: STRICT_SPREAD never beside another bundle of the job, STRICT_PACK only beside all of them; a `pack_by` job's required gang is first placed in one domain (DESIGN §3) |
//! | `one_live_attempt` | at most one running process per actor whose attempt the head has not ended |
//! | `cycle_well_formed` | a gang job's cycles count up; each names `world_size` distinct ranks, between `min_nodes` and `max_nodes`, every one on a placed bundle; actors in two consecutive cycles keep their relative order (promoted spares and the ranks they replaced excepted); with `pack_by`, ranks are ordered by their nodes' domains and keep that order within a domain (DESIGN §5) |
//! | `one_rank_each` | no two attempts of a job that have started and not ended hold the same rank of the same cycle, and no rank reaches `max_nodes` |
//! | `rendezvous_port_once` | a group rank 0 starting (it listens on `MASTER_PORT`) finds no rank 0 of another actor, whose attempt the head has not ended, listening on that port of the same machine (port space) |
//! | `busy_port_twice_at_most` | on a network that loses and reorders nothing, and with ports to spare (a machine's pool at least two nodes' shares), an actor's rank 0 starts at most twice on one port of its machine that a process outside ftdrive listens on (PS-4 moves the bundle) |
//! | `stale_process_gone` | a process of an ended attempt is gone within a bound |
//! | `replacement_first` | no lower class takes room on a node that a waiting replacement could use there |
//! | `starved_item_held` | once a pending gang, spare or growth item has waited `starvation_ms` since its job's submission, nothing below it in the queue (a lower class, a lower priority, a later submission) takes room on a node that it could use there — the rest of the node stays free (DESIGN §3, backfill with aging) |
//! | `suspect_held` | no lower class placed on the last node a bundle of a surely-suspect node could use: one whose machine was lost long enough ago that the head must have missed a heartbeat, not yet declared DEAD (DESIGN §3) |
//! | `budget` | each ledger charge follows the cause table; remaining counts down, never below 0 |
//! | `legal_transition` | every actor transition is an edge of DESIGN §2, from the state it was in |
//! | `start_confirmed_real` | a `start_confirmed` comes once per attempt, for an attempt the head started, and only once its process started on the node it names |
//! | `released_when_terminal` | a terminal job holds no bundle |
//! | `liveness` | once faults stop, every job ends (checked at the end of a healed phase) |
//! | `stop_accounted` | every process the head had stopped has a ledger entry for its attempt by the time its job ends: no work is stopped unaccounted (say, by a head that forgot it after a restart) |
//! | `unhealthy_node_gets_nothing` | nothing is placed on a node while the head knows its agent cannot start work (from the head's `node_health` events; a restarted head starts knowing nothing) (AG-6) |
//! | `cordon_holds` | a node the operator drained is not ALIVE until the operator undrains it, whatever befalls it meanwhile (agent or head restart, death and a new registration) |
//! | `one_charge_per_fault` | a job is charged at most once per fault of a node (a death, a drain, an agent restart), however many of its ranks the fault ends: each charge is matched to its own fault of that node among those its attempt lived through; a `node_lost` or `preempted` end goes free only when its job was charged for a fault of that node, or for a loss of another node to the same budget that settled close enough in time to be one incident with it (FC-2) |
//! | `forget_only_dead` | a node forgotten (by the operator, by retention, to make room) is DEAD, holds no bundle, and is not under an operator's drain the operator did not withdraw |
//! | `last_attempt_off_preemptible` | once a charge leaves the `preemption` or `system` budget of a job with `last_attempt_non_preemptible` at 0, none of its bundles is placed on a preemptible node and no attempt starts on one — not a rank restarting on its own bundle, not a spare promoted from standing by there (DESIGN §6) |
//! | `fence_only_when_unheard` | an agent stops its work at its fence (AG-7) only when the head stopped answering it: not while a head that stayed up since letting it in answers its pings (each heartbeat interval, shorter than the fence) |
//! | `charge_explained` | on a network that loses nothing, every charged ledger entry has a fault behind it: a `user_error` a failed process, a `node_lost` a lost machine, one whose disk filled up, one whose agent stopped its work at its fence (AG-7) or one whose agent was killed with its processes (`agent_crash`) — so a rank's crash in reaction to a lost peer (`react_to_lost_peer_ms`) charged to `user` fails it, a `preempted` a drain or a lost preemptible machine — restarting the head or an agent, or cutting the head's network (`head_cut`), charges nothing |
//!
//! Every checker is here or in a child module (`aging`, `placement`, `ranks`), so that all of
//! them stay apart from the code under test and share one accounting.

use crate::driver::{ActorState, Budget, BudgetKind, Cause, JobState, LedgerEntry, Remaining};
use crate::event::{Event, JobEvent};
use crate::head::{Head, WaitingBundle};
use crate::ids::{ActorId, JobId, NodeId};
use crate::protocol::AttemptKey;
use crate::resources::{is_preemptible, Devices, Labels, Resources};
use crate::scheduler::{NodeState, QueueClass};
use crate::spec::{JobSpec, Strategy};
use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Holds of the head kept for the incident bound: the latest, since a job's charges are too.
const MAX_HOLDS: usize = 1_024;

mod aging;
mod placement;
mod ranks;

/// What the simulator saw of an agent when it stopped its work at its fence (AG-7).
#[derive(Clone, Copy, Debug)]
pub struct FenceSeen {
    /// When the head let the agent run in on the link it still has, if it did.
    pub let_in_at: Option<Instant>,
    pub fence_after_ms: u64,
    /// How often a linked agent pings the head (its heartbeat interval).
    pub ping_every_ms: u64,
}

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub invariant: String,
    pub t_ms: u64,
    pub step: u64,
    pub detail: String,
}

#[derive(Clone, Debug)]
struct NodeCheck {
    capacity: Resources,
    labels: Labels,
    state: NodeState,
}

type ActorKey = (JobId, u32);

#[derive(Clone, Debug, Default)]
pub struct Checker {
    specs: BTreeMap<JobId, JobSpec>,
    booted: BTreeMap<NodeId, (Resources, Labels)>,
    nodes: BTreeMap<NodeId, NodeCheck>,
    placed_on: BTreeMap<ActorKey, NodeId>,
    /// The GPU devices each placed bundle holds.
    devices_of: BTreeMap<ActorKey, Devices>,
    on_node: BTreeMap<NodeId, BTreeSet<ActorKey>>,
    admitted: BTreeSet<JobId>,
    remaining: BTreeMap<JobId, Remaining>,
    exhausted: BTreeSet<JobId>,
    /// Jobs whose later placements must keep off preemptible nodes.
    avoiding_preemptible: BTreeSet<JobId>,
    /// Jobs whose rendezvous is closed: their outcome is decided, failures charge nothing.
    closing: BTreeSet<JobId>,
    actor_states: BTreeMap<ActorKey, ActorState>,
    /// Each gang job's last cycle and its ranks (`cycle_well_formed`).
    last_cycle: BTreeMap<JobId, (u32, Vec<u32>)>,
    /// Actors swapped by a promotion since their job's last cycle: they keep no place.
    swapped: BTreeMap<JobId, BTreeSet<u32>>,
    /// Ranks of started attempts the head has not ended: (job, cycle, rank) → (actor, attempt).
    live_ranks: BTreeMap<(JobId, u32, u32), (u32, u32)>,
    /// Highest attempt of each actor the head has ended (has a ledger entry for).
    ended: BTreeMap<ActorKey, u32>,
    /// Rendezvous listeners: (port space, port) → the rank 0 attempt that last listened there
    /// (whether it still does is `processes`' to say).
    listening: BTreeMap<(String, u16), (ActorKey, u32)>,
    /// `busy_port_twice_at_most`, where enabled: each actor's rank 0 starts that found its
    /// port taken by a process outside ftdrive, by machine and port.
    busy_port_failures: Option<BTreeMap<(ActorKey, String, u16), u32>>,
    /// Running processes: actor → (attempt, node) → since when it is known to be stale.
    processes: BTreeMap<ActorKey, BTreeMap<(u32, NodeId), Option<Instant>>>,
    /// The stale ones again, oldest first, so the periodic check reads only the front.
    stale: BTreeSet<(Instant, ActorKey, u32, NodeId)>,
    stale_bound_ms: u64,
    /// Stopped processes whose attempt has no ledger entry yet, since when.
    unaccounted_stops: BTreeMap<(ActorKey, u32), Instant>,
    /// The network loses nothing: every charge must have a fault behind it.
    lossless: bool,
    lost_machines: BTreeSet<NodeId>,
    /// Machines whose agent was killed with its processes (`agent_crashed`).
    crashed_agents: BTreeSet<NodeId>,
    /// Of those and of rebooted machines, the ones whose crash or reboot was counted as a
    /// fault before the head's word of the restart (`AgentRestarted`) arrived.
    crash_uncounted: BTreeSet<NodeId>,
    /// Machines whose disk filled up (`Fault::DiskFull`): their failed starts are charged.
    sick_machines: BTreeSet<NodeId>,
    /// Machines whose agent stopped its work at its fence (AG-7): those ends are charged.
    fenced_machines: BTreeSet<NodeId>,
    /// Nodes the head has said cannot start work, since its last restart.
    unhealthy: BTreeSet<NodeId>,
    /// Machines lost and not yet declared DEAD (or back), with when they went silent.
    silent_since: BTreeMap<NodeId, Instant>,
    /// The head's network is cut until then (`Fault::HeadCut`): what a machine sent before it
    /// was lost reaches the head only then.
    head_cut_until: Instant,
    /// After this much silence (plus the network's delay) the head must suspect a node.
    suspect_bound_ms: Option<u64>,
    /// The head's `starvation_ms`, when `starved_item_held` is on.
    starvation_ms: Option<u64>,
    /// When each job was submitted (where its items wait in their class).
    submitted_at: BTreeMap<JobId, Instant>,
    drained: BTreeSet<NodeId>,
    /// Drained by the operator and not undrained (`cordon_holds`).
    cordoned: BTreeSet<NodeId>,
    failed_by_fault: BTreeSet<(ActorKey, u32)>,
    /// Faults seen per node (DEAD, DRAINING, an agent restart, unhealthy): one charge per job each.
    fault_epoch: BTreeMap<NodeId, u64>,
    /// The node's faults each job was charged for.
    charged_epochs: BTreeMap<(JobId, NodeId), BTreeSet<u64>>,
    /// The `node_lost` and `preempted` charges of each job: node, budget, when it settled.
    charged_losses: BTreeMap<JobId, Vec<(NodeId, BudgetKind, Instant)>>,
    /// How far apart the losses of one incident (FC-2) can settle.
    incident_bound_ms: u64,
    /// Spans in which the head held silent nodes (FD-1), the latest last; `holding`: the last
    /// is still open. A hold puts a loss off past the incident bound, and the node's count
    /// starts over once it ends (`hold_recount_ms`).
    holds: VecDeque<(Instant, Instant)>,
    holding: bool,
    hold_recount_ms: u64,
    /// The node's fault count when each attempt started running there: only a later fault
    /// can have ended it.
    started_epoch: BTreeMap<(ActorKey, u32), u64>,
    /// Attempts whose process started, and where, until their ledger entry.
    spawned: BTreeSet<(ActorKey, u32, NodeId)>,
    /// Attempts whose start the head has said was confirmed, until their ledger entry.
    confirmed: BTreeSet<(ActorKey, u32)>,
    /// This step's placements (true) and releases (false), in order: what a node held when a
    /// lower item was placed there.
    step_moves: Vec<(NodeId, ActorKey, bool)>,
    found: Vec<Violation>,
    step: u64,
    now: Instant,
}

impl Checker {
    /// `stale_bound_ms`: how long a process of an ended attempt may linger. `lossless`: the
    /// network never drops a message, so no failure can be a false alarm.
    pub fn new(stale_bound_ms: u64, lossless: bool) -> Self {
        Checker { stale_bound_ms, lossless, ..Checker::default() }
    }

    /// How far apart the losses of one incident (FC-2) can settle: losses whose silences
    /// began close together are declared a node timeout after them, or found when an agent
    /// registers again, or together when a hold or a restarted head's window ends — a hold
    /// starting each held node's count over once it ends.
    pub fn bound_incidents(&mut self, settle_within_ms: u64, recount_ms: u64) {
        self.incident_bound_ms = settle_within_ms;
        self.hold_recount_ms = recount_ms;
    }

    /// Whether the head holds silent nodes now (FD-1), noted after every step: the losses of
    /// one incident settle further apart by each hold between them (swarm seeds 7823760: two
    /// cuts of the head's network, a loss 17 s after its incident's first; 7861599: every node
    /// was gone, the head held the last, and its loss settled 8.5 s after its incident's first).
    pub fn note_hold(&mut self, now: Instant, holding: bool) {
        if holding && !self.holding {
            if self.holds.len() == MAX_HOLDS {
                self.holds.pop_front();
            }
            self.holds.push_back((now, now));
        }
        if holding || self.holding {
            self.holds.back_mut().expect("a hold is open").1 = now;
        }
        self.holding = holding;
    }

    /// How much the holds since `at` can have put a loss off.
    fn held_since_ms(&self, at: Instant) -> u64 {
        let since = self.holds.iter().filter(|(_, end)| *end >= at);
        since.map(|(start, end)| end.ms_since(*start) + self.hold_recount_ms).sum()
    }

    /// Enables `busy_port_twice_at_most`: on a network that loses and reorders nothing, every
    /// report of what listens on a machine reaches the head in order.
    pub fn check_busy_ports(&mut self) {
        self.busy_port_failures = Some(BTreeMap::new());
    }

    /// `busy_port_twice_at_most`: a rank 0 started on `port` of `machine`, which a process
    /// outside ftdrive listens on (it fails with `EADDRINUSE`). The first such start may come
    /// before the agent's report; the agent reads again before it reports that attempt's end,
    /// and the bundle moves then (PS-4). A second can follow where another agent of the machine
    /// sent an older reading after that one; a third is a bundle that never moves.
    pub fn port_in_use(&mut self, key: &AttemptKey, machine: &str, port: u16) {
        let Some(failures) = self.busy_port_failures.as_mut() else { return };
        let count = failures.entry(((key.job.clone(), key.actor), machine.to_string(), port)).or_insert(0);
        *count += 1;
        if *count > 2 {
            let detail = format!(
                "{}/{} attempt {} is rank 0 on port {port} of machine `{machine}`, which something else \
                 listens on: {count} of its attempts started there",
                key.job, key.actor, key.attempt
            );
            self.violation("busy_port_twice_at_most", detail);
        }
    }

    /// A machine went away with its processes (crash, reboot, the end of a drain) at `at`.
    pub fn machine_lost(&mut self, node: &NodeId, at: Instant) {
        self.lost_machines.insert(node.clone());
        self.silent_since.insert(node.clone(), at.max(self.head_cut_until));
    }

    /// The head's network is cut from `at` until `until`: the last messages of a machine lost
    /// within `in_flight_ms` before the cut arrive at its end, so its silence counts from then.
    pub fn head_cut(&mut self, at: Instant, until: Instant, in_flight_ms: u64) {
        self.head_cut_until = self.head_cut_until.max(until);
        for since in self.silent_since.values_mut().filter(|since| since.plus_ms(in_flight_ms) >= at) {
            *since = (*since).max(until);
        }
    }

    /// A machine's agent heard nothing from the head past its fence and stopped its work
    /// (AG-7): a fault of the node, as its loss is. Only an agent the head stopped answering
    /// may fence: one let in by a head that stayed up has its pings answered each interval.
    pub fn agent_fenced(&mut self, node: &NodeId, fence: FenceSeen) {
        self.fenced_machines.insert(node.clone());
        *self.fault_epoch.entry(node.clone()).or_default() += 1;
        let FenceSeen { let_in_at, fence_after_ms, ping_every_ms } = fence;
        if let Some(at) = let_in_at.filter(|_| fence_after_ms > ping_every_ms) {
            let detail = format!(
                "{node}'s agent stopped its work at its fence ({fence_after_ms} ms) though the head let it in at {at} \
                 and has answered its pings every {ping_every_ms} ms since"
            );
            self.violation("fence_only_when_unheard", detail);
        }
    }

    /// A machine's agent was killed with the processes it supervised (`Fault::AgentCrash`): a
    /// fault of the node, as its loss is, counted when it happens, since the new agent's ends
    /// may reach the head before its registration does (the head's `AgentRestarted` is then
    /// not counted again).
    pub fn agent_crashed(&mut self, node: &NodeId) {
        self.crashed_agents.insert(node.clone());
        self.crash_uncounted.insert(node.clone());
        *self.fault_epoch.entry(node.clone()).or_default() += 1;
    }

    /// A live machine rebooted (`node_join` of a machine that is up): a fault of the node,
    /// counted when it happens, as an agent crash is — the new agent can answer a stop of an
    /// attempt it never heard of (SL-2) before its registration reaches the head, and a head
    /// restarted meanwhile reports no `AgentRestarted` until then (swarm seed 7670014).
    pub fn machine_rebooted(&mut self, node: &NodeId) {
        self.crash_uncounted.insert(node.clone());
        *self.fault_epoch.entry(node.clone()).or_default() += 1;
    }

    /// A crashed machine boots again (the swarm's heal). Unless the head declared it DEAD
    /// since, this is a reboot the head has yet to hear of, counted now as `machine_rebooted`
    /// counts a live machine's: its new agent can answer a stop of an attempt it never heard
    /// of (SL-2) before anything else tells the head (swarm seed 8943973: crashed while the
    /// head was down, booted before the restarted head declared it).
    pub fn machine_booted(&mut self, node: &NodeId) {
        if self.nodes.get(node).is_some_and(|n| n.state != NodeState::Dead) {
            self.machine_rebooted(node);
        }
    }

    /// A machine's disk filled up.
    pub fn disk_full(&mut self, node: &NodeId) {
        self.sick_machines.insert(node.clone());
    }

    /// Enables `suspect_held`: a machine silent for `bound_ms` is surely suspect to the head.
    pub fn check_suspect_holds(&mut self, bound_ms: u64) {
        self.suspect_bound_ms = Some(bound_ms);
    }

    /// The head came back at `at`: it starts every node's clock afresh, so silence counts from
    /// then.
    pub fn head_restarted(&mut self, at: Instant) {
        for since in self.silent_since.values_mut() {
            *since = (*since).max(at);
        }
        self.unhealthy.clear(); // it hears again from registrations and heartbeats
    }

    /// A machine received a preemption notice.
    pub fn node_drained(&mut self, node: &NodeId) {
        self.drained.insert(node.clone());
    }

    /// The head took the operator's drain (`drained`) or undrain of `node`.
    pub fn operator_cordon(&mut self, node: &NodeId, drained: bool) {
        if drained {
            self.node_drained(node);
            self.cordoned.insert(node.clone());
        } else {
            self.cordoned.remove(node);
        }
    }

    /// A fault made this attempt's process fail (a non-zero exit or a signal).
    pub fn process_failed(&mut self, key: &AttemptKey) {
        self.failed_by_fault.insert(((key.job.clone(), key.actor), key.attempt));
    }

    /// The agent stopped this attempt's process because the head asked it to.
    pub fn process_stopped(&mut self, key: &AttemptKey) {
        let actor = (key.job.clone(), key.actor);
        if self.ended.get(&actor).is_none_or(|e| *e < key.attempt) {
            self.unaccounted_stops.insert((actor, key.attempt), self.now);
        }
    }

    pub fn job_submitted(&mut self, id: &JobId, spec: &JobSpec) {
        let r = &spec.retries;
        self.remaining.insert(id.clone(), Remaining { user: r.user, system: r.system, preemption: r.preemption });
        self.specs.insert(id.clone(), spec.clone());
    }

    /// An agent started with these resources; they count once the head reports it ALIVE.
    pub fn node_booted(&mut self, node: &NodeId, resources: &Resources, labels: &Labels) {
        self.silent_since.remove(node);
        self.booted.insert(node.clone(), (resources.clone(), labels.clone()));
    }

    /// A machine's next agent offers these: they count once the head reports the node
    /// registered anew, or reconfigured in place (`AgentRestarted`).
    pub fn agent_offers(&mut self, node: &NodeId, resources: &Resources, labels: &Labels) {
        self.booted.insert(node.clone(), (resources.clone(), labels.clone()));
    }

    /// A process started; `listens`: the port space and port it holds the rendezvous on.
    pub fn process_started(&mut self, node: &NodeId, key: &AttemptKey, listens: Option<(String, u16)>) {
        let actor = (key.job.clone(), key.actor);
        if let Some(at) = listens {
            self.check_rendezvous_port_once(node, key, at);
        }
        let ended = self.ended.get(&actor).is_some_and(|e| *e >= key.attempt);
        let stale_since = ended.then_some(self.now);
        if !ended {
            self.spawned.insert((actor.clone(), key.attempt, node.clone()));
        }
        self.processes.entry(actor.clone()).or_default().insert((key.attempt, node.clone()), stale_since);
        if let Some(since) = stale_since {
            self.stale.insert((since, actor.clone(), key.attempt, node.clone()));
        }
        self.check_one_live_attempt(&actor);
    }

    /// `rendezvous_port_once`: a listener whose attempt the head ended may linger (the stale
    /// check bounds it), and its port may be given again; a live one's may not.
    fn check_rendezvous_port_once(&mut self, node: &NodeId, key: &AttemptKey, at: (String, u16)) {
        let actor = (key.job.clone(), key.actor);
        if let Some((other, attempt)) = self.listening.get(&at) {
            let running = self.processes.get(other).is_some_and(|p| p.keys().any(|(a, _)| a == attempt));
            let live = running && self.ended.get(other).is_none_or(|e| e < attempt);
            if live && *other != actor {
                let detail = format!(
                    "{}/{} attempt {} on {node} listens on port {} of machine `{}`, held by {}/{} attempt {attempt}",
                    key.job, key.actor, key.attempt, at.1, at.0, other.0, other.1
                );
                self.violation("rendezvous_port_once", detail);
            }
        }
        self.listening.insert(at, (actor, key.attempt));
    }

    pub fn process_ended(&mut self, node: &NodeId, key: &AttemptKey) {
        let actor = (key.job.clone(), key.actor);
        if let Some(map) = self.processes.get_mut(&actor) {
            if let Some(Some(since)) = map.remove(&(key.attempt, node.clone())) {
                self.stale.remove(&(since, actor.clone(), key.attempt, node.clone()));
            }
            if map.is_empty() {
                self.processes.remove(&actor);
            }
        }
    }

    /// Takes the violations found so far.
    pub fn take(&mut self) -> Vec<Violation> {
        std::mem::take(&mut self.found)
    }

    fn violation(&mut self, invariant: &str, detail: String) {
        self.found.push(Violation {
            invariant: invariant.to_string(),
            t_ms: self.now.as_ms(),
            step: self.step,
            detail,
        });
    }

    // ---- per step ------------------------------------------------------------------------

    /// Checks one step's events against the state after the step.
    pub fn observe(&mut self, step: u64, now: Instant, events: &[Event], head: &Head) {
        self.step = step;
        self.now = now;
        let mut first_placements: BTreeMap<JobId, BTreeSet<u32>> = BTreeMap::new();
        let mut below_replacements = Vec::new();
        self.step_moves.clear();
        for event in events {
            match event {
                Event::NodeState { node, state, .. } => {
                    // An agent crash the head never heard of as a restart (its registration
                    // lost, the node declared dead): a later restart is a fault of its own.
                    self.crash_uncounted.remove(node);
                    if matches!(state, NodeState::Dead | NodeState::Draining) {
                        *self.fault_epoch.entry(node.clone()).or_default() += 1;
                    }
                    if *state == NodeState::Dead {
                        self.unhealthy.remove(node); // its agent's word went with it
                    }
                    self.node_state(node, *state)
                }
                Event::AgentRestarted { node, reconfigured, .. } => {
                    if !self.crash_uncounted.remove(node) {
                        *self.fault_epoch.entry(node.clone()).or_default() += 1;
                    }
                    if *reconfigured {
                        self.node_reconfigured(node);
                    }
                }
                Event::NodeForgotten { node, .. } => self.node_forgotten(node),
                Event::NodeHealth { node, problem: Some(_) } => {
                    if self.unhealthy.insert(node.clone()) {
                        *self.fault_epoch.entry(node.clone()).or_default() += 1;
                    }
                }
                Event::NodeHealth { node, problem: None } => {
                    self.unhealthy.remove(node);
                }
                Event::Placed { job, actor, node, class, devices } => {
                    let key = actor_key(actor);
                    if !self.admitted.contains(job) {
                        first_placements.entry(job.clone()).or_default().insert(key.1);
                    }
                    if *class > QueueClass::Replacement {
                        below_replacements.push((key.clone(), node.clone(), *class));
                    }
                    self.step_moves.push((node.clone(), key.clone(), true));
                    if self.unhealthy.contains(node) {
                        let detail = format!("{actor} was placed on {node}, whose agent cannot start work");
                        self.violation("unhealthy_node_gets_nothing", detail);
                    }
                    self.check_off_preemptible(job, &key, node, &"placed");
                    self.check_fits_spec(job, &key, node);
                    self.placed(key.clone(), node);
                    self.devices_placed(key, node, *devices);
                }
                Event::Released { actor, node, .. } => {
                    self.step_moves.push((node.clone(), actor_key(actor), false));
                    self.released(&actor_key(actor))
                }
                Event::Job { job, detail } => self.job_event(job, detail, head),
                Event::JobSubmitted { job, .. } => {
                    self.submitted_at.insert(job.clone(), now);
                }
            }
        }
        self.check_one_domain(&first_placements);
        self.check_whole_gangs(first_placements);
        if !below_replacements.is_empty() {
            let mut lower: BTreeMap<NodeId, Vec<ActorKey>> = BTreeMap::new();
            for (key, node, _) in &below_replacements {
                lower.entry(node.clone()).or_default().push(key.clone());
            }
            let waiting = head.waiting_replacements();
            if !waiting.is_empty() {
                self.check_lower_placements("replacement_first", "replacement", &lower, &waiting);
            }
            let held = self.surely_suspect_bundles();
            let stranded: Vec<WaitingBundle> = held.into_iter().filter(|w| !self.has_room_elsewhere(w)).collect();
            if !stranded.is_empty() {
                self.check_lower_placements("suspect_held", "a bundle of a suspect node", &lower, &stranded);
            }
            self.check_starved_holds(&below_replacements, &head.waiting_items());
        }
    }

    /// Bundles on nodes the head must suspect now, as waiting bundles (never on preemptible
    /// nodes: a held group may avoid them, so the checker does not judge them).
    fn surely_suspect_bundles(&self) -> Vec<WaitingBundle> {
        let Some(bound_ms) = self.suspect_bound_ms else { return Vec::new() };
        let silent = self.silent_since.iter().filter(|(_, at)| self.now >= at.plus_ms(bound_ms));
        silent
            .flat_map(|(node, _)| self.on_node.get(node).into_iter().flatten())
            .map(|(job, actor)| WaitingBundle { job: job.clone(), actor: *actor, avoid_preemptible: true })
            .collect()
    }

    /// Is there still a node, other than the surely suspect ones, with room for `w` once this
    /// step's placements are made? The head holds one node per suspect bundle, so lower items
    /// may take the rest — or part of the held node: a later settle round of the same step may
    /// hold another node than the first did (the group grew meanwhile), so what counts is room
    /// left at the end (swarm seed 383555). A machine lost too recently for the head to have
    /// missed its heartbeat counts: the head, not knowing, may have held that one.
    fn has_room_elsewhere(&self, w: &WaitingBundle) -> bool {
        // Any node counts here, preemptible ones too: the head may have held one of those.
        let w = &WaitingBundle { avoid_preemptible: false, ..w.clone() };
        let bound_ms = self.suspect_bound_ms.unwrap_or(0);
        let surely_suspect =
            |node: &NodeId| self.silent_since.get(node).is_some_and(|at| self.now >= at.plus_ms(bound_ms));
        self.nodes.iter().any(|(node, n)| {
            if surely_suspect(node) {
                return false;
            }
            let mut free: BTreeMap<String, i128> =
                n.capacity.iter().map(|(r, q)| (r.to_string(), i128::from(q))).collect();
            for (r, q) in self.used_on(node) {
                *free.entry(r).or_default() -= i128::from(q);
            }
            self.could_use(w, node, n, &free)
        })
    }

    fn node_state(&mut self, node: &NodeId, state: NodeState) {
        if state == NodeState::Alive && self.cordoned.contains(node) {
            self.violation("cordon_holds", format!("{node} is ALIVE while the operator's drain stands"));
        }
        let was = self.nodes.get(node).map(|n| n.state);
        // A cordoned node registers DRAINING: as fresh a registration as one that is ALIVE.
        let fresh = match state {
            NodeState::Alive => was != Some(NodeState::Draining),
            NodeState::Draining => matches!(was, None | Some(NodeState::Dead)),
            NodeState::Dead => false,
        };
        if state == NodeState::Dead || state == NodeState::Alive || fresh {
            self.silent_since.remove(node);
        }
        if was == Some(NodeState::Draining) && state == NodeState::Alive {
            // An undrain: the node keeps what it holds. (A drained machine that comes back is
            // declared DEAD before it registers again.)
            self.nodes.get_mut(node).expect("known node").state = state;
            return;
        }
        if state == NodeState::Dead || fresh {
            // Death (or a fresh registration) frees everything that was on the node.
            for key in self.on_node.remove(node).unwrap_or_default() {
                self.placed_on.remove(&key);
                self.devices_of.remove(&key);
            }
        }
        if fresh {
            let (capacity, labels) = self.booted.get(node).cloned().unwrap_or_default();
            self.nodes.insert(node.clone(), NodeCheck { capacity, labels, state });
        } else if let Some(n) = self.nodes.get_mut(node) {
            n.state = state;
        }
    }

    /// The node took its agent's new offer in place: placements from now on are held to it.
    fn node_reconfigured(&mut self, node: &NodeId) {
        let (capacity, labels) = self.booted.get(node).cloned().unwrap_or_default();
        if let Some(n) = self.nodes.get_mut(node) {
            (n.capacity, n.labels) = (capacity, labels);
        }
    }

    /// `forget_only_dead`: only a DEAD node holding nothing is forgotten, and never one under
    /// the operator's drain unless the operator forgot it (who withdrew the cordon first).
    fn node_forgotten(&mut self, node: &NodeId) {
        let state = self.nodes.get(node).map(|n| n.state);
        if state != Some(NodeState::Dead) {
            self.violation("forget_only_dead", format!("{node} forgotten while {state:?}"));
        }
        if self.on_node.get(node).is_some_and(|held| !held.is_empty()) {
            self.violation("forget_only_dead", format!("{node} forgotten while it holds bundles"));
        }
        if self.cordoned.contains(node) {
            self.violation("forget_only_dead", format!("{node} forgotten while the operator's drain stands"));
        }
        // A placement there before a new registration is a placement on an unknown node.
        self.nodes.remove(node);
    }

    fn placed(&mut self, key: ActorKey, node: &NodeId) {
        if let Some(old) = self.placed_on.get(&key) {
            let detail = format!("{}/{} placed on {node} while it holds a bundle on {old}", key.0, key.1);
            self.violation("no_overcommit", detail);
        }
        self.placed_on.insert(key.clone(), node.clone());
        self.on_node.entry(node.clone()).or_default().insert(key);
        let used = self.used_on(node);
        let Some(n) = self.nodes.get(node).cloned() else {
            return self
                .violation("no_overcommit", format!("placement on {node}, which the head never reported ALIVE"));
        };
        if n.state != NodeState::Alive {
            let detail = format!("placement on {node} while it is {:?}", n.state);
            return self.violation("no_overcommit", detail);
        }
        for (name, milli) in &used {
            if *milli > n.capacity.milli(name) {
                let detail = format!("{node} holds {name}={milli} milli-units but has {}", n.capacity.milli(name));
                self.violation("no_overcommit", detail);
            }
        }
    }

    /// GPU devices are held by one bundle at a time, and exist on the node.
    fn devices_placed(&mut self, key: ActorKey, node: &NodeId, devices: Devices) {
        if devices.is_empty() {
            return;
        }
        let node_has = Devices::first((self.nodes.get(node).map_or(0, |n| n.capacity.milli("gpu")) / 1000) as u32);
        if !node_has.contains_all(devices) {
            self.violation("no_overcommit", format!("{}/{} holds devices {devices} that {node} lacks", key.0, key.1));
        }
        let clashing: Vec<ActorKey> = (self.on_node.get(node).into_iter().flatten())
            .filter(|k| **k != key && self.devices_of.get(*k).is_some_and(|d| d.intersects(devices)))
            .cloned()
            .collect();
        for (job, index) in clashing {
            let detail = format!("{}/{} and {job}/{index} both hold a device of {devices} on {node}", key.0, key.1);
            self.violation("no_overcommit", detail);
        }
        self.devices_of.insert(key, devices);
    }

    fn released(&mut self, key: &ActorKey) {
        self.devices_of.remove(key);
        if let Some(node) = self.placed_on.remove(key) {
            if let Some(set) = self.on_node.get_mut(&node) {
                set.remove(key);
            }
        }
    }

    fn used_on(&self, node: &NodeId) -> BTreeMap<String, u64> {
        let mut used: BTreeMap<String, u64> = BTreeMap::new();
        for (job, _) in self.on_node.get(node).into_iter().flatten() {
            for (name, milli) in self.specs[job].bundle.iter() {
                *used.entry(name.to_string()).or_default() += milli;
            }
        }
        used
    }

    fn check_whole_gangs(&mut self, first: BTreeMap<JobId, BTreeSet<u32>>) {
        for (job, bundles) in first {
            let min = self.specs[&job].min_nodes;
            let whole = (0..min).all(|b| bundles.contains(&b));
            if !whole {
                self.violation(
                    "whole_gang",
                    format!("{job}'s first placement held bundles {bundles:?} of the gang 0..{min}"),
                );
            }
            self.admitted.insert(job);
        }
    }

    /// No lower-class placement took room on a node that one of `waiting` (a still waiting
    /// replacement, or a bundle whose capacity is held) could use there. The placements `lower`
    /// made below `waiting` this step are replayed on each
    /// node in the order the step made its moves: a lower placement breaks it when a waiting
    /// bundle could use the room the node had just before it and has less room held after it.
    /// Judged one placement at a time, since room taken in between by what is not lower (a
    /// restoration HO-1 frees from the hold) is not the lower placement's doing: a spare placed
    /// beside a held room, a restoration taking half of it, a second spare the rest (swarm seed
    /// 7014248). Only placements still held at the end count: one placed and released within the
    /// step (a spare of a terminating job, say) took nothing in the end.
    fn check_lower_placements(
        &mut self,
        invariant: &str,
        what: &str,
        lower: &BTreeMap<NodeId, Vec<ActorKey>>,
        waiting: &[WaitingBundle],
    ) {
        for (node, taken) in lower {
            let Some(n) = self.nodes.get(node).cloned() else { continue };
            let mut free = self.free_at_step_start(node, &n);
            let moves: Vec<(ActorKey, bool)> =
                self.step_moves.iter().filter(|(at, _, _)| at == node).map(|(_, k, p)| (k.clone(), *p)).collect();
            let mut judged: BTreeSet<(JobId, u32)> = BTreeSet::new();
            for (key, placed) in moves {
                let before = free.clone();
                self.shift_by_bundle(&mut free, &key.0, if placed { -1 } else { 1 });
                if !placed || !taken.contains(&key) || self.placed_on.get(&key) != Some(node) {
                    continue;
                }
                for w in waiting {
                    let breaks = self.placed_on.get(&(w.job.clone(), w.actor)) != Some(node)
                        && self.could_use(w, node, &n, &before)
                        && self.held_room(w, &free) < self.held_room(w, &before);
                    if breaks && judged.insert((w.job.clone(), w.actor)) {
                        let detail = format!(
                            "{}/{} was placed on {node} while {what} {}/{}, ahead of it, waited and could use the \
                             room it took",
                            key.0, key.1, w.job, w.actor
                        );
                        self.violation(invariant, detail);
                    }
                }
            }
        }
    }

    /// The room `node` had when the step began: what it has now, with this step's moves there
    /// undone (a placement gives its bundle back, a release takes it again).
    fn free_at_step_start(&self, node: &NodeId, n: &NodeCheck) -> BTreeMap<String, i128> {
        let mut free: BTreeMap<String, i128> = n.capacity.iter().map(|(r, q)| (r.to_string(), i128::from(q))).collect();
        for (r, q) in self.used_on(node) {
            *free.entry(r).or_default() -= i128::from(q);
        }
        for (_, key, placed) in self.step_moves.iter().filter(|(at, _, _)| at == node) {
            self.shift_by_bundle(&mut free, &key.0, if *placed { 1 } else { -1 });
        }
        free
    }

    /// Adds `job`'s bundle to `free` (`sign` 1: given back) or takes it (`sign` -1: taken).
    fn shift_by_bundle(&self, free: &mut BTreeMap<String, i128>, job: &JobId, sign: i128) {
        for (r, q) in self.specs[job].bundle.iter() {
            *free.entry(r.to_string()).or_default() += sign * i128::from(q);
        }
    }

    /// How many of `w`'s job's bundles fit in `free`, up to what it could want on one node (one
    /// under STRICT_SPREAD, else its gang): the room a hold keeps for it (DESIGN §3).
    fn held_room(&self, w: &WaitingBundle, free: &BTreeMap<String, i128>) -> i128 {
        let spec = &self.specs[&w.job];
        let wanted = if spec.strategy == Strategy::StrictSpread { 1 } else { i128::from(spec.min_nodes.max(1)) };
        let fits = |(r, q): (&str, u64)| free.get(r).copied().unwrap_or(0).max(0) / i128::from(q.max(1));
        spec.bundle.iter().filter(|(_, q)| *q > 0).map(fits).fold(wanted, i128::min)
    }

    fn could_use(&self, w: &WaitingBundle, node: &NodeId, n: &NodeCheck, free: &BTreeMap<String, i128>) -> bool {
        let spec = &self.specs[&w.job];
        let fits = spec.bundle.iter().all(|(r, q)| free.get(r).copied().unwrap_or(0) >= i128::from(q));
        let selector = spec.node_selector.iter().all(|(k, v)| n.labels.get(k) == Some(v));
        let preemptible_ok = !(w.avoid_preemptible && is_preemptible(&n.labels));
        let pack_by_ok = spec.pack_by.as_ref().is_none_or(|k| n.labels.contains_key(k));
        let hosts_job = self.on_node.get(node).is_some_and(|s| s.iter().any(|(j, _)| *j == w.job));
        let strategy_ok = match spec.strategy {
            Strategy::StrictSpread => !hosts_job,
            Strategy::StrictPack if self.placed_on.keys().any(|(j, _)| *j == w.job) => hosts_job,
            // With nothing placed, only a node big enough for the whole gang would do.
            Strategy::StrictPack => {
                spec.bundle.iter().all(|(r, q)| q.saturating_mul(u64::from(spec.min_nodes)) <= n.capacity.milli(r))
            }
            Strategy::Spread | Strategy::Pack => true,
        };
        n.state == NodeState::Alive && fits && selector && preemptible_ok && pack_by_ok && strategy_ok
    }

    fn job_event(&mut self, job: &JobId, detail: &JobEvent, head: &Head) {
        match detail {
            JobEvent::Transition { actor, from, to, attempt, cycle, rank, node } => {
                if let (ActorState::Running, Some(node)) = (to, node) {
                    self.started_epoch.insert((actor_key(actor), *attempt), self.faults_of(node));
                    self.check_off_preemptible(
                        job,
                        &actor_key(actor),
                        node,
                        &format_args!("started attempt {attempt}"),
                    );
                }
                if let (ActorState::Running, Some(rank)) = (to, rank) {
                    self.rank_taken(job, actor, *attempt, *cycle, *rank);
                }
                self.transition(actor, *from, *to)
            }
            JobEvent::Ledger { entry } => self.ledger(job, entry),
            JobEvent::StartConfirmed { actor, attempt, node } => self.start_confirmed(actor, *attempt, node),
            JobEvent::CycleFormed { cycle, world_size, ranks, .. } => {
                let ranks: Vec<u32> = ranks.iter().map(|a| actor_key(a).1).collect();
                self.cycle_formed(job, *cycle, *world_size, ranks)
            }
            JobEvent::Promoted { spare, replaces } => {
                let swapped = self.swapped.entry(job.clone()).or_default();
                swapped.extend([actor_key(spare).1, actor_key(replaces).1]);
            }
            JobEvent::Closing { .. } => {
                self.closing.insert(job.clone());
            }
            JobEvent::JobState { to, .. } if to.is_terminal() => self.job_ended(job, *to, head),
            _ => {}
        }
    }

    fn transition(&mut self, actor: &ActorId, from: ActorState, to: ActorState) {
        let key = actor_key(actor);
        let known = self.actor_states.get(&key).copied().unwrap_or(ActorState::Scheduling);
        if known != from {
            self.violation("legal_transition", format!("{actor} moved {from} → {to} but was {known}"));
        }
        if !legal(from, to) {
            self.violation(
                "legal_transition",
                format!("{actor}: {from} → {to} is not an edge of the actor state machine"),
            );
        }
        self.actor_states.insert(key, to);
    }

    fn ledger(&mut self, job: &JobId, entry: &LedgerEntry) {
        let key = actor_key(&entry.actor);
        self.rank_freed(job, entry);
        let ended = self.ended.entry(key.clone()).or_default();
        *ended = (*ended).max(entry.attempt);
        self.unaccounted_stops.retain(|(actor, attempt), _| *actor != key || *attempt > entry.attempt);
        if self.lossless && entry.budget != BudgetKind::None {
            self.check_charge_explained(&key, entry);
        }
        let now = self.now;
        if let Some(map) = self.processes.get_mut(&key) {
            for ((attempt, node), stale) in map.iter_mut() {
                if *attempt <= entry.attempt && stale.is_none() {
                    *stale = Some(now);
                    self.stale.insert((now, key.clone(), *attempt, node.clone()));
                }
            }
        }
        self.check_charge(job, entry);
        self.spawned.retain(|(actor, attempt, _)| *actor != key || *attempt > entry.attempt);
        self.confirmed.retain(|(actor, attempt)| *actor != key || *attempt > entry.attempt);
        self.started_epoch.remove(&(key, entry.attempt));
    }

    /// `start_confirmed_real`: the head says a start was confirmed once per attempt, for one it
    /// sent, and only when that attempt's process started on the node it names.
    fn start_confirmed(&mut self, actor: &ActorId, attempt: u32, node: &NodeId) {
        let key = actor_key(actor);
        let why = if !self.started_epoch.contains_key(&(key.clone(), attempt)) {
            Some("whose start was never sent")
        } else if !self.spawned.contains(&(key.clone(), attempt, node.clone())) {
            Some("where no process of it started")
        } else if !self.confirmed.insert((key, attempt)) {
            Some("a second time")
        } else {
            None
        };
        if let Some(why) = why {
            self.violation("start_confirmed_real", format!("{actor} attempt {attempt} confirmed on {node} {why}"));
        }
    }

    /// The cause table of DESIGN §6, re-stated here on purpose.
    fn check_charge(&mut self, job: &JobId, entry: &LedgerEntry) {
        let spec = &self.specs[job];
        let table = match entry.cause {
            Cause::UserError => BudgetKind::User,
            Cause::Preempted => BudgetKind::Preemption,
            Cause::NodeLost => BudgetKind::System,
            _ => BudgetKind::None,
        };
        let mut expected = if self.closing.contains(job) {
            BudgetKind::None
        } else if spec.retries.single_budget && table != BudgetKind::None {
            BudgetKind::User
        } else {
            table
        };
        if matches!(entry.cause, Cause::NodeLost | Cause::Preempted) && expected != BudgetKind::None {
            expected = self.charge_per_fault(job, entry, expected);
        }
        if entry.budget != expected {
            let detail =
                format!("{} ({}) was charged to {} instead of {expected}", entry.actor, entry.cause, entry.budget);
            self.violation("budget", detail);
        }
        let remaining = self.remaining.get_mut(job).expect("submitted job");
        let slot = match expected {
            BudgetKind::User => Some(&mut remaining.user),
            BudgetKind::System => Some(&mut remaining.system),
            BudgetKind::Preemption => Some(&mut remaining.preemption),
            BudgetKind::None => None,
        };
        let mut exhausted = false;
        let mut left_at_0 = false;
        if let Some(left) = slot {
            match *left {
                Budget::Unlimited => {}
                Budget::Left(0) => exhausted = true,
                Budget::Left(n) => *left = Budget::Left(n - 1),
            }
            left_at_0 = *left == Budget::Left(0);
        }
        let relevant = matches!(expected, BudgetKind::Preemption | BudgetKind::System);
        if relevant && left_at_0 && !exhausted && self.specs[job].last_attempt_non_preemptible {
            self.avoiding_preemptible.insert(job.clone());
        }
        let expected_remaining = *remaining;
        if exhausted {
            self.exhausted.insert(job.clone());
        }
        if entry.remaining != expected_remaining {
            let detail = format!(
                "{} attempt {}: remaining {:?}, expected {expected_remaining:?}",
                entry.actor, entry.attempt, entry.remaining
            );
            self.violation("budget", detail);
        }
    }

    /// `one_charge_per_fault`: what a `node_lost` or `preempted` end should cost (`table`, or
    /// nothing as the share of a fault its job was charged for), and no second charge for one
    /// fault. A charge is matched to the earliest fault of the node its attempt lived through
    /// that the job was not charged for yet: an attempt stopped by a drain the operator then
    /// withdrew, and another placed there afterwards, can end with the node's death and be
    /// charged once each, for the drain and for the death.
    fn charge_per_fault(&mut self, job: &JobId, entry: &LedgerEntry, table: BudgetKind) -> BudgetKind {
        let node = NodeId::new(&entry.node);
        let latest = self.faults_of(&node);
        let key = (job.clone(), node.clone());
        if entry.budget == BudgetKind::None {
            // Free as another rank's share of a fault already charged, or a charge is missing.
            let shared = self.charged_epochs.contains_key(&key) || self.one_incident(job, &node, table);
            return if shared { BudgetKind::None } else { table };
        }
        let now = self.now;
        self.charged_losses.entry(job.clone()).or_default().push((node.clone(), table, now));
        // An attempt never seen running (started before a restart, say) gets the latest fault.
        let started = self.started_epoch.get(&(actor_key(&entry.actor), entry.attempt)).map_or(latest, |e| e + 1);
        let charged = self.charged_epochs.entry(key).or_default();
        let Some(epoch) = (started.min(latest)..=latest).find(|epoch| !charged.contains(epoch)) else {
            let detail =
                format!("{job} was charged again for one fault of {node}: {} ({})", entry.actor, entry.evidence);
            self.violation("one_charge_per_fault", detail);
            return table;
        };
        charged.insert(epoch);
        table
    }

    /// FC-2: the job was charged to `budget` for the loss of another node that settled within
    /// the incident bound of now.
    fn one_incident(&self, job: &JobId, node: &NodeId, budget: BudgetKind) -> bool {
        let charged = self.charged_losses.get(job).into_iter().flatten();
        let near = |at: &Instant| self.now.ms_since(*at) <= self.incident_bound_ms + self.held_since_ms(*at);
        charged.into_iter().any(|(lost, kind, at)| lost != node && *kind == budget && near(at))
    }

    /// How many faults `node` has had (its DEAD and DRAINING states, its agent's restarts).
    fn faults_of(&self, node: &NodeId) -> u64 {
        self.fault_epoch.get(node).copied().unwrap_or(0)
    }

    fn check_charge_explained(&mut self, actor: &ActorKey, entry: &LedgerEntry) {
        let node = NodeId::new(&entry.node);
        let preemptible = self.nodes.get(&node).is_some_and(|n| is_preemptible(&n.labels));
        let lost = self.lost_machines.contains(&node);
        let explained = match entry.cause {
            Cause::UserError => self.failed_by_fault.contains(&(actor.clone(), entry.attempt)),
            Cause::NodeLost => {
                lost || self.sick_machines.contains(&node)
                    || self.fenced_machines.contains(&node)
                    || self.crashed_agents.contains(&node)
            }
            Cause::Preempted => self.drained.contains(&node) || (lost && preemptible),
            _ => true,
        };
        if !explained {
            let detail = format!(
                "{} attempt {} was charged to {} as {} on {node} with no fault behind it: {}",
                entry.actor, entry.attempt, entry.budget, entry.cause, entry.evidence
            );
            self.violation("charge_explained", detail);
        }
    }

    fn job_ended(&mut self, job: &JobId, state: JobState, head: &Head) {
        let unaccounted: Vec<String> = self
            .unaccounted_stops
            .iter()
            .filter(|(((j, _), _), _)| j == job)
            .map(|(((j, a), attempt), since)| format!("{j}/{a} attempt {attempt} (stopped at {} ms)", since.as_ms()))
            .collect();
        if !unaccounted.is_empty() {
            let detail =
                format!("{job} is {state} but the head stopped {} with no ledger entry", unaccounted.join(", "));
            self.violation("stop_accounted", detail);
        }
        if head.holds_anything(job) {
            self.violation(
                "released_when_terminal",
                format!("{job} is {state} but the scheduler still holds its group"),
            );
        }
        if let Some((key, node)) = self.placed_on.iter().find(|((j, _), _)| j == job) {
            let detail = format!("{job} is {state} but {}/{} still holds a bundle on {node}", key.0, key.1);
            self.violation("released_when_terminal", detail);
        }
        if self.exhausted.contains(job) && state != JobState::Failed {
            self.violation("budget", format!("{job} exhausted a budget but ended {state}"));
        }
    }

    // ---- processes -------------------------------------------------------------------------

    fn check_one_live_attempt(&mut self, actor: &ActorKey) {
        let live: Vec<(u32, NodeId)> = self
            .processes
            .get(actor)
            .into_iter()
            .flatten()
            .filter(|(_, stale)| stale.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        if live.len() > 1 {
            let detail = format!("{}/{} has live processes of attempts {live:?}", actor.0, actor.1);
            self.violation("one_live_attempt", detail);
        }
    }

    /// Processes of ended attempts must be gone within the bound.
    pub fn check_stale_processes(&mut self, now: Instant) {
        self.now = now;
        let bound = self.stale_bound_ms;
        let late: Vec<String> = self
            .stale
            .iter()
            .take_while(|(since, ..)| now.ms_since(*since) > bound)
            .map(|(since, (job, actor), attempt, node)| {
                format!("{job}/{actor} attempt {attempt} on {node}, ended at {} ms", since.as_ms())
            })
            .collect();
        for detail in late {
            self.violation("stale_process_gone", format!("{detail}, still runs after {bound} ms"));
        }
    }

    /// Once faults have stopped long enough, every job must have ended.
    pub fn check_liveness(&mut self, now: Instant, head: &Head) {
        self.now = now;
        for job in head.job_views() {
            if !job.state.is_terminal() {
                let actors: Vec<String> = job.actors.iter().map(|a| format!("{}={}", a.name, a.state)).collect();
                let why = job.infeasible.as_ref().or(job.waiting.as_ref()).cloned().unwrap_or_default();
                self.violation("liveness", format!("{} is still {} ({}) {why}", job.id, job.state, actors.join(" ")));
            }
        }
    }
}

fn actor_key(actor: &ActorId) -> ActorKey {
    (actor.job.clone(), actor.index)
}

/// DESIGN §2, re-stated for the checker.
fn legal(from: ActorState, to: ActorState) -> bool {
    use ActorState::*;
    let terminal = matches!(from, TaskCompleted | Failed | Stopped);
    matches!(
        (from, to),
        (Scheduling, Running | Standby)
            | (Standby, Scheduling | TaskCompleted)
            | (Running, TaskCompleted | Failing)
            | (Failing, Scheduling | Failed)
    ) || (to == Stopped && !terminal)
}
