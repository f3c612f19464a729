//! `/metrics` on the head and on the agents (DESIGN §12): well-formed OpenMetrics to a client
//! that asks as Prometheus does, the text format `promtool` checks to one that does not, which
//! a Prometheus parser reads, it needs the token, and its counters move as a job runs,
//! loses a node and recovers.

mod common;

use common::*;
use prometheus_parse::{Sample, Scrape, Value};
use serde_json::json;

/// Answers `(status code, body)` of a GET to `url` (`http://host:port/path`).
fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let (status, _, body) = get_accepting(url, token, None);
    (status, body)
}

/// What Prometheus 2 asks a target for.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
    version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `(status code, content type, body)` of a GET to `url` with an `Accept` header, if given.
fn get_accepting(url: &str, token: Option<&str>, accept: Option<&str>) -> (u16, String, String) {
    use std::io::{Read, Write};
    let rest = url.trim_start_matches("http://");
    let (host, path) = rest.split_at(rest.find('/').expect("a URL with a path"));
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}{accept}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head.split(' ').nth(1).and_then(|code| code.parse().ok()).expect("a status line");
    let content_type = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-type: ").map(str::to_string))
        .unwrap_or_default();
    (status, content_type, body.to_string())
}

/// Every line is a `# HELP`, `# TYPE`, `# UNIT` or `# EOF` comment, or `name{labels} value`
/// with a legal name and a number: the parser below skips what it cannot read, so this is the
/// strict half of "parses as Prometheus text".
fn assert_well_formed(text: &str) {
    assert!(text.ends_with("# EOF\n"), "OpenMetrics text ends with # EOF:\n{text}");
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            let keyword = comment.split(' ').next().unwrap();
            assert!(["HELP", "TYPE", "UNIT", "EOF"].contains(&keyword), "unknown comment: {line}");
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        let legal = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
        assert!(name.starts_with("ftdrive_") && name.chars().all(legal), "bad metric name: {line}");
        assert!(name_end == series.len() || series.ends_with('}'), "unclosed labels: {line}");
        assert!(value.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&value), "bad value: {line}");
    }
}

/// Scrapes `url` as Prometheus does (OpenMetrics, checked) and as `curl` or `promtool` do
/// (the text format, checked, and parsed).
fn scrape(url: &str, token: &str) -> Scrape {
    let (status, content_type, body) = get_accepting(url, Some(token), Some(PROMETHEUS_ACCEPT));
    assert_eq!(status, 200, "{url}: {body}");
    assert!(content_type.starts_with("application/openmetrics-text; version=1.0.0"), "{content_type}");
    assert_well_formed(&body);
    let (status, content_type, text) = get_accepting(url, Some(token), None);
    assert_eq!(status, 200, "{url}: {text}");
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    assert_text_format(&text);
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text")
}

/// The text format as `promtool check metrics` checks it: every sample's family (its name,
/// less a histogram's suffix) has a HELP and a TYPE under that name, and there is no
/// OpenMetrics-only line.
fn assert_text_format(text: &str) {
    let declared = |keyword: &str| -> std::collections::BTreeSet<&str> {
        text.lines().filter_map(|l| l.strip_prefix(keyword)?.split(' ').next()).collect()
    };
    let (helped, typed) = (declared("# HELP "), declared("# TYPE "));
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name = &line[..line.find(['{', ' ']).unwrap_or(line.len())];
        let family = ["_bucket", "_sum", "_count"]
            .into_iter()
            .find_map(|suffix| name.strip_suffix(suffix).filter(|f| typed.contains(f)))
            .unwrap_or(name);
        assert!(helped.contains(family) && typed.contains(family), "no HELP or TYPE for {name}:\n{text}");
    }
    assert!(!text.contains("# EOF") && !text.contains("# UNIT"), "OpenMetrics lines in the text format:\n{text}");
}

fn find<'a>(scrape: &'a Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<&'a Sample> {
    scrape.samples.iter().find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
}

/// A counter's, gauge's or histogram count's value; 0 for a series not (yet) written.
fn value(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    match find(scrape, metric, labels).map(|s| &s.value) {
        None => 0.0,
        Some(Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v)) => *v,
        Some(other) => panic!("{metric} is not a single number: {other:?}"),
    }
}

/// The summed `_count` of a histogram over all its label sets.
fn observations(scrape: &Scrape, histogram: &str) -> f64 {
    let count = format!("{histogram}_count");
    let counts = scrape.samples.iter().filter(|s| s.metric == count);
    counts
        .map(|s| match s.value {
            Value::Untyped(v) | Value::Counter(v) | Value::Gauge(v) => v,
            _ => panic!("{count} is not a number: {:?}", s.value),
        })
        .sum()
}

