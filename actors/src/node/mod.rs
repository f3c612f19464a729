//! The node agent: `NodeAgent` owns the core agent protocol (`ftdrive::agent::Agent`), feeds it
//! what happens — the link to the head, the head's messages, its heartbeat timer, what
//! supervisors report — and carries out its effects: messages to the head, supervisors
//! launched and stopped, records forgotten. It holds no protocol logic of its own.
//!
//! Each attempt runs under a supervisor (`supervisor.rs`) that outlives the agent for the
//! re-attach grace, so that a restarted agent (same name, same state dir) finds its attempts
//! again (`attempt.rs`) and nothing is lost. On SIGTERM the agent shuts down: a preemption
//! notice to the head, its processes stopped, then it exits.

mod attempt;
pub mod cgroup;
pub mod detect;
mod health;
pub mod job_user;
pub mod link;
mod logcap;
pub mod logs;
mod metrics;
pub mod retention;
pub mod supervisor;
mod workers;

/// Where an agent keeps the cluster whose attempts it ran last (`Registration::cluster`).
const CLUSTER_FILE: &str = "cluster";
/// The secret that tells this agent from another under its name (`Registration::identity`).
pub const IDENTITY_FILE: &str = "identity";

use crate::paths::Credential;
use actix::prelude::*;
use attempt::{Command, Report};
use ftdrive::agent::{Agent, AgentEffect, AgentIdentity, AgentInput, Recovered};
use ftdrive::protocol::{AttemptKey, ExitStatus, StartSpec, ToAgent, ToHead};
use ftdrive::resources::Devices;
use ftdrive::{Instant, Labels, NodeId, Resources};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

/// Until the head's welcome says otherwise, supervisors wait this long for a restarted agent
/// (the default node timeout less the default heartbeat interval: `effective_grace_ms`).
const DEFAULT_REATTACH_GRACE_MS: u64 = 2_000;
/// Distinct refusals remembered as said (`log_refusal`): past it, more are only debug lines.
const MAX_REFUSALS_REMEMBERED: usize = 64;
/// How long a shut-down agent waits for its link to write what it holds to the head.
const LINK_FLUSH_MS: u64 = 1_000;

#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// `http://host:port` of the head.
    pub head_url: String,
    /// The agent's credential, read again whenever the link is re-established.
    pub credential: Credential,
    pub name: NodeId,
    pub resources: Resources,
    pub labels: Labels,
    /// The GPU devices it offers (as many as its `gpu` resource).
    pub devices: Devices,
    /// The address other ranks reach this node at (`MASTER_ADDR` when it holds rank 0).
    pub addr: String,
    /// Logs under `<state_dir>/logs`, attempt records under `<state_dir>/attempts`.
    pub state_dir: PathBuf,
    /// The working directory of attempts whose spec sets no `cwd`.
    pub work_dir: PathBuf,
    /// How long a shutdown (SIGTERM) gives the head before this agent exits anyway.
    pub drain_deadline_ms: u64,
    /// How long supervisors wait for a restarted agent (default: the head's node timeout).
    pub reattach_grace_ms: Option<u64>,
    /// Stop every attempt after hearing nothing from the head for this long (AG-7); `None`:
    /// keep them however long it is silent.
    pub fence_after_ms: Option<u64>,
    /// About how much of each attempt log is kept on disk (its end); 0: all of it.
    pub max_log_bytes: u64,
    /// The node takes no new work while its state dir's disk has less free (`health::probe`).
    pub min_free_disk_bytes: u64,
    /// How long an attempt's workers may take to start before it is killed as stuck and
    /// reported as the node's failure (`attempt::launch`); `None`: no bound.
    pub start_timeout: Option<Duration>,
    /// How long an ended attempt's logs stay once nothing more is written to them; `None`:
    /// for ever (`retention.rs`).
    pub keep_logs: Option<Duration>,
    /// How an https:// head is verified (`None` for an http:// head).
    pub head_tls: Option<Arc<rustls::ClientConfig>>,
    /// The log server serves HTTPS with this; `None`: plain HTTP.
    pub log_tls: Option<Arc<rustls::ServerConfig>>,
    /// The log (and metrics) server's port; 0: one the system picks at every start.
    pub log_port: u16,
    /// Where each attempt's cgroup is made (`cgroup.rs`); `None`: attempts get none.
    pub cgroups: Option<cgroup::Cgroups>,
    /// The user attempts' workers run as (`job_user.rs`); `None`: the agent's.
    pub job_user: Option<Arc<job_user::JobUser>>,
}

