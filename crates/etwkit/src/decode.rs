//! Payload + schema + pointer size → named values.
//!
//! [`decode_properties`] walks a payload against an [`EventSchema`]; [`Decoder`] adds the registry
//! lookup, per-schema plans cached by schema, names, STRING_ONLY and WPP records, and stacks.
//!
//! One concept per module: `value` (decoded values), `plan` (a schema compiled once and the one
//! payload walk that decodes, measures or drives a visitor), `visit` (the typed
//! [`PropertyVisitor`] a walk drives; JSON text is one, in the sinks), `scalar` (one in-type's bytes
//! and value), `bitmaps` (value-map names), `records` (MetaData and WPP records), `stats` (the
//! counts of `etwkit stats`); `stacks`, `threads` and `paths` hold what a file's pre-scan learns.
//!
//! ```
//! use etwkit::decode::{Decoder, Value};
//! use etwkit::schema::Registry;
//! use etwkit::tlg::{event_record, InType, OutType, TlInstance, TlPayload, TlSchemaBuilder};
//!
//! // One decoder serves files and live sessions: here a record as a live session delivers it.
//! let schema = TlSchemaBuilder::new("Contoso-Net", "Connect")
//!     .field("Port", InType::U16, OutType::Port)
//!     .field("Status", InType::U32, OutType::Win32Error)
//!     .build()
//!     .unwrap();
//! let mut p = TlPayload::new();
//! p.push_u16(443u16.to_be()).push_u32(10061);
//! let rec = event_record(&schema, &TlInstance::default(), p.as_bytes());
//!
//! let d = Decoder::new(Registry::with_builtins()).decode(&rec);
//! assert_eq!(d.event_name.as_deref(), Some("Connect"));
//! assert_eq!(d.properties.get("Port"), Some(&Value::Port(443)));
//! assert_eq!(d.properties.get("Status"), Some(&Value::Win32Error(10061)));
//! let mut json = Vec::new();
//! d.properties.write_json(&mut json);
//! assert_eq!(String::from_utf8(json).unwrap(), r#"{"Port":443,"Status":10061}"#);
//! ```
//!
//! # JSON
//! [`Value`] and [`Properties`] implement `serde::Serialize`; properties keep schema order. The
//! rendering is fixed:
//! * Integers (8 to 64 bits, signed or not, PID/TID, ports, Win32 error codes) are JSON numbers,
//!   written exactly as serde_json writes `u64`/`i64` — all 64 bits, no rounding. A consumer that
//!   parses numbers into IEEE doubles (JavaScript) loses precision above 2^53; the hex renderings
//!   below avoid that for the values where it matters most.
//! * Hex-typed integers (HexInt8..64, TDH HEXINT32/64 in-types), pointers, SIZE_T and code pointers
//!   are strings `"0x…"` (lowercase, no padding). NTSTATUS and HRESULT are `"0x%08x"` strings.
//! * Floats are numbers (NaN/infinity as `null`); booleans `true`/`false`.
//! * GUIDs are lowercase `8-4-4-4-12` strings; binaries `"0x…"` hex strings (`"0x"` when empty).
//! * IPv4/IPv6 addresses, socket addresses (`1.2.3.4:80`, `[::1]:443`), SIDs (`S-1-5-18`) are strings.
//! * FILETIMEs are RFC 3339 UTC strings (100 ns precision); SYSTEMTIMEs `YYYY-MM-DDTHH:MM:SS.mmm`
//!   (no zone: the struct does not say which).
//! * valueMap/bitMap values are their names. Bitmaps list the set flags in ascending value order,
//!   unnamed bits appended as hex, the way TraceEvent shows them: for kernel classes, the .NET
//!   runtime and Kernel-File (which TraceEvent decodes with compiled parsers) as .NET prints a
//!   `[Flags]` enum —
//!   the largest entries covering unclaimed bits first, joined with `, ` (`"ReadWrite, Delete"`);
//!   for other providers' manifests every set flag, joined with `|`;
//!   a value with no name in its map stays a number.
//! * Arrays are JSON arrays; structs are objects.
//!
//! ANSI strings are read as UTF-8 when valid, otherwise as Latin-1.

mod bitmaps;
mod compiled;
pub mod heap;
pub mod lznt1;
pub mod paths;
mod plan;
pub mod processes;
mod records;
mod scalar;
pub mod stacks;
mod stats;
pub mod symbols;
pub mod threads;
mod value;
pub mod view;
mod visit;

pub use plan::{decode_properties, Plan};
pub use stats::{file_stats, DecodeStats};
pub use value::{DecodeError, Properties, Value};
pub use view::{DosPath, EventView, Local};
pub use visit::{PropertiesBuilder, PropertyVisitor, Tee, TextFormat, KEY_BLOCK};

use std::sync::{Arc, RwLock};

use crate::event::{flags, EventRecord, HeaderType, Stack};
use crate::schema::{EventSchema, Registry, SchemaSource};

use plan::{Cursor, PayloadIds};
use records::{metadata_record, wpp_fields};
use scalar::{cstr16, utf16};

