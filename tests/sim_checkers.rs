//! The simulator's checkers catch a broken policy: with a test-only switch that lets pending
//! gangs beat replacements, `replacement_first` fires; with one that makes a restarted head
//! forget which attempts run where, the restart charges budgets and `charge_explained` fires;
//! with one that hands out GPU devices whoever holds them, `no_overcommit` fires; with one that
//! charges every rank a node's loss ends, `one_charge_per_fault` fires; with one that lets
//! retention forget nodes the operator drained, `forget_only_dead` fires; with one that hands
//! the last allowed attempt to a spare on a preemptible node, `last_attempt_off_preemptible`
//! fires; with one that places bundles whatever the job's `node_selector`,
//! `placement_fits_spec` fires; with one that lets only replacements hold capacity,
//! `starved_item_held` fires; with one that gives every node a port pool of its own whatever
//! machine it shares, `rendezvous_port_once` fires; with one that leaves bundles on ports
//! something else came to listen on, `busy_port_twice_at_most` fires; with one that places work
//! on nodes whose agents cannot start it, `unhealthy_node_gets_nothing` fires; with one that
//! declares nodes DEAD while the head hears from none, `charge_explained` fires. With the real policy
//! none does. Rules that no policy switch
//! breaks without breaking everything else (`one_rank_each`, `cycle_well_formed`) are shown
//! by feeding the checker a broken driver's events directly, as is `start_confirmed_real`.

#![allow(clippy::disallowed_methods)]

use ftdrive::driver::ActorState;
use ftdrive::event::{Event, JobEvent};
use ftdrive::head::Head;
use ftdrive::ids::{ActorId, JobId, NodeId};
use ftdrive::protocol::AttemptKey;
use ftdrive::scheduler::{PolicyFault, QueueClass};
use ftdrive::sim::{Checker, Scenario, SimOptions, Simulation};
use ftdrive::spec::JobSpec;
use ftdrive::time::Instant;
use std::path::Path;

