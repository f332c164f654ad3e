//! Microsoft-Windows-NDIS-PacketCapture ("ndiscap", what `netsh trace start capture=yes` enables)
//! as pcapng packets.
//!
//! The provider logs each packet as one or more fragment events (1001; 1003 for a Hyper-V virtual
//! switch port) whose keywords say the medium (Ethernet, native 802.11, mobile broadband with bare
//! IP packets), the direction and where a packet starts and ends; a metadata event (1002) may
//! carry the Wi-Fi receive context of the packet that follows on its interface. The events are
//! read from their payloads (layouts below), not from decoded properties: a `netsh trace` file
//! carries no manifest, and the layouts have not changed since Windows 7.
//!
//! - 1001: `MiniportIfIndex u32, LowerIfIndex u32, FragmentSize u32, Fragment[FragmentSize]`
//!   (newer builds append `GftFlowEntryId u64, GftOffloadInformation u64`);
//! - 1002: `MiniportIfIndex u32, LowerIfIndex u32, MetadataSize u32, Metadata[MetadataSize]`
//!   (for 802.11, a `DOT11_EXTSTA_RECV_CONTEXT`);
//! - 1003: `MiniportIfIndex u32, LowerIfIndex u32, SourcePortId u32, SourcePortName,
//!   SourceNicName, SourceNicType` (UTF-16, NUL-terminated), `DestinationCount u32`, per
//!   destination `PortId u32` and three such strings, `FragmentSize u32, Fragment,
//!   OOBDataSize u32, OOBData` (the packet's `NET_BUFFER_LIST` info slots, pointer-sized: slot 4
//!   holds the 802.1Q tag, slot 8 the RSS hash).
//!
//! Microsoft-Windows-Ras-NdisWanPacketCapture logs the packets inside RRAS (VPN) tunnels, one
//! Ethernet frame per event (5001, 5002: `RoutingDomainID, RRASUserName` as UTF-16 strings,
//! `FragmentSize u32, Fragment`).
//!
//! Where the trace carries the machine's interface list (KernelTraceControl's SysConfig
//! NetworkInterface events, in traces merged with the kernel's configuration rundown), each
//! interface is described by its adapter and alias and carries its hardware address.
//!
//! One interface per (lower interface index, link type), for a virtual switch per source port
//! and VLAN, for a tunnel per routing domain and user, named as Microsoft's etl2pcapng names them
//! (`eth:IFINDEX:VLAN`, `wifi:IFINDEX`, `mbb:IFINDEX`, `vNIC:TYPE:PORT:IFINDEX:VLAN`,
//! `Rras:0:DOMAIN:USER`) so captures converted by either tool compare.
//! Unlike etl2pcapng, a bare IP packet's original length is its IP length (no Ethernet header is
//! added to it), and a packet whose end never came is counted, not written.

use std::collections::HashMap;
use std::io::{self, Write};

use super::{linktype, Addresses, Direction, Packet, PcapngWriter};
use crate::decode::{DecodedEvent, Value};
use crate::event::EventRecord;
use crate::guid::Guid;

/// Microsoft-Windows-NDIS-PacketCapture.
pub const NDIS_PROVIDER: Guid = Guid::from_str_const("2ed6006e-4729-4609-b423-3ee7bcd678ef");
/// Microsoft-Windows-Ras-NdisWanPacketCapture (the packets inside RRAS tunnels, as Ethernet frames).
pub const RAS_NDISWAN_PROVIDER: Guid = Guid::from_str_const("d84521f7-2235-4237-a7c0-14e3a9676286");
pub const NDIS_FRAGMENT: u16 = 1001;
pub const NDIS_METADATA: u16 = 1002;
pub const NDIS_VMSWITCH_FRAGMENT: u16 = 1003;
/// KernelTraceControl's SysConfig class (the configuration rundown a merged trace carries) and its
/// NetworkInterface event type: one per interface (InterfaceIndex, Alias, Description,
/// PhysicalAddress ...).
pub const SYSCONFIG_EX: Guid = Guid::from_str_const("9b79ee91-b5fd-41c0-a243-4248e266e9d0");
pub const SYSCONFIG_NETWORK_INTERFACE: u8 = 36;