/// A decoded event: names and values (what `etwkit dump` prints under `properties`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct DecodedEvent {
    pub provider_name: Option<Arc<str>>,
    pub event_name: Option<Arc<str>>,
    pub task_name: Option<Arc<str>>,
    pub opcode_name: Option<Arc<str>>,
    /// Empty when no layout is known (see `undecoded`).
    pub properties: Properties,
    /// Where the layout came from; `None` when undecoded.
    pub source: Option<SchemaSource>,
    /// Why the record has no (or only partial) properties; `None` when fully decoded.
    pub undecoded: Option<String>,
    /// Payload bytes after the last property (0 when the schema consumed the payload exactly).
    /// TDH ignores them too; they are reported so that nothing is lost silently.
    #[serde(skip_serializing_if = "is_zero")]
    pub unread_bytes: usize,
    /// The layout does not fit the payload: bytes left unread, or a property running past the end
    /// (then `undecoded` says the same). `None` when the payload was consumed exactly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_issue: Option<String>,
    /// Set when the layout fitted only with the other pointer size than the record header's (then
    /// the properties were decoded with it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout_pointer_size: Option<u8>,
    /// For a kernel record whose header carries no process or thread id: the ids filled in, and
    /// where they came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ids: Option<Ids>,
    /// The image name of the record's process (its pid, shown or attributed), by the trace's
    /// kernel Process events (see [`Decoder::process_name`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process_name: Option<Arc<str>>,
    /// A file path field (FileName, OpenPath; as logged, an NT path) and its DOS form, when the
    /// trace's own volume mapping (KernelTraceControl VolumeMapping events) covers it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dos_path: Option<(Arc<str>, String)>,
    /// The record's stack: its EVENT_HEADER stack item, with kernel StackWalk frames appended when
    /// the decoder has a [`stacks::StackIndex`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack: Option<Stack>,
}

/// Process and thread ids attributed to a record (`u32::MAX`: still unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Ids {
    pub pid: u32,
    pub tid: u32,
    /// Where `pid` came from; `None`: the record header.
    pub pid_source: Option<IdSource>,
    /// Where `tid` came from; `None`: the record header.
    pub tid_source: Option<IdSource>,
}

/// Where an attributed id came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdSource {
    /// A field of the payload (ProcessId, ThreadId, TTID, StackProcess...).
    Payload,
    /// The trace's thread table (kernel Thread events), from the thread id.
    ThreadTable,
}

impl IdSource {
    pub fn name(self) -> &'static str {
        match self {
            IdSource::Payload => "payload",
            IdSource::ThreadTable => "thread_table",
        }
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl DecodedEvent {
    /// True when the record got properties from a schema (fully, or partially before an error).
    pub fn is_decoded(&self) -> bool {
        self.source.is_some()
    }
}

/// Plans by schema address; the schema is kept alive beside its plan so the address stays unique.
type PlanCache = crate::schema::registry::FastMap<usize, (Arc<EventSchema>, Arc<Plan>)>;

/// Owns a [`Registry`] and decodes records; plans are cached per schema.
#[derive(Default)]
pub struct Decoder {
    registry: Registry,
    plans: RwLock<PlanCache>,
    stacks: Option<stacks::StackIndex>,
    threads: Option<threads::ThreadTable>,
    processes: Option<processes::ProcessTable>,
    volumes: Option<paths::VolumeMap>,
    live: crate::schema::registry::Learner,
}

/// Records the file pre-scan of [`Decoder::for_file`] learns from: kernel StackWalk events (stacks and
/// stack keys), kernel Thread events (the thread table), kernel Process events that name a process
/// (the process table), KernelTraceControl VolumeMapping (DOS paths) and embedded metadata
/// (EventInfo/EventMapInfo, EventSource manifest chunks).
fn prescan_wants(rec: &EventRecord<'_>) -> bool {
    let kernel_group =
        |g: u16| rec.header_type.is_kernel() && rec.hook_id.is_some_and(|h| h >> 8 == g);
    (rec.header_type.is_kernel() && rec.provider == stacks::STACKWALK_GUID)
        || kernel_group(0x05)
        || processes::names_a_process(rec)
        || (rec.header_type.is_classic()
            && rec.provider == crate::schema::builtin::kernel_mof::KTC_SYS_CONFIG)
        || crate::schema::registry::Learner::is_metadata(rec)
}

/// What [`Decoder::prescan`] picked out of a file, buffer by buffer in file order: StackWalk
/// events (parsed) and the records that name threads, volumes and layouts.
pub struct Prescan {
    picked: Vec<Picked>,
    /// The frames of the StackWalk events the buffers' `Picked` refer to.
    frames: stacks::FrameStore,
}

impl std::fmt::Debug for Prescan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prescan")
            .field("buffers", &self.picked.len())
            .finish()
    }
}

#[derive(Default)]
struct Picked {
    stacks: stacks::Collected,
    other: Vec<EventRecord<'static>>,
}

/// [`prescan_wants`] from a record's head alone (the same answer).
fn prescan_wants_head(h: &crate::etl::record::Head) -> bool {
    (h.header_type.is_kernel()
        && (h.provider == stacks::STACKWALK_GUID
            || h.hook_id
                .is_some_and(|k| k >> 8 == 0x05 || processes::naming_hook(k))))
        || (h.header_type.is_classic()
            && (h.provider == crate::schema::builtin::kernel_mof::KTC_SYS_CONFIG
                || h.provider == crate::schema::tdh::METADATA_CLASS))
        || (h.header_type.is_event_header() && h.id == 0xFFFE && h.opcode == 254)
}

