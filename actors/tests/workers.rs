//! Several workers per node and GPUs on a real cluster (loopback): a 3-node × 2-worker job's
//! six processes and their environment, per-worker logs, one killed worker ending its group and
//! restarting the gang, GPU devices held by one bundle at a time, and rendezvous ports given
//! once per machine.

mod common;

use common::{running, Cluster};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};

/// Each worker writes its environment to `env.<RANK>` in its working directory and says
/// hello; not through a shell, which would set `PWD` itself.
const WRITE_ENV: &str = r#"
import os, time
with open(f"env.{os.environ['RANK']}", "w") as out:
    out.writelines(f"{k}={v}\n" for k, v in os.environ.items())
print(f"hello from rank {os.environ['RANK']}")
time.sleep(0.3)
"#;

/// The Python interpreter itself: `python3` on the `PATH` may be a shell script (pyenv's
/// shim), which sets `PWD` before the interpreter reads its environment.
fn python_binary() -> String {
    let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().unwrap();
    assert!(out.status.success(), "python3: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim_end().to_string()
}

fn read_env(path: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn three_nodes_of_two_workers_run_six_processes_with_torchruns_environment() {
    let c = Cluster::start(&["n1", "n2", "n3"]);
    let out_dir = c.dir.path().join("envs");
    std::fs::create_dir(&out_dir).unwrap();
    let spec = c.spec(
        "six",
        json!({"command": [python_binary(), "-c", WRITE_ENV], "cwd": out_dir, "min_nodes": 3, "max_nodes": 3, "nproc_per_node": 2}),
    );
    let out = c.try_ftdrive(&["submit", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    let mut masters = BTreeSet::new();
    for rank in 0..6u32 {
        let env = read_env(&out_dir.join(format!("env.{rank}")));
        let expected = [
            ("WORLD_SIZE", "6".to_string()),
            ("LOCAL_WORLD_SIZE", "2".to_string()),
            ("LOCAL_RANK", (rank % 2).to_string()),
            ("GROUP_RANK", (rank / 2).to_string()),
            ("GROUP_WORLD_SIZE", "3".to_string()),
            ("ROLE_RANK", rank.to_string()),
            ("ROLE_WORLD_SIZE", "6".to_string()),
            ("ROLE_NAME", "six".to_string()),
        ];
        for (name, value) in expected {
            assert_eq!(env.get(name), Some(&value), "rank {rank}: {name}");
        }
        assert_eq!(env.get("PWD").map(Path::new), Some(out_dir.as_path()), "rank {rank}: the spec's cwd");
        masters.insert((env["MASTER_ADDR"].clone(), env["MASTER_PORT"].clone()));
        assert!(!env.contains_key("FTDRIVE_TOKEN"), "rank {rank} sees the cluster's token");
    }
    assert_eq!(masters.len(), 1, "every worker meets at one rendezvous: {masters:?}");

    let group = c.ftdrive(&["logs", "j1", "--actor", "j1/1"]);
    assert!(
        group.contains("[rank2]: hello from rank 2\n") && group.contains("[rank3]: hello from rank 3\n"),
        "{group}"
    );
    let one = c.ftdrive(&["logs", "j1", "--actor", "j1/1", "--local-rank", "1"]);
    assert_eq!(one, "hello from rank 3\n", "one worker's own log, unprefixed");
    for rank in 0..6 {
        let by_rank = c.ftdrive(&["logs", "j1", "--rank", &rank.to_string()]);
        assert_eq!(by_rank, format!("hello from rank {rank}\n"), "a global rank names its worker");
    }
    let bad = c.try_ftdrive(&["logs", "j1", "--actor", "j1/1", "--local-rank", "2"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("local ranks 0 to 1"), "{bad:?}");
}

/// Pid of this test's worker (`sleep`, not its supervisor) of `RANK=<rank>` in the first cycle.
/// Listens on `MASTER_PORT` as a rank 0 does (PyTorch's TCPStore, with `SO_REUSEADDR`, so that
/// an earlier test's connections in TIME_WAIT do not count), writes the port down under
/// its job's id in the directory `argv[1]`, and holds it until `argv[2]` jobs have written theirs.
const LISTEN_ON_MASTER_PORT: &str = r#"
import os, pathlib, socket, sys, time
port = int(os.environ["MASTER_PORT"])
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("", port))
listener.listen()
out = pathlib.Path(sys.argv[1])
(out / os.environ["FTDRIVE_JOB_ID"]).write_text(str(port))
deadline = time.time() + 30
while len(list(out.iterdir())) < int(sys.argv[2]) and time.time() < deadline:
    time.sleep(0.05)
"#;

/// Two agents on one machine (as the README's recipe runs four): two jobs at once each get a
/// rendezvous port no other bundle on the machine holds, and both listen on it. Each agent
/// drew from a pool of its own before, both jobs got 29500, and the second one's rank 0 failed
/// with `EADDRINUSE`, charged as a user error, cycle after cycle.
#[test]
fn two_jobs_on_two_agents_of_one_machine_listen_on_two_ports() {
    let c = Cluster::start(&["n1", "n2"]);
    let out_dir = c.dir.path().join("ports");
    std::fs::create_dir(&out_dir).unwrap();
    let command = json!(["python3", "-c", LISTEN_ON_MASTER_PORT, out_dir.to_str().unwrap(), "2"]);
    let job = |name: &str| {
        let spec = json!({"command": command, "min_nodes": 1, "max_nodes": 1});
        c.submit_no_wait(&c.spec(name, spec))
    };
    let (a, b) = (job("a"), job("b"));
    for id in [&a, &b] {
        let done = c.wait_for_job(id, "the job ends", |j| j["state"] == "SUCCEEDED" || j["state"] == "FAILED");
        assert_eq!(done["state"], "SUCCEEDED", "{id} could not listen on its port: {done}");
    }
    let nodes: BTreeSet<String> = [&a, &b].iter().map(|id| c.job(id)["actors"][0]["node"].to_string()).collect();
    assert_eq!(nodes.len(), 2, "one job on each agent: {nodes:?}");
    let port = |id: &str| std::fs::read_to_string(out_dir.join(id)).unwrap();
    assert_ne!(port(&a), port(&b));
    // Where each job's rendezvous was is in its status, as JSON and as text.
    assert_eq!(c.job(&a)["rendezvous"]["port"].to_string(), port(&a));
    let shown = c.ftdrive(&["status", &b]);
    assert!(shown.contains(&format!("· rendezvous 127.0.0.1:{}\n", port(&b))), "{shown}");
}

/// A listener outside ftdrive on the first rendezvous port (a forgotten `torchrun`) is passed
/// over: the job's rank 0 gets the next port and listens there. (A base of its own, so that
/// no other test of this binary listens in its range, and below the kernel's ephemeral ports,
/// 32768 up, which any connection on the machine may hold.) The job failed with `EADDRINUSE`
/// before agents reported what listens.
#[test]
fn a_port_a_forgotten_process_listens_on_is_passed_over() {
    let squatter = std::net::TcpListener::bind("0.0.0.0:31500").expect("port 31500 free for the test");
    let c = Cluster::start_with(&["n1"], &["--master-port-base", "31500"]);
    let out_dir = c.dir.path().join("ports");
    std::fs::create_dir(&out_dir).unwrap();
    let command = json!(["python3", "-c", LISTEN_ON_MASTER_PORT, out_dir.to_str().unwrap(), "1"]);
    let id = c.submit_no_wait(&c.spec("beside", json!({"command": command, "min_nodes": 1, "max_nodes": 1})));
    let done = c.wait_for_job(&id, "the job ends", |j| j["state"] == "SUCCEEDED" || j["state"] == "FAILED");
    assert_eq!(done["state"], "SUCCEEDED", "{done}");
    assert_eq!(std::fs::read_to_string(out_dir.join(&id)).unwrap(), "31501");
    drop(squatter);
}

/// Rank 0 listens on `MASTER_PORT` (and fails, as torchrun does, when it cannot) and writes
/// the port to `out/<cycle>`; the first cycle's then runs on until stopped.
const LISTEN_THEN_WAIT_IN_FIRST_CYCLE: &str = r#"
import os, pathlib, socket, sys, time
listener = socket.socket()
listener.bind(("", int(os.environ["MASTER_PORT"])))
listener.listen()
cycle = os.environ["FTDRIVE_CYCLE"]
(pathlib.Path(sys.argv[1]) / cycle).write_text(os.environ["MASTER_PORT"])
if cycle == "1":
    time.sleep(120)
"#;

/// The port a job's bundle `index` holds, once placed.
fn bundle_port(job: &Value, index: usize) -> Option<u64> {
    job["placement_groups"][0]["bundles"][index]["port"].as_u64()
}

/// PS-4: a process that starts listening on the port of a hot spare's bundle (after the head
/// gave it) moves the bundle; when the spare takes over it serves the rendezvous from the new
/// port. Without the move it failed with `EADDRINUSE`, its only user retry gone.
#[test]
fn a_spare_whose_port_was_taken_takes_over_on_another() {
    let mut c = Cluster::start_with(&["n1", "n2"], &["--master-port-base", "31600"]);
    let out_dir = c.dir.path().join("ports");
    std::fs::create_dir(&out_dir).unwrap();
    let command = json!(["python3", "-c", LISTEN_THEN_WAIT_IN_FIRST_CYCLE, out_dir.to_str().unwrap()]);
    let spec = json!({"command": command, "min_nodes": 1, "max_nodes": 1, "hot_spares": 1, "retries": {"user": 0}});
    let id = c.submit_no_wait(&c.spec("spare", spec));
    let job =
        c.wait_for_job(&id, "rank 0 runs beside its spare", |j| running(j, 1) && j["actors"][1]["state"] == "STANDBY");
    let (rank0_node, spare_port) = (job["actors"][0]["node"].as_str().unwrap().to_string(), bundle_port(&job, 1));
    let spare_port = spare_port.expect("the spare's bundle is placed") as u16;
    let squatter = std::net::TcpListener::bind(("0.0.0.0", spare_port)).expect("the spare's port is free");
    let job = c.wait_for_job(&id, "the spare's bundle moves", |j| bundle_port(j, 1) != Some(u64::from(spare_port)));
    let moved = bundle_port(&job, 1).expect("still placed");
    c.kill_node(&rank0_node);
    let done = c.wait_for_job(&id, "the job ends", |j| j["state"] == "SUCCEEDED" || j["state"] == "FAILED");
    assert_eq!(done["state"], "SUCCEEDED", "{done:#}");
    assert_eq!(std::fs::read_to_string(out_dir.join("2")).unwrap(), moved.to_string());
    drop(squatter);
}

/// Rank 0 listens on `MASTER_PORT` and writes it to `out/<cycle>`; rank 1 fails after half a
/// second in the first three cycles. In the fourth both succeed.
const LISTEN_WHILE_RANK_1_FAILS: &str = r#"
import os, pathlib, socket, sys, time
cycle = int(os.environ["FTDRIVE_CYCLE"])
if os.environ["RANK"] == "0":
    listener = socket.socket()
    listener.bind(("", int(os.environ["MASTER_PORT"])))
    listener.listen()
    (pathlib.Path(sys.argv[1]) / str(cycle)).write_text(os.environ["MASTER_PORT"])
    time.sleep(120 if cycle < 4 else 0)
else:
    time.sleep(0.3)
    sys.exit(1 if cycle < 4 else 0)
"#;

/// PS-4 moves a bundle off a port something *else* listens on. Its own rank 0's listener,
/// still in the head's last report when the next cycle starts at once, is not that: the agent
/// reads what listens again before it reports an end. Without that read the port moved at
/// the third cycle, to one the agent's own connection to the head held (`EADDRINUSE`). The two
/// agents share the machine, and the other one, reading (at its failing rank's end) while rank
/// 0 still listened, must not count either: at 1 s heartbeats rank 0's own agent may never
/// have seen it listen, and had nothing new to say.
#[test]
fn a_rank_0_keeps_its_port_through_restarts_of_its_gang() {
    let timing = ["--heartbeat-interval-ms", "1000", "--node-timeout-ms", "3000"];
    let c = Cluster::start_with(&["n1", "n2"], &[&timing[..], &["--master-port-base", "31700"]].concat());
    let out_dir = c.dir.path().join("ports");
    std::fs::create_dir(&out_dir).unwrap();
    let command = json!(["python3", "-c", LISTEN_WHILE_RANK_1_FAILS, out_dir.to_str().unwrap()]);
    let retries = json!({"user": 3, "backoff_ms": {"initial": 0, "max": 0}});
    let spec = json!({"command": command, "min_nodes": 2, "max_nodes": 2, "retries": retries});
    let id = c.submit_no_wait(&c.spec("restarts", spec));
    let done = c.wait_for_job(&id, "the job ends", |j| j["state"] == "SUCCEEDED" || j["state"] == "FAILED");
    assert_eq!(done["state"], "SUCCEEDED", "{done:#}");
    let ports: Vec<String> =
        (1..=4).map(|cycle| std::fs::read_to_string(out_dir.join(cycle.to_string())).unwrap()).collect();
    assert!(ports.iter().all(|p| *p == ports[0]), "rank 0's port by cycle: {ports:?}");
}

fn worker_pid(c: &Cluster, rank: u32) -> Option<u32> {
    let want = [format!("RANK={rank}"), "TORCHELASTIC_RESTART_COUNT=0".to_string()];
    let is_sleep = |pid: &u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep");
    c.processes(None).into_iter().filter(is_sleep).find(|pid| {
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let vars: Vec<String> = env.split(|b| *b == 0).map(|v| String::from_utf8_lossy(v).into_owned()).collect();
        want.iter().all(|w| vars.contains(w))
    })
}

#[test]
fn a_killed_worker_ends_its_group_and_the_gang_restarts() {
    let c = Cluster::start(&["n1", "n2"]);
    let first_cycle_waits = r#"if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exec sleep 60; fi"#;
    let spec = c.spec(
        "gang",
        json!({"command": ["sh", "-c", first_cycle_waits], "min_nodes": 2, "max_nodes": 2, "nproc_per_node": 2,
               "retries": {"user": 1, "backoff_ms": {"initial": 100, "max": 100}}}),
    );
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "both groups run", |j| running(j, 2));
    c.wait_until("all four workers run", |c| (0..4).all(|r| worker_pid(c, r).is_some()));
    let victim = worker_pid(&c, 3).expect("rank 3 runs");
    // SAFETY: kill has no memory preconditions.
    unsafe { libc::kill(victim as i32, libc::SIGKILL) };

    let job = c.wait_for_job(&id, "the gang restarts and succeeds", |j| j["state"] == "SUCCEEDED");
    assert_eq!(job["cycles"], 2, "{job:#}");
    let ledger = job["ledger"].as_array().unwrap();
    let failed = ledger.iter().find(|e| e["actor"] == "j1/1" && e["attempt"] == 1).unwrap();
    assert_eq!((failed["cause"].as_str(), failed["signal"].as_i64()), (Some("user_error"), Some(9)), "{job:#}");
    let evidence = failed["evidence"].as_str().unwrap();
    assert!(evidence.contains("worker 1 (rank 3)"), "the ledger names the worker: {evidence}");
    let peer = ledger.iter().find(|e| e["actor"] == "j1/0" && e["attempt"] == 1).unwrap();
    assert_eq!(peer["cause"], "collateral", "{job:#}");
    c.wait_until("no process of the job is left", |c| c.processes(None).is_empty());
}

#[test]
fn a_gpu_bundle_holds_devices_no_other_bundle_holds_and_sees_them() {
    let mut c = Cluster::start(&[]);
    let node = c
        .command()
        .args(["node", "--name", "g1", "--resources", "cpu=4", "--gpus", "0,1,2,3", "--addr", "127.0.0.1"])
        .arg("--work-dir")
        .arg(c.dir.path())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    c.nodes.insert("g1".into(), node);
    c.wait_until("g1 registered", |c| c.nodes_json().as_array().unwrap().len() == 1);
    assert_eq!(c.nodes_json()[0]["resources"]["gpu"], 4, "--gpus sets the gpu resource");

    let out_dir = c.dir.path().join("cvd");
    std::fs::create_dir(&out_dir).unwrap();
    let command =
        format!(r#"echo "$CUDA_VISIBLE_DEVICES" > {}/$FTDRIVE_JOB_ID.$LOCAL_RANK; exec sleep 60"#, out_dir.display());
    let bundle = json!({"cpu": 1, "gpu": 2});
    let spec = json!({"command": ["sh", "-c", command], "min_nodes": 1, "max_nodes": 1, "nproc_per_node": 2, "bundle": bundle});
    let (a, b) = (c.submit_no_wait(&c.spec("a", spec.clone())), c.submit_no_wait(&c.spec("b", spec)));
    let seen = |job: &str| -> Vec<String> {
        (0..2)
            .map(|l| std::fs::read_to_string(out_dir.join(format!("{job}.{l}"))).unwrap_or_default().trim().to_string())
            .collect()
    };
    c.wait_until("both jobs' workers wrote their devices", |_| seen(&a).iter().chain(&seen(&b)).all(|d| !d.is_empty()));

    let (da, db) = (seen(&a), seen(&b));
    assert_eq!(da[0], da[1], "a group's workers see the same devices");
    let held: BTreeSet<&str> = da[0].split(',').chain(db[0].split(',')).collect();
    assert_eq!(held, BTreeSet::from(["0", "1", "2", "3"]), "two devices each, none shared: {da:?} {db:?}");
    let shown = |job: &str| -> Value { c.job(job)["actors"][0]["devices"].clone() };
    let as_text = |v: Value| v.as_array().unwrap().iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",");
    assert_eq!(as_text(shown(&a)), da[0], "status shows the devices CUDA sees");
    assert_eq!(c.nodes_json()[0]["devices_held"], json!([0, 1, 2, 3]));
    let table = c.ftdrive(&["status", &a]);
    assert!(table.contains("GPUS") && table.contains(&da[0]), "{table}");

    // A bundle without GPUs on the same node sees none of them (not all of them, as an unset
    // variable would let it), so it cannot take the devices a and b hold.
    let hidden = out_dir.join("cpu-only");
    let command = format!(r#"echo "[${{CUDA_VISIBLE_DEVICES-unset}}]" > {}; exec sleep 60"#, hidden.display());
    let spec = json!({"command": ["sh", "-c", command], "min_nodes": 1, "max_nodes": 1, "bundle": {"cpu": 1}});
    let cpu_only = c.submit_no_wait(&c.spec("cpu-only", spec));
    c.wait_until("the CPU-only job wrote what it sees", |_| hidden.exists());
    c.wait_until("and finished writing", |_| std::fs::read_to_string(&hidden).unwrap_or_default().ends_with('\n'));
    assert_eq!(std::fs::read_to_string(&hidden).unwrap().trim(), "[]", "an empty list: no device");
    for job in [&a, &b, &cpu_only] {
        c.ftdrive(&["stop", job]);
    }
    c.wait_until("the workers are gone", |c| c.processes(None).is_empty());
}

/// A program named without a `/` is looked up on `$PATH` only: a `["train.py"]` that sits in
/// the working directory fails to start with an error that says to write `./train.py`, and a
/// program found nowhere with one that says where it was looked for. Neither is retried.
#[test]
fn a_program_that_is_not_on_the_path_fails_with_what_to_write_instead() {
    let c = Cluster::start(&["n1"]);
    let work = c.dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("train.py"), "print('hi')\n").unwrap();
    for (name, program, says) in [
        ("local", "train.py", "`train.py` is in the working directory, and a program named without a `/` is looked up on $PATH only: write `./train.py`"),
        ("nowhere", "no-such-program-ftdrive", "a program named without a `/` is looked up on $PATH: install it on this node"),
    ] {
        let spec = c.spec(name, json!({"command": [program], "cwd": work, "min_nodes": 1, "max_nodes": 1}));
        let id = c.submit_no_wait(&spec);
        let job = c.wait_for_job(&id, "the job fails", |j| j["state"] == "FAILED");
        let entry = &job["ledger"][0];
        assert_eq!(entry["cause"], "spawn_failed", "{job:#}");
        let evidence = entry["evidence"].as_str().unwrap();
        assert!(evidence.contains(&format!("cannot start worker 0 ({program}): No such file or directory")), "{evidence}");
        assert!(evidence.contains(says), "{evidence}");
    }
}
