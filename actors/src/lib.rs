//! ftdrive's runtime on actix and tokio: the head daemon, the node agent, and the `ftdrive`
//! command line. Every actor here owns one core state machine and holds no policy of its own.

/// `eprintln!` that lets a closed standard error pass: `eprintln!` panicked on it, so a daemon
/// whose log pipe closed (`ftdrive head 2>&1 | tee log`, and `tee` gone) or a command whose
/// reader of errors went away aborted (exit 134).
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::quiet_stderr_line(format_args!($($arg)*))
    };
}

#[doc(hidden)]
pub fn quiet_stderr_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(QuietStderr, "{args}");
}

/// Standard error, its write errors ignored: the log writer of every process (tracing
/// reported a failed write with `eprintln!`, which then panicked).
pub struct QuietStderr;

impl std::io::Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

pub mod cli;
pub mod connections;
pub mod exposition;
pub mod head;
pub mod node;
pub mod paths;
pub mod tls;
