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

/// How a filter's pid condition sees a record when the header's pid is not the whole story: a
/// layer above the container (the decoder, which attributes a kernel record to the process its
/// payload or its thread names) implements it, so the container can filter by it without knowing
/// any layout.
pub trait PidView: Send + Sync {
    /// Whether `filter` keeps `ev`, with `ev`'s process as this view attributes it.
    fn keeps(&self, filter: &EventFilter, ev: &EventRecord<'_>) -> bool;
}

/// Which events to keep. Empty lists keep everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventFilter {
    /// Inclusive lower bound (UTC FILETIME).
    pub begin: Option<i64>,
    /// Inclusive upper bound (UTC FILETIME).
    pub end: Option<i64>,
    pub providers: Vec<Guid>,
    /// Provider names: match a TraceLogging provider by its traits name (resolve names to GUIDs into
    /// `providers` too, e.g. with [`EventFilter::add_provider`]).
    pub provider_names: Vec<String>,
    pub ids: Vec<u16>,
    pub pids: Vec<u32>,
}

/// Does `e` belong to one of these providers (by GUID, or by TraceLogging traits name)? Empty lists
/// accept every provider.
pub fn provider_matches(providers: &[Guid], names: &[String], e: &EventRecord<'_>) -> bool {
    (providers.is_empty() && names.is_empty())
        || providers.contains(&e.provider)
        || (!names.is_empty()
            && e.traits_provider_name()
                .is_some_and(|n| names.iter().any(|x| x.eq_ignore_ascii_case(n))))
}

impl EventFilter {
    pub fn is_empty(&self) -> bool {
        self.begin.is_none()
            && self.end.is_none()
            && self.providers.is_empty()
            && self.provider_names.is_empty()
            && self.ids.is_empty()
            && self.pids.is_empty()
    }

    /// Adds a provider given as a GUID or a name. A name also selects the GUIDs `known` gives for it
    /// (e.g. manifest providers from a schema registry) and the GUID ETW derives from the name
    /// (TraceLogging and EventSource providers).
    pub fn add_provider(&mut self, spec: &str, known: impl Fn(&str) -> Vec<Guid>) {
        match spec.parse::<Guid>() {
            Ok(g) => self.providers.push(g),
            Err(_) => {
                self.providers.extend(known(spec));
                self.providers
                    .push(crate::tlg::provider_guid_from_name(spec));
                self.provider_names.push(spec.to_string());
            }
        }
    }

    #[inline]
    /// Is `timestamp` (UTC FILETIME) inside `begin..=end`?
    pub fn in_window(&self, timestamp: i64) -> bool {
        !(self.begin.is_some_and(|b| timestamp < b) || self.end.is_some_and(|x| timestamp > x))
    }

    pub fn matches(&self, e: &EventRecord<'_>) -> bool {
        if !self.in_window(e.timestamp) {
            return false;
        }
        provider_matches(&self.providers, &self.provider_names, e)
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
