//! The node agent: registers with the head, heartbeats, runs each command actor's attempt as a
//! real process in its own process group, stops it (SIGTERM, then SIGKILL after the grace),
//! reports how it ended until the head acknowledges, and serves its logs. On SIGTERM it drains:
//! a preemption notice to the head, its processes stopped, then it exits.

pub mod detect;
mod link;
pub mod logs;
mod process;
pub mod shim;

use crate::wire::{AgentMsg, HeadMsg};
use actix::prelude::*;
use ftdrive::protocol::{AttemptKey, ExitStatus, StartSpec, ToAgent};
use ftdrive::{Labels, NodeId, Resources};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

/// Most finished attempts remembered (so that a start re-sent after the exit is ignored).
const MAX_REMEMBERED: usize = 4_096;
/// Heartbeat interval until the head says otherwise.
const DEFAULT_HEARTBEAT_MS: u64 = 1_000;

#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// `http://host:port` of the head.
    pub head_url: String,
    pub token: String,
    pub name: NodeId,
    pub resources: Resources,
    pub labels: Labels,
    /// The address other ranks reach this node at (`MASTER_ADDR` when it holds rank 0).
    pub addr: String,
    /// Logs live under `<state_dir>/logs`.
    pub state_dir: PathBuf,
    /// The working directory of attempts whose spec sets no `cwd`.
    pub work_dir: PathBuf,
    /// How long a drain (SIGTERM) gives the head before this agent exits anyway.
    pub drain_deadline_ms: u64,
}

struct Proc {
    pgid: i32,
    grace_ms: u64,
    /// The agent signalled it (a stop, or the agent draining).
    signalled: bool,
    kill_timer: Option<SpawnHandle>,
    spawn_error: Option<String>,
}

pub struct NodeAgent {
    opts: NodeOptions,
    log_url: String,
    incarnation: u64,
    seq: u64,
    heartbeat_ms: u64,
    heartbeat: Option<SpawnHandle>,
    link: Option<UnboundedSender<AgentMsg>>,
    procs: BTreeMap<AttemptKey, Proc>,
    finished: BTreeSet<AttemptKey>,
    finished_order: VecDeque<AttemptKey>,
    /// Exit reports the head has not acknowledged; re-sent with every heartbeat.
    unacked: BTreeMap<AttemptKey, AgentMsg>,
    draining: Option<(u64, std::time::Instant, tokio::sync::oneshot::Sender<()>)>,
}

impl NodeAgent {
    pub fn new(opts: NodeOptions, log_url: String) -> NodeAgent {
        NodeAgent {
            opts,
            log_url,
            incarnation: crate::paths::random_u64(),
            seq: 0,
            heartbeat_ms: DEFAULT_HEARTBEAT_MS,
            heartbeat: None,
            link: None,
            procs: BTreeMap::new(),
            finished: BTreeSet::new(),
            finished_order: VecDeque::new(),
            unacked: BTreeMap::new(),
            draining: None,
        }
    }

    fn send(&self, msg: AgentMsg) {
        if let Some(link) = &self.link {
            let _ = link.send(msg);
        }
    }

    fn register(&self) {
        self.send(AgentMsg::Register {
            node: self.opts.name.clone(),
            incarnation: self.incarnation,
            resources: self.opts.resources.clone(),
            labels: self.opts.labels.clone(),
            addr: self.opts.addr.clone(),
            log_url: self.log_url.clone(),
        });
    }

    fn heartbeat(&mut self, ctx: &mut Context<Self>) {
        self.seq += 1;
        let running = self.procs.keys().cloned().collect();
        self.send(AgentMsg::Heartbeat {
            node: self.opts.name.clone(),
            incarnation: self.incarnation,
            seq: self.seq,
            running,
        });
        for report in self.unacked.values() {
            self.send(report.clone());
        }
        if let Some((deadline_ms, since, _)) = &self.draining {
            let left = deadline_ms.saturating_sub(since.elapsed().as_millis() as u64);
            self.send(AgentMsg::PreemptionNotice { node: self.opts.name.clone(), deadline_ms: left });
        }
        self.maybe_done_draining(ctx);
    }

    fn set_heartbeat(&mut self, interval_ms: u64, ctx: &mut Context<Self>) {
        if self.heartbeat.is_some() && interval_ms == self.heartbeat_ms {
            return;
        }
        if let Some(handle) = self.heartbeat.take() {
            ctx.cancel_future(handle);
        }
        self.heartbeat_ms = interval_ms.max(10);
        self.heartbeat =
            Some(ctx.run_interval(Duration::from_millis(self.heartbeat_ms), |act, ctx| act.heartbeat(ctx)));
    }

    // ---- attempts ------------------------------------------------------------------------

