//! The typed tables' columns: the properties of one event type, one column per property with its
//! real type ([`Kind`]), inferred from the first values seen ([`TypedColumns`]; the common columns
//! come from [`super::arrow::EventColumns`]). A value that does not fit its column is written as
//! null and counted ([`TypedColumns::unfit`]). The properties come as tapes ([`super::tape`]) or
//! as values.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::ArrayBuilder;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, Field, Schema, SchemaRef};

use super::arrow::{column_names, Columns, EventColumns, Row};
use super::tape::{field_name, field_value, fields, is_empty_array, read_fields, Item, TapeWriter};
use crate::decode::DecodedEvent;
use crate::EventRecord;

mod kind;

pub use kind::Kind;
use kind::*;

/// Rows whose values decide the property columns' types; later rows go straight into the columns.
pub const INFER_ROWS: usize = 4096;

/// One property column of a typed table.
struct PropColumn {
    /// The property's name in the events.
    property: Arc<str>,
    /// The column's name (the property's, unless that names a common column: then `prop_` + it).
    column: String,
    kind: Kind,
    builder: Box<dyn ArrayBuilder>,
    /// Text whose values are mostly distinct (addresses, paths): a dictionary would not pay.
    distinct_text: bool,
}

/// A field of a tape: where its name and value are ([`tape::read_fields`]).
type Field3 = (u32, u16, u32);

/// Rows of one event type: the common columns ([`Columns::TYPED`]) plus one typed column per
/// property. The property columns are fixed after [`INFER_ROWS`] rows or when the first batch is
/// built, from the values seen by then (the first non-null value of each property decides its
/// [`Kind`]; a property that was always null is a string column).
///
/// The properties come as tapes ([`super::tape`]): rows that wait for the column types keep
/// theirs, later rows go from the tape straight into the builders.
pub struct TypedColumns {
    common: EventColumns,
    /// Tapes of the rows that wait for the column types, one after the other.
    pending: Vec<u8>,
    /// Where each waiting row's tape ends in `pending`.
    pending_ends: Vec<usize>,
    columns: Option<Vec<PropColumn>>,
    by_name: HashMap<Arc<str>, usize>,
    schema: Option<SchemaRef>,
    text: Scratch,
    /// Scratch: the fields of the tape at hand, a tape made from values.
    fields: Vec<Field3>,
    tape: TapeWriter,
    /// Values written as null because they did not fit their column (or named a property first
    /// seen after the columns were fixed).
    pub unfit: u64,
    /// The last row's tape while rows of this type repeat their predecessor's properties (a
    /// .NET trace's ClrStackWalk events: 96% do): such a row copies the last row's values
    /// instead of reading its tape. Empty when the last row's was not kept.
    last: Vec<u8>,
    /// Values the last row added to `unfit`.
    last_unfit: u64,
    repeats: crate::decode::view::MemoGate,
    copy: CopyScratch,
    /// The batch's rows by their tape (rows of an event type repeat earlier ones, not only the
    /// one before: a row whose tape an earlier row of the batch had copies that row's values).
    earlier: EarlierRows,
}

/// Rows of the batch being built, found by their tapes: tape hash → (row, where its tape is kept
/// in `tapes`, its length, the values it added to `unfit`).
#[derive(Default)]
struct EarlierRows {
    rows: crate::schema::registry::FastMap<u64, (u32, u32, u32, u32)>,
    tapes: Vec<u8>,
    gate: crate::decode::view::MemoGate,
}

/// Tape bytes [`EarlierRows`] keeps per batch at most.
const EARLIER_TAPE_BYTES: usize = 1 << 20;

impl EarlierRows {
    fn hash(tape: &[u8]) -> u64 {
        use std::hash::Hasher;
        let mut h = crate::schema::registry::FastHasher::default();
        h.write(tape);
        h.finish()
    }

    /// The earlier row with this tape, and the values it added to `unfit`.
    fn find(&self, hash: u64, tape: &[u8]) -> Option<(usize, u64)> {
        let &(row, at, len, unfit) = self.rows.get(&hash)?;
        let kept = &self.tapes[at as usize..(at + len) as usize];
        (kept == tape).then_some((row as usize, unfit as u64))
    }

    fn add(&mut self, hash: u64, tape: &[u8], row: usize, unfit: u64) {
        if self.tapes.len() + tape.len() > EARLIER_TAPE_BYTES {
            return;
        }
        let at = self.tapes.len() as u32;
        self.tapes.extend_from_slice(tape);
        self.rows
            .insert(hash, (row as u32, at, tape.len() as u32, unfit as u32));
    }

