//! Kernel StackWalk events (group StackWalk def2fe46-…, opcode 32) attached to the event they
//! belong to.
//!
//! A StackWalk_Event payload is `u64 EventTimeStamp, u32 StackProcess, u32 StackThread`, then
//! pointer-sized return addresses (kernel-mof.json). `EventTimeStamp` is the raw (logger-clock)
//! timestamp of the event the stack was taken for; kernel and user halves may come as two StackWalk
//! events for the same event, in that order, and are concatenated. An event matches when its raw
//! timestamp equals `EventTimeStamp` and its thread equals `StackThread` (PERFINFO records carry no
//! thread: they match on the timestamp when one thread's stack has it).
//!
//! Two ways to join: [`StackIndex`] (collect all stacks first, e.g. in a pre-scan of a file, then ask
//! per event) and [`StackJoiner`] (streaming, for records arriving in time order: an event is
//! released once a later timestamp shows its stacks cannot still come).

use std::collections::{HashMap, VecDeque};

use crate::event::{EventRecord, Stack};
use crate::guid::Guid;

/// The StackWalk group GUID.
pub const STACKWALK_GUID: Guid = Guid::from_str_const("def2fe46-7bd6-4b80-bd94-f57fe20d0ce3");
/// StackWalk opcode of a stack event.
pub const OPCODE_STACK: u8 = 32;

/// One parsed StackWalk event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackWalk {
    pub event_timestamp: i64,
    pub process: u32,
    pub thread: u32,
    pub addresses: Vec<u64>,
}

/// Parses a StackWalk stack event; `None` for any other record (or one too short to be one).
pub fn parse_stackwalk(rec: &EventRecord<'_>) -> Option<StackWalk> {
    if !rec.header_type.is_kernel()
        || rec.provider != STACKWALK_GUID
        || rec.descriptor.opcode != OPCODE_STACK
    {
        return None;
    }
    let p = &rec.payload;
    let ts = i64::from_le_bytes(p.get(0..8)?.try_into().ok()?);
    let process = u32::from_le_bytes(p.get(8..12)?.try_into().ok()?);
    let thread = u32::from_le_bytes(p.get(12..16)?.try_into().ok()?);
    let w = if rec.pointer_size == 4 { 4 } else { 8 };
    let addresses = p[16..]
        .chunks_exact(w)
        .map(|c| {
            if w == 4 {
                u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as u64
            } else {
                u64::from_le_bytes(c.try_into().unwrap_or_default())
            }
        })
        .collect();
    Some(StackWalk {
        event_timestamp: ts,
        process,
        thread,
        addresses,
    })
}

/// Stacks by (raw timestamp) → per-thread entries.
#[derive(Clone, Debug, Default)]
pub struct StackIndex {
    by_ts: HashMap<i64, Vec<(u32, u32, Vec<u64>)>>,
    stacks: usize,
}

impl StackIndex {
    pub fn new() -> StackIndex {
        StackIndex::default()
    }

    /// Records a StackWalk event; returns whether `rec` was one.
    pub fn observe(&mut self, rec: &EventRecord<'_>) -> bool {
        let Some(sw) = parse_stackwalk(rec) else {
            return false;
        };
        self.stacks += 1;
        let v = self.by_ts.entry(sw.event_timestamp).or_default();
        match v.iter_mut().find(|e| e.1 == sw.thread) {
            Some(e) => e.2.extend_from_slice(&sw.addresses),
            None => v.push((sw.process, sw.thread, sw.addresses)),
        }
        true
    }

    /// Number of StackWalk events observed.
    pub fn stackwalk_events(&self) -> usize {
        self.stacks
    }

    /// The stack taken for `rec`, if a StackWalk event names its timestamp and thread.
    pub fn stack_for(&self, rec: &EventRecord<'_>) -> Option<Stack> {
        if rec.provider == STACKWALK_GUID {
            return None;
        }
        let v = self.by_ts.get(&rec.raw_timestamp)?;
        let e = if rec.tid == u32::MAX {
            if v.len() == 1 {
                &v[0]
            } else {
                return None;
            }
        } else {
            v.iter().find(|e| e.1 == rec.tid)?
        };
        Some(Stack {
            match_id: 0,
            addresses: e.2.clone(),
        })
    }

    /// StackProcess/StackThread of the stack taken at `raw_timestamp` when exactly one thread's stack
    /// has it (attributes PERFINFO records, which carry no PID/TID).
    pub fn owner_at(&self, raw_timestamp: i64) -> Option<(u32, u32)> {
        match self.by_ts.get(&raw_timestamp)?.as_slice() {
            [one] => Some((one.0, one.1)),
            _ => None,
        }
    }
}

/// Streaming join for records in time order. Push every record; get back (record, stack) pairs once
/// no later StackWalk event can still belong to them (a record with a larger raw timestamp arrived, or
/// [`StackJoiner::finish`]). StackWalk records themselves are consumed.
#[derive(Default)]
pub struct StackJoiner {
    pending: VecDeque<(EventRecord<'static>, Option<Stack>)>,
}

impl StackJoiner {
    pub fn new() -> StackJoiner {
        StackJoiner::default()
    }

    /// Adds one record; appends to `ready` the records that are complete.
    pub fn push(
        &mut self,
        rec: EventRecord<'static>,
        ready: &mut Vec<(EventRecord<'static>, Option<Stack>)>,
    ) {
        if let Some(sw) = parse_stackwalk(&rec) {
            for (ev, st) in self.pending.iter_mut().rev() {
                if ev.raw_timestamp < sw.event_timestamp {
                    break;
                }
                if ev.raw_timestamp == sw.event_timestamp
                    && (ev.tid == sw.thread || ev.tid == u32::MAX)
                {
                    st.get_or_insert_with(Stack::default)
                        .addresses
                        .extend_from_slice(&sw.addresses);
                    break;
                }
            }
            return;
        }
        // StackWalk events follow their event at once; anything strictly older than this record can
        // no longer receive one.
        while self
            .pending
            .front()
            .is_some_and(|(e, _)| e.raw_timestamp < rec.raw_timestamp)
        {
            ready.extend(self.pending.pop_front());
        }
        let own = rec.stack();
        self.pending.push_back((rec, own));
    }

    /// Releases everything still held.
    pub fn finish(&mut self, ready: &mut Vec<(EventRecord<'static>, Option<Stack>)>) {
        ready.extend(self.pending.drain(..));
    }
}
