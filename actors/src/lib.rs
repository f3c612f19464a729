//! ftdrive's runtime on actix and tokio: the head daemon, the node agent, and the `ftdrive`
//! command line. Every actor here owns one core state machine and holds no policy of its own.

pub mod cli;
pub mod head;
pub mod node;
pub mod paths;
pub mod tls;