    fn clear(&mut self) {
        self.rows.clear();
        self.tapes.clear();
    }
}

impl Default for TypedColumns {
    fn default() -> Self {
        Self::new()
    }
}

impl TypedColumns {
    pub fn new() -> TypedColumns {
        TypedColumns {
            // Most event types are rare: start small; batches after the first are sized as
            // the one before.
            common: EventColumns::with_capacity(Columns::TYPED, 64),
            pending: Vec::new(),
            pending_ends: Vec::new(),
            columns: None,
            by_name: HashMap::new(),
            schema: None,
            text: Scratch::default(),
            fields: Vec::new(),
            tape: TapeWriter::new(),
            unfit: 0,
            last: Vec::new(),
            last_unfit: 0,
            repeats: Default::default(),
            copy: CopyScratch::default(),
            earlier: EarlierRows::default(),
        }
    }

    /// Rows pushed since the last batch.
    pub fn rows(&self) -> usize {
        self.common.rows()
    }

    /// Appends one record; takes its properties.
    pub fn push(&mut self, file: &str, record: u64, e: &EventRecord<'_>, d: &mut DecodedEvent) {
        self.common.push(file, record, e, d);
        let props = std::mem::take(&mut d.properties);
        let mut tape = std::mem::take(&mut self.tape);
        tape.clear();
        props.visit(&mut tape);
        self.push_tape(tape.tape());
        self.tape = tape;
    }

    /// Appends one record given as its common fields and its properties' tape.
    pub fn push_row(&mut self, file: &str, record: u64, r: &Row<'_>, tape: &[u8]) {
        self.common.push_row(file, record, r, b"");
        self.push_tape(tape);
    }

    fn push_tape(&mut self, tape: &[u8]) {
        match &self.columns {
            None => {
                self.pending.extend_from_slice(tape);
                self.pending_ends.push(self.pending.len());
                if self.pending_ends.len() >= INFER_ROWS {
                    self.fix_columns();
                }
            }
            Some(_) => {
                // The row before, then the batch's earlier rows: a row whose tape one of them had
                // copies its values.
                let adjacent = self.repeats.open();
                if adjacent {
                    // `last` is the previous row's tape and the builders hold that row (`rows`
                    // counts this one's common columns: the batch has one before it).
                    let repeat =
                        self.common.rows() >= 2 && !self.last.is_empty() && self.last == tape;
                    self.repeats.note(repeat);
                    if repeat {
                        return self.copy_last();
                    }
                    self.last.clear();
                    self.last.extend_from_slice(tape);
                } else {
                    // The rows go by unremembered: the next comparison must not use `last`.
                    self.last.clear();
                }
                let hash = self.earlier.gate.open().then(|| EarlierRows::hash(tape));
                if let Some(h) = hash {
                    let found = self.earlier.find(h, tape);
                    self.earlier.gate.note(found.is_some());
                    if let Some((row, unfit)) = found {
                        self.copy_row(row);
                        self.unfit += unfit;
                        self.last_unfit = unfit;
                        return;
                    }
                }
                let before = self.unfit;
                let row = self.batch_rows();
                self.append_props(tape);
                self.last_unfit = self.unfit - before;
                if let Some(h) = hash {
                    self.earlier.add(h, tape, row, self.last_unfit);
                }
            }
        }
    }

    /// Rows the property columns hold (the batch's rows before the one being pushed).
    fn batch_rows(&self) -> usize {
        self.columns
            .as_ref()
            .and_then(|c| c.first())
            .map_or(0, |c| c.builder.len())
    }

    /// Appends a copy of row `row`'s values (a row whose tape repeats that row's).
    fn copy_row(&mut self, row: usize) {
        let TypedColumns { columns, copy, .. } = self;
        for c in columns.as_mut().expect("columns fixed") {
            copy_elem(&c.kind, c.builder.as_mut(), row, copy);
        }
    }

