//! Binary reading of tracefs ring-buffer pages (`per_cpu/cpuN/trace_pipe_raw`), one thread per CPU, and
//! a time-ordered merge of all CPUs (and of several instances) for the consumer.
//!
//! Page layout (`events/header_page`): u64 timestamp, u64 commit (data length; bit 31: events were
//! missed before this page, bit 30: their count is stored as a u64 right after the data), then events.
//! Each event starts with a u32 `type_len:5 | time_delta:27` (`events/header_event`): type_len 1..=28 →
//! `4*type_len` data bytes follow; 0 → a u32 length (counting itself) then the data; 29 padding;
//! 30 time extend; 31 absolute time stamp.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::super::LiveError;
use super::early::EarlyPeek;

const MISSED_EVENTS: u64 = 1 << 31;
const MISSED_STORED: u64 = 1 << 30;
const COMMIT_MASK: u64 = (1 << 27) - 1;
const TS_MSB_BITS: u64 = (1 << 59) - 1;

/// One page's events: (timestamp, offset of the record data in the page, data length).
#[derive(Debug, Default)]
pub struct ParsedPage {
    pub entries: Vec<(u64, u32, u32)>,
    /// Events the kernel reports lost before this page (`None` when flagged but not counted).
    pub missed: Option<u64>,
    pub flagged_missed: bool,
    /// Malformed structure seen (page truncated, bad lengths): parsing stopped there.
    pub malformed: Option<String>,
}

/// Parses one page. Never panics on malformed input; stops at the first inconsistency.
pub fn parse_page(page: &[u8], out: &mut ParsedPage) {
    out.entries.clear();
    out.missed = None;
    out.flagged_missed = false;
    out.malformed = None;
    if page.len() < 16 {
        out.malformed = Some(format!(
            "page of {} bytes is shorter than its 16-byte header",
            page.len()
        ));
        return;
    }
    let mut ts = u64::from_le_bytes(page[0..8].try_into().unwrap());
    let commit = u64::from_le_bytes(page[8..16].try_into().unwrap());
    let size = (commit & COMMIT_MASK) as usize;
    let data = &page[16..];
    if size > data.len() {
        out.malformed = Some(format!(
            "commit size {size} exceeds page data {}",
            data.len()
        ));
        return;
    }
    if commit & MISSED_EVENTS != 0 {
        out.flagged_missed = true;
        if commit & MISSED_STORED != 0 {
            out.missed = data
                .get(size..size + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap()));
        }
    }
    let data = &data[..size];
    let mut p = 0usize;
    while p + 4 <= data.len() {
        let h = u32::from_le_bytes(data[p..p + 4].try_into().unwrap());
        let type_len = h & 0x1f;
        let delta = (h >> 5) as u64;
        let arr0 = || {
            data.get(p + 4..p + 8)
                .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        };
        match type_len {
            29 => {
                if delta == 0 {
                    break; // rest of the page is empty
                }
                let Some(len) = arr0() else { break };
                ts = ts.wrapping_add(delta);
                p += 4 + len as usize;
            }
            30 => {
                let Some(a) = arr0() else {
                    out.malformed = Some("truncated time extend".into());
                    break;
                };
                ts = ts.wrapping_add(((a as u64) << 27) | delta);
                p += 8;
            }
            31 => {
                let Some(a) = arr0() else {
                    out.malformed = Some("truncated time stamp".into());
                    break;
                };
                ts = (((a as u64) << 27) | delta) | (ts & !TS_MSB_BITS);
                p += 8;
            }
            0 => {
                let Some(len) = arr0() else {
                    out.malformed = Some("truncated event length".into());
                    break;
                };
                let len = len as usize;
                if len < 4 || p + 4 + len > data.len() {
                    out.malformed = Some(format!(
                        "event length {len} at page offset {} overruns the page",
                        p + 16
                    ));
                    break;
                }
                ts = ts.wrapping_add(delta);
                out.entries
                    .push((ts, (16 + p + 8) as u32, (len - 4) as u32));
                p += 4 + len;
            }
            n => {
                let len = 4 * n as usize;
                if p + 4 + len > data.len() {
                    out.malformed = Some(format!(
                        "event length {len} at page offset {} overruns the page",
                        p + 16
                    ));
                    break;
                }
                ts = ts.wrapping_add(delta);
                out.entries.push((ts, (16 + p + 4) as u32, len as u32));
                p += 4 + len;
            }
        }
    }
}