    fn start(&mut self, spec: StartSpec, ctx: &mut Context<Self>) {
        let key = spec.key.clone();
        if self.procs.contains_key(&key) {
            return self.send(AgentMsg::Started { node: self.opts.name.clone(), key });
        }
        if self.finished.contains(&key) {
            return; // ran already; its exit report is on its way
        }
        if self.draining.is_some() {
            return self.report_never_started(key);
        }
        let Some(log) = logs::log_path(&self.opts.state_dir, key.job.as_str(), key.actor, key.attempt) else {
            return self.report(
                key.clone(),
                AgentMsg::SpawnFailed { node: self.opts.name.clone(), key, message: "bad job id".into() },
            );
        };
        let cwd = spec.cwd.as_ref().map_or_else(|| self.opts.work_dir.clone(), PathBuf::from);
        let extra = [("FTDRIVE_ADVERTISE_ADDR", self.opts.addr.clone())];
        match process::launch(&spec, &log, &cwd, &extra) {
            Ok(launched) => self.watch(key, launched, spec.stop_grace_ms, ctx),
            Err(message) => {
                self.remember(key.clone());
                self.report(key.clone(), AgentMsg::SpawnFailed { node: self.opts.name.clone(), key, message });
            }
        }
    }

    /// Follows a launched attempt: whether its command started, and when it ends.
    fn watch(&mut self, key: AttemptKey, launched: process::Launched, grace_ms: u64, ctx: &mut Context<Self>) {
        let (pgid, mut child, status) = launched.into_parts();
        self.procs.insert(key.clone(), Proc { pgid, grace_ms, signalled: false, kill_timer: None, spawn_error: None });
        let started_key = key.clone();
        ctx.spawn(
            process::Launched::started(status)
                .into_actor(self)
                .map(move |result, act, _| act.on_started(started_key, result)),
        );
        ctx.spawn(
            async move { child.wait().await }
                .into_actor(self)
                .map(move |status, act, ctx| act.on_exit(key, status, ctx)),
        );
    }

    fn on_started(&mut self, key: AttemptKey, result: Result<(), String>) {
        let Some(proc) = self.procs.get_mut(&key) else { return };
        match result {
            Ok(()) => self.send(AgentMsg::Started { node: self.opts.name.clone(), key }),
            Err(message) => proc.spawn_error = Some(message),
        }
    }

    fn on_exit(&mut self, key: AttemptKey, status: std::io::Result<std::process::ExitStatus>, ctx: &mut Context<Self>) {
        let Some(proc) = self.procs.remove(&key) else { return };
        if let Some(handle) = proc.kill_timer {
            ctx.cancel_future(handle);
        }
        self.remember(key.clone());
        let node = self.opts.name.clone();
        let report = match (proc.spawn_error, status) {
            (Some(message), _) => AgentMsg::SpawnFailed { node, key: key.clone(), message },
            (None, Ok(status)) => {
                AgentMsg::Exited { node, key: key.clone(), status: process::exit_status(status, proc.signalled) }
            }
            (None, Err(e)) => {
                AgentMsg::SpawnFailed { node, key: key.clone(), message: format!("lost track of the process: {e}") }
            }
        };
        self.report(key, report);
        self.maybe_done_draining(ctx);
    }

    /// SIGTERM to the attempt's group now, SIGKILL after the grace.
    fn stop(&mut self, key: &AttemptKey, grace_ms: u64, ctx: &mut Context<Self>) {
        let Some(proc) = self.procs.get_mut(key) else {
            if !self.finished.contains(key) {
                self.report_never_started(key.clone());
            }
            return;
        };
        if proc.signalled {
            return;
        }
        proc.signalled = true;
        let pgid = proc.pgid;
        process::signal_group(pgid, libc::SIGTERM);
        proc.kill_timer = Some(
            ctx.run_later(Duration::from_millis(grace_ms), move |_, _| process::signal_group(pgid, libc::SIGKILL)),
        );
    }

    fn report_never_started(&mut self, key: AttemptKey) {
        self.remember(key.clone());
        let msg =
            AgentMsg::Exited { node: self.opts.name.clone(), key: key.clone(), status: ExitStatus::never_started() };
        self.report(key, msg);
    }

    /// Sends a report now and again with every heartbeat until the head acknowledges it.
    fn report(&mut self, key: AttemptKey, msg: AgentMsg) {
        self.send(msg.clone());
        self.unacked.insert(key, msg);
    }

    fn remember(&mut self, key: AttemptKey) {
        if self.finished.insert(key.clone()) {
            self.finished_order.push_back(key);
        }
        while self.finished_order.len() > MAX_REMEMBERED {
            let old = self.finished_order.pop_front().expect("non-empty");
            self.finished.remove(&old);
        }
    }

    // ---- draining ------------------------------------------------------------------------

