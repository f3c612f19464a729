//! Restarting ftdrive's own processes loses no work (DESIGN §10), tried as a user would, with
//! the README's recipe: real processes, `kill -9`, no `$FTDRIVE_TOKEN`.

mod common;

use common::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A job of `n` ranks that runs long enough for a restart in the middle.
fn steady_spec(c: &Cluster, name: &str, n: u32) -> std::path::PathBuf {
    c.spec(name, json!({"command": ["sh", "-c", "echo up; exec sleep 8"], "min_nodes": n, "max_nodes": n}))
}

fn steady_job(c: &Cluster, name: &str, n: u32) -> String {
    let id = c.submit_no_wait(&steady_spec(c, name, n));
    wait_until_steady(c, &id, n);
    id
}

fn wait_until_steady(c: &Cluster, id: &str, n: u32) {
    c.wait_for_job(id, "every rank runs", |j| running(j, n as usize));
    // Each rank is two processes with the job's environment: its supervisor and `sleep` —
    // once it has exec'd (before, the supervisor's fork carries the environment too).
    c.wait_until("every rank's processes run", |c| {
        let pids = c.processes(None);
        pids.len() == 2 * n as usize && pids.iter().filter(|pid| is_sleep(**pid)).count() == n as usize
    });
}

fn is_sleep(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == "sleep")
}

fn pids(c: &Cluster, node: Option<&str>) -> BTreeSet<u32> {
    c.processes(node).into_iter().collect()
}

/// Every ledger entry is a completed first attempt of cycle 1.
fn only_first_attempts_completed(job: &Value, ranks: usize) {
    let ledger = job["ledger"].as_array().unwrap();
    assert_eq!(ledger.len(), ranks, "{job:#}");
    for entry in ledger {
        assert_eq!(
            (entry["cause"].as_str(), entry["attempt"].as_u64(), entry["cycle"].as_u64()),
            (Some("completed"), Some(1), Some(1)),
            "{job:#}"
        );
    }
}

#[test]
fn a_head_killed_mid_job_and_restarted_readopts_the_running_job() {
    let mut c = Cluster::start(&["n1", "n2", "n3"]);
    // Submitted and followed as a user does: the follower rides out the restart.
    let spec = steady_spec(&c, "through-a-head-restart", 3);
    let follower = c.command().arg("submit").arg(&spec).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
    let mut follower = Ended(follower.unwrap());
    let id = "j1".to_string(); // the cluster's first job
    c.wait_until("the follower's job is accepted", |c| job_ids(c).contains(&id));
    wait_until_steady(&c, &id, 3);
    // And its log followed, once it has shown the first line.
    let log = c.dir.path().join("followed.log");
    let std_log = || Stdio::from(std::fs::File::options().create(true).append(true).open(&log).unwrap());
    let logs = c.command().args(["logs", &id, "--actor", "0", "--follow"]).stdout(std_log()).stderr(std_log()).spawn();
    let mut logs = Ended(logs.unwrap());
    c.wait_until("the log follower shows the first line", |_| std::fs::read_to_string(&log).unwrap().contains("up"));
    let before = pids(&c, None);
    c.kill_head();
    // Away for longer than `logs --follow` pauses between polls, so that it sees the head gone.
    std::thread::sleep(Duration::from_secs(1));
    c.start_head_again();
    c.wait_until("the agents reconnect", |c| {
        let out = c.try_ftdrive(&["nodes", "--output", "json"]);
        out.status.success()
            && serde_json::from_slice::<Value>(&out.stdout)
                .unwrap()
                .as_array()
                .unwrap()
                .iter()
                .all(|n| n["state"] == "ALIVE")
    });
    let job = c.job(&id);
    assert_eq!(job["cycles"], 1, "no new cycle: {job:#}");
    assert!(job["actors"].as_array().unwrap().iter().all(|a| a["attempt"] == 1 && a["state"] == "RUNNING"), "{job:#}");
    assert_eq!(pids(&c, None), before, "the same processes run");
    let done = c.wait_for_job(&id, "the job succeeds", |j| j["state"] == "SUCCEEDED");
    only_first_attempts_completed(&done, 3);
    let (code, stdout, stderr) = output_within(&mut follower, WAIT);
    assert_eq!(code, Some(0), "submit exits with the job's success\n{stdout}\n{stderr}");
    assert!(stdout.contains("job j1 (through-a-head-restart) SUCCEEDED"), "{stdout}");
    assert!(stderr.contains("lost the head") && stderr.contains("answered again"), "{stderr}");
    let (code, ..) = output_within(&mut logs, WAIT);
    let followed = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, Some(0), "logs --follow ends with the attempt: {followed}");
    assert!(followed.starts_with("up\n") && followed.contains("answered again"), "{followed}");
}

/// `status --follow --logs` across a head killed and started again: what the job wrote while
/// the head was away is printed once it is back, every line once and in order.
#[test]
fn a_follower_of_the_output_loses_and_repeats_no_line_across_a_head_restart() {
    let mut c = Cluster::start(&["n1"]);
    let ticks = r#"for i in $(seq 1 20); do echo "tick $i"; sleep 0.2; done"#;
    let id =
        c.submit_no_wait(&c.spec("ticks", json!({"command": ["sh", "-c", ticks], "min_nodes": 1, "max_nodes": 1})));
    c.wait_for_job(&id, "it runs", |j| running(j, 1));
    let out = c.dir.path().join("follower.out");
    let mut follower = c.command();
    follower
        .args(["status", &id, "--follow", "--logs"])
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::piped());
    let mut follower = Ended(follower.spawn().unwrap());
    c.wait_until("the follower shows a tick", |_| std::fs::read_to_string(&out).unwrap().contains("] tick 1\n"));
    c.kill_head();
    std::thread::sleep(Duration::from_secs(1)); // the job writes on meanwhile
    c.start_head_again();
    c.wait_for_job(&id, "the job succeeds", |j| j["state"] == "SUCCEEDED");
    let (code, _, stderr) = output_within(&mut follower, WAIT);
    let followed = std::fs::read_to_string(&out).unwrap();
    assert_eq!(code, Some(0), "{followed}\n{stderr}");
    let printed: Vec<&str> = followed.lines().filter(|l| l.starts_with(&format!("[{id}/0] "))).collect();
    let expected: Vec<String> = (1..=20).map(|i| format!("[{id}/0] tick {i}")).collect();
    assert_eq!(printed, expected, "{followed}\n{stderr}");
    assert!(stderr.contains("lost the head") && stderr.contains("answered again"), "{stderr}");
    let beyond = c.try_ftdrive(&["status", &id, "--follow", "--logs=1"]);
    assert_eq!(beyond.status.code(), Some(2), "a rank the job never had");
    assert!(String::from_utf8_lossy(&beyond.stderr).contains(&format!("--logs=1: {id} has ranks 0 to 0")));
}

#[test]
fn a_head_stopped_with_sigterm_ends_its_streams_and_its_followers_carry_on_with_the_next() {
    let mut c = Cluster::start(&["n1"]);
    let spec = steady_spec(&c, "through-a-graceful-restart", 1);
    let follower = c.command().arg("submit").arg(&spec).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
    let mut follower = Ended(follower.unwrap());
    let id = "j1".to_string();
    c.wait_until("the follower's job is accepted", |c| job_ids(c).contains(&id));
    wait_until_steady(&c, &id, 1);
    assert!(c.stop_head().success());
    c.start_head_again();
    let done = c.wait_for_job(&id, "the job succeeds", |j| j["state"] == "SUCCEEDED");
    only_first_attempts_completed(&done, 1);
    let (code, stdout, stderr) = output_within(&mut follower, WAIT);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    // Ended by the head, not broken off when its shutdown timeout ran out.
    assert!(stderr.contains("lost the head (it closed the event stream)"), "{stderr}");
}

