//! Kernel StackWalk events (group StackWalk def2fe46-…) attached to the event they belong to.
//!
//! Layouts (kernel-mof.json):
//! * opcode 32 `Stack`: `u64 EventTimeStamp, u32 StackProcess, u32 StackThread`, then pointer-sized
//!   return addresses;
//! * opcodes 37/38 `StackKeyKernel`/`StackKeyUser` (stack compression): the same three fields, then a
//!   pointer-sized StackKey naming a stack defined by
//! * opcodes 34/36 `KeyCreate`/`KeyRundown`: a pointer-sized StackKey, then the frames (35
//!   `KeyDelete` retires a key).
//!
//! `EventTimeStamp` is the raw (logger-clock) timestamp of the event the stack was taken for. Kernel
//! and user halves arrive as separate events for one event, kernel first, and are concatenated. An
//! event matches when its raw timestamp equals `EventTimeStamp` and its thread equals `StackThread`;
//! PERFINFO records carry no thread and match on the timestamp when only one thread's stack has it.
//!
//! Two ways to join: [`StackIndex`] (observe all records first — a pre-scan of a file — then ask per
//! event; compressed stacks resolve even when their keys are only defined by the rundown at the end)
//! and [`StackJoiner`] (streaming, records in time order: an event is released once a later timestamp
//! shows no more stack parts can come; keys not yet defined at release time are left out).

use std::collections::{HashMap, VecDeque};

use crate::schema::registry::FastMap;

use crate::event::{EventRecord, Stack};
use crate::guid::Guid;

/// The StackWalk group GUID.
pub const STACKWALK_GUID: Guid = Guid::from_str_const("def2fe46-7bd6-4b80-bd94-f57fe20d0ce3");
/// StackWalk opcodes.
pub const OPCODE_STACK: u8 = 32;
pub const OPCODE_KEY_CREATE: u8 = 34;
pub const OPCODE_KEY_DELETE: u8 = 35;
pub const OPCODE_KEY_RUNDOWN: u8 = 36;
pub const OPCODE_STACK_KEY_KERNEL: u8 = 37;
pub const OPCODE_STACK_KEY_USER: u8 = 38;

/// What a StackWalk event contributes to one event's stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StackPart {
    Frames(Vec<u64>),
    Key(u64),
}

/// One parsed StackWalk stack event (opcode 32, 37 or 38).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackWalk {
    pub event_timestamp: i64,
    pub process: u32,
    pub thread: u32,
    pub part: StackPart,
}

fn ptrs(p: &[u8], w: usize) -> impl Iterator<Item = u64> + '_ {
    p.chunks_exact(w).map(move |c| {
        if w == 4 {
            u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u64
        } else {
            u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
        }
    })
}

fn is_stackwalk(rec: &EventRecord<'_>) -> bool {
    rec.header_type.is_kernel() && rec.provider == STACKWALK_GUID
}

/// Parses a StackWalk stack event; `None` for any other record (or one too short to be one).
pub fn parse_stackwalk(rec: &EventRecord<'_>) -> Option<StackWalk> {
    if !is_stackwalk(rec) {
        return None;
    }
    let op = rec.descriptor.opcode;
    if !matches!(
        op,
        OPCODE_STACK | OPCODE_STACK_KEY_KERNEL | OPCODE_STACK_KEY_USER
    ) {
        return None;
    }
    let p = &rec.payload;
    let w = if rec.pointer_size == 4 { 4 } else { 8 };
    let event_timestamp = i64::from_le_bytes(p.get(0..8)?.try_into().ok()?);
    let process = u32::from_le_bytes(p.get(8..12)?.try_into().ok()?);
    let thread = u32::from_le_bytes(p.get(12..16)?.try_into().ok()?);
    let part = if op == OPCODE_STACK {
        StackPart::Frames(ptrs(&p[16..], w).collect())
    } else {
        StackPart::Key(ptrs(p.get(16..16 + w)?, w).next()?)
    };
    Some(StackWalk {
        event_timestamp,
        process,
        thread,
        part,
    })
}

