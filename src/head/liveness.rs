//! Failure detection: when each node was last heard from, and when it will be declared DEAD.
//!
//! Deadlines only move forward (`now + node_timeout_ms`), so a FIFO of (deadline, node) in
//! arrival order is already sorted: each heartbeat is O(1), and entries made stale by a later
//! heartbeat are dropped when they reach the front.
//!
//! - **FD-1 a silent cluster is the head's own fault, for a while.** When the head has heard
//!   from no node for half the node timeout, a node whose deadline passes is held, not
//!   declared DEAD: every machine going silent at once is far likelier the head's own network
//!   (a cut, its NIC, its switch) or the head stalled than every machine dying, and declaring
//!   them would stop every running rank for nothing (Kubernetes' node controller stops
//!   evicting in a fully disrupted zone for the same reason). The first sign of life from any
//!   node ends the disruption and gives each held node a whole node timeout from then, as
//!   Kubernetes resets its probe timestamps. Half the timeout parts the two cases with the
//!   default three heartbeats per timeout: a cut silences every node for at least the timeout
//!   less one heartbeat interval by the first deadline, while a live node is seldom silent for
//!   more than one interval. A lone node alive is held too (its silence says nothing either
//!   way). The hold lasts at most `disruption_hold_ms` from the first node held: a cluster
//!   whose every machine did die (a one-node cluster's did) is then declared as usual.
//! - **FD-2 nothing is placed until the held are settled.** While nodes are held, and once a
//!   disruption ends until every node it held is heard from or declared DEAD (at most a node
//!   timeout), the head places nothing, as a restarted head waits for its nodes (DU-3): so
//!   that the ranks of a gang that went silent together are re-placed together, not one by
//!   one as machines join (two gangs each taking one of two new machines would wait for ever
//!   for a second).
//! - **FD-4 a closed connection is its node's own silence.** A node whose agent's connection
//!   the head saw close is not held: the close (the peer's FIN or RST, its WebSocket close)
//!   crossed the head's network, so that network carried word from it, and the silence after
//!   is the node's own — its agent killed, its machine shut down. A cut delivers no close (the
//!   head's TCP waits about a quarter of an hour before it gives up on a silent peer). A
//!   one-node cluster whose agent was killed waited out the whole hold before its node was
//!   declared DEAD.
//! - **FD-3 a hold keeps a failure waiting.** A rank's failure that waits to learn whether a
//!   peer's node was lost first (AT-1) is not decided for want of word while nodes are held
//!   or unsettled (`Head::hold_attributions`): the loss that would excuse it may be declared
//!   only when the hold ends (swarm seed 19784).

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
    /// `interval_ms` before `now`, or before a restart of the head that has not heard from the
    /// node since: another of the same incident shares it (SL-1). Across a restart nobody
    /// knows when a later loss happened, and the head takes it as part of the last incident
    /// (a crash charged once), not as a new one.
    pub fn incident_date(&self, now: Instant, interval_ms: u64) -> Option<Instant> {
        let recent = |first: &Instant| now < first.plus_ms(interval_ms) || self.unheard_since_restore;
        self.lost_supervisors.filter(|(_, first)| recent(first)).map(|(at, _)| at)
    }

    /// The one test of suspicion (DESIGN §3): an alive node whose connection dropped, or that
    /// was not heard from for `after_ms` (a missed heartbeat).
    fn is_suspect(&self, now: Instant, after_ms: u64) -> bool {
        self.alive && (self.link_lost || now >= self.last_heard.plus_ms(after_ms))
    }
}

/// How the head holds nodes through a disruption (FD-1): after `quiet_ms` without a word from
/// any node, for at most `max_ms` (0: never).
#[derive(Clone, Copy, Debug)]
pub struct Hold {
    pub quiet_ms: u64,
    pub max_ms: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Liveness {
    records: Vec<Option<NodeRecord>>,
    expiries: VecDeque<(Instant, NodeIx)>,
    /// Alive nodes whose deadline passed while every node was silent (FD-1): no expiry is
    /// queued for them until a node is heard from or the hold's bound passes.
    held: BTreeSet<NodeIx>,
    /// When this disruption's hold ends (`disruption_hold_ms` after its first node was held);
    /// cleared once a node is heard from.
    hold_ends: Option<Instant>,
    /// Nodes held until a disruption ended and neither heard from nor DEAD since (FD-2).
    unsettled: BTreeSet<NodeIx>,
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
        self.held.remove(&ix);
        self.unsettled.remove(&ix);
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
        self.end_disruption(now, timeout_ms);
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
        self.held.remove(&ix);
        self.unsettled.remove(&ix);
        self.end_disruption(now, timeout_ms);
        self.drop_stale_front();
    }

