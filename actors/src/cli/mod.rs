//! `ftdrive`'s command line: parse, dispatch to one file per subcommand, map the result to an
//! exit code in one place.

pub mod args;
mod client;
mod completions;
mod drain;
pub mod error;
mod follow;
mod follow_logs;
mod forget;
mod head;
mod local;
mod local_runs;
mod logs;
mod node;
mod nodes;
mod out;
mod reconnect;
mod render;
mod sim;
mod status;
mod stop;
mod submit;
mod terminal;
mod undrain;

use args::{Cli, Command};
use clap::Parser;
use error::{exit_code, CliError, Outcome};

/// Runs the command line and returns the process exit code.
pub fn run() -> i32 {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__attempt") {
        crate::node::supervisor::run(&args[2..]);
    }
    close_to_inspection_by_jobs();
    keep_inherited_descriptors_from_jobs();
    let cli = Cli::parse();
    let result = dispatch(cli.command);
    match &result {
        Err(CliError::ReaderGone) | Ok(_) => {}
        Err(err) => crate::note!("ftdrive: {err}"),
    }
    exit_code(&result)
}

/// A job runs as its agent's Unix user, and a process may read the environment and memory of
/// any other process of its user (`/proc/PID/environ`, `/proc/PID/mem`, ptrace). An undumpable
/// process is closed to them: Linux gives its `/proc` files to root and refuses to trace it
/// without `CAP_SYS_PTRACE`. So a job cannot take the credentials that its agent, an embedded
/// cluster or a head on the same machine was given in its environment or holds in memory
/// (DESIGN §11). Every ftdrive process but the attempt supervisor (which holds none, and whose
/// exec made it dumpable again) closes itself before it reads a credential.
fn close_to_inspection_by_jobs() {
    // SAFETY: prctl with PR_SET_DUMPABLE only changes a flag of this process.
    let closed = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } == 0;
    assert!(closed, "PR_SET_DUMPABLE 0 is valid on every Linux this runs on: {}", std::io::Error::last_os_error());
}

/// Descriptors this process inherited open (from a shell, a service manager) would pass on to
/// every process it starts, jobs included, which could then use them: each is marked
/// close-on-exec. (What this process opens itself is already.)
fn keep_inherited_descriptors_from_jobs() {
    let Ok(open) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<i32> = open.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    for fd in fds.into_iter().filter(|fd| *fd > 2) {
        // SAFETY: fcntl on a descriptor number only reads or sets its flags; a number that is
        // no longer open (the listing's own) fails harmlessly.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

fn dispatch(command: Command) -> Result<Outcome, CliError> {
    match command {
        Command::Head(args) => head::run(args),
        Command::Node(args) => node::run(args),
        Command::Submit(args) => submit::run(args),
        Command::Status(args) => status::run(args),
        Command::Nodes(args) => nodes::run(args),
        Command::Logs(args) => logs::run(args),
        Command::Stop(args) => stop::run(args),
        Command::Drain(args) => drain::run(args),
        Command::Undrain(args) => undrain::run(args),
        Command::Forget(args) => forget::run(args),
        Command::Sim(args) => sim::run(args),
        Command::Completions(args) => completions::run(args),
    }
}

/// Runs async work on an actix system (the head and agents are actors).
fn block_on<F: std::future::Future>(work: F) -> F::Output {
    actix::System::new().block_on(work)
}

/// `--head`, or the error that says how to give one.
fn head_url(head: Option<String>) -> Result<String, CliError> {
    let head = head.ok_or_else(|| CliError::BadInput("no head given: pass --head URL or set $FTDRIVE_HEAD".into()))?;
    head_base_url(&head)
}

/// Where a head listens unless told otherwise, and so where a bare `--head HOST` points.
pub const DEFAULT_HEAD_PORT: u16 = 7380;

/// `--head` (or `$FTDRIVE_HEAD`) as a base URL. `HOST:PORT`; a bare `HOST`, on the head's
/// default port (not http's 80, where no head listens); or `http(s)://HOST[:PORT]`, which keeps
/// its scheme's port as any URL does. Anything else is bad input, not an unreachable head.
/// Without a scheme, a loopback host means `http://` and any other `https://`, as a head serves
/// plain HTTP only on loopback unless told otherwise: a token crosses the network in clear only
/// where `http://` is written out.
fn head_base_url(given: &str) -> Result<String, CliError> {
    let bad = |why: String| {
        CliError::BadInput(format!(
            "--head `{given}`: {why}; give HOST:PORT or http(s)://HOST:PORT, such as 127.0.0.1:{DEFAULT_HEAD_PORT}"
        ))
    };
    let bare = !given.contains("://");
    let text = if bare { format!("http://{given}") } else { given.to_string() };
    let mut url = reqwest::Url::parse(&text).map_err(|e| bad(format!("not an address ({e})")))?;
    if bare && !is_loopback(&url) {
        url.set_scheme("https").expect("http and https swap");
    }
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(format!("`{}://` is not http:// or https://", url.scheme())));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("names no host".into()));
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(bad(format!("has a path (`{}`); the head's address is its host and port only", url.path())));
    }
    if bare && url.port().is_none() {
        url.set_port(Some(DEFAULT_HEAD_PORT)).expect("an http URL with a host takes a port");
    }
    Ok(url.as_str().trim_end_matches('/').to_string())
}

