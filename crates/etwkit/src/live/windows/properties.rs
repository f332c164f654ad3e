//! EVENT_TRACE_PROPERTIES buffers: what StartTraceW, ControlTraceW and QueryAllTracesW read and write.
//!
//! A properties buffer is the 120-byte struct followed by room for the logger name and the log file
//! name (each [`NAME_CHARS`] UTF-16 units), with `LoggerNameOffset` / `LogFileNameOffset` pointing at
//! them and `Wnode.BufferSize` = the whole length. StartTraceW copies the session name in itself; the
//! log file name must be there beforehand. Everything here is pure byte layout, tested on every OS.

use std::path::{Path, PathBuf};

use windows_sys::Win32::System::Diagnostics::Etw::{
    EVENT_TRACE_FILE_MODE_SEQUENTIAL, EVENT_TRACE_PROPERTIES, EVENT_TRACE_REAL_TIME_MODE,
    EVENT_TRACE_SYSTEM_LOGGER_MODE, WNODE_FLAG_TRACED_GUID, WNODE_HEADER,
};

use crate::guid::Guid;

/// Size of EVENT_TRACE_PROPERTIES (identical on every 64-bit target; see windows-build.md).
pub const PROPS_SIZE: usize = 120;
const _: () = assert!(std::mem::size_of::<EVENT_TRACE_PROPERTIES>() == PROPS_SIZE);
const _: () = assert!(std::mem::size_of::<WNODE_HEADER>() == 48);
const _: () = assert!(std::mem::offset_of!(EVENT_TRACE_PROPERTIES, BufferSize) == OFF_BUFFER_SIZE);
const _: () = assert!(std::mem::offset_of!(EVENT_TRACE_PROPERTIES, LogFileMode) == OFF_MODE);
const _: () = assert!(std::mem::offset_of!(EVENT_TRACE_PROPERTIES, FlushTimer) == OFF_FLUSH);
const _: () = assert!(std::mem::offset_of!(EVENT_TRACE_PROPERTIES, EnableFlags) == OFF_FLAGS);
const _: () = assert!(std::mem::offset_of!(EVENT_TRACE_PROPERTIES, NumberOfBuffers) == 80);
const _: () = assert!(std::mem::offset_of!(EVENT_TRACE_PROPERTIES, EventsLost) == OFF_EVENTS_LOST);
const _: () = assert!(std::mem::offset_of!(EVENT_TRACE_PROPERTIES, LogFileNameOffset) == OFF_FILE);
const _: () = assert!(std::mem::offset_of!(EVENT_TRACE_PROPERTIES, LoggerNameOffset) == OFF_NAME);

const OFF_GUID: usize = 24;
const OFF_CLIENT_CONTEXT: usize = 40;
const OFF_WNODE_FLAGS: usize = 44;
const OFF_BUFFER_SIZE: usize = 48;
const OFF_MIN: usize = 52;
const OFF_MAX: usize = 56;
const OFF_MODE: usize = 64;
const OFF_FLUSH: usize = 68;
const OFF_FLAGS: usize = 72;
const OFF_EVENTS_LOST: usize = 88;
const OFF_FILE: usize = 112;
const OFF_NAME: usize = 116;

/// Room for each name, in UTF-16 units (with the NUL): ETW's limit for session names and paths.
pub const NAME_CHARS: usize = 1024;
/// Length of every buffer built here.
pub const BUFFER_LEN: usize = PROPS_SIZE + 4 * NAME_CHARS;

/// The session name ETW reserves for the classic kernel logger.
pub const KERNEL_LOGGER_NAME: &str = "NT Kernel Logger";
/// SystemTraceControlGuid: the kernel logger's GUID, and how etwkit names kernel providers.
pub const SYSTEM_TRACE_CONTROL_GUID: Guid =
    Guid::from_str_const("9e814aad-3204-11d2-9a82-006008a86939");

/// Kernel logger enable flags (EVENT_TRACE_FLAG_*) worth naming.
pub mod kernel_flags {
    pub const PROCESS: u32 = 0x0000_0001;
    pub const THREAD: u32 = 0x0000_0002;
    pub const IMAGE_LOAD: u32 = 0x0000_0004;
    pub const NETWORK_TCPIP: u32 = 0x0001_0000;
    /// What an enable of the kernel provider with no keywords asks for.
    pub const DEFAULT: u32 = PROCESS | THREAD | IMAGE_LOAD | NETWORK_TCPIP;
}

