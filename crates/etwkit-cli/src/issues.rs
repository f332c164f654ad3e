//! A file's read issues on stderr, the same way for every command that reads ETL files: one
//! `etwkit: warning: ...` line per damaged spot (file offset and reason: truncation, corrupt
//! buffers, unreadable records, a damaged logfile header), then how much was skipped.

use etwkit::etl::ReadSummary;

/// One `etwkit: warning: {prefix}{issue}` line per issue of `summary`, in file order (and one for the issues
/// past the summary's limit). `prefix` names the file when a command reads several
/// (`"trace.etl: "`), else is empty.
pub fn warn_issues(summary: &ReadSummary, prefix: &str) {
    use std::io::Write;
    // Whatever went to stdout first (a table, a report) is out before the warnings follow it.
    std::io::stdout().flush().ok();
    // In file order, whichever walk found them (a parallel one, a time-ordered one).
    let mut issues: Vec<_> = summary.issues.iter().collect();
    issues.sort_by_key(|i| (i.file_offset, i.record_offset));
    for i in issues {
        eprintln!("etwkit: warning: {prefix}{i}");
    }
    if summary.issues_dropped > 0 {
        eprintln!(
            "etwkit: warning: {prefix}... and {} more issues not listed",
            summary.issues_dropped
        );
    }
}

/// [`warn_issues`], then, when buffers or records could not be read, one line counting them:
/// `etwkit: warning: {prefix}1 bad buffers and 1 bad records skipped; everything else was {done}`.
pub fn warn(summary: &ReadSummary, prefix: &str, done: &str) {
    warn_issues(summary, prefix);
    if summary.bad_buffers + summary.bad_records > 0 {
        eprintln!(
            "etwkit: warning: {prefix}{} bad buffers and {} bad records skipped; everything else was {done}",
            summary.bad_buffers, summary.bad_records
        );
    }
}
