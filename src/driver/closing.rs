//! Closing a job (DESIGN §5): the rendezvous closes with a reason, spares end at once
//! (gracefully on success), waiting actors stop, running ones are asked to stop; the job
//! reaches its final state only once nothing of it is held.

use super::classify::Ending;
use super::failure::Decide;
use super::{ActorState, Bundle, CloseReason, Driver, DriverEffect, StopReason, Timer};
use crate::event::JobEvent;
use crate::ids::ActorIx;
use crate::time::Instant;

impl Driver {
    pub(super) fn close(&mut self, now: Instant, reason: CloseReason, message: Option<String>) {
        if self.closing.is_some() {
            return;
        }
        self.closing = Some(reason);
        self.message = message;
        for timer in [Timer::ScheduleDeadline, Timer::RunDeadline, Timer::ScaleUp, Timer::CycleBackoff] {
            self.timers.stop(timer);
        }
        self.event(JobEvent::Closing { reason });
        // Undecided failures are recorded as what they were; with the outcome decided, they
        // charge nothing.
        self.decide_pending(now, Decide::Every);
        for ix in 0..self.actors.len() as ActorIx {
            self.close_actor(now, ix, reason);
        }
    }

    fn close_actor(&mut self, now: Instant, ix: ActorIx, reason: CloseReason) {
        let actor = &self.actors[ix as usize];
        match actor.state {
            ActorState::Running => {
                let run = actor.run.as_ref().expect("a running actor has a run");
                let stop = match reason {
                    CloseReason::Stopped => StopReason::User,
                    _ => StopReason::JobFailed { because: self.message.clone().unwrap_or_default() },
                };
                if run.exited.is_some() {
                    // Exited 0 and waited for its peers: there is no process left to stop.
                    self.end_attempt(now, ix, Ending::EndedAfterSuccess(&stop));
                } else if run.stop.is_none() {
                    self.stop_run(ix, stop, self.spec.stop_grace_ms);
                }
            }
            ActorState::Standby => {
                let to = if reason == CloseReason::Succeeded { ActorState::TaskCompleted } else { ActorState::Stopped };
                self.transition(ix, to);
                self.drop_bundle(ix);
            }
            ActorState::Scheduling => {
                self.transition(ix, ActorState::Stopped);
                self.drop_bundle(ix);
            }
            ActorState::Failing => panic!("{} left in FAILING", actor.name),
            ActorState::TaskCompleted | ActorState::Failed | ActorState::Stopped => {}
        }
    }

    pub(super) fn finish_if_released(&mut self, now: Instant) {
        let Some(reason) = self.closing else { return };
        let done = self.actors.iter().all(|a| a.state.is_terminal() && a.bundle == Bundle::None);
        if done {
            self.finished_at = Some(now);
            self.set_job_state(now, reason.final_state());
            self.effects.push_back(DriverEffect::Finished);
        }
    }
}
