//! `etwkit cpu FILE.etl`: the CPU sampling profile of a trace (kernel PerfInfo SampledProfile
//! events; `etwkit::analysis::cpu`), as a table or JSON, and as a pprof profile or flame graph.

use std::path::{Path, PathBuf};

use anyhow::bail;
use etwkit::analysis::cpu::CpuReport;

#[derive(clap::Args)]
pub struct Args {
    /// The ETL file (a kernel trace with the profile flag, as PerfView and xperf record it).
    file: PathBuf,
    /// Report format (json: one object on stdout).
    #[arg(long, default_value = "table", value_parser = ["table", "json"])]
    format: String,
    /// Keep samples of this process id (repeatable).
    #[arg(long)]
    pid: Vec<u32>,
    /// Keep samples at or after this time: RFC 3339, or seconds from the trace start.
    #[arg(long)]
    begin: Option<String>,
    /// Keep samples at or before this time: RFC 3339, or seconds from the trace start.
    #[arg(long)]
    end: Option<String>,
    /// Stacks listed, and modules per ranking in the table.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Frames shown per stack (leaf first).
    #[arg(long, default_value_t = 16)]
    frames: usize,
    /// Also write the profile as pprof (profile.proto, gzipped: samples and, when the trace gives
    /// the sampling interval, cpu nanoseconds by stack; `go tool pprof FILE`). Every stack, every
    /// frame, whatever --top and --frames say.
    #[arg(long, value_name = "FILE")]
    pprof: Option<PathBuf>,
    /// Also draw samples by stack as a flame graph (SVG; the process at the base). Every stack.
    #[arg(long, value_name = "FILE")]
    flamegraph: Option<PathBuf>,
    #[command(flatten)]
    symbols: crate::symbols::SymbolArgs,
}

impl Args {
    /// The options `dump` shares with `cpu`, in `dump`'s form (times, pids).
    fn filter_args(&self) -> crate::filter_args::FilterArgs {
        crate::filter_args::FilterArgs {
            begin: self.begin.clone(),
            end: self.end.clone(),
            provider: Vec::new(),
            id: Vec::new(),
            pid: self.pid.clone(),
        }
    }
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let fa = a.filter_args();
    fa.check_times(None)?;
    if let (Some(p), Some(f)) = (&a.pprof, &a.flamegraph) {
        if etwkit::export::staged::same_file(p, f) {
            bail!(
                "--pprof and --flamegraph name the same file {}",
                p.display()
            );
        }
    }
    let mut symbols = a.symbols.symbolizer()?;
    let f = etwkit::etl::EtlFile::open(&a.file)?;
    let start = f.header().start_time;
    fa.check_times(Some(start))?;
    // Outputs that cannot be written are refused before the trace is read.
    let inputs: [&Path; 1] = [a.file.as_path()];
    let (pprof, flamegraph) = (
        stage(a.pprof.as_deref(), &inputs)?,
        stage(a.flamegraph.as_deref(), &inputs)?,
    );
    let (decoder, _) =
        etwkit::decode::Decoder::for_file(etwkit::schema::Registry::with_builtins(), &f);
    let filter = fa.to_filter(start, decoder.registry())?;
    let read = etwkit::analysis::cpu::analyze_file(&f, &decoder, &filter);
    let report = read.analyzer.report_with(a.top, a.frames, symbols.as_mut());
    write_profiles(&report, pprof, flamegraph)?;
    {
        use std::io::Write;
        let mut out = crate::out::stdout();
        match a.format.as_str() {
            // One line: a JSON stream any line-oriented reader takes whole.
            "json" => writeln!(out, "{}", serde_json::to_string(&report)?)?,
            _ => write!(out, "{}", report.to_table(a.top))?,
        }
        out.flush()?;
    }
    if read.samples_in_file == 0 {
        eprintln!(
            "etwkit: {} holds no SampledProfile events (kernel PerfInfo {}, opcode {}: a trace recorded with the profile flag); the report is empty",
            a.file.display(),
            etwkit::analysis::cpu::PERFINFO_GUID,
            etwkit::analysis::cpu::OPCODE_SAMPLED_PROFILE
        );
    } else {
        fa.warn_if_nothing_kept(report.total_samples, &[]);
    }
    if report.lost_events > 0 || report.lost_buffers > 0 {
        eprintln!(
            "etwkit: warning: the logger lost {} events and {} buffers{}",
            report.lost_events,
            report.lost_buffers,
            match read.samples_in_file {
                0 => "",
                _ => ": the sample counts may be low",
            }
        );
    }
    crate::symbols::warn("cpu", report.symbols.as_ref());
    crate::issues::warn(&read.read, "", "read");
    Ok(())
}

/// An output file started (its staging file made), or refused.
fn stage<'p>(
    p: Option<&'p Path>,
    inputs: &[&Path],
) -> anyhow::Result<Option<(&'p Path, etwkit::export::staged::StagedFile)>> {
    Ok(match p {
        Some(p) => Some((p, etwkit::export::staged::StagedFile::new(p, inputs)?)),
        None => None,
    })
}

/// `--pprof FILE`, `--flamegraph FILE`, staged (never over the trace read: see
/// `etwkit::export::staged`).
fn write_profiles(
    report: &CpuReport,
    pprof: Option<(&Path, etwkit::export::staged::StagedFile)>,
    flamegraph: Option<(&Path, etwkit::export::staged::StagedFile)>,
) -> anyhow::Result<()> {
    if let Some((p, out)) = pprof {
        etwkit::export::pprof::write_pprof(report, out.create()?)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", p.display()))?;
        out.commit()?;
        eprintln!("etwkit cpu: wrote the pprof profile {}", p.display());
    }
    if let Some((p, out)) = flamegraph {
        let mut w = out.create()?;
        etwkit::export::flamegraph::write_flamegraph(report, None, &mut w)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", p.display()))?;
        w.into_inner()
            .map_err(|e| anyhow::anyhow!("writing {}: {}", p.display(), e.error()))?;
        out.commit()?;
        eprintln!("etwkit cpu: wrote the flame graph {}", p.display());
    }
    Ok(())
}