#[test]
fn metrics_need_the_token_and_move_as_a_job_recovers() {
    let mut c = Cluster::start(&["n1", "n2", "n3"]);
    let metrics_url = format!("{}/metrics", c.url);
    let (status, body) = get(&metrics_url, None);
    assert_eq!(status, 401, "no token, no metrics: {body}");
    assert!(serde_json::from_str::<serde_json::Value>(&body).is_ok_and(|v| v["error"].is_string()), "{body}");
    assert_eq!(get(&metrics_url, Some("wrong")).0, 401);

    let idle = scrape(&metrics_url, &c.token());
    assert_eq!(value(&idle, "ftdrive_nodes", &[("state", "ALIVE")]), 3.0);
    assert_eq!(value(&idle, "ftdrive_nodes_unhealthy", &[]), 0.0);
    assert_eq!(value(&idle, "ftdrive_job_submissions_total", &[]), 0.0);

    let spec = c.spec("recovers", json!({"command": ["sh", "-c", LONG_THEN_SHORT], "min_nodes": 2, "max_nodes": 2}));
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "it runs", |j| running(j, 2));
    let busy = scrape(&metrics_url, &c.token());
    assert_eq!(value(&busy, "ftdrive_job_submissions_total", &[]), 1.0);
    assert_eq!(value(&busy, "ftdrive_jobs", &[("state", "RUNNING")]), 1.0);
    assert_eq!(value(&busy, "ftdrive_actors", &[("state", "RUNNING")]), 2.0);
    assert_eq!(observations(&busy, "ftdrive_placement_seconds"), 2.0, "both bundles placed once");
    assert_eq!(value(&busy, "ftdrive_attempts_total", &[("cause", "node_lost")]), 0.0);

    let (_, lost) = actor_on_rank(&job, 0);
    c.kill_node(&lost);
    c.wait_for_job(&id, "it recovers and succeeds", |j| j["state"] == "SUCCEEDED");
    let after = scrape(&metrics_url, &c.token());
    assert_eq!(value(&after, "ftdrive_attempts_total", &[("cause", "node_lost"), ("budget", "system")]), 1.0);
    assert_eq!(value(&after, "ftdrive_attempts_total", &[("cause", "completed"), ("budget", "none")]), 2.0);
    assert_eq!(observations(&after, "ftdrive_replacement_seconds"), 1.0, "one failure, one replacement");
    assert!(observations(&after, "ftdrive_placement_seconds") >= 3.0, "the lost bundle was placed again");
    assert_eq!(value(&after, "ftdrive_jobs", &[("state", "SUCCEEDED")]), 1.0);
    assert_eq!(value(&after, "ftdrive_jobs", &[("state", "RUNNING")]), 0.0, "gauges are read afresh");
    assert_eq!(value(&after, "ftdrive_nodes", &[("state", "DEAD")]), 1.0);
    assert!(observations(&after, "ftdrive_heartbeat_lag_seconds") > 0.0, "heartbeats were measured");

    // Each agent serves its own; together the survivors started and saw succeed the second
    // cycle's two attempts.
    let nodes = c.nodes_json();
    let survivors: Vec<&serde_json::Value> =
        nodes.as_array().unwrap().iter().filter(|n| n["name"] != lost.as_str()).collect();
    let mut succeeded = 0.0;
    for node in survivors {
        let url = node["metrics_url"].as_str().expect("nodes say where their agent's metrics are");
        assert_eq!(get(url, None).0, 401, "an agent's metrics need its credential too");
        let (status, error) = get(url, Some(&c.token()));
        assert_eq!(status, 401, "the client token is not an agent's credential");
        assert!(error.contains("take the agent token ($FTDRIVE_AGENT_TOKEN or the `agent-token` file"), "{error}");
        let agent = scrape(url, &c.agent_token());
        assert!(value(&agent, "ftdrive_agent_head_connections_total", &[]) >= 1.0);
        assert_eq!(value(&agent, "ftdrive_agent_attempts", &[]), 0.0, "nothing left running");
        succeeded += value(&agent, "ftdrive_agent_attempts_ended_total", &[("outcome", "succeeded")]);
    }
    assert_eq!(succeeded, 2.0);
}

