//! Decoded events as a Parquet dataset (DuckDB, Spark, pandas, Polars read it):
//!
//! - `DIR/events.parquet`: one row per record, the columns of [`Columns::EVENTS`] (file, record
//!   index, timestamp, provider GUID and name, names, descriptor, pid/tid/cpu, activity id, header
//!   type, payload, stack, properties as JSON);
//! - `DIR/<provider>/<event>[.v<version>].parquet`: one table per event type with decoded
//!   properties, the common columns of [`Columns::TYPED`] and one typed column per property
//!   ([`TypedColumns`]).
//!
//! zstd compression; names are dictionary-encoded (Parquet dictionary pages); row groups of at most
//! [`ROW_GROUP_ROWS`] rows so that readers can split a file across threads and executors.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::BufWriter;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};

use super::arrow::{Columns, EventColumns, Row, TypedColumns};
use super::memo::Memo;
use super::pq::{self, FileWriter, Options};
use super::rows;
use super::staged::{Existing, StageError, Staged};
use super::tape::TapeWriter;
use crate::decode::{DecodedEvent, Decoder, Tee};
use crate::etl::{EtlFile, Order, ReadSummary};
use crate::guid::Guid;
use crate::sink::json::JsonProps;
use crate::EventRecord;

/// Rows per record batch handed to the Parquet writer.
pub const BATCH_ROWS: usize = 1 << 13;
/// Rows per row group at most (a row group is the unit parallel readers split on).
pub const ROW_GROUP_ROWS: usize = 1 << 17;

/// Why an export stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("cannot write {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing {}: {source}", path.display())]
    Parquet { path: PathBuf, source: pq::Error },
    #[error("building the rows of {}: {source}", path.display())]
    Arrow { path: PathBuf, source: ArrowError },
    /// The destination cannot take the dataset (it holds files, or is not a directory).
    #[error("{0}")]
    Destination(#[from] StageError),
}

/// What one typed table received.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TableSummary {
    pub rows: u64,
    /// Values written as null because they did not fit their column's type.
    pub unfit: u64,
}

/// What an export wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ExportSummary {
    /// Rows of `events.parquet`.
    pub events: u64,
    /// Records without decoded properties (in `events.parquet` only).
    pub untyped: u64,
    /// Typed tables by path relative to the dataset directory.
    pub tables: BTreeMap<String, TableSummary>,
}

impl ExportError {
    /// The same error, its path as [`Staged::shown`] names it.
    fn shown(self, staged: Option<&Staged>) -> ExportError {
        let Some(s) = staged else {
            return self;
        };
        match self {
            ExportError::Io { path, source } => ExportError::Io {
                path: s.shown(&path),
                source,
            },
            ExportError::Parquet { path, source } => ExportError::Parquet {
                path: s.shown(&path),
                source,
            },
            ExportError::Arrow { path, source } => ExportError::Arrow {
                path: s.shown(&path),
                source,
            },
            e @ ExportError::Destination(_) => e,
        }
    }
}

impl ExportSummary {
    /// Values written as null in all typed tables together.
    pub fn unfit(&self) -> u64 {
        self.tables.values().map(|t| t.unfit).sum()
    }
}

/// Rows all typed tables together hold before those with fixed columns hand theirs on.
pub const TYPED_BUFFERED_ROWS: usize = 1 << 14;

/// Tables with fewer rows than this, written in one batch, are not compressed.
pub const SMALL_TABLE_ROWS: usize = 1024;

/// Integer columns of `events.parquet` and the typed tables: written plain (zstd packs them as
/// small as a dictionary would, for less work).
const PLAIN_INTEGERS: [&str; 10] = [
    "id", "version", "level", "opcode", "task", "keywords", "channel", "pid", "tid", "cpu",
];

/// Columns of `events.parquet` and the typed tables whose pages carry min/max statistics: the
/// input file (rows of one file are contiguous) and the numbers and times a reader filters on.
/// Text columns have none: computing min/max of every value cost about a tenth of the export,
/// and in time order every row group spans most providers and names anyway (a typed table holds
/// one event type), so no reader could prune on them.
const STATISTICS: [&str; 13] = [
    "file",
    "record",
    "timestamp",
    "id",
    "version",
    "level",
    "opcode",
    "task",
    "keywords",
    "channel",
    "pid",
    "tid",
    "cpu",
];

