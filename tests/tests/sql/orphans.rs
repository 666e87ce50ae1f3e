//! Pending-write rows whose checkpoint is gone: none is left behind by a
//! shallow commit racing a write.

use std::sync::Arc;

use sqlx::AssertSqlSafe;
use weaver::Saver;
use weaver::checkpoint::CheckpointRef;

use crate::common::{PgDb, cp};

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
