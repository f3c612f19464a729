//! The head daemon: `HeadActor` owns the core `Head` state machine, feeds it inputs from
//! clients (HTTP), agents (WebSocket sessions) and its timer, and carries out its effects —
//! messages to agents, events to followers — but only once what the same input changed is
//! durable (DU-1 in the core's `head/durable.rs`): each input's writes go to the store as one
//! batch, and its other effects wait until the store reports that batch committed. Batches
//! arriving while a commit is under way share the next one (group commit). A lone batch after
//! a quiet spell is committed on the actor's own thread before its effects (`commit_inline`):
//! waking the store thread and being woken by it again costs more than the write on an idle
//! machine. It holds no policy.
//!
//! HD-1: a stopping head changes nothing on its own. Once `Stopping` arrives its timer is off
//! and a closed agent channel is not a lost link, so no node is declared DEAD and nothing is
//! charged because the head itself went away; the next head learns what happened meanwhile
//! from the agents (DESIGN §10).

mod agents;
mod api;
mod dashboard;
mod disruption;
mod messages;
mod metrics;
mod store;

pub use api::{
    serve, HeadServer, ServeError, ServeOptions, EVENTS_KEEPALIVE_MS, KEEPALIVE_HEADER, MAX_BODY_BYTES,
    NEXT_BEFORE_HEADER,
};
pub use messages::*;
pub use store::{StoreError, DATABASE};

use actix::prelude::*;
use bytes::Bytes;
use ftdrive::event::{Event, EventLine, JobEvent, StreamLine};
use ftdrive::head::{Durable, DurableState, Effect, Head, Input, Rejected, Reply};
use ftdrive::protocol::{StartSpec, ToAgent};
use ftdrive::view::JobView;
use ftdrive::{HeadConfig, Instant, JobId, NodeId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;
use store::{Batch, Commit, Store, Write};
use tokio::sync::oneshot;

/// A request the API could not satisfy, by HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    /// Valid, but the state of what it names does not allow it (409).
    #[error("{0}")]
    Conflict(String),
    /// A body over a bound (413).
    #[error("{0}")]
    TooLarge(String),
    /// Over a bound on concurrent use, such as event followers or jobs held (429).
    #[error("{0}")]
    TooMany(String),
    /// What the request needs cannot be reached now: an agent (502).
    #[error("{0}")]
    Unavailable(String),
    /// The head is stopping, its state database having failed it: nothing was changed, and a
    /// client may ask again once it is back (503).
    #[error("{0}")]
    Stopping(String),
    #[error("{0}")]
    Internal(String),
}

impl From<Rejected> for ApiError {
    fn from(r: Rejected) -> Self {
        match r {
            Rejected::UnknownJob(_)
            | Rejected::ForgottenJob { .. }
            | Rejected::UnknownNode(_)
            | Rejected::NoSuchNode(_) => ApiError::NotFound(r.to_string()),
            Rejected::LeavingNode(_) | Rejected::NotDead(..) => ApiError::Conflict(r.to_string()),
            // A bound that passes as jobs end and are forgotten: the same spec may be taken later.
            Rejected::TooManyJobs(_) | Rejected::TooManyActors { .. } => ApiError::TooMany(r.to_string()),
            _ => ApiError::BadRequest(r.to_string()),
        }
    }
}

/// An agent's log (and metrics) server as its registration gave it, and the token made for
/// the head's requests there in that session.
struct LogServer {
    url: String,
    token: String,
}

struct Session {
    id: u64,
    tx: tokio::sync::mpsc::Sender<ToAgent>,
    /// The registration's identity secret: the same agent may take its name over.
    identity: String,
    /// When this session's last heartbeat arrived (the lag metric's reference).
    last_heartbeat: Option<std::time::Instant>,
}

/// Someone following events: all of them, or one job's (ends when the job ends).
struct Follower {
    job: Option<JobId>,
    tx: tokio::sync::mpsc::Sender<Bytes>,
}

/// A batch is committed on the actor's thread only after the store was quiet this long...
const INLINE_AFTER_QUIET: Duration = Duration::from_millis(2);
/// ...and only if the last commit took less than this (a slow disk stays on its thread).
const INLINE_MAX_COMMIT: Duration = Duration::from_millis(5);