/// How the agent reaches one attempt's supervisor.
enum Supervision {
    /// Being launched; a stop asked for meanwhile is delivered once it is up. Its start may
    /// be reported before the launch is (the two travel apart).
    Launching { pending: Option<Command>, pgids: Vec<i32> },
    Attached {
        commands: UnboundedSender<Command>,
        /// The workers' process groups, once the supervisor said.
        pgids: Vec<i32>,
        /// Found running when this agent started: its start is an earlier agent's.
        reattached: bool,
    },
}

impl Supervision {
    fn pgids(&self) -> &[i32] {
        match self {
            Supervision::Launching { pgids, .. } | Supervision::Attached { pgids, .. } => pgids,
        }
    }
}

/// What the agent shares with its attempts' connections (their reports, the grace they pass
/// on) and with its log server (the head's token of this session).
struct Shared {
    reports: UnboundedSender<(AttemptKey, Report)>,
    grace: attempt::Grace,
    head_token: logs::HeadToken,
}

pub struct NodeAgent {
    opts: NodeOptions,
    protocol: Agent,
    epoch: std::time::Instant,
    link: Option<UnboundedSender<ToHead>>,
    heartbeat: Option<SpawnHandle>,
    /// The heartbeat interval, shared with the link (its reconnect backoff stays below it).
    heartbeat_ms: Arc<AtomicU64>,
    /// How long the link waits on a head that answers nothing (`link::silence_ms` of the
    /// head's node timeout, once told).
    silence_ms: Arc<AtomicU64>,
    supervisors: BTreeMap<AttemptKey, Supervision>,
    reports: UnboundedSender<(AttemptKey, Report)>,
    /// The re-attach grace every supervisor is told, once known.
    grace: attempt::Grace,
    /// The head's refusals said since it last welcomed the agent, each logged once.
    refusals_said: std::collections::BTreeSet<String>,
    /// The grace warning went out (once per start: every welcome brings the same).
    grace_warned: bool,
    /// The fence warning went out (as the grace's).
    fence_warned: bool,
    /// A read of the machine's listening ports is under way (`watch_listeners`).
    reading_listeners: bool,
    /// Ends of attempts held back until a read of what listens that starts after them is in
    /// (`report_end`), in the order they came.
    ends_awaiting_listeners: Vec<(AttemptKey, ExitStatus)>,
    /// What the head presents to the log server in this session.
    head_token: logs::HeadToken,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    /// Shut down, and waiting for the link to write what it holds and close.
    closing: bool,
    /// Told why, when the agent must end: its name belongs to another agent.
    refused: Option<tokio::sync::oneshot::Sender<String>>,
    timer: Option<SpawnHandle>,
    /// Probing whether the node can start work again (`health.rs`), while it cannot.
    health_probe: Option<SpawnHandle>,
    /// Unhealthy episodes in a row (no start succeeded between them), and the earliest the
    /// current one may end (`health::cool_down`).
    unhealthy_streak: u32,
    well_not_before: Option<std::time::Instant>,
    metrics: metrics::AgentMetrics,
}

impl NodeAgent {
    fn new(
        opts: NodeOptions,
        identity: AgentIdentity,
        (recovered, attached): (Recovered, Vec<(AttemptKey, UnboundedSender<Command>)>),
        Shared { reports, grace, head_token }: Shared,
        metrics: metrics::AgentMetrics,
        refused: tokio::sync::oneshot::Sender<String>,
    ) -> NodeAgent {
        let supervisors = attached
            .into_iter()
            .map(|(key, commands)| (key, Supervision::Attached { commands, pgids: Vec::new(), reattached: true }))
            .collect();
        NodeAgent {
            protocol: Agent::new(identity, crate::paths::incarnation(), recovered).with_fence(opts.fence_after_ms),
            opts,
            epoch: std::time::Instant::now(),
            link: None,
            heartbeat: None,
            heartbeat_ms: Arc::new(AtomicU64::new(ftdrive::agent::DEFAULT_HEARTBEAT_MS)),
            silence_ms: Arc::new(AtomicU64::new(link::silence_ms(0))),
            supervisors,
            reports,
            grace,
            refusals_said: std::collections::BTreeSet::new(),
            grace_warned: false,
            fence_warned: false,
            reading_listeners: false,
            ends_awaiting_listeners: Vec::new(),
            head_token,
            shutdown: None,
            closing: false,
            refused: Some(refused),
            timer: None,
            health_probe: None,
            unhealthy_streak: 0,
            well_not_before: None,
            metrics,
        }
    }

