//! Where W1's SQLite invoke spends its time: in a fresh SQLite file (WAL),
//! times, each as the median of 3,000 calls in one process,
//!
//! - `read_ms`: the saver's read of a thread's latest checkpoint, for a
//!   thread that has none (what every W1 invoke does first);
//! - `sqlx_select1_ms`: `SELECT 1` through `sqlx` on one connection, for
//!   the cost of one plain round trip to its worker thread;
//! - `invoke_ms`: a W1 invoke (two nodes, one commit of its checkpoints and
//!   writes);
//!
//! once with `synchronous=FULL` (as W1 runs) and once with `OFF` (no sync:
//! the invoke without the disk), twice over.
//!
//! ```text
//! cargo run --release -p weaver-bench --bin w1_parts
//! ```
//!
//! Prints one JSON line per file. Run `bench/tools/sqlite_commit_floor.py`
//! beside it: `invoke_ms` with `FULL` against its `ms_per_commit` is what
//! weaver adds to the durable commit itself.

use std::path::Path;
use std::time::Instant;

use serde_json::json;
use sqlx::sqlite::SqliteSynchronous;
use weaver::checkpoint::{CheckpointRef, Saver};
use weaver::prelude::*;
use weaver_bench::{median_of as median, sqlite_file_saver};
use weaver_tests::states::{Steps, StepsUpdate};

const CALLS: usize = 3000;

/// Median of `CALLS` timings of `f`, in milliseconds.
async fn median_ms<F, Fut>(mut f: F) -> weaver::Result<f64>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = weaver::Result<()>>,
{
    let mut times = Vec::with_capacity(CALLS);
    for i in 0..CALLS {
        let t = Instant::now();
        f(i).await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(times))
}

async fn measure(path: &Path, sync: SqliteSynchronous) -> weaver::Result<serde_json::Value> {
    let (pool, saver) = sqlite_file_saver(path, sync).await?;
    let graph = Graph::<Steps>::new("two-step")
        .add_node("node_a", |_: &Steps| {
            StepsUpdate::default().foo("a").bar(["a"])
        })
        .add_node("node_b", |_: &Steps| {
            StepsUpdate::default().foo("b").bar(["b"])
        })
        .add_sequence([START, "node_a", "node_b", END])
        .compile(Compile::new().checkpointer(saver.clone()))?;
    let read = median_ms(|i| {
        let at = CheckpointRef::latest(format!("none-{i}"));
        let saver = &saver;
        async move { saver.get_stored(&at).await.map(drop) }
    })
    .await?;
    let mut conn = pool
        .acquire()
        .await
        .map_err(|e| Error::storage("acquire", e))?;
    let mut times = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let t = Instant::now();
        sqlx::query("SELECT 1")
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| Error::storage("SELECT 1", e))?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    drop(conn);
    let select1 = median(times);
    let invoke = median_ms(|i| {
        let (graph, config) = (&graph, RunConfig::thread(format!("w1-{i}")));
        async move { graph.invoke(Steps::default(), &config).await.map(drop) }
    })
    .await?;
    drop(graph);
    drop(saver);
    pool.close().await;
    Ok(json!({
        "synchronous": format!("{sync:?}"),
        "read_ms": read,
        "sqlx_select1_ms": select1,
        "invoke_ms": invoke,
    }))
}

async fn run() -> weaver::Result<()> {
    let dir = std::env::temp_dir().join(format!("weaver-w1-parts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::storage("temp dir", e))?;
    for round in 0..2 {
        for sync in [SqliteSynchronous::Full, SqliteSynchronous::Off] {
            let file = dir.join(format!("w1-{round}-{sync:?}.db"));
            println!("{}", measure(&file, sync).await?);
        }
    }
    std::fs::remove_dir_all(&dir).map_err(|e| Error::storage("temp dir", e))
}

fn main() {
    weaver_bench::block_on_or_exit("w1_parts", run());
}
