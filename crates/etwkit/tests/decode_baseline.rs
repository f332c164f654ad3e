//! The decoder against TraceEvent's own output (`reference/*.baseline.txt`, PerfView's test baselines).
//!
//! A baseline holds `COUNT provider/event:n` lines and up to five `EVENT` lines per event type:
//! `EVENT <ms>: <Provider/Task/Opcode> PID=..; TID=..; PName=..; ProceNum=..; DataLen=..; Field=Value; ...`
//! with values cut to 20 characters plus `...`. For every EVENT line of a provider whose layout this
//! file describes (embedded TRACE_EVENT_INFO or an EventSource manifest), the record with the same
//! provider, PID, TID, payload length and time is found and every field both sides name is compared,
//! normalising only formatting (thousands separators, hex vs decimal, truncation, True/False).
//! Differences that come from TraceEvent's own hand-written parsers (which reinterpret a few fields
//! rather than using the file's metadata) are listed explicitly; anything else fails.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;

use etwkit::decode::{Decoder, Value};
use etwkit::etl::{EtlFile, Order};
use etwkit::schema::{Registry, SchemaSource};

struct Line {
    ms: f64,
    name: String,
    pid: i64,
    tid: i64,
    data_len: usize,
    fields: Vec<(String, String)>,
}

fn parse_baseline(text: &str) -> (Vec<Line>, BTreeMap<String, u64>) {
    let mut lines = Vec::new();
    let mut counts = BTreeMap::new();
    for l in text.lines() {
        if let Some(c) = l.strip_prefix("COUNT ") {
            let (k, v) = c.rsplit_once(':').unwrap();
            counts.insert(k.to_string(), v.parse().unwrap());
            continue;
        }
        let Some(rest) = l.strip_prefix("EVENT ") else {
            continue;
        };
        let (ms, rest) = rest.split_once(": ").unwrap();
        let (name, rest) = rest.split_once(' ').unwrap();
        let mut line = Line {
            ms: ms.replace(',', "").parse().unwrap(),
            name: name.to_string(),
            pid: 0,
            tid: 0,
            data_len: 0,
            fields: Vec::new(),
        };
        for kv in rest.split("; ") {
            let kv = kv.trim_end_matches(';').trim();
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            match k {
                "PID" => line.pid = v.parse().unwrap(),
                "TID" => line.tid = v.parse().unwrap(),
                "DataLen" => line.data_len = v.parse().unwrap(),
                "PName" | "ProceNum" => {}
                _ => line.fields.push((k.to_string(), v.to_string())),
            }
        }
        lines.push(line);
    }
    (lines, counts)
}

struct Ev {
    ms: f64,
    provider: String,
    pid: u32,
    tid: u32,
    len: usize,
    id: u16,
    props: etwkit::decode::Properties,
    source: SchemaSource,
}

/// Renders one of our values the way the baseline would compare it; `None` when not comparable
/// (date-times: TraceEvent prints local time in its own format).
fn matches(base: &str, ours: &Value) -> Option<bool> {
    let (prefix, truncated) = match base.strip_suffix("...") {
        Some(p) => (p, true),
        None => (base, false),
    };
    let text_eq = |s: &str| {
        if truncated {
            s.starts_with(prefix)
        } else {
            s == prefix
        }
    };
    Some(match ours {
        Value::FileTime(_) | Value::SystemTime(_) => return None,
        Value::String(s) | Value::Sid(s) => text_eq(s),
        Value::Guid(g) => text_eq(&g.to_string()),
        Value::Bool(b) => {
            base == if *b { "True" } else { "False" } || base == (*b as u8).to_string()
        }
        Value::Mapped { value, name } => {
            // [Flags] names compare as TraceEvent prints them ("ReadWrite, Delete"); a value
            // TraceEvent shows as a number (no names in its enum) compares by number.
            text_eq(name) || num(base) == Some(*value as i128)
        }
        Value::F32(f) => base
            .replace(',', "")
            .parse::<f64>()
            .map(|b| (b - *f as f64).abs() < 1e-3 * (1.0 + b.abs()))
            .unwrap_or(false),
        Value::F64(f) => base
            .replace(',', "")
            .parse::<f64>()
            .map(|b| (b - f).abs() < 1e-6 * (1.0 + b.abs()))
            .unwrap_or(false),
        Value::SocketAddress(a) => text_eq(&a.to_string()),
        Value::Ipv4(a) => text_eq(&a.to_string()),
        Value::Ipv6(a) => text_eq(&a.to_string()),
        Value::Binary(_) => text_eq(serde_json::to_value(ours).unwrap().as_str().unwrap_or("")),
        Value::Array(_) | Value::Struct(_) | Value::Null => return None,
        other => {
            let ours = other
                .as_i64()
                .map(|v| v as i128)
                .or(other.as_u64().map(|v| v as i128))?;
            // A [Flags] enum of value 0 with no name for 0 prints as "None" in C#.
            if base == "None" {
                return Some(ours == 0);
            }
            match num(base) {
                Some(b) => {
                    b == ours
                        || (b < 0 && (b as i64 as u64) as i128 == ours)
                        || (b as u32 as i128 == ours && b < 0)
                }
                None => false,
            }
        }
    })
}

