//! One column chunk being written: an Arrow column's values as Parquet levels and values, cut into
//! pages (dictionary-encoded while the dictionary stays small, plain otherwise), with its
//! statistics and the schema elements that describe it.

use std::borrow::Cow;
use std::hash::Hasher;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, GenericByteArray};
use arrow_schema::{DataType, Field, TimeUnit};

use super::super::arrow::same_bytes;
use super::delta;
use super::rle;
use super::thrift;
use super::Error;

/// Physical types (Parquet's `Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Physical {
    Boolean = 0,
    Int32 = 1,
    Int64 = 2,
    Float = 4,
    Double = 5,
    ByteArray = 6,
}

/// Encodings (Parquet's `Encoding`).
pub const PLAIN: i32 = 0;
pub const RLE: i32 = 3;
pub const DELTA_BINARY_PACKED: i32 = 5;
pub const RLE_DICTIONARY: i32 = 8;

/// A dictionary's plain size above which a column chunk goes on plain.
pub const DICTIONARY_LIMIT: usize = 1 << 20;

/// The logical type of a leaf or group, as the footer's schema gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logical {
    None,
    String,
    List,
    Integer { bits: i8, signed: bool },
    Timestamp { utc: bool, unit: TimeUnit },
}

/// One element of the footer's schema (a leaf, or a list's groups).
#[derive(Clone, Debug)]
pub struct SchemaElement {
    pub name: String,
    pub physical: Option<Physical>,
    /// 0 required, 1 optional, 2 repeated.
    pub repetition: i32,
    pub children: Option<i32>,
    pub logical: Logical,
}

impl SchemaElement {
    pub fn write(&self, w: &mut thrift::Writer) {
        w.begin(None);
        if let Some(p) = self.physical {
            w.i32(1, p as i32);
        }
        w.i32(3, self.repetition);
        w.binary(4, self.name.as_bytes());
        if let Some(n) = self.children {
            w.i32(5, n);
        }
        // Converted types beside logical ones, for readers that know only those.
        let converted = match self.logical {
            Logical::String => Some(0),
            Logical::List => Some(3),
            Logical::Integer { bits, signed } => Some(match (bits, signed) {
                (8, false) => 11,
                (16, false) => 12,
                (32, false) => 13,
                (64, false) => 14,
                (8, true) => 15,
                (16, true) => 16,
                (32, true) => 17,
                _ => 18,
            }),
            Logical::Timestamp {
                utc: true,
                unit: TimeUnit::Millisecond,
            } => Some(9),
            Logical::Timestamp {
                utc: true,
                unit: TimeUnit::Microsecond,
            } => Some(10),
            _ => None,
        };
        if let Some(c) = converted {
            w.i32(6, c);
        }
        // LogicalType, a union: the member's field id names the type.
        match self.logical {
            Logical::None => {}
            Logical::String => {
                w.begin(Some(10));
                w.begin(Some(1));
                w.end();
                w.end();
            }
            Logical::List => {
                w.begin(Some(10));
                w.begin(Some(3));
                w.end();
                w.end();
            }
            Logical::Integer { bits, signed } => {
                w.begin(Some(10));
                w.begin(Some(10));
                w.i8(1, bits);
                w.bool(2, signed);
                w.end();
                w.end();
            }
            Logical::Timestamp { utc, unit } => {
                w.begin(Some(10));
                w.begin(Some(8));
                w.bool(1, utc);
                w.begin(Some(2));
                w.begin(Some(match unit {
                    TimeUnit::Millisecond => 1,
                    TimeUnit::Microsecond => 2,
                    _ => 3,
                }));
                w.end();
                w.end();
                w.end();
                w.end();
            }
        }
        w.end();
    }
}

/// How one column is written.
#[derive(Clone, Copy, Debug)]
pub struct ColumnOptions {
    pub dictionary: bool,
    pub statistics: bool,
    /// DELTA_BINARY_PACKED instead of plain (integer columns that are not lists, no dictionary).
    pub delta: bool,
}

/// What a leaf column's values are and where they sit in the schema.
#[derive(Clone, Debug)]
pub struct Leaf {
    pub path: Vec<String>,
    pub physical: Physical,
    /// The schema elements this top-level column takes (one, or three for a list).
    pub elements: Vec<SchemaElement>,
    pub max_def: u16,
    pub max_rep: u16,
    /// Whether the column itself is nullable (its definition level counts it), and for a list,
    /// whether its items are.
    pub optional: bool,
    pub list: Option<bool>,
    /// Integers compared as unsigned for statistics.
    pub unsigned: bool,
}

fn physical_of(t: &DataType) -> Result<(Physical, Logical), Error> {
    Ok(match t {
        // Keyed text (`export::arrow`'s keyed names): text in the file.
        DataType::Dictionary(k, v) if **k == DataType::UInt32 && **v == DataType::Utf8 => {
            (Physical::ByteArray, Logical::String)
        }
        DataType::Boolean => (Physical::Boolean, Logical::None),
        DataType::Int8 => (
            Physical::Int32,
            Logical::Integer {
                bits: 8,
                signed: true,
            },
        ),
        DataType::Int16 => (
            Physical::Int32,
            Logical::Integer {
                bits: 16,
                signed: true,
            },
        ),
        DataType::Int32 => (Physical::Int32, Logical::None),
        DataType::Int64 => (Physical::Int64, Logical::None),
        DataType::UInt8 => (
            Physical::Int32,
            Logical::Integer {
                bits: 8,
                signed: false,
            },
        ),
        DataType::UInt16 => (
            Physical::Int32,
            Logical::Integer {
                bits: 16,
                signed: false,
            },
        ),
        DataType::UInt32 => (
            Physical::Int32,
            Logical::Integer {
                bits: 32,
                signed: false,
            },
        ),
        DataType::UInt64 => (
            Physical::Int64,
            Logical::Integer {
                bits: 64,
                signed: false,
            },
        ),
        DataType::Float32 => (Physical::Float, Logical::None),
        DataType::Float64 => (Physical::Double, Logical::None),
        DataType::Utf8 => (Physical::ByteArray, Logical::String),
        DataType::Binary => (Physical::ByteArray, Logical::None),
        DataType::Timestamp(
            unit @ (TimeUnit::Millisecond | TimeUnit::Microsecond | TimeUnit::Nanosecond),
            tz,
        ) => (
            Physical::Int64,
            Logical::Timestamp {
                utc: tz.is_some(),
                unit: *unit,
            },
        ),
        t => return Err(Error::Unsupported(format!("Arrow type {t}"))),
    })
}

