//! A compact binary form of parsed event layouts, for the built-in manifests.
//!
//! Parsing a built-in manifest's XML is most of the cost of a trace's first look at a provider
//! (the .NET runtime's two take 11 M instructions, a fifth of a trace's whole pre-scan). `manifests/compiled.bin` holds every built-in
//! manifest already parsed, in this form: decoding a section is a walk over bytes with no
//! tokenizing, no tree and no lookups by name. The XML stays the source: a test checks that the
//! committed file is exactly what the manifest parser makes of today's XML (and says how to
//! regenerate it when it is not).
//!
//! Layout (all integers LEB128 unless noted):
//! - file: `ETWKMAN1`, section count, then per section its offset and length (from the start of
//!   the file), then the sections;
//! - section: its manifest's file name, a string table (count, then length + UTF-8 bytes), the
//!   value maps (count; each name, bitmap flag, entries as value + string), the events (count;
//!   each key, provider GUID (16 bytes), five optional names, properties, source);
//! - a string is its index in the table; an optional string or map is 0 for none, else index + 1;
//! - a property: name, kind (0 scalar: in-type, out-type; 1 struct: properties), count
//!   (0 one, 1 fixed n, 2 from property i, 3 prefixed, 4 to end), length (0 natural, 1 fixed n,
//!   2 from property i), map.
//!
//! Maps shared between properties by the parser (one `Arc`) stay shared after decoding. The
//! encoder is compiled for tests only: the test that checks the committed file also writes it.

#[cfg(test)]
use std::collections::HashMap;
use std::sync::Arc;

use crate::guid::Guid;
use crate::schema::{
    Count, EventSchema, Length, Property, PropertyKind, SchemaKey, SchemaSource, ValueMap,
};

const MAGIC: &[u8; 8] = b"ETWKMAN1";

/// The layouts of one manifest, as its parser returns them.
pub(crate) type Events = Vec<(SchemaKey, EventSchema)>;

#[cfg(test)]
/// Encodes manifests (file name, layouts) into one file of sections.
pub(crate) fn encode_file(manifests: &[(&str, &Events)]) -> Vec<u8> {
    let sections: Vec<Vec<u8>> = manifests
        .iter()
        .map(|(name, events)| encode_section(name, events))
        .collect();
    let mut head = MAGIC.to_vec();
    put(&mut head, sections.len() as u64);
    // Offsets are fixed-width (u32 LE) so the head's size is known before they are.
    let head_len = head.len() + 8 * sections.len();
    let mut at = head_len;
    for s in &sections {
        head.extend_from_slice(&(at as u32).to_le_bytes());
        head.extend_from_slice(&(s.len() as u32).to_le_bytes());
        at += s.len();
    }
    for s in sections {
        head.extend_from_slice(&s);
    }
    head
}