/// Which group a baseline event name belongs to: its provider, except that KernelTraceControl's
/// MetaData records (decoded from the file itself) are told apart from its ImageID/DbgID events
/// (built-in tables, not this test's subject).
fn group(name: &str) -> &str {
    if name.starts_with("KernelTraceControl/MetaData") {
        "KernelTraceControl/MetaData"
    } else {
        name.split('/').next().unwrap()
    }
}

fn num(s: &str) -> Option<i128> {
    let s = s.replace(',', "");
    match s.strip_prefix("0x") {
        Some(h) => i128::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

struct Outcome {
    matched_lines: usize,
    compared_fields: usize,
    /// Of those, enum or flag fields whose TraceEvent text equals our map name (not a number).
    mapped_fields: usize,
    /// Equal fields (matched lines) per provider.
    compared_by_provider: BTreeMap<String, (usize, usize)>,
    /// (event name, field, baseline value, our value)
    mismatches: Vec<(String, String, String, String, Option<u64>)>,
    /// Baseline lines of decoded providers that found no record.
    unmatched: Vec<String>,
    /// Providers of EVENT lines we did not decode, with their line counts.
    undecoded: BTreeMap<String, usize>,
    /// Per decoded provider: (sum of the baseline's COUNT lines, records we decoded).
    counts: BTreeMap<String, (u64, u64)>,
    learned: etwkit::schema::registry::LearnSummary,
}

fn compare(sample: &str, baseline: &str, test: &str) -> Option<Outcome> {
    compare_with(sample, baseline, test, false)
}

/// As [`compare`]; with `builtins`, the registry also holds the built-in tables and provider
/// manifests, and records decoded by the built-in manifests are compared too.
fn compare_with(sample: &str, baseline: &str, test: &str, builtins: bool) -> Option<Outcome> {
    let path = common::sample(sample, test)?;
    let base =
        std::fs::read_to_string(common::sample(&format!("reference/{baseline}"), test)?).unwrap();
    let (lines, base_counts) = parse_baseline(&base);
    let file = EtlFile::open(&path).unwrap();
    let mut reg = if builtins {
        Registry::with_builtins()
    } else {
        Registry::new()
    };
    let learned = reg.learn_from_file(&file);
    assert!(learned.errors.is_empty(), "{:?}", learned.errors);
    let dec = Decoder::new(reg);
    let start = file.header().start_time;
    let mut evs = Vec::new();
    file.for_each(Order::Time, |r| {
        let d = dec.decode(&r.event);
        if let (Some(src), Some(mut p)) = (d.source, d.provider_name.as_deref().map(str::to_string))
        {
            if d.task_name.as_deref() == Some("MetaData") && p == "KernelTraceControl" {
                p = "KernelTraceControl/MetaData".into();
            }
            if matches!(
                src,
                SchemaSource::Embedded | SchemaSource::EventSourceManifest
            ) || (builtins && src == SchemaSource::Builtin)
            {
                evs.push(Ev {
                    ms: (r.event.timestamp - start) as f64 / 1e4,
                    provider: p,
                    pid: r.event.pid,
                    tid: r.event.tid,
                    len: r.event.payload.len(),
                    id: r.event.descriptor.id,
                    props: d.properties,
                    source: src,
                });
            }
        }
        ControlFlow::Continue(())
    });
    let decoded_providers: BTreeSet<&str> = evs.iter().map(|e| e.provider.as_str()).collect();
    let mut used = vec![false; evs.len()];
    let mut counts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for e in &evs {
        if !NOT_IN_BASELINE_COUNTS
            .iter()
            .any(|x| x.0 == e.provider && x.1 == e.id)
        {
            counts.entry(e.provider.clone()).or_default().1 += 1;
        }
    }
    for (k, n) in &base_counts {
        let p = group(k);
        if let Some(c) = counts.get_mut(p) {
            c.0 += n;
        }
    }
    let mut out = Outcome {
        matched_lines: 0,
        compared_fields: 0,
        mapped_fields: 0,
        compared_by_provider: BTreeMap::new(),
        mismatches: vec![],
        unmatched: vec![],
        undecoded: BTreeMap::new(),
        counts,
        learned,
    };
    // Offset between the baseline's time origin and the logfile start: taken from the first line
    // that matches by identity alone, then every match must agree with it to 2 µs.
    let mut offset: Option<f64> = None;
    for l in &lines {
        let provider = group(&l.name);
        if !decoded_providers.contains(provider) {
            *out.undecoded.entry(provider.to_string()).or_default() += 1;
            continue;
        }
        // ManifestData lines describe the chunk itself; ours has the same fields.
        let cands: Vec<usize> = (0..evs.len())
            .filter(|&i| {
                let e = &evs[i];
                !used[i]
                    && e.provider == provider
                    && e.pid as i64 == l.pid
                    && (e.tid as i64 == l.tid || l.tid == -1)
                    && e.len == l.data_len
                    && offset.is_none_or(|o| (e.ms - o - l.ms).abs() < 0.002)
            })
            .collect();
        let Some(&i) = cands.first() else {
            out.unmatched.push(format!(
                "{} at {} ms (pid {}, tid {}, {} bytes)",
                l.name, l.ms, l.pid, l.tid, l.data_len
            ));
            continue;
        };
        if offset.is_none() {
            offset = Some(evs[i].ms - l.ms);
        }
        used[i] = true;
        out.matched_lines += 1;
        out.compared_by_provider
            .entry(provider.to_string())
            .or_default()
            .1 += 1;
        let e = &evs[i];
        let _ = e.source;
        for (k, v) in &l.fields {
            let Some(ours) = e.props.get(k) else { continue };
            match matches(v, ours) {
                Some(true) => {
                    out.compared_fields += 1;
                    out.compared_by_provider
                        .entry(provider.to_string())
                        .or_default()
                        .0 += 1;
                    if matches!(ours, Value::Mapped { .. }) && num(v).is_none() {
                        out.mapped_fields += 1;
                    }
                }
                Some(false) => out.mismatches.push((
                    l.name.clone(),
                    k.clone(),
                    v.clone(),
                    serde_json::to_string(ours).unwrap(),
                    // the number behind a flags name, for the checks below
                    ours.as_u64(),
                )),
                None => {}
            }
        }
    }
    Some(out)
}

/// Events the baseline's COUNT lines leave out because TraceLog consumes them rather than listing
/// them: CLR stack walks (attached to the preceding event as its stack), method IL-to-native maps and
/// method rundown (folded into TraceLog's method table). We decode them all (their count here is
/// what the file holds; e.g. 14,983 ClrStackWalk events in perfview_net.4.5.2.x64).
const NOT_IN_BASELINE_COUNTS: &[(&str, u16)] = &[
    ("Microsoft-Windows-DotNETRuntime", 82),  // ClrStackWalk
    ("Microsoft-Windows-DotNETRuntime", 190), // MethodILToNativeMap
    ("Microsoft-Windows-DotNETRuntimeRundown", 144), // MethodDCEndVerbose
    ("Microsoft-Windows-DotNETRuntimeRundown", 150), // MethodDCEndILToNativeMap
];

/// Fields that TraceEvent's hand-written Kernel-File parser reinterprets instead of printing what the
/// embedded metadata says: CreateOptions (it strips the disposition byte 0x01000000 into a separate
/// CreateDisposition field, and for some records prints file attributes), FileName (converted from an
/// NT device path to a DOS path). The raw values here are exactly what the metadata describes.
/// (ShareAccess, HexInt32 without a map in the metadata, is named with the kernel FileIo flag map as
/// TraceEvent names it, and compared.)
const TRACEEVENT_REINTERPRETS: &[(&str, &str)] = &[
    ("Microsoft-Windows-Kernel-File/Create", "CreateOptions"),
    ("Microsoft-Windows-Kernel-File/Create", "FileName"),
];

#[test]
fn perfview_net_x64_manifest_events_match_traceevent() {
    let t = "perfview_net_x64_manifest_events_match_traceevent";
    let Some(o) = compare(
        "perfview_net.4.5.2.x64.etl",
        "perfview_net.4.5.2.x64.baseline.txt",
        t,
    ) else {
        return;
    };
    eprintln!(
        "matched {} lines, {} fields equal; counts {:?}",
        o.matched_lines, o.compared_fields, o.counts
    );
    // The file's own metadata: 61 EventInfo + 24 EventMapInfo (the baseline's COUNT lines say the
    // same) and three EventSource manifests (PerfView, TplEventSource, FrameworkEventSource).
    assert_eq!(
        (
            o.learned.event_infos,
            o.learned.map_infos,
            o.learned.eventsource_manifests
        ),
        (61, 24, 3)
    );
    assert!(
        o.unmatched.is_empty(),
        "baseline lines with no decoded record: {:#?}",
        o.unmatched
    );
    assert_eq!(o.matched_lines, 246);
    assert!(
        o.compared_fields >= 960,
        "only {} fields compared",
        o.compared_fields
    );
    let unexpected: Vec<_> = o
        .mismatches
        .iter()
        .filter(|m| !TRACEEVENT_REINTERPRETS.contains(&(m.0.as_str(), m.1.as_str())))
        .collect();
    assert!(
        unexpected.is_empty(),
        "values differ from TraceEvent: {unexpected:#?}"
    );
    // The reinterpreted fields still hold the same information where it can be checked: the
    // CreateOptions TraceEvent prints as a number is ours without the disposition byte.
    let mut numeric = 0;
    for m in o.mismatches.iter().filter(|m| m.1 == "CreateOptions") {
        if let (Some(b), Some(ours)) = (num(&m.2), m.4.map(|v| v as i128)) {
            assert_eq!(ours & 0x00FF_FFFF, b, "{m:?}");
            numeric += 1;
        }
    }
    assert!(numeric >= 3, "{numeric} CreateOptions compared as numbers");
    // Every decoded provider has exactly the number of events TraceEvent counted.
    for (p, (base, ours)) in &o.counts {
        assert_eq!(
            base, ours,
            "{p}: TraceEvent counted {base}, we decoded {ours}"
        );
    }
    assert_eq!(
        o.counts.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "KernelTraceControl/MetaData",
            "Microsoft-Windows-DNS-Client",
            "Microsoft-Windows-DotNETRuntime",
            "Microsoft-Windows-DotNETRuntimeRundown",
            "Microsoft-Windows-Immersive-Shell",
            "Microsoft-Windows-Kernel-EventTracing",
            "Microsoft-Windows-Kernel-File",
            "Microsoft-Windows-Kernel-Process",
            "PerfView",
            "System.Diagnostics.Eventing.FrameworkEventSource",
            "System.Threading.Tasks.TplEventSource",
        ]
    );
    // What this file's metadata does not describe (and so is not compared here):
    // * Windows Kernel / MSNT_SystemTrace: kernel MOF classes — the built-in tables' job;
    // * KernelTraceControl: ImageID/DbgID (built-in tables) and the MetaData records themselves;
    // * Microsoft-Windows-DotNETRuntimePrivate: no EventInfo for it in the file; TraceEvent decodes
    //   it with a compiled-in parser.
    assert_eq!(
        o.undecoded.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "KernelTraceControl",
            "MSNT_SystemTrace",
            "Microsoft-Windows-DotNETRuntimePrivate",
            "Windows"
        ]
    );
}

