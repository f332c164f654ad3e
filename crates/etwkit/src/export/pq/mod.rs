//! A Parquet file writer for Arrow record batches: the columns `etwkit export` writes (booleans,
//! integers of every width, floats, text, binary, timestamps, and lists of those), data pages v1
//! with RLE levels, dictionary encoding while a column chunk's dictionary stays under 1 MiB,
//! DELTA_BINARY_PACKED for chosen integer columns, zstd, and min/max statistics for chosen
//! columns.
//!
//! A file is `PAR1`, its row groups (each column's chunk in turn: its dictionary page, then its
//! data pages), the footer (Thrift's compact protocol), the footer's length and `PAR1` again.
//!
//! ```
//! use std::sync::Arc;
//! use arrow_array::{RecordBatch, StringArray, UInt32Array};
//! use arrow_schema::{DataType, Field, Schema};
//! use etwkit::export::pq::{FileWriter, Options};
//!
//! let schema = Arc::new(Schema::new(vec![
//!     Field::new("pid", DataType::UInt32, false),
//!     Field::new("name", DataType::Utf8, true),
//! ]));
//! let batch = RecordBatch::try_new(
//!     schema.clone(),
//!     vec![
//!         Arc::new(UInt32Array::from(vec![4, 4, 1200])),
//!         Arc::new(StringArray::from(vec![Some("System"), None, Some("svchost.exe")])),
//!     ],
//! )?;
//! let mut w = FileWriter::new(Vec::new(), schema, Options::default())?;
//! w.write(&batch)?;
//! let file = w.close()?;
//! assert_eq!(&file[..4], b"PAR1");
//! assert_eq!(&file[file.len() - 4..], b"PAR1");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod column;
mod delta;
mod rle;
mod thrift;

use std::collections::HashSet;
use std::io::Write;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use column::{Chunk, ColumnOptions, ColumnWriter, Compressor, Leaf};

/// Why a Parquet file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0} has no Parquet column type here")]
    Unsupported(String),
    #[error("a batch of {got} columns for a file of {want}")]
    Schema { got: usize, want: usize },
}

