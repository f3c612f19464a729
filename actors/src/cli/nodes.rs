//! `ftdrive nodes`: every node the head has seen.

use super::args::{Output, OutputArgs};
use super::client::Client;
use super::error::{CliError, Outcome};
use super::render;
use ftdrive::view::NodeView;

pub fn run(args: OutputArgs) -> Result<Outcome, CliError> {
    let client = Client::connect(&args.head)?;
    super::block_on(async move {
        let nodes: Vec<NodeView> = client.get("/v1/nodes").await?;
        match args.output {
            Output::Json => println!("{}", serde_json::to_string_pretty(&nodes).expect("views serialize")),
            Output::Text => print!("{}", render::nodes_table(&nodes)),
        }
        Ok(Outcome::Done)
    })
}
