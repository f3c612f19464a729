//! The attempts the head believes are live on each node, kept to reconcile with what agents
//! report in their heartbeats: starts the agent has not confirmed are sent again, stops are
//! repeated while the process lingers, and processes the head does not know are stopped.

use crate::ids::{ActorIx, JobId};
use crate::protocol::{AttemptKey, StartSpec, ToAgent};
use crate::scheduler::NodeIx;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq, Eq)]
struct LiveAttempt {
    spec: Arc<StartSpec>,
    acked: bool,
    stop_grace_ms: Option<u64>,
    /// Known from the durable state of an earlier run of the head, not started by this one.
    restored: bool,
}

#[derive(Clone, Debug, Default)]
pub struct AttemptIndex {
    by_node: BTreeMap<NodeIx, BTreeMap<AttemptKey, LiveAttempt>>,
    /// Where each live attempt runs: a report about it from any other node is refused.
    node_of: BTreeMap<AttemptKey, NodeIx>,
}

impl AttemptIndex {
    pub fn started(&mut self, node: NodeIx, spec: Arc<StartSpec>) {
        let key = spec.key.clone();
        self.node_of.insert(key.clone(), node);
        let previous = self
            .by_node
            .entry(node)
            .or_default()
            .insert(key, LiveAttempt { spec, acked: false, stop_grace_ms: None, restored: false });
        assert!(previous.is_none(), "attempt started twice");
    }

    /// An attempt an earlier run of the head started, as its durable state has it.
    pub fn restored(&mut self, node: NodeIx, spec: StartSpec) {
        let key = spec.key.clone();
        self.started(node, Arc::new(spec));
        let live = self.by_node.get_mut(&node).and_then(|m| m.get_mut(&key)).expect("just started");
        live.restored = true;
    }

    /// Whether an attempt of `job`'s actor `actor` is live on `node`.
    pub fn runs_actor(&self, node: NodeIx, job: &JobId, actor: ActorIx) -> bool {
        self.by_node.get(&node).is_some_and(|m| m.keys().any(|k| k.job == *job && k.actor == actor))
    }

    /// Attempts on `node` whose start is not confirmed yet that the agent lists as running.
    pub fn unconfirmed_among(&self, node: NodeIx, running: &[AttemptKey]) -> Vec<AttemptKey> {
        let Some(live) = self.by_node.get(&node) else { return Vec::new() };
        running.iter().filter(|key| live.get(*key).is_some_and(|a| !a.acked)).cloned().collect()
    }

    /// Whether `key` is live on a node other than `node` (so `node` may not report on it).
    pub fn runs_elsewhere(&self, node: NodeIx, key: &AttemptKey) -> bool {
        self.node_of.get(key).is_some_and(|owner| *owner != node)
    }

    /// Whether `key` is live on `node` and its start was confirmed there.
    pub fn is_acked(&self, node: NodeIx, key: &AttemptKey) -> bool {
        self.by_node.get(&node).and_then(|m| m.get(key)).is_some_and(|a| a.acked)
    }

    pub fn acked(&mut self, node: NodeIx, key: &AttemptKey) {
        if let Some(live) = self.by_node.get_mut(&node).and_then(|m| m.get_mut(key)) {
            live.acked = true;
        }
    }

    pub fn stopping(&mut self, node: NodeIx, key: &AttemptKey, grace_ms: u64) {
        if let Some(live) = self.by_node.get_mut(&node).and_then(|m| m.get_mut(key)) {
            live.stop_grace_ms = Some(grace_ms);
        }
    }

    /// The attempt is no longer live on `node`; whether it was.
    pub fn ended(&mut self, node: NodeIx, key: &AttemptKey) -> bool {
        let Some(map) = self.by_node.get_mut(&node) else { return false };
        let was_live = map.remove(key).is_some();
        if was_live {
            self.node_of.remove(key);
        }
        if map.is_empty() {
            self.by_node.remove(&node);
        }
        was_live
    }

    /// Attempts on `node` whose start was confirmed but that a restarted agent neither runs
    /// (`running`) nor owes an end report for (`ended`).
    pub fn missing(&self, node: NodeIx, running: &[AttemptKey], ended: &[AttemptKey]) -> Vec<AttemptKey> {
        self.missing_where(node, running, ended, |_| true)
    }

