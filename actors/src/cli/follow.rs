//! Following a job: a live table of its actors when stdout is a terminal, one line per
//! transition otherwise; then its outcome. Ctrl-C detaches (the job keeps running).

use super::client::{Client, LogFrom};
use super::error::{CliError, Outcome};
use super::follow_logs::{LogFollowers, Wanted};
use super::out::Progress;
use super::reconnect::{is_passing, until_answered};
use super::render;
use ftdrive::driver::{JobState, LedgerEntry};
use ftdrive::event::StreamLine;
use ftdrive::view::JobView;
use futures_util::StreamExt;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use tokio::signal::unix::{signal, SignalKind};

/// What Ctrl-C means while following.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum OnInterrupt {
    /// Stop following; the job goes on.
    Detach,
    /// Stop the job and keep following it to its end (an embedded cluster cannot outlive us).
    StopJob,
}

/// Follows `job` to its end; with `logs`, the attempts' output too (`follow_logs.rs`).
pub async fn follow(
    client: &Client,
    job: &str,
    on_interrupt: OnInterrupt,
    progress: Progress,
    logs: Option<Wanted>,
) -> Result<Outcome, CliError> {
    // Registered before anything is printed: whoever sees our output may press Ctrl-C at once.
    let watch = |kind| signal(kind).map_err(|e| CliError::Failed(format!("cannot watch for Ctrl-C and SIGTERM: {e}")));
    let mut interrupt = watch(SignalKind::interrupt())?;
    // An embedded cluster dies with us: SIGTERM (a CI runner's timeout) stops the job as Ctrl-C
    // does. Following a real head, SIGTERM keeps its default: we go, the job runs on.
    let mut terminate = match on_interrupt {
        OnInterrupt::StopJob => Some(watch(SignalKind::terminate())?),
        OnInterrupt::Detach => None,
    };
    let mut signals = 0u32;
    let path = format!("/v1/jobs/{job}/events");
    // A head at its bound of followers, or away for a moment, is waited for as it is later on.
    let mut lines = match client.lines(&path).await {
        Err(e) if is_passing(&e) => until_answered(e, || client.lines(&path)).await?,
        opened => opened?,
    };
    let mut screen = Screen::new(progress, logs.is_some());
    let mut outputs = logs.map(|wanted| LogFollowers::new(client, job, progress, wanted));
    loop {
        tokio::select! {
            line = lines.next() => {
                let lost = match line {
                    Some(Ok(text)) => {
                        let line = StreamLine::parse(&text).map_err(|e| CliError::Failed(format!("unreadable event: {e}")))?;
                        match (&mut outputs, &line) {
                            (Some(outputs), StreamLine::Snapshot(view)) => outputs.catch_up(view),
                            (Some(outputs), StreamLine::Event(line)) => outputs.on_event(&line.event),
                            _ => {}
                        }
                        match screen.show(line) {
                            Ok(()) => continue,
                            Err(e) if is_passing(&e) => e,
                            Err(e) => return Err(e),
                        }
                    }
                    None if screen.view.as_ref().is_some_and(|v| v.state.is_terminal()) => break,
                    None => CliError::Unreachable("it closed the event stream".to_string()),
                    Some(Err(e)) if is_passing(&e) => e,
                    Some(Err(e)) => return Err(e),
                };
                tokio::select! {
                    back = until_answered(lost, || client.lines(&path)) => lines = back?,
                    _ = interrupt.recv() => return Ok(detached(job)),
                }
                screen.reprint = true;
            }
            // Reading the attempts' logs goes on while the events are awaited.
            _ = async { if let Some(outputs) = outputs.as_mut() { outputs.next().await } }, if outputs.is_some() => {}
            _ = interrupt.recv() => if let Some(done) = on_signal(client, job, on_interrupt, &mut signals).await? {
                return Ok(done);
            },
            Some(()) = async { terminate.as_mut()?.recv().await } => {
                if let Some(done) = on_signal(client, job, on_interrupt, &mut signals).await? {
                    return Ok(done);
                }
            }
        }
    }
    // The final snapshot stands in if the head is gone again by now, or has forgotten the job
    // since (retention, after a burst of other jobs ended).
    let view = match client.get::<JobView>(&format!("/v1/jobs/{job}")).await {
        Err(CliError::Unreachable(_) | CliError::BadInput(_)) => {
            screen.view.expect("the stream ended on a final snapshot")
        }
        answer => answer?,
    };
    let printed = match outputs {
        Some(outputs) => outputs.drain().await,
        None => BTreeMap::new(),
    };
    progress.text(&render::job_summary(&view, crate::paths::unix_ms()))?;
    if let Some(failed) = render::program_failure(&view) {
        // Its output, printed whole above under `--logs`, is pointed to rather than repeated.
        let words = match printed.get(&(failed.actor.index, failed.attempt, None)) {
            Some(prefix) => render::failure_printed_above(failed, prefix),
            None => last_words(client, &view, failed, on_interrupt).await,
        };
        // The program's own lines: on a terminal, made safe for it.
        let words = if progress.is_terminal() { super::terminal::clean_text(&words) } else { words };
        progress.text(&words)?;
    }
    Ok(outcome(view.state))
}

