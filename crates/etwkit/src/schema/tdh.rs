//! TRACE_EVENT_INFO and EVENT_MAP_INFO blobs, as KernelTraceControl writes them into merged traces
//! (FULL_HEADER records of class bbccf6c1-6cd1-48c4-80ff-839482e37671: type 32 EventInfo, type 33
//! EventMapInfo = 16-byte provider GUID + EVENT_MAP_INFO). Layouts: ../shared/notes/etl-format.md §7.
//!
//! Keys: manifest events (DecodingSource 0) by (provider, id, version); MOF events (1) by (event class
//! GUID, opcode, version); maps by (provider, map name). Properties that name a map carry a
//! placeholder [`ValueMap`] with no entries until [`resolve_maps`] fills it in (maps follow the
//! EventInfo that uses them).

use std::collections::HashMap;
use std::sync::Arc;

use super::types::in_type;
use super::{
    Count, EventSchema, Length, Property, PropertyKind, SchemaError, SchemaKey, SchemaSource,
    ValueMap,
};
use crate::guid::Guid;

/// The class GUID of KernelTraceControl's MetaData records.
pub const METADATA_CLASS: Guid = Guid::from_str_const("bbccf6c1-6cd1-48c4-80ff-839482e37671");
/// Class.Type of an EventInfo (TRACE_EVENT_INFO) record.
pub const OPCODE_EVENT_INFO: u8 = 32;
/// Class.Type of an EventMapInfo record.
pub const OPCODE_MAP_INFO: u8 = 33;

const TEI: &str = "TRACE_EVENT_INFO";
const EMI: &str = "EVENT_MAP_INFO";

/// One parsed TRACE_EVENT_INFO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventInfo {
    pub key: SchemaKey,
    /// 0 manifest, 1 WBEM/MOF, 2 WPP, 3 TraceLogging.
    pub decoding_source: u32,
    pub schema: EventSchema,
}

fn u16_at(d: &[u8], p: usize) -> Option<u16> {
    Some(u16::from_le_bytes(d.get(p..p + 2)?.try_into().ok()?))
}
fn u32_at(d: &[u8], p: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(p..p + 4)?.try_into().ok()?))
}

/// A UTF-16LE NUL-terminated string at `off` from the blob start (0 = none); trailing spaces trimmed.
fn wstr(d: &[u8], off: u32) -> Option<String> {
    if off == 0 {
        return None;
    }
    let rest = d.get(off as usize..)?;
    let units: Vec<u16> = rest
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .take_while(|&u| u != 0)
        .collect();
    let s = String::from_utf16_lossy(&units);
    let s = s.trim_end();
    (!s.is_empty()).then(|| s.to_string())
}

/// Parses a TRACE_EVENT_INFO blob. Returns `Ok(None)` for decoding sources that carry no layout
/// of their own here (WPP, TraceLogging).
pub fn parse_event_info(d: &[u8]) -> Result<Option<EventInfo>, SchemaError> {
    if d.len() < 0x70 {
        return Err(SchemaError::new(
            TEI,
            0,
            format!("{} bytes, shorter than the 0x70-byte header", d.len()),
        ));
    }
    let provider = Guid::from_le_bytes(&d[0..16]).unwrap_or_default();
    let event_guid = Guid::from_le_bytes(&d[16..32]).unwrap_or_default();
    let id = u16_at(d, 0x20).unwrap_or(0);
    let version = d[0x22];
    let opcode = d[0x25];
    let source = u32_at(d, 0x30).unwrap_or(0);
    let off = |p: usize| u32_at(d, p).unwrap_or(0);
    let prop_count = off(0x64) as usize;
    let top_count = off(0x68) as usize;
    if 0x70 + prop_count * 0x18 > d.len() {
        return Err(SchemaError::new(
            TEI,
            0x64,
            format!("{prop_count} properties overrun the {}-byte blob", d.len()),
        ));
    }
    if top_count > prop_count {
        return Err(SchemaError::new(
            TEI,
            0x68,
            format!("{top_count} top-level properties but only {prop_count} in all"),
        ));
    }
    let key = match source {
        0 => SchemaKey::Manifest {
            provider,
            id,
            version,
        },
        1 => SchemaKey::Mof {
            class: event_guid,
            opcode,
            version,
        },
        _ => return Ok(None),
    };
    let mut budget = MAX_NODES;
    let props = build_level(d, prop_count, 0, top_count, 0, &mut budget)?;
    let schema = EventSchema {
        provider,
        provider_name: wstr(d, off(0x34)),
        event_name: if source == 0 {
            wstr(d, off(0x5C))
        } else {
            None
        },
        task_name: wstr(d, off(0x44)),
        opcode_name: wstr(d, off(0x48)),
        keywords_name: wstr(d, off(0x40)),
        properties: props,
        source: SchemaSource::Embedded,
    };
    Ok(Some(EventInfo {
        key,
        decoding_source: source,
        schema,
    }))
}

/// Properties `[start, start+n)` of the global array, as one level of the tree.
/// Most properties one schema tree may hold once structs are expanded (a struct range may be shared
/// or even point at itself in a corrupt blob; this keeps such trees from exploding).
const MAX_NODES: usize = 4096;