/// Whether the store has been quiet since a quick last commit (see `commit_inline`).
fn store_quiet(last_commit: Option<(std::time::Instant, Duration)>, now: std::time::Instant) -> bool {
    last_commit.is_none_or(|(at, took)| now.duration_since(at) >= INLINE_AFTER_QUIET && took < INLINE_MAX_COMMIT)
}

/// Most event followers at once; one more is refused with 429.
pub const MAX_FOLLOWERS: usize = 1_024;
/// Lines queued for one follower; a follower that falls this far behind is dropped with an
/// error line (its memory is bounded, and the head never waits for it).
pub const FOLLOWER_QUEUE_LINES: usize = 4_096;

impl Follower {
    /// Queues `line`; false when the follower is gone, or was too slow and has been told so.
    fn offer(&self, line: &Bytes) -> bool {
        match self.tx.capacity() {
            0 => false,
            1 => {
                let error =
                    format!("this follower fell {FOLLOWER_QUEUE_LINES} lines behind and was dropped; follow again");
                let _ = self.tx.try_send(Bytes::from(StreamLine::Error(error).to_json() + "\n"));
                false
            }
            _ => self.tx.try_send(line.clone()).is_ok(),
        }
    }
}

/// The effects of one input, held until its writes (and every earlier batch) are durable.
struct Held {
    upto: u64,
    effects: Vec<Effect>,
    waiters: Vec<oneshot::Sender<Result<(), String>>>,
}

pub struct HeadActor {
    head: Head,
    /// `now` is Unix time in milliseconds: durable deadlines mean the same after a restart.
    clock_base_ms: u64,
    clock: std::time::Instant,
    sessions: BTreeMap<NodeId, Session>,
    /// Agent sessions refused as another cluster's, while they last: not answered again.
    foreign_sessions: BTreeSet<u64>,
    /// The digest of the identity each node's agent last registered with (`admit`, AI-1),
    /// kept in the state database so that it holds across head restarts.
    identities: BTreeMap<NodeId, String>,
    /// The log and metrics server each node's agent last registered with (`admit`), kept in
    /// the state database: a DEAD node stays a scrape target after a head restart.
    log_urls: BTreeMap<NodeId, String>,
    /// The final snapshot of each followed job that ended in a step whose events wait for
    /// their commit: by the time they go out a later step may have forgotten the job
    /// (`--retain-finished 0`), and its followers waited for an end that never came.
    final_snapshots: BTreeMap<JobId, Bytes>,
    /// Each connected agent's log server, and the token its session was given for it.
    log_servers: BTreeMap<NodeId, LogServer>,
    followers: Vec<Follower>,
    store: Store,
    /// Ledger entries written so far, per job (only new ones are written).
    ledger_written: BTreeMap<JobId, usize>,
    batches: u64,
    committed: u64,
    /// Transactions committed (each one sync): batches per commit is the group commit's gain.
    commits: u64,
    /// When the last commit ended, and how long it took.
    last_commit: Option<(std::time::Instant, Duration)>,
    held: VecDeque<Held>,
    /// A write failed: the head answers with errors until it stops.
    failed: Option<String>,
    /// The head is stopping (HD-1).
    stopping: bool,
    timer: Option<(Instant, SpawnHandle)>,
    /// After a stall of this process, timeouts wait until then, so that the heartbeats queued
    /// meanwhile are read before any node is declared DEAD.
    stalled_until: Option<Instant>,
    /// When this process last noted that it runs (`note_awake`), and when it last deferred
    /// timeouts for a stall.
    last_awake: Instant,
    last_deferral: Option<Instant>,
    /// A restarted head waits for its agents (DU-3); when that ends, followers of jobs still
    /// going get a fresh snapshot, since a reason they were shown may be stale.
    recovering: bool,
    /// Nodes held through a disruption (FD-1) after the last input, to log its start and end.
    nodes_held: usize,
    metrics: metrics::HeadMetrics,
}

