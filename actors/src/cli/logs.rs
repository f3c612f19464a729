//! `ftdrive logs JOB [--actor A] [--attempt N] [--local-rank L] [--rank R] [--tail N]
//! [--follow]`: an attempt's output (stdout and stderr together; of several workers per node,
//! their lines interleaved, each prefixed `[rankR]: `), or one worker's, fetched through the
//! head from the agent that ran it.

use super::args::LogsArgs;
use super::client::{Client, LogFrom};
use super::error::{CliError, Outcome};
use super::out;
use super::reconnect::{is_passing, until_answered};
use super::terminal::Sanitizer;
use ftdrive::driver::{Cause, JobState, LedgerEntry};
use ftdrive::view::JobView;
use std::time::Duration;

const POLL_MS: u64 = 300;

pub fn run(args: LogsArgs) -> Result<Outcome, CliError> {
    let client =
        Client::connect(&args.head).map_err(|e| super::local::where_runs_kept_it(e, &args.head, Some(&args.job)))?;
    super::block_on(async move {
        let view: JobView = client.get(&format!("/v1/jobs/{}", args.job)).await?;
        if let Some((local_rank, why)) = args.local_rank.and_then(|l| view.no_such_worker(l).map(|why| (l, why))) {
            return Err(CliError::BadInput(format!("--local-rank {local_rank}: {why}")));
        }
        let (view, wanted, attempt, local_rank) = match args.rank {
            None => {
                let wanted =
                    args.actor.as_deref().map(|actor| actor_index(actor, &view.id, view.actors.len())).transpose()?;
                let view = if args.follow { until(&client, view, |v| started(v, wanted).is_ok()).await? } else { view };
                (view, wanted, args.attempt, args.local_rank)
            }
            Some(rank) => {
                if let Some(why) = view.no_such_rank(rank) {
                    return Err(CliError::BadInput(format!("--rank {rank}: {why}")));
                }
                let view =
                    if args.follow { until(&client, view, |v| v.rank_holder(rank).is_some()).await? } else { view };
                let holder = view.rank_holder(rank).ok_or_else(|| CliError::Failed(rank_not_held(&view, rank)))?;
                (view, Some(holder.actor), Some(holder.attempt), holder.local_rank)
            }
        };
        let actors = match started(&view, wanted) {
            Ok(actors) => actors,
            // Followed to the job's end, which came before any start: its outcome, as any
            // follower's (a job stopped while PENDING is 3, not 1).
            Err(why) if args.follow && view.state.is_terminal() => {
                crate::note!("ftdrive: {why}");
                return Ok(super::follow::outcome(view.state));
            }
            Err(why) => return Err(CliError::Failed(why.to_string())),
        };
        let actors = reached(&view, actors, attempt)?;
        let headers = actors.len() > 1;
        let printer = Printer::new(headers, std::io::IsTerminal::is_terminal(&std::io::stdout()));
        let read_one = |actor: u32| {
            // A follower keeps to the attempt that is the latest now (`Cursor`), even if its
            // first read fails and a retry starts meanwhile.
            let latest = args.follow.then(|| view.actors[actor as usize].attempt);
            let which = Which { actor, attempt: attempt.or(latest), local_rank, tail: args.tail };
            let (client, job, printer) = (&client, &view.id, &printer);
            async move {
                // Every name was checked against the job: what the head still cannot give (a
                // log left on a lost machine) is not the input's fault.
                let read = print_attempt(client, job, which, args.follow, printer).await.map_err(|e| match e {
                    CliError::BadInput(why) => CliError::Failed(why),
                    other => other,
                });
                (actor, read)
            }
        };
        // Followed, every actor at once (one that fails may be on a node other than the first's),
        // their lines under a header whenever the actor changes, as `tail -f` does with files;
        // else one log after the other.
        let reads = if args.follow {
            futures_util::future::join_all(actors.into_iter().map(read_one)).await
        } else {
            let mut reads = Vec::new();
            for actor in actors {
                reads.push(read_one(actor).await);
            }
            reads
        };
        printer.finish()?;
        let (mut unread, mut followed) = (Vec::new(), Vec::new());
        for (actor, read) in reads {
            match read {
                Ok(attempt) => followed.push((actor, attempt)),
                // Of several actors, one whose machine is gone does not hide the others'.
                Err(CliError::Failed(why) | CliError::Unavailable(why)) if headers => {
                    crate::note!("ftdrive: {}/{actor}: {why}", view.id);
                    unread.push(format!("{}/{actor}", view.id));
                }
                Err(other) => return Err(other),
            }
        }
        if !unread.is_empty() {
            return Err(CliError::Failed(format!("could not read the log of {} (said above)", unread.join(", "))));
        }
        if !args.follow {
            return Ok(Outcome::Done);
        }
        followed_outcome(&client, &view, &followed).await
    })
}