/// Writer options: `dictionary_off` columns and the `lists_plain` list columns written plain,
/// `statistics` columns (beside [`STATISTICS`]) with min/max statistics.
fn properties(
    dictionary_off: &[&str],
    lists_plain: &[String],
    statistics: &[String],
    compress: bool,
) -> Options {
    let mut o = Options {
        zstd: compress.then_some(1),
        row_group_rows: ROW_GROUP_ROWS,
        ..Options::default()
    };
    // Record indexes and times rise row by row: their differences are small (the indexes' all
    // one), so delta encoding packs them in a few bits before zstd sees them.
    o.delta
        .extend(["record".to_string(), "timestamp".to_string()]);
    // High-cardinality columns gain nothing from a dictionary.
    o.plain.extend(
        dictionary_off
            .iter()
            .chain(&PLAIN_INTEGERS)
            .map(|c| c.to_string())
            .chain(lists_plain.iter().cloned())
            .chain(["stack".to_string()]),
    );
    o.statistics.extend(
        STATISTICS
            .iter()
            .map(|c| c.to_string())
            .chain(statistics.iter().cloned()),
    );
    o
}

struct Sink {
    path: PathBuf,
    writer: FileWriter<BufWriter<File>>,
}

impl Sink {
    fn create(path: PathBuf, schema: SchemaRef, props: Options) -> Result<Sink, ExportError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| ExportError::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        let f = File::create(&path).map_err(|source| ExportError::Io {
            path: path.clone(),
            source,
        })?;
        let writer = FileWriter::new(BufWriter::with_capacity(1 << 20, f), schema, props).map_err(
            |source| ExportError::Parquet {
                path: path.clone(),
                source,
            },
        )?;
        Ok(Sink { path, writer })
    }

    fn write(&mut self, b: Result<RecordBatch, ArrowError>) -> Result<(), ExportError> {
        let b = b.map_err(|source| ExportError::Arrow {
            path: self.path.clone(),
            source,
        })?;
        self.writer
            .write(&b)
            .map_err(|source| ExportError::Parquet {
                path: self.path.clone(),
                source,
            })
    }

    fn close(self) -> Result<(), ExportError> {
        self.writer
            .close()
            .map(|_| ())
            .map_err(|source| ExportError::Parquet {
                path: self.path,
                source,
            })
    }
}

/// What the writer thread is asked to do.
enum Job {
    Create {
        id: usize,
        path: PathBuf,
        schema: SchemaRef,
        props: Box<Options>,
    },
    Write {
        id: usize,
        batch: RecordBatch,
    },
    Close {
        id: usize,
    },
}

/// Batches queued for the writer thread at most (bounds memory).
const QUEUED_BATCHES: usize = 3;

/// Parquet encoding and compression on their own thread, while the caller decodes and builds the
/// next batches. Errors are kept and returned by [`Writers::finish`] (later jobs are dropped).
struct Writers {
    tx: Option<std::sync::mpsc::SyncSender<Job>>,
    thread: Option<std::thread::JoinHandle<Result<(), ExportError>>>,
    next: usize,
}

impl Writers {
    fn start() -> Writers {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(QUEUED_BATCHES);
        let thread = std::thread::Builder::new()
            .name("etwkit-parquet".into())
            .spawn(move || {
                let mut sinks: HashMap<usize, Sink> = HashMap::new();
                let mut result = Ok(());
                for job in rx {
                    if result.is_err() {
                        continue;
                    }
                    result = match job {
                        Job::Create {
                            id,
                            path,
                            schema,
                            props,
                        } => Sink::create(path, schema, *props).map(|s| {
                            sinks.insert(id, s);
                        }),
                        Job::Write { id, batch } => match sinks.get_mut(&id) {
                            Some(s) => s.write(Ok(batch)),
                            None => Ok(()),
                        },
                        Job::Close { id } => match sinks.remove(&id) {
                            Some(s) => s.close(),
                            None => Ok(()),
                        },
                    };
                }
                result
            })
            .expect("spawn the Parquet writer thread");
        Writers {
            tx: Some(tx),
            thread: Some(thread),
            next: 0,
        }
    }

    /// Sends a job; when the thread has stopped, its error.
    fn send(&mut self, job: Job) -> Result<(), ExportError> {
        let sent = self.tx.as_ref().map(|tx| tx.send(job).is_ok());
        if sent == Some(true) {
            return Ok(());
        }
        self.finish()
    }