/// The on-disk markers of an EventSource manifest chunk (a schema fact, kept in `schema::registry`).
pub use crate::schema::registry::is_eventsource_manifest;

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("registry", &self.registry)
            .field("plans", &self.plans.read().map(|p| p.len()).unwrap_or(0))
            .field(
                "stack_index",
                &self.stacks.as_ref().map(|s| s.stackwalk_events()),
            )
            .finish()
    }
}

impl Decoder {
    pub fn new(registry: Registry) -> Decoder {
        Decoder {
            registry,
            plans: RwLock::new(PlanCache::default()),
            stacks: None,
            threads: None,
            processes: None,
            volumes: None,
            live: Default::default(),
        }
    }

    /// Learning as records stream by (live sessions, or a file read once without a pre-scan): call it
    /// for every record before [`Decoder::decode`]. Embedded metadata is collected and registered as
    /// soon as a non-metadata record follows it (maps follow their EventInfo). Returns whether `rec`
    /// was metadata. Events met before their metadata stay undecoded; for files,
    /// [`Decoder::for_file`] avoids that with a pre-scan.
    pub fn learn(&mut self, rec: &EventRecord<'_>) -> bool {
        if crate::schema::registry::Learner::is_metadata(rec) {
            self.live.observe(rec);
            return true;
        }
        if self.live.has_pending() {
            self.live.flush(&mut self.registry);
        }
        false
    }

    /// What [`Decoder::learn`] has registered so far.
    pub fn learned(&self) -> &crate::schema::registry::LearnSummary {
        self.live.summary()
    }

    /// A decoder for one file: a single pre-scan pass feeds `registry` the file's embedded metadata
    /// (EventInfo/EventMapInfo, EventSource manifests), indexes its kernel StackWalk events and
    /// builds its thread table (kernel Thread events). ([`Decoder::prescan`] and
    /// [`Decoder::from_prescan`] in one.)
    pub fn for_file(
        registry: Registry,
        file: &crate::etl::EtlFile,
    ) -> (Decoder, crate::schema::registry::LearnSummary) {
        Decoder::from_prescan(registry, Decoder::prescan(file))
    }

    /// The pass over `file` that [`Decoder::for_file`] makes, without a registry: it can run
    /// while the registry is being built (as `etwkit dump` does, on another core).
    pub fn prescan(file: &crate::etl::EtlFile) -> Prescan {
        // The records the pre-scan needs are few: pick them out on every core (StackWalk events
        // parsed there), then feed them in file order.
        // The built-in manifests of the providers met are parsed now, on the scan's threads.
        use crate::schema::builtin::manifests::warm_record;
        let wanted = |h: &crate::etl::record::Head| {
            warm_record(h.header_type, &h.provider);
            prescan_wants_head(h)
        };
        let frames = stacks::FrameStore::new();
        let (picked, _) = file.par_map_buffers_where(wanted, |p: &mut Picked, r| {
            warm_record(r.event.header_type, &r.event.provider);
            if !p.stacks.observe(&r.event, &frames) && prescan_wants(&r.event) {
                p.other.push(r.event.to_owned_record());
            }
        });
        Prescan { picked, frames }
    }

    /// The decoder for the file `prescan` read: `registry` with the file's embedded layouts, its
    /// stack index, thread and process tables and volumes.
    pub fn from_prescan(
        mut registry: Registry,
        prescan: Prescan,
    ) -> (Decoder, crate::schema::registry::LearnSummary) {
        let mut learner = crate::schema::registry::Learner::default();
        let mut threads = threads::ThreadTable::new();
        let mut volumes = paths::VolumeMap::default();
        let Prescan { picked, frames } = prescan;
        let mut stretches = Vec::with_capacity(picked.len());
        let mut others = Vec::with_capacity(picked.len());
        for p in picked {
            stretches.push(p.stacks);
            others.push(p.other);
        }
        // The stack table and the rest (thread table, volumes, embedded layouts) at once.
        let mut named = Vec::new();
        let (index, summary) = rayon::join(
            || stacks::StackIndex::from_collected(stretches, frames),
            || {
                for e in others.iter().flatten() {
                    if processes::names_a_process(e) {
                        named.push(e);
                    } else if !threads.observe(e) && !volumes.observe(e) {
                        learner.observe(e);
                    }
                }
                threads.finish();
                volumes.finish();
                learner.finish(&mut registry)
            },
        );
        let mut d = Decoder::new(registry);
        if index.stackwalk_events() > 0 {
            d.stacks = Some(index);
        }
        if !threads.is_empty() {
            d.threads = Some(threads);
        }
        if !volumes.is_empty() {
            d.volumes = Some(volumes);
        }
        // Process events decode with the registry's layouts (their image name follows a SID).
        let mut processes = processes::ProcessTable::new();
        for e in named {
            let p = d.decode(e).properties;
            let pid = p.get("ProcessId").and_then(|v| v.as_u64());
            let name = p.get("ImageFileName").and_then(|v| v.as_str());
            if let (Some(pid), Some(name), Some(hook)) = (pid, name, e.hook_id) {
                processes.observe(e.timestamp, hook as u8, pid as u32, name);
            }
        }
        processes.finish();
        if !processes.is_empty() {
            d.processes = Some(processes);
        }
        (d, summary)
    }

