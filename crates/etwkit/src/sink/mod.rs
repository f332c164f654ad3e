//! Where events go: JSON lines, CSV, a table for people. One [`EventView`] feeds them all, so `dump`,
//! live `trace` and `heap` print the same fields.
//!
//! JSON field names are a contract (README.md): `timestamp` (RFC 3339 UTC, 7 fractional digits),
//! `provider`, `provider_name`, `event_name`, `task_name`, `opcode_name`, `id`, `version`, `level`,
//! `opcode`, `task`, `keywords` (hex string), `channel`, `pid`, `tid` (null when the record carries none),
//! `cpu`, `header_type`, `pointer_size`, `activity_id`, `payload` (hex), `stack` (hex addresses or null),
//! `properties` (object, or null when the layout is unknown); then, only when they apply,
//! `decode_issue` (why the layout does not fit the payload: bytes left unread, or a property
//! running past its end) and `layout_pointer_size` (the pointer size a classic/kernel layout was
//! decoded with when only the other size than the header's fits the payload exactly), `pid_source`
//! and `tid_source` (`"payload"` or `"thread_table"`: a kernel record whose header carries no
//! process or thread id got the `pid`/`tid` shown from its payload or the trace's thread table),
//! `dos_paths` (`{"FileName":"C:\\..."}`: the DOS form of a file path field logged as an NT path,
//! by the volume mapping the trace carries; the property itself stays as logged).

use std::io::{self, Write};

pub use crate::decode::EventView;

pub mod csv;
pub mod json;
pub mod table;

/// An output format.
pub trait Sink {
    fn event(&mut self, v: &EventView<'_, '_>) -> io::Result<()>;
    fn finish(&mut self) -> io::Result<()>;
}

/// Turns one event into its line of text (newline included), appended to `out`. Renderers keep
/// only caches, so a line does not depend on the events rendered before it: lines rendered by
/// several renderers (one per thread) and concatenated equal the lines of one renderer.
pub trait Render: Send {
    fn render(&mut self, v: &EventView<'_, '_>, out: &mut Vec<u8>);
}

/// Output formats by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Csv,
}

impl Format {
    /// The header line written before the first event (CSV's column names, the table's titles).
    pub fn header(self) -> Option<String> {
        match self {
            Format::Json => None,
            Format::Csv => Some(format!("{}\n", csv::COLUMNS)),
            Format::Table => Some(table::header()),
        }
    }
    /// Whether the header is written even when no event is (CSV: a file of columns, no rows).
    fn header_when_empty(self) -> bool {
        self == Format::Csv
    }
}

/// A renderer of the given format.
pub fn renderer(format: Format) -> Box<dyn Render> {
    match format {
        Format::Json => Box::new(json::JsonRender::default()),
        Format::Csv => Box::new(csv::CsvRender::default()),
        Format::Table => Box::new(table::TableRender),
    }
}

/// A [`Sink`] writing rendered lines (its own, or lines rendered elsewhere through
/// [`Lines::write_rendered`]) with the format's header first.
pub struct Lines<'w> {
    out: Box<dyn Write + 'w>,
    format: Format,
    header_written: bool,
    r: Box<dyn Render>,
    buf: Vec<u8>,
}

impl<'w> Lines<'w> {
    pub fn new(format: Format, out: Box<dyn Write + 'w>) -> Self {
        Lines {
            out,
            format,
            header_written: false,
            r: renderer(format),
            buf: Vec::with_capacity(4096),
        }
    }

    fn header(&mut self) -> io::Result<()> {
        if !self.header_written {
            self.header_written = true;
            if let Some(h) = self.format.header() {
                self.out.write_all(h.as_bytes())?;
            }
        }
        Ok(())
    }

    /// Writes lines rendered by a [`Render`] of this format (one or more events).
    pub fn write_rendered(&mut self, lines: &[u8]) -> io::Result<()> {
        self.header()?;
        self.out.write_all(lines)
    }

    /// As [`Lines::write_rendered`], for lines in several slices (one vectored write when the
    /// writer takes them whole: nothing is copied).
    pub fn write_rendered_vectored(&mut self, slices: &[io::IoSlice<'_>]) -> io::Result<()> {
        self.header()?;
        let mut v: Vec<io::IoSlice<'_>> = slices.to_vec();
        let mut bufs = &mut v[..];
        io::IoSlice::advance_slices(&mut bufs, 0);
        while !bufs.is_empty() {
            match self.out.write_vectored(bufs) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => io::IoSlice::advance_slices(&mut bufs, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Sink for Lines<'_> {
    fn event(&mut self, v: &EventView<'_, '_>) -> io::Result<()> {
        self.buf.clear();
        self.r.render(v, &mut self.buf);
        self.header()?;
        self.out.write_all(&self.buf)
    }
    fn finish(&mut self) -> io::Result<()> {
        if self.format.header_when_empty() {
            self.header()?;
        }
        self.out.flush()
    }
}

/// Makes a sink of the given format writing to `out`.
pub fn make_sink<'w>(format: Format, out: Box<dyn Write + 'w>) -> Box<dyn Sink + 'w> {
    Box::new(Lines::new(format, out))
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Byte → its two lowercase hex digits.
static HEX_PAIRS: [[u8; 2]; 256] = {
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [HEX[i >> 4], HEX[i & 15]];
        i += 1;
    }
    t
};

/// Appends lowercase hex of `bytes`.
pub(crate) fn push_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    let start = out.len();
    out.resize(start + bytes.len() * 2, 0);
    for (dst, &b) in out[start..].chunks_exact_mut(2).zip(bytes) {
        dst.copy_from_slice(&HEX_PAIRS[b as usize]);
    }
}
