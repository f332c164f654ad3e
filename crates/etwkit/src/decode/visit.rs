//! The typed property walk: what a compiled [`Plan`](super::Plan) reads from a payload, handed to a
//! [`PropertyVisitor`] one callback per property, as borrowed slices and plain numbers (no
//! [`Value`] and no `String` built for the common in-types). Sinks and exports implement the
//! visitor (the JSON text of `dump` and of Parquet's `properties` column is one, in
//! the JSON sink); values already built ([`Properties`], [`Value`]) drive the same visitor
//! through [`Properties::visit`], so both routes render alike.

use std::net::{IpAddr, SocketAddr};

use crate::guid::Guid;

use super::{Properties, Value};

/// Bytes of the fixed-size key block handed to [`PropertyVisitor::field_text`].
pub const KEY_BLOCK: usize = 32;

/// Receives a payload's properties in layout order. Every method does nothing by default, so a
/// visitor implements only what it keeps.
///
/// The shape of a walk: `begin_struct` (the payload's own object), then per property
/// `field(index, name)` and its value — one scalar callback, or `begin_array(n)`, per element
/// `element(i)` and its value, `end_array`, or `begin_struct` … `end_struct` for a struct — and a
/// final `end_struct`. `index` is the property's position in its level of the layout (struct
/// members count from 0). A walk that fails part-way stops without closing what it opened.
#[allow(unused_variables)]
pub trait PropertyVisitor {
    /// A property of the current level starts.
    fn field(&mut self, index: usize, name: &str) {}
    /// As [`PropertyVisitor::field`], for a name known to be printable ASCII without `"` or `\`
    /// (a text format need not escape it; the plan checks once per layout).
    fn plain_field(&mut self, index: usize, name: &str) {
        self.field(index, name)
    }
    /// As [`PropertyVisitor::field`], with `text`: what this kind of visitor's `field` wrote for
    /// this property when its layout was compiled (a text format copies it instead of rendering
    /// the name again). `block` starts with `text` (when it is at most [`KEY_BLOCK`] bytes; the
    /// rest is whatever follows): a fixed-size copy of it, cut to `text`'s length, needs no
    /// `memcpy` call. Visitors that write no such text ignore them.
    fn field_text(&mut self, index: usize, name: &str, text: &[u8], block: &[u8; KEY_BLOCK]) {
        self.field(index, name)
    }
    fn begin_array(&mut self, count: u64) {}
    /// Element `i` of the open array starts.
    fn element(&mut self, i: u64) {}
    /// All the elements of the open array at once: pointers, each `width` (4 or 8) bytes of
    /// `bytes`, little-endian — the same as `element(i)` and `pointer(..)` for each.
    fn pointer_elements(&mut self, bytes: &[u8], width: usize) {
        for (i, c) in bytes.chunks_exact(width).enumerate() {
            self.element(i as u64);
            self.pointer(super::scalar::le(c));
        }
    }
    /// As [`PropertyVisitor::pointer_elements`], for hex-typed integers (`hex(..)` each).
    fn hex_elements(&mut self, bytes: &[u8], width: usize) {
        for (i, c) in bytes.chunks_exact(width).enumerate() {
            self.element(i as u64);
            self.hex(super::scalar::le(c));
        }
    }
    fn end_array(&mut self) {}
    fn begin_struct(&mut self) {}
    fn end_struct(&mut self) {}
    /// No value (NULL in-type, empty WBEMSID).
    fn null(&mut self) {}
    fn bool(&mut self, v: bool) {}
    fn unsigned(&mut self, v: u64) {}
    fn signed(&mut self, v: i64) {}
    fn f32(&mut self, v: f32) {}
    fn f64(&mut self, v: f64) {}
    /// A hex-typed integer.
    fn hex(&mut self, v: u64) {}
    /// A pointer, SIZE_T or code pointer (widened from the record's pointer size).
    fn pointer(&mut self, v: u64) {}
    /// Text: UTF-8, or an ANSI string that is valid UTF-8.
    fn str(&mut self, v: &str) {}
    /// An ANSI string that is not valid UTF-8: its bytes are Latin-1 characters.
    fn latin1(&mut self, v: &[u8]) {}
    /// UTF-16LE code units (a trailing odd byte is not part of the text; unpaired surrogates read
    /// as U+FFFD).
    fn utf16(&mut self, units: &[u8]) {}
    fn binary(&mut self, v: &[u8]) {}
    fn guid(&mut self, v: &Guid) {}
    /// A SID in its `S-1-…` form.
    fn sid(&mut self, v: &str) {}
    /// FILETIME: 100 ns ticks since 1601, UTC.
    fn filetime(&mut self, v: i64) {}
    /// SYSTEMTIME: year, month, day-of-week, day, hour, minute, second, milliseconds.
    fn systemtime(&mut self, v: &[u16; 8]) {}
    /// An integer with a valueMap/bitMap name.
    fn mapped(&mut self, value: u64, name: &str) {}
    fn ip(&mut self, v: IpAddr) {}
    /// A port, already in host byte order.
    fn port(&mut self, v: u16) {}
    fn socket_address(&mut self, v: SocketAddr) {}
    fn win32_error(&mut self, v: u32) {}
    fn ntstatus(&mut self, v: u32) {}
    fn hresult(&mut self, v: u32) {}
}

