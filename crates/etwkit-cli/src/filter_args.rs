//! The event filter options `dump`, `relog` and `export` share.

use etwkit::filter::{EventFilter, TimeBound};
use etwkit::schema::Registry;

#[derive(clap::Args)]
pub struct FilterArgs {
    /// Keep events at or after this time: RFC 3339, or seconds from the trace start.
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
    /// The shared event filter: times resolved against `trace_start` (UTC FILETIME); a provider
    /// name selects every GUID `registry` knows by that name (built-in, the user's manifests, what
    /// the input files embed), plus the GUID ETW derives from the name (TraceLogging, EventSource).
    /// Every command that filters resolves names here, so one name selects the same events in each.
    pub fn to_filter(&self, trace_start: i64, registry: &Registry) -> anyhow::Result<EventFilter> {
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
            f.add_provider(p, |name| registry.provider_guids_named(name));
        }
        Ok(f)
    }

    /// Refuses `--begin` later than `--end`, which would keep nothing: compared as given when both
    /// are in the same unit (both RFC 3339, or both seconds from the start), and resolved against
    /// `trace_start` when they mix units and the start is known (`None`: each input has its own
    /// start, as in `export`, so a mixed pair is left to each file). Also refuses a bound that does
    /// not parse. Called before any work.
    pub fn check_times(&self, trace_start: Option<i64>) -> anyhow::Result<()> {
        let (Some(b), Some(e)) = (self.begin.as_deref(), self.end.as_deref()) else {
            for s in self.begin.iter().chain(&self.end) {
                TimeBound::parse(s).map_err(anyhow::Error::msg)?;
            }
            return Ok(());
        };
        let begin = TimeBound::parse(b).map_err(anyhow::Error::msg)?;
        let end = TimeBound::parse(e).map_err(anyhow::Error::msg)?;
        let later = match (begin, end, trace_start) {
            (TimeBound::Absolute(b), TimeBound::Absolute(e), _) => b > e,
            (TimeBound::FromStart(b), TimeBound::FromStart(e), _) => b > e,
            (b, e, Some(start)) => b.resolve(start) > e.resolve(start),
            (_, _, None) => false,
        };
        if later {
            let mixed = matches!(
                (begin, end),
                (TimeBound::Absolute(_), TimeBound::FromStart(_))
                    | (TimeBound::FromStart(_), TimeBound::Absolute(_))
            );
            anyhow::bail!(
                "--begin {b} is later than --end {e}{}, so no event could be kept",
                if mixed {
                    " (seconds counted from the trace start)"
                } else {
                    ""
                }
            );
        }
        Ok(())
    }

    /// Whether no option was given (every event is kept).
    pub fn is_empty(&self) -> bool {
        self.begin.is_none()
            && self.end.is_none()
            && self.provider.is_empty()
            && self.id.is_empty()
            && self.pid.is_empty()
    }

    /// The `--provider` names `registry` does not know (built-in, --manifest, or named in the file):
    /// only a TraceLogging or EventSource provider of that name can match them.
    pub fn unknown_providers(&self, registry: &Registry) -> Vec<String> {
        self.provider
            .iter()
            .filter(|p| {
                p.parse::<etwkit::Guid>().is_err() && registry.provider_guids_named(p).is_empty()
            })
            .cloned()
            .collect()
    }

    /// Says on stderr, in one sentence, that a filter kept nothing (a misspelt provider name
    /// otherwise looks like an empty trace); `unknown` is [`FilterArgs::unknown_providers`].
    pub fn warn_if_nothing_kept(&self, kept: u64, unknown: &[String]) {
        if kept > 0 || self.is_empty() {
            return;
        }
        if unknown.is_empty() {
            eprintln!("etwkit: warning: no event matched the filter");
        } else {
            eprintln!(
                "etwkit: warning: no event matched the filter; no provider named {} is known (built-in, --manifest, or named in the file)",
                unknown
                    .iter()
                    .map(|n| format!("{n:?}"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            );
        }
    }
}
