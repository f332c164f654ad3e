//! `etwkit export FILE.etl... -o DIR`: decoded events as a Parquet dataset (events.parquet and one
//! typed table per event type).

use std::path::PathBuf;

use anyhow::Context;
use etwkit::etl::EtlFile;
use etwkit::export::parquet::{DatasetWriter, ExportError};
use etwkit::export::staged::{Existing, StageError};

use crate::info::TextOrJson;

#[derive(clap::Args)]
pub struct Args {
    /// The ETL files (one dataset; the `file` column says where each row came from).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The dataset directory: created, or an empty one. Written whole or not at all: the files go
    /// to a hidden directory beside it, moved into place when complete.
    #[arg(short, long)]
    output: PathBuf,
    /// Replace the dataset OUTPUT holds (an earlier export: a directory with events.parquet),
    /// once the new one is complete. Without it, a directory that holds files is refused.
    #[arg(long)]
    overwrite: bool,
    /// An instrumentation manifest (.man XML) describing providers in the traces (repeatable).
    #[arg(long)]
    manifest: Vec<PathBuf>,
    /// Only the events these select (times count from each file's start); `record` then numbers
    /// the kept events, as `dump` with the same options numbers its lines.
    #[command(flatten)]
    filter: crate::filter_args::FilterArgs,
    /// What was written: text on stderr, or one JSON object on stdout.
    #[arg(long, value_enum, default_value = "text")]
    format: TextOrJson,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    // Seconds count from each file's start: a pair of mixed units is left to each file.
    a.filter.check_times(None)?;
    crate::inputs::refuse_repeated(&a.files)?;
    let existing = if a.overwrite {
        Existing::Replace
    } else {
        Existing::Refuse
    };
    // The destination is looked at when the first input opens (and the inputs one at a time: a
    // fleet's thousands of files are never open at once): when none can be read, nothing is
    // written and an earlier dataset stays.
    let mut writer: Option<DatasetWriter> = None;
    let mut unreadable = 0;
    // --provider names no input's registry knows (none of them can name a manifest provider).
    let mut unknown: Option<Vec<String>> = None;
    // One bar for all inputs (on a terminal, for inputs worth one).
    let total = a
        .files
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    let bar = crate::progress::bar(total);
    let mut base = 0;
    // `--format json`'s `inputs`: each file's read summary (as `relog` gives it) or why it was
    // skipped, in the order given.
    let mut inputs: Vec<serde_json::Value> = Vec::with_capacity(a.files.len());
    for path in &a.files {
        let f = match EtlFile::open(path) {
            Ok(f) => f,
            Err(e) => {
                crate::progress::above(bar.as_ref(), || eprintln!("etwkit: warning: {e}; skipped"));
                inputs.push(serde_json::json!({
                    "path": path,
                    "error": crate::message(&anyhow::Error::new(e)),
                }));
                unreadable += 1;
                continue;
            }
        };
        let w = match &mut writer {
            Some(w) => w,
            None => match DatasetWriter::create(&a.output, existing) {
                Ok(w) => writer.insert(w),
                Err(ExportError::Destination(e @ StageError::NotEmpty { .. })) => {
                    anyhow::bail!("{e}; pass --overwrite to replace an earlier export there")
                }
                Err(e) => return Err(e.into()),
            },
        };
        let (decoder, _) =
            etwkit::decode::Decoder::for_file(crate::dump::registry(&a.manifest)?, &f);
        let name = path.to_string_lossy();
        let filter = if a.filter.is_empty() {
            None
        } else {
            // Names resolve against what this file embeds too, as `dump` resolves them.
            let here = a.filter.unknown_providers(decoder.registry());
            unknown = Some(match unknown {
                None => here,
                Some(u) => u.into_iter().filter(|n| here.contains(n)).collect(),
            });
            Some(
                a.filter
                    .to_filter(f.header().start_time, decoder.registry())?,
            )
        };
        let summary = w
            .add_file_where(&name, &f, &decoder, filter.as_ref(), &mut |done| {
                if let Some(b) = &bar {
                    b.set_position(base + done)
                }
            })
            .with_context(|| {
                format!(
                    "exporting {} ({} was left as it was)",
                    path.display(),
                    a.output.display()
                )
            })?;
        base += f.len();
        inputs.push(serde_json::json!({ "path": path, "read": &summary }));
        let report = || {
            crate::issues::warn(&summary, &format!("{}: ", path.display()), "exported");
        };
        crate::progress::above(bar.as_ref(), report);
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let Some(w) = writer else {
        anyhow::bail!(
            "none of the input files could be read; {} was left as it was",
            a.output.display()
        );
    };
    let s = w.finish()?;
    a.filter
        .warn_if_nothing_kept(s.events, &unknown.unwrap_or_default());
    if a.format == TextOrJson::Json {
        let mut json = serde_json::to_value(&s)?;
        json["inputs"] = serde_json::Value::Array(inputs);
        outln!("{json}");
    }
    let unfit = s.unfit();
    if unfit > 0 {
        let tables: Vec<String> = s
            .tables
            .iter()
            .filter(|(_, t)| t.unfit > 0)
            .map(|(p, t)| format!("{p}: {}", t.unfit))
            .collect();
        eprintln!(
            "etwkit: warning: {unfit} property values did not fit their column's type and were written as null ({})",
            tables.join(", ")
        );
    }
    if a.format == TextOrJson::Text {
        eprintln!(
            "etwkit: wrote {} events ({} without decoded properties) and {} typed tables to {}",
            s.events,
            s.untyped,
            s.tables.len(),
            a.output.display()
        );
    }
    if unreadable > 0 {
        anyhow::bail!(
            "{unreadable} of {} input files could not be read (the others were exported)",
            a.files.len()
        );
    }
    Ok(())
}
