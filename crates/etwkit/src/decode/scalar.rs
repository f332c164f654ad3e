//! One scalar of a payload: how many bytes its in-type takes ([`span`]) and what value it has
//! ([`build_value`]) with its out-type and map applied.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::guid::Guid;
use crate::schema::types::{in_type as it, out_type as ot};
use crate::schema::{InType, OutType};

use super::bitmaps::{map_name, MapRef};
use super::plan::Cursor;
use super::Value;

pub(crate) fn utf16(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() / 2);
    utf16_into(b, &mut s);
    s
}

/// Appends the lossy decoding of UTF-16LE `b` to `s`.
pub(crate) fn utf16_into(b: &[u8], s: &mut String) {
    s.reserve(b.len() / 2);
    // ASCII (most names and paths) in blocks of 64 units, copied and checked in one pass; from
    // the first block holding another unit on, a real decoder.
    let mut rest = b;
    while rest.len() >= 2 {
        let n = (rest.len() / 2).min(64);
        let mut buf = [0u8; 64];
        let mut other = 0u64;
        // Four units at a time (their low bytes packed), then the last few.
        let whole = n / 4 * 4;
        for (d, c) in buf[..whole].chunks_exact_mut(4).zip(rest.chunks_exact(8)) {
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            other |= w & 0xff80_ff80_ff80_ff80;
            let p =
                (w & 0xff) | (w >> 8 & 0xff00) | (w >> 16 & 0xff_0000) | (w >> 24 & 0xff00_0000);
            d.copy_from_slice(&(p as u32).to_le_bytes());
        }
        for (d, c) in buf[whole..n]
            .iter_mut()
            .zip(rest[2 * whole..].chunks_exact(2))
        {
            *d = c[0];
            other |= (c[1] | (c[0] & 0x80)) as u64;
        }
        if other != 0 {
            break;
        }
        s.push_str(std::str::from_utf8(&buf[..n]).unwrap_or_default());
        rest = &rest[2 * n..];
    }
    let units = rest
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]));
    s.extend(char::decode_utf16(units).map(|r| r.unwrap_or('\u{FFFD}')));
}

pub(crate) fn ansi(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_string(),
        Err(_) => b.iter().map(|&c| c as char).collect(),
    }
}

pub(crate) fn trim_nuls_utf16(mut b: &[u8]) -> &[u8] {
    while b.len() >= 2 && b[b.len() - 2] == 0 && b[b.len() - 1] == 0 {
        b = &b[..b.len() - 2];
    }
    b
}

pub(crate) fn trim_nuls(mut b: &[u8]) -> &[u8] {
    while let [rest @ .., 0] = b {
        b = rest;
    }
    b
}

/// A NUL-terminated UTF-16 string; without a terminator, the rest of the payload.
pub(crate) fn cstr16<'a>(cur: &mut Cursor<'a>) -> &'a [u8] {
    let rest = &cur.d[cur.pos.min(cur.d.len())..];
    let mut i = 0;
    // Four units at a time while none is 0 (SWAR: a zero 16-bit lane sets its top bit).
    while i + 8 <= rest.len() {
        let w = u64::from_le_bytes(rest[i..i + 8].try_into().expect("8 bytes"));
        if w.wrapping_sub(0x0001_0001_0001_0001) & !w & 0x8000_8000_8000_8000 != 0 {
            break;
        }
        i += 8;
    }
    while i + 1 < rest.len() {
        if rest[i] == 0 && rest[i + 1] == 0 {
            cur.pos += i + 2;
            return &rest[..i];
        }
        i += 2;
    }
    cur.pos = cur.d.len();
    cur.unterminated = true;
    rest
}

pub(crate) fn cstr8<'a>(cur: &mut Cursor<'a>) -> &'a [u8] {
    let rest = &cur.d[cur.pos.min(cur.d.len())..];
    match rest.iter().position(|&c| c == 0) {
        Some(i) => {
            cur.pos += i + 1;
            &rest[..i]
        }
        None => {
            cur.pos = cur.d.len();
            cur.unterminated = true;
            rest
        }
    }
}

