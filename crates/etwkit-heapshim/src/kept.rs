//! Allocations kept back in process: each thread holds its newest allocations unsent, so a free of
//! one on the same thread settles the pair in process (counted per stack, never sent); and the
//! per-address record of frees sent by any thread, which stops a stale kept-back entry from being
//! paired after the allocator handed its address out again.

use std::sync::atomic::Ordering;

use crate::{agg_add, hdr, push_raw, spill, ThreadBuf, T_ALLOC};

/// Allocations of this thread not sent yet. A free of one of them (on this thread) cancels both:
/// the pair is only counted (per stack, TRANSIENT records), which keeps malloc/free storms cheap.
/// Entries are sent as ALLOC records when the table fills, when they are older than ~50 ms, at
/// buffer flushes, and at thread/process exit.
pub(crate) const PEND_SLOTS: usize = 1024;
pub(crate) const PEND_MAX: usize = 512;
#[derive(Clone, Copy, Default)]
pub(crate) struct Pend {
    pub(crate) addr: u64, // 0 empty, 1 tombstone
    pub(crate) tsc: u64,
    pub(crate) size: u64,
    pub(crate) stack: u64,
    pub(crate) api: u8,
}
#[inline]
pub(crate) fn pend_slot(addr: u64) -> usize {
    ((addr >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize % PEND_SLOTS
}

/// Keeps an allocation back (see [`Pend`]): as the newest, the one before going into the table.
#[inline(always)]
pub(crate) unsafe fn pend_insert(b: &ThreadBuf, e: Pend) {
    // Out of `last` before the insert (which may spill: `last` must not be sent twice).
    let prev = std::mem::take(&mut *b.last.get());
    if prev.addr > 1 {
        table_insert(b, prev);
    }
    *b.last.get() = e;
}

#[inline]
pub(crate) unsafe fn table_insert(b: &ThreadBuf, e: Pend) {
    if b.pend_used.get() >= PEND_MAX {
        if b.pend_live.get() < PEND_MAX / 4 {
            pend_rebuild(b);
        } else {
            spill(b, 0);
        }
    }
    // A stale entry for this address (kept back here, freed by another thread) may remain: the
    // frees below find and send it (see `freed_elsewhere`).
    let t = &mut *b.pend.get();
    let mut i = pend_slot(e.addr);
    loop {
        if t[i].addr <= 1 {
            if t[i].addr == 0 {
                b.pend_used.set(b.pend_used.get() + 1);
            }
            t[i] = e;
            b.pend_live.set(b.pend_live.get() + 1);
            return;
        }
        i = (i + 1) % PEND_SLOTS;
    }
}

/// Drops tombstones, keeping live entries.
#[cold]
pub(crate) unsafe fn pend_rebuild(b: &ThreadBuf) {
    let t = &mut *b.pend.get();
    let mut live = [Pend::default(); PEND_MAX / 4];
    let mut n = 0;
    for e in t.iter_mut() {
        if e.addr > 1 && n < live.len() {
            live[n] = *e;
            n += 1;
        }
        e.addr = 0;
    }
    b.pend_used.set(0);
    b.pend_live.set(0);
    for e in &live[..n] {
        table_insert(b, *e);
    }
}

#[inline(always)]
pub(crate) unsafe fn pend_take(b: &ThreadBuf, addr: u64) -> Option<Pend> {
    let last = &mut *b.last.get();
    if last.addr == addr {
        last.addr = 0;
        return Some(Pend { addr, ..*last });
    }
    table_take(b, addr)
}

#[inline]
pub(crate) unsafe fn table_take(b: &ThreadBuf, addr: u64) -> Option<Pend> {
    if b.pend_live.get() == 0 {
        return None;
    }
    let t = &mut *b.pend.get();
    let mut i = pend_slot(addr);
    loop {
        let a = t[i].addr;
        if a == 0 {
            return None;
        }
        if a == addr {
            let e = t[i];
            t[i].addr = 1;
            b.pend_live.set(b.pend_live.get() - 1);
            return Some(e);
        }
        i = (i + 1) % PEND_SLOTS;
    }
}

/// Per address hash: the TSC of the latest free sent as a record (the block was not kept back by
/// the freeing thread). A thread that kept back an allocation of that address earlier than this
/// must not pair it with its own free later: the allocator handed the address out again meanwhile.
pub(crate) const FREED_SLOTS: usize = 4096;
pub(crate) static FREED: [std::sync::atomic::AtomicU64; FREED_SLOTS] =
    [const { std::sync::atomic::AtomicU64::new(0) }; FREED_SLOTS];

#[inline(always)]
pub(crate) fn freed_slot(addr: u64) -> usize {
    ((addr >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize % FREED_SLOTS
}

#[inline(always)]
pub(crate) fn note_free(addr: u64, t: u64) {
    FREED[freed_slot(addr)].fetch_max(t, Ordering::Relaxed);
}

/// True when some free of `addr` (or of an address sharing its slot: then the pair is merely sent
/// instead of counted) was sent after `since`.
#[inline(always)]
pub(crate) fn freed_elsewhere(addr: u64, since: u64) -> bool {
    FREED[freed_slot(addr)].load(Ordering::Relaxed) > since
}

/// A free of `addr` on this thread: true when this thread kept its allocation back, and the pair is
/// then only counted (TRANSIENT). Entries of that address another thread has freed since (the
/// allocator handed it out again) are sent as ALLOC records on the way.
#[inline(always)]
pub(crate) unsafe fn settle_free(b: &ThreadBuf, addr: u64) -> bool {
    loop {
        match pend_take(b, addr) {
            Some(e) if !freed_elsewhere(e.addr, e.tsc) => {
                agg_add(b, e.stack, e.api, e.size);
                return true;
            }
            Some(e) => push_raw(b, &[hdr(T_ALLOC, e.api, 0), e.tsc, e.addr, e.size, e.stack]),
            None => return false,
        }
    }
}