/// A follower exits with what became of what it followed (`docs/runtime.md`, exit codes): the job's
/// outcome once the job has ended; else 1 if a followed attempt ended other than completed (the
/// job goes on, say with a retry), 0 if each completed. An attempt's end can reach the ledger
/// after its log stops (a failure waits there for its peers' verdicts): the job is read until
/// its ledger has every followed attempt, or it ends.
async fn followed_outcome(client: &Client, view: &JobView, followed: &[(u32, u32)]) -> Result<Outcome, CliError> {
    let path = format!("/v1/jobs/{}", view.id);
    loop {
        let now: JobView = match client.get(&path).await {
            Err(e) if is_passing(&e) => until_answered(e, || client.get(&path)).await?,
            answer => answer?,
        };
        match now.state {
            JobState::Succeeded => return Ok(Outcome::Succeeded),
            JobState::Failed => return Ok(Outcome::Failed),
            JobState::Stopped => return Ok(Outcome::Stopped),
            _ => {}
        }
        let ends: Option<Vec<&LedgerEntry>> = followed
            .iter()
            .map(|(actor, attempt)| {
                let name = &now.actors[*actor as usize].name;
                now.ledger.iter().find(|e| e.actor == *name && e.attempt == *attempt)
            })
            .collect();
        if let Some(ends) = ends {
            let failed: Vec<&LedgerEntry> = ends.into_iter().filter(|e| e.cause != Cause::Completed).collect();
            for end in &failed {
                crate::note!(
                    "ftdrive: {} attempt {} ended {}; the job goes on (`ftdrive status {} --follow --logs` follows \
                     its next attempts too)",
                    end.actor,
                    end.attempt,
                    end.cause,
                    view.id
                );
            }
            return Ok(if failed.is_empty() { Outcome::Done } else { Outcome::Failed });
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// The actors whose output there is: the one asked for, or every one that has started; or
/// why there is none yet.
fn started(view: &JobView, wanted: Option<u32>) -> Result<Vec<u32>, NotStarted<'_>> {
    let actors: Vec<u32> = (0..view.actors.len() as u32)
        .filter(|i| wanted.is_none_or(|w| w == *i) && view.actors[*i as usize].attempt > 0)
        .collect();
    if actors.is_empty() {
        return Err(NotStarted { view, wanted });
    }
    Ok(actors)
}

/// Why `ftdrive logs` has nothing to show: no attempt has started yet, or none ever will.
struct NotStarted<'a> {
    view: &'a JobView,
    wanted: Option<u32>,
}

impl std::fmt::Display for NotStarted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let view = self.view;
        let (who, flag) = match self.wanted {
            Some(actor) => (format!("{}/{actor} has not", view.id), format!(" --actor {actor}")),
            None => (format!("no actor of {} has", view.id), String::new()),
        };
        if view.state.is_terminal() {
            return write!(f, "{who} started, and the job ended {}", view.state);
        }
        let why = view.waiting.as_deref().or(view.infeasible.as_deref()).map(|w| format!(": {w}")).unwrap_or_default();
        write!(
            f,
            "{who} started yet (the job is {}{why}); `ftdrive logs {}{flag} --follow` waits for it",
            view.state, view.id
        )
    }
}

/// Of `actors`, those that started attempt `attempt` (all, when none is asked for); none is
/// bad input, naming the attempts there are.
fn reached(view: &JobView, actors: Vec<u32>, attempt: Option<u32>) -> Result<Vec<u32>, CliError> {
    let Some(attempt) = attempt else { return Ok(actors) };
    let latest = |a: &u32| view.actors[*a as usize].attempt;
    let most = actors.iter().map(latest).max().unwrap_or(0);
    let whose = match actors[..] {
        [one] => format!("{}/{one} has", view.id),
        _ => format!("the actors of {} have", view.id),
    };
    let (reached, short): (Vec<u32>, Vec<u32>) = actors.into_iter().partition(|a| attempt >= 1 && latest(a) >= attempt);
    if reached.is_empty() {
        return Err(CliError::BadInput(format!("--attempt {attempt}: {whose} attempts 1 to {most}")));
    }
    if !short.is_empty() {
        // Attempts are numbered per actor: say who is left out rather than leave it unsaid.
        let names: Vec<String> = short.iter().map(|a| format!("{}/{a} ({})", view.id, latest(a))).collect();
        crate::note!("ftdrive: no attempt {attempt} of {} (latest attempt in brackets)", names.join(", "));
    }
    Ok(reached)
}

