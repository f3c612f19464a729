//! Unit tests of the scheduling policy: queue order, backfill with aging, strategies,
//! `pack_by`, selectors, and that nothing spins while nothing changes.

use super::*;

fn t(ms: u64) -> Instant {
    Instant::from_ms(ms)
}

fn sched() -> Scheduler {
    Scheduler::new(SchedulerConfig { starvation_ms: 10_000, ..SchedulerConfig::default() })
}

fn join(s: &mut Scheduler, name: &str, cpu: u64, labels: &[(&str, &str)]) -> NodeIx {
    let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    s.add_node(NodeId::new(name), NodeOffer { labels, ..NodeOffer::of(Resources::units(&[("cpu", cpu)])) })
}

fn pg(bundles: u32, required: u32, strategy: Strategy, submit: u64) -> PgSpec {
    PgSpec {
        priority: 0,
        submit: t(submit),
        strategy,
        bundle: Resources::units(&[("cpu", 1)]),
        node_selector: Labels::new(),
        pack_by: None,
        bundles,
        required,
    }
}

/// Runs a pass and returns (group, bundle, node name) of every placement.
fn pass(s: &mut Scheduler, now: u64) -> Vec<(PgId, u32, String)> {
    s.schedule(t(now));
    s.check_invariants();
    let events: Vec<SchedEvent> = std::iter::from_fn(|| s.poll_event()).collect();
    events
        .into_iter()
        .filter_map(|e| match e {
            SchedEvent::Placed(p) => Some((p.pg, p.bundle, s.node(p.node).name.to_string())),
            SchedEvent::Feasibility { .. } => None,
        })
        .collect()
}

/// Creates group `id` and places its gang in a pass at `now`; the nodes it got, by name.
fn admit(s: &mut Scheduler, id: PgId, spec: PgSpec, now: u64) -> Vec<String> {
    s.create_pg(id, spec);
    s.request_gang(id);
    nodes_of(&pass(s, now), id)
}

fn nodes_of(placed: &[(PgId, u32, String)], id: PgId) -> Vec<String> {
    let mut nodes: Vec<String> = placed.iter().filter(|p| p.0 == id).map(|p| p.2.clone()).collect();
    nodes.sort();
    nodes
}

#[test]
fn pending_gangs_go_by_priority_then_submit_time() {
    let mut s = sched();
    join(&mut s, "a", 1, &[]);
    for (id, priority, submit) in [(1, 0, 0), (2, 5, 9), (3, 5, 3)] {
        s.create_pg(id, PgSpec { priority, ..pg(1, 1, Strategy::StrictSpread, submit) });
        s.request_gang(id);
    }
    assert_eq!(pass(&mut s, 10), vec![(3, 0, "a".into())], "priority 5 first, the earlier of the two");
}

#[test]
fn backfill_until_the_blocked_gang_starves() {
    let mut s = sched();
    join(&mut s, "a", 1, &[]);
    join(&mut s, "b", 2, &[]);
    s.create_pg(9, pg(1, 1, Strategy::StrictSpread, 0));
    s.request_gang(9);
    assert_eq!(pass(&mut s, 0), vec![(9, 0, "a".into())], "a is full from now on");
    s.create_pg(1, pg(2, 2, Strategy::StrictSpread, 0)); // needs two nodes; only b has room
    s.request_gang(1);
    s.create_pg(2, pg(1, 1, Strategy::StrictSpread, 1));
    s.request_gang(2);
    assert_eq!(pass(&mut s, 1_000), vec![(2, 0, "b".into())], "the small gang backfills");

    s.create_pg(3, pg(1, 1, Strategy::StrictSpread, 2));
    s.request_gang(3);
    assert!(pass(&mut s, 10_000).is_empty(), "gang 1 waited starvation_ms: it holds node b now");
    join(&mut s, "c", 1, &[]);
    let placed = pass(&mut s, 10_001);
    assert_eq!(nodes_of(&placed, 1), ["b", "c"], "the starving gang is placed first");
    assert!(nodes_of(&placed, 3).is_empty(), "nothing left for gang 3");
}

/// A starving gang holds the room it could use on each node, not the whole node: under
/// STRICT_SPREAD one bundle's worth per node, and the rest of the node stays free for anyone.
#[test]
fn a_starving_gang_holds_its_room_on_a_node_and_leaves_the_rest() {
    let two_cpus = |bundles, strategy, submit| PgSpec {
        bundle: Resources::units(&[("cpu", 2)]),
        ..pg(bundles, bundles, strategy, submit)
    };
    // c is full, so gang 1 is feasible (three nodes could hold it) but blocked.
    let cluster = |nodes: &[(&str, u64)]| {
        let mut s = sched();
        join(&mut s, "c", 2, &[]);
        assert_eq!(admit(&mut s, 9, two_cpus(1, Strategy::StrictSpread, 0), 0), ["c"]);
        for (name, cpu) in nodes {
            join(&mut s, name, *cpu, &[]);
        }
        s
    };
    let mut s = cluster(&[("a", 4), ("b", 4)]);
    s.create_pg(1, two_cpus(3, Strategy::StrictSpread, 0));
    s.request_gang(1);
    assert!(pass(&mut s, 10_000).is_empty(), "gang 1 starves: it holds 2 CPUs on a and on b");
    s.create_pg(2, pg(1, 1, Strategy::StrictSpread, 1));
    s.request_gang(2);
    s.create_pg(3, PgSpec { bundle: Resources::units(&[("cpu", 3)]), ..pg(1, 1, Strategy::StrictSpread, 2) });
    s.request_gang(3);
    let placed = pass(&mut s, 10_001);
    assert_eq!(nodes_of(&placed, 2), ["a"], "1 CPU of a's 4 leaves the 2 held for gang 1");
    assert!(nodes_of(&placed, 3).is_empty(), "3 CPUs would take held room on either node: {placed:?}");

    // A PACK gang could put two of its bundles on a: it holds room for both there.
    let mut s = cluster(&[("a", 5)]);
    s.create_pg(1, two_cpus(3, Strategy::Pack, 0)); // 6 CPUs; a has 5 free, c none
    s.request_gang(1);
    assert!(pass(&mut s, 10_000).is_empty(), "gang 1 starves: it holds 4 CPUs of a (two bundles)");
    s.create_pg(2, pg(1, 1, Strategy::StrictSpread, 1));
    s.request_gang(2);
    s.create_pg(3, two_cpus(1, Strategy::StrictSpread, 2));
    s.request_gang(3);
    let placed = pass(&mut s, 10_001);
    assert_eq!(nodes_of(&placed, 2), ["a"], "the fifth CPU is no use to gang 1");
    assert!(nodes_of(&placed, 3).is_empty(), "2 CPUs would leave gang 1 room for one bundle, not two: {placed:?}");
}

