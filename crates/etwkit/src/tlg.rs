//! TraceLogging (self-describing) event encoding.
//!
//! Events born outside Windows (Linux tracepoints, the Winsock-style and heap providers) are written as
//! TraceLogging events: an EVENT_HEADER64 record whose extended data holds a PROV_TRAITS item (the
//! provider name) and an EVENT_SCHEMA_TL item (event name, field names and types), and whose payload is
//! packed by TraceLogging rules. Every ETW reader then names and decodes them without a manifest.
//!
//! - [`provider_guid_from_name`]: the provider GUID ETW derives from a TraceLogging/EventSource name.
//! - [`TlSchemaBuilder`] → [`TlSchema`]: one precomputed extended-data chain per event type, usable
//!   directly as `EventRecord.ext` (borrow it from a per-event-type cache).
//! - [`TlPayload`]: the payload packer.
//! - [`event_record`]: an [`EventRecord`] for one instance.
//!
//! Layouts follow `../shared/notes/etl-format.md` §4 and §6.
//!
//! Reader support differs: etl-parser (PyPI, 1.0.1) decodes CStr16, CStr8 (ASCII), I8..U64, F32,
//! F64, Bool32, Binary, GUID, SYSTEMTIME, Hex32 and var-count arrays of those; it fails on Hex64,
//! FILETIME, Str16/Str8, structs, const-count arrays and field tags. Fields that every reader must
//! decode are best declared with those types (e.g. an address as U64 with [`OutType::Hex`]).

use std::borrow::Cow;
use std::fmt;

use sha1::{Digest, Sha1};

use crate::event::{
    encode_ext_item, ext_type, flags, EventDescriptor, EventRecord, HeaderType, Stack,
};
use crate::guid::Guid;

/// The channel TraceLogging events carry (seen in every TL schema of the samples).
pub const TL_CHANNEL: u8 = 11;

/// Namespace GUID 482C2DB2-C390-47C8-87F8-1A15BFC130FB in big-endian byte order.
const NAME_HASH_NAMESPACE: [u8; 16] = [
    0x48, 0x2C, 0x2D, 0xB2, 0xC3, 0x90, 0x47, 0xC8, 0x87, 0xF8, 0x1A, 0x15, 0xBF, 0xC1, 0x30, 0xFB,
];

/// The provider GUID ETW derives from a TraceLogging / EventSource provider name: SHA-1 over the
/// namespace bytes and the upper-cased name in UTF-16BE, first 16 bytes, version nibble 5, read as a
/// Windows-layout GUID.
pub fn provider_guid_from_name(name: &str) -> Guid {
    let mut h = Sha1::new();
    h.update(NAME_HASH_NAMESPACE);
    let mut buf = [0u16; 2];
    for c in name.chars() {
        // Invariant upper-casing is per character; mappings that expand (ß → SS) keep the character.
        let mut up = c.to_uppercase();
        let u = match (up.next(), up.next()) {
            (Some(u), None) => u,
            _ => c,
        };
        for unit in u.encode_utf16(&mut buf) {
            h.update(unit.to_be_bytes());
        }
    }
    let d = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    b[7] = (b[7] & 0x0F) | 0x50;
    Guid::from_le_bytes(&b).expect("16 bytes")
}

/// TraceLogging field input types (how the value is stored in the payload).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum InType {
    /// NUL-terminated UTF-16LE.
    CStr16 = 1,
    /// NUL-terminated 8-bit (UTF-8 with [`OutType::Utf8`], else the code page).
    CStr8 = 2,
    I8 = 3,
    U8 = 4,
    I16 = 5,
    U16 = 6,
    I32 = 7,
    U32 = 8,
    I64 = 9,
    U64 = 10,
    F32 = 11,
    F64 = 12,
    /// 4-byte boolean.
    Bool32 = 13,
    /// u16 byte count then bytes; no arrays.
    Binary = 14,
    Guid = 15,
    FileTime = 17,
    SystemTime = 18,
    Sid = 19,
    Hex32 = 20,
    Hex64 = 21,
    /// u16 byte count then UTF-16LE.
    Str16 = 22,
    /// u16 byte count then 8-bit chars.
    Str8 = 23,
    /// A struct; its member count sits in the OutType slot.
    Struct = 24,
    /// u16 byte count then bytes; arrays allowed.
    BinaryC = 25,
}

impl InType {
    pub fn from_u8(v: u8) -> Option<InType> {
        use InType::*;
        Some(match v {
            1 => CStr16,
            2 => CStr8,
            3 => I8,
            4 => U8,
            5 => I16,
            6 => U16,
            7 => I32,
            8 => U32,
            9 => I64,
            10 => U64,
            11 => F32,
            12 => F64,
            13 => Bool32,
            14 => Binary,
            15 => Guid,
            17 => FileTime,
            18 => SystemTime,
            19 => Sid,
            20 => Hex32,
            21 => Hex64,
            22 => Str16,
            23 => Str8,
            24 => Struct,
            25 => BinaryC,
            _ => return None,
        })
    }

    /// Byte size of a fixed-size value, `None` for variable-size ones.
    pub fn fixed_size(self) -> Option<usize> {
        use InType::*;
        match self {
            I8 | U8 => Some(1),
            I16 | U16 => Some(2),
            I32 | U32 | F32 | Bool32 | Hex32 => Some(4),
            I64 | U64 | F64 | FileTime | Hex64 => Some(8),
            Guid | SystemTime => Some(16),
            _ => None,
        }
    }
}

