//! JSON lines: one object per event, written by hand for speed (a dump of a 26 MB trace should not wait
//! on a serializer).

use std::io::{self, Write};

use super::{hex16, push_hex, EventView, Sink};
use crate::decode::{DecodedEvent, Decoder, Local, Properties, PropertyVisitor, Value};
use crate::event::EventRecord;
use crate::time::write_rfc3339;

pub struct JsonLines<W: Write> {
    out: W,
    line: Vec<u8>,
    r: JsonRender,
}

impl<W: Write> JsonLines<W> {
    pub fn new(out: W) -> Self {
        JsonLines {
            out,
            line: Vec::with_capacity(4096),
            r: JsonRender::default(),
        }
    }

    /// Renders one event as a JSON object (no newline) into `line`.
    pub fn render(&mut self, v: &EventView<'_, '_>) {
        self.line.clear();
        self.r.render_into(v, &mut self.line);
    }

    /// The last rendered line.
    pub fn line(&self) -> &[u8] {
        &self.line
    }
}

/// What makes the constant part of an event's line: its provider and descriptor (the names that go
/// with them are compared on every hit), packed into four words: the provider GUID, then id,
/// version, channel, level, opcode and task, then keywords.
type PrefixKey = [u64; 4];

fn prefix_key(e: &EventRecord<'_>) -> PrefixKey {
    let g = e.provider.to_le_bytes();
    let d = &e.descriptor;
    [
        u64::from_le_bytes(g[..8].try_into().expect("8 bytes")),
        u64::from_le_bytes(g[8..].try_into().expect("8 bytes")),
        d.id as u64
            | (d.version as u64) << 16
            | (d.channel as u64) << 24
            | (d.level as u64) << 32
            | (d.opcode as u64) << 40
            | (d.task as u64) << 48,
        d.keywords,
    ]
}

/// The rendered constant part of the lines of one kind of event.
struct Prefix {
    key: PrefixKey,
    names: [Option<Box<str>>; 4],
    /// `EventView::names_id` of the event it was rendered for.
    names_id: u64,
    text: Vec<u8>,
}

/// Slots of the direct-mapped table in front of the map of prefixes (a power of two).
const SLOTS: usize = 256;

/// At most this many kinds of events keep their rendered prefix (then the cache starts over).
const PREFIXES: usize = 4096;

/// 0..100 → its two decimal digits.
static DIGIT_PAIRS: [[u8; 2]; 100] = {
    let mut t = [[0u8; 2]; 100];
    let mut i = 0;
    while i < 100 {
        t[i] = [b'0' + (i / 10) as u8, b'0' + (i % 10) as u8];
        i += 1;
    }
    t
};

/// Caches for rendering timestamps and the constant part of each kind of event's
/// line (consecutive events mostly share the second and the kind): the state of a
/// JSON or CSV renderer.
pub(crate) struct TextCache {
    ts: String,
    /// The `YYYY-MM-DDTHH:MM:SS` text of the last whole second rendered.
    sec_cache: (i64, [u8; 19]),
    /// Every kind's prefix, found by key through `index`.
    prefixes: Vec<Prefix>,
    index: crate::schema::registry::FastMap<PrefixKey, u32>,
    /// By a hash of the key: the prefix (its index + 1; 0: none) last used for a key of that
    /// hash. Most records hit here and need neither the map nor a comparison of names.
    slots: Box<[u32; SLOTS]>,
    /// The key of the last record's ids (pid, tid, cpu, header type, pointer size; see
    /// [`TextCache::push_ids`]) and their text: consecutive records mostly share them (a buffer
    /// holds one CPU's records, often a burst of one thread's).
    ids: (u64, u64, Vec<u8>),
    /// The process name that text holds (part of its key).
    ids_name: Option<String>,
}

impl Default for TextCache {
    fn default() -> Self {
        TextCache {
            ts: String::with_capacity(32),
            sec_cache: (i64::MIN, [0; 19]),
            prefixes: Vec::new(),
            index: Default::default(),
            slots: Box::new([0; SLOTS]),
            ids: (u64::MAX, u64::MAX, Vec::new()),
            ids_name: None,
        }
    }
}

impl TextCache {
    /// Appends the RFC 3339 rendering of a FILETIME (7 fractional digits, `Z`).
    pub(crate) fn push_timestamp(&mut self, l: &mut Vec<u8>, filetime: i64) {
        let sec = filetime.div_euclid(10_000_000);
        let frac = filetime.rem_euclid(10_000_000) as u32;
        if self.sec_cache.0 != sec {
            self.ts.clear();
            let _ = write_rfc3339(&mut self.ts, sec * 10_000_000);
            let mut b = [0u8; 19];
            b.copy_from_slice(&self.ts.as_bytes()[..19]);
            self.sec_cache = (sec, b);
        }
        // The whole text in one array, written with one fixed-size copy.
        let mut t = [0u8; 28];
        t[..19].copy_from_slice(&self.sec_cache.1);
        // The 7 digits of the fraction: one, then three pairs.
        let pair = |n: u32| DIGIT_PAIRS[n as usize];
        let (a, b, c, d) = (
            frac / 1_000_000,
            pair(frac / 10_000 % 100),
            pair(frac / 100 % 100),
            pair(frac % 100),
        );
        t[19..].copy_from_slice(&[
            b'.',
            b'0' + a as u8,
            b[0],
            b[1],
            c[0],
            c[1],
            d[0],
            d[1],
            b'Z',
        ]);
        l.extend_from_slice(&t);
    }