/// perfview_gcevents / gcrundownevents were recorded by PerfView without merging: they carry no
/// EventInfo records and no EventSource manifest, so the CLR events (Microsoft-Windows-DotNETRuntime,
/// -Rundown) have no layout in the file. TraceEvent decodes them with its compiled-in CLR parser; we
/// need the CLR manifest for that: the built-in one (next test) or `--manifest`. This test pins the
/// file's own state down (no registry built-ins) so a change in it is noticed.
#[test]
fn perfview_gc_files_carry_no_metadata_for_their_clr_events() {
    for (sample, baseline, provider, n) in [
        (
            "perfview_gcevents.etl",
            "perfview_gcevents.baseline.txt",
            "Microsoft-Windows-DotNETRuntime",
            69u64,
        ),
        (
            "perfview_gcrundownevents.clrRundown.etl",
            "perfview_gcrundownevents.baseline.txt",
            "Microsoft-Windows-DotNETRuntimeRundown",
            110,
        ),
    ] {
        let Some(o) = compare(
            sample,
            baseline,
            "perfview_gc_files_carry_no_metadata_for_their_clr_events",
        ) else {
            return;
        };
        assert_eq!(
            (
                o.learned.event_infos,
                o.learned.map_infos,
                o.learned.eventsource_manifests
            ),
            (0, 0, 0),
            "{sample}"
        );
        assert_eq!(o.matched_lines, 0, "{sample}");
        assert!(o.counts.is_empty(), "{sample}: {:?}", o.counts);
        let clr_lines = o.undecoded.get(provider).copied().unwrap_or(0);
        assert!(
            clr_lines > 0,
            "{sample}: baseline has no {provider} lines? {:?}",
            o.undecoded
        );
        // The records are there, undecoded: count them by provider GUID.
        let file = EtlFile::open(common::sample(sample, "gc").unwrap()).unwrap();
        let guid = match provider {
            "Microsoft-Windows-DotNETRuntime" => "e13c0d23-ccbc-4e12-931b-d9cc2eee27e4",
            _ => "a669021c-c450-4609-a035-5af59af4df18",
        };
        let dec = Decoder::new(Registry::new());
        let mut seen = 0u64;
        file.for_each(Order::File, |r| {
            if r.event.provider.to_string() == guid {
                seen += 1;
                let d = dec.decode(&r.event);
                assert!(!d.is_decoded());
                assert_eq!(d.undecoded.as_deref(), Some("no schema for this event"));
            }
            ControlFlow::Continue(())
        });
        assert_eq!(seen, n, "{sample}");
    }
}