/// TraceLogging output types (formatting hints; not the TDH OutType numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum OutType {
    Default = 0,
    NoPrint = 1,
    /// A character for I8/U8/U16.
    String = 2,
    Boolean = 3,
    Hex = 4,
    Pid = 5,
    Tid = 6,
    /// Big-endian u16.
    Port = 7,
    Ipv4 = 8,
    Ipv6 = 9,
    SocketAddress = 10,
    Xml = 11,
    Json = 12,
    Win32Error = 13,
    NtStatus = 14,
    HResult = 15,
    FileTime = 16,
    Signed = 17,
    Unsigned = 18,
    DateTimeCultureInsensitive = 33,
    Utf8 = 35,
    Pkcs7WithTypeInfo = 36,
    CodePointer = 37,
    DateTimeUtc = 38,
}

/// How many values a field holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arity {
    Scalar,
    /// A fixed count, written in the metadata; no prefix in the payload.
    ConstCount(u16),
    /// A u16 element count precedes the elements in the payload.
    VarCount,
}

/// An invalid schema description.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlError {
    #[error("TraceLogging name {0:?} contains a NUL character")]
    NulInName(String),
    #[error("struct {name:?}: member count {count} out of range 1..=127")]
    StructSize { name: String, count: usize },
    #[error("struct {name:?} declares {declared} members but only {given} follow")]
    StructIncomplete {
        name: String,
        declared: usize,
        given: usize,
    },
    #[error("field {name:?}: {in_type:?} cannot be an array (use BinaryC)")]
    NoArray { name: String, in_type: InType },
    #[error("field {name:?}: a constant-count array needs a count of at least 1")]
    ZeroConstCount { name: String },
    #[error("field {name:?}: use struct_field/struct_array for structs")]
    StructViaField { name: String },
    #[error("tags {0:#x} exceed 28 bits")]
    Tags(u32),
    #[error("{what} is {len} bytes, over the 65,535-byte limit of a TraceLogging blob")]
    TooLong { what: &'static str, len: usize },
}

/// Encodes 28-bit tags as chained bytes: byte i carries bits `27-7i ..= 21-7i` in its low 7 bits,
/// the high bit says another byte follows. Zero tags encode as a single 0 byte.
fn push_tags(out: &mut Vec<u8>, tags: u32) {
    let mut shift = 21i32;
    loop {
        let chunk = ((tags >> shift) & 0x7F) as u8;
        let rest_mask = if shift == 0 { 0 } else { (1u32 << shift) - 1 };
        if tags & rest_mask != 0 && shift > 0 {
            out.push(chunk | 0x80);
            shift -= 7;
        } else {
            out.push(chunk);
            break;
        }
    }
}

fn check_name(n: &str) -> Result<(), TlError> {
    if n.contains('\0') {
        Err(TlError::NulInName(n.to_string()))
    } else {
        Ok(())
    }
}

/// A struct still collecting members while building.
#[derive(Debug)]
struct OpenStruct {
    name: String,
    declared: usize,
    given: usize,
}

/// Builds the extended-data chain of one TraceLogging event type.
///
/// ```
/// use etwkit::tlg::{TlSchemaBuilder, InType, OutType};
/// let schema = TlSchemaBuilder::new("MyProvider", "Connect")
///     .field("fd", InType::I32, OutType::Default)
///     .field("addr", InType::CStr8, OutType::Utf8)
///     .build()
///     .unwrap();
/// assert_eq!(schema.provider_guid().to_string(), "b3864c38-4273-58c5-545b-8b3608343471");
/// ```
#[derive(Debug)]
pub struct TlSchemaBuilder {
    provider_name: String,
    provider_guid: Option<Guid>,
    group_guid: Option<Guid>,
    event_name: String,
    event_tags: u32,
    descriptor: EventDescriptor,
    fields: Vec<u8>,
    open: Vec<OpenStruct>,
    error: Option<TlError>,
}

impl TlSchemaBuilder {
    /// A new event type `event_name` of provider `provider_name`. Level 5 (verbose), channel 11, id,
    /// version, opcode, task and keywords 0 until set.
    pub fn new(provider_name: &str, event_name: &str) -> Self {
        let mut b = TlSchemaBuilder {
            provider_name: provider_name.to_string(),
            provider_guid: None,
            group_guid: None,
            event_name: event_name.to_string(),
            event_tags: 0,
            descriptor: EventDescriptor {
                channel: TL_CHANNEL,
                level: 5,
                ..Default::default()
            },
            fields: Vec::new(),
            open: Vec::new(),
            error: None,
        };
        if let Err(e) = check_name(provider_name).and(check_name(event_name)) {
            b.error = Some(e);
        }
        b
    }

    /// Uses an explicit provider GUID instead of the one derived from the name.
    pub fn provider_guid(mut self, g: Guid) -> Self {
        self.provider_guid = Some(g);
        self
    }

    /// Adds a provider-group trait (trait type 1) to the provider traits.
    pub fn provider_group(mut self, g: Guid) -> Self {
        self.group_guid = Some(g);
        self
    }

    /// Event tags (28 bits).
    pub fn tags(mut self, tags: u32) -> Self {
        if tags >> 28 != 0 {
            self.fail(TlError::Tags(tags));
        }
        self.event_tags = tags;
        self
    }

    pub fn id(mut self, id: u16) -> Self {
        self.descriptor.id = id;
        self
    }
    pub fn version(mut self, v: u8) -> Self {
        self.descriptor.version = v;
        self
    }
    pub fn level(mut self, level: u8) -> Self {
        self.descriptor.level = level;
        self
    }
    pub fn opcode(mut self, opcode: u8) -> Self {
        self.descriptor.opcode = opcode;
        self
    }
    pub fn task(mut self, task: u16) -> Self {
        self.descriptor.task = task;
        self
    }
    pub fn keywords(mut self, keywords: u64) -> Self {
        self.descriptor.keywords = keywords;
        self
    }
    pub fn channel(mut self, channel: u8) -> Self {
        self.descriptor.channel = channel;
        self
    }

