//! Built-in kernel MOF / KernelTraceControl tables against real traces:
//! - perfview_net.4.5.2.x64.etl: every COUNT line of TraceEvent's baseline for kernel and
//!   KernelTraceControl event types equals our count of records carrying that type, each laid out over
//!   its whole payload by the built-in schema; field values of the baseline's EVENT lines that are raw
//!   payload fields match the bytes at the place our schema puts them.
//! - etlparser_ShutdownPerfDiagLogger.etl: all 17,078 records have a built-in layout that fits.
//! - syzygy_*: FULL_HEADER32 classic records re-emitting Image/Process payloads (32- and 64-bit).

mod builtin_support;
mod common;

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;

use builtin_support::{layout, u32_at, utf16_at, Placed};
use etwkit::decode::{Plan, Value};
use etwkit::etl::{EtlFile, Order};
use etwkit::schema::builtin;
use etwkit::schema::{EventSchema, Property, PropertyKind, SchemaKey};
use etwkit::Guid;

fn tables() -> HashMap<SchemaKey, EventSchema> {
    builtin::schemas().into_iter().collect()
}

fn mof_key(r: &etwkit::EventRecord<'_>) -> SchemaKey {
    SchemaKey::Mof {
        class: r.provider,
        opcode: r.descriptor.opcode,
        version: r.descriptor.version,
    }
}

/// TraceEvent's "Provider/Task/Opcode" name for one of our schemas (its renamings of MOF names).
fn traceevent_name(s: &EventSchema) -> String {
    let task = s.task_name.as_deref().unwrap_or("");
    let op = s.opcode_name.as_deref().unwrap_or("");
    let te_op = match (task, op) {
        ("EventTrace", "Header") | ("ImageID", "ImageID") => "",
        ("EventTrace", "RDComplete") => "RundownComplete",
        (_, "End") => "Stop",
        (_, "DCEnd") => "DCStop",
        (_, "UnLoad") => "Unload",
        ("PerfInfo", "SampleProf") => "Sample",
        ("UdpIp", "SendIPV4") => "Send",
        ("UdpIp", "RecvIPV4") => "Recv",
        (_, o) => o,
    };
    let (provider, te_task) = match task {
        "ImageID" => ("KernelTraceControl", "ImageID"),
        "DiskIo" => ("Windows Kernel", "DiskIO"),
        "PageFault" => ("Windows Kernel", "Memory"),
        // TraceEvent files these two under the MOF provider name.
        "Image" if op == "KernelBase" => ("MSNT_SystemTrace", "Image"),
        "SystemConfig" if op == "Platform" => ("MSNT_SystemTrace", "SystemConfig"),
        t => ("Windows Kernel", t),
    };
    if te_op.is_empty() {
        format!("{provider}/{te_task}")
    } else {
        format!("{provider}/{te_task}/{te_op}")
    }
}

const KTC_METADATA: Guid = builtin::KTC_METADATA;

/// One EVENT line: time (ms) and its `Name=Value` pairs.
type EventLine = (f64, Vec<(String, String)>);

struct Baseline {
    counts: BTreeMap<String, u64>,
    /// name -> EVENT lines in order: (time ms, fields)
    events: BTreeMap<String, Vec<EventLine>>,
}

/// Parses TraceEvent's baseline: `COUNT name:n` and
/// `EVENT t: name PID=..; TID=..; PName=..; ProceNum=..; DataLen=..; Field=Value; ...`.
fn parse_baseline(text: &str) -> Baseline {
    let mut counts = BTreeMap::new();
    let mut events: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("COUNT ") {
            let (name, n) = rest.rsplit_once(':').expect("COUNT line has name:n");
            counts.insert(name.to_string(), n.trim().parse().expect("COUNT number"));
        } else if let Some(rest) = line.strip_prefix("EVENT ") {
            let (t, rest) = rest.split_once(": ").expect("EVENT time");
            let t: f64 = t.replace(',', "").parse().expect("EVENT time number");
            let (name, fields) = rest.split_once(" PID=").expect("EVENT name");
            let mut v = vec![];
            for kv in format!("PID={fields}").split("; ") {
                if let Some((k, val)) = kv.split_once('=') {
                    v.push((
                        k.trim().to_string(),
                        val.trim_end_matches(';').trim().to_string(),
                    ));
                }
            }
            events.entry(name.to_string()).or_default().push((t, v));
        }
    }
    Baseline { counts, events }
}

fn is_kernel_or_ktc(name: &str) -> bool {
    name.starts_with("Windows Kernel/")
        || name.starts_with("MSNT_SystemTrace/")
        || name.starts_with("KernelTraceControl/")
}

