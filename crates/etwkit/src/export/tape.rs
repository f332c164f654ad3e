//! A payload's properties as a compact byte tape: what a [`PropertyVisitor`] walk hands over,
//! written by [`TapeWriter`] (no [`Value`] and no allocation per property) and read back by
//! [`read_fields`] as borrowed top-level fields. The export's decode threads write tapes; the thread
//! building the typed tables reads them, so that only bytes cross between threads.
//!
//! A tape read back gives exactly the [`Properties`] a [`crate::decode::PropertiesBuilder`] would
//! have built from the same walk ([`to_properties`]): each callback maps to one [`Value`] variant,
//! text handed as UTF-16 or Latin-1 becomes UTF-8 as it is written.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Arc;

use crate::decode::{Properties, PropertyVisitor, Value};
use crate::guid::Guid;

const FIELD: u8 = 0;
const BEGIN_ARRAY: u8 = 1;
const END_ARRAY: u8 = 2;
const BEGIN_STRUCT: u8 = 3;
const END_STRUCT: u8 = 4;
const NULL: u8 = 5;
const BOOL: u8 = 6;
const U64: u8 = 7;
const I64: u8 = 8;
const F32: u8 = 9;
const F64: u8 = 10;
const HEX: u8 = 11;
const POINTER: u8 = 12;
const STR: u8 = 13;
const BINARY: u8 = 14;
const GUID: u8 = 15;
const SID: u8 = 16;
const FILETIME: u8 = 17;
const SYSTEMTIME: u8 = 18;
const MAPPED: u8 = 19;
const IPV4: u8 = 20;
const IPV6: u8 = 21;
const PORT: u8 = 22;
const SOCKET_V4: u8 = 23;
const SOCKET_V6: u8 = 24;
const WIN32: u8 = 25;
const NTSTATUS: u8 = 26;
const HRESULT: u8 = 27;

/// Writes a walk's callbacks to a byte tape. An array or struct is its `BEGIN_*` op, the length of
/// what follows up to its `END_*` op (so that a reader can step over it), its contents and the end.
#[derive(Default)]
pub struct TapeWriter {
    out: Vec<u8>,
    /// Where the length of each open array or struct goes.
    open: Vec<usize>,
}

impl TapeWriter {
    pub fn new() -> TapeWriter {
        TapeWriter::default()
    }

    /// Drops what was written (a walk that failed part-way, or the next record).
    pub fn clear(&mut self) {
        self.out.clear();
        self.open.clear();
    }

    /// The tape written since the last [`TapeWriter::clear`].
    pub fn tape(&self) -> &[u8] {
        &self.out
    }

    /// Appends a whole tape written before (a walk's output replayed; nothing may be open).
    pub fn push_tape(&mut self, tape: &[u8]) {
        debug_assert!(self.open.is_empty());
        self.out.extend_from_slice(tape);
    }

    fn op(&mut self, tag: u8) {
        self.out.push(tag);
    }
    fn begin(&mut self, tag: u8) {
        self.out.push(tag);
        self.open.push(self.out.len());
        self.out.extend_from_slice(&[0; 4]);
    }
    fn end(&mut self, tag: u8) {
        self.out.push(tag);
        if let Some(at) = self.open.pop() {
            let n = (self.out.len() - at - 4) as u32;
            self.out[at..at + 4].copy_from_slice(&n.to_ne_bytes());
        }
    }
    fn num(&mut self, tag: u8, bytes: &[u8]) {
        self.out.push(tag);
        self.out.extend_from_slice(bytes);
    }
    fn bytes(&mut self, tag: u8, b: &[u8]) {
        self.out.push(tag);
        self.out.extend_from_slice(&(b.len() as u32).to_ne_bytes());
        self.out.extend_from_slice(b);
    }
}

