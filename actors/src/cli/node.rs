//! `ftdrive node`: a node agent, until a signal says how to end:
//! SIGTERM shuts down (a preemption notice, work moved, then exit); SIGINT kills every attempt
//! and exits; SIGUSR2 exits and leaves the attempts to their supervisors, for an agent started
//! again (same name and state dir) within the re-attach grace to take back — an upgrade.

use super::args::NodeArgs;
use super::error::{CliError, Outcome};
use crate::node::cgroup::{Cgroups, Choice};
use crate::node::detect::{self, Gpus};
use crate::node::{self, NodeOptions};
use crate::paths;
use ftdrive::resources::{parse_labels, Devices};
use ftdrive::{NodeId, Resources};
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};

pub fn run(args: NodeArgs) -> Result<Outcome, CliError> {
    super::init_logging();
    // Each attempt holds a few (its log, its supervisor's pipe), and its log server takes one
    // per connection.
    crate::connections::raise_open_file_limit("attempts beyond it cannot start");
    // Absolute: each attempt's supervisor runs in the job's own directory, and finds its
    // records by this path.
    let state_dir = absolute(args.state_dir.clone().unwrap_or_else(paths::default_state_dir), "--state-dir")?;
    // A file's is read at every connection: an agent started before its head waits for it.
    let credential = if args.agent_token_stdin {
        paths::token_from_stdin().map_err(|e| CliError::BadInput(format!("--agent-token-stdin: {e}")))?
    } else {
        paths::agent_credential(&state_dir)
    };
    let resources = offered_resources(args.resources.as_deref())?;
    let mut labels = parse_labels(args.labels.as_deref().unwrap_or_default())
        .map_err(|e| CliError::BadInput(format!("--labels: {e}")))?;
    let gpus = match &args.gpus {
        Some(flag) => Gpus::parse_flag(flag).map_err(|e| CliError::BadInput(format!("--gpus {flag}: {e}")))?,
        None => Gpus::detect(),
    };
    let (resources, devices) = offer_gpus(resources, &gpus, args.gpus.is_some())?;
    if let Some(model) = gpus.model_label().filter(|_| !devices.is_empty()) {
        labels.entry(detect::GPU_MODEL_LABEL.to_string()).or_insert(model);
    }
    let work_dir = work_dir(args.work_dir.clone())?;
    let job_user = jobs_user(args.run_jobs_as.as_deref(), &work_dir)?;
    // For selectors (a job that must run isolated from its agent) and `ftdrive nodes`.
    if let Some(user) = &job_user {
        labels.entry(node::job_user::JOBS_USER_LABEL.to_string()).or_insert(user.name.clone());
    }
    // The head's bounds, checked here: refused at every registration, the agent retried for ever.
    ftdrive::resources::check_labels(&labels).map_err(|e| CliError::BadInput(format!("--labels: the node {e}")))?;
    ftdrive::resources::check_kinds(&resources)
        .map_err(|e| CliError::BadInput(format!("--resources: the node {e}")))?;
    let cgroup_choice = Choice::parse(&args.cgroup_parent)
        .map_err(|e| CliError::BadInput(format!("--cgroup-parent {}: {e}", args.cgroup_parent)))?;
    let name = args.name.clone().unwrap_or_else(hostname);
    // Before any directory is made from it: the head would refuse it at every registration.
    let named_by = if args.name.is_some() { "--name" } else { "this machine's hostname (give --name)" };
    ftdrive::head::check_name(&name).map_err(|e| CliError::BadInput(format!("{named_by}: {e}")))?;
    let head_url = super::head_base_url(&args.head)?;
    let (head_tls, log_tls) = (head_tls(&head_url, args.ca_cert.as_deref())?, super::server_tls(&args.tls)?);
    let options = NodeOptions {
        addr: args.addr.clone().unwrap_or_else(|| detect::address_towards(&head_url)),
        head_url,
        credential,
        name: NodeId::new(&name),
        resources,
        labels,
        devices,
        state_dir: state_dir.join(format!("node-{name}")),
        work_dir,
        drain_deadline_ms: args.drain_deadline_ms,
        reattach_grace_ms: args.reattach_grace_ms,
        fence_after_ms: args.fence_after_ms,
        max_log_bytes: args.max_log_mb.saturating_mul(1 << 20),
        min_free_disk_bytes: args.min_free_disk_mb.saturating_mul(1 << 20),
        start_timeout: (args.start_timeout_ms > 0).then(|| Duration::from_millis(args.start_timeout_ms)),
        keep_logs: (args.keep_logs_hours > 0).then(|| Duration::from_secs(args.keep_logs_hours.saturating_mul(3_600))),
        head_tls,
        log_tls,
        log_port: args.log_port,
        cgroups: None,
        job_user,
    };
    refuse_plain_logs_off_loopback(&options, args.tls.insecure_http)?;
    let cgroups = Cgroups::resolve(&cgroup_choice, &options.state_dir)
        .map_err(|e| CliError::BadInput(format!("--cgroup-parent {}: {e}", args.cgroup_parent)))?;
    let _lock = lock_node_state(&options.state_dir, &name)?;
    if let Some(cgroups) = &cgroups {
        tracing::info!("each attempt runs in a cgroup of its own under {}", cgroups.parent().display());
    }
    let options = NodeOptions { cgroups, ..options };
    super::block_on(async move {
        let watch = |kind| signal(kind).map_err(|e| CliError::Failed(format!("cannot watch for signals: {e}")));
        let (mut term, mut detach) = (watch(SignalKind::terminate())?, watch(SignalKind::user_defined2())?);
        let mut handle = node::start(options.clone()).await.map_err(start_error)?;
        tracing::info!("node {} ({}) reporting to {}", options.name, options.resources, options.head_url);
        tokio::select! {
            _ = term.recv() => {
                tracing::info!("SIGTERM: shutting down (deadline {} ms)", options.drain_deadline_ms);
                handle.drain_and_stop(options.drain_deadline_ms).await;
            }
            _ = detach.recv() => tracing::info!("SIGUSR2: exiting; attempts wait for the next agent"),
            _ = tokio::signal::ctrl_c() => handle.halt().await,
            Ok(reason) = &mut handle.refused => {
                handle.halt().await;
                return Err(CliError::BadInput(reason));
            }
        }
        Ok(Outcome::Done)
    })
}

