//! Live tracing on Linux.

pub mod heap;
pub mod unwind;