impl PropertyVisitor for TapeWriter {
    fn field(&mut self, _index: usize, name: &str) {
        let n = &name.as_bytes()[..name.len().min(u16::MAX as usize)];
        self.out.push(FIELD);
        self.out.extend_from_slice(&(n.len() as u16).to_ne_bytes());
        self.out.extend_from_slice(n);
    }
    fn begin_array(&mut self, _count: u64) {
        self.begin(BEGIN_ARRAY)
    }
    fn end_array(&mut self) {
        self.end(END_ARRAY)
    }
    fn begin_struct(&mut self) {
        self.begin(BEGIN_STRUCT)
    }
    fn end_struct(&mut self) {
        self.end(END_STRUCT)
    }
    fn null(&mut self) {
        self.op(NULL)
    }
    fn bool(&mut self, v: bool) {
        self.num(BOOL, &[v as u8])
    }
    fn unsigned(&mut self, v: u64) {
        self.num(U64, &v.to_ne_bytes())
    }
    fn signed(&mut self, v: i64) {
        self.num(I64, &v.to_ne_bytes())
    }
    fn f32(&mut self, v: f32) {
        self.num(F32, &v.to_ne_bytes())
    }
    fn f64(&mut self, v: f64) {
        self.num(F64, &v.to_ne_bytes())
    }
    fn hex(&mut self, v: u64) {
        self.num(HEX, &v.to_ne_bytes())
    }
    fn pointer(&mut self, v: u64) {
        self.num(POINTER, &v.to_ne_bytes())
    }
    fn str(&mut self, v: &str) {
        self.bytes(STR, v.as_bytes())
    }
    fn latin1(&mut self, v: &[u8]) {
        self.out.push(STR);
        let at = self.out.len();
        self.out.extend_from_slice(&[0; 4]);
        for &c in v {
            let mut buf = [0u8; 2];
            self.out
                .extend_from_slice((c as char).encode_utf8(&mut buf).as_bytes());
        }
        let n = (self.out.len() - at - 4) as u32;
        self.out[at..at + 4].copy_from_slice(&n.to_ne_bytes());
    }
    fn utf16(&mut self, units: &[u8]) {
        // As the decoder's UTF-16 text: a trailing odd byte is dropped, unpaired surrogates
        // become U+FFFD.
        self.out.push(STR);
        let at = self.out.len();
        self.out.extend_from_slice(&[0; 4]);
        let u = units
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]));
        for ch in char::decode_utf16(u) {
            let ch = ch.unwrap_or('\u{FFFD}');
            if ch.is_ascii() {
                self.out.push(ch as u8);
            } else {
                let mut buf = [0u8; 4];
                self.out
                    .extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
            }
        }
        let n = (self.out.len() - at - 4) as u32;
        self.out[at..at + 4].copy_from_slice(&n.to_ne_bytes());
    }
    fn binary(&mut self, v: &[u8]) {
        self.bytes(BINARY, v)
    }
    fn guid(&mut self, v: &Guid) {
        self.num(GUID, &v.to_le_bytes())
    }
    fn sid(&mut self, v: &str) {
        self.bytes(SID, v.as_bytes())
    }
    fn filetime(&mut self, v: i64) {
        self.num(FILETIME, &v.to_ne_bytes())
    }
    fn systemtime(&mut self, v: &[u16; 8]) {
        self.out.push(SYSTEMTIME);
        for x in v {
            self.out.extend_from_slice(&x.to_ne_bytes());
        }
    }
    fn mapped(&mut self, value: u64, name: &str) {
        self.num(MAPPED, &value.to_ne_bytes());
        self.out
            .extend_from_slice(&(name.len() as u32).to_ne_bytes());
        self.out.extend_from_slice(name.as_bytes());
    }
    fn ip(&mut self, v: IpAddr) {
        match v {
            IpAddr::V4(a) => self.num(IPV4, &a.octets()),
            IpAddr::V6(a) => self.num(IPV6, &a.octets()),
        }
    }
    fn port(&mut self, v: u16) {
        self.num(PORT, &v.to_ne_bytes())
    }
    fn socket_address(&mut self, v: SocketAddr) {
        match v {
            SocketAddr::V4(a) => {
                self.num(SOCKET_V4, &a.ip().octets());
                self.out.extend_from_slice(&a.port().to_ne_bytes());
            }
            SocketAddr::V6(a) => {
                self.num(SOCKET_V6, &a.ip().octets());
                self.out.extend_from_slice(&a.port().to_ne_bytes());
                self.out.extend_from_slice(&a.flowinfo().to_ne_bytes());
                self.out.extend_from_slice(&a.scope_id().to_ne_bytes());
            }
        }
    }
    fn win32_error(&mut self, v: u32) {
        self.num(WIN32, &v.to_ne_bytes())
    }
    fn ntstatus(&mut self, v: u32) {
        self.num(NTSTATUS, &v.to_ne_bytes())
    }
    fn hresult(&mut self, v: u32) {
        self.num(HRESULT, &v.to_ne_bytes())
    }
}