    /// Appends the constant part of `v`'s line, as `render` writes it: rendered once per kind of
    /// event (provider, descriptor and names), copied after that.
    pub(crate) fn push_prefix(
        &mut self,
        l: &mut Vec<u8>,
        v: &EventView<'_, '_>,
        render: fn(&mut Vec<u8>, &EventView<'_, '_>),
    ) {
        let key = prefix_key(v.event);
        let h = (key[0] ^ key[1].rotate_left(21) ^ key[2].rotate_left(42) ^ key[3])
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let slot = (h >> 56) as usize % SLOTS;
        // The names of a plan-decoded record are known by their id: no comparison needed.
        if v.names_id != 0 {
            if let Some(p) = self.slots[slot]
                .checked_sub(1)
                .and_then(|i| self.prefixes.get(i as usize))
            {
                if p.key == key && p.names_id == v.names_id {
                    l.extend_from_slice(&p.text);
                    return;
                }
            }
        }
        let names = [v.provider_name, v.event_name, v.task_name, v.opcode_name];
        let found = self.index.get(&key).copied();
        if let Some(i) = found {
            let p = &self.prefixes[i as usize];
            if (v.names_id != 0 && p.names_id == v.names_id)
                || p.names.iter().zip(names).all(|(a, b)| a.as_deref() == b)
            {
                l.extend_from_slice(&p.text);
                self.slots[slot] = i + 1;
                return;
            }
        }
        let start = l.len();
        render(l, v);
        let p = Prefix {
            key,
            names: names.map(|n| n.map(Box::from)),
            names_id: v.names_id,
            text: l[start..].to_vec(),
        };
        let i = match found {
            // Another set of names for the same key: the newest replaces the entry.
            Some(i) => {
                self.prefixes[i as usize] = p;
                i
            }
            None => {
                if self.prefixes.len() >= PREFIXES {
                    self.prefixes.clear();
                    self.index.clear();
                    self.slots.fill(0);
                }
                let i = self.prefixes.len() as u32;
                self.prefixes.push(p);
                self.index.insert(key, i);
                i
            }
        };
        self.slots[slot] = i + 1;
    }

    /// Appends the text of `v`'s process (id and name), thread, CPU, header type and pointer size,
    /// and of a zero activity id, as `render` writes them (it reads nothing else of `v`): rendered
    /// again only when they change from the last record's. A record with an activity id is
    /// rendered directly.
    pub(crate) fn push_ids(
        &mut self,
        l: &mut Vec<u8>,
        v: &EventView<'_, '_>,
        render: fn(&mut Vec<u8>, &EventView<'_, '_>),
    ) {
        let e = v.event;
        if !e.activity_id.is_zero() {
            render(l, v);
            return;
        }
        let key = (
            v.pid() as u64 | (v.tid() as u64) << 32,
            e.cpu as u64 | (e.header_type as u64) << 32 | (e.pointer_size as u64) << 40,
        );
        if (self.ids.0, self.ids.1) != key || self.ids_name.as_deref() != v.process_name {
            self.ids.2.clear();
            render(&mut self.ids.2, v);
            (self.ids.0, self.ids.1) = key;
            if self.ids_name.as_deref() != v.process_name {
                self.ids_name = v.process_name.map(String::from);
            }
        }
        l.extend_from_slice(&self.ids.2);
    }
}

/// Renders events as JSON lines.
#[derive(Default)]
pub struct JsonRender {
    c: TextCache,
}

impl super::Render for JsonRender {
    fn render(&mut self, v: &EventView<'_, '_>, out: &mut Vec<u8>) {
        self.render_into(v, out);
        out.push(b'\n');
    }
}

impl JsonRender {
    /// Appends one event as a JSON object (no newline).
    pub fn render_into(&mut self, v: &EventView<'_, '_>, l: &mut Vec<u8>) {
        let e = v.event;
        // Room for the whole line at once (the prefix and the fixed fields are a few hundred bytes).
        l.reserve(
            512 + 2 * e.payload.len()
                + v.properties_json.map_or(0, |p| p.len())
                + v.stack.map_or(0, |s| 21 * s.addresses.len()),
        );
        l.extend_from_slice(b"{\"timestamp\":\"");
        self.c.push_timestamp(l, e.timestamp);
        self.c.push_prefix(l, v, json_prefix);
        self.c.push_ids(l, v, json_ids);
        match v.payload_text {
            // A payload met before (see `EventView::payload_text`): its hex once per run.
            Some(cell) => l.extend_from_slice(cell.get_or_init(|| {
                let mut h = Vec::with_capacity(2 * e.payload.len());
                push_hex(&mut h, &e.payload);
                h
            })),
            None => push_hex(l, &e.payload),
        }
        l.extend_from_slice(b"\",\"stack\":");
        let own;
        let stack = match v.stack {
            Some(s) => Some(s),
            None if e.ext.is_empty() => None,
            None => {
                own = e.stack();
                own.as_ref()
            }
        };
        match stack {
            Some(s) => {
                l.push(b'[');
                for (i, a) in s.addresses.iter().enumerate() {
                    if i > 0 {
                        l.push(b',');
                    }
                    push_quoted_hex_u64(l, *a);
                }
                l.push(b']');
            }
            None => l.extend_from_slice(b"null"),
        }
        l.extend_from_slice(b",\"properties\":");
        l.extend_from_slice(v.properties_json.unwrap_or(b"null"));
        opt_str(l, "decode_issue", v.decode_issue);
        if let Some(p) = v.layout_pointer_size {
            l.extend_from_slice(b",\"layout_pointer_size\":");
            push_dec(l, p as u64);
        }
        if let Some(ids) = v.ids {
            // The sources' names are plain words: no escaping.
            for (key, source) in [
                (&b",\"pid_source\":\""[..], ids.pid_source),
                (&b",\"tid_source\":\""[..], ids.tid_source),
            ] {
                if let Some(source) = source {
                    l.extend_from_slice(key);
                    l.extend_from_slice(source.name().as_bytes());
                    l.push(b'"');
                }
            }
        }
        if let Some(p) = v.dos_path {
            l.extend_from_slice(b",\"dos_paths\":");
            push_dos_paths(l, &p);
        }
        l.push(b'}');
    }
}

/// The `dos_paths` object of a record: `{"<field>":"<DOS path>"}` (JSON lines and CSV alike).
pub(crate) fn push_dos_paths(l: &mut Vec<u8>, p: &crate::decode::DosPath<'_>) {
    l.push(b'{');
    escape(l, p.field);
    l.push(b':');
    push_dos_path(l, p);
    l.push(b'}');
}

/// A DOS path as a JSON string: what `escape` writes for [`DosPath::text`](crate::decode::DosPath::text),
/// without decoding a path still in UTF-16.
fn push_dos_path(l: &mut Vec<u8>, p: &crate::decode::DosPath<'_>) {
    use crate::decode::view::DosText;
    match p.text {
        DosText::Text(t) => escape(l, t),
        DosText::Utf16(prefix, rest) => escape_joined_utf16(l, prefix, rest),
    }
}

