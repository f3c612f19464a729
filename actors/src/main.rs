//! The `ftdrive` binary: parse the command line, run the subcommand, map its error to an exit code.

fn main() {
    abort_on_panic();
    std::process::exit(ftdrive_actors::cli::run());
}

/// A panic anywhere — in the head's actor, an agent's, a server worker — ends the process
/// after the usual message, instead of leaving a half-alive daemon answering errors. A
/// restarted head or agent loses nothing (DESIGN §10); a half-alive one would.
fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
}
