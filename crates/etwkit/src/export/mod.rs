//! Exports: decoded events and answers in the formats other tools read. One file per format.
//!
//! - [`pcapng`]: packet-capture events (PktMon) as a pcapng capture for Wireshark and tshark.
//! - `arrow` (feature `arrow`): decoded events as Arrow record batches.
//! - `parquet` (feature `parquet`): decoded events as a Parquet dataset (DuckDB, Spark).

pub mod pcapng;
#[cfg(feature = "arrow")]
pub mod arrow;
#[cfg(feature = "parquet")]
pub mod parquet;
