//! Heap trace records as heap operations: HeapTraceProvider Alloc/ReAlloc/Free events (Windows
//! traces, whose kernel StackWalk stacks follow their event; etwkit's own TraceLogging heap events,
//! whose stacks are inline) become [`HeapOp`]s, handed out in time order once no stack can still
//! arrive for them — so a long trace holds only a few seconds of operations, never all of them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::symbols::ModuleMap;
use crate::event::EventRecord;
use crate::guid::Guid;
use crate::schema::builtin::heap_events::{
    image_provider, HeapOp, HeapOpKind, ImageMapping, ALLOCATOR_APIS, EVENT_ALLOC, EVENT_FREE,
    EVENT_IMAGE, EVENT_REALLOC, HEAP_PROVIDER,
};

/// Kernel StackWalk class (kernel-mof.json `StackWalk.guid`).
pub const STACKWALK_GUID: Guid = Guid::from_str_const("def2fe46-7bd6-4b80-bd94-f57fe20d0ce3");

/// StackWalk Stack event type.
pub const STACKWALK_STACK: u8 = 32;

/// The `Api` string of an etwkit TraceLogging heap event (after the fixed fields).
fn tl_api(payload: &[u8], opcode: u8) -> Option<&'static str> {
    let at = match opcode {
        EVENT_ALLOC => 28,
        EVENT_REALLOC => 44,
        EVENT_FREE => 20,
        _ => return None,
    };
    let rest = payload.get(at..)?;
    let s = &rest[..rest.iter().position(|&c| c == 0)?];
    ALLOCATOR_APIS.iter().find(|k| k.as_bytes() == s).copied()
}

/// Turns Windows heap trace records (HeapTraceProvider Alloc/ReAlloc/Free with kernel StackWalk
/// stacks) into [`HeapOp`]s.
///
/// The few fields needed are read here by the heap.json layouts (pointer-sized HeapHandle, then
/// pointer/SizeT fields packed, per the record's pointer size) rather than through the generic
/// decoder, because StackWalk correlation needs the raw timestamp anyway.
/// Stack events follow their event: `(EventTimeStamp, StackThread)` matches the heap event's
/// `(raw_timestamp, tid)`; kernel and user halves may come as two StackWalk events (appended).
pub struct WindowsHeapEvents {
    /// Operations not handed out yet, by (timestamp, arrival): time order, ties in record order.
    pending: BTreeMap<(i64, u64), Pending>,
    /// `(raw timestamp, tid)` of a pending operation still expecting a StackWalk stack.
    by_key: HashMap<(i64, u32), (i64, u64)>,
    seq: u64,
    /// The newest timestamp of any record fed.
    newest: i64,
    /// How long (100 ns units) an operation waits for its stack, and for operations of other CPUs'
    /// buffers that are older.
    window: i64,
    pub malformed: u64,
    /// Executable mappings (etwkit's Image events), in record order.
    pub images: Vec<ImageMapping>,
    pub heap_events: u64,
    pub stack_events: u64,
    /// StackWalk events whose operation was not seen (or was already handed out).
    pub unmatched_stacks: u64,
    /// Loaded modules, from the trace's own Windows image events.
    pub modules: ModuleMap,
}

struct Pending {
    op: HeapOp,
    /// StackWalk frames gathered so far (kernel and user halves may come as two events).
    frames: Option<Vec<u64>>,
    key: Option<(i64, u32)>,
}

impl Default for WindowsHeapEvents {
    fn default() -> Self {
        WindowsHeapEvents {
            pending: BTreeMap::new(),
            by_key: HashMap::new(),
            seq: 0,
            newest: i64::MIN,
            window: Self::DEFAULT_WINDOW,
            malformed: 0,
            images: Vec::new(),
            heap_events: 0,
            stack_events: 0,
            unmatched_stacks: 0,
            modules: ModuleMap::default(),
        }
    }
}

impl WindowsHeapEvents {
    /// Three seconds: beyond any realtime session's flush timer (etwkit's is one second), and far
    /// beyond the microseconds between an event and its StackWalk stack in the same CPU buffer.
    pub const DEFAULT_WINDOW: i64 = 30_000_000;

    pub fn new() -> Self {
        Self::default()
    }

    /// How long an operation waits for its stack (and for older operations), in 100 ns units.
    pub fn with_window(mut self, window: i64) -> Self {
        self.window = window.max(0);
        self
    }

