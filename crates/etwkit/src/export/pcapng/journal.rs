//! A trace's other events beside its packets: each decoded event as a systemd Journal Export
//! entry, which Wireshark lists among the packets in time order (Microsoft's etl2pcapng writes its
//! non-packet events the same way), so a connection reset sits next to the TCP/IP or WFP event
//! that explains it.
//!
//! Fields: `__REALTIME_TIMESTAMP` (microseconds), `MESSAGE` (the event's name and its properties
//! as JSON; for an event with no known layout, why, and its payload in hex), `PRIORITY` (syslog's, from the ETW level), `SYSLOG_IDENTIFIER` (the provider's name,
//! else its GUID), `_PID`, `TID`, `_COMM` (the process's image name, where the trace names it),
//! `ETW_PROVIDER` (GUID), `ETW_EVENT_ID`, `ETW_OPCODE`, `ETW_TASK`, `ETW_KEYWORDS`.

use std::io::{self, Write};

use super::ndis::{NDIS_FRAGMENT, NDIS_METADATA, NDIS_PROVIDER, NDIS_VMSWITCH_FRAGMENT};
use super::ndis::{RAS_NDISWAN_PROVIDER, RAS_PACKETS};
use super::pktmon::{PKTMON_DROP, PKTMON_PACKET, PKTMON_PROVIDER};
use super::PcapngWriter;
use crate::decode::DecodedEvent;
use crate::event::EventRecord;

/// Whether a record is one the packet converters turn into a packet (or a packet's metadata):
/// it is not written again as a journal entry.
pub fn is_packet_event(rec: &EventRecord<'_>) -> bool {
    let id = rec.descriptor.id;
    rec.header_type.is_event_header()
        && ((rec.provider == PKTMON_PROVIDER && matches!(id, PKTMON_PACKET | PKTMON_DROP))
            || (rec.provider == NDIS_PROVIDER
                && matches!(id, NDIS_FRAGMENT | NDIS_METADATA | NDIS_VMSWITCH_FRAGMENT))
            || (rec.provider == RAS_NDISWAN_PROVIDER && RAS_PACKETS.contains(&id)))
}

/// syslog's priority of an ETW level (1 critical … 5 verbose; 0, "always", as informational).
fn priority(level: u8) -> u8 {
    match level {
        1 => 2,
        2 => 3,
        3 => 4,
        5.. => 7,
        _ => 6,
    }
}

/// Writes one decoded event as a journal entry.
pub fn write_event<W: Write>(
    w: &mut PcapngWriter<W>,
    rec: &EventRecord<'_>,
    d: &DecodedEvent,
) -> io::Result<()> {
    let name = match (&d.event_name, &d.task_name, &d.opcode_name) {
        (Some(e), ..) => e.to_string(),
        (None, Some(t), Some(o)) => format!("{t}/{o}"),
        (None, Some(t), None) => t.to_string(),
        _ => format!(
            "event {} (opcode {})",
            rec.descriptor.id, rec.descriptor.opcode
        ),
    };
    let mut message = name;
    if !d.properties.is_empty() {
        let mut json = Vec::new();
        d.properties.write_json(&mut json);
        message.push_str(": ");
        message.push_str(&String::from_utf8_lossy(&json));
    } else if let Some(why) = &d.undecoded {
        // The payload, for whoever reads it by hand (its first 256 bytes).
        let payload = &rec.payload[..rec.payload.len().min(256)];
        let hex: String = payload.iter().map(|b| format!("{b:02x}")).collect();
        let more = if payload.len() < rec.payload.len() {
            "…"
        } else {
            ""
        };
        message.push_str(&format!(" (not decoded: {why}; payload {hex}{more})"));
    }
    let provider = rec.provider.to_string();
    let ident = d.provider_name.as_deref().unwrap_or(&provider).to_string();
    let desc = &rec.descriptor;
    let numbers = [
        priority(desc.level).to_string(),
        rec.pid.to_string(),
        rec.tid.to_string(),
        desc.id.to_string(),
        desc.opcode.to_string(),
        desc.task.to_string(),
        format!("0x{:x}", desc.keywords),
    ];
    let mut fields: Vec<(&str, &str)> = vec![
        ("MESSAGE", &message),
        ("PRIORITY", &numbers[0]),
        ("SYSLOG_IDENTIFIER", &ident),
        ("_PID", &numbers[1]),
        ("TID", &numbers[2]),
    ];
    if let Some(p) = d.process_name.as_deref() {
        fields.push(("_COMM", p));
    }
    fields.extend([
        ("ETW_PROVIDER", provider.as_str()),
        ("ETW_EVENT_ID", &numbers[3]),
        ("ETW_OPCODE", &numbers[4]),
        ("ETW_TASK", &numbers[5]),
        ("ETW_KEYWORDS", &numbers[6]),
    ]);
    w.journal_entry(rec.timestamp, &fields)
}
