//! `ftdrive`'s command line: parse, dispatch to one file per subcommand, map the result to an
//! exit code in one place.

pub mod args;
mod client;
mod drain;
pub mod error;
mod follow;
mod head;
mod local;
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
    let cli = Cli::parse();
    let result = dispatch(cli.command);
    match &result {
        Err(CliError::ReaderGone) | Ok(_) => {}
        Err(err) => eprintln!("ftdrive: {err}"),
    }
    exit_code(&result)
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
        Command::Sim(args) => sim::run(args),
    }
}

/// Runs async work on an actix system (the head and agents are actors).
fn block_on<F: std::future::Future>(work: F) -> F::Output {
    actix::System::new().block_on(work)
}

/// `--head`, or the error that says how to give one.
fn head_url(head: Option<String>) -> Result<String, CliError> {
    head.ok_or_else(|| CliError::BadInput("no head given: pass --head URL or set $FTDRIVE_HEAD".into()))
}

/// The TLS config that `--tls-cert` and `--tls-key` give, if they are given.
fn server_tls(args: &args::ServeTls) -> Result<Option<std::sync::Arc<rustls::ServerConfig>>, CliError> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else { return Ok(None) };
    let config =
        crate::tls::server_config(cert, key).map_err(|e| CliError::BadInput(format!("--tls-cert/--tls-key: {e}")))?;
    Ok(Some(std::sync::Arc::new(config)))
}

/// Logs for the daemons, to stderr; `$FTDRIVE_LOG` filters (default `info`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FTDRIVE_LOG").unwrap_or_else(|_| "info".into());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).try_init();
}
