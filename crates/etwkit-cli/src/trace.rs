//! `etwkit trace`: a live session, printed as it runs or written to an ETL file.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;

use etwkit::live::{Etw, Level, StopHandle, Trace, TraceSummary};
use etwkit::sink::Format;

use crate::dump::OutFormat;

#[derive(clap::Args)]
pub struct Args {
    /// A provider to enable: NAME or GUID, optionally `:LEVEL` (1-5, default 5) and `:KEYWORDS`
    /// (hex any-keyword mask). Tracepoint systems (see `etwkit providers`) and
    /// Microsoft-Windows-Winsock-AFD (alias `winsock`); on Windows any registered provider, and
    /// `kernel` with EVENT_TRACE_FLAG_* bits as KEYWORDS. Repeatable.
    #[arg(long = "provider", short = 'p', required = true)]
    providers: Vec<String>,
    /// Trace only this process (every thread, and on Linux every child). Repeatable.
    #[arg(long)]
    pid: Vec<u32>,
    /// Write an ETL file instead of printing events.
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
    /// Stop after this many seconds.
    #[arg(long, value_parser = crate::child::parse_seconds)]
    duration: Option<f64>,
    #[arg(long, value_enum, default_value = "table")]
    format: OutFormat,
    /// Session name (Linux: the tracefs instance is etwkit-<pid>-<name>; Windows: the ETW session's).
    #[arg(long, default_value = "trace")]
    name: String,
    /// Per-CPU buffer memory in KiB (Linux: ring size; Windows: 256 KiB ETW buffers, growing to 4x).
    #[arg(long, default_value_t = 8192)]
    buffer_kb: u64,
    /// Where the traced command's stdout goes (default: etwkit's stderr, so that etwkit's stdout
    /// carries only events).
    #[arg(long, value_name = "FILE")]
    command_stdout: Option<PathBuf>,
    /// A command to start suspended, trace, and stop with; etwkit exits with its status.
    #[arg(last = true)]
    command: Vec<String>,
}

/// Parses `NAME[:LEVEL[:KEYWORDS]]`.
pub fn parse_provider(s: &str) -> anyhow::Result<(String, u8, u64)> {
    // A GUID has no ':'; names of tracepoint systems neither.
    let mut it = s.splitn(3, ':');
    let name = it.next().unwrap_or_default().to_string();
    if name.is_empty() {
        anyhow::bail!("--provider {s:?}: empty provider name");
    }
    let level = match it.next() {
        None | Some("") => Level::VERBOSE,
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|l| (1..=5).contains(l))
            .ok_or_else(|| anyhow::anyhow!("--provider {s:?}: level {l:?} is not 1-5"))?,
    };
    let kw = match it.next() {
        None | Some("") => 0,
        Some(k) => {
            let digits = k
                .strip_prefix("0x")
                .or_else(|| k.strip_prefix("0X"))
                .unwrap_or(k);
            u64::from_str_radix(digits, 16).map_err(|e| match e.kind() {
                std::num::IntErrorKind::PosOverflow => anyhow::anyhow!(
                    "--provider {s:?}: keywords {k:?} do not fit 64 bits (at most 16 hex digits)"
                ),
                _ => anyhow::anyhow!(
                    "--provider {s:?}: keywords {k:?} are not a hex mask (e.g. 0x10)"
                ),
            })?
        }
    };
    Ok((name, level, kw))
}

pub use crate::print::Printer;

/// Stops the trace on Ctrl-C (the handler can be installed once per process), and on SIGTERM and
/// SIGHUP ([`crate::child::stop_on_termination`]).
pub fn stop_on_ctrl_c(stop: &StopHandle) {
    let s = stop.clone();
    let _ = ctrlc::set_handler(move || s.stop());
    crate::child::stop_on_termination(stop);
}

/// The end-of-trace report: stderr always, plus a JSON line in JSON mode.
pub fn report(sum: &TraceSummary, format: Format, out: &mut dyn Write) -> std::io::Result<()> {
    if format == Format::Json {
        let v = serde_json::json!({ "etwkit_summary": sum });
        writeln!(out, "{v}")?;
    }
    let detail: Vec<String> = sum
        .lost_detail
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    eprintln!(
        "etwkit: {} events delivered from {} kernel records; {} events lost{}",
        sum.events_delivered,
        sum.raw_records,
        sum.events_lost,
        if detail.is_empty() {
            String::new()
        } else {
            format!(" ({})", detail.join(", "))
        }
    );
    for i in &sum.issues {
        eprintln!("etwkit: note: {i}");
    }
    Ok(())
}