impl Leaf {
    pub fn of(field: &Field) -> Result<Leaf, Error> {
        let name = field.name().to_string();
        let repetition = field.is_nullable() as i32;
        if let DataType::List(item) = field.data_type() {
            let (physical, logical) = physical_of(item.data_type())?;
            let list = |n: &str, rep, children, logical| SchemaElement {
                name: n.into(),
                physical: None,
                repetition: rep,
                children: Some(children),
                logical,
            };
            return Ok(Leaf {
                path: vec![name.clone(), "list".into(), item.name().to_string()],
                physical,
                elements: vec![
                    list(&name, repetition, 1, Logical::List),
                    list("list", 2, 1, Logical::None),
                    SchemaElement {
                        name: item.name().to_string(),
                        physical: Some(physical),
                        repetition: item.is_nullable() as i32,
                        children: None,
                        logical,
                    },
                ],
                max_def: field.is_nullable() as u16 + 1 + item.is_nullable() as u16,
                max_rep: 1,
                optional: field.is_nullable(),
                list: Some(item.is_nullable()),
                unsigned: matches!(logical, Logical::Integer { signed: false, .. }),
            });
        }
        let (physical, logical) = physical_of(field.data_type())?;
        Ok(Leaf {
            path: vec![name.clone()],
            physical,
            elements: vec![SchemaElement {
                name,
                physical: Some(physical),
                repetition,
                children: None,
                logical,
            }],
            max_def: field.is_nullable() as u16,
            max_rep: 0,
            optional: field.is_nullable(),
            list: None,
            unsigned: matches!(logical, Logical::Integer { signed: false, .. }),
        })
    }
}

/// The values of a flat array, as plain-encoded bytes per slot.
enum Values<'a> {
    Bool(&'a arrow_array::BooleanArray),
    /// Little-endian values of `width` bytes, one per slot (null slots hold anything).
    Fixed {
        width: usize,
        bytes: Cow<'a, [u8]>,
    },
    Bytes {
        offsets: &'a [i32],
        data: &'a [u8],
    },
}

fn widen<T: ArrowPrimitiveType>(a: &dyn Array, f: impl Fn(T::Native) -> i32) -> Vec<u8> {
    a.as_primitive::<T>()
        .values()
        .iter()
        .flat_map(|&v| f(v).to_le_bytes())
        .collect()
}

fn raw<T: ArrowPrimitiveType>(a: &dyn Array) -> Cow<'_, [u8]> {
    Cow::Borrowed(a.as_primitive::<T>().values().inner().as_slice())
}

fn bytes_of<T: arrow_array::types::ByteArrayType<Offset = i32>>(
    a: &GenericByteArray<T>,
) -> Values<'_> {
    Values::Bytes {
        offsets: a.value_offsets(),
        data: a.value_data(),
    }
}

impl<'a> Values<'a> {
    fn of(a: &'a dyn Array) -> Result<Values<'a>, Error> {
        let fixed = |width, bytes| Values::Fixed { width, bytes };
        Ok(match a.data_type() {
            DataType::Boolean => Values::Bool(a.as_boolean()),
            DataType::Int8 => fixed(4, Cow::Owned(widen::<Int8Type>(a, |v| v as i32))),
            DataType::Int16 => fixed(4, Cow::Owned(widen::<Int16Type>(a, |v| v as i32))),
            DataType::UInt8 => fixed(4, Cow::Owned(widen::<UInt8Type>(a, |v| v as i32))),
            DataType::UInt16 => fixed(4, Cow::Owned(widen::<UInt16Type>(a, |v| v as i32))),
            DataType::Int32 => fixed(4, raw::<Int32Type>(a)),
            DataType::UInt32 => fixed(4, raw::<UInt32Type>(a)),
            DataType::Float32 => fixed(4, raw::<Float32Type>(a)),
            DataType::Int64 => fixed(8, raw::<Int64Type>(a)),
            DataType::UInt64 => fixed(8, raw::<UInt64Type>(a)),
            DataType::Float64 => fixed(8, raw::<Float64Type>(a)),
            DataType::Timestamp(TimeUnit::Second, _) => fixed(8, raw::<TimestampSecondType>(a)),
            DataType::Timestamp(TimeUnit::Millisecond, _) => {
                fixed(8, raw::<TimestampMillisecondType>(a))
            }
            DataType::Timestamp(TimeUnit::Microsecond, _) => {
                fixed(8, raw::<TimestampMicrosecondType>(a))
            }
            DataType::Timestamp(TimeUnit::Nanosecond, _) => {
                fixed(8, raw::<TimestampNanosecondType>(a))
            }
            DataType::Utf8 => bytes_of(a.as_string::<i32>()),
            DataType::Binary => bytes_of(a.as_binary::<i32>()),
            t => return Err(Error::Unsupported(format!("Arrow type {t}"))),
        })
    }

    /// The plain bytes of slot `i` (not for booleans).
    #[inline]
    fn slot(&self, i: usize) -> &[u8] {
        match self {
            Values::Fixed { width, bytes } => &bytes[i * width..(i + 1) * width],
            Values::Bytes { offsets, data } => &data[offsets[i] as usize..offsets[i + 1] as usize],
            Values::Bool(_) => &[],
        }
    }
}

/// A dictionary being built: distinct values in first-seen order, found by hash.
#[derive(Default)]
struct Dictionary {
    /// Plain encoding of the values (byte arrays with their length prefix).
    plain: Vec<u8>,
    /// Where each value's bytes sit in `plain` (without a length prefix).
    spans: Vec<(u32, u32)>,
    /// Open addressing: value index + 1, 0 empty.
    slots: Vec<u32>,
    /// The index last returned (values come in runs).
    last: Option<u32>,
}

impl Dictionary {
    fn hash(v: &[u8]) -> u64 {
        let mut h = crate::schema::registry::FastHasher::default();
        h.write(v);
        h.write_usize(v.len());
        h.finish()
    }

