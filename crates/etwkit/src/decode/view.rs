//! [`EventView`]: a record with its names and decoded properties, what the sinks print; and the hot
//! path of `etwkit dump` that makes one straight from a record, on one
//! thread of many. Each thread keeps a [`Local`]: the layout of every kind of event it has met,
//! looked up once (after that no lock, no shared reference count and no allocation per record),
//! and the buffers the properties' JSON text is written to.

use std::sync::Arc;

use crate::event::{flags, EventRecord, HeaderType, Stack};
use crate::schema::registry::FastMap;
use crate::schema::{Registry, SchemaKey};

use super::plan::Plan;
use super::visit::{PropertyVisitor, TextFormat};
use super::{is_eventsource_manifest, record_stack_into, DecodedEvent, Decoder, Ids};

/// An event and what is known about it, ready to print (every sink takes one).
pub struct EventView<'a, 'r> {
    pub event: &'a EventRecord<'r>,
    pub provider_name: Option<&'a str>,
    pub event_name: Option<&'a str>,
    pub task_name: Option<&'a str>,
    pub opcode_name: Option<&'a str>,
    /// Already-rendered JSON object text of the decoded properties (UTF-8: the renderers write
    /// nothing else, so it is not checked again).
    pub properties_json: Option<&'a [u8]>,
    /// Stack to show: the record's own stack item, or one attached by the decoder.
    pub stack: Option<&'a Stack>,
    /// Why the layout does not fit the payload (JSON `decode_issue`, present only when set).
    pub decode_issue: Option<&'a str>,
    /// The pointer size the layout was decoded with when it is not the header's (JSON
    /// `layout_pointer_size`, present only when set).
    pub layout_pointer_size: Option<u8>,
    /// Process/thread ids filled in for a kernel record whose header carries none (JSON `pid`/`tid`
    /// show them; `pid_source`/`tid_source` say where they came from).
    pub ids: Option<Ids>,
    /// A file path field and its DOS form (JSON `dos_paths`: `{"FileName":"C:\\..."}`).
    pub dos_path: Option<DosPath<'a>>,
    /// The image name of the record's process, by the trace's kernel Process events (JSON
    /// `process_name`, present only when known).
    pub process_name: Option<&'a str>,
    /// Nonzero when the four names are those of the plan with this id for the record's provider
    /// (the renderers' caches then need not compare them); 0: unknown.
    pub(crate) names_id: u64,
    /// Where a renderer keeps the text it makes of the payload (its hex) for a payload that
    /// repeats, to reuse the next time the same bytes come (see `Memo`); `None` for the others.
    pub(crate) payload_text: Option<&'a std::cell::OnceCell<Vec<u8>>>,
    /// Whether `properties_json` was written by the CSV visitor ([`crate::sink::csv::Csv`]): the
    /// JSON text with every `"` already doubled, ready to go between the quotes of a CSV field.
    /// Set only by [`Decoder::view_etl_csv`](crate::sink::csv); every other route leaves plain
    /// JSON.
    pub(crate) properties_csv: bool,
}

impl<'a, 'r> EventView<'a, 'r> {
    /// As [`EventView::decoded`], for [`crate::decode::Decoder::decode_etl_json`]'s result and
    /// the properties' JSON text it wrote (empty: none).
    pub fn decoded_json(
        event: &'a EventRecord<'r>,
        d: &'a DecodedEvent,
        props_json: &'a [u8],
    ) -> Self {
        let mut v = EventView::bare(event);
        v.take_decoded(d);
        v.with_properties_json(props_json)
    }

    /// Takes the names, stack, issue, ids and DOS path of `d` (not its properties).
    pub(crate) fn take_decoded(&mut self, d: &'a DecodedEvent) {
        self.provider_name = d.provider_name.as_deref();
        self.event_name = d.event_name.as_deref();
        self.task_name = d.task_name.as_deref();
        self.opcode_name = d.opcode_name.as_deref();
        self.stack = d.stack.as_ref();
        self.decode_issue = d.decode_issue.as_deref();
        self.layout_pointer_size = d.layout_pointer_size;
        self.ids = d.ids;
        self.process_name = d.process_name.as_deref();
        self.dos_path = d.dos_path.as_ref().map(|(n, p)| DosPath::new(n, p));
    }

