//! One decoded record as bytes: what the export's decode threads hand to the thread that builds
//! the Arrow columns (the common fields of a [`Row`], the properties' JSON text and their
//! [`super::tape`]). Native byte order: the bytes never leave the process.

use crate::decode::DecodedEvent;
use crate::event::{EventDescriptor, HeaderType};
use crate::guid::Guid;
use crate::EventRecord;

use super::arrow::{Row, StackRef};

const HEADER_TYPES: [HeaderType; 16] = [
    HeaderType::System32,
    HeaderType::System64,
    HeaderType::Compact32,
    HeaderType::Compact64,
    HeaderType::PerfInfo32,
    HeaderType::PerfInfo64,
    HeaderType::FullHeader32,
    HeaderType::FullHeader64,
    HeaderType::Instance32,
    HeaderType::Instance64,
    HeaderType::EventHeader32,
    HeaderType::EventHeader64,
    HeaderType::Message,
    HeaderType::Timed,
    HeaderType::Error,
    HeaderType::Wnode,
];

fn header_code(h: HeaderType) -> u8 {
    use HeaderType::*;
    match h {
        System32 => 0,
        System64 => 1,
        Compact32 => 2,
        Compact64 => 3,
        PerfInfo32 => 4,
        PerfInfo64 => 5,
        FullHeader32 => 6,
        FullHeader64 => 7,
        Instance32 => 8,
        Instance64 => 9,
        EventHeader32 => 10,
        EventHeader64 => 11,
        Message => 12,
        Timed => 13,
        Error => 14,
        Wnode => 15,
    }
}

const NONE: u32 = u32::MAX;

fn put_opt(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => {
            out.extend_from_slice(&(s.len() as u32).to_ne_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        None => out.extend_from_slice(&NONE.to_ne_bytes()),
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_ne_bytes());
    out.extend_from_slice(b);
}

/// Appends one record to `out`: `e` and `d` (its common fields; `want_stack`: with its stack), the
/// properties' JSON text (empty: none) and their tape.
pub fn encode(
    out: &mut Vec<u8>,
    e: &EventRecord<'_>,
    d: &DecodedEvent,
    want_stack: bool,
    json: &[u8],
    tape: &[u8],
) {
    let mut r = Row::of(e, d);
    if !want_stack {
        r.stack = None;
    }
    encode_row(out, 0, &r, json, tape);
}

/// Appends one record given as its row, with its index `record` in its file.
pub fn encode_row(out: &mut Vec<u8>, record: u64, r: &Row<'_>, json: &[u8], tape: &[u8]) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&record.to_ne_bytes());
    out.extend_from_slice(&r.timestamp.to_ne_bytes());
    out.extend_from_slice(&r.provider.to_le_bytes());
    out.extend_from_slice(&r.activity_id.to_le_bytes());
    let k = &r.descriptor;
    out.extend_from_slice(&k.keywords.to_ne_bytes());
    out.extend_from_slice(&r.pid.to_ne_bytes());
    out.extend_from_slice(&r.tid.to_ne_bytes());
    out.extend_from_slice(&k.id.to_ne_bytes());
    out.extend_from_slice(&k.task.to_ne_bytes());
    out.extend_from_slice(&r.cpu.to_ne_bytes());
    out.extend_from_slice(&[
        k.version,
        k.channel,
        k.level,
        k.opcode,
        header_code(r.header_type),
    ]);
    put_opt(out, r.provider_name);
    put_opt(out, r.event_name);
    put_opt(out, r.task_name);
    put_opt(out, r.opcode_name);
    put_opt(out, r.process_name);
    put_bytes(out, r.payload);
    match r.stack {
        Some(StackRef::Words(s)) => {
            out.extend_from_slice(&(s.len() as u32).to_ne_bytes());
            for a in s {
                out.extend_from_slice(&a.to_ne_bytes());
            }
        }
        Some(StackRef::Bytes(b)) => {
            out.extend_from_slice(&((b.len() / 8) as u32).to_ne_bytes());
            out.extend_from_slice(&b[..b.len() / 8 * 8]);
        }
        None => out.extend_from_slice(&NONE.to_ne_bytes()),
    }
    put_bytes(out, json);
    put_bytes(out, tape);
    let len = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&len.to_ne_bytes());
}

/// One record read back: its common fields, JSON text and tape.
pub struct Decoded<'a> {
    /// As given to [`encode_row`] (0 from [`encode`]).
    pub record: u64,
    pub row: Row<'a>,
    pub json: &'a [u8],
    pub tape: &'a [u8],
    /// The record's bytes as [`encode`] wrote them.
    pub raw: &'a [u8],
    /// Where in `raw` the common fields end (the payload follows).
    names_end: usize,
}

