//! A whole trace to a pcapng stream: what `etwkit pcap` and the Python package's `etwkit.pcap`
//! run.
//!
//! Two passes over the file: the first learns PktMon's capture components (PktMon logs them when
//! the capture stops, after the packets) and the machine's interfaces where a configuration
//! rundown lists them, the second walks the records in time order and hands
//! each to the PktMon and NDIS-PacketCapture converters (and, with [`Options::events`], writes
//! every other event as a journal entry).

use std::io::{self, Write};
use std::ops::ControlFlow;

use super::SectionInfo;
use super::{journal, NdisPackets, NdisSummary, PcapngWriter, PktMonPackets, PktMonSummary};
use crate::decode::Decoder;
use crate::etl::{EtlFile, Order, ReadSummary};

/// What to write beside the packets.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The trace's other events as systemd journal entries among the packets.
    pub events: bool,
    /// The section header's application (`shb_userappl`), e.g. the converter's name and version.
    pub application: Option<String>,
}

/// What a conversion wrote and met.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Summary {
    /// Packets written, from both converters.
    pub packets: u64,
    /// Interfaces written, from both converters.
    pub interfaces: u32,
    /// Journal entries written (with [`Options::events`]).
    pub events: u64,
    pub pktmon: PktMonSummary,
    pub ndis: NdisSummary,
    /// What the file itself could not give (damaged buffers and records).
    #[serde(skip)]
    pub read: ReadSummary,
}

/// The section header of a capture made from `file`: the Windows build its header names.
pub fn section_info(file: &EtlFile, application: Option<String>) -> SectionInfo {
    let h = file.header();
    SectionInfo {
        os: (h.provider_version > 0).then(|| format!("Windows (build {})", h.provider_version)),
        hardware: None,
        application,
    }
}

/// Writes the packets of `file` (decoded by `decoder`) to `out` as one pcapng section; returns
/// what was written and `out`, flushed. Stops at the first write error.
pub fn convert<W: Write>(
    file: &EtlFile,
    decoder: &Decoder,
    out: W,
    options: &Options,
) -> io::Result<(Summary, W)> {
    let mut w = PcapngWriter::new(out, &section_info(file, options.application.clone()))?;
    let (mut pktmon, mut ndis) = (PktMonPackets::new(), NdisPackets::new());
    let _ = file.for_each(Order::File, |r| {
        if PktMonPackets::is_component(&r.event) {
            pktmon.component(&r.event, &decoder.decode_etl(r));
        } else if NdisPackets::is_adapter(&r.event) {
            ndis.adapter(&r.event, &decoder.decode_etl(r));
        }
        ControlFlow::Continue(())
    });
    let mut err = None;
    let read = file.for_each(Order::Time, |r| {
        let d = decoder.decode_etl(r);
        let written = if options.events && !journal::is_packet_event(&r.event) {
            journal::write_event(&mut w, &r.event, &d)
        } else {
            Ok(())
        };
        match written
            .and_then(|()| pktmon.event(&r.event, &d, &mut w))
            .and_then(|()| ndis.event(&r.event, &mut w))
        {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                err = Some(e);
                ControlFlow::Break(())
            }
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    ndis.finish();
    let events = w.journal_entries();
    let mut out = w.finish()?;
    out.flush()?;
    let summary = Summary {
        packets: pktmon.summary.packets + ndis.summary.packets,
        interfaces: pktmon.summary.interfaces + ndis.summary.interfaces,
        events,
        pktmon: pktmon.summary,
        ndis: ndis.summary,
        read,
    };
    Ok((summary, out))
}
