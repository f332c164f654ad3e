//! Properties of the TraceLogging events this backend produces, decoded from their own metadata
//! (the subset of TraceLogging the backend writes: integers, hex, Bool32, CStr8, Binary, const-count
//! arrays, Port/IPv4/IPv6 out-types). Stands in until the general decoder serves live events.

use serde_json::{Map, Value};

use crate::event::{ext_type, EventRecord};

/// One field of TraceLogging metadata: (name, in-type, out-type, const count).
pub type TlField = (String, u8, u8, Option<u16>);

/// Field (name, in-type, out-type, const count) list of an EVENT_SCHEMA_TL blob, and the event name.
pub fn parse_metadata(meta: &[u8]) -> Option<(String, Vec<TlField>)> {
    let total = u16::from_le_bytes([*meta.first()?, *meta.get(1)?]) as usize;
    let meta = meta.get(..total.min(meta.len()))?;
    let mut p = 2;
    // Event tags: chained bytes.
    while *meta.get(p)? & 0x80 != 0 {
        p += 1;
    }
    p += 1;
    let cstr = |p: &mut usize| -> Option<String> {
        let rest = meta.get(*p..)?;
        let end = rest.iter().position(|&c| c == 0)?;
        *p += end + 1;
        Some(String::from_utf8_lossy(&rest[..end]).into_owned())
    };
    let name = cstr(&mut p)?;
    let mut fields = Vec::new();
    while p < meta.len() {
        let fname = cstr(&mut p)?;
        let inm = *meta.get(p)?;
        p += 1;
        let mut out = 0u8;
        if inm & 0x80 != 0 {
            let om = *meta.get(p)?;
            p += 1;
            out = om & 0x7f;
            if om & 0x80 != 0 {
                while *meta.get(p)? & 0x80 != 0 {
                    p += 1;
                }
                p += 1;
            }
        }
        let count = match inm & 0x60 {
            0x20 => {
                let c = u16::from_le_bytes([*meta.get(p)?, *meta.get(p + 1)?]);
                p += 2;
                Some(c)
            }
            0x00 => None,
            _ => return None, // var-count / custom: not produced here
        };
        fields.push((fname, inm & 0x1f, out, count));
    }
    Some((name, fields))
}

fn fmt_v6(b: &[u8]) -> String {
    let a: [u8; 16] = b.try_into().unwrap_or([0; 16]);
    std::net::Ipv6Addr::from(a).to_string()
}

/// The event name and properties of a backend-made TraceLogging record.
pub fn properties(rec: &EventRecord<'_>) -> Option<(String, Map<String, Value>)> {
    let meta = rec.ext_item(ext_type::EVENT_SCHEMA_TL)?;
    let (name, fields) = parse_metadata(meta.data)?;
    let d: &[u8] = &rec.payload;
    let mut p = 0usize;
    let mut m = Map::new();
    for (fname, it, out, count) in fields {
        let n = count.unwrap_or(1) as usize;
        let mut vals = Vec::with_capacity(n);
        for _ in 0..n {
            let take = |p: &mut usize, k: usize| -> Option<&[u8]> {
                let s = d.get(*p..*p + k)?;
                *p += k;
                Some(s)
            };
            let v = match it {
                3 => Value::from(take(&mut p, 1)?[0] as i8),
                4 => Value::from(take(&mut p, 1)?[0]),
                5 => Value::from(i16::from_le_bytes(take(&mut p, 2)?.try_into().ok()?)),
                6 => {
                    let b: [u8; 2] = take(&mut p, 2)?.try_into().ok()?;
                    if out == 7 {
                        Value::from(u16::from_be_bytes(b))
                    } else {
                        Value::from(u16::from_le_bytes(b))
                    }
                }
                7 => Value::from(i32::from_le_bytes(take(&mut p, 4)?.try_into().ok()?)),
                8 => {
                    let b: [u8; 4] = take(&mut p, 4)?.try_into().ok()?;
                    if out == 8 {
                        Value::from(std::net::Ipv4Addr::from(b).to_string())
                    } else {
                        Value::from(u32::from_le_bytes(b))
                    }
                }
                9 => Value::from(i64::from_le_bytes(take(&mut p, 8)?.try_into().ok()?)),
                10 => Value::from(u64::from_le_bytes(take(&mut p, 8)?.try_into().ok()?)),
                13 => Value::from(u32::from_le_bytes(take(&mut p, 4)?.try_into().ok()?) != 0),
                20 => Value::from(format!(
                    "{:#x}",
                    u32::from_le_bytes(take(&mut p, 4)?.try_into().ok()?)
                )),
                21 => Value::from(format!(
                    "{:#x}",
                    u64::from_le_bytes(take(&mut p, 8)?.try_into().ok()?)
                )),
                2 => {
                    let rest = d.get(p..)?;
                    let end = rest.iter().position(|&c| c == 0)?;
                    p += end + 1;
                    Value::from(String::from_utf8_lossy(&rest[..end]).into_owned())
                }
                14 | 25 => {
                    let len = u16::from_le_bytes(take(&mut p, 2)?.try_into().ok()?) as usize;
                    let b = take(&mut p, len)?;
                    if out == 9 && len == 16 {
                        Value::from(fmt_v6(b))
                    } else {
                        Value::from(b.iter().map(|x| format!("{x:02x}")).collect::<String>())
                    }
                }
                _ => return None,
            };
            vals.push(v);
        }
        m.insert(
            fname,
            if count.is_some() {
                Value::Array(vals)
            } else {
                vals.pop()?
            },
        );
    }
    Some((name, m))
}

/// A property as u64 (numbers and hex strings).
pub fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| n.as_i64().map(|x| x as u64)),
        Value::String(s) => s
            .strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok()),
        Value::Bool(b) => Some(*b as u64),
        _ => None,
    }
}
