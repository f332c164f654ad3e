//! `etwkit dump FILE`: one event per line, as a table, JSON lines or CSV.

use std::io::Write;
use std::ops::ControlFlow;

use etwkit::etl::{EtlFile, Order};
use etwkit::sink::{Format, Sink};

#[derive(clap::Args)]
pub struct Args {
    /// The ETL file.
    file: std::path::PathBuf,
    #[arg(long, value_enum, default_value = "table")]
    format: OutFormat,
    #[command(flatten)]
    filter: crate::filter_args::FilterArgs,
    /// Record order: as stored (file) or merged by timestamp (time).
    #[arg(long, value_enum, default_value = "time")]
    order: OrderArg,
    /// An instrumentation manifest (.man XML) describing providers in the trace (repeatable).
    #[arg(long)]
    manifest: Vec<std::path::PathBuf>,
    /// Do not decode payloads (`properties` stays null).
    #[arg(long)]
    raw: bool,
    /// Threads decoding and rendering (default: every core). The output is the same for any number.
    #[arg(long)]
    threads: Option<usize>,
}

/// The registry that names a file's providers without decoding it: built-in layouts, the user's
/// manifests, and the metadata the file embeds (EventInfo records, EventSource manifests).
pub fn naming_registry(
    manifests: &[std::path::PathBuf],
    files: &[EtlFile],
) -> anyhow::Result<etwkit::schema::Registry> {
    let mut reg = registry(manifests)?;
    for f in files {
        reg.learn_from_file(f);
    }
    Ok(reg)
}

/// The registry for decoding a file: built-in layouts plus the user's manifests.
pub fn registry(manifests: &[std::path::PathBuf]) -> anyhow::Result<etwkit::schema::Registry> {
    let mut reg = etwkit::schema::Registry::with_builtins();
    for m in manifests {
        // Each error names the file: `the instrumentation manifest x.man: not well-formed XML: ...`.
        reg.add_manifest_file(m)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(reg)
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

pub fn run(a: Args) -> anyhow::Result<()> {
    a.filter.check_times(None)?;
    // The built-in layouts are made on another core while the file's buffer chain is walked and
    // the file pre-scanned.
    let (f, builtins, prescan) = std::thread::scope(|s| {
        let reg = (!a.raw).then(|| s.spawn(|| registry(&a.manifest)));
        let f = EtlFile::open(&a.file);
        let prescan = match &f {
            Ok(f) if !a.raw => Some(etwkit::decode::Decoder::prescan(f)),
            _ => None,
        };
        let reg = reg.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        (f, reg, prescan)
    });
    let f = f?;
    a.filter.check_times(Some(f.header().start_time))?;
    // Decoding also learns the file's embedded provider names, which --provider NAME may use.
    let (decoder, registry) = if a.raw {
        let names = if a.filter.provider.is_empty() {
            registry(&a.manifest)?
        } else {
            naming_registry(&a.manifest, std::slice::from_ref(&f))?
        };
        (None, names)
    } else {
        let builtins = builtins.expect("made unless --raw")?;
        let prescan = prescan.expect("made unless --raw");
        let d = etwkit::decode::Decoder::from_prescan(builtins, prescan).0;
        (Some(d), etwkit::schema::Registry::new())
    };
    let decoder_owned = decoder;
    let decoder = decoder_owned.as_ref();
    let registry = decoder.map(|d| d.registry()).unwrap_or(&registry);
    let filter = a.filter.to_filter(f.header().start_time, registry)?;
    let unknown = a.filter.unknown_providers(registry);
    let keep_all = filter.is_empty();
    let format: Format = a.format.into();
    let stdout = crate::out::stdout();
    // No BufWriter in between: the rendered text comes in batches of whole lines, which std's
    // standard output hands to `writev` as they are. A BufWriter over a writer that cannot say
    // it writes vectored (`is_write_vectored` is unstable) copies every slice into its buffer.
    let mut lines = etwkit::sink::Lines::new(format, Box::new(stdout));
    let order = match a.order {
        OrderArg::File => Order::File,
        OrderArg::Time => Order::Time,
    };
    let bar = crate::progress::bar(f.len());
    let mut error = None;
    let rendered = f.par_render_vectored(
        order,
        a.threads
            .unwrap_or_else(etwkit::etl::parallel::default_threads),
        || {
            (
                etwkit::sink::renderer(format),
                crate::print::Scratch::default(),
            )
        },
        |(renderer, scratch), r, out| {
            let keep = keep_all
                || match decoder {
                    Some(d) => d.matches(&filter, r),
                    None => filter.matches(r),
                };
            if !keep {
                return false;
            }
            crate::print::render_record(decoder, renderer.as_mut(), scratch, r, out);
            true
        },
        &mut |done| {
            if let Some(b) = &bar {
                b.set_position(done)
            }
        },
        &mut |slices| match lines.write_rendered_vectored(slices) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                error = Some(e);
                ControlFlow::Break(())
            }
        },
    );
    let summary = rendered.read;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(e) = error {
        return Err(e.into());
    }
    lines.finish()?;
    // The process ends next: its tables (plans, stack index, thread table) need no freeing.
    std::mem::forget(decoder_owned);
    a.filter.warn_if_nothing_kept(rendered.emitted, &unknown);
    std::io::stderr().flush().ok();
    crate::issues::warn(&summary, "", "read");
    Ok(())
}
