//! `etwkit sessions` and `etwkit providers`.

use std::io::Write;

use etwkit::live::Etw;

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum ListFormat {
    Text,
    Json,
}

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value = "text")]
    format: ListFormat,
}

pub fn sessions(a: Args) -> anyhow::Result<()> {
    let list = Etw::new().sessions()?;
    let mut out = crate::out::stdout();
    if a.format == ListFormat::Json {
        for s in &list {
            writeln!(out, "{}", serde_json::to_string(s)?)?;
        }
        return Ok(());
    }
    writeln!(
        out,
        "{:<28} {:<40} {:>8} {:>6} {:>7} {:>7} {:>10}",
        "NAME", "INSTANCE", "OWNER", "ETWKIT", "TRACING", "EVENTS", "BUFFER_KB"
    )?;
    for s in &list {
        let owner = s
            .owner_pid
            .map(|p| p.to_string())
            .unwrap_or_else(|| "-".into());
        writeln!(
            out,
            "{:<28} {:<40} {:>8} {:>6} {:>7} {:>7} {:>10}",
            s.name,
            s.instance,
            owner,
            if s.etwkit { "yes" } else { "no" },
            if s.orphan {
                "orphan"
            } else if s.tracing_on {
                "on"
            } else {
                "off"
            },
            s.enabled_events,
            s.buffer_size_kb
        )?;
    }
    Ok(())
}

pub fn providers(a: Args) -> anyhow::Result<()> {
    let list = Etw::new().providers()?;
    let mut out = crate::out::stdout();
    if a.format == ListFormat::Json {
        for p in &list {
            writeln!(out, "{}", serde_json::to_string(p)?)?;
        }
        return Ok(());
    }
    writeln!(out, "{:<32} {:<36} {:>6}  KIND", "NAME", "GUID", "EVENTS")?;
    for p in &list {
        writeln!(
            out,
            "{:<32} {:<36} {:>6}  {}",
            p.name, p.guid, p.events, p.kind
        )?;
    }
    Ok(())
}
