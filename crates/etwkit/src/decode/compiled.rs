//! A plan's top level compiled once into a flat list of operations, for the layouts (most of them)
//! made of fixed-width integers, pointers, NUL-terminated UTF-16 strings, mapped integers and
//! arrays of fixed-width elements. The visiting and measuring walks run it instead of the generic
//! [`decode_level`](super::plan::decode_level) walk: no per-field matching of counts, lengths and
//! destinations, no value built for the fields others refer to, a constant size for layouts of
//! fixed-width fields. Any field it has no operation for runs the generic one-field walk; a layout
//! it cannot express at all (a count or length from a later or non-integer field, prefixed
//! counts) keeps the generic walk. Both walks give the same callbacks, the same length and the same
//! ids (tested over every layout met in the samples); on any failure the callers take the generic
//! route, which reports it.

use crate::schema::types::in_type as it;
use crate::schema::{Count, Length};

use super::bitmaps::MapRef;
use super::plan::{one, visit_scalar, Cursor, Dest, Fast, PlanField};
use super::scalar::{cstr16, le};
use super::visit::{NoVisit, PropertyVisitor, KEY_BLOCK};

/// Most fields a count or length may refer to in a compiled layout.
const SLOTS: usize = 8;
const NO_SLOT: u8 = u8::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ArrCount {
    Fixed(u64),
    /// The value of an earlier integer field (its slot).
    Slot(u8),
    /// Whole elements up to the end of the payload.
    ToEnd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Len {
    Natural,
    Fixed(u64),
    Slot(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// One [`Fast`] scalar (not `Fast::No`).
    Scalar(Fast),
    /// An array of [`Fast`] elements.
    Array(Fast, ArrCount),
    /// An integer of this many bytes with a value map or bitmap.
    Mapped(u8),
    /// Anything else of count one: the generic one-field walk.
    Other(Len),
}

/// What the visiting walk does for a field: [`Kind`] with the scalar kinds spelled out (one
/// dispatch per field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Code {
    /// Unsigned, signed or hex-typed integers of this many bytes (0: the pointer size); the usual
    /// widths spelled out.
    Dec1,
    Dec2,
    Dec4,
    Dec8,
    Hex4,
    Hex8,
    Dec(u8),
    SDec(u8),
    Hex(u8),
    Ptr,
    Utf16Z,
    /// Anything else: as its [`Kind`].
    Kind,
}

#[derive(Debug)]
struct Op {
    /// The field's index in its level, and its name.
    idx: u16,
    name: std::sync::Arc<str>,
    kind: Kind,
    code: Code,
    /// The field has a slot or ids to fill.
    extra: bool,
    /// Where its value goes for the fields that refer to it (`NO_SLOT`: nowhere).
    slot: u8,
    /// `PlanField::ids`.
    ids: u8,
}

/// A step of the measuring walk: what the fields take, runs of fixed-width fields merged.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Fixed-width fields nobody refers to: this many bytes with 4- and 8-byte pointers.
    Skip([u32; 2]),
    /// An integer field others refer to: its width (0: the pointer size) and slot.
    Read(u8, u8),
    /// A NUL-terminated UTF-16 string.
    Utf16Z,
    /// An array of fixed-width elements (0: the pointer size), or of strings (`None`).
    Array(Option<u8>, ArrCount),
    /// A field of the generic walk (its index).
    Other(u16, Len),
}

/// The compiled top level of a [`super::Plan`].
#[derive(Debug)]
pub(crate) struct Compiled {
    ops: Vec<Op>,
    steps: Vec<Step>,
    /// The bytes the layout takes with 4- and 8-byte pointers, when every field has a fixed width.
    fixed: Option<[usize; 2]>,
}

/// The width of a fixed-width [`Fast`] kind (0: the pointer size); `None` for strings.
fn width(f: Fast) -> Option<u8> {
    match f {
        Fast::Dec(w) | Fast::SDec(w) | Fast::Hex(w) => Some(w),
        Fast::Ptr => Some(0),
        Fast::Utf16Z | Fast::No => None,
    }
}

