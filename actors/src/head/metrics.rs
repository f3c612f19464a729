//! The head's Prometheus metrics (DESIGN §12; every name in `docs/metrics.md`): counters and
//! histograms fed by the events the head already emits and by agents' heartbeats, gauges read
//! from the core's views when scraped, so no gauge can drift from what `status` shows.

use ftdrive::driver::ActorState;
use ftdrive::event::{Event, JobEvent};
use ftdrive::ids::{ActorId, JobId};
use ftdrive::scheduler::QueueClass;
use ftdrive::Head;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::time::Instant;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabel {
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    cause: String,
    budget: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

const QUEUE_CLASSES: [QueueClass; 4] =
    [QueueClass::Replacement, QueueClass::PendingGang, QueueClass::Spare, QueueClass::Elastic];

/// Latencies from 1 ms to about 2 minutes.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

/// The head's metrics, and the few timestamps needed to turn events into latencies. Each map
/// holds at most one entry per live actor or node, and entries of a finished job are dropped.
pub struct HeadMetrics {
    registry: Registry,
    jobs: Family<StateLabel, Gauge>,
    actors: Family<StateLabel, Gauge>,
    nodes: Family<StateLabel, Gauge>,
    unhealthy_nodes: Gauge,
    suspect_nodes: Gauge,
    held_nodes: Gauge,
    starting_actors: Gauge,
    queue_depth: Family<ClassLabel, Gauge>,
    attempts: Family<AttemptLabels, Counter>,
    submissions: Counter,
    placement_seconds: HistogramFamily<ClassLabel>,
    replacement_seconds: Histogram,
    heartbeat_lag_seconds: Histogram,
    agent_restarts: Counter,
    reattached: Counter,
    heartbeat_interval_ms: u64,
    /// Actors are created in SCHEDULING with their job: until one re-enters it, its wait
    /// starts at the submission.
    submitted_at: BTreeMap<JobId, Instant>,
    scheduling_since: BTreeMap<ActorId, Instant>,
    failed_at: BTreeMap<ActorId, Instant>,
}

impl HeadMetrics {
    pub fn new(heartbeat_interval_ms: u64) -> HeadMetrics {
        let mut m = HeadMetrics {
            registry: Registry::with_prefix("ftdrive"),
            jobs: Family::default(),
            actors: Family::default(),
            nodes: Family::default(),
            unhealthy_nodes: Gauge::default(),
            suspect_nodes: Gauge::default(),
            held_nodes: Gauge::default(),
            starting_actors: Gauge::default(),
            queue_depth: Family::default(),
            attempts: Family::default(),
            submissions: Counter::default(),
            placement_seconds: Family::new_with_constructor(latency_histogram),
            replacement_seconds: latency_histogram(),
            heartbeat_lag_seconds: latency_histogram(),
            agent_restarts: Counter::default(),
            reattached: Counter::default(),
            heartbeat_interval_ms,
            submitted_at: BTreeMap::new(),
            scheduling_since: BTreeMap::new(),
            failed_at: BTreeMap::new(),
        };
        m.register();
        m.create_known_series();
        m
    }

    /// Counters and histograms start with a series for every label set the cause table and
    /// the queue classes give, at 0, as Prometheus advises: a series that appears only at its
    /// first event makes `rate()` miss that event and `absent()` alerts fire on a healthy head.
    fn create_known_series(&self) {
        for row in ftdrive::driver::CAUSES {
            let labels = AttemptLabels { cause: row.cause.to_string(), budget: row.budget.to_string() };
            let _ = self.attempts.get_or_create(&labels);
        }
        for class in QUEUE_CLASSES {
            let _ = self.placement_seconds.get_or_create(&ClassLabel { class: label(&class) });
        }
    }

    fn register(&mut self) {
        let r = &mut self.registry;
        r.register("jobs", "Jobs the head holds, by state", self.jobs.clone());
        r.register("actors", "Command actors of held jobs, by state", self.actors.clone());
        r.register(
            "actors_starting",
            "RUNNING actors whose start their agent has not confirmed yet (one that stays points at an agent that cannot start processes)",
            self.starting_actors.clone(),
        );
        r.register("nodes", "Nodes by state", self.nodes.clone());
        r.register(
            "nodes_unhealthy",
            "Nodes whose agents cannot start work (a full disk): given no new work",
            self.unhealthy_nodes.clone(),
        );
        r.register(
            "nodes_suspect",
            "Alive nodes not heard from as they should be (a connection dropped, a heartbeat missed): capacity is held for their bundles until they are heard from or declared DEAD",
            self.suspect_nodes.clone(),
        );
        r.register(
            "nodes_held",
            "Suspect nodes held rather than declared DEAD because the head hears from no node at all (its own network the likelier cause), until one is heard from or --disruption-hold-ms passes",
            self.held_nodes.clone(),
        );
        r.register("queue_depth", "Bundles waiting to be placed, by queue class", self.queue_depth.clone());
        r.register("attempts", "Ended attempts, by cause and the budget charged", self.attempts.clone());
        r.register("job_submissions", "Jobs accepted", self.submissions.clone());
        r.register(
            "placement_seconds",
            "From an actor entering SCHEDULING to its bundle placed, by queue class",
            self.placement_seconds.clone(),
        );
        r.register(
            "replacement_seconds",
            "From an actor's failure to the failed actor (or the spare taking its place) RUNNING again",
            self.replacement_seconds.clone(),
        );
        r.register(
            "heartbeat_lag_seconds",
            "How much later than the heartbeat interval each agent heartbeat arrived",
            self.heartbeat_lag_seconds.clone(),
        );
        r.register("agent_restarts", "Agents that came back and re-attached", self.agent_restarts.clone());
        r.register("reattached_attempts", "Attempts re-attached by restarted agents", self.reattached.clone());
        // As an agent's: counters restart with the head, and this says when it last did.
        let start_time_seconds = Gauge::<i64>::default();
        start_time_seconds.set((crate::paths::unix_ms() / 1000) as i64);
        r.register("head_start_time_seconds", "When this head process started, in Unix seconds", start_time_seconds);
    }

    /// Feeds one event the head emitted at `now`.
    pub fn observe_event(&mut self, event: &Event, now: Instant) {
        match event {
            Event::JobSubmitted { job, .. } => {
                self.submissions.inc();
                self.submitted_at.insert(job.clone(), now);
            }
            Event::Placed { job, actor, class, .. } => {
                let since = self.scheduling_since.remove(actor).or_else(|| self.submitted_at.get(job).copied());
                if let Some(since) = since {
                    let class = ClassLabel { class: label(class) };
                    self.placement_seconds.get_or_create(&class).observe(seconds(since, now));
                }
            }
            Event::AgentRestarted { reattached, .. } => {
                self.agent_restarts.inc();
                self.reattached.inc_by(u64::from(*reattached));
            }
            Event::Job { job, detail } => self.observe_job_event(job, detail, now),
            Event::Released { .. }
            | Event::NodeState { .. }
            | Event::NodeHealth { .. }
            | Event::NodeForgotten { .. } => {}
        }
    }

    fn observe_job_event(&mut self, job: &JobId, detail: &JobEvent, now: Instant) {
        match detail {
            JobEvent::Transition { actor, to: ActorState::Scheduling, .. } => {
                self.scheduling_since.insert(actor.clone(), now);
            }
            JobEvent::Transition { actor, to: ActorState::Running, .. } => self.replaced(actor, now),
            // The spare replaces the failed actor once it runs, after the backoff and, in gang
            // mode, the next cycle's forming: its failure time passes to the spare.
            JobEvent::Promoted { spare, replaces } => {
                if let Some(failed) = self.failed_at.remove(replaces) {
                    self.failed_at.insert(spare.clone(), failed);
                }
            }
            JobEvent::Ledger { entry } => {
                let labels = AttemptLabels { cause: entry.cause.to_string(), budget: entry.budget.to_string() };
                self.attempts.get_or_create(&labels).inc();
                let row = entry.cause.row();
                if row.actor_failed && !row.fails_job {
                    self.failed_at.insert(entry.actor.clone(), now);
                }
            }
            JobEvent::JobState { to, .. } if to.is_terminal() => self.forget_job(job),
            _ => {}
        }
    }

    fn replaced(&mut self, actor: &ActorId, now: Instant) {
        if let Some(failed) = self.failed_at.remove(actor) {
            self.replacement_seconds.observe(seconds(failed, now));
        }
    }

    fn forget_job(&mut self, job: &JobId) {
        self.submitted_at.remove(job);
        self.scheduling_since.retain(|actor, _| &actor.job != job);
        self.failed_at.retain(|actor, _| &actor.job != job);
    }

    /// A session's heartbeat arrived `gap` after its previous one.
    pub fn observe_heartbeat_gap(&mut self, gap: std::time::Duration) {
        let late_ms = gap.as_secs_f64() * 1000.0 - self.heartbeat_interval_ms as f64;
        self.heartbeat_lag_seconds.observe(late_ms.max(0.0) / 1000.0);
    }

    /// The text exposition, with the gauges read from `head` now.
    pub fn render(&mut self, head: &Head, now: ftdrive::time::Instant) -> String {
        self.read_gauges(head, now);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }

    fn read_gauges(&mut self, head: &Head, now: ftdrive::time::Instant) {
        for family in [&self.jobs, &self.actors, &self.nodes] {
            family.clear();
        }
        self.queue_depth.clear();
        self.zero_every_known_label();
        // Straight from the drivers: a view would also work out why each pending job waits.
        let mut starting = 0;
        for job in head.drivers() {
            self.jobs.get_or_create(&StateLabel { state: job.state().to_string() }).inc();
            for actor in job.actors() {
                self.actors.get_or_create(&StateLabel { state: actor.state.to_string() }).inc();
                starting += i64::from(actor.is_starting());
            }
        }
        self.starting_actors.set(starting);
        let (mut unhealthy, mut suspect, mut held) = (0, 0, 0);
        for node in head.node_views(now) {
            self.nodes.get_or_create(&StateLabel { state: label(&node.state) }).inc();
            unhealthy += i64::from(node.problem.is_some());
            suspect += i64::from(node.suspect.is_some());
            held += i64::from(node.suspect.as_ref().is_some_and(|s| s.held));
        }
        self.unhealthy_nodes.set(unhealthy);
        self.suspect_nodes.set(suspect);
        self.held_nodes.set(held);
        for (class, bundles) in head.scheduler().waiting_bundles() {
            self.queue_depth.get_or_create(&ClassLabel { class: label(&class) }).inc_by(i64::from(bundles));
        }
    }

    /// Every state and class a gauge can have, at 0: a series that vanished when it reached 0
    /// would read as "no data" (and defeat `absent()` alerts) rather than 0.
    fn zero_every_known_label(&self) {
        use ftdrive::driver::JobState;
        use ftdrive::scheduler::NodeState;
        for state in JobState::ALL {
            self.jobs.get_or_create(&StateLabel { state: state.to_string() }).set(0);
        }
        let actors = [
            ActorState::Scheduling,
            ActorState::Standby,
            ActorState::Running,
            ActorState::Failing,
            ActorState::TaskCompleted,
            ActorState::Failed,
            ActorState::Stopped,
        ];
        for state in actors {
            self.actors.get_or_create(&StateLabel { state: state.to_string() }).set(0);
        }
        for state in [NodeState::Alive, NodeState::Draining, NodeState::Dead] {
            self.nodes.get_or_create(&StateLabel { state: label(&state) }).set(0);
        }
        for class in QUEUE_CLASSES {
            self.queue_depth.get_or_create(&ClassLabel { class: label(&class) }).set(0);
        }
    }
}

/// A value's name as the API writes it (`"alive"`, `"replacement"`).
fn label<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        other => format!("{other:?}"),
    }
}

