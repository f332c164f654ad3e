//! `etwkit relog IN.etl... -o OUT.etl [filters]`: copy matching records byte for byte into a new ETL
//! file, merging several inputs in time order.

use std::path::PathBuf;

use anyhow::Context;
use etwkit::etl::relog::{relog_options, relog_to_file, RelogFilter};
use etwkit::etl::EtlFile;
use etwkit::filter::{EventFilter, TimeBound};
use etwkit::Guid;

#[derive(clap::Args)]
pub struct Args {
    /// Input ETL files (merged in time order).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// The ETL file to write.
    #[arg(short, long)]
    output: PathBuf,
    /// Keep records of this provider: a GUID, or a TraceLogging/EventSource name (repeatable).
    #[arg(long)]
    provider: Vec<String>,
    /// Keep events with this id (repeatable).
    #[arg(long)]
    id: Vec<u16>,
    /// Keep events of this process id (repeatable).
    #[arg(long)]
    pid: Vec<u32>,
    /// Keep records at or after this time: RFC 3339, or seconds from the (earliest) trace start.
    #[arg(long)]
    begin: Option<String>,
    /// Keep records at or before this time: RFC 3339, or seconds from the (earliest) trace start.
    #[arg(long)]
    end: Option<String>,
    /// Output buffer size in KiB.
    #[arg(long, default_value_t = 64)]
    buffer_kib: u32,
}

pub fn run(a: Args) -> anyhow::Result<()> {
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
    let same = |p: &std::path::Path| {
        let q = &a.output;
        match (p.canonicalize(), q.canonicalize()) {
            (Ok(x), Ok(y)) => x == y,
            _ => std::path::absolute(p).ok() == std::path::absolute(q).ok(),
        }
    };
    if files.iter().any(|f| same(f.path())) {
        anyhow::bail!("the output {} is also an input", a.output.display());
    }
    let start = files
        .iter()
        .map(|f| f.header().start_time)
        .filter(|&t| t > 0)
        .min()
        .unwrap_or(0);
    let bound = |s: &Option<String>| -> anyhow::Result<Option<i64>> {
        s.as_deref()
            .map(|s| {
                TimeBound::parse(s)
                    .map(|b| b.resolve(start))
                    .map_err(anyhow::Error::msg)
            })
            .transpose()
    };
    let mut guids = Vec::new();
    let mut names = Vec::new();
    for p in &a.provider {
        match p.parse::<Guid>() {
            Ok(g) => guids.push(g),
            Err(_) => names.push(p.clone()),
        }
    }
    let filter = RelogFilter::new(
        EventFilter {
            begin: bound(&a.begin)?,
            end: bound(&a.end)?,
            providers: guids,
            ids: a.id.clone(),
            pids: a.pid.clone(),
            ..Default::default()
        },
        names,
    );
    let mut opts = relog_options(&files);
    opts.buffer_size = a
        .buffer_kib
        .checked_mul(1024)
        .context("buffer size too large")?;
    let s = relog_to_file(&files, &filter, &a.output, opts)
        .with_context(|| format!("relog to {}", a.output.display()))?;
    for i in &s.inputs {
        for issue in &i.read.issues {
            eprintln!(
                "etwkit: warning: {}: file offset {} (buffer {:?}, record {:?}): {}",
                i.path.display(),
                issue.file_offset,
                issue.buffer_index,
                issue.record_offset,
                issue.reason
            );
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
    println!("{}", serde_json::to_string(&s)?);
    Ok(())
}
