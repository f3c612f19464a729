//! Least privilege, tried as an attacker with a job or a second machine would (DESIGN §11):
//! each credential opens only its own door, a job holds no credential, a node name belongs to
//! one live agent and a node reports only on its own attempts, and nothing an attempt starts
//! outlives it.

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::{self, client::IntoClientRequest, stream::MaybeTlsStream, Message, WebSocket};

/// Every client route, with a body where it takes one.
const CLIENT_ROUTES: [(&str, &str, &str); 15] = [
    ("GET", "/v1/jobs", ""),
    ("POST", "/v1/jobs", r#"{"spec": {"name": "x", "command": ["true"], "min_nodes": 1, "max_nodes": 1}}"#),
    ("GET", "/v1/jobs/j1", ""),
    ("POST", "/v1/jobs/j1/stop", ""),
    ("GET", "/v1/jobs/j1/events", ""),
    ("GET", "/v1/jobs/j1/logs?actor=0", ""),
    ("GET", "/v1/events", ""),
    ("GET", "/v1/nodes", ""),
    ("GET", "/v1/nodes/n1", ""),
    ("POST", "/v1/nodes/n1/drain", r#"{"deadline_ms": 1000}"#),
    ("POST", "/v1/nodes/n1/undrain", ""),
    ("DELETE", "/v1/nodes/n1", ""),
    ("GET", "/v1/health", ""),
    ("GET", "/metrics", ""),
    ("GET", "/v1/metrics/targets", ""),
];

fn status_and_json(response: &str) -> (u16, Value) {
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("a status line");
    (status, serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}")))
}

/// A WebSocket upgrade of `/v1/agent` with `token`: its status code.
fn agent_channel_status(url: &str, token: &str) -> u16 {
    match open_agent_channel(url, token) {
        Ok(_) => 101,
        Err(tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(e) => panic!("the upgrade failed otherwise: {e}"),
    }
}

type Channel = WebSocket<MaybeTlsStream<TcpStream>>;

fn open_agent_channel(url: &str, token: &str) -> Result<Channel, tungstenite::Error> {
    let mut request = format!("{}/v1/agent", url.replace("http://", "ws://")).into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    tungstenite::connect(request).map(|(socket, _)| socket)
}

#[test]
fn each_credential_opens_only_its_own_door() {
    let c = Cluster::start(&["n1"]);
    let (client, agent) = (c.token(), c.agent_token());
    assert_ne!(client, agent);
    for (method, path, body) in CLIENT_ROUTES {
        let (status, error) = status_and_json(&http(&c.url, method, path, Some(&agent), body));
        // A wrong credential, as DESIGN §11 has it: 401, naming the credential the route takes
        // and the one presented.
        assert_eq!(status, 401, "{method} {path} with the agent token: {error}");
        assert!(error["error"].as_str().unwrap().contains("client token"), "{error}");
        assert_eq!(error["presented"], "agent_token", "{error}");
        let (status, error) = status_and_json(&http(&c.url, method, path, None, body));
        assert_eq!(status, 401, "{method} {path} with no token: {error}");
    }
    assert_eq!(c.ftdrive(&["status", "--output", "json"]).trim(), "[]", "the refused submission changed nothing");
    assert_eq!(c.nodes_json()[0]["state"], "ALIVE", "the refused drain changed nothing");

    assert_eq!(agent_channel_status(&c.url, &client), 401, "the client token cannot open the agent channel");
    assert_eq!(agent_channel_status(&c.url, "wrong"), 401);
    assert_eq!(agent_channel_status(&c.url, &agent), 101, "the agent token can");
}

#[test]
fn a_job_sees_no_credential() {
    let mut c = Cluster::start(&[]);
    let (client, agent) = (c.token(), c.agent_token());
    // An agent given every credential in its environment, as a careless operator might.
    let node = c
        .node_command("n1")
        .env("FTDRIVE_TOKEN", &client)
        .env("FTDRIVE_AGENT_TOKEN", &agent)
        .env("FTDRIVE_CA_CERT", "/etc/ftdrive/ca.pem")
        .spawn()
        .unwrap();
    c.nodes.insert("n1".into(), node);
    c.wait_until("n1 registered", |c| c.nodes_json().as_array().unwrap().len() == 1);
    let spec = c.spec("snoop", json!({"command": ["env"], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it ends", |j| j["state"] == "SUCCEEDED");
    let env = c.ftdrive(&["logs", &id, "--actor", "0"]);
    assert!(env.contains("FTDRIVE_JOB_ID="), "the job's own variables are there: {env}");
    for withheld in ["FTDRIVE_TOKEN=", "FTDRIVE_AGENT_TOKEN=", "FTDRIVE_CA_CERT=", "FTDRIVE_STATE_DIR="] {
        assert!(!env.lines().any(|l| l.starts_with(withheld)), "{withheld} reached the job:\n{env}");
    }
    assert!(!env.contains(&client) && !env.contains(&agent), "a token's value reached the job:\n{env}");
    // A variable the job's own spec sets is its user's to pass, whatever its name; what the
    // agent sets for each attempt wins, as the contract does.
    let env = json!({"FTDRIVE_TOKEN": "the-users-own", "FTDRIVE_ADVERTISE_ADDR": "10.9.9.9"});
    let spec = c.spec("passed", json!({"command": ["env"], "min_nodes": 1, "max_nodes": 1, "env": env}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it ends", |j| j["state"] == "SUCCEEDED");
    let env = c.ftdrive(&["logs", &id, "--actor", "0"]);
    assert!(env.lines().any(|l| l == "FTDRIVE_TOKEN=the-users-own"), "the spec's own variable:\n{env}");
    assert!(env.lines().any(|l| l == "FTDRIVE_ADVERTISE_ADDR=127.0.0.1"), "the agent's address:\n{env}");
    assert!(!env.contains(&client) && !env.contains(&agent), "a token's value reached the job:\n{env}");
}

/// A job runs as its agent's Unix user, and a process can read the environment of another of
/// its user's: given its token in its environment (not a file its user can read), an agent
/// must still keep it from its jobs. The job reads its supervisor's environment (the control:
/// `/proc` is open to it) and then tries its agent's. Run as an unprivileged user, since root
/// reads every process's.
#[test]
fn a_job_cannot_read_its_agents_environment() {
    let mut c = Cluster::start(&[]);
    let own = tempfile::tempdir().unwrap();
    let agent = unprivileged_agent(&c, own.path(), "n1", TokenVia::Environment);
    let agent_pid = agent.id();
    c.nodes.insert("n1".into(), agent);
    c.wait_until("n1 registered", |c| c.nodes_json().as_array().unwrap().len() == 1);
    let snoop = r#"supervisor=$PPID; agent=$(cut -d' ' -f4 /proc/$supervisor/stat); echo "agent $agent"
        tr '\0' '\n' < /proc/$supervisor/environ | grep -q '^FTDRIVE_TEST_MARK=' && echo "supervisor read"
        tr '\0' '\n' < /proc/$agent/environ | grep '^FTDRIVE_AGENT_TOKEN=' && echo "agent read"
        true"#;
    let spec = c.spec("snoop", json!({"command": ["sh", "-c", snoop], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it ends", |j| j["state"] == "SUCCEEDED");
    let said = c.ftdrive(&["logs", &id, "--actor", "0"]);
    assert!(said.contains(&format!("agent {agent_pid}\n")), "the job found its agent: {said}");
    assert!(said.contains("supervisor read"), "the job could read /proc at all: {said}");
    assert!(
        !said.contains("agent read") && !said.contains(&c.agent_token()),
        "the agent's token reached the job:\n{said}"
    );
}

/// A job that can have its agent started again (by killing it under a service manager that
/// restarts it) may read the new agent's environment in its first milliseconds, before the
/// agent closes itself. Given on standard input instead, from a file only root can read, the
/// token is never where a process of the agent's user can look: the agent registers with it,
/// and its job finds it neither in the agent's environment or descriptors nor in the file.
#[test]
fn an_agent_given_its_token_on_stdin_keeps_it_from_its_jobs() {
    let mut c = Cluster::start(&[]);
    let own = tempfile::tempdir().unwrap();
    let secret = own.path().join("agent-token");
    std::fs::write(&secret, format!("{}\n", c.agent_token())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let stdin = std::fs::File::open(&secret).unwrap();
    let agent = unprivileged_agent(&c, own.path(), "n1", TokenVia::Stdin(stdin));
    c.nodes.insert("n1".into(), agent);
    c.wait_until("n1 registered with the token read from stdin", |c| c.nodes_json().as_array().unwrap().len() == 1);
    let snoop = format!(
        r#"supervisor=$PPID; agent=$(cut -d' ' -f4 /proc/$supervisor/stat); echo "agent $agent"
        tr '\0' '\n' < /proc/$agent/environ; cat /proc/$agent/fd/0; cat {}; true"#,
        secret.display()
    );
    let spec = c.spec("snoop", json!({"command": ["sh", "-c", snoop], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it ends", |j| j["state"] == "SUCCEEDED");
    let said = c.ftdrive(&["logs", &id, "--actor", "0"]);
    assert!(said.contains("agent "), "{said}");
    // The file is kept from the agent's user only when the tests run as root (the agent as nobody).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert!(!said.contains(&c.agent_token()), "the agent's token reached the job:\n{said}");
    }
}

/// Standard input with no token is the operator's to fix: exit 2, saying what to give.
#[test]
fn an_agent_told_to_read_its_token_from_an_empty_stdin_exits_2() {
    let c = Cluster::start(&[]);
    let out = c.node_command("n1").arg("--agent-token-stdin").stdin(Stdio::null()).stderr(Stdio::piped()).output();
    let out = out.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--agent-token-stdin: standard input holds nothing, not an agent token"), "{stderr}");
}

/// JU-1: an agent run as root with `--run-jobs-as nobody` runs its jobs' workers as nobody,
/// who cannot signal the supervisor or the agent, read the tokens in the state dirs or leave
/// its cgroup (where the machine has cgroup v2); the job's error file (JU-3) still reaches the
/// ledger, and its directory is gone once the attempt ended. A job whose `cwd` nobody may not
/// enter fails at its start, saying so (JU-2). Run as the agent's own user, every probe
/// succeeded. Where the tests do not run as root, the agent refuses the flag instead, naming
/// why.
#[test]
fn jobs_run_as_another_user_cannot_touch_their_agent() {
    let mut c = Cluster::start(&[]);
    let mut agent = c.node_command_in("n1", std::path::Path::new("/"));
    agent.args(["--run-jobs-as", "nobody"]);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let out = agent.stderr(Stdio::piped()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("only root may start processes as another user"), "{stderr}");
        return;
    }
    c.nodes.insert("n1".into(), agent.spawn().unwrap());
    c.wait_until("n1 registered", |c| c.nodes_json().as_array().unwrap().len() == 1);
    assert_eq!(c.nodes_json()[0]["labels"]["jobs.user"], "nobody", "{}", c.nodes_json());
    let probe = format!(
        r#"echo "uid $(id -u) user $USER home $HOME errors in $(dirname "$TORCHELASTIC_ERROR_FILE")"
        supervisor=$PPID; agent=$(cut -d' ' -f4 /proc/$supervisor/stat)
        kill -0 "$supervisor" 2>/dev/null || echo "supervisor out of reach"
        kill -0 "$agent" 2>/dev/null || echo "agent out of reach"
        cat {state}/agent-token {state}/token 2>/dev/null || echo "tokens out of reach"
        ls {state}/node-n1/attempts >/dev/null 2>&1 || echo "state dir out of reach"
        v2=$(grep -m1 ' - cgroup2 ' /proc/self/mountinfo | cut -d' ' -f5)
        [ -z "$v2" ] || ! echo $$ 2>/dev/null > "$v2/cgroup.procs" && echo "cgroup out of reach"
        echo '{{"message": "ValueError: written as nobody"}}' > "$TORCHELASTIC_ERROR_FILE"
        exit 3"#,
        state = c.dir.path().display()
    );
    let spec = json!({"command": ["sh", "-c", probe], "min_nodes": 1, "max_nodes": 1, "nproc_per_node": 2});
    let id = c.submit_no_wait(&c.spec("probe", spec));
    let job = c.wait_for_job(&id, "it fails", |j| j["state"] == "FAILED");
    let evidence = job["ledger"][0]["evidence"].as_str().unwrap_or_default();
    assert!(evidence.contains("ValueError: written as nobody"), "{job:#}");
    let said = c.ftdrive(&["logs", &id, "--actor", "0"]);
    assert!(said.contains("uid 65534 user nobody home /"), "{said}");
    for probe in ["supervisor", "agent", "tokens", "state dir", "cgroup"] {
        assert!(said.contains(&format!("{probe} out of reach")), "{probe}:\n{said}");
    }
    let errors = said.split("errors in ").nth(1).and_then(|rest| rest.lines().next()).unwrap();
    assert!(!std::path::Path::new(errors).starts_with(c.dir.path()), "{said}");
    c.wait_until("the error files' directory is removed", |_| !std::path::Path::new(errors).exists());
    assert_eq!(c.nodes_json()[0]["state"], "ALIVE", "the agent lives on");
    // The cluster's state dir is root's alone.
    let spec = json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1, "cwd": c.dir.path()});
    let id = c.submit_no_wait(&c.spec("shut-out", spec));
    let job = c.wait_for_job(&id, "it fails", |j| j["state"] == "FAILED");
    let evidence = job["ledger"][0]["evidence"].as_str().unwrap_or_default();
    let cwd = c.dir.path().display().to_string();
    assert!(evidence.contains("--run-jobs-as") && evidence.contains(&cwd), "{job:#}");
}

/// `--run-jobs-as` names a user that can be had and that may enter the agent's work dir, or the
/// agent does not start (exit 2, saying what to give).
#[test]
fn an_agent_refuses_a_jobs_user_it_cannot_have() {
    let c = Cluster::start(&[]);
    // SAFETY: geteuid has no preconditions.
    let nobody_says = match unsafe { libc::geteuid() } {
        // The cluster's work dir is its state dir, root's alone.
        0 => "nobody may not enter the work dir",
        _ => "only root may start processes as another user",
    };
    let refusals =
        [("root", "give an unprivileged user"), ("no-such-user-ftdrive", "no user named"), ("nobody", nobody_says)];
    for (user, says) in refusals {
        let out = c.node_command("n1").args(["--run-jobs-as", user]).stderr(Stdio::piped()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{user}: {stderr}");
        assert!(stderr.contains(&format!("--run-jobs-as {user}: ")) && stderr.contains(says), "{user}: {stderr}");
    }
    assert!(c.nodes_json().as_array().unwrap().is_empty(), "a refused agent registered");
}

/// How an agent is given its token.
enum TokenVia {
    Environment,
    /// Standard input, opened here (as a service manager would, before the agent runs).
    Stdin(std::fs::File),
}

/// `ftdrive node` given its token as `via` says, as a user who is not root: `setpriv` to
/// nobody when the tests run as root, with a copy of the binary and dirs that user may use.
fn unprivileged_agent(c: &Cluster, own: &std::path::Path, name: &str, via: TokenVia) -> std::process::Child {
    let (state, work, bin) = (own.join("state"), own.join("work"), own.join("ftdrive"));
    std::fs::copy(env!("CARGO_BIN_EXE_ftdrive"), &bin).unwrap();
    for dir in [&state, &work] {
        std::fs::create_dir(dir).unwrap();
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut agent = if root {
        use std::os::unix::fs::PermissionsExt;
        const NOBODY: u32 = 65534;
        std::fs::set_permissions(own, std::fs::Permissions::from_mode(0o755)).unwrap();
        for dir in [&state, &work] {
            std::os::unix::fs::chown(dir, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let mut setpriv = std::process::Command::new("setpriv");
        setpriv.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(&bin);
        setpriv
    } else {
        std::process::Command::new(&bin)
    };
    agent
        .args(["node", "--name", name, "--resources", "cpu=1", "--addr", "127.0.0.1", "--head", &c.url])
        .arg("--state-dir")
        .arg(&state)
        .arg("--work-dir")
        .arg(&work)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("FTDRIVE_LOG", "warn")
        .stdout(Stdio::null());
    match via {
        TokenVia::Environment => agent.env("FTDRIVE_AGENT_TOKEN", c.agent_token()),
        TokenVia::Stdin(file) => agent.arg("--agent-token-stdin").stdin(file),
    };
    agent.spawn().expect("setpriv (util-linux) runs the agent as nobody")
}

/// A job can kill its agent (it runs as the agent's user) and take over the agent's log port,
/// then ask for its own logs: whatever the head presents there must not open anything else. It
/// presented the agent token, with which a rogue agent could register and be sent other
/// users' jobs; now a token of that agent's session, which opens only that log server. Nor may
/// the port's new owner send the head on elsewhere: its redirect to a server only the head's
/// side reaches is not followed, and nothing from there is shown as the log.
#[test]
fn the_head_gives_a_log_port_taken_over_no_credential() {
    let mut c = Cluster::start_with(&["n1"], &["--node-timeout-ms", "20000"]);
    let spec = c.spec("squat", json!({"command": ["sleep", "300"], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it runs", |j| running(j, 1));
    let metrics_url = c.nodes_json()[0]["metrics_url"].as_str().expect("n1's log server").to_string();
    let port: u16 = metrics_url.trim_end_matches("/metrics").rsplit(':').next().unwrap().parse().unwrap();
    c.kill_node("n1");
    let start = Instant::now();
    let squatter = loop {
        match std::net::TcpListener::bind(("127.0.0.1", port)) {
            Ok(listener) => break listener,
            Err(e) => assert!(start.elapsed() < Duration::from_secs(10), "cannot take port {port}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // A server only the head's side should reach (a cloud's metadata service, say).
    let inner_server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let inner = inner_server.try_clone().unwrap();
    let heard = std::thread::spawn(move || {
        let (mut conn, _) = squatter.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).unwrap();
            assert!(n > 0, "the request ended early");
            request.extend_from_slice(&buf[..n]);
        }
        let redirect = format!(
            "HTTP/1.1 302 Found\r\nlocation: http://{}/secret\r\ncontent-length: 0\r\n\r\n",
            inner.local_addr().unwrap()
        );
        let _ = conn.write_all(redirect.as_bytes());
        String::from_utf8_lossy(&request).to_lowercase()
    });
    let logs = c.try_ftdrive(&["logs", &id]);
    let said = format!("{}{}", String::from_utf8_lossy(&logs.stdout), String::from_utf8_lossy(&logs.stderr));
    assert!(!logs.status.success() && said.contains("answered 302"), "{said}");
    inner_server.set_nonblocking(true).unwrap();
    assert!(inner_server.accept().is_err(), "the head went where the redirect said");
    let request = heard.join().expect("the head asked the port for the log");
    assert!(request.contains("authorization: bearer "), "{request}");
    for (name, token) in [("agent", c.agent_token()), ("client", c.token())] {
        assert!(!request.contains(&token.to_lowercase()), "the {name} token went to the port's new owner: {request}");
    }
    c.ftdrive(&["stop", &id]);
}

/// SV-7: a job that finds its supervisor's socket in its attempt's directory and speaks to it
/// as its agent would (pings asking for a long grace) is not heard: a stop still ends it. It
/// was heard, and ran on past the stop for as long as it liked.
#[test]
fn a_job_posing_as_its_agent_is_stopped_all_the_same() {
    let c = Cluster::start(&["n1"]);
    let pose = r#"
import os, socket, time
path = os.path.join(os.path.dirname(os.environ["TORCHELASTIC_ERROR_FILE"]), "sock")
print("posing", flush=True)
end = time.time() + 300
while time.time() < end:
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        while True:
            s.sendall(b"ping 600000\n")
            time.sleep(0.1)
    except OSError:
        time.sleep(0.1)
"#;
    let spec = c.spec(
        "poser",
        json!({"command": ["python3", "-c", pose], "min_nodes": 1, "max_nodes": 1, "stop_grace_ms": 1000}),
    );
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it runs", |j| running(j, 1));
    c.wait_until("it poses as its agent", |c| c.ftdrive(&["logs", &id]).contains("posing"));
    std::thread::sleep(Duration::from_millis(500));
    c.ftdrive(&["stop", &id]);
    c.wait_for_job(&id, "the stop ends it", |j| j["state"] == "STOPPED");
}

/// An agent started with a descriptor left open (by a careless launcher) does not hand it to
/// its jobs: the job lists its own descriptors and finds only the standard three.
#[test]
fn a_job_inherits_no_descriptor_its_agent_was_started_with() {
    use std::os::unix::process::CommandExt;
    let mut c = Cluster::start(&[]);
    let secret = std::fs::File::open(c.dir.path().join("agent-token")).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&secret);
    let mut agent = c.node_command("n1");
    // SAFETY: dup2 is async-signal-safe; it leaves a copy of the token file open, without
    // close-on-exec, at descriptor 100 of the agent.
    unsafe {
        agent.pre_exec(move || {
            if libc::dup2(fd, 100) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c.nodes.insert("n1".into(), agent.spawn().unwrap());
    c.wait_until("n1 registered", |c| c.nodes_json().as_array().unwrap().len() == 1);
    let spec = c.spec("fds", json!({"command": ["ls", "/proc/self/fd"], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it ends", |j| j["state"] == "SUCCEEDED");
    let listed = c.ftdrive(&["logs", &id]);
    let fds: Vec<&str> = listed.split_whitespace().collect();
    // `ls` itself holds one more: the directory it lists.
    assert!(!fds.contains(&"100") && fds.len() <= 4, "the job holds {fds:?}");
}

/// Connections held open to an agent's log server without a token (a scanner, a flood) take
/// at most its bound of descriptors: the agent still starts attempts. Before, they took every
/// descriptor, the node turned unhealthy ("takes no write: Too many open files") and its jobs
/// waited for as long as the connections stayed.
#[test]
fn connections_held_open_to_an_agents_log_server_leave_it_descriptors_to_start_work() {
    use std::os::unix::process::CommandExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    const FD_LIMIT: libc::rlim_t = 320;
    const HELD: usize = 330;
    let mut c = Cluster::start(&[]);
    let mut agent = c.node_command("n1");
    // SAFETY: setrlimit is async-signal-safe and changes only the child about to exec.
    unsafe {
        agent.pre_exec(|| {
            let limit = libc::rlimit { rlim_cur: FD_LIMIT, rlim_max: FD_LIMIT };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c.nodes.insert("n1".into(), agent.spawn().unwrap());
    c.wait_until("n1 registered", |c| c.nodes_json()[0]["metrics_url"].is_string());
    let url = c.nodes_json()[0]["metrics_url"].as_str().unwrap().to_string();
    let addr = url.trim_start_matches("http://").trim_end_matches("/metrics").to_string();
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let flood = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut held: Vec<TcpStream> = (0..HELD).map(|_| TcpStream::connect(&addr).unwrap()).collect();
            // A request every half second keeps each accepted connection from its idle timeout.
            while !done.load(Ordering::Relaxed) {
                for stream in &mut held {
                    let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: n1\r\n\r\n");
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    let spec = c.spec("under-flood", json!({"command": ["true"], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    let job = c.wait_for_job(&id, "it ends", |j| j["state"].as_str().is_some_and(|s| s != "PENDING" && s != "RUNNING"));
    done.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    assert_eq!(job["state"], "SUCCEEDED", "{job:#}");
    assert!(c.nodes_json()[0]["problem"].is_null(), "{:#}", c.nodes_json());
}

/// A job's `LD_PRELOAD` loads into its own processes, not into the supervisor that stops them
/// and records their end. The dynamic loader says in the attempt's log (the supervisor's
/// stderr and the workers' alike) each time it meets a library it cannot preload: once, for
/// the worker, and not twice.
#[test]
fn a_jobs_ld_preload_reaches_its_workers_and_not_its_supervisor() {
    let c = Cluster::start(&["n1"]);
    let missing = c.dir.path().join("no-such-preload.so");
    let command = r#"echo "preload=$LD_PRELOAD""#;
    let spec = c.spec(
        "preload",
        json!({"command": ["sh", "-c", command], "min_nodes": 1, "max_nodes": 1, "env": {"LD_PRELOAD": missing}}),
    );
    let id = c.submit_no_wait(&spec);
    c.wait_for_job(&id, "it ends", |j| j["state"] == "SUCCEEDED");
    let log = c.ftdrive(&["logs", &id]);
    assert!(log.contains(&format!("preload={}\n", missing.display())), "the worker has it: {log}");
    let loader_said = log.lines().filter(|l| l.contains("cannot be preloaded")).count();
    assert_eq!(loader_said, 1, "only the worker loaded with it:\n{log}");
}

/// Every error body is JSON, an agent's log server's too (it answered an unknown path with an
/// empty 404).
#[test]
fn an_agents_log_server_answers_an_unknown_path_in_json() {
    let c = Cluster::start(&["n1"]);
    let base = c.nodes_json()[0]["metrics_url"].as_str().unwrap().trim_end_matches("/metrics").to_string();
    let (status, body) = status_and_json(&http(&base, "GET", "/nothing/here", Some(&c.agent_token()), ""));
    assert_eq!(status, 404);
    assert!(body["error"].as_str().unwrap().contains("no such route on an agent's log server"), "{body}");
    // A bad query or path is JSON too (actix's own answer was plain text), and only once the
    // token is checked.
    for path in ["/v1/logs/j1/0/1?offset=-1", "/v1/logs/j1/x/1", "/v1/logs/j1/0/1?offst=1"] {
        let (status, body) = status_and_json(&http(&base, "GET", path, Some(&c.agent_token()), ""));
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body["error"].as_str().unwrap().starts_with("bad "), "{path}: {body}");
        let (status, _) = status_and_json(&http(&base, "GET", path, None, ""));
        assert_eq!(status, 401, "{path} without a token");
    }
}

/// A request the head cannot parse is answered 400 and logs nothing: actix-http logged an
/// ERROR line for each, so anyone who could connect could fill the head's log.
#[test]
fn a_malformed_request_is_refused_without_a_line_in_the_heads_log() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("head.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut head = head_command(&dir.path().join("state"), "127.0.0.1:0", &[]);
    let head = Ended(head.env("FTDRIVE_LOG", "info").stderr(log).spawn().unwrap());
    let url = wait_for_url(&dir.path().join("state"));
    let addr = url.trim_start_matches("http://").to_string();
    for garbage in ["GARBAGE\r\n\r\n", "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n"] {
        let mut stream = TcpStream::connect(&addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream.write_all(garbage.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 400"), "{garbage:?}: {answer}");
    }
    let token = std::fs::read_to_string(dir.path().join("state/token")).unwrap();
    let (status, _) = status_and_json(&http(&url, "GET", "/v1/health", Some(token.trim()), ""));
    assert_eq!(status, 200, "the head serves on");
    drop(head);
    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert!(logged.contains("listening"), "the log is the head's: {logged}");
    assert!(!logged.contains("parse error"), "{logged}");
}

/// One secret for both doors would give every agent the cluster's keys: the head refuses to
/// start, as bad input (exit 2) like its other refusals, having changed no file.
#[test]
fn a_head_whose_two_tokens_are_the_same_refuses_to_start_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = head_command(dir.path(), "127.0.0.1:0", &[])
        .env("FTDRIVE_TOKEN", "one-secret")
        .env("FTDRIVE_AGENT_TOKEN", "one-secret")
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the client token and the agent token are the same"), "{stderr}");
    assert!(!stderr.contains("--state-dir"), "the state dir is not what to fix: {stderr}");
    let made: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(made.is_empty(), "a refused head made {made:?}");
}

/// An empty token file is the operator's to fix: the head says which file and what to do, exits
/// 2, and makes no database beside it.
#[test]
fn a_head_with_an_empty_token_file_refuses_to_start_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "").unwrap();
    let out = head_command(dir.path(), "127.0.0.1:0", &[]).stderr(Stdio::piped()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let says = format!("{} is empty; remove it to have a new token made", dir.path().join("token").display());
    assert!(stderr.contains(&says), "{stderr}");
    let made: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(made, ["token"], "a refused head made more");
}

/// A node name becomes a directory (`node-NAME`) and a URL segment: one that could climb out
/// of the state dir, or that a URL folds away (`..`: `ftdrive drain ..` reached no node), is
/// refused before anything is made from it, not retried for ever. So are labels past the
/// head's bounds.
#[test]
fn an_agent_under_a_name_the_head_would_refuse_exits_2_and_makes_nothing() {
    let c = Cluster::start(&[]);
    let labels: Vec<String> = (0..70).map(|i| format!("l{i}=1")).collect();
    let out = c.node_command("fine").args(["--labels", &labels.join(",")]).stderr(Stdio::piped()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--labels: the node has 70 labels; at most 64 are allowed"), "{stderr}");
    for name in ["bad/name", "../evil", "", "..", "."] {
        let out = c.node_command(name).stderr(Stdio::piped()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name:?}: {stderr}");
        let refused = stderr.contains("is not a valid name") || stderr.contains("a name cannot be empty");
        assert!(stderr.contains("--name") && refused, "{name:?}: {stderr}");
    }
    let made: Vec<_> = std::fs::read_dir(c.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.starts_with("node-") || f == "evil")
        .collect();
    assert!(made.is_empty(), "directories made from a refused name: {made:?}");
    assert!(!c.dir.path().parent().unwrap().join("evil").exists());
    assert_eq!(c.nodes_json().as_array().unwrap().len(), 0);
}

#[test]
fn a_second_agent_under_a_live_name_exits_2_and_the_first_keeps_its_work() {
    let c = Cluster::start(&["n1"]);
    let spec = c.spec("kept", json!({"command": ["sleep", "300"], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    let before = c.wait_for_job(&id, "it runs", |j| running(j, 1));
    // RUNNING is reported as the attempt starts; its supervisor and `sleep` may show a moment later.
    c.wait_until("its supervisor and process run", |c| c.processes(Some("n1")).len() >= 2);
    let pids = c.processes(Some("n1"));

    // Same machine, same state dir: the lock refuses it before it speaks to the head.
    let same_dir = c.node_command("n1").stderr(Stdio::piped()).output().unwrap();
    assert_eq!(same_dir.status.code(), Some(2), "{}", String::from_utf8_lossy(&same_dir.stderr));
    assert!(String::from_utf8_lossy(&same_dir.stderr).contains("node name n1 is in use"));

    // Another machine (its own state dir) under the same name: the head refuses it.
    let elsewhere = tempfile::tempdir().unwrap();
    let other = c
        .node_command("n1")
        .args(["--state-dir", elsewhere.path().to_str().unwrap()])
        .env("FTDRIVE_AGENT_TOKEN", c.agent_token())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(other.status.code(), Some(2), "{}", String::from_utf8_lossy(&other.stderr));
    assert!(String::from_utf8_lossy(&other.stderr).contains("node name n1 is in use"));

    std::thread::sleep(Duration::from_millis(1_500)); // past the head's node timeout
    let after = c.job(&id);
    assert_eq!(after["actors"][0]["attempt"], before["actors"][0]["attempt"], "the work was not restarted");
    assert_eq!(after["state"], "RUNNING");
    assert_eq!(c.processes(Some("n1")), pids, "the same processes run");
    c.ftdrive(&["stop", &id]);
    c.wait_for_job(&id, "the first agent still takes its stops", |j| j["state"] == "STOPPED");
    c.wait_until("its processes are gone", |c| c.processes(None).is_empty());
}

fn send(channel: &mut Channel, msg: Value) {
    channel.send(Message::text(msg.to_string())).unwrap();
}

/// The next message the head sends that is not a `start` or a `welcome`.
fn next_answer(channel: &mut Channel) -> Value {
    loop {
        let text = match channel.read().unwrap() {
            Message::Text(text) => text.to_string(),
            _ => continue,
        };
        let msg: Value = serde_json::from_str(&text).unwrap();
        if msg["type"] != "welcome" && msg["type"] != "start" {
            return msg;
        }
    }
}

fn registration(node: &str) -> Value {
    json!({"type": "register", "node": node, "incarnation": 1, "resources": {"cpu": 1}, "labels": {}, "addr": "127.0.0.1"})
}

#[test]
fn a_node_reports_only_on_its_own_attempts_and_only_from_its_session() {
    let c = Cluster::start(&["n1"]);
    let spec = c.spec("theirs", json!({"command": ["sleep", "300"], "min_nodes": 1, "max_nodes": 1}));
    let id = c.submit_no_wait(&spec);
    let before = c.wait_for_job(&id, "it runs on n1", |j| running(j, 1));
    let key = json!({"job": id, "actor": 0, "attempt": 1, "cycle": 1});

    let mut intruder = open_agent_channel(&c.url, &c.agent_token()).unwrap();
    send(&mut intruder, registration("n9"));
    let status = json!({"code": 1, "signal": null, "signalled_by_agent": false});
    let exit = json!({"type": "exited", "node": "n9", "key": key, "status": status});
    send(&mut intruder, exit);
    let refusal = next_answer(&mut intruder);
    let reason = refusal["reason"].as_str().unwrap_or_else(|| panic!("{refusal}"));
    assert!(reason.contains("runs on another node"), "{reason}");

    // Speaking as n1 from n9's session.
    let as_n1 = json!({"type": "exited", "node": "n1", "key": key, "status": status});
    send(&mut intruder, as_n1);
    let refusal = next_answer(&mut intruder);
    let reason = refusal["reason"].as_str().unwrap_or_else(|| panic!("{refusal}"));
    assert!(reason.contains("only from the session it registered on"), "{reason}");

    let after = c.job(&id);
    assert_eq!(after["actors"][0]["attempt"], before["actors"][0]["attempt"]);
    assert_eq!(after["state"], "RUNNING", "neither forged exit was taken");
    assert!(after["ledger"].as_array().unwrap().is_empty(), "{after:#}");
}

/// Waits until every process carrying this cluster's mark is gone (or a zombie).
fn all_gone(c: &Cluster, what: &str) {
    let start = Instant::now();
    while !c.processes(None).is_empty() {
        assert!(start.elapsed() < WAIT, "{what}: still running: {:?}", c.processes(None));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Leaves a background `sleep`, a `setsid` one in its own session, and one that ignores
/// SIGTERM, then exits 0 or waits.
const ESCAPES: &str = r#"sleep 300 & setsid sleep 300 & sh -c 'trap "" TERM; exec sleep 300' & "#;

#[test]
fn nothing_an_attempt_starts_outlives_it() {
    let mut c = Cluster::start(&["n1"]);
    escapes_end_with_their_attempt(&mut c);
}

/// With `--cgroup-parent off` (as where cgroup v2 is not there to use) the supervisor's
/// subreaper and the workers' process groups take down what an attempt leaves.
#[test]
fn without_cgroups_the_supervisor_takes_down_what_an_attempt_leaves() {
    let mut c = Cluster::start(&[]);
    let agent = c.node_command("n1").args(["--cgroup-parent", "off"]).spawn().unwrap();
    c.nodes.insert("n1".to_string(), agent);
    c.wait_until("n1 registered", |c| c.nodes_json().as_array().unwrap().len() == 1);
    escapes_end_with_their_attempt(&mut c);
}

fn escapes_end_with_their_attempt(c: &mut Cluster) {
    let finished = c.spec(
        "finished",
        json!({"command": ["sh", "-c", format!("{ESCAPES} sleep 0.5; exit 0")], "min_nodes": 1, "max_nodes": 1}),
    );
    let id = c.submit_no_wait(&finished);
    c.wait_for_job(&id, "it succeeds", |j| j["state"] == "SUCCEEDED");
    all_gone(c, "after a finished attempt");

    let stopped = c.spec(
        "stopped",
        json!({"command": ["sh", "-c", format!("{ESCAPES} wait")], "min_nodes": 1, "max_nodes": 1, "stop_grace_ms": 500}),
    );
    let id = c.submit_no_wait(&stopped);
    c.wait_for_job(&id, "it runs", |j| running(j, 1));
    c.wait_until("its escapes are up", |c| c.processes(None).len() >= 5);
    let cgroup = attempts_cgroup(c);
    c.ftdrive(&["stop", &id]);
    c.wait_for_job(&id, "it stops", |j| j["state"] == "STOPPED");
    all_gone(c, "after stop");
    if let Some(cgroup) = &cgroup {
        c.wait_until("the attempt's cgroup is removed", |_| !cgroup.exists());
    }

    // kill -9 of the supervisor: its workers die with it, and the agent kills their groups —
    // and, where the attempt has a cgroup, what left them (`setsid`): here a process holding
    // 256 MiB, whose exit takes long enough that the head's acknowledgement comes before it is
    // gone, unless the agent waits for the group to be empty before reporting.
    let escape = if cgroup.is_some() { &format!("setsid {HOLDER} & sleep 300 & wait") } else { "sleep 300 & wait" };
    let killed = c.spec(
        "orphaned",
        json!({"command": ["sh", "-c", escape], "min_nodes": 1, "max_nodes": 1, "retries": {"system": 0, "user": 0}}),
    );
    let id = c.submit_no_wait(&killed);
    c.wait_for_job(&id, "it runs", |j| running(j, 1));
    let expected = if cgroup.is_some() { 4 } else { 3 };
    c.wait_until("its sleeps are up", |c| c.processes(None).len() >= expected);
    let killed_cgroup = attempts_cgroup(c);
    if killed_cgroup.is_some() {
        c.wait_until("the holder holds its memory", |c| c.processes(None).into_iter().any(|p| resident_mib(p) >= 256));
    }
    let supervisor = c.processes(None).into_iter().find(|pid| is_supervisor(*pid)).expect("a supervisor");
    // SAFETY: signalling a process this test's cluster started.
    unsafe { libc::kill(supervisor as i32, libc::SIGKILL) };
    all_gone(c, "after kill -9 of the supervisor");
    c.wait_for_job(&id, "it fails", |j| j["state"] == "FAILED");
    if let Some(cgroup) = &killed_cgroup {
        c.wait_until("the dead supervisor's cgroup is removed", |_| !cgroup.exists());
    }
    c.nodes.remove("n1").map(|mut n| n.kill());
}

/// Holds 256 MiB, every page written, until killed.
const HOLDER: &str = r#"python3 -c 'import time; held = b"x" * (256 << 20); time.sleep(300)'"#;

/// How much of `pid`'s memory is resident, in MiB (0 once it is gone).
fn resident_mib(pid: u32) -> u64 {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page_bytes = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    (pages * page_bytes) >> 20
}

/// The cgroup every process of the one running attempt is in, when the agent gave it one
/// (`--cgroup` on its supervisor); `None` when it did not, which an agent run by root where
/// cgroup v2 is mounted, and not told `--cgroup-parent off`, must not do.
fn attempts_cgroup(c: &Cluster) -> Option<std::path::PathBuf> {
    let pids = c.processes(None);
    let supervisor = pids.iter().copied().find(|pid| is_supervisor(*pid)).expect("a supervisor");
    let off = agent_told_off(c);
    let Some(dir) = supervisor_cgroup(supervisor) else {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            off || !(root && cgroup2_mount().is_some()),
            "root, cgroup v2 mounted, and still no cgroup for the attempt"
        );
        return None;
    };
    assert!(!off, "--cgroup-parent off, and still a cgroup: {}", dir.display());
    let mount = cgroup2_mount().expect("a cgroup v2 mount holds the attempt's cgroup");
    let relative = format!("/{}", dir.strip_prefix(&mount).unwrap().display());
    // The supervisor leaves it for the parent once its workers started (CG-2) — which may be
    // after they started processes of their own.
    let parent = relative.rsplit_once('/').unwrap().0;
    c.wait_until("the supervisor left its workers' cgroup", |_| cgroup_of(supervisor) == parent);
    for pid in pids.into_iter().filter(|pid| *pid != supervisor) {
        let cgroup = cgroup_of(pid);
        // Gone since it was listed (a shell between fork and exec, say): it outlives nothing.
        if cgroup.is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        assert_eq!(cgroup, relative, "process {pid} of the attempt (supervisor {supervisor})");
    }
    Some(dir)
}

/// `pid`'s cgroup v2 path (the `0::` line of its `/proc/PID/cgroup`).
fn cgroup_of(pid: u32) -> String {
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    own.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or_default().to_string()
}

/// A job may do as it likes with its own cgroup: make groups inside it (they go with it), kill
/// it (its processes die; the supervisor, which left it, records how — the job's own failure,
/// not a lost node's).
#[test]
fn what_a_job_does_to_its_own_cgroup_stays_with_its_attempt() {
    let mut c = Cluster::start(&["n1"]);
    let Some(mount) = cgroup2_mount() else {
        return eprintln!("no cgroup v2 mounted: nothing to try");
    };
    let script = format!(
        r#"cg={mount}$(sed -n 's/^0:://p' /proc/self/cgroup); mkdir $cg/inner
           sh -c "echo \$\$ > $cg/inner/cgroup.procs; exec sleep 300" & sleep 0.5; echo 1 > $cg/cgroup.kill; sleep 5"#
    );
    let spec = json!({"command": ["sh", "-c", script], "min_nodes": 1, "max_nodes": 1, "retries": {"user": 0}});
    let id = c.submit_no_wait(&c.spec("own-cgroup", spec));
    c.wait_for_job(&id, "it runs", |j| running(j, 1));
    let supervisor = c.processes(None).into_iter().find(|pid| is_supervisor(*pid)).expect("a supervisor");
    let Some(cgroup) = supervisor_cgroup(supervisor) else {
        c.ftdrive(&["stop", &id]);
        return eprintln!("the agent gives attempts no cgroup here: nothing to try");
    };
    let job = c.wait_for_job(&id, "it fails", |j| j["state"] == "FAILED");
    assert_eq!(job["ledger"][0]["cause"], "user_error", "{job:#}");
    assert!(job["ledger"][0]["evidence"].as_str().unwrap().contains("signal 9"), "{job:#}");
    all_gone(&c, "after the job killed its cgroup");
    c.wait_until("the attempt's cgroup and the job's own inside it are removed", |_| !cgroup.exists());
    c.nodes.remove("n1").map(|mut n| n.kill());
}

fn agent_told_off(c: &Cluster) -> bool {
    let agent = c.nodes.get("n1").expect("n1's agent").id();
    let cmdline = std::fs::read(format!("/proc/{agent}/cmdline")).unwrap_or_default();
    cmdline.split(|b| *b == 0).any(|a| a == b"off")
}

/// A `--cgroup-parent` that cannot hold attempts' cgroups is refused before the agent starts
/// or makes anything, naming the flag and what to give instead.
#[test]
fn a_cgroup_parent_that_cannot_hold_attempts_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let not_cgroup = dir.path().join("groups");
    let state = dir.path().join("state");
    for (given, said) in [
        (not_cgroup.to_str().unwrap(), format!("{} is not on a cgroup v2 mount", not_cgroup.display())),
        ("ftdrive", "give `auto`, `off`, or the absolute path of a directory on a cgroup v2 mount".to_string()),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ftdrive"))
            .args(["node", "--name", "n1", "--head", "http://127.0.0.1:9", "--cgroup-parent", given])
            .arg("--state-dir")
            .arg(&state)
            .env("FTDRIVE_AGENT_TOKEN", "t")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{given}: {stderr}");
        assert!(stderr.contains(&format!("--cgroup-parent {given}: {said}")), "{given}: {stderr}");
        assert!(!not_cgroup.exists() && !state.exists(), "{given}: nothing was made");
    }
}

fn is_supervisor(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmd| cmd.split(|b| *b == 0).nth(1) == Some(b"__attempt"))
}

#[test]
fn an_agent_with_a_wrong_token_says_which_credential_the_head_refused() {
    let c = Cluster::start(&[]);
    let empty = tempfile::tempdir().unwrap();
    let client_token = c.token();
    // Each agent: its name, the one variable it is started with, and what it must come to say.
    let agents = [
        ("w1", ("FTDRIVE_AGENT_TOKEN", "not-the-agent-token"), "refused the agent token"),
        ("w2", ("FTDRIVE_AGENT_TOKEN", client_token.as_str()), "refused the token"),
        ("w3", ("FTDRIVE_STATE_DIR", empty.path().to_str().unwrap()), "cannot read the credential file"),
    ];
    let said: Vec<String> = std::thread::scope(|scope| {
        let runs: Vec<_> = agents
            .iter()
            .map(|(name, (var, value), says)| {
                let c = &c;
                scope.spawn(move || {
                    let log = c.dir.path().join(format!("{name}.log"));
                    let mut agent = c.node_command(name);
                    agent.env(var, value).env("FTDRIVE_LOG", "warn");
                    let mut agent = agent.stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
                    let said = || std::fs::read_to_string(&log).unwrap_or_default();
                    c.wait_until(&format!("{name} says why it is not let in"), |_| said().contains(says));
                    agent.kill().unwrap();
                    agent.wait().unwrap();
                    said()
                })
            })
            .collect();
        runs.into_iter().map(|run| run.join().unwrap()).collect()
    });
    assert!(
        said[0].contains(
            "refused the agent token from $FTDRIVE_AGENT_TOKEN (401 Unauthorized): it is not its agent token"
        ) && said[0]
            .contains("set $FTDRIVE_AGENT_TOKEN to the contents of the `agent-token` file in the head's state dir"),
        "{}",
        said[0]
    );
    assert!(
        said[1].contains("(401 Unauthorized): that is its client token; an agent presents the agent token"),
        "{}",
        said[1]
    );
    let missing = empty.path().join("agent-token");
    assert!(said[2].contains(&format!("cannot read the credential file {}", missing.display())), "{}", said[2]);
    for said in &said {
        assert!(!said.contains("cannot reach the head"), "the head was reached, or not asked: {said}");
    }
    assert!(c.nodes_json().as_array().unwrap().is_empty(), "none joined");
}

/// Every input has a bound (DESIGN §12): event followers past the head's limit are refused
/// with 429 and a JSON error naming the limit, and the head goes on answering.
#[test]
fn event_followers_past_the_limit_are_refused_naming_it() {
    let c = Cluster::start(&[]);
    let token = c.token();
    let host = c.url.trim_start_matches("http://").to_string();
    let follow = || {
        let mut stream = TcpStream::connect(&host).unwrap();
        stream.set_read_timeout(Some(WAIT)).unwrap();
        let request = format!("GET /v1/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\r\n");
        stream.write_all(request.as_bytes()).unwrap();
        let mut status = Vec::new();
        let mut byte = [0u8; 1];
        while !status.ends_with(b"\r\n") {
            stream.read_exact(&mut byte).unwrap();
            status.push(byte[0]);
        }
        (stream, String::from_utf8(status).unwrap())
    };
    let mut held = Vec::new();
    for n in 0..ftdrive_actors::head::MAX_FOLLOWERS {
        let (stream, status) = follow();
        assert!(status.starts_with("HTTP/1.1 200"), "follower {n}: {status}");
        held.push(stream);
    }
    let refused = http(&c.url, "GET", "/v1/events", Some(&token), "");
    assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
    let says = format!(
        "the head has {} event followers, its limit; close one and follow again",
        ftdrive_actors::head::MAX_FOLLOWERS
    );
    assert!(refused.contains(&says), "{refused}");
    assert!(http(&c.url, "GET", "/v1/health", Some(&token), "").starts_with("HTTP/1.1 200"));
    drop(held);
}
