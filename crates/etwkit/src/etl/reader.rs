//! Reading an ETL file: the buffer chain, decompression, record walks in file order, in time order
//! (k-way merge across per-CPU buffers) and in parallel by buffer.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::{ControlFlow, Deref};
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::event::{EventRecord, HeaderType};
use crate::time::Clock;

use super::buffer::{BufferHeader, BUFFER_HEADER_SIZE};
use super::compression;
use super::logfile_header::{DamagedField, LogfileHeader};
use super::record::{self, BufferContext, Next};

/// Largest uncompressed buffer we accept (ETW allows at most 16 MiB buffers... we leave headroom). A
/// header claiming more is corrupt, and refusing it keeps allocation bounded.
pub const MAX_BUFFER_SIZE: u32 = 64 << 20;

/// Errors that stop a file from being read at all. Everything else is counted in [`ReadSummary`].
#[derive(Debug, thiserror::Error)]
pub enum EtlError {
    #[error("{path} is a directory, not an ETL file")]
    IsDirectory { path: PathBuf },
    #[error("cannot open {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: empty file (0 bytes), not an ETL trace")]
    Empty { path: PathBuf },
    #[error("{path}: not an ETL file: {reason}")]
    NotEtl { path: PathBuf, reason: String },
}

/// Record iteration order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Order {
    /// Buffer by buffer as stored (per-CPU buffers interleave, so time goes back and forth).
    #[default]
    File,
    /// By timestamp across all buffers (stable: equal timestamps keep file order).
    Time,
}

/// Something that could not be read; the walk went on past it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ReadIssue {
    /// File offset of the buffer concerned.
    pub file_offset: u64,
    pub buffer_index: Option<usize>,
    /// Offset of the record inside the buffer's (uncompressed) data, header included.
    pub record_offset: Option<usize>,
    pub reason: String,
}

impl std::fmt::Display for ReadIssue {
    /// `file offset 4096 (buffer 1, record at 0x48): reason`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "file offset {}", self.file_offset)?;
        match (self.buffer_index, self.record_offset) {
            (Some(b), Some(r)) => write!(f, " (buffer {b}, record at 0x{r:x})")?,
            (Some(b), None) => write!(f, " (buffer {b})")?,
            (None, Some(r)) => write!(f, " (record at 0x{r:x})")?,
            (None, None) => {}
        }
        write!(f, ": {}", self.reason)
    }
}

/// Where a buffer is and what its header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferInfo {
    pub index: usize,
    pub file_offset: u64,
    pub header: BufferHeader,
    /// The file ends inside this buffer.
    pub truncated: bool,
}

/// One record as read from a file: the model plus where it came from and its raw bytes.
#[derive(Clone, Debug)]
pub struct Record<'a> {
    pub event: EventRecord<'a>,
    /// The whole on-disk record, header included.
    pub raw: &'a [u8],
    pub buffer_index: usize,
    /// Offset of the record inside the buffer, counting the 0x48-byte buffer header.
    pub offset: usize,
}

impl<'a> Deref for Record<'a> {
    type Target = EventRecord<'a>;
    fn deref(&self) -> &EventRecord<'a> {
        &self.event
    }
}

/// Counts of a walk.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReadSummary {
    pub records: u64,
    pub buffers: u64,
    pub compressed_buffers: u64,
    pub bad_buffers: u64,
    pub bad_records: u64,
    /// At most [`MAX_ISSUES`] issues are kept; `issues_dropped` counts the rest.
    pub issues: Vec<ReadIssue>,
    pub issues_dropped: u64,
}

/// Issues kept per walk.
pub const MAX_ISSUES: usize = 1000;

impl ReadSummary {
    pub(super) fn issue(&mut self, i: ReadIssue) {
        if self.issues.len() < MAX_ISSUES {
            self.issues.push(i);
        } else {
            self.issues_dropped += 1;
        }
    }

    /// A record of buffer `b` at `pos` that does not parse: counted, and the rest of the buffer
    /// (`len` valid bytes) skipped.
    pub(super) fn bad_record(
        &mut self,
        b: &BufferInfo,
        pos: usize,
        len: usize,
        e: impl std::fmt::Display,
    ) {
        self.bad_records += 1;
        self.issue(ReadIssue {
            file_offset: b.file_offset,
            buffer_index: Some(b.index),
            record_offset: Some(pos),
            reason: format!("{e}; rest of the buffer ({} bytes) skipped", len - pos),
        });
    }

    pub(super) fn merge(mut self, o: ReadSummary) -> ReadSummary {
        self.records += o.records;
        self.buffers += o.buffers;
        self.compressed_buffers += o.compressed_buffers;
        self.bad_buffers += o.bad_buffers;
        self.bad_records += o.bad_records;
        self.issues_dropped += o.issues_dropped;
        for i in o.issues {
            self.issue(i);
        }
        self
    }
}

enum Data {
    Map(memmap2::Mmap),
    Vec(Vec<u8>),
}

impl Deref for Data {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Data::Map(m) => m,
            Data::Vec(v) => v,
        }
    }
}

