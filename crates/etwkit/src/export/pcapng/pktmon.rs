//! Microsoft-Windows-PktMon packet events (160 packet, 170 dropped packet) as pcapng packets: one
//! interface per (capture component, link type), the component named from PktMon's component events
//! (20) and given the addresses its address events name (65 IPv4, 66 IPv6, 70 hardware); the
//! packet's group id (the same for every component that saw it) as `epb_packetid`; drop reason
//! and location, component, edge and filter as the packet's comment.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::IpAddr;

use super::{linktype, Addresses, Direction, Packet, PcapngWriter};
use crate::decode::{DecodedEvent, Properties, Value};
use crate::event::EventRecord;
use crate::guid::Guid;

/// Microsoft-Windows-PktMon.
pub const PKTMON_PROVIDER: Guid = Guid::from_str_const("4d4f80d9-c8bd-4d73-bb5b-19c90402c5ac");
/// PktMon's packet event and its dropped-packet event (same layout).
pub const PKTMON_PACKET: u16 = 160;
pub const PKTMON_DROP: u16 = 170;
/// PktMon's component description event (Id, Type, Name, Description).
pub const PKTMON_COMPONENT: u16 = 20;
/// A component's IPv4 and IPv6 address (ComponentId, Type, IpAddress) and hardware address
/// (ComponentId, Type, Size, Value).
pub const PKTMON_COMPONENT_IPV4: u16 = 65;
pub const PKTMON_COMPONENT_IPV6: u16 = 66;
pub const PKTMON_COMPONENT_HW_ADDRESS: u16 = 70;

/// What a PktMon export saw, beyond the packets written.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PktMonSummary {
    pub packets: u64,
    pub dropped_packets: u64,
    pub interfaces: u32,
    /// Packet events whose packet type has no link type here (not written), by type name.
    pub unsupported_types: HashMap<String, u64>,
    /// Packet events that could not be decoded (no Payload).
    pub undecodable: u64,
}

/// Turns decoded PktMon events, in time order, into pcapng packets.
#[derive(Default)]
pub struct PktMonPackets {
    /// Component id → (name, description), from component events.
    components: HashMap<u64, (String, String)>,
    /// Component id → its addresses, from address events.
    addresses: HashMap<u64, Addresses>,
    /// (component id, link type) → interface index.
    interfaces: HashMap<(u64, u16), u32>,
    pub summary: PktMonSummary,
}

fn prop<'p>(p: &'p Properties, name: &str) -> Option<&'p Value> {
    p.get(name)
}

fn num(p: &Properties, name: &str) -> Option<u64> {
    prop(p, name).and_then(Value::as_u64)
}

/// A mapped value's name, or the number.
fn named(p: &Properties, name: &str) -> Option<String> {
    prop(p, name).map(|v| match v.as_str() {
        Some(s) => s.to_string(),
        None => v.as_u64().map(|n| n.to_string()).unwrap_or_default(),
    })
}

/// The pcapng link type of a PktMon packet type (by its map name, else its number).
fn pktmon_link_type(p: &Properties) -> Option<u16> {
    let v = prop(p, "PacketType")?;
    let by_name = v.as_str().map(|s| s.to_ascii_lowercase());
    match (by_name.as_deref(), v.as_u64()) {
        (Some("ethernet"), _) | (None, Some(1)) => Some(linktype::ETHERNET),
        (Some("wifi"), _) | (None, Some(2)) => Some(linktype::IEEE802_11),
        (Some("ip"), _) | (None, Some(3)) => Some(linktype::RAW),
        _ => None,
    }
}

impl PktMonPackets {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `rec` describes a capture component (its name or an address): what
    /// [`PktMonPackets::component`] learns from. PktMon logs its components when the capture
    /// stops, after the packets: a converter passes over these first (they are few), then over the
    /// packets.
    pub fn is_component(rec: &EventRecord<'_>) -> bool {
        rec.provider == PKTMON_PROVIDER
            && rec.header_type.is_event_header()
            && matches!(
                rec.descriptor.id,
                PKTMON_COMPONENT
                    | PKTMON_COMPONENT_IPV4
                    | PKTMON_COMPONENT_IPV6
                    | PKTMON_COMPONENT_HW_ADDRESS
            )
    }

