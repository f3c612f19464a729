//! A synchronous test cluster for the head: machines running the real agent protocol
//! (`ftdrive::agent`), whose "processes" are table entries that start at once and stop at
//! once. It makes inputs explicit and readable; the seeded simulator with a lossy network
//! lives in `ftdrive::sim`.

#![allow(dead_code)]

use ftdrive::agent::{Agent as AgentProtocol, AgentEffect, AgentIdentity, AgentInput, Recovered};
use ftdrive::driver::ActorState;
use ftdrive::event::{Event, JobEvent};
use ftdrive::head::{Effect, Head, Input, Reply};
use ftdrive::protocol::{AttemptKey, ExitStatus, StartSpec, ToAgent, ToHead};
use ftdrive::resources::Devices;
use ftdrive::sim::MemoryStore;
use ftdrive::view::JobView;
use ftdrive::{HeadConfig, Instant, JobId, JobSpec, Labels, NodeId, Resources};
use std::collections::BTreeMap;

/// A machine: the agent protocol and the processes it runs.
pub struct Agent {
    pub protocol: AgentProtocol,
    pub heartbeating: bool,
    pub running: BTreeMap<AttemptKey, StartSpec>,
    /// Its processes take their stop grace (a SIGTERM trapped to checkpoint): a stop leaves
    /// them running, as a real one would be for a while.
    pub slow_to_stop: bool,
    /// Its `Started` confirmations are lost on the way (as on a link that dropped as they went).
    pub loses_started: bool,
    /// Every start fails here because of the node (a full disk): `AgentInput::SpawnFailed`
    /// with `node_fault`, and this message.
    pub cannot_start: Option<String>,
}

pub struct TestCluster {
    pub head: Head,
    /// What the head made durable (`Effect::Persist`), for `restart_head`.
    pub store: MemoryStore,
    pub now: Instant,
    pub agents: BTreeMap<String, Agent>,
    pub effects: Vec<(Instant, Effect)>,
    next_beat: Instant,
}

pub fn config() -> HeadConfig {
    HeadConfig { seed: 7, ..HeadConfig::default() }
}

pub fn cpu(n: u64) -> Resources {
    Resources::units(&[("cpu", n)])
}

/// A spec with a fast backoff, so restarts follow within a heartbeat or two.
pub fn spec(name: &str, min: u32, max: u32) -> JobSpec {
    let mut spec = JobSpec::minimal(name, &["train"], min, max);
    spec.retries.backoff_ms.initial = 100;
    spec.retries.backoff_ms.max = 100;
    spec.scale_up_delay_ms = 1_000;
    spec
}

impl TestCluster {
    pub fn new(config: HeadConfig) -> Self {
        TestCluster {
            head: Head::new(config),
            store: MemoryStore::default(),
            now: Instant::ZERO,
            agents: BTreeMap::new(),
            effects: Vec::new(),
            next_beat: Instant::from_ms(1_000),
        }
    }

    pub fn join(&mut self, name: &str, resources: Resources) {
        self.join_labelled(name, resources, Labels::new());
    }

    pub fn join_labelled(&mut self, name: &str, resources: Resources, labels: Labels) {
        self.join_with(name, resources, labels, None, ("", &[]));
    }

    /// A node that names its GPU devices (as `ftdrive node --gpus 0,2,...` does).
    pub fn join_with_devices(&mut self, name: &str, resources: Resources, devices: Devices) {
        self.join_with(name, resources, Labels::new(), Some(devices), ("", &[]));
    }

    /// A node whose agent shares its machine's ports with others (`port_space`).
    pub fn join_on_machine(&mut self, name: &str, resources: Resources, port_space: &str) {
        self.join_with(name, resources, Labels::new(), None, (port_space, &[]));
    }

    /// A node whose agent finds `ports` listening on its machine as it starts.
    pub fn join_with_listeners(&mut self, name: &str, resources: Resources, port_space: &str, ports: &[u16]) {
        self.join_with(name, resources, Labels::new(), None, (port_space, ports));
    }