/// `--rank R` of the job's that no attempt has held (an elastic job that never grew to it):
/// why, and what to do.
fn rank_not_held(view: &JobView, rank: u32) -> String {
    let why = view.rank_not_held(rank);
    match view.state.is_terminal() {
        true => why,
        false => format!("{why}; `ftdrive logs {} --rank {rank} --follow` waits for it", view.id),
    }
}

/// Under `--follow`, a job whose actor has not started yet (or whose rank no attempt has
/// held) is watched until `ready` (or the job ends), as `submit` follows a PENDING job; the
/// head may restart meanwhile.
async fn until(client: &Client, mut view: JobView, ready: impl Fn(&JobView) -> bool) -> Result<JobView, CliError> {
    let path = format!("/v1/jobs/{}", view.id);
    while !ready(&view) && !view.state.is_terminal() {
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        view = match client.get(&path).await {
            Err(e) if is_passing(&e) => until_answered(e, || client.get(&path)).await?,
            answer => answer?,
        };
    }
    Ok(view)
}

/// `j1/2` or `2` (an actor of another job, `j3/1`, is not this job's actor 1), of `job`'s
/// `count` actors.
fn actor_index(actor: &str, job: &str, count: usize) -> Result<u32, CliError> {
    let index = match actor.split_once('/') {
        Some((named, index)) if named == job => index,
        _ => actor,
    };
    index.parse::<u32>().ok().filter(|i| (*i as usize) < count).ok_or_else(|| {
        CliError::BadInput(format!("--actor `{actor}`: {job} has actors {job}/0 to {job}/{}", count.saturating_sub(1)))
    })
}

/// Whose output: an actor's attempt (default the latest), all its workers or one; all of it or
/// its last lines.
struct Which {
    actor: u32,
    attempt: Option<u32>,
    local_rank: Option<u32>,
    tail: Option<u32>,
}

/// Where a follower stands: which attempt it reads and from where (a tail first, then
/// offsets, as `tail -n N -f` does). The first answer names the
/// attempt when none was asked for; from then on the follower keeps to it, so that an attempt
/// started meanwhile (a retry, or one that began while the head was restarting) is never read
/// at the byte offset of the one before. A new attempt is followed by asking again, as
/// `kubectl logs -f` ends with its container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cursor {
    attempt: Option<u32>,
    from: LogFrom,
}

impl Cursor {
    fn advance(&mut self, chunk_attempt: u32, next_offset: u64) {
        self.attempt.get_or_insert(chunk_attempt);
        self.from = LogFrom::Offset(next_offset);
    }
}

/// The most of one actor's unfinished line a follower of several holds back.
const MAX_HELD_LINE_BYTES: usize = 64 * 1024;

/// Where the logs of several actors go: each under a `==> j1/0 attempt 1 on n1 <==` header,
/// repeated whenever the output moves to another actor, and only in whole lines, so that
/// actors followed at once never mix within a line. One actor's log goes out as it comes.
struct Printer {
    headers: bool,
    /// Standard output is a terminal: each actor's output goes through a `Sanitizer`.
    terminal: bool,
    state: std::cell::RefCell<Printed>,
}

#[derive(Default)]
struct Printed {
    /// The header of the actor whose lines came last.
    last: Option<String>,
    /// Each actor's unfinished last line, with its header.
    partial: std::collections::BTreeMap<u32, (String, Vec<u8>)>,
    /// The actors whose header went out at least once.
    shown: std::collections::BTreeSet<u32>,
    /// The last byte out ended no line: a line past `MAX_HELD_LINE_BYTES` went out unfinished.
    mid_line: bool,
    /// Each actor's output made safe for a terminal, read by read.
    sanitizers: std::collections::BTreeMap<u32, Sanitizer>,
}

impl Printer {
    fn new(headers: bool, terminal: bool) -> Printer {
        Printer { headers, terminal, state: Default::default() }
    }

    fn print(&self, actor: u32, header: String, bytes: &[u8]) -> Result<(), CliError> {
        let mut state = self.state.borrow_mut();
        let cleaned;
        let bytes = match self.terminal {
            true => {
                cleaned = state.sanitizers.entry(actor).or_default().clean(bytes);
                &cleaned[..]
            }
            false => bytes,
        };
        if !self.headers {
            return out::bytes(bytes);
        }
        let (_, pending) = state.partial.entry(actor).or_insert_with(|| (header.clone(), Vec::new()));
        pending.extend_from_slice(bytes);
        // A progress bar redraws its line with `\r` and may never end it: that ends a line too,
        // and a line longer than a bound goes out unfinished rather than wait.
        let ended = pending.iter().rposition(|b| *b == b'\n' || *b == b'\r').map_or(0, |at| at + 1);
        let whole = if pending.len() > MAX_HELD_LINE_BYTES { pending.len() } else { ended };
        let lines: Vec<u8> = pending.drain(..whole).collect();
        if lines.is_empty() {
            return Ok(());
        }
        Self::print_under(&mut state, actor, header, &lines)
    }