    /// The index of `v`, added if new.
    #[inline]
    fn index(&mut self, v: &[u8], length_prefix: bool) -> u32 {
        if let Some(k) = self.last {
            let (a, b) = self.spans[k as usize];
            if same_bytes(&self.plain[a as usize..b as usize], v) {
                return k;
            }
        }
        let k = self.find_or_add(v, length_prefix);
        self.last = Some(k);
        k
    }

    fn find_or_add(&mut self, v: &[u8], length_prefix: bool) -> u32 {
        if self.spans.len() * 2 >= self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut at = (Self::hash(v) >> 20) as usize & mask;
        loop {
            match self.slots[at] {
                0 => break,
                k => {
                    let (a, b) = self.spans[k as usize - 1];
                    if same_bytes(&self.plain[a as usize..b as usize], v) {
                        return k - 1;
                    }
                }
            }
            at = (at + 1) & mask;
        }
        if length_prefix {
            self.plain
                .extend_from_slice(&(v.len() as u32).to_le_bytes());
        }
        let a = self.plain.len() as u32;
        self.plain.extend_from_slice(v);
        self.spans.push((a, self.plain.len() as u32));
        self.slots[at] = self.spans.len() as u32;
        self.spans.len() as u32 - 1
    }

    fn grow(&mut self) {
        let n = (self.slots.len() * 2).max(1024);
        self.slots = vec![0; n];
        for (k, &(a, b)) in self.spans.iter().enumerate() {
            let mut at = (Self::hash(&self.plain[a as usize..b as usize]) >> 20) as usize & (n - 1);
            while self.slots[at] != 0 {
                at = (at + 1) & (n - 1);
            }
            self.slots[at] = k as u32 + 1;
        }
    }
}

/// Minimum and maximum of a column chunk's values, as Parquet orders its type.
#[derive(Default)]
struct Stats {
    min: Vec<u8>,
    max: Vec<u8>,
    /// Whether `min` and `max` hold a value.
    any: bool,
    nulls: i64,
}

impl Stats {
    fn observe(&mut self, physical: Physical, unsigned: bool, v: &[u8]) {
        if is_nan(physical, v) {
            // Parquet's float order leaves NaN out of min and max.
            return;
        }
        if !self.any {
            self.any = true;
            self.min.extend_from_slice(v);
            self.max.extend_from_slice(v);
            return;
        }
        if less(physical, unsigned, v, &self.min) {
            self.min.clear();
            self.min.extend_from_slice(v);
        } else if less(physical, unsigned, &self.max, v) {
            self.max.clear();
            self.max.extend_from_slice(v);
        }
    }

    /// Observes the minimum and maximum of plain fixed-width `bytes` (`width` per value; only
    /// the slots `valid` allows), folded as their type.
    fn observe_fixed(
        &mut self,
        physical: Physical,
        unsigned: bool,
        width: usize,
        bytes: &[u8],
        valid: impl Fn(usize) -> bool,
    ) {
        fn fold<T: Copy + PartialOrd, const N: usize>(
            bytes: &[u8],
            valid: impl Fn(usize) -> bool,
            of: impl Fn([u8; N]) -> T,
        ) -> Option<([u8; N], [u8; N])> {
            let mut best: Option<(T, [u8; N], T, [u8; N])> = None;
            for (i, c) in bytes.chunks_exact(N).enumerate() {
                if !valid(i) {
                    continue;
                }
                let raw: [u8; N] = c.try_into().expect("width");
                let v = of(raw);
                match &mut best {
                    None => best = Some((v, raw, v, raw)),
                    Some((lo, lo_raw, hi, hi_raw)) => {
                        if v < *lo {
                            (*lo, *lo_raw) = (v, raw);
                        } else if v > *hi {
                            (*hi, *hi_raw) = (v, raw);
                        }
                    }
                }
            }
            best.map(|(_, lo, _, hi)| (lo, hi))
        }
        let mut put = |lo: &[u8], hi: &[u8]| {
            self.observe(physical, unsigned, lo);
            self.observe(physical, unsigned, hi);
        };
        match (physical, width) {
            (Physical::Int32, 4) if unsigned => {
                if let Some((lo, hi)) = fold(bytes, valid, u32::from_le_bytes) {
                    put(&lo, &hi)
                }
            }
            (Physical::Int32, 4) => {
                if let Some((lo, hi)) = fold(bytes, valid, i32::from_le_bytes) {
                    put(&lo, &hi)
                }
            }
            (Physical::Int64, 8) if unsigned => {
                if let Some((lo, hi)) = fold(bytes, valid, u64::from_le_bytes) {
                    put(&lo, &hi)
                }
            }
            (Physical::Int64, 8) => {
                if let Some((lo, hi)) = fold(bytes, valid, i64::from_le_bytes) {
                    put(&lo, &hi)
                }
            }
            _ => {
                for (i, c) in bytes.chunks_exact(width).enumerate() {
                    if valid(i) {
                        self.observe(physical, unsigned, c);
                    }
                }
            }
        }
    }

