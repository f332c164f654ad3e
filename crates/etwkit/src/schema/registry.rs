//! The schema registry: every known layout, keyed by what identifies it, and the lookup that picks the
//! right key for a record.
//!
//! * TraceLogging records (an EVENT_SCHEMA_TL item) → a schema parsed from the items, cached by
//!   (provider GUID, traits bytes, metadata bytes) — never by event id.
//! * Kernel records (SYSTEM/COMPACT/PERFINFO) and classic records (FULL_HEADER/INSTANCE) →
//!   `SchemaKey::Mof { group or class GUID, opcode, version }`.
//! * Other EVENT_HEADER records → `SchemaKey::Manifest { provider, id, version }`.
//!
//! When two sources describe the same key, the more specific one wins: a user's manifest over
//! metadata embedded in the file (EventInfo or EventSource manifest), over built-in tables.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use super::{
    manifest, tdh, tracelogging, EventSchema, SchemaError, SchemaKey, SchemaSource, ValueMap,
};
use crate::etl::EtlFile;
use crate::event::{EventRecord, HeaderType};
use crate::guid::Guid;

/// A small multiplicative hasher (the FxHash scheme) for the per-record lookups: the keys are GUIDs,
/// ids and addresses chosen by the trace, not by an attacker of a server, and SipHash showed up at 8%
/// of a decode profile.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Whole words read as they are; only a last partial one is copied into a padded word.
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.write_u64(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }
    fn write_u16(&mut self, i: u16) {
        self.write_u64(i as u64);
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<FastHasher>>;

fn priority(s: SchemaSource) -> u8 {
    match s {
        SchemaSource::UserManifest => 3,
        SchemaSource::Embedded | SchemaSource::EventSourceManifest => 2,
        SchemaSource::Builtin | SchemaSource::KernelMof => 1,
        SchemaSource::TraceLogging => 0,
    }
}

/// All known layouts.
#[derive(Default)]
pub struct Registry {
    schemas: FastMap<SchemaKey, Arc<EventSchema>>,
    provider_names: FastMap<Guid, Arc<str>>,
    maps: HashMap<(Guid, String), Arc<ValueMap>>,
    tl: RwLock<FastMap<Box<[u8]>, Arc<EventSchema>>>,
    /// Fall back to the built-in provider manifests (`schema::builtin::manifests`) on a miss.
    builtin_manifests: bool,
}

/// What [`Registry::learn_from_file`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LearnSummary {
    /// TRACE_EVENT_INFO records read (manifest and MOF layouts).
    pub event_infos: usize,
    /// EVENT_MAP_INFO records read.
    pub map_infos: usize,
    /// Complete EventSource manifests parsed.
    pub eventsource_manifests: usize,
    /// Schemas inserted (after priority rules).
    pub schemas_added: usize,
    /// Metadata that could not be used, with the reason.
    pub errors: Vec<String>,
}

/// Collects embedded metadata from records seen in any order; [`Learner::finish`] registers it.
#[derive(Default)]
pub struct Learner {
    infos: Vec<tdh::EventInfo>,
    maps: Vec<(Guid, ValueMap)>,
    /// EventSource manifest chunks by (provider, pid).
    chunks: HashMap<(Guid, u32), Vec<Option<Vec<u8>>>>,
    done_manifests: Vec<(Guid, String)>,
    /// (provider, length, byte sum) of manifests already registered: EventSource re-sends its manifest.
    seen_manifests: std::collections::HashSet<(Guid, usize, u64)>,
    summary: LearnSummary,
}

/// The on-disk markers of an EventSource manifest chunk (Id/Task 0xFFFE, Opcode 254).
pub fn is_eventsource_manifest(rec: &EventRecord<'_>) -> bool {
    rec.header_type.is_event_header() && rec.descriptor.id == 0xFFFE && rec.descriptor.opcode == 254
}

impl Learner {
    /// Whether collected metadata waits for [`Learner::flush`].
    pub fn has_pending(&self) -> bool {
        !self.infos.is_empty() || !self.maps.is_empty() || !self.done_manifests.is_empty()
    }