fn is_loopback(url: &reqwest::Url) -> bool {
    let host = url.host_str().unwrap_or_default();
    let ip = host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>();
    ip.map_or_else(|_| host.eq_ignore_ascii_case("localhost"), |ip| ip.is_loopback())
}

/// The TLS config that `--tls-cert` and `--tls-key` give, if they are given.
fn server_tls(args: &args::ServeTls) -> Result<Option<std::sync::Arc<rustls::ServerConfig>>, CliError> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else { return Ok(None) };
    let config =
        crate::tls::server_config(cert, key).map_err(|e| CliError::BadInput(format!("--tls-cert/--tls-key: {e}")))?;
    Ok(Some(std::sync::Arc::new(config)))
}

/// The text of a file the command reads whole (a job spec, a scenario), refused past
/// `limit_bytes` before more is read: `ftdrive submit /dev/zero` took gigabytes.
fn read_text_file(path: &std::path::Path, what: &str, limit_bytes: u64, why: &str) -> Result<String, CliError> {
    use std::io::Read;
    let cannot = |e: std::io::Error| CliError::BadInput(format!("cannot read {what} {}: {e}", path.display()));
    let mut bytes = Vec::new();
    std::fs::File::open(path).and_then(|f| f.take(limit_bytes + 1).read_to_end(&mut bytes)).map_err(cannot)?;
    if bytes.len() as u64 > limit_bytes {
        return Err(CliError::BadInput(format!("{what} {} is over {limit_bytes} bytes, {why}", path.display())));
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| CliError::BadInput(format!("{what} {} is not UTF-8 text: {e}", path.display())))?;
    // A byte-order mark (some editors on Windows write one) is no part of the JSON (RFC 8259 §8.1).
    Ok(text.strip_prefix('\u{feff}').map(str::to_string).unwrap_or(text))
}

/// Logs for the daemons, to stderr; `$FTDRIVE_LOG` filters (default `info`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FTDRIVE_LOG").unwrap_or_else(|_| "info".into());
    let filter = quiet_http_parse_errors(filter);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ =
        tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(|| crate::QuietStderr).try_init();
}

/// actix-http logs an ERROR line for every request it cannot parse, after answering it 400
/// itself: anyone who can connect could fill the daemon's log, and an operator would read a
/// client's mistake as the daemon's. Off unless `$FTDRIVE_LOG` names `actix_http` itself.
fn quiet_http_parse_errors(filter: tracing_subscriber::EnvFilter) -> tracing_subscriber::EnvFilter {
    if filter.to_string().contains("actix_http") {
        return filter;
    }
    filter.add_directive("actix_http::h1::dispatcher=off".parse().expect("a valid directive"))
}

#[cfg(test)]
mod tests {
    use super::head_base_url;

    #[test]
    fn a_head_address_is_host_and_port_a_bare_host_means_the_heads_port_and_off_loopback_https() {
        for (given, base) in [
            ("127.0.0.1:7390", "http://127.0.0.1:7390"),
            ("127.0.0.1", "http://127.0.0.1:7380"),
            ("head.example:9000", "https://head.example:9000"),
            ("10.0.0.5", "https://10.0.0.5:7380"),
            ("localhost:7390", "http://localhost:7390"),
            ("http://10.0.0.5:7380/", "http://10.0.0.5:7380"),
            ("https://head.example", "https://head.example"),
            ("[::1]:7380", "http://[::1]:7380"),
        ] {
            assert_eq!(head_base_url(given).unwrap(), base, "{given}");
        }
    }

    #[test]
    fn a_head_address_that_is_not_one_is_bad_input_saying_how_to_write_it() {
        for (given, why) in [
            ("not a url", "not an address"),
            ("127.0.0.1:99999", "not an address"),
            ("ftp://head:21", "`ftp://` is not http:// or https://"),
            ("http://head:7380/v1/jobs", "has a path (`/v1/jobs`)"),
        ] {
            let err = head_base_url(given).unwrap_err();
            assert!(matches!(err, super::CliError::BadInput(_)), "{given}: {err:?}");
            let said = err.to_string();
            assert!(said.starts_with(&format!("--head `{given}`: {why}")), "{said}");
            assert!(said.ends_with("such as 127.0.0.1:7380"), "{said}");
        }
    }
}
