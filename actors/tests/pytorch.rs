//! The PyTorch example (`examples/ddp_train.py`, DDP over gloo, 2 workers per node) on a real
//! cluster: a node's agent and every process on it are killed with SIGKILL mid-training, the
//! gang restarts on another node, resumes from its checkpoint and succeeds with every rank
//! holding the same weights.
//!
//! It needs a Python with torch: `FTDRIVE_TEST_PYTHON=/path/to/python`. Without it the test
//! says it was skipped and passes; with `FTDRIVE_REQUIRE_TORCH=1` a missing torch fails it.

mod common;

use common::{actor_on_rank, running, supervisor_cgroup, Cluster};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Python to run the example with, or why the test cannot run.
fn python_with_torch() -> Result<String, String> {
    let python = std::env::var("FTDRIVE_TEST_PYTHON")
        .map_err(|_| "FTDRIVE_TEST_PYTHON is not set (a Python with torch installed)".to_string())?;
    let probe = Command::new(&python).args(["-c", "import torch; print(torch.__version__)"]).output();
    match probe {
        Ok(out) if out.status.success() => {
            eprintln!("pytorch example test: torch {}", String::from_utf8_lossy(&out.stdout).trim());
            Ok(python)
        }
        Ok(out) => Err(format!("{python} cannot import torch: {}", String::from_utf8_lossy(&out.stderr).trim())),
        Err(e) => Err(format!("cannot run {python}: {e}")),
    }
}

fn example(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// examples/jobs/ddp.json, run with `python`, its checkpoint in `checkpoints`.
fn ddp_spec(python: &str, checkpoints: &Path) -> Value {
    let mut spec: Value =
        serde_json::from_str(&std::fs::read_to_string(example("examples/jobs/ddp.json")).unwrap()).unwrap();
    assert_eq!(spec["nproc_per_node"], 2, "the example runs two workers per node");
    let script = example("examples/ddp_train.py");
    spec["command"] =
        json!([python, script, "--steps", "200", "--step-seconds", "0.05", "--checkpoint-dir", checkpoints]);
    spec
}

fn log_of(c: &Cluster, job: &str, actor: &str) -> String {
    c.ftdrive(&["logs", job, "--actor", actor])
}

/// The Python with torch, or None when the test is to be skipped (and it says so).
fn python_or_skip() -> Option<String> {
    match python_with_torch() {
        Ok(python) => Some(python),
        Err(why) if std::env::var_os("FTDRIVE_REQUIRE_TORCH").is_some() => panic!("{why}"),
        Err(why) => {
            eprintln!("pytorch example test SKIPPED: {why}");
            None
        }
    }
}

#[test]
fn the_ddp_example_survives_a_killed_node_and_resumes_from_its_checkpoint() {
    let Some(python) = python_or_skip() else { return };
    let mut c = Cluster::start(&["n1", "n2", "n3"]);
    let checkpoints = c.dir.path().join("checkpoints");
    let id = c.submit_no_wait(&c.spec("ddp", ddp_spec(&python, &checkpoints)));
    let job = c.wait_for_job(&id, "both groups run", |j| running(j, 2));
    c.wait_until("training is under way", |c| log_of(c, &id, "0").contains("step 30/200"));

    let (actor, victim) = actor_on_rank(&job, 1);
    let on_victim = c.processes(Some(&victim));
    assert_eq!(on_victim.len(), 3, "a supervisor and two workers on {victim}");
    let cgroups: Vec<PathBuf> = on_victim.iter().filter_map(|pid| supervisor_cgroup(*pid)).collect();
    c.kill_node(&victim);
    for pid in on_victim {
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }

    let job = c.wait_for_job(&id, "the job succeeds", |j| j["state"].as_str().is_some_and(|s| s != "RUNNING"));
    assert_eq!(job["state"], "SUCCEEDED", "{job:#}");
    let lost = job["ledger"].as_array().unwrap().iter().find(|e| e["actor"] == actor.as_str()).unwrap();
    assert_eq!((lost["cause"].as_str(), lost["node"].as_str()), (Some("node_lost"), Some(victim.as_str())), "{job:#}");
    let log = log_of(&c, &id, &actor);
    let resumed = log.lines().find_map(|l| l.split("resumed from the checkpoint at step ").nth(1)).expect(&log);
    assert!(resumed.trim().parse::<u32>().unwrap() >= 30, "resumed where it was: {log}");
    for rank in [2, 3] {
        assert!(
            log.contains(&format!("[rank{rank}]: rank {rank}/4 (local {}) cycle 2: done: 200 steps", rank - 2)),
            "{log}"
        );
    }
    assert!(log.contains("spread across ranks 0.00e+00"), "DDP kept every rank's weights equal: {log}");
    c.wait_until("every process ended", |c| c.processes(None).is_empty());
    // A lost machine takes its cgroups with it; this one only lost its processes, and its agent
    // never comes back to remove the attempt's (CG-4).
    for cgroup in cgroups {
        let _ = std::fs::remove_dir(cgroup);
    }
}

/// A worker that fails under PyTorch's own `@record` (torchelastic's error reporting) has its
/// exception in the ledger, as torchrun shows it as the root cause: ftdrive gives each worker
/// the `$TORCHELASTIC_ERROR_FILE` that `@record` writes.
#[test]
fn a_pytorch_exception_under_record_is_the_ledgers_evidence() {
    let Some(python) = python_or_skip() else { return };
    let c = Cluster::start(&["n1"]);
    let program = r#"
import os, time
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    if os.environ["LOCAL_RANK"] == "1":
        raise ValueError("loss is NaN at step 7")
    time.sleep(300)

main()
"#;
    let spec = json!({"command": [python, "-c", program], "min_nodes": 1, "max_nodes": 1, "nproc_per_node": 2,
        "retries": {"user": 0}});
    let id = c.submit_no_wait(&c.spec("recorded", spec));
    let job = c.wait_for_job(&id, "it fails", |j| j["state"] == "FAILED");
    let says = r#"worker 1 (rank 1) exited with code 1 on n1, saying "ValueError: loss is NaN at step 7""#;
    assert!(job["ledger"][0]["evidence"].as_str().unwrap().starts_with(says), "{job:#}");
}

/// The example's choice of GPU, on its own (this machine has none; `docs/training.md` says where
/// it ran on one): each worker gets a device of its own, and a node with fewer GPUs than
/// workers is refused before the rendezvous with what to change, not by NCCL mid-gang.
#[test]
fn the_ddp_example_gives_each_worker_its_own_gpu_or_says_what_to_change() {
    let Some(python) = python_or_skip() else { return };
    let probe = r#"
import sys
sys.path.insert(0, sys.argv[1])
import ddp_train as t
assert [t.gpu_index(r, 4, 4) for r in range(4)] == [0, 1, 2, 3]
assert t.gpu_index(0, 1, 8) == 0
for local_rank, local_world in [(1, 2), (1, 1)]:
    try:
        t.gpu_index(local_rank, local_world, 1)
    except t.TooFewGpus as err:
        print(err)
    else:
        sys.exit(f"local rank {local_rank} of {local_world} was given a GPU of a node that has one")
"#;
    let out = Command::new(&python).args(["-c", probe]).arg(example("examples")).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    let refusals: Vec<&str> = said.lines().collect();
    assert_eq!(refusals.len(), 2, "{said}");
    for refusal in refusals {
        assert!(refusal.starts_with("2 workers on this node but 1 GPU(s) visible"), "{refusal}");
        assert!(refusal.contains(r#"ask for "bundle": {"gpu": 2}, or set nproc_per_node to 1"#), "{refusal}");
    }
}