/// The Ras-NdisWan provider's packet events: `RoutingDomainID, RRASUserName` (UTF-16,
/// NUL-terminated), `FragmentSize u32, Fragment` (an Ethernet frame); the send keyword marks the
/// sent ones.
pub const RAS_PACKETS: [u16; 2] = [5001, 5002];

/// The provider's keywords that matter here.
pub mod keyword {
    pub const ETHERNET_8023: u64 = 0x1;
    pub const WIRELESS_WAN: u64 = 0x200;
    pub const NATIVE_802_11: u64 = 0x1_0000;
    pub const VM_SWITCH: u64 = 0x100_0000;
    pub const PACKET_START: u64 = 0x4000_0000;
    pub const PACKET_END: u64 = 0x8000_0000;
    pub const SEND: u64 = 0x1_0000_0000;
    pub const RECEIVE: u64 = 0x2_0000_0000;
}

/// A packet's fragments are given up (counted as incomplete) past this many bytes: no link's
/// packet is larger, and a damaged trace's unmarked fragments must not pile up without end.
const MAX_PACKET: usize = 1 << 20;

/// `NET_BUFFER_LIST_INFO` slots in a virtual switch fragment's OOB data.
const OOB_IEEE8021Q: usize = 4;
const OOB_HASH_VALUE: usize = 8;

/// What an NDIS-PacketCapture conversion saw, beyond the packets written.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NdisSummary {
    /// Packets written.
    pub packets: u64,
    /// Fragment events read (a packet is one or more).
    pub fragments: u64,
    pub interfaces: u32,
    /// Packets carrying the Wi-Fi receive context of a metadata event in their comment.
    pub with_metadata: u64,
    /// Packets whose end never came (a new packet started on the interface, or the trace ended):
    /// not written.
    pub incomplete: u64,
    /// Events whose payload is shorter than its layout says: not written.
    pub malformed: u64,
    /// Of `packets`, those of Microsoft-Windows-Ras-NdisWanPacketCapture.
    pub ras_packets: u64,
}

/// Little-endian reads over a payload; `None` past its end.
struct Cur<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cur<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn u32(&mut self) -> Option<u32> {
        self.bytes(4)
            .map(|s| u32::from_le_bytes(s.try_into().unwrap()))
    }

    /// A NUL-terminated UTF-16 string.
    fn utf16z(&mut self) -> Option<String> {
        let rest = self.b.get(self.at..)?;
        let units: Vec<u16> = rest
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .take_while(|&u| u != 0)
            .collect();
        // The terminator must be there.
        self.bytes(units.len() * 2 + 2)?;
        Some(String::from_utf16_lossy(&units))
    }
}

/// The virtual switch port a 1003 fragment came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct VmSource {
    port_id: u32,
    port_name: String,
    nic_name: String,
    nic_type: String,
    destinations: u32,
    vlan: u16,
    hash: u32,
}

/// One fragment event, read.
struct Fragment<'a> {
    miniport: u32,
    lower: u32,
    data: &'a [u8],
    vm: Option<VmSource>,
}

fn fragment(id: u16, payload: &[u8], pointer_size: u8) -> Option<Fragment<'_>> {
    let mut c = Cur { b: payload, at: 0 };
    let (miniport, lower) = (c.u32()?, c.u32()?);
    if id == NDIS_FRAGMENT {
        let n = c.u32()? as usize;
        return Some(Fragment {
            miniport,
            lower,
            data: c.bytes(n)?,
            vm: None,
        });
    }
    let mut vm = VmSource {
        port_id: c.u32()?,
        port_name: c.utf16z()?,
        nic_name: c.utf16z()?,
        nic_type: c.utf16z()?,
        destinations: c.u32()?,
        ..VmSource::default()
    };
    for _ in 0..vm.destinations {
        c.u32()?;
        for _ in 0..3 {
            c.utf16z()?;
        }
    }
    let n = c.u32()? as usize;
    let data = c.bytes(n)?;
    // The OOB data is optional to us: without it the packet has no VLAN tag or hash.
    if let Some(oob) = c.u32().and_then(|n| c.bytes(n as usize)) {
        let slot = |i: usize| {
            let w = pointer_size.max(4) as usize;
            oob.get(i * w..i * w + 4)
                .map(|s| u32::from_le_bytes(s.try_into().unwrap()))
        };
        // 802.1Q tag: priority 3 bits, CFI 1 bit, VLAN id 12 bits.
        vm.vlan = slot(OOB_IEEE8021Q).map_or(0, |v| ((v >> 4) & 0xfff) as u16);
        vm.hash = slot(OOB_HASH_VALUE).unwrap_or(0);
    }
    Some(Fragment {
        miniport,
        lower,
        data,
        vm: Some(vm),
    })
}