/// The part of a JSON line from the process id to the opening quote of the payload (see
/// [`TextCache::push_ids`]).
fn json_ids(l: &mut Vec<u8>, v: &EventView<'_, '_>) {
    let e = v.event;
    num_or_null(l, b",\"pid\":", v.pid());
    if let Some(n) = v.process_name {
        l.extend_from_slice(b",\"process_name\":");
        escape(l, n);
    }
    num_or_null(l, b",\"tid\":", v.tid());
    l.extend_from_slice(b",\"cpu\":");
    push_dec(l, e.cpu as u64);
    l.extend_from_slice(b",\"header_type\":\"");
    l.extend_from_slice(e.header_type.name().as_bytes());
    l.extend_from_slice(b"\",\"pointer_size\":");
    push_dec(l, e.pointer_size as u64);
    l.extend_from_slice(b",\"activity_id\":\"");
    if e.activity_id.is_zero() {
        l.extend_from_slice(ZERO_GUID);
    } else {
        push_guid(l, &e.activity_id);
    }
    l.extend_from_slice(b"\",\"payload\":\"");
}

/// The part of a JSON line that is the same for every event of a kind: from the provider to the
/// channel.
fn json_prefix(l: &mut Vec<u8>, v: &EventView<'_, '_>) {
    let e = v.event;
    l.extend_from_slice(b"\",\"provider\":\"");
    push_guid(l, &e.provider);
    l.push(b'"');
    opt_str(l, "provider_name", v.provider_name);
    opt_str(l, "event_name", v.event_name);
    opt_str(l, "task_name", v.task_name);
    opt_str(l, "opcode_name", v.opcode_name);
    let d = &e.descriptor;
    let mut n = itoa::Buffer::new();
    l.extend_from_slice(b",\"id\":");
    l.extend_from_slice(n.format(d.id).as_bytes());
    l.extend_from_slice(b",\"version\":");
    l.extend_from_slice(n.format(d.version).as_bytes());
    l.extend_from_slice(b",\"level\":");
    l.extend_from_slice(n.format(d.level).as_bytes());
    l.extend_from_slice(b",\"opcode\":");
    l.extend_from_slice(n.format(d.opcode).as_bytes());
    l.extend_from_slice(b",\"task\":");
    l.extend_from_slice(n.format(d.task).as_bytes());
    l.extend_from_slice(b",\"keywords\":\"0x");
    push_hex_u64(l, d.keywords);
    l.extend_from_slice(b"\",\"channel\":");
    l.extend_from_slice(n.format(d.channel).as_bytes());
}

const HEX: &[u8; 16] = b"0123456789abcdef";
const ZERO_GUID: &[u8; 36] = b"00000000-0000-0000-0000-000000000000";

/// The JSON text of properties ([`crate::decode::TextFormat`]): what `dump` prints under
/// `properties`, CSV quotes in its `properties` column and Parquet keeps in its `properties` column.
/// The rendering is the one the module doc of [`crate::decode`] fixes.
pub struct Json;

impl crate::decode::TextFormat for Json {
    type Visitor<'b> = JsonProps<'b>;
    fn visitor<'b>(out: &'b mut Vec<u8>, scratch: &'b mut String) -> JsonProps<'b> {
        JsonProps { out, scratch }
    }
}

/// A [`PropertyVisitor`] appending the properties' JSON object text to a buffer.
pub struct JsonProps<'b> {
    out: &'b mut Vec<u8>,
    scratch: &'b mut String,
}

impl<'b> JsonProps<'b> {
    /// A visitor appending to `out`; `scratch` is reused for text conversions.
    pub fn new(out: &'b mut Vec<u8>, scratch: &'b mut String) -> Self {
        JsonProps { out, scratch }
    }

    /// Empties the buffer (a walk that failed part-way starts over).
    pub fn clear(&mut self) {
        self.out.clear();
    }

    /// The buffer's text.
    pub fn text(&self) -> &[u8] {
        self.out
    }

    /// Appends text written before (a walk's output replayed).
    pub fn push_text(&mut self, text: &[u8]) {
        self.out.extend_from_slice(text);
    }
}

impl PropertyVisitor for JsonProps<'_> {
    #[inline]
    fn field(&mut self, index: usize, name: &str) {
        if index > 0 {
            self.out.push(b',');
        }
        escape(self.out, name);
        self.out.push(b':');
    }
    #[inline]
    fn plain_field(&mut self, index: usize, name: &str) {
        self.out.reserve(name.len() + 4);
        if index > 0 {
            self.out.push(b',');
        }
        self.out.push(b'"');
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\":");
    }
    fn pointer_elements(&mut self, bytes: &[u8], width: usize) {
        push_hex_elements(self.out, bytes, width);
    }
    fn hex_elements(&mut self, bytes: &[u8], width: usize) {
        push_hex_elements(self.out, bytes, width);
    }
    #[inline]
    fn field_text(&mut self, _index: usize, _name: &str, text: &[u8], block: &[u8; 32]) {
        if text.len() <= block.len() {
            // A fixed-size copy cut to length: no `memcpy` call for a short key.
            let n = self.out.len();
            self.out.extend_from_slice(block);
            self.out.truncate(n + text.len());
        } else {
            self.out.extend_from_slice(text);
        }
    }
    fn begin_array(&mut self, _count: u64) {
        self.out.push(b'[');
    }
    #[inline]
    fn element(&mut self, i: u64) {
        if i > 0 {
            self.out.push(b',');
        }
    }
    fn end_array(&mut self) {
        self.out.push(b']');
    }
    fn begin_struct(&mut self) {
        self.out.push(b'{');
    }
    fn end_struct(&mut self) {
        self.out.push(b'}');
    }
    fn null(&mut self) {
        self.out.extend_from_slice(b"null");
    }
    fn bool(&mut self, v: bool) {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
    }
    #[inline]
    fn unsigned(&mut self, v: u64) {
        push_dec(self.out, v);
    }
    #[inline]
    fn signed(&mut self, v: i64) {
        self.out
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }
    fn f32(&mut self, v: f32) {
        let _ = serde_json::to_writer(&mut *self.out, &v);
    }
    fn f64(&mut self, v: f64) {
        let _ = serde_json::to_writer(&mut *self.out, &v);
    }
    #[inline]
    fn hex(&mut self, v: u64) {
        push_quoted_hex_u64(self.out, v);
    }
    #[inline]
    fn pointer(&mut self, v: u64) {
        push_quoted_hex_u64(self.out, v);
    }
    #[inline]
    fn str(&mut self, v: &str) {
        escape(self.out, v);
    }
    fn latin1(&mut self, v: &[u8]) {
        self.scratch.clear();
        self.scratch.extend(v.iter().map(|&c| c as char));
        escape(self.out, self.scratch);
    }
    #[inline]
    fn utf16(&mut self, units: &[u8]) {
        escape_utf16(self.out, units);
    }
    fn binary(&mut self, v: &[u8]) {
        self.out.extend_from_slice(b"\"0x");
        push_hex(self.out, v);
        self.out.push(b'"');
    }
    fn guid(&mut self, v: &crate::Guid) {
        self.out.push(b'"');
        push_guid(self.out, v);
        self.out.push(b'"');
    }
    fn sid(&mut self, v: &str) {
        escape(self.out, v);
    }
    fn filetime(&mut self, v: i64) {
        self.scratch.clear();
        let _ = write_rfc3339(self.scratch, v);
        self.out.push(b'"');
        self.out.extend_from_slice(self.scratch.as_bytes());
        self.out.push(b'"');
    }
    fn systemtime(&mut self, t: &[u16; 8]) {
        let _ = write!(
            self.out,
            "\"{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}\"",
            t[0], t[1], t[3], t[4], t[5], t[6], t[7]
        );
    }
    fn mapped(&mut self, _value: u64, name: &str) {
        escape(self.out, name);
    }
    fn ip(&mut self, v: std::net::IpAddr) {
        let _ = write!(self.out, "\"{v}\"");
    }
    fn port(&mut self, v: u16) {
        push_dec(self.out, v as u64);
    }
    fn socket_address(&mut self, v: std::net::SocketAddr) {
        let _ = write!(self.out, "\"{v}\"");
    }
    fn win32_error(&mut self, v: u32) {
        push_dec(self.out, v as u64);
    }
    fn ntstatus(&mut self, v: u32) {
        let _ = write!(self.out, "\"0x{v:08x}\"");
    }
    fn hresult(&mut self, v: u32) {
        let _ = write!(self.out, "\"0x{v:08x}\"");
    }
}