/// A follower back while the restarted head waits for its agents reads "waiting for the agents
/// to report"; when that wait ends it is told why its job waits now, not left with a stale
/// reason.
#[test]
fn a_follower_is_told_why_its_job_waits_once_the_heads_recovery_ends() {
    let mut c = Cluster::start_with(&["n1", "n2"], &["--node-timeout-ms", "4000"]);
    let long = json!({"command": ["sleep", "600"], "min_nodes": 2, "max_nodes": 2});
    let holder = c.submit_no_wait(&c.spec("holder", long));
    c.wait_for_job(&holder, "both ranks run", |j| running(j, 2));
    let waiter = c.submit_no_wait(&c.spec("waiter", json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1})));
    // Its output in a file, so that the head is killed only once the follower has the job (a
    // head it never reached would end it with exit 4, as it should).
    let out = c.dir.path().join("follower.out");
    let mut follower = c.command();
    follower.args(["status", &waiter, "--follow"]).stdout(std::fs::File::create(&out).unwrap()).stderr(Stdio::piped());
    let mut follower = Ended(follower.spawn().unwrap());
    c.wait_until("the follower has the job", |_| std::fs::read_to_string(&out).is_ok_and(|t| !t.is_empty()));
    c.kill_head();
    c.kill_node("n2"); // never reports: the recovery window runs its whole 4 s
    c.start_head_again();
    let recovering =
        |c: &Cluster| http(&c.url, "GET", "/v1/health", Some(&c.token()), "").contains("\"recovering\":true");
    c.wait_until("the head is back", |c| c.try_ftdrive(&["status"]).status.success());
    c.wait_until("the recovery window closes", |c| !recovering(c));
    c.wait_for_job(&holder, "n2's rank is lost", |j| j["ledger"].as_array().is_some_and(|l| !l.is_empty()));
    c.ftdrive(&["stop", &waiter]);
    let (code, _, stderr) = output_within(&mut follower, WAIT);
    let stdout = std::fs::read_to_string(&out).unwrap();
    assert_eq!(code, Some(3), "{stdout}\n{stderr}");
    let reasons: Vec<&str> = stdout.lines().filter(|l| l.trim_start().starts_with("now  waiting")).collect();
    let stale = reasons.iter().position(|l| l.contains("waiting for the agents to report"));
    let stale = stale.unwrap_or_else(|| panic!("the follower came back inside the window:\n{stdout}"));
    assert!(reasons.len() > stale + 1, "a newer reason follows the recovery's:\n{stdout}");
    assert!(!reasons.last().unwrap().contains("agents to report"), "{stdout}");
}

/// A head that stops answering without closing its connections (SIGSTOP here; a machine that
/// is gone alike) sends no keep-alive line: the follower takes three silent intervals as a lost
/// head and rides it out as it does a restart, where it waited for ever before.
#[test]
fn a_follower_of_a_silent_head_takes_it_as_lost_and_follows_again_once_it_answers() {
    let c = Cluster::start_with(&["n1"], &["--events-keepalive-ms", "300"]);
    let id = c.submit_no_wait(&c.spec("quiet", json!({"command": ["sleep", "600"], "min_nodes": 1, "max_nodes": 1})));
    c.wait_for_job(&id, "it runs", |j| running(j, 1));
    let (out, err) = (c.dir.path().join("follower.out"), c.dir.path().join("follower.err"));
    let mut follower = c.command();
    follower.args(["status", &id, "--follow"]);
    follower.stdout(std::fs::File::create(&out).unwrap()).stderr(std::fs::File::create(&err).unwrap());
    let mut follower = Ended(follower.spawn().unwrap());
    c.wait_until("the follower has the job", |_| std::fs::read_to_string(&out).is_ok_and(|t| !t.is_empty()));
    let head = c.head.id() as i32;
    // SAFETY: signalling the head process this test started.
    unsafe { libc::kill(head, libc::SIGSTOP) };
    let noticed = std::panic::catch_unwind(|| {
        let said = |text: &str| std::fs::read_to_string(&err).is_ok_and(|t| t.contains(text));
        c.wait_until("the follower notices the silence", |_| said("sent nothing for 0.9 s"));
    });
    // SAFETY: as above.
    unsafe { libc::kill(head, libc::SIGCONT) };
    noticed.unwrap();
    let said = |text: &str| std::fs::read_to_string(&err).is_ok_and(|t| t.contains(text));
    c.wait_until("the follower follows again", |_| said("the head answered again"));
    c.ftdrive(&["stop", &id]);
    let (code, _, _) = output_within(&mut follower, WAIT);
    assert_eq!(code, Some(3), "the follower saw the job stopped: {}", std::fs::read_to_string(&err).unwrap());
}

/// AG-7: an agent started with `--fence-after-ms` stops its work once it has heard nothing
/// from the head for that long (a head hung here; a network cut alike), so that no rank runs
/// twice once the head has placed it elsewhere; the head, back, charges the attempt to the
/// lost node (system) and runs it again. An agent without a fence keeps its work through the
/// same silence, nothing charged (DESIGN §10).
#[test]
fn a_fenced_agent_stops_its_work_when_the_head_goes_silent_and_an_unfenced_one_keeps_it() {
    let mut c = Cluster::start(&[]);
    let said_by_fenced = c.dir.path().join("fenced.err");
    let fenced = c
        .node_command("fenced")
        .args(["--fence-after-ms", "600"])
        .stderr(std::fs::File::create(&said_by_fenced).unwrap())
        .spawn()
        .unwrap();
    c.nodes.insert("fenced".into(), fenced);
    c.add_node("kept");
    c.wait_until("both agents registered", |c| c.nodes_json().as_array().unwrap().len() == 2);
    let jobs: Vec<String> = (0..2).map(|_| c.submit_no_wait(&steady_spec(&c, "one-node", 1))).collect();
    for id in &jobs {
        c.wait_for_job(id, "it runs", |j| running(j, 1));
    }
    for node in ["fenced", "kept"] {
        c.wait_until("its rank's processes run", |c| {
            c.processes(Some(node)).into_iter().filter(|p| is_sleep(*p)).count() == 1
        });
    }
    let node_of = |id: &str| actor_on_rank(&c.job(id), 0).1;
    let on_fenced = jobs.iter().find(|id| node_of(id) == "fenced").expect("a job on each node").clone();
    let on_kept = jobs.iter().find(|id| node_of(id) == "kept").expect("a job on each node").clone();
    let kept_pids = pids(&c, Some("kept"));
    assert!(!kept_pids.is_empty() && !pids(&c, Some("fenced")).is_empty());
    let head = c.head.id() as i32;
    // SAFETY: signalling the head process this test started.
    unsafe { libc::kill(head, libc::SIGSTOP) };
    let fenced_off = std::panic::catch_unwind(|| {
        c.wait_until("the fenced agent's work is stopped", |c| pids(c, Some("fenced")).is_empty());
        std::thread::sleep(Duration::from_millis(1_000));
    });
    // SAFETY: as above.
    unsafe { libc::kill(head, libc::SIGCONT) };
    fenced_off.unwrap();
    assert_eq!(pids(&c, Some("kept")), kept_pids, "the agent without a fence kept its work");
    let job = c.wait_for_job(&on_fenced, "the fenced attempt is in the ledger", |j| {
        !j["ledger"].as_array().unwrap().is_empty()
    });
    let entry = &job["ledger"][0];
    assert_eq!((entry["cause"].as_str(), entry["budget"].as_str()), (Some("node_lost"), Some("system")), "{job:#}");
    let evidence = entry["evidence"].as_str().unwrap();
    assert!(evidence.contains("heard nothing from the head for its --fence-after-ms"), "{evidence}");
    c.wait_for_job(&on_fenced, "it runs again", |j| j["actors"][0]["attempt"] == 2 && running(j, 1));
    let said = std::fs::read_to_string(&said_by_fenced).unwrap();
    assert!(said.contains("heard nothing from the head for") && said.contains("--fence-after-ms"), "{said}");
    let kept = c.job(&on_kept);
    assert_eq!((kept["ledger"].as_array().map(Vec::len), &kept["actors"][0]["attempt"]), (Some(0), &json!(1)));
    assert_eq!(pids(&c, Some("kept")), kept_pids, "{kept:#}");
    for id in &jobs {
        c.ftdrive(&["stop", id]);
    }
}

