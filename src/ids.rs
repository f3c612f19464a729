//! Names of things: jobs, nodes and command actors. Cheap to clone, ordered, printed as text.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            pub fn new(name: &str) -> Self {
                $name(Arc::from(name))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(name: &str) -> Self {
                $name::new(name)
            }
        }

        impl From<String> for $name {
            fn from(name: String) -> Self {
                $name(Arc::from(name))
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }
    };
}

name_type!(
    /// A job's id (`j1`, or the id a scenario gives it).
    JobId
);

impl JobId {
    /// `n` of a minted id `j<n>` (no leading zero); ids are minted in submission order, so
    /// the numbers order jobs as they were submitted. None for an id a scenario chose.
    pub fn number(&self) -> Option<u64> {
        let digits = self.as_str().strip_prefix('j').filter(|n| !n.starts_with('0'))?;
        digits.parse().ok().filter(|n| *n >= 1)
    }
}
/// A node's name, unique in the cluster. Compared, ordered and printed as its text.
///
/// It also carries a hint: the index a cluster gave this name. Heartbeats from ten thousand
/// nodes make name lookups a measurable cost; a clone of the registered id finds its node
/// without a search. The hint is only ever a guess, checked against the cluster's own record
/// of the name, so no result depends on it.
#[derive(Clone)]
pub struct NodeId(Arc<NodeName>);

struct NodeName {
    text: Box<str>,
    hint: std::sync::atomic::AtomicU32,
}

impl NodeId {
    pub fn new(name: &str) -> Self {
        NodeId(Arc::new(NodeName { text: name.into(), hint: std::sync::atomic::AtomicU32::new(u32::MAX) }))
    }

    pub fn as_str(&self) -> &str {
        &self.0.text
    }

    /// Equal names; decided without reading the text when both share one allocation.
    pub fn same_as(&self, other: &NodeId) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.text == other.0.text
    }

    /// The index a cluster last gave this name, if any (a guess; see the type's doc).
    pub fn hint(&self) -> Option<u32> {
        let hint = self.0.hint.load(std::sync::atomic::Ordering::Relaxed);
        (hint != u32::MAX).then_some(hint)
    }

    pub fn set_hint(&self, index: u32) {
        self.0.hint.store(index, std::sync::atomic::Ordering::Relaxed);
    }
}

impl PartialEq for NodeId {
    fn eq(&self, other: &Self) -> bool {
        self.same_as(other)
    }
}

impl Eq for NodeId {}

impl PartialOrd for NodeId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for NodeId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for NodeId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({:?})", self.as_str())
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for NodeId {
    fn from(name: &str) -> Self {
        NodeId::new(name)
    }
}

impl From<String> for NodeId {
    fn from(name: String) -> Self {
        NodeId::new(&name)
    }
}

impl std::borrow::Borrow<str> for NodeId {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl Serialize for NodeId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for NodeId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(NodeId::new(&text))
    }
}

/// Index of a command actor inside its job: actor `i` is bound to bundle `i`.
pub type ActorIx = u32;

/// A command actor: its job and its index, printed (and written in JSON) as `<job>/<index>`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ActorId {
    pub job: JobId,
    pub index: ActorIx,
}

impl ActorId {
    pub fn new(job: JobId, index: ActorIx) -> Self {
        ActorId { job, index }
    }

    /// Reads `<job>/<index>` back.
    pub fn parse(name: &str) -> Option<ActorId> {
        let (job, index) = name.rsplit_once('/')?;
        (!job.is_empty()).then_some(())?;
        Some(ActorId { job: JobId::new(job), index: index.parse().ok()? })
    }
}

impl fmt::Display for ActorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.job, self.index)
    }
}

impl PartialEq<str> for ActorId {
    fn eq(&self, other: &str) -> bool {
        other.rsplit_once('/').is_some_and(|(job, index)| {
            job == self.job.as_str() && index.parse::<ActorIx>().is_ok_and(|i| i == self.index)
        })
    }
}