fn build_level(
    d: &[u8],
    total: usize,
    start: usize,
    n: usize,
    depth: u32,
    budget: &mut usize,
) -> Result<Vec<Property>, SchemaError> {
    if depth > 16 {
        return Err(SchemaError::new(
            TEI,
            0x70 + start * 0x18,
            "structs nest deeper than 16 levels",
        ));
    }
    if start + n > total {
        return Err(SchemaError::new(
            TEI,
            0x70 + start * 0x18,
            format!(
                "struct members {start}..{} exceed {total} properties",
                start + n
            ),
        ));
    }
    if n > *budget {
        return Err(SchemaError::new(
            TEI,
            0x70 + start * 0x18,
            format!("struct tree exceeds {MAX_NODES} properties"),
        ));
    }
    *budget -= n;
    let mut out = Vec::with_capacity(n);
    for i in start..start + n {
        let p = 0x70 + i * 0x18;
        let flags = u32_at(d, p).unwrap_or(0);
        let name = wstr(d, u32_at(d, p + 4).unwrap_or(0)).unwrap_or_else(|| format!("Property{i}"));
        let a = u16_at(d, p + 8).unwrap_or(0);
        let b = u16_at(d, p + 10).unwrap_or(0);
        let map_off = u32_at(d, p + 12).unwrap_or(0);
        let count_f = u16_at(d, p + 16).unwrap_or(0);
        let length_f = u16_at(d, p + 18).unwrap_or(0);
        let local = |idx: u16, what: &str| -> Result<usize, SchemaError> {
            let idx = idx as usize;
            if idx >= start && idx < i {
                Ok(idx - start)
            } else {
                Err(SchemaError::new(TEI, p, format!("property {name:?} takes its {what} from property {idx}, not an earlier one at its level")))
            }
        };
        let count = if flags & 0x4 != 0 {
            Count::FromProperty(local(count_f, "count")?)
        } else if flags & 0x20 != 0 || count_f > 1 {
            Count::Fixed(count_f)
        } else {
            Count::One
        };
        let (kind, length, map) = if flags & 0x1 != 0 {
            (
                PropertyKind::Struct(build_level(
                    d,
                    total,
                    a as usize,
                    b as usize,
                    depth + 1,
                    budget,
                )?),
                Length::Natural,
                None,
            )
        } else {
            let length = if flags & 0x2 != 0 {
                Length::FromProperty(local(length_f, "length")?)
            } else if length_f > 0 && takes_length(a) {
                Length::Fixed(length_f)
            } else {
                Length::Natural
            };
            let map = wstr(d, map_off).map(|n| {
                Arc::new(ValueMap {
                    name: n,
                    is_bitmap: false,
                    entries: Vec::new(),
                })
            });
            (
                PropertyKind::Scalar {
                    in_type: a,
                    out_type: b,
                },
                length,
                map,
            )
        };
        out.push(Property {
            name,
            kind,
            count,
            length,
            map,
        });
    }
    Ok(out)
}

/// In-types whose size a `length` changes (fixed-size scalars and pointers ignore it).
fn takes_length(t: u16) -> bool {
    use in_type::*;
    matches!(
        t,
        UNICODESTRING
            | ANSISTRING
            | BINARY
            | NONNULLTERMINATEDSTRING
            | NONNULLTERMINATEDANSISTRING
            | HEXDUMP
    )
}

/// Parses an EventMapInfo payload: a provider GUID, then EVENT_MAP_INFO.
pub fn parse_map_info(payload: &[u8]) -> Result<(Guid, ValueMap), SchemaError> {
    let provider = Guid::from_le_bytes(payload)
        .ok_or_else(|| SchemaError::new(EMI, 0, "shorter than the 16-byte provider GUID"))?;
    let d = &payload[16..];
    if d.len() < 16 {
        return Err(SchemaError::new(EMI, 16, "shorter than its 16-byte header"));
    }
    let name = wstr(d, u32_at(d, 0).unwrap_or(0))
        .ok_or_else(|| SchemaError::new(EMI, 16, "map has no name"))?;
    let flag = u32_at(d, 4).unwrap_or(0);
    let n = u32_at(d, 8).unwrap_or(0) as usize;
    let value_type = u32_at(d, 12).unwrap_or(0);
    if value_type != 0 {
        return Err(SchemaError::new(
            EMI,
            28,
            format!("map {name:?} has string input values (ValueType {value_type}); not supported"),
        ));
    }
    if 16 + n * 8 > d.len() {
        return Err(SchemaError::new(
            EMI,
            24,
            format!("map {name:?}: {n} entries overrun the blob"),
        ));
    }
    let mut entries = Vec::with_capacity(n);
    for i in 0..n {
        let e = 16 + i * 8;
        let out = wstr(d, u32_at(d, e).unwrap_or(0)).unwrap_or_default();
        entries.push((u32_at(d, e + 4).unwrap_or(0) as u64, out));
    }
    Ok((
        provider,
        ValueMap {
            name,
            is_bitmap: flag & (0x2 | 0x10) != 0,
            entries,
        },
    ))
}

/// Replaces placeholder maps (no entries) in `props` with the real ones from `maps`.
pub fn resolve_maps(
    provider: Guid,
    props: &mut [Property],
    maps: &HashMap<(Guid, String), Arc<ValueMap>>,
) {
    for p in props {
        if let Some(m) = &p.map {
            if m.entries.is_empty() {
                if let Some(real) = maps.get(&(provider, m.name.clone())) {
                    p.map = Some(real.clone());
                }
            }
        }
        if let PropertyKind::Struct(members) = &mut p.kind {
            resolve_maps(provider, members, maps);
        }
    }
}
