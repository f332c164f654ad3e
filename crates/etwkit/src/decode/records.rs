//! Records decoded without a registry layout: KernelTraceControl MetaData (EventInfo /
//! EventMapInfo) and WPP MESSAGE records.

use crate::event::EventRecord;
use crate::guid::Guid;
use crate::schema::SchemaSource;

use super::{DecodedEvent, Properties, Value};

/// KernelTraceControl MetaData records (EventInfo / EventMapInfo): what they describe.
pub(crate) fn metadata_record(rec: &EventRecord<'_>, ev: &mut DecodedEvent) {
    use crate::schema::tdh;
    ev.provider_name = Some("KernelTraceControl".into());
    ev.task_name = Some("MetaData".into());
    let p = &mut ev.properties;
    match rec.descriptor.opcode {
        tdh::OPCODE_EVENT_INFO => {
            ev.opcode_name = Some("EventInfo".into());
            match tdh::parse_event_info(&rec.payload) {
                Ok(info) => {
                    let d = &rec.payload;
                    p.push(
                        "ProviderGuid",
                        Value::Guid(Guid::from_le_bytes(d).unwrap_or_default()),
                    );
                    p.push(
                        "EventGuid",
                        Value::Guid(Guid::from_le_bytes(&d[16..]).unwrap_or_default()),
                    );
                    p.push(
                        "EventId",
                        Value::U64(u16::from_le_bytes([d[0x20], d[0x21]]) as u64),
                    );
                    p.push("Version", Value::U64(d[0x22] as u64));
                    p.push("Opcode", Value::U64(d[0x25] as u64));
                    p.push(
                        "DecodingSource",
                        Value::U64(u32::from_le_bytes([d[0x30], d[0x31], d[0x32], d[0x33]]) as u64),
                    );
                    if let Some(i) = info {
                        let s = &i.schema;
                        let name = |v: &Option<String>| {
                            v.clone().map(Value::String).unwrap_or(Value::Null)
                        };
                        p.push("ProviderName", name(&s.provider_name));
                        p.push("TaskName", name(&s.task_name));
                        p.push("OpcodeName", name(&s.opcode_name));
                        p.push("EventName", name(&s.event_name));
                        p.push("TopLevelProperties", Value::U64(s.properties.len() as u64));
                    }
                    ev.source = Some(SchemaSource::Embedded);
                }
                Err(e) => ev.undecoded = Some(e.to_string()),
            }
        }
        tdh::OPCODE_MAP_INFO => {
            ev.opcode_name = Some("EventMapInfo".into());
            match tdh::parse_map_info(&rec.payload) {
                Ok((provider, map)) => {
                    p.push("ProviderGuid", Value::Guid(provider));
                    p.push("MapName", Value::String(map.name));
                    p.push("IsBitmap", Value::Bool(map.is_bitmap));
                    p.push("Entries", Value::U64(map.entries.len() as u64));
                    ev.source = Some(SchemaSource::Embedded);
                }
                Err(e) => ev.undecoded = Some(e.to_string()),
            }
        }
        other => {
            ev.undecoded = Some(format!(
                "KernelTraceControl MetaData record of unknown type {other}"
            ))
        }
    }
}

/// A WPP MESSAGE record's raw fields (no TMF: the argument blob cannot be formatted).
pub(crate) fn wpp_fields(rec: &EventRecord<'_>) -> Properties {
    let mut p = Properties::default();
    p.push(
        "MessageNumber",
        Value::U64(rec.hook_id.unwrap_or(rec.descriptor.id) as u64),
    );
    p.push("MessageGuid", Value::Guid(rec.provider));
    p.push("PointerSize", Value::U64(rec.pointer_size as u64));
    p.push("Arguments", Value::Binary(rec.payload.to_vec()));
    p
}
