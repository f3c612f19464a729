//! The head daemon: `HeadActor` owns the core `Head` state machine, feeds it inputs from
//! clients (HTTP), agents (WebSocket sessions) and its timer, and carries out its effects —
//! messages to agents, events to followers, job records to disk. It holds no policy.

mod agents;
mod api;
mod store;

pub use api::{serve, HeadServer, ServeOptions};

use actix::prelude::*;
use bytes::Bytes;
use ftdrive::driver::JobHistory;
use ftdrive::event::{Event, EventLine, JobEvent, StreamLine};
use ftdrive::head::{Effect, Head, Input, Rejected, Reply};
use ftdrive::protocol::{ToAgent, ToHead};
use ftdrive::spec::JobSpec;
use ftdrive::view::{JobView, NodeView};
use ftdrive::{HeadConfig, Instant, JobId, NodeId};
use std::collections::BTreeMap;
use std::time::Duration;
use store::{JobRecord, Store};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// A request the API could not satisfy, by HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

impl From<Rejected> for ApiError {
    fn from(r: Rejected) -> Self {
        match r {
            Rejected::UnknownJob(_) | Rejected::UnknownNode(_) => ApiError::NotFound(r.to_string()),
            _ => ApiError::BadRequest(r.to_string()),
        }
    }
}

struct Session {
    id: u64,
    tx: UnboundedSender<ToAgent>,
}

/// Someone following events: all of them, or one job's (ends when the job ends).
struct Follower {
    job: Option<JobId>,
    tx: UnboundedSender<Bytes>,
}

pub struct HeadActor {
    head: Head,
    epoch: std::time::Instant,
    sessions: BTreeMap<NodeId, Session>,
    log_urls: BTreeMap<NodeId, String>,
    followers: Vec<Follower>,
    store: Store,
    /// Jobs finished before this head started, as they were recorded.
    archive: BTreeMap<JobId, JobRecord>,
    timer: Option<(Instant, SpawnHandle)>,
}

impl HeadActor {
    /// A head over `store`: finished jobs from an earlier run are kept for `status`; jobs that
    /// were accepted but had not finished run again under their ids.
    pub fn new(config: HeadConfig, store: Store, first_job_number: u64) -> HeadActor {
        let records = store.load_all();
        let mut head = Head::new(config);
        head.start_job_ids_at(first_job_number);
        let mut actor = HeadActor {
            head,
            epoch: std::time::Instant::now(),
            sessions: BTreeMap::new(),
            log_urls: BTreeMap::new(),
            followers: Vec::new(),
            store,
            archive: BTreeMap::new(),
            timer: None,
        };
        for record in records {
            let id = JobId::new(&record.view.id);
            actor.head.note_job_id(&id);
            if record.view.state.is_terminal() {
                actor.archive.insert(id, record);
            } else {
                tracing::info!("job {id} was accepted before a restart; taking it up again");
                let view = &record.view;
                let history = JobHistory {
                    attempts: view.actors.iter().map(|a| a.attempt).collect(),
                    cycle: view.cycles,
                    ledger: view.ledger.clone(),
                    remaining: view.remaining,
                };
                let input = Input::Resume { id: id.clone(), spec: Box::new(record.spec), history: Box::new(history) };
                if let Err(e) = actor.head.handle(Instant::ZERO, input) {
                    tracing::error!("could not resume job {id}: {e}");
                }
            }
        }
        actor
    }

    fn now(&self) -> Instant {
        Instant::from_ms(self.epoch.elapsed().as_millis() as u64)
    }

    fn input(&mut self, input: Input, ctx: &mut Context<Self>) -> Result<Reply, Rejected> {
        let result = self.head.handle(self.now(), input);
        self.carry_out(ctx);
        result
    }

    /// Executes every pending effect, then re-arms the timer for the head's next deadline.
    fn carry_out(&mut self, ctx: &mut Context<Self>) {
        while let Some(effect) = self.head.poll_effect() {
            match effect {
                Effect::Send { node, msg } => {
                    if let Some(session) = self.sessions.get(&node) {
                        let _ = session.tx.send(msg);
                    }
                }
                Effect::Notify(event) => self.notify(event),
                Effect::Persist { job } => self.persist(&job),
            }
        }
        self.arm_timer(ctx);
    }

    fn notify(&mut self, event: Event) {
        log_event(&event);
        let job = event.job().cloned();
        let ended = match &event {
            Event::Job { job, detail: JobEvent::JobState { to, .. } } if to.is_terminal() => Some(job.clone()),
            _ => None,
        };
        let line = Bytes::from(StreamLine::Event(EventLine::new(self.now(), event)).to_json() + "\n");
        self.followers.retain(|f| match (&f.job, &job) {
            (None, _) => f.tx.send(line.clone()).is_ok(),
            (Some(want), Some(got)) if want == got => f.tx.send(line.clone()).is_ok(),
            _ => !f.tx.is_closed(),
        });
        if let Some(job) = ended {
            self.end_followers(&job);
        }
    }