fn seconds(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftdrive::driver::{Budget, BudgetKind, Cause, LedgerEntry, Remaining};
    use std::time::Duration;

    fn failure(actor: &ActorId) -> JobEvent {
        let remaining = Remaining { user: Budget::Left(1), system: Budget::Left(1), preemption: Budget::Left(1) };
        let entry = LedgerEntry {
            actor: actor.clone(),
            rank: Some(0),
            attempt: 1,
            cycle: 1,
            node: "n1".into(),
            start_ms: 0,
            end_ms: 1,
            exit_code: Some(1),
            signal: None,
            cause: Cause::UserError,
            evidence: "process exited with code 1".into(),
            budget: BudgetKind::User,
            remaining,
        };
        JobEvent::Ledger { entry }
    }

    fn running(actor: &ActorId) -> JobEvent {
        let (from, to) = (ActorState::Scheduling, ActorState::Running);
        JobEvent::Transition { actor: actor.clone(), from, to, attempt: 1, cycle: 2, rank: Some(0), node: None }
    }

    /// With a spare, the replacement is the spare RUNNING, not its promotion: the backoff and
    /// the cycle's forming in between are part of the time a job runs short.
    #[test]
    fn a_promoted_spare_s_replacement_ends_when_the_spare_runs() {
        let mut m = HeadMetrics::new(1000);
        let job = JobId::new("j1");
        let (failed, spare) = (ActorId::new(job.clone(), 0), ActorId::new(job.clone(), 2));
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut feed = |detail, t| m.observe_event(&Event::Job { job: job.clone(), detail }, t);
        feed(failure(&failed), at(0));
        feed(JobEvent::Promoted { spare: spare.clone(), replaces: failed.clone() }, at(0));
        feed(running(&spare), at(2_500));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &m.registry).unwrap();
        assert!(text.contains("ftdrive_replacement_seconds_sum 2.5\n"), "{text}");
        assert!(text.contains("ftdrive_replacement_seconds_count 1\n"), "{text}");
    }
}
