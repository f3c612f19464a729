//! The placement checkers, `placement_fits_spec` and `last_attempt_off_preemptible`
//! (DESIGN §3, §6): each bundle placed, or handed to a rank, against the job's spec.

use super::{ActorKey, Checker};
use crate::ids::{JobId, NodeId};
use crate::resources::is_preemptible;
use crate::spec::Strategy;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;

impl Checker {
    /// `placement_fits_spec`, for one placement: the node's labels and the job's other bundles
    /// (before this one is recorded).
    pub(super) fn check_fits_spec(&mut self, job: &JobId, key: &ActorKey, node: &NodeId) {
        let Some(n) = self.nodes.get(node) else { return }; // `no_overcommit` reports it
        let spec = &self.specs[job];
        let mut wrong = Vec::new();
        if let Some((k, v)) = spec.node_selector.iter().find(|(k, v)| n.labels.get(*k) != Some(*v)) {
            wrong.push(format!("node_selector wants {k}={v}"));
        }
        if let Some(k) = spec.pack_by.as_ref().filter(|k| !n.labels.contains_key(*k)) {
            wrong.push(format!("pack_by needs the label `{k}`"));
        }
        let mut others = self.placed_on.range((job.clone(), 0)..=(job.clone(), u32::MAX)).filter(|(k, _)| *k != key);
        let strategy_broken = match spec.strategy {
            Strategy::StrictSpread => others.any(|(_, on)| on == node),
            Strategy::StrictPack => others.any(|(_, on)| on != node),
            Strategy::Spread | Strategy::Pack => false,
        };
        if strategy_broken {
            wrong.push(format!("{:?} does not allow it beside the job's other bundles", spec.strategy));
        }
        if !wrong.is_empty() {
            let detail = format!("{}/{} placed on {node}: {}", key.0, key.1, wrong.join("; "));
            self.violation("placement_fits_spec", detail);
        }
    }

    /// `placement_fits_spec`: a `pack_by` job's required gang, placed first, in one label domain
    /// (spares and growth placed in the same step may go elsewhere).
    pub(super) fn check_one_domain(&mut self, first: &BTreeMap<JobId, BTreeSet<u32>>) {
        for (job, bundles) in first {
            let Some(key) = self.specs[job].pack_by.clone() else { continue };
            let required = self.specs[job].min_nodes;
            let domains: BTreeSet<Option<&String>> = bundles
                .iter()
                .filter(|b| **b < required)
                .filter_map(|b| self.placed_on.get(&(job.clone(), *b)))
                .map(|node| self.nodes.get(node).and_then(|n| n.labels.get(&key)))
                .collect();
            if domains.len() > 1 {
                let detail =
                    format!("{job}'s required gang was placed across {} domains of pack_by `{key}`", domains.len());
                self.violation("placement_fits_spec", detail);
            }
        }
    }

    /// `last_attempt_off_preemptible`: a bundle placed, or an attempt started, on a preemptible
    /// node after the job had to keep off them.
    pub(super) fn check_off_preemptible(&mut self, job: &JobId, key: &ActorKey, node: &NodeId, how: &dyn Display) {
        let preemptible = self.nodes.get(node).is_some_and(|n| is_preemptible(&n.labels));
        if preemptible && self.avoiding_preemptible.contains(job) {
            let detail = format!(
                "{}/{} {how} on {node}, which is preemptible, after last_attempt_non_preemptible kept {job} off such nodes",
                key.0, key.1
            );
            self.violation("last_attempt_off_preemptible", detail);
        }
    }
}
