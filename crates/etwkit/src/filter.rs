//! Selecting events: by time window, provider, event id and process — shared by `dump`, `relog` and
//! live `trace`.

use crate::event::EventRecord;
use crate::guid::Guid;
use crate::time::parse_rfc3339;

/// A time bound as the user wrote it: an absolute time, or seconds from the trace start (the way
/// PythonForWindows' `process(callback, begin, end)` takes them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TimeBound {
    /// UTC FILETIME.
    Absolute(i64),
    /// Seconds after the trace start.
    FromStart(f64),
}

impl TimeBound {
    /// Parses RFC 3339 (`2021-06-01T16:10:57.976Z`) or a number of seconds (`1.5`).
    pub fn parse(s: &str) -> Result<TimeBound, String> {
        if let Ok(secs) = s.trim().parse::<f64>() {
            if secs.is_finite() && secs >= 0.0 {
                return Ok(TimeBound::FromStart(secs));
            }
        }
        parse_rfc3339(s).map(TimeBound::Absolute).ok_or_else(|| {
            format!("{s:?} is neither RFC 3339 (e.g. 2021-06-01T16:10:57.5Z) nor seconds from the trace start (e.g. 1.5)")
        })
    }

    /// The bound as a UTC FILETIME, given the trace start.
    pub fn resolve(self, trace_start: i64) -> i64 {
        match self {
            TimeBound::Absolute(t) => t,
            TimeBound::FromStart(s) => {
                trace_start.saturating_add((s * 10_000_000.0).round() as i64)
            }
        }
    }
}

/// Which events to keep. Empty lists keep everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventFilter {
    /// Inclusive lower bound (UTC FILETIME).
    pub begin: Option<i64>,
    /// Inclusive upper bound (UTC FILETIME).
    pub end: Option<i64>,
    pub providers: Vec<Guid>,
    pub ids: Vec<u16>,
    pub pids: Vec<u32>,
}

impl EventFilter {
    pub fn is_empty(&self) -> bool {
        self.begin.is_none()
            && self.end.is_none()
            && self.providers.is_empty()
            && self.ids.is_empty()
            && self.pids.is_empty()
    }

    #[inline]
    pub fn matches(&self, e: &EventRecord<'_>) -> bool {
        if self.begin.is_some_and(|b| e.timestamp < b) || self.end.is_some_and(|x| e.timestamp > x)
        {
            return false;
        }
        (self.providers.is_empty() || self.providers.contains(&e.provider))
            && (self.ids.is_empty() || self.ids.contains(&e.descriptor.id))
            && (self.pids.is_empty() || self.pids.contains(&e.pid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_bounds() {
        assert_eq!(
            TimeBound::parse("1.5").unwrap().resolve(100),
            100 + 15_000_000
        );
        assert_eq!(
            TimeBound::parse("2021-06-01T16:10:57.9762397Z")
                .unwrap()
                .resolve(0),
            132_670_374_579_762_397
        );
        assert!(TimeBound::parse("soon").is_err());
        assert!(TimeBound::parse("-3").is_err());
    }
}