/// Lines of a failed attempt's log shown under a failed job's summary.
const FAILURE_TAIL_LINES: u32 = 10;

/// The end of what `failed` wrote, or why it cannot be read (its machine gone, say): the
/// error a failed job ended on is most often in its last lines.
async fn last_words(client: &Client, view: &JobView, failed: &LedgerEntry, on_interrupt: OnInterrupt) -> String {
    let (actor, attempt) = (failed.actor.index, failed.attempt);
    let all = match on_interrupt {
        OnInterrupt::Detach => format!("`ftdrive logs {} --actor {actor} --attempt {attempt}`", view.id),
        // An embedded cluster ends with this command; its agents' state dirs stay in the run's.
        OnInterrupt::StopJob => {
            let node = std::path::Path::new(&failed.node);
            let path = crate::node::logs::log_path(node, &view.id, actor, attempt).unwrap_or_default();
            format!("{} in the run's directory", path.display())
        }
    };
    match client.log_chunk(&view.id, actor, Some(attempt), None, LogFrom::Tail(FAILURE_TAIL_LINES)).await {
        Ok(chunk) => render::failure_tail(failed, &String::from_utf8_lossy(&chunk.bytes), &all),
        Err(e) => format!("  the output of {} attempt {} cannot be read: {}\n", failed.actor, failed.attempt, e),
    }
}

/// What the follower shows: a live table redrawn on a terminal, else one printed line each.
struct Screen {
    to: Progress,
    live: bool,
    view: Option<JobView>,
    /// After the head came back, its first snapshot is printed too: it tells what changed meanwhile.
    reprint: bool,
    recent: VecDeque<String>,
}

impl Screen {
    /// Beside the jobs' output (`logs`), events are lines too: a redrawn table would wipe it.
    fn new(to: Progress, logs: bool) -> Screen {
        Screen { to, live: to.is_terminal() && !logs, view: None, reprint: false, recent: VecDeque::new() }
    }