impl PartialEq<String> for ActorId {
    fn eq(&self, other: &String) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<&str> for ActorId {
    fn eq(&self, other: &&str) -> bool {
        self == *other
    }
}

impl Serialize for ActorId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ActorId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        ActorId::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("`{text}` is not an actor name such as `j1/0`")))
    }
}

/// Hands out job ids `j1`, `j2`, …, skipping every id seen so far: an id is never given twice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobIdMint {
    next: u64,
}

impl Default for JobIdMint {
    fn default() -> Self {
        JobIdMint { next: 1 }
    }
}

impl JobIdMint {
    /// Starts at `j<first>` (an embedded cluster keeps numbering across runs).
    pub fn starting_at(first: u64) -> Self {
        JobIdMint { next: first.max(1) }
    }

    /// The next unused id; `taken` says whether an id is in use already.
    pub fn mint(&mut self, taken: impl Fn(&JobId) -> bool) -> JobId {
        loop {
            let id = JobId::new(&format!("j{}", self.next));
            self.next += 1;
            if !taken(&id) {
                return id;
            }
        }
    }

    /// An id chosen elsewhere (a scenario, an earlier run): later ids go past it.
    pub fn note(&mut self, id: &JobId) {
        if let Some(n) = id.as_str().strip_prefix('j').and_then(|n| n.parse::<u64>().ok()) {
            self.next = self.next.max(n.saturating_add(1));
        }
    }

    pub fn next_number(&self) -> u64 {
        self.next
    }

    /// Whether `id` was handed out (or noted) before: `j<n>` below the next number.
    pub fn handed_out(&self, id: &JobId) -> bool {
        id.number().is_some_and(|n| n < self.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_compare_by_text_and_keep_a_hint() {
        let a = NodeId::new("n1");
        let b = NodeId::new("n1");
        assert_eq!(a, b);
        assert!(a.same_as(&b) && a < NodeId::new("n2"));
        assert_eq!(a.hint(), None);
        a.clone().set_hint(7);
        assert_eq!((a.hint(), b.hint()), (Some(7), None), "clones share the hint, equal names do not");
        assert_eq!(serde_json::to_string(&a).unwrap(), "\"n1\"");
        assert_eq!(serde_json::from_str::<NodeId>("\"n1\"").unwrap(), a);
    }

    #[test]
    fn actor_ids_round_trip_as_text() {
        let id = ActorId::new(JobId::new("j7"), 3);
        assert_eq!(id.to_string(), "j7/3");
        assert_eq!(ActorId::parse("j7/3"), Some(id.clone()));
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"j7/3\"");
        assert_eq!(serde_json::from_str::<ActorId>("\"j7/3\"").unwrap(), id);
        assert!(id == "j7/3" && id != "j7/4" && id != "j8/3");
        for bad in ["j7", "j7/x", "/3"] {
            assert_eq!(ActorId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn minted_ids_skip_taken_and_noted_ones() {
        let mut mint = JobIdMint::default();
        assert_eq!(mint.mint(|_| false), JobId::new("j1"));
        mint.note(&JobId::new("j5"));
        mint.note(&JobId::new("custom"));
        assert_eq!(mint.mint(|id| id.as_str() == "j6"), JobId::new("j7"));
        assert_eq!(JobIdMint::starting_at(40).mint(|_| false), JobId::new("j40"));
    }

    #[test]
    fn only_a_minted_id_has_a_number() {
        assert_eq!(JobId::new("j12").number(), Some(12));
        for unnumbered in ["j0", "j012", "j", "train", "12", "j1x"] {
            assert_eq!(JobId::new(unnumbered).number(), None, "{unnumbered}");
        }
        let mint = JobIdMint::starting_at(5);
        assert!(mint.handed_out(&JobId::new("j4")) && !mint.handed_out(&JobId::new("j5")));
        assert!(!mint.handed_out(&JobId::new("j04")), "a leading zero is no minted id");
    }
}