    /// The image name of the process `pid` stood for at `time` (FILETIME), by the trace's kernel
    /// Process events (see [`processes::ProcessTable`]).
    pub fn process_name(&self, pid: u32, time: i64) -> Option<&Arc<str>> {
        self.processes.as_ref()?.name_of(pid, time)
    }

    /// Uses `index` to attach kernel StackWalk stacks.
    pub fn set_stack_index(&mut self, index: stacks::StackIndex) {
        self.stacks = Some(index);
    }
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
    pub fn registry_mut(&mut self) -> &mut Registry {
        self.plans.get_mut().map(|p| p.clear()).ok();
        &mut self.registry
    }

    fn plan(&self, schema: &Arc<EventSchema>) -> Arc<Plan> {
        let key = Arc::as_ptr(schema) as usize;
        if let Ok(p) = self.plans.read() {
            if let Some((_, plan)) = p.get(&key) {
                return plan.clone();
            }
        }
        let plan = Arc::new(Plan::new(schema));
        if let Ok(mut p) = self.plans.write() {
            p.insert(key, (schema.clone(), plan.clone()));
        }
        plan
    }

    /// Names and values of one record. Never fails: what cannot be decoded is said in `undecoded`.
    pub fn decode(&self, rec: &EventRecord<'_>) -> DecodedEvent {
        let mut ev = self.decode_unnamed(rec);
        ev.process_name = self.process_of(rec, ev.ids).cloned();
        ev
    }

    /// The process name of a record whose ids are `ids` (`None`: the header's).
    pub(crate) fn process_of(&self, rec: &EventRecord<'_>, ids: Option<Ids>) -> Option<&Arc<str>> {
        let pid = ids.map_or(rec.pid, |i| i.pid);
        if pid == u32::MAX {
            return None;
        }
        self.process_name(pid, rec.timestamp)
    }

    /// [`Decoder::decode`] without the process name.
    fn decode_unnamed(&self, rec: &EventRecord<'_>) -> DecodedEvent {
        let mut ev = DecodedEvent {
            provider_name: self.registry.provider_name(rec),
            stack: record_stack(rec, self.stacks.as_ref()),
            ..Default::default()
        };
        if rec.header_type == HeaderType::Message {
            ev.properties = wpp_fields(rec);
            ev.undecoded = Some("WPP message: no TMF available, raw fields only".into());
            return ev;
        }
        if rec.header_type.is_event_header() && rec.flags & flags::STRING_ONLY != 0 {
            let mut cur = Cursor::new(&rec.payload, rec.pointer_size, false);
            ev.properties
                .push("String", Value::String(utf16(cstr16(&mut cur))));
            ev.source = Some(SchemaSource::Builtin);
            return ev;
        }
        if is_eventsource_manifest(rec) {
            ev.event_name = Some("ManifestData".into());
            let p = &rec.payload;
            if p.len() >= 8 {
                ev.properties.push("Format", Value::U64(p[0] as u64));
                ev.properties.push("MajorVersion", Value::U64(p[1] as u64));
                ev.properties.push("MinorVersion", Value::U64(p[2] as u64));
                ev.properties.push("Magic", Value::U64(p[3] as u64));
                ev.properties.push(
                    "TotalChunks",
                    Value::U64(u16::from_le_bytes([p[4], p[5]]) as u64),
                );
                ev.properties.push(
                    "ChunkNumber",
                    Value::U64(u16::from_le_bytes([p[6], p[7]]) as u64),
                );
                // As TraceEvent names it: the whole payload, header included.
                ev.properties
                    .push("PayloadLength", Value::U64(p.len() as u64));
                ev.source = Some(SchemaSource::EventSourceManifest);
            } else {
                ev.undecoded = Some(format!(
                    "EventSource manifest chunk of {} bytes is shorter than its 8-byte header",
                    p.len()
                ));
            }
            return ev;
        }
        if rec.header_type.is_classic() && rec.provider == crate::schema::tdh::METADATA_CLASS {
            metadata_record(rec, &mut ev);
            return ev;
        }
        let schema = match self.registry.try_lookup(rec) {
            Ok(Some(s)) => s,
            Ok(None) => {
                ev.undecoded = Some("no schema for this event".into());
                return ev;
            }
            Err(e) => {
                ev.undecoded = Some(e.to_string());
                return ev;
            }
        };
        let plan = self.plan(&schema);
        if ev.provider_name.is_none() {
            ev.provider_name = plan.names.provider.clone();
        }
        ev.event_name = plan.names.event.clone();
        ev.task_name = plan.names.task.clone();
        ev.opcode_name = plan.names.opcode.clone();
        ev.source = Some(schema.source);
        let (first, ids) = plan.decode_ids(&rec.payload, rec.pointer_size);
        if !matches!(first, Ok((_, used)) if used == rec.payload.len()) {
            if let Some(other) = other_pointer_size(&plan, rec) {
                if let (Ok((p, _)), ids) = plan.decode_ids(&rec.payload, other) {
                    ev.properties = p;
                    ev.layout_pointer_size = Some(other);
                    ev.ids = self.attribute(rec, &ids);
                    ev.dos_path = self.dos_path(&plan, &ids, &rec.payload);
                    return ev;
                }
            }
        }
        ev.ids = self.attribute(rec, &ids);
        ev.dos_path = self.dos_path(&plan, &ids, &rec.payload);
        match first {
            Ok((p, used)) => {
                ev.properties = p;
                ev.unread_bytes = rec.payload.len() - used;
                if ev.unread_bytes > 0 {
                    ev.decode_issue = Some(unread_issue(ev.unread_bytes, rec.payload.len()));
                }
            }
            Err(e) => {
                ev.undecoded = Some(e.to_string());
                ev.decode_issue = ev.undecoded.clone();
                ev.properties = e.partial;
            }
        }
        ev
    }