    fn fail(&mut self, e: TlError) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    /// Counts a new field towards the innermost open struct, closing structs that are complete.
    fn count_member(&mut self) {
        // A struct was counted by its parent when it was opened, so completing it counts nothing more.
        if let Some(top) = self.open.last_mut() {
            top.given += 1;
            if top.given == top.declared {
                self.open.pop();
            }
        }
    }

    fn raw_field(
        &mut self,
        name: &str,
        in_meta: u8,
        out: u8,
        tags: u32,
        arity: Arity,
        custom: Option<&[u8]>,
    ) {
        if let Err(e) = check_name(name) {
            self.fail(e);
            return;
        }
        if tags >> 28 != 0 {
            self.fail(TlError::Tags(tags));
            return;
        }
        self.count_member();
        let arity_bits = match (arity, custom) {
            (_, Some(_)) => 0x60,
            (Arity::Scalar, None) => 0,
            (Arity::ConstCount(_), None) => 0x20,
            (Arity::VarCount, None) => 0x40,
        };
        let f = &mut self.fields;
        f.extend_from_slice(name.as_bytes());
        f.push(0);
        let has_out = out != 0 || tags != 0;
        f.push(in_meta | arity_bits | if has_out { 0x80 } else { 0 });
        if has_out {
            f.push(out | if tags != 0 { 0x80 } else { 0 });
            if tags != 0 {
                push_tags(f, tags);
            }
        }
        if let Arity::ConstCount(n) = arity {
            if custom.is_none() {
                f.extend_from_slice(&n.to_le_bytes());
            }
        }
        if let Some(c) = custom {
            f.extend_from_slice(&(c.len().min(0xFFFF) as u16).to_le_bytes());
            f.extend_from_slice(c);
        }
    }

    fn check_value_field(&mut self, name: &str, in_type: InType, arity: Arity) -> bool {
        if in_type == InType::Struct {
            self.fail(TlError::StructViaField {
                name: name.to_string(),
            });
            return false;
        }
        if arity != Arity::Scalar && in_type == InType::Binary {
            self.fail(TlError::NoArray {
                name: name.to_string(),
                in_type,
            });
            return false;
        }
        if arity == Arity::ConstCount(0) {
            self.fail(TlError::ZeroConstCount {
                name: name.to_string(),
            });
            return false;
        }
        true
    }

    /// A scalar field.
    pub fn field(self, name: &str, in_type: InType, out_type: OutType) -> Self {
        self.field_ex(name, in_type, out_type, Arity::Scalar, 0)
    }

    /// A variable-count array (u16 count prefix in the payload).
    pub fn array(self, name: &str, in_type: InType, out_type: OutType) -> Self {
        self.field_ex(name, in_type, out_type, Arity::VarCount, 0)
    }

    /// Any value field: arity and field tags (28 bits) given explicitly.
    pub fn field_ex(
        mut self,
        name: &str,
        in_type: InType,
        out_type: OutType,
        arity: Arity,
        tags: u32,
    ) -> Self {
        if self.check_value_field(name, in_type, arity) {
            self.raw_field(name, in_type as u8, out_type as u8, tags, arity, None);
        }
        self
    }

    /// A field with a custom serializer schema (arity 0x60): the payload holds a u16 byte count then the
    /// bytes, `schema` is stored verbatim in the metadata.
    pub fn custom_field(
        mut self,
        name: &str,
        in_type: InType,
        out_type: OutType,
        schema: &[u8],
    ) -> Self {
        if schema.len() > 0xFFFF {
            self.fail(TlError::TooLong {
                what: "custom schema",
                len: schema.len(),
            });
            return self;
        }
        if self.check_value_field(name, in_type, Arity::Scalar) {
            self.raw_field(
                name,
                in_type as u8,
                out_type as u8,
                0,
                Arity::Scalar,
                Some(schema),
            );
        }
        self
    }

    /// A struct whose `members` fields are the next ones added (structs nest).
    pub fn struct_field(self, name: &str, members: usize) -> Self {
        self.struct_ex(name, members, Arity::Scalar)
    }

    /// A variable-count array of structs: the payload holds a u16 count, then all members per element.
    pub fn struct_array(self, name: &str, members: usize) -> Self {
        self.struct_ex(name, members, Arity::VarCount)
    }

    /// A struct with any arity.
    pub fn struct_ex(mut self, name: &str, members: usize, arity: Arity) -> Self {
        if !(1..=127).contains(&members) {
            self.fail(TlError::StructSize {
                name: name.to_string(),
                count: members,
            });
            return self;
        }
        if arity == Arity::ConstCount(0) {
            self.fail(TlError::ZeroConstCount {
                name: name.to_string(),
            });
            return self;
        }
        self.raw_field(name, InType::Struct as u8, members as u8, 0, arity, None);
        self.open.push(OpenStruct {
            name: name.to_string(),
            declared: members,
            given: 0,
        });
        self
    }

    /// Finishes the schema; errors name the first problem met.
    pub fn build(self) -> Result<TlSchema, TlError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if let Some(s) = self.open.last() {
            return Err(TlError::StructIncomplete {
                name: s.name.clone(),
                declared: s.declared,
                given: s.given,
            });
        }
        // Provider traits: u16 total size, name, NUL, then traits.
        let mut traits = vec![0u8, 0];
        traits.extend_from_slice(self.provider_name.as_bytes());
        traits.push(0);
        if let Some(g) = self.group_guid {
            traits.extend_from_slice(&19u16.to_le_bytes());
            traits.push(1);
            traits.extend_from_slice(&g.to_le_bytes());
        }
        if traits.len() > 0xFFFF - 8 {
            return Err(TlError::TooLong {
                what: "provider traits",
                len: traits.len(),
            });
        }
        let n = traits.len() as u16;
        traits[..2].copy_from_slice(&n.to_le_bytes());

