//! `etwkit.heap_report(path)`: the heap leak report of an ETL file with heap-provider events, as
//! dicts (the same figures as `etwkit heap --format json FILE`).

use std::ops::ControlFlow;
use std::path::PathBuf;

use etwkit::analysis::heap::{HeapAnalyzer, WindowsHeapEvents};
use etwkit::etl::Order;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The heap report of `path`: processes, outstanding blocks by allocation stack, top allocating
/// stacks (`top` stacks, `frames` frames each), lost events and notes.
#[pyfunction]
#[pyo3(signature = (path, top=10, frames=8))]
pub fn heap_report(
    py: Python<'_>,
    path: PathBuf,
    top: usize,
    frames: usize,
) -> PyResult<Py<PyAny>> {
    let json = py.detach(|| -> PyResult<String> {
        let f = crate::reader::open(&path)?;
        let mut w = WindowsHeapEvents::new();
        let summary = f.for_each(Order::Time, |r| {
            w.push(&r.event);
            ControlFlow::Continue(())
        });
        let mut an = HeapAnalyzer::new();
        an.add_lost(f.header().events_lost as u64 + summary.bad_records);
        if summary.bad_buffers > 0 {
            an.add_note(format!("{} unreadable buffers were skipped", summary.bad_buffers));
        }
        if w.malformed > 0 {
            an.add_note(format!("{} heap events too short to decode", w.malformed));
        }
        if w.heap_events == 0 {
            an.add_note("no heap events (HeapTraceProvider 222962ab-6180-4b88-a825-346b75f2a24a) in this file");
        }
        for op in w.finish() {
            an.add(&op);
        }
        serde_json::to_string(&an.report(None, top, frames))
            .map_err(|e| PyValueError::new_err(e.to_string()))
    })?;
    Ok(py.import("json")?.call_method1("loads", (json,))?.unbind())
}
