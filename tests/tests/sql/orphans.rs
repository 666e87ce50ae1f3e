//! Pending-write rows whose checkpoint is gone: none is left behind by a
//! shallow commit racing a write, and none leaks into a fork or copy.

use std::sync::Arc;

use serde_json::json;
use sqlx::AssertSqlSafe;
use weaver::Saver;
use weaver::checkpoint::{CheckpointRef, ForkOptions, PendingWrite};

use crate::common::{PgDb, SqliteDb, cp};

fn w(task: &str, idx: i64, v: serde_json::Value) -> PendingWrite {
    PendingWrite {
        task_id: task.into(),
        task_path: format!("node_{task}"),
        idx,
        channel: "foo".into(),
        value: v,
    }
}

/// A shallow commit superseding checkpoint `a` while another session stores
/// a write of `a` (its checkpoint found and key-share locked, as
/// `put_writes` does, but not yet committed): once both commit, `a` is gone
/// and so is its write, with no row left pointing at nothing.
#[tokio::test]
async fn pg_shallow_commit_leaves_no_write_of_the_checkpoint_it_supersedes() {
    let db = PgDb::new().await;
    let saver = Arc::new(db.saver().await.shallow());
    saver.put(cp("t", "a", None, Some(1))).await.unwrap();
    let s = &db.schema;
    let mut other = db.pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT 1 FROM \"{s}\".weaver_checkpoints WHERE thread_id = 't' AND checkpoint_id = 'a' FOR KEY SHARE"
    )))
    .execute(&mut *other)
    .await
    .unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO \"{s}\".weaver_checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, value)
         VALUES ('t', '', 'a', 'x', 0, 'foo', 'node_x', CAST('1' AS BYTEA))"
    )))
    .execute(&mut *other)
    .await
    .unwrap();
    let put = tokio::spawn({
        let saver = saver.clone();
        async move { saver.put(cp("t", "b", Some("a"), Some(2))).await }
    });
    db.lock_waits("weaver_checkpoint", 1).await;
    other.commit().await.unwrap();
    put.await.unwrap().unwrap();
    let left: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM \"{s}\".weaver_checkpoint_writes"
    )))
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(left, 0, "a write of the superseded checkpoint is left");
    let head = saver.get_tuple(&CheckpointRef::latest("t")).await.unwrap();
    assert_eq!(head.unwrap().config.checkpoint_id.as_deref(), Some("b"));
    db.drop_schema().await;
}

/// Stores, by hand, write rows of thread `thread` for checkpoint `a`, which
/// that thread does not hold (left by a deletion done by hand, or by an
/// older version racing a write against a commit).
async fn orphans(run: impl AsyncFn(String), thread: &str) {
    for (task, value) in [("x", "\"stale\""), ("y", "\"extra\"")] {
        run(format!(
            "INSERT INTO {{writes}} (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, value)
             VALUES ('{thread}', '', 'a', '{task}', 0, 'foo', 'node_{task}', CAST('{value}' AS {{blob}}))"
        ))
        .await;
    }
}

/// A fork or copy into a thread with write rows whose checkpoint is gone
/// stores the source's writes, not those rows (an ordinary write keeps the
/// value stored first, so they would silently win).
async fn copies_ignore_orphan_writes(s: Arc<dyn Saver>, run: impl AsyncFn(String)) {
    s.put_checkpoint_with_writes(
        cp("src", "a", None, Some(1)),
        vec![w("x", 0, json!("fresh"))],
    )
    .await
    .unwrap();
    let want = vec![w("x", 0, json!("fresh"))];
    orphans(&run, "forked").await;
    s.fork_at(
        &CheckpointRef::latest("src").at("a"),
        "forked",
        ForkOptions::default(),
    )
    .await
    .unwrap();
    let t = s
        .get_tuple(&CheckpointRef::latest("forked"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.pending_writes, want, "fork_at");
    orphans(&run, "copied").await;
    s.copy_thread("src", "copied").await.unwrap();
    let t = s
        .get_tuple(&CheckpointRef::latest("copied"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.pending_writes, want, "copy_thread");
}

#[tokio::test]
async fn sqlite_fork_and_copy_ignore_orphan_writes() {
    let db = SqliteDb::new().await;
    let saver = Arc::new(db.saver().await);
    let pool = db.pool.clone();
    copies_ignore_orphan_writes(saver, async move |sql: String| {
        let sql = sql
            .replace("{writes}", "weaver_checkpoint_writes")
            .replace("{blob}", "BLOB");
        sqlx::query(AssertSqlSafe(sql))
            .execute(&pool)
            .await
            .unwrap();
    })
    .await;
}

#[tokio::test]
async fn pg_fork_and_copy_ignore_orphan_writes() {
    let db = PgDb::new().await;
    let saver = Arc::new(db.saver().await);
    let (pool, s) = (db.pool.clone(), db.schema.clone());
    copies_ignore_orphan_writes(saver, async move |sql: String| {
        let sql = sql
            .replace("{writes}", &format!("\"{s}\".weaver_checkpoint_writes"))
            .replace("{blob}", "BYTEA");
        sqlx::query(AssertSqlSafe(sql))
            .execute(&pool)
            .await
            .unwrap();
    })
    .await;
    db.drop_schema().await;
}
