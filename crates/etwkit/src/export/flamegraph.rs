//! Stack profiles as flame graphs (SVG, rendered by inferno): one tower per stack of a
//! [`StackProfile`] (a heap report's outstanding bytes by allocation stack, a CPU report's samples
//! by stack), the process at the base, the innermost frame at the top, widths in the profile's
//! default sample type.

use std::io::{self, Write};

use super::profile::{StackProfile, ToStackProfile};

/// The folded stacks (`PROCESS;outermost;...;innermost VALUE`, one line per stack, root first)
/// the graph of `report` is drawn from: samples whose default value is 0 are left out.
pub fn folded_stacks<P: ToStackProfile + ?Sized>(report: &P) -> Vec<String> {
    folded_profile(&report.to_stack_profile())
}

/// [`folded_stacks`] of a profile. The base is `name (pid)`, `pid N`, or `[unknown process]`.
pub fn folded_profile(profile: &StackProfile) -> Vec<String> {
    let at = profile.default_sample_type;
    profile
        .samples
        .iter()
        .filter_map(|s| Some((s, *s.values.get(at)?)))
        .filter(|(_, v)| *v > 0)
        .map(|(s, v)| {
            let mut parts: Vec<String> = Vec::with_capacity(s.frames.len() + 1);
            let base = match (&s.process, s.pid) {
                (Some(n), Some(p)) => format!("{n} ({p})"),
                (None, Some(p)) => format!("pid {p}"),
                (Some(n), None) => n.clone(),
                (None, None) => "[unknown process]".into(),
            };
            parts.push(base.replace(';', ":"));
            if s.frames.is_empty() {
                parts.push("[no stack]".into());
            }
            // Frames are innermost first; a folded line starts at the root.
            parts.extend(s.frames.iter().rev().map(|f| f.display().replace(';', ":")));
            format!("{} {v}", parts.join(";"))
        })
        .collect()
}

/// Writes the flame graph of `report` (a heap report: outstanding bytes; a CPU report: samples)
/// as SVG. `title` defaults to the profile's own ("Outstanding heap bytes by allocation stack",
/// "CPU samples by stack").
pub fn write_flamegraph<P: ToStackProfile + ?Sized, W: Write>(
    report: &P,
    title: Option<&str>,
    out: W,
) -> io::Result<()> {
    let profile = report.to_stack_profile();
    let lines = folded_profile(&profile);
    let style = &profile.flame;
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.unwrap_or(&style.title).to_string();
    opts.count_name = style.count_name.clone();
    opts.colors = inferno::flamegraph::color::Palette::Basic(match style.memory {
        true => inferno::flamegraph::color::BasicPalette::Mem,
        false => inferno::flamegraph::color::BasicPalette::Hot,
    });
    if lines.is_empty() {
        opts.subtitle = Some(style.empty_subtitle.clone());
        // inferno needs one stack to draw; an empty graph says so in its subtitle.
        let line = format!("{} 0", style.empty_frame);
        return inferno::flamegraph::from_lines(&mut opts, [line.as_str()], out)
            .map_err(io::Error::other);
    }
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)
        .map_err(io::Error::other)
}