/// A visitor that keeps nothing: the walks that only measure or build values.
pub(crate) struct NoVisit;
impl PropertyVisitor for NoVisit {}

impl Value {
    /// Drives `v` with this value (one scalar callback, or an array's or struct's sequence).
    pub fn visit<V: PropertyVisitor + ?Sized>(&self, v: &mut V) {
        match self {
            Value::Null => v.null(),
            Value::Bool(b) => v.bool(*b),
            Value::I64(x) => v.signed(*x),
            Value::U64(x) => v.unsigned(*x),
            Value::F32(x) => v.f32(*x),
            Value::F64(x) => v.f64(*x),
            Value::String(s) => v.str(s),
            Value::Sid(s) => v.sid(s),
            Value::Mapped { value, name } => v.mapped(*value, name),
            Value::Guid(g) => v.guid(g),
            Value::Binary(b) => v.binary(b),
            Value::Array(a) => {
                v.begin_array(a.len() as u64);
                for (i, x) in a.iter().enumerate() {
                    v.element(i as u64);
                    x.visit(v);
                }
                v.end_array();
            }
            Value::Struct(p) => p.visit(v),
            Value::Hex(x) => v.hex(*x),
            Value::Pointer(x) => v.pointer(*x),
            Value::Ipv4(a) => v.ip(IpAddr::V4(*a)),
            Value::Ipv6(a) => v.ip(IpAddr::V6(*a)),
            Value::Port(p) => v.port(*p),
            Value::SocketAddress(a) => v.socket_address(*a),
            Value::Win32Error(x) => v.win32_error(*x),
            Value::NtStatus(x) => v.ntstatus(*x),
            Value::HResult(x) => v.hresult(*x),
            Value::FileTime(t) => v.filetime(*t),
            Value::SystemTime(t) => v.systemtime(t),
        }
    }
}

impl Properties {
    /// Drives `v` with these properties as one struct (`begin_struct`, fields, `end_struct`), as a
    /// plan's walk over the payload would.
    pub fn visit<V: PropertyVisitor + ?Sized>(&self, v: &mut V) {
        v.begin_struct();
        for (i, (k, x)) in self.0.iter().enumerate() {
            v.field(i, k);
            x.visit(v);
        }
        v.end_struct();
    }
}

