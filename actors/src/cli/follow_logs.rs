//! `submit --logs` and `status --follow --logs`: every attempt's output as it is written,
//! beside the job's events, in whole lines each prefixed with its actor (`[j1/0] `), as
//! `docker compose up` prefixes each service's and torchrun each rank's.

use super::client::{Client, LogFrom};
use super::error::CliError;
use super::out::Progress;
use super::reconnect::is_passing;
use ftdrive::driver::ActorState;
use ftdrive::event::{Event, JobEvent};
use ftdrive::view::JobView;
use futures_util::future::LocalBoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;
use tokio::sync::Notify;

/// How often a follower reads a running attempt's log again when it had nothing new, when few
/// are followed.
const POLL_MS: u64 = 300;
/// The most reads a second of logs that had nothing new, whatever their number: each waits
/// longer than `POLL_MS` when many are followed, so that a job of thousands of ranks followed
/// whole does not cost the head thousands of requests a second. A log read something is read
/// on at once, and one whose attempt changed state is read at once (`Pace::wake`).
const MAX_QUIET_READS_PER_S: u64 = 100;
/// How long a follower waits before asking again while the head or the agent is away.
const AWAY_POLL_MS: u64 = 1_000;
/// The most of one attempt's unfinished line held back (a progress bar that never ends it).
const MAX_HELD_LINE_BYTES: usize = 64 * 1024;
/// Once the job ended, how long its followers get to read what their attempts wrote last.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// Whose output `--logs` prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// Every attempt's, each actor's workers together (`[j1/0] `).
    All,
    /// Those of these global ranks, whichever attempt holds each (`[rankR] `); with several
    /// workers per actor, the worker's own log.
    Ranks(Vec<u32>),
}

impl Wanted {
    /// `--logs` (every attempt's), `--logs=0,8` (those ranks'), or no flag (none).
    pub fn from_flag(flag: &Option<Vec<u32>>) -> Option<Wanted> {
        flag.as_ref().map(|ranks| match ranks.is_empty() {
            true => Wanted::All,
            false => Wanted::Ranks(ranks.clone()),
        })
    }

    /// Refuses a rank asked for that the job does not have (`no_such_rank` says why).
    pub fn check(&self, no_such_rank: impl Fn(u32) -> Option<String>) -> Result<(), CliError> {
        let Wanted::Ranks(wanted) = self else { return Ok(()) };
        match wanted.iter().find_map(|r| no_such_rank(*r).map(|why| (r, why))) {
            Some((rank, why)) => Err(CliError::BadInput(format!("--logs={rank}: {why}"))),
            None => Ok(()),
        }
    }
}

/// One log followed: an actor's attempt, and one of its workers or all of them.
pub type Followed = (u32, u32, Option<u32>);

/// What the reads of one job's logs share: a wake for each log read on, so that an attempt's
/// last bytes are read as soon as the events say it ended, not after a long quiet wait; and
/// so how many are read, which sets how long a quiet one waits.
#[derive(Default)]
struct Pace {
    wakes: RefCell<BTreeMap<Followed, Rc<Notify>>>,
}

impl Pace {
    /// `log` is read from now on; its wake.
    fn reads(&self, log: Followed) -> Rc<Notify> {
        Rc::clone(self.wakes.borrow_mut().entry(log).or_default())
    }

    fn done(&self, log: Followed) {
        self.wakes.borrow_mut().remove(&log);
    }

    /// How long a log that had nothing new waits before it is read again.
    fn quiet_wait(&self) -> Duration {
        let reading = self.wakes.borrow().len() as u64;
        Duration::from_millis(POLL_MS.max(reading * 1000 / MAX_QUIET_READS_PER_S))
    }

    /// The logs of `actor`'s `attempt` (or of every attempt) are read now. A wake that finds
    /// its read busy is kept for its next wait (`notify_one`).
    fn wake(&self, actor: Option<u32>, attempt: Option<u32>) {
        let wakes = self.wakes.borrow();
        let woken =
            wakes.iter().filter(|((a, n, _), _)| actor.is_none_or(|x| x == *a) && attempt.is_none_or(|x| x == *n));
        woken.for_each(|(_, wake)| wake.notify_one());
    }
}

