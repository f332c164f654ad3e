//! The Arrow table of `Reader.to_arrow()`: built column by column in Rust and handed to pyarrow
//! through the Arrow C stream interface (arrow-rs' pyarrow bridge).

use std::fmt::Write as _;
use std::ops::ControlFlow;
use std::sync::Arc;

use arrow_array::builder::{
    StringBuilder, TimestampNanosecondBuilder, UInt16Builder, UInt32Builder, UInt64Builder,
    UInt8Builder,
};
use arrow_array::{ArrayRef, RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow_pyarrow::IntoPyArrow;
use arrow_schema::ArrowError;
use etwkit::decode::Decoder;
use etwkit::etl::{EtlFile, Order, ReadSummary};
use etwkit::schema::Registry;
use pyo3::prelude::*;

use crate::reader::Selection;

/// Rows per record batch (keeps every string column far below 2 GiB of text).
const ROWS_PER_BATCH: usize = 1 << 17;

/// FILETIME of 1970-01-01T00:00:00Z.
const UNIX_EPOCH_FILETIME: i64 = 116_444_736_000_000_000;

struct Columns {
    timestamp: TimestampNanosecondBuilder,
    provider: StringBuilder,
    provider_name: StringBuilder,
    event_name: StringBuilder,
    task_name: StringBuilder,
    opcode_name: StringBuilder,
    id: UInt16Builder,
    version: UInt8Builder,
    level: UInt8Builder,
    opcode: UInt8Builder,
    task: UInt16Builder,
    keywords: UInt64Builder,
    channel: UInt8Builder,
    pid: UInt32Builder,
    tid: UInt32Builder,
    cpu: UInt16Builder,
    activity_id: StringBuilder,
    header_type: StringBuilder,
    properties: StringBuilder,
    rows: usize,
    /// The last provider GUID and its text (records of one provider come in runs).
    last_provider: (etwkit::Guid, String),
}

impl Columns {
    fn new() -> Columns {
        Columns {
            timestamp: TimestampNanosecondBuilder::new().with_timezone("UTC"),
            provider: StringBuilder::new(),
            provider_name: StringBuilder::new(),
            event_name: StringBuilder::new(),
            task_name: StringBuilder::new(),
            opcode_name: StringBuilder::new(),
            id: UInt16Builder::new(),
            version: UInt8Builder::new(),
            level: UInt8Builder::new(),
            opcode: UInt8Builder::new(),
            task: UInt16Builder::new(),
            keywords: UInt64Builder::new(),
            channel: UInt8Builder::new(),
            pid: UInt32Builder::new(),
            tid: UInt32Builder::new(),
            cpu: UInt16Builder::new(),
            activity_id: StringBuilder::new(),
            header_type: StringBuilder::new(),
            properties: StringBuilder::new(),
            rows: 0,
            last_provider: (etwkit::Guid::ZERO, String::new()),
        }
    }

    fn push(
        &mut self,
        e: &etwkit::EventRecord<'_>,
        d: &etwkit::decode::DecodedEvent,
        json: &mut Vec<u8>,
    ) {
        let ns = e
            .timestamp
            .checked_sub(UNIX_EPOCH_FILETIME)
            .and_then(|t| t.checked_mul(100));
        self.timestamp.append_option(ns);
        if self.last_provider.0 != e.provider || self.last_provider.1.is_empty() {
            self.last_provider = (e.provider, e.provider.to_string());
        }
        self.provider.append_value(&self.last_provider.1);
        let pname = d
            .provider_name
            .as_deref()
            .or_else(|| e.traits_provider_name());
        self.provider_name.append_option(pname);
        self.event_name.append_option(d.event_name.as_deref());
        self.task_name.append_option(d.task_name.as_deref());
        self.opcode_name.append_option(d.opcode_name.as_deref());
        let k = &e.descriptor;
        self.id.append_value(k.id);
        self.version.append_value(k.version);
        self.level.append_value(k.level);
        self.opcode.append_value(k.opcode);
        self.task.append_value(k.task);
        self.keywords.append_value(k.keywords);
        self.channel.append_value(k.channel);
        // Kernel records whose header has no pid/tid: the ids the decoder attributed (as dump).
        let (pid, tid) = d.ids.map_or((e.pid, e.tid), |i| (i.pid, i.tid));
        self.pid.append_option((pid != u32::MAX).then_some(pid));
        self.tid.append_option((tid != u32::MAX).then_some(tid));
        self.cpu.append_value(e.cpu);
        if e.activity_id == etwkit::Guid::ZERO {
            self.activity_id
                .append_value("00000000-0000-0000-0000-000000000000");
        } else {
            let _ = write!(self.activity_id, "{}", e.activity_id);
            self.activity_id.append_value("");
        }
        self.header_type.append_value(e.header_type.name());
        if d.properties.is_empty() {
            self.properties.append_null();
        } else {
            json.clear();
            d.properties.write_json(json);
            self.properties
                .append_value(std::str::from_utf8(json).unwrap_or("null"));
        }
        self.rows += 1;
    }

    fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let cols: Vec<(&str, ArrayRef)> = vec![
            ("timestamp", Arc::new(self.timestamp.finish())),
            ("provider", Arc::new(self.provider.finish())),
            ("provider_name", Arc::new(self.provider_name.finish())),
            ("event_name", Arc::new(self.event_name.finish())),
            ("task_name", Arc::new(self.task_name.finish())),
            ("opcode_name", Arc::new(self.opcode_name.finish())),
            ("id", Arc::new(self.id.finish())),
            ("version", Arc::new(self.version.finish())),
            ("level", Arc::new(self.level.finish())),
            ("opcode", Arc::new(self.opcode.finish())),
            ("task", Arc::new(self.task.finish())),
            ("keywords", Arc::new(self.keywords.finish())),
            ("channel", Arc::new(self.channel.finish())),
            ("pid", Arc::new(self.pid.finish())),
            ("tid", Arc::new(self.tid.finish())),
            ("cpu", Arc::new(self.cpu.finish())),
            ("activity_id", Arc::new(self.activity_id.finish())),
            ("header_type", Arc::new(self.header_type.finish())),
            ("properties", Arc::new(self.properties.finish())),
        ];
        self.rows = 0;
        RecordBatch::try_from_iter(cols)
    }
}

