//! Head configuration: failure-detection timeouts, scheduling knobs and the seed.

use serde::{Deserialize, Serialize};

/// Bundles (and rendezvous ports) per node unless configured: 36 agents per machine from the
/// default base (PS-2 in `scheduler/cluster.rs`).
pub const DEFAULT_PORTS_PER_NODE: u16 = 1_000;

/// Everything the head state machine is tuned by. Defaults match DESIGN §1 and §3.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeadConfig {
    /// How often agents send heartbeats.
    pub heartbeat_interval_ms: u64,
    /// A node that has not been heard from for this long is DEAD.
    pub node_timeout_ms: u64,
    /// How long a blocked queue item lets lower items backfill before it reserves capacity.
    pub starvation_ms: u64,
    /// How long the head, hearing from no node at all, holds nodes whose deadline passed
    /// rather than declaring them DEAD (FD-1 in `head/liveness.rs`); 0 never holds.
    pub disruption_hold_ms: u64,
    /// First port handed out as `MASTER_PORT` on each node.
    pub master_port_base: u16,
    /// Ports per node, hence at most this many bundles per node.
    pub ports_per_node: u16,
    /// Most jobs the head keeps (running and finished); a submission beyond it is refused.
    pub max_jobs: usize,
    /// Most actors of all the jobs the head keeps, together; a submission beyond it is refused.
    /// A small spec asks for many (10,000 nodes, 1,024 spares: 11,024 actors, some 4 MB):
    /// `max_jobs` alone let a client fill the head's memory.
    pub max_actors: usize,
    /// Most nodes the head keeps; a registration beyond it is refused.
    pub max_nodes: usize,
    /// Finished jobs kept for `status` (the oldest beyond this are forgotten).
    pub retain_finished: usize,
    /// How long a finished job is kept.
    pub retain_finished_ms: u64,
    /// DEAD nodes kept for `ftdrive nodes` and a possible return (the longest dead beyond this
    /// are forgotten, except those the operator drained).
    pub retain_dead_nodes: usize,
    /// Most entries one job's ledger keeps; a job whose attempts reach it fails, saying why
    /// (`driver::DEFAULT_MAX_LEDGER_ENTRIES`).
    pub max_ledger_entries: usize,
    /// Seed for backoff jitter; the same seed and inputs give the same effects.
    pub seed: u64,
}

impl Default for HeadConfig {
    fn default() -> Self {
        HeadConfig {
            heartbeat_interval_ms: 1_000,
            node_timeout_ms: 3_000,
            starvation_ms: 60_000,
            disruption_hold_ms: 300_000,
            master_port_base: 29_500,
            ports_per_node: DEFAULT_PORTS_PER_NODE,
            max_jobs: 1_000_000,
            max_actors: 1_000_000,
            max_nodes: 100_000,
            retain_finished: 1_000,
            retain_finished_ms: 7 * 86_400_000,
            retain_dead_nodes: 1_000,
            max_ledger_entries: crate::driver::DEFAULT_MAX_LEDGER_ENTRIES,
            seed: 0,
        }
    }
}

/// The shortest heartbeat interval a head takes.
pub const MIN_HEARTBEAT_INTERVAL_MS: u64 = 10;

impl HeadConfig {
    /// Silence after which a node is suspect (DESIGN §3): a heartbeat was missed, with one
    /// interval of slack for a busy network.
    pub fn suspect_after_ms(&self) -> u64 {
        self.heartbeat_interval_ms.saturating_mul(2)
    }

    /// Silence of every node after which the head takes a passed deadline for its own fault,
    /// not the node's (FD-1 in `head/liveness.rs`).
    pub fn cluster_quiet_ms(&self) -> u64 {
        self.node_timeout_ms / 2
    }

    /// The shortest node timeout the heartbeat interval allows. FD-1 needs
    /// `interval + jitter < cluster_quiet_ms <= timeout - interval - jitter`: a head hearing
    /// every node beat must not take the gap between two beats for a cut, and a cut must be
    /// recognised before the deadline of a node heard an interval before it. Half the timeout
    /// meets both with a jitter of a quarter interval once the timeout is 2.5 intervals.
    pub fn shortest_node_timeout_ms(&self) -> u64 {
        self.heartbeat_interval_ms.saturating_mul(5).div_ceil(2)
    }

