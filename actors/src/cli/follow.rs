//! Following a job: a live table of its actors when stdout is a terminal, one line per
//! transition otherwise; then its outcome. Ctrl-C detaches (the job keeps running).

use super::client::Client;
use super::error::{CliError, Outcome};
use super::render;
use ftdrive::driver::JobState;
use ftdrive::event::StreamLine;
use ftdrive::view::JobView;
use futures_util::StreamExt;
use serde_json::Value;
use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use tokio::signal::unix::{signal, SignalKind};

/// What Ctrl-C means while following.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum OnInterrupt {
    /// Stop following; the job goes on.
    Detach,
    /// Stop the job and keep following it to its end (an embedded cluster cannot outlive us).
    StopJob,
}

pub async fn follow(client: &Client, job: &str, on_interrupt: OnInterrupt) -> Result<Outcome, CliError> {
    // Registered before anything is printed: whoever sees our output may press Ctrl-C at once.
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| CliError::Failed(format!("cannot watch for Ctrl-C: {e}")))?;
    let live = std::io::stdout().is_terminal();
    let mut lines = Box::pin(client.lines(&format!("/v1/jobs/{job}/events")).await?);
    let mut view: Option<JobView> = None;
    let mut recent: VecDeque<String> = VecDeque::new();
    let mut interrupted = false;
    loop {
        tokio::select! {
            line = lines.next() => {
                let Some(line) = line else { break };
                let line = StreamLine::parse(&line?).map_err(|e| CliError::Failed(format!("unreadable event: {e}")))?;
                match line {
                    StreamLine::Snapshot(snapshot) => {
                        if view.is_none() && !live {
                            print!("{}", render::snapshot_lines(&snapshot));
                        }
                        view = Some(*snapshot);
                    }
                    StreamLine::Error(error) => {
                        return Err(CliError::Failed(format!("the head ended the event stream: {error}")));
                    }
                    StreamLine::Event(line) => {
                        if let Some(v) = view.as_mut() {
                            render::apply(v, &line.event);
                        }
                        // Times count from the job's submission.
                        let origin = view.as_ref().map_or(line.t_ms, |v| v.submit_ms);
                        if let Some(text) = render::event_line(&line, origin) {
                            show(live, &mut recent, text);
                        }
                    }
                }
                if live {
                    if let Some(v) = &view {
                        redraw(v, &recent);
                    }
                }
            }
            _ = interrupt.recv(), if !interrupted => {
                interrupted = true;
                match on_interrupt {
                    OnInterrupt::Detach => {
                        eprintln!("\ndetached from {job}; it keeps running.\n  follow: ftdrive status {job}\n  stop:   ftdrive stop {job}");
                        return Ok(Outcome::Done);
                    }
                    OnInterrupt::StopJob => {
                        eprintln!("\nstopping {job} (the local cluster ends with this command)…");
                        let _: Value = client.post(&format!("/v1/jobs/{job}/stop"), Value::Null).await?;
                    }
                }
            }
        }
    }
    let view: JobView = client.get(&format!("/v1/jobs/{job}")).await?;
    print!("{}", render::job_summary(&view));
    let _ = std::io::stdout().flush();
    Ok(outcome(view.state))
}

pub fn outcome(state: JobState) -> Outcome {
    match state {
        JobState::Succeeded => Outcome::Succeeded,
        JobState::Failed => Outcome::Failed,
        JobState::Stopped => Outcome::Stopped,
        JobState::Pending | JobState::Running => Outcome::Done,
    }
}

/// An event line: kept for the live table's tail, or printed.
fn show(live: bool, recent: &mut VecDeque<String>, text: String) {
    if live {
        recent.push_back(text);
        if recent.len() > 8 {
            recent.pop_front();
        }
    } else {
        println!("{text}");
    }
}

fn redraw(view: &JobView, recent: &VecDeque<String>) {
    let mut out = String::from("\x1b[H\x1b[2J");
    out.push_str(&render::job_table(view));
    out.push('\n');
    for line in recent {
        out.push_str(line);
        out.push('\n');
    }
    print!("{out}");
    let _ = std::io::stdout().flush();
}