/// A Wi-Fi receive context (`DOT11_EXTSTA_RECV_CONTEXT`, revision 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WifiContext {
    receive_flags: u32,
    phy: u32,
    center_mhz: u32,
    mpdus: u16,
    rssi: i32,
    /// In units of 500 kb/s.
    rate: u8,
}

fn wifi_context(payload: &[u8]) -> Option<WifiContext> {
    let mut c = Cur { b: payload, at: 8 };
    let n = c.u32()? as usize;
    let m = c.bytes(n)?;
    let u32_at = |o: usize| {
        m.get(o..o + 4)
            .map(|s| u32::from_le_bytes(s.try_into().unwrap()))
    };
    Some(WifiContext {
        receive_flags: u32_at(4)?,
        phy: u32_at(8)?,
        center_mhz: u32_at(12)?,
        mpdus: u16::from_le_bytes(m.get(16..18)?.try_into().unwrap()),
        rssi: u32_at(20)? as i32,
        rate: *m.get(24)?,
    })
}

/// `DOT11_PHY_TYPE` names (windot11.h), by value.
const PHY_TYPES: [&str; 11] = [
    "unknown PHY",
    "FHSS",
    "DSSS",
    "IR baseband",
    "802.11a",
    "802.11b",
    "802.11g",
    "802.11n",
    "802.11ac",
    "802.11ad",
    "802.11ax",
];

/// The channel number of a centre frequency (2.4, 5 and 6 GHz bands).
fn channel(mhz: u32) -> Option<u32> {
    match mhz {
        2484 => Some(14),
        2412..=2472 => Some((mhz - 2407) / 5),
        5955..=7115 => Some((mhz - 5950) / 5),
        5000..=5925 => Some((mhz - 5000) / 5),
        _ => None,
    }
}

impl std::fmt::Display for WifiContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let phy = PHY_TYPES.get(self.phy as usize).copied().unwrap_or("PHY");
        write!(f, "Wi-Fi {phy} {} MHz", self.center_mhz)?;
        if let Some(ch) = channel(self.center_mhz) {
            write!(f, " (channel {ch})")?;
        }
        write!(
            f,
            ", RSSI {} dBm, {}{} Mb/s, {} MPDUs, receive flags 0x{:x}",
            self.rssi,
            self.rate / 2,
            if self.rate % 2 == 1 { ".5" } else { "" },
            self.mpdus,
            self.receive_flags
        )
    }
}

/// Where a packet's interface is: lower interface index, link type, for a virtual switch the
/// source port and VLAN, for an RRAS tunnel its routing domain and user.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct IfKey {
    lower: u32,
    link: u16,
    vm: Option<(u32, u16)>,
    ras: Option<(String, String)>,
}

/// A packet whose fragments have begun.
struct Pending {
    data: Vec<u8>,
    key: IfKey,
}

/// An interface as the trace's configuration rundown describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Adapter {
    alias: String,
    description: String,
    mac: Option<[u8; 6]>,
}