/// The selected events of `file` as record batches (no Python involved; runs without the GIL).
pub fn file_batches(
    file: &EtlFile,
    sel: &Selection,
) -> (Result<Vec<RecordBatch>, ArrowError>, ReadSummary) {
    let (decoder, _) = Decoder::for_file(Registry::with_builtins(), file);
    let filter = sel.filter(decoder.registry());
    let mut cols = Columns::new();
    let mut batches = Vec::new();
    let mut json = Vec::with_capacity(1024);
    let mut err = None;
    let summary = file.for_each(Order::Time, |r| {
        if !decoder.matches(&filter, r) {
            return ControlFlow::Continue(());
        }
        let d = decoder.decode_etl(r);
        cols.push(&r.event, &d, &mut json);
        if cols.rows == ROWS_PER_BATCH {
            match cols.finish() {
                Ok(b) => batches.push(b),
                Err(e) => {
                    err = Some(e);
                    return ControlFlow::Break(());
                }
            }
        }
        ControlFlow::Continue(())
    });
    if let Some(e) = err {
        return (Err(e), summary);
    }
    // The last (possibly empty) batch also carries the schema of an empty selection.
    if cols.rows > 0 || batches.is_empty() {
        match cols.finish() {
            Ok(b) => batches.push(b),
            Err(e) => return (Err(e), summary),
        }
    }
    (Ok(batches), summary)
}

/// A `pyarrow.Table` of the batches, through the C stream interface.
pub fn to_table(py: Python<'_>, batches: Vec<RecordBatch>) -> PyResult<Bound<'_, PyAny>> {
    let schema = batches[0].schema();
    let it = RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
    let reader: Box<dyn RecordBatchReader + Send> = Box::new(it);
    reader.into_pyarrow(py)?.call_method0("read_all")
}
