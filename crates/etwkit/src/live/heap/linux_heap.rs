//! [`super::HeapSession`] on Linux: the allocator shim (spawned, or loaded into a running process)
//! or perf uprobes, with the same fallbacks and notes as ever.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::Child;

use super::{HeapEnd, HeapFinish, HeapMode, HeapOptions};
use crate::live::linux::heap::inject::InjectError;
use crate::live::linux::heap::shim::{installed_copy, ShimFile, ShimOptions, ShimTrace};
use crate::live::linux::heap::{spawn_suspended, HeapOptions as UprobeOptions, HeapTrace};
use crate::live::linux::heap::{HeapError, StackEvents};
use crate::live::linux::unwind::{LinuxStackNamer, ProcessMaps};
use crate::live::{LiveError, Result, StopHandle};
use crate::schema::builtin::heap_events::{HeapOp, HeapTotals, ImageMapping};

fn err(e: impl std::fmt::Display) -> LiveError {
    LiveError::Other(e.to_string())
}

fn heap_err(e: HeapError) -> LiveError {
    match e {
        HeapError::NotRoot => LiveError::NotRoot,
        HeapError::NoProcess(p) => LiveError::Other(format!("process {p} not found")),
        e => err(e),
    }
}

/// The shim to preload: `$ETWKIT_HEAPSHIM`, else the caller's copy. Err: why there is none.
pub(super) enum Shim {
    Path(PathBuf),
    Embedded(ShimFile),
}

impl Shim {
    fn path(&self) -> &std::path::Path {
        match self {
            Shim::Path(p) => p,
            Shim::Embedded(f) => f.path(),
        }
    }
}

fn env_shim() -> Option<std::result::Result<PathBuf, String>> {
    let p = PathBuf::from(std::env::var_os("ETWKIT_HEAPSHIM")?);
    Some(match p.is_file() {
        true => Ok(p),
        false => Err(format!(
            "ETWKIT_HEAPSHIM names {}, which is not a file",
            p.display()
        )),
    })
}

fn missing(opts_shim: &Option<std::result::Result<&'static [u8], String>>) -> String {
    match opts_shim {
        Some(Err(why)) => why.clone(),
        _ => "this etwkit was built without the allocator shim".into(),
    }
}

fn shim(
    opts_shim: &Option<std::result::Result<&'static [u8], String>>,
) -> std::result::Result<Shim, String> {
    if let Some(p) = env_shim() {
        return p.map(Shim::Path);
    }
    match opts_shim {
        Some(Ok(bytes)) => ShimFile::from_bytes(bytes)
            .map(Shim::Embedded)
            .map_err(|e| {
                format!("the built-in allocator shim could not be loaded into memory ({e})")
            }),
        _ => Err(missing(opts_shim)),
    }
}

enum AttachFallback {
    /// Injection cannot work here (one sentence).
    Reason(String),
    Error(LiveError),
}

pub(super) enum LinuxHeap {
    /// The shim, and the file it was preloaded from (kept open while the command and its
    /// children may still load it).
    Shim(Box<ShimTrace>, Option<Shim>),
    Uprobe {
        trace: Box<HeapTrace>,
        child: Option<Child>,
        why: String,
        maps: HashMap<u32, ProcessMaps>,
    },
}

