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

/// The printed name of a command actor: `<job>/<index>`.
pub fn actor_name(job: &JobId, actor: ActorIx) -> String {
    format!("{job}/{actor}")
}

/// Splits `<job>/<index>` back into its parts.
pub fn parse_actor_name(name: &str) -> Option<(JobId, ActorIx)> {
    let (job, index) = name.rsplit_once('/')?;
    Some((JobId::new(job), index.parse().ok()?))
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
    fn actor_names_round_trip() {
        let job = JobId::new("j7");
        assert_eq!(actor_name(&job, 3), "j7/3");
        assert_eq!(parse_actor_name("j7/3"), Some((job, 3)));
        assert_eq!(parse_actor_name("j7"), None);
        assert_eq!(parse_actor_name("j7/x"), None);
    }
}
