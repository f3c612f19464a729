//! Starting and stopping attempts: announcing a cycle, building an attempt's start (its
//! environment is the contract of `env.rs`), and asking for a stop with its reason.

use super::env::{self, Placement};
use super::{ActorState, Driver, DriverEffect, Run, StopReason};
use crate::event::JobEvent;
use crate::ids::ActorIx;
use crate::protocol::{AttemptKey, StartSpec};
use crate::time::Instant;

impl Driver {
    pub(super) fn announce_cycle(&mut self) {
        let master = self.master.clone().expect("a cycle has a master");
        let (ranks, world_size) = self.mode().ranks(self);
        self.event(JobEvent::CycleFormed {
            cycle: self.cycle,
            world_size,
            master_addr: master.addr,
            master_port: master.port,
            ranks,
        });
    }

    pub(super) fn start(&mut self, now: Instant, ix: ActorIx, rank: u32, world_size: u32) {
        let master = self.master.clone().expect("starting without a master");
        let actor = &mut self.actors[ix as usize];
        let node = actor.bundle.node().expect("starting on a placed bundle").name.clone();
        actor.attempts += 1;
        actor.rank = Some(rank);
        let key = AttemptKey { job: self.id.clone(), actor: ix, attempt: actor.attempts, cycle: self.cycle };
        let env = env::contract(&Placement {
            job: &self.id,
            spec: &self.spec,
            actor: &actor.name,
            attempt: actor.attempts,
            cycle: self.cycle,
            rank,
            world_size,
            master_addr: &master.addr,
            master_port: master.port,
            node: &node,
        });
        let spec = StartSpec {
            key: key.clone(),
            actor_name: actor.name.to_string(),
            command: self.spec.command.clone(),
            env,
            cwd: self.spec.cwd.clone(),
            stop_grace_ms: self.spec.stop_grace_ms,
        };
        actor.run = Some(Run {
            attempt: key.attempt,
            cycle: self.cycle,
            rank,
            node: node.clone(),
            started: now,
            acked: false,
            stop: None,
            exited: None,
            draining: false,
        });
        self.effects.push_back(DriverEffect::Start { node, spec });
        self.transition(ix, ActorState::Running);
    }

    pub(super) fn stop_run(&mut self, ix: ActorIx, reason: StopReason, grace_ms: u64) {
        let key = self.key_of(ix);
        let run = self.actors[ix as usize].run.as_mut().expect("stopping a live attempt");
        run.stop = Some(reason);
        let node = run.node.clone();
        self.effects.push_back(DriverEffect::Stop { node, key, grace_ms });
    }
}