/// AG-8: the fence stops two ranks on one node, their processes ignore SIGTERM, and the agent
/// is killed and started again before their supervisors' SIGKILL ends them. The new agent run
/// reports both ends with the fence their supervisors recorded: one fault, charged once (FC-1).
/// As bare stops of an earlier run, each was charged on its own.
#[test]
fn a_fence_that_ends_work_across_an_agent_restart_is_charged_once() {
    let mut c = Cluster::start(&[]);
    let said = c.dir.path().join("fenced.err");
    let fenced = |c: &Cluster, log: &std::path::Path, fence_ms: &str| {
        let log = std::fs::File::create(log).unwrap();
        c.node_command("fenced").args(["--fence-after-ms", fence_ms]).stderr(log).spawn().unwrap()
    };
    let agent = fenced(&c, &said, "600");
    c.nodes.insert("fenced".into(), agent);
    c.wait_until("the agent registered", |c| c.nodes_json().as_array().unwrap().len() == 1);
    let spec = c.spec(
        "stubborn",
        json!({"command": ["sh", "-c", "trap '' TERM; echo up; while :; do sleep 1; done"], "min_nodes": 2,
               "max_nodes": 2, "bundle": {"cpu": 0.5}, "strategy": "STRICT_PACK", "restart": "actor",
               "stop_grace_ms": 3_000}),
    );
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "both ranks run", |j| running(j, 2));
    let head = c.head.id() as i32;
    // SAFETY: signalling the head process this test started.
    unsafe { libc::kill(head, libc::SIGSTOP) };
    let fenced_then_restarted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        c.wait_until("the fence closed", |_| {
            std::fs::read_to_string(&said).is_ok_and(|s| s.contains("heard nothing from the head"))
        });
        c.kill_node("fenced");
        // Its own fence far off: the ends are the first run's fence's alone.
        let again = fenced(&c, &c.dir.path().join("fenced-again.err"), "60000");
        c.nodes.insert("fenced".into(), again);
        c.wait_until("the supervisors' SIGKILL ended the ranks", |c| pids(c, Some("fenced")).is_empty());
    }));
    // SAFETY: as above.
    unsafe { libc::kill(head, libc::SIGCONT) };
    fenced_then_restarted.unwrap();
    let job = c.wait_for_job(&id, "both ends are in the ledger", |j| j["ledger"].as_array().unwrap().len() >= 2);
    let ledger = job["ledger"].as_array().unwrap();
    let charged: Vec<&str> = ledger[..2].iter().map(|e| e["budget"].as_str().unwrap()).collect();
    assert!(ledger[..2].iter().all(|e| e["cause"] == "node_lost"), "{job:#}");
    assert_eq!(charged.iter().filter(|b| **b == "system").count(), 1, "one fault, one charge: {job:#}");
    let free = ledger[..2].iter().find(|e| e["budget"] == "none").unwrap()["evidence"].as_str().unwrap();
    assert!(free.contains("heard nothing from the head") && free.contains("charged once"), "{free}");
    c.ftdrive(&["stop", &id]);
}

/// The child's exit code and output, once it ends (within `limit`).
fn output_within(child: &mut Ended, limit: Duration) -> (Option<i32>, String, String) {
    let start = Instant::now();
    while child.0.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < limit, "the follower did not end within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let read = |pipe: Option<&mut dyn Read>| {
        let mut text = String::new();
        pipe.map(|p| p.read_to_string(&mut text));
        text
    };
    let stdout = read(child.0.stdout.as_mut().map(|p| p as &mut dyn Read));
    let stderr = read(child.0.stderr.as_mut().map(|p| p as &mut dyn Read));
    (child.0.wait().unwrap().code(), stdout, stderr)
}

#[test]
fn an_agent_killed_and_started_again_keeps_its_processes_and_charges_nothing() {
    let mut c = Cluster::start(&["n1", "n2"]);
    let id = steady_job(&c, "through-an-agent-restart", 2);
    let on_n1 = pids(&c, Some("n1"));
    assert!(!on_n1.is_empty());
    n1_restarted_keeps_its_ranks(&mut c, &id, 2, |c| c.node_command("n1").spawn().unwrap());
}

/// n1's agent killed and started again (by `start`): it re-attaches, the same processes run,
/// and the job of `ranks` ranks succeeds with nothing charged.
fn n1_restarted_keeps_its_ranks(c: &mut Cluster, id: &str, ranks: usize, start: impl Fn(&Cluster) -> Child) {
    let on_n1 = pids(c, Some("n1"));
    c.kill_node("n1");
    c.nodes.insert("n1".into(), start(c));
    c.wait_until("the new agent re-attached", |c| {
        c.nodes_json().as_array().unwrap().iter().any(|n| n["name"] == "n1" && n["state"] == "ALIVE")
    });
    assert_eq!(pids(c, Some("n1")), on_n1, "the same processes run under the new agent");
    let done = c.wait_for_job(id, "the job succeeds", |j| j["state"] == "SUCCEEDED");
    only_first_attempts_completed(&done, ranks);
    assert_eq!(done["remaining"]["system"], 3, "nothing charged");
}

/// An agent that runs its jobs as another user (`--run-jobs-as`, JU-1) takes them back as any
/// agent does: killed and started again with the same flag, it re-attaches to its supervisors,
/// the same processes run on as that user, and nothing is charged. Only root may switch users
/// (elsewhere the flag is refused: `security.rs`).
#[test]
fn an_agent_running_jobs_as_another_user_keeps_them_across_its_restart() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let mut c = Cluster::start(&[]);
    let agent = |c: &Cluster| {
        let mut agent = c.node_command_in("n1", std::path::Path::new("/"));
        agent.args(["--run-jobs-as", "nobody"]).spawn().unwrap()
    };
    c.nodes.insert("n1".into(), agent(&c));
    let id = steady_job(&c, "as-nobody", 1);
    let on_n1 = pids(&c, Some("n1"));
    let sleeping = on_n1.iter().find(|pid| is_sleep(**pid)).expect("the rank's sleep");
    let status = std::fs::read_to_string(format!("/proc/{sleeping}/status")).unwrap();
    assert!(status.lines().any(|l| l.starts_with("Uid:\t65534\t")), "the rank runs as nobody: {status}");
    n1_restarted_keeps_its_ranks(&mut c, &id, 1, agent);
}

