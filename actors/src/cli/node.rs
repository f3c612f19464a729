//! `ftdrive node`: a node agent, until a signal says how to end:
//! SIGTERM shuts down (a preemption notice, work moved, then exit); SIGINT kills every attempt
//! and exits; SIGUSR2 exits and leaves the attempts to their supervisors, for an agent started
//! again (same name and state dir) within the re-attach grace to take back — an upgrade.

use super::args::NodeArgs;
use super::error::{CliError, Outcome};
use crate::node::{self, detect, NodeOptions};
use crate::paths;
use ftdrive::resources::parse_labels;
use ftdrive::{NodeId, Resources};
use tokio::signal::unix::{signal, SignalKind};

pub fn run(args: NodeArgs) -> Result<Outcome, CliError> {
    super::init_logging();
    let state_dir = args.state_dir.clone().unwrap_or_else(paths::default_state_dir);
    // Read at every connection: an agent started before its head waits for the token.
    let credential = paths::Credential::from_env_or_file("FTDRIVE_TOKEN", paths::token_file(&state_dir));
    let resources = match &args.resources {
        Some(text) => Resources::parse_pairs(text).map_err(|e| CliError::BadInput(format!("--resources: {e}")))?,
        None => detect::machine_resources(),
    };
    let labels = parse_labels(args.labels.as_deref().unwrap_or_default())
        .map_err(|e| CliError::BadInput(format!("--labels: {e}")))?;
    let name = args.name.clone().unwrap_or_else(hostname);
    let head_url = if args.head.contains("://") { args.head.clone() } else { format!("http://{}", args.head) };
    let options = NodeOptions {
        addr: args.addr.clone().unwrap_or_else(|| detect::address_towards(&head_url)),
        head_url,
        credential,
        name: NodeId::new(&name),
        resources,
        labels,
        state_dir: state_dir.join(format!("node-{name}")),
        work_dir: args
            .work_dir
            .clone()
            .map_or_else(std::env::current_dir, Ok)
            .map_err(|e| CliError::Failed(e.to_string()))?,
        drain_deadline_ms: args.drain_deadline_ms,
        reattach_grace_ms: args.reattach_grace_ms,
    };
    super::block_on(async move {
        let watch = |kind| signal(kind).map_err(|e| CliError::Failed(format!("cannot watch for signals: {e}")));
        let (mut term, mut detach) = (watch(SignalKind::terminate())?, watch(SignalKind::user_defined2())?);
        let handle =
            node::start(options.clone()).await.map_err(|e| CliError::Failed(format!("cannot start the agent: {e}")))?;
        tracing::info!("node {} ({}) reporting to {}", options.name, options.resources, options.head_url);
        tokio::select! {
            _ = term.recv() => {
                tracing::info!("SIGTERM: shutting down (deadline {} ms)", options.drain_deadline_ms);
                handle.drain_and_stop(options.drain_deadline_ms).await;
            }
            _ = detach.recv() => tracing::info!("SIGUSR2: exiting; attempts wait for the next agent"),
            _ = tokio::signal::ctrl_c() => handle.halt().await,
        }
        Ok(Outcome::Done)
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "node".into())
}
