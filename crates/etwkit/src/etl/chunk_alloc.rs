//! A global allocator for programs that render files with [`EtlFile::par_render`]: the
//! renderer's text chunks (blocks of exactly [`CHUNK_CAPACITY`] bytes) come from one region of
//! transparent huge pages, everything else from the system allocator.
//!
//! A dump keeps a few dozen chunks in flight (perfview_net.4.5.x86.etl: ~60, 7.4 MB), and their
//! first writes were half of its page faults: each fresh 4 KiB page is a fault, a zeroing and a
//! memory-cgroup charge. From the region, those pages come 2 MiB at a time (where the kernel has
//! transparent huge pages for `madvise`d memory, as Linux's default `madvise` mode does), and
//! freed chunks are reused lowest slot first, so the same few huge pages serve the whole file.
//! Measured on this project's 2-core machine (`etwkit dump --format json` of that file, 151
//! interleaved pairs): page faults 3.54 k → 2.07 k, CPU time −2.4 ms and wall time −1.9 ms (of
//! ~42 ms) at the median, faster in 102 of the 151 pairs.
//!
//! Opt in from a binary:
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOC: etwkit::etl::chunk_alloc::ChunkAlloc = etwkit::etl::chunk_alloc::ChunkAlloc;
//! ```
//!
//! Where the region cannot be mapped, or it is full (256 chunks in flight), chunks come from the
//! system allocator as any other block; on systems other than Linux the type only forwards to it.
//!
//! [`EtlFile::par_render`]: super::EtlFile::par_render

use std::alloc::{GlobalAlloc, Layout, System};

pub use super::parallel::CHUNK_CAPACITY;

/// The allocator: see the module's doc.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChunkAlloc;

#[cfg(target_os = "linux")]
mod region {
    use super::CHUNK_CAPACITY;
    use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering};

    /// Chunks the region holds.
    pub(super) const SLOTS: usize = 256;
    const HUGE_PAGE: usize = 2 << 20;
    /// A chunk's place in the region: a whole number of 4 KiB pages.
    pub(super) const STRIDE: usize = CHUNK_CAPACITY.next_multiple_of(4096);

    static BASE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
    /// 0: not mapped yet, 1: being mapped, 2: mapped, 3: could not be mapped.
    static STATE: AtomicU8 = AtomicU8::new(0);
    /// One bit per slot in use.
    static USED: [AtomicU64; SLOTS / 64] = [const { AtomicU64::new(0) }; SLOTS / 64];

    /// The region's start (2 MiB aligned), mapped on first use; null if it cannot be mapped.
    fn base() -> *mut u8 {
        loop {
            match STATE.load(Ordering::Acquire) {
                2 => return BASE.load(Ordering::Relaxed),
                3 => return std::ptr::null_mut(),
                0 if STATE
                    .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok() =>
                {
                    // memmap2 allocates nothing on the heap to map anonymous memory, so this
                    // runs inside the allocator without recursion.
                    let mapped = memmap2::MmapOptions::new()
                        .len(SLOTS * STRIDE + HUGE_PAGE)
                        .map_anon();
                    match mapped {
                        Ok(m) => {
                            // Only a hint: without huge pages the region is ordinary memory.
                            let _ = m.advise(memmap2::Advice::HugePage);
                            let start = (m.as_ptr() as usize).next_multiple_of(HUGE_PAGE);
                            // The region lives as long as the process.
                            std::mem::forget(m);
                            BASE.store(start as *mut u8, Ordering::Relaxed);
                            STATE.store(2, Ordering::Release);
                        }
                        Err(_) => STATE.store(3, Ordering::Release),
                    }
                }
                _ => std::hint::spin_loop(),
            }
        }
    }

    /// A free slot's address, taken; the lowest free one, so that few huge pages are touched.
    pub(super) fn take() -> Option<*mut u8> {
        let base = base();
        if base.is_null() {
            return None;
        }
        for (w, used) in USED.iter().enumerate() {
            let mut cur = used.load(Ordering::Relaxed);
            while cur != u64::MAX {
                let bit = (!cur).trailing_zeros() as usize;
                match used.compare_exchange_weak(
                    cur,
                    cur | 1 << bit,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Some(base.wrapping_add((w * 64 + bit) * STRIDE)),
                    Err(now) => cur = now,
                }
            }
        }
        None
    }

    /// The slot at `p`, if `p` is one: then it is given back.
    pub(super) fn give_back(p: *mut u8) -> bool {
        let Some(i) = slot_of(p) else {
            return false;
        };
        USED[i / 64].fetch_and(!(1 << (i % 64)), Ordering::Release);
        true
    }

    /// Which slot `p` is, if it is one.
    pub(super) fn slot_of(p: *mut u8) -> Option<usize> {
        let base = BASE.load(Ordering::Relaxed) as usize;
        let p = p as usize;
        (base != 0 && p >= base && p < base + SLOTS * STRIDE).then(|| (p - base) / STRIDE)
    }
}

#[cfg(target_os = "linux")]
fn is_chunk(layout: Layout) -> bool {
    layout.size() == CHUNK_CAPACITY && layout.align() <= 4096
}