    /// Learns a component's name, description or address from a decoded component event (see
    /// [`PktMonPackets::is_component`]); interfaces created afterwards carry them.
    pub fn component(&mut self, rec: &EventRecord<'_>, d: &DecodedEvent) {
        if !Self::is_component(rec) {
            return;
        }
        let p = &d.properties;
        if rec.descriptor.id == PKTMON_COMPONENT {
            if let Some(id) = num(p, "Id") {
                let name = named(p, "Name").unwrap_or_default();
                let desc = named(p, "Description").unwrap_or_default();
                self.components.entry(id).or_insert((name, desc));
            }
        } else if let Some(id) = num(p, "ComponentId") {
            self.address(id, p);
        }
    }

    /// Looks at one decoded event; writes a packet when it is one (and learns from a component
    /// event, for the interfaces made after it).
    pub fn event<W: Write>(
        &mut self,
        rec: &EventRecord<'_>,
        d: &DecodedEvent,
        w: &mut PcapngWriter<W>,
    ) -> io::Result<()> {
        if rec.provider != PKTMON_PROVIDER || !rec.header_type.is_event_header() {
            return Ok(());
        }
        match rec.descriptor.id {
            PKTMON_PACKET | PKTMON_DROP => self.packet(rec, &d.properties, w),
            _ => {
                self.component(rec, d);
                Ok(())
            }
        }
    }

    /// Keeps an address event's address for its component (each address once).
    fn address(&mut self, id: u64, p: &Properties) {
        let a = self.addresses.entry(id).or_default();
        let ip = match prop(p, "IpAddress") {
            Some(Value::Ipv4(v)) => Some(IpAddr::V4(*v)),
            Some(Value::Ipv6(v)) => Some(IpAddr::V6(*v)),
            Some(Value::String(s)) => s.parse().ok(),
            _ => None,
        };
        match ip {
            Some(IpAddr::V4(v)) if !a.ipv4.contains(&v) => a.ipv4.push(v),
            Some(IpAddr::V6(v)) if !a.ipv6.contains(&v) => a.ipv6.push(v),
            _ => {}
        }
        if let Some(Value::Binary(b)) = prop(p, "Value") {
            if let Ok(mac) = <[u8; 6]>::try_from(b.as_slice()) {
                a.mac.get_or_insert(mac);
            }
        }
    }

    fn packet<W: Write>(
        &mut self,
        rec: &EventRecord<'_>,
        p: &Properties,
        w: &mut PcapngWriter<W>,
    ) -> io::Result<()> {
        let Some(Value::Binary(data)) = prop(p, "Payload") else {
            self.summary.undecodable += 1;
            return Ok(());
        };
        let Some(lt) = pktmon_link_type(p) else {
            let t = named(p, "PacketType").unwrap_or_else(|| "?".into());
            *self.summary.unsupported_types.entry(t).or_default() += 1;
            return Ok(());
        };
        let component = num(p, "ComponentId").unwrap_or(0);
        let iface = match self.interfaces.get(&(component, lt)) {
            Some(&i) => i,
            None => {
                let (name, desc) = match self.components.get(&component) {
                    Some((n, d)) => (format!("{n} (PktMon component {component})"), d.clone()),
                    None => (format!("PktMon component {component}"), String::new()),
                };
                let addresses = self.addresses.get(&component).cloned().unwrap_or_default();
                let desc = (!desc.is_empty()).then_some(desc.as_str());
                let i = w.interface_at(lt, &name, desc, &addresses)?;
                self.interfaces.insert((component, lt), i);
                self.summary.interfaces += 1;
                i
            }
        };
        let direction = match named(p, "DirTag").as_deref() {
            Some("Rx") => Direction::Inbound,
            Some("Tx") => Direction::Outbound,
            _ => Direction::Unknown,
        };
        let dropped = rec.descriptor.id == PKTMON_DROP;
        let mut comment = format!(
            "PktMon component {component} edge {} filter {}",
            num(p, "EdgeId").unwrap_or(0),
            num(p, "FilterId").unwrap_or(0)
        );
        if dropped {
            comment.push_str(&format!(
                "; dropped: {} at location 0x{:x}",
                named(p, "DropReason").unwrap_or_default(),
                num(p, "DropLocation").unwrap_or(0)
            ));
            self.summary.dropped_packets += 1;
        }
        w.packet(&Packet {
            interface: iface,
            timestamp: rec.timestamp,
            data,
            original_len: num(p, "OriginalPayloadSize").unwrap_or(data.len() as u64) as u32,
            direction,
            id: num(p, "PktGroupId"),
            comment: Some(comment),
        })?;
        self.summary.packets += 1;
        Ok(())
    }
}
