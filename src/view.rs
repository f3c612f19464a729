//! JSON views shared by `ftdrive status`, `ftdrive nodes` and the simulator's summary
//! (DESIGN §7, §8), and how they are built from the core's state. Field names here are a
//! contract: tests and users read them.

use crate::driver::{ActorState, Bundle, CycleStart, Driver, JobState, LedgerEntry, Master, Remaining, Role, Timer};
use crate::ids::{ActorId, ActorIx};
use crate::resources::{Devices, Labels, Resources};
use crate::scheduler::{BundleState, NodeIx, NodeState, PgId, PgState, Scheduler};
use crate::spec::{JobSpec, Strategy};
use crate::time::Instant;
use serde::{Deserialize, Serialize};

fn one() -> u32 {
    1
}

/// One job as `status JOB --output json` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobView {
    pub id: String,
    pub name: String,
    pub state: JobState,
    /// Cycles formed so far (the current cycle's number).
    pub cycles: u32,
    pub min_nodes: u32,
    pub max_nodes: u32,
    /// Workers each actor runs (so WORLD_SIZE = nodes · `nproc_per_node`).
    #[serde(default = "one")]
    pub nproc_per_node: u32,
    /// The spec's `priority`: pending gangs, spares and growth are placed higher first.
    #[serde(default)]
    pub priority: i32,
    pub submit_ms: u64,
    /// Why the job failed or stopped, when it did.
    pub message: Option<String>,
    /// Why its bundles cannot be placed anywhere, while that is so.
    pub infeasible: Option<String>,
    /// Why a job the cluster could hold still waits: its gang (or a replacement) short of room
    /// now, who holds that room, or the work ahead it is held for.
    #[serde(default)]
    pub waiting: Option<String>,
    pub remaining: Remaining,
    pub actors: Vec<ActorView>,
    pub ledger: Vec<LedgerEntry>,
    /// Ledger entries a list left out, the oldest (`LIST_LEDGER_ENTRIES`); 0 in one job's view,
    /// which has them all.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ledger_omitted: u64,
    pub placement_groups: Vec<PgView>,
    /// When the recent cycles formed (for a timeline's cycle boundaries).
    #[serde(default)]
    pub cycle_starts: Vec<CycleStart>,
    /// While the job backs off before its next cycle after a charged failure
    /// (`retries.backoff_ms`, gang restarts): when that cycle may form at the earliest, on
    /// `submit_ms`'s clock. Clients say "in N s" against their own clock, as `kubectl` gives
    /// an object's age; a time gone by means the backoff is over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_at_ms: Option<u64>,
    /// While a job with a `run_timeout_ms` runs: when it will be stopped and fail, on
    /// `submit_ms`'s clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_deadline_ms: Option<u64>,
    /// The current (or last) cycle's rendezvous: rank 0's node, `MASTER_ADDR`, `MASTER_PORT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendezvous: Option<Master>,
    /// The spec as accepted, every default filled in: in one job's view (`GET /v1/jobs/{id}`,
    /// `ftdrive status JOB --output json`), as `kubectl get -o yaml` shows a pod's spec; not in
    /// lists or event snapshots, which it would swell by its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<JobSpec>,
}

/// The most ledger entries a job carries in a list (the newest): a job retried without bound
/// (`"user": -1`) has up to 100,000, and a list carried them all in every poll (1.2 MB for one
/// job after 4,400 attempts). One job's view has them all.
pub const LIST_LEDGER_ENTRIES: usize = 100;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActorView {
    pub name: ActorId,
    pub state: ActorState,
    pub node: Option<String>,
    pub rank: Option<u32>,
    pub attempt: u32,
    pub role: Role,
    /// When its live attempt started, while it has one.
    #[serde(default)]
    pub started_ms: Option<u64>,
    /// RUNNING, but its agent has not confirmed the start yet: the actor turns RUNNING when
    /// its start is sent, and its process may not exist for a while (a slow agent, a start
    /// re-sent after a lost message), as a pod's containers are still being created.
    #[serde(default)]
    pub starting: bool,
    /// While it is STANDBY (a hot spare waiting with its bundle): since when.
    #[serde(default)]
    pub standby_since_ms: Option<u64>,
    /// The GPU devices its bundle holds (`CUDA_VISIBLE_DEVICES`).
    #[serde(default)]
    pub devices: Devices,
    /// While it backs off before its next attempt after a charged failure (`restart:
    /// "actor"`): when that attempt may start at the earliest, as the job's `restart_at_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_at_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgView {
    pub id: String,
    pub state: PgState,
    pub strategy: Strategy,
    pub bundle: Resources,
    pub bundles: Vec<BundleView>,
}

