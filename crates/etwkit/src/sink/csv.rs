//! CSV with a fixed header row; properties as one JSON column, and `dos_paths` (as JSON's, empty
//! where a record has none) as the last. Written by hand, like the JSON
//! lines: a `dump --format csv` should cost what a JSON dump costs.

use super::json::{push_guid, push_hex_u64, push_quoted_hex_u64, JsonProps, TextCache};
use super::{EventView, Render};
use crate::decode::{Decoder, Local, PropertyVisitor};

pub const COLUMNS: &str = "timestamp,provider,provider_name,event_name,task_name,opcode_name,id,version,level,opcode,task,keywords,channel,pid,tid,cpu,header_type,pointer_size,activity_id,payload_len,properties,dos_paths,process_name";

/// Renders events as CSV rows (RFC 4180 quoting: a field holding a comma, quote or line break is
/// quoted, its quotes doubled).
#[derive(Default)]
pub struct CsvRender {
    c: TextCache,
}

/// Appends `s` as one CSV field.
fn field(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    if memchr::memchr3(b',', b'"', b'\n', b).is_none() && memchr::memchr(b'\r', b).is_none() {
        out.extend_from_slice(b);
        return;
    }
    quoted(out, b);
}

/// Appends `b` quoted, its quotes doubled. Eight bytes at a time into room made ahead: each word
/// is written whole, then once more from each quote it holds, one byte further on (so the quote is
/// written twice and what follows it moves up; fixed-size writes only: a JSON column has a quote
/// every few bytes, and copying the runs between them would cost a call each). Each word's writes
/// go to a fixed-size window of the output, so they need no bounds checks of their own.
fn quoted(out: &mut Vec<u8>, b: &[u8]) {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let start = out.len();
    // Every byte a quote at worst, the two quotes around, and room for a word's window.
    out.resize(start + 2 * b.len() + 2 + 32, 0);
    let dst = &mut out[start..];
    dst[0] = b'"';
    let mut w = 1;
    let mut words = b.chunks_exact(8);
    for chunk in &mut words {
        let x = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        // This word's output: its 8 bytes and one more per quote, plus room for the last write.
        let win: &mut [u8; 25] = (&mut dst[w..w + 25]).try_into().expect("25 bytes");
        win[..8].copy_from_slice(&x.to_le_bytes());
        // The high bit of each byte that is a quote (exact: no borrow between bytes).
        let q = x ^ (LO * b'"' as u64);
        let mut quotes = !(((q & LOW7) + LOW7) | q) & HI;
        let mut k = 0;
        while quotes != 0 {
            let i = (quotes.trailing_zeros() / 8) as usize;
            // The quote at `i + k` is doubled: the word from the quote on goes one further. (k
            // quotes come before it, so k <= i <= 7: the mask changes nothing, and shows the
            // compiler the write stays in `win`.)
            let at = (i + k) & 15;
            win[at + 1..at + 9].copy_from_slice(&(x >> (8 * i)).to_le_bytes());
            k += 1;
            quotes &= quotes - 1;
        }
        w += 8 + k;
    }
    for &c in words.remainder() {
        dst[w] = c;
        w += 1;
        if c == b'"' {
            dst[w] = b'"';
            w += 1;
        }
    }
    dst[w] = b'"';
    out.truncate(start + w + 1);
}

/// The part of a CSV row that is the same for every event of a kind: from the provider to the
/// channel, with the comma after it.
fn csv_prefix(l: &mut Vec<u8>, v: &EventView<'_, '_>) {
    let d = &v.event.descriptor;
    push_guid(l, &v.event.provider);
    l.push(b',');
    field(l, v.provider_name.unwrap_or(""));
    l.push(b',');
    field(l, v.event_name.unwrap_or(""));
    l.push(b',');
    field(l, v.task_name.unwrap_or(""));
    l.push(b',');
    field(l, v.opcode_name.unwrap_or(""));
    l.push(b',');
    num(l, d.id);
    l.push(b',');
    num(l, d.version);
    l.push(b',');
    num(l, d.level);
    l.push(b',');
    num(l, d.opcode);
    l.push(b',');
    num(l, d.task);
    l.extend_from_slice(b",0x");
    push_hex_u64(l, d.keywords);
    l.push(b',');
    num(l, d.channel);
    l.push(b',');
}

