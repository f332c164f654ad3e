//! `etwkit heap`: heap tracing of chosen processes (live on Linux) and the leak report, also from a
//! saved trace (`--report FILE.etl`, Windows HeapTraceProvider traces included).

use std::ops::ControlFlow;
use std::path::PathBuf;

use anyhow::bail;
use etwkit::analysis::heap::{HeapAnalyzer, HeapReport};

#[derive(clap::Args)]
pub struct Args {
    /// Trace this running process (every thread, and threads it starts later). One process: the
    /// allocator shim is loaded into it (ptrace + its own dlopen) and taken out again at the end;
    /// several, or where that cannot work: uprobes. Repeatable.
    #[arg(long = "pid")]
    pids: Vec<u32>,
    /// Stop tracing after this many seconds (else at Ctrl-C, or when the traced processes end).
    #[arg(long)]
    duration: Option<f64>,
    /// With --pid in shim mode: also trace children the process forks from now on.
    #[arg(long)]
    follow_forks: bool,
    /// Heap events that carry a stack: any of alloc,realloc,free, or none.
    #[arg(long, default_value = "alloc,realloc")]
    stacks: String,
    /// Also write the heap events to this ETL file (TraceLogging heap-provider events).
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Report format.
    #[arg(long, default_value = "table", value_parser = ["table", "json"])]
    format: String,
    /// How processes are traced: `shim` (the allocator shim built into etwkit, or $ETWKIT_HEAPSHIM:
    /// preloaded into a command, loaded into a running process; exact and fast), `uprobe` (perf
    /// uprobes; slow, may lose events) or `auto` (the shim wherever it can work).
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
    /// Also write the report as a pprof profile (profile.proto, gzipped: inuse/alloc space and
    /// objects by stack; `go tool pprof FILE`). Holds every stack, whatever --top says.
    #[arg(long, value_name = "FILE")]
    pprof: Option<PathBuf>,
    /// Also draw outstanding bytes by stack as a flame graph (SVG). Every stack, whatever --top says.
    #[arg(long, value_name = "FILE")]
    flamegraph: Option<PathBuf>,
    /// Where the traced command's stdout goes (default: etwkit's stderr, so that etwkit's stdout
    /// carries only the report).
    #[arg(long, value_name = "FILE")]
    command_stdout: Option<PathBuf>,
    /// Command to start suspended and trace from its first allocation; etwkit exits with its status.
    #[arg(last = true)]
    command: Vec<String>,
}

/// What a live trace gives besides the report: the command's exit status and how it was traced.
struct LiveOutcome {
    report: HeapReport,
    status: Option<std::process::ExitStatus>,
    /// The final line's account of the mode used.
    mode: String,
}

pub fn run(mut a: Args) -> anyhow::Result<()> {
    // Profiles hold every stack: the report is built whole, and cut to --top for printing.
    let shown = a.top;
    if a.pprof.is_some() || a.flamegraph.is_some() {
        a.top = usize::MAX;
    }
    let mut outcome = if let Some(file) = &a.report {
        if !a.pids.is_empty() || !a.command.is_empty() {
            bail!("--report reads a saved trace; it takes no --pid or command");
        }
        LiveOutcome {
            report: report_from_etl(file, a.top, a.frames)?,
            status: None,
            mode: String::new(),
        }
    } else {
        if a.pids.is_empty() && a.command.is_empty() {
            bail!("nothing to trace: give --pid P, or -- COMMAND ARGS, or --report FILE.etl");
        }
        live(&a)?
    };
    write_profiles(&a, &outcome.report)?;
    outcome.report.outstanding_by_stack.truncate(shown);
    outcome.report.top_allocating_stacks.truncate(shown);
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        match a.format.as_str() {
            // One line: a JSON stream any line-oriented reader takes whole.
            "json" => writeln!(out, "{}", serde_json::to_string(&outcome.report)?)?,
            _ => write!(out, "{}", outcome.report.to_table())?,
        }
        out.flush()?;
    }
    let code = outcome.status.map(crate::child::exit_code);
    if !outcome.mode.is_empty() {
        match outcome.status {
            Some(s) => eprintln!("etwkit heap: command exited with {s}; {}", outcome.mode),
            None => eprintln!("etwkit heap: {}", outcome.mode),
        }
    }
    // The traced command's status is ours (a shell sees the program's failure).
    if let Some(c) = code.filter(|&c| c != 0) {
        std::process::exit(c);
    }
    Ok(())
}