/// Whether a field's value, as the generic walk keeps it for references and ids, is the plain
/// unsigned integer read from its bytes.
fn unsigned(f: Fast) -> bool {
    matches!(f, Fast::Dec(_) | Fast::Hex(_) | Fast::Ptr)
}

fn int_width(in_t: crate::schema::InType) -> Option<u8> {
    Some(match in_t {
        it::INT8 | it::UINT8 => 1,
        it::INT16 | it::UINT16 => 2,
        it::INT32 | it::UINT32 | it::BOOLEAN => 4,
        it::INT64 | it::UINT64 => 8,
        _ => return None,
    })
}

impl Compiled {
    /// Compiles a top level; `None` when some field cannot be expressed.
    pub(crate) fn new(fields: &[PlanField]) -> Option<Compiled> {
        let mut slots = vec![NO_SLOT; fields.len()];
        let mut next = 0u8;
        let mut ops = Vec::with_capacity(fields.len());
        let slot_of = |slots: &[u8], j: usize, idx: usize| -> Option<u8> {
            (j < idx).then(|| slots[j]).filter(|&s| s != NO_SLOT)
        };
        for (idx, f) in fields.iter().enumerate() {
            let kind = match f.count {
                Count::One => {
                    let scalar_len_ok = matches!(f.length, Length::Natural | Length::Fixed(_));
                    if f.fast != Fast::No && scalar_len_ok {
                        Kind::Scalar(f.fast)
                    } else if let (Some(_), None, Some(w), Length::Natural) =
                        (&f.map, &f.members, int_width(f.in_type), &f.length)
                    {
                        Kind::Mapped(w)
                    } else {
                        Kind::Other(match f.length {
                            Length::Natural => Len::Natural,
                            Length::Fixed(n) => Len::Fixed(n as u64),
                            Length::FromProperty(j) => Len::Slot(slot_of(&slots, j, idx)?),
                        })
                    }
                }
                // Present or not by the payload's length: the generic walk decides.
                Count::IfRoom => return None,
                _ if f.members.is_some() || f.map.is_some() || f.fast == Fast::No => return None,
                _ if matches!(f.length, Length::FromProperty(_)) => return None,
                Count::Fixed(n) => Kind::Array(f.fast, ArrCount::Fixed(n as u64)),
                Count::FromProperty(j) => {
                    Kind::Array(f.fast, ArrCount::Slot(slot_of(&slots, j, idx)?))
                }
                Count::ToEnd => {
                    // The generic walk sizes elements by in-type; these are the fixed-width ones.
                    match f.in_type {
                        it::POINTER
                        | it::SIZET
                        | it::INT8
                        | it::UINT8
                        | it::INT16
                        | it::UINT16
                        | it::INT32
                        | it::UINT32
                        | it::HEXINT32
                        | it::INT64
                        | it::UINT64
                        | it::HEXINT64
                            if width(f.fast).is_some() =>
                        {
                            Kind::Array(f.fast, ArrCount::ToEnd)
                        }
                        _ => return None,
                    }
                }
                Count::Prefixed => return None,
            };
            let scalar = match kind {
                Kind::Scalar(fast) => Some(fast),
                _ => None,
            };
            // Ids and referenced values are taken only from plain unsigned scalars (the generic
            // walk's values of other kinds convert differently), paths only from strings.
            match f.ids {
                0 => {}
                1 | 2 if scalar.is_some_and(unsigned) => {}
                3 if scalar == Some(Fast::Utf16Z) => {}
                _ => return None,
            }
            let mut slot = NO_SLOT;
            if f.referenced {
                if !scalar.is_some_and(unsigned) || next as usize >= SLOTS {
                    return None;
                }
                slot = next;
                slots[idx] = next;
                next += 1;
            }
            ops.push(Op {
                idx: idx as u16,
                name: f.name.clone(),
                kind,
                code: match kind {
                    Kind::Scalar(Fast::Dec(1)) => Code::Dec1,
                    Kind::Scalar(Fast::Dec(2)) => Code::Dec2,
                    Kind::Scalar(Fast::Dec(4)) => Code::Dec4,
                    Kind::Scalar(Fast::Dec(8)) => Code::Dec8,
                    Kind::Scalar(Fast::Hex(4)) => Code::Hex4,
                    Kind::Scalar(Fast::Hex(8)) => Code::Hex8,
                    Kind::Scalar(Fast::Dec(w)) => Code::Dec(w),
                    Kind::Scalar(Fast::SDec(w)) => Code::SDec(w),
                    Kind::Scalar(Fast::Hex(w)) => Code::Hex(w),
                    Kind::Scalar(Fast::Ptr) => Code::Ptr,
                    Kind::Scalar(Fast::Utf16Z) => Code::Utf16Z,
                    _ => Code::Kind,
                },
                extra: slot != NO_SLOT || f.ids != 0,
                slot,
                ids: f.ids,
            });
        }
        let fixed = [4usize, 8].map(|ptr| {
            ops.iter().try_fold(0usize, |sum, op| {
                let w = |f: Fast| width(f).map(|w| if w == 0 { ptr } else { w as usize });
                Some(
                    sum + match op.kind {
                        Kind::Scalar(f) => w(f)?,
                        Kind::Mapped(w) => w as usize,
                        Kind::Array(f, ArrCount::Fixed(n)) => w(f)?.checked_mul(n as usize)?,
                        _ => return None,
                    },
                )
            })
        });
        let fixed = match fixed {
            [Some(a), Some(b)] => Some([a, b]),
            _ => None,
        };
        let mut steps: Vec<Step> = Vec::new();
        for op in &ops {
            let skip = |f: Fast| {
                width(f).map(|w| {
                    [
                        if w == 0 { 4 } else { w as u32 },
                        if w == 0 { 8 } else { w as u32 },
                    ]
                })
            };
            let step = match op.kind {
                Kind::Scalar(f) if op.slot != NO_SLOT => Step::Read(width(f)?, op.slot),
                Kind::Scalar(Fast::Utf16Z) => Step::Utf16Z,
                Kind::Scalar(f) => Step::Skip(skip(f)?),
                Kind::Mapped(w) => Step::Skip([w as u32; 2]),
                Kind::Array(f, count) => Step::Array(width(f), count),
                Kind::Other(len) => Step::Other(op.idx, len),
            };
            match (steps.last_mut(), step) {
                (Some(Step::Skip(a)), Step::Skip(b)) => {
                    a[0] = a[0].checked_add(b[0])?;
                    a[1] = a[1].checked_add(b[1])?;
                }
                _ => steps.push(step),
            }
        }
        Some(Compiled { ops, steps, fixed })
    }