/// Where TraceEvent's text for a CLR field is not the CLR manifest's, so not ours: (event, field,
/// TraceEvent's text, our value as JSON), each exactly as the comparison meets it. (Fields the
/// manifest declares without a map, which TraceEvent names from its own C# enums — GlobalHeapHistory
/// Reason / GlobalMechanisms / PauseMode, PerHeapHistory CompactMechanisms / ExpandMechanisms,
/// GCSettingsRundown BitSettings, NgenBind ReasonCode — carry those maps in etwkit too, from
/// `schema::mend`, and compare by name.)
/// * Map entries TraceEvent names differently: segment type 3 is "PinnedHeap" in the manifest's
///   GCSegmentTypeMap, bucket kind 1 is "Plug" in its GCBucketKindMap, and assembly flag 0x10 has
///   no entry in its AssemblyFlagsMap (ours is the integer 16). (Module flag 0x20 is
///   "ReadyToRunModule" in the manifest, "ReadyToRun" in TraceEvent; the baselines cut that text
///   to "Manifest, ReadyToRun...", a prefix of ours, so it compares equal.)
///
/// Every other enum or flag field is compared by name: TraceEvent's text against our
/// `Value::Mapped` name. Each entry must be met at least once.
const TRACEEVENT_OWN_NAMES: &[(&str, &str, &str, &str)] = &[
    (
        "Microsoft-Windows-DotNETRuntime/GC/CreateSegment",
        "Type",
        "PinnedObjectHeap",
        "\"PinnedHeap\"",
    ),
    (
        "Microsoft-Windows-DotNETRuntime/GC/FitBucketInfo",
        "BucketKind",
        "PlugsInCondemned",
        "\"Plug\"",
    ),
    (
        "Microsoft-Windows-DotNETRuntimeRundown/Loader/AssemblyDCStop",
        "AssemblyFlags",
        "ReadyToRun",
        "16",
    ),
];

