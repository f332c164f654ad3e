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
        let provider = match v.provider_name {
            Some(p) => p.to_string(),
            None => e.provider.to_string(),
        };
        // The event's name, or (kernel and other unnamed events) its task and opcode names, as the
        // JSON output carries them: `Windows Kernel/Thread/DCStart`.
        let who = match (v.event_name, v.task_name, v.opcode_name) {
            (Some(n), _, _) => format!("{provider}/{n}"),
            (None, Some(t), Some(o)) => format!("{provider}/{t}/{o}"),
            (None, Some(t), None) => format!("{provider}/{t}"),
            (None, None, Some(o)) => format!("{provider}/{o}"),
            (None, None, None) => provider,
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