    /// Operations fed but not handed out yet.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Feeds one record (any record; non-heap ones are ignored).
    pub fn push(&mut self, r: &EventRecord<'_>) {
        self.newest = self.newest.max(r.timestamp);
        let ps = r.pointer_size as usize;
        let p = &r.payload;
        let ptr = |o: usize| -> Option<u64> {
            let b = p.get(o..o + ps)?;
            Some(if ps == 4 {
                u32::from_le_bytes(b.try_into().ok()?) as u64
            } else {
                u64::from_le_bytes(b.try_into().ok()?)
            })
        };
        if r.provider == STACKWALK_GUID && r.descriptor.opcode == STACKWALK_STACK {
            self.stack_events += 1;
            let (Some(ts), Some(tid)) = (p.get(0..8), p.get(12..16)) else {
                self.malformed += 1;
                return;
            };
            let ts = i64::from_le_bytes(ts.try_into().unwrap());
            let tid = u32::from_le_bytes(tid.try_into().unwrap());
            let frames: Vec<u64> = (16..p.len()).step_by(ps).filter_map(ptr).collect();
            match self
                .by_key
                .get(&(ts, tid))
                .and_then(|k| self.pending.get_mut(k))
            {
                Some(p) => p.frames.get_or_insert_with(Vec::new).extend(frames),
                None => self.unmatched_stacks += 1,
            }
            return;
        }
        if r.provider == image_provider() && r.descriptor.id == EVENT_IMAGE {
            let u64_at = |o: usize| {
                p.get(o..o + 8)
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            };
            let pid = p
                .get(0..4)
                .map(|b| u32::from_le_bytes(b.try_into().unwrap()));
            let name = p.get(28..).and_then(|r| r.split(|&c| c == 0).next());
            match (pid, u64_at(4), u64_at(12), u64_at(20), name) {
                (Some(pid), Some(start), Some(size), Some(file_offset), Some(name)) => {
                    self.images.push(ImageMapping {
                        pid,
                        start,
                        end: start.saturating_add(size),
                        file_offset,
                        path: String::from_utf8_lossy(name).into_owned(),
                    })
                }
                _ => self.malformed += 1,
            }
            return;
        }
        if r.provider != HEAP_PROVIDER || ps == 0 {
            self.modules.push(r);
            return;
        }
        // heap.json (x64 offsets = pointer size 8; x86 = 4): Alloc {HeapHandle, AllocSize,
        // AllocAddress, SourceId}; ReAlloc {HeapHandle, NewAllocAddress, OldAllocAddress, NewAllocSize,
        // OldAllocSize, SourceId}; Free {HeapHandle, FreeAddress, SourceId}.
        let kind = match r.descriptor.opcode {
            EVENT_ALLOC => ptr(ps)
                .zip(ptr(2 * ps))
                .map(|(size, address)| (HeapOpKind::Alloc { address, size }, "HeapAlloc")),
            EVENT_REALLOC => match (ptr(ps), ptr(2 * ps), ptr(3 * ps)) {
                (Some(new_address), Some(old_address), Some(new_size)) => Some((
                    HeapOpKind::Realloc {
                        old_address,
                        new_address,
                        new_size,
                    },
                    "HeapReAlloc",
                )),
                _ => None,
            },
            EVENT_FREE => ptr(ps).map(|address| (HeapOpKind::Free { address }, "HeapFree")),
            _ => return,
        };
        self.heap_events += 1;
        let Some((kind, api)) = kind else {
            self.malformed += 1;
            return;
        };
        // TraceLogging heap events (written by etwkit on Linux) carry their stack and API inline.
        let stack = r.stack().map(|s| Arc::from(s.addresses));
        let api = if r.header_type.is_event_header() {
            tl_api(&r.payload, r.descriptor.opcode).unwrap_or(api)
        } else {
            api
        };
        let at = (r.timestamp, self.seq);
        self.seq += 1;
        let key = stack.is_none().then_some((r.raw_timestamp, r.tid));
        if let Some(k) = key {
            self.by_key.insert(k, at);
        }
        let op = HeapOp {
            pid: r.pid,
            tid: r.tid,
            timestamp: r.timestamp,
            api,
            kind,
            stack,
        };
        self.pending.insert(
            at,
            Pending {
                op,
                frames: None,
                key,
            },
        );
    }

    /// Hands out, in time order, the operations older than the newest record by more than the
    /// window: their stacks have arrived, and so have older operations of other CPUs.
    pub fn release(&mut self, out: &mut dyn FnMut(HeapOp)) {
        let cut = self.newest.saturating_sub(self.window);
        while let Some(entry) = self.pending.first_entry() {
            if entry.key().0 >= cut {
                break;
            }
            let p = entry.remove();
            out(self.complete(p));
        }
    }

    /// Hands out every operation still waiting, in time order (the end of the trace).
    pub fn drain(&mut self, out: &mut dyn FnMut(HeapOp)) {
        while let Some((_, p)) = self.pending.pop_first() {
            out(self.complete(p));
        }
    }

    /// Every operation, in time order, stacks attached (a whole file at once).
    pub fn finish(mut self) -> Vec<HeapOp> {
        let mut v = Vec::with_capacity(self.pending.len());
        self.drain(&mut |op| v.push(op));
        v
    }

    fn complete(&mut self, p: Pending) -> HeapOp {
        let mut op = p.op;
        if let Some(k) = p.key {
            self.by_key.remove(&k);
        }
        if let Some(frames) = p.frames {
            // StackWalk stacks: innermost first (kernel frames first when present); keep user frames.
            let user: Vec<u64> = frames
                .into_iter()
                .filter(|a| *a < 0xffff_8000_0000_0000)
                .collect();
            op.stack = Some(Arc::from(user));
        }
        op
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every allocator call the shim names (its wire ids) reads back by name from a TraceLogging
    /// heap event's `Api` field, each at its opcode's offset; an unknown name reads as none.
    #[test]
    fn api_names_read_back_from_tracelogging_heap_events() {
        for (opcode, at) in [(EVENT_ALLOC, 28), (EVENT_REALLOC, 44), (EVENT_FREE, 20)] {
            for name in ALLOCATOR_APIS.iter().chain(["mystery_alloc"].iter()) {
                let mut payload = vec![0xAAu8; at];
                payload.extend_from_slice(name.as_bytes());
                payload.push(0);
                let want = ALLOCATOR_APIS.contains(name).then_some(*name);
                assert_eq!(tl_api(&payload, opcode), want, "{name} at {at}");
            }
        }
        assert_eq!(
            tl_api(b"malloc\0", EVENT_ALLOC),
            None,
            "payload shorter than the fields"
        );
    }
}
