//! The three retry budgets of DESIGN §6, what charging one failure does to them, and backoff.
//! Which cause is charged to which budget is the cause table's business (`classify.rs`).

use crate::spec::{Backoff, RetryPolicy};
use rand_chacha::rand_core::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// One retry budget: retries left, or no limit. Job specs and JSON write it as a count, with
/// `-1` for unlimited; nothing else in ftdrive spells unlimited as a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Budget {
    Unlimited,
    Left(u32),
}

impl Budget {
    /// The JSON and job-spec spelling: a count, or `-1` for unlimited.
    pub fn as_i64(self) -> i64 {
        match self {
            Budget::Unlimited => -1,
            Budget::Left(n) => i64::from(n),
        }
    }

    /// Reads the JSON spelling; `None` below -1 or beyond `u32`.
    pub fn from_i64(n: i64) -> Option<Budget> {
        match n {
            -1 => Some(Budget::Unlimited),
            n => u32::try_from(n).ok().map(Budget::Left),
        }
    }

    pub fn is_exhausted(self) -> bool {
        self == Budget::Left(0)
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Budget::Unlimited => f.write_str("unlimited"),
            Budget::Left(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for Budget {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i64(self.as_i64())
    }
}

impl<'de> Deserialize<'de> for Budget {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(deserializer)?;
        Budget::from_i64(n)
            .ok_or_else(|| serde::de::Error::custom(format!("budget {n}: use a count >= 0, or -1 for unlimited")))
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

/// What is left of each budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remaining {
    pub user: Budget,
    pub system: Budget,
    pub preemption: Budget,
}

impl Remaining {
    /// What `kind` has left; `None` for `BudgetKind::None`, which is no budget.
    pub fn get(&self, kind: BudgetKind) -> Option<Budget> {
        match kind {
            BudgetKind::User => Some(self.user),
            BudgetKind::System => Some(self.system),
            BudgetKind::Preemption => Some(self.preemption),
            BudgetKind::None => None,
        }
    }

    fn get_mut(&mut self, kind: BudgetKind) -> Option<&mut Budget> {
        match kind {
            BudgetKind::User => Some(&mut self.user),
            BudgetKind::System => Some(&mut self.system),
            BudgetKind::Preemption => Some(&mut self.preemption),
            BudgetKind::None => None,
        }
    }
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
    /// Retries charged to the user budget so far: torchelastic's restart count, which
    /// `TORCHELASTIC_MAX_RESTARTS` (the user budget) bounds.
    #[serde(default)]
    user_charged: u32,
}

impl Budgets {
    pub fn new(policy: &RetryPolicy) -> Self {
        let remaining = Remaining { user: policy.user, system: policy.system, preemption: policy.preemption };
        Budgets { remaining, user_charged: 0 }
    }

    /// Retries charged to the user budget so far (exhausting ones not counted).
    pub fn user_charged(&self) -> u32 {
        self.user_charged
    }

    pub fn remaining(&self) -> Remaining {
        self.remaining
    }

    /// Takes one retry from `kind`. A budget at 0 is not decremented: it is exhausted.
    pub fn charge(&mut self, kind: BudgetKind) -> Charge {
        let Some(slot) = self.remaining.get_mut(kind) else { return Charge::Free };
        let charge = match *slot {
            Budget::Unlimited => Charge::Charged(kind),
            Budget::Left(0) => Charge::Exhausted(kind),
            Budget::Left(n) => {
                *slot = Budget::Left(n - 1);
                Charge::Charged(kind)
            }
        };
        if charge == Charge::Charged(BudgetKind::User) {
            self.user_charged = self.user_charged.saturating_add(1);
        }
        charge
    }

    /// What `kind` has left (`None` has no limit).
    pub fn left(&self, kind: BudgetKind) -> Budget {
        self.remaining.get(kind).unwrap_or(Budget::Unlimited)
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

    fn policy(user: Budget, system: Budget, preemption: Budget) -> RetryPolicy {
        RetryPolicy { user, system, preemption, ..RetryPolicy::default() }
    }

    #[test]
    fn charging_counts_down_then_exhausts() {
        let mut b = Budgets::new(&policy(Budget::Left(1), Budget::Left(0), Budget::Unlimited));
        assert_eq!(b.charge(BudgetKind::User), Charge::Charged(BudgetKind::User));
        assert_eq!(b.remaining().user, Budget::Left(0));
        assert_eq!(b.charge(BudgetKind::User), Charge::Exhausted(BudgetKind::User));
        assert_eq!(b.remaining().user, Budget::Left(0), "never below zero");
        assert_eq!(b.charge(BudgetKind::System), Charge::Exhausted(BudgetKind::System));
        for _ in 0..100 {
            assert_eq!(b.charge(BudgetKind::Preemption), Charge::Charged(BudgetKind::Preemption));
        }
        assert_eq!(b.remaining().preemption, Budget::Unlimited);
        assert_eq!(b.charge(BudgetKind::None), Charge::Free);
    }

    #[test]
    fn budgets_are_written_as_counts_with_minus_one_for_unlimited() {
        let r = Remaining { user: Budget::Left(2), system: Budget::Left(0), preemption: Budget::Unlimited };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(text, r#"{"user":2,"system":0,"preemption":-1}"#);
        assert_eq!(serde_json::from_str::<Remaining>(&text).unwrap(), r);
        assert!(serde_json::from_str::<Budget>("-2").unwrap_err().to_string().contains("-1 for unlimited"));
        assert_eq!((Budget::Unlimited.to_string(), Budget::Left(3).to_string()), ("unlimited".into(), "3".into()));
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
