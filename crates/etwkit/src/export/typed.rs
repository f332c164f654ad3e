//! The typed tables' columns: the properties of one event type, one column per property with its
//! real type ([`Kind`]), inferred from the first values seen ([`TypedColumns`]; the common columns
//! come from [`super::arrow::EventColumns`]). A value that does not fit its column is written as
//! null and counted ([`TypedColumns::unfit`]). The properties come as tapes ([`super::tape`]) or
//! as values.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, BinaryBuilder, BooleanBuilder, Float32Builder, Float64Builder, Int64Builder,
    ListBuilder, StringBuilder, TimestampMillisecondBuilder, TimestampNanosecondBuilder,
    UInt16Builder, UInt32Builder, UInt64Builder,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef, TimeUnit};

use super::arrow::{column_names, filetime_to_unix_ns, Columns, EventColumns, Row, HEX_PAIRS};
use super::tape::{
    elements, field_name, field_value, fields, is_empty_array, pointer_elements, read_fields, Item,
    TapeWriter,
};
use crate::decode::{DecodedEvent, Value};
use crate::EventRecord;

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

    fn builder(&self) -> Box<dyn ArrayBuilder> {
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
    fn builder_like(&self, d: &dyn Array) -> Box<dyn ArrayBuilder> {
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

fn down<T: 'static>(b: &mut dyn ArrayBuilder) -> &mut T {
    b.as_any_mut()
        .downcast_mut::<T>()
        .expect("the builder made for this kind")
}

/// SYSTEMTIME (year, month, day-of-week, day, hour, minute, second, ms) as ms since 1970.
fn systemtime_ms(t: &[u16; 8]) -> Option<i64> {
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
fn push_hex(out: &mut String, v: u64) {
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
fn str_of(v: &Value, out: &mut String) -> bool {
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
fn scalar_text(v: &Value) -> bool {
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
fn append(kind: &Kind, b: &mut dyn ArrayBuilder, v: Option<&Value>, s: &mut String) -> bool {
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
fn fits(kind: &Kind, v: &Value) -> bool {
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

fn append_null(kind: &Kind, b: &mut dyn ArrayBuilder) {
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
fn valid_at(bits: Option<&[u8]>, i: usize) -> bool {
    bits.is_none_or(|b| b[i / 8] >> (i % 8) & 1 == 1)
}

fn copy_primitive<T: arrow_array::ArrowPrimitiveType>(b: &mut dyn ArrayBuilder, i: usize) {
    let b = down::<arrow_array::builder::PrimitiveBuilder<T>>(b);
    if valid_at(b.validity_slice(), i) {
        let v = b.values_slice()[i];
        b.append_value(v);
    } else {
        b.append_null();
    }
}

/// Element `i`'s bytes into `scratch`, or a null appended (false) when it is null.
fn copy_bytes<T: arrow_array::types::ByteArrayType<Offset = i32>>(
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
struct CopyScratch {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

/// Appends a copy of element `i` of `b` (a builder of `kind`) to it: a row's value repeated.
fn copy_elem(kind: &Kind, b: &mut dyn ArrayBuilder, i: usize, scratch: &mut CopyScratch) {
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
fn takes_unnamed(k: &Kind) -> bool {
    matches!(
        k,
        Kind::Bool | Kind::I64 | Kind::U64 | Kind::U16 | Kind::U32
    )
}

/// The kind an item of a tape asks for (as [`Kind::of`] its value).
fn kind_of_item(i: &Item<'_>) -> Option<Kind> {
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
fn str_of_item(i: &Item<'_>, out: &mut String) -> bool {
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
fn text_hash(i: &Item<'_>, scratch: &mut String) -> Option<u64> {
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
struct Scratch {
    text: String,
    /// Direct-mapped: slot by a hash of the pointer; allocated on the first pointer.
    hex: Vec<(u64, String)>,
}

const HEX_SLOTS: usize = 1024;

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
fn append_item(
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
fn fits_item(kind: &Kind, v: &Item<'_>) -> bool {
    match v {
        Item::Null => true,
        Item::Array(_) | Item::Struct(_) => fits(kind, &v.to_value()),
        _ => match kind_of_item(v) {
            Some(k) if &k == kind => true,
            _ => fits(kind, &v.to_value()),
        },
    }
}

/// Rows whose values decide the property columns' types; later rows go straight into the columns.
pub const INFER_ROWS: usize = 4096;

/// One property column of a typed table.
struct PropColumn {
    /// The property's name in the events.
    property: Arc<str>,
    /// The column's name (the property's, unless that names a common column: then `prop_` + it).
    column: String,
    kind: Kind,
    builder: Box<dyn ArrayBuilder>,
    /// Text whose values are mostly distinct (addresses, paths): a dictionary would not pay.
    distinct_text: bool,
}

/// A field of a tape: where its name and value are ([`tape::read_fields`]).
type Field3 = (u32, u16, u32);

/// Rows of one event type: the common columns ([`Columns::TYPED`]) plus one typed column per
/// property. The property columns are fixed after [`INFER_ROWS`] rows or when the first batch is
/// built, from the values seen by then (the first non-null value of each property decides its
/// [`Kind`]; a property that was always null is a string column).
///
/// The properties come as tapes ([`super::tape`]): rows that wait for the column types keep
/// theirs, later rows go from the tape straight into the builders.
pub struct TypedColumns {
    common: EventColumns,
    /// Tapes of the rows that wait for the column types, one after the other.
    pending: Vec<u8>,
    /// Where each waiting row's tape ends in `pending`.
    pending_ends: Vec<usize>,
    columns: Option<Vec<PropColumn>>,
    by_name: HashMap<Arc<str>, usize>,
    schema: Option<SchemaRef>,
    text: Scratch,
    /// Scratch: the fields of the tape at hand, a tape made from values.
    fields: Vec<Field3>,
    tape: TapeWriter,
    /// Values written as null because they did not fit their column (or named a property first
    /// seen after the columns were fixed).
    pub unfit: u64,
    /// The last row's tape while rows of this type repeat their predecessor's properties (a
    /// .NET trace's ClrStackWalk events: 96% do): such a row copies the last row's values
    /// instead of reading its tape. Empty when the last row's was not kept.
    last: Vec<u8>,
    /// Values the last row added to `unfit`.
    last_unfit: u64,
    repeats: crate::decode::view::MemoGate,
    copy: CopyScratch,
    /// The batch's rows by their tape (rows of an event type repeat earlier ones, not only the
    /// one before: a row whose tape an earlier row of the batch had copies that row's values).
    earlier: EarlierRows,
}

/// Rows of the batch being built, found by their tapes: tape hash → (row, where its tape is kept
/// in `tapes`, its length, the values it added to `unfit`).
#[derive(Default)]
struct EarlierRows {
    rows: crate::schema::registry::FastMap<u64, (u32, u32, u32, u32)>,
    tapes: Vec<u8>,
    gate: crate::decode::view::MemoGate,
}

/// Tape bytes [`EarlierRows`] keeps per batch at most.
const EARLIER_TAPE_BYTES: usize = 1 << 20;

impl EarlierRows {
    fn hash(tape: &[u8]) -> u64 {
        use std::hash::Hasher;
        let mut h = crate::schema::registry::FastHasher::default();
        h.write(tape);
        h.finish()
    }

    /// The earlier row with this tape, and the values it added to `unfit`.
    fn find(&self, hash: u64, tape: &[u8]) -> Option<(usize, u64)> {
        let &(row, at, len, unfit) = self.rows.get(&hash)?;
        let kept = &self.tapes[at as usize..(at + len) as usize];
        (kept == tape).then_some((row as usize, unfit as u64))
    }

    fn add(&mut self, hash: u64, tape: &[u8], row: usize, unfit: u64) {
        if self.tapes.len() + tape.len() > EARLIER_TAPE_BYTES {
            return;
        }
        let at = self.tapes.len() as u32;
        self.tapes.extend_from_slice(tape);
        self.rows
            .insert(hash, (row as u32, at, tape.len() as u32, unfit as u32));
    }

    fn clear(&mut self) {
        self.rows.clear();
        self.tapes.clear();
    }
}

impl Default for TypedColumns {
    fn default() -> Self {
        Self::new()
    }
}

impl TypedColumns {
    pub fn new() -> TypedColumns {
        TypedColumns {
            // Most event types are rare: start small; batches after the first are sized as
            // the one before.
            common: EventColumns::with_capacity(Columns::TYPED, 64),
            pending: Vec::new(),
            pending_ends: Vec::new(),
            columns: None,
            by_name: HashMap::new(),
            schema: None,
            text: Scratch::default(),
            fields: Vec::new(),
            tape: TapeWriter::new(),
            unfit: 0,
            last: Vec::new(),
            last_unfit: 0,
            repeats: Default::default(),
            copy: CopyScratch::default(),
            earlier: EarlierRows::default(),
        }
    }

    /// Rows pushed since the last batch.
    pub fn rows(&self) -> usize {
        self.common.rows()
    }

    /// Appends one record; takes its properties.
    pub fn push(&mut self, file: &str, record: u64, e: &EventRecord<'_>, d: &mut DecodedEvent) {
        self.common.push(file, record, e, d);
        let props = std::mem::take(&mut d.properties);
        let mut tape = std::mem::take(&mut self.tape);
        tape.clear();
        props.visit(&mut tape);
        self.push_tape(tape.tape());
        self.tape = tape;
    }

    /// Appends one record given as its common fields and its properties' tape.
    pub fn push_row(&mut self, file: &str, record: u64, r: &Row<'_>, tape: &[u8]) {
        self.common.push_row(file, record, r, b"");
        self.push_tape(tape);
    }

    fn push_tape(&mut self, tape: &[u8]) {
        match &self.columns {
            None => {
                self.pending.extend_from_slice(tape);
                self.pending_ends.push(self.pending.len());
                if self.pending_ends.len() >= INFER_ROWS {
                    self.fix_columns();
                }
            }
            Some(_) => {
                // The row before, then the batch's earlier rows: a row whose tape one of them had
                // copies its values.
                let adjacent = self.repeats.open();
                if adjacent {
                    // `last` is the previous row's tape and the builders hold that row (`rows`
                    // counts this one's common columns: the batch has one before it).
                    let repeat =
                        self.common.rows() >= 2 && !self.last.is_empty() && self.last == tape;
                    self.repeats.note(repeat);
                    if repeat {
                        return self.copy_last();
                    }
                    self.last.clear();
                    self.last.extend_from_slice(tape);
                } else {
                    // The rows go by unremembered: the next comparison must not use `last`.
                    self.last.clear();
                }
                let hash = self.earlier.gate.open().then(|| EarlierRows::hash(tape));
                if let Some(h) = hash {
                    let found = self.earlier.find(h, tape);
                    self.earlier.gate.note(found.is_some());
                    if let Some((row, unfit)) = found {
                        self.copy_row(row);
                        self.unfit += unfit;
                        self.last_unfit = unfit;
                        return;
                    }
                }
                let before = self.unfit;
                let row = self.batch_rows();
                self.append_props(tape);
                self.last_unfit = self.unfit - before;
                if let Some(h) = hash {
                    self.earlier.add(h, tape, row, self.last_unfit);
                }
            }
        }
    }

    /// Rows the property columns hold (the batch's rows before the one being pushed).
    fn batch_rows(&self) -> usize {
        self.columns
            .as_ref()
            .and_then(|c| c.first())
            .map_or(0, |c| c.builder.len())
    }

    /// Appends a copy of row `row`'s values (a row whose tape repeats that row's).
    fn copy_row(&mut self, row: usize) {
        let TypedColumns { columns, copy, .. } = self;
        for c in columns.as_mut().expect("columns fixed") {
            copy_elem(&c.kind, c.builder.as_mut(), row, copy);
        }
    }

    fn append_props(&mut self, tape: &[u8]) {
        let cols = self.columns.as_mut().expect("columns fixed");
        // Records of one event type list their properties in the same order as the columns
        // (both follow the layout): go along both while the names agree, in one pass of the tape.
        let mut it = fields(tape);
        let mut i = 0;
        while i < cols.len() {
            match it.next() {
                Some((name, v)) if name == cols[i].property.as_bytes() => {
                    let c = &mut cols[i];
                    if !append_item(&c.kind, c.builder.as_mut(), Some(v), &mut self.text) {
                        self.unfit += 1;
                    }
                    i += 1;
                }
                _ => return self.append_rest(tape, i),
            }
        }
        if it.next().is_some() {
            self.append_rest(tape, i);
        }
    }

    /// [`TypedColumns::append_props`] from column `from` on, the first `from` columns having taken
    /// the first `from` properties.
    fn append_rest(&mut self, tape: &[u8], from: usize) {
        let TypedColumns {
            columns,
            fields,
            text,
            by_name,
            unfit,
            ..
        } = self;
        let cols = columns.as_mut().expect("columns fixed");
        fields.clear();
        // A tape that does not read (never written so) counts as no properties.
        let _ = read_fields(tape, fields);
        let mut seen = from;
        // Try the next unmatched property before searching.
        let mut next = from;
        for c in cols[from..].iter_mut() {
            let f = match fields.get(next) {
                Some(&f) if field_name(tape, f) == c.property.as_bytes() => {
                    next += 1;
                    Some(f)
                }
                _ => fields
                    .iter()
                    .find(|&&f| field_name(tape, f) == c.property.as_bytes())
                    .copied(),
            };
            let v = f.map(|f| field_value(tape, f));
            if v.is_some() {
                seen += 1;
            }
            if !append_item(&c.kind, c.builder.as_mut(), v, text) {
                *unfit += 1;
            }
        }
        // Properties this table has no column for.
        if seen < fields.len() {
            *unfit += fields
                .iter()
                .filter(|&&f| {
                    let name = std::str::from_utf8(field_name(tape, f)).unwrap_or("");
                    !by_name.contains_key(name)
                })
                .count() as u64;
        }
    }

    fn fix_columns(&mut self) {
        let reserved = column_names(Columns::TYPED);
        // (property, column name, kind once a value showed it, whether only empty arrays came).
        let mut found: Vec<(Arc<str>, String, Option<Kind>, bool)> = Vec::new();
        let mut taken: std::collections::HashSet<String> =
            reserved.iter().map(|s| s.to_ascii_lowercase()).collect();
        let pending = std::mem::take(&mut self.pending);
        let ends = std::mem::take(&mut self.pending_ends);
        let tapes = || {
            let (pending, ends) = (&pending, &ends);
            (0..ends.len()).map(move |i| &pending[if i == 0 { 0 } else { ends[i - 1] }..ends[i]])
        };
        let mut fields = std::mem::take(&mut self.fields);
        let mut before: Option<&[u8]> = None;
        for tape in tapes() {
            // A row repeating the one before tells nothing new.
            if before == Some(tape) {
                continue;
            }
            before = Some(tape);
            fields.clear();
            let _ = read_fields(tape, &mut fields);
            for (k, &f) in fields.iter().enumerate() {
                let raw = field_name(tape, f);
                let v = field_value(tape, f);
                let empty_array = matches!(v, Item::Array(span) if is_empty_array(span));
                // Usually the k-th property is the k-th found (same layout); else look it up.
                let known = match found.get(k) {
                    Some(x) if x.0.as_bytes() == raw => Some(k),
                    _ => self
                        .by_name
                        .get(std::str::from_utf8(raw).unwrap_or(""))
                        .copied(),
                };
                if let Some(i) = known {
                    match &found[i].2 {
                        None => {
                            found[i].2 = kind_of_item(&v);
                            found[i].3 |= empty_array;
                        }
                        // A value map names some values and not others (flags with unknown
                        // bits, enums with unlisted values): the column is text, as `dump`
                        // shows them, whichever came first.
                        Some(k) if matches!(v, Item::Mapped(..)) && takes_unnamed(k) => {
                            found[i].2 = Some(Kind::Str);
                        }
                        _ => {}
                    }
                    continue;
                }
                // Column names are compared as SQL engines do (case-insensitively).
                let name = std::str::from_utf8(raw).unwrap_or("");
                let mut column = name.to_string();
                while !taken.insert(column.to_ascii_lowercase()) {
                    column = format!("prop_{column}");
                }
                let property: Arc<str> = Arc::from(name);
                self.by_name.insert(property.clone(), found.len());
                found.push((property, column, kind_of_item(&v), empty_array));
            }
        }
        let mut cols: Vec<PropColumn> = found
            .into_iter()
            .map(|(property, column, kind, empty_array)| {
                // Only nulls so far: a string column; only empty arrays: a list of strings.
                let kind = kind.unwrap_or(if empty_array {
                    Kind::List(Box::new(Kind::Str))
                } else {
                    Kind::Str
                });
                PropColumn {
                    property,
                    column,
                    builder: kind.builder(),
                    kind,
                    distinct_text: false,
                }
            })
            .collect();
        // Distinct texts of each string column counted by their hashes (a collision only
        // undercounts), all columns in one pass of the rows.
        let text_cols: Vec<usize> = (0..cols.len())
            .filter(|&i| cols[i].kind == Kind::Str)
            .collect();
        if !text_cols.is_empty() {
            let mut seen = vec![std::collections::HashSet::new(); text_cols.len()];
            let mut values = vec![0usize; text_cols.len()];
            // The columns the row before had a text in (a repeated row counts the same ones).
            let mut counted: Vec<usize> = Vec::new();
            let mut before: Option<&[u8]> = None;
            for tape in tapes() {
                if before == Some(tape) {
                    for &j in &counted {
                        values[j] += 1;
                    }
                    continue;
                }
                before = Some(tape);
                counted.clear();
                fields.clear();
                let _ = read_fields(tape, &mut fields);
                for (j, &i) in text_cols.iter().enumerate() {
                    let name = cols[i].property.as_bytes();
                    let Some(&f) = fields.iter().find(|&&f| field_name(tape, f) == name) else {
                        continue;
                    };
                    if let Some(h) = text_hash(&field_value(tape, f), &mut self.text.text) {
                        values[j] += 1;
                        seen[j].insert(h);
                        counted.push(j);
                    }
                }
            }
            for (j, &i) in text_cols.iter().enumerate() {
                cols[i].distinct_text = values[j] >= 64 && seen[j].len() * 2 > values[j];
            }
        }
        self.fields = fields;
        let mut fields: Vec<Field> = Vec::new();
        // The common columns' fields come from an empty batch of them.
        let common = EventColumns::new(Columns::TYPED)
            .finish()
            .expect("empty common columns");
        fields.extend(common.schema().fields().iter().map(|f| f.as_ref().clone()));
        fields.extend(
            cols.iter()
                .map(|c| Field::new(c.column.clone(), c.kind.data_type(), true)),
        );
        self.schema = Some(Arc::new(Schema::new(fields)));
        self.columns = Some(cols);
        // The waiting rows into the columns; a row repeating the one before copies its values
        // (as `push_tape` does), and the last one is where later rows compare.
        let mut before: Option<&[u8]> = None;
        for tape in tapes() {
            if before == Some(tape) {
                self.copy_last();
                continue;
            }
            before = Some(tape);
            let unfit = self.unfit;
            self.append_props(tape);
            self.last_unfit = self.unfit - unfit;
        }
        self.last.clear();
        self.last.extend_from_slice(before.unwrap_or_default());
    }

    /// Appends a copy of the last row's values (a row whose tape repeats the last one's).
    fn copy_last(&mut self) {
        if let Some(last) = self.batch_rows().checked_sub(1) {
            self.copy_row(last);
        }
        self.unfit += self.last_unfit;
    }

    /// The property columns whose text values were mostly distinct in the rows that fixed the
    /// columns (a Parquet dictionary would cost time and save nothing there).
    pub fn distinct_text_columns(&self) -> Vec<String> {
        self.columns
            .iter()
            .flatten()
            .filter(|c| c.distinct_text)
            .map(|c| c.column.clone())
            .collect()
    }

    /// The property columns that are lists of text (pointers of stacks, above all).
    pub fn text_list_columns(&self) -> Vec<String> {
        self.columns
            .iter()
            .flatten()
            .filter(|c| matches!(&c.kind, Kind::List(k) if **k == Kind::Str))
            .map(|c| c.column.clone())
            .collect()
    }

    /// The property columns of numbers, booleans and times (the ones worth page statistics).
    pub fn scalar_columns(&self) -> Vec<String> {
        self.columns
            .iter()
            .flatten()
            .filter(|c| {
                !matches!(
                    c.kind,
                    Kind::Str | Kind::Json | Kind::Binary | Kind::List(_)
                )
            })
            .map(|c| c.column.clone())
            .collect()
    }

    /// Whether the property columns are fixed.
    pub fn columns_fixed(&self) -> bool {
        self.columns.is_some()
    }

    /// The table's schema (once the property columns are fixed; `None` before).
    pub fn schema(&self) -> Option<SchemaRef> {
        self.schema.clone()
    }

    /// The rows pushed so far as a batch (the first call fixes the property columns).
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        if self.columns.is_none() {
            self.fix_columns();
        }
        let mut arrays: Vec<ArrayRef> = self
            .common
            .finish_columns()
            .into_iter()
            .map(|(_, a)| a)
            .collect();
        // Rows of the next batch are not found among this one's.
        self.earlier.clear();
        for c in self.columns.as_mut().expect("columns fixed") {
            let a = c.builder.finish();
            // The next batch's builder sized as this one (no regrowing while it fills).
            if a.len() >= 1024 {
                c.builder = c.kind.builder_like(a.as_ref());
            }
            arrays.push(a);
        }
        RecordBatch::try_new(self.schema.clone().expect("schema fixed"), arrays)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guid::Guid;
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

    #[test]
    fn kinds_and_unfit_values() {
        let mut t = TypedColumns::new();
        let e = test_record();
        let mut row = |props: Vec<(&str, Value)>| {
            let mut d = DecodedEvent::default();
            for (n, v) in props {
                d.properties.push(n, v);
            }
            t.push("f", 0, &e, &mut d);
        };
        row(vec![
            ("a", Value::Null),
            ("pid", Value::U64(5)),
            ("list", Value::Array(vec![])),
        ]);
        row(vec![
            ("a", Value::I64(-3)),
            ("pid", Value::String("x".into())),
            ("list", Value::Array(vec![Value::U64(1), Value::Hex(2)])),
        ]);
        let b = t.finish().unwrap();
        let names: Vec<_> = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert!(names.ends_with(&["a".into(), "prop_pid".into(), "list".into()]));
        assert_eq!(b.column(b.num_columns() - 3).data_type(), &DataType::Int64);
        assert_eq!(b.column(b.num_columns() - 2).data_type(), &DataType::UInt64);
        // "x" does not fit the uint64 column.
        assert_eq!(t.unfit, 1);
        assert_eq!(b.column(b.num_columns() - 2).null_count(), 1);
        assert_eq!(b.column(0).len(), 2);
    }

    #[test]
    fn rows_repeating_while_the_columns_wait_are_copied_with_their_unfit_values() {
        // Runs of equal rows before and after the columns are fixed (at INFER_ROWS rows), with a
        // text that does not fit the number column: every row keeps its own values and each
        // repeat counts its unfit value again.
        let mut t = TypedColumns::new();
        let e = test_record();
        let value = |i: usize| match (i / 3) % 4 {
            0 => Value::U64(7),
            1 => Value::String("seven".into()),
            2 => Value::U64(i as u64),
            _ => Value::Null,
        };
        let n = INFER_ROWS + 50;
        for i in 0..n {
            let mut d = DecodedEvent::default();
            d.properties.push("n", value(i));
            d.properties.push("s", Value::String(format!("r{}", i / 3)));
            t.push("f", 0, &e, &mut d);
        }
        let b = t.finish().unwrap();
        assert_eq!(b.num_rows(), n);
        let unfit = check_rows(&b, 0, value, |i| format!("r{}", i / 3));
        assert_eq!(t.unfit, unfit);
    }

    /// Checks the rows of `b` (rows `from..` of what was pushed) against the number column's
    /// `value(i)` and the text column's `text(i)`; returns how many values did not fit.
    fn check_rows(
        b: &RecordBatch,
        from: usize,
        value: impl Fn(usize) -> Value,
        text: impl Fn(usize) -> String,
    ) -> u64 {
        let nums = b.column(b.num_columns() - 2);
        let nums = nums
            .as_any()
            .downcast_ref::<arrow_array::UInt64Array>()
            .unwrap();
        let mut unfit = 0;
        for (k, got) in texts(b).iter().enumerate() {
            let i = from + k;
            let want = match value(i) {
                Value::U64(v) => Some(v),
                Value::String(_) => {
                    unfit += 1;
                    None
                }
                _ => None,
            };
            assert_eq!(nums.is_valid(k).then(|| nums.value(k)), want, "row {i}");
            assert_eq!(got.as_deref(), Some(text(i).as_str()), "row {i}");
        }
        unfit
    }

    #[test]
    fn rows_repeating_earlier_rows_of_the_batch_are_copied_with_their_unfit_values() {
        // Five tapes in turn (never the one before), past the rows that fix the columns and
        // over a batch boundary: each row keeps its own values, each copy counts its unfit one.
        let mut t = TypedColumns::new();
        let e = test_record();
        let value = |i: usize| match i % 5 {
            0 => Value::U64(7),
            1 => Value::String("seven".into()),
            2 => Value::U64(11),
            3 => Value::Null,
            _ => Value::U64(13),
        };
        let push = |t: &mut TypedColumns, i: usize| {
            let mut d = DecodedEvent::default();
            d.properties.push("n", value(i));
            d.properties.push("s", Value::String(format!("t{}", i % 5)));
            t.push("f", 0, &e, &mut d);
        };
        let first = INFER_ROWS + 100;
        for i in 0..first {
            push(&mut t, i);
        }
        let mut batches = vec![(0, t.finish().unwrap())];
        for i in first..first + 50 {
            push(&mut t, i);
        }
        batches.push((first, t.finish().unwrap()));
        let unfit: u64 = batches
            .iter()
            .map(|(from, b)| check_rows(b, *from, value, |i| format!("t{}", i % 5)))
            .sum();
        assert_eq!(batches[1].1.num_rows(), 50);
        assert_eq!(t.unfit, unfit);
    }

    fn test_record() -> EventRecord<'static> {
        EventRecord {
            header_type: crate::HeaderType::EventHeader64,
            flags: 0,
            provider: Guid::ZERO,
            descriptor: Default::default(),
            hook_id: None,
            pid: 1,
            tid: 2,
            cpu: 0,
            timestamp: FILETIME_UNIX_EPOCH + 10,
            raw_timestamp: 0,
            kernel_time: 0,
            user_time: 0,
            activity_id: Guid::ZERO,
            pointer_size: 8,
            payload: Default::default(),
            ext: Default::default(),
        }
    }

    /// Text of the last column's rows.
    fn texts(b: &RecordBatch) -> Vec<Option<String>> {
        let c = b.column(b.num_columns() - 1);
        let c = c
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .unwrap();
        c.iter().map(|v| v.map(str::to_string)).collect()
    }

    #[test]
    fn value_maps_naming_some_values_make_text_columns_of_what_dump_shows() {
        // IrpFlags-like: bits without names come as hex, named ones as their names; an enum's
        // unlisted value as a number. Whichever comes first, the column is text and nothing is
        // null.
        for first_named in [false, true] {
            let (e, mut t) = (test_record(), TypedColumns::new());
            let mut vals = vec![
                Value::Hex(0x60000),
                Value::Mapped {
                    value: 0x43,
                    name: "Nocache, Paging".into(),
                },
                Value::U64(0),
                Value::Bool(true),
            ];
            if first_named {
                vals.swap(0, 1);
            }
            for v in vals {
                let mut d = DecodedEvent::default();
                d.properties.push("Flags", v);
                t.push("f", 0, &e, &mut d);
            }
            let b = t.finish().unwrap();
            let mut want = vec![
                Some("0x60000".to_string()),
                Some("Nocache, Paging".into()),
                Some("0".into()),
                Some("true".into()),
            ];
            if first_named {
                want.swap(0, 1);
            }
            assert_eq!(texts(&b), want, "first named: {first_named}");
            assert_eq!(t.unfit, 0);
        }
    }

    #[test]
    fn a_name_met_after_the_column_became_a_number_keeps_its_number() {
        let (e, mut t) = (test_record(), TypedColumns::new());
        let mut push = |v: Value| {
            let mut d = DecodedEvent::default();
            d.properties.push("Flags", v);
            t.push("f", 0, &e, &mut d);
        };
        for i in 0..INFER_ROWS as u64 {
            push(Value::U64(i));
        }
        push(Value::Mapped {
            value: 7,
            name: "Seven".into(),
        });
        let b = t.finish().unwrap();
        let c = b.column(b.num_columns() - 1);
        let c = c
            .as_any()
            .downcast_ref::<arrow_array::UInt64Array>()
            .unwrap();
        assert_eq!(c.len(), INFER_ROWS + 1);
        assert_eq!(c.value(INFER_ROWS), 7);
        assert_eq!(c.null_count(), 0);
        assert_eq!(t.unfit, 0);
    }
}
