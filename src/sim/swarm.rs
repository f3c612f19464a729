//! Swarm testing: from one seed, a random cluster, job mix and fault schedule; a fault phase,
//! then a healed phase (perfect network, every node back) after which every job must end.

use super::scenario::{Fault, FaultEvent, JobDef, NetworkSpec, NodeDef, Scenario};
use super::{SimOptions, SimReport, Simulation, Violation};
use crate::config::HeadConfig;
use crate::driver::Budget;
use crate::ids::{JobId, NodeId};
use crate::resources::{is_preemptible, Labels, Resources};
use crate::spec::{JobSpec, RestartMode, Strategy};
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The result of one seed.
#[derive(Clone, Debug)]
pub struct SeedResult {
    pub seed: u64,
    pub violations: Vec<Violation>,
    pub trace_hash: String,
    pub steps: u64,
}

struct Gen(ChaCha8Rng);

impl Gen {
    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n.max(1)
    }
    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low + 1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// The case for `seed`: a scenario that heals when its faults stop (`heal_at_ms`) and by whose
/// end every job must have ended (`liveness_at_ms`).
pub fn generate(seed: u64) -> Scenario {
    let mut g = Gen(ChaCha8Rng::seed_from_u64(seed ^ 0x5357_4152_4d00));
    let mut nodes = gen_nodes(&mut g);
    gen_fences(seed, &mut nodes);
    let scarcity = gen_port_scarcity(seed);
    let mut jobs: Vec<JobDef> = (0..g.range(1, 6)).map(|i| gen_job(&mut g, i, &nodes, scarcity)).collect();
    let fault_ms = g.range(20_000, 180_000);
    let mut events = gen_faults(&mut g, &nodes, &jobs, fault_ms);
    let (master_port_base, ports_per_node) = scarcity
        .map_or_else(|| (HeadConfig::default().master_port_base, HeadConfig::default().ports_per_node), |s| s.config());
    events.extend(gen_listeners(seed, &nodes, fault_ms, master_port_base));
    events.extend(gen_full_disks(seed, &nodes, fault_ms));
    events.extend(gen_agent_crashes(seed, &nodes, fault_ms));
    events.extend(gen_head_cuts(seed, fault_ms));
    gen_reactions(seed, &mut jobs);
    events.sort_by_key(|e| e.at_ms);
    let healed_ms: u64 = jobs.iter().map(time_to_end_ms).sum();
    let drawn = NetworkSpec {
        min_delay_ms: g.range(0, 5),
        max_delay_ms: g.range(5, 60),
        drop_ppm: if g.chance(30) { 0 } else { g.range(0, 30_000) as u32 },
        duplicate_ppm: if g.chance(30) { 0 } else { g.range(0, 20_000) as u32 },
    };
    let network = orderly_network(seed).unwrap_or(drawn);
    let starvation_ms = g.range(5_000, 60_000);
    // Some cases keep few DEAD nodes, so that retention forgets them as they die (FG-3).
    let retain_dead_nodes = if g.chance(30) { g.range(0, 3) as usize } else { HeadConfig::default().retain_dead_nodes };
    let config = HeadConfig {
        starvation_ms,
        retain_dead_nodes,
        seed,
        master_port_base,
        ports_per_node,
        ..HeadConfig::default()
    };
    let liveness_at_ms = fault_ms + healed_ms;
    let scenario = Scenario {
        seed,
        config,
        network,
        nodes,
        jobs,
        events,
        until_ms: liveness_at_ms,
        heal_at_ms: Some(fault_ms),
        liveness_at_ms: Some(liveness_at_ms),
    };
    scenario.validate().expect("generated scenarios are valid");
    scenario
}

/// How long a job may take once faults stop: two runs (one restart), its scale-up delay and
/// time to notice and re-place. Faults can leave a STRICT_PACK job on the one node alive when
/// it lost the rest, with room for fewer ranks than it wants; its running ranks never move, so
/// in actor mode the others run there in turn, one run each (swarm seed 2064375).
fn time_to_end_ms(job: &JobDef) -> u64 {
    let confined = job.spec.strategy == Strategy::StrictPack && job.spec.restart == RestartMode::Actor;
    let runs = if confined { u64::from(job.spec.max_nodes) + 1 } else { 2 };
    runs * job.run_ms + job.spec.scale_up_delay_ms + 40_000
}

