//! pcapng (the capture format Wireshark, tshark and tcpdump read) from packet-capture events.
//!
//! [`PcapngWriter`] writes the blocks: a Section Header, one Interface Description per interface
//! (link type, name, description, 100 ns timestamps), and Enhanced Packet Blocks (timestamp, captured
//! and original length, direction flags, a comment). Two sources of packets feed it:
//!
//! - [`PktMonPackets`] ([`pktmon`]): decoded Microsoft-Windows-PktMon packet events (`pktmon start
//!   --capture`);
//! - [`NdisPackets`] ([`ndis`]): Microsoft-Windows-NDIS-PacketCapture fragment events (ndiscap:
//!   `netsh trace start capture=yes`), read from their payloads, so a trace without the provider's
//!   manifest converts too;
//!
//! and [`journal`] writes the trace's other events beside them, as systemd Journal Export entries.
//! [`convert::convert`] runs them all over a file.
//!
//! Block layouts follow the pcapng specification (draft-ietf-opsawg-pcapng): every block is
//! `type u32, total length u32, body, total length u32`, bodies padded to 4 bytes, options as
//! `code u16, length u16, value` padded to 4 bytes and closed by `opt_endofopt`.

use std::io::{self, Write};
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::time::FILETIME_UNIX_EPOCH;

pub mod convert;
pub mod journal;
pub mod ndis;
pub mod pktmon;

pub use ndis::{NdisPackets, NdisSummary};
pub use pktmon::{
    PktMonPackets, PktMonSummary, PKTMON_COMPONENT, PKTMON_DROP, PKTMON_PACKET, PKTMON_PROVIDER,
};

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 0x0000_0001;
const EPB: u32 = 0x0000_0006;
/// systemd Journal Export Block: one journal entry (`KEY=value` lines).
const SJE: u32 = 0x0000_0009;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;

const OPT_END: u16 = 0;
const OPT_COMMENT: u16 = 1;
const SHB_HARDWARE: u16 = 2;
const SHB_OS: u16 = 3;
const SHB_USERAPPL: u16 = 4;
const IF_NAME: u16 = 2;
const IF_DESCRIPTION: u16 = 3;
const IF_IPV4ADDR: u16 = 4;
const IF_IPV6ADDR: u16 = 5;
const IF_MACADDR: u16 = 6;
const IF_TSRESOL: u16 = 9;
const EPB_FLAGS: u16 = 2;
const EPB_PACKETID: u16 = 5;

/// Link types (LINKTYPE_* of the tcpdump.org registry).
pub mod linktype {
    pub const ETHERNET: u16 = 1;
    /// An IPv4 or IPv6 packet with no link-layer header.
    pub const RAW: u16 = 101;
    pub const IEEE802_11: u16 = 105;
}

/// Packet direction, as `epb_flags` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Unknown,
    Inbound,
    Outbound,
}

/// What the section header says about where the capture was made.
#[derive(Clone, Debug, Default)]
pub struct SectionInfo {
    pub os: Option<String>,
    pub hardware: Option<String>,
    pub application: Option<String>,
}

/// One packet to write.
#[derive(Clone, Debug)]
pub struct Packet<'a> {
    pub interface: u32,
    /// UTC FILETIME (100 ns since 1601).
    pub timestamp: i64,
    pub data: &'a [u8],
    /// The packet's length on the wire (≥ `data.len()` when the capture was truncated).
    pub original_len: u32,
    pub direction: Direction,
    /// `epb_packetid`: the same packet seen at several capture points carries the same id.
    pub id: Option<u64>,
    pub comment: Option<String>,
}

/// The addresses an interface description carries (`if_MACaddr`, `if_IPv4addr`, `if_IPv6addr`).
/// The capture says no netmask or prefix: they are written as one host's (/32, /128).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Addresses {
    pub mac: Option<[u8; 6]>,
    pub ipv4: Vec<Ipv4Addr>,
    pub ipv6: Vec<Ipv6Addr>,
}

/// Writes a pcapng stream: one section, interfaces as they are added, packets.
pub struct PcapngWriter<W: Write> {
    out: W,
    interfaces: u32,
    packets: u64,
    entries: u64,
    block: Vec<u8>,
}

fn opt(buf: &mut Vec<u8>, code: u16, value: &[u8]) {
    buf.extend_from_slice(&code.to_le_bytes());
    buf.extend_from_slice(&(value.len() as u16).to_le_bytes());
    buf.extend_from_slice(value);
    pad4(buf);
}

fn pad4(buf: &mut Vec<u8>) {
    while buf.len() % 4 != 0 {
        buf.push(0);
    }
}

/// A string option value, cut to what an option can hold.
fn text(s: &str) -> &[u8] {
    let b = s.as_bytes();
    &b[..b.len().min(u16::MAX as usize - 3)]
}