    fn join_with(
        &mut self,
        name: &str,
        resources: Resources,
        labels: Labels,
        devices: Option<Devices>,
        (port_space, listening): (&str, &[u16]),
    ) {
        let incarnation = self.agents.get(name).map_or(1, |a| a.protocol.incarnation() + 1);
        let number = self.agents.len() + usize::from(!self.agents.contains_key(name));
        let identity = AgentIdentity {
            name: NodeId::new(name),
            resources,
            labels,
            addr: format!("10.0.0.{number}"),
            devices,
            port_space: port_space.into(),
            log_url: String::new(),
            identity: String::new(),
            cluster: String::new(),
        };
        let mut protocol = AgentProtocol::new(identity, incarnation, Recovered::default());
        if !listening.is_empty() {
            protocol.handle(self.now, AgentInput::Listening(listening.to_vec()));
        }
        self.agents.insert(
            name.into(),
            Agent {
                protocol,
                heartbeating: true,
                running: BTreeMap::new(),
                slow_to_stop: false,
                loses_started: false,
                cannot_start: None,
            },
        );
        self.agent_input(name, AgentInput::LinkUp);
        self.pump();
    }

    pub fn submit(&mut self, spec: JobSpec) -> JobId {
        match self.input(Input::Submit { id: None, spec: Box::new(spec) }) {
            Reply::Submitted(id) => id,
            other => panic!("submit answered {other:?}"),
        }
    }

    pub fn stop(&mut self, job: &JobId) {
        self.input(Input::Stop { job: job.clone() });
    }

    /// The operator's `ftdrive drain`.
    pub fn drain(&mut self, node: &str, deadline_ms: u64) {
        self.input(Input::Drain { node: NodeId::new(node), deadline_ms });
    }

    /// The operator's `ftdrive undrain`, answered as the head answers it.
    pub fn undrain(&mut self, node: &str) -> Result<Reply, ftdrive::head::Rejected> {
        let answer = self.head.handle(self.now, Input::Undrain { node: NodeId::new(node) });
        self.pump();
        answer
    }

    /// The operator's `ftdrive forget`, answered as the head answers it.
    pub fn forget(&mut self, node: &str) -> Result<Reply, ftdrive::head::Rejected> {
        let answer = self.head.handle(self.now, Input::Forget { node: NodeId::new(node) });
        self.pump();
        answer
    }

    /// The machine itself is told it goes away (a cloud's notice): its agent tells the head.
    pub fn agent_notice(&mut self, node: &str, deadline_ms: u64) {
        self.agent_input(node, AgentInput::PreemptionNotice { deadline_ms });
        self.pump();
    }

    /// The agent is told to shut down (SIGTERM): it stops its processes and tells the head.
    pub fn agent_shutdown(&mut self, node: &str, deadline_ms: u64) {
        self.agent_input(node, AgentInput::Shutdown { deadline_ms });
        self.pump();
    }

    /// The agent's link to the head drops (the head is away): what it sends is lost until the
    /// next link, which `restart_head` brings.
    pub fn link_down(&mut self, node: &str) {
        self.agent_input(node, AgentInput::LinkDown);
    }

    /// The agent process restarts on the same machine: its processes run on under their
    /// supervisors, and the new agent re-attaches to them.
    pub fn restart_agent(&mut self, node: &str) {
        let identity = self.agents[node].protocol.identity().clone();
        self.restart_agent_as(node, identity);
    }

    /// As `restart_agent`, the new agent started with other resources and labels (`ftdrive
    /// node --resources ... --labels ...`).
    pub fn restart_agent_offering(&mut self, node: &str, resources: Resources, labels: Labels) {
        let identity = AgentIdentity { resources, labels, ..self.agents[node].protocol.identity().clone() };
        self.restart_agent_as(node, identity);
    }

    /// The machine reboots into another port space (a new boot id, or a container's new network
    /// namespace): its processes are gone; its agent recovers what its disk kept.
    pub fn reboot_into(&mut self, node: &str, port_space: &str) {
        self.agents.get_mut(node).expect("known node").running.clear();
        let identity = AgentIdentity { port_space: port_space.into(), ..self.agents[node].protocol.identity().clone() };
        let recovered = self.agents[node].protocol.recoverable_after_reboot();
        self.start_agent(node, identity, recovered);
    }

    /// The agent restarts (its processes run on) and now reports a port space: an agent of a
    /// version that reports one, after one that did not.
    pub fn restart_agent_in(&mut self, node: &str, port_space: &str) {
        let identity = AgentIdentity { port_space: port_space.into(), ..self.agents[node].protocol.identity().clone() };
        self.restart_agent_as(node, identity);
    }

    /// The machine restarts on a fresh disk: its processes are gone, and its new agent
    /// recovers nothing.
    pub fn reboot_fresh(&mut self, node: &str) {
        self.boot_again(node, Recovered::default());
    }

