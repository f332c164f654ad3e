//! `etwkit pcap FILE.etl -o OUT.pcapng`: the packets of a PktMon trace as a pcapng capture.

use std::ops::ControlFlow;
use std::path::PathBuf;

use etwkit::etl::{EtlFile, Order};
use etwkit::export::pcapng::{PcapngWriter, PktMonPackets, SectionInfo};

#[derive(clap::Args)]
pub struct Args {
    /// The ETL file (a PktMon capture: `pktmon start --capture`).
    file: PathBuf,
    /// The pcapng file to write.
    #[arg(short, long)]
    output: PathBuf,
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
    let out = etwkit::export::staged::StagedFile::new(&a.output, &[&a.file])?;
    let mut w = PcapngWriter::new(out.create()?, &info)?;
    let mut pkts = PktMonPackets::new();
    let mut err = None;
    let summary = f.for_each(Order::Time, |r| {
        let d = decoder.decode_etl(r);
        match pkts.event(&r.event, &d, &mut w) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                err = Some(e);
                ControlFlow::Break(())
            }
        }
    });
    if let Some(e) = err {
        return Err(anyhow::Error::new(e).context(format!("writing {}", a.output.display())));
    }
    w.finish()?
        .into_inner()
        .map_err(|e| anyhow::anyhow!("writing {}: {}", a.output.display(), e.error()))?;
    out.commit()?;
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
    if s.packets == 0 {
        eprintln!(
            "etwkit: {} holds no PktMon packet events; {} has no packets",
            a.file.display(),
            a.output.display()
        );
    } else {
        eprintln!(
            "etwkit: wrote {} packets ({} dropped) on {} interfaces to {}",
            s.packets,
            s.dropped_packets,
            s.interfaces,
            a.output.display()
        );
    }
    Ok(())
}