/// Buffer sizes that keep bursts: ETW buffers are at most 1 MiB; every CPU gets several.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferSizing {
    pub buffer_kb: u32,
    pub min_buffers: u32,
    pub max_buffers: u32,
    /// Seconds between flushes of partly filled buffers to a realtime consumer.
    pub flush_timer_s: u32,
}

/// Per-CPU memory when the caller asks for none (KiB): 1 MiB, growing to 4 MiB under load.
pub const DEFAULT_PER_CPU_KB: u64 = 1024;
/// Buffer size when the caller asks for none (KiB).
pub const DEFAULT_BUFFER_KB: u32 = 256;
/// Most buffers a session starts with (128 MiB of 256 KiB buffers).
pub const MAX_MIN_BUFFERS: u32 = 512;
/// Most buffers a session may grow to (512 MiB of 256 KiB buffers).
pub const MAX_BUFFERS: u32 = 2048;

impl BufferSizing {
    /// `per_cpu_kb`: memory per CPU the caller wants (0 = default). The session starts with that
    /// much per CPU (at least 2 buffers each) and may grow to 4 times it; buffers are 4 KiB–1 MiB.
    pub fn for_cpus(per_cpu_kb: u64, cpus: u32) -> BufferSizing {
        let cpus = cpus.max(1);
        let per_cpu = if per_cpu_kb == 0 {
            DEFAULT_PER_CPU_KB
        } else {
            per_cpu_kb
        };
        let buffer_kb = (per_cpu.min(DEFAULT_BUFFER_KB as u64) as u32).clamp(4, 1024);
        let per_cpu_buffers = per_cpu.div_ceil(buffer_kb as u64).clamp(2, 4096) as u32;
        // Big machines: at most MAX_MIN_BUFFERS to start with, MAX_BUFFERS in all.
        let min_buffers = per_cpu_buffers
            .saturating_mul(cpus)
            .clamp(4, MAX_MIN_BUFFERS);
        BufferSizing {
            buffer_kb,
            min_buffers,
            max_buffers: min_buffers.saturating_mul(4).min(MAX_BUFFERS),
            flush_timer_s: 1,
        }
    }
}

/// What a session is started with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionProperties {
    pub name: String,
    /// `None`: realtime only; else ETW also writes a sequential .etl file (realtime delivery stays
    /// on, so the session can be processed while it writes).
    pub logfile: Option<PathBuf>,
    /// Wnode.Guid: the session's GUID (the heap provider's for heap sessions).
    pub guid: Guid,
    pub sizing: BufferSizing,
    /// Kernel (system) providers: EVENT_TRACE_FLAG_* bits; 0 = none.
    pub kernel_flags: u32,
    /// Wnode.ClientContext: 1 QPC, 2 system time, 3 CPU cycles.
    pub clock: u32,
}

impl SessionProperties {
    /// The LogFileMode these properties stand for.
    pub fn log_file_mode(&self) -> u32 {
        let mut m = EVENT_TRACE_REAL_TIME_MODE;
        if self.logfile.is_some() {
            m |= EVENT_TRACE_FILE_MODE_SEQUENTIAL;
        }
        // Kernel providers in a session of our own (Windows 8+); the classic kernel logger has it
        // implicitly.
        if self.kernel_flags != 0 && self.name != KERNEL_LOGGER_NAME {
            m |= EVENT_TRACE_SYSTEM_LOGGER_MODE;
        }
        m
    }
}

/// The session GUID etwkit gives a named session: derived from the name the way ETW derives
/// TraceLogging provider GUIDs, so the same name always gets the same GUID.
pub fn session_guid(name: &str) -> Guid {
    if name == KERNEL_LOGGER_NAME {
        SYSTEM_TRACE_CONTROL_GUID
    } else {
        crate::tlg::provider_guid_from_name(&format!("etwkit-session:{name}"))
    }
}

/// A properties buffer, 8-aligned so it can be passed as `*mut EVENT_TRACE_PROPERTIES`.
#[derive(Clone)]
pub struct PropsBuf(Vec<u64>);

