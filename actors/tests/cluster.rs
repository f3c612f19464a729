//! Real-cluster tests: a real `ftdrive head` and real `ftdrive node` processes on loopback,
//! real jobs as real processes (the harness is `common/`).

mod common;

use common::relay::Relay;
use common::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_three_node_job_succeeds_and_its_logs_are_served() {
    let c = Cluster::start(&["n1", "n2", "n3"]);
    let spec = c.spec("hello", json!({"command": ["sh", "-c", "echo \"rank $RANK of $WORLD_SIZE on $FTDRIVE_NODE\"; sleep 0.5"], "min_nodes": 3, "max_nodes": 3}));
    let out = c.try_ftdrive(&["submit", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let job = c.job("j1");
    assert_eq!(job["state"], "SUCCEEDED");
    assert!(job["ledger"].as_array().unwrap().iter().all(|e| e["cause"] == "completed"));
    let log = c.ftdrive(&["logs", "j1", "--actor", "j1/0"]);
    assert!(log.contains("rank 0 of 3 on n"), "{log}");
}

/// `logs --rank R` follows the rank, not an actor: an elastic job that lost rank 1's node
/// re-forms with the survivors, and rank 1 is then another actor's.
#[test]
fn the_logs_of_a_rank_are_of_whoever_held_it_last() {
    let mut c = Cluster::start(&["n1", "n2", "n3"]);
    let script = r#"echo "rank $RANK in cycle $FTDRIVE_CYCLE"; if [ "$FTDRIVE_CYCLE" = 1 ]; then sleep 60; fi"#;
    let spec = c.spec("ranks", json!({"command": ["sh", "-c", script], "min_nodes": 2, "max_nodes": 3}));
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "three ranks run", |j| running(j, 3));
    let (lost, victim) = actor_on_rank(&job, 1);
    c.kill_node(&victim);
    let done = c.wait_for_job(&id, "the survivors succeed", |j| j["state"] == "SUCCEEDED");
    assert_eq!(done["cycles"], 2, "{done:#}");
    assert_eq!(c.ftdrive(&["logs", &id, "--rank", "1"]), "rank 1 in cycle 2\n");
    // The API (the Python client's way in) finds the same holder, and says whose log it is.
    let by_api = http(&c.url, "GET", &format!("/v1/jobs/{id}/logs?rank=1"), Some(&c.token()), "");
    let (_, holder) = actor_on_rank_in(&done, 1, 2);
    let index = holder.rsplit('/').next().unwrap();
    let headers = by_api.to_ascii_lowercase();
    assert!(
        headers.contains(&format!("x-ftdrive-actor: {index}\r\n")) && headers.contains("x-ftdrive-attempt: 2\r\n"),
        "{by_api}"
    );
    assert!(by_api.ends_with("\r\n\r\nrank 1 in cycle 2\n"), "{by_api}");
    let (_, rank2_then) = actor_on_rank_in(&done, 2, 1);
    let rank2_then = rank2_then.rsplit('/').next().unwrap().to_string();
    let first = c.ftdrive(&["logs", &id, "--actor", &rank2_then, "--attempt", "1"]);
    assert_eq!(first, "rank 2 in cycle 1\n", "the same actor held rank 2 before");
    assert_ne!(lost.rsplit('/').next(), Some(rank2_then.as_str()));
    // Rank 2 was last held in cycle 1.
    assert_eq!(c.ftdrive(&["logs", &id, "--rank", "2"]), "rank 2 in cycle 1\n");
    let waiting = c.submit_no_wait(&c.spec("waits", json!({"command": ["true"], "min_nodes": 3, "max_nodes": 3})));
    let never = c.try_ftdrive(&["logs", &waiting, "--rank", "0"]);
    let said = String::from_utf8_lossy(&never.stderr);
    assert_eq!(never.status.code(), Some(1), "{said}");
    let says = format!("no attempt of {waiting} has held rank 0 yet (the job is PENDING); `ftdrive logs {waiting} --rank 0 --follow` waits for it");
    assert!(said.contains(&says), "{said}");
    let beyond = c.try_ftdrive(&["logs", &id, "--rank", "3"]);
    let said = String::from_utf8_lossy(&beyond.stderr);
    assert_eq!(beyond.status.code(), Some(2), "{said}");
    assert!(said.contains(&format!("--rank 3: {id} has ranks 0 to 2")), "{said}");
}

/// The actor whose attempt `attempt` held `rank`, from the ledger: (its node, its name).
fn actor_on_rank_in(job: &Value, rank: u64, attempt: u64) -> (String, String) {
    let entry = job["ledger"].as_array().unwrap().iter().find(|e| e["rank"] == rank && e["attempt"] == attempt);
    let entry = entry.unwrap_or_else(|| panic!("rank {rank} in attempt {attempt}: {job:#}"));
    (entry["node"].as_str().unwrap().to_string(), entry["actor"].as_str().unwrap().to_string())
}

#[test]
fn killing_an_agent_mid_job_recovers_on_another_node() {
    let mut c = Cluster::start(&["n1", "n2", "n3", "n4"]);
    let spec = c.spec(
        "recover",
        json!({"command": ["sh", "-c", LONG_THEN_SHORT], "min_nodes": 3, "max_nodes": 3, "retries": {"user": 0}}),
    );
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "three ranks run", |j| running(j, 3));
    let (actor, victim) = actor_on_rank(&job, 1);
    c.kill_node(&victim);
    let job = c.wait_for_job(&id, "the job succeeds", |j| j["state"] == "SUCCEEDED");
    let lost =
        job["ledger"].as_array().unwrap().iter().find(|e| e["actor"] == actor.as_str() && e["attempt"] == 1).unwrap();
    assert_eq!((lost["cause"].as_str(), lost["budget"].as_str()), (Some("node_lost"), Some("system")), "{job:#}");
    assert_eq!(job["remaining"]["user"], 0, "no user retry was spent");
    let moved = job["actors"].as_array().unwrap().iter().find(|a| a["name"] == actor.as_str()).unwrap();
    assert_ne!(moved["node"].as_str(), Some(victim.as_str()));
    c.wait_until("the killed agent's processes are gone", |c| c.processes(Some(&victim)).is_empty());
}

/// Two machines of a gang lost together (their agents killed at once, their ranks ended by
/// their supervisors) are one incident: one `system` charge (FC-2), so a job with a system
/// budget of 1 re-forms on the spare machines and succeeds. Charged once per machine, it failed.
#[test]
fn two_machines_lost_together_are_charged_once() {
    // Heartbeats every 500 ms: an incident is 750 ms wide, so a busy machine's late
    // heartbeat (up to 250 ms) does not part the two losses.
    let timing = ["--heartbeat-interval-ms", "500", "--node-timeout-ms", "1500"];
    let mut c = Cluster::start_with(&["n1", "n2", "n3", "n4", "n5"], &timing);
    let retries = json!({"user": 0, "system": 1});
    let spec = json!({"command": ["sh", "-c", LONG_THEN_SHORT], "min_nodes": 3, "max_nodes": 3, "retries": retries});
    let id = c.submit_no_wait(&c.spec("rack", spec));
    let job = c.wait_for_job(&id, "three ranks run", |j| running(j, 3));
    let victims = [actor_on_rank(&job, 1).1, actor_on_rank(&job, 2).1];
    for victim in &victims {
        c.kill_node(victim);
    }
    let job = c.wait_for_job(&id, "the job ends", |j| j["state"] == "SUCCEEDED" || j["state"] == "FAILED");
    assert_eq!(job["state"], "SUCCEEDED", "{job:#}");
    let ledger = job["ledger"].as_array().unwrap();
    let lost: Vec<&Value> = ledger.iter().filter(|e| e["cause"] == "node_lost").collect();
    let mut budgets: Vec<&str> = lost.iter().map(|e| e["budget"].as_str().unwrap()).collect();
    budgets.sort();
    assert_eq!(budgets, ["none", "system"], "{job:#}");
    let free = lost.iter().find(|e| e["budget"] == "none").unwrap();
    assert!(free["evidence"].as_str().unwrap().contains("lost in one incident with node"), "{free:#}");
    assert_eq!(job["remaining"]["system"], 0, "{job:#}");
}

/// A hung agent (stopped, not dead: its supervisors' sockets stay open) is declared dead and
/// its rank runs elsewhere; its workers must not run on beside the replacement for as long as
/// the hang lasts (SV-1): its supervisors stop hearing its pings and end them.
#[test]
fn a_hung_agent_s_workers_end_while_it_hangs() {
    let c = Cluster::start(&["n1", "n2", "n3"]);
    let spec = c.spec("hang", json!({"command": ["sleep", "300"], "min_nodes": 2, "max_nodes": 2}));
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "two ranks run", |j| running(j, 2));
    let (_, victim) = actor_on_rank(&job, 1);
    // RUNNING as soon as the start is sent; its worker follows.
    c.wait_until("its worker runs there", |c| !c.processes(Some(&victim)).is_empty());
    let agent = c.nodes[&victim].id() as i32;
    // SAFETY: signalling a child process this test started.
    unsafe { libc::kill(agent, libc::SIGSTOP) };
    c.wait_for_job(&id, "the rank runs elsewhere", |j| {
        running(j, 2) && j["actors"].as_array().unwrap().iter().all(|a| a["node"] != victim.as_str())
    });
    c.wait_until("the hung agent's worker is gone while it still hangs", |c| c.processes(Some(&victim)).is_empty());
    // SAFETY: as above.
    unsafe { libc::kill(agent, libc::SIGCONT) };
    c.ftdrive(&["stop", &id]);
}

/// An actor is RUNNING once its start is sent; until its agent confirms the start (here a
/// stopped agent cannot), `status` says it is still starting, as its JSON does.
#[test]
fn a_start_its_agent_has_not_confirmed_is_shown_starting() {
    let c = Cluster::start_with(&["n1", "n2"], &["--heartbeat-interval-ms", "1000", "--node-timeout-ms", "60000"]);
    let agent = c.nodes["n2"].id() as i32;
    // SAFETY: signalling a child process this test started.
    unsafe { libc::kill(agent, libc::SIGSTOP) };
    let id =
        c.submit_no_wait(&c.spec("unconfirmed", json!({"command": ["sleep", "300"], "min_nodes": 2, "max_nodes": 2})));
    let on = |j: &Value, node: &str| j["actors"].as_array().unwrap().iter().find(|a| a["node"] == node).cloned();
    let job = c.wait_for_job(&id, "n1's start is confirmed", |j| on(j, "n1").is_some_and(|a| a["starting"] == false));
    let sent = on(&job, "n2").expect("a rank on n2");
    assert_eq!((&sent["state"], &sent["starting"]), (&json!("RUNNING"), &json!(true)), "{job:#}");
    let status = c.ftdrive(&["status", &id]);
    let row = |name: &str| status.lines().find(|l| l.contains(name)).unwrap_or_default().to_string();
    let name = sent["name"].as_str().unwrap();
    assert!(row(name).contains(" RUNNING (starting) n2 "), "{status}");
    assert!(!status.lines().any(|l| l.contains(" n1 ") && l.contains("(starting)")), "{status}");
    let metrics = || http(&c.url, "GET", "/metrics", Some(&c.token()), "");
    assert!(metrics().contains("\nftdrive_actors_starting 1\n"), "{}", metrics());
    // The job's followers (the dashboard reloads on its events) are told when the start comes.
    let mut events = follow_events(&c, &id);
    // SAFETY: as above.
    unsafe { libc::kill(agent, libc::SIGCONT) };
    let told = format!(r#""actor":"{name}","attempt":1,"event":"start_confirmed","job":"{id}","node":"n2""#);
    let heard = read_until(&mut events, &told);
    assert!(heard.contains(&told), "the stream said: {heard}");
    c.wait_for_job(&id, "n2 confirms its start", |j| running(j, 2));
    assert!(!c.ftdrive(&["status", &id]).contains("(starting)"));
    assert!(metrics().contains("\nftdrive_actors_starting 0\n"), "{}", metrics());
    c.ftdrive(&["stop", &id]);
}

/// A job's event stream, its answer's head read.
fn follow_events(c: &Cluster, id: &str) -> TcpStream {
    let host = c.url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).unwrap();
    stream.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let token = c.token();
    let request = format!("GET /v1/jobs/{id}/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let head = read_until(&mut stream, "\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    stream
}

/// What `stream` says until it has said `needle`, or `WAIT` has passed.
fn read_until(stream: &mut TcpStream, needle: &str) -> String {
    let deadline = Instant::now() + WAIT;
    let mut heard = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&heard).contains(needle) && Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => heard.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading the event stream: {e}"),
        }
    }
    String::from_utf8_lossy(&heard).into_owned()
}

/// A node the head has stopped hearing from is shown as suspect before it is declared DEAD
/// (as Slurm's `idle*` and Kubernetes' `Unknown` are), in `ftdrive nodes`, its JSON and the
/// metrics, and is no longer once it is heard from again.
#[test]
fn a_silent_node_is_shown_suspect_until_it_is_heard_from_again() {
    // Heartbeats each second (suspect after two missed) so that a busy machine does not make n1
    // suspect meanwhile.
    let c = Cluster::start_with(&["n1", "n2"], &["--heartbeat-interval-ms", "1000", "--node-timeout-ms", "60000"]);
    let agent = c.nodes["n2"].id() as i32;
    let suspect = |c: &Cluster| c.nodes_json().as_array().unwrap().iter().find(|n| n["name"] == "n2").unwrap().clone();
    // SAFETY: signalling a child process this test started.
    unsafe { libc::kill(agent, libc::SIGSTOP) };
    c.wait_until("n2 is suspect", |c| suspect(c).get("suspect").is_some());
    let view = suspect(&c);
    assert_eq!(view["state"], "ALIVE", "suspect, not yet DEAD: {view:#}");
    assert!(view["suspect"]["silent_ms"].as_u64().unwrap() >= 2_000, "two heartbeat intervals: {view:#}");
    assert!(view["suspect"]["dead_in_ms"].as_u64().unwrap() <= 58_000, "{view:#}");
    let table = c.ftdrive(&["nodes"]);
    let row = table.lines().find(|l| l.starts_with("n2 ")).unwrap();
    assert!(row.contains(" ALIVE (suspect) "), "{table}");
    assert!(table.contains("node n2 is suspect: ") && table.contains("declared DEAD in"), "{table}");
    assert!(!table.contains("node n1 is suspect"), "{table}");
    let metrics = http(&c.url, "GET", "/metrics", Some(&c.token()), "");
    assert!(metrics.contains("\nftdrive_nodes_suspect 1\n"), "{metrics}");
    // SAFETY: as above.
    unsafe { libc::kill(agent, libc::SIGCONT) };
    c.wait_until("n2 is heard from again", |c| suspect(c).get("suspect").is_none());
    assert_eq!(suspect(&c)["state"], "ALIVE");
    let metrics = http(&c.url, "GET", "/metrics", Some(&c.token()), "");
    assert!(metrics.contains("\nftdrive_nodes_suspect 0\n"), "{metrics}");
}