/// AI-1: an agent started under a node's name with another state dir cannot find the attempts
/// its predecessor left running under their supervisors. Let in at once, it reported none, the
/// head started them again, and for the rest of the re-attach grace a rank ran twice. It is
/// let in once the node is DEAD, when those attempts are gone: no moment has two attempts of
/// one actor alive.
#[test]
fn an_agent_started_with_another_state_dir_never_lets_a_rank_run_twice() {
    let (mut c, id) = two_ranks_running();
    c.kill_node("n2");
    a_stranger_under_n2_never_runs_a_rank_twice(&mut c, &id);
}

/// AI-1 across a head restart: the head that comes back knows which agent last held the name
/// (a digest of its identity is in the state database), so an agent with another state dir
/// started while it was away is let in only once the node is DEAD. Without it the restarted
/// head let the stranger in at once, took its report of nothing running as the attempts'
/// end, and started them again beside the ones still under their supervisors.
#[test]
fn an_agent_with_another_state_dir_waits_for_dead_across_a_head_restart() {
    let (mut c, id) = two_ranks_running();
    c.kill_head();
    c.kill_node("n2");
    c.start_head_again();
    a_stranger_under_n2_never_runs_a_rank_twice(&mut c, &id);
}

fn two_ranks_running() -> (Cluster, String) {
    let c = Cluster::start(&["n1", "n2"]);
    let id = c.submit_no_wait(&c.spec("twice", json!({"command": ["sleep", "600"], "min_nodes": 2, "max_nodes": 2})));
    wait_until_steady(&c, &id, 2);
    (c, id)
}

/// An agent with another state dir takes n2's name: no two attempts of one actor are ever
/// alive, and the job runs again once n2's first attempt is lost with its node.
fn a_stranger_under_n2_never_runs_a_rank_twice(c: &mut Cluster, id: &str) {
    let elsewhere = tempfile::tempdir().unwrap();
    let mut agent = c.node_command("n2");
    agent.arg("--state-dir").arg(elsewhere.path()).env("FTDRIVE_AGENT_TOKEN", c.agent_token());
    c.nodes.insert("n2".into(), agent.spawn().unwrap());
    never_twice_for(c, Duration::from_secs(6));
    let job = c.wait_for_job(id, "both ranks run again", |j| running(j, 2));
    let lost = job["ledger"].as_array().unwrap().iter().any(|e| e["cause"] == "node_lost");
    assert!(lost, "n2's first attempt was lost with its node: {job:#}");
    c.ftdrive(&["stop", id]);
}

/// An agent killed and not restarted: its supervisors end its attempts before the head can
/// declare the node DEAD and start them elsewhere. Their grace was the whole node timeout,
/// counted from the agent's end, while the head counts from its last heartbeat, up to an
/// interval earlier: a rank ran beside its replacement for up to that interval.
#[test]
fn a_killed_agents_attempts_end_before_their_replacements_start() {
    let timing = ["--heartbeat-interval-ms", "1000", "--node-timeout-ms", "2500"];
    let mut c = Cluster::start_with(&["n1", "n2", "n3"], &timing);
    // No backoff: the replacement starts as soon as the node is DEAD and the cycle re-formed.
    let retries = json!({"backoff_ms": {"initial": 0, "max": 0}});
    let spec = json!({"command": ["sleep", "600"], "min_nodes": 2, "max_nodes": 2, "retries": retries});
    let id = c.submit_no_wait(&c.spec("once", spec));
    wait_until_steady(&c, &id, 2);
    let on = |j: &Value, node: &str| j["actors"].as_array().unwrap().iter().any(|a| a["node"] == node);
    let victim = ["n1", "n2"].into_iter().find(|n| on(&c.job(&id), n)).unwrap();
    c.kill_node(victim);
    never_twice_for(&c, Duration::from_secs(5));
    c.wait_for_job(&id, "both ranks run again", |j| running(j, 2) && j["cycles"] == 2);
    c.ftdrive(&["stop", &id]);
}

