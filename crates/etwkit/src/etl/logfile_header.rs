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

/// FILETIME of 1990-01-01T00:00:00Z: no ETW logger predates it.
pub const PLAUSIBLE_TIME_MIN: i64 = 122_756_256_000_000_000;
/// FILETIME of 2200-01-01T00:00:00Z.
pub const PLAUSIBLE_TIME_MAX: i64 = 189_025_920_000_000_000;

/// A field of the logfile header, as [`LogfileHeader`] names it (its JSON key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeaderField {
    BufferSize,
    NumberOfProcessors,
    EndTime,
    PointerSize,
    CpuSpeedMhz,
    PerfFreq,
    StartTime,
    TimeZoneBias,
}

impl HeaderField {
    /// The [`LogfileHeader`] field (and JSON key) this is.
    pub fn key(self) -> &'static str {
        match self {
            HeaderField::BufferSize => "buffer_size",
            HeaderField::NumberOfProcessors => "number_of_processors",
            HeaderField::EndTime => "end_time",
            HeaderField::PointerSize => "pointer_size",
            HeaderField::CpuSpeedMhz => "cpu_speed_mhz",
            HeaderField::PerfFreq => "perf_freq",
            HeaderField::StartTime => "start_time",
            HeaderField::TimeZoneBias => "bias_minutes",
        }
    }
}

/// A logfile-header field holding a value no logger writes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DamagedField {
    pub field: HeaderField,
    /// The field and its value, e.g. `pointer size 2779096485`.
    pub what: String,
}

impl std::fmt::Display for DamagedField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

impl LogfileHeader {
    /// The fields that hold values no logger writes (bytes written over the header): a pointer size
    /// other than 4 or 8; a processor count outside 1..=4096; a CPU speed above 100 GHz; a buffer
    /// size of 0 or not a multiple of 512; a start or end time outside 1990..2200, or an end before
    /// the start (an end of 0 means the file was not closed, and is fine); a QPC clock without its
    /// PerfFreq. Empty for every header of ../shared/etl-samples. There is no limit on end minus
    /// start: a relog may span years.
    pub fn damaged_fields(&self) -> Vec<DamagedField> {
        let mut v = Vec::new();
        let mut bad = |field, what: String| v.push(DamagedField { field, what });
        let plausible = |t: i64| (PLAUSIBLE_TIME_MIN..PLAUSIBLE_TIME_MAX).contains(&t);
        if self.pointer_size != 4 && self.pointer_size != 8 {
            bad(
                HeaderField::PointerSize,
                format!("pointer size {}", self.pointer_size),
            );
        }
        if !(1..=4096).contains(&self.number_of_processors) {
            bad(
                HeaderField::NumberOfProcessors,
                format!("processors {}", self.number_of_processors),
            );
        }
        if self.cpu_speed_mhz > 100_000 {
            bad(
                HeaderField::CpuSpeedMhz,
                format!("CPU speed {} MHz", self.cpu_speed_mhz),
            );
        }
        if self.buffer_size == 0 || self.buffer_size % 512 != 0 {
            bad(
                HeaderField::BufferSize,
                format!("buffer size {}", self.buffer_size),
            );
        }
        if !plausible(self.start_time) {
            bad(
                HeaderField::StartTime,
                format!(
                    "start time {} (FILETIME outside 1990..2200)",
                    self.start_time
                ),
            );
        }
        if self.end_time != 0 && !plausible(self.end_time) {
            bad(
                HeaderField::EndTime,
                format!("end time {} (FILETIME outside 1990..2200)", self.end_time),
            );
        } else if self.end_time != 0
            && plausible(self.start_time)
            && self.end_time < self.start_time
        {
            bad(
                HeaderField::EndTime,
                format!("end time {} before the start time", self.end_time),
            );
        }
        // UTC = local + bias: from UTC+14 (-840) to UTC-12 (+720).
        if !(-840..=720).contains(&self.bias_minutes) {
            bad(
                HeaderField::TimeZoneBias,
                format!("time-zone bias {} minutes", self.bias_minutes),
            );
        }
        if self.clock_type == ClockType::Qpc && self.perf_freq <= 0 {
            bad(
                HeaderField::PerfFreq,
                format!("QPC clock with perf frequency {}", self.perf_freq),
            );
        }
        v
    }

