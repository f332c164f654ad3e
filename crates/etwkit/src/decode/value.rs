//! Decoded values ([`Value`], [`Properties`]) and their serde rendering (see the module doc of
//! [`crate::decode`]; the JSON text writer is the sinks', driven by [`Properties::visit`]).

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use serde::ser::{SerializeMap, SerializeSeq};

use crate::guid::Guid;

/// One decoded value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
    String(String),
    Guid(Guid),
    Binary(Vec<u8>),
    Array(Vec<Value>),
    Struct(Properties),
    /// A hex-typed integer.
    Hex(u64),
    /// A pointer, SIZE_T or code pointer (already widened from the record's pointer size).
    Pointer(u64),
    Ipv4(Ipv4Addr),
    Ipv6(Ipv6Addr),
    /// A port, already converted from network byte order.
    Port(u16),
    SocketAddress(SocketAddr),
    Win32Error(u32),
    NtStatus(u32),
    HResult(u32),
    /// FILETIME (100 ns ticks since 1601, UTC).
    FileTime(i64),
    /// SYSTEMTIME: year, month, day-of-week, day, hour, minute, second, milliseconds.
    SystemTime([u16; 8]),
    Sid(String),
    /// An integer with a valueMap/bitMap; `name` is the rendering.
    Mapped {
        value: u64,
        name: String,
    },
}

impl Value {
    /// The value as an unsigned integer, for integer-like variants.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U64(v) | Value::Hex(v) | Value::Pointer(v) => Some(v),
            Value::I64(v) => u64::try_from(v).ok(),
            Value::Port(p) => Some(p as u64),
            Value::Win32Error(v) | Value::NtStatus(v) | Value::HResult(v) => Some(v as u64),
            Value::Mapped { value, .. } => Some(value),
            Value::Bool(b) => Some(b as u64),
            Value::FileTime(t) => Some(t as u64),
            _ => None,
        }
    }
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) | Value::Sid(s) => Some(s),
            Value::Mapped { name, .. } => Some(name),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }
    /// The JSON rendering (see the module doc).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

pub(crate) fn hex_bytes(b: &[u8]) -> String {
    let mut s = String::with_capacity(2 + 2 * b.len());
    s.push_str("0x");
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

impl serde::Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Null => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::I64(v) => s.serialize_i64(*v),
            Value::U64(v) => s.serialize_u64(*v),
            Value::F32(v) => s.serialize_f32(*v),
            Value::F64(v) => s.serialize_f64(*v),
            Value::String(v) | Value::Sid(v) => s.serialize_str(v),
            Value::Mapped { name, .. } => s.serialize_str(name),
            Value::Guid(g) => s.collect_str(g),
            Value::Binary(b) => s.serialize_str(&hex_bytes(b)),
            Value::Array(a) => {
                let mut q = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    q.serialize_element(v)?;
                }
                q.end()
            }
            Value::Struct(p) => p.serialize(s),
            Value::Hex(v) | Value::Pointer(v) => s.serialize_str(hex_u64(&mut [0; 18], *v)),
            Value::Ipv4(a) => s.collect_str(a),
            Value::Ipv6(a) => s.collect_str(a),
            Value::Port(p) => s.serialize_u16(*p),
            Value::SocketAddress(a) => s.collect_str(a),
            Value::Win32Error(v) => s.serialize_u32(*v),
            Value::NtStatus(v) | Value::HResult(v) => s.collect_str(&format_args!("0x{v:08x}")),
            Value::FileTime(t) => s.serialize_str(&crate::time::format_rfc3339(*t)),
            Value::SystemTime(t) => s.collect_str(&format_args!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}",
                t[0], t[1], t[3], t[4], t[5], t[6], t[7]
            )),
        }
    }
}

/// `0x` and the lowercase hex digits of `v` (no leading zeros), written into `buf` — the
/// `format_args!` path cost ~5% of `dump --format json` on pointer-heavy CLR stack walks.
pub(crate) fn hex_u64(buf: &mut [u8; 18], v: u64) -> &str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let n = (16 - (v.leading_zeros() as usize / 4)).max(1);
    buf[0] = b'0';
    buf[1] = b'x';
    for i in 0..n {
        buf[1 + n - i] = DIGITS[((v >> (4 * i)) & 0xF) as usize];
    }
    std::str::from_utf8(&buf[..2 + n]).unwrap_or("0x?")
}

/// Named values in schema order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Properties(pub Vec<(Arc<str>, Value)>);

impl Properties {
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.iter().find(|(n, _)| &**n == name).map(|(_, v)| v)
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(n, v)| (&**n, v))
    }
    pub fn push(&mut self, name: impl Into<Arc<str>>, v: Value) {
        self.0.push((name.into(), v));
    }
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

impl serde::Serialize for Properties {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(&**k, v)?;
        }
        m.end()
    }
}

/// Decoding stopped: a value ran past the payload or the schema was unusable for it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("property {property:?} at payload offset {offset}: {reason}")]
pub struct DecodeError {
    /// Path of the property (`Outer.Inner[2]`).
    pub property: String,
    pub offset: usize,
    pub reason: String,
    /// Everything decoded before the failure.
    pub partial: Properties,
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_u64_matches_format() {
        for v in [0u64, 1, 0xf, 0x10, 0x7fe_ee02_3068, u64::MAX, 1 << 63] {
            assert_eq!(super::hex_u64(&mut [0; 18], v), format!("0x{v:x}"));
        }
    }
}
