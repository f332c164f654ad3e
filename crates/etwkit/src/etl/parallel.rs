//! Turning a file's records into bytes on every core, in the order a single-threaded walk gives.
//!
//! Threads take buffers in the order the walk meets them and turn each record into bytes (a
//! JSON line, a CSV row, nothing for a record a filter drops), noting each record's raw timestamp.
//! The calling thread is one of them: between buffers it puts the buffers back in order — one
//! after the other for [`Order::File`], through the same k-way merge as [`EtlFile::for_each`] for
//! [`Order::Time`] (every record takes part in the merge, dropped ones too, so the merge makes the
//! same choices) — and hands the bytes on; it waits for another thread only when the buffer the
//! merge needs next is still being rendered and no other may start. The output is the
//! single-threaded output, byte for byte (tested on every sample).
//!
//! Memory: at most `4 × threads + 2` rendered buffers wait ahead of the merge, beside the buffers
//! the time merge holds open (about one per CPU of the traced machine). A buffer's text goes into
//! chunks of about 96 KiB taken from the rendering thread's own pool and returned to it once
//! written (a chunk another core wrote last costs a transfer of every cache line it rewrites:
//! one pool shared by the threads made a dump spend ~5% more CPU time): the
//! memory touched is what is in flight, not the largest text each pooled buffer ever held (a
//! buffer of small records renders to 16 times its size, the average one to 6 times), and a
//! chunk is reallocated (copied, faulted in again) only for a record of over 28 KiB of text.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::IoSlice;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Condvar, Mutex};

use super::reader::{BufferSpace, EtlFile, Order, ReadSummary, Record};

/// What a parallel walk read and produced.
#[derive(Clone, Debug, Default)]
pub struct RenderSummary {
    pub read: ReadSummary,
    /// Records for which the render function reported output.
    pub emitted: u64,
}

/// One buffer's records, rendered.
#[derive(Default)]
struct Rendered {
    /// The text, in order: every chunk but the last holds at least `CHUNK_FILL` bytes.
    chunks: Vec<Vec<u8>>,
    /// Per record: its raw timestamp and where its bytes end (see [`Pos`]).
    recs: Vec<(i64, Pos)>,
    summary: ReadSummary,
    emitted: u64,
    /// The buffer's size in the file (progress).
    size: u64,
    end_offset: u64,
    /// The thread whose pool this came from, and goes back to: its vectors are grown by that
    /// thread only (glibc's malloc locks the arena of the thread that allocated a block to grow
    /// or free it, and a shared pool made the rendering threads sleep on each other's arenas).
    owner: usize,
}

/// A place in a [`Rendered`]'s text: chunk index in the high 32 bits, offset in that chunk in
/// the low ones (so places compare in text order).
type Pos = u64;

fn pos(chunk: usize, offset: usize) -> Pos {
    (chunk as u64) << 32 | offset as u64
}

/// A chunk is closed once it holds this much text; the next record starts a new one.
const CHUNK_FILL: usize = 96 << 10;
/// A chunk's capacity: room for a record of up to 28 KiB of text that crosses `CHUNK_FILL` (a
/// longer one makes its chunk grow). Below the 128 KiB at which glibc's allocator maps each block
/// on its own: chunks come from the heap, so freeing them is not one `munmap` each (about 1 ms
/// for a 26 MB file's 50 chunks in flight, measured).
const CHUNK_CAPACITY: usize = 124 << 10;

impl Rendered {
    /// The text between two places, as slices (empty ones left out), added to `out`; returns
    /// its length.
    fn slices<'a>(&'a self, from: Pos, to: Pos, out: &mut Vec<IoSlice<'a>>) -> usize {
        let (cf, of) = ((from >> 32) as usize, from as u32 as usize);
        let (ct, ot) = ((to >> 32) as usize, to as u32 as usize);
        let mut n = 0;
        for c in cf..=ct.min(self.chunks.len().saturating_sub(1)) {
            let text = &self.chunks[c];
            let a = if c == cf { of } else { 0 };
            let b = if c == ct { ot } else { text.len() };
            if b > a {
                out.push(IoSlice::new(&text[a..b]));
                n += b - a;
            }
        }
        n
    }

    /// Where the text ends.
    fn end(&self) -> Pos {
        match self.chunks.len() {
            0 => 0,
            n => pos(n - 1, self.chunks[n - 1].len()),
        }
    }
}

/// Puts a written chunk back in the pool. A chunk the time merge already handed back (see
/// `merge`) is left empty in its buffer: only chunks with room go back.
fn give_back(free: &mut Vec<Vec<u8>>, mut c: Vec<u8>) {
    if c.capacity() > 0 {
        c.clear();
        free.push(c);
    }
}

/// The number of threads to use when the caller does not say: every core.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

