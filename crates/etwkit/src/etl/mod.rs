//! The ETL container: buffers, records, the logfile header, compression, reading and writing.