    /// The properties' JSON text (empty: none), and the provider's own name where the decoding
    /// gave none.
    pub(crate) fn with_properties_json(mut self, json: &'a [u8]) -> Self {
        if !json.is_empty() {
            self.properties_json = Some(json);
        }
        if self.provider_name.is_none() {
            self.provider_name = self.event.traits_provider_name();
        }
        self
    }

    /// The process id to show: attributed, else the header's (`u32::MAX`: none).
    pub fn pid(&self) -> u32 {
        self.ids.map_or(self.event.pid, |i| i.pid)
    }

    /// The thread id to show: attributed, else the header's (`u32::MAX`: none).
    pub fn tid(&self) -> u32 {
        self.ids.map_or(self.event.tid, |i| i.tid)
    }

    pub fn bare(event: &'a EventRecord<'r>) -> Self {
        EventView {
            event,
            provider_name: None,
            event_name: None,
            task_name: None,
            opcode_name: None,
            properties_json: None,
            stack: None,
            decode_issue: None,
            layout_pointer_size: None,
            ids: None,
            dos_path: None,
            process_name: None,
            names_id: 0,
            properties_csv: false,
            payload_text: None,
        }
    }
}

/// The DOS form of a file path field (see [`EventView::dos_path`]): text, or the DOS prefix and
/// the rest of the NT path still as the payload's UTF-16 (the hot path writes it to the output
/// without decoding it first).
#[derive(Clone, Copy, Debug)]
pub struct DosPath<'a> {
    /// The property it is the DOS form of (`FileName`).
    pub field: &'a str,
    pub(crate) text: DosText<'a>,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum DosText<'a> {
    Text(&'a str),
    /// The DOS prefix, then UTF-16LE units.
    Utf16(&'a str, &'a [u8]),
}

impl<'a> DosPath<'a> {
    pub fn new(field: &'a str, text: &'a str) -> Self {
        DosPath {
            field,
            text: DosText::Text(text),
        }
    }

    /// The path.
    pub fn text(&self) -> std::borrow::Cow<'a, str> {
        match self.text {
            DosText::Text(t) => t.into(),
            DosText::Utf16(prefix, rest) => {
                let mut s = String::from(prefix);
                super::scalar::utf16_into(rest, &mut s);
                s.into()
            }
        }
    }
}

/// A layout as one thread keeps it.
struct Layout {
    plan: Arc<Plan>,
    /// The registry's name for the provider (records with a provider-traits item name their own).
    provider_name: Option<Arc<str>>,
    /// The key text of the plan's fields in the text format this thread renders (and which).
    keys: Option<(std::any::TypeId, super::compiled::Keys)>,
    /// Whether this layout's payloads repeat enough for [`Memo`] to be worth asking.
    memo: MemoGate,
    /// The memo slot this layout's last record was found in or put in: a record whose payload
    /// is the last one's again is found there without hashing it.
    last_slot: std::cell::Cell<usize>,
}

/// How often a layout's payloads were found in the [`Memo`]: it is asked for the first
/// `MEMO_TRIAL` records, and after them while at least a quarter were found. A layout that
/// found fewer is not asked for its next `MEMO_REST` records, then tried afresh: payloads that
/// are all different at first may repeat later (perfview_net.4.5.x86.etl's first 64
/// GCAllocationTick events carry 64 distinct payloads, its 52,698 only 286).
#[derive(Default)]
pub(crate) struct MemoGate {
    tries: std::cell::Cell<u32>,
    hits: std::cell::Cell<u32>,
    /// Records not asked for since the gate closed.
    rested: std::cell::Cell<u32>,
}

const MEMO_TRIAL: u32 = 64;
const MEMO_REST: u32 = 1024;

impl MemoGate {
    pub(crate) fn open(&self) -> bool {
        let t = self.tries.get();
        if t < MEMO_TRIAL || self.hits.get() * 4 >= t {
            return true;
        }
        let r = self.rested.get() + 1;
        if r < MEMO_REST {
            self.rested.set(r);
            return false;
        }
        // A new trial.
        self.rested.set(0);
        self.tries.set(0);
        self.hits.set(0);
        true
    }

    pub(crate) fn note(&self, hit: bool) {
        self.tries.set(self.tries.get().saturating_add(1));
        self.hits.set(self.hits.get() + hit as u32);
    }
}

