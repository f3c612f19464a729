//! An agent's Prometheus metrics (DESIGN §12; every name in `docs/metrics.md`): its attempts
//! and worker processes, how they ended, and what a restart of the agent re-attached. Served
//! by the log server at `/metrics` with the agent's credential.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// Cheap to clone: every metric is shared, so the agent counts and the log server reads.
#[derive(Clone)]
pub struct AgentMetrics {
    registry: Arc<Registry>,
    attempts: Gauge,
    worker_processes: Gauge,
    started: Counter,
    ended: Family<OutcomeLabel, Counter>,
    spawn_failures: Counter,
    reattached: Counter,
    head_connections: Counter,
}

impl AgentMetrics {
    pub fn new() -> AgentMetrics {
        let (attempts, worker_processes, start_time_seconds): (Gauge, Gauge, Gauge) = Default::default();
        let (started, spawn_failures, reattached, head_connections) =
            (Counter::default(), Counter::default(), Counter::default(), Counter::default());
        let ended = Family::<OutcomeLabel, Counter>::default();
        for outcome in ["succeeded", "failed"] {
            let _ = ended.get_or_create(&OutcomeLabel { outcome }); // at 0 from the start
        }
        let mut r = Registry::with_prefix("ftdrive_agent");
        r.register("attempts", "Attempts this agent supervises now", attempts.clone());
        r.register("worker_processes", "Worker processes (process groups) of those attempts", worker_processes.clone());
        r.register("attempts_started", "Attempts whose workers started", started.clone());
        r.register("attempts_ended", "Attempts that ended, by outcome", ended.clone());
        r.register("spawn_failures", "Attempts that could not be started", spawn_failures.clone());
        r.register("reattached_attempts", "Attempts re-attached when this agent started", reattached.clone());
        r.register(
            "head_connections",
            "Connections made to the head (the first and every reconnect)",
            head_connections.clone(),
        );
        r.register(
            "start_time_seconds",
            "When this agent process started, in Unix seconds",
            start_time_seconds.clone(),
        );
        start_time_seconds.set((crate::paths::unix_ms() / 1000) as i64);
        AgentMetrics {
            registry: Arc::new(r),
            attempts,
            worker_processes,
            started,
            ended,
            spawn_failures,
            reattached,
            head_connections,
        }
    }

    pub fn supervising(&self, attempts: usize, worker_processes: usize) {
        self.attempts.set(attempts as i64);
        self.worker_processes.set(worker_processes as i64);
    }

    pub fn attempt_started(&self) {
        self.started.inc();
    }

    pub fn attempt_ended(&self, succeeded: bool) {
        let outcome = if succeeded { "succeeded" } else { "failed" };
        self.ended.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    pub fn spawn_failed(&self) {
        self.spawn_failures.inc();
    }

    pub fn reattached(&self, attempts: usize) {
        self.reattached.inc_by(attempts as u64);
    }

    pub fn connected(&self) {
        self.head_connections.inc();
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }
}

impl Default for AgentMetrics {
    fn default() -> Self {
        AgentMetrics::new()
    }
}
