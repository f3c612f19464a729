//! The environment contract of DESIGN §4: what every process of a command actor is started
//! with, so that a program written for torchrun runs unchanged. Computed here; runtimes only
//! apply it. A command actor runs `nproc_per_node` workers: they share the group's variables
//! ([`contract`]) and differ only in [`worker_vars`].

use super::Budget;
use crate::ids::{ActorId, JobId, NodeId};
use crate::resources::Devices;
use crate::spec::JobSpec;
use std::collections::BTreeMap;

/// Where and as whom one attempt runs.
pub struct Placement<'a> {
    pub job: &'a JobId,
    pub spec: &'a JobSpec,
    pub actor: &'a ActorId,
    pub attempt: u32,
    pub cycle: u32,
    /// The actor's rank in the cycle (torchrun's node rank, `GROUP_RANK`).
    pub rank: u32,
    /// Ranks (nodes) in the cycle.
    pub world_size: u32,
    pub master_addr: &'a str,
    pub master_port: u16,
    pub node: &'a NodeId,
    /// The GPU devices the bundle holds.
    pub devices: Devices,
    /// User-budget retries charged before this attempt started.
    pub restarts: u32,
}

/// The user's `env` with the group's contract on top (the contract wins a clash: a user-set
/// `RANK` would break rendezvous), and worker 0's own variables.
pub fn contract(p: &Placement) -> BTreeMap<String, String> {
    let mut env = p.spec.env.clone();
    let nproc = p.spec.nproc_per_node;
    let world = p.world_size * nproc;
    let max_restarts = match p.spec.retries.user {
        Budget::Unlimited => i32::MAX as u32,
        Budget::Left(n) => n,
    };
    let pairs = [
        ("WORLD_SIZE", world.to_string()),
        ("LOCAL_WORLD_SIZE", nproc.to_string()),
        ("GROUP_RANK", p.rank.to_string()),
        ("GROUP_WORLD_SIZE", p.world_size.to_string()),
        ("ROLE_NAME", p.spec.name.clone()),
        ("ROLE_WORLD_SIZE", world.to_string()),
        ("MASTER_ADDR", p.master_addr.to_string()),
        ("MASTER_PORT", p.master_port.to_string()),
        // As torchrun counts: restarts after failures, within TORCHELASTIC_MAX_RESTARTS (the
        // user budget); a membership change or a lost node's replacement is not one.
        ("TORCHELASTIC_RESTART_COUNT", p.restarts.to_string()),
        ("TORCHELASTIC_RUN_ID", p.job.to_string()),
        ("TORCHELASTIC_MAX_RESTARTS", max_restarts.to_string()),
        // Rank 0 serves the rendezvous store at MASTER_ADDR:MASTER_PORT; no agent runs one.
        ("TORCHELASTIC_USE_AGENT_STORE", "False".to_string()),
        ("TORCHX_RANK0_HOST", p.master_addr.to_string()),
        ("FTDRIVE_JOB_ID", p.job.to_string()),
        ("FTDRIVE_ACTOR", p.actor.to_string()),
        ("FTDRIVE_ATTEMPT", p.attempt.to_string()),
        ("FTDRIVE_CYCLE", p.cycle.to_string()),
        ("FTDRIVE_NODE", p.node.to_string()),
        ("FTDRIVE_MIN_NODES", p.spec.min_nodes.to_string()),
        ("FTDRIVE_MAX_NODES", p.spec.max_nodes.to_string()),
    ];
    for (key, value) in pairs {
        env.insert(key.to_string(), value);
    }
    // As torchrun: a collective that fails or times out (a peer's node is gone) ends the
    // process instead of hanging it, so that the failure is seen and the job re-formed.
    env.entry("TORCH_NCCL_ASYNC_ERROR_HANDLING".to_string()).or_insert_with(|| "1".to_string());
    if nproc > 1 {
        // As torchrun: several workers each spawning a thread per core would overload the node.
        env.entry("OMP_NUM_THREADS".to_string()).or_insert_with(|| "1".to_string());
    }
    // An empty list hides every device, as Ray does for a task with no GPUs: a bundle without
    // GPUs on a GPU node would otherwise see, and take, devices that another job holds.
    env.insert("CUDA_VISIBLE_DEVICES".to_string(), p.devices.to_string());
    if !p.devices.is_empty() {
        // Agents number devices in PCI bus order, as nvidia-smi does; CUDA's default order is
        // "fastest first", which on a mixed machine would name other devices.
        env.entry("CUDA_DEVICE_ORDER".to_string()).or_insert_with(|| "PCI_BUS_ID".to_string());
    }
    for (key, value) in worker_vars(p.rank, nproc, 0) {
        env.insert(key.to_string(), value);
    }
    env
}

