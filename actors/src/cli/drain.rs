//! `ftdrive drain NODE`: the node's work moves elsewhere, and it takes no new work until
//! `ftdrive undrain NODE`, even after a reboot.

use super::args::DrainArgs;
use super::client::Client;
use super::error::{CliError, Outcome};
use super::out;
use serde::Deserialize;
use serde_json::json;

/// The head's answer to a drain or an undrain.
#[derive(Deserialize)]
pub(super) struct DrainAnswer {
    pub state: String,
    pub leaving: bool,
}

pub fn run(args: DrainArgs) -> Result<Outcome, CliError> {
    let client = Client::connect(&args.head)?;
    super::block_on(async move {
        let path = format!("/v1/nodes/{}/drain", args.node);
        let answer: DrainAnswer = client.post(&path, json!({"deadline_ms": args.deadline_ms})).await?;
        let (node, deadline_ms) = (&args.node, args.deadline_ms);
        let now = match answer.state.as_str() {
            "DEAD" => format!("{node} is DEAD; when its agent registers again"),
            _ => {
                format!("draining {node} (deadline {deadline_ms} ms): its work is stopped and moves elsewhere, and it")
            }
        };
        out::line(&format!("{now} takes no new work, across restarts and reboots, until `ftdrive undrain {node}`"))?;
        Ok(Outcome::Done)
    })
}