/// The Idle-thread samples TraceEvent's TraceLog drops (ThreadId 0, neither DPC nor ISR): the baseline
/// counts only the rest.
fn is_idle_sample(s: &EventSchema, placed: &[Placed], payload: &[u8]) -> bool {
    if s.task_name.as_deref() != Some("PerfInfo") || s.opcode_name.as_deref() != Some("SampleProf")
    {
        return false;
    }
    let at = |n: &str| placed.iter().find(|p| p.name == n).expect(n);
    let tid = u32_at(payload, at("ThreadId").offset);
    let flags = u16::from_le_bytes(
        payload[at("Flags").offset..at("Flags").offset + 2]
            .try_into()
            .unwrap(),
    );
    tid == 0 && flags & 3 == 0
}

/// What a comparison needs besides the bytes: the offset of the times TraceEvent printed (the baseline
/// shows UTC: its EndTime 20/07/29 00:07:10.69 is the header's FILETIME as is) and the trace's volume
/// mappings (TraceEvent prints image file names as DOS paths).
struct Ctx {
    utc_offset_minutes: i64,
    volumes: Vec<(String, String)>,
}

/// FILETIME -> TraceEvent's "yy/MM/dd HH:mm:ss.ff".
fn te_time(ft: u64, ctx: &Ctx) -> String {
    let secs = (ft / 10_000_000) as i64 - 11_644_473_600 - ctx.utc_offset_minutes * 60;
    let cs = (ft / 100_000) % 100;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // civil date from days since 1970-01-01 (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{:02}/{:02}/{:02} {:02}:{:02}:{:02}.{:02}",
        y % 100,
        m,
        d,
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        cs
    )
}

/// TraceEvent shows strings over 20 characters as their first 20 and "...".
fn te_str_eq(te: &str, ours: &str) -> bool {
    match te.strip_suffix("...") {
        Some(prefix) => ours.starts_with(prefix),
        None => ours == te,
    }
}

/// A baseline value against the bytes our layout points at, rendered by the property's out-type and
/// map the way TraceEvent prints (commas in numbers, "0x" hex, local times, DOS paths). Formatting
/// is normalised; values are not.
fn value_matches(te: &str, placed: &Placed, payload: &[u8], prop: &Property, ctx: &Ctx) -> bool {
    let bytes = &payload[placed.offset..placed.offset + placed.len];
    let (in_type, out_type) = match prop.kind {
        PropertyKind::Scalar { in_type, out_type } => (in_type, out_type),
        _ => return false,
    };
    let n = te.replace(',', "");
    let raw = {
        let mut v = [0u8; 8];
        v[..bytes.len().min(8)].copy_from_slice(&bytes[..bytes.len().min(8)]);
        u64::from_le_bytes(v)
    };
    if let Some(map) = &prop.map {
        // TraceEvent prints a [Flags] enum's set bits by name, ascending, joined by ", " ("None" when no
        // named bit is set; bits without a name, such as IrpFlags' priority hint, are not shown).
        let names: Vec<&str> = map
            .entries
            .iter()
            .filter(|(v, _)| *v != 0 && raw & v == *v)
            .map(|(_, s)| s.as_str())
            .collect();
        let ours = if names.is_empty() {
            "None".to_string()
        } else {
            names.join(", ")
        };
        return match te.strip_suffix("...") {
            Some(prefix) => ours.starts_with(prefix),
            None => ours == te,
        };
    }
    match (in_type, out_type) {
        (1, _) => {
            let mut s = utf16_at(payload, placed.offset, placed.len);
            if prop.name == "FileName" {
                // kernel path -> DOS path by the trace's VolumeMapping events; a bare "\Windows\..." is on
                // the system drive
                match ctx
                    .volumes
                    .iter()
                    .find(|(nt, _)| s.starts_with(nt.as_str()))
                {
                    Some((nt, dos)) => s = format!("{dos}{}", &s[nt.len()..]),
                    None if s.starts_with('\\') => s = format!("C:{s}"),
                    None => {}
                }
            }
            te_str_eq(te, &s)
        }
        (2, _) => te_str_eq(
            te,
            &bytes
                .iter()
                .take_while(|&&b| b != 0)
                .map(|&b| b as char)
                .collect::<String>(),
        ),
        (15, _) => te_str_eq(te, &Guid::from_le_bytes(bytes).unwrap().to_string()),
        (14, 24) => te_str_eq(
            te,
            &std::net::Ipv6Addr::from(<[u8; 16]>::try_from(bytes).unwrap()).to_string(),
        ),
        (8, 23) => te == std::net::Ipv4Addr::from(<[u8; 4]>::try_from(bytes).unwrap()).to_string(),
        (6, 22) => n.parse::<u64>().ok() == Some(u16::from_be_bytes([bytes[0], bytes[1]]) as u64),
        (17, _) => te_str_eq(te, &te_time(raw, ctx)),
        _ => {
            if let Some(h) = n.strip_prefix("0x") {
                u64::from_str_radix(h, 16).ok() == Some(raw)
            } else if n == "True" || n == "False" {
                (raw != 0) == (n == "True")
            } else if let Some(prefix) = n.strip_suffix("...") {
                (raw as i64).to_string().starts_with(prefix) || raw.to_string().starts_with(prefix)
            } else if let Ok(i) = n.parse::<i64>() {
                let signed = match bytes.len() {
                    1 => raw as u8 as i8 as i64,
                    2 => raw as u16 as i16 as i64,
                    4 => raw as u32 as i32 as i64,
                    _ => raw as i64,
                };
                // TraceEvent prints some unsigned fields as signed (-1 for all ones)
                i == signed || i as u64 == raw
            } else {
                false
            }
        }
    }
}

