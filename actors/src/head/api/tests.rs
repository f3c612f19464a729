//! In-process tests of the API (the real routes, limits and error handlers over a real head
//! actor and store, without the TCP server), and the setup they share with `fuzz.rs`.

use super::{input_limits, json_errors, routes, with_body_deadline, ApiState, KEEPALIVE_HEADER};
use crate::head::store::Store;
use crate::paths::Tokens;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::{test, web, App};
use ftdrive::HeadConfig;
use std::time::Duration;

/// A head actor and its store in a temp dir, and the state its routes are served with.
pub(super) struct InProcess {
    pub tokens: Tokens,
    pub state: web::Data<ApiState>,
    _dir: tempfile::TempDir,
    /// Kept: once it is dropped the head counts as stopping, and event streams end.
    _closing: tokio::sync::watch::Sender<bool>,
}

impl InProcess {
    pub fn start(config: HeadConfig, events_keepalive: Duration) -> InProcess {
        // tmpfs where there is one: submissions are fsynced like any other.
        let base = ["/dev/shm", "/tmp"].into_iter().find(|d| std::path::Path::new(d).is_dir()).expect("a temp dir");
        let dir = tempfile::tempdir_in(base).unwrap();
        let (commits_tx, commits) = tokio::sync::mpsc::unbounded_channel();
        let (store, restored) = Store::open(dir.path(), move |commit| {
            let _ = commits_tx.send(commit);
        })
        .unwrap();
        let tokens = Tokens::random().unwrap();
        let head = crate::head::start_actor(config, store, restored, 1, commits);
        let (closing, closing_rx) = tokio::sync::watch::channel(false);
        let http = reqwest::Client::new();
        let state = web::Data::new(ApiState::new(head, tokens.clone(), http, None, closing_rx, events_keepalive));
        InProcess { tokens, state, _dir: dir, _closing: closing }
    }

    /// The application as the head serves it.
    pub fn app(
        &self,
    ) -> App<
        impl ServiceFactory<
            ServiceRequest,
            Config = (),
            Response = ServiceResponse<impl MessageBody>,
            Error = actix_web::Error,
            InitError = (),
        >,
    > {
        App::new().app_data(self.state.clone()).configure(input_limits).wrap(json_errors()).configure(routes)
    }

    pub fn get(&self, uri: &str) -> test::TestRequest {
        let bearer = format!("Bearer {}", self.tokens.client);
        test::TestRequest::get().uri(uri).insert_header(("authorization", bearer))
    }
}

/// Without it a proxy's idle timeout cuts a quiet stream, and a follower of a head that
/// stopped answering (SIGSTOP, a lost machine: no FIN ever comes) waits forever.
#[actix_web::test]
async fn a_quiet_event_stream_gets_a_blank_line_every_keepalive_interval() {
    let head = InProcess::start(HeadConfig::default(), Duration::from_millis(50));
    let app = test::init_service(head.app()).await;
    let response = test::call_service(&app, head.get("/v1/events").to_request()).await;
    assert!(response.status().is_success());
    assert_eq!(response.headers().get(KEEPALIVE_HEADER).unwrap(), "50", "clients learn the interval");
    let mut body = std::pin::pin!(response.into_body());
    for _ in 0..3 {
        let next = futures_util::future::poll_fn(|cx| body.as_mut().poll_next(cx));
        let chunk = tokio::time::timeout(Duration::from_secs(10), next).await.expect("a keep-alive within 10 s");
        let chunk = chunk.expect("the stream goes on").unwrap_or_else(|_| panic!("a readable chunk"));
        assert_eq!(&chunk[..], b"\n");
    }
}

/// A POST's body sent slowly (a byte every 20 s held the connection for ever): cut off with a
/// timed-out error once its limit has passed, which the JSON extractor's error names.
#[actix_web::test]
async fn a_body_that_does_not_arrive_in_time_is_cut_off() {
    use actix_web::dev::ServiceRequest;
    use futures_util::StreamExt;
    let (req, _) = test::TestRequest::post().uri("/v1/jobs").to_http_parts();
    let first = futures_util::stream::once(async { Ok(bytes::Bytes::from_static(b"{\"spec\"")) });
    let stalled = first.chain(futures_util::stream::pending());
    let boxed: std::pin::Pin<Box<dyn futures_util::Stream<Item = _>>> = Box::pin(stalled);
    let mut req = with_body_deadline(ServiceRequest::from_parts(req, boxed.into()), Duration::from_millis(50));
    let mut payload = actix_web::HttpMessage::take_payload(&mut req);
    assert!(payload.next().await.unwrap().is_ok(), "what arrived in time is read");
    let late = tokio::time::timeout(Duration::from_secs(10), payload.next()).await.expect("cut off, not waited for");
    let error = late.expect("an error ends it").unwrap_err();
    let said = super::body_error(actix_web::error::JsonPayloadError::Payload(error), "/v1/jobs").to_string();
    assert!(said.starts_with("the request body did not arrive within 0 s"), "{said}");
    assert!(payload.next().await.is_none(), "and nothing after it");
}

