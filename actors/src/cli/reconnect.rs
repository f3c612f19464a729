//! Riding out a head restart: the commands that follow a job (`submit`, `logs --follow`) try a
//! lost head again for a bounded time instead of exiting 4 while the job runs on, since a
//! restarted head re-adopts every job with nothing restarted (DESIGN §10).

use super::error::CliError;
use std::future::Future;
use std::time::{Duration, Instant};

/// How long a follower waits for a lost head to answer again.
pub const HEAD_RETURN_TIMEOUT_MS: u64 = 120_000;
const FIRST_PAUSE_MS: u64 = 100;
const MAX_PAUSE_MS: u64 = 2_000;

/// Tries `request` again, with growing pauses, while it finds the head unreachable. Any other
/// answer, good or bad, ends the wait; so does `HEAD_RETURN_TIMEOUT_MS` without the head.
/// `why` is how the head was lost, told once to the user.
pub async fn until_head_returns<T, F, Fut>(why: &str, mut request: F) -> Result<T, CliError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, CliError>>,
{
    let timeout_s = HEAD_RETURN_TIMEOUT_MS / 1000;
    eprintln!("ftdrive: lost the head ({why}); trying again for up to {timeout_s} s, the job runs on");
    let start = Instant::now();
    let mut pause = Duration::from_millis(FIRST_PAUSE_MS);
    loop {
        tokio::time::sleep(pause).await;
        match request().await {
            Err(CliError::Unreachable(e)) => {
                if start.elapsed() >= Duration::from_millis(HEAD_RETURN_TIMEOUT_MS) {
                    return Err(CliError::Unreachable(format!("the head did not come back within {timeout_s} s: {e}")));
                }
                pause = (pause * 2).min(Duration::from_millis(MAX_PAUSE_MS));
            }
            answer => {
                if answer.is_ok() {
                    eprintln!("ftdrive: reached the head again after {:.1} s", start.elapsed().as_secs_f64());
                }
                return answer;
            }
        }
    }
}