/// Turns NDIS-PacketCapture events, in time order, into pcapng packets.
#[derive(Default)]
pub struct NdisPackets {
    interfaces: HashMap<IfKey, u32>,
    /// Interface index → its adapter, from SysConfig NetworkInterface events.
    adapters: HashMap<u32, Adapter>,
    /// Fragments waiting for their packet's end, by lower interface index.
    pending: HashMap<u32, Pending>,
    /// A metadata event's Wi-Fi context, for the next packet of its lower interface.
    wifi: HashMap<u32, WifiContext>,
    pub summary: NdisSummary,
}

/// The direction a packet event's keywords say.
fn direction(keywords: u64) -> Direction {
    if keywords & keyword::SEND != 0 {
        Direction::Outbound
    } else if keywords & keyword::RECEIVE != 0 {
        Direction::Inbound
    } else {
        Direction::Unknown
    }
}

/// The link type a fragment's keywords say.
fn link_type(keywords: u64) -> u16 {
    if keywords & keyword::NATIVE_802_11 != 0 {
        linktype::IEEE802_11
    } else if keywords & keyword::WIRELESS_WAN != 0 {
        linktype::RAW
    } else {
        linktype::ETHERNET
    }
}

/// The length a packet had before the capture cut it, from its IPv4 or IPv6 header (Ethernet and
/// bare IP packets); its captured length where that says nothing or says less.
fn original_len(link: u16, data: &[u8]) -> u32 {
    let ip = match link {
        // The IP header after the Ethernet header, or after an 802.1Q tag.
        linktype::ETHERNET => match (data.get(12..14), data.get(16..18)) {
            (Some([0x08, 0x00] | [0x86, 0xdd]), _) => Some((14, &data[14..])),
            (Some([0x81, 0x00]), Some([0x08, 0x00] | [0x86, 0xdd])) => Some((18, &data[18..])),
            _ => None,
        },
        linktype::RAW => Some((0, data)),
        _ => None,
    };
    let from_ip = ip.and_then(|(link_len, ip)| match ip.first().map(|b| b >> 4) {
        Some(4) => ip
            .get(2..4)
            .map(|l| u16::from_be_bytes([l[0], l[1]]) as u32 + link_len),
        Some(6) => ip
            .get(4..6)
            .map(|l| u16::from_be_bytes([l[0], l[1]]) as u32 + 40 + link_len),
        _ => None,
    });
    // A large-send packet's IP length is 0: its captured length stands.
    from_ip.unwrap_or(0).max(data.len() as u32)
}

impl NdisPackets {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `rec` describes one of the machine's interfaces (a SysConfig NetworkInterface
    /// event): what [`NdisPackets::adapter`] learns from. The rundown may come after the packets:
    /// a converter passes over these first.
    pub fn is_adapter(rec: &EventRecord<'_>) -> bool {
        rec.provider == SYSCONFIG_EX
            && !rec.header_type.is_event_header()
            && rec.descriptor.opcode == SYSCONFIG_NETWORK_INTERFACE
    }

    /// Learns an interface's alias, adapter description and hardware address from a decoded
    /// SysConfig NetworkInterface event; interfaces made afterwards carry them.
    pub fn adapter(&mut self, rec: &EventRecord<'_>, d: &DecodedEvent) {
        if !Self::is_adapter(rec) {
            return;
        }
        let p = &d.properties;
        let Some(index) = p.get("InterfaceIndex").and_then(Value::as_u64) else {
            return;
        };
        let text = |name: &str| match p.get(name) {
            Some(Value::String(s)) => s.clone(),
            _ => String::new(),
        };
        let len = p.get("PhysicalAddressLength").and_then(Value::as_u64);
        let mac = match p.get("PhysicalAddress") {
            Some(Value::Binary(b)) if len == Some(6) && b.len() >= 6 => {
                let m: [u8; 6] = b[..6].try_into().unwrap();
                (m != [0; 6]).then_some(m)
            }
            _ => None,
        };
        self.adapters.entry(index as u32).or_insert(Adapter {
            alias: text("Alias"),
            description: text("Description"),
            mac,
        });
    }