/// An open ETL file.
pub struct EtlFile {
    data: Data,
    /// The open file behind a map: small reads (buffer headers, first records) go through it so they
    /// do not make the map resident (see `mmap::read_at`).
    file: Option<std::fs::File>,
    path: PathBuf,
    header: LogfileHeader,
    header_error: Option<String>,
    /// Fields of the logfile header holding values no logger writes.
    header_damage: Vec<DamagedField>,
    /// The issue that names the header's damage (the fields, or a clock base no logger writes).
    header_damage_issue: Option<String>,
    /// The clock's own fields are damaged: timestamps are shown raw.
    clock_damaged: bool,
    clock: Clock,
    buffers: Vec<BufferInfo>,
    chain_issues: Vec<ReadIssue>,
    /// Buffers the chain walk had to skip over (corrupt headers).
    chain_bad_buffers: u64,
    /// Whole buffers the logger wrote (BuffersWritten) that the file does not hold.
    missing_buffers: usize,
    /// [`EtlFile::time_order`], once a walk over every buffer has noted their first timestamps.
    time_order: std::sync::OnceLock<Vec<(i64, usize)>>,
}

impl std::fmt::Debug for EtlFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtlFile")
            .field("path", &self.path)
            .field("len", &self.data.len())
            .field("buffers", &self.buffers.len())
            .finish()
    }
}

fn default_header() -> LogfileHeader {
    LogfileHeader {
        buffer_size: 0,
        version: [0; 4],
        provider_version: 0,
        number_of_processors: 0,
        end_time: 0,
        timer_resolution: 0,
        maximum_file_size: 0,
        log_file_mode: 0,
        buffers_written: 0,
        start_buffers: 0,
        pointer_size: 8,
        events_lost: 0,
        cpu_speed_mhz: 0,
        bias_minutes: 0,
        time_zone_standard_name: String::new(),
        time_zone_daylight_name: String::new(),
        boot_time: 0,
        perf_freq: 0,
        start_time: 0,
        clock_type: crate::time::ClockType::SystemTime,
        buffers_lost: 0,
        logger_name: String::new(),
        log_file_name: String::new(),
        layout_pointer_size: 8,
    }
}

/// Is there a plausible buffer at `off` whose successor is plausible too (or the end of the file)?
fn chains_at(data: &[u8], off: usize) -> bool {
    let Some(h) = BufferHeader::parse(&data[off..]) else {
        return false;
    };
    if !h.plausible(MAX_BUFFER_SIZE) {
        return false;
    }
    let end = off + h.buffer_size as usize;
    if end >= data.len() {
        return end == data.len();
    }
    BufferHeader::parse(&data[end..]).is_some_and(|n| n.plausible(MAX_BUFFER_SIZE))
}

