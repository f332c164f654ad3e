//! Payload + schema + pointer size → named values.
//!
//! [`decode_properties`] walks a payload against an [`EventSchema`]; [`Decoder`] adds the registry
//! lookup, per-schema plans cached by schema, names, STRING_ONLY and WPP records, and stacks.
//!
//! ```
//! use etwkit::decode::{Decoder, Value};
//! use etwkit::schema::Registry;
//! use etwkit::tlg::{event_record, InType, OutType, TlInstance, TlPayload, TlSchemaBuilder};
//!
//! // One decoder serves files and live sessions: here a record as a live session delivers it.
//! let schema = TlSchemaBuilder::new("Contoso-Net", "Connect")
//!     .field("Port", InType::U16, OutType::Port)
//!     .field("Status", InType::U32, OutType::Win32Error)
//!     .build()
//!     .unwrap();
//! let mut p = TlPayload::new();
//! p.push_u16(443u16.to_be()).push_u32(10061);
//! let rec = event_record(&schema, &TlInstance::default(), p.as_bytes());
//!
//! let d = Decoder::new(Registry::with_builtins()).decode(&rec);
//! assert_eq!(d.event_name.as_deref(), Some("Connect"));
//! assert_eq!(d.properties.get("Port"), Some(&Value::Port(443)));
//! assert_eq!(d.properties.get("Status"), Some(&Value::Win32Error(10061)));
//! let mut json = Vec::new();
//! d.properties.write_json(&mut json);
//! assert_eq!(String::from_utf8(json).unwrap(), r#"{"Port":443,"Status":10061}"#);
//! ```
//!
//! # JSON
//! [`Value`] and [`Properties`] implement `serde::Serialize`; properties keep schema order. The
//! rendering is fixed:
//! * Integers (8 to 64 bits, signed or not, PID/TID, ports, Win32 error codes) are JSON numbers,
//!   written exactly as serde_json writes `u64`/`i64` — all 64 bits, no rounding. A consumer that
//!   parses numbers into IEEE doubles (JavaScript) loses precision above 2^53; the hex renderings
//!   below avoid that for the values where it matters most.
//! * Hex-typed integers (HexInt8..64, TDH HEXINT32/64 in-types), pointers, SIZE_T and code pointers
//!   are strings `"0x…"` (lowercase, no padding). NTSTATUS and HRESULT are `"0x%08x"` strings.
//! * Floats are numbers (NaN/infinity as `null`); booleans `true`/`false`.
//! * GUIDs are lowercase `8-4-4-4-12` strings; binaries `"0x…"` hex strings (`"0x"` when empty).
//! * IPv4/IPv6 addresses, socket addresses (`1.2.3.4:80`, `[::1]:443`), SIDs (`S-1-5-18`) are strings.
//! * FILETIMEs are RFC 3339 UTC strings (100 ns precision); SYSTEMTIMEs `YYYY-MM-DDTHH:MM:SS.mmm`
//!   (no zone: the struct does not say which).
//! * valueMap/bitMap values are their names. Bitmaps list the set flags in ascending value order,
//!   unnamed bits appended as hex, the way TraceEvent shows them: for kernel classes, the .NET
//!   runtime and Kernel-File (which TraceEvent decodes with compiled parsers) as .NET prints a
//!   `[Flags]` enum —
//!   the largest entries covering unclaimed bits first, joined with `, ` (`"ReadWrite, Delete"`);
//!   for other providers' manifests every set flag, joined with `|`;
//!   a value with no name in its map stays a number.
//! * Arrays are JSON arrays; structs are objects.
//!
//! ANSI strings are read as UTF-8 when valid, otherwise as Latin-1.

pub mod paths;
pub mod stacks;
pub mod threads;

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, RwLock};

use serde::ser::{SerializeMap, SerializeSeq};

use crate::event::{flags, EventRecord, HeaderType, Stack};
use crate::guid::Guid;
use crate::schema::types::{in_type as it, out_type as ot};
use crate::schema::{
    Count, EventSchema, InType, Length, OutType, Property, PropertyKind, Registry, SchemaSource,
    ValueMap,
};

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

fn hex_bytes(b: &[u8]) -> String {
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
fn hex_u64(buf: &mut [u8; 18], v: u64) -> &str {
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

impl Value {
    /// Appends this value as JSON, exactly as its `serde::Serialize` rendering (checked by the tests),
    /// without going through a serializer: `dump` renders millions of them.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        match self {
            Value::Null => out.extend_from_slice(b"null"),
            Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Value::I64(v) => out.extend_from_slice(itoa::Buffer::new().format(*v).as_bytes()),
            Value::U64(v) => out.extend_from_slice(itoa::Buffer::new().format(*v).as_bytes()),
            Value::Port(v) => out.extend_from_slice(itoa::Buffer::new().format(*v).as_bytes()),
            Value::Win32Error(v) => {
                out.extend_from_slice(itoa::Buffer::new().format(*v).as_bytes())
            }
            Value::F32(_) | Value::F64(_) => {
                let _ = serde_json::to_writer(&mut *out, self);
            }
            Value::String(v) | Value::Sid(v) => crate::sink::json::escape(out, v),
            Value::Mapped { name, .. } => crate::sink::json::escape(out, name),
            Value::Guid(g) => {
                out.push(b'"');
                crate::sink::json::push_guid(out, g);
                out.push(b'"');
            }
            Value::Binary(b) => {
                out.extend_from_slice(b"\"0x");
                crate::sink::push_hex(out, b);
                out.push(b'"');
            }
            Value::Array(a) => {
                out.push(b'[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    v.write_json(out);
                }
                out.push(b']');
            }
            Value::Struct(p) => p.write_json(out),
            Value::Hex(v) | Value::Pointer(v) => crate::sink::json::push_quoted_hex_u64(out, *v),
            Value::Ipv4(a) => {
                let _ = write!(out, "\"{a}\"");
            }
            Value::Ipv6(a) => {
                let _ = write!(out, "\"{a}\"");
            }
            Value::SocketAddress(a) => {
                let _ = write!(out, "\"{a}\"");
            }
            Value::NtStatus(v) | Value::HResult(v) => {
                let _ = write!(out, "\"0x{v:08x}\"");
            }
            Value::FileTime(t) => {
                out.push(b'"');
                let mut s = String::with_capacity(28);
                let _ = crate::time::write_rfc3339(&mut s, *t);
                out.extend_from_slice(s.as_bytes());
                out.push(b'"');
            }
            Value::SystemTime(t) => {
                let _ = write!(
                    out,
                    "\"{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}\"",
                    t[0], t[1], t[3], t[4], t[5], t[6], t[7]
                );
            }
        }
    }
}

impl Properties {
    /// Appends the properties as a JSON object, exactly as their `serde::Serialize` rendering.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            crate::sink::json::escape(out, k);
            out.push(b':');
            v.write_json(out);
        }
        out.push(b'}');
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

// ---------------------------------------------------------------------------------------------
// Plans: a schema compiled once (names shared, types resolved) and reused for every event.

#[derive(Debug)]
struct PlanField {
    name: Arc<str>,
    in_type: InType,
    out_type: OutType,
    count: Count,
    length: Length,
    map: Option<Arc<ValueMap>>,
    /// Bitmap names as .NET prints a `[Flags]` enum (`"ReadWrite, Delete"`): the maps of layouts
    /// TraceEvent decodes with its compiled parsers (kernel classes, built-in manifests). Maps of
    /// manifests read at run time join names with `|`, as TraceEvent's dynamic parser does.
    dotnet_flags: bool,
    members: Option<Vec<PlanField>>,
    /// Another field of this level takes its count or length from this one.
    referenced: bool,
    /// `"name":` as JSON.
    json_key: Box<[u8]>,
    /// A top-level field naming the record's process (1) or thread (2) — kernel records whose
    /// header carries no pid/tid take them from here — or a file path (3) that may have a DOS form.
    ids: u8,
}