/// A job that backs off before restarting says when it restarts, in `ftdrive status` and its
/// listing, rather than show a rank in SCHEDULING with no reason (Kubernetes' CrashLoopBackOff).
#[test]
fn a_job_backing_off_says_when_it_restarts() {
    let c = Cluster::start(&["n1"]);
    let backoff = json!({"initial": 60_000, "max": 60_000});
    let spec = c.spec(
        "crashy",
        json!({"command": ["sh", "-c", "exit 3"], "min_nodes": 1, "max_nodes": 1, "retries": {"user": 3, "backoff_ms": backoff}}),
    );
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "it backs off", |j| j["restart_at_ms"].is_u64());
    assert_eq!(job["actors"][0]["state"], "SCHEDULING", "{job:#}");
    let said = "restarting in ";
    let status = c.ftdrive(&["status", &id]);
    let line = status.lines().find(|l| l.contains(said)).unwrap_or_else(|| panic!("no backoff said: {status}"));
    let in_s: f64 = line.split(said).nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!((0.0..=60.0).contains(&in_s), "{status}");
    assert!(line.ends_with(": backing off after a failure (`retries.backoff_ms`)"), "{status}");
    let listing = c.ftdrive(&["status"]);
    assert!(listing.lines().any(|l| l.starts_with(&id) && l.contains(said)), "{listing}");
    c.ftdrive(&["stop", &id]);
    let stopped = c.wait_for_job(&id, "it stops", |j| j["state"] == "STOPPED");
    assert!(stopped.get("restart_at_ms").is_none(), "an ended job restarts nothing: {stopped:#}");
    assert!(!c.ftdrive(&["status", &id]).contains(said));

    // `submit`, following the job, says so as it happens.
    let short = json!({"initial": 300, "max": 300});
    let spec = c.spec(
        "crashes-twice",
        json!({"command": ["sh", "-c", "exit 3"], "min_nodes": 1, "max_nodes": 1, "retries": {"user": 1, "backoff_ms": short}}),
    );
    let out = c.try_ftdrive(&["submit", spec.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let line = text.lines().find(|l| l.contains(said)).unwrap_or_else(|| panic!("no backoff said: {text}"));
    assert!(line.contains(": backing off after a failure (`retries.backoff_ms`)"), "{text}");
}

/// ftdrive's own attempt supervisor killed outright is ftdrive's failure: the attempt ends as
/// `node_lost` charged to `system`, with evidence naming the supervisor, not as a user error.
#[test]
fn a_killed_supervisor_is_charged_to_the_system_not_the_user() {
    let c = Cluster::start(&["n1"]);
    let spec =
        c.spec("sv", json!({"command": ["sleep", "300"], "min_nodes": 1, "max_nodes": 1, "retries": {"user": 0}}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it runs", |j| running(j, 1));
    // RUNNING as soon as the start is sent: the kill must come once the supervisor said its
    // workers run, or it is a start that failed (on the node), not a supervisor lost.
    let metrics = c.nodes_json()[0]["metrics_url"].as_str().expect("the agent's metrics URL").to_string();
    let (agent, path) = metrics.split_at(metrics.find("/metrics").expect("a metrics path"));
    c.wait_until("the agent has the supervisor's start", |c| {
        http(agent, "GET", path, Some(&c.agent_token()), "").contains("\nftdrive_agent_attempts_started_total 1\n")
    });
    let is_supervisor = |pid: &u32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|cmd| cmd.split(|b| *b == 0).nth(1) == Some(b"__attempt"))
    };
    let supervisor = c.processes(Some("n1")).into_iter().find(is_supervisor).expect("the attempt's supervisor");
    // SAFETY: a process this test's cluster started.
    unsafe { libc::kill(supervisor as i32, libc::SIGKILL) };
    let job = c.wait_for_job(&id, "attempt 1 is in the ledger", |j| !j["ledger"].as_array().unwrap().is_empty());
    let entry = &job["ledger"][0];
    assert_eq!((entry["cause"].as_str(), entry["budget"].as_str()), (Some("node_lost"), Some("system")), "{job:#}");
    assert!(
        entry["evidence"].as_str().unwrap().contains("the attempt supervisor on n1 died without a record"),
        "{job:#}"
    );
    assert_eq!(job["remaining"]["user"], 0);
    c.ftdrive(&["stop", &id]);
}

/// A worker that writes why it failed where torchrun's workers do (`$TORCHELASTIC_ERROR_FILE`,
/// in the format of PyTorch's `@record`) is quoted in the ledger. Each worker has a file of
/// its own: here worker 1 fails and worker 0 is stopped.
#[test]
fn a_failed_workers_own_words_reach_the_ledger() {
    let c = Cluster::start(&["n1"]);
    let failing = r#"[ "$LOCAL_RANK" = 1 ] || exec sleep 300
        printf '{"message": {"message": "ValueError: loss is NaN\\n at rank %s", "extraInfo": {"py_callstack": "Traceback"}}}' "$RANK" > "$TORCHELASTIC_ERROR_FILE"
        exit 1"#;
    let spec = c.spec(
        "said",
        json!({"command": ["sh", "-c", failing], "min_nodes": 1, "max_nodes": 1, "nproc_per_node": 2, "retries": {"user": 0}}),
    );
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "it fails", |j| j["state"] == "FAILED");
    let says = r#"worker 1 (rank 1) exited with code 1 on n1, saying "ValueError: loss is NaN at rank 1"; the user budget is exhausted"#;
    assert_eq!(job["ledger"][0]["evidence"].as_str(), Some(says), "{job:#}");
}

/// A relative `cwd` is under the agent's work dir, not wherever the agent was started.
#[test]
fn a_relative_cwd_is_under_the_agents_work_dir() {
    let c = Cluster::start(&["n1"]);
    std::fs::create_dir(c.dir.path().join("sub")).unwrap();
    let spec = c.spec("cwd", json!({"command": ["pwd"], "min_nodes": 1, "max_nodes": 1, "cwd": "sub"}));
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "it ends", |j| j["state"] != "PENDING" && j["state"] != "RUNNING");
    assert_eq!(job["state"], "SUCCEEDED", "{job:#}");
    let pwd = c.ftdrive(&["logs", &id, "--actor", "0"]);
    assert_eq!(pwd.trim(), c.dir.path().join("sub").to_str().unwrap());
}

/// An agent given a relative `--state-dir` runs jobs whose `cwd` is elsewhere: its attempts'
/// supervisors, which run in the job's directory, find their records all the same.
#[test]
fn an_agent_with_a_relative_state_dir_runs_its_jobs() {
    let mut c = Cluster::start(&[]);
    let mut agent = c.node_command("n1");
    agent.args(["--state-dir", "relative"]).current_dir(c.dir.path()).env("FTDRIVE_AGENT_TOKEN", c.agent_token());
    c.nodes.insert("n1".into(), agent.spawn().unwrap());
    c.wait_until("n1 registered", |c| c.nodes_json().as_array().unwrap().len() == 1);
    let spec = c.spec("rel", json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1, "cwd": "/"}));
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "it ends", |j| j["state"] != "PENDING" && j["state"] != "RUNNING");
    assert_eq!(job["state"], "SUCCEEDED", "{job:#}");
}

#[test]
fn a_pending_job_waits_until_the_replacement_is_placed() {
    let mut c = Cluster::start(&["n1", "n2", "n3"]);
    let first = c.spec("first", json!({"command": ["sh", "-c", LONG_THEN_SHORT], "min_nodes": 3, "max_nodes": 3}));
    let a = c.submit_no_wait(&first);
    let job = c.wait_for_job(&a, "the first job runs", |j| running(j, 3));
    let second =
        c.spec("second", json!({"command": ["sh", "-c", "sleep 0.5"], "min_nodes": 1, "max_nodes": 1, "priority": 10}));
    let b = c.submit_no_wait(&second);
    let (_, victim) = actor_on_rank(&job, 1);
    c.kill_node(&victim);
    c.wait_for_job(&a, "the loss is seen", |j| {
        j["ledger"].as_array().unwrap().iter().any(|e| e["cause"] == "node_lost")
    });
    assert_eq!(c.job(&b)["state"], "PENDING");
    c.add_node("n4");
    c.wait_for_job(&a, "the first job re-forms on n4", |j| j["cycles"] == 2 && running(j, 3));
    assert_eq!(c.job(&b)["state"], "PENDING", "the replacement went first, whatever the priority");
    c.wait_for_job(&a, "the first job succeeds", |j| j["state"] == "SUCCEEDED");
    c.wait_for_job(&b, "the second job runs after it", |j| j["state"] == "SUCCEEDED");
}

#[test]
fn draining_a_node_preempts_its_actor_and_undrain_takes_it_back() {
    let mut c = Cluster::start(&["n1", "n2"]);
    let spec = c.spec(
        "drained",
        json!({"command": ["sh", "-c", LONG_THEN_SHORT], "min_nodes": 1, "max_nodes": 1, "stop_grace_ms": 1000}),
    );
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "it runs", |j| running(j, 1));
    let (_, node) = actor_on_rank(&job, 0);
    let said = c.ftdrive(&["drain", &node, "--deadline-ms", "20000"]);
    assert!(said.contains(&format!("draining {node} (deadline 20000 ms)")), "{said}");
    // A second drain changes nothing, and says so rather than claim its own deadline.
    let again = c.ftdrive(&["drain", &node, "--deadline-ms", "500"]);
    assert!(
        again.contains("already draining, with the deadline it was first given (a second drain sets none)"),
        "{again}"
    );
    let answer: serde_json::Value = serde_json::from_str(&c.ftdrive(&["drain", &node, "--output", "json"])).unwrap();
    assert_eq!((answer["state"].as_str(), answer["cordoned"].as_bool()), (Some("DRAINING"), Some(true)), "{answer}");
    assert!(answer.get("deadline_ms").is_none(), "the first deadline stands: {answer}");
    let job = c.wait_for_job(&id, "it succeeds elsewhere", |j| j["state"] == "SUCCEEDED");
    let first = &job["ledger"][0];
    assert_eq!((first["cause"].as_str(), first["budget"].as_str()), (Some("preempted"), Some("preemption")), "{job:#}");
    assert_ne!(job["actors"][0]["node"].as_str(), Some(node.as_str()));
    let state_of = |c: &Cluster, name: &str| {
        c.nodes_json().as_array().unwrap().iter().find(|n| n["name"] == name).unwrap()["state"].clone()
    };
    assert_eq!(state_of(&c, &node), "DRAINING");
    let listed = c.ftdrive(&["nodes"]);
    assert!(listed.lines().any(|l| l.starts_with(&node) && l.contains("DRAINING (operator)")), "{listed}");

    // A reboot slower than the node timeout: the machine comes back, and the drain stands.
    c.kill_node(&node);
    c.wait_until("the node is declared DEAD", |c| state_of(c, &node) == "DEAD");
    c.add_node(&node);
    c.wait_until("the node registers again, still drained", |c| state_of(c, &node) == "DRAINING");

    // The operator takes the node back: a job needing both nodes runs on it.
    let said = c.ftdrive(&["undrain", &node]);
    assert_eq!(said.trim(), format!("undrained {node}: it is ALIVE, and new work may be placed there"));
    assert_eq!(state_of(&c, &node), "ALIVE");
    let again = c.ftdrive(&["undrain", &node]);
    assert_eq!(again.trim(), format!("{node} was not drained: it is ALIVE, and new work may be placed there"));
    let both = c.spec("both", json!({"command": ["true"], "min_nodes": 2, "max_nodes": 2}));
    let both = c.submit_no_wait(&both);
    let job = c.wait_for_job(&both, "it succeeds on both nodes", |j| j["state"] == "SUCCEEDED");
    assert!(job["ledger"].as_array().unwrap().iter().any(|e| e["node"] == node.as_str()), "{job:#}");
    let unknown = c.try_ftdrive(&["undrain", "no-such-node"]);
    assert_eq!(unknown.status.code(), Some(2), "a name the head does not know is the input's to fix");
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("the head knows no node `no-such-node`"));
}

/// `ftdrive submit --output json job.json | jq`: standard output is the one document, the
/// progress goes to standard error.
#[test]
fn a_followed_submit_with_json_output_prints_only_the_document() {
    let c = Cluster::start(&["n1"]);
    let spec = c.spec("quiet", json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1}));
    let out = c.command().args(["submit", "--output", "json"]).arg(&spec).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let job: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(job["state"], "SUCCEEDED");
    assert!(stderr.contains("RUNNING → TASK_COMPLETED"), "the progress is on stderr: {stderr}");

    // One job's view carries its spec as accepted, defaults filled in; the list does not.
    let shown = c.job(job["id"].as_str().unwrap());
    assert_eq!(shown["spec"]["command"], json!(["true"]), "{shown:#}");
    assert_eq!(shown["spec"]["bundle"], json!({"cpu": 1}), "the default bundle: {shown:#}");
    assert_eq!(shown["spec"]["stop_grace_ms"], 10_000, "{shown:#}");
    let listed: serde_json::Value = serde_json::from_str(&c.ftdrive(&["status", "--output", "json"])).unwrap();
    assert!(listed[0].get("spec").is_none(), "a list stays small: {listed:#}");
    assert_eq!(job["spec"], shown["spec"], "a followed submission's document is the job's document");
    // So is the answer to a submission, printed by `--no-wait --output json`.
    let out = c.command().args(["submit", "--no-wait", "--output", "json"]).arg(&spec).output().unwrap();
    let accepted: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(accepted["spec"], shown["spec"], "{accepted:#}");
    let accepted = accepted["id"].as_str().unwrap().to_string();
    c.wait_for_job(&accepted, "it ends", |j| j["state"] == "SUCCEEDED");

    // A listing filters by state and keeps the newest; a state that does not exist is named.
    let long = c.submit_no_wait(&c.spec("long", json!({"command": ["sleep", "30"], "min_nodes": 1, "max_nodes": 1})));
    c.wait_for_job(&long, "it runs", |j| running(j, 1));
    let ids = |args: &[&str]| -> Vec<String> {
        let out: serde_json::Value = serde_json::from_str(&c.ftdrive(args)).unwrap();
        out.as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(ids(&["status", "--state", "running", "--output", "json"]), [long.as_str()]);
    assert_eq!(
        ids(&["status", "--state", "SUCCEEDED,FAILED", "--output", "json"]),
        [job["id"].as_str().unwrap(), &accepted]
    );
    assert_eq!(ids(&["status", "--limit", "1", "--output", "json"]), [long.as_str()], "the newest");
    // A listing cut by `--limit` says which `--before` lists the older jobs, page by page.
    let first = job["id"].as_str().unwrap();
    let page = c.try_ftdrive(&["status", "--limit", "1"]);
    let said = String::from_utf8_lossy(&page.stderr);
    assert!(said.contains(&format!("older jobs: `ftdrive status --limit 1 --before {long}`")), "{said}");
    assert_eq!(ids(&["status", "--limit", "1", "--before", &long, "--output", "json"]), [accepted.as_str()]);
    assert_eq!(ids(&["status", "--before", &accepted, "--output", "json"]), [first], "no limit: all older ones");
    let last = c.try_ftdrive(&["status", "--limit", "5", "--before", &accepted]);
    assert!(!String::from_utf8_lossy(&last.stderr).contains("older jobs"), "nothing older than the last page");
    let cut = http(&c.url, "GET", "/v1/jobs?limit=2", Some(&c.token()), "");
    assert!(cut.to_lowercase().contains(&format!("x-ftdrive-next-before: {accepted}\r\n")), "{cut}");
    let none = c.try_ftdrive(&["status", "--before", first]);
    let said = String::from_utf8_lossy(&none.stderr);
    assert_eq!(
        (none.status.code(), said.trim()),
        (Some(0), format!("ftdrive: no jobs submitted before {first}").as_str())
    );
    let out = c.try_ftdrive(&["status", "--before", "latest"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(2) && said.contains("`latest` is no job id"), "{said}");
    let refused = http(&c.url, "GET", "/v1/jobs?before=latest", Some(&c.token()), "");
    assert!(refused.starts_with("HTTP/1.1 400") && refused.contains("`before` is `latest`"), "{refused}");
    let none = c.try_ftdrive(&["status", "--state", "pending,stopped"]);
    let said = String::from_utf8_lossy(&none.stderr);
    assert_eq!((none.status.code(), said.trim()), (Some(0), "ftdrive: no job is PENDING or STOPPED"));
    let out = c.try_ftdrive(&["status", "--state", "DONE"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("no job state is called `DONE`") && said.contains("SUCCEEDED"), "{said}");
    let token = c.token();
    let refused = http(&c.url, "GET", "/v1/jobs?state=DONE", Some(&token), "");
    assert!(refused.starts_with("HTTP/1.1 400") && refused.contains("`state` names `DONE`"), "{refused}");
    // A misspelt parameter is refused, not ignored (it listed every job).
    let misspelt = http(&c.url, "GET", "/v1/jobs?limt=1", Some(&token), "");
    assert!(misspelt.starts_with("HTTP/1.1 400") && misspelt.contains("unknown field `limt`"), "{misspelt}");
    c.ftdrive(&["stop", &long]);
}

/// `--resources cpu=1` sets the CPUs and leaves the rest detected, as `ray start --num-cpus`:
/// a bundle asking for memory (torchx's roles ask 1 GiB by default) fits such a node.
#[test]
fn resources_named_on_the_command_line_override_only_themselves() {
    let c = Cluster::start(&["n1"]);
    let offered = &c.nodes_json()[0]["resources"];
    assert_eq!(offered["cpu"], 1, "{offered}");
    let memory_mb = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        / 1024;
    assert_eq!(offered["memory_mb"], memory_mb, "the machine's memory, detected: {offered}");
    let spec = c.spec(
        "mem",
        json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1, "bundle": {"cpu": 1, "memory_mb": 1024}}),
    );
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it runs and succeeds", |j| j["state"] == "SUCCEEDED");
}

