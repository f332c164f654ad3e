//! Decoded events as Arrow record batches: the columns of `etwkit export`'s Parquet files and of the
//! Python package's `to_arrow()`.
//!
//! - [`EventColumns`]: one row per record, the common columns (timestamp as `timestamp[ns, UTC]`,
//!   provider GUID and name, names, descriptor fields, pid/tid/cpu, activity id, header type) and,
//!   as [`Columns`] selects, the file, the record index, the payload, the stack and the properties
//!   as a JSON object.
//! - [`TypedColumns`] (in [`super::typed`], re-exported here): the properties of one event type,
//!   one column per property with its real type ([`Kind`]), inferred from the first values seen.

use std::sync::Arc;

use arrow_array::builder::PrimitiveBuilder;
use arrow_array::builder::{
    BinaryBuilder, ListBuilder, StringBuilder, TimestampNanosecondBuilder, UInt16Builder,
    UInt32Builder, UInt64Builder, UInt8Builder,
};
use arrow_array::types::UInt32Type;
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, BinaryArray, DictionaryArray, RecordBatch, StringArray,
};
use arrow_schema::ArrowError;

use crate::decode::DecodedEvent;
use crate::event::{EventDescriptor, HeaderType};
use crate::guid::Guid;
use crate::time::FILETIME_UNIX_EPOCH;
use crate::EventRecord;

pub use super::typed::{Kind, TypedColumns, INFER_ROWS};

/// Which optional columns an [`EventColumns`] carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Columns {
    /// `file` (the input the record came from), first column.
    pub file: bool,
    /// `record`: the record's index in its file, in time order (the line of `etwkit dump`).
    pub record: bool,
    /// `task_name`, `opcode_name`.
    pub task_opcode_names: bool,
    /// `channel`.
    pub channel: bool,
    /// `header_type`.
    pub header_type: bool,
    /// `payload` (binary, the user data as stored).
    pub payload: bool,
    /// `stack` (list of uint64 return addresses; null when the record has none).
    pub stack: bool,
    /// `properties`: the decoded properties as a JSON object, as `etwkit dump` prints them (null when
    /// none).
    pub properties: bool,
    /// The text columns of few distinct values (file, provider GUID and names, process name,
    /// activity id, header type) as dictionary arrays (`Dictionary(UInt32, Utf8)`): each batch
    /// holds a name once and a key per row, which the Parquet writer maps to its own dictionary
    /// once per distinct name instead of hashing every row's text. Off: plain `Utf8` arrays.
    pub keyed_names: bool,
}

impl Columns {
    /// The columns of `Reader.to_arrow()` in the Python package.
    pub const PYTHON: Columns = Columns {
        file: false,
        record: false,
        task_opcode_names: true,
        channel: true,
        header_type: true,
        payload: false,
        stack: false,
        properties: true,
        keyed_names: false,
    };
    /// The columns of `events.parquet`: everything.
    pub const EVENTS: Columns = Columns {
        file: true,
        record: true,
        task_opcode_names: true,
        channel: true,
        header_type: true,
        payload: true,
        stack: true,
        properties: true,
        keyed_names: true,
    };
    /// The common columns of a typed (one event type) table; the properties follow as columns.
    pub const TYPED: Columns = Columns {
        file: true,
        record: true,
        task_opcode_names: false,
        channel: false,
        header_type: false,
        payload: false,
        stack: false,
        properties: false,
        keyed_names: true,
    };
}

/// The names of the common columns, in order (also the names a typed table's property must not
/// take).
pub fn column_names(c: Columns) -> Vec<&'static str> {
    let mut v = Vec::with_capacity(24);
    if c.file {
        v.push("file");
    }
    if c.record {
        v.push("record");
    }
    v.extend(["timestamp", "provider", "provider_name", "event_name"]);
    if c.task_opcode_names {
        v.extend(["task_name", "opcode_name"]);
    }
    v.extend(["id", "version", "level", "opcode", "task", "keywords"]);
    if c.channel {
        v.push("channel");
    }
    v.extend(["pid", "process_name", "tid", "cpu", "activity_id"]);
    if c.header_type {
        v.push("header_type");
    }
    if c.payload {
        v.push("payload");
    }
    if c.stack {
        v.push("stack");
    }
    if c.properties {
        v.push("properties");
    }
    v
}

