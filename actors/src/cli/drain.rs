//! `ftdrive drain NODE`: a preemption notice; the node's work moves elsewhere.

use super::args::DrainArgs;
use super::client::Client;
use super::error::{CliError, Outcome};
use super::out;
use serde_json::{json, Value};

pub fn run(args: DrainArgs) -> Result<Outcome, CliError> {
    let client = Client::connect(&args.head)?;
    super::block_on(async move {
        let _: Value =
            client.post(&format!("/v1/nodes/{}/drain", args.node), json!({"deadline_ms": args.deadline_ms})).await?;
        out::line(&format!(
            "draining {} (deadline {} ms): its work is stopped and moves elsewhere; `ftdrive undrain {}` takes \
             the node back into use",
            args.node, args.deadline_ms, args.node
        ))?;
        Ok(Outcome::Done)
    })
}
