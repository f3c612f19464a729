//! The embedded local cluster: with no head configured, `submit` starts a head and
//! `--local-nodes` agents in this process, on loopback, runs the job, and shuts them down.
//! Each agent gets an equal share of this machine's CPUs and memory (at least one CPU).

use super::args::SubmitArgs;
use super::client::Client;
use super::error::{CliError, Outcome};
use super::follow::OnInterrupt;
use super::local_runs;
use super::submit::{follow_submitted, submit};
use crate::head::{self, ServeOptions};
use crate::node::{self, detect, NodeOptions};
use crate::paths;
use ftdrive::resources::Devices;
use ftdrive::spec::JobSpec;
use ftdrive::view::{JobView, NodeView};
use ftdrive::{HeadConfig, Labels, NodeId, Resources};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Most agents an embedded cluster starts.
const MAX_LOCAL_NODES: u32 = 64;
/// Agents an embedded cluster starts without `--local-nodes`.
const DEFAULT_LOCAL_NODES: u32 = 3;

pub async fn run(spec: JobSpec, args: &SubmitArgs) -> Result<Outcome, CliError> {
    let nodes = args.local_nodes.unwrap_or(DEFAULT_LOCAL_NODES);
    if nodes == 0 || nodes > MAX_LOCAL_NODES {
        return Err(CliError::BadInput(format!("--local-nodes is {nodes}; use 1 to {MAX_LOCAL_NODES}")));
    }
    sweep_old_runs();
    let dir =
        run_dir().map_err(|e| CliError::Failed(format!("cannot create a directory for the local cluster: {e}")))?;
    let job_number = next_job_number();
    let cluster = LocalCluster::start(&dir, nodes, job_number)
        .await
        .map_err(|e| CliError::Failed(format!("cannot start the local cluster: {e}")))?;
    crate::note!(
        "local cluster: head {} with {nodes} node(s); state and logs in {}",
        cluster.client.base(),
        dir.display()
    );
    let result = async {
        cluster.wait_for_nodes(nodes).await?;
        let view = submit(&cluster.client, spec).await?;
        refuse_what_never_fits(&cluster.client, &view, nodes).await?;
        follow_submitted(&cluster.client, &view, args, OnInterrupt::StopJob).await
    }
    .await;
    cluster.shutdown().await;
    result
}

/// No node ever joins an embedded cluster, so a job the head finds infeasible would wait for
/// ever: it is stopped, and the error says what would let it run.
async fn refuse_what_never_fits(client: &Client, view: &JobView, nodes: u32) -> Result<(), CliError> {
    let Some(why) = &view.infeasible else { return Ok(()) };
    let _: JobView = client.post(&format!("/v1/jobs/{}/stop", view.id), serde_json::Value::Null).await?;
    let more = if view.min_nodes > nodes {
        format!("Run it with --local-nodes {}, or ", view.min_nodes)
    } else {
        "Lower what it asks for, or ".to_string()
    };
    Err(CliError::BadInput(format!(
        "{} can never run on the local cluster's {nodes} node(s): {why}. {more}submit it to a cluster with --head",
        view.id
    )))
}

/// Each local run gets the next job number (`j1`, `j2`, …), so that job ids — and whatever a
/// program keys on them, such as checkpoint directories — do not repeat across runs.
fn next_job_number() -> u64 {
    next_job_number_in(&runs_dir())
}

/// The counter in `dir`, read and advanced by one run at a time: runs started together (a CI
/// pipeline's parallel steps) would otherwise read the same number.
fn next_job_number_in(dir: &Path) -> u64 {
    let file = dir.join("next-job-number");
    let turn = paths::lock_in_turn(&dir.join("next-job-number.lock"));
    if let Err(e) = &turn {
        tracing::warn!("cannot lock the job counter in {}: {e}; a run started now may repeat ids", dir.display());
    }
    let next = std::fs::read_to_string(&file).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(1u64);
    if let Err(e) = paths::write_atomic(&file, (next + 1).to_string().as_bytes()) {
        tracing::warn!("cannot record the next job number in {}: {e}", file.display());
    }
    next
}

/// Where this run keeps its state and logs: `<state-dir>/local/<unique>`, kept afterwards.
/// Where embedded runs keep their directories and their job counter.
fn runs_dir() -> PathBuf {
    paths::default_state_dir().join("local")
}

/// `ftdrive logs` or `status` given no head (`error`, which says so): an embedded cluster
/// ended with the `submit` that ran it, so what is asked may be in a run it kept; the error
/// then says where. Any other error is left as it is.
pub fn where_runs_kept_it(error: CliError, head: &super::args::HeadUrl, job: Option<&str>) -> CliError {
    let (CliError::BadInput(said), None) = (&error, &head.head) else { return error };
    let Some((run, of_job)) = local_runs::run_of(&runs_dir(), job) else { return error };
    let kept = match (job, of_job) {
        (Some(job), true) => format!(
            "{job} ran on an embedded cluster (`ftdrive submit` with no head), which ended with that command; its \
             output is kept in {}/local-*/logs/{job}/ACTOR/attempt-N.log",
            run.display()
        ),
        _ => format!(
            "the newest embedded run (`ftdrive submit` with no head) kept its state and logs in {}",
            run.display()
        ),
    };
    CliError::BadInput(format!("{said}\n{kept}"))
}

