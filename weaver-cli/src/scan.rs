//! `weaver scan`: the checkpoints and pending writes a state's schema
//! snapshot cannot read, per thread, in every namespace; with `--rewrite`
//! (an application's own binary), older state versions' checkpoints
//! rewritten upgraded first.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use weaver::evolution::{
    ScanOptions, ScanReport, SchemaSnapshot, UpgradeCursor, UpgradeOptions, scan_stored_with,
};
use weaver::{Checkpointer, Error, Result, Saver};

use super::fleet::{Progress, bar};
use super::states::States;
use super::{cursor_text, io, parse_cursor, printable};

/// The options of `weaver scan`.
#[derive(Debug, Args)]
pub(crate) struct ScanArgs {
    /// The snapshot file (JSON) of the root graph's state.
    #[arg(long, required_unless_present = "rewrite")]
    schema_file: Option<PathBuf>,
    /// A subgraph's own state snapshot: PATH=FILE, PATH its node names
    /// joined by `|` (repeatable); other subgraph namespaces are checked
    /// against --schema-file.
    #[arg(long, value_name = "PATH=FILE")]
    subgraph_schema: Vec<String>,
    /// Leave the namespaces of this subgraph path unchecked (repeatable).
    #[arg(long, value_name = "PATH")]
    skip_subgraph: Vec<String>,
    /// Threads read at a time (with --rewrite, also checkpoints rewritten
    /// per transaction).
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// Fail (exit status 1) when a checkpoint does not read.
    #[arg(long)]
    check: bool,
    /// First rewrite, in place, the checkpoints older versions of the
    /// state wrote, upgraded (needs the application's own binary, built
    /// on `weaver_cli::run_with`).
    #[arg(long)]
    rewrite: bool,
    /// With --rewrite: go on after this cursor (printed by an earlier run).
    #[arg(long, requires = "rewrite", value_name = "CURSOR")]
    after: Option<String>,
}

/// How many threads `saver` holds, counted a page at a time.
async fn count_threads(saver: &dyn Saver) -> Result<u64> {
    let (mut n, page) = (0u64, 1000);
    loop {
        let got = saver.list_threads(Some(page), n as usize).await?.len();
        n += got as u64;
        if got < page {
            return Ok(n);
        }
    }
}

/// The scan's options from its arguments: the snapshot `file` and those of
/// the subgraphs, read and checked.
fn scan_options(file: &Path, args: &ScanArgs) -> Result<ScanOptions> {
    let mut options = ScanOptions::new(read_snapshot("--schema-file", file)?).batch(args.batch);
    for pair in &args.subgraph_schema {
        let (path, file) = pair.split_once('=').ok_or_else(|| {
            Error::invalid_argument(format!(
                "--subgraph-schema {}: expected PATH=FILE",
                printable(pair)
            ))
        })?;
        let snapshot = read_snapshot("--subgraph-schema", Path::new(file))?;
        options = options.subgraph(path, Some(snapshot));
    }
    for path in &args.skip_subgraph {
        options = options.subgraph(path.clone(), None);
    }
    Ok(options)
}

/// Runs `weaver scan` on `cp`: the rewrite (if asked), then the scan (if a
/// snapshot is given).
pub(super) async fn scan(
    cp: &Checkpointer,
    states: Option<&States>,
    args: ScanArgs,
    out: &mut dyn Write,
) -> Result<()> {
    let saver = cp.saver().as_ref();
    // Every argument is read before anything is written: a mistyped file
    // fails the command with the database as it was.
    let options = match &args.schema_file {
        Some(file) => Some(scan_options(file, &args)?),
        None if args.check => {
            return Err(Error::invalid_argument(
                "--check fails on checkpoints a snapshot cannot read: give the snapshot with --schema-file",
            ));
        }
        None if !args.subgraph_schema.is_empty() || !args.skip_subgraph.is_empty() => {
            return Err(Error::invalid_argument(
                "--subgraph-schema and --skip-subgraph scan against --schema-file: give it too",
            ));
        }
        None => None,
    };
    if args.rewrite {
        let states = states.ok_or_else(|| {
            Error::invalid_argument(
                "`scan --rewrite` needs the application's state types (Rust code: its upcasters), which the stock `weaver` binary does not have; build a binary of the application that calls `weaver_cli::run_with(&States::new::<YourState>(), ...)` and run `scan --rewrite` with it (see the guide's chapter \"Releasing\")",
            )
        })?;
        let total = count_threads(saver).await?;
        rewrite(saver, states, &args, total, out).await?;
    }
    let Some(options) = options else {
        return Ok(());
    };
    let total = count_threads(saver).await?;
    let mut progress = Progress::new();
    let report = scan_stored_with(saver, &options, &mut |r: &ScanReport| {
        progress.show(&format!(
            "scanning {} {}/{total} threads, {} unreadable",
            bar(r.threads, total, 30),
            r.threads,
            r.unreadable
        ));
    })
    .await?;
    drop(progress);
    print_scan(&report, &options.snapshot, out)?;
    if args.check && report.unreadable > 0 {
        return Err(Error::decode(
            "stored checkpoints",
            format!(
                "{} of {} do not read with state version {}",
                report.unreadable, report.checkpoints, options.snapshot.state_version
            ),
        ));
    }
    Ok(())
}

