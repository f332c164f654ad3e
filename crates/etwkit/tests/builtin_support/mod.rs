//! Test-side layout walker for the built-in schema tests: where each property of an [`EventSchema`]
//! sits in a payload, by TDH in-type size rules and the record's pointer size. It does not render
//! values; it proves the tables lay fields out where the facts say (and is independent of the decoder).
#![allow(dead_code)]

use std::collections::HashMap;

use etwkit::schema::{Count, EventSchema, Length, Property, PropertyKind};

/// One top-level property: name, offset, byte length (arrays: all elements).
#[derive(Clone, Debug)]
pub struct Placed {
    pub name: String,
    pub offset: usize,
    pub len: usize,
}

fn uint(b: &[u8]) -> u64 {
    let mut v = [0u8; 8];
    v[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
    u64::from_le_bytes(v)
}

fn one(
    p: &Property,
    in_type: u16,
    payload: &[u8],
    off: usize,
    ptr: usize,
    len: Option<usize>,
) -> Result<usize, String> {
    let rest = payload.len().saturating_sub(off);
    let need = |n: usize| {
        if n <= rest {
            Ok(n)
        } else {
            Err(format!("{} needs {n} bytes at {off}, {rest} left", p.name))
        }
    };
    match in_type {
        3 | 4 => need(1),
        5 | 6 => need(2),
        7 | 8 | 11 | 13 | 20 => need(4),
        9 | 10 | 12 | 17 | 21 => need(8),
        15 | 18 => need(16),
        16 | 308 => need(ptr),
        14 => need(len.ok_or_else(|| format!("{}: binary without length", p.name))?),
        1 => match len {
            Some(chars) => need(2 * chars),
            None => {
                let mut i = off;
                while i + 1 < payload.len() {
                    if payload[i] == 0 && payload[i + 1] == 0 {
                        return Ok(i + 2 - off);
                    }
                    i += 2;
                }
                Err(format!("{}: unterminated UTF-16 string at {off}", p.name))
            }
        },
        2 => match len {
            Some(n) => need(n),
            None => payload[off.min(payload.len())..]
                .iter()
                .position(|&b| b == 0)
                .map(|i| i + 1)
                .ok_or_else(|| format!("{}: unterminated ANSI string at {off}", p.name)),
        },
        310 => {
            // Kernel encoding: a lone zero ULONG when there is no SID, else TOKEN_USER (2 pointer-size
            // words) + SID. syzygy's re-emitted events write TOKEN_USER with a null PSID, so a zero first
            // TOKEN_USER (2 words of zeros) followed by a well-formed SID header (revision 1, <= 15
            // sub-authorities) is read as TOKEN_USER + SID; a real no-SID record has the image name's
            // text there. The decoder reads it the same way.
            need(4)?;
            let sid_at = off + 2 * ptr;
            let sid_follows = sid_at + 8 <= payload.len()
                && payload[off..sid_at].iter().all(|&b| b == 0)
                && payload[sid_at] == 1
                && payload[sid_at + 1] <= 15
                && sid_at + 8 + 4 * payload[sid_at + 1] as usize <= payload.len();
            if uint(&payload[off..off + 4]) == 0 && !sid_follows {
                return Ok(4);
            }
            need(2 * ptr + 8)?;
            let n = payload[off + 2 * ptr + 1] as usize;
            need(2 * ptr + 8 + 4 * n)
        }
        // etwkit's LZNT1-compressed text: the rest of the payload (decode_compressed_xml.rs checks
        // what it inflates to).
        0x7f01 | 0x7f02 => Ok(rest),
        t => Err(format!(
            "{}: in-type {t} not handled by the test walker",
            p.name
        )),
    }
}

/// Lays out `props` over `payload` from offset `start`; returns the placed properties and the end.
pub fn layout_from(
    props: &[Property],
    payload: &[u8],
    start: usize,
    ptr: u8,
) -> Result<(Vec<Placed>, usize), String> {
    let ptr = ptr as usize;
    let mut off = start;
    let mut placed: Vec<Placed> = Vec::new();
    let mut ints: HashMap<usize, u64> = HashMap::new();
    for (i, p) in props.iter().enumerate() {
        let count = match p.count {
            Count::One => 1,
            Count::Fixed(n) => n as usize,
            Count::FromProperty(j) => *ints
                .get(&j)
                .ok_or_else(|| format!("{}: count property {j} is not an integer", p.name))?
                as usize,
            Count::Prefixed => {
                return Err(format!("{}: prefixed count in a built-in table", p.name))
            }
            // Whole pointer-size frames to the end of the payload (StackWalk).
            Count::ToEnd => payload.len().saturating_sub(off) / ptr,
            // A last field later builds append (Thread v3's ThreadName): there or not at all.
            Count::IfRoom if off < payload.len() => 1,
            Count::IfRoom => continue,
        };
        let len = match p.length {
            Length::Natural => None,
            Length::Fixed(n) => Some(n as usize),
            Length::FromProperty(j) => Some(
                *ints
                    .get(&j)
                    .ok_or_else(|| format!("{}: length property {j} missing", p.name))?
                    as usize,
            ),
        };
        let begin = off;
        for _ in 0..count {
            off = match &p.kind {
                PropertyKind::Scalar { in_type, .. } => {
                    off + one(p, *in_type, payload, off, ptr, len)?
                }
                PropertyKind::Struct(members) => layout_from(members, payload, off, ptr as u8)?.1,
            };
        }
        if let PropertyKind::Scalar {
            in_type: 4 | 6 | 8 | 10,
            ..
        } = p.kind
        {
            if count == 1 {
                ints.insert(i, uint(&payload[begin..off]));
            }
        }
        placed.push(Placed {
            name: p.name.clone(),
            offset: begin,
            len: off - begin,
        });
    }
    Ok((placed, off))
}

/// Lays out a whole payload; `Err` when a property runs past the end.
pub fn layout(
    schema: &EventSchema,
    payload: &[u8],
    ptr: u8,
) -> Result<(Vec<Placed>, usize), String> {
    layout_from(&schema.properties, payload, 0, ptr)
}

pub fn utf16_at(payload: &[u8], off: usize, len: usize) -> String {
    let u: Vec<u16> = payload[off..off + len]
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .take_while(|&c| c != 0)
        .collect();
    String::from_utf16_lossy(&u)
}

pub fn u32_at(payload: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(payload[off..off + 4].try_into().unwrap())
}
