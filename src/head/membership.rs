//! Membership: agents registering (and re-registering after a reconnect or a restart),
//! heartbeats and the reconciliation they carry, preemption notices, and declaring a node
//! DEAD — with the drivers told which of their bundles went with it.
//!
//! - **MB-1 a cordon holds.** A node the operator drained (`Input::Drain`) is never ALIVE until
//!   the operator undrains it: not after an agent restart, a head restart, or its death and a
//!   new registration in its name. `register` drains a cordoned node as it joins; only
//!   `undrain` lifts the cordon — or the operator's `forget` of the DEAD node, after which the
//!   name is new (FG-2 in `forget.rs`). `check_cordons` asserts it.
//! - **HB-1 a listing confirms a start.** A heartbeat lists the processes its agent has
//!   spawned; one whose `Started` the head never got (dropped, or sent as the link went down)
//!   is confirmed by the listing. Otherwise it stays unconfirmed for good: a later agent
//!   restart would not count it lost, and the head would re-send a start that agent ignores
//!   as already run — the job would wait for an end that never comes (swarm seed 196998).

use super::liveness::Hold;
use super::{check_name, Effect, Head, Rejected, Reply};
use crate::driver::{DrainSource, DriverInput, Loss};
use crate::event::Event;
use crate::ids::NodeId;
use crate::protocol::{AttemptKey, ExitStatus, Registration};
use crate::resources::Devices;
use crate::scheduler::{NodeIx, NodeOffer, NodeState, PgId, PolicyFault};
use crate::time::Instant;
use std::collections::BTreeMap;

/// When lost attempts went silent: no earlier than `at`, or at a time the restarted head
/// cannot know (AT-2).
#[derive(Clone, Copy)]
struct Since {
    at: Instant,
    unheard_since_restart: bool,
}

impl Head {
    /// A sign of life: the node's deadline moves on, and it is no longer suspect.
    fn heard_from(&mut self, ix: NodeIx, now: Instant) {
        self.liveness.heard(ix, now, self.config.node_timeout_ms);
        self.scheduler.clear_suspect(ix);
        // SL-1: an incident's date is kept for a restarted head only while its reports may
        // still come: once the node is heard from after them, a later loss is a new incident.
        let interval_ms = self.config.heartbeat_interval_ms;
        let record = self.liveness.get_mut(ix).expect("heard from a registered node");
        if record.lost_supervisors.is_some_and(|(_, first)| now >= first.plus_ms(interval_ms)) {
            record.lost_supervisors = None;
            self.touch_node(ix);
        }
    }

    /// The agent's connection dropped (the runtime saw it): suspect until heard from again.
    pub(super) fn link_lost(&mut self, node: NodeId) -> Reply {
        if let Some(ix) = self.scheduler.node_ix(&node) {
            self.liveness.lose_link(ix);
        }
        Reply::Done
    }

    pub(super) fn register(&mut self, now: Instant, agent: Registration) -> Result<Reply, Rejected> {
        let node = agent.node.clone();
        check_name(node.as_str())?;
        crate::resources::check_labels(&agent.labels).map_err(|e| Rejected::BadRegistration(node.clone(), e))?;
        crate::resources::check_kinds(&agent.resources).map_err(|e| Rejected::BadRegistration(node.clone(), e))?;
        let known = self.scheduler.node_ix(&node);
        if known.is_none() && self.scheduler.node_count() >= self.config.max_nodes && !self.make_room(&node) {
            return Err(Rejected::TooManyNodes(self.scheduler.node_count()));
        }
        if let Some(ix) = known {
            if self.register_known(now, ix, &agent)? {
                return Ok(Reply::Done);
            }
        }
        let offer = NodeOffer {
            resources: agent.resources,
            labels: agent.labels,
            devices: agent.devices,
            port_space: agent.port_space,
        };
        let ix = self.scheduler.add_node(node.clone(), offer);
        self.note_rejoined(ix);
        self.liveness.register(ix, agent.addr, agent.incarnation, now, self.config.node_timeout_ms);
        self.scheduler.clear_suspect(ix);
        self.reported(ix);
        self.touch_node(ix);
        if self.liveness.get(ix).expect("just registered").cordoned {
            // MB-1: the operator's drain outlasts the machine (a reboot for maintenance).
            self.scheduler.drain_node(ix);
            let evidence = format!("registered; the operator's drain stands until `ftdrive undrain {node}`");
            self.notify(Event::NodeState { node, state: NodeState::Draining, evidence });
        } else {
            self.notify(Event::NodeState { node, state: NodeState::Alive, evidence: "registered".into() });
        }
        Ok(Reply::Done)
    }

