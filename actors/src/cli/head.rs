//! `ftdrive head`: the head-node daemon, until SIGTERM or SIGINT. Its state dir holds the
//! state database, the lock that keeps a second head out, the API token, and `head.url` (where
//! it listens, useful with `--listen 127.0.0.1:0`).

use super::args::HeadArgs;
use super::error::{CliError, Outcome};
use crate::head::{self, ServeOptions};
use crate::paths;
use ftdrive::HeadConfig;

pub fn run(args: HeadArgs) -> Result<Outcome, CliError> {
    super::init_logging();
    // One descriptor per agent connection: the usual soft limit (1,024) would stop a head at
    // about a thousand agents.
    crate::connections::raise_open_file_limit("agents and clients beyond it wait to connect");
    let state_dir = args.state_dir.unwrap_or_else(paths::default_state_dir);
    let config = HeadConfig {
        heartbeat_interval_ms: args.heartbeat_interval_ms,
        node_timeout_ms: args.node_timeout_ms,
        starvation_ms: args.starvation_ms,
        disruption_hold_ms: args.disruption_hold_ms,
        retain_finished: args.retain_finished,
        retain_finished_ms: args.retain_finished_hours.saturating_mul(3_600_000),
        retain_dead_nodes: args.retain_dead_nodes,
        master_port_base: args.master_port_base,
        ports_per_node: args.ports_per_node,
        ..HeadConfig::default()
    };
    config.validate().map_err(CliError::BadInput)?;
    warn_of_few_agents_per_machine(&config);
    warn_of_ephemeral_ports(&config);
    check_listen(&args.listen)?;
    let tls = super::server_tls(&args.tls)?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    super::block_on(async move {
        let options = ServeOptions {
            listen: args.listen.clone(),
            state_dir: state_dir.clone(),
            config,
            tokens: None,
            handle_signals: true,
            first_job_number: 1,
            tls,
            insecure_http: args.tls.insecure_http,
            agent_ca: args.ca_cert.clone(),
            events_keepalive_ms: args.events_keepalive_ms,
        };
        // Every refusal to start is the command's setup to fix (a port taken, a state dir that
        // cannot be one): exit 2, as the lock held by another head is.
        let (server, running) = head::serve(options).map_err(|e| CliError::BadInput(e.to_string()))?;
        let url = format!("{scheme}://{}", server.addr);
        if let Err(e) = paths::write_atomic(&state_dir.join("head.url"), url.as_bytes()) {
            tracing::warn!("cannot record the head's address in {}: {e}", state_dir.display());
        }
        let sources = paths::token_sources(&state_dir);
        let said: Vec<&str> = sources.iter().map(|(said, _)| said.as_str()).collect();
        tracing::info!("head listening on {url}; {}", said.join("; "));
        for (said, _) in sources.iter().filter(|(_, loud)| *loud) {
            tracing::warn!("{said}");
        }
        running.await.map_err(|e| CliError::Failed(e.to_string()))?;
        tracing::info!("head stopped");
        Ok(Outcome::Done)
    })
}

/// `--listen` is an address to bind, not a name to look up later: refused as bad input before
/// anything is written, rather than failing at the bind as if the port were taken.
fn check_listen(listen: &str) -> Result<(), CliError> {
    use std::net::ToSocketAddrs;
    let why = match listen.to_socket_addrs().map(|mut addrs| addrs.next()) {
        Ok(Some(_)) => return Ok(()),
        Ok(None) => "names no address".to_string(),
        Err(e) => e.to_string(),
    };
    let port = super::DEFAULT_HEAD_PORT;
    Err(CliError::BadInput(format!(
        "--listen `{listen}`: {why}; give HOST:PORT, such as 127.0.0.1:{port} or 0.0.0.0:{port} (port 0: any free port)"
    )))
}

/// Agents on one machine share its rendezvous ports, from the base to 65535, up to
/// `ports_per_node` each (scheduler/cluster.rs, PS-2): a base that high leaves the machine's
/// later agents none, and they can run nothing. Allowed, since one agent per machine is
/// usual, but said.
fn warn_of_few_agents_per_machine(config: &HeadConfig) {
    let per_machine = config.ports_per_machine() / u32::from(config.ports_per_node.max(1));
    if per_machine < 8 {
        tracing::warn!(
            "--master-port-base {} leaves rendezvous ports for {per_machine} agent(s) per machine \
             (--ports-per-node {} each); further agents on a machine get none and run nothing: use a lower base, \
             or fewer ports per node, to run more",
            config.master_port_base,
            config.ports_per_node
        );
    }
}

/// Only listening sockets are passed over (PS-3): a port an outgoing connection holds as its
/// local end is handed out like a free one, and the rank 0 given it cannot bind it. Said when
/// the first agent's ports reach into this machine's ephemeral range.
fn warn_of_ephemeral_ports(config: &HeadConfig) {
    let Ok(range) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range") else { return };
    let Some((low, high)) = ephemeral_range(&range) else { return };
    let (base, per_node) = (u32::from(config.master_port_base), u32::from(config.ports_per_node.max(1)));
    let last = (base + per_node - 1).min(65_535);
    if last >= low && base <= high {
        tracing::warn!(
            "--master-port-base {base}: the first agent's rendezvous ports ({base}-{last}) reach into this \
             machine's ephemeral port range ({low}-{high}, /proc/sys/net/ipv4/ip_local_port_range), which \
             outgoing connections take their local ports from; a rank 0 given such a port fails with \
             EADDRINUSE: use a base of at most {}",
            low.saturating_sub(per_node).min(65_535)
        );
    }
}

/// `/proc/sys/net/ipv4/ip_local_port_range`: two numbers.
fn ephemeral_range(text: &str) -> Option<(u32, u32)> {
    let mut numbers = text.split_whitespace().map(|n| n.parse::<u32>().ok());
    Some((numbers.next()??, numbers.next()??))
}