/// Providers TraceEvent decodes with compiled parsers, whose bitmaps it prints as .NET `[Flags]`
/// enums (`"DomainNeutral, Manifest"`) — whatever gives us their layout (built-in manifest or the
/// file's own metadata). Kernel MOF classes print so too; other providers' bitmaps are joined with
/// `|`, as TraceEvent's manifest-driven parser joins them.
const DOTNET_FLAG_PROVIDERS: [Guid; 3] = [
    // Microsoft-Windows-DotNETRuntime, -DotNETRuntimeRundown
    Guid::from_str_const("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4"),
    Guid::from_str_const("a669021c-c450-4609-a035-5af59af4df18"),
    crate::schema::builtin::KERNEL_FILE,
];

/// A compiled [`EventSchema`].
#[derive(Debug)]
pub struct Plan {
    fields: Vec<PlanField>,
    /// The schema's names, shared by every decoded event (no allocation per record).
    names: PlanNames,
}

#[derive(Debug, Default)]
struct PlanNames {
    provider: Option<Arc<str>>,
    event: Option<Arc<str>>,
    task: Option<Arc<str>>,
    opcode: Option<Arc<str>>,
}

impl Plan {
    pub fn new(schema: &EventSchema) -> Plan {
        let arc = |s: &Option<String>| s.as_deref().map(Arc::<str>::from);
        let dotnet = schema.source == SchemaSource::KernelMof
            || DOTNET_FLAG_PROVIDERS.contains(&schema.provider);
        let mut fields = compile(&schema.properties, dotnet);
        if schema.provider == crate::schema::builtin::KERNEL_FILE {
            for f in fields.iter_mut().filter(|f| f.map.is_none()) {
                f.map = crate::schema::builtin::kernel_file_flag_map(&f.name);
                f.dotnet_flags |= f.map.is_some();
            }
        }
        for f in &mut fields {
            if f.members.is_none() && f.count == Count::One {
                f.ids = match &*f.name {
                    "ProcessId" | "PID" | "StackProcess" => 1,
                    "TThreadId" | "ThreadId" | "IssuingThreadId" | "TTID" | "StackThread" => 2,
                    "FileName" | "OpenPath" if f.in_type == it::UNICODESTRING => 3,
                    _ => 0,
                };
            }
        }
        Plan {
            fields,
            names: PlanNames {
                provider: arc(&schema.provider_name),
                event: arc(&schema.event_name),
                task: arc(&schema.task_name),
                opcode: arc(&schema.opcode_name),
            },
        }
    }
    /// Decodes a payload with this plan.
    pub fn decode(&self, payload: &[u8], pointer_size: u8) -> Result<Properties, DecodeError> {
        self.decode_counted(payload, pointer_size).map(|(p, _)| p)
    }

    /// As [`Plan::decode`], also returning how many payload bytes the properties took.
    pub fn decode_counted(
        &self,
        payload: &[u8],
        pointer_size: u8,
    ) -> Result<(Properties, usize), DecodeError> {
        self.decode_ids(payload, pointer_size).0
    }

    /// As [`Plan::decode_counted`], also giving the process and thread ids the payload names.
    fn decode_ids(
        &self,
        payload: &[u8],
        pointer_size: u8,
    ) -> (Result<(Properties, usize), DecodeError>, PayloadIds) {
        let mut cur = Cursor::new(payload, pointer_size, true);
        let mut out = Properties(Vec::with_capacity(self.fields.len()));
        let r = match decode_level(&self.fields, &mut cur, &mut Dest::Props(&mut out)) {
            Ok(()) => Ok((out, cur.pos)),
            Err(f) => Err(DecodeError {
                property: f.path,
                offset: f.offset,
                reason: f.reason,
                partial: out,
            }),
        };
        let ids = cur.captured();
        (r, ids)
    }

    /// The process and thread ids the payload names (measuring walk, no values built).
    fn payload_ids(&self, payload: &[u8], pointer_size: u8) -> PayloadIds {
        let mut cur = Cursor::new(payload, pointer_size, true);
        let _ = decode_level(&self.fields, &mut cur, &mut Dest::Measure);
        cur.captured()
    }
}

/// What a walk picked up from top-level fields: the process and thread ids the payload names
/// (ProcessId/ThreadId-like fields) and its first file path field (FileName, OpenPath).
#[derive(Clone, Debug, Default)]
struct PayloadIds {
    pid: Option<u64>,
    tid: Option<u64>,
    path: Option<(usize, String)>,
}

impl Cursor<'_> {
    fn captured(&mut self) -> PayloadIds {
        PayloadIds {
            pid: self.pid,
            tid: self.tid,
            path: self.path.take(),
        }
    }
}

impl Plan {
    /// Appends the properties' JSON object (exactly what [`Properties::write_json`] writes for
    /// [`Plan::decode`]'s result) straight from the payload, and returns the bytes consumed. On
    /// error `out` holds a partial object: callers truncate it and take the value path.
    fn write_json(
        &self,
        payload: &[u8],
        pointer_size: u8,
        out: &mut Vec<u8>,
        scratch: &mut String,
    ) -> Result<(usize, PayloadIds), ()> {
        let mut cur = Cursor::new(payload, pointer_size, true);
        out.push(b'{');
        decode_level(&self.fields, &mut cur, &mut Dest::Json(out, scratch)).map_err(|_| ())?;
        out.push(b'}');
        Ok((cur.pos, cur.captured()))
    }

    /// As [`Plan::measure`], but `None` unless every terminated string has its terminator: a
    /// string running to the end of the payload would make any layout "fit".
    fn measure_strict(&self, payload: &[u8], pointer_size: u8) -> Option<usize> {
        let mut cur = Cursor::new(payload, pointer_size, false);
        decode_level(&self.fields, &mut cur, &mut Dest::Measure).ok()?;
        (!cur.unterminated).then_some(cur.pos)
    }

    /// How many payload bytes the properties take, without building values (no allocation): what
    /// `etwkit stats` needs to count records whose layout leaves bytes unread or runs short.
    pub fn measure(&self, payload: &[u8], pointer_size: u8) -> Result<usize, DecodeError> {
        let mut cur = Cursor::new(payload, pointer_size, false);
        match decode_level(&self.fields, &mut cur, &mut Dest::Measure) {
            Ok(()) => Ok(cur.pos),
            Err(f) => Err(DecodeError {
                property: f.path,
                offset: f.offset,
                reason: f.reason,
                partial: Properties::default(),
            }),
        }
    }
}

fn compile(props: &[Property], dotnet_flags: bool) -> Vec<PlanField> {
    let mut fields: Vec<PlanField> = props
        .iter()
        .map(|p| {
            let (in_type, out_type, members) = match &p.kind {
                PropertyKind::Scalar { in_type, out_type } => (*in_type, *out_type, None),
                PropertyKind::Struct(m) => (0, 0, Some(compile(m, dotnet_flags))),
            };
            PlanField {
                name: Arc::from(p.name.as_str()),
                in_type,
                out_type,
                count: p.count.clone(),
                length: p.length.clone(),
                map: p.map.clone(),
                dotnet_flags,
                members,
                referenced: false,
                ids: 0,
                json_key: {
                    let mut k = Vec::with_capacity(p.name.len() + 3);
                    crate::sink::json::escape(&mut k, &p.name);
                    k.push(b':');
                    k.into_boxed_slice()
                },
            }
        })
        .collect();
    for p in props {
        for j in [
            match p.count {
                Count::FromProperty(j) => Some(j),
                _ => None,
            },
            match p.length {
                Length::FromProperty(j) => Some(j),
                _ => None,
            },
        ]
        .into_iter()
        .flatten()
        {
            if let Some(f) = fields.get_mut(j) {
                f.referenced = true;
            }
        }
    }
    fields
}

