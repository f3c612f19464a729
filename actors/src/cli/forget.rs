//! `ftdrive forget NODE`: a DEAD node leaves the head — `ftdrive nodes`, the reasons jobs
//! wait, the state database. A node that registers in its name later is a new one.

use super::args::{NodeArg, Output};
use super::client::Client;
use super::error::{CliError, Outcome};
use super::out;

pub fn run(args: NodeArg) -> Result<Outcome, CliError> {
    let client = Client::connect(&args.head)?;
    super::block_on(async move {
        let body: serde_json::Value = client.delete(&format!("/v1/nodes/{}", args.node)).await?;
        if args.output == Output::Json {
            out::json(&body)?;
            return Ok(Outcome::Done);
        }
        let node = &args.node;
        let cordon = if body["cordoned"].as_bool() == Some(true) { " and its drain" } else { "" };
        out::line(&format!("forgot {node}{cordon}: a node that registers as {node} joins as a new one"))?;
        Ok(Outcome::Done)
    })
}
