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
    let h = f.header();
    if a.format == TextOrJson::Json {
        let mut v = serde_json::to_value(h).context("serialize header")?;
        let o = v.as_object_mut().expect("object");
        o.insert("version".into(), h.version_string().into());
        o.insert("start_time_utc".into(), format_rfc3339(h.start_time).into());
        o.insert(
            "end_time_utc".into(),
            if h.end_time != 0 {
                format_rfc3339(h.end_time).into()
            } else {
                serde_json::Value::Null
            },
        );
        o.insert("boot_time_utc".into(), format_rfc3339(h.boot_time).into());
        o.insert("closed_cleanly".into(), f.closed_cleanly().into());
        o.insert("buffers_in_file".into(), f.buffers().len().into());
        o.insert("header_error".into(), f.header_error().into());
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if let Some(e) = f.header_error() {
        outln!("warning: {e}");
    }
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
        h.pointer_size,
        h.layout_pointer_size as u32 * 8
    );
    outln!(
        "processors           {} ({} MHz)",
        h.number_of_processors,
        h.cpu_speed_mhz
    );
    outln!("buffer size          {} bytes (logical)", h.buffer_size);
    outln!("log file mode        0x{:08x}", h.log_file_mode);
    outln!(
        "clock                {:?}, perf frequency {} Hz, timer resolution {} x 100ns",
        h.clock_type,
        h.perf_freq,
        h.timer_resolution
    );
    outln!("start time           {}", format_rfc3339(h.start_time));
    if h.end_time != 0 {
        outln!("end time             {}", format_rfc3339(h.end_time));
    } else {
        outln!("end time             (none: the logger did not close this file cleanly)");
    }
    outln!("boot time            {}", format_rfc3339(h.boot_time));
    outln!(
        "time zone            bias {} min ({} / {})",
        h.bias_minutes,
        h.time_zone_standard_name,
        h.time_zone_daylight_name
    );
    outln!("buffers written      {}", h.buffers_written);
    outln!("events lost          {}", h.events_lost);
    outln!("buffers lost         {}", h.buffers_lost);
    outln!("max file size        {} MB", h.maximum_file_size);
    Ok(())
}