/// Decodes `payload` against `schema` (pointer size per record: 4 or 8). On failure the error names
/// the property and offset and carries what was decoded before it. Bytes after the last property are
/// ignored (TDH does the same).
pub fn decode_properties(
    schema: &EventSchema,
    payload: &[u8],
    pointer_size: u8,
) -> Result<Properties, DecodeError> {
    Plan::new(schema).decode(payload, pointer_size)
}

struct Cursor<'a> {
    d: &'a [u8],
    pos: usize,
    ptr: u8,
    /// A terminated string ran to the end of the payload without its terminator.
    unterminated: bool,
    /// Values of the top-level fields naming the record's process and thread (see `PlanField::ids`).
    pid: Option<u64>,
    tid: Option<u64>,
    /// The first top-level file path field: its index and text.
    path: Option<(usize, String)>,
    /// Whether to pick up `pid`, `tid` and `path` (not when only measuring).
    capture: bool,
}

struct Fail {
    path: String,
    offset: usize,
    reason: String,
}

impl<'a> Cursor<'a> {
    /// A cursor at the payload's start; `pointer_size` 4 reads 32-bit pointers, anything else 64.
    /// `capture` picks up the ids and path the plan marks (not when only measuring).
    fn new(d: &'a [u8], pointer_size: u8, capture: bool) -> Cursor<'a> {
        Cursor {
            d,
            pos: 0,
            ptr: if pointer_size == 4 { 4 } else { 8 },
            unterminated: false,
            pid: None,
            tid: None,
            path: None,
            capture,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.d.len())
            .ok_or_else(|| {
                format!(
                    "needs {n} bytes but only {} remain",
                    self.d.len().saturating_sub(self.pos)
                )
            })?;
        let s = &self.d[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn rest(&mut self) -> &'a [u8] {
        let s = &self.d[self.pos.min(self.d.len())..];
        self.pos = self.d.len();
        s
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().unwrap_or_default(),
        ))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }
}

/// Where a walk puts what it reads.
enum Dest<'o> {
    /// Nowhere: the walk only measures (no allocation).
    Measure,
    /// Values, pushed to a property list.
    Props(&'o mut Properties),
    /// JSON text (exactly [`Properties::write_json`]'s), appended to a buffer; `scratch` is reused
    /// for UTF-16 strings.
    Json(&'o mut Vec<u8>, &'o mut String),
}

impl Dest<'_> {
    fn reborrow(&mut self) -> Dest<'_> {
        match self {
            Dest::Measure => Dest::Measure,
            Dest::Props(p) => Dest::Props(p),
            Dest::Json(b, s) => Dest::Json(b, s),
        }
    }
}

/// Walks one level of fields into `out`. Decoding, measuring and JSON writing all go through this
/// walk, so they agree on every byte.
fn decode_level(
    fields: &[PlanField],
    cur: &mut Cursor<'_>,
    out: &mut Dest<'_>,
) -> Result<(), Fail> {
    // Integer values of this level's properties, for count=/length= references.
    let mut small = [None::<u64>; 32];
    let mut big;
    let nums: &mut [Option<u64>] = if fields.len() <= small.len() {
        &mut small[..fields.len()]
    } else {
        big = vec![None; fields.len()];
        &mut big
    };
    for (idx, f) in fields.iter().enumerate() {
        let start = cur.pos;
        let fail = |reason: String, at: usize| Fail {
            path: f.name.to_string(),
            offset: at,
            reason,
        };
        let referenced = |j: usize, what: &str| -> Result<u64, Fail> {
            nums.get(j).copied().flatten().ok_or_else(|| {
                fail(
                    format!("its {what} property (#{j}) has no integer value"),
                    start,
                )
            })
        };
        let len = match f.length {
            Length::Natural => None,
            Length::Fixed(n) => Some(n as u64),
            Length::FromProperty(j) => Some(referenced(j, "length")?),
        };
        let n = match f.count {
            Count::One => None,
            Count::Fixed(n) => Some(n as u64),
            Count::FromProperty(j) => Some(referenced(j, "count")?),
            Count::Prefixed => Some(
                cur.u16()
                    .map_err(|r| fail(format!("array count: {r}"), start))? as u64,
            ),
            Count::ToEnd => {
                // Whole elements of a fixed-size in-type up to the end of the payload.
                let size = match f.in_type {
                    it::POINTER | it::SIZET => cur.ptr as u64,
                    it::INT8 | it::UINT8 => 1,
                    it::INT16 | it::UINT16 => 2,
                    it::INT32 | it::UINT32 | it::HEXINT32 => 4,
                    it::INT64 | it::UINT64 | it::HEXINT64 => 8,
                    other => {
                        return Err(fail(
                            format!("in-type {other} cannot fill the rest of the payload"),
                            start,
                        ))
                    }
                };
                Some(cur.d.len().saturating_sub(cur.pos) as u64 / size)
            }
        };
        if let Dest::Json(buf, _) = out {
            if idx > 0 {
                buf.push(b',');
            }
            buf.extend_from_slice(&f.json_key);
        }
        match n {
            None => match one(
                f,
                cur,
                len,
                out,
                f.referenced || (cur.capture && f.ids != 0),
            ) {
                Ok(v) => {
                    nums[idx] = v.as_ref().and_then(Value::as_u64);
                    match if cur.capture { f.ids } else { 0 } {
                        1 => cur.pid = nums[idx],
                        2 => cur.tid = nums[idx],
                        3 if cur.path.is_none() => {
                            if let Some(Value::String(p)) = &v {
                                cur.path = Some((idx, p.clone()));
                            }
                        }
                        _ => {}
                    }
                    if let Dest::Props(o) = out {
                        o.0.push((f.name.clone(), v.unwrap_or(Value::Null)));
                    }
                }
                Err(mut e) => {
                    if e.path.is_empty() {
                        e.path = f.name.to_string();
                    } else {
                        e.path = format!("{}.{}", f.name, e.path);
                    }
                    return Err(e);
                }
            },
            Some(n) => {
                let remaining = cur.d.len().saturating_sub(cur.pos) as u64;
                // Elements of a real type take at least one byte; a few empty ones (NULL in-type,
                // empty structs) are allowed, absurd counts are refused before allocating.
                if n > remaining && n > 1024 {
                    return Err(fail(
                        format!(
                            "array of {n} elements cannot fit in the {remaining} remaining bytes"
                        ),
                        start,
                    ));
                }
                let building = matches!(out, Dest::Props(_));
                let mut arr = Vec::with_capacity(if building {
                    n.min(remaining + 1) as usize
                } else {
                    0
                });
                if let Dest::Json(buf, _) = out {
                    buf.push(b'[');
                }
                for i in 0..n {
                    if i > 0 {
                        if let Dest::Json(buf, _) = out {
                            buf.push(b',');
                        }
                    }
                    match one(f, cur, len, out, false) {
                        Ok(v) => {
                            if let Some(v) = v.filter(|_| building) {
                                arr.push(v)
                            }
                        }
                        Err(mut e) => {
                            e.path = if e.path.is_empty() {
                                format!("{}[{i}]", f.name)
                            } else {
                                format!("{}[{i}].{}", f.name, e.path)
                            };
                            if let Dest::Props(o) = out {
                                o.0.push((f.name.clone(), Value::Array(arr)));
                            }
                            return Err(e);
                        }
                    }
                }
                match out {
                    Dest::Props(o) => o.0.push((f.name.clone(), Value::Array(arr))),
                    Dest::Json(buf, _) => buf.push(b']'),
                    Dest::Measure => {}
                }
            }
        }
    }
    Ok(())
}

