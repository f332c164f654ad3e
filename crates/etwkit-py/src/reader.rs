//! `etwkit.read(path, ...)`: the events of an ETL file, decoded, as an iterator of `EventRecord`s or
//! as a pyarrow Table.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Mutex};

use etwkit::decode::Decoder;
use etwkit::etl::{EtlFile, Order, ReadSummary};
use etwkit::filter::{EventFilter, TimeBound};
use etwkit::schema::Registry;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::errors;
use crate::record::{OwnedEvent, PyEventRecord};

/// Events handed from the reading thread to Python at a time.
const BATCH: usize = 1024;

/// A time bound as given from Python: a FILETIME int, seconds from the trace start (float), an RFC
/// 3339 string or a `datetime`.
pub fn time_bound(v: Option<&Bound<'_, PyAny>>, trace_start: i64) -> PyResult<Option<i64>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err("a time bound cannot be a bool"));
    }
    if let Ok(i) = v.extract::<i64>() {
        return Ok(Some(i));
    }
    if let Ok(f) = v.extract::<f64>() {
        return TimeBound::parse(&f.to_string())
            .map(|b| Some(b.resolve(trace_start)))
            .map_err(PyValueError::new_err);
    }
    if let Ok(s) = v.cast::<PyString>() {
        return TimeBound::parse(&s.extract::<String>()?)
            .map(|b| Some(b.resolve(trace_start)))
            .map_err(PyValueError::new_err);
    }
    let py = v.py();
    let dt = py.import("datetime")?;
    if v.is_instance(&dt.getattr("datetime")?)? {
        if v.getattr("tzinfo")?.is_none() {
            return Err(PyValueError::new_err(
                "a datetime time bound must be timezone-aware (e.g. datetime.timezone.utc)",
            ));
        }
        let base = crate::record::filetime_to_datetime(py, 0)?;
        let us: i64 = v
            .sub(base)?
            .floor_div(dt.getattr("timedelta")?.call1((0, 0, 1))?)?
            .extract()?;
        return Ok(Some(us.saturating_mul(10)));
    }
    Err(PyTypeError::new_err(
        "a time bound is a FILETIME int, seconds from the trace start (float), an RFC 3339 string or a timezone-aware datetime",
    ))
}

/// What `read()` selects.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub providers: Vec<String>,
    pub ids: Vec<u16>,
    pub pids: Vec<u32>,
    pub begin: Option<i64>,
    pub end: Option<i64>,
}

impl Selection {
    pub fn filter(&self, registry: &Registry) -> EventFilter {
        let mut f = EventFilter {
            begin: self.begin,
            end: self.end,
            ids: self.ids.clone(),
            pids: self.pids.clone(),
            ..Default::default()
        };
        for p in &self.providers {
            f.add_provider(p, |n| registry.provider_guids_named(n));
        }
        f
    }
}

/// Reads `file` in time order, decoding each selected record (after a pre-scan for the file's
/// embedded metadata), and hands the events to `sink` until it breaks.
pub fn read_events(
    file: &EtlFile,
    sel: &Selection,
    sink: &mut dyn FnMut(OwnedEvent) -> ControlFlow<()>,
) -> ReadSummary {
    let (decoder, _) = Decoder::for_file(Registry::with_builtins(), file);
    let filter = sel.filter(decoder.registry());
    file.for_each(Order::Time, |r| {
        if !decoder.matches(&filter, r) {
            return ControlFlow::Continue(());
        }
        sink(OwnedEvent::new(&r.event, decoder.decode_etl(r)))
    })
}

pub fn open(path: &PathBuf) -> PyResult<EtlFile> {
    EtlFile::open(path).map_err(errors::etl)
}