    /// One line of the stream: folded into the view, and shown.
    fn show(&mut self, line: StreamLine) -> Result<(), CliError> {
        match line {
            StreamLine::Snapshot(snapshot) => {
                if (self.view.is_none() || self.reprint) && !self.live {
                    self.to.text(&render::snapshot_lines(&snapshot))?;
                } else if let Some(why) = self.view.as_ref().and_then(|was| render::new_wait(was, &snapshot)) {
                    self.show_line(format!("     now  {why}"))?;
                }
                self.reprint = false;
                self.view = Some(*snapshot);
            }
            // A newer head's kind of event: nothing this version can show.
            StreamLine::Unknown(_) => {}
            // The head dropped this follower (it fell behind): following again catches up.
            StreamLine::Error(error) => {
                return Err(CliError::Unavailable(format!("the head ended the event stream: {error}")));
            }
            StreamLine::Event(line) => {
                if let Some(v) = self.view.as_mut() {
                    render::apply(v, &line.event);
                }
                // Times count from the job's submission.
                let origin = self.view.as_ref().map_or(line.t_ms, |v| v.submit_ms);
                let nproc = self.view.as_ref().map_or(1, |v| v.nproc_per_node);
                if let Some(text) = render::event_line(&line, origin, nproc) {
                    self.show_line(text)?;
                }
            }
        }
        if let (true, Some(v)) = (self.live, &self.view) {
            redraw(self.to, v, &self.recent)?;
        }
        Ok(())
    }

    /// An event line: kept for the live table's tail, or printed.
    fn show_line(&mut self, text: String) -> Result<(), CliError> {
        if !self.live {
            return self.to.line(&text);
        }
        self.recent.push_back(text);
        if self.recent.len() > 8 {
            self.recent.pop_front();
        }
        Ok(())
    }
}

/// Ctrl-C (or, on an embedded cluster, SIGTERM). Following a real head: detach. On an
/// embedded cluster the first stops the job and follows it through its stop grace; a second
/// ends the command now, and with it the cluster, which kills what is left (as a second
/// Ctrl-C does to `docker run` or `srun`).
async fn on_signal(
    client: &Client,
    job: &str,
    on_interrupt: OnInterrupt,
    signals: &mut u32,
) -> Result<Option<Outcome>, CliError> {
    *signals += 1;
    match (on_interrupt, *signals) {
        (OnInterrupt::Detach, _) => Ok(Some(detached(job))),
        (OnInterrupt::StopJob, 1) => {
            crate::note!("\nstopping {job} (the local cluster ends with this command; again to kill it now)…");
            let _: Value = client.post(&format!("/v1/jobs/{job}/stop"), Value::Null).await?;
            Ok(None)
        }
        (OnInterrupt::StopJob, _) => {
            crate::note!("\nkilling what is left of {job} now");
            Ok(Some(Outcome::Stopped))
        }
    }
}

fn detached(job: &str) -> Outcome {
    crate::note!(
        "\ndetached from {job}; it keeps running.\n  follow: ftdrive status {job} --follow\n  stop:   ftdrive stop {job}"
    );
    Outcome::Detached
}

pub fn outcome(state: JobState) -> Outcome {
    match state {
        JobState::Succeeded => Outcome::Succeeded,
        JobState::Failed => Outcome::Failed,
        JobState::Stopped => Outcome::Stopped,
        JobState::Pending | JobState::Running => Outcome::Done,
    }
}

fn redraw(to: Progress, view: &JobView, recent: &VecDeque<String>) -> Result<(), CliError> {
    let mut out = String::from("\x1b[H\x1b[2J");
    out.push_str(&render::job_table(view));
    out.push('\n');
    for line in recent {
        out.push_str(line);
        out.push('\n');
    }
    to.text(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_the_head_dropped_follows_again() {
        let dropped = StreamLine::Error("this follower fell 4096 lines behind and was dropped; follow again".into());
        let error = Screen::new(Progress::Stdout, false).show(dropped).unwrap_err();
        assert!(is_passing(&error), "{error}");
    }

    /// A newer head's event of a kind this version does not know is passed over.
    #[test]
    fn an_event_of_an_unknown_kind_is_passed_over() {
        let line = StreamLine::parse(r#"{"event":"solar_flare","job":"j1","t_ms":7,"strength":"X9"}"#).unwrap();
        let mut screen = Screen::new(Progress::Stdout, false);
        assert!(screen.show(line).is_ok());
        assert!(screen.view.is_none() && screen.recent.is_empty());
    }
}
