//! `ftdrive nodes`: every node the head has seen.

use super::args::{Output, OutputArgs};
use super::client::Client;
use super::error::{CliError, Outcome};
use super::out;
use super::render;
use ftdrive::view::NodeView;

pub fn run(args: OutputArgs) -> Result<Outcome, CliError> {
    let client = Client::connect(&args.head)?;
    super::block_on(async move {
        let nodes: Vec<NodeView> = client.get("/v1/nodes").await?;
        let health: serde_json::Value = client.get("/v1/health").await?;
        if health["recovering"] == true {
            // The states below are as the head last wrote them down, not yet heard again.
            crate::note!(
                "note: the head restarted and is waiting for its nodes to report (at most its node timeout); \
                 a node shown ALIVE may not have reported yet"
            );
        }
        match args.output {
            Output::Json => out::json(&nodes)?,
            Output::Text => out::text(&render::nodes_table(&nodes))?,
        }
        Ok(Outcome::Done)
    })
}