fn gen_nodes(g: &mut Gen) -> Vec<NodeDef> {
    (0..g.range(3, 10))
        .map(|i| {
            let mut labels = Labels::new();
            labels.insert("zone".into(), g.pick(&["a", "b"]).to_string());
            labels.insert("rack".into(), format!("r{}", g.below(3)));
            if g.chance(20) {
                labels.insert("preemptible".into(), "true".into());
            }
            let gpu = if g.chance(30) { g.range(1, 2) } else { 0 };
            NodeDef {
                name: NodeId::new(&format!("n{i:02}")),
                resources: Resources::units(&[("cpu", g.range(1, 4)), ("gpu", gpu)]),
                labels,
                port_space: machine_of(i as usize),
                fence_after_ms: None,
            }
        })
        .collect()
}

/// A job that the full cluster can always run on its own, so that liveness is a fair demand.
fn gen_job(g: &mut Gen, i: u64, nodes: &[NodeDef], scarcity: Option<Scarcity>) -> JobDef {
    let mut spec = JobSpec::minimal(&format!("job{i}"), &["train"], 1, 1);
    spec.strategy = *g.pick(&[
        Strategy::StrictSpread,
        Strategy::StrictSpread,
        Strategy::StrictSpread,
        Strategy::Spread,
        Strategy::Pack,
        Strategy::StrictPack,
    ]);
    spec.bundle = if g.chance(20) {
        Resources::units(&[("gpu", 1)])
    } else {
        Resources::new().with_milli("cpu", *g.pick(&[500, 1000, 1000]))
    };
    if g.chance(15) {
        spec.node_selector.insert("zone".into(), g.pick(&["a", "b"]).to_string());
    }
    if g.chance(10) {
        spec.pack_by = Some("rack".into());
    }
    let most = capacity_for(&spec, nodes, scarcity).max(1) as u64;
    if capacity_for(&spec, nodes, scarcity) == 0 {
        spec.bundle = Resources::new().with_milli("cpu", 500);
        spec.node_selector.clear();
        spec.pack_by = None;
    }
    let most = most.min(capacity_for(&spec, nodes, scarcity).max(1) as u64);
    spec.min_nodes = g.range(1, most.min(3)) as u32;
    spec.max_nodes = spec.min_nodes + g.range(0, 2) as u32;
    spec.hot_spares = g.below(2) as u32;
    spec.restart = if g.chance(60) { RestartMode::Gang } else { RestartMode::Actor };
    spec.priority = g.range(0, 2) as i32 - 1;
    spec.retries.user = Budget::Left(g.range(0, 3) as u32);
    spec.retries.system = Budget::Left(g.range(1, 5) as u32);
    spec.retries.preemption = if g.chance(50) { Budget::Unlimited } else { Budget::Left(g.range(0, 3) as u32) };
    spec.retries.single_budget = g.chance(10);
    if g.chance(20) {
        spec.retries.non_retryable_exit_codes = vec![3];
    }
    spec.retries.backoff_ms.initial = g.range(100, 2_000);
    spec.retries.backoff_ms.max = spec.retries.backoff_ms.initial + g.range(0, 8_000);
    // Only where the job fits without preemptible nodes: otherwise it would rightly wait
    // (reported infeasible) forever once its last attempt must avoid them.
    let steady: Vec<NodeDef> = nodes.iter().filter(|n| !is_preemptible(&n.labels)).cloned().collect();
    spec.last_attempt_non_preemptible = g.chance(20) && capacity_for(&spec, &steady, scarcity) >= spec.min_nodes;
    spec.scale_up_delay_ms = g.range(0, 5_000);
    spec.stop_grace_ms = g.range(0, 5_000);
    JobDef {
        id: JobId::new(&format!("j{i}")),
        submit_at_ms: g.range(0, 60_000),
        spec,
        run_ms: g.range(2_000, 60_000),
        spawn_error: None,
        react_to_lost_peer_ms: None,
    }
}