    /// Looks at one event; writes a packet when it ends one.
    pub fn event<W: Write>(
        &mut self,
        rec: &EventRecord<'_>,
        w: &mut PcapngWriter<W>,
    ) -> io::Result<()> {
        if !rec.header_type.is_event_header() {
            return Ok(());
        }
        if rec.provider == RAS_NDISWAN_PROVIDER {
            if RAS_PACKETS.contains(&rec.descriptor.id) {
                return self.ras_packet(rec, w);
            }
            return Ok(());
        }
        if rec.provider != NDIS_PROVIDER {
            return Ok(());
        }
        let id = rec.descriptor.id;
        match id {
            NDIS_METADATA => {
                let lower = Cur {
                    b: &rec.payload,
                    at: 4,
                }
                .u32();
                // Only an 802.11 interface's metadata is a receive context this reads.
                let wifi = rec.descriptor.keywords & keyword::NATIVE_802_11 != 0;
                match (lower, wifi.then(|| wifi_context(&rec.payload))) {
                    (Some(lower), Some(Some(ctx))) => {
                        self.wifi.insert(lower, ctx);
                    }
                    (Some(_), None) => {}
                    (None, _) | (_, Some(None)) => self.summary.malformed += 1,
                }
                Ok(())
            }
            NDIS_FRAGMENT | NDIS_VMSWITCH_FRAGMENT => self.fragment(rec, w),
            _ => Ok(()),
        }
    }

    fn fragment<W: Write>(
        &mut self,
        rec: &EventRecord<'_>,
        w: &mut PcapngWriter<W>,
    ) -> io::Result<()> {
        let Some(f) = fragment(rec.descriptor.id, &rec.payload, rec.pointer_size) else {
            self.summary.malformed += 1;
            return Ok(());
        };
        self.summary.fragments += 1;
        let kw = rec.descriptor.keywords;
        let key = IfKey {
            lower: f.lower,
            link: link_type(kw),
            vm: f.vm.as_ref().map(|v| (v.port_id, v.vlan)),
            ras: None,
        };
        // A packet is its fragments from one marked start to one marked end (since Windows 8.1
        // one event marked both); a start abandons what was pending on its interface.
        let starts = kw & keyword::PACKET_START != 0;
        let ends = kw & keyword::PACKET_END != 0;
        let mut data = match self.pending.remove(&f.lower) {
            Some(p) if !starts && p.key == key => p.data,
            Some(_) => {
                self.summary.incomplete += 1;
                Vec::new()
            }
            None => Vec::new(),
        };
        data.extend_from_slice(f.data);
        if data.len() > MAX_PACKET {
            self.summary.incomplete += 1;
            return Ok(());
        }
        if !ends {
            self.pending.insert(f.lower, Pending { data, key });
            return Ok(());
        }
        let iface = self.interface(&key, f.miniport, f.vm.as_ref(), w)?;
        if key.link == linktype::IEEE802_11 {
            // ndiscap logs 802.11 frames decrypted: a set Protected flag would make readers try
            // to decrypt them.
            if let Some(flags) = data.get_mut(1) {
                *flags &= !0x40;
            }
        }
        let mut comment = format!("pid {} tid {}", rec.pid, rec.tid);
        if let Some(ctx) = self.wifi.remove(&f.lower) {
            comment.push_str(&format!("; {ctx}"));
            self.summary.with_metadata += 1;
        }
        if let Some(v) = &f.vm {
            comment.push_str(&format!(
                "; vSwitch port {} ({}), NIC {} ({}), {} destinations, RSS hash {:08x}",
                v.port_id, v.port_name, v.nic_name, v.nic_type, v.destinations, v.hash
            ));
        }
        w.packet(&Packet {
            interface: iface,
            timestamp: rec.timestamp,
            data: &data,
            original_len: original_len(key.link, &data),
            direction: direction(kw),
            id: None,
            comment: Some(comment),
        })?;
        self.summary.packets += 1;
        Ok(())
    }