    fn now(&self) -> Instant {
        Instant::from_ms(self.epoch.elapsed().as_millis() as u64)
    }

    /// One input to the protocol, and its effects carried out.
    fn input(&mut self, input: AgentInput, ctx: &mut Context<Self>) {
        let now = self.now();
        self.protocol.handle(now, input);
        self.carry_out(ctx);
    }

    fn carry_out(&mut self, ctx: &mut Context<Self>) {
        while let Some(effect) = self.protocol.poll_effect() {
            match effect {
                AgentEffect::Send(msg) => {
                    if let Some(link) = &self.link {
                        let _ = link.send(msg);
                    }
                }
                AgentEffect::Spawn(spec) => self.launch(*spec, ctx),
                AgentEffect::Stop { key, grace_ms, fence } => self.command(&key, Command::Stop { grace_ms, fence }),
                AgentEffect::Forget { key } => {
                    self.supervisors.remove(&key);
                    attempt::forget(&self.opts.state_dir, &key);
                }
                AgentEffect::HeartbeatEvery { interval_ms } => self.set_heartbeat(interval_ms, ctx),
                AgentEffect::JoinedCluster { cluster, previous } => self.joined_cluster(&cluster, &previous),
                AgentEffect::ShutDown => self.close_link_then_finish(ctx),
                AgentEffect::Fenced { silent_ms, attempts } => {
                    let keys: Vec<String> = attempts.iter().map(|k| k.to_string()).collect();
                    tracing::warn!(
                        "heard nothing from the head for {silent_ms} ms (--fence-after-ms): stopping {} so that \
                         none runs twice (the head places them elsewhere): {}",
                        if keys.len() == 1 {
                            "its attempt".to_string()
                        } else {
                            format!("its {} attempts", keys.len())
                        },
                        keys.join(", ")
                    );
                }
            }
        }
        self.arm_timer(ctx);
    }

    /// Shutdown is complete, but what is queued for the head (an idle agent's notice, its last
    /// reports) may not be on the wire yet: the link is let go, so it writes what it holds and
    /// closes, and the agent is done once it has closed, or after `LINK_FLUSH_MS`.
    fn close_link_then_finish(&mut self, ctx: &mut Context<Self>) {
        if self.link.take().is_none() {
            return self.finish_shutdown();
        }
        self.closing = true;
        ctx.run_later(Duration::from_millis(LINK_FLUSH_MS), |act, _| act.finish_shutdown());
    }

    fn finish_shutdown(&mut self) {
        if let Some(done) = self.shutdown.take() {
            let _ = done.send(());
        }
    }

    fn arm_timer(&mut self, ctx: &mut Context<Self>) {
        if let Some(handle) = self.timer.take() {
            ctx.cancel_future(handle);
        }
        if let Some(at) = self.protocol.poll_timeout() {
            let delay = Duration::from_millis(at.ms_since(self.now()));
            self.timer = Some(ctx.run_later(delay, |act, ctx| {
                act.timer = None;
                let now = act.now();
                act.protocol.handle_timeout(now);
                act.carry_out(ctx);
            }));
        }
    }

    /// What listens on this machine, for the head to pass over when it hands out rendezvous
    /// ports (sent only when it changed), read here and now: the registration that follows
    /// must carry it.
    fn look_at_listeners(&mut self, ctx: &mut Context<Self>) {
        self.input(AgentInput::Listening(detect::listening_ports()), ctx);
    }

    /// The same, read off this thread, one read at a time: a busy machine's socket table runs
    /// to megabytes, and this thread sends the heartbeats. The ends waiting when the read starts
    /// are reported once it is in; those that came meanwhile wait for one more.
    fn watch_listeners(&mut self, ctx: &mut Context<Self>) {
        if std::mem::replace(&mut self.reading_listeners, true) {
            return;
        }
        let ends = std::mem::take(&mut self.ends_awaiting_listeners);
        let read = async { tokio::task::spawn_blocking(detect::listening_ports).await.ok() };
        ctx.spawn(read.into_actor(self).map(|ports, act, ctx| {
            act.reading_listeners = false;
            if let Some(ports) = ports {
                act.input(AgentInput::Listening(ports), ctx);
            }
            for (key, status) in ends {
                act.input(AgentInput::Exited { key, status }, ctx);
            }
            if !act.ends_awaiting_listeners.is_empty() {
                act.watch_listeners(ctx);
            }
        }));
    }