    fn append_props(&mut self, tape: &[u8]) {
        let cols = self.columns.as_mut().expect("columns fixed");
        // Records of one event type list their properties in the same order as the columns
        // (both follow the layout): go along both while the names agree, in one pass of the tape.
        let mut it = fields(tape);
        let mut i = 0;
        while i < cols.len() {
            match it.next() {
                Some((name, v)) if name == cols[i].property.as_bytes() => {
                    let c = &mut cols[i];
                    if !append_item(&c.kind, c.builder.as_mut(), Some(v), &mut self.text) {
                        self.unfit += 1;
                    }
                    i += 1;
                }
                _ => return self.append_rest(tape, i),
            }
        }
        if it.next().is_some() {
            self.append_rest(tape, i);
        }
    }

    /// [`TypedColumns::append_props`] from column `from` on, the first `from` columns having taken
    /// the first `from` properties.
    fn append_rest(&mut self, tape: &[u8], from: usize) {
        let TypedColumns {
            columns,
            fields,
            text,
            by_name,
            unfit,
            ..
        } = self;
        let cols = columns.as_mut().expect("columns fixed");
        fields.clear();
        // A tape that does not read (never written so) counts as no properties.
        let _ = read_fields(tape, fields);
        let mut seen = from;
        // Try the next unmatched property before searching.
        let mut next = from;
        for c in cols[from..].iter_mut() {
            let f = match fields.get(next) {
                Some(&f) if field_name(tape, f) == c.property.as_bytes() => {
                    next += 1;
                    Some(f)
                }
                _ => fields
                    .iter()
                    .find(|&&f| field_name(tape, f) == c.property.as_bytes())
                    .copied(),
            };
            let v = f.map(|f| field_value(tape, f));
            if v.is_some() {
                seen += 1;
            }
            if !append_item(&c.kind, c.builder.as_mut(), v, text) {
                *unfit += 1;
            }
        }
        // Properties this table has no column for.
        if seen < fields.len() {
            *unfit += fields
                .iter()
                .filter(|&&f| {
                    let name = std::str::from_utf8(field_name(tape, f)).unwrap_or("");
                    !by_name.contains_key(name)
                })
                .count() as u64;
        }
    }

