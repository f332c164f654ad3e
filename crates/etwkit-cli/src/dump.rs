//! `etwkit dump FILE`: one event per line, as a table, JSON lines or CSV.

use std::io::Write;
use std::ops::ControlFlow;

use etwkit::etl::{EtlFile, Order};
use etwkit::filter::{EventFilter, TimeBound};
use etwkit::sink::{make_sink, EventView, Format};
use etwkit::Guid;

#[derive(clap::Args)]
pub struct Args {
    /// The ETL file.
    file: std::path::PathBuf,
    #[arg(long, value_enum, default_value = "table")]
    format: OutFormat,
    /// Keep events at or after this time: RFC 3339, or seconds from the trace start.
    #[arg(long)]
    begin: Option<String>,
    /// Keep events at or before this time: RFC 3339, or seconds from the trace start.
    #[arg(long)]
    end: Option<String>,
    /// Keep events of this provider GUID (repeatable).
    #[arg(long)]
    provider: Vec<String>,
    /// Keep events with this id (repeatable).
    #[arg(long)]
    id: Vec<u16>,
    /// Keep events of this process id (repeatable).
    #[arg(long)]
    pid: Vec<u32>,
    /// Record order: as stored (file) or merged by timestamp (time).
    #[arg(long, value_enum, default_value = "time")]
    order: OrderArg,
}

#[derive(clap::ValueEnum, Clone, Copy)]
pub enum OutFormat {
    Table,
    Json,
    Csv,
}

impl From<OutFormat> for Format {
    fn from(f: OutFormat) -> Format {
        match f {
            OutFormat::Table => Format::Table,
            OutFormat::Json => Format::Json,
            OutFormat::Csv => Format::Csv,
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy)]
pub enum OrderArg {
    File,
    Time,
}

/// Builds the event filter from command-line values.
pub fn build_filter(
    begin: Option<&str>,
    end: Option<&str>,
    providers: &[String],
    ids: &[u16],
    pids: &[u32],
    trace_start: i64,
) -> anyhow::Result<EventFilter> {
    let bound = |s: Option<&str>| -> anyhow::Result<Option<i64>> {
        s.map(|s| {
            TimeBound::parse(s)
                .map(|b| b.resolve(trace_start))
                .map_err(anyhow::Error::msg)
        })
        .transpose()
    };
    Ok(EventFilter {
        begin: bound(begin)?,
        end: bound(end)?,
        providers: providers
            .iter()
            .map(|p| p.parse::<Guid>())
            .collect::<Result<_, _>>()?,
        ids: ids.to_vec(),
        pids: pids.to_vec(),
    })
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let f = EtlFile::open(&a.file)?;
    let filter = build_filter(
        a.begin.as_deref(),
        a.end.as_deref(),
        &a.provider,
        &a.id,
        &a.pid,
        f.header().start_time,
    )?;
    let stdout = std::io::stdout().lock();
    let mut sink = make_sink(
        a.format.into(),
        Box::new(std::io::BufWriter::with_capacity(1 << 16, stdout)),
    );
    let order = match a.order {
        OrderArg::File => Order::File,
        OrderArg::Time => Order::Time,
    };
    let bar = crate::progress::bar(f.len());
    let mut err: Option<std::io::Error> = None;
    let summary = f.for_each_progress(
        order,
        &mut |done| {
            if let Some(b) = &bar {
                b.set_position(done)
            }
        },
        &mut |r| {
            if !filter.matches(r) {
                return ControlFlow::Continue(());
            }
            match sink.event(&EventView::bare(&r.event)) {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    err = Some(e);
                    ControlFlow::Break(())
                }
            }
        },
    );
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(e) = err {
        return Err(e.into());
    }
    sink.finish()?;
    std::io::stderr().flush().ok();
    for i in &summary.issues {
        eprintln!(
            "etwkit: warning: file offset {} (buffer {:?}, record {:?}): {}",
            i.file_offset, i.buffer_index, i.record_offset, i.reason
        );
    }
    if summary.bad_buffers + summary.bad_records > 0 {
        eprintln!(
            "etwkit: {} bad buffers and {} bad records skipped; everything else was read",
            summary.bad_buffers, summary.bad_records
        );
    }
    Ok(())
}
