//! A property column's type ([`Kind`]) and how one value goes into a column of its kind: from a
//! decoded [`Value`] or from a tape item ([`super::super::tape`]), checked to fit (else null), or
//! copied from an earlier row of the same column.

use std::fmt::Write as _;
use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, BinaryBuilder, BooleanBuilder, Float32Builder, Float64Builder, Int64Builder,
    ListBuilder, StringBuilder, TimestampMillisecondBuilder, TimestampNanosecondBuilder,
    UInt16Builder, UInt32Builder, UInt64Builder,
};
use arrow_array::Array;
use arrow_schema::{DataType, Field, TimeUnit};

use super::super::arrow::{filetime_to_unix_ns, HEX_PAIRS};
use super::super::tape::{elements, pointer_elements, Item};
use crate::decode::Value;

/// The Arrow type of a property column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Bool,
    I64,
    U64,
    /// Ports.
    U16,
    /// Win32 errors, NTSTATUS, HRESULT.
    U32,
    F32,
    F64,
    /// Strings, SIDs, value-map names, GUIDs, IP and socket addresses, pointers (`0x…`).
    Str,
    Binary,
    /// FILETIME: `timestamp[ns, UTC]`.
    FileTime,
    /// SYSTEMTIME (no time zone): `timestamp[ms]`.
    SystemTime,
    /// Structures and arrays of structures or arrays: their JSON text.
    Json,
    /// Arrays of scalars.
    List(Box<Kind>),
}

impl Kind {
    /// The kind a value asks for; `None` for null and for an empty array (nothing to go by).
    pub fn of(v: &Value) -> Option<Kind> {
        Some(match v {
            Value::Null => return None,
            Value::Bool(_) => Kind::Bool,
            Value::I64(_) => Kind::I64,
            Value::U64(_) | Value::Hex(_) => Kind::U64,
            Value::F32(_) => Kind::F32,
            Value::F64(_) => Kind::F64,
            Value::String(_)
            | Value::Sid(_)
            | Value::Mapped { .. }
            | Value::Guid(_)
            | Value::Ipv4(_)
            | Value::Ipv6(_)
            | Value::SocketAddress(_)
            | Value::Pointer(_) => Kind::Str,
            Value::Binary(_) => Kind::Binary,
            Value::Port(_) => Kind::U16,
            Value::Win32Error(_) | Value::NtStatus(_) | Value::HResult(_) => Kind::U32,
            Value::FileTime(_) => Kind::FileTime,
            Value::SystemTime(_) => Kind::SystemTime,
            Value::Struct(_) => Kind::Json,
            Value::Array(a) => {
                let inner = a.iter().find_map(Kind::of)?;
                match inner {
                    Kind::Json | Kind::List(_) => Kind::Json,
                    k => Kind::List(Box::new(k)),
                }
            }
        })
    }

    pub fn data_type(&self) -> DataType {
        match self {
            Kind::Bool => DataType::Boolean,
            Kind::I64 => DataType::Int64,
            Kind::U64 => DataType::UInt64,
            Kind::U16 => DataType::UInt16,
            Kind::U32 => DataType::UInt32,
            Kind::F32 => DataType::Float32,
            Kind::F64 => DataType::Float64,
            Kind::Str | Kind::Json => DataType::Utf8,
            Kind::Binary => DataType::Binary,
            Kind::FileTime => DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
            Kind::SystemTime => DataType::Timestamp(TimeUnit::Millisecond, None),
            Kind::List(k) => DataType::List(Arc::new(Field::new("item", k.data_type(), true))),
        }
    }

