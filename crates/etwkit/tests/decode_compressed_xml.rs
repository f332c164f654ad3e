//! The XML documents KernelTraceControl's merge adds to a trace, LZNT1-compressed: the WinSAT
//! assessment (WinSat WinSPR / Metrics / SystemConfig, UTF-16, as TraceEvent inflates it) and
//! PerfTrack scenario manifests (PerfTrackMetaData, UTF-8). Each record's `Xml` property is the
//! whole document, exactly as many bytes as the record states. The values asserted below were
//! read with an independent LZNT1 implementation (dissect.util's) from the same payloads.

mod common;

use std::borrow::Cow;
use std::ops::ControlFlow;

use etwkit::decode::{DecodedEvent, Decoder};
use etwkit::etl::{EtlFile, Order};
use etwkit::schema::Registry;
use etwkit::Guid;

const WINSAT: Guid = Guid::from_str_const("ed54dff8-c409-4cf6-bf83-05e1e61a09c4");
const PERFTRACK: Guid = Guid::from_str_const("bf6ef1cb-89b5-490a-80ac-b180cfbcff0f");

fn text<'a>(d: &'a DecodedEvent, name: &str) -> &'a str {
    d.properties
        .get(name)
        .and_then(|v| v.as_str())
        .unwrap_or_else(|| panic!("no text property {name}: {:?}", d.properties))
}

fn size(d: &DecodedEvent) -> u64 {
    d.properties
        .get("UncompressedSize")
        .and_then(|v| v.as_u64())
        .expect("UncompressedSize")
}

#[test]
fn winsat_assessments_inflate_whole_in_every_sample() {
    let t = "winsat_assessments_inflate_whole_in_every_sample";
    let Some(files) = common::all_samples(t) else {
        return;
    };
    let mut seen = 0;
    let mut files_with = 0;
    let mut attackhost = Vec::new();
    for p in &files {
        let f = EtlFile::open(p).unwrap();
        let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
        let before = seen;
        f.for_each(Order::File, |r| {
            if r.provider != WINSAT {
                return ControlFlow::Continue(());
            }
            let e = d.decode_etl(r);
            let name = match r.descriptor.opcode {
                33 => "WinSPR",
                35 => "Metrics",
                37 => "SystemConfig",
                op => panic!("{}: WinSat opcode {op}", p.display()),
            };
            assert_eq!(e.task_name.as_deref(), Some("WinSat"));
            assert_eq!(e.opcode_name.as_deref(), Some(name));
            assert_eq!(e.decode_issue, None, "{}", p.display());
            assert_eq!(e.unread_bytes, 0);
            assert_eq!(e.properties.get("State").and_then(|v| v.as_u64()), Some(1));
            let xml = text(&e, "Xml");
            assert!(
                xml.starts_with(&format!("<{name}>")) && xml.ends_with(&format!("</{name}>")),
                "{}: {name} is not one whole document: {}...{}",
                p.display(),
                &xml[..60.min(xml.len())],
                &xml[xml.len().saturating_sub(60)..]
            );
            // UTF-16 and its terminating NUL: exactly the stated size.
            assert_eq!(
                2 * xml.encode_utf16().count() as u64 + 2,
                size(&e),
                "{}",
                p.display()
            );
            if p.ends_with("attackhost_trace.etl") {
                attackhost.push(xml.to_string());
            }
            seen += 1;
            ControlFlow::Continue(())
        });
        if seen > before {
            assert_eq!(seen - before, 3, "{}", p.display());
            files_with += 1;
        }
    }
    assert_eq!((files_with, seen), (11, 33));
    // attackhost_trace.etl's machine, as winsat.exe assessed it.
    assert_eq!(attackhost.len(), 3);
    let (spr, metrics, config) = (&attackhost[0], &attackhost[1], &attackhost[2]);
    assert!(spr.starts_with(
        "<WinSPR><SystemScore>8</SystemScore><MemoryScore>9.3</MemoryScore><CpuScore>9.3</CpuScore>"
    ));
    assert!(metrics.contains("<CompressionMetric units=\"MB/s\">1099.79852</CompressionMetric>"));
    assert!(config.contains("<OSVersion><Major>10</Major><Minor>0</Minor><Build>19042</Build>"));
    assert_eq!(config.len(), 9456);
}

#[test]
fn perftrack_manifests_inflate_whole() {
    let t = "perftrack_manifests_inflate_whole";
    let Some(p) = common::sample("pyetw_out.etl", t) else {
        return;
    };
    let f = EtlFile::open(&p).unwrap();
    let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
    let (mut manifests, mut undecoded, mut bytes) = (Vec::new(), 0, 0u64);
    f.for_each(Order::File, |r| {
        if r.provider != PERFTRACK {
            return ControlFlow::Continue(());
        }
        let e = d.decode_etl(r);
        if r.descriptor.opcode != 33 {
            // Opcode 34 has no public field names.
            assert!(e.properties.is_empty());
            undecoded += 1;
            return ControlFlow::Continue(());
        }
        assert_eq!(e.task_name.as_deref(), Some("PerfTrackMetaData"));
        assert_eq!(e.decode_issue, None);
        let xml = text(&e, "Xml");
        assert_eq!(xml.len() as u64, size(&e));
        assert!(xml.starts_with("<?xml version='1.0' encoding='utf-8' standalone='yes'?>\r\n"));
        assert!(xml.ends_with("</instrumentationManifest>"), "{xml}");
        bytes += xml.len() as u64;
        manifests.push(xml.to_string());
        ControlFlow::Continue(())
    });
    assert_eq!((manifests.len(), undecoded), (52, 8));
    assert!(manifests[0].contains(
        "<scenario guid=\"{476c4abc-c2c9-45b1-8646-a2ed7afb85cd}\" interactionclass=\"Typical\""
    ));
    assert_eq!(manifests[0].len(), 635);
    eprintln!(
        "{} PerfTrack manifests, {bytes} bytes of XML",
        manifests.len()
    );
}

#[test]
fn a_stream_that_does_not_match_its_stated_size_is_a_decode_issue() {
    let t = "a_stream_that_does_not_match_its_stated_size_is_a_decode_issue";
    let Some(p) = common::sample("attackhost_trace.etl", t) else {
        return;
    };
    let f = EtlFile::open(&p).unwrap();
    let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
    let mut first = None;
    f.for_each(Order::File, |r| {
        if r.provider == WINSAT {
            first = Some(r.event.clone().into_owned());
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    });
    let ev = first.expect("a WinSat record");
    let with = |edit: &dyn Fn(&mut Vec<u8>)| {
        let mut e = ev.clone();
        let mut p = e.payload.to_vec();
        edit(&mut p);
        e.payload = Cow::Owned(p);
        d.decode(&e)
    };
    // Two bytes more stated than the stream holds.
    let e = with(&|p| p[4] += 2);
    assert_eq!(
        e.decode_issue
            .as_deref()
            .map(|s| s.contains("LZNT1 data inflates to 1052 bytes, not the 1054 stated")),
        Some(true),
        "{:?}",
        e.decode_issue
    );
    // The stream cut short in its chunk.
    let e = with(&|p| p.truncate(200));
    let issue = e.decode_issue.expect("a decode issue");
    assert!(
        issue.contains("LZNT1 data at byte 0: chunk runs past the end of the data"),
        "{issue}"
    );
    // The fields before it are still read.
    assert_eq!(
        e.properties
            .get("UncompressedSize")
            .and_then(|v| v.as_u64()),
        Some(1052)
    );
}
