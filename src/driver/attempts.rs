//! Starting and stopping attempts: announcing a cycle, building an attempt's start (its
//! environment is the contract of `env.rs`), and asking for a stop with its reason.

use super::env::{self, Placement};
use super::{ActorState, Bundle, DrainSource, Driver, DriverEffect, Run, StopReason};
use crate::event::JobEvent;
use crate::ids::ActorIx;
use crate::protocol::{AttemptKey, StartSpec};
use crate::time::Instant;

impl Driver {
    pub(super) fn announce_cycle(&mut self, now: Instant) {
        let master = self.master.clone().expect("a cycle has a master");
        let (ranks, world_size) = self.mode().ranks(self);
        if self.cycle_starts.len() == super::MAX_CYCLE_STARTS {
            self.cycle_starts.remove(0);
        }
        self.cycle_starts.push(super::CycleStart { cycle: self.cycle, at_ms: now.as_ms(), world_size });
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
        let Bundle::Placed { node, port, devices, .. } = &actor.bundle else {
            panic!("{} starts without a bundle", actor.name)
        };
        let (node, port, devices) = (node.name.clone(), *port, *devices);
        actor.attempts += 1;
        actor.rank = Some(rank);
        actor.run = Some(Run {
            attempt: actor.attempts,
            cycle: self.cycle,
            rank,
            world_size,
            node: node.clone(),
            port,
            devices,
            master,
            started: now,
            acked: false,
            stop: None,
            stop_grace_ms: 0,
            exited: None,
            draining: false,
            drained_by: DrainSource::Notice,
            restarts: self.budgets.user_charged(),
            losses_before: self.losses_recorded,
        });
        let spec = self.start_spec(ix).expect("a run was just made");
        self.effects.push_back(DriverEffect::Start { node, spec });
        self.transition(ix, ActorState::Running);
    }

    /// What the agent is told to start for the actor's live attempt; the same at every call.
    pub fn start_spec(&self, ix: ActorIx) -> Option<StartSpec> {
        let actor = self.actors.get(ix as usize)?;
        let run = actor.run.as_ref()?;
        let key = AttemptKey { job: self.id.clone(), actor: ix, attempt: run.attempt, cycle: run.cycle };
        let env = env::contract(&Placement {
            job: &self.id,
            spec: &self.spec,
            actor: &actor.name,
            attempt: run.attempt,
            cycle: run.cycle,
            rank: run.rank,
            world_size: run.world_size,
            master_addr: &run.master.addr,
            master_port: run.master.port,
            node: &run.node,
            devices: run.devices,
            restarts: run.restarts,
        });
        Some(StartSpec {
            key,
            actor_name: actor.name.to_string(),
            command: self.spec.command.clone(),
            env,
            cwd: self.spec.cwd.clone(),
            stop_grace_ms: self.spec.stop_grace_ms,
            nproc_per_node: self.spec.nproc_per_node,
            group_rank: run.rank,
        })
    }

    pub(super) fn stop_run(&mut self, ix: ActorIx, reason: StopReason, grace_ms: u64) {
        let key = self.key_of(ix);
        let run = self.actors[ix as usize].run.as_mut().expect("stopping a live attempt");
        run.stop = Some(reason);
        run.stop_grace_ms = grace_ms;
        let node = run.node.clone();
        self.effects.push_back(DriverEffect::Stop { node, key, grace_ms });
    }
}
