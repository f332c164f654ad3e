//! Answers on top of the event stream.

pub mod heap;
pub mod net;
