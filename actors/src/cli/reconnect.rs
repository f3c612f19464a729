//! Riding out a head restart: the commands that follow a job (`submit`, `logs --follow`) try
//! again for a bounded time when the head is away, or cannot reach an agent yet, instead of
//! exiting while the job runs on, since a restarted head re-adopts every job with nothing
//! restarted and its agents report back within a heartbeat or two (DESIGN §10).

use super::error::CliError;
use std::future::Future;
use std::time::{Duration, Instant};

/// How long a follower waits for the head (and the agent it needs) to answer again.
pub const HEAD_RETURN_TIMEOUT_MS: u64 = 120_000;
const FIRST_PAUSE_MS: u64 = 100;
const MAX_PAUSE_MS: u64 = 2_000;

/// Whether `error` passes by itself: the head away, or an agent it cannot reach now.
pub fn is_passing(error: &CliError) -> bool {
    matches!(error, CliError::Unreachable(_) | CliError::Unavailable(_))
}

/// Tries `request` again, with growing pauses, while its error [`is_passing`]. Any other
/// answer, good or bad, ends the wait; so does `HEAD_RETURN_TIMEOUT_MS` of passing errors.
/// `lost` is the error that started the wait, told once to the user.
pub async fn until_answered<T, F, Fut>(lost: CliError, mut request: F) -> Result<T, CliError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, CliError>>,
{
    let timeout_s = HEAD_RETURN_TIMEOUT_MS / 1000;
    let why = match &lost {
        // Its first line: the hint below it is for a head never reached, not one that went away.
        CliError::Unreachable(e) => format!("lost the head ({})", e.lines().next().unwrap_or_default()),
        other => other.to_string(),
    };
    crate::note!("ftdrive: {why}; trying again for up to {timeout_s} s, the job runs on");
    // A head that answered all along (at a bound, or without the agent asked for) came not back.
    let back = match &lost {
        CliError::Unreachable(_) => "the head answered again",
        _ => "going on",
    };
    let start = Instant::now();
    let mut pause = Duration::from_millis(FIRST_PAUSE_MS);
    loop {
        tokio::time::sleep(pause).await;
        match request().await {
            Err(e) if is_passing(&e) => {
                if start.elapsed() >= Duration::from_millis(HEAD_RETURN_TIMEOUT_MS) {
                    return Err(gave_up(e, timeout_s));
                }
                pause = (pause * 2).min(Duration::from_millis(MAX_PAUSE_MS));
            }
            answer => {
                if answer.is_ok() {
                    crate::note!("ftdrive: {back} after {:.1} s", start.elapsed().as_secs_f64());
                }
                return answer;
            }
        }
    }
}

fn gave_up(last: CliError, timeout_s: u64) -> CliError {
    match last {
        CliError::Unreachable(e) => {
            CliError::Unreachable(format!("the head did not come back within {timeout_s} s: {e}"))
        }
        other => CliError::Unavailable(format!("still, after {timeout_s} s: {other}")),
    }
}