impl LinuxHeap {
    pub(super) fn start(mut o: HeapOptions<'_>) -> Result<LinuxHeap> {
        let stacks = o.stacks;
        let mode = o.mode;
        let mut why_uprobes = String::from("as asked with --mode uprobe");
        if let (Some(cmd), true) = (o.command.as_mut(), mode != HeapMode::Uprobe) {
            match shim(&o.shim) {
                Ok(shim) => {
                    if !o.pids.is_empty() {
                        return Err(LiveError::Unsupported(
                            "--pid cannot be combined with a command in shim mode (use --mode uprobe)"
                                .into(),
                        ));
                    }
                    // Every operation to the ETL file, in time order: no in-process pairing.
                    let opts = ShimOptions {
                        stacks,
                        every_op: o.every_op,
                    };
                    let t = ShimTrace::spawn_with(cmd, shim.path(), opts).map_err(heap_err)?;
                    return Ok(LinuxHeap::Shim(Box::new(t), Some(shim)));
                }
                Err(why) if mode == HeapMode::Shim => return Err(LiveError::Unsupported(why)),
                Err(why) => {
                    why_uprobes = format!("because the allocator shim is unavailable: {why}")
                }
            }
        }
        if o.command.is_none() {
            why_uprobes = "attached to running processes".into();
            if mode != HeapMode::Uprobe {
                match attach_shim(&o, stacks) {
                    Ok(t) => return Ok(LinuxHeap::Shim(Box::new(t), None)),
                    Err(AttachFallback::Reason(why)) if mode == HeapMode::Auto => {
                        why_uprobes = format!("because the allocator shim cannot be loaded: {why}")
                    }
                    Err(AttachFallback::Reason(why)) => return Err(LiveError::Unsupported(why)),
                    Err(AttachFallback::Error(e)) => return Err(e),
                }
            }
        }
        let opts = UprobeOptions {
            stacks,
            ..Default::default()
        };
        let (trace, child) = match o.command {
            None => (HeapTrace::attach(&o.pids, opts).map_err(heap_err)?, None),
            Some(cmd) => {
                let suspended = spawn_suspended(cmd).map_err(heap_err)?;
                let mut t = HeapTrace::for_suspended(&suspended, opts).map_err(heap_err)?;
                for &p in &o.pids {
                    t.add_process(p, false).map_err(heap_err)?;
                }
                (t, Some(suspended.resume().map_err(heap_err)?))
            }
        };
        Ok(LinuxHeap::Uprobe {
            trace: Box::new(trace),
            child,
            why: why_uprobes,
            maps: HashMap::new(),
        })
    }

    pub(super) fn command_pid(&mut self) -> Option<u32> {
        match self {
            LinuxHeap::Shim(t, _) => t.child_mut().map(|c| c.id()),
            LinuxHeap::Uprobe { child, .. } => child.as_ref().map(Child::id),
        }
    }

    pub(super) fn stop_handle(&self) -> StopHandle {
        StopHandle(match self {
            LinuxHeap::Shim(t, _) => t.stop_handle(),
            LinuxHeap::Uprobe { trace, .. } => trace.stop_handle(),
        })
    }

    pub(super) fn attached_pid(&self) -> Option<u32> {
        match self {
            LinuxHeap::Shim(t, _) => t.attached_pid(),
            LinuxHeap::Uprobe { .. } => None,
        }
    }

    /// When the shim began recording in the process it was loaded into (FILETIME), attach mode.
    pub(super) fn tracing_started(&self) -> Option<i64> {
        match self {
            LinuxHeap::Shim(t, _) => t.attached_pid().map(|_| t.started()),
            LinuxHeap::Uprobe { .. } => None,
        }
    }

    pub(super) fn counts_records(&self) -> bool {
        matches!(self, LinuxHeap::Shim(..))
    }

    pub(super) fn process(
        &mut self,
        progress: &mut dyn FnMut(u64),
        f: &mut dyn FnMut(&HeapOp) -> ControlFlow<()>,
    ) -> Result<()> {
        match self {
            LinuxHeap::Shim(t, _) => t.process(progress, f).map_err(heap_err),
            LinuxHeap::Uprobe { trace, .. } => trace.process(f).map_err(heap_err),
        }
    }

    pub(super) fn finish(&mut self, t: &mut HeapTotals) -> Result<HeapFinish> {
        match self {
            LinuxHeap::Shim(trace, _) => {
                for (pid, stack, _api, count, bytes) in trace.transient() {
                    t.transient.push((*pid, stack.clone(), *count, *bytes));
                }
                for (pid, n) in trace.reallocs() {
                    t.reallocs.push((*pid, *n));
                }
                let st = trace.stats().clone();
                if st.malformed > 0 {
                    t.notes
                        .push(format!("{} malformed shim records", st.malformed));
                }
                Ok(HeapFinish {
                    images: images(&trace.maps()),
                    events_lost: 0,
                })
            }
            LinuxHeap::Uprobe { trace, maps, .. } => {
                let stats = trace.stats().clone();
                t.lost += stats.lost_samples;
                t.notes.extend(stats.notes());
                *maps = trace.unwinder().all_maps();
                Ok(HeapFinish {
                    images: images(maps),
                    events_lost: stats.lost_samples,
                })
            }
        }
    }

