//! The SQL of W4's cold `history(limit 20)` on SQLite, without weaver's
//! decoding: W2's thread (500 turns, `SharedVec<String>` delta channel) is
//! written in a fresh SQLite file by a first process; then each query shape
//! runs in a process of its own (what a process freed before decides
//! glibc's thresholds) on a plain sqlx connection, 3,000 times:
//!
//! - `select_1`: a bare query, the round trip to sqlx's worker thread;
//! - `page_packed`: the newest 20 checkpoints and their writes, packed into
//!   one row of frames as the saver's SQLite listing builds it;
//! - `page_keys`: only the materialized keys of that listing, counted;
//! - `page_writes`: the keys and their write rows, counted;
//! - `lineage_packed`, `lineage_rows`: the records under the page down to
//!   the last full record of the channel (8 here, one of them 127 KB),
//!   packed into one row, and as plain rows of payloads.
//!
//! The shapes are written out here after `weaver/src/checkpoint/sql/packed.rs`
//! and `Queries::keys_ctes`; a change there should be copied here.
//!
//! ```text
//! cargo run --release -p weaver-bench --bin w4_sql
//! ```
//!
//! Prints one JSON line per shape: median milliseconds and minor page
//! faults per call (`/proc/self/stat`, Linux only).

use std::path::Path;
use std::time::Instant;

use serde_json::json;
use sqlx::{AssertSqlSafe, Row};
use weaver::checkpoint::SqliteSaver;
use weaver::prelude::*;
use weaver_bench::{SharedChat as Chat, SharedChatUpdate as ChatUpdate};

const TURNS: usize = 500;
const CALLS: usize = 3000;
const SHAPES: [&str; 6] = [
    "select_1",
    "page_packed",
    "page_keys",
    "page_writes",
    "lineage_packed",
    "lineage_rows",
];

fn url(db: &Path) -> String {
    format!("sqlite://{}", db.display())
}

/// The first process: W2's thread, through weaver.
async fn write(db: &Path) -> weaver::Result<()> {
    let saver = SqliteSaver::connect(&url(db)).await?;
    let graph = Graph::<Chat>::new("chat")
        .add_node("chat", |s: &Chat| {
            ChatUpdate::default().messages(vec![format!("{:0256}", s.messages.len() + 1)])
        })
        .add_sequence([START, "chat", END])
        .compile(Compile::new().checkpointer(saver.clone()))?;
    let config = RunConfig::thread("w2");
    for _ in 0..TURNS {
        graph.invoke(Chat::default(), &config).await?;
    }
    saver.pool().close().await;
    Ok(())
}

/// `length(CAST(col AS BLOB)), ':', col`: one field of a frame.
fn field(col: &str) -> String {
    format!("length(CAST({col} AS BLOB)), ':', {col}")
}

/// The SQL of `shape`; `oldest` is the page's oldest commit order, `full`
/// the commit order of the full record under it.
fn sql(shape: &str, oldest: i64, full: i64) -> String {
    let frame = format!(
        "concat('0', {}, {}, {}, COALESCE(length(CAST(x.parent_checkpoint_id AS BLOB)) || ':' || x.parent_checkpoint_id, '-'), {}, x.commit_order, ':', {})",
        field("x.thread_id"),
        field("x.checkpoint_ns"),
        field("x.checkpoint_id"),
        field("x.metadata"),
        field("x.checkpoint")
    );
    let write = format!(
        "concat('1', {}, {}, {}, {}, w.idx, ':', {}, {}, {})",
        field("w.thread_id"),
        field("w.checkpoint_ns"),
        field("w.checkpoint_id"),
        field("w.task_id"),
        field("w.channel"),
        field("w.task_path"),
        field("w.value")
    );
    let keys = "WITH c AS MATERIALIZED (SELECT thread_id, checkpoint_ns, checkpoint_id FROM weaver_checkpoints WHERE thread_id = 'w2' AND checkpoint_ns = '' ORDER BY thread_id, checkpoint_ns, commit_order DESC LIMIT 20)";
    let writes_of_c = "c CROSS JOIN weaver_checkpoint_writes AS w ON w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id";
    let range = format!(
        "x.thread_id = 'w2' AND x.checkpoint_ns = '' AND x.commit_order < {oldest} AND x.commit_order >= {full}"
    );
    let packed = "SELECT CAST(group_concat(frame, '') AS BLOB) AS out FROM f";
    match shape {
        "select_1" => "SELECT 1 AS out".into(),
        "page_packed" => format!(
            "{keys}, f (frame) AS (SELECT {frame} FROM c JOIN weaver_checkpoints AS x ON x.thread_id = c.thread_id AND x.checkpoint_ns = c.checkpoint_ns AND x.checkpoint_id = c.checkpoint_id UNION ALL SELECT {write} FROM {writes_of_c}) {packed}"
        ),
        "page_keys" => format!("{keys} SELECT count(*) AS out FROM c"),
        "page_writes" => format!("{keys} SELECT count(*) AS out FROM {writes_of_c}"),
        "lineage_packed" => format!(
            "WITH f (frame) AS (SELECT {frame} FROM weaver_checkpoints AS x WHERE {range}) {packed}"
        ),
        _ => format!("SELECT x.checkpoint AS out FROM weaver_checkpoints AS x WHERE {range}"),
    }
}

