//! `etwkit stats FILE`: counts, as text or one JSON object.

use etwkit::etl::{stats::file_stats, EtlFile};

use crate::info::TextOrJson;

#[derive(clap::Args)]
pub struct Args {
    /// The ETL file.
    file: std::path::PathBuf,
    #[arg(long, value_enum, default_value = "text")]
    format: TextOrJson,
    /// An instrumentation manifest (.man XML) describing providers in the trace (repeatable).
    #[arg(long)]
    manifest: Vec<std::path::PathBuf>,
    /// Do not decode (`decoded` is null): counts only, fastest.
    #[arg(long)]
    raw: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let f = EtlFile::open(&a.file)?;
    let decoder = if a.raw {
        None
    } else {
        // Counting needs the file's embedded layouts only (no stacks, threads or volumes): a
        // metadata pass costs less CPU than the decoder's full pre-scan.
        let mut reg = crate::dump::registry(&a.manifest)?;
        reg.learn_from_file_to_decode(&f);
        Some(etwkit::decode::Decoder::new(reg))
    };
    let s = match &decoder {
        None => file_stats(&f),
        Some(d) => etwkit::decode::file_stats(&f, d),
    };
    // The issues on stderr as every reading command gives them; the JSON keeps them too.
    let summary = etwkit::etl::ReadSummary {
        bad_buffers: s.bad_buffers,
        bad_records: s.bad_records,
        issues: s.issues.clone(),
        issues_dropped: s.issues_dropped,
        ..Default::default()
    };
    if a.format == TextOrJson::Json {
        outln!("{}", serde_json::to_string(&s)?);
        crate::issues::warn(&summary, "", "read");
        return Ok(());
    }
    let end_damaged = f
        .header_damage()
        .iter()
        .any(|d| d.field == etwkit::etl::logfile_header::HeaderField::EndTime);
    outln!(
        "{}: {} records in {} buffers ({} compressed), {} bytes",
        s.file,
        s.records,
        s.buffers,
        s.compressed_buffers,
        s.size
    );
    outln!(
        "logger {:?}, pointer size {}, {} .. {}",
        s.logger_name,
        s.pointer_size,
        s.start_time.as_deref().unwrap_or("unknown"),
        s.end_time.as_deref().unwrap_or(if end_damaged {
            "unknown"
        } else {
            "(not closed cleanly)"
        })
    );
    outln!(
        "lost: {} events, {} buffers (header); {} buffers flagged",
        s.events_lost,
        s.buffers_lost,
        s.buffers_flagged_lost
    );
    if s.bad_buffers + s.bad_records > 0 {
        outln!(
            "damaged: {} bad buffers, {} bad records",
            s.bad_buffers,
            s.bad_records
        );
    }
    if let Some(d) = s.decoded {
        outln!("decoded: {d} of {} records", s.records);
    }
    if let (Some(i), Some(p)) = (s.decode_issues, s.pointer_size_fallbacks) {
        if i + p > 0 {
            outln!(
                "layout misfits: {i} records leave payload bytes unread or run short (dump shows decode_issue); {p} decoded with the other pointer size"
            );
        }
    }
    outln!("header types:");
    for (k, v) in &s.header_types {
        outln!("  {v:>10}  {k}");
    }
    outln!("providers:");
    // Names: the decoder's registry (built-in, --manifest, embedded metadata); --raw: built-in and
    // --manifest only.
    let raw_names;
    let names = match &decoder {
        Some(d) => d.registry(),
        None => {
            raw_names = crate::dump::registry(&a.manifest)?;
            &raw_names
        }
    };
    let name = |k: &str| {
        let Ok(g) = k.parse::<etwkit::Guid>() else {
            return String::new();
        };
        // The registry's name, else the file's own (TraceLogging traits).
        let n = names
            .name_of_provider(&g)
            .or_else(|| s.provider_names.get(k).map(String::as_str))
            .unwrap_or("");
        match etwkit::schema::builtin::kernel_class_name(&g) {
            Some(class) => format!("{n} ({class})"),
            None => n.to_string(),
        }
    };
    let mut p: Vec<_> = s.providers.iter().collect();
    p.sort_by(|a, b| b.1.cmp(a.1));
    for (k, v) in p {
        outln!("  {v:>10}  {k}  {}", name(k));
    }
    if !s.ext_types.is_empty() {
        outln!("extended data:");
        for (k, v) in &s.ext_types {
            outln!("  {v:>10}  {k}");
        }
    }
    if !s.undecoded_by_provider.is_empty() {
        outln!("undecoded by provider:");
        let mut u: Vec<_> = s.undecoded_by_provider.iter().collect();
        u.sort_by(|a, b| b.1.cmp(a.1));
        for (k, v) in u {
            outln!("  {v:>10}  {k}  {}", name(k));
        }
    }
    crate::issues::warn(&summary, "", "read");
    Ok(())
}
