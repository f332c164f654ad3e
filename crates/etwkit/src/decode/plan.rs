//! Plans: a schema compiled once (names shared, types resolved) and one walk over a payload that
//! decodes values, measures, or drives a [`PropertyVisitor`] straight from the bytes.

use std::sync::Arc;

use crate::schema::types::{in_type as it, out_type as ot};
use crate::schema::{
    Count, EventSchema, InType, Length, OutType, Property, PropertyKind, SchemaSource, ValueMap,
};

use super::bitmaps::{MapRef, DOTNET_FLAG_PROVIDERS};
use super::compiled::{Compiled, Keys};
use super::scalar::*;
use super::visit::{NoVisit, PropertyVisitor};
use super::{DecodeError, Properties, Value};

#[derive(Debug)]
pub(crate) struct PlanField {
    pub(crate) name: Arc<str>,
    pub(crate) in_type: InType,
    pub(crate) out_type: OutType,
    pub(crate) count: Count,
    pub(crate) length: Length,
    pub(crate) map: Option<Arc<ValueMap>>,
    /// Bitmap names as .NET prints a `[Flags]` enum (`"ReadWrite, Delete"`): the maps of layouts
    /// TraceEvent decodes with its compiled parsers (kernel classes, built-in manifests). Maps of
    /// manifests read at run time join names with `|`, as TraceEvent's dynamic parser does.
    pub(crate) dotnet_flags: bool,
    pub(crate) members: Option<Vec<PlanField>>,
    /// Another field of this level takes its count or length from this one.
    pub(crate) referenced: bool,
    /// How the visiting walk reads this field without building a value (see [`Fast`]).
    pub(crate) fast: Fast,
    /// The name is printable ASCII without `"` or `\` (no text format needs to escape it).
    pub(crate) plain_name: bool,
    /// A top-level field naming the record's process (1) or thread (2) — kernel records whose
    /// header carries no pid/tid take them from here — or a file path (3) that may have a DOS form.
    pub(crate) ids: u8,
}

/// A compiled [`EventSchema`].
#[derive(Debug)]
pub struct Plan {
    pub(crate) fields: Vec<PlanField>,
    /// The schema's names, shared by every decoded event (no allocation per record).
    pub(crate) names: PlanNames,
    /// Unique to this plan in the process (never 0, never reused): with the provider, it says
    /// which names a record decoded with it shows (see `EventView::names_id`).
    pub(crate) id: u64,
    /// The top level as a flat list of operations, when it can be (see [`Compiled`]).
    pub(crate) compiled: Option<Compiled>,
}

/// The next [`Plan::id`].
static PLAN_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

#[derive(Debug, Default)]
pub(crate) struct PlanNames {
    pub(crate) provider: Option<Arc<str>>,
    pub(crate) event: Option<Arc<str>>,
    pub(crate) task: Option<Arc<str>>,
    pub(crate) opcode: Option<Arc<str>>,
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
                if f.map.is_some() {
                    f.fast = Fast::No;
                }
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
            compiled: Compiled::new(&fields),
            fields,
            id: PLAN_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
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
    pub(crate) fn decode_ids(
        &self,
        payload: &[u8],
        pointer_size: u8,
    ) -> (Result<(Properties, usize), DecodeError>, PayloadIds) {
        let mut cur = Cursor::new(payload, pointer_size, true);
        let mut out = Properties(Vec::with_capacity(self.fields.len()));
        let r = match decode_level(
            &self.fields,
            &mut cur,
            &mut Dest::<NoVisit>::Props(&mut out),
        ) {
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
    pub(crate) fn payload_ids(&self, payload: &[u8], pointer_size: u8) -> PayloadIds {
        if let Some(c) = &self.compiled {
            let mut cur = Cursor::new(payload, pointer_size, true);
            if c.run(&self.fields, &mut cur, &mut NoVisit, None, true)
                .is_ok()
            {
                return cur.captured();
            }
        }
        let mut cur = Cursor::new(payload, pointer_size, true);
        let _ = decode_level(&self.fields, &mut cur, &mut Dest::<NoVisit>::Measure);
        cur.captured()
    }
}

/// What a walk picked up from top-level fields: the process and thread ids the payload names
/// (ProcessId/ThreadId-like fields) and its first file path field (FileName, OpenPath).
#[derive(Clone, Debug, Default)]
pub(crate) struct PayloadIds {
    pub(crate) pid: Option<u64>,
    pub(crate) tid: Option<u64>,
    pub(crate) path: Option<(usize, PathText)>,
}

/// A file path field's text: the UTF-16 bytes of the payload in this range (the compiled walk, no
/// allocation), or decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PathText {
    Utf16(std::ops::Range<usize>),
    Text(String),
}

impl Cursor<'_> {
    pub(crate) fn captured(&mut self) -> PayloadIds {
        PayloadIds {
            pid: self.pid,
            tid: self.tid,
            path: self.path.take(),
        }
    }
}

