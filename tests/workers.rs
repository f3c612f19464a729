//! Several workers per node and GPUs (DESIGN §4), on the core: for N = 1, 2 and 8 workers per
//! node, in gang and actor mode, after a re-placement and with a promoted spare, the workers'
//! global ranks stay a permutation of 0..WORLD_SIZE; GPU devices are held by one bundle at a
//! time and follow re-placements and a head restart.

mod support;

use ftdrive::driver::JobState;
use ftdrive::resources::Devices;
use ftdrive::spec::RestartMode;
use ftdrive::{JobId, Resources};
use std::collections::{BTreeMap, BTreeSet};
use support::{config, cpu, spec, TestCluster};

const NPROCS: [u32; 3] = [1, 2, 8];

/// Checks every running worker's environment against torchrun's contract for `groups` groups
/// of `nproc` workers; returns the (node, RANK) of each worker.
fn check_world(c: &TestCluster, job: &JobId, groups: u32, nproc: u32) -> Vec<(String, u32)> {
    let envs = c.worker_envs(job);
    let world = groups * nproc;
    assert_eq!(envs.len() as u32, world, "one process per worker of every running group");
    let mut by_group: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let mut placed = Vec::new();
    for (node, env) in &envs {
        let num = |name: &str| env[name].parse::<u32>().unwrap_or_else(|_| panic!("{name}={}", env[name]));
        assert_eq!(num("WORLD_SIZE"), world);
        assert_eq!(num("ROLE_WORLD_SIZE"), world);
        assert_eq!(num("LOCAL_WORLD_SIZE"), nproc);
        assert_eq!(num("GROUP_WORLD_SIZE"), groups);
        assert_eq!(num("ROLE_RANK"), num("RANK"));
        assert!(num("LOCAL_RANK") < nproc);
        assert_eq!(
            num("RANK"),
            num("GROUP_RANK") * nproc + num("LOCAL_RANK"),
            "torchrun numbers a node's workers contiguously"
        );
        by_group.entry(num("GROUP_RANK")).or_default().push(num("LOCAL_RANK"));
        placed.push((node.clone(), num("RANK")));
    }
    let mut ranks: Vec<u32> = placed.iter().map(|(_, r)| *r).collect();
    ranks.sort_unstable();
    assert_eq!(ranks, (0..world).collect::<Vec<_>>(), "RANK is a permutation of 0..WORLD_SIZE");
    assert_eq!(by_group.keys().copied().collect::<Vec<_>>(), (0..groups).collect::<Vec<_>>());
    placed
}

fn job_spec(name: &str, nodes: u32, nproc: u32, mode: RestartMode) -> ftdrive::JobSpec {
    let mut s = spec(name, nodes, nodes);
    s.nproc_per_node = nproc;
    s.restart = mode;
    s
}

#[test]
fn ranks_cover_the_world_after_a_node_is_lost_in_either_mode() {
    for mode in [RestartMode::Gang, RestartMode::Actor] {
        for nproc in NPROCS {
            let mut c = TestCluster::new(config());
            for n in 1..=4 {
                c.join(&format!("n{n}"), cpu(1));
            }
            let job = c.submit(job_spec("w", 3, nproc, mode));
            let before = check_world(&c, &job, 3, nproc);
            let lost = before.iter().find(|(_, rank)| *rank == 0).unwrap().0.clone();
            c.crash(&lost);
            c.advance(6_000);

            let after = check_world(&c, &job, 3, nproc);
            assert!(after.iter().all(|(node, _)| *node != lost), "{mode:?} N={nproc}: nothing runs on the lost node");
            assert!(after.iter().any(|(node, _)| node == "n4"), "{mode:?} N={nproc}: the bundle was re-placed on n4");
            c.finish(&job);
            assert_eq!(c.view(&job).state, JobState::Succeeded, "{mode:?} N={nproc}");
        }
    }
}

