//! How an attempt's end is settled: its verdict (from `classify.rs`), the wait in FAILING
//! while a non-zero exit may still be explained by a peer's node loss, the charge, the ledger
//! entry, and what the actor does next — retry (with a spare promoted), fail the job, or rest;
//! and, after every input, who may take a rank: spares take the ranks of waiting actors the
//! job needs, and no attempt starts on a preemptible node once the last one must not.
//!
//! - **FC-1 one fault, one charge.** The attempts one node loss or one drain ends (several
//!   ranks of a packed gang on one machine) charge the budget once: the first to settle is
//!   charged, the others keep their cause with budget `none` and name the one charged.
//! - **FC-2 one incident, one charge.** Nodes that went silent within a heartbeat interval
//!   and a half of each other (a rack's switch or power feed, a zone) were lost in one
//!   incident: the job is charged once for it, to the first of its losses to settle, as
//!   torchelastic counts one restart for a group's failure; the others keep their cause with
//!   budget `none` and name the node and the actor charged. Every node failing together was
//!   last heard at some point of the interval before the failure, hence the window. Each loss
//!   is compared with the losses charged, not with those it was grouped with, so an incident
//!   never grows link by link into a chain of unrelated losses; and only within one budget
//!   (a preemptible node lost beside another node charges `preemption` and `system` once each).
//! - **AT-1 no wait once no peer can excuse.** A failure waits for word of a peer's node loss
//!   only while one could still come: a loss excuses it only if the node went silent (was
//!   last heard) no later than the exit, so once every peer still running is on a node heard
//!   from after the exit, it is decided — in a heartbeat, not a node timeout. An actor-mode
//!   rank's peers run on, and its restart waited out `node_timeout_ms` for nothing.
//! - **AT-2 a restart hides when.** A node the head lost across its own restart (it never
//!   reported to the restarted head) went silent at a time nobody knows, perhaps before a
//!   peer's exit that the run before the restart saw: that loss excuses it. A failure pending
//!   across a restart waits until the recovery window closes, when such a loss is known.
//! - **AT-3 a window closes after its instant.** A failure whose wait is over is decided by
//!   its timer, which the head runs after every other input of that instant: losses declared
//!   together (the nodes that did not report to a restarted head, at the end of its window)
//!   all reach the driver first. Decided by the first of them, a rank's exit was judged
//!   before the loss of the peer it reacted to arrived (swarm seed 7418383).
//! - **AT-4 a known loss excuses no later start.** A loss excuses only the attempts that were
//!   running when it was recorded: one started after the driver knew of it (in actor mode,
//!   whose cycle never ends, any restart later on) fails on its own account. Otherwise a rank
//!   failing at every start for a reason of its own (a port something else holds) was excused
//!   by one peer's loss long gone, for free and for ever (swarm seed 8370927).

use super::budget::backoff_ms;
use super::classify::{classify, fatal_message, Ending, Fault, JobContext, PeerLoss, Verdict};
use super::{Actor, Loss, LossRecord, PendingFailure, Role, Run, Timer, MAX_LOSS_RECORDS};
use super::{ActorState, BudgetKind, Bundle, Cause, Charge, CloseReason, Driver, DriverEffect, LedgerEntry};
use crate::event::JobEvent;
use crate::ids::{ActorId, ActorIx, NodeId};
use crate::protocol::ExitStatus;
use crate::scheduler::PolicyFault;
use crate::time::Instant;
use std::collections::VecDeque;

/// Faults remembered to charge each once (FC-1, FC-2); a bound, since a job may outlive many.
const MAX_REMEMBERED_FAULTS: usize = 64;

/// Keeps `charged` among the latest faults: the attempts a fault ends settle close together,
/// so the latest few are enough.
fn remember<T>(faults: &mut VecDeque<T>, charged: T) {
    if faults.len() == MAX_REMEMBERED_FAULTS {
        faults.pop_front();
    }
    faults.push_back(charged);
}

/// Which pending failures to decide now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Decide {
    /// Every one (the job is closing: nothing it decides is charged).
    Every,
    /// Those whose wait is over, by their window or by word from every peer (the timer,
    /// AT-3).
    WindowOver,
    /// Those whose every live peer was heard from since (AT-1): after any other input.
    PeersHeard,
}

