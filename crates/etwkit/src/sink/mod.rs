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

    /// The view of an ETL record this renderer prints best: the properties' text in the form
    /// it wants (JSON by default; CSV takes it with its quotes already doubled).
    fn view_etl<'a, 'r>(
        &self,
        d: &'a crate::decode::Decoder,
        local: &'a mut crate::decode::Local,
        r: &'a crate::etl::Record<'r>,
    ) -> EventView<'a, 'r> {
        d.view_etl(local, r)
    }
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

/// The 8 hex digits of `x`, most significant first, one per byte of the result's big-endian
/// bytes: the nibbles spread to one per byte, then each turned into its digit, all 8 at once.
#[inline]
pub(crate) fn hex8(x: u32) -> u64 {
    let x = x as u64;
    let x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
    let x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
    let x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    // A nibble of 10 or more carries into bit 4 when 6 is added: those get 'a' - '0' - 10 more.
    let letters = ((x + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
    x + 0x3030_3030_3030_3030 + letters * (b'a' - b'0' - 10) as u64
}

/// The 8 hex digits of the little-endian `u32` in `b`, most significant first in memory order
/// (as `hex8(v).swap_bytes()`): four lookups of a digit pair, which is about half the
/// instructions of [`hex8`]'s arithmetic when the bytes are at hand.
#[inline(always)]
pub(crate) fn hex8_le_bytes(b: [u8; 4]) -> u64 {
    let p = |x: u8| u16::from_le_bytes(HEX_PAIRS[x as usize]) as u64;
    p(b[3]) | p(b[2]) << 16 | p(b[1]) << 32 | p(b[0]) << 48
}

/// The 16 lowercase hex digits of `v`, most significant first in memory order (the first digit
/// is the lowest byte): kept in a register until written.
#[inline]
pub(crate) fn hex16(v: u64) -> u128 {
    let hi = hex8((v >> 32) as u32).swap_bytes() as u128;
    let lo = hex8(v as u32).swap_bytes() as u128;
    hi | lo << 64
}

/// Appends lowercase hex of `bytes`: 16 bytes at a time (written as one 32-byte array), the last
/// 16 once more when the length is not a multiple of 16 (the digits rewritten are the same);
/// shorter runs as two overlapping 8-byte words, or by table under 8 bytes.
pub(crate) fn push_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    let n = bytes.len();
    out.reserve(2 * n);
    let start = out.len();
    if n >= 16 {
        let mut chunks = bytes.chunks_exact(16);
        for c in &mut chunks {
            out.extend_from_slice(&hex32(c.try_into().expect("16 bytes")));
        }
        if !chunks.remainder().is_empty() {
            let last: &[u8; 16] = bytes[n - 16..].try_into().expect("16 bytes");
            out.truncate(start + 2 * (n - 16));
            out.extend_from_slice(&hex32(last));
        }
    } else if n >= 8 {
        let first = u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"));
        let last = u64::from_be_bytes(bytes[n - 8..].try_into().expect("8 bytes"));
        out.extend_from_slice(&hex16(first).to_le_bytes());
        out.truncate(start + 2 * (n - 8));
        out.extend_from_slice(&hex16(last).to_le_bytes());
    } else {
        for &b in bytes {
            out.extend_from_slice(&HEX_PAIRS[b as usize]);
        }
    }
}

/// The hex digit of a nibble.
#[inline(always)]
fn digit(n: u8) -> u8 {
    n + b'0' + (n > 9) as u8 * (b'a' - b'0' - 10)
}

/// The 32 hex digits of 16 bytes. Written as plain per-byte arithmetic, which LLVM turns into
/// SSE2 (the baseline of x86-64) without SIMD intrinsics: those would need `unsafe`, which stays
/// in FFI and mmap modules. Each pair of digits is put together as one u16 so that the
/// interleaving becomes an unpack rather than per-byte shuffling (about 2 instructions per byte
/// instead of 6 for 64-bit SWAR).
#[inline(always)]
fn hex32(s: &[u8; 16]) -> [u8; 32] {
    let mut hi = [0u8; 16];
    let mut lo = [0u8; 16];
    for i in 0..16 {
        hi[i] = digit(s[i] >> 4);
        lo[i] = digit(s[i] & 15);
    }
    let mut pairs = [0u16; 16];
    for i in 0..16 {
        pairs[i] = hi[i] as u16 | (lo[i] as u16) << 8;
    }
    let mut out = [0u8; 32];
    for (o, p) in out.chunks_exact_mut(2).zip(pairs) {
        o.copy_from_slice(&p.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod hex_tests {
    #[test]
    fn hex_matches_format() {
        let mut bytes: Vec<u8> = (0..=255u8).collect();
        bytes.extend([0xde, 0xad, 0xbe, 0xef, 0x00, 0x0f, 0xf0]);
        for n in 0..bytes.len() {
            let mut out = b"x".to_vec();
            super::push_hex(&mut out, &bytes[..n]);
            let want: String = bytes[..n].iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(String::from_utf8(out).unwrap(), format!("x{want}"));
        }
        for v in [
            0u64,
            1,
            0x0123_4567_89ab_cdef,
            u64::MAX,
            0xa000_0000_0000_000a,
        ] {
            assert_eq!(
                super::hex16(v).to_le_bytes(),
                *format!("{v:016x}").as_bytes()
            );
        }
    }
}