/// The file name and layouts of section `i` of a file made by [`encode_file`].
pub(crate) fn decode_section(file: &[u8], i: usize) -> Result<(String, Events), String> {
    let mut r = Reader { b: file, at: 0 };
    if r.bytes(8)? != MAGIC {
        return Err("not a compiled manifest file".into());
    }
    let n = r.num()? as usize;
    if i >= n {
        return Err(format!("no section {i} (the file has {n})"));
    }
    r.bytes(8 * i)?;
    let at = u32::from_le_bytes(r.bytes(4)?.try_into().expect("4 bytes")) as usize;
    let len = u32::from_le_bytes(r.bytes(4)?.try_into().expect("4 bytes")) as usize;
    let body = file
        .get(at..at.saturating_add(len))
        .ok_or_else(|| format!("section {i} runs past the end of the file"))?;
    let mut r = Reader { b: body, at: 0 };
    let name = r.text()?.to_string();
    let strings: Vec<&str> = (0..r.num()?).map(|_| r.text()).collect::<Result<_, _>>()?;
    let s = |r: &mut Reader<'_>| -> Result<String, String> {
        let k = r.num()? as usize;
        strings
            .get(k)
            .map(|t| t.to_string())
            .ok_or_else(|| format!("string {k} out of range"))
    };
    let opt = |r: &mut Reader<'_>| -> Result<Option<String>, String> {
        match r.num()? as usize {
            0 => Ok(None),
            k => strings
                .get(k - 1)
                .map(|t| Some(t.to_string()))
                .ok_or_else(|| format!("string {} out of range", k - 1)),
        }
    };
    let mut maps = Vec::new();
    for _ in 0..r.num()? {
        let name = s(&mut r)?;
        let is_bitmap = r.byte()? != 0;
        let entries = (0..r.num()?)
            .map(|_| Ok((r.num()?, s(&mut r)?)))
            .collect::<Result<Vec<_>, String>>()?;
        maps.push(Arc::new(ValueMap {
            name,
            is_bitmap,
            entries,
        }));
    }
    let mut events = Vec::new();
    for _ in 0..r.num()? {
        let key = match r.byte()? {
            0 => SchemaKey::Manifest {
                provider: r.guid()?,
                id: r.num()? as u16,
                version: r.byte()?,
            },
            1 => SchemaKey::Mof {
                class: r.guid()?,
                opcode: r.byte()?,
                version: r.byte()?,
            },
            t => return Err(format!("unknown key kind {t}")),
        };
        let provider = r.guid()?;
        let provider_name = opt(&mut r)?;
        let event_name = opt(&mut r)?;
        let task_name = opt(&mut r)?;
        let opcode_name = opt(&mut r)?;
        let keywords_name = opt(&mut r)?;
        let properties = properties(&mut r, &s, &maps, 0)?;
        let source = match r.byte()? {
            0 => SchemaSource::Builtin,
            1 => SchemaSource::UserManifest,
            2 => SchemaSource::Embedded,
            3 => SchemaSource::EventSourceManifest,
            4 => SchemaSource::TraceLogging,
            5 => SchemaSource::KernelMof,
            t => return Err(format!("unknown schema source {t}")),
        };
        events.push((
            key,
            EventSchema {
                provider,
                provider_name,
                event_name,
                task_name,
                opcode_name,
                keywords_name,
                properties,
                source,
            },
        ));
    }
    if r.at != body.len() {
        return Err(format!(
            "section {i} has {} bytes after its events",
            body.len() - r.at
        ));
    }
    Ok((name, events))
}