    /// Whether the clock can be believed given `damaged` (from [`LogfileHeader::damaged_fields`])
    /// and `t0`, the header record's own timestamp: its start time and frequency are sound, and
    /// for a counter clock (QPC, raw, cycles) its base `t0` is a positive count.
    pub fn clock_sound(&self, damaged: &[DamagedField], t0: i64) -> bool {
        let clock_field = |f: HeaderField| match f {
            HeaderField::StartTime | HeaderField::PerfFreq => true,
            HeaderField::CpuSpeedMhz => self.clock_type == ClockType::CpuCycle,
            _ => false,
        };
        !damaged.iter().any(|d| clock_field(d.field))
            && (self.clock_type == ClockType::SystemTime || t0 > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::format_rfc3339;

    /// The header of pktmonvpn_PktMon.etl (its clock and sizes), as a sound starting point.
    fn sound() -> LogfileHeader {
        LogfileHeader {
            buffer_size: 16 << 20,
            version: [10, 0, 2, 0],
            provider_version: 19042,
            number_of_processors: 4,
            end_time: 132_670_374_711_058_559,
            timer_resolution: 156_250,
            maximum_file_size: 512,
            log_file_mode: 0x0401_0000,
            buffers_written: 5,
            start_buffers: 0,
            pointer_size: 8,
            events_lost: 0,
            cpu_speed_mhz: 2396,
            bias_minutes: -330,
            time_zone_standard_name: String::new(),
            time_zone_daylight_name: String::new(),
            boot_time: 132_670_200_000_000_000,
            perf_freq: 10_000_000,
            start_time: 132_670_374_575_408_593,
            clock_type: ClockType::Qpc,
            buffers_lost: 0,
            logger_name: "Relogger".into(),
            log_file_name: String::new(),
            layout_pointer_size: 8,
        }
    }

    fn fields(h: &LogfileHeader) -> Vec<HeaderField> {
        h.damaged_fields().iter().map(|d| d.field).collect()
    }

    #[test]
    fn the_plausible_times_are_1990_and_2200() {
        assert_eq!(
            format_rfc3339(PLAUSIBLE_TIME_MIN),
            "1990-01-01T00:00:00.0000000Z"
        );
        assert_eq!(
            format_rfc3339(PLAUSIBLE_TIME_MAX),
            "2200-01-01T00:00:00.0000000Z"
        );
    }

    #[test]
    fn a_sound_header_has_no_damaged_field() {
        let h = sound();
        assert!(h.damaged_fields().is_empty());
        assert!(h.clock_sound(&[], 175_055_121_578));
        // Not closed (EndTime 0), a 32-bit logger, one CPU, 4096 CPUs, 100 GHz, 512-byte buffers.
        for h in [
            LogfileHeader {
                end_time: 0,
                ..sound()
            },
            LogfileHeader {
                pointer_size: 4,
                number_of_processors: 1,
                cpu_speed_mhz: 100_000,
                buffer_size: 512,
                ..sound()
            },
            LogfileHeader {
                number_of_processors: 4096,
                ..sound()
            },
        ] {
            assert!(h.damaged_fields().is_empty(), "{h:?}");
        }
    }

    #[test]
    fn a_relog_spanning_years_is_sound() {
        // 1995 to 2199: no limit on end minus start.
        let h = LogfileHeader {
            start_time: PLAUSIBLE_TIME_MIN + 5 * 365 * 864_000_000_000,
            end_time: PLAUSIBLE_TIME_MAX - 1,
            ..sound()
        };
        assert!(h.damaged_fields().is_empty());
    }

    #[test]
    fn each_check_names_its_field_and_value() {
        use HeaderField::*;
        let cases: Vec<(LogfileHeader, HeaderField, &str)> = vec![
            (
                LogfileHeader {
                    pointer_size: 2_779_096_485,
                    ..sound()
                },
                PointerSize,
                "pointer size 2779096485",
            ),
            (
                LogfileHeader {
                    pointer_size: 0,
                    ..sound()
                },
                PointerSize,
                "pointer size 0",
            ),
            (
                LogfileHeader {
                    number_of_processors: 0,
                    ..sound()
                },
                NumberOfProcessors,
                "processors 0",
            ),
            (
                LogfileHeader {
                    number_of_processors: 4097,
                    ..sound()
                },
                NumberOfProcessors,
                "processors 4097",
            ),
            (
                LogfileHeader {
                    cpu_speed_mhz: 100_001,
                    ..sound()
                },
                CpuSpeedMhz,
                "CPU speed 100001 MHz",
            ),
            (
                LogfileHeader {
                    buffer_size: 0,
                    ..sound()
                },
                BufferSize,
                "buffer size 0",
            ),
            (
                LogfileHeader {
                    buffer_size: 65_537,
                    ..sound()
                },
                BufferSize,
                "buffer size 65537",
            ),
            (
                LogfileHeader {
                    start_time: PLAUSIBLE_TIME_MIN - 1,
                    ..sound()
                },
                StartTime,
                "start time 122756255999999999 (FILETIME outside 1990..2200)",
            ),
            (
                LogfileHeader {
                    end_time: PLAUSIBLE_TIME_MAX,
                    ..sound()
                },
                EndTime,
                "end time 189025920000000000 (FILETIME outside 1990..2200)",
            ),
            (
                LogfileHeader {
                    end_time: 132_670_374_575_408_592,
                    ..sound()
                },
                EndTime,
                "end time 132670374575408592 before the start time",
            ),
            (
                LogfileHeader {
                    perf_freq: 0,
                    ..sound()
                },
                PerfFreq,
                "QPC clock with perf frequency 0",
            ),
        ];
        for (h, field, what) in cases {
            let d = h.damaged_fields();
            assert_eq!(d.len(), 1, "{what}: {d:?}");
            assert_eq!(d[0].field, field);
            assert_eq!(d[0].to_string(), what);
        }
        // A system-time clock needs no PerfFreq.
        let h = LogfileHeader {
            perf_freq: 0,
            clock_type: ClockType::SystemTime,
            ..sound()
        };
        assert!(h.damaged_fields().is_empty());
    }

    #[test]
    fn the_clock_is_kept_unless_its_own_fields_are_damaged() {
        // Bytes over everything but the clock: damaged, clock sound.
        let h = LogfileHeader {
            pointer_size: 0xA5A5_A5A5,
            number_of_processors: 0xA5A5_A5A5,
            cpu_speed_mhz: 0xA5A5_A5A5,
            buffer_size: 0xA5A5_A5A5,
            end_time: 0xA5A5_A5A5_A5A5_A5A5u64 as i64,
            ..sound()
        };
        let d = h.damaged_fields();
        assert_eq!(
            fields(&h),
            [
                HeaderField::PointerSize,
                HeaderField::NumberOfProcessors,
                HeaderField::CpuSpeedMhz,
                HeaderField::BufferSize,
                HeaderField::EndTime,
            ]
        );
        assert!(h.clock_sound(&d, 175_055_121_578));
        // The QPC base (the header record's timestamp) is not a count.
        assert!(!h.clock_sound(&d, 0));
        assert!(!h.clock_sound(&d, -5));
        // Start time or frequency damaged: the clock goes.
        for h in [
            LogfileHeader {
                start_time: 12,
                ..sound()
            },
            LogfileHeader {
                perf_freq: -1,
                ..sound()
            },
        ] {
            assert!(
                !h.clock_sound(&h.damaged_fields(), 175_055_121_578),
                "{h:?}"
            );
        }
        // CPU speed counts for a cycle clock only.
        let h = LogfileHeader {
            cpu_speed_mhz: 0xA5A5_A5A5,
            clock_type: ClockType::CpuCycle,
            ..sound()
        };
        assert!(!h.clock_sound(&h.damaged_fields(), 175_055_121_578));
        // A system-time clock has no base to check.
        let h = LogfileHeader {
            clock_type: ClockType::SystemTime,
            ..sound()
        };
        assert!(h.clock_sound(&[], 0));
    }
}
