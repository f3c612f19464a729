//! `ftdrive logs JOB [--actor A] [--attempt N] [--local-rank L] [--follow]`: an attempt's
//! output (stdout and stderr together; of several workers per node, their lines interleaved,
//! each prefixed `[rankR]: `), or one worker's, fetched through the head from the agent that
//! ran it.

use super::args::LogsArgs;
use super::client::Client;
use super::error::{CliError, Outcome};
use super::out;
use super::reconnect::{is_passing, until_answered};
use ftdrive::view::JobView;
use std::time::Duration;

const POLL_MS: u64 = 300;

pub fn run(args: LogsArgs) -> Result<Outcome, CliError> {
    let client = Client::connect(&args.head)?;
    super::block_on(async move {
        let view: JobView = client.get(&format!("/v1/jobs/{}", args.job)).await?;
        if let Some(local_rank) = args.local_rank.filter(|l| *l >= view.nproc_per_node) {
            return Err(CliError::BadInput(format!(
                "--local-rank {local_rank}: {} runs {} worker(s) per actor, local ranks 0 to {}",
                view.id,
                view.nproc_per_node,
                view.nproc_per_node - 1
            )));
        }
        let actors: Vec<u32> = match &args.actor {
            Some(actor) => vec![actor_index(actor, &view)?],
            None => view.actors.iter().enumerate().filter(|(_, a)| a.attempt > 0).map(|(i, _)| i as u32).collect(),
        };
        if actors.is_empty() {
            return Err(CliError::Failed(format!("no actor of {} has started yet", view.id)));
        }
        let headers = actors.len() > 1;
        for actor in actors {
            let which = Which { actor, attempt: args.attempt, local_rank: args.local_rank };
            print_attempt(&client, &view.id, which, args.follow, headers).await?;
        }
        Ok(Outcome::Done)
    })
}

/// `j1/2` or `2`.
fn actor_index(actor: &str, view: &JobView) -> Result<u32, CliError> {
    let index = actor.rsplit('/').next().and_then(|i| i.parse::<u32>().ok());
    index.filter(|i| (*i as usize) < view.actors.len()).ok_or_else(|| {
        CliError::BadInput(format!(
            "--actor `{actor}`: {} has actors {}/0 to {}/{}",
            view.id,
            view.id,
            view.id,
            view.actors.len().saturating_sub(1)
        ))
    })
}

/// Whose output: an actor's attempt (default the latest), all its workers or one.
struct Which {
    actor: u32,
    attempt: Option<u32>,
    local_rank: Option<u32>,
}

/// Where a follower stands: which attempt it reads and how far. The first answer names the
/// attempt when none was asked for; from then on the follower keeps to it, so that an attempt
/// started meanwhile (a retry, or one that began while the head was restarting) is never read
/// at the byte offset of the one before. A new attempt is followed by asking again, as
/// `kubectl logs -f` ends with its container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cursor {
    attempt: Option<u32>,
    offset: u64,
}

impl Cursor {
    fn advance(&mut self, chunk_attempt: u32, next_offset: u64) {
        self.attempt.get_or_insert(chunk_attempt);
        self.offset = next_offset;
    }
}

async fn print_attempt(client: &Client, job: &str, which: Which, follow: bool, header: bool) -> Result<(), CliError> {
    let Which { actor, attempt, local_rank } = which;
    let mut at = Cursor { attempt, offset: 0 };
    let mut printed_header = false;
    loop {
        let Cursor { attempt, offset } = at;
        let chunk = match client.log_chunk(job, actor, attempt, local_rank, offset).await {
            Err(e) if follow && is_passing(&e) => {
                until_answered(e, || client.log_chunk(job, actor, attempt, local_rank, offset)).await?
            }
            answer => answer?,
        };
        if header && !printed_header {
            out::line(&format!("==> {job}/{actor} attempt {} on {} <==", chunk.attempt, chunk.node))?;
            printed_header = true;
        }
        out::bytes(&chunk.bytes)?;
        let more = !chunk.bytes.is_empty();
        at.advance(chunk.attempt, chunk.next_offset);
        if more {
            continue;
        }
        if !follow || !chunk.running {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::Cursor;

    #[test]
    fn a_follower_keeps_to_the_attempt_it_began_reading() {
        let mut at = Cursor { attempt: None, offset: 0 };
        at.advance(1, 120);
        assert_eq!(at, Cursor { attempt: Some(1), offset: 120 }, "the latest attempt, once named, is pinned");
        at.advance(2, 0);
        assert_eq!(at.attempt, Some(1), "an answer can never move a follower to another attempt");
    }

    #[test]
    fn an_asked_for_attempt_is_kept() {
        let mut at = Cursor { attempt: Some(3), offset: 0 };
        at.advance(3, 40);
        assert_eq!(at, Cursor { attempt: Some(3), offset: 40 });
    }
}