/// Where one bundle of a placement group stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BundleStatus {
    /// Not asked for.
    Idle,
    /// Waiting in the scheduler's queue.
    Pending,
    Placed,
    /// Lost with its node; not re-placed yet.
    Lost,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundleView {
    pub index: u32,
    pub status: BundleStatus,
    pub node: Option<String>,
    #[serde(default)]
    pub devices: Devices,
    /// The port it holds on its node's machine, `MASTER_PORT` while its actor is rank 0.
    #[serde(default)]
    pub port: Option<u16>,
}

/// One node as `nodes --output json` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    pub name: String,
    pub state: NodeState,
    pub resources: Resources,
    pub labels: Labels,
    pub allocated: Resources,
    pub addr: String,
    /// Its GPU devices, and those some bundle holds.
    #[serde(default)]
    pub devices: Devices,
    #[serde(default)]
    pub devices_held: Devices,
    /// The operator drained it (`ftdrive drain`): it takes no new work until `ftdrive
    /// undrain`, even once DEAD and back.
    #[serde(default)]
    pub cordoned: bool,
    /// Its agent announced that the machine is going away (SIGTERM, a cloud's notice).
    #[serde(default)]
    pub leaving: bool,
    /// What keeps its agent from starting work (its state dir takes no write): it keeps what
    /// runs there and is given nothing new until the agent can again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The head has not heard from this node as it should (DESIGN §3 suspect nodes): what it
    /// knows, so that an operator sees a node about to be declared DEAD before it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspect: Option<Suspect>,
    /// Rendezvous ports it may still take (PS-2), one per bundle: a node with none takes no
    /// bundle, however free its resources. Absent from a head that did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports_left: Option<u32>,
    /// Where the node's agent serves its Prometheus metrics (the runtime knows; the core does
    /// not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_url: Option<String>,
}

/// A suspect node (DESIGN §3): its agent's connection dropped or a heartbeat was missed.
/// Capacity its bundles could be re-placed on is held for them until it is heard from again
/// (nothing moved) or declared DEAD (they are re-placed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suspect {
    /// Its agent's connection dropped (rather than a heartbeat going missing on a live one).
    pub link_lost: bool,
    /// How long since the head last heard from it.
    pub silent_ms: u64,
    /// How long until it is declared DEAD unless it is heard from first (for a held node, at
    /// least this long: the count starts when any node is heard from).
    pub dead_in_ms: u64,
    /// Every node went silent at once, so none is declared DEAD until one is heard from: the
    /// head's own network is the likelier cause (FD-1 in `head/liveness.rs`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
}

/// Who holds, or last held, one global rank of a job (torchrun's `RANK`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankHolder {
    /// The actor's index in the job.
    pub actor: u32,
    pub attempt: u32,
    /// With several workers per actor, the worker's `LOCAL_RANK`.
    pub local_rank: Option<u32>,
}

impl JobView {
    /// The attempt that holds global rank `rank` in the latest cycle that had it: a live one
    /// (its rank is the actor's now) or an ended one (its ledger entry's). Ranks move between
    /// actors as cycles re-form, so rank 1's output may be another actor's in each cycle.
    pub fn rank_holder(&self, rank: u32) -> Option<RankHolder> {
        let nproc = self.nproc_per_node.max(1);
        let node_rank = rank / nproc;
        let ended = self.ledger.iter().filter(|e| e.rank == Some(node_rank)).map(|e| (e.cycle, &e.actor, e.attempt));
        let ledgered = |a: &ActorView| self.ledger.iter().any(|e| e.actor == a.name && e.attempt == a.attempt);
        let live = self
            .actors
            .iter()
            .filter(|a| a.rank == Some(node_rank) && a.attempt > 0 && !ledgered(a))
            .map(|a| (self.cycles, &a.name, a.attempt));
        let (_, name, attempt) = ended.chain(live).max_by_key(|(cycle, _, attempt)| (*cycle, *attempt))?;
        let local_rank = (nproc > 1).then_some(rank % nproc);
        Some(RankHolder { actor: name.index, attempt, local_rank })
    }

    /// Why `rank` names no global rank of this job, if it names none (`spec::no_such_rank`).
    pub fn no_such_rank(&self, rank: u32) -> Option<String> {
        crate::spec::no_such_rank(&self.id, rank, self.max_nodes, self.nproc_per_node)
    }

