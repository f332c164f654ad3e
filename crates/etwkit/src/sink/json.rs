//! JSON lines: one object per event, written by hand for speed (a dump of a 26 MB trace should not wait
//! on a serializer).

use std::io::{self, Write};

use super::{push_hex, EventView, Sink};
use crate::time::write_rfc3339;

pub struct JsonLines<W: Write> {
    out: W,
    line: Vec<u8>,
    ts: String,
}

impl<W: Write> JsonLines<W> {
    pub fn new(out: W) -> Self {
        JsonLines {
            out,
            line: Vec::with_capacity(4096),
            ts: String::with_capacity(32),
        }
    }

    /// Renders one event as a JSON object (no newline) into `line`.
    pub fn render(&mut self, v: &EventView<'_, '_>) {
        let e = v.event;
        let l = &mut self.line;
        l.clear();
        self.ts.clear();
        let _ = write_rfc3339(&mut self.ts, e.timestamp);
        l.extend_from_slice(b"{\"timestamp\":\"");
        l.extend_from_slice(self.ts.as_bytes());
        l.extend_from_slice(b"\",\"provider\":\"");
        let _ = write!(l, "{}", e.provider);
        l.push(b'"');
        opt_str(l, "provider_name", v.provider_name);
        opt_str(l, "event_name", v.event_name);
        opt_str(l, "task_name", v.task_name);
        opt_str(l, "opcode_name", v.opcode_name);
        let d = &e.descriptor;
        let _ = write!(
            l,
            ",\"id\":{},\"version\":{},\"level\":{},\"opcode\":{},\"task\":{},\"keywords\":\"0x{:x}\",\"channel\":{}",
            d.id, d.version, d.level, d.opcode, d.task, d.keywords, d.channel
        );
        num_or_null(l, "pid", e.pid);
        num_or_null(l, "tid", e.tid);
        let _ = write!(
            l,
            ",\"cpu\":{},\"header_type\":\"{}\",\"pointer_size\":{},\"activity_id\":\"{}\",\"payload\":\"",
            e.cpu,
            e.header_type.name(),
            e.pointer_size,
            e.activity_id
        );
        push_hex(l, &e.payload);
        l.extend_from_slice(b"\",\"stack\":");
        let own;
        let stack = match v.stack {
            Some(s) => Some(s),
            None => {
                own = e.stack();
                own.as_ref()
            }
        };
        match stack {
            Some(s) => {
                l.push(b'[');
                for (i, a) in s.addresses.iter().enumerate() {
                    if i > 0 {
                        l.push(b',');
                    }
                    let _ = write!(l, "\"0x{a:x}\"");
                }
                l.push(b']');
            }
            None => l.extend_from_slice(b"null"),
        }
        l.extend_from_slice(b",\"properties\":");
        l.extend_from_slice(v.properties_json.unwrap_or("null").as_bytes());
        l.push(b'}');
    }

    /// The last rendered line.
    pub fn line(&self) -> &[u8] {
        &self.line
    }
}

fn num_or_null(l: &mut Vec<u8>, key: &str, v: u32) {
    if v == u32::MAX {
        let _ = write!(l, ",\"{key}\":null");
    } else {
        let _ = write!(l, ",\"{key}\":{v}");
    }
}

fn opt_str(l: &mut Vec<u8>, key: &str, v: Option<&str>) {
    if let Some(s) = v {
        let _ = write!(l, ",\"{key}\":");
        escape(l, s);
    }
}

/// Appends `s` as a JSON string.
pub fn escape(l: &mut Vec<u8>, s: &str) {
    l.push(b'"');
    for &b in s.as_bytes() {
        match b {
            b'"' => l.extend_from_slice(b"\\\""),
            b'\\' => l.extend_from_slice(b"\\\\"),
            b'\n' => l.extend_from_slice(b"\\n"),
            b'\r' => l.extend_from_slice(b"\\r"),
            b'\t' => l.extend_from_slice(b"\\t"),
            0..=0x1f => {
                let _ = write!(l, "\\u{b:04x}");
            }
            _ => l.push(b),
        }
    }
    l.push(b'"');
}

impl<W: Write> Sink for JsonLines<W> {
    fn event(&mut self, v: &EventView<'_, '_>) -> io::Result<()> {
        self.render(v);
        self.line.push(b'\n');
        self.out.write_all(&self.line)
    }
    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
