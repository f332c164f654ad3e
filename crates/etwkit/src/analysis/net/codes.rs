//! Error numbers with their symbols and words (Linux errno, Windows Sockets, NTSTATUS, Win32), and
//! the AFD abort and datagram-drop reasons (winsock-afd.json value maps).

use super::Os;

/// An error number with its symbol and its meaning in words, when known.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ErrorCode {
    pub code: i64,
    /// `WSAECONNREFUSED`, `ECONNREFUSED`, `STATUS_CONNECTION_REFUSED`...
    pub symbol: Option<&'static str>,
    /// "connection refused".
    pub words: Option<&'static str>,
}

impl ErrorCode {
    /// `connection refused (10061 WSAECONNREFUSED)`, or `error 12345` when unknown.
    pub fn describe(&self) -> String {
        let num = if self.code > 0xFFFF {
            format!("{:#x}", self.code)
        } else {
            self.code.to_string()
        };
        match (self.words, self.symbol) {
            (Some(w), Some(s)) => format!("{w} ({num} {s})"),
            (Some(w), None) => format!("{w} ({num})"),
            (None, Some(s)) => format!("error {num} {s}"),
            (None, None) => format!("error {num}"),
        }
    }
}

/// (number, symbol, words): Linux errno values met on sockets.
const ERRNO: &[(i64, &str, &str)] = &[
    (1, "EPERM", "operation not permitted"),
    (4, "EINTR", "interrupted"),
    (9, "EBADF", "bad descriptor"),
    (11, "EAGAIN", "would block"),
    (12, "ENOMEM", "out of memory"),
    (13, "EACCES", "permission denied"),
    (14, "EFAULT", "bad address"),
    (22, "EINVAL", "invalid argument"),
    (24, "EMFILE", "too many open files"),
    (32, "EPIPE", "broken pipe"),
    (88, "ENOTSOCK", "not a socket"),
    (89, "EDESTADDRREQ", "destination address required"),
    (90, "EMSGSIZE", "message too long"),
    (92, "ENOPROTOOPT", "protocol option not available"),
    (93, "EPROTONOSUPPORT", "protocol not supported"),
    (95, "EOPNOTSUPP", "operation not supported"),
    (97, "EAFNOSUPPORT", "address family not supported"),
    (98, "EADDRINUSE", "address already in use"),
    (99, "EADDRNOTAVAIL", "address not available"),
    (100, "ENETDOWN", "network is down"),
    (101, "ENETUNREACH", "network unreachable"),
    (102, "ENETRESET", "connection reset by network"),
    (103, "ECONNABORTED", "connection aborted"),
    (104, "ECONNRESET", "connection reset by peer"),
    (105, "ENOBUFS", "no buffer space"),
    (106, "EISCONN", "already connected"),
    (107, "ENOTCONN", "not connected"),
    (108, "ESHUTDOWN", "socket shut down"),
    (110, "ETIMEDOUT", "timed out"),
    (111, "ECONNREFUSED", "connection refused"),
    (112, "EHOSTDOWN", "host is down"),
    (113, "EHOSTUNREACH", "host unreachable"),
    (114, "EALREADY", "operation already in progress"),
    (115, "EINPROGRESS", "in progress"),
];

/// Windows Sockets error codes.
const WSA: &[(i64, &str, &str)] = &[
    (10004, "WSAEINTR", "interrupted"),
    (10009, "WSAEBADF", "bad descriptor"),
    (10013, "WSAEACCES", "permission denied"),
    (10014, "WSAEFAULT", "bad address"),
    (10022, "WSAEINVAL", "invalid argument"),
    (10024, "WSAEMFILE", "too many open sockets"),
    (10035, "WSAEWOULDBLOCK", "would block"),
    (10036, "WSAEINPROGRESS", "in progress"),
    (10037, "WSAEALREADY", "operation already in progress"),
    (10038, "WSAENOTSOCK", "not a socket"),
    (10039, "WSAEDESTADDRREQ", "destination address required"),
    (10040, "WSAEMSGSIZE", "message too long"),
    (10042, "WSAENOPROTOOPT", "protocol option not available"),
    (10043, "WSAEPROTONOSUPPORT", "protocol not supported"),
    (10045, "WSAEOPNOTSUPP", "operation not supported"),
    (10047, "WSAEAFNOSUPPORT", "address family not supported"),
    (10048, "WSAEADDRINUSE", "address already in use"),
    (10049, "WSAEADDRNOTAVAIL", "address not available"),
    (10050, "WSAENETDOWN", "network is down"),
    (10051, "WSAENETUNREACH", "network unreachable"),
    (10052, "WSAENETRESET", "connection reset by network"),
    (10053, "WSAECONNABORTED", "connection aborted"),
    (10054, "WSAECONNRESET", "connection reset by peer"),
    (10055, "WSAENOBUFS", "no buffer space"),
    (10056, "WSAEISCONN", "already connected"),
    (10057, "WSAENOTCONN", "not connected"),
    (10058, "WSAESHUTDOWN", "socket shut down"),
    (10060, "WSAETIMEDOUT", "timed out"),
    (10061, "WSAECONNREFUSED", "connection refused"),
    (10064, "WSAEHOSTDOWN", "host is down"),
    (10065, "WSAEHOSTUNREACH", "host unreachable"),
];