/// One element of a field, into `out`. Returns the value when `out` collects values, or when
/// `want` asks for it (a count or length other fields refer to). A returned `Fail` has an empty
/// path when it is about `f` itself.
fn one(
    f: &PlanField,
    cur: &mut Cursor<'_>,
    len: Option<u64>,
    out: &mut Dest<'_>,
    want: bool,
) -> Result<Option<Value>, Fail> {
    let at = cur.pos;
    if let Some(members) = &f.members {
        return match out {
            Dest::Props(_) => {
                let mut p = Properties(Vec::with_capacity(members.len()));
                decode_level(members, cur, &mut Dest::Props(&mut p))?;
                Ok(Some(Value::Struct(p)))
            }
            Dest::Json(buf, _) => {
                buf.push(b'{');
                decode_level(members, cur, &mut out.reborrow())?;
                if let Dest::Json(buf, _) = out {
                    buf.push(b'}');
                }
                Ok(None)
            }
            Dest::Measure => decode_level(members, cur, &mut Dest::Measure).map(|()| None),
        };
    }
    let b = span(f.in_type, f.out_type, cur, len).map_err(|reason| Fail {
        path: String::new(),
        offset: at,
        reason,
    })?;
    let map = f.map.as_deref().map(|map| MapRef {
        map,
        dotnet: f.dotnet_flags,
    });
    match out {
        Dest::Props(_) => Ok(Some(build_value(f.in_type, f.out_type, map, b, len))),
        Dest::Json(buf, scratch) => {
            if want {
                let v = build_value(f.in_type, f.out_type, map, b, len);
                v.write_json(buf);
                Ok(Some(v))
            } else {
                write_scalar_json(f.in_type, f.out_type, map, b, len, buf, scratch);
                Ok(None)
            }
        }
        Dest::Measure if want => Ok(Some(build_value(f.in_type, f.out_type, map, b, len))),
        Dest::Measure => Ok(None),
    }
}

/// Appends a scalar's JSON as `build_value(..).write_json(..)` would, without building strings and
/// byte vectors.
fn write_scalar_json(
    in_t: InType,
    out: OutType,
    map: Option<MapRef<'_>>,
    b: &[u8],
    len: Option<u64>,
    buf: &mut Vec<u8>,
    scratch: &mut String,
) {
    let utf16_json = |buf: &mut Vec<u8>, scratch: &mut String, b: &[u8]| {
        scratch.clear();
        let units = b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]));
        scratch.extend(char::decode_utf16(units).map(|r| r.unwrap_or('\u{FFFD}')));
        crate::sink::json::escape(buf, scratch);
    };
    match in_t {
        it::UNICODESTRING if len.is_none() => utf16_json(buf, scratch, b),
        it::UNICODESTRING
        | it::MANIFEST_COUNTEDSTRING
        | it::COUNTEDSTRING
        | it::REVERSEDCOUNTEDSTRING => utf16_json(buf, scratch, trim_nuls_utf16(b)),
        it::NONNULLTERMINATEDSTRING | it::UNICODECHAR => utf16_json(buf, scratch, b),
        it::ANSISTRING
        | it::MANIFEST_COUNTEDANSISTRING
        | it::COUNTEDANSISTRING
        | it::REVERSEDCOUNTEDANSISTRING
        | it::NONNULLTERMINATEDANSISTRING => {
            let t = if in_t == it::NONNULLTERMINATEDANSISTRING {
                b
            } else {
                trim_nuls(b)
            };
            match std::str::from_utf8(t) {
                Ok(s) => crate::sink::json::escape(buf, s),
                Err(_) => {
                    scratch.clear();
                    scratch.extend(t.iter().map(|&c| c as char));
                    crate::sink::json::escape(buf, scratch);
                }
            }
        }
        it::BINARY | it::MANIFEST_COUNTEDBINARY
            if !matches!(
                out,
                ot::IPV6 | ot::IPV4 | ot::SOCKETADDRESS | ot::STRING | ot::UTF8
            ) =>
        {
            buf.extend_from_slice(b"\"0x");
            crate::sink::push_hex(buf, b);
            buf.push(b'"');
        }
        it::HEXDUMP => {
            buf.extend_from_slice(b"\"0x");
            crate::sink::push_hex(buf, b);
            buf.push(b'"');
        }
        _ => build_value(in_t, out, map, b, len).write_json(buf),
    }
}

fn utf16(b: &[u8]) -> String {
    let units = b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]));
    char::decode_utf16(units)
        .map(|r| r.unwrap_or('\u{FFFD}'))
        .collect()
}

fn ansi(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_string(),
        Err(_) => b.iter().map(|&c| c as char).collect(),
    }
}

fn trim_nuls_utf16(mut b: &[u8]) -> &[u8] {
    while b.len() >= 2 && b[b.len() - 2] == 0 && b[b.len() - 1] == 0 {
        b = &b[..b.len() - 2];
    }
    b
}

fn trim_nuls(mut b: &[u8]) -> &[u8] {
    while let [rest @ .., 0] = b {
        b = rest;
    }
    b
}

/// A NUL-terminated UTF-16 string; without a terminator, the rest of the payload.
fn cstr16<'a>(cur: &mut Cursor<'a>) -> &'a [u8] {
    let rest = &cur.d[cur.pos.min(cur.d.len())..];
    let mut i = 0;
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

fn cstr8<'a>(cur: &mut Cursor<'a>) -> &'a [u8] {
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

fn sid_string(b: &[u8]) -> String {
    // revision, sub-authority count, 6-byte big-endian authority, n × u32 sub-authorities.
    let auth = b[2..8].iter().fold(0u64, |a, &x| (a << 8) | x as u64);
    let mut s = format!("S-{}-{}", b[0], auth);
    for c in b[8..].chunks_exact(4) {
        let _ = write!(s, "-{}", u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    }
    s
}

fn sid_span<'a>(cur: &mut Cursor<'a>) -> Result<&'a [u8], String> {
    let head = cur
        .d
        .get(cur.pos..cur.pos + 8)
        .ok_or_else(|| "SID header needs 8 bytes".to_string())?;
    let n = head[1] as usize;
    cur.take(8 + 4 * n)
        .map_err(|r| format!("SID with {n} sub-authorities: {r}"))
}

fn socket_address(b: &[u8]) -> Option<SocketAddr> {
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

fn binary_value(b: &[u8], out: OutType) -> Value {
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

/// A value map and how its bitmap names are joined (see `PlanField::dotnet_flags`).
#[derive(Clone, Copy)]
struct MapRef<'a> {
    map: &'a ValueMap,
    dotnet: bool,
}

fn map_name(m: MapRef<'_>, v: u64) -> Option<String> {
    let map = m.map;
    if !map.is_bitmap {
        return map
            .entries
            .iter()
            .find(|(k, _)| *k == v)
            .map(|(_, n)| n.clone());
    }
    if v == 0 {
        return map
            .entries
            .iter()
            .find(|(k, _)| *k == 0)
            .map(|(_, n)| n.clone());
    }
    let mut names: Vec<(u64, &str)> = Vec::new();
    let mut left = v;
    if m.dotnet {
        // As .NET prints a [Flags] enum: the largest entries whose bits are all still unclaimed
        // first (a composite such as FileShare's ReadWrite = 3 wins over Read and Write).
        let mut by_value: Vec<&(u64, String)> = map.entries.iter().filter(|e| e.0 != 0).collect();
        by_value.sort_by(|a, b| b.0.cmp(&a.0));
        for (k, n) in by_value {
            if left & k == *k {
                names.push((*k, n.as_str()));
                left &= !k;
            }
        }
    } else {
        for (k, n) in &map.entries {
            if *k != 0 && v & k == *k {
                names.push((*k, n.as_str()));
                left &= !k;
            }
        }
    }
    if names.is_empty() {
        return None;
    }
    // Ascending value order, whatever order the map lists its entries in.
    names.sort_by_key(|e| e.0);
    let sep = if m.dotnet { ", " } else { "|" };
    let mut s = String::new();
    for (i, (_, n)) in names.iter().enumerate() {
        if i > 0 {
            s.push_str(sep);
        }
        s.push_str(n);
    }
    if left != 0 {
        let _ = write!(s, "{sep}0x{left:x}");
    }
    Some(s)
}

/// An integer with its out-type applied. `signed` holds the sign-extended value for signed in-types.
fn int_value(
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
fn span<'a>(
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
            // A first u32 of 0 means "no SID" and takes 4 bytes (an empty span).
            let first = cur
                .d
                .get(cur.pos..cur.pos + 4)
                .ok_or_else(|| "WBEMSID needs at least 4 bytes".to_string())?;
            if first == [0, 0, 0, 0] {
                cur.take(4)?;
                &[]
            } else {
                cur.take(2 * cur.ptr as usize)
                    .map_err(|r| format!("WBEMSID TOKEN_USER header: {r}"))?;
                sid_span(cur)?
            }
        }
        other => return Err(format!("in-type {other} is not supported")),
    })
}