#[test]
fn a_waiting_replacement_keeps_its_place_and_nothing_spins() {
    let mut s = sched();
    let a = join(&mut s, "a", 1, &[]);
    s.create_pg(1, pg(1, 1, Strategy::StrictSpread, 0));
    s.request_gang(1);
    pass(&mut s, 0);
    assert_eq!(s.kill_node(a), vec![(1, 0)]);
    s.request(1, 0, Need::Restore { lost_at: t(50) });
    pass(&mut s, 50);
    let key = *s.queue().next().unwrap();
    let passes = s.passes();
    for now in [60, 70, 80] {
        s.schedule(t(now));
    }
    assert_eq!(s.passes(), passes, "no pass without a change");
    s.create_pg(2, pg(1, 1, Strategy::StrictSpread, 60));
    s.request_gang(2);
    pass(&mut s, 90);
    assert_eq!(s.queue().next(), Some(&key), "the replacement is still first, with its key");
    join(&mut s, "b", 1, &[]);
    assert_eq!(pass(&mut s, 100), vec![(1, 0, "b".into())], "the replacement, not the pending gang");
    assert_eq!(s.pg(1).unwrap().state(), PgState::Created);
}

#[test]
fn spread_shares_nodes_only_when_it_must() {
    let mut s = sched();
    join(&mut s, "a", 4, &[]);
    join(&mut s, "b", 4, &[]);
    s.create_pg(1, pg(3, 3, Strategy::Spread, 0));
    s.request_gang(1);
    assert_eq!(nodes_of(&pass(&mut s, 0), 1), ["a", "a", "b"]);
    s.create_pg(2, pg(3, 3, Strategy::StrictSpread, 0));
    s.request_gang(2);
    assert!(pass(&mut s, 0).is_empty(), "STRICT_SPREAD never shares");
}

#[test]
fn pack_fills_one_node_and_strict_pack_needs_one_node() {
    let mut s = sched();
    join(&mut s, "a", 2, &[]);
    join(&mut s, "b", 3, &[]);
    s.create_pg(1, pg(3, 3, Strategy::Pack, 0));
    s.request_gang(1);
    assert_eq!(nodes_of(&pass(&mut s, 0), 1), ["a", "a", "b"], "a (first by name) filled, then b");

    let mut s = sched();
    join(&mut s, "a", 2, &[]);
    join(&mut s, "b", 3, &[]);
    s.create_pg(1, pg(3, 3, Strategy::StrictPack, 0));
    s.request_gang(1);
    assert_eq!(nodes_of(&pass(&mut s, 0), 1), ["b", "b", "b"], "only b holds all three");
}

#[test]
fn strict_pack_gang_bigger_than_any_node_is_infeasible() {
    let mut s = sched();
    join(&mut s, "a", 2, &[]);
    s.create_pg(1, pg(3, 3, Strategy::StrictPack, 0));
    let reason = s.pg(1).unwrap().infeasible.clone();
    assert_eq!(
        reason.as_deref(),
        Some("infeasible: STRICT_PACK gang of 3 bundles on one node needs cpu=3, largest node has cpu=2 (a)")
    );
}

#[test]
fn a_resource_no_node_offers_by_that_name_is_told_the_nearest_one() {
    let mut s = sched();
    join(&mut s, "a", 2, &[]);
    s.create_pg(1, PgSpec { bundle: Resources::units(&[("cpus", 1)]), ..pg(1, 1, Strategy::Spread, 0) });
    let reason = s.pg(1).unwrap().infeasible.clone();
    assert_eq!(
        reason.as_deref(),
        Some("infeasible: bundle needs cpus=1, largest node has cpus=0 (a); no node offers `cpus` at all: did you mean `cpu`?")
    );
    s.create_pg(2, PgSpec { bundle: Resources::units(&[("tpu", 1)]), ..pg(1, 1, Strategy::Spread, 0) });
    let far = s.pg(2).unwrap().infeasible.clone().unwrap();
    assert!(far.ends_with("largest node has tpu=0 (a)"), "{far}");
}

#[test]
fn every_resource_no_node_has_enough_of_is_named_at_once() {
    let mut s = sched();
    join(&mut s, "a", 2, &[]);
    let bundle = Resources::units(&[("cpu", 4), ("gpu", 2)]);
    s.create_pg(1, PgSpec { bundle, ..pg(1, 1, Strategy::Spread, 0) });
    assert_eq!(
        s.pg(1).unwrap().infeasible.as_deref(),
        Some("infeasible: bundle needs cpu=4, largest node has cpu=2 (a); and gpu=2, largest node has gpu=0 (a)")
    );
}

#[test]
fn a_group_submitted_to_an_empty_cluster_is_told_why_once_a_node_it_cannot_use_joins() {
    let mut s = sched();
    s.create_pg(1, PgSpec { bundle: Resources::units(&[("cpu", 2)]), ..pg(1, 1, Strategy::Spread, 0) });
    assert_eq!(s.pg(1).unwrap().infeasible.as_deref(), Some("infeasible: no node has joined the cluster yet"));
    join(&mut s, "a", 1, &[]);
    assert_eq!(
        s.pg(1).unwrap().infeasible.as_deref(),
        Some("infeasible: bundle needs cpu=2, largest node has cpu=1 (a)")
    );
    join(&mut s, "b", 2, &[]);
    assert_eq!(s.pg(1).unwrap().infeasible, None, "a node that fits lifts it");
}