#[test]
fn stop_ends_the_job_and_every_process_and_submit_exits_3() {
    let c = Cluster::start(&["n1", "n2"]);
    let spec = c.spec(
        "stopped",
        json!({"command": ["sh", "-c", "sleep 600"], "min_nodes": 2, "max_nodes": 2, "stop_grace_ms": 2000}),
    );
    let follower = c.command().arg("submit").arg(&spec).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    c.wait_until("the job runs", |c| {
        c.try_ftdrive(&["status", "j1", "--output", "json"]).status.success() && running(&c.job("j1"), 2)
    });
    c.wait_until("both ranks have processes", |c| c.processes(None).len() >= 2);
    let said = c.ftdrive(&["stop", "j1"]);
    assert!(said.starts_with("stopping j1 (stopped): its processes get SIGTERM"), "{said}");
    let out = follower.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "submit exits 3 for STOPPED: {}", String::from_utf8_lossy(&out.stderr));
    let job = c.job("j1");
    assert_eq!(job["state"], "STOPPED");
    assert!(job["ledger"].as_array().unwrap().iter().all(|e| e["cause"] == "stopped"));
    c.wait_until("no process of the job remains", |c| c.processes(None).is_empty());
    let again = c.ftdrive(&["stop", "j1"]);
    assert_eq!(again.trim(), "j1 (stopped) had already ended: STOPPED; nothing to stop");
    let answer: serde_json::Value = serde_json::from_str(&c.ftdrive(&["stop", "j1", "--output", "json"])).unwrap();
    assert_eq!(answer["state"], "STOPPED", "{answer}");
}

#[test]
fn stopping_a_job_that_already_ended_says_so_and_changes_nothing() {
    let c = Cluster::start(&["n1"]);
    let id = c.submit_no_wait(&c.spec("done", json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1})));
    c.wait_for_job(&id, "it succeeds", |j| j["state"] == "SUCCEEDED");
    let said = c.ftdrive(&["stop", &id]);
    assert_eq!(said, format!("{id} (done) had already ended: SUCCEEDED; nothing to stop\n"));
    assert_eq!(c.job(&id)["state"], "SUCCEEDED");
    // A pending job holds nothing, so the stop ends it at once; stopped again, it had ended.
    let wide = c.submit_no_wait(&c.spec("wide", json!({"command": ["true"], "min_nodes": 2, "max_nodes": 2})));
    assert_eq!(c.ftdrive(&["stop", &wide]), format!("{wide} (wide) is STOPPED\n"));
    assert_eq!(c.ftdrive(&["stop", &wide]), format!("{wide} (wide) had already ended: STOPPED; nothing to stop\n"));
}

#[test]
fn a_user_error_with_no_budget_fails_and_submit_exits_1() {
    let c = Cluster::start(&["n1"]);
    let spec = c.spec("broken", json!({"command": ["sh", "-c", "echo oops >&2; exit 1"], "min_nodes": 1, "max_nodes": 1, "retries": {"user": 0}}));
    let out = c.try_ftdrive(&["submit", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    // The error it ended on is in its last lines: shown under the summary, as torchrun's
    // error summary shows the root cause.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let shown = "  the last lines of j1/0 attempt 1 (all of it: `ftdrive logs j1 --actor 0 --attempt 1`):\n    oops\n";
    assert!(stdout.ends_with(shown), "{stdout}");
    let job = c.job("j1");
    assert_eq!(job["state"], "FAILED");
    assert_eq!(
        (job["ledger"][0]["cause"].as_str(), job["ledger"][0]["budget"].as_str()),
        (Some("user_error"), Some("user"))
    );
    assert!(c.ftdrive(&["logs", "j1"]).contains("oops"));
    let followed = c.try_ftdrive(&["logs", "j1", "--follow"]);
    assert_eq!(followed.status.code(), Some(1), "a follower exits with the job's outcome, as submit does");
}

#[test]
fn a_malformed_spec_exits_2_naming_the_field_and_creates_no_job() {
    let c = Cluster::start(&["n1"]);
    for (spec, field) in [
        (json!({"command": ["true"], "min_nodes": 0, "max_nodes": 1}), "min_nodes"),
        (json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1, "colour": "red"}), "colour"),
        (json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1, "bundle": {"cpu": -1}}), "bundle"),
    ] {
        let path = c.spec("bad", spec);
        let out = c.try_ftdrive(&["submit", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&format!("`{field}`")), "{stderr}");
    }
    assert_eq!(c.ftdrive(&["status", "--output", "json"]).trim(), "[]");
}

/// An address that is not one is bad input (exit 2, saying how to write it), not "is the head
/// running?" (exit 4) nor a failed bind (exit 1); and nothing is written for it.
#[test]
fn a_malformed_address_exits_2_saying_how_to_write_one() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let state_arg = state.to_str().unwrap();
    for args in [
        vec!["head", "--listen", "foo", "--state-dir", state_arg],
        vec!["status", "--head", "not a url"],
        vec!["logs", "j1", "--head", "http://127.0.0.1:7380/v1"],
        vec!["node", "--name", "n1", "--head", "ftp://127.0.0.1:21", "--state-dir", state_arg],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ftdrive")).args(&args).env("FTDRIVE_TOKEN", "t").output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("such as 127.0.0.1:7380"), "{args:?}: {stderr}");
    }
    assert!(!state.exists(), "nothing was written for a refused address");
}

/// A first rendezvous port whose pool would pass port 65535 is refused before the head starts,
/// naming the flags and the highest base that works; so are no ports per node. Nothing is
/// written for either.
#[test]
fn a_master_port_base_too_high_for_its_pool_exits_2_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let refusals = [
        (
            ["--master-port-base", "65000"],
            "`--master-port-base`) is 65000; with config `ports_per_node` (`--ports-per-node`) 1000",
        ),
        (["--ports-per-node", "0"], "(`--ports-per-node`) is 0: a node could hold no bundle"),
    ];
    for (flags, says) in refusals {
        let out = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
            .args(["head", "--listen", "127.0.0.1:0"])
            .args(flags)
            .arg("--state-dir")
            .arg(&state)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(!state.exists(), "nothing was written for a refused setting");
    }
}

/// Only listening sockets are passed over, so a base whose first ports are in the machine's
/// ephemeral range (which outgoing connections take local ports from) is warned of at start.
#[test]
fn a_master_port_base_in_the_ephemeral_range_is_warned_of() {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let low: u16 = range.split_whitespace().next().unwrap().parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("head.log");
    let mut head = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
        .args(["head", "--listen", "127.0.0.1:0", "--master-port-base", &low.to_string(), "--state-dir"])
        .arg(dir.path().join("state"))
        .env("FTDRIVE_LOG", "warn")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let said = loop {
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        if said.contains("ephemeral port range") || start.elapsed() > WAIT {
            break said;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    head.kill().unwrap();
    head.wait().unwrap();
    assert!(said.contains(&format!("--master-port-base {low}: the first agent's rendezvous ports")), "{said}");
    assert!(said.contains(&format!("use a base of at most {}", low - 1000)), "{said}");
}

/// A value a flag overrode is blamed on the flag, not on the file that never said it; and a
/// flag that cannot work where it is given is refused before anything starts.
#[test]
fn a_refused_override_is_blamed_on_its_flag_and_no_wait_needs_a_head() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.json");
    std::fs::write(&job, json!({"name": "t", "command": ["true"], "min_nodes": 2, "max_nodes": 4}).to_string())
        .unwrap();
    let job = job.to_str().unwrap();
    for (flags, said) in [
        (vec!["--min-nodes", "0"], "--min-nodes 0: is 0; a job needs at least 1 node".to_string()),
        (
            vec!["--run-timeout-ms", "0"],
            "--run-timeout-ms 0: is 0; use null for no limit, or a positive number of milliseconds".to_string(),
        ),
        (vec!["--env", "A=1", "--env", "A=2"], "--env A: is given twice; give each variable once".to_string()),
        (
            vec!["--env", "BAD\u{1b}=1"],
            "--env BAD\\u{1b}: is not a valid variable; names are non-empty, without `=` or control characters"
                .to_string(),
        ),
        (
            vec!["--max-nodes", "1"],
            format!("{job}: job spec field `min_nodes`: is 2, more than max_nodes (1); set min_nodes <= max_nodes (with --max-nodes 1 from the command line)"),
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
            .arg("submit")
            .args(&flags)
            .arg(job)
            .env_remove("FTDRIVE_HEAD")
            .env("FTDRIVE_STATE_DIR", dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.starts_with(&format!("ftdrive: {said}")), "{flags:?}: {stderr}");
    }
    // A variable must be NAME=VALUE: refused as the command line is read.
    let out =
        Command::new(env!("CARGO_BIN_EXE_ftdrive")).args(["submit", "--env", "NCCL_DEBUG", job]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("takes NAME=VALUE, e.g. NCCL_DEBUG=INFO, not `NCCL_DEBUG`"), "{stderr}");
    // Nor can an embedded cluster, which ends with the command, hold a job submitted --no-wait.
    let out = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
        .args(["submit", "--no-wait", job])
        .env_remove("FTDRIVE_HEAD")
        .env("FTDRIVE_STATE_DIR", dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--no-wait needs a head"), "{stderr}");
    assert!(!dir.path().join("local").exists(), "no embedded cluster was started");
    // And a head given makes --local-nodes meaningless: refused, not sent to the wrong cluster.
    let out = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
        .args(["submit", "--local-nodes", "2", job])
        .env("FTDRIVE_HEAD", "http://127.0.0.1:9")
        .env("FTDRIVE_TOKEN", "t")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let says = "--local-nodes 2 sizes the embedded cluster, used only without a head, but a head is given \
                (http://127.0.0.1:9, from --head or $FTDRIVE_HEAD); drop --local-nodes, or unset $FTDRIVE_HEAD \
                to run locally";
    assert!(stderr.contains(says), "{stderr}");
}

/// A job id or node name the head could never know is refused before the head is asked: an
/// empty one would otherwise reach it as another route ("no such route").
#[test]
fn a_bad_job_id_or_node_name_exits_2_before_the_head_is_asked() {
    for args in
        [vec!["forget", ""], vec!["drain", "a/b"], vec!["undrain", "../n1"], vec!["stop", "j 1"], vec!["logs", ""]]
    {
        let out = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
            .args(&args)
            .args(["--head", "http://127.0.0.1:9"])
            .env("FTDRIVE_TOKEN", "t")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("use 1 to 253 letters, digits"), "{args:?}: {stderr}");
        assert!(!stderr.contains("cannot reach"), "the head was never asked: {stderr}");
    }
}

/// One node has its own address; a path asked with a method it does not take is a 405 that
/// says so, not a 404 that says the path does not exist.
#[test]
fn a_node_is_read_by_name_and_a_wrong_method_is_a_405() {
    let c = Cluster::start(&["n1"]);
    let token = c.token();
    let response = http(&c.url, "GET", "/v1/nodes/n1", Some(&token), "");
    let body = response.split_once("\r\n\r\n").unwrap().1;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let node: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(node, c.nodes_json()[0], "the same object `GET /v1/nodes` lists");
    let response = http(&c.url, "GET", "/v1/nodes/n9", Some(&token), "");
    assert!(response.starts_with("HTTP/1.1 404") && response.contains("knows no node `n9`"), "{response}");
    for (method, path) in [("PUT", "/v1/jobs"), ("POST", "/v1/nodes/n1"), ("GET", "/v1/nodes/n1/drain")] {
        let response = http(&c.url, method, path, Some(&token), "{}");
        assert!(response.starts_with("HTTP/1.1 405"), "{method} {path}: {response}");
        assert!(response.contains("does not take that method"), "{method} {path}: {response}");
    }
    assert_eq!(c.nodes_json()[0]["state"], "ALIVE", "nothing was changed");
}

#[test]
fn requests_without_the_token_get_401_and_change_nothing() {
    let c = Cluster::start(&["n1"]);
    let body = json!({"spec": {"name": "sneaky", "command": ["true"], "min_nodes": 1, "max_nodes": 1}}).to_string();
    for auth in [None, Some("wrong-token")] {
        for (method, path) in
            [("POST", "/v1/jobs"), ("GET", "/v1/jobs"), ("POST", "/v1/nodes/n1/drain"), ("GET", "/v1/agent")]
        {
            let response = http(&c.url, method, path, auth, &body);
            assert!(response.starts_with("HTTP/1.1 401"), "{method} {path} with {auth:?}: {response}");
        }
    }
    // With the token, a body naming more than the spec (a job id) is refused, not half-read.
    let named = json!({"spec": {"name": "named", "command": ["true"], "min_nodes": 1, "max_nodes": 1}, "id": "mine"});
    let response = http(&c.url, "POST", "/v1/jobs", Some(&c.token()), &named.to_string());
    assert!(response.starts_with("HTTP/1.1 400") && response.contains("unknown field `id`"), "{response}");
    assert_eq!(c.ftdrive(&["status", "--output", "json"]).trim(), "[]", "no job was created");
    assert_eq!(c.nodes_json()[0]["state"], "ALIVE", "no node was drained");
    let out = c.command().env("FTDRIVE_TOKEN", "wrong").args(["status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "a refused credential is the command's to fix, not a failed job");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("refused the token from $FTDRIVE_TOKEN: it is not its client token"), "{said}");
    assert!(said.contains("set $FTDRIVE_TOKEN to the contents of the `token` file"), "says how to fix: {said}");
    // A token that cannot be one (two lines pasted) is the command's to fix, not a lost head.
    let out = c.command().env("FTDRIVE_TOKEN", "a\nb").args(["status"]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("the token from $FTDRIVE_TOKEN holds '\\n', which no token has"), "{said}");
    // An unknown job's id is quoted shortened.
    let long = "j".repeat(5_000);
    let said = http(&c.url, "GET", &format!("/v1/jobs/{long}"), Some(&c.token()), "");
    assert!(said.starts_with("HTTP/1.1 40") && said.contains("… (5000 characters)"), "{said}");
    assert!(said.len() < 2_000, "{said}");
    // The agent token given for the client's is named as such.
    let out = c.command().env("FTDRIVE_TOKEN", c.agent_token()).args(["status"]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("it is its agent token, which opens only the agent channel"), "{said}");
    // A stale token file (a head started anew elsewhere) is named as such.
    let stale = tempfile::tempdir().unwrap();
    std::fs::write(stale.path().join("token"), "stale").unwrap();
    let out =
        c.command().env_remove("FTDRIVE_TOKEN").env("FTDRIVE_STATE_DIR", stale.path()).arg("status").output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains(&format!("refused the token from {}", stale.path().join("token").display())), "{said}");
    assert!(said.contains("that file is another head's"), "{said}");
}

/// Exit codes say whose move it is (docs/runtime.md): 2 for a command that cannot run as
/// given, 4 for no ftdrive head at the address, 1 for a job that failed (elsewhere).
#[test]
fn exit_codes_tell_a_command_to_fix_from_a_head_not_there() {
    let c = Cluster::start(&["n1"]);
    let job = c.submit_no_wait(&c.spec("once", json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1})));
    c.wait_for_job(&job, "it succeeds", |j| j["state"] == "SUCCEEDED");
    let refused = |args: &[&str], says: &str| {
        let out = c.try_ftdrive(args);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {said}");
        assert!(said.contains(says), "{args:?}: {said}");
    };
    refused(&["status", "j99"], "j99");
    refused(&["logs", &job, "--attempt", "7"], &format!("--attempt 7: {job}/0 has attempts 1 to 1"));
    let nowhere = tempfile::tempdir().unwrap();
    let out = c.command().env("FTDRIVE_STATE_DIR", nowhere.path()).arg("status").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "no token anywhere: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no API token"));

    // Something answers at the address, but not as an ftdrive head does.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = other.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = other.accept().unwrap();
        let mut request = [0u8; 4096];
        let _ = std::io::Read::read(&mut stream, &mut request);
        let answer = "HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\nconnection: close\r\n\r\nnot found";
        std::io::Write::write_all(&mut stream, answer.as_bytes()).unwrap();
    });
    let out = c.command().args(["nodes", "--head", &format!("http://{addr}")]).output().unwrap();
    server.join().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{said}");
    assert!(said.contains("answered 404 Not Found without an ftdrive error: is it an ftdrive head?"), "{said}");
    // An agent's log server answers in JSON as the head does, and says it is an agent's.
    let agent = c.nodes_json()[0]["metrics_url"].as_str().unwrap().trim_end_matches("/metrics").to_string();
    let out = c.command().args(["status", "--head", &agent]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{said}");
    assert!(said.contains("is an ftdrive agent's log server, not the head"), "{said}");

    // Daemons refused at start: a port in use, a work dir that is not there.
    let listen = c.url.trim_start_matches("http://");
    let second = tempfile::tempdir().unwrap();
    let out = head_command(second.path(), listen, &[]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!("cannot listen on {listen}")) && said.contains("give another with --listen"),
        "{said}"
    );
    let out = c.command().args(["node", "--name", "n9", "--work-dir", "/no/such/dir"]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("--work-dir /no/such/dir: not a directory on this machine"), "{said}");
    assert_eq!(c.nodes_json().as_array().unwrap().len(), 1, "n9 never registered");
}

