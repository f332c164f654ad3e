//! CSV with a fixed header row; properties as one JSON column. Written by hand, like the JSON
//! lines: a `dump --format csv` should cost what a JSON dump costs.

use super::json::{push_guid, push_hex_u64, TextCache};
use super::{EventView, Render};

pub const COLUMNS: &str = "timestamp,provider,provider_name,event_name,task_name,opcode_name,id,version,level,opcode,task,keywords,channel,pid,tid,cpu,header_type,pointer_size,activity_id,payload_len,properties";

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
            // An object with members always holds quotes.
            Some(p) if p.len() > 2 => quoted(l, p),
            p => field(l, p.and_then(|p| std::str::from_utf8(p).ok()).unwrap_or("")),
        }
        l.push(b'\n');
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
