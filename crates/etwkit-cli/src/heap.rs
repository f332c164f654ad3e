//! `etwkit heap`: heap tracing of chosen processes (live, through `etwkit::live::heap` on Linux and
//! Windows) and the leak report, also from a saved trace (`--report FILE.etl`, Windows
//! HeapTraceProvider traces included).

use std::ops::ControlFlow;
use std::path::PathBuf;

use anyhow::bail;
use etwkit::analysis::heap::{HeapAnalyzer, HeapReport};

#[derive(clap::Args)]
pub struct Args {
    /// Trace this running process (every thread, and threads it starts later). Linux, one
    /// process: the allocator shim is loaded into it (ptrace + its own dlopen) and taken out again
    /// at the end; several, or where that cannot work: uprobes. Windows: an ETW heap session.
    /// Repeatable.
    #[arg(long = "pid", conflicts_with = "report")]
    pids: Vec<u32>,
    /// Stop tracing after this many seconds (else at Ctrl-C, or when the traced processes end).
    #[arg(long, conflicts_with = "report", value_parser = crate::child::parse_seconds)]
    duration: Option<f64>,
    /// With --pid in shim mode (Linux): also trace children the process forks from now on.
    #[arg(long, conflicts_with = "report")]
    follow_forks: bool,
    /// Heap events that carry a stack: any of alloc,realloc,free, or none.
    #[arg(long, default_value = "alloc,realloc", conflicts_with = "report")]
    stacks: String,
    /// Also write the heap events to this ETL file (TraceLogging heap-provider events).
    #[arg(short = 'o', long, conflicts_with = "report")]
    output: Option<PathBuf>,
    /// Report format.
    #[arg(long, default_value = "table", value_parser = ["table", "json"])]
    format: String,
    /// How processes are traced on Linux: `shim` (the allocator shim built into etwkit, or
    /// $ETWKIT_HEAPSHIM: preloaded into a command, loaded into a running process; exact and fast),
    /// `uprobe` (perf uprobes; slow, may lose events) or `auto` (the shim wherever it can work).
    /// Windows: `auto` (an ETW heap session, as xperf starts it).
    #[arg(
        long,
        default_value = "auto",
        value_parser = ["auto", "shim", "uprobe"],
        conflicts_with = "report"
    )]
    mode: String,
    /// Report from a saved trace instead of tracing live (the options of a live trace, --pid,
    /// -o, --duration, --mode, --follow-forks, --stacks, --command-stdout and a command, are refused
    /// with it).
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
    #[arg(long, value_name = "FILE", conflicts_with = "report")]
    command_stdout: Option<PathBuf>,
    #[command(flatten)]
    symbols: crate::symbols::SymbolArgs,
    /// Command to start suspended and trace from its first allocation; etwkit exits with its status.
    #[arg(last = true, conflicts_with = "report")]
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
        LiveOutcome {
            report: report_from_etl(file, a.top, a.frames, a.symbols.symbolizer()?)?,
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
        let mut out = crate::out::stdout();
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

/// `--pprof FILE`, `--flamegraph FILE` (never over the trace read or written: see `etwkit::export::staged`).
fn write_profiles(a: &Args, report: &HeapReport) -> anyhow::Result<()> {
    let inputs: Vec<&std::path::Path> = a
        .report
        .iter()
        .chain(&a.output)
        .map(|p| p.as_path())
        .collect();
    if let (Some(p), Some(f)) = (&a.pprof, &a.flamegraph) {
        if etwkit::export::staged::same_file(p, f) {
            bail!(
                "--pprof and --flamegraph name the same file {}",
                p.display()
            );
        }
    }
    if let Some(p) = &a.pprof {
        let out = etwkit::export::staged::StagedFile::new(p, &inputs)?;
        etwkit::export::pprof::write_pprof(report, out.create()?)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", p.display()))?;
        out.commit()?;
        eprintln!("etwkit heap: wrote the pprof profile {}", p.display());
    }
    if let Some(p) = &a.flamegraph {
        let title = "Outstanding bytes by allocation stack (etwkit heap)";
        let out = etwkit::export::staged::StagedFile::new(p, &inputs)?;
        let mut w = out.create()?;
        etwkit::export::flamegraph::write_flamegraph(report, Some(title), &mut w)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", p.display()))?;
        w.into_inner()
            .map_err(|e| anyhow::anyhow!("writing {}: {}", p.display(), e.error()))?;
        out.commit()?;
        eprintln!("etwkit heap: wrote the flame graph {}", p.display());
    }
    Ok(())
}

fn report_from_etl(
    file: &PathBuf,
    top: usize,
    frames: usize,
    symbols: Option<etwkit::decode::symbols::Symbolizer>,
) -> anyhow::Result<HeapReport> {
    let f = etwkit::etl::EtlFile::open(file)?;
    let (an, images, modules, summary) = etwkit::analysis::heap::analyze_file_read(&f);
    // Each damaged spot on stderr, as every reading command names them; the report's notes count them.
    crate::issues::warn(&summary, "", "read");
    let report = match etwkit::live::heap::saved_trace_namer(&images, modules, symbols) {
        Some(mut namer) => an.report(Some(namer.as_mut()), top, frames),
        None => an.report(None, top, frames),
    };
    crate::symbols::warn("heap", report.symbols.as_ref());
    Ok(report)
}

/// The allocator shim built into this executable (build.rs, Linux x86-64); Err: why there is none.
fn embedded_shim() -> Result<&'static [u8], String> {
    match EMBEDDED_SHIM {
        Some(bytes) => Ok(bytes),
        None => Err(format!(
            "this etwkit was built without the allocator shim ({})",
            option_env!("ETWKIT_SHIM_MISSING").unwrap_or("its build failed")
        )),
    }
}

