//! The `ftdrive` binary: parse the command line, run the subcommand, map its error to an exit code.

fn main() {
    std::process::exit(ftdrive_actors::cli::run());
}