    /// A job ended: its followers get a final snapshot and their stream closes.
    fn end_followers(&mut self, job: &JobId) {
        let Some(view) = self.head.job_view(job) else { return };
        let last = snapshot_line(&view);
        self.followers.retain(|f| {
            if f.job.as_ref() == Some(job) {
                let _ = f.tx.send(last.clone());
                false
            } else {
                true
            }
        });
    }

    fn persist(&mut self, job: &JobId) {
        let (Some(driver), Some(view)) = (self.head.driver(job), self.head.job_view(job)) else { return };
        let record = JobRecord { spec: driver.spec().clone(), view };
        if let Err(e) = self.store.save(job, &record) {
            tracing::error!("could not write the record of job {job}: {e}");
        }
    }

    fn arm_timer(&mut self, ctx: &mut Context<Self>) {
        let wanted = self.head.poll_timeout();
        if self.timer.as_ref().map(|(at, _)| *at) == wanted {
            return;
        }
        if let Some((_, handle)) = self.timer.take() {
            ctx.cancel_future(handle);
        }
        if let Some(at) = wanted {
            let delay = Duration::from_millis(at.ms_since(self.now()));
            let handle = ctx.run_later(delay, |act, ctx| {
                act.timer = None;
                let now = act.now();
                act.head.handle_timeout(now);
                act.carry_out(ctx);
            });
            self.timer = Some((at, handle));
        }
    }

    fn view(&self, job: &JobId) -> Option<JobView> {
        self.head.job_view(job).or_else(|| self.archive.get(job).map(|r| r.view.clone()))
    }
}

impl Actor for HeadActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.carry_out(ctx);
    }
}

fn snapshot_line(view: &JobView) -> Bytes {
    Bytes::from(StreamLine::Snapshot(Box::new(view.clone())).to_json() + "\n")
}

fn log_event(event: &Event) {
    match event {
        Event::NodeState { node, state, evidence } => tracing::info!("node {node} {state:?}: {evidence}"),
        Event::Job { job, detail: JobEvent::JobState { to, message, .. } } => {
            tracing::info!("job {job} {to}{}", message.as_ref().map(|m| format!(": {m}")).unwrap_or_default())
        }
        Event::Job { job, detail: JobEvent::Ledger { entry } } => {
            tracing::info!(
                "job {job}: {} attempt {} ended {} ({}): {}",
                entry.actor,
                entry.attempt,
                entry.cause,
                entry.budget,
                entry.evidence
            )
        }
        _ => tracing::debug!("{event:?}"),
    }
}

// ---- messages -------------------------------------------------------------------------

/// Submit a validated spec.
#[derive(Message)]
#[rtype(result = "Result<JobView, ApiError>")]
pub struct Submit {
    pub spec: JobSpec,
}

impl Handler<Submit> for HeadActor {
    type Result = Result<JobView, ApiError>;
    fn handle(&mut self, msg: Submit, ctx: &mut Context<Self>) -> Self::Result {
        let Reply::Submitted(id) = self.input(Input::Submit { id: None, spec: Box::new(msg.spec) }, ctx)? else {
            unreachable!("a submission is answered with its id")
        };
        Ok(self.head.job_view(&id).expect("just submitted"))
    }
}

#[derive(Message)]
#[rtype(result = "Result<JobView, ApiError>")]
pub struct Stop {
    pub job: JobId,
}

impl Handler<Stop> for HeadActor {
    type Result = Result<JobView, ApiError>;
    fn handle(&mut self, msg: Stop, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(view) = self.archive.get(&msg.job).map(|r| r.view.clone()) {
            return Ok(view);
        }
        self.input(Input::Stop { job: msg.job.clone() }, ctx)?;
        self.view(&msg.job).ok_or_else(|| ApiError::NotFound(format!("no job `{}`", msg.job)))
    }
}

#[derive(Message)]
#[rtype(result = "Result<(), ApiError>")]
pub struct Drain {
    pub node: NodeId,
    pub deadline_ms: u64,
}

impl Handler<Drain> for HeadActor {
    type Result = Result<(), ApiError>;
    fn handle(&mut self, msg: Drain, ctx: &mut Context<Self>) -> Self::Result {
        self.input(Input::PreemptionNotice { node: msg.node, deadline_ms: msg.deadline_ms }, ctx)?;
        Ok(())
    }
}

/// One job's view, or every job's.
#[derive(Message)]
#[rtype(result = "Result<Vec<JobView>, ApiError>")]
pub struct Jobs {
    pub job: Option<JobId>,
}

impl Handler<Jobs> for HeadActor {
    type Result = Result<Vec<JobView>, ApiError>;
    fn handle(&mut self, msg: Jobs, _: &mut Context<Self>) -> Self::Result {
        match msg.job {
            Some(job) => self
                .view(&job)
                .map(|v| vec![v])
                .ok_or_else(|| ApiError::NotFound(format!("no job `{job}`; `ftdrive status` lists the jobs"))),
            None => {
                let mut views: Vec<JobView> = self.archive.values().map(|r| r.view.clone()).collect();
                views.extend(self.head.job_views());
                Ok(views)
            }
        }
    }
}

