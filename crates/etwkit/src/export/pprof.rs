//! Stack profiles as pprof profiles (`profile.proto`, gzip-compressed): what `go tool pprof`,
//! pprof's web UI, Speedscope and Grafana Pyroscope read.
//!
//! One writer for every report that converts into a [`StackProfile`]: its sample types, period
//! and default sample type (a heap report: Go's heap-profile types `alloc_objects`/count,
//! `alloc_space`/bytes, `inuse_objects`/count, `inuse_space`/bytes, the last the default; a CPU
//! report: `samples`/count and, when the trace gives the sampling interval, `cpu`/nanoseconds).
//! One sample per distinct (process, stack), its locations leaf first; one location per
//! distinct frame (address, function, line), each with a line naming its function (the frame's
//! function, else `module+0xOFFSET`, else `0xADDR`) and, when known, its source file and line.
//! Samples carry a numeric `pid` label (and a `process` label when the name is known). The
//! profile's comments are the report's notes. Only the stacks the report holds are in the
//! profile: build a heap report with a large enough `top`.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

use super::profile::{StackProfile, ToStackProfile, ValueType};
use crate::decode::symbols::Frame;

/// profile.proto field numbers (github.com/google/pprof/proto/profile.proto).
mod field {
    pub const SAMPLE_TYPE: u32 = 1;
    pub const SAMPLE: u32 = 2;
    pub const LOCATION: u32 = 4;
    pub const FUNCTION: u32 = 5;
    pub const STRING_TABLE: u32 = 6;
    pub const PERIOD_TYPE: u32 = 11;
    pub const PERIOD: u32 = 12;
    pub const COMMENT: u32 = 13;
    pub const DEFAULT_SAMPLE_TYPE: u32 = 14;
    // ValueType
    pub const VT_TYPE: u32 = 1;
    pub const VT_UNIT: u32 = 2;
    // Sample
    pub const S_LOCATION_ID: u32 = 1;
    pub const S_VALUE: u32 = 2;
    pub const S_LABEL: u32 = 3;
    // Label
    pub const L_KEY: u32 = 1;
    pub const L_STR: u32 = 2;
    pub const L_NUM: u32 = 3;
    // Location
    pub const LOC_ID: u32 = 1;
    pub const LOC_ADDRESS: u32 = 3;
    pub const LOC_LINE: u32 = 4;
    // Line
    pub const LINE_FUNCTION_ID: u32 = 1;
    pub const LINE_LINE: u32 = 2;
    // Function
    pub const F_ID: u32 = 1;
    pub const F_NAME: u32 = 2;
    pub const F_SYSTEM_NAME: u32 = 3;
    pub const F_FILENAME: u32 = 4;
}

/// A protobuf message being written.
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn key(&mut self, field: u32, wire: u8) {
        self.varint(((field as u64) << 3) | wire as u64);
    }
    /// A varint field (int64/uint64/bool); zero is the default and is left out.
    fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, 0);
            self.varint(v);
        }
    }
    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn msg(&mut self, field: u32, m: Msg) {
        self.bytes(field, &m.0);
    }
    fn packed(&mut self, field: u32, vs: &[u64]) {
        let mut m = Msg::default();
        for &v in vs {
            m.varint(v);
        }
        self.bytes(field, &m.0);
    }
}

/// The string table (index 0 is the empty string, as the format requires).
struct Strings {
    table: Vec<String>,
    index: HashMap<String, u64>,
}

