//! `weaver scan`: the root checkpoints a state's schema snapshot cannot
//! read, per thread.

use std::io::Write;
use std::path::Path;

use weaver::evolution::{SchemaSnapshot, scan_stored};
use weaver::{Checkpointer, Error, Result};

use super::{io, printable};

/// Scans every thread `cp` holds against the snapshot in `file`, `batch`
/// threads at a time, printing a summary line, then one line per thread
/// with unreadable checkpoints (`thread`, how many, the newest such
/// checkpoint, its first failing field path, why). With `check`, any
/// unreadable checkpoint fails the command with an
/// [`Error::Decode`] after the report is printed.
pub(super) async fn scan(
    cp: &Checkpointer,
    file: &Path,
    batch: usize,
    check: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        Error::invalid_argument(format!(
            "--schema-file {}: {e}",
            printable(&file.display().to_string())
        ))
    })?;
    let snapshot = SchemaSnapshot::parse(&text)?;
    let report = scan_stored(cp.saver().as_ref(), &snapshot, batch, &mut |_| {}).await?;
    writeln!(
        out,
        "scanned {} threads, {} checkpoints against state version {} ({}): {} unreadable, {} of an older version (read through the state's upcasters, not checked here)",
        report.threads,
        report.checkpoints,
        snapshot.state_version,
        snapshot.fingerprint,
        report.unreadable,
        report.older
    )
    .map_err(io)?;
    if !report.failing.is_empty() {
        writeln!(out, "thread\tunreadable\tcheckpoint\tpath\treason").map_err(io)?;
    }
    for t in &report.failing {
        let path = if t.path.is_empty() { "-" } else { &t.path };
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}",
            printable(&t.thread_id),
            t.unreadable,
            printable(&t.checkpoint_id),
            printable(path),
            printable(&t.reason)
        )
        .map_err(io)?;
    }
    if check && report.unreadable > 0 {
        return Err(Error::decode(
            "stored checkpoints",
            format!(
                "{} of {} do not read with state version {}",
                report.unreadable, report.checkpoints, snapshot.state_version
            ),
        ));
    }
    Ok(())
}