/// `--run-jobs-as`, resolved once: a user that cannot be had, or one that may not enter the
/// work dir where every job without a `cwd` runs (an agent started as root in its home), is the
/// operator's to fix at start, not a failure of every attempt later.
fn jobs_user(
    given: Option<&str>,
    work_dir: &std::path::Path,
) -> Result<Option<Arc<node::job_user::JobUser>>, CliError> {
    let Some(given) = given else { return Ok(None) };
    // SAFETY: geteuid has no preconditions.
    let agent_uid = unsafe { libc::geteuid() };
    let user = node::job_user::JobUser::resolve(given, agent_uid)
        .map_err(|e| CliError::BadInput(format!("--run-jobs-as {given}: {e}")))?;
    user.credentials.try_enter(work_dir).map_err(|e| {
        CliError::BadInput(format!(
            "--run-jobs-as {given}: {given} may not enter the work dir {} ({e}), where jobs whose spec sets no \
             `cwd` run; give a --work-dir that user may enter",
            work_dir.display()
        ))
    })?;
    tracing::info!("attempts run as {} (uid {})", user.name, user.credentials.uid);
    Ok(Some(Arc::new(user)))
}

/// How an https:// head is verified: `--ca-cert` (or `$FTDRIVE_CA_CERT`), else the public roots.
fn head_tls(head_url: &str, ca: Option<&std::path::Path>) -> Result<Option<Arc<rustls::ClientConfig>>, CliError> {
    if !head_url.starts_with("https://") {
        return Ok(None);
    }
    let config = crate::tls::client_config(ca).map_err(|e| CliError::BadInput(format!("--ca-cert: {e}")))?;
    Ok(Some(Arc::new(config)))
}

/// The log server binds `--addr`: off loopback it must speak TLS, unless `--insecure-http`.
fn refuse_plain_logs_off_loopback(options: &NodeOptions, insecure_http: bool) -> Result<(), CliError> {
    if options.log_tls.is_some() {
        return Ok(());
    }
    let ip = node::logs::bind_ip(&options.addr)
        .map_err(|e| CliError::BadInput(format!("--addr {}: cannot resolve it: {e}", options.addr)))?;
    crate::tls::refuse_plain_off_loopback("this agent's logs", ip, insecure_http).map_err(CliError::BadInput)
}