/// `ftdrive_queue_depth` counts bundles, an infeasible gang's included, and every known state
/// is a series, at 0 when nothing is in it (a vanished series reads as "no data", not 0); so
/// is every known label set of the counters and histograms before their first event.
#[test]
fn queue_depth_counts_waiting_bundles_and_empty_states_read_zero() {
    let c = Cluster::start(&["n1"]);
    let metrics_url = format!("{}/metrics", c.url);
    let idle = scrape(&metrics_url, &c.token());
    for (metric, label, state) in [
        ("ftdrive_jobs", "state", "RUNNING"),
        ("ftdrive_nodes", "state", "DEAD"),
        ("ftdrive_queue_depth", "class", "pending_gang"),
    ] {
        let sample = find(&idle, metric, &[(label, state)]).unwrap_or_else(|| panic!("no {metric}{{{label}={state}}}"));
        assert!(matches!(sample.value, Value::Gauge(v) if v == 0.0), "{metric}: {:?}", sample.value);
    }
    // Counters and histograms too, for every label set the cause table and queue classes give.
    let (_, text) = get(&metrics_url, Some(&c.token()));
    for series in [
        r#"ftdrive_attempts_total{cause="node_lost",budget="system"} 0"#,
        r#"ftdrive_attempts_total{cause="completed",budget="none"} 0"#,
        r#"ftdrive_placement_seconds_count{class="replacement"} 0"#,
    ] {
        assert!(text.lines().any(|l| l == series), "no {series} on an idle head:\n{text}");
    }
    let nodes = c.nodes_json();
    let agent_url = nodes[0]["metrics_url"].as_str().unwrap();
    let (_, agent) = get(agent_url, Some(&c.agent_token()));
    for outcome in ["succeeded", "failed"] {
        let series = format!(r#"ftdrive_agent_attempts_ended_total{{outcome="{outcome}"}} 0"#);
        assert!(agent.lines().any(|l| l == series), "no {series} on an idle agent:\n{agent}");
    }
    // A gang of 3 on one node could never be placed (parked as infeasible) and still waits.
    let spec = c.spec("wide", json!({"command": ["true"], "min_nodes": 3, "max_nodes": 3}));
    c.submit_no_wait(&spec);
    let waiting = scrape(&metrics_url, &c.token());
    assert_eq!(value(&waiting, "ftdrive_queue_depth", &[("class", "pending_gang")]), 3.0, "three bundles, one item");
}

/// An agent counts each attempt it started once, however fast its workers end (a command that
/// ends before the agent is connected to its supervisor still ran), and not again when a
/// restarted agent re-attaches to it: that one is `reattached_attempts`.
#[test]
fn an_agent_counts_each_start_once_and_a_re_attached_one_apart() {
    let mut c = Cluster::start(&["n1"]);
    let agent_metrics = |c: &Cluster| {
        let nodes = c.nodes_json();
        let url = nodes[0]["metrics_url"].as_str().expect("the agent's metrics URL").to_string();
        scrape(&url, &c.agent_token())
    };
    let commands = [json!(["true"]), json!(["false"]), json!(["sh", "-c", "exit 7"])];
    let quick: Vec<String> = (0..12)
        .map(|i| {
            let body = json!({"command": commands[i % 3], "min_nodes": 1, "max_nodes": 1, "retries": {"user": 0}});
            c.submit_no_wait(&c.spec(&format!("quick{i}"), body))
        })
        .collect();
    for id in &quick {
        c.wait_for_job(id, "it ends", |j| ["SUCCEEDED", "FAILED"].contains(&j["state"].as_str().unwrap_or("")));
    }
    let agent = agent_metrics(&c);
    let ended = |outcome| value(&agent, "ftdrive_agent_attempts_ended_total", &[("outcome", outcome)]);
    assert_eq!((ended("succeeded"), ended("failed")), (4.0, 8.0));
    assert_eq!(value(&agent, "ftdrive_agent_attempts_started_total", &[]), 12.0, "every one that ended had started");
    assert_eq!(value(&agent, "ftdrive_agent_attempts", &[]), 0.0, "none left supervised");

    let long = c.submit_no_wait(&c.spec("long", json!({"command": ["sleep", "300"], "min_nodes": 1, "max_nodes": 1})));
    c.wait_for_job(&long, "it runs", |j| running(j, 1));
    c.kill_node("n1");
    c.add_node("n1");
    c.wait_until("the new agent re-attached", |c| {
        let nodes = c.nodes_json();
        let url = nodes[0]["metrics_url"].as_str().unwrap_or_default().to_string();
        // Until the new agent registers, the URL may still be the killed one's.
        let host = url.trim_start_matches("http://").split('/').next().unwrap_or_default().to_string();
        std::net::TcpStream::connect(host).is_ok()
            && get(&url, Some(&c.agent_token())).1.contains("ftdrive_agent_reattached_attempts_total 1")
    });
    let again = agent_metrics(&c);
    assert_eq!(value(&again, "ftdrive_agent_attempts_started_total", &[]), 0.0, "an earlier agent started it");
    assert_eq!(value(&again, "ftdrive_agent_attempts", &[]), 1.0);
    c.ftdrive(&["stop", &long]);
    c.wait_for_job(&long, "it stops", |j| j["state"] == "STOPPED");
}

/// Prometheus finds the agents' metrics through the head (`http_sd_configs` on
/// `/v1/metrics/targets`): each target, put together as Prometheus does from its address and
/// labels, answers the scrape. An agent given `--log-port` serves there, so that a static
/// target or a firewall rule can name it, and a second agent given the same port exits 2
/// saying which flag to change.
/// A HEAD request (`curl -I`, a load balancer's probe) gets the GET's status and headers, no
/// body: it was 405.
fn assert_head_answers_without_a_body(url: &str, token: &str) {
    let rest = url.trim_start_matches("http://");
    let (host, path) = rest.split_at(rest.find('/').expect("a URL with a path"));
    let answer = http(&format!("http://{host}"), "HEAD", path, Some(token), "");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "HEAD {url}: {answer}");
    assert!(head.to_ascii_lowercase().contains("content-type: "), "HEAD {url}: {answer}");
    assert_eq!(body, "", "HEAD {url}: no body");
}