/// The attempts followed so far, and the reads of those still running.
pub struct LogFollowers<'a> {
    client: &'a Client,
    job: String,
    to: Progress,
    wanted: Wanted,
    /// Workers per actor (from the job's snapshots): how a global rank splits.
    nproc: u32,
    followed: BTreeSet<Followed>,
    pace: Rc<Pace>,
    /// The logs printed whole, to the end of their attempt, with the prefix of their lines.
    printed: BTreeMap<Followed, String>,
    reading: FuturesUnordered<LocalBoxFuture<'a, Option<(Followed, String)>>>,
}

impl<'a> LogFollowers<'a> {
    pub fn new(client: &'a Client, job: &str, to: Progress, wanted: Wanted) -> Self {
        let (followed, printed, reading) = (BTreeSet::new(), BTreeMap::new(), FuturesUnordered::new());
        let pace = Rc::default();
        LogFollowers { client, job: job.to_string(), to, wanted, nproc: 1, followed, pace, printed, reading }
    }

    /// A snapshot (the first, or the one after the head came back): every attempt in it is
    /// followed, those its ledger says ended and those running, since the events that started
    /// them may have gone unseen: a quick job may have ended before `submit` followed it, and an
    /// attempt may start and end while the follower is away. `docker logs -f` and `ray job logs
    /// -f` print what was written before they started too.
    pub fn catch_up(&mut self, view: &JobView) {
        self.nproc = view.nproc_per_node.max(1);
        let ended = view.ledger.iter().map(|e| (e.actor.index, e.attempt, e.rank));
        let running = view.actors.iter().filter(|a| a.state == ActorState::Running && a.attempt > 0);
        let attempts: Vec<(u32, u32, Option<u32>)> =
            ended.chain(running.map(|a| (a.name.index, a.attempt, a.rank))).collect();
        attempts.into_iter().for_each(|(actor, attempt, rank)| self.started(actor, attempt, rank));
    }

    /// An event: an attempt that starts running is followed, if it is wanted; one that leaves
    /// RUNNING or FAILING has its logs read now.
    pub fn on_event(&mut self, event: &Event) {
        let Event::Job { detail: JobEvent::Transition { actor, from, to, attempt, rank, .. }, .. } = event else {
            return;
        };
        if *to == ActorState::Running {
            self.started(actor.index, *attempt, *rank);
        }
        if matches!(from, ActorState::Running | ActorState::Failing) {
            self.pace.wake(Some(actor.index), Some(*attempt));
        }
    }

    /// `actor`'s `attempt` runs as node rank `node_rank`: its log, or its workers' that hold
    /// wanted ranks, are followed.
    fn started(&mut self, actor: u32, attempt: u32, node_rank: Option<u32>) {
        match &self.wanted {
            Wanted::All => self.follow((actor, attempt, None), format!("[{}/{actor}] ", self.job)),
            Wanted::Ranks(ranks) => {
                let nproc = self.nproc;
                let held: Vec<u32> = ranks.iter().copied().filter(|r| Some(r / nproc) == node_rank).collect();
                for rank in held {
                    let worker = (nproc > 1).then_some(rank % nproc);
                    self.follow((actor, attempt, worker), format!("[rank{rank}] "));
                }
            }
        }
    }

    fn follow(&mut self, log: Followed, prefix: String) {
        if self.followed.insert(log) {
            let (client, job, to, pace) = (self.client, self.job.clone(), self.to, Rc::clone(&self.pace));
            let wake = pace.reads(log);
            self.reading.push(Box::pin(async move {
                let lines = Lines::new(prefix, to.is_terminal());
                let read = follow_attempt(client, job, log, lines, to, (&pace, &wake)).await;
                pace.done(log);
                read
            }));
        }
    }

    /// Goes on reading; resolves when one attempt's log has been read to its end, and never
    /// while none is followed (a branch of the follower's `select!`).
    pub async fn next(&mut self) {
        match self.reading.next().await {
            Some(read) => self.printed.extend(read),
            None => std::future::pending().await,
        }
    }

    /// The job ended: what its attempts wrote last is read, for `DRAIN_LIMIT` at most (an
    /// agent that stopped answering must not hold the command). Returns the logs printed
    /// whole: the summary need not show their last lines again.
    pub async fn drain(mut self) -> BTreeMap<Followed, String> {
        self.pace.wake(None, None);
        let all_read = async {
            while let Some(read) = self.reading.next().await {
                self.printed.extend(read);
            }
        };
        if tokio::time::timeout(DRAIN_LIMIT, all_read).await.is_err() {
            let _ = self.to.line(&format!(
                "ftdrive: not every log of {} was read to its end within {DRAIN_LIMIT:?}; `ftdrive logs {}` reads them",
                self.job, self.job
            ));
        }
        self.printed
    }
}

