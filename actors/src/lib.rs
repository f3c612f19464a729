//! ftdrive's runtime: the command line today; the head daemon and node agent on actix and
//! tokio as they land. Every actor here owns one core state machine and holds no policy.

pub mod cli;