impl<W: Write> PcapngWriter<W> {
    /// Starts the stream with its section header.
    pub fn new(out: W, info: &SectionInfo) -> io::Result<Self> {
        let mut w = PcapngWriter {
            out,
            interfaces: 0,
            packets: 0,
            entries: 0,
            block: Vec::with_capacity(4096),
        };
        let mut body = Vec::new();
        body.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        // Section length unknown (-1): the stream is written in one pass.
        body.extend_from_slice(&(-1i64).to_le_bytes());
        for (code, v) in [
            (SHB_HARDWARE, &info.hardware),
            (SHB_OS, &info.os),
            (SHB_USERAPPL, &info.application),
        ] {
            if let Some(v) = v {
                opt(&mut body, code, text(v));
            }
        }
        opt(&mut body, OPT_END, &[]);
        w.write_block(SHB, &body)?;
        Ok(w)
    }

    fn write_block(&mut self, kind: u32, body: &[u8]) -> io::Result<()> {
        let total = (12 + body.len()) as u32;
        self.block.clear();
        self.block.extend_from_slice(&kind.to_le_bytes());
        self.block.extend_from_slice(&total.to_le_bytes());
        self.block.extend_from_slice(body);
        self.block.extend_from_slice(&total.to_le_bytes());
        self.out.write_all(&self.block)
    }

    /// Adds an interface; its packets carry 100 ns timestamps. Returns its index.
    pub fn interface(
        &mut self,
        link_type: u16,
        name: &str,
        description: Option<&str>,
    ) -> io::Result<u32> {
        self.interface_at(link_type, name, description, &Addresses::default())
    }