impl EtlFile {
    /// Opens and memory-maps a file, walks the buffer chain and reads the logfile header.
    pub fn open(path: impl AsRef<Path>) -> Result<EtlFile, EtlError> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::File::open(&path).map_err(|source| EtlError::Io {
            path: path.clone(),
            source,
        })?;
        let meta = file.metadata().map_err(|source| EtlError::Io {
            path: path.clone(),
            source,
        })?;
        if meta.is_dir() {
            return Err(EtlError::IsDirectory { path });
        }
        let len = meta.len();
        if !meta.is_file() || len == 0 {
            // A pipe (`zcat trace.etl.gz | etwkit stats /dev/stdin`, `<(...)`), a device, or a
            // file whose size the filesystem does not say (/proc): read it into memory. These
            // were called "empty file (0 bytes)".
            return Self::from_stream(file, path);
        }
        let map = super::mmap::map(&file).map_err(|source| EtlError::Io {
            path: path.clone(),
            source,
        })?;
        let mut f = Self::from_data(Data::Map(map), path, Some(&file))?;
        f.file = Some(file);
        Ok(f)
    }

    /// Reads `file` to its end, refusing at once a stream whose first 72 bytes are no buffer
    /// header (so `/dev/zero` or a random device is not read forever).
    fn from_stream(mut file: std::fs::File, path: PathBuf) -> Result<EtlFile, EtlError> {
        use std::io::Read;
        let io = |source| EtlError::Io {
            path: path.clone(),
            source,
        };
        let mut bytes = Vec::new();
        (&mut file)
            .take(BUFFER_HEADER_SIZE as u64)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        if bytes.is_empty() {
            return Err(EtlError::Empty { path });
        }
        let plausible = BufferHeader::parse(&bytes).is_some_and(|h| h.plausible(MAX_BUFFER_SIZE));
        if plausible {
            file.read_to_end(&mut bytes).map_err(io)?;
        }
        // An implausible start gets from_data's own sentence.
        Self::from_data(Data::Vec(bytes), path, None)
    }

    /// Reads an ETL image held in memory.
    pub fn from_vec(bytes: Vec<u8>) -> Result<EtlFile, EtlError> {
        let path = PathBuf::from("<memory>");
        if bytes.is_empty() {
            return Err(EtlError::Empty { path });
        }
        Self::from_data(Data::Vec(bytes), path, None)
    }

    fn from_data(
        data: Data,
        path: PathBuf,
        file: Option<&std::fs::File>,
    ) -> Result<EtlFile, EtlError> {
        let d: &[u8] = &data;
        // Buffer headers come through positioned reads when there is a file (see mmap::read_at).
        let header_at = |off: usize| -> BufferHeader {
            let mut h = [0u8; BUFFER_HEADER_SIZE];
            match file {
                Some(f) if super::mmap::read_at(f, off as u64, &mut h).is_ok() => {}
                _ => h.copy_from_slice(&d[off..off + BUFFER_HEADER_SIZE]),
            }
            BufferHeader::parse(&h).expect("72 bytes")
        };
        let first = BufferHeader::parse(d).ok_or_else(|| EtlError::NotEtl {
            path: path.clone(),
            reason: format!(
                "{} bytes is shorter than one 72-byte buffer header",
                d.len()
            ),
        })?;
        if !first.plausible(MAX_BUFFER_SIZE) {
            return Err(EtlError::NotEtl {
                path,
                reason: format!(
                    "no WMI_BUFFER_HEADER at offset 0 (BufferSize {}, valid length {}, flags 0x{:x}, type {})",
                    first.buffer_size,
                    first.valid_length(),
                    first.flags,
                    first.buffer_type
                ),
            });
        }
        let mut chain_issues = Vec::new();
        let mut buffers = Vec::new();
        let mut chain_bad_buffers = 0;
        let mut off = 0usize;
        while off < d.len() {
            if d.len() - off < BUFFER_HEADER_SIZE {
                chain_issues.push(ReadIssue {
                    file_offset: off as u64,
                    buffer_index: None,
                    record_offset: None,
                    reason: format!(
                        "{} trailing bytes are shorter than a buffer header",
                        d.len() - off
                    ),
                });
                break;
            }
            let h = header_at(off);
            if !h.plausible(MAX_BUFFER_SIZE) {
                chain_bad_buffers += 1;
                // Buffers written whole (uncompressed) sit at multiples of the logger's buffer
                // size: look there first. A byte-by-byte scan alone takes record bytes that look
                // like a chain of headers (heap events do) and loses the real buffers after them.
                let step = first.buffer_size as usize;
                let aligned = step > BUFFER_HEADER_SIZE
                    && buffers.iter().all(|b: &BufferInfo| {
                        b.file_offset as usize % step == 0 && !b.header.is_compressed()
                    });
                let last = d.len() - BUFFER_HEADER_SIZE;
                let resync = aligned
                    .then(|| {
                        (off / step + 1)
                            .checked_mul(step)
                            .filter(|&o| o <= last)
                            .and_then(|o| (o..=last).step_by(step).find(|&o| chains_at(d, o)))
                    })
                    .flatten()
                    .or_else(|| (off + 1..=last).find(|&o| chains_at(d, o)));
                chain_issues.push(ReadIssue {
                    file_offset: off as u64,
                    buffer_index: None,
                    record_offset: None,
                    reason: match resync {
                        Some(n) => format!("corrupt buffer header (BufferSize {}, flags 0x{:x}); resumed at the next buffer found, offset {n}", h.buffer_size, h.flags),
                        None => format!("corrupt buffer header (BufferSize {}, flags 0x{:x}); no further buffer found", h.buffer_size, h.flags),
                    },
                });
                match resync {
                    Some(n) => {
                        off = n;
                        continue;
                    }
                    None => break,
                }
            }
            let end = off + h.buffer_size as usize;
            let truncated = end > d.len();
            buffers.push(BufferInfo {
                index: buffers.len(),
                file_offset: off as u64,
                header: h,
                truncated,
            });
            if truncated {
                chain_issues.push(ReadIssue {
                    file_offset: off as u64,
                    buffer_index: Some(buffers.len() - 1),
                    record_offset: None,
                    reason: format!(
                        "file ends inside this buffer: {} of {} bytes present",
                        d.len() - off,
                        h.buffer_size
                    ),
                });
                break;
            }
            off = end;
        }
        let mut f = EtlFile {
            data,
            file: None,
            path,
            header: default_header(),
            header_error: None,
            header_damage: Vec::new(),
            header_damage_issue: None,
            clock_damaged: false,
            clock: Clock::IDENTITY,
            buffers,
            chain_issues,
            chain_bad_buffers,
            missing_buffers: 0,
            time_order: std::sync::OnceLock::new(),
        };
        f.read_logfile_header();
        // A file that holds fewer buffers than the logger wrote (a copy stopped early, a disk that
        // filled up): cut at a buffer boundary (every buffer present whole) or inside its last
        // buffer (counted as held; its own issue says how much of it is there), the buffers the
        // logger wrote after it are missing either way. A damaged header's BuffersWritten is not
        // believed. A buffer whose header is corrupt is held too (unreadable, and said so); it was
        // also counted missing, so one damaged buffer read as two losses.
        let held = f.buffers_held();
        let written = f.header.buffers_written as usize;
        if f.header_error.is_none() && f.header_damage_issue.is_none() && written > held {
            f.missing_buffers = written - held;
            f.chain_issues.push(ReadIssue {
                file_offset: f.data.len() as u64,
                buffer_index: None,
                record_offset: None,
                reason: format!("file holds {held} of the {written} buffers the logger wrote"),
            });
        }
        // Touching each buffer header faulted whole regions in (fault-around); give them back so a
        // walk keeps only the buffers in flight resident.
        if let Data::Map(m) = &f.data {
            super::mmap::release(m, 0, m.len());
        }
        Ok(f)
    }

    fn read_logfile_header(&mut self) {
        let Some(first) = self.buffers.first().cloned() else {
            self.header_error = Some("no buffer".into());
            return;
        };
        let ctx = BufferContext {
            cpu: 0,
            proc_index: false,
            clock: Clock::IDENTITY,
            logger_pointer_size: 8,
        };
        let result = match self.buffer_data(&first) {
            Ok(data) => match record::parse(&data, BUFFER_HEADER_SIZE, &ctx, 0) {
                Ok(Next::Record(ev, _, _))
                    if ev.header_type.is_kernel() && ev.hook_id == Some(0) =>
                {
                    let ps = ev.header_type.pointer_size().unwrap_or(8);
                    LogfileHeader::parse(&ev.payload, ps)
                        .map(|h| (h, ev.raw_timestamp))
                        .map_err(|e| e.to_string())
                }
                Ok(Next::Record(ev, _, _)) => Err(format!(
                    "first record is {} hook {:?}, not the logfile header",
                    ev.header_type, ev.hook_id
                )),
                Ok(Next::End) => Err("first buffer holds no record".into()),
                Err(e) => Err(e.to_string()),
            },
            Err(e) => Err(e),
        };
        match result {
            Ok((h, t0)) => {
                let damaged = h.damaged_fields();
                let clock_sound = h.clock_sound(&damaged, t0);
                let mut named: Vec<String> = damaged.iter().map(|d| d.to_string()).collect();
                if !clock_sound && damaged.is_empty() {
                    named.push(format!("clock base (the header record's timestamp) {t0}"));
                }
                if !named.is_empty() {
                    self.header_damage_issue = Some(format!(
                        "logfile header damaged ({}): its fields are not used{}",
                        named.join(", "),
                        if clock_sound {
                            ""
                        } else {
                            "; timestamps are shown raw"
                        }
                    ));
                }
                self.clock = if clock_sound {
                    h.clock(t0)
                } else {
                    Clock::IDENTITY
                };
                self.clock_damaged = !clock_sound;
                self.header_damage = damaged;
                self.header = h;
            }
            Err(e) => {
                self.header_error = Some(format!(
                    "logfile header unreadable ({e}); timestamps are shown raw"
                ))
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// File size in bytes.
    pub fn len(&self) -> u64 {
        self.data.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    pub fn header(&self) -> &LogfileHeader {
        &self.header
    }

    /// Why the logfile header could not be read, if it could not (defaults are used then).
    pub fn header_error(&self) -> Option<&str> {
        self.header_error.as_deref()
    }

    /// The logfile-header fields that hold values no logger writes (empty for a sound header):
    /// they are not used, and `info` shows them as unknown.
    pub fn header_damage(&self) -> &[DamagedField] {
        &self.header_damage
    }

    /// The issue naming the header's damage, when it is damaged.
    pub fn header_damage_issue(&self) -> Option<&str> {
        self.header_damage_issue.as_deref()
    }

    /// Whether the clock's own fields (start time, frequency, the header record's timestamp) are
    /// damaged or unreadable: [`EtlFile::clock`] then shows timestamps raw.
    pub fn clock_damaged(&self) -> bool {
        self.clock_damaged || self.header_error.is_some()
    }

    pub fn clock(&self) -> Clock {
        self.clock
    }

    pub fn buffers(&self) -> &[BufferInfo] {
        &self.buffers
    }

    /// Whether the file is whole and its logger stopped cleanly: the logfile header is readable and
    /// has its EndTime, no buffer is cut short or has a corrupt header and none the logger wrote is
    /// missing.
    pub fn closed_cleanly(&self) -> bool {
        self.header_error.is_none()
            && self.header_damage_issue.is_none()
            && self.header.closed_cleanly()
            && self.missing_buffers == 0
            && self.chain_bad_buffers == 0
            && !self.buffers.iter().any(|b| b.truncated)
    }

    /// Buffers the logger wrote (the header's BuffersWritten) that are not in the file.
    pub fn missing_buffers(&self) -> usize {
        self.missing_buffers
    }

    /// Buffers in the file whose header is corrupt: held, unreadable (each named in
    /// [`EtlFile::chain_issues`]), and not among the [`EtlFile::missing_buffers`].
    pub fn corrupt_buffers(&self) -> u64 {
        self.chain_bad_buffers
    }

    /// Buffers the file holds: those read and those whose header is corrupt. The logger wrote
    /// these plus the [`EtlFile::missing_buffers`].
    pub fn buffers_held(&self) -> usize {
        self.buffers.len() + self.chain_bad_buffers as usize
    }

    /// Issues found while walking the buffer chain (corrupt headers, truncation).
    pub fn chain_issues(&self) -> &[ReadIssue] {
        &self.chain_issues
    }

    fn context(&self, b: &BufferInfo) -> BufferContext {
        BufferContext {
            cpu: b.header.cpu(),
            proc_index: b.header.flags & super::buffer::flag::PROC_INDEX != 0,
            clock: self.clock,
            logger_pointer_size: self.header.logger_pointer_size(),
        }
    }

    /// The valid bytes of a buffer, header included (so record offsets match on-disk offsets of
    /// uncompressed buffers), decompressed when needed. Errors describe why the buffer is unusable;
    /// a partially present buffer yields what is there.
    pub fn buffer_data(&self, b: &BufferInfo) -> Result<Cow<'_, [u8]>, String> {
        let d: &[u8] = &self.data;
        let start = b.file_offset as usize;
        let avail = d.len() - start;
        if b.header.is_compressed() {
            let disk = (b.header.buffer_size as usize).min(avail);
            let want = b.header.saved_offset as usize - BUFFER_HEADER_SIZE;
            let mut out = Vec::with_capacity(BUFFER_HEADER_SIZE + want);
            out.extend_from_slice(&d[start..start + BUFFER_HEADER_SIZE]);
            let mut body = Vec::new();
            match compression::decompress_into(
                &d[start + BUFFER_HEADER_SIZE..start + disk],
                want,
                &mut body,
            ) {
                Ok(()) => {
                    out.extend_from_slice(&body);
                    Ok(Cow::Owned(out))
                }
                Err(e) if b.truncated => {
                    out.extend_from_slice(&body);
                    let _ = e;
                    Ok(Cow::Owned(out))
                }
                Err(e) => Err(format!("compressed buffer does not inflate: {e}")),
            }
        } else {
            let len = (b.header.valid_length() as usize).min(avail);
            Ok(Cow::Borrowed(&d[start..start + len]))
        }
    }

    /// [`EtlFile::buffer_data`], counting the buffer (read, compressed, truncated) in `summary`; an
    /// unusable buffer is counted bad, described in `summary`, and gives `None`.
    pub(super) fn load_buffer(
        &self,
        b: &BufferInfo,
        summary: &mut ReadSummary,
    ) -> Option<Cow<'_, [u8]>> {
        count_buffer(b, summary);
        match self.buffer_data(b) {
            Ok(data) => Some(data),
            Err(reason) => {
                bad_buffer(b, summary, reason);
                None
            }
        }
    }

    /// As [`EtlFile::load_buffer`], into space reused from buffer to buffer: a mapped file's
    /// buffer comes through a positioned read, so the walk touches no page of the map (nothing to
    /// release, no other thread's TLB entries to shoot down); a compressed one is inflated into
    /// `space`.
    pub(super) fn read_buffer<'s>(
        &'s self,
        b: &BufferInfo,
        space: &'s mut BufferSpace,
        summary: &mut ReadSummary,
    ) -> Option<&'s [u8]> {
        let Some(file) = &self.file else {
            return match self.load_buffer(b, summary)? {
                Cow::Borrowed(d) => Some(d),
                Cow::Owned(v) => {
                    space.data = v;
                    Some(&space.data)
                }
            };
        };
        count_buffer(b, summary);
        let d: &[u8] = &self.data;
        let start = b.file_offset as usize;
        let avail = d.len() - start;
        let read = |to: &mut Vec<u8>, len: usize| {
            if to.len() < len {
                to.resize(len, 0);
            }
            if super::mmap::read_at(file, start as u64, &mut to[..len]).is_err() {
                // Not expected for a file we hold open; the map has the same bytes.
                to[..len].copy_from_slice(&d[start..start + len]);
                self.release(b);
            }
        };
        if !b.header.is_compressed() {
            let len = (b.header.valid_length() as usize).min(avail);
            read(&mut space.data, len);
            return Some(&space.data[..len]);
        }
        // As `buffer_data`: the header, then the inflated body.
        let disk = (b.header.buffer_size as usize).min(avail);
        let want = b.header.saved_offset as usize - BUFFER_HEADER_SIZE;
        read(&mut space.disk, disk);
        let inflated = compression::decompress_into(
            &space.disk[BUFFER_HEADER_SIZE..disk],
            want,
            &mut space.body,
        );
        if let Err(e) = inflated {
            if !b.truncated {
                bad_buffer(
                    b,
                    summary,
                    format!("compressed buffer does not inflate: {e}"),
                );
                return None;
            }
        }
        space.data.clear();
        space
            .data
            .extend_from_slice(&space.disk[..BUFFER_HEADER_SIZE]);
        space.data.extend_from_slice(&space.body);
        Some(&space.data)
    }

    /// Notes the first timestamp of buffer `b` (its data as read, when readable) for
    /// [`EtlFile::time_order`]: what `first_timestamp` reads, without reading it again.
    pub(super) fn note_first_timestamp(
        &self,
        b: &BufferInfo,
        data: Option<&[u8]>,
        to: &FirstTimestamps,
    ) {
        let t = match data {
            Some(d) if !b.header.is_compressed() => {
                record::raw_timestamp_at(&d[..d.len().min(1024)], BUFFER_HEADER_SIZE)
            }
            _ => self.first_timestamp(b),
        };
        to.0[b.index].store(t.unwrap_or(i64::MIN), std::sync::atomic::Ordering::Relaxed);
    }

    /// Keeps the time order of the first timestamps noted for every buffer.
    pub(super) fn keep_time_order(&self, noted: FirstTimestamps) {
        let mut order: Vec<(i64, usize)> = noted
            .0
            .into_iter()
            .enumerate()
            .map(|(i, t)| (t.into_inner(), i))
            .collect();
        order.sort();
        let _ = self.time_order.set(order);
    }

    /// Walks the records of one buffer's data (as returned by [`EtlFile::buffer_data`]).
    pub fn walk_buffer<'d>(
        &self,
        b: &BufferInfo,
        data: &'d [u8],
        summary: &mut ReadSummary,
        f: &mut dyn FnMut(&Record<'d>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let ctx = self.context(b);
        let mut pos = BUFFER_HEADER_SIZE;
        let mut prev_ts = b.header.timestamp;
        loop {
            match record::parse(data, pos, &ctx, prev_ts) {
                Ok(Next::End) => break,
                Ok(Next::Record(event, size, next)) => {
                    prev_ts = event.raw_timestamp;
                    summary.records += 1;
                    let rec = Record {
                        event,
                        raw: &data[pos..pos + size],
                        buffer_index: b.index,
                        offset: pos,
                    };
                    f(&rec)?;
                    pos = next;
                }
                Err(e) => {
                    summary.bad_record(b, pos, data.len(), e);
                    break;
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// Drops the pages of a buffer we are done with from this process's resident set (mapped files).
    pub(super) fn release(&self, b: &BufferInfo) {
        if let Data::Map(m) = &self.data {
            super::mmap::release(m, b.file_offset as usize, b.header.buffer_size as usize);
        }
    }

    pub(super) fn start_summary(&self) -> ReadSummary {
        let mut s = ReadSummary {
            bad_buffers: self.chain_bad_buffers,
            ..Default::default()
        };
        for i in &self.chain_issues {
            s.issue(i.clone());
        }
        if let Some(e) = &self.header_error {
            s.issue(ReadIssue {
                file_offset: 0,
                buffer_index: Some(0),
                record_offset: None,
                reason: e.clone(),
            });
        }
        if let Some(e) = &self.header_damage_issue {
            s.issue(ReadIssue {
                file_offset: 0,
                buffer_index: Some(0),
                record_offset: Some(BUFFER_HEADER_SIZE),
                reason: e.clone(),
            });
        }
        s
    }

    fn visit_one(
        &self,
        b: &BufferInfo,
        space: &mut BufferSpace,
        summary: &mut ReadSummary,
        f: &mut dyn FnMut(&Record<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        match self.read_buffer(b, space, summary) {
            Some(data) => self.walk_buffer(b, data, summary, &mut |r| f(r)),
            None => ControlFlow::Continue(()),
        }
    }

    /// Calls `f` for every record, in the given order, until it returns `Break`. Buffers and records
    /// that cannot be read are counted and described in the summary; the walk goes on past them.
    pub fn for_each(
        &self,
        order: Order,
        mut f: impl FnMut(&Record<'_>) -> ControlFlow<()>,
    ) -> ReadSummary {
        self.for_each_progress(order, &mut |_| {}, &mut f)
    }

    /// As [`EtlFile::for_each`], calling `progress(bytes_done)` after each buffer.
    pub fn for_each_progress(
        &self,
        order: Order,
        progress: &mut dyn FnMut(u64),
        f: &mut dyn FnMut(&Record<'_>) -> ControlFlow<()>,
    ) -> ReadSummary {
        let mut summary = self.start_summary();
        match order {
            Order::File => {
                let mut space = BufferSpace::default();
                for b in &self.buffers {
                    let flow = self.visit_one(b, &mut space, &mut summary, f);
                    if flow.is_break() {
                        break;
                    }
                    progress(b.file_offset + b.header.buffer_size as u64);
                }
            }
            Order::Time => self.merge_by_time(&mut summary, progress, f),
        }
        summary
    }

    /// Folds every buffer in parallel (rayon), then reduces: whole-file work such as statistics.
    /// `fold` sees the records of one buffer in order.
    pub fn par_fold<A, I, F, R>(&self, init: I, fold: F, reduce: R) -> (A, ReadSummary)
    where
        A: Send,
        I: Fn() -> A + Sync + Send,
        F: Fn(&mut A, &Record<'_>) + Sync + Send,
        R: Fn(A, A) -> A + Sync + Send,
    {
        let start = self.start_summary();
        let noted = FirstTimestamps::new(self.buffers.len());
        let (acc, s) = self
            .buffers
            .par_iter()
            .map_init(BufferSpace::default, |space, b| {
                let mut acc = init();
                let mut s = ReadSummary::default();
                let data = self.read_buffer(b, space, &mut s);
                self.note_first_timestamp(b, data, &noted);
                if let Some(data) = data {
                    let _ = self.walk_buffer(b, data, &mut s, &mut |r| {
                        fold(&mut acc, r);
                        ControlFlow::Continue(())
                    });
                }
                (acc, s)
            })
            .reduce(
                || (init(), ReadSummary::default()),
                |(a1, s1), (a2, s2)| (reduce(a1, a2), s1.merge(s2)),
            );
        self.keep_time_order(noted);
        let mut s = start.merge(s);
        // par_iter reduction order is not file order: sort issues back.
        s.issues.sort_by_key(|i| (i.file_offset, i.record_offset));
        (acc, s)
    }

    /// Walks every buffer in parallel (rayon); `f` sees the records of one buffer in order and
    /// fills that buffer's result. Returns the results in buffer order.
    pub fn par_map_buffers<T, F>(&self, f: F) -> (Vec<T>, ReadSummary)
    where
        T: Default + Send,
        F: Fn(&mut T, &Record<'_>) + Sync + Send,
    {
        self.par_map_buffers_where(|_| true, f)
    }

    /// As [`EtlFile::par_map_buffers`], for a pass that wants few records: a record whose
    /// [`record::Head`] `wanted` refuses is counted and passed over without being built (records
    /// that [`record::head`] cannot read so are built and handed to `f` whatever `wanted` says).
    /// The walk meets the same records and the same errors as a full walk.
    pub fn par_map_buffers_where<T, W, F>(&self, wanted: W, f: F) -> (Vec<T>, ReadSummary)
    where
        T: Default + Send,
        W: Fn(&record::Head) -> bool + Sync + Send,
        F: Fn(&mut T, &Record<'_>) + Sync + Send,
    {
        let noted = FirstTimestamps::new(self.buffers.len());
        let (results, summaries): (Vec<T>, Vec<ReadSummary>) = self
            .buffers
            .par_iter()
            .map_init(BufferSpace::default, |space, b| {
                let mut t = T::default();
                let mut s = ReadSummary::default();
                let data = self.read_buffer(b, space, &mut s);
                self.note_first_timestamp(b, data, &noted);
                if let Some(data) = data {
                    self.walk_buffer_where(b, data, &mut s, &wanted, &mut |r| f(&mut t, r));
                }
                (t, s)
            })
            .unzip();
        self.keep_time_order(noted);
        let s = summaries
            .into_iter()
            .fold(self.start_summary(), ReadSummary::merge);
        (results, s)
    }

    /// [`EtlFile::walk_buffer`], passing over the records whose head `wanted` refuses.
    /// (Generic in `wanted`: it is asked about every record, and inlined costs little.)
    fn walk_buffer_where<'d, W: Fn(&record::Head) -> bool>(
        &self,
        b: &BufferInfo,
        data: &'d [u8],
        summary: &mut ReadSummary,
        wanted: &W,
        f: &mut dyn FnMut(&Record<'d>),
    ) {
        let ctx = self.context(b);
        let mut pos = BUFFER_HEADER_SIZE;
        let mut prev_ts = b.header.timestamp;
        loop {
            if let Ok(Some((ht, size))) = record::peek(data, pos) {
                if let Some(h) = record::head(data, pos, ht, size) {
                    if !wanted(&h) {
                        summary.records += 1;
                        prev_ts = h.raw_timestamp;
                        pos += crate::event::align8(size);
                        continue;
                    }
                }
            }
            match record::parse(data, pos, &ctx, prev_ts) {
                Ok(Next::End) => break,
                Ok(Next::Record(event, size, next)) => {
                    prev_ts = event.raw_timestamp;
                    summary.records += 1;
                    f(&Record {
                        event,
                        raw: &data[pos..pos + size],
                        buffer_index: b.index,
                        offset: pos,
                    });
                    pos = next;
                }
                Err(e) => {
                    summary.bad_record(b, pos, data.len(), e);
                    break;
                }
            }
        }
    }

    /// The raw timestamp of the first record of a buffer (records never go back in time within a
    /// buffer), for ordering buffers in the time merge. Decompresses only a prefix.
    fn first_timestamp(&self, b: &BufferInfo) -> Option<i64> {
        let d: &[u8] = &self.data;
        let start = b.file_offset as usize;
        let end = if b.header.is_compressed() {
            (start + b.header.buffer_size as usize).min(d.len())
        } else {
            (start + b.header.valid_length() as usize).min(d.len())
        };
        // The first 1 KiB holds the first record (or enough LZ77 input to inflate it). Read it through
        // the file, not the map, so the prescan does not make every buffer resident.
        let want = (end - start).min(1024);
        let mut raw = vec![0u8; want];
        match &self.file {
            Some(file) if super::mmap::read_at(file, start as u64, &mut raw).is_ok() => {}
            _ => raw.copy_from_slice(&d[start..start + want]),
        }
        let prefix: Vec<u8> = if b.header.is_compressed() {
            let mut v = raw[..BUFFER_HEADER_SIZE].to_vec();
            v.extend(compression::decompress_prefix(
                &raw[BUFFER_HEADER_SIZE..],
                512,
            ));
            v
        } else {
            raw
        };
        record::raw_timestamp_at(&prefix, BUFFER_HEADER_SIZE)
    }

    /// Buffers as the time merge admits them: (raw timestamp of the first record, buffer index),
    /// sorted.
    pub(super) fn time_order(&self) -> Vec<(i64, usize)> {
        if let Some(order) = self.time_order.get() {
            return order.clone();
        }
        let mut order: Vec<(i64, usize)> = self
            .buffers
            .par_iter()
            .map(|b| (self.first_timestamp(b).unwrap_or(i64::MIN), b.index))
            .collect();
        order.sort();
        if let Data::Map(m) = &self.data {
            super::mmap::release(m, 0, m.len());
        }
        order
    }

    fn merge_by_time(
        &self,
        summary: &mut ReadSummary,
        progress: &mut dyn FnMut(u64),
        f: &mut dyn FnMut(&Record<'_>) -> ControlFlow<()>,
    ) {
        // Buffers sorted by their first timestamp; a buffer joins the merge once the merge reaches
        // that time, so only overlapping buffers (about one per CPU) are held at once.
        let order = self.time_order();
        struct Cursor<'f> {
            info: &'f BufferInfo,
            data: Cow<'f, [u8]>,
            pos: usize,
            prev_ts: i64,
        }
        let mut cursors: Vec<Option<Cursor<'_>>> = Vec::new();
        // Heap of (timestamp, buffer order, position, cursor slot).
        let mut heap: BinaryHeap<Reverse<(i64, usize, usize, usize)>> = BinaryHeap::new();
        let mut next = 0usize;
        let mut done_bytes = 0u64;
        let peek_ts = |c: &Cursor<'_>, summary: &mut ReadSummary| -> Option<i64> {
            let ctx = self.context(c.info);
            match record::parse(&c.data, c.pos, &ctx, c.prev_ts) {
                Ok(Next::Record(ev, _, _)) => Some(ev.raw_timestamp),
                Ok(Next::End) => None,
                Err(e) => {
                    summary.bad_record(c.info, c.pos, c.data.len(), e);
                    None
                }
            }
        };
        loop {
            while next < order.len()
                && heap
                    .peek()
                    .is_none_or(|Reverse((t, ..))| order[next].0 <= *t)
            {
                let b = &self.buffers[order[next].1];
                let seq = next;
                next += 1;
                if let Some(data) = self.load_buffer(b, summary) {
                    let c = Cursor {
                        info: b,
                        data,
                        pos: BUFFER_HEADER_SIZE,
                        prev_ts: b.header.timestamp,
                    };
                    if let Some(t) = peek_ts(&c, summary) {
                        heap.push(Reverse((t, seq, c.pos, cursors.len())));
                        cursors.push(Some(c));
                    } else {
                        done_bytes += b.header.buffer_size as u64;
                    }
                }
            }
            let Some(Reverse((_, seq, _, slot))) = heap.pop() else {
                break;
            };
            let c = cursors[slot].as_mut().expect("cursor in heap");
            let ctx = self.context(c.info);
            let (after, ts) = match record::parse(&c.data, c.pos, &ctx, c.prev_ts) {
                Ok(Next::Record(event, size, after)) => {
                    summary.records += 1;
                    let ts = event.raw_timestamp;
                    let rec = Record {
                        event,
                        raw: &c.data[c.pos..c.pos + size],
                        buffer_index: c.info.index,
                        offset: c.pos,
                    };
                    if f(&rec).is_break() {
                        return;
                    }
                    (after, ts)
                }
                _ => unreachable!("peeked record parses again"),
            };
            c.pos = after;
            c.prev_ts = ts;
            match peek_ts(c, summary) {
                Some(t) => heap.push(Reverse((t, seq, c.pos, slot))),
                None => {
                    done_bytes += c.info.header.buffer_size as u64;
                    progress(done_bytes);
                    self.release(c.info);
                    cursors[slot] = None;
                }
            }
        }
    }
}

/// Reusable space for [`EtlFile::read_buffer`].
#[derive(Default)]
pub(super) struct BufferSpace {
    data: Vec<u8>,
    disk: Vec<u8>,
    body: Vec<u8>,
}

/// The first record's raw timestamp of every buffer, by buffer index, as a parallel walk notes them.
pub(super) struct FirstTimestamps(Vec<std::sync::atomic::AtomicI64>);

impl FirstTimestamps {
    pub(super) fn new(buffers: usize) -> Self {
        FirstTimestamps((0..buffers).map(|_| Default::default()).collect())
    }
}

fn count_buffer(b: &BufferInfo, summary: &mut ReadSummary) {
    summary.buffers += 1;
    if b.header.is_compressed() {
        summary.compressed_buffers += 1;
    }
    if b.truncated {
        summary.bad_buffers += 1;
    }
}

fn bad_buffer(b: &BufferInfo, summary: &mut ReadSummary, reason: String) {
    summary.bad_buffers += 1;
    summary.issue(ReadIssue {
        file_offset: b.file_offset,
        buffer_index: Some(b.index),
        record_offset: None,
        reason,
    });
}

/// Names of header types in the order `etwkit stats` lists them.
pub fn header_type_name(h: HeaderType) -> &'static str {
    h.name()
}