/// `--pprof FILE`, `--flamegraph FILE`.
fn write_profiles(a: &Args, report: &HeapReport) -> anyhow::Result<()> {
    let create = |p: &PathBuf| {
        std::fs::File::create(p)
            .map(std::io::BufWriter::new)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", p.display()))
    };
    if let Some(p) = &a.pprof {
        etwkit::export::pprof::write_pprof(report, create(p)?)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", p.display()))?;
        eprintln!("etwkit heap: wrote the pprof profile {}", p.display());
    }
    if let Some(p) = &a.flamegraph {
        let title = "Outstanding bytes by allocation stack (etwkit heap)";
        etwkit::export::flamegraph::write_flamegraph(report, Some(title), create(p)?)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", p.display()))?;
        eprintln!("etwkit heap: wrote the flame graph {}", p.display());
    }
    Ok(())
}

/// Logger name of `-o` files written while attached to a running process; their StartTime is when
/// tracing started.
const ATTACHED_LOGGER: &str = "etwkit heap (attached)";

fn report_from_etl(file: &PathBuf, top: usize, frames: usize) -> anyhow::Result<HeapReport> {
    let f = etwkit::etl::EtlFile::open(file)?;
    let (mut an, images) = etwkit::analysis::heap::analyze_file(&f);
    if f.header().logger_name == ATTACHED_LOGGER {
        an.set_tracing_started(f.header().start_time);
    }
    Ok(report_named(&an, &images, top, frames))
}

/// The report, stacks named through the executable mappings the file carries (Linux-born traces).
pub fn report_named(
    an: &HeapAnalyzer,
    images: &[etwkit::analysis::heap::ImageMapping],
    top: usize,
    frames: usize,
) -> HeapReport {
    #[cfg(target_os = "linux")]
    if let Some(mut namer) = etwkit::live::linux::unwind::LinuxStackNamer::from_images(images) {
        return an.report(Some(&mut namer), top, frames);
    }
    let _ = images;
    an.report(None, top, frames)
}

/// The allocator shim: `$ETWKIT_HEAPSHIM`, else the copy built into this executable (build.rs).
/// Err: why there is none, in one sentence.
#[cfg(target_os = "linux")]
fn shim() -> Result<Shim, String> {
    if let Some(p) = std::env::var_os("ETWKIT_HEAPSHIM") {
        let p = PathBuf::from(p);
        return match p.is_file() {
            true => Ok(Shim::Path(p)),
            false => Err(format!(
                "ETWKIT_HEAPSHIM names {}, which is not a file",
                p.display()
            )),
        };
    }
    match EMBEDDED_SHIM {
        Some(bytes) => etwkit::live::linux::heap::shim::ShimFile::from_bytes(bytes)
            .map(Shim::Embedded)
            .map_err(|e| {
                format!("the built-in allocator shim could not be loaded into memory ({e})")
            }),
        None => Err(format!(
            "this etwkit was built without the allocator shim ({})",
            option_env!("ETWKIT_SHIM_MISSING").unwrap_or("its build failed")
        )),
    }
}

#[cfg(all(target_os = "linux", etwkit_embedded_shim))]
const EMBEDDED_SHIM: Option<&[u8]> = Some(include_bytes!(concat!(
    env!("OUT_DIR"),
    "/libetwkit_heapshim.so"
)));
#[cfg(all(target_os = "linux", not(etwkit_embedded_shim)))]
const EMBEDDED_SHIM: Option<&[u8]> = None;

#[cfg(target_os = "linux")]
enum Shim {
    Path(PathBuf),
    Embedded(etwkit::live::linux::heap::shim::ShimFile),
}

#[cfg(target_os = "linux")]
impl Shim {
    fn path(&self) -> &std::path::Path {
        match self {
            Shim::Path(p) => p,
            Shim::Embedded(f) => f.path(),
        }
    }
}

/// The traced command, its output on our stderr (or --command-stdout): stdout carries only
/// etwkit's report.
#[cfg(target_os = "linux")]
fn command(a: &Args) -> anyhow::Result<std::process::Command> {
    crate::child::command(&a.command, a.command_stdout.as_deref())
}