    /// Why no attempt holds `rank` (one `rank_holder` finds none for): the job has not grown to
    /// it yet, or never did.
    pub fn rank_not_held(&self, rank: u32) -> String {
        match self.state.is_terminal() {
            true => format!("no attempt of {} held rank {rank}; the job ended {}", self.id, self.state),
            false => format!("no attempt of {} has held rank {rank} yet (the job is {})", self.id, self.state),
        }
    }

    /// Why `local_rank` names no worker of this job's actors, if it names none (the CLI and the
    /// log API say it alike).
    pub fn no_such_worker(&self, local_rank: u32) -> Option<String> {
        (local_rank >= self.nproc_per_node).then(|| {
            let n = self.nproc_per_node;
            format!("{} runs {n} worker(s) per actor, local ranks 0 to {}", self.id, n.saturating_sub(1))
        })
    }
}

/// A job as its driver and the scheduler see it; `waiting` is why it waits, when it does.
/// A job's view, with its newest `ledger_kept` ledger entries (all: `usize::MAX`).
pub fn job_view(d: &Driver, scheduler: &Scheduler, pg: PgId, waiting: Option<String>, ledger_kept: usize) -> JobView {
    let ledger_omitted = d.ledger().len().saturating_sub(ledger_kept);
    // An ended job restarts nothing and runs out of no time, whatever timer it was left with.
    let pending = |timer| d.timers().get(timer).filter(|_| !d.state().is_terminal()).map(Instant::as_ms);
    let actors = d
        .actors()
        .iter()
        .enumerate()
        .map(|(ix, a)| ActorView {
            name: a.name.clone(),
            state: a.state,
            node: a
                .bundle
                .node()
                .map(|n| n.name.to_string())
                .or_else(|| a.run.as_ref().map(|r| r.node.to_string()))
                // An ended actor shows where it last was (a spare that stood by: where it stood
                // by, not where its last attempt ran); a waiting one shows none, as a pending pod
                // or job does: its last node (perhaps DEAD) is not where it will run.
                .or_else(|| match a.state.is_terminal() {
                    true => a
                        .last_node
                        .as_ref()
                        .map(|n| n.to_string())
                        .or_else(|| d.ledger().iter().rev().find(|e| e.actor == a.name).map(|e| e.node.clone())),
                    false => None,
                }),
            rank: a.rank,
            attempt: a.attempts,
            role: a.role,
            started_ms: a.run.as_ref().map(|r| r.started.as_ms()),
            starting: a.is_starting(),
            standby_since_ms: a.standby_since.map(|t| t.as_ms()),
            devices: match &a.bundle {
                Bundle::Placed { devices, .. } => *devices,
                _ => a.run.as_ref().map_or(Devices::NONE, |r| r.devices),
            },
            restart_at_ms: pending(Timer::ActorBackoff(ix as ActorIx)),
        })
        .collect();
    JobView {
        id: d.id().to_string(),
        name: d.spec().name.clone(),
        state: d.state(),
        cycles: d.cycle(),
        min_nodes: d.spec().min_nodes,
        max_nodes: d.spec().max_nodes,
        nproc_per_node: d.spec().nproc_per_node,
        priority: d.spec().priority,
        submit_ms: d.submitted().as_ms(),
        message: d.message().map(str::to_string),
        // The scheduler's reason is current (its count follows nodes joining without an event
        // each); once the group is gone, the last one the driver heard.
        infeasible: scheduler.pg(pg).map_or(d.infeasible(), |p| p.infeasible.as_deref()).map(str::to_string),
        waiting,
        remaining: d.remaining(),
        actors,
        ledger: d.ledger()[ledger_omitted..].to_vec(),
        ledger_omitted: ledger_omitted as u64,
        placement_groups: vec![pg_view(d, scheduler, pg)],
        cycle_starts: d.cycle_starts().to_vec(),
        restart_at_ms: pending(Timer::CycleBackoff),
        run_deadline_ms: pending(Timer::RunDeadline),
        rendezvous: d.master().cloned(),
        spec: None,
    }
}

fn pg_view(d: &Driver, scheduler: &Scheduler, id: PgId) -> PgView {
    let spec = d.spec();
    let pg = scheduler.pg(id);
    let bundles = (0..spec.actor_count())
        .map(|index| {
            let unplaced = |status| BundleView { index, status, node: None, devices: Devices::NONE, port: None };
            match pg.map(|pg| (pg.bundles[index as usize], pg.lost.contains(&index))) {
                Some((BundleState::Placed { node, devices, port }, _)) => BundleView {
                    index,
                    status: BundleStatus::Placed,
                    node: Some(scheduler.node(node).name.to_string()),
                    devices,
                    port: Some(port),
                },
                Some((_, true)) => unplaced(BundleStatus::Lost),
                Some((BundleState::Idle, false)) | None => unplaced(BundleStatus::Idle),
                Some(_) => unplaced(BundleStatus::Pending),
            }
        })
        .collect();
    PgView {
        id: format!("{}/pg", d.id()),
        state: pg.map_or(PgState::Removed, |pg| pg.state()),
        strategy: spec.strategy,
        bundle: spec.bundle.clone(),
        bundles,
    }
}