/// What a reader thread tells the merger.
pub enum Msg {
    Page {
        stream: usize,
        page: Vec<u8>,
    },
    /// The stream's ring was empty at monotonic time `mono_ns` (taken before the read).
    Idle {
        stream: usize,
        mono_ns: u64,
    },
    Done {
        stream: usize,
        error: Option<String>,
    },
}

pub fn mono_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn realtime_now_ns() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// A stream = one CPU ring of one instance.
#[derive(Clone, Debug)]
pub struct StreamInfo {
    pub instance: usize,
    pub cpu: u16,
    pub path: PathBuf,
}

/// The reader threads of a session.
pub struct Readers {
    pub streams: Vec<StreamInfo>,
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<()>>,
    pub rx: mpsc::Receiver<Msg>,
}

impl Readers {
    /// Opens every `trace_pipe_raw` (failing early with the path that could not be opened) and starts
    /// one thread per stream.
    pub fn start(
        instances: &[PathBuf],
        cpus: &[usize],
        page_size: usize,
        early: Option<Arc<EarlyPeek>>,
    ) -> Result<Readers, LiveError> {
        let (tx, rx) = mpsc::sync_channel::<Msg>(4096);
        let stop = Arc::new(AtomicBool::new(false));
        let mut streams = Vec::new();
        let mut files = Vec::new();
        for (ii, inst) in instances.iter().enumerate() {
            for &cpu in cpus {
                let path = inst.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"));
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&path)
                    .map_err(|e| LiveError::io(&path, e))?;
                streams.push(StreamInfo {
                    instance: ii,
                    cpu: cpu as u16,
                    path,
                });
                files.push(f);
            }
        }
        let mut handles = Vec::new();
        for (si, f) in files.into_iter().enumerate() {
            let tx = tx.clone();
            let stop = stop.clone();
            let name = format!("etwkit-cpu{}", streams[si].cpu);
            let early = early.clone().filter(|_| streams[si].instance == 0);
            let h = std::thread::Builder::new()
                .name(name)
                .spawn(move || read_loop(si, f, page_size, &stop, &tx, early))
                .map_err(|e| LiveError::Other(format!("cannot start reader thread: {e}")))?;
            handles.push(h);
        }
        Ok(Readers {
            streams,
            stop,
            handles,
            rx,
        })
    }

    /// Asks the threads to drain what is left and finish.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    pub fn join(&mut self) {
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        self.request_stop();
        // Unblock senders: drain the channel while joining.
        while let Ok(_m) = self.rx.try_recv() {}
        for h in self.handles.drain(..) {
            while !h.is_finished() {
                while let Ok(_m) = self.rx.try_recv() {}
                std::thread::sleep(Duration::from_millis(1));
            }
            let _ = h.join();
        }
    }
}

fn read_loop(
    stream: usize,
    mut f: File,
    page_size: usize,
    stop: &AtomicBool,
    tx: &mpsc::SyncSender<Msg>,
    early: Option<Arc<EarlyPeek>>,
) {
    let mut error = None;
    let mut scratch = ParsedPage::default();
    loop {
        // Read the stop flag before draining: after it is seen, one more full drain happens.
        let stopping = stop.load(Ordering::SeqCst);
        let t = mono_now_ns();
        let mut buf = vec![0u8; page_size];
        match f.read(&mut buf) {
            Ok(0) => {
                if stopping {
                    break;
                }
                if tx.send(Msg::Idle { stream, mono_ns: t }).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok(n) => {
                buf.truncate(n);
                if let Some(e) = &early {
                    e.on_page(&buf, &mut scratch);
                }
                if tx.send(Msg::Page { stream, page: buf }).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if stopping {
                    break;
                }
                if tx.send(Msg::Idle { stream, mono_ns: t }).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                error = Some(format!("read failed: {e}"));
                break;
            }
        }
    }
    let _ = tx.send(Msg::Done { stream, error });
}

/// One record handed out by the merger.
pub struct RawEvent<'a> {
    pub ts: u64,
    pub stream: usize,
    pub data: &'a [u8],
}