    /// FD-1: a node was heard from, so the head's network works; each held node gets a whole
    /// node timeout from now to be heard from too.
    fn end_disruption(&mut self, now: Instant, timeout_ms: u64) {
        self.hold_ends = None;
        let deadline = now.plus_ms(timeout_ms);
        for ix in std::mem::take(&mut self.held) {
            let record = self.get_mut(ix).expect("a held node has a record");
            record.deadline = deadline;
            self.expiries.push_back((deadline, ix));
            self.unsettled.insert(ix);
        }
    }

    /// Whether a node held through a disruption is still neither heard from nor DEAD, or one
    /// is held now: placements wait (FD-2).
    pub fn unsettled(&self) -> bool {
        !self.held.is_empty() || !self.unsettled.is_empty()
    }

    /// When every node held now, or held until a disruption ended, will be heard from or DEAD
    /// at the latest (FD-3); `None` when none is.
    pub fn settled_by(&self) -> Option<Instant> {
        if !self.held.is_empty() {
            return self.hold_ends;
        }
        self.unsettled.iter().filter_map(|ix| self.get(*ix)).map(|r| r.deadline).max()
    }

    /// How many nodes are held now (FD-1), and how many held until a disruption ended are
    /// neither heard from nor DEAD since (FD-2).
    pub fn held_counts(&self) -> (usize, usize) {
        (self.held.len(), self.unsettled.len())
    }

    /// FD-1: no alive node was heard from within `quiet_ms`.
    fn fully_disrupted(&self, now: Instant, quiet_ms: u64) -> bool {
        let mut alive = self.records.iter().flatten().filter(|r| r.alive);
        alive.all(|r| now >= r.last_heard.plus_ms(quiet_ms))
    }