/// The line `trace` writes on stderr once the session is armed.
fn armed_line(a: &Args) -> String {
    let mut l = format!(
        "etwkit: tracing {} in session {}",
        a.providers.join(", "),
        a.name
    );
    if !a.pid.is_empty() {
        let pids: Vec<String> = a.pid.iter().map(u32::to_string).collect();
        l.push_str(&format!(" for pid {}", pids.join(", ")));
    }
    let until = match (a.command.first(), a.duration) {
        (Some(c), _) => format!("until {c} exits"),
        (None, Some(d)) => format!("for {d} s (Ctrl-C stops sooner)"),
        (None, None) if !a.pid.is_empty() => {
            "until they and their children exit (or Ctrl-C)".into()
        }
        (None, None) => "until Ctrl-C".into(),
    };
    format!("{l}, {until}")
}

pub fn enable_all(trace: &mut Trace, providers: &[String]) -> anyhow::Result<()> {
    for p in providers {
        let (name, level, kw) = parse_provider(p)?;
        trace.enable_ex(name.as_str(), 0, level, kw, 0)?;
    }
    Ok(())
}

pub fn run(a: Args) -> anyhow::Result<()> {
    crate::child::check_program(&a.command)?;
    if a.pid.is_empty() && a.command.is_empty() {
        for p in &a.providers {
            let (name, _, _) = parse_provider(p)?;
            if etwkit::live::heap::is_heap_provider(&name) {
                // Without a process it armed nothing and ended with "0 events delivered".
                anyhow::bail!(
                    "--provider {p:?}: the heap provider traces processes, not the whole system: give --pid P or -- CMD"
                );
            }
        }
    }
    let etw = Etw::new();
    let mut trace = etw.open_trace(&a.name, a.output.as_deref(), None);
    enable_all(&mut trace, &a.providers)?;
    trace.set_buffer_kb(a.buffer_kb);
    for &p in &a.pid {
        trace.add_pid(p)?;
    }
    let stop = trace.stop_handle();
    stop_on_ctrl_c(&stop);
    let mut child_status = None;
    let waiter = if a.command.is_empty() {
        trace.start()?;
        // Armed (providers enabled, pid filter in place): a script may start its workload on
        // this line.
        eprintln!("{}", armed_line(&a));
        None
    } else {
        let mut cmd = crate::child::command(&a.command, a.command_stdout.as_deref())?;
        // Said before the command is started (it is traced from its first instruction), so that
        // the line never lands among what the command writes to the same stderr.
        eprintln!("{}", armed_line(&a));
        let child = trace.spawn(&mut cmd)?;
        crate::child::set_traced_child(child.id());
        Some(crate::child::stop_when_exits(child, stop.clone()))
    };
    crate::child::stop_after(a.duration, &stop);
    let format: Format = a.format.into();
    let mut printer = Printer::new(
        format,
        Box::new(std::io::BufWriter::with_capacity(
            1 << 16,
            crate::out::stdout(),
        )),
    );
    let logfile = a.output.is_some();
    let r = trace.process(
        |ev| {
            if logfile {
                ControlFlow::Continue(())
            } else {
                printer.event(ev)
            }
        },
        None,
        None,
    );
    let sum = trace.stop(true);
    printer.finish()?;
    drop(printer);
    r?;
    let sum = sum?;
    if let Some(w) = waiter {
        child_status = w.join().ok().flatten();
    }
    report(&sum, format, &mut crate::out::stdout())?;
    if let (Some(p), Some(w)) = (&a.output, &sum.logfile) {
        eprintln!(
            "etwkit: wrote {} ({} events in {} buffers, {} bytes)",
            p.display(),
            w.records,
            w.buffers,
            w.bytes
        );
    }
    if let Some(code) = child_status.map(crate::child::exit_code) {
        if code != 0 {
            std::process::exit(code);
        }
    }
    Ok(())
}
