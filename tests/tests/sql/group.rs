//! Group commit: on SQLite a group is one query that opens a transaction,
//! inserts, checks and commits; on PostgreSQL one statement. A failed or
//! cut-off group must leave neither rows nor (SQLite) an open transaction on
//! the pooled connection.

use std::time::Duration;

use serde_json::json;
use sqlx::sqlite::SqlitePoolOptions;
use weaver::checkpoint::{CheckpointRef, ListFilter, PendingWrite, SqliteSaver, WriteOp};
use weaver::{Error, Saver};

use crate::common::{PgDb, SqliteDb, cp};

/// A group on `thread`: three chained checkpoints with writes; the last
/// names a missing parent when `broken`.
fn group(thread: &str, broken: bool) -> Vec<WriteOp> {
    let (a, b, c) = (
        format!("{thread}-a"),
        format!("{thread}-b"),
        format!("{thread}-c"),
    );
    let writes = |task: &str| PendingWrite::for_task(task, "n", [("foo".to_owned(), json!(task))]);
    let last_parent = if broken { "ghost" } else { b.as_str() };
    vec![
        WriteOp::Put(cp(thread, &a, None, Some(1))),
        WriteOp::Writes(CheckpointRef::latest(thread).at(a.clone()), writes("x")),
        WriteOp::Put(cp(thread, &b, Some(&a), Some(2))),
        WriteOp::Writes(CheckpointRef::latest(thread).at(b.clone()), writes("y")),
        WriteOp::Put(cp(thread, &c, Some(last_parent), Some(3))),
    ]
}

async fn stored(saver: &dyn Saver, thread: &str) -> usize {
    saver.list(&ListFilter::thread(thread)).await.unwrap().len()
}

/// The pool's only connection is not inside a transaction.
async fn connection_is_clean(saver: &SqliteSaver) {
    let mut conn = saver.pool().acquire().await.unwrap();
    sqlx::query("BEGIN")
        .execute(&mut *conn)
        .await
        .expect("a transaction was left open on the pooled connection");
    sqlx::query("ROLLBACK").execute(&mut *conn).await.unwrap();
}

async fn one_connection_saver(db: &SqliteDb) -> SqliteSaver {
    db.saver_on(
        SqlitePoolOptions::new().max_connections(1),
        db.connect_options(),
    )
    .await
}

#[tokio::test]
async fn failed_groups_leave_no_rows_and_no_open_transaction() {
    let db = SqliteDb::new().await;
    let saver = one_connection_saver(&db).await;
    // A row the guard finds missing (parent), then a unique violation.
    let err = saver.put_ops(group("t1", true)).await.unwrap_err();
    assert!(matches!(err, Error::CheckpointNotFound { .. }), "{err}");
    assert_eq!(stored(&saver, "t1").await, 0);
    connection_is_clean(&saver).await;
    saver.put_ops(group("t1", false)).await.unwrap();
    let err = saver.put_ops(group("t1", false)).await.unwrap_err();
    assert!(matches!(err, Error::VersionConflict { .. }), "{err}");
    assert_eq!(stored(&saver, "t1").await, 3);
    connection_is_clean(&saver).await;
    let head = saver
        .get_tuple(&CheckpointRef::latest("t1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.commit_order, 3);
}

/// Starts 40 groups (every third broken) and drops each future at its first
/// wait, while the database may be inside the group; then checks that every
/// group is stored whole or not at all and that the saver still works.
async fn cut_off_groups(saver: &dyn Saver) {
    for i in 0..40 {
        let thread = format!("cut-{i}");
        let _ = tokio::time::timeout(
            Duration::from_micros(1),
            saver.put_ops(group(&thread, i % 3 == 0)),
        )
        .await;
    }
    // Let cut-off queries and closing connections finish.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..40 {
        let thread = format!("cut-{i}");
        let n = stored(saver, &thread).await;
        if i % 3 == 0 {
            assert_eq!(n, 0, "{thread}: a broken group left rows");
        } else {
            assert!(n == 0 || n == 3, "{thread}: {n} of 3 checkpoints stored");
        }
    }
    saver.put_ops(group("after", false)).await.unwrap();
    assert_eq!(stored(saver, "after").await, 3);
}

#[tokio::test]
async fn cut_off_groups_are_all_or_nothing_sqlite() {
    let db = SqliteDb::new().await;
    let saver = one_connection_saver(&db).await;
    cut_off_groups(&saver).await;
    connection_is_clean(&saver).await;
}

#[tokio::test]
async fn cut_off_groups_are_all_or_nothing_postgres() {
    let db = PgDb::new().await;
    let saver = db.saver().await;
    cut_off_groups(&saver).await;
    db.drop_schema().await;
}

/// A group that cannot get the database's write lock within the busy
/// timeout fails with a storage error after waiting once, not once for the
/// one-query attempt and again for the statement-by-statement path.
#[tokio::test]
async fn a_locked_database_fails_after_one_busy_timeout() {
    let db = SqliteDb::new().await;
    let timeout = Duration::from_secs(2);
    let saver = db
        .saver_on(
            SqlitePoolOptions::new(),
            db.connect_options().busy_timeout(timeout),
        )
        .await;
    let mut holder = db.pool.acquire().await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut *holder)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = saver.put_ops(group("locked", false)).await.unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(err, Error::Storage { .. }), "{err}");
    assert!(
        waited < timeout * 2 - Duration::from_millis(300),
        "waited {waited:?} for a {timeout:?} busy timeout"
    );
    sqlx::query("ROLLBACK").execute(&mut *holder).await.unwrap();
    drop(holder);
    assert_eq!(stored(&saver, "locked").await, 0);
    saver.put_ops(group("locked", false)).await.unwrap();
    assert_eq!(stored(&saver, "locked").await, 3);
}

/// A step whose task writes and checkpoint together pass `put_many`'s 64 MiB
/// (the writes and the checkpoint after them, one group in `sync` mode) is
/// stored like any other: a `put_ops` group has no byte ceiling of its own.
/// With `put_many`'s on every group this run failed with `LimitExceeded`.
#[tokio::test]
async fn a_sync_step_larger_than_a_batch_is_stored() {
    use weaver::prelude::*;
    use weaver_tests::states::{Steps, StepsUpdate};
    let db = SqliteDb::new().await;
    let saver = db.saver().await;
    let big = "x".repeat(40 << 20);
    let graph = Graph::<Steps>::new("Big")
        .add_node("big", move |_: &Steps| {
            StepsUpdate::default().foo(big.clone())
        })
        .add_sequence([START, "big", END])
        .compile(Compile::new().checkpointer(saver))
        .unwrap();
    let config = RunConfig::thread("big").durability(Durability::Sync);
    let out = graph.invoke(Steps::default(), &config).await.unwrap();
    assert_eq!(out.complete().unwrap().foo.len(), 40 << 20);
    let state = graph.get_state(&config).await.unwrap();
    assert_eq!(state.values.foo.len(), 40 << 20);
}