/// One value of a tape, borrowed: a scalar as it stands, an array or struct as its span of the
/// tape (built into a [`Value`] only when asked).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Item<'a> {
    Null,
    Bool(bool),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Hex(u64),
    Pointer(u64),
    Str(&'a str),
    Binary(&'a [u8]),
    Guid(Guid),
    Sid(&'a str),
    FileTime(i64),
    SystemTime([u16; 8]),
    Mapped(u64, &'a str),
    Ip(IpAddr),
    Port(u16),
    Socket(SocketAddr),
    Win32(u32),
    NtStatus(u32),
    HResult(u32),
    /// The ops of an array, from its `BEGIN_ARRAY` to its `END_ARRAY` (both included).
    Array(&'a [u8]),
    /// The ops of a struct, from its `BEGIN_STRUCT` to its `END_STRUCT` (both included).
    Struct(&'a [u8]),
}

/// A tape that does not parse (never written by [`TapeWriter`]).
#[derive(Debug)]
pub struct BadTape;

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BadTape> {
        let s = self.b.get(self.at..self.at + n).ok_or(BadTape)?;
        self.at += n;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], BadTape> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }
    fn u8(&mut self) -> Result<u8, BadTape> {
        Ok(self.arr::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, BadTape> {
        Ok(u16::from_ne_bytes(self.arr()?))
    }
    fn u32(&mut self) -> Result<u32, BadTape> {
        Ok(u32::from_ne_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Result<u64, BadTape> {
        Ok(u64::from_ne_bytes(self.arr()?))
    }
    fn text(&mut self, n: usize) -> Result<&'a str, BadTape> {
        std::str::from_utf8(self.take(n)?).map_err(|_| BadTape)
    }
    fn sized_text(&mut self) -> Result<&'a str, BadTape> {
        let n = self.u32()? as usize;
        self.text(n)
    }

    /// The value starting at the cursor (its tag not yet read).
    fn item(&mut self) -> Result<Item<'a>, BadTape> {
        let start = self.at;
        let tag = self.u8()?;
        Ok(match tag {
            NULL => Item::Null,
            BOOL => Item::Bool(self.u8()? != 0),
            U64 => Item::U64(self.u64()?),
            I64 => Item::I64(self.u64()? as i64),
            F32 => Item::F32(f32::from_ne_bytes(self.arr()?)),
            F64 => Item::F64(f64::from_ne_bytes(self.arr()?)),
            HEX => Item::Hex(self.u64()?),
            POINTER => Item::Pointer(self.u64()?),
            STR => Item::Str(self.sized_text()?),
            BINARY => {
                let n = self.u32()? as usize;
                Item::Binary(self.take(n)?)
            }
            GUID => Item::Guid(Guid::from_le_bytes(self.take(16)?).ok_or(BadTape)?),
            SID => Item::Sid(self.sized_text()?),
            FILETIME => Item::FileTime(self.u64()? as i64),
            SYSTEMTIME => {
                let mut t = [0u16; 8];
                for x in &mut t {
                    *x = self.u16()?;
                }
                Item::SystemTime(t)
            }
            MAPPED => {
                let v = self.u64()?;
                Item::Mapped(v, self.sized_text()?)
            }
            IPV4 => Item::Ip(IpAddr::V4(Ipv4Addr::from(self.arr::<4>()?))),
            IPV6 => Item::Ip(IpAddr::V6(Ipv6Addr::from(self.arr::<16>()?))),
            PORT => Item::Port(self.u16()?),
            SOCKET_V4 => {
                let ip = Ipv4Addr::from(self.arr::<4>()?);
                Item::Socket(SocketAddr::V4(SocketAddrV4::new(ip, self.u16()?)))
            }
            SOCKET_V6 => {
                let ip = Ipv6Addr::from(self.arr::<16>()?);
                let port = self.u16()?;
                let flow = self.u32()?;
                let scope = self.u32()?;
                Item::Socket(SocketAddr::V6(SocketAddrV6::new(ip, port, flow, scope)))
            }
            WIN32 => Item::Win32(self.u32()?),
            NTSTATUS => Item::NtStatus(self.u32()?),
            HRESULT => Item::HResult(self.u32()?),
            BEGIN_ARRAY | BEGIN_STRUCT => {
                let n = self.u32()? as usize;
                let end = if tag == BEGIN_ARRAY {
                    END_ARRAY
                } else {
                    END_STRUCT
                };
                let body = self.take(n)?;
                if body.last() != Some(&end) {
                    return Err(BadTape);
                }
                let span = &self.b[start..self.at];
                if tag == BEGIN_ARRAY {
                    Item::Array(span)
                } else {
                    Item::Struct(span)
                }
            }
            _ => return Err(BadTape),
        })
    }
}

/// The top-level fields of a tape, in order: `(name, offset of the value in the tape)`, appended
/// to `out`. An empty tape (no properties) gives none.
pub fn read_fields(tape: &[u8], out: &mut Vec<(u32, u16, u32)>) -> Result<(), BadTape> {
    if tape.is_empty() {
        return Ok(());
    }
    let mut c = Cursor { b: tape, at: 0 };
    if c.u8()? != BEGIN_STRUCT {
        return Err(BadTape);
    }
    c.u32()?;
    loop {
        match c.u8()? {
            END_STRUCT => return Ok(()),
            FIELD => {
                let n = c.u16()?;
                let name_at = c.at as u32;
                c.take(n as usize)?;
                let value_at = c.at as u32;
                c.item()?;
                out.push((name_at, n, value_at));
            }
            // A value without a name (the builder names it "").
            _ => {
                c.at -= 1;
                let value_at = c.at as u32;
                c.item()?;
                out.push((0, 0, value_at));
            }
        }
    }
}

/// The top-level fields of a tape, in order, as `(name, value)`: as [`read_fields`] finds them, in
/// one pass.
pub fn fields(tape: &[u8]) -> impl Iterator<Item = (&[u8], Item<'_>)> {
    let mut c = Cursor { b: tape, at: 0 };
    let mut ok = !tape.is_empty() && c.u8().ok() == Some(BEGIN_STRUCT) && c.u32().is_ok();
    std::iter::from_fn(move || {
        if !ok {
            return None;
        }
        let r = (|| -> Result<Option<(&[u8], Item<'_>)>, BadTape> {
            match c.u8()? {
                END_STRUCT => Ok(None),
                FIELD => {
                    let n = c.u16()? as usize;
                    let name = c.take(n)?;
                    Ok(Some((name, c.item()?)))
                }
                _ => {
                    c.at -= 1;
                    Ok(Some((&[][..], c.item()?)))
                }
            }
        })();
        match r {
            Ok(Some(x)) => Some(x),
            _ => {
                ok = false;
                None
            }
        }
    })
}

/// The name of a field found by [`read_fields`] (UTF-8: written from a `&str`).
pub fn field_name(tape: &[u8], f: (u32, u16, u32)) -> &[u8] {
    &tape[f.0 as usize..f.0 as usize + f.1 as usize]
}

/// The value of a field found by [`read_fields`].
pub fn field_value(tape: &[u8], f: (u32, u16, u32)) -> Item<'_> {
    Cursor {
        b: tape,
        at: f.2 as usize,
    }
    .item()
    .unwrap_or(Item::Null)
}

impl Item<'_> {
    /// The [`Value`] this item stands for.
    pub fn to_value(&self) -> Value {
        match *self {
            Item::Null => Value::Null,
            Item::Bool(b) => Value::Bool(b),
            Item::U64(x) => Value::U64(x),
            Item::I64(x) => Value::I64(x),
            Item::F32(x) => Value::F32(x),
            Item::F64(x) => Value::F64(x),
            Item::Hex(x) => Value::Hex(x),
            Item::Pointer(x) => Value::Pointer(x),
            Item::Str(s) => Value::String(s.to_string()),
            Item::Binary(b) => Value::Binary(b.to_vec()),
            Item::Guid(g) => Value::Guid(g),
            Item::Sid(s) => Value::Sid(s.to_string()),
            Item::FileTime(t) => Value::FileTime(t),
            Item::SystemTime(t) => Value::SystemTime(t),
            Item::Mapped(value, name) => Value::Mapped {
                value,
                name: name.to_string(),
            },
            Item::Ip(IpAddr::V4(a)) => Value::Ipv4(a),
            Item::Ip(IpAddr::V6(a)) => Value::Ipv6(a),
            Item::Port(p) => Value::Port(p),
            Item::Socket(a) => Value::SocketAddress(a),
            Item::Win32(x) => Value::Win32Error(x),
            Item::NtStatus(x) => Value::NtStatus(x),
            Item::HResult(x) => Value::HResult(x),
            Item::Array(span) => Value::Array(elements(span).map(|i| i.to_value()).collect()),
            Item::Struct(span) => Value::Struct(struct_properties(span)),
        }
    }
}

/// The properties of a struct's span (`BEGIN_STRUCT` … `END_STRUCT`), as the builder names them.
fn struct_properties(span: &[u8]) -> Properties {
    let mut p = Properties::default();
    let mut c = Cursor { b: span, at: 5 };
    let mut name: Option<Arc<str>> = None;
    while let Some(&t) = c.b.get(c.at) {
        if t == END_STRUCT {
            break;
        }
        if t == FIELD {
            c.at += 1;
            let Ok(n) = c.u16() else { break };
            let Ok(s) = c.text(n as usize) else { break };
            name = Some(Arc::from(s));
            continue;
        }
        match c.item() {
            Ok(i) => {
                p.0.push((name.take().unwrap_or_else(|| Arc::from("")), i.to_value()))
            }
            Err(_) => break,
        }
    }
    p
}

/// The elements of an array's span ([`Item::Array`]).
pub fn elements(span: &[u8]) -> impl Iterator<Item = Item<'_>> {
    let mut c = Cursor { b: span, at: 5 };
    std::iter::from_fn(move || loop {
        match c.b.get(c.at) {
            None | Some(&END_ARRAY) => return None,
            // Names inside an array are not part of its values.
            Some(&FIELD) => {
                c.at += 1;
                let n = c.u16().ok()?;
                c.take(n as usize).ok()?;
            }
            Some(_) => return c.item().ok(),
        }
    })
}

/// The values of an array item whose elements are all pointers (a stack's frames), read at the
/// ops' fixed stride (each a `POINTER` op and its 8 bytes) without parsing item by item; `None`
/// for any other array.
pub fn pointer_elements(span: &[u8]) -> Option<impl Iterator<Item = u64> + '_> {
    // BEGIN_ARRAY, the body's length, the body; its last byte is END_ARRAY.
    let body = span.get(5..span.len().checked_sub(1)?)?;
    let stride = 1 + 8;
    let ok = span.first() == Some(&BEGIN_ARRAY)
        && span.last() == Some(&END_ARRAY)
        && body.len() % stride == 0
        && body.chunks_exact(stride).all(|c| c[0] == POINTER);
    ok.then(|| {
        body.chunks_exact(stride)
            .map(|c| u64::from_ne_bytes(c[1..].try_into().expect("8 bytes")))
    })
}