/// A decoded value against TraceEvent's text, with the same formatting normalisation as
/// [`value_matches`].
fn decoded_matches(te: &str, v: &Value, prop: &Property, ctx: &Ctx) -> bool {
    let n = te.replace(',', "");
    let num = |x: u64, signed: i64| {
        if let Some(h) = n.strip_prefix("0x") {
            u64::from_str_radix(h, 16).ok() == Some(x)
        } else if let Some(prefix) = n.strip_suffix("...") {
            signed.to_string().starts_with(prefix) || x.to_string().starts_with(prefix)
        } else {
            // TraceEvent prints 32-bit fields as signed (-1 for 0xffffffff)
            n.parse::<i64>().is_ok_and(|i| {
                i == signed
                    || i as u64 == x
                    || (x <= u32::MAX as u64 && i == x as u32 as i32 as i64)
            }) || n.parse::<u64>().is_ok_and(|u| u == x)
        }
    };
    match v {
        // a flags/enum value with no named bit: TraceEvent says "None"
        Value::U64(0) if prop.map.is_some() => te == "None",
        Value::String(s) => {
            let mut s = s.clone();
            if prop.name == "FileName" {
                match ctx
                    .volumes
                    .iter()
                    .find(|(nt, _)| s.starts_with(nt.as_str()))
                {
                    Some((nt, dos)) => s = format!("{dos}{}", &s[nt.len()..]),
                    None if s.starts_with('\\') => s = format!("C:{s}"),
                    None => {}
                }
            }
            te_str_eq(te, &s)
        }
        // a flags value whose set bits have no name (IrpFlags with only its priority hint)
        Value::Hex(_) if prop.map.is_some() && te == "None" => true,
        Value::U64(x) | Value::Hex(x) | Value::Pointer(x) => num(*x, *x as i64),
        // TraceEvent prints 32-bit unsigned all-ones as -1
        Value::I64(i) => num(*i as u64, *i),
        Value::Port(p) => num(*p as u64, *p as i64),
        Value::NtStatus(x) => num(*x as u64, *x as i32 as i64),
        Value::Bool(b) => te == if *b { "True" } else { "False" },
        Value::Guid(g) => te_str_eq(te, &g.to_string()),
        Value::Ipv4(a) => te == a.to_string(),
        Value::Ipv6(a) => te_str_eq(te, &a.to_string()),
        Value::FileTime(ft) => te_str_eq(te, &te_time(*ft as u64, ctx)),
        // Flags: both join the named bits with ", "; TraceEvent leaves unnamed bits (IrpFlags'
        // priority hint) out, ours appends them as hex.
        Value::Mapped { value, name } => {
            let named: Vec<&str> = name.split(", ").filter(|s| !s.starts_with("0x")).collect();
            let ours = if named.is_empty() {
                "None".to_string()
            } else {
                named.join(", ")
            };
            te == name
                || (*value == 0 && te == "None")
                || match te.strip_suffix("...") {
                    Some(prefix) => ours.starts_with(prefix),
                    None => ours == te,
                }
        }
        _ => false,
    }
}

#[test]
fn perfview_net_x64_matches_traceevent_counts_and_values() {
    let test = "perfview_net_x64_matches_traceevent_counts_and_values";
    let Some((lines, fields)) = against_baseline(test, "perfview_net.4.5.2.x64") else {
        return;
    };
    assert_eq!(
        lines, 56,
        "kernel/KernelTraceControl COUNT lines in the baseline"
    );
    assert!(fields >= 1000, "only {fields} baseline fields compared");
}

/// The gcevents / gcrundown traces carry one kernel record, the logfile header; TraceEvent counts and
/// prints it.
#[test]
fn perfview_gc_traces_header_matches_traceevent() {
    let test = "perfview_gc_traces_header_matches_traceevent";
    for (etl, fields) in [("perfview_gcevents", 20), ("perfview_gcrundownevents", 20)] {
        let Some((lines, n)) = against_baseline(test, etl) else {
            return;
        };
        assert_eq!(
            (lines, n),
            (1, fields),
            "{etl}: COUNT lines, EVENT fields compared"
        );
    }
}