pub(crate) fn sid_string(b: &[u8]) -> String {
    // revision, sub-authority count, 6-byte big-endian authority, n × u32 sub-authorities.
    let auth = b[2..8].iter().fold(0u64, |a, &x| (a << 8) | x as u64);
    let mut s = format!("S-{}-{}", b[0], auth);
    for c in b[8..].chunks_exact(4) {
        let _ = write!(s, "-{}", u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    }
    s
}

/// At the cursor: a TOKEN_USER of zeros (two pointers) followed by a well-formed SID.
fn null_token_user_then_sid(cur: &Cursor<'_>) -> bool {
    let tu = 2 * cur.ptr as usize;
    let Some(head) = cur.d.get(cur.pos..cur.pos + tu + 8) else {
        return false;
    };
    let n = head[tu + 1] as usize;
    head[..tu].iter().all(|&b| b == 0)
        && head[tu] == 1
        && n <= 15
        && cur.pos + tu + 8 + 4 * n <= cur.d.len()
}

pub(crate) fn sid_span<'a>(cur: &mut Cursor<'a>) -> Result<&'a [u8], String> {
    let head = cur
        .d
        .get(cur.pos..cur.pos + 8)
        .ok_or_else(|| "SID header needs 8 bytes".to_string())?;
    let n = head[1] as usize;
    cur.take(8 + 4 * n)
        .map_err(|r| format!("SID with {n} sub-authorities: {r}"))
}

pub(crate) fn socket_address(b: &[u8]) -> Option<SocketAddr> {
    let fam = u16::from_le_bytes(b.get(..2)?.try_into().ok()?);
    let port = u16::from_be_bytes(b.get(2..4)?.try_into().ok()?);
    match fam {
        2 => {
            let a: [u8; 4] = b.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(a)), port))
        }
        23 => {
            let a: [u8; 16] = b.get(8..24)?.try_into().ok()?;
            Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(a)), port))
        }
        _ => None,
    }
}

pub(crate) fn binary_value(b: &[u8], out: OutType) -> Value {
    match out {
        ot::IPV6 if b.len() == 16 => {
            Value::Ipv6(Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap_or_default()))
        }
        ot::IPV4 if b.len() == 4 => Value::Ipv4(Ipv4Addr::new(b[0], b[1], b[2], b[3])),
        ot::SOCKETADDRESS => socket_address(b)
            .map(Value::SocketAddress)
            .unwrap_or_else(|| Value::Binary(b.to_vec())),
        ot::STRING | ot::UTF8 => Value::String(ansi(trim_nuls(b))),
        _ => Value::Binary(b.to_vec()),
    }
}

/// An integer with its out-type applied. `signed` holds the sign-extended value for signed in-types.
pub(crate) fn int_value(
    u: u64,
    signed: Option<i64>,
    width: u8,
    out: OutType,
    map: Option<MapRef<'_>>,
) -> Value {
    if let Some(m) = map {
        if let Some(name) = map_name(m, u) {
            return Value::Mapped { value: u, name };
        }
    }
    match out {
        ot::HEXINT8 | ot::HEXINT16 | ot::HEXINT32 | ot::HEXINT64 => Value::Hex(u),
        ot::BOOLEAN => Value::Bool(u != 0),
        ot::PORT if width == 2 => Value::Port((u as u16).swap_bytes()),
        ot::IPV4 if width == 4 => Value::Ipv4(Ipv4Addr::from((u as u32).to_le_bytes())),
        ot::WIN32ERROR | ot::ERRORCODE if width == 4 => Value::Win32Error(u as u32),
        ot::NTSTATUS if width == 4 => Value::NtStatus(u as u32),
        ot::HRESULT if width == 4 => Value::HResult(u as u32),
        ot::DATETIME | ot::DATETIME_UTC | ot::CULTURE_INSENSITIVE_DATETIME if width == 8 => {
            Value::FileTime(u as i64)
        }
        ot::CODE_POINTER => Value::Pointer(u),
        ot::STRING if width <= 2 => {
            let c = if width == 1 {
                Some(u as u8 as char)
            } else {
                char::from_u32(u as u32)
            };
            Value::String(c.map(String::from).unwrap_or_default())
        }
        ot::BYTE | ot::SHORT | ot::INT | ot::LONG => {
            let s = match width {
                1 => u as u8 as i8 as i64,
                2 => u as u16 as i16 as i64,
                4 => u as u32 as i32 as i64,
                _ => u as i64,
            };
            Value::I64(s)
        }
        ot::UNSIGNEDBYTE | ot::UNSIGNEDSHORT | ot::UNSIGNEDINT | ot::UNSIGNEDLONG => Value::U64(u),
        _ => match signed {
            Some(s) => Value::I64(s),
            None => Value::U64(u),
        },
    }
}