#[derive(Message)]
#[rtype(result = "Vec<NodeView>")]
pub struct Nodes;

impl Handler<Nodes> for HeadActor {
    type Result = Vec<NodeView>;
    fn handle(&mut self, _: Nodes, _: &mut Context<Self>) -> Self::Result {
        self.head.node_views()
    }
}

/// Subscribe to events (one job's, or all). Returns the job's current view first.
#[derive(Message)]
#[rtype(result = "Result<(Option<JobView>, UnboundedReceiver<Bytes>), ApiError>")]
pub struct Follow {
    pub job: Option<JobId>,
}

impl Handler<Follow> for HeadActor {
    type Result = Result<(Option<JobView>, UnboundedReceiver<Bytes>), ApiError>;
    fn handle(&mut self, msg: Follow, _: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let snapshot = match &msg.job {
            Some(job) => {
                let view = self.view(job).ok_or_else(|| ApiError::NotFound(format!("no job `{job}`")))?;
                if view.state.is_terminal() {
                    drop(tx); // nothing more will happen: the stream is the snapshot alone
                    return Ok((Some(view), rx));
                }
                Some(view)
            }
            None => None,
        };
        self.followers.push(Follower { job: msg.job, tx });
        Ok((snapshot, rx))
    }
}

/// Where an attempt's log is served.
#[derive(Message)]
#[rtype(result = "Result<LogSource, ApiError>")]
pub struct LocateLog {
    pub job: JobId,
    pub actor: u32,
    pub attempt: Option<u32>,
}

pub struct LogSource {
    pub url: String,
    pub node: String,
    pub attempt: u32,
    /// The attempt may still write to its log.
    pub running: bool,
}

impl Handler<LocateLog> for HeadActor {
    type Result = Result<LogSource, ApiError>;
    fn handle(&mut self, msg: LocateLog, _: &mut Context<Self>) -> Self::Result {
        let view = self.view(&msg.job).ok_or_else(|| ApiError::NotFound(format!("no job `{}`", msg.job)))?;
        let actor = view.actors.get(msg.actor as usize).ok_or_else(|| {
            ApiError::NotFound(format!(
                "job {} has actors 0..{}; there is no actor {}",
                msg.job,
                view.actors.len(),
                msg.actor
            ))
        })?;
        let attempt = msg.attempt.unwrap_or(actor.attempt);
        if attempt == 0 || attempt > actor.attempt {
            return Err(ApiError::NotFound(format!(
                "{} has run {} attempt(s); no attempt {attempt}",
                actor.name, actor.attempt
            )));
        }
        let ended = view.ledger.iter().find(|e| e.actor == actor.name && e.attempt == attempt);
        let node = match ended {
            Some(entry) => entry.node.clone(),
            None => actor
                .node
                .clone()
                .ok_or_else(|| ApiError::NotFound(format!("attempt {attempt} of {} has no node", actor.name)))?,
        };
        let base = self.log_urls.get(node.as_str()).ok_or_else(|| {
            ApiError::Unavailable(format!(
                "node {node} is not connected; attempt {attempt}'s log stays on that machine"
            ))
        })?;
        let url = format!("{base}/v1/logs/{}/{}/{attempt}", msg.job, msg.actor);
        let running = ended.is_none() && !view.state.is_terminal();
        Ok(LogSource { url, node, attempt, running })
    }
}

/// A message from an agent session.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FromAgent {
    pub session: u64,
    pub tx: UnboundedSender<ToAgent>,
    pub msg: ToHead,
}

impl Handler<FromAgent> for HeadActor {
    type Result = ();
    fn handle(&mut self, msg: FromAgent, ctx: &mut Context<Self>) {
        let node = msg.msg.node().clone();
        let register = matches!(msg.msg, ToHead::Register { .. });
        if let ToHead::Register { log_url, .. } = &msg.msg {
            self.sessions.insert(node.clone(), Session { id: msg.session, tx: msg.tx.clone() });
            self.log_urls.insert(node.clone(), log_url.clone());
        }
        match self.input(Input::from(msg.msg), ctx) {
            Ok(_) if register => {
                let config = self.head.config();
                let welcome = ToAgent::Welcome {
                    heartbeat_interval_ms: config.heartbeat_interval_ms,
                    node_timeout_ms: config.node_timeout_ms,
                };
                let _ = msg.tx.send(welcome);
            }
            Ok(_) => {}
            Err(e) => {
                let register_again = matches!(e, Rejected::UnknownNode(_));
                let _ = msg.tx.send(ToAgent::Refused { reason: e.to_string(), register_again });
            }
        }
    }
}

/// An agent session closed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AgentGone {
    pub session: u64,
    pub node: Option<NodeId>,
}

impl Handler<AgentGone> for HeadActor {
    type Result = ();
    fn handle(&mut self, msg: AgentGone, _: &mut Context<Self>) {
        if let Some(node) = msg.node {
            if self.sessions.get(&node).is_some_and(|s| s.id == msg.session) {
                self.sessions.remove(&node);
            }
        }
    }
}
