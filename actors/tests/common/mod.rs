//! The real-cluster test harness: a real `ftdrive head` and real `ftdrive node` processes on
//! loopback, set up as the README's recipe does — one state dir shared by the head (which makes
//! the token there) and its agents and clients, and no `$FTDRIVE_TOKEN`. The head listens on
//! a port of its own choosing and says which in `head.url`. Every wait is bounded; every
//! process started is ended.

#![allow(dead_code)]

pub mod relay;

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const WAIT: Duration = Duration::from_secs(60);

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub url: String,
    pub head: Child,
    pub nodes: BTreeMap<String, Child>,
    /// Put in every job's environment, so a test finds its own processes (and no other test's).
    pub mark: String,
    /// Extra arguments every `ftdrive head` of this cluster gets.
    head_args: Vec<String>,
    /// Extra environment every other `ftdrive` command of this cluster gets.
    env: Vec<(String, String)>,
}

static CLUSTERS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Cluster {
    /// A head (fast failure detection) and agents with one CPU each.
    pub fn start(nodes: &[&str]) -> Cluster {
        Cluster::start_with(nodes, &[])
    }

    /// As `start`, with extra arguments for the head.
    pub fn start_with(nodes: &[&str], head_args: &[&str]) -> Cluster {
        Cluster::start_configured(nodes, head_args, &[])
    }

    /// As `start_with`, and `env` for every agent and client command.
    pub fn start_configured(nodes: &[&str], head_args: &[&str], env: &[(&str, &str)]) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let n = CLUSTERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mark = format!("cluster-{}-{n}", std::process::id());
        let head_args: Vec<String> = head_args.iter().map(|a| a.to_string()).collect();
        let head = spawn_head(dir.path(), "127.0.0.1:0", &head_args);
        let url = wait_for_url(dir.path());
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut cluster = Cluster { dir, url, head, nodes: BTreeMap::new(), mark, head_args, env };
        cluster.wait_until("the head answers", |c| c.try_ftdrive(&["nodes", "--output", "json"]).status.success());
        for name in nodes {
            cluster.add_node(name);
        }
        cluster.wait_until("every node registered", |c| c.nodes_json().as_array().unwrap().len() >= nodes.len());
        cluster
    }

    pub fn add_node(&mut self, name: &str) {
        let child = self.node_command(name).spawn().unwrap();
        self.nodes.insert(name.to_string(), child);
    }

    /// `ftdrive node` for `name`, its data in the shared state dir (`node-<name>`).
    pub fn node_command(&self, name: &str) -> Command {
        self.node_command_in(name, self.dir.path())
    }

    /// `node_command`, with attempts that set no `cwd` run in `work_dir`.
    pub fn node_command_in(&self, name: &str, work_dir: &std::path::Path) -> Command {
        let mut cmd = self.command();
        cmd.args(["node", "--name", name, "--resources", "cpu=1", "--addr", "127.0.0.1"])
            .arg("--work-dir")
            .arg(work_dir)
            .stdout(Stdio::null());
        cmd
    }

    /// SIGKILL for a node's agent process (its attempts live on under their supervisors).
    pub fn kill_node(&mut self, name: &str) {
        let mut child = self.nodes.remove(name).expect("a node of this cluster");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGKILL for the head, then a new head on the same port and state dir.
    pub fn restart_head(&mut self) {
        self.kill_head();
        self.start_head_again();
    }

    /// SIGTERM for the head, and its exit status once it has stopped.
    pub fn stop_head(&mut self) -> std::process::ExitStatus {
        // SAFETY: signalling a child process we started.
        unsafe { libc::kill(self.head.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        loop {
            if let Some(status) = self.head.try_wait().unwrap() {
                return status;
            }
            assert!(start.elapsed() < WAIT, "the head did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL for the head; `start_head_again` brings it back.
    pub fn kill_head(&mut self) {
        self.head.kill().unwrap();
        self.head.wait().unwrap();
    }

    /// A new head on the killed one's port and state dir, started with `head_args` from now on.
    pub fn start_head_again_with(&mut self, head_args: &[&str]) {
        self.head_args = head_args.iter().map(|a| a.to_string()).collect();
        self.start_head_again();
    }

    /// A new head on the killed one's port and state dir.
    pub fn start_head_again(&mut self) {
        let listen = self.url.trim_start_matches("https://").trim_start_matches("http://").to_string();
        self.head = spawn_head(self.dir.path(), &listen, &self.head_args);
    }

    /// The client token.
    pub fn token(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("token")).unwrap().trim().to_string()
    }

    /// The agent token (agents read it from the shared state dir).
    pub fn agent_token(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent-token")).unwrap().trim().to_string()
    }

    /// Any `ftdrive` command, as a user of this cluster runs it.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ftdrive"));
        cmd.env_remove("FTDRIVE_TOKEN")
            .env_remove("FTDRIVE_AGENT_TOKEN")
            .env("FTDRIVE_HEAD", &self.url)
            .env("FTDRIVE_STATE_DIR", self.dir.path())
            .env("FTDRIVE_LOG", "warn")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    pub fn try_ftdrive(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    pub fn ftdrive(&self, args: &[&str]) -> String {
        let out = self.try_ftdrive(args);
        assert!(out.status.success(), "ftdrive {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Writes a job spec (with this test's mark in its environment) and returns its path.
    pub fn spec(&self, name: &str, mut spec: Value) -> PathBuf {
        spec["name"] = json!(name);
        // Beside whatever the spec sets.
        match spec["env"].as_object_mut() {
            Some(env) => drop(env.insert("FTDRIVE_TEST_MARK".into(), json!(self.mark))),
            None => spec["env"] = json!({"FTDRIVE_TEST_MARK": self.mark}),
        }
        let path = self.dir.path().join(format!("{name}.json"));
        std::fs::write(&path, spec.to_string()).unwrap();
        path
    }

    pub fn submit_no_wait(&self, spec: &std::path::Path) -> String {
        let out = self.ftdrive(&["submit", "--no-wait", "--output", "json", spec.to_str().unwrap()]);
        serde_json::from_str::<Value>(&out).unwrap()["id"].as_str().unwrap().to_string()
    }

    pub fn job(&self, id: &str) -> Value {
        serde_json::from_str(&self.ftdrive(&["status", id, "--output", "json"])).unwrap()
    }

    pub fn nodes_json(&self) -> Value {
        serde_json::from_str(&self.ftdrive(&["nodes", "--output", "json"])).unwrap()
    }

    pub fn wait_until(&self, what: &str, done: impl Fn(&Cluster) -> bool) {
        let start = Instant::now();
        while !done(self) {
            assert!(start.elapsed() < WAIT, "timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn wait_for_job(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let job = self.job(id);
            if done(&job) {
                return job;
            }
            assert!(start.elapsed() < WAIT, "timed out waiting until {what}: {job:#}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Pids of this test's job processes, optionally only those started on `node`.
    pub fn processes(&self, node: Option<&str>) -> Vec<u32> {
        let mark = format!("FTDRIVE_TEST_MARK={}", self.mark);
        let on = node.map(|n| format!("FTDRIVE_NODE={n}"));
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
            let Ok(env) = std::fs::read(entry.path().join("environ")) else { continue };
            let vars: Vec<String> = env.split(|b| *b == 0).map(|v| String::from_utf8_lossy(v).into_owned()).collect();
            if vars.contains(&mark) && on.as_ref().is_none_or(|n| vars.contains(n)) && !is_zombie(pid) {
                pids.push(pid);
            }
        }
        pids
    }
}

/// A head with fast failure detection on `listen`, state in `dir`.
pub fn spawn_head(dir: &Path, listen: &str, extra: &[String]) -> Child {
    let _ = std::fs::remove_file(dir.join("head.url"));
    head_command(dir, listen, extra).spawn().unwrap()
}

/// The command `spawn_head` runs; a timing flag in `extra` replaces the fast default.
pub fn head_command(dir: &Path, listen: &str, extra: &[String]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ftdrive"));
    cmd.args(["head", "--listen", listen]);
    for (flag, fast) in [("--heartbeat-interval-ms", "200"), ("--node-timeout-ms", "1000")] {
        if !extra.iter().any(|e| e == flag) {
            cmd.args([flag, fast]);
        }
    }
    cmd.args(extra)
        .arg("--state-dir")
        .arg(dir)
        .env_remove("FTDRIVE_TOKEN")
        .env_remove("FTDRIVE_AGENT_TOKEN")
        .env("FTDRIVE_LOG", "warn")
        .stdout(Stdio::null());
    cmd
}

/// The URL a head started on `dir` announces once it listens (and has made its token).
pub fn wait_for_url(dir: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(url) = std::fs::read_to_string(dir.join("head.url")) {
            return url;
        }
        assert!(start.elapsed() < WAIT, "the head never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |s| s.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
}

/// A child process that is ended whatever the test does.
pub struct Ended(pub Child);

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.nodes.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = self.head.kill();
        let _ = self.head.wait();
        // The agents' supervisors take their process groups down with them.
        let start = Instant::now();
        while !self.processes(None).is_empty() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

pub fn actor_on_rank(job: &Value, rank: u64) -> (String, String) {
    let actor = job["actors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["rank"] == rank && a["state"] == "RUNNING")
        .expect("a running rank");
    (actor["name"].as_str().unwrap().to_string(), actor["node"].as_str().unwrap().to_string())
}

/// Whether `count` actors are RUNNING with their starts confirmed by their agents (a process
/// was spawned), not merely sent.
pub fn running(job: &Value, count: usize) -> bool {
    let runs = |a: &&Value| a["state"] == "RUNNING" && a["starting"] == false;
    job["actors"].as_array().unwrap().iter().filter(runs).count() == count
}

/// Long in its first cycle, short afterwards: the job ends soon once it recovered.
pub const LONG_THEN_SHORT: &str = r#"if [ "$FTDRIVE_CYCLE" = 1 ]; then sleep 60; else sleep 1; fi"#;

/// A raw HTTP request, to see exactly what the head answers.
pub fn http(url: &str, method: &str, path: &str, auth: Option<&str>, body: &str) -> String {
    let host = url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).unwrap();
    let auth = auth.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// The attempt cgroup a supervisor was given (`--cgroup DIR`), if `pid` is one that was.
pub fn supervisor_cgroup(pid: u32) -> Option<PathBuf> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    let at = args.iter().position(|a| a == "--cgroup")?;
    args.get(at + 1).map(PathBuf::from)
}

/// Where the cgroup v2 hierarchy is mounted, if it is.
pub fn cgroup2_mount() -> Option<String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|l| l.contains(" - cgroup2 ").then(|| l.split_whitespace().nth(4).unwrap().to_string()))
}
