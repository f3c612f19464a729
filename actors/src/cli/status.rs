//! `ftdrive status [JOB]`: every job (`--state`, `--before`, `--limit` filter them), or one job with its
//! actors and attempt ledger.

use super::args::{Output, StatusArgs};
use super::client::Client;
use super::error::{CliError, Outcome};
use super::follow::{self, OnInterrupt};
use super::follow_logs::Wanted;
use super::out::{self, Progress};
use super::render;
use ftdrive::driver::JobState;
use ftdrive::view::JobView;

use crate::head::NEXT_BEFORE_HEADER;

pub fn run(args: StatusArgs) -> Result<Outcome, CliError> {
    let client = Client::connect(&args.out.head)
        .map_err(|e| super::local::where_runs_kept_it(e, &args.out.head, args.job.as_deref()))?;
    super::block_on(async move {
        match args.job {
            Some(job) if args.follow => {
                let logs = Wanted::from_flag(&args.logs);
                return follow_to_the_end(&client, &job, args.out.output, logs).await;
            }
            Some(job) => {
                let view: JobView = client.get(&format!("/v1/jobs/{job}")).await?;
                match args.out.output {
                    Output::Json => out::json(&view)?,
                    Output::Text => out::text(&render::job_summary(&view, crate::paths::unix_ms()))?,
                }
            }
            None => {
                let path = listing_path(&args.state, args.before.as_deref(), args.limit);
                let (views, older): (Vec<JobView>, _) = client.get_with_header(&path, Some(NEXT_BEFORE_HEADER)).await?;
                match args.out.output {
                    Output::Json => out::json(&views)?,
                    Output::Text => out::text(&render::jobs_table(&views, crate::paths::unix_ms()))?,
                }
                // On stderr, as kubectl's "No resources found": the table stays what scripts read.
                if args.out.output == Output::Text {
                    if views.is_empty() {
                        crate::note!("ftdrive: {}", no_jobs(&args.state, args.before.as_deref()));
                    }
                    if let Some(oldest) = older {
                        crate::note!("ftdrive: {}", next_page(&args.state, &oldest, args.limit));
                    }
                }
            }
        }
        Ok(Outcome::Done)
    })
}

/// What an empty listing says: that the head holds no job, or none in the states asked for.
fn no_jobs(states: &[JobState], before: Option<&str>) -> String {
    let before = before.map(|job| format!(" submitted before {job}")).unwrap_or_default();
    if states.is_empty() {
        return match before.is_empty() {
            true => "no jobs (`ftdrive submit JOB.json` submits one)".to_string(),
            false => format!("no jobs{before}"),
        };
    }
    let names: Vec<String> = states.iter().map(JobState::to_string).collect();
    format!("no job{before} is {}", names.join(" or "))
}

/// Below a listing that `--limit` cut: the command that lists the next page, older jobs.
fn next_page(states: &[JobState], oldest: &str, limit: Option<u64>) -> String {
    let mut command = String::from("ftdrive status");
    if !states.is_empty() {
        let names: Vec<String> = states.iter().map(JobState::to_string).collect();
        command.push_str(&format!(" --state {}", names.join(",")));
    }
    if let Some(n) = limit {
        command.push_str(&format!(" --limit {n}"));
    }
    format!("older jobs: `{command} --before {oldest}`")
}

/// `/v1/jobs`, with the filters given.
fn listing_path(states: &[JobState], before: Option<&str>, limit: Option<u64>) -> String {
    let mut query = Vec::new();
    if !states.is_empty() {
        let names: Vec<String> = states.iter().map(JobState::to_string).collect();
        query.push(format!("state={}", names.join(",")));
    }
    if let Some(job) = before {
        query.push(format!("before={job}"));
    }
    if let Some(n) = limit {
        query.push(format!("limit={n}"));
    }
    match query.is_empty() {
        true => "/v1/jobs".to_string(),
        false => format!("/v1/jobs?{}", query.join("&")),
    }
}

/// `--follow`: what `submit` prints while it follows, and the job's outcome as the exit code
/// (`kubectl wait`, `ray job logs -f`); with `--output json`, the final job on stdout.
async fn follow_to_the_end(
    client: &Client,
    job: &str,
    output: Output,
    logs: Option<Wanted>,
) -> Result<Outcome, CliError> {
    if let Some(wanted @ Wanted::Ranks(_)) = &logs {
        let view: JobView = client.get(&format!("/v1/jobs/{job}")).await?;
        wanted.check(|rank| view.no_such_rank(rank))?;
    }
    let progress = if output == Output::Json { Progress::Stderr } else { Progress::Stdout };
    let outcome = follow::follow(client, job, OnInterrupt::Detach, progress, logs).await?;
    if output == Output::Json {
        let view: JobView = client.get(&format!("/v1/jobs/{job}")).await?;
        out::json(&view)?;
    }
    Ok(outcome)
}
