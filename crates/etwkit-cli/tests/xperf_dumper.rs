//! Decoding against Windows' own tool: `reference/ebpf_ebpfforwindows.txt` is xperf's dumper
//! output of `ebpf_ebpforwindows.etl`, each event with its field values.
//!
//! - TraceLogging: every one of the 13,841 self-describing events of its two providers, as
//!   `etwkit dump --format json` decodes it, has xperf's provider and event name, time
//!   (microseconds from the trace start), process, thread, CPU and field values, in xperf's field
//!   order.
//! - The classic events xperf's merge and WPR add: KernelTraceControl SysConfig (BuildInfo,
//!   SystemPaths, UnknownVolume, VolumeMapping, and NetworkInterface, one MIB_IF_ROW2 per
//!   interface) and the kernel's PerfInfo Marks, field by field.
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

/// xperf's output (its header, the lines naming each event type's columns; its body, the events)
/// and `dump --format json` of the same file, with the trace's start time xperf counts from.
struct Both {
    header: String,
    body: String,
    /// `dump`'s lines, as JSON and as text.
    json: Vec<Value>,
    text: String,
    /// The logfile header's StartTime as 100 ns units since 1970.
    start: i64,
}

fn both(dir: &std::path::Path) -> Both {
    let text = std::fs::read(dir.join("reference/ebpf_ebpfforwindows.txt")).unwrap();
    let text = String::from_utf8_lossy(&text);
    let (header, body) = text.split_once("\nEndHeader").expect("xperf header");
    let etl = dir.join("ebpf_ebpforwindows.etl");
    let (ok, out, err) = etwkit(&["dump", etl.to_str().unwrap(), "--format", "json"]);
    assert!(ok, "{err}");
    let (ok, info, _) = etwkit(&["info", etl.to_str().unwrap(), "--format", "json"]);
    assert!(ok);
    let start = serde_json::from_str::<Value>(&info).unwrap()["start_time"]
        .as_i64()
        .unwrap()
        - FILETIME_1970;
    Both {
        header: header.to_string(),
        body: body.to_string(),
        json: json_lines(&out),
        text: out,
        start,
    }
}

/// 1970-01-01 as a FILETIME (100 ns units since 1601).
const FILETIME_1970: i64 = 116_444_736_000_000_000;

impl Both {
    /// A `dump` record's time as xperf shows it: microseconds from the trace start, rounded half up.
    fn us(&self, d: &Value) -> i64 {
        (hundred_ns(d["timestamp"].as_str().unwrap()) - self.start + 5).div_euclid(10)
    }
}