/// Compares `NAME.etl` (the gcrundown trace is `NAME.clrRundown.etl`) with `reference/NAME.baseline.txt`: every kernel/KernelTraceControl COUNT line
/// must equal our count, every field of their EVENT lines must match the payload field our schema
/// places (or be listed as derived / known to differ). Returns (COUNT lines, EVENT fields compared).
fn against_baseline(test: &str, name: &str) -> Option<(usize, usize)> {
    let etl = match name {
        "perfview_gcrundownevents" => "perfview_gcrundownevents.clrRundown.etl".to_string(),
        n => format!("{n}.etl"),
    };
    let path = common::sample(&etl, test)?;
    let dir = common::samples_dir(test)?;
    let text = std::fs::read_to_string(dir.join(format!("reference/{name}.baseline.txt"))).unwrap();
    let base = parse_baseline(&text);
    let tables = tables();
    let file = EtlFile::open(&path).unwrap();

    let mut ours: BTreeMap<String, u64> = BTreeMap::new();
    let mut laid_out_badly: Vec<String> = vec![];
    // first EVENT occurrences to compare: name -> seen so far
    let mut nth: HashMap<String, usize> = HashMap::new();
    let mut compared_fields = 0usize;
    let mut mismatches: Vec<String> = vec![];
    let mut te_only: BTreeMap<String, usize> = BTreeMap::new();
    let mut plans: HashMap<SchemaKey, Plan> = HashMap::new();
    let mut undecoded: Vec<String> = vec![];
    let mut decoded_records = 0u64;
    let mut ctx = Ctx {
        utc_offset_minutes: 0,
        volumes: vec![],
    };
    let summary = file.for_each(Order::Time, |r| {
        if r.hook_id.is_none() && !r.header_type.is_classic() {
            return ControlFlow::Continue(());
        }
        if r.provider == KTC_METADATA {
            let op = match r.descriptor.opcode {
                32 => "EventInfo",
                33 => "EventMapInfo",
                _ => "?",
            };
            *ours
                .entry(format!("KernelTraceControl/MetaData/{op}"))
                .or_default() += 1;
            return ControlFlow::Continue(());
        }
        let Some(schema) = tables.get(&mof_key(r)) else {
            if r.provider == builtin::kernel_mof::KTC_SYS_CONFIG {
                *ours
                    .entry(format!(
                        "Windows Kernel/SysConfig/Opcode({})",
                        r.descriptor.opcode
                    ))
                    .or_default() += 1;
            }
            return ControlFlow::Continue(());
        };
        let ptr = r.pointer_size;
        let placed = match layout(schema, &r.payload, ptr) {
            Ok((placed, end)) => {
                let trailing_ok = schema.task_name.as_deref() == Some("StackWalk");
                if end != r.payload.len() && !trailing_ok {
                    laid_out_badly.push(format!(
                        "{:?}: ends at {end} of {}",
                        mof_key(r),
                        r.payload.len()
                    ));
                }
                placed
            }
            Err(e) => {
                laid_out_badly.push(format!("{:?}: {e}", mof_key(r)));
                return ControlFlow::Continue(());
            }
        };
        // the decoder with the built-in schema: every record decodes, over the same bytes
        let plan = plans.entry(mof_key(r)).or_insert_with(|| Plan::new(schema));
        let decoded = match plan.decode_counted(&r.payload, ptr) {
            Ok((props, used)) => {
                let end = placed.last().map_or(0, |p| p.offset + p.len);
                if used != end {
                    undecoded.push(format!(
                        "{:?}: decoder used {used}, layout {end}",
                        mof_key(r)
                    ));
                }
                props
            }
            Err(e) => {
                undecoded.push(format!("{:?}: {e}", mof_key(r)));
                return ControlFlow::Continue(());
            }
        };
        decoded_records += 1;
        if is_idle_sample(schema, &placed, &r.payload) {
            return ControlFlow::Continue(());
        }
        let name = traceevent_name(schema);
        *ours.entry(name.clone()).or_default() += 1;
        if name == "Windows Kernel/SysConfig/VolumeMapping" {
            let nt = utf16_at(&r.payload, placed[0].offset, placed[0].len);
            let dos = utf16_at(&r.payload, placed[1].offset, placed[1].len);
            if !dos.is_empty() {
                ctx.volumes.push((nt, dos));
            }
        }
        // EVENT lines: the baseline shows the first few of each type in time order
        let i = nth.entry(name.clone()).or_default();
        if let Some(lines) = base.events.get(&name) {
            if let Some((_, fields)) = lines.get(*i) {
                for (k, v) in fields {
                    if matches!(k.as_str(), "PID" | "TID" | "PName" | "ProceNum") {
                        continue;
                    }
                    if k == "DataLen" {
                        assert_eq!(
                            v.replace(',', ""),
                            r.payload.len().to_string(),
                            "{name}#{i} DataLen"
                        );
                        continue;
                    }
                    let ours_name = alias(&name, k);
                    let Some(p) = placed
                        .iter()
                        .find(|p| p.name.eq_ignore_ascii_case(&ours_name))
                    else {
                        *te_only.entry(format!("{name}.{k}")).or_default() += 1;
                        continue;
                    };
                    let prop = schema.properties.iter().find(|q| q.name == p.name).unwrap();
                    if KNOWN_TRACEEVENT_DIFFERENCES.contains(&(name.as_str(), k.as_str())) {
                        continue;
                    }
                    compared_fields += 1;
                    if !value_matches(v, p, &r.payload, prop, &ctx) {
                        mismatches.push(format!(
                            "{name}#{i}.{k}: TraceEvent {v}, bytes {:02x?}",
                            &r.payload[p.offset..p.offset + p.len]
                        ));
                    }
                    let dv = decoded.get(&p.name).expect("decoded property");
                    if !decoded_matches(v, dv, prop, &ctx) {
                        mismatches.push(format!("{name}#{i}.{k}: TraceEvent {v}, decoded {dv:?}"));
                    }
                }
            }
        }
        *i += 1;
        ControlFlow::Continue(())
    });
    assert_eq!(summary.bad_records, 0);
    assert!(
        undecoded.is_empty(),
        "{name}: records the decoder did not decode: {:#?}",
        &undecoded[..undecoded.len().min(20)]
    );
    eprintln!(
        "{name}: {decoded_records} kernel/KernelTraceControl records decoded with built-in schemas"
    );
    assert!(
        laid_out_badly.is_empty(),
        "layouts that do not fit: {:#?}",
        &laid_out_badly[..laid_out_badly.len().min(20)]
    );

    let mut checked = 0;
    for (event, n) in base.counts.iter().filter(|(n, _)| is_kernel_or_ktc(n)) {
        assert_eq!(
            ours.get(event),
            Some(n),
            "{name}: COUNT {event}: TraceEvent {n}, ours {:?}",
            ours.get(event)
        );
        checked += 1;
    }
    assert!(
        mismatches.is_empty(),
        "{name}: {} field mismatches: {:#?}",
        mismatches.len(),
        mismatches
    );
    eprintln!("{name}: {checked} COUNT lines and {compared_fields} EVENT field values match");
    // Fields TraceEvent derives rather than reads from the payload — listed so a new one shows up:
    // UtcOffsetMinutes (header bias), BuildTime (from TimeDateStamp), ParentThreadID/ParentProcessID
    // (from the record header), ProcessorNumber/Priority/ExecutingDPC/ExecutingISR/Rank (buffer CPU and
    // SampleProf Flags bits; DiskIO Priority from IrpFlags), ElapsedTimeMSec/DiskServiceTimeMSec (from
    // HighResResponseTime/InitialTime and the clock), FileName (DiskIO/HardFault: looked up by FileObject),
    // ThreadName (Win8 Thread v3 payloads have none), UdpIp "context"/"dsize" (UdpIp v0 names
    // TraceEvent keeps for v2 records; their other fields match ours by name).
    let allowed_te_only = [
        "UtcOffsetMinutes",
        "BuildTime",
        "ParentThreadID",
        "ParentProcessID",
        "ProcessorNumber",
        "Priority",
        "ExecutingDPC",
        "ExecutingISR",
        "Rank",
        "ElapsedTimeMSec",
        "DiskServiceTimeMSec",
        "FileName",
        "ThreadName",
        "context",
        "dsize",
    ];
    let unknown: Vec<&String> = te_only
        .keys()
        .filter(|k| !allowed_te_only.contains(&k.rsplit('.').next().unwrap()))
        .collect();
    assert!(
        unknown.is_empty(),
        "{name}: TraceEvent fields without a payload field of ours: {unknown:#?}"
    );
    Some((checked, compared_fields))
}

