//! End-to-end benchmarks against the real daemon on loopback: `cargo bench --bench daemon`.
//!
//! (a) 1,000 single-bundle jobs submitted through the API by 8 concurrent clients: jobs/s
//!     accepted, and p50/p99 from the submit request to the job's RUNNING event.
//! (b) With node_timeout_ms 1000, `kill -9` of one agent of a running 3-node job: time from
//!     the kill to the replacement actor RUNNING, median of 5 runs.
//!
//! Times are taken by the client: submission and kill from its clock, RUNNING from the
//! moment the head's event stream delivers the event.

use futures_util::StreamExt;
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Cluster {
    _dir: tempfile::TempDir,
    url: String,
    token: String,
    head: Child,
    nodes: Vec<(String, Child)>,
}

impl Cluster {
    fn start(nodes: usize, cpu_per_node: u32, head_args: &[&str]) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}");
        let token = format!("bench-{port}");
        let head = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
            .args(["head", "--listen", &format!("127.0.0.1:{port}")])
            .args(head_args)
            .arg("--state-dir")
            .arg(dir.path().join("head"))
            .env("FTDRIVE_TOKEN", &token)
            .env("FTDRIVE_LOG", "error")
            .spawn()
            .unwrap();
        let nodes = (1..=nodes)
            .map(|i| {
                let name = format!("n{i}");
                let child = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
                    .args([
                        "node",
                        "--head",
                        &url,
                        "--name",
                        &name,
                        "--resources",
                        &format!("cpu={cpu_per_node}"),
                        "--addr",
                        "127.0.0.1",
                    ])
                    .arg("--state-dir")
                    .arg(dir.path().join(&name))
                    .env("FTDRIVE_TOKEN", &token)
                    .env("FTDRIVE_LOG", "error")
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap();
                (name, child)
            })
            .collect();
        Cluster { _dir: dir, url, token, head, nodes }
    }

    fn kill(&mut self, node: &str) {
        let (_, child) = self.nodes.iter_mut().find(|(n, _)| n == node).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, child) in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = self.head.kill();
        let _ = self.head.wait();
    }
}

struct Api {
    http: reqwest::Client,
    url: String,
    token: String,
}

impl Api {
    async fn get(&self, path: &str) -> Value {
        let response = self.http.get(format!("{}{path}", self.url)).bearer_auth(&self.token).send().await;
        match response {
            Ok(r) => r.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        }
    }

    async fn submit(&self, spec: &Value) -> String {
        let response = self
            .http
            .post(format!("{}/v1/jobs", self.url))
            .bearer_auth(&self.token)
            .json(&json!({"spec": spec}))
            .send()
            .await
            .unwrap();
        let view: Value = response.json().await.unwrap();
        view["id"].as_str().expect("accepted").to_string()
    }

