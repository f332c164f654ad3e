//! The Arrow table of `Reader.to_arrow()`: built column by column in Rust and handed to pyarrow
//! through the Arrow C stream interface (arrow-rs' pyarrow bridge).

use std::ops::ControlFlow;

use arrow_array::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow_pyarrow::IntoPyArrow;
use arrow_schema::ArrowError;
use etwkit::decode::Decoder;
use etwkit::etl::{EtlFile, Order, ReadSummary};
use etwkit::export::arrow::{Columns, EventColumns};
use etwkit::schema::Registry;
use pyo3::prelude::*;

use crate::reader::Selection;

/// Rows per record batch (keeps every string column far below 2 GiB of text).
const ROWS_PER_BATCH: usize = 1 << 17;

/// The selected events of `file` as record batches (no Python involved; runs without the GIL).
pub fn file_batches(
    file: &EtlFile,
    sel: &Selection,
) -> (Result<Vec<RecordBatch>, ArrowError>, ReadSummary) {
    let (decoder, _) = Decoder::for_file(Registry::with_builtins(), file);
    let filter = sel.filter(decoder.registry());
    // The library's builder (the columns of `etwkit export`'s events.parquet, less file, record,
    // payload and stack).
    let mut cols = EventColumns::new(Columns::PYTHON);
    let mut batches = Vec::new();
    let mut err = None;
    let summary = file.for_each(Order::Time, |r| {
        if !decoder.matches(&filter, r) {
            return ControlFlow::Continue(());
        }
        let d = decoder.decode_etl(r);
        cols.push("", 0, &r.event, &d);
        if cols.rows() == ROWS_PER_BATCH {
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
    if cols.rows() > 0 || batches.is_empty() {
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