/// Deletes old runs' directories (`local_runs`), and says so when it did.
fn sweep_old_runs() {
    let parent = runs_dir();
    let swept = local_runs::sweep(&parent, std::time::SystemTime::now());
    for problem in &swept.problems {
        crate::note!("local cluster: {problem}");
    }
    if swept.runs > 0 {
        crate::note!(
            "local cluster: deleted {} old run(s) in {} ({} MiB): runs are kept {} hours after their last write, and \
             the {} newest whatever their age",
            swept.runs,
            parent.display(),
            swept.bytes >> 20,
            local_runs::KEEP_RUN_HOURS,
            local_runs::KEEP_RUNS
        );
    }
}

fn run_dir() -> std::io::Result<PathBuf> {
    let parent = runs_dir();
    std::fs::create_dir_all(&parent)?;
    let dir = tempfile::Builder::new().prefix("run-").tempdir_in(&parent)?;
    Ok(dir.keep())
}

pub struct LocalCluster {
    pub client: Client,
    head: head::HeadServer,
    nodes: Vec<node::NodeHandle>,
}

impl LocalCluster {
    /// A head on 127.0.0.1 (a free port) and `count` agents that run commands in the current
    /// directory.
    pub async fn start(dir: &Path, count: u32, first_job_number: u64) -> std::io::Result<LocalCluster> {
        let tokens = paths::Tokens::random()?;
        let options = ServeOptions {
            listen: "127.0.0.1:0".into(),
            state_dir: dir.join("head"),
            config: HeadConfig::default(),
            tokens: Some(tokens.clone()),
            handle_signals: false,
            first_job_number,
            // On loopback, in this process: plain HTTP.
            tls: None,
            insecure_http: false,
            agent_ca: None,
            events_keepalive_ms: head::EVENTS_KEEPALIVE_MS,
        };
        let (head, server) = head::serve(options).map_err(std::io::Error::other)?;
        actix::spawn(server);
        let url = format!("http://{}", head.addr);
        let work_dir = std::env::current_dir()?;
        let share = machine_share(count);
        let gpus = detect::Gpus::detect();
        let mut nodes = Vec::new();
        for i in 1..=count {
            let devices = gpu_share(gpus.devices, count, i - 1);
            let options = NodeOptions {
                head_url: url.clone(),
                credential: paths::Credential::Given(tokens.agent.clone()),
                name: NodeId::new(&format!("local-{i}")),
                // The head counts `gpu` from the devices.
                resources: share.clone(),
                labels: Labels::new(),
                devices,
                addr: "127.0.0.1".into(),
                state_dir: dir.join(format!("local-{i}")),
                work_dir: work_dir.clone(),
                drain_deadline_ms: 5_000,
                reattach_grace_ms: None,
                fence_after_ms: None,
                max_log_bytes: super::args::DEFAULT_MAX_LOG_MB << 20,
                min_free_disk_bytes: super::args::DEFAULT_MIN_FREE_DISK_MB << 20,
                start_timeout: Some(Duration::from_millis(super::args::DEFAULT_START_TIMEOUT_MS)),
                // A run's directory is the user's to keep: `ftdrive submit` prints where it is.
                keep_logs: None,
                head_tls: None,
                log_tls: None,
                log_port: 0,
                job_user: None,
                cgroups: node::cgroup::Cgroups::resolve(&node::cgroup::Choice::Auto, &dir.join(format!("local-{i}")))
                    .unwrap_or_default(),
            };
            nodes.push(node::start(options).await?);
        }
        Ok(LocalCluster { client: Client::new(&url, tokens.client, "the embedded head".to_string()), head, nodes })
    }

    /// Waits (a bounded time) until every agent has registered.
    pub async fn wait_for_nodes(&self, count: u32) -> Result<(), CliError> {
        for _ in 0..200 {
            let nodes: Vec<NodeView> = self.client.get("/v1/nodes").await?;
            if nodes.len() >= count as usize {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(CliError::Failed("the local agents did not register within 10 s".into()))
    }

    /// Stops the agents (killing anything still running) and the head.
    pub async fn shutdown(self) {
        for node in self.nodes {
            node.halt().await;
        }
        self.head.stop().await;
    }
}

/// The machine's GPUs dealt out to `count` local nodes in turn: node `i` gets every
/// `count`-th device from the `i`-th.
fn gpu_share(devices: Devices, count: u32, i: u32) -> Devices {
    let mine: Vec<u32> = devices.indices().skip(i as usize).step_by(count as usize).collect();
    Devices::from_indices(&mine).expect("indices of a device set")
}

fn machine_share(count: u32) -> Resources {
    let all = detect::machine_resources();
    let n = u64::from(count);
    let cpu = (all.milli("cpu") / n / 1000).max(1);
    Resources::units(&[("cpu", cpu)]).with_milli("memory_mb", all.milli("memory_mb") / n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_started_together_never_share_a_job_number() {
        let dir = tempfile::tempdir().unwrap();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let dir = dir.path().to_path_buf();
                std::thread::spawn(move || (0..25).map(|_| next_job_number_in(&dir)).collect::<Vec<u64>>())
            })
            .collect();
        let mut numbers: Vec<u64> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        numbers.sort_unstable();
        assert_eq!(numbers, (1..=200).collect::<Vec<u64>>());
    }
}