    /// What `etwkit stats` needs of a record, without building its values (no allocation on the
    /// common path): whether a layout applies, and whether it fits the payload.
    pub fn check(&self, rec: &EventRecord<'_>) -> Check {
        self.check_with(rec, &mut CheckCache::default())
    }

    /// [`Decoder::check`], with the layouts found kept in `cache` for the next records (a pass
    /// over many records keeps one per thread or stretch of records).
    pub fn check_with(&self, rec: &EventRecord<'_>, cache: &mut CheckCache) -> Check {
        let decoded = |d: bool| Check {
            decoded: d,
            ..Default::default()
        };
        if rec.header_type == HeaderType::Message {
            return decoded(false);
        }
        if rec.header_type.is_event_header() && rec.flags & flags::STRING_ONLY != 0 {
            return decoded(true);
        }
        if is_eventsource_manifest(rec) {
            return decoded(rec.payload.len() >= 8);
        }
        if rec.header_type.is_classic() && rec.provider == crate::schema::tdh::METADATA_CLASS {
            return decoded(self.decode(rec).is_decoded());
        }
        let lookup = || {
            let schema = self.registry.try_lookup(rec).ok().flatten()?;
            Some(self.plan(&schema))
        };
        // A TraceLogging layout is named by the record's own metadata; any other by its key.
        let traced = rec.header_type.is_event_header() && rec.tracelogging_items().0.is_some();
        let plan = match Registry::key_for(rec) {
            Some(key) if !traced => {
                let slot = &mut cache.slots[CheckCache::slot(&key)];
                match slot {
                    Some((k, plan)) if *k == key => plan.clone(),
                    _ => {
                        let plan = lookup();
                        *slot = Some((key, plan.clone()));
                        plan
                    }
                }
            }
            _ => lookup(),
        };
        let Some(plan) = plan else {
            return decoded(false);
        };
        let len = rec.payload.len();
        match plan.measure(&rec.payload, rec.pointer_size) {
            Ok(used) if used == len => decoded(true),
            _ if other_pointer_size(&plan, rec).is_some() => Check {
                decoded: true,
                issue: false,
                pointer_size_fallback: true,
            },
            _ => Check {
                decoded: true,
                issue: true,
                pointer_size_fallback: false,
            },
        }
    }
}

/// The layouts [`Decoder::check_with`] found, by key (kept for one pass: the registry does not
/// change during it): a direct-mapped table, one key per slot, the last found for that slot.
pub struct CheckCache {
    slots: Vec<Option<(crate::schema::SchemaKey, Option<Arc<Plan>>)>>,
}

impl Default for CheckCache {
    fn default() -> Self {
        CheckCache {
            slots: vec![None; CHECK_SLOTS],
        }
    }
}

/// Slots of a [`CheckCache`] (a power of two).
const CHECK_SLOTS: usize = 256;

impl CheckCache {
    fn slot(key: &crate::schema::SchemaKey) -> usize {
        use crate::schema::SchemaKey;
        let (g, n, version, kind) = match *key {
            SchemaKey::Manifest {
                provider,
                id,
                version,
            } => (provider, id, version, 0u64),
            SchemaKey::Mof {
                class,
                opcode,
                version,
            } => (class, opcode as u16, version, 1),
        };
        let b = g.to_le_bytes();
        let lo = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        let hi = u64::from_le_bytes(b[8..].try_into().expect("8 bytes"));
        let x = lo ^ hi.rotate_left(29) ^ (n as u64) << 40 ^ (version as u64) << 56 ^ kind;
        (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize % CHECK_SLOTS
    }
}

/// What [`Decoder::check`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Check {
    /// A layout applies (as [`DecodedEvent::is_decoded`]).
    pub decoded: bool,
    /// The layout leaves payload bytes unread or runs past the payload (a `decode_issue`).
    pub issue: bool,
    /// The layout fits only with the other pointer size.
    pub pointer_size_fallback: bool,
}

/// For a classic or kernel (MOF) record whose layout does not fit its payload with the header's
/// pointer size: the other pointer size, when the layout then consumes the payload exactly, every
/// string with its terminator (a 32-bit logger carrying 64-bit kernel payloads, or the reverse).
fn other_pointer_size(plan: &Plan, rec: &EventRecord<'_>) -> Option<u8> {
    if !(rec.header_type.is_kernel() || rec.header_type.is_classic()) {
        return None;
    }
    let other = if rec.pointer_size == 4 { 8 } else { 4 };
    (plan.measure_strict(&rec.payload, other)? == rec.payload.len()).then_some(other)
}