    /// The bytes a layout of fixed-width fields takes with this pointer size (4, else 8).
    #[inline]
    pub(crate) fn fixed_size(&self, ptr: u8) -> Option<usize> {
        self.fixed.map(|f| f[(ptr != 4) as usize])
    }

    /// The field key text of each field, as a text visitor writes it: `field` renders op `i`'s
    /// key into a buffer. Built once per layout and format (see [`Keys`]).
    pub(crate) fn keys(
        &self,
        fields: &[PlanField],
        mut field: impl FnMut(&mut Vec<u8>, usize, &str),
    ) -> Keys {
        let keys = self.ops.iter().map(|op| {
            let f = &fields[op.idx as usize];
            let mut text = Vec::new();
            field(&mut text, op.idx as usize, &f.name);
            let mut block = [0u8; KEY_BLOCK];
            let n = text.len().min(KEY_BLOCK);
            block[..n].copy_from_slice(&text[..n]);
            Key {
                block,
                text: text.into_boxed_slice(),
            }
        });
        Keys {
            keys: keys.collect(),
        }
    }

    /// The measuring walk: moves `cur` past the fields (setting `cur.unterminated` as the generic
    /// walk does); `Err` where the generic walk fails.
    pub(crate) fn measure(&self, fields: &[PlanField], cur: &mut Cursor<'_>) -> Result<(), ()> {
        let mut vals = [0u64; SLOTS];
        let wide = (cur.ptr != 4) as usize;
        for step in &self.steps {
            match *step {
                Step::Skip(n) => {
                    let end = cur.pos + n[wide] as usize;
                    if end > cur.d.len() {
                        return Err(());
                    }
                    cur.pos = end;
                }
                Step::Read(w, slot) => {
                    let w = if w == 0 { cur.ptr as usize } else { w as usize };
                    let b = cur.d.get(cur.pos..cur.pos + w).ok_or(())?;
                    cur.pos += w;
                    vals[slot as usize] = le(b);
                }
                Step::Utf16Z => {
                    cstr16(cur);
                }
                Step::Array(w, count) => {
                    let (n, remaining) = array_count(count, w, cur, &vals)?;
                    match w {
                        None => {
                            for _ in 0..n {
                                cstr16(cur);
                            }
                        }
                        Some(w) => {
                            let w = if w == 0 { cur.ptr as usize } else { w as usize };
                            let total = (n as usize).checked_mul(w).ok_or(())?;
                            if total > remaining {
                                return Err(());
                            }
                            cur.pos += total;
                        }
                    }
                }
                Step::Other(idx, len) => {
                    let len = match len {
                        Len::Natural => None,
                        Len::Fixed(n) => Some(n),
                        Len::Slot(s) => Some(vals[s as usize]),
                    };
                    let f = &fields[idx as usize];
                    one(f, cur, len, &mut Dest::<NoVisit>::Measure, false).map_err(|_| ())?;
                }
            }
        }
        Ok(())
    }