    /// The minimum and maximum as the footer gives them: a float zero is -0.0 as a minimum and
    /// +0.0 as a maximum (Parquet's rule, since the two compare equal).
    fn bounds(&self, physical: Physical) -> (Vec<u8>, Vec<u8>) {
        let (mut lo, mut hi) = (self.min.clone(), self.max.clone());
        match physical {
            Physical::Float if lo.len() == 4 => {
                if f32::from_le_bytes(lo[..].try_into().expect("4")) == 0.0 {
                    lo = (-0.0f32).to_le_bytes().to_vec();
                }
                if f32::from_le_bytes(hi[..].try_into().expect("4")) == 0.0 {
                    hi = 0.0f32.to_le_bytes().to_vec();
                }
            }
            Physical::Double if lo.len() == 8 => {
                if f64::from_le_bytes(lo[..].try_into().expect("8")) == 0.0 {
                    lo = (-0.0f64).to_le_bytes().to_vec();
                }
                if f64::from_le_bytes(hi[..].try_into().expect("8")) == 0.0 {
                    hi = 0.0f64.to_le_bytes().to_vec();
                }
            }
            _ => {}
        }
        (lo, hi)
    }
}

fn is_nan(physical: Physical, v: &[u8]) -> bool {
    match (physical, v.len()) {
        (Physical::Float, 4) => f32::from_le_bytes(v.try_into().expect("4")).is_nan(),
        (Physical::Double, 8) => f64::from_le_bytes(v.try_into().expect("8")).is_nan(),
        _ => false,
    }
}

/// Whether `a < b` for plain values of `physical` (`unsigned`: integers as unsigned; byte
/// arrays compare as unsigned bytes, floats as numbers).
fn less(physical: Physical, unsigned: bool, a: &[u8], b: &[u8]) -> bool {
    match (physical, a.len()) {
        (Physical::Int32, 4) if unsigned => {
            u32::from_le_bytes(a.try_into().unwrap()) < u32::from_le_bytes(b.try_into().unwrap())
        }
        (Physical::Int32, 4) => {
            i32::from_le_bytes(a.try_into().unwrap()) < i32::from_le_bytes(b.try_into().unwrap())
        }
        (Physical::Int64, 8) if unsigned => {
            u64::from_le_bytes(a.try_into().unwrap()) < u64::from_le_bytes(b.try_into().unwrap())
        }
        (Physical::Int64, 8) => {
            i64::from_le_bytes(a.try_into().unwrap()) < i64::from_le_bytes(b.try_into().unwrap())
        }
        (Physical::Float, 4) => {
            f32::from_le_bytes(a.try_into().unwrap()) < f32::from_le_bytes(b.try_into().unwrap())
        }
        (Physical::Double, 8) => {
            f64::from_le_bytes(a.try_into().unwrap()) < f64::from_le_bytes(b.try_into().unwrap())
        }
        _ => a < b,
    }
}

/// A finished column chunk: its pages and what the footer says of it.
pub struct Chunk {
    /// The dictionary page (empty without one), then the data pages: written one after the
    /// other, then handed back ([`ColumnWriter::recycle`]).
    pub dictionary: Vec<u8>,
    pub data: Vec<u8>,
    /// Bytes of both.
    pub size: u64,
    /// Offsets within the chunk of the dictionary page (when there is one) and the first data
    /// page.
    pub dictionary_page: Option<usize>,
    pub data_page: usize,
    pub num_values: i64,
    pub uncompressed: i64,
    pub encodings: Vec<i32>,
    statistics: Option<Stats>,
}

impl Chunk {
    /// ColumnMetaData, with `at`: the file offset of `pages`.
    pub fn write_meta(&self, w: &mut thrift::Writer, leaf: &Leaf, zstd: bool, at: u64) {
        w.begin(Some(3));
        w.i32(1, leaf.physical as i32);
        w.i32_list(2, &self.encodings);
        w.binary_list(3, leaf.path.iter().map(|s| s.as_bytes()));
        w.i32(4, if zstd { 6 } else { 0 });
        w.i64(5, self.num_values);
        w.i64(6, self.uncompressed);
        w.i64(7, self.size as i64);
        w.i64(9, (at + self.data_page as u64) as i64);
        if let Some(d) = self.dictionary_page {
            w.i64(11, (at + d as u64) as i64);
        }
        if let Some(s) = &self.statistics {
            w.begin(Some(12));
            w.i64(3, s.nulls);
            if s.any {
                let (lo, hi) = s.bounds(leaf.physical);
                w.binary(5, &hi);
                w.binary(6, &lo);
            }
            w.end();
        }
        w.end();
    }
}

/// One top-level column's chunk in progress.
pub struct ColumnWriter {
    pub leaf: Leaf,
    opts: ColumnOptions,
    /// Levels of the page in progress (empty when the column has none).
    def: Vec<u8>,
    rep: Vec<u8>,
    /// Level entries (values and nulls) in the page in progress.
    page_entries: usize,
    /// Plain values of the page in progress (booleans one byte each, packed when written).
    plain: Vec<u8>,
    /// Dictionary indices of the page in progress.
    indices: Vec<u32>,
    dictionary: Dictionary,
    /// Whether values go to the dictionary (off for booleans, for columns without one and once
    /// the chunk's dictionary outgrew [`DICTIONARY_LIMIT`]).
    dictionary_on: bool,
    /// Pages written with dictionary indices in this chunk.
    dictionary_pages: usize,
    encodings: Vec<i32>,
    pages: Vec<u8>,
    data_page: Option<usize>,
    num_values: i64,
    uncompressed: i64,
    stats: Stats,
}

/// Shared scratch of a file's column writers: the zstd context, the compressed page, and the
/// page body being encoded (one for all columns: a column keeps only its values between pages).
pub struct Compressor {
    zstd: Option<zstd::bulk::Compressor<'static>>,
    out: Vec<u8>,
    body: Vec<u8>,
    levels: Vec<u8>,
    /// A delta-encoded page's values.
    ints: Vec<i64>,
    /// A keyed batch's texts as indices of the chunk's dictionary.
    remap: Vec<u32>,
}

impl Compressor {
    pub fn new(level: Option<i32>) -> Result<Compressor, Error> {
        Ok(Compressor {
            zstd: match level {
                Some(l) => Some(zstd::bulk::Compressor::new(l).map_err(Error::Io)?),
                None => None,
            },
            out: Vec::new(),
            body: Vec::new(),
            levels: Vec::new(),
            ints: Vec::new(),
            remap: Vec::new(),
        })
    }
    pub fn is_zstd(&self) -> bool {
        self.zstd.is_some()
    }
}

/// Appends a page: its header (with `header`'s specific part) and its body, compressed.
fn put_page(
    pages: &mut Vec<u8>,
    zstd: &mut Option<zstd::bulk::Compressor<'static>>,
    out: &mut Vec<u8>,
    body: &[u8],
    header: impl FnOnce(&mut thrift::Writer),
) -> Result<i64, Error> {
    let compressed: &[u8] = match zstd {
        Some(z) => {
            out.clear();
            out.reserve(zstd::zstd_safe::compress_bound(body.len()));
            z.compress_to_buffer(body, out).map_err(Error::Io)?;
            out
        }
        None => body,
    };
    let mut w = thrift::Writer::new();
    w.i32(2, body.len() as i32);
    w.i32(3, compressed.len() as i32);
    header(&mut w);
    w.end();
    pages.extend_from_slice(&w.out);
    pages.extend_from_slice(compressed);
    Ok((w.out.len() + body.len()) as i64)
}

impl ColumnWriter {
    pub fn new(leaf: Leaf, mut opts: ColumnOptions) -> ColumnWriter {
        opts.delta &=
            leaf.list.is_none() && matches!(leaf.physical, Physical::Int32 | Physical::Int64);
        opts.dictionary &= !opts.delta;
        ColumnWriter {
            dictionary_on: opts.dictionary && leaf.physical != Physical::Boolean,
            leaf,
            opts,
            def: Vec::new(),
            rep: Vec::new(),
            page_entries: 0,
            plain: Vec::new(),
            indices: Vec::new(),
            dictionary: Dictionary::default(),
            dictionary_pages: 0,
            encodings: Vec::new(),
            pages: Vec::new(),
            data_page: None,
            num_values: 0,
            uncompressed: 0,
            stats: Stats::default(),
        }
    }