    /// The machine restarts on the same disk: its processes are gone, and its new agent owes
    /// the head the ends it had recorded but not yet reported.
    pub fn reboot(&mut self, node: &str) {
        let recovered = self.agents[node].protocol.recoverable_after_reboot();
        self.boot_again(node, recovered);
    }

    /// The agent and every process of the machine are killed outright (the machine stays up:
    /// an OOM kill of the lot, a `kill -9` of its process tree), and the agent is started
    /// again at once: it finds each attempt's supervisor dead without a record, and owes
    /// those ends as such, beside the ends it owed already.
    pub fn kill_all_and_restart_agent(&mut self, node: &str) {
        let recovered = self.agents[node].protocol.recoverable_with_supervisors_killed();
        self.boot_again(node, recovered);
    }

    /// The machine's processes are gone; a new agent run starts with what it `recovered`.
    fn boot_again(&mut self, node: &str, recovered: Recovered) {
        self.agents.get_mut(node).expect("known node").running.clear();
        let identity = self.agents[node].protocol.identity().clone();
        self.start_agent(node, identity, recovered);
    }

    fn restart_agent_as(&mut self, node: &str, identity: AgentIdentity) {
        let recovered = self.agents[node].protocol.recoverable();
        self.start_agent(node, identity, recovered);
    }

    /// A new agent run on the machine (incarnation one more), registering at once.
    fn start_agent(&mut self, node: &str, identity: AgentIdentity, recovered: Recovered) {
        let agent = self.agents.get_mut(node).expect("known node");
        agent.protocol = AgentProtocol::new(identity, agent.protocol.incarnation() + 1, recovered);
        agent.heartbeating = true;
        self.agent_input(node, AgentInput::LinkUp);
        self.pump();
    }

    /// The state `ftdrive nodes` shows for `node`.
    pub fn node_state(&self, node: &str) -> ftdrive::scheduler::NodeState {
        self.head.node_views(self.now).into_iter().find(|v| v.name == node).expect("known node").state
    }

    pub fn input(&mut self, input: Input) -> Reply {
        let reply = self.head.handle(self.now, input).unwrap_or_else(|e| panic!("head refused input: {e}"));
        self.pump();
        reply
    }

    /// An input the head must refuse.
    pub fn refused_input(&mut self, input: Input) -> ftdrive::head::Rejected {
        let refusal = self.head.handle(self.now, input).expect_err("the head refuses it");
        self.pump();
        refusal
    }

    /// The head is killed and started again from what it made durable; every live agent
    /// reconnects and registers again, with what it runs.
    pub fn restart_head(&mut self) {
        self.head = Head::restore(self.head.config().clone(), self.store.read(), self.now);
        let live: Vec<String> = self.agents.iter().filter(|(_, a)| a.heartbeating).map(|(n, _)| n.clone()).collect();
        for name in live {
            self.agent_input(&name, AgentInput::LinkDown);
            self.agent_input(&name, AgentInput::LinkUp);
            self.pump();
        }
    }

    /// The head is killed and started again, with `config`, from what it made durable.
    pub fn restart_head_with(&mut self, config: HeadConfig) {
        self.head = Head::new(config);
        self.restart_head();
    }

    /// The agent process stops (SIGUSR2, to be upgraded): no heartbeats, no link; its
    /// processes run on under their supervisors.
    pub fn stop_agent(&mut self, node: &str) {
        self.agent_input(node, AgentInput::LinkDown);
        self.agents.get_mut(node).expect("known node").heartbeating = false;
    }

    /// The node stops heartbeating and its processes vanish without a word (power loss).
    /// The node's state dir stops taking writes: every start there fails, as the node's fault.
    pub fn break_disk(&mut self, node: &str, message: &str) {
        self.agents.get_mut(node).expect("known agent").cannot_start = Some(message.into());
    }

    /// The node's disk fills up and its agent's probe finds it before any start fails there.
    pub fn disk_fills(&mut self, node: &str, message: &str) {
        self.break_disk(node, message);
        self.agent_input(node, AgentInput::Health(Some(message.into())));
        self.pump();
    }

    /// The node's state dir takes writes again, and its agent's probe says so.
    pub fn repair_disk(&mut self, node: &str) {
        self.agents.get_mut(node).expect("known agent").cannot_start = None;
        self.agent_input(node, AgentInput::Health(None));
        self.pump();
    }

    pub fn crash(&mut self, node: &str) {
        let agent = self.agents.get_mut(node).expect("known node");
        agent.heartbeating = false;
        agent.running.clear();
    }

