//! Kernel StackWalk events (group StackWalk def2fe46-…) attached to the event they belong to.
//!
//! Layouts (kernel-mof.json):
//! * opcode 32 `Stack`: `u64 EventTimeStamp, u32 StackProcess, u32 StackThread`, then pointer-sized
//!   return addresses;
//! * opcodes 37/38 `StackKeyKernel`/`StackKeyUser` (stack compression): the same three fields, then a
//!   pointer-sized StackKey naming a stack defined by
//! * opcodes 34/36 `KeyCreate`/`KeyRundown`: a pointer-sized StackKey, then the frames; 35
//!   `KeyDelete`, the same, retires a key and names the frames it stood for. Keys are reused: a
//!   reference resolves to what its key meant when the reference was logged (the definition
//!   before it, unless deleted since; else the next delete or rundown, which name the frames in
//!   force).
//!
//! `EventTimeStamp` is the raw (logger-clock) timestamp of the event the stack was taken for. Kernel
//! and user halves arrive as separate events for one event, kernel first, and are concatenated. An
//! event matches when its raw timestamp equals `EventTimeStamp` and its thread equals `StackThread`;
//! PERFINFO records carry no thread: a SampledProfile record matches on the thread its payload names
//! (ThreadId, after the InstructionPointer), any other on the timestamp when only one thread's stack
//! has it (timer samples of several CPUs often share a timestamp).
//!
//! Two ways to join: [`StackIndex`] (observe all records first — a pre-scan of a file — then ask per
//! event; compressed stacks resolve even when their keys are only defined by the rundown at the end)
//! and [`StackJoiner`] (streaming, records in time order: an event is released once a later timestamp
//! shows no more stack parts can come; keys not yet defined at release time are left out).

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use crate::schema::registry::{FastHasher, FastMap};

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

/// The kernel PerfInfo event group.
pub const PERFINFO_GUID: Guid = Guid::from_str_const("ce1dbfb4-137e-4da6-87b0-3f59aa102cbc");
/// PerfInfo SampledProfile: `InstructionPointer` (pointer-sized), `ThreadId` (u32), `Count`...
pub const OPCODE_SAMPLED_PROFILE: u8 = 46;