    /// Bytes the page in progress holds, about.
    pub fn page_bytes(&self) -> usize {
        self.plain.len() + self.indices.len() * 4 + self.def.len() + self.rep.len()
    }

    fn value(&mut self, v: &Values<'_>, i: usize) {
        if let Values::Bool(b) = v {
            self.plain.push(b.value(i) as u8);
            return;
        }
        let s = v.slot(i);
        let bytes = self.leaf.physical == Physical::ByteArray;
        if self.dictionary_on {
            // Statistics come from the dictionary's distinct values when the chunk ends.
            self.indices.push(self.dictionary.index(s, bytes));
            return;
        }
        if self.opts.statistics {
            self.stats
                .observe(self.leaf.physical, self.leaf.unsigned, s);
        }
        if bytes {
            self.plain
                .extend_from_slice(&(s.len() as u32).to_le_bytes());
        }
        self.plain.extend_from_slice(s);
    }

    /// Appends the values of `a` (this column's array in a batch).
    pub fn append(&mut self, a: &ArrayRef, c: &mut Compressor) -> Result<(), Error> {
        match self.leaf.list {
            None if matches!(a.data_type(), DataType::Dictionary(..)) => {
                return self.append_keyed(a, c);
            }
            None => {
                let v = Values::of(a.as_ref())?;
                let nulls = a.logical_nulls().filter(|n| n.null_count() > 0);
                if let Values::Fixed { width, bytes } = &v {
                    // Fixed-width values: statistics folded as their type over the batch, then
                    // the values as they are (plain) or their dictionary indexes.
                    let (width, n) = (*width, a.len());
                    let bytes = &bytes[..n * width];
                    let valid = |i: usize| nulls.as_ref().is_none_or(|m| m.is_valid(i));
                    if self.opts.statistics && !self.dictionary_on {
                        self.stats.observe_fixed(
                            self.leaf.physical,
                            self.leaf.unsigned,
                            width,
                            bytes,
                            valid,
                        );
                    }
                    if self.leaf.max_def > 0 {
                        match &nulls {
                            None => self.def.resize(self.def.len() + n, 1),
                            Some(m) => self.def.extend((0..n).map(|i| m.is_valid(i) as u8)),
                        }
                    }
                    self.stats.nulls += nulls.as_ref().map_or(0, |m| m.null_count()) as i64;
                    match (&nulls, self.dictionary_on) {
                        (None, false) => self.plain.extend_from_slice(bytes),
                        (None, true) => {
                            for c in bytes.chunks_exact(width) {
                                self.indices.push(self.dictionary.index(c, false));
                            }
                        }
                        (Some(m), dictionary) => {
                            for (i, c) in bytes.chunks_exact(width).enumerate() {
                                if !m.is_valid(i) {
                                    continue;
                                }
                                if dictionary {
                                    self.indices.push(self.dictionary.index(c, false));
                                } else {
                                    self.plain.extend_from_slice(c);
                                }
                            }
                        }
                    }
                    self.page_entries += n;
                    return self.dictionary_limit(c);
                }
                if let Values::Bytes { offsets, data } = &v {
                    // Text and binary: one loop per encoding (names go to the dictionary, whose
                    // last value is checked first: names come in runs).
                    let n = a.len();
                    let slot = |i: usize| &data[offsets[i] as usize..offsets[i + 1] as usize];
                    let valid = |i: usize| nulls.as_ref().is_none_or(|m| m.is_valid(i));
                    if self.leaf.max_def > 0 {
                        match &nulls {
                            None => self.def.resize(self.def.len() + n, 1),
                            Some(m) => self.def.extend((0..n).map(|i| m.is_valid(i) as u8)),
                        }
                    }
                    self.stats.nulls += nulls.as_ref().map_or(0, |m| m.null_count()) as i64;
                    if self.dictionary_on {
                        self.indices.reserve(n);
                        for i in (0..n).filter(|&i| valid(i)) {
                            self.indices.push(self.dictionary.index(slot(i), true));
                        }
                    } else {
                        let (a0, b0) = (offsets[0] as usize, offsets[n] as usize);
                        self.plain.reserve(b0 - a0 + 4 * n);
                        for i in (0..n).filter(|&i| valid(i)) {
                            self.push_plain_text(slot(i));
                        }
                    }
                    self.page_entries += n;
                    return self.dictionary_limit(c);
                }
                for i in 0..a.len() {
                    let valid = nulls.as_ref().is_none_or(|n| n.is_valid(i));
                    if self.leaf.max_def > 0 {
                        self.def.push(valid as u8);
                    }
                    if valid {
                        self.value(&v, i);
                    } else {
                        self.stats.nulls += 1;
                    }
                }
                self.page_entries += a.len();
            }
            Some(_) => {
                let l = a.as_list::<i32>();
                let items = l.values();
                let v = Values::of(items.as_ref())?;
                let item_nulls = items.logical_nulls();
                let list_nulls = l.logical_nulls();
                let offsets = l.value_offsets();
                let base = self.leaf.optional as u8;
                let bulk = item_nulls.as_ref().is_none_or(|n| n.null_count() == 0)
                    && !self.dictionary_on
                    && !self.opts.statistics
                    && !matches!(v, Values::Bool(_));
                for i in 0..l.len() {
                    if list_nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                        self.def.push(0);
                        self.rep.push(0);
                        self.page_entries += 1;
                        self.stats.nulls += 1;
                        continue;
                    }
                    let (a, b) = (offsets[i] as usize, offsets[i + 1] as usize);
                    if a == b {
                        self.def.push(base);
                        self.rep.push(0);
                        self.page_entries += 1;
                        continue;
                    }
                    if bulk {
                        // Items all present, plain, no statistics: the list's levels and values
                        // in runs.
                        self.rep.push(0);
                        self.rep.resize(self.rep.len() + b - a - 1, 1);
                        self.def
                            .resize(self.def.len() + b - a, self.leaf.max_def as u8);
                        match &v {
                            Values::Fixed { width, bytes } => {
                                self.plain.extend_from_slice(&bytes[a * width..b * width])
                            }
                            Values::Bytes { offsets, data } => {
                                for k in a..b {
                                    let (x, y) = (offsets[k] as usize, offsets[k + 1] as usize);
                                    self.plain
                                        .extend_from_slice(&((y - x) as u32).to_le_bytes());
                                    self.plain.extend_from_slice(&data[x..y]);
                                }
                            }
                            Values::Bool(_) => unreachable!("no bulk path for booleans"),
                        }
                        self.page_entries += b - a;
                        continue;
                    }
                    for k in a..b {
                        self.rep.push((k != a) as u8);
                        let valid = item_nulls.as_ref().is_none_or(|n| n.is_valid(k));
                        if valid {
                            self.def.push(self.leaf.max_def as u8);
                            self.value(&v, k);
                        } else {
                            self.def.push(self.leaf.max_def as u8 - 1);
                            self.stats.nulls += 1;
                        }
                    }
                    self.page_entries += b - a;
                }
            }
        }
        self.dictionary_limit(c)
    }