    /// A node the head knows registers again: the same agent reconnecting, or a restarted one
    /// that keeps the node's bundles (true: nothing more to do), or a new machine under the
    /// name, whose old one is lost (false: it registers as a new node).
    fn register_known(&mut self, now: Instant, ix: NodeIx, agent: &Registration) -> Result<bool, Rejected> {
        let node = &agent.node;
        let record = self.liveness.get(ix).expect("known node has a record");
        let (alive, incarnation) = (record.alive, record.incarnation);
        if agent.incarnation < incarnation {
            return Err(Rejected::StaleIncarnation(node.clone()));
        }
        self.touch_node(ix);
        if alive && incarnation == agent.incarnation {
            // The same agent reconnecting: nothing was lost — unless the head restarted
            // meanwhile and this is its report (DU-3).
            self.liveness.get_mut(ix).expect("record").addr = agent.addr.clone();
            self.heard_from(ix, now);
            if self.reported(ix) {
                let gone = self.attempts.missing_since_restart(ix, &agent.running, &agent.ended);
                let since = Since { at: now, unheard_since_restart: true };
                self.lose_attempts(now, ix, node, gone, "was not running there when the head restarted", since);
            }
            return Ok(true);
        }
        // A restarted agent keeps the node's bundles: what it re-attached to runs on, what it
        // lost is lost, unconfirmed starts go again. A node whose agent announced it was
        // leaving and that comes back with nothing running is a new machine (the preemption
        // happened: ends it still owes from before do not make it the same one — swarm seed
        // 376593), and so is one that offers otherwise. The operator's drain stays (its
        // cordon is the node's, whatever machine registers in its name).
        let reattached = !agent.running.is_empty();
        let left = self.liveness.get(ix).expect("record").leaving && !reattached;
        if alive && self.moved(ix, agent) {
            let why = format!(
                "the agent on {node} restarted on another machine or network namespace (a reboot); its processes were lost"
            );
            self.lose_node(now, ix, why);
            return Ok(false);
        }
        if alive && !left && self.offers_the_same(ix, agent) {
            self.readopt(now, ix, agent, false);
            return Ok(true);
        }
        // Restarted to offer other resources or labels (a label added): as a restarted
        // kubelet keeps its pods, the node keeps its bundles and the processes it
        // re-attached to run on, where what they hold still fits; labels steer only what is
        // placed from now on. (A reboot that lost them reports them missing, as above.)
        if alive && !left && self.reconfigure(ix, agent) {
            self.readopt(now, ix, agent, true);
            return Ok(true);
        }
        if alive {
            let why = if left {
                format!("the agent on {node} restarted; its processes were lost")
            } else {
                format!(
                    "the agent on {node} restarted without what is allocated there (less of a resource, or not every \
                     GPU device a bundle holds); it is a new machine"
                )
            };
            self.lose_node(now, ix, why);
        }
        Ok(false)
    }

    /// Its agent reports another port space than the node draws from (cluster.rs, PS-1): the
    /// machine rebooted, or the name moved to another one. No process survives either, and the
    /// node must draw its ports where it now listens. A node with a pool of its own (restored
    /// from before agents reported port spaces) keeps it.
    fn moved(&self, ix: NodeIx, agent: &Registration) -> bool {
        let space = self.scheduler.node(ix).port_space();
        !space.is_empty() && space != agent.port_space
    }

    fn reconfigure(&mut self, ix: NodeIx, agent: &Registration) -> bool {
        let (resources, labels) = (agent.resources.clone(), agent.labels.clone());
        self.scheduler.reconfigure_node(ix, resources, labels, agent.devices)
    }

    fn offers_the_same(&self, ix: NodeIx, agent: &Registration) -> bool {
        let node = self.scheduler.node(ix);
        let declared_gpus = || Devices::first((agent.resources.milli("gpu") / 1000) as u32);
        let devices = agent.devices.unwrap_or_else(declared_gpus);
        node.devices == devices
            && node.resources.without("gpu") == agent.resources.without("gpu")
            && node.labels == agent.labels
    }