struct StreamQueue {
    pages: VecDeque<(Vec<u8>, ParsedPage, usize)>,
    /// Everything up to this time has been delivered to the queue.
    complete_until: u64,
    done: bool,
}

/// Loss and damage counters of a session.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ReadCounters {
    pub pages: u64,
    pub events: u64,
    /// Events the page headers counted as lost.
    pub lost_page_flags: u64,
    /// Pages flagged with lost events but no stored count.
    pub lost_uncounted_pages: u64,
    pub malformed_pages: u64,
    /// Events released after a later event had already been released: a ring's reader was behind the
    /// slack (e.g. a vCPU descheduled mid-write). They are delivered, late.
    pub out_of_order: u64,
    pub issues: Vec<String>,
}

/// Merges the streams by timestamp. Events are released only when every stream is known complete up to
/// their time (a stream is complete up to its newest queued event, or up to the moment it was last seen
/// empty minus `slack_ns`).
pub struct Merger {
    queues: Vec<StreamQueue>,
    slack_ns: u64,
    last_ts: u64,
    pub counters: ReadCounters,
}

impl Merger {
    pub fn new(streams: usize, slack_ns: u64) -> Merger {
        Merger {
            queues: (0..streams)
                .map(|_| StreamQueue {
                    pages: VecDeque::new(),
                    complete_until: 0,
                    done: false,
                })
                .collect(),
            slack_ns,
            last_ts: 0,
            counters: ReadCounters::default(),
        }
    }

    pub fn all_done(&self) -> bool {
        self.queues.iter().all(|q| q.done && q.pages.is_empty())
    }

    pub fn accept(&mut self, msg: Msg) {
        match msg {
            Msg::Page { stream, page } => {
                let mut parsed = ParsedPage::default();
                parse_page(&page, &mut parsed);
                self.counters.pages += 1;
                if parsed.flagged_missed {
                    match parsed.missed {
                        Some(n) => self.counters.lost_page_flags += n,
                        None => self.counters.lost_uncounted_pages += 1,
                    }
                }
                if let Some(m) = &parsed.malformed {
                    self.counters.malformed_pages += 1;
                    if self.counters.issues.len() < 100 {
                        self.counters.issues.push(format!("stream {stream}: {m}"));
                    }
                }
                let Some(q) = self.queues.get_mut(stream) else {
                    return;
                };
                if let Some(&(ts, _, _)) = parsed.entries.last() {
                    q.complete_until = q.complete_until.max(ts);
                }
                if !parsed.entries.is_empty() {
                    q.pages.push_back((page, parsed, 0));
                }
            }
            Msg::Idle { stream, mono_ns } => {
                if let Some(q) = self.queues.get_mut(stream) {
                    q.complete_until = q.complete_until.max(mono_ns.saturating_sub(self.slack_ns));
                }
            }
            Msg::Done { stream, error } => {
                if let Some(q) = self.queues.get_mut(stream) {
                    q.done = true;
                    q.complete_until = u64::MAX;
                }
                if let Some(e) = error {
                    self.counters.issues.push(format!("stream {stream}: {e}"));
                }
            }
        }
    }

