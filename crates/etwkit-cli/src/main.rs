//! `etwkit`: a thin command line over the etwkit library.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "etwkit",
    version,
    about = "Event Tracing for Windows, done right, on every OS"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        None => Ok(()),
    }
}