    fn fix_columns(&mut self) {
        let reserved = column_names(Columns::TYPED);
        // (property, column name, kind once a value showed it, whether only empty arrays came).
        let mut found: Vec<(Arc<str>, String, Option<Kind>, bool)> = Vec::new();
        let mut taken: std::collections::HashSet<String> =
            reserved.iter().map(|s| s.to_ascii_lowercase()).collect();
        let pending = std::mem::take(&mut self.pending);
        let ends = std::mem::take(&mut self.pending_ends);
        let tapes = || {
            let (pending, ends) = (&pending, &ends);
            (0..ends.len()).map(move |i| &pending[if i == 0 { 0 } else { ends[i - 1] }..ends[i]])
        };
        let mut fields = std::mem::take(&mut self.fields);
        let mut before: Option<&[u8]> = None;
        for tape in tapes() {
            // A row repeating the one before tells nothing new.
            if before == Some(tape) {
                continue;
            }
            before = Some(tape);
            fields.clear();
            let _ = read_fields(tape, &mut fields);
            for (k, &f) in fields.iter().enumerate() {
                let raw = field_name(tape, f);
                let v = field_value(tape, f);
                let empty_array = matches!(v, Item::Array(span) if is_empty_array(span));
                // Usually the k-th property is the k-th found (same layout); else look it up.
                let known = match found.get(k) {
                    Some(x) if x.0.as_bytes() == raw => Some(k),
                    _ => self
                        .by_name
                        .get(std::str::from_utf8(raw).unwrap_or(""))
                        .copied(),
                };
                if let Some(i) = known {
                    match &found[i].2 {
                        None => {
                            found[i].2 = kind_of_item(&v);
                            found[i].3 |= empty_array;
                        }
                        // A value map names some values and not others (flags with unknown
                        // bits, enums with unlisted values): the column is text, as `dump`
                        // shows them, whichever came first.
                        Some(k) if matches!(v, Item::Mapped(..)) && takes_unnamed(k) => {
                            found[i].2 = Some(Kind::Str);
                        }
                        _ => {}
                    }
                    continue;
                }
                // Column names are compared as SQL engines do (case-insensitively).
                let name = std::str::from_utf8(raw).unwrap_or("");
                let mut column = name.to_string();
                while !taken.insert(column.to_ascii_lowercase()) {
                    column = format!("prop_{column}");
                }
                let property: Arc<str> = Arc::from(name);
                self.by_name.insert(property.clone(), found.len());
                found.push((property, column, kind_of_item(&v), empty_array));
            }
        }
        let mut cols: Vec<PropColumn> = found
            .into_iter()
            .map(|(property, column, kind, empty_array)| {
                // Only nulls so far: a string column; only empty arrays: a list of strings.
                let kind = kind.unwrap_or(if empty_array {
                    Kind::List(Box::new(Kind::Str))
                } else {
                    Kind::Str
                });
                PropColumn {
                    property,
                    column,
                    builder: kind.builder(),
                    kind,
                    distinct_text: false,
                }
            })
            .collect();
        // Distinct texts of each string column counted by their hashes (a collision only
        // undercounts), all columns in one pass of the rows.
        let text_cols: Vec<usize> = (0..cols.len())
            .filter(|&i| cols[i].kind == Kind::Str)
            .collect();
        if !text_cols.is_empty() {
            let mut seen = vec![std::collections::HashSet::new(); text_cols.len()];
            let mut values = vec![0usize; text_cols.len()];
            // The columns the row before had a text in (a repeated row counts the same ones).
            let mut counted: Vec<usize> = Vec::new();
            let mut before: Option<&[u8]> = None;
            for tape in tapes() {
                if before == Some(tape) {
                    for &j in &counted {
                        values[j] += 1;
                    }
                    continue;
                }
                before = Some(tape);
                counted.clear();
                fields.clear();
                let _ = read_fields(tape, &mut fields);
                for (j, &i) in text_cols.iter().enumerate() {
                    let name = cols[i].property.as_bytes();
                    let Some(&f) = fields.iter().find(|&&f| field_name(tape, f) == name) else {
                        continue;
                    };
                    if let Some(h) = text_hash(&field_value(tape, f), &mut self.text.text) {
                        values[j] += 1;
                        seen[j].insert(h);
                        counted.push(j);
                    }
                }
            }
            for (j, &i) in text_cols.iter().enumerate() {
                cols[i].distinct_text = values[j] >= 64 && seen[j].len() * 2 > values[j];
            }
        }
        self.fields = fields;
        let mut fields: Vec<Field> = Vec::new();
        // The common columns' fields come from an empty batch of them.
        let common = EventColumns::new(Columns::TYPED)
            .finish()
            .expect("empty common columns");
        fields.extend(common.schema().fields().iter().map(|f| f.as_ref().clone()));
        fields.extend(
            cols.iter()
                .map(|c| Field::new(c.column.clone(), c.kind.data_type(), true)),
        );
        self.schema = Some(Arc::new(Schema::new(fields)));
        self.columns = Some(cols);
        // The waiting rows into the columns; a row repeating the one before copies its values
        // (as `push_tape` does), and the last one is where later rows compare.
        let mut before: Option<&[u8]> = None;
        for tape in tapes() {
            if before == Some(tape) {
                self.copy_last();
                continue;
            }
            before = Some(tape);
            let unfit = self.unfit;
            self.append_props(tape);
            self.last_unfit = self.unfit - unfit;
        }
        self.last.clear();
        self.last.extend_from_slice(before.unwrap_or_default());
    }

    /// Appends a copy of the last row's values (a row whose tape repeats the last one's).
    fn copy_last(&mut self) {
        if let Some(last) = self.batch_rows().checked_sub(1) {
            self.copy_row(last);
        }
        self.unfit += self.last_unfit;
    }

    /// The property columns whose text values were mostly distinct in the rows that fixed the
    /// columns (a Parquet dictionary would cost time and save nothing there).
    pub fn distinct_text_columns(&self) -> Vec<String> {
        self.columns
            .iter()
            .flatten()
            .filter(|c| c.distinct_text)
            .map(|c| c.column.clone())
            .collect()
    }

    /// The property columns that are lists of text (pointers of stacks, above all).
    pub fn text_list_columns(&self) -> Vec<String> {
        self.columns
            .iter()
            .flatten()
            .filter(|c| matches!(&c.kind, Kind::List(k) if **k == Kind::Str))
            .map(|c| c.column.clone())
            .collect()
    }

    /// The property columns of numbers, booleans and times (the ones worth page statistics).
    pub fn scalar_columns(&self) -> Vec<String> {
        self.columns
            .iter()
            .flatten()
            .filter(|c| {
                !matches!(
                    c.kind,
                    Kind::Str | Kind::Json | Kind::Binary | Kind::List(_)
                )
            })
            .map(|c| c.column.clone())
            .collect()
    }

    /// Whether the property columns are fixed.
    pub fn columns_fixed(&self) -> bool {
        self.columns.is_some()
    }