/// Little-endian unsigned integer of up to 8 bytes.
#[inline]
fn le(b: &[u8]) -> u64 {
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
fn build_value(
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
        _ => Value::Null,
    }
}

// ---------------------------------------------------------------------------------------------
// The Decoder: registry lookup + plan cache + names + special record kinds.

/// A decoded event: names and values (what `etwkit dump` prints under `properties`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct DecodedEvent {
    pub provider_name: Option<Arc<str>>,
    pub event_name: Option<Arc<str>>,
    pub task_name: Option<Arc<str>>,
    pub opcode_name: Option<Arc<str>>,
    /// Empty when no layout is known (see `undecoded`).
    pub properties: Properties,
    /// Where the layout came from; `None` when undecoded.
    pub source: Option<SchemaSource>,
    /// Why the record has no (or only partial) properties; `None` when fully decoded.
    pub undecoded: Option<String>,
    /// Payload bytes after the last property (0 when the schema consumed the payload exactly).
    /// TDH ignores them too; they are reported so that nothing is lost silently.
    #[serde(skip_serializing_if = "is_zero")]
    pub unread_bytes: usize,
    /// The layout does not fit the payload: bytes left unread, or a property running past the end
    /// (then `undecoded` says the same). `None` when the payload was consumed exactly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_issue: Option<String>,
    /// Set when the layout fitted only with the other pointer size than the record header's (then
    /// the properties were decoded with it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout_pointer_size: Option<u8>,
    /// For a kernel record whose header carries no process or thread id: the ids filled in, and
    /// where they came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ids: Option<Ids>,
    /// A file path field (FileName, OpenPath; as logged, an NT path) and its DOS form, when the
    /// trace's own volume mapping (KernelTraceControl VolumeMapping events) covers it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dos_path: Option<(Arc<str>, String)>,
    /// The record's stack: its EVENT_HEADER stack item, with kernel StackWalk frames appended when
    /// the decoder has a [`stacks::StackIndex`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack: Option<Stack>,
}

/// Process and thread ids attributed to a record (`u32::MAX`: still unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Ids {
    pub pid: u32,
    pub tid: u32,
    /// Where `pid` came from; `None`: the record header.
    pub pid_source: Option<IdSource>,
    /// Where `tid` came from; `None`: the record header.
    pub tid_source: Option<IdSource>,
}

/// Where an attributed id came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdSource {
    /// A field of the payload (ProcessId, ThreadId, TTID, StackProcess...).
    Payload,
    /// The trace's thread table (kernel Thread events), from the thread id.
    ThreadTable,
}

impl IdSource {
    pub fn name(self) -> &'static str {
        match self {
            IdSource::Payload => "payload",
            IdSource::ThreadTable => "thread_table",
        }
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl DecodedEvent {
    /// True when the record got properties from a schema (fully, or partially before an error).
    pub fn is_decoded(&self) -> bool {
        self.source.is_some()
    }
}

/// Plans by schema address; the schema is kept alive beside its plan so the address stays unique.
type PlanCache = crate::schema::registry::FastMap<usize, (Arc<EventSchema>, Arc<Plan>)>;

/// Owns a [`Registry`] and decodes records; plans are cached per schema.
#[derive(Default)]
pub struct Decoder {
    registry: Registry,
    plans: RwLock<PlanCache>,
    stacks: Option<stacks::StackIndex>,
    threads: Option<threads::ThreadTable>,
    volumes: Option<paths::VolumeMap>,
    live: crate::schema::registry::Learner,
}

/// Records the file pre-scan of [`Decoder::for_file`] learns from: kernel StackWalk events (stacks and
/// stack keys), kernel Thread events (the thread table), KernelTraceControl VolumeMapping (DOS paths)
/// and embedded metadata (EventInfo/EventMapInfo, EventSource manifest chunks).
fn prescan_wants(rec: &EventRecord<'_>) -> bool {
    let kernel_group =
        |g: u16| rec.header_type.is_kernel() && rec.hook_id.is_some_and(|h| h >> 8 == g);
    (rec.header_type.is_kernel() && rec.provider == stacks::STACKWALK_GUID)
        || kernel_group(0x05)
        || (rec.header_type.is_classic()
            && rec.provider == crate::schema::builtin::kernel_mof::KTC_SYS_CONFIG)
        || crate::schema::registry::Learner::is_metadata(rec)
}

/// The on-disk markers of an EventSource manifest chunk (a schema fact, kept in `schema::registry`).
pub use crate::schema::registry::is_eventsource_manifest;

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("registry", &self.registry)
            .field("plans", &self.plans.read().map(|p| p.len()).unwrap_or(0))
            .field(
                "stack_index",
                &self.stacks.as_ref().map(|s| s.stackwalk_events()),
            )
            .finish()
    }
}

impl Decoder {
    pub fn new(registry: Registry) -> Decoder {
        Decoder {
            registry,
            plans: RwLock::new(PlanCache::default()),
            stacks: None,
            threads: None,
            volumes: None,
            live: Default::default(),
        }
    }

    /// Learning as records stream by (live sessions, or a file read once without a pre-scan): call it
    /// for every record before [`Decoder::decode`]. Embedded metadata is collected and registered as
    /// soon as a non-metadata record follows it (maps follow their EventInfo). Returns whether `rec`
    /// was metadata. Events met before their metadata stay undecoded; for files,
    /// [`Decoder::for_file`] avoids that with a pre-scan.
    pub fn learn(&mut self, rec: &EventRecord<'_>) -> bool {
        if crate::schema::registry::Learner::is_metadata(rec) {
            self.live.observe(rec);
            return true;
        }
        if self.live.has_pending() {
            self.live.flush(&mut self.registry);
        }
        false
    }

    /// What [`Decoder::learn`] has registered so far.
    pub fn learned(&self) -> &crate::schema::registry::LearnSummary {
        self.live.summary()
    }