        let mut meta = vec![0u8, 0];
        push_tags(&mut meta, self.event_tags);
        meta.extend_from_slice(self.event_name.as_bytes());
        meta.push(0);
        meta.extend_from_slice(&self.fields);
        if meta.len() > 0xFFFF - 8 {
            return Err(TlError::TooLong {
                what: "event metadata",
                len: meta.len(),
            });
        }
        let n = meta.len() as u16;
        meta[..2].copy_from_slice(&n.to_le_bytes());

        let mut ext = Vec::with_capacity(traits.len() + meta.len() + 32);
        encode_ext_item(&mut ext, ext_type::PROV_TRAITS, &traits, true);
        let meta_item = ext.len();
        encode_ext_item(&mut ext, ext_type::EVENT_SCHEMA_TL, &meta, false);
        let provider_guid = self
            .provider_guid
            .unwrap_or_else(|| provider_guid_from_name(&self.provider_name));
        Ok(TlSchema {
            provider_name: self.provider_name,
            provider_guid,
            event_name: self.event_name,
            descriptor: self.descriptor,
            ext,
            traits_range: (8, 8 + traits.len()),
            meta_range: (meta_item + 8, meta_item + 8 + meta.len()),
        })
    }
}

/// One TraceLogging event type: provider identity, descriptor and the precomputed extended-data chain
/// `[PROV_TRAITS (linkage 1), EVENT_SCHEMA_TL (linkage 0)]`.
#[derive(Clone, PartialEq, Eq)]
pub struct TlSchema {
    provider_name: String,
    provider_guid: Guid,
    event_name: String,
    /// The event type's descriptor (channel 11 unless changed).
    pub descriptor: EventDescriptor,
    ext: Vec<u8>,
    traits_range: (usize, usize),
    meta_range: (usize, usize),
}

impl fmt::Debug for TlSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlSchema")
            .field("provider", &self.provider_name)
            .field("guid", &self.provider_guid)
            .field("event", &self.event_name)
            .field("descriptor", &self.descriptor)
            .field("ext_len", &self.ext.len())
            .finish()
    }
}

impl TlSchema {
    pub fn provider_name(&self) -> &str {
        &self.provider_name
    }
    pub fn provider_guid(&self) -> Guid {
        self.provider_guid
    }
    pub fn event_name(&self) -> &str {
        &self.event_name
    }
    /// The on-disk extended-data chain, ready for `EventRecord.ext`.
    pub fn ext(&self) -> &[u8] {
        &self.ext
    }
    /// The PROV_TRAITS item data.
    pub fn traits(&self) -> &[u8] {
        &self.ext[self.traits_range.0..self.traits_range.1]
    }
    /// The EVENT_SCHEMA_TL item data (the key of this event type's layout).
    pub fn metadata(&self) -> &[u8] {
        &self.ext[self.meta_range.0..self.meta_range.1]
    }

    /// The chain with extra items (e.g. a stack, a related activity id) placed before the TL items.
    pub fn ext_with(&self, extra: &[(u16, &[u8])]) -> Vec<u8> {
        let mut v = Vec::with_capacity(
            self.ext.len() + extra.iter().map(|(_, d)| d.len() + 16).sum::<usize>(),
        );
        for (t, d) in extra {
            encode_ext_item(&mut v, *t, d, true);
        }
        v.extend_from_slice(&self.ext);
        v
    }

    /// The chain with a STACK_TRACE64 item before the TL items.
    pub fn ext_with_stack(&self, stack: &Stack) -> Vec<u8> {
        self.ext_with(&[(ext_type::STACK_TRACE64, &stack.to_ext64())])
    }

    /// Largest payload a record of this type can carry (record size is a u16).
    pub fn max_payload(&self) -> usize {
        0xFFFF - 0x50 - self.ext.len()
    }
}

/// Per-instance header values of a TraceLogging event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlInstance {
    pub pid: u32,
    pub tid: u32,
    pub cpu: u16,
    /// UTC FILETIME.
    pub timestamp: i64,
    pub activity_id: Guid,
}

/// Builds the EventRecord of one TraceLogging event: EVENT_HEADER64, flags EXTENDED_INFO, the schema's
/// descriptor, `ext` borrowed from the schema. Use [`event_record_with_ext`] for a per-event chain
/// (e.g. from [`TlSchema::ext_with_stack`]).
pub fn event_record<'a>(
    schema: &'a TlSchema,
    inst: &TlInstance,
    payload: impl Into<Cow<'a, [u8]>>,
) -> EventRecord<'a> {
    event_record_with_ext(schema, inst, payload, Cow::Borrowed(schema.ext()))
}

/// As [`event_record`] with an explicit extended-data chain.
pub fn event_record_with_ext<'a>(
    schema: &TlSchema,
    inst: &TlInstance,
    payload: impl Into<Cow<'a, [u8]>>,
    ext: Cow<'a, [u8]>,
) -> EventRecord<'a> {
    EventRecord {
        header_type: HeaderType::EventHeader64,
        flags: flags::EXTENDED_INFO | flags::HEADER_64_BIT,
        provider: schema.provider_guid,
        descriptor: schema.descriptor,
        hook_id: None,
        pid: inst.pid,
        tid: inst.tid,
        cpu: inst.cpu,
        timestamp: inst.timestamp,
        raw_timestamp: inst.timestamp,
        kernel_time: 0,
        user_time: 0,
        activity_id: inst.activity_id,
        pointer_size: 8,
        payload: payload.into(),
        ext,
    }
}