/// The bytes of one scalar — its content, without count prefix or terminator — with the cursor
/// moved past it. The one place that knows how many bytes each in-type takes: decoding and the
/// allocation-free measuring walk both go through it.
pub(crate) fn span<'a>(
    in_t: InType,
    out: OutType,
    cur: &mut Cursor<'a>,
    len: Option<u64>,
) -> Result<&'a [u8], String> {
    let len_bytes = |n: u64, unit: u64| -> Result<usize, String> {
        n.checked_mul(unit)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| format!("length {n} is too large"))
    };
    Ok(match in_t {
        it::NULL => &[],
        it::UNICODESTRING => match len {
            None => cstr16(cur),
            Some(n) => cur.take(len_bytes(n, 2)?)?,
        },
        it::ANSISTRING => match len {
            None => cstr8(cur),
            Some(n) => cur.take(len_bytes(n, 1)?)?,
        },
        it::INT8 | it::UINT8 | it::ANSICHAR => cur.take(1)?,
        it::INT16 | it::UINT16 | it::UNICODECHAR => cur.take(2)?,
        it::INT32 | it::UINT32 | it::FLOAT | it::BOOLEAN | it::HEXINT32 => cur.take(4)?,
        it::INT64 | it::UINT64 | it::DOUBLE | it::FILETIME | it::HEXINT64 => cur.take(8)?,
        it::BINARY => match len {
            Some(n) => cur.take(len_bytes(n, 1)?)?,
            None if out == ot::IPV6 => cur.take(16)?,
            None => cur.rest(),
        },
        it::GUID | it::SYSTEMTIME => cur.take(16)?,
        it::POINTER | it::SIZET => cur.take(if cur.ptr == 4 { 4 } else { 8 })?,
        it::SID => sid_span(cur)?,
        it::MANIFEST_COUNTEDSTRING
        | it::COUNTEDSTRING
        | it::MANIFEST_COUNTEDANSISTRING
        | it::COUNTEDANSISTRING
        | it::MANIFEST_COUNTEDBINARY => {
            let n = cur.u16()? as usize;
            cur.take(n)?
        }
        it::REVERSEDCOUNTEDSTRING | it::REVERSEDCOUNTEDANSISTRING => {
            let n = cur.u16()?.swap_bytes() as usize;
            cur.take(n)?
        }
        it::NONNULLTERMINATEDSTRING => match len {
            Some(n) => cur.take(len_bytes(n, 2)?)?,
            None => cur.rest(),
        },
        it::NONNULLTERMINATEDANSISTRING => match len {
            Some(n) => cur.take(len_bytes(n, 1)?)?,
            None => cur.rest(),
        },
        it::HEXDUMP => {
            let n = cur.u32()? as usize;
            cur.take(n)?
        }
        it::WBEMSID => {
            // TOKEN_USER: {PSID Sid, DWORD Attributes} padded to two pointers, then the SID itself.
            // A first u32 of 0 means "no SID" and takes 4 bytes (an empty span), unless the whole
            // TOKEN_USER is zero and a well-formed SID follows it (revision 1, at most 15
            // sub-authorities, all in the payload): events re-emitted from kernel payloads (Sawbuck's
            // Process events) keep the SID but not its pointer. A record without a SID has its next
            // field's text there (the image name), never 2 pointers of zeros then a SID header.
            let first = cur
                .d
                .get(cur.pos..cur.pos + 4)
                .ok_or_else(|| "WBEMSID needs at least 4 bytes".to_string())?;
            if first == [0, 0, 0, 0] && !null_token_user_then_sid(cur) {
                cur.take(4)?;
                &[]
            } else {
                cur.take(2 * cur.ptr as usize)
                    .map_err(|r| format!("WBEMSID TOKEN_USER header: {r}"))?;
                sid_span(cur)?
            }
        }
        it::LZNT1_UNICODESTRING | it::LZNT1_ANSISTRING => {
            let b = cur.rest();
            inflate(b, len)?;
            b
        }
        other => return Err(format!("in-type {other} is not supported")),
    })
}

