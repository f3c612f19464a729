//! `ftdrive status [JOB]`: every job, or one job with its actors and attempt ledger.

use super::args::{Output, StatusArgs};
use super::client::Client;
use super::error::{CliError, Outcome};
use super::out;
use super::render;
use ftdrive::view::JobView;

pub fn run(args: StatusArgs) -> Result<Outcome, CliError> {
    let client = Client::connect(&args.out.head)?;
    super::block_on(async move {
        match args.job {
            Some(job) => {
                let view: JobView = client.get(&format!("/v1/jobs/{job}")).await?;
                match args.out.output {
                    Output::Json => out::json(&view)?,
                    Output::Text => out::text(&render::job_summary(&view))?,
                }
            }
            None => {
                let views: Vec<JobView> = client.get("/v1/jobs").await?;
                match args.out.output {
                    Output::Json => out::json(&views)?,
                    Output::Text => out::text(&render::jobs_table(&views))?,
                }
            }
        }
        Ok(Outcome::Done)
    })
}