#[test]
fn a_promoted_spare_takes_the_failed_groups_ranks() {
    for nproc in NPROCS {
        let mut c = TestCluster::new(config());
        for n in 1..=3 {
            c.join(&format!("n{n}"), cpu(1));
        }
        let mut s = job_spec("spare", 2, nproc, RestartMode::Gang);
        s.hot_spares = 1;
        s.retries.user = ftdrive::driver::Budget::Left(1);
        let job = c.submit(s);
        check_world(&c, &job, 2, nproc);
        c.exit_worker(&job, 1, nproc - 1, 1);
        c.advance(1_000);

        let after = check_world(&c, &job, 2, nproc);
        let spare_node = after.iter().find(|(_, rank)| *rank == nproc).unwrap().0.clone();
        assert_eq!(spare_node, "n3", "N={nproc}: the spare's node runs group 1 now");
        let view = c.view(&job);
        let failed = view.ledger.iter().find(|e| e.actor.index == 1).expect("the failed group's entry");
        let evidence = &failed.evidence;
        if nproc > 1 {
            let last = nproc - 1;
            let expected = format!("worker {last} (rank {})", nproc + last);
            assert!(evidence.contains(&expected), "N={nproc}: ledger evidence names the worker: {evidence}");
        }
    }
}

#[test]
fn gpu_bundles_hold_distinct_devices_and_see_them() {
    let mut c = TestCluster::new(config());
    let gpus = Resources::units(&[("cpu", 8), ("gpu", 4)]);
    c.join_with_devices("n1", gpus, Devices::from_indices(&[0, 1, 2, 3]).unwrap());
    let mut a = spec("a", 1, 1);
    a.bundle = Resources::units(&[("cpu", 1), ("gpu", 2)]);
    a.nproc_per_node = 2;
    let mut b = a.clone();
    b.name = "b".into();
    let (ja, jb) = (c.submit(a), c.submit(b));

    let seen = |job: &JobId| -> BTreeSet<String> {
        c.worker_envs(job).into_iter().map(|(_, env)| env["CUDA_VISIBLE_DEVICES"].clone()).collect()
    };
    let (da, db) = (seen(&ja), seen(&jb));
    assert_eq!(da.len(), 1, "both workers of a group see the group's devices");
    let (da, db) = (da.into_iter().next().unwrap(), db.into_iter().next().unwrap());
    let held: BTreeSet<&str> = da.split(',').chain(db.split(',')).collect();
    assert_eq!(held.len(), 4, "two devices each, none shared: {da} and {db}");
    assert_eq!(c.view(&ja).actors[0].devices.to_string(), da, "the view shows the devices");
    assert_eq!(c.view(&ja).placement_groups[0].bundles[0].devices.to_string(), da);
}

#[test]
fn devices_follow_a_replacement_and_survive_a_head_restart() {
    let mut c = TestCluster::new(config());
    let gpus = Resources::units(&[("cpu", 8), ("gpu", 4)]);
    c.join_with_devices("n1", gpus.clone(), Devices::from_indices(&[0, 1, 2, 3]).unwrap());
    c.join_with_devices("n2", gpus, Devices::from_indices(&[4, 5, 6, 7]).unwrap());
    let mut s = spec("g", 1, 1);
    s.bundle = Resources::units(&[("cpu", 1), ("gpu", 2)]);
    let job = c.submit(s);
    let first = c.worker_envs(&job)[0].clone();
    c.crash(&first.0);
    c.advance(6_000);
    let (node, env) = c.worker_envs(&job)[0].clone();
    assert_ne!(node, first.0);
    let expected = if node == "n1" { "0,1" } else { "4,5" };
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], expected, "devices of the node it runs on now");

    // The first node is dead: the only place for another GPU bundle is beside the first.
    c.restart_head();
    let mut other = spec("other", 1, 1);
    other.bundle = Resources::units(&[("cpu", 1), ("gpu", 2)]);
    let second = c.submit(other);
    let (_, env2) = c.worker_envs(&second).into_iter().find(|(n, _)| *n == node).expect("placed beside the first");
    assert_eq!(env2["CUDA_VISIBLE_DEVICES"], if node == "n1" { "2,3" } else { "6,7" }, "re-adopted devices stay held");
}
