//! Writing ETL files: the logfile header, per-CPU buffers with real WMI_BUFFER_HEADERs, EVENT_HEADER
//! records built from [`EventRecord`]s and a raw path that copies any on-disk record byte for byte.
//!
//! File shape (see `../shared/notes/etl-format.md` §1, §5, §9):
//! - buffer 0: type HEADER, FLUSH_MARKER, holding the SYSTEM32/64 HookId-0 record with
//!   TRACE_LOGFILE_HEADER and the logger and log file names;
//! - then data buffers, one stream per CPU (PROC_INDEX, ProcessorIndex = CPU), written whole as they
//!   fill: `SavedOffset = Offset = used bytes`, the rest 0xFF. Buffers written by a flush or at close
//!   carry FLUSH_MARKER.
//!
//! Durability: the header buffer is written (and synced) when the writer is created, with
//! `EndTime = 0` and `BuffersWritten = 0`. Whole buffers follow as they fill and at [`Writer::flush`]
//! (which syncs). [`Writer::finish`] writes what is left, then fills in EndTime, BuffersWritten,
//! EventsLost, BuffersLost and NumberOfProcessors. A writer killed before that leaves a file the
//! reader reads up to its last whole buffer, and whose header says it was not closed cleanly
//! ([`closed_cleanly`]).
//!
//! ```
//! use etwkit::etl::writer::{Writer, WriterOptions};
//! use etwkit::tlg::{self, InType, OutType, TlInstance, TlPayload, TlSchemaBuilder};
//!
//! let schema = TlSchemaBuilder::new("Etwkit-Example", "Hello")
//!     .field("n", InType::U32, OutType::Default)
//!     .build()?;
//! let start = 133_000_000_000_000_000; // FILETIME
//! let mut w = Writer::in_memory(WriterOptions::new(start))?; // Writer::create(path, ..) for a file
//! let mut p = TlPayload::new();
//! p.push_u32(7);
//! let inst = TlInstance { pid: 1, tid: 2, cpu: 0, timestamp: start + 10, ..Default::default() };
//! w.write_event(&tlg::event_record(&schema, &inst, p))?;
//! let (summary, bytes) = w.finish_into_inner()?;
//! assert_eq!(summary.records, 1);
//! let f = etwkit::etl::EtlFile::from_vec(bytes)?;
//! assert!(etwkit::etl::writer::closed_cleanly(f.header()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fs::File;
use std::io::{self, Cursor, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::event::{align8, flags, EventRecord, ExtItems, HeaderType};
use crate::time::{Clock, ClockType, FILETIME_UNIX_EPOCH};

use super::buffer::{buffer_type, flag, BUFFER_HEADER_SIZE};
use super::logfile_header::{log_file_mode, LogfileHeader};
use super::record;

/// Default buffer size: 64 KiB, as ETW uses by default.
pub const DEFAULT_BUFFER_SIZE: u32 = 64 * 1024;

/// Largest CPU index a buffer header can carry (ProcessorIndex & 0x7FF).
pub const MAX_CPU: u16 = 0x07FF;

/// Size of the EVENT_HEADER that starts every record [`Writer::write_event`] writes.
const EVENT_HEADER_SIZE: usize = 0x50;

/// Flags the consumer API synthesizes; they are never written to disk.
const SYNTHESIZED_FLAGS: u16 = flags::TRACE_MESSAGE
    | flags::HEADER_32_BIT
    | flags::HEADER_64_BIT
    | flags::CLASSIC_HEADER
    | flags::PROCESSOR_INDEX;

/// Where a file written by this module says whether it was closed: `EndTime` and `BuffersWritten`
/// stay 0 until [`Writer::finish`] fills them in. Windows loggers fill both at stop as well, so a
/// file with either at 0 was not closed cleanly (its writer was killed or is still running).
pub fn closed_cleanly(h: &LogfileHeader) -> bool {
    h.end_time != 0 && h.buffers_written != 0
}

/// Why a file could not be written, or a record not added.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cannot write {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("invalid writer options: {0}")]
    Options(String),
    #[error(
        "record of {size} bytes does not fit a {buffer_size}-byte buffer (at most {max} bytes)"
    )]
    RecordTooLarge {
        size: usize,
        buffer_size: u32,
        max: usize,
    },
    #[error("EVENT_HEADER record would be {size} bytes; the 16-bit Size field allows 65,535")]
    EventTooLarge { size: usize },
    #[error("write_event writes EVENT_HEADER32/64 records; a {0} record goes through write_raw")]
    NotEventHeader(HeaderType),
    #[error("extended data is not a well-formed item chain ({len} bytes)")]
    BadExtendedData { len: usize },
    #[error("CPU {0} is beyond the 2,048 a buffer header can name")]
    CpuOutOfRange(u16),
    #[error("raw record rejected: {0}")]
    BadRecord(String),
    #[error("the writer failed earlier ({0}) and accepts nothing more")]
    Failed(String),
}

