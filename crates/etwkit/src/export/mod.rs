//! Exports: decoded events and answers in the formats other tools read. One file per format.
//!
//! - [`pcapng`]: packet-capture events (PktMon, NDIS-PacketCapture) as a pcapng capture for Wireshark
//!   and tshark.
//! - `arrow` (feature `arrow`): decoded events as Arrow record batches; `typed`, one event type's
//!   properties as typed columns.
//! - `parquet` (feature `parquet`): decoded events as a Parquet dataset (DuckDB, Spark); `rows`
//!   and `tape` carry decoded records between its threads as bytes, `memo` spares repeated
//!   payloads their walk; `pq` writes the files, `staged` makes the directory (and
//!   any output file) appear whole or not at all.
//! - [`profile`]: the stack profile heap and CPU reports convert into, which the two below write.
//! - `pprof` (feature `pprof`): a stack profile (heap, CPU) as a pprof profile.
//! - `flamegraph` (feature `flamegraph`): a stack profile (a heap report's outstanding bytes, a
//!   CPU report's samples) as a flame graph (SVG).

#[cfg(feature = "arrow")]
pub mod arrow;
#[cfg(feature = "flamegraph")]
pub mod flamegraph;
#[cfg(feature = "parquet")]
pub mod memo;
#[cfg(feature = "parquet")]
pub mod parquet;
pub mod pcapng;
#[cfg(feature = "pprof")]
pub mod pprof;
#[cfg(feature = "parquet")]
pub mod pq;
pub mod profile;
#[cfg(feature = "parquet")]
pub mod rows;
pub mod staged;
#[cfg(feature = "arrow")]
pub mod tape;
#[cfg(feature = "arrow")]
pub mod typed;