/// The reason each Feasibility event gave, in order.
fn feasibility_events(s: &mut Scheduler) -> Vec<Option<String>> {
    std::iter::from_fn(|| s.poll_event())
        .filter_map(|e| match e {
            SchedEvent::Feasibility { infeasible, .. } => Some(infeasible),
            SchedEvent::Placed(_) => None,
        })
        .collect()
}

#[test]
fn a_strict_spread_gang_larger_than_the_cluster_is_infeasible_until_enough_nodes_join() {
    let mut s = sched();
    for name in ["a", "b", "c"] {
        join(&mut s, name, 4, &[]);
    }
    s.create_pg(1, pg(5, 5, Strategy::StrictSpread, 0));
    s.request_gang(1);
    let three = "infeasible: min_nodes 5 with STRICT_SPREAD needs 5 distinct nodes, and only 3 node(s), DEAD ones included, could hold a bundle; \
                 add nodes, or lower min_nodes";
    assert_eq!(feasibility_events(&mut s), [Some(three.to_string())]);
    assert!(pass(&mut s, 0).is_empty());
    join(&mut s, "d", 4, &[]);
    assert!(feasibility_events(&mut s).is_empty(), "still infeasible: no event");
    assert_eq!(s.pg(1).unwrap().infeasible, Some(three.replace("only 3", "only 4")), "the count follows the cluster");
    join(&mut s, "x", 4, &[("zone", "b")]);
    assert_eq!(feasibility_events(&mut s), [None], "a fifth node makes it feasible");
    assert_eq!(nodes_of(&pass(&mut s, 1), 1), ["a", "b", "c", "d", "x"]);
}

#[test]
fn a_shared_gang_counts_bundles_per_node_and_pack_by_counts_one_domain() {
    let mut s = sched();
    join(&mut s, "a", 3, &[("rack", "r1")]);
    join(&mut s, "b", 2, &[("rack", "r1")]);
    join(&mut s, "c", 3, &[("rack", "r2")]);
    let two_cpus = |spec: PgSpec| PgSpec { bundle: Resources::units(&[("cpu", 2)]), ..spec };
    s.create_pg(1, two_cpus(pg(4, 4, Strategy::Spread, 0)));
    assert_eq!(
        s.pg(1).unwrap().infeasible.as_deref(),
        Some("infeasible: min_nodes 4 bundles of cpu=2 do not fit on the 3 node(s) that could hold one, DEAD ones included: 3 at most, even empty; add nodes, or lower min_nodes")
    );
    s.create_pg(2, two_cpus(pg(3, 3, Strategy::Pack, 0)));
    assert_eq!(s.pg(2).unwrap().infeasible, None, "a, b and c hold one each");
    s.create_pg(3, PgSpec { pack_by: Some("rack".into()), ..two_cpus(pg(3, 3, Strategy::Pack, 0)) });
    assert_eq!(
        s.pg(3).unwrap().infeasible.as_deref(),
        Some("infeasible: min_nodes 3 must fit in one `rack` domain, and the largest, rack=r1, holds 2 bundle(s) even empty; add nodes, or lower min_nodes")
    );
}

#[test]
fn each_new_node_adds_to_the_count_and_a_node_that_rejoins_is_counted_afresh() {
    let mut s = sched();
    let a = join(&mut s, "a", 2, &[]);
    s.create_pg(1, PgSpec { bundle: Resources::units(&[("cpu", 2)]), ..pg(4, 4, Strategy::Spread, 0) });
    s.request_gang(1);
    let at_most = |n: u64, room: u64| {
        Some(format!(
            "infeasible: min_nodes 4 bundles of cpu=2 do not fit on the {n} node(s) that could hold one, DEAD ones included: {room} at \
             most, even empty; add nodes, or lower min_nodes"
        ))
    };
    assert_eq!(feasibility_events(&mut s), [at_most(1, 1)]);
    join(&mut s, "b", 3, &[]);
    assert_eq!(s.pg(1).unwrap().infeasible, at_most(2, 2));
    s.kill_node(a);
    join(&mut s, "a", 4, &[]);
    assert_eq!(s.pg(1).unwrap().infeasible, at_most(2, 3), "a counted once, with its new size");
    assert!(feasibility_events(&mut s).is_empty(), "only the verdict's turns are events");
    join(&mut s, "c", 2, &[]);
    assert_eq!(feasibility_events(&mut s), [None]);
    assert_eq!(nodes_of(&pass(&mut s, 1), 1), ["a", "a", "b", "c"]);
}

#[test]
fn a_placed_gang_s_replacement_needs_room_for_one_bundle_only() {
    let mut s = sched();
    let a = join(&mut s, "a", 1, &[("preemptible", "true")]);
    join(&mut s, "b", 1, &[("preemptible", "true")]);
    join(&mut s, "c", 1, &[]);
    s.create_pg(1, pg(3, 3, Strategy::StrictSpread, 0));
    s.request_gang(1);
    assert_eq!(nodes_of(&pass(&mut s, 0), 1), ["a", "b", "c"]);
    s.kill_node(a);
    s.avoid_preemptible(1);
    assert_eq!(s.pg(1).unwrap().infeasible, None, "one steady node is not enough for a gang, but the gang is placed");
    s.request(1, 0, Need::Restore { lost_at: t(10) });
    join(&mut s, "d", 1, &[]);
    assert_eq!(pass(&mut s, 20), vec![(1, 0, "d".into())]);
}

#[test]
fn pack_by_picks_the_fullest_domain_that_fits_and_replaces_within_it() {
    let mut s = sched();
    for (name, rack) in [("a1", "r1"), ("a2", "r1"), ("a3", "r1"), ("b1", "r2"), ("b2", "r2")] {
        join(&mut s, name, 1, &[("rack", rack)]);
    }
    join(&mut s, "c1", 1, &[]);
    let racked = |submit| PgSpec { pack_by: Some("rack".into()), ..pg(2, 2, Strategy::StrictSpread, submit) };
    s.create_pg(1, racked(0));
    s.request_gang(1);
    assert_eq!(nodes_of(&pass(&mut s, 0), 1), ["b1", "b2"], "r2 has fewer free slots than r1");
    s.create_pg(2, racked(1));
    s.request_gang(2);
    assert_eq!(nodes_of(&pass(&mut s, 0), 2), ["a1", "a2"]);
    let a1 = s.node_ix(&NodeId::new("a1")).unwrap();
    s.kill_node(a1);
    s.request(2, 0, Need::Restore { lost_at: t(5) });
    assert_eq!(pass(&mut s, 5), vec![(2, 0, "a3".into())], "same rack, not c1");
}

