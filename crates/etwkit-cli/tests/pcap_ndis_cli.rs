//! `etwkit pcap` of Microsoft-Windows-NDIS-PacketCapture events (`netsh trace start capture=yes`).
//! The trace is written here with the ETL writer, with no manifest or embedded metadata for the
//! provider (as `netsh trace` writes it), so the test runs on every OS:
//!
//! - a truncated IPv4 packet received on Ethernet interface 11 (original length from its header);
//! - a packet sent in three fragments through a filter driver (lower 12 over miniport 5);
//! - a packet on interface 11 whose end never comes, then a whole one;
//! - an 802.11 frame with its Protected flag set, after a metadata event with its Wi-Fi receive
//!   context;
//! - a bare IPv4 packet on a mobile broadband interface;
//! - a virtual switch fragment (1003) from port 7, VLAN 42 in its out-of-band data;
//! - an Ethernet frame sent inside an RRAS tunnel (Ras-NdisWanPacketCapture 5001);
//! - a Wi-Fi metadata event too short for its receive context, a fragment event shorter than its
//!   size says, and a last packet that never ends.

mod common;

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use common::etwkit;
use common::pcapng::{have_tshark, read, tshark_fields, Capture};
use etwkit::etl::writer::{Writer, WriterOptions};
use etwkit::event::{EventDescriptor, EventRecord, HeaderType};
use etwkit::time::FILETIME_UNIX_EPOCH;
use etwkit::Guid;

const NDIS: Guid = Guid::from_str_const("2ed6006e-4729-4609-b423-3ee7bcd678ef");
const RAS: Guid = Guid::from_str_const("d84521f7-2235-4237-a7c0-14e3a9676286");

const ETHERNET: u64 = 0x1;
const WWAN: u64 = 0x200;
const WIFI: u64 = 0x1_0000;
const VM_SWITCH: u64 = 0x100_0000;
const START: u64 = 0x4000_0000;
const END: u64 = 0x8000_0000;
const SEND: u64 = 0x1_0000_0000;
const RECEIVE: u64 = 0x2_0000_0000;

const T0: i64 = 133_500_000_000_000_000;

fn event(
    provider: Guid,
    id: u16,
    keywords: u64,
    payload: Vec<u8>,
    at: i64,
) -> EventRecord<'static> {
    EventRecord {
        header_type: HeaderType::EventHeader64,
        flags: 0,
        provider,
        descriptor: EventDescriptor {
            id,
            version: 0,
            channel: 16,
            level: 4,
            opcode: 0,
            task: 0,
            keywords,
        },
        hook_id: None,
        pid: 4,
        tid: 300 + id as u32 % 10,
        cpu: 0,
        timestamp: T0 + at,
        raw_timestamp: 0,
        kernel_time: 0,
        user_time: 0,
        activity_id: Guid::default(),
        pointer_size: 8,
        payload: Cow::Owned(payload),
        ext: Cow::Borrowed(&[]),
    }
}

