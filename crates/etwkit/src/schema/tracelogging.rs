//! TraceLogging self-describing metadata: the PROV_TRAITS and EVENT_SCHEMA_TL extended items.
//!
//! Grammar (see ../shared/notes/etl-format.md §6): provider traits are `u16 size, UTF-8 name\0, traits`;
//! event metadata is `u16 size, tags (chained bytes), UTF-8 name\0`, then per field
//! `name\0, u8 InMeta [, u8 OutMeta [, tags]] [, u16 ConstCount | u16 SchemaSize + schema]`.
//! A Struct field (in-type 24) keeps its member count in the OutMeta slot; the members are the fields
//! that follow, and structs nest. Schemas built from this are cached by the metadata bytes themselves
//! (never by event id, which TraceLogging leaves at 0 for most events): see [`super::Registry`].

use super::types::{in_type, out_type, tl_in, tl_to_tdh};
use super::{Count, EventSchema, Length, Property, PropertyKind, SchemaError, SchemaSource};
use crate::guid::Guid;

const TRAITS: &str = "TraceLogging provider traits";
const META: &str = "TraceLogging metadata";

/// A provider traits blob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderTraits {
    pub name: String,
    /// Trait type 1.
    pub group: Option<Guid>,
    /// Trait type 2.
    pub decode_guid: Option<Guid>,
}

/// Parses a PROV_TRAITS item.
pub fn parse_traits(data: &[u8]) -> Result<ProviderTraits, SchemaError> {
    let total = u16_at(data, 0)
        .ok_or_else(|| SchemaError::new(TRAITS, 0, "shorter than its 2-byte size"))?
        as usize;
    if total < 3 || total > data.len() {
        return Err(SchemaError::new(
            TRAITS,
            0,
            format!("size {total} does not fit the {}-byte item", data.len()),
        ));
    }
    let d = &data[..total];
    let (name, mut pos) = cstr(d, 2)
        .ok_or_else(|| SchemaError::new(TRAITS, 2, "provider name is not NUL-terminated"))?;
    let mut t = ProviderTraits {
        name,
        group: None,
        decode_guid: None,
    };
    while pos + 3 <= d.len() {
        let size = u16_at(d, pos).unwrap_or(0) as usize;
        if size < 3 || pos + size > d.len() {
            return Err(SchemaError::new(
                TRAITS,
                pos,
                format!("trait size {size} overruns the traits"),
            ));
        }
        let body = &d[pos + 3..pos + size];
        match d[pos + 2] {
            1 => t.group = Guid::from_le_bytes(body),
            2 => t.decode_guid = Guid::from_le_bytes(body),
            _ => {}
        }
        pos += size;
    }
    Ok(t)
}

/// One event's metadata, before it becomes an [`EventSchema`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlEvent {
    pub name: String,
    /// Event tags (28 bits).
    pub tags: u32,
    pub properties: Vec<Property>,
    /// Fields of the custom-schema arity (0x60): kept as counted binaries; their schema bytes skipped.
    pub custom_fields: usize,
}

struct RawField {
    name: String,
    in_type: u8,
    out_type: u8,
    arity: u8,
    const_count: u16,
    offset: usize,
}

