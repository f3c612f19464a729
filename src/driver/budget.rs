//! Failure causes, the three retry budgets, the cause table of DESIGN §6, and backoff.

use crate::spec::{Backoff, RetryPolicy};
use rand_chacha::rand_core::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Why an attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    Completed,
    NonRetryable,
    UserError,
    SpawnFailed,
    Preempted,
    NodeLost,
    Collateral,
    MembershipChange,
    Stopped,
}

impl Cause {
    /// The budget this cause is charged to by default (DESIGN §6).
    pub fn default_budget(self) -> BudgetKind {
        match self {
            Cause::UserError => BudgetKind::User,
            Cause::Preempted => BudgetKind::Preemption,
            Cause::NodeLost => BudgetKind::System,
            Cause::Completed
            | Cause::NonRetryable
            | Cause::SpawnFailed
            | Cause::Collateral
            | Cause::MembershipChange
            | Cause::Stopped => BudgetKind::None,
        }
    }

    /// Causes that fail the job at once, whatever the budgets say.
    pub fn is_fatal(self) -> bool {
        matches!(self, Cause::NonRetryable | Cause::SpawnFailed)
    }

    /// Causes where the actor itself failed (as opposed to being stopped by the driver).
    pub fn is_failure(self) -> bool {
        matches!(self, Cause::UserError | Cause::Preempted | Cause::NodeLost | Cause::NonRetryable | Cause::SpawnFailed)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = serde_json::to_value(self).expect("cause serializes");
        f.write_str(text.as_str().expect("cause is a string"))
    }
}

/// A retry budget, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetKind {
    User,
    System,
    Preemption,
    None,
}

impl fmt::Display for BudgetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BudgetKind::User => "user",
            BudgetKind::System => "system",
            BudgetKind::Preemption => "preemption",
            BudgetKind::None => "none",
        })
    }
}

/// What is left of each budget; `-1` means unlimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remaining {
    pub user: i64,
    pub system: i64,
    pub preemption: i64,
}

/// The outcome of charging one failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Charge {
    /// The cause costs nothing.
    Free,
    /// One retry was taken from this budget (or it is unlimited).
    Charged(BudgetKind),
    /// This budget had 0 left: the job fails.
    Exhausted(BudgetKind),
}

impl Charge {
    pub fn budget(self) -> BudgetKind {
        match self {
            Charge::Free => BudgetKind::None,
            Charge::Charged(b) | Charge::Exhausted(b) => b,
        }
    }
}

/// The job-wide budgets (one ledger per job, not per agent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budgets {
    remaining: Remaining,
    single_budget: bool,
}

impl Budgets {
    pub fn new(policy: &RetryPolicy) -> Self {
        Budgets {
            remaining: Remaining { user: policy.user, system: policy.system, preemption: policy.preemption },
            single_budget: policy.single_budget,
        }
    }

    /// Budgets with what an earlier run left of them.
    pub fn resume(policy: &RetryPolicy, remaining: Remaining) -> Self {
        Budgets { remaining, single_budget: policy.single_budget }
    }

    pub fn remaining(&self) -> Remaining {
        self.remaining
    }

    /// The budget `cause` is charged to under this job's policy.
    pub fn budget_for(&self, cause: Cause) -> BudgetKind {
        match cause.default_budget() {
            BudgetKind::None => BudgetKind::None,
            _ if self.single_budget => BudgetKind::User,
            kind => kind,
        }
    }

    /// Charges one failure of `cause`. A budget at 0 is not decremented: it is exhausted.
    pub fn charge(&mut self, cause: Cause) -> Charge {
        let kind = self.budget_for(cause);
        let slot = match kind {
            BudgetKind::None => return Charge::Free,
            BudgetKind::User => &mut self.remaining.user,
            BudgetKind::System => &mut self.remaining.system,
            BudgetKind::Preemption => &mut self.remaining.preemption,
        };
        match *slot {
            -1 => Charge::Charged(kind),
            0 => Charge::Exhausted(kind),
            n => {
                assert!(n > 0, "budget {kind} went below zero ({n})");
                *slot = n - 1;
                Charge::Charged(kind)
            }
        }
    }

