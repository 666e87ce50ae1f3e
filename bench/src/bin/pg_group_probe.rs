//! How a PostgreSQL group commit's cost follows the table's size: in a fresh
//! schema on `$DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), puts a checkpoint on a new
//! thread and then `put_ops` of its 3 pending writes (a writes-only group,
//! whose existence check reads the checkpoint table), 6,000 times, and
//! prints the median milliseconds of the groups in each 1,000. Flat medians
//! mean each group probes an index; rising ones, that it scans the table.
//!
//! ```text
//! cargo run --release -p weaver-bench --bin pg_group_probe
//! ```

use std::time::Instant;

use serde_json::json;
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPoolOptions;
use weaver::Error;
use weaver::checkpoint::{
    Checkpoint, CheckpointMetadata, CheckpointRef, CheckpointSource, NewCheckpoint, PendingWrite,
    PostgresSaver, Saver, WriteOp,
};
use weaver::migrate::{self, Adapter, PgSchema};

const GROUPS: usize = 6000;
const PER_LINE: usize = 1000;

async fn run() -> weaver::Result<Vec<f64>> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = PgPoolOptions::new()
        .connect(&url)
        .await
        .map_err(|e| Error::storage("connect", e))?;
    let schema = format!("weaver_group_probe_{}", std::process::id());
    migrate::up(
        &PgSchema::new(&pool, &schema)?,
        &[Adapter::Checkpoint],
        None,
    )
    .await?;
    let saver = PostgresSaver::new(pool.clone()).with_prefix(&schema)?;
    let mut times = Vec::with_capacity(GROUPS);
    for i in 0..GROUPS {
        let thread = format!("t{i}");
        let mut checkpoint = Checkpoint::empty();
        checkpoint.channel_values.insert("foo".into(), json!("x"));
        let id = checkpoint.id.clone();
        saver
            .put(NewCheckpoint {
                thread_id: thread.clone(),
                checkpoint_ns: String::new(),
                parent_id: None,
                checkpoint,
                metadata: CheckpointMetadata::new(CheckpointSource::Input, -1),
                commit_order: Some(1),
            })
            .await?;
        let writes = PendingWrite::for_task(
            "task",
            "node",
            ["a", "b", "c"].map(|ch| (ch.to_owned(), json!(1))),
        );
        let target = CheckpointRef::latest(thread).at(id);
        let t = Instant::now();
        saver.put_ops(vec![WriteOp::Writes(target, writes)]).await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    sqlx::query(AssertSqlSafe(format!("DROP SCHEMA \"{schema}\" CASCADE")))
        .execute(&pool)
        .await
        .map_err(|e| Error::storage("drop schema", e))?;
    Ok(times
        .chunks(PER_LINE)
        .map(|c| {
            let mut c = c.to_vec();
            c.sort_by(f64::total_cmp);
            (c[c.len() / 2] * 1e4).round() / 1e4
        })
        .collect())
}

fn main() {
    let medians = weaver_bench::block_on_or_exit("pg_group_probe", run());
    println!(
        "{}",
        json!({"groups_per_median": PER_LINE, "median_ms": medians})
    );
}
