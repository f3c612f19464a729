//! Errors of the command line, and the one place they become exit codes (DESIGN §7).

/// What went wrong, by exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad input: a malformed job spec, an unknown flag value. Exit 2.
    #[error("{0}")]
    BadInput(String),
    /// The head could not be reached. Exit 4.
    #[error("{0}")]
    Unreachable(String),
    /// The head is up but cannot reach what the request needs now (an agent): 502. Exit 1.
    #[error("{0}")]
    Unavailable(String),
    /// Anything else that stops the command. Exit 1.
    #[error("{0}")]
    Failed(String),
    /// Whoever read our standard output went away (`| head`): nothing to say, and exit 141,
    /// the status of a process killed by SIGPIPE, as `cat` and `tail -f` have there.
    #[error("standard output was closed")]
    ReaderGone,
}

/// The job outcomes `submit` exits with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed,
    Stopped,
    /// Nothing to report beyond success of the command itself.
    Done,
    /// A follower let go of a job that runs on (Ctrl-C): its outcome is not known here.
    Detached,
}

pub fn exit_code(result: &Result<Outcome, CliError>) -> i32 {
    match result {
        Ok(Outcome::Succeeded | Outcome::Done) => 0,
        Ok(Outcome::Failed) => 1,
        Ok(Outcome::Stopped) => 3,
        // As a shell reports a command ended by Ctrl-C: not 0, which says the job SUCCEEDED.
        Ok(Outcome::Detached) => 128 + libc::SIGINT,
        Err(CliError::BadInput(_)) => 2,
        Err(CliError::Unreachable(_)) => 4,
        Err(CliError::Unavailable(_) | CliError::Failed(_)) => 1,
        Err(CliError::ReaderGone) => 128 + libc::SIGPIPE,
    }
}