/// Output an LZNT1 in-type may inflate to when its layout does not state the size.
const MAX_INFLATED: usize = 16 << 20;

/// The text of an LZNT1 in-type ([`it::LZNT1_UNICODESTRING`]), inflated: exactly `len` bytes when
/// the layout states the size.
fn inflate(b: &[u8], len: Option<u64>) -> Result<Vec<u8>, String> {
    let limit = match len {
        Some(n) => usize::try_from(n).map_err(|_| format!("length {n} is too large"))?,
        None => MAX_INFLATED,
    };
    let text = super::lznt1::decompress(b, limit).map_err(|e| e.to_string())?;
    match len {
        Some(n) if text.len() as u64 != n => Err(format!(
            "LZNT1 data inflates to {} bytes, not the {n} stated",
            text.len()
        )),
        _ => Ok(text),
    }
}

/// Little-endian unsigned integer of up to 8 bytes.
#[inline]
pub(crate) fn le(b: &[u8]) -> u64 {
    match *b {
        [a] => a as u64,
        [a, b] => u16::from_le_bytes([a, b]) as u64,
        [a, b, c, d] => u32::from_le_bytes([a, b, c, d]) as u64,
        [a, b, c, d, e, f, g, h] => u64::from_le_bytes([a, b, c, d, e, f, g, h]),
        _ => {
            let mut w = [0u8; 8];
            let n = b.len().min(8);
            w[..n].copy_from_slice(&b[..n]);
            u64::from_le_bytes(w)
        }
    }
}

