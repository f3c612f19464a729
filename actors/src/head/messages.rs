//! The messages `HeadActor` answers: one per API action, and the agent sessions' traffic. A
//! request that changes state is answered once the change is durable.

use super::{ApiError, Follower, HeadActor, Session};
use actix::prelude::*;
use bytes::Bytes;
use ftdrive::head::{Input, Rejected, Reply};
use ftdrive::protocol::{ToAgent, ToHead};
use ftdrive::scheduler::NodeState;
use ftdrive::spec::JobSpec;
use ftdrive::view::{JobView, NodeView};
use ftdrive::{JobId, NodeId};
use tokio::sync::mpsc::{Receiver, Sender};

impl HeadActor {
    /// Feeds a client's input; the answer (built now) is given once the change is durable.
    fn durable_answer<T: Send + 'static>(
        &mut self,
        input: Input,
        ctx: &mut Context<Self>,
        answer: impl FnOnce(&HeadActor, Reply) -> Result<T, ApiError>,
    ) -> ResponseFuture<Result<T, ApiError>> {
        if let Some(error) = &self.failed {
            let error = ApiError::Stopping(error.clone());
            return Box::pin(async move { Err(error) });
        }
        let answer = self.input(input, ctx).map_err(ApiError::from).and_then(|reply| answer(self, reply));
        let durable = self.when_durable();
        Box::pin(async move {
            let answer = answer?;
            durable.await.map_err(ApiError::Stopping)?;
            Ok(answer)
        })
    }
}

/// Submit a validated spec.
#[derive(Message)]
#[rtype(result = "Result<JobView, ApiError>")]
pub struct Submit {
    pub spec: JobSpec,
}

impl Handler<Submit> for HeadActor {
    type Result = ResponseFuture<Result<JobView, ApiError>>;
    fn handle(&mut self, msg: Submit, ctx: &mut Context<Self>) -> Self::Result {
        let input = Input::Submit { id: None, spec: Box::new(msg.spec) };
        self.durable_answer(input, ctx, |act, reply| match reply {
            Reply::Submitted(id) => Ok(act.document(&id).expect("just submitted")),
            Reply::Done => unreachable!("a submission is answered with its id"),
        })
    }
}

#[derive(Message)]
#[rtype(result = "Result<JobView, ApiError>")]
pub struct Stop {
    pub job: JobId,
}

impl Handler<Stop> for HeadActor {
    type Result = ResponseFuture<Result<JobView, ApiError>>;
    fn handle(&mut self, msg: Stop, ctx: &mut Context<Self>) -> Self::Result {
        let job = msg.job.clone();
        self.durable_answer(Input::Stop { job: msg.job }, ctx, move |act, _| {
            act.view(&job).ok_or_else(|| act.no_job(&job))
        })
    }
}

/// The operator's drain of a node; answers the node as it is then, and whether this drain
/// set its deadline (a node already DRAINING keeps the deadline it was first given).
#[derive(Message)]
#[rtype(result = "Result<(NodeView, bool), ApiError>")]
pub struct Drain {
    pub node: NodeId,
    pub deadline_ms: u64,
}

impl Handler<Drain> for HeadActor {
    type Result = ResponseFuture<Result<(NodeView, bool), ApiError>>;
    fn handle(&mut self, msg: Drain, ctx: &mut Context<Self>) -> Self::Result {
        let node = msg.node.clone();
        let was_alive = self.head.node_view(&node, self.now()).is_some_and(|v| v.state == NodeState::Alive);
        let input = Input::Drain { node: msg.node, deadline_ms: msg.deadline_ms };
        self.durable_answer(input, ctx, move |act, _| act.node_after(&node).map(|view| (view, was_alive)))
    }
}

/// Withdraw the operator's drain of a node; answers the node as it is then, and whether it is
/// gone: a DEAD node no longer cordoned may be forgotten at once by `--retain-dead-nodes`.
#[derive(Message)]
#[rtype(result = "Result<Undrained, ApiError>")]
pub struct Undrain {
    pub node: NodeId,
}

/// A node after `Undrain`: as it is now (as it was, where retention forgot it), and whether
/// there was an operator's drain to lift.
pub struct Undrained {
    pub view: NodeView,
    pub forgotten: bool,
    pub lifted: bool,
}

