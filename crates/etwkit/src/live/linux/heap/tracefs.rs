//! Uprobe definitions in tracefs `uprobe_events`, **never enabled there**: a defined but disabled
//! uprobe costs nothing to anyone. We only open its id through perf_event_open with pid = a target
//! thread, which inserts breakpoints into that process's memory map alone (linux-tracing.md §3:
//! "perf on a tracefs-defined uprobe id": untargeted processes run at full speed).
//! Definitions are removed on drop (`-:GROUP/NAME`, appended: `uprobe_events` is machine-wide), and
//! orphans of dead tracers at the next start.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::probes::ProbeSite;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// The tracefs mount point, mounting it when needed.
pub fn tracefs_root() -> Result<PathBuf, String> {
    for p in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if Path::new(p).join("uprobe_events").exists() {
            return Ok(PathBuf::from(p));
        }
    }
    let target = "/sys/kernel/tracing";
    let st = std::process::Command::new("mount")
        .args(["-t", "tracefs", "nodev", target])
        .status()
        .map_err(|e| format!("cannot run mount for tracefs: {e}"))?;
    if st.success() && Path::new(target).join("uprobe_events").exists() {
        Ok(PathBuf::from(target))
    } else {
        Err(format!("tracefs is not mounted at {target} and mounting it failed (needs root; CONFIG_UPROBE_EVENTS)"))
    }
}

/// A set of uprobe definitions owned by one heap session.
pub struct UprobeDefs {
    root: PathBuf,
    pub group: String,
    names: Vec<String>,
}

impl UprobeDefs {
    pub fn new() -> Result<UprobeDefs, String> {
        let root = tracefs_root()?;
        let group = format!(
            "etwkit_heap_{}_{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        Ok(UprobeDefs {
            root,
            group,
            names: Vec::new(),
        })
    }

    /// Defines an entry (or return) probe and returns its tracepoint id.
    pub fn define(&mut self, site: &ProbeSite, ret: bool, index: usize) -> Result<u64, String> {
        let name = format!(
            "{}{}_{index}",
            site.func.name(),
            if ret { "_ret" } else { "" }
        );
        let line = format!(
            "{}:{}/{} {}:{:#x}\n",
            if ret { 'r' } else { 'p' },
            self.group,
            name,
            site.path.display(),
            site.offset
        );
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.root.join("uprobe_events"))
            .map_err(|e| format!("cannot open {}/uprobe_events: {e}", self.root.display()))?;
        f.write_all(line.as_bytes())
            .map_err(|e| format!("defining uprobe {:?}: {e}", line.trim()))?;
        self.names.push(name.clone());
        let idp = self
            .root
            .join("events")
            .join(&self.group)
            .join(&name)
            .join("id");
        let id = std::fs::read_to_string(&idp).map_err(|e| format!("{}: {e}", idp.display()))?;
        id.trim()
            .parse()
            .map_err(|_| format!("bad tracepoint id {id:?} in {}", idp.display()))
    }
}

impl Drop for UprobeDefs {
    fn drop(&mut self) {
        let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .open(self.root.join("uprobe_events"))
        else {
            return;
        };
        for n in &self.names {
            let _ = f.write_all(format!("-:{}/{}\n", self.group, n).as_bytes());
        }
    }
}
