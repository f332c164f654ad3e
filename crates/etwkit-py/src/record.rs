//! `etwkit.EventRecord`: one event with PythonForWindows' attributes plus names and decoded
//! properties as Python values.

use std::sync::Arc;

use etwkit::decode::{DecodedEvent, Properties, Value};
use etwkit::{EventDescriptor, Guid, HeaderType};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use pyo3::IntoPyObjectExt;

/// An event copied out of the reader or the live session, with its decoding.
pub struct OwnedEvent {
    pub header_type: HeaderType,
    pub provider: Guid,
    pub desc: EventDescriptor,
    pub pid: u32,
    pub tid: u32,
    pub cpu: u16,
    pub timestamp: i64,
    pub activity_id: Guid,
    pub payload: Vec<u8>,
    pub decoded: DecodedEvent,
}

impl OwnedEvent {
    pub fn new(rec: &etwkit::EventRecord<'_>, mut decoded: DecodedEvent) -> OwnedEvent {
        if decoded.provider_name.is_none() {
            decoded.provider_name = rec.traits_provider_name().map(Arc::from);
        }
        // Kernel records: the ids the decoder attributed (as dump: the payload's process, the
        // thread table's where the header has none).
        let (pid, tid) = decoded.ids.map_or((rec.pid, rec.tid), |i| (i.pid, i.tid));
        OwnedEvent {
            header_type: rec.header_type,
            provider: rec.provider,
            desc: rec.descriptor,
            pid,
            tid,
            cpu: rec.cpu,
            timestamp: rec.timestamp,
            activity_id: rec.activity_id,
            payload: rec.payload.to_vec(),
            decoded,
        }
    }
}

/// 1601-01-01T00:00:00+00:00 and `datetime.timedelta`, looked up once.
fn filetime_base(py: Python<'_>) -> PyResult<&(Py<PyAny>, Py<PyAny>)> {
    static BASE: PyOnceLock<(Py<PyAny>, Py<PyAny>)> = PyOnceLock::new();
    BASE.get_or_try_init(py, || {
        let dt = py.import("datetime")?;
        let utc = dt.getattr("timezone")?.getattr("utc")?;
        let kw = PyDict::new(py);
        kw.set_item("tzinfo", utc)?;
        let epoch = dt
            .getattr("datetime")?
            .call((1601, 1, 1), Some(&kw))?
            .unbind();
        Ok((epoch, dt.getattr("timedelta")?.unbind()))
    })
}

/// A FILETIME (100 ns since 1601, UTC) as a timezone-aware `datetime` (microsecond precision), or the
/// int itself when it is out of `datetime`'s range.
pub fn filetime_to_datetime(py: Python<'_>, ft: i64) -> PyResult<Py<PyAny>> {
    let (epoch, delta) = filetime_base(py)?;
    let kw = PyDict::new(py);
    kw.set_item("microseconds", ft.div_euclid(10))?;
    let d = delta.bind(py).call((), Some(&kw))?;
    match epoch.bind(py).add(d) {
        Ok(t) => Ok(t.unbind()),
        Err(_) => ft.into_py_any(py),
    }
}

fn systemtime(py: Python<'_>, t: &[u16; 8]) -> PyResult<Py<PyAny>> {
    let dt = py.import("datetime")?.getattr("datetime")?;
    let r = dt.call1((t[0], t[1], t[3], t[4], t[5], t[6], u32::from(t[7]) * 1000));
    match r {
        Ok(v) => Ok(v.unbind()),
        // Not a valid date: the same text `dump` prints.
        Err(_) => Value::SystemTime(*t).to_json().to_string().into_py_any(py),
    }
}