    /// The walk: drives `v` (when `!measure`) with the fields' callbacks, as the generic walk
    /// would, and moves `cur` past them; picks up ids when `cur.capture`. `Err` on anything the
    /// generic walk reports (bytes running out, a failing field): callers take the generic route.
    #[inline]
    pub(crate) fn run<V: PropertyVisitor>(
        &self,
        fields: &[PlanField],
        cur: &mut Cursor<'_>,
        v: &mut V,
        keys: Option<&Keys>,
        measure: bool,
    ) -> Result<(), ()> {
        let mut vals = [0u64; SLOTS];
        for (n, op) in self.ops.iter().enumerate() {
            let idx = op.idx as usize;
            if !measure {
                match keys {
                    Some(k) => {
                        let key = &k.keys[n];
                        v.field_text(idx, &op.name, &key.text, &key.block);
                    }
                    None if fields[idx].plain_name => v.plain_field(idx, &op.name),
                    None => v.field(idx, &op.name),
                }
            }
            // An integer of `w` bytes (0: the pointer size), kept for references and ids.
            let mut int = |cur: &mut Cursor<'_>, w: u8| -> Result<(u64, usize), ()> {
                let w = if w == 0 { cur.ptr as usize } else { w as usize };
                let b = cur.d.get(cur.pos..cur.pos + w).ok_or(())?;
                cur.pos += w;
                let x = le(b);
                if op.extra {
                    keep(op, cur, &mut vals, x);
                }
                Ok((x, w))
            };
            // The usual widths read with a fixed size (one dispatch per field).
            macro_rules! fixed {
                ($n:literal) => {{
                    let x = take::<$n>(cur).ok_or(())?;
                    if op.extra {
                        keep(op, cur, &mut vals, x);
                    }
                    x
                }};
            }
            match op.code {
                Code::Dec4 => v.unsigned(fixed!(4)),
                Code::Dec8 => v.unsigned(fixed!(8)),
                Code::Dec2 => v.unsigned(fixed!(2)),
                Code::Dec1 => v.unsigned(fixed!(1)),
                Code::Hex4 => v.hex(fixed!(4)),
                Code::Hex8 => v.hex(fixed!(8)),
                Code::Ptr if cur.ptr == 4 => v.pointer(fixed!(4)),
                Code::Ptr if cur.ptr == 8 => v.pointer(fixed!(8)),
                Code::Dec(w) => v.unsigned(int(cur, w)?.0),
                Code::Hex(w) => v.hex(int(cur, w)?.0),
                Code::Ptr => v.pointer(int(cur, 0)?.0),
                Code::SDec(w) => {
                    let (x, w) = int(cur, w)?;
                    v.signed(signed(x, w))
                }
                Code::Utf16Z => {
                    let start = cur.pos;
                    let b = cstr16(cur);
                    if op.ids == 3 && cur.capture && cur.path.is_none() {
                        cur.path =
                            Some((idx, super::plan::PathText::Utf16(start..start + b.len())));
                    }
                    v.utf16(b);
                }
                Code::Kind => self.other(fields, op, cur, v, &mut vals, measure)?,
            }
        }
        Ok(())
    }

    /// The fields of [`Compiled::run`] other than plain scalars.
    #[inline(never)]
    fn other<V: PropertyVisitor>(
        &self,
        fields: &[PlanField],
        op: &Op,
        cur: &mut Cursor<'_>,
        v: &mut V,
        vals: &mut [u64; SLOTS],
        measure: bool,
    ) -> Result<(), ()> {
        let f = &fields[op.idx as usize];
        {
            match op.kind {
                Kind::Scalar(_) => return unreachable_kind().map(|_| ()),
                Kind::Mapped(w) => {
                    let b = cur.d.get(cur.pos..cur.pos + w as usize).ok_or(())?;
                    cur.pos += w as usize;
                    if !measure {
                        let map = f.map.as_deref().map(|map| MapRef {
                            map,
                            dotnet: f.dotnet_flags,
                        });
                        visit_scalar(f.in_type, f.out_type, map, b, None, v);
                    }
                }
                Kind::Array(fast, count) => {
                    let (n, _) = array_count(count, width(fast), cur, vals)?;
                    if !measure {
                        v.begin_array(n);
                    }
                    match width(fast) {
                        None => {
                            for i in 0..n {
                                let b = cstr16(cur);
                                if !measure {
                                    v.element(i);
                                    v.utf16(b);
                                }
                            }
                        }
                        Some(w) => {
                            let w = if w == 0 { cur.ptr as usize } else { w as usize };
                            let total = (n as usize).checked_mul(w).ok_or(())?;
                            let bytes = cur.d.get(cur.pos..cur.pos + total).ok_or(())?;
                            cur.pos += total;
                            if !measure {
                                elements(fast, bytes, w, v);
                            }
                        }
                    }
                    if !measure {
                        v.end_array();
                    }
                }
                Kind::Other(len) => {
                    let len = match len {
                        Len::Natural => None,
                        Len::Fixed(n) => Some(n),
                        Len::Slot(s) => Some(vals[s as usize]),
                    };
                    let r = if measure {
                        one(f, cur, len, &mut Dest::<V>::Measure, false)
                    } else {
                        one(f, cur, len, &mut Dest::Visit(v), false)
                    };
                    r.map_err(|_| ())?;
                }
            }
        }
        Ok(())
    }
}

