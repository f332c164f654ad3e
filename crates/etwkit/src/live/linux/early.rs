//! Socket addresses taken as soon as a reader thread sees `bind`/`connect` return.
//!
//! The Winsock correlator runs at the consumer's pace, so it can be tens of milliseconds behind the
//! kernel. A program that binds port 0, gets flooded and exits within that window would leave the
//! kernel-chosen port unknown by the time the correlator asks `/proc` for it, and the datagram drops
//! (which name only the port) could not be attributed. The reader threads see each page within about
//! 2 ms, so they look for the two syscalls' exit records themselves and ask the still-running process
//! for the socket's local address right then ([`procfd::peek`]). The correlator takes the answer by
//! (thread, exit timestamp), which names exactly one syscall, so a reused descriptor can never pick up
//! an older socket's address.

use std::collections::HashMap;
use std::sync::Mutex;

use super::format::read_field;
use super::procfd::{self, SockAddr};
use super::ring::{parse_page, ParsedPage};

/// One syscall whose completion is watched: its enter and exit event ids and where fd and ret are.
#[derive(Clone, Copy, Debug)]
pub struct Watched {
    pub enter: u16,
    pub exit: u16,
    /// Offset, size and signedness of the descriptor argument in the enter record.
    pub fd: (usize, usize, bool),
    /// Offset and size of `ret` in the exit record.
    pub ret: (usize, usize),
}

#[derive(Default)]
struct State {
    /// tid → (watched index, fd, enter ts) of an enter whose exit has not been seen.
    enters: HashMap<u32, (usize, i32, u64)>,
    /// tid → (watched index, ret, exit ts) of an exit seen before its enter (another CPU's reader).
    exits: HashMap<u32, (usize, i64, u64)>,
    /// (tid, exit ts) → (local address, when it was taken: ring clock ns after the socket was
    /// fetched from the process).
    found: HashMap<(u32, u64), (SockAddr, u64)>,
}

/// Shared between the reader threads (which fill it) and the correlator (which takes from it).
pub struct EarlyPeek {
    watched: Vec<Watched>,
    /// `sys_enter_close` (id, fd argument): a descriptor closed after the call returned may already
    /// name another socket, so its address is not taken.
    close: Option<(u16, (usize, usize, bool))>,
    state: Mutex<State>,
}

/// Entries the correlator never asked for (it got there first) are dropped beyond this many.
const MAX_FOUND: usize = 4096;

impl EarlyPeek {
    pub fn new(watched: Vec<Watched>, close: Option<(u16, (usize, usize, bool))>) -> EarlyPeek {
        EarlyPeek {
            watched,
            close,
            state: Mutex::new(State::default()),
        }
    }

    /// Whether this page shows `tid` closing `fd` after `after` (the descriptor then names nothing, or
    /// something else, by the time it is asked about).
    fn closed_later(
        &self,
        page: &[u8],
        scratch: &ParsedPage,
        tid: u32,
        fd: i32,
        after: u64,
    ) -> bool {
        let Some((id, fo)) = self.close else {
            return false;
        };
        scratch.entries.iter().any(|&(ts, off, len)| {
            let Some(d) = page.get(off as usize..off as usize + len as usize) else {
                return false;
            };
            ts > after
                && d.len() >= 8
                && u16::from_le_bytes([d[0], d[1]]) == id
                && i32::from_le_bytes(d[4..8].try_into().unwrap()) as u32 == tid
                && read_field(d, fo.0, fo.1, fo.2) == Some(fd as i64)
        })
    }

    /// Scans one raw page of the filtered instance. Cheap when the page holds none of the watched ids.
    pub fn on_page(&self, page: &[u8], scratch: &mut ParsedPage) {
        parse_page(page, scratch);
        for &(ts, off, len) in &scratch.entries {
            let Some(data) = page.get(off as usize..off as usize + len as usize) else {
                continue;
            };
            if data.len() < 8 {
                continue;
            }
            let id = u16::from_le_bytes([data[0], data[1]]);
            let Some((wi, is_enter)) = self.watched.iter().enumerate().find_map(|(i, w)| {
                if w.enter == id {
                    Some((i, true))
                } else if w.exit == id {
                    Some((i, false))
                } else {
                    None
                }
            }) else {
                continue;
            };
            let tid = i32::from_le_bytes(data[4..8].try_into().unwrap()) as u32;
            let w = self.watched[wi];
            let done = {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if is_enter {
                    let Some(fd) = read_field(data, w.fd.0, w.fd.1, w.fd.2) else {
                        continue;
                    };
                    // Only a later exit belongs to this enter; an older one lost its enter.
                    match st.exits.remove(&tid) {
                        Some((xi, ret, xts)) if xi == wi && xts > ts => Some((fd as i32, ret, xts)),
                        _ => {
                            st.enters.insert(tid, (wi, fd as i32, ts));
                            None
                        }
                    }
                } else {
                    let Some(ret) = read_field(data, w.ret.0, w.ret.1, true) else {
                        continue;
                    };
                    match st.enters.remove(&tid) {
                        Some((ei, fd, ets)) if ei == wi && ets < ts => Some((fd, ret, ts)),
                        _ => {
                            st.exits.insert(tid, (wi, ret, ts));
                            None
                        }
                    }
                }
            };
            // Only successful calls leave an address worth asking for; the lock is not held while
            // the process is asked.
            if let Some((fd, 0, xts)) = done {
                if self.closed_later(page, scratch, tid, fd, xts) {
                    continue;
                }
                let Some(tgid) = procfd::tgid_of(tid) else {
                    continue;
                };
                if let Some(addr) = procfd::peek(tgid, fd, false).and_then(|p| p.addr) {
                    // The descriptor named this socket until at least now (trace_clock is mono).
                    let taken = super::ring::mono_now_ns();
                    let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                    if st.found.len() >= MAX_FOUND {
                        st.found.clear();
                    }
                    st.found.insert((tid, xts), (addr, taken));
                }
            }
        }
    }

