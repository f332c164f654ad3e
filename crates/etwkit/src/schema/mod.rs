//! Where payload layouts come from, and the one model they all become.
//!
//! Every source (built-in tables, a user's instrumentation manifest, TRACE_EVENT_INFO blobs embedded
//! in merged traces, TraceLogging metadata, kernel MOF classes) produces an [`EventSchema`]: a tree of
//! [`Property`]s whose types are TDH in/out types ([`InType`]/[`OutType`] numbers, see
//! `types.rs`). The decoder walks a payload against that tree.
//!
//! Keys follow what really identifies a layout (see DESIGN.md): manifest events by
//! (provider, id, version); kernel and classic MOF by (class/group GUID, opcode, version); TraceLogging
//! by the metadata bytes themselves.

pub mod builtin;

use std::sync::Arc;

use crate::guid::Guid;

/// A TDH in-type (`TDH_INTYPE_*`) number; TraceLogging in-types are mapped onto these.
pub type InType = u16;
/// A TDH out-type (`TDH_OUTTYPE_*`) number; TraceLogging out-types are mapped onto these.
pub type OutType = u16;

/// How many values a property holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Count {
    /// A scalar.
    One,
    /// A fixed-size array.
    Fixed(u16),
    /// An array whose length is the value of an earlier property at the same level (index into the
    /// enclosing property list).
    FromProperty(usize),
    /// A TraceLogging variable array: a u16 element count precedes the elements.
    Prefixed,
    /// As many elements as the rest of the payload holds (kernel StackWalk frames).
    ToEnd,
    /// One value while the payload holds more bytes than the fixed-size fields after it at the same
    /// level take; otherwise none, and the property is left out: a field that later builds of a
    /// producer add without a new event version (Thread v3's ThreadName, which Windows 10 kernels
    /// log at the payload's end and older ones do not; .NET 4.5.2's ExtraGen0Commit in
    /// GCPerHeapHistory v2, before the one-byte ClrInstanceID that 4.5 already wrote).
    IfRoom,
}

/// How many bytes (or characters, for strings) a single value takes, when the type does not say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Length {
    /// Implied by the in-type (fixed-size scalars, NUL-terminated or counted strings, SIDs...).
    Natural,
    Fixed(u16),
    /// The value of an earlier property at the same level (index into the enclosing property list).
    FromProperty(usize),
}

/// A valueMap or bitMap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueMap {
    pub name: String,
    pub is_bitmap: bool,
    pub entries: Vec<(u64, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PropertyKind {
    Scalar { in_type: InType, out_type: OutType },
    Struct(Vec<Property>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Property {
    pub name: String,
    pub kind: PropertyKind,
    pub count: Count,
    pub length: Length,
    pub map: Option<Arc<ValueMap>>,
}

impl Property {
    pub fn scalar(name: impl Into<String>, in_type: InType, out_type: OutType) -> Property {
        Property {
            name: name.into(),
            kind: PropertyKind::Scalar { in_type, out_type },
            count: Count::One,
            length: Length::Natural,
            map: None,
        }
    }
}

/// Where a schema came from (reported by `etwkit dump` and used to prefer one source over another).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum SchemaSource {
    Builtin,
    UserManifest,
    Embedded,
    EventSourceManifest,
    TraceLogging,
    KernelMof,
}

/// The layout and names of one kind of event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSchema {
    pub provider: Guid,
    pub provider_name: Option<String>,
    pub event_name: Option<String>,
    pub task_name: Option<String>,
    pub opcode_name: Option<String>,
    pub keywords_name: Option<String>,
    pub properties: Vec<Property>,
    pub source: SchemaSource,
}

/// What identifies a non-TraceLogging layout. TraceLogging schemas are keyed by their metadata bytes
/// and never appear here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SchemaKey {
    /// Manifest (and EventSource) events: (provider GUID, event id, version).
    Manifest {
        provider: Guid,
        id: u16,
        version: u8,
    },
    /// Kernel and classic MOF events: (group or event-class GUID, opcode / hook type, version).
    Mof {
        class: Guid,
        opcode: u8,
        version: u8,
    },
}

pub mod manifest;
pub mod mend;
pub mod registry;
pub mod tdh;
pub mod tracelogging;
pub mod types;

pub use registry::Registry;

/// A schema source (TraceLogging metadata, TRACE_EVENT_INFO blob, manifest XML) could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {reason} (at byte {offset})")]
pub struct SchemaError {
    /// Which kind of metadata was being read ("TraceLogging metadata", "TRACE_EVENT_INFO", ...).
    pub what: &'static str,
    /// Byte offset inside that metadata (line-less sources), or 0.
    pub offset: usize,
    pub reason: String,
}

impl SchemaError {
    pub(crate) fn new(what: &'static str, offset: usize, reason: impl Into<String>) -> SchemaError {
        SchemaError {
            what,
            offset,
            reason: reason.into(),
        }
    }
}