/// Fields where TraceEvent shows something other than the payload's own value (checked by hand):
/// - KernelTraceControl ImageID "ProcessID" is always 0 in TraceEvent's output while the payload's u32 at
///   offset 2*pointer equals the record's PID (4 for System's images);
/// - SystemConfig Services "ProcessName": TraceEvent replaces it by the name of the process ProcessId
///   names ("Idle" for an empty field, "svchost" for "svchost.exe");
const KNOWN_TRACEEVENT_DIFFERENCES: &[(&str, &str)] = &[
    ("KernelTraceControl/ImageID", "ProcessID"),
    ("Windows Kernel/SystemConfig/Services", "ProcessName"),
];

/// TraceEvent's field name -> ours where they differ.
fn alias(event: &str, te: &str) -> String {
    match (event, te) {
        ("Windows Kernel/EventTrace", "SessionName") => "SessionNameString",
        ("Windows Kernel/EventTrace", "LogFileName") => "LogFileNameString",
        (_, "GuidSig") => "GuidSig",
        (_, "PDBFileName") => "PdbFileName",
        (_, "OriginalFileName") if event.starts_with("KernelTraceControl") => "OriginalFileName",
        (e, "SampleSource") if e.starts_with("Windows Kernel/PerfInfo/Collection") => "Source",
        (e, "FileKey")
            if e.starts_with("Windows Kernel/DiskIO") || e == "Windows Kernel/Memory/HardFault" =>
        {
            "FileObject"
        }
        (e, "PageDirectoryBase") if e.starts_with("Windows Kernel/Process") => "DirectoryTableBase",
        (e, "MemoryCount") if e.starts_with("Windows Kernel/Process/PerfCtr") => "PageFaultCount",
        // Thread v3: TraceEvent still calls the Affinity slot StartAddr
        (e, "StartAddr") if e.starts_with("Windows Kernel/Thread") => "Affinity",
        (_, k) => k,
    }
    .to_string()
}