#[test]
fn agents_are_discovered_through_the_head_and_keep_the_port_they_are_given() {
    let mut c = Cluster::start(&[]);
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let fixed = c.node_command("fixed").args(["--log-port", &port.to_string()]).spawn().unwrap();
    c.nodes.insert("fixed".into(), fixed);
    c.add_node("any");
    c.wait_until("both registered", |c| c.nodes_json().as_array().unwrap().len() == 2);
    let (status, _) = get(&format!("{}/v1/metrics/targets", c.url), None);
    assert_eq!(status, 401, "discovery takes the client token like every route");
    let (status, body) = get(&format!("{}/v1/metrics/targets", c.url), Some(&c.token()));
    assert_eq!(status, 200, "{body}");
    for path in ["/metrics", "/v1/health"] {
        assert_head_answers_without_a_body(&format!("{}{path}", c.url), &c.token());
    }
    let groups: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    let mut nodes = Vec::new();
    for group in &groups {
        let labels = &group["labels"];
        let target = group["targets"][0].as_str().expect("one address per node");
        let url = format!(
            "{}://{target}{}",
            labels["__scheme__"].as_str().unwrap(),
            labels["__metrics_path__"].as_str().unwrap()
        );
        let scraped = scrape(&url, &c.agent_token());
        assert!(find(&scraped, "ftdrive_agent_attempts", &[]).is_some(), "{url} is an agent's metrics");
        assert_head_answers_without_a_body(&url, &c.agent_token());
        // Only labels that stay with the node: one that changed with its state (a drain)
        // would start a new series, and `rate()` would lose the counts at the change.
        let keys: Vec<&String> = labels.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["__metrics_path__", "__scheme__", "node"], "{labels}");
        let node = labels["node"].as_str().unwrap().to_string();
        if node == "fixed" {
            assert_eq!(target, format!("127.0.0.1:{port}"), "the agent serves on the port it was given");
        }
        nodes.push(node);
    }
    nodes.sort();
    assert_eq!(nodes, ["any", "fixed"]);

    let mut taken = c.node_command("second");
    let out = taken.args(["--log-port", &port.to_string()]).stderr(std::process::Stdio::piped()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("give another --log-port"), "{stderr}");

    // A DEAD node stays a target (its `up` goes 0) until it is forgotten, across a head
    // restart too: the head keeps each node's last log server with the node.
    c.kill_node("fixed");
    let targets = |c: &Cluster| {
        let (status, body) = get(&format!("{}/v1/metrics/targets", c.url), Some(&c.token()));
        assert_eq!(status, 200, "{body}");
        let groups: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
        let mut nodes: Vec<String> = groups.iter().map(|g| g["labels"]["node"].as_str().unwrap().to_string()).collect();
        nodes.sort();
        nodes
    };
    let fixed_is = |c: &Cluster, state: &str| {
        c.nodes_json().as_array().unwrap().iter().any(|n| n["name"] == "fixed" && n["state"] == state)
    };
    c.wait_until("fixed is DEAD", |c| fixed_is(c, "DEAD"));
    assert_eq!(targets(&c), ["any", "fixed"]);
    c.restart_head();
    c.wait_until("the restarted head knows fixed", |c| {
        c.try_ftdrive(&["nodes"]).status.success() && fixed_is(c, "DEAD")
    });
    assert_eq!(targets(&c), ["any", "fixed"], "a DEAD node is a target after a head restart");
    c.ftdrive(&["forget", "fixed"]);
    assert_eq!(targets(&c), ["any"], "a forgotten node is not");
}
