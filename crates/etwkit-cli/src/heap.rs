//! `etwkit heap`: heap tracing of chosen processes (live on Linux) and the leak report, also from a
//! saved trace (`--report FILE.etl`, Windows HeapTraceProvider traces included).

use std::ops::ControlFlow;
use std::path::PathBuf;

use anyhow::{bail, Context};
use etwkit::analysis::heap::{HeapAnalyzer, HeapReport, WindowsHeapEvents};

#[derive(clap::Args)]
pub struct Args {
    /// Trace this running process (every thread); repeatable.
    #[arg(long = "pid")]
    pids: Vec<u32>,
    /// Heap events that carry a stack: any of alloc,realloc,free, or none.
    #[arg(long, default_value = "alloc,realloc")]
    stacks: String,
    /// Also write the heap events to this ETL file (TraceLogging heap-provider events).
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Report format.
    #[arg(long, default_value = "table", value_parser = ["table", "json"])]
    format: String,
    /// How a spawned command is traced: `shim` (LD_PRELOAD allocator shim, fast), `uprobe` (perf
    /// uprobes, like attach mode) or `auto` (the shim when libetwkit_heapshim.so is found).
    #[arg(long, default_value = "auto", value_parser = ["auto", "shim", "uprobe"])]
    mode: String,
    /// Report from a saved trace instead of tracing live.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Stacks listed per section of the report.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Frames shown per stack.
    #[arg(long, default_value_t = 8)]
    frames: usize,
    /// Command to start suspended and trace from its first allocation.
    #[arg(last = true)]
    command: Vec<String>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let report = if let Some(file) = &a.report {
        if !a.pids.is_empty() || !a.command.is_empty() {
            bail!("--report reads a saved trace; it takes no --pid or command");
        }
        report_from_etl(file, a.top, a.frames)?
    } else {
        if a.pids.is_empty() && a.command.is_empty() {
            bail!("nothing to trace: give --pid P, or -- COMMAND ARGS, or --report FILE.etl");
        }
        live(&a)?
    };
    match a.format.as_str() {
        "json" => println!("{}", serde_json::to_string_pretty(&report)?),
        _ => print!("{}", report.to_table()),
    }
    Ok(())
}

fn report_from_etl(file: &PathBuf, top: usize, frames: usize) -> anyhow::Result<HeapReport> {
    let f =
        etwkit::etl::EtlFile::open(file).with_context(|| format!("opening {}", file.display()))?;
    let mut w = WindowsHeapEvents::new();
    let summary = f.for_each(etwkit::etl::Order::Time, |r| {
        w.push(&r.event);
        ControlFlow::Continue(())
    });
    let mut an = HeapAnalyzer::new();
    let lost = f.header().events_lost as u64 + summary.bad_records;
    an.add_lost(lost);
    if summary.bad_buffers > 0 {
        an.add_note(format!(
            "{} unreadable buffers were skipped",
            summary.bad_buffers
        ));
    }
    if w.malformed > 0 {
        an.add_note(format!("{} heap events too short to decode", w.malformed));
    }
    if w.heap_events == 0 {
        an.add_note(
            "no heap events (HeapTraceProvider 222962ab-6180-4b88-a825-346b75f2a24a) in this file",
        );
    }
    for op in w.finish() {
        an.add(&op);
    }
    Ok(an.report(None, top, frames))
}