#[test]
fn shutdown_perf_diag_logger_every_record_has_a_fitting_layout() {
    let test = "shutdown_perf_diag_logger_every_record_has_a_fitting_layout";
    let Some(path) = common::sample("etlparser_ShutdownPerfDiagLogger.etl", test) else {
        return;
    };
    let tables = tables();
    let file = EtlFile::open(&path).unwrap();
    let (mut total, mut exact, mut thread_name_tail) = (0u64, 0u64, 0u64);
    let mut problems: Vec<String> = vec![];
    let mut by_task: BTreeMap<String, u64> = BTreeMap::new();
    let mut plans: HashMap<SchemaKey, Plan> = HashMap::new();
    let mut decoded = 0u64;
    let mut thread_names: BTreeMap<String, u64> = BTreeMap::new();
    let summary = file.for_each(Order::File, |r| {
        total += 1;
        let Some(s) = tables.get(&mof_key(r)) else {
            problems.push(format!(
                "no layout for hook {:04x?} v{}",
                r.hook_id, r.descriptor.version
            ));
            return ControlFlow::Continue(());
        };
        *by_task
            .entry(format!(
                "{}/{}",
                s.task_name.as_deref().unwrap_or("?"),
                s.opcode_name.as_deref().unwrap_or("?")
            ))
            .or_default() += 1;
        let plan = plans.entry(mof_key(r)).or_insert_with(|| Plan::new(s));
        match plan.decode_counted(&r.payload, r.pointer_size) {
            Ok((props, used)) => {
                decoded += 1;
                if used != r.payload.len() {
                    problems.push(format!("{:?}: decoder read {used} bytes", mof_key(r)));
                }
                if let Some(Value::String(n)) = props.get("ThreadName") {
                    *thread_names.entry(n.to_string()).or_default() += 1;
                }
            }
            Err(e) => problems.push(format!("{:?}: decoder: {e}", mof_key(r))),
        }
        match layout(s, &r.payload, r.pointer_size) {
            Ok((placed, end)) if end == r.payload.len() => {
                exact += 1;
                // Win10 appends a NUL-terminated UTF-16 ThreadName to Thread v3 (Win8's v3 has
                // none): the layout's last field, read while the payload holds it.
                if placed.last().is_some_and(|p| p.name == "ThreadName") {
                    thread_name_tail += 1;
                }
            }
            Ok((_, end)) => problems.push(format!(
                "{:?} ends at {end} of {}",
                mof_key(r),
                r.payload.len()
            )),
            Err(e) => problems.push(format!("{:?}: {e}", mof_key(r))),
        }
        ControlFlow::Continue(())
    });
    assert_eq!(summary.records, 17_078);
    assert_eq!(
        decoded, 17_078,
        "records decoded by the decoder with built-in schemas"
    );
    assert_eq!(total, 17_078);
    assert!(
        problems.is_empty(),
        "{} records without a fitting layout: {:?}",
        problems.len(),
        &problems[..problems.len().min(10)]
    );
    assert_eq!(exact, 17_078);
    assert_eq!(
        thread_name_tail, 3058,
        "Thread v3 records (all carry the Win10 ThreadName tail)"
    );
    // The names as the payloads spell them (UTF-16, up to the NUL); most threads have none.
    assert_eq!(thread_names.values().sum::<u64>(), 3058);
    assert_eq!(thread_names.get(""), Some(&2964));
    assert_eq!(thread_names.get("DManip Delegate Thread"), Some(&18));
    assert_eq!(thread_names.get("Win32k Raw Input Thread"), Some(&4));
    assert_eq!(by_task.get("Image/DCStart"), Some(&6745));
    assert_eq!(by_task.get("Process/Defunct"), Some(&5));
}

