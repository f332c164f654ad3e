//! Clocks: raw logger timestamps (QPC, system time, CPU cycles) to UTC FILETIME, and FILETIME to and
//! from RFC 3339 with 100 ns precision.

/// FILETIME ticks (100 ns) between 1601-01-01 and 1970-01-01.
pub const FILETIME_UNIX_EPOCH: i64 = 116_444_736_000_000_000;

/// The clock a logger wrote its timestamps in (TRACE_LOGFILE_HEADER.ReservedFlags).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ClockType {
    /// 0: undefined; treated like QPC.
    Raw,
    /// 1: QueryPerformanceCounter.
    Qpc,
    /// 2: system time; timestamps are FILETIMEs.
    SystemTime,
    /// 3: CPU cycle counter.
    CpuCycle,
}

impl ClockType {
    pub fn from_u32(v: u32) -> ClockType {
        match v {
            1 => ClockType::Qpc,
            2 => ClockType::SystemTime,
            3 => ClockType::CpuCycle,
            _ => ClockType::Raw,
        }
    }
    pub fn to_u32(self) -> u32 {
        match self {
            ClockType::Raw => 0,
            ClockType::Qpc => 1,
            ClockType::SystemTime => 2,
            ClockType::CpuCycle => 3,
        }
    }
}

/// Converts raw timestamps to UTC FILETIME using the sync point of the logfile header:
/// `t0` (the header record's own timestamp) corresponds to `start_time` (FILETIME).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    pub clock_type: ClockType,
    pub t0: i64,
    pub start_time: i64,
    /// Ticks per second of the raw clock (PerfFreq for QPC, MHz·10^6 for cycles).
    pub frequency: i64,
}

impl Clock {
    /// A clock whose raw values already are FILETIMEs.
    pub const IDENTITY: Clock = Clock {
        clock_type: ClockType::SystemTime,
        t0: 0,
        start_time: 0,
        frequency: 10_000_000,
    };

    pub fn new(
        clock_type: ClockType,
        t0: i64,
        start_time: i64,
        perf_freq: i64,
        cpu_mhz: u32,
    ) -> Clock {
        let frequency = match clock_type {
            ClockType::SystemTime => 10_000_000,
            ClockType::CpuCycle if cpu_mhz > 0 => cpu_mhz as i64 * 1_000_000,
            _ if perf_freq > 0 => perf_freq,
            _ => 10_000_000,
        };
        Clock {
            clock_type,
            t0,
            start_time,
            frequency,
        }
    }

    /// Raw logger timestamp → UTC FILETIME.
    #[inline]
    pub fn to_filetime(&self, raw: i64) -> i64 {
        match self.clock_type {
            ClockType::SystemTime => raw,
            _ => {
                let delta = raw.wrapping_sub(self.t0) as i128;
                let ticks = if self.frequency == 10_000_000 {
                    delta
                } else {
                    delta * 10_000_000 / self.frequency as i128
                };
                self.start_time.wrapping_add(ticks as i64)
            }
        }
    }

    /// UTC FILETIME → raw logger timestamp (inverse of [`Clock::to_filetime`], up to rounding).
    pub fn to_raw(&self, filetime: i64) -> i64 {
        match self.clock_type {
            ClockType::SystemTime => filetime,
            _ => {
                let delta = filetime.wrapping_sub(self.start_time) as i128;
                let ticks = if self.frequency == 10_000_000 {
                    delta
                } else {
                    delta * self.frequency as i128 / 10_000_000
                };
                self.t0.wrapping_add(ticks as i64)
            }
        }
    }
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Writes a FILETIME as RFC 3339 UTC with 7 fractional digits, e.g. `2020-05-01T16:40:57.9762397Z`.
///
/// FILETIMEs are unsigned on Windows; negative values (corrupt input) are shown as the epoch,
/// 1601-01-01T00:00:00Z, rather than overflowing.
pub fn write_rfc3339(out: &mut impl std::fmt::Write, filetime: i64) -> std::fmt::Result {
    let unix_ticks = filetime.max(0) - FILETIME_UNIX_EPOCH;
    let secs = unix_ticks.div_euclid(10_000_000);
    let frac = unix_ticks.rem_euclid(10_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    write!(
        out,
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:07}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

pub fn format_rfc3339(filetime: i64) -> String {
    let mut s = String::with_capacity(28);
    let _ = write_rfc3339(&mut s, filetime);
    s
}

/// Parses RFC 3339 (`YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`) into a UTC FILETIME.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.trim().as_bytes();
    if b.len() < 19 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = std::str::from_utf8(b.get(r)?).ok()?;
        if !t.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        t.parse().ok()
    };
    if b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b't' || b[10] == b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d, h, mi, se) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac_ticks = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &s.trim()[start..i];
        let mut v = 0i64;
        for (k, c) in digits.bytes().take(7).enumerate() {
            v += (c - b'0') as i64 * 10i64.pow(6 - k as u32);
        }
        frac_ticks = v;
    }
    let offset_secs = match b.get(i) {
        // No offset: taken as UTC.
        None => 0,
        Some(b'Z') | Some(b'z') if i + 1 == b.len() => 0,
        Some(c @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let v = num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60;
            if *c == b'+' {
                v
            } else {
                -v
            }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + se - offset_secs;
    Some(FILETIME_UNIX_EPOCH + secs * 10_000_000 + frac_ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trip() {
        // pktmonvpn: first PktMon event, UTC FILETIME 132670374579762397 = local 21:40:57.9762397 at Bias -330.
        let s = format_rfc3339(132_670_374_579_762_397);
        assert_eq!(s, "2021-06-01T16:10:57.9762397Z");
        assert_eq!(parse_rfc3339(&s), Some(132_670_374_579_762_397));
        assert_eq!(
            parse_rfc3339("2021-06-01T21:40:57.9762397+05:30"),
            Some(132_670_374_579_762_397)
        );
        assert_eq!(
            format_rfc3339(FILETIME_UNIX_EPOCH),
            "1970-01-01T00:00:00.0000000Z"
        );
        assert_eq!(
            parse_rfc3339("2021-06-01 16:10:57"),
            Some(132_670_374_570_000_000)
        );
        assert_eq!(parse_rfc3339("yesterday"), None);
        // Corrupt timestamps (found by the fuzzer): no overflow, a valid RFC 3339 string.
        assert_eq!(format_rfc3339(i64::MIN), "1601-01-01T00:00:00.0000000Z");
        assert_eq!(format_rfc3339(i64::MAX), "30828-09-14T02:48:05.4775807Z");
    }

    #[test]
    fn qpc_clock_matches_pktmon_sample() {
        let c = Clock::new(
            ClockType::Qpc,
            175_055_121_578,
            132_670_374_575_408_593,
            10_000_000,
            0,
        );
        assert_eq!(c.to_filetime(175_059_475_382), 132_670_374_579_762_397);
        assert_eq!(c.to_raw(132_670_374_579_762_397), 175_059_475_382);
    }
}