    /// How many retries `kind` has left (`-1` unlimited).
    pub fn left(&self, kind: BudgetKind) -> i64 {
        match kind {
            BudgetKind::User => self.remaining.user,
            BudgetKind::System => self.remaining.system,
            BudgetKind::Preemption => self.remaining.preemption,
            BudgetKind::None => -1,
        }
    }
}

/// Delay before the `failures`-th retry: exponential from `initial` to `max`, with "equal
/// jitter" (half fixed, half drawn from the seeded generator) so restarts do not synchronise.
pub fn backoff_ms(policy: &Backoff, failures: u32, rng: &mut ChaCha8Rng) -> u64 {
    if failures == 0 || policy.max == 0 {
        return 0;
    }
    let exponent = (failures - 1).min(32);
    let base = policy.initial.saturating_mul(1u64 << exponent).min(policy.max);
    let half = base / 2;
    half + rng.next_u64() % (base - half + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::SeedableRng;

    fn policy(user: i64, system: i64, preemption: i64, single: bool) -> RetryPolicy {
        RetryPolicy { user, system, preemption, single_budget: single, ..RetryPolicy::default() }
    }

    #[test]
    fn cause_table() {
        let b = Budgets::new(&RetryPolicy::default());
        assert_eq!(b.budget_for(Cause::UserError), BudgetKind::User);
        assert_eq!(b.budget_for(Cause::Preempted), BudgetKind::Preemption);
        assert_eq!(b.budget_for(Cause::NodeLost), BudgetKind::System);
        for free in [
            Cause::Completed,
            Cause::Collateral,
            Cause::MembershipChange,
            Cause::Stopped,
            Cause::NonRetryable,
            Cause::SpawnFailed,
        ] {
            assert_eq!(b.budget_for(free), BudgetKind::None, "{free}");
        }
    }

    #[test]
    fn charging_counts_down_then_exhausts() {
        let mut b = Budgets::new(&policy(1, 0, -1, false));
        assert_eq!(b.charge(Cause::UserError), Charge::Charged(BudgetKind::User));
        assert_eq!(b.remaining().user, 0);
        assert_eq!(b.charge(Cause::UserError), Charge::Exhausted(BudgetKind::User));
        assert_eq!(b.remaining().user, 0, "never below zero");
        assert_eq!(b.charge(Cause::NodeLost), Charge::Exhausted(BudgetKind::System));
        for _ in 0..100 {
            assert_eq!(b.charge(Cause::Preempted), Charge::Charged(BudgetKind::Preemption));
        }
        assert_eq!(b.remaining().preemption, -1);
        assert_eq!(b.charge(Cause::Collateral), Charge::Free);
    }

    #[test]
    fn single_budget_charges_user() {
        let mut b = Budgets::new(&policy(2, 5, 5, true));
        assert_eq!(b.charge(Cause::NodeLost), Charge::Charged(BudgetKind::User));
        assert_eq!(b.charge(Cause::Preempted), Charge::Charged(BudgetKind::User));
        assert_eq!(b.charge(Cause::Preempted), Charge::Exhausted(BudgetKind::User));
        assert_eq!(b.remaining(), Remaining { user: 0, system: 5, preemption: 5 });
    }

    #[test]
    fn backoff_grows_caps_and_is_seeded() {
        let p = Backoff { initial: 1000, max: 30_000 };
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let delays: Vec<u64> = (1..=8).map(|n| backoff_ms(&p, n, &mut rng)).collect();
        for (n, d) in delays.iter().enumerate() {
            let base = (1000u64 << n).min(30_000);
            assert!(*d >= base / 2 && *d <= base, "retry {} waited {d}", n + 1);
        }
        let mut again = ChaCha8Rng::seed_from_u64(1);
        assert_eq!(delays, (1..=8).map(|n| backoff_ms(&p, n, &mut again)).collect::<Vec<_>>());
        assert_eq!(backoff_ms(&Backoff { initial: 0, max: 0 }, 3, &mut rng), 0);
    }
}
