//! Scheduler benchmarks (criterion): `cargo bench --bench scheduler`.
//!
//! (a) place 1,000 gangs of 8 bundles on 10,000 nodes — target under 50 ms for all of them;
//! (b) a 10,000-node cluster holding 80,000 bundles loses 1% of its nodes — target under
//!     20 ms to place every replacement;
//! (c) 10,000 nodes join, with and without a gang wider than the cluster waiting (infeasible,
//!     re-checked as each node joins) — the waiting gang should cost the joins little;
//! (d) why a gang waits on that full cluster (the `waiting` reason a job's view carries): what
//!     reading one pending job's status costs the head, and a listing of 1,000 such jobs.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use ftdrive::scheduler::{Need, NodeOffer, PgSpec, SchedEvent, Scheduler, SchedulerConfig, WaitingMemo};
use ftdrive::spec::Strategy;
use ftdrive::{Instant, Labels, NodeId, Resources};
use std::time::Duration;

const NODES: usize = 10_000;

fn cluster(cpu_per_node: u64) -> Scheduler {
    let mut s = Scheduler::new(SchedulerConfig::default());
    join_all(&mut s, cpu_per_node);
    s
}

fn join_all(s: &mut Scheduler, cpu_per_node: u64) {
    for n in 0..NODES {
        let labels = Labels::from([("rack".to_string(), format!("r{}", n / 40))]);
        let resources = Resources::units(&[("cpu", cpu_per_node), ("memory_mb", 65_536)]);
        s.add_node(NodeId::new(&format!("n{n:05}")), NodeOffer { labels, ..NodeOffer::of(resources) });
    }
}

fn gang(bundles: u32, submit_ms: u64) -> PgSpec {
    PgSpec {
        priority: 0,
        submit: Instant::from_ms(submit_ms),
        strategy: Strategy::StrictSpread,
        bundle: Resources::units(&[("cpu", 1), ("memory_mb", 4_096)]),
        node_selector: Labels::new(),
        pack_by: None,
        bundles,
        required: bundles,
    }
}

fn placed(s: &mut Scheduler) -> usize {
    std::iter::from_fn(|| s.poll_event()).filter(|e| matches!(e, SchedEvent::Placed(_))).count()
}

/// 1,000 pending gangs of 8 on an empty 10,000-node cluster.
fn pending_gangs() -> Scheduler {
    let mut s = cluster(8);
    for id in 1..=1_000u64 {
        s.create_pg(id, gang(8, id));
        s.request_gang(id);
    }
    s
}

/// 10,000 admitted gangs of 8 (80,000 bundles), nodes with room for 10 each.
fn full_cluster() -> Scheduler {
    let mut s = cluster(10);
    for id in 1..=10_000u64 {
        s.create_pg(id, gang(8, id));
        s.request_gang(id);
    }
    s.schedule(Instant::from_ms(1));
    assert_eq!(placed(&mut s), 80_000, "every bundle placed in the setup");
    s
}

fn lose_one_percent_and_replace(s: &mut Scheduler) -> usize {
    let now = Instant::from_ms(60_000);
    let mut lost = Vec::new();
    for n in (0..NODES).step_by(100) {
        let ix = s.node_ix(&NodeId::new(&format!("n{n:05}"))).expect("known node");
        lost.extend(s.kill_node(ix));
    }
    for &(pg, bundle) in &lost {
        s.request(pg, bundle, Need::Restore { lost_at: now });
    }
    s.schedule(now);
    let replaced = placed(s);
    assert_eq!(replaced, lost.len(), "every lost bundle re-placed");
    replaced
}

fn benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("scheduler");
    group.sample_size(20).measurement_time(Duration::from_secs(10));

    let template = pending_gangs();
    group.bench_function("a_place_1000_gangs_of_8_on_10000_nodes", |b| {
        b.iter_batched(
            || template.clone(),
            |mut s| {
                s.schedule(Instant::from_ms(1));
                assert_eq!(placed(&mut s), 8_000);
                s
            },
            BatchSize::LargeInput,
        )
    });

    let template = full_cluster();
    group.bench_function("b_replace_after_losing_1pct_of_10000_nodes_holding_80000_bundles", |b| {
        b.iter_batched(
            || template.clone(),
            |mut s| {
                lose_one_percent_and_replace(&mut s);
                s
            },
            BatchSize::LargeInput,
        )
    });

    let mut busy = template.clone();
    let wide = Resources::units(&[("cpu", 3), ("memory_mb", 4_096)]);
    for id in 20_000..21_000 {
        busy.create_pg(id, PgSpec { bundle: wide.clone(), ..gang(8, id) });
        busy.request_gang(id);
    }
    busy.schedule(Instant::from_ms(2));
    assert_eq!(placed(&mut busy), 0, "three cpus are free nowhere");
    let job = |pg: u64| format!("j{pg}");
    group.bench_function("d_why_a_gang_waits_on_10000_nodes_holding_80000_bundles", |b| {
        b.iter(|| {
            let why = busy.waiting_reason(20_000, &job, &mut WaitingMemo::default()).expect("it waits");
            assert!(why.starts_with("waiting for capacity"), "{why}");
            why
        })
    });
    group.bench_function("d_why_1000_look_alike_gangs_wait_in_one_listing", |b| {
        b.iter(|| {
            let mut memo = WaitingMemo::default();
            let reasons: Vec<String> =
                (20_000..21_000).map(|id| busy.waiting_reason(id, &job, &mut memo).expect("each waits")).collect();
            reasons
        })
    });

    group.bench_function("c_join_10000_nodes", |b| {
        b.iter(|| {
            let mut s = Scheduler::new(SchedulerConfig::default());
            join_all(&mut s, 8);
            s
        })
    });
    group.bench_function("c_join_10000_nodes_while_a_gang_of_20000_waits", |b| {
        b.iter(|| {
            let mut s = Scheduler::new(SchedulerConfig::default());
            s.create_pg(1, gang(20_000, 0));
            s.request_gang(1);
            join_all(&mut s, 8);
            assert!(s.pg(1).unwrap().infeasible.is_some());
            s
        })
    });
    group.finish();
}

criterion_group!(scheduler, benches);
criterion_main!(scheduler);