impl HeadActor {
    /// A head over `store`, rebuilt from what it read (`Head::restore`): running jobs are
    /// re-adopted as their agents report, finished ones kept for `status`.
    fn new(config: HeadConfig, store: Store, state: DurableState, first_job_number: u64) -> HeadActor {
        let ledger_written = state.jobs.iter().map(|j| (j.driver.id().clone(), j.ledger.len())).collect();
        let clock_base_ms = crate::paths::unix_ms();
        let restored = !state.jobs.is_empty() || !state.nodes.is_empty();
        let mut head = Head::restore(config, state, Instant::from_ms(clock_base_ms));
        head.start_job_ids_at(first_job_number);
        if restored {
            tracing::info!(
                "restored {} job(s); waiting up to {} ms for the agents to report before placing anything",
                head.job_views().len(),
                head.config().node_timeout_ms
            );
        }
        let metrics = metrics::HeadMetrics::new(head.config().heartbeat_interval_ms);
        HeadActor {
            metrics,
            head,
            clock_base_ms,
            clock: std::time::Instant::now(),
            sessions: BTreeMap::new(),
            foreign_sessions: BTreeSet::new(),
            identities: store.identities().iter().map(|(n, d)| (NodeId::from(n.as_str()), d.clone())).collect(),
            log_urls: store.log_urls().iter().map(|(n, u)| (NodeId::from(n.as_str()), u.clone())).collect(),
            final_snapshots: BTreeMap::new(),
            log_servers: BTreeMap::new(),
            followers: Vec::new(),
            store,
            ledger_written,
            batches: 0,
            committed: 0,
            commits: 0,
            last_commit: None,
            held: VecDeque::new(),
            failed: None,
            stopping: false,
            timer: None,
            stalled_until: None,
            last_awake: Instant::from_ms(clock_base_ms),
            last_deferral: None,
            recovering: restored,
            nodes_held: 0,
        }
    }

    fn now(&self) -> Instant {
        Instant::from_ms(self.clock_base_ms + self.clock.elapsed().as_millis() as u64)
    }

    fn input(&mut self, input: Input, ctx: &mut Context<Self>) -> Result<Reply, Rejected> {
        let result = self.head.handle(self.now(), input);
        self.carry_out(ctx);
        result
    }

    /// Writes what the input changed as one batch; carries out its other effects at once if
    /// nothing is waiting to be durable, else once it is.
    fn carry_out(&mut self, ctx: &mut Context<Self>) {
        let mut effects = Vec::new();
        let mut writes = Vec::new();
        while let Some(effect) = self.head.poll_effect() {
            match effect {
                Effect::Persist(durable) => writes.extend(self.write_for(durable)),
                Effect::Send { msg: ToAgent::Start(spec), node } => {
                    writes.extend(self.attempt_row(&spec));
                    effects.push(Effect::Send { msg: ToAgent::Start(spec), node });
                }
                other => {
                    self.keep_final_snapshot(&other);
                    effects.push(other);
                }
            }
        }
        let mut failed = None;
        if !writes.is_empty() {
            self.batches += 1;
            let batch = Batch { seq: self.batches, writes };
            if self.commit_inline() {
                failed = self.write_now(batch).err();
            } else {
                self.store.write(batch);
            }
        }
        if self.committed == self.batches && self.held.is_empty() {
            self.execute(effects);
        } else if !effects.is_empty() {
            self.held.push_back(Held { upto: self.batches, effects, waiters: Vec::new() });
        }
        if let Some(error) = failed {
            self.write_failed(error, ctx);
        }
        self.note_recovery_over();
        self.note_disruption();
        self.arm_timer(ctx);
    }

    /// Logs the start and the end of a disruption hold (FD-1).
    fn note_disruption(&mut self) {
        let counts = self.head.nodes_held();
        let was = std::mem::replace(&mut self.nodes_held, counts.0);
        match disruption::note(was, counts, self.head.config()) {
            Some(disruption::Note::Began(line)) => tracing::warn!("{line}"),
            Some(disruption::Note::Ended(line)) => tracing::info!("{line}"),
            None => {}
        }
    }