    /// Appends a keyed text array (`Dictionary(UInt32, Utf8)`): each of its distinct texts goes to
    /// this chunk's dictionary once, each row as the index its key maps to (or its text, once the
    /// chunk's dictionary is full).
    fn append_keyed(&mut self, a: &ArrayRef, c: &mut Compressor) -> Result<(), Error> {
        let d = a
            .as_dictionary_opt::<UInt32Type>()
            .ok_or_else(|| Error::Unsupported(format!("Arrow type {}", a.data_type())))?;
        let texts = d
            .values()
            .as_string_opt::<i32>()
            .ok_or_else(|| Error::Unsupported(format!("Arrow type {}", a.data_type())))?;
        let (offsets, data) = (texts.value_offsets(), texts.value_data());
        let text = |k: u32| &data[offsets[k as usize] as usize..offsets[k as usize + 1] as usize];
        let keys = d.keys().values();
        let nulls = d.keys().nulls().filter(|m| m.null_count() > 0);
        let n = keys.len();
        let valid = |i: usize| nulls.is_none_or(|m| m.is_valid(i));
        if self.leaf.max_def > 0 {
            match nulls {
                None => self.def.resize(self.def.len() + n, 1),
                Some(m) => self.def.extend((0..n).map(|i| m.is_valid(i) as u8)),
            }
        }
        self.stats.nulls += nulls.map_or(0, |m| m.null_count()) as i64;
        if self.dictionary_on {
            // Texts go to the dictionary as rows use them (a batch sliced at a row group's end
            // holds texts of the other part's rows too: they stay out of this chunk).
            let mut remap = std::mem::take(&mut c.remap);
            remap.clear();
            remap.resize(texts.len(), u32::MAX);
            self.indices.reserve(n);
            for i in (0..n).filter(|&i| valid(i)) {
                let k = keys[i];
                let mut at = remap[k as usize];
                if at == u32::MAX {
                    at = self.dictionary.index(text(k), true);
                    remap[k as usize] = at;
                }
                self.indices.push(at);
            }
            c.remap = remap;
        } else {
            for i in (0..n).filter(|&i| valid(i)) {
                self.push_plain_text(text(keys[i]));
            }
        }
        self.page_entries += n;
        self.dictionary_limit(c)
    }

