//! The export's memo of walks: a record's properties (the JSON text of `events.parquet` and the
//! tape of the typed tables) are a function of its layout, pointer size and payload bytes, and
//! payloads repeat — perfview_net.4.5.x86.etl's 54 k ClrStackWalk events carry 406 distinct
//! payloads, its 53 k GCAllocationTick events 286. Each decoding thread keeps the last walks in a
//! direct-mapped table and copies a repeated payload's text and tape instead of walking it again.
//! A layout is asked while its payloads are found often enough (as `dump`'s memo,
//! [`crate::decode::view`]).

use super::tape::TapeWriter;
use crate::decode::view::{memo_slot, MemoGate, MEMO_MAX_PAYLOAD, MEMO_SLOTS};
use crate::decode::{Tee, WalkKey, WalkMemo};
use crate::schema::registry::FastMap;
use crate::sink::json::JsonProps;

#[derive(Default)]
struct Slot {
    layout: u64,
    pointer_size: u8,
    payload: Vec<u8>,
    json: Vec<u8>,
    tape: Vec<u8>,
    ids: [Option<u64>; 2],
}

/// One decoding thread's memo.
#[derive(Default)]
pub struct Memo {
    slots: Vec<Slot>,
    gates: FastMap<u64, MemoGate>,
    /// The slot the last `replay` that missed chose for `keep`.
    pending: Option<usize>,
}

impl WalkMemo<Tee<JsonProps<'_>, &mut TapeWriter>> for Memo {
    fn replay(
        &mut self,
        key: &WalkKey<'_>,
        v: &mut Tee<JsonProps<'_>, &mut TapeWriter>,
    ) -> Option<[Option<u64>; 2]> {
        self.pending = None;
        if key.payload.len() > MEMO_MAX_PAYLOAD {
            return None;
        }
        let gate = self.gates.entry(key.layout).or_default();
        if !gate.open() {
            return None;
        }
        if self.slots.is_empty() {
            self.slots.resize_with(MEMO_SLOTS, Slot::default);
        }
        let i = memo_slot(key.layout, key.pointer_size, key.payload);
        let s = &self.slots[i];
        let hit = s.layout == key.layout
            && s.pointer_size == key.pointer_size
            && s.payload == key.payload;
        gate.note(hit);
        if !hit {
            self.pending = Some(i);
            return None;
        }
        v.0.push_text(&s.json);
        v.1.push_tape(&s.tape);
        Some(s.ids)
    }

    fn keep(
        &mut self,
        key: &WalkKey<'_>,
        v: &Tee<JsonProps<'_>, &mut TapeWriter>,
        ids: [Option<u64>; 2],
    ) {
        let Some(i) = self.pending.take() else {
            return;
        };
        let s = &mut self.slots[i];
        s.layout = key.layout;
        s.pointer_size = key.pointer_size;
        s.payload.clear();
        s.payload.extend_from_slice(key.payload);
        s.json.clear();
        s.json.extend_from_slice(v.0.text());
        s.tape.clear();
        s.tape.extend_from_slice(v.1.tape());
        s.ids = ids;
    }
}