/// A FILETIME as nanoseconds since 1970 (None outside what an i64 of nanoseconds holds).
pub fn filetime_to_unix_ns(ft: i64) -> Option<i64> {
    ft.checked_sub(FILETIME_UNIX_EPOCH)?.checked_mul(100)
}

/// A record's stack addresses: as decoded, or as native-endian `u64` bytes.
#[derive(Clone, Copy, Debug)]
pub enum StackRef<'a> {
    Words(&'a [u64]),
    Bytes(&'a [u8]),
}

/// The common fields of one record, as the columns take them: what [`EventRecord`] and
/// [`DecodedEvent`] give, with the decoder's attributed pid/tid (`u32::MAX`: unknown).
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    /// FILETIME.
    pub timestamp: i64,
    pub provider: Guid,
    pub provider_name: Option<&'a str>,
    pub event_name: Option<&'a str>,
    pub task_name: Option<&'a str>,
    pub opcode_name: Option<&'a str>,
    pub descriptor: EventDescriptor,
    pub pid: u32,
    /// The image name of the record's process (see [`DecodedEvent::process_name`]).
    pub process_name: Option<&'a str>,
    pub tid: u32,
    pub cpu: u16,
    pub activity_id: Guid,
    pub header_type: HeaderType,
    pub payload: &'a [u8],
    pub stack: Option<StackRef<'a>>,
}

impl<'a> Row<'a> {
    pub fn of(e: &'a EventRecord<'_>, d: &'a DecodedEvent) -> Row<'a> {
        // Kernel records: the ids the decoder attributed (as dump).
        let (pid, tid) = d.ids.map_or((e.pid, e.tid), |i| (i.pid, i.tid));
        Row {
            timestamp: e.timestamp,
            provider: e.provider,
            provider_name: d
                .provider_name
                .as_deref()
                .or_else(|| e.traits_provider_name()),
            event_name: d.event_name.as_deref(),
            task_name: d.task_name.as_deref(),
            opcode_name: d.opcode_name.as_deref(),
            descriptor: e.descriptor,
            pid,
            process_name: d.process_name.as_deref(),
            tid,
            cpu: e.cpu,
            activity_id: e.activity_id,
            header_type: e.header_type,
            payload: &e.payload[..],
            stack: d.stack.as_ref().map(|s| StackRef::Words(&s.addresses)),
        }
    }
}

/// Builds record batches of events, one row per [`EventColumns::push`].
pub struct EventColumns {
    cols: Columns,
    file: TextColumn,
    record: UInt64Builder,
    timestamp: TimestampNanosecondBuilder,
    provider: TextColumn,
    provider_name: TextColumn,
    event_name: TextColumn,
    task_name: TextColumn,
    opcode_name: TextColumn,
    id: UInt16Builder,
    version: UInt8Builder,
    level: UInt8Builder,
    opcode: UInt8Builder,
    task: UInt16Builder,
    keywords: UInt64Builder,
    channel: UInt8Builder,
    pid: UInt32Builder,
    process_name: TextColumn,
    tid: UInt32Builder,
    cpu: UInt16Builder,
    activity_id: TextColumn,
    header_type: TextColumn,
    payload: BinaryBuilder,
    stack: ListBuilder<UInt64Builder>,
    /// The properties' JSON texts as bytes: checked as UTF-8 once per batch (all values at once)
    /// when the batch is finished, not one value at a time.
    properties: BinaryBuilder,
    json: Vec<u8>,
    rows: usize,
    /// The last provider GUID and its text (records of one provider come in runs).
    last_provider: (Guid, Arc<str>),
    providers: crate::schema::registry::FastMap<Guid, Arc<str>>,
}

impl EventColumns {
    pub fn new(cols: Columns) -> EventColumns {
        EventColumns::with_capacity(cols, 1024)
    }

