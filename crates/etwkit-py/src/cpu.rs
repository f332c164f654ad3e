//! `etwkit.cpu_report(path, ...)`: the CPU sampling profile of a trace, as the dict `etwkit cpu
//! --format json FILE` prints.

use std::path::PathBuf;

use etwkit::analysis::cpu::analyze_file;
use etwkit::decode::Decoder;
use etwkit::schema::Registry;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::reader::{num_list, time_bound, Selection};

/// The CPU profile of an ETL file's kernel SampledProfile events: `total_samples`, per process,
/// modules by exclusive and inclusive samples, the `top` stacks (`frames` frames each, leaf
/// first, named by module+offset or JIT-compiled .NET method), the sampling interval and the
/// logger's losses. `pids` keeps the samples of those processes; `begin`/`end` are time bounds as
/// `read()` takes them. `symbols` is a symbol path (`_NT_SYMBOL_PATH` syntax) whose PDB files name
/// Windows frames by function and line (`symbols` in the dict: what was read and what was not).
#[pyfunction]
#[pyo3(signature = (path, pids=None, begin=None, end=None, top=10, frames=16, symbols=None))]
// The keyword arguments of the Python function, one each.
#[allow(clippy::too_many_arguments)]
pub fn cpu_report(
    py: Python<'_>,
    path: PathBuf,
    pids: Option<&Bound<'_, PyAny>>,
    begin: Option<&Bound<'_, PyAny>>,
    end: Option<&Bound<'_, PyAny>>,
    top: usize,
    frames: usize,
    symbols: Option<String>,
) -> PyResult<Py<PyAny>> {
    let mut symbols = crate::heap::symbolizer(symbols.as_deref())?;
    let file = py.detach(|| crate::reader::open(&path))?;
    let start = file.header().start_time;
    let sel = Selection {
        pids: num_list(pids, "pids")?,
        begin: time_bound(begin, start)?,
        end: time_bound(end, start)?,
        ..Default::default()
    };
    let json = py.detach(|| -> PyResult<String> {
        let (decoder, _) = Decoder::for_file(Registry::with_builtins(), &file);
        let filter = sel.filter(decoder.registry());
        let read = analyze_file(&file, &decoder, &filter);
        let report = read.analyzer.report_with(top, frames, symbols.as_mut());
        serde_json::to_string(&report).map_err(|e| PyValueError::new_err(e.to_string()))
    })?;
    Ok(py.import("json")?.call_method1("loads", (json,))?.unbind())
}