impl Value {
    /// Appends this value as JSON, exactly as its `serde::Serialize` rendering (checked by the
    /// tests), without going through a serializer: `dump` renders millions of them.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        self.visit(&mut JsonProps::new(out, &mut String::new()));
    }
}

impl Properties {
    /// Appends the properties as a JSON object, exactly as their `serde::Serialize` rendering.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        self.visit(&mut JsonProps::new(out, &mut String::new()));
    }
}

impl Decoder {
    /// As [`Decoder::decode_etl`], but the properties go to `json` as their JSON object text
    /// (cleared first; left empty when there are none) and the result's `properties` stays empty.
    /// Records whose layout fits their payload are written straight from the payload, without
    /// building values; the rest take the value path. `scratch` is reused between calls.
    pub fn decode_etl_json(
        &self,
        r: &crate::etl::Record<'_>,
        json: &mut Vec<u8>,
        scratch: &mut String,
    ) -> DecodedEvent {
        self.decode_etl_text::<Json>(r, json, scratch)
    }

    /// What `etwkit dump` prints for `r`: [`Decoder::decode_etl_json`]'s result as an
    /// [`EventView`] (the same text), without touching anything shared per record.
    pub fn view_etl<'a, 'r>(
        &'a self,
        local: &'a mut Local,
        r: &'a crate::etl::Record<'r>,
    ) -> EventView<'a, 'r> {
        self.view_etl_with::<Json>(local, r)
    }
}

impl<'a, 'r> EventView<'a, 'r> {
    /// What the sinks print for a record and its decoding; `props` receives the properties' JSON
    /// text (cleared first).
    pub fn decoded(
        event: &'a EventRecord<'r>,
        d: Option<&'a DecodedEvent>,
        props: &'a mut Vec<u8>,
    ) -> Self {
        let mut v = EventView::bare(event);
        props.clear();
        if let Some(d) = d {
            v.take_decoded(d);
            if !d.properties.is_empty() {
                d.properties.write_json(props);
            }
        }
        let props: &'a [u8] = props;
        v.with_properties_json(props)
    }
}

/// Appends a GUID as lowercase 8-4-4-4-12.
pub fn push_guid(l: &mut Vec<u8>, g: &crate::Guid) {
    let b = g.to_le_bytes();
    // Display order: data1 (BE of the LE u32), data2, data3, data4 bytes.
    const ORDER: [usize; 16] = [3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15];
    let mut out = [b'-'; 36];
    let mut o = 0;
    for (i, &k) in ORDER.iter().enumerate() {
        if i == 4 || i == 6 || i == 8 || i == 10 {
            o += 1;
        }
        out[o] = HEX[(b[k] >> 4) as usize];
        out[o + 1] = HEX[(b[k] & 15) as usize];
        o += 2;
    }
    l.extend_from_slice(&out);
}

/// How many hex digits `v` takes without leading zeros (at least one).
#[inline]
fn hex_digits(v: u64) -> usize {
    (16 - (v.leading_zeros() as usize / 4)).max(1)
}

/// Appends a u64 as lowercase hex without leading zeros. (Fixed-size copies, then a truncation:
/// no `memcpy` call for a few bytes.)
#[inline]
pub fn push_hex_u64(l: &mut Vec<u8>, v: u64) {
    let digits = hex_digits(v);
    let d = hex16(v << (4 * (16 - digits)));
    let n = l.len();
    l.extend_from_slice(&d.to_le_bytes());
    l.truncate(n + digits);
}

/// Appends `"0x…"` (quoted hex, no leading zeros). The text is put together in registers and
/// written with fixed-size copies, then cut to length; values of 32 bits (most pointers and
/// hex fields) take the short way, inline.
#[inline(always)]
pub fn push_quoted_hex_u64(l: &mut Vec<u8>, v: u64) {
    if v >> 32 == 0 {
        push_quoted_hex_u32(l, v as u32)
    } else {
        push_quoted_hex_wide(l, v)
    }
}

#[inline(always)]
fn push_quoted_hex_u32(l: &mut Vec<u8>, v: u32) {
    let digits = hex_digits(v as u64);
    let n = l.len();
    // The digits first (then '0's), the closing quote right after them.
    let d = super::hex8(v << (4 * (8 - digits))).swap_bytes();
    let d = if digits < 8 {
        d & !(0xff << (8 * digits)) | 0x22 << (8 * digits)
    } else {
        d
    };
    let lo = 0x0078_3022 | d << 24;
    let hi = d >> 40 | 0x22 << 24;
    l.extend_from_slice(&(lo as u128 | (hi as u128) << 64).to_le_bytes());
    l.truncate(n + 4 + digits);
}

