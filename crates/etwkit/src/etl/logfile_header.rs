//! TRACE_LOGFILE_HEADER: the payload of the first record of an ETL file (a SYSTEM record with HookId 0),
//! in its 32- and 64-bit layouts, followed by the logger and log file names.

use crate::time::{Clock, ClockType};

/// LogFileMode bits worth naming.
pub mod log_file_mode {
    pub const FILE_MODE_SEQUENTIAL: u32 = 0x0000_0001;
    pub const FILE_MODE_CIRCULAR: u32 = 0x0000_0002;
    pub const FILE_MODE_APPEND: u32 = 0x0000_0004;
    pub const FILE_MODE_NEWFILE: u32 = 0x0000_0008;
    pub const REAL_TIME_MODE: u32 = 0x0000_0100;
    pub const RELOG_MODE: u32 = 0x0001_0000;
    pub const SYSTEM_LOGGER_MODE: u32 = 0x0200_0000;
    pub const COMPRESSED_MODE: u32 = 0x0400_0000;
    pub const NO_PER_PROCESSOR_BUFFERING: u32 = 0x1000_0000;
}

/// The logfile header, both layouts folded into one.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LogfileHeader {
    /// Logical buffer size in bytes (never the stride between compressed buffers).
    pub buffer_size: u32,
    /// Major, Minor, Sub, SubMinor.
    pub version: [u8; 4],
    /// OS build number.
    pub provider_version: u32,
    pub number_of_processors: u32,
    /// FILETIME; 0 when the logger did not close the file.
    pub end_time: i64,
    /// 100 ns units.
    pub timer_resolution: u32,
    /// MB.
    pub maximum_file_size: u32,
    pub log_file_mode: u32,
    pub buffers_written: u32,
    pub start_buffers: u32,
    pub pointer_size: u32,
    pub events_lost: u32,
    pub cpu_speed_mhz: u32,
    /// Minutes; UTC = local + bias.
    pub bias_minutes: i32,
    pub time_zone_standard_name: String,
    pub time_zone_daylight_name: String,
    pub boot_time: i64,
    pub perf_freq: i64,
    /// FILETIME (UTC), paired with the header record's own timestamp as the clock sync point.
    pub start_time: i64,
    pub clock_type: ClockType,
    pub buffers_lost: u32,
    pub logger_name: String,
    pub log_file_name: String,
    /// Pointer size of the layout the header itself was written in (SYSTEM32 → 4, SYSTEM64 → 8).
    pub layout_pointer_size: u8,
}

/// Why the logfile header could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("logfile header payload is {len} bytes, shorter than the {need}-byte TRACE_LOGFILE_HEADER{bits}")]
pub struct LogfileHeaderError {
    pub len: usize,
    pub need: usize,
    pub bits: u8,
}

fn utf16z(b: &[u8]) -> (String, usize) {
    let mut units = Vec::new();
    let mut i = 0;
    while i + 1 < b.len() {
        let u = u16::from_le_bytes([b[i], b[i + 1]]);
        i += 2;
        if u == 0 {
            break;
        }
        units.push(u);
    }
    (String::from_utf16_lossy(&units), i)
}

impl LogfileHeader {
    /// Parses the payload of the logfile-header record; `layout_pointer_size` comes from the record's
    /// header type (SYSTEM32 → 4, SYSTEM64 → 8).
    pub fn parse(p: &[u8], layout_pointer_size: u8) -> Result<LogfileHeader, LogfileHeaderError> {
        let wide = layout_pointer_size == 8;
        let (tz, boot, strings) = if wide {
            (0x48, 0xF8, 0x118)
        } else {
            (0x40, 0xF0, 0x110)
        };
        if p.len() < strings {
            return Err(LogfileHeaderError {
                len: p.len(),
                need: strings,
                bits: if wide { 64 } else { 32 },
            });
        }
        let u32_at = |o: usize| u32::from_le_bytes(p[o..o + 4].try_into().unwrap());
        let i64_at = |o: usize| i64::from_le_bytes(p[o..o + 8].try_into().unwrap());
        let (logger_name, used) = utf16z(&p[strings..]);
        let (log_file_name, _) = utf16z(&p[strings + used..]);
        Ok(LogfileHeader {
            buffer_size: u32_at(0),
            version: [p[4], p[5], p[6], p[7]],
            provider_version: u32_at(8),
            number_of_processors: u32_at(0xC),
            end_time: i64_at(0x10),
            timer_resolution: u32_at(0x18),
            maximum_file_size: u32_at(0x1C),
            log_file_mode: u32_at(0x20),
            buffers_written: u32_at(0x24),
            start_buffers: u32_at(0x28),
            pointer_size: u32_at(0x2C),
            events_lost: u32_at(0x30),
            cpu_speed_mhz: u32_at(0x34),
            bias_minutes: u32_at(tz) as i32,
            time_zone_standard_name: utf16z(&p[tz + 4..tz + 4 + 64]).0,
            time_zone_daylight_name: utf16z(&p[tz + 0x58..tz + 0x58 + 64]).0,
            boot_time: i64_at(boot),
            perf_freq: i64_at(boot + 8),
            start_time: i64_at(boot + 0x10),
            clock_type: ClockType::from_u32(u32_at(boot + 0x18)),
            buffers_lost: u32_at(boot + 0x1C),
            logger_name,
            log_file_name,
            layout_pointer_size,
        })
    }

    /// The clock that turns this file's raw timestamps into UTC; `t0` is the header record's timestamp.
    pub fn clock(&self, t0: i64) -> Clock {
        Clock::new(
            self.clock_type,
            t0,
            self.start_time,
            self.perf_freq,
            self.cpu_speed_mhz,
        )
    }

    pub fn version_string(&self) -> String {
        let v = self.version;
        format!("{}.{}.{}.{}", v[0], v[1], v[2], v[3])
    }

    /// A logger that stopped cleanly fills in EndTime; a file whose logger was killed (or that is still
    /// being written) has EndTime 0.
    pub fn closed_cleanly(&self) -> bool {
        self.end_time != 0
    }

    /// Pointer size of the logger: the PointerSize field, or the header layout when it is not 4 or 8.
    pub fn logger_pointer_size(&self) -> u8 {
        match self.pointer_size {
            4 => 4,
            8 => 8,
            _ => self.layout_pointer_size,
        }
    }
}