impl Plan {
    /// Drives `v` with the payload's properties (the same callbacks [`Properties::visit`] makes
    /// for [`Plan::decode`]'s result) straight from the bytes, and returns the bytes consumed and
    /// the ids the payload names. On error the walk stops part-way (nothing closed): callers
    /// discard what `v` got and take the value path.
    pub(crate) fn visit<V: PropertyVisitor>(
        &self,
        payload: &[u8],
        pointer_size: u8,
        v: &mut V,
    ) -> Result<(usize, PayloadIds), ()> {
        self.visit_keyed(payload, pointer_size, v, None)
    }

    /// As [`Plan::visit`], with the key text of each field in `v`'s format (built by
    /// [`Plan::keys`] for this plan) handed to [`PropertyVisitor::field_text`].
    pub(crate) fn visit_keyed<V: PropertyVisitor>(
        &self,
        payload: &[u8],
        pointer_size: u8,
        v: &mut V,
        keys: Option<&Keys>,
    ) -> Result<(usize, PayloadIds), ()> {
        let mut cur = Cursor::new(payload, pointer_size, true);
        v.begin_struct();
        match &self.compiled {
            Some(c) => c.run(&self.fields, &mut cur, v, keys, false)?,
            None => decode_level(&self.fields, &mut cur, &mut Dest::Visit(v)).map_err(|_| ())?,
        }
        v.end_struct();
        Ok((cur.pos, cur.captured()))
    }

    /// The generic walk of [`Plan::visit`], even when the plan is compiled (tests compare both).
    #[cfg(test)]
    pub(crate) fn visit_generic<V: PropertyVisitor>(
        &self,
        payload: &[u8],
        pointer_size: u8,
        v: &mut V,
    ) -> Result<(usize, PayloadIds), ()> {
        let mut cur = Cursor::new(payload, pointer_size, true);
        v.begin_struct();
        decode_level(&self.fields, &mut cur, &mut Dest::Visit(v)).map_err(|_| ())?;
        v.end_struct();
        Ok((cur.pos, cur.captured()))
    }

    /// The generic measuring walk (tests compare it with the compiled one).
    #[cfg(test)]
    pub(crate) fn measure_generic(
        &self,
        payload: &[u8],
        pointer_size: u8,
    ) -> Option<(usize, bool)> {
        let mut cur = Cursor::new(payload, pointer_size, false);
        decode_level(&self.fields, &mut cur, &mut Dest::<NoVisit>::Measure).ok()?;
        Some((cur.pos, cur.unterminated))
    }

    /// The compiled measuring walk: bytes taken and whether a string lacked its terminator;
    /// `None` when the layout is not compiled or the walk fails.
    pub(crate) fn measure_compiled(
        &self,
        payload: &[u8],
        pointer_size: u8,
    ) -> Option<(usize, bool)> {
        let c = self.compiled.as_ref()?;
        if let Some(n) = c.fixed_size(pointer_size) {
            return (n <= payload.len()).then_some((n, false));
        }
        let mut cur = Cursor::new(payload, pointer_size, false);
        c.measure(&self.fields, &mut cur).ok()?;
        Some((cur.pos, cur.unterminated))
    }

    /// The key text of each field of a compiled plan as `field` renders it (a text visitor's
    /// `field` callback writing to the buffer): what [`Plan::visit_keyed`] copies instead.
    pub(crate) fn keys(&self, field: impl FnMut(&mut Vec<u8>, usize, &str)) -> Option<Keys> {
        Some(self.compiled.as_ref()?.keys(&self.fields, field))
    }

    /// As [`Plan::measure`], but `None` unless every terminated string has its terminator: a
    /// string running to the end of the payload would make any layout "fit".
    pub(crate) fn measure_strict(&self, payload: &[u8], pointer_size: u8) -> Option<usize> {
        if let Some((n, unterminated)) = self.measure_compiled(payload, pointer_size) {
            return (!unterminated).then_some(n);
        }
        let mut cur = Cursor::new(payload, pointer_size, false);
        decode_level(&self.fields, &mut cur, &mut Dest::<NoVisit>::Measure).ok()?;
        (!cur.unterminated).then_some(cur.pos)
    }