fn unread_issue(unread: usize, len: usize) -> String {
    format!("the layout leaves {unread} of the {len} payload bytes unread")
}

impl Decoder {
    /// Process and thread ids of a kernel record as TraceEvent shows them. The process its payload
    /// names (ProcessId, PID, StackProcess: the process the event is about) over the header's,
    /// which is the context the event was logged in (a rundown's logger, a new process's
    /// parent); the thread its payload names where the header has none, and a Thread event's own
    /// thread (TThreadId) over the header's (its creator). For a header without a process id and
    /// a payload without one, the trace's thread table. `None` when the header's stand.
    fn attribute(&self, rec: &EventRecord<'_>, payload: &PayloadIds) -> Option<Ids> {
        if !rec.header_type.is_kernel() {
            return None;
        }
        let small = |v: Option<u64>| {
            v.and_then(|v| u32::try_from(v).ok())
                .filter(|&v| v != u32::MAX)
        };
        let mut ids = Ids {
            pid: rec.pid,
            tid: rec.tid,
            pid_source: None,
            tid_source: None,
        };
        let thread_event = rec.hook_id.is_some_and(|h| h >> 8 == 0x05);
        if let Some(t) =
            small(payload.tid).filter(|&t| t != ids.tid && (ids.tid == u32::MAX || thread_event))
        {
            ids.tid = t;
            ids.tid_source = Some(IdSource::Payload);
        }
        if let Some(p) = small(payload.pid).filter(|&p| p != ids.pid) {
            ids.pid = p;
            ids.pid_source = Some(IdSource::Payload);
        } else if ids.pid == u32::MAX {
            if let Some(p) = (ids.tid != u32::MAX)
                .then(|| self.threads.as_ref()?.pid_of(ids.tid, rec.timestamp))
                .flatten()
            {
                ids.pid = p;
                ids.pid_source = Some(IdSource::ThreadTable);
            }
        }
        (ids.pid_source.is_some() || ids.tid_source.is_some()).then_some(ids)
    }

    /// The DOS form of the record's file path field, when the trace maps its volume.
    fn dos_path(
        &self,
        plan: &Plan,
        ids: &PayloadIds,
        payload: &[u8],
    ) -> Option<(Arc<str>, String)> {
        let mut out = None;
        self.dos_path_into(plan, ids, payload, &mut String::new(), &mut out);
        out
    }