    pub(super) fn wait(self, t: &mut HeapTotals) -> Result<HeapEnd> {
        let wait = |c: &mut Child| {
            c.wait()
                .map_err(|e| LiveError::Other(format!("waiting for the command: {e}")))
        };
        match self {
            LinuxHeap::Shim(mut trace, _file) => {
                let status = match trace.child_mut() {
                    Some(c) => Some(wait(c)?),
                    None => None,
                };
                if let Some(sig) =
                    status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s))
                {
                    // The shim flushes at exit; a process killed by a signal loses what it had
                    // not sent.
                    t.notes.push(format!(
                        "the command was killed by signal {sig}: heap operations it had not sent yet are missing"
                    ));
                }
                if let Some(pid) = trace.attached_pid() {
                    t.tracing_started = Some(trace.started());
                    if !trace.detached_cleanly() {
                        t.notes.push(format!(
                            "process {pid} did not confirm the end of tracing: operations it had not sent are missing"
                        ));
                    }
                }
                let mode = match trace.attached_pid() {
                    Some(pid) => format!(
                        "traced with the allocator shim loaded into process {pid}, now taken out again"
                    ),
                    None => "traced with the allocator shim".into(),
                };
                Ok(HeapEnd {
                    status,
                    namer: Box::new(LinuxStackNamer::new(trace.maps())),
                    mode,
                })
            }
            LinuxHeap::Uprobe {
                mut child,
                why,
                maps,
                ..
            } => {
                let status = match child.as_mut() {
                    Some(c) => Some(wait(c)?),
                    None => None,
                };
                Ok(HeapEnd {
                    status,
                    namer: Box::new(LinuxStackNamer::new(maps)),
                    mode: format!("traced with uprobes, {why}"),
                })
            }
        }
    }
}

/// `--pid P`: loads the shim into P.
fn attach_shim(
    o: &HeapOptions<'_>,
    stacks: StackEvents,
) -> std::result::Result<ShimTrace, AttachFallback> {
    if o.pids.len() != 1 {
        return Err(AttachFallback::Reason(
            "the shim attaches to one process at a time".into(),
        ));
    }
    let pid = o.pids[0];
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Err(AttachFallback::Error(LiveError::Other(format!(
            "process {pid} not found"
        ))));
    }
    // A file the target can open (the memfd of spawn mode is ours alone).
    let path = match std::env::var_os("ETWKIT_HEAPSHIM") {
        Some(p) => PathBuf::from(p),
        None => match &o.shim {
            Some(Ok(bytes)) => installed_copy(bytes).map_err(|e| {
                AttachFallback::Reason(format!("the built-in shim could not be written out ({e})"))
            })?,
            _ => return Err(AttachFallback::Reason(missing(&o.shim))),
        },
    };
    let opts = ShimOptions {
        stacks,
        every_op: o.every_op,
    };
    match ShimTrace::attach(pid, &path, opts, o.follow_forks) {
        Ok(t) => Ok(t),
        Err(InjectError::Unsupported(why)) => Err(AttachFallback::Reason(why)),
        Err(InjectError::Failed(why)) => Err(AttachFallback::Error(LiveError::Other(why))),
    }
}

/// The executable mappings, by pid then address order, as etwkit's Image events carry them.
fn images(maps: &HashMap<u32, ProcessMaps>) -> Vec<ImageMapping> {
    let mut pids: Vec<&u32> = maps.keys().collect();
    pids.sort();
    let mut v = Vec::new();
    for pid in pids {
        for m in &maps[pid].mappings {
            v.push(ImageMapping {
                pid: *pid,
                start: m.start,
                end: m.end,
                file_offset: m.pgoff,
                path: m.path.to_string_lossy().into_owned(),
            });
        }
    }
    v
}
