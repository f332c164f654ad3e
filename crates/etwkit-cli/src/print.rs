//! Printing events through the shared sinks with names and decoded properties: one printer for
//! `dump` (ETL files), `trace` (live) and the demo.

use std::io::Write;
use std::ops::ControlFlow;

use etwkit::decode::Decoder;
use etwkit::etl::Record;
use etwkit::live::ProcessNames;
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
    /// Live events' process names (asked of the system once a second per pid).
    names: ProcessNames,
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
            names: ProcessNames::new(),
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
        if v.process_name.is_none() {
            v.process_name = self.names.name(v.pid()).map(|n| &**n);
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
