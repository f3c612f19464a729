//! Standard output for every command. A reader that went away (`ftdrive logs j1 --follow |
//! head`) ends the command as it ends `tail -f` or `cat`: quietly, with the exit status of a
//! process killed by SIGPIPE. Without this, `print!` panicked, and a follower whose writes
//! were ignored followed for ever into nothing.

use super::error::CliError;
use std::io::Write;

/// Writes `bytes` and flushes, so that a follower's lines appear as they come.
pub fn bytes(bytes: &[u8]) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes).and_then(|()| out.flush()).map_err(|e| match e.kind() {
        std::io::ErrorKind::BrokenPipe => CliError::ReaderGone,
        _ => CliError::Failed(format!("cannot write to standard output: {e}")),
    })
}

/// Writes `text` as it is.
pub fn text(text: &str) -> Result<(), CliError> {
    bytes(text.as_bytes())
}

/// Writes `text` and a newline.
pub fn line(text: &str) -> Result<(), CliError> {
    bytes(format!("{text}\n").as_bytes())
}

/// A value as pretty JSON, one document.
pub fn json<T: serde::Serialize>(value: &T) -> Result<(), CliError> {
    line(&serde_json::to_string_pretty(value).expect("views serialize"))
}

/// Where a follower's progress goes: standard output, or standard error when standard output
/// is kept for one document (`--output json`), so that `| jq` reads only that.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Stdout,
    Stderr,
}

impl Progress {
    pub fn text(self, text: &str) -> Result<(), CliError> {
        match self {
            Progress::Stdout => self::text(text),
            Progress::Stderr => {
                let mut err = std::io::stderr().lock();
                // Nothing to do about a closed standard error but go on.
                let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
                Ok(())
            }
        }
    }

    pub fn line(self, text: &str) -> Result<(), CliError> {
        self.text(&format!("{text}\n"))
    }

    /// Whether it goes to a terminal (a live table is redrawn there).
    pub fn is_terminal(self) -> bool {
        use std::io::IsTerminal;
        match self {
            Progress::Stdout => std::io::stdout().is_terminal(),
            Progress::Stderr => std::io::stderr().is_terminal(),
        }
    }
}