fn u32s(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn utf16z(s: &str) -> Vec<u8> {
    s.encode_utf16()
        .chain([0])
        .flat_map(|u| u.to_le_bytes())
        .collect()
}

/// A 1001 fragment event's payload.
fn fragment(miniport: u32, lower: u32, data: &[u8]) -> Vec<u8> {
    let mut p = u32s(&[miniport, lower, data.len() as u32]);
    p.extend_from_slice(data);
    // GftFlowEntryId, GftOffloadInformation (newer builds).
    p.extend_from_slice(&[0; 16]);
    p
}

/// An Ethernet frame: MACs, ethertype, then `ip`.
fn ethernet(ethertype: u16, ip: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(ip);
    f
}

/// An IPv4 header claiming `total` bytes, UDP, 10.0.0.1 → 10.0.0.2, then `fill` bytes.
fn ipv4(total: u16, fill: usize) -> Vec<u8> {
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    h.extend(std::iter::repeat_n(0xab, fill));
    h
}

fn write(path: &Path) {
    let mut w = Writer::create(path, WriterOptions::new(T0)).unwrap();
    let mut put = |e: EventRecord<'_>| w.write_event(&e).unwrap();
    // 1. Truncated: the IPv4 header says 1000 bytes, 60 were captured.
    let truncated = ethernet(0x0800, &ipv4(1000, 26));
    put(event(
        NDIS,
        1001,
        ETHERNET | START | END | RECEIVE,
        fragment(11, 11, &truncated),
        100,
    ));
    // 2. Three fragments of one IPv6 packet (payload length 6) through a filter driver.
    let mut v6 = vec![0x60, 0, 0, 0, 0, 6, 17, 64];
    v6.extend_from_slice(&[0xfe; 32]);
    v6.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
    let whole = ethernet(0x86dd, &v6);
    let (a, rest) = whole.split_at(30);
    let (b, c) = rest.split_at(20);
    put(event(
        NDIS,
        1001,
        ETHERNET | START | SEND,
        fragment(5, 12, a),
        200,
    ));
    put(event(NDIS, 1001, ETHERNET | SEND, fragment(5, 12, b), 201));
    put(event(
        NDIS,
        1001,
        ETHERNET | END | SEND,
        fragment(5, 12, c),
        202,
    ));
    // 3. A start with no end, then a whole packet on the same interface.
    put(event(
        NDIS,
        1001,
        ETHERNET | START | RECEIVE,
        fragment(11, 11, &[0xee; 20]),
        300,
    ));
    let small = ethernet(0x0800, &ipv4(28, 8));
    put(event(
        NDIS,
        1001,
        ETHERNET | START | END | RECEIVE,
        fragment(11, 11, &small),
        301,
    ));
    // 4. Wi-Fi: the receive context, then a frame marked Protected.
    let mut ctx = vec![0x80, 1, 48, 0];
    ctx.extend_from_slice(&u32s(&[0, 7, 2437]));
    ctx.extend_from_slice(&1u16.to_le_bytes());
    ctx.extend_from_slice(&[0, 0]);
    ctx.extend_from_slice(&(-52i32).to_le_bytes());
    ctx.push(108);
    ctx.resize(48, 0);
    let mut meta = u32s(&[20, 20, ctx.len() as u32]);
    meta.extend_from_slice(&ctx);
    put(event(NDIS, 1002, WIFI | RECEIVE, meta, 400));
    let mut frame = vec![0x08, 0x41, 0, 0];
    frame.extend_from_slice(&[
        0x02, 0, 0, 0, 0, 0x0a, 0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0c,
    ]);
    frame.extend_from_slice(&[0, 0, 0xaa, 0xaa, 3, 0, 0, 0, 0x08, 0x00]);
    frame.extend_from_slice(&ipv4(28, 8));
    put(event(
        NDIS,
        1001,
        WIFI | START | END | RECEIVE,
        fragment(20, 20, &frame),
        401,
    ));
    // 5. Mobile broadband: a bare IPv4 packet.
    put(event(
        NDIS,
        1001,
        WWAN | START | END | SEND,
        fragment(30, 30, &ipv4(40, 20)),
        500,
    ));
    // 6. A virtual switch port's packet, VLAN 42 (priority 3) and an RSS hash in its OOB data.
    let mut vm = u32s(&[40, 40, 7]);
    for s in ["PORT-A", "vm1 nic", "Synthetic"] {
        vm.extend(utf16z(s));
    }
    vm.extend(u32s(&[1, 9]));
    for s in ["PORT-B", "vm2 nic", "Synthetic"] {
        vm.extend(utf16z(s));
    }
    let vframe = ethernet(0x0800, &ipv4(46, 26));
    vm.extend(u32s(&[vframe.len() as u32]));
    vm.extend_from_slice(&vframe);
    let mut oob = vec![0u8; 10 * 8];
    oob[4 * 8..4 * 8 + 4].copy_from_slice(&(42u32 << 4 | 3).to_le_bytes());
    oob[8 * 8..8 * 8 + 4].copy_from_slice(&0xdead_beefu32.to_le_bytes());
    vm.extend(u32s(&[oob.len() as u32]));
    vm.extend(oob);
    put(event(
        NDIS,
        1003,
        ETHERNET | VM_SWITCH | START | END | RECEIVE,
        vm,
        600,
    ));
    // 7. A frame inside an RRAS tunnel.
    let mut ras = utf16z("{6c1f0d5e-9d3b-4a6e-8f4c-2b7a1d3e5f60}");
    ras.extend(utf16z("alice"));
    let tunneled = ethernet(0x0800, &ipv4(36, 16));
    ras.extend(u32s(&[tunneled.len() as u32]));
    ras.extend_from_slice(&tunneled);
    put(event(RAS, 5001, 0x8000_0001_0000_0000, ras, 650));
    // 8. Wi-Fi metadata too short for a receive context; a fragment shorter than it says; a last
    // packet that never ends.
    let mut meta = u32s(&[20, 20, 4]);
    meta.extend_from_slice(&[0x80, 1, 4, 0]);
    put(event(NDIS, 1002, WIFI | RECEIVE, meta, 690));
    let mut short = u32s(&[11, 11, 5000]);
    short.extend_from_slice(&[0; 10]);
    put(event(
        NDIS,
        1001,
        ETHERNET | START | END | RECEIVE,
        short,
        700,
    ));
    put(event(
        NDIS,
        1001,
        ETHERNET | START | SEND,
        fragment(5, 12, a),
        800,
    ));
    w.finish().unwrap();
}

fn trace() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pcap-ndis");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("netsh.etl");
    write(&p);
    p
}

