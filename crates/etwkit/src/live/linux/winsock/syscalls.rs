//! Syscall pairing: `sys_enter_X` … `sys_exit_X` on one thread, with what happened in between, becomes
//! the AFD request/completion events (create, bind, connect, accept, send, receive, close, options).

use super::*;

impl Correlator {
    /// The address the C library passed to `sys` on this thread for `fd`, if a probe saw it.
    pub(super) fn take_uaddr(&mut self, tid: u32, sys: Sys, fd: i32) -> Option<SockAddr> {
        match self.uaddr.remove(&tid) {
            Some((s, f, a)) if s == sys && f == fd => a,
            _ => None,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_enter(
        &mut self,
        sys: Sys,
        args: [i64; 6],
        tid: u32,
        tgid: u32,
        cpu: u16,
        ts: i64,
        out: &mut Vec<AfdEvent>,
    ) {
        let fd_sock = match sys {
            Sys::Socket | Sys::Poll | Sys::PPoll | Sys::Select | Sys::PSelect6 => None,
            Sys::EpollCtl => self.sock_of_fd(tgid, args[2]),
            _ => self.sock_of_fd(tgid, args[0]),
        };
        let has_sockets = self.per_process.get(&tgid).is_some_and(|&n| n > 0);
        match sys {
            Sys::Poll | Sys::PPoll | Sys::Select | Sys::PSelect6 if has_sockets => {
                let mut e = AfdEvent::new(30, tgid, tid, cpu, ts);
                e.set("HandleCount", V::I32(args[0] as i32));
                if sys == Sys::Poll {
                    e.set("Timeout", V::I32(args[1] as i32));
                }
                out.push(e);
            }
            Sys::Poll | Sys::PPoll | Sys::Select | Sys::PSelect6 => {}
            Sys::EpollCtl => {
                if let Some(s) = fd_sock {
                    out.push(self.ev(32, s, tid, tgid, cpu, ts));
                }
            }
            _ => {}
        }
        if let Some(s) = fd_sock {
            let raw = self.raw_ts;
            if let Some(so) = self.socks.get_mut(&s) {
                so.last_tid = tid;
                if sys == Sys::Close {
                    so.close_enter.get_or_insert(raw);
                }
            }
            let family = self.socks.get(&s).map(|x| x.family).unwrap_or(0);
            let v6 = family == libc::AF_INET6 as u16;
            let dgram = self
                .socks
                .get(&s)
                .is_some_and(|x| x.stype == libc::SOCK_DGRAM as u32);
            // Posted requests (level 5).
            let posted = match sys {
                Sys::SendTo if args[3] != 0 && dgram => {
                    Some((if v6 { 22 } else { 21 }, 1, args[1], args[2]))
                }
                Sys::SendTo | Sys::Write => Some((18, 1, args[1], args[2])),
                Sys::Writev => Some((18, args[2], args[1], -1)),
                Sys::SendMsg => Some((18, -1, -1, -1)),
                Sys::RecvFrom if args[3] != 0 => Some((20, 1, args[1], args[2])),
                Sys::RecvFrom | Sys::Read => Some((19, 1, args[1], args[2])),
                Sys::Readv => Some((19, args[2], args[1], -1)),
                Sys::RecvMsg => Some((19, -1, -1, -1)),
                _ => None,
            };
            if let Some((id, count, buf, len)) = posted {
                let mut e = self.ev(id, s, tid, tgid, cpu, ts);
                if count >= 0 {
                    e.set("BufferCount", V::I32(count as i32));
                }
                if buf >= 0 {
                    e.set("Buffer", V::U64(buf as u64));
                }
                if len >= 0 {
                    e.set("BufferLength", V::U32(len as u32));
                }
                out.push(e);
            }
            if sys == Sys::Connect {
                if let Some(so) = self.socks.get_mut(&s) {
                    so.conn = Conn::Connecting;
                    so.connect_reported = false;
                    so.completed_reported = false;
                }
            }
        }
        let uaddr = match sys {
            Sys::Bind | Sys::Connect => self.take_uaddr(tid, sys, args[0] as i32),
            _ => None,
        };
        if let (Sys::Connect, Some(s), Some(a)) = (sys, fd_sock, uaddr) {
            if let Some(so) = self.socks.get_mut(&s) {
                so.remote = Some(a);
            }
        }
        self.inflight.insert(
            tid,
            Inflight {
                sys,
                args,
                uaddr,
                sock: fd_sock,
                sock_event_seen: false,
            },
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_exit(
        &mut self,
        sys: Sys,
        ret: i64,
        tid: u32,
        tgid: u32,
        cpu: u16,
        ts: i64,
        out: &mut Vec<AfdEvent>,
    ) {
        let Some(inf) = self.inflight.remove(&tid) else {
            return;
        };
        if inf.sys != sys {
            return;
        }
        let err = if ret < 0 { (-ret) as u32 } else { 0 };
        match sys {
            Sys::Socket => {
                let family = inf.args[0] as i32;
                if ret < 0 || !(family == libc::AF_INET || family == libc::AF_INET6) {
                    return;
                }
                let stype = (inf.args[1] & 0xf) as u32;
                let mut proto = inf.args[2] as u32;
                if proto == 0 {
                    proto = match stype as i32 {
                        libc::SOCK_STREAM => libc::IPPROTO_TCP as u32,
                        libc::SOCK_DGRAM => libc::IPPROTO_UDP as u32,
                        _ => 0,
                    };
                }
                let id = self.new_sock(tgid, tid, ret as i32, family as u16, stype, proto);
                out.push(self.create_event(id, tid, tgid, cpu, ts));
            }
            Sys::Bind => {
                let Some(s) = inf.sock else { return };
                if ret < 0 {
                    let mut e = self.ev(40, s, tid, tgid, cpu, ts);
                    e.set("Error", V::U32(err));
                    out.push(e);
                    return;
                }
                // What the program passed; port 0 (or no probe) means the kernel chose: ask what it chose.
                let v6 = self
                    .socks
                    .get(&s)
                    .is_some_and(|x| x.family == libc::AF_INET6 as u16);
                let local = inf.uaddr;
                if local.is_none_or(|a| a.port == 0) {
                    // The reader asked the process about this descriptor a moment later; by then it
                    // may name another socket (closed and reused). Take the answer only when it is
                    // of this socket's family and at the address the program bound.
                    let passed = inf.uaddr;
                    let fits = |a: &SockAddr| {
                        a.v6 == v6
                            && a.port != 0
                            && passed.is_none_or(|p| p.addr == a.addr || p.addr == [0u8; 16])
                    };
                    if let Some(e) = self.early_local(tid).filter(|(a, _)| fits(a)) {
                        if let Some(so) = self.socks.get_mut(&s) {
                            so.early = Some(e);
                        }
                    }
                }
                if let Some(so) = self.socks.get_mut(&s) {
                    so.local = local.or(so.local);
                }
                let mut e = self.ev(if v6 { 3 } else { 2 }, s, tid, tgid, cpu, ts);
                e.addr(local.filter(|a| a.v6 == v6));
                e.set("Status", V::U32(0));
                out.push(e);
            }
            Sys::Listen => {
                if let (Some(s), true) = (inf.sock, ret == 0) {
                    if let Some(so) = self.socks.get_mut(&s) {
                        so.conn = Conn::Listening;
                    }
                }
            }
            Sys::Connect => {
                let Some(s) = inf.sock else { return };
                let Some(so) = self.socks.get(&s).cloned() else {
                    return;
                };
                if ret == -(libc::EINPROGRESS as i64) {
                    if let Some(so) = self.socks.get_mut(&s) {
                        if so.conn == Conn::Connecting {
                            so.conn = Conn::ConnectPending;
                        }
                    }
                    self.report_connect(s, tid, tgid, cpu, ts, out);
                    // The transport may have answered inside connect() itself: a loopback reset or
                    // handshake waits in the socket's backlog until connect releases the socket,
                    // after it chose EINPROGRESS. The answer then came while the socket was still
                    // Connecting (no completion reported): it completes now.
                    let code = match so.conn {
                        _ if so.completed_reported => None,
                        Conn::Refused(c) => Some(c as u32),
                        Conn::Connected => Some(0),
                        _ => None,
                    };
                    if let Some(code) = code {
                        let mut e = self.ev(6, s, tid, tgid, cpu, ts);
                        e.set("Error", V::U32(code));
                        out.push(e);
                        if let Some(so) = self.socks.get_mut(&s) {
                            so.completed_reported = true;
                        }
                    }
                    return;
                }
                if !so.connect_reported {
                    // No SYN_SENT seen (UDP, or a failure before the transport): the address the
                    // program passed (uprobe) was set at entry.
                    self.report_connect(s, tid, tgid, cpu, ts, out);
                }
                if !so.completed_reported {
                    let mut e = self.ev(6, s, tid, tgid, cpu, ts);
                    let code = match so.conn {
                        Conn::Refused(c) if ret < 0 => c as u32,
                        _ => err,
                    };
                    e.set("Error", V::U32(code));
                    out.push(e);
                }
                let early = if ret == 0 && so.local.is_none_or(|a| a.port == 0) {
                    // Only an answer of this socket's family can be this socket's (see Bind).
                    let v6 = so.family == libc::AF_INET6 as u16;
                    self.early_local(tid)
                        .filter(|(a, _)| a.v6 == v6 && a.port != 0)
                } else {
                    None
                };
                if let Some(so) = self.socks.get_mut(&s) {
                    // A connect binds implicitly: the local address (UDP has no other source of it).
                    so.early = early.or(so.early);
                    so.completed_reported = true;
                    so.conn = if ret == 0 {
                        Conn::Connected
                    } else {
                        Conn::None
                    };
                }
            }
            Sys::Accept | Sys::Accept4 => {
                let Some(l) = inf.sock else { return };
                if ret < 0 {
                    let mut e = self.ev(17, l, tid, tgid, cpu, ts);
                    e.set("Error", V::U32(err));
                    out.push(e);
                    return;
                }
                let Some(ls) = self.socks.get(&l).cloned() else {
                    return;
                };
                let child = ls
                    .sk
                    .and_then(|sk| self.accept_q.get_mut(&sk))
                    .and_then(|q| q.pop_front());
                let id = self.new_sock(tgid, tid, ret as i32, ls.family, ls.stype, ls.proto);
                let (remote, local) = match child {
                    Some((csk, remote, local)) => {
                        self.bind_sk(id, csk);
                        (remote, local)
                    }
                    None => (
                        procfd::peek(tgid, ret as i32, true)
                            .filter(|p| p.sock_type == libc::SOCK_STREAM)
                            .and_then(|p| p.addr),
                        None,
                    ),
                };
                if let Some(so) = self.socks.get_mut(&id) {
                    so.remote = remote;
                    so.local = local;
                    so.conn = Conn::Connected;
                }
                out.push(self.create_event(id, tid, tgid, cpu, ts));
                let v6 = ls.family == libc::AF_INET6 as u16;
                let mut e = self.ev(if v6 { 16 } else { 15 }, id, tid, tgid, cpu, ts);
                e.addr(remote.map(|r| to_family(r, v6)));
                e.set("Status", V::U32(0));
                out.push(e);
            }
            Sys::Close => {
                let Some(s) = inf.sock else { return };
                if ret < 0 {
                    return;
                }
                self.fds.remove(&(tgid, inf.args[0] as i32));
                if self.drop_fd_ref(s) {
                    let mut e = self.ev(13, s, tid, tgid, cpu, ts);
                    e.set("Error", V::U32(0));
                    out.push(e);
                    self.retire(s);
                }
            }
            Sys::Shutdown => {
                let Some(s) = inf.sock else { return };
                let mut e = self.ev(14, s, tid, tgid, cpu, ts);
                e.set("Error", V::U32(err));
                out.push(e);
            }
            Sys::SetSockOpt | Sys::Ioctl => {
                let Some(s) = inf.sock else { return };
                let code = if sys == Sys::Ioctl {
                    (inf.args[1] as u32 == libc::FIONBIO as u32).then_some(2)
                } else {
                    afd_option(inf.args[1] as i32, inf.args[2] as i32)
                };
                if let (Some(code), true) = (code, ret == 0) {
                    let mut e = self.ev(29, s, tid, tgid, cpu, ts);
                    e.set("Option", V::U32(code));
                    out.push(e);
                }
            }
            Sys::Poll | Sys::PPoll | Sys::Select | Sys::PSelect6 => {
                if self.per_process.get(&tgid).is_some_and(|&n| n > 0) {
                    let mut e = AfdEvent::new(31, tgid, tid, cpu, ts);
                    e.set("Error", V::U32(err));
                    out.push(e);
                }
            }
            Sys::Dup | Sys::Dup2 | Sys::Dup3 | Sys::Fcntl => {
                let Some(s) = inf.sock else { return };
                if ret < 0 {
                    return;
                }
                if sys == Sys::Fcntl
                    && !(inf.args[1] == libc::F_DUPFD as i64
                        || inf.args[1] == libc::F_DUPFD_CLOEXEC as i64)
                {
                    return;
                }
                let newfd = ret as i32;
                if let Some(old) = self.fds.insert((tgid, newfd), s) {
                    if old != s && self.drop_fd_ref(old) {
                        let mut e = self.ev(13, old, tid, tgid, cpu, ts);
                        e.set("Error", V::U32(0));
                        out.push(e);
                    }
                }
                if let Some(so) = self.socks.get_mut(&s) {
                    so.fds += 1;
                }
            }
            Sys::SendTo
            | Sys::RecvFrom
            | Sys::SendMsg
            | Sys::RecvMsg
            | Sys::Write
            | Sys::Read
            | Sys::Writev
            | Sys::Readv => {
                // Failures the socket layer never saw (bad arguments): reported from the syscall.
                if let (Some(s), true, false) = (inf.sock, ret < 0, inf.sock_event_seen) {
                    let id = match sys {
                        Sys::SendMsg => 10,
                        Sys::SendTo | Sys::Write | Sys::Writev => 9,
                        Sys::RecvFrom if inf.args[3] != 0 => 12,
                        _ => 11,
                    };
                    let mut e = self.ev(id, s, tid, tgid, cpu, ts);
                    e.set("Error", V::U32(err));
                    out.push(e);
                }
            }
            Sys::EpollCtl => {}
        }
    }

    pub(super) fn create_event(&self, id: u64, tid: u32, tgid: u32, cpu: u16, ts: i64) -> AfdEvent {
        let s = &self.socks[&id];
        let mut e = self.ev(1, id, tid, tgid, cpu, ts);
        e.set("AddressFamily", V::U32(win_family(s.family)));
        e.set("SocketType", V::U32(s.stype));
        e.set("Protocol", V::U32(s.proto));
        e.set("UserModePid", V::U64(s.tgid as u64));
        e
    }

    pub(super) fn report_connect(
        &mut self,
        s: u64,
        tid: u32,
        tgid: u32,
        cpu: u16,
        ts: i64,
        out: &mut Vec<AfdEvent>,
    ) {
        let Some(so) = self.socks.get(&s) else { return };
        if so.connect_reported {
            return;
        }
        let v6 = so.family == libc::AF_INET6 as u16;
        let remote = so.remote;
        let mut e = self.ev(if v6 { 5 } else { 4 }, s, tid, tgid, cpu, ts);
        e.addr(remote.map(|r| to_family(r, v6)));
        out.push(e);
        if let Some(so) = self.socks.get_mut(&s) {
            so.connect_reported = true;
        }
    }
}