impl Handler<Undrain> for HeadActor {
    type Result = ResponseFuture<Result<Undrained, ApiError>>;
    fn handle(&mut self, msg: Undrain, ctx: &mut Context<Self>) -> Self::Result {
        let node = msg.node.clone();
        let before = self.head.node_view(&node, self.now());
        let lifted = before.as_ref().is_some_and(|v| v.cordoned);
        self.durable_answer(Input::Undrain { node: msg.node }, ctx, move |act, _| {
            match act.head.node_view(&node, act.now()) {
                Some(view) => Ok(Undrained { view, forgotten: false, lifted }),
                None => {
                    let mut view = before.ok_or_else(|| ApiError::Internal(format!("node `{node}` vanished")))?;
                    view.cordoned = false;
                    Ok(Undrained { view, forgotten: true, lifted })
                }
            }
        })
    }
}

/// The operator's `ftdrive forget` of a DEAD node; answers the node as it was.
#[derive(Message)]
#[rtype(result = "Result<NodeView, ApiError>")]
pub struct Forget {
    pub node: NodeId,
}

impl Handler<Forget> for HeadActor {
    type Result = ResponseFuture<Result<NodeView, ApiError>>;
    fn handle(&mut self, msg: Forget, ctx: &mut Context<Self>) -> Self::Result {
        let before = self.head.node_view(&msg.node, self.now());
        let node = msg.node.clone();
        self.durable_answer(Input::Forget { node: msg.node }, ctx, move |_, _| {
            before.ok_or_else(|| ApiError::Internal(format!("node `{node}` was forgotten unseen")))
        })
    }
}

impl HeadActor {
    /// Why a node's agent will not serve logs again: it is DEAD, or the head forgot it.
    fn node_gone(&self, node: &str) -> Option<&'static str> {
        match self.head.node_view(&NodeId::from(node.to_string()), self.now()).map(|v| v.state) {
            None => Some("is no longer known to the head"),
            Some(NodeState::Dead) => Some("is DEAD"),
            Some(_) => None,
        }
    }

    /// A node the head just took an input about (so it knows it).
    fn node_after(&self, node: &NodeId) -> Result<NodeView, ApiError> {
        self.head.node_view(node, self.now()).ok_or_else(|| ApiError::Internal(format!("node `{node}` vanished")))
    }
}

/// One job's view.
#[derive(Message)]
#[rtype(result = "Result<JobView, ApiError>")]
pub struct Job(pub JobId);

impl Handler<Job> for HeadActor {
    type Result = Result<JobView, ApiError>;
    fn handle(&mut self, Job(job): Job, _: &mut Context<Self>) -> Self::Result {
        self.document(&job).ok_or_else(|| self.no_job(&job))
    }
}

/// The jobs a listing shows (`GET /v1/jobs`).
#[derive(Message)]
#[rtype(result = "ftdrive::head::JobList")]
pub struct Jobs(pub JobFilter);

/// Which jobs a listing shows: those in `states` (empty: any) submitted before job number
/// `before` (ids are minted `j1`, `j2`, … in submission order), the newest `limit` of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobFilter {
    pub states: Vec<ftdrive::driver::JobState>,
    pub before: Option<u64>,
    pub limit: usize,
}

impl JobFilter {
    fn takes(&self, job: &JobId, state: ftdrive::driver::JobState) -> bool {
        let in_state = self.states.is_empty() || self.states.contains(&state);
        in_state && self.before.is_none_or(|before| job.number().is_some_and(|n| n < before))
    }
}

impl Handler<Jobs> for HeadActor {
    type Result = MessageResult<Jobs>;
    fn handle(&mut self, Jobs(filter): Jobs, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.head.job_list(|job, state| filter.takes(job, state), filter.limit))
    }
}

/// Whether the head is ready: after a restart it places nothing until its nodes have reported.
#[derive(Message)]
#[rtype(result = "serde_json::Value")]
pub struct Health;