    /// Appends one text value PLAIN-encoded (length, bytes), counted in the statistics.
    fn push_plain_text(&mut self, s: &[u8]) {
        if self.opts.statistics {
            self.stats
                .observe(self.leaf.physical, self.leaf.unsigned, s);
        }
        self.plain
            .extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.plain.extend_from_slice(s);
    }

    /// Once the chunk's dictionary outgrew [`DICTIONARY_LIMIT`]: pages written so far keep their
    /// indices, the rest of the chunk goes plain.
    fn dictionary_limit(&mut self, c: &mut Compressor) -> Result<(), Error> {
        if self.dictionary_on && self.dictionary.plain.len() > DICTIONARY_LIMIT {
            self.flush_page(c)?;
            self.dictionary_on = false;
        }
        Ok(())
    }

    /// Writes the page in progress.
    pub fn flush_page(&mut self, c: &mut Compressor) -> Result<(), Error> {
        if self.page_entries == 0 {
            return Ok(());
        }
        let Compressor {
            zstd,
            out,
            body,
            levels: encoded,
            ints,
            ..
        } = c;
        body.clear();
        for (levels, max) in [
            (&self.rep, self.leaf.max_rep),
            (&self.def, self.leaf.max_def),
        ] {
            if max > 0 {
                encoded.clear();
                rle::encode(levels, rle::bit_width(max as u32), encoded);
                body.extend_from_slice(&(encoded.len() as u32).to_le_bytes());
                body.extend_from_slice(encoded);
            }
        }
        let encoding = if self.dictionary_on && !self.dictionary.spans.is_empty() {
            let w = rle::bit_width(self.dictionary.spans.len() as u32 - 1).max(1);
            body.push(w);
            rle::encode(&self.indices, w, body);
            self.dictionary_pages += 1;
            RLE_DICTIONARY
        } else if self.leaf.physical == Physical::Boolean {
            for g in self.plain.chunks(8) {
                body.push(g.iter().enumerate().fold(0, |b, (k, &v)| b | v << k));
            }
            PLAIN
        } else if self.opts.delta {
            let wide = self.leaf.physical == Physical::Int64;
            ints.clear();
            if wide {
                ints.extend(
                    self.plain
                        .chunks_exact(8)
                        .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes"))),
                );
            } else {
                ints.extend(
                    self.plain
                        .chunks_exact(4)
                        .map(|b| i64::from(i32::from_le_bytes(b.try_into().expect("4 bytes")))),
                );
            }
            delta::encode(ints, body);
            DELTA_BINARY_PACKED
        } else {
            body.extend_from_slice(&self.plain);
            PLAIN
        };
        if !self.encodings.contains(&encoding) {
            self.encodings.push(encoding);
        }
        self.data_page.get_or_insert(self.pages.len());
        let entries = self.page_entries as i32;
        self.uncompressed += put_page(&mut self.pages, zstd, out, body, |w| {
            w.i32(1, 0);
            w.begin(Some(5));
            w.i32(1, entries);
            w.i32(2, encoding);
            w.i32(3, RLE);
            w.i32(4, RLE);
            w.end();
        })?;
        self.num_values += self.page_entries as i64;
        self.page_entries = 0;
        self.def.clear();
        self.rep.clear();
        self.plain.clear();
        self.indices.clear();
        Ok(())
    }

    /// Takes back a written chunk's data space for the next chunk's pages.
    pub fn recycle(&mut self, mut data: Vec<u8>) {
        if self.pages.capacity() == 0 {
            data.clear();
            self.pages = data;
        }
    }

