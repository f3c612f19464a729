//! Scenario files (DESIGN §8): a cluster, jobs with their submit times and run times, timed
//! faults, and the simulated network. Parsing checks every reference, and an error names the
//! field (`events[2].node`) and says how to fix it.

use crate::config::HeadConfig;
use crate::ids::{JobId, NodeId};
use crate::resources::{Labels, Resources};
use crate::spec::JobSpec;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Most nodes, jobs and events one scenario may hold.
pub const MAX_SCENARIO_NODES: usize = 100_000;
pub const MAX_SCENARIO_JOBS: usize = 100_000;
pub const MAX_SCENARIO_EVENTS: usize = 1_000_000;
/// Longest simulated time: thirty days.
pub const MAX_UNTIL_MS: u64 = 30 * 86_400_000;
/// Heartbeats a scenario's run may take: a quarter of the simulator's step limit, as beats come
/// with their deliveries, the head's timeouts and the faults' own steps.
pub const MAX_SCENARIO_HEARTBEATS: u64 = super::MAX_STEPS / 4;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub config: HeadConfig,
    #[serde(default)]
    pub network: NetworkSpec,
    pub nodes: Vec<NodeDef>,
    #[serde(default)]
    pub jobs: Vec<JobDef>,
    #[serde(default)]
    pub events: Vec<FaultEvent>,
    #[serde(default = "default_until_ms")]
    pub until_ms: u64,
    /// From this time on the network is perfect (every message arrives at once, once), every
    /// dead node comes back and the operator's drains are withdrawn (the swarm's healed phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heal_at_ms: Option<u64>,
    /// By this time every job must have ended: the `liveness` checker runs then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_at_ms: Option<u64>,
}

fn default_until_ms() -> u64 {
    600_000
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeDef {
    pub name: NodeId,
    pub resources: Resources,
    #[serde(default)]
    pub labels: Labels,
    /// The machine's ports it shares with other nodes (`Registration::port_space`); empty: a
    /// machine of its own.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub port_space: String,
    /// Its agent stops its work after hearing nothing from the head for this long (`ftdrive
    /// node --fence-after-ms`, AG-7); none: it keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence_after_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobDef {
    pub id: JobId,
    #[serde(default)]
    pub submit_at_ms: u64,
    pub spec: JobSpec,
    /// How long each simulated process of this job runs before it exits 0.
    #[serde(default = "default_run_ms")]
    pub run_ms: u64,
    /// If set, agents cannot start this job's command and report this error (`spawn_failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawn_error: Option<String>,
    /// If set (a gang job), each process of the job exits 1 within this many ms of a peer of
    /// its cycle vanishing with its machine or its agent (a `node_crash`, an `agent_crash`), as
    /// real ranks do when their ring breaks. Such an exit answers a loss: it is never charged
    /// to `user` (`charge_explained`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub react_to_lost_peer_ms: Option<u64>,
}

fn default_run_ms() -> u64 {
    60_000
}

/// The simulated network between head and agents. Probabilities are in parts per million.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkSpec {
    pub min_delay_ms: u64,
    pub max_delay_ms: u64,
    pub drop_ppm: u32,
    pub duplicate_ppm: u32,
}

impl Default for NetworkSpec {
    fn default() -> Self {
        NetworkSpec { min_delay_ms: 1, max_delay_ms: 5, drop_ppm: 0, duplicate_ppm: 0 }
    }
}

impl NetworkSpec {
    /// A perfect network: messages arrive at once, once.
    pub fn perfect() -> Self {
        NetworkSpec { min_delay_ms: 0, max_delay_ms: 0, drop_ppm: 0, duplicate_ppm: 0 }
    }
}

/// A timed fault or action: `{"at_ms": 10000, "type": "node_crash", "node": "n2"}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultEvent {
    pub at_ms: u64,
    pub what: Fault,
}