/// A rank that ends while the head is away enters the ledger with the time it ended, not the
/// time the restarted head heard of it (its supervisor records the end's time).
#[test]
fn an_end_reported_late_is_recorded_when_it_happened() {
    let mut c = Cluster::start(&["n1"]);
    let spec = json!({"command": ["sleep", "600"], "min_nodes": 1, "max_nodes": 1});
    let id = c.submit_no_wait(&c.spec("late", spec));
    wait_until_steady(&c, &id, 1);
    c.kill_head();
    let sleep = c.processes(None).into_iter().find(|pid| is_sleep(*pid));
    let ended_ms = unix_ms();
    // SAFETY: signalling a process of this test's job.
    unsafe { libc::kill(sleep.expect("the rank's process") as i32, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(1_500));
    let back_ms = unix_ms();
    c.start_head_again();
    let job = c.wait_for_job(&id, "the end is in the ledger", |j| !j["ledger"].as_array().unwrap().is_empty());
    let end_ms = job["ledger"][0]["end_ms"].as_u64().unwrap();
    assert!(end_ms >= ended_ms && end_ms < back_ms, "ended at {ended_ms}, recorded {end_ms}, head back {back_ms}");
    c.ftdrive(&["stop", &id]);
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// An agent that stays away past the re-attach grace, and comes back while a restarted head
/// still waits for its agents: its supervisors ended the ranks, and the ledger says that (it
/// said "the agent shut down", which it did not).
#[test]
fn ranks_ended_for_want_of_an_agent_say_so() {
    let timing = ["--heartbeat-interval-ms", "1000", "--node-timeout-ms", "3000"];
    let mut c = Cluster::start_with(&["n1"], &timing);
    let spec = json!({"command": ["sleep", "600"], "min_nodes": 1, "max_nodes": 1});
    let id = c.submit_no_wait(&c.spec("orphan", spec));
    wait_until_steady(&c, &id, 1);
    c.kill_head();
    c.kill_node("n1");
    c.start_head_again();
    // Past the grace (3000 - 1000 ms), inside the restarted head's window (3000 ms).
    std::thread::sleep(Duration::from_millis(2_300));
    c.add_node("n1");
    let job = c.wait_for_job(&id, "the lost rank is in the ledger", |j| !j["ledger"].as_array().unwrap().is_empty());
    let first = &job["ledger"][0];
    assert_eq!((first["cause"].as_str(), first["budget"].as_str()), (Some("node_lost"), Some("system")), "{job:#}");
    let evidence = first["evidence"].as_str().unwrap();
    assert!(evidence.contains("went away and none came back within the re-attach grace"), "{evidence}");
    assert!(evidence.ends_with("supervisor ended it with signal 9"), "its supervisor, not someone else: {evidence}");
    c.ftdrive(&["stop", &id]);
}

/// Watches the test's processes for `span`: no two attempts of one actor are alive at once.
fn never_twice_for(c: &Cluster, span: Duration) {
    let start = Instant::now();
    while start.elapsed() < span {
        let attempts = live_attempts(c);
        let actors: BTreeSet<&String> = attempts.iter().map(|(actor, _)| actor).collect();
        assert_eq!(actors.len(), attempts.len(), "two attempts of one actor alive at once: {attempts:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// (actor, attempt) of every live command process of this test's jobs (supervisors left out:
/// they carry the same environment but are not the program).
fn live_attempts(c: &Cluster) -> BTreeSet<(String, String)> {
    let mut attempts = BTreeSet::new();
    for pid in c.processes(None) {
        let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else { continue };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        if comm.trim() != "sleep" {
            continue;
        }
        let vars: Vec<String> = env.split(|b| *b == 0).map(|v| String::from_utf8_lossy(v).into_owned()).collect();
        let var = |name: &str| vars.iter().find_map(|v| v.strip_prefix(&format!("{name}="))).map(str::to_string);
        if let (Some(actor), Some(attempt)) = (var("FTDRIVE_ACTOR"), var("FTDRIVE_ATTEMPT")) {
            attempts.insert((actor, attempt));
        }
    }
    attempts
}

/// An agent restarted on a disk that takes no write (here every file the probes write is a
/// directory) re-attaches to what runs and starts unhealthy, instead of refusing to start and
/// leaving its attempts to die: the job's first attempts complete, nothing is charged, and the
/// node takes work again once the disk does.
#[test]
fn an_agent_restarted_on_a_full_disk_keeps_its_processes_and_takes_no_new_work() {
    let mut c = Cluster::start(&["n1", "n2"]);
    let id = steady_job(&c, "through-a-full-disk", 2);
    let on_n1 = pids(&c, Some("n1"));
    c.kill_node("n1");
    let state = c.dir.path().join("node-n1");
    let probes = [state.join(".write-check"), state.join("attempts/.write-check"), state.join("logs/.write-check")];
    for probe in &probes {
        std::fs::create_dir_all(probe).unwrap();
    }
    c.add_node("n1");
    let n1 = |c: &Cluster| c.nodes_json().as_array().unwrap().iter().find(|n| n["name"] == "n1").cloned().unwrap();
    c.wait_until("n1 is back, unhealthy", |c| n1(c)["state"] == "ALIVE" && n1(c)["problem"].is_string());
    let said = n1(&c)["problem"].as_str().unwrap().to_string();
    assert!(said.contains("takes no write"), "{said}");
    assert_eq!(pids(&c, Some("n1")), on_n1, "the same processes run under the new agent");
    let done = c.wait_for_job(&id, "the job succeeds", |j| j["state"] == "SUCCEEDED");
    only_first_attempts_completed(&done, 2);
    for probe in &probes {
        let _ = std::fs::remove_dir(probe); // the log sweep may have taken the empty one in logs/
    }
    c.wait_until("n1 can start work again", |c| n1(c)["state"] == "ALIVE" && n1(c).get("problem").is_none());
}

/// As on a full disk, on one the kernel turned read-only (ext4's `errors=remount-ro` after an
/// I/O error; here a read-only bind mount over the node's state dir, which the running
/// supervisors, holding their files open beneath it, do not see): the restarted agent starts,
/// unhealthy, and re-attaches. It used to exit 2 at its first chmod, and the job's processes
/// died after the grace.
#[test]
fn an_agent_restarted_on_a_read_only_disk_keeps_its_processes() {
    let mut c = Cluster::start(&["n1", "n2"]);
    let id = steady_job(&c, "through-a-read-only-disk", 2);
    let on_n1 = pids(&c, Some("n1"));
    c.kill_node("n1");
    let Some(_read_only) = ReadOnly::over(&c.dir.path().join("node-n1")) else {
        c.ftdrive(&["stop", &id]);
        return eprintln!("read-only disk test SKIPPED: cannot bind-mount here (it needs root)");
    };
    c.add_node("n1");
    let n1 = |c: &Cluster| c.nodes_json().as_array().unwrap().iter().find(|n| n["name"] == "n1").cloned().unwrap();
    c.wait_until("n1 is back, unhealthy", |c| n1(c)["state"] == "ALIVE" && n1(c)["problem"].is_string());
    let said = n1(&c)["problem"].as_str().unwrap().to_string();
    assert!(said.contains("Read-only file system"), "{said}");
    assert_eq!(pids(&c, Some("n1")), on_n1, "the same processes run under the new agent");
    let done = c.wait_for_job(&id, "the job succeeds", |j| j["state"] == "SUCCEEDED");
    only_first_attempts_completed(&done, 2);
}

/// A read-only bind mount of a directory over itself, undone when dropped.
struct ReadOnly(std::path::PathBuf);

impl ReadOnly {
    fn over(dir: &std::path::Path) -> Option<ReadOnly> {
        let mount =
            |args: &[&str]| Command::new("mount").args(args).arg(dir).arg(dir).status().is_ok_and(|s| s.success());
        if !mount(&["--bind"]) {
            return None;
        }
        let read_only = ReadOnly(dir.to_path_buf());
        mount(&["-o", "remount,bind,ro"]).then_some(read_only)
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A head restarted with a longer node timeout lengthens the re-attach grace of supervisors
/// already running: an agent away for longer than the old timeout, though within the new one,
/// still finds its processes.
#[test]
fn running_supervisors_take_the_grace_of_a_head_restarted_with_a_longer_node_timeout() {
    let mut c = Cluster::start(&["n1"]); // a node timeout of 1 s
    let (id, _) = start_a_long_job(&c, "longer-grace");
    let on_n1 = pids(&c, Some("n1"));
    c.kill_head();
    c.start_head_again_with(&["--node-timeout-ms", "8000"]);
    let alive =
        |c: &Cluster| c.nodes_json().as_array().unwrap().iter().any(|n| n["name"] == "n1" && n["state"] == "ALIVE");
    c.wait_until("n1 reported to the new head", |c| c.try_ftdrive(&["nodes"]).status.success() && alive(c));
    // Its welcome, and a few pings carrying the new grace to the supervisor.
    std::thread::sleep(Duration::from_millis(1_000));
    c.kill_node("n1");
    std::thread::sleep(Duration::from_millis(3_000));
    assert_eq!(pids(&c, Some("n1")), on_n1, "3 s without an agent, past the old 1 s grace: the processes run");
    c.add_node("n1");
    c.wait_until("the new agent re-attached", |c| alive(c) && c.job(&id)["actors"][0]["state"] == "RUNNING");
    assert_eq!(pids(&c, Some("n1")), on_n1, "the same processes run under the new agent");
    assert!(c.job(&id)["ledger"].as_array().unwrap().is_empty(), "nothing ended, nothing charged");
    c.ftdrive(&["stop", &id]);
}

/// SIGTERM for an agent while the head is away: it stops its processes itself and waits for the
/// head. A head back before the drain deadline hears the notice before the ends (AG-5), and
/// charges them to the departure: `preempted`.
#[test]
fn an_agent_stopped_while_the_head_is_away_tells_the_returning_head_it_was_preempted() {
    let mut c = Cluster::start(&["n1", "n2"]);
    let (id, node) = start_a_long_job(&c, "drained-unseen");
    c.kill_head();
    let mut agent = c.nodes.remove(&node).unwrap();
    // SAFETY: signalling a child process we started.
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    c.wait_until("the agent stopped its processes", |c| c.processes(None).is_empty());
    assert!(agent.try_wait().unwrap().is_none(), "it waits for the head until its deadline");
    c.start_head_again();
    assert!(agent.wait().unwrap().success(), "it exits once the head has its report");
    let done = c.wait_for_job(&id, "the job ends", |j| j["state"] == "SUCCEEDED" || j["state"] == "FAILED");
    let first = &done["ledger"][0];
    let charged = (first["cause"].as_str(), first["budget"].as_str());
    assert_eq!(charged, (Some("preempted"), Some("preemption")), "{done:#}");
    assert_eq!(done["state"], "SUCCEEDED", "{done:#}");
}

/// The same, but the head is not back by the deadline: the agent exits, and the end it owed is
/// reported by its next start — the agent's own doing, charged to the system budget as a lost
/// node, never to the user (whose budget of 0 would fail the job).
#[test]
fn an_agent_stopped_while_the_head_stays_away_never_charges_the_user_for_its_own_stop() {
    let mut c = Cluster::start(&["n1", "n2"]);
    let (id, node) = start_a_long_job(&c, "drained-unseen");
    // An agent with a short drain deadline takes over the node (it re-attaches to the attempt).
    let log_url = |c: &Cluster| {
        let nodes = c.nodes_json();
        nodes.as_array().unwrap().iter().find(|n| n["name"] == node.as_str()).unwrap()["metrics_url"].clone()
    };
    let old_agent = log_url(&c);
    c.kill_node(&node);
    let quick = c.node_command(&node).args(["--drain-deadline-ms", "1500"]).spawn().unwrap();
    c.nodes.insert(node.clone(), quick);
    c.wait_until("the new agent registered", |c| log_url(c) != old_agent);
    wait_until_steady(&c, &id, 1);
    c.kill_head();
    let mut agent = c.nodes.remove(&node).unwrap();
    // SAFETY: signalling a child process we started.
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    let start = Instant::now();
    while agent.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < WAIT, "the agent did not shut down");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(c.processes(None).is_empty(), "the agent stopped its processes before it exited");
    c.start_head_again();
    c.add_node(&node);
    let done = c.wait_for_job(&id, "the job ends", |j| j["state"] == "SUCCEEDED" || j["state"] == "FAILED");
    let first = &done["ledger"][0];
    assert_eq!((first["cause"].as_str(), first["budget"].as_str()), (Some("node_lost"), Some("system")), "{done:#}");
    assert!(first["evidence"].as_str().unwrap().contains("the agent shut down"), "{done:#}");
    assert_eq!(done["state"], "SUCCEEDED", "{done:#}");
    assert_eq!(done["remaining"]["user"], 0, "the user budget is untouched: {done:#}");
}

/// A one-node job with no user retries whose first cycle runs a minute (later ones a second),
/// steady on its node; returns its id and node.
fn start_a_long_job(c: &Cluster, name: &str) -> (String, String) {
    let long_then_short = r#"if [ "$FTDRIVE_CYCLE" = 1 ]; then exec sleep 60; else exec sleep 1; fi"#;
    let spec = c.spec(name, json!({"command": ["sh", "-c", long_then_short], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    wait_until_steady(c, &id, 1);
    let (_, node) = actor_on_rank(&c.job(&id), 0);
    (id, node)
}

/// A raw request that reports a failure instead of panicking.
fn try_http(url: &str, token: &str, body: &str) -> Option<(u16, String)> {
    let host = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(host).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let request = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    Some((status, response.split("\r\n\r\n").nth(1).unwrap_or_default().to_string()))
}

/// A client that keeps its connection open between submissions, as an HTTP library's pool
/// does, and opens a new one only after the head closed it.
struct KeptAlive(std::io::BufReader<std::net::TcpStream>);

impl KeptAlive {
    fn post(kept: &mut Option<KeptAlive>, url: &str, token: &str, body: &str) -> Option<(u16, String)> {
        let host = url.trim_start_matches("http://");
        if kept.is_none() {
            let stream = std::net::TcpStream::connect(host).ok()?;
            stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
            *kept = Some(KeptAlive(std::io::BufReader::new(stream)));
        }
        let answer = kept.as_mut()?.exchange(host, token, body);
        if answer.as_ref().is_none_or(|(_, _, close)| *close) {
            *kept = None;
        }
        answer.map(|(status, body, _)| (status, body))
    }

    /// One request and its answer: the status, the body, and whether the head closes.
    fn exchange(&mut self, host: &str, token: &str, body: &str) -> Option<(u16, String, bool)> {
        use std::io::BufRead;
        let request = format!(
            "POST /v1/jobs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.0.get_mut().write_all(request.as_bytes()).ok()?;
        let (mut status, mut length, mut close, mut line) = (None, 0, false, String::new());
        loop {
            line.clear();
            if self.0.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let header = line.trim_end().to_ascii_lowercase();
            if header.is_empty() {
                break;
            }
            if status.is_none() {
                status = header.split(' ').nth(1)?.parse().ok();
            } else if let Some(n) = header.strip_prefix("content-length:") {
                length = n.trim().parse().ok()?;
            } else if header == "connection: close" {
                close = true;
            }
        }
        let mut answer = vec![0; length];
        self.0.read_exact(&mut answer).ok()?;
        Some((status?, String::from_utf8(answer).ok()?, close))
    }
}

fn submission(name: &str) -> String {
    json!({"spec": {"name": name, "command": ["true"], "min_nodes": 1, "max_nodes": 1}}).to_string()
}

fn job_ids(c: &Cluster) -> Vec<String> {
    let jobs: Value = serde_json::from_str(&c.ftdrive(&["status", "--output", "json"])).unwrap();
    jobs.as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect()
}

#[test]
fn every_acknowledged_submission_survives_a_head_killed_under_load() {
    acknowledged_submissions_survive(|c| c.kill_head());
}

/// A stopping head answers what it took in, takes nothing more, and exits without waiting out
/// its connections; nothing it answered is lost.
#[test]
fn every_acknowledged_submission_survives_a_head_stopped_with_sigterm_under_load() {
    acknowledged_submissions_survive(|c| assert!(c.stop_head().success()));
}

/// Four clients submit as fast as they can while `stop` ends the head, which then starts
/// again: each answer was a 200 or none at all, and every job answered exists, once. Two
/// open a connection for each submission; two keep one open for as long as the head does.
fn acknowledged_submissions_survive(stop: fn(&mut Cluster)) {
    let mut c = Cluster::start(&[]);
    let (url, token) = (c.url.clone(), c.token());
    let clients: Vec<_> = (0..4)
        .map(|client| {
            let (url, token) = (url.clone(), token.clone());
            std::thread::spawn(move || {
                let mut acknowledged = Vec::new();
                let mut kept: Option<KeptAlive> = None;
                for n in 0..10_000 {
                    let body = submission(&format!("load-{client}-{n}"));
                    let answer = match client % 2 {
                        0 => try_http(&url, &token, &body),
                        _ => KeptAlive::post(&mut kept, &url, &token, &body),
                    };
                    match answer {
                        Some((200, body)) => acknowledged
                            .push(serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_string()),
                        Some((status, body)) => panic!("a submission was answered {status}: {body}"),
                        None => break,
                    }
                }
                acknowledged
            })
        })
        .collect();
    c.wait_until("submissions are under way", |c| job_ids(c).len() >= 20);
    stop(&mut c);
    c.start_head_again();
    let per_client: Vec<Vec<String>> = clients.into_iter().map(|t| t.join().unwrap()).collect();
    let counts: Vec<usize> = per_client.iter().map(Vec::len).collect();
    assert!(counts.iter().all(|n| *n > 0), "every client had submissions answered: {counts:?}");
    let acknowledged: Vec<String> = per_client.into_iter().flatten().collect();
    c.wait_until("the head is back", |c| c.try_ftdrive(&["status", "--output", "json"]).status.success());
    let stored = job_ids(&c);
    let distinct: BTreeSet<&String> = stored.iter().collect();
    assert_eq!(distinct.len(), stored.len(), "no id given twice");
    for id in &acknowledged {
        assert!(distinct.contains(id), "acknowledged job {id} is lost");
    }
    let later =
        c.submit_no_wait(&c.spec("after-the-restart", json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1})));
    assert!(!distinct.contains(&later), "{later} was handed out before the restart");
}

#[test]
fn a_crash_between_the_durable_write_and_the_answer_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut head = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
        .args(["head", "--listen", "127.0.0.1:0"])
        .arg("--state-dir")
        .arg(dir.path())
        .env_remove("FTDRIVE_TOKEN")
        .env("FTDRIVE_LOG", "error")
        .env("FTDRIVE_CRASH_AFTER_COMMITS", "2")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = wait_for_url(dir.path());
    let token = std::fs::read_to_string(dir.path().join("token")).unwrap();
    let first = try_http(&url, &token, &submission("first"));
    assert_eq!(first.map(|(s, _)| s), Some(200));
    // The head dies after writing and before answering: the CLI must not say "is the head
    // running?" (a script would submit again), but that the job may exist.
    let spec = dir.path().join("second.json");
    let body: Value = serde_json::from_str(&submission("second")).unwrap();
    std::fs::write(&spec, body["spec"].to_string()).unwrap();
    let second = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
        .args(["submit", "--no-wait", "--head", &url])
        .arg(&spec)
        .env_remove("FTDRIVE_TOKEN")
        .env("FTDRIVE_STATE_DIR", dir.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(4), "{said}");
    assert!(said.contains("took the request, and then the connection broke"), "{said}");
    assert!(said.contains("it may have done it; look (`ftdrive status`) before sending it again"), "{said}");
    assert!(!head.wait().unwrap().success());
    let listen = url.trim_start_matches("http://").to_string();
    let mut again = spawn_head(dir.path(), &listen, &[]);
    let again_url = wait_for_url(dir.path());
    let status = |job: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
            .args(["status", job, "--output", "json", "--head", &again_url])
            .env_remove("FTDRIVE_TOKEN")
            .env("FTDRIVE_STATE_DIR", dir.path())
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout).ok()
    };
    assert_eq!(status("j2").map(|j| j["name"].clone()), Some(json!("second")), "durable, so it exists");
    let third = try_http(&again_url, &token, &submission("third")).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&third.1).unwrap()["id"], "j3", "j2 is not handed out again");
    let _ = again.kill();
    let _ = again.wait();
}

#[test]
fn a_damaged_state_database_stops_the_head_naming_the_file_and_changing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("state.db");
    std::fs::write(&database, b"this is not a database, it was damaged").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
        .args(["head", "--listen", "127.0.0.1:0"])
        .arg("--state-dir")
        .arg(dir.path())
        .env_remove("FTDRIVE_TOKEN")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&database.display().to_string()) && stderr.contains("move it aside"), "{stderr}");
    assert_eq!(std::fs::read(&database).unwrap(), b"this is not a database, it was damaged");
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(files, vec![std::ffi::OsString::from("state.db")], "no other file was made");
}