    /// Adds an interface with its addresses; its packets carry 100 ns timestamps. Returns its
    /// index.
    pub fn interface_at(
        &mut self,
        link_type: u16,
        name: &str,
        description: Option<&str>,
        addresses: &Addresses,
    ) -> io::Result<u32> {
        let mut body = Vec::new();
        body.extend_from_slice(&link_type.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        // SnapLen 0: no limit.
        body.extend_from_slice(&0u32.to_le_bytes());
        opt(&mut body, IF_NAME, text(name));
        if let Some(d) = description {
            opt(&mut body, IF_DESCRIPTION, text(d));
        }
        for a in &addresses.ipv4 {
            let mut v = a.octets().to_vec();
            v.extend_from_slice(&[0xff; 4]);
            opt(&mut body, IF_IPV4ADDR, &v);
        }
        for a in &addresses.ipv6 {
            let mut v = a.octets().to_vec();
            v.push(128);
            opt(&mut body, IF_IPV6ADDR, &v);
        }
        if let Some(m) = &addresses.mac {
            opt(&mut body, IF_MACADDR, m);
        }
        // 10^-7 s: the FILETIME resolution ETW timestamps have.
        opt(&mut body, IF_TSRESOL, &[7]);
        opt(&mut body, OPT_END, &[]);
        self.write_block(IDB, &body)?;
        self.interfaces += 1;
        Ok(self.interfaces - 1)
    }

    pub fn packet(&mut self, p: &Packet<'_>) -> io::Result<()> {
        if p.interface >= self.interfaces {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "packet for interface {} of {}",
                    p.interface, self.interfaces
                ),
            ));
        }
        // Units of 100 ns since the Unix epoch (if_tsresol 7).
        let ts = (p.timestamp - FILETIME_UNIX_EPOCH).max(0) as u64;
        let mut body = Vec::with_capacity(32 + p.data.len());
        body.extend_from_slice(&p.interface.to_le_bytes());
        body.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(ts as u32).to_le_bytes());
        body.extend_from_slice(&(p.data.len() as u32).to_le_bytes());
        body.extend_from_slice(&p.original_len.max(p.data.len() as u32).to_le_bytes());
        body.extend_from_slice(p.data);
        pad4(&mut body);
        let flags: u32 = match p.direction {
            Direction::Unknown => 0,
            Direction::Inbound => 1,
            Direction::Outbound => 2,
        };
        if flags != 0 {
            opt(&mut body, EPB_FLAGS, &flags.to_le_bytes());
        }
        if let Some(id) = p.id {
            opt(&mut body, EPB_PACKETID, &id.to_le_bytes());
        }
        if let Some(c) = &p.comment {
            opt(&mut body, OPT_COMMENT, text(c));
        }
        if flags != 0 || p.id.is_some() || p.comment.is_some() {
            opt(&mut body, OPT_END, &[]);
        }
        self.write_block(EPB, &body)?;
        self.packets += 1;
        Ok(())
    }

    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Writes a systemd Journal Export block: `__REALTIME_TIMESTAMP` (microseconds since 1970)
    /// from `timestamp` (UTC FILETIME), then `fields` in order. Wireshark lists such entries
    /// among the packets, in file order. Field names are upper-case letters, digits and `_`; a
    /// value holding a newline is written in the export format's length-prefixed form.
    pub fn journal_entry(&mut self, timestamp: i64, fields: &[(&str, &str)]) -> io::Result<()> {
        let micros = (timestamp - FILETIME_UNIX_EPOCH).max(0) / 10;
        let mut body = format!("__REALTIME_TIMESTAMP={micros}\n").into_bytes();
        for (k, v) in fields {
            body.extend_from_slice(k.as_bytes());
            if v.contains('\n') {
                body.push(b'\n');
                body.extend_from_slice(&(v.len() as u64).to_le_bytes());
            } else {
                body.push(b'=');
            }
            body.extend_from_slice(v.as_bytes());
            body.push(b'\n');
        }
        pad4(&mut body);
        self.write_block(SJE, &body)?;
        self.entries += 1;
        Ok(())
    }

    /// Journal entries written.
    pub fn journal_entries(&self) -> u64 {
        self.entries
    }

    /// Flushes and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walks the blocks: (type, body) each, checking both length fields and the 4-byte padding.
    fn blocks(b: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let mut v = Vec::new();
        let mut off = 0;
        while off < b.len() {
            let kind = u32::from_le_bytes(b[off..off + 4].try_into().unwrap());
            let len = u32::from_le_bytes(b[off + 4..off + 8].try_into().unwrap()) as usize;
            assert_eq!(len % 4, 0);
            let tail = u32::from_le_bytes(b[off + len - 4..off + len].try_into().unwrap());
            assert_eq!(tail as usize, len);
            v.push((kind, b[off + 8..off + len - 4].to_vec()));
            off += len;
        }
        v
    }

    #[test]
    fn journal_entries_are_export_format() {
        let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
        let t = FILETIME_UNIX_EPOCH + 123_456_789;
        w.journal_entry(t, &[("MESSAGE", "one\ntwo"), ("PRIORITY", "6")])
            .unwrap();
        assert_eq!(w.journal_entries(), 1);
        let b = w.finish().unwrap();
        let bl = blocks(&b);
        assert_eq!(bl[1].0, SJE);
        let mut want = b"__REALTIME_TIMESTAMP=12345678\nMESSAGE\n".to_vec();
        want.extend_from_slice(&7u64.to_le_bytes());
        want.extend_from_slice(b"one\ntwo\nPRIORITY=6\n");
        pad4(&mut want);
        assert_eq!(bl[1].1, want);
    }

    #[test]
    fn blocks_are_well_formed() {
        let mut w = PcapngWriter::new(
            Vec::new(),
            &SectionInfo {
                os: Some("Windows build 20348".into()),
                ..Default::default()
            },
        )
        .unwrap();
        let addresses = Addresses {
            mac: Some([0, 0x22, 0x48, 0x7b, 0xb3, 0x80]),
            ipv4: vec![Ipv4Addr::new(10, 9, 1, 22)],
            ipv6: vec!["fe80::1".parse().unwrap()],
        };
        let i = w
            .interface_at(linktype::ETHERNET, "eth", Some("test"), &addresses)
            .unwrap();
        let unix_1s = FILETIME_UNIX_EPOCH + 10_000_000 + 3;
        w.packet(&Packet {
            interface: i,
            timestamp: unix_1s,
            data: &[1, 2, 3, 4, 5],
            original_len: 60,
            direction: Direction::Outbound,
            id: Some(0x0102_0304_0506),
            comment: Some("hi".into()),
        })
        .unwrap();
        assert!(w
            .packet(&Packet {
                interface: 7,
                timestamp: 0,
                data: &[],
                original_len: 0,
                direction: Direction::Unknown,
                id: None,
                comment: None,
            })
            .is_err());
        let b = w.finish().unwrap();
        let bl = blocks(&b);
        assert_eq!(
            bl.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            [SHB, IDB, EPB]
        );
        let epb = &bl[2].1;
        let ts = (u32::from_le_bytes(epb[4..8].try_into().unwrap()) as u64) << 32
            | u32::from_le_bytes(epb[8..12].try_into().unwrap()) as u64;
        assert_eq!(ts, 10_000_003, "100 ns units since 1970");
        assert_eq!(u32::from_le_bytes(epb[12..16].try_into().unwrap()), 5);
        assert_eq!(u32::from_le_bytes(epb[16..20].try_into().unwrap()), 60);
        assert_eq!(&epb[20..25], &[1, 2, 3, 4, 5]);
        // epb_flags: outbound.
        assert_eq!(&epb[28..32], &[2, 0, 4, 0]);
        assert_eq!(&epb[32..36], &[2, 0, 0, 0]);
        // epb_packetid.
        assert_eq!(&epb[36..40], &[5, 0, 8, 0]);
        assert_eq!(&epb[40..48], &0x0102_0304_0506u64.to_le_bytes());
        let idb = &bl[1].1;
        let has = |option: &[u8]| idb.windows(option.len()).any(|w| w == option);
        assert!(
            has(&[4, 0, 8, 0, 10, 9, 1, 22, 255, 255, 255, 255]),
            "if_IPv4addr /32"
        );
        let mut v6 = vec![5, 0, 17, 0, 0xfe, 0x80];
        v6.extend_from_slice(&[0; 13]);
        v6.extend_from_slice(&[1, 128]);
        assert!(has(&v6), "if_IPv6addr /128");
        assert!(
            has(&[6, 0, 6, 0, 0, 0x22, 0x48, 0x7b, 0xb3, 0x80]),
            "if_MACaddr"
        );
        assert!(bl[1].1.windows(4).any(|w| w == [9, 0, 1, 0]), "if_tsresol");
    }
}