/// The thread whose stack `rec` matches: the header's, else (PERFINFO records carry none) the
/// `ThreadId` of a SampledProfile payload; `u32::MAX` when neither names one.
fn stack_thread(rec: &EventRecord<'_>) -> u32 {
    if rec.tid != u32::MAX
        || rec.provider != PERFINFO_GUID
        || rec.descriptor.opcode != OPCODE_SAMPLED_PROFILE
        || !rec.header_type.is_kernel()
    {
        return rec.tid;
    }
    let w = if rec.pointer_size == 4 { 4 } else { 8 };
    rec.payload
        .get(w..w + 4)
        .map_or(u32::MAX, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

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

/// Appends the `w`-byte (4 or 8) pointers of `p` to `out`: [`ptrs`] with one loop per width, for
/// frame arrays (a trace's frames are many).
fn extend_ptrs(out: &mut Vec<u64>, p: &[u8], w: usize) {
    if w == 8 {
        out.extend(
            p.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
        );
    } else {
        out.extend(
            p.chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")) as u64),
        );
    }
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
        let mut frames = Vec::with_capacity(p.len().saturating_sub(16) / w);
        extend_ptrs(&mut frames, &p[16..], w);
        StackPart::Frames(frames)
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
    key_frames(rec)
}

/// A stack key retired (KeyDelete): (key, the frames it stood for until then). `None` for other
/// records.
pub fn parse_key_delete(rec: &EventRecord<'_>) -> Option<(u64, Vec<u64>)> {
    if !is_stackwalk(rec) || rec.descriptor.opcode != OPCODE_KEY_DELETE {
        return None;
    }
    key_frames(rec)
}

/// The key and frames of a KeyCreate, KeyDelete or KeyRundown record.
fn key_frames(rec: &EventRecord<'_>) -> Option<(u64, Vec<u64>)> {
    let w = if rec.pointer_size == 4 { 4 } else { 8 };
    let p = &rec.payload;
    let key = ptrs(p.get(..w)?, w).next()?;
    let mut frames = Vec::with_capacity(p.len() / w);
    extend_ptrs(&mut frames, &p[w..], w);
    Some((key, frames))
}

#[derive(Clone, Debug)]
struct Entry {
    process: u32,
    thread: u32,
    /// (raw timestamp of the StackWalk record, part)
    parts: Vec<(i64, StackPart)>,
}

/// What a KeyCreate/KeyRundown (`delete: false`) or KeyDelete (`delete: true`) record says of a
/// key at its raw time `t`: the frames it stands for (a KeyDelete names the frames it retires:
/// keys are reused, so a reference made before a delete means the deleted frames, not the
/// rundown's at the end of the trace).
#[derive(Clone, Debug)]
struct KeyEvent {
    t: i64,
    delete: bool,
    frames: Vec<u64>,
}

/// Key events by key, in time order (ties in the order seen).
#[derive(Clone, Debug, Default)]
struct KeyTable {
    defs: HashMap<u64, Vec<KeyEvent>>,
}

impl KeyTable {
    /// Takes a KeyCreate, KeyRundown or KeyDelete record; returns whether `rec` was one.
    fn observe(&mut self, rec: &EventRecord<'_>) -> bool {
        let (parsed, delete) = match parse_key_definition(rec) {
            Some(d) => (Some(d), false),
            None => (parse_key_delete(rec), true),
        };
        match parsed {
            Some((k, frames)) => {
                self.add(k, rec.raw_timestamp, delete, frames);
                true
            }
            None => false,
        }
    }
    fn add(&mut self, key: u64, t: i64, delete: bool, frames: Vec<u64>) {
        let v = self.defs.entry(key).or_default();
        let at = v.partition_point(|e| e.t <= t);
        v.insert(at, KeyEvent { t, delete, frames });
    }
    /// Keys a KeyCreate or KeyRundown defines.
    fn defined(&self) -> usize {
        self.defs
            .values()
            .filter(|v| v.iter().any(|e| !e.delete))
            .count()
    }
    /// The frames `key` stood for at `t` (the raw time of the record naming it): the latest event
    /// at or before `t` when it defines the key, else the first event after `t` (a delete names
    /// the frames it retires; the rundown at the end of a trace defines keys used earlier).
    /// `None` for a key deleted before `t` and not defined again.
    fn resolve(&self, key: u64, t: i64) -> Option<&[u64]> {
        let v = self.defs.get(&key)?;
        let at = v.partition_point(|e| e.t <= t);
        match at.checked_sub(1).map(|i| &v[i]) {
            Some(e) if !e.delete => Some(&e.frames),
            _ => v.get(at).map(|e| e.frames.as_slice()),
        }
    }
    /// The frames of an event's parts, each key resolved at the time of the record naming it.
    fn assemble(&self, parts: &[(i64, StackPart)]) -> Vec<u64> {
        let mut out = Vec::new();
        for (t, p) in parts {
            match p {
                StackPart::Frames(f) => out.extend_from_slice(f),
                StackPart::Key(k) => {
                    if let Some(f) = self.resolve(*k, *t) {
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
    /// Stacks assembled ahead from a whole file's StackWalk events ([`StackIndex::from_collected`]).
    table: Table,
}

/// Whole stacks, assembled once: what a file's pre-scan leaves for lookups without allocation.
#[derive(Clone, Debug, Default)]
struct Table {
    /// The event timestamp of each entry, ascending.
    ts: Vec<i64>,
    entries: Vec<TableEntry>,
    /// The pieces of every entry's frames, one entry's after the other: (shard, from, to) in
    /// `shards`.
    pieces: Vec<(u32, u32, u32)>,
    /// The distinct frame sequences (a stack key's frames among them, once), as the
    /// [`FrameStore`]'s shards kept them.
    shards: Vec<Vec<u64>>,
    /// One bit per hash of every timestamp in `ts` ([`table_bit`]): most records have no stack,
    /// and this table (32 KiB) says so without searching `ts`.
    seen: Vec<u64>,
}

/// Size of [`Table::seen`]: 2^18 bits.
const TABLE_SEEN_WORDS: usize = 1 << 12;

fn table_bit(t: i64) -> usize {
    ((t as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 46) as usize
}

impl Table {
    /// The entries of event timestamp `t`, searched from `hint` (where the last search ended:
    /// a forward search that doubles its step, else a binary search); `hint` is left at the end.
    fn find(&self, t: i64, hint: &mut usize) -> std::ops::Range<usize> {
        let ts = &self.ts;
        let mut i = (*hint).min(ts.len());
        if i > 0 && ts[i - 1] >= t {
            i = ts[..i].partition_point(|&x| x < t);
        } else if i < ts.len() && ts[i] < t {
            let mut step = 1;
            while i + step < ts.len() && ts[i + step] < t {
                i += step;
                step *= 2;
            }
            let end = (i + step + 1).min(ts.len());
            i += ts[i..end].partition_point(|&x| x < t);
        }
        let mut j = i;
        while j < ts.len() && ts[j] == t {
            j += 1;
        }
        *hint = j;
        i..j
    }
}

#[derive(Clone, Copy, Debug)]
struct TableEntry {
    process: u32,
    thread: u32,
    /// Its range of [`Table::pieces`].
    pieces: (u32, u32),
}

/// A stack part as [`Collected`] keeps it: frames in a [`FrameStore`] (shard, from, to), or a
/// key.
#[derive(Clone, Copy, Debug)]
enum PartRef {
    Frames(u32, u32, u32),
    Key(u64),
}

/// The frames of a file's StackWalk stacks, each distinct sequence stored once per collecting
/// thread. Stacks repeat (the same code paths are sampled again and again;
/// perfview_net.4.5.x86.etl: 18,532 stack events, 2,967 distinct, 128 k frames of which 42 k are
/// distinct and 46 k kept by two collecting threads), so the frames a file's stack table holds
/// grow with its distinct stacks, not with every event's (each event still costs its entry in the
/// table). Shared by the threads that collect ([`Collected::observe`]), with one shard per thread
/// of the rayon pool (and one for any other thread): a thread stores into its own shard only, so
/// collecting threads never wait for one another's lock, and a shard's memory is grown only by
/// the thread that allocated it (with glibc's malloc, growing or freeing memory that another
/// thread allocated takes that thread's arena lock: on one store sharded by hash, the pre-scan's
/// threads slept on each other's arenas dozens of times per file).
#[derive(Debug)]
pub struct FrameStore {
    shards: Vec<Mutex<FrameShard>>,
}

#[derive(Debug, Default)]
struct FrameShard {
    frames: Vec<u64>,
    /// A sequence's hash → where it is in `frames` (a second sequence with the same hash is
    /// stored again, unmapped).
    at: FastMap<u64, (u32, u32)>,
}

impl Default for FrameStore {
    fn default() -> Self {
        FrameStore {
            shards: (0..rayon::current_num_threads() + 1)
                .map(|_| Mutex::default())
                .collect(),
        }
    }
}

impl FrameStore {
    pub fn new() -> FrameStore {
        FrameStore::default()
    }

    /// Where `frames` is stored: (shard, from, to); stored now unless an equal sequence was.
    fn intern(&self, frames: &[u64]) -> (u32, u32, u32) {
        let mut h = FastHasher::default();
        frames.hash(&mut h);
        let h = h.finish();
        let s = rayon::current_thread_index().map_or(0, |i| i + 1) % self.shards.len();
        let mut shard = self.shards[s].lock().unwrap_or_else(|e| e.into_inner());
        let FrameShard { frames: kept, at } = &mut *shard;
        let known = at.get(&h).copied();
        if let Some((a, b)) = known {
            if kept[a as usize..b as usize] == *frames {
                return (s as u32, a, b);
            }
        }
        let a = kept.len() as u32;
        kept.extend_from_slice(frames);
        let b = kept.len() as u32;
        if known.is_none() {
            at.insert(h, (a, b));
        }
        (s as u32, a, b)
    }

    /// Frames stored (every distinct sequence once).
    pub fn frames_kept(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).frames.len())
            .sum()
    }

    /// The shards' frames (their hash maps dropped).
    fn into_shards(self) -> Vec<Vec<u64>> {
        self.shards
            .into_iter()
            .map(|s| s.into_inner().unwrap_or_else(|e| e.into_inner()).frames)
            .collect()
    }
}

#[derive(Clone, Copy, Debug)]
struct CollectedPart {
    event_timestamp: i64,
    thread: u32,
    process: u32,
    /// Raw timestamp of the StackWalk record.
    raw_timestamp: i64,
    part: PartRef,
}

/// The StackWalk events of one stretch of a file (one buffer, say), collected without building
/// an index: [`StackIndex::from_collected`] makes the index of several, in file order. Collecting
/// runs on many threads at once, their frames going to one [`FrameStore`]; the index is built
/// once.
#[derive(Clone, Debug, Default)]
pub struct Collected {
    parts: Vec<CollectedPart>,
    /// The frames of the event at hand, before they are stored.
    scratch: Vec<u64>,
    /// Key events (KeyCreate/KeyRundown, and KeyDelete: `true`): (raw timestamp, key, delete,
    /// frames).
    key_defs: Vec<(i64, u64, bool, Vec<u64>)>,
}

impl Collected {
    /// Takes a StackWalk event (stack, stack-key reference or key definition), its frames going
    /// to `store`; returns whether `rec` was one (as [`StackIndex::observe`]).
    pub fn observe(&mut self, rec: &EventRecord<'_>, store: &FrameStore) -> bool {
        if !is_stackwalk(rec) {
            return false;
        }
        if let Some((k, frames)) = parse_key_definition(rec) {
            self.key_defs.push((rec.raw_timestamp, k, false, frames));
            return true;
        }
        if let Some((k, frames)) = parse_key_delete(rec) {
            self.key_defs.push((rec.raw_timestamp, k, true, frames));
            return true;
        }
        let op = rec.descriptor.opcode;
        if !matches!(
            op,
            OPCODE_STACK | OPCODE_STACK_KEY_KERNEL | OPCODE_STACK_KEY_USER
        ) {
            return true;
        }
        // As `parse_stackwalk`, the frames going to the store.
        let p = &rec.payload;
        let w = if rec.pointer_size == 4 { 4 } else { 8 };
        let head = || -> Option<(i64, u32, u32)> {
            Some((
                i64::from_le_bytes(p.get(0..8)?.try_into().ok()?),
                u32::from_le_bytes(p.get(8..12)?.try_into().ok()?),
                u32::from_le_bytes(p.get(12..16)?.try_into().ok()?),
            ))
        };
        let Some((event_timestamp, process, thread)) = head() else {
            return true;
        };
        let part = if op == OPCODE_STACK {
            self.scratch.clear();
            extend_ptrs(&mut self.scratch, &p[16..], w);
            let (shard, a, b) = store.intern(&self.scratch);
            PartRef::Frames(shard, a, b)
        } else {
            match p.get(16..16 + w).and_then(|k| ptrs(k, w).next()) {
                Some(k) => PartRef::Key(k),
                None => return true,
            }
        };
        self.parts.push(CollectedPart {
            event_timestamp,
            thread,
            process,
            raw_timestamp: rec.raw_timestamp,
            part,
        });
        true
    }
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

    /// The index of a file's StackWalk events, collected stretch by stretch (in file order) into
    /// `frames`: the same stacks as observing every record in file order, assembled once into one
    /// table (the frames stay where the store keeps them, not copied; a stack key's frames join
    /// them once, however many events name the key).
    pub fn from_collected(
        stretches: impl IntoIterator<Item = Collected>,
        frames: FrameStore,
    ) -> StackIndex {
        use rayon::slice::ParallelSliceMut;
        let stretches: Vec<Collected> = stretches.into_iter().collect();
        let mut index = StackIndex::new();
        for c in &stretches {
            for (t, k, delete, f) in &c.key_defs {
                index.keys.add(*k, *t, *delete, f.clone());
            }
        }
        // Parts by event, thread and raw time; ties in file order (stretch, then position in it),
        // as `observe` keeps them. The key is whole in each item: the sort reads nothing else.
        let mut all: Vec<(i64, u32, i64, u32, u32)> = stretches
            .iter()
            .enumerate()
            .flat_map(|(i, c)| {
                c.parts.iter().enumerate().map(move |(k, p)| {
                    (
                        p.event_timestamp,
                        p.thread,
                        p.raw_timestamp,
                        i as u32,
                        k as u32,
                    )
                })
            })
            .collect();
        index.stacks = all.len();
        if all.is_empty() {
            return index;
        }
        // The key is whole (no two items are equal), so an unstable sort gives the stable order;
        // it sorts in place, where the merge sort took a second array of every part (fresh
        // memory: ~150 page faults on the way to the first rendered record).
        all.par_sort_unstable();
        let t = &mut index.table;
        t.ts.reserve(all.len());
        t.entries.reserve(all.len());
        t.pieces.reserve(all.len());
        t.seen = vec![0; TABLE_SEEN_WORDS];
        let mut i = 0;
        while i < all.len() {
            let (ts, thread) = (all[i].0, all[i].1);
            let mut j = i;
            let from = t.pieces.len() as u32;
            while j < all.len() && (all[j].0, all[j].1) == (ts, thread) {
                let (c, k) = (all[j].3 as usize, all[j].4 as usize);
                match stretches[c].parts[k].part {
                    PartRef::Frames(shard, a, b) => t.pieces.push((shard, a, b)),
                    PartRef::Key(key) => {
                        if let Some(f) = index.keys.resolve(key, all[j].2) {
                            t.pieces.push(frames.intern(f));
                        }
                    }
                }
                j += 1;
            }
            // The process of the part met first in the file, as `observe` keeps it.
            let first = all[i..j]
                .iter()
                .min_by_key(|p| (p.3, p.4))
                .map_or(0, |p| stretches[p.3 as usize].parts[p.4 as usize].process);
            t.ts.push(ts);
            let b = table_bit(ts);
            t.seen[b / 64] |= 1 << (b % 64);
            t.entries.push(TableEntry {
                process: first,
                thread,
                pieces: (from, t.pieces.len() as u32),
            });
            i = j;
        }
        t.shards = frames.into_shards();
        index
    }

    /// Appends the frames of the stack taken for `rec` to `out` and returns true, if StackWalk
    /// events name its timestamp and thread (as [`StackIndex::stack_for`], without allocating
    /// for stacks of [`StackIndex::from_collected`]). `hint` is where the last lookup ended in
    /// the table (start at 0): records asked for in time order then move through the table
    /// instead of searching it.
    pub fn stack_into(&self, rec: &EventRecord<'_>, hint: &mut usize, out: &mut Vec<u64>) -> bool {
        if rec.provider == STACKWALK_GUID && rec.header_type.is_kernel() {
            return false;
        }
        let t = &self.table;
        let b = table_bit(rec.raw_timestamp);
        if t.seen.get(b / 64).is_some_and(|w| w & (1 << (b % 64)) != 0) {
            let v = &t.entries[t.find(rec.raw_timestamp, hint)];
            if !v.is_empty() {
                let tid = stack_thread(rec);
                let e = if tid == u32::MAX {
                    match v {
                        [one] => one,
                        _ => return false,
                    }
                } else {
                    match v.iter().find(|e| e.thread == tid) {
                        Some(e) => e,
                        None => return false,
                    }
                };
                for &(s, a, b) in &t.pieces[e.pieces.0 as usize..e.pieces.1 as usize] {
                    out.extend_from_slice(&t.shards[s as usize][a as usize..b as usize]);
                }
                return true;
            }
        }
        if self.by_ts.is_empty() {
            return false;
        }
        let b = seen_bit(rec.raw_timestamp);
        if self
            .seen
            .get(b / 64)
            .is_none_or(|w| w & (1 << (b % 64)) == 0)
        {
            return false;
        }
        match self.stack_for_observed(rec) {
            Some(s) => {
                out.extend_from_slice(&s.addresses);
                true
            }
            None => false,
        }
    }

    /// Number of stack events (opcodes 32, 37, 38) observed.
    pub fn stackwalk_events(&self) -> usize {
        self.stacks
    }

    /// Number of distinct stack keys defined.
    pub fn keys_defined(&self) -> usize {
        self.keys.defined()
    }

    /// The stack taken for `rec`, if StackWalk events name its timestamp and thread.
    pub fn stack_for(&self, rec: &EventRecord<'_>) -> Option<Stack> {
        let mut addresses = Vec::new();
        self.stack_into(rec, &mut 0, &mut addresses)
            .then_some(Stack {
                match_id: 0,
                addresses,
            })
    }

    /// [`StackIndex::stack_for`] among the stacks observed one by one.
    fn stack_for_observed(&self, rec: &EventRecord<'_>) -> Option<Stack> {
        let v = self.by_ts.get(&rec.raw_timestamp)?;
        let tid = stack_thread(rec);
        let e = if tid == u32::MAX {
            match v.as_slice() {
                [one] => one,
                _ => return None,
            }
        } else {
            v.iter().find(|e| e.thread == tid)?
        };
        Some(Stack {
            match_id: 0,
            addresses: self.keys.assemble(&e.parts),
        })
    }

    /// Forgets stacks taken before `raw_timestamp` (key definitions are kept).
    pub fn prune_before(&mut self, raw_timestamp: i64) {
        self.by_ts.retain(|&t, _| t >= raw_timestamp);
    }

    /// StackProcess/StackThread of the stack taken at `raw_timestamp` when exactly one thread's stack
    /// has it (attributes PERFINFO records, which carry no PID/TID).
    pub fn owner_at(&self, raw_timestamp: i64) -> Option<(u32, u32)> {
        let r = self.table.find(raw_timestamp, &mut 0);
        if !r.is_empty() {
            return match &self.table.entries[r] {
                [one] => Some((one.process, one.thread)),
                _ => None,
            };
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventDescriptor, HeaderType};
    use std::borrow::Cow;

    /// A 64-bit StackWalk stack event (opcode 32) for the event at `event_ts` on `thread`.
    fn stackwalk(raw_ts: i64, event_ts: i64, thread: u32, frames: &[u64]) -> EventRecord<'static> {
        let mut p = Vec::new();
        p.extend_from_slice(&event_ts.to_le_bytes());
        p.extend_from_slice(&7u32.to_le_bytes());
        p.extend_from_slice(&thread.to_le_bytes());
        for f in frames {
            p.extend_from_slice(&f.to_le_bytes());
        }
        EventRecord {
            header_type: HeaderType::PerfInfo64,
            flags: 0,
            provider: STACKWALK_GUID,
            descriptor: EventDescriptor {
                opcode: OPCODE_STACK,
                version: 2,
                ..Default::default()
            },
            hook_id: None,
            pid: u32::MAX,
            tid: u32::MAX,
            cpu: 0,
            timestamp: 0,
            raw_timestamp: raw_ts,
            kernel_time: 0,
            user_time: 0,
            activity_id: Guid::ZERO,
            pointer_size: 8,
            payload: Cow::Owned(p),
            ext: Cow::Borrowed(&[]),
        }
    }

    #[test]
    fn repeated_stacks_are_stored_once_and_each_event_keeps_its_own() {
        let sequences: [&[u64]; 3] = [
            &[0xfffff800_00001000, 0xfffff800_00002000, 0x7ff6_0000_3000],
            &[0x7ff6_0000_4000],
            &[0xfffff800_00001000, 0xfffff800_00002000],
        ];
        // 3,000 stack events over 30 stretches (buffers), taking the three sequences in turn.
        let store = FrameStore::new();
        let mut stretches = Vec::new();
        for b in 0..30 {
            let mut c = Collected::default();
            for i in 0..100 {
                let n = b * 100 + i;
                let rec = stackwalk(
                    n * 10 + 1,
                    n * 10,
                    100 + n as u32 % 4,
                    sequences[n as usize % 3],
                );
                assert!(c.observe(&rec, &store));
            }
            stretches.push(c);
        }
        assert_eq!(store.frames_kept(), 6);
        let index = StackIndex::from_collected(stretches, store);
        assert_eq!(index.stackwalk_events(), 3_000);
        let mut hint = 0;
        for n in 0..3_000i64 {
            let mut event = stackwalk(n * 10, 0, 100 + n as u32 % 4, &[]);
            event.provider = Guid::ZERO;
            event.tid = 100 + n as u32 % 4;
            let mut got = Vec::new();
            assert!(index.stack_into(&event, &mut hint, &mut got), "event {n}");
            assert_eq!(got, sequences[n as usize % 3], "event {n}");
            // Another thread at the same time has no stack.
            event.tid = 99;
            assert!(!index.stack_into(&event, &mut 0, &mut got));
        }
    }

    /// A SampledProfile record (PERFINFO header: no thread) sampled at `raw_ts` on `thread`.
    fn sample(raw_ts: i64, ip: u64, thread: u32) -> EventRecord<'static> {
        let mut rec = stackwalk(raw_ts, 0, 0, &[]);
        rec.provider = PERFINFO_GUID;
        rec.descriptor.opcode = OPCODE_SAMPLED_PROFILE;
        let mut p = ip.to_le_bytes().to_vec();
        p.extend_from_slice(&thread.to_le_bytes());
        p.extend_from_slice(&1u32.to_le_bytes());
        rec.payload = Cow::Owned(p);
        rec
    }

    #[test]
    fn samples_match_the_stack_of_their_payload_thread() {
        // Two CPUs sampled at one tick: thread 300 has a stack, the idle thread 0 has none.
        let mut index = StackIndex::new();
        index.observe(&stackwalk(101, 100, 300, &[0x1000, 0x2000]));
        index.observe(&stackwalk(201, 200, 0, &[0x3000]));
        index.observe(&stackwalk(202, 200, 400, &[0x4000]));
        let stack = |rec: &EventRecord<'_>| index.stack_for(rec).map(|s| s.addresses);
        assert_eq!(stack(&sample(100, 0x1000, 300)), Some(vec![0x1000, 0x2000]));
        // The one stack at that tick is another thread's: not this sample's.
        assert_eq!(stack(&sample(100, 0x9000, 0)), None);
        // Several threads' stacks at one tick: the payload's thread picks its own.
        assert_eq!(stack(&sample(200, 0x3000, 0)), Some(vec![0x3000]));
        assert_eq!(stack(&sample(200, 0x4000, 400)), Some(vec![0x4000]));
        // Another PERFINFO record without a thread still takes a lone stack.
        let mut other = sample(100, 0, 0);
        other.descriptor.opcode = 47;
        assert_eq!(stack(&other), Some(vec![0x1000, 0x2000]));
    }

    /// A 64-bit key event (KeyCreate 34, KeyDelete 35, KeyRundown 36) logged at `raw_ts`.
    fn key_event(opcode: u8, raw_ts: i64, key: u64, frames: &[u64]) -> EventRecord<'static> {
        let mut rec = stackwalk(raw_ts, 0, 0, &[]);
        rec.descriptor.opcode = opcode;
        let mut p = key.to_le_bytes().to_vec();
        for f in frames {
            p.extend_from_slice(&f.to_le_bytes());
        }
        rec.payload = Cow::Owned(p);
        rec
    }

    /// A StackKeyKernel reference (37) logged at `raw_ts` for the event at `event_ts` on `thread`.
    fn key_ref(raw_ts: i64, event_ts: i64, thread: u32, key: u64) -> EventRecord<'static> {
        let mut rec = stackwalk(raw_ts, event_ts, thread, &[key]);
        rec.descriptor.opcode = OPCODE_STACK_KEY_KERNEL;
        rec
    }

    #[test]
    fn a_reused_key_means_what_it_stood_for_when_referenced() {
        let k = 0xffff_a000_0000_0010;
        let records = [
            // Referenced before any definition in the trace: the delete names its frames.
            key_ref(11, 10, 5, k),
            key_event(OPCODE_KEY_DELETE, 20, k, &[0xa0, 0xa1, 0xa2]),
            key_event(OPCODE_KEY_CREATE, 30, k, &[0xb0, 0xb1]),
            // After the key is created again: the new frames.
            key_ref(41, 40, 5, k),
            key_event(OPCODE_KEY_RUNDOWN, 90, k, &[0xb0, 0xb1]),
        ];
        let event = |ts: i64| {
            let mut e = stackwalk(ts, 0, 5, &[]);
            e.provider = Guid::ZERO;
            e.tid = 5;
            e
        };
        let mut observed = StackIndex::new();
        let mut c = Collected::default();
        let store = FrameStore::new();
        for r in &records {
            observed.observe(r);
            c.observe(r, &store);
        }
        let built = StackIndex::from_collected([c], store);
        for index in [&observed, &built] {
            let stack = |ts| index.stack_for(&event(ts)).map(|s| s.addresses);
            assert_eq!(stack(10), Some(vec![0xa0, 0xa1, 0xa2]));
            assert_eq!(stack(40), Some(vec![0xb0, 0xb1]));
            assert_eq!(index.keys_defined(), 1);
        }
    }
}
