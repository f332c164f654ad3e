//! A heap report's outstanding bytes by allocation stack as a flame graph (SVG, rendered by
//! inferno): one tower per stack of [`HeapReport::outstanding_by_stack`], the process at the base,
//! the allocating function (the first frame below the allocator) at the top, widths in bytes.

use std::io::{self, Write};

use crate::analysis::heap::HeapReport;

/// The folded stacks (`pid N;outermost;...;allocating-function BYTES`, one line per stack) the
/// graph is drawn from.
pub fn folded_stacks(report: &HeapReport) -> Vec<String> {
    report
        .outstanding_by_stack
        .iter()
        .filter(|g| g.bytes > 0)
        .map(|g| {
            let mut parts: Vec<String> = Vec::with_capacity(g.frames.len() + 1);
            parts.push(match g.pid {
                Some(p) => format!("pid {p}"),
                None => "[unknown process]".into(),
            });
            if g.frames.is_empty() {
                parts.push("[no stack]".into());
            }
            // Frames are innermost first; a folded line starts at the root.
            parts.extend(g.frames.iter().rev().map(|f| f.display().replace(';', ":")));
            format!("{} {}", parts.join(";"), g.bytes)
        })
        .collect()
}

/// Writes the flame graph of the report's outstanding bytes as SVG. `title` defaults to
/// "Outstanding heap bytes by allocation stack".
pub fn write_flamegraph<W: Write>(
    report: &HeapReport,
    title: Option<&str>,
    out: W,
) -> io::Result<()> {
    let lines = folded_stacks(report);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title
        .unwrap_or("Outstanding heap bytes by allocation stack")
        .to_string();
    opts.count_name = "bytes".into();
    opts.colors =
        inferno::flamegraph::color::Palette::Basic(inferno::flamegraph::color::BasicPalette::Mem);
    if lines.is_empty() {
        opts.subtitle = Some("no outstanding blocks".into());
        // inferno needs one stack to draw; an empty graph says so in its subtitle.
        return inferno::flamegraph::from_lines(&mut opts, ["[nothing outstanding] 0"], out)
            .map_err(io::Error::other);
    }
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)
        .map_err(io::Error::other)
}