/// Warns (RuntimeWarning) about what could not be read; everything else was delivered. A file
/// cut at a buffer boundary has nothing unreadable, but lacks buffers the logger wrote: that is
/// said too (it was silent).
pub fn warn_issues(py: Python<'_>, path: &std::path::Path, s: &ReadSummary) -> PyResult<()> {
    if s.bad_buffers + s.bad_records == 0 && s.issues.is_empty() {
        return Ok(());
    }
    let first = s
        .issues
        .first()
        .map(|i| format!("file offset {}: {}", i.file_offset, i.reason))
        .unwrap_or_default();
    let msg = if s.bad_buffers + s.bad_records == 0 {
        format!(
            "{}: {first}; everything in the file was read",
            path.display()
        )
    } else {
        format!(
            "{}: {} bad buffers and {} bad records skipped; everything else was read (first: {first})",
            path.display(),
            s.bad_buffers,
            s.bad_records
        )
    };
    let msg = std::ffi::CString::new(msg).unwrap_or_default();
    PyErr::warn(
        py,
        &py.get_type::<pyo3::exceptions::PyRuntimeWarning>(),
        &msg,
        1,
    )
}

struct IterState {
    rx: Option<Receiver<Vec<OwnedEvent>>>,
    buf: VecDeque<OwnedEvent>,
    done: bool,
}

/// The events of an ETL file: iterate it for `EventRecord`s (decoded, in time order), or turn it into
/// a pyarrow Table / pandas DataFrame. Returned by `etwkit.read()`.
#[pyclass(frozen, module = "etwkit", name = "Reader")]
pub struct Reader {
    file: Arc<EtlFile>,
    sel: Selection,
    state: Mutex<IterState>,
    summary: Arc<Mutex<Option<ReadSummary>>>,
}

fn provider_list(v: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    match v {
        None => Ok(Vec::new()),
        Some(v) if v.is_none() => Ok(Vec::new()),
        Some(v) => {
            if let Ok(s) = v.cast::<PyString>() {
                return Ok(vec![s.extract::<String>()?]);
            }
            v.try_iter()?
                .map(|x| x.and_then(|x| x.str()?.extract::<String>()))
                .collect()
        }
    }
}

pub fn num_list<T: for<'a, 'py> FromPyObjectOwned<'py>>(
    v: Option<&Bound<'_, PyAny>>,
    what: &str,
) -> PyResult<Vec<T>> {
    match v {
        None => Ok(Vec::new()),
        Some(v) if v.is_none() => Ok(Vec::new()),
        Some(v) => {
            if let Ok(x) = v.extract::<T>() {
                return Ok(vec![x]);
            }
            v.try_iter()
                .map_err(|_| {
                    PyTypeError::new_err(format!("{what} must be an int or a list of ints"))
                })?
                .map(|x| {
                    x?.extract::<T>().map_err(|_| {
                        PyValueError::new_err(format!(
                            "{what}: every entry must be an int in range"
                        ))
                    })
                })
                .collect()
        }
    }
}

/// Opens `path` and returns its selected events as a `Reader`.
///
/// providers: names or GUIDs (a str or a list); ids: event ids; pids: process ids; begin/end: a
/// FILETIME int, seconds from the trace start (float), an RFC 3339 string or an aware datetime.
#[pyfunction]
#[pyo3(signature = (path, providers=None, ids=None, pids=None, begin=None, end=None))]
pub fn read(
    py: Python<'_>,
    path: PathBuf,
    providers: Option<&Bound<'_, PyAny>>,
    ids: Option<&Bound<'_, PyAny>>,
    pids: Option<&Bound<'_, PyAny>>,
    begin: Option<&Bound<'_, PyAny>>,
    end: Option<&Bound<'_, PyAny>>,
) -> PyResult<Reader> {
    let file = py.detach(|| open(&path))?;
    let start = file.header().start_time;
    let sel = Selection {
        providers: provider_list(providers)?,
        ids: num_list(ids, "ids")?,
        pids: num_list(pids, "pids")?,
        begin: time_bound(begin, start)?,
        end: time_bound(end, start)?,
    };
    Ok(Reader {
        file: Arc::new(file),
        sel,
        state: Mutex::new(IterState {
            rx: None,
            buf: VecDeque::new(),
            done: false,
        }),
        summary: Arc::new(Mutex::new(None)),
    })
}