/// A restarted head shows its nodes as it last wrote them down until they report again:
/// `ftdrive nodes` says so while the recovery window is open, and not after.
#[test]
fn nodes_listed_during_a_heads_recovery_window_come_with_a_note() {
    let mut c = Cluster::start(&["n1"]);
    c.kill_node("n1");
    c.kill_head();
    c.start_head_again();
    let note = "the head restarted and is waiting for its nodes to report";
    let recovering = |c: &Cluster| {
        let health = http(&c.url, "GET", "/v1/health", Some(&c.token()), "");
        health.contains("\"recovering\":true")
    };
    let listed = loop {
        let out = c.try_ftdrive(&["nodes"]);
        if out.status.success() {
            break out;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The window only closes: still open after the listing, it was open during it.
    assert!(recovering(&c), "the window (one node timeout, 1 s) closed before the first listing");
    let said = String::from_utf8_lossy(&listed.stderr);
    assert!(said.contains(note), "{said}");
    c.wait_until("the window closes (n1 never reports)", |c| !recovering(c));
    let after = c.try_ftdrive(&["nodes"]);
    assert!(!String::from_utf8_lossy(&after.stderr).contains(note));
    assert!(String::from_utf8_lossy(&after.stdout).contains("DEAD"), "n1 was declared dead when the window closed");
}

#[test]
fn a_second_head_on_the_same_state_dir_is_refused() {
    let c = Cluster::start(&[]);
    let out =
        c.command().args(["head", "--listen", "127.0.0.1:0"]).arg("--state-dir").arg(c.dir.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("another ftdrive head is using the state dir"), "{stderr}");
}

/// The head's writes start failing (its files may not grow: RLIMIT_FSIZE, which binds root
/// too). The submission that could not be written is an error to its client, the head stops,
/// and after a restart the job does not exist — while every acknowledged one does.
#[test]
fn a_failed_write_is_an_error_to_the_client_and_the_job_never_exists() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ftdrive"));
    cmd.args(["head", "--listen", "127.0.0.1:0"])
        .arg("--state-dir")
        .arg(dir.path())
        .env_remove("FTDRIVE_TOKEN")
        .env("FTDRIVE_LOG", "error")
        .stderr(Stdio::null());
    // SAFETY: between fork and exec: a signal disposition and a resource limit of the child.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit { rlim_cur: 96 * 1024, rlim_max: 96 * 1024 };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut head = cmd.spawn().unwrap();
    let url = wait_for_url(dir.path());
    let token = std::fs::read_to_string(dir.path().join("token")).unwrap();
    let mut acknowledged = Vec::new();
    let failure = (0..1_000).find_map(|n| match try_http(&url, &token, &submission(&format!("fill-{n}"))) {
        Some((200, body)) => {
            acknowledged.push(serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_string());
            None
        }
        other => Some(other),
    });
    let (status, body) = failure.expect("the writes failed at some point").expect("an answer");
    assert_eq!(status, 503, "a head going away, to be asked again once back: {body}");
    assert!(body.contains("cannot write the state database"), "{body}");
    assert!(body.contains("make the state dir writable, with room on its disk, and start the head again"), "{body}");
    let start = Instant::now();
    while head.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < WAIT, "the head stops after a failed write");
        std::thread::sleep(Duration::from_millis(50));
    }
    let listen = url.trim_start_matches("http://").to_string();
    let mut again = spawn_head(dir.path(), &listen, &[]);
    let again_url = wait_for_url(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
        .args(["status", "--output", "json", "--head", &again_url])
        .env_remove("FTDRIVE_TOKEN")
        .env("FTDRIVE_STATE_DIR", dir.path())
        .output()
        .unwrap();
    let jobs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<String> = jobs.as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids, acknowledged, "exactly the acknowledged jobs exist");
    let _ = again.kill();
    let _ = again.wait();
}

