//! `etwkit relog IN.etl... -o OUT.etl [filters]`: copy matching records byte for byte into a new ETL
//! file, merging several inputs in time order.

use std::path::PathBuf;

use anyhow::Context;
use etwkit::etl::relog::{relog_options, relog_to_file_with, RelogFilter};
use etwkit::etl::EtlFile;

#[derive(clap::Args)]
pub struct Args {
    /// Input ETL files (merged in time order).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// The ETL file to write.
    #[arg(short, long)]
    output: PathBuf,
    #[command(flatten)]
    filter: crate::filter_args::FilterArgs,
    /// An instrumentation manifest (.man XML) naming providers for --provider (repeatable).
    #[arg(long)]
    manifest: Vec<PathBuf>,
    /// Output buffer size in KiB (1 to 65536: ETL buffers are 1 KiB to 64 MiB).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65536))]
    buffer_kib: u32,
    /// Threads reading and filtering a single input (default: every core). The output is the
    /// same file for any number.
    #[arg(long)]
    threads: Option<usize>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    a.filter.check_times(None)?;
    crate::inputs::refuse_repeated(&a.inputs)?;
    let files = a
        .inputs
        .iter()
        .map(EtlFile::open)
        .collect::<Result<Vec<_>, _>>()?;
    for f in &files {
        if let Some(e) = f.header_error() {
            anyhow::bail!(
                "{}: {e}; relogging needs the input's clock",
                f.path().display()
            );
        }
    }
    let start = files
        .iter()
        .map(|f| f.header().start_time)
        .filter(|&t| t > 0)
        .min()
        .unwrap_or(0);
    a.filter.check_times(Some(start))?;
    let inputs: Vec<&std::path::Path> = files.iter().map(|f| f.path()).collect();
    let out = etwkit::export::staged::StagedFile::new(&a.output, &inputs)?;
    let names = if a.filter.provider.is_empty() {
        etwkit::schema::Registry::new()
    } else {
        crate::dump::naming_registry(&a.manifest, &files)?
    };
    let unknown = a.filter.unknown_providers(&names);
    let mut events = a.filter.to_filter(start, &names)?;
    let names = std::mem::take(&mut events.provider_names);
    let mut filter = RelogFilter::new(events, names);
    if filter.has_pids() {
        // --pid sees a kernel record's process as dump --pid does (payload, thread table).
        filter = filter.with_pid_views(
            files
                .iter()
                .map(|f| {
                    let registry = etwkit::schema::Registry::with_builtins();
                    Some(etwkit::decode::Decoder::for_file(registry, f).0)
                })
                .collect(),
        );
    }
    let mut opts = relog_options(&files);
    opts.buffer_size = a
        .buffer_kib
        .checked_mul(1024)
        .context("buffer size too large")?;
    let threads = a
        .threads
        .unwrap_or_else(etwkit::etl::parallel::default_threads);
    let s =
        relog_to_file_with(&files, &filter, out.path(), opts, threads).map_err(|e| match e {
            // The staging file is gone once this is read: name the output.
            etwkit::etl::writer::WriteError::Io { path, source } if path == out.path() => {
                anyhow::anyhow!("cannot write {}: {source}", a.output.display())
            }
            e => anyhow::Error::new(e).context(format!("relog to {}", a.output.display())),
        })?;
    out.commit()?;
    for i in &s.inputs {
        for issue in &i.read.issues {
            eprintln!("etwkit: warning: {}: {issue}", i.path.display());
        }
        if i.read.bad_buffers + i.read.bad_records > 0 {
            eprintln!(
                "etwkit: {}: {} bad buffers and {} bad records could not be copied",
                i.path.display(),
                i.read.bad_buffers,
                i.read.bad_records
            );
        }
    }
    a.filter
        .warn_if_nothing_kept(s.inputs.iter().map(|i| i.events_kept()).sum(), &unknown);
    outln!("{}", serde_json::to_string(&s)?);
    Ok(())
}