#[cfg(target_os = "linux")]
fn live(a: &Args) -> anyhow::Result<HeapReport> {
    use etwkit::live::linux::heap::{spawn_suspended, HeapOptions, HeapTrace, StackEvents};
    use etwkit::live::linux::unwind::LinuxStackNamer;
    use std::time::{Duration, Instant};

    let stacks = StackEvents::parse(&a.stacks).map_err(anyhow::Error::msg)?;
    let shim = match a.mode.as_str() {
        _ if a.command.is_empty() => None,
        "uprobe" => None,
        "shim" => Some(etwkit::live::linux::heap::shim::find_shim().ok_or_else(|| {
            anyhow::anyhow!("libetwkit_heapshim.so not found next to etwkit (build the etwkit-heapshim crate, or set ETWKIT_HEAPSHIM)")
        })?),
        _ => etwkit::live::linux::heap::shim::find_shim(),
    };
    if let Some(shim) = shim {
        if !a.pids.is_empty() {
            bail!("--pid cannot be combined with a command in shim mode (use --mode uprobe)");
        }
        return live_shim(a, &shim, stacks);
    }
    let opts = HeapOptions {
        stacks,
        ..Default::default()
    };
    let mut child = None;
    let mut trace = if a.command.is_empty() {
        HeapTrace::attach(&a.pids, opts)?
    } else {
        let mut cmd = std::process::Command::new(&a.command[0]);
        cmd.args(&a.command[1..]);
        let suspended = spawn_suspended(&mut cmd)?;
        let mut t = HeapTrace::for_suspended(&suspended, opts)?;
        for &p in &a.pids {
            t.add_process(p, false)?;
        }
        child = Some(suspended.resume()?);
        t
    };
    // Ctrl-C ends the trace (the report still prints).
    let stop = trace.stop_handle();
    ctrlc_stop(stop);

    let mut writer = open_output(a.output.as_deref())?;
    let mut write_err = None;
    let mut an = HeapAnalyzer::new();
    let mut last = Instant::now();
    trace.process(|op| {
        an.add(op);
        if let Some((w, enc)) = writer.as_mut() {
            if let Err(e) = w.write_event(&enc.encode(op, 0)) {
                write_err = Some(e);
                return ControlFlow::Break(());
            }
        }
        if last.elapsed() >= Duration::from_secs(1) {
            last = Instant::now();
            eprintln!(
                "etwkit heap: {} ops, {} blocks / {} bytes outstanding",
                an.ops(),
                an.outstanding_count(),
                an.outstanding_bytes()
            );
        }
        ControlFlow::Continue(())
    })?;
    if let Some(e) = write_err {
        return Err(e.into());
    }
    let stats = trace.stats().clone();
    an.add_lost(stats.lost_samples);
    if stats.unmatched_returns > 0 {
        an.add_note(format!(
            "{} allocator returns without their entry (lost)",
            stats.unmatched_returns
        ));
    }
    if stats.lost_returns > 0 {
        an.add_note(format!(
            "{} allocator calls whose return was lost",
            stats.lost_returns
        ));
    }
    if stats.pending_at_end > 0 {
        an.add_note(format!(
            "{} allocator calls still in flight when tracing stopped",
            stats.pending_at_end
        ));
    }
    if let Some((mut w, _)) = writer {
        w.add_events_lost(stats.lost_samples.min(u32::MAX as u64) as u32);
        w.finish()?;
    }
    let status = match child.as_mut() {
        Some(c) => Some(c.wait()?),
        None => None,
    };
    let mut namer = LinuxStackNamer::new(trace.unwinder().all_maps());
    let report = an.report(Some(&mut namer), a.top, a.frames);
    if let Some(s) = status {
        eprintln!("etwkit heap: command exited with {s}");
    }
    Ok(report)
}