/// perfview_gcevents / gcrundownevents with the built-in CLR manifests: every EVENT line of the CLR
/// providers finds its record, and every field both sides name has TraceEvent's value, enum and
/// flag fields by name (our map names against TraceEvent's) except the [`TRACEEVENT_OWN_NAMES`].
#[test]
fn perfview_gc_files_match_traceevent_with_builtin_clr_manifests() {
    let t = "perfview_gc_files_match_traceevent_with_builtin_clr_manifests";
    let mut met = BTreeSet::new();
    for (sample, baseline, provider, lines, fields, mapped, counts) in [
        (
            "perfview_gcevents.etl",
            "perfview_gcevents.baseline.txt",
            "Microsoft-Windows-DotNETRuntime",
            51,
            253,
            28,
            (69, 69),
        ),
        (
            "perfview_gcrundownevents.clrRundown.etl",
            "perfview_gcrundownevents.baseline.txt",
            "Microsoft-Windows-DotNETRuntimeRundown",
            24,
            166,
            15,
            (30, 30),
        ),
    ] {
        let Some(o) = compare_with(sample, baseline, t, true) else {
            return;
        };
        eprintln!(
            "{sample}: matched {} lines, {} fields equal ({} by map name), {} TraceEvent-only names",
            o.matched_lines,
            o.compared_fields,
            o.mapped_fields,
            o.mismatches.len()
        );
        assert!(
            o.unmatched.is_empty(),
            "{sample}: baseline lines with no decoded record: {:#?}",
            o.unmatched
        );
        assert_eq!(o.matched_lines, lines, "{sample}");
        assert_eq!(o.compared_fields, fields, "{sample}");
        assert_eq!(o.mapped_fields, mapped, "{sample}");
        let mut wrong = Vec::new();
        for m in &o.mismatches {
            match TRACEEVENT_OWN_NAMES
                .iter()
                .position(|e| (e.0, e.1, e.2, e.3) == (&*m.0, &*m.1, &*m.2, &*m.3))
            {
                Some(i) => {
                    met.insert(i);
                }
                None => wrong.push(m),
            }
        }
        assert!(wrong.is_empty(), "{sample}: values differ: {wrong:#?}");
        assert_eq!(o.counts.get(provider), Some(&counts), "{sample}");
        assert_eq!(
            o.undecoded.keys().map(String::as_str).collect::<Vec<_>>(),
            ["Windows"],
            "{sample}: only the kernel header line is outside the CLR providers"
        );
    }
    let unmet: Vec<_> = (0..TRACEEVENT_OWN_NAMES.len())
        .filter(|i| !met.contains(i))
        .map(|i| TRACEEVENT_OWN_NAMES[i])
        .collect();
    assert!(unmet.is_empty(), "listed but never met: {unmet:#?}");
}