    /// Releases every event that is safe to release, in time order, to `f`. `f` returns false to stop.
    pub fn drain(&mut self, mut f: impl FnMut(RawEvent<'_>) -> bool) -> bool {
        loop {
            // A stream with queued events is complete up to its newest one (complete_until >= it).
            let horizon = self
                .queues
                .iter()
                .map(|q| q.complete_until)
                .min()
                .unwrap_or(u64::MAX);
            let mut best: Option<(usize, u64)> = None;
            for (si, q) in self.queues.iter().enumerate() {
                if let Some((_, p, i)) = q.pages.front() {
                    let ts = p.entries[*i].0;
                    if best.is_none_or(|(_, b)| ts < b) {
                        best = Some((si, ts));
                    }
                }
            }
            let Some((si, ts)) = best else { return true };
            if ts > horizon {
                return true;
            }
            let q = &mut self.queues[si];
            let (page, parsed, i) = q.pages.front_mut().unwrap();
            let (ts, off, len) = parsed.entries[*i];
            self.counters.events += 1;
            if ts < self.last_ts {
                self.counters.out_of_order += 1;
            } else {
                self.last_ts = ts;
            }
            let keep = f(RawEvent {
                ts,
                stream: si,
                data: &page[off as usize..(off + len) as usize],
            });
            *i += 1;
            if *i >= parsed.entries.len() {
                q.pages.pop_front();
            }
            if !keep {
                return false;
            }
        }
    }
}

/// The ring page size of an instance (`buffer_subbuf_size_kb`, or the system page size).
pub fn page_size(instance: &Path) -> usize {
    std::fs::read_to_string(instance.join("buffer_subbuf_size_kb"))
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(ts: u64, events: &[(u32, &[u8])], flags: u64, missed: Option<u64>) -> Vec<u8> {
        let mut d = Vec::new();
        for (delta, data) in events {
            if data.len() <= 112 && data.len() % 4 == 0 && !data.is_empty() {
                d.extend_from_slice(&((delta << 5) | (data.len() as u32 / 4)).to_le_bytes());
            } else {
                d.extend_from_slice(&(delta << 5).to_le_bytes());
                d.extend_from_slice(&(data.len() as u32 + 4).to_le_bytes());
            }
            d.extend_from_slice(data);
        }
        let mut p = Vec::new();
        p.extend_from_slice(&ts.to_le_bytes());
        p.extend_from_slice(&(d.len() as u64 | flags).to_le_bytes());
        p.extend_from_slice(&d);
        if let Some(m) = missed {
            p.extend_from_slice(&m.to_le_bytes());
        }
        p.resize(4096, 0);
        p
    }

    #[test]
    fn parses_events_and_loss() {
        let big = [7u8; 200];
        let p = page(
            1000,
            &[(5, &[1, 2, 3, 4]), (10, &big)],
            MISSED_EVENTS | MISSED_STORED,
            Some(42),
        );
        let mut out = ParsedPage::default();
        parse_page(&p, &mut out);
        assert_eq!(out.missed, Some(42));
        assert_eq!(out.entries.len(), 2);
        assert_eq!(out.entries[0].0, 1005);
        assert_eq!(&p[out.entries[0].1 as usize..][..4], &[1, 2, 3, 4]);
        assert_eq!(out.entries[1].0, 1015);
        assert_eq!(out.entries[1].2, 200);
        // Truncated page: reported, no panic.
        parse_page(&p[..30], &mut out);
        assert!(out.malformed.is_some());
    }

    #[test]
    fn merges_in_time_order() {
        let mut m = Merger::new(2, 0);
        m.accept(Msg::Page {
            stream: 0,
            page: page(100, &[(0, &[0, 0, 0, 1]), (20, &[0, 0, 0, 3])], 0, None),
        });
        m.accept(Msg::Page {
            stream: 1,
            page: page(110, &[(0, &[0, 0, 0, 2])], 0, None),
        });
        let mut seen = Vec::new();
        m.drain(|e| {
            seen.push(e.data[3]);
            true
        });
        // Stream 1 is complete only up to 110, so event 3 (t=120) waits.
        assert_eq!(seen, [1, 2]);
        m.accept(Msg::Done {
            stream: 1,
            error: None,
        });
        m.drain(|e| {
            seen.push(e.data[3]);
            true
        });
        assert_eq!(seen, [1, 2, 3]);
    }
}