    fn create(
        &mut self,
        path: PathBuf,
        schema: SchemaRef,
        props: Options,
    ) -> Result<usize, ExportError> {
        let id = self.next;
        self.next += 1;
        self.send(Job::Create {
            id,
            path,
            schema,
            props: Box::new(props),
        })?;
        Ok(id)
    }

    fn write(
        &mut self,
        id: usize,
        path: &Path,
        b: Result<RecordBatch, ArrowError>,
    ) -> Result<(), ExportError> {
        let batch = b.map_err(|source| ExportError::Arrow {
            path: path.to_path_buf(),
            source,
        })?;
        self.send(Job::Write { id, batch })
    }

    /// Waits for every queued job; the first error.
    fn finish(&mut self) -> Result<(), ExportError> {
        self.tx = None;
        match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| {
                Err(ExportError::Io {
                    path: PathBuf::new(),
                    source: std::io::Error::other("the Parquet writer thread panicked"),
                })
            }),
            None => Ok(()),
        }
    }
}

/// Which typed tables a record may go to: the one among them whose event name is the record's
/// (TraceLogging events share id 0, and often everything else in their descriptor: only their
/// names tell them apart).
#[derive(Clone, PartialEq, Eq, Hash)]
struct TableKey {
    provider: Guid,
    id: u16,
    opcode: u8,
    task: u16,
    version: u8,
    kernel: bool,
}

struct Table {
    /// The event name of its rows.
    name: Option<Box<str>>,
    rel: String,
    cols: TypedColumns,
    /// Which of the typed tables' writer threads encodes it.
    writer: usize,
    /// The writer's id for the table's file, once its first batch fixed the schema.
    sink: Option<usize>,
    rows: u64,
}

/// The rows of `events.parquet`: its builder and its writer thread.
struct EventsPart {
    path: PathBuf,
    cols: EventColumns,
    writers: Writers,
    sink: usize,
    rows: u64,
    untyped: u64,
}

impl EventsPart {
    fn flush(&mut self) -> Result<(), ExportError> {
        let b = self.cols.finish();
        self.writers.write(self.sink, &self.path, b)
    }

    /// Adds one row; `json` holds the properties' JSON text (empty: none).
    fn push(
        &mut self,
        file: &str,
        record: u64,
        r: &Row<'_>,
        json: &[u8],
    ) -> Result<(), ExportError> {
        self.cols.push_row(file, record, r, json);
        self.rows += 1;
        if json.is_empty() {
            self.untyped += 1;
        }
        if self.cols.rows() >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    /// Hands the last rows and the close to the writer thread (which finishes on its own).
    fn close(&mut self) -> Result<(), ExportError> {
        if self.cols.rows() > 0 {
            self.flush()?;
        }
        self.writers.send(Job::Close { id: self.sink })
    }
}

/// Writer threads of the typed tables (tables take turns): encoding, compressing and closing
/// the many tables, the last ones at the end above all, is spread over cores.
const TABLE_WRITERS: usize = 2;

/// The typed tables: their builders and their writer threads.
struct TablesPart {
    dir: PathBuf,
    /// Rows the tables hold, not yet handed to the writer.
    buffered: usize,
    /// `buffered` at which every table with fixed columns hands its rows on.
    flush_mark: usize,
    writers: Vec<Writers>,
    /// The tables by key, then by event name.
    tables: crate::schema::registry::FastMap<TableKey, Vec<Table>>,
    /// Tables made so far (they take the writer threads in turn).
    made: usize,
    paths: HashSet<String>,
}

/// Writes a dataset: push records with [`DatasetWriter::push`] (or whole files with
/// [`DatasetWriter::add_file`]), then [`DatasetWriter::finish`].
///
/// `events.parquet` and the typed tables are built from one walk of each file (one decode per
/// record feeding both), with threads encoding and compressing Parquet behind it.
///
/// The files are written in a staging directory beside the destination and moved into place by
/// [`DatasetWriter::finish`] ([`super::staged`]): until then the destination is untouched, and a
/// writer dropped unfinished (an error, a panic) leaves it as it was.
pub struct DatasetWriter {
    events: EventsPart,
    tables: TypedThread,
    /// None once committed.
    staged: Option<Staged>,
}

/// Bytes of typed rows gathered before they go to the typed tables' thread.
const TYPED_CHUNK_BYTES: usize = 1 << 19;
/// Chunks queued for the typed tables' thread at most.
const QUEUED_CHUNKS: usize = 8;

/// The typed tables, built on their own thread from the rows that have properties (as
/// [`rows`] bytes, in chunks), while this thread builds `events.parquet`'s columns.
struct TypedThread {
    /// The input the rows gathered in `chunk` came from.
    file: Arc<str>,
    chunk: Vec<u8>,
    tx: Option<std::sync::mpsc::SyncSender<(Arc<str>, Vec<u8>)>>,
    /// Chunks the thread is done with, for reuse (their memory is already paged in).
    spare: std::sync::mpsc::Receiver<Vec<u8>>,
    thread: Option<std::thread::JoinHandle<Result<BTreeMap<String, TableSummary>, ExportError>>>,
}

impl TypedThread {
    fn start(mut tables: TablesPart) -> TypedThread {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(Arc<str>, Vec<u8>)>(QUEUED_CHUNKS);
        let (spare_tx, spare) = std::sync::mpsc::channel::<Vec<u8>>();
        let thread = std::thread::Builder::new()
            .name("etwkit-typed".into())
            .spawn(move || {
                let mut result = Ok(());
                for (file, mut chunk) in rx {
                    if result.is_ok() {
                        rows::for_each(&chunk, |rec| {
                            result = tables.push(&file, rec.record, &rec.row, rec.tape);
                            result.is_ok()
                        });
                    }
                    chunk.clear();
                    let _ = spare_tx.send(chunk);
                }
                let finished = tables.finish();
                result.and(finished)
            })
            .expect("spawn the typed tables' thread");
        TypedThread {
            file: Arc::from(""),
            chunk: Vec::with_capacity(TYPED_CHUNK_BYTES + (1 << 16)),
            tx: Some(tx),
            spare,
            thread: Some(thread),
        }
    }