    pub(super) fn builder(&self) -> Box<dyn ArrayBuilder> {
        match self {
            Kind::Bool => Box::new(BooleanBuilder::new()),
            Kind::I64 => Box::new(Int64Builder::new()),
            Kind::U64 => Box::new(UInt64Builder::new()),
            Kind::U16 => Box::new(UInt16Builder::new()),
            Kind::U32 => Box::new(UInt32Builder::new()),
            Kind::F32 => Box::new(Float32Builder::new()),
            Kind::F64 => Box::new(Float64Builder::new()),
            Kind::Str | Kind::Json => Box::new(StringBuilder::new()),
            Kind::Binary => Box::new(BinaryBuilder::new()),
            Kind::FileTime => Box::new(TimestampNanosecondBuilder::new().with_timezone("UTC")),
            Kind::SystemTime => Box::new(TimestampMillisecondBuilder::new()),
            Kind::List(k) => Box::new(
                ListBuilder::new(k.builder()).with_field(Arc::new(Field::new(
                    "item",
                    k.data_type(),
                    true,
                ))),
            ),
        }
    }
}

impl Kind {
    /// A builder with room for as many values (and value bytes) as `d` holds.
    pub(super) fn builder_like(&self, d: &dyn Array) -> Box<dyn ArrayBuilder> {
        let n = d.len();
        let any = d.as_any();
        let bytes = || {
            any.downcast_ref::<arrow_array::StringArray>()
                .map(|a| a.value_data().len())
                .or_else(|| {
                    any.downcast_ref::<arrow_array::BinaryArray>()
                        .map(|a| a.value_data().len())
                })
                .unwrap_or(0)
        };
        match self {
            Kind::Bool => Box::new(BooleanBuilder::with_capacity(n)),
            Kind::I64 => Box::new(Int64Builder::with_capacity(n)),
            Kind::U64 => Box::new(UInt64Builder::with_capacity(n)),
            Kind::U16 => Box::new(UInt16Builder::with_capacity(n)),
            Kind::U32 => Box::new(UInt32Builder::with_capacity(n)),
            Kind::F32 => Box::new(Float32Builder::with_capacity(n)),
            Kind::F64 => Box::new(Float64Builder::with_capacity(n)),
            Kind::Str | Kind::Json => Box::new(StringBuilder::with_capacity(n, bytes())),
            Kind::Binary => Box::new(BinaryBuilder::with_capacity(n, bytes())),
            Kind::FileTime => {
                Box::new(TimestampNanosecondBuilder::with_capacity(n).with_timezone("UTC"))
            }
            Kind::SystemTime => Box::new(TimestampMillisecondBuilder::with_capacity(n)),
            Kind::List(k) => {
                let values = match any.downcast_ref::<arrow_array::ListArray>() {
                    Some(l) => k.builder_like(l.values().as_ref()),
                    None => k.builder(),
                };
                Box::new(
                    ListBuilder::with_capacity(values, n).with_field(Arc::new(Field::new(
                        "item",
                        k.data_type(),
                        true,
                    ))),
                )
            }
        }
    }
}

pub(super) fn down<T: 'static>(b: &mut dyn ArrayBuilder) -> &mut T {
    b.as_any_mut()
        .downcast_mut::<T>()
        .expect("the builder made for this kind")
}

/// SYSTEMTIME (year, month, day-of-week, day, hour, minute, second, ms) as ms since 1970.
pub(super) fn systemtime_ms(t: &[u16; 8]) -> Option<i64> {
    let (y, m, d) = (t[0] as i64, t[1] as i64, t[3] as i64);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || t[4] > 23 || t[5] > 59 || t[6] > 60 {
        return None;
    }
    // Days from civil (proleptic Gregorian), 1970-01-01 = 0.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + t[4] as i64) * 60 + t[5] as i64) * 60_000 + t[6] as i64 * 1000 + t[7] as i64)
}

/// `0x` and the lowercase hex digits of `v` without leading zeros (as `{:#x}`), two digits per
/// step (stack addresses are formatted by the million).
pub(super) fn push_hex(out: &mut String, v: u64) {
    let mut buf = [0u8; 18];
    let mut i = buf.len();
    let mut x = v;
    while x > 0xff {
        i -= 2;
        buf[i..i + 2].copy_from_slice(&HEX_PAIRS[(x & 0xff) as usize]);
        x >>= 8;
    }
    let last = HEX_PAIRS[x as usize];
    if x > 0xf {
        i -= 2;
        buf[i..i + 2].copy_from_slice(&last);
    } else {
        i -= 1;
        buf[i] = last[1];
    }
    i -= 2;
    buf[i..i + 2].copy_from_slice(b"0x");
    out.push_str(std::str::from_utf8(&buf[i..]).expect("hex digits"));
}

