//! Answers on top of the event stream.

pub mod cpu;
pub mod heap;
pub mod net;