    /// A decoder for one file: a single pre-scan pass feeds `registry` the file's embedded metadata
    /// (EventInfo/EventMapInfo, EventSource manifests), indexes its kernel StackWalk events and
    /// builds its thread table (kernel Thread events).
    pub fn for_file(
        mut registry: Registry,
        file: &crate::etl::EtlFile,
    ) -> (Decoder, crate::schema::registry::LearnSummary) {
        let mut learner = crate::schema::registry::Learner::default();
        let mut index = stacks::StackIndex::new();
        let mut threads = threads::ThreadTable::new();
        let mut volumes = paths::VolumeMap::default();
        // The records the pre-scan needs are few: pick them out on every core, then feed them in
        // file order.
        type Picked = Vec<(usize, usize, EventRecord<'static>)>;
        let (mut picked, _) = file.par_fold(
            Picked::new,
            |v: &mut Picked, r| {
                if prescan_wants(&r.event) {
                    v.push((r.buffer_index, r.offset, r.event.to_owned_record()));
                }
            },
            |mut a, mut b| {
                a.append(&mut b);
                a
            },
        );
        picked.sort_unstable_by_key(|p| (p.0, p.1));
        for (_, _, e) in &picked {
            if !index.observe(e) && !threads.observe(e) && !volumes.observe(e) {
                learner.observe(e);
            }
        }
        let summary = learner.finish(&mut registry);
        let mut d = Decoder::new(registry);
        if index.stackwalk_events() > 0 {
            d.stacks = Some(index);
        }
        threads.finish();
        if !threads.is_empty() {
            d.threads = Some(threads);
        }
        volumes.finish();
        if !volumes.is_empty() {
            d.volumes = Some(volumes);
        }
        (d, summary)
    }

    /// Uses `index` to attach kernel StackWalk stacks.
    pub fn set_stack_index(&mut self, index: stacks::StackIndex) {
        self.stacks = Some(index);
    }
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
    pub fn registry_mut(&mut self) -> &mut Registry {
        self.plans.get_mut().map(|p| p.clear()).ok();
        &mut self.registry
    }

    fn plan(&self, schema: &Arc<EventSchema>) -> Arc<Plan> {
        let key = Arc::as_ptr(schema) as usize;
        if let Ok(p) = self.plans.read() {
            if let Some((_, plan)) = p.get(&key) {
                return plan.clone();
            }
        }
        let plan = Arc::new(Plan::new(schema));
        if let Ok(mut p) = self.plans.write() {
            p.insert(key, (schema.clone(), plan.clone()));
        }
        plan
    }

    /// Names and values of one record. Never fails: what cannot be decoded is said in `undecoded`.
    pub fn decode(&self, rec: &EventRecord<'_>) -> DecodedEvent {
        let mut ev = DecodedEvent {
            provider_name: self.registry.provider_name(rec),
            stack: record_stack(rec, self.stacks.as_ref()),
            ..Default::default()
        };
        if rec.header_type == HeaderType::Message {
            ev.properties = wpp_fields(rec);
            ev.undecoded = Some("WPP message: no TMF available, raw fields only".into());
            return ev;
        }
        if rec.header_type.is_event_header() && rec.flags & flags::STRING_ONLY != 0 {
            let mut cur = Cursor::new(&rec.payload, rec.pointer_size, false);
            ev.properties
                .push("String", Value::String(utf16(cstr16(&mut cur))));
            ev.source = Some(SchemaSource::Builtin);
            return ev;
        }
        if is_eventsource_manifest(rec) {
            ev.event_name = Some("ManifestData".into());
            let p = &rec.payload;
            if p.len() >= 8 {
                ev.properties.push("Format", Value::U64(p[0] as u64));
                ev.properties.push("MajorVersion", Value::U64(p[1] as u64));
                ev.properties.push("MinorVersion", Value::U64(p[2] as u64));
                ev.properties.push("Magic", Value::U64(p[3] as u64));
                ev.properties.push(
                    "TotalChunks",
                    Value::U64(u16::from_le_bytes([p[4], p[5]]) as u64),
                );
                ev.properties.push(
                    "ChunkNumber",
                    Value::U64(u16::from_le_bytes([p[6], p[7]]) as u64),
                );
                // As TraceEvent names it: the whole payload, header included.
                ev.properties
                    .push("PayloadLength", Value::U64(p.len() as u64));
                ev.source = Some(SchemaSource::EventSourceManifest);
            } else {
                ev.undecoded = Some(format!(
                    "EventSource manifest chunk of {} bytes is shorter than its 8-byte header",
                    p.len()
                ));
            }
            return ev;
        }
        if rec.header_type.is_classic() && rec.provider == crate::schema::tdh::METADATA_CLASS {
            metadata_record(rec, &mut ev);
            return ev;
        }
        let schema = match self.registry.try_lookup(rec) {
            Ok(Some(s)) => s,
            Ok(None) => {
                ev.undecoded = Some("no schema for this event".into());
                return ev;
            }
            Err(e) => {
                ev.undecoded = Some(e.to_string());
                return ev;
            }
        };
        let plan = self.plan(&schema);
        if ev.provider_name.is_none() {
            ev.provider_name = plan.names.provider.clone();
        }
        ev.event_name = plan.names.event.clone();
        ev.task_name = plan.names.task.clone();
        ev.opcode_name = plan.names.opcode.clone();
        ev.source = Some(schema.source);
        let (first, ids) = plan.decode_ids(&rec.payload, rec.pointer_size);
        if !matches!(first, Ok((_, used)) if used == rec.payload.len()) {
            if let Some(other) = other_pointer_size(&plan, rec) {
                if let (Ok((p, _)), ids) = plan.decode_ids(&rec.payload, other) {
                    ev.properties = p;
                    ev.layout_pointer_size = Some(other);
                    ev.ids = self.attribute(rec, &ids);
                    ev.dos_path = self.dos_path(&plan, &ids);
                    return ev;
                }
            }
        }
        ev.ids = self.attribute(rec, &ids);
        ev.dos_path = self.dos_path(&plan, &ids);
        match first {
            Ok((p, used)) => {
                ev.properties = p;
                ev.unread_bytes = rec.payload.len() - used;
                if ev.unread_bytes > 0 {
                    ev.decode_issue = Some(unread_issue(ev.unread_bytes, rec.payload.len()));
                }
            }
            Err(e) => {
                ev.undecoded = Some(e.to_string());
                ev.decode_issue = ev.undecoded.clone();
                ev.properties = e.partial;
            }
        }
        ev
    }

    /// What `etwkit stats` needs of a record, without building its values (no allocation on the
    /// common path): whether a layout applies, and whether it fits the payload.
    pub fn check(&self, rec: &EventRecord<'_>) -> Check {
        let decoded = |d: bool| Check {
            decoded: d,
            ..Default::default()
        };
        if rec.header_type == HeaderType::Message {
            return decoded(false);
        }
        if rec.header_type.is_event_header() && rec.flags & flags::STRING_ONLY != 0 {
            return decoded(true);
        }
        if is_eventsource_manifest(rec) {
            return decoded(rec.payload.len() >= 8);
        }
        if rec.header_type.is_classic() && rec.provider == crate::schema::tdh::METADATA_CLASS {
            return decoded(self.decode(rec).is_decoded());
        }
        let Ok(Some(schema)) = self.registry.try_lookup(rec) else {
            return decoded(false);
        };
        let plan = self.plan(&schema);
        let len = rec.payload.len();
        match plan.measure(&rec.payload, rec.pointer_size) {
            Ok(used) if used == len => decoded(true),
            _ if other_pointer_size(&plan, rec).is_some() => Check {
                decoded: true,
                issue: false,
                pointer_size_fallback: true,
            },
            _ => Check {
                decoded: true,
                issue: true,
                pointer_size_fallback: false,
            },
        }
    }
}

/// What [`Decoder::check`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Check {
    /// A layout applies (as [`DecodedEvent::is_decoded`]).
    pub decoded: bool,
    /// The layout leaves payload bytes unread or runs past the payload (a `decode_issue`).
    pub issue: bool,
    /// The layout fits only with the other pointer size.
    pub pointer_size_fallback: bool,
}

/// For a classic or kernel (MOF) record whose layout does not fit its payload with the header's
/// pointer size: the other pointer size, when the layout then consumes the payload exactly, every
/// string with its terminator (a 32-bit logger carrying 64-bit kernel payloads, or the reverse).
fn other_pointer_size(plan: &Plan, rec: &EventRecord<'_>) -> Option<u8> {
    if !(rec.header_type.is_kernel() || rec.header_type.is_classic()) {
        return None;
    }
    let other = if rec.pointer_size == 4 { 8 } else { 4 };
    (plan.measure_strict(&rec.payload, other)? == rec.payload.len()).then_some(other)
}

fn unread_issue(unread: usize, len: usize) -> String {
    format!("the layout leaves {unread} of the {len} payload bytes unread")
}

