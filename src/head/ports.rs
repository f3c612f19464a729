//! Moving bundles off ports something else on their machine came to listen on (PS-4 in
//! `scheduler/cluster.rs`): the scheduler knows which ports are busy, the head which attempts
//! run on them.

use super::Head;
use crate::driver::DriverInput;
use crate::scheduler::{NodeIx, PgId};
use crate::time::Instant;

impl Head {
    /// What listens on `ix`'s machine now (PS-3), and the node's bundles moved off those ports
    /// where no attempt of theirs runs: a running one keeps its port, since its own rank 0 may
    /// be the listener. Every agent of a machine reports the same change, so each node's
    /// bundles are looked at when its own report arrives.
    pub(super) fn note_listening(&mut self, now: Instant, ix: NodeIx, ports: Vec<u16>) {
        self.scheduler.note_listening(ix, ports);
        let bundles: Vec<(PgId, u32)> = self.scheduler.node(ix).bundles.iter().copied().collect();
        for (pg, bundle) in bundles {
            let job = &self.by_pg[&pg];
            if !self.attempts.runs_actor(ix, job, bundle) {
                self.move_off_busy_port(now, pg, bundle, false);
            }
        }
    }

    /// Gives the bundle an idle port if something else listens on its own, and tells its
    /// driver, so that the next attempt started from it serves the rendezvous there.
    /// `by_its_node`: as its own node's agent last said (`Scheduler::move_off_busy_port`).
    pub(super) fn move_off_busy_port(&mut self, now: Instant, pg: PgId, bundle: u32, by_its_node: bool) {
        if let Some(port) = self.scheduler.move_off_busy_port(pg, bundle, by_its_node) {
            self.feed(now, pg, DriverInput::PortMoved { actor: bundle, port });
        }
    }
}
