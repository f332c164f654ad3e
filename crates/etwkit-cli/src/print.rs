//! Printing events through the shared sinks with names and decoded properties: one printer for
//! `dump` (ETL files), `trace` (live) and the demo.

use std::io::Write;
use std::ops::ControlFlow;

use etwkit::decode::{DecodedEvent, Decoder};
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
        }
    }

    /// A live event.
    pub fn event(&mut self, ev: &EventRecord<'_>) -> ControlFlow<()> {
        let d = self.decoder.as_ref().map(|d| d.decode(ev));
        self.emit(ev, d)
    }

    /// A record read from an ETL file (WPP records get their raw header items too).
    pub fn record(&mut self, r: &Record<'_>) -> ControlFlow<()> {
        let d = self.decoder.as_ref().map(|d| d.decode_etl(r));
        self.emit(&r.event, d)
    }

    fn emit(&mut self, ev: &EventRecord<'_>, d: Option<DecodedEvent>) -> ControlFlow<()> {
        let mut v = EventView::bare(ev);
        self.props.clear();
        if let Some(d) = &d {
            v.provider_name = d.provider_name.as_deref();
            v.event_name = d.event_name.as_deref();
            v.task_name = d.task_name.as_deref();
            v.opcode_name = d.opcode_name.as_deref();
            v.stack = d.stack.as_ref();
            if d.is_decoded() {
                self.decoded += 1;
            }
            if !d.properties.is_empty() {
                d.properties.write_json(&mut self.props);
                v.properties_json = std::str::from_utf8(&self.props).ok();
            }
        }
        if v.provider_name.is_none() {
            v.provider_name = ev.traits_provider_name();
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