/// A text format of properties (the JSON the sinks write is one): how a sink plugs its
/// visitor into the decoder's routes that render straight from the payload
/// ([`super::Decoder::view_etl_with`], [`super::Decoder::decode_etl_text`]).
pub trait TextFormat: 'static {
    type Visitor<'b>: PropertyVisitor;
    /// A visitor appending to `out`; `scratch` is reusable space for conversions.
    fn visitor<'b>(out: &'b mut Vec<u8>, scratch: &'b mut String) -> Self::Visitor<'b>;
}

/// A visitor that builds the [`Properties`] a walk describes: the values [`super::Decoder`] would
/// have decoded (each callback maps back to its [`Value`] variant; text handed as UTF-16 or Latin-1
/// bytes becomes a `String`). With another visitor beside it ([`Tee`]), one walk of a payload gives
/// both, e.g. the JSON text and the values of `etwkit export`.
#[derive(Default)]
pub struct PropertiesBuilder {
    /// Open structs (with the name of the property whose value comes next) and arrays.
    open: Vec<Open>,
    /// The outermost struct, once closed.
    done: Option<Properties>,
    /// Property names by the address of the text the walk hands over, kept between records (no
    /// allocation per property while the layouts repeat).
    names: crate::schema::registry::FastMap<usize, std::sync::Arc<str>>,
}

enum Open {
    Struct(Properties, Option<std::sync::Arc<str>>),
    Array(Vec<Value>),
}

impl PropertiesBuilder {
    /// Forgets what was built (a walk that failed part-way).
    pub fn reset(&mut self) {
        self.open.clear();
        self.done = None;
    }

    /// The properties of the last complete walk (empty when none); the builder starts over.
    pub fn take(&mut self) -> Properties {
        self.open.clear();
        self.done.take().unwrap_or_default()
    }

    fn put(&mut self, v: Value) {
        match self.open.last_mut() {
            Some(Open::Struct(p, name)) => {
                let n = name.take().unwrap_or_else(|| std::sync::Arc::from(""));
                p.0.push((n, v));
            }
            Some(Open::Array(a)) => a.push(v),
            None => {}
        }
    }
}

