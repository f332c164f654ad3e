//! Process names (`process_name`): every record's process named by the trace's own kernel Process
//! events, against TraceEvent's PName in PerfView's baselines (records matched by time, payload
//! length and process id). TraceEvent shows the image name without its extension,
//! `Process(<pid>)` where the trace names none, and nothing for records without a process.

mod common;

use std::ops::ControlFlow;

use etwkit::decode::Decoder;
use etwkit::etl::{EtlFile, Order};
use etwkit::schema::Registry;

struct Ours {
    ms: f64,
    len: usize,
    pid: Option<u32>,
    name: Option<String>,
}

struct Line {
    ms: f64,
    event: String,
    len: usize,
    pid: i64,
    pname: String,
}

fn baseline(text: &str) -> Vec<Line> {
    let mut out = Vec::new();
    for l in text.lines() {
        let Some(rest) = l.strip_prefix("EVENT ") else {
            continue;
        };
        let (ms, rest) = rest.split_once(": ").unwrap();
        let field = |k: &str| -> String {
            let at = rest
                .find(&format!(" {k}="))
                .or_else(|| rest.find(&format!("; {k}=")));
            let v = &rest[at.unwrap() + k.len() + 2..];
            v[..v.find(';').unwrap()]
                .trim_start_matches('=')
                .to_string()
        };
        out.push(Line {
            ms: ms.replace(',', "").parse().unwrap(),
            event: rest[..rest.find(" PID=").unwrap()].to_string(),
            len: field("DataLen").parse().unwrap(),
            pid: field("PID").parse().unwrap(),
            pname: field("PName"),
        });
    }
    out
}

fn ours(path: &std::path::Path) -> Vec<Ours> {
    let f = EtlFile::open(path).unwrap();
    let (d, _) = Decoder::for_file(Registry::with_builtins(), &f);
    let start = f.header().start_time;
    let mut out = Vec::new();
    f.for_each(Order::Time, |r| {
        let e = d.decode_etl(r);
        let pid = e.ids.map_or(r.pid, |i| i.pid);
        out.push(Ours {
            ms: (r.timestamp - start) as f64 / 1e4,
            len: r.payload.len(),
            pid: (pid != u32::MAX).then_some(pid),
            name: e.process_name.as_deref().map(String::from),
        });
        ControlFlow::Continue(())
    });
    out
}

/// TraceEvent's PName for an image name: without its extension.
fn stem(image: &str) -> &str {
    image.rsplit_once('.').map_or(image, |(s, _)| s)
}

/// Records compared, Defunct records TraceEvent leaves unnamed, and the differences.
fn compare(sample: &str, reference: &str, t: &str) -> Option<(usize, usize, Vec<String>)> {
    let p = common::sample(sample, t)?;
    let b = common::sample(reference, t)?;
    let ours = ours(&p);
    let lines = baseline(&std::fs::read_to_string(b).unwrap());
    let (mut compared, mut defunct) = (0, 0);
    let mut wrong = Vec::new();
    for l in &lines {
        let same = |o: &&Ours| {
            (o.ms - l.ms).abs() < 0.0015 && o.len == l.len && o.pid.map_or(-1, i64::from) == l.pid
        };
        if l.event == "Windows Kernel/DiskIO/FlushBuffers" {
            // TraceEvent reads its thread from another field and shows no process
            // (decode_kernel_ids.rs).
            continue;
        }
        let matches: Vec<&Ours> = ours.iter().filter(same).collect();
        assert!(
            !matches.is_empty(),
            "{sample}: no record for {:.3} ms pid {} len {}",
            l.ms,
            l.pid,
            l.len
        );
        // TraceEvent's unknown process is `Process(<pid>)`; a record without one has no name.
        // TraceEvent learns no name from a Defunct record (a process that exited while still
        // referenced, listed by the rundown): the record names its image, and so do we.
        let unknown = l.pname == format!("Process({})", l.pid);
        if unknown && l.event == "Windows Kernel/Process/Defunct" {
            defunct += 1;
            continue;
        }
        let expected = if l.pid < 0 || unknown {
            None
        } else {
            Some(l.pname.as_str())
        };
        for o in matches.iter().take(1) {
            compared += 1;
            let got = o.name.as_deref().map(stem);
            if got != expected {
                wrong.push(format!(
                    "{:.3} ms pid {}: ours {:?}, TraceEvent {:?}",
                    l.ms, l.pid, o.name, l.pname
                ));
            }
        }
    }
    Some((compared, defunct, wrong))
}

#[test]
fn process_names_match_traceevents_pname() {
    let t = "process_names_match_traceevents_pname";
    let Some((compared, defunct, wrong)) = compare(
        "perfview_net.4.5.2.x64.etl",
        "reference/perfview_net.4.5.2.x64.baseline.txt",
        t,
    ) else {
        return;
    };
    assert!(wrong.is_empty(), "{} differ: {wrong:#?}", wrong.len());
    // Every EVENT line of the baseline but FlushBuffers' two: 468 with a named process (Test.x64
    // 181, PerfView 129, Idle 23, cmd 13, System 12...), 8 without a process, and the 2 Defunct
    // records.
    assert_eq!((compared, defunct), (476, 2));
}

#[test]
fn a_trace_without_process_events_names_no_process() {
    let t = "a_trace_without_process_events_names_no_process";
    for (sample, reference) in [
        (
            "perfview_gcevents.etl",
            "reference/perfview_gcevents.baseline.txt",
        ),
        (
            "perfview_gcrundownevents.clrRundown.etl",
            "reference/perfview_gcrundownevents.baseline.txt",
        ),
    ] {
        let Some((compared, _, wrong)) = compare(sample, reference, t) else {
            return;
        };
        assert!(wrong.is_empty(), "{sample}: {wrong:#?}");
        assert!(compared >= 25, "{sample}: {compared}");
    }
}
