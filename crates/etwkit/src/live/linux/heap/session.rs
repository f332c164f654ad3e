//! The heap tracer behind the ordinary session API: a [`crate::live::Trace`] that enables the heap
//! provider (HeapTraceProvider, 222962ab-…, the GUID Windows heap sessions use as their session GUID)
//! runs here instead of on tracefs. Heap operations become the heap provider's TraceLogging events
//! (Alloc 33, ReAlloc 34, Free 36, field names of heap.json, stacks as STACK_TRACE64), so
//! `process(callback, begin, end)`, logfile mode, the decoder and the sinks serve them unchanged.

use std::ops::ControlFlow;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::live::{
    Callback, EnableSpec, LiveError, LiveSession, ProviderRef, Result, SessionConfig, TraceSummary,
};
use crate::schema::builtin::heap_events::{HeapEventEncoder, HEAP_PROVIDER};

use super::{spawn_suspended, HeapError, HeapOptions, HeapTrace, StackEvents};

/// The provider names that select the heap tracer (besides its GUID).
pub use crate::live::heap::HEAP_PROVIDER_NAMES;

/// EVENT_ENABLE_PROPERTY_STACK_TRACE: stacks on allocations (and reallocations).
const STACK_TRACE: u32 = 0x4;

/// Whether an enable request names the heap provider.
pub fn is_heap_provider(p: &ProviderRef) -> bool {
    match p {
        ProviderRef::Guid(g) => *g == HEAP_PROVIDER,
        ProviderRef::Name(n) => HEAP_PROVIDER_NAMES
            .iter()
            .any(|h| h.eq_ignore_ascii_case(n)),
    }
}

fn live_err(e: HeapError) -> LiveError {
    match e {
        HeapError::Permission(m) => {
            LiveError::Other(format!("heap tracing needs root or CAP_PERFMON: {m}"))
        }
        HeapError::NoProcess(p) => LiveError::NoSuchProcess(p),
        other => LiveError::Other(other.to_string()),
    }
}

/// A heap session: one [`HeapTrace`] and the encoder that turns its operations into events.
pub struct HeapSession {
    name: String,
    trace: HeapTrace,
    encoder: HeapEventEncoder,
    delivered: u64,
}

impl HeapSession {
    /// Starts a heap session for `cfg`: the heap provider must be the session's only provider (as on
    /// Windows, where heap tracing has a session of its own). Stacks: the config's stack event ids when given, else
    /// allocations when the provider was enabled with the STACK_TRACE flag, else none. `stack_event_ids`
    /// of the config (the heap provider's ids: Alloc 33, ReAlloc 34, Free 36) choose precisely.
    pub fn start(cfg: &SessionConfig) -> Result<HeapSession> {
        let spec: &EnableSpec = match cfg.providers.as_slice() {
            [one] if is_heap_provider(&one.provider) => one,
            _ => {
                return Err(LiveError::Unsupported(
                    "the heap provider runs in a session of its own: enable it alone (as Windows heap sessions do)"
                        .into(),
                ))
            }
        };
        let stacks = if !cfg.stack_event_ids.is_empty() {
            StackEvents {
                alloc: cfg.stack_event_ids.contains(&33),
                realloc: cfg.stack_event_ids.contains(&34),
                free: cfg.stack_event_ids.contains(&36),
            }
        } else if spec.flags & STACK_TRACE != 0 {
            StackEvents::ALLOC
        } else {
            StackEvents::NONE
        };
        let mut trace = HeapTrace::attach(
            &[],
            HeapOptions {
                stacks,
                ..Default::default()
            },
        )
        .map_err(live_err)?;
        for &pid in &cfg.pids {
            trace.add_process(pid, false).map_err(live_err)?;
        }
        let encoder = HeapEventEncoder::new()
            .map_err(|e| LiveError::Other(format!("heap event schema: {e}")))?;
        Ok(HeapSession {
            name: cfg.name.clone(),
            trace,
            encoder,
            delivered: 0,
        })
    }

    /// The underlying tracer (statistics, the unwinder for symbolizing stacks).
    pub fn heap_trace(&self) -> &HeapTrace {
        &self.trace
    }
}

impl LiveSession for HeapSession {
    fn name(&self) -> &str {
        &self.name
    }

    fn add_pid(&mut self, pid: u32) -> Result<()> {
        self.trace.add_process(pid, false).map_err(live_err)
    }

    fn spawn(&mut self, cmd: &mut Command) -> Result<Child> {
        let child = spawn_suspended(cmd).map_err(live_err)?;
        self.trace
            .add_process(child.pid(), true)
            .map_err(live_err)?;
        child.resume().map_err(live_err)
    }

    fn process(&mut self, cb: &mut Callback<'_>, stop: &AtomicBool) -> Result<()> {
        // The tracer polls its own stop flag; mirror the session's into it while processing.
        let heap_stop = self.trace.stop_handle();
        let done = AtomicBool::new(false);
        let encoder = &mut self.encoder;
        let delivered = &mut self.delivered;
        let trace = &mut self.trace;
        std::thread::scope(|s| {
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    if stop.load(Ordering::Relaxed) {
                        heap_stop.store(true, Ordering::Relaxed);
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            });
            let r = trace.process(|op| {
                let rec = encoder.encode(op, 0);
                *delivered += 1;
                match cb(&rec) {
                    ControlFlow::Continue(()) => ControlFlow::Continue(()),
                    ControlFlow::Break(()) => ControlFlow::Break(()),
                }
            });
            done.store(true, Ordering::Relaxed);
            r.map_err(live_err)
        })
    }

    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    fn stop(&mut self) -> Result<TraceSummary> {
        self.trace.stop_handle().store(true, Ordering::SeqCst);
        let st = self.trace.stats();
        // Deliveries are counted by `Trace` itself; the session reports what it encoded as raw records.
        let mut sum = TraceSummary {
            raw_records: self.delivered,
            ..Default::default()
        };
        sum.events_lost = st.lost_samples;
        sum.lost_detail
            .push(("perf ring (PERF_RECORD_LOST)".into(), st.lost_samples));
        sum.issues.extend(st.notes());
        Ok(sum)
    }
}