/// Whether an array's span holds no element.
pub fn is_empty_array(span: &[u8]) -> bool {
    elements(span).next().is_none()
}

/// The properties a tape describes (as [`crate::decode::PropertiesBuilder`] builds them from the
/// same walk; empty for an empty or unreadable tape).
pub fn to_properties(tape: &[u8]) -> Properties {
    match tape.first() {
        Some(&BEGIN_STRUCT) => struct_properties(tape),
        _ => Properties::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::PropertiesBuilder;

    fn sample() -> Properties {
        let mut inner = Properties::default();
        inner.push("x", Value::U64(1));
        inner.push("y", Value::String("é".into()));
        let mut p = Properties::default();
        for (n, v) in [
            ("null", Value::Null),
            ("b", Value::Bool(true)),
            ("u", Value::U64(7)),
            ("i", Value::I64(-7)),
            ("f32", Value::F32(1.5)),
            ("f64", Value::F64(-2.25)),
            ("hex", Value::Hex(0xff)),
            ("ptr", Value::Pointer(0xdead)),
            ("s", Value::String("text ☃".into())),
            ("bin", Value::Binary(vec![1, 2, 3])),
            (
                "g",
                Value::Guid(Guid::from_str_const("01234567-89ab-cdef-0123-456789abcdef")),
            ),
            ("sid", Value::Sid("S-1-5-18".into())),
            ("ft", Value::FileTime(132_000_000_000_000_000)),
            ("st", Value::SystemTime([2021, 9, 4, 9, 14, 59, 36, 671])),
            (
                "m",
                Value::Mapped {
                    value: 3,
                    name: "Three".into(),
                },
            ),
            ("v4", Value::Ipv4(Ipv4Addr::new(10, 0, 0, 1))),
            ("v6", Value::Ipv6(Ipv6Addr::LOCALHOST)),
            ("port", Value::Port(443)),
            ("sa4", Value::SocketAddress("1.2.3.4:80".parse().unwrap())),
            ("sa6", Value::SocketAddress("[::1%3]:8080".parse().unwrap())),
            ("w", Value::Win32Error(5)),
            ("nt", Value::NtStatus(0xc000_0022)),
            ("hr", Value::HResult(0x8007_0005)),
            ("arr", Value::Array(vec![Value::U64(1), Value::Null])),
            ("empty", Value::Array(vec![])),
            ("st2", Value::Struct(inner.clone())),
            ("structs", Value::Array(vec![Value::Struct(inner)])),
        ] {
            p.push(n, v);
        }
        p
    }

    #[test]
    fn tape_reads_back_as_the_builder_builds() {
        let p = sample();
        let mut w = TapeWriter::new();
        p.visit(&mut w);
        let tape = w.tape().to_vec();
        let mut b = PropertiesBuilder::default();
        p.visit(&mut b);
        let built = b.take();
        assert_eq!(to_properties(&tape), built);
        let mut fields = Vec::new();
        read_fields(&tape, &mut fields).unwrap();
        assert_eq!(fields.len(), built.len());
        for (f, (n, v)) in fields.iter().zip(built.iter()) {
            assert_eq!(field_name(&tape, *f), n.as_bytes());
            assert_eq!(&field_value(&tape, *f).to_value(), v);
        }
    }

    #[test]
    fn pointer_arrays_read_at_their_stride_and_nothing_else_does() {
        let mut p = Properties::default();
        let frames = vec![
            Value::Pointer(0x7ff8_0000_1234),
            Value::Pointer(5),
            Value::Pointer(0),
        ];
        p.push("frames", Value::Array(frames));
        p.push(
            "mixed",
            Value::Array(vec![Value::Pointer(1), Value::Hex(2)]),
        );
        p.push("hexes", Value::Array(vec![Value::Hex(1)]));
        p.push("none", Value::Array(vec![]));
        p.push("one", Value::Pointer(9));
        let mut w = TapeWriter::new();
        p.visit(&mut w);
        let got: Vec<Option<Vec<u64>>> = fields(w.tape())
            .map(|(_, v)| match v {
                Item::Array(span) => pointer_elements(span).map(|i| i.collect()),
                _ => None,
            })
            .collect();
        assert_eq!(
            got,
            [
                Some(vec![0x7ff8_0000_1234, 5, 0]),
                None,
                None,
                Some(vec![]),
                None
            ]
        );
    }

    #[test]
    fn text_as_utf16_and_latin1_becomes_utf8() {
        let mut w = TapeWriter::new();
        w.begin_struct();
        w.field(0, "a");
        // "hé" and an unpaired surrogate, then an odd trailing byte.
        w.utf16(&[b'h', 0, 0xe9, 0, 0x00, 0xd8, 0x41]);
        w.field(1, "b");
        w.latin1(&[b'x', 0xe9]);
        w.end_struct();
        let p = to_properties(w.tape());
        assert_eq!(p.get("a"), Some(&Value::String("hé\u{FFFD}".into())));
        assert_eq!(p.get("b"), Some(&Value::String("xé".into())));
    }
}
