//! The `tollgate` command.

use clap::{Parser, Subcommand};

mod pace;

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
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Pace(args) => pace::run(args),
    }
}