    /// An attempt's end goes to the head after what listens here was read again: its rank 0's
    /// listener is closed by now (its supervisor took everything down first), and the head,
    /// which may start the next attempt on that port at once, must not take the last report,
    /// made while the rank ran, for something else listening there (PS-4 would move it).
    fn report_end(&mut self, key: AttemptKey, status: ExitStatus, ctx: &mut Context<Self>) {
        self.ends_awaiting_listeners.push((key, status));
        self.watch_listeners(ctx);
    }

    /// Keeps the cluster a head welcomed this agent into; the logs of another cluster's attempts
    /// go aside (`logs-<cluster>`), since this one hands out the same job ids anew, and this
    /// cluster's own come back if it served it before (a head briefly started on the wrong
    /// state dir).
    fn joined_cluster(&mut self, cluster: &str, previous: &str) {
        let dir = &self.opts.state_dir;
        if let Err(e) = std::fs::write(dir.join(CLUSTER_FILE), cluster) {
            tracing::warn!("cannot record the cluster in {}: {e}", dir.join(CLUSTER_FILE).display());
        }
        if previous.is_empty() {
            return;
        }
        let (logs, aside, kept) =
            (dir.join("logs"), dir.join(format!("logs-{previous}")), dir.join(format!("logs-{cluster}")));
        let moved = std::fs::rename(&logs, &aside).and_then(|()| match kept.is_dir() {
            true => std::fs::rename(&kept, &logs),
            false => std::fs::create_dir(&logs),
        });
        match moved {
            Ok(()) => tracing::warn!(
                "this agent now serves the head of cluster {cluster}, not {previous} (a head started on another \
                 or an empty state dir): it forgot {previous}'s ended attempts, and their logs are in {}",
                aside.display()
            ),
            Err(e) => tracing::warn!("cannot put cluster {previous}'s logs aside in {}: {e}", aside.display()),
        }
    }

    /// Deletes, off this thread, the logs of attempts that ended over `keep_logs` ago; those of
    /// attempts it supervises or still owes the head a report on stay, however old.
    fn sweep_old_logs(&mut self, ctx: &mut Context<Self>) {
        let Some(keep) = self.opts.keep_logs else { return };
        let owed = self.protocol.unacknowledged().map(|(key, _)| key);
        let live = self.supervisors.keys().chain(self.protocol.running()).chain(owed).map(retention::log_key).collect();
        let state_dir = self.opts.state_dir.clone();
        let sweep = move || {
            let now = std::time::SystemTime::now();
            let mut swept = retention::sweep(&state_dir.join("logs"), keep, &live, now);
            swept += retention::sweep_other_clusters(&state_dir, keep, now);
            swept
        };
        let swept = async { tokio::task::spawn_blocking(sweep).await.ok() };
        ctx.spawn(swept.into_actor(self).map(move |swept, _, _| {
            if let Some(swept) = swept.filter(|s| s.files > 0) {
                let (files, mib) = (swept.files, swept.bytes as f64 / f64::from(1 << 20));
                tracing::info!(
                    "deleted {files} log(s) of attempts that ended over {keep:?} ago (--keep-logs-hours), freeing \
                     {mib:.1} MiB"
                );
            }
        }));
    }