/// Where a writer puts its bytes: a file (synced on flush) or memory.
pub trait Output: Write + Seek {
    /// Makes written data durable.
    fn sync(&mut self) -> io::Result<()>;
}

impl Output for File {
    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }
}

impl Output for Cursor<Vec<u8>> {
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What goes into the logfile header, and how buffers are sized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriterOptions {
    /// Bytes per buffer, header included (a multiple of 512, at least 1 KiB).
    pub buffer_size: u32,
    pub logger_name: String,
    /// The name recorded in the header; `Writer::create` uses the path when empty.
    pub log_file_name: String,
    /// Logger pointer size, 4 or 8: picks the SYSTEM32/64 header layout and PointerSize.
    pub pointer_size: u8,
    /// Raised at close to the highest CPU written + 1.
    pub number_of_processors: u32,
    /// The clock record timestamps are written in. `clock.t0` becomes the header record's timestamp
    /// and `clock.start_time` StartTime; `clock.frequency` PerfFreq.
    pub clock: Clock,
    pub cpu_speed_mhz: u32,
    /// Major, Minor, Sub, SubMinor (the last two give the layout: 1.5).
    pub version: [u8; 4],
    /// OS build number.
    pub provider_version: u32,
    /// 100 ns units.
    pub timer_resolution: u32,
    pub maximum_file_size: u32,
    pub log_file_mode: u32,
    pub start_buffers: u32,
    pub bias_minutes: i32,
    pub time_zone_standard_name: String,
    pub time_zone_daylight_name: String,
    pub boot_time: i64,
    /// Process and thread recorded on the header record.
    pub pid: u32,
    pub tid: u32,
    /// Like ETW's FlushTimer: when set, a write that comes this long after the last flush flushes
    /// (partial buffers written, file synced); [`Writer::flush_if_due`] does the same when idle.
    pub flush_interval: Option<std::time::Duration>,
}

/// The current time as a FILETIME.
pub fn now_filetime() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    FILETIME_UNIX_EPOCH + (d.as_nanos() / 100) as i64
}

/// This machine's CPU speed in MHz (Linux: `/proc/cpuinfo`), or 1000 when unknown. Readers such as
/// dissect.etl divide by the header's CpuSpeedInMHz whatever the clock type, so it is never 0.
pub fn cpu_speed_mhz() -> u32 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .map(|m| m.round() as u32)
        .filter(|&m| m > 0)
        .unwrap_or(1000)
}