#[cfg(target_os = "linux")]
fn live(a: &Args) -> anyhow::Result<LiveOutcome> {
    use etwkit::live::linux::heap::{spawn_suspended, HeapOptions, HeapTrace, StackEvents};
    use etwkit::live::linux::unwind::LinuxStackNamer;
    use std::time::{Duration, Instant};

    let stacks = StackEvents::parse(&a.stacks).map_err(anyhow::Error::msg)?;
    let mut why_uprobes = String::from("as asked with --mode uprobe");
    if !a.command.is_empty() && a.mode != "uprobe" {
        match shim() {
            Ok(shim) => {
                if !a.pids.is_empty() {
                    bail!(
                        "--pid cannot be combined with a command in shim mode (use --mode uprobe)"
                    );
                }
                return live_shim(a, shim.path(), stacks);
            }
            Err(why) if a.mode == "shim" => bail!("{why}"),
            Err(why) => why_uprobes = format!("because the allocator shim is unavailable: {why}"),
        }
    }
    if a.command.is_empty() {
        why_uprobes = "attached to running processes".into();
        if a.mode != "uprobe" {
            match attach_shim(a, stacks) {
                Ok(outcome) => return Ok(outcome),
                Err(AttachFallback::Reason(why)) if a.mode == "auto" => {
                    why_uprobes = format!("because the allocator shim cannot be loaded: {why}")
                }
                Err(AttachFallback::Reason(why)) => bail!("{why}"),
                Err(AttachFallback::Error(e)) => return Err(e),
            }
        }
    }
    let opts = HeapOptions {
        stacks,
        ..Default::default()
    };
    let mut child = None;
    let mut trace = if a.command.is_empty() {
        HeapTrace::attach(&a.pids, opts)?
    } else {
        let mut cmd = command(a)?;
        let suspended = spawn_suspended(&mut cmd)?;
        let mut t = HeapTrace::for_suspended(&suspended, opts)?;
        for &p in &a.pids {
            t.add_process(p, false)?;
        }
        child = Some(suspended.resume()?);
        t
    };
    // Ctrl-C or --duration ends the trace (the report still prints).
    let stop = trace.stop_handle();
    stop_after(a.duration, &stop);
    ctrlc_stop(stop);

    let mut writer = open_output(a.output.as_deref(), None)?;
    let mut write_err = None;
    let mut an = HeapAnalyzer::new();
    let mut last = Instant::now();
    trace.process(|op| {
        an.add(op);
        if let Some(out) = writer.as_mut() {
            if let Err(e) = out.write(op) {
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
    let maps = trace.unwinder().all_maps();
    if let Some(mut out) = writer {
        out.writer
            .add_events_lost(stats.lost_samples.min(u32::MAX as u64) as u32);
        out.finish(&maps)?;
    }
    let status = match child.as_mut() {
        Some(c) => Some(c.wait()?),
        None => None,
    };
    let mut namer = LinuxStackNamer::new(maps);
    let report = an.report(Some(&mut namer), a.top, a.frames);
    let exact = if report.exact {
        "exact"
    } else {
        "FIGURES ARE NOT EXACT"
    };
    Ok(LiveOutcome {
        report,
        status,
        mode: format!("traced with uprobes, {why_uprobes} ({exact})"),
    })
}

#[cfg(target_os = "linux")]
enum AttachFallback {
    /// Injection cannot work here (one sentence).
    Reason(String),
    Error(anyhow::Error),
}

/// `--pid P`: loads the shim into P and traces it until Ctrl-C, --duration or its end.
#[cfg(target_os = "linux")]
fn attach_shim(
    a: &Args,
    stacks: etwkit::live::linux::heap::StackEvents,
) -> Result<LiveOutcome, AttachFallback> {
    use etwkit::live::linux::heap::inject::InjectError;
    use etwkit::live::linux::heap::shim::{installed_copy, ShimOptions, ShimTrace};
    if a.pids.len() != 1 {
        return Err(AttachFallback::Reason(
            "the shim attaches to one process at a time".into(),
        ));
    }
    let pid = a.pids[0];
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Err(AttachFallback::Error(anyhow::anyhow!(
            "process {pid} not found"
        )));
    }
    // A file the target can open (the memfd of spawn mode is ours alone).
    let path = match std::env::var_os("ETWKIT_HEAPSHIM") {
        Some(p) => PathBuf::from(p),
        None => match EMBEDDED_SHIM {
            Some(bytes) => installed_copy(bytes).map_err(|e| {
                AttachFallback::Reason(format!("the built-in shim could not be written out ({e})"))
            })?,
            None => {
                return Err(AttachFallback::Reason(
                    shim().err().unwrap_or_else(|| "no shim".into()),
                ))
            }
        },
    };
    let opts = ShimOptions {
        stacks,
        every_op: a.output.is_some(),
    };
    let trace = match ShimTrace::attach(pid, &path, opts, a.follow_forks) {
        Ok(t) => t,
        Err(InjectError::Unsupported(why)) => return Err(AttachFallback::Reason(why)),
        Err(InjectError::Failed(why)) => return Err(AttachFallback::Error(anyhow::anyhow!(why))),
    };
    eprintln!("etwkit heap: allocator shim loaded into process {pid}; Ctrl-C to stop");
    run_shim(a, trace).map_err(AttachFallback::Error)
}

#[cfg(target_os = "linux")]
fn live_shim(
    a: &Args,
    shim: &std::path::Path,
    stacks: etwkit::live::linux::heap::StackEvents,
) -> anyhow::Result<LiveOutcome> {
    use etwkit::live::linux::heap::shim::{ShimOptions, ShimTrace};
    let mut cmd = command(a)?;
    // Every operation goes to the ETL file, in time order: no in-process pairing.
    let opts = ShimOptions {
        stacks,
        every_op: a.output.is_some(),
    };
    let trace = ShimTrace::spawn_with(&mut cmd, shim, opts)?;
    run_shim(a, trace)
}

/// Reads a shim trace (spawned or attached) to its end; the report.
#[cfg(target_os = "linux")]
fn run_shim(
    a: &Args,
    mut trace: etwkit::live::linux::heap::shim::ShimTrace,
) -> anyhow::Result<LiveOutcome> {
    use etwkit::live::linux::unwind::LinuxStackNamer;
    use std::time::{Duration, Instant};

    stop_after(a.duration, &trace.stop_handle());
    ctrlc_stop(trace.stop_handle());
    let attached_at = trace.attached_pid().map(|_| trace.started());
    let mut writer = open_output(a.output.as_deref(), attached_at)?;
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
            if let Some(out) = writer.as_mut() {
                if let Err(e) = out.write(op) {
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
    let maps = trace.maps();
    if let Some(out) = writer {
        out.finish(&maps)?;
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
    if let Some(pid) = trace.attached_pid() {
        an.set_tracing_started(trace.started());
        if !trace.detached_cleanly() {
            an.add_note(format!(
                "process {pid} did not confirm the end of tracing: operations it had not sent are missing"
            ));
        }
    }
    let mut namer = LinuxStackNamer::new(maps);
    let report = an.report(Some(&mut namer), a.top, a.frames);
    let exact = if report.exact {
        "exact"
    } else {
        "FIGURES ARE NOT EXACT"
    };
    let how = match trace.attached_pid() {
        Some(pid) => format!("traced with the allocator shim loaded into process {pid}, now taken out again ({exact})"),
        None => format!("traced with the allocator shim ({exact})"),
    };
    Ok(LiveOutcome {
        report,
        status,
        mode: how,
    })
}

/// `--duration`: sets the stop flag after that many seconds.
#[cfg(target_os = "linux")]
fn stop_after(d: Option<f64>, stop: &std::sync::Arc<std::sync::atomic::AtomicBool>) {
    if let Some(d) = d {
        let s = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs_f64(d.max(0.0)));
            s.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }
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
fn live(_a: &Args) -> anyhow::Result<LiveOutcome> {
    bail!("live heap tracing from this command is implemented on Linux; on Windows use the library's heap session (etwkit::live::windows::heap)")
}

/// `-o FILE.etl`: the ETL writer and the encoder that turns heap operations into heap-provider
/// events; the executable mappings of the traced processes go last, as Image events.
#[cfg(target_os = "linux")]
struct HeapOutput {
    writer: etwkit::etl::writer::Writer<std::fs::File>,
    enc: etwkit::analysis::heap::HeapEventEncoder,
    last_time: i64,
}

#[cfg(target_os = "linux")]
impl HeapOutput {
    fn write(
        &mut self,
        op: &etwkit::analysis::heap::HeapOp,
    ) -> Result<(), etwkit::etl::writer::WriteError> {
        self.last_time = self.last_time.max(op.timestamp);
        self.writer.write_event(&self.enc.encode(op, 0))
    }

    fn finish(
        mut self,
        maps: &std::collections::HashMap<u32, etwkit::live::linux::unwind::ProcessMaps>,
    ) -> anyhow::Result<()> {
        let t = self.last_time.max(etwkit::etl::writer::now_filetime());
        let mut pids: Vec<&u32> = maps.keys().collect();
        pids.sort();
        for pid in pids {
            for m in &maps[pid].mappings {
                let img = etwkit::analysis::heap::ImageMapping {
                    pid: *pid,
                    start: m.start,
                    end: m.end,
                    file_offset: m.pgoff,
                    path: m.path.to_string_lossy().into_owned(),
                };
                self.writer.write_event(&self.enc.encode_image(&img, t))?;
            }
        }
        self.writer.finish()?;
        Ok(())
    }
}

#[cfg(target_os = "linux")]
fn open_output(
    path: Option<&std::path::Path>,
    attached_at: Option<i64>,
) -> anyhow::Result<Option<HeapOutput>> {
    use etwkit::etl::writer::WriterOptions;
    // Attached: the file starts when tracing did, and says so (see report_from_etl).
    let opts = attached_at.map_or_else(WriterOptions::now, |t| WriterOptions {
        logger_name: ATTACHED_LOGGER.into(),
        ..WriterOptions::new(t)
    });
    path.map(|p| -> anyhow::Result<_> {
        Ok(HeapOutput {
            writer: etwkit::etl::writer::Writer::create(p, opts)?,
            enc: etwkit::analysis::heap::HeapEventEncoder::new()
                .map_err(|e| anyhow::anyhow!("{e}"))?,
            last_time: i64::MIN,
        })
    })
    .transpose()
}
