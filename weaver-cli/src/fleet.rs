//! Fleet commands: threads listed by metadata, idleness and time, idle
//! threads deleted and checkpoints pruned by age, with a progress bar on
//! standard error when it is a terminal.

use std::io::{IsTerminal, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use weaver::checkpoint::{Checkpointer, PruneStrategy, ThreadInfo, ThreadOrder, ThreadQuery};
use weaver::{Error, Result};

use super::io;

/// Reads a duration written `30d`, `12h`, `90m`, `45s` or `500ms`: a whole
/// number above zero and its unit.
pub(crate) fn parse_duration(option: &str, text: &str) -> Result<Duration> {
    let bad = |why: &str| {
        Error::invalid_argument(format!(
            "{option} {text:?}: {why} (write a whole number and a unit: 30d, 12h, 90m, 45s, 500ms)"
        ))
    };
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| bad("no unit"))?;
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return Err(bad(if text.starts_with('-') {
            "a duration cannot be negative"
        } else {
            "no number"
        }));
    }
    let n: u64 = number.parse().map_err(|_| bad("the number is too large"))?;
    if n == 0 {
        return Err(bad("a duration must be above zero"));
    }
    let ms_per = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad("unknown unit")),
    };
    n.checked_mul(ms_per)
        .map(Duration::from_millis)
        .ok_or_else(|| bad("the duration is too long"))
}

/// Reads `KEY=VALUE` metadata filters: the value as JSON when it is JSON
/// (`step=3`, `done=true`), else as text.
pub(crate) fn parse_metadata(pairs: &[String]) -> Result<serde_json::Map<String, Value>> {
    let mut out = serde_json::Map::new();
    for pair in pairs {
        let (key, value) = pair.split_once('=').ok_or_else(|| {
            Error::invalid_argument(format!("--metadata {pair:?}: write KEY=VALUE"))
        })?;
        if key.is_empty() {
            return Err(Error::invalid_argument(format!(
                "--metadata {pair:?}: the key is empty"
            )));
        }
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::from(value));
        out.insert(key.to_owned(), value);
    }
    Ok(out)
}

/// A time as RFC 3339 in UTC, to the millisecond.
fn rfc3339(t: Option<SystemTime>) -> String {
    let Some(t) = t else {
        return "-".to_owned();
    };
    let ms = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let secs = (ms / 1000) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// The options of a thread search.
pub(crate) struct Search {
    pub(crate) idle_for: Option<String>,
    pub(crate) created: bool,
    pub(crate) metadata: Vec<String>,
    pub(crate) after: Option<String>,
    pub(crate) limit: Option<usize>,
}

/// Prints one page of threads (`thread`, checkpoints, created, last
/// activity), then `next` and the cursor of the next page if there is one.
pub(crate) async fn search(cp: &Checkpointer, s: Search, out: &mut dyn Write) -> Result<()> {
    let mut query = ThreadQuery::new();
    query.metadata = parse_metadata(&s.metadata)?;
    if let Some(d) = &s.idle_for {
        query = query.idle_for(parse_duration("--idle-for", d)?);
    }
    if s.created {
        query = query.order(ThreadOrder::Created);
    }
    if let Some(n) = s.limit {
        query = query.limit(n);
    }
    if let Some(c) = s.after {
        query = query.after(crate::parse_cursor(&c)?);
    }
    let page = cp.search_threads(&query).await?;
    for t in &page.threads {
        line(t, out)?;
    }
    if let Some(next) = page.next {
        writeln!(out, "next\t{}", crate::cursor_text(&next)).map_err(io)?;
    }
    Ok(())
}

fn line(t: &ThreadInfo, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "{}\t{}\t{}\t{}",
        crate::cursor_text(&t.thread_id),
        t.checkpoints,
        rfc3339(t.created_at),
        rfc3339(t.updated_at)
    )
    .map_err(io)
}

/// A bar of `width` cells for `done` of `total`.
pub(crate) fn bar(done: u64, total: u64, width: usize) -> String {
    let filled = if total == 0 {
        width
    } else {
        (done.min(total) as usize * width) / total as usize
    };
    format!("[{}{}]", "#".repeat(filled), ".".repeat(width - filled))
}

/// Progress on standard error, redrawn in place, when it is a terminal.
pub(crate) struct Progress {
    on: bool,
    drawn: bool,
}

impl Progress {
    pub(crate) fn new() -> Self {
        Progress {
            on: std::io::stderr().is_terminal(),
            drawn: false,
        }
    }