impl WriterOptions {
    /// A session starting at `start_time` (FILETIME), timestamps written as FILETIMEs (clock type 2).
    pub fn new(start_time: i64) -> WriterOptions {
        WriterOptions {
            buffer_size: DEFAULT_BUFFER_SIZE,
            logger_name: "etwkit".into(),
            log_file_name: String::new(),
            pointer_size: 8,
            number_of_processors: std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1),
            clock: Clock {
                clock_type: ClockType::SystemTime,
                t0: start_time,
                start_time,
                frequency: 10_000_000,
            },
            cpu_speed_mhz: cpu_speed_mhz(),
            version: [10, 0, 1, 5],
            provider_version: 0,
            timer_resolution: 156_250,
            maximum_file_size: 0,
            log_file_mode: log_file_mode::FILE_MODE_SEQUENTIAL,
            start_buffers: 0,
            bias_minutes: 0,
            time_zone_standard_name: String::new(),
            time_zone_daylight_name: String::new(),
            boot_time: 0,
            pid: std::process::id(),
            tid: 0,
            flush_interval: None,
        }
    }

    /// A session starting now.
    pub fn now() -> WriterOptions {
        WriterOptions::new(now_filetime())
    }

    /// The header of an input file, for relogging it: same clock (so records copy unchanged), pointer
    /// size, processors, version and time zone; relog mode, not compressed. Fields of `h` that
    /// hold values no logger writes ([`LogfileHeader::damaged_fields`]) are not copied.
    pub fn from_header(h: &LogfileHeader, clock: Clock) -> WriterOptions {
        let mut o = WriterOptions::new(clock.start_time);
        let damaged = h.damaged_fields();
        let sound = |f| !damaged.iter().any(|d| d.field == f);
        o.logger_name = h.logger_name.clone();
        o.pointer_size = h.logger_pointer_size();
        if sound(super::logfile_header::HeaderField::NumberOfProcessors) {
            o.number_of_processors = h.number_of_processors;
        }
        o.clock = clock;
        if sound(super::logfile_header::HeaderField::CpuSpeedMhz)
            && (h.cpu_speed_mhz != 0 || clock.clock_type == ClockType::CpuCycle)
        {
            o.cpu_speed_mhz = h.cpu_speed_mhz;
        }
        o.version = [h.version[0], h.version[1], 1, 5];
        o.provider_version = h.provider_version;
        o.timer_resolution = h.timer_resolution;
        o.log_file_mode =
            (h.log_file_mode & !log_file_mode::COMPRESSED_MODE) | log_file_mode::RELOG_MODE;
        if sound(super::logfile_header::HeaderField::TimeZoneBias) {
            o.bias_minutes = h.bias_minutes;
            o.time_zone_standard_name = h.time_zone_standard_name.clone();
            o.time_zone_daylight_name = h.time_zone_daylight_name.clone();
        }
        o.boot_time = h.boot_time;
        o
    }

    fn validate(&self) -> Result<(), WriteError> {
        let bs = self.buffer_size;
        // A multiple of 512, as every logger writes (readers take anything else for damage:
        // `LogfileHeader::damaged_fields`).
        if bs % 512 != 0 || !(1024..=super::reader::MAX_BUFFER_SIZE).contains(&bs) {
            return Err(WriteError::Options(format!(
                "buffer size {bs} must be a multiple of 512 between 1024 and {}",
                super::reader::MAX_BUFFER_SIZE
            )));
        }
        if self.pointer_size != 4 && self.pointer_size != 8 {
            return Err(WriteError::Options(format!(
                "pointer size {} is neither 4 nor 8",
                self.pointer_size
            )));
        }
        if self.clock.frequency <= 0 {
            return Err(WriteError::Options(format!(
                "clock frequency {} is not positive",
                self.clock.frequency
            )));
        }
        Ok(())
    }

    fn payload_layout(&self) -> (usize, usize, usize) {
        // (time zone offset, boot time offset, strings offset)
        if self.pointer_size == 8 {
            (0x48, 0xF8, 0x118)
        } else {
            (0x40, 0xF0, 0x110)
        }
    }
}

/// Counts of what a writer wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WriteSummary {
    pub records: u64,
    /// Buffers in the file, the header buffer included (= BuffersWritten).
    pub buffers: u32,
    pub bytes: u64,
    pub events_lost: u32,
    pub buffers_lost: u32,
    /// Records copied with their timestamp converted to the output clock.
    pub retimed: u64,
    /// Buffers closed early because a CPU's records went back in time (buffers never do).
    pub time_breaks: u64,
}

/// A buffer being filled for one CPU.
struct OpenBuffer {
    data: Vec<u8>,
    pos: usize,
    last_ts: i64,
}

/// The logfile header fields that change at close.
#[derive(Clone, Copy)]
struct Trailer {
    end_time: i64,
    buffers_written: u32,
    events_lost: u32,
    buffers_lost: u32,
    number_of_processors: u32,
}

/// Writes an ETL file. See the module documentation for the file shape and durability.
pub struct Writer<W: Output = File> {
    /// `None` only after `finish_at` moved it out.
    out: Option<W>,
    path: PathBuf,
    opts: WriterOptions,
    open: Vec<Option<OpenBuffer>>,
    spare: Vec<Vec<u8>>,
    sequence: u64,
    summary: WriteSummary,
    max_cpu: Option<u16>,
    last_utc: i64,
    header_payload_at: u64,
    failed: Option<String>,
    finished: bool,
    last_flush: std::time::Instant,
}