    /// The DOS path of a record for an [`EventView`]: a UTF-16 path whose volume the map names
    /// stays undecoded (the DOS prefix and the payload's units); any other is made into `out` as
    /// [`Decoder::dos_path_into`] makes it.
    #[inline]
    pub(crate) fn dos_path_view<'a>(
        &'a self,
        plan: &'a Plan,
        ids: &PayloadIds,
        payload: &'a [u8],
        scratch: &mut String,
        out: &'a mut Option<(Arc<str>, String)>,
    ) -> Option<view::DosPath<'a>> {
        if ids.path.is_none() || self.volumes.is_none() {
            return None;
        }
        if let (Some((i, plan::PathText::Utf16(r))), Some(volumes)) = (&ids.path, &self.volumes) {
            let units = payload.get(r.clone()).and_then(|u| {
                let (prefix, skip) = volumes.split_utf16(u)?;
                Some(view::DosPath {
                    field: &plan.fields[*i].name,
                    text: view::DosText::Utf16(prefix, &u[skip..]),
                })
            });
            if units.is_some() {
                return units;
            }
        }
        self.dos_path_into(plan, ids, payload, scratch, out);
        out.as_ref().map(|(n, p)| view::DosPath::new(n, p))
    }

    /// [`Decoder::dos_path`] into `out`, reusing its text's space and `scratch` (for the NT path
    /// when the walk left it as UTF-16 bytes).
    pub(crate) fn dos_path_into(
        &self,
        plan: &Plan,
        ids: &PayloadIds,
        payload: &[u8],
        scratch: &mut String,
        out: &mut Option<(Arc<str>, String)>,
    ) {
        let (Some((i, nt)), Some(volumes)) = (ids.path.as_ref(), self.volumes.as_ref()) else {
            *out = None;
            return;
        };
        let mut text = match out.take() {
            Some((_, t)) => t,
            None => std::mem::take(scratch),
        };
        let found = match nt {
            plan::PathText::Text(t) => volumes.to_dos_into(t, &mut text),
            plan::PathText::Utf16(r) => {
                volumes.to_dos_utf16(payload.get(r.clone()).unwrap_or(&[]), &mut text)
            }
        };
        if found {
            *out = Some((plan.fields[*i].name.clone(), text));
        } else {
            *scratch = text;
        }
    }

    /// The process and thread ids [`Decoder::decode`] would attribute to `rec` (see
    /// [`DecodedEvent::ids`]), without decoding it: for filters (`--pid`) that run before decoding.
    pub fn ids(&self, rec: &EventRecord<'_>) -> Option<Ids> {
        if !rec.header_type.is_kernel() {
            return None;
        }
        let payload = match self.layout_route(rec) {
            Some((_, plan)) => {
                let ids = plan.payload_ids(&rec.payload, rec.pointer_size);
                match other_pointer_size(&plan, rec) {
                    Some(other)
                        if plan.measure(&rec.payload, rec.pointer_size).ok()
                            != Some(rec.payload.len()) =>
                    {
                        plan.payload_ids(&rec.payload, other)
                    }
                    _ => ids,
                }
            }
            None => PayloadIds::default(),
        };
        self.attribute(rec, &payload)
    }

    /// `filter.matches(rec)`, where a kernel record is matched by the process id [`Decoder::ids`]
    /// attributes to it (its payload's, or the trace's thread table's for a header without one)
    /// — what `dump --pid` and the Python reader's `pids=` select.
    pub fn matches(&self, filter: &crate::filter::EventFilter, rec: &EventRecord<'_>) -> bool {
        if filter.pids.is_empty() || !rec.header_type.is_kernel() {
            return filter.matches(rec);
        }
        match self.ids(rec) {
            Some(ids) => {
                let mut e = rec.clone();
                e.pid = ids.pid;
                e.tid = ids.tid;
                filter.matches(&e)
            }
            None => filter.matches(rec),
        }
    }

    /// The plan of a record decoded through its registry layout — the route [`Decoder::decode`]
    /// takes for every record but WPP, STRING_ONLY, EventSource manifest and metadata records.
    fn layout_route(&self, rec: &EventRecord<'_>) -> Option<(Arc<EventSchema>, Arc<Plan>)> {
        if rec.header_type == HeaderType::Message
            || (rec.header_type.is_event_header() && rec.flags & flags::STRING_ONLY != 0)
            || is_eventsource_manifest(rec)
            || (rec.header_type.is_classic() && rec.provider == crate::schema::tdh::METADATA_CLASS)
        {
            return None;
        }
        let schema = self.registry.try_lookup(rec).ok()??;
        let plan = self.plan(&schema);
        Some((schema, plan))
    }

    /// As [`Decoder::decode_etl`], but the properties go to `text` as the text visitor `T` renders
    /// them (cleared first; left empty when there are none) and the result's `properties` stays
    /// empty. Records whose layout fits their payload are rendered straight from the payload,
    /// without building values; the rest take the value path. `scratch` is reused between calls.
    /// (`decode_etl_json` is this with the JSON the sinks write.)
    pub fn decode_etl_text<T: TextFormat>(
        &self,
        r: &crate::etl::Record<'_>,
        text: &mut Vec<u8>,
        scratch: &mut String,
    ) -> DecodedEvent {
        text.clear();
        let rec = &r.event;
        if let Some((schema, plan)) = self.layout_route(rec) {
            let written = if plan.fields.is_empty() {
                None
            } else {
                plan.visit(
                    &rec.payload,
                    rec.pointer_size,
                    &mut T::visitor(text, scratch),
                )
                .ok()
                .filter(|&(used, _)| used == rec.payload.len())
            };
            if let Some((_, ids)) = written {
                return self.walked(rec, &schema, &plan, &ids, true);
            }
            text.clear();
        }
        let mut ev = self.decode_etl(r);
        if !ev.properties.is_empty() {
            ev.properties.visit(&mut T::visitor(text, scratch));
            ev.properties = Properties::default();
        }
        ev
    }

    /// The event (without properties) of a record whose payload its plan walked to the end: names
    /// from the plan, ids attributed from what the walk found, the stack if wanted.
    fn walked(
        &self,
        rec: &EventRecord<'_>,
        schema: &EventSchema,
        plan: &Plan,
        ids: &PayloadIds,
        want_stack: bool,
    ) -> DecodedEvent {
        let attributed = self.attribute(rec, ids);
        DecodedEvent {
            ids: attributed,
            process_name: self.process_of(rec, attributed).cloned(),
            dos_path: self.dos_path(plan, ids, &rec.payload),
            provider_name: self
                .registry
                .provider_name(rec)
                .or_else(|| plan.names.provider.clone()),
            event_name: plan.names.event.clone(),
            task_name: plan.names.task.clone(),
            opcode_name: plan.names.opcode.clone(),
            source: Some(schema.source),
            stack: match want_stack {
                true => record_stack(rec, self.stacks.as_ref()),
                false => None,
            },
            ..Default::default()
        }
    }

    /// As [`Decoder::decode_etl_text`], for any [`PropertyVisitor`]: records whose layout fits
    /// their payload drive `v` straight from the payload; the rest are decoded into values first
    /// (their `properties` then drive `v`). Returns the event without properties. A walk straight
    /// from the payload that finds the layout does not fit calls `restart` before the value path
    /// drives `v` again (a visitor then drops what it got).
    pub fn decode_etl_visit<V: PropertyVisitor>(
        &self,
        r: &crate::etl::Record<'_>,
        v: &mut V,
        restart: impl FnMut(&mut V),
        want_stack: bool,
    ) -> DecodedEvent {
        self.decode_etl_visit_memo(r, v, restart, want_stack, &mut NoMemo)
    }

    /// [`Decoder::decode_etl_visit`] with a memo of walks: a walk straight from the payload is
    /// first asked of `memo` (which replays what the visitor wrote for the same layout and
    /// payload bytes), and a walk that fits is offered to it. The event returned is the same.
    pub fn decode_etl_visit_memo<V: PropertyVisitor, M: WalkMemo<V>>(
        &self,
        r: &crate::etl::Record<'_>,
        v: &mut V,
        mut restart: impl FnMut(&mut V),
        want_stack: bool,
        memo: &mut M,
    ) -> DecodedEvent {
        let rec = &r.event;
        if let Some((schema, plan)) = self.layout_route(rec) {
            if !plan.fields.is_empty() {
                let key = WalkKey {
                    layout: plan.id,
                    pointer_size: rec.pointer_size,
                    payload: &rec.payload,
                };
                if let Some([pid, tid]) = memo.replay(&key, v) {
                    let ids = plan::PayloadIds {
                        pid,
                        tid,
                        path: None,
                    };
                    return self.walked(rec, &schema, &plan, &ids, want_stack);
                }
                match plan.visit(&rec.payload, rec.pointer_size, v) {
                    Ok((used, ids)) if used == rec.payload.len() => {
                        if ids.path.is_none() {
                            memo.keep(&key, v, [ids.pid, ids.tid]);
                        }
                        return self.walked(rec, &schema, &plan, &ids, want_stack);
                    }
                    _ => restart(v),
                }
            }
        }
        let mut ev = self.decode_etl(r);
        if !ev.properties.is_empty() {
            ev.properties.visit(v);
            ev.properties = Properties::default();
        }
        ev
    }

    /// As [`Decoder::decode`], for a record read from an ETL file: WPP MESSAGE records also get the
    /// optional header items the [`EventRecord`] does not carry (sequence number, component id,
    /// option flags), read from the raw record.
    pub fn decode_etl(&self, r: &crate::etl::Record<'_>) -> DecodedEvent {
        let mut ev = self.decode(&r.event);
        if r.event.header_type == HeaderType::Message {
            if let Some(m) = crate::etl::record::message_fields(r.raw) {
                ev.properties
                    .push("OptionFlags", Value::Hex(m.option_flags as u64));
                if let Some(s) = m.sequence {
                    ev.properties.push("Sequence", Value::U64(s as u64));
                }
                if let Some(c) = m.component_id {
                    ev.properties.push("ComponentId", Value::U64(c as u64));
                }
            }
        }
        ev
    }
}