    /// The head's wait for its agents ended: every follower of a job that has not ended is
    /// told where the job stands now, in place of "waiting for the agents to report". Only
    /// once what the head did meanwhile is durable and its events are out: a follower never
    /// sees what a crash could still undo, nor a snapshot ahead of the events it sums up.
    fn note_recovery_over(&mut self) {
        if !self.recovering || self.head.recovering() || !self.held.is_empty() {
            return;
        }
        self.recovering = false;
        tracing::info!("every known node reported or the window closed: placing again");
        let jobs: BTreeSet<JobId> = self.followers.iter().filter_map(|f| f.job.clone()).collect();
        for job in jobs {
            let Some(line) = self.head.job_view(&job).filter(|v| !v.state.is_terminal()).map(|v| snapshot_line(&v))
            else {
                continue;
            };
            self.followers.retain(|f| f.job.as_ref() != Some(&job) || f.offer(&line));
        }
    }

    /// Whether to commit the batch just made here: it is the only one not yet durable, the
    /// store has been quiet for `INLINE_AFTER_QUIET`, and its last commit was quick — so that
    /// a burst still shares the writer thread's commits, and a slow disk never blocks the
    /// actor twice in a row.
    fn commit_inline(&self) -> bool {
        let alone = self.failed.is_none() && self.committed + 1 == self.batches && self.held.is_empty();
        alone && store_quiet(self.last_commit, std::time::Instant::now())
    }

    fn write_now(&mut self, batch: Batch) -> Result<(), String> {
        let started = std::time::Instant::now();
        self.store.write_now(batch)?;
        self.committed = self.batches;
        self.commits += 1;
        self.last_commit = Some((std::time::Instant::now(), started.elapsed()));
        Ok(())
    }

    /// Resolves once everything done so far is durable.
    fn when_durable(&mut self) -> impl std::future::Future<Output = Result<(), String>> + use<> {
        let (tx, rx) = oneshot::channel();
        match (&self.failed, self.committed == self.batches && self.held.is_empty()) {
            (Some(error), _) => {
                let _ = tx.send(Err(error.clone()));
            }
            (None, true) => {
                let _ = tx.send(Ok(()));
            }
            (None, false) => {
                if self.held.back().is_none_or(|h| h.upto < self.batches) {
                    self.held.push_back(Held { upto: self.batches, effects: Vec::new(), waiters: Vec::new() });
                }
                self.held.back_mut().expect("just ensured").waiters.push(tx);
            }
        }
        async move { rx.await.unwrap_or_else(|_| Err("the head stopped".into())) }
    }

    fn committed(&mut self, commit: Commit, ctx: &mut Context<Self>) {
        match commit {
            Commit::Done { upto, took } => {
                // A batch commits on this thread only when every earlier one is reported.
                assert!(upto > self.committed, "commit reports in order: {upto} after {}", self.committed);
                self.committed = upto;
                self.commits += 1;
                self.last_commit = Some((std::time::Instant::now(), took));
                while self.held.front().is_some_and(|h| h.upto <= upto) {
                    let held = self.held.pop_front().expect("just checked");
                    self.execute(held.effects);
                    for waiter in held.waiters {
                        let _ = waiter.send(Ok(()));
                    }
                }
                self.note_recovery_over();
            }
            Commit::Failed { error } => self.write_failed(error, ctx),
        }
    }

    /// Nothing acknowledged may be lost: answer what waits with the error, and stop. Started
    /// again, the head recovers from what is durable.
    fn write_failed(&mut self, error: String, ctx: &mut Context<Self>) {
        let path = self.store.path();
        // SQLite words a read-only disk as an I/O error: the dir's own write says which.
        let dir = path.parent().unwrap_or(path);
        let why = match crate::paths::check_writable(dir) {
            Err(e) => format!("{error} ({} takes no write: {e})", dir.display()),
            Ok(()) => error,
        };
        let message = format!(
            "cannot write the state database {}: {why}; the head stops so that nothing is acknowledged that is \
             not durable (nothing acknowledged is lost): make the state dir writable, with room on its disk, and \
             start the head again",
            path.display()
        );
        tracing::error!("{message}");
        for held in self.held.drain(..) {
            for waiter in held.waiters {
                let _ = waiter.send(Err(message.clone()));
            }
        }
        self.failed = Some(message);
        ctx.run_later(Duration::from_millis(200), |_, _| std::process::exit(1));
    }