    pub(crate) fn show(&mut self, text: &str) {
        if self.on {
            let _ = write!(std::io::stderr(), "\r{text}\x1b[K");
            self.drawn = true;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.drawn {
            let _ = writeln!(std::io::stderr());
        }
    }
}

/// Deletes the threads idle for `idle_for`.
pub(crate) async fn delete_idle(
    cp: &Checkpointer,
    idle_for: &str,
    out: &mut dyn Write,
) -> Result<()> {
    let idle = parse_duration("--idle-for", idle_for)?;
    let mut progress = Progress::new();
    let mut so_far = 0;
    let deleted = cp
        .delete_idle_threads(idle, &mut |deleted, found| {
            so_far = deleted;
            progress.show(&format!(
                "deleting idle threads: {deleted} deleted of {found} found"
            ));
        })
        .await;
    drop(progress);
    match deleted {
        Ok(deleted) => writeln!(out, "deleted {deleted} idle threads").map_err(io),
        // Each thread went in its own transaction: say what is gone.
        Err(e) => {
            writeln!(out, "deleted {so_far} idle threads before an error").map_err(io)?;
            Err(e)
        }
    }
}

/// How many threads one prune call (one transaction) takes.
const PRUNE_BATCH: usize = 50;

/// Prunes the checkpoints older than `older_than` of `threads` (every
/// thread when empty), keeping the `keep` newest of each namespace, in
/// batches of [`PRUNE_BATCH`] threads a transaction.
pub(crate) async fn prune_older(
    cp: &Checkpointer,
    threads: Vec<String>,
    older_than: &str,
    keep: usize,
    out: &mut dyn Write,
) -> Result<()> {
    let age = parse_duration("--older-than", older_than)?;
    if keep == 0 {
        return Err(Error::invalid_argument(
            "--keep-last 0 would keep nothing; use --delete to delete the threads",
        ));
    }
    let threads = if threads.is_empty() {
        cp.list_threads(None, 0)
            .await?
            .into_iter()
            .map(|t| t.thread_id)
            .collect()
    } else {
        threads
    };
    let strategy = PruneStrategy::OlderThan {
        age,
        keep_newest: keep,
    };
    let total = threads.len() as u64;
    let mut progress = Progress::new();
    let (mut done, mut deleted) = (0u64, 0u64);
    for batch in threads.chunks(PRUNE_BATCH) {
        match cp.prune(batch, strategy).await {
            Ok(n) => deleted += n,
            // The batches before it are committed: say what is gone.
            Err(e) => {
                drop(progress);
                writeln!(
                    out,
                    "deleted {deleted} checkpoints of {done} threads before an error on the next {} threads",
                    batch.len()
                )
                .map_err(io)?;
                return Err(e);
            }
        }
        done += batch.len() as u64;
        progress.show(&format!(
            "pruning {} {done}/{total} threads, {deleted} checkpoints deleted",
            bar(done, total, 30)
        ));
    }
    drop(progress);
    writeln!(out, "deleted {deleted} checkpoints").map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_bad_ones_are_typed_errors() {
        assert_eq!(
            parse_duration("--x", "30d").unwrap(),
            Duration::from_secs(30 * 86_400)
        );
        assert_eq!(
            parse_duration("--x", "90m").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(
            parse_duration("--x", "500ms").unwrap(),
            Duration::from_millis(500)
        );
        for bad in [
            "0d",
            "-5d",
            "",
            "d",
            "5",
            "5y",
            "1.5h",
            "99999999999999999999d",
        ] {
            let err = parse_duration("--x", bad).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{bad}: {err}");
        }
        assert!(
            parse_duration("--idle-for", "-5d")
                .unwrap_err()
                .to_string()
                .contains("negative")
        );
    }

    #[test]
    fn metadata_pairs_read_json_or_text() {
        let m = parse_metadata(&["user=ann".into(), "step=3".into()]).unwrap();
        assert_eq!(m["user"], Value::from("ann"));
        assert_eq!(m["step"], Value::from(3));
        assert!(parse_metadata(&["nope".into()]).is_err());
        assert!(parse_metadata(&["=1".into()]).is_err());
    }

    #[test]
    fn bars_and_times_render() {
        assert_eq!(bar(0, 4, 4), "[....]");
        assert_eq!(bar(2, 4, 4), "[##..]");
        assert_eq!(bar(9, 4, 4), "[####]");
        assert_eq!(bar(0, 0, 2), "[##]");
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(rfc3339(Some(t)), "2023-11-14T22:13:20.123Z");
        assert_eq!(rfc3339(None), "-");
    }
}