    /// `health::probe`, off this thread: a sick disk may take long to answer, and heartbeats go
    /// from here. `None`: the probe's thread panicked (the next probe tries again).
    fn probe(&self) -> impl std::future::Future<Output = Option<Option<String>>> + 'static {
        let (state_dir, min_free_bytes) = (self.opts.state_dir.clone(), self.opts.min_free_disk_bytes);
        async move { tokio::task::spawn_blocking(move || health::probe(&state_dir, min_free_bytes)).await.ok() }
    }

    /// The node cannot start work: the protocol tells the head (AG-6), and the probing for its
    /// recovery starts.
    fn fall_ill(&mut self, problem: String, ctx: &mut Context<Self>) {
        tracing::warn!("node cannot start attempts: {problem}");
        self.input(AgentInput::Health(Some(problem)), ctx);
        self.probe_health_until_well(ctx);
    }

    /// A disk that fills up is found before a start fails on it (and charges some job).
    fn probe_while_well(&mut self, ctx: &mut Context<Self>) {
        if self.protocol.problem().is_some() {
            return;
        }
        ctx.spawn(self.probe().into_actor(self).map(|problem, act, ctx| {
            if let Some(problem) = problem.flatten().filter(|_| act.protocol.problem().is_none()) {
                act.fall_ill(problem, ctx);
            }
        }));
    }

    /// AG-6: the node could not start an attempt; until a probe finds what a start needs
    /// working again, it is unhealthy (the protocol made it so) — then it is well again.
    fn probe_health_until_well(&mut self, ctx: &mut Context<Self>) {
        if self.health_probe.is_some() {
            return;
        }
        self.unhealthy_streak += 1;
        self.well_not_before = Some(std::time::Instant::now() + health::cool_down(self.unhealthy_streak));
        self.health_probe = Some(ctx.run_interval(health::PROBE_EVERY, |act, ctx| {
            ctx.spawn(act.probe().into_actor(act).map(|problem, act, ctx| match problem {
                Some(None) if act.well_not_before.is_some_and(|t| std::time::Instant::now() < t) => {}
                Some(None) => {
                    if let Some(handle) = act.health_probe.take() {
                        ctx.cancel_future(handle);
                    }
                    if act.protocol.problem().is_some() {
                        tracing::info!("node can start attempts again");
                        act.input(AgentInput::Health(None), ctx);
                    }
                }
                Some(Some(problem)) => act.input(AgentInput::Health(Some(problem)), ctx),
                None => {}
            }));
        }));
    }

    fn set_heartbeat(&mut self, interval_ms: u64, ctx: &mut Context<Self>) {
        if let Some(handle) = self.heartbeat.take() {
            ctx.cancel_future(handle);
        }
        self.heartbeat_ms.store(interval_ms, Ordering::Relaxed);
        let every = Duration::from_millis(interval_ms);
        self.heartbeat = Some(ctx.run_interval(every, |act, ctx| {
            act.watch_listeners(ctx);
            act.input(AgentInput::Heartbeat, ctx);
        }));
    }

    // ---- supervisors -----------------------------------------------------------------------

    /// An agent that was stopped (SIGSTOP) and declared dead sends all it held once it resumes,
    /// and the head refuses each the same way: one warning says it, not hundreds.
    /// Each refusal is said once until the head welcomes the agent again (two that alternate,
    /// a registration's and its heartbeats', were each said every second).
    fn log_refusal(&mut self, reason: &str) {
        if self.refusals_said.len() >= MAX_REFUSALS_REMEMBERED || !self.refusals_said.insert(reason.to_string()) {
            return tracing::debug!("the head refused a message: {reason}");
        }
        tracing::warn!("the head refused a message: {reason} (said once until the head welcomes this agent again)");
    }

    fn launch(&mut self, spec: StartSpec, ctx: &mut Context<Self>) {
        let key = spec.key.clone();
        let Some(log) = logs::log_path(&self.opts.state_dir, key.job.as_str(), key.actor, key.attempt) else {
            return self.input(AgentInput::SpawnFailed { key, message: "bad job id".into(), node_fault: false }, ctx);
        };
        self.supervisors.insert(key.clone(), Supervision::Launching { pending: None, pgids: Vec::new() });
        // A relative `cwd` is under the work dir, whatever directory the agent was started in.
        let cwd = spec.cwd.as_ref().map_or_else(|| self.opts.work_dir.clone(), |cwd| self.opts.work_dir.join(cwd));
        let reattach_grace_ms = self.grace.known_ms().unwrap_or(DEFAULT_REATTACH_GRACE_MS);
        let cgroups = self.opts.cgroups.clone();
        let job_user = self.opts.job_user.clone();
        let limits = attempt::Limits {
            reattach_grace_ms,
            max_log_bytes: self.opts.max_log_bytes,
            cgroups,
            job_user,
            start_timeout: self.opts.start_timeout,
        };
        let (state_dir, reports, addr) = (self.opts.state_dir.clone(), self.reports.clone(), self.opts.addr.clone());
        let grace = self.grace.clone();
        let launching = async move {
            let extra = [("FTDRIVE_ADVERTISE_ADDR", addr)];
            attempt::launch(&spec, &state_dir, &log, &cwd, &extra, limits, (reports, &grace)).await
        };
        ctx.spawn(launching.into_actor(self).map(move |result, act, ctx| act.launched(key, result, ctx)));
    }

    fn launched(
        &mut self,
        key: AttemptKey,
        result: Result<UnboundedSender<Command>, attempt::StartFailure>,
        ctx: &mut Context<Self>,
    ) {
        match result {
            Ok(commands) => {
                // Its end may have been reported already (a command that ends at once): then
                // there is nothing left to supervise.
                let Some(Supervision::Launching { pending, pgids }) = self.supervisors.remove(&key) else { return };
                if let Some(command) = pending {
                    let _ = commands.send(command);
                }
                self.supervisors.insert(key, Supervision::Attached { commands, pgids, reattached: false });
                self.unhealthy_streak = 0; // it starts work: a later failure begins a new streak
            }
            Err(attempt::StartFailure { message, node_fault }) => {
                self.supervisors.remove(&key);
                self.metrics.spawn_failed();
                if node_fault {
                    tracing::warn!("node cannot start {key}: {message}");
                    self.probe_health_until_well(ctx);
                }
                self.input(AgentInput::SpawnFailed { key, message, node_fault }, ctx);
            }
        }
    }

    fn command(&mut self, key: &AttemptKey, command: Command) {
        match self.supervisors.get_mut(key) {
            Some(Supervision::Attached { commands, .. }) => {
                let _ = commands.send(command);
            }
            Some(Supervision::Launching { pending, .. }) => *pending = Some(command),
            None => {}
        }
    }

    fn supervised(&mut self, key: AttemptKey, report: Report, ctx: &mut Context<Self>) {
        match report {
            Report::Started { pgids } => {
                let reattached = match self.supervisors.get_mut(&key) {
                    Some(Supervision::Attached { pgids: known, reattached, .. }) => {
                        *known = pgids;
                        *reattached
                    }
                    Some(Supervision::Launching { pgids: known, .. }) => {
                        *known = pgids;
                        false
                    }
                    None => false,
                };
                // Counted once, by the agent that launched it: a re-attached one counts in
                // `reattached_attempts`.
                if !reattached {
                    self.metrics.attempt_started();
                }
                self.input(AgentInput::Spawned { key }, ctx);
            }
            Report::SpawnFailed(message) => {
                self.metrics.spawn_failed();
                self.input(AgentInput::SpawnFailed { key, message, node_fault: false }, ctx)
            }
            Report::Ended(status) => {
                self.supervisors.remove(&key);
                if let Some(log) = logs::log_path(&self.opts.state_dir, key.job.as_str(), key.actor, key.attempt) {
                    retention::touch(&log);
                }
                self.metrics.attempt_ended(status.code == Some(0));
                self.report_end(key, status, ctx);
            }
        }
        self.count_processes();
    }

    fn count_processes(&self) {
        let processes = self.supervisors.values().map(|s| s.pgids().len()).sum();
        self.metrics.supervising(self.supervisors.len(), processes);
    }

    /// Kills every attempt at once (an embedded cluster shutting down, Ctrl-C).
    fn kill_all(&mut self) {
        for supervision in self.supervisors.values() {
            if let Supervision::Attached { commands, .. } = supervision {
                let _ = commands.send(Command::Kill);
            }
            for pgid in supervision.pgids() {
                workers::signal_group(*pgid, libc::SIGKILL);
            }
        }
    }
}