    /// Queues one row (a record without properties goes to `events.parquet` only).
    fn push(
        &mut self,
        file: &str,
        record: u64,
        r: &Row<'_>,
        tape: &[u8],
    ) -> Result<(), ExportError> {
        // The tape of no properties is the empty struct's ops (or nothing at all).
        if !has_properties(tape) {
            return Ok(());
        }
        if &*self.file != file {
            self.send()?;
            self.file = Arc::from(file);
        }
        let no_payload = Row {
            payload: &[],
            stack: None,
            ..*r
        };
        rows::encode_row(&mut self.chunk, record, &no_payload, b"", tape);
        if self.chunk.len() >= TYPED_CHUNK_BYTES {
            self.send()?;
        }
        Ok(())
    }

    /// As [`TypedThread::push`], for a record as the decode threads encoded it (its common
    /// fields' bytes and its tape are copied as they are).
    fn push_raw(
        &mut self,
        file: &str,
        record: u64,
        rec: &rows::Decoded<'_>,
    ) -> Result<(), ExportError> {
        if !has_properties(rec.tape) {
            return Ok(());
        }
        if &*self.file != file {
            self.send()?;
            self.file = Arc::from(file);
        }
        rows::copy_for_tables(&mut self.chunk, rec, record);
        if self.chunk.len() >= TYPED_CHUNK_BYTES {
            self.send()?;
        }
        Ok(())
    }

    /// Hands the gathered rows to the thread; when it has stopped, its error.
    fn send(&mut self) -> Result<(), ExportError> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        let next = self
            .spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(TYPED_CHUNK_BYTES + (1 << 16)));
        let chunk = std::mem::replace(&mut self.chunk, next);
        let sent = self
            .tx
            .as_ref()
            .is_some_and(|tx| tx.send((self.file.clone(), chunk)).is_ok());
        if sent {
            return Ok(());
        }
        self.finish().map(|_| ())
    }

    /// Sends the last rows, waits for the thread to write and close every table; what each
    /// received.
    fn finish(&mut self) -> Result<BTreeMap<String, TableSummary>, ExportError> {
        if !self.chunk.is_empty() && self.tx.is_some() {
            let chunk = std::mem::take(&mut self.chunk);
            if let Some(tx) = &self.tx {
                let _ = tx.send((self.file.clone(), chunk));
            }
        }
        self.tx = None;
        match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| {
                Err(ExportError::Io {
                    path: PathBuf::new(),
                    source: std::io::Error::other("the typed tables' thread panicked"),
                })
            }),
            None => Err(ExportError::Io {
                path: PathBuf::new(),
                source: std::io::Error::other("the typed tables' thread has stopped"),
            }),
        }
    }
}

