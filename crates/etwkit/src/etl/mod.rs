//! The ETL container: buffers, records, the logfile header, compression, reading and writing.
//!
//! ```no_run
//! use std::ops::ControlFlow;
//! use etwkit::etl::{EtlFile, Order};
//!
//! let file = EtlFile::open("trace.etl")?;
//! println!("logger {}", file.header().logger_name);
//! let summary = file.for_each(Order::Time, |r| {
//!     println!("{} {} id={} pid={}", r.timestamp, r.provider, r.descriptor.id, r.pid);
//!     ControlFlow::Continue(())
//! });
//! println!("{} records, {} bad", summary.records, summary.bad_records);
//! # Ok::<(), etwkit::etl::EtlError>(())
//! ```

pub mod buffer;
pub mod compression;
pub mod kernel;
pub mod logfile_header;
mod mmap;
pub mod parallel;
pub mod reader;
pub mod record;
pub mod relog;
pub mod stats;
pub mod writer;

pub use buffer::BufferHeader;
pub use logfile_header::LogfileHeader;
pub use reader::{BufferInfo, EtlError, EtlFile, Order, ReadIssue, ReadSummary, Record};