    /// As `missing`, among the attempts an earlier run of the head started: the report an
    /// agent makes to a restarted head may have been written before this head's first starts
    /// reached it (a message can overtake another), so those starts are not judged by it.
    pub fn missing_since_restart(&self, node: NodeIx, running: &[AttemptKey], ended: &[AttemptKey]) -> Vec<AttemptKey> {
        self.missing_where(node, running, ended, |a| a.restored)
    }

    fn missing_where(
        &self,
        node: NodeIx,
        running: &[AttemptKey],
        ended: &[AttemptKey],
        judged: impl Fn(&LiveAttempt) -> bool,
    ) -> Vec<AttemptKey> {
        let Some(live) = self.by_node.get(&node) else { return Vec::new() };
        live.iter()
            .filter(|(key, a)| a.acked && judged(a) && !running.contains(key) && !ended.contains(key))
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The node is gone, and its processes with it.
    pub fn node_lost(&mut self, node: NodeIx) {
        for key in self.by_node.remove(&node).unwrap_or_default().into_keys() {
            self.node_of.remove(&key);
        }
    }

    pub fn live_on(&self, node: NodeIx) -> usize {
        self.by_node.get(&node).map_or(0, BTreeMap::len)
    }

    /// Messages that bring the agent in line with the head, given the attempts it runs.
    /// `orphan_grace_ms` is the grace for stopping a process the head does not expect.
    /// A merge of two sorted lists: heartbeats are frequent, and most list little or nothing.
    pub fn reconcile(
        &self,
        node: NodeIx,
        running: &[AttemptKey],
        orphan_grace_ms: &dyn Fn(&AttemptKey) -> u64,
    ) -> Vec<ToAgent> {
        let expected = self.by_node.get(&node);
        if expected.is_none() && running.is_empty() {
            return Vec::new();
        }
        let sorted;
        let running = if running.is_sorted() {
            running
        } else {
            let mut copy = running.to_vec();
            copy.sort();
            sorted = copy;
            &sorted[..]
        };
        let mut out = Vec::new();
        let mut listed = running.iter().peekable();
        let orphan = |key: &AttemptKey| ToAgent::Stop { key: key.clone(), grace_ms: orphan_grace_ms(key) };
        for (key, live) in expected.into_iter().flatten() {
            while let Some(unknown) = listed.next_if(|k| *k < key) {
                out.push(orphan(unknown));
            }
            let is_running = listed.next_if(|k| *k == key).is_some();
            match live.stop_grace_ms {
                // Still running, or perhaps never started (the start was lost): either way the
                // agent answers a stop with an exit report.
                Some(grace_ms) if is_running || !live.acked => out.push(ToAgent::Stop { key: key.clone(), grace_ms }),
                None if !live.acked && !is_running => out.push(ToAgent::Start(Arc::clone(&live.spec))),
                _ => {}
            }
        }
        out.extend(listed.map(orphan));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::JobId;

    fn spec(actor: u32) -> StartSpec {
        StartSpec {
            key: AttemptKey { job: JobId::new("j1"), actor, attempt: 1, cycle: 1 },
            actor_name: format!("j1/{actor}"),
            command: vec!["true".into()],
            env: Default::default(),
            cwd: None,
            stop_grace_ms: 10,
            nproc_per_node: 1,
            group_rank: 0,
        }
    }

    #[test]
    fn reconcile_resends_starts_and_stops_and_kills_orphans() {
        let mut index = AttemptIndex::default();
        index.started(0, Arc::new(spec(0)));
        index.started(0, Arc::new(spec(1)));
        index.started(0, Arc::new(spec(2)));
        index.acked(0, &spec(1).key);
        index.stopping(0, &spec(2).key, 5);
        index.started(0, Arc::new(spec(3)));
        index.stopping(0, &spec(3).key, 6);
        let orphan = AttemptKey { job: JobId::new("j1"), actor: 0, attempt: 0, cycle: 0 };
        let listed = vec![spec(1).key, spec(2).key, orphan.clone()];
        let out = index.reconcile(0, &listed, &|_| 7);
        assert_eq!(
            out,
            vec![
                ToAgent::Stop { key: orphan, grace_ms: 7 },
                ToAgent::Start(Arc::new(spec(0))),
                ToAgent::Stop { key: spec(2).key, grace_ms: 5 },
                ToAgent::Stop { key: spec(3).key, grace_ms: 6 },
            ],
            "in key order"
        );
        index.ended(0, &spec(0).key);
        assert_eq!(index.live_on(0), 3);
    }
}