#[test]
fn selector_and_preemptible_avoidance_filter_nodes() {
    let mut s = sched();
    join(&mut s, "a", 1, &[("zone", "x"), ("preemptible", "true")]);
    join(&mut s, "b", 1, &[("zone", "x")]);
    join(&mut s, "c", 1, &[("zone", "y")]);
    let zoned = |submit| PgSpec {
        node_selector: Labels::from([("zone".into(), "x".into())]),
        ..pg(1, 1, Strategy::StrictSpread, submit)
    };
    s.create_pg(1, zoned(0));
    s.avoid_preemptible(1);
    s.request_gang(1);
    assert_eq!(pass(&mut s, 0), vec![(1, 0, "b".into())]);
    s.create_pg(2, zoned(1));
    s.request_gang(2);
    assert_eq!(pass(&mut s, 1), vec![(2, 0, "a".into())], "without avoidance a preemptible node is fine");
}

#[test]
fn elastic_and_spare_requests_wait_for_admission() {
    let mut s = sched();
    join(&mut s, "a", 1, &[]);
    s.create_pg(1, pg(3, 1, Strategy::StrictSpread, 0));
    s.request(1, 1, Need::Growth);
    s.request(1, 2, Need::Spare);
    assert!(pass(&mut s, 0).is_empty(), "nothing before the gang is asked for");
    s.request_gang(1);
    join(&mut s, "b", 1, &[]);
    join(&mut s, "c", 1, &[]);
    let placed = pass(&mut s, 1);
    assert_eq!(
        placed.iter().map(|p| p.1).collect::<Vec<_>>(),
        [0, 2, 1],
        "gang, then spare, then elastic, in one pass"
    );
}

#[test]
fn a_broken_policy_switch_lets_a_gang_beat_a_replacement() {
    let mut s = sched();
    s.inject_policy_fault(PolicyFault::GangsBeforeReplacements);
    let a = join(&mut s, "a", 1, &[]);
    s.create_pg(1, pg(1, 1, Strategy::StrictSpread, 0));
    s.request_gang(1);
    pass(&mut s, 0);
    s.kill_node(a);
    s.request(1, 0, Need::Restore { lost_at: t(1) });
    s.create_pg(2, pg(1, 1, Strategy::StrictSpread, 1));
    s.request_gang(2);
    join(&mut s, "b", 1, &[]);
    assert_eq!(pass(&mut s, 2), vec![(2, 0, "b".into())], "the fault is real: the pending gang won");
}

#[test]
fn releasing_and_removing_free_capacity() {
    let mut s = sched();
    let a = join(&mut s, "a", 2, &[]);
    s.create_pg(1, pg(2, 2, Strategy::Pack, 0));
    s.request_gang(1);
    pass(&mut s, 0);
    s.release(1, 0);
    assert_eq!(s.allocated(a), Resources::units(&[("cpu", 1)]));
    s.remove_pg(1);
    assert_eq!(s.allocated(a), Resources::new());
    assert!(s.pg(1).is_none());
    s.check_invariants();
}

#[test]
fn strict_pack_group_that_lost_everything_returns_to_a_node_that_holds_the_gang() {
    let mut s = sched();
    let big = join(&mut s, "big", 2, &[]);
    s.create_pg(1, pg(2, 2, Strategy::StrictPack, 0));
    s.request_gang(1);
    assert_eq!(nodes_of(&pass(&mut s, 0), 1), ["big", "big"]);
    s.kill_node(big);
    join(&mut s, "a-small", 1, &[]);
    s.request(1, 0, Need::Restore { lost_at: t(1) });
    assert!(pass(&mut s, 1).is_empty(), "a-small could take one bundle but never both");
    join(&mut s, "big", 2, &[]);
    s.request(1, 1, Need::Restore { lost_at: t(2) });
    assert_eq!(nodes_of(&pass(&mut s, 2), 1), ["big", "big"]);
}

#[test]
fn strict_pack_group_that_lost_everything_returns_where_its_growth_and_spare_fit_too() {
    let mut s = sched();
    let home = join(&mut s, "home", 4, &[]);
    s.create_pg(1, pg(4, 1, Strategy::StrictPack, 0)); // min 1, max 3, one spare
    s.request_gang(1);
    for (bundle, need) in [(1, Need::Growth), (2, Need::Growth), (3, Need::Spare)] {
        s.request(1, bundle, need);
    }
    assert_eq!(nodes_of(&pass(&mut s, 0), 1), ["home"; 4]);
    s.kill_node(home);
    join(&mut s, "a-small", 2, &[]);
    join(&mut s, "b-big", 4, &[]);
    s.request(1, 0, Need::Restore { lost_at: t(1) });
    for (bundle, need) in [(1, Need::Growth), (2, Need::Growth), (3, Need::Spare)] {
        s.request(1, bundle, need);
    }
    let placed = pass(&mut s, 1);
    assert_eq!(nodes_of(&placed, 1), ["b-big"; 4], "a-small ranks first but holds only two: {placed:?}");

    let mut s = sched();
    let home = join(&mut s, "home", 4, &[]);
    s.create_pg(1, pg(4, 1, Strategy::StrictPack, 0));
    s.request_gang(1);
    assert_eq!(nodes_of(&pass(&mut s, 0), 1), ["home"]);
    s.kill_node(home);
    join(&mut s, "a-small", 1, &[]);
    s.request(1, 0, Need::Restore { lost_at: t(1) });
    s.request(1, 1, Need::Growth);
    assert_eq!(nodes_of(&pass(&mut s, 1), 1), ["a-small"], "where nothing holds all, the required gang still runs");
}