/// What the head's failure detector knows of a node, for its view.
pub struct NodeMarks {
    /// Where its agent said peers reach it.
    pub addr: String,
    pub cordoned: bool,
    pub leaving: bool,
    pub suspect: Option<Suspect>,
}

/// One node as the scheduler sees it, with the head's marks on it.
pub fn node_view(scheduler: &Scheduler, ix: NodeIx, marks: NodeMarks) -> NodeView {
    let node = scheduler.node(ix);
    let NodeMarks { addr, cordoned, leaving, suspect } = marks;
    NodeView {
        name: node.name.to_string(),
        state: node.state,
        resources: node.resources.clone(),
        labels: node.labels.clone(),
        allocated: scheduler.allocated(ix),
        addr,
        devices: node.devices,
        devices_held: node.devices.without(node.free_devices()),
        cordoned,
        leaving,
        problem: node.problem.clone(),
        suspect,
        ports_left: Some(node.port_room()),
        metrics_url: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Cycle 1 ran actors 0, 1, 2 as ranks 0, 1, 2; actor 1's node was lost, and cycle 2 runs
    /// the survivors first (actor 2 is rank 1 now) and actor 1 last.
    fn regrown(nproc: u32) -> JobView {
        let ended = |actor: &str, rank: u32| {
            json!({"actor": actor, "rank": rank, "attempt": 1, "cycle": 1, "node": "n", "start_ms": 0,
                   "end_ms": 1, "exit_code": null, "signal": 9, "cause": "collateral", "evidence": "",
                   "budget": "none", "remaining": {"user": 0, "system": 0, "preemption": 0}})
        };
        let live = |name: &str, rank: u32| json!({"name": name, "state": "RUNNING", "node": "n", "rank": rank, "attempt": 2, "role": "active"});
        serde_json::from_value(json!({
            "id": "j1", "name": "t", "state": "RUNNING", "cycles": 2, "min_nodes": 3, "max_nodes": 3,
            "nproc_per_node": nproc, "submit_ms": 0, "message": null, "infeasible": null,
            "remaining": {"user": 0, "system": 0, "preemption": 0}, "placement_groups": [],
            "actors": [live("j1/0", 0), live("j1/1", 2), live("j1/2", 1)],
            "ledger": [ended("j1/0", 0), ended("j1/1", 1), ended("j1/2", 2)]
        }))
        .expect("a job view")
    }

    #[test]
    fn a_rank_is_held_by_whoever_has_it_in_the_latest_cycle() {
        let view = regrown(1);
        let holder = |rank| view.rank_holder(rank).map(|h| (h.actor, h.attempt, h.local_rank));
        assert_eq!(holder(1), Some((2, 2, None)), "rank 1 is actor 2's now");
        assert_eq!(holder(2), Some((1, 2, None)));
        assert_eq!(holder(3), None, "no attempt had rank 3");
        let mut ended = view.clone();
        ended.actors[2].state = ActorState::TaskCompleted;
        let entry = LedgerEntry { rank: Some(1), attempt: 2, cycle: 2, ..view.ledger[2].clone() };
        ended.ledger.push(entry);
        assert_eq!(ended.rank_holder(1).map(|h| (h.actor, h.attempt)), Some((2, 2)), "ended, from the ledger");
    }

    #[test]
    fn with_several_workers_a_rank_names_a_node_rank_and_a_local_rank() {
        let view = regrown(8);
        let holder = view.rank_holder(9).expect("node rank 1, local rank 1");
        assert_eq!((holder.actor, holder.attempt, holder.local_rank), (2, 2, Some(1)));
        assert_eq!(view.rank_holder(24), None, "node rank 3 never ran");
    }

    #[test]
    fn a_rank_beyond_the_largest_job_is_named_as_such() {
        let view = regrown(8);
        assert_eq!(view.no_such_rank(23), None, "3 nodes of 8 workers: ranks 0 to 23");
        assert_eq!(view.no_such_rank(24).as_deref(), Some("j1 has ranks 0 to 23"));
        assert!(view.rank_not_held(24).contains("has held rank 24 yet (the job is RUNNING)"));
    }
}