fn scenario(name: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios").join(format!("{name}.json"));
    Scenario::parse(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn run(name: &str, fault: PolicyFault) -> Vec<String> {
    let s = scenario(name);
    let options = SimOptions { policy_fault: fault, ..SimOptions::default() };
    Simulation::new(&s, s.seed, options)
        .run()
        .violations
        .into_iter()
        .map(|v| format!("{}: {}", v.invariant, v.detail))
        .collect()
}

/// What the checkers find in scenario `name` under `fault`, once they found nothing there under
/// the real policy: so what they find is the fault's doing.
fn caught(name: &str, fault: PolicyFault) -> Vec<String> {
    assert_eq!(run(name, PolicyFault::None), Vec::<String>::new(), "{name} under the real policy");
    run(name, fault)
}

#[test]
fn pending_gang_beating_a_replacement_is_caught() {
    for name in ["replacement_before_pending_job", "replacement_beats_higher_priority"] {
        assert!(run(name, PolicyFault::None).is_empty(), "{name} is clean under the real policy");
        let found = run(name, PolicyFault::GangsBeforeReplacements);
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        assert!(found[0].starts_with("replacement_first: b/0 was placed on n4"), "{name}: {found:?}");
    }
}

#[test]
fn violations_carry_the_seed_step_and_time() {
    let s = scenario("replacement_before_pending_job");
    let options = SimOptions { policy_fault: PolicyFault::GangsBeforeReplacements, ..SimOptions::default() };
    let report = Simulation::new(&s, 77, options).run();
    assert_eq!(report.seed, 77);
    let v = &report.violations[0];
    assert!(v.step > 0 && v.t_ms >= 20_000, "{v:?}");
    assert_eq!(report.end_ms, v.t_ms, "the run stopped at the violation");
}

#[test]
fn a_head_that_forgets_running_attempts_on_restart_is_caught() {
    let name = "head_restart_readopts_running_work";
    assert!(run(name, PolicyFault::None).is_empty(), "{name} is clean when re-adoption works");
    let found = run(name, PolicyFault::ForgetAttemptsOnRestart);
    assert!(!found.is_empty(), "a broken re-adoption goes unnoticed");
    assert!(found.iter().all(|v| v.starts_with("charge_explained") || v.starts_with("stop_accounted")), "{found:?}");
}

#[test]
fn a_pending_gang_taking_capacity_held_for_a_suspect_node_is_caught() {
    let name = "suspect_node_holds_capacity_for_its_bundles";
    assert!(run(name, PolicyFault::None).is_empty(), "{name} is clean when suspects hold capacity");
    let found = run(name, PolicyFault::IgnoreSuspects);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("suspect_held: b/0 was placed on n4"), "{found:?}");
}

#[test]
fn two_nodes_of_one_machine_giving_out_the_same_port_is_caught() {
    let found = caught("one_machines_nodes_share_its_ports", PolicyFault::PortsPerNode);
    assert!(!found.is_empty(), "a port given twice on one machine goes unnoticed");
    let twice =
        "rendezvous_port_once: b/0 attempt 1 on n2 listens on port 29500 of machine `m1`, held by a/0 attempt 1";
    assert_eq!(found[0], twice, "{found:?}");
}

#[test]
fn a_bundle_left_on_a_port_something_else_listens_on_is_caught() {
    let found = caught("a_listener_on_a_rendezvous_port_moves_its_bundle", PolicyFault::BundlesKeepBusyPorts);
    let third = "busy_port_twice_at_most: a/0 attempt 4 is rank 0 on port 29500 of machine `m1`, which something \
                 else listens on: 3 of its attempts started there";
    assert_eq!(found.first().map(String::as_str), Some(third), "{found:?}");
}

#[test]
fn work_placed_on_a_node_that_cannot_start_it_is_caught() {
    let found = caught("a_full_disk_keeps_new_work_off_its_node_until_it_is_cleared", PolicyFault::PlaceOnUnhealthy);
    let first = "unhealthy_node_gets_nothing: ";
    assert!(found.first().is_some_and(|v| v.starts_with(first) && v.contains("was placed on n1")), "{found:?}");
}

#[test]
fn an_agent_fencing_while_the_head_answers_it_is_caught() {
    let found = caught("a_fenced_agent_stops_its_work_in_a_long_head_outage", PolicyFault::PingsUnheard);
    let first = "fence_only_when_unheard: n1's agent stopped its work at its fence (2000 ms) though the head let it in";
    assert!(found.first().is_some_and(|v| v.starts_with(first)), "{found:?}");
}

#[test]
fn nodes_declared_dead_while_the_head_hears_from_none_is_caught() {
    let found = caught("a_cut_off_head_holds_every_node_and_charges_nothing", PolicyFault::NoDisruptionHold);
    let first = "charge_explained: h/0 attempt 1 was charged to system as node_lost on n1 with no fault behind it";
    assert!(found.first().is_some_and(|v| v.starts_with(first)), "{found:?}");
}

#[test]
fn two_bundles_given_the_same_gpu_device_is_caught() {
    let name = "gpu_workers_replaced_with_their_devices";
    assert!(run(name, PolicyFault::None).is_empty(), "{name} is clean when devices are held once");
    let found = run(name, PolicyFault::DevicesIgnoreHolders);
    assert!(!found.is_empty(), "a device held twice goes unnoticed");
    let shared = |v: &String| v.starts_with("no_overcommit: b/") && v.contains(" both hold a device of 0,1,2,3 on n");
    assert!(found.iter().all(shared), "{found:?}");
}

#[test]
fn charging_every_rank_one_lost_machine_ended_is_caught() {
    let name = "packed_gang_node_lost_charged_once";
    let found = caught(name, PolicyFault::ChargeEveryRank);
    assert!(
        found.iter().any(|v| v.starts_with("one_charge_per_fault: p was charged again for one fault of n1")),
        "{found:?}"
    );
}

#[test]
fn retention_forgetting_a_drained_node_is_caught() {
    let mut s = scenario("operator_drain_outlasts_a_reboot");
    s.config.retain_dead_nodes = 0;
    let run = |fault| {
        let options = SimOptions { policy_fault: fault, ..SimOptions::default() };
        let report = Simulation::new(&s, s.seed, options).run();
        report.violations.into_iter().map(|v| format!("{}: {}", v.invariant, v.detail)).collect::<Vec<_>>()
    };
    assert_eq!(run(PolicyFault::None), Vec::<String>::new(), "a drained DEAD node is kept, whatever the bound");
    let found = run(PolicyFault::ForgetCordoned);
    assert!(
        found.iter().any(|v| v.starts_with("forget_only_dead: n1 forgotten while the operator's drain stands")),
        "{found:?}"
    );
}

#[test]
fn a_spare_on_a_preemptible_node_taking_the_last_attempt_is_caught() {
    let name = "ledger_last_attempt_skips_a_spare_on_a_preemptible_node";
    let found = caught(name, PolicyFault::KeepPreemptibleBundles);
    let promoted = "l/1 started attempt 1 on p2, which is preemptible, after last_attempt_non_preemptible \
                    kept l off such nodes";
    assert_eq!(found, [format!("last_attempt_off_preemptible: {promoted}")]);
}

#[test]
fn a_rank_restarting_its_last_attempt_on_a_preemptible_node_is_caught() {
    let name = "last_attempt_restarts_ranks_off_preemptible_nodes";
    let found = caught(name, PolicyFault::KeepPreemptibleBundles);
    let restarted = "g/1 started attempt 2 on p2, which is preemptible, after last_attempt_non_preemptible \
                     kept g off such nodes";
    assert_eq!(found, [format!("last_attempt_off_preemptible: {restarted}")]);
}

#[test]
fn a_pack_by_cycle_whose_ranks_ignore_the_domains_is_caught() {
    let name = "pack_by_orders_ranks_by_domain";
    let found = caught(name, PolicyFault::RanksIgnoreDomains);
    let unordered = "g cycle 1: ranks [0, 1, 2] are not ordered by their `zone` domains \
                     [Some(\"b\"), Some(\"b\"), Some(\"a\")]";
    assert_eq!(found, [format!("cycle_well_formed: {unordered}")]);
}

#[test]
fn a_placement_off_the_job_s_node_selector_is_caught() {
    let name = "node_selector_keeps_a_job_to_its_zone";
    let found = caught(name, PolicyFault::IgnoreStaticFilters);
    assert_eq!(found, ["placement_fits_spec: z/0 placed on a1: node_selector wants zone=b"]);
}

#[test]
fn a_lower_job_taking_what_a_starving_gang_could_use_is_caught() {
    let name = "starving_gang_holds_what_it_could_use";
    let found = caught(name, PolicyFault::NoAgingHolds);
    let late = "late/0 was placed on n2 while a starving item (waiting 38000 ms, starvation_ms 30000) big/0, \
                ahead of it, waited and could use the room it took";
    assert_eq!(found, [format!("starved_item_held: {late}")]);
}

/// A checker fed the events of a broken driver directly, for rules no policy switch breaks.
struct Fed {
    job: JobId,
    checker: Checker,
    head: Head,
    step: u64,
}

impl Fed {
    /// A gang job `g` of `min..=max` nodes.
    fn new(min: u32, max: u32) -> Self {
        let job = JobId::new("g");
        let mut checker = Checker::new(10_000, true);
        checker.job_submitted(&job, &JobSpec::minimal("g", &["true"], min, max));
        Fed { job, checker, head: Head::new(Default::default()), step: 0 }
    }

    /// What one step's events break of `invariant`.
    fn feed(&mut self, invariant: &str, events: Vec<JobEvent>) -> Vec<String> {
        self.step += 1;
        let events: Vec<Event> =
            events.into_iter().map(|detail| Event::Job { job: self.job.clone(), detail }).collect();
        self.checker.observe(self.step, Instant::from_ms(self.step * 1_000), &events, &self.head);
        let found = self.checker.take().into_iter().filter(|v| v.invariant == invariant);
        found.map(|v| v.detail).collect()
    }

    fn actor(&self, index: u32) -> ActorId {
        ActorId::new(self.job.clone(), index)
    }

    fn start(&self, index: u32, cycle: u32, rank: u32) -> JobEvent {
        let (from, to, attempt) = (ActorState::Scheduling, ActorState::Running, 1);
        JobEvent::Transition { actor: self.actor(index), from, to, attempt, cycle, rank: Some(rank), node: None }
    }

    fn cycle(&self, cycle: u32, world_size: u32, ranks: &[u32]) -> JobEvent {
        let ranks = ranks.iter().map(|i| self.actor(*i)).collect();
        JobEvent::CycleFormed { cycle, world_size, master_addr: "n0".into(), master_port: 29_500, ranks }
    }

    fn place(&mut self, index: u32) {
        let (job, actor, node) = (self.job.clone(), self.actor(index), NodeId::new(&format!("n{index}")));
        let placed = Event::Placed { job, actor, node, class: QueueClass::PendingGang, devices: Default::default() };
        self.step += 1;
        self.checker.observe(self.step, Instant::from_ms(self.step * 1_000), &[placed], &self.head);
        self.checker.take();
    }
}

/// `one_rank_each`: two actors of one job start as the same rank of the same cycle.
#[test]
fn two_live_attempts_holding_one_rank_are_caught() {
    let mut fed = Fed::new(2, 2);
    let both = vec![fed.start(0, 1, 0), fed.start(1, 1, 1)];
    assert_eq!(fed.feed("one_rank_each", both), Vec::<String>::new(), "ranks 0 and 1");
    let again = fed.start(2, 1, 1);
    assert_eq!(
        fed.feed("one_rank_each", vec![again]),
        ["g/2 attempt 1 started as rank 1 of cycle 1, held by g/1 attempt 1"]
    );
    let past = fed.start(3, 1, 2);
    assert_eq!(fed.feed("one_rank_each", vec![past]), ["g/3 attempt 1 started as rank 2 of 2"]);
}

/// `start_confirmed_real`: a confirmation for a start never sent, for a process that never
/// started there, or said twice.
#[test]
fn a_start_confirmed_without_its_process_or_twice_is_caught() {
    let mut fed = Fed::new(1, 1);
    let n1 = NodeId::new("n1");
    let confirmed =
        |fed: &Fed, node: &NodeId| JobEvent::StartConfirmed { actor: fed.actor(0), attempt: 1, node: node.clone() };
    let unsent = confirmed(&fed, &n1);
    assert_eq!(
        fed.feed("start_confirmed_real", vec![unsent]),
        ["g/0 attempt 1 confirmed on n1 whose start was never sent"]
    );
    let sent = JobEvent::Transition {
        actor: fed.actor(0),
        from: ActorState::Scheduling,
        to: ActorState::Running,
        attempt: 1,
        cycle: 1,
        rank: Some(0),
        node: Some(n1.clone()),
    };
    assert_eq!(fed.feed("start_confirmed_real", vec![sent]), Vec::<String>::new());
    let early = confirmed(&fed, &n1);
    assert_eq!(
        fed.feed("start_confirmed_real", vec![early]),
        ["g/0 attempt 1 confirmed on n1 where no process of it started"]
    );
    let key = AttemptKey { job: fed.job.clone(), actor: 0, attempt: 1, cycle: 1 };
    fed.checker.process_started(&n1, &key, None);
    let real = confirmed(&fed, &n1);
    assert_eq!(fed.feed("start_confirmed_real", vec![real]), Vec::<String>::new());
    let again = confirmed(&fed, &n1);
    assert_eq!(fed.feed("start_confirmed_real", vec![again]), ["g/0 attempt 1 confirmed on n1 a second time"]);
    let elsewhere = confirmed(&fed, &NodeId::new("n2"));
    assert_eq!(
        fed.feed("start_confirmed_real", vec![elsewhere]),
        ["g/0 attempt 1 confirmed on n2 where no process of it started"]
    );
}

/// `cycle_well_formed`: survivors reordered, a world of the wrong size, a cycle counted back.
#[test]
fn a_badly_formed_cycle_is_caught() {
    let mut fed = Fed::new(2, 3);
    (0..4).for_each(|i| fed.place(i));
    let first = fed.cycle(1, 3, &[0, 1, 2]);
    assert_eq!(fed.feed("cycle_well_formed", vec![first]), Vec::<String>::new());
    let reordered = fed.cycle(2, 3, &[1, 0, 2]);
    let found = fed.feed("cycle_well_formed", vec![reordered]);
    assert_eq!(found, ["g cycle 2: survivors reordered from [0, 1, 2] to [1, 0, 2]"]);
    // A promoted spare takes its rank's place, and the two keep no order.
    let promoted = JobEvent::Promoted { spare: fed.actor(3), replaces: fed.actor(1) };
    let swapped = fed.cycle(3, 3, &[0, 2, 3]);
    assert_eq!(fed.feed("cycle_well_formed", vec![promoted, swapped]), Vec::<String>::new());
    let too_wide = fed.cycle(4, 4, &[0, 2, 3]);
    let found = fed.feed("cycle_well_formed", vec![too_wide]);
    assert_eq!(found, ["g cycle 4: world_size 4 with ranks [0, 2, 3]; world_size 4 outside 2..=3"]);
    let back = fed.cycle(3, 2, &[0, 5]);
    let found = fed.feed("cycle_well_formed", vec![back]);
    assert_eq!(found, ["g cycle 3: g/5 holds no bundle; it follows cycle 4"]);
}

/// `liveness_at_ms` is a deadline: a job still running at that moment is a violation then,
/// even when the run goes on and the job ends before `until_ms`.
#[test]
fn a_job_still_running_at_liveness_at_ms_is_caught_then() {
    let mut s = scenario("replacement_before_pending_job");
    assert!(Simulation::new(&s, s.seed, SimOptions::default()).run().violations.is_empty(), "clean to its end");
    s.liveness_at_ms = Some(1_000);
    let report = Simulation::new(&s, s.seed, SimOptions::default()).run();
    let v = report.violations.first().expect("the job runs past its deadline");
    assert_eq!((v.invariant.as_str(), v.t_ms), ("liveness", 1_000), "{v:?}");
    assert!(v.detail.starts_with("a is still RUNNING"), "{v:?}");
}
