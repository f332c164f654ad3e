//! CSV with a fixed header row; properties as one JSON column.

use std::io::{self, Write};

use super::{EventView, Sink};
use crate::time::format_rfc3339;

pub const COLUMNS: &str = "timestamp,provider,provider_name,event_name,task_name,opcode_name,id,version,level,opcode,task,keywords,channel,pid,tid,cpu,header_type,pointer_size,activity_id,payload_len,properties";

pub struct Csv<W: Write> {
    out: W,
    header_written: bool,
}

impl<W: Write> Csv<W> {
    pub fn new(out: W) -> Self {
        Csv {
            out,
            header_written: false,
        }
    }
}

fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn id(v: u32) -> String {
    if v == u32::MAX {
        String::new()
    } else {
        v.to_string()
    }
}

impl<W: Write> Sink for Csv<W> {
    fn event(&mut self, v: &EventView<'_, '_>) -> io::Result<()> {
        if !self.header_written {
            writeln!(self.out, "{COLUMNS}")?;
            self.header_written = true;
        }
        let e = v.event;
        let d = &e.descriptor;
        writeln!(
            self.out,
            "{},{},{},{},{},{},{},{},{},{},{},0x{:x},{},{},{},{},{},{},{},{},{}",
            format_rfc3339(e.timestamp),
            e.provider,
            field(v.provider_name.unwrap_or("")),
            field(v.event_name.unwrap_or("")),
            field(v.task_name.unwrap_or("")),
            field(v.opcode_name.unwrap_or("")),
            d.id,
            d.version,
            d.level,
            d.opcode,
            d.task,
            d.keywords,
            d.channel,
            id(e.pid),
            id(e.tid),
            e.cpu,
            e.header_type.name(),
            e.pointer_size,
            e.activity_id,
            e.payload.len(),
            field(v.properties_json.unwrap_or(""))
        )
    }
    fn finish(&mut self) -> io::Result<()> {
        if !self.header_written {
            writeln!(self.out, "{COLUMNS}")?;
            self.header_written = true;
        }
        self.out.flush()
    }
}