#[test]
fn syzygy_classic_image_and_process_events() {
    let test = "syzygy_classic_image_and_process_events";
    let Some(dir) = common::samples_dir(test) else {
        return;
    };
    let tables = tables();
    let image = builtin::kernel_group_guid(0x14).unwrap();
    let process = builtin::kernel_group_guid(0x03).unwrap();
    let cases: [(&str, u8, u32, usize); 7] = [
        // file, payload pointer size (only the file name says 64: every header is 32-bit), pid, records
        ("syzygy_log_lib_image_data_32_v0.etl", 4, 7644, 26),
        ("syzygy_log_lib_image_data_32_v2.etl", 4, 7644, 26),
        ("syzygy_log_lib_image_data_64_v2.etl", 8, 7644, 26),
        ("syzygy_viewer_test_data_32_v0.etl", 4, 4192, 26),
        ("syzygy_log_lib_process_data_32_v1.etl", 4, 7644, 2),
        ("syzygy_log_lib_process_data_32_v3.etl", 4, 7644, 8),
        ("syzygy_log_lib_process_data_64_v3.etl", 8, 7644, 8),
    ];
    for (name, ptr, pid, n) in cases {
        let file = EtlFile::open(dir.join(name)).unwrap();
        let mut seen = 0;
        file.for_each(Order::File, |r| {
            if !r.header_type.is_classic() {
                return ControlFlow::Continue(());
            }
            seen += 1;
            assert_eq!(r.pointer_size, 4, "{name}: FULL_HEADER32");
            let s = tables
                .get(&mof_key(r))
                .unwrap_or_else(|| panic!("{name}: no layout for {:?}", mof_key(r)));
            let (placed, end) =
                layout(s, &r.payload, ptr).unwrap_or_else(|e| panic!("{name}: {e}"));
            let at = |f: &str| {
                placed
                    .iter()
                    .find(|p| p.name == f)
                    .unwrap_or_else(|| panic!("{name}: no {f}"))
            };
            if r.provider == image {
                assert_eq!(end, r.payload.len(), "{name}: image payload fully laid out");
                let file_field = if r.descriptor.version == 0 {
                    "ImageFileName"
                } else {
                    "FileName"
                };
                let f = at(file_field);
                let fname = utf16_at(&r.payload, f.offset, f.len).to_ascii_lowercase();
                assert!(
                    fname.ends_with(".dll") || fname.ends_with(".exe"),
                    "{name}: {fname}"
                );
                if r.descriptor.version >= 2 {
                    assert_eq!(
                        u32_at(&r.payload, at("ProcessId").offset),
                        pid,
                        "{name}: ProcessId"
                    );
                }
                // the decoder agrees, with the pointer size the file name gives
                let props = etwkit::decode::decode_properties(s, &r.payload, ptr)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(
                    props
                        .get(file_field)
                        .and_then(Value::as_str)
                        .map(str::to_ascii_lowercase),
                    Some(fname.clone()),
                    "{name}: decoded file name"
                );
                if r.descriptor.version >= 2 {
                    assert_eq!(
                        props.get("ProcessId").and_then(Value::as_u64),
                        Some(pid as u64),
                        "{name}"
                    );
                }
            } else {
                assert_eq!(r.provider, process, "{name}");
                assert_eq!(
                    end,
                    r.payload.len(),
                    "{name}: process payload fully laid out"
                );
                let image = at("ImageFileName");
                let image =
                    String::from_utf8_lossy(&r.payload[image.offset..image.offset + image.len - 1])
                        .to_string();
                let (pid, ppid) = (
                    u32_at(&r.payload, at("ProcessId").offset),
                    u32_at(&r.payload, at("ParentId").offset),
                );
                match r.descriptor.opcode {
                    // Start / End: the traced notepad
                    1 | 2 => assert_eq!(
                        (pid, ppid, image.as_str()),
                        (1776, 988, "notepad.exe"),
                        "{name}"
                    ),
                    // DCStart / DCEnd rundown: Idle and System first
                    _ => match pid {
                        0 => assert_eq!(image, "Idle", "{name}"),
                        4 => assert_eq!(image, "System", "{name}"),
                        _ => assert!(image.ends_with(".exe") && ppid > 0, "{name}: {pid} {image}"),
                    },
                }
            }
            ControlFlow::Continue(())
        });
        assert_eq!(seen, n, "{name}: classic records");
    }
}

