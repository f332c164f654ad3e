//! Live ETW on Windows (windows-sys; type-checked on every OS).

pub mod heap;
