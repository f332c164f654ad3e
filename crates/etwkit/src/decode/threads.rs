//! The trace's own thread table: which process a thread belonged to, and when, from the kernel
//! Thread events (rundown DCStart/DCEnd, Start, End). Kernel records that name only a thread
//! (PERFINFO samples, disk and file I/O, stack walks...) get their process from it.

use std::collections::HashMap;

use crate::event::EventRecord;

/// Thread id → (time seen, process id), sorted by time.
#[derive(Debug, Default)]
pub struct ThreadTable {
    by_tid: HashMap<u32, Vec<(i64, u32)>>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

impl ThreadTable {
    pub fn new() -> ThreadTable {
        ThreadTable::default()
    }

    /// Learns from a kernel Thread event (group 0x05, Start/End/DCStart/DCEnd); returns whether
    /// `rec` was one. Version 0 payloads start with TThreadId, ProcessId; later ones with
    /// ProcessId, TThreadId.
    pub fn observe(&mut self, rec: &EventRecord<'_>) -> bool {
        let Some(hook) = rec.hook_id else {
            return false;
        };
        if !rec.header_type.is_kernel() || hook >> 8 != 0x05 || !(1..=4).contains(&(hook & 0xFF)) {
            return false;
        }
        let p = &rec.payload;
        let (pid, tid) = if rec.descriptor.version == 0 {
            (u32_at(p, 4), u32_at(p, 0))
        } else {
            (u32_at(p, 0), u32_at(p, 4))
        };
        if let (Some(pid), Some(tid)) = (pid, tid) {
            self.by_tid
                .entry(tid)
                .or_default()
                .push((rec.timestamp, pid));
        }
        true
    }

    /// Sorts what was learned; call once after the last [`ThreadTable::observe`].
    pub fn finish(&mut self) {
        for v in self.by_tid.values_mut() {
            v.sort();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_tid.is_empty()
    }

    /// The process `tid` belonged to at `time` (FILETIME): the last Thread event for it at or before
    /// `time`, else its first one (a thread seen only at rundown's end already existed).
    pub fn pid_of(&self, tid: u32, time: i64) -> Option<u32> {
        let v = self.by_tid.get(&tid)?;
        let i = v.partition_point(|&(t, _)| t <= time);
        Some(if i == 0 { v[0].1 } else { v[i - 1].1 })
    }
}