/// [`push_quoted_hex_u64`] of a value of 9 to 16 digits.
#[inline(never)]
fn push_quoted_hex_wide(l: &mut Vec<u8>, v: u64) {
    let digits = hex_digits(v);
    let n = l.len();
    // `"0x` and 5 digits, 8 digits, the last 3 digits; the quote at byte 12 to 19.
    let d = hex16(v << (4 * (16 - digits)));
    let lo = 0x0078_3022 | (d as u64) << 24;
    let mid = (d >> 40) as u64;
    let tail = (d >> 104) as u64;
    let q = 3 + digits;
    let (mid, tail) = if q < 16 {
        (mid & !(0xff << (8 * (q - 8))) | 0x22 << (8 * (q - 8)), tail)
    } else {
        (
            mid,
            tail & !(0xff << (8 * (q - 16))) | 0x22 << (8 * (q - 16)),
        )
    };
    l.extend_from_slice(&(lo as u128 | (mid as u128) << 64).to_le_bytes());
    l.extend_from_slice(&tail.to_le_bytes());
    l.truncate(n + 4 + digits);
}

/// Appends `"0x…"` for each `width`-byte (4 or 8) little-endian integer of `bytes`, separated by
/// commas: an array's elements in one loop. 32-bit ones are written straight into room made once
/// for the whole array (each element a 16-byte store of `"0x` and 8 digits, then its closing
/// quote and a comma at its length; the last comma cut off), four at a time at a fixed 13-byte
/// stride when all four have 8 digits (as most stack frames do); the rest one by one.
fn push_hex_elements(l: &mut Vec<u8>, bytes: &[u8], width: usize) {
    if width == 4 {
        let n = bytes.len() / 4;
        if n == 0 {
            return;
        }
        let start = l.len();
        // An element with its comma takes at most 13 bytes; its store reaches 16 bytes.
        l.resize(start + n * 13 + 16, 0);
        let out = &mut l[start..];
        let mut pos = 0usize;
        // `"0x`, 8 digits (`d`, first digit in its lowest byte), `",`: 13 bytes of a 16-byte store.
        let full = |w: &mut [u8; 16], d: u64| {
            let lo = 0x0078_3022 | d << 24;
            let hi = d >> 40 | 0x2c22 << 24;
            *w = (lo as u128 | (hi as u128) << 64).to_le_bytes();
        };
        let mut quads = bytes.chunks_exact(16);
        for q in &mut quads {
            let v: [u32; 4] = std::array::from_fn(|k| {
                u32::from_le_bytes(q[4 * k..4 * k + 4].try_into().expect("4 bytes"))
            });
            // The fourth element's store ends 55 bytes on.
            let w: &mut [u8; 56] = (&mut out[pos..pos + 56]).try_into().expect("56 bytes");
            if v.iter().all(|&x| x >= 0x1000_0000) {
                // Four elements of 8 digits (most stack frames): each at a fixed stride.
                for k in 0..4 {
                    let d = super::hex8_le_bytes(q[4 * k..4 * k + 4].try_into().expect("4"));
                    full((&mut w[13 * k..13 * k + 16]).try_into().expect("16"), d);
                }
                pos += 52;
            } else {
                let mut at = 0;
                for x in v {
                    at += hex_element(&mut w[at..], x);
                }
                pos += at;
            }
        }
        for c in quads.remainder().chunks_exact(4) {
            let v = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            pos += hex_element(&mut out[pos..], v);
        }
        l.truncate(start + pos - 1);
        return;
    }
    l.reserve(bytes.len() / width.max(1) * (2 * width + 5) + 16);
    for (i, c) in bytes.chunks_exact(width.max(1)).enumerate() {
        if i > 0 {
            l.push(b',');
        }
        let mut w = [0u8; 8];
        let n = c.len().min(8);
        w[..n].copy_from_slice(&c[..n]);
        push_quoted_hex_u64(l, u64::from_le_bytes(w));
    }
}

/// Writes `"0x…",` for `v` (1 to 8 digits) at the start of `out` (16 bytes stored, at least 16
/// there) and returns its length.
#[inline(always)]
fn hex_element(out: &mut [u8], v: u32) -> usize {
    // 1 to 8 digits: `v | 1` has at most 31 leading zeros.
    let digits = 8 - ((v | 1).leading_zeros() as usize >> 2);
    let d = super::hex8(v << (4 * (8 - digits))).swap_bytes();
    let w: &mut [u8; 16] = (&mut out[..16]).try_into().expect("16 bytes");
    w[..8].copy_from_slice(&(0x0078_3022 | d << 24).to_le_bytes());
    w[8..].copy_from_slice(&(d >> 40).to_le_bytes());
    let q = (3 + digits) & 15;
    w[q] = b'"';
    w[(q + 1) & 15] = b',';
    5 + digits
}

fn num_or_null(l: &mut Vec<u8>, key: &[u8], v: u32) {
    l.extend_from_slice(key);
    if v == u32::MAX {
        l.extend_from_slice(b"null");
    } else {
        push_dec(l, v as u64);
    }
}

/// Appends `v` in decimal: up to 4 digits from a table with fixed-size writes (no `memcpy`
/// call), more through `itoa`.
#[inline]
pub(crate) fn push_dec(l: &mut Vec<u8>, v: u64) {
    if v < 10 {
        l.push(b'0' + v as u8);
    } else if v < 100 {
        l.extend_from_slice(&DIGIT_PAIRS[v as usize]);
    } else if v < 10_000 {
        let (hi, lo) = (DIGIT_PAIRS[v as usize / 100], DIGIT_PAIRS[v as usize % 100]);
        let w = u32::from_le_bytes([hi[0], hi[1], lo[0], lo[1]]);
        // Three digits: the leading '0' shifted out.
        let skip = (v < 1000) as usize;
        let n = l.len();
        l.extend_from_slice(&(w >> (8 * skip)).to_le_bytes());
        l.truncate(n + 4 - skip);
    } else if v < 100_000_000 {
        // 5 to 8 digits at once (SWAR): the two 4-digit halves in 32-bit lanes, split into
        // 2-digit 16-bit lanes, then into digit bytes, most significant first; the leading zero
        // digits (the low zero bytes) shifted out.
        let v = v as u32;
        let x = (v / 10_000) as u64 | ((v % 10_000) as u64) << 32;
        // x / 100 in each lane (exact below 43_699), x % 100 beside it.
        let q = ((x * 0x147b) >> 19) & 0x0000_007f_0000_007f;
        let x = q | (x - q * 100) << 16;
        // x / 10 in each 16-bit lane (exact below 179), x % 10 beside it.
        let q = ((x * 0x67) >> 10) & 0x000f_000f_000f_000f;
        let x = q | (x - q * 10) << 8;
        let zeros = (x.trailing_zeros() / 8) as usize;
        let text = (x | 0x3030_3030_3030_3030) >> (8 * zeros);
        let n = l.len();
        l.extend_from_slice(&text.to_le_bytes());
        l.truncate(n + 8 - zeros);
    } else {
        l.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }
}

