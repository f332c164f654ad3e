//! etwkit's errors as Python exceptions: file problems are `OSError`s, bad values `ValueError`s, each
//! carrying etwkit's one-sentence message.

use pyo3::exceptions::{
    PyFileNotFoundError, PyIsADirectoryError, PyOSError, PyPermissionError, PyValueError,
};
use pyo3::prelude::*;

pyo3::create_exception!(
    etwkit,
    NotEtlError,
    PyValueError,
    "The file is not an ETL trace (empty, or its header is not ETW's)."
);
pyo3::create_exception!(
    etwkit,
    EtwError,
    PyOSError,
    "A live tracing operation failed (tracefs, the session, the kernel)."
);
pyo3::create_exception!(
    etwkit,
    UnknownProviderError,
    PyValueError,
    "No provider has this name or GUID."
);

fn io_error(e: &std::io::Error, msg: String) -> PyErr {
    match e.kind() {
        std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err(msg),
        std::io::ErrorKind::PermissionDenied => PyPermissionError::new_err(msg),
        std::io::ErrorKind::IsADirectory => PyIsADirectoryError::new_err(msg),
        _ => PyOSError::new_err(msg),
    }
}

/// A file that cannot be read at all.
pub fn etl(e: etwkit::etl::EtlError) -> PyErr {
    let msg = e.to_string();
    match &e {
        etwkit::etl::EtlError::Io { source, .. } => io_error(source, msg),
        _ => NotEtlError::new_err(msg),
    }
}

/// A live tracing error.
pub fn live(e: etwkit::live::LiveError) -> PyErr {
    use etwkit::live::LiveError as L;
    let msg = e.to_string();
    match &e {
        L::NotRoot => PyPermissionError::new_err(msg),
        L::Io { source, .. } => io_error(source, msg),
        L::UnknownProvider(_) => UnknownProviderError::new_err(msg),
        L::BadName(_) => PyValueError::new_err(msg),
        _ => EtwError::new_err(msg),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("NotEtlError", py.get_type::<NotEtlError>())?;
    m.add("EtwError", py.get_type::<EtwError>())?;
    m.add(
        "UnknownProviderError",
        py.get_type::<UnknownProviderError>(),
    )?;
    Ok(())
}
