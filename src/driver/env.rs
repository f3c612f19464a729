//! The environment contract of DESIGN §4: what every command actor process is started with,
//! so that a program written for torchrun runs unchanged. Computed here; runtimes only apply it.

use super::Budget;
use crate::ids::{ActorId, JobId, NodeId};
use crate::spec::JobSpec;
use std::collections::BTreeMap;

/// Where and as whom one attempt runs.
pub struct Placement<'a> {
    pub job: &'a JobId,
    pub spec: &'a JobSpec,
    pub actor: &'a ActorId,
    pub attempt: u32,
    pub cycle: u32,
    pub rank: u32,
    pub world_size: u32,
    pub master_addr: &'a str,
    pub master_port: u16,
    pub node: &'a NodeId,
}

/// The user's `env` with the contract on top (the contract wins a clash: a user-set `RANK`
/// would break rendezvous).
pub fn contract(p: &Placement) -> BTreeMap<String, String> {
    let mut env = p.spec.env.clone();
    let max_restarts = match p.spec.retries.user {
        Budget::Unlimited => i32::MAX as u32,
        Budget::Left(n) => n,
    };
    let pairs = [
        ("RANK", p.rank.to_string()),
        ("WORLD_SIZE", p.world_size.to_string()),
        ("GROUP_RANK", p.rank.to_string()),
        ("LOCAL_RANK", "0".to_string()),
        ("LOCAL_WORLD_SIZE", "1".to_string()),
        ("MASTER_ADDR", p.master_addr.to_string()),
        ("MASTER_PORT", p.master_port.to_string()),
        ("TORCHELASTIC_RESTART_COUNT", p.cycle.saturating_sub(1).to_string()),
        ("TORCHELASTIC_RUN_ID", p.job.to_string()),
        ("TORCHELASTIC_MAX_RESTARTS", max_restarts.to_string()),
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
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_has_every_variable_and_overrides_user_rank() {
        let mut spec = JobSpec::minimal("t", &["true"], 2, 4);
        spec.env.insert("RANK".into(), "99".into());
        spec.env.insert("NCCL_DEBUG".into(), "WARN".into());
        let (job, node) = (JobId::new("j1"), NodeId::new("n3"));
        let env = contract(&Placement {
            job: &job,
            spec: &spec,
            actor: &ActorId::new(job.clone(), 2),
            attempt: 3,
            cycle: 2,
            rank: 1,
            world_size: 2,
            master_addr: "10.0.0.1",
            master_port: 29_500,
            node: &node,
        });
        assert_eq!(env["RANK"], "1");
        assert_eq!(env["NCCL_DEBUG"], "WARN");
        assert_eq!(env["TORCHELASTIC_RESTART_COUNT"], "1");
        assert_eq!(env["MASTER_ADDR"], env["TORCHX_RANK0_HOST"]);
        assert_eq!(env["FTDRIVE_NODE"], "n3");
        assert_eq!(env.len(), 18 + 1, "18 contract variables and NCCL_DEBUG");
    }
}
