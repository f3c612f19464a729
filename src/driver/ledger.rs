//! The attempt ledger: one entry per ended attempt, saying why it ended and what it cost.

use super::budget::{BudgetKind, Remaining};
use super::classify::Cause;
use crate::ids::ActorId;
use serde::{Deserialize, Serialize};

/// One ended attempt (DESIGN §6). `remaining` is every budget after this entry's charge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    pub actor: ActorId,
    pub rank: Option<u32>,
    pub attempt: u32,
    pub cycle: u32,
    pub node: String,
    pub start_ms: u64,
    pub end_ms: u64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub cause: Cause,
    /// A sentence saying what was observed: "node n2 missed heartbeats for 3000 ms".
    pub evidence: String,
    pub budget: BudgetKind,
    pub remaining: Remaining,
}