impl Handler<Health> for HeadActor {
    type Result = MessageResult<Health>;
    fn handle(&mut self, _: Health, _: &mut Context<Self>) -> Self::Result {
        // Counted on the scheduler's nodes: building every node's view costs ms at 10,000.
        let scheduler = self.head.scheduler();
        let alive = scheduler.nodes().filter(|(_, n)| n.state == ftdrive::scheduler::NodeState::Alive).count();
        MessageResult(serde_json::json!({
            "recovering": self.head.recovering(),
            "failed": self.failed,
            "jobs": self.head.job_count(),
            "nodes": scheduler.node_count(),
            "alive_nodes": alive,
            "store": {"batches": self.batches, "commits": self.commits},
        }))
    }
}

/// The Prometheus text exposition of the head's metrics.
#[derive(Message)]
#[rtype(result = "String")]
pub struct Metrics;

impl Handler<Metrics> for HeadActor {
    type Result = String;
    fn handle(&mut self, _: Metrics, _: &mut Context<Self>) -> String {
        self.metrics.render(&self.head, self.now())
    }
}

#[derive(Message)]
#[rtype(result = "Vec<NodeView>")]
pub struct Nodes {
    /// One node only (none if the head knows no such node).
    pub node: Option<NodeId>,
}

impl Handler<Nodes> for HeadActor {
    type Result = Vec<NodeView>;
    fn handle(&mut self, msg: Nodes, _: &mut Context<Self>) -> Self::Result {
        let mut views = match &msg.node {
            Some(node) => self.head.node_view(node, self.now()).into_iter().collect(),
            None => self.head.node_views(self.now()),
        };
        for view in &mut views {
            // A node's agent now, else the one it last had (a DEAD node after a head restart).
            let url =
                self.log_servers.get(view.name.as_str()).map(|s| &s.url).or(self.log_urls.get(view.name.as_str()));
            view.metrics_url = url.map(|url| format!("{url}/metrics"));
        }
        views
    }
}

/// Subscribe to events (one job's, or all). Returns the job's current view first.
#[derive(Message)]
#[rtype(result = "Result<(Option<JobView>, Receiver<Bytes>), ApiError>")]
pub struct Follow {
    pub job: Option<JobId>,
}

