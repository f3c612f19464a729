//! ftdrive's deterministic core: the placement-group scheduler, the command-actor driver with
//! its retry budgets and ledger, and the head state machine that composes them.
//!
//! Nothing here performs IO, reads a clock or draws OS randomness. Every state machine has
//! the shape `handle(now, input)` / `handle_timeout(now)` / `poll_effect()` / `poll_timeout()`;
//! time is a value passed in, randomness comes from a seed, and every map iterates in a fixed
//! order. The daemon (`ftdrive-actors`) and the simulator drive the very same code.

pub mod agent;
pub mod config;
pub mod event;
pub mod ids;
pub mod protocol;
pub mod resources;
pub mod scheduler;
pub mod spec;
pub mod time;

pub use config::HeadConfig;
pub use event::Event;
pub use ids::{ActorId, ActorIx, JobId, NodeId};
pub use resources::{Labels, Resources};
pub use spec::JobSpec;
pub use time::Instant;
pub mod driver;
pub mod head;
pub mod view;

pub use head::{Effect, Head, Input, Rejected, Reply};
pub mod sim;