#[inline]
fn opt_str(l: &mut Vec<u8>, key: &str, v: Option<&str>) {
    if let Some(s) = v {
        l.extend_from_slice(b",\"");
        l.extend_from_slice(key.as_bytes());
        l.extend_from_slice(b"\":");
        escape(l, s);
    }
}

/// Bytes that need escaping in a JSON string: control characters, `"` and `\`.
static NEEDS_ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Which of the 4 bytes of `w` need escaping in JSON or are not ASCII (SWAR, as [`find_escape`]):
/// the lowest set bit is the high bit of the first such byte in memory order (bits above it may be
/// set falsely, by the borrow out of that byte); 0 when there is none.
/// (The eight-byte mask's low half: borrows only run upwards, so the four bytes' bits are theirs.)
#[inline]
fn escape_or_non_ascii_mask(w: u32) -> u32 {
    (escape_or_non_ascii_mask64(w as u64) & 0x8080_8080) as u32
}

/// Writes ASCII bytes `c` (`m`: their `escape_or_non_ascii_mask`) as they read inside a JSON
/// string: all of them when none is to escape; else the ones before the first to escape or not
/// ASCII (the mask's lowest bit is exact), then that one escaped when it is ASCII (a path's `\`).
/// Returns how many were taken and whether the caller's fast loop may go on.
#[inline(always)]
fn ascii_step(l: &mut Vec<u8>, c: &[u8], m: u64) -> (usize, bool) {
    if m == 0 {
        l.extend_from_slice(c);
        return (c.len(), true);
    }
    let k = m.trailing_zeros() as usize / 8;
    l.extend_from_slice(&c[..k]);
    if c[k] >= 0x80 {
        return (k, false);
    }
    push_escape(l, c[k]);
    (k + 1, true)
}

/// The low bytes of four little-endian 16-bit units, packed into the low 32 bits.
#[inline(always)]
fn pack_low_bytes(w: u64) -> u64 {
    (w & 0xff) | (w >> 8 & 0xff00) | (w >> 16 & 0xff_0000) | (w >> 24 & 0xff00_0000)
}

/// [`escape_or_non_ascii_mask`] of eight bytes.
#[inline(always)]
fn escape_or_non_ascii_mask64(w: u64) -> u64 {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let below_space = w.wrapping_sub(LO * 0x20) & !w;
    let q = w ^ (LO * b'"' as u64);
    let quote = q.wrapping_sub(LO) & !q;
    let bs = w ^ (LO * b'\\' as u64);
    let backslash = bs.wrapping_sub(LO) & !bs;
    (below_space | quote | backslash | w) & HI
}