/// A head stopped for about the node timeout or longer (SIGSTOP: a stall, a swap storm) finds
/// every agent's heartbeats waiting in its sockets when it resumes; it reads them before any
/// node can expire, so nothing is declared DEAD and nothing is charged. A stall about as long
/// as the node timeout ends just as the nodes fall due, so a timer that fires late by little is
/// no sign of it: the head notes four times a heartbeat interval that it runs. (The harness's
/// fast timing would make the race with the queued heartbeats too rare to show that.)
#[test]
fn a_stalled_head_declares_no_live_node_dead() {
    let c = Cluster::start_with(&["n1", "n2"], &["--heartbeat-interval-ms", "1000", "--node-timeout-ms", "3000"]);
    let spec = c.spec("steady", json!({"command": ["sleep", "300"], "min_nodes": 2, "max_nodes": 2}));
    let id = c.submit_no_wait(&spec);
    let before = c.wait_for_job(&id, "it runs", |j| running(j, 2));
    let head = c.head.id() as i32;
    // The default timing: a node timeout of 3,000 ms, heartbeats every 1,000 ms.
    for stall_ms in [3_000, 2_500, 3_500] {
        // SAFETY: signalling the head process this test started.
        unsafe { libc::kill(head, libc::SIGSTOP) };
        std::thread::sleep(std::time::Duration::from_millis(stall_ms));
        // SAFETY: as above.
        unsafe { libc::kill(head, libc::SIGCONT) };
        std::thread::sleep(std::time::Duration::from_millis(2_500)); // past any deferred timeout
        let after = c.job(&id);
        assert!(after["ledger"].as_array().unwrap().is_empty(), "after {stall_ms} ms, nothing charged: {after:#}");
        assert_eq!(after["actors"], before["actors"], "after {stall_ms} ms, the same attempts run");
        let nodes = c.nodes_json();
        assert!(nodes.as_array().unwrap().iter().all(|n| n["state"] == "ALIVE"), "after {stall_ms} ms: {nodes:#}");
    }
    c.ftdrive(&["stop", &id]);
}