fn read_snapshot(option: &str, file: &Path) -> Result<SchemaSnapshot> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        Error::invalid_argument(format!(
            "{option} {}: {e}",
            printable(&file.display().to_string())
        ))
    })?;
    SchemaSnapshot::parse(&text)
}

fn print_scan(report: &ScanReport, snapshot: &SchemaSnapshot, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "scanned {} threads, {} checkpoints and {} pending writes against state version {} ({}): {} unreadable, {} of an older version (read through the state's upcasters, not checked here), {} in skipped subgraphs",
        report.threads,
        report.checkpoints,
        report.writes,
        snapshot.state_version,
        snapshot.fingerprint,
        report.unreadable,
        report.older,
        report.skipped
    )
    .map_err(io)?;
    if !report.failing.is_empty() {
        writeln!(
            out,
            "thread\tunreadable\tnamespace\tcheckpoint\ttask\tpath\treason"
        )
        .map_err(io)?;
    }
    for t in &report.failing {
        let dash = |s: &str| {
            if s.is_empty() {
                "-".to_owned()
            } else {
                printable(s).into_owned()
            }
        };
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            cursor_text(&t.thread_id),
            t.unreadable,
            match t.checkpoint_ns.as_str() {
                "" => "-".into(),
                ns => cursor_text(ns),
            },
            printable(&t.checkpoint_id),
            dash(t.task_id.as_deref().unwrap_or("")),
            dash(&t.path),
            printable(&t.reason)
        )
        .map_err(io)?;
    }
    Ok(())
}

/// Rewrites the older checkpoints of each state of `states`, in order.
/// The cursor printed (and taken by `--after`) is `<state index>:<thread>`:
/// the states before the index are done, that one up to the thread.
async fn rewrite(
    saver: &dyn Saver,
    states: &States,
    args: &ScanArgs,
    total: u64,
    out: &mut dyn Write,
) -> Result<()> {
    let (start, after) = match &args.after {
        None => (0, None),
        Some(text) => {
            let bad = || {
                Error::invalid_argument(format!(
                    "--after {}: expected a cursor `<state>:<thread>` printed by an earlier run",
                    printable(text)
                ))
            };
            let (i, thread) = text.split_once(':').ok_or_else(bad)?;
            let i: usize = i.parse().map_err(|_| bad())?;
            if i >= states.entries.len() {
                return Err(bad());
            }
            (i, Some(UpgradeCursor::new(parse_cursor(thread)?)))
        }
    };
    for (i, entry) in states.entries.iter().enumerate().skip(start) {
        let mut options = UpgradeOptions::new()
            .batch(args.batch)
            .paths([entry.path.clone()]);
        if i == start
            && let Some(after) = &after
        {
            options = options.after(after.clone());
        }
        let mut progress = Progress::new();
        let mut last = None;
        let outcome = (entry.upgrade)(saver, &options, &mut |r| {
            last = r.cursor.clone();
            progress.show(&format!(
                "rewriting {} {}/{total} threads, {} checkpoints upgraded",
                bar(r.threads, total, 30),
                r.threads,
                r.upgraded
            ));
        })
        .await;
        drop(progress);
        let report = match outcome {
            Ok(report) => report,
            Err(e) => {
                if let Some(c) = last.or_else(|| options.after.clone()) {
                    let _ = writeln!(
                        out,
                        "interrupted; to go on: scan --rewrite --after {i}:{}",
                        cursor_text(c.as_str())
                    );
                }
                return Err(e);
            }
        };
        let shown = if entry.path.is_empty() {
            "root graph"
        } else {
            &entry.path
        };
        writeln!(
            out,
            "rewrote {} of {} checkpoints ({} threads, {} batches) of the {shown} to state version {} of {}",
            report.upgraded,
            report.checkpoints,
            report.threads,
            report.batches,
            entry.version,
            entry.name
        )
        .map_err(io)?;
    }
    Ok(())
}