#[test]
fn killing_an_agent_leaves_no_orphan_process() {
    let mut c = Cluster::start(&["n1"]);
    // A shell with a background grandchild: both must die with the agent.
    let spec =
        c.spec("orphans", json!({"command": ["sh", "-c", "sleep 300 & sleep 300"], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it runs", |j| running(j, 1));
    c.wait_until("the shell and both sleeps run", |c| c.processes(Some("n1")).len() >= 3);
    c.kill_node("n1");
    c.wait_until("nothing of the job remains", |c| c.processes(None).is_empty());
}

#[test]
fn logs_follow_a_running_attempt_and_show_a_finished_one() {
    let c = Cluster::start(&["n1"]);
    let spec = c.spec("chatty", json!({"command": ["sh", "-c", "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.3; done"], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it runs", |j| running(j, 1));
    // `-f`, as `tail -f` and `kubectl logs -f` take it.
    let followed = c.ftdrive(&["logs", &id, "-f"]);
    let expected: String = (1..=6).map(|i| format!("line {i}\n")).collect();
    assert_eq!(followed, expected, "followed until the attempt ended");
    c.wait_for_job(&id, "it succeeds", |j| j["state"] == "SUCCEEDED");
    assert_eq!(c.ftdrive(&["logs", &id, "--actor", "0", "--attempt", "1"]), expected);
    // The API (the Python client's and torchx's way in) says what the CLI says.
    let get = |query: &str| http(&c.url, "GET", &format!("/v1/jobs/{id}/logs?{query}"), Some(&c.token()), "");
    let no_worker = get("actor=0&local_rank=3");
    assert!(no_worker.starts_with("HTTP/1.1 400") && no_worker.contains("runs 1 worker(s) per actor"), "{no_worker}");
    let no_actor = get("actor=7");
    assert!(no_actor.contains(&format!("has actors {id}/0 to {id}/0; there is no actor 7")), "{no_actor}");
}

/// `ftdrive logs` on a terminal keeps a job's colours and shows every other control sequence
/// as text (a job must not clear, rewrite or retitle its reader's terminal, nor set its
/// clipboard); piped, it prints the job's bytes as they are.
#[test]
fn logs_on_a_terminal_keep_colours_and_show_other_control_sequences_as_text() {
    let c = Cluster::start(&["n1"]);
    let printf = r#"printf 'ok \033[32mgreen\033[0m \033]52;c;eA==\007 \033[2J\033]0;title\033\\ end\n'"#;
    let spec = c.spec("escapes", json!({"command": ["sh", "-c", printf], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it succeeds", |j| j["state"] == "SUCCEEDED");
    let raw = "ok \x1b[32mgreen\x1b[0m \x1b]52;c;eA==\x07 \x1b[2J\x1b]0;title\x1b\\ end\n";
    assert_eq!(c.ftdrive(&["logs", &id]), raw, "piped: byte for byte");
    // `script` runs the command on a pseudo-terminal of its own.
    let on_terminal = format!("{} logs {id}", env!("CARGO_BIN_EXE_ftdrive"));
    let out = Command::new("script")
        .args(["-qec", &on_terminal, "/dev/null"])
        .env("FTDRIVE_HEAD", &c.url)
        .env("FTDRIVE_STATE_DIR", c.dir.path())
        .env_remove("FTDRIVE_TOKEN")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}: {}", String::from_utf8_lossy(&out.stderr));
    let safe = "ok \x1b[32mgreen\x1b[0m ^[]52;c;eA==^G ^[[2J^[]0;title^[\\ end";
    assert!(shown.contains(safe), "colours kept, the rest as text: {shown:?}");
}

/// The lines a child writes to `stdout`, as they come, read on a thread of their own.
fn lines_of(stdout: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let Ok(line) = line else { break };
            let _ = lines_tx.send(line);
        }
    });
    lines
}

/// `--tail N` prints the last N lines of a log, and under `--follow` what comes after them, as
/// `tail -n N -f` and `kubectl logs --tail N -f` do; the API refuses a tail from an offset.
#[test]
fn logs_tail_prints_the_last_lines_and_follows_on_from_them() {
    let c = Cluster::start(&["n1"]);
    let gate = c.dir.path().join("gate");
    let script = format!(
        "for i in $(seq 1 500); do echo line $i; done; while [ ! -e {} ]; do sleep 0.1; done; echo after",
        gate.display()
    );
    let spec = c.spec("tailed", json!({"command": ["sh", "-c", script], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it runs", |j| running(j, 1));
    c.wait_until("every line is written", |c| c.ftdrive(&["logs", &id, "--tail", "1"]) == "line 500\n");
    assert_eq!(c.ftdrive(&["logs", &id, "--tail", "3"]), "line 498\nline 499\nline 500\n");
    assert_eq!(c.ftdrive(&["logs", &id, "--tail", "0"]), "");
    let mut follower = c
        .command()
        .args(["logs", &id, "--tail", "2", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(follower.stdout.take().unwrap());
    let tail: Vec<String> = (0..2).map_while(|_| lines.recv_timeout(WAIT).ok()).collect();
    std::fs::write(&gate, "").unwrap();
    let status = follower.wait().unwrap();
    let rest: Vec<String> = lines.iter().collect();
    assert_eq!((tail, rest), (vec!["line 499".to_string(), "line 500".into()], vec!["after".to_string()]));
    assert_eq!(status.code(), Some(0));
    let both = http(&c.url, "GET", &format!("/v1/jobs/{id}/logs?actor=0&tail=2&offset=5"), Some(&c.token()), "");
    assert!(both.starts_with("HTTP/1.1 400") && both.contains("offset and tail do not go together"), "{both}");
}

/// A job's logs followed without `--actor` follow every actor at once: a rank that speaks
/// while rank 0 is quiet is heard then, not once rank 0's attempt has ended (one actor was
/// followed after the other, so a failing node stayed out of sight behind rank 0's). Lines of
/// different actors never mix, and each run of lines is under its actor's header.
#[test]
fn logs_follow_every_actor_at_once_in_whole_lines() {
    let c = Cluster::start(&["n1", "n2"]);
    let gate = c.dir.path().join("gate");
    let script = format!(
        r#"if [ "$RANK" = 1 ]; then echo early; printf 'no newline'; else echo first; while [ ! -e {} ]; do sleep 0.1; done; echo last; fi"#,
        gate.display()
    );
    let spec = c.spec("two", json!({"command": ["sh", "-c", script], "min_nodes": 2, "max_nodes": 2}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "both ranks ran", |j| j["actors"].as_array().unwrap().iter().all(|a| a["attempt"] == 1));
    let mut follower =
        c.command().args(["logs", &id, "--follow"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let lines = lines_of(follower.stdout.take().unwrap());
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l == "early") {
        let Ok(line) = lines.recv_timeout(WAIT) else {
            follower.kill().unwrap();
            std::fs::write(&gate, "").unwrap();
            panic!("no line of rank 1 while rank 0 still runs: {seen:?}");
        };
        seen.push(line);
    }
    std::fs::write(&gate, "").unwrap();
    let status = follower.wait().unwrap();
    seen.extend(lines.iter());
    assert_eq!(status.code(), Some(0), "{seen:?}");
    let header = |rank_line: &str| {
        let at = seen.iter().position(|l| l == rank_line).unwrap_or_else(|| panic!("no {rank_line}: {seen:?}"));
        seen[..at].iter().rev().find(|l| l.starts_with("==> ")).cloned().unwrap_or_default()
    };
    let (rank0, rank1) = (header("first"), header("early"));
    assert!(rank0.starts_with(&format!("==> {id}/")) && rank1.starts_with(&format!("==> {id}/")), "{seen:?}");
    assert_ne!(rank0, rank1, "each rank's lines under its own header: {seen:?}");
    assert_eq!(header("last"), rank0, "{seen:?}");
    assert_eq!(header("no newline"), rank1, "an unfinished last line ends with its log: {seen:?}");
}

/// A line longer than a follower holds back goes out unfinished; the next actor's header
/// still starts a line of its own, as `tail` puts it (it was glued to the cut line's end).
#[test]
fn a_header_after_a_cut_line_starts_a_line_of_its_own() {
    let c = Cluster::start(&["n1", "n2"]);
    let script = r#"head -c 300000 /dev/zero | tr '\0' b; sleep 2; echo; echo "end $RANK""#;
    let spec = c.spec("long", json!({"command": ["sh", "-c", script], "min_nodes": 2, "max_nodes": 2}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "both ranks ran", |j| j["actors"].as_array().unwrap().iter().all(|a| a["attempt"] == 1));
    let out = c.command().args(["logs", &id, "--follow"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let shown = String::from_utf8(out.stdout).unwrap();
    assert_eq!(shown.matches('b').count(), 600_000, "every byte of both ranks");
    let headers = shown.match_indices("==> ").map(|(at, _)| at);
    let glued: Vec<usize> = headers.filter(|at| *at > 0 && shown.as_bytes()[at - 1] != b'\n').collect();
    assert!(glued.is_empty(), "headers in mid-line at {glued:?}");
    assert!(shown.contains("\nend 0\n") && shown.contains("\nend 1\n"));
}

/// A follower that began on attempt 1 stays on it: the retry that starts while it is polling
/// is a different file, and reading it at attempt 1's byte offset would print the middle of
/// someone else's output. `--follow` ends with its attempt, as `kubectl logs -f` does, and
/// exits 1 when that attempt failed though the job goes on.
/// Files named `name` anywhere under `dir`.
fn find_files(dir: &std::path::Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(find_files(&path, name));
        } else if path.file_name().is_some_and(|n| n == name) {
            found.push(path);
        }
    }
    found
}

/// A job that prints without end does not fill its node's disk: with `--max-log-mb 1` its
/// 6 MiB log keeps its end on disk, and `ftdrive logs` says how much was dropped before it.
/// The job ends as soon as it has printed: the bound holds for what stays on disk after it,
/// whatever the rate (looked at once a second, and not at the end, a log kept 874 MB of 50).
#[test]
fn a_log_past_the_agents_bound_keeps_its_end_and_says_what_was_dropped() {
    let mut c = Cluster::start(&[]);
    let node = c.node_command("n1").args(["--max-log-mb", "1"]).spawn().unwrap();
    c.nodes.insert("n1".into(), node);
    c.wait_until("n1 registered", |c| c.nodes_json().as_array().unwrap().len() == 1);
    let script = "import sys\nline = 'x' * 1023 + '\\n'\nfor _ in range(6 * 1024): sys.stdout.write(line)\nprint('the end', flush=True)";
    let spec = json!({"command": ["python3", "-c", script], "min_nodes": 1, "max_nodes": 1});
    let id = c.submit_no_wait(&c.spec("loud", spec));
    c.wait_for_job(&id, "the job ends", |j| j["state"] == "SUCCEEDED" || j["state"] == "FAILED");

    let log = find_files(c.dir.path(), "attempt-1.log").pop().expect("the attempt's log");
    let meta = std::fs::metadata(&log).unwrap();
    let on_disk = std::os::unix::fs::MetadataExt::blocks(&meta) * 512;
    assert!(meta.len() > 6 << 20, "the log's offsets are those of all it was written");
    assert!(on_disk <= 1 << 20, "{on_disk} bytes on disk");
    let shown = c.ftdrive(&["logs", &id]);
    assert!(
        shown.starts_with("[ftdrive: ") && shown.contains(" bytes of this log were dropped here"),
        "{}",
        &shown[..200]
    );
    assert!(shown.ends_with("x\nthe end\n"));
    assert!(shown.len() < 1 << 20, "{} bytes shown", shown.len());
}

/// The output of `child`, once it exits; a panic (and the child killed) if it is still
/// running after `wait`. Its output must fit its pipes.
fn output_within(mut child: std::process::Child, wait: Duration) -> std::process::Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > wait {
            let _ = child.kill();
            panic!("still running after {wait:?}: {:?}", child.wait_with_output().unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Followers of jobs that retention forgets as soon as they end (`--retain-finished 0`, or a
/// burst of others ending) exit with the job's outcome: they hung after its end, or exited 2
/// on the head's 404. Asked for later, the job is said to be forgotten, not unknown.
#[test]
fn followers_of_a_job_forgotten_as_it_ends_exit_with_its_outcome() {
    let c = Cluster::start_with(&["n1", "n2"], &["--retain-finished", "0"]);
    let spec = c.spec("brief", json!({"command": ["sh", "-c", "sleep 0.5"], "min_nodes": 1, "max_nodes": 1}));
    let followers: Vec<_> = (0..4)
        .map(|_| c.command().arg("submit").arg(&spec).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap())
        .collect();
    for follower in followers {
        let out = output_within(follower, WAIT);
        let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{said}");
        assert!(said.contains(" SUCCEEDED"), "{said}");
    }
    let out = c.try_ftdrive(&["status", "j1"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("job `j1` has ended and was forgotten"), "{said}");
    // Its logs are out of the head's reach: where they stay on the nodes is said, and is so.
    let out = c.try_ftdrive(&["logs", "j1"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(2) && said.contains("under `node-NAME/logs/j1/` in each agent's `--state-dir`"),
        "{said}"
    );
    let kept = ["n1", "n2"].iter().filter(|n| c.dir.path().join(format!("node-{n}/logs/j1/0")).is_dir()).count();
    assert_eq!(kept, 1, "the node that ran j1/0 keeps its log there");
    let out = c.try_ftdrive(&["status", "j99"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no job `j99`"));
}

/// `--keep-logs-hours`: an agent deletes the logs of attempts that ended longer ago than that,
/// and never those of an attempt that runs, however long it has been silent.
#[test]
fn an_agent_deletes_old_logs_of_ended_attempts_and_keeps_a_running_ones() {
    // Room to start the agent again before its supervisors give up on it.
    let mut c = Cluster::start_with(&[], &["--node-timeout-ms", "5000"]);
    let first = c.node_command("n1").spawn().unwrap();
    c.nodes.insert("n1".into(), first);
    c.wait_until("n1 registered", |c| c.nodes_json().as_array().unwrap().len() == 1);
    let job = |name: &str, script: &str| {
        let spec = json!({"command": ["sh", "-c", script], "min_nodes": 1, "max_nodes": 1});
        c.submit_no_wait(&c.spec(name, spec))
    };
    let ended = job("ended", "echo done");
    c.wait_for_job(&ended, "it succeeds", |j| j["state"] == "SUCCEEDED");
    let silent = job("silent", "echo started; exec sleep 120");
    c.wait_for_job(&silent, "it runs", |j| running(j, 1));
    let log_of = |id: &str| {
        let logs = find_files(c.dir.path(), "attempt-1.log");
        logs.into_iter().find(|p| p.parent().and_then(|a| a.parent()).is_some_and(|j| j.ends_with(id))).unwrap()
    };
    let (ended_log, silent_log) = (log_of(&ended), log_of(&silent));
    c.wait_until("the silent job wrote its line", |_| std::fs::read_to_string(&silent_log).unwrap() == "started\n");
    let ten_days_ago = std::time::SystemTime::now() - Duration::from_secs(10 * 86_400);
    for log in [&ended_log, &silent_log] {
        std::fs::File::options().append(true).open(log).unwrap().set_modified(ten_days_ago).unwrap();
    }
    c.kill_node("n1");
    let again = c.node_command("n1").args(["--keep-logs-hours", "24"]).spawn().unwrap();
    c.nodes.insert("n1".into(), again);
    c.wait_until("the ended attempt's log is deleted", |_| !ended_log.exists());
    assert!(!ended_log.parent().unwrap().exists(), "with the directories it leaves empty");
    assert!(silent_log.exists(), "a running attempt's log stays");
    assert_eq!(c.job(&silent)["actors"][0]["attempt"], 1, "the silent job was re-attached, not restarted");
    assert_eq!(c.ftdrive(&["logs", &silent]), "started\n");
}

#[test]
fn a_log_follower_keeps_to_its_attempt_when_a_retry_starts() {
    let c = Cluster::start(&["n1"]);
    let script = r#"if [ "$FTDRIVE_ATTEMPT" = 1 ]; then for i in 1 2 3 4; do echo first $i; sleep 0.3; done; exit 3;
                    else printf 'second attempt %0300d\n' 0; sleep 2; fi"#;
    let spec = c.spec(
        "retried",
        json!({"command": ["sh", "-c", script], "min_nodes": 1, "max_nodes": 1,
               "retries": {"user": 1, "backoff_ms": {"initial": 1, "max": 1}}}),
    );
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it runs", |j| running(j, 1));
    let followed = c.try_ftdrive(&["logs", &id, "--follow"]);
    let expected: String = (1..=4).map(|i| format!("first {i}\n")).collect();
    assert_eq!(
        String::from_utf8_lossy(&followed.stdout),
        expected,
        "followed attempt 1 to its end and nothing of attempt 2"
    );
    let said = String::from_utf8_lossy(&followed.stderr);
    assert_eq!(followed.status.code(), Some(1), "attempt 1 failed: {said}");
    assert!(said.contains(&format!("{id}/0 attempt 1 ended user_error; the job goes on")), "{said}");
    assert!(said.contains(&format!("`ftdrive status {id} --follow --logs` follows its next attempts")), "{said}");
    c.wait_for_job(&id, "the retry succeeds", |j| j["state"] == "SUCCEEDED");
    assert!(c.ftdrive(&["logs", &id, "--actor", "0"]).starts_with("second attempt 000"), "the latest is attempt 2");
}

/// Logs of a job still PENDING: without `--follow` a plain "not started yet" and why; with it,
/// the follower waits for the actor to start, as `submit` waits for a PENDING job.
#[test]
fn logs_of_a_pending_job_say_why_and_follow_waits_for_the_start() {
    let mut c = Cluster::start(&["n1"]);
    let spec = c.spec(
        "waits",
        json!({"command": ["sh", "-c", "echo hello from $FTDRIVE_ACTOR"], "min_nodes": 2, "max_nodes": 2}),
    );
    let id = c.submit_no_wait(&spec);
    let now = c.try_ftdrive(&["logs", &id, "--actor", "0"]);
    let said = String::from_utf8_lossy(&now.stderr);
    assert_eq!(now.status.code(), Some(1), "{said}");
    assert!(said.contains(&format!("{id}/0 has not started yet (the job is PENDING")), "{said}");
    assert!(said.contains(&format!("`ftdrive logs {id} --actor 0 --follow` waits for it")), "{said}");

    let follower = c
        .command()
        .args(["logs", &id, "--actor", "1", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(600)); // polling a PENDING job, not given up
    c.add_node("n2");
    let out = follower.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("hello from {id}/1\n"));
    c.wait_for_job(&id, "it succeeds", |j| j["state"] == "SUCCEEDED");

    // A job stopped before anything of it started: its follower exits with its outcome.
    let never = c.submit_no_wait(&c.spec("never", json!({"command": ["true"], "min_nodes": 3, "max_nodes": 3})));
    let follower = c.command().args(["logs", &never, "--follow"]).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(600)); // polling a PENDING job
    c.ftdrive(&["stop", &never]);
    let out = follower.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "STOPPED, as any follower of a stopped job: {said}");
    assert!(said.contains(&format!("no actor of {never} has started, and the job ended STOPPED")), "{said}");
}

/// `ftdrive logs j1 --follow | head -1`: once the reader has gone, the follower ends as
/// `tail -f` does (exit 141, SIGPIPE's status) instead of following for ever; the job runs on.
#[test]
fn a_log_follower_whose_reader_went_away_ends() {
    use std::io::BufRead;
    let c = Cluster::start(&["n1"]);
    let spec = c.spec(
        "endless",
        json!({"command": ["sh", "-c", "while true; do echo tick; sleep 0.1; done"], "min_nodes": 1, "max_nodes": 1}),
    );
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it runs", |j| running(j, 1));
    let mut follower =
        c.command().args(["logs", &id, "--follow"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut first = String::new();
    std::io::BufReader::new(follower.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert_eq!(first, "tick\n");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = follower.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > WAIT {
            follower.kill().unwrap();
            panic!("the follower went on writing into a closed pipe");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut follower.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(141), "{stderr}");
    assert_eq!(stderr, "", "nothing to say");
    assert_eq!(c.job(&id)["state"], "RUNNING");
}

/// A list carries each job's newest 100 ledger entries and counts the rest; the job's own
/// document has them all. A job retried without bound carried up to 100,000 in every list.
#[test]
fn a_list_carries_the_newest_of_a_long_ledger_and_counts_the_rest() {
    let c = Cluster::start(&["n1"]);
    let retries = json!({"user": 104, "backoff_ms": {"initial": 1, "max": 1}});
    let spec = c.spec("crashes", json!({"command": ["false"], "min_nodes": 1, "max_nodes": 1, "retries": retries}));
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "it fails at last", |j| j["state"] == "FAILED");
    let ledger = job["ledger"].as_array().unwrap();
    assert_eq!(ledger.len(), 105, "one job's document has every attempt");
    assert!(job.get("ledger_omitted").is_none(), "{:?}", job.get("ledger_omitted"));
    let list: serde_json::Value = serde_json::from_str(&c.ftdrive(&["status", "--output", "json"])).unwrap();
    let listed = &list[0];
    assert_eq!(listed["ledger_omitted"], 5);
    assert_eq!(listed["ledger"].as_array().unwrap()[..], ledger[5..], "the newest 100");
}

/// `ftdrive logs j1 | less`: a reader slower than the head's idle limit on a connection (5 s)
/// still gets the whole log. The client reused the connection it fetched the first MiB on,
/// which the head had closed meanwhile, and exited 4 saying the head could not be reached.
#[test]
fn a_slow_reader_of_a_long_log_gets_all_of_it() {
    use std::io::Read;
    let c = Cluster::start(&["n1"]);
    let lines = 30_000; // 100 bytes each: about 3 MiB, three of the client's requests
    let print = format!("i=0; while [ $i -lt {lines} ]; do printf '%099d\\n' $i; i=$((i+1)); done");
    let spec = c.spec("chatty", json!({"command": ["sh", "-c", print], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it succeeds", |j| j["state"] == "SUCCEEDED");
    let mut reader = c.command().args(["logs", &id]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_secs(6)); // the pipe is full long before
    let mut out = Vec::new();
    reader.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    let mut stderr = String::new();
    reader.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(reader.wait().unwrap().success(), "{stderr}");
    assert_eq!(out.len(), lines * 100, "{stderr}");
}

#[test]
fn an_agent_stopped_with_sigterm_drains_its_work_as_preempted() {
    let mut c = Cluster::start(&["n1", "n2"]);
    let spec = c.spec(
        "moved",
        json!({"command": ["sh", "-c", LONG_THEN_SHORT], "min_nodes": 1, "max_nodes": 1, "stop_grace_ms": 1000}),
    );
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "it runs", |j| running(j, 1));
    let (_, node) = actor_on_rank(&job, 0);
    let mut agent = c.nodes.remove(&node).unwrap();
    // SAFETY: signalling a child process we started.
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    let status = agent.wait().unwrap();
    assert!(status.success(), "the agent exits cleanly after draining: {status:?}");
    let job = c.wait_for_job(&id, "it succeeds on the other node", |j| j["state"] == "SUCCEEDED");
    assert_eq!(
        (job["ledger"][0]["cause"].as_str(), job["ledger"][0]["budget"].as_str()),
        (Some("preempted"), Some("preemption")),
        "{job:#}"
    );
}

/// An idle agent has nothing to stop, so it exits as soon as it has told the head: its notice
/// must reach the head first (closing the link at once lost it in most tries).
#[test]
fn idle_agents_stopped_with_sigterm_tell_the_head_before_they_exit() {
    let names = ["n1", "n2", "n3", "n4"];
    let mut c = Cluster::start(&names);
    c.wait_until("every agent registered", |c| c.nodes_json().as_array().unwrap().len() == names.len());
    for name in names {
        let mut agent = c.nodes.remove(name).unwrap();
        // SAFETY: signalling a child process we started.
        unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
        assert!(agent.wait().unwrap().success(), "{name} exits cleanly");
    }
    c.wait_until("the head heard every notice", |c| {
        c.nodes_json().as_array().unwrap().iter().all(|n| n["leaving"] == true)
    });
}

/// The README's first command: the demo on an embedded local cluster, nothing set up.
#[test]
fn the_readme_command_runs_the_demo_to_success() {
    let state = tempfile::tempdir().unwrap();
    // A finished run of an earlier cluster's j1 (ids start again on a fresh cluster) must not
    // be resumed: the first cycle starts at step 1.
    let stale = state.path().join("ftdrive-ring/j1");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("checkpoint.json"), r#"{"step": 30, "world_size": 3, "total": 1.0}"#).unwrap();
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = submit_locally(state.path(), repo, &["examples/jobs/ring.json".as_ref()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("job j1 (ring-allreduce) SUCCEEDED"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let dashboard = stderr.lines().find_map(|l| l.strip_prefix("dashboard: ")).expect("the dashboard's URL");
    assert!(dashboard.starts_with("http://127.0.0.1:") && dashboard.ends_with("/#/jobs/j1"), "{dashboard}");
    let logs: Vec<PathBuf> =
        walk(&state.path().join("local")).into_iter().filter(|p| p.ends_with("attempt-1.log")).collect();
    let rank0 =
        logs.iter().map(|p| std::fs::read_to_string(p).unwrap()).find(|l| l.contains("done:")).expect("rank 0's log");
    assert!(rank0.contains("starting at step 1 of 30"), "{rank0}");
    assert!(rank0.contains("done: steps=30 total=2790.0 world=3"), "{rank0}");
}

/// On an embedded cluster SIGTERM (a CI runner's timeout) stops the job as Ctrl-C does, and a
/// second signal ends the command at once instead of waiting out the job's stop grace; no
/// process of the job outlives it.
#[test]
fn an_embedded_cluster_stops_its_job_on_sigterm_and_a_second_signal_kills_it_now() {
    use std::io::BufRead;
    let state = tempfile::tempdir().unwrap();
    let mark = format!("embedded-{}", std::process::id());
    let job = state.path().join("stubborn.json");
    let spec = json!({"name": "stubborn", "command": ["sh", "-c", "trap 'sleep 300' TERM; sleep 300 & wait"],
                      "min_nodes": 1, "max_nodes": 1, "stop_grace_ms": 120000, "env": {"FTDRIVE_TEST_MARK": mark}});
    std::fs::write(&job, spec.to_string()).unwrap();
    let mut submit = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
        .args(["submit", "--local-nodes", "1"])
        .arg(&job)
        .env("FTDRIVE_STATE_DIR", state.path())
        .env_remove("FTDRIVE_HEAD")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(submit.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("RUNNING on") {
        assert!(stdout.read_line(&mut seen).unwrap() > 0, "the follower showed the job running: {seen}");
    }
    let marked = || -> Vec<u32> {
        let needle = format!("FTDRIVE_TEST_MARK={mark}");
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
            .filter(|pid| {
                let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
                env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) && !is_zombie(*pid)
            })
            .collect()
    };
    let start = Instant::now();
    while marked().len() < 2 {
        assert!(start.elapsed() < Duration::from_secs(30), "the job's processes never showed");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: signalling a child process we started.
    unsafe { libc::kill(submit.id() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(500));
    assert!(submit.try_wait().unwrap().is_none(), "SIGTERM stops the job, the command follows it");
    // SAFETY: as above.
    unsafe { libc::kill(submit.id() as i32, libc::SIGINT) };
    let start = Instant::now();
    let status = loop {
        if let Some(status) = submit.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "a second signal ends the command without the grace");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut submit.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(3), "STOPPED: {stderr}");
    assert!(stderr.contains("stopping j1") && stderr.contains("killing what is left of j1 now"), "{stderr}");
    let start = Instant::now();
    while !marked().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(30), "the job's processes outlived the command: {:?}", marked());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `ftdrive submit ARGS` with no head configured, as on a new machine: the embedded cluster,
/// its state and temporary files in `state`, run from `cwd`.
fn submit_locally(state: &std::path::Path, cwd: &std::path::Path, args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ftdrive"))
        .arg("submit")
        .args(args)
        .current_dir(cwd)
        .env("FTDRIVE_STATE_DIR", state)
        .env("TMPDIR", state)
        .env_remove("FTDRIVE_HEAD")
        .env_remove("FTDRIVE_TOKEN")
        .output()
        .unwrap()
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// A clean stop leaves the database whole in `state.db`, its WAL empty: a copy of that one
/// file, taken while the head is down, is the cluster's whole state.
#[test]
fn the_head_stops_cleanly_on_sigterm_with_its_database_in_one_file() {
    let mut c = Cluster::start(&["n1"]);
    let spec = c.spec("done", json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it ends", |j| j["state"] == "SUCCEEDED");
    let wal = c.dir.path().join("state.db-wal");
    assert!(std::fs::metadata(&wal).unwrap().len() > 0, "a running head writes through its WAL");
    let status = c.stop_head();
    assert!(status.success(), "{status:?}");
    assert_eq!(std::fs::metadata(&wal).map_or(0, |m| m.len()), 0, "the WAL is copied back at a clean stop");
    let copy = tempfile::tempdir().unwrap();
    std::fs::copy(c.dir.path().join("state.db"), copy.path().join("state.db")).unwrap();
    let db = rusqlite::Connection::open(copy.path().join("state.db")).unwrap();
    let state: String = db.query_row("SELECT state FROM jobs WHERE id = ?1", [&id], |r| r.get(0)).unwrap();
    assert_eq!(state, "SUCCEEDED");
}

/// An agent started before its head (with no token file yet) waits for both, and registers
/// once the head has come and made its token.
#[test]
fn an_agent_started_before_its_head_connects_when_the_head_comes() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let mut agent = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
        .args(["node", "--head", &listen, "--name", "early", "--resources", "cpu=1"])
        .arg("--state-dir")
        .arg(dir.path())
        .env_remove("FTDRIVE_TOKEN")
        .env("FTDRIVE_LOG", "error")
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    assert!(agent.try_wait().unwrap().is_none(), "the agent waits for its head");
    let mut head = spawn_head(dir.path(), &listen, &[]);
    let nodes = || {
        Command::new(env!("CARGO_BIN_EXE_ftdrive"))
            .args(["nodes", "--output", "json", "--head", &listen])
            .env_remove("FTDRIVE_TOKEN")
            .env("FTDRIVE_STATE_DIR", dir.path())
            .output()
            .unwrap()
    };
    let start = Instant::now();
    loop {
        let out = nodes();
        if out.status.success() && String::from_utf8_lossy(&out.stdout).contains("early") {
            break;
        }
        assert!(start.elapsed() < WAIT, "the agent never registered");
        std::thread::sleep(Duration::from_millis(100));
    }
    for child in [&mut agent, &mut head] {
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn ctrl_c_detaches_and_says_how_to_follow_or_stop() {
    use std::io::BufRead;
    let c = Cluster::start(&["n1"]);
    let spec = c.spec("detach", json!({"command": ["sleep", "600"], "min_nodes": 1, "max_nodes": 1}));
    let mut follower =
        c.command().arg("submit").arg(&spec).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdout = std::io::BufReader::new(follower.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("now  job j1") {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "the follower printed where the job stands");
    }
    // SAFETY: signalling a child process we started.
    unsafe { libc::kill(follower.id() as i32, libc::SIGINT) };
    let out = follower.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "not 0, which says the job succeeded: {stderr}");
    assert!(
        stderr.contains("detached from j1")
            && stderr.contains("ftdrive stop j1")
            && stderr.contains("ftdrive status j1 --follow"),
        "{stderr}"
    );
    assert_eq!(c.job("j1")["state"], "RUNNING", "the job keeps running");

    // Followed again, to its end: the exit code is its outcome, as submit's is.
    let again = c.command().args(["status", "j1", "-f"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
    let mut again = again.unwrap();
    let mut stdout = std::io::BufReader::new(again.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("job j1") {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "the second follower printed where the job stands");
    }
    c.ftdrive(&["stop", "j1"]);
    let rest: Vec<String> = stdout.lines().map(|l| l.unwrap()).collect();
    let out = again.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "STOPPED: {}", String::from_utf8_lossy(&out.stderr));
    assert!(rest.iter().any(|l| l.contains("job j1 STOPPED")), "{rest:?}");
    let refused = c.try_ftdrive(&["status", "--follow"]);
    assert_eq!(refused.status.code(), Some(2), "--follow needs a job");
}

/// DESIGN §3: a machine that joins right after a node is lost, before the loss is confirmed,
/// goes to the running job whose bundle was there, not to a pending job.
#[test]
fn a_node_joining_while_another_is_suspect_goes_to_the_running_job() {
    let mut c = Cluster::start(&["n1", "n2"]);
    let a = c.spec("a", json!({"command": ["sh", "-c", LONG_THEN_SHORT], "min_nodes": 2, "max_nodes": 2}));
    let a = c.submit_no_wait(&a);
    let job = c.wait_for_job(&a, "a runs", |j| running(j, 2));
    let b = c.spec("b", json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1}));
    let b = c.submit_no_wait(&b);
    let (lost_actor, lost_node) = actor_on_rank(&job, 1);
    c.kill_node(&lost_node); // its connection drops: suspect at once, DEAD after the timeout
    c.add_node("n3");
    let a_after = c.wait_for_job(&a, "a's bundle is re-placed on n3", |j| {
        j["actors"].as_array().unwrap().iter().any(|x| x["name"] == lost_actor.as_str() && x["node"] == "n3")
    });
    assert_eq!(a_after["ledger"][0]["cause"], "node_lost", "{a_after:#}");
    let b_view = c.job(&b);
    assert!(b_view["actors"][0]["node"].is_null(), "b did not take n3: {b_view:#}");
    c.wait_for_job(&b, "b runs once a is done", |j| j["state"] == "SUCCEEDED");
}

/// A command that ends at once may have its supervisor record the end and go before the agent
/// connects to it: that is a start and an exit, never a spawn failure.
#[test]
fn commands_that_end_at_once_succeed() {
    let c = Cluster::start(&["n1", "n2"]);
    let spec = c.spec("instant", json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1}));
    let ids: Vec<String> = (0..12).map(|_| c.submit_no_wait(&spec)).collect();
    for id in ids {
        let job = c.wait_for_job(&id, "it ends", |j| j["state"] != "PENDING" && j["state"] != "RUNNING");
        assert_eq!(job["state"], "SUCCEEDED", "{job:#}");
    }
}

/// A gang larger than the cluster waits, and the follower's first lines say why (the reason
/// was settled at submission, before the follower subscribed to events).
#[test]
fn a_gang_larger_than_the_cluster_says_why_it_waits() {
    use std::io::BufRead;
    let c = Cluster::start(&["n1"]);
    let spec = c.spec("wide", json!({"command": ["true"], "min_nodes": 2, "max_nodes": 2}));
    let mut follower =
        c.command().arg("submit").arg(&spec).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut stdout = std::io::BufReader::new(follower.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("j1/1 SCHEDULING") {
        assert!(stdout.read_line(&mut seen).unwrap() > 0, "the follower printed where the job stands: {seen}");
    }
    // SAFETY: signalling a child process we started.
    unsafe { libc::kill(follower.id() as i32, libc::SIGINT) };
    follower.wait().unwrap();
    assert!(
        seen.contains(
            "now  infeasible: min_nodes 2 with STRICT_SPREAD needs 2 distinct nodes, and only 1 node(s), DEAD ones"
        ),
        "{seen}"
    );
    assert_eq!(c.job("j1")["state"], "PENDING");
    let out = c.try_ftdrive(&["submit", "--no-wait", spec.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "accepted: {stderr}");
    assert!(stderr.starts_with("ftdrive: j2 waits: infeasible: min_nodes 2 with STRICT_SPREAD"), "{stderr}");
}

/// A job that fits the cluster but finds it busy says so, with the job that holds the room, in
/// the job list and in its own status; once the room is free it runs and the reason is gone.
#[test]
fn a_job_waiting_for_a_busy_node_names_the_job_holding_it() {
    let c = Cluster::start(&["n1"]);
    let holder =
        c.submit_no_wait(&c.spec("holder", json!({"command": ["sleep", "30"], "min_nodes": 1, "max_nodes": 1})));
    c.wait_for_job(&holder, "it runs", |j| j["actors"][0]["state"] == "RUNNING");
    let waiter = c.submit_no_wait(&c.spec("waiter", json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1})));
    let why = format!(
        "waiting for capacity: needs 1 node with room for a bundle of cpu=1 (STRICT_SPREAD), and 0 of the 1 \
         matching node(s) have it now; in use by {holder}"
    );
    let list = c.ftdrive(&["status"]);
    let row = list.lines().find(|l| l.starts_with(&waiter)).expect("the waiter is listed");
    assert!(row.contains("PENDING") && row.ends_with(&why), "{list}");
    assert!(c.ftdrive(&["status", &waiter]).contains(&format!("\n  {why}\n")));
    c.ftdrive(&["stop", &holder]);
    let done = c.wait_for_job(&waiter, "it runs once the room is free", |j| j["state"] == "SUCCEEDED");
    assert!(done["waiting"].is_null(), "{done:#}");
}

/// Two agents on one machine with room for one agent's ports (PS-2): the second takes no bundle.
/// `ftdrive nodes` says which and what to change, its JSON how many ports each may still take,
/// and a job that needs both nodes waits naming the port, not a busy cluster. Once the other
/// dies, its ports are the short node's.
#[test]
fn a_node_left_no_port_by_its_machine_is_shown_so_and_named_by_a_waiting_job() {
    let mut c = Cluster::start_with(&["n1", "n2"], &["--master-port-base", "64536", "--ports-per-node", "1000"]);
    let nodes = c.nodes_json();
    let left: BTreeMap<String, u64> = nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["name"].as_str().unwrap().to_string(), n["ports_left"].as_u64().unwrap()))
        .collect();
    let portless: Vec<&String> = left.iter().filter(|(_, l)| **l == 0).map(|(n, _)| n).collect();
    assert_eq!(portless.len(), 1, "the first to join took all 1000 ports: {nodes:#}");
    assert_eq!(left.values().sum::<u64>(), 1000, "{nodes:#}");
    let table = c.ftdrive(&["nodes"]);
    assert!(
        table.contains(&format!(
            "node {} takes no bundles: it has no rendezvous port left, as a machine's agents share its ports",
            portless[0]
        )),
        "{table}"
    );
    let both = c.submit_no_wait(&c.spec("both", json!({"command": ["true"], "min_nodes": 2, "max_nodes": 2})));
    let waiting = c.wait_for_job(&both, "it waits with a reason", |j| j["waiting"].is_string());
    let why = waiting["waiting"].as_str().unwrap();
    assert!(why.contains("1 have no rendezvous port left") && why.contains("--ports-per-node"), "{why}");
    // The node holding the ports dies: its share is the other's at once, not when it rejoins.
    let (holder, short) = if portless[0] == "n1" { ("n2", "n1") } else { ("n1", "n2") };
    c.ftdrive(&["stop", &both]);
    c.kill_node(holder);
    let ports_of = |c: &Cluster| {
        let nodes = c.nodes_json();
        nodes.as_array().unwrap().iter().find(|n| n["name"] == short).unwrap()["ports_left"].as_u64().unwrap()
    };
    c.wait_until("the short node has the dead one's ports", |c| ports_of(c) == 1000);
    let one = c.submit_no_wait(&c.spec("one", json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1})));
    let done = c.wait_for_job(&one, "it runs on the once short node", |j| j["state"] == "SUCCEEDED");
    assert_eq!(done["actors"][0]["node"], short, "{done:#}");
}

/// A job that runs past its `run_timeout_ms` has its processes stopped and fails saying why,
/// charging no budget; while it runs, `ftdrive status` says when that will be.
#[test]
fn a_job_past_its_run_timeout_is_stopped_and_fails_saying_why() {
    let c = Cluster::start(&["n1", "n2"]);
    // The spec's hour is overridden on the command line, as `sbatch --time` overrides `#SBATCH`.
    let spec = json!({"command": ["sleep", "60"], "min_nodes": 2, "max_nodes": 2, "run_timeout_ms": 3_600_000});
    let spec = c.spec("limited", spec);
    let out =
        c.ftdrive(&["submit", "--no-wait", "--output", "json", "--run-timeout-ms", "3000", spec.to_str().unwrap()]);
    let id = serde_json::from_str::<Value>(&out).unwrap()["id"].as_str().unwrap().to_string();
    c.wait_for_job(&id, "both ranks run", |j| running(j, 2));
    let sleeping = |c: &Cluster| {
        let cmdline = |pid: &u32| std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        c.processes(None).iter().filter(|pid| cmdline(pid).starts_with(b"sleep\x0060")).count()
    };
    c.wait_until("both workers run", |c| sleeping(c) == 2);
    let status = c.ftdrive(&["status", &id]);
    assert!(status.contains("  time limit: stopped and failed in 0:00:0"), "{status}");
    let done = c.wait_for_job(&id, "it fails at its time limit", |j| j["state"] == "FAILED");
    assert_eq!(
        done["message"],
        "ran for its run_timeout_ms (3000 ms), counted from when it first ran; raise it, or null for no limit"
    );
    let ledger = done["ledger"].as_array().unwrap();
    assert!(ledger.iter().all(|e| e["cause"] == "collateral" && e["budget"] == "none"), "{done:#}");
    assert_eq!(ledger.len(), 2, "{done:#}");
    assert!(c.processes(None).is_empty(), "its processes were stopped");
}

/// `submit --env` adds a variable to every process of the job, over the spec's of that name
/// (as `docker run --env` over an image's), leaving the spec's others as they are.
#[test]
fn a_variable_given_on_the_command_line_reaches_the_job_over_the_specs() {
    let state = tempfile::tempdir().unwrap();
    let spec = state.path().join("env.json");
    let check = r#"test "$GREETING" = "from the flag=yes" && test "$KEPT" = file"#;
    let job = json!({"name": "env", "command": ["sh", "-c", check], "min_nodes": 1, "max_nodes": 1,
                     "env": {"GREETING": "from the file", "KEPT": "file"}});
    std::fs::write(&spec, job.to_string()).unwrap();
    let args = ["--local-nodes", "1", "--env", "GREETING=from the flag=yes", spec.to_str().unwrap()];
    let out = submit_locally(state.path(), state.path(), &args.map(std::ffi::OsStr::new));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("job j1 (env) SUCCEEDED"), "{stdout}");
}

/// A job given as its command line alone, as `ray job submit -- …` takes one: named after its
/// program, on `--min-nodes` nodes, run where `submit` runs on an embedded cluster. A command
/// and a spec file together, or neither, are refused before anything starts.
#[test]
fn a_command_after_the_double_dash_is_a_job_of_its_own() {
    let state = tempfile::tempdir().unwrap();
    let cwd = state.path().canonicalize().unwrap();
    let check = format!(r#"test "$WORLD_SIZE" = 2 && test "$(pwd -P)" = "{}" && test "$GREETING" = hi"#, cwd.display());
    let args = ["--local-nodes", "2", "--min-nodes", "2", "--env", "GREETING=hi", "--", "/bin/sh", "-c", &check];
    let out = submit_locally(&cwd, &cwd, &args.map(std::ffi::OsStr::new));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("job j1 (sh) SUCCEEDED") && stdout.contains("j1/1 "),
        "two ranks of a job named sh: {stdout}"
    );
    let named =
        submit_locally(&cwd, &cwd, &["--local-nodes", "1", "--name", "quick", "--", "true"].map(std::ffi::OsStr::new));
    assert!(String::from_utf8_lossy(&named.stdout).contains("(quick) SUCCEEDED"), "{named:?}");
    // `--cwd`, relative: under the agent's work dir, which is where `submit` runs here.
    std::fs::create_dir(cwd.join("sub")).unwrap();
    let check = format!(r#"test "$(pwd -P)" = "{}/sub""#, cwd.display());
    let args = ["--local-nodes", "1", "--cwd", "sub", "--", "sh", "-c", &check];
    let moved = submit_locally(&cwd, &cwd, &args.map(std::ffi::OsStr::new));
    assert_eq!(moved.status.code(), Some(0), "{}", String::from_utf8_lossy(&moved.stdout));
    for (args, said) in [
        (&["--cwd", "", "--", "true"][..], "--cwd : is empty"),
        (&["spec.json", "--", "true"][..], "spec.json and a command after `--`: give one"),
        (&[][..], "no job given: name a job spec file"),
        (&["--", ""][..], "the command after `--`: job spec field `command`: is empty"),
    ] {
        let refused = submit_locally(&cwd, &cwd, &args.iter().map(std::ffi::OsStr::new).collect::<Vec<_>>());
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(said) && !stderr.contains("local cluster:"), "{args:?}, nothing started: {stderr}");
    }
}

/// `ftdrive completions bash`, sourced by a real bash, completes commands, flags and values
/// from the command line's own definition.
#[test]
fn bash_completes_commands_and_flags_from_the_completion_script() {
    let complete = |line: &str| {
        let script = format!(
            r#"source <("{bin}" completions bash) && COMP_LINE='{line}' && read -ra COMP_WORDS <<< "$COMP_LINE" && \
               {{ [[ "$COMP_LINE" != *" " ]] || COMP_WORDS+=(""); }} && \
               COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)) && COMP_POINT=${{#COMP_LINE}} && \
               _ftdrive ftdrive "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}" && echo "${{COMPREPLY[@]}}""#,
            bin = env!("CARGO_BIN_EXE_ftdrive")
        );
        let out = Command::new("bash").args(["-c", &script]).output().unwrap();
        assert!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    assert_eq!(complete("ftdrive lo"), "logs");
    assert_eq!(complete("ftdrive submit --dr"), "--dry-run");
    assert_eq!(complete("ftdrive status --output j"), "json");
    let shells = complete("ftdrive completions ");
    assert!(shells.split(' ').any(|s| s == "zsh"), "{shells}");
    let refused = Command::new(env!("CARGO_BIN_EXE_ftdrive")).args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("possible values: bash, elvish, fish, powershell, zsh"));
}

/// `submit --dry-run` prints the whole spec the head would take and starts nothing: made from
/// a command line, it is a spec file that submits as the same job; a bad one exits 2 as a
/// submission does.
#[test]
fn a_dry_run_prints_the_whole_spec_and_starts_nothing() {
    let state = tempfile::tempdir().unwrap();
    let args = ["--dry-run", "--min-nodes", "2", "--env", "A=b", "--", "python3", "train.py"];
    let out = submit_locally(state.path(), state.path(), &args.map(std::ffi::OsStr::new));
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{printed}\n{}", String::from_utf8_lossy(&out.stderr));
    let spec: Value = serde_json::from_str(&printed).unwrap();
    assert_eq!((&spec["name"], &spec["min_nodes"], &spec["max_nodes"]), (&json!("train.py"), &json!(2), &json!(2)));
    assert_eq!((&spec["env"], &spec["command"]), (&json!({"A": "b"}), &json!(["python3", "train.py"])));
    assert_eq!(spec["retries"]["user"], 0, "the defaults are written out: {printed}");
    let file = state.path().join("made.json");
    std::fs::write(&file, &printed).unwrap();
    let again = submit_locally(state.path(), state.path(), &["--dry-run".as_ref(), file.as_os_str()]);
    assert_eq!(String::from_utf8_lossy(&again.stdout), printed, "the printed spec is the same job's");
    let bad = submit_locally(
        state.path(),
        state.path(),
        &["--dry-run", "--min-nodes", "0", "--", "true"].map(std::ffi::OsStr::new),
    );
    assert_eq!(bad.status.code(), Some(2), "{}", String::from_utf8_lossy(&bad.stderr));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--min-nodes 0: is 0"));
    assert!(!state.path().join("local").exists(), "no embedded cluster was started");
}

/// `submit --logs` prints what every attempt writes, as it writes it, each line under its
/// actor: a retried rank's first and second attempts both, and a last line with no newline,
/// before the job's summary.
#[test]
fn submit_with_logs_prints_every_attempts_output_under_its_actor() {
    let state = tempfile::tempdir().unwrap();
    let spec = state.path().join("retried.json");
    let script = r#"echo "rank $RANK attempt $FTDRIVE_ATTEMPT"; if [ "$FTDRIVE_ATTEMPT" = 1 ] && [ "$RANK" = 1 ]; then exit 3; fi; sleep 0.5; printf 'done, no newline'"#;
    let job = json!({"name": "retried", "command": ["sh", "-c", script], "min_nodes": 2, "max_nodes": 2,
                     "retries": {"user": 1, "backoff_ms": {"initial": 0, "max": 0}}});
    std::fs::write(&spec, job.to_string()).unwrap();
    let args = ["--local-nodes", "2", "--logs", spec.to_str().unwrap()];
    let out = submit_locally(state.path(), state.path(), &args.map(std::ffi::OsStr::new));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    for (actor, rank) in [(0, 0), (1, 1)] {
        for attempt in [1, 2] {
            let said = format!("[j1/{actor}] rank {rank} attempt {attempt}");
            assert!(lines.contains(&said.as_str()), "{said} in:\n{stdout}");
        }
        let last = format!("[j1/{actor}] done, no newline");
        assert_eq!(lines.iter().filter(|l| **l == last).count(), 1, "{last} once, ended, in:\n{stdout}");
    }
    let summary = lines.iter().position(|l| l.starts_with("job j1 (retried) SUCCEEDED")).expect("the summary");
    assert!(lines[summary..].iter().all(|l| !l.starts_with("[j1/")), "every output line before the summary:\n{stdout}");
}

/// A job that failed under `submit --logs` has its failing attempt's output above its summary,
/// printed whole: the summary points to it rather than repeating its last lines. One rank of
/// an actor's two workers (`--logs=1`) is not the whole attempt's output: its lines are shown.
#[test]
fn a_failed_jobs_summary_points_to_output_logs_printed_whole() {
    let failing = ["--", "sh", "-c", r#"echo "last words of $LOCAL_RANK"; exit 3"#];
    let run = |flags: &[&str]| {
        let state = tempfile::tempdir().unwrap();
        let args: Vec<&str> = ["--local-nodes", "1"].iter().chain(flags).chain(&failing).copied().collect();
        let out =
            submit_locally(state.path(), state.path(), &args.iter().map(std::ffi::OsStr::new).collect::<Vec<_>>());
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for flag in ["--logs", "--logs=0"] {
        let whole = run(&[flag]);
        assert_eq!(whole.matches("last words").count(), 1, "{flag}: printed once:\n{whole}");
        let summary = whole.find("job j1 (sh) FAILED").expect("the summary");
        let prefix = if flag == "--logs" { "[j1/0] " } else { "[rank0] " };
        assert!(whole[..summary].contains(&format!("{prefix}last words of 0\n")), "{whole}");
        let above = format!("the output of j1/0 attempt 1 is above, its lines under `{prefix}`");
        assert!(whole[summary..].contains(&above), "{whole}");
    }
    let one_rank = run(&["--nproc-per-node", "2", "--logs=1"]);
    let summary = one_rank.find("job j1 (sh) FAILED").expect("the summary");
    assert!(one_rank[..summary].contains("[rank1] last words of 1\n"), "{one_rank}");
    let tail = &one_rank[summary..];
    assert!(tail.contains("the last lines of j1/0 attempt 1") && tail.contains("last words of 0"), "{one_rank}");
}

/// `status JOB --follow --logs` of a job that has ended prints what every attempt wrote, the
/// failed first one too, as `docker logs -f` prints a container's past output: `submit --logs`
/// of a quick job may likewise first hear of it after its attempts ended.
#[test]
fn following_the_output_of_an_ended_job_prints_every_attempts() {
    let c = Cluster::start(&["n1"]);
    let script = r#"echo "attempt $FTDRIVE_ATTEMPT"; [ "$FTDRIVE_ATTEMPT" != 1 ]"#;
    let spec = c.spec(
        "retried",
        json!({"command": ["sh", "-c", script], "min_nodes": 1, "max_nodes": 1,
               "retries": {"user": 1, "backoff_ms": {"initial": 0, "max": 0}}}),
    );
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it succeeds", |j| j["state"] == "SUCCEEDED");
    for (flag, prefix) in [("--logs", format!("[{id}/0] ")), ("--logs=0", "[rank0] ".to_string())] {
        let out = c.ftdrive(&["status", &id, "--follow", flag]);
        let summary = out.find(&format!("job {id} (retried) SUCCEEDED")).expect("the summary");
        for attempt in [1, 2] {
            let said = format!("{prefix}attempt {attempt}\n");
            assert_eq!(out[..summary].matches(&said).count(), 1, "{flag}: {said:?} once before the summary:\n{out}");
        }
    }
}

/// `submit --logs=1,2` prints those global ranks' output alone, each line under its rank, from
/// the worker that holds it; a rank the job cannot have is refused before anything starts.
#[test]
fn submit_with_logs_of_some_ranks_prints_those_ranks_alone() {
    let state = tempfile::tempdir().unwrap();
    let say = ["--", "sh", "-c", r#"echo "I am rank $RANK, local rank $LOCAL_RANK""#];
    let wide = ["--local-nodes", "2", "--min-nodes", "2", "--nproc-per-node", "2"];
    let args: Vec<&str> = ["--logs=1,2"].iter().chain(&wide).chain(&say).copied().collect();
    let out = submit_locally(state.path(), state.path(), &args.iter().map(std::ffi::OsStr::new).collect::<Vec<_>>());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let mut output: Vec<&str> = stdout.lines().filter(|l| l.starts_with('[')).collect();
    output.sort();
    assert_eq!(output, ["[rank1] I am rank 1, local rank 1", "[rank2] I am rank 2, local rank 0"], "{stdout}");
    let args: Vec<&str> = ["--logs=4"].iter().chain(&wide).chain(&say).copied().collect();
    let refused =
        submit_locally(state.path(), state.path(), &args.iter().map(std::ffi::OsStr::new).collect::<Vec<_>>());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--logs=4: the job has ranks 0 to 3") && !stderr.contains("local cluster:"), "{stderr}");
}

/// The embedded cluster never grows, so a job it can never hold is refused at once (exit 2)
/// with the flag that would let it run, instead of waiting for ever.
#[test]
fn the_local_cluster_refuses_a_job_it_can_never_hold() {
    let state = tempfile::tempdir().unwrap();
    let spec = state.path().join("wide.json");
    std::fs::write(&spec, r#"{"name": "wide", "command": ["true"], "min_nodes": 3, "max_nodes": 3}"#).unwrap();
    let out = submit_locally(state.path(), state.path(), &["--local-nodes".as_ref(), "2".as_ref(), spec.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("can never run on the local cluster's 2 node(s)"), "{stderr}");
    assert!(stderr.contains("Run it with --local-nodes 3"), "{stderr}");
}

/// Each embedded run keeps its state and logs for the user to read, and deletes the runs a
/// week old: left alone, running jobs locally every day filled the disk with their logs.
#[test]
fn a_local_run_deletes_the_runs_of_a_week_ago_and_keeps_its_own() {
    let state = tempfile::tempdir().unwrap();
    let runs = state.path().join("local");
    let old = runs.join("run-old");
    let old_log = old.join("local-0/logs/j1/0/attempt-1.log");
    std::fs::create_dir_all(old_log.parent().unwrap()).unwrap();
    std::fs::write(&old_log, vec![b'x'; 3 << 20]).unwrap();
    let week_ago = std::time::SystemTime::now() - Duration::from_secs(8 * 24 * 3600);
    let mut dirs: Vec<PathBuf> =
        old_log.ancestors().skip(1).take_while(|d| d.starts_with(&old)).map(PathBuf::from).collect();
    dirs.push(old_log.clone());
    for path in dirs {
        std::fs::File::open(&path).unwrap().set_modified(week_ago).unwrap();
    }
    let spec = state.path().join("ok.json");
    std::fs::write(&spec, r#"{"name": "ok", "command": ["true"], "min_nodes": 1, "max_nodes": 1}"#).unwrap();
    let out = submit_locally(state.path(), state.path(), &["--local-nodes".as_ref(), "1".as_ref(), spec.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("deleted 1 old run(s)") && stderr.contains("(3 MiB)"), "{stderr}");
    assert!(!old.exists(), "the week-old run is gone");
    let kept: Vec<String> = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("run-"))
        .collect();
    assert_eq!(kept.len(), 1, "this run's own directory stays: {kept:?}");
    assert!(stderr.contains(&kept[0]), "the run said where it keeps its logs: {stderr}");
}

/// `ftdrive logs JOB` and `status` given no head, after an embedded run (whose cluster ended
/// with its `submit`), say where that run kept the job's output and its state.
#[test]
fn with_no_head_logs_and_status_say_where_an_embedded_run_kept_the_job() {
    let state = tempfile::tempdir().unwrap();
    let args = ["--local-nodes", "2", "--min-nodes", "2", "--", "sh", "-c", "echo kept by $RANK"];
    let out = submit_locally(state.path(), state.path(), &args.map(std::ffi::OsStr::new));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let ask = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
            .args(args)
            .env("FTDRIVE_STATE_DIR", state.path())
            .env_remove("FTDRIVE_HEAD")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let said = ask(&["logs", "j1"]);
    assert!(said.starts_with("ftdrive: no head given: pass --head URL or set $FTDRIVE_HEAD\n"), "{said}");
    let kept = said.split("its output is kept in ").nth(1).expect("where the output is").trim();
    let run = PathBuf::from(kept.split("/local-*/").next().unwrap());
    let logs = walk(&run).into_iter().filter(|p| p.to_string_lossy().contains("/logs/j1/"));
    let mut outputs: Vec<String> = logs.map(|log| std::fs::read_to_string(log).unwrap()).collect();
    outputs.sort();
    assert_eq!(outputs, ["kept by 0\n", "kept by 1\n"], "both ranks' output where it said");
    for asked in [&["status"][..], &["status", "j7"], &["logs", "j7"]] {
        let said = ask(asked);
        let newest = format!(
            "the newest embedded run (`ftdrive submit` with no head) kept its state and logs in {}",
            run.display()
        );
        assert!(said.contains(&newest), "{asked:?}: {said}");
    }
}

/// A follower of an attempt whose machine died ends once the head has declared the node DEAD
/// (rather than waiting for an agent that will not come back), naming what ended it; the whole
/// job's log goes on past that actor to the others.
#[test]
fn a_log_follower_ends_when_its_machine_is_lost_and_the_other_logs_still_show() {
    let mut c = Cluster::start(&["n1", "n2", "n3"]);
    let command = format!("echo up; {LONG_THEN_SHORT}");
    let spec = c.spec("lost", json!({"command": ["sh", "-c", command], "min_nodes": 2, "max_nodes": 2}));
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "both ranks run", |j| running(j, 2));
    let (actor, victim) = actor_on_rank(&job, 1);
    let index = actor.rsplit('/').next().unwrap().to_string();
    let mut follow = c.command();
    follow.args(["logs", &id, "--actor", &index, "--follow"]).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut follower = follow.spawn().unwrap();
    let mut first = String::new();
    let mut stdout = std::io::BufReader::new(follower.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    assert_eq!(first, "up\n", "following attempt 1");
    c.kill_node(&victim);
    let follower = std::sync::Mutex::new(follower);
    c.wait_until("the follower ends", |_| follower.lock().unwrap().try_wait().unwrap().is_some());
    let out = follower.into_inner().unwrap().wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "node {victim} is DEAD: the log of {actor} attempt 1, which the head counts lost with it (a machine \
             only cut off may still run it until it reconnects), stays on that machine"
        )),
        "{said}"
    );

    c.wait_for_job(&id, "it succeeds on the spare node", |j| j["state"] == "SUCCEEDED");
    let all = c.try_ftdrive(&["logs", &id, "--attempt", "1"]);
    let (shown, said) = (String::from_utf8_lossy(&all.stdout), String::from_utf8_lossy(&all.stderr));
    assert_eq!(all.status.code(), Some(1), "{said}");
    let other = if index == "0" { format!("{id}/1") } else { format!("{id}/0") };
    assert!(shown.contains(&format!("==> {other} attempt 1 on ")) && shown.contains("up\n"), "{shown}\n{said}");
    assert!(said.contains(&format!("could not read the log of {actor} (said above)")), "{said}");
}

/// A node whose state dir takes no write (as on a full disk: here its attempts directory is a
/// file) fails no job: the start it could not make is charged to the system budget, nothing
/// new goes there while `ftdrive nodes` says why, the job runs on another node, and once the
/// dir takes writes again the node is offered again.
#[test]
fn a_node_that_cannot_start_work_fails_no_job_and_is_offered_again_once_it_can() {
    let mut c = Cluster::start(&["n1"]);
    let attempts = c.dir.path().join("node-n1").join("attempts");
    let _ = std::fs::remove_dir_all(&attempts);
    std::fs::write(&attempts, b"not a directory").unwrap();
    let spec = c.spec("moves", json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1, "retries": {"user": 0}}));
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "the failed start is in the ledger", |j| j["ledger"].as_array().unwrap().len() == 1);
    assert_ne!(job["state"], "FAILED", "{job:#}");
    assert!(job["waiting"].as_str().unwrap().contains("1 cannot start work"), "{job:#}");
    let entry = &job["ledger"][0];
    assert_eq!((entry["cause"].as_str(), entry["budget"].as_str()), (Some("node_lost"), Some("system")), "{job:#}");
    assert!(entry["evidence"].as_str().unwrap().contains("node n1 could not start the attempt"), "{entry:#}");
    let problem = |c: &Cluster| c.nodes_json()[0]["problem"].as_str().map(str::to_string);
    let said = problem(&c).expect("n1 says why it takes no work");
    assert!(said.contains("attempts"), "{said}");
    let listing = c.ftdrive(&["nodes"]);
    assert!(listing.contains("no new work"), "{listing}");
    let metrics = http(&c.url, "GET", "/metrics", Some(&c.token()), "");
    assert!(metrics.contains("\nftdrive_nodes_unhealthy 1\n"), "{metrics}");

    c.add_node("n2");
    let job = c.wait_for_job(&id, "the job succeeds on n2", |j| j["state"] == "SUCCEEDED");
    assert_eq!(job["ledger"][1]["node"], "n2", "{job:#}");
    assert_eq!(job["remaining"]["user"], 0, "no user retry spent, none needed");

    std::fs::remove_file(&attempts).unwrap();
    c.wait_until("n1 can start work again", |c| problem(c).is_none());
    let again = c.submit_no_wait(&c.spec("again", json!({"command": ["true"], "min_nodes": 2, "max_nodes": 2})));
    c.wait_for_job(&again, "a two-node job runs on both", |j| j["state"] == "SUCCEEDED");
}

/// A disk that still takes the probe's few KiB but has less free than `--min-free-disk-mb`
/// (here a bound no disk meets) takes no new work, saying why: an attempt started there would
/// run with its log lost.
#[test]
fn a_node_whose_disk_is_nearly_full_takes_no_new_work_and_says_why() {
    let mut c = Cluster::start(&[]);
    let agent = c.node_command("n1").args(["--min-free-disk-mb", "1000000000"]).spawn().unwrap();
    c.nodes.insert("n1".into(), agent);
    let problem = |c: &Cluster| c.nodes_json()[0]["problem"].as_str().map(str::to_string);
    c.wait_until("n1 registered, saying why it takes no work", |c| {
        c.nodes_json().as_array().unwrap().len() == 1 && problem(c).is_some()
    });
    let said = problem(&c).unwrap();
    assert!(said.contains("MiB free, under --min-free-disk-mb 1000000000: free space on its disk"), "{said}");
    let id = c.submit_no_wait(&c.spec("waits", json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1})));
    let job = c.wait_for_job(&id, "it says why it waits", |j| j["waiting"].is_string());
    assert!(job["waiting"].as_str().unwrap().contains("1 cannot start work"), "{job:#}");
    assert!(job["ledger"].as_array().unwrap().is_empty(), "nothing was started there: {job:#}");
}

/// A start whose workers have not started within the agent's `--start-timeout-ms` (here its
/// log is a FIFO no one reads, so opening it does not return, as on a hung disk) is killed and
/// charged as the node's failure (`node_lost`, system); the rank starts again once the node
/// takes work again, and the late start, once the FIFO is read, is killed with its workers
/// rather than left running unwatched.
#[test]
fn a_start_that_hangs_is_given_up_and_charged_to_the_node() {
    let mut c = Cluster::start(&[]);
    let log = c.dir.path().join("node-n1/logs/j1/0/attempt-1.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    let fifo = std::ffi::CString::new(log.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let agent = c.node_command("n1").args(["--start-timeout-ms", "1000"]).spawn().unwrap();
    c.nodes.insert("n1".into(), agent);
    c.wait_until("n1 registered", |c| c.nodes_json().as_array().unwrap().len() == 1);
    let script = r#"if [ "$FTDRIVE_ATTEMPT" = 1 ]; then sleep 600; fi"#;
    let spec = c.spec("hung", json!({"command": ["sh", "-c", script], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "its first start is given up", |j| !j["ledger"].as_array().unwrap().is_empty());
    let first = &job["ledger"][0];
    assert_eq!((first["cause"].as_str(), first["budget"].as_str()), (Some("node_lost"), Some("system")), "{job:#}");
    let said = first["evidence"].as_str().unwrap();
    assert!(said.contains("node n1 could not start the attempt: its workers had not started 1000 ms after"), "{said}");
    // The hung open returns now: the supervisor it starts late is killed with its workers.
    let reader = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&log).unwrap();
    let job = c.wait_for_job(&id, "it succeeds", |j| j["state"] == "SUCCEEDED");
    let ledger = job["ledger"].as_array().unwrap();
    assert_eq!((ledger.len(), ledger[1]["attempt"].as_u64()), (2, Some(2)), "{job:#}");
    c.wait_until("nothing of the late start runs", |c| c.processes(None).is_empty());
    let attempts = c.dir.path().join("node-n1").join("attempts");
    c.wait_until("no attempt's records are left", |_| find_files(&attempts, "record.json").is_empty());
    drop(reader);
}

/// A program that succeeded on a node whose state dir takes no record of the end (here the
/// record's path is a directory) is reported as it ended, not as a lost supervisor: the
/// supervisor hands the end to the agent on its connection (SV-2).
#[test]
fn an_end_the_state_dir_takes_no_record_of_still_reaches_the_head() {
    let c = Cluster::start(&["n1"]);
    let spec = c.spec("unrecorded", json!({"command": ["sh", "-c", "sleep 1.5"], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it runs", |j| running(j, 1));
    let attempts = c.dir.path().join("node-n1").join("attempts");
    // The start is confirmed as the supervisor spawns; its record may follow a moment later.
    c.wait_until("the attempt's record is written", |_| find_files(&attempts, "record.json").len() == 1);
    let records = find_files(&attempts, "record.json");
    std::fs::create_dir(records[0].with_file_name("exit")).unwrap();
    let job = c.wait_for_job(&id, "the job ends", |j| j["state"] == "SUCCEEDED" || j["state"] == "FAILED");
    let ledger = job["ledger"].as_array().unwrap();
    assert_eq!(ledger.len(), 1, "one attempt, not a retry after a lost supervisor: {job:#}");
    assert_eq!((ledger[0]["cause"].as_str(), ledger[0]["exit_code"].as_i64()), (Some("completed"), Some(0)), "{job:#}");
}

/// A program's prints do not fail because the disk no longer takes its log (here the log is
/// `/dev/full`, which refuses every write with "No space left on device"): its output reaches
/// the log through a pipe and is dropped there, as a container runtime's log driver drops it.
#[test]
fn a_program_prints_on_though_its_log_takes_no_write() {
    let c = Cluster::start(&["n1"]);
    let log = c.dir.path().join("node-n1/logs/j1/0/attempt-1.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink("/dev/full", &log).unwrap();
    let command = "echo hello && echo world";
    let spec = c.spec(
        "prints",
        json!({"command": ["sh", "-c", command], "min_nodes": 1, "max_nodes": 1, "retries": {"user": 0}}),
    );
    let id = c.submit_no_wait(&spec);
    assert_eq!(id, "j1");
    let job = c.wait_for_job(&id, "the job ends", |j| j["state"] == "SUCCEEDED" || j["state"] == "FAILED");
    assert_eq!(job["state"], "SUCCEEDED", "{job:#}");
    assert_eq!(job["ledger"][0]["cause"], "completed", "{job:#}");
    // The log can say nothing of output it never took after its last write: the ledger does.
    let said = job["ledger"][0]["evidence"].as_str().unwrap();
    let unlogged = "12 bytes of output at its end were not logged: the log took no write (No space left on device";
    assert!(said.contains(unlogged), "{said}");
    let shown = c.ftdrive(&["status", &id]);
    assert!(shown.contains("were not logged"), "{shown}");
}

/// A healthy agent probes its state dir now and then (every 10 s): a disk that fills up is
/// found before a start fails on it, so the job that would have been placed there waits,
/// charged nothing, instead of spending a system retry.
#[test]
fn a_disk_that_fills_up_is_found_before_a_start_fails_on_it() {
    let c = Cluster::start(&["n1"]);
    let probe = c.dir.path().join("node-n1/attempts/.write-check");
    std::fs::create_dir_all(&probe).unwrap(); // the probe's file cannot be written: as a full disk
    let problem = |c: &Cluster| c.nodes_json()[0]["problem"].as_str().map(str::to_string);
    c.wait_until("the probe finds n1 unhealthy", |c| problem(c).is_some());
    let spec = c.spec("waits", json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1, "retries": {"system": 0}}));
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "it says why it waits", |j| j["waiting"].is_string());
    assert!(job["ledger"].as_array().unwrap().is_empty(), "no start failed, nothing charged: {job:#}");
    std::fs::remove_dir(&probe).unwrap();
    c.wait_for_job(&id, "it runs once n1 is well", |j| j["state"] == "SUCCEEDED");
}

/// A closed standard error (`ftdrive head 2>&1 | tee log` with `tee` gone; a command whose
/// error reader went away) ends no process: writing a log line or an error to it panicked, and
/// the head aborted on its next log line, the CLI on its error (exit 134).
#[test]
fn a_closed_standard_error_ends_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let mut head = head_command(dir.path(), "127.0.0.1:0", &[]);
    head.env("FTDRIVE_LOG", "info").stderr(Stdio::piped());
    let mut head = Ended(head.spawn().unwrap());
    drop(head.0.stderr.take()); // the reader is gone
    let url = wait_for_url(dir.path());
    let mut agent = Command::new(env!("CARGO_BIN_EXE_ftdrive"));
    agent.args(["node", "--head", &url, "--name", "n1", "--resources", "cpu=1", "--addr", "127.0.0.1"]);
    agent.arg("--state-dir").arg(dir.path()).env("FTDRIVE_LOG", "info").stdout(Stdio::null()).stderr(Stdio::piped());
    let mut agent = Ended(agent.spawn().unwrap());
    drop(agent.0.stderr.take());
    let token = std::fs::read_to_string(dir.path().join("token")).unwrap();
    let start = Instant::now();
    // The head logs the registration, the agent its welcome: both must live through it.
    while !http(&url, "GET", "/v1/nodes", Some(token.trim()), "").contains("\"ALIVE\"") {
        assert!(start.elapsed() < WAIT, "the node did not register");
        assert!(head.0.try_wait().unwrap().is_none(), "the head ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(head.0.try_wait().unwrap().is_none(), "the head lives on");
    assert!(agent.0.try_wait().unwrap().is_none(), "the agent lives on");

    let mut refused = Command::new(env!("CARGO_BIN_EXE_ftdrive"));
    refused.args(["submit", "/nonexistent/job.json"]).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut refused = refused.spawn().unwrap();
    drop(refused.stderr.take());
    assert_eq!(refused.wait().unwrap().code(), Some(2), "a missing file is bad input, said or not");
}

/// A link that dies without closing (both sockets open, nothing passing) is taken as lost
/// once the head has answered nothing for twice its node timeout, and at least 10 s: the
/// agent connects again and the
/// node takes work again, each rank running once. The agent waited on the dead link for as
/// long as the kernel kept it (about a quarter of an hour), the head declaring the node DEAD
/// and running its rank elsewhere, twice all the while.
#[test]
fn an_agent_whose_link_dies_silently_connects_again() {
    let mut c = Cluster::start(&["n2"]);
    let relay = Relay::to(&c.url);
    let said = c.dir.path().join("n1.err");
    let agent = c
        .node_command("n1")
        .env("FTDRIVE_HEAD", format!("http://{}", relay.addr))
        .stderr(std::fs::File::create(&said).unwrap())
        .spawn()
        .unwrap();
    c.nodes.insert("n1".into(), agent);
    c.wait_until("n1 registered", |c| c.nodes_json().as_array().unwrap().len() == 2);
    let both = json!({"command": ["sleep", "300"], "min_nodes": 2, "max_nodes": 2, "restart": "actor"});
    let id = c.submit_no_wait(&c.spec("two", both));
    c.wait_for_job(&id, "both ranks run", |j| running(j, 2));
    c.wait_until("its rank runs on n1", |c| !c.processes(Some("n1")).is_empty());
    relay.go_stale();
    let node_state = |c: &Cluster| {
        let nodes = c.nodes_json();
        nodes.as_array().unwrap().iter().find(|n| n["name"] == "n1").map(|n| n["state"].as_str().unwrap().to_string())
    };
    let said_so = |text: &str| std::fs::read_to_string(&said).is_ok_and(|t| t.contains(text));
    c.wait_until("n1 takes its link as lost", |_| said_so("answered nothing for 10000 ms"));
    // Back before the head's own timeout ran out, it is re-adopted; after, it is a DEAD node
    // registering again, whose stale attempt the head stops. Either way, one run of each rank.
    c.wait_until("n1 is ALIVE again, each rank running once", |c| {
        let job = c.job(&id);
        let on_n1 = job["actors"].as_array().unwrap().iter().any(|a| a["node"] == "n1" && a["state"] == "RUNNING");
        node_state(c).as_deref() == Some("ALIVE") && running(&job, 2) && on_n1 != c.processes(Some("n1")).is_empty()
    });
    assert!(said_so("reconnecting"));
    c.ftdrive(&["stop", &id]);
}

/// A lone node whose agent is killed (its machine up, so its connection closes) is declared
/// DEAD after the node timeout: the close crossed the head's network, so the head does not
/// hold it as it holds nodes gone silent all together (FD-4). It waited out the five-minute
/// hold, its job shown RUNNING meanwhile.
#[test]
fn a_lone_node_whose_agent_is_killed_is_declared_dead_not_held() {
    let mut c = Cluster::start(&["n1"]);
    let id = c.submit_no_wait(&c.spec("lone", json!({"command": ["sleep", "300"], "min_nodes": 1, "max_nodes": 1})));
    c.wait_for_job(&id, "its rank runs", |j| running(j, 1));
    c.kill_node("n1");
    c.wait_until("n1 is DEAD", |c| c.nodes_json()[0]["state"] == "DEAD");
    let job = c.wait_for_job(&id, "its rank is lost", |j| !j["ledger"].as_array().unwrap().is_empty());
    assert_eq!(
        (job["ledger"][0]["cause"].as_str(), job["ledger"][0]["budget"].as_str()),
        (Some("node_lost"), Some("system"))
    );
    c.ftdrive(&["stop", &id]);
}

/// The head's network is cut (every agent reaches it through one relay, which holds what
/// passes) for several node timeouts: the head hears from no node, holds them rather than
/// declaring them DEAD (FD-1), and once the cut heals the same processes run on, nothing
/// charged. With `--disruption-hold-ms 0` both nodes are DEAD within a second of the cut.
#[test]
fn a_cut_of_the_heads_network_loses_no_work() {
    let mut c = Cluster::start(&[]);
    let relay = Relay::to(&c.url);
    for name in ["n1", "n2"] {
        let agent = c.node_command(name).env("FTDRIVE_HEAD", format!("http://{}", relay.addr)).spawn().unwrap();
        c.nodes.insert(name.into(), agent);
    }
    c.wait_until("both registered", |c| c.nodes_json().as_array().unwrap().len() == 2);
    let both = json!({"command": ["sleep", "300"], "min_nodes": 2, "max_nodes": 2});
    let id = c.submit_no_wait(&c.spec("cut", both));
    c.wait_for_job(&id, "both ranks run", |j| running(j, 2));
    let ranks = |c: &Cluster| [c.processes(Some("n1")), c.processes(Some("n2"))].concat();
    c.wait_until("both ranks' supervisors and workers run", |c| ranks(c).len() == 4);
    let pids = ranks(&c);
    relay.cut(true);
    let held = |c: &Cluster, silent_ms: u64| {
        let nodes = c.nodes_json();
        nodes.as_array().unwrap().iter().all(|n| {
            n["state"] == "ALIVE"
                && n["suspect"]["held"] == true
                && n["suspect"]["silent_ms"].as_u64() > Some(silent_ms)
        })
    };
    // Three node timeouts of silence (the test head's is 1 s), every node held all along.
    c.wait_until("both nodes held, silent for 3 s", |c| held(c, 3_000));
    let table = c.ftdrive(&["nodes"]);
    assert!(table.contains("as from every node, so the head's own network is the likelier cause"), "{table}");
    let metrics = http(&c.url, "GET", "/metrics", Some(&c.token()), "");
    assert!(metrics.contains("\nftdrive_nodes_held 2\n"), "{metrics}");
    relay.cut(false);
    c.wait_until("both nodes heard from again", |c| {
        c.nodes_json().as_array().unwrap().iter().all(|n| n["state"] == "ALIVE" && n["suspect"].is_null())
    });
    let job = c.job(&id);
    assert!(running(&job, 2), "{job:#}");
    assert!(job["actors"].as_array().unwrap().iter().all(|a| a["attempt"] == 1), "nothing restarted: {job:#}");
    assert_eq!(job["ledger"], json!([]), "nothing charged: {job:#}");
    assert_eq!(ranks(&c), pids, "the same processes run");
    let metrics = http(&c.url, "GET", "/metrics", Some(&c.token()), "");
    assert!(metrics.contains("\nftdrive_nodes_held 0\n"), "{metrics}");
    c.ftdrive(&["stop", &id]);
}
