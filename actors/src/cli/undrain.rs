//! `ftdrive undrain NODE`: withdraw an operator's drain; the node takes new work again.

use super::args::{NodeArg, Output};
use super::client::Client;
use super::drain::DrainAnswer;
use super::error::{CliError, Outcome};
use super::out;
use ftdrive::scheduler::NodeState;
use serde_json::json;

pub fn run(args: NodeArg) -> Result<Outcome, CliError> {
    let client = Client::connect(&args.head)?;
    super::block_on(async move {
        let body: serde_json::Value = client.post(&format!("/v1/nodes/{}/undrain", args.node), json!({})).await?;
        if args.output == Output::Json {
            out::json(&body)?;
            return Ok(Outcome::Done);
        }
        let forgotten = body["forgotten"].as_bool() == Some(true);
        // An older head does not say: read as lifted, as it then said.
        let lifted = body["lifted"].as_bool() != Some(false);
        let answer = DrainAnswer::read(body)?;
        let node = &args.node;
        let done = if lifted { format!("undrained {node}") } else { format!("{node} was not drained") };
        let text = match answer.state {
            NodeState::Dead if forgotten => format!(
                "undrained {node}; it was DEAD, and with its drain lifted `--retain-dead-nodes` forgot it: a \
                 machine registering as {node} joins as a new node"
            ),
            NodeState::Alive => match &answer.problem {
                None => format!("{done}: it is ALIVE, and new work may be placed there"),
                Some(problem) => {
                    format!("{done}: it is ALIVE, but is given no new work until its agent can start it: {problem}")
                }
            },
            NodeState::Dead => format!("{done}: it is DEAD, and takes work once its agent registers"),
            NodeState::Draining => format!(
                "{node} is no longer drained by the operator, but its agent announced that the machine is going \
                 away: it stays DRAINING, and takes work once its agent starts anew and registers"
            ),
        };
        out::line(&text)?;
        Ok(Outcome::Done)
    })
}
