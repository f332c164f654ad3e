//! `etwkit pcap FILE.etl -o OUT.pcapng`: the packets of a PktMon or NDIS-PacketCapture (`netsh
//! trace ... capture=yes`) trace as a pcapng capture
//! (`-o -`: on standard output, for `| tshark -r -`).

use std::io::Write;
use std::path::PathBuf;

use etwkit::etl::EtlFile;
use etwkit::export::pcapng::convert::{convert, Options};

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
    let options = Options {
        events: a.events,
        application: Some(format!("etwkit {}", env!("CARGO_PKG_VERSION"))),
    };
    let (summary, _) = convert(&f, &decoder, sink, &options).map_err(|e| {
        if to_stdout {
            anyhow::Error::new(e)
        } else {
            anyhow::Error::new(e).context(format!("writing {shown}"))
        }
    })?;
    if let Some(out) = out {
        out.commit()?;
    }
    crate::issues::warn_issues(&summary.read, "");
    let s = &summary.pktmon;
    for (t, n) in &s.unsupported_types {
        eprintln!("etwkit: warning: {n} packets of PktMon packet type {t:?} were not written (no pcapng link type for it here)");
    }
    if s.undecodable > 0 {
        eprintln!(
            "etwkit: warning: {} PktMon packet events could not be decoded and were not written",
            s.undecodable
        );
    }
    let n = &summary.ndis;
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
    let events = if a.events {
        format!(" and {} other events", summary.events)
    } else {
        String::new()
    };
    if summary.packets == 0 {
        eprintln!(
            "etwkit: {} holds no packet events (PktMon or NDIS-PacketCapture); {shown} has no packets{}",
            a.file.display(),
            if a.events {
                format!(", {} other events", summary.events)
            } else {
                String::new()
            },
        );
    } else {
        eprintln!(
            "etwkit: wrote {} packets ({} dropped) on {} interfaces{events} to {shown}",
            summary.packets, s.dropped_packets, summary.interfaces,
        );
    }
    Ok(())
}