/// The text of a string-kind value (as `etwkit dump` renders it, without JSON quotes).
pub(super) fn str_of(v: &Value, out: &mut String) -> bool {
    out.clear();
    match v {
        Value::String(s) | Value::Sid(s) => out.push_str(s),
        Value::Mapped { name, .. } => out.push_str(name),
        Value::Guid(g) => {
            let _ = write!(out, "{g}");
        }
        Value::Ipv4(a) => {
            let _ = write!(out, "{a}");
        }
        Value::Ipv6(a) => {
            let _ = write!(out, "{a}");
        }
        Value::SocketAddress(a) => {
            let _ = write!(out, "{a}");
        }
        Value::Pointer(p) => push_hex(out, *p),
        v if scalar_text(v) => {
            // A text column's number (a value map's value without a name, or a property that is
            // text in other records): the JSON text `dump` shows, without its quotes.
            let mut json = Vec::with_capacity(24);
            v.write_json(&mut json);
            let t = String::from_utf8_lossy(&json);
            out.push_str(t.trim_matches('"'));
        }
        _ => return false,
    }
    true
}

/// Scalars a text column takes as their JSON text: integers (hex-typed too), booleans, status
/// codes and ports, whose JSON is plain digits, words or `"0x…"`.
pub(super) fn scalar_text(v: &Value) -> bool {
    matches!(
        v,
        Value::U64(_)
            | Value::I64(_)
            | Value::Hex(_)
            | Value::Bool(_)
            | Value::Port(_)
            | Value::Win32Error(_)
            | Value::NtStatus(_)
            | Value::HResult(_)
    )
}

/// Appends `v` (which may be null) to `b`, a builder of `kind`. Returns false when a non-null value
/// did not fit (a null was appended instead).
pub(super) fn append(
    kind: &Kind,
    b: &mut dyn ArrayBuilder,
    v: Option<&Value>,
    s: &mut String,
) -> bool {
    let v = match v {
        None | Some(Value::Null) => {
            append_null(kind, b);
            return true;
        }
        Some(v) => v,
    };
    let ok = match kind {
        Kind::Bool => match v {
            Value::Bool(x) => {
                down::<BooleanBuilder>(b).append_value(*x);
                true
            }
            _ => false,
        },
        Kind::I64 => match v {
            Value::I64(x) => {
                down::<Int64Builder>(b).append_value(*x);
                true
            }
            Value::U64(_)
            | Value::Hex(_)
            | Value::Port(_)
            | Value::Win32Error(_)
            | Value::NtStatus(_)
            | Value::HResult(_) => match v.as_u64().and_then(|x| i64::try_from(x).ok()) {
                Some(x) => {
                    down::<Int64Builder>(b).append_value(x);
                    true
                }
                None => false,
            },
            _ => false,
        },
        Kind::U64 => match v {
            // A value map's name met after the column became a number: its number.
            Value::Mapped { value, .. } => {
                down::<UInt64Builder>(b).append_value(*value);
                true
            }
            Value::U64(_)
            | Value::Hex(_)
            | Value::I64(_)
            | Value::Port(_)
            | Value::Win32Error(_)
            | Value::NtStatus(_)
            | Value::HResult(_) => match v.as_u64() {
                Some(x) => {
                    down::<UInt64Builder>(b).append_value(x);
                    true
                }
                None => false,
            },
            _ => false,
        },
        Kind::U16 => match v {
            Value::Port(x) => {
                down::<UInt16Builder>(b).append_value(*x);
                true
            }
            _ => false,
        },
        Kind::U32 => match v {
            Value::Win32Error(x) | Value::NtStatus(x) | Value::HResult(x) => {
                down::<UInt32Builder>(b).append_value(*x);
                true
            }
            _ => false,
        },
        Kind::F32 => match v {
            Value::F32(x) => {
                down::<Float32Builder>(b).append_value(*x);
                true
            }
            _ => false,
        },
        Kind::F64 => match v.as_f64() {
            Some(x) => {
                down::<Float64Builder>(b).append_value(x);
                true
            }
            None => false,
        },
        Kind::Str => {
            if str_of(v, s) {
                down::<StringBuilder>(b).append_value(&*s);
                true
            } else {
                false
            }
        }
        Kind::Json => {
            let mut json = Vec::with_capacity(64);
            v.write_json(&mut json);
            down::<StringBuilder>(b).append_value(String::from_utf8_lossy(&json));
            true
        }
        Kind::Binary => match v {
            Value::Binary(x) => {
                down::<BinaryBuilder>(b).append_value(x);
                true
            }
            _ => false,
        },
        Kind::FileTime => match v {
            Value::FileTime(t) => match filetime_to_unix_ns(*t) {
                Some(ns) => {
                    down::<TimestampNanosecondBuilder>(b).append_value(ns);
                    true
                }
                None => false,
            },
            _ => false,
        },
        Kind::SystemTime => match v {
            Value::SystemTime(t) => match systemtime_ms(t) {
                Some(ms) => {
                    down::<TimestampMillisecondBuilder>(b).append_value(ms);
                    true
                }
                None => false,
            },
            _ => false,
        },
        Kind::List(k) => match v {
            // All elements must fit, else the whole list is null.
            Value::Array(a) if a.iter().all(|x| fits(k, x)) => {
                let lb = down::<ListBuilder<Box<dyn ArrayBuilder>>>(b);
                for x in a {
                    append(k, lb.values().as_mut(), Some(x), s);
                }
                lb.append(true);
                true
            }
            _ => false,
        },
    };
    if !ok {
        append_null(kind, b);
    }
    ok
}

