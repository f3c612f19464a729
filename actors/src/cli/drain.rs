//! `ftdrive drain NODE`: the node's work moves elsewhere, and it takes no new work until
//! `ftdrive undrain NODE`, even after a reboot.

use super::args::{DrainArgs, Output};
use super::client::Client;
use super::error::{CliError, Outcome};
use super::out;
use ftdrive::scheduler::NodeState;
use serde::Deserialize;
use serde_json::json;

/// The head's answer to a drain or an undrain: the node's state afterwards. (After an
/// undrain, DRAINING means its own agent announced that the machine is leaving.)
#[derive(Deserialize)]
pub(super) struct DrainAnswer {
    pub state: NodeState,
    /// Present only where this drain set the deadline in force.
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    /// What keeps its agent from starting work, if anything.
    #[serde(default)]
    pub problem: Option<String>,
}

impl DrainAnswer {
    pub(super) fn read(body: serde_json::Value) -> Result<DrainAnswer, CliError> {
        serde_json::from_value(body).map_err(|e| CliError::Failed(format!("unexpected answer from the head: {e}")))
    }
}

pub fn run(args: DrainArgs) -> Result<Outcome, CliError> {
    let client = Client::connect(&args.head)?;
    super::block_on(async move {
        let path = format!("/v1/nodes/{}/drain", args.node);
        let body: serde_json::Value = client.post(&path, json!({"deadline_ms": args.deadline_ms})).await?;
        if args.output == Output::Json {
            out::json(&body)?;
            return Ok(Outcome::Done);
        }
        let answer = DrainAnswer::read(body)?;
        let node = &args.node;
        let now = match (answer.state, answer.deadline_ms) {
            (NodeState::Dead, _) => format!("{node} is DEAD; once its agent registers again, it"),
            (NodeState::Alive | NodeState::Draining, Some(deadline_ms)) => {
                format!("draining {node} (deadline {deadline_ms} ms): its work is stopped and moves elsewhere, and it")
            }
            (NodeState::Alive | NodeState::Draining, None) => {
                format!(
                    "{node} was already draining, with the deadline it was first given (a second drain sets none); it"
                )
            }
        };
        out::line(&format!("{now} takes no new work, across restarts and reboots, until `ftdrive undrain {node}`"))?;
        Ok(Outcome::Done)
    })
}