    /// Builders sized for `rows` rows (text and binary columns for typical lengths), so that a
    /// batch of that many rows fills them without regrowing. Memory is only touched as rows come.
    pub fn with_capacity(cols: Columns, rows: usize) -> EventColumns {
        let text = |bytes_per_row: usize| TextColumn::new(cols.keyed_names, rows, bytes_per_row);
        let pick = |on: bool| if on { rows } else { 0 };
        EventColumns {
            cols,
            file: text(if cols.file { 32 } else { 0 }),
            record: UInt64Builder::with_capacity(pick(cols.record)),
            timestamp: TimestampNanosecondBuilder::with_capacity(rows).with_timezone("UTC"),
            provider: text(36),
            provider_name: text(32),
            event_name: text(24),
            task_name: text(if cols.task_opcode_names { 16 } else { 0 }),
            opcode_name: text(if cols.task_opcode_names { 16 } else { 0 }),
            id: UInt16Builder::with_capacity(rows),
            version: UInt8Builder::with_capacity(rows),
            level: UInt8Builder::with_capacity(rows),
            opcode: UInt8Builder::with_capacity(rows),
            task: UInt16Builder::with_capacity(rows),
            keywords: UInt64Builder::with_capacity(rows),
            channel: UInt8Builder::with_capacity(pick(cols.channel)),
            pid: UInt32Builder::with_capacity(rows),
            process_name: text(16),
            tid: UInt32Builder::with_capacity(rows),
            cpu: UInt16Builder::with_capacity(rows),
            activity_id: text(36),
            header_type: text(if cols.header_type { 16 } else { 0 }),
            payload: BinaryBuilder::with_capacity(pick(cols.payload), pick(cols.payload) * 256),
            stack: ListBuilder::new(UInt64Builder::new()),
            properties: BinaryBuilder::with_capacity(
                pick(cols.properties),
                pick(cols.properties) * 512,
            ),
            json: Vec::with_capacity(1024),
            rows: 0,
            last_provider: (Guid::ZERO, Arc::from("")),
            providers: Default::default(),
        }
    }

    /// Whether the `stack` column is selected (else the decoder need not look stacks up).
    pub fn wants_stack(&self) -> bool {
        self.cols.stack
    }

    /// Rows pushed since the last [`EventColumns::finish`].
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Appends one record. `file` and `record` fill the `file` and `record` columns when they are
    /// selected.
    pub fn push(&mut self, file: &str, record: u64, e: &EventRecord<'_>, d: &DecodedEvent) {
        self.push_common(file, record, &Row::of(e, d));
        if self.cols.properties {
            if d.properties.is_empty() {
                self.properties.append_null();
            } else {
                self.json.clear();
                d.properties.write_json(&mut self.json);
                self.properties.append_value(&self.json);
            }
        }
        self.rows += 1;
    }

    /// Appends one record given as its common fields and its properties' JSON object text (as
    /// [`crate::decode::Decoder::decode_etl_json`] writes it; empty: none, a null).
    pub fn push_row(&mut self, file: &str, record: u64, r: &Row<'_>, json: &[u8]) {
        self.push_common(file, record, r);
        if self.cols.properties {
            if json.is_empty() {
                self.properties.append_null();
            } else {
                self.properties.append_value(json);
            }
        }
        self.rows += 1;
    }

    /// Every column but `properties`; does not count the row.
    fn push_common(&mut self, file: &str, record: u64, r: &Row<'_>) {
        let c = self.cols;
        if c.file {
            self.file.append_value(file);
        }
        if c.record {
            self.record.append_value(record);
        }
        self.timestamp
            .append_option(filetime_to_unix_ns(r.timestamp));
        if self.last_provider.0 != r.provider || self.last_provider.1.is_empty() {
            // Records of a few providers interleave: each GUID's text is made once.
            let text = self
                .providers
                .entry(r.provider)
                .or_insert_with(|| Arc::from(r.provider.to_string()));
            self.last_provider = (r.provider, text.clone());
        }
        self.provider.append_value(&self.last_provider.1);
        self.provider_name.append_option(r.provider_name);
        self.event_name.append_option(r.event_name);
        if c.task_opcode_names {
            self.task_name.append_option(r.task_name);
            self.opcode_name.append_option(r.opcode_name);
        }
        let k = &r.descriptor;
        self.id.append_value(k.id);
        self.version.append_value(k.version);
        self.level.append_value(k.level);
        self.opcode.append_value(k.opcode);
        self.task.append_value(k.task);
        self.keywords.append_value(k.keywords);
        if c.channel {
            self.channel.append_value(k.channel);
        }
        self.pid.append_option((r.pid != u32::MAX).then_some(r.pid));
        self.process_name.append_option(r.process_name);
        self.tid.append_option((r.tid != u32::MAX).then_some(r.tid));
        self.cpu.append_value(r.cpu);
        if r.activity_id == Guid::ZERO {
            self.activity_id
                .append_value("00000000-0000-0000-0000-000000000000");
        } else {
            let mut buf = [0u8; 36];
            self.activity_id
                .append_value(guid_text(&r.activity_id, &mut buf));
        }
        if c.header_type {
            self.header_type.append_value(r.header_type.name());
        }
        if c.payload {
            self.payload.append_value(r.payload);
        }
        if c.stack {
            match r.stack {
                Some(StackRef::Words(s)) => {
                    self.stack.values().append_slice(s);
                    self.stack.append(true);
                }
                Some(StackRef::Bytes(b)) => {
                    let v = self.stack.values();
                    for w in b.chunks_exact(8) {
                        v.append_value(u64::from_ne_bytes(w.try_into().expect("8 bytes")));
                    }
                    self.stack.append(true);
                }
                None => self.stack.append(false),
            }
        }
    }

