//! Failure detection: when each node was last heard from, and when it will be declared DEAD.
//!
//! Deadlines only move forward (`now + node_timeout_ms`), so a FIFO of (deadline, node) in
//! arrival order is already sorted: each heartbeat is O(1), and entries made stale by a later
//! heartbeat are dropped when they reach the front.

use crate::protocol::AttemptKey;
use crate::scheduler::NodeIx;
use crate::time::Instant;
use crate::view::Suspect;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// What the head knows of one node's agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRecord {
    /// Where other ranks reach this node (`MASTER_ADDR`).
    pub addr: String,
    /// Identifies one run of the agent; a new one means the agent restarted.
    pub incarnation: u64,
    /// Highest heartbeat sequence number seen from this incarnation.
    pub last_seq: u64,
    pub last_heard: Instant,
    pub deadline: Instant,
    pub alive: bool,
    /// The runtime saw the agent's connection drop and nothing has been heard since.
    pub link_lost: bool,
    /// The node's agent announced that its machine is going away, so its drain is not the
    /// operator's to withdraw. Kept across a re-attaching agent restart and a head restart; a
    /// new machine in the node's name starts without it.
    pub leaving: bool,
    /// The operator drained the node (`ftdrive drain`): it takes no new work until `ftdrive
    /// undrain`, whatever happens meanwhile (agent and head restarts, the node's death and a
    /// new machine in its name), as a Kubernetes cordon or a Slurm DRAIN does.
    pub cordoned: bool,
    /// For an agent that restarted on a live node: the ends it owes of attempts of the runs
    /// before it, each with when the run before it was last heard. A supervisor among them
    /// that died without a record died no earlier (SL-1 in `head/mod.rs`). Taken as they are
    /// reported; a later restart, or the node's death, starts afresh.
    pub owed_since: BTreeMap<AttemptKey, Instant>,
    /// The date given to the first supervisor found dead without a record here, and when it
    /// was reported: the others of one incident, reported within a heartbeat interval (before
    /// the restarted agent's registration, or after an old heartbeat still in flight moved
    /// `last_heard`), share it, and are one fault (SL-1, FC-1).
    pub lost_supervisors: Option<(Instant, Instant)>,
    /// Restored from the durable state of the head's run before a restart, and not heard from
    /// since: `last_heard` is the restart, not the agent (AT-2 in `driver/failure.rs`).
    pub unheard_since_restore: bool,
}

impl NodeRecord {
    /// The date a supervisor lost here was given, if that was reported less than
    /// `interval_ms` before `now`: another of the same incident shares it (SL-1).
    pub fn incident_date(&self, now: Instant, interval_ms: u64) -> Option<Instant> {
        self.lost_supervisors.filter(|(_, first)| now < first.plus_ms(interval_ms)).map(|(at, _)| at)
    }

    /// The one test of suspicion (DESIGN §3): an alive node whose connection dropped, or that
    /// was not heard from for `after_ms` (a missed heartbeat).
    fn is_suspect(&self, now: Instant, after_ms: u64) -> bool {
        self.alive && (self.link_lost || now >= self.last_heard.plus_ms(after_ms))
    }
}

#[derive(Clone, Debug, Default)]
pub struct Liveness {
    records: Vec<Option<NodeRecord>>,
    expiries: VecDeque<(Instant, NodeIx)>,
}

impl Liveness {
    /// A node registered (or re-registered): it is alive as of `now`. The operator's cordon
    /// belongs to the node's name, not to one agent run, so it stays.
    pub fn register(&mut self, ix: NodeIx, addr: String, incarnation: u64, now: Instant, timeout_ms: u64) {
        let slot = ix as usize;
        if self.records.len() <= slot {
            self.records.resize(slot + 1, None);
        }
        let cordoned = self.records[slot].as_ref().is_some_and(|r| r.cordoned);
        let deadline = now.plus_ms(timeout_ms);
        self.records[slot] = Some(NodeRecord {
            addr,
            incarnation,
            last_seq: 0,
            last_heard: now,
            deadline,
            alive: true,
            link_lost: false,
            leaving: false,
            cordoned,
            owed_since: BTreeMap::new(),
            lost_supervisors: None,
            unheard_since_restore: false,
        });
        self.expiries.push_back((deadline, ix));
    }

    pub fn get(&self, ix: NodeIx) -> Option<&NodeRecord> {
        self.records.get(ix as usize).and_then(Option::as_ref)
    }

    pub fn get_mut(&mut self, ix: NodeIx) -> Option<&mut NodeRecord> {
        self.records.get_mut(ix as usize).and_then(Option::as_mut)
    }

    /// A sign of life from an alive node.
    pub fn heard(&mut self, ix: NodeIx, now: Instant, timeout_ms: u64) {
        let record = self.get_mut(ix).expect("heard from a registered node");
        assert!(record.alive, "heard from a dead node");
        record.last_heard = now;
        record.unheard_since_restore = false;
        record.link_lost = false;
        record.deadline = now.plus_ms(timeout_ms);
        let deadline = record.deadline;
        self.expiries.push_back((deadline, ix));
        self.drop_stale_front();
    }

