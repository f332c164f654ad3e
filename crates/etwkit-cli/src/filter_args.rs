//! The event filter options `dump` and `relog` share.

use etwkit::filter::{EventFilter, TimeBound};
use etwkit::Guid;

#[derive(clap::Args)]
pub struct FilterArgs {
    /// Keep events at or after this time: RFC 3339, or seconds from the trace start (the earliest
    /// one when there are several inputs).
    #[arg(long)]
    pub begin: Option<String>,
    /// Keep events at or before this time: RFC 3339, or seconds from the trace start.
    #[arg(long)]
    pub end: Option<String>,
    /// Keep events of this provider: a GUID or a name (manifest, TraceLogging or EventSource;
    /// repeatable).
    #[arg(long)]
    pub provider: Vec<String>,
    /// Keep events with this id (repeatable).
    #[arg(long)]
    pub id: Vec<u16>,
    /// Keep events of this process id (repeatable).
    #[arg(long)]
    pub pid: Vec<u32>,
}

impl FilterArgs {
    /// The shared event filter: times resolved against `trace_start` (UTC FILETIME), provider names
    /// resolved with `known` (e.g. a schema registry's names) and the name-derived GUID.
    pub fn to_filter(
        &self,
        trace_start: i64,
        known: impl Fn(&str) -> Vec<Guid>,
    ) -> anyhow::Result<EventFilter> {
        let bound = |s: Option<&str>| -> anyhow::Result<Option<i64>> {
            s.map(|s| {
                TimeBound::parse(s)
                    .map(|b| b.resolve(trace_start))
                    .map_err(anyhow::Error::msg)
            })
            .transpose()
        };
        let mut f = EventFilter {
            begin: bound(self.begin.as_deref())?,
            end: bound(self.end.as_deref())?,
            ids: self.id.clone(),
            pids: self.pid.clone(),
            ..Default::default()
        };
        for p in &self.provider {
            f.add_provider(p, &known);
        }
        Ok(f)
    }
}
