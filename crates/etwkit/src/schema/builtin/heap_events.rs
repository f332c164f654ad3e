//! The heap provider's events as etwkit reads and writes them: the operation model ([`HeapOp`]),
//! the HeapTraceProvider ids, the TraceLogging encoding of Linux-born heap events
//! ([`HeapEventEncoder`], heap.json field names and x64 offsets) and the executable-mapping (Image)
//! events that let a saved trace be symbolized offline. Used by the Linux tracers, the Windows heap
//! session and `analysis::heap` alike.

use std::collections::HashMap;
use std::sync::Arc;

use crate::event::EventRecord;
use crate::guid::Guid;

/// The allocator calls etwkit's heap events name in their `Api` field, in the order of the shim's
/// wire ids (the record header's api byte indexes this list).
pub const ALLOCATOR_APIS: [&str; 10] = [
    "malloc",
    "calloc",
    "realloc",
    "reallocarray",
    "posix_memalign",
    "memalign",
    "aligned_alloc",
    "valloc",
    "pvalloc",
    "free",
];

/// The heap provider (HeapTraceProvider), heap.json `provider.guid`.
pub const HEAP_PROVIDER: Guid = super::heap::PROVIDER;
/// Heap event types (heap.json opcodes).
pub const EVENT_ALLOC: u8 = super::heap::opcode::ALLOC;
pub const EVENT_REALLOC: u8 = super::heap::opcode::REALLOC;
pub const EVENT_FREE: u8 = super::heap::opcode::FREE;
/// TraceLogging provider of the executable mappings etwkit writes next to Linux heap events, so a
/// saved trace can be symbolized offline.
pub const IMAGE_PROVIDER_NAME: &str = "etwkit-Linux-Image";
/// Its event id (event "Image": ProcessId, ImageBase, ImageSize, FileOffset, FileName).
pub const EVENT_IMAGE: u16 = 1;

/// A file-backed executable mapping of a traced process, as carried in a saved trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageMapping {
    pub pid: u32,
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub file_offset: u64,
    pub path: String,
}

/// One heap operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "op")]
pub enum HeapOpKind {
    Alloc {
        address: u64,
        size: u64,
    },
    Realloc {
        old_address: u64,
        new_address: u64,
        new_size: u64,
    },
    Free {
        address: u64,
    },
}

impl HeapOpKind {
    /// The heap provider event id for this kind (Alloc 33, ReAlloc 34, Free 36).
    pub fn event_id(&self) -> u8 {
        match self {
            HeapOpKind::Alloc { .. } => EVENT_ALLOC,
            HeapOpKind::Realloc { .. } => EVENT_REALLOC,
            HeapOpKind::Free { .. } => EVENT_FREE,
        }
    }
}

/// A heap operation of one thread, with its stack when one was captured (first address = the
/// instruction pointer at the event, then return addresses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeapOp {
    pub pid: u32,
    pub tid: u32,
    /// UTC FILETIME.
    pub timestamp: i64,
    /// The API that did it (`malloc`, `calloc`, `HeapAlloc`...).
    pub api: &'static str,
    pub kind: HeapOpKind,
    pub stack: Option<Arc<[u64]>>,
}

/// The provider GUID of the Image events (derived from [`IMAGE_PROVIDER_NAME`]).
pub fn image_provider() -> Guid {
    static G: std::sync::OnceLock<Guid> = std::sync::OnceLock::new();
    *G.get_or_init(|| crate::tlg::provider_guid_from_name(IMAGE_PROVIDER_NAME))
}

/// Writes [`HeapOp`]s as heap-provider events: TraceLogging self-describing records with the heap
/// provider GUID, ids/opcodes 33/34/36 and heap.json field names (pointer-sized fields are 8 bytes,
/// so the payload offsets equal heap.json's x64 layout), plus an `Api` field; stacks as STACK_TRACE64.
pub struct HeapEventEncoder {
    image: crate::tlg::TlSchema,
    alloc: crate::tlg::TlSchema,
    realloc: crate::tlg::TlSchema,
    free: crate::tlg::TlSchema,
    /// Last known size per (pid, address), for ReAlloc's OldAllocSize.
    sizes: HashMap<(u32, u64), u64>,
}