/// How many of `spec`'s bundles the whole (empty) cluster can hold at once, by its rules
/// (with scarce ports, each node's sure share of them).
fn capacity_for(spec: &JobSpec, nodes: &[NodeDef], scarcity: Option<Scarcity>) -> u32 {
    let fits_per_node = |n: &NodeDef| -> u64 {
        let selector = spec.node_selector.iter().all(|(k, v)| n.labels.get(k) == Some(v));
        if !selector {
            return 0;
        }
        let fits = spec.bundle.iter().filter(|(_, q)| *q > 0).map(|(r, q)| n.resources.milli(r) / q).min().unwrap_or(1);
        scarcity.map_or(fits, |s| fits.min(s.sure_for(n)))
    };
    let domains: Vec<Vec<&NodeDef>> = match &spec.pack_by {
        Some(key) => {
            let mut by: std::collections::BTreeMap<&str, Vec<&NodeDef>> = Default::default();
            for n in nodes {
                if let Some(v) = n.labels.get(key) {
                    by.entry(v.as_str()).or_default().push(n);
                }
            }
            by.into_values().collect()
        }
        None => vec![nodes.iter().collect()],
    };
    let in_domain = |d: &Vec<&NodeDef>| -> u64 {
        match spec.strategy {
            Strategy::StrictSpread => d.iter().filter(|n| fits_per_node(n) > 0).count() as u64,
            Strategy::StrictPack => d.iter().map(|n| fits_per_node(n)).max().unwrap_or(0),
            Strategy::Spread | Strategy::Pack => d.iter().map(|n| fits_per_node(n)).sum(),
        }
    };
    domains.iter().map(in_domain).max().unwrap_or(0).min(u64::from(u32::MAX)) as u32
}

fn gen_faults(g: &mut Gen, nodes: &[NodeDef], jobs: &[JobDef], fault_ms: u64) -> Vec<FaultEvent> {
    let mut times: Vec<u64> = (0..g.range(0, 16)).map(|_| g.range(1_000, fault_ms)).collect();
    times.sort();
    let mut known: Vec<NodeDef> = nodes.to_vec();
    let mut events = Vec::new();
    for at_ms in times {
        let node = g.pick(&known).name.clone();
        let what = match g.below(100) {
            0..=19 => {
                if g.chance(25) {
                    // Forgotten once it could be DEAD (the node timeout is 3 s), or refused.
                    let forget_at_ms = (at_ms + g.range(2_000, 8_000)).min(fault_ms);
                    events.push(FaultEvent { at_ms: forget_at_ms, what: Fault::OperatorForget { node: node.clone() } });
                }
                Fault::NodeCrash { node }
            }
            20..=34 => {
                let def = if g.chance(50) { g.pick(&known).clone() } else { new_node(g, known.len()) };
                if !known.iter().any(|k| k.name == def.name) {
                    known.push(def.clone());
                }
                Fault::NodeJoin { node: def }
            }
            35..=44 => Fault::NodeDrain { node, deadline_ms: g.range(1_000, 10_000) },
            45..=49 => {
                if g.chance(50) {
                    let undrain_at_ms = (at_ms + g.range(200, 5_000)).min(fault_ms);
                    events
                        .push(FaultEvent { at_ms: undrain_at_ms, what: Fault::OperatorUndrain { node: node.clone() } });
                }
                Fault::OperatorDrain { node, deadline_ms: g.range(1_000, 10_000) }
            }
            50..=79 => {
                let job = g.pick(jobs);
                let (exit_code, signal) = match g.below(4) {
                    0 => (Some(0), None),
                    1 => (Some(1), None),
                    2 => (Some(3), None),
                    _ => (None, Some(9)),
                };
                Fault::ProcessExit {
                    job: job.id.clone(),
                    rank: g.below(u64::from(job.spec.max_nodes)) as u32,
                    exit_code,
                    signal,
                    local_rank: None,
                }
            }
            80..=87 => {
                // Some restarts offer a label and a resource more (an operator adding them): what
                // runs there stays, and every job still fits the cluster it was drawn for.
                let (labels, resources) = if g.chance(30) {
                    let team = g.pick(&["a", "b"]).to_string();
                    let ssd = Resources::units(&[("ssd", g.range(1, 4))]);
                    (Some(Labels::from([("team".to_string(), team)])), Some(ssd))
                } else {
                    (None, None)
                };
                Fault::AgentRestart { node, labels, resources }
            }
            88..=94 => Fault::HeadRestart { down_ms: g.range(0, 3_000) },
            _ => Fault::StopJob { job: g.pick(jobs).id.clone() },
        };
        if before_its_job(&what, jobs, at_ms) {
            continue; // nothing to act on yet: a scenario may not say so (drawn all the same)
        }
        events.push(FaultEvent { at_ms, what });
    }
    events.sort_by_key(|e| e.at_ms);
    events
}