/// Packs TraceLogging values: scalars raw, no alignment; counted values (Str16, Str8, Binary,
/// BinaryC) get a u16 byte count; var-count arrays a u16 element count.
///
/// Values that do not fit (a counted value over 65,535 bytes, a NUL inside a C string) are cut at
/// the limit so the payload stays decodable; [`TlPayload::truncated`] says how many were.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlPayload {
    buf: Vec<u8>,
    truncated: u32,
}

macro_rules! push_le {
    ($($name:ident: $t:ty),*) => {$(
        #[inline]
        pub fn $name(&mut self, v: $t) -> &mut Self {
            self.buf.extend_from_slice(&v.to_le_bytes());
            self
        }
    )*};
}

impl TlPayload {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn with_capacity(n: usize) -> Self {
        TlPayload {
            buf: Vec::with_capacity(n),
            truncated: 0,
        }
    }
    /// Clears for reuse, keeping the allocation.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.truncated = 0;
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// How many values were cut to fit.
    pub fn truncated(&self) -> u32 {
        self.truncated
    }

    push_le!(push_u8: u8, push_i8: i8, push_u16: u16, push_i16: i16, push_u32: u32, push_i32: i32,
             push_u64: u64, push_i64: i64, push_f32: f32, push_f64: f64);

    /// Hex32 / Hex64 / pointer-sized values: `size` 4 or 8 bytes.
    pub fn push_ptr(&mut self, v: u64, size: u8) -> &mut Self {
        if size == 4 {
            self.push_u32(v as u32)
        } else {
            self.push_u64(v)
        }
    }
    /// A 4-byte boolean (Bool32).
    pub fn push_bool32(&mut self, v: bool) -> &mut Self {
        self.push_u32(v as u32)
    }
    /// A u8 boolean (U8 with OutType::Boolean).
    pub fn push_bool8(&mut self, v: bool) -> &mut Self {
        self.push_u8(v as u8)
    }
    pub fn push_guid(&mut self, g: &Guid) -> &mut Self {
        self.buf.extend_from_slice(&g.to_le_bytes());
        self
    }
    /// A FILETIME (i64 100 ns ticks since 1601).
    pub fn push_filetime(&mut self, ft: i64) -> &mut Self {
        self.push_i64(ft)
    }
    /// A SYSTEMTIME: year, month, day-of-week, day, hour, minute, second, milliseconds (u16 each).
    pub fn push_systemtime(&mut self, st: [u16; 8]) -> &mut Self {
        for v in st {
            self.push_u16(v);
        }
        self
    }
    /// A SID, copied as given (8 + 4·sub-authority-count bytes).
    pub fn push_sid(&mut self, sid: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(sid);
        self
    }

    /// A var-count array's element count.
    pub fn push_count(&mut self, n: usize) -> &mut Self {
        let c = if n > 0xFFFF {
            self.truncated += 1;
            0xFFFF
        } else {
            n
        };
        self.push_u16(c as u16)
    }

    /// CStr8: the string's UTF-8 bytes and a NUL (cut at an interior NUL).
    pub fn push_cstr(&mut self, s: &str) -> &mut Self {
        self.push_cstr_bytes(s.as_bytes())
    }
    /// CStr8 from raw 8-bit bytes (cut at an interior NUL).
    pub fn push_cstr_bytes(&mut self, s: &[u8]) -> &mut Self {
        let end = match s.iter().position(|&c| c == 0) {
            Some(i) => {
                self.truncated += 1;
                i
            }
            None => s.len(),
        };
        self.buf.extend_from_slice(&s[..end]);
        self.buf.push(0);
        self
    }
    /// CStr16: UTF-16LE and a NUL unit (cut at an interior NUL).
    pub fn push_cstr16(&mut self, s: &str) -> &mut Self {
        for u in s.encode_utf16() {
            if u == 0 {
                self.truncated += 1;
                break;
            }
            self.buf.extend_from_slice(&u.to_le_bytes());
        }
        self.buf.extend_from_slice(&[0, 0]);
        self
    }
    /// Str16: u16 byte count, then UTF-16LE (cut at 32,767 units).
    pub fn push_str16(&mut self, s: &str) -> &mut Self {
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        let mut n = 0usize;
        for u in s.encode_utf16() {
            if n == 0x7FFF {
                self.truncated += 1;
                break;
            }
            self.buf.extend_from_slice(&u.to_le_bytes());
            n += 1;
        }
        self.buf[at..at + 2].copy_from_slice(&((n * 2) as u16).to_le_bytes());
        self
    }
    /// Str8: u16 byte count, then the UTF-8 bytes.
    pub fn push_str8(&mut self, s: &str) -> &mut Self {
        self.push_bytes(s.as_bytes())
    }
    /// Binary / BinaryC: u16 byte count, then the bytes (cut at 65,535).
    pub fn push_bytes(&mut self, b: &[u8]) -> &mut Self {
        let n = if b.len() > 0xFFFF {
            self.truncated += 1;
            0xFFFF
        } else {
            b.len()
        };
        self.push_u16(n as u16);
        self.buf.extend_from_slice(&b[..n]);
        self
    }
    /// Raw bytes with no prefix (const-count arrays of fixed-size values, preformatted data).
    pub fn push_raw(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }

    /// A var-count array of u32 (count prefix, then elements).
    pub fn push_u32_array(&mut self, v: &[u32]) -> &mut Self {
        let n = v.len().min(0xFFFF);
        self.push_count(v.len());
        for x in &v[..n] {
            self.push_u32(*x);
        }
        self
    }
    /// A var-count array of u64 (count prefix, then elements).
    pub fn push_u64_array(&mut self, v: &[u64]) -> &mut Self {
        let n = v.len().min(0xFFFF);
        self.push_count(v.len());
        for x in &v[..n] {
            self.push_u64(*x);
        }
        self
    }
    /// A var-count array of u16 (count prefix, then elements).
    pub fn push_u16_array(&mut self, v: &[u16]) -> &mut Self {
        let n = v.len().min(0xFFFF);
        self.push_count(v.len());
        for x in &v[..n] {
            self.push_u16(*x);
        }
        self
    }
    /// A var-count array of u8 (count prefix, then elements).
    pub fn push_u8_array(&mut self, v: &[u8]) -> &mut Self {
        let n = v.len().min(0xFFFF);
        self.push_count(v.len());
        self.buf.extend_from_slice(&v[..n]);
        self
    }
}

impl AsRef<[u8]> for TlPayload {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl From<TlPayload> for Vec<u8> {
    fn from(p: TlPayload) -> Vec<u8> {
        p.buf
    }
}

impl<'a> From<TlPayload> for Cow<'a, [u8]> {
    fn from(p: TlPayload) -> Cow<'a, [u8]> {
        Cow::Owned(p.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::ExtItems;

    #[test]
    fn provider_guids_from_names() {
        for (name, guid) in [
            ("MyProvider", "b3864c38-4273-58c5-545b-8b3608343471"),
            ("MySource", "a61ea624-4944-55fc-c2a8-37838829438d"),
            ("PerfView", "a8a71ac1-040f-54a2-07ca-00a89b5ab761"),
            ("Atum-Hw3d", "2c759654-e0cc-5e69-a99d-480ab2fa0c64"),
            ("sonde-gateway", "559e1292-fdb4-551e-6ee3-4e8c6d9da223"),
        ] {
            assert_eq!(provider_guid_from_name(name).to_string(), guid, "{name}");
        }
        // Case-insensitive, as ETW upper-cases first.
        assert_eq!(
            provider_guid_from_name("mysource"),
            provider_guid_from_name("MYSOURCE")
        );
    }

    #[test]
    fn tags_encoding() {
        let mut v = Vec::new();
        push_tags(&mut v, 0);
        assert_eq!(v, [0]);
        v.clear();
        push_tags(&mut v, 0x0FE0_0000);
        assert_eq!(v, [0x7F]);
        v.clear();
        push_tags(&mut v, 1);
        assert_eq!(v, [0x80, 0x80, 0x80, 0x01]);
        v.clear();
        push_tags(&mut v, 0x0020_4000);
        assert_eq!(v, [0x81, 0x01]);
    }

    /// An independent reader of the §6 metadata grammar: (name, in_type, out_type, arity bits,
    /// const count, tags) per field, plus event name and tags.
    #[derive(Debug, PartialEq)]
    struct ParsedField {
        name: String,
        in_type: u8,
        out_type: u8,
        arity: u8,
        count: u16,
        tags: u32,
    }

    fn read_tags(m: &[u8], p: &mut usize) -> u32 {
        let mut t = 0u32;
        for i in 0..4 {
            let b = m[*p];
            *p += 1;
            t |= ((b & 0x7F) as u32) << (21 - 7 * i);
            if b & 0x80 == 0 {
                break;
            }
        }
        t
    }

    fn read_cstr(m: &[u8], p: &mut usize) -> String {
        let end = *p + m[*p..].iter().position(|&c| c == 0).unwrap();
        let s = String::from_utf8(m[*p..end].to_vec()).unwrap();
        *p = end + 1;
        s
    }

    fn parse_meta(m: &[u8]) -> (String, u32, Vec<ParsedField>) {
        let total = u16::from_le_bytes([m[0], m[1]]) as usize;
        assert_eq!(total, m.len());
        let mut p = 2;
        let tags = read_tags(m, &mut p);
        let name = read_cstr(m, &mut p);
        let mut fields = Vec::new();
        while p < total {
            let fname = read_cstr(m, &mut p);
            let inm = m[p];
            p += 1;
            let (mut out, mut ftags) = (0, 0);
            if inm & 0x80 != 0 {
                let o = m[p];
                p += 1;
                out = o & 0x7F;
                if o & 0x80 != 0 {
                    ftags = read_tags(m, &mut p);
                }
            }
            let arity = inm & 0x60;
            let mut count = 0;
            if arity == 0x20 {
                count = u16::from_le_bytes([m[p], m[p + 1]]);
                p += 2;
            } else if arity == 0x60 {
                let n = u16::from_le_bytes([m[p], m[p + 1]]) as usize;
                p += 2 + n;
                count = n as u16;
            }
            fields.push(ParsedField {
                name: fname,
                in_type: inm & 0x1F,
                out_type: out,
                arity,
                count,
                tags: ftags,
            });
        }
        assert_eq!(p, total);
        (name, tags, fields)
    }

    #[test]
    fn schema_round_trips_through_independent_reader() {
        let s = TlSchemaBuilder::new("Linux-Winsock", "SocketConnect")
            .tags(0x0020_4000)
            .id(12)
            .level(4)
            .keywords(0x10)
            .provider_group(Guid::from_str_const("4d4f80d9-c8bd-4d73-bb5b-19c90402c5ac"))
            .field("Socket", InType::U64, OutType::Hex)
            .field("Comm", InType::CStr8, OutType::Utf8)
            .field("Port", InType::U16, OutType::Port)
            .field_ex(
                "Addr",
                InType::U8,
                OutType::Default,
                Arity::ConstCount(16),
                0,
            )
            .array("Stack", InType::Hex64, OutType::Default)
            .struct_array("Peers", 2)
            .field("Name", InType::CStr16, OutType::Default)
            .struct_field("Inner", 1)
            .field_ex(
                "Flags",
                InType::U32,
                OutType::Hex,
                Arity::Scalar,
                0x0FE0_0001,
            )
            .field("When", InType::FileTime, OutType::Default)
            .build()
            .unwrap();
        // The chain: PROV_TRAITS (linkage 1), EVENT_SCHEMA_TL (linkage 0), 8-aligned.
        let items: Vec<_> = ExtItems::new(s.ext()).collect();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].ext_type, ext_type::PROV_TRAITS);
        assert_eq!(items[1].ext_type, ext_type::EVENT_SCHEMA_TL);
        assert_eq!(s.ext().len() % 8, 0);
        assert_eq!(&s.ext()[4..6], &[1, 0]);
        assert_eq!(items[0].data, s.traits());
        assert_eq!(items[1].data, s.metadata());
        // Traits: size, name, group trait (19 bytes, type 1, GUID).
        let t = s.traits();
        assert_eq!(u16::from_le_bytes([t[0], t[1]]) as usize, t.len());
        assert_eq!(&t[2..16], b"Linux-Winsock\0");
        assert_eq!(&t[16..19], &[19, 0, 1]);
        assert_eq!(
            Guid::from_le_bytes(&t[19..]).unwrap().to_string(),
            "4d4f80d9-c8bd-4d73-bb5b-19c90402c5ac"
        );