/// Whether `v` (an array element) fits `kind` without loss.
pub(super) fn fits(kind: &Kind, v: &Value) -> bool {
    match Kind::of(v) {
        None => matches!(v, Value::Null),
        Some(k) if &k == kind => true,
        Some(_) => match kind {
            Kind::I64 => v.as_i64().is_some() && !matches!(v, Value::Bool(_) | Value::FileTime(_)),
            Kind::U64 => {
                matches!(v, Value::Mapped { .. })
                    || (v.as_u64().is_some() && !matches!(v, Value::Bool(_) | Value::FileTime(_)))
            }
            Kind::F64 => matches!(v, Value::F32(_)),
            Kind::Str => scalar_text(v),
            Kind::Json => true,
            _ => false,
        },
    }
}

pub(super) fn append_null(kind: &Kind, b: &mut dyn ArrayBuilder) {
    match kind {
        Kind::Bool => down::<BooleanBuilder>(b).append_null(),
        Kind::I64 => down::<Int64Builder>(b).append_null(),
        Kind::U64 => down::<UInt64Builder>(b).append_null(),
        Kind::U16 => down::<UInt16Builder>(b).append_null(),
        Kind::U32 => down::<UInt32Builder>(b).append_null(),
        Kind::F32 => down::<Float32Builder>(b).append_null(),
        Kind::F64 => down::<Float64Builder>(b).append_null(),
        Kind::Str | Kind::Json => down::<StringBuilder>(b).append_null(),
        Kind::Binary => down::<BinaryBuilder>(b).append_null(),
        Kind::FileTime => down::<TimestampNanosecondBuilder>(b).append_null(),
        Kind::SystemTime => down::<TimestampMillisecondBuilder>(b).append_null(),
        Kind::List(_) => down::<ListBuilder<Box<dyn ArrayBuilder>>>(b).append(false),
    }
}

/// Whether bit `i` of a validity bitmap (none: all valid) is set.
pub(super) fn valid_at(bits: Option<&[u8]>, i: usize) -> bool {
    bits.is_none_or(|b| b[i / 8] >> (i % 8) & 1 == 1)
}