/// Index of the first byte that needs escaping: 8 bytes per step (SWAR: a byte below 0x20, or equal
/// to `"` or `\\`, sets its high bit in the mask), the last few byte by byte.
#[inline]
fn find_escape(b: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut i = 0;
    while i + 8 <= b.len() {
        let w = u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        let below_space = w.wrapping_sub(LO * 0x20) & !w;
        let q = w ^ (LO * b'"' as u64);
        let quote = q.wrapping_sub(LO) & !q;
        let bs = w ^ (LO * b'\\' as u64);
        let backslash = bs.wrapping_sub(LO) & !bs;
        let m = (below_space | quote | backslash) & HI;
        if m != 0 {
            // The lowest set bit is exact (a false one can only follow a true one).
            return Some(i + m.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    b[i..]
        .iter()
        .position(|&c| NEEDS_ESCAPE[c as usize])
        .map(|p| i + p)
}

/// Appends `s` as a JSON string (the escapes serde_json writes).
pub fn escape(l: &mut Vec<u8>, s: &str) {
    l.push(b'"');
    escape_body(l, s);
    l.push(b'"');
}

/// Appends the escaped text of `s`, without the quotes.
fn escape_body(l: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    let mut start = 0;
    while let Some(off) = find_escape(&b[start..]) {
        let i = start + off;
        l.extend_from_slice(&b[start..i]);
        push_escape(l, b[i]);
        start = i + 1;
    }
    l.extend_from_slice(&b[start..]);
}

/// Appends UTF-16LE `units` (a whole number of 2-byte units; a trailing odd byte is ignored) as a
/// JSON string: exactly `escape` of their lossy UTF-8 decoding (unpaired surrogates become
/// U+FFFD). Runs of printable ASCII, the common case, are copied eight units at a time; other
/// characters are escaped or encoded one by one, without building a string.
pub fn escape_utf16(l: &mut Vec<u8>, units: &[u8]) {
    l.reserve(units.len() / 2 + 2);
    l.push(b'"');
    escape_utf16_body(l, units);
    l.push(b'"');
}

/// As `escape` of `text` followed by the lossy decoding of UTF-16LE `units` (see
/// [`escape_utf16`]), without decoding them first.
pub(crate) fn escape_joined_utf16(l: &mut Vec<u8>, text: &str, units: &[u8]) {
    l.reserve(text.len() + units.len() / 2 + 2);
    l.push(b'"');
    escape_body(l, text);
    escape_utf16_body(l, units);
    l.push(b'"');
}

/// The text between the quotes of [`escape_utf16`].
fn escape_utf16_body(l: &mut Vec<u8>, units: &[u8]) {
    let n = units.len() / 2;
    let unit = |i: usize| u16::from_le_bytes([units[2 * i], units[2 * i + 1]]);
    let mut i = 0;
    while i < n {
        // Eight units, then four, at a time while they are ASCII (see `ascii_step`).
        while i + 8 <= n {
            let a = u64::from_le_bytes(units[2 * i..2 * i + 8].try_into().expect("8 bytes"));
            let b = u64::from_le_bytes(units[2 * i + 8..2 * i + 16].try_into().expect("8 bytes"));
            if (a | b) & 0xff00_ff00_ff00_ff00 != 0 {
                break;
            }
            let c = (pack_low_bytes(a) | pack_low_bytes(b) << 32).to_le_bytes();
            let (used, go_on) =
                ascii_step(l, &c, escape_or_non_ascii_mask64(u64::from_le_bytes(c)));
            i += used;
            if !go_on {
                break;
            }
        }
        while i + 4 <= n {
            let w = u64::from_le_bytes(units[2 * i..2 * i + 8].try_into().expect("8 bytes"));
            if w & 0xff00_ff00_ff00_ff00 != 0 {
                break;
            }
            let c = (pack_low_bytes(w) as u32).to_le_bytes();
            let m = escape_or_non_ascii_mask(u32::from_le_bytes(c)) as u64;
            let (used, go_on) = ascii_step(l, &c, m);
            i += used;
            if !go_on {
                break;
            }
        }
        if i >= n {
            break;
        }
        let u = unit(i);
        i += 1;
        if u < 0x80 {
            push_escaped_ascii(l, u as u8);
            continue;
        }
        let c = match u {
            0xd800..=0xdbff if i < n && (0xdc00..=0xdfff).contains(&unit(i)) => {
                let lo = unit(i);
                i += 1;
                char::from_u32(0x10000 + ((u as u32 - 0xd800) << 10) + (lo as u32 - 0xdc00))
            }
            _ => char::from_u32(u as u32),
        }
        .unwrap_or('\u{FFFD}');
        l.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
    }
}

/// Appends an ASCII character as it reads inside a JSON string (the escapes of `escape_body`).
#[inline]
fn push_escaped_ascii(l: &mut Vec<u8>, c: u8) {
    if !NEEDS_ESCAPE[c as usize] {
        l.push(c);
        return;
    }
    push_escape(l, c);
}

/// Appends the JSON escape of a byte that needs one (see `NEEDS_ESCAPE`).
#[inline]
fn push_escape(l: &mut Vec<u8>, c: u8) {
    match c {
        b'"' => l.extend_from_slice(b"\\\""),
        b'\\' => l.extend_from_slice(b"\\\\"),
        b'\n' => l.extend_from_slice(b"\\n"),
        b'\r' => l.extend_from_slice(b"\\r"),
        b'\t' => l.extend_from_slice(b"\\t"),
        0x08 => l.extend_from_slice(b"\\b"),
        0x0c => l.extend_from_slice(b"\\f"),
        c => {
            let _ = write!(l, "\\u{c:04x}");
        }
    }
}

impl<W: Write> Sink for JsonLines<W> {
    fn event(&mut self, v: &EventView<'_, '_>) -> io::Result<()> {
        self.render(v);
        self.line.push(b'\n');
        self.out.write_all(&self.line)
    }
    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_formatting_matches_display() {
        let g: crate::Guid = "4d4f80d9-c8bd-4d73-bb5b-19c90402c5ac".parse().unwrap();
        let mut l = Vec::new();
        push_guid(&mut l, &g);
        assert_eq!(String::from_utf8(l).unwrap(), g.to_string());
        let every_length =
            (0..64).flat_map(|k| [1u64 << k, (1u64 << k) - 1, 0xfedc_ba98_7654_3210 >> k]);
        for v in [0u64, 1, 0xf, 0x10, 0xabc, u64::MAX, 0x8000_0000_0000_0000]
            .into_iter()
            .chain(every_length)
        {
            let mut l = b"x".to_vec();
            push_hex_u64(&mut l, v);
            assert_eq!(String::from_utf8(l).unwrap(), format!("x{v:x}"));
            let mut l = b"x".to_vec();
            push_quoted_hex_u64(&mut l, v);
            assert_eq!(String::from_utf8(l).unwrap(), format!("x\"0x{v:x}\""));
        }
        // Arrays of 1..300 elements (more than one block), 4- and 8-byte wide.
        let values: Vec<u64> = (0..300u64)
            .map(|i| 0xfedc_ba98_7654_3210u64.rotate_left(i as u32 * 7) >> (i % 64))
            .collect();
        for width in [4usize, 8] {
            for n in [0usize, 1, 2, 37, 300] {
                let vals: Vec<u64> = values[..n]
                    .iter()
                    .map(|&v| if width == 4 { v as u32 as u64 } else { v })
                    .collect();
                let bytes: Vec<u8> = vals
                    .iter()
                    .flat_map(|v| v.to_le_bytes()[..width].to_vec())
                    .collect();
                let mut l = b"x".to_vec();
                push_hex_elements(&mut l, &bytes, width);
                let expect: Vec<String> = vals.iter().map(|v| format!("\"0x{v:x}\"")).collect();
                assert_eq!(
                    String::from_utf8(l).unwrap(),
                    format!("x{}", expect.join(","))
                );
            }
        }
        // 32-bit elements as `format!` writes them, after text already in the line.
        fn hex_elements_32_match_format(vals: &[u32]) {
            let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
            let mut l = b"[".to_vec();
            push_hex_elements(&mut l, &bytes, 4);
            let expect: Vec<String> = vals.iter().map(|v| format!("\"0x{v:x}\"")).collect();
            assert_eq!(
                String::from_utf8(l).unwrap(),
                format!("[{}", expect.join(","))
            );
        }
        // 32-bit elements of every digit count at every position, arrays of 1 to 40.
        let every_digits: Vec<u32> = (0..40u32)
            .map(|i| match i % 9 {
                0 => 0,
                k => (0x8765_4321u32 >> (4 * (8 - k))) | 1 << (4 * k - 1 - (i % 4)),
            })
            .collect();
        for n in 1..=every_digits.len() {
            for rot in [0usize, 3, 7] {
                let vals: Vec<u32> = (0..n)
                    .map(|i| every_digits[(i + rot) % every_digits.len()])
                    .collect();
                hex_elements_32_match_format(&vals);
            }
        }
        // Runs of 8-digit elements (whole quads take the fixed-stride path), with one shorter
        // element at each position or none.
        for n in 1..=13usize {
            for short in (0..n).map(Some).chain([None]) {
                let vals: Vec<u32> = (0..n as u32)
                    .map(|i| match short {
                        Some(s) if s as u32 == i => 0x00ab_cdef >> (i % 5),
                        _ => 0x9f0e_d1c2u32.rotate_left(4 * i) | 0x1000_0000,
                    })
                    .collect();
                hex_elements_32_match_format(&vals);
            }
        }
        let digit_counts: std::collections::BTreeSet<usize> = every_digits
            .iter()
            .map(|v| format!("{v:x}").len())
            .collect();
        assert_eq!(digit_counts.len(), 8, "{digit_counts:?}");
        // Every digit count: around each power of ten, and a stride through the 5-8 digit range.
        let around_powers = (0..19u32).flat_map(|k| {
            let p = 10u64.pow(k);
            [p - 1, p, p + 1, p * 2 - 1, p * 10 - 1]
        });
        for v in (0..12_000u64)
            .chain(around_powers)
            .chain((10_000..100_000_000u64).step_by(997))
            .chain([99_999, 100_000, u32::MAX as u64, u64::MAX])
        {
            let mut l = b"x".to_vec();
            push_dec(&mut l, v);
            assert_eq!(String::from_utf8(l).unwrap(), format!("x{v}"));
        }
        let mut j = TextCache::default();
        for t in [
            132_670_374_579_762_397i64,
            132_670_374_579_762_398,
            132_670_374_589_000_001,
            132_670_374_570_000_000,
            132_670_374_579_999_999,
            132_670_374_570_102_030,
        ] {
            let mut l = Vec::new();
            j.push_timestamp(&mut l, t);
            assert_eq!(
                String::from_utf8(l).unwrap(),
                crate::time::format_rfc3339(t)
            );
        }
    }
}

#[cfg(test)]
mod escape_tests {
    #[test]
    fn escapes_like_serde_json() {
        for s in [
            "plain",
            "quote\"back\\slash",
            "ctl\u{1}\n\r\ttab",
            "",
            "ünïcødé ✓",
            "ascii then ü and \"quotes\"",
            "abcdefgh\"ijklmnop",
            "abcdefghü",
            "abc\u{1}defgh",
            "abcd\\efghijklmnopqrstuvwxyz",
            "abcd\u{7f}\u{80}efgh",
            r"\Device\HarddiskVolume2\Windows\System32\ntdll.dll",
            "a\\b\"c\u{1}d\u{1f}e\u{8}f\u{c}g😀h\u{10ffff}\u{ffff}ü\\\\",
        ] {
            let mut l = Vec::new();
            super::escape(&mut l, s);
            assert_eq!(
                String::from_utf8(l).unwrap(),
                serde_json::to_string(s).unwrap()
            );
            let units: Vec<u8> = s.encode_utf16().flat_map(u16::to_le_bytes).collect();
            let mut l = Vec::new();
            super::escape_utf16(&mut l, &units);
            assert_eq!(
                String::from_utf8(l).unwrap(),
                serde_json::to_string(s).unwrap()
            );
        }
        // Every length to 40 with an escaped, a non-ASCII or a surrogate-pair character at every
        // position (the 4-unit steps and their tails).
        for special in [
            "\"", "\\", "\n", "\u{1}", "\u{1f}", "\u{7f}", "ü", "€", "😀",
        ] {
            for len in 0..40 {
                for at in 0..=len {
                    let s: String = (0..len)
                        .map(|k| {
                            if k == at {
                                special
                            } else {
                                ["a", "Z", "~", " "][k % 4]
                            }
                        })
                        .collect();
                    let units: Vec<u8> = s.encode_utf16().flat_map(u16::to_le_bytes).collect();
                    let mut l = b"x".to_vec();
                    super::escape_utf16(&mut l, &units);
                    assert_eq!(
                        String::from_utf8(l).unwrap(),
                        format!("x{}", serde_json::to_string(&s).unwrap())
                    );
                    // The UTF-8 path, the special twice (in one 8-byte word when close: the
                    // word's mask then has bits above the first).
                    let two = format!("{s}{special}{s}");
                    let mut l = b"x".to_vec();
                    super::escape(&mut l, &two);
                    assert_eq!(
                        String::from_utf8(l).unwrap(),
                        format!("x{}", serde_json::to_string(&two).unwrap())
                    );
                    // And as UTF-16: two to escape in one step of 4 or 8 units, escaped in place.
                    let units: Vec<u8> = two.encode_utf16().flat_map(u16::to_le_bytes).collect();
                    let mut l = b"x".to_vec();
                    super::escape_utf16(&mut l, &units);
                    assert_eq!(
                        String::from_utf8(l).unwrap(),
                        format!("x{}", serde_json::to_string(&two).unwrap())
                    );
                }
            }
        }
        // Unpaired surrogates (lone, at the end, a high one before a high one, reversed pairs),
        // a trailing odd byte: as the lossy decoding, escaped.
        for units in [
            vec![0xd800u16],
            vec![b'a' as u16, 0xdc00, b'b' as u16],
            vec![0xd83d, 0xd83d, 0xde00, b'\\' as u16],
            vec![0xde00, 0xd83d],
            vec![
                b'x' as u16,
                b'y' as u16,
                b'z' as u16,
                b'w' as u16,
                0xd800,
                0x20ac,
            ],
        ] {
            let mut bytes: Vec<u8> = units.iter().flat_map(|u| u.to_le_bytes()).collect();
            let text = String::from_utf16_lossy(&units);
            bytes.push(0x41);
            let mut l = Vec::new();
            super::escape_utf16(&mut l, &bytes);
            assert_eq!(
                String::from_utf8(l).unwrap(),
                serde_json::to_string(&text).unwrap()
            );
        }
    }
}

#[cfg(test)]
mod dos_path_tests {
    use crate::decode::view::{DosPath, DosText};

    /// A DOS path kept as a prefix and UTF-16 units writes the JSON string `escape` writes for
    /// its decoded text, and decodes to the prefix and the units' lossy decoding.
    #[test]
    fn undecoded_dos_path_writes_what_its_text_does() {
        let le = |units: &[u16]| {
            units
                .iter()
                .flat_map(|u| u.to_le_bytes())
                .collect::<Vec<u8>>()
        };
        let cases: Vec<(Vec<u8>, String)> = vec![
            (
                le(&r"Windows\System32\ntdll.dll"
                    .encode_utf16()
                    .collect::<Vec<_>>()),
                r"Windows\System32\ntdll.dll".into(),
            ),
            (
                le(&"a \"quoted\"\tname\u{1}".encode_utf16().collect::<Vec<_>>()),
                "a \"quoted\"\tname\u{1}".into(),
            ),
            (
                le(&"Zoë\\😀\\日本".encode_utf16().collect::<Vec<_>>()),
                "Zoë\\😀\\日本".into(),
            ),
            // An unpaired surrogate decodes as U+FFFD; a trailing odd byte is ignored.
            (
                {
                    let mut b = le(&[0x78, 0xd800, 0x79]);
                    b.push(0x41);
                    b
                },
                "x\u{FFFD}y".into(),
            ),
            (Vec::new(), String::new()),
        ];
        for (units, decoded) in cases {
            let p = DosPath {
                field: "FileName",
                text: DosText::Utf16(r"C:\", &units),
            };
            let text = p.text();
            assert_eq!(text, format!(r"C:\{decoded}"));
            let mut via_units = Vec::new();
            super::push_dos_path(&mut via_units, &p);
            let mut via_text = Vec::new();
            super::escape(&mut via_text, &text);
            assert_eq!(
                String::from_utf8(via_units).unwrap(),
                String::from_utf8(via_text).unwrap()
            );
        }
    }
}
