//! Decoding counts for `etwkit stats`.

use crate::event::EventRecord;
use crate::guid::Guid;

use super::{DecodedEvent, Decoder};

/// Counts for `etwkit stats`: records, records with properties, and the undecoded ones by provider
/// (name when known, else the GUID).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DecodeStats {
    pub records: u64,
    pub decoded: u64,
    pub undecoded_by_provider: std::collections::BTreeMap<String, u64>,
    /// Records whose layout leaves bytes unread or runs short.
    pub decode_issues: u64,
    /// Records decoded with the other pointer size than their header's.
    pub pointer_size_fallbacks: u64,
}

impl DecodeStats {
    pub fn add(&mut self, rec: &EventRecord<'_>, d: &DecodedEvent) {
        self.records += 1;
        self.decode_issues += d.decode_issue.is_some() as u64;
        self.pointer_size_fallbacks += d.layout_pointer_size.is_some() as u64;
        if d.is_decoded() {
            self.decoded += 1;
        } else {
            let k = d
                .provider_name
                .as_deref()
                .map(str::to_string)
                .unwrap_or_else(|| rec.provider.to_string());
            *self.undecoded_by_provider.entry(k).or_default() += 1;
        }
    }
    pub fn merge(&mut self, o: DecodeStats) {
        self.records += o.records;
        self.decoded += o.decoded;
        self.decode_issues += o.decode_issues;
        self.pointer_size_fallbacks += o.pointer_size_fallbacks;
        for (k, v) in o.undecoded_by_provider {
            *self.undecoded_by_provider.entry(k).or_default() += v;
        }
    }
}

/// `etwkit stats` with the decoding counts: which records `decoder` decodes (in the same parallel
/// pass as the container counts, checking layouts without building values).
pub fn file_stats(file: &crate::etl::EtlFile, decoder: &Decoder) -> crate::etl::stats::FileStats {
    #[derive(Default)]
    struct Acc {
        decoded: u64,
        issues: u64,
        fallbacks: u64,
        undecoded: std::collections::BTreeMap<Guid, u64>,
        cache: super::CheckCache,
    }
    let (mut s, a) = crate::etl::stats::file_stats_and(
        file,
        Acc::default,
        |a: &mut Acc, r| {
            let c = decoder.check_with(&r.event, &mut a.cache);
            if c.decoded {
                a.decoded += 1;
            } else {
                *a.undecoded.entry(r.provider).or_default() += 1;
            }
            a.issues += c.issue as u64;
            a.fallbacks += c.pointer_size_fallback as u64;
        },
        |mut a, b| {
            a.decoded += b.decoded;
            a.issues += b.issues;
            a.fallbacks += b.fallbacks;
            for (k, v) in b.undecoded {
                *a.undecoded.entry(k).or_default() += v;
            }
            a
        },
    );
    // Names from the registry where the file's own (TraceLogging traits) gave none, as `dump`
    // names the records.
    for g in s.providers.keys() {
        if !s.provider_names.contains_key(g) {
            let name = g
                .parse::<Guid>()
                .ok()
                .and_then(|g| decoder.registry().name_of_provider(&g));
            if let Some(n) = name {
                s.provider_names.insert(g.clone(), n.to_string());
            }
        }
    }
    s.decoded = Some(a.decoded);
    s.decode_issues = Some(a.issues);
    s.pointer_size_fallbacks = Some(a.fallbacks);
    s.undecoded_by_provider = a
        .undecoded
        .into_iter()
        .map(|(g, n)| (g.to_string(), n))
        .collect();
    s
}