    /// The local address seen after the syscall whose exit record is (tid, raw ts) returned, and
    /// when it was taken (ring clock): the answer is this socket's only if the descriptor was not
    /// closed before then, which the caller checks against the close it sees in the trace.
    pub fn take(&self, tid: u32, exit_ts: u64) -> Option<(SockAddr, u64)> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.found.remove(&(tid, exit_ts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    const ENTER: u16 = 700;
    const EXIT: u16 = 701;

    /// A tracefs record: id, flags, preempt count, pid, then 8 bytes of argument or ret.
    fn record(id: u16, tid: u32, value: i64) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&id.to_le_bytes());
        r.extend_from_slice(&[0, 0]);
        r.extend_from_slice(&(tid as i32).to_le_bytes());
        r.extend_from_slice(&value.to_le_bytes());
        r
    }

    /// A ring page holding `recs`, each 10 ns after the previous one, from 1000.
    fn page(recs: &[Vec<u8>]) -> Vec<u8> {
        page_at(1_000, recs)
    }

    fn page_at(base: u64, recs: &[Vec<u8>]) -> Vec<u8> {
        let mut data = Vec::new();
        for r in recs {
            assert_eq!(r.len() % 4, 0);
            let type_len = (r.len() / 4) as u32;
            data.extend_from_slice(&((10u32 << 5) | type_len).to_le_bytes());
            data.extend_from_slice(r);
        }
        let mut p = Vec::new();
        p.extend_from_slice(&base.to_le_bytes());
        p.extend_from_slice(&(data.len() as u64).to_le_bytes());
        p.extend_from_slice(&data);
        p
    }

    const CLOSE: u16 = 702;

    fn peek_table() -> EarlyPeek {
        EarlyPeek::new(
            vec![Watched {
                enter: ENTER,
                exit: EXIT,
                fd: (8, 8, true),
                ret: (8, 8),
            }],
            Some((CLOSE, (8, 8, true))),
        )
    }

    fn tid() -> u32 {
        // SAFETY: gettid has no arguments and cannot fail.
        unsafe { libc::gettid() as u32 }
    }

    #[test]
    fn takes_the_port_the_kernel_chose_keyed_by_exit() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = s.local_addr().unwrap().port();
        let me = tid();
        let e = peek_table();
        let mut scratch = ParsedPage::default();
        let pg = page(&[record(ENTER, me, s.as_raw_fd() as i64), record(EXIT, me, 0)]);
        e.on_page(&pg, &mut scratch);
        // The exit is the second record: 1000 + 10 + 10.
        assert!(
            e.take(me, 1010).is_none(),
            "keyed by the exit, not the enter"
        );
        let (a, taken) = e.take(me, 1020).expect("address taken at the exit");
        assert_eq!(a.port, port);
        assert!(taken > 1020, "taken after the call returned");
        assert!(e.take(me, 1020).is_none(), "taken once");
    }

    #[test]
    fn exit_seen_before_enter_and_failed_calls() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let me = tid();
        let e = peek_table();
        let mut scratch = ParsedPage::default();
        // Another CPU's reader delivers the exit (at 1010) before the enter (at 1005).
        e.on_page(&page(&[record(EXIT, me, 0)]), &mut scratch);
        e.on_page(
            &page_at(995, &[record(ENTER, me, s.as_raw_fd() as i64)]),
            &mut scratch,
        );
        assert_eq!(
            e.take(me, 1010).map(|a| a.0.port),
            Some(s.local_addr().unwrap().port())
        );
        // An exit whose enter was lost never pairs with a later enter.
        e.on_page(&page_at(2_000, &[record(EXIT, me, 0)]), &mut scratch);
        e.on_page(
            &page_at(
                3_000,
                &[record(ENTER, me, s.as_raw_fd() as i64), record(EXIT, me, 0)],
            ),
            &mut scratch,
        );
        assert!(e.take(me, 2_010).is_none());
        assert!(e.take(me, 3_020).is_some(), "the later call still resolves");
        // A failed call leaves nothing to take.
        e.on_page(
            &page(&[
                record(ENTER, me, s.as_raw_fd() as i64),
                record(EXIT, me, -98),
            ]),
            &mut scratch,
        );
        assert!(e.take(me, 1020).is_none());
    }

    #[test]
    fn a_descriptor_closed_after_the_call_is_not_asked() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let fd = s.as_raw_fd() as i64;
        let me = tid();
        let e = peek_table();
        let mut scratch = ParsedPage::default();
        e.on_page(
            &page(&[
                record(ENTER, me, fd),
                record(EXIT, me, 0),
                record(CLOSE, me, fd),
            ]),
            &mut scratch,
        );
        assert!(
            e.take(me, 1020).is_none(),
            "fd closed (and maybe reused) since"
        );
        // Another descriptor's close does not matter.
        e.on_page(
            &page(&[
                record(ENTER, me, fd),
                record(EXIT, me, 0),
                record(CLOSE, me, fd + 100),
            ]),
            &mut scratch,
        );
        assert!(e.take(me, 1020).is_some());
    }
}