/// What identifies a walk's output: the layout, the pointer size it read with and the payload.
pub struct WalkKey<'p> {
    /// The layout's id (distinct per layout within a decoder).
    pub layout: u64,
    pub pointer_size: u8,
    pub payload: &'p [u8],
}

/// A memo of what a [`PropertyVisitor`] wrote for payloads met before
/// ([`Decoder::decode_etl_visit_memo`]): a layout's visitor calls are a function of the key, so
/// a caller whose visitor only appends to buffers can keep them and copy them back.
pub trait WalkMemo<V> {
    /// If the walk of `key` was kept: writes its output into `v` (as the walk would have) and
    /// returns the pid and tid the payload named.
    fn replay(&mut self, key: &WalkKey<'_>, v: &mut V) -> Option<[Option<u64>; 2]>;
    /// Offers the walk of `key` that just wrote into `v` (a walk that fit the payload and named
    /// no file path), with the pid and tid the payload named.
    fn keep(&mut self, key: &WalkKey<'_>, v: &V, ids: [Option<u64>; 2]);
}

/// No memo: every walk is done.
pub struct NoMemo;

impl<V> WalkMemo<V> for NoMemo {
    #[inline]
    fn replay(&mut self, _: &WalkKey<'_>, _: &mut V) -> Option<[Option<u64>; 2]> {
        None
    }
    #[inline]
    fn keep(&mut self, _: &WalkKey<'_>, _: &V, _: [Option<u64>; 2]) {}
}

/// The stack of `rec`: its EVENT_HEADER stack item, with kernel StackWalk frames from `index`
/// appended (either alone when only one exists).
pub fn record_stack(rec: &EventRecord<'_>, index: Option<&stacks::StackIndex>) -> Option<Stack> {
    let mut st = Stack {
        match_id: 0,
        addresses: Vec::new(),
    };
    record_stack_into(rec, index, &mut 0, &mut st).then_some(st)
}

/// [`record_stack`] into `out` (its space reused; left as it was when there is no stack);
/// `hint` as [`stacks::StackIndex::stack_into`] takes it.
pub(crate) fn record_stack_into(
    rec: &EventRecord<'_>,
    index: Option<&stacks::StackIndex>,
    hint: &mut usize,
    out: &mut Stack,
) -> bool {
    let own = if rec.ext.is_empty() {
        None
    } else {
        rec.stack()
    };
    let has_own = own.is_some();
    match own {
        Some(own) => *out = own,
        None => {
            out.match_id = 0;
            out.addresses.clear();
        }
    }
    let walked = index.is_some_and(|i| i.stack_into(rec, hint, &mut out.addresses));
    has_own || walked
}

/// The decoder's view of a record's process ([`Decoder::matches`]) for filters applied below it
/// (`etl::relog`).
impl crate::filter::PidView for Decoder {
    fn keeps(&self, filter: &crate::filter::EventFilter, ev: &EventRecord<'_>) -> bool {
        self.matches(filter, ev)
    }
}
