//! The dashboard in a real browser (DESIGN §12): a real cluster recovers a job from a killed
//! agent, then `browser/dashboard.test.mjs` drives the page the head serves in headless
//! Chromium — the token prompt, the job's ledger and attempt timeline, why a second job waits,
//! the nodes page, and the live update when the job ends. Where node, Chromium or playwright-core is missing the test
//! says it was skipped and why; with `FTDRIVE_REQUIRE_BROWSER=1` (CI) that is a failure.

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

/// Long in its first cycle; about 22 s in the second, so that the browser sees the recovered
/// job RUNNING before it ends. Each attempt says who it is, which its log page shows; in the
/// second cycle 100 lines at once (more than the page's log box holds in sight), then a line
/// every 0.5 s, which the page reads on as they come.
const LONG_THEN_TWENTY: &str = r#"echo "rank $RANK in cycle $FTDRIVE_CYCLE"; if [ "$FTDRIVE_CYCLE" = 1 ]; then sleep 60; else printf '\033[32mcoloured\033[0m ok\nprogress 10%%\rprogress 100%%\n'; seq -f 'warm-up line %g' 1 100; for i in $(seq 1 44); do echo "tick $i"; sleep 0.5; done; fi"#;

/// The browser script bounds each of its waits (60 s for the job's end at most); this bounds
/// the whole run, Chromium's start included.
const BROWSER_LIMIT: Duration = Duration::from_secs(180);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("actors/ is inside the repository").to_path_buf()
}

/// Debian's Chromium, or `$FTDRIVE_CHROMIUM`.
fn chromium() -> PathBuf {
    std::env::var_os("FTDRIVE_CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// Why the browser test cannot run on this machine, if it cannot.
fn missing_tool(root: &Path, chromium: &Path) -> Option<String> {
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|out| out.status.success()) {
        return Some("`node` is not on PATH (Node.js 20 or newer is needed)".to_string());
    }
    if !chromium.exists() {
        return Some(format!("{} does not exist (apt-get install chromium)", chromium.display()));
    }
    if !root.join("browser/node_modules/playwright-core").is_dir() {
        return Some("browser/node_modules/playwright-core is missing (cd browser && npm ci)".to_string());
    }
    None
}

/// A skip is said on stderr directly, past the test harness's capture, so it shows in every run.
fn skip_unless_required(why: &str) {
    if std::env::var("FTDRIVE_REQUIRE_BROWSER").is_ok_and(|v| v == "1") {
        panic!("the dashboard's browser test cannot run: {why}; FTDRIVE_REQUIRE_BROWSER=1 requires it");
    }
    let _ = writeln!(std::io::stderr(), "dashboard browser test SKIPPED: {why}");
}

/// The actor's first attempt is in the ledger as lost with its node, charged to `system`.
fn lost_first_attempt(job: &Value, actor: &str) -> bool {
    job["ledger"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["actor"] == actor && e["attempt"] == 1 && e["cause"] == "node_lost" && e["budget"] == "system")
}

/// Runs the browser script against the cluster; its output goes straight to the test's output.
fn run_browser_test(root: &Path, c: &Cluster, names: [&str; 3], screenshot: &Path, chromium: &Path) -> ExitStatus {
    let [job, waiting, portless] = names;
    let mut child = Command::new("node")
        .arg("browser/dashboard.test.mjs")
        .current_dir(root)
        .env("FTDRIVE_URL", &c.url)
        .env("FTDRIVE_TOKEN", c.token())
        .env("FTDRIVE_JOB", job)
        .env("FTDRIVE_WAITING_JOB", waiting)
        .env("FTDRIVE_PORTLESS_NODE", portless)
        .env("FTDRIVE_SCREENSHOT", screenshot)
        .env("FTDRIVE_CHROMIUM", chromium)
        .env("FTDRIVE_HEAD_PID", c.head.id().to_string())
        .spawn()
        .expect("node starts");
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > BROWSER_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("browser/dashboard.test.mjs ran past {BROWSER_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_dashboard_shows_a_recovered_job_and_follows_it_live_to_its_end() {
    let root = repo_root();
    let chromium = chromium();
    if let Some(why) = missing_tool(&root, &chromium) {
        skip_unless_required(&why);
        return;
    }
    // A short keep-alive, so that the page notices a stopped head within a second. Rendezvous
    // ports for four agents on this machine (PS-2): the fifth to join has none until a node
    // dies, and a sixth, added last, none at all.
    let ports = ["--master-port-base", "65136", "--ports-per-node", "100"];
    let mut c =
        Cluster::start_with(&["n1", "n2", "n3", "n4", "n5"], &[&["--events-keepalive-ms", "300"][..], &ports].concat());
    // A hot spare: promoted when rank 1's node is lost, then refilled, so that the page shows
    // a spare standing by.
    // A time limit well past its end, which the job page shows.
    let spec = json!({"command": ["sh", "-c", LONG_THEN_TWENTY], "min_nodes": 3, "max_nodes": 3, "hot_spares": 1,
                      "run_timeout_ms": 3_600_000});
    let id = c.submit_no_wait(&c.spec("dashboard", spec));
    let job = c.wait_for_job(&id, "three ranks run", |j| running(j, 3));
    let (actor, victim) = actor_on_rank(&job, 1);
    c.kill_node(&victim);
    c.wait_for_job(&id, "the job runs again in cycle 2, the lost attempt in its ledger, a spare standing by", |j| {
        let standing_by = j["actors"].as_array().unwrap().iter().any(|a| a["state"] == "STANDBY");
        j["state"] == "RUNNING" && j["cycles"] == 2 && running(j, 3) && lost_first_attempt(j, &actor) && standing_by
    });
    // The operator drains the DEAD node, so that it comes back empty: the nodes page says so.
    c.ftdrive(&["drain", &victim]);

    // Every ALIVE node is busy now (three ranks and the spare): a second job waits, and the
    // jobs list says why.
    let waiting = json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1, "priority": 3});
    let waiter = c.submit_no_wait(&c.spec("waiter", waiting));
    c.wait_for_job(&waiter, "the second job waits for a node", |j| j["waiting"].is_string());
    // The dead node's ports went to the one that had none (the spare was refilled there), so a
    // node joining now is left none: the nodes page says so, and the waiter still waits.
    c.add_node("n6");
    c.wait_until("n6 registered", |c| c.nodes_json().as_array().unwrap().iter().any(|n| n["name"] == "n6"));

    let screenshot = root.join("target").join("dashboard.png");
    std::fs::create_dir_all(screenshot.parent().unwrap()).unwrap();
    let status = run_browser_test(&root, &c, [&id, &waiter, "n6"], &screenshot, &chromium);
    assert!(status.success(), "browser/dashboard.test.mjs failed ({status}); its output says which check");

    let png = std::fs::read(&screenshot).expect("the screenshot was saved");
    assert!(png.starts_with(b"\x89PNG"), "{} is a PNG", screenshot.display());
    c.wait_for_job(&id, "the job succeeded", |j| j["state"] == "SUCCEEDED");
    c.wait_for_job(&waiter, "the waiting job ran once a node was free", |j| j["state"] == "SUCCEEDED");
}