    /// The columns built so far (named as [`column_names`]); the builders start over, sized for
    /// as many rows and bytes as this batch had (no regrowing while the next batch fills).
    pub fn finish_columns(&mut self) -> Vec<(&'static str, ArrayRef)> {
        fn prim<T: ArrowPrimitiveType>(b: &mut PrimitiveBuilder<T>, n: usize) -> ArrayRef {
            Arc::new(std::mem::replace(b, PrimitiveBuilder::with_capacity(n)).finish())
        }
        fn text(b: &mut TextColumn, n: usize) -> ArrayRef {
            b.finish(n)
        }
        let c = self.cols;
        // Small batches (often the last) leave small builders.
        let n = if self.rows >= 1024 { self.rows } else { 64 };
        let mut v: Vec<(&'static str, ArrayRef)> = Vec::with_capacity(24);
        if c.file {
            v.push(("file", text(&mut self.file, n)));
        }
        if c.record {
            v.push(("record", prim(&mut self.record, n)));
        }
        let ts = self.timestamp.finish();
        self.timestamp = TimestampNanosecondBuilder::with_capacity(n).with_timezone("UTC");
        v.push(("timestamp", Arc::new(ts)));
        v.push(("provider", text(&mut self.provider, n)));
        v.push(("provider_name", text(&mut self.provider_name, n)));
        v.push(("event_name", text(&mut self.event_name, n)));
        if c.task_opcode_names {
            v.push(("task_name", text(&mut self.task_name, n)));
            v.push(("opcode_name", text(&mut self.opcode_name, n)));
        }
        v.push(("id", prim(&mut self.id, n)));
        v.push(("version", prim(&mut self.version, n)));
        v.push(("level", prim(&mut self.level, n)));
        v.push(("opcode", prim(&mut self.opcode, n)));
        v.push(("task", prim(&mut self.task, n)));
        v.push(("keywords", prim(&mut self.keywords, n)));
        if c.channel {
            v.push(("channel", prim(&mut self.channel, n)));
        }
        v.push(("pid", prim(&mut self.pid, n)));
        v.push(("process_name", text(&mut self.process_name, n)));
        v.push(("tid", prim(&mut self.tid, n)));
        v.push(("cpu", prim(&mut self.cpu, n)));
        v.push(("activity_id", text(&mut self.activity_id, n)));
        if c.header_type {
            v.push(("header_type", text(&mut self.header_type, n)));
        }
        if c.payload {
            let a = self.payload.finish();
            let bytes = a.value_data().len() / a.len().max(1) * n;
            self.payload = BinaryBuilder::with_capacity(n, bytes * 5 / 4);
            v.push(("payload", Arc::new(a)));
        }
        if c.stack {
            v.push(("stack", Arc::new(self.stack.finish())));
        }
        if c.properties {
            let a = self.properties.finish();
            let bytes = a.value_data().len() / a.len().max(1) * n;
            self.properties = BinaryBuilder::with_capacity(n, bytes * 5 / 4);
            v.push(("properties", Arc::new(json_texts(a))));
        }
        self.rows = 0;
        v
    }

    /// The rows built so far as one batch (every column nullable, so that all batches share one
    /// schema); the builders start over.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        RecordBatch::try_from_iter_with_nullable(
            self.finish_columns().into_iter().map(|(n, a)| (n, a, true)),
        )
    }
}

