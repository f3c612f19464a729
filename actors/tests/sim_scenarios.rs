//! `ftdrive sim` on every file in `tests/scenarios/`: each must run without a violation and
//! end as its behaviour says. A new scenario file needs an expectation here.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/scenarios")
}

struct Run {
    summary: Value,
    trace: Vec<Value>,
}

/// Runs the real binary on a scenario, with a trace.
fn sim(name: &str) -> Run {
    let path = scenarios_dir().join(format!("{name}.json"));
    let trace_file = std::env::temp_dir().join(format!("ftdrive-scenario-{name}-{}.jsonl", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
        .arg("sim")
        .arg(&path)
        .args(["--output", "json", "--trace"])
        .arg(&trace_file)
        .output()
        .expect("ftdrive runs");
    assert!(out.status.success(), "{name}: exit {:?}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let summary: Value = serde_json::from_slice(&out.stdout).expect("JSON summary");
    let text = std::fs::read_to_string(&trace_file).expect("trace written");
    let _ = std::fs::remove_file(&trace_file);
    let trace = text.lines().map(|l| serde_json::from_str(l).expect("trace lines are JSON")).collect();
    assert_eq!(summary["violations"], Value::Array(vec![]), "{name}");
    Run { summary, trace }
}

impl Run {
    fn job(&self, id: &str) -> &Value {
        self.summary["jobs"].as_array().unwrap().iter().find(|j| j["id"] == id).unwrap_or_else(|| panic!("no job {id}"))
    }

    fn state(&self, id: &str) -> &str {
        self.job(id)["state"].as_str().unwrap()
    }

    fn actor(&self, job: &str, index: usize) -> &Value {
        &self.job(job)["actors"][index]
    }

    /// (cause, budget) of every ledger entry of a job, in order.
    fn ledger(&self, id: &str) -> Vec<(String, String)> {
        self.job(id)["ledger"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["cause"].as_str().unwrap().to_string(), e["budget"].as_str().unwrap().to_string()))
            .collect()
    }

    fn entry(&self, id: &str, cause: &str) -> &Value {
        self.job(id)["ledger"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["cause"] == cause)
            .unwrap_or_else(|| panic!("{id}: no {cause} entry"))
    }

    fn events(&self, event: &str) -> Vec<&Value> {
        self.trace.iter().filter(|e| e["event"] == event).collect()
    }

    /// (actor, node, class) of every placement, in order.
    fn placements(&self) -> Vec<(&str, &str, &str)> {
        self.events("placed")
            .into_iter()
            .map(|p| (p["actor"].as_str().unwrap(), p["node"].as_str().unwrap(), p["class"].as_str().unwrap()))
            .collect()
    }

    /// (spare, the rank it replaced) of every promotion, in order.
    fn promotions(&self) -> Vec<(&str, &str)> {
        self.events("promoted")
            .into_iter()
            .map(|p| (p["spare"].as_str().unwrap(), p["replaces"].as_str().unwrap()))
            .collect()
    }

    /// (actor, node) of each placement from the replacement class, in order.
    fn replacements(&self) -> Vec<(&str, &str)> {
        self.placements().into_iter().filter(|p| p.2 == "replacement").map(|(actor, node, _)| (actor, node)).collect()
    }
}

fn pair(cause: &str, budget: &str) -> (String, String) {
    (cause.to_string(), budget.to_string())
}

/// Checks one scenario's outcome.
type Expectation = fn(&Run);

/// Every file has an expectation, and every expectation a file.
const EXPECTED: &[(&str, Expectation)] = &[
    ("replacement_before_pending_job", replacement_first),
    ("replacement_beats_higher_priority", replacement_first),
    // `early` backfills beside the blocked gang; once `big` has waited starvation_ms it holds
    // the free nodes, so `late` (lower priority) waits for it although n2 and n3 are free.
    ("starving_gang_holds_what_it_could_use", |r| {
        let order: Vec<(&str, &str)> = r.placements().into_iter().map(|(actor, node, _)| (actor, node)).collect();
        let expected = [("a/0", "n1"), ("early/0", "n2"), ("big/0", "n1"), ("big/1", "n2"), ("big/2", "n3")];
        assert_eq!(order[..5], expected);
        assert_eq!(order[5].0, "late/0", "late waits for big: {order:?}");
        for job in ["a", "big", "early", "late"] {
            assert_eq!(r.state(job), "SUCCEEDED", "{job}");
        }
    }),
    // n4 joins while n2 is suspect but not yet DEAD: the capacity is held for a's bundle.
    // Swarm seed 6880744 (HO-2): j1, which lost every node, and the starving gang j3 are held
    // as one; j1's spare takes half of n01 and j1 no longer needs n01, but j3 still does, so
    // j0's spare (lower) must not take the other half: j3 is placed there before it.
    ("a_starving_gang_keeps_its_room_when_a_look_alike_it_was_held_with_gets_a_spare", |r| {
        let order: Vec<&str> = r.placements().into_iter().map(|(actor, _, _)| actor).collect();
        let gang = order.iter().position(|a| *a == "j3/1").expect("j3's gang was placed");
        assert!(!order[..gang].contains(&"j0/4"), "j0's spare went first: {order:?}");
        assert_eq!(r.state("j3"), "SUCCEEDED");
    }),
    // n01 comes back while j0 (STRICT_SPREAD, three nodes, only two alive) waits to be
    // restored: one node of room is held for it there. j2's spare takes room beside the hold;
    // promoted, it leaves j2 a restoration that HO-1 frees from j0's hold, which takes half of
    // it; j2's second spare takes the half left, which j0 cannot use. No hold is broken, though
    // the step's lower placements together took room j0 could use (the checker once judged
    // them together).
    ("a_restoration_freed_from_a_hold_between_two_spares_breaks_no_hold", |r| {
        let back = r.events("node_state").into_iter().filter(|e| e["node"] == "n01").nth(2).expect("n01 is back");
        assert_eq!(back["evidence"], "registered");
        let at = &back["t_ms"];
        let on_n01: Vec<(&str, &str)> = r
            .events("placed")
            .into_iter()
            .filter(|p| &p["t_ms"] == at && p["node"] == "n01")
            .map(|p| (p["actor"].as_str().unwrap(), p["class"].as_str().unwrap()))
            .collect();
        assert_eq!(on_n01, [("j1/0", "replacement"), ("j2/4", "spare"), ("j2/1", "replacement"), ("j2/0", "spare")]);
        for job in ["j0", "j1", "j2"] {
            assert_eq!(r.state(job), "SUCCEEDED", "{job}");
        }
    }),
    ("suspect_node_holds_capacity_for_its_bundles", |r| {
        replacement_first(r);
        let joined = r.events("node_state").into_iter().find(|e| e["node"] == "n4").expect("n4 joined")["t_ms"].clone();
        let dead =
            r.events("node_state").into_iter().find(|e| e["node"] == "n2" && e["state"] == "DEAD").expect("n2 died")
                ["t_ms"]
                .clone();
        assert!(joined.as_u64() < dead.as_u64(), "n4 joined before n2 was declared dead: {joined} vs {dead}");
    }),
    ("strict_spread_waits_for_whole_gang", |r| {
        assert_eq!((r.state("g"), r.job("g")["cycles"].as_u64()), ("SUCCEEDED", Some(1)));
        let placed = r.events("placed");
        assert_eq!(placed.len(), 3);
        assert!(
            placed.iter().all(|p| p["t_ms"] == placed[0]["t_ms"] && p["t_ms"].as_u64() >= Some(20_000)),
            "all at once, after n3 joined"
        );
    }),
    ("elastic_grows_when_a_node_joins", |r| {
        assert_eq!((r.state("e"), r.job("e")["cycles"].as_u64()), ("SUCCEEDED", Some(2)));
        assert_eq!(r.ledger("e")[0], pair("membership_change", "none"));
        assert_eq!(r.job("e")["remaining"]["user"], 0);
    }),
    ("infeasible_bundle_reported", |r| {
        assert_eq!(r.state("big"), "PENDING");
        assert_eq!(r.job("big")["infeasible"], "infeasible: bundle needs gpu=8, largest node has gpu=4 (n1)");
    }),
    ("gang_wider_than_the_cluster_waits_for_a_node", |r| {
        let reasons: Vec<&Value> = r.events("feasibility").iter().map(|e| &e["infeasible"]).collect();
        let two = "infeasible: min_nodes 3 with STRICT_SPREAD needs 3 distinct nodes, and only 2 node(s), DEAD ones included, could hold a bundle; \
                   add nodes, or lower min_nodes";
        assert_eq!(reasons, [&Value::from(two), &Value::Null], "reported at submission, lifted when n3 joined");
        let small = r.entry("small", "completed")["end_ms"].as_u64().unwrap();
        assert!(small < 20_000, "the small job ran meanwhile, not held back by the wide one: {small}");
        assert_eq!(r.state("wide"), "SUCCEEDED");
        assert_eq!(r.ledger("wide"), vec![pair("completed", "none"); 3]);
    }),
    ("torchx_gang_start_and_clean_drain", |r| {
        assert_eq!(r.state("t"), "SUCCEEDED");
        assert!(r.job("t")["actors"].as_array().unwrap().iter().all(|a| a["state"] == "TASK_COMPLETED"));
        assert_eq!(r.job("t")["placement_groups"][0]["state"], "REMOVED");
        assert_eq!(r.ledger("t"), vec![pair("completed", "none"); 3]);
    }),
    ("torchx_late_actor_never_runs", |r| {
        assert_eq!(r.state("t"), "SUCCEEDED");
        assert_eq!(
            (r.actor("t", 2)["attempt"].as_u64(), r.actor("t", 2)["state"].as_str()),
            (Some(0), Some("STOPPED"))
        );
        // Its request went when rank 0 completed: n3, joining later, is not taken and given
        // back (swarm seed 4059402).
        assert!(!r.events("placed").iter().any(|e| e["actor"] == "t/2"), "t/2's request was withdrawn");
        assert!(r.events("released_unused").is_empty());
    }),
    ("torchx_non_rank0_failure_restarts_on_its_bundle", |r| {
        assert_eq!(r.state("t"), "SUCCEEDED");
        let attempts: Vec<u64> = (0..3).map(|i| r.actor("t", i)["attempt"].as_u64().unwrap()).collect();
        assert_eq!(attempts, [1, 2, 1], "only rank 1 restarted");
        let nodes: Vec<&Value> = r.job("t")["ledger"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["actor"] == "t/1")
            .map(|e| &e["node"])
            .collect();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0], nodes[1], "restarted on its restored bundle");
    }),
    ("torchx_rank0_failure_recovers", |r| {
        assert_eq!((r.state("t"), r.job("t")["cycles"].as_u64()), ("SUCCEEDED", Some(2)));
        assert_eq!(r.entry("t", "node_lost")["actor"], "t/0");
        let cycles = r.events("cycle_formed");
        assert_ne!(cycles[0]["master_addr"], cycles[1]["master_addr"]);
    }),
    // t keeps min_nodes with rank 1 alone, but none of its ranks starts without rank 0: the
    // machine that joins restores rank 0 before the pending job b, whatever b's priority.
    ("torchx_rank0_restored_before_a_pending_job", |r| {
        let placed: Vec<(&str, &str)> =
            r.placements().into_iter().filter(|p| p.1 == "n3").map(|(actor, _, class)| (actor, class)).collect();
        assert_eq!(placed.first(), Some(&("t/0", "replacement")), "{placed:?}");
        assert_eq!((r.state("t"), r.state("b")), ("SUCCEEDED", "SUCCEEDED"));
    }),
    // a and b lose their nodes in turns (a, b, a, b) and two machines join. One bundle at a
    // time, each job took one and waited for ever for the other's; a's restorations (the
    // first loss) go together, and b's follow once a ends. The last two machines go silent
    // while no node is heard, so they are held (FD-1), declared a node timeout after n5 joins,
    // and nothing is placed meanwhile (FD-2): without that pause, a and b took one each.
    ("gangs_losing_nodes_in_turns_are_restored_whole", |r| {
        let replaced = r.replacements();
        assert_eq!(replaced, [("a/0", "n5"), ("a/1", "n6"), ("b/0", "n5"), ("b/1", "n6")]);
        assert_eq!((r.state("a"), r.state("b")), ("SUCCEEDED", "SUCCEEDED"));
    }),
    // a loses both its nodes and waits for two: n5, which it holds, and n3, where b's survivor
    // runs. b loses n4, and its replacement can only go to n5. The hold does not bind b
    // (HO-1): b returns on n5 and ends, then a takes n3 and n5. Bound, both wait for ever.
    ("a_held_restoration_lets_the_job_it_waits_for_back", |r| {
        let replaced = r.replacements();
        assert_eq!(replaced, [("b/1", "n5"), ("a/0", "n3"), ("a/1", "n5")]);
        assert_eq!((r.state("a"), r.state("b")), ("SUCCEEDED", "SUCCEEDED"));
    }),
    ("gpu_workers_replaced_with_their_devices", |r| {
        assert_eq!((r.state("a"), r.job("a")["cycles"].as_u64()), ("SUCCEEDED", Some(2)));
        let replaced: Vec<&Value> = r.events("placed").into_iter().filter(|p| p["class"] == "replacement").collect();
        assert_eq!(replaced.len(), 2, "a/0 and b/1, lost with n1");
        for p in replaced {
            // Each lands beside a bundle of the other job, which holds devices 0-3 there.
            assert_eq!(p["devices"], serde_json::json!([4, 5, 6, 7]), "{p}");
        }
        assert_eq!(r.state("b"), "FAILED");
        let failed = r.entry("b", "user_error")["evidence"].as_str().unwrap();
        assert!(failed.starts_with("worker 3 (rank 7) exited with code 1"), "{failed}");
    }),
    ("gang_rank0_node_lost_new_master", |r| {
        assert_eq!((r.state("g"), r.job("g")["cycles"].as_u64()), ("SUCCEEDED", Some(2)));
        let cycles = r.events("cycle_formed");
        assert_eq!(
            (cycles[0]["master_addr"].as_str(), cycles[1]["master_addr"].as_str()),
            (Some("n1.sim"), Some("n4.sim"))
        );
        assert_eq!(cycles[1]["ranks"][0], "g/0", "actor 0 keeps rank 0 on its new node");
    }),
    ("dead_node_forgotten_rejoins_as_new", |r| {
        assert_eq!(r.summary["stats"]["faults_without_target"], 1, "the forget of the ALIVE node was refused");
        let feasibility: Vec<&Value> = r.events("feasibility");
        let reasons: Vec<Option<&str>> = feasibility.iter().map(|e| e["infeasible"].as_str()).collect();
        assert_eq!(
            reasons,
            [Some("infeasible: no node matches node_selector kind=gpu"), None],
            "forgotten, the only matching node no longer counts; the machine's return does"
        );
        assert_eq!(feasibility[0]["t_ms"], 12000, "at the forget, not at the death");
        assert_eq!(r.state("g"), "SUCCEEDED");
        assert_eq!(r.ledger("g"), vec![pair("node_lost", "system"), pair("completed", "none")]);
    }),
    ("packed_gang_node_lost_charged_once", |r| {
        assert_eq!((r.state("p"), r.job("p")["cycles"].as_u64()), ("SUCCEEDED", Some(2)));
        let lost: Vec<(String, String)> = r.ledger("p").into_iter().filter(|(c, _)| c == "node_lost").collect();
        assert_eq!(
            lost,
            vec![
                pair("node_lost", "system"),
                pair("node_lost", "none"),
                pair("node_lost", "none"),
                pair("node_lost", "none")
            ],
            "four ranks on one lost machine: one fault, one charge"
        );
    }),
    ("hot_spare_promoted", |r| {
        assert_eq!(r.state("s"), "SUCCEEDED");
        assert_eq!(r.promotions()[0], ("s/2", "s/1"));
        assert_eq!(r.events("cycle_formed")[1]["ranks"], serde_json::json!(["s/0", "s/2"]));
        assert_eq!(r.actor("s", 1)["state"], "TASK_COMPLETED");
    }),
    // s/0 fails and its spare s/1 takes rank 0, then loses n2 during the backoff, before it
    // starts. s/0, standing by on n1, takes the rank back: the only other node is its own.
    ("a_waiting_rank_that_loses_its_node_is_taken_over_by_its_spare", |r| {
        assert_eq!(r.promotions(), [("s/1", "s/0"), ("s/0", "s/1")]);
        assert_eq!(r.events("cycle_formed")[1]["ranks"], serde_json::json!(["s/0"]));
        assert_eq!(r.state("s"), "SUCCEEDED");
    }),
    // Ranks 1 and 2 fail and back off on n2; then n1, rank 0's node, dies. n2, the only node
    // left, is full with the job's own waiting ranks, and nothing starts without rank 0: t/1
    // takes rank 0 there and t/0 waits as rank 1, until n2 has room once the others end.
    ("actor_rank0_taken_by_a_waiting_rank_when_its_own_job_fills_the_node", |r| {
        let cycles = r.events("cycle_formed");
        assert_eq!(cycles[1]["ranks"], serde_json::json!(["t/1", "t/0", "t/2"]));
        assert_eq!(cycles[1]["master_addr"], "n2.sim");
        assert_eq!(r.replacements(), [("t/0", "n2")]);
        assert_eq!(r.state("t"), "SUCCEEDED");
    }),
    // a/0 is preempted and its spare a/2 takes rank 0; a/1 is drained off with the preemption
    // budget spent, so its retry needs a node that is not preemptible. When one joins, a/0 (now
    // the spare) stands by on it. Once a/2 completes the job is terminating and starts no
    // spare, so a/0 gives the node back and a/1 finishes there.
    ("actor_spare_gives_back_the_only_node_a_started_rank_can_use", |r| {
        let unused: Vec<&str> = r.events("released_unused").iter().map(|e| e["actor"].as_str().unwrap()).collect();
        assert_eq!(unused, ["a/0"]);
        assert_eq!(r.replacements(), [("a/1", "safe")]);
        assert_eq!(r.state("a"), "SUCCEEDED");
    }),
    // A gang's rank on `firm` is gone when its agent restarts (a system charge). The spare on
    // n2 takes the rank and g/0 stands by on firm; n2 is drained during the backoff, so the
    // waiting rank goes back to g/0, which completes the job on firm.
    ("promoted_rank_drained_while_waiting_takes_its_spares_node", |r| {
        assert_eq!(r.promotions(), [("g/1", "g/0"), ("g/0", "g/1")]);
        assert_eq!(r.ledger("g"), vec![pair("node_lost", "system"), pair("completed", "none")]);
        assert_eq!(
            (r.actor("g", 0)["state"].as_str(), r.actor("g", 0)["node"].as_str()),
            (Some("TASK_COMPLETED"), Some("firm"))
        );
        assert_eq!(r.state("g"), "SUCCEEDED");
    }),
    ("hot_spares_exit_gracefully_on_success", |r| {
        assert_eq!(r.state("s"), "SUCCEEDED");
        for spare in ["s/2", "s/3"] {
            let transitions = r.events("transition");
            let ends: Vec<&&Value> =
                transitions.iter().filter(|t| t["actor"] == spare && t["to"] == "TASK_COMPLETED").collect();
            assert_eq!(ends.len(), 1, "{spare} ended once");
            assert_eq!(ends[0]["from"], "STANDBY", "{spare} ended gracefully from STANDBY");
        }
        assert_eq!(r.job("s")["placement_groups"][0]["state"], "REMOVED");
    }),
    ("a_spare_still_waiting_at_success_is_withdrawn", |r| {
        assert_eq!(r.state("s"), "SUCCEEDED");
        assert!(!r.events("placed").iter().any(|e| e["actor"] == "s/2"), "n3 joined after the request went");
        assert!(r.events("released_unused").is_empty());
        assert_eq!(r.actor("s", 2)["attempt"], 0, "never started");
    }),
    ("ledger_completed", |r| assert_eq!(r.ledger("l"), vec![pair("completed", "none")])),
    ("ledger_non_retryable", |r| {
        assert_eq!(r.state("l"), "FAILED");
        assert_eq!(r.ledger("l"), vec![pair("non_retryable", "none")]);
        assert_eq!(r.job("l")["remaining"]["user"], 5);
    }),
    ("ledger_user_error", |r| {
        assert_eq!(r.state("l"), "SUCCEEDED");
        assert_eq!(r.ledger("l")[0], pair("user_error", "user"));
        assert_eq!(r.entry("l", "user_error")["remaining"]["user"], 0);
    }),
    ("ledger_user_error_signal", |r| {
        assert_eq!(r.ledger("l")[0], pair("user_error", "user"));
        assert_eq!(r.entry("l", "user_error")["signal"], 9);
    }),
    ("ledger_spawn_failed", |r| {
        assert_eq!(r.state("l"), "FAILED");
        assert_eq!(r.ledger("l"), vec![pair("spawn_failed", "none")]);
        assert!(r.entry("l", "spawn_failed")["evidence"].as_str().unwrap().starts_with("could not start `python3`"));
    }),
    // SL-1: n2's agent is killed with its rank and back at once; the other two ranks exit 1 on
    // their broken ring. The lost rank is charged to `system`, once; the crashes are reactions
    // (free), though the job has no user retries; the gang runs again and succeeds.
    ("an_agent_killed_with_its_rank_charges_the_loss_not_the_peers", |r| {
        assert_eq!(r.state("ring"), "SUCCEEDED");
        let first: Vec<(String, String)> = r.ledger("ring").into_iter().take(3).collect();
        let lost = first.iter().filter(|p| **p == pair("node_lost", "system")).count();
        let reacted = first.iter().filter(|p| **p == pair("collateral", "none")).count();
        assert_eq!((lost, reacted), (1, 2), "{first:?}");
        let evidence = r.entry("ring", "node_lost")["evidence"].as_str().unwrap();
        assert!(evidence.contains("died without a record"), "{evidence}");
    }),
    ("ledger_preempted_by_drain", |r| {
        assert_eq!(r.state("l"), "SUCCEEDED");
        assert_eq!(r.ledger("l")[0], pair("preempted", "preemption"));
    }),
    // n2 is drained and dies at once, unnoticed; the operator withdraws the drain, a/0 (lost with
    // n1) is placed on n2, and n2 is declared dead: the drain and the death are charged once each.
    ("withdrawn_drain_then_death_charged_once_each", |r| {
        assert_eq!(r.state("a"), "SUCCEEDED");
        assert_eq!(
            r.ledger("a")[..3],
            [pair("node_lost", "system"), pair("node_lost", "system"), pair("preempted", "preemption")]
        );
        assert_eq!(r.entry("a", "preempted")["actor"], "a/1", "the rank the drain was stopping");
    }),
    // The operator drains n1 (l moves to n2), m waits for a node, and the undrain gives it n1.
    ("operator_undrain_takes_a_node_back", |r| {
        assert_eq!(r.state("l"), "SUCCEEDED");
        assert_eq!(r.ledger("l")[0], pair("preempted", "preemption"));
        assert_eq!(r.state("m"), "SUCCEEDED");
        assert_eq!(r.ledger("m"), vec![pair("completed", "none")], "the undrain charged nothing");
        assert_eq!(r.entry("m", "completed")["node"], "n1");
        assert!(r.entry("m", "completed")["start_ms"].as_u64() >= Some(12_000), "placed once undrained");
        let n1: Vec<&str> =
            r.events("node_state").iter().filter(|e| e["node"] == "n1").map(|e| e["state"].as_str().unwrap()).collect();
        assert_eq!(n1, ["ALIVE", "DRAINING", "ALIVE"]);
    }),
    // n1 is drained, then rebooted slower than the node timeout (DEAD), across a head restart:
    // it registers DRAINING and takes m only once undrained.
    ("operator_drain_outlasts_a_reboot", |r| {
        assert_eq!(r.state("l"), "SUCCEEDED");
        assert_eq!(r.ledger("l")[0], pair("preempted", "preemption"));
        assert_eq!(r.state("m"), "SUCCEEDED");
        assert_eq!(r.entry("m", "completed")["node"], "n1");
        assert!(r.entry("m", "completed")["start_ms"].as_u64() >= Some(25_000), "placed once undrained");
        let n1: Vec<&str> =
            r.events("node_state").iter().filter(|e| e["node"] == "n1").map(|e| e["state"].as_str().unwrap()).collect();
        assert_eq!(n1, ["ALIVE", "DRAINING", "DEAD", "DRAINING", "ALIVE"]);
    }),
    ("ledger_preempted_node_lost", |r| {
        assert_eq!(r.ledger("l")[0], pair("preempted", "preemption"));
        assert_eq!(r.entry("l", "preempted")["remaining"]["system"], 3);
    }),
    ("ledger_node_lost", |r| {
        assert_eq!(r.ledger("l")[0], pair("node_lost", "system"));
        assert_eq!(r.entry("l", "node_lost")["remaining"]["system"], 2);
    }),
    ("agent_restart_keeps_running_work", |r| {
        assert_eq!(r.state("l"), "SUCCEEDED");
        assert_eq!(r.ledger("l"), vec![pair("completed", "none"); 2], "nothing restarted, nothing charged");
        let restarts = r.events("agent_restarted");
        assert_eq!(restarts.len(), 2);
        assert!(restarts.iter().all(|e| e["reattached"] == 1 && e["lost"] == 0), "{restarts:?}");
    }),
    ("a_fenced_agent_stops_its_work_in_a_long_head_outage", |r| {
        // The head is down 5 s; n1's agent hears nothing past its 2 s fence and stops its
        // work (AG-7), charged to the system as the node's loss; n2's keeps it, uncharged.
        assert_eq!(r.ledger("f"), vec![pair("node_lost", "system"), pair("completed", "none")]);
        let fenced = r.entry("f", "node_lost")["evidence"].as_str().unwrap();
        assert!(fenced.contains("heard nothing from the head for its --fence-after-ms"), "{fenced}");
        assert_eq!(r.ledger("k"), vec![pair("completed", "none")], "an agent without a fence keeps its work");
        assert_eq!((r.state("f"), r.state("k")), ("SUCCEEDED", "SUCCEEDED"));
    }),
    ("a_time_limit_counts_through_restarts_and_stops_the_job", |r| {
        // RUNNING at 1000 with a 20 s limit: a gang restart at 6000 and a head restart at
        // 12000 do not start the clock again, so the job closes at 21000 and fails.
        assert_eq!(r.state("t"), "FAILED");
        let closing = r.events("closing").into_iter().find(|e| e["job"] == "t").expect("the job closed");
        assert_eq!((closing["t_ms"].as_u64(), closing["reason"].as_str()), (Some(21_000), Some("failed")));
        assert!(r.job("t")["message"].as_str().unwrap().starts_with("ran for its run_timeout_ms (20000 ms)"));
        assert_eq!(
            r.ledger("t"),
            vec![
                pair("collateral", "none"),
                pair("user_error", "user"),
                pair("collateral", "none"),
                pair("collateral", "none")
            ],
            "the limit's stop charges nothing"
        );
    }),
    ("head_restart_readopts_running_work", |r| {
        assert_eq!(r.state("h"), "SUCCEEDED");
        assert_eq!(r.job("h")["cycles"], 1);
        assert_eq!(r.ledger("h"), vec![pair("completed", "none"); 3], "nothing restarted, nothing charged");
        assert_eq!(r.state("p"), "SUCCEEDED", "a job submitted while the head recovered runs");
        let placed = r.events("placed").into_iter().find(|e| e["job"] == "p").expect("p was placed");
        assert!(placed["t_ms"].as_u64().unwrap() > 11_500, "placed only once the restarted head recovered");
    }),
    ("a_cut_off_head_holds_every_node_and_charges_nothing", |r| {
        assert_eq!(r.state("h"), "SUCCEEDED");
        assert_eq!(r.job("h")["cycles"], 1, "FD-1: a cut of the head's network longer than the node timeout");
        assert_eq!(r.ledger("h"), vec![pair("completed", "none"); 3], "nothing restarted, nothing charged");
        let dead: Vec<_> = r.events("node_state").into_iter().filter(|e| e["state"] == "DEAD").collect();
        assert!(dead.iter().all(|e| e["node"] == "n4"), "only the machine that died is DEAD: {dead:?}");
        let declared = dead.first().expect("n4, which died during the cut, is declared")["t_ms"].as_u64().unwrap();
        assert!(declared >= 21_000, "a node timeout after the cut ended at 18000, not before: {declared}");
        assert_eq!(r.ledger("p"), vec![pair("node_lost", "system"), pair("completed", "none")]);
    }),
    ("ledger_collateral", |r| {
        let ledger = r.ledger("l");
        assert_eq!(ledger.iter().filter(|e| **e == pair("user_error", "user")).count(), 1);
        assert_eq!(ledger.iter().filter(|e| **e == pair("collateral", "none")).count(), 2);
        assert_eq!(r.state("l"), "SUCCEEDED");
    }),
    ("ledger_membership_change", |r| assert_eq!(r.ledger("l")[0], pair("membership_change", "none"))),
    ("ledger_stopped", |r| {
        assert_eq!(r.state("l"), "STOPPED");
        assert_eq!(r.ledger("l"), vec![pair("stopped", "none"); 2]);
        assert_eq!(r.job("l")["message"], "stopped by the user");
    }),
    ("ledger_budget_exhausted", |r| {
        assert_eq!(r.state("l"), "FAILED");
        let last = r.job("l")["ledger"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(
            (last["cause"].as_str(), last["budget"].as_str(), last["remaining"]["user"].as_i64()),
            (Some("user_error"), Some("user"), Some(0))
        );
        assert!(last["evidence"].as_str().unwrap().ends_with("the user budget is exhausted"));
        assert!(r.job("l")["message"].as_str().unwrap().contains("user retry budget is exhausted"));
    }),
    ("ledger_single_budget", |r| {
        assert_eq!(r.ledger("l")[0], pair("node_lost", "user"));
        assert_eq!(
            r.entry("l", "node_lost")["remaining"],
            serde_json::json!({"user": 0, "system": 3, "preemption": -1})
        );
    }),
    ("ledger_last_attempt_non_preemptible", |r| {
        assert_eq!(r.ledger("l")[0], pair("preempted", "preemption"));
        assert_eq!(r.entry("l", "completed")["node"], "s1", "the last attempt ran on the non-preemptible node");
    }),
    ("ledger_last_attempt_skips_a_spare_on_a_preemptible_node", |r| {
        assert_eq!(r.ledger("l")[0], pair("preempted", "preemption"));
        assert_eq!(r.entry("l", "completed")["node"], "s1", "the last attempt ran off preemptible nodes");
        assert_eq!(r.events("promoted").len(), 0, "the spare on p2 was not handed the rank");
        let released: Vec<&Value> = r.events("released").into_iter().filter(|e| e["actor"] == "l/1").collect();
        assert_eq!(released.len(), 1, "the spare gave p2 back: {released:?}");
        assert_eq!(
            (&released[0]["node"], &released[0]["t_ms"]),
            (&Value::from("p2"), &r.entry("l", "preempted")["end_ms"])
        );
        assert_eq!(r.state("l"), "SUCCEEDED");
    }),
    // p1's loss leaves the preemption budget at 0; g/1, stopped with its gang on p2, must not
    // start the job's last allowed attempt there: it gives p2 back and moves to s2.
    ("last_attempt_restarts_ranks_off_preemptible_nodes", |r| {
        assert_eq!(
            r.ledger("g"),
            vec![
                pair("preempted", "preemption"),
                pair("collateral", "none"),
                pair("completed", "none"),
                pair("completed", "none")
            ]
        );
        let after: Vec<(&str, &str, &str)> = r.placements().into_iter().skip(2).collect();
        assert_eq!(after, [("g/0", "s1", "replacement"), ("g/1", "s2", "replacement")]);
        assert_eq!(r.state("g"), "SUCCEEDED");
    }),
    // The required gang goes to zone b, the only one with room for both; growth takes a1 in
    // the same step. Ranks follow the zones, so g/2 on a1 is rank 0 and the master.
    ("pack_by_orders_ranks_by_domain", |r| {
        let cycle = &r.events("cycle_formed")[0];
        assert_eq!(cycle["ranks"], serde_json::json!(["g/2", "g/0", "g/1"]));
        assert_eq!(cycle["master_addr"], "a1.sim");
        assert_eq!(r.state("g"), "SUCCEEDED");
    }),
    ("a_dead_nodes_ports_pass_to_a_node_of_its_machine_that_had_none", |r| {
        // Two ports for the machine's three nodes: n3, last to join, has none (PS-2). When n1
        // dies its port is n3's, and a's lost rank is re-placed there, before the pending b.
        assert_eq!((r.state("a"), r.state("b")), ("SUCCEEDED", "SUCCEEDED"));
        let replacement = r.placements().into_iter().find(|p| p.2 == "replacement").expect("a/0 was re-placed");
        assert_eq!(replacement, ("a/0", "n3", "replacement"));
        let cycles = r.events("cycle_formed");
        let second = cycles.iter().find(|c| c["job"] == "a" && c["cycle"] == 2).expect("a's second cycle");
        assert_eq!((&second["master_addr"], &second["master_port"]), (&"n3.sim".into(), &65_534.into()));
        assert_eq!(r.ledger("a")[0], pair("node_lost", "system"));
    }),
    ("one_machines_nodes_share_its_ports", |r| {
        let states = (r.state("a"), r.state("b"), r.state("c"));
        assert_eq!(states, ("SUCCEEDED", "SUCCEEDED", "SUCCEEDED"));
        let cycles = r.events("cycle_formed");
        let at = |job: &str| -> (Value, Value) {
            let c = cycles.iter().find(|c| c["job"] == job).expect("a cycle");
            (c["master_addr"].clone(), c["master_port"].clone())
        };
        // a and b on the machine's two nodes, c beside a after the head restarted.
        assert_eq!(
            [at("a"), at("b"), at("c")],
            [("n1.sim".into(), 29_500.into()), ("n2.sim".into(), 29_501.into()), ("n1.sim".into(), 29_502.into())]
        );
    }),
    // PS-4: something starts listening on a/0's 29500 just after its rank 0 failed; the agent
    // reads what listens before it reports the end, and the bundle moves to 29502 (b's bundle
    // on n2 holds 29501) before the retry starts, which does not fail on it. b's spare on n3
    // moved off m2's 29500 and 29501 as they were taken, and serves b's rendezvous from 29502
    // when it takes over; a, once its machine is gone, waits for n3 and gets 29502 there when b
    // has ended.
    ("a_listener_on_a_rendezvous_port_moves_its_bundle", |r| {
        assert_eq!((r.state("a"), r.state("b")), ("SUCCEEDED", "SUCCEEDED"));
        let user = pair("user_error", "user");
        assert_eq!(r.ledger("a"), vec![user, pair("node_lost", "system"), pair("completed", "none")]);
        let moves: Vec<(&Value, &Value, &Value)> =
            r.events("port_moved").iter().map(|e| (&e["actor"], &e["from"], &e["to"])).collect();
        let moved = |actor: &str, from: u16, to: u16| (Value::from(actor), Value::from(from), Value::from(to));
        let expected = [moved("a/0", 29_500, 29_502), moved("b/1", 29_500, 29_502), moved("b/0", 29_501, 29_503)];
        assert_eq!(moves, expected.iter().map(|(a, f, t)| (a, f, t)).collect::<Vec<_>>());
        let masters = |job: &str| -> Vec<(Value, Value)> {
            let cycles = r.events("cycle_formed").into_iter().filter(|c| c["job"] == job);
            cycles.map(|c| (c["master_addr"].clone(), c["master_port"].clone())).collect()
        };
        let at = |node: &str, port: u16| (Value::from(format!("{node}.sim")), Value::from(port));
        assert_eq!(masters("a"), [at("n1", 29_500), at("n1", 29_502), at("n3", 29_502)]);
        assert_eq!(masters("b"), [at("n2", 29_501), at("n3", 29_502)]);
    }),
    // n1's disk is full from 500 ms to 20.5 s: a/0's first start there fails as the node's
    // fault (charged to `system`, moved at once as a replacement); b's spare waits for n1 —
    // across a head restart, whose registrations say n1 still cannot start work — and is
    // placed there once the agent's probe finds the disk well.
    ("a_full_disk_keeps_new_work_off_its_node_until_it_is_cleared", |r| {
        assert_eq!((r.state("a"), r.state("b")), ("SUCCEEDED", "SUCCEEDED"));
        assert_eq!(r.ledger("a"), vec![pair("node_lost", "system"), pair("completed", "none")]);
        assert_eq!(
            r.placements(),
            [
                ("a/0", "n1", "pending_gang"),
                ("a/0", "n2", "replacement"),
                ("b/0", "n3", "pending_gang"),
                ("b/1", "n1", "spare")
            ]
        );
        let health: Vec<bool> = r.events("node_health").iter().map(|e| e.get("problem").is_some()).collect();
        assert_eq!(health, [true, true, false], "unhealthy, told again after the head restart, well");
    }),
    ("node_selector_keeps_a_job_to_its_zone", |r| {
        assert_eq!(r.placements(), [("z/0", "b1", "pending_gang"), ("z/0", "b2", "replacement")], "a1 is in zone a");
        assert_eq!(r.ledger("z"), vec![pair("node_lost", "system"), pair("completed", "none")]);
        assert_eq!(r.state("z"), "SUCCEEDED");
    }),
    // The drain (withdrawn before its deadline) preempts k/0 and leaves the preemption budget
    // at 0; the spare, placed on p1 again once p1 was undrained, would pin the STRICT_PACK group
    // to p1, where k/0 may no longer go. It gives p1 back and both move to s1.
    ("strict_pack_last_attempt_moves_its_spare_off_preemptible_nodes", |r| {
        assert_eq!(r.ledger("k"), vec![pair("preempted", "preemption"), pair("completed", "none")]);
        let after: Vec<(&str, &str, &str)> = r.placements().into_iter().skip(3).collect();
        assert_eq!(after, [("k/0", "s1", "replacement"), ("k/1", "s1", "spare")]);
        assert_eq!(r.state("k"), "SUCCEEDED");
    }),
    ("ledger_peer_reacting_to_a_lost_node", |r| {
        assert_eq!(r.state("l"), "SUCCEEDED");
        let first: Vec<(String, String, String)> = r.job("l")["ledger"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["attempt"] == 1)
            .map(|e| {
                (
                    e["actor"].as_str().unwrap().into(),
                    e["cause"].as_str().unwrap().into(),
                    e["budget"].as_str().unwrap().into(),
                )
            })
            .collect();
        assert!(first.contains(&("l/1".into(), "node_lost".into(), "system".into())), "{first:?}");
        assert!(
            first.contains(&("l/2".into(), "collateral".into(), "none".into())),
            "the exit reacted to n2's loss: {first:?}"
        );
        assert_eq!(r.job("l")["remaining"]["user"], 1, "no user budget spent");
    }),
    ("lossy_network_still_converges", |r| {
        assert_eq!((r.state("a"), r.state("b")), ("SUCCEEDED", "SUCCEEDED"));
        let stats = &r.summary["stats"];
        assert!(stats["dropped"].as_u64() > Some(0) && stats["duplicated"].as_u64() > Some(0), "{stats}");
    }),
];

fn replacement_first(r: &Run) {
    assert_eq!((r.state("a"), r.state("b")), ("SUCCEEDED", "SUCCEEDED"));
    assert_eq!(r.entry("a", "node_lost")["budget"], "system");
    let placed = r.events("placed");
    let replacement =
        placed.iter().position(|p| p["class"] == "replacement" && p["node"] == "n4").expect("a's bundle went to n4");
    let b_first = placed.iter().position(|p| p["job"] == "b").expect("b was placed eventually");
    assert!(replacement < b_first, "the replacement was placed before the pending job");
    assert_eq!(placed[replacement]["job"], "a");
}

#[test]
fn every_scenario_file_runs_and_ends_as_expected() {
    let mut files: Vec<String> = std::fs::read_dir(scenarios_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut expected: Vec<&str> = EXPECTED.iter().map(|(n, _)| *n).collect();
    expected.sort();
    assert_eq!(files, expected, "every scenario file has an expectation and vice versa");
    for (name, check) in EXPECTED {
        check(&sim(name));
    }
}

#[test]
fn same_scenario_and_seed_give_byte_identical_traces_across_processes() {
    let path = scenarios_dir().join("lossy_network_still_converges.json");
    let run = |seed: &str, n: u32| {
        let file = std::env::temp_dir().join(format!("ftdrive-det-{}-{seed}-{n}.jsonl", std::process::id()));
        let status = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
            .arg("sim")
            .arg(&path)
            .args(["--seed", seed, "--trace"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(status.status.success());
        let bytes = std::fs::read(&file).unwrap();
        let _ = std::fs::remove_file(&file);
        bytes
    };
    let first = run("9", 1);
    assert!(first.len() > 10_000, "a substantial trace");
    assert_eq!(first, run("9", 2), "two processes, same bytes");
    assert_ne!(first, run("10", 3), "another seed, another run");
}

#[test]
fn a_bad_scenario_is_refused_with_the_field_named() {
    let file = std::env::temp_dir().join(format!("ftdrive-bad-{}.json", std::process::id()));
    std::fs::write(&file, r#"{"nodes": [{"name": "n1", "resources": {"cpu": 1}}], "events": [{"at_ms": 5, "type": "node_crash", "node": "n7"}]}"#).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ftdrive")).arg("sim").arg(&file).output().unwrap();
    let _ = std::fs::remove_file(&file);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("events[0].node") && stderr.contains("no node `n7`"), "{stderr}");
}

#[test]
fn swarm_reports_and_exits_zero_when_clean() {
    let out = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
        .args(["sim", "--swarm", "--seeds", "20", "--check-determinism"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("swarm: 20 seeds from 0, 0 failed"), "{stdout}");
}

#[test]
fn a_swarm_reports_as_json_and_its_flags_are_refused_without_it() {
    let sim = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_ftdrive")).arg("sim").args(args).output().unwrap();
    let out = sim(&["--swarm", "--seeds", "3", "--start-seed", "4", "--output", "json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!((summary["seeds"].as_u64(), summary["start_seed"].as_u64()), (Some(3), Some(4)));
    assert_eq!((summary["failed"].as_u64(), summary["failures"].as_array().map(Vec::len)), (Some(0), Some(0)));

    let scenario = format!("{}/../tests/scenarios/hot_spare_promoted.json", env!("CARGO_MANIFEST_DIR"));
    for flag in [vec!["--seeds", "5"], vec!["--check-determinism"]] {
        let out = sim(&[&[scenario.as_str()], flag.as_slice()].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag:?}: {stderr}");
        assert!(stderr.contains(&format!("{} is for --swarm", flag[0])), "{stderr}");
    }
    assert_eq!(sim(&["--swarm", "--seeds", "0"]).status.code(), Some(2), "a swarm of no seed checks nothing");
    let seed = sim(&["--swarm", "--seed", "5"]);
    assert_eq!(seed.status.code(), Some(2), "--seed was ignored");
    assert!(String::from_utf8_lossy(&seed.stderr).contains("--seed is for a scenario file"));
}

/// `--print-scenario`'s standard output is the scenario file itself, as the README says to use
/// it (`> case.json`, then `ftdrive sim case.json`); its summary goes to standard error.
#[test]
fn a_printed_swarm_case_saved_as_a_file_runs() {
    let sim = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_ftdrive")).arg("sim").args(args).output().unwrap();
    let printed = sim(&["--swarm", "--seeds", "1", "--start-seed", "5", "--print-scenario"]);
    assert!(printed.status.success(), "{}", String::from_utf8_lossy(&printed.stderr));
    assert!(String::from_utf8_lossy(&printed.stderr).contains("swarm: 1 seeds from 5, 0 failed"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("case.json");
    std::fs::write(&file, &printed.stdout).unwrap();
    let replayed = sim(&[file.to_str().unwrap()]);
    assert!(replayed.status.success(), "{}", String::from_utf8_lossy(&replayed.stderr));
    // Several seeds would print several objects, which no scenario file is: refused.
    let several = sim(&["--swarm", "--seeds", "2", "--print-scenario"]);
    assert_eq!(several.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&several.stderr)
        .contains("--print-scenario prints one seed's scenario file: give --seeds 1"));
    assert!(several.stdout.is_empty());
}

/// A file the command reads whole is bounded: `ftdrive sim /dev/zero` and `ftdrive submit
/// /dev/zero` took gigabytes before. A byte-order mark before the JSON is no error.
#[test]
fn files_read_whole_are_bounded_and_a_byte_order_mark_is_allowed() {
    let run = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_ftdrive")).args(args).output().unwrap();
    let sim = run(&["sim", "/dev/zero"]);
    assert_eq!(sim.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&sim.stderr).contains("scenario /dev/zero is over 268435456 bytes"));
    let submit = run(&["submit", "--head", "http://127.0.0.1:1", "/dev/zero"]);
    assert_eq!(submit.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&submit.stderr).contains("job spec /dev/zero is over 1048576 bytes"));
    let dir = tempfile::tempdir().unwrap();
    let scenario = std::fs::read(format!("{}/../tests/scenarios/hot_spare_promoted.json", env!("CARGO_MANIFEST_DIR")));
    let marked = dir.path().join("marked.json");
    std::fs::write(&marked, [b"\xef\xbb\xbf".as_slice(), &scenario.unwrap()].concat()).unwrap();
    let out = run(&["sim", marked.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
