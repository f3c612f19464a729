//! `ftdrive status [JOB]`: every job, or one job with its actors and attempt ledger.

use super::args::{Output, StatusArgs};
use super::client::Client;
use super::error::{CliError, Outcome};
use super::follow::{self, OnInterrupt};
use super::out::{self, Progress};
use super::render;
use ftdrive::view::JobView;

pub fn run(args: StatusArgs) -> Result<Outcome, CliError> {
    let client = Client::connect(&args.out.head)?;
    super::block_on(async move {
        match args.job {
            Some(job) if args.follow => return follow_to_the_end(&client, &job, args.out.output).await,
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

/// `--follow`: what `submit` prints while it follows, and the job's outcome as the exit code
/// (`kubectl wait`, `ray job logs -f`); with `--output json`, the final job on stdout.
async fn follow_to_the_end(client: &Client, job: &str, output: Output) -> Result<Outcome, CliError> {
    let progress = if output == Output::Json { Progress::Stderr } else { Progress::Stdout };
    let outcome = follow::follow(client, job, OnInterrupt::Detach, progress).await?;
    if output == Output::Json {
        let view: JobView = client.get(&format!("/v1/jobs/{job}")).await?;
        out::json(&view)?;
    }
    Ok(outcome)
}