/// Whether a tape holds at least one property (the empty struct's tape is its two ops and their
/// length).
fn has_properties(tape: &[u8]) -> bool {
    tape.len() > 6
}

/// A file or directory name made of `[A-Za-z0-9._-]` (others become `_`), never empty or a dot name.
fn safe_name(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.chars().all(|c| c == '.') {
        out = format!("_{out}");
    }
    out
}

/// A path for a new table, unique among `paths` (those of the dataset's tables so far).
fn table_path(paths: &mut HashSet<String>, r: &Row<'_>) -> String {
    let provider = r
        .provider_name
        .map(str::to_string)
        .unwrap_or_else(|| r.provider.to_string());
    let mut stem = format!("{}/{}", safe_name(&provider), safe_name(&event_label(r)));
    if r.descriptor.version > 0 {
        stem.push_str(&format!(".v{}", r.descriptor.version));
    }
    let mut rel = format!("{stem}.parquet");
    if !paths.insert(rel.to_ascii_lowercase()) {
        // Another event type (another id, opcode or GUID) has the same name.
        let k = &r.descriptor;
        let base = format!("{stem}.id{}.op{}.task{}", k.id, k.opcode, k.task);
        rel = format!("{base}.parquet");
        let mut n = 2;
        while !paths.insert(rel.to_ascii_lowercase()) {
            rel = format!("{base}.{n}.parquet");
            n += 1;
        }
    }
    rel
}

/// The event type's name: its event name, else `Task_Opcode`, else `Event<id>` / `Opcode<n>`.
fn event_label(r: &Row<'_>) -> String {
    if let Some(n) = r.event_name {
        return n.to_string();
    }
    let e = r;
    match (r.task_name, r.opcode_name) {
        (Some(t), Some(o)) => format!("{t}_{o}"),
        (Some(t), None) if e.header_type.is_event_header() => {
            format!("{t}_Event{}", e.descriptor.id)
        }
        (Some(t), None) => format!("{t}_Opcode{}", e.descriptor.opcode),
        (None, Some(o)) => format!("{o}_Event{}", e.descriptor.id),
        (None, None) if e.header_type.is_event_header() => format!("Event{}", e.descriptor.id),
        (None, None) => format!("Opcode{}", e.descriptor.opcode),
    }
}

impl DatasetWriter {
    /// Starts a dataset for the directory `dir` (created with its parents if needed). A `dir` that
    /// holds files is refused or, with [`Existing::Replace`] and when it holds a dataset
    /// (`events.parquet`), replaced by [`DatasetWriter::finish`].
    pub fn create(dir: &Path, existing: Existing) -> Result<DatasetWriter, ExportError> {
        let staged = Staged::new(dir, existing, "events.parquet")?;
        let dir = staged.path().to_path_buf();
        let dir = dir.as_path();
        let schema = EventColumns::new(Columns::EVENTS)
            .finish()
            .map_err(|source| ExportError::Arrow {
                path: dir.join("events.parquet"),
                source,
            })?
            .schema();
        let mut writers = Writers::start();
        let path = dir.join("events.parquet");
        let sink = writers.create(
            path.clone(),
            schema,
            properties(
                &["record", "timestamp", "payload", "properties"],
                &[],
                &[],
                true,
            ),
        )?;
        Ok(DatasetWriter {
            events: EventsPart {
                path,
                cols: EventColumns::with_capacity(Columns::EVENTS, BATCH_ROWS),
                writers,
                sink,
                rows: 0,
                untyped: 0,
            },
            tables: TypedThread::start(TablesPart {
                dir: dir.to_path_buf(),
                buffered: 0,
                flush_mark: TYPED_BUFFERED_ROWS,
                writers: (0..TABLE_WRITERS).map(|_| Writers::start()).collect(),
                tables: Default::default(),
                made: 0,
                paths: HashSet::new(),
            }),
            staged: Some(staged),
        })
    }