    /// Finishes the chunk (the writer starts the next row group's afresh).
    pub fn finish(&mut self, c: &mut Compressor) -> Result<Chunk, Error> {
        self.flush_page(c)?;
        let mut encodings = std::mem::take(&mut self.encodings);
        if self.leaf.max_def > 0 || self.leaf.max_rep > 0 {
            encodings.push(RLE);
        }
        let mut chunk = Chunk {
            dictionary: Vec::new(),
            data: std::mem::take(&mut self.pages),
            size: 0,
            dictionary_page: None,
            data_page: 0,
            num_values: std::mem::take(&mut self.num_values),
            uncompressed: std::mem::take(&mut self.uncompressed),
            encodings,
            statistics: None,
        };
        if self.dictionary_pages > 0 {
            let d = &self.dictionary;
            let n = d.spans.len() as i32;
            chunk.dictionary_page = Some(0);
            chunk.uncompressed += put_page(
                &mut chunk.dictionary,
                &mut c.zstd,
                &mut c.out,
                &d.plain,
                |w| {
                    w.i32(1, 2);
                    w.begin(Some(7));
                    w.i32(1, n);
                    w.i32(2, PLAIN);
                    w.end();
                },
            )?;
            if !chunk.encodings.contains(&PLAIN) {
                chunk.encodings.push(PLAIN);
            }
        }
        chunk.data_page = chunk.dictionary.len() + self.data_page.take().unwrap_or(0);
        chunk.size = (chunk.dictionary.len() + chunk.data.len()) as u64;
        chunk.encodings.sort_unstable();
        chunk.encodings.dedup();
        let mut stats = std::mem::take(&mut self.stats);
        if self.opts.statistics {
            // Values that went to the dictionary were not observed one by one.
            for &(a, b) in &self.dictionary.spans {
                stats.observe(
                    self.leaf.physical,
                    self.leaf.unsigned,
                    &self.dictionary.plain[a as usize..b as usize],
                );
            }
            chunk.statistics = Some(stats);
        }
        self.dictionary = Dictionary::default();
        self.dictionary_on = self.opts.dictionary && self.leaf.physical != Physical::Boolean;
        self.dictionary_pages = 0;
        Ok(chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `text` as `Utf8` and the same file of it keyed (`Dictionary(UInt32, Utf8)`,
    /// each batch its own keys) are the same bytes: the footer's schema, pages, dictionaries and
    /// statistics alike, whether the dictionary holds or overflows, with nulls, and with batches
    /// cut across row groups.
    #[test]
    fn keyed_text_is_written_as_its_texts() {
        use arrow_array::{DictionaryArray, RecordBatch, StringArray, UInt32Array};
        use arrow_schema::Schema;
        use std::sync::Arc;

        use super::super::{FileWriter, Options};

        let write = |batches: &[Vec<Option<String>>], keyed: bool, plain: bool| -> Vec<u8> {
            let t = if keyed {
                DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8))
            } else {
                DataType::Utf8
            };
            let schema = Arc::new(Schema::new(vec![Field::new("name", t, true)]));
            let mut o = Options {
                row_group_rows: 700,
                ..Options::default()
            };
            o.statistics.insert("name".into());
            if plain {
                o.plain.insert("name".into());
            }
            let mut w = FileWriter::new(Vec::new(), schema.clone(), o).unwrap();
            for b in batches {
                let a: ArrayRef = if keyed {
                    // Keys in first-use order, as `export::arrow` makes them.
                    let mut texts: Vec<&str> = Vec::new();
                    let keys: UInt32Array = b
                        .iter()
                        .map(|v| {
                            v.as_deref()
                                .map(|v| match texts.iter().position(|t| *t == v) {
                                    Some(k) => k as u32,
                                    None => {
                                        texts.push(v);
                                        texts.len() as u32 - 1
                                    }
                                })
                        })
                        .collect();
                    let values = Arc::new(StringArray::from(texts.clone()));
                    Arc::new(DictionaryArray::try_new(keys, values).unwrap())
                } else {
                    Arc::new(StringArray::from(b.clone()))
                };
                w.write(&RecordBatch::try_new(schema.clone(), vec![a]).unwrap())
                    .unwrap();
            }
            w.close().unwrap()
        };
        let name = |i: usize| match i % 11 {
            0 => None,
            k => Some(format!("Provider-{}", k * 7 % 5)),
        };
        // Few names; then more distinct texts than the dictionary takes (it goes plain).
        let few: Vec<Vec<Option<String>>> = (0..5)
            .map(|b| (0..300).map(|i| name(b * 300 + i)).collect())
            .collect();
        let many: Vec<Vec<Option<String>>> = (0..3)
            .map(|b| {
                (0..20_000)
                    .map(|i| (i % 13 != 0).then(|| format!("{b}-{i}-{}", "x".repeat(40))))
                    .collect()
            })
            .collect();
        for batches in [&few, &many] {
            for plain in [false, true] {
                assert_eq!(
                    write(batches, true, plain),
                    write(batches, false, plain),
                    "plain {plain}"
                );
            }
        }
    }

    fn bounds_of(
        physical: Physical,
        unsigned: bool,
        width: usize,
        bytes: &[u8],
    ) -> (Vec<u8>, Vec<u8>) {
        let mut s = Stats::default();
        s.observe_fixed(physical, unsigned, width, bytes, |_| true);
        s.bounds(physical)
    }

    #[test]
    fn statistics_order_values_as_their_type() {
        let f: Vec<u8> = [1.5f64, f64::NAN, -2.0, 0.0, 300.25]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let (lo, hi) = bounds_of(Physical::Double, false, 8, &f);
        assert_eq!(lo, (-2.0f64).to_le_bytes());
        assert_eq!(hi, 300.25f64.to_le_bytes());
        // A zero minimum is written -0.0, a zero maximum +0.0; NaN is left out.
        let f: Vec<u8> = [0.0f32, f32::NAN, -0.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let (lo, hi) = bounds_of(Physical::Float, false, 4, &f);
        assert_eq!(lo, (-0.0f32).to_le_bytes());
        assert_eq!(hi, 0.0f32.to_le_bytes());
        let i: Vec<u8> = [5i32, -7, 0x7fff_ffff]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            bounds_of(Physical::Int32, false, 4, &i),
            (
                (-7i32).to_le_bytes().to_vec(),
                0x7fff_ffffi32.to_le_bytes().to_vec()
            )
        );
        // As unsigned, -7 is 0xfffffff9: the maximum.
        assert_eq!(
            bounds_of(Physical::Int32, true, 4, &i),
            (5i32.to_le_bytes().to_vec(), (-7i32).to_le_bytes().to_vec())
        );
        // No values, no bounds; nulls' slots are skipped.
        let mut s = Stats::default();
        s.observe_fixed(Physical::Int64, false, 8, &[], |_| true);
        assert!(!s.any);
        let mut s = Stats::default();
        let l: Vec<u8> = [9i64, -100, 3]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        s.observe_fixed(Physical::Int64, false, 8, &l, |k| k != 1);
        assert_eq!(
            s.bounds(Physical::Int64),
            (3i64.to_le_bytes().to_vec(), 9i64.to_le_bytes().to_vec())
        );
        // Text compares as unsigned bytes.
        let mut s = Stats::default();
        for t in ["b", "\u{e9}", "a"] {
            s.observe(Physical::ByteArray, false, t.as_bytes());
        }
        assert_eq!(
            s.bounds(Physical::ByteArray),
            (b"a".to_vec(), "\u{e9}".as_bytes().to_vec())
        );
    }
}