    /// A full queue unbinds the session (see `agents::SESSION_QUEUE_MESSAGES`): the agent's
    /// next message is refused, it registers again and the heartbeats reconcile the rest.
    fn send_to(&mut self, node: &NodeId, msg: ToAgent) {
        let Some(session) = self.sessions.get(node) else { return };
        if let Err(tokio::sync::mpsc::error::TrySendError::Full(_)) = session.tx.try_send(msg) {
            tracing::warn!(
                "node {node}: its agent fell behind by {} messages; it must register again",
                agents::SESSION_QUEUE_MESSAGES
            );
            self.sessions.remove(node);
        }
    }

    fn execute(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Send { node, msg } => self.send_to(&node, msg),
                Effect::Notify(event) => self.notify(event),
                Effect::Persist(_) => unreachable!("writes are taken out before"),
            }
        }
    }

    // ---- what is written -------------------------------------------------------------------

    fn write_for(&mut self, durable: Durable) -> Option<Write> {
        match durable {
            Durable::Counters => Some(Write::Counters(self.head.counters())),
            Durable::Node(name) => {
                let record = self.head.node_record(&name)?;
                Some(Write::Node {
                    record: serde_json::to_string(&record).expect("serializes"),
                    identity: self.identities.get(&name).cloned(),
                    log_url: self.log_urls.get(&name).cloned(),
                    name: name.to_string(),
                })
            }
            Durable::Forgotten { id, pg } => {
                self.ledger_written.remove(&id);
                Some(Write::Forget { pg })
            }
            Durable::ForgottenNode(name) => {
                self.identities.remove(&name);
                self.log_urls.remove(&name);
                Some(Write::ForgetNode { name: name.to_string() })
            }
            Durable::Job(id) => self.job_write(&id),
        }
    }

    fn job_write(&mut self, id: &JobId) -> Option<Write> {
        let record = self.head.job_record(id)?;
        let written = self.ledger_written.get(id).copied();
        let first = written.is_none();
        let from = written.unwrap_or(0);
        let ledger = (from..record.ledger.len())
            .map(|seq| (seq, serde_json::to_string(&record.ledger[seq]).expect("entries serialize")))
            .collect();
        let driver = record.driver;
        let write = Write::Job {
            id: id.to_string(),
            pg: record.pg,
            spec: first.then(|| serde_json::to_string(record.spec).expect("specs serialize")),
            state: driver.state().to_string(),
            submit_ms: driver.submitted().as_ms(),
            finished_ms: driver.finished_at().map(Instant::as_ms),
            driver: serde_json::to_string(driver).expect("drivers serialize"),
            ledger,
        };
        self.ledger_written.insert(id.clone(), record.ledger.len());
        Some(write)
    }

    /// The history row of an attempt being started.
    fn attempt_row(&self, spec: &StartSpec) -> Option<Write> {
        let key = &spec.key;
        let record = self.head.job_record(&key.job)?;
        let actor = record.driver.actors().get(key.actor as usize)?;
        let run = actor.run.as_ref().filter(|r| r.attempt == key.attempt && r.cycle == key.cycle)?;
        Some(Write::Attempt {
            pg: record.pg,
            actor: key.actor,
            attempt: key.attempt,
            cycle: key.cycle,
            node: run.node.to_string(),
            rank: run.rank,
            port: run.port,
            start_ms: run.started.as_ms(),
        })
    }

    // ---- followers and timers --------------------------------------------------------------

    fn notify(&mut self, event: Event) {
        log_event(&event);
        self.metrics.observe_event(&event, std::time::Instant::now());
        let ended = match &event {
            Event::Job { job, detail: JobEvent::JobState { to, .. } } if to.is_terminal() => Some(job.clone()),
            _ => None,
        };
        if self.followers.is_empty() {
            // Its followers left meanwhile: the snapshot kept for them goes too.
            if let Some(job) = &ended {
                self.final_snapshots.remove(job);
            }
            return; // no line to build: most events of a busy head have no follower
        }
        let job = event.job().cloned();
        let line = Bytes::from(StreamLine::Event(EventLine::new(self.now(), event)).to_json() + "\n");
        self.followers.retain(|f| match (&f.job, &job) {
            (None, _) => f.offer(&line),
            (Some(want), Some(got)) if want == got => f.offer(&line),
            _ => !f.tx.is_closed(),
        });
        if let Some(job) = ended {
            self.end_followers(&job);
        }
    }

    /// A job's end, as the step that ended it leaves it, for its followers (`final_snapshots`).
    fn keep_final_snapshot(&mut self, effect: &Effect) {
        let Effect::Notify(Event::Job { job, detail: JobEvent::JobState { to, .. } }) = effect else { return };
        if !to.is_terminal() || !self.followers.iter().any(|f| f.job.as_ref() == Some(job)) {
            return; // the view is the costly part, and most jobs end with no one following them
        }
        if let Some(view) = self.head.job_view(job) {
            self.final_snapshots.insert(job.clone(), snapshot_line(&view));
        }
    }

    /// A job ended: its followers get a final snapshot and their stream closes.
    fn end_followers(&mut self, job: &JobId) {
        let kept = self.final_snapshots.remove(job);
        if !self.followers.iter().any(|f| f.job.as_ref() == Some(job)) {
            return;
        }
        // Gone and not kept (followed after it ended): the stream ends all the same, and its
        // follower hears the job was forgotten when it asks again, rather than wait for ever.
        let last = kept.or_else(|| self.head.job_view(job).map(|view| snapshot_line(&view)));
        self.followers.retain(|f| {
            if f.job.as_ref() == Some(job) {
                if let Some(last) = &last {
                    let _ = f.offer(last);
                }
                false
            } else {
                true
            }
        });
    }

    fn arm_timer(&mut self, ctx: &mut Context<Self>) {
        let wanted = self.head.poll_timeout().map(|at| self.stalled_until.map_or(at, |until| at.max(until)));
        // HD-1: no timeout of a stopping head.
        let wanted = wanted.filter(|_| !self.stopping);
        if self.timer.as_ref().map(|(at, _)| *at) == wanted {
            return;
        }
        if let Some((_, handle)) = self.timer.take() {
            ctx.cancel_future(handle);
        }
        if let Some(at) = wanted {
            let delay = Duration::from_millis(at.ms_since(self.now()));
            let handle = ctx.run_later(delay, |act, ctx| act.timer_fired(ctx));
            self.timer = Some((at, handle));
        }
    }

    /// The timer fired: unless this process was just stalled, timeouts are due.
    fn timer_fired(&mut self, ctx: &mut Context<Self>) {
        self.timer = None;
        self.note_awake(ctx);
        let now = self.now();
        if self.stalled_until.is_some_and(|until| now < until) {
            self.arm_timer(ctx);
            return;
        }
        self.stalled_until = None;
        self.head.handle_timeout(now);
        self.carry_out(ctx);
    }

    /// Run every quarter heartbeat interval, and when a timer fires. A gap since the last run
    /// of over a heartbeat interval means this process was stalled (stopped, starved, swapped):
    /// every agent's heartbeats from meanwhile sit unread in their sockets, and expiring nodes
    /// now would declare a live fleet DEAD. So timeouts wait one heartbeat interval while those
    /// are read; only nodes still silent then expire. A timer's own lateness is no measure: a
    /// stall that began just after a heartbeat and lasted the node timeout ends when the nodes
    /// fall due. At most one deferral per node timeout, so that a head stalling over and over
    /// still declares a dead node DEAD.
    fn note_awake(&mut self, ctx: &mut Context<Self>) {
        let now = self.now();
        let gap_ms = now.ms_since(self.last_awake);
        self.last_awake = now;
        let config = self.head.config();
        let (interval_ms, timeout_ms) = (config.heartbeat_interval_ms, config.node_timeout_ms);
        let deferred_lately = self.last_deferral.is_some_and(|at| now.ms_since(at) < timeout_ms);
        if gap_ms <= interval_ms || deferred_lately {
            return;
        }
        tracing::warn!("the head was stalled for {gap_ms} ms; reading agents' reports before any timeout");
        self.stalled_until = Some(now.plus_ms(interval_ms));
        self.last_deferral = Some(now);
        self.arm_timer(ctx);
    }

    fn view(&self, job: &JobId) -> Option<JobView> {
        self.head.job_view(job)
    }

    /// 404 for a job the head does not have, saying whether it ever had it.
    fn no_job(&self, job: &JobId) -> ApiError {
        ApiError::NotFound(self.head.no_job(job.clone()).to_string())
    }
}

