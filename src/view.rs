//! JSON views shared by `ftdrive status`, `ftdrive nodes` and the simulator's summary
//! (DESIGN §7, §8). Field names here are a contract: tests and users read them.

use crate::driver::{ActorState, JobState, LedgerEntry, Remaining, Role};
use crate::resources::{Labels, Resources};
use crate::scheduler::{NodeState, PgState};
use crate::spec::Strategy;
use serde::{Deserialize, Serialize};

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
    pub submit_ms: u64,
    /// Why the job failed or stopped, when it did.
    pub message: Option<String>,
    /// Why its bundles cannot be placed anywhere, while that is so.
    pub infeasible: Option<String>,
    pub remaining: Remaining,
    pub actors: Vec<ActorView>,
    pub ledger: Vec<LedgerEntry>,
    pub placement_groups: Vec<PgView>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActorView {
    pub name: String,
    pub state: ActorState,
    pub node: Option<String>,
    pub rank: Option<u32>,
    pub attempt: u32,
    pub role: Role,
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
}