    /// The process of `job`'s rank `rank` exits with `code`.
    pub fn exit_rank(&mut self, job: &JobId, rank: u32, code: i32) {
        self.exit_where(job, |s| s.group_rank == rank, ExitStatus::code(code));
    }

    /// Worker `local_rank` of the group with rank `group_rank` exits with `code`, ending its group.
    pub fn exit_worker(&mut self, job: &JobId, group_rank: u32, local_rank: u32, code: i32) {
        let status = ExitStatus { worker: Some(local_rank), ..ExitStatus::code(code) };
        self.exit_where(job, |s| s.group_rank == group_rank, status);
    }

    /// The environment each worker of `job`'s running groups is started with, and its node:
    /// the group's variables with the worker's own on top, as a supervisor applies them.
    pub fn worker_envs(&self, job: &JobId) -> Vec<(String, BTreeMap<String, String>)> {
        let mut envs = Vec::new();
        for (node, agent) in &self.agents {
            for spec in agent.running.values().filter(|s| s.key.job == *job) {
                for local_rank in 0..spec.nproc_per_node {
                    let mut env = spec.env.clone();
                    env.extend(spec.worker_vars(local_rank).map(|(k, v)| (k.to_string(), v)));
                    envs.push((node.clone(), env));
                }
            }
        }
        envs
    }

    pub fn exit_actor(&mut self, job: &JobId, actor: u32, status: ExitStatus) {
        self.exit_where(job, |s| s.key.actor == actor, status);
    }

    /// Every running process of `job` exits 0.
    pub fn finish(&mut self, job: &JobId) {
        while self.running_of(job).next().is_some() {
            let key = self.running_of(job).next().unwrap().clone();
            self.exit_where(job, |s| s.key == key, ExitStatus::code(0));
        }
    }

    fn exit_where(&mut self, job: &JobId, pick: impl Fn(&StartSpec) -> bool, status: ExitStatus) {
        let found = self.agents.iter().find_map(|(node, a)| {
            a.running.values().find(|s| s.key.job == *job && pick(s)).map(|s| (node.clone(), s.key.clone()))
        });
        let (node, key) = found.unwrap_or_else(|| panic!("no matching process of {job} runs"));
        self.agents.get_mut(&node).unwrap().running.remove(&key);
        self.agent_input(&node, AgentInput::Exited { key, status });
        self.pump();
    }