/// Reads one attempt's log from its start until the attempt ended and all of it was read,
/// printing whole lines under the actor's prefix; `log` and its prefix once it was printed
/// whole. A log that cannot be read (its machine is gone) is said in one line, and the job's
/// other logs go on.
async fn follow_attempt(
    client: &Client,
    job: String,
    log: Followed,
    mut lines: Lines,
    to: Progress,
    (pace, wake): (&Pace, &Notify),
) -> Option<(Followed, String)> {
    let (actor, attempt, worker) = log;
    let mut offset = 0;
    loop {
        match client.log_chunk(&job, actor, Some(attempt), worker, LogFrom::Offset(offset)).await {
            Ok(chunk) => {
                offset = chunk.next_offset;
                to.text(&lines.take(&chunk.bytes)).ok()?;
                if chunk.bytes.is_empty() {
                    if !chunk.running {
                        return to.text(&lines.rest()).ok().map(|()| (log, lines.prefix));
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(pace.quiet_wait()) => {}
                        _ = wake.notified() => {}
                    }
                }
            }
            // The follower of the events says that the head is away; this one waits quietly.
            Err(e) if is_passing(&e) => tokio::time::sleep(Duration::from_millis(AWAY_POLL_MS)).await,
            Err(e) => {
                let rest = lines.rest();
                let _ = to.text(&format!("{rest}{}(its output is not read further: {e})\n", lines.prefix));
                return None;
            }
        }
    }
}

/// One log's bytes as whole lines under a prefix; an unfinished last line is held back until
/// it ends (or passes `MAX_HELD_LINE_BYTES`), so that logs read at once never mix within a
/// line. A `\r` ends a line too: a progress bar that redraws its line may never end it.
struct Lines {
    prefix: String,
    held: Vec<u8>,
    /// They go to a terminal: each is made safe for it (`terminal.rs`).
    terminal: bool,
}

impl Lines {
    fn new(prefix: String, terminal: bool) -> Self {
        Lines { prefix, held: Vec::new(), terminal }
    }

    /// The whole lines `bytes` completes, each under the prefix and ended by `\n`.
    fn take(&mut self, bytes: &[u8]) -> String {
        self.held.extend_from_slice(bytes);
        // A `\r` last may be the first half of a `\r\n` whose `\n` comes with the next read.
        let held = self.held.strip_suffix(b"\r").unwrap_or(&self.held);
        let ended = held.iter().rposition(|b| matches!(b, b'\n' | b'\r')).map_or(0, |at| at + 1);
        let whole = if self.held.len() > MAX_HELD_LINE_BYTES { self.held.len() } else { ended };
        let out: Vec<u8> = self.held.drain(..whole).collect();
        self.prefixed(&out)
    }

    /// What is held back, ended: the log ended without a last newline.
    fn rest(&mut self) -> String {
        let held = std::mem::take(&mut self.held);
        self.prefixed(&held)
    }