impl Decoder {
    /// Process and thread ids for a kernel record whose header carries none (compact and PERFINFO
    /// headers): from the payload's own ProcessId/ThreadId-like fields, else (for the process) from
    /// the trace's thread table. `None` when nothing was filled in.
    fn attribute(&self, rec: &EventRecord<'_>, payload: &PayloadIds) -> Option<Ids> {
        if !rec.header_type.is_kernel() || (rec.pid != u32::MAX && rec.tid != u32::MAX) {
            return None;
        }
        let small = |v: Option<u64>| {
            v.and_then(|v| u32::try_from(v).ok())
                .filter(|&v| v != u32::MAX)
        };
        let mut ids = Ids {
            pid: rec.pid,
            tid: rec.tid,
            pid_source: None,
            tid_source: None,
        };
        if ids.tid == u32::MAX {
            if let Some(t) = small(payload.tid) {
                ids.tid = t;
                ids.tid_source = Some(IdSource::Payload);
            }
        }
        if ids.pid == u32::MAX {
            if let Some(p) = small(payload.pid) {
                ids.pid = p;
                ids.pid_source = Some(IdSource::Payload);
            } else if let Some(p) = (ids.tid != u32::MAX)
                .then(|| self.threads.as_ref()?.pid_of(ids.tid, rec.timestamp))
                .flatten()
            {
                ids.pid = p;
                ids.pid_source = Some(IdSource::ThreadTable);
            }
        }
        (ids.pid_source.is_some() || ids.tid_source.is_some()).then_some(ids)
    }

    /// The DOS form of the record's file path field, when the trace maps its volume.
    fn dos_path(&self, plan: &Plan, ids: &PayloadIds) -> Option<(Arc<str>, String)> {
        let (i, nt) = ids.path.as_ref()?;
        let dos = self.volumes.as_ref()?.to_dos(nt)?;
        Some((plan.fields[*i].name.clone(), dos))
    }

    /// The process and thread ids [`Decoder::decode`] would attribute to `rec` (see
    /// [`DecodedEvent::ids`]), without decoding it: for filters (`--pid`) that run before decoding.
    pub fn ids(&self, rec: &EventRecord<'_>) -> Option<Ids> {
        if !rec.header_type.is_kernel() || (rec.pid != u32::MAX && rec.tid != u32::MAX) {
            return None;
        }
        let payload = match self.layout_route(rec) {
            Some((_, plan)) => {
                let ids = plan.payload_ids(&rec.payload, rec.pointer_size);
                match other_pointer_size(&plan, rec) {
                    Some(other)
                        if plan.measure(&rec.payload, rec.pointer_size).ok()
                            != Some(rec.payload.len()) =>
                    {
                        plan.payload_ids(&rec.payload, other)
                    }
                    _ => ids,
                }
            }
            None => PayloadIds::default(),
        };
        self.attribute(rec, &payload)
    }

    /// `filter.matches(rec)`, where a kernel record whose header carries no process id is matched
    /// by the id its payload or the trace's thread table gives it (see [`Decoder::ids`]) — what
    /// `dump --pid` and the Python reader's `pids=` select.
    pub fn matches(&self, filter: &crate::filter::EventFilter, rec: &EventRecord<'_>) -> bool {
        if filter.matches(rec) {
            return true;
        }
        if filter.pids.is_empty() || rec.pid != u32::MAX {
            return false;
        }
        match self.ids(rec) {
            Some(ids) => {
                let mut e = rec.clone();
                e.pid = ids.pid;
                e.tid = ids.tid;
                filter.matches(&e)
            }
            None => false,
        }
    }

    /// The plan of a record decoded through its registry layout — the route [`Decoder::decode`]
    /// takes for every record but WPP, STRING_ONLY, EventSource manifest and metadata records.
    fn layout_route(&self, rec: &EventRecord<'_>) -> Option<(Arc<EventSchema>, Arc<Plan>)> {
        if rec.header_type == HeaderType::Message
            || (rec.header_type.is_event_header() && rec.flags & flags::STRING_ONLY != 0)
            || is_eventsource_manifest(rec)
            || (rec.header_type.is_classic() && rec.provider == crate::schema::tdh::METADATA_CLASS)
        {
            return None;
        }
        let schema = self.registry.try_lookup(rec).ok()??;
        let plan = self.plan(&schema);
        Some((schema, plan))
    }

    /// As [`Decoder::decode_etl`], but the properties go to `json` as their JSON object text
    /// (cleared first; left empty when there are none) and the result's `properties` stays empty.
    /// Records whose layout fits their payload are written straight from the payload, without
    /// building values; the rest take the value path. `scratch` is reused between calls.
    pub fn decode_etl_json(
        &self,
        r: &crate::etl::Record<'_>,
        json: &mut Vec<u8>,
        scratch: &mut String,
    ) -> DecodedEvent {
        json.clear();
        let rec = &r.event;
        if let Some((schema, plan)) = self.layout_route(rec) {
            let written = if plan.fields.is_empty() {
                None
            } else {
                plan.write_json(&rec.payload, rec.pointer_size, json, scratch)
                    .ok()
                    .filter(|&(used, _)| used == rec.payload.len())
            };
            if let Some((_, ids)) = written {
                return DecodedEvent {
                    ids: self.attribute(rec, &ids),
                    dos_path: self.dos_path(&plan, &ids),
                    provider_name: self
                        .registry
                        .provider_name(rec)
                        .or_else(|| plan.names.provider.clone()),
                    event_name: plan.names.event.clone(),
                    task_name: plan.names.task.clone(),
                    opcode_name: plan.names.opcode.clone(),
                    source: Some(schema.source),
                    stack: record_stack(rec, self.stacks.as_ref()),
                    ..Default::default()
                };
            }
            json.clear();
        }
        let mut ev = self.decode_etl(r);
        if !ev.properties.is_empty() {
            ev.properties.write_json(json);
            ev.properties = Properties::default();
        }
        ev
    }

    /// As [`Decoder::decode`], for a record read from an ETL file: WPP MESSAGE records also get the
    /// optional header items the [`EventRecord`] does not carry (sequence number, component id,
    /// option flags), read from the raw record.
    pub fn decode_etl(&self, r: &crate::etl::Record<'_>) -> DecodedEvent {
        let mut ev = self.decode(&r.event);
        if r.event.header_type == HeaderType::Message {
            if let Some(m) = crate::etl::record::message_fields(r.raw) {
                ev.properties
                    .push("OptionFlags", Value::Hex(m.option_flags as u64));
                if let Some(s) = m.sequence {
                    ev.properties.push("Sequence", Value::U64(s as u64));
                }
                if let Some(c) = m.component_id {
                    ev.properties.push("ComponentId", Value::U64(c as u64));
                }
            }
        }
        ev
    }
}

/// KernelTraceControl MetaData records (EventInfo / EventMapInfo): what they describe.
fn metadata_record(rec: &EventRecord<'_>, ev: &mut DecodedEvent) {
    use crate::schema::tdh;
    ev.provider_name = Some("KernelTraceControl".into());
    ev.task_name = Some("MetaData".into());
    let p = &mut ev.properties;
    match rec.descriptor.opcode {
        tdh::OPCODE_EVENT_INFO => {
            ev.opcode_name = Some("EventInfo".into());
            match tdh::parse_event_info(&rec.payload) {
                Ok(info) => {
                    let d = &rec.payload;
                    p.push(
                        "ProviderGuid",
                        Value::Guid(Guid::from_le_bytes(d).unwrap_or_default()),
                    );
                    p.push(
                        "EventGuid",
                        Value::Guid(Guid::from_le_bytes(&d[16..]).unwrap_or_default()),
                    );
                    p.push(
                        "EventId",
                        Value::U64(u16::from_le_bytes([d[0x20], d[0x21]]) as u64),
                    );
                    p.push("Version", Value::U64(d[0x22] as u64));
                    p.push("Opcode", Value::U64(d[0x25] as u64));
                    p.push(
                        "DecodingSource",
                        Value::U64(u32::from_le_bytes([d[0x30], d[0x31], d[0x32], d[0x33]]) as u64),
                    );
                    if let Some(i) = info {
                        let s = &i.schema;
                        let name = |v: &Option<String>| {
                            v.clone().map(Value::String).unwrap_or(Value::Null)
                        };
                        p.push("ProviderName", name(&s.provider_name));
                        p.push("TaskName", name(&s.task_name));
                        p.push("OpcodeName", name(&s.opcode_name));
                        p.push("EventName", name(&s.event_name));
                        p.push("TopLevelProperties", Value::U64(s.properties.len() as u64));
                    }
                    ev.source = Some(SchemaSource::Embedded);
                }
                Err(e) => ev.undecoded = Some(e.to_string()),
            }
        }
        tdh::OPCODE_MAP_INFO => {
            ev.opcode_name = Some("EventMapInfo".into());
            match tdh::parse_map_info(&rec.payload) {
                Ok((provider, map)) => {
                    p.push("ProviderGuid", Value::Guid(provider));
                    p.push("MapName", Value::String(map.name));
                    p.push("IsBitmap", Value::Bool(map.is_bitmap));
                    p.push("Entries", Value::U64(map.entries.len() as u64));
                    ev.source = Some(SchemaSource::Embedded);
                }
                Err(e) => ev.undecoded = Some(e.to_string()),
            }
        }
        other => {
            ev.undecoded = Some(format!(
                "KernelTraceControl MetaData record of unknown type {other}"
            ))
        }
    }
}