/// A text column: plain (`Utf8`), or keyed (`Dictionary(UInt32, Utf8)`, see
/// [`Columns::keyed_names`]).
enum TextColumn {
    Plain(StringBuilder),
    Keyed(KeyedText),
}

/// A keyed text column being built: the batch's distinct texts, a key per row.
struct KeyedText {
    keys: UInt32Builder,
    values: StringBuilder,
    index: crate::schema::registry::FastMap<Box<str>, u32>,
    /// The key of the last row's text and that text (texts come in runs).
    last: Option<u32>,
    last_text: Vec<u8>,
}

impl TextColumn {
    fn new(keyed: bool, rows: usize, bytes_per_row: usize) -> TextColumn {
        if keyed {
            TextColumn::Keyed(KeyedText {
                keys: UInt32Builder::with_capacity(rows),
                values: StringBuilder::new(),
                index: Default::default(),
                last: None,
                last_text: Vec::new(),
            })
        } else {
            TextColumn::Plain(StringBuilder::with_capacity(rows, rows * bytes_per_row))
        }
    }

    #[inline]
    fn append_value(&mut self, v: &str) {
        match self {
            TextColumn::Plain(b) => b.append_value(v),
            TextColumn::Keyed(k) => {
                let key = k.key(v);
                k.keys.append_value(key);
            }
        }
    }

    #[inline]
    fn append_option(&mut self, v: Option<&str>) {
        match (self, v) {
            (TextColumn::Plain(b), v) => b.append_option(v),
            (t @ TextColumn::Keyed(_), Some(v)) => t.append_value(v),
            (TextColumn::Keyed(k), None) => k.keys.append_null(),
        }
    }

    /// The rows so far as an array; the column starts over, sized for `n` rows.
    fn finish(&mut self, n: usize) -> ArrayRef {
        match self {
            TextColumn::Plain(b) => {
                let a = b.finish();
                let bytes = a.value_data().len() / a.len().max(1) * n;
                *b = StringBuilder::with_capacity(n, bytes * 5 / 4);
                Arc::new(a)
            }
            TextColumn::Keyed(k) => {
                let keys = std::mem::replace(&mut k.keys, UInt32Builder::with_capacity(n)).finish();
                let values = k.values.finish();
                k.index.clear();
                k.last = None;
                Arc::new(
                    DictionaryArray::<UInt32Type>::try_new(keys, Arc::new(values))
                        .expect("keys within the values"),
                )
            }
        }
    }
}

impl KeyedText {
    /// The key of `v` in this batch, its text added if new.
    #[inline]
    fn key(&mut self, v: &str) -> u32 {
        if let Some(k) = self.last {
            if same_bytes(&self.last_text, v.as_bytes()) {
                return k;
            }
        }
        let k = match self.index.get(v) {
            Some(&k) => k,
            None => {
                let k = self.index.len() as u32;
                self.values.append_value(v);
                self.index.insert(Box::from(v), k);
                k
            }
        };
        self.last = Some(k);
        self.last_text.clear();
        self.last_text.extend_from_slice(v.as_bytes());
        k
    }
}

/// Whether `a` and `b` hold the same bytes: short texts (names, GUID texts) compared a word at a
/// time in line (the last word overlapping the one before), longer ones by `memcmp`.
#[inline]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n > 64 {
        return a == b;
    }
    if n < 8 {
        return a.iter().zip(b).all(|(p, q)| p == q);
    }
    let word = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().expect("8 bytes"));
    let mut at = 0;
    while at + 8 < n {
        if word(a, at) != word(b, at) {
            return false;
        }
        at += 8;
    }
    word(a, n - 8) == word(b, n - 8)
}

/// JSON texts as a string array: all values checked as UTF-8 at once; should one not be (the
/// JSON writer only writes text), that value becomes `null` (the JSON literal) as before.
fn json_texts(a: BinaryArray) -> StringArray {
    StringArray::try_from_binary(a.clone()).unwrap_or_else(|_| {
        a.iter()
            .map(|v| v.map(|b| std::str::from_utf8(b).unwrap_or("null")))
            .collect()
    })
}

/// Two lowercase hex digits per byte value.
pub(super) const HEX_PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [DIGITS[i >> 4], DIGITS[i & 15]];
        i += 1;
    }
    t
};