    /// The table's schema (once the property columns are fixed; `None` before).
    pub fn schema(&self) -> Option<SchemaRef> {
        self.schema.clone()
    }

    /// The rows pushed so far as a batch (the first call fixes the property columns).
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        if self.columns.is_none() {
            self.fix_columns();
        }
        let mut arrays: Vec<ArrayRef> = self
            .common
            .finish_columns()
            .into_iter()
            .map(|(_, a)| a)
            .collect();
        // Rows of the next batch are not found among this one's.
        self.earlier.clear();
        for c in self.columns.as_mut().expect("columns fixed") {
            let a = c.builder.finish();
            // The next batch's builder sized as this one (no regrowing while it fills).
            if a.len() >= 1024 {
                c.builder = c.kind.builder_like(a.as_ref());
            }
            arrays.push(a);
        }
        RecordBatch::try_new(self.schema.clone().expect("schema fixed"), arrays)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Value;
    use crate::guid::Guid;
    use crate::time::FILETIME_UNIX_EPOCH;
    use arrow_schema::DataType;

    #[test]
    fn kinds_and_unfit_values() {
        let mut t = TypedColumns::new();
        let e = test_record();
        let mut row = |props: Vec<(&str, Value)>| {
            let mut d = DecodedEvent::default();
            for (n, v) in props {
                d.properties.push(n, v);
            }
            t.push("f", 0, &e, &mut d);
        };
        row(vec![
            ("a", Value::Null),
            ("pid", Value::U64(5)),
            ("list", Value::Array(vec![])),
        ]);
        row(vec![
            ("a", Value::I64(-3)),
            ("pid", Value::String("x".into())),
            ("list", Value::Array(vec![Value::U64(1), Value::Hex(2)])),
        ]);
        let b = t.finish().unwrap();
        let names: Vec<_> = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert!(names.ends_with(&["a".into(), "prop_pid".into(), "list".into()]));
        assert_eq!(b.column(b.num_columns() - 3).data_type(), &DataType::Int64);
        assert_eq!(b.column(b.num_columns() - 2).data_type(), &DataType::UInt64);
        // "x" does not fit the uint64 column.
        assert_eq!(t.unfit, 1);
        assert_eq!(b.column(b.num_columns() - 2).null_count(), 1);
        assert_eq!(b.column(0).len(), 2);
    }

    #[test]
    fn rows_repeating_while_the_columns_wait_are_copied_with_their_unfit_values() {
        // Runs of equal rows before and after the columns are fixed (at INFER_ROWS rows), with a
        // text that does not fit the number column: every row keeps its own values and each
        // repeat counts its unfit value again.
        let mut t = TypedColumns::new();
        let e = test_record();
        let value = |i: usize| match (i / 3) % 4 {
            0 => Value::U64(7),
            1 => Value::String("seven".into()),
            2 => Value::U64(i as u64),
            _ => Value::Null,
        };
        let n = INFER_ROWS + 50;
        for i in 0..n {
            let mut d = DecodedEvent::default();
            d.properties.push("n", value(i));
            d.properties.push("s", Value::String(format!("r{}", i / 3)));
            t.push("f", 0, &e, &mut d);
        }
        let b = t.finish().unwrap();
        assert_eq!(b.num_rows(), n);
        let unfit = check_rows(&b, 0, value, |i| format!("r{}", i / 3));
        assert_eq!(t.unfit, unfit);
    }

    /// Checks the rows of `b` (rows `from..` of what was pushed) against the number column's
    /// `value(i)` and the text column's `text(i)`; returns how many values did not fit.
    fn check_rows(
        b: &RecordBatch,
        from: usize,
        value: impl Fn(usize) -> Value,
        text: impl Fn(usize) -> String,
    ) -> u64 {
        let nums = b.column(b.num_columns() - 2);
        let nums = nums
            .as_any()
            .downcast_ref::<arrow_array::UInt64Array>()
            .unwrap();
        let mut unfit = 0;
        for (k, got) in texts(b).iter().enumerate() {
            let i = from + k;
            let want = match value(i) {
                Value::U64(v) => Some(v),
                Value::String(_) => {
                    unfit += 1;
                    None
                }
                _ => None,
            };
            assert_eq!(nums.is_valid(k).then(|| nums.value(k)), want, "row {i}");
            assert_eq!(got.as_deref(), Some(text(i).as_str()), "row {i}");
        }
        unfit
    }