/// DEAD nodes leave the head — past `--retain-dead-nodes`, or by `ftdrive forget` — and stay
/// gone across a head restart; a live node is never forgotten; a machine returning in a
/// forgotten name joins as a new node.
#[test]
fn dead_nodes_are_forgotten_durably_and_a_live_one_never() {
    let mut c = Cluster::start_with(&["n1", "n2", "n3"], &["--retain-dead-nodes", "1"]);
    c.wait_until("three nodes are ALIVE", |c| node_names(c).len() == 3);
    let state_of = |c: &Cluster, name: &str| {
        c.nodes_json().as_array().unwrap().iter().find(|n| n["name"] == name).map(|n| n["state"].clone())
    };
    c.kill_node("n2");
    c.wait_until("n2 is declared DEAD", |c| state_of(c, "n2") == Some("DEAD".into()));
    c.kill_node("n3");
    c.wait_until("n3 is declared DEAD, and n2 forgotten to keep one DEAD node", |c| {
        state_of(c, "n3") == Some("DEAD".into()) && state_of(c, "n2").is_none()
    });

    let refused = c.try_ftdrive(&["forget", "n1"]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("node `n1` is ALIVE, and only a DEAD node can be forgotten"), "{said}");
    let answer: Value = serde_json::from_str(&c.ftdrive(&["forget", "n3", "--output", "json"])).unwrap();
    assert_eq!(answer["node"], answer["name"], "keyed as drain and undrain answer");
    assert_eq!(
        (answer["name"].as_str(), answer["state"].as_str(), answer["forgotten"].as_bool()),
        (Some("n3"), Some("DEAD"), Some(true))
    );
    let again = c.try_ftdrive(&["forget", "n3"]);
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains("the head knows no node `n3` (none registered, or it was forgotten)"),
        "{again:?}"
    );
    assert_eq!(node_names(&c), ["n1"]);

    c.kill_head();
    c.start_head_again();
    c.wait_until("the restarted head answers", |c| c.try_ftdrive(&["nodes", "--output", "json"]).status.success());
    assert_eq!(node_names(&c), ["n1"], "what was forgotten stays forgotten");
    c.add_node("n3");
    c.wait_until("n3 joins again, as a new node", |c| state_of(c, "n3") == Some("ALIVE".into()));
    c.kill_node("n3");
    c.wait_until("n3 is DEAD again", |c| state_of(c, "n3") == Some("DEAD".into()));
    let said = c.ftdrive(&["forget", "n3"]);
    assert_eq!(said.trim(), "forgot n3: a node that registers as n3 joins as a new one");
}

fn node_names(c: &Cluster) -> Vec<String> {
    c.nodes_json().as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap().to_string()).collect()
}

/// A head started on another (here an empty) state dir with the cluster's tokens refuses the
/// agents that run the first head's attempts, and leaves those attempts running: it stopped
/// them all before, silently. Back on its own state dir, the first head re-adopts them. An
/// agent with nothing running joins the new cluster, forgets the old one's ended attempts and
/// puts their logs aside: the new head hands out the same job ids, and its `j1` never started
/// (taken for a start already done) or wrote into the old `j1`'s log.
#[test]
fn a_head_on_another_state_dir_leaves_the_first_heads_work_alone() {
    let mut c = Cluster::start(&["n1"]);
    let done = c.submit_no_wait(&c.spec("before", json!({"command": ["echo", "old"], "min_nodes": 1, "max_nodes": 1})));
    c.wait_for_job(&done, "it succeeds", |j| j["state"] == "SUCCEEDED");
    let id = steady_job(&c, "kept", 1);
    let running = pids(&c, None);
    c.kill_head();

    let other = c.dir.path().join("other-head");
    std::fs::create_dir(&other).unwrap();
    for file in ["token", "agent-token"] {
        std::fs::copy(c.dir.path().join(file), other.join(file)).unwrap();
    }
    let listen = c.url.trim_start_matches("http://").to_string();
    let log = std::fs::File::create(c.dir.path().join("other-head.log")).unwrap();
    let stray = Ended(head_command(&other, &listen, &[]).stderr(log).spawn().unwrap());
    c.wait_until("the other head refuses the agent", |c| {
        std::fs::read_to_string(c.dir.path().join("other-head.log")).unwrap().contains("refused: node n1's agent")
    });
    assert!(c.nodes_json().as_array().unwrap().is_empty(), "n1 did not join the other cluster");
    std::thread::sleep(Duration::from_secs(2)); // a heartbeat or ten: nothing stops them
    assert_eq!(pids(&c, None), running, "the first head's attempts run on");
    drop(stray);

    c.start_head_again();
    c.wait_for_job(&id, "the first head re-adopts it", |j| running_attempt_is(j, 1));
    assert_eq!(pids(&c, None), running);
    c.ftdrive(&["stop", &id]);
    c.wait_for_job(&id, "it stops", |j| j["state"] == "STOPPED");
    c.wait_until("its processes are gone", |c| c.processes(None).is_empty());
    c.kill_head();

    let fresh = c.dir.path().join("fresh-head");
    std::fs::create_dir(&fresh).unwrap();
    for file in ["token", "agent-token"] {
        std::fs::copy(c.dir.path().join(file), fresh.join(file)).unwrap();
    }
    let fresh_head = Ended(head_command(&fresh, &listen, &[]).spawn().unwrap());
    let again = c.submit_no_wait(&c.spec("after", json!({"command": ["echo", "new"], "min_nodes": 1, "max_nodes": 1})));
    assert_eq!(again, done, "an empty state dir hands out the same ids");
    c.wait_for_job(&again, "the new j1 runs and succeeds", |j| j["state"] == "SUCCEEDED");
    assert_eq!(c.ftdrive(&["logs", &again]), "new\n", "its log is its own");
    let aside: Vec<_> = std::fs::read_dir(c.dir.path().join("node-n1")).unwrap().flatten().collect();
    assert!(aside.iter().any(|e| e.file_name().to_string_lossy().starts_with("logs-")), "the old logs are kept aside");

    // The first head back: n1 rejoins its cluster, and that cluster's logs come back.
    drop(fresh_head);
    c.start_head_again();
    c.wait_until("n1 is back in the first cluster", |c| c.try_ftdrive(&["logs", &done]).stdout == b"old\n");
}

/// The job's one actor runs, in its attempt `attempt`.
fn running_attempt_is(job: &Value, attempt: u64) -> bool {
    job["actors"][0]["state"] == "RUNNING" && job["actors"][0]["attempt"] == attempt
}