/// Processes outside ftdrive that start listening on rendezvous ports (PS-4), in a quarter of
/// the cases. Drawn from a generator of their own, so that every seed's other events are what
/// they were before these were added.
fn gen_listeners(seed: u64, nodes: &[NodeDef], fault_ms: u64, base: u16) -> Vec<FaultEvent> {
    let mut g = Gen(ChaCha8Rng::seed_from_u64(seed ^ 0x4c49_5354_454e));
    if !g.chance(25) {
        return Vec::new();
    }
    let base = u64::from(base);
    (0..g.range(1, 4))
        .map(|_| {
            let node = g.pick(nodes).name.clone();
            let port = g.range(base, (base + 4).min(65_535)) as u16;
            FaultEvent { at_ms: g.range(1_000, fault_ms), what: Fault::PortListener { node, port } }
        })
        .collect()
}

/// Rendezvous ports scarce on every machine (PS-2): each node may hold `per_node` bundles, and
/// a machine's pool holds one node's share and part of another's.
#[derive(Clone, Copy, Debug)]
struct Scarcity {
    per_node: u64,
    pool: u64,
}

impl Scarcity {
    /// `master_port_base` and `ports_per_node`.
    fn config(self) -> (u16, u16) {
        ((65_536 - self.pool) as u16, self.per_node as u16)
    }

    /// The bundles `node` can hold in any order of its machine's nodes joining and dying: a
    /// machine of its own has its whole share; one of two sharing a machine, what the other's
    /// leaves at least.
    fn sure_for(self, node: &NodeDef) -> u64 {
        match node.port_space.is_empty() {
            true => self.per_node,
            false => self.per_node.min(self.pool - self.per_node),
        }
    }
}

/// Scarce ports in a seventh of the cases: 2 to 4 per node, and a pool short of two nodes'
/// shares by 1 or more, so that a machine's second node holds fewer bundles than its first
/// (perhaps none) and takes the first's share when it dies; jobs are drawn to fit each node's
/// sure share (`capacity_for`). From a generator of its own, as `gen_listeners`.
fn gen_port_scarcity(seed: u64) -> Option<Scarcity> {
    let mut g = Gen(ChaCha8Rng::seed_from_u64(seed ^ 0x0050_4f52_5453));
    if !g.chance(14) {
        return None;
    }
    let per_node = g.range(2, 4);
    Some(Scarcity { per_node, pool: per_node + g.range(0, per_node - 1) })
}

/// Disks that fill up for a while (AG-6), in a fifth of the cases; from a generator of their
/// own, as `gen_listeners`.
fn gen_full_disks(seed: u64, nodes: &[NodeDef], fault_ms: u64) -> Vec<FaultEvent> {
    let mut g = Gen(ChaCha8Rng::seed_from_u64(seed ^ 0x4449_534b_4655));
    if !g.chance(20) {
        return Vec::new();
    }
    (0..g.range(1, 3))
        .map(|_| {
            let node = g.pick(nodes).name.clone();
            FaultEvent { at_ms: g.range(1_000, fault_ms), what: Fault::DiskFull { node, for_ms: g.range(500, 30_000) } }
        })
        .collect()
}

/// Agents killed with their processes and started again at once (SL-1), in a fifth of the
/// cases; from a generator of their own, as `gen_listeners`.
fn gen_agent_crashes(seed: u64, nodes: &[NodeDef], fault_ms: u64) -> Vec<FaultEvent> {
    let mut g = Gen(ChaCha8Rng::seed_from_u64(seed ^ 0x4147_4352_5348));
    if !g.chance(20) {
        return Vec::new();
    }
    (0..g.range(1, 4))
        .map(|_| FaultEvent {
            at_ms: g.range(1_000, fault_ms),
            what: Fault::AgentCrash { node: g.pick(nodes).name.clone() },
        })
        .collect()
}

/// Cuts of the head's network, most longer than the node timeout (FD-1), in a sixth of the
/// cases; from a generator of their own, as `gen_listeners`.
fn gen_head_cuts(seed: u64, fault_ms: u64) -> Vec<FaultEvent> {
    let mut g = Gen(ChaCha8Rng::seed_from_u64(seed ^ 0x4355_5453));
    if !g.chance(16) {
        return Vec::new();
    }
    (0..g.range(1, 3))
        .map(|_| FaultEvent { at_ms: g.range(1_000, fault_ms), what: Fault::HeadCut { for_ms: g.range(500, 12_000) } })
        .collect()
}

