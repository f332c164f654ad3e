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
    let s = if a.raw {
        file_stats(&f)
    } else {
        let decoder = etwkit::decode::Decoder::for_file(crate::dump::registry(&a.manifest)?, &f).0;
        etwkit::decode::file_stats(&f, &decoder)
    };
    if a.format == TextOrJson::Json {
        println!("{}", serde_json::to_string(&s)?);
        return Ok(());
    }
    println!(
        "{}: {} records in {} buffers ({} compressed), {} bytes",
        s.file, s.records, s.buffers, s.compressed_buffers, s.size
    );
    println!(
        "logger {:?}, pointer size {}, {} .. {}",
        s.logger_name,
        s.pointer_size,
        s.start_time.as_deref().unwrap_or("?"),
        s.end_time.as_deref().unwrap_or("(not closed cleanly)")
    );
    println!(
        "lost: {} events, {} buffers (header); {} buffers flagged",
        s.events_lost, s.buffers_lost, s.buffers_flagged_lost
    );
    if s.bad_buffers + s.bad_records > 0 {
        println!(
            "damaged: {} bad buffers, {} bad records",
            s.bad_buffers, s.bad_records
        );
    }
    if let Some(d) = s.decoded {
        println!("decoded: {d} of {} records", s.records);
    }
    if let (Some(i), Some(p)) = (s.decode_issues, s.pointer_size_fallbacks) {
        if i + p > 0 {
            println!(
                "layout misfits: {i} records leave payload bytes unread or run short (dump shows decode_issue); {p} decoded with the other pointer size"
            );
        }
    }
    println!("header types:");
    for (k, v) in &s.header_types {
        println!("  {v:>10}  {k}");
    }
    println!("providers:");
    let mut p: Vec<_> = s.providers.iter().collect();
    p.sort_by(|a, b| b.1.cmp(a.1));
    for (k, v) in p {
        println!("  {v:>10}  {k}");
    }
    if !s.ext_types.is_empty() {
        println!("extended data:");
        for (k, v) in &s.ext_types {
            println!("  {v:>10}  {k}");
        }
    }
    if !s.undecoded_by_provider.is_empty() {
        println!("undecoded by provider:");
        let mut u: Vec<_> = s.undecoded_by_provider.iter().collect();
        u.sort_by(|a, b| b.1.cmp(a.1));
        for (k, v) in u {
            println!("  {v:>10}  {k}");
        }
    }
    for i in &s.issues {
        println!(
            "issue at file offset {} (buffer {:?}, record {:?}): {}",
            i.file_offset, i.buffer_index, i.record_offset, i.reason
        );
    }
    if s.issues_dropped > 0 {
        println!("... and {} more issues", s.issues_dropped);
    }
    Ok(())
}