fn capture(etl: &Path) -> (Capture, PathBuf, String) {
    let out = etl.with_extension("pcapng");
    let (ok, stdout, err) = etwkit(&["pcap", etl.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(stdout.is_empty(), "{stdout}");
    (read(&out), out, err)
}

#[test]
fn netsh_capture_becomes_packets_per_interface() {
    let etl = trace();
    let (cap, out, err) = capture(&etl);
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            "etwkit: warning: 2 NDIS-PacketCapture packets were not written: their last fragment never came",
            "etwkit: warning: 2 NDIS-PacketCapture events were not written: their payload is shorter than their layout",
            &format!("etwkit: wrote 7 packets (0 dropped) on 6 interfaces to {}", out.display()),
        ]
    );
    let ifaces: Vec<(u16, &str, Option<&str>)> = cap
        .interfaces
        .iter()
        .map(|i| (i.link_type, i.name.as_str(), i.description.as_deref()))
        .collect();
    assert_eq!(
        ifaces,
        [
            (1, "eth:11:0", None),
            (1, "eth:12:0", Some("LWF over IfIndex 5")),
            (105, "wifi:20", None),
            (101, "mbb:30", None),
            (1, "vNIC:Synthetic:PORT-A:40:42", Some("VlanID=42")),
            (
                1,
                "Rras:0:{6c1f0d5e-9d3b-4a6e-8f4c-2b7a1d3e5f60}:alice",
                None
            ),
        ]
    );
    let p = &cap.packets;
    assert_eq!(p.len(), 7);
    let at = |i: usize| p[i].timestamp as i64 - (T0 - FILETIME_UNIX_EPOCH);
    let comment = |i: usize| p[i].comment.as_deref().unwrap();

    // 1: 60 of 1014 bytes, received.
    assert_eq!(
        (p[0].interface, p[0].data.len(), p[0].original_len),
        (0, 60, 1014)
    );
    assert_eq!((at(0), p[0].flags), (100, Some(1)));
    assert_eq!(comment(0), "pid 4 tid 301");
    // 2: the three fragments in order, at the last one's time, sent; IPv6 says 60 bytes.
    assert_eq!(
        (p[1].interface, p[1].data.len(), p[1].original_len),
        (1, 60, 60)
    );
    assert_eq!(&p[1].data[12..14], &[0x86, 0xdd]);
    assert_eq!(&p[1].data[54..], &[1, 2, 3, 4, 5, 6]);
    assert_eq!((at(1), p[1].flags), (202, Some(2)));
    // 3: only the whole packet.
    assert_eq!((p[2].interface, p[2].data.len(), at(2)), (0, 42, 301));
    // 4: the Protected flag cleared, the context in the comment.
    assert_eq!((p[3].interface, p[3].data[1], at(3)), (2, 0x01, 401));
    assert_eq!(
        comment(3),
        "pid 4 tid 301; Wi-Fi 802.11n 2437 MHz (channel 6), RSSI -52 dBm, 54 Mb/s, 1 MPDUs, receive flags 0x0"
    );
    // 5: a bare IP packet's original length is its IP length.
    assert_eq!(
        (p[4].interface, p[4].data.len(), p[4].original_len),
        (3, 40, 40)
    );
    assert_eq!(p[4].flags, Some(2));
    // 6: the virtual switch packet.
    assert_eq!((p[5].interface, p[5].data.len(), at(5)), (4, 60, 600));
    assert_eq!(
        comment(5),
        "pid 4 tid 303; vSwitch port 7 (PORT-A), NIC vm1 nic (Synthetic), 1 destinations, RSS hash deadbeef"
    );
    // 7: the tunnel's frame, sent.
    assert_eq!((p[6].interface, p[6].data.len(), at(6)), (5, 50, 650));
    assert_eq!(p[6].flags, Some(2));
    assert_eq!(
        comment(6),
        "pid 4 tid 301; RRAS routing domain {6c1f0d5e-9d3b-4a6e-8f4c-2b7a1d3e5f60}, user alice"
    );

    // tshark reads it without a remark and dissects every packet as what it is.
    if !have_tshark("the tshark half of netsh_capture_becomes_packets_per_interface") {
        return;
    }
    assert_eq!(
        tshark_fields(&out, &["frame.len", "frame.cap_len", "frame.protocols"]),
        [
            "1014;60;eth:ethertype:ip:udp:data",
            "60;60;eth:ethertype:ipv6:udp",
            "42;42;eth:ethertype:ip:udp",
            "60;60;wlan:llc:ip:udp",
            "40;40;raw:ip:udp:data",
            "60;60;eth:ethertype:ip:udp:data",
            "50;50;eth:ethertype:ip:udp:data",
        ]
    );
}
