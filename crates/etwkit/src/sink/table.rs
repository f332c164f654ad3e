//! One aligned line per event for people.

use std::io::{self, Write};

use super::{EventView, Sink};
use crate::time::format_rfc3339;

pub struct Table<W: Write> {
    out: W,
    header_written: bool,
}

impl<W: Write> Table<W> {
    pub fn new(out: W) -> Self {
        Table {
            out,
            header_written: false,
        }
    }
}

impl<W: Write> Sink for Table<W> {
    fn event(&mut self, v: &EventView<'_, '_>) -> io::Result<()> {
        if !self.header_written {
            writeln!(
                self.out,
                "{:<28} {:>3} {:>7} {:>7} {:<40} {:>5} {:>3} {:>3}  details",
                "TIME (UTC)", "CPU", "PID", "TID", "PROVIDER / EVENT", "ID", "VER", "OP"
            )?;
            self.header_written = true;
        }
        let e = v.event;
        let who = match (v.provider_name, v.event_name) {
            (Some(p), Some(n)) => format!("{p}/{n}"),
            (Some(p), None) => p.to_string(),
            _ => e.provider.to_string(),
        };
        let pid = if e.pid == u32::MAX {
            "-".to_string()
        } else {
            e.pid.to_string()
        };
        let tid = if e.tid == u32::MAX {
            "-".to_string()
        } else {
            e.tid.to_string()
        };
        let details = match v.properties_json {
            Some(p) => p.to_string(),
            None => format!("{} payload {} bytes", e.header_type.name(), e.payload.len()),
        };
        writeln!(
            self.out,
            "{:<28} {:>3} {:>7} {:>7} {:<40} {:>5} {:>3} {:>3}  {}",
            format_rfc3339(e.timestamp),
            e.cpu,
            pid,
            tid,
            who,
            e.descriptor.id,
            e.descriptor.version,
            e.descriptor.opcode,
            details
        )
    }
    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