#[test]
fn a_packed_by_rack_strict_pack_group_that_lost_everything_picks_the_rack_its_whole_wait_fits() {
    // Swarm seed 1553240: the fullest rack that fits the one lost bundle had no node for the
    // growth and spare, which then ran one after another on that node.
    let mut s = sched();
    let home = join(&mut s, "home", 4, &[("rack", "r0")]);
    s.create_pg(1, PgSpec { pack_by: Some("rack".into()), ..pg(4, 1, Strategy::StrictPack, 0) });
    s.request_gang(1);
    for (bundle, need) in [(1, Need::Growth), (2, Need::Growth), (3, Need::Spare)] {
        s.request(1, bundle, need);
    }
    assert_eq!(nodes_of(&pass(&mut s, 0), 1), ["home"; 4]);
    s.kill_node(home);
    join(&mut s, "small", 2, &[("rack", "r1")]);
    join(&mut s, "big", 4, &[("rack", "r2")]);
    s.request(1, 0, Need::Restore { lost_at: t(1) });
    for (bundle, need) in [(1, Need::Growth), (2, Need::Growth), (3, Need::Spare)] {
        s.request(1, bundle, need);
    }
    let placed = pass(&mut s, 1);
    assert_eq!(nodes_of(&placed, 1), ["big"; 4], "rack r1 is fuller but holds only two: {placed:?}");
}

/// HO-2: a held group stands for its look-alikes only while it has no bundle. Here job 1 lost
/// both its nodes; its replacements and starving gang 3 (the same shape) are blocked, and job
/// 1's spare takes half of node `free`: job 1 no longer needs that node, gang 3 still does,
/// and job 5's spare must not take the other half (swarm seed 6880744).
#[test]
fn a_held_group_that_gets_a_bundle_stops_standing_for_its_look_alikes() {
    let mut s = sched();
    join(&mut s, "full", 1, &[]);
    assert_eq!(admit(&mut s, 5, pg(2, 1, Strategy::StrictSpread, 1), 0), ["full"]);
    let lost: Vec<NodeIx> = ["a", "b"].iter().map(|n| join(&mut s, n, 1, &[])).collect();
    assert_eq!(admit(&mut s, 1, pg(3, 2, Strategy::StrictSpread, 0), 0), ["a", "b"]);
    for (ix, at) in lost.into_iter().zip([10, 11]) {
        let [(id, bundle)] = s.kill_node(ix)[..] else { panic!("one bundle on each") };
        s.request(id, bundle, Need::Restore { lost_at: t(at) });
    }
    s.request(1, 2, Need::Spare);
    s.request(5, 1, Need::Spare);
    s.create_pg(3, pg(2, 2, Strategy::StrictSpread, 0));
    s.request_gang(3);
    join(&mut s, "free", 2, &[]);
    let placed = pass(&mut s, 10_000);
    assert_eq!(nodes_of(&placed, 1), ["free"], "job 1's spare: gang 3 keeps room for its bundle beside it");
    assert!(nodes_of(&placed, 5).is_empty(), "job 5's spare would take the room starving gang 3 could use: {placed:?}");
}

#[test]
fn a_job_s_lost_bundles_are_re_placed_together_or_not_at_all() {
    // Two gangs lose their nodes in turns (A, B, A, B); two nodes come back. One at a time, each
    // job would take one and wait for ever for the other's.
    let mut s = sched();
    let nodes: Vec<NodeIx> = ["a1", "a2", "b1", "b2"].iter().map(|n| join(&mut s, n, 1, &[])).collect();
    for (id, submit) in [(1, 0), (2, 1)] {
        s.create_pg(id, pg(2, 2, Strategy::StrictSpread, submit));
        s.request_gang(id);
    }
    let placed = pass(&mut s, 1);
    assert_eq!(
        (nodes_of(&placed, 1), nodes_of(&placed, 2)),
        (vec!["a1".into(), "a2".into()], vec!["b1".into(), "b2".into()])
    );
    let losses = [(nodes[0], 1, 0, 10), (nodes[2], 2, 0, 11), (nodes[1], 1, 1, 12), (nodes[3], 2, 1, 13)];
    for (ix, id, bundle, at) in losses {
        assert_eq!(s.kill_node(ix), vec![(id, bundle)]);
        s.request(id, bundle, Need::Restore { lost_at: t(at) });
    }
    join(&mut s, "c1", 1, &[]);
    join(&mut s, "c2", 1, &[]);
    let placed = pass(&mut s, 20);
    assert_eq!(nodes_of(&placed, 1), ["c1", "c2"], "the first loss's job is restored whole: {placed:?}");
    assert_eq!(nodes_of(&placed, 2), Vec::<String>::new());
    assert_eq!(
        waiting(&s, 2).as_deref(),
        Some(
            "waiting for capacity: the replacements for j2/0 and j2/1 need 2 nodes with room for a bundle of cpu=1 \
             (STRICT_SPREAD), and 0 of the 2 matching node(s) have it now (besides them 4 DEAD); in use by j1"
        )
    );
}

#[test]
fn a_strict_pack_group_s_node_is_not_shared_out_between_its_own_replacements() {
    // Swarm seed 666027: the first of a STRICT_PACK job's two replacements chose the node for
    // both, and a replacement lost in between took the other half.
    let mut s = sched();
    let nodes: Vec<NodeIx> =
        [("home", 2), ("x", 1), ("y", 1)].iter().map(|(n, cpu)| join(&mut s, n, *cpu, &[])).collect();
    s.create_pg(1, pg(2, 2, Strategy::StrictPack, 0));
    s.request_gang(1);
    s.create_pg(2, pg(2, 2, Strategy::StrictSpread, 0));
    s.request_gang(2);
    let placed = pass(&mut s, 0);
    assert_eq!(nodes_of(&placed, 2), ["x", "y"]);
    for ix in nodes {
        s.kill_node(ix);
    }
    for (id, bundle, at) in [(1, 1, 10), (2, 1, 11), (1, 0, 12), (2, 0, 13)] {
        s.request(id, bundle, Need::Restore { lost_at: t(at) });
    }
    join(&mut s, "n03", 2, &[]);
    let placed = pass(&mut s, 20);
    assert_eq!(nodes_of(&placed, 1), ["n03", "n03"], "{placed:?}");
    assert!(nodes_of(&placed, 2).is_empty(), "{placed:?}");
}