fn num(out: &mut Vec<u8>, v: impl Into<u64>) {
    super::json::push_dec(out, v.into());
}

/// A pid or tid: empty when the record carries none.
fn id(out: &mut Vec<u8>, v: u32) {
    if v != u32::MAX {
        num(out, v);
    }
}

/// The part of a CSV row from the process id to the activity id, with the comma after it (see
/// `TextCache::push_ids`).
fn csv_ids(l: &mut Vec<u8>, v: &EventView<'_, '_>) {
    let e = v.event;
    id(l, v.pid());
    l.push(b',');
    id(l, v.tid());
    l.push(b',');
    num(l, e.cpu);
    l.push(b',');
    l.extend_from_slice(e.header_type.name().as_bytes());
    l.push(b',');
    num(l, e.pointer_size);
    l.push(b',');
    if e.activity_id.is_zero() {
        l.extend_from_slice(b"00000000-0000-0000-0000-000000000000");
    } else {
        push_guid(l, &e.activity_id);
    }
    l.push(b',');
}

impl Render for CsvRender {
    fn render(&mut self, v: &EventView<'_, '_>, l: &mut Vec<u8>) {
        let e = v.event;
        self.c.push_timestamp(l, e.timestamp);
        l.push(b',');
        self.c.push_prefix(l, v, csv_prefix);
        self.c.push_ids(l, v, csv_ids);
        num(l, e.payload.len() as u64);
        l.push(b',');
        match v.properties_json {
            // An object with members always holds quotes: quoted, its quotes doubled (already,
            // when the CSV visitor wrote it).
            Some(p) if p.len() > 2 && v.properties_csv => {
                l.reserve(p.len() + 3);
                l.push(b'"');
                l.extend_from_slice(p);
                l.push(b'"');
            }
            Some(p) if p.len() > 2 => quoted(l, p),
            p => field(l, p.and_then(|p| std::str::from_utf8(p).ok()).unwrap_or("")),
        }
        l.push(b',');
        if let Some(p) = v.dos_path {
            // JSON's `dos_paths` object, a quoted field (its quotes doubled).
            let mut o = Vec::with_capacity(128);
            super::json::push_dos_paths(&mut o, &p);
            quoted(l, &o);
        }
        l.push(b',');
        if let Some(n) = v.process_name {
            field(l, n);
        }
        l.push(b'\n');
    }

    fn view_etl<'a, 'r>(
        &self,
        d: &'a Decoder,
        local: &'a mut Local,
        r: &'a crate::etl::Record<'r>,
    ) -> EventView<'a, 'r> {
        d.view_etl_csv(local, r)
    }
}

impl Decoder {
    /// As [`Decoder::view_etl`], with the properties' JSON text written by [`Csv`]: every `"`
    /// already doubled, so the CSV renderer puts it between quotes as it is (the view says so).
    /// `local` keeps the key text of each layout for the last format it rendered: one
    /// [`Local`] per format keeps them all.
    pub fn view_etl_csv<'a, 'r>(
        &'a self,
        local: &'a mut Local,
        r: &'a crate::etl::Record<'r>,
    ) -> EventView<'a, 'r> {
        let mut v = self.view_etl_with::<Csv>(local, r);
        v.properties_csv = true;
        v
    }
}

/// The properties' JSON text as a CSV field holds it ([`crate::decode::TextFormat`]): exactly
/// the text [`super::json::Json`] writes, every `"` in it doubled. Keys, hex numbers and the
/// other quoted values without quotes inside (the bulk) are written doubled at once; only
/// strings are looked at again, and changed only when they hold an (escaped) quote.
pub struct Csv;