#[test]
fn tracelogging_events_equal_xperf_dumper() {
    let Some(dir) = samples("tracelogging_events_equal_xperf_dumper") else {
        return;
    };
    let providers = ["EbpfForWindowsProvider/", "NetEbpfExtProvider/"];
    let b = both(&dir);
    let body = &b.body;
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

    let mut have: BTreeMap<i64, Vec<Event>> = BTreeMap::new();
    let mut n_have = 0;
    for (d, line) in b.json.iter().zip(b.text.lines()) {
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
        have.entry(b.us(d)).or_default().push(e);
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

/// xperf's dumper names four enumerations of a MIB_IF_ROW2 one value off: its tables start at 0,
/// the enumerations (ifdef.h) at 1, so it prints the name of the value after the one logged (the
/// loopback interface's AccessType 1, NET_IF_ACCESS_LOOPBACK, comes out as `Broadcast`; an
/// Ethernet adapter's 2, NET_IF_ACCESS_BROADCAST, as `PointToPoint`). What xperf prints for the
/// value `dump` names `ours`.
fn xperf_off_by_one(field: &str, ours: &str) -> String {
    let order: &[&str] = match field {
        "AccessType" => &["Loopback", "Broadcast", "PointToPoint", "PointToMultiPoint"],
        "OperStatus" => &[
            "Up",
            "Down",
            "Testing",
            "Unknown",
            "Dormant",
            "NotPresent",
            "LowerLayerDown",
        ],
        "AdminStatus" => &["Up", "Down", "Testing"],
        "ConnectionType" => &["Dedicated", "Passive", "Demand"],
        _ => unreachable!("{field}"),
    };
    let i = order.iter().position(|n| *n == ours);
    let next = i.and_then(|i| order.get(i + 1));
    // xperf spells one name with a lower-case p.
    next.unwrap_or_else(|| panic!("{field} {ours}: no next value"))
        .replace("MultiPoint", "Multipoint")
}

/// xperf's columns for the bits of InterfaceAndOperStatusFlags, lowest first, and what each
/// prints when its bit is clear.
const XPERF_FLAGS: [(&str, &str, &str); 8] = [
    ("HwdIF", "HardwareInterface", "NoHwdIF"),
    ("FilterIF", "FilterInterface", "NoFilter"),
    ("ConnAvail", "ConnectorPresent", "NoConn"),
    ("Auth", "NotAuthenticated", "Auth"),
    ("Media", "NotMediaConnected", "Media"),
    ("NotPaused", "Paused", "NotPaused"),
    ("Power", "LowPower", "Power"),
    ("NotEndPointIF", "EndPointInterface", "NotEndPointIF"),
];

/// One NetworkInterface property as xperf prints its column `col` (flag columns as `set` or
/// `clear`: xperf's words for set bits do not occur in the sample).
fn interface_column(col: &str, p: &Value) -> String {
    let text = |k: &str| json_value(&p[k]);
    if let Some((_, bit, _)) = XPERF_FLAGS.iter().find(|(c, ..)| *c == col) {
        let set = p["InterfaceAndOperStatusFlags"]
            .as_str()
            .unwrap()
            .split('|')
            .any(|n| n.trim() == *bit);
        return if set { "set" } else { "clear" }.to_string();
    }
    match col {
        "IFIndex" => text("InterfaceIndex"),
        "IFGuid" => text("InterfaceGuid"),
        "NTWKGuid" => text("NetworkGuid"),
        "PhysicalAddr" => {
            // The first PhysicalAddressLength of the 32 bytes, as xperf writes a MAC address.
            let n = p["PhysicalAddressLength"].as_u64().unwrap() as usize;
            let hex = p["PhysicalAddress"]
                .as_str()
                .unwrap()
                .strip_prefix("0x")
                .unwrap();
            (0..n)
                .map(|i| hex[2 * i..2 * i + 2].to_ascii_uppercase())
                .collect::<Vec<_>>()
                .join("-")
        }
        "MTU" => text("Mtu"),
        "TunnelType" => match p["TunnelType"].as_str().unwrap() {
            // xperf prints the number.
            "None" => "0".to_string(),
            t => panic!("TunnelType {t}"),
        },
        "Medium" => text("MediaType"),
        "PhysicalMedium" => text("PhysicalMediumType"),
        "AccessType" | "OperStatus" | "AdminStatus" | "ConnectionType" => {
            xperf_off_by_one(col, p[col].as_str().unwrap())
        }
        "ConnectState" => text("MediaConnectState"),
        "TransmitSpeed" => text("TransmitLinkSpeed"),
        "ReceiveSpeed" => text("ReceiveLinkSpeed"),
        _ => text(col),
    }
}

#[test]
fn sysconfig_and_marks_equal_xperf_dumper() {
    let Some(dir) = samples("sysconfig_and_marks_equal_xperf_dumper") else {
        return;
    };
    let b = both(&dir);
    // Event type → its columns after TimeStamp, from xperf's header.
    let kinds = [
        "BuildInfo",
        "SystemPaths",
        "UnknownVolume",
        "VolumeMapping",
        "NetworkInterface",
        "Mark",
    ];
    let mut columns: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for line in b.header.lines() {
        let f = fields(line);
        if let Some(k) = kinds.iter().find(|k| f[0] == **k) {
            assert_eq!(f[1], "TimeStamp");
            columns.insert(k, f[2..].to_vec());
        }
    }
    assert_eq!(columns.len(), kinds.len(), "{columns:?}");
    // Event type → (microseconds, values) of each event, as xperf prints them.
    let mut want: BTreeMap<&str, Vec<(i64, Vec<String>)>> = BTreeMap::new();
    for line in b.body.lines() {
        let f = fields(line);
        let Some(k) = kinds.iter().find(|k| f[0] == **k) else {
            continue;
        };
        let cols = &columns[k];
        assert_eq!(f.len(), cols.len() + 2, "{line}");
        let values = f[2..]
            .iter()
            .zip(cols)
            .map(|(v, c)| match XPERF_FLAGS.iter().find(|(x, ..)| x == c) {
                Some((_, _, clear)) => if v == clear { "clear" } else { "set" }.to_string(),
                None => normal(v),
            })
            .collect();
        want.entry(k)
            .or_default()
            .push((f[1].parse().unwrap(), values));
    }
    let mut have: BTreeMap<&str, Vec<(i64, Vec<String>)>> = BTreeMap::new();
    for d in &b.json {
        let (task, opcode) = (
            d["task_name"].as_str().unwrap_or(""),
            d["opcode_name"].as_str().unwrap_or(""),
        );
        let Some(k) = kinds.iter().find(|k| opcode == **k) else {
            continue;
        };
        let expected_task = if *k == "Mark" {
            "PerfInfo"
        } else {
            "SysConfig"
        };
        assert_eq!(task, expected_task, "{d}");
        assert!(d.get("decode_issue").is_none(), "{d}");
        let p = &d["properties"];
        let values = columns[k]
            .iter()
            .map(|c| match (*k, c.as_str()) {
                ("NetworkInterface", c) => interface_column(c, p),
                // xperf prints the FILETIME's number, `dump` the time it means.
                ("BuildInfo", "InstallDate") => {
                    (hundred_ns(p["InstallDate"].as_str().unwrap()) + FILETIME_1970).to_string()
                }
                // TraceEvent names UnknownVolume's one field Value, as `dump` does.
                ("UnknownVolume", "NtPath") => json_value(&p["Value"]),
                (_, c) => json_value(&p[c]),
            })
            .collect();
        have.entry(k).or_default().push((b.us(d), values));
    }
    let n = |k: &str| want.get(k).map_or(0, Vec::len);
    assert_eq!(
        (n("NetworkInterface"), n("VolumeMapping"), n("Mark")),
        (8, 11, 4),
        "the sample's events"
    );
    for k in kinds {
        let mut w = want.remove(k).unwrap_or_default();
        let mut h = have.remove(k).unwrap_or_default();
        w.sort();
        h.sort();
        assert_eq!(h, w, "{k}");
    }
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