pub(super) fn copy_primitive<T: arrow_array::ArrowPrimitiveType>(
    b: &mut dyn ArrayBuilder,
    i: usize,
) {
    let b = down::<arrow_array::builder::PrimitiveBuilder<T>>(b);
    if valid_at(b.validity_slice(), i) {
        let v = b.values_slice()[i];
        b.append_value(v);
    } else {
        b.append_null();
    }
}

/// Element `i`'s bytes into `scratch`, or a null appended (false) when it is null.
pub(super) fn copy_bytes<T: arrow_array::types::ByteArrayType<Offset = i32>>(
    b: &mut dyn ArrayBuilder,
    i: usize,
    scratch: &mut Vec<u8>,
) -> bool {
    let b = down::<arrow_array::builder::GenericByteBuilder<T>>(b);
    if !valid_at(b.validity_slice(), i) {
        b.append_null();
        return false;
    }
    let o = b.offsets_slice();
    scratch.clear();
    scratch.extend_from_slice(&b.values_slice()[o[i] as usize..o[i + 1] as usize]);
    true
}

/// Scratch space of [`copy_elem`]: a value's bytes, a list's item ends.
#[derive(Default)]
pub(super) struct CopyScratch {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

/// Appends a copy of element `i` of `b` (a builder of `kind`) to it: a row's value repeated.
pub(super) fn copy_elem(
    kind: &Kind,
    b: &mut dyn ArrayBuilder,
    i: usize,
    scratch: &mut CopyScratch,
) {
    use arrow_array::types::*;
    match kind {
        Kind::Bool => {
            let b = down::<BooleanBuilder>(b);
            if valid_at(b.validity_slice(), i) {
                let v = valid_at(Some(b.values_slice()), i);
                b.append_value(v);
            } else {
                b.append_null();
            }
        }
        Kind::I64 => copy_primitive::<Int64Type>(b, i),
        Kind::U64 => copy_primitive::<UInt64Type>(b, i),
        Kind::U16 => copy_primitive::<UInt16Type>(b, i),
        Kind::U32 => copy_primitive::<UInt32Type>(b, i),
        Kind::F32 => copy_primitive::<Float32Type>(b, i),
        Kind::F64 => copy_primitive::<Float64Type>(b, i),
        Kind::FileTime => copy_primitive::<TimestampNanosecondType>(b, i),
        Kind::SystemTime => copy_primitive::<TimestampMillisecondType>(b, i),
        Kind::Str | Kind::Json => {
            if copy_bytes::<Utf8Type>(b, i, &mut scratch.bytes) {
                // Copied from a string the builder holds: valid UTF-8.
                let s = std::str::from_utf8(&scratch.bytes).expect("a string's bytes");
                down::<StringBuilder>(b).append_value(s);
            }
        }
        Kind::Binary => {
            if copy_bytes::<BinaryType>(b, i, &mut scratch.bytes) {
                down::<BinaryBuilder>(b).append_value(&scratch.bytes);
            }
        }
        Kind::List(k) => {
            let lb = down::<ListBuilder<Box<dyn ArrayBuilder>>>(b);
            if !valid_at(lb.validity_slice(), i) {
                lb.append(false);
                return;
            }
            let o = lb.offsets_slice();
            let (x, y) = (o[i] as usize, o[i + 1] as usize);
            if **k == Kind::Str {
                // Lists of text (stacks' frames): the items' bytes in one copy.
                let sb = down::<StringBuilder>(lb.values().as_mut());
                let (vo, vb) = (sb.offsets_slice(), sb.values_slice());
                if (x..y).all(|j| valid_at(sb.validity_slice(), j)) {
                    let base = vo[x] as usize;
                    let CopyScratch { bytes, ends } = scratch;
                    bytes.clear();
                    bytes.extend_from_slice(&vb[base..vo[y] as usize]);
                    ends.clear();
                    ends.extend((x..y).map(|j| vo[j + 1] as usize - base));
                    let text = std::str::from_utf8(bytes).expect("strings' bytes");
                    let mut from = 0;
                    for &e in ends.iter() {
                        sb.append_value(&text[from..e]);
                        from = e;
                    }
                    lb.append(true);
                    return;
                }
            }
            for j in x..y {
                copy_elem(k, lb.values().as_mut(), j, scratch);
            }
            lb.append(true);
        }
    }
}

/// The kinds a value map's unnamed values take (integers; booleans for a mapped BOOLEAN).
pub(super) fn takes_unnamed(k: &Kind) -> bool {
    matches!(
        k,
        Kind::Bool | Kind::I64 | Kind::U64 | Kind::U16 | Kind::U32
    )
}

/// The kind an item of a tape asks for (as [`Kind::of`] its value).
pub(super) fn kind_of_item(i: &Item<'_>) -> Option<Kind> {
    Some(match i {
        Item::Null => return None,
        Item::Bool(_) => Kind::Bool,
        Item::I64(_) => Kind::I64,
        Item::U64(_) | Item::Hex(_) => Kind::U64,
        Item::F32(_) => Kind::F32,
        Item::F64(_) => Kind::F64,
        Item::Str(_)
        | Item::Sid(_)
        | Item::Mapped(..)
        | Item::Guid(_)
        | Item::Ip(_)
        | Item::Socket(_)
        | Item::Pointer(_) => Kind::Str,
        Item::Binary(_) => Kind::Binary,
        Item::Port(_) => Kind::U16,
        Item::Win32(_) | Item::NtStatus(_) | Item::HResult(_) => Kind::U32,
        Item::FileTime(_) => Kind::FileTime,
        Item::SystemTime(_) => Kind::SystemTime,
        Item::Struct(_) => Kind::Json,
        Item::Array(_) => return Kind::of(&i.to_value()),
    })
}

/// As [`str_of`], for an item of a tape.
pub(super) fn str_of_item(i: &Item<'_>, out: &mut String) -> bool {
    out.clear();
    match i {
        Item::Str(s) | Item::Sid(s) | Item::Mapped(_, s) => out.push_str(s),
        Item::Guid(g) => {
            let _ = write!(out, "{g}");
        }
        Item::Ip(a) => {
            let _ = write!(out, "{a}");
        }
        Item::Socket(a) => {
            let _ = write!(out, "{a}");
        }
        Item::Pointer(p) => push_hex(out, *p),
        _ => return false,
    }
    true
}

/// A hash of the text of a string-kind item (`None` for other items): of the value itself where
/// its text is a function of it (pointers, GUIDs), without formatting it.
pub(super) fn text_hash(i: &Item<'_>, scratch: &mut String) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = crate::schema::registry::FastHasher::default();
    match i {
        Item::Str(s) | Item::Sid(s) | Item::Mapped(_, s) => s.hash(&mut h),
        Item::Pointer(p) => (1u8, *p).hash(&mut h),
        Item::Guid(g) => (2u8, g.to_le_bytes()).hash(&mut h),
        Item::Ip(_) | Item::Socket(_) => {
            str_of_item(i, scratch);
            scratch.as_str().hash(&mut h);
        }
        _ => return None,
    }
    Some(h.finish())
}

/// Scratch space of [`append_item`]: text, and the text of recent pointers (stack addresses
/// repeat: most are formatted once).
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) text: String,
    /// Direct-mapped: slot by a hash of the pointer; allocated on the first pointer.
    hex: Vec<(u64, String)>,
}