/// For a third of the seeds, gangs whose ranks exit 1 soon after a peer is lost with its
/// machine or agent, as real ranks do: `charge_explained` then finds any such exit charged to
/// `user` instead of to the loss (AT-1, SL-1). From a generator of their own, as
/// `gen_listeners`.
fn gen_reactions(seed: u64, jobs: &mut [JobDef]) {
    let mut g = Gen(ChaCha8Rng::seed_from_u64(seed ^ 0x5245_4143_5453));
    if !g.chance(33) {
        return;
    }
    for job in jobs.iter_mut().filter(|j| j.spec.restart == RestartMode::Gang) {
        job.react_to_lost_peer_ms = Some(g.range(1, 1_000));
    }
}

/// For a quarter of the seeds, agents with a fence (AG-7), each its own, longer than the
/// heartbeat interval (at which a head that is up is heard) and often shorter than a head
/// restart lasts (up to 3 s). A stream of its own, so that every seed's other draws stay as they were.
fn gen_fences(seed: u64, nodes: &mut [NodeDef]) {
    let mut g = Gen(ChaCha8Rng::seed_from_u64(seed ^ 0x4645_4e43_4553));
    if !g.chance(25) {
        return;
    }
    for node in nodes {
        node.fence_after_ms = g.chance(70).then(|| g.range(1_500, 5_000));
    }
}

/// For a tenth of the seeds, a network that loses, repeats and reorders nothing, on which
/// `busy_port_twice_at_most` is checked: drawn from the network above, the delays were never
/// equal and the check never ran in the swarm. A stream of its own, so that every seed's
/// other draws stay as they were.
fn orderly_network(seed: u64) -> Option<NetworkSpec> {
    let mut g = Gen(ChaCha8Rng::seed_from_u64(seed ^ 0x4f52_4445_524c));
    if !g.chance(10) {
        return None;
    }
    let delay_ms = g.range(0, 30);
    Some(NetworkSpec { min_delay_ms: delay_ms, max_delay_ms: delay_ms, drop_ppm: 0, duplicate_ppm: 0 })
}

/// Is `what` about a job not yet submitted at `at_ms`?
fn before_its_job(what: &Fault, jobs: &[JobDef], at_ms: u64) -> bool {
    let (Fault::ProcessExit { job, .. } | Fault::StopJob { job }) = what else { return false };
    jobs.iter().any(|j| j.id == *job && at_ms < j.submit_at_ms)
}

fn new_node(g: &mut Gen, index: usize) -> NodeDef {
    let labels = Labels::from([
        ("zone".to_string(), g.pick(&["a", "b"]).to_string()),
        ("rack".to_string(), format!("r{}", g.below(3))),
    ]);
    NodeDef {
        name: NodeId::new(&format!("n{index:02}")),
        resources: Resources::units(&[("cpu", g.range(1, 4))]),
        labels,
        port_space: machine_of(index),
        fence_after_ms: None,
    }
}

/// Nodes share machines in twos (their agents draw from one port space), and every third
/// node has a machine of its own: `rendezvous_port_once` sees both kinds of pool. Drawn from
/// the index, not the generator, so that every seed's scenario is what it was before.
fn machine_of(index: usize) -> String {
    if index % 3 == 2 {
        String::new()
    } else {
        format!("m{}", index / 3)
    }
}

/// Runs one seed (twice with `check_determinism`, comparing trace hashes).
pub fn run_seed(seed: u64, check_determinism: bool) -> SeedResult {
    run_seed_traced(seed, check_determinism, false).0
}

/// As `run_seed`, also returning the trace lines when `keep_trace`.
pub fn run_seed_traced(seed: u64, check_determinism: bool, keep_trace: bool) -> (SeedResult, Vec<String>) {
    let case = generate(seed);
    let report = run_case(&case, seed, keep_trace);
    let mut violations = report.violations.clone();
    if check_determinism && violations.is_empty() {
        let again = run_case(&case, seed, false);
        if again.trace_hash != report.trace_hash {
            violations.push(Violation {
                invariant: "determinism".into(),
                t_ms: report.end_ms,
                step: report.stats.steps,
                detail: format!("trace hash {} then {}", report.trace_hash, again.trace_hash),
            });
        }
    }
    let result = SeedResult { seed, violations, trace_hash: report.trace_hash, steps: report.stats.steps };
    (result, report.trace)
}

/// Runs a generated case (its heal and liveness check are in it).
pub fn run_case(case: &Scenario, seed: u64, keep_trace: bool) -> SimReport {
    Simulation::new(case, seed, SimOptions { keep_trace, ..SimOptions::default() }).run()
}
