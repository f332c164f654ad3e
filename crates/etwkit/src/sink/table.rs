//! One aligned line per event for people.

use std::io::Write;

use super::{EventView, Render};
use crate::time::format_rfc3339;

/// The title line. The fixed-width columns come first and the provider/event name, whose length
/// varies most (`Microsoft-Windows-Winsock-AFD/Connection indicated (IPv4)`), last before the
/// details: a long name pushes only the details along, never a column.
pub fn header() -> String {
    format!(
        "{:<28} {:>3} {:>7} {:<16} {:>7} {:>5} {:>3} {:>3}  {:<40}  details\n",
        "TIME (UTC)", "CPU", "PID", "PROCESS", "TID", "ID", "VER", "OP", "PROVIDER / EVENT"
    )
}

/// Renders events as aligned table lines.
pub struct TableRender;

impl Render for TableRender {
    fn render(&mut self, v: &EventView<'_, '_>, out: &mut Vec<u8>) {
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
        let pid = if v.pid() == u32::MAX {
            "-".to_string()
        } else {
            v.pid().to_string()
        };
        let tid = if v.tid() == u32::MAX {
            "-".to_string()
        } else {
            v.tid().to_string()
        };
        let details = match v.properties_json {
            Some(p) => String::from_utf8_lossy(p).into_owned(),
            None => format!("{} payload {} bytes", e.header_type.name(), e.payload.len()),
        };
        let _ = writeln!(
            out,
            "{:<28} {:>3} {:>7} {:<16.16} {:>7} {:>5} {:>3} {:>3}  {:<40}  {}",
            format_rfc3339(e.timestamp),
            e.cpu,
            pid,
            v.process_name.unwrap_or("-"),
            tid,
            e.descriptor.id,
            e.descriptor.version,
            e.descriptor.opcode,
            who,
            details
        );
    }
}