impl Driver {
    pub(super) fn job_context(&self) -> JobContext<'_> {
        JobContext {
            policy: &self.spec.retries,
            nproc_per_node: self.spec.nproc_per_node,
            program: &self.spec.command[0],
            closing: self.closing,
        }
    }

    /// Ends the live attempt of `ix` as `ending` says: ledger entry, charge, next state.
    pub(super) fn end_attempt(&mut self, now: Instant, ix: ActorIx, ending: Ending) {
        let run = self.actors[ix as usize].run.take().expect("ending a live attempt");
        let verdict = classify(&self.job_context(), &run, ending);
        let status = match ending {
            Ending::Exited { status, .. } => Some(status.clone()),
            Ending::EndedAfterSuccess(_) | Ending::GangSucceeded => run.exited.as_ref().map(|(s, _)| s.clone()),
            Ending::SpawnFailed { .. } | Ending::NodeLost(_) => None,
        };
        match (verdict.cause, status) {
            (Cause::UserError, Some(status)) if self.closing.is_none() => self.await_attribution(now, ix, run, status),
            (_, status) => self.settle_attempt(now, ix, run, verdict, status),
        }
    }

    /// A non-zero exit waits in FAILING until every peer of its cycle has ended (in gang mode
    /// they are stopped now) or one node timeout has passed: if a peer's node went silent
    /// before this exit, the exit was a reaction to that loss and charges nothing.
    fn await_attribution(&mut self, now: Instant, ix: ActorIx, run: Run, status: ExitStatus) {
        self.transition_failing(ix, &run);
        self.timers.set(Timer::Attribution(ix), now.plus_ms(self.attribution_window_ms));
        self.pending.insert(ix, PendingFailure { run, status, at: now, heard: Default::default() });
        self.mode().on_failure_noticed(self, now, ix);
    }

    /// Decides the pending failures `which` names.
    pub(super) fn decide_pending(&mut self, now: Instant, which: Decide) {
        let due: Vec<ActorIx> = self
            .pending
            .iter()
            .filter(|(ix, p)| {
                let window_over = || self.timers.get(Timer::Attribution(**ix)).is_none_or(|t| t <= now);
                match which {
                    Decide::Every => true,
                    Decide::WindowOver => window_over() || !self.peers_unheard(**ix, p),
                    Decide::PeersHeard => !self.peers_unheard(**ix, p),
                }
            })
            .map(|(ix, _)| *ix)
            .collect();
        for ix in due {
            // Deciding one may close the job, which decides the rest.
            let Some(failed) = self.pending.remove(&ix) else { continue };
            self.timers.stop(Timer::Attribution(ix));
            let verdict = self.attribute(ix, &failed);
            // The attempt ended when its process exited, not when the wait for its peers did.
            let run = Run { exited: Some((failed.status.clone(), failed.at)), ..failed.run };
            self.settle_attempt(now, ix, run, verdict, Some(failed.status));
        }
    }

    /// The verdict on a failure that waited: a reaction to a peer's earlier node loss, or not.
    fn attribute(&self, ix: ActorIx, failed: &PendingFailure) -> Verdict {
        let root = self
            .losses
            .iter()
            .find(|l| {
                let before_the_exit = l.unheard_since_restart || l.silent_since <= failed.at;
                l.cycle == failed.run.cycle && l.actor != ix && before_the_exit && l.after_start_of(&failed.run)
            })
            .map(|l| PeerLoss {
                peer: &self.actors[l.actor as usize].name,
                node: &l.node,
                silent_since: l.silent_since,
                unheard_since_restart: l.unheard_since_restart,
            });
        classify(&self.job_context(), &failed.run, Ending::Exited { status: &failed.status, reacting_to: root })
    }

    /// Keeps a rank lost with its node, to attribute its peers' failures to (AT-1, AT-4).
    pub(super) fn record_loss(&mut self, cycle: u32, actor: ActorIx, loss: &Loss) {
        self.losses_recorded += 1;
        if self.losses.len() == MAX_LOSS_RECORDS {
            self.losses.remove(0);
        }
        self.losses.push(LossRecord::of(cycle, actor, loss, self.losses_recorded));
    }

    /// Does another rank of `failed`'s cycle still (possibly) run on a node not heard from
    /// since the exit (AT-1)?
    fn peers_unheard(&self, ix: ActorIx, failed: &PendingFailure) -> bool {
        self.live_peers(ix, failed.run.cycle).any(|node| !failed.heard.contains(node))
    }

    /// The nodes of the other ranks of `cycle` that still (possibly) run.
    fn live_peers(&self, ix: ActorIx, cycle: u32) -> impl Iterator<Item = &NodeId> {
        self.actors.iter().enumerate().filter(move |(i, _)| *i as ActorIx != ix).filter_map(move |(_, a)| {
            a.run.as_ref().filter(|r| r.cycle == cycle && r.exited.is_none()).map(|r| &r.node)
        })
    }

    /// Whether a pending failure waits for word from `node` (AT-1): a live peer runs there,
    /// and it has not been heard from since the exit. The head tells only such drivers.
    pub fn awaits_word_from(&self, node: &NodeId, now: Instant) -> bool {
        self.pending.iter().any(|(ix, p)| {
            now > p.at && !p.heard.contains(node) && self.live_peers(*ix, p.run.cycle).any(|n| n == node)
        })
    }

    /// AT-2: a restored head learns of the losses that could excuse a pending failure only
    /// when its recovery window closes, at `until`: none is decided before then for want of
    /// word.
    pub fn hold_attribution_until(&mut self, until: Instant) {
        let pending: Vec<ActorIx> = self.pending.keys().copied().collect();
        for ix in pending {
            if self.timers.get(Timer::Attribution(ix)).is_some_and(|at| at < until) {
                self.timers.set(Timer::Attribution(ix), until);
            }
        }
    }

    /// Whether a failure waits to be attributed.
    pub fn awaits_attribution(&self) -> bool {
        !self.pending.is_empty()
    }

    /// `node` was heard from: no loss of it can excuse a failure from before now (AT-1).
    pub(super) fn on_node_heard(&mut self, now: Instant, node: NodeId) {
        for failed in self.pending.values_mut().filter(|p| now > p.at) {
            failed.heard.insert(node.clone());
        }
    }

    fn transition_failing(&mut self, ix: ActorIx, run: &Run) {
        // The transition event names the attempt that ended; put the run back for a moment.
        self.actors[ix as usize].run = Some(run.clone());
        self.transition(ix, ActorState::Failing);
        self.actors[ix as usize].run = None;
    }

    /// Charges and records an ended attempt, then takes the actor to its next state.
    fn settle_attempt(&mut self, now: Instant, ix: ActorIx, run: Run, verdict: Verdict, status: Option<ExitStatus>) {
        let verdict = self.charge_once_per_fault(ix, verdict);
        let charge = self.budgets.charge(verdict.budget);
        let cause = verdict.cause;
        self.record(ix, &run, now, verdict, status, charge);
        if cause == Cause::Completed {
            self.transition(ix, ActorState::TaskCompleted);
            self.drop_bundle(ix);
            return self.mode().on_completed(self);
        }
        if self.closing.is_some() {
            self.transition(ix, ActorState::Stopped);
            return self.drop_bundle(ix);
        }
        if self.actors[ix as usize].state != ActorState::Failing {
            // With the ended attempt's node and rank: a lost node's bundle is already gone.
            self.transition_failing(ix, &run);
        }
        let ledger_full = self.ledger.len() >= self.max_ledger_entries;
        if cause.row().fails_job || matches!(charge, Charge::Exhausted(_)) || ledger_full {
            self.transition(ix, ActorState::Failed);
            self.drop_bundle(ix);
            let actor = &self.actors[ix as usize].name;
            let why = match ledger_full {
                true => format!(
                    "{actor} failed ({cause}) and the job's ledger is full: {} attempts ended, the most a job \
                     keeps; fix what makes it fail, or give it a retry budget and a backoff",
                    self.max_ledger_entries
                ),
                false => fatal_message(actor, cause, charge),
            };
            return self.close(now, CloseReason::Failed, Some(why));
        }
        if let Charge::Charged(kind) = charge {
            self.charged_failures += 1;
            self.maybe_avoid_preemptible(kind);
        }
        if matches!(self.actors[ix as usize].bundle, Bundle::Placed { draining: true, .. }) {
            self.drop_bundle(ix);
            self.actors[ix as usize].lost_at = Some(now);
        }
        if cause.row().actor_failed {
            self.on_rank_failed(now, ix);
        } else {
            self.transition(ix, ActorState::Scheduling);
        }
    }

    /// FC-1: a fault already charged for another attempt charges nothing more; FC-2: nor
    /// does a loss in one incident with a loss already charged.
    fn charge_once_per_fault(&mut self, ix: ActorIx, mut verdict: Verdict) -> Verdict {
        let charged = verdict.budget != BudgetKind::None && self.policy_fault != PolicyFault::ChargeEveryRank;
        let Some(fault) = verdict.fault.clone().filter(|_| charged) else {
            return verdict;
        };
        if let Some((_, first)) = self.charged_faults.iter().find(|(charged, _)| *charged == fault) {
            verdict.evidence =
                format!("{}; one fault of node {}, charged once, to {first}", verdict.evidence, fault.node);
            verdict.budget = BudgetKind::None;
            return verdict;
        }
        if let Some((lost, first)) = self.incident_of(&fault, verdict.budget) {
            verdict.evidence = format!(
                "{}; lost in one incident with node {lost} (silent within {} ms of each other), charged once, to {first}",
                verdict.evidence, self.incident_window_ms
            );
            verdict.budget = BudgetKind::None;
            return verdict;
        }
        let actor = self.actors[ix as usize].name.clone();
        if fault.silence {
            remember(&mut self.charged_losses, (fault.clone(), verdict.budget, actor.clone()));
        }
        remember(&mut self.charged_faults, (fault, actor));
        verdict
    }

    /// FC-2: the node and actor charged for a loss of another node, to the same budget, whose
    /// silence began within the incident window of this one's.
    fn incident_of(&self, fault: &Fault, budget: BudgetKind) -> Option<(NodeId, ActorId)> {
        if !fault.silence {
            return None;
        }
        let near = |at: Instant| at.ms_since(fault.at).max(fault.at.ms_since(at)) <= self.incident_window_ms;
        let mut charged = self.charged_losses.iter();
        let (lost, _, first) =
            charged.find(|(lost, kind, _)| *kind == budget && lost.node != fault.node && near(lost.at))?;
        Some((lost.node.clone(), first.clone()))
    }

    fn record(&mut self, ix: ActorIx, run: &Run, now: Instant, v: Verdict, status: Option<ExitStatus>, charge: Charge) {
        let evidence = match charge {
            Charge::Exhausted(kind) => format!("{}; the {kind} budget is exhausted", v.evidence),
            _ => v.evidence,
        };
        let heard = run.exited.as_ref().map_or(now, |(_, t)| *t);
        let entry = LedgerEntry {
            actor: self.actors[ix as usize].name.clone(),
            rank: Some(run.rank),
            attempt: run.attempt,
            cycle: run.cycle,
            node: run.node.to_string(),
            start_ms: run.started.as_ms(),
            end_ms: status.as_ref().map_or(heard, |s| s.ended_at(run.started, heard)).as_ms(),
            exit_code: status.as_ref().and_then(|s| s.code),
            signal: status.as_ref().and_then(|s| s.signal),
            cause: v.cause,
            evidence,
            budget: charge.budget(),
            remaining: self.budgets.remaining(),
        };
        self.ledger.push(entry.clone());
        self.event(JobEvent::Ledger { entry });
    }

    /// `last_attempt_non_preemptible`: once a preemption or system charge leaves that budget
    /// at 0, the job's last allowed attempt must run where it will not be taken away.
    fn maybe_avoid_preemptible(&mut self, kind: BudgetKind) {
        let relevant = matches!(kind, BudgetKind::Preemption | BudgetKind::System);
        if self.spec.last_attempt_non_preemptible
            && relevant
            && self.budgets.left(kind).is_exhausted()
            && !self.avoiding_preemptible
        {
            self.avoiding_preemptible = true;
            self.effects.push_back(DriverEffect::AvoidPreemptible);
        }
    }

    /// Once `last_attempt_non_preemptible` has triggered, no attempt starts on a preemptible
    /// node: an actor waiting to start (a rank restarting, a spare standing by) gives back a
    /// bundle it holds on one and asks for one off such nodes. A rank restarted in place would
    /// run its last allowed attempt where it can be taken away; a spare kept there would hold
    /// capacity it can never use (`can_take_a_rank`) — and for a STRICT_PACK job, pin the group
    /// to a node its ranks may no longer use, so that a lost rank could never be placed again
    /// (swarm seed 363153). Running attempts are left alone: stopping one to move it would cost
    /// the work it has done. A rank moved off may then be taken over by a spare standing by
    /// elsewhere (`hand_waiting_ranks_to_spares`).
    pub(super) fn keep_off_preemptible_nodes(&mut self, now: Instant) {
        if !self.avoiding_preemptible || self.policy_fault == PolicyFault::KeepPreemptibleBundles {
            return;
        }
        for ix in 0..self.actors.len() as ActorIx {
            let a = &self.actors[ix as usize];
            let waiting = matches!(a.state, ActorState::Scheduling | ActorState::Standby) && a.run.is_none();
            if !(waiting && a.bundle.is_usable() && a.bundle.on_preemptible_node()) {
                continue;
            }
            let (standby, active) = (a.state == ActorState::Standby, a.role == Role::Active);
            self.drop_bundle(ix);
            if standby {
                self.transition(ix, ActorState::Scheduling);
            }
            if active {
                self.actors[ix as usize].lost_at = Some(now);
            }
        }
    }

    /// A rank failed and will be retried: the mode restarts it (or the gang) after backoff,
    /// with a spare taking its place when one is standing by.
    fn on_rank_failed(&mut self, now: Instant, ix: ActorIx) {
        let delay_ms = backoff_ms(&self.spec.retries.backoff_ms, self.charged_failures, &mut self.rng);
        let promoted = self.promote_spare(ix);
        self.mode().restart_after(self, now, ix, promoted, delay_ms);
        self.transition(ix, ActorState::Scheduling);
        let actor = &self.actors[ix as usize];
        if actor.role == Role::Spare && actor.bundle.is_usable() {
            self.stand_by(now, ix);
        }
    }

    /// A rank waiting for a bundle that the job needs to stay at `min_nodes` (or, in actor mode,
    /// to start at all) is taken over by a spare standing by, as a failed rank is, with what is
    /// left of its backoff — whenever the two meet, however they came to: the rank lost its
    /// bundle (with its node, or to a drain) while a spare stood by, or a spare was placed
    /// while the rank waited. Left to wait for a new node, such a rank waited for ever where the
    /// job's own spare held the only node it could use (swarm seeds 2303244, 7748293, 34296).
    pub(super) fn hand_waiting_ranks_to_spares(&mut self, now: Instant) {
        if !self.admitted || !self.actors.iter().any(|a| self.can_take_a_rank(a)) {
            return;
        }
        let mut waiting: Vec<ActorIx> = self.waiting_for_bundle(Role::Active).collect();
        waiting.sort_by_key(|ix| self.replacement_order(*ix));
        let mut placed_active = self.placed_active();
        for ix in waiting {
            if placed_active >= self.spec.min_nodes && !self.nothing_runs_without(ix) {
                continue;
            }
            let Some(spare) = self.promote_spare(ix) else { return };
            placed_active += 1; // the spare brings its bundle; the rank it replaces had none
            if let Some(at) = self.timers.get(Timer::ActorBackoff(ix)).filter(|at| *at > now) {
                self.timers.stop(Timer::ActorBackoff(ix));
                self.timers.set(Timer::ActorBackoff(spare), at);
            }
        }
    }

    /// Swaps the first standing-by spare into `failed`'s rank. Returns the spare.
    pub(super) fn promote_spare(&mut self, failed: ActorIx) -> Option<ActorIx> {
        if self.terminating {
            return None;
        }
        let spare = self.actors.iter().position(|a| self.can_take_a_rank(a))? as ActorIx;
        let slot = self.actors[failed as usize].slot.take();
        self.actors[failed as usize].role = Role::Spare;
        // Its rank is the spare's now: two actors must never show the same one.
        self.actors[failed as usize].rank = None;
        let promoted = &mut self.actors[spare as usize];
        promoted.role = Role::Active;
        promoted.slot = slot;
        if let Some(pos) = self.world.iter().position(|w| *w == failed) {
            self.world[pos] = spare;
        }
        self.transition(spare, ActorState::Scheduling);
        let (spare_name, failed_name) =
            (self.actors[spare as usize].name.clone(), self.actors[failed as usize].name.clone());
        self.event(JobEvent::Promoted { spare: spare_name, replaces: failed_name });
        Some(spare)
    }

    /// A spare standing by on a usable bundle — and, once `last_attempt_non_preemptible` keeps
    /// the job's placements off preemptible nodes, not on one of those: a promotion hands the
    /// rank a bundle as a placement would, so the same rule holds for it.
    fn can_take_a_rank(&self, a: &Actor) -> bool {
        let kept_off = self.avoiding_preemptible && self.policy_fault != PolicyFault::KeepPreemptibleBundles;
        a.role == Role::Spare
            && a.state == ActorState::Standby
            && a.bundle.is_usable()
            && !(kept_off && a.bundle.on_preemptible_node())
    }
}
