//! Property test of the API (DESIGN §11, "every error body is JSON"): 100,000 requests made of
//! random and mutated bodies, paths, queries, methods and credentials, sent to every route of
//! the real application (its routes, limits and error handlers, over a real head actor and
//! store) in process. None may panic, none may answer 5xx, and every error is a JSON object
//! with an `error` string.

use super::tests::InProcess;
use crate::paths::Tokens;
use actix_web::test;
use ftdrive::HeadConfig;
use rand_chacha::rand_core::{Rng as _, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use std::time::Duration;

const CASES: u32 = 100_000;

/// The project's seeded generator (the simulator's too): a failing case replays from its number.
struct Rng(ChaCha8Rng);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const ROUTES: [(&str, &str); 15] = [
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/{id}"),
    ("POST", "/v1/jobs/{id}/stop"),
    ("GET", "/v1/jobs/{id}/events"),
    ("GET", "/v1/jobs/{id}/logs"),
    ("GET", "/v1/events"),
    ("GET", "/v1/nodes"),
    ("POST", "/v1/nodes/{id}/drain"),
    ("POST", "/v1/nodes/{id}/undrain"),
    ("GET", "/v1/agent"),
    ("GET", "/v1/health"),
    ("GET", "/metrics"),
    ("GET", "/v1/metrics/targets"),
    ("GET", "/nowhere/{id}"),
];

const IDS: [&str; 10] = ["j1", "j2", "j999999999999", "n1", "..", "%00", "a%2Fb", "%E2%9C%93", "-", "j1%20x"];

const QUERIES: [&str; 10] = [
    "",
    "actor=0",
    "actor=-1",
    "actor=x",
    "actor=0&attempt=99999999999",
    "actor=0&offset=18446744073709551616",
    "actor=0&local_rank=3",
    "actor=0&actor=1",
    "%ZZ",
    "actor=0&attempt=",
];

/// Values that break types, bounds and parsers.
fn wild_value(rng: &mut Rng) -> Value {
    match rng.below(12) {
        0 => Value::Null,
        1 => json!(-1),
        2 => json!(1e308),
        3 => json!(u64::MAX),
        4 => json!(""),
        5 => json!("x".repeat(rng.below(300))),
        6 => json!([]),
        7 => json!({}),
        8 => json!(true),
        9 => json!("\u{0}"),
        10 => json!(["sh", "-c", "true"]),
        _ => json!({"cpu": -3, "gpu": 0.5}),
    }
}

fn valid_spec() -> Value {
    json!({"spec": {
        "name": "fuzz", "command": ["true"], "min_nodes": 1, "max_nodes": 2, "hot_spares": 0,
        "nproc_per_node": 1, "bundle": {"cpu": 1}, "env": {"A": "b"}, "node_selector": {"zone": "a"},
        "retries": {"user": 1, "system": 2, "preemption": -1}, "priority": 0, "restart": "gang",
        "stop_grace_ms": 1000
    }})
}

/// Replaces one value somewhere in `value` with a wild one.
fn mutate_value(value: &mut Value, rng: &mut Rng) {
    match value {
        Value::Object(map) if !map.is_empty() && rng.below(4) != 0 => {
            let key = map.keys().nth(rng.below(map.len())).cloned().expect("a key");
            mutate_value(map.get_mut(&key).expect("the key"), rng);
        }
        Value::Array(items) if !items.is_empty() && rng.below(4) != 0 => {
            let i = rng.below(items.len());
            mutate_value(&mut items[i], rng);
        }
        _ => *value = wild_value(rng),
    }
}

/// Damages the text itself: flipped, cut, repeated or inserted bytes, or nesting too deep.
fn mutate_text(text: &mut Vec<u8>, rng: &mut Rng) {
    let at = rng.below(text.len().max(1));
    match rng.below(6) {
        0 if !text.is_empty() => text[at] = rng.next() as u8,
        1 => text.truncate(at),
        2 => {
            let piece: Vec<u8> = text[at..].iter().take(rng.below(64)).copied().collect();
            text.splice(at..at, piece);
        }
        3 => {
            let token = *rng.pick(&[&b"null"[..], b"-", b"\"", b"{", b"]", b"1e999", b"\\u0000", b","]);
            text.splice(at..at, token.iter().copied());
        }
        4 => *text = format!("{}{}", "[".repeat(200), "]".repeat(200)).into_bytes(),
        // A body over the bound, now and then (each one costs a megabyte of copying).
        _ if rng.below(200) == 0 => text.extend(std::iter::repeat_n(b' ', super::MAX_BODY_BYTES + 1)),
        _ => text.extend(b"    "),
    }
}

fn body(rng: &mut Rng) -> Vec<u8> {
    let mut value = match rng.below(3) {
        0 => valid_spec(),
        1 => json!({"deadline_ms": 1000}),
        _ => wild_value(rng),
    };
    for _ in 0..rng.below(3) {
        mutate_value(&mut value, rng);
    }
    let mut text = value.to_string().into_bytes();
    for _ in 0..rng.below(3) {
        mutate_text(&mut text, rng);
    }
    text
}

fn request(rng: &mut Rng, tokens: &Tokens) -> test::TestRequest {
    let (method, path) = *rng.pick(&ROUTES);
    let method = if rng.below(10) == 0 { *rng.pick(&["GET", "POST", "PUT", "DELETE", "PATCH"]) } else { method };
    let id = *rng.pick(&IDS);
    let path = path.replace("{id}", id);
    let query = *rng.pick(&QUERIES);
    let uri = if query.is_empty() { path } else { format!("{path}?{query}") };
    let mut req = test::TestRequest::default().method(method.parse().expect("a method")).uri(&uri);
    req = match rng.below(20) {
        0 => req,
        1 => req.insert_header(("authorization", format!("Bearer {}", tokens.agent))),
        2 => req.insert_header(("authorization", "Bearer \u{fffd}x")),
        _ => req.insert_header(("authorization", format!("Bearer {}", tokens.client))),
    };
    if rng.below(8) != 0 {
        req = req.insert_header(("content-type", "application/json"));
    }
    req.set_payload(body(rng))
}

#[actix_web::test]
async fn no_request_panics_or_answers_anything_but_json_errors() {
    // Few jobs, so that listing them stays cheap; submissions past the bound are refused,
    // which is one more error path under test.
    let config = HeadConfig { max_jobs: 100, ..HeadConfig::default() };
    let head = InProcess::start(config, Duration::from_millis(super::EVENTS_KEEPALIVE_MS));
    let tokens = head.tokens.clone();
    let app = test::init_service(head.app()).await;
    let mut rng = Rng(ChaCha8Rng::seed_from_u64(0x5EED));
    let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
    for case in 0..CASES {
        let req = request(&mut rng, &tokens).to_request();
        let (method, uri) = (req.method().clone(), req.uri().clone());
        let response = test::call_service(&app, req).await;
        let status = response.status();
        *statuses.entry(status.as_u16()).or_default() += 1;
        assert!(!status.is_server_error(), "case {case}: {method} {uri} answered {status}");
        if status.is_client_error() {
            let body = test::read_body(response).await;
            let error: Value = serde_json::from_slice(&body)
                .unwrap_or_else(|e| panic!("case {case}: {method} {uri} {status}: not JSON ({e}): {body:?}"));
            assert!(error["error"].is_string(), "case {case}: {method} {uri} {status}: {error}");
        }
    }
    eprintln!("{CASES} requests by status: {statuses:?}");
    assert!(statuses.get(&200).is_some_and(|n| *n > CASES / 20), "enough requests got through: {statuses:?}");
}
