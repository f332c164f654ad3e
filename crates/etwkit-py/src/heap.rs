//! `etwkit.heap_report(path)`: the heap leak report of an ETL file with heap-provider events, as
//! dicts (the same figures as `etwkit heap --format json FILE`).

use std::path::PathBuf;

use etwkit::decode::symbols::{SymbolPath, Symbolizer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The symbolizer of a symbol path given to a report function, if any (a bad path: ValueError).
pub fn symbolizer(path: Option<&str>) -> PyResult<Option<Symbolizer>> {
    match path {
        None => Ok(None),
        Some(p) => SymbolPath::parse(p)
            .map(|p| Some(Symbolizer::new(p)))
            .map_err(|e| PyValueError::new_err(format!("symbols: {e}"))),
    }
}

/// The heap report of `path`: processes, outstanding blocks by allocation stack, top allocating
/// stacks (`top` stacks, `frames` frames each), lost events and notes. `symbols`: a symbol path
/// whose PDB files name Windows frames by function and line, as in `cpu_report`.
#[pyfunction]
#[pyo3(signature = (path, top=10, frames=8, symbols=None))]
pub fn heap_report(
    py: Python<'_>,
    path: PathBuf,
    top: usize,
    frames: usize,
    symbols: Option<String>,
) -> PyResult<Py<PyAny>> {
    let symbols = symbolizer(symbols.as_deref())?;
    let json = py.detach(|| -> PyResult<String> {
        let f = crate::reader::open(&path)?;
        let (an, images, modules) = etwkit::analysis::heap::analyze_file_modules(&f);
        // Stacks named as `etwkit heap --report` names them: ELF files of the mappings the file
        // carries (Linux-born traces), or `module+offset` from its image events (Windows traces).
        let report = match etwkit::live::heap::saved_trace_namer(&images, modules, symbols) {
            Some(mut namer) => an.report(Some(namer.as_mut()), top, frames),
            None => an.report(None, top, frames),
        };
        serde_json::to_string(&report).map_err(|e| PyValueError::new_err(e.to_string()))
    })?;
    Ok(py.import("json")?.call_method1("loads", (json,))?.unbind())
}