        let (name, tags, fields) = parse_meta(s.metadata());
        assert_eq!(name, "SocketConnect");
        assert_eq!(tags, 0x0020_4000);
        let f = |name: &str, in_type, out_type, arity, count, tags| ParsedField {
            name: name.into(),
            in_type,
            out_type,
            arity,
            count,
            tags,
        };
        assert_eq!(
            fields,
            vec![
                f("Socket", 10, 4, 0, 0, 0),
                f("Comm", 2, 35, 0, 0, 0),
                f("Port", 6, 7, 0, 0, 0),
                f("Addr", 4, 0, 0x20, 16, 0),
                f("Stack", 21, 0, 0x40, 0, 0),
                f("Peers", 24, 2, 0x40, 0, 0),
                f("Name", 1, 0, 0, 0, 0),
                f("Inner", 24, 1, 0, 0, 0),
                f("Flags", 8, 4, 0, 0, 0x0FE0_0001),
                f("When", 17, 0, 0, 0, 0),
            ]
        );
        assert_eq!(s.provider_guid(), provider_guid_from_name("Linux-Winsock"));
        assert_eq!(s.descriptor.channel, 11);
        assert_eq!(s.descriptor.id, 12);
    }

    #[test]
    fn builder_rejects_bad_schemas() {
        let e = TlSchemaBuilder::new("P", "E")
            .struct_field("S", 2)
            .field("a", InType::U8, OutType::Default)
            .build();
        assert_eq!(
            e,
            Err(TlError::StructIncomplete {
                name: "S".into(),
                declared: 2,
                given: 1
            })
        );
        let e = TlSchemaBuilder::new("P", "E")
            .array("b", InType::Binary, OutType::Default)
            .build();
        assert!(matches!(e, Err(TlError::NoArray { .. })));
        let e = TlSchemaBuilder::new("P", "E")
            .field("a\0b", InType::U8, OutType::Default)
            .build();
        assert!(matches!(e, Err(TlError::NulInName(_))));
        let e = TlSchemaBuilder::new("P", "E").struct_field("S", 0).build();
        assert!(matches!(e, Err(TlError::StructSize { .. })));
        let e = TlSchemaBuilder::new("P", "E")
            .field("S", InType::Struct, OutType::Default)
            .build();
        assert!(matches!(e, Err(TlError::StructViaField { .. })));
        let e = TlSchemaBuilder::new("P", "E").tags(1 << 28).build();
        assert_eq!(e, Err(TlError::Tags(1 << 28)));
        let long = "x".repeat(70_000);
        let e = TlSchemaBuilder::new("P", &long).build();
        assert!(matches!(
            e,
            Err(TlError::TooLong {
                what: "event metadata",
                ..
            })
        ));
    }

    #[test]
    fn nested_struct_closing_counts_correctly() {
        // Outer{Inner{a,b}, c} then d at top level.
        let s = TlSchemaBuilder::new("P", "E")
            .struct_field("Outer", 2)
            .struct_field("Inner", 2)
            .field("a", InType::U8, OutType::Default)
            .field("b", InType::U8, OutType::Default)
            .field("c", InType::U8, OutType::Default)
            .field("d", InType::U8, OutType::Default)
            .build();
        // Inner's completion must count towards Outer, so after c Outer is closed and d is top level.
        assert!(s.is_ok(), "{s:?}");
        let e = TlSchemaBuilder::new("P", "E")
            .struct_field("Outer", 2)
            .struct_field("Inner", 2)
            .field("a", InType::U8, OutType::Default)
            .field("b", InType::U8, OutType::Default)
            .build();
        assert_eq!(
            e,
            Err(TlError::StructIncomplete {
                name: "Outer".into(),
                declared: 2,
                given: 1
            })
        );
    }