/// One decoded value as a Python value.
pub fn value_to_py(py: Python<'_>, v: &Value) -> PyResult<Py<PyAny>> {
    match v {
        Value::Null => Ok(py.None()),
        Value::Bool(b) => b.into_py_any(py),
        Value::I64(x) => x.into_py_any(py),
        Value::U64(x) | Value::Hex(x) | Value::Pointer(x) => x.into_py_any(py),
        Value::F32(x) => f64::from(*x).into_py_any(py),
        Value::F64(x) => x.into_py_any(py),
        Value::String(s) | Value::Sid(s) => s.into_py_any(py),
        Value::Mapped { name, .. } => name.into_py_any(py),
        Value::Guid(g) => g.to_string().into_py_any(py),
        Value::Binary(b) => PyBytes::new(py, b).into_py_any(py),
        Value::Array(a) => {
            let l = PyList::empty(py);
            for x in a {
                l.append(value_to_py(py, x)?)?;
            }
            l.into_py_any(py)
        }
        Value::Struct(p) => properties_to_py(py, p).map(|d| d.into_any().unbind()),
        Value::Ipv4(a) => a.to_string().into_py_any(py),
        Value::Ipv6(a) => a.to_string().into_py_any(py),
        Value::SocketAddress(a) => a.to_string().into_py_any(py),
        Value::Port(p) => p.into_py_any(py),
        Value::Win32Error(x) | Value::NtStatus(x) | Value::HResult(x) => x.into_py_any(py),
        Value::FileTime(t) => filetime_to_datetime(py, *t),
        Value::SystemTime(t) => systemtime(py, t),
    }
}

thread_local! {
    /// Property names as Python strings, made once: interned keys keep their hash, so building the
    /// dicts of a million events does not re-create and re-hash the same few hundred names.
    static KEYS: std::cell::RefCell<std::collections::HashMap<Arc<str>, Py<PyString>>> =
        Default::default();
}

/// Names kept at most (TraceLogging files can carry any number of distinct names).
const MAX_KEYS: usize = 16_384;

fn key<'py>(py: Python<'py>, k: &Arc<str>) -> Bound<'py, PyString> {
    KEYS.with(|m| {
        let mut m = m.borrow_mut();
        if let Some(s) = m.get(k) {
            return s.bind(py).clone();
        }
        if m.len() >= MAX_KEYS {
            m.clear();
        }
        let s = PyString::intern(py, k);
        m.insert(k.clone(), s.clone().unbind());
        s
    })
}

pub fn properties_to_py<'py>(py: Python<'py>, p: &Properties) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in &p.0 {
        d.set_item(key(py, k), value_to_py(py, v)?)?;
    }
    Ok(d)
}

/// One event: PythonForWindows' `EventRecord` attributes (`guid`, `id`, `pid`, `tid`, `user_data`)
/// plus etwkit's names, header fields and decoded `properties`.
#[pyclass(frozen, module = "etwkit", name = "EventRecord")]
pub struct PyEventRecord {
    pub ev: OwnedEvent,
}

fn opt_str(s: &Option<Arc<str>>) -> Option<&str> {
    s.as_deref()
}

