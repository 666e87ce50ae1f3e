//! What the benchmark binaries share.

use std::future::Future;
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use weaver::prelude::*;
use weaver::state::SharedVec;

/// W2's state as `w4_parts` and `w4_fresh` read it: the messages in a
/// delta channel whose snapshots share their chunks.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct SharedChat {
    /// The conversation, one entry per turn.
    #[reducer(delta)]
    pub messages: SharedVec<String>,
}

/// Runs `fut` to completion on a current-thread tokio runtime and returns
/// its value; if the runtime cannot start or `fut` fails, prints the error
/// after `program` on standard error and exits with status 1.
pub fn block_on_or_exit<T>(program: &str, fut: impl Future<Output = weaver::Result<T>>) -> T {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{program}: tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    match rt.block_on(fut) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("{program}: {e}");
            std::process::exit(1);
        }
    }
}

/// Median milliseconds of `rounds` calls of `f`, timed one by one.
pub fn median_ms(rounds: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = std::time::Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[rounds / 2]
}

/// Minor page faults of this process so far (`/proc/self/stat`; Linux only).
pub fn minor_faults() -> Result<u64, String> {
    let stat = std::fs::read_to_string("/proc/self/stat").map_err(|e| e.to_string())?;
    // The fields after the command name, which is in parentheses.
    let rest = stat
        .rfind(')')
        .and_then(|i| stat.get(i + 2..))
        .unwrap_or_default();
    rest.split(' ')
        .nth(7)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| "no minflt field in /proc/self/stat".to_owned())
}

/// Runs this program again with `args`, returning its standard output, or
/// its standard error when it fails.
pub fn run_self(args: &[&str]) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A SQLite saver on a new file at `path` (WAL, the saver's connection
/// options) with `synchronous` set as given, migrated, and its pool.
pub async fn sqlite_file_saver(
    path: &Path,
    synchronous: sqlx::sqlite::SqliteSynchronous,
) -> weaver::Result<(sqlx::SqlitePool, weaver::checkpoint::SqliteSaver)> {
    use weaver::checkpoint::SqliteSaver;
    use weaver::migrate::{self, Adapter};
    let url = format!("sqlite://{}", path.display());
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .test_before_acquire(false)
        .connect_with(SqliteSaver::connect_options(&url)?.synchronous(synchronous))
        .await
        .map_err(|e| Error::storage("connect", e))?;
    migrate::up(&pool, &[Adapter::Checkpoint], None).await?;
    let saver = SqliteSaver::new(pool.clone());
    Ok((pool, saver))
}

/// The median of `times` (milliseconds), rounded to 0.1 µs.
pub fn median_of(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2] * 1e4).round() / 1e4
}
