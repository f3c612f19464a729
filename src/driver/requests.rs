//! What bundles the job needs and says so to the scheduler: the required gang at submission,
//! then — once admitted — lost ranks it needs to stay at `min_nodes` or to run at all (rank 0
//! in actor mode) (`Need::Restore`, FIFO by loss), growth towards `max_nodes`, and spares.
//! Which queue class a need goes to is the scheduler policy's decision
//! (`scheduler/policy.rs`), not the driver's.

use super::{Actor, ActorState, Bundle, CloseReason, Driver, DriverEffect, Role, Timer};
use crate::event::JobEvent;
use crate::ids::ActorIx;
use crate::scheduler::Need;
use crate::time::Instant;

impl Driver {
    pub(super) fn request_initial_bundles(&mut self) {
        self.effects.push_back(DriverEffect::RequestGang);
        for ix in 0..self.spec.min_nodes {
            self.actors[ix as usize].bundle = Bundle::Requested { need: Need::Admission };
        }
        for ix in self.spec.min_nodes..self.spec.actor_count() {
            let need = if ix < self.spec.max_nodes { Need::Growth } else { Need::Spare };
            self.request(ix, need);
        }
    }

    /// Asks for every missing bundle: as many active ranks as the job needs to stay at
    /// `min_nodes` as restorations, the rest as growth, spares as spares.
    pub(super) fn refresh_requests(&mut self) {
        if !self.admitted {
            return;
        }
        let placed_active = self.placed_active();
        let mut active: Vec<ActorIx> = self.waiting_for_bundle(Role::Active).collect();
        active.sort_by_key(|ix| self.replacement_order(*ix));
        let deficit = self.spec.min_nodes.saturating_sub(placed_active) as usize;
        for (n, ix) in active.into_iter().enumerate() {
            let lost_at = self.actors[ix as usize].lost_at.unwrap_or(self.submitted);
            let restore = n < deficit || self.nothing_runs_without(ix);
            let need = if restore { Need::Restore { lost_at } } else { Need::Growth };
            self.ensure_requested(ix, need);
        }
        let spares: Vec<ActorIx> = self.waiting_for_bundle(Role::Spare).collect();
        for ix in spares {
            self.ensure_requested(ix, Need::Spare);
        }
    }

    /// Active ranks, not ended, that hold a bundle: what counts towards `min_nodes`.
    pub(super) fn placed_active(&self) -> u32 {
        let placed = |a: &&Actor| a.role == Role::Active && !a.state.is_terminal() && a.bundle.is_placed();
        self.actors.iter().filter(placed).count() as u32
    }

    /// A waiting rank 0 of a mode that starts nothing without it is a restoration even when
    /// other bundles make up `min_nodes`: as growth it could wait forever behind a pending
    /// gang that needs the capacity its own job's spare holds (swarm seed 41772).
    pub(super) fn nothing_runs_without(&self, ix: ActorIx) -> bool {
        self.mode().rank0_first() && self.actors[ix as usize].slot == Some(0)
    }

    /// Which waiting ranks are restored first: rank 0 where the mode needs it first, then
    /// actors that lost a bundle in loss order, then the rest by index — a rank that never ran
    /// must not take the place of one that was lost.
    pub(super) fn replacement_order(&self, ix: ActorIx) -> (bool, bool, Instant, ActorIx) {
        let actor = &self.actors[ix as usize];
        let rank0 = self.mode().rank0_first() && actor.slot == Some(0);
        (!rank0, actor.lost_at.is_none(), actor.lost_at.unwrap_or(Instant::ZERO), ix)
    }

    /// Actors of `role` without a bundle that could still use one. While terminating, actors
    /// that never started (and spares) get no new requests: they will never run.
    pub(super) fn waiting_for_bundle(&self, role: Role) -> impl Iterator<Item = ActorIx> + '_ {
        (0..self.actors.len() as ActorIx).filter(move |ix| {
            let a = &self.actors[*ix as usize];
            let never_runs = self.terminating && a.never_runs_once_terminating();
            a.role == role && a.state == ActorState::Scheduling && !a.bundle.is_placed() && !a.parked && !never_runs
        })
    }

    fn ensure_requested(&mut self, ix: ActorIx, need: Need) {
        if self.actors[ix as usize].bundle != (Bundle::Requested { need }) {
            self.request(ix, need);
        }
    }

    fn request(&mut self, ix: ActorIx, need: Need) {
        self.actors[ix as usize].bundle = Bundle::Requested { need };
        self.effects.push_back(DriverEffect::Request { actor: ix, need });
    }

    /// Active actors that could start now: waiting, on a usable bundle.
    pub(super) fn startable(&self) -> impl Iterator<Item = ActorIx> + '_ {
        (0..self.actors.len() as ActorIx).filter(|ix| {
            let a = &self.actors[*ix as usize];
            a.role == Role::Active && a.state == ActorState::Scheduling && a.bundle.is_usable() && !a.parked
        })
    }

    /// `schedule_timeout_ms`: the job fails if it stays below `min_nodes` placed for that long.
    pub(super) fn track_placement_deadline(&mut self, now: Instant) {
        let Some(timeout) = self.spec.schedule_timeout_ms else { return };
        let placed = self.actors.iter().filter(|a| a.role == Role::Active && a.bundle.is_placed()).count() as u32;
        let short = !self.admitted || placed < self.spec.min_nodes;
        match (short, self.timers.is_set(Timer::ScheduleDeadline)) {
            (true, false) => self.timers.set(Timer::ScheduleDeadline, now.plus_ms(timeout)),
            (false, true) => self.timers.stop(Timer::ScheduleDeadline),
            _ => {}
        }
    }

    /// The schedule deadline passed with the job still short of `min_nodes`.
    pub(super) fn fail_unplaced(&mut self, now: Instant) {
        let ms = self.spec.schedule_timeout_ms.unwrap_or_default();
        let why = self.waiting.take().or_else(|| self.infeasible.clone());
        let why = why.unwrap_or_else(|| "not enough free capacity".into());
        let message = format!("not placed within schedule_timeout_ms ({ms} ms): {why}");
        self.close(now, CloseReason::Failed, Some(message));
    }

    /// Gives up whatever bundle the actor has or waits for.
    pub(super) fn drop_bundle(&mut self, ix: ActorIx) {
        let effect = match self.actors[ix as usize].bundle {
            Bundle::None => return,
            Bundle::Requested { .. } => DriverEffect::Cancel { actor: ix },
            Bundle::Placed { .. } => DriverEffect::Release { actor: ix },
        };
        self.actors[ix as usize].clear_bundle();
        self.effects.push_back(effect);
    }

    pub(super) fn release_unused(&mut self, ix: ActorIx) {
        self.drop_bundle(ix);
        let actor = self.actors[ix as usize].name.clone();
        self.event(JobEvent::ReleasedUnused { actor });
    }
}
