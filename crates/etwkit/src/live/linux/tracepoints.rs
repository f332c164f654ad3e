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
    /// A fixed `char[N]` field written as a NUL-terminated string.
    FixedStr {
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
                        (8, _, true) => (InType::U64, OutType::Hex),
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
                FieldKind::Array { elem: 1 } if f.type_name.contains("char") => {
                    // char name[N]: a NUL-padded string.
                    b = b.field(&f.name, InType::CStr8, OutType::Utf8);
                    plan.push(Copy_::FixedStr {
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
                Copy_::FixedStr { offset, size } => {
                    let b = data.get(offset..offset + size).unwrap_or(&[]);
                    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
                    out.extend_from_slice(&b[..end]);
                    out.push(0);
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    const FMT: &str = "name: demo_event\nID: 777\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:char comm[8];\toffset:8;\tsize:8;\tsigned:0;\n\tfield:int pid;\toffset:16;\tsize:4;\tsigned:1;\n\tfield:const void * ptr;\toffset:24;\tsize:8;\tsigned:0;\n\tfield:__data_loc char[] filename;\toffset:32;\tsize:4;\tsigned:0;\n\tfield:__u8 addr[4];\toffset:36;\tsize:4;\tsigned:0;\n";

    #[test]
    fn tracepoint_record_becomes_a_decodable_tracelogging_event() {
        let f = EventFormat::parse("demo", FMT).unwrap();
        let ev = TpEvent::new(f).unwrap();
        assert_eq!(ev.schema.provider_guid(), system_guid("demo"));
        assert_eq!(ev.schema.descriptor.id, 777);
        let mut raw = vec![0u8; 40];
        raw[0..2].copy_from_slice(&777u16.to_le_bytes());
        raw[8..12].copy_from_slice(b"bash");
        raw[16..20].copy_from_slice(&(-5i32).to_le_bytes());
        raw[24..32].copy_from_slice(&0xffff_8881_0000_1000u64.to_le_bytes());
        let name = b"/bin/sh\0";
        raw[32..36].copy_from_slice(&((40u32) | ((name.len() as u32) << 16)).to_le_bytes());
        raw[36..40].copy_from_slice(&[127, 0, 0, 1]);
        raw.extend_from_slice(name);
        let mut payload = Vec::new();
        assert!(ev.pack(&raw, &mut payload));
        let inst = tlg::TlInstance {
            pid: 1,
            tid: 2,
            cpu: 0,
            timestamp: 0,
            activity_id: Guid::ZERO,
        };
        let rec = tlg::event_record(&ev.schema, &inst, &payload[..]);
        assert_eq!(rec.traits_provider_name(), Some("demo"));
        let (name, p) = crate::live::props::properties(&rec).unwrap();
        assert_eq!(name, "demo_event");
        assert_eq!(p["comm"], "bash");
        assert_eq!(p["pid"], -5);
        assert_eq!(p["ptr"], "0xffff888100001000");
        assert_eq!(p["filename"], "/bin/sh");
        // Integer arrays are declared Hex: the decoder renders hex values as "0x…" strings.
        assert_eq!(p["addr"], serde_json::json!(["0x7f", "0x0", "0x0", "0x1"]));
        // A short record: still packed (zeros), reported incomplete.
        assert!(!ev.pack(&raw[..20], &mut payload));
    }
}