/// Appends a record's common fields and tape (no payload, stack or JSON text: what the typed
/// tables take) to `out`, with its index set to `record`. The common fields are copied as encoded.
pub fn copy_for_tables(out: &mut Vec<u8>, rec: &Decoded<'_>, record: u64) {
    let at = out.len();
    out.extend_from_slice(&rec.raw[..rec.names_end]);
    out[at + 4..at + 12].copy_from_slice(&record.to_ne_bytes());
    put_bytes(out, &[]);
    out.extend_from_slice(&NONE.to_ne_bytes());
    put_bytes(out, &[]);
    put_bytes(out, rec.tape);
    let len = (out.len() - at) as u32;
    out[at..at + 4].copy_from_slice(&len.to_ne_bytes());
}

struct Cur<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        s
    }
    fn arr<const N: usize>(&mut self) -> [u8; N] {
        self.take(N).try_into().expect("N bytes")
    }
    fn u16(&mut self) -> u16 {
        u16::from_ne_bytes(self.arr())
    }
    fn u32(&mut self) -> u32 {
        u32::from_ne_bytes(self.arr())
    }
    fn u64(&mut self) -> u64 {
        u64::from_ne_bytes(self.arr())
    }
    fn guid(&mut self) -> Guid {
        Guid::from_le_bytes(self.take(16)).expect("16 bytes")
    }
    /// A name; `recent` holds the last names seen in the same place (names repeat from record
    /// to record: a text seen lately is taken without checking it again).
    fn opt_str(&mut self, recent: &mut Recent<'a>) -> Option<&'a str> {
        let n = self.u32();
        if n == NONE {
            return None;
        }
        let b = self.take(n as usize);
        if let Some(s) = recent.find(b) {
            return Some(s);
        }
        // Written from `&str`: valid UTF-8.
        let s = std::str::from_utf8(b).ok();
        if let Some(s) = s {
            recent.add(s);
        }
        s
    }
    fn bytes(&mut self) -> &'a [u8] {
        let n = self.u32() as usize;
        self.take(n)
    }
}

/// Names seen lately in one place of the rows (event types interleave: the last one alone
/// would often miss).
#[derive(Default)]
struct Recent<'a> {
    names: [&'a str; RECENT_NAMES],
    next: usize,
}

/// Names [`Recent`] remembers.
const RECENT_NAMES: usize = 8;

impl<'a> Recent<'a> {
    fn find(&self, b: &[u8]) -> Option<&'a str> {
        self.names.iter().copied().find(|s| s.as_bytes() == b)
    }
    fn add(&mut self, s: &'a str) {
        self.names[self.next] = s;
        self.next = (self.next + 1) % RECENT_NAMES;
    }
}

/// Splits `buf` (whole records written by [`encode`], one after the other) into records.
pub fn for_each<'a>(buf: &'a [u8], mut f: impl FnMut(Decoded<'a>) -> bool) {
    let mut at = 0;
    let mut last: [Recent<'a>; 5] = Default::default();
    while at + 4 <= buf.len() {
        let len = u32::from_ne_bytes(buf[at..at + 4].try_into().expect("4 bytes")) as usize;
        let rec = &buf[at..at + len];
        at += len;
        let mut c = Cur { b: rec, at: 4 };
        let record = c.u64();
        let timestamp = c.u64() as i64;
        let provider = c.guid();
        let activity_id = c.guid();
        let keywords = c.u64();
        let pid = c.u32();
        let tid = c.u32();
        let id = c.u16();
        let task = c.u16();
        let cpu = c.u16();
        let [version, channel, level, opcode, ht] = c.arr::<5>();
        let [l0, l1, l2, l3, l4] = &mut last;
        let provider_name = c.opt_str(l0);
        let event_name = c.opt_str(l1);
        let task_name = c.opt_str(l2);
        let opcode_name = c.opt_str(l3);
        let process_name = c.opt_str(l4);
        let names_end = c.at;
        let payload = c.bytes();
        let n = c.u32();
        let stack = (n != NONE).then(|| StackRef::Bytes(c.take(n as usize * 8)));
        let json = c.bytes();
        let tape = c.bytes();
        let row = Row {
            timestamp,
            provider,
            provider_name,
            event_name,
            task_name,
            opcode_name,
            descriptor: EventDescriptor {
                id,
                version,
                channel,
                level,
                opcode,
                task,
                keywords,
            },
            pid,
            process_name,
            tid,
            cpu,
            activity_id,
            header_type: HEADER_TYPES[ht as usize & 15],
            payload,
            stack,
        };
        if !f(Decoded {
            record,
            row,
            json,
            tape,
            raw: rec,
            names_end,
        }) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_codes_round_trip() {
        for (i, h) in HEADER_TYPES.iter().enumerate() {
            assert_eq!(header_code(*h) as usize, i);
        }
    }
}