/// Counts for `etwkit stats`: records, records with properties, and the undecoded ones by provider
/// (name when known, else the GUID).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DecodeStats {
    pub records: u64,
    pub decoded: u64,
    pub undecoded_by_provider: std::collections::BTreeMap<String, u64>,
    /// Records whose layout leaves bytes unread or runs short.
    pub decode_issues: u64,
    /// Records decoded with the other pointer size than their header's.
    pub pointer_size_fallbacks: u64,
}

impl DecodeStats {
    pub fn add(&mut self, rec: &EventRecord<'_>, d: &DecodedEvent) {
        self.records += 1;
        self.decode_issues += d.decode_issue.is_some() as u64;
        self.pointer_size_fallbacks += d.layout_pointer_size.is_some() as u64;
        if d.is_decoded() {
            self.decoded += 1;
        } else {
            let k = d
                .provider_name
                .as_deref()
                .map(str::to_string)
                .unwrap_or_else(|| rec.provider.to_string());
            *self.undecoded_by_provider.entry(k).or_default() += 1;
        }
    }
    pub fn merge(&mut self, o: DecodeStats) {
        self.records += o.records;
        self.decoded += o.decoded;
        self.decode_issues += o.decode_issues;
        self.pointer_size_fallbacks += o.pointer_size_fallbacks;
        for (k, v) in o.undecoded_by_provider {
            *self.undecoded_by_provider.entry(k).or_default() += v;
        }
    }
}

/// `etwkit stats` with the decoding counts: which records `decoder` decodes (in the same parallel
/// pass as the container counts, checking layouts without building values).
pub fn file_stats(file: &crate::etl::EtlFile, decoder: &Decoder) -> crate::etl::stats::FileStats {
    #[derive(Default)]
    struct Acc {
        decoded: u64,
        issues: u64,
        fallbacks: u64,
        undecoded: std::collections::BTreeMap<Guid, u64>,
    }
    let (mut s, a) = crate::etl::stats::file_stats_and(
        file,
        Acc::default,
        |a: &mut Acc, r| {
            let c = decoder.check(&r.event);
            if c.decoded {
                a.decoded += 1;
            } else {
                *a.undecoded.entry(r.provider).or_default() += 1;
            }
            a.issues += c.issue as u64;
            a.fallbacks += c.pointer_size_fallback as u64;
        },
        |mut a, b| {
            a.decoded += b.decoded;
            a.issues += b.issues;
            a.fallbacks += b.fallbacks;
            for (k, v) in b.undecoded {
                *a.undecoded.entry(k).or_default() += v;
            }
            a
        },
    );
    s.decoded = Some(a.decoded);
    s.decode_issues = Some(a.issues);
    s.pointer_size_fallbacks = Some(a.fallbacks);
    s.undecoded_by_provider = a
        .undecoded
        .into_iter()
        .map(|(g, n)| (g.to_string(), n))
        .collect();
    s
}

/// A WPP MESSAGE record's raw fields (no TMF: the argument blob cannot be formatted).
fn wpp_fields(rec: &EventRecord<'_>) -> Properties {
    let mut p = Properties::default();
    p.push(
        "MessageNumber",
        Value::U64(rec.hook_id.unwrap_or(rec.descriptor.id) as u64),
    );
    p.push("MessageGuid", Value::Guid(rec.provider));
    p.push("PointerSize", Value::U64(rec.pointer_size as u64));
    p.push("Arguments", Value::Binary(rec.payload.to_vec()));
    p
}

/// The stack of `rec`: its EVENT_HEADER stack item, with kernel StackWalk frames from `index`
/// appended (either alone when only one exists).
pub fn record_stack(rec: &EventRecord<'_>, index: Option<&stacks::StackIndex>) -> Option<Stack> {
    let walked = index.and_then(|i| i.stack_for(rec));
    match (rec.stack(), walked) {
        (Some(mut own), Some(w)) => {
            own.addresses.extend(w.addresses);
            Some(own)
        }
        (own, w) => own.or(w),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_u64_matches_format() {
        for v in [0u64, 1, 0xf, 0x10, 0x7fe_ee02_3068, u64::MAX, 1 << 63] {
            assert_eq!(super::hex_u64(&mut [0; 18], v), format!("0x{v:x}"));
        }
    }

    use super::*;
    use crate::schema::Property;

    fn schema(props: Vec<Property>) -> EventSchema {
        EventSchema {
            provider: Guid::ZERO,
            provider_name: None,
            event_name: None,
            task_name: None,
            opcode_name: None,
            keywords_name: None,
            properties: props,
            source: SchemaSource::UserManifest,
        }
    }

    #[test]
    fn truncated_payload_names_property_and_offset() {
        let s = schema(vec![
            Property::scalar("A", it::UINT32, 0),
            Property::scalar("B", it::UINT64, 0),
        ]);
        let e = decode_properties(&s, &[1, 0, 0, 0, 2, 0], 8).unwrap_err();
        assert_eq!(e.property, "B");
        assert_eq!(e.offset, 4);
        assert_eq!(e.partial.get("A"), Some(&Value::U64(1)));
        assert!(e.to_string().contains("only 2 remain"), "{e}");
    }

    #[test]
    fn counts_lengths_and_renderings() {
        let mut bin = Property::scalar("Data", it::BINARY, 0);
        bin.length = Length::FromProperty(0);
        let mut arr = Property::scalar("Ports", it::UINT16, ot::PORT);
        arr.count = Count::FromProperty(1);
        let s = schema(vec![
            Property::scalar("Len", it::UINT8, 0),
            Property::scalar("N", it::UINT16, 0),
            bin,
            arr,
            Property::scalar("Ok", it::BOOLEAN, 0),
            Property::scalar("Addr", it::UINT32, ot::IPV4),
            Property::scalar("P", it::POINTER, 0),
            Property::scalar("Sid", it::WBEMSID, 0),
        ]);
        let mut p = vec![
            3u8, 2, 0, 0xaa, 0xbb, 0xcc, 0x00, 0x50, 0x01, 0xbb, 1, 0, 0, 0, 10, 0, 0, 1,
        ];
        p.extend_from_slice(&0xdead_beefu32.to_le_bytes());
        p.extend_from_slice(&[0xff; 8]); // TOKEN_USER (32-bit: 2 × 4 bytes)
        p.extend_from_slice(&[1, 1, 0, 0, 0, 0, 0, 5, 18, 0, 0, 0]);
        let v = decode_properties(&s, &p, 4).unwrap();
        let j = serde_json::to_string(&v).unwrap();
        assert_eq!(
            j,
            r#"{"Len":3,"N":2,"Data":"0xaabbcc","Ports":[80,443],"Ok":true,"Addr":"10.0.0.1","P":"0xdeadbeef","Sid":"S-1-5-18"}"#
        );
    }
}
