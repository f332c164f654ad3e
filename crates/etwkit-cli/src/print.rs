//! Printing events through the shared sinks with names and decoded properties: one printer for
//! `dump` (ETL files), `trace` (live) and the demo.

use std::collections::HashMap;
use std::io::Write;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use etwkit::decode::Decoder;
use etwkit::etl::Record;
use etwkit::schema::Registry;
use etwkit::sink::{make_sink, EventView, Format, Sink};
use etwkit::EventRecord;

pub struct Printer<'w> {
    sink: Box<dyn Sink + 'w>,
    decoder: Option<Decoder>,
    props: Vec<u8>,
    pub count: u64,
    pub decoded: u64,
    pub error: Option<std::io::Error>,
    /// Live events' process names by pid: when last asked ([`etwkit::live::process_name`]) and
    /// the answer.
    names: HashMap<u32, NameEntry>,
}

/// A live event's process name as last asked (`asked: None`: never).
#[derive(Default)]
struct NameEntry {
    asked: Option<Instant>,
    name: Option<String>,
}

/// How long a process name is trusted before it is asked again (an `exec` renames a process, an
/// exited one's pid is reused).
const NAME_TTL: Duration = Duration::from_secs(1);

impl NameEntry {
    /// The name, asked of the system when never asked or last asked over [`NAME_TTL`] ago.
    fn get(&mut self, pid: u32, now: Instant) -> Option<&str> {
        if self.asked.is_none_or(|t| now.duration_since(t) > NAME_TTL) {
            self.asked = Some(now);
            self.name = etwkit::live::process_name(pid);
        }
        self.name.as_deref()
    }
}

impl<'w> Printer<'w> {
    /// A printer for live events (TraceLogging records and the built-in layouts).
    pub fn new(format: Format, out: Box<dyn Write + 'w>) -> Self {
        Self::with_decoder(format, out, Some(Decoder::new(Registry::with_builtins())))
    }

    /// A printer with the given decoder, or none (raw records only).
    pub fn with_decoder(
        format: Format,
        out: Box<dyn Write + 'w>,
        decoder: Option<Decoder>,
    ) -> Self {
        Printer {
            sink: make_sink(format, out),
            decoder,
            props: Vec::with_capacity(1024),
            count: 0,
            decoded: 0,
            error: None,
            names: HashMap::new(),
        }
    }

    /// A live event, named by its process as the system names it now (`process_name`; cached per
    /// pid and asked again once a second).
    pub fn event(&mut self, ev: &EventRecord<'_>) -> ControlFlow<()> {
        let d = self.decoder.as_ref().map(|d| d.decode(ev));
        if d.as_ref().is_some_and(|d| d.is_decoded()) {
            self.decoded += 1;
        }
        let mut v = EventView::decoded(ev, d.as_ref(), &mut self.props);
        let pid = v.pid();
        if v.process_name.is_none() && pid != u32::MAX {
            v.process_name = self.names.entry(pid).or_default().get(pid, Instant::now());
        }
        self.count += 1;
        match self.sink.event(&v) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                self.error = Some(e);
                ControlFlow::Break(())
            }
        }
    }

    pub fn finish(&mut self) -> std::io::Result<()> {
        self.sink.finish()
    }
}

/// Per-thread scratch space of a parallel dump.
#[derive(Default)]
pub struct Scratch {
    props: Vec<u8>,
    local: etwkit::decode::Local,
}

/// Renders one ETL record as `dump` prints it (the per-thread work of a parallel dump).
pub fn render_record(
    decoder: Option<&Decoder>,
    renderer: &mut dyn etwkit::sink::Render,
    scratch: &mut Scratch,
    r: &Record<'_>,
    out: &mut Vec<u8>,
) {
    match decoder {
        Some(d) => {
            let v = renderer.view_etl(d, &mut scratch.local, r);
            renderer.render(&v, out)
        }
        None => renderer.render(&EventView::decoded(&r.event, None, &mut scratch.props), out),
    }
}