/// The properties' text of recently met payloads. A layout's text is a function of the plan, the
/// pointer size, the text format and the payload bytes, and some payloads repeat: a .NET trace logs
/// the same stack walk or allocation tick thousands of times (perfview_net.4.5.x86.etl: 54 k
/// ClrStackWalk events with 406 distinct payloads, 53 k GCAllocationTick with 286, 61% of its
/// JSON). Direct-mapped by a hash of those; payloads naming a file path are not kept (their DOS
/// path is derived from the record's own bytes).
#[derive(Default)]
struct Memo {
    slots: Vec<MemoSlot>,
}

#[derive(Default)]
struct MemoSlot {
    plan: u64,
    format: Option<std::any::TypeId>,
    pointer_size: u8,
    payload: Vec<u8>,
    text: Vec<u8>,
    pid: Option<u64>,
    tid: Option<u64>,
    /// The renderer's text of the payload, made on first use (`EventView::payload_text`).
    payload_text: std::cell::OnceCell<Vec<u8>>,
}

pub(crate) const MEMO_SLOTS: usize = 1024;

/// The slot of a direct-mapped memo of `MEMO_SLOTS` slots for a layout's walk of `payload` (this
/// one's and the export's, `export::memo`).
pub(crate) fn memo_slot(plan: u64, pointer_size: u8, payload: &[u8]) -> usize {
    use std::hash::Hasher;
    let mut h = crate::schema::registry::FastHasher::default();
    h.write_u64(plan ^ (pointer_size as u64) << 56 ^ (payload.len() as u64) << 40);
    h.write(payload);
    (h.finish() >> (64 - MEMO_SLOTS.trailing_zeros())) as usize
}

/// Larger payloads are not kept (the memo's memory stays under a few MB per thread).
pub(crate) const MEMO_MAX_PAYLOAD: usize = 1024;

impl Memo {
    /// As [`Memo::find`], looking first in slot `last` (where the layout's last record was).
    fn find_near<T: 'static>(
        &mut self,
        last: usize,
        plan: u64,
        pointer_size: u8,
        payload: &[u8],
    ) -> (usize, bool) {
        if let Some(s) = self.slots.get(last) {
            if s.plan == plan
                && s.format == Some(std::any::TypeId::of::<T>())
                && s.pointer_size == pointer_size
                && s.payload == payload
            {
                return (last, true);
            }
        }
        self.find::<T>(plan, pointer_size, payload)
    }

    /// The slot for these, and whether it holds their text.
    fn find<T: 'static>(&mut self, plan: u64, pointer_size: u8, payload: &[u8]) -> (usize, bool) {
        if self.slots.is_empty() {
            self.slots.resize_with(MEMO_SLOTS, MemoSlot::default);
        }
        let i = memo_slot(plan, pointer_size, payload);
        let s = &self.slots[i];
        let hit = s.plan == plan
            && s.format == Some(std::any::TypeId::of::<T>())
            && s.pointer_size == pointer_size
            && s.payload == payload;
        (i, hit)
    }
}

/// One thread's state for [`Decoder::view_etl`].
#[derive(Default)]
pub struct Local {
    /// Layouts by schema key (`None`: the registry has none).
    keyed: FastMap<SchemaKey, Option<Layout>>,
    /// TraceLogging layouts by provider, traits and metadata bytes (the registry's own key).
    tl: FastMap<Box<[u8]>, Option<Layout>>,
    tl_key: Vec<u8>,
    /// The properties' JSON text of the last record.
    props: Vec<u8>,
    scratch: String,
    /// What the last record needed beyond borrowed names: its stack (when `has_stack`; the
    /// space is reused), its DOS path.
    stack: Stack,
    has_stack: bool,
    /// Where the last stack lookup ended (see `StackIndex::stack_into`).
    stack_hint: usize,
    dos_path: Option<(Arc<str>, String)>,
    /// The last record's decoding, when it took the general path.
    held: DecodedEvent,
    /// Properties' text of repeated payloads.
    memo: Memo,
}

/// A text format's identity and its [`key_text`].
type KeyFormat = (std::any::TypeId, fn(&mut Vec<u8>, usize, &str));

/// The key text of a property as the text format `T` writes it.
fn key_text<T: TextFormat>(out: &mut Vec<u8>, i: usize, name: &str) {
    T::visitor(out, &mut String::new()).field(i, name)
}

