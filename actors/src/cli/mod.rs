//! `ftdrive`'s command line: parse, dispatch to one file per subcommand, map the result to an
//! exit code in one place.

pub mod args;
pub mod error;
mod sim;

use args::{Cli, Command};
use clap::Parser;
use error::{exit_code, CliError, Outcome};

/// Runs the command line and returns the process exit code.
pub fn run() -> i32 {
    let cli = Cli::parse();
    let result = dispatch(cli.command);
    if let Err(err) = &result {
        eprintln!("ftdrive: {err}");
    }
    exit_code(&result)
}

fn dispatch(command: Command) -> Result<Outcome, CliError> {
    match command {
        Command::Head(_) => Err(CliError::NotBuilt("head")),
        Command::Node(_) => Err(CliError::NotBuilt("node")),
        Command::Submit(_) => Err(CliError::NotBuilt("submit")),
        Command::Status(_) => Err(CliError::NotBuilt("status")),
        Command::Nodes(_) => Err(CliError::NotBuilt("nodes")),
        Command::Logs(_) => Err(CliError::NotBuilt("logs")),
        Command::Stop(_) => Err(CliError::NotBuilt("stop")),
        Command::Drain(_) => Err(CliError::NotBuilt("drain")),
        Command::Sim(args) => sim::run(args),
    }
}