    /// A restarted agent on a live node: its supervisors kept the attempts it lists running, and
    /// it owes the ends of those it lists ended. Every other attempt the head has seen start
    /// there is gone with the old agent. The node keeps its bundles.
    fn readopt(&mut self, now: Instant, ix: NodeIx, agent: &Registration, reconfigured: bool) {
        // The machine is the same, and so is a departure it announced.
        let record = self.liveness.get(ix).expect("record");
        let (leaving, unheard_since_restart) = (record.leaving, record.unheard_since_restore);
        // When the run before was last heard, or the date its first lost supervisor got if that
        // was reported before this registration (SL-1): one incident, one date.
        let interval_ms = self.config.heartbeat_interval_ms;
        let last_heard = record.incident_date(now, interval_ms).unwrap_or(record.last_heard);
        self.liveness.register(ix, agent.addr.clone(), agent.incarnation, now, self.config.node_timeout_ms);
        let record = self.liveness.get_mut(ix).expect("just registered");
        record.leaving = leaving;
        record.owed_since = agent.ended.iter().map(|key| (key.clone(), last_heard)).collect();
        self.touch_node(ix); // the dates outlive a head restart (SL-1)
        self.scheduler.clear_suspect(ix);
        self.reported(ix);
        let gone = self.attempts.missing(ix, &agent.running, &agent.ended);
        self.notify(Event::AgentRestarted {
            node: agent.node.clone(),
            reattached: agent.running.len() as u32,
            lost: gone.len() as u32,
            reconfigured,
        });
        // Gone with the old run, at a time nobody saw: no earlier than it was last heard, as a
        // lost node's processes are (AT-1 attributes a peer's crash after that to the loss).
        let since = Since { at: last_heard, unheard_since_restart };
        self.lose_attempts(now, ix, &agent.node, gone, "was gone when its agent restarted", since);
    }

    /// Attempts whose start `node` confirmed but that its registration neither lists running
    /// nor owes an end for (`AttemptIndex::missing`): their processes are gone, as `since` dates
    /// it.
    fn lose_attempts(
        &mut self,
        now: Instant,
        ix: NodeIx,
        node: &NodeId,
        gone: Vec<AttemptKey>,
        how: &str,
        since: Since,
    ) {
        for key in gone {
            let _ = self.attempts.ended(ix, &key);
            let Some(pg) = self.jobs.get(&key.job).map(|j| j.pg) else { continue };
            let loss = self.attempt_loss(ix, node, format!("{key} on {node} {how}"), since);
            self.feed(now, pg, DriverInput::AttemptLost { key, loss });
        }
    }

    /// An attempt gone from a node that stays, as `since` dates it: a system fault of the
    /// node (or the drain's, if it was draining).
    fn attempt_loss(&self, ix: NodeIx, node: &NodeId, evidence: String, since: Since) -> Loss {
        let draining = self.scheduler.node(ix).state == NodeState::Draining;
        let Since { at: silent_since, unheard_since_restart } = since;
        Loss { node: node.clone(), preemptible: false, draining, silent_since, unheard_since_restart, evidence }
    }

    /// SL-2: an agent that says it never started an attempt whose start the head had confirmed
    /// there is not the agent that ran it — the machine rebooted, or its agent started afresh
    /// on an empty state dir, and has not registered yet (a registration would have shown the
    /// attempt missing, `lose_attempts`). The attempt was lost with what ran it, no earlier
    /// than the node was last heard (or at a time unknown, if not since a head restart, AT-2);
    /// read as a stop never started, it was free, and a peer's crash on its vanished rank was
    /// charged to the user (swarm seed 7447363).
    pub(super) fn forgotten_start(&self, node: &NodeId, key: &AttemptKey, status: &ExitStatus) -> Option<Loss> {
        let ix = self.scheduler.node_ix(node)?;
        if !status.is_never_started() || !self.attempts.is_acked(ix, key) {
            return None;
        }
        let record = self.liveness.get(ix)?;
        let since = Since { at: record.last_heard, unheard_since_restart: record.unheard_since_restore };
        let evidence = format!(
            "{key} on {node} was unknown to its agent though its start had been confirmed (the machine rebooted, \
             or the agent started on an empty state dir)"
        );
        Some(self.attempt_loss(ix, node, evidence, since))
    }

