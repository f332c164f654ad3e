//! Whole-file statistics (`etwkit stats`), computed in parallel by buffer with bounded memory.

use std::collections::BTreeMap;

use crate::time::format_rfc3339;

use super::logfile_header::HeaderField;

use super::reader::{EtlFile, ReadIssue};

/// The `etwkit stats` JSON object. Field names are a contract (README.md).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FileStats {
    pub file: String,
    pub size: u64,
    pub records: u64,
    /// Header type name (e.g. `EVENT_HEADER64`, `FULL_HEADER32`, `MESSAGE`) → count.
    pub header_types: BTreeMap<String, u64>,
    /// Provider GUID (lowercase, no braces) → count; kernel records under their group's GUID, classic
    /// records under their event class GUID.
    pub providers: BTreeMap<String, u64>,
    /// Provider GUID → the name `dump` gives its records' `provider_name`, for the providers of
    /// `providers` that have one: the file's own (TraceLogging provider traits) or, when decoding,
    /// the registry's (built-in manifests, `--manifest`, the file's embedded metadata).
    pub provider_names: BTreeMap<String, String>,
    /// Extended data item type name → count.
    pub ext_types: BTreeMap<String, u64>,
    pub buffers: u64,
    pub compressed_buffers: u64,
    pub bad_buffers: u64,
    pub bad_records: u64,
    /// EventsLost from the logfile header.
    pub events_lost: u32,
    /// BuffersLost from the logfile header.
    pub buffers_lost: u32,
    /// Buffers flagged EVENTS_LOST / BUFFER_LOST.
    pub buffers_flagged_lost: u64,
    pub pointer_size: u32,
    pub logger_name: String,
    /// From the logfile header (RFC 3339 UTC); `end_time` is null when the logger did not close the
    /// file; either is null when the header holds no time a logger writes there.
    pub start_time: Option<String>,
    pub end_time: Option<String>,
    pub first_event: Option<String>,
    pub last_event: Option<String>,
    pub closed_cleanly: bool,
    pub issues: Vec<ReadIssue>,
    pub issues_dropped: u64,
    /// Records that got properties from a schema (null when stats ran without decoding).
    pub decoded: Option<u64>,
    /// Provider GUID → records of it without a known layout (empty without decoding).
    pub undecoded_by_provider: BTreeMap<String, u64>,
    /// Records whose layout leaves payload bytes unread or runs past the payload (null without
    /// decoding); `dump` gives each a `decode_issue`.
    pub decode_issues: Option<u64>,
    /// Classic/kernel records whose layout fitted only with the other pointer size than their
    /// header's, and were decoded with it (null without decoding).
    pub pointer_size_fallbacks: Option<u64>,
}

struct Acc<A> {
    header_types: [u64; 32],
    providers: BTreeMap<crate::Guid, u64>,
    /// Providers named by their records' TraceLogging traits, and the last one looked up (a
    /// provider's records come in runs).
    named: BTreeMap<crate::Guid, String>,
    last_named: Option<crate::Guid>,
    ext_types: [u64; 20],
    first: i64,
    last: i64,
    extra: A,
}

/// Computes the statistics of a file (in parallel by buffer). The decoding counts stay null: a layer
/// above the container fills them (`decode::file_stats`).
pub fn file_stats(file: &EtlFile) -> FileStats {
    file_stats_and(file, || (), |_, _| {}, |_, _| ()).0
}