    /// Whether the node's deadline passed while every node was silent (FD-1).
    pub fn is_held(&self, ix: NodeIx) -> bool {
        self.held.contains(&ix)
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

    /// Why the node is suspect, if it is, as its view shows it. A held node (FD-1) is DEAD
    /// when the hold ends, unless a node is heard from first.
    pub fn suspect(&self, ix: NodeIx, now: Instant, after_ms: u64) -> Option<Suspect> {
        let record = self.get(ix).filter(|r| r.is_suspect(now, after_ms))?;
        let held = self.is_held(ix);
        let dead_at = if held { self.hold_ends.expect("a hold has an end") } else { record.deadline };
        Some(Suspect {
            link_lost: record.link_lost,
            silent_ms: now.ms_since(record.last_heard),
            dead_in_ms: dead_at.ms_since(now),
            held,
        })
    }

    /// The node was forgotten: nothing of it is kept (a stale expiry finds no record).
    pub fn forget(&mut self, ix: NodeIx) {
        self.held.remove(&ix);
        self.unsettled.remove(&ix);
        let record = self.records.get_mut(ix as usize).and_then(Option::take);
        assert!(record.is_some_and(|r| !r.alive), "forgetting a node that is not dead");
    }

    pub fn mark_dead(&mut self, ix: NodeIx) {
        self.held.remove(&ix);
        self.unsettled.remove(&ix);
        if let Some(record) = self.get_mut(ix) {
            record.alive = false;
        }
    }

    /// The earliest deadline that could expire a node.
    pub fn next_expiry(&self) -> Option<Instant> {
        let front = self.expiries.front().map(|(t, _)| *t);
        let hold_ends = self.hold_ends.filter(|_| !self.held.is_empty());
        [front, hold_ends].into_iter().flatten().min()
    }

    /// Nodes whose deadline has passed, in deadline order, each with whether it was held
    /// until the hold ended — unless no node was heard from for `hold.quiet_ms`, when they are
    /// held instead (FD-1).
    pub fn pop_expired(&mut self, now: Instant, hold: Hold) -> Vec<(NodeIx, bool)> {
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
        let hold_over = self.hold_ends.is_some_and(|end| now >= end);
        if !expired.is_empty() && !hold_over && hold.max_ms > 0 && self.fully_disrupted(now, hold.quiet_ms) {
            // FD-4: a node whose connection closed is declared as usual.
            let closed = |ix: &NodeIx| self.get(*ix).is_some_and(|r| r.link_lost);
            let (closed, silent): (Vec<NodeIx>, Vec<NodeIx>) = expired.into_iter().partition(closed);
            if !silent.is_empty() {
                self.hold_ends.get_or_insert(now.plus_ms(hold.max_ms));
                self.held.extend(silent);
            }
            expired = closed;
        }
        let mut declared: Vec<(NodeIx, bool)> = expired.into_iter().map(|ix| (ix, false)).collect();
        if hold_over {
            declared.extend(std::mem::take(&mut self.held).into_iter().map(|ix| (ix, true)));
        }
        declared
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

    const HOLD: Hold = Hold { quiet_ms: 1500, max_ms: 60_000 };

    #[test]
    fn only_the_latest_deadline_expires_a_node() {
        let t = Instant::from_ms;
        let mut l = Liveness::default();
        l.register(0, "a".into(), 1, t(0), 3000);
        l.register(1, "b".into(), 1, t(0), 3000);
        l.heard(0, t(1000), 3000);
        l.heard(0, t(2000), 3000);
        assert_eq!(l.next_expiry(), Some(t(3000)), "node 1 still due at 3000");
        assert_eq!(l.pop_expired(t(3000), HOLD), vec![(1, false)]);
        l.mark_dead(1);
        assert_eq!(l.next_expiry(), Some(t(5000)), "stale entries of node 0 were dropped");
        assert!(l.pop_expired(t(4999), HOLD).is_empty());
        assert!(l.pop_expired(t(5000), HOLD).is_empty(), "a lone node is held (FD-1)");
    }

    #[test]
    fn a_node_is_suspect_after_a_missed_heartbeat_or_a_dropped_link_until_heard_from() {
        let t = Instant::from_ms;
        let mut l = Liveness::default();
        l.register(0, "a".into(), 1, t(0), 3000);
        l.register(1, "b".into(), 1, t(0), 3000);
        l.heard(0, t(1000), 3000);
        assert_eq!(l.suspect(0, t(2999), 2000), None, "heard 1999 ms ago, within two heartbeats");
        assert_eq!(
            l.suspect(1, t(2000), 2000),
            Some(Suspect { link_lost: false, silent_ms: 2000, dead_in_ms: 1000, held: false })
        );
        l.lose_link(0);
        assert_eq!(
            l.suspect(0, t(1500), 2000),
            Some(Suspect { link_lost: true, silent_ms: 500, dead_in_ms: 2500, held: false })
        );
        assert_eq!(l.suspects(t(2000), 2000), BTreeSet::from([0, 1]), "the set and each view agree");
        l.heard(0, t(1600), 3000);
        l.mark_dead(1);
        assert_eq!((l.suspect(0, t(1700), 2000), l.suspect(1, t(5000), 2000)), (None, None), "heard from; DEAD");
    }

    /// Three nodes heartbeating every 1000 ms with staggered phases, the head's network cut at
    /// 2500: by the first deadline every node has been silent for over half the timeout.
    fn three_nodes_cut_off_at_2500() -> Liveness {
        let t = Instant::from_ms;
        let mut l = Liveness::default();
        for ix in 0..3 {
            l.register(ix, format!("n{ix}"), 1, t(0), 3000);
        }
        for (ix, at) in [(0, 1000), (1, 1400), (2, 1800), (0, 2000), (1, 2400)] {
            l.heard(ix, t(at), 3000);
        }
        l
    }

    #[test]
    fn nodes_whose_deadline_passes_while_every_node_is_silent_are_held_until_one_is_heard() {
        let t = Instant::from_ms;
        let mut l = three_nodes_cut_off_at_2500();
        assert!(l.pop_expired(t(4800), HOLD).is_empty(), "n2 silent 3000 ms, but so is everyone: held");
        assert!(l.pop_expired(t(5400), HOLD).is_empty(), "n0 and n1 too");
        assert!(l.is_held(0) && l.is_held(1) && l.is_held(2));
        assert_eq!(l.next_expiry(), Some(t(64_800)), "only the end of the hold, 60 s after the first node held");
        let held = l.suspect(2, t(9000), 2000).expect("a held node is suspect");
        assert_eq!(held, Suspect { link_lost: false, silent_ms: 7200, dead_in_ms: 55_800, held: true });
        l.heard(1, t(9000), 3000);
        assert!(!l.is_held(0) && !l.is_held(2), "a node heard from ends the disruption");
        assert_eq!(l.suspect(0, t(9000), 2000).map(|s| s.dead_in_ms), Some(3000), "a whole timeout from now");
        l.heard(0, t(9100), 3000);
        l.heard(1, t(10_000), 3000);
        l.heard(0, t(11_000), 3000);
        assert_eq!(l.pop_expired(t(12_000), HOLD), vec![(2, false)], "n2 stayed silent while the others spoke");
    }

    #[test]
    fn a_node_whose_connection_closed_is_declared_though_every_node_is_silent() {
        let t = Instant::from_ms;
        let mut l = three_nodes_cut_off_at_2500();
        l.lose_link(2);
        assert_eq!(l.pop_expired(t(4800), HOLD), vec![(2, false)], "its close crossed the network (FD-4)");
        assert_eq!(l.next_expiry(), Some(t(5000)), "no hold begun for it");
        l.mark_dead(2);
        assert!(l.pop_expired(t(5400), HOLD).is_empty(), "the others, silent without a close, are held");
        assert_eq!(l.held_counts(), (2, 0));
    }

    #[test]
    fn a_node_dies_as_before_while_another_is_heard_from() {
        let t = Instant::from_ms;
        let mut l = three_nodes_cut_off_at_2500();
        l.heard(0, t(4000), 3000);
        assert_eq!(l.pop_expired(t(4800), HOLD), vec![(2, false)], "n0 heard 800 ms ago, within half the timeout");
        l.mark_dead(2);
        l.mark_dead(1);
        assert!(l.pop_expired(t(7000), HOLD).is_empty(), "the last node alive is held too");
        assert!(l.is_held(0));
    }

    #[test]
    fn a_hold_ends_after_its_bound_and_declares_every_node_it_held() {
        let t = Instant::from_ms;
        let mut l = three_nodes_cut_off_at_2500();
        assert!(l.pop_expired(t(5400), HOLD).is_empty());
        assert!(l.pop_expired(t(65_399), HOLD).is_empty(), "within the hold, from the first node held at 5400");
        assert_eq!(l.pop_expired(t(65_400), HOLD), vec![(0, true), (1, true), (2, true)]);
        assert_eq!((l.next_expiry(), l.unsettled()), (None, false), "nothing held, nothing to wait for");
        let never = Hold { quiet_ms: 1500, max_ms: 0 };
        let mut l = three_nodes_cut_off_at_2500();
        assert_eq!(l.pop_expired(t(4800), never), vec![(2, false)], "a hold of 0 ms holds nothing");
    }

    #[test]
    fn placements_wait_while_nodes_are_held_and_until_each_is_heard_or_dead() {
        let t = Instant::from_ms;
        let mut l = three_nodes_cut_off_at_2500();
        assert!(l.pop_expired(t(5400), HOLD).is_empty());
        assert!(l.unsettled(), "held");
        assert_eq!(l.held_counts(), (3, 0));
        l.heard(0, t(6000), 3000);
        assert!(l.unsettled(), "n1 and n2 not heard yet");
        assert_eq!(l.held_counts(), (0, 2), "the disruption is over; two are still to be heard from");
        l.heard(1, t(6100), 3000);
        l.heard(0, t(8000), 3000);
        assert_eq!(l.pop_expired(t(9000), HOLD), vec![(2, false)]);
        l.mark_dead(2);
        assert!(!l.unsettled(), "every held node heard from or DEAD");
        assert_eq!(l.held_counts(), (0, 0));
    }
}
