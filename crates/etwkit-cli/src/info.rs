//! `etwkit info FILE`: the logfile header.

use anyhow::Context;
use etwkit::etl::EtlFile;
use etwkit::time::format_rfc3339;

#[derive(clap::Args)]
pub struct Args {
    /// The ETL file.
    file: std::path::PathBuf,
    #[arg(long, value_enum, default_value = "text")]
    format: TextOrJson,
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum TextOrJson {
    Text,
    Json,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let f = EtlFile::open(&a.file)?;
    // Every read issue, as stats and dump name them: the buffer chain's and the header's, and the
    // records' (one parallel walk that keeps nothing).
    let (_, summary) = f.par_fold(|| (), |_, _| {}, |_, _| ());
    crate::issues::warn(&summary, "", "read");
    let h = f.header();
    // Fields holding values no logger writes are unknown, not facts.
    let damaged: Vec<&str> = f.header_damage().iter().map(|d| d.field.key()).collect();
    let known = |key: &str| !damaged.contains(&key);
    let start_known = known("start_time") && f.header_error().is_none();
    let end_known = known("end_time") && f.header_error().is_none();
    if a.format == TextOrJson::Json {
        let mut v = serde_json::to_value(h).context("serialize header")?;
        let o = v.as_object_mut().expect("object");
        for key in &damaged {
            o.insert((*key).into(), serde_json::Value::Null);
        }
        o.insert("version".into(), h.version_string().into());
        o.insert(
            "start_time_utc".into(),
            start_known.then(|| format_rfc3339(h.start_time)).into(),
        );
        o.insert(
            "end_time_utc".into(),
            (end_known && h.end_time != 0)
                .then(|| format_rfc3339(h.end_time))
                .into(),
        );
        o.insert("boot_time_utc".into(), format_rfc3339(h.boot_time).into());
        o.insert("closed_cleanly".into(), f.closed_cleanly().into());
        o.insert("buffers_in_file".into(), f.buffers().len().into());
        o.insert("header_error".into(), f.header_error().into());
        o.insert("damaged_fields".into(), damaged.clone().into());
        o.insert("header_damage".into(), f.header_damage_issue().into());
        o.insert("clock_damaged".into(), f.clock_damaged().into());
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let shown = |key: &str, value: String| {
        if known(key) {
            value
        } else {
            "unknown".to_string()
        }
    };
    outln!(
        "file                 {} ({} bytes, {} buffers)",
        a.file.display(),
        f.len(),
        f.buffers().len()
    );
    outln!("logger               {}", h.logger_name);
    outln!("log file name        {}", h.log_file_name);
    outln!(
        "format version       {} (OS build {})",
        h.version_string(),
        h.provider_version
    );
    outln!(
        "pointer size         {} (header layout {}-bit)",
        shown("pointer_size", h.pointer_size.to_string()),
        h.layout_pointer_size as u32 * 8
    );
    outln!(
        "processors           {} ({} MHz)",
        shown("number_of_processors", h.number_of_processors.to_string()),
        shown("cpu_speed_mhz", h.cpu_speed_mhz.to_string())
    );
    outln!(
        "buffer size          {}",
        shown("buffer_size", format!("{} bytes (logical)", h.buffer_size))
    );
    outln!("log file mode        0x{:08x}", h.log_file_mode);
    outln!(
        "clock                {:?}, perf frequency {}, timer resolution {} x 100ns{}",
        h.clock_type,
        shown("perf_freq", format!("{} Hz", h.perf_freq)),
        h.timer_resolution,
        if f.clock_damaged() {
            " (not used: timestamps are shown raw)"
        } else {
            ""
        }
    );
    outln!(
        "start time           {}",
        if start_known {
            format_rfc3339(h.start_time)
        } else {
            "unknown".into()
        }
    );
    if !end_known {
        outln!("end time             unknown");
    } else if h.end_time != 0 {
        outln!("end time             {}", format_rfc3339(h.end_time));
    } else {
        outln!("end time             (none: the logger did not close this file cleanly)");
    }
    outln!("boot time            {}", format_rfc3339(h.boot_time));
    if known("bias_minutes") {
        outln!(
            "time zone            bias {} min ({} / {})",
            h.bias_minutes,
            h.time_zone_standard_name,
            h.time_zone_daylight_name
        );
    } else {
        outln!("time zone            unknown");
    }
    outln!("buffers written      {}", h.buffers_written);
    outln!("events lost          {}", h.events_lost);
    outln!("buffers lost         {}", h.buffers_lost);
    outln!("max file size        {} MB", h.maximum_file_size);
    Ok(())
}