    /// The pcapng interface of `key`, described at first sight.
    fn interface<W: Write>(
        &mut self,
        key: &IfKey,
        miniport: u32,
        vm: Option<&VmSource>,
        w: &mut PcapngWriter<W>,
    ) -> io::Result<u32> {
        if let Some(&i) = self.interfaces.get(key) {
            return Ok(i);
        }
        let adapter = self.adapters.get(&key.lower);
        let (name, desc) = interface_name(key, miniport, vm, adapter);
        let addresses = Addresses {
            mac: adapter.and_then(|a| a.mac),
            ..Addresses::default()
        };
        let i = w.interface_at(key.link, &name, desc.as_deref(), &addresses)?;
        self.interfaces.insert(key.clone(), i);
        self.summary.interfaces += 1;
        Ok(i)
    }

    /// A Ras-NdisWan packet event: one whole Ethernet frame.
    fn ras_packet<W: Write>(
        &mut self,
        rec: &EventRecord<'_>,
        w: &mut PcapngWriter<W>,
    ) -> io::Result<()> {
        let mut c = Cur {
            b: &rec.payload,
            at: 0,
        };
        let read = (|| {
            let (domain, user) = (c.utf16z()?, c.utf16z()?);
            let n = c.u32()? as usize;
            Some((domain, user, c.bytes(n)?))
        })();
        let Some((domain, user, data)) = read else {
            self.summary.malformed += 1;
            return Ok(());
        };
        let key = IfKey {
            lower: 0,
            link: linktype::ETHERNET,
            vm: None,
            ras: Some((domain, user)),
        };
        let iface = self.interface(&key, 0, None, w)?;
        let (domain, user) = key.ras.as_ref().unwrap();
        w.packet(&Packet {
            interface: iface,
            timestamp: rec.timestamp,
            data,
            original_len: original_len(linktype::ETHERNET, data),
            direction: direction(rec.descriptor.keywords),
            id: None,
            comment: Some(format!(
                "pid {} tid {}; RRAS routing domain {domain}, user {user}",
                rec.pid, rec.tid
            )),
        })?;
        self.summary.packets += 1;
        self.summary.ras_packets += 1;
        Ok(())
    }

    /// Ends the conversion: packets still waiting for their end are counted as incomplete.
    pub fn finish(&mut self) {
        self.summary.incomplete += self.pending.drain().count() as u64;
    }
}

