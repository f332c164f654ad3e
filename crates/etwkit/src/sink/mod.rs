//! Where events go: JSON lines, CSV, a table for people. One [`EventView`] feeds them all, so `dump`,
//! live `trace` and `heap` print the same fields.
//!
//! JSON field names are a contract (README.md): `timestamp` (RFC 3339 UTC, 7 fractional digits),
//! `provider`, `provider_name`, `event_name`, `task_name`, `opcode_name`, `id`, `version`, `level`,
//! `opcode`, `task`, `keywords` (hex string), `channel`, `pid`, `tid` (null when the record carries none),
//! `cpu`, `header_type`, `pointer_size`, `activity_id`, `payload` (hex), `stack` (hex addresses or null),
//! `properties` (object, or null when the layout is unknown).

use std::io::{self, Write};

use crate::event::{EventRecord, Stack};

pub mod csv;
pub mod json;
pub mod table;

/// An event and what is known about it, ready to print.
pub struct EventView<'a, 'r> {
    pub event: &'a EventRecord<'r>,
    pub provider_name: Option<&'a str>,
    pub event_name: Option<&'a str>,
    pub task_name: Option<&'a str>,
    pub opcode_name: Option<&'a str>,
    /// Already-rendered JSON object text of the decoded properties.
    pub properties_json: Option<&'a str>,
    /// Stack to show: the record's own stack item, or one attached by the decoder.
    pub stack: Option<&'a Stack>,
}

impl<'a, 'r> EventView<'a, 'r> {
    pub fn bare(event: &'a EventRecord<'r>) -> Self {
        EventView {
            event,
            provider_name: None,
            event_name: None,
            task_name: None,
            opcode_name: None,
            properties_json: None,
            stack: None,
        }
    }
}

/// An output format.
pub trait Sink {
    fn event(&mut self, v: &EventView<'_, '_>) -> io::Result<()>;
    fn finish(&mut self) -> io::Result<()>;
}

/// Output formats by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Csv,
}

/// Makes a sink of the given format writing to `out`.
pub fn make_sink<'w>(format: Format, out: Box<dyn Write + 'w>) -> Box<dyn Sink + 'w> {
    match format {
        Format::Json => Box::new(json::JsonLines::new(out)),
        Format::Csv => Box::new(csv::Csv::new(out)),
        Format::Table => Box::new(table::Table::new(out)),
    }
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
