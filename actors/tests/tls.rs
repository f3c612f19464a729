//! TLS off loopback (DESIGN §11), with real processes on loopback and a CA made here: a TLS
//! head, agents that verify it and serve their logs over HTTPS, the CLI over https://; a plain
//! http:// URL or a missing CA fails saying why; a server off loopback without TLS is refused.

mod common;

use common::*;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A CA, and a server certificate it signed for 127.0.0.1 and localhost.
struct Pki {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "ftdrive test CA");
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap()).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let names = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let cert = rcgen::CertificateParams::new(names).unwrap().signed_by(&key, &*ca).unwrap();
        let write = |name: &str, text: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let (ca, cert, key) =
            (write("ca.pem", ca.pem()), write("cert.pem", cert.pem()), write("key.pem", key.serialize_pem()));
        Pki { _dir: dir, ca, cert, key }
    }

    fn server_args(&self) -> Vec<String> {
        ["--tls-cert", path(&self.cert), "--tls-key", path(&self.key)].map(str::to_string).to_vec()
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A TLS head whose agents verify it and serve their logs over HTTPS, which the head verifies.
fn tls_cluster(pki: &Pki) -> Cluster {
    let mut head_args = pki.server_args();
    head_args.extend(["--ca-cert".to_string(), path(&pki.ca).to_string()]);
    let head_args: Vec<&str> = head_args.iter().map(String::as_str).collect();
    let mut c = Cluster::start_configured(&[], &head_args, &[("FTDRIVE_CA_CERT", path(&pki.ca))]);
    assert!(c.url.starts_with("https://127.0.0.1:"), "the head announces https: {}", c.url);
    for name in ["n1", "n2"] {
        let node = c.node_command(name).args(pki.server_args()).spawn().unwrap();
        c.nodes.insert(name.to_string(), node);
    }
    c.wait_until("both agents registered over wss", |c| c.nodes_json().as_array().unwrap().len() == 2);
    c
}

#[test]
fn a_tls_head_serves_the_cli_and_agents_and_refuses_what_it_cannot_verify() {
    let pki = Pki::new();
    let c = tls_cluster(&pki);
    let nodes = c.nodes_json();
    for node in nodes.as_array().unwrap() {
        let metrics = node["metrics_url"].as_str().unwrap_or_default();
        assert!(metrics.starts_with("https://127.0.0.1:"), "the agents' log servers speak HTTPS: {node:#}");
    }

    let spec = c.spec(
        "over-tls",
        json!({"command": ["sh", "-c", "echo hello from $FTDRIVE_NODE"], "min_nodes": 2, "max_nodes": 2}),
    );
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it succeeds", |j| j["state"] == "SUCCEEDED");

    // `logs` with --ca-cert instead of $FTDRIVE_CA_CERT; the head fetches from an HTTPS agent.
    let logs =
        c.command().env_remove("FTDRIVE_CA_CERT").args(["logs", &id, "--ca-cert", path(&pki.ca)]).output().unwrap();
    assert!(logs.status.success(), "logs over https: {}", stderr_of(&logs));
    let text = String::from_utf8_lossy(&logs.stdout);
    assert!(text.contains("hello from n1") && text.contains("hello from n2"), "{text}");

    let plain_url = c.url.replacen("https://", "http://", 1);
    let plain = c.command().env("FTDRIVE_HEAD", &plain_url).args(["status"]).output().unwrap();
    // A command to fix, not a head to wait for: a script that retries on 4 would retry for ever.
    assert_eq!(plain.status.code(), Some(2), "{}", stderr_of(&plain));
    let expected = format!("the head at {plain_url} speaks HTTPS; use {}", c.url);
    assert!(stderr_of(&plain).contains(&expected), "wanted `{expected}` in: {}", stderr_of(&plain));

    let no_ca = c.command().env_remove("FTDRIVE_CA_CERT").args(["status"]).output().unwrap();
    assert_eq!(no_ca.status.code(), Some(2), "{}", stderr_of(&no_ca));
    let error = stderr_of(&no_ca);
    assert!(error.contains("not trusted") && error.contains("--ca-cert"), "{error}");
}

#[test]
fn an_agent_without_the_ca_does_not_link_and_says_why() {
    let pki = Pki::new();
    let c = tls_cluster(&pki);
    let stranger = c
        .node_command("n3")
        .env_remove("FTDRIVE_CA_CERT")
        .env("FTDRIVE_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stranger = Ended(stranger);
    let lines = BufReader::new(stranger.0.stderr.take().unwrap()).lines();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let start = Instant::now();
    let warning = loop {
        let line = rx.recv_timeout(WAIT.saturating_sub(start.elapsed())).expect("the agent says why it cannot link");
        if line.contains("cannot reach the head") {
            break line;
        }
    };
    assert!(warning.contains("not trusted") && warning.contains("--ca-cert"), "{warning}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(c.nodes_json().as_array().unwrap().len(), 2, "the agent that cannot verify the head never registered");
}

#[test]
fn plain_http_off_loopback_is_refused_unless_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let out = head_command(dir.path(), "0.0.0.0:0", &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let error = stderr_of(&out);
    for why in ["without TLS", "--tls-cert", "--tls-key", "--insecure-http"] {
        assert!(error.contains(why), "`{why}` missing from: {error}");
    }
    assert!(!dir.path().join("head.url").exists(), "the refused head never listened");

    let insecure = Ended(spawn_head(dir.path(), "0.0.0.0:0", &["--insecure-http".to_string()]));
    let url = wait_for_url(dir.path());
    assert!(url.starts_with("http://0.0.0.0:"), "{url}");
    drop(insecure);

    // An agent's log server follows the same rule (checked before it contacts any head).
    let node = std::process::Command::new(env!("CARGO_BIN_EXE_ftdrive"))
        .args(["node", "--head", "http://127.0.0.1:9", "--name", "n1", "--addr", "0.0.0.0"])
        .arg("--state-dir")
        .arg(dir.path())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(node.status.code(), Some(2), "{}", stderr_of(&node));
    assert!(stderr_of(&node).contains("without TLS"), "{}", stderr_of(&node));
}