impl Actor for HeadActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.last_awake = self.now();
        let tick = Duration::from_millis(self.head.config().heartbeat_interval_ms / 4).max(Duration::from_millis(1));
        ctx.run_interval(tick, |act, ctx| act.note_awake(ctx));
        self.carry_out(ctx);
    }
}

/// The store's commit reports, in order.
#[derive(Message)]
#[rtype(result = "()")]
struct Committed(Commit);

impl Handler<Committed> for HeadActor {
    type Result = ();
    fn handle(&mut self, Committed(commit): Committed, ctx: &mut Context<Self>) {
        self.committed(commit, ctx);
    }
}

fn snapshot_line(view: &JobView) -> Bytes {
    Bytes::from(StreamLine::Snapshot(Box::new(view.clone())).to_json() + "\n")
}

fn log_event(event: &Event) {
    match event {
        Event::NodeState { node, state, evidence } => tracing::info!("node {node} {state:?}: {evidence}"),
        Event::AgentRestarted { node, reattached, lost, reconfigured } => {
            let offer = if *reconfigured { " with other resources or labels" } else { "" };
            tracing::info!("node {node}: agent restarted{offer}, re-attached to {reattached} attempt(s), {lost} gone")
        }
        Event::NodeForgotten { node, evidence } => tracing::info!("node {node} {evidence}"),
        Event::NodeHealth { node, problem: Some(problem) } => {
            tracing::warn!("node {node} is given no new work: {problem}")
        }
        Event::NodeHealth { node, problem: None } => tracing::info!("node {node} can start work again"),
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

/// Starts the head actor over an opened store; commit reports reach it through `commits`.
pub(super) fn start_actor(
    config: HeadConfig,
    store: Store,
    state: DurableState,
    first_job_number: u64,
    commits: tokio::sync::mpsc::UnboundedReceiver<Commit>,
) -> Addr<HeadActor> {
    let actor = HeadActor::new(config, store, state, first_job_number);
    HeadActor::create(move |ctx| {
        let stream =
            futures_util::stream::unfold(commits, |mut rx| async move { rx.recv().await.map(|c| (Committed(c), rx)) });
        ctx.add_message_stream(stream);
        actor
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_lone_write_commits_inline_only_after_a_quiet_spell_and_a_quick_commit() {
        let ended = Instant::now();
        let quick = Duration::from_micros(300);
        assert!(store_quiet(None, ended), "nothing written yet");
        assert!(!store_quiet(Some((ended, quick)), ended), "a burst shares the writer thread's commits");
        assert!(store_quiet(Some((ended, quick)), ended + INLINE_AFTER_QUIET));
        let slow = INLINE_MAX_COMMIT;
        assert!(!store_quiet(Some((ended, slow)), ended + Duration::from_secs(60)), "a slow disk stays on its thread");
    }

    /// A follower that does not read is told, in its last queued line, that it was dropped, and
    /// is offered nothing more: the head's memory for it stays bounded.
    #[test]
    fn a_follower_that_falls_a_queue_behind_is_told_and_dropped() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(FOLLOWER_QUEUE_LINES);
        let follower = Follower { job: None, tx };
        let line = Bytes::from_static(b"{}\n");
        let taken = (0..FOLLOWER_QUEUE_LINES + 10).take_while(|_| follower.offer(&line)).count();
        assert_eq!(taken, FOLLOWER_QUEUE_LINES - 1, "the last place is the error line's");
        assert!(!follower.offer(&line), "a dropped follower stays dropped");
        let mut lines = Vec::new();
        while let Ok(line) = rx.try_recv() {
            lines.push(line);
        }
        assert_eq!(lines.len(), FOLLOWER_QUEUE_LINES);
        let last = String::from_utf8(lines.pop().unwrap().to_vec()).unwrap();
        assert!(last.contains("this follower fell 4096 lines behind and was dropped; follow again"), "{last}");
    }
}