    async fn wait_for_nodes(&self, count: usize) {
        for _ in 0..400 {
            if self.get("/v1/nodes").await.as_array().is_some_and(|n| n.len() >= count) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("nodes did not register");
    }

    /// Every event line, with the instant it arrived here.
    async fn events(&self) -> tokio::sync::mpsc::UnboundedReceiver<(Instant, Value)> {
        let response = self.http.get(format!("{}/v1/events", self.url)).bearer_auth(&self.token).send().await.unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut bytes = response.bytes_stream();
            let mut buffer = Vec::new();
            while let Some(Ok(chunk)) = bytes.next().await {
                buffer.extend_from_slice(&chunk);
                while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    if let Ok(event) = serde_json::from_slice(&line) {
                        let _ = tx.send((Instant::now(), event));
                    }
                }
            }
        });
        rx
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn submit_thousand_jobs() {
    const JOBS: usize = 1_000;
    const CLIENTS: usize = 8;
    let cluster = Cluster::start(4, 250, &[]);
    let api = Arc::new(Api { http: reqwest::Client::new(), url: cluster.url.clone(), token: cluster.token.clone() });
    api.wait_for_nodes(4).await;
    let mut events = api.events().await;
    let spec = json!({"name": "tiny", "command": ["sleep", "5"], "min_nodes": 1, "max_nodes": 1, "stop_grace_ms": 100});
    let submitted: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (api, spec, submitted) = (api.clone(), spec.clone(), submitted.clone());
            tokio::spawn(async move {
                for _ in (c..JOBS).step_by(CLIENTS) {
                    let at = Instant::now();
                    let id = api.submit(&spec).await;
                    submitted.lock().unwrap().push((id, at));
                }
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
    let accepted = started.elapsed();
    let sent: std::collections::BTreeMap<String, Instant> = submitted.lock().unwrap().iter().cloned().collect();
    let mut latencies = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while latencies.len() < JOBS && Instant::now() < deadline {
        let Ok(Some((at, event))) = tokio::time::timeout(Duration::from_secs(5), events.recv()).await else { continue };
        if event["event"] == "job_state" && event["to"] == "RUNNING" {
            if let Some(sent_at) = event["job"].as_str().and_then(|j| sent.get(j)) {
                latencies.push(at.duration_since(*sent_at));
            }
        }
    }
    assert_eq!(latencies.len(), JOBS, "every job reached RUNNING");
    latencies.sort();
    println!(
        "daemon_submit_1000_jobs: {:.0} jobs/s accepted ({JOBS} in {:.2} s by {CLIENTS} clients); submit→RUNNING p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        JOBS as f64 / accepted.as_secs_f64(),
        accepted.as_secs_f64(),
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().unwrap().as_secs_f64() * 1e3
    );
}

/// One run of (b): returns the time from the kill to the replacement's RUNNING event.
async fn recover_once() -> Duration {
    let mut cluster = Cluster::start(4, 1, &["--node-timeout-ms", "1000", "--heartbeat-interval-ms", "250"]);
    let api = Api { http: reqwest::Client::new(), url: cluster.url.clone(), token: cluster.token.clone() };
    api.wait_for_nodes(4).await;
    let mut events = api.events().await;
    let spec = json!({"name": "gang", "command": ["sleep", "600"], "min_nodes": 3, "max_nodes": 3,
                      "retries": {"backoff_ms": {"initial": 0, "max": 0}}, "stop_grace_ms": 500});
    let job = api.submit(&spec).await;
    let mut running = 0;
    while running < 3 {
        let (_, event) = events.recv().await.expect("events flow");
        if event["event"] == "transition" && event["to"] == "RUNNING" {
            running += 1;
        }
    }
    let view = api.get(&format!("/v1/jobs/{job}")).await;
    let victim_actor = view["actors"].as_array().unwrap().iter().find(|a| a["rank"] == 1).unwrap().clone();
    let (actor, node) =
        (victim_actor["name"].as_str().unwrap().to_string(), victim_actor["node"].as_str().unwrap().to_string());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = Instant::now();
    cluster.kill(&node);
    loop {
        let (at, event) = tokio::time::timeout(Duration::from_secs(30), events.recv())
            .await
            .expect("recovered in time")
            .expect("events flow");
        if event["event"] == "transition"
            && event["actor"] == actor.as_str()
            && event["to"] == "RUNNING"
            && event["attempt"] == 2
        {
            return at.duration_since(killed);
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("daemon_submit_1000_jobs: bench\ndaemon_recover_from_kill: bench");
        return;
    }
    let only = |name: &str| std::env::args().skip(1).filter(|a| !a.starts_with('-')).all(|a| name.contains(&a));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    if only("daemon_submit_1000_jobs") {
        runtime.block_on(submit_thousand_jobs());
    }
    if only("daemon_recover_from_kill") {
        let mut runs: Vec<Duration> = (0..5).map(|_| runtime.block_on(recover_once())).collect();
        runs.sort();
        let text: Vec<String> = runs.iter().map(|d| format!("{:.0}", d.as_secs_f64() * 1e3)).collect();
        println!(
            "daemon_recover_from_kill: median {:.0} ms from kill -9 to the replacement RUNNING (node_timeout_ms 1000; runs {} ms)",
            runs[2].as_secs_f64() * 1e3,
            text.join(", ")
        );
    }
}