/// Every kernel and classic record of every sample that has a built-in layout is laid out over its
/// whole payload; the records without one are exactly the known gaps listed here.
#[test]
fn every_sample_kernel_and_classic_record_fits_its_builtin_layout() {
    let test = "every_sample_kernel_and_classic_record_fits_its_builtin_layout";
    let Some(files) = common::all_samples(test) else {
        return;
    };
    let tables = tables();
    let mut fitted = 0u64;
    let mut plans: HashMap<SchemaKey, Plan> = HashMap::new();
    let mut decoder_differs: Vec<String> = vec![];
    let mut no_layout: BTreeMap<String, u64> = BTreeMap::new();
    let mut problems: Vec<String> = vec![];
    for path in &files {
        let fname = path.file_name().unwrap().to_string_lossy().to_string();
        let ptr_override = fname.starts_with("syzygy") && fname.contains("_64_");
        let file = EtlFile::open(path).unwrap();
        file.for_each(Order::File, |r| {
            if !(r.header_type.is_kernel() || r.header_type.is_classic()) {
                return ControlFlow::Continue(());
            }
            let Some(s) = tables.get(&mof_key(r)) else {
                let what = match r.hook_id {
                    Some(h) => format!("hook 0x{h:04x} v{}", r.descriptor.version),
                    None => format!(
                        "{} op {} v{}",
                        r.provider, r.descriptor.opcode, r.descriptor.version
                    ),
                };
                *no_layout.entry(what).or_default() += 1;
                return ControlFlow::Continue(());
            };
            let ptr = if ptr_override { 8 } else { r.pointer_size };
            let plan = plans.entry(mof_key(r)).or_insert_with(|| Plan::new(s));
            let used = plan.decode_counted(&r.payload, ptr).map(|(_, used)| used);
            if let Ok((_, end)) = layout(s, &r.payload, ptr) {
                if used.as_ref().ok() != Some(&end) {
                    decoder_differs.push(format!(
                        "{fname} {:?}: decoder {used:?}, layout {end}",
                        mof_key(r)
                    ));
                }
            }
            match layout(s, &r.payload, ptr) {
                Ok((_, end)) if end == r.payload.len() => fitted += 1,
                // frames to the end of the payload
                Ok(_) if s.task_name.as_deref() == Some("StackWalk") => fitted += 1,
                Ok((_, end)) => problems.push(format!(
                    "{fname} {:?}: {end} of {}",
                    mof_key(r),
                    r.payload.len()
                )),
                Err(e) => problems.push(format!("{fname} {:?}: {e}", mof_key(r))),
            }
            ControlFlow::Continue(())
        });
    }
    assert!(
        problems.is_empty(),
        "{} records do not fit: {:#?}",
        problems.len(),
        &problems[..problems.len().min(20)]
    );
    // Known gaps: KernelTraceControl MetaData (TDH blobs, decoded by schema::tdh), KernelTraceControl
    // SysConfig 37 and PerfTrackMetaData 34 (merge-time blobs with no public layout),
    // EventTrace 0x0052, SystemConfig 0x0B12 (optical media) and 0x0B1C: no layout in the facts we
    // have. (SysConfig 36, NetworkInterface, and PerfInfo 34, Mark, have one: every record of them
    // fits it, and xperf_dumper.rs checks their values.)
    let gaps: Vec<&str> = no_layout.keys().map(String::as_str).collect();
    assert_eq!(
        gaps,
        [
            "9b79ee91-b5fd-41c0-a243-4248e266e9d0 op 37 v0",
            "bbccf6c1-6cd1-48c4-80ff-839482e37671 op 32 v0",
            "bbccf6c1-6cd1-48c4-80ff-839482e37671 op 33 v0",
            "bf6ef1cb-89b5-490a-80ac-b180cfbcff0f op 34 v1",
            "hook 0x0052 v2",
            "hook 0x0b12 v2",
            "hook 0x0b1c v2",
        ],
        "records without a built-in layout: {no_layout:?}"
    );
    eprintln!(
        "{fitted} kernel/classic records fit their built-in layout; without one: {no_layout:?}"
    );
    // The decoder reads WBEMSID as the layout does, syzygy's re-emitted Process events included
    // (TOKEN_USER with a null PSID followed by a SID: until session 26 the decoder read "no SID" and
    // its 18 records stopped short, ImageFileName reading the SID's bytes).
    assert!(
        decoder_differs.is_empty(),
        "decoder and layout disagree: {decoder_differs:#?}"
    );
    // (192,389 before SysConfig NetworkInterface, 568 records in 12 samples, and PerfInfo Mark, 8;
    // 192,965 before WinSat, 33 records in 11 samples, and PerfTrackMetaData 33, 52.)
    assert_eq!(
        fitted, 193_050,
        "kernel/classic records with a fitting built-in layout"
    );
}