impl PropertyVisitor for PropertiesBuilder {
    fn field(&mut self, _index: usize, name: &str) {
        // Keyed by where the name lives (a plan's names stay put while it is cached), checked by
        // content: the same property gets the same `Arc` record after record.
        let n = match self.names.get(&(name.as_ptr() as usize)) {
            Some(n) if &**n == name => n.clone(),
            _ => {
                if self.names.len() >= 1 << 16 {
                    self.names.clear();
                }
                let n: std::sync::Arc<str> = std::sync::Arc::from(name);
                self.names.insert(name.as_ptr() as usize, n.clone());
                n
            }
        };
        if let Some(Open::Struct(_, pending)) = self.open.last_mut() {
            *pending = Some(n);
        }
    }
    fn begin_array(&mut self, count: u64) {
        self.open
            .push(Open::Array(Vec::with_capacity(count.min(1024) as usize)));
    }
    fn end_array(&mut self) {
        if let Some(Open::Array(a)) = self.open.pop() {
            self.put(Value::Array(a));
        }
    }
    fn begin_struct(&mut self) {
        self.open.push(Open::Struct(Properties::default(), None));
    }
    fn end_struct(&mut self) {
        if let Some(Open::Struct(p, _)) = self.open.pop() {
            if self.open.is_empty() {
                self.done = Some(p);
            } else {
                self.put(Value::Struct(p));
            }
        }
    }
    fn null(&mut self) {
        self.put(Value::Null)
    }
    fn bool(&mut self, v: bool) {
        self.put(Value::Bool(v))
    }
    fn unsigned(&mut self, v: u64) {
        self.put(Value::U64(v))
    }
    fn signed(&mut self, v: i64) {
        self.put(Value::I64(v))
    }
    fn f32(&mut self, v: f32) {
        self.put(Value::F32(v))
    }
    fn f64(&mut self, v: f64) {
        self.put(Value::F64(v))
    }
    fn hex(&mut self, v: u64) {
        self.put(Value::Hex(v))
    }
    fn pointer(&mut self, v: u64) {
        self.put(Value::Pointer(v))
    }
    fn str(&mut self, v: &str) {
        self.put(Value::String(v.to_string()))
    }
    fn latin1(&mut self, v: &[u8]) {
        self.put(Value::String(v.iter().map(|&c| c as char).collect()))
    }
    fn utf16(&mut self, units: &[u8]) {
        self.put(Value::String(super::scalar::utf16(units)))
    }
    fn binary(&mut self, v: &[u8]) {
        self.put(Value::Binary(v.to_vec()))
    }
    fn guid(&mut self, v: &Guid) {
        self.put(Value::Guid(*v))
    }
    fn sid(&mut self, v: &str) {
        self.put(Value::Sid(v.to_string()))
    }
    fn filetime(&mut self, v: i64) {
        self.put(Value::FileTime(v))
    }
    fn systemtime(&mut self, v: &[u16; 8]) {
        self.put(Value::SystemTime(*v))
    }
    fn mapped(&mut self, value: u64, name: &str) {
        self.put(Value::Mapped {
            value,
            name: name.to_string(),
        })
    }
    fn ip(&mut self, v: IpAddr) {
        self.put(match v {
            IpAddr::V4(a) => Value::Ipv4(a),
            IpAddr::V6(a) => Value::Ipv6(a),
        })
    }
    fn port(&mut self, v: u16) {
        self.put(Value::Port(v))
    }
    fn socket_address(&mut self, v: SocketAddr) {
        self.put(Value::SocketAddress(v))
    }
    fn win32_error(&mut self, v: u32) {
        self.put(Value::Win32Error(v))
    }
    fn ntstatus(&mut self, v: u32) {
        self.put(Value::NtStatus(v))
    }
    fn hresult(&mut self, v: u32) {
        self.put(Value::HResult(v))
    }
}

/// Two visitors driven by one walk, `0` then `1` at every callback. (A `&mut` of a visitor is a
/// visitor too.)
pub struct Tee<A, B>(pub A, pub B);

macro_rules! tee {
    ($($f:ident($($a:ident: $t:ty),*);)*) => {
        impl<A: PropertyVisitor, B: PropertyVisitor> PropertyVisitor for Tee<A, B> {
            $(
                #[inline]
                fn $f(&mut self, $($a: $t),*) {
                    self.0.$f($($a),*);
                    self.1.$f($($a),*);
                }
            )*
        }

        impl<V: PropertyVisitor + ?Sized> PropertyVisitor for &mut V {
            $(
                #[inline]
                fn $f(&mut self, $($a: $t),*) {
                    (**self).$f($($a),*);
                }
            )*
        }
    };
}

tee! {
    field(index: usize, name: &str);
    plain_field(index: usize, name: &str);
    field_text(index: usize, name: &str, text: &[u8], block: &[u8; KEY_BLOCK]);
    begin_array(count: u64);
    element(i: u64);
    pointer_elements(bytes: &[u8], width: usize);
    hex_elements(bytes: &[u8], width: usize);
    end_array();
    begin_struct();
    end_struct();
    null();
    bool(v: bool);
    unsigned(v: u64);
    signed(v: i64);
    f32(v: f32);
    f64(v: f64);
    hex(v: u64);
    pointer(v: u64);
    str(v: &str);
    latin1(v: &[u8]);
    utf16(units: &[u8]);
    binary(v: &[u8]);
    guid(v: &Guid);
    sid(v: &str);
    filetime(v: i64);
    systemtime(v: &[u16; 8]);
    mapped(value: u64, name: &str);
    ip(v: IpAddr);
    port(v: u16);
    socket_address(v: SocketAddr);
    win32_error(v: u32);
    ntstatus(v: u32);
    hresult(v: u32);
}