    /// Registers what was collected so far (incomplete EventSource manifests stay pending).
    pub fn flush(&mut self, reg: &mut Registry) {
        for (provider, map) in self.maps.drain(..) {
            reg.maps.insert((provider, map.name.clone()), Arc::new(map));
        }
        for mut info in self.infos.drain(..) {
            let provider = info.schema.provider;
            tdh::resolve_maps(provider, &mut info.schema.properties, &reg.maps);
            if reg.insert(info.key, info.schema) {
                self.summary.schemas_added += 1;
            }
        }
        for (provider, xml) in std::mem::take(&mut self.done_manifests) {
            let fingerprint = (
                provider,
                xml.len(),
                xml.as_bytes().iter().map(|&b| b as u64).sum::<u64>(),
            );
            if !self.seen_manifests.insert(fingerprint) {
                continue;
            }
            match manifest::parse_manifest(&xml, SchemaSource::EventSourceManifest) {
                Ok(m) => {
                    self.summary.eventsource_manifests += 1;
                    self.summary.schemas_added += reg.add_manifest(m);
                }
                Err(e) => self
                    .summary
                    .errors
                    .push(format!("EventSource manifest from {provider}: {e}")),
            }
        }
    }

    /// What was learned so far.
    pub fn summary(&self) -> &LearnSummary {
        &self.summary
    }

    /// Whether `rec` is embedded metadata (EventInfo/EventMapInfo record or EventSource manifest chunk).
    pub fn is_metadata(rec: &EventRecord<'_>) -> bool {
        (rec.header_type.is_classic() && rec.provider == tdh::METADATA_CLASS)
            || is_eventsource_manifest(rec)
    }

    /// Looks at one record; keeps it if it is embedded metadata.
    pub fn observe(&mut self, rec: &EventRecord<'_>) {
        if rec.header_type.is_classic() && rec.provider == tdh::METADATA_CLASS {
            match rec.descriptor.opcode {
                tdh::OPCODE_EVENT_INFO => match tdh::parse_event_info(&rec.payload) {
                    Ok(Some(info)) => {
                        self.summary.event_infos += 1;
                        self.infos.push(info);
                    }
                    Ok(None) => self.summary.event_infos += 1,
                    Err(e) => self.summary.errors.push(e.to_string()),
                },
                tdh::OPCODE_MAP_INFO => match tdh::parse_map_info(&rec.payload) {
                    Ok(m) => {
                        self.summary.map_infos += 1;
                        self.maps.push(m);
                    }
                    Err(e) => self.summary.errors.push(e.to_string()),
                },
                _ => {}
            }
        } else if is_eventsource_manifest(rec) {
            self.observe_chunk(rec);
        }
    }

    fn observe_chunk(&mut self, rec: &EventRecord<'_>) {
        let p = &rec.payload;
        if p.len() < 8 {
            self.summary.errors.push(format!(
                "EventSource manifest chunk of {} bytes from provider {}",
                p.len(),
                rec.provider
            ));
            return;
        }
        if p[0] != 1 || p[3] != 0x5B {
            self.summary.errors.push(format!(
                "EventSource manifest from {}: format {} magic 0x{:02x} not understood",
                rec.provider, p[0], p[3]
            ));
            return;
        }
        let total = u16::from_le_bytes([p[4], p[5]]) as usize;
        let n = u16::from_le_bytes([p[6], p[7]]) as usize;
        if total == 0 || n >= total {
            self.summary.errors.push(format!(
                "EventSource manifest from {}: chunk {n} of {total}",
                rec.provider
            ));
            return;
        }
        let key = (rec.provider, rec.pid);
        let slots = self.chunks.entry(key).or_default();
        if slots.len() != total {
            *slots = vec![None; total];
        }
        slots[n] = Some(p[8..].to_vec());
        if slots.iter().all(Option::is_some) {
            let bytes: Vec<u8> = slots.drain(..).flatten().flatten().collect();
            self.chunks.remove(&key);
            match String::from_utf8(bytes) {
                Ok(xml) => self.done_manifests.push((rec.provider, xml)),
                Err(e) => self.summary.errors.push(format!(
                    "EventSource manifest from {} is not UTF-8: {e}",
                    rec.provider
                )),
            }
        }
    }

    /// Registers what was collected.
    pub fn finish(mut self, reg: &mut Registry) -> LearnSummary {
        self.flush(reg);
        for (k, _) in self.chunks.drain() {
            self.summary.errors.push(format!(
                "EventSource manifest from {} (pid {}) is incomplete",
                k.0, k.1
            ));
        }
        self.summary
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("schemas", &self.schemas.len())
            .field("provider_names", &self.provider_names.len())
            .field("maps", &self.maps.len())
            .field("tracelogging_cached", &self.tracelogging_cached())
            .finish()
    }
}

