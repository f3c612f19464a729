//! The rank checkers, `one_rank_each` and `cycle_well_formed` (DESIGN §5): what the head
//! announces about a job's cycles and the ranks its attempts start as.

use super::{actor_key, Checker};
use crate::driver::LedgerEntry;
use crate::ids::{ActorId, JobId};
use crate::spec::RestartMode;
use std::collections::BTreeSet;

impl Checker {
    /// `cycle_well_formed`, for gang jobs (an actor-mode job's world is `max_nodes` and its
    /// rank 0 may change hands, DESIGN §5). With `pack_by`, ranks are ordered by domain (the
    /// `pack_by` label of their nodes, nodes without it first), and survivors keep their order
    /// within a domain.
    pub(super) fn cycle_formed(&mut self, job: &JobId, cycle: u32, world_size: u32, ranks: Vec<u32>) {
        let spec = &self.specs[job];
        if spec.restart != RestartMode::Gang {
            return;
        }
        let (min, max, pack_by) = (spec.min_nodes, spec.max_nodes, spec.pack_by.clone());
        let domain = |a: &u32| -> Option<&String> {
            let key = pack_by.as_ref()?;
            let node = self.placed_on.get(&(job.clone(), *a))?;
            self.nodes.get(node)?.labels.get(key)
        };
        let mut wrong = Vec::new();
        let distinct: BTreeSet<u32> = ranks.iter().copied().collect();
        if distinct.len() != ranks.len() || ranks.len() != world_size as usize {
            wrong.push(format!("world_size {world_size} with ranks {ranks:?}"));
        }
        if !(min..=max).contains(&world_size) {
            wrong.push(format!("world_size {world_size} outside {min}..={max}"));
        }
        if let Some(a) = ranks.iter().find(|a| !self.placed_on.contains_key(&(job.clone(), **a))) {
            wrong.push(format!("{job}/{a} holds no bundle"));
        }
        let swapped = self.swapped.remove(job).unwrap_or_default();
        if let Some((last, before)) = self.last_cycle.get(job) {
            if cycle <= *last {
                wrong.push(format!("it follows cycle {last}"));
            }
            // Survivors: in both worlds, and neither promoted nor replaced by a spare between.
            let survivor = |a: &u32| !swapped.contains(a);
            let kept_then: Vec<u32> = before.iter().copied().filter(|a| distinct.contains(a) && survivor(a)).collect();
            let kept_now: Vec<u32> = ranks.iter().copied().filter(|a| before.contains(a) && survivor(a)).collect();
            let mut expected = kept_then.clone();
            expected.sort_by_key(domain); // stable: the survivors' order within each domain
            if expected != kept_now {
                wrong.push(format!("survivors reordered from {kept_then:?} to {kept_now:?}"));
            }
        }
        let domains: Vec<Option<&String>> = ranks.iter().map(domain).collect();
        if domains.windows(2).any(|pair| pair[0] > pair[1]) {
            let key = pack_by.as_deref().unwrap_or_default();
            wrong.push(format!("ranks {ranks:?} are not ordered by their `{key}` domains {domains:?}"));
        }
        if !wrong.is_empty() {
            self.violation("cycle_well_formed", format!("{job} cycle {cycle}: {}", wrong.join("; ")));
        }
        self.last_cycle.insert(job.clone(), (cycle, ranks));
    }

    /// `one_rank_each`: a started attempt takes its rank of its cycle.
    pub(super) fn rank_taken(&mut self, job: &JobId, actor: &ActorId, attempt: u32, cycle: u32, rank: u32) {
        let max = self.specs[job].max_nodes;
        if rank >= max {
            self.violation("one_rank_each", format!("{actor} attempt {attempt} started as rank {rank} of {max}"));
        }
        let taker = (actor_key(actor).1, attempt);
        if let Some((holder, held)) = self.live_ranks.insert((job.clone(), cycle, rank), taker) {
            if (holder, held) != taker {
                let detail = format!(
                    "{actor} attempt {attempt} started as rank {rank} of cycle {cycle}, held by {job}/{holder} attempt {held}"
                );
                self.violation("one_rank_each", detail);
            }
        }
    }

    /// `one_rank_each`: an ended attempt gives its rank back.
    pub(super) fn rank_freed(&mut self, job: &JobId, entry: &LedgerEntry) {
        let Some(rank) = entry.rank else { return };
        let slot = (job.clone(), entry.cycle, rank);
        if self.live_ranks.get(&slot) == Some(&(actor_key(&entry.actor).1, entry.attempt)) {
            self.live_ranks.remove(&slot);
        }
    }
}