impl Handler<Follow> for HeadActor {
    type Result = Result<(Option<JobView>, Receiver<Bytes>), ApiError>;
    fn handle(&mut self, msg: Follow, _: &mut Context<Self>) -> Self::Result {
        self.followers.retain(|f| !f.tx.is_closed());
        if self.followers.len() >= super::MAX_FOLLOWERS {
            return Err(ApiError::TooMany(format!(
                "the head has {} event followers, its limit; close one and follow again",
                super::MAX_FOLLOWERS
            )));
        }
        let (tx, rx) = tokio::sync::mpsc::channel(super::FOLLOWER_QUEUE_LINES);
        let snapshot = match &msg.job {
            Some(job) => {
                let view = self.view(job).ok_or_else(|| self.no_job(job))?;
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

/// Why an actor has no log yet: it has started no attempt, and what its job waits for (or
/// how it ended). The Python client's torchx scheduler words it the same way.
fn not_started(view: &JobView, actor: &str) -> String {
    if view.state.is_terminal() {
        return format!("actor {actor} has not started an attempt, and the job ended {}", view.state);
    }
    match view.waiting.as_deref().or(view.infeasible.as_deref()) {
        Some(why) => format!("actor {actor} has not started an attempt yet (the job is {}: {why})", view.state),
        None => format!("actor {actor} has not started an attempt yet (the job is {})", view.state),
    }
}

/// Where an attempt's log is served.
#[derive(Message)]
#[rtype(result = "Result<LogSource, ApiError>")]
pub struct LocateLog {
    pub job: JobId,
    pub whose: WhoseLog,
}

/// Which log of a job: an actor's attempt (or one of its workers), or a global rank's holder.
pub enum WhoseLog {
    Actor {
        actor: u32,
        attempt: Option<u32>,
        /// One worker's log (checked against the job's workers per actor).
        local_rank: Option<u32>,
    },
    /// Whoever holds, or last held, `RANK` (`JobView::rank_holder`).
    Rank(u32),
}

pub struct LogSource {
    pub url: String,
    /// What the agent's log server takes from the head for this session.
    pub token: String,
    pub node: String,
    pub actor: u32,
    pub attempt: u32,
    /// One worker's log, not the group's.
    pub local_rank: Option<u32>,
    /// The attempt may still write to its log.
    pub running: bool,
}

impl Handler<LocateLog> for HeadActor {
    type Result = Result<LogSource, ApiError>;
    fn handle(&mut self, msg: LocateLog, _: &mut Context<Self>) -> Self::Result {
        let view = self.view(&msg.job).ok_or_else(|| self.no_job(&msg.job))?;
        let (index, attempt, local_rank) = match msg.whose {
            WhoseLog::Actor { actor, attempt, local_rank } => (actor, attempt, local_rank),
            WhoseLog::Rank(rank) => {
                if let Some(why) = view.no_such_rank(rank) {
                    return Err(ApiError::BadRequest(format!("rank {rank}: {why}")));
                }
                let holder = view.rank_holder(rank).ok_or_else(|| ApiError::NotFound(view.rank_not_held(rank)))?;
                (holder.actor, Some(holder.attempt), holder.local_rank)
            }
        };
        let actor = view.actors.get(index as usize).ok_or_else(|| {
            let job = &msg.job;
            let last = view.actors.len().saturating_sub(1);
            ApiError::NotFound(format!("job {job} has actors {job}/0 to {job}/{last}; there is no actor {index}"))
        })?;
        if let Some((local_rank, why)) = local_rank.and_then(|l| view.no_such_worker(l).map(|why| (l, why))) {
            return Err(ApiError::BadRequest(format!("local_rank {local_rank}: {why}")));
        }
        if actor.attempt == 0 {
            return Err(ApiError::NotFound(not_started(&view, &actor.name.to_string())));
        }
        let attempt = attempt.unwrap_or(actor.attempt);
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
        if let Some(gone) = self.node_gone(&node) {
            // For good, not for a reconnect: a follower ends here instead of waiting for it.
            let ended = ended.map(|e| match e.cause {
                // The head's verdict, not the machine's: one only cut off runs it on until it
                // reconnects (or its fence stops it).
                ftdrive::driver::Cause::NodeLost => {
                    ", which the head counts lost with it (a machine only cut off may still run it until it \
                     reconnects),"
                        .to_string()
                }
                cause => format!(", where it ended {cause},"),
            });
            let ended = ended.unwrap_or_default();
            let latest = if actor.attempt > attempt {
                format!("; attempt {} is the latest (`ftdrive logs {} --actor {index}`)", actor.attempt, msg.job)
            } else {
                String::new()
            };
            return Err(ApiError::NotFound(format!(
                "node {node} {gone}: the log of {} attempt {attempt}{ended} stays on that machine{latest}",
                actor.name
            )));
        }
        let server = self.log_servers.get(node.as_str()).ok_or_else(|| {
            ApiError::Unavailable(format!(
                "node {node} is not connected; attempt {attempt}'s log stays on that machine"
            ))
        })?;
        let url = format!("{}/v1/logs/{}/{index}/{attempt}", server.url, msg.job);
        let running = ended.is_none() && !view.state.is_terminal();
        Ok(LogSource { url, token: server.token.clone(), node, actor: index, attempt, local_rank, running })
    }
}

/// A message from an agent session.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FromAgent {
    pub session: u64,
    pub tx: Sender<ToAgent>,
    pub msg: ToHead,
    /// Its place in the agent backlog, given back once handled.
    pub queued: super::agents::Queued,
}

impl Handler<FromAgent> for HeadActor {
    type Result = ();
    fn handle(&mut self, msg: FromAgent, ctx: &mut Context<Self>) {
        let node = msg.msg.node().clone();
        if self.foreign_sessions.contains(&msg.session) {
            return; // refused as another cluster's (below): said once, and its work left alone
        }
        if let Some(refusal) = self.refuse_another_clusters_work(&msg) {
            self.foreign_sessions.insert(msg.session);
            let _ = msg.tx.try_send(refusal);
            return;
        }
        if let Err(refusal) = self.admit(&msg) {
            tracing::warn!("session {} for node {node}: {refusal:?}", msg.session);
            let _ = msg.tx.try_send(refusal);
            return;
        }
        let log_url = match &msg.msg {
            ToHead::Register(registration) => Some(registration.log_url.clone()),
            _ => None,
        };
        match (self.input(Input::from(msg.msg), ctx), log_url) {
            (Ok(_), Some(url)) => {
                // A token of this session for the head's requests to its log server, made only
                // for a registration the head took: the agent learns it from this welcome.
                let token = crate::paths::random_token().expect("/dev/urandom gives the head its tokens");
                self.log_servers.insert(node, super::LogServer { url, token: token.clone() });
                let config = self.head.config();
                let welcome = ToAgent::Welcome {
                    heartbeat_interval_ms: config.heartbeat_interval_ms,
                    node_timeout_ms: config.node_timeout_ms,
                    log_token: Some(token),
                    cluster: self.store.cluster_id().to_string(),
                };
                let _ = msg.tx.try_send(welcome);
            }
            (Ok(_), None) => {}
            (Err(e), _) => {
                let register_again = matches!(e, Rejected::UnknownNode(_));
                let _ = msg.tx.try_send(ToAgent::Refused { reason: e.to_string(), register_again });
            }
        }
    }
}

impl HeadActor {
    /// One job's document: its view with its spec as accepted, every default filled in (as
    /// `kubectl get -o yaml` shows a pod's). Lists and event snapshots leave the spec out.
    fn document(&self, job: &JobId) -> Option<JobView> {
        let mut view = self.view(job)?;
        view.spec = self.head.driver(job).map(|d| d.spec().clone());
        Some(view)
    }

    /// An agent that runs, or owes the end of, attempts of another cluster (its head ran on
    /// another state dir; this one is new, or the wrong one) is refused, and nothing is said to
    /// it again in that session: those attempts are not this head's to stop, and the same job
    /// ids mean other jobs here. They run on until their own head is back.
    fn refuse_another_clusters_work(&self, msg: &FromAgent) -> Option<ToAgent> {
        let ToHead::Register(registration) = &msg.msg else { return None };
        let (theirs, ours) = (registration.cluster.as_str(), self.store.cluster_id());
        let (running, owed) = (registration.running.len(), registration.ended.len());
        if theirs.is_empty() || theirs == ours || running + owed == 0 {
            return None;
        }
        // What moves the machine here: ends it owes reach only their own head (or are dropped
        // with the agent's attempt records); processes must end first.
        let how = match running {
            0 => "point the agent at that cluster's head once, which takes the ends and lets it go; or drop them with \
                  the `attempts` directory of the agent's state dir (that head then never hears how they ended)",
            _ => "let its attempts end (or end their processes), then point it at that cluster's head once for their ends",
        };
        let reason = format!(
            "node {}'s agent runs {running} and owes the ends of {owed} attempt(s) of cluster {theirs}, and this \
             head, on state dir {}, is cluster {ours}: start the head on the state dir it ran with; to move that \
             machine to this cluster, {how}",
            registration.node,
            self.store.path().parent().map_or_else(|| ".".into(), |d| d.display().to_string()),
        );
        tracing::error!("refused: {reason}");
        Some(ToAgent::Refused { reason, register_again: false })
    }

    /// Node identity (DESIGN §11): a registration binds the node name to its session unless
    /// another live session holds the name under another identity; every other message must
    /// come from the session its node is bound to.
    ///
    /// AI-1: an agent of another identity (another state dir) is let into a node that is not
    /// DEAD only once it is. Its agent gone, the node's attempts run on under their supervisors
    /// for the re-attach grace, and only an agent with the old state dir can find them: one
    /// with another would report none running, the head would start them again, and a rank
    /// would run twice. Once the head declares the node DEAD (its node timeout, which the
    /// grace never exceeds) they are gone. A digest of each node's last identity is durable
    /// with the node's record, so a head restarted meanwhile knows it too.
    fn admit(&mut self, msg: &FromAgent) -> Result<(), ToAgent> {
        let node = msg.msg.node();
        let bound = self.sessions.get(node);
        if let ToHead::Register(registration) = &msg.msg {
            if let Some(other) = bound.filter(|s| s.id != msg.session && s.identity != registration.identity) {
                tracing::warn!("node {node}: refused a second agent (session {} holds the name)", other.id);
                return Err(ToAgent::NameInUse {
                    reason: format!("node name {node} is in use by another live agent; give this agent another --name"),
                });
            }
            let digest = identity_digest(&registration.identity);
            self.refuse_a_stranger_while_not_dead(node, &digest)?;
            self.identities.insert(node.clone(), digest);
            self.log_urls.insert(node.clone(), registration.log_url.clone());
            let identity = registration.identity.clone();
            let session = Session { id: msg.session, tx: msg.tx.clone(), identity, last_heartbeat: None };
            self.sessions.insert(node.clone(), session);
            return Ok(());
        }
        match self.sessions.get_mut(node) {
            Some(session) if session.id == msg.session => {
                if matches!(msg.msg, ToHead::Heartbeat { .. }) {
                    let now = std::time::Instant::now();
                    if let Some(last) = session.last_heartbeat.replace(now) {
                        self.metrics.observe_heartbeat_gap(now - last);
                    }
                }
                Ok(())
            }
            bound => Err(ToAgent::Refused {
                reason: format!("messages about node {node} are accepted only from the session it registered on"),
                register_again: bound.is_none(),
            }),
        }
    }
}

/// What the head keeps of an agent's identity: its SHA-256 in hex (empty for none), so that
/// the state database holds no secret that would let a reader register as the node.
fn identity_digest(identity: &str) -> String {
    if identity.is_empty() {
        return String::new();
    }
    crate::paths::hex(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, identity.as_bytes()).as_ref())
}

impl HeadActor {
    /// AI-1 (in `admit`).
    fn refuse_a_stranger_while_not_dead(&self, node: &NodeId, digest: &str) -> Result<(), ToAgent> {
        let stranger = self.identities.get(node).is_some_and(|known| !known.is_empty() && known != digest);
        if !stranger {
            return Ok(());
        }
        let scheduler = self.head.scheduler();
        let not_dead = scheduler.node_ix(node).is_some_and(|ix| scheduler.node(ix).state != NodeState::Dead);
        if !not_dead {
            return Ok(());
        }
        let timeout_ms = self.head.config().node_timeout_ms;
        Err(ToAgent::Refused {
            reason: format!(
                "node {node}'s last agent kept another state dir, and the attempts it started may still run under \
                 their supervisors: this agent is let in once the head declares {node} DEAD (within its node \
                 timeout, {timeout_ms} ms, after the last agent's last heartbeat), and those attempts are then lost; to keep \
                 them, start the agent with the last one's --state-dir"
            ),
            register_again: false,
        })
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
    fn handle(&mut self, msg: AgentGone, ctx: &mut Context<Self>) {
        // Kept, the ids of a foreign agent that reconnects every second grew without end.
        self.foreign_sessions.remove(&msg.session);
        let Some(node) = msg.node else { return };
        if self.sessions.get(&node).is_some_and(|s| s.id == msg.session) {
            self.sessions.remove(&node);
            // The node is suspect from now on, not only once a heartbeat is missed (DESIGN §3);
            // but a stopping head closed the channel itself (HD-1).
            if !self.stopping {
                let _ = self.input(Input::LinkLost { node }, ctx);
            }
        }
    }
}

/// The head is about to stop: it starts no change of its own from now on (HD-1).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stopping;

impl Handler<Stopping> for HeadActor {
    type Result = ();
    fn handle(&mut self, _: Stopping, ctx: &mut Context<Self>) {
        self.stopping = true;
        self.arm_timer(ctx);
    }
}

/// The head has stopped taking requests and closed its connections: its database is made
/// whole in one file before the process exits (`Store::checkpoint_all`).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stopped;

impl Handler<Stopped> for HeadActor {
    type Result = ();
    fn handle(&mut self, _: Stopped, _: &mut Context<Self>) {
        match self.store.checkpoint_all() {
            Ok(()) => tracing::debug!("state database checkpointed: {} holds everything", self.store.path().display()),
            // Nothing is lost: the WAL is read back at the next start.
            Err(e) => tracing::warn!("cannot checkpoint {} while stopping: {e}", self.store.path().display()),
        }
    }
}
