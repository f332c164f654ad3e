//! `etwkit pcap FILE.etl -o OUT.pcapng`: the packets of a PktMon or NDIS-PacketCapture (`netsh
//! trace ... capture=yes`) trace as a pcapng capture
//! (`-o -`: on standard output, for `| tshark -r -`).

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;

use etwkit::etl::{EtlFile, Order};
use etwkit::export::pcapng::{journal, NdisPackets, PcapngWriter, PktMonPackets, SectionInfo};

#[derive(clap::Args)]
pub struct Args {
    /// The ETL file: a PktMon capture (`pktmon start --capture`) or an NDIS-PacketCapture one
    /// (`netsh trace start capture=yes`).
    file: PathBuf,
    /// The pcapng file to write (`-`: standard output).
    #[arg(short, long)]
    output: PathBuf,
    /// Also write the trace's other events, decoded, as systemd journal entries among the packets
    /// (Wireshark lists them in time order with the packets, as etl2pcapng's output does).
    #[arg(long)]
    events: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let f = EtlFile::open(&a.file)?;
    let (decoder, _) = etwkit::decode::Decoder::for_file(crate::dump::registry(&[])?, &f);
    let h = f.header();
    let info = SectionInfo {
        os: (h.provider_version > 0).then(|| format!("Windows (build {})", h.provider_version)),
        hardware: None,
        application: Some(format!("etwkit {}", env!("CARGO_PKG_VERSION"))),
    };
    let to_stdout = a.output.as_os_str() == "-";
    // A file is staged (whole or not at all); standard output is written as packets come, its
    // errors named `writing standard output` (a closed pipe stays a quiet end).
    let (out, sink): (_, Box<dyn Write>) = if to_stdout {
        (
            None,
            Box::new(std::io::BufWriter::with_capacity(
                1 << 16,
                crate::out::stdout(),
            )),
        )
    } else {
        let out = etwkit::export::staged::StagedFile::new(&a.output, &[&a.file])?;
        let file = out.create()?;
        (Some(out), Box::new(file))
    };
    let shown = if to_stdout {
        "standard output".to_string()
    } else {
        a.output.display().to_string()
    };
    let named = |e: std::io::Error| -> anyhow::Error {
        if to_stdout {
            e.into()
        } else {
            anyhow::Error::new(e).context(format!("writing {shown}"))
        }
    };
    let mut w = PcapngWriter::new(sink, &info).map_err(named)?;
    let mut pkts = PktMonPackets::new();
    // PktMon names its components (and their addresses) when the capture stops: learn them first,
    // so that each interface is described where it is declared, before its packets.
    let _ = f.for_each(Order::File, |r| {
        if PktMonPackets::is_component(&r.event) {
            pkts.component(&r.event, &decoder.decode_etl(r));
        }
        ControlFlow::Continue(())
    });
    let mut ndis = NdisPackets::new();
    let mut err = None;
    let summary = f.for_each(Order::Time, |r| {
        let d = decoder.decode_etl(r);
        let written = if a.events && !journal::is_packet_event(&r.event) {
            journal::write_event(&mut w, &r.event, &d)
        } else {
            Ok(())
        };
        match written
            .and_then(|()| pkts.event(&r.event, &d, &mut w))
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
        return Err(named(e));
    }
    ndis.finish();
    let entries = w.journal_entries();
    w.finish().and_then(|mut w| w.flush()).map_err(named)?;
    if let Some(out) = out {
        out.commit()?;
    }
    crate::issues::warn_issues(&summary, "");
    let s = &pkts.summary;
    for (t, n) in &s.unsupported_types {
        eprintln!("etwkit: warning: {n} packets of PktMon packet type {t:?} were not written (no pcapng link type for it here)");
    }
    if s.undecodable > 0 {
        eprintln!(
            "etwkit: warning: {} PktMon packet events could not be decoded and were not written",
            s.undecodable
        );
    }
    let n = &ndis.summary;
    if n.incomplete > 0 {
        eprintln!(
            "etwkit: warning: {} NDIS-PacketCapture packets were not written: their last fragment never came",
            n.incomplete
        );
    }
    if n.malformed > 0 {
        eprintln!(
            "etwkit: warning: {} NDIS-PacketCapture events were not written: their payload is shorter than their layout",
            n.malformed
        );
    }
    let packets = s.packets + n.packets;
    let events = if a.events {
        format!(" and {entries} other events")
    } else {
        String::new()
    };
    if packets == 0 {
        eprintln!(
            "etwkit: {} holds no packet events (PktMon or NDIS-PacketCapture); {shown} has no packets{}",
            a.file.display(),
            if a.events { format!(", {entries} other events") } else { String::new() },
        );
    } else {
        eprintln!(
            "etwkit: wrote {packets} packets ({} dropped) on {} interfaces{events} to {shown}",
            s.dropped_packets,
            s.interfaces + n.interfaces,
        );
    }
    Ok(())
}