#[pymethods]
impl Reader {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyEventRecord>> {
        // Never wait for the lock with the GIL held: its holder may be waiting for the GIL.
        let mut st = match self.state.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                return Err(PyValueError::new_err(
                    "this Reader is being iterated by another thread (like a generator already executing)",
                ))
            }
        };
        if let Some(ev) = st.buf.pop_front() {
            return Ok(Some(PyEventRecord { ev }));
        }
        if st.done {
            return Ok(None);
        }
        if st.rx.is_none() {
            let (tx, rx) = sync_channel::<Vec<OwnedEvent>>(4);
            let file = self.file.clone();
            let sel = self.sel.clone();
            let summary = self.summary.clone();
            std::thread::Builder::new()
                .name("etwkit-read".into())
                .spawn(move || {
                    let mut batch = Vec::with_capacity(BATCH);
                    let s = read_events(&file, &sel, &mut |ev| {
                        batch.push(ev);
                        if batch.len() == BATCH
                            && tx
                                .send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)))
                                .is_err()
                        {
                            return ControlFlow::Break(());
                        }
                        ControlFlow::Continue(())
                    });
                    if !batch.is_empty() {
                        let _ = tx.send(batch);
                    }
                    if let Ok(mut g) = summary.lock() {
                        *g = Some(s);
                    }
                    drop(tx);
                })
                .map_err(|e| {
                    PyValueError::new_err(format!("cannot start the reading thread: {e}"))
                })?;
            st.rx = Some(rx);
        }
        let rx = st.rx.take();
        let (got, rx) = py.detach(move || {
            let got = rx.as_ref().and_then(|r| r.recv().ok());
            (got, rx)
        });
        match got {
            Some(batch) => {
                st.rx = rx;
                st.buf.extend(batch);
                Ok(st.buf.pop_front().map(|ev| PyEventRecord { ev }))
            }
            None => {
                st.done = true;
                drop(st);
                if let Some(s) = self.summary.lock().ok().and_then(|g| g.clone()) {
                    warn_issues(py, self.file.path(), &s)?;
                }
                Ok(None)
            }
        }
    }

    /// The file's path.
    #[getter]
    fn path(&self) -> PathBuf {
        self.file.path().to_path_buf()
    }

    /// Counts of the finished iteration (records, buffers, bad_buffers, bad_records, issues), or None
    /// before the iteration ended.
    #[getter]
    fn summary<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(s) = self.summary.lock().ok().and_then(|g| g.clone()) else {
            return Ok(None);
        };
        Ok(Some(summary_dict(py, &s)?))
    }

    /// Every selected event as a pyarrow Table: typed header columns, the names, and `properties` as
    /// a JSON string (the same text `etwkit dump --format json` prints). Reads the file again.
    fn to_arrow<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let file = self.file.clone();
        let sel = self.sel.clone();
        let (batches, summary) = py.detach(move || crate::arrow::file_batches(&file, &sel));
        let batches = batches.map_err(|e| PyValueError::new_err(e.to_string()))?;
        warn_issues(py, self.file.path(), &summary)?;
        crate::arrow::to_table(py, batches)
    }

    /// `to_arrow().to_pandas()`.
    fn to_pandas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.to_arrow(py)?.call_method0("to_pandas")
    }

    fn __repr__(&self) -> String {
        format!("<etwkit.Reader {}>", self.file.path().display())
    }
}

pub fn summary_dict<'py>(py: Python<'py>, s: &ReadSummary) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("records", s.records)?;
    d.set_item("buffers", s.buffers)?;
    d.set_item("bad_buffers", s.bad_buffers)?;
    d.set_item("bad_records", s.bad_records)?;
    let issues: Vec<String> = s
        .issues
        .iter()
        .map(|i| format!("file offset {}: {}", i.file_offset, i.reason))
        .collect();
    d.set_item("issues", issues)?;
    Ok(d)
}