/// The little-endian integer of the `N` bytes at the cursor, moving past them (`None` past the
/// end): one bounds check and a fixed-size read.
#[inline(always)]
fn take<const N: usize>(cur: &mut Cursor<'_>) -> Option<u64> {
    let b = cur.d.get(cur.pos..)?.first_chunk::<N>()?;
    cur.pos += N;
    let mut w = [0u8; 8];
    w[..N].copy_from_slice(b);
    Some(u64::from_le_bytes(w))
}

/// An array step's element count and the payload bytes left at the cursor. `Err` for a count
/// refused as the generic walk refuses it (more elements than bytes left, beyond 1024), or an
/// array to the end of the payload of elements without a fixed width (`width` `None`).
#[inline(always)]
fn array_count(
    count: ArrCount,
    width: Option<u8>,
    cur: &Cursor<'_>,
    vals: &[u64; SLOTS],
) -> Result<(u64, usize), ()> {
    let remaining = cur.d.len().saturating_sub(cur.pos);
    let n = match count {
        ArrCount::Fixed(n) => n,
        ArrCount::Slot(s) => vals[s as usize],
        ArrCount::ToEnd => {
            let w = width.ok_or(())?;
            let w = if w == 0 { cur.ptr as usize } else { w as usize };
            (remaining / w) as u64
        }
    };
    if n > remaining as u64 && n > 1024 {
        return Err(());
    }
    Ok((n, remaining))
}

