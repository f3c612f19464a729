//! `ftdrive head`: the head-node daemon, until SIGTERM or SIGINT.

use super::args::HeadArgs;
use super::error::{CliError, Outcome};
use crate::head::{self, ServeOptions};
use crate::paths;
use ftdrive::HeadConfig;

pub fn run(args: HeadArgs) -> Result<Outcome, CliError> {
    super::init_logging();
    let state_dir = args.state_dir.unwrap_or_else(paths::default_state_dir);
    let config = HeadConfig {
        heartbeat_interval_ms: args.heartbeat_interval_ms,
        node_timeout_ms: args.node_timeout_ms,
        starvation_ms: args.starvation_ms,
        ..HeadConfig::default()
    };
    config.validate().map_err(CliError::BadInput)?;
    let token = paths::head_token(&state_dir)
        .map_err(|e| CliError::Failed(format!("cannot write the token into {}: {e}", state_dir.display())))?;
    super::block_on(async move {
        let options = ServeOptions {
            listen: args.listen.clone(),
            state_dir: state_dir.clone(),
            config,
            token,
            handle_signals: true,
            first_job_number: 1,
        };
        let (server, running) =
            head::serve(options).map_err(|e| CliError::Failed(format!("cannot listen on {}: {e}", args.listen)))?;
        tracing::info!(
            "head listening on http://{}; token in {} (or $FTDRIVE_TOKEN)",
            server.addr,
            paths::token_file(&state_dir).display()
        );
        running.await.map_err(|e| CliError::Failed(e.to_string()))?;
        tracing::info!("head stopped");
        Ok(Outcome::Done)
    })
}
