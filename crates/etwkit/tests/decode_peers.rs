//! Decoded records per sample versus what dissect.etl and etl-parser decode
//! (../shared/etl-samples/peers/results.tsv, the `*_decoded_if_fixed` columns), with the built-in
//! tables, the file's embedded metadata and TraceLogging.
//!
//! Known shortfalls are listed with their reason: the peers ship instrumentation manifests for a few
//! manifest providers that are not in ../shared and that these traces do not embed (no EventInfo
//! records, no EventSource manifest); `--manifest FILE.man` decodes them when the user has the
//! manifest.

mod common;

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use etwkit::decode::{DecodeStats, Decoder};
use etwkit::etl::{EtlFile, Order};
use etwkit::schema::Registry;

/// (file, why): samples where a peer decodes more than we do.
const SHORTFALLS: &[(&str, &str)] = &[
    (
        "perfview_gcevents.etl",
        "Microsoft-Windows-DotNETRuntime: peers ship the CLR manifest",
    ),
    (
        "perfview_gcrundownevents.clrRundown.etl",
        "Microsoft-Windows-DotNETRuntimeRundown: peers ship the CLR rundown manifest",
    ),
    (
        "krabsetw_powershell.etl",
        "Microsoft-Windows-PowerShell: etl-parser ships its manifest",
    ),
    (
        "pywintrace_eventlog.etl",
        "provider 36c23e18-0e66-11d9-bbeb-505054503030 (45 events): manifest not in ../shared",
    ),
    (
        "tx_WsRm01.etl",
        "provider a7975c8f-ac13-49f1-87da-5a984a4ab417 (70 events): manifest not in ../shared",
    ),
];

#[test]
fn decoded_at_least_what_peers_decode() {
    let t = "decoded_at_least_what_peers_decode";
    let Some(tsv) = common::sample("peers/results.tsv", t) else {
        return;
    };
    let text = std::fs::read_to_string(tsv).unwrap();
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
    let (cf, cd, ce) = (
        col("file"),
        col("dissect_decoded_if_fixed"),
        col("etlparser_decoded_if_fixed"),
    );
    let mut short: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut checked = 0;
    for l in lines {
        let c: Vec<&str> = l.split('\t').collect();
        let peer = c[cd]
            .parse::<u64>()
            .unwrap_or(0)
            .max(c[ce].parse::<u64>().unwrap_or(0));
        let file = EtlFile::open(common::sample(c[cf], t).unwrap()).unwrap();
        let (dec, _) = Decoder::for_file(Registry::with_builtins(), &file);
        let mut st = DecodeStats::default();
        file.for_each(Order::File, |r| {
            st.add(&r.event, &dec.decode_etl(r));
            ControlFlow::Continue(())
        });
        checked += 1;
        if st.decoded < peer {
            short.insert(c[cf].to_string(), (st.decoded, peer));
        }
    }
    assert_eq!(checked, 42);
    eprintln!("shortfalls: {short:?}");
    let listed: Vec<&str> = SHORTFALLS.iter().map(|s| s.0).collect();
    let mut found: Vec<&str> = short.keys().map(String::as_str).collect();
    found.sort();
    let mut listed_sorted = listed.clone();
    listed_sorted.sort();
    assert_eq!(found, listed_sorted, "decoded vs peers: {short:?}");
}
