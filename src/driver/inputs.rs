//! The driver's inputs, one handler each: placements, losses, preemption notices, and what
//! agents report about attempts. Each takes one actor one transition at a time; `reconcile`
//! runs after every input.

use super::classify::Ending;
use super::{ActorState, Bundle, BundlePlaced, DrainSource, Driver, DriverEffect, Role, StopReason};
use super::{Loss, Timer};
use crate::event::JobEvent;
use crate::ids::ActorIx;
use crate::protocol::{AttemptKey, ExitStatus};
use crate::time::Instant;

impl Driver {
    pub(super) fn on_placed(&mut self, now: Instant, placed: BundlePlaced) {
        let ix = placed.actor;
        let actor = &mut self.actors[ix as usize];
        let expected = matches!(actor.bundle, Bundle::Requested { .. });
        actor.bundle =
            Bundle::Placed { node: placed.node, port: placed.port, devices: placed.devices, draining: false };
        if !expected || self.closing.is_some() || actor.state.is_terminal() {
            self.release_unused(ix);
            return;
        }
        if self.terminating && actor.never_runs_once_terminating() {
            self.actors[ix as usize].parked = true;
            self.release_unused(ix);
            return;
        }
        if actor.role == Role::Spare && actor.state == ActorState::Scheduling {
            self.stand_by(now, ix);
        }
        if !self.admitted && (0..self.spec.min_nodes).all(|i| self.actors[i as usize].bundle.is_placed()) {
            self.admitted = true;
        }
        self.note_possible_growth(now, ix);
    }

    /// The next attempt that serves the rendezvous from this bundle listens on the new port;
    /// one running now keeps the port it was started with.
    pub(super) fn on_port_moved(&mut self, ix: ActorIx, new: u16) {
        let actor = &mut self.actors[ix as usize];
        let Bundle::Placed { port, .. } = &mut actor.bundle else {
            panic!("{} moved off a port without a bundle", actor.name)
        };
        let from = std::mem::replace(port, new);
        let actor = actor.name.clone();
        self.event(JobEvent::PortMoved { actor, from, to: new });
    }

    /// A newly placed active actor outside the running world grows it after
    /// `scale_up_delay_ms` (where growth restarts the world), so that joins arriving close
    /// together make one restart.
    fn note_possible_growth(&mut self, now: Instant, ix: ActorIx) {
        let actor = &self.actors[ix as usize];
        let cycle_running = self.world.iter().any(|w| self.actors[*w as usize].state == ActorState::Running);
        if self.mode().grows_by_restart()
            && actor.role == Role::Active
            && actor.state == ActorState::Scheduling
            && cycle_running
            && !self.timers.is_set(Timer::ScaleUp)
        {
            self.timers.set(Timer::ScaleUp, now.plus_ms(self.spec.scale_up_delay_ms));
        }
    }

    /// All of them first lose their bundles, then each reacts: a reaction (say, closing the
    /// job) must not try to release a bundle that is already gone.
    pub(super) fn on_bundles_lost(&mut self, now: Instant, actors: &[ActorIx], loss: Loss) {
        for &ix in actors {
            let actor = &mut self.actors[ix as usize];
            assert!(actor.bundle.is_placed(), "{} lost a bundle it did not hold", actor.name);
            actor.clear_bundle();
            actor.lost_at = Some(now);
            if let Some(cycle) = actor.run.as_ref().filter(|r| r.exited.is_none()).map(|r| r.cycle) {
                self.record_loss(cycle, ix, &loss);
            }
        }
        for &ix in actors {
            self.on_bundle_lost(now, ix, &loss);
        }
    }

    fn on_bundle_lost(&mut self, now: Instant, ix: ActorIx, loss: &Loss) {
        match self.actors[ix as usize].state {
            ActorState::Standby => self.transition(ix, ActorState::Scheduling),
            ActorState::Running => self.run_lost_with_node(now, ix, loss),
            // SCHEDULING: it asks for a bundle again, or a spare takes it over (reconcile,
            // `hand_waiting_ranks_to_spares`). FAILING: its process has ended already; it only
            // loses the bundle.
            ActorState::Scheduling
            | ActorState::Failing
            | ActorState::Stopped
            | ActorState::TaskCompleted
            | ActorState::Failed => {}
        }
    }

    fn run_lost_with_node(&mut self, now: Instant, ix: ActorIx, loss: &Loss) {
        let run = self.actors[ix as usize].run.as_ref().expect("a running actor has a run");
        if run.exited.is_some() {
            return; // finished its work already; it only loses the bundle
        }
        let key = self.key_of(ix);
        self.effects.push_back(DriverEffect::AttemptEnded { node: run.node.clone(), key });
        self.end_attempt(now, ix, Ending::NodeLost(loss));
    }

    /// A drain notice for `ix`'s node applies to every bundle of the job there, at once; if it
    /// stops a running attempt, the mode reacts as to a failure (a gang stops its other ranks
    /// now, not after the drained ones have ended: one stop grace of downtime, not two).
    pub(super) fn on_draining(&mut self, now: Instant, ix: ActorIx, deadline: Instant, by: DrainSource) {
        let Some(node) = self.actors[ix as usize].bundle.node().map(|n| n.name.clone()) else { return };
        let on_node: Vec<ActorIx> = (0..self.actors.len() as ActorIx)
            .filter(|i| self.actors[*i as usize].bundle.node().is_some_and(|n| n.name == node))
            .collect();
        let mut first_stopped = None;
        for &i in &on_node {
            if self.drain_bundle(now, i, deadline, by) {
                first_stopped.get_or_insert(i);
            }
        }
        // A rank waiting to start that the drain left without a bundle is handed to a spare in
        // reconcile, once every bundle here is marked draining (swarm seed 7748293).
        if let Some(stopped) = first_stopped.filter(|_| self.closing.is_none()) {
            self.mode().on_failure_noticed(self, now, stopped);
        }
    }