/// The layout of `rec`, looked up in the registry the first time its key is met; its keys as
/// `key_text` of the format `format` writes them. (Not generic over the format: one copy
/// serves them all.)
fn layout<'l>(
    d: &Decoder,
    keyed: &'l mut FastMap<SchemaKey, Option<Layout>>,
    tl: &'l mut FastMap<Box<[u8]>, Option<Layout>>,
    tl_key: &mut Vec<u8>,
    rec: &crate::EventRecord<'_>,
    (format, key_text): KeyFormat,
) -> Option<&'l Layout> {
    let lookup = || -> Option<Layout> {
        let schema = d.registry.try_lookup(rec).ok()??;
        let plan = d.plan(&schema);
        let keys = plan.keys(key_text);
        Some(Layout {
            keys: keys.map(|k| (format, k)),
            memo: MemoGate::default(),
            last_slot: std::cell::Cell::new(0),
            plan,
            provider_name: d.registry.name_of_provider(&rec.provider).map(Arc::from),
        })
    };
    if let (Some(meta), traits) = rec.tracelogging_items() {
        // The registry's own TraceLogging key: provider, traits (length first), metadata.
        let t = traits.unwrap_or(&[]);
        tl_key.clear();
        tl_key.extend_from_slice(&rec.provider.to_le_bytes());
        tl_key.extend_from_slice(&(t.len() as u16).to_le_bytes());
        tl_key.extend_from_slice(t);
        tl_key.extend_from_slice(meta);
        if !tl.contains_key(tl_key.as_slice()) {
            tl.insert(tl_key.clone().into_boxed_slice(), lookup());
        }
        return tl.get(tl_key.as_slice())?.as_ref();
    }
    keyed
        .entry(Registry::key_for(rec)?)
        .or_insert_with(lookup)
        .as_ref()
}

impl Decoder {
    /// What `etwkit dump` prints for `r`: [`Decoder::decode_etl_text`]'s result as an
    /// [`EventView`] (the same text, rendered by `T`), without touching anything shared per record.
    /// (`view_etl` is this with the JSON the sinks write.)
    pub fn view_etl_with<'a, 'r, T: TextFormat>(
        &'a self,
        local: &'a mut Local,
        r: &'a crate::etl::Record<'r>,
    ) -> EventView<'a, 'r> {
        let rec = &r.event;
        let Local {
            keyed,
            tl,
            tl_key,
            props,
            scratch,
            stack,
            has_stack,
            stack_hint,
            dos_path,
            held,
            memo,
        } = local;
        props.clear();
        let special = rec.header_type == HeaderType::Message
            || (rec.header_type.is_event_header() && rec.flags & flags::STRING_ONLY != 0)
            || is_eventsource_manifest(rec)
            || (rec.header_type.is_classic() && rec.provider == crate::schema::tdh::METADATA_CLASS);
        if !special {
            let format: KeyFormat = (std::any::TypeId::of::<T>(), key_text::<T>);
            if let Some(l) = layout(self, keyed, tl, tl_key, rec, format) {
                let plan: &'a Plan = &l.plan;
                if !plan.fields.is_empty() {
                    let payload: &[u8] = &rec.payload;
                    let remember = l.memo.open() && payload.len() <= MEMO_MAX_PAYLOAD;
                    let slot = remember.then(|| {
                        memo.find_near::<T>(l.last_slot.get(), plan.id, rec.pointer_size, payload)
                    });
                    if let Some((i, _)) = slot {
                        l.last_slot.set(i);
                    }
                    if let Some((i, true)) = slot {
                        l.memo.note(true);
                        let s = &memo.slots[i];
                        let ids = super::plan::PayloadIds {
                            pid: s.pid,
                            tid: s.tid,
                            path: None,
                        };
                        let mut v = self.fast_view(
                            rec,
                            l,
                            &ids,
                            None,
                            &s.text,
                            local_stack(stack, has_stack, stack_hint, self, rec),
                        );
                        v.payload_text = Some(&s.payload_text);
                        return v;
                    }
                    let keys = l
                        .keys
                        .as_ref()
                        .filter(|(t, _)| *t == std::any::TypeId::of::<T>())
                        .map(|(_, k)| k);
                    let walk = plan.visit_keyed(
                        payload,
                        rec.pointer_size,
                        &mut T::visitor(props, scratch),
                        keys,
                    );
                    match walk {
                        Ok((used, ids)) if used == payload.len() => {
                            if let Some((i, _)) = slot {
                                l.memo.note(false);
                                if ids.path.is_none() {
                                    let s = &mut memo.slots[i];
                                    s.plan = plan.id;
                                    s.format = Some(std::any::TypeId::of::<T>());
                                    s.pointer_size = rec.pointer_size;
                                    s.payload.clear();
                                    s.payload.extend_from_slice(payload);
                                    s.text.clear();
                                    s.text.extend_from_slice(props);
                                    s.pid = ids.pid;
                                    s.tid = ids.tid;
                                    s.payload_text = std::cell::OnceCell::new();
                                }
                            }
                            let dos = self.dos_path_view(plan, &ids, payload, scratch, dos_path);
                            return self.fast_view(
                                rec,
                                l,
                                &ids,
                                dos,
                                props,
                                local_stack(stack, has_stack, stack_hint, self, rec),
                            );
                        }
                        _ => props.clear(),
                    }
                }
            }
        }
        *held = self.decode_etl_text::<T>(r, props, scratch);
        EventView::decoded_json(rec, held, props)
    }

