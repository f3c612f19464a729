//! Gang mode (torchelastic semantics): any failure stops every rank and a new cycle forms from
//! the live bundles; ranks that exit 0 wait for their peers; growth restarts the world after
//! `scale_up_delay_ms`.

use super::classify::Ending;
use super::{ActorState, Bundle, CloseReason, Driver, JobState, Master, Mode, Run, StopReason, Timer};
use crate::ids::{ActorId, ActorIx};
use crate::scheduler::PolicyFault;
use crate::time::Instant;

pub(super) struct Gang;

impl Mode for Gang {
    fn make_progress(&self, d: &mut Driver, now: Instant) {
        d.try_form_cycle(now);
    }

    fn success_waits_for_peers(&self) -> bool {
        true
    }

    fn on_failure_noticed(&self, d: &mut Driver, now: Instant, failed: ActorIx) {
        d.stop_world(now, failed);
    }

    fn restart_after(&self, d: &mut Driver, now: Instant, failed: ActorIx, _: Option<ActorIx>, delay_ms: u64) {
        d.timers.set(Timer::CycleBackoff, now.plus_ms(delay_ms));
        d.backing_off(None, now, delay_ms);
        d.timers.stop(Timer::ScaleUp);
        d.stop_world(now, failed);
    }

    fn on_completed(&self, _: &mut Driver) {}

    fn ranks(&self, d: &Driver) -> (Vec<ActorId>, u32) {
        let ranks: Vec<ActorId> = d.world.iter().map(|w| d.actors[*w as usize].name.clone()).collect();
        let world_size = ranks.len() as u32;
        (ranks, world_size)
    }

    fn grows_by_restart(&self) -> bool {
        true
    }

    fn rank0_first(&self) -> bool {
        false
    }
}

impl Driver {
    /// Forms the next cycle when nothing of the old one runs, the backoff has passed, and at
    /// least `min_nodes` active ranks have bundles.
    fn try_form_cycle(&mut self, now: Instant) {
        let busy = self.actors.iter().any(|a| matches!(a.state, ActorState::Running | ActorState::Failing));
        if !self.admitted || busy || self.timers.pending_at(Timer::CycleBackoff, now) {
            return;
        }
        let members: Vec<ActorIx> = self.startable().collect();
        if members.len() < self.spec.min_nodes as usize {
            return;
        }
        let order = self.rank_order(&members);
        self.cycle += 1;
        self.losses.clear();
        self.world = order.clone();
        let rank0 = self.actors[order[0] as usize].bundle.clone();
        let Bundle::Placed { node, port, .. } = rank0 else { unreachable!("members are placed") };
        self.master = Some(Master { node: node.name.clone(), addr: node.addr.clone(), port });
        self.announce_cycle(now);
        let world_size = self.world.len() as u32;
        // A rank is of a cycle: an actor left out of this one (its node drained, none free)
        // holds none, or it would show the rank of the actor that has it now.
        for actor in &mut self.actors {
            actor.rank = None;
        }
        for (rank, ix) in order.into_iter().enumerate() {
            self.start(now, ix, rank as u32, world_size);
        }
        self.timers.stop(Timer::CycleBackoff);
        self.timers.stop(Timer::ScaleUp);
        self.set_job_state(now, JobState::Running);
    }

    /// Survivors keep their relative order, newcomers append by index; with `pack_by`, ranks
    /// are grouped by domain.
    fn rank_order(&self, members: &[ActorIx]) -> Vec<ActorIx> {
        let mut order: Vec<ActorIx> = self.world.iter().copied().filter(|w| members.contains(w)).collect();
        order.extend(members.iter().copied().filter(|m| !self.world.contains(m)));
        if self.spec.pack_by.is_some() && self.policy_fault != PolicyFault::RanksIgnoreDomains {
            order.sort_by_key(|ix| self.actors[*ix as usize].bundle.node().and_then(|n| n.domain.clone()));
        }
        order
    }

    /// Every other running rank is stopped (collateral); ranks that already exited 0 in this
    /// cycle end their attempt the same way.
    fn stop_world(&mut self, now: Instant, failed: ActorIx) {
        let because = self.actors[failed as usize].name.clone();
        let drained = match &self.actors[failed as usize].run {
            Some(Run { stop: Some(StopReason::Drain { node, .. }), .. }) => Some(node.clone()),
            _ => None,
        };
        for ix in 0..self.actors.len() as ActorIx {
            let Some(run) = &self.actors[ix as usize].run else { continue };
            if run.stop.is_some() {
                continue;
            }
            let reason = StopReason::Collateral { because: because.clone(), at: now, drained: drained.clone() };
            if run.exited.is_some() {
                self.end_attempt(now, ix, Ending::EndedAfterSuccess(&reason));
            } else {
                self.stop_run(ix, reason, self.spec.stop_grace_ms);
            }
        }
    }

    /// Stops the running world so that the next cycle includes newly placed ranks.
    pub(super) fn begin_scale_up(&mut self) {
        let busy = self.actors.iter().any(|a| a.run.as_ref().is_some_and(|r| r.stop.is_some() || r.exited.is_some()));
        if self.closing.is_some() || busy {
            return;
        }
        let newcomers = self.startable().filter(|ix| !self.world.contains(ix)).count() as u32;
        let running: Vec<ActorIx> =
            self.world.iter().copied().filter(|w| self.actors[*w as usize].run.is_some()).collect();
        if newcomers == 0 || running.is_empty() {
            return;
        }
        let from = self.world.len() as u32;
        let to = (from + newcomers).min(self.spec.max_nodes);
        for ix in running {
            self.stop_run(ix, StopReason::MembershipChange { from, to }, self.spec.stop_grace_ms);
        }
    }

    /// Every rank of the current cycle exited 0.
    pub(super) fn world_exited_ok(&self) -> bool {
        self.world.iter().all(|w| {
            self.actors[*w as usize].run.as_ref().is_some_and(|r| r.exited.as_ref().is_some_and(|(s, _)| s.success()))
        })
    }

    pub(super) fn complete_gang(&mut self, now: Instant) {
        for ix in self.world.clone() {
            self.end_attempt(now, ix, Ending::GangSucceeded);
        }
        self.close(now, CloseReason::Succeeded, None);
    }
}