impl Writer<File> {
    /// Creates (truncates) `path` and writes the header buffer.
    pub fn create(
        path: impl AsRef<Path>,
        mut opts: WriterOptions,
    ) -> Result<Writer<File>, WriteError> {
        let path = path.as_ref().to_path_buf();
        opts.validate()?;
        let file = File::create(&path).map_err(|source| WriteError::Io {
            path: path.clone(),
            source,
        })?;
        if opts.log_file_name.is_empty() {
            opts.log_file_name = std::path::absolute(&path)
                .unwrap_or_else(|_| path.clone())
                .display()
                .to_string();
        }
        Writer::with_path(file, path, opts)
    }
}

impl Writer<Cursor<Vec<u8>>> {
    /// A writer into memory; [`Writer::finish_into_inner`] gives the bytes.
    pub fn in_memory(opts: WriterOptions) -> Result<Self, WriteError> {
        Writer::new(Cursor::new(Vec::new()), opts)
    }
}

impl<W: Output> Writer<W> {
    /// A writer over any output (positioned at its start); writes the header buffer.
    pub fn new(out: W, opts: WriterOptions) -> Result<Self, WriteError> {
        Writer::with_path(out, PathBuf::from("<output>"), opts)
    }

    fn with_path(out: W, path: PathBuf, opts: WriterOptions) -> Result<Self, WriteError> {
        opts.validate()?;
        let mut w = Writer {
            out: Some(out),
            path,
            opts,
            open: Vec::new(),
            spare: Vec::new(),
            sequence: 0,
            summary: WriteSummary::default(),
            max_cpu: None,
            last_utc: i64::MIN,
            header_payload_at: (BUFFER_HEADER_SIZE + 0x20) as u64,
            failed: None,
            finished: false,
            last_flush: std::time::Instant::now(),
        };
        let trailer = Trailer {
            end_time: 0,
            buffers_written: 0,
            events_lost: 0,
            buffers_lost: 0,
            number_of_processors: w.opts.number_of_processors,
        };
        let rec = w.header_record(trailer);
        let bs = w.opts.buffer_size as usize;
        if BUFFER_HEADER_SIZE + rec.len() > bs {
            return Err(WriteError::Options(format!(
                "the logfile header record ({} bytes) does not fit a {bs}-byte buffer",
                rec.len()
            )));
        }
        let mut buf = vec![0u8; bs];
        buf[BUFFER_HEADER_SIZE..BUFFER_HEADER_SIZE + rec.len()].copy_from_slice(&rec);
        let used = align8(BUFFER_HEADER_SIZE + rec.len());
        let t0 = w.opts.clock.t0;
        w.seal(
            &mut buf,
            used,
            0,
            t0,
            buffer_type::HEADER,
            flag::FLUSH_MARKER,
        );
        w.put(&buf)?;
        w.sync()?;
        Ok(w)
    }

    pub fn options(&self) -> &WriterOptions {
        &self.opts
    }

    /// The clock record timestamps are written in.
    pub fn clock(&self) -> &Clock {
        &self.opts.clock
    }

    pub fn summary(&self) -> &WriteSummary {
        &self.summary
    }