/// perfview_net.4.5.2.x64 with the built-in manifests: its 1,627 Microsoft-Windows-DotNETRuntimePrivate
/// records (GC settings, heap histories and mark phases, binder and NGen binding events), which the
/// file carries no metadata for and TraceEvent decodes with its compiled-in private parser, decode
/// with the built-in private manifest (tools/clr_private.py): TraceEvent's count per provider, every
/// EVENT line found, every field both sides name equal.
#[test]
fn perfview_net_clr_private_events_match_traceevent_with_the_builtin_manifest() {
    let t = "perfview_net_clr_private_events_match_traceevent_with_the_builtin_manifest";
    let private = "Microsoft-Windows-DotNETRuntimePrivate";
    let Some(o) = compare_with(
        "perfview_net.4.5.2.x64.etl",
        "perfview_net.4.5.2.x64.baseline.txt",
        t,
        true,
    ) else {
        return;
    };
    assert_eq!(o.counts.get(private), Some(&(1627, 1627)), "{:?}", o.counts);
    assert!(!o.undecoded.contains_key(private), "{:?}", o.undecoded);
    let unmatched: Vec<_> = o
        .unmatched
        .iter()
        .filter(|l| l.starts_with(private))
        .collect();
    assert!(unmatched.is_empty(), "{unmatched:#?}");
    let wrong: Vec<_> = o
        .mismatches
        .iter()
        .filter(|m| m.0.starts_with(private))
        .collect();
    assert!(
        wrong.is_empty(),
        "values differ from TraceEvent: {wrong:#?}"
    );
    // (equal fields, lines): all 58 EVENT lines of the provider.
    assert_eq!(
        o.compared_by_provider.get(private),
        Some(&(PRIVATE_FIELDS, 58)),
        "{:?}",
        o.compared_by_provider
    );
}

/// Fields of the private provider's 58 baseline lines that compare equal: every field both sides
/// name, enums and flags by name — GlobalHeapHistory's Reason and GlobalMechanisms, NgenBind's
/// ReasonCode and the eight that TraceEvent prints of each of the 5 PerHeapHistory v2 lines
/// (ClrInstanceID, CondemnReasons0/1, the mechanisms, HeapIndex, ExtraGen0Commit,
/// MemoryPressure), whose manifest template declares no fields (etwkit's own layout and maps,
/// `schema::mend`). (TraceEvent's lines also print fields neither layout has, empty:
/// GlobalHeapHistory v1's PauseMode..Count, PerHeapHistory v3's FreeListAllocated..Count.)
const PRIVATE_FIELDS: usize = 282;
