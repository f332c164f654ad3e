//! `etwkit.net_report(path)`: one row per socket from the Winsock-AFD events of ETL files, as dicts
//! (the figures of `etwkit net --format json FILE...`).

use std::path::PathBuf;

use etwkit::analysis::net::NetAnalyzer;
use etwkit::decode::Decoder;
use etwkit::schema::Registry;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The socket report of one or more ETL files: `sockets` (process, protocol, local and remote
/// address, bytes and operations both ways, times, outcome, failures with codes and their names),
/// `afd_events`, `notes`.
#[pyfunction]
#[pyo3(signature = (*paths))]
pub fn net_report(py: Python<'_>, paths: Vec<PathBuf>) -> PyResult<Py<PyAny>> {
    if paths.is_empty() {
        return Err(PyValueError::new_err(
            "net_report needs at least one ETL file",
        ));
    }
    let json = py.detach(|| -> PyResult<String> {
        let decoder = Decoder::new(Registry::with_builtins());
        let mut an = NetAnalyzer::new();
        for p in &paths {
            let f = crate::reader::open(p)?;
            an.add_file(&f, &decoder);
        }
        serde_json::to_string(&an.report()).map_err(|e| PyValueError::new_err(e.to_string()))
    })?;
    Ok(py.import("json")?.call_method1("loads", (json,))?.unbind())
}