    fn io_err(&self, source: io::Error) -> WriteError {
        WriteError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn check_ok(&self) -> Result<(), WriteError> {
        match &self.failed {
            Some(e) => Err(WriteError::Failed(e.clone())),
            None => Ok(()),
        }
    }

    /// Appends bytes at the end of the output; a failure makes the writer refuse further work.
    fn output(&mut self) -> Result<&mut W, WriteError> {
        match self.out.as_mut() {
            Some(o) => Ok(o),
            None => Err(WriteError::Failed("the writer is finished".into())),
        }
    }

    fn put(&mut self, b: &[u8]) -> Result<(), WriteError> {
        match self.output()?.write_all(b) {
            Ok(()) => {
                self.summary.bytes += b.len() as u64;
                Ok(())
            }
            Err(e) => {
                self.failed = Some(e.to_string());
                Err(self.io_err(e))
            }
        }
    }

    fn sync(&mut self) -> Result<(), WriteError> {
        let out = self.output()?;
        if let Err(e) = out.flush().and_then(|_| out.sync()) {
            self.failed = Some(e.to_string());
            return Err(self.io_err(e));
        }
        Ok(())
    }

    /// The SYSTEM HookId-0 record: header, TRACE_LOGFILE_HEADER, logger name, log file name.
    fn header_record(&self, t: Trailer) -> Vec<u8> {
        let o = &self.opts;
        let (tz, boot, strings) = o.payload_layout();
        let mut p = vec![0u8; strings];
        let put32 =
            |p: &mut [u8], at: usize, v: u32| p[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let put64 =
            |p: &mut [u8], at: usize, v: i64| p[at..at + 8].copy_from_slice(&v.to_le_bytes());
        put32(&mut p, 0, o.buffer_size);
        p[4..8].copy_from_slice(&o.version);
        put32(&mut p, 8, o.provider_version);
        put32(&mut p, 0xC, t.number_of_processors);
        put64(&mut p, 0x10, t.end_time);
        put32(&mut p, 0x18, o.timer_resolution);
        put32(&mut p, 0x1C, o.maximum_file_size);
        put32(&mut p, 0x20, o.log_file_mode);
        put32(&mut p, 0x24, t.buffers_written);
        put32(&mut p, 0x28, o.start_buffers);
        put32(&mut p, 0x2C, o.pointer_size as u32);
        put32(&mut p, 0x30, t.events_lost);
        put32(&mut p, 0x34, o.cpu_speed_mhz);
        // LoggerName / LogFileName pointers stay 0. TIME_ZONE_INFORMATION: Bias, StandardName[32] at +4,
        // DaylightName[32] at +0x58.
        put32(&mut p, tz, o.bias_minutes as u32);
        for (at, name) in [
            (tz + 4, &o.time_zone_standard_name),
            (tz + 0x58, &o.time_zone_daylight_name),
        ] {
            for (i, u) in name.encode_utf16().take(31).enumerate() {
                p[at + 2 * i..at + 2 * i + 2].copy_from_slice(&u.to_le_bytes());
            }
        }
        put64(&mut p, boot, o.boot_time);
        put64(&mut p, boot + 8, o.clock.frequency);
        put64(&mut p, boot + 0x10, o.clock.start_time);
        put32(&mut p, boot + 0x18, o.clock.clock_type.to_u32());
        put32(&mut p, boot + 0x1C, t.buffers_lost);
        // Names are cut so the record stays within its 16-bit size.
        for name in [&o.logger_name, &o.log_file_name] {
            for u in name.encode_utf16().take(4096) {
                p.extend_from_slice(&u.to_le_bytes());
            }
            p.extend_from_slice(&[0, 0]);
        }
        let size = 0x20 + p.len();
        let mut r = Vec::with_capacity(size);
        r.extend_from_slice(&2u16.to_le_bytes());
        r.push(if o.pointer_size == 8 { 0x02 } else { 0x01 });
        r.push(0xC0);
        r.extend_from_slice(&(size as u16).to_le_bytes());
        r.extend_from_slice(&0u16.to_le_bytes()); // HookId 0
        r.extend_from_slice(&o.tid.to_le_bytes());
        r.extend_from_slice(&o.pid.to_le_bytes());
        r.extend_from_slice(&o.clock.t0.to_le_bytes());
        r.extend_from_slice(&[0u8; 8]); // KernelTime, UserTime
        r.extend_from_slice(&p);
        r
    }

    /// Fills a buffer's WMI_BUFFER_HEADER and its 0xFF tail.
    fn seal(&mut self, buf: &mut [u8], used: usize, cpu: u16, ts: i64, btype: u16, bflags: u16) {
        let bs = buf.len() as u32;
        let h = &mut buf[..BUFFER_HEADER_SIZE];
        h.fill(0);
        h[0..4].copy_from_slice(&bs.to_le_bytes());
        h[4..8].copy_from_slice(&(used as u32).to_le_bytes());
        h[8..0xC].copy_from_slice(&(used as u32).to_le_bytes());
        h[0x10..0x18].copy_from_slice(&ts.to_le_bytes());
        h[0x18..0x20].copy_from_slice(&self.sequence.to_le_bytes());
        self.sequence += 1;
        let clock_bits =
            (self.opts.clock.frequency as u64) << 3 | self.opts.clock.clock_type.to_u32() as u64;
        h[0x20..0x28].copy_from_slice(&clock_bits.to_le_bytes());
        h[0x28..0x2A].copy_from_slice(&cpu.to_le_bytes());
        h[0x2A..0x2C].copy_from_slice(&1u16.to_le_bytes()); // LoggerId
        h[0x2C..0x30].copy_from_slice(&3u32.to_le_bytes()); // State: Flush
        h[0x30..0x34].copy_from_slice(&(used as u32).to_le_bytes());
        h[0x34..0x36].copy_from_slice(&(bflags | flag::PROC_INDEX).to_le_bytes());
        h[0x36..0x38].copy_from_slice(&btype.to_le_bytes());
        buf[used..].fill(0xFF);
        self.summary.buffers += 1;
    }

    /// Writes out the open buffer of `cpu` (if it holds records).
    fn emit(&mut self, cpu: u16, flush_marker: bool) -> Result<(), WriteError> {
        let Some(mut b) = self.open.get_mut(cpu as usize).and_then(Option::take) else {
            return Ok(());
        };
        if b.pos > BUFFER_HEADER_SIZE {
            let used = b.pos;
            let ts = b.last_ts;
            let fl = if flush_marker { flag::FLUSH_MARKER } else { 0 };
            self.seal(&mut b.data, used, cpu, ts, buffer_type::GENERIC, fl);
            let r = self.put(&b.data);
            self.spare.push(b.data);
            r
        } else {
            self.open[cpu as usize] = Some(b);
            Ok(())
        }
    }

    /// Room for a record of `size` bytes in `cpu`'s buffer, at raw time `ts`; returns the slice.
    fn reserve(&mut self, cpu: u16, size: usize, ts: Option<i64>) -> Result<&mut [u8], WriteError> {
        self.check_ok()?;
        if cpu > MAX_CPU {
            return Err(WriteError::CpuOutOfRange(cpu));
        }
        let bs = self.opts.buffer_size as usize;
        let max = bs - BUFFER_HEADER_SIZE;
        if size > max {
            return Err(WriteError::RecordTooLarge {
                size,
                buffer_size: self.opts.buffer_size,
                max,
            });
        }
        let c = cpu as usize;
        if self.open.len() <= c {
            self.open.resize_with(c + 1, || None);
        }
        self.max_cpu = Some(self.max_cpu.map_or(cpu, |m| m.max(cpu)));
        let (full, backwards) = match &self.open[c] {
            Some(b) => (
                b.pos + size > bs,
                ts.is_some_and(|t| t < b.last_ts) && b.pos > BUFFER_HEADER_SIZE,
            ),
            None => (false, false),
        };
        if full || backwards {
            if backwards {
                self.summary.time_breaks += 1;
            }
            self.emit(cpu, false)?;
        }
        if self.open[c].is_none() {
            let data = match self.spare.pop() {
                Some(d) => d,
                None => vec![0u8; bs],
            };
            self.open[c] = Some(OpenBuffer {
                data,
                pos: BUFFER_HEADER_SIZE,
                last_ts: ts.unwrap_or(i64::MIN),
            });
        }
        let b = self.open[c].as_mut().expect("just opened");
        let at = b.pos;
        if let Some(t) = ts {
            b.last_ts = b.last_ts.max(t);
        }
        b.pos = align8(at + size).min(bs);
        self.summary.records += 1;
        let slot = &mut b.data[at..b.pos];
        // Alignment gap bytes: zero.
        slot[size..].fill(0);
        Ok(&mut slot[..size])
    }

    fn note_time(&mut self, utc: i64) {
        if utc > self.last_utc {
            self.last_utc = utc;
        }
    }

    /// Writes an EVENT_HEADER32/64 record (its header type says which) from an [`EventRecord`]:
    /// `timestamp` (UTC) is converted to the output clock, `ext` is copied as the extended-data chain,
    /// the record goes to `cpu`'s buffer. Flags the consumer API synthesizes are not written;
    /// EXTENDED_INFO is set exactly when `ext` is not empty.
    pub fn write_event(&mut self, ev: &EventRecord<'_>) -> Result<(), WriteError> {
        let code: u8 = match ev.header_type {
            HeaderType::EventHeader32 => 0x12,
            HeaderType::EventHeader64 => 0x13,
            other => return Err(WriteError::NotEventHeader(other)),
        };
        let ext: &[u8] = &ev.ext;
        if !ext.is_empty() {
            let mut it = ExtItems::new(ext);
            for _ in it.by_ref() {}
            if it.malformed() || it.consumed() != ext.len() {
                return Err(WriteError::BadExtendedData { len: ext.len() });
            }
        }
        let size = EVENT_HEADER_SIZE + ext.len() + ev.payload.len();
        if size > 0xFFFF {
            return Err(WriteError::EventTooLarge { size });
        }
        let raw_ts = self.opts.clock.to_raw(ev.timestamp);
        let mut fl = ev.flags & !SYNTHESIZED_FLAGS & !flags::EXTENDED_INFO;
        if !ext.is_empty() {
            fl |= flags::EXTENDED_INFO;
        }
        let r = self.reserve(ev.cpu, size, Some(raw_ts))?;
        r[0..2].copy_from_slice(&(size as u16).to_le_bytes());
        r[2] = code;
        r[3] = 0xC0;
        r[4..6].copy_from_slice(&fl.to_le_bytes());
        r[6..8].fill(0); // EventProperty
        r[8..0xC].copy_from_slice(&ev.tid.to_le_bytes());
        r[0xC..0x10].copy_from_slice(&ev.pid.to_le_bytes());
        r[0x10..0x18].copy_from_slice(&raw_ts.to_le_bytes());
        r[0x18..0x28].copy_from_slice(&ev.provider.to_le_bytes());
        let d = &ev.descriptor;
        r[0x28..0x2A].copy_from_slice(&d.id.to_le_bytes());
        r[0x2A] = d.version;
        r[0x2B] = d.channel;
        r[0x2C] = d.level;
        r[0x2D] = d.opcode;
        r[0x2E..0x30].copy_from_slice(&d.task.to_le_bytes());
        r[0x30..0x38].copy_from_slice(&d.keywords.to_le_bytes());
        r[0x38..0x3C].copy_from_slice(&ev.kernel_time.to_le_bytes());
        r[0x3C..0x40].copy_from_slice(&ev.user_time.to_le_bytes());
        r[0x40..0x50].copy_from_slice(&ev.activity_id.to_le_bytes());
        r[0x50..0x50 + ext.len()].copy_from_slice(ext);
        r[0x50 + ext.len()..].copy_from_slice(&ev.payload);
        self.note_time(ev.timestamp);
        self.flush_if_due()
    }

    /// Copies one on-disk record (any header type) into `cpu`'s buffer byte for byte. `src` is the
    /// clock of the file it came from: when it differs from the output clock, only the timestamp is
    /// rewritten (converted through UTC).
    pub fn write_raw(&mut self, raw: &[u8], cpu: u16, src: &Clock) -> Result<(), WriteError> {
        let (ht, size) = match record::peek(raw, 0) {
            Ok(Some(x)) => x,
            Ok(None) => {
                return Err(WriteError::BadRecord(format!(
                    "{} bytes hold no record (padding or too short)",
                    raw.len()
                )))
            }
            Err(e) => return Err(WriteError::BadRecord(e.to_string())),
        };
        if size != raw.len() {
            return Err(WriteError::BadRecord(format!(
                "record says {size} bytes but {} were given",
                raw.len()
            )));
        }
        let ts_at = match ht {
            HeaderType::Message => record::message_fields(raw)
                .filter(|m| m.option_flags & 0x08 != 0)
                .and_then(|m| m.timestamp_offset),
            _ => record::timestamp_offset(ht),
        };
        let src_ts = ts_at.map(|o| i64::from_le_bytes(raw[o..o + 8].try_into().unwrap()));
        let same_clock = *src == self.opts.clock;
        let out_ts = src_ts.map(|t| {
            if same_clock {
                t
            } else {
                self.opts.clock.to_raw(src.to_filetime(t))
            }
        });
        let retimed = out_ts != src_ts;
        let slot = self.reserve(cpu, size, out_ts)?;
        slot.copy_from_slice(raw);
        if let (Some(o), Some(t)) = (ts_at, out_ts) {
            if retimed {
                slot[o..o + 8].copy_from_slice(&t.to_le_bytes());
            }
        }
        if retimed {
            self.summary.retimed += 1;
        }
        if let Some(t) = src_ts {
            self.note_time(src.to_filetime(t));
        }
        self.flush_if_due()
    }

    /// Flushes when the options' `flush_interval` has passed since the last flush (a no-op without
    /// one). Live sessions call it when idle, so quiet periods do not hold events back.
    pub fn flush_if_due(&mut self) -> Result<(), WriteError> {
        match self.opts.flush_interval {
            Some(iv) if self.last_flush.elapsed() >= iv => self.flush(),
            _ => Ok(()),
        }
    }

    /// Counts events the source lost (written to the header's EventsLost at close).
    pub fn add_events_lost(&mut self, n: u32) {
        self.summary.events_lost = self.summary.events_lost.saturating_add(n);
    }

    /// Counts buffers the source lost (BuffersLost at close).
    pub fn add_buffers_lost(&mut self, n: u32) {
        self.summary.buffers_lost = self.summary.buffers_lost.saturating_add(n);
    }

    /// Writes every partly filled buffer (with FLUSH_MARKER) and syncs the file: everything written so
    /// far survives a crash.
    pub fn flush(&mut self) -> Result<(), WriteError> {
        self.check_ok()?;
        self.emit_all()?;
        self.last_flush = std::time::Instant::now();
        self.sync()
    }

    fn emit_all(&mut self) -> Result<(), WriteError> {
        for cpu in 0..self.open.len() {
            self.emit(cpu as u16, true)?;
        }
        Ok(())
    }

    /// Closes the session at the last record's time (or the start time when there was none).
    pub fn finish(self) -> Result<WriteSummary, WriteError> {
        let end = if self.last_utc == i64::MIN {
            self.opts.clock.start_time
        } else {
            self.last_utc
        };
        self.finish_at(end).map(|(s, _)| s)
    }

    /// Writes what is left, then fills in EndTime (`end_time`, FILETIME), BuffersWritten, EventsLost,
    /// BuffersLost and NumberOfProcessors, and syncs. Returns the summary and the output.
    pub fn finish_at(mut self, end_time: i64) -> Result<(WriteSummary, W), WriteError> {
        self.check_ok()?;
        self.emit_all()?;
        let nproc = self
            .max_cpu
            .map_or(0, |c| c as u32 + 1)
            .max(self.opts.number_of_processors);
        let t = Trailer {
            // 0 means "not closed": a real end time is never 0.
            end_time: if end_time == 0 { 1 } else { end_time },
            buffers_written: self.summary.buffers,
            events_lost: self.summary.events_lost,
            buffers_lost: self.summary.buffers_lost,
            number_of_processors: nproc,
        };
        let rec = self.header_record(t);
        let (_, _, strings) = self.opts.payload_layout();
        let payload = rec[0x20..0x20 + strings].to_vec();
        let at = self.header_payload_at;
        let out = self.output()?;
        let res = out
            .seek(SeekFrom::Start(at))
            .and_then(|_| out.write_all(&payload))
            .and_then(|_| out.seek(SeekFrom::End(0)).map(|_| ()));
        if let Err(e) = res {
            self.failed = Some(e.to_string());
            return Err(self.io_err(e));
        }
        self.sync()?;
        self.finished = true;
        let out = self.out.take().expect("output present until finished");
        Ok((self.summary.clone(), out))
    }
}

impl<W: Output> Drop for Writer<W> {
    /// A writer dropped without [`Writer::finish`] still writes its partly filled buffers (best
    /// effort), but leaves the header saying the file was not closed cleanly.
    fn drop(&mut self) {
        if !self.finished && self.failed.is_none() && self.out.is_some() {
            let _ = self.emit_all().and_then(|_| self.sync());
        }
    }
}

impl Writer<Cursor<Vec<u8>>> {
    /// Finishes and returns the file's bytes.
    pub fn finish_into_inner(self) -> Result<(WriteSummary, Vec<u8>), WriteError> {
        let end = if self.last_utc == i64::MIN {
            self.opts.clock.start_time
        } else {
            self.last_utc
        };
        self.finish_at(end).map(|(s, c)| (s, c.into_inner()))
    }
}