impl crate::decode::TextFormat for Csv {
    type Visitor<'b> = CsvProps<'b>;
    fn visitor<'b>(out: &'b mut Vec<u8>, scratch: &'b mut String) -> CsvProps<'b> {
        CsvProps { out, scratch }
    }
}

/// The [`PropertyVisitor`] of [`Csv`]: the JSON visitor's text, quotes doubled.
pub struct CsvProps<'b> {
    out: &'b mut Vec<u8>,
    scratch: &'b mut String,
}

impl CsvProps<'_> {
    /// The JSON visitor, appending to the same text.
    #[inline(always)]
    fn json(&mut self) -> JsonProps<'_> {
        JsonProps::new(self.out, self.scratch)
    }

    /// A value JSON writes as `"…"` with no quote inside: `""…""`.
    #[inline(always)]
    fn wrapped(&mut self, f: impl FnOnce(&mut JsonProps<'_>)) {
        self.out.push(b'"');
        f(&mut self.json());
        self.out.push(b'"');
    }

    /// A JSON string, which may hold escaped quotes: `""…""`, each `\"` inside as `\""`.
    #[inline(always)]
    fn string(&mut self, f: impl FnOnce(&mut JsonProps<'_>)) {
        let start = self.out.len();
        self.out.push(b'"');
        f(&mut self.json());
        let end = self.out.len();
        // `"` `"text"`: the text between the JSON string's quotes.
        if memchr::memchr(b'"', &self.out[start + 2..end - 1]).is_none() {
            self.out.push(b'"');
        } else {
            double_from(self.out, start + 2);
        }
    }
}

/// Doubles every `"` of `out[from..]`, in place.
fn double_from(out: &mut Vec<u8>, from: usize) {
    let n = memchr::memchr_iter(b'"', &out[from..]).count();
    if n == 0 {
        return;
    }
    let old = out.len();
    out.resize(old + n, 0);
    // From the end back: each byte moves up by the quotes before it.
    let mut w = old + n;
    for i in (from..old).rev() {
        let c = out[i];
        w -= 1;
        out[w] = c;
        if c == b'"' {
            w -= 1;
            out[w] = b'"';
        }
    }
}

impl PropertyVisitor for CsvProps<'_> {
    fn field(&mut self, index: usize, name: &str) {
        let start = self.out.len();
        self.json().field(index, name);
        double_from(self.out, start);
    }
    #[inline]
    fn plain_field(&mut self, index: usize, name: &str) {
        self.out.reserve(name.len() + 7);
        if index > 0 {
            self.out.push(b',');
        }
        self.out.extend_from_slice(b"\"\"");
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\"\":");
    }
    #[inline]
    fn field_text(&mut self, _index: usize, _name: &str, text: &[u8], block: &[u8; 32]) {
        if text.len() <= block.len() {
            // A fixed-size copy cut to length, as JSON's (no `memcpy` call for a short key).
            let n = self.out.len();
            self.out.extend_from_slice(block);
            self.out.truncate(n + text.len());
        } else {
            self.out.extend_from_slice(text);
        }
    }
    fn pointer_elements(&mut self, bytes: &[u8], width: usize) {
        self.hex_elements(bytes, width)
    }
    fn hex_elements(&mut self, bytes: &[u8], width: usize) {
        let width = width.max(1);
        self.out.reserve(bytes.len() / width * (2 * width + 7) + 32);
        for (i, c) in bytes.chunks_exact(width).enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            self.out.push(b'"');
            let v = match *c {
                [a, b, c, d] => u32::from_le_bytes([a, b, c, d]) as u64,
                _ => {
                    let mut w = [0u8; 8];
                    let n = c.len().min(8);
                    w[..n].copy_from_slice(&c[..n]);
                    u64::from_le_bytes(w)
                }
            };
            push_quoted_hex_u64(self.out, v);
            self.out.push(b'"');
        }
    }
    fn begin_array(&mut self, count: u64) {
        self.json().begin_array(count)
    }
    #[inline]
    fn element(&mut self, i: u64) {
        self.json().element(i)
    }
    fn end_array(&mut self) {
        self.json().end_array()
    }
    fn begin_struct(&mut self) {
        self.json().begin_struct()
    }
    fn end_struct(&mut self) {
        self.json().end_struct()
    }
    fn null(&mut self) {
        self.json().null()
    }
    fn bool(&mut self, v: bool) {
        self.json().bool(v)
    }
    #[inline]
    fn unsigned(&mut self, v: u64) {
        self.json().unsigned(v)
    }
    #[inline]
    fn signed(&mut self, v: i64) {
        self.json().signed(v)
    }
    fn f32(&mut self, v: f32) {
        self.json().f32(v)
    }
    fn f64(&mut self, v: f64) {
        self.json().f64(v)
    }
    #[inline]
    fn hex(&mut self, v: u64) {
        self.out.push(b'"');
        push_quoted_hex_u64(self.out, v);
        self.out.push(b'"');
    }
    #[inline]
    fn pointer(&mut self, v: u64) {
        self.hex(v)
    }
    #[inline]
    fn str(&mut self, v: &str) {
        self.string(|j| j.str(v))
    }
    fn latin1(&mut self, v: &[u8]) {
        self.string(|j| j.latin1(v))
    }
    #[inline]
    fn utf16(&mut self, units: &[u8]) {
        self.string(|j| j.utf16(units))
    }
    fn binary(&mut self, v: &[u8]) {
        self.wrapped(|j| j.binary(v))
    }
    fn guid(&mut self, v: &crate::Guid) {
        self.wrapped(|j| j.guid(v))
    }
    fn sid(&mut self, v: &str) {
        self.string(|j| j.sid(v))
    }
    fn filetime(&mut self, v: i64) {
        self.wrapped(|j| j.filetime(v))
    }
    fn systemtime(&mut self, v: &[u16; 8]) {
        self.wrapped(|j| j.systemtime(v))
    }
    fn mapped(&mut self, value: u64, name: &str) {
        self.string(|j| j.mapped(value, name))
    }
    fn ip(&mut self, v: std::net::IpAddr) {
        self.wrapped(|j| j.ip(v))
    }
    fn port(&mut self, v: u16) {
        self.json().port(v)
    }
    fn socket_address(&mut self, v: std::net::SocketAddr) {
        self.wrapped(|j| j.socket_address(v))
    }
    fn win32_error(&mut self, v: u32) {
        self.json().win32_error(v)
    }
    fn ntstatus(&mut self, v: u32) {
        self.wrapped(|j| j.ntstatus(v))
    }
    fn hresult(&mut self, v: u32) {
        self.wrapped(|j| j.hresult(v))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn quoting() {
        for (s, want) in [
            ("plain", "plain"),
            ("a,b", "\"a,b\""),
            (r#"{"A":"x""y"}"#, r#""{""A"":""x""""y""}""#),
            ("line\nbreak", "\"line\nbreak\""),
            ("", ""),
            (
                r#"{"Name":"a long value, with commas","X":"0x1f"}"#,
                r#""{""Name"":""a long value, with commas"",""X"":""0x1f""}""#,
            ),
            (
                "no quotes at all, but a comma",
                "\"no quotes at all, but a comma\"",
            ),
        ] {
            let mut o = Vec::new();
            super::field(&mut o, s);
            assert_eq!(String::from_utf8(o).unwrap(), want);
        }
        // Quotes at every position of a word, dense and sparse, and every length.
        let text: String = (0..200)
            .map(|i| {
                if i % 3 == 0 || i % 7 == 0 || (40..52).contains(&i) {
                    '"'
                } else {
                    'a'
                }
            })
            .collect();
        for n in 0..text.len() {
            let s = &text[..n];
            let mut o = b"x".to_vec();
            super::quoted(&mut o, s.as_bytes());
            assert_eq!(
                String::from_utf8(o).unwrap(),
                format!("x\"{}\"", s.replace('"', "\"\""))
            );
        }
    }
}