impl PropsBuf {
    /// A zeroed buffer of [`BUFFER_LEN`] bytes with `Wnode.BufferSize` and both name offsets set:
    /// what QueryAllTracesW and ControlTraceW(QUERY/STOP/FLUSH) fill in.
    pub fn empty() -> PropsBuf {
        let mut b = PropsBuf(vec![0u64; BUFFER_LEN.div_ceil(8)]);
        b.put_u32(0, BUFFER_LEN as u32);
        b.put_u32(OFF_NAME, PROPS_SIZE as u32);
        b.put_u32(OFF_FILE, (PROPS_SIZE + 2 * NAME_CHARS) as u32);
        b
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: viewing a Vec<u64>'s initialized memory as bytes (u8 has no alignment or validity
        // requirements); the length is the Vec's byte length.
        let all =
            unsafe { std::slice::from_raw_parts(self.0.as_ptr() as *const u8, self.0.len() * 8) };
        &all[..BUFFER_LEN]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, through the unique borrow.
        let all = unsafe {
            std::slice::from_raw_parts_mut(self.0.as_mut_ptr() as *mut u8, self.0.len() * 8)
        };
        &mut all[..BUFFER_LEN]
    }

    /// The pointer the Win32 calls take.
    pub fn as_mut_ptr(&mut self) -> *mut EVENT_TRACE_PROPERTIES {
        self.0.as_mut_ptr() as *mut EVENT_TRACE_PROPERTIES
    }

    fn put_u32(&mut self, off: usize, v: u32) {
        self.bytes_mut()[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn u32_at(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.bytes()[off..off + 4].try_into().expect("4 bytes"))
    }

    fn put_wide(&mut self, off: usize, s: &str) {
        let b = self.bytes_mut();
        for (i, u) in s.encode_utf16().enumerate() {
            b[off + 2 * i..off + 2 * i + 2].copy_from_slice(&u.to_le_bytes());
        }
    }

    /// A UTF-16 name at a byte offset the buffer itself names (0 or out of range: empty).
    fn wide_at(&self, off: u32) -> String {
        let b = self.bytes();
        let off = off as usize;
        if off == 0 || off >= b.len() {
            return String::new();
        }
        let units: Vec<u16> = b[off..]
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .take_while(|&u| u != 0)
            .collect();
        String::from_utf16_lossy(&units)
    }

    /// What ETW reported back (after QueryAllTracesW or ControlTraceW).
    pub fn parse(&self) -> ParsedProperties {
        let b = self.bytes();
        ParsedProperties {
            name: self.wide_at(self.u32_at(OFF_NAME)),
            logfile: self.wide_at(self.u32_at(OFF_FILE)),
            guid: Guid::from_le_bytes(&b[OFF_GUID..OFF_GUID + 16]).unwrap_or_default(),
            buffer_kb: self.u32_at(OFF_BUFFER_SIZE),
            min_buffers: self.u32_at(OFF_MIN),
            max_buffers: self.u32_at(OFF_MAX),
            log_file_mode: self.u32_at(OFF_MODE),
            flush_timer_s: self.u32_at(OFF_FLUSH),
            enable_flags: self.u32_at(OFF_FLAGS),
            number_of_buffers: self.u32_at(80),
            events_lost: self.u32_at(OFF_EVENTS_LOST),
            buffers_written: self.u32_at(92),
            log_buffers_lost: self.u32_at(96),
            realtime_buffers_lost: self.u32_at(100),
        }
    }
}

/// Why properties could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PropsError {
    NameTooLong,
    PathTooLong,
}

/// The buffer StartTraceW gets for `p`.
pub fn build(p: &SessionProperties) -> Result<PropsBuf, PropsError> {
    if p.name.encode_utf16().count() >= NAME_CHARS {
        return Err(PropsError::NameTooLong);
    }
    let mut b = PropsBuf::empty();
    b.bytes_mut()[OFF_GUID..OFF_GUID + 16].copy_from_slice(&p.guid.to_le_bytes());
    b.put_u32(OFF_CLIENT_CONTEXT, p.clock);
    b.put_u32(OFF_WNODE_FLAGS, WNODE_FLAG_TRACED_GUID);
    b.put_u32(OFF_BUFFER_SIZE, p.sizing.buffer_kb);
    b.put_u32(OFF_MIN, p.sizing.min_buffers);
    b.put_u32(OFF_MAX, p.sizing.max_buffers);
    b.put_u32(OFF_MODE, p.log_file_mode());
    b.put_u32(OFF_FLUSH, p.sizing.flush_timer_s);
    b.put_u32(OFF_FLAGS, p.kernel_flags);
    match &p.logfile {
        Some(path) => {
            let s = path_string(path);
            if s.encode_utf16().count() >= NAME_CHARS {
                return Err(PropsError::PathTooLong);
            }
            let off = b.u32_at(OFF_FILE) as usize;
            b.put_wide(off, &s);
        }
        // Realtime: no file. The room stays for what ControlTraceW writes back.
        None => b.put_u32(OFF_FILE, 0),
    }
    Ok(b)
}

