//! `ftdrive stop JOB`: stop a job; its processes get SIGTERM, then SIGKILL after the grace.

use super::args::{JobArg, Output};
use super::client::Client;
use super::error::{CliError, Outcome};
use super::out;
use ftdrive::driver::JobState;
use ftdrive::view::JobView;
use serde_json::Value;

pub fn run(args: JobArg) -> Result<Outcome, CliError> {
    let client = Client::connect(&args.head)?;
    super::block_on(async move {
        // Read first, so that a job stopped before is told apart from one this stop ended at
        // once (it held nothing): the head's answer is STOPPED for both.
        let before: JobView = client.get(&format!("/v1/jobs/{}", args.job)).await?;
        let view: JobView = client.post(&format!("/v1/jobs/{}/stop", args.job), Value::Null).await?;
        if args.output == Output::Json {
            out::json(&view)?;
            return Ok(Outcome::Done);
        }
        let text = match view.state {
            // A stop changes nothing once the outcome is decided; saying "stopping" would not be true.
            _ if before.state.is_terminal() => {
                format!("{} ({}) had already ended: {}; nothing to stop", view.id, view.name, view.state)
            }
            JobState::Succeeded | JobState::Failed => {
                format!("{} ({}) ended before the stop reached it: {}", view.id, view.name, view.state)
            }
            JobState::Stopped => format!("{} ({}) is STOPPED", view.id, view.name),
            JobState::Pending | JobState::Running => {
                format!(
                    "stopping {} ({}): its processes get SIGTERM, then SIGKILL after its stop grace",
                    view.id, view.name
                )
            }
        };
        out::line(&text)?;
        Ok(Outcome::Done)
    })
}
