//! A minimal pcapng reader (little-endian sections), independent of the writer under test.

use std::path::Path;

/// An interface description: link type, `if_name`, `if_description`, addresses.
#[derive(Debug, Default)]
pub struct Interface {
    pub link_type: u16,
    pub name: String,
    pub description: Option<String>,
    /// `if_IPv4addr` (address, netmask), `if_IPv6addr` (address, prefix length), `if_MACaddr`.
    pub ipv4: Vec<([u8; 4], [u8; 4])>,
    pub ipv6: Vec<([u8; 16], u8)>,
    pub mac: Option<[u8; 6]>,
}

/// An enhanced packet block.
#[derive(Debug, Default)]
pub struct Packet {
    pub interface: u32,
    /// In the interface's units (here 100 ns, or pktmon's microseconds).
    pub timestamp: u64,
    pub data: Vec<u8>,
    pub original_len: u32,
    /// `epb_flags`: 1 inbound, 2 outbound in the low bits.
    pub flags: Option<u32>,
    /// `epb_packetid`.
    pub id: Option<u64>,
    pub comment: Option<String>,
}

#[derive(Debug, Default)]
pub struct Capture {
    pub interfaces: Vec<Interface>,
    pub packets: Vec<Packet>,
}

impl Capture {
    pub fn link_types(&self) -> Vec<u16> {
        self.interfaces.iter().map(|i| i.link_type).collect()
    }
}

/// The options of a block from `at` to `end`: (code, value).
fn options(b: &[u8], mut at: usize, end: usize) -> Vec<(u16, Vec<u8>)> {
    let mut v = Vec::new();
    while at + 4 <= end {
        let code = u16::from_le_bytes([b[at], b[at + 1]]);
        let len = u16::from_le_bytes([b[at + 2], b[at + 3]]) as usize;
        if code == 0 {
            break;
        }
        v.push((code, b[at + 4..at + 4 + len].to_vec()));
        at += 4 + len.div_ceil(4) * 4;
    }
    v
}

pub fn read(path: &Path) -> Capture {
    let b = std::fs::read(path).unwrap();
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let text = |v: &[u8]| String::from_utf8(v.to_vec()).unwrap();
    let mut c = Capture::default();
    let mut off = 0;
    while off < b.len() {
        let (kind, len) = (u32_at(off), u32_at(off + 4) as usize);
        assert!(len >= 12 && len % 4 == 0, "block at {off}: length {len}");
        assert_eq!(
            u32_at(off + len - 4) as usize,
            len,
            "trailing length at {off}"
        );
        let body = off + 8;
        let end = off + len - 4;
        match kind {
            0x0A0D0D0A => assert_eq!(u32_at(body), 0x1A2B3C4D, "byte-order magic"),
            1 => {
                let mut i = Interface {
                    link_type: u16::from_le_bytes([b[body], b[body + 1]]),
                    ..Interface::default()
                };
                for (code, v) in options(&b, body + 8, end) {
                    match code {
                        2 => i.name = text(&v),
                        3 => i.description = Some(text(&v)),
                        4 => i
                            .ipv4
                            .push((v[..4].try_into().unwrap(), v[4..8].try_into().unwrap())),
                        5 => i.ipv6.push((v[..16].try_into().unwrap(), v[16])),
                        6 => i.mac = Some(v[..6].try_into().unwrap()),
                        _ => {}
                    }
                }
                c.interfaces.push(i);
            }
            6 => {
                let cap = u32_at(body + 12) as usize;
                let mut p = Packet {
                    interface: u32_at(body),
                    timestamp: ((u32_at(body + 4) as u64) << 32) | u32_at(body + 8) as u64,
                    data: b[body + 20..body + 20 + cap].to_vec(),
                    original_len: u32_at(body + 16),
                    ..Packet::default()
                };
                for (code, v) in options(&b, body + 20 + cap.div_ceil(4) * 4, end) {
                    match code {
                        1 => p.comment = Some(text(&v)),
                        2 => p.flags = Some(u32::from_le_bytes(v[..4].try_into().unwrap())),
                        5 => p.id = Some(u64::from_le_bytes(v[..8].try_into().unwrap())),
                        _ => {}
                    }
                }
                c.packets.push(p);
            }
            _ => {}
        }
        off += len;
    }
    c
}

/// Whether tshark is here; without it, a loud SKIPPED line for `what` (a failure with
/// `ETWKIT_REQUIRE_TOOLS=1`, as `.ci/run` sets).
pub fn have_tshark(what: &str) -> bool {
    if std::process::Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok()
    {
        return true;
    }
    if std::env::var("ETWKIT_REQUIRE_TOOLS").is_ok_and(|v| v == "1") {
        panic!("tshark is not installed but ETWKIT_REQUIRE_TOOLS=1 (apt-get install tshark)");
    }
    eprintln!("\n*** SKIPPED {what}: no tshark ***\n");
    false
}

/// tshark's `fields` of every packet of `file`, one line each (fields separated by `;`). tshark
/// must succeed and remark on nothing but running as root.
pub fn tshark_fields(file: &Path, fields: &[&str]) -> Vec<String> {
    let mut cmd = std::process::Command::new("tshark");
    cmd.arg("-r")
        .arg(file)
        .args(["-T", "fields", "-E", "separator=;"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let o = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}: {stderr}", file.display());
    let complaints: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("Running as user \"root\""))
        .collect();
    assert!(complaints.is_empty(), "{}: {complaints:?}", file.display());
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}
