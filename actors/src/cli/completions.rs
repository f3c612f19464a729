//! `ftdrive completions SHELL`: the shell's completion script for every command and flag,
//! made from the command line's own definition (`args.rs`), so it cannot fall behind it.

use super::args::{Cli, CompletionsArgs};
use super::error::{CliError, Outcome};
use clap::CommandFactory;

pub fn run(args: CompletionsArgs) -> Result<Outcome, CliError> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "ftdrive", &mut script);
    super::out::bytes(&script)?;
    Ok(Outcome::Done)
}