    /// An actor's log ended: its unfinished last line goes out, ended (and its header, for a
    /// log with nothing in it).
    fn end(&self, actor: u32) -> Result<(), CliError> {
        let mut state = self.state.borrow_mut();
        let held = state.sanitizers.remove(&actor).map(|mut s| s.finish()).unwrap_or_default();
        if !self.headers {
            return out::bytes(&held);
        }
        let Some((header, mut rest)) = state.partial.remove(&actor) else { return Ok(()) };
        rest.extend(held);
        if !rest.is_empty() {
            rest.push(b'\n');
        } else if state.shown.contains(&actor) {
            return Ok(());
        }
        Self::print_under(&mut state, actor, header, &rest)
    }

    fn print_under(state: &mut Printed, actor: u32, header: String, bytes: &[u8]) -> Result<(), CliError> {
        if state.last.as_ref() != Some(&header) {
            // A header starts a line of its own, as `tail` puts it, even after a cut line.
            if state.mid_line {
                out::bytes(b"\n")?;
            }
            out::line(&header)?;
            state.last = Some(header);
            state.shown.insert(actor);
        }
        if let Some(last) = bytes.last() {
            state.mid_line = !matches!(last, b'\n' | b'\r');
        }
        out::bytes(bytes)
    }

    /// What no actor ended with a newline (a read that failed midway).
    fn finish(&self) -> Result<(), CliError> {
        let state = self.state.borrow();
        let actors: std::collections::BTreeSet<u32> =
            state.partial.keys().chain(state.sanitizers.keys()).copied().collect();
        drop(state);
        actors.into_iter().try_for_each(|actor| self.end(actor))
    }
}

/// Prints the attempt's output (following it to its end under `--follow`); returns which
/// attempt it was.
async fn print_attempt(
    client: &Client,
    job: &str,
    which: Which,
    follow: bool,
    printer: &Printer,
) -> Result<u32, CliError> {
    let Which { actor, attempt, local_rank, tail } = which;
    let mut at = Cursor { attempt, from: tail.map_or(LogFrom::Offset(0), LogFrom::Tail) };
    let mut header = None;
    loop {
        let Cursor { attempt, from } = at;
        let chunk = match client.log_chunk(job, actor, attempt, local_rank, from).await {
            Err(e) if follow && is_passing(&e) => {
                until_answered(e, || client.log_chunk(job, actor, attempt, local_rank, from)).await?
            }
            answer => answer?,
        };
        let header =
            header.get_or_insert_with(|| format!("==> {job}/{actor} attempt {} on {} <==", chunk.attempt, chunk.node));
        printer.print(actor, header.clone(), &chunk.bytes)?;
        let more = !chunk.bytes.is_empty();
        at.advance(chunk.attempt, chunk.next_offset);
        if more {
            continue;
        }
        if !follow || !chunk.running {
            printer.end(actor)?;
            return Ok(chunk.attempt);
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::{actor_index, Cursor, LogFrom};

    #[test]
    fn an_actor_is_named_by_its_index_or_its_full_name_of_this_job_only() {
        assert_eq!(actor_index("1", "j17", 2).unwrap(), 1);
        assert_eq!(actor_index("j17/1", "j17", 2).unwrap(), 1);
        for other in ["j3/1", "foo/bar/1", "2", "x"] {
            let err = actor_index(other, "j17", 2).unwrap_err().to_string();
            assert!(err.starts_with(&format!("--actor `{other}`: j17 has actors j17/0 to j17/1")), "{err}");
        }
    }

    #[test]
    fn a_follower_keeps_to_the_attempt_it_began_reading() {
        let mut at = Cursor { attempt: None, from: LogFrom::Tail(10) };
        at.advance(1, 120);
        assert_eq!(
            at,
            Cursor { attempt: Some(1), from: LogFrom::Offset(120) },
            "the latest attempt, once named, is pinned"
        );
        at.advance(2, 0);
        assert_eq!(at.attempt, Some(1), "an answer can never move a follower to another attempt");
    }

    #[test]
    fn an_asked_for_attempt_is_kept() {
        let mut at = Cursor { attempt: Some(3), from: LogFrom::Offset(0) };
        at.advance(3, 40);
        assert_eq!(at, Cursor { attempt: Some(3), from: LogFrom::Offset(40) });
    }
}
