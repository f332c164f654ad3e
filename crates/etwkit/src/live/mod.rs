//! Live tracing: Windows ETW sessions and the Linux kernel's own tracing.

#[cfg(target_os = "linux")]
pub mod linux;
pub mod windows;
