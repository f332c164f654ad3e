//! `etwkit`: a thin command line over the etwkit library.

use clap::{CommandFactory, Parser, Subcommand};

/// `println!` that returns the write error (`?`) instead of panicking: a closed pipe
/// (`etwkit info f.etl | head -1`) then ends etwkit quietly with status 0, like any other error path.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!($crate::out::stdout(), $($t)*)?
    }};
}

mod child;
mod cpu;
mod demo;
mod dump;
mod export;
mod filter_args;
mod heap;
mod info;
mod inputs;
mod issues;
mod net;
mod out;
mod pcap;
mod print;
mod progress;
mod relog;
mod sessions;
mod stats;
mod symbols;
mod trace;

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
enum Command {
    /// Show the logfile header of an ETL file.
    Info(info::Args),
    /// Count records, header types, providers, buffers and losses of an ETL file.
    Stats(stats::Args),
    /// Print the events of an ETL file, one per line.
    Dump(dump::Args),
    /// Copy matching records of ETL files, merged in time order, into a new ETL file (--begin/--end
    /// in seconds count from the earliest input's start).
    Relog(relog::Args),
    /// Decoded events of ETL files as a Parquet dataset: events.parquet and one typed table per
    /// event type (DuckDB, Spark, pandas).
    Export(export::Args),
    /// Write the packets of a PktMon or NDIS-PacketCapture (netsh trace) trace as a pcapng capture (Wireshark, tshark).
    Pcap(pcap::Args),
    /// Trace live (Linux: tracefs, needs root; Windows: an ETW session, needs an elevated prompt).
    Trace(trace::Args),
    /// List live sessions (Linux: tracefs instances, etwkit's are etwkit-<pid>-<name>; Windows: ETW sessions).
    Sessions(sessions::Args),
    /// List providers (Linux: every tracepoint system, plus Microsoft-Windows-Winsock-AFD; Windows:
    /// etwkit's own, then every registered one).
    Providers(sessions::Args),
    /// The built-in demo workload (run traced by `etwkit` with no command).
    #[command(name = "__demo-workload", hide = true)]
    DemoWorkload,
    /// Trace the heap of processes (live on Linux) and report what is still allocated, by stack.
    Heap(heap::Args),
    /// CPU sampling profile of an ETL file (kernel SampledProfile events): samples per process,
    /// module and stack; also as pprof or a flame graph.
    Cpu(cpu::Args),
    /// One row per socket (who, to whom, how much, how long, what failed) from AFD events: ETL files, or live.
    Net(net::Args),
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                // What was asked for, as clap prints it; a closed stdout is the reader's choice.
                e.print().ok();
                std::process::exit(0);
            }
            eprintln!("etwkit: {}", usage_error(&e));
            std::process::exit(2);
        }
    };
    let result = match cli.command {
        Some(Command::Info(a)) => info::run(a),
        Some(Command::Stats(a)) => stats::run(a),
        Some(Command::Dump(a)) => dump::run(a),
        Some(Command::Relog(a)) => relog::run(a),
        Some(Command::Export(a)) => export::run(a),
        Some(Command::Pcap(a)) => pcap::run(a),
        Some(Command::Trace(a)) => trace::run(a),
        Some(Command::Heap(a)) => heap::run(a),
        Some(Command::Net(a)) => net::run(a),
        Some(Command::Cpu(a)) => cpu::run(a),
        Some(Command::Sessions(a)) => sessions::sessions(a),
        Some(Command::Providers(a)) => sessions::providers(a),
        Some(Command::DemoWorkload) => demo::workload(),
        None => demo::run(),
    };
    if let Err(e) = result {
        // A closed pipe (e.g. `etwkit dump f.etl | head`) is not an error worth a message.
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        {
            std::process::exit(0);
        }
        eprintln!("etwkit: {}", message(&e));
        std::process::exit(1);
    }
}

/// One line for an error and its causes, each fact once: a cause whose text the message already
/// holds (library errors name their source in their own text) is not repeated.
/// An OS error is said once: a cause that only words it again (`X: No such file or directory (os
/// error 2)` under `cannot open X: No such file or directory (os error 2)`) is left out too.
pub(crate) fn message(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        let said_os_error = os_error(&c).is_some_and(|o| msg.contains(o));
        if !msg.contains(&c) && !said_os_error {
            msg.push_str(": ");
            msg.push_str(&c);
        }
    }
    msg
}

/// The `(os error N)` a message ends with.
fn os_error(s: &str) -> Option<&str> {
    let start = s.rfind("(os error ")?;
    s[start..].ends_with(')').then(|| &s[start..])
}

/// A command line clap refused, in one sentence: clap's `error:` line (and the lines that
/// continue it, such as the missing arguments or the possible values), then where to read more:
/// `invalid value 'abc' for '--pid <PID>': invalid digit found in string (etwkit dump --help)`.
fn usage_error(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut lines = text.lines().skip_while(|l| !l.starts_with("error:"));
    let mut msg = lines
        .next()
        .map_or("invalid command line", |l| l["error:".len()..].trim())
        .to_string();
    // Continuation lines are indented and come before the first blank line.
    for l in lines.take_while(|l| !l.trim().is_empty()) {
        let l = l.trim();
        // A list item follows its colon or the item before it; `[possible values: ...]` stands alone.
        msg.push_str(if msg.ends_with(':') || l.starts_with('[') {
            " "
        } else {
            ", "
        });
        msg.push_str(l);
    }
    // The subcommand is the first argument when it names one (there are no global options).
    let cmd = Cli::command();
    let sub = std::env::args_os().nth(1).and_then(|a| {
        let a = a.to_str()?.to_string();
        cmd.get_subcommands()
            .find(|s| s.get_name() == a || s.get_all_aliases().any(|al| al == a))
            .map(|s| s.get_name().to_string())
    });
    match sub {
        Some(s) => format!("{msg} (etwkit {s} --help)"),
        None => format!("{msg} (etwkit --help)"),
    }
}

#[cfg(test)]
mod tests {
    use super::message;

    #[test]
    fn an_os_error_is_said_once() {
        let inner = anyhow::anyhow!("reading x.etl: No such file or directory (os error 2)");
        let e = inner.context("cannot open x.etl: No such file or directory (os error 2)");
        assert_eq!(
            message(&e),
            "cannot open x.etl: No such file or directory (os error 2)"
        );
        let e = anyhow::Error::new(std::io::Error::from_raw_os_error(13)).context("cannot write y");
        assert_eq!(
            message(&e),
            "cannot write y: Permission denied (os error 13)"
        );
    }
}