// By hand: serde's `flatten` cannot be combined with `deny_unknown_fields`, and a misspelt
// field in a fault must be an error, not silently ignored.
impl Serialize for FaultEvent {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut value = serde_json::to_value(&self.what).map_err(serde::ser::Error::custom)?;
        value.as_object_mut().expect("faults are objects").insert("at_ms".into(), self.at_ms.into());
        value.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for FaultEvent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut map = serde_json::Map::deserialize(deserializer)?;
        let at_ms = map.remove("at_ms").ok_or_else(|| D::Error::missing_field("at_ms"))?;
        let at_ms = at_ms.as_u64().ok_or_else(|| D::Error::custom("`at_ms` must be a non-negative integer"))?;
        let what = serde_json::from_value(serde_json::Value::Object(map)).map_err(D::Error::custom)?;
        Ok(FaultEvent { at_ms, what })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fault {
    /// The machine dies: no heartbeats, processes gone, messages lost.
    NodeCrash { node: NodeId },
    /// A machine joins (or a crashed one comes back).
    NodeJoin { node: NodeDef },
    /// A preemption notice: the node goes away `deadline_ms` later.
    NodeDrain { node: NodeId, deadline_ms: u64 },
    /// The operator's `ftdrive drain`: the head moves the node's work; the machine stays.
    OperatorDrain { node: NodeId, deadline_ms: u64 },
    /// The operator's `ftdrive undrain`: the node takes new work again (refused, and counted as
    /// a fault without a target, where the node was not drained by the operator but is leaving,
    /// or the head is down).
    OperatorUndrain { node: NodeId },
    /// The operator's `ftdrive forget`: a DEAD node leaves the head (refused, and counted as a
    /// fault without a target, where the node is not DEAD or the head is down); its machine,
    /// booting again, joins as a new node.
    OperatorForget { node: NodeId },
    /// The process of `job`'s `rank` ends (exit code, or killed by a signal nobody sent); of a
    /// group of several workers, `local_rank` says which worker it was (its group ends with it).
    ProcessExit {
        job: JobId,
        rank: u32,
        exit_code: Option<i32>,
        signal: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        local_rank: Option<u32>,
    },
    /// The agent and the processes it supervised are killed together, the machine staying up
    /// (an OOM kill of the lot, a `kill -9` of its process tree, its container restarted), and
    /// a new agent starts at once: it finds each supervisor dead without a record.
    AgentCrash { node: NodeId },
    /// The agent process restarts; the processes it supervised keep running, and the new
    /// agent re-attaches to them and registers again.
    AgentRestart {
        node: NodeId,
        /// The new agent offers these labels too (`ftdrive node --labels`), over the machine's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        labels: Option<Labels>,
        /// The new agent offers these resources, each over the machine's of its kind.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resources: Option<Resources>,
    },
    /// The head is killed and started again `down_ms` later from what it made durable; agents
    /// reconnect. Messages in flight to or from it are lost.
    HeadRestart {
        #[serde(default)]
        down_ms: u64,
    },
    /// The head's network is cut for `for_ms`: nothing passes between it and any agent, and
    /// what was sent meanwhile (or was in flight) arrives once the cut ends, as TCP delivers it
    /// after a partition shorter than its retransmission timeout; the links stay up, and the
    /// head answers no agent's ping meanwhile.
    HeadCut { for_ms: u64 },
    /// The user stops a job.
    StopJob { job: JobId },
    /// A process outside ftdrive (a forgotten `torchrun`) starts listening on `port` of the
    /// node's machine and never stops. It cannot bind a port a rank 0 listens on already; a
    /// rank 0 started on its port fails as torchrun does (`EADDRINUSE`, exit code 1).
    PortListener { node: NodeId, port: u16 },
    /// The machine's disk takes no write for `for_ms` (it filled up, then was cleared): every
    /// start there fails as the node's fault (AG-6), and its agent says so; what runs there
    /// runs on. The agent probes at each heartbeat, and says it is well once the disk is.
    DiskFull { node: NodeId, for_ms: u64 },
}

/// A scenario that cannot be run, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("scenario field `{field}`: {message}")]
pub struct ScenarioError {
    pub field: String,
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> ScenarioError {
    ScenarioError { field: field.into(), message: message.into() }
}

impl Scenario {
    pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        let example = r#"{"nodes": [{"name": "n1", "resources": {"cpu": 4}}], "jobs": [], "events": []}"#;
        let scenario: Scenario =
            crate::spec::parse_object(text, example).map_err(|(field, message)| err(field, message))?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// Checks limits and that every event names a node or job that exists by then.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        self.config.validate().map_err(|m| err("config", m))?;
        self.check_limits()?;
        let mut nodes: BTreeSet<&NodeId> = BTreeSet::new();
        for (i, node) in self.nodes.iter().enumerate() {
            check_name(format!("nodes[{i}].name"), node.name.as_str())?;
            if node.fence_after_ms == Some(0) {
                return Err(err(format!("nodes[{i}].fence_after_ms"), "must be 1 or more (leave it out for no fence)"));
            }
            if !nodes.insert(&node.name) {
                return Err(err(
                    format!("nodes[{i}].name"),
                    format!("`{}` appears twice; node names are unique", node.name),
                ));
            }
        }
        let mut jobs: BTreeMap<&JobId, &JobDef> = BTreeMap::new();
        for (i, job) in self.jobs.iter().enumerate() {
            check_name(format!("jobs[{i}].id"), job.id.as_str())?;
            if jobs.insert(&job.id, job).is_some() {
                return Err(err(format!("jobs[{i}].id"), format!("`{}` appears twice; job ids are unique", job.id)));
            }
            if job.run_ms == 0 {
                return Err(err(format!("jobs[{i}].run_ms"), "is 0; a process must run for at least 1 ms"));
            }
            if job.react_to_lost_peer_ms.is_some_and(|ms| ms > MAX_UNTIL_MS) {
                return Err(err(format!("jobs[{i}].react_to_lost_peer_ms"), "is longer than any scenario"));
            }
            self.check_before_the_end(format!("jobs[{i}].submit_at_ms"), job.submit_at_ms)?;
        }
        if let Some(at_ms) = self.heal_at_ms {
            self.check_before_the_end("heal_at_ms".into(), at_ms)?;
        }
        if let Some(at_ms) = self.liveness_at_ms.filter(|at_ms| *at_ms > self.until_ms) {
            let message = format!(
                "is {at_ms}, but the run ends at until_ms {}, so it would never be checked; raise until_ms or make it earlier",
                self.until_ms
            );
            return Err(err("liveness_at_ms", message));
        }
        self.check_events(&mut nodes, &jobs)
    }