/// What worker `local_rank` of the group with rank `group_rank` has of its own:
/// `RANK` = `group_rank`·`nproc` + `local_rank`, `LOCAL_RANK`, `ROLE_RANK` = `RANK`.
pub fn worker_vars(group_rank: u32, nproc: u32, local_rank: u32) -> [(&'static str, String); 3] {
    let rank = group_rank * nproc + local_rank;
    [("RANK", rank.to_string()), ("LOCAL_RANK", local_rank.to_string()), ("ROLE_RANK", rank.to_string())]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Worker 0's environment in a 3-node job with `nproc` workers per node, whose `env` sets
    /// `RANK` and `NCCL_DEBUG`.
    fn env_of(nproc: u32, rank: u32, devices: Devices) -> BTreeMap<String, String> {
        let mut spec = JobSpec::minimal("t", &["true"], 2, 4);
        spec.nproc_per_node = nproc;
        spec.env.insert("RANK".into(), "99".into());
        spec.env.insert("NCCL_DEBUG".into(), "WARN".into());
        placed(&spec, rank, 3, devices)
    }

    /// The contract of rank 0 of a one-node job `spec`.
    fn rank0_of_one_node(spec: &JobSpec, devices: Devices) -> BTreeMap<String, String> {
        placed(spec, 0, 1, devices)
    }

    /// The contract of the actor with `rank` in a cycle of `world_size` nodes (actor j1/2,
    /// attempt 3, cycle 2, on n3).
    fn placed(spec: &JobSpec, rank: u32, world_size: u32, devices: Devices) -> BTreeMap<String, String> {
        let (job, node) = (JobId::new("j1"), NodeId::new("n3"));
        contract(&Placement {
            job: &job,
            spec,
            actor: &ActorId::new(job.clone(), 2),
            attempt: 3,
            cycle: 2,
            rank,
            world_size,
            master_addr: "10.0.0.1",
            master_port: 29_500,
            restarts: 0,
            node: &node,
            devices,
        })
    }

    #[test]
    fn contract_has_every_variable_and_overrides_user_rank() {
        let env = env_of(1, 1, Devices::NONE);
        assert_eq!(env["RANK"], "1");
        assert_eq!(env["NCCL_DEBUG"], "WARN");
        assert_eq!(env["TORCHELASTIC_RESTART_COUNT"], "0", "cycle 2, and no failure charged to the user");
        assert_eq!(env["MASTER_ADDR"], env["TORCHX_RANK0_HOST"]);
        assert_eq!(env["FTDRIVE_NODE"], "n3");
        assert_eq!(env["ROLE_NAME"], "t");
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "", "no GPUs: every device hidden");
        assert!(!env.contains_key("CUDA_DEVICE_ORDER"), "no devices to order");
        assert_eq!(
            env["TORCHELASTIC_USE_AGENT_STORE"], "False",
            "rank 0 serves the store, as torchrun's static rendezvous"
        );
        assert_eq!(
            env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1",
            "a failed collective ends the process, as under torchrun"
        );
        assert_eq!(env.len(), 25 + 1, "25 contract variables and NCCL_DEBUG");
    }

    /// torchrun takes the NCCL error handling from the environment when it is set there; the job's
    /// `env` is that environment here.
    #[test]
    fn the_jobs_own_nccl_error_handling_stands() {
        let mut spec = JobSpec::minimal("t", &["true"], 1, 1);
        spec.env.insert("TORCH_NCCL_ASYNC_ERROR_HANDLING".into(), "3".into());
        assert_eq!(rank0_of_one_node(&spec, Devices::NONE)["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "3");
    }

    /// The job's identity and limits, each to its source: the ids of the placement, the node
    /// range of the spec, and the user budget as torchelastic's restart limit (`i32::MAX` for
    /// an unlimited one, as torchrun has no word for it).
    #[test]
    fn identity_and_limits_come_from_the_placement_and_the_spec() {
        let mut spec = JobSpec::minimal("t", &["true"], 2, 5);
        spec.retries.user = crate::driver::Budget::from_i64(4).unwrap();
        let env = placed(&spec, 1, 3, Devices::NONE);
        let pairs = [
            ("FTDRIVE_JOB_ID", "j1"),
            ("TORCHELASTIC_RUN_ID", "j1"),
            ("FTDRIVE_ACTOR", "j1/2"),
            ("FTDRIVE_ATTEMPT", "3"),
            ("FTDRIVE_CYCLE", "2"),
            ("FTDRIVE_MIN_NODES", "2"),
            ("FTDRIVE_MAX_NODES", "5"),
            ("TORCHELASTIC_MAX_RESTARTS", "4"),
            ("MASTER_PORT", "29500"),
        ];
        for (key, value) in pairs {
            assert_eq!(env[key], value, "{key}");
        }
        spec.retries.user = crate::driver::Budget::Unlimited;
        assert_eq!(placed(&spec, 1, 3, Devices::NONE)["TORCHELASTIC_MAX_RESTARTS"], "2147483647");
    }

    /// A job cannot name devices of its own: a bundle with none sees none, one with GPUs sees
    /// exactly its own, whatever the job's `env` says.
    #[test]
    fn a_bundle_sees_only_its_own_devices_whatever_the_job_sets() {
        let mut spec = JobSpec::minimal("t", &["true"], 1, 1);
        spec.env.insert("CUDA_VISIBLE_DEVICES".into(), "0,1".into());
        let env = |devices| rank0_of_one_node(&spec, devices);
        assert_eq!(env(Devices::NONE)["CUDA_VISIBLE_DEVICES"], "");
        let two = Devices::from_indices(&[2, 3]).unwrap();
        assert_eq!(env(two)["CUDA_VISIBLE_DEVICES"], "2,3");
        assert_eq!(env(two)["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
    }

    #[test]
    fn several_workers_get_one_openmp_thread_each_unless_the_job_says_otherwise() {
        assert_eq!(env_of(4, 0, Devices::NONE)["OMP_NUM_THREADS"], "1", "as torchrun sets it");
        assert!(!env_of(1, 0, Devices::NONE).contains_key("OMP_NUM_THREADS"), "one worker keeps the default");
        let mut spec = JobSpec::minimal("t", &["true"], 1, 1);
        spec.nproc_per_node = 4;
        spec.env.insert("OMP_NUM_THREADS".into(), "6".into());
        assert_eq!(rank0_of_one_node(&spec, Devices::NONE)["OMP_NUM_THREADS"], "6", "the job's own value stands");
    }

    /// For N = 1, 2 and 8 workers per node: ranks are a permutation of 0..WORLD_SIZE, each
    /// node's workers contiguous, as torchrun numbers them.
    #[test]
    fn worker_ranks_cover_the_world_for_any_group_size() {
        for nproc in [1, 2, 8] {
            let mut ranks = Vec::new();
            for group_rank in 0..3 {
                let env = env_of(nproc, group_rank, Devices::first(nproc));
                assert_eq!(env["WORLD_SIZE"], (3 * nproc).to_string());
                assert_eq!(
                    (env["LOCAL_WORLD_SIZE"].as_str(), env["GROUP_WORLD_SIZE"].as_str()),
                    (&*nproc.to_string(), "3")
                );
                assert_eq!(env["CUDA_VISIBLE_DEVICES"], Devices::first(nproc).to_string());
                for local in 0..nproc {
                    let vars = worker_vars(group_rank, nproc, local);
                    assert_eq!(vars[1].1, local.to_string());
                    assert_eq!(vars[0].1, vars[2].1, "ROLE_RANK is RANK");
                    ranks.push(vars[0].1.parse::<u32>().unwrap());
                }
            }
            ranks.sort();
            assert_eq!(ranks, (0..3 * nproc).collect::<Vec<_>>(), "nproc {nproc}");
        }
    }
}
