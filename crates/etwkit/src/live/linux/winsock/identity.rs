//! The identity joins: a descriptor `(tgid, fd)`, the kernel's socket pointer `sk`, and etwkit's own
//! socket id (the `Endpoint` value), with the local addresses learned for each.

use super::*;

impl Correlator {
    /// The local address the reader threads saw right after the syscall being handled returned.
    pub(super) fn early_local(&self, tid: u32) -> Option<(SockAddr, u64)> {
        self.early.as_ref()?.take(tid, self.raw_ts)
    }

    /// The socket's local address as far as it is certain: learned from the kernel's events, or
    /// taken from the process early and confirmed (the descriptor was not closed before it was
    /// taken, and the trace has passed that moment).
    pub(super) fn trusted_local(&self, so: &Sock) -> Option<SockAddr> {
        if let Some(a) = so.local.filter(|a| a.port != 0) {
            return Some(a);
        }
        let (a, taken) = so.early?;
        (taken < self.raw_ts && so.close_enter.is_none_or(|c| taken < c)).then_some(a)
    }

    pub(super) fn new_sock(
        &mut self,
        tgid: u32,
        tid: u32,
        fd: i32,
        family: u16,
        stype: u32,
        proto: u32,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.socks.insert(
            id,
            Sock {
                id,
                tgid,
                last_tid: tid,
                family,
                stype,
                proto,
                sk: None,
                fds: 1,
                local: None,
                remote: None,
                conn: Conn::None,
                connect_reported: false,
                completed_reported: false,
                closed: false,
                destroyed: false,
                fd,
                early: None,
                close_enter: None,
            },
        );
        if let Some(old) = self.fds.insert((tgid, fd), id) {
            self.drop_fd_ref(old);
        }
        *self.per_process.entry(tgid).or_default() += 1;
        id
    }

    pub(super) fn drop_fd_ref(&mut self, id: u64) -> bool {
        if let Some(s) = self.socks.get_mut(&id) {
            s.fds = s.fds.saturating_sub(1);
            if s.fds == 0 && !s.closed {
                s.closed = true;
                if let Some(n) = self.per_process.get_mut(&s.tgid) {
                    *n = n.saturating_sub(1);
                }
                return true;
            }
        }
        false
    }

    /// Forgets a closed socket once nothing can refer to it any more: at close, except for a
    /// connected TCP socket, which is forgotten when the kernel destroys its sock (resets and FINs
    /// after close still find it) or when its sock pointer starts a new life.
    pub(super) fn retire(&mut self, id: u64) {
        let Some(so) = self.socks.get(&id) else {
            return;
        };
        if !so.closed {
            return;
        }
        // Only a connected TCP sock outlives close() (FIN handshake, resets after close); the kernel
        // frees one that never connected, was refused or only listened inside close() itself.
        let lingers = so.stype == libc::SOCK_STREAM as u32 && so.conn == Conn::Connected;
        if lingers && so.sk.is_some() && !so.destroyed {
            return;
        }
        if self.hold.waiting().any(|w| w == id) {
            if let Some(a) = self.trusted_local(so) {
                let a = to_family(a, so.family == libc::AF_INET6 as u16);
                self.retired_local.insert(id, a);
            }
        }
        // The pointer that named this socket stops naming it: the kernel reuses sock memory for
        // other processes' sockets, whose events must never land on a socket we retired. (bind_sk
        // keeps at most this one pointer per socket and never binds a retired one.)
        if let Some(sk) = so.sk {
            if self.sks.get(&sk) == Some(&id) {
                self.sks.remove(&sk);
            }
            self.accept_q.remove(&sk);
        }
        self.socks.remove(&id);
    }

    /// The live socket a kernel sock pointer names (never a retired one).
    pub(super) fn sock_of_sk(&self, sk: u64) -> Option<u64> {
        self.sks
            .get(&sk)
            .copied()
            .filter(|s| self.socks.contains_key(s))
    }

    pub(super) fn bind_sk(&mut self, id: u64, sk: u64) {
        if sk == 0 {
            return;
        }
        let Some(s) = self.socks.get_mut(&id) else {
            return; // retired: nothing may be attributed to it any more
        };
        if let Some(old) = s.sk {
            if old != sk && self.sks.get(&old) == Some(&id) {
                self.sks.remove(&old);
            }
        }
        s.sk = Some(sk);
        // A reused sk now belongs to this socket.
        self.sks.insert(sk, id);
    }

    /// Attribution of an event about socket `id` raised by task `tid`.
    pub(super) fn who(&self, id: u64, tid: u32, tid_tgid: u32) -> (u32, u32) {
        match self.socks.get(&id) {
            Some(s) if s.tgid == tid_tgid => (s.tgid, tid),
            Some(s) => (s.tgid, s.last_tid),
            None => (tid_tgid, tid),
        }
    }

    /// The kernel named socket `s`'s local port: keep the bound address (it may be a wildcard) with
    /// that port, or `seen` when no address was bound.
    pub(super) fn learn_port(&mut self, s: u64, port: u16, seen: Option<SockAddr>) {
        if let Some(so) = self.socks.get_mut(&s) {
            if so.local.is_none_or(|a| a.port == 0) {
                so.local = match so.local {
                    Some(a) => Some(SockAddr { port, ..a }),
                    None => seen,
                };
            }
        }
    }

    /// A thread exited; when it was the last of its process, its sockets are closed by the kernel.
    pub fn on_thread_exit(
        &mut self,
        tid: u32,
        tgid: u32,
        cpu: u16,
        ts: i64,
        group_dead: bool,
        emit: &mut dyn FnMut(&EventRecord<'_>) -> bool,
    ) {
        self.inflight.remove(&tid);
        self.uaddr.remove(&tid);
        if !group_dead {
            return;
        }
        let mut ids: Vec<u64> = self
            .fds
            .iter()
            .filter(|((p, _), _)| *p == tgid)
            .map(|(_, &id)| id)
            .collect();
        ids.sort();
        ids.dedup();
        self.fds.retain(|(p, _), _| *p != tgid);
        let mut out = Vec::new();
        for id in ids {
            if let Some(s) = self.socks.get_mut(&id) {
                if !s.closed {
                    s.closed = true;
                    let mut e = self.ev(13, id, tid, tgid, cpu, ts);
                    e.set("Error", V::U32(0));
                    out.push(e);
                    self.retire(id);
                }
            }
        }
        self.per_process.remove(&tgid);
        self.hand_out(out, ts, false, emit);
    }

    pub(super) fn sock_of_fd(&self, tgid: u32, fd: i64) -> Option<u64> {
        self.fds.get(&(tgid, fd as i32)).copied()
    }
}