    fn check_limits(&self) -> Result<(), ScenarioError> {
        let n = &self.network;
        if n.min_delay_ms > n.max_delay_ms {
            return Err(err("network.min_delay_ms", "exceeds max_delay_ms"));
        }
        if n.max_delay_ms > MAX_UNTIL_MS {
            return Err(err("network.max_delay_ms", format!("is {}; use at most {MAX_UNTIL_MS}", n.max_delay_ms)));
        }
        if n.drop_ppm >= 1_000_000 || n.duplicate_ppm >= 1_000_000 {
            return Err(err("network", "drop_ppm and duplicate_ppm must be below 1000000 (certainty)"));
        }
        let limits = [
            ("nodes", self.nodes.len(), MAX_SCENARIO_NODES),
            ("jobs", self.jobs.len(), MAX_SCENARIO_JOBS),
            ("events", self.events.len(), MAX_SCENARIO_EVENTS),
        ];
        for (field, len, max) in limits {
            if len > max {
                return Err(err(field, format!("has {len} entries; at most {max} are allowed")));
            }
        }
        if self.until_ms == 0 || self.until_ms > MAX_UNTIL_MS {
            return Err(err("until_ms", format!("is {}; use 1..={MAX_UNTIL_MS}", self.until_ms)));
        }
        self.check_heartbeats()
    }

    /// Every node heartbeats for the whole run, each beat a step or more: a run of more beats
    /// than `MAX_SCENARIO_HEARTBEATS` could not end within the simulator's step limit.
    fn check_heartbeats(&self) -> Result<(), ScenarioError> {
        let joins = self.events.iter().filter(|e| matches!(e.what, Fault::NodeJoin { .. })).count();
        let nodes = (self.nodes.len() + joins) as u64;
        let interval_ms = self.config.heartbeat_interval_ms.max(1);
        let beats = nodes.saturating_mul(self.until_ms / interval_ms);
        if beats <= MAX_SCENARIO_HEARTBEATS {
            return Ok(());
        }
        Err(err(
            "until_ms",
            format!(
                "is {}: {nodes} node(s) heartbeating every {interval_ms} ms until then is {beats} heartbeats, and a \
                 run takes at most {MAX_SCENARIO_HEARTBEATS}; shorten until_ms, use fewer nodes, or a longer \
                 config.heartbeat_interval_ms",
                self.until_ms
            ),
        ))
    }