    /// Decodes a payload by the parsed metadata (independent of the packer) into strings.
    fn decode(fields: &[ParsedField], pl: &[u8]) -> Vec<(String, String)> {
        fn one(f: &ParsedField, pl: &[u8], p: &mut usize) -> String {
            let take = |p: &mut usize, n: usize| {
                let s = &pl[*p..*p + n];
                *p += n;
                s
            };
            match f.in_type {
                1 => {
                    let mut u = Vec::new();
                    loop {
                        let c = u16::from_le_bytes(take(p, 2).try_into().unwrap());
                        if c == 0 {
                            break;
                        }
                        u.push(c);
                    }
                    String::from_utf16(&u).unwrap()
                }
                2 => {
                    let end = pl[*p..].iter().position(|&c| c == 0).unwrap();
                    let s = String::from_utf8(pl[*p..*p + end].to_vec()).unwrap();
                    *p += end + 1;
                    s
                }
                4 => take(p, 1)[0].to_string(),
                7 => i32::from_le_bytes(take(p, 4).try_into().unwrap()).to_string(),
                6 => u16::from_le_bytes(take(p, 2).try_into().unwrap()).to_string(),
                8 | 20 => u32::from_le_bytes(take(p, 4).try_into().unwrap()).to_string(),
                10 | 21 => u64::from_le_bytes(take(p, 8).try_into().unwrap()).to_string(),
                15 => Guid::from_le_bytes(take(p, 16)).unwrap().to_string(),
                22 => {
                    let n = u16::from_le_bytes(take(p, 2).try_into().unwrap()) as usize;
                    let u: Vec<u16> = take(p, n)
                        .chunks(2)
                        .map(|c| u16::from_le_bytes([c[0], c[1]]))
                        .collect();
                    String::from_utf16(&u).unwrap()
                }
                14 | 25 => {
                    let n = u16::from_le_bytes(take(p, 2).try_into().unwrap()) as usize;
                    format!("{:02x?}", take(p, n))
                }
                t => panic!("type {t} not in this test"),
            }
        }
        let mut p = 0;
        let mut out = Vec::new();
        for f in fields {
            let n = match f.arity {
                0 => None,
                0x20 => Some(f.count as usize),
                _ => {
                    let n = u16::from_le_bytes([pl[p], pl[p + 1]]) as usize;
                    p += 2;
                    Some(n)
                }
            };
            let v = match n {
                None => one(f, pl, &mut p),
                Some(n) => (0..n)
                    .map(|_| one(f, pl, &mut p))
                    .collect::<Vec<_>>()
                    .join(","),
            };
            out.push((f.name.clone(), v));
        }
        assert_eq!(p, pl.len(), "payload fully consumed");
        out
    }

    #[test]
    fn payload_packs_by_tl_rules() {
        let s = TlSchemaBuilder::new("P", "E")
            .field("fd", InType::I32, OutType::Default)
            .field("comm", InType::CStr8, OutType::Utf8)
            .field("wide", InType::CStr16, OutType::Default)
            .field("counted", InType::Str16, OutType::Default)
            .field("blob", InType::Binary, OutType::Default)
            .array("ips", InType::Hex64, OutType::Default)
            .field_ex(
                "fixed",
                InType::U16,
                OutType::Default,
                Arity::ConstCount(3),
                0,
            )
            .field("id", InType::Guid, OutType::Default)
            .build()
            .unwrap();
        let mut p = TlPayload::new();
        p.push_i32(-7)
            .push_cstr("curl")
            .push_cstr16("héllo")
            .push_str16("wörld")
            .push_bytes(&[1, 2, 3])
            .push_u64_array(&[0x1000, 0x2000])
            .push_u16(1)
            .push_u16(2)
            .push_u16(3)
            .push_guid(&Guid::from_str_const(
                "a61ea624-4944-55fc-c2a8-37838829438d",
            ));
        assert_eq!(p.truncated(), 0);
        let (_, _, fields) = parse_meta(s.metadata());
        let got = decode(&fields, p.as_bytes());
        let want: Vec<(String, String)> = [
            ("fd", "-7"),
            ("comm", "curl"),
            ("wide", "héllo"),
            ("counted", "wörld"),
            ("blob", "[01, 02, 03]"),
            ("ips", "4096,8192"),
            ("fixed", "1,2,3"),
            ("id", "a61ea624-4944-55fc-c2a8-37838829438d"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(got, want);

        let rec = event_record(
            &s,
            &TlInstance {
                pid: 42,
                tid: 43,
                cpu: 1,
                timestamp: 5,
                ..Default::default()
            },
            p,
        );
        assert_eq!(rec.header_type, HeaderType::EventHeader64);
        assert_eq!(rec.descriptor.channel, 11);
        assert_eq!(rec.flags & flags::EXTENDED_INFO, flags::EXTENDED_INFO);
        assert_eq!(rec.traits_provider_name(), Some("P"));
        assert_eq!(
            rec.ext.as_ptr(),
            s.ext().as_ptr(),
            "ext borrowed from the schema"
        );
        assert!(matches!(rec.ext, Cow::Borrowed(_)));
    }

    #[test]
    fn payload_cuts_what_does_not_fit_and_says_so() {
        let mut p = TlPayload::new();
        p.push_cstr("a\0b");
        assert_eq!(p.as_bytes(), b"a\0");
        assert_eq!(p.truncated(), 1);
        p.clear();
        p.push_bytes(&vec![7u8; 70_000]);
        assert_eq!(p.len(), 2 + 0xFFFF);
        assert_eq!(&p.as_bytes()[..2], &[0xFF, 0xFF]);
        assert_eq!(p.truncated(), 1);
    }

    #[test]
    fn stack_goes_before_tl_items() {
        let s = TlSchemaBuilder::new("P", "E")
            .field("a", InType::U8, OutType::Default)
            .build()
            .unwrap();
        let st = Stack {
            match_id: 0,
            addresses: vec![0x7fff_0000_1234, 0x7fff_0000_5678],
        };
        let ext = s.ext_with_stack(&st);
        let items: Vec<_> = ExtItems::new(&ext).collect();
        assert_eq!(
            items.iter().map(|i| i.ext_type).collect::<Vec<_>>(),
            [
                ext_type::STACK_TRACE64,
                ext_type::PROV_TRAITS,
                ext_type::EVENT_SCHEMA_TL
            ]
        );
        assert_eq!(Stack::from_ext(&items[0]), Some(st));
        assert_eq!(items[2].data, s.metadata());
    }
}