#[cfg(etwkit_embedded_shim)]
const EMBEDDED_SHIM: Option<&[u8]> = Some(include_bytes!(concat!(
    env!("OUT_DIR"),
    "/libetwkit_heapshim.so"
)));
#[cfg(not(etwkit_embedded_shim))]
const EMBEDDED_SHIM: Option<&[u8]> = None;

fn live(a: &Args) -> anyhow::Result<LiveOutcome> {
    use etwkit::live::heap::{HeapMode, HeapOptions, HeapSession, HeapStacks};
    use std::time::{Duration, Instant};

    crate::child::check_program(&a.command)?;
    let stacks = HeapStacks::parse(&a.stacks).map_err(anyhow::Error::msg)?;
    let mode = HeapMode::parse(&a.mode).map_err(anyhow::Error::msg)?;
    // The traced command's output on our stderr (or --command-stdout): stdout carries only
    // etwkit's report.
    let mut cmd = match a.command.is_empty() {
        true => None,
        false => Some(crate::child::command(
            &a.command,
            a.command_stdout.as_deref(),
        )?),
    };
    let opts = HeapOptions {
        pids: a.pids.clone(),
        command: cmd.as_mut(),
        stacks,
        mode,
        follow_forks: a.follow_forks,
        every_op: a.output.is_some(),
        shim: Some(embedded_shim()),
        etw: None,
        symbols: a.symbols.path()?,
    };
    let mut session = HeapSession::start(opts)?;
    if let Some(pid) = session.attached_pid() {
        eprintln!("etwkit heap: allocator shim loaded into process {pid}; Ctrl-C to stop");
    }
    // Ctrl-C or --duration ends the trace (the report still prints).
    let stop = session.stop_handle();
    crate::child::stop_after(a.duration, &stop);
    let s = stop.clone();
    let _ = ctrlc::set_handler(move || s.stop());
    crate::child::stop_on_termination(&stop);
    if let Some(pid) = session.command_pid() {
        crate::child::set_traced_child(pid);
    }

    let mut writer = open_output(a.output.as_deref(), session.tracing_started())?;
    let mut write_err = None;
    let mut an = HeapAnalyzer::new();
    let mut last = Instant::now();
    let counts_records = session.counts_records();
    let received = std::cell::Cell::new(0u64);
    session.process(&mut |records| received.set(records), &mut |op| {
        an.add(op);
        if last.elapsed() >= Duration::from_secs(1) {
            last = Instant::now();
            if counts_records {
                // Short-lived pairs are counted inside the process and arrive with its last records.
                eprintln!(
                    "etwkit heap: {} records received; {} blocks / {} bytes outstanding so far",
                    received.get(),
                    an.outstanding_count(),
                    an.outstanding_bytes()
                );
            } else {
                eprintln!(
                    "etwkit heap: {} ops, {} blocks / {} bytes outstanding",
                    an.ops(),
                    an.outstanding_count(),
                    an.outstanding_bytes()
                );
            }
        }
        if let Some(out) = writer.as_mut() {
            if let Err(e) = out.write(op) {
                write_err = Some(e);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    })?;
    if let Some(e) = write_err {
        return Err(e.into());
    }
    let mut totals = etwkit::live::heap::HeapTotals::default();
    let fin = session.finish(&mut totals)?;
    if let Some(mut out) = writer {
        out.writer
            .add_events_lost(fin.events_lost.min(u32::MAX as u64) as u32);
        out.finish(&fin.images)?;
    }
    let mut end = session.wait(&mut totals)?;
    an.add_totals(totals);
    let report = an.report(Some(end.namer.as_mut()), a.top, a.frames);
    crate::symbols::warn("heap", report.symbols.as_ref());
    if report.symbols.is_none() && a.symbols.path()?.is_some() {
        eprintln!(
            "etwkit heap: the symbol path was not used: this trace's frames are named from its own executables (ELF files on Linux)"
        );
    }
    let exact = if report.exact {
        "exact"
    } else {
        "FIGURES ARE NOT EXACT"
    };
    Ok(LiveOutcome {
        report,
        status: end.status,
        mode: format!("{} ({exact})", end.mode),
    })
}

/// `-o FILE.etl`: the ETL writer and the encoder that turns heap operations into heap-provider
/// events; the executable mappings (or loaded images) of the traced processes go last, as Image
/// events.
struct HeapOutput {
    writer: etwkit::etl::writer::Writer<std::fs::File>,
    enc: etwkit::analysis::heap::HeapEventEncoder,
    last_time: i64,
}

impl HeapOutput {
    fn write(
        &mut self,
        op: &etwkit::analysis::heap::HeapOp,
    ) -> Result<(), etwkit::etl::writer::WriteError> {
        self.last_time = self.last_time.max(op.timestamp);
        self.writer.write_event(&self.enc.encode(op, 0))
    }

    fn finish(mut self, images: &[etwkit::analysis::heap::ImageMapping]) -> anyhow::Result<()> {
        let t = self.last_time.max(etwkit::etl::writer::now_filetime());
        for img in images {
            self.writer.write_event(&self.enc.encode_image(img, t))?;
        }
        self.writer.finish()?;
        Ok(())
    }
}

fn open_output(
    path: Option<&std::path::Path>,
    attached_at: Option<i64>,
) -> anyhow::Result<Option<HeapOutput>> {
    use etwkit::etl::writer::WriterOptions;
    // Attached: the file starts when tracing did, and says so (see report_from_etl).
    let opts = attached_at.map_or_else(WriterOptions::now, |t| WriterOptions {
        logger_name: etwkit::analysis::heap::ATTACHED_LOGGER_NAME.into(),
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
