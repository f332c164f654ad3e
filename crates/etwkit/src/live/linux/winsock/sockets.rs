//! Kernel socket events (state changes, route lookups, softirq data and drops), attributed to the
//! socket's owner rather than to the interrupted task.

use super::*;

impl Correlator {
    /// A route lookup inside a syscall of ours on a socket whose port is unknown: the source port is
    /// the one the kernel bound it to.
    pub(super) fn on_fib(&mut self, v6: bool, o: &Offs, data: &[u8], tid: u32) {
        let (proto, sport) = (get(data, o[0]), get(data, o[1]) as u16);
        if sport == 0 || !(proto == libc::IPPROTO_UDP as i64 || proto == libc::IPPROTO_TCP as i64) {
            return;
        }
        // Only a lookup the thread made itself, in its syscall: a softirq (a loopback packet being
        // received, say) runs on whatever thread it interrupted.
        if in_interrupt(data) {
            return;
        }
        let Some(inf) = self.inflight.get(&tid) else {
            return;
        };
        let sending = matches!(
            inf.sys,
            Sys::SendTo | Sys::SendMsg | Sys::Connect | Sys::Write | Sys::Writev
        );
        let Some(s) = inf.sock.filter(|_| sending) else {
            return;
        };
        if self.socks.get(&s).is_none_or(|so| so.proto != proto as u32) {
            return;
        }
        let src = if v6 {
            data.get(o[2].0..o[2].0 + 16)
                .and_then(|b| b.try_into().ok())
                .map(|b| SockAddr::v6(b, sport))
        } else {
            data.get(o[2].0..o[2].0 + 4)
                .and_then(|b| b.try_into().ok())
                .map(|b| SockAddr::v4(b, sport))
        };
        self.learn_port(s, sport, src);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_net(
        &mut self,
        tp: Tp,
        o: &Offs,
        data: &[u8],
        tid: u32,
        tgid: u32,
        cpu: u16,
        ts: i64,
        out: &mut Vec<AfdEvent>,
    ) {
        let inflight = self.inflight.get(&tid).copied();
        match tp {
            Tp::SetState => {
                let (sk, old, new, sport, dport, proto) = (
                    get(data, o[0]) as u64,
                    get(data, o[1]),
                    get(data, o[2]),
                    get(data, o[3]) as u16,
                    get(data, o[4]) as u16,
                    get(data, o[5]),
                );
                if proto != libc::IPPROTO_TCP as i64 {
                    return;
                }
                let (local, remote) = self.state_addrs(data, sport, dport);
                // The syscall in flight on this thread names the socket (connect, listen).
                if let Some(inf) = inflight {
                    if let Some(s) = inf.sock {
                        if (inf.sys == Sys::Connect && new == SYN_SENT)
                            || (inf.sys == Sys::Listen && new == LISTEN)
                        {
                            self.bind_sk(s, sk);
                            if let Some(i) = self.inflight.get_mut(&tid) {
                                i.sock_event_seen = true;
                            }
                            if new == SYN_SENT {
                                if let Some(so) = self.socks.get_mut(&s) {
                                    so.remote = remote;
                                }
                                self.report_connect(s, tid, tgid, cpu, ts, out);
                            } else if let Some(so) = self.socks.get_mut(&s) {
                                so.local = local.or(so.local);
                                so.conn = Conn::Listening;
                            }
                            return;
                        }
                    }
                }
                if old == SYN_RECV && new == ESTABLISHED {
                    // A child connection completed its handshake: queue it on its listener.
                    let listener = self
                        .socks
                        .values()
                        .filter(|s| {
                            s.conn == Conn::Listening
                                && !s.closed
                                && s.local.map(|a| a.port) == Some(sport)
                                && match (s.local, local) {
                                    (Some(b), Some(to)) => accepts(b, to),
                                    _ => true,
                                }
                        })
                        .map(|s| s.id)
                        .min();
                    if let Some(l) = listener {
                        let lsk = self.socks[&l].sk.unwrap_or(0);
                        self.accept_q
                            .entry(lsk)
                            .or_default()
                            .push_back((sk, remote, local));
                        let v6 = self.socks[&l].family == libc::AF_INET6 as u16;
                        let mut e = self.ev(if v6 { 36 } else { 35 }, l, tid, tgid, cpu, ts);
                        e.addr(remote.map(|r| to_family(r, v6)));
                        out.push(e);
                    }
                    return;
                }
                let Some(s) = self.sock_of_sk(sk) else { return };
                if old == TCP_CLOSE && inflight.and_then(|i| i.sock) != Some(s) {
                    // A sock leaving CLOSE starts a new life; ours start inside a syscall of ours on
                    // that socket (connect and listen are handled above). This pointer was freed and
                    // now belongs to another socket, possibly another process's: it no longer names ours.
                    self.sks.remove(&sk);
                    if let Some(so) = self.socks.get_mut(&s) {
                        so.sk = None;
                        so.destroyed = true;
                    }
                    self.retire(s);
                    return;
                }
                if old == SYN_SENT && new == ESTABLISHED {
                    let mut pending = false;
                    if let Some(so) = self.socks.get_mut(&s) {
                        so.local = local;
                        pending = so.conn == Conn::ConnectPending && !so.completed_reported;
                        if so.conn != Conn::ConnectPending {
                            so.conn = Conn::Connected;
                        }
                    }
                    if pending {
                        let mut e = self.ev(6, s, tid, tgid, cpu, ts);
                        e.set("Error", V::U32(0));
                        out.push(e);
                        if let Some(so) = self.socks.get_mut(&s) {
                            so.completed_reported = true;
                            so.conn = Conn::Connected;
                        }
                    }
                } else if old == ESTABLISHED && new == CLOSE_WAIT {
                    out.push(self.ev(41, s, tid, tgid, cpu, ts));
                }
            }
            Tp::SendLen | Tp::RecvLen => {
                let (sk, family, ret) = (
                    get(data, o[0]) as u64,
                    get(data, o[1]) as i32,
                    get(data, o[2]) as i32,
                );
                if !(family == libc::AF_INET || family == libc::AF_INET6) {
                    return;
                }
                let s = match inflight.and_then(|i| i.sock) {
                    Some(s) => {
                        if self.sks.get(&sk) != Some(&s) {
                            self.bind_sk(s, sk);
                        }
                        if let Some(i) = self.inflight.get_mut(&tid) {
                            i.sock_event_seen = true;
                        }
                        s
                    }
                    None => match self.sock_of_sk(sk) {
                        Some(s) => s,
                        None => return,
                    },
                };
                let sys = inflight.filter(|i| i.sock == Some(s)).map(|i| i.sys);
                let with_addr = inflight.is_some_and(|i| {
                    matches!(i.sys, Sys::SendTo | Sys::RecvFrom) && i.args[3] != 0
                });
                let buf = inflight
                    .filter(|i| {
                        matches!(i.sys, Sys::SendTo | Sys::RecvFrom | Sys::Write | Sys::Read)
                    })
                    .map(|i| i.args[1] as u64);
                let dgram = self
                    .socks
                    .get(&s)
                    .is_some_and(|x| x.stype == libc::SOCK_DGRAM as u32);
                let v6 = self
                    .socks
                    .get(&s)
                    .is_some_and(|x| x.family == libc::AF_INET6 as u16);
                let send = matches!(tp, Tp::SendLen);
                let id = match (send, ret >= 0) {
                    (true, true) if sys == Some(Sys::SendMsg) => 25,
                    (true, true) if with_addr && dgram => 28,
                    (true, true) => 24,
                    (true, false) if sys == Some(Sys::SendMsg) => 10,
                    (true, false) => 9,
                    (false, true) if with_addr && dgram => {
                        if v6 {
                            27
                        } else {
                            26
                        }
                    }
                    (false, true) => 23,
                    (false, false) if with_addr => 12,
                    (false, false) => 11,
                };
                let mut e = self.ev(id, s, tid, tgid, cpu, ts);
                if ret >= 0 {
                    if let Some(b) = buf {
                        e.set("Buffer", V::U64(b));
                    }
                    e.set("BufferLength", V::U32(ret as u32));
                    if id == 26 || id == 27 {
                        e.set("BufferCount", V::I32(1));
                    }
                } else {
                    e.set("Error", V::U32((-ret) as u32));
                }
                out.push(e);
            }
            Tp::ErrReport => {
                let (error, sport, dport, proto) = (
                    get(data, o[0]) as i32,
                    get(data, o[1]) as u16,
                    get(data, o[2]) as u16,
                    get(data, o[3]),
                );
                if proto != libc::IPPROTO_TCP as i64 {
                    return;
                }
                // No sk in this event: find the connecting socket by its ports and peer address.
                let peer = self.fm.err_addrs.and_then(|a| a.read(data, sport, dport).1);
                let cand = self
                    .socks
                    .values()
                    .filter(|s| {
                        !s.closed
                            && matches!(s.conn, Conn::Connecting | Conn::ConnectPending)
                            && s.remote.map(|r| r.port) == Some(dport)
                            && s.local.is_none_or(|l| l.port == sport || l.port == 0)
                            && match (s.remote, peer) {
                                (Some(r), Some(p)) => unmapped(r) == unmapped(p),
                                _ => true,
                            }
                    })
                    .map(|s| s.id)
                    .min();
                let Some(s) = cand else { return };
                let pending = self.socks[&s].conn == Conn::ConnectPending
                    && !self.socks[&s].completed_reported;
                if let Some(so) = self.socks.get_mut(&s) {
                    so.conn = Conn::Refused(error);
                }
                if pending {
                    let mut e = self.ev(6, s, tid, tgid, cpu, ts);
                    e.set("Error", V::U32(error as u32));
                    out.push(e);
                    if let Some(so) = self.socks.get_mut(&s) {
                        so.completed_reported = true;
                    }
                }
            }
            Tp::RecvReset => {
                let sk = get(data, o[0]) as u64;
                let Some(s) = self.sock_of_sk(sk) else { return };
                let conn = self.socks.get(&s).map(|x| x.conn);
                if matches!(conn, Some(Conn::Connecting | Conn::ConnectPending)) {
                    // A reset answering a SYN is a refused connect: reported by connect completed.
                    return;
                }
                out.push(self.ev(8, s, tid, tgid, cpu, ts));
            }
            Tp::SendReset => {
                let sk = get(data, o[0]) as u64;
                if sk == 0 {
                    return;
                }
                let Some(s) = self.sock_of_sk(sk) else { return };
                out.push(self.ev(7, s, tid, tgid, cpu, ts));
            }
            Tp::Destroy => {
                // The kernel frees this sock: the pointer no longer names any socket of ours. A sock
                // never connected nor listening is freed inside our close(), the last place its
                // bound port shows.
                let sk = get(data, o[0]) as u64;
                let closing = inflight
                    .filter(|i| i.sys == Sys::Close && !in_interrupt(data))
                    .and_then(|i| i.sock);
                // In our close() (process context) the sock destroyed is the one being closed (or a
                // child never accepted from it, with the same local port).
                if let Some(s) = closing.or_else(|| self.sock_of_sk(sk)) {
                    let sport = get(data, o[1]) as u16;
                    let local = self.fm.destroy_addrs.and_then(|a| a.read(data, sport, 0).0);
                    if sport != 0 {
                        self.learn_port(s, sport, local);
                    }
                }
                self.accept_q.remove(&sk);
                if let Some(s) = self.sks.remove(&sk) {
                    if let Some(so) = self.socks.get_mut(&s) {
                        so.sk = None;
                        so.destroyed = true;
                    }
                    self.retire(s);
                }
            }
            Tp::UdpFail => {
                let rc = get(data, o[0]) as i32;
                let dport = get(data, o[2]) as u16;
                let src = self
                    .fm
                    .udp_saddr
                    .and_then(|(off, sz)| data.get(off..off + sz))
                    .and_then(SockAddr::from_sockaddr);
                let dst = self
                    .fm
                    .udp_daddr
                    .and_then(|(off, sz)| data.get(off..off + sz))
                    .and_then(SockAddr::from_sockaddr);
                let cand = self.udp_receiver(dport, dst);
                let Some(s) = cand else { return };
                let v6 = self.socks[&s].family == libc::AF_INET6 as u16;
                let mut e = self.ev(if v6 { 34 } else { 33 }, s, tid, tgid, cpu, ts);
                e.addr(src.map(|a| to_family(a, v6)));
                e.set("Reason", V::I32(rc));
                out.push(e);
            }
            Tp::DataReady => {
                let sk = get(data, o[0]) as u64;
                let Some(s) = self.sock_of_sk(sk) else { return };
                out.push(self.ev(37, s, tid, tgid, cpu, ts));
            }
            Tp::Enter(_) | Tp::Exit(_) | Tp::Fib { .. } => {}
        }
    }

    /// Our UDP socket that receives datagrams for `port` (at `dst`, when the event names it).
    pub(super) fn udp_receiver(&mut self, port: u16, dst: Option<SockAddr>) -> Option<u64> {
        // The address taken early counts here even unconfirmed: a datagram drop needs its socket now.
        let find = |socks: &HashMap<u64, Sock>| {
            socks
                .values()
                .filter(|s| {
                    let local = s.local.filter(|a| a.port != 0).or(s.early.map(|e| e.0));
                    !s.closed
                        && s.stype == libc::SOCK_DGRAM as u32
                        && local.map(|a| a.port) == Some(port)
                        && match (local, dst) {
                            (Some(b), Some(to)) => accepts(b, to),
                            _ => true,
                        }
                })
                .map(|s| s.id)
                .min()
        };
        if let Some(s) = find(&self.socks) {
            return Some(s);
        }
        // Sockets whose local address is not known yet (implicit bind by sendto/connect).
        let unknown: Vec<(u64, u32, i32)> = self
            .socks
            .values()
            .filter(|s| {
                !s.closed
                    && s.stype == libc::SOCK_DGRAM as u32
                    && s.local.is_none_or(|a| a.port == 0)
                    && s.early.is_none()
            })
            .map(|s| (s.id, s.tgid, s.fd))
            .collect();
        for (id, pid, fd) in unknown {
            if let Some(a) = procfd::peek(pid, fd, false)
                .filter(|p| p.sock_type == libc::SOCK_DGRAM)
                .and_then(|p| p.addr)
            {
                let taken = super::super::ring::mono_now_ns();
                if let Some(s) = self.socks.get_mut(&id) {
                    s.early = Some((a, taken));
                }
            }
        }
        find(&self.socks)
    }

    pub(super) fn state_addrs(
        &self,
        data: &[u8],
        sport: u16,
        dport: u16,
    ) -> (Option<SockAddr>, Option<SockAddr>) {
        match self.fm.set_state_addrs {
            Some(a) => a.read(data, sport, dport),
            None => (None, None),
        }
    }
}