impl HeapEventEncoder {
    pub fn new() -> Result<HeapEventEncoder, crate::tlg::TlError> {
        use crate::tlg::{InType as I, OutType as O, TlSchemaBuilder};
        let b = |name: &str, id: u8| {
            TlSchemaBuilder::new("HeapTraceProvider", name)
                .provider_guid(HEAP_PROVIDER)
                .id(id as u16)
                .opcode(id)
                .version(2)
        };
        Ok(HeapEventEncoder {
            image: TlSchemaBuilder::new(IMAGE_PROVIDER_NAME, "Image")
                .id(EVENT_IMAGE)
                .field("ProcessId", I::U32, O::Default)
                .field("ImageBase", I::U64, O::Hex)
                .field("ImageSize", I::U64, O::Default)
                .field("FileOffset", I::U64, O::Hex)
                .field("FileName", I::CStr8, O::Default)
                .build()?,
            alloc: b("Alloc", EVENT_ALLOC)
                .field("HeapHandle", I::U64, O::Hex)
                .field("AllocSize", I::U64, O::Default)
                .field("AllocAddress", I::U64, O::Hex)
                .field("SourceId", I::U32, O::Default)
                .field("Api", I::CStr8, O::Default)
                .build()?,
            realloc: b("ReAlloc", EVENT_REALLOC)
                .field("HeapHandle", I::U64, O::Hex)
                .field("NewAllocAddress", I::U64, O::Hex)
                .field("OldAllocAddress", I::U64, O::Hex)
                .field("NewAllocSize", I::U64, O::Default)
                .field("OldAllocSize", I::U64, O::Default)
                .field("SourceId", I::U32, O::Default)
                .field("Api", I::CStr8, O::Default)
                .build()?,
            free: b("Free", EVENT_FREE)
                .field("HeapHandle", I::U64, O::Hex)
                .field("FreeAddress", I::U64, O::Hex)
                .field("SourceId", I::U32, O::Default)
                .field("Api", I::CStr8, O::Default)
                .build()?,
            sizes: HashMap::new(),
        })
    }

    /// The record of one executable mapping of a traced process (what an offline report needs to
    /// name its stacks), at `timestamp` (UTC FILETIME).
    pub fn encode_image(&self, m: &ImageMapping, timestamp: i64) -> EventRecord<'static> {
        use crate::tlg::{event_record, TlInstance, TlPayload};
        let mut p = TlPayload::with_capacity(64 + m.path.len());
        p.push_u32(m.pid)
            .push_u64(m.start)
            .push_u64(m.end.saturating_sub(m.start))
            .push_u64(m.file_offset)
            .push_cstr(&m.path);
        let inst = TlInstance {
            pid: m.pid,
            tid: 0,
            cpu: 0,
            timestamp,
            activity_id: Guid::ZERO,
        };
        event_record(&self.image, &inst, p.into_bytes()).into_owned()
    }

    /// The record of one op (HeapHandle is 0: glibc has one process heap).
    pub fn encode(&mut self, op: &HeapOp, cpu: u16) -> EventRecord<'static> {
        use crate::tlg::{event_record_with_ext, TlInstance, TlPayload};
        let mut p = TlPayload::with_capacity(64);
        let schema = match op.kind {
            HeapOpKind::Alloc { address, size } => {
                self.sizes.insert((op.pid, address), size);
                p.push_u64(0)
                    .push_u64(size)
                    .push_u64(address)
                    .push_u32(0)
                    .push_cstr(op.api);
                &self.alloc
            }
            HeapOpKind::Realloc {
                old_address,
                new_address,
                new_size,
            } => {
                let old = self.sizes.remove(&(op.pid, old_address)).unwrap_or(0);
                self.sizes.insert((op.pid, new_address), new_size);
                p.push_u64(0)
                    .push_u64(new_address)
                    .push_u64(old_address)
                    .push_u64(new_size)
                    .push_u64(old);
                p.push_u32(0).push_cstr(op.api);
                &self.realloc
            }
            HeapOpKind::Free { address } => {
                self.sizes.remove(&(op.pid, address));
                p.push_u64(0)
                    .push_u64(address)
                    .push_u32(0)
                    .push_cstr(op.api);
                &self.free
            }
        };
        let inst = TlInstance {
            pid: op.pid,
            tid: op.tid,
            cpu,
            timestamp: op.timestamp,
            activity_id: Guid::ZERO,
        };
        let ext = match &op.stack {
            Some(s) => std::borrow::Cow::Owned(schema.ext_with_stack(&crate::event::Stack {
                match_id: 0,
                addresses: s.to_vec(),
            })),
            None => std::borrow::Cow::Owned(schema.ext().to_vec()),
        };
        event_record_with_ext(schema, &inst, p.into_bytes(), ext).into_owned()
    }
}

/// Logger name of etwkit heap files written while attached to a running process: their StartTime
/// is when tracing started (operations before it were not seen).
pub const ATTACHED_LOGGER_NAME: &str = "etwkit heap (attached)";

/// Allocations settled inside a tracer: (pid, allocation stack, count, bytes).
pub type SettledPairs = (u32, Option<Arc<[u64]>>, u64, u64);

/// What a heap tracer knows besides the operations it delivered: pairs it settled itself, losses,
/// and notes on why the figures may not be exact. Filled by `live::heap::HeapSession::finish` and
/// `wait`, taken in by `analysis::heap::HeapAnalyzer::add_totals`.
#[derive(Clone, Debug, Default)]
pub struct HeapTotals {
    /// Blocks allocated and freed again inside the tracer (the Linux shim settles short-lived pairs
    /// itself): (pid, allocation stack, count, bytes).
    pub transient: Vec<SettledPairs>,
    /// Reallocations counted by the tracer, per pid.
    pub reallocs: Vec<(u32, u64)>,
    /// Operations lost by the platform.
    pub lost: u64,
    pub notes: Vec<String>,
    /// When tracing began, as a FILETIME (attach to a running process: operations before it are
    /// not seen).
    pub tracing_started: Option<i64>,
}
