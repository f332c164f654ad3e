//! A progress bar on stderr for long files, only when stderr is a terminal.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// Files smaller than this finish before a bar is worth drawing.
const MIN_BYTES: u64 = 32 << 20;

pub fn bar(total_bytes: u64) -> Option<ProgressBar> {
    if total_bytes < MIN_BYTES || !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = ProgressBar::new(total_bytes);
    pb.set_style(
        ProgressStyle::with_template(
            "{spinner} {bytes}/{total_bytes} {wide_bar} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    Some(pb)
}

/// Runs `say` (lines for stderr) with the bar, if any, lifted: they print above it, not through it.
pub fn above(bar: Option<&ProgressBar>, say: impl FnOnce()) {
    match bar {
        Some(b) => b.suspend(say),
        None => say(),
    }
}
