//! `submit --logs` and `status --follow --logs`: every attempt's output as it is written,
//! beside the job's events, in whole lines each prefixed with its actor (`[j1/0] `), as
//! `docker compose up` prefixes each service's and torchrun each rank's.

use super::client::{Client, LogFrom};
use super::out::Progress;
use super::reconnect::is_passing;
use ftdrive::driver::ActorState;
use ftdrive::event::{Event, JobEvent};
use ftdrive::view::JobView;
use futures_util::future::LocalBoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::collections::BTreeSet;
use std::time::Duration;

/// How often a follower reads a running attempt's log again when it had nothing new.
const POLL_MS: u64 = 300;
/// How long a follower waits before asking again while the head or the agent is away.
const AWAY_POLL_MS: u64 = 1_000;
/// The most of one attempt's unfinished line held back (a progress bar that never ends it).
const MAX_HELD_LINE_BYTES: usize = 64 * 1024;
/// Once the job ended, how long its followers get to read what their attempts wrote last.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// The attempts followed so far, and the reads of those still running.
pub struct LogFollowers<'a> {
    client: &'a Client,
    job: String,
    to: Progress,
    followed: BTreeSet<(u32, u32)>,
    reading: FuturesUnordered<LocalBoxFuture<'a, ()>>,
}

impl<'a> LogFollowers<'a> {
    pub fn new(client: &'a Client, job: &str, to: Progress) -> Self {
        LogFollowers { client, job: job.to_string(), to, followed: BTreeSet::new(), reading: FuturesUnordered::new() }
    }

    /// A snapshot (the first, or the one after the head came back): every attempt running in it
    /// is followed, since the events that started them may have gone unseen.
    pub fn catch_up(&mut self, view: &JobView) {
        let running = view.actors.iter().filter(|a| a.state == ActorState::Running && a.attempt > 0);
        let attempts: Vec<(u32, u32)> = running.map(|a| (a.name.index, a.attempt)).collect();
        attempts.into_iter().for_each(|(actor, attempt)| self.start(actor, attempt));
    }

    /// An event: an attempt that starts running is followed.
    pub fn on_event(&mut self, event: &Event) {
        if let Event::Job { detail: JobEvent::Transition { actor, to: ActorState::Running, attempt, .. }, .. } = event {
            self.start(actor.index, *attempt);
        }
    }

    fn start(&mut self, actor: u32, attempt: u32) {
        if self.followed.insert((actor, attempt)) {
            let (client, job, to) = (self.client, self.job.clone(), self.to);
            self.reading.push(Box::pin(follow_attempt(client, job, actor, attempt, to)));
        }
    }

    /// Goes on reading; resolves when one attempt's log has been read to its end, and never
    /// while none is followed (a branch of the follower's `select!`).
    pub async fn next(&mut self) {
        match self.reading.next().await {
            Some(()) => {}
            None => std::future::pending().await,
        }
    }

    /// The job ended: what its attempts wrote last is read, for `DRAIN_LIMIT` at most (an
    /// agent that stopped answering must not hold the command).
    pub async fn drain(mut self) {
        let all_read = async { while self.reading.next().await.is_some() {} };
        if tokio::time::timeout(DRAIN_LIMIT, all_read).await.is_err() {
            let _ = self.to.line(&format!(
                "ftdrive: not every log of {} was read to its end within {DRAIN_LIMIT:?}; `ftdrive logs {}` reads them",
                self.job, self.job
            ));
        }
    }
}

/// Reads one attempt's log from its start until the attempt ended and all of it was read,
/// printing whole lines under the actor's prefix. A log that cannot be read (its machine
/// is gone) is said in one line, and the job's other logs go on.
async fn follow_attempt(client: &Client, job: String, actor: u32, attempt: u32, to: Progress) {
    let mut lines = Lines::new(format!("[{job}/{actor}] "));
    let mut offset = 0;
    loop {
        match client.log_chunk(&job, actor, Some(attempt), None, LogFrom::Offset(offset)).await {
            Ok(chunk) => {
                offset = chunk.next_offset;
                if let Err(e) = to.text(&lines.take(&chunk.bytes)) {
                    return drop(e);
                }
                if chunk.bytes.is_empty() {
                    if !chunk.running {
                        let _ = to.text(&lines.rest());
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
                }
            }
            // The follower of the events says that the head is away; this one waits quietly.
            Err(e) if is_passing(&e) => tokio::time::sleep(Duration::from_millis(AWAY_POLL_MS)).await,
            Err(e) => {
                let rest = lines.rest();
                let _ = to.text(&format!("{rest}{}(its output is not read further: {e})\n", lines.prefix));
                return;
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
}

impl Lines {
    fn new(prefix: String) -> Self {
        Lines { prefix, held: Vec::new() }
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
        text.split_terminator(['\n', '\r']).map(|line| format!("{}{line}\n", self.prefix)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Lines;

    #[test]
    fn only_whole_lines_go_out_each_under_the_prefix() {
        let mut lines = Lines::new("[j1/0] ".into());
        assert_eq!(lines.take(b"one\ntw"), "[j1/0] one\n");
        assert_eq!(lines.take(b"o\r\nthree"), "[j1/0] two\n", "\\r\\n is one end of a line");
        assert_eq!(lines.take(b""), "");
        assert_eq!(lines.rest(), "[j1/0] three\n", "the last line, ended");
        assert_eq!(lines.rest(), "");
    }

    #[test]
    fn blank_lines_are_kept_and_a_split_crlf_ends_one_line() {
        let mut lines = Lines::new("> ".into());
        assert_eq!(lines.take(b"a\n\nb\n"), "> a\n> \n> b\n");
        assert_eq!(lines.take(b"x\r"), "", "perhaps half of a \\r\\n");
        assert_eq!(lines.take(b"\ny\n"), "> x\n> y\n");
        assert_eq!(lines.take(b"10%\r20%\r30%\n"), "> 10%\n> 20%\n> 30%\n", "a progress bar's redraws");
    }

    #[test]
    fn a_line_that_never_ends_goes_out_past_the_bound() {
        let mut lines = Lines::new("> ".into());
        let long = vec![b'x'; super::MAX_HELD_LINE_BYTES + 1];
        assert_eq!(lines.take(&long).len(), long.len() + 3);
    }

    #[test]
    fn a_character_split_between_reads_is_decoded_whole() {
        let mut lines = Lines::new("".into());
        let euro = "€\n".as_bytes();
        assert_eq!(lines.take(&euro[..1]), "");
        assert_eq!(lines.take(&euro[1..]), "€\n");
    }
}