    /// Adds one decoded record: `file` names its input (the `file` column), `record` is its index in
    /// that file's time order.
    pub fn push(
        &mut self,
        file: &str,
        record: u64,
        e: &EventRecord<'_>,
        d: DecodedEvent,
    ) -> Result<(), ExportError> {
        let (mut json, mut tape) = (Vec::new(), TapeWriter::new());
        if !d.properties.is_empty() {
            d.properties.write_json(&mut json);
            d.properties.visit(&mut tape);
        }
        let row = Row::of(e, &d);
        self.events
            .push(file, record, &row, &json)
            .and_then(|()| self.tables.push(file, record, &row, tape.tape()))
            .map_err(|e| e.shown(self.staged.as_ref()))
    }

    /// Adds every record of `file` in time order, decoded by `decoder`; `name` fills the `file`
    /// column. Stops at the first write error; what the file itself could not give is in the
    /// returned summary.
    ///
    /// The file's buffers are decoded on every core: one walk, one decode per record, the
    /// payload's properties driving two visitors at once — the JSON text of `events.parquet`'s
    /// `properties` column and the tape of the typed tables' values (records whose layout does not
    /// fit take the value path, as `dump` does). The decoded records come back in time order as
    /// bytes ([`rows`]); this thread builds the Arrow columns from them while the writer threads
    /// encode and compress the batches before.
    pub fn add_file(
        &mut self,
        name: &str,
        file: &EtlFile,
        decoder: &Decoder,
    ) -> Result<ReadSummary, ExportError> {
        self.add_file_where(name, file, decoder, None, &mut |_| {})
    }

    /// As [`DatasetWriter::add_file`], the records `filter` keeps only (as
    /// [`Decoder::matches`] matches them: a kernel record without a process id in its header by
    /// the one the decoder attributes to it); `record` then counts the kept records (the line of
    /// `dump` given the same filter). `progress` hears the bytes of the file done so far.
    pub fn add_file_where(
        &mut self,
        name: &str,
        file: &EtlFile,
        decoder: &Decoder,
        filter: Option<&crate::filter::EventFilter>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<ReadSummary, ExportError> {
        let (events, tables) = (&mut self.events, &mut self.tables);
        let want_stack = events.cols.wants_stack();
        let mut err = None;
        let mut record = 0u64;
        type State = (Vec<u8>, String, TapeWriter, Memo);
        let rendered = file.par_render_vectored(
            Order::Time,
            crate::etl::parallel::default_threads(),
            || -> State {
                (
                    Vec::with_capacity(1024),
                    String::new(),
                    TapeWriter::new(),
                    Memo::default(),
                )
            },
            |(json, scratch, tape, memo): &mut State, r, out| {
                if filter.is_some_and(|f| !decoder.matches(f, &r.event)) {
                    return false;
                }
                json.clear();
                tape.clear();
                let d = decoder.decode_etl_visit_memo(
                    r,
                    &mut Tee(JsonProps::new(json, scratch), &mut *tape),
                    |t| {
                        t.0.clear();
                        t.1.clear();
                    },
                    want_stack,
                    memo,
                );
                rows::encode(out, &r.event, &d, want_stack, json, tape.tape());
                true
            },
            progress,
            &mut |slices| {
                for s in slices {
                    rows::for_each(s, |rec| {
                        let pushed = events
                            .push(name, record, &rec.row, rec.json)
                            .and_then(|()| tables.push_raw(name, record, &rec));
                        if let Err(e) = pushed {
                            err = Some(e);
                            return false;
                        }
                        record += 1;
                        true
                    });
                    if err.is_some() {
                        return ControlFlow::Break(());
                    }
                }
                ControlFlow::Continue(())
            },
        );
        err.map_or(Ok(rendered.read), |e| Err(e.shown(self.staged.as_ref())))
    }

    /// Writes the last rows, closes every file and moves the dataset into place.
    pub fn finish(mut self) -> Result<ExportSummary, ExportError> {
        // events.parquet's writer drains while the typed tables are finished here.
        let closed = self.events.close();
        let tables = self.tables.finish();
        let events = self.events.writers.finish();
        let shown = |e: ExportError| e.shown(self.staged.as_ref());
        closed.map_err(shown)?;
        events.map_err(shown)?;
        let tables = tables.map_err(shown)?;
        if let Some(s) = self.staged.take() {
            s.commit()?;
        }
        Ok(ExportSummary {
            events: self.events.rows,
            untyped: self.events.untyped,
            tables,
        })
    }
}

impl Drop for DatasetWriter {
    fn drop(&mut self) {
        if self.staged.is_some() {
            // Given up before `finish`: the threads stop writing before `staged` removes their
            // directory (its own drop, after this).
            let _ = self.tables.finish();
            let _ = self.events.writers.finish();
        }
    }
}

impl TablesPart {
    /// Adds a row to its event type's table; `tape` holds its properties (a record without any
    /// goes to `events.parquet` only).
    fn push(
        &mut self,
        file: &str,
        record: u64,
        r: &Row<'_>,
        tape: &[u8],
    ) -> Result<(), ExportError> {
        if !has_properties(tape) {
            return Ok(());
        }
        let key = TableKey {
            provider: r.provider,
            id: r.descriptor.id,
            opcode: r.descriptor.opcode,
            task: r.descriptor.task,
            version: r.descriptor.version,
            kernel: !r.header_type.is_event_header(),
        };
        let named = match self.tables.get_mut(&key) {
            Some(v) => v,
            None => self.tables.entry(key).or_default(),
        };
        let i = match named.iter().position(|t| t.name.as_deref() == r.event_name) {
            Some(i) => i,
            None => {
                named.push(Table {
                    name: r.event_name.map(Box::from),
                    rel: table_path(&mut self.paths, r),
                    writer: self.made % self.writers.len(),
                    cols: TypedColumns::new(),
                    sink: None,
                    rows: 0,
                });
                self.made += 1;
                named.len() - 1
            }
        };
        let t = &mut named[i];
        t.cols.push_row(file, record, r, tape);
        t.rows += 1;
        self.buffered += 1;
        if t.cols.rows() >= BATCH_ROWS {
            self.buffered -= t.cols.rows();
            Self::flush_table(&self.dir, &mut self.writers[t.writer], t, false)?;
        }
        if self.buffered >= self.flush_mark {
            // Bounded memory: every table whose columns are fixed hands its rows on; the
            // others hold at most INFER_ROWS rows each until their columns are fixed.
            for t in self.tables.values_mut().flatten() {
                if t.cols.columns_fixed() && t.cols.rows() > 0 {
                    self.buffered -= t.cols.rows();
                    Self::flush_table(&self.dir, &mut self.writers[t.writer], t, false)?;
                }
            }
            self.flush_mark = self.buffered + TYPED_BUFFERED_ROWS;
        }
        Ok(())
    }