impl EtlFile {
    /// Renders every record with `render` on `threads` worker threads and passes the bytes to `out`
    /// in `order`, until `out` returns `Break`. `init` makes each worker's state (a renderer, scratch
    /// space); `render` appends a record's bytes to the buffer it is given and returns whether it
    /// produced output (counted in [`RenderSummary::emitted`]). `progress(bytes_done)` is called as
    /// buffers are finished.
    pub fn par_render<S, I, F>(
        &self,
        order: Order,
        threads: usize,
        init: I,
        render: F,
        progress: &mut dyn FnMut(u64),
        out: &mut dyn FnMut(&[u8]) -> ControlFlow<()>,
    ) -> RenderSummary
    where
        I: Fn() -> S + Sync,
        F: Fn(&mut S, &Record<'_>, &mut Vec<u8>) -> bool + Sync,
    {
        self.par_render_vectored(order, threads, init, render, progress, &mut |slices| {
            for s in slices {
                out(s)?;
            }
            ControlFlow::Continue(())
        })
    }

    /// As [`EtlFile::par_render`], but the bytes go to `out` as batches of slices (runs of
    /// records of one buffer, up to about 1 MiB or 512 runs at a time): for a writer with
    /// `write_vectored`, the merge then copies nothing.
    pub fn par_render_vectored<S, I, F>(
        &self,
        order: Order,
        threads: usize,
        init: I,
        render: F,
        progress: &mut dyn FnMut(u64),
        out: &mut dyn FnMut(&[IoSlice<'_>]) -> ControlFlow<()>,
    ) -> RenderSummary
    where
        I: Fn() -> S + Sync,
        F: Fn(&mut S, &Record<'_>, &mut Vec<u8>) -> bool + Sync,
    {
        let threads = threads.max(1);
        let seq: Vec<(i64, usize)> = match order {
            Order::File => self.buffers().iter().map(|b| (0, b.index)).collect(),
            Order::Time => self.time_order(),
        };
        let window = 4 * threads + 2;
        let next_job = AtomicUsize::new(0);
        // The merge's position (jobs up to `admitted + window` may be rendered), and how many
        // workers wait for it to move (only then is a wake-up sent).
        let admitted = Mutex::new(0usize);
        let sleepers = AtomicUsize::new(0);
        let cv = Condvar::new();
        let stop = AtomicBool::new(false);
        let (tx, rx) = mpsc::channel::<(usize, Rendered)>();
        // One pool of rendered buffers per thread (see `Rendered::owner`): thread 0 is the
        // calling one.
        let pools: Vec<Mutex<Vec<Rendered>>> = (0..threads).map(|_| Mutex::default()).collect();
        // And one pool of text chunks per thread: a buffer's chunks all come from the thread
        // that renders it and go back to that thread's pool (see the module's text).
        let chunks: Vec<Mutex<Vec<Vec<u8>>>> = (0..threads).map(|_| Mutex::default()).collect();
        let new_chunk = |me: usize| {
            chunks[me]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(CHUNK_CAPACITY))
        };
        let mut total = RenderSummary {
            read: self.start_summary(),
            emitted: 0,
        };
        // Renders job `j` (the buffer `seq[j]`) with a thread's own state and read space.
        let render_job =
            |me: usize, state: &mut S, space: &mut BufferSpace, j: usize| -> Rendered {
                let b = &self.buffers()[seq[j].1];
                let mut r = pools[me]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .pop()
                    .unwrap_or_default();
                r.owner = me;
                r.size = b.header.buffer_size as u64;
                r.end_offset = b.file_offset + b.header.buffer_size as u64;
                if let Some(data) = self.read_buffer(b, space, &mut r.summary) {
                    let Rendered {
                        chunks: done,
                        recs,
                        summary,
                        emitted,
                        ..
                    } = &mut r;
                    let mut text = new_chunk(me);
                    let _ = self.walk_buffer(b, data, summary, &mut |rec| {
                        if text.len() >= CHUNK_FILL {
                            done.push(std::mem::replace(&mut text, new_chunk(me)));
                        }
                        if render(state, rec, &mut text) {
                            *emitted += 1;
                        }
                        recs.push((rec.event.raw_timestamp, pos(done.len(), text.len())));
                        ControlFlow::Continue(())
                    });
                    done.push(text);
                } else {
                    // Not loadable: the merge skips it without counting its bytes done.
                    r.size = 0;
                }
                r
            };
        std::thread::scope(|scope| {
            // The calling thread renders too (between merging and writing): `threads - 1`
            // workers beside it.
            for me in 1..threads {
                let tx = tx.clone();
                let (seq, next_job, admitted, sleepers, cv, stop) =
                    (&seq, &next_job, &admitted, &sleepers, &cv, &stop);
                let (init, render_job) = (&init, &render_job);
                scope.spawn(move || {
                    let mut state = init();
                    let mut space = BufferSpace::default();
                    loop {
                        let j = next_job.fetch_add(1, Ordering::SeqCst);
                        if j >= seq.len() {
                            break;
                        }
                        {
                            let mut a = admitted.lock().unwrap_or_else(|e| e.into_inner());
                            while j >= *a + window && !stop.load(Ordering::SeqCst) {
                                sleepers.fetch_add(1, Ordering::SeqCst);
                                a = cv.wait(a).unwrap_or_else(|e| e.into_inner());
                                sleepers.fetch_sub(1, Ordering::SeqCst);
                            }
                        }
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let r = render_job(me, &mut state, &mut space, j);
                        if tx.send((j, r)).is_err() {
                            break;
                        }
                    }
                });
            }
            drop(tx);
            let mut pending: HashMap<usize, Rendered> = HashMap::new();
            let free_chunk = |owner: usize, c: Vec<u8>| {
                give_back(
                    &mut chunks[owner].lock().unwrap_or_else(|e| e.into_inner()),
                    c,
                )
            };
            let recycle = |mut r: Rendered| {
                {
                    let mut free = chunks[r.owner].lock().unwrap_or_else(|e| e.into_inner());
                    for c in r.chunks.drain(..) {
                        give_back(&mut free, c);
                    }
                }
                r.recs.clear();
                r.summary = ReadSummary::default();
                r.emitted = 0;
                pools[r.owner]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(r);
            };
            let mut state = init();
            let mut space = BufferSpace::default();
            let mut take = |j: usize| -> Rendered {
                let r = loop {
                    if let Some(r) = pending.remove(&j) {
                        break r;
                    }
                    if let Ok((k, r)) = rx.try_recv() {
                        pending.insert(k, r);
                        continue;
                    }
                    // Not there yet: render the next job here when the window allows, rather
                    // than wait (a wake-up costs more than it saves on a loaded machine).
                    let k = next_job.load(Ordering::SeqCst);
                    if k < seq.len()
                        && k < j + window
                        && next_job
                            .compare_exchange(k, k + 1, Ordering::SeqCst, Ordering::SeqCst)
                            .is_ok()
                    {
                        let r = render_job(0, &mut state, &mut space, k);
                        pending.insert(k, r);
                        continue;
                    }
                    match rx.recv() {
                        Ok((k, r)) => {
                            pending.insert(k, r);
                        }
                        // A worker died (its panic resurfaces when the scope ends).
                        Err(_) => break Rendered::default(),
                    }
                };
                *admitted.lock().unwrap_or_else(|e| e.into_inner()) = j + 1;
                if sleepers.load(Ordering::SeqCst) > 0 {
                    cv.notify_all();
                }
                r
            };
            match order {
                Order::File => {
                    for j in 0..seq.len() {
                        let mut r = take(j);
                        total.read =
                            std::mem::take(&mut total.read).merge(std::mem::take(&mut r.summary));
                        total.emitted += r.emitted;
                        let mut slices = Vec::with_capacity(r.chunks.len());
                        if r.slices(0, r.end(), &mut slices) > 0 && out(&slices).is_break() {
                            break;
                        }
                        progress(r.end_offset);
                        recycle(r);
                    }
                }
                Order::Time => merge(
                    &seq,
                    &mut take,
                    &recycle,
                    &free_chunk,
                    &mut total,
                    progress,
                    out,
                ),
            }
            stop.store(true, Ordering::SeqCst);
            let _guard = admitted.lock().unwrap_or_else(|e| e.into_inner());
            cv.notify_all();
            drop(rx);
        });
        // Buffers finish out of order: put issues back in file order.
        total
            .read
            .issues
            .sort_by_key(|i| (i.file_offset, i.record_offset));
        total
    }
}

/// At most this many runs, or this many bytes, wait to be handed on in one vectored write.
const BATCH_RUNS: usize = 512;
const BATCH_BYTES: usize = 1 << 20;

/// The time merge of `EtlFile::merge_by_time`, over rendered buffers: buffers join in `seq` order
/// once the merge reaches their first timestamp; the earliest head (ties: the buffer that joined
/// first) goes next. Consecutive records of one buffer leave as one run; runs are handed on in
/// batches (one vectored write, no copy), their buffers recycled once the batch is out, and the
/// chunks of a buffer still open that the batch wrote to the end go back to their pool at once
/// (`free_chunk`): buffers of several CPUs' streams overlap in time and stay open together, and
/// holding each one's text whole until its last record was the larger part of the memory a dump
/// touches (perfview_net.4.5.x86.etl: 73 chunks in flight with two threads).
fn merge(
    seq: &[(i64, usize)],
    take: &mut dyn FnMut(usize) -> Rendered,
    recycle: &dyn Fn(Rendered),
    free_chunk: &dyn Fn(usize, Vec<u8>),
    total: &mut RenderSummary,
    progress: &mut dyn FnMut(u64),
    out: &mut dyn FnMut(&[IoSlice<'_>]) -> ControlFlow<()>,
) {
    struct Cur {
        r: Rendered,
        i: usize,
        start: Pos,
        /// Chunks before this one were written and handed back.
        freed: usize,
    }
    struct Batch {
        /// (slot, from, to) of each run waiting.
        runs: Vec<(usize, Pos, Pos)>,
        bytes: usize,
        /// Slots whose buffer is finished, with its size (progress), once the batch is out.
        finished: Vec<(usize, u64)>,
    }
    let mut cursors: Vec<Option<Cur>> = Vec::new();
    let mut heap: BinaryHeap<Reverse<(i64, usize, usize, usize)>> = BinaryHeap::new();
    let mut next = 0usize;
    let mut done_bytes = 0u64;
    let mut batch = Batch {
        runs: Vec::with_capacity(BATCH_RUNS),
        bytes: 0,
        finished: Vec::new(),
    };
    let mut flush = |cursors: &mut Vec<Option<Cur>>,
                     batch: &mut Batch,
                     done_bytes: &mut u64|
     -> ControlFlow<()> {
        if !batch.runs.is_empty() {
            {
                let mut v: Vec<IoSlice<'_>> = Vec::with_capacity(batch.runs.len() + 8);
                for &(slot, from, to) in &batch.runs {
                    let c = cursors[slot].as_ref().expect("cursor of a waiting run");
                    c.r.slices(from, to, &mut v);
                }
                out(&v)?;
            }
            // Everything before a cursor's place is out now: its chunks wholly before that
            // place can be reused.
            for &(slot, ..) in &batch.runs {
                let Some(c) = cursors[slot].as_mut() else {
                    continue;
                };
                let upto = ((c.start >> 32) as usize).min(c.r.chunks.len());
                while c.freed < upto {
                    free_chunk(c.r.owner, std::mem::take(&mut c.r.chunks[c.freed]));
                    c.freed += 1;
                }
            }
        }
        batch.runs.clear();
        batch.bytes = 0;
        for (slot, size) in batch.finished.drain(..) {
            *done_bytes += size;
            progress(*done_bytes);
            if let Some(c) = cursors[slot].take() {
                recycle(c.r);
            }
        }
        ControlFlow::Continue(())
    };
    loop {
        while next < seq.len() && heap.peek().is_none_or(|Reverse((t, ..))| seq[next].0 <= *t) {
            let mut r = take(next);
            total.read = std::mem::take(&mut total.read).merge(std::mem::take(&mut r.summary));
            total.emitted += r.emitted;
            if let Some(&(t, _)) = r.recs.first() {
                heap.push(Reverse((t, next, 0, cursors.len())));
                cursors.push(Some(Cur {
                    r,
                    i: 0,
                    start: 0,
                    freed: 0,
                }));
            } else {
                done_bytes += r.size;
                recycle(r);
            }
            next += 1;
        }
        let Some(Reverse((_, s, _, slot))) = heap.pop() else {
            break;
        };
        // Take this buffer's records while each stays ahead of every other head (and of the
        // next buffer to join): the heap would hand them out one after the other anyway.
        let c = cursors[slot].as_mut().expect("cursor in heap");
        let from = c.start;
        loop {
            c.start = c.r.recs[c.i].1;
            c.i += 1;
            let Some(&(t, _)) = c.r.recs.get(c.i) else {
                break;
            };
            let ahead = heap
                .peek()
                .is_none_or(|Reverse((ht, hs, ..))| (t, s) < (*ht, *hs))
                && (next >= seq.len() || t < seq[next].0);
            if !ahead {
                heap.push(Reverse((t, s, c.i, slot)));
                break;
            }
        }
        let (to, finished, size) = (c.start, c.i == c.r.recs.len(), c.r.size);
        if to > from {
            batch.runs.push((slot, from, to));
            // Exact within a chunk; a run that crosses chunks counts as the rest of one.
            batch.bytes += if to >> 32 == from >> 32 {
                (to - from) as usize
            } else {
                CHUNK_FILL
            };
        }
        if finished {
            batch.finished.push((slot, size));
        }
        if (batch.runs.len() >= BATCH_RUNS
            || batch.bytes >= BATCH_BYTES
            || batch.finished.len() >= 4)
            && flush(&mut cursors, &mut batch, &mut done_bytes).is_break()
        {
            return;
        }
    }
    let _ = flush(&mut cursors, &mut batch, &mut done_bytes);
}