    pub fn running_of<'a>(&'a self, job: &'a JobId) -> impl Iterator<Item = &'a AttemptKey> + 'a {
        self.agents.values().flat_map(|a| a.running.keys()).filter(move |k| k.job == *job)
    }

    /// The processes running on a node, as (actor, RANK, MASTER_ADDR).
    pub fn processes_on(&self, node: &str) -> Vec<(u32, String, String)> {
        self.agents[node]
            .running
            .values()
            .map(|s| (s.key.actor, s.env["GROUP_RANK"].clone(), s.env["MASTER_ADDR"].clone()))
            .collect()
    }

    /// Advances the clock by `ms`, delivering heartbeats and head timeouts on the way.
    pub fn advance(&mut self, ms: u64) {
        let end = self.now.plus_ms(ms);
        loop {
            let timeout = self.head.poll_timeout().filter(|t| *t <= end);
            let next = [Some(self.next_beat).filter(|t| *t <= end), timeout].into_iter().flatten().min();
            let Some(next) = next else { break };
            self.now = self.now.max(next);
            if self.next_beat <= self.now {
                self.heartbeats();
                self.next_beat = self.now.plus_ms(self.head.config().heartbeat_interval_ms);
            }
            if self.head.poll_timeout().is_some_and(|t| t <= self.now) {
                self.head.handle_timeout(self.now);
                self.pump();
            }
        }
        self.now = end;
    }

    fn heartbeats(&mut self) {
        let names: Vec<String> = self.agents.iter().filter(|(_, a)| a.heartbeating).map(|(n, _)| n.clone()).collect();
        for name in names {
            self.agent_input(&name, AgentInput::Heartbeat);
            self.pump();
        }
    }

    /// One input to a machine's agent protocol; its effects are carried out at once: a spawn
    /// runs, a stop ends the process with SIGTERM, and what it sends reaches the head.
    /// The node's agent reads what listens on its machine (`ftdrive node` does at each
    /// heartbeat).
    pub fn listening(&mut self, node: &str, ports: &[u16]) {
        self.agent_input(node, AgentInput::Listening(ports.to_vec()));
        self.pump();
    }

    fn agent_input(&mut self, node: &str, input: AgentInput) {
        let now = self.now;
        let agent = self.agents.get_mut(node).expect("known node");
        agent.protocol.handle(now, input);
        while let Some(effect) = self.agents.get_mut(node).unwrap().protocol.poll_effect() {
            let agent = self.agents.get_mut(node).unwrap();
            match effect {
                AgentEffect::Send(ToHead::Started { .. }) if agent.loses_started => {}
                AgentEffect::Send(msg) => self.deliver_to_head(msg),
                AgentEffect::Spawn(spec) if agent.cannot_start.is_some() => {
                    let message = agent.cannot_start.clone().expect("checked");
                    agent.protocol.handle(now, AgentInput::SpawnFailed { key: spec.key, message, node_fault: true });
                }
                AgentEffect::Spawn(spec) => {
                    let key = spec.key.clone();
                    agent.running.insert(key.clone(), *spec);
                    agent.protocol.handle(now, AgentInput::Spawned { key });
                }
                AgentEffect::Stop { .. } if agent.slow_to_stop => {}
                AgentEffect::Stop { key, fence, .. } => {
                    if agent.running.remove(&key).is_some() {
                        let status = ExitStatus { fence, ..ExitStatus::signal(15, true) };
                        agent.protocol.handle(now, AgentInput::Exited { key, status });
                    }
                }
                AgentEffect::Fenced { .. }
                | AgentEffect::Forget { .. }
                | AgentEffect::HeartbeatEvery { .. }
                | AgentEffect::JoinedCluster { .. }
                | AgentEffect::ShutDown => {}
            }
        }
    }

    fn deliver_to_head(&mut self, msg: ToHead) {
        let what = format!("{msg:?}");
        self.head.handle(self.now, Input::from(msg)).unwrap_or_else(|e| panic!("head refused {what}: {e}"));
    }

    /// Carries out the head's effects at once: starts are confirmed, stops end the process
    /// with SIGTERM sent by the agent.
    fn pump(&mut self) {
        while let Some(effect) = self.head.poll_effect() {
            self.head.check_invariants();
            match &effect {
                Effect::Send { node, msg } => self.deliver(node.as_str(), msg.clone()),
                Effect::Persist(durable) => self.store.write(&self.head, durable.clone()),
                Effect::Notify(_) => {}
            }
            self.effects.push((self.now, effect));
        }
        self.head.check_invariants();
    }

    fn deliver(&mut self, node: &str, msg: ToAgent) {
        let agent = self.agents.get(node).expect("message to a known node");
        if !agent.heartbeating {
            return; // crashed: messages vanish
        }
        self.agent_input(node, AgentInput::FromHead(msg));
    }

    pub fn view(&self, job: &JobId) -> JobView {
        self.head.job_view(job).expect("known job")
    }

    pub fn actor_state(&self, job: &JobId, actor: u32) -> ActorState {
        self.view(job).actors[actor as usize].state
    }

    /// Every transition of one actor, in order.
    pub fn transitions(&self, actor: &str) -> Vec<(ActorState, ActorState)> {
        self.job_events()
            .filter_map(|e| match e {
                JobEvent::Transition { actor: a, from, to, .. } if a == actor => Some((*from, *to)),
                _ => None,
            })
            .collect()
    }

    pub fn job_events(&self) -> impl Iterator<Item = &JobEvent> {
        self.effects.iter().filter_map(|(_, e)| match e {
            Effect::Notify(Event::Job { detail, .. }) => Some(detail),
            _ => None,
        })
    }

    /// A position in the effect log, for `placements_after`.
    pub fn mark(&self) -> usize {
        self.effects.len()
    }

    /// (actor, node) of every placement after `mark`.
    pub fn placements_after(&self, mark: usize) -> Vec<(String, String)> {
        self.effects[mark..]
            .iter()
            .filter_map(|(_, e)| match e {
                Effect::Notify(Event::Placed { actor, node, .. }) => Some((actor.to_string(), node.to_string())),
                _ => None,
            })
            .collect()
    }

    pub fn cycles_formed(&self) -> Vec<(u32, String, Vec<String>)> {
        self.job_events()
            .filter_map(|e| match e {
                JobEvent::CycleFormed { cycle, master_addr, ranks, .. } => {
                    Some((*cycle, master_addr.clone(), ranks.iter().map(|r| r.to_string()).collect()))
                }
                _ => None,
            })
            .collect()
    }
}
