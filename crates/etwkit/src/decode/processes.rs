//! The trace's own process table: which program a process id stood for, and when, from the kernel
//! Process events (rundown DCStart/DCEnd, Start, End, Defunct). Every record with a process id
//! gets its image name from it (`dump`'s `process_name`, TraceEvent's PName).
//!
//! A process id is reused once its process ends, so a pid names a sequence of processes: each
//! Start begins one at its time, and a process seen only in a rundown (DCStart at the trace's
//! start, DCEnd at its end) or ending (End, Defunct) without its Start having been traced had
//! begun before the trace.

use std::sync::Arc;

use crate::schema::registry::FastMap;

/// Kernel Process event types (hook `0x03nn`) that name a process.
pub(crate) const START: u8 = 1;
pub(crate) const END: u8 = 2;
pub(crate) const DC_START: u8 = 3;
pub(crate) const DC_END: u8 = 4;
pub(crate) const DEFUNCT: u8 = 39;

/// Whether a kernel record's hook is that of a Process event that names its process.
pub(crate) fn naming_hook(hook: u16) -> bool {
    hook >> 8 == 0x03 && matches!(hook as u8, START | END | DC_START | DC_END | DEFUNCT)
}

/// Whether `rec` is a kernel Process event that names its process.
pub(crate) fn names_a_process(rec: &crate::EventRecord<'_>) -> bool {
    rec.header_type.is_kernel() && rec.hook_id.is_some_and(naming_hook)
}

/// One process a pid stood for: from when (`i64::MIN`: before the trace), and its image name as
/// logged (`ImageFileName`: `PerfView.exe`, `Idle`, `System`).
#[derive(Debug)]
struct Life {
    from: i64,
    name: Arc<str>,
}

/// Process id → the processes it stood for, in time order.
#[derive(Debug, Default)]
pub struct ProcessTable {
    by_pid: FastMap<u32, Vec<Life>>,
    /// What was observed, until [`ProcessTable::finish`] puts it in order.
    seen: Vec<(i64, u8, u32, Arc<str>)>,
}

impl ProcessTable {
    pub fn new() -> ProcessTable {
        ProcessTable::default()
    }

    /// Notes one Process event: its time, type (`START`...), process id and image name.
    pub(crate) fn observe(&mut self, time: i64, kind: u8, pid: u32, name: &str) {
        if name.is_empty() && kind != START {
            return;
        }
        self.seen.push((time, kind, pid, Arc::from(name)));
    }

    /// Builds the lives from what was observed (in time order; the pre-scan meets events buffer by
    /// buffer). Call once after the last `observe`.
    pub fn finish(&mut self) {
        self.seen.sort_by_key(|&(t, ..)| t);
        for (time, kind, pid, name) in std::mem::take(&mut self.seen) {
            let lives = self.by_pid.entry(pid).or_default();
            match kind {
                START => lives.push(Life { from: time, name }),
                // The process alive at that time, unless none is known yet: then it began before
                // the trace (a rundown, or an end whose start was not traced).
                _ if lives.is_empty() => lives.push(Life {
                    from: i64::MIN,
                    name,
                }),
                _ => {}
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_pid.is_empty()
    }

    /// The image name of the process `pid` stood for at `time` (FILETIME): the last to begin at or
    /// before `time`. `None` when no Process event names it, or `time` comes before the first
    /// process the trace shows for it begins (an earlier one, unnamed, had the id then).
    pub fn name_of(&self, pid: u32, time: i64) -> Option<&Arc<str>> {
        let lives = self.by_pid.get(&pid)?;
        let i = lives.partition_point(|l| l.from <= time);
        Some(&lives.get(i.checked_sub(1)?)?.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_pid_names_each_process_in_its_time() {
        let mut t = ProcessTable::new();
        // Buffer order is not time order.
        t.observe(500, START, 7, "b.exe");
        t.observe(100, DC_START, 7, "a.exe");
        t.observe(300, END, 7, "a.exe");
        t.observe(900, DC_END, 7, "b.exe");
        t.observe(400, END, 9, "gone.exe");
        t.observe(600, START, 11, "late.exe");
        t.finish();
        let name = |pid, time| t.name_of(pid, time).map(|n| n.to_string());
        assert_eq!(name(7, 50).as_deref(), Some("a.exe"));
        assert_eq!(name(7, 350).as_deref(), Some("a.exe"));
        assert_eq!(name(7, 500).as_deref(), Some("b.exe"));
        assert_eq!(name(7, 2000).as_deref(), Some("b.exe"));
        // Ended before its start was traced: it had begun before the trace.
        assert_eq!(name(9, 0).as_deref(), Some("gone.exe"));
        // Before its Start the id stood for a process the trace does not name.
        assert_eq!(name(11, 599), None);
        assert_eq!(name(11, 600).as_deref(), Some("late.exe"));
        assert_eq!(name(12, 600), None);
    }
}