pub(super) const HEX_SLOTS: usize = 1024;

impl Scratch {
    /// `p` as `{:#x}` text.
    fn hex(&mut self, p: u64) -> &str {
        if self.hex.is_empty() {
            self.hex = vec![(0, String::new()); HEX_SLOTS];
        }
        let slot = (p.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % HEX_SLOTS;
        let (key, text) = &mut self.hex[slot];
        if *key != p || text.is_empty() {
            *key = p;
            text.clear();
            push_hex(text, p);
        }
        text
    }
}

/// As [`append`], for an item of a tape: the common pairs of kind and value straight into the
/// builder, the others through their [`Value`].
pub(super) fn append_item(
    kind: &Kind,
    b: &mut dyn ArrayBuilder,
    v: Option<Item<'_>>,
    s: &mut Scratch,
) -> bool {
    let v = match v {
        None | Some(Item::Null) => {
            append_null(kind, b);
            return true;
        }
        Some(v) => v,
    };
    match (kind, &v) {
        (Kind::U64, Item::U64(x) | Item::Hex(x)) => down::<UInt64Builder>(b).append_value(*x),
        (Kind::I64, Item::I64(x)) => down::<Int64Builder>(b).append_value(*x),
        (Kind::U32, Item::Win32(x) | Item::NtStatus(x) | Item::HResult(x)) => {
            down::<UInt32Builder>(b).append_value(*x)
        }
        (Kind::U16, Item::Port(x)) => down::<UInt16Builder>(b).append_value(*x),
        (Kind::Bool, Item::Bool(x)) => down::<BooleanBuilder>(b).append_value(*x),
        (Kind::F32, Item::F32(x)) => down::<Float32Builder>(b).append_value(*x),
        (Kind::F64, Item::F64(x)) => down::<Float64Builder>(b).append_value(*x),
        (Kind::F64, Item::F32(x)) => down::<Float64Builder>(b).append_value(*x as f64),
        (Kind::Binary, Item::Binary(x)) => down::<BinaryBuilder>(b).append_value(x),
        (Kind::Str, Item::Str(x) | Item::Sid(x) | Item::Mapped(_, x)) => {
            down::<StringBuilder>(b).append_value(x)
        }
        (Kind::Str, Item::Pointer(p)) => down::<StringBuilder>(b).append_value(s.hex(*p)),
        (Kind::Str, Item::Guid(_) | Item::Ip(_) | Item::Socket(_)) => {
            str_of_item(&v, &mut s.text);
            down::<StringBuilder>(b).append_value(&s.text)
        }
        (Kind::FileTime, Item::FileTime(t)) => match filetime_to_unix_ns(*t) {
            Some(ns) => down::<TimestampNanosecondBuilder>(b).append_value(ns),
            None => {
                append_null(kind, b);
                return false;
            }
        },
        (Kind::List(k), Item::Array(span)) => {
            // Pointers (stacks' frames, most of a trace's array elements): as text, straight
            // from the tape.
            if let Some(ptrs) = (**k == Kind::Str).then(|| pointer_elements(span)).flatten() {
                let lb = down::<ListBuilder<Box<dyn ArrayBuilder>>>(b);
                let sb = down::<StringBuilder>(lb.values().as_mut());
                for p in ptrs {
                    sb.append_value(s.hex(p));
                }
                lb.append(true);
                return true;
            }
            // All elements must fit, else the whole list is null.
            if !elements(span).all(|x| fits_item(k, &x)) {
                append_null(kind, b);
                return false;
            }
            let lb = down::<ListBuilder<Box<dyn ArrayBuilder>>>(b);
            for x in elements(span) {
                append_item(k, lb.values().as_mut(), Some(x), s);
            }
            lb.append(true);
        }
        _ => return append(kind, b, Some(&v.to_value()), &mut s.text),
    }
    true
}

/// As [`fits`], for an item of a tape.
pub(super) fn fits_item(kind: &Kind, v: &Item<'_>) -> bool {
    match v {
        Item::Null => true,
        Item::Array(_) | Item::Struct(_) => fits(kind, &v.to_value()),
        _ => match kind_of_item(v) {
            Some(k) if &k == kind => true,
            _ => fits(kind, &v.to_value()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::FILETIME_UNIX_EPOCH;

    #[test]
    fn pointer_text_as_format_hex() {
        for v in [0u64, 1, 0xf, 0x10, 0xdead_beef, u64::MAX, 1 << 63] {
            let mut s = String::new();
            push_hex(&mut s, v);
            assert_eq!(s, format!("{v:#x}"));
        }
    }

    #[test]
    fn copied_elements_equal_their_originals() {
        let kinds = [
            Kind::Bool,
            Kind::I64,
            Kind::U64,
            Kind::U16,
            Kind::U32,
            Kind::F32,
            Kind::F64,
            Kind::Str,
            Kind::Binary,
            Kind::FileTime,
            Kind::SystemTime,
            Kind::List(Box::new(Kind::Str)),
            Kind::List(Box::new(Kind::U64)),
        ];
        let values = |k: &Kind| -> Vec<Option<Value>> {
            match k {
                Kind::Bool => vec![Some(Value::Bool(true)), None, Some(Value::Bool(false))],
                Kind::I64 => vec![Some(Value::I64(-7)), None, Some(Value::I64(i64::MAX))],
                Kind::U64 => vec![Some(Value::U64(9)), None, Some(Value::U64(u64::MAX))],
                Kind::U16 => vec![Some(Value::Port(443)), None, Some(Value::Port(0))],
                Kind::U32 => vec![
                    Some(Value::Win32Error(5)),
                    None,
                    Some(Value::NtStatus(0xc000_0022)),
                ],
                Kind::F32 => vec![Some(Value::F32(1.5)), None, Some(Value::F32(-0.0))],
                Kind::F64 => vec![Some(Value::F64(1.5)), None, Some(Value::F64(-0.0))],
                Kind::Str => vec![
                    Some(Value::String("é1".into())),
                    None,
                    Some(Value::String("".into())),
                ],
                Kind::Binary => vec![
                    Some(Value::Binary(vec![0, 255])),
                    None,
                    Some(Value::Binary(vec![])),
                ],
                Kind::FileTime => vec![Some(Value::FileTime(FILETIME_UNIX_EPOCH + 10)), None],
                Kind::SystemTime => vec![
                    Some(Value::SystemTime([2021, 9, 4, 9, 14, 59, 36, 671])),
                    None,
                ],
                Kind::List(_) => vec![
                    Some(Value::Array(vec![
                        Value::Pointer(0x10),
                        Value::Pointer(0xfffe),
                    ])),
                    None,
                    Some(Value::Array(vec![])),
                    Some(Value::Array(vec![Value::Pointer(1)])),
                ],
                Kind::Json => unreachable!(),
            }
        };
        for k in &kinds {
            let vs = values(k);
            let k_items = match k {
                Kind::List(i) if **i == Kind::U64 => vs
                    .iter()
                    .map(|v| {
                        v.as_ref().map(|v| match v {
                            Value::Array(a) => Value::Array(
                                a.iter()
                                    .map(|p| match p {
                                        Value::Pointer(x) => Value::U64(*x),
                                        o => o.clone(),
                                    })
                                    .collect(),
                            ),
                            o => o.clone(),
                        })
                    })
                    .collect(),
                _ => vs,
            };
            let mut b = k.builder();
            let mut s = String::new();
            for v in &k_items {
                assert!(append(k, b.as_mut(), v.as_ref(), &mut s), "{k:?} {v:?}");
            }
            let n = k_items.len();
            let mut copy = CopyScratch::default();
            for i in 0..n {
                copy_elem(k, b.as_mut(), i, &mut copy);
            }
            let a = b.finish();
            assert_eq!(a.len(), 2 * n, "{k:?}");
            assert_eq!(a.slice(0, n).to_data(), a.slice(n, n).to_data(), "{k:?}");
            assert!(a.null_count() == 2, "{k:?}: {a:?}");
        }
    }

    #[test]
    fn systemtime_to_unix_ms() {
        // 2021-09-09 (Thursday) 14:59:36.671 = 1631199576671 ms.
        assert_eq!(
            systemtime_ms(&[2021, 9, 4, 9, 14, 59, 36, 671]),
            Some(1_631_199_576_671)
        );
        assert_eq!(systemtime_ms(&[1970, 1, 4, 1, 0, 0, 0, 0]), Some(0));
        assert_eq!(
            systemtime_ms(&[2000, 2, 2, 29, 0, 0, 0, 0]),
            Some(951_782_400_000)
        );
        assert_eq!(systemtime_ms(&[2000, 13, 0, 1, 0, 0, 0, 0]), None);
    }
}