    fn check_events<'a>(
        &'a self,
        nodes: &mut BTreeSet<&'a NodeId>,
        jobs: &BTreeMap<&JobId, &JobDef>,
    ) -> Result<(), ScenarioError> {
        let mut order: Vec<(u64, usize)> = self.events.iter().enumerate().map(|(i, e)| (e.at_ms, i)).collect();
        order.sort();
        for (_, i) in order {
            let field = |name: &str| format!("events[{i}].{name}");
            self.check_before_the_end(field("at_ms"), self.events[i].at_ms)?;
            let known_node = |nodes: &BTreeSet<&NodeId>, node: &NodeId| {
                if nodes.contains(node) {
                    Ok(())
                } else {
                    Err(err(field("node"), format!("no node `{node}` in nodes[] or an earlier node_join")))
                }
            };
            let at_ms = self.events[i].at_ms;
            // An event for a job not yet submitted would find nothing to act on.
            let known_job = |job: &JobId| match jobs.get(job) {
                None => Err(err(field("job"), format!("no job `{job}` in jobs[]"))),
                Some(def) if at_ms < def.submit_at_ms => Err(err(
                    field("at_ms"),
                    format!("is {at_ms}, before job `{job}` is submitted (submit_at_ms {})", def.submit_at_ms),
                )),
                Some(_) => Ok(()),
            };
            match &self.events[i].what {
                Fault::NodeDrain { node, deadline_ms } | Fault::OperatorDrain { node, deadline_ms } => {
                    known_node(nodes, node)?;
                    if let Some(why) = crate::spec::delay_too_long(*deadline_ms) {
                        return Err(err(field("deadline_ms"), why));
                    }
                }
                Fault::AgentRestart { node, labels, resources } => {
                    known_node(nodes, node)?;
                    if let Some(labels) = labels {
                        crate::resources::check_labels(labels).map_err(|e| err(field("labels"), e))?;
                    }
                    if let Some(resources) = resources {
                        crate::resources::check_kinds(resources).map_err(|e| err(field("resources"), e))?;
                    }
                }
                Fault::NodeCrash { node }
                | Fault::AgentCrash { node }
                | Fault::OperatorUndrain { node }
                | Fault::OperatorForget { node } => known_node(nodes, node)?,
                Fault::NodeJoin { node } => {
                    check_name(field("node.name"), node.name.as_str())?;
                    nodes.insert(&node.name);
                }
                Fault::ProcessExit { job, rank, exit_code, signal, local_rank } => {
                    known_job(job)?;
                    Self::check_process_exit(&field, job, &jobs[job].spec, *rank, *exit_code, *signal, *local_rank)?;
                }
                Fault::StopJob { job } => known_job(job)?,
                Fault::DiskFull { node, for_ms } => {
                    known_node(nodes, node)?;
                    if *for_ms > MAX_UNTIL_MS {
                        return Err(err(field("for_ms"), "is longer than any scenario"));
                    }
                }
                Fault::PortListener { node, port } => {
                    known_node(nodes, node)?;
                    if *port < crate::config::FIRST_UNPRIVILEGED_PORT {
                        return Err(err(field("port"), format!("is {port}: agents report ports from 1024 up")));
                    }
                }
                Fault::HeadRestart { down_ms } => {
                    if *down_ms > MAX_UNTIL_MS {
                        return Err(err(field("down_ms"), "is longer than any scenario"));
                    }
                }
                Fault::HeadCut { for_ms } => {
                    if *for_ms == 0 || *for_ms > MAX_UNTIL_MS {
                        return Err(err(field("for_ms"), "must be from 1 ms to the longest scenario"));
                    }
                }
            }
        }
        Ok(())
    }

