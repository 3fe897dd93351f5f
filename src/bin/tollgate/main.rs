//! The `tollgate` command.

use clap::{Parser, Subcommand};

mod lease;
mod load;
mod load_allow;
mod pace;
mod quota;
mod serve;
mod simulate;

#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Drive a rate limiter with threads or tasks and report how well it
    /// holds the rate.
    Pace(pace::Args),
    /// Run a Doorman-compatible capacity lease server.
    Serve(serve::Args),
    /// Load-test a capacity server with many simulated clients, or a quota
    /// server with Allow calls (`--mode allow`).
    Load(load::Args),
    /// Ask a capacity server for leases and print them as they refresh.
    Lease(lease::Args),
    /// Simulate a server tree's convergence on a virtual clock.
    Simulate(simulate::Args),
    /// Run a quotaservice-compatible Allow server.
    Quota(quota::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Pace(args) => pace::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Load(args) => load::run(args),
        Command::Lease(args) => lease::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Quota(args) => quota::run(args),
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, Parser as _};

    use super::{Cli, Command};

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_needs_no_arguments() {
        let cli = Cli::try_parse_from(["tollgate", "serve"]).unwrap();
        assert!(matches!(cli.command, Command::Serve(_)));
    }
}