    pub(super) fn heartbeat(
        &mut self,
        now: Instant,
        node: NodeId,
        incarnation: u64,
        seq: u64,
        running: &[AttemptKey],
        problem: Option<String>,
    ) -> Result<Reply, Rejected> {
        let ix = self.alive_node(&node, incarnation)?;
        let record = self.liveness.get_mut(ix).expect("alive node has a record");
        if seq <= record.last_seq {
            return Ok(Reply::Done); // duplicated or overtaken by a newer heartbeat
        }
        record.last_seq = seq;
        self.heard_from(ix, now);
        self.tell_attributing_drivers(now, &node);
        self.note_health(now, ix, problem);
        for key in self.attempts.unconfirmed_among(ix, running) {
            self.confirm_started(now, ix, key);
        }
        let grace = |key: &AttemptKey| self.jobs.get(&key.job).map_or(10_000, |j| j.driver.spec().stop_grace_ms);
        for msg in self.attempts.reconcile(ix, running, &grace) {
            self.effects.push_back(Effect::Send { node: node.clone(), msg });
        }
        Ok(Reply::Done)
    }

    /// AT-1 (driver): the drivers whose pending failures wait for word from `node` learn it
    /// was heard from. Only those: a heartbeat costs the others nothing.
    fn tell_attributing_drivers(&mut self, now: Instant, node: &NodeId) {
        let waiting: Vec<PgId> =
            self.attributing.iter().copied().filter(|pg| self.driver_of(*pg).awaits_word_from(node, now)).collect();
        for pg in waiting {
            self.feed(now, pg, DriverInput::NodeHeard(node.clone()));
        }
    }

    /// PS-3: what listens on the node's machine, so that its pool hands out other ports.
    pub(super) fn listening(
        &mut self,
        now: Instant,
        node: NodeId,
        incarnation: u64,
        ports: Vec<u16>,
    ) -> Result<Reply, Rejected> {
        let ix = self.alive_node(&node, incarnation)?;
        self.note_listening(now, ix, ports);
        Ok(Reply::Done)
    }

    /// AG-6: whether the node's agent can start work.
    pub(super) fn health(
        &mut self,
        now: Instant,
        node: NodeId,
        incarnation: u64,
        problem: Option<String>,
    ) -> Result<Reply, Rejected> {
        let ix = self.alive_node(&node, incarnation)?;
        self.note_health(now, ix, problem);
        Ok(Reply::Done)
    }

    /// An unhealthy node keeps what runs there and is given nothing new until its agent says it
    /// can start work again. Not durable: every registration and heartbeat says it again.
    pub(super) fn note_health(&mut self, now: Instant, ix: NodeIx, problem: Option<String>) {
        let problem = problem.map(|p| crate::protocol::one_line(&p, crate::protocol::MAX_SPAWN_MESSAGE_CHARS));
        if self.scheduler.node(ix).problem == problem {
            return;
        }
        let fell_ill = problem.is_some() && self.scheduler.node(ix).problem.is_none();
        self.scheduler.set_node_problem(ix, problem.clone(), now);
        if fell_ill {
            // Bundles there are no use for a start: their actors move off as they can.
            let bundles: Vec<(PgId, u32)> = self.scheduler.node(ix).bundles.iter().copied().collect();
            for (pg, actor) in bundles {
                self.feed(now, pg, DriverInput::NodeUnhealthy { actor });
            }
        }
        let node = self.scheduler.node(ix).name.clone();
        self.notify(Event::NodeHealth { node, problem });
    }

    /// `node` could not start `key` (AG-6): it is unhealthy — as its agent will have said, or,
    /// where that word was lost, as this report says until the next heartbeat tells — and the
    /// start belongs to the episode that began then (FC-1 charges a job once for it). Changes
    /// nothing for a report the head refuses.
    pub(super) fn node_could_not_start(
        &mut self,
        now: Instant,
        node: &NodeId,
        key: &AttemptKey,
        message: &str,
    ) -> Result<Instant, Rejected> {
        let ix = self.reporting_node(node, key)?;
        if self.scheduler.node(ix).problem.is_none() && self.scheduler.node(ix).state != NodeState::Dead {
            self.note_health(now, ix, Some(crate::protocol::cannot_start(message)));
        }
        Ok(self.scheduler.node(ix).unhealthy_since.unwrap_or(now))
    }

    /// The node's index if it is registered, alive, and this is its current agent.
    fn alive_node(&self, node: &NodeId, incarnation: u64) -> Result<NodeIx, Rejected> {
        let ix = self.scheduler.node_ix(node).ok_or_else(|| Rejected::UnknownNode(node.clone()))?;
        let record = self.liveness.get(ix).expect("known node has a record");
        if !record.alive {
            return Err(Rejected::UnknownNode(node.clone()));
        }
        if record.incarnation != incarnation {
            return Err(Rejected::StaleIncarnation(node.clone()));
        }
        Ok(ix)
    }