    /// The node of `ix`'s bundle cannot start work (AG-6). A spare standing by there, or a rank
    /// between attempts, gives the bundle up and asks again (in the replacement's place); a
    /// running attempt runs on, and its bundle goes once it has ended, as a drained one's does
    /// — a rank restarting in place would fail to start there, charged.
    pub(super) fn on_node_unhealthy(&mut self, now: Instant, ix: ActorIx) {
        let Bundle::Placed { draining, .. } = &mut self.actors[ix as usize].bundle else { return };
        if *draining {
            return;
        }
        *draining = true;
        self.leave_unusable_bundle(now, ix);
    }

    /// An actor whose bundle was just marked unusable (`draining`) leaves it unless it runs: a
    /// spare standing by, or a rank between attempts, gives it up and asks again, as a lost
    /// bundle's replacement. Whether it left.
    fn leave_unusable_bundle(&mut self, now: Instant, ix: ActorIx) -> bool {
        let state = self.actors[ix as usize].state;
        match state {
            ActorState::Standby | ActorState::Scheduling | ActorState::Failing => {
                self.drop_bundle(ix);
                self.actors[ix as usize].lost_at = Some(now);
                if state == ActorState::Standby {
                    self.transition(ix, ActorState::Scheduling);
                }
                true
            }
            ActorState::Running => false,
            other => panic!("{} held a bundle while {other}", self.actors[ix as usize].name),
        }
    }

    /// Marks one bundle draining and moves its actor off it. Whether a running attempt was stopped.
    fn drain_bundle(&mut self, now: Instant, ix: ActorIx, deadline: Instant, by: DrainSource) -> bool {
        let actor = &mut self.actors[ix as usize];
        let Bundle::Placed { draining, node, .. } = &mut actor.bundle else {
            return false;
        };
        if *draining {
            return false; // drained with a sibling already
        }
        *draining = true;
        let node = node.name.clone();
        if self.leave_unusable_bundle(now, ix) {
            return false;
        }
        let run = self.actors[ix as usize].run.as_mut().expect("a running actor has a run");
        (run.draining, run.drained_by) = (true, by);
        if run.stop.is_none() && run.exited.is_none() {
            let deadline_ms = deadline.ms_since(now);
            let grace = self.spec.stop_grace_ms.min(deadline_ms);
            self.stop_run(ix, StopReason::Drain { node, deadline_ms, deadline, by }, grace);
            return true;
        }
        false
    }

    pub(super) fn on_started(&mut self, key: AttemptKey) {
        let Some(run) = self.current_run(&key) else {
            return self.stale(key, "start confirmation");
        };
        // A heartbeat lists the attempt again and again (HB-1): only its first word is news.
        if !std::mem::replace(&mut run.acked, true) {
            let (attempt, node) = (run.attempt, run.node.clone());
            let actor = self.actors[key.actor as usize].name.clone();
            self.event(JobEvent::StartConfirmed { actor, attempt, node });
        }
    }

    pub(super) fn on_exited(&mut self, now: Instant, key: AttemptKey, status: ExitStatus) {
        // An agent's report: its words on the failure are trusted with a bounded length only.
        let status = status.bounded();
        assert!(!status.supervisor_lost, "the head reports an attempt whose supervisor died as lost (SL-1)");
        let waits = self.mode().success_waits_for_peers() && self.closing.is_none();
        let Some(run) = self.current_run(&key) else {
            return self.stale(key, "exit report");
        };
        let node = run.node.clone();
        if waits && status.success() && run.stop.is_none() {
            run.exited = Some((status, now));
            self.effects.push_back(DriverEffect::AttemptEnded { node, key });
            if self.world_exited_ok() {
                self.complete_gang(now);
            }
            return;
        }
        self.effects.push_back(DriverEffect::AttemptEnded { node, key: key.clone() });
        self.end_attempt(now, key.actor, Ending::Exited { status: &status, reacting_to: None });
    }

    pub(super) fn on_spawn_failed(
        &mut self,
        now: Instant,
        key: AttemptKey,
        message: String,
        node_fault: Option<Instant>,
    ) {
        let Some(run) = self.current_run(&key) else {
            return self.stale(key, "spawn failure");
        };
        let node = run.node.clone();
        self.effects.push_back(DriverEffect::AttemptEnded { node, key: key.clone() });
        // An agent's report, from a record the job could write: one bounded, printable line.
        let message = crate::protocol::one_line(&message, crate::protocol::MAX_SPAWN_MESSAGE_CHARS);
        // A node's fault: the head made the node unhealthy first, which marked this bundle
        // unusable (`on_node_unhealthy`), so the next attempt goes elsewhere.
        self.end_attempt(now, key.actor, Ending::SpawnFailed { message: &message, node_fault });
    }

    pub(super) fn on_attempt_lost(&mut self, now: Instant, key: AttemptKey, loss: &Loss) {
        let Some(run) = self.current_run(&key) else {
            return self.stale(key, "attempt loss");
        };
        let (node, lost_running) = (run.node.clone(), run.exited.is_none().then_some(run.cycle));
        if let Some(cycle) = lost_running {
            // A peer's crash since it went silent may have been a reaction (AT-1).
            self.record_loss(cycle, key.actor, loss);
        }
        self.effects.push_back(DriverEffect::AttemptEnded { node, key: key.clone() });
        self.end_attempt(now, key.actor, Ending::NodeLost(loss));
    }
}