/// Keeps an integer field's value for the fields that refer to it and as the payload's ids.
#[inline]
fn keep(op: &Op, cur: &mut Cursor<'_>, vals: &mut [u64; SLOTS], x: u64) {
    if op.slot != NO_SLOT {
        vals[op.slot as usize] = x;
    }
    if cur.capture {
        match op.ids {
            1 => cur.pid = Some(x),
            2 => cur.tid = Some(x),
            _ => {}
        }
    }
}

/// A [`Kind::Scalar`] of a kind the compiler never makes.
#[cold]
fn unreachable_kind() -> Result<u8, ()> {
    Err(())
}

#[inline]
fn signed(x: u64, w: usize) -> i64 {
    match w {
        1 => x as u8 as i8 as i64,
        2 => x as u16 as i16 as i64,
        4 => x as u32 as i32 as i64,
        _ => x as i64,
    }
}

/// The elements of a fixed-width array, each announced and handed to `v` (the kind settled once,
/// pointers and hex integers in one call).
#[inline]
fn elements<V: PropertyVisitor>(fast: Fast, bytes: &[u8], w: usize, v: &mut V) {
    match fast {
        Fast::Ptr => v.pointer_elements(bytes, w),
        Fast::Hex(_) => v.hex_elements(bytes, w),
        Fast::SDec(_) => {
            for (i, c) in bytes.chunks_exact(w).enumerate() {
                v.element(i as u64);
                v.signed(signed(le(c), w));
            }
        }
        _ => {
            for (i, c) in bytes.chunks_exact(w).enumerate() {
                v.element(i as u64);
                v.unsigned(le(c));
            }
        }
    }
}

/// The key text of a compiled layout's fields in one text format, op `i`'s at `keys[i]`.
#[derive(Debug, Default)]
pub(crate) struct Keys {
    keys: Vec<Key>,
}

/// One field's key text, and its first [`KEY_BLOCK`] bytes (zero-padded) for a fixed-size copy.
#[derive(Debug)]
struct Key {
    block: [u8; KEY_BLOCK],
    text: Box<[u8]>,
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;
    use std::net::{IpAddr, SocketAddr};
    use std::ops::ControlFlow;

    use crate::decode::plan::{PathText, PayloadIds, Plan};
    use crate::decode::{Decoder, PropertyVisitor};
    use crate::etl::{EtlFile, Order};
    use crate::guid::Guid;
    use crate::schema::Registry;

    /// Every callback, written down.
    #[derive(Default)]
    struct Trace(String, usize);