/// Parses an EVENT_SCHEMA_TL item.
pub fn parse_event(data: &[u8]) -> Result<TlEvent, SchemaError> {
    let total = u16_at(data, 0)
        .ok_or_else(|| SchemaError::new(META, 0, "shorter than its 2-byte size"))?
        as usize;
    if total < 4 || total > data.len() {
        return Err(SchemaError::new(
            META,
            0,
            format!("size {total} does not fit the {}-byte item", data.len()),
        ));
    }
    let d = &data[..total];
    let (tags, mut pos) = read_tags(d, 2)?;
    let (name, p) = cstr(d, pos)
        .ok_or_else(|| SchemaError::new(META, pos, "event name is not NUL-terminated"))?;
    pos = p;
    let mut raw = Vec::new();
    while pos < d.len() {
        let start = pos;
        let (fname, p) = cstr(d, pos)
            .ok_or_else(|| SchemaError::new(META, pos, "field name is not NUL-terminated"))?;
        pos = p;
        let in_meta = *d.get(pos).ok_or_else(|| {
            SchemaError::new(META, pos, format!("field {fname:?} has no in-type byte"))
        })?;
        pos += 1;
        let mut out_t = 0u8;
        if in_meta & 0x80 != 0 {
            let out_meta = *d.get(pos).ok_or_else(|| {
                SchemaError::new(META, pos, format!("field {fname:?} has no out-type byte"))
            })?;
            pos += 1;
            out_t = out_meta & 0x7F;
            if out_meta & 0x80 != 0 {
                pos = read_tags(d, pos)?.1;
            }
        }
        let arity = in_meta & 0x60;
        let mut const_count = 0;
        match arity {
            0x20 => {
                const_count = u16_at(d, pos).ok_or_else(|| {
                    SchemaError::new(META, pos, format!("field {fname:?}: const count missing"))
                })?;
                pos += 2;
            }
            0x60 => {
                let n = u16_at(d, pos).ok_or_else(|| {
                    SchemaError::new(
                        META,
                        pos,
                        format!("field {fname:?}: custom schema size missing"),
                    )
                })? as usize;
                pos += 2 + n;
                if pos > d.len() {
                    return Err(SchemaError::new(
                        META,
                        start,
                        format!(
                            "field {fname:?}: custom schema of {n} bytes overruns the metadata"
                        ),
                    ));
                }
            }
            _ => {}
        }
        raw.push(RawField {
            name: fname,
            in_type: in_meta & 0x1F,
            out_type: out_t,
            arity,
            const_count,
            offset: start,
        });
    }
    let mut idx = 0;
    let mut custom = 0;
    let properties = build(&raw, &mut idx, usize::MAX, &mut custom, 0)?;
    Ok(TlEvent {
        name,
        tags,
        properties,
        custom_fields: custom,
    })
}

/// Deepest struct nesting accepted (TraceLogging itself has no limit; decoding recurses per level).
const MAX_DEPTH: usize = 32;

fn build(
    raw: &[RawField],
    idx: &mut usize,
    n: usize,
    custom: &mut usize,
    depth: usize,
) -> Result<Vec<Property>, SchemaError> {
    let mut out = Vec::new();
    while out.len() < n && *idx < raw.len() {
        let f = &raw[*idx];
        *idx += 1;
        let count = match f.arity {
            0x20 => Count::Fixed(f.const_count),
            0x40 => Count::Prefixed,
            _ => Count::One,
        };
        let prop = if f.arity == 0x60 {
            *custom += 1;
            Property::scalar(
                f.name.clone(),
                in_type::MANIFEST_COUNTEDBINARY,
                out_type::NULL,
            )
        } else if f.in_type == tl_in::STRUCT {
            let members = f.out_type as usize;
            if members == 0 {
                return Err(SchemaError::new(
                    META,
                    f.offset,
                    format!("struct {:?} declares 0 members", f.name),
                ));
            }
            if depth >= MAX_DEPTH {
                return Err(SchemaError::new(
                    META,
                    f.offset,
                    format!("struct {:?} nests deeper than {MAX_DEPTH} levels", f.name),
                ));
            }
            let m = build(raw, idx, members, custom, depth + 1)?;
            if m.len() < members {
                return Err(SchemaError::new(
                    META,
                    f.offset,
                    format!(
                        "struct {:?} declares {members} members but only {} fields follow",
                        f.name,
                        m.len()
                    ),
                ));
            }
            Property {
                name: f.name.clone(),
                kind: PropertyKind::Struct(m),
                count,
                length: Length::Natural,
                map: None,
            }
        } else {
            let (it, ot) = tl_to_tdh(f.in_type, f.out_type).ok_or_else(|| {
                SchemaError::new(
                    META,
                    f.offset,
                    format!("field {:?} has unknown in-type {}", f.name, f.in_type),
                )
            })?;
            Property {
                name: f.name.clone(),
                kind: PropertyKind::Scalar {
                    in_type: it,
                    out_type: ot,
                },
                count,
                length: Length::Natural,
                map: None,
            }
        };
        out.push(prop);
    }
    Ok(out)
}

/// Builds the schema of one TraceLogging event from its extended items.
pub fn schema_from_items(
    provider: Guid,
    traits: Option<&[u8]>,
    meta: &[u8],
) -> Result<EventSchema, SchemaError> {
    let ev = parse_event(meta)?;
    let provider_name = match traits {
        Some(t) => Some(parse_traits(t)?.name),
        None => None,
    };
    Ok(EventSchema {
        provider,
        provider_name,
        event_name: Some(ev.name),
        task_name: None,
        opcode_name: None,
        keywords_name: None,
        properties: ev.properties,
        source: SchemaSource::TraceLogging,
    })
}

