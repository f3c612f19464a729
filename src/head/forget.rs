//! Forgetting DEAD nodes: the operator's `ftdrive forget`, and the bound on how many DEAD nodes
//! the head keeps (`retain_dead_nodes`), so that a fleet whose machines come and go under new
//! names (spot instances, autoscaled hosts) does not grow the head's table, `ftdrive nodes`,
//! the reasons it gives and its state database without end.
//!
//! - **FG-1 only the dead are forgotten.** A node is forgotten only while DEAD: it holds no
//!   bundle and runs no attempt, so nothing placed or running refers to it. ALIVE and DRAINING
//!   nodes are refused (`Rejected::NotDead`); `forget_node` asserts the rest.
//! - **FG-2 a forgotten name is new.** Nothing of the node is kept: a registration in its name
//!   is a new node (its resources, labels and cordon start afresh), and its record leaves the
//!   state database with the same commit.
//! - **FG-3 retention leaves cordons alone.** Past `retain_dead_nodes`, and when a new node
//!   needs room under `max_nodes`, the longest dead go first — never a node the operator
//!   drained, which only `ftdrive undrain` or `ftdrive forget` release (MB-1).
//!
//! Forgetting happens after an input has settled (`trim_dead_nodes`) or before anything else
//! of it (`make_room`, the operator's `forget`), never while drivers still react to the death.

use super::{DirtyKey, Head, Rejected, Reply};
use crate::event::Event;
use crate::ids::NodeId;
use crate::scheduler::{NodeIx, NodeState, PolicyFault};
use crate::time::Instant;

impl Head {
    /// The operator's `ftdrive forget`: a DEAD node leaves the head (FG-1, FG-2).
    pub(super) fn forget_named(&mut self, node: NodeId) -> Result<Reply, Rejected> {
        let ix = self.scheduler.node_ix(&node).ok_or_else(|| Rejected::NoSuchNode(node.clone()))?;
        let state = self.scheduler.node(ix).state;
        if state != NodeState::Dead {
            return Err(Rejected::NotDead(node, state));
        }
        self.forget_node(ix, "forgotten by the operator (`ftdrive forget`)".to_string());
        Ok(Reply::Done)
    }

    /// A node was declared DEAD at `now`: it counts toward `retain_dead_nodes`, checked once
    /// the input has settled.
    pub(super) fn note_dead(&mut self, now: Instant, ix: NodeIx) {
        self.dead_nodes.insert((now, ix));
        self.trim_due = true;
    }

    /// A DEAD node registered again: it is no longer a candidate for forgetting.
    pub(super) fn note_rejoined(&mut self, ix: NodeIx) {
        self.dead_nodes.retain(|&(_, dead)| dead != ix);
    }

    /// Keeps at most `retain_dead_nodes` DEAD nodes the operator did not drain (FG-3). Only
    /// after an input that noted a death: most inputs (heartbeats) change nothing here.
    pub(super) fn trim_dead_nodes(&mut self) {
        if !std::mem::take(&mut self.trim_due) {
            return;
        }
        let excess = self.forgettable().count().saturating_sub(self.config.retain_dead_nodes);
        let oldest: Vec<NodeIx> = self.forgettable().take(excess).collect();
        let retain = self.config.retain_dead_nodes;
        for ix in oldest {
            let why =
                format!("forgotten: the head keeps {retain} DEAD node(s) (`--retain-dead-nodes`), the longest dead go");
            self.forget_node(ix, why);
        }
    }

    /// A new node arrives at `max_nodes`: the longest-dead node the operator did not drain
    /// makes room for it. Whether there was one.
    pub(super) fn make_room(&mut self, joining: &NodeId) -> bool {
        let Some(ix) = self.forgettable().next() else { return false };
        let max = self.config.max_nodes;
        self.forget_node(
            ix,
            format!("forgotten to make room for {joining} (`max_nodes` {max}); it was DEAD the longest"),
        );
        true
    }

    /// DEAD nodes retention may forget, longest dead first.
    fn forgettable(&self) -> impl Iterator<Item = NodeIx> + '_ {
        let keep_cordons = self.scheduler.policy_fault() != PolicyFault::ForgetCordoned;
        let cordoned = move |ix: NodeIx| keep_cordons && self.liveness.get(ix).is_some_and(|r| r.cordoned);
        self.dead_nodes.iter().map(|&(_, ix)| ix).filter(move |&ix| !cordoned(ix))
    }

    fn forget_node(&mut self, ix: NodeIx, evidence: String) {
        let name = self.scheduler.node(ix).name.clone();
        assert_eq!(self.scheduler.node(ix).state, NodeState::Dead, "FG-1: forgetting {name}, not DEAD");
        assert_eq!(self.attempts.live_on(ix), 0, "FG-1: forgetting {name}, which runs attempts");
        self.note_rejoined(ix);
        self.scheduler.forget_node(ix);
        self.liveness.forget(ix);
        // A node the head waited for after a restart, forgotten, is waited for no longer.
        self.reported(ix);
        self.dirty.remove(&DirtyKey::Node(ix));
        self.dirty.insert(DirtyKey::ForgottenNode(name.clone()));
        self.notify(Event::NodeForgotten { node: name, evidence });
    }
}