    impl PropertyVisitor for Trace {
        fn field(&mut self, i: usize, name: &str) {
            let _ = write!(self.0, "F{i}:{name};");
        }
        fn field_text(&mut self, _i: usize, _name: &str, text: &[u8], block: &[u8; 32]) {
            // The key text: what `field` wrote when the keys were built; the block starts so.
            let n = text.len().min(block.len());
            assert_eq!(&block[..n], &text[..n]);
            self.0.push_str(std::str::from_utf8(text).unwrap());
            self.1 += 1;
        }
        fn begin_array(&mut self, n: u64) {
            let _ = write!(self.0, "[{n};");
        }
        fn element(&mut self, i: u64) {
            let _ = write!(self.0, "e{i};");
        }
        fn end_array(&mut self) {
            self.0.push_str("];");
        }
        fn begin_struct(&mut self) {
            self.0.push('{');
        }
        fn end_struct(&mut self) {
            self.0.push('}');
        }
        fn null(&mut self) {
            self.0.push_str("null;");
        }
        fn bool(&mut self, v: bool) {
            let _ = write!(self.0, "b{v};");
        }
        fn unsigned(&mut self, v: u64) {
            let _ = write!(self.0, "u{v};");
        }
        fn signed(&mut self, v: i64) {
            let _ = write!(self.0, "i{v};");
        }
        fn f32(&mut self, v: f32) {
            let _ = write!(self.0, "f{v};");
        }
        fn f64(&mut self, v: f64) {
            let _ = write!(self.0, "d{v};");
        }
        fn hex(&mut self, v: u64) {
            let _ = write!(self.0, "x{v:x};");
        }
        fn pointer(&mut self, v: u64) {
            let _ = write!(self.0, "p{v:x};");
        }
        fn str(&mut self, v: &str) {
            let _ = write!(self.0, "s{v:?};");
        }
        fn latin1(&mut self, v: &[u8]) {
            let _ = write!(self.0, "l{v:?};");
        }
        // Text handed as UTF-16 and as a string is the same callback for every visitor.
        fn utf16(&mut self, units: &[u8]) {
            self.str(&crate::decode::scalar::utf16(units));
        }
        fn binary(&mut self, v: &[u8]) {
            let _ = write!(self.0, "B{v:?};");
        }
        fn guid(&mut self, v: &Guid) {
            let _ = write!(self.0, "g{v};");
        }
        fn sid(&mut self, v: &str) {
            let _ = write!(self.0, "S{v};");
        }
        fn filetime(&mut self, v: i64) {
            let _ = write!(self.0, "T{v};");
        }
        fn systemtime(&mut self, v: &[u16; 8]) {
            let _ = write!(self.0, "Y{v:?};");
        }
        fn mapped(&mut self, value: u64, name: &str) {
            let _ = write!(self.0, "m{value}={name};");
        }
        fn ip(&mut self, v: IpAddr) {
            let _ = write!(self.0, "ip{v};");
        }
        fn port(&mut self, v: u16) {
            let _ = write!(self.0, "P{v};");
        }
        fn socket_address(&mut self, v: SocketAddr) {
            let _ = write!(self.0, "sa{v};");
        }
        fn win32_error(&mut self, v: u32) {
            let _ = write!(self.0, "w{v};");
        }
        fn ntstatus(&mut self, v: u32) {
            let _ = write!(self.0, "n{v};");
        }
        fn hresult(&mut self, v: u32) {
            let _ = write!(self.0, "h{v};");
        }
    }

    fn ids_text(ids: &PayloadIds, payload: &[u8]) -> String {
        let path = ids.path.as_ref().map(|(i, p)| {
            let text = match p {
                PathText::Text(t) => t.clone(),
                PathText::Utf16(r) => crate::decode::scalar::utf16(&payload[r.clone()]),
            };
            (*i, text)
        });
        format!("{:?} {:?} {:?}", ids.pid, ids.tid, path)
    }