fn read_tags(d: &[u8], mut pos: usize) -> Result<(u32, usize), SchemaError> {
    let mut tags = 0u32;
    for i in 0..4 {
        let b = *d
            .get(pos)
            .ok_or_else(|| SchemaError::new(META, pos, "tags run past the metadata"))?;
        pos += 1;
        tags |= ((b & 0x7F) as u32) << (21 - 7 * i);
        if b & 0x80 == 0 {
            return Ok((tags, pos));
        }
    }
    Err(SchemaError::new(META, pos, "tags longer than 4 bytes"))
}

fn u16_at(d: &[u8], pos: usize) -> Option<u16> {
    Some(u16::from_le_bytes(d.get(pos..pos + 2)?.try_into().ok()?))
}

/// A NUL-terminated UTF-8 string at `pos`; returns it and the position after the NUL.
fn cstr(d: &[u8], pos: usize) -> Option<(String, usize)> {
    let rest = d.get(pos..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    Some((
        String::from_utf8_lossy(&rest[..end]).into_owned(),
        pos + end + 1,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(body: &[u8]) -> Vec<u8> {
        let mut v = ((body.len() + 2) as u16).to_le_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn nested_struct_and_arrays() {
        // tags 0, "E", a: Struct(2) { b: CStr16, c: U32[] (var) }, d: U8 hex [3] const, e: custom
        let mut b = vec![0u8];
        b.extend_from_slice(b"E\0");
        b.extend_from_slice(b"a\0");
        b.extend_from_slice(&[0x80 | 24, 2]);
        b.extend_from_slice(b"b\0");
        b.push(1);
        b.extend_from_slice(b"c\0");
        b.push(0x40 | 8);
        b.extend_from_slice(b"d\0");
        b.extend_from_slice(&[0x80 | 0x20 | 4, 0x80 | 4, 0x05]); // OutMeta with tags 0x05
        b.extend_from_slice(&3u16.to_le_bytes());
        b.extend_from_slice(b"e\0");
        b.push(0x60 | 14);
        b.extend_from_slice(&2u16.to_le_bytes());
        b.extend_from_slice(&[9, 9]);
        let ev = parse_event(&meta(&b)).unwrap();
        assert_eq!(ev.name, "E");
        assert_eq!(ev.properties.len(), 3); // a, d, e at top level
        let PropertyKind::Struct(m) = &ev.properties[0].kind else {
            panic!("a is not a struct")
        };
        assert_eq!(
            m[0].kind,
            PropertyKind::Scalar {
                in_type: 1,
                out_type: 0
            }
        );
        assert_eq!(m[1].count, Count::Prefixed);
        assert_eq!(ev.properties[1].count, Count::Fixed(3));
        assert_eq!(
            ev.properties[1].kind,
            PropertyKind::Scalar {
                in_type: 4,
                out_type: out_type::HEXINT8
            }
        );
        assert_eq!(ev.custom_fields, 1);
        // Truncated: a clear error, no panic.
        let m = meta(&b);
        for cut in 0..m.len() {
            let mut t = m[..cut].to_vec();
            if t.len() >= 2 {
                t[0..2].copy_from_slice(&(cut as u16).to_le_bytes());
            }
            let _ = parse_event(&t);
        }
        // A struct promising more members than follow.
        let mut bad = vec![0u8];
        bad.extend_from_slice(b"E\0s\0");
        bad.extend_from_slice(&[0x80 | 24, 5]);
        bad.extend_from_slice(b"x\0\x04");
        let e = parse_event(&meta(&bad)).unwrap_err();
        assert!(e.reason.contains("declares 5 members"), "{e}");
    }

    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        let mut b = vec![0u8];
        b.extend_from_slice(b"E\0");
        for _ in 0..5000 {
            b.extend_from_slice(b"s\0");
            b.extend_from_slice(&[0x80 | 24, 1]);
        }
        b.extend_from_slice(b"x\0\x04");
        let e = parse_event(&meta(&b)).unwrap_err();
        assert!(e.reason.contains("nests deeper than 32"), "{e}");
    }

    #[test]
    fn traits_name_and_group() {
        let mut t = Vec::new();
        t.extend_from_slice(&0u16.to_le_bytes());
        t.extend_from_slice(b"MySource\0");
        t.extend_from_slice(&19u16.to_le_bytes());
        t.push(1);
        t.extend_from_slice(&[0x11; 16]);
        let n = t.len() as u16;
        t[0..2].copy_from_slice(&n.to_le_bytes());
        let p = parse_traits(&t).unwrap();
        assert_eq!(p.name, "MySource");
        assert_eq!(p.group, Guid::from_le_bytes(&[0x11; 16]));
    }
}