/// NTSTATUS values AFD reports.
const NTSTATUS: &[(i64, &str, &str)] = &[
    (0x0000_0103, "STATUS_PENDING", "in progress"),
    (0x8000_0005, "STATUS_BUFFER_OVERFLOW", "message truncated"),
    (0xC000_0022, "STATUS_ACCESS_DENIED", "permission denied"),
    (
        0xC000_0043,
        "STATUS_SHARING_VIOLATION",
        "address already in use",
    ),
    (
        0xC000_009A,
        "STATUS_INSUFFICIENT_RESOURCES",
        "no buffer space",
    ),
    (0xC000_00B5, "STATUS_IO_TIMEOUT", "timed out"),
    (0xC000_0120, "STATUS_CANCELLED", "cancelled"),
    (
        0xC000_020A,
        "STATUS_ADDRESS_ALREADY_EXISTS",
        "address already in use",
    ),
    (
        0xC000_020C,
        "STATUS_CONNECTION_DISCONNECTED",
        "connection disconnected",
    ),
    (
        0xC000_020D,
        "STATUS_CONNECTION_RESET",
        "connection reset by peer",
    ),
    (
        0xC000_0236,
        "STATUS_CONNECTION_REFUSED",
        "connection refused",
    ),
    (
        0xC000_0237,
        "STATUS_GRACEFUL_DISCONNECT",
        "graceful disconnect",
    ),
    (
        0xC000_023C,
        "STATUS_NETWORK_UNREACHABLE",
        "network unreachable",
    ),
    (0xC000_023D, "STATUS_HOST_UNREACHABLE", "host unreachable"),
    (0xC000_023F, "STATUS_PORT_UNREACHABLE", "port unreachable"),
    (0xC000_0240, "STATUS_REQUEST_ABORTED", "request aborted"),
    (
        0xC000_0241,
        "STATUS_CONNECTION_ABORTED",
        "connection aborted",
    ),
];

/// Win32 error codes met on sockets.
const WIN32: &[(i64, &str, &str)] = &[
    (64, "ERROR_NETNAME_DELETED", "connection reset by peer"),
    (121, "ERROR_SEM_TIMEOUT", "timed out"),
    (995, "ERROR_OPERATION_ABORTED", "cancelled"),
    (997, "ERROR_IO_PENDING", "in progress"),
    (1225, "ERROR_CONNECTION_REFUSED", "connection refused"),
    (1231, "ERROR_NETWORK_UNREACHABLE", "network unreachable"),
    (1232, "ERROR_HOST_UNREACHABLE", "host unreachable"),
    (1236, "ERROR_CONNECTION_ABORTED", "connection aborted"),
];

/// The name and words of error number `code` as `os` reports it (Linux errno may be negative).
pub fn error_code(os: Os, code: i64) -> ErrorCode {
    let (table, key) = match os {
        Os::Linux => (ERRNO, code.abs()),
        Os::Windows if (10000..12000).contains(&code) => (WSA, code),
        Os::Windows if code >= 0x100 && (code as u32) & 0xC000_0000 != 0 || code == 0x103 => {
            (NTSTATUS, code)
        }
        Os::Windows => (WIN32, code),
    };
    let hit = table.iter().find(|(n, _, _)| *n == key);
    ErrorCode {
        code,
        symbol: hit.map(|h| h.1),
        words: hit.map(|h| h.2),
    }
}

/// "would block" / "in progress": the normal answer of a non-blocking call, not a failure.
pub(super) fn is_benign(e: &ErrorCode) -> bool {
    matches!(
        e.symbol,
        Some(
            "EAGAIN"
                | "EINPROGRESS"
                | "WSAEWOULDBLOCK"
                | "WSAEINPROGRESS"
                | "STATUS_PENDING"
                | "ERROR_IO_PENDING"
        )
    )
}

/// AFD_ABORT_ValueMap (winsock-afd.json).
pub(super) fn abort_reason(r: i64) -> Option<&'static str> {
    Some(match r {
        1 => "attempt to flush pending receive requests failed",
        2 => "abortive disconnect requested on endpoint",
        3 => "shutdown with SD_RECEIVE posted with receive data pending",
        4 => "transport indicated abortive disconnect",
        5 => "error on accepted connection not associated with listening socket",
        6 => "disconnect failed",
        7 => "pending data on connection when disconnect called",
        8 => "invalid buffer specified on fastio receive",
        9 => "accept operation failed",
        10 => "unable to allocate buffer",
        11 => "counter overflow",
        12 => "data arrives after shutting down receive path",
        13 => "data arrives during endpoint cleanup",
        14 => "receive request failed",
        15 => "send request failed",
        16 => "send request cancelled",
        17 => "TransmitPackets/TransmitFile request cancelled",
        18 => "abort indicated during connection request",
        19 => "plug and play event caused abort",
        _ => return None,
    })
}

/// AFD_DGRAM_DROP_ValueMap (winsock-afd.json).
pub(super) fn drop_reason(r: i64) -> Option<&'static str> {
    Some(match r {
        1 => "datagram source address does not match connected address",
        2 => "insufficient local buffer space",
        3 => "buffer allocation failed",
        4 => "insufficient local buffer space, circular queueing enabled",
        5 => "indicated datagram too large",
        _ => return None,
    })
}