/// A stack-key definition (KeyCreate/KeyRundown): (key, frames). `None` for other records.
pub fn parse_key_definition(rec: &EventRecord<'_>) -> Option<(u64, Vec<u64>)> {
    if !is_stackwalk(rec)
        || !matches!(
            rec.descriptor.opcode,
            OPCODE_KEY_CREATE | OPCODE_KEY_RUNDOWN
        )
    {
        return None;
    }
    let w = if rec.pointer_size == 4 { 4 } else { 8 };
    let p = &rec.payload;
    let key = ptrs(p.get(..w)?, w).next()?;
    Some((key, ptrs(&p[w..], w).collect()))
}

#[derive(Clone, Debug)]
struct Entry {
    process: u32,
    thread: u32,
    /// (raw timestamp of the StackWalk record, part)
    parts: Vec<(i64, StackPart)>,
}

/// Key definitions: key → [(raw time of the definition, frames)] in the order seen.
#[derive(Clone, Debug, Default)]
struct KeyTable {
    defs: HashMap<u64, Vec<(i64, Vec<u64>)>>,
}

impl KeyTable {
    fn observe(&mut self, rec: &EventRecord<'_>) -> bool {
        match parse_key_definition(rec) {
            Some((k, frames)) => {
                self.defs
                    .entry(k)
                    .or_default()
                    .push((rec.raw_timestamp, frames));
                true
            }
            None => false,
        }
    }
    /// The definition in force at `t`: the latest made at or before `t`, else the first after it
    /// (rundown at the end of a trace defines keys used earlier).
    fn resolve(&self, key: u64, t: i64) -> Option<&[u64]> {
        let v = self.defs.get(&key)?;
        v.iter()
            .rev()
            .find(|d| d.0 <= t)
            .or_else(|| v.iter().find(|d| d.0 > t))
            .map(|d| d.1.as_slice())
    }
    fn assemble(&self, parts: &[(i64, StackPart)], t: i64) -> Vec<u64> {
        let mut out = Vec::new();
        for (_, p) in parts {
            match p {
                StackPart::Frames(f) => out.extend_from_slice(f),
                StackPart::Key(k) => {
                    if let Some(f) = self.resolve(*k, t) {
                        out.extend_from_slice(f);
                    }
                }
            }
        }
        out
    }
}

/// Size of [`StackIndex`]'s timestamp filter: 2^20 bits (128 KiB).
const SEEN_WORDS: usize = 1 << 14;