#[cfg(target_os = "linux")]
fn live_shim(
    a: &Args,
    shim: &std::path::Path,
    stacks: etwkit::live::linux::heap::StackEvents,
) -> anyhow::Result<HeapReport> {
    use etwkit::live::linux::heap::shim::ShimTrace;
    use etwkit::live::linux::unwind::LinuxStackNamer;
    use std::time::{Duration, Instant};

    let mut cmd = std::process::Command::new(&a.command[0]);
    cmd.args(&a.command[1..]);
    if a.output.is_some() {
        // Every operation goes to the ETL file: no in-process pairing.
        cmd.env("ETWKIT_HEAP_FULL", "1");
    }
    let mut trace = ShimTrace::spawn(&mut cmd, shim, stacks)?;
    ctrlc_stop(trace.stop_handle());
    let mut writer = open_output(a.output.as_deref())?;
    let mut write_err = None;
    let mut an = HeapAnalyzer::new();
    let mut last = Instant::now();
    let received = std::cell::Cell::new(0u64);
    trace.process(
        |records| received.set(records),
        |op| {
            an.add(op);
            if last.elapsed() >= Duration::from_secs(1) {
                last = Instant::now();
                // Short-lived pairs are counted inside the process and arrive with its last records.
                eprintln!(
                    "etwkit heap: {} records received; {} blocks / {} bytes outstanding so far",
                    received.get(),
                    an.outstanding_count(),
                    an.outstanding_bytes()
                );
            }
            if let Some((w, enc)) = writer.as_mut() {
                if let Err(e) = w.write_event(&enc.encode(op, 0)) {
                    write_err = Some(e);
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        },
    )?;
    if let Some(e) = write_err {
        return Err(e.into());
    }
    for (pid, stack, _api, count, bytes) in trace.transient() {
        an.add_transient(*pid, stack, *count, *bytes);
    }
    for (pid, n) in trace.reallocs() {
        an.add_reallocs(*pid, *n);
    }
    let st = trace.stats().clone();
    if st.malformed > 0 {
        an.add_note(format!("{} malformed shim records", st.malformed));
    }
    if let Some((w, _)) = writer {
        w.finish()?;
    }
    let status = match trace.child_mut() {
        Some(c) => Some(c.wait()?),
        None => None,
    };
    if let Some(sig) = status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s)) {
        // The shim flushes at exit; a process killed by a signal loses what it had not sent.
        an.add_note(format!(
            "the command was killed by signal {sig}: heap operations it had not sent yet are missing"
        ));
    }
    let mut namer = LinuxStackNamer::new(trace.maps());
    let report = an.report(Some(&mut namer), a.top, a.frames);
    if let Some(s) = status {
        eprintln!("etwkit heap: command exited with {s} (traced with the allocator shim)");
    }
    Ok(report)
}

#[cfg(target_os = "linux")]
fn ctrlc_stop(stop: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    // A SIGINT only sets the flag; the trace loop notices within 50 ms and drains what is left.
    static FLAG: std::sync::OnceLock<std::sync::Arc<std::sync::atomic::AtomicBool>> =
        std::sync::OnceLock::new();
    let _ = FLAG.set(stop);
    extern "C" fn on_sigint(_: i32) {
        if let Some(f) = FLAG.get() {
            f.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    extern "C" {
        fn signal(sig: i32, handler: extern "C" fn(i32)) -> usize;
    }
    // SAFETY: installing a handler that only does an atomic store (async-signal-safe).
    unsafe {
        signal(2, on_sigint);
    }
}

#[cfg(not(target_os = "linux"))]
fn live(_a: &Args) -> anyhow::Result<HeapReport> {
    bail!("live heap tracing from this command is implemented on Linux; on Windows use the library's heap session (etwkit::live::windows::heap)")
}

#[cfg(target_os = "linux")]
type HeapOutput = (
    etwkit::etl::writer::Writer<std::fs::File>,
    etwkit::analysis::heap::HeapEventEncoder,
);

/// `-o FILE.etl`: the ETL writer and the encoder that turns heap operations into heap-provider events.
#[cfg(target_os = "linux")]
fn open_output(path: Option<&std::path::Path>) -> anyhow::Result<Option<HeapOutput>> {
    path.map(|p| -> anyhow::Result<_> {
        Ok((
            etwkit::etl::writer::Writer::create(p, etwkit::etl::writer::WriterOptions::now())?,
            etwkit::analysis::heap::HeapEventEncoder::new().map_err(|e| anyhow::anyhow!("{e}"))?,
        ))
    })
    .transpose()
}