    /// How many payload bytes the properties take, without building values (no allocation): what
    /// `etwkit stats` needs to count records whose layout leaves bytes unread or runs short.
    pub fn measure(&self, payload: &[u8], pointer_size: u8) -> Result<usize, DecodeError> {
        if let Some((n, _)) = self.measure_compiled(payload, pointer_size) {
            return Ok(n);
        }
        let mut cur = Cursor::new(payload, pointer_size, false);
        match decode_level(&self.fields, &mut cur, &mut Dest::<NoVisit>::Measure) {
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

/// The shortcut of a scalar field with no map: the visitor callback its value makes, read straight
/// from the bytes (exactly what `build_value(..).visit(..)` gives; anything else is `No`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fast {
    /// The generic path.
    No,
    /// An unsigned little-endian integer of this many bytes (0: the pointer size), in decimal.
    Dec(u8),
    /// A signed little-endian integer of this many bytes, in decimal.
    SDec(u8),
    /// An unsigned little-endian integer of this many bytes (0: the pointer size), hex-typed.
    Hex(u8),
    /// A pointer (of the pointer size).
    Ptr,
    /// A NUL-terminated UTF-16 string.
    Utf16Z,
}

impl Fast {
    fn of(in_t: InType, out: OutType, length: &Length) -> Fast {
        let dec_out = matches!(
            out,
            ot::NULL
                | ot::UNSIGNEDBYTE
                | ot::UNSIGNEDSHORT
                | ot::UNSIGNEDINT
                | ot::UNSIGNEDLONG
                | ot::PID
                | ot::TID
        );
        let hex_out = matches!(
            out,
            ot::HEXINT8 | ot::HEXINT16 | ot::HEXINT32 | ot::HEXINT64
        );
        let width = match in_t {
            it::UINT8 | it::INT8 => 1,
            it::UINT16 | it::INT16 => 2,
            it::UINT32 | it::INT32 => 4,
            it::UINT64 | it::INT64 => 8,
            _ => 0,
        };
        match in_t {
            it::UINT8 | it::UINT16 | it::UINT32 | it::UINT64 if dec_out => Fast::Dec(width),
            it::UINT8 | it::UINT16 | it::UINT32 | it::UINT64 if hex_out => Fast::Hex(width),
            it::INT8 | it::INT16 | it::INT32 | it::INT64 if out == ot::NULL => Fast::SDec(width),
            it::HEXINT32 => Fast::Hex(4),
            it::HEXINT64 => Fast::Hex(8),
            it::POINTER if matches!(out, ot::UNSIGNEDLONG | ot::UNSIGNEDINT | ot::LONG) => {
                Fast::Dec(0)
            }
            it::POINTER => Fast::Ptr,
            it::SIZET if matches!(out, ot::HEXINT64 | ot::HEXINT32) => Fast::Hex(0),
            it::SIZET => Fast::Dec(0),
            it::UNICODESTRING if *length == Length::Natural => Fast::Utf16Z,
            _ => Fast::No,
        }
    }
}

pub(crate) fn compile(props: &[Property], dotnet_flags: bool) -> Vec<PlanField> {
    let mut fields: Vec<PlanField> = props
        .iter()
        .map(|p| {
            let (in_type, out_type, members) = match &p.kind {
                PropertyKind::Scalar { in_type, out_type } => (*in_type, *out_type, None),
                PropertyKind::Struct(m) => (0, 0, Some(compile(m, dotnet_flags))),
            };
            let fast = if p.map.is_some() || members.is_some() {
                Fast::No
            } else {
                Fast::of(in_type, out_type, &p.length)
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
                fast,
                plain_name: p
                    .name
                    .bytes()
                    .all(|c| (0x20..0x7f).contains(&c) && c != b'"' && c != b'\\'),
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

pub(crate) struct Cursor<'a> {
    pub(crate) d: &'a [u8],
    pub(crate) pos: usize,
    pub(crate) ptr: u8,
    /// A terminated string ran to the end of the payload without its terminator.
    pub(crate) unterminated: bool,
    /// Values of the top-level fields naming the record's process and thread (see `PlanField::ids`).
    pub(crate) pid: Option<u64>,
    pub(crate) tid: Option<u64>,
    /// The first top-level file path field: its index and text.
    pub(crate) path: Option<(usize, PathText)>,
    /// Whether to pick up `pid`, `tid` and `path` (not when only measuring).
    pub(crate) capture: bool,
}

pub(crate) struct Fail {
    pub(crate) path: String,
    pub(crate) offset: usize,
    pub(crate) reason: String,
}

impl<'a> Cursor<'a> {
    /// A cursor at the payload's start; `pointer_size` 4 reads 32-bit pointers, anything else 64.
    /// `capture` picks up the ids and path the plan marks (not when only measuring).
    pub(crate) fn new(d: &'a [u8], pointer_size: u8, capture: bool) -> Cursor<'a> {
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

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
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
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let s = &self.d[self.pos.min(self.d.len())..];
        self.pos = self.d.len();
        s
    }
    pub(crate) fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().unwrap_or_default(),
        ))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }
}

/// Where a walk puts what it reads.
pub(crate) enum Dest<'o, V> {
    /// Nowhere: the walk only measures (no allocation).
    Measure,
    /// Values, pushed to a property list.
    Props(&'o mut Properties),
    /// Typed callbacks to a visitor.
    Visit(&'o mut V),
}

impl<V> Dest<'_, V> {
    fn reborrow(&mut self) -> Dest<'_, V> {
        match self {
            Dest::Measure => Dest::Measure,
            Dest::Props(p) => Dest::Props(p),
            Dest::Visit(v) => Dest::Visit(v),
        }
    }
}

/// Bytes the fields after a [`Count::IfRoom`] field take when all of them are single fixed-size
/// scalars (the field is present only when the payload holds more than that); 0 when any of them
/// is not (the field is then present while any byte remains).
fn room_after(rest: &[PlanField], ptr: u8) -> usize {
    let mut n = 0;
    for f in rest {
        let w = match (f.in_type, &f.members, &f.count, &f.length) {
            (_, Some(_), _, _) | (_, _, Count::IfRoom, _) => return 0,
            (t, None, Count::One, Length::Natural) => match t {
                it::INT8 | it::UINT8 => 1,
                it::INT16 | it::UINT16 => 2,
                it::INT32 | it::UINT32 | it::BOOLEAN | it::HEXINT32 | it::FLOAT => 4,
                it::INT64 | it::UINT64 | it::HEXINT64 | it::DOUBLE | it::FILETIME => 8,
                it::POINTER | it::SIZET => ptr as usize,
                it::GUID | it::SYSTEMTIME => 16,
                _ => return 0,
            },
            _ => return 0,
        };
        n += w;
    }
    n
}

/// Walks one level of fields into `out`. Decoding, measuring and visiting all go through this
/// walk, so they agree on every byte.
pub(crate) fn decode_level<V: PropertyVisitor>(
    fields: &[PlanField],
    cur: &mut Cursor<'_>,
    out: &mut Dest<'_, V>,
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
    let mut left_out = 0;
    for (idx, f) in fields.iter().enumerate() {
        let start = cur.pos;
        if f.count == Count::IfRoom
            && start + room_after(&fields[idx + 1..], cur.ptr) >= cur.d.len()
        {
            left_out += 1;
            continue;
        }
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
            Count::One | Count::IfRoom => None,
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
        if let Dest::Visit(v) = out {
            // The visitor counts the properties the record has: a field left out (IfRoom) takes
            // no index, as it takes no place in the decoded properties.
            if f.plain_name {
                v.plain_field(idx - left_out, &f.name);
            } else {
                v.field(idx - left_out, &f.name);
            }
        }
        let want = f.referenced || (cur.capture && f.ids != 0);
        if let (None, false, Dest::Visit(v)) = (n, want, &mut *out) {
            // The common case, without the call: a plain scalar nobody refers to.
            if f.fast != Fast::No && fast_visit(f.fast, cur, *v, None) {
                continue;
            }
        }
        match n {
            None => match one(f, cur, len, out, want) {
                Ok(v) => {
                    nums[idx] = v.as_ref().and_then(Value::as_u64);
                    match if cur.capture { f.ids } else { 0 } {
                        1 => cur.pid = nums[idx],
                        2 => cur.tid = nums[idx],
                        3 if cur.path.is_none() => {
                            if let Some(Value::String(p)) = &v {
                                cur.path = Some((idx, PathText::Text(p.clone())));
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
                let mut first = 0;
                if let Dest::Visit(v) = out {
                    v.begin_array(n);
                    // Plain numbers straight from the bytes, in one tight loop; an element that
                    // runs past the payload is left to the general loop, which reports it.
                    if f.fast != Fast::No {
                        first = fast_array(f.fast, cur, *v, n);
                    }
                }
                for i in first..n {
                    if let Dest::Visit(v) = out {
                        v.element(i);
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
                    Dest::Visit(v) => v.end_array(),
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
pub(crate) fn one<V: PropertyVisitor>(
    f: &PlanField,
    cur: &mut Cursor<'_>,
    len: Option<u64>,
    out: &mut Dest<'_, V>,
    want: bool,
) -> Result<Option<Value>, Fail> {
    let at = cur.pos;
    if let Some(members) = &f.members {
        return match out {
            Dest::Props(_) => {
                let mut p = Properties(Vec::with_capacity(members.len()));
                decode_level(members, cur, &mut Dest::<V>::Props(&mut p))?;
                Ok(Some(Value::Struct(p)))
            }
            Dest::Visit(v) => {
                v.begin_struct();
                decode_level(members, cur, &mut out.reborrow())?;
                if let Dest::Visit(v) = out {
                    v.end_struct();
                }
                Ok(None)
            }
            Dest::Measure => decode_level(members, cur, &mut Dest::<V>::Measure).map(|()| None),
        };
    }
    if let Dest::Visit(v) = &mut *out {
        if !want {
            if f.fast != Fast::No && fast_visit(f.fast, cur, *v, None) {
                return Ok(None);
            }
        } else if let Some(x) = fast_unsigned(f.fast, cur) {
            // A count, length or id others need: the value `build_value` makes, visited as
            // it would be.
            let value = match f.fast {
                Fast::Hex(_) => Value::Hex(x),
                Fast::Ptr => Value::Pointer(x),
                _ => Value::U64(x),
            };
            value.visit(*v);
            return Ok(Some(value));
        }
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
        Dest::Visit(vis) => {
            if want {
                let v = build_value(f.in_type, f.out_type, map, b, len);
                v.visit(*vis);
                Ok(Some(v))
            } else {
                visit_scalar(f.in_type, f.out_type, map, b, len, *vis);
                Ok(None)
            }
        }
        Dest::Measure if want => Ok(Some(build_value(f.in_type, f.out_type, map, b, len))),
        Dest::Measure => Ok(None),
    }
}

/// Hands a [`Fast`] field's value to `v` and moves past it (announcing it as element `elem` of an
/// array first, when given); false (nothing called, cursor unmoved) when its bytes run past the
/// payload, for the generic path to report.
#[inline]
fn fast_visit<V: PropertyVisitor>(
    fast: Fast,
    cur: &mut Cursor<'_>,
    v: &mut V,
    elem: Option<u64>,
) -> bool {
    let (w, signed, hex) = match fast {
        Fast::Dec(w) => (w, false, false),
        Fast::SDec(w) => (w, true, false),
        Fast::Hex(w) => (w, false, true),
        Fast::Ptr => (0, false, false),
        Fast::Utf16Z => {
            let b = cstr16(cur);
            if let Some(i) = elem {
                v.element(i);
            }
            v.utf16(b);
            return true;
        }
        Fast::No => return false,
    };
    let w = if w == 0 { cur.ptr as usize } else { w as usize };
    let Some(b) = cur.d.get(cur.pos..cur.pos + w) else {
        return false;
    };
    cur.pos += w;
    if let Some(i) = elem {
        v.element(i);
    }
    let x = le(b);
    if fast == Fast::Ptr {
        v.pointer(x);
    } else if hex {
        v.hex(x);
    } else if signed {
        v.signed(match w {
            1 => x as u8 as i8 as i64,
            2 => x as u16 as i16 as i64,
            4 => x as u32 as i32 as i64,
            _ => x as i64,
        });
    } else {
        v.unsigned(x);
    }
    true
}

/// The value of an unsigned [`Fast`] field (decimal, hex or pointer), the cursor moved past it;
/// `None` (cursor unmoved) for other fields and when its bytes run past the payload.
#[inline]
fn fast_unsigned(fast: Fast, cur: &mut Cursor<'_>) -> Option<u64> {
    let w = match fast {
        Fast::Dec(w) | Fast::Hex(w) => w,
        Fast::Ptr => 0,
        _ => return None,
    };
    let w = if w == 0 { cur.ptr as usize } else { w as usize };
    let b = cur.d.get(cur.pos..cur.pos + w)?;
    cur.pos += w;
    Some(le(b))
}

/// The elements of an array of [`Fast`] fields handed to `v` (each announced with `element`)
/// while whole ones remain in the payload; returns how many. Fixed-width elements are read in
/// one loop over their bytes, the kind and width settled once.
#[inline]
fn fast_array<V: PropertyVisitor>(fast: Fast, cur: &mut Cursor<'_>, v: &mut V, n: u64) -> u64 {
    let w = match fast {
        Fast::Dec(w) | Fast::SDec(w) | Fast::Hex(w) => w,
        Fast::Ptr => 0,
        Fast::Utf16Z | Fast::No => {
            let mut i = 0;
            while i < n && fast_visit(fast, cur, v, Some(i)) {
                i += 1;
            }
            return i;
        }
    };
    let w = if w == 0 { cur.ptr as usize } else { w as usize };
    let whole = (cur.d.len().saturating_sub(cur.pos) / w) as u64;
    let m = n.min(whole);
    let bytes = &cur.d[cur.pos..cur.pos + m as usize * w];
    cur.pos += bytes.len();
    match (fast, w) {
        (Fast::Ptr, 4) => elements(bytes, 4, v, |v, c| {
            v.pointer(u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u64)
        }),
        (Fast::Ptr, _) => elements(bytes, w, v, |v, c| v.pointer(le(c))),
        (Fast::Hex(_), _) => elements(bytes, w, v, |v, c| v.hex(le(c))),
        (Fast::SDec(_), _) => elements(bytes, w, v, |v, c| {
            let x = le(c);
            v.signed(match w {
                1 => x as u8 as i8 as i64,
                2 => x as u16 as i16 as i64,
                4 => x as u32 as i32 as i64,
                _ => x as i64,
            })
        }),
        _ => elements(bytes, w, v, |v, c| v.unsigned(le(c))),
    }
    m
}

/// Each `w`-byte element of `bytes`, announced to `v` and handed to `f`.
#[inline(always)]
fn elements<V: PropertyVisitor>(
    bytes: &[u8],
    w: usize,
    v: &mut V,
    mut f: impl FnMut(&mut V, &[u8]),
) {
    for (i, c) in bytes.chunks_exact(w).enumerate() {
        v.element(i as u64);
        f(v, c);
    }
}

/// Hands a scalar to `v` as `build_value(..).visit(..)` would, without building strings and byte
/// vectors for text and binaries.
pub(crate) fn visit_scalar<V: PropertyVisitor>(
    in_t: InType,
    out: OutType,
    map: Option<MapRef<'_>>,
    b: &[u8],
    len: Option<u64>,
    v: &mut V,
) {
    // A named integer: the map's own name, not a copy of it in a value.
    if let Some(m) = map {
        if matches!(
            in_t,
            it::INT8
                | it::UINT8
                | it::INT16
                | it::UINT16
                | it::INT32
                | it::UINT32
                | it::INT64
                | it::UINT64
                | it::BOOLEAN
        ) {
            let u = le(b);
            return match super::bitmaps::map_name_ref(m, u) {
                Some(name) => v.mapped(u, &name),
                None => build_value(in_t, out, None, b, len).visit(v),
            };
        }
    }
    match in_t {
        it::UNICODESTRING if len.is_none() => v.utf16(b),
        it::UNICODESTRING
        | it::MANIFEST_COUNTEDSTRING
        | it::COUNTEDSTRING
        | it::REVERSEDCOUNTEDSTRING => v.utf16(trim_nuls_utf16(b)),
        it::NONNULLTERMINATEDSTRING | it::UNICODECHAR => v.utf16(b),
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
                Ok(s) => v.str(s),
                Err(_) => v.latin1(t),
            }
        }
        it::BINARY | it::MANIFEST_COUNTEDBINARY
            if !matches!(
                out,
                ot::IPV6 | ot::IPV4 | ot::SOCKETADDRESS | ot::STRING | ot::UTF8
            ) =>
        {
            v.binary(b)
        }
        it::HEXDUMP => v.binary(b),
        _ => build_value(in_t, out, map, b, len).visit(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guid::Guid;
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

    #[test]
    fn a_field_read_if_room_is_there_or_left_out() {
        let mut name = Property::scalar("ThreadName", it::UNICODESTRING, 0);
        name.count = Count::IfRoom;
        let s = schema(vec![Property::scalar("Tid", it::UINT32, 0), name]);
        let plan = Plan::new(&s);
        // An older build's payload ends before the field: no property, nothing unread.
        let (v, used) = plan.decode_counted(&[7, 0, 0, 0], 8).unwrap();
        assert_eq!(
            (serde_json::to_string(&v).unwrap(), used),
            (r#"{"Tid":7}"#.into(), 4)
        );
        // A newer one carries it, empty or not.
        let (v, used) = plan.decode_counted(&[7, 0, 0, 0, 0, 0], 8).unwrap();
        assert_eq!(
            (serde_json::to_string(&v).unwrap(), used),
            (r#"{"Tid":7,"ThreadName":""}"#.into(), 6)
        );
        let (v, _) = plan
            .decode_counted(&[7, 0, 0, 0, b'a', 0, b'b', 0, 0, 0], 8)
            .unwrap();
        assert_eq!(v.get("ThreadName"), Some(&Value::String("ab".into())));
    }

    #[test]
    fn a_field_read_if_room_leaves_the_fixed_fields_after_it_their_bytes() {
        // GCPerHeapHistory v2's tail: .NET 4.5.2 added ExtraGen0Commit before the instance byte.
        let mut extra = Property::scalar("Extra", it::UINT64, 0);
        extra.count = Count::IfRoom;
        let fields = vec![
            Property::scalar("Heap", it::UINT32, 0),
            extra,
            Property::scalar("Ptr", it::POINTER, ot::UNSIGNEDLONG),
            Property::scalar("Id", it::UINT8, 0),
        ];
        let plan = Plan::new(&schema(fields.clone()));
        let older = [1, 0, 0, 0, 2, 0, 0, 0, 9];
        let (v, used) = plan.decode_counted(&older, 4).unwrap();
        assert_eq!(
            (serde_json::to_string(&v).unwrap(), used),
            (r#"{"Heap":1,"Ptr":2,"Id":9}"#.into(), 9)
        );
        let mut newer = older[..4].to_vec();
        newer.extend(5u64.to_le_bytes());
        newer.extend(&older[4..]);
        let (v, used) = plan.decode_counted(&newer, 4).unwrap();
        assert_eq!(
            (serde_json::to_string(&v).unwrap(), used),
            (r#"{"Heap":1,"Extra":5,"Ptr":2,"Id":9}"#.into(), 17)
        );
        // The pointer after it is 8 bytes in a 64-bit record: 4 more bytes than the older 32-bit
        // payload leaves no room for the field either.
        let mut wide = older[..8].to_vec();
        wide.extend([0, 0, 0, 0, 9]);
        let (v, used) = plan.decode_counted(&wide, 8).unwrap();
        assert_eq!(
            (serde_json::to_string(&v).unwrap(), used),
            (r#"{"Heap":1,"Ptr":2,"Id":9}"#.into(), 13)
        );
        // A variable-length field after it: read while any byte remains, as before.
        let mut tail = fields;
        tail[3] = Property::scalar("Name", it::ANSISTRING, 0);
        let plan = Plan::new(&schema(tail));
        let e = plan.decode_counted(&older, 4).unwrap_err();
        assert_eq!((e.property.as_str(), e.offset), ("Extra", 4));
    }

    #[test]
    fn a_field_left_out_takes_no_index_in_a_text_walk() {
        // Left out as a level's first field, the next one is the first a text format writes.
        let mut extra = Property::scalar("Extra", it::UINT64, 0);
        extra.count = Count::IfRoom;
        let plan = Plan::new(&schema(vec![extra, Property::scalar("Id", it::UINT8, 0)]));
        for (payload, want) in [
            (&[9][..], r#"{"Id":9}"#),
            (&[5, 0, 0, 0, 0, 0, 0, 0, 9][..], r#"{"Extra":5,"Id":9}"#),
        ] {
            let mut out = Vec::new();
            let mut scratch = String::new();
            let mut v = crate::sink::json::JsonProps::new(&mut out, &mut scratch);
            let (used, _) = plan.visit(payload, 8, &mut v).unwrap();
            assert_eq!(used, payload.len());
            assert_eq!(String::from_utf8(out).unwrap(), want);
        }
    }
}