#[test]
fn a_held_restoration_does_not_hold_back_the_restoration_of_a_job_it_waits_for() {
    // Swarm seed 1997055, in its general form: a job waiting to be restored held the only free
    // node, while what it waited for was the reservation of a job whose own restoration wanted
    // that node. Neither could move (HO-1).
    let mut s = sched();
    let pool = [("pool", "p")];
    let lost: Vec<NodeIx> = ["a1", "a2"].iter().map(|n| join(&mut s, n, 1, &pool)).collect();
    let in_pool = Labels::from([("pool".to_string(), "p".to_string())]);
    assert_eq!(
        admit(&mut s, 1, PgSpec { node_selector: in_pool, ..pg(2, 2, Strategy::StrictSpread, 0) }, 0),
        ["a1", "a2"]
    );
    join(&mut s, "y", 1, &pool);
    let w = join(&mut s, "w", 1, &[]);
    assert_eq!(admit(&mut s, 2, pg(2, 2, Strategy::StrictSpread, 1), 1), ["w", "y"]);
    let c: Vec<NodeIx> = ["c1", "c2"].iter().map(|n| join(&mut s, n, 1, &[])).collect();
    assert_eq!(admit(&mut s, 3, pg(2, 2, Strategy::StrictSpread, 2), 2), ["c1", "c2"]);

    for (at, node) in [(10, lost[0]), (10, lost[1]), (11, c[1]), (12, w)] {
        for (id, bundle) in s.kill_node(node) {
            s.request(id, bundle, Need::Restore { lost_at: t(at) });
        }
    }
    join(&mut s, "x", 1, &pool);
    // Group 1 needs two pool nodes: y, filled by group 2, and x, which it holds. Group 2's
    // restoration takes x all the same; group 3's, ahead of it, does not: its reservation (on
    // c1, outside the pool) is nothing group 1 waits for.
    let placed = pass(&mut s, 20);
    assert_eq!(placed.iter().map(|p| (p.0, p.2.as_str())).collect::<Vec<_>>(), [(2, "x")]);

    s.remove_pg(2); // it ran to its end
    let placed = pass(&mut s, 30);
    assert_eq!(nodes_of(&placed, 1), ["x", "y"], "{placed:?}");
}

#[test]
fn a_blocked_strict_pack_group_holds_no_node_too_small_for_its_gang() {
    // Holding every node with room for one of its bundles kept a small node, which it could
    // never use, from everyone while a STRICT_PACK job waited for a node with room for three.
    let mut s = sched();
    let home = join(&mut s, "home", 3, &[]);
    assert_eq!(admit(&mut s, 1, pg(3, 3, Strategy::StrictPack, 0), 0), ["home"; 3]);
    join(&mut s, "big", 3, &[]);
    assert_eq!(admit(&mut s, 9, pg(1, 1, Strategy::StrictSpread, 1), 1), ["big"]);
    join(&mut s, "small", 2, &[]);
    for (id, bundle) in s.kill_node(home) {
        s.request(id, bundle, Need::Restore { lost_at: t(10) });
    }
    for id in 2..=4 {
        s.create_pg(id, pg(1, 1, Strategy::StrictSpread, 11));
        s.request_gang(id);
    }
    let placed = pass(&mut s, 20);
    assert_eq!(placed.iter().map(|p| (p.0, p.2.as_str())).collect::<Vec<_>>(), [(2, "small"), (3, "small")]);
    s.remove_pg(9);
    assert_eq!(nodes_of(&pass(&mut s, 30), 1), ["big"; 3], "big was held for group 1 throughout");
}

// ---- why a request waits ----------------------------------------------------------------------

fn waiting(s: &Scheduler, id: PgId) -> Option<String> {
    s.waiting_reason(id, &|p| format!("j{p}"), &mut WaitingMemo::default())
}

#[test]
fn a_gang_short_of_room_names_the_count_and_who_holds_the_room() {
    let mut s = sched();
    for name in ["a", "b", "c"] {
        join(&mut s, name, 1, &[]);
    }
    s.create_pg(1, pg(2, 2, Strategy::StrictSpread, 0));
    s.request_gang(1);
    pass(&mut s, 0);
    assert_eq!(waiting(&s, 1), None, "a placed gang waits for nothing");
    s.create_pg(2, pg(3, 3, Strategy::StrictSpread, 1));
    s.request_gang(2);
    pass(&mut s, 1);
    assert_eq!(
        waiting(&s, 2).as_deref(),
        Some(
            "waiting for capacity: needs 3 nodes with room for a bundle of cpu=1 (STRICT_SPREAD), and 1 of the 3 \
             matching node(s) have it now; in use by j1"
        )
    );
    s.remove_pg(1);
    assert_eq!(nodes_of(&pass(&mut s, 2), 2), ["a", "b", "c"]);
    assert_eq!(waiting(&s, 2), None);
}

/// PS-2: a machine's ports ran out before its third agent joined, so that node takes nothing
/// though its CPUs are free; the reason says so and names the flags, where it said only that
/// no node had room.
#[test]
fn a_node_whose_machine_has_no_port_left_is_named_as_such() {
    let config = SchedulerConfig { master_port_base: 65_532, ports_per_node: 2, ..SchedulerConfig::default() };
    let mut s = Scheduler::new(config);
    let nodes: Vec<NodeIx> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            let offer =
                NodeOffer { port_space: "one-machine".into(), ..NodeOffer::of(Resources::units(&[("cpu", 4)])) };
            s.add_node(NodeId::new(name), offer)
        })
        .collect();
    s.create_pg(1, pg(4, 4, Strategy::Spread, 0));
    s.request_gang(1);
    assert_eq!(nodes_of(&pass(&mut s, 0), 1), ["a", "a", "b", "b"], "two ports each, none left for c");
    s.create_pg(2, pg(1, 1, Strategy::Spread, 1));
    s.request_gang(2);
    pass(&mut s, 1);
    assert_eq!(
        waiting(&s, 2).as_deref(),
        Some(
            "waiting for capacity: needs room for 1 bundle of cpu=1, and the 3 matching node(s) have room for 0 now \
             (3 have no rendezvous port left, as a machine's agents share its ports from `--master-port-base` \
             to 65535, `--ports-per-node` each: lower it to run more agents per machine); in use by j1"
        )
    );
    for (id, bundle) in s.kill_node(nodes[0]) {
        s.request(id, bundle, Need::Restore { lost_at: t(5) });
    }
    assert_eq!(nodes_of(&pass(&mut s, 5), 1), ["c", "c"], "a's ports are c's now, and a's bundles with them");
}