/// Jobs held are a bound that passes (finished jobs are forgotten), so a submission over it is
/// 429 naming the limit, as a follower over its bound is, and the head holds what it held.
#[actix_web::test]
async fn a_submission_over_the_jobs_held_is_429_naming_the_limit() {
    let config = HeadConfig { max_jobs: 1, ..HeadConfig::default() };
    let head = InProcess::start(config, Duration::from_millis(super::EVENTS_KEEPALIVE_MS));
    let app = test::init_service(head.app()).await;
    let spec = serde_json::json!({"spec": {"name": "held", "command": ["true"], "min_nodes": 1, "max_nodes": 1}});
    let submit = || {
        let bearer = format!("Bearer {}", head.tokens.client);
        test::TestRequest::post().uri("/v1/jobs").insert_header(("authorization", bearer)).set_json(&spec)
    };
    let first = test::call_service(&app, submit().to_request()).await;
    assert_eq!(first.status(), 200);
    let over = test::call_service(&app, submit().to_request()).await;
    assert_eq!(over.status(), 429);
    let body: serde_json::Value = test::read_body_json(over).await;
    assert!(body["error"].as_str().unwrap().contains("(`max_jobs`)"), "{body}");
    let jobs: serde_json::Value = test::call_and_read_body_json(&app, head.get("/v1/jobs").to_request()).await;
    assert_eq!(jobs.as_array().map(Vec::len), Some(1), "{jobs}");
}

/// serde's derived structs also read an array of their fields: `[{…spec…}]` was a job, and
/// `[5000]` a drain. Each is refused, saying what the route takes, and nothing changes.
#[actix_web::test]
async fn a_body_that_is_not_an_object_is_refused_naming_what_the_route_takes() {
    let head = InProcess::start(HeadConfig::default(), Duration::from_millis(super::EVENTS_KEEPALIVE_MS));
    let app = test::init_service(head.app()).await;
    let post = |uri: &str, body: &str| {
        let bearer = format!("Bearer {}", head.tokens.client);
        test::TestRequest::post()
            .uri(uri)
            .insert_header(("authorization", bearer))
            .insert_header(("content-type", "application/json"))
            .set_payload(body.to_string())
    };
    let spec = r#"{"name": "arr", "command": ["true"], "min_nodes": 1, "max_nodes": 1}"#;
    for (uri, body, wanted) in [
        ("/v1/jobs", format!("[{spec}]"), r#"send {"spec": {...}}"#),
        ("/v1/jobs", "[1,2]".to_string(), r#"send {"spec": {...}}"#),
        ("/v1/jobs", "null".to_string(), r#"send {"spec": {...}}"#),
        ("/v1/nodes/n1/drain", "[5000]".to_string(), r#"send {"deadline_ms": N}"#),
    ] {
        let answer = test::call_service(&app, post(uri, &body).to_request()).await;
        assert_eq!(answer.status(), 400, "{uri} {body}");
        let said: serde_json::Value = test::read_body_json(answer).await;
        let said = said["error"].as_str().unwrap();
        assert!(said.contains("expected a JSON object") && said.contains(wanted), "{uri} {body}: {said}");
    }
    let jobs: serde_json::Value = test::call_and_read_body_json(&app, head.get("/v1/jobs").to_request()).await;
    assert_eq!(jobs, serde_json::json!([]), "no job was made");
    let accepted = test::call_service(&app, post("/v1/jobs", &format!(r#"{{"spec": {spec}}}"#)).to_request()).await;
    assert_eq!(accepted.status(), 200, "the object form is taken");
}

/// A log asked of an actor that has run nothing says so and why the job waits, not that it
/// has no "attempt 0" that nobody asked for. A log asked by global rank names a rank of the
/// job and nothing else; one no attempt has held yet says so, as the CLI's `--rank` does.
#[actix_web::test]
async fn the_log_of_an_actor_not_started_says_why_the_job_waits() {
    let head = InProcess::start(HeadConfig::default(), Duration::from_millis(super::EVENTS_KEEPALIVE_MS));
    let app = test::init_service(head.app()).await;
    let spec = serde_json::json!({"spec": {"name": "waits", "command": ["true"], "min_nodes": 2, "max_nodes": 3}});
    let bearer = format!("Bearer {}", head.tokens.client);
    let submit = test::TestRequest::post().uri("/v1/jobs").insert_header(("authorization", bearer)).set_json(&spec);
    assert_eq!(test::call_service(&app, submit.to_request()).await.status(), 200);
    for uri in ["/v1/jobs/j1/logs?actor=0", "/v1/jobs/j1/logs?actor=0&attempt=1"] {
        let answer = test::call_service(&app, head.get(uri).to_request()).await;
        assert_eq!(answer.status(), 404, "{uri}");
        let said: serde_json::Value = test::read_body_json(answer).await;
        assert_eq!(
            said["error"],
            "actor j1/0 has not started an attempt yet (the job is PENDING: infeasible: no node has joined the cluster yet)",
            "{uri}"
        );
    }
    for (query, status, said) in [
        ("rank=0", 404, "no attempt of j1 has held rank 0 yet (the job is PENDING)"),
        ("rank=3", 400, "rank 3: j1 has ranks 0 to 2"),
        ("rank=0&attempt=1", 400, "leave out attempt= and local_rank="),
        ("rank=0&local_rank=0", 400, "leave out attempt= and local_rank="),
        ("rank=0&actor=0", 400, "not both"),
        ("offset=0", 400, "whose log: give actor= (an actor's index) or rank="),
        ("rank=-1", 400, "actor, rank, attempt, local_rank, offset: 0 or more"),
    ] {
        let answer = test::call_service(&app, head.get(&format!("/v1/jobs/j1/logs?{query}")).to_request()).await;
        assert_eq!(answer.status(), status, "{query}");
        let answer: serde_json::Value = test::read_body_json(answer).await;
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains(said), "{query}: {error}");
    }
}
