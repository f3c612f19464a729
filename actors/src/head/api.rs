//! The head's HTTP API (JSON; the client token on every request, the agent token on the
//! agent channel) and the server around it.
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/jobs` `{"spec": {...}}` | submit; answers the new job |
//! | `GET /v1/jobs`, `GET /v1/jobs/{id}` | job views (DESIGN §7 shapes) |
//! | `POST /v1/jobs/{id}/stop` | stop a job |
//! | `GET /v1/jobs/{id}/events`, `GET /v1/events` | NDJSON event stream (a job's ends with it) |
//! | `GET /v1/jobs/{id}/logs?actor=&attempt=&offset=&local_rank=&tail=` | an attempt's log (or one worker's), fetched from its agent |
//! | `GET /v1/jobs/{id}/logs?rank=&offset=&tail=` | the log of whoever holds, or last held, a global rank |
//! | `GET /v1/nodes`, `GET /v1/nodes/{name}`, `POST /v1/nodes/{name}/drain` | nodes; the operator's drain (a preemption notice, and no new work until undrained) |
//! | `POST /v1/nodes/{name}/undrain` | withdraw the operator's drain: the node takes new work again |
//! | `DELETE /v1/nodes/{name}` | forget a DEAD node (409 for a live one); answers the node as it was |
//! | `GET /v1/agent` | the agents' WebSocket channel |
//! | `GET /v1/health` | `recovering` (a restarted head waiting for its nodes), job and node counts |
//! | `GET /metrics` | Prometheus text (`docs/metrics.md`) |
//! | `GET /`, `GET /dashboard/{file}` | the dashboard (no token: the page asks for one) |

use super::store::{Store, StoreError};
use super::{
    agents, start_actor, ApiError, Drain, Follow, Forget, HeadActor, Health, Job, JobFilter, Jobs, LocateLog, Metrics,
    Nodes, Stop, Stopped, Stopping, Submit, Undrain, WhoseLog,
};
use crate::paths::Tokens;
use actix::prelude::*;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::middleware::{ErrorHandlerResponse, ErrorHandlers};
use actix_web::{http::StatusCode, web, App, FromRequest, HttpRequest, HttpResponse, HttpServer, ResponseError};
use bytes::Bytes;
use ftdrive::driver::JobState;
use ftdrive::event::StreamLine;
use ftdrive::head::Rejected;
use ftdrive::scheduler::NodeState;
use ftdrive::spec::{JobSpec, Overrides};
use ftdrive::view::NodeView;
use ftdrive::{HeadConfig, JobId, NodeId};
use object::Object;
use serde::Deserialize;
use std::future::{ready, Ready};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub struct ServeOptions {
    pub listen: String,
    pub state_dir: PathBuf,
    pub config: HeadConfig,
    /// The credentials; `None`: from the environment, else the state dir's files (made once).
    pub tokens: Option<Tokens>,
    /// Stop on SIGINT/SIGTERM (the daemon), or leave signals to the caller (embedded).
    pub handle_signals: bool,
    /// Generated job ids start at `j<n>` with n at least this (ids already on record are
    /// skipped either way).
    pub first_job_number: u64,
    /// Serve HTTPS (the API and the agent channel) with this; `None`: plain HTTP, which
    /// listens on loopback only unless `insecure_http`.
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    pub insecure_http: bool,
    /// The CA that agents' https:// log servers are verified with (default: the public roots).
    pub agent_ca: Option<PathBuf>,
    /// A quiet event stream gets a blank line this often (`EVENTS_KEEPALIVE_MS` by default).
    pub events_keepalive_ms: u64,
}

/// How often a quiet event stream gets a blank line: under the idle timeouts of common
/// proxies and load balancers (30–60 s), and often enough that a follower hearing nothing for
/// three of them can take the head as gone (a stopped process or a lost machine sends no FIN).
pub const EVENTS_KEEPALIVE_MS: u64 = 15_000;

/// The response header of an event stream that names its keep-alive interval, so that clients
/// know how long a silence means a lost head.
pub const KEEPALIVE_HEADER: &str = "x-ftdrive-keepalive-ms";

/// A running head: where it listens, its actor, its credentials, and how to stop it.
pub struct HeadServer {
    pub addr: SocketAddr,
    pub head: Addr<HeadActor>,
    pub tokens: Tokens,
    stopper: Stopper,
}

impl HeadServer {
    /// Stops the head: agent channels and event streams close at once (agents and followers
    /// then wait for the next head), other requests get up to `SHUTDOWN_TIMEOUT_S` to finish.
    pub async fn stop(&self) {
        self.stopper.stop().await;
    }
}

/// How long requests in flight get to finish when the head stops.
const SHUTDOWN_TIMEOUT_S: u64 = 5;
/// How long a stopping head waits for its connections to end before it leaves the rest to
/// actix's graceful stop, which looks at them once a second.
const DRAIN_WAIT_MS: u64 = 250;

/// What stops the head, from a signal or from `HeadServer::stop`.
#[derive(Clone)]
struct Stopper {
    head: Addr<HeadActor>,
    closing: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
    handle: actix_web::dev::ServerHandle,
    connections: Connections,
}

impl Stopper {
    /// Long-lived connections would hold a graceful stop for its whole timeout: they end
    /// first, once the head has stopped changing things on its own (HD-1), so that closing its
    /// agents' channels does not make them look lost. No connection is taken meanwhile (an
    /// agent reconnecting at once would be one more to wait for). Actix's graceful stop looks
    /// at the connections left once a second, so a head stopped with any open (every agent's)
    /// took a second to exit; it waits for them itself, a bounded time, and stops at once
    /// when none is left.
    async fn stop(&self) {
        let _ = self.head.send(Stopping).await;
        self.handle.pause().await;
        self.closing.send_replace(true);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(DRAIN_WAIT_MS);
        while self.connections.open() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        let _ = self.head.send(Stopped).await;
        self.handle.stop(true).await;
    }
}

/// Counts the head's open connections: each holds a `ConnectionGuard` in its extensions,
/// dropped with the connection.
#[derive(Clone, Default)]
struct Connections(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Connections {
    fn open(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }

    fn guard(&self) -> ConnectionGuard {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        ConnectionGuard(self.clone())
    }
}

struct ConnectionGuard(Connections);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// A stopping head closes each connection once it has answered on it: a client that keeps
/// its connection busy (a log follower polling, a script submitting in a loop) would
/// otherwise hold the stop until `DRAIN_WAIT_MS` ran out.
fn close_when_stopping<B>(
    mut answer: ServiceResponse<B>,
    closing: &tokio::sync::watch::Receiver<bool>,
) -> ServiceResponse<B> {
    if *closing.borrow() {
        answer.response_mut().head_mut().set_connection_type(actix_web::http::ConnectionType::Close);
    }
    answer
}

/// The daemon's stop: SIGTERM or SIGINT.
async fn stop_on_signal(stopper: Stopper) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("cannot watch for SIGTERM and SIGINT; stop the head with SIGKILL");
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
    }
    stopper.stop().await;
}

/// Why a head did not start. It changed no file before the listener was bound.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("cannot listen on {0}: {1}; stop what holds that address, or give another with --listen")]
    Listen(String, std::io::Error),
    #[error("{0}")]
    State(#[from] StoreError),
    #[error("cannot make or read the API tokens in {0}: {1}{hint}", hint = token_hint(.1))]
    Token(PathBuf, std::io::Error),
    /// Plain HTTP off loopback without `insecure_http`.
    #[error("{0}")]
    Insecure(String),
}

/// What to do about a token error: tokens given wrong (InvalidInput) are fixed where they are
/// given, anything else is the state dir's.
fn token_hint(error: &std::io::Error) -> &'static str {
    match error.kind() {
        std::io::ErrorKind::InvalidInput => "",
        _ => "; --state-dir must be a directory this user can write",
    }
}

/// How long the head waits for an agent's log server (a stuck agent must not hold a request).
const AGENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The head's client for agents' log servers.
fn agent_client(ca: Option<&std::path::Path>) -> Result<reqwest::Client, ServeError> {
    let builder = crate::tls::http_client(ca).map_err(|e| ServeError::Config(format!("--ca-cert: {e}")))?;
    // A redirect is not an agent's answer: whatever took over a log server's port (a job that
    // killed its agent may) could otherwise send the head's request anywhere it reaches and
    // have the answer shown as a log.
    let builder = builder.redirect(reqwest::redirect::Policy::none());
    builder.timeout(AGENT_REQUEST_TIMEOUT).build().map_err(|e| ServeError::Config(format!("cannot set up HTTPS: {e}")))
}

pub(super) struct ApiState {
    pub head: Addr<HeadActor>,
    pub agent_backlog: std::sync::Arc<super::agents::AgentBacklog>,
    pub tokens: Tokens,
    pub http: reqwest::Client,
    /// The CA the head verifies agents' log servers with (`--ca-cert`), named in hints.
    pub agent_ca: Option<PathBuf>,
    /// Turns true when the head stops: agent channels and event streams end on it.
    pub closing: tokio::sync::watch::Receiver<bool>,
    pub events_keepalive: Duration,
}

impl ApiState {
    fn new(
        head: Addr<HeadActor>,
        tokens: Tokens,
        http: reqwest::Client,
        agent_ca: Option<PathBuf>,
        closing: tokio::sync::watch::Receiver<bool>,
        events_keepalive: Duration,
    ) -> ApiState {
        let agent_backlog = super::agents::AgentBacklog::new(super::agents::MAX_AGENT_MESSAGES_QUEUED);
        ApiState { head, agent_backlog, tokens, http, agent_ca, closing, events_keepalive }
    }
}

/// Resolves once the head is stopping.
pub(super) async fn stopping(mut closing: tokio::sync::watch::Receiver<bool>) {
    // An Err means the sender is gone: the server is gone with it.
    let _ = closing.wait_for(|closing| *closing).await;
}

/// Starts the head: binds the listener and checks its tokens first (so that a head refused for
/// either changes no file), then locks and reads its state dir, makes any token not there yet,
/// then starts its actor and HTTP server. The returned future runs the server until it is
/// stopped (by a signal, or `HeadServer::stop`).
pub fn serve(options: ServeOptions) -> Result<(HeadServer, actix_web::dev::Server), ServeError> {
    options.config.validate().map_err(ServeError::Config)?;
    let http = agent_client(options.agent_ca.as_deref())?;
    let listen = |e| ServeError::Listen(options.listen.clone(), e);
    let listener = std::net::TcpListener::bind(&options.listen).map_err(listen)?;
    // After a head restart every agent reconnects at once: std's backlog of 128 would drop
    // the rest of the storm's SYNs, and each dropped agent retries a second or more later.
    socket2::SockRef::from(&listener).listen(ACCEPT_BACKLOG).map_err(listen)?;
    let addr = listener.local_addr().map_err(listen)?;
    if options.tls.is_none() {
        crate::tls::refuse_plain_off_loopback("the head's API", addr.ip(), options.insecure_http)
            .map_err(ServeError::Insecure)?;
    }
    let token_error = |e| ServeError::Token(options.state_dir.clone(), e);
    if options.tokens.is_none() {
        crate::paths::check_head_tokens(&options.state_dir).map_err(token_error)?;
    }
    let (commits_tx, commits) = tokio::sync::mpsc::unbounded_channel();
    let (store, restored) = Store::open(&options.state_dir, move |commit| {
        let _ = commits_tx.send(commit);
    })?;
    let tokens = match options.tokens {
        Some(tokens) => tokens,
        None => crate::paths::head_tokens(&options.state_dir).map_err(token_error)?,
    };
    let head = start_actor(options.config, store, restored, options.first_job_number, commits);
    let (closing, closing_rx) = tokio::sync::watch::channel(false);
    let closing = std::sync::Arc::new(closing);
    let keepalive = Duration::from_millis(options.events_keepalive_ms);
    let state = web::Data::new(ApiState::new(
        head.clone(),
        tokens.clone(),
        http,
        options.agent_ca.clone(),
        closing_rx,
        keepalive,
    ));
    let connections = Connections::default();
    let counted = connections.clone();
    let server = HttpServer::new(move || {
        let closing = state.closing.clone();
        App::new()
            .app_data(state.clone())
            .configure(input_limits)
            .wrap(json_errors())
            .wrap_fn(move |req, service| {
                let answered = actix_web::dev::Service::call(service, with_body_deadline(req, BODY_TIMEOUT));
                let closing = closing.clone();
                async move { answered.await.map(|answer| close_when_stopping(answer, &closing)) }
            })
            .configure(routes)
    })
    .on_connect(move |_, extensions| {
        extensions.insert(counted.guard());
    })
    .workers(HTTP_WORKERS)
    .max_connections(crate::connections::per_worker(
        crate::connections::open_file_limit(),
        HTTP_WORKERS,
        MAX_CONNECTIONS,
    ))
    // Without it (actix's default) a small write that follows another waits until the peer
    // has read and acknowledged the first (at worst its delayed-ACK timer, 40 ms on Linux):
    // an event line after the one before it, a message to an agent after the last.
    .tcp_nodelay(true)
    .shutdown_timeout(SHUTDOWN_TIMEOUT_S)
    // Signals are ours: actix's own stop would wait out the long-lived connections.
    .disable_signals();
    let server = match options.tls {
        Some(tls) => server.listen_rustls_0_23(listener, (*tls).clone()),
        None => server.listen(listener),
    }
    .map_err(listen)?;
    let running = server.run();
    let handle = running.handle();
    let stopper = Stopper { head: head.clone(), closing, handle, connections };
    if options.handle_signals {
        actix_web::rt::spawn(stop_on_signal(stopper.clone()));
    }
    Ok((HeadServer { addr, head, tokens, stopper }, running))
}

const HTTP_WORKERS: usize = 2;

/// Connections the head takes at once, where its open-file limit allows: agents (one each, up
/// to the 10,000 `cargo bench --bench fleet` runs) and clients.
const MAX_CONNECTIONS: usize = 50_000;

/// One resource per path, so that a method a path does not take is a 405, not a 404.
fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/v1/jobs").route(web::post().to(submit)).route(web::get().to(list_jobs)))
        .service(web::resource("/v1/jobs/{id}").route(web::get().to(get_job)))
        .service(web::resource("/v1/jobs/{id}/stop").route(web::post().to(stop_job)))
        .service(web::resource("/v1/jobs/{id}/events").route(web::get().to(job_events)))
        .service(web::resource("/v1/jobs/{id}/logs").route(web::get().to(job_logs)))
        .service(web::resource("/v1/events").route(web::get().to(all_events)))
        .service(web::resource("/v1/nodes").route(web::get().to(list_nodes)))
        .service(web::resource("/v1/nodes/{name}").route(web::get().to(get_node)).route(web::delete().to(forget_node)))
        .service(web::resource("/v1/nodes/{name}/drain").route(web::post().to(drain_node)))
        .service(web::resource("/v1/nodes/{name}/undrain").route(web::post().to(undrain_node)))
        .service(web::resource("/v1/agent").route(web::get().to(agents::channel)))
        // HEAD as well, as load balancers and `curl -I` probe (actix leaves the body out).
        .service(web::resource("/v1/health").route(web::get().to(health)).route(web::head().to(health)))
        .service(web::resource("/metrics").route(web::get().to(metrics)).route(web::head().to(metrics)))
        .service(web::resource("/v1/metrics/targets").route(web::get().to(metrics_targets)))
        .configure(super::dashboard::routes)
        .default_service(web::to(|_: Authorized| async {
            ApiError::NotFound("no such route; see `ftdrive --help`".into()).error_response()
        }));
}

// ---- bounds and errors -----------------------------------------------------------------

/// Connections waiting to be accepted (the kernel caps it at `net.core.somaxconn`).
const ACCEPT_BACKLOG: i32 = 4096;

/// Largest request body the head reads; a job spec is far smaller (its `env` is bounded at
/// 256 KiB in all).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Bounds on bodies, and JSON errors naming what was wrong with a body, a path or a query.
fn input_limits(cfg: &mut web::ServiceConfig) {
    cfg.app_data(
        web::JsonConfig::default().limit(MAX_BODY_BYTES).error_handler(|e, req| body_error(e, req.path()).into()),
    )
    .app_data(web::PathConfig::default().error_handler(|e, _| ApiError::BadRequest(format!("bad path: {e}")).into()))
    .app_data(web::QueryConfig::default().error_handler(|e, req| query_error(e, req.query_string()).into()));
}

/// The decoder's errors name no parameter ("invalid digit found in string"): the query is
/// quoted, and what its numbers may be is said.
fn query_error(e: actix_web::error::QueryPayloadError, query: &str) -> ApiError {
    let query: String = query.chars().take(200).collect();
    ApiError::BadRequest(format!(
        "bad query `{query}`: {e}; its numbers are whole numbers (actor, rank, attempt, local_rank, offset: 0 or more; \
         limit: 1 or more), and docs/runtime.md (HTTP API) lists each route's parameters"
    ))
}

/// How long a request's body may take to arrive, whole (it is at most `MAX_BODY_BYTES`): one
/// sent a byte every 20 s held its connection for ever, and enough of them every descriptor.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// A POST's body, cut off with an error once `limit` has passed since the request arrived.
/// Only POSTs: the agent channel and the event streams are GETs whose streams live long.
fn with_body_deadline(mut req: ServiceRequest, limit: Duration) -> ServiceRequest {
    if req.method() != actix_web::http::Method::POST {
        return req;
    }
    let payload = actix_web::HttpMessage::take_payload(&mut req);
    let deadline = tokio::time::Instant::now() + limit;
    let timed = futures_util::stream::unfold(Some(payload), move |payload| async move {
        let mut payload = payload?;
        match tokio::time::timeout_at(deadline, futures_util::StreamExt::next(&mut payload)).await {
            Ok(item) => item.map(|item| (item, Some(payload))),
            Err(_) => {
                let late = std::io::Error::new(std::io::ErrorKind::TimedOut, BodyLate(limit));
                Some((Err(actix_web::error::PayloadError::Io(late)), None))
            }
        }
    });
    let boxed: std::pin::Pin<Box<dyn futures_util::Stream<Item = _>>> = Box::pin(timed);
    req.set_payload(boxed.into());
    req
}

/// A body that did not arrive within its limit.
#[derive(Debug)]
struct BodyLate(Duration);

impl std::fmt::Display for BodyLate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the request body did not arrive within {} s", self.0.as_secs())
    }
}

impl std::error::Error for BodyLate {}

fn body_error(e: actix_web::error::JsonPayloadError, path: &str) -> ApiError {
    use actix_web::error::JsonPayloadError as E;
    use actix_web::error::PayloadError;
    match e {
        E::Payload(PayloadError::Io(e)) if e.kind() == std::io::ErrorKind::TimedOut => {
            ApiError::BadRequest(format!("{e}; send it whole, promptly"))
        }
        E::Overflow { .. } | E::OverflowKnownLength { .. } => {
            ApiError::TooLarge(format!("the request body is over {MAX_BODY_BYTES} bytes, the head's limit"))
        }
        E::ContentType => ApiError::BadRequest("the request body must be JSON (Content-Type: application/json)".into()),
        E::Deserialize(e) => {
            ApiError::BadRequest(format!("the request body is not the JSON expected: {e}; {}", body_wanted(path)))
        }
        other => ApiError::BadRequest(format!("the request body is not the JSON expected: {other}")),
    }
}

/// What a route with a JSON body takes, for the error that says its body was not that.
fn body_wanted(path: &str) -> &'static str {
    if path.ends_with("/drain") {
        r#"send {"deadline_ms": N}"#
    } else if path == "/v1/jobs" {
        r#"send {"spec": {...}}, the job spec (docs/jobspec.md) as its one field"#
    } else {
        "docs/runtime.md (HTTP API) says what each route takes"
    }
}

/// Every error the head answers is JSON `{"error": ...}` (DESIGN §11), including those actix
/// answers itself (a method a route does not take, a bad WebSocket handshake).
fn json_errors<B: actix_web::body::MessageBody + 'static>() -> ErrorHandlers<B> {
    ErrorHandlers::new().default_handler(|res: ServiceResponse<B>| {
        let is_json = res
            .headers()
            .get(actix_web::http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        if is_json {
            return Ok(ErrorHandlerResponse::Response(res.map_into_left_body()));
        }
        Ok(ErrorHandlerResponse::Future(Box::pin(async move {
            let (req, res) = res.into_parts();
            let status = res.status();
            // What the framework said (a handshake's or a parser's reason) is kept as the error.
            let said = actix_web::body::to_bytes(res.into_body()).await.unwrap_or_default();
            let json = HttpResponse::build(status).json(serde_json::json!({ "error": error_text(status, &said) }));
            Ok(ServiceResponse::new(req, json).map_into_right_body())
        })))
    })
}

/// The message of an error the framework answered in plain text (or with no body).
fn error_text(status: StatusCode, said: &[u8]) -> String {
    let said = std::str::from_utf8(said).map(str::trim).unwrap_or("");
    match status {
        StatusCode::METHOD_NOT_ALLOWED => "this route does not take that method; see `ftdrive --help`".into(),
        _ if !said.is_empty() && said.len() <= 1_000 => said.to_string(),
        _ => format!("{} ({})", status.canonical_reason().unwrap_or("error"), status.as_u16()),
    }
}

// ---- auth -----------------------------------------------------------------------------

/// Present on a request that carries the client token. Without it: 401, and nothing else
/// happens.
pub(super) struct Authorized;

/// Present on a request that carries the agent token: the agent channel's only way in.
pub(super) struct AgentAuthorized;

/// Which credential a route takes.
#[derive(Clone, Copy)]
enum Credential {
    Client,
    Agent,
}

impl Credential {
    fn expected(self, tokens: &Tokens) -> (&str, &str) {
        match self {
            Credential::Client => (&tokens.client, &tokens.agent),
            Credential::Agent => (&tokens.agent, &tokens.client),
        }
    }

    /// The name a refusal gives the credential a caller presented in its place (`presented`).
    fn name(self) -> &'static str {
        match self {
            Credential::Client => "client_token",
            Credential::Agent => "agent_token",
        }
    }

    fn other(self) -> Credential {
        match self {
            Credential::Client => Credential::Agent,
            Credential::Agent => Credential::Client,
        }
    }

    /// What to tell a caller who did not present this credential: 401, as for any wrong
    /// credential (DESIGN §11), saying which one the route takes, and with `presented` naming
    /// the other credential when that is what came, so that a client can say so.
    fn refusal(self, presented_the_other: bool) -> HttpResponse {
        let message = match (self, presented_the_other) {
            (Credential::Client, false) => "this route takes the client token: set $FTDRIVE_TOKEN or use the `token` file in the head's state dir",
            (Credential::Client, true) => "the agent token opens only the agent channel; this route takes the client token ($FTDRIVE_TOKEN or the `token` file in the head's state dir)",
            (Credential::Agent, false) => "the agent channel takes the agent token: set $FTDRIVE_AGENT_TOKEN or use the `agent-token` file in the head's state dir",
            (Credential::Agent, true) => "the client token cannot open the agent channel; agents use the agent token ($FTDRIVE_AGENT_TOKEN or the `agent-token` file in the head's state dir)",
        };
        let mut body = serde_json::json!({ "error": message });
        if presented_the_other {
            body["presented"] = self.other().name().into();
        }
        HttpResponse::Unauthorized().json(body)
    }

    fn check(self, req: &HttpRequest) -> Result<(), actix_web::Error> {
        let state = req.app_data::<web::Data<ApiState>>().expect("API state is registered");
        let (expected, other) = self.expected(&state.tokens);
        let given = crate::paths::bearer_token(req.headers());
        let eq = |a: &str, b: &str| crate::paths::constant_time_eq(a.as_bytes(), b.as_bytes());
        match given {
            Some(token) if eq(token, expected) => Ok(()),
            Some(token) => Err(refused(self.refusal(eq(token, other)))),
            None => Err(refused(self.refusal(false))),
        }
    }
}

fn refused(response: HttpResponse) -> actix_web::Error {
    actix_web::error::InternalError::from_response("unauthorized", response).into()
}

impl FromRequest for Authorized {
    type Error = actix_web::Error;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(Credential::Client.check(req).map(|()| Authorized))
    }
}

impl FromRequest for AgentAuthorized {
    type Error = actix_web::Error;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(Credential::Agent.check(req).map(|()| AgentAuthorized))
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::TooMany(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) => StatusCode::BAD_GATEWAY,
            ApiError::Stopping(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status_code()).json(serde_json::json!({"error": self.to_string()}))
    }
}

fn mailbox(e: MailboxError) -> ApiError {
    ApiError::Stopping(format!("the head is shutting down ({e})"))
}

// ---- handlers ---------------------------------------------------------------------------

/// `POST /v1/jobs`: the spec is kept as text and parsed once, by `JobSpec::parse`. Anything
/// else in the body is refused, as unknown spec fields are (an `id` here would be ignored).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitBody {
    spec: Option<Box<serde_json::value::RawValue>>,
}

async fn submit(
    _: Authorized,
    state: web::Data<ApiState>,
    body: web::Json<Object<SubmitBody>>,
) -> Result<HttpResponse, ApiError> {
    let Object(body) = body.into_inner();
    let spec = body.spec.as_ref().ok_or_else(|| ApiError::BadRequest("the request needs a `spec` object".into()))?;
    let spec = JobSpec::parse(spec.get(), &Overrides::default()).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let view = state.head.send(Submit { spec }).await.map_err(mailbox)??;
    Ok(HttpResponse::Ok().json(view))
}

/// `GET /v1/jobs?state=RUNNING,PENDING&before=j40&limit=20`: each optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)] // `?limt=1` listed every job
struct JobsQuery {
    state: Option<String>,
    before: Option<String>,
    limit: Option<usize>,
}

/// Where a listing cut by `limit` ends: the `before=` that asks for the page of older jobs.
pub const NEXT_BEFORE_HEADER: &str = "x-ftdrive-next-before";

impl JobsQuery {
    fn filter(&self) -> Result<JobFilter, ApiError> {
        let states = self.state.as_deref().map_or(Ok(Vec::new()), |list| {
            list.split(',').map(|name| JobState::parse(name).ok_or_else(|| unknown_state(name))).collect()
        })?;
        let before = self.before.as_deref().map(before_number).transpose()?;
        let limit = match self.limit {
            Some(0) => return Err(ApiError::BadRequest("`limit` is 0: ask for at least one job".into())),
            Some(n) => n,
            None => usize::MAX,
        };
        Ok(JobFilter { states, before, limit })
    }
}

fn unknown_state(name: &str) -> ApiError {
    let known = JobState::names();
    ApiError::BadRequest(format!("`state` names `{name}`, which is no job state: use {known}, comma-separated"))
}

/// The number of `before=jN`: jobs are numbered in submission order, so it marks a place in
/// the listing whether or not job N is still kept.
fn before_number(id: &str) -> Result<u64, ApiError> {
    JobId::from(id.to_string()).number().ok_or_else(|| {
        ApiError::BadRequest(format!(
            "`before` is `{id}`, which is no job id: give one such as `j40` to list the jobs submitted before it"
        ))
    })
}

async fn list_jobs(
    _: Authorized,
    state: web::Data<ApiState>,
    query: web::Query<JobsQuery>,
) -> Result<HttpResponse, ApiError> {
    let filter = query.filter()?;
    let list = state.head.send(Jobs(filter)).await.map_err(mailbox)?;
    let mut response = HttpResponse::Ok();
    if let Some(oldest) = &list.older {
        response.insert_header((NEXT_BEFORE_HEADER, oldest.as_str()));
    }
    Ok(response.json(list.views))
}

async fn get_job(_: Authorized, state: web::Data<ApiState>, id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let view = state.head.send(Job(JobId::from(id.into_inner()))).await.map_err(mailbox)??;
    Ok(HttpResponse::Ok().json(view))
}

async fn stop_job(_: Authorized, state: web::Data<ApiState>, id: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let view = state.head.send(Stop { job: JobId::from(id.into_inner()) }).await.map_err(mailbox)??;
    Ok(HttpResponse::Ok().json(view))
}

async fn job_events(
    _: Authorized,
    state: web::Data<ApiState>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    events(state, Some(JobId::from(id.into_inner()))).await
}

async fn all_events(_: Authorized, state: web::Data<ApiState>) -> Result<HttpResponse, ApiError> {
    events(state, None).await
}

/// NDJSON: a job's snapshot first (for one job), then one line per event, and a blank line
/// whenever the stream was quiet for `events_keepalive`.
async fn events(state: web::Data<ApiState>, job: Option<JobId>) -> Result<HttpResponse, ApiError> {
    let (snapshot, rx) = state.head.send(Follow { job }).await.map_err(mailbox)??;
    let first = snapshot.map(|view| Bytes::from(StreamLine::Snapshot(Box::new(view)).to_json() + "\n"));
    let (closing, keepalive) = (state.closing.clone(), state.events_keepalive);
    let stream = futures_util::stream::unfold((first, rx, closing), move |(first, mut rx, closing)| async move {
        if let Some(line) = first {
            return Some((Ok::<Bytes, actix_web::Error>(line), (None, rx, closing)));
        }
        // A stopping head ends the stream cleanly; followers then wait for the next head.
        tokio::select! {
            line = rx.recv() => line.map(|line| (Ok(line), (None, rx, closing))),
            _ = tokio::time::sleep(keepalive) => Some((Ok(Bytes::from_static(b"\n")), (None, rx, closing))),
            _ = stopping(closing.clone()) => None,
        }
    });
    // The connection closes with the stream: kept alive in the follower's pool, it would be
    // one more a stopping head waits for (`Stopper::stop`).
    Ok(HttpResponse::Ok()
        .content_type("application/x-ndjson")
        .insert_header((KEEPALIVE_HEADER, keepalive.as_millis().to_string()))
        .force_close()
        .streaming(stream))
}

async fn health(_: Authorized, state: web::Data<ApiState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(state.head.send(Health).await.map_err(mailbox)?))
}

/// OpenMetrics as Prometheus scrapes it, or the text format for anyone else (`exposition`).
async fn metrics(_: Authorized, req: HttpRequest, state: web::Data<ApiState>) -> Result<HttpResponse, ApiError> {
    let openmetrics = state.head.send(Metrics).await.map_err(mailbox)?;
    let (content_type, body) = crate::exposition::answer(req.headers(), openmetrics);
    Ok(HttpResponse::Ok().content_type(content_type).body(body))
}

/// Every agent's metrics server as a target of Prometheus's HTTP service discovery
/// (`http_sd_configs`): its agent picks its port at start unless given `--log-port`, so a
/// static list would not do. A node the head still knows (DEAD included, so that `up` says it
/// is down) is listed under the address its agent last registered, with its name as a label;
/// not its state, since a target label that changes (a drain) starts new series and `rate()`
/// loses the counts at the change (`ftdrive_nodes` counts nodes by state).
async fn metrics_targets(_: Authorized, state: web::Data<ApiState>) -> Result<HttpResponse, ApiError> {
    let nodes = state.head.send(Nodes { node: None }).await.map_err(mailbox)?;
    let targets: Vec<serde_json::Value> = nodes.iter().filter_map(sd_target).collect();
    Ok(HttpResponse::Ok().json(targets))
}

fn sd_target(node: &ftdrive::view::NodeView) -> Option<serde_json::Value> {
    let url = reqwest::Url::parse(node.metrics_url.as_deref()?).ok()?;
    let target = format!("{}:{}", url.host_str()?, url.port_or_known_default()?);
    Some(serde_json::json!({
        "targets": [target],
        "labels": {
            "__scheme__": url.scheme(),
            "__metrics_path__": url.path(),
            "node": node.name,
        },
    }))
}

async fn list_nodes(_: Authorized, state: web::Data<ApiState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(state.head.send(Nodes { node: None }).await.map_err(mailbox)?))
}

/// One node as `GET /v1/nodes` lists it.
async fn get_node(
    _: Authorized,
    state: web::Data<ApiState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let node = NodeId::from(name.into_inner());
    let found = state.head.send(Nodes { node: Some(node.clone()) }).await.map_err(mailbox)?;
    match found.into_iter().next() {
        Some(view) => Ok(HttpResponse::Ok().json(view)),
        None => Err(Rejected::NoSuchNode(node).into()),
    }
}

#[derive(Deserialize)]
struct DrainBody {
    deadline_ms: u64,
}

async fn drain_node(
    _: Authorized,
    state: web::Data<ApiState>,
    name: web::Path<String>,
    body: web::Json<Object<DrainBody>>,
) -> Result<HttpResponse, ApiError> {
    let node = NodeId::from(name.into_inner());
    let Object(DrainBody { deadline_ms }) = body.into_inner();
    let (view, set_deadline) = state.head.send(Drain { node, deadline_ms }).await.map_err(mailbox)??;
    Ok(HttpResponse::Ok().json(drain_answer(&view, set_deadline.then_some(deadline_ms))))
}

/// The node after a drain or an undrain: its state and both marks (`cordoned`, the operator's;
/// `leaving`, its agent's); `deadline_ms` only where this drain set the deadline in force (a
/// node already DRAINING keeps its first).
fn drain_answer(view: &NodeView, deadline_ms: Option<u64>) -> serde_json::Value {
    let mut answer = serde_json::json!({
        "node": view.name,
        "state": view.state,
        "draining": view.state == NodeState::Draining,
        "cordoned": view.cordoned,
        "leaving": view.leaving,
    });
    if let Some(deadline_ms) = deadline_ms {
        answer["deadline_ms"] = deadline_ms.into();
    }
    if let Some(problem) = &view.problem {
        answer["problem"] = problem.as_str().into();
    }
    answer
}

async fn undrain_node(
    _: Authorized,
    state: web::Data<ApiState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let node = NodeId::from(name.into_inner());
    let undrained = state.head.send(Undrain { node }).await.map_err(mailbox)??;
    let mut answer = drain_answer(&undrained.view, None);
    // Whether the operator's drain was there to lift (`kubectl uncordon`'s "already uncordoned").
    answer["lifted"] = undrained.lifted.into();
    if undrained.forgotten {
        answer["forgotten"] = true.into();
    }
    Ok(HttpResponse::Ok().json(answer))
}

/// The operator's `ftdrive forget`: answers the node as it was, with `forgotten: true` (and its
/// name as `node` too, the key drain and undrain answer it under).
async fn forget_node(
    _: Authorized,
    state: web::Data<ApiState>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let node = NodeId::from(name.into_inner());
    let view = state.head.send(Forget { node }).await.map_err(mailbox)??;
    let mut answer = serde_json::to_value(&view).map_err(|e| ApiError::Internal(e.to_string()))?;
    answer["node"] = view.name.clone().into();
    answer["forgotten"] = true.into();
    Ok(HttpResponse::Ok().json(answer))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogQuery {
    /// An actor's index, or else
    actor: Option<u32>,
    /// a global rank (its holder's attempt and worker, so with neither of the next two).
    rank: Option<u32>,
    attempt: Option<u32>,
    #[serde(default)]
    offset: u64,
    /// One worker's output instead of the group's.
    local_rank: Option<u32>,
    /// The last lines instead of what follows `offset`.
    tail: Option<u32>,
}

/// The most the head reads of one answer from an agent's log server: an agent serves at most
/// 1 MiB of log at a time; whatever holds the port may not be an agent (a job that killed its
/// agent and took it), and its answer must not grow the head without bound.
const MAX_AGENT_LOG_ANSWER_BYTES: usize = 2 << 20;

enum Bounded {
    Fetch(reqwest::Error),
    TooLarge,
}

/// The body of `response`, unless it passes `limit` bytes.
async fn bounded_body(mut response: reqwest::Response, limit: usize) -> Result<Bytes, Bounded> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(Bounded::Fetch)? {
        if body.len() + chunk.len() > limit {
            return Err(Bounded::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(body))
}

/// Which log a query names: `actor=` (with `attempt=` and `local_rank=` if wanted) or `rank=`,
/// which names an attempt and a worker itself.
fn whose_log(query: &LogQuery) -> Result<WhoseLog, ApiError> {
    match (query.actor, query.rank) {
        (Some(actor), None) => Ok(WhoseLog::Actor { actor, attempt: query.attempt, local_rank: query.local_rank }),
        (None, Some(rank)) if query.attempt.is_none() && query.local_rank.is_none() => Ok(WhoseLog::Rank(rank)),
        (None, Some(rank)) => Err(ApiError::BadRequest(format!(
            "rank={rank} names its holder's attempt and worker: leave out attempt= and local_rank=, or ask by \
             actor= (the answer's x-ftdrive-actor)"
        ))),
        (Some(_), Some(_)) => Err(ApiError::BadRequest(
            "give actor= (an actor's index) or rank= (a global rank, as torchrun's RANK), not both".into(),
        )),
        (None, None) => Err(ApiError::BadRequest(
            "whose log: give actor= (an actor's index) or rank= (a global rank, as torchrun's RANK)".into(),
        )),
    }
}

/// Fetches a slice of an attempt's log from the agent that ran it. Headers say which attempt,
/// where the next read starts, and whether the attempt may still write.
async fn job_logs(
    _: Authorized,
    state: web::Data<ApiState>,
    id: web::Path<String>,
    query: web::Query<LogQuery>,
) -> Result<HttpResponse, ApiError> {
    if query.tail.is_some() && query.offset > 0 {
        return Err(ApiError::BadRequest(
            "offset and tail do not go together: a tail ends the log, and its x-ftdrive-next-offset says where to read on"
                .into(),
        ));
    }
    let job = JobId::from(id.into_inner());
    let locate = LocateLog { job, whose: whose_log(&query)? };
    let source = state.head.send(locate).await.map_err(mailbox)??;
    let unreachable = |e: reqwest::Error| {
        let flag = "`ftdrive head --ca-cert PEM` (the CA that signed the agents' certificates)";
        let trust = crate::tls::Trust { flag, given: state.agent_ca.as_deref() };
        let why = crate::tls::tls_cause("the agent", &source.url, &e, &trust);
        let why = why.unwrap_or_else(|| {
            if e.is_timeout() {
                format!("no answer within {AGENT_REQUEST_TIMEOUT:?}")
            } else {
                e.to_string()
            }
        });
        ApiError::Unavailable(format!("the head cannot reach the agent on {}: {why}", source.node))
    };
    let worker = source.local_rank.map(|l| format!("&local_rank={l}")).unwrap_or_default();
    let tail = query.tail.map(|lines| format!("&tail={lines}")).unwrap_or_default();
    let response = state
        .http
        .get(format!("{}?offset={}{worker}{tail}", source.url, query.offset))
        .bearer_auth(&source.token)
        .send()
        .await
        .map_err(unreachable)?;
    let status = response.status();
    // An agent that skipped a dropped part of the log says where to go on (older ones do not).
    let next_offset = response
        .headers()
        .get(crate::node::logs::NEXT_OFFSET_HEADER)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .filter(|next| *next >= query.offset);
    let bytes = bounded_body(response, MAX_AGENT_LOG_ANSWER_BYTES).await.map_err(|e| match e {
        Bounded::Fetch(e) => unreachable(e),
        Bounded::TooLarge => ApiError::Unavailable(format!(
            "the log server of {} answered more than {MAX_AGENT_LOG_ANSWER_BYTES} bytes: not an ftdrive agent's answer",
            source.node
        )),
    })?;
    let bytes = match status {
        // An attempt just started may not have written its log yet: nothing to show so far.
        reqwest::StatusCode::NOT_FOUND if source.running => Bytes::new(),
        reqwest::StatusCode::NOT_FOUND => {
            return Err(ApiError::NotFound(format!(
                "node {} has no log for attempt {}: its agent deletes an ended attempt's logs after its \
                 --keep-logs-hours (default 168), or its state dir was cleared",
                source.node, source.attempt
            )))
        }
        _ => bytes,
    };
    if !status.is_success() && status != reqwest::StatusCode::NOT_FOUND {
        return Err(ApiError::Unavailable(format!("the agent on {} answered {status}", source.node)));
    }
    let mut answer = HttpResponse::Ok();
    if let Some(local_rank) = source.local_rank {
        answer.insert_header(("x-ftdrive-local-rank", local_rank.to_string()));
    }
    Ok(answer
        .insert_header(("x-ftdrive-actor", source.actor.to_string()))
        .insert_header(("x-ftdrive-attempt", source.attempt.to_string()))
        .insert_header(("x-ftdrive-node", source.node.clone()))
        .insert_header(("x-ftdrive-running", source.running.to_string()))
        .insert_header((
            crate::node::logs::NEXT_OFFSET_HEADER,
            next_offset.filter(|_| status.is_success()).unwrap_or(query.offset + bytes.len() as u64).to_string(),
        ))
        .content_type("text/plain; charset=utf-8")
        .body(bytes))
}

mod object;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;