// SAFETY: every block handed out is either the system allocator's (for the layout asked) or a
// slot of the region: `STRIDE >= CHUNK_CAPACITY` bytes, 4096-aligned, handed out to one holder
// at a time (its bit is set until it is given back) and never unmapped.
#[cfg(target_os = "linux")]
unsafe impl GlobalAlloc for ChunkAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_chunk(layout) {
            if let Some(p) = region::take() {
                return p;
            }
        }
        // SAFETY: the caller's contract (a non-zero-size layout) is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_chunk(layout) {
            if let Some(p) = region::take() {
                // SAFETY: `p` is a slot of the region, `CHUNK_CAPACITY` writable bytes that no
                // one else holds (its bit was just taken).
                unsafe { p.write_bytes(0, layout.size()) };
                return p;
            }
        }
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if region::give_back(ptr) {
            return;
        }
        // SAFETY: `ptr` is not the region's, so `alloc` took it from `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let ours = region::slot_of(ptr).is_some();
        // SAFETY: the caller guarantees `new_size` with `layout.align()` is a valid layout.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if !ours && !is_chunk(new) {
            // SAFETY: `ptr` came from `System` with `layout` (it is not the region's).
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // Into or out of the region: a new block, the bytes copied, the old one freed.
        // SAFETY: `new` is a valid non-zero layout (the caller's contract).
        let to = unsafe { self.alloc(new) };
        if !to.is_null() {
            // SAFETY: both blocks hold at least `min(old, new)` bytes and are distinct (`to` was
            // just allocated while `ptr` is still held).
            unsafe { std::ptr::copy_nonoverlapping(ptr, to, layout.size().min(new_size)) };
            // SAFETY: `ptr` was allocated by this allocator with `layout`.
            unsafe { self.dealloc(ptr, layout) };
        }
        to
    }
}

// SAFETY: every call is the system allocator's.
#[cfg(not(target_os = "linux"))]
unsafe impl GlobalAlloc for ChunkAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The allocator's paths, called directly (the test binary keeps the system allocator).
    #[test]
    fn chunks_come_from_the_region_and_move_out_of_it_when_they_grow() {
        let a = ChunkAlloc;
        let chunk = Layout::from_size_align(CHUNK_CAPACITY, 1).unwrap();
        // SAFETY (whole test): every pointer is used within the size it was allocated with and
        // freed once with its layout.
        unsafe {
            let p = a.alloc(chunk);
            assert!(
                region::slot_of(p).is_some(),
                "a chunk comes from the region"
            );
            assert_eq!(p as usize % 4096, 0);
            p.write_bytes(7, CHUNK_CAPACITY);
            let q = a.alloc(chunk);
            assert_eq!(region::slot_of(q), region::slot_of(p).map(|i| i + 1));
            // Growing a chunk moves it out of the region with its bytes.
            let grown = a.realloc(p, chunk, CHUNK_CAPACITY * 2);
            assert!(region::slot_of(grown).is_none());
            assert!(std::slice::from_raw_parts(grown, CHUNK_CAPACITY)
                .iter()
                .all(|&b| b == 7));
            // Its slot is free again: the next chunk takes it (lowest first).
            let r = a.alloc(chunk);
            assert_eq!(r, p);
            a.dealloc(
                grown,
                Layout::from_size_align(CHUNK_CAPACITY * 2, 1).unwrap(),
            );
            // A zeroed chunk is zero even in a reused slot.
            r.write_bytes(9, CHUNK_CAPACITY);
            a.dealloc(r, chunk);
            let z = a.alloc_zeroed(chunk);
            assert_eq!(z, r);
            assert!(std::slice::from_raw_parts(z, CHUNK_CAPACITY)
                .iter()
                .all(|&b| b == 0));
            // Other sizes are the system's, and a block shrunk to a chunk's size moves in.
            let small = Layout::from_size_align(100, 8).unwrap();
            let s = a.alloc(small);
            assert!(region::slot_of(s).is_none());
            s.write_bytes(3, 100);
            let s2 = a.realloc(s, small, CHUNK_CAPACITY);
            assert!(region::slot_of(s2).is_some());
            assert!(std::slice::from_raw_parts(s2, 100).iter().all(|&b| b == 3));
            a.dealloc(s2, Layout::from_size_align(CHUNK_CAPACITY, 8).unwrap());
            a.dealloc(z, chunk);
            a.dealloc(q, chunk);
        }
        // Threads taking and giving back chunks at once never hold the same one: each fills
        // its chunks with its own byte and finds them intact when it gives them back. (In this
        // test rather than its own: the region is one per process, and the steps above count
        // on the slots they take.)
        std::thread::scope(|s| {
            for t in 1..=4u8 {
                s.spawn(move || {
                    let mut held = Vec::new();
                    for round in 0..2_000 {
                        // SAFETY: as above; each chunk is written within its size by its holder.
                        unsafe {
                            let p = a.alloc(chunk);
                            p.write_bytes(t, 64);
                            p.add(CHUNK_CAPACITY - 64).write_bytes(t, 64);
                            held.push(p);
                            if round % 3 == 2 || held.len() > 40 {
                                for p in held.drain(..) {
                                    let head = std::slice::from_raw_parts(p, 64);
                                    let tail =
                                        std::slice::from_raw_parts(p.add(CHUNK_CAPACITY - 64), 64);
                                    assert!(head.iter().chain(tail).all(|&b| b == t));
                                    a.dealloc(p, chunk);
                                }
                            }
                        }
                    }
                    for p in held {
                        // SAFETY: as above.
                        unsafe { a.dealloc(p, chunk) };
                    }
                });
            }
        });
    }
}