    #[test]
    fn rows_repeating_earlier_rows_of_the_batch_are_copied_with_their_unfit_values() {
        // Five tapes in turn (never the one before), past the rows that fix the columns and
        // over a batch boundary: each row keeps its own values, each copy counts its unfit one.
        let mut t = TypedColumns::new();
        let e = test_record();
        let value = |i: usize| match i % 5 {
            0 => Value::U64(7),
            1 => Value::String("seven".into()),
            2 => Value::U64(11),
            3 => Value::Null,
            _ => Value::U64(13),
        };
        let push = |t: &mut TypedColumns, i: usize| {
            let mut d = DecodedEvent::default();
            d.properties.push("n", value(i));
            d.properties.push("s", Value::String(format!("t{}", i % 5)));
            t.push("f", 0, &e, &mut d);
        };
        let first = INFER_ROWS + 100;
        for i in 0..first {
            push(&mut t, i);
        }
        let mut batches = vec![(0, t.finish().unwrap())];
        for i in first..first + 50 {
            push(&mut t, i);
        }
        batches.push((first, t.finish().unwrap()));
        let unfit: u64 = batches
            .iter()
            .map(|(from, b)| check_rows(b, *from, value, |i| format!("t{}", i % 5)))
            .sum();
        assert_eq!(batches[1].1.num_rows(), 50);
        assert_eq!(t.unfit, unfit);
    }

    fn test_record() -> EventRecord<'static> {
        EventRecord {
            header_type: crate::HeaderType::EventHeader64,
            flags: 0,
            provider: Guid::ZERO,
            descriptor: Default::default(),
            hook_id: None,
            pid: 1,
            tid: 2,
            cpu: 0,
            timestamp: FILETIME_UNIX_EPOCH + 10,
            raw_timestamp: 0,
            kernel_time: 0,
            user_time: 0,
            activity_id: Guid::ZERO,
            pointer_size: 8,
            payload: Default::default(),
            ext: Default::default(),
        }
    }

    /// Text of the last column's rows.
    fn texts(b: &RecordBatch) -> Vec<Option<String>> {
        let c = b.column(b.num_columns() - 1);
        let c = c
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .unwrap();
        c.iter().map(|v| v.map(str::to_string)).collect()
    }

    #[test]
    fn value_maps_naming_some_values_make_text_columns_of_what_dump_shows() {
        // IrpFlags-like: bits without names come as hex, named ones as their names; an enum's
        // unlisted value as a number. Whichever comes first, the column is text and nothing is
        // null.
        for first_named in [false, true] {
            let (e, mut t) = (test_record(), TypedColumns::new());
            let mut vals = vec![
                Value::Hex(0x60000),
                Value::Mapped {
                    value: 0x43,
                    name: "Nocache, Paging".into(),
                },
                Value::U64(0),
                Value::Bool(true),
            ];
            if first_named {
                vals.swap(0, 1);
            }
            for v in vals {
                let mut d = DecodedEvent::default();
                d.properties.push("Flags", v);
                t.push("f", 0, &e, &mut d);
            }
            let b = t.finish().unwrap();
            let mut want = vec![
                Some("0x60000".to_string()),
                Some("Nocache, Paging".into()),
                Some("0".into()),
                Some("true".into()),
            ];
            if first_named {
                want.swap(0, 1);
            }
            assert_eq!(texts(&b), want, "first named: {first_named}");
            assert_eq!(t.unfit, 0);
        }
    }

    #[test]
    fn a_name_met_after_the_column_became_a_number_keeps_its_number() {
        let (e, mut t) = (test_record(), TypedColumns::new());
        let mut push = |v: Value| {
            let mut d = DecodedEvent::default();
            d.properties.push("Flags", v);
            t.push("f", 0, &e, &mut d);
        };
        for i in 0..INFER_ROWS as u64 {
            push(Value::U64(i));
        }
        push(Value::Mapped {
            value: 7,
            name: "Seven".into(),
        });
        let b = t.finish().unwrap();
        let c = b.column(b.num_columns() - 1);
        let c = c
            .as_any()
            .downcast_ref::<arrow_array::UInt64Array>()
            .unwrap();
        assert_eq!(c.len(), INFER_ROWS + 1);
        assert_eq!(c.value(INFER_ROWS), 7);
        assert_eq!(c.null_count(), 0);
        assert_eq!(t.unfit, 0);
    }
}