/// What the node offers: what `--resources` names, and for the rest what was detected (as
/// `ray start --num-cpus 1` still offers the machine's memory). `cpu=1` alone left a node with
/// no `memory_mb`, where torchx's default roles (`memMB=1024`) could never run.
fn offered_resources(given: Option<&str>) -> Result<Resources, CliError> {
    let detected = detect::machine_resources();
    let Some(text) = given else { return Ok(detected) };
    let given = Resources::parse_pairs(text).map_err(|e| CliError::BadInput(format!("--resources: {e}")))?;
    Ok(given.iter().fold(detected, |offered, (name, milli)| offered.with_milli(name, milli)))
}

/// The node's `gpu` resource and the devices behind it. `--gpus` decides; else a `gpu=N` in
/// `--resources` offers the first N devices; else what was detected.
fn offer_gpus(resources: Resources, gpus: &Gpus, flag_given: bool) -> Result<(Resources, Devices), CliError> {
    let declared = resources.iter().find(|(name, _)| *name == "gpu").map(|(_, milli)| milli);
    let devices = match declared {
        Some(milli) if milli % 1000 != 0 => {
            return Err(CliError::BadInput(format!(
                "--resources: gpu={} is not a whole number of devices",
                milli as f64 / 1000.0
            )))
        }
        Some(milli) if flag_given && milli / 1000 != u64::from(gpus.devices.count()) => {
            return Err(CliError::BadInput(format!(
                "--resources says gpu={} but --gpus names {} device(s); give one of them",
                milli / 1000,
                gpus.devices.count()
            )))
        }
        Some(milli) if !flag_given => {
            gpus.devices.lowest((milli / 1000) as u32).unwrap_or(Devices::first((milli / 1000) as u32))
        }
        _ => gpus.devices,
    };
    if declared.is_none() && devices.is_empty() {
        return Ok((resources, devices));
    }
    Ok((resources.with_milli("gpu", u64::from(devices.count()) * 1000), devices))
}

/// Where attempts run whose spec sets no `cwd`: checked now, not at the first job's start.
fn work_dir(given: Option<std::path::PathBuf>) -> Result<std::path::PathBuf, CliError> {
    let Some(dir) = given else {
        return std::env::current_dir()
            .map_err(|e| CliError::BadInput(format!("cannot read the current directory: {e}")));
    };
    if !dir.is_dir() {
        return Err(CliError::BadInput(format!(
            "--work-dir {}: not a directory on this machine; give one that exists (attempts whose spec sets no `cwd` \
             run there)",
            dir.display()
        )));
    }
    absolute(dir, "--work-dir")
}

/// A port taken or an address or directory refused is the operator's to fix (exit 2).
fn start_error(e: std::io::Error) -> CliError {
    use std::io::ErrorKind::{AddrInUse, AddrNotAvailable, PermissionDenied};
    let message = format!("cannot start the agent: {e}");
    match e.kind() {
        AddrInUse | AddrNotAvailable | PermissionDenied => CliError::BadInput(message),
        _ => CliError::Failed(message),
    }
}

fn absolute(dir: std::path::PathBuf, flag: &str) -> Result<std::path::PathBuf, CliError> {
    std::path::absolute(&dir)
        .map_err(|e| CliError::BadInput(format!("{flag} {}: cannot make it absolute: {e}", dir.display())))
}

/// One agent per node state dir: a second one would share its attempts' records.
fn lock_node_state(dir: &std::path::Path, name: &str) -> Result<std::fs::File, CliError> {
    let unusable = |e| {
        CliError::BadInput(format!("cannot use {} as the agent's state dir (under --state-dir): {e}", dir.display()))
    };
    paths::private_dir(dir).map_err(unusable)?;
    if let Err(e) = paths::check_writable(dir) {
        // A state dir this agent ran from before (a restart on a disk that filled up) holds
        // attempts to re-attach to: the agent starts unhealthy, taking no new work (AG-6).
        if !dir.join(node::IDENTITY_FILE).exists() {
            return Err(unusable(e));
        }
        tracing::warn!("{} takes no write ({e}): starting unhealthy, to re-attach to its attempts", dir.display());
    }
    paths::lock_exclusive(&dir.join("agent.lock")).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => CliError::BadInput(format!(
            "node name {name} is in use: another agent runs from {}; give this one another --name",
            dir.display()
        )),
        _ => CliError::Failed(format!("cannot lock {}: {e}", dir.join("agent.lock").display())),
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "node".into())
}
