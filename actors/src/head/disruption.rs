//! What the head's log says when it starts holding its nodes through a disruption (FD-1 in
//! the core's `head/liveness.rs`) and when that ends: once each, not once per node held.

use ftdrive::HeadConfig;

/// A line for the head's log.
#[derive(Debug, PartialEq, Eq)]
pub enum Note {
    /// The head holds nodes: worth a warning, since it may be cut off.
    Began(String),
    Ended(String),
}

/// What to log when the number of nodes held goes from `was` to `held`, with `unsettled` of
/// them left to be heard from once the disruption ended (FD-2).
pub fn note(was: usize, (held, unsettled): (usize, usize), config: &HeadConfig) -> Option<Note> {
    match (was, held) {
        (0, 1..) => Some(Note::Began(format!(
            "heard from no node for {} ms, so the head's own network (or its machine) is the likelier fault: \
             holding {held} node(s) whose timeout passed rather than declaring them DEAD, and placing nothing \
             meanwhile; they are declared DEAD in {} ms unless a node is heard from first (--disruption-hold-ms)",
            config.cluster_quiet_ms(),
            config.disruption_hold_ms,
        ))),
        (1.., 0) if unsettled > 0 => Some(Note::Ended(format!(
            "a node was heard from, so the head's network works again: the {unsettled} node(s) still unheard \
             each have {} ms to be heard from before they are declared DEAD, and placing waits until then",
            config.node_timeout_ms
        ))),
        (1.., 0) => Some(Note::Ended(
            "no node is held any more: each was heard from, or declared DEAD when --disruption-hold-ms passed".into(),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disruption_is_noted_when_it_begins_and_when_it_ends_only() {
        let config = HeadConfig::default();
        let Some(Note::Began(began)) = note(0, (2, 0), &config) else { panic!("the first node held is noted") };
        assert!(began.starts_with("heard from no node for 1500 ms"), "{began}");
        assert!(began.contains("holding 2 node(s)") && began.contains("DEAD in 300000 ms"), "{began}");
        assert_eq!(note(2, (5, 0), &config), None, "every node held after the first is in the gauge, not the log");
        let Some(Note::Ended(heard)) = note(5, (0, 4), &config) else { panic!("the end is noted") };
        assert!(heard.contains("the 4 node(s) still unheard each have 3000 ms"), "{heard}");
        assert!(matches!(note(5, (0, 0), &config), Some(Note::Ended(_))), "the hold's bound passed");
        assert_eq!(note(0, (0, 3), &config), None);
    }
}