impl Actor for NodeAgent {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.set_heartbeat(ftdrive::agent::DEFAULT_HEARTBEAT_MS, ctx);
        if let Some(problem) = health::probe(&self.opts.state_dir, self.opts.min_free_disk_bytes) {
            // Before the link registers (the actor starts first): a restart on a full disk.
            self.fall_ill(problem, ctx);
        }
        ctx.run_interval(health::PROBE_WHILE_WELL_EVERY, |act, ctx| act.probe_while_well(ctx));
        if self.opts.keep_logs.is_some() {
            self.sweep_old_logs(ctx);
            ctx.run_interval(retention::SWEEP_EVERY, |act, ctx| act.sweep_old_logs(ctx));
        }
    }
}

// ---- messages -------------------------------------------------------------------------

/// The link to the head is up; messages go through `tx`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Linked {
    pub tx: UnboundedSender<ToHead>,
}

impl Handler<Linked> for NodeAgent {
    type Result = ();
    fn handle(&mut self, msg: Linked, ctx: &mut Context<Self>) {
        if self.closing {
            return; // shut down: the new link is dropped, and it closes
        }
        self.link = Some(msg.tx);
        self.metrics.connected();
        self.look_at_listeners(ctx);
        self.input(AgentInput::LinkUp, ctx);
    }
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct Unlinked;

impl Handler<Unlinked> for NodeAgent {
    type Result = ();
    fn handle(&mut self, _: Unlinked, ctx: &mut Context<Self>) {
        self.link = None;
        if self.closing {
            return self.finish_shutdown(); // what the agent had to say is written
        }
        self.input(AgentInput::LinkDown, ctx);
    }
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct FromHead(pub ToAgent);

impl Handler<FromHead> for NodeAgent {
    type Result = ();
    fn handle(&mut self, FromHead(msg): FromHead, ctx: &mut Context<Self>) {
        match &msg {
            ToAgent::Welcome { node_timeout_ms, heartbeat_interval_ms, log_token, .. } => {
                if !self.refusals_said.is_empty() {
                    tracing::info!("the head let this agent in");
                    self.refusals_said.clear();
                }
                self.head_token.set(log_token.clone());
                // Supervisors, running ones included, follow the head's node timeout, or the
                // agent's own grace where that is shorter.
                let given = self.opts.reattach_grace_ms;
                let (grace_ms, warning) = attempt::effective_grace_ms(given, *node_timeout_ms, *heartbeat_interval_ms);
                if let Some(warning) = warning.filter(|_| !self.grace_warned) {
                    tracing::warn!("{warning}");
                    self.grace_warned = true;
                }
                self.grace.set_ms(grace_ms);
                self.silence_ms.store(link::silence_ms(*node_timeout_ms), Ordering::Relaxed);
                let fence = fence_warning(self.opts.fence_after_ms, *node_timeout_ms, *heartbeat_interval_ms);
                if let Some(warning) = fence.filter(|_| !self.fence_warned) {
                    tracing::warn!("{warning}");
                    self.fence_warned = true;
                }
            }
            ToAgent::Refused { reason, .. } => self.log_refusal(reason),
            ToAgent::NameInUse { reason } => {
                if let Some(refused) = self.refused.take() {
                    let _ = refused.send(reason.clone());
                }
            }
            _ => {}
        }
        self.input(AgentInput::FromHead(msg), ctx);
    }
}

/// The head answered a ping of the link (AG-7).
#[derive(Message)]
#[rtype(result = "()")]
pub struct HeadHeard;

impl Handler<HeadHeard> for NodeAgent {
    type Result = ();
    fn handle(&mut self, _: HeadHeard, ctx: &mut Context<Self>) {
        self.input(AgentInput::HeadHeard, ctx);
    }
}

/// What a fence that cannot keep a rank from running twice is told: the head places a silent
/// node's work elsewhere a node timeout after its last heartbeat, and this agent hears the
/// head about a heartbeat interval less often than that.
fn fence_warning(fence_after_ms: Option<u64>, node_timeout_ms: u64, heartbeat_interval_ms: u64) -> Option<String> {
    let fence_ms = fence_after_ms?;
    if fence_ms <= heartbeat_interval_ms {
        return Some(format!(
            "--fence-after-ms {fence_ms} is not longer than the head's heartbeat interval ({heartbeat_interval_ms} \
             ms), at which this agent hears the head at best: the fence will stop its work while the head is up; \
             give a longer one"
        ));
    }
    let most_ms = node_timeout_ms.saturating_sub(heartbeat_interval_ms);
    (fence_ms >= most_ms).then(|| {
        format!(
            "--fence-after-ms {fence_ms} is not below the head's node timeout less a heartbeat interval \
             ({node_timeout_ms} - {heartbeat_interval_ms} ms): the head places a silent node's attempts elsewhere \
             before this agent stops them, so a rank can run twice meanwhile; give a shorter fence, or start the \
             head with a longer --node-timeout-ms"
        )
    })
}

/// A supervisor reported on its attempt.
#[derive(Message)]
#[rtype(result = "()")]
struct Supervised(AttemptKey, Report);

impl Handler<Supervised> for NodeAgent {
    type Result = ();
    fn handle(&mut self, Supervised(key, report): Supervised, ctx: &mut Context<Self>) {
        self.supervised(key, report, ctx);
    }
}

/// SIGTERM: shut down, and answer once done (or at the deadline).
#[derive(Message)]
#[rtype(result = "()")]
pub struct BeginShutdown {
    pub deadline_ms: u64,
    pub done: tokio::sync::oneshot::Sender<()>,
}

impl Handler<BeginShutdown> for NodeAgent {
    type Result = ();
    fn handle(&mut self, msg: BeginShutdown, ctx: &mut Context<Self>) {
        tracing::info!("shutting down: telling the head and stopping {} attempt(s)", self.supervisors.len());
        self.shutdown = Some(msg.done);
        self.input(AgentInput::Shutdown { deadline_ms: msg.deadline_ms }, ctx);
    }
}

/// Ends the agent now, killing its attempts.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Halt;

impl Handler<Halt> for NodeAgent {
    type Result = ();
    fn handle(&mut self, _: Halt, ctx: &mut Context<Self>) {
        self.kill_all();
        ctx.stop();
    }
}

/// A running agent and its log server.
pub struct NodeHandle {
    pub agent: Addr<NodeAgent>,
    pub logs: actix_web::dev::ServerHandle,
    /// Resolves when the head refused this agent's name for good (another agent holds it).
    pub refused: tokio::sync::oneshot::Receiver<String>,
}

/// Starts an agent (log server, re-attachment to surviving supervisors, actor, link to the
/// head) on the current actix system.
pub async fn start(opts: NodeOptions) -> std::io::Result<NodeHandle> {
    std::fs::create_dir_all(opts.state_dir.join("logs"))?;
    std::fs::create_dir_all(attempt::attempts_dir(&opts.state_dir))?;
    let bind = (logs::bind_ip(&opts.addr)?, opts.log_port);
    let metrics = metrics::AgentMetrics::new();
    let head_token = logs::HeadToken::default();
    let credentials = (opts.credential.clone(), head_token.clone());
    let (log_url, log_server) =
        logs::serve(bind, opts.state_dir.clone(), credentials, metrics.clone(), opts.log_tls.clone())?;
    let logs = log_server.handle();
    actix::spawn(log_server);
    let (reports, mut incoming) = tokio::sync::mpsc::unbounded_channel();
    let grace = attempt::Grace::new(opts.reattach_grace_ms);
    let (recovered, attached) = attempt::recover(&opts.state_dir, reports.clone(), &grace).await;
    if !recovered.running.is_empty() || !recovered.ended.is_empty() {
        tracing::info!(
            "re-attached to {} running attempt(s); {} ended while the agent was away",
            recovered.running.len(),
            recovered.ended.len()
        );
    }
    let (head_url, credential, head_tls) = (opts.head_url.clone(), opts.credential.clone(), opts.head_tls.clone());
    let opts_fenced = opts.fence_after_ms.is_some();
    metrics.reattached(recovered.running.len());
    let identity = AgentIdentity {
        name: opts.name.clone(),
        resources: opts.resources.clone(),
        labels: opts.labels.clone(),
        addr: opts.addr.clone(),
        devices: (!opts.devices.is_empty()).then_some(opts.devices),
        port_space: detect::port_space(),
        log_url,
        // A secret kept with the node's state: what tells this agent from another under its name.
        identity: crate::paths::stored_token(&opts.state_dir.join(IDENTITY_FILE))?,
        cluster: std::fs::read_to_string(opts.state_dir.join(CLUSTER_FILE)).unwrap_or_default().trim().to_string(),
    };
    let (refused_tx, refused) = tokio::sync::oneshot::channel();
    let shared = Shared { reports, grace, head_token };
    let agent = NodeAgent::new(opts, identity, (recovered, attached), shared, metrics, refused_tx);
    let timing = link::LinkTiming {
        heartbeat_ms: agent.heartbeat_ms.clone(),
        silence_ms: agent.silence_ms.clone(),
        // Only a fence needs to know that the head hears.
        report_pongs: opts_fenced,
    };
    let agent = agent.start();
    let forward = agent.clone();
    actix::spawn(async move {
        while let Some((key, report)) = incoming.recv().await {
            forward.do_send(Supervised(key, report));
        }
    });
    actix::spawn(link::maintain(agent.clone(), head_url, credential, head_tls, timing));
    Ok(NodeHandle { agent, logs, refused })
}

impl NodeHandle {
    /// Shuts down (SIGTERM semantics) and stops.
    pub async fn drain_and_stop(self, deadline_ms: u64) {
        let (done, drained) = tokio::sync::oneshot::channel();
        if self.agent.send(BeginShutdown { deadline_ms, done }).await.is_ok() {
            let _ = drained.await;
        }
        self.halt().await;
    }

    /// Stops at once, killing whatever runs.
    pub async fn halt(self) {
        let _ = self.agent.send(Halt).await;
        self.logs.stop(false).await;
    }
}