#[pymethods]
impl PyEventRecord {
    /// The provider GUID, lowercase without braces.
    #[getter]
    fn guid(&self) -> String {
        self.ev.provider.to_string()
    }
    /// The event id (EVENT_DESCRIPTOR.Id; the hook type of classic kernel records).
    #[getter]
    fn id(&self) -> u16 {
        self.ev.desc.id
    }
    #[getter]
    fn version(&self) -> u8 {
        self.ev.desc.version
    }
    #[getter]
    fn channel(&self) -> u8 {
        self.ev.desc.channel
    }
    #[getter]
    fn level(&self) -> u8 {
        self.ev.desc.level
    }
    #[getter]
    fn opcode(&self) -> u8 {
        self.ev.desc.opcode
    }
    #[getter]
    fn task(&self) -> u16 {
        self.ev.desc.task
    }
    #[getter]
    fn keywords(&self) -> u64 {
        self.ev.desc.keywords
    }
    /// The process id, or None when the record has none (0xFFFFFFFF).
    #[getter]
    fn pid(&self) -> Option<u32> {
        (self.ev.pid != u32::MAX).then_some(self.ev.pid)
    }
    /// The image name of the event's process: in a file by the trace's kernel Process events
    /// (`"PerfView.exe"`); for a live event the process's name as the system gives it when the
    /// event is read (`etwkit::live::process_name`, asked once a second per pid). None when
    /// nothing names it.
    #[getter]
    fn process_name(&self) -> Option<&str> {
        self.ev.decoded.process_name.as_deref()
    }
    /// The thread id, or None when the record has none (0xFFFFFFFF).
    #[getter]
    fn tid(&self) -> Option<u32> {
        (self.ev.tid != u32::MAX).then_some(self.ev.tid)
    }
    #[getter]
    fn cpu(&self) -> u16 {
        self.ev.cpu
    }
    /// When the event happened: a timezone-aware UTC `datetime` (microsecond precision).
    #[getter]
    fn timestamp(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        filetime_to_datetime(py, self.ev.timestamp)
    }
    /// The timestamp in 100 ns units since 1601-01-01 UTC (a FILETIME), full precision.
    #[getter]
    fn filetime(&self) -> i64 {
        self.ev.timestamp
    }
    #[getter]
    fn activity_id(&self) -> String {
        self.ev.activity_id.to_string()
    }
    /// The record's header type as etwkit names it (e.g. `EVENT_HEADER64`, `SYSTEM32`).
    #[getter]
    fn header_type(&self) -> &'static str {
        self.ev.header_type.name()
    }
    #[getter]
    fn provider_name(&self) -> Option<&str> {
        opt_str(&self.ev.decoded.provider_name)
    }
    #[getter]
    fn event_name(&self) -> Option<&str> {
        opt_str(&self.ev.decoded.event_name)
    }
    #[getter]
    fn task_name(&self) -> Option<&str> {
        opt_str(&self.ev.decoded.task_name)
    }
    #[getter]
    fn opcode_name(&self) -> Option<&str> {
        opt_str(&self.ev.decoded.opcode_name)
    }
    /// The raw payload (UserData), as PythonForWindows gives it.
    #[getter]
    fn user_data<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.ev.payload)
    }
    /// The decoded properties in schema order as Python values (a new dict on each access).
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        properties_to_py(py, &self.ev.decoded.properties)
    }
    /// Whether a layout was found for the payload.
    #[getter]
    fn decoded(&self) -> bool {
        self.ev.decoded.is_decoded()
    }
    /// Why the payload is not (or only partly) decoded; None when it is.
    #[getter]
    fn undecoded(&self) -> Option<&str> {
        self.ev.decoded.undecoded.as_deref()
    }
    /// The stack's return addresses (innermost first), or None when the event carries no stack.
    #[getter]
    fn stack(&self) -> Option<Vec<u64>> {
        self.ev.decoded.stack.as_ref().map(|s| s.addresses.clone())
    }

    fn __repr__(&self) -> String {
        let e = &self.ev;
        let name = match (&e.decoded.provider_name, &e.decoded.event_name) {
            (Some(p), Some(n)) => format!("{p}/{n}"),
            (Some(p), None) => p.to_string(),
            _ => e.provider.to_string(),
        };
        let mut props = Vec::new();
        e.decoded.properties.write_json(&mut props);
        let mut props = String::from_utf8_lossy(&props).into_owned();
        if props.len() > 200 {
            let mut cut = 200;
            while !props.is_char_boundary(cut) {
                cut -= 1;
            }
            props.truncate(cut);
            props.push('…');
        }
        format!(
            "<EventRecord {name} id={} pid={} tid={} {} {props}>",
            e.desc.id,
            e.pid as i64
                - if e.pid == u32::MAX {
                    1 + u32::MAX as i64
                } else {
                    0
                },
            e.tid as i64
                - if e.tid == u32::MAX {
                    1 + u32::MAX as i64
                } else {
                    0
                },
            etwkit::time::format_rfc3339(e.timestamp),
        )
    }
}
