//! Property test of the agent channel (DESIGN §11): 100,000 messages made by mutating real
//! agent messages — registrations, heartbeats, starts, exits, spawn failures, preemption
//! notices about real and made-up nodes and attempts — go through the same decoding the
//! head's sessions use and into the head. None may panic; whatever the head accepts or
//! refuses, its invariants hold, and a stop still ends the job.

mod support;

use ftdrive::driver::JobState;
use ftdrive::head::Input;
use ftdrive::protocol::ToHead;
use rand_chacha::rand_core::{Rng as _, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};
use support::{config, cpu, spec, TestCluster};

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
}

fn wild_value(rng: &mut Rng) -> Value {
    match rng.below(11) {
        0 => json!(0),
        1 => json!(rng.below(5)),
        2 => json!(u64::MAX),
        3 => json!(1.5),
        4 => json!(""),
        5 => json!("n1"),
        6 => json!("n9"),
        7 => json!([]),
        8 => json!({}),
        9 => json!("x".repeat(300)),
        _ => json!({"job": "j1", "actor": rng.below(4), "attempt": rng.below(4), "cycle": rng.below(3)}),
    }
}

/// Changes one field somewhere below the message's top level (its `type` stays, so most
/// mutants still decode and reach the head).
fn mutate(value: &mut Value, rng: &mut Rng) {
    let Value::Object(map) = value else { return };
    let keys: Vec<String> = map.keys().filter(|k| *k != "type").cloned().collect();
    let key = &keys[rng.below(keys.len())];
    mutate_below(map.get_mut(key).expect("the key"), rng);
}

fn mutate_below(value: &mut Value, rng: &mut Rng) {
    match value {
        Value::Object(map) if !map.is_empty() && rng.below(4) != 0 => {
            let key = map.keys().nth(rng.below(map.len())).cloned().expect("a key");
            if rng.below(8) == 0 {
                map.remove(&key);
            } else {
                mutate_below(map.get_mut(&key).expect("the key"), rng);
            }
        }
        Value::Array(items) if !items.is_empty() && rng.below(4) != 0 => {
            let i = rng.below(items.len());
            mutate_below(&mut items[i], rng);
        }
        _ => *value = wild_value(rng),
    }
}

/// Real messages of the running cluster, as JSON.
fn seeds(c: &TestCluster) -> Vec<Value> {
    let key = serde_json::to_value(c.running_of(&"j1".into()).next().expect("a running attempt")).unwrap();
    let status = json!({"code": 1, "signal": null, "signalled_by_agent": false});
    vec![
        json!({"type": "register", "node": "n2", "incarnation": 7, "resources": {"cpu": 1}, "labels": {"zone": "a"},
               "addr": "10.0.0.2", "running": [key], "ended": []}),
        json!({"type": "heartbeat", "node": "n1", "incarnation": 1, "seq": 5, "running": [key]}),
        json!({"type": "started", "node": "n1", "incarnation": 1, "key": key}),
        json!({"type": "exited", "node": "n1", "key": key, "status": status}),
        json!({"type": "spawn_failed", "node": "n3", "key": key, "message": "no such file"}),
        json!({"type": "preemption_notice", "node": "n2", "deadline_ms": 1000}),
    ]
}

#[test]
fn mutated_agent_messages_never_panic_the_head_or_break_its_invariants() {
    let mut c = TestCluster::new(config());
    for n in ["n1", "n2", "n3", "n4"] {
        c.join(n, cpu(1));
    }
    let job = c.submit(spec("target", 2, 3));
    let seeds = seeds(&c);
    while c.head.poll_effect().is_some() {}
    let mut rng = Rng(ChaCha8Rng::seed_from_u64(0xA6E7));
    let (mut decoded, mut accepted) = (0u32, 0u32);
    for case in 0..CASES {
        let mut msg = seeds[rng.below(seeds.len())].clone();
        for _ in 0..1 + rng.below(2) {
            mutate(&mut msg, &mut rng);
        }
        // What a session does with a text frame: decode, or refuse it unread.
        let Ok(msg) = serde_json::from_str::<ToHead>(&msg.to_string()) else { continue };
        decoded += 1;
        if c.head.handle(c.now, Input::from(msg)).is_ok() {
            accepted += 1;
        }
        if case % 64 == 0 {
            c.head.check_invariants();
            tick(&mut c, 50);
        }
    }
    c.head.check_invariants();
    assert!(
        decoded > CASES / 5 && accepted > CASES / 20,
        "the mutations reach the head: {decoded} decoded, {accepted} accepted"
    );
    c.head.handle(c.now, Input::Stop { job: job.clone() }).expect("a stop is accepted");
    tick(&mut c, 60_000);
    c.head.check_invariants();
    let state = c.head.job_view(&job).expect("the job").state;
    assert!(state.is_terminal() && state != JobState::Succeeded, "{state:?}");
}

/// Time passes for the head alone: the simulated agents are left out, since forged
/// registrations make their real messages stale (and they may say so).
fn tick(c: &mut TestCluster, ms: u64) {
    let end = c.now.plus_ms(ms);
    while let Some(at) = c.head.poll_timeout().filter(|at| *at <= end) {
        c.now = at.max(c.now);
        c.head.handle_timeout(c.now);
        while c.head.poll_effect().is_some() {}
    }
    c.now = end;
    while c.head.poll_effect().is_some() {}
}
