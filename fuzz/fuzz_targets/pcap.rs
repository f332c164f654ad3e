//! Fuzzes the packet-capture converters' payload readers: NDIS-PacketCapture fragments (1001),
//! Wi-Fi metadata (1002), virtual switch fragments (1003, both pointer sizes) and
//! Ras-NdisWanPacketCapture packets, in any order, with any keywords. Any payload must become a
//! packet, a pending fragment or a counted malformed event, never a panic, hang or unbounded
//! allocation, and every block written must be well formed.
//! Run: `cargo +nightly fuzz run pcap -- -max_len=65536`.
#![no_main]

use std::borrow::Cow;

use etwkit::event::{EventDescriptor, EventRecord, HeaderType};
use etwkit::export::pcapng::ndis::{NDIS_PROVIDER, RAS_NDISWAN_PROVIDER};
use etwkit::export::pcapng::{NdisPackets, PcapngWriter, SectionInfo};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    let mut n = NdisPackets::new();
    // Events: a 12-byte head (event kind, pointer size, keywords' high and low bytes, payload
    // length u16, 6 bytes of keywords) and the payload.
    let mut at = 0;
    while at + 12 <= data.len() {
        let h = &data[at..at + 12];
        let len = u16::from_le_bytes([h[4], h[5]]) as usize;
        let payload = &data[at + 12..(at + 12 + len).min(data.len())];
        at += 12 + payload.len();
        let (provider, id) = match h[0] % 5 {
            0 => (NDIS_PROVIDER, 1001),
            1 => (NDIS_PROVIDER, 1002),
            2 => (NDIS_PROVIDER, 1003),
            3 => (RAS_NDISWAN_PROVIDER, 5001),
            _ => (NDIS_PROVIDER, 1000 + h[0] as u16),
        };
        let mut kw = [0u8; 8];
        kw[..2].copy_from_slice(&h[2..4]);
        kw[2..8].copy_from_slice(&h[6..12]);
        let rec = EventRecord {
            header_type: HeaderType::EventHeader64,
            flags: 0,
            provider,
            descriptor: EventDescriptor {
                id,
                keywords: u64::from_le_bytes(kw),
                ..EventDescriptor::default()
            },
            hook_id: None,
            pid: 1,
            tid: 2,
            cpu: 0,
            timestamp: at as i64,
            raw_timestamp: 0,
            kernel_time: 0,
            user_time: 0,
            activity_id: Default::default(),
            pointer_size: if h[1] & 1 == 0 { 8 } else { 4 },
            payload: Cow::Borrowed(payload),
            ext: Cow::Borrowed(&[]),
        };
        n.event(&rec, &mut w).unwrap();
    }
    n.finish();
    let s = &n.summary;
    assert_eq!(w.packets(), s.packets);
    let out = w.finish().unwrap();
    // Every block: type, total length (a multiple of 4), body, the same length again.
    let mut off = 0;
    while off < out.len() {
        let len = u32::from_le_bytes(out[off + 4..off + 8].try_into().unwrap()) as usize;
        assert!(len >= 12 && len % 4 == 0 && off + len <= out.len());
        assert_eq!(
            u32::from_le_bytes(out[off + len - 4..off + len].try_into().unwrap()) as usize,
            len
        );
        off += len;
    }
});
