//! Actor mode (torchx semantics): each rank starts on its own bundle and restarts alone,
//! keeping its rank; the rendezvous is rank 0's node, and the cycle advances when rank 0
//! moves. After the first rank completes the job is terminating: nothing new starts, and it
//! succeeds once every started rank has exited 0.

use super::{ActorState, Bundle, CloseReason, Driver, JobState, Master, Mode, Role, Timer};
use crate::ids::{ActorId, ActorIx};
use crate::time::Instant;

pub(super) struct ActorMode;

impl Mode for ActorMode {
    fn make_progress(&self, d: &mut Driver, now: Instant) {
        d.start_ready_actors(now);
        if d.terminating && d.all_started_completed() {
            d.close(now, CloseReason::Succeeded, None);
            d.finish_if_released(now);
        }
    }

    fn success_waits_for_peers(&self) -> bool {
        false
    }

    fn on_failure_noticed(&self, _: &mut Driver, _: Instant, _: ActorIx) {}

    fn restart_after(&self, d: &mut Driver, now: Instant, failed: ActorIx, promoted: Option<ActorIx>, delay_ms: u64) {
        let rank_holder = promoted.unwrap_or(failed);
        d.timers.set(Timer::ActorBackoff(rank_holder), now.plus_ms(delay_ms));
        d.backing_off(Some(rank_holder), now, delay_ms);
    }

    fn on_completed(&self, d: &mut Driver) {
        d.terminating = true;
        d.park_what_never_runs();
    }

    fn ranks(&self, d: &Driver) -> (Vec<ActorId>, u32) {
        let mut slots: Vec<(u32, &ActorId)> = d.actors.iter().filter_map(|a| a.slot.map(|s| (s, &a.name))).collect();
        slots.sort();
        (slots.into_iter().map(|(_, n)| n.clone()).collect(), d.spec.max_nodes)
    }

    fn grows_by_restart(&self) -> bool {
        false
    }

    fn rank0_first(&self) -> bool {
        true
    }
}

impl Driver {
    /// Each placed rank starts on its own (after its backoff), with the rendezvous at rank 0's
    /// node.
    fn start_ready_actors(&mut self, now: Instant) {
        if !self.admitted {
            return;
        }
        self.hand_rank0_to_a_placed_rank();
        if !self.update_actor_mode_master(now) {
            return;
        }
        let ready: Vec<ActorIx> = self
            .startable()
            .filter(|ix| {
                let never_started = self.actors[*ix as usize].attempts == 0;
                let backing_off = self.timers.pending_at(Timer::ActorBackoff(*ix), now);
                let parked_for_good = self.terminating && never_started;
                !(backing_off || parked_for_good)
            })
            .collect();
        for ix in ready {
            let rank = self.actors[ix as usize].slot.expect("active actors hold a rank");
            self.start(now, ix, rank, self.spec.max_nodes);
            self.set_job_state(now, JobState::Running);
        }
    }

    /// Rank 0 waits for a bundle while another rank waits to start on one: that rank takes
    /// rank 0, and rank 0's actor takes its rank and waits in its place, as a promoted spare
    /// swaps with a failed rank. Nothing starts without rank 0, and its bundle might never come
    /// while the job's own waiting ranks fill the only node it could use (swarm seed 2567382).
    fn hand_rank0_to_a_placed_rank(&mut self) {
        if self.terminating {
            return; // an actor that never started never will now; nothing to hand over
        }
        let Some(rank0) = self.actors.iter().position(|a| a.slot == Some(0) && a.role == Role::Active) else {
            return;
        };
        let waiting = &self.actors[rank0];
        if waiting.state != ActorState::Scheduling || waiting.bundle.is_placed() || waiting.run.is_some() {
            return;
        }
        let Some(taker) = self.startable().map(|ix| ix as usize).find(|ix| *ix != rank0) else { return };
        let slot = self.actors[taker].slot;
        self.actors[taker].slot = Some(0);
        self.actors[rank0].slot = slot;
        // Neither shows its last attempt's rank now: that rank is the other's.
        self.actors[taker].rank = None;
        self.actors[rank0].rank = None;
    }

    /// A terminating job starts no spare and no rank that never started. A spare standing by
    /// gives its bundle back, as one placed from now on does at once: held, it could keep the
    /// only node that the retry of a started rank can use, and that rank waited for ever (swarm
    /// seed 5947530). A request still queued is withdrawn: left there, it was placed and given
    /// back at once, and for that moment it kept its room from others (swarm seed 4059402, a
    /// spare that briefly held the only node a waiting peer of its STRICT_SPREAD job could use).
    fn park_what_never_runs(&mut self) {
        for ix in 0..self.actors.len() as ActorIx {
            let actor = &self.actors[ix as usize];
            if !actor.never_runs_once_terminating() {
                continue;
            }
            let standing_by = actor.state == ActorState::Standby;
            let requested = matches!(actor.bundle, Bundle::Requested { .. });
            if standing_by {
                self.actors[ix as usize].parked = true;
                self.transition(ix, ActorState::Scheduling);
                self.release_unused(ix);
            } else if requested {
                self.actors[ix as usize].parked = true;
                self.drop_bundle(ix);
            }
        }
    }

    /// Returns whether a master is known; moves it (a new cycle) when rank 0 changed node.
    fn update_actor_mode_master(&mut self, now: Instant) -> bool {
        let rank0 = self.actors.iter().find(|a| a.slot == Some(0) && a.role == Role::Active);
        if self.terminating && rank0.is_none_or(|a| a.attempts == 0) {
            // Rank 0 never started, and never will now: the rendezvous stays put. A rank 0 that
            // started and is retried serves it where it runs again, on the port its new bundle
            // holds: the old bundle's went back to its machine's pool, and another job's rank 0
            // may listen on it by now (swarm seed 31269).
            return self.master.is_some();
        }
        let Some(rank0) = rank0 else {
            return false;
        };
        let Bundle::Placed { node, port, .. } = &rank0.bundle else {
            // Rank 0 finished (or runs on a node being lost): the rendezvous stays where it
            // is. Only a rank 0 waiting for a new bundle makes the others wait.
            return self.master.is_some() && (rank0.run.is_some() || rank0.state.is_terminal());
        };
        let moved = self.master.as_ref().is_none_or(|m| m.node != node.name || m.port != *port);
        if moved {
            self.master = Some(Master { node: node.name.clone(), addr: node.addr.clone(), port: *port });
            self.cycle += 1;
            self.announce_cycle(now);
        }
        true
    }

    /// Every rank that started has completed. A failed actor swapped out for a spare no longer
    /// holds a rank and does not count.
    fn all_started_completed(&self) -> bool {
        self.actors
            .iter()
            .filter(|a| a.attempts > 0 && a.role == Role::Active)
            .all(|a| a.state == super::ActorState::TaskCompleted)
    }
}
