//! `etwkit.heap_report(path)`: the heap leak report of an ETL file with heap-provider events, as
//! dicts (the same figures as `etwkit heap --format json FILE`).

use std::path::PathBuf;

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
        let (an, images, modules) = etwkit::analysis::heap::analyze_file_modules(&f);
        // Stacks named as `etwkit heap --report` names them: ELF files of the mappings the file
        // carries (Linux-born traces), or `module+offset` from its image events (Windows traces).
        let report = match etwkit::live::heap::saved_trace_namer(&images, modules, None) {
            Some(mut namer) => an.report(Some(namer.as_mut()), top, frames),
            None => an.report(None, top, frames),
        };
        serde_json::to_string(&report).map_err(|e| PyValueError::new_err(e.to_string()))
    })?;
    Ok(py.import("json")?.call_method1("loads", (json,))?.unbind())
}
