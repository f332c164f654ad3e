//! Exports: decoded events and answers in the formats other tools read. One file per format.
//!
//! - [`pcapng`]: packet-capture events (PktMon) as a pcapng capture for Wireshark and tshark.

pub mod pcapng;