    /// The view of a record the fast path decoded: its properties' text, the ids and path its
    /// payload names, and its stack (if any).
    fn fast_view<'a, 'r>(
        &'a self,
        rec: &'a EventRecord<'r>,
        l: &'a Layout,
        ids: &super::plan::PayloadIds,
        dos_path: Option<DosPath<'a>>,
        properties: &'a [u8],
        stack: Option<&'a Stack>,
    ) -> EventView<'a, 'r> {
        let n = &l.plan.names;
        let mut v = EventView::bare(rec);
        let traits = rec.traits_provider_name();
        if traits.is_none() {
            // The names follow from the plan and the provider alone.
            v.names_id = l.plan.id;
        }
        v.provider_name = traits
            .or(l.provider_name.as_deref())
            .or(n.provider.as_deref());
        v.event_name = n.event.as_deref();
        v.task_name = n.task.as_deref();
        v.opcode_name = n.opcode.as_deref();
        v.stack = stack;
        v.ids = self.attribute(rec, ids);
        v.process_name = self.process_of(rec, v.ids).map(|n| &**n);
        v.dos_path = dos_path;
        v.properties_json = Some(properties);
        v
    }
}

/// The stack of `rec` in the thread's reused space (see `record_stack_into`), if it has one.
fn local_stack<'a>(
    stack: &'a mut Stack,
    has_stack: &mut bool,
    hint: &mut usize,
    d: &Decoder,
    rec: &EventRecord<'_>,
) -> Option<&'a Stack> {
    *has_stack = record_stack_into(rec, d.stacks.as_ref(), hint, stack);
    has_stack.then_some(&*stack)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memo_gate_closes_on_misses_and_tries_again_later() {
        let g = MemoGate::default();
        for _ in 0..MEMO_TRIAL {
            assert!(g.open());
            g.note(false);
        }
        // Closed for the next MEMO_REST - 1 records, then a new trial.
        for _ in 1..MEMO_REST {
            assert!(!g.open());
        }
        assert!(g.open());
        // Payloads that repeat now keep it open past the trial.
        for i in 0..4 * MEMO_TRIAL {
            assert!(g.open());
            g.note(i % 2 == 0);
        }
        assert!(g.open());
    }

    #[test]
    fn memo_finds_a_payload_in_the_last_slot_or_by_its_hash() {
        struct Json;
        let mut m = Memo::default();
        let (i, hit) = m.find::<Json>(7, 8, b"payload");
        assert!(!hit);
        let s = &mut m.slots[i];
        s.plan = 7;
        s.format = Some(std::any::TypeId::of::<Json>());
        s.pointer_size = 8;
        s.payload = b"payload".to_vec();
        // In the last slot, from a wrong guess, and not under another plan or pointer size.
        assert_eq!(m.find_near::<Json>(i, 7, 8, b"payload"), (i, true));
        assert_eq!(
            m.find_near::<Json>((i + 1) % MEMO_SLOTS, 7, 8, b"payload"),
            (i, true)
        );
        assert!(!m.find_near::<Json>(i, 8, 8, b"payload").1);
        assert!(!m.find_near::<Json>(i, 7, 4, b"payload").1);
        assert!(!m.find_near::<()>(i, 7, 8, b"payload").1);
        let (j, hit) = m.find_near::<Json>(i, 7, 8, b"another");
        assert!(!hit);
        assert_eq!(j, memo_slot(7, 8, b"another"));
    }

    #[test]
    fn memo_slots_cover_the_whole_table() {
        let mut seen = vec![false; MEMO_SLOTS];
        for i in 0..64 * MEMO_SLOTS as u64 {
            seen[memo_slot(i, 8, &i.to_le_bytes())] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