    /// The node's own agent says its machine goes away within `deadline_ms`: nothing new is
    /// placed there and the drivers move what runs there. No operator can withdraw this drain.
    pub(super) fn preemption_notice(
        &mut self,
        now: Instant,
        node: NodeId,
        incarnation: Option<u64>,
        deadline_ms: u64,
    ) -> Result<Reply, Rejected> {
        // A notice still on its way when the machine came back under a new agent run is
        // stale: applied, it would leave the new machine DRAINING for good (swarm seed 253534).
        let ix = match incarnation {
            Some(incarnation) => self.alive_node(&node, incarnation)?,
            None => self.live_node_ix(&node)?,
        };
        check_deadline(deadline_ms)?;
        let record = self.liveness.get_mut(ix).expect("known node has a record");
        if !record.leaving {
            record.leaving = true;
            self.touch_node(ix);
        }
        let evidence = format!("preemption notice, deadline in {deadline_ms} ms");
        self.start_drain(now, ix, evidence, deadline_ms, DrainSource::Notice);
        Ok(Reply::Done)
    }

    /// The operator's `ftdrive drain`: a live node drains as on a notice, and the node is
    /// cordoned until `ftdrive undrain` (MB-1). A DEAD node may be drained too: it comes back
    /// DRAINING.
    pub(super) fn drain(&mut self, now: Instant, node: NodeId, deadline_ms: u64) -> Result<Reply, Rejected> {
        let ix = self.scheduler.node_ix(&node).ok_or_else(|| Rejected::NoSuchNode(node.clone()))?;
        check_deadline(deadline_ms)?;
        let record = self.liveness.get_mut(ix).expect("known node has a record");
        if !record.cordoned {
            record.cordoned = true;
            self.touch_node(ix);
        }
        if self.scheduler.node(ix).state != NodeState::Dead {
            let evidence = format!("drained by the operator (`ftdrive drain`), deadline in {deadline_ms} ms");
            self.start_drain(now, ix, evidence, deadline_ms, DrainSource::Operator);
        }
        Ok(Reply::Done)
    }

    /// ALIVE → DRAINING: the drivers stop what runs there by `deadline_ms`. A node already
    /// DRAINING keeps its first deadline.
    fn start_drain(&mut self, now: Instant, ix: NodeIx, evidence: String, deadline_ms: u64, by: DrainSource) {
        if self.scheduler.node(ix).state != NodeState::Alive {
            return;
        }
        let deadline = now.plus_ms(deadline_ms);
        self.scheduler.drain_node(ix);
        self.touch_node(ix);
        let node = self.scheduler.node(ix).name.clone();
        self.notify(Event::NodeState { node, state: NodeState::Draining, evidence });
        let bundles: Vec<(PgId, u32)> = self.scheduler.node(ix).bundles.iter().copied().collect();
        for (pg, actor) in bundles {
            self.feed(now, pg, DriverInput::Draining { actor, deadline, by });
        }
    }

    /// The operator withdraws a drain: the cordon is lifted, and a DRAINING node is offered
    /// again. What the drain stopped stays stopped (its actors were re-placed or wait to be). A
    /// drain the node's own agent announced stands: refused, unless there was a cordon to lift.
    pub(super) fn undrain(&mut self, now: Instant, node: NodeId) -> Result<Reply, Rejected> {
        let ix = self.scheduler.node_ix(&node).ok_or_else(|| Rejected::NoSuchNode(node.clone()))?;
        let record = self.liveness.get_mut(ix).expect("known node has a record");
        let (cordoned, leaving) = (record.cordoned, record.leaving);
        let draining = self.scheduler.node(ix).state == NodeState::Draining;
        if draining && leaving && !cordoned {
            return Err(Rejected::LeavingNode(node));
        }
        if cordoned {
            record.cordoned = false;
            self.touch_node(ix);
            if self.scheduler.node(ix).state == NodeState::Dead {
                // Retention may forget it from now on; as the node the operator just acted on,
                // it goes after every other DEAD node (FG-3).
                self.note_rejoined(ix);
                self.note_dead(now, ix);
            }
        }
        if draining && !leaving {
            self.scheduler.undrain_node(ix);
            self.touch_node(ix);
            let evidence = "the operator withdrew the drain (`ftdrive undrain`)".to_string();
            self.notify(Event::NodeState { node, state: NodeState::Alive, evidence });
        }
        Ok(Reply::Done)
    }