fn seen_bit(t: i64) -> usize {
    ((t as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 44) as usize
}

/// Stacks by raw timestamp, per thread.
#[derive(Clone, Debug, Default)]
pub struct StackIndex {
    by_ts: FastMap<i64, Vec<Entry>>,
    /// One bit per hash of every timestamp in `by_ts` (bits are never cleared): most records have
    /// no stack, and this small table says so without probing the large map.
    seen: Vec<u64>,
    keys: KeyTable,
    stacks: usize,
}

impl StackIndex {
    pub fn new() -> StackIndex {
        StackIndex::default()
    }

    /// Records a StackWalk event (stack, stack-key reference or key definition); returns whether
    /// `rec` was one.
    pub fn observe(&mut self, rec: &EventRecord<'_>) -> bool {
        if self.keys.observe(rec) {
            return true;
        }
        let Some(sw) = parse_stackwalk(rec) else {
            return is_stackwalk(rec);
        };
        self.stacks += 1;
        if self.seen.is_empty() {
            self.seen = vec![0; SEEN_WORDS];
        }
        let b = seen_bit(sw.event_timestamp);
        self.seen[b / 64] |= 1 << (b % 64);
        let v = self.by_ts.entry(sw.event_timestamp).or_default();
        let part = (rec.raw_timestamp, sw.part);
        match v.iter_mut().find(|e| e.thread == sw.thread) {
            // Parts in the order they were logged (kernel half first), whatever order they are read in.
            Some(e) => {
                let at = e.parts.partition_point(|p| p.0 <= part.0);
                e.parts.insert(at, part);
            }
            None => v.push(Entry {
                process: sw.process,
                thread: sw.thread,
                parts: vec![part],
            }),
        }
        true
    }

    /// Number of stack events (opcodes 32, 37, 38) observed.
    pub fn stackwalk_events(&self) -> usize {
        self.stacks
    }

    /// Number of distinct stack keys defined.
    pub fn keys_defined(&self) -> usize {
        self.keys.defs.len()
    }

    /// The stack taken for `rec`, if StackWalk events name its timestamp and thread.
    pub fn stack_for(&self, rec: &EventRecord<'_>) -> Option<Stack> {
        if rec.provider == STACKWALK_GUID && rec.header_type.is_kernel() {
            return None;
        }
        let b = seen_bit(rec.raw_timestamp);
        if self
            .seen
            .get(b / 64)
            .is_none_or(|w| w & (1 << (b % 64)) == 0)
        {
            return None;
        }
        let v = self.by_ts.get(&rec.raw_timestamp)?;
        let e = if rec.tid == u32::MAX {
            match v.as_slice() {
                [one] => one,
                _ => return None,
            }
        } else {
            v.iter().find(|e| e.thread == rec.tid)?
        };
        Some(Stack {
            match_id: 0,
            addresses: self.keys.assemble(&e.parts, rec.raw_timestamp),
        })
    }

    /// Forgets stacks taken before `raw_timestamp` (key definitions are kept).
    pub fn prune_before(&mut self, raw_timestamp: i64) {
        self.by_ts.retain(|&t, _| t >= raw_timestamp);
    }

    /// StackProcess/StackThread of the stack taken at `raw_timestamp` when exactly one thread's stack
    /// has it (attributes PERFINFO records, which carry no PID/TID).
    pub fn owner_at(&self, raw_timestamp: i64) -> Option<(u32, u32)> {
        match self.by_ts.get(&raw_timestamp)?.as_slice() {
            [one] => Some((one.process, one.thread)),
            _ => None,
        }
    }
}

/// Streaming join for records in time order. Push every record; get back (record, stack) pairs once
/// no later StackWalk event can still belong to them: a record more than `window` raw ticks younger
/// arrived, or [`StackJoiner::finish`]. StackWalk records themselves are consumed. Matching is the
/// same as [`StackIndex::stack_for`]; a record that carries its own EVENT_HEADER stack item keeps it,
/// with kernel StackWalk frames appended.
///
/// The StackWalk record is logged after its event: in perfview_net.4.5.2.x64 the delay reaches 2^22
/// ticks of the logger clock (deferred user-mode stacks), and with stack compression every key is
/// defined after its first use (keys undefined at release time are left out). So a streaming join is
/// approximate unless the window covers the whole trace; for files prefer [`StackIndex`] (a
/// pre-scan), which is exact.
pub struct StackJoiner {
    pending: VecDeque<EventRecord<'static>>,
    index: StackIndex,
    window: i64,
    released: u64,
}

impl StackJoiner {
    /// `window`: how many raw (logger-clock) ticks to wait for an event's StackWalk records.
    pub fn new(window: i64) -> StackJoiner {
        StackJoiner {
            pending: VecDeque::new(),
            index: StackIndex::new(),
            window: window.max(0),
            released: 0,
        }
    }

    fn release(
        &mut self,
        rec: EventRecord<'static>,
        ready: &mut Vec<(EventRecord<'static>, Option<Stack>)>,
    ) {
        let st = super::record_stack(&rec, Some(&self.index));
        // Keep a window of history (time order is by UTC time, raw timestamps may tie or wobble);
        // prune now and then, not per record.
        self.released += 1;
        if self.released % 4096 == 0 {
            self.index
                .prune_before(rec.raw_timestamp.saturating_sub(self.window));
        }
        ready.push((rec, st));
    }

    /// Adds one record; appends to `ready` the records that are complete.
    pub fn push(
        &mut self,
        rec: EventRecord<'static>,
        ready: &mut Vec<(EventRecord<'static>, Option<Stack>)>,
    ) {
        if self.index.observe(&rec) {
            return;
        }
        while self
            .pending
            .front()
            .is_some_and(|e| e.raw_timestamp.saturating_add(self.window) < rec.raw_timestamp)
        {
            if let Some(e) = self.pending.pop_front() {
                self.release(e, ready);
            }
        }
        self.pending.push_back(rec);
    }

    /// Releases everything still held.
    pub fn finish(&mut self, ready: &mut Vec<(EventRecord<'static>, Option<Stack>)>) {
        while let Some(e) = self.pending.pop_front() {
            self.release(e, ready);
        }
    }
}
