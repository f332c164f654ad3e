//! Tracepoint systems as providers: each tracepoint becomes a TraceLogging event type whose fields are
//! the tracepoint's own (names and layout from its `format` file).

use std::path::Path;

use super::super::{LiveError, ProviderInfo};
use super::format::{self, EventFormat, FieldKind};
use crate::guid::Guid;
use crate::tlg::{self, Arity, InType, OutType, TlSchema, TlSchemaBuilder};

/// The provider GUID of a tracepoint system: the TraceLogging name hash of its name.
pub fn system_guid(system: &str) -> Guid {
    tlg::provider_guid_from_name(system)
}

/// Every tracepoint system (directories of `events/`).
pub fn systems(events_dir: &Path) -> Result<Vec<(String, usize)>, LiveError> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(events_dir).map_err(|e| LiveError::io(events_dir, e))? {
        let Ok(e) = e else { continue };
        if !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        let n = std::fs::read_dir(e.path())
            .map(|rd| {
                rd.filter_map(|x| x.ok())
                    .filter(|x| x.file_type().map(|t| t.is_dir()).unwrap_or(false))
                    .count()
            })
            .unwrap_or(0);
        v.push((name, n));
    }
    v.sort();
    Ok(v)
}

pub fn provider_infos(events_dir: &Path) -> Result<Vec<ProviderInfo>, LiveError> {
    Ok(systems(events_dir)?
        .into_iter()
        .map(|(name, n)| ProviderInfo {
            guid: system_guid(&name),
            name,
            kind: "tracepoints".into(),
            events: n,
        })
        .collect())
}

/// The events of one system.
pub fn events_of(events_dir: &Path, system: &str) -> Result<Vec<String>, LiveError> {
    let dir = events_dir.join(system);
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| LiveError::io(&dir, e))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    Ok(v)
}

#[derive(Clone, Copy, Debug)]
enum Copy_ {
    /// Raw little-endian bytes of a fixed field.
    Raw {
        offset: usize,
        size: usize,
    },
    CStr(usize),
    Bytes(usize),
}

/// A tracepoint's TraceLogging schema and its payload plan.
pub struct TpEvent {
    pub format: EventFormat,
    pub schema: TlSchema,
    plan: Vec<Copy_>,
}

impl TpEvent {
    pub fn new(format: EventFormat) -> Result<TpEvent, LiveError> {
        let mut b = TlSchemaBuilder::new(&format.system, &format.name)
            .provider_guid(system_guid(&format.system))
            .id(format.id)
            .level(4);
        let mut plan = Vec::with_capacity(format.fields.len());
        for (i, f) in format.fields.iter().enumerate() {
            match f.kind {
                FieldKind::Int => {
                    let (it, ot) = match (f.size, f.signed, f.is_pointer) {
                        (8, _, true) => (InType::Hex64, OutType::Default),
                        (1, true, _) => (InType::I8, OutType::Default),
                        (1, false, _) => (InType::U8, OutType::Default),
                        (2, true, _) => (InType::I16, OutType::Default),
                        (2, false, _) => (InType::U16, OutType::Default),
                        (4, true, _) => (InType::I32, OutType::Default),
                        (4, false, _) => (InType::U32, OutType::Default),
                        (8, true, _) => (InType::I64, OutType::Default),
                        (8, false, _) => (InType::U64, OutType::Default),
                        _ => {
                            // Odd-sized scalar: keep its bytes.
                            b = b.field_ex(
                                &f.name,
                                InType::U8,
                                OutType::Hex,
                                Arity::ConstCount(f.size.max(1) as u16),
                                0,
                            );
                            plan.push(Copy_::Raw {
                                offset: f.offset,
                                size: f.size,
                            });
                            continue;
                        }
                    };
                    b = b.field(&f.name, it, ot);
                    plan.push(Copy_::Raw {
                        offset: f.offset,
                        size: f.size,
                    });
                }
                FieldKind::Array { elem } => {
                    let it = match elem {
                        2 => InType::U16,
                        4 => InType::U32,
                        8 => InType::U64,
                        _ => InType::U8,
                    };
                    let elem = match it {
                        InType::U16 => 2,
                        InType::U32 => 4,
                        InType::U64 => 8,
                        _ => 1,
                    };
                    let n = (f.size / elem).max(1) as u16;
                    let ot = if f.type_name.contains("char") && elem == 1 {
                        OutType::Default
                    } else {
                        OutType::Hex
                    };
                    b = b.field_ex(&f.name, it, ot, Arity::ConstCount(n), 0);
                    plan.push(Copy_::Raw {
                        offset: f.offset,
                        size: n as usize * elem,
                    });
                }
                FieldKind::DataLoc { string: true, .. } => {
                    b = b.field(&f.name, InType::CStr8, OutType::Utf8);
                    plan.push(Copy_::CStr(i));
                }
                FieldKind::DataLoc { string: false, .. } => {
                    b = b.field(&f.name, InType::Binary, OutType::Default);
                    plan.push(Copy_::Bytes(i));
                }
            }
        }
        let schema = b.build().map_err(|e| {
            LiveError::Other(format!("tracepoint {}:{}: {e}", format.system, format.name))
        })?;
        Ok(TpEvent {
            format,
            schema,
            plan,
        })
    }

    /// Packs the TraceLogging payload of one raw record into `out`. Fields cut off by a short record
    /// are written as zeros (the caller counts short records as issues).
    pub fn pack(&self, data: &[u8], out: &mut Vec<u8>) -> bool {
        out.clear();
        let mut complete = true;
        for c in &self.plan {
            match *c {
                Copy_::Raw { offset, size } => match data.get(offset..offset + size) {
                    Some(b) => out.extend_from_slice(b),
                    None => {
                        complete = false;
                        out.resize(out.len() + size, 0);
                    }
                },
                Copy_::CStr(i) => {
                    let s = format::data_loc(data, &self.format.fields[i]).unwrap_or(&[]);
                    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
                    out.extend_from_slice(&s[..end]);
                    out.push(0);
                }
                Copy_::Bytes(i) => {
                    let s = format::data_loc(data, &self.format.fields[i]).unwrap_or(&[]);
                    let s = &s[..s.len().min(0xFFFF)];
                    out.extend_from_slice(&(s.len() as u16).to_le_bytes());
                    out.extend_from_slice(s);
                }
            }
        }
        complete
    }
}