impl Strings {
    fn new() -> Strings {
        Strings {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }
    fn id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as u64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The name pprof shows for a frame: its function, else `module+0xOFFSET` (`module!0xADDR`
/// without an offset), else `0xADDR`.
pub use super::profile::frame_function;

/// The uncompressed profile.proto bytes of `report` (a [heap report](crate::analysis::heap::HeapReport), a CPU report, a
/// [`StackProfile`]).
pub fn profile_bytes<P: ToStackProfile + ?Sized>(report: &P) -> Vec<u8> {
    stack_profile_bytes(&report.to_stack_profile())
}

/// The uncompressed profile.proto bytes of `profile`.
pub fn stack_profile_bytes(profile: &StackProfile) -> Vec<u8> {
    let mut strings = Strings::new();
    // Samples by (pid, process, frames), in the profile's order; equal keys add up.
    let mut order: Vec<SampleKey<'_>> = Vec::new();
    let mut values: BTreeMap<SampleKey<'_>, Vec<u64>> = BTreeMap::new();
    let width = profile.sample_types.len();
    for s in &profile.samples {
        let k = (s.pid, s.process.as_deref(), s.frames.as_slice());
        let v = values.entry(k).or_insert_with(|| {
            order.push(k);
            vec![0; width]
        });
        for (a, b) in v.iter_mut().zip(&s.values) {
            *a += b;
        }
    }

    let mut out = Msg::default();
    for t in &profile.sample_types {
        out.msg(field::SAMPLE_TYPE, value_type(&mut strings, t));
    }

    // Functions by (name, file); locations by (address, function, line): one per distinct frame.
    let mut functions = Functions::default();
    let mut locations: HashMap<(u64, u64, u32), u64> = HashMap::new();
    let mut location_msgs: Vec<Msg> = Vec::new();
    let no_stack = [Frame {
        function: Some("[no stack]".into()),
        ..Default::default()
    }];
    let pid_key = strings.id("pid");
    let process_key = strings.id("process");
    for k in &order {
        let v = &values[k];
        let (pid, process, frames) = *k;
        let frames: &[Frame] = if frames.is_empty() { &no_stack } else { frames };
        let mut ids = Vec::with_capacity(frames.len());
        for f in frames {
            let file = f.file.as_deref().unwrap_or_default();
            let fid = functions.id(&mut strings, &frame_function(f), file);
            let line = f.line.unwrap_or(0);
            let key = (f.address, fid, line);
            let lid = match locations.get(&key) {
                Some(id) => *id,
                None => {
                    let id = locations.len() as u64 + 1;
                    let mut m = Msg::default();
                    m.uint(field::LOC_ID, id);
                    m.uint(field::LOC_ADDRESS, f.address);
                    // Calls inlined at the address are lines before the function's own,
                    // innermost first (pprof's order: the last line is the caller the others
                    // were inlined into).
                    for i in &f.inlined {
                        let name = i.function.as_deref().unwrap_or("[inlined]");
                        let file = i.file.as_deref().unwrap_or_default();
                        let iid = functions.id(&mut strings, name, file);
                        m.msg(field::LOC_LINE, line_msg(iid, i.line.unwrap_or(0)));
                    }
                    m.msg(field::LOC_LINE, line_msg(fid, line));
                    location_msgs.push(m);
                    locations.insert(key, id);
                    id
                }
            };
            ids.push(lid);
        }
        let mut s = Msg::default();
        s.packed(field::S_LOCATION_ID, &ids);
        s.packed(field::S_VALUE, v);
        if let Some(p) = pid {
            let mut l = Msg::default();
            l.uint(field::L_KEY, pid_key);
            l.uint(field::L_NUM, p as u64);
            s.msg(field::S_LABEL, l);
        }
        if let Some(name) = process {
            let mut l = Msg::default();
            l.uint(field::L_KEY, process_key);
            l.uint(field::L_STR, strings.id(name));
            s.msg(field::S_LABEL, l);
        }
        out.msg(field::SAMPLE, s);
    }
    for m in location_msgs {
        out.msg(field::LOCATION, m);
    }
    for m in functions.msgs {
        out.msg(field::FUNCTION, m);
    }
    let pt = value_type(&mut strings, &profile.period_type);
    let comments: Vec<u64> = profile.comments.iter().map(|n| strings.id(n)).collect();
    let default_type = profile
        .sample_types
        .get(profile.default_sample_type)
        .map(|t| strings.id(&t.kind));
    for s in &strings.table {
        out.bytes(field::STRING_TABLE, s.as_bytes());
    }
    out.msg(field::PERIOD_TYPE, pt);
    out.uint(field::PERIOD, profile.period);
    for c in comments {
        out.key(field::COMMENT, 0);
        out.varint(c);
    }
    if let Some(t) = default_type {
        out.uint(field::DEFAULT_SAMPLE_TYPE, t);
    }
    out.0
}

/// A sample's identity: pid, process name, frames.
type SampleKey<'a> = (Option<u32>, Option<&'a str>, &'a [Frame]);

/// The profile's functions: one per (name, file), with its Function message.
#[derive(Default)]
struct Functions {
    ids: HashMap<(String, String), u64>,
    msgs: Vec<Msg>,
}

impl Functions {
    /// The id of function `name` in `file`, made (with its message) on first use.
    fn id(&mut self, strings: &mut Strings, name: &str, file: &str) -> u64 {
        if let Some(id) = self.ids.get(&(name.to_string(), file.to_string())) {
            return *id;
        }
        let id = self.ids.len() as u64 + 1;
        let mut m = Msg::default();
        m.uint(field::F_ID, id);
        let n = strings.id(name);
        m.uint(field::F_NAME, n);
        m.uint(field::F_SYSTEM_NAME, n);
        m.uint(field::F_FILENAME, strings.id(file));
        self.msgs.push(m);
        self.ids.insert((name.to_string(), file.to_string()), id);
        id
    }
}

/// A Line message: a function and a line in it.
fn line_msg(function: u64, line: u32) -> Msg {
    let mut l = Msg::default();
    l.uint(field::LINE_FUNCTION_ID, function);
    l.uint(field::LINE_LINE, line as u64);
    l
}

fn value_type(strings: &mut Strings, t: &ValueType) -> Msg {
    let mut vt = Msg::default();
    vt.uint(field::VT_TYPE, strings.id(&t.kind));
    vt.uint(field::VT_UNIT, strings.id(&t.unit));
    vt
}

/// Writes `report` (a [heap report](crate::analysis::heap::HeapReport), a CPU report, a [`StackProfile`]) as a gzip-compressed
/// pprof profile (the `.pb.gz` pprof tools expect).
pub fn write_pprof<P: ToStackProfile + ?Sized, W: Write>(report: &P, out: W) -> io::Result<()> {
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&profile_bytes(report))?;
    gz.finish()?.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_fields() {
        let mut m = Msg::default();
        m.varint(300);
        assert_eq!(m.0, [0xAC, 0x02]);
        let mut m = Msg::default();
        m.uint(2, 150);
        assert_eq!(m.0, [0x10, 0x96, 0x01]);
        m.uint(3, 0);
        assert_eq!(m.0.len(), 3, "zero fields are left out");
    }
}