/// Why [`Registry::add_manifest_file`] failed: the file could not be read (no byte of it was), or
/// its XML is not a manifest etwkit takes ([`SchemaError`], with where in the file). Each names the
/// file once.
#[derive(Debug, thiserror::Error)]
pub enum ManifestFileError {
    #[error("cannot read the instrumentation manifest {}: {source}", path.display())]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("the instrumentation manifest {} is a directory", path.display())]
    IsDirectory { path: std::path::PathBuf },
    #[error("the instrumentation manifest {}: {} (at byte {})", path.display(), source.reason, source.offset)]
    Parse {
        path: std::path::PathBuf,
        source: SchemaError,
    },
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// GUIDs of the providers known by this name (case-insensitive): built-in, manifest, embedded.
    pub fn provider_guids_named(&self, name: &str) -> Vec<Guid> {
        let mut v: Vec<Guid> = self
            .provider_names
            .iter()
            .filter(|(_, n)| n.eq_ignore_ascii_case(name))
            .map(|(g, _)| *g)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// A registry holding every built-in layout (Winsock-AFD, heap, kernel MOF, KernelTraceControl,
    /// the built-in Windows provider manifests) and the built-in provider names.
    pub fn with_builtins() -> Registry {
        let mut r = Registry::new();
        // Provider manifests are looked up lazily (after every keyed schema, so a hand-checked
        // table such as winsock-afd.json, embedded metadata or a user's manifest wins a shared key).
        r.builtin_manifests = true;
        for (guid, name) in crate::schema::builtin::manifests::provider_names() {
            r.insert_provider_name(guid, name);
        }
        for (key, schema) in crate::schema::builtin::schemas() {
            r.insert(key, schema);
        }
        for (guid, name) in crate::schema::builtin::provider_names() {
            r.insert_provider_name(guid, name);
        }
        r
    }

    /// Adds a layout. A schema from a more specific source replaces one from a less specific source
    /// (user manifest > embedded > built-in); equal sources: the newer one wins. Returns whether it was
    /// stored. Layouts the producer's own description gets wrong are mended first ([`super::mend`]).
    /// A layout without an event name (the TRACE_EVENT_INFO that KernelTraceControl embeds names
    /// tasks and opcodes only) takes the name another source gives the same key: a layout of the
    /// key already filed (an EventSource's own manifest in the trace), else, with the built-in
    /// manifests, the built-in manifest's — the .NET runtime's events are `GCStart_V1` whether the
    /// trace embeds their metadata or not. A named layout that does not replace the one filed
    /// still names it.
    pub fn insert(&mut self, key: SchemaKey, mut schema: EventSchema) -> bool {
        super::mend::mend(&key, &mut schema);
        if let Some(old) = self.schemas.get_mut(&key) {
            if priority(old.source) > priority(schema.source) {
                // The layout kept may still take this one's name for the event.
                if old.event_name.is_none() && schema.event_name.is_some() {
                    Arc::make_mut(old).event_name = schema.event_name;
                }
                return false;
            }
            if schema.event_name.is_none() {
                schema.event_name.clone_from(&old.event_name);
            }
        }
        if schema.event_name.is_none() && self.builtin_manifests {
            if let Some(b) = crate::schema::builtin::manifests::lookup(&key) {
                schema.event_name.clone_from(&b.event_name);
            }
        }
        if let Some(n) = &schema.provider_name {
            let pk = match key {
                SchemaKey::Manifest { provider, .. } => provider,
                SchemaKey::Mof { .. } => schema.provider,
            };
            self.provider_names
                .entry(pk)
                .or_insert_with(|| Arc::from(n.as_str()));
        }
        self.schemas.insert(key, Arc::new(schema));
        true
    }

    /// Names a provider (or kernel group / MOF class) GUID.
    pub fn insert_provider_name(&mut self, provider: Guid, name: impl Into<String>) {
        self.provider_names.insert(provider, Arc::from(name.into()));
    }

    /// Adds a value/bit map for a provider (for schemas inserted later that refer to it by name).
    pub fn insert_map(&mut self, provider: Guid, map: ValueMap) {
        self.maps
            .insert((provider, map.name.clone()), Arc::new(map));
    }

    /// The layout filed under `key`: a keyed schema, else (with built-ins) a built-in provider
    /// manifest's.
    pub fn get(&self, key: &SchemaKey) -> Option<Arc<EventSchema>> {
        self.schemas.get(key).cloned().or_else(|| {
            self.builtin_manifests
                .then(|| crate::schema::builtin::manifests::lookup(key))
                .flatten()
        })
    }

    pub fn len(&self) -> usize {
        self.schemas.len()
    }

    pub fn is_empty(&self) -> bool {
        self.schemas.is_empty()
    }

    /// All keyed schemas (not the TraceLogging cache, nor the built-in provider manifests, which
    /// [`Registry::get`] consults lazily).
    pub fn iter(&self) -> impl Iterator<Item = (&SchemaKey, &Arc<EventSchema>)> {
        self.schemas.iter()
    }

    /// Registers every event of a parsed manifest; returns how many were stored.
    pub fn add_manifest(&mut self, m: manifest::Manifest) -> usize {
        for (g, n) in m.providers {
            self.provider_names.insert(g, Arc::from(n));
        }
        let mut added = 0;
        for (k, s) in m.events {
            added += self.insert(k, s) as usize;
        }
        added
    }

    /// Reads an instrumentation manifest (`--manifest FILE.man`).
    pub fn add_manifest_file(
        &mut self,
        path: impl AsRef<Path>,
    ) -> Result<usize, ManifestFileError> {
        let path = path.as_ref();
        if path.is_dir() {
            return Err(ManifestFileError::IsDirectory {
                path: path.to_path_buf(),
            });
        }
        let xml = std::fs::read_to_string(path).map_err(|source| ManifestFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let m = manifest::parse_manifest(&xml, SchemaSource::UserManifest).map_err(|source| {
            ManifestFileError::Parse {
                path: path.to_path_buf(),
                source,
            }
        })?;
        Ok(self.add_manifest(m))
    }

    /// Pre-scan: collects the file's embedded TRACE_EVENT_INFO / EVENT_MAP_INFO records and EventSource
    /// manifests before decoding (metadata follows the first instance it describes in file order).
    pub fn learn_from_file(&mut self, file: &EtlFile) -> LearnSummary {
        self.learn_from_file_with(file, false)
    }

    /// As [`Registry::learn_from_file`], for a registry about to decode the file: the built-in
    /// manifests of the providers the scan meets are parsed during it, on its threads (see
    /// [`super::builtin::manifests::warm`]).
    pub fn learn_from_file_to_decode(&mut self, file: &EtlFile) -> LearnSummary {
        self.learn_from_file_with(file, true)
    }

    /// The metadata records are few: picked out on every core (the others passed over by their
    /// heads, unbuilt), then learnt in file order.
    fn learn_from_file_with(&mut self, file: &EtlFile, warm: bool) -> LearnSummary {
        use super::builtin::manifests::warm_record;
        let metadata_head = |h: &crate::etl::record::Head| {
            if warm {
                warm_record(h.header_type, &h.provider);
            }
            (h.header_type.is_classic() && h.provider == tdh::METADATA_CLASS)
                || (h.header_type.is_event_header() && h.id == 0xFFFE && h.opcode == 254)
        };
        let (picked, _) =
            file.par_map_buffers_where(metadata_head, |v: &mut Vec<EventRecord<'static>>, r| {
                if warm {
                    warm_record(r.event.header_type, &r.event.provider);
                }
                if Learner::is_metadata(&r.event) {
                    v.push(r.event.to_owned_record());
                }
            });
        let mut l = Learner::default();
        for e in picked.iter().flatten() {
            l.observe(e);
        }
        l.finish(self)
    }

    /// The registered name of a provider (or kernel group / MOF class) GUID.
    pub fn name_of_provider(&self, provider: &Guid) -> Option<&str> {
        self.provider_names.get(provider).map(|n| &**n)
    }

    /// Provider name for a record: TraceLogging traits, else a registered name.
    pub fn provider_name(&self, rec: &EventRecord<'_>) -> Option<Arc<str>> {
        if let Some(n) = rec.traits_provider_name() {
            return Some(Arc::from(n));
        }
        self.provider_names.get(&rec.provider).cloned()
    }

    /// The key a non-TraceLogging record's layout is filed under (`None` for WPP and other records
    /// with no layout identity).
    pub fn key_for(rec: &EventRecord<'_>) -> Option<SchemaKey> {
        let d = &rec.descriptor;
        if rec.header_type.is_kernel() || rec.header_type.is_classic() {
            Some(SchemaKey::Mof {
                class: rec.provider,
                opcode: d.opcode,
                version: d.version,
            })
        } else if rec.header_type.is_event_header() {
            Some(SchemaKey::Manifest {
                provider: rec.provider,
                id: d.id,
                version: d.version,
            })
        } else {
            None
        }
    }

    /// The layout of a record, if known.
    pub fn lookup(&self, rec: &EventRecord<'_>) -> Option<Arc<EventSchema>> {
        self.try_lookup(rec).ok().flatten()
    }

    /// As [`Registry::lookup`], but says why a TraceLogging record's own metadata is unusable.
    pub fn try_lookup(
        &self,
        rec: &EventRecord<'_>,
    ) -> Result<Option<Arc<EventSchema>>, SchemaError> {
        if rec.header_type == HeaderType::Message {
            return Ok(None);
        }
        if rec.header_type.is_event_header() {
            if let (Some(meta), traits) = rec.tracelogging_items() {
                return self.tl_schema(rec.provider, traits, meta).map(Some);
            }
        }
        Ok(Self::key_for(rec).and_then(|k| self.get(&k)))
    }

    fn tl_schema(
        &self,
        provider: Guid,
        traits: Option<&[u8]>,
        meta: &[u8],
    ) -> Result<Arc<EventSchema>, SchemaError> {
        let t = traits.unwrap_or(&[]);
        let mut key = Vec::with_capacity(16 + 2 + t.len() + meta.len());
        key.extend_from_slice(&provider.to_le_bytes());
        key.extend_from_slice(&(t.len() as u16).to_le_bytes());
        key.extend_from_slice(t);
        key.extend_from_slice(meta);
        if let Ok(c) = self.tl.read() {
            if let Some(s) = c.get(key.as_slice()) {
                return Ok(s.clone());
            }
        }
        let s = Arc::new(tracelogging::schema_from_items(provider, traits, meta)?);
        if let Ok(mut c) = self.tl.write() {
            c.insert(key.into_boxed_slice(), s.clone());
        }
        Ok(s)
    }

    /// Number of distinct TraceLogging schemas parsed so far.
    pub fn tracelogging_cached(&self) -> usize {
        self.tl.read().map(|c| c.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(source: SchemaSource, name: Option<&str>, field: &str) -> EventSchema {
        EventSchema {
            provider: Guid::from_str_const("11111111-2222-3333-4444-555555555555"),
            provider_name: None,
            event_name: name.map(str::to_string),
            task_name: None,
            opcode_name: None,
            keywords_name: None,
            properties: vec![super::super::Property::scalar(
                field,
                super::super::types::in_type::UINT32,
                0,
            )],
            source,
        }
    }

    #[test]
    fn a_layout_without_an_event_name_takes_another_source_s() {
        let key = SchemaKey::Manifest {
            provider: Guid::from_str_const("11111111-2222-3333-4444-555555555555"),
            id: 7,
            version: 0,
        };
        let field = |r: &Registry| r.get(&key).unwrap().properties[0].name.clone();
        // The trace's EventSource manifest names the event; the TRACE_EVENT_INFO filed after it
        // (same priority: it replaces the layout) does not.
        let mut r = Registry::new();
        r.insert(
            key,
            layout(SchemaSource::EventSourceManifest, Some("Tick"), "A"),
        );
        assert!(r.insert(key, layout(SchemaSource::Embedded, None, "B")));
        let s = r.get(&key).unwrap();
        assert_eq!(
            (s.event_name.as_deref(), field(&r).as_str()),
            (Some("Tick"), "B")
        );
        // A user's manifest without the name is kept, named by the lower-priority layout after it.
        let mut r = Registry::new();
        r.insert(key, layout(SchemaSource::UserManifest, None, "U"));
        assert!(!r.insert(key, layout(SchemaSource::Builtin, Some("Tock"), "X")));
        let s = r.get(&key).unwrap();
        assert_eq!(
            (s.event_name.as_deref(), field(&r).as_str()),
            (Some("Tock"), "U")
        );
        // A layout's own name is never replaced.
        assert!(!r.insert(key, layout(SchemaSource::Builtin, Some("Other"), "X")));
        assert_eq!(r.get(&key).unwrap().event_name.as_deref(), Some("Tock"));
    }
}
