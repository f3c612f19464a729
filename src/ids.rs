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
name_type!(
    /// A node's name, unique in the cluster.
    NodeId
);

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
    fn actor_names_round_trip() {
        let job = JobId::new("j7");
        assert_eq!(actor_name(&job, 3), "j7/3");
        assert_eq!(parse_actor_name("j7/3"), Some((job, 3)));
        assert_eq!(parse_actor_name("j7"), None);
        assert_eq!(parse_actor_name("j7/x"), None);
    }
}