    /// The agent's connection dropped: the node is suspect until heard from again.
    pub fn lose_link(&mut self, ix: NodeIx) {
        if let Some(record) = self.get_mut(ix).filter(|r| r.alive) {
            record.link_lost = true;
        }
    }

    /// Alive nodes that are suspect (DESIGN §3): their connection dropped, or nothing was heard
    /// from them for `after_ms` (a missed heartbeat).
    pub fn suspects(&self, now: Instant, after_ms: u64) -> BTreeSet<NodeIx> {
        let records = self.records.iter().enumerate();
        records
            .filter(|(_, r)| r.as_ref().is_some_and(|r| r.is_suspect(now, after_ms)))
            .map(|(ix, _)| ix as NodeIx)
            .collect()
    }

    /// Why the node is suspect, if it is, as its view shows it.
    pub fn suspect(&self, ix: NodeIx, now: Instant, after_ms: u64) -> Option<Suspect> {
        let record = self.get(ix).filter(|r| r.is_suspect(now, after_ms))?;
        Some(Suspect {
            link_lost: record.link_lost,
            silent_ms: now.ms_since(record.last_heard),
            dead_in_ms: record.deadline.ms_since(now),
        })
    }

    /// The node was forgotten: nothing of it is kept (a stale expiry finds no record).
    pub fn forget(&mut self, ix: NodeIx) {
        let record = self.records.get_mut(ix as usize).and_then(Option::take);
        assert!(record.is_some_and(|r| !r.alive), "forgetting a node that is not dead");
    }

    pub fn mark_dead(&mut self, ix: NodeIx) {
        if let Some(record) = self.get_mut(ix) {
            record.alive = false;
        }
    }

    /// The earliest deadline that could expire a node.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.expiries.front().map(|(t, _)| *t)
    }

    /// Nodes whose deadline has passed, in deadline order.
    pub fn pop_expired(&mut self, now: Instant) -> Vec<NodeIx> {
        let mut expired = Vec::new();
        while let Some(&(deadline, ix)) = self.expiries.front() {
            if deadline > now {
                break;
            }
            self.expiries.pop_front();
            if self.is_current(deadline, ix) {
                expired.push(ix);
            }
        }
        self.drop_stale_front();
        expired
    }

    fn is_current(&self, deadline: Instant, ix: NodeIx) -> bool {
        self.get(ix).is_some_and(|r| r.alive && r.deadline == deadline)
    }

    /// Keeps the front entry meaningful so that `next_expiry` does not wake anyone in vain.
    fn drop_stale_front(&mut self) {
        while let Some(&(deadline, ix)) = self.expiries.front() {
            if self.is_current(deadline, ix) {
                break;
            }
            self.expiries.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_latest_deadline_expires_a_node() {
        let t = Instant::from_ms;
        let mut l = Liveness::default();
        l.register(0, "a".into(), 1, t(0), 3000);
        l.register(1, "b".into(), 1, t(0), 3000);
        l.heard(0, t(1000), 3000);
        l.heard(0, t(2000), 3000);
        assert_eq!(l.next_expiry(), Some(t(3000)), "node 1 still due at 3000");
        assert_eq!(l.pop_expired(t(3000)), vec![1]);
        l.mark_dead(1);
        assert_eq!(l.next_expiry(), Some(t(5000)), "stale entries of node 0 were dropped");
        assert!(l.pop_expired(t(4999)).is_empty());
        assert_eq!(l.pop_expired(t(5000)), vec![0]);
    }

    #[test]
    fn a_node_is_suspect_after_a_missed_heartbeat_or_a_dropped_link_until_heard_from() {
        let t = Instant::from_ms;
        let mut l = Liveness::default();
        l.register(0, "a".into(), 1, t(0), 3000);
        l.register(1, "b".into(), 1, t(0), 3000);
        l.heard(0, t(1000), 3000);
        assert_eq!(l.suspect(0, t(2999), 2000), None, "heard 1999 ms ago, within two heartbeats");
        assert_eq!(l.suspect(1, t(2000), 2000), Some(Suspect { link_lost: false, silent_ms: 2000, dead_in_ms: 1000 }));
        l.lose_link(0);
        assert_eq!(l.suspect(0, t(1500), 2000), Some(Suspect { link_lost: true, silent_ms: 500, dead_in_ms: 2500 }));
        assert_eq!(l.suspects(t(2000), 2000), BTreeSet::from([0, 1]), "the set and each view agree");
        l.heard(0, t(1600), 3000);
        l.mark_dead(1);
        assert_eq!((l.suspect(0, t(1700), 2000), l.suspect(1, t(5000), 2000)), (None, None), "heard from; DEAD");
    }
}
