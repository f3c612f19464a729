//! `ftdrive submit`: validate the spec locally (bad input exits 2, and no job is created),
//! submit it to the head — or to an embedded local cluster when no head is configured — and
//! follow it to its outcome.

use super::args::{Output, SubmitArgs};
use super::client::Client;
use super::error::{CliError, Outcome};
use super::follow::{self, OnInterrupt};
use super::follow_logs::Wanted;
use super::local;
use super::out::{self, Progress};
use ftdrive::spec::{no_such_rank, JobSpec, Overrides, SpecError};
use ftdrive::view::JobView;
use serde_json::json;
use std::collections::BTreeMap;

pub fn run(args: SubmitArgs) -> Result<Outcome, CliError> {
    let overrides = Overrides {
        name: args.name.clone(),
        min_nodes: args.min_nodes,
        max_nodes: args.max_nodes,
        hot_spares: args.hot_spares,
        nproc_per_node: args.nproc_per_node,
        priority: args.priority,
        run_timeout_ms: args.run_timeout_ms,
        cwd: args.cwd.clone(),
        env: env_once_each(&args.env)?,
    };
    let spec = job_spec(&args, &overrides)?;
    // Checked before anything is submitted: a refused command leaves no job behind.
    if let Some(wanted) = Wanted::from_flag(&args.logs) {
        wanted.check(|rank| no_such_rank("the job", rank, spec.max_nodes, spec.nproc_per_node))?;
    }
    if args.dry_run {
        out::json(&spec)?;
        return Ok(Outcome::Done);
    }
    refuse_local_flags_with_a_head(&args)?;
    if args.no_wait && args.head.head.is_none() {
        return Err(CliError::BadInput(
            "--no-wait needs a head: with none given, the job runs on an embedded cluster that ends with this \
             command; start `ftdrive head` (and agents) and pass --head or set $FTDRIVE_HEAD, or drop --no-wait"
                .into(),
        ));
    }
    super::block_on(async move {
        match &args.head.head {
            Some(_) => submit_and_follow(&Client::connect(&args.head)?, spec, &args, OnInterrupt::Detach).await,
            None => local::run(spec, &args).await,
        }
    })
}

/// The job: its spec file's, or the command line's after `--`, with the flags' overrides.
fn job_spec(args: &SubmitArgs, overrides: &Overrides) -> Result<JobSpec, CliError> {
    let spec = match (&args.job, args.command.is_empty()) {
        (Some(file), true) => {
            let limit = crate::head::MAX_BODY_BYTES as u64;
            let why = "the most a head takes in a submission: shorten its env or command";
            let text = super::read_text_file(file, "job spec", limit, why)?;
            JobSpec::parse(&text, overrides)
        }
        (None, false) => JobSpec::from_command(args.command.clone(), overrides),
        (Some(file), false) => {
            return Err(CliError::BadInput(format!(
                "{} and a command after `--`: give one (the spec has its `command`; `--env` adds variables to it)",
                file.display()
            )))
        }
        (None, true) => {
            return Err(CliError::BadInput(
                "no job given: name a job spec file (`ftdrive submit job.json`, docs/jobspec.md) or give the \
                 command after `--` (`ftdrive submit --nproc-per-node 2 -- python3 train.py`)"
                    .into(),
            ))
        }
    };
    spec.map_err(|e| blame(&e, args))
}

/// The `--env` variables, each named once: one named twice is most likely a typo in one of
/// them, as the spec's own `env` refuses a name given twice.
fn env_once_each(given: &[(String, String)]) -> Result<BTreeMap<String, String>, CliError> {
    let mut env = BTreeMap::new();
    for (name, value) in given {
        if env.insert(name.clone(), value.clone()).is_some() {
            return Err(CliError::BadInput(format!(
                "--env {}: is given twice; give each variable once",
                name.escape_debug()
            )));
        }
    }
    Ok(env)
}

/// `--local-nodes` sizes the embedded cluster, which a configured head replaces: a job sent to
/// a real cluster while the user believes it runs on N local agents is refused, not sent.
fn refuse_local_flags_with_a_head(args: &SubmitArgs) -> Result<(), CliError> {
    match (&args.head.head, args.local_nodes) {
        (Some(head), Some(n)) => Err(CliError::BadInput(format!(
            "--local-nodes {n} sizes the embedded cluster, used only without a head, but a head is given ({head}, from --head or $FTDRIVE_HEAD); drop --local-nodes, or unset $FTDRIVE_HEAD to run locally"
        ))),
        _ => Ok(()),
    }
}