#[test]
fn each_strategy_counts_the_room_it_would_use() {
    let mut s = sched();
    join(&mut s, "a", 3, &[("rack", "r1")]);
    join(&mut s, "b", 3, &[("rack", "r2")]);
    s.create_pg(1, pg(4, 4, Strategy::Pack, 0)); // fills a, and one of b's three
    s.request_gang(1);
    pass(&mut s, 0);
    let mut ask = |id: PgId, strategy: Strategy, pack_by: Option<&str>| {
        s.create_pg(id, PgSpec { pack_by: pack_by.map(str::to_string), ..pg(3, 3, strategy, 1) });
        s.request_gang(id);
        pass(&mut s, 1);
        let why = waiting(&s, id).expect("three bundles do not fit in b's two free slots");
        s.remove_pg(id);
        why
    };
    let spread = ask(2, Strategy::Spread, None);
    assert!(
        spread.contains("needs room for 3 bundles of cpu=1, and the 2 matching node(s) have room for 2 now"),
        "{spread}"
    );
    let strict_pack = ask(3, Strategy::StrictPack, None);
    assert!(strict_pack.contains("one node with room for all 3 bundles") && strict_pack.contains("has room for 2 now"));
    let pack_by = ask(4, Strategy::Pack, Some("rack"));
    assert!(pack_by.contains("in one `rack` domain, and the roomiest, rack=r2, has room for 2 now"), "{pack_by}");
}

#[test]
fn room_held_for_a_starving_gang_is_named_as_held_for_work_ahead() {
    let mut s = sched();
    join(&mut s, "a", 1, &[]);
    join(&mut s, "b", 1, &[]);
    s.create_pg(9, pg(1, 1, Strategy::StrictSpread, 0));
    s.request_gang(9);
    pass(&mut s, 0);
    s.create_pg(1, pg(2, 2, Strategy::StrictSpread, 0)); // needs a and b
    s.request_gang(1);
    s.create_pg(3, pg(1, 1, Strategy::StrictSpread, 2)); // fits on b
    s.request_gang(3);
    assert!(pass(&mut s, 10_000).is_empty(), "gang 1 starves and holds b");
    assert!(waiting(&s, 1).unwrap().contains("1 of the 2 matching node(s) have it now; in use by j9"));
    assert_eq!(
        waiting(&s, 3).as_deref(),
        Some("waiting: the matching nodes have room for it now, held for work ahead of it in the queue (j1)")
    );
}

/// Work ahead that has not waited `starvation_ms` holds nothing: a pending job submitted a
/// moment before the request was named with the starving gang as what the room was held for.
#[test]
fn a_held_request_names_only_work_ahead_that_holds_room() {
    let mut s = sched();
    for name in ["a", "b", "c"] {
        join(&mut s, name, 1, &[]);
    }
    s.create_pg(9, pg(1, 1, Strategy::StrictSpread, 0));
    s.request_gang(9);
    pass(&mut s, 0);
    s.create_pg(1, pg(3, 3, Strategy::StrictSpread, 0)); // needs a, b and c
    s.request_gang(1);
    for young in [4, 5] {
        s.create_pg(young, pg(1, 1, Strategy::StrictSpread, 9_999)); // fits on b or c
        s.request_gang(young);
    }
    assert!(pass(&mut s, 10_000).is_empty(), "gang 1 starves and holds b and c");
    let held = "waiting: the matching nodes have room for it now, held for work ahead of it in the queue (j1)";
    assert_eq!(waiting(&s, 4).as_deref(), Some(held));
    assert_eq!(waiting(&s, 5).as_deref(), Some(held), "not j4, which holds nothing");
}

/// Work ahead that could not use the room the request waits on holds nothing from it, so the
/// reason does not name it.
#[test]
fn a_held_request_names_only_the_work_ahead_that_could_use_its_room() {
    let mut s = sched();
    join(&mut s, "a", 1, &[]);
    join(&mut s, "b", 1, &[]);
    join(&mut s, "big", 2, &[]);
    let two_cpus = |spec: PgSpec| PgSpec { bundle: Resources::units(&[("cpu", 2)]), ..spec };
    s.create_pg(7, two_cpus(pg(1, 1, Strategy::StrictSpread, 0)));
    s.request_gang(7);
    s.create_pg(9, pg(1, 1, Strategy::StrictSpread, 0));
    s.request_gang(9);
    assert_eq!(pass(&mut s, 0).len(), 2, "7 fills big, 9 takes a or b");
    s.create_pg(1, pg(2, 2, Strategy::StrictSpread, 0)); // needs a and b
    s.request_gang(1);
    s.create_pg(5, two_cpus(pg(1, 1, Strategy::StrictSpread, 0))); // needs all of big
    s.request_gang(5);
    s.create_pg(3, pg(1, 1, Strategy::StrictSpread, 2)); // fits on a or b
    s.request_gang(3);
    assert!(pass(&mut s, 10_000).is_empty(), "1 and 5 starve; 1 holds the free one of a and b");
    assert_eq!(
        waiting(&s, 3).as_deref(),
        Some("waiting: the matching nodes have room for it now, held for work ahead of it in the queue (j1)")
    );
}