    fn begin_drain(&mut self, deadline_ms: u64, done: tokio::sync::oneshot::Sender<()>, ctx: &mut Context<Self>) {
        tracing::info!("draining: telling the head and stopping {} process(es)", self.procs.len());
        self.draining = Some((deadline_ms, std::time::Instant::now(), done));
        self.send(AgentMsg::PreemptionNotice { node: self.opts.name.clone(), deadline_ms });
        let keys: Vec<(AttemptKey, u64)> =
            self.procs.iter().map(|(k, p)| (k.clone(), p.grace_ms.min(deadline_ms))).collect();
        for (key, grace_ms) in keys {
            self.stop(&key, grace_ms, ctx);
        }
        self.maybe_done_draining(ctx);
    }

    /// Drained once no process runs and the head has every report — or the deadline passed.
    fn maybe_done_draining(&mut self, _: &mut Context<Self>) {
        let Some((deadline_ms, since, _)) = &self.draining else { return };
        let reported = self.procs.is_empty() && (self.unacked.is_empty() || self.link.is_none());
        if reported || since.elapsed().as_millis() as u64 >= *deadline_ms {
            let (_, _, done) = self.draining.take().expect("draining");
            let _ = done.send(());
        }
    }

    /// Kills everything at once (embedded clusters shutting down, tests).
    fn kill_all(&mut self) {
        for proc in self.procs.values() {
            process::signal_group(proc.pgid, libc::SIGKILL);
        }
    }
}

impl Actor for NodeAgent {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.set_heartbeat(DEFAULT_HEARTBEAT_MS, ctx);
    }

    fn stopping(&mut self, _: &mut Context<Self>) -> Running {
        self.kill_all();
        Running::Stop
    }
}

// ---- messages -------------------------------------------------------------------------

/// The link to the head is up; messages go through `tx`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Linked {
    pub tx: UnboundedSender<AgentMsg>,
}

impl Handler<Linked> for NodeAgent {
    type Result = ();
    fn handle(&mut self, msg: Linked, _: &mut Context<Self>) {
        self.link = Some(msg.tx);
        self.register();
    }
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct Unlinked;

impl Handler<Unlinked> for NodeAgent {
    type Result = ();
    fn handle(&mut self, _: Unlinked, _: &mut Context<Self>) {
        self.link = None;
    }
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct FromHead(pub HeadMsg);

impl Handler<FromHead> for NodeAgent {
    type Result = ();
    fn handle(&mut self, FromHead(msg): FromHead, ctx: &mut Context<Self>) {
        match msg {
            HeadMsg::Welcome { heartbeat_interval_ms } => {
                self.set_heartbeat(heartbeat_interval_ms, ctx);
                self.heartbeat(ctx);
            }
            HeadMsg::Do { msg: ToAgent::Start(spec) } => self.start(spec, ctx),
            HeadMsg::Do { msg: ToAgent::Stop { key, grace_ms } } => self.stop(&key, grace_ms, ctx),
            HeadMsg::Do { msg: ToAgent::AckExit { key } } => {
                self.unacked.remove(&key);
                self.maybe_done_draining(ctx);
            }
            HeadMsg::Refused { reason, register_again } => {
                tracing::warn!("the head refused a message: {reason}");
                if register_again {
                    self.register();
                }
            }
        }
    }
}

/// SIGTERM: drain, and answer once drained (or at the deadline).
#[derive(Message)]
#[rtype(result = "()")]
pub struct BeginDrain {
    pub deadline_ms: u64,
    pub done: tokio::sync::oneshot::Sender<()>,
}

impl Handler<BeginDrain> for NodeAgent {
    type Result = ();
    fn handle(&mut self, msg: BeginDrain, ctx: &mut Context<Self>) {
        self.begin_drain(msg.deadline_ms, msg.done, ctx);
    }
}

/// Ends the agent now, killing its processes.
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
}

/// Starts an agent (actor, log server, link to the head) on the current actix system.
pub fn start(opts: NodeOptions) -> std::io::Result<NodeHandle> {
    std::fs::create_dir_all(opts.state_dir.join("logs"))?;
    let bind = if opts.addr.parse::<std::net::IpAddr>().is_ok() { opts.addr.clone() } else { "0.0.0.0".to_string() };
    let (log_url, log_server) = logs::serve(&bind, opts.state_dir.clone(), opts.token.clone())?;
    let logs = log_server.handle();
    actix::spawn(log_server);
    let head_url = opts.head_url.clone();
    let token = opts.token.clone();
    let agent = NodeAgent::new(opts, log_url).start();
    actix::spawn(link::maintain(agent.clone(), head_url, token));
    Ok(NodeHandle { agent, logs })
}

impl NodeHandle {
    /// Drains (SIGTERM semantics) and stops.
    pub async fn drain_and_stop(self, deadline_ms: u64) {
        let (done, drained) = tokio::sync::oneshot::channel();
        if self.agent.send(BeginDrain { deadline_ms, done }).await.is_ok() {
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