fn properties(
    r: &mut Reader<'_>,
    s: &dyn Fn(&mut Reader<'_>) -> Result<String, String>,
    maps: &[Arc<ValueMap>],
    depth: usize,
) -> Result<Vec<Property>, String> {
    if depth > 8 {
        return Err("structs nested too deep".into());
    }
    (0..r.num()?)
        .map(|_| {
            let name = s(r)?;
            let kind = match r.byte()? {
                0 => PropertyKind::Scalar {
                    in_type: r.num()? as u16,
                    out_type: r.num()? as u16,
                },
                1 => PropertyKind::Struct(properties(r, s, maps, depth + 1)?),
                t => return Err(format!("unknown property kind {t}")),
            };
            let count = match r.byte()? {
                0 => Count::One,
                1 => Count::Fixed(r.num()? as u16),
                2 => Count::FromProperty(r.num()? as usize),
                3 => Count::Prefixed,
                4 => Count::ToEnd,
                5 => Count::IfRoom,
                t => return Err(format!("unknown count kind {t}")),
            };
            let length = match r.byte()? {
                0 => Length::Natural,
                1 => Length::Fixed(r.num()? as u16),
                2 => Length::FromProperty(r.num()? as usize),
                t => return Err(format!("unknown length kind {t}")),
            };
            let map = match r.num()? as usize {
                0 => None,
                k => Some(
                    maps.get(k - 1)
                        .cloned()
                        .ok_or_else(|| format!("map {} out of range", k - 1))?,
                ),
            };
            Ok(Property {
                name,
                kind,
                count,
                length,
                map,
            })
        })
        .collect()
}

#[cfg(test)]
fn encode_section(name: &str, events: &Events) -> Vec<u8> {
    let mut enc = Encoder::default();
    let mut body = Vec::new();
    put_str(&mut body, name);
    let mut ev = Vec::new();
    put(&mut ev, events.len() as u64);
    for (key, e) in events {
        match *key {
            SchemaKey::Manifest {
                provider,
                id,
                version,
            } => {
                ev.push(0);
                ev.extend_from_slice(&provider.to_le_bytes());
                put(&mut ev, id as u64);
                ev.push(version);
            }
            SchemaKey::Mof {
                class,
                opcode,
                version,
            } => {
                ev.push(1);
                ev.extend_from_slice(&class.to_le_bytes());
                ev.push(opcode);
                ev.push(version);
            }
        }
        ev.extend_from_slice(&e.provider.to_le_bytes());
        for o in [
            &e.provider_name,
            &e.event_name,
            &e.task_name,
            &e.opcode_name,
            &e.keywords_name,
        ] {
            let k = o.as_deref().map_or(0, |t| enc.string(t) + 1);
            put(&mut ev, k);
        }
        enc.properties(&mut ev, &e.properties);
        ev.push(match e.source {
            SchemaSource::Builtin => 0,
            SchemaSource::UserManifest => 1,
            SchemaSource::Embedded => 2,
            SchemaSource::EventSourceManifest => 3,
            SchemaSource::TraceLogging => 4,
            SchemaSource::KernelMof => 5,
        });
    }
    // The maps' own strings join the table before it is written.
    let mut maps = Vec::new();
    put(&mut maps, enc.maps.len() as u64);
    for m in std::mem::take(&mut enc.maps) {
        let k = enc.string(&m.name);
        put(&mut maps, k);
        maps.push(m.is_bitmap as u8);
        put(&mut maps, m.entries.len() as u64);
        for (v, t) in &m.entries {
            put(&mut maps, *v);
            let k = enc.string(t);
            put(&mut maps, k);
        }
    }
    put(&mut body, enc.strings.len() as u64);
    for t in &enc.strings {
        put_str(&mut body, t);
    }
    body.extend_from_slice(&maps);
    body.extend_from_slice(&ev);
    body
}

#[cfg(test)]
#[derive(Default)]
struct Encoder {
    strings: Vec<String>,
    index: HashMap<String, u64>,
    maps: Vec<Arc<ValueMap>>,
    map_index: HashMap<*const ValueMap, u64>,
}

#[cfg(test)]
impl Encoder {
    fn string(&mut self, t: &str) -> u64 {
        if let Some(&k) = self.index.get(t) {
            return k;
        }
        let k = self.strings.len() as u64;
        self.strings.push(t.to_string());
        self.index.insert(t.to_string(), k);
        k
    }

    fn properties(&mut self, out: &mut Vec<u8>, props: &[Property]) {
        put(out, props.len() as u64);
        for p in props {
            let k = self.string(&p.name);
            put(out, k);
            match &p.kind {
                PropertyKind::Scalar { in_type, out_type } => {
                    out.push(0);
                    put(out, *in_type as u64);
                    put(out, *out_type as u64);
                }
                PropertyKind::Struct(members) => {
                    out.push(1);
                    self.properties(out, members);
                }
            }
            match p.count {
                Count::One => out.push(0),
                Count::Fixed(n) => {
                    out.push(1);
                    put(out, n as u64);
                }
                Count::FromProperty(i) => {
                    out.push(2);
                    put(out, i as u64);
                }
                Count::Prefixed => out.push(3),
                Count::ToEnd => out.push(4),
                Count::IfRoom => out.push(5),
            }
            match p.length {
                Length::Natural => out.push(0),
                Length::Fixed(n) => {
                    out.push(1);
                    put(out, n as u64);
                }
                Length::FromProperty(i) => {
                    out.push(2);
                    put(out, i as u64);
                }
            }
            let m = match &p.map {
                None => 0,
                Some(m) => {
                    let next = self.maps.len() as u64;
                    let k = *self.map_index.entry(Arc::as_ptr(m)).or_insert(next);
                    if k == next {
                        self.maps.push(m.clone());
                    }
                    k + 1
                }
            };
            put(out, m);
        }
    }
}

#[cfg(test)]
fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
fn put_str(out: &mut Vec<u8>, t: &str) {
    put(out, t.len() as u64);
    out.extend_from_slice(t.as_bytes());
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        let s = self
            .b
            .get(self.at..self.at.saturating_add(n))
            .ok_or_else(|| format!("ends at byte {} inside a field", self.b.len()))?;
        self.at += n;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }

    fn num(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(format!("number too long at byte {}", self.at))
    }

    fn text(&mut self) -> Result<&'a str, String> {
        let n = self.num()? as usize;
        std::str::from_utf8(self.bytes(n)?).map_err(|e| format!("string not UTF-8: {e}"))
    }

    fn guid(&mut self) -> Result<Guid, String> {
        Guid::from_le_bytes(self.bytes(16)?).ok_or_else(|| "short GUID".to_string())
    }
}