/// A process per shape: `CALLS` runs of it on one plain connection.
async fn time_shape(db: &Path, shape: &str) -> Result<serde_json::Value, String> {
    let err = |e: sqlx::Error| e.to_string();
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect(&url(db))
        .await
        .map_err(err)?;
    let mut conn = pool.acquire().await.map_err(err)?;
    let oldest: i64 = sqlx::query_scalar(
        "SELECT min(commit_order) FROM (SELECT commit_order FROM weaver_checkpoints WHERE thread_id = 'w2' ORDER BY commit_order DESC LIMIT 20)",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(err)?;
    // The channel's full record under the page: the largest payload below it.
    let full: i64 = sqlx::query_scalar(
        "SELECT commit_order FROM weaver_checkpoints WHERE thread_id = 'w2' AND commit_order < $1 ORDER BY length(checkpoint) DESC, commit_order DESC LIMIT 1",
    )
    .bind(oldest)
    .fetch_one(&mut *conn)
    .await
    .map_err(err)?;
    let q = sql(shape, oldest, full);
    let (mut times, mut faults, mut bytes) = (Vec::with_capacity(CALLS), 0u64, 0usize);
    for _ in 0..CALLS {
        let before = weaver_bench::minor_faults()?;
        let t = Instant::now();
        let rows = sqlx::query(AssertSqlSafe(q.clone()))
            .fetch_all(&mut *conn)
            .await
            .map_err(err)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        faults += weaver_bench::minor_faults()? - before;
        bytes = rows
            .iter()
            .map(|r| {
                r.try_get::<Option<&[u8]>, _>("out")
                    .map(|b| b.map_or(0, <[u8]>::len))
            })
            .sum::<Result<usize, _>>()
            .unwrap_or(0);
    }
    times.sort_by(f64::total_cmp);
    Ok(json!({
        "shape": shape,
        "median_ms": (times[CALLS / 2] * 1e4).round() / 1e4,
        "minor_faults_per_call": faults as f64 / CALLS as f64,
        "bytes": bytes,
        "lineage_records": oldest - full,
    }))
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

fn run(args: &[String]) -> Result<String, String> {
    match args {
        [phase, db] if phase == "write" => runtime()?
            .block_on(write(Path::new(db)))
            .map(|()| String::new())
            .map_err(|e| e.to_string()),
        [phase, db, shape] if phase == "shape" => runtime()?
            .block_on(time_shape(Path::new(db), shape))
            .map(|v| format!("{v}\n")),
        [] => {
            let dir = std::env::temp_dir().join(format!("weaver-w4-sql-{}", std::process::id()));
            let db = dir.join("w4.db");
            let all = || -> Result<String, String> {
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                let db = db.to_str().ok_or("temp path is not UTF-8")?;
                weaver_bench::run_self(&["write", db])?;
                SHAPES
                    .iter()
                    .map(|shape| weaver_bench::run_self(&["shape", db, shape]))
                    .collect()
            };
            let out = all();
            let _ = std::fs::remove_dir_all(&dir);
            out
        }
        _ => Err("usage: w4_sql".into()),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(out) => print!("{out}"),
        Err(e) => {
            eprintln!("w4_sql: {e}");
            std::process::exit(1);
        }
    }
}