/// As [`file_stats`], folding `extra` work over every record in the same parallel pass (`fold`
/// sees the records of one buffer in order; `reduce` joins the results of two parts).
pub fn file_stats_and<A, I, F, R>(file: &EtlFile, init: I, fold: F, reduce: R) -> (FileStats, A)
where
    A: Send,
    I: Fn() -> A + Sync + Send,
    F: Fn(&mut A, &super::Record<'_>) + Sync + Send,
    R: Fn(A, A) -> A + Sync + Send,
{
    let (acc, summary) = file.par_fold(
        || Acc {
            header_types: [0; 32],
            providers: BTreeMap::new(),
            named: BTreeMap::new(),
            last_named: None,
            ext_types: [0; 20],
            first: i64::MAX,
            last: i64::MIN,
            extra: init(),
        },
        |a, r| {
            a.header_types[r.header_type.to_byte() as usize & 31] += 1;
            *a.providers.entry(r.provider).or_default() += 1;
            for item in r.ext_items() {
                a.ext_types[(item.ext_type as usize).min(19)] += 1;
                if item.ext_type == crate::event::ext_type::PROV_TRAITS
                    && a.last_named != Some(r.provider)
                {
                    if let (std::collections::btree_map::Entry::Vacant(v), Some(n)) =
                        (a.named.entry(r.provider), r.traits_provider_name())
                    {
                        v.insert(n.to_string());
                    }
                    a.last_named = Some(r.provider);
                }
            }
            a.first = a.first.min(r.timestamp);
            a.last = a.last.max(r.timestamp);
            fold(&mut a.extra, r);
        },
        |mut a, b| {
            for i in 0..32 {
                a.header_types[i] += b.header_types[i];
            }
            for i in 0..20 {
                a.ext_types[i] += b.ext_types[i];
            }
            for (k, v) in b.providers {
                *a.providers.entry(k).or_default() += v;
            }
            for (k, n) in b.named {
                a.named.entry(k).or_insert(n);
            }
            a.first = a.first.min(b.first);
            a.last = a.last.max(b.last);
            a.extra = reduce(a.extra, b.extra);
            a
        },
    );
    let h = file.header();
    let mut header_types = BTreeMap::new();
    for (i, &n) in acc.header_types.iter().enumerate() {
        if n > 0 {
            if let Some(t) = crate::event::HeaderType::from_byte(i as u8) {
                header_types.insert(t.name().to_string(), n);
            }
        }
    }
    let mut ext_types = BTreeMap::new();
    for (i, &n) in acc.ext_types.iter().enumerate() {
        if n > 0 {
            ext_types.insert(crate::event::ext_type::name(i as u16).to_string(), n);
        }
    }
    let header_ok = file.header_error().is_none();
    // Header fields holding values no logger writes are unknown (null).
    let known = |f: super::logfile_header::HeaderField| {
        header_ok && !file.header_damage().iter().any(|d| d.field == f)
    };
    let stats = FileStats {
        file: file.path().display().to_string(),
        size: file.len(),
        records: summary.records,
        header_types,
        providers: acc
            .providers
            .into_iter()
            .map(|(g, n)| (g.to_string(), n))
            .collect(),
        provider_names: acc
            .named
            .into_iter()
            .map(|(g, n)| (g.to_string(), n))
            .collect(),
        ext_types,
        buffers: summary.buffers,
        compressed_buffers: summary.compressed_buffers,
        bad_buffers: summary.bad_buffers,
        bad_records: summary.bad_records,
        events_lost: h.events_lost,
        buffers_lost: h.buffers_lost,
        buffers_flagged_lost: file
            .buffers()
            .iter()
            .filter(|b| {
                b.header.flags
                    & (super::buffer::flag::EVENTS_LOST | super::buffer::flag::BUFFER_LOST)
                    != 0
            })
            .count() as u64,
        pointer_size: h.logger_pointer_size() as u32,
        logger_name: h.logger_name.clone(),
        start_time: known(HeaderField::StartTime).then(|| format_rfc3339(h.start_time)),
        end_time: (known(HeaderField::EndTime) && h.end_time != 0)
            .then(|| format_rfc3339(h.end_time)),
        first_event: (acc.first != i64::MAX).then(|| format_rfc3339(acc.first)),
        last_event: (acc.last != i64::MIN).then(|| format_rfc3339(acc.last)),
        closed_cleanly: file.closed_cleanly(),
        issues: summary.issues,
        issues_dropped: summary.issues_dropped,
        decoded: None,
        undecoded_by_provider: BTreeMap::new(),
        decode_issues: None,
        pointer_size_fallbacks: None,
    };
    (stats, acc.extra)
}