    /// Compiled and generic walks of one payload with one pointer size agree on everything: the
    /// callbacks (and the key text copied instead of the name), the length, the ids and path, the
    /// measured length and missing terminators; both fail alike.
    fn agree(plan: &Plan, payload: &[u8], ptr: u8, what: &str) {
        let keys = plan.keys(|out, i, name| {
            let mut t = Trace::default();
            t.field(i, name);
            out.extend_from_slice(t.0.as_bytes());
        });
        let mut g = Trace::default();
        let generic = plan.visit_generic(payload, ptr, &mut g);
        let mut c = Trace::default();
        let compiled = plan.visit(payload, ptr, &mut c);
        assert_eq!(generic.is_ok(), compiled.is_ok(), "{what}: walk result");
        if let (Ok((gl, gi)), Ok((cl, ci))) = (&generic, &compiled) {
            assert_eq!(gl, cl, "{what}: length");
            assert_eq!(g.0, c.0, "{what}: callbacks");
            assert_eq!(ids_text(gi, payload), ids_text(ci, payload), "{what}: ids");
            let mut k = Trace::default();
            plan.visit_keyed(payload, ptr, &mut k, keys.as_ref())
                .unwrap();
            assert_eq!(k.0, g.0, "{what}: keyed callbacks");
            assert_eq!(k.1, plan.fields.len(), "{what}: keys copied");
        }
        assert_eq!(
            plan.measure_generic(payload, ptr),
            plan.measure_compiled(payload, ptr),
            "{what}: measure"
        );
        if let Ok((_, ids)) = &generic {
            assert_eq!(
                ids_text(&plan.payload_ids(payload, ptr), payload),
                ids_text(ids, payload),
                "{what}: payload ids"
            );
        }
    }

    #[test]
    fn compiled_walk_agrees_with_generic_on_every_sample_layout() {
        let test = "compiled_walk_agrees_with_generic_on_every_sample_layout";
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
        let samples = dir.join("etl-samples");
        if !samples.is_dir() {
            if std::env::var("ETWKIT_REQUIRE_SHARED").is_ok_and(|v| v == "1") {
                panic!("{test}: ../shared is missing but ETWKIT_REQUIRE_SHARED=1");
            }
            eprintln!("\n*** SKIPPED {test}: ../shared/etl-samples not found ***\n");
            return;
        }
        let mut files: Vec<_> = std::fs::read_dir(&samples)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "etl"))
            .collect();
        files.sort();
        assert!(files.len() > 10, "{} samples", files.len());
        let (mut layouts, mut compiled, mut checked) = (0usize, 0usize, 0u64);
        for path in &files {
            let Ok(f) = EtlFile::open(path) else { continue };
            let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
            // Up to 300 records of each layout, with both pointer sizes.
            let mut seen = crate::schema::registry::FastMap::<u64, u32>::default();
            f.for_each(Order::File, |r| {
                let rec = &r.event;
                let Some((_, plan)) = d.layout_route(rec) else {
                    return ControlFlow::Continue(());
                };
                let n = seen.entry(plan.id).or_default();
                if *n == 0 {
                    layouts += 1;
                    compiled += plan.compiled.is_some() as usize;
                }
                *n += 1;
                if *n > 300 || plan.compiled.is_none() {
                    return ControlFlow::Continue(());
                }
                for ptr in [4, 8] {
                    let what = format!(
                        "{} {:?} {}/{} ptr {ptr}",
                        path.file_name().unwrap().to_string_lossy(),
                        plan.names.event,
                        rec.provider,
                        rec.descriptor.id
                    );
                    agree(&plan, &rec.payload, ptr, &what);
                    // A payload cut short fails alike (or measures alike).
                    let cut = &rec.payload[..rec.payload.len() / 2];
                    agree(&plan, cut, ptr, &format!("{what} cut"));
                }
                checked += 1;
                ControlFlow::Continue(())
            });
        }
        eprintln!("{layouts} layouts, {compiled} compiled, {checked} records compared");
        assert!(compiled * 2 > layouts, "{compiled} of {layouts} compiled");
        assert!(checked > 10_000, "{checked} records compared");
    }
}