/// An interface's name, as etl2pcapng gives it, and description: the adapter and its alias
/// where the trace names them, then what etl2pcapng says.
fn interface_name(
    key: &IfKey,
    miniport: u32,
    vm: Option<&VmSource>,
    adapter: Option<&Adapter>,
) -> (String, Option<String>) {
    let vlan = key.vm.map_or(0, |(_, v)| v);
    let name = match (key.link, vm) {
        _ if key.ras.is_some() => {
            let (domain, user) = key.ras.as_ref().unwrap();
            format!("Rras:{}:{domain}:{user}", key.lower)
        }
        (linktype::IEEE802_11, _) => format!("wifi:{}", key.lower),
        (linktype::RAW, _) => format!("mbb:{}", key.lower),
        (_, Some(v)) => format!("vNIC:{}:{}:{}:{}", v.nic_type, v.port_name, key.lower, vlan),
        _ => format!("eth:{}:{}", key.lower, vlan),
    };
    let mut desc = Vec::new();
    if let Some(a) = adapter.filter(|a| !a.description.is_empty()) {
        desc.push(if a.alias.is_empty() {
            a.description.clone()
        } else {
            format!("{} ({})", a.description, a.alias)
        });
    }
    if miniport != key.lower {
        desc.push(format!("LWF over IfIndex {miniport}"));
    }
    if vlan != 0 {
        desc.push(format!("VlanID={vlan}"));
    }
    (name, (!desc.is_empty()).then(|| desc.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_of_the_three_bands() {
        assert_eq!(channel(2412), Some(1));
        assert_eq!(channel(2437), Some(6));
        assert_eq!(channel(2484), Some(14));
        assert_eq!(channel(5180), Some(36));
        assert_eq!(channel(5825), Some(165));
        assert_eq!(channel(5955), Some(1), "6 GHz");
        assert_eq!(channel(900), None);
    }

    #[test]
    fn original_length_from_the_ip_header() {
        let mut v6 = vec![0x60, 0, 0, 0, 0x05, 0xdc, 6, 64];
        v6.resize(60, 0);
        assert_eq!(original_len(linktype::RAW, &v6), 1500 + 40);
        let mut eth = vec![0; 12];
        eth.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0x02, 0x00]);
        eth.resize(40, 0);
        assert_eq!(original_len(linktype::ETHERNET, &eth), 512 + 14);
        // Behind an 802.1Q tag.
        let mut tagged = eth.clone();
        tagged.splice(12..12, [0x81, 0x00, 0x00, 0x2a]);
        assert_eq!(original_len(linktype::ETHERNET, &tagged), 512 + 18);
        // Large send: the IP length is not filled in.
        eth[16..18].copy_from_slice(&[0, 0]);
        assert_eq!(original_len(linktype::ETHERNET, &eth), 40);
        // ARP, 802.11: nothing to infer.
        eth[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(original_len(linktype::ETHERNET, &eth), 40);
        assert_eq!(original_len(linktype::IEEE802_11, &v6), 60);
    }

    /// Fragments that never end are given up once they exceed any packet's size.
    #[test]
    fn endless_fragments_are_given_up() {
        let mut w = PcapngWriter::new(Vec::new(), &Default::default()).unwrap();
        let mut n = NdisPackets::new();
        let mut payload: Vec<u8> = [1u32, 1, 0x1_0000]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        payload.resize(12 + 0x1_0000, 0);
        let mut rec = EventRecord {
            header_type: crate::event::HeaderType::EventHeader64,
            flags: 0,
            provider: NDIS_PROVIDER,
            descriptor: crate::event::EventDescriptor::default(),
            hook_id: None,
            pid: 4,
            tid: 8,
            cpu: 0,
            timestamp: 0,
            raw_timestamp: 0,
            kernel_time: 0,
            user_time: 0,
            activity_id: Guid::default(),
            pointer_size: 8,
            payload: std::borrow::Cow::Owned(payload),
            ext: std::borrow::Cow::Borrowed(&[]),
        };
        rec.descriptor.id = NDIS_FRAGMENT;
        for i in 0..40 {
            rec.descriptor.keywords = if i == 0 { keyword::PACKET_START } else { 0 };
            n.event(&rec, &mut w).unwrap();
        }
        // 16 fragments fill 1 MiB; the 17th gives the packet up, the next 16 pile up again, the
        // 34th gives that up; 6 wait at the end.
        assert_eq!(n.summary.incomplete, 2);
        n.finish();
        assert_eq!((n.summary.incomplete, n.summary.packets), (3, 0));
        assert_eq!(n.summary.fragments, 40);
    }

    /// A 32-bit logger's virtual switch fragment: OOB slots are 4 bytes wide.
    #[test]
    fn vm_switch_fragment_of_a_32_bit_logger() {
        let mut p: Vec<u8> = [3u32, 3, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
        for s in ["P", "N", "T"] {
            p.extend(s.encode_utf16().chain([0]).flat_map(|u| u.to_le_bytes()));
        }
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&2u32.to_le_bytes());
        p.extend_from_slice(&[0xaa, 0xbb]);
        let mut oob = vec![0u8; 40];
        oob[16..20].copy_from_slice(&(5u32 << 4).to_le_bytes());
        oob[32..36].copy_from_slice(&0x1234u32.to_le_bytes());
        p.extend_from_slice(&(oob.len() as u32).to_le_bytes());
        p.extend_from_slice(&oob);
        let f = fragment(NDIS_VMSWITCH_FRAGMENT, &p, 4).unwrap();
        assert_eq!(f.data, [0xaa, 0xbb]);
        let vm = f.vm.unwrap();
        assert_eq!((vm.port_id, vm.vlan, vm.hash), (7, 5, 0x1234));
        assert_eq!((vm.port_name.as_str(), vm.nic_name.as_str()), ("P", "N"));
        // Cut inside a name: not read.
        assert!(fragment(NDIS_VMSWITCH_FRAGMENT, &p[..15], 4).is_none());
    }
}