/// `g` as its `Display` text (lowercase, `8-4-4-4-12` digits), made in `buf`.
fn guid_text<'b>(g: &Guid, buf: &'b mut [u8; 36]) -> &'b str {
    let b = g.to_le_bytes();
    // Display order: data1, data2, data3 as numbers (little-endian on disk), then data4.
    let order = [3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15];
    let mut at = 0;
    for (k, &i) in order.iter().enumerate() {
        if matches!(k, 4 | 6 | 8 | 10) {
            buf[at] = b'-';
            at += 1;
        }
        buf[at..at + 2].copy_from_slice(&HEX_PAIRS[b[i] as usize]);
        at += 2;
    }
    std::str::from_utf8(&buf[..]).expect("hex digits")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keyed name columns hold, row by row, the texts plain ones hold (nulls where they have
    /// nulls), over batches (each batch keyed anew) and names that interleave.
    #[test]
    fn keyed_names_hold_the_plain_texts() {
        use arrow_array::cast::AsArray;
        let keyed = Columns::EVENTS;
        let plain = Columns {
            keyed_names: false,
            ..Columns::EVENTS
        };
        let (mut k, mut p) = (EventColumns::new(keyed), EventColumns::new(plain));
        let names = [
            "Alpha",
            "Beta",
            "a-longer-name-than-a-word-or-eight",
            "",
            "Beta ",
        ];
        for batch in 0..3 {
            for i in 0..500usize {
                let pick = |m: usize| (i * m + batch) % 7;
                let name = |m: usize| names.get(pick(m)).copied();
                let row = Row {
                    timestamp: 0,
                    provider: Guid::new(pick(3) as u32, 0, 0, [0; 8]),
                    provider_name: name(3),
                    event_name: name(5),
                    task_name: name(2),
                    opcode_name: name(1),
                    descriptor: EventDescriptor::default(),
                    pid: 4,
                    process_name: name(4),
                    tid: 8,
                    cpu: 0,
                    activity_id: Guid::new(0, 0, pick(6) as u16, [0; 8]),
                    header_type: HeaderType::EventHeader64,
                    payload: b"",
                    stack: None,
                };
                let file = names[i % 2];
                k.push_row(file, i as u64, &row, b"");
                p.push_row(file, i as u64, &row, b"");
            }
            let (kb, pb) = (k.finish().unwrap(), p.finish().unwrap());
            assert_eq!(kb.num_columns(), pb.num_columns());
            let mut compared = 0;
            for (f, (ka, pa)) in kb
                .schema()
                .fields()
                .iter()
                .zip(kb.columns().iter().zip(pb.columns()))
            {
                let Some(d) = ka.as_dictionary_opt::<UInt32Type>() else {
                    assert_eq!(ka.data_type(), pa.data_type(), "{}", f.name());
                    continue;
                };
                let texts = d.values().as_string::<i32>();
                let want = pa.as_string::<i32>();
                let got: Vec<Option<&str>> = d
                    .keys()
                    .iter()
                    .map(|key| key.map(|key| texts.value(key as usize)))
                    .collect();
                assert_eq!(got, want.iter().collect::<Vec<_>>(), "{}", f.name());
                compared += 1;
            }
            assert_eq!(compared, 9);
        }
    }

    #[test]
    fn same_bytes_is_slice_equality() {
        let base: Vec<u8> = (0..80u8).collect();
        for n in 0..80 {
            let a = &base[..n];
            assert!(same_bytes(a, a), "{n}");
            assert!(!same_bytes(a, &base[..n + 1]), "{n}");
            for at in 0..n {
                let mut b = a.to_vec();
                b[at] ^= 0x40;
                assert!(!same_bytes(a, &b), "{n} {at}");
            }
        }
    }

    #[test]
    fn guid_text_as_display() {
        for g in [
            Guid::ZERO,
            Guid::from_str_const("01234567-89ab-cdef-0123-456789abcdef"),
            Guid::new(0xdead_beef, 0x1, 0xfff0, [0, 1, 2, 0xff, 4, 5, 6, 0x70]),
        ] {
            let mut buf = [0u8; 36];
            assert_eq!(guid_text(&g, &mut buf), g.to_string());
        }
    }
}