    /// A process exit is one of an exit code or a signal, each in its range, of a rank and
    /// local rank the job has.
    fn check_process_exit(
        field: &impl Fn(&str) -> String,
        job: &JobId,
        spec: &JobSpec,
        rank: u32,
        exit_code: Option<i32>,
        signal: Option<i32>,
        local_rank: Option<u32>,
    ) -> Result<(), ScenarioError> {
        if exit_code.is_some() == signal.is_some() {
            return Err(err(field("exit_code"), "give exactly one of exit_code and signal"));
        }
        if let Some(code) = exit_code.filter(|c| !(0..=255).contains(c)) {
            return Err(err(field("exit_code"), format!("is {code}; a process exits with 0 to 255")));
        }
        if let Some(signal) = signal.filter(|s| !(1..=MAX_SIGNAL).contains(s)) {
            return Err(err(field("signal"), format!("is {signal}; signals are 1 to {MAX_SIGNAL}")));
        }
        let max_nodes = spec.max_nodes;
        if rank >= max_nodes {
            let message =
                format!("is {rank}; job `{job}` has ranks 0 to {} (its max_nodes is {max_nodes})", max_nodes - 1);
            return Err(err(field("rank"), message));
        }
        let nproc = spec.nproc_per_node;
        if let Some(local_rank) = local_rank.filter(|l| *l >= nproc) {
            return Err(err(
                field("local_rank"),
                format!("is {local_rank}; job `{job}` runs {nproc} worker(s) per node"),
            ));
        }
        Ok(())
    }

    /// A job or event at or after `until_ms` would never happen: the run ends first.
    fn check_before_the_end(&self, field: String, at_ms: u64) -> Result<(), ScenarioError> {
        if at_ms < self.until_ms {
            return Ok(());
        }
        let message = format!(
            "is {at_ms}, but the run ends at until_ms {}, so it would never happen; raise until_ms or make it earlier",
            self.until_ms
        );
        Err(err(field, message))
    }
}

/// Linux's highest signal number (SIGRTMAX).
const MAX_SIGNAL: i32 = 64;

