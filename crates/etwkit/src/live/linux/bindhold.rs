//! Bind events held back until the kernel-chosen port is known.
//!
//! A program that binds port 0 lets the kernel choose the port, and `bind()`'s own tracepoints only
//! show the 0 the program passed. Windows' AFD bind events (2/3) report the bound address, so ours
//! must too. The reader threads usually learn the port within milliseconds (see [`super::early`]);
//! when they cannot (the process closed the socket first), the port still shows up later in the
//! kernel's own events for that socket: `listen()` (LISTEN state change), the first datagram's route
//! lookup (fib), the connect, or `tcp_destroy_sock` when it is closed. So a bind event whose port is
//! unknown waits here, and so does every event after it (output stays in time order), until its
//! socket's port is learned, the socket is gone, [`MAX_HOLD`] passes or [`MAX_HELD`] events wait.
//! An event released without a port carries no Address/Port fields at all and is counted: a 0 the
//! kernel never chose is never shown.

use std::collections::VecDeque;

use super::procfd::SockAddr;
use super::winsock::AfdEvent;

/// Longest a bind event waits for its port, in trace time (FILETIME units: 2 s).
pub const MAX_HOLD: i64 = 20_000_000;
/// Most events held behind a waiting bind (a busy system-wide trace must not grow without bound):
/// past this, the oldest waiting bind goes out without its port.
pub const MAX_HELD: usize = 65_536;

/// What the correlator knows of a held socket now.
#[derive(Clone, Copy, Debug)]
pub enum PortState {
    /// The bound address, port included.
    Known(SockAddr),
    /// Not yet; it may still be learned.
    Waiting,
    /// Never will be (the socket is closed and gone).
    Gone,
}

struct Held {
    event: AfdEvent,
    /// (socket id, v6 event) when the event waits for that socket's port.
    waits_for: Option<(u64, bool)>,
}

/// The queue of events behind the oldest bind event still waiting for its port.
#[derive(Default)]
pub struct BindHold {
    held: VecDeque<Held>,
    /// Bind events released without a port (it could not be learned).
    pub released_without_port: u64,
    /// Bind events whose port was learned while they were held.
    pub resolved_late: u64,
}

impl BindHold {
    /// Queues `event`; `waits_for` names the socket whose port it needs (a bind event whose port
    /// is unknown), with whether the event is the IPv6 one.
    pub fn push(&mut self, event: AfdEvent, waits_for: Option<(u64, bool)>) {
        self.held.push_back(Held { event, waits_for });
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The sockets held bind events wait for.
    pub fn waiting(&self) -> impl Iterator<Item = u64> + '_ {
        self.held.iter().filter_map(|h| h.waits_for.map(|(s, _)| s))
    }

    /// Hands out, in order, every event not behind a bind still waiting. `state` tells what is known
    /// of a socket; `now` is the trace time; `force` releases everything (the trace ends). `emit`
    /// returning false stops (the rest stays queued).
    pub fn release(
        &mut self,
        now: i64,
        force: bool,
        mut state: impl FnMut(u64) -> PortState,
        mut emit: impl FnMut(&AfdEvent) -> bool,
    ) -> bool {
        loop {
            let crowded = self.held.len() > MAX_HELD;
            let Some(front) = self.held.front_mut() else {
                break;
            };
            if let Some((sock, v6)) = front.waits_for {
                match state(sock) {
                    PortState::Known(a) if a.port != 0 && a.v6 == v6 => {
                        front.event.set_addr(Some(a));
                        self.resolved_late += 1;
                    }
                    PortState::Waiting
                        if !force && now - front.event.timestamp < MAX_HOLD && !crowded =>
                    {
                        return true;
                    }
                    _ => {
                        front.event.set_addr(None);
                        self.released_without_port += 1;
                    }
                }
                front.waits_for = None;
            }
            let Some(h) = self.held.pop_front() else {
                break;
            };
            if !emit(&h.event) {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(ts: i64, sock: u64) -> AfdEvent {
        AfdEvent::for_test(2, sock, ts)
    }

    fn v4(port: u16) -> SockAddr {
        SockAddr {
            v6: false,
            addr: [127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            port,
        }
    }

    #[test]
    fn holds_later_events_until_the_port_is_known() {
        let mut h = BindHold::default();
        h.push(bind(100, 1), Some((1, false)));
        h.push(AfdEvent::for_test(13, 2, 200), None);
        let mut out = Vec::new();
        h.release(
            300,
            false,
            |_| PortState::Waiting,
            |e| {
                out.push(e.timestamp);
                true
            },
        );
        assert!(out.is_empty(), "nothing passes a waiting bind");
        h.release(
            400,
            false,
            |_| PortState::Known(v4(4242)),
            |e| {
                out.push(e.timestamp);
                assert!(e.id != 2 || e.port() == Some(4242));
                true
            },
        );
        assert_eq!(out, [100, 200]);
        assert_eq!((h.resolved_late, h.released_without_port), (1, 0));
    }

    #[test]
    fn a_port_never_learned_is_absent_not_zero() {
        let mut h = BindHold::default();
        let mut e = bind(100, 1);
        e.set_addr(Some(v4(0)));
        h.push(e, Some((1, false)));
        let mut ports = Vec::new();
        // The socket is gone: released at once, without Address/Port.
        h.release(
            150,
            false,
            |_| PortState::Gone,
            |e| {
                ports.push(e.port());
                true
            },
        );
        // Timed out while the socket lives.
        h.push(bind(200, 3), Some((3, false)));
        h.release(200 + MAX_HOLD - 1, false, |_| PortState::Waiting, |_| true);
        assert!(!h.is_empty());
        h.release(
            200 + MAX_HOLD,
            false,
            |_| PortState::Waiting,
            |e| {
                ports.push(e.port());
                true
            },
        );
        // A port of the other family does not fit the event.
        h.push(bind(300, 4), Some((4, true)));
        h.release(
            301,
            false,
            |_| PortState::Known(v4(99)),
            |e| {
                ports.push(e.port());
                true
            },
        );
        assert_eq!(ports, [None, None, None]);
        assert_eq!(h.released_without_port, 3);
        // Too many events behind a waiting bind: it goes out without its port.
        h.push(bind(400, 5), Some((5, false)));
        for i in 0..MAX_HELD as i64 {
            h.push(AfdEvent::for_test(13, 6, 401 + i), None);
        }
        let mut out = 0;
        h.release(
            402,
            false,
            |_| PortState::Waiting,
            |_| {
                out += 1;
                true
            },
        );
        assert_eq!(out, MAX_HELD + 1);
        assert_eq!(h.released_without_port, 4);
    }
}
