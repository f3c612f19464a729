//! `ftdrive undrain NODE`: withdraw an operator's drain; the node takes new work again.

use super::args::NodeArg;
use super::client::Client;
use super::error::{CliError, Outcome};
use super::out;
use serde_json::{json, Value};

pub fn run(args: NodeArg) -> Result<Outcome, CliError> {
    let client = Client::connect(&args.head)?;
    super::block_on(async move {
        let _: Value = client.post(&format!("/v1/nodes/{}/undrain", args.node), json!({})).await?;
        out::line(&format!("{} is ALIVE: new work may be placed there", args.node))?;
        Ok(Outcome::Done)
    })
}