/// A node or job name the head would refuse is the scenario's error, not an invariant broken
/// by the run.
fn check_name(field: String, name: &str) -> Result<(), ScenarioError> {
    crate::head::check_name(name).map_err(|e| err(field, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{
      "seed": 7,
      "config": {"heartbeat_interval_ms": 1000, "node_timeout_ms": 3000},
      "nodes": [{"name": "n1", "resources": {"cpu": 1}, "labels": {}}],
      "jobs": [{"id": "j1", "submit_at_ms": 0, "spec": {"name": "t", "command": ["x"], "min_nodes": 1, "max_nodes": 1}, "run_ms": 60000}],
      "events": [
        {"at_ms": 10000, "type": "node_crash", "node": "n1"},
        {"at_ms": 12000, "type": "node_join", "node": {"name": "n4", "resources": {"cpu": 1}}},
        {"at_ms": 15000, "type": "node_drain", "node": "n4", "deadline_ms": 5000},
        {"at_ms": 20000, "type": "process_exit", "job": "j1", "rank": 0, "exit_code": 1},
        {"at_ms": 30000, "type": "stop_job", "job": "j1"}
      ],
      "until_ms": 600000
    }"#;

    #[test]
    fn design_example_parses() {
        let s = Scenario::parse(GOOD).unwrap();
        assert_eq!(s.events.len(), 5);
        assert_eq!(s.network, NetworkSpec::default());
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (GOOD.replace("\"node\": \"n1\"}", "\"node\": \"n9\"}"), "events[0].node", "no node `n9`"),
            (GOOD.replace("\"node\": \"n1\"}", "\"nod\": \"n1\"}"), "events[0]", "unknown field `nod`"),
            (GOOD.replace("\"job\": \"j1\", \"rank\"", "\"job\": \"j2\", \"rank\""), "events[3].job", "no job `j2`"),
            (GOOD.replace("\"min_nodes\": 1", "\"min_nodes\": 0"), "jobs[0].spec", "min_nodes"),
            (GOOD.replace("\"until_ms\": 600000", "\"until_ms\": 600000, \"colour\": 1"), "colour", "unknown field"),
            (GOOD.replace("\"type\": \"node_crash\"", "\"type\": \"meteor\""), "events[0]", "unknown variant"),
            (GOOD.replace("\"cpu\": 1}, \"labels\"", "\"cpu\": -1}, \"labels\""), "nodes[0].resources", ">= 0"),
            (GOOD.replace("\"run_ms\"", "\"run_m\""), "jobs[0]", "did you mean `run_ms`?"),
            (GOOD.replace("\"node_drain\"", "\"node_drian\""), "events[2]", "did you mean `node_drain`?"),
            (GOOD.replace("\"seed\": 7", "\"seed\": -7"), "seed", "expected a non-negative integer"),
            (GOOD.replace("\"rank\": 0", "\"rank\": 1"), "events[3].rank", "has ranks 0 to 0 (its max_nodes is 1)"),
            (GOOD.replace("\"at_ms\": 30000", "\"at_ms\": 600000"), "events[4].at_ms", "never happen"),
            (
                GOOD.replace("\"until_ms\"", "\"until_ms\":"),
                "(document)",
                "is not valid JSON: expected value at line 13",
            ),
            (GOOD.replace("\"exit_code\": 1", "\"exit_code\": 999"), "events[3].exit_code", "0 to 255"),
            (GOOD.replace("\"deadline_ms\": 5000", "\"deadline_ms\": 90000000"), "events[2].deadline_ms", "one day"),
            (GOOD.replace("\"exit_code\": 1", "\"signal\": 0"), "events[3].signal", "signals are 1 to 64"),
            (GOOD.replace("\"name\": \"n1\"", "\"name\": \"n 1\""), "nodes[0].name", "is not a valid name"),
            (GOOD.replace("\"id\": \"j1\"", "\"id\": \"../j1\""), "jobs[0].id", "is not a valid name"),
            (
                GOOD.replace("\"submit_at_ms\": 0", "\"submit_at_ms\": 25000"),
                "events[3].at_ms",
                "is 20000, before job `j1` is submitted (submit_at_ms 25000)",
            ),
            (
                GOOD.replace("\"seed\": 7", "\"seed\": 7, \"network\": {\"min_delay_ms\": 1, \"max_delay_ms\": 18446744073709551615, \"drop_ppm\": 0, \"duplicate_ppm\": 0}"),
                "network.max_delay_ms",
                "use at most",
            ),
            ("[1, 2]".to_string(), "(document)", "is a JSON array; write one JSON object, such as {\"nodes\""),
            (GOOD.replace("\"seed\": 7", "\"seed\": 7, \"network\": 3"), "network", "expected a JSON object"),
            (
                GOOD.replace("\"submit_at_ms\": 0", "\"submit_at_ms\": 700000"),
                "jobs[0].submit_at_ms",
                "until_ms 600000",
            ),
            (
                GOOD.replace("\"until_ms\": 600000", "\"until_ms\": 600000, \"heal_at_ms\": 600000"),
                "heal_at_ms",
                "is 600000, but the run ends at until_ms 600000, so it would never happen",
            ),
            (
                GOOD.replace("\"until_ms\": 600000", "\"until_ms\": 600000, \"liveness_at_ms\": 600001"),
                "liveness_at_ms",
                "is 600001, but the run ends at until_ms 600000, so it would never be checked",
            ),
            (
                GOOD.replace("\"heartbeat_interval_ms\": 1000", "\"heartbeat_interval_ms\": 1"),
                "config",
                "use 10 or more",
            ),
            (
                // One node a millisecond apart for the longest run: far past the step limit.
                GOOD.replace("\"until_ms\": 600000", "\"until_ms\": 2592000000")
                    .replace("\"heartbeat_interval_ms\": 1000", "\"heartbeat_interval_ms\": 10"),
                "until_ms",
                "heartbeats, and a run takes at most 500000000",
            ),
        ];
        for (text, field, fragment) in cases {
            let e = Scenario::parse(&text).unwrap_err();
            assert!(e.field.starts_with(field), "expected field {field}, got {e}");
            assert!(e.message.contains(fragment), "expected `{fragment}` in {e}");
        }
    }
}
