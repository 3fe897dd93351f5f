//! The `tollgate` command.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;
mod go_flags;
mod grpc_client;
mod lease;
mod load;
mod load_allow;
mod load_h2;
mod load_lease;
mod load_rls;
mod load_wire;
mod pace;
mod plot;
mod quota;
mod rls;
mod serve;
mod simulate;

#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines as text (colour only on a terminal) or as JSON objects;
    /// always on stderr. `RUST_LOG` sets the level (e.g. `RUST_LOG=debug`).
    #[arg(long, global = true, value_enum, default_value_t = cli::LogFormat::Text)]
    log_format: cli::LogFormat,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Drive a rate limiter with threads or tasks and report how well it
    /// holds the rate.
    Pace(pace::Args),
    /// Run a Doorman-compatible capacity lease server.
    Serve(serve::Args),
    /// Load-test a capacity server with many simulated clients, a quota
    /// server with Allow calls (`--mode allow`), or a rate limit service
    /// with ShouldRateLimit calls (`--mode rls`).
    Load(load::Args),
    /// Ask a capacity server for leases and print them as they refresh.
    Lease(lease::Args),
    /// Simulate a server tree's convergence on a virtual clock.
    Simulate(simulate::Args),
    /// Run a quotaservice-compatible Allow server.
    Quota(quota::Args),
    /// Run Envoy's rate limit service (envoyproxy/ratelimit's
    /// configuration and answers).
    Rls(rls::Args),
}

/// Runs the command; an error is printed as one `error: ...` line (its
/// causes joined by `: `), never with a backtrace, and exits with 1.
fn main() -> ExitCode {
    let argv = match go_flags::go_flags(std::env::args_os()) {
        Ok(argv) => argv,
        Err(e) => {
            // As clap reports a usage error: one line, exit status 2.
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let cli = Cli::parse_from(argv);
    // Servers say what they do at info; tools keep stderr for trouble.
    let level = match cli.command {
        Command::Serve(_) | Command::Quota(_) | Command::Rls(_) => "info",
        Command::Simulate(_) => "error",
        Command::Pace(_) | Command::Load(_) | Command::Lease(_) => "warn",
    };
    cli::init_logging(cli.log_format, level);
    let result = match cli.command {
        Command::Pace(args) => pace::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Load(args) => load::run(args),
        Command::Lease(args) => lease::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Quota(args) => quota::run(args),
        Command::Rls(args) => rls::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
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
