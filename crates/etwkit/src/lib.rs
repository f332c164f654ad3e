//! # etwkit
//!
//! Event Tracing for Windows on every OS: one event model ([`EventRecord`]), one decoder, fed by ETL
//! files (read and written anywhere), live ETW sessions on Windows and the kernel's own tracing on
//! Linux.
//!
//! The data path is the module path:
//! `etl` (container) → [`event`] (the model) → `schema` (who knows the layout) → `decode` (values) →
//! `sink` / `analysis` / `export`.

pub mod analysis;
pub mod decode;
pub mod etl;
pub mod event;
pub mod export;
pub mod filter;
pub mod guid;
pub mod live;
pub mod schema;
pub mod sink;
pub mod time;
pub mod tlg;

pub use event::{EventDescriptor, EventRecord, HeaderType};
pub use guid::Guid;

// The README's examples are compiled and run as doc-tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