    /// Sends the table's rows to its writer (creating its file first); `closing`: the last rows.
    fn flush_table(
        dir: &Path,
        w: &mut Writers,
        t: &mut Table,
        closing: bool,
    ) -> Result<(), ExportError> {
        let rows = t.cols.rows();
        let b = t.cols.finish();
        let path = dir.join(&t.rel);
        let id = match t.sink {
            Some(id) => id,
            None => {
                let schema = t.cols.schema().expect("fixed by finish");
                // A table that is whole in its first batch and small is not compressed: a
                // compressor per column costs more time than its few bytes save.
                let compress = rows >= SMALL_TABLE_ROWS || !closing;
                let mut plain = vec!["record".to_string(), "timestamp".to_string()];
                plain.extend(t.cols.distinct_text_columns());
                let plain: Vec<&str> = plain.iter().map(String::as_str).collect();
                let props = properties(
                    &plain,
                    &t.cols.text_list_columns(),
                    &t.cols.scalar_columns(),
                    compress,
                );
                let id = w.create(path.clone(), schema, props)?;
                t.sink = Some(id);
                id
            }
        };
        w.write(id, &path, b)
    }

    /// Writes the last rows and closes every table; what each received.
    fn finish(&mut self) -> Result<BTreeMap<String, TableSummary>, ExportError> {
        let mut out = BTreeMap::new();
        let mut result = Ok(());
        for mut t in self.tables.drain().flat_map(|(_, v)| v) {
            if result.is_ok() && (t.cols.rows() > 0 || t.sink.is_none()) {
                result = Self::flush_table(&self.dir, &mut self.writers[t.writer], &mut t, true);
            }
            if let Some(id) = t.sink.take() {
                if result.is_ok() {
                    result = self.writers[t.writer].send(Job::Close { id });
                }
            }
            out.insert(
                t.rel,
                TableSummary {
                    rows: t.rows,
                    unfit: t.cols.unfit,
                },
            );
        }
        let finished: Vec<_> = self.writers.iter_mut().map(Writers::finish).collect();
        result?;
        finished.into_iter().collect::<Result<(), _>>()?;
        Ok(out)
    }
}