/// How a file is written.
#[derive(Clone, Debug)]
pub struct Options {
    /// zstd level of every page (None: uncompressed).
    pub zstd: Option<i32>,
    /// Rows per row group at most.
    pub row_group_rows: usize,
    /// Top-level columns written without a dictionary (plain).
    pub plain: HashSet<String>,
    /// Top-level integer columns written DELTA_BINARY_PACKED (rising values: indexes, times).
    pub delta: HashSet<String>,
    /// Top-level columns whose chunks carry min/max statistics.
    pub statistics: HashSet<String>,
    /// The footer's `created_by`.
    pub created_by: String,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            zstd: Some(1),
            row_group_rows: 1 << 17,
            plain: HashSet::new(),
            delta: HashSet::new(),
            statistics: HashSet::new(),
            created_by: format!("etwkit {}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// Uncompressed bytes a data page holds before it is written.
pub const PAGE_BYTES: usize = 1 << 16;

struct RowGroup {
    /// File offset of each column's chunk, and the chunk's metadata.
    chunks: Vec<(u64, Chunk)>,
    rows: i64,
}

/// Writes one Parquet file: [`FileWriter::write`] each batch, then [`FileWriter::close`].
pub struct FileWriter<W: Write> {
    out: W,
    at: u64,
    schema: SchemaRef,
    columns: Vec<ColumnWriter>,
    compressor: Compressor,
    opts: Options,
    rows_in_group: usize,
    groups: Vec<RowGroup>,
}

impl<W: Write> FileWriter<W> {
    pub fn new(mut out: W, schema: SchemaRef, opts: Options) -> Result<FileWriter<W>, Error> {
        let columns = schema
            .fields()
            .iter()
            .map(|f| {
                let opts = ColumnOptions {
                    dictionary: !opts.plain.contains(f.name()),
                    statistics: opts.statistics.contains(f.name()),
                    delta: opts.delta.contains(f.name()),
                };
                Leaf::of(f).map(|l| ColumnWriter::new(l, opts))
            })
            .collect::<Result<Vec<_>, _>>()?;
        out.write_all(b"PAR1")?;
        Ok(FileWriter {
            out,
            at: 4,
            schema,
            columns,
            compressor: Compressor::new(opts.zstd)?,
            opts,
            rows_in_group: 0,
            groups: Vec::new(),
        })
    }

    /// Adds the rows of `batch` (whose columns are the file's, in order).
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), Error> {
        if batch.num_columns() != self.columns.len() {
            return Err(Error::Schema {
                got: batch.num_columns(),
                want: self.columns.len(),
            });
        }
        let mut from = 0;
        while from < batch.num_rows() {
            let n = (self.opts.row_group_rows - self.rows_in_group).min(batch.num_rows() - from);
            let part = batch.slice(from, n);
            for (c, a) in self.columns.iter_mut().zip(part.columns()) {
                c.append(a, &mut self.compressor)?;
                if c.page_bytes() >= PAGE_BYTES {
                    c.flush_page(&mut self.compressor)?;
                }
            }
            self.rows_in_group += n;
            from += n;
            if self.rows_in_group == self.opts.row_group_rows {
                self.flush_group()?;
            }
        }
        Ok(())
    }

    fn flush_group(&mut self) -> Result<(), Error> {
        if self.rows_in_group == 0 {
            return Ok(());
        }
        let mut chunks = Vec::with_capacity(self.columns.len());
        for c in &mut self.columns {
            let mut chunk = c.finish(&mut self.compressor)?;
            self.out.write_all(&chunk.dictionary)?;
            self.out.write_all(&chunk.data)?;
            c.recycle(std::mem::take(&mut chunk.data));
            chunk.dictionary = Vec::new();
            let size = chunk.size;
            chunks.push((self.at, chunk));
            self.at += size;
        }
        self.groups.push(RowGroup {
            chunks,
            rows: self.rows_in_group as i64,
        });
        self.rows_in_group = 0;
        Ok(())
    }

    /// Writes the last row group and the footer; gives the output back.
    pub fn close(mut self) -> Result<W, Error> {
        self.flush_group()?;
        let mut w = thrift::Writer::new();
        w.i32(1, 1);
        let leaves: usize = self.columns.iter().map(|c| c.leaf.elements.len()).sum();
        w.struct_list(2, leaves + 1);
        column::SchemaElement {
            name: "schema".into(),
            physical: None,
            repetition: 0,
            children: Some(self.schema.fields().len() as i32),
            logical: column::Logical::None,
        }
        .write(&mut w);
        for c in &self.columns {
            for e in &c.leaf.elements {
                e.write(&mut w);
            }
        }
        w.i64(3, self.groups.iter().map(|g| g.rows).sum());
        w.struct_list(4, self.groups.len());
        for g in &self.groups {
            w.begin(None);
            w.struct_list(1, g.chunks.len());
            for ((at, chunk), c) in g.chunks.iter().zip(&self.columns) {
                w.begin(None);
                w.i64(2, *at as i64);
                chunk.write_meta(&mut w, &c.leaf, self.compressor.is_zstd(), *at);
                w.end();
            }
            w.i64(2, g.chunks.iter().map(|c| c.1.uncompressed).sum());
            w.i64(3, g.rows);
            w.i64(5, g.chunks.first().map_or(0, |c| c.0 as i64));
            w.i64(6, g.chunks.iter().map(|c| c.1.size as i64).sum());
            w.end();
        }
        w.binary(6, self.opts.created_by.as_bytes());
        // Min/max as each column's logical type orders its values.
        w.struct_list(7, self.columns.len());
        for _ in &self.columns {
            w.begin(None);
            w.begin(Some(1));
            w.end();
            w.end();
        }
        w.end();
        self.out.write_all(&w.out)?;
        self.out.write_all(&(w.out.len() as u32).to_le_bytes())?;
        self.out.write_all(b"PAR1")?;
        self.out.flush()?;
        Ok(self.out)
    }
}
