//! The `etwkit` Python extension (`etwkit._etwkit`): PythonForWindows' ETW API on every OS, and fast
//! decoded reading of ETL files into Python objects, pyarrow and pandas.

mod arrow;
mod cpu;
mod errors;
mod heap;
mod live;
mod net;
mod pcap;
mod reader;
mod record;

use pyo3::prelude::*;

#[pymodule]
fn _etwkit(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<record::PyEventRecord>()?;
    m.add_class::<reader::Reader>()?;
    m.add_class::<live::EtwManager>()?;
    m.add_class::<live::EtwTrace>()?;
    m.add_class::<live::TraceProperties>()?;
    m.add_class::<live::TraceProvider>()?;
    m.add_function(wrap_pyfunction!(reader::read, m)?)?;
    m.add_function(wrap_pyfunction!(heap::heap_report, m)?)?;
    m.add_function(wrap_pyfunction!(net::net_report, m)?)?;
    m.add_function(wrap_pyfunction!(cpu::cpu_report, m)?)?;
    m.add_function(wrap_pyfunction!(pcap::pcap, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
