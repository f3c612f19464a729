//! The agent's log server: each attempt's combined stdout and stderr (of a group of several
//! workers, their lines interleaved with a rank prefix), or one worker's, read from an offset
//! so that a follower can poll for what is new. It takes the agent's own credential.

use crate::paths::Credential;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use std::net::{IpAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Most bytes one read returns.
const MAX_CHUNK: u64 = 1 << 20;
/// Where the next read of a log starts: past what an answer holds, and past a dropped part of
/// the log it skipped (`logcap`), so not always the offset asked plus the bytes answered.
pub const NEXT_OFFSET_HEADER: &str = "x-ftdrive-next-offset";

/// Where an attempt's log lives under the agent's state directory.
pub fn log_path(state_dir: &Path, job: &str, actor: u32, attempt: u32) -> Option<PathBuf> {
    safe_component(job)
        .then(|| state_dir.join("logs").join(job).join(actor.to_string()).join(format!("attempt-{attempt}.log")))
}

/// Job ids are checked by the head, but a path component from the network is checked again.
pub fn safe_component(part: &str) -> bool {
    !part.is_empty()
        && part != "."
        && part != ".."
        && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

struct LogState {
    dir: PathBuf,
    credential: Credential,
    head: HeadToken,
    metrics: super::metrics::AgentMetrics,
}

/// The token the head presents here in this agent's session (its welcome gives it): the head
/// never sends the agent token to a log server, where a job that killed its agent and took the
/// port would take it (DESIGN §11). Replaced at each welcome.
#[derive(Clone, Default)]
pub struct HeadToken(Arc<std::sync::RwLock<Option<String>>>);

impl HeadToken {
    pub fn set(&self, token: Option<String>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = token.filter(|t| !t.is_empty());
    }

    fn matches(&self, given: &str) -> bool {
        let token = self.0.read().unwrap_or_else(|e| e.into_inner());
        token.as_deref().is_some_and(|t| crate::paths::constant_time_eq(given.as_bytes(), t.as_bytes()))
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LogQuery {
    #[serde(default)]
    offset: u64,
    /// One worker's own log instead of the group's.
    local_rank: Option<u32>,
    /// The last lines instead of what follows `offset` (`ftdrive logs --tail`).
    tail: Option<u32>,
}

/// The file a query reads: the attempt's log, or one worker's. A single worker writes only the
/// attempt's log, which is then worker 0's too.
fn chosen_file(attempt_log: PathBuf, local_rank: Option<u32>) -> PathBuf {
    match local_rank {
        None => attempt_log,
        Some(rank) => {
            let own = super::workers::worker_log(&attempt_log, rank);
            if rank == 0 && !own.exists() {
                attempt_log
            } else {
                own
            }
        }
    }
}

/// The address the log server binds for `--addr`: an IP as given, loopback for `localhost`,
/// else the first address the name resolves to (never every interface).
pub fn bind_ip(addr: &str) -> std::io::Result<IpAddr> {
    if let Ok(ip) = addr.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        return Ok(ip);
    }
    if addr.eq_ignore_ascii_case("localhost") {
        return Ok(IpAddr::from([127, 0, 0, 1]));
    }
    let mut resolved = (addr, 0).to_socket_addrs()?;
    let first = resolved.next().ok_or_else(|| std::io::Error::other(format!("{addr} resolves to no address")))?;
    Ok(first.ip())
}

/// Marks every answer of an agent's log server, so that a client pointed at one by mistake
/// can say it is an agent's and not the head.
pub const SERVER_HEADER: &str = "x-ftdrive-server";
pub const AGENT_SERVER: &str = "agent";

/// Connections the log server takes at once: its clients are the head (a few per log being
/// read) and a metrics scraper, and every one beyond waits to be accepted rather than take a
/// descriptor an attempt needs to start.
const MAX_CONNECTIONS: usize = 256;

/// Starts the log server on `bind` (port 0: one the system picks), HTTPS when `tls` is given;
/// returns its base URL and the server to run.
pub fn serve(
    bind: (IpAddr, u16),
    state_dir: PathBuf,
    (credential, head): (Credential, HeadToken),
    metrics: super::metrics::AgentMetrics,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> std::io::Result<(String, actix_web::dev::Server)> {
    let state = web::Data::new(LogState { dir: state_dir, credential, head, metrics });
    let server = HttpServer::new(move || {
        App::new()
            .wrap(actix_web::middleware::DefaultHeaders::new().add((SERVER_HEADER, AGENT_SERVER)))
            .app_data(state.clone())
            .route("/v1/logs/{job}/{actor}/{attempt}", web::get().to(read_log))
            .route("/metrics", web::get().to(metrics_text))
            .route("/metrics", web::head().to(metrics_text))
            .default_service(web::to(no_such_route))
    })
    .workers(1)
    .max_connections(crate::connections::per_worker(crate::connections::open_file_limit(), 1, MAX_CONNECTIONS))
    .tcp_nodelay(true)
    .disable_signals()
    .shutdown_timeout(1);
    let cannot_listen = |e: std::io::Error| {
        let fix = match bind.1 {
            0 => "check --addr".to_string(),
            port => format!("stop what holds port {port}, or give another --log-port (0: any)"),
        };
        std::io::Error::new(
            e.kind(),
            format!("cannot listen on {}:{} for logs and metrics: {e}; {fix}", bind.0, bind.1),
        )
    };
    let (server, scheme) = match tls {
        Some(tls) => (server.bind_rustls_0_23(bind, (*tls).clone()).map_err(cannot_listen)?, "https"),
        None => (server.bind(bind).map_err(cannot_listen)?, "http"),
    };
    let bound = *server.addrs().first().ok_or_else(|| std::io::Error::other("no address bound"))?;
    Ok((format!("{scheme}://{bound}"), server.run()))
}

/// Whether the request carries the head's token of this session, or the agent's own
/// credential (an operator's scraper).
fn authorized(req: &HttpRequest, state: &LogState) -> bool {
    let given = crate::paths::bearer_token(req.headers());
    let Some(given) = given else { return false };
    state.head.matches(given)
        || state.credential.read().is_ok_and(|token| crate::paths::constant_time_eq(given.as_bytes(), token.as_bytes()))
}

/// 401, saying which credential opens this door. An agent never holds the client token, so it
/// cannot tell that one apart (and answer 403, as the head does): the hint names both.
fn unauthorized() -> HttpResponse {
    let error = "missing or wrong bearer token: an agent's logs and metrics take the agent token \
                 ($FTDRIVE_AGENT_TOKEN or the `agent-token` file in the head's state dir), not the client token";
    HttpResponse::Unauthorized().json(serde_json::json!({ "error": error }))
}

/// Every error body is JSON, here as at the head (DESIGN §11).
async fn no_such_route() -> HttpResponse {
    let error = "no such route on an agent's log server: it serves /v1/logs/JOB/ACTOR/ATTEMPT and /metrics";
    HttpResponse::NotFound().json(serde_json::json!({ "error": error }))
}

async fn metrics_text(req: HttpRequest, state: web::Data<LogState>) -> HttpResponse {
    if !authorized(&req, &state) {
        return unauthorized();
    }
    let (content_type, body) = crate::exposition::answer(req.headers(), state.metrics.render());
    HttpResponse::Ok().content_type(content_type).body(body)
}

/// The path and query are read after the token is checked (a caller without it learns
/// nothing), and a bad one is a JSON error as every other (actix's own were plain text).
async fn read_log(req: HttpRequest, state: web::Data<LogState>) -> HttpResponse {
    if !authorized(&req, &state) {
        return unauthorized();
    }
    let bad = |what: String| HttpResponse::BadRequest().json(serde_json::json!({ "error": what }));
    let number = |name: &str| req.match_info().get(name).and_then(|v| v.parse::<u32>().ok());
    let job = req.match_info().get("job").unwrap_or_default();
    let (Some(actor), Some(attempt)) = (number("actor"), number("attempt")) else {
        return bad("bad path: it is /v1/logs/JOB/ACTOR/ATTEMPT, ACTOR and ATTEMPT whole numbers".into());
    };
    let query = match web::Query::<LogQuery>::from_query(req.query_string()) {
        Ok(query) => query,
        Err(e) => return bad(format!("bad query: {e}; offset, local_rank and tail are whole numbers, 0 or more")),
    };
    let Some(file) = log_path(&state.dir, job, actor, attempt) else {
        return bad("bad job id".into());
    };
    let file = chosen_file(file, query.local_rank);
    let read =
        match query.tail {
            Some(_) if query.offset > 0 => return bad(
                "bad query: offset and tail do not go together (a tail ends the log; its answer says where to read on)"
                    .into(),
            ),
            Some(lines) => super::logcap::read_tail(&file, lines, MAX_CHUNK),
            None => super::logcap::read_from(&file, query.offset, MAX_CHUNK),
        };
    match read {
        Ok((bytes, next)) => HttpResponse::Ok()
            .insert_header((NEXT_OFFSET_HEADER, next.to_string()))
            .content_type("text/plain; charset=utf-8")
            .body(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            HttpResponse::NotFound().json(serde_json::json!({"error": format!("no log at {}", file.display())}))
        }
        Err(e) => HttpResponse::InternalServerError().json(serde_json::json!({"error": e.to_string()})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_refuse_traversal() {
        let dir = Path::new("/state");
        assert_eq!(log_path(dir, "j1", 2, 3), Some(PathBuf::from("/state/logs/j1/2/attempt-3.log")));
        assert_eq!(log_path(dir, "..", 0, 1), None);
        assert_eq!(log_path(dir, "a/b", 0, 1), None);
    }

    #[test]
    fn binds_the_address_given_never_every_interface() {
        assert_eq!(bind_ip("10.1.2.3").unwrap(), IpAddr::from([10, 1, 2, 3]));
        assert_eq!(bind_ip("::1").unwrap(), "::1".parse::<IpAddr>().unwrap());
        assert_eq!(bind_ip("[::1]").unwrap(), "::1".parse::<IpAddr>().unwrap());
        assert_eq!(bind_ip("localhost").unwrap(), IpAddr::from([127, 0, 0, 1]));
    }
}