fn path_string(p: &Path) -> String {
    p.display().to_string()
}

/// EVENT_TRACE_PROPERTIES as ETW reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedProperties {
    pub name: String,
    pub logfile: String,
    pub guid: Guid,
    pub buffer_kb: u32,
    pub min_buffers: u32,
    pub max_buffers: u32,
    pub log_file_mode: u32,
    pub flush_timer_s: u32,
    pub enable_flags: u32,
    pub number_of_buffers: u32,
    pub events_lost: u32,
    pub buffers_written: u32,
    pub log_buffers_lost: u32,
    pub realtime_buffers_lost: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizing_defaults_and_limits() {
        let d = BufferSizing::for_cpus(0, 8);
        assert_eq!(d.buffer_kb, 256);
        assert_eq!(d.min_buffers, 4 * 8, "1 MiB per CPU in 256 KiB buffers");
        assert_eq!(d.max_buffers, 4 * d.min_buffers);
        assert_eq!(d.flush_timer_s, 1);
        // Small requests still give every CPU two buffers.
        let s = BufferSizing::for_cpus(8, 1);
        assert_eq!((s.buffer_kb, s.min_buffers), (8, 4));
        // Large requests: 1 MiB buffers at most... here 256 KiB ones, more of them.
        let l = BufferSizing::for_cpus(16 * 1024, 2);
        assert_eq!((l.buffer_kb, l.min_buffers), (256, 2 * 64));
        // 64 CPUs asking for 8 MiB each: capped, memory stays bounded.
        let big = BufferSizing::for_cpus(8 * 1024, 64);
        assert_eq!((big.min_buffers, big.max_buffers), (512, 2048));
    }

    #[test]
    fn realtime_layout() {
        let p = SessionProperties {
            name: "etwkit-demo".into(),
            logfile: None,
            guid: session_guid("etwkit-demo"),
            sizing: BufferSizing::for_cpus(0, 2),
            kernel_flags: 0,
            clock: 1,
        };
        let b = build(&p).unwrap();
        let bytes = b.bytes();
        assert_eq!(bytes.len(), BUFFER_LEN);
        let u = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
        assert_eq!(u(0) as usize, BUFFER_LEN, "Wnode.BufferSize");
        assert_eq!(u(OFF_NAME), 120);
        assert_eq!(u(OFF_FILE), 0, "realtime: no log file");
        assert_eq!(u(OFF_MODE), EVENT_TRACE_REAL_TIME_MODE);
        assert_eq!(u(OFF_WNODE_FLAGS), WNODE_FLAG_TRACED_GUID);
        let parsed = b.parse();
        assert_eq!(parsed.guid, session_guid("etwkit-demo"));
        assert_ne!(parsed.guid, session_guid("etwkit-demo2"));
        assert_eq!(parsed.buffer_kb, 256);
        assert_eq!((parsed.min_buffers, parsed.max_buffers), (8, 32));
    }

    #[test]
    fn logfile_and_kernel_layout() {
        let p = SessionProperties {
            name: "k".into(),
            logfile: Some(PathBuf::from(r"C:\t\k.etl")),
            guid: session_guid("k"),
            sizing: BufferSizing::for_cpus(0, 1),
            kernel_flags: kernel_flags::DEFAULT,
            clock: 1,
        };
        let b = build(&p).unwrap();
        let parsed = b.parse();
        assert_eq!(parsed.logfile, r"C:\t\k.etl");
        assert_eq!(
            parsed.log_file_mode,
            EVENT_TRACE_FILE_MODE_SEQUENTIAL
                | EVENT_TRACE_REAL_TIME_MODE
                | EVENT_TRACE_SYSTEM_LOGGER_MODE
        );
        assert_eq!(parsed.enable_flags, 0x0001_0007);
        // The classic kernel logger: its own GUID, no system-logger bit.
        let k = SessionProperties {
            name: KERNEL_LOGGER_NAME.into(),
            guid: session_guid(KERNEL_LOGGER_NAME),
            logfile: None,
            ..p
        };
        let parsed = build(&k).unwrap().parse();
        assert_eq!(parsed.guid, SYSTEM_TRACE_CONTROL_GUID);
        assert_eq!(parsed.log_file_mode, EVENT_TRACE_REAL_TIME_MODE);
        let long = SessionProperties {
            name: "x".repeat(NAME_CHARS),
            ..k
        };
        assert_eq!(build(&long).err(), Some(PropsError::NameTooLong));
    }
}