/// The value of a scalar from its [`span`]; `len` says whether the length was given (fixed or from
/// a property) or natural (terminated).
pub(crate) fn build_value(
    in_t: InType,
    out: OutType,
    map: Option<MapRef<'_>>,
    b: &[u8],
    len: Option<u64>,
) -> Value {
    match in_t {
        it::NULL => Value::Null,
        it::UNICODESTRING => match len {
            None => Value::String(utf16(b)),
            Some(_) => Value::String(utf16(trim_nuls_utf16(b))),
        },
        it::ANSISTRING => Value::String(ansi(trim_nuls(b))),
        it::INT8 => {
            let v = b[0];
            int_value(v as u64, Some(v as i8 as i64), 1, out, map)
        }
        it::UINT8 => int_value(b[0] as u64, None, 1, out, map),
        it::INT16 => {
            let v = le(b) as u16;
            int_value(v as u64, Some(v as i16 as i64), 2, out, map)
        }
        it::UINT16 => int_value(le(b), None, 2, out, map),
        it::INT32 => {
            let v = le(b) as u32;
            int_value(v as u64, Some(v as i32 as i64), 4, out, map)
        }
        it::UINT32 => int_value(le(b), None, 4, out, map),
        it::INT64 => {
            let v = le(b);
            int_value(v, Some(v as i64), 8, out, map)
        }
        it::UINT64 => int_value(le(b), None, 8, out, map),
        it::FLOAT => Value::F32(f32::from_bits(le(b) as u32)),
        it::DOUBLE => Value::F64(f64::from_bits(le(b))),
        it::BOOLEAN => {
            let v = le(b);
            match map.and_then(|m| map_name(m, v)) {
                Some(name) => Value::Mapped { value: v, name },
                None => Value::Bool(v != 0),
            }
        }
        it::BINARY | it::MANIFEST_COUNTEDBINARY => binary_value(b, out),
        it::GUID => Value::Guid(Guid::from_le_bytes(b).unwrap_or_default()),
        it::POINTER => {
            let v = le(b);
            match out {
                ot::UNSIGNEDLONG | ot::UNSIGNEDINT | ot::LONG => Value::U64(v),
                _ => Value::Pointer(v),
            }
        }
        it::SIZET => {
            let v = le(b);
            match out {
                ot::HEXINT64 | ot::HEXINT32 => Value::Hex(v),
                _ => Value::U64(v),
            }
        }
        it::FILETIME => Value::FileTime(le(b) as i64),
        it::SYSTEMTIME => {
            let mut t = [0u16; 8];
            for (i, c) in b.chunks_exact(2).enumerate() {
                t[i] = u16::from_le_bytes([c[0], c[1]]);
            }
            Value::SystemTime(t)
        }
        it::SID => Value::Sid(sid_string(b)),
        it::HEXINT32 | it::HEXINT64 => {
            let v = le(b);
            match map.and_then(|m| map_name(m, v)) {
                Some(name) => Value::Mapped { value: v, name },
                None => Value::Hex(v),
            }
        }
        it::MANIFEST_COUNTEDSTRING | it::COUNTEDSTRING | it::REVERSEDCOUNTEDSTRING => {
            Value::String(utf16(trim_nuls_utf16(b)))
        }
        it::MANIFEST_COUNTEDANSISTRING | it::COUNTEDANSISTRING | it::REVERSEDCOUNTEDANSISTRING => {
            Value::String(ansi(trim_nuls(b)))
        }
        it::NONNULLTERMINATEDSTRING | it::UNICODECHAR => Value::String(utf16(b)),
        it::NONNULLTERMINATEDANSISTRING => Value::String(ansi(b)),
        it::ANSICHAR => Value::String((b[0] as char).to_string()),
        it::HEXDUMP => Value::Binary(b.to_vec()),
        it::WBEMSID if b.is_empty() => Value::Null,
        it::WBEMSID => Value::Sid(sid_string(b)),
        // (`span` checked that it inflates.)
        it::LZNT1_UNICODESTRING => match inflate(b, len) {
            Ok(t) => Value::String(utf16(trim_nuls_utf16(&t))),
            Err(_) => Value::Null,
        },
        it::LZNT1_ANSISTRING => match inflate(b, len) {
            Ok(t) => Value::String(ansi(trim_nuls(&t))),
            Err(_) => Value::Null,
        },
        _ => Value::Null,
    }
}

#[cfg(test)]
mod utf16_tests {
    #[test]
    fn utf16_matches_lossy_decoding() {
        let long: String = (0..200).map(|i| (b'a' + (i % 26) as u8) as char).collect();
        for text in [
            String::new(),
            "x".to_string(),
            long.clone(),
            format!("{}é{}", &long[..63], &long[..70]),
            format!("{}😀", &long[..64]),
            format!("{}\u{80}", &long[..128]),
            format!("{}\u{7f}\u{0}", &long[..3]),
        ] {
            let mut units: Vec<u16> = text.encode_utf16().collect();
            for extra in [vec![], vec![0xd800u16], vec![0xdc00, 0x41]] {
                units.extend(&extra);
                let mut bytes: Vec<u8> = units.iter().flat_map(|u| u.to_le_bytes()).collect();
                let expect = String::from_utf16_lossy(&units);
                assert_eq!(super::utf16(&bytes), expect);
                bytes.push(0x42); // a trailing odd byte is not part of the text
                let mut s = "pre".to_string();
                super::utf16_into(&bytes, &mut s);
                assert_eq!(s, format!("pre{expect}"));
            }
        }
    }
}
