//! `etwkit.pcap(path, output, events=False)`: the packets of a PktMon or NDIS-PacketCapture trace
//! as a pcapng file (what `etwkit pcap FILE -o OUTPUT [--events]` writes), and what was written.

use std::path::PathBuf;

use etwkit::decode::Decoder;
use etwkit::export::pcapng::convert::{convert, Options};
use etwkit::export::staged::StagedFile;
use etwkit::schema::Registry;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

/// Writes the capture to `output` (whole or not at all) and returns the summary as a dict:
/// `packets`, `interfaces`, `events` (journal entries written with `events=True`), `pktmon`
/// and `ndis` (each converter's counts: dropped, unsupported, incomplete, malformed ...).
#[pyfunction]
#[pyo3(signature = (path, output, events = false))]
pub fn pcap(py: Python<'_>, path: PathBuf, output: PathBuf, events: bool) -> PyResult<Py<PyAny>> {
    let (json, read) = py.detach(|| -> PyResult<_> {
        let f = crate::reader::open(&path)?;
        let (decoder, _) = Decoder::for_file(Registry::with_builtins(), &f);
        let staged =
            StagedFile::new(&output, &[&path]).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let out = staged
            .create()
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        let options = Options {
            events,
            application: Some(format!("etwkit {} (Python)", env!("CARGO_PKG_VERSION"))),
        };
        let (summary, _) = convert(&f, &decoder, out, &options)
            .map_err(|e| PyOSError::new_err(format!("writing {}: {e}", output.display())))?;
        staged
            .commit()
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        let json =
            serde_json::to_string(&summary).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok((json, summary.read))
    })?;
    crate::reader::warn_issues(py, &path, &read)?;
    Ok(py.import("json")?.call_method1("loads", (json,))?.unbind())
}