    fn prefixed(&self, bytes: &[u8]) -> String {
        let text = String::from_utf8_lossy(bytes).replace("\r\n", "\n");
        let shown = |line: &str| match self.terminal {
            true => super::terminal::clean_text(line),
            false => line.to_string(),
        };
        text.split_terminator(['\n', '\r']).map(|line| format!("{}{}\n", self.prefix, shown(line))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{Client, Duration, Lines, LogFollowers, Pace, Progress, Wanted, MAX_QUIET_READS_PER_S, POLL_MS};
    use futures_util::FutureExt;

    #[test]
    fn a_wanted_rank_is_followed_in_whichever_attempt_and_worker_holds_it() {
        let client = Client::new("http://127.0.0.1:9", String::new(), String::new());
        let mut logs = LogFollowers::new(&client, "j1", Progress::Stdout, Wanted::Ranks(vec![1, 2]));
        logs.nproc = 2;
        logs.started(0, 1, Some(0)); // ranks 0 and 1
        logs.started(1, 1, Some(1)); // ranks 2 and 3
        logs.started(2, 1, None); // a spare standing by holds no rank
        logs.started(1, 2, Some(0)); // re-formed: actor 1 is node rank 0 now
        let followed: Vec<_> = logs.followed.iter().copied().collect();
        assert_eq!(followed, [(0, 1, Some(1)), (1, 1, Some(0)), (1, 2, Some(1))]);
        let mut all = LogFollowers::new(&client, "j1", Progress::Stdout, Wanted::All);
        all.started(2, 1, None);
        all.started(2, 1, None);
        assert_eq!(all.followed.iter().copied().collect::<Vec<_>>(), [(2, 1, None)], "each attempt once");
    }

    #[test]
    fn quiet_logs_wait_longer_when_many_and_an_attempts_change_wakes_its_own() {
        let pace = Pace::default();
        let wakes: Vec<_> = (0..3).map(|actor| pace.reads((actor, 1, None))).collect();
        assert_eq!(pace.quiet_wait(), Duration::from_millis(POLL_MS), "few: the poll");
        let woken = |n: usize| wakes[n].notified().now_or_never().is_some();
        pace.wake(Some(1), Some(1));
        assert_eq!((woken(0), woken(1), woken(2)), (false, true, false), "the attempt that changed alone");
        pace.wake(Some(1), Some(2));
        assert!(!woken(1), "another attempt of the actor is not this one");
        pace.wake(None, None);
        assert!(woken(0) && woken(1) && woken(2), "the job's end wakes every read");
        let many: Vec<_> = (3..1_000).map(|actor| pace.reads((actor, 1, None))).collect();
        let most = Duration::from_secs(1) / MAX_QUIET_READS_PER_S as u32;
        assert_eq!(pace.quiet_wait(), most * 1_000, "1,000 quiet logs: {MAX_QUIET_READS_PER_S} reads a second");
        (3..1_000).for_each(|actor| pace.done((actor, 1, None)));
        assert_eq!(
            (pace.quiet_wait(), pace.wakes.borrow().len(), many.len()),
            (Duration::from_millis(POLL_MS), 3, 997)
        );
    }

    #[test]
    fn a_rank_beyond_the_job_is_named() {
        let wanted = Wanted::from_flag(&Some(vec![0, 8])).unwrap();
        let of = |ranks: u32| move |r: u32| ftdrive::spec::no_such_rank("j1", r, ranks, 1);
        assert_eq!(wanted.check(of(8)).unwrap_err().to_string(), "--logs=8: j1 has ranks 0 to 7");
        assert!(wanted.check(of(9)).is_ok());
        assert!(Wanted::All.check(of(0)).is_ok(), "every rank there is");
        assert_eq!(Wanted::from_flag(&Some(Vec::new())), Some(Wanted::All));
        assert_eq!(Wanted::from_flag(&None), None);
    }

    #[test]
    fn only_whole_lines_go_out_each_under_the_prefix() {
        let mut lines = Lines::new("[j1/0] ".into(), false);
        assert_eq!(lines.take(b"one\ntw"), "[j1/0] one\n");
        assert_eq!(lines.take(b"o\r\nthree"), "[j1/0] two\n", "\\r\\n is one end of a line");
        assert_eq!(lines.take(b""), "");
        assert_eq!(lines.rest(), "[j1/0] three\n", "the last line, ended");
        assert_eq!(lines.rest(), "");
    }

    #[test]
    fn blank_lines_are_kept_and_a_split_crlf_ends_one_line() {
        let mut lines = Lines::new("> ".into(), false);
        assert_eq!(lines.take(b"a\n\nb\n"), "> a\n> \n> b\n");
        assert_eq!(lines.take(b"x\r"), "", "perhaps half of a \\r\\n");
        assert_eq!(lines.take(b"\ny\n"), "> x\n> y\n");
        assert_eq!(lines.take(b"10%\r20%\r30%\n"), "> 10%\n> 20%\n> 30%\n", "a progress bar's redraws");
    }

    #[test]
    fn a_line_that_never_ends_goes_out_past_the_bound() {
        let mut lines = Lines::new("> ".into(), false);
        let long = vec![b'x'; super::MAX_HELD_LINE_BYTES + 1];
        assert_eq!(lines.take(&long).len(), long.len() + 3);
    }

    #[test]
    fn lines_for_a_terminal_keep_colours_and_show_other_controls_as_text() {
        let mut lines = Lines::new("> ".into(), true);
        assert_eq!(lines.take(b"\x1b[2Jok \x1b[32mgreen\x1b[0m\x07\n"), "> ^[[2Jok \x1b[32mgreen\x1b[0m^G\n");
    }

    #[test]
    fn a_character_split_between_reads_is_decoded_whole() {
        let mut lines = Lines::new("".into(), false);
        let euro = "€\n".as_bytes();
        assert_eq!(lines.take(&euro[..1]), "");
        assert_eq!(lines.take(&euro[1..]), "€\n");
    }
}