    /// The node's index if it is registered and not DEAD.
    fn live_node_ix(&self, node: &NodeId) -> Result<NodeIx, Rejected> {
        let ix = self.scheduler.node_ix(node).ok_or_else(|| Rejected::UnknownNode(node.clone()))?;
        if self.scheduler.node(ix).state == NodeState::Dead {
            return Err(Rejected::UnknownNode(node.clone()));
        }
        Ok(ix)
    }

    /// MB-1.
    pub(super) fn check_cordons(&self) {
        for (ix, node) in self.scheduler.nodes() {
            let cordoned = self.liveness.get(ix).is_some_and(|r| r.cordoned);
            assert!(!(cordoned && node.state == NodeState::Alive), "MB-1: {} is cordoned and ALIVE", node.name);
        }
    }

    /// Who put a node into DRAINING: its agent's notice stands over an operator's cordon.
    fn drained_by(&self, ix: NodeIx) -> DrainSource {
        match self.liveness.get(ix) {
            Some(record) if record.cordoned && !record.leaving => DrainSource::Operator,
            _ => DrainSource::Notice,
        }
    }

    /// Declares DEAD every node not heard from within the node timeout, unless none was heard
    /// from lately (FD-1). (Run before the recovery window is closed, so that a node that
    /// never reported to a restarted head is named as such.)
    pub(super) fn expire_silent_nodes(&mut self, now: Instant) {
        let hold = match self.scheduler.policy_fault() {
            PolicyFault::NoDisruptionHold => Hold { quiet_ms: 0, max_ms: 0 },
            _ => Hold { quiet_ms: self.config.cluster_quiet_ms(), max_ms: self.config.disruption_hold_ms },
        };
        for (ix, held) in self.liveness.pop_expired(now, hold) {
            let heard = self.liveness.get(ix).expect("expired node has a record").last_heard;
            let name = self.scheduler.node(ix).name.clone();
            let silent_ms = now.ms_since(heard);
            let evidence = if self.recovery.as_ref().is_some_and(|r| r.waiting.contains(&ix)) {
                format!("node {name} did not report to the restarted head within its recovery window ({silent_ms} ms)")
            } else if held {
                format!(
                    "node {name} missed heartbeats for {silent_ms} ms, as did every node; held {} ms \
                     (`--disruption-hold-ms`) in case the head's own network was cut",
                    hold.max_ms
                )
            } else {
                format!("node {name} missed heartbeats for {silent_ms} ms")
            };
            self.lose_node(now, ix, evidence);
        }
    }

    /// Marks a node DEAD and tells every driver that had a bundle there.
    fn lose_node(&mut self, now: Instant, ix: NodeIx, evidence: String) {
        let record = self.liveness.get(ix);
        let silent_since = record.map_or(now, |r| r.last_heard);
        let unheard_since_restart = record.is_some_and(|r| r.unheard_since_restore);
        let node = self.scheduler.node(ix);
        let (name, preemptible, draining) = (node.name.clone(), node.preemptible, node.state == NodeState::Draining);
        let evidence = match (preemptible, draining) {
            (_, true) => format!("{evidence} ({})", self.drained_by(ix).while_draining()),
            (true, false) => format!("{evidence} (it is labelled preemptible=true)"),
            (false, false) => evidence,
        };
        self.liveness.mark_dead(ix);
        self.attempts.node_lost(ix);
        self.touch_node(ix);
        let lost = self.scheduler.kill_node(ix);
        self.note_dead(now, ix);
        self.notify(Event::NodeState { node: name.clone(), state: NodeState::Dead, evidence: evidence.clone() });
        let mut by_job: BTreeMap<PgId, Vec<u32>> = BTreeMap::new();
        for (pg, actor) in lost {
            by_job.entry(pg).or_default().push(actor);
        }
        for (pg, actors) in by_job {
            let evidence = evidence.clone();
            let loss =
                Loss { node: name.clone(), preemptible, draining, silent_since, unheard_since_restart, evidence };
            self.feed(now, pg, DriverInput::BundlesLost { actors, loss });
        }
    }
}

/// A drain's deadline is bounded as every delay is (u64::MAX would never come).
fn check_deadline(deadline_ms: u64) -> Result<(), Rejected> {
    crate::spec::delay_too_long(deadline_ms).map_or(Ok(()), |why| Err(Rejected::DeadlineTooLong(why)))
}