#[test]
fn a_replacement_says_why_no_node_takes_it() {
    let mut s = sched();
    let a = join(&mut s, "a", 1, &[]);
    let b = join(&mut s, "b", 1, &[]);
    let c = join(&mut s, "c", 1, &[]);
    s.create_pg(1, pg(2, 2, Strategy::StrictSpread, 0)); // on a and b
    s.request_gang(1);
    pass(&mut s, 0);
    s.create_pg(2, pg(2, 1, Strategy::StrictSpread, 0)); // on c, and a spare
    s.request_gang(2);
    s.request(2, 1, Need::Spare);
    assert_eq!(nodes_of(&pass(&mut s, 1), 2), ["c"]);
    assert_eq!(waiting(&s, 2), None, "a spare waiting for room is no reason to worry");
    assert_eq!(s.kill_node(b), vec![(1, 1)]);
    s.request(1, 1, Need::Restore { lost_at: t(5) });
    pass(&mut s, 5);
    assert_eq!(
        waiting(&s, 1).as_deref(),
        Some(
            "waiting for capacity: the replacement for j1/1 needs a node with room for a bundle of cpu=1, and none of \
             the 2 matching node(s) has it now (1 already hold one of its bundles, and STRICT_SPREAD puts one per \
             node; besides them 1 DEAD); in use by j2"
        )
    );
    s.kill_node(a);
    s.kill_node(c);
    s.request(2, 0, Need::Restore { lost_at: t(6) });
    pass(&mut s, 6);
    let why = waiting(&s, 2).unwrap();
    assert_eq!(
        why,
        "waiting for a node: none of the 3 node(s) that could hold it is ALIVE (3 DEAD); it is placed once one is, or \
         a new node joins"
    );
}

#[test]
fn a_gang_on_a_draining_cluster_waits_for_a_node() {
    let mut s = sched();
    let a = join(&mut s, "a", 1, &[]);
    s.drain_node(a);
    s.create_pg(1, pg(1, 1, Strategy::StrictSpread, 0));
    s.request_gang(1);
    assert!(pass(&mut s, 0).is_empty());
    assert!(waiting(&s, 1).unwrap().contains("is ALIVE (1 DRAINING); it is placed once one is (`ftdrive undrain"));
    s.undrain_node(a);
    s.check_invariants();
    assert_eq!(pass(&mut s, 0).len(), 1, "an undrained node is offered again");
}

#[test]
fn an_undrained_node_offers_only_the_room_its_remaining_bundles_leave() {
    let mut s = sched();
    let a = join(&mut s, "a", 2, &[]);
    s.create_pg(1, pg(1, 1, Strategy::StrictSpread, 0));
    s.request_gang(1);
    assert_eq!(pass(&mut s, 0).len(), 1);
    s.drain_node(a);
    s.undrain_node(a);
    for id in [2, 3] {
        s.create_pg(id, pg(1, 1, Strategy::StrictSpread, id));
        s.request_gang(id);
    }
    assert_eq!(pass(&mut s, 5), vec![(2, 0, "a".into())], "one cpu of two is still held by group 1");
}

#[test]
fn suspect_nodes_are_not_counted_and_infeasible_groups_have_their_own_reason() {
    let mut s = sched();
    let a = join(&mut s, "a", 1, &[]);
    join(&mut s, "b", 1, &[]);
    s.create_pg(1, pg(1, 1, Strategy::StrictSpread, 0));
    s.request_gang(1);
    pass(&mut s, 0); // on a
    s.set_suspects([a].into());
    s.create_pg(2, pg(2, 2, Strategy::StrictSpread, 1));
    s.request_gang(2);
    pass(&mut s, 1);
    let why = waiting(&s, 2).unwrap();
    assert!(why.contains("1 of the 2 matching node(s) have it now (1 missed heartbeats and are not counted)"), "{why}");
    s.create_pg(3, pg(3, 3, Strategy::StrictSpread, 1));
    s.request_gang(3);
    assert!(s.pg(3).unwrap().infeasible.is_some());
    assert_eq!(waiting(&s, 3), None);
}

#[test]
fn a_listing_shares_counts_between_look_alike_gangs_and_names_three_holders() {
    let mut s = sched();
    for (id, name) in [(1, "a"), (2, "b"), (3, "c"), (4, "d")] {
        join(&mut s, name, 1, &[]);
        s.create_pg(id, pg(1, 1, Strategy::StrictSpread, 0));
        s.request_gang(id);
        pass(&mut s, 0);
    }
    for id in [10, 11] {
        s.create_pg(id, pg(1, 1, Strategy::StrictSpread, 1));
        s.request_gang(id);
    }
    pass(&mut s, 1);
    let alone = waiting(&s, 10).unwrap();
    assert!(alone.ends_with("0 of the 4 matching node(s) have it now; in use by j1, j2, j3 and others"), "{alone}");
    let mut memo = WaitingMemo::default();
    let listed: Vec<Option<String>> =
        [10, 11].iter().map(|id| s.waiting_reason(*id, &|p| format!("j{p}"), &mut memo)).collect();
    assert_eq!(listed, [Some(alone.clone()), Some(alone)]);
}

/// A node set aside for a suspect node's bundle is named, even when the suspect is not a node
/// the waiting group could use.
#[test]
fn room_set_aside_for_a_suspect_node_s_bundles_is_named() {
    let mut s = sched();
    let far = join(&mut s, "far", 1, &[("zone", "x")]);
    join(&mut s, "near", 1, &[("zone", "y")]);
    s.create_pg(1, pg(1, 1, Strategy::StrictSpread, 0));
    s.request_gang(1);
    assert_eq!(nodes_of(&pass(&mut s, 0), 1), ["far"], "ties go by name");
    s.set_suspects([far].into());
    s.create_pg(
        2,
        PgSpec { node_selector: [("zone".to_string(), "y".to_string())].into(), ..pg(1, 1, Strategy::StrictSpread, 1) },
    );
    s.request_gang(2);
    assert!(pass(&mut s, 1).is_empty(), "near is set aside for far's bundle");
    assert_eq!(
        waiting(&s, 2).as_deref(),
        Some("waiting: the matching nodes have room for it now, held for the bundles of node(s) that missed heartbeats (far)")
    );
}