    /// Checks relations between fields; returns what is wrong and how to fix it.
    pub fn validate(&self) -> Result<(), String> {
        /// A setting by its config key and the `ftdrive head` flag that sets it.
        fn key(name: &str) -> String {
            format!("config `{name}` (`--{}`)", name.replace('_', "-"))
        }
        if self.heartbeat_interval_ms < MIN_HEARTBEAT_INTERVAL_MS {
            return Err(format!(
                "{} is {}; use {MIN_HEARTBEAT_INTERVAL_MS} or more, such as 1000 (a machine's scheduler and network \
                 jitter by milliseconds, so a shorter one declares live nodes DEAD)",
                key("heartbeat_interval_ms"),
                self.heartbeat_interval_ms
            ));
        }
        if self.node_timeout_ms < self.shortest_node_timeout_ms() {
            return Err(format!(
                "{} is {}; with {} {} it must be at least {} (two and a half heartbeats), and 3 heartbeats is \
                 usual: the head tells a cut of its own network from lost nodes by hearing from no node for half \
                 the timeout (FD-1), and half must outlast the gap between two heartbeats with room for jitter",
                key("node_timeout_ms"),
                self.node_timeout_ms,
                key("heartbeat_interval_ms"),
                self.heartbeat_interval_ms,
                self.shortest_node_timeout_ms()
            ));
        }
        if let Some(why) = crate::spec::delay_too_long(self.disruption_hold_ms) {
            return Err(format!("{} {why}; 300000 (five minutes) is usual", key("disruption_hold_ms")));
        }
        if self.ports_per_node == 0 {
            return Err(format!("{} is 0: a node could hold no bundle; 1000 is usual", key("ports_per_node")));
        }
        let last_port = (u32::from(self.master_port_base) + u32::from(self.ports_per_node)).saturating_sub(1);
        // Below 1024 a rank 0 needs root to listen, and agents do not report what listens
        // there (PS-3).
        if self.master_port_base < FIRST_UNPRIVILEGED_PORT || last_port > 65_535 {
            return Err(format!(
                "{} is {}; with {} {} its ports must stay within 1024..=65535 (below 1024 only root may listen): \
                 use one from 1024 to {}",
                key("master_port_base"),
                self.master_port_base,
                key("ports_per_node"),
                self.ports_per_node,
                65_536 - u32::from(self.ports_per_node)
            ));
        }
        Ok(())
    }

    /// The rendezvous ports one machine's pool holds, from `master_port_base` to 65535 (PS-2):
    /// its agents share them, `ports_per_node` each at most.
    pub fn ports_per_machine(&self) -> u32 {
        65_536 - u32::from(self.master_port_base)
    }
}

/// The lowest port a process that is not root may listen on.
pub const FIRST_UNPRIVILEGED_PORT: u16 = 1_024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rendezvous_ports_stay_within_the_port_range() {
        assert_eq!(HeadConfig::default().validate(), Ok(()));
        let top = HeadConfig { master_port_base: 64_536, ..HeadConfig::default() };
        assert_eq!(top.validate(), Ok(()), "1000 ports end at 65535");
        let over = HeadConfig { master_port_base: 64_537, ..HeadConfig::default() };
        let error = over.validate().unwrap_err();
        assert!(
            error.contains("(`--master-port-base`) is 64537") && error.ends_with("use one from 1024 to 64536"),
            "{error}"
        );
        let zero = HeadConfig { master_port_base: 0, ..HeadConfig::default() };
        assert!(zero.validate().is_err(), "port 0 is no port");
        let privileged = HeadConfig { master_port_base: 1_023, ..HeadConfig::default() };
        assert!(privileged.validate().unwrap_err().contains("is 1023"), "only root may listen there");
        let lowest = HeadConfig { master_port_base: 1_024, ..HeadConfig::default() };
        assert_eq!(lowest.validate(), Ok(()));
        let none = HeadConfig { ports_per_node: 0, ..HeadConfig::default() };
        assert!(none.validate().unwrap_err().contains("(`--ports-per-node`) is 0"));
        let fewer = HeadConfig { master_port_base: 65_000, ports_per_node: 100, ..HeadConfig::default() };
        assert_eq!(fewer.validate(), Ok(()), "fewer ports per node leave room for a higher base");
    }

    #[test]
    fn the_node_timeout_leaves_room_to_recognise_a_cut() {
        let edge = HeadConfig { heartbeat_interval_ms: 1_000, node_timeout_ms: 2_500, ..HeadConfig::default() };
        assert_eq!(edge.validate(), Ok(()), "half of it, 1250 ms, outlasts a beat by a quarter");
        assert!(edge.cluster_quiet_ms() > edge.heartbeat_interval_ms);
        assert!(edge.cluster_quiet_ms() < edge.node_timeout_ms - edge.heartbeat_interval_ms);
        let short = HeadConfig { node_timeout_ms: 2_499, ..edge.clone() };
        let error = short.validate().unwrap_err();
        assert!(
            error.starts_with(
                "config `node_timeout_ms` (`--node-timeout-ms`) is 2499; with config `heartbeat_interval_ms` \
                 (`--heartbeat-interval-ms`) 1000 it must be at least 2500"
            ),
            "{error}"
        );
        let odd = HeadConfig { heartbeat_interval_ms: 333, node_timeout_ms: 833, ..HeadConfig::default() };
        assert_eq!(odd.validate(), Ok(()), "2.5 × 333 rounds up to 833");
        assert!(HeadConfig { node_timeout_ms: 832, ..odd }.validate().is_err());
    }

    #[test]
    fn a_disruption_hold_is_bounded_as_every_delay_is() {
        let off = HeadConfig { disruption_hold_ms: 0, ..HeadConfig::default() };
        assert_eq!(off.validate(), Ok(()), "0 turns the hold off");
        let long = HeadConfig { disruption_hold_ms: 86_400_001, ..HeadConfig::default() };
        let error = long.validate().unwrap_err();
        assert!(error.starts_with("config `disruption_hold_ms` (`--disruption-hold-ms`) is 86400001 ms"), "{error}");
    }
}