/// A refused spec, blamed on what set the field at fault: a flag that overrode it, else the
/// file (naming any flags that took part, since `min_nodes <= max_nodes` spans both).
fn blame(e: &SpecError, args: &SubmitArgs) -> CliError {
    let mut given: Vec<(String, String)> = [
        ("name", "--name", args.name.clone()),
        ("min_nodes", "--min-nodes", args.min_nodes.map(|v| v.to_string())),
        ("max_nodes", "--max-nodes", args.max_nodes.map(|v| v.to_string())),
        ("hot_spares", "--hot-spares", args.hot_spares.map(|v| v.to_string())),
        ("nproc_per_node", "--nproc-per-node", args.nproc_per_node.map(|v| v.to_string())),
        ("priority", "--priority", args.priority.map(|v| v.to_string())),
        ("run_timeout_ms", "--run-timeout-ms", args.run_timeout_ms.map(|v| v.to_string())),
        ("cwd", "--cwd", args.cwd.clone()),
    ]
    .into_iter()
    .filter_map(|(field, flag, value)| value.map(|v| (field.to_string(), format!("{flag} {v}"))))
    .collect();
    // A variable is named as the spec's checks name it (`env.NAME`, escaped); its value, up
    // to 32 KiB, is left out.
    given.extend(args.env.iter().map(|(name, _)| {
        let name = name.escape_debug();
        (format!("env.{name}"), format!("--env {name}"))
    }));
    let file = match &args.job {
        Some(file) => file.display().to_string(),
        None => "the command after `--`".to_string(),
    };
    CliError::BadInput(match given.iter().find(|(field, _)| e.field == *field) {
        Some((_, flag)) => format!("{flag}: {}", e.message),
        None if given.is_empty() => format!("{file}: {e}"),
        None => {
            let flags: Vec<&str> = given.iter().map(|(_, flag)| flag.as_str()).collect();
            format!("{file}: {e} (with {} from the command line)", flags.join(", "))
        }
    })
}

pub async fn submit_and_follow(
    client: &Client,
    spec: JobSpec,
    args: &SubmitArgs,
    on_interrupt: OnInterrupt,
) -> Result<Outcome, CliError> {
    let view = submit(client, spec).await?;
    follow_submitted(client, &view, args, on_interrupt).await
}

pub async fn submit(client: &Client, spec: JobSpec) -> Result<JobView, CliError> {
    client.post("/v1/jobs", json!({ "spec": spec })).await
}

/// Prints where the accepted job is and follows it to its end, unless `--no-wait`.
pub async fn follow_submitted(
    client: &Client,
    view: &JobView,
    args: &SubmitArgs,
    on_interrupt: OnInterrupt,
) -> Result<Outcome, CliError> {
    if args.no_wait {
        match args.output {
            Output::Json => out::json(&view)?,
            Output::Text => out::line(&format!(
                "submitted {} ({}); follow with `ftdrive status {} --follow`",
                view.id, view.name, view.id
            ))?,
        }
        // Accepted, but it will wait until the cluster changes: a script should not find out later.
        if let Some(why) = &view.infeasible {
            crate::note!("ftdrive: {} waits: {why}", view.id);
        }
        return Ok(Outcome::Done);
    }
    crate::note!("submitted {} ({}) to {}", view.id, view.name, client.base());
    crate::note!("dashboard: {}/#/jobs/{}", client.base(), view.id);
    // With --output json, standard output holds the one document; progress goes to stderr.
    let progress = if args.output == Output::Json { Progress::Stderr } else { Progress::Stdout };
    let followed = follow::follow(client, &view.id, on_interrupt, progress, Wanted::from_flag(&args.logs)).await;
    if followed.is_err() && args.output == Output::Json {
        out::json(&view)?; // the job as accepted: a script reads its id even so
    }
    let outcome = followed.map_err(|e| accepted_anyway(&view.id, e))?;
    if args.output == Output::Json {
        let final_view: JobView = client.get(&format!("/v1/jobs/{}", view.id)).await?;
        out::json(&final_view)?;
    }
    Ok(outcome)
}

/// Following a job the head accepted failed: the error says the job runs on, and is never bad
/// input (exit 2 tells a script that nothing was submitted, and it would submit again).
fn accepted_anyway(job: &str, e: CliError) -> CliError {
    let runs_on = format!("{job} was submitted and runs on; follow it with `ftdrive status {job} --follow`");
    match e {
        CliError::ReaderGone => e,
        CliError::Unreachable(why) => CliError::Unreachable(format!("{why}\n  {runs_on}")),
        CliError::BadInput(why) | CliError::Unavailable(why) | CliError::Failed(why) => {
            CliError::Failed(format!("{why}\n  {runs_on}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_accepted_but_not_followed_is_never_bad_input() {
        let refused = accepted_anyway("j7", CliError::BadInput("the head has 1024 event followers".into()));
        let CliError::Failed(said) = refused else { panic!("exit 1, not 2: {refused:?}") };
        assert!(said.contains("j7 was submitted and runs on; follow it with `ftdrive status j7 --follow`"), "{said}");
        let away = accepted_anyway("j7", CliError::Unreachable("lost the head".into()));
        assert!(matches!(away, CliError::Unreachable(ref m) if m.contains("j7 was submitted")), "{away:?}");
    }
}
