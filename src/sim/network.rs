//! The simulated network between head and agents: seeded delay, drop and duplication.
//! Reordering follows from independent random delays.

use super::scenario::NetworkSpec;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const PPM: u64 = 1_000_000;

/// What happens to one message: the delay of each copy that arrives (none if dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fate {
    pub first: Option<u64>,
    pub second: Option<u64>,
}

#[derive(Clone, Debug)]
pub struct Network {
    spec: NetworkSpec,
    rng: ChaCha8Rng,
    pub sent: u64,
    pub dropped: u64,
    pub duplicated: u64,
}

impl Network {
    pub fn new(spec: NetworkSpec, seed: u64) -> Self {
        Network { spec, rng: ChaCha8Rng::seed_from_u64(seed), sent: 0, dropped: 0, duplicated: 0 }
    }

    /// The longest a message takes.
    pub fn max_delay_ms(&self) -> u64 {
        self.spec.max_delay_ms
    }

    pub fn set_spec(&mut self, spec: NetworkSpec) {
        self.spec = spec;
    }

    /// Decides one message's fate. A perfect network draws no random numbers.
    pub fn fate(&mut self) -> Fate {
        self.sent += 1;
        if self.spec.drop_ppm > 0 && self.rng.next_u64() % PPM < u64::from(self.spec.drop_ppm) {
            self.dropped += 1;
            return Fate { first: None, second: None };
        }
        let first = Some(self.delay());
        let duplicate = self.spec.duplicate_ppm > 0 && self.rng.next_u64() % PPM < u64::from(self.spec.duplicate_ppm);
        if duplicate {
            self.duplicated += 1;
        }
        Fate { first, second: duplicate.then(|| self.delay()) }
    }

    fn delay(&mut self) -> u64 {
        let (min, max) = (self.spec.min_delay_ms, self.spec.max_delay_ms);
        if min == max {
            min
        } else {
            min + self.rng.next_u64() % (max - min + 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_and_duplicates_at_about_the_configured_rate() {
        let spec = NetworkSpec { min_delay_ms: 2, max_delay_ms: 9, drop_ppm: 100_000, duplicate_ppm: 50_000 };
        let mut net = Network::new(spec, 3);
        let fates: Vec<Fate> = (0..20_000).map(|_| net.fate()).collect();
        assert!((1_700..2_300).contains(&net.dropped), "dropped {}", net.dropped);
        assert!((700..1_100).contains(&net.duplicated), "duplicated {}", net.duplicated);
        assert!(fates.iter().flat_map(|f| [f.first, f.second]).flatten().all(|d| (2..=9).contains(&d)));
        let mut again = Network::new(spec, 3);
        assert_eq!(fates, (0..20_000).map(|_| again.fate()).collect::<Vec<_>>(), "seeded");
    }
}
