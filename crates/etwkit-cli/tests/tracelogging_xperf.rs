//! TraceLogging decoding against Windows' own tool: `reference/ebpf_ebpfforwindows.txt` is xperf's
//! dumper output of `ebpf_ebpforwindows.etl` (13,841 self-describing events of two providers, each
//! with its field values). Every one of those events, as `etwkit dump --format json` decodes it,
//! has xperf's provider and event name, time (microseconds from the trace start), process, thread,
//! CPU and field values, in xperf's field order.
//!
//! Formats differ where they are conventions, and are compared by meaning: xperf writes GUIDs in
//! braces and pointers zero-padded (`0x00000211f4fa3410`), `dump` neither. Records of one
//! microsecond on two CPUs are ordered differently by the two tools (ties in the time merge), so
//! events are compared as sets within each microsecond.

mod common;

use std::collections::BTreeMap;

use common::{etwkit, json_lines, samples};
use serde_json::Value;

/// The fields of one xperf dumper line: comma separated, double-quoted strings kept whole.
fn fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur).trim().to_string()),
            _ => cur.push(c),
        }
    }
    out.push(cur.trim().to_string());
    out
}

/// A value as both tools mean it: GUIDs without braces, lowercase; numbers written in hex as
/// their value.
fn normal(v: &str) -> String {
    let v = v.trim();
    if let Some(g) = v.strip_prefix('{').and_then(|g| g.strip_suffix('}')) {
        return g.to_ascii_lowercase();
    }
    if let Some(h) = v.strip_prefix("0x") {
        if let Ok(n) = u64::from_str_radix(h, 16) {
            return format!("0x{n:x}");
        }
    }
    v.to_string()
}

fn json_value(v: &Value) -> String {
    match v {
        Value::String(s) => normal(s),
        other => other.to_string(),
    }
}

/// (provider/event, pid, tid, cpu, values) of one event.
type Event = (String, u64, u64, u64, Vec<String>);

/// The values of a JSON object in the order its text gives them (`serde_json::Map` sorts keys).
struct InOrder(Vec<Value>);

impl<'de> serde::Deserialize<'de> for InOrder {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = InOrder;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<InOrder, A::Error> {
                let mut out = Vec::new();
                while let Some((_, v)) = m.next_entry::<String, Value>()? {
                    out.push(v);
                }
                Ok(InOrder(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A `dump` line's `properties`, in order.
#[derive(serde::Deserialize)]
struct Line {
    properties: InOrder,
}

#[test]
fn tracelogging_events_equal_xperf_dumper() {
    let Some(dir) = samples("tracelogging_events_equal_xperf_dumper") else {
        return;
    };
    let providers = ["EbpfForWindowsProvider/", "NetEbpfExtProvider/"];
    let text = std::fs::read(dir.join("reference/ebpf_ebpfforwindows.txt")).unwrap();
    let text = String::from_utf8_lossy(&text);
    let body = text.split_once("\nEndHeader").expect("xperf header").1;
    // Microseconds from the trace start → events.
    let mut want: BTreeMap<i64, Vec<Event>> = BTreeMap::new();
    let mut n_want = 0;
    for line in body.lines() {
        if !providers.iter().any(|p| line.starts_with(p)) {
            continue;
        }
        let f = fields(line);
        let process = &f[2];
        let pid = process[process.rfind('(').unwrap() + 1..process.rfind(')').unwrap()]
            .trim()
            .parse()
            .unwrap();
        let e = (
            f[0].trim_end_matches('/').to_string(),
            pid,
            f[3].parse().unwrap(),
            f[4].parse().unwrap(),
            // After TimeStamp, Process, ThreadID, CPU and four activity/user columns (empty).
            f[9..].iter().map(|v| normal(v)).collect(),
        );
        want.entry(f[1].parse().unwrap()).or_default().push(e);
        n_want += 1;
    }
    assert_eq!(n_want, 13_841, "xperf's TraceLogging events");

    let etl = dir.join("ebpf_ebpforwindows.etl");
    let (ok, out, err) = etwkit(&["dump", etl.to_str().unwrap(), "--format", "json"]);
    assert!(ok, "{err}");
    let (ok, info, _) = etwkit(&["info", etl.to_str().unwrap(), "--format", "json"]);
    assert!(ok);
    // The logfile header's StartTime (FILETIME), which xperf counts from, as 100 ns since 1970.
    let start = serde_json::from_str::<Value>(&info).unwrap()["start_time"]
        .as_i64()
        .unwrap()
        - 116_444_736_000_000_000;
    let mut have: BTreeMap<i64, Vec<Event>> = BTreeMap::new();
    let mut n_have = 0;
    for (d, line) in json_lines(&out).into_iter().zip(out.lines()) {
        let name = format!(
            "{}/{}",
            d["provider_name"].as_str().unwrap_or(""),
            d["event_name"].as_str().unwrap_or("")
        );
        if !providers.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let props: Line = serde_json::from_str(line).expect("decoded properties");
        let e = (
            name,
            d["pid"].as_u64().unwrap(),
            d["tid"].as_u64().unwrap(),
            d["cpu"].as_u64().unwrap(),
            props.properties.0.iter().map(json_value).collect(),
        );
        // xperf rounds to the microsecond (half up).
        let us = (hundred_ns(d["timestamp"].as_str().unwrap()) - start + 5).div_euclid(10);
        have.entry(us).or_default().push(e);
        n_have += 1;
    }
    assert_eq!(n_have, n_want);
    let mut checked = 0;
    for (us, mut w) in want {
        let mut h = have.remove(&us).unwrap_or_default();
        w.sort();
        h.sort();
        assert_eq!(h, w, "events at {us} us");
        checked += w.len();
    }
    assert!(have.is_empty(), "events xperf does not have: {have:?}");
    assert_eq!(checked, 13_841);
}

/// An RFC 3339 UTC time with 7 fractional digits as 100 ns units since 1970.
fn hundred_ns(t: &str) -> i64 {
    let (date, time) = t.trim_end_matches('Z').split_once('T').unwrap();
    let d: Vec<i64> = date.split('-').map(|x| x.parse().unwrap()).collect();
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<i64> = hms.split(':').map(|x| x.parse().unwrap()).collect();
    let frac: i64 = format!("{frac:0<7}")[..7].parse().unwrap();
    // Days from 1970-01-01 (civil-from-days inverse).
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 86_400 + t[0] * 3600 + t[1] * 60 + t[2]) * 10_000_000) + frac
}
