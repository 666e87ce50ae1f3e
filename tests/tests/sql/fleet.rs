//! The shared fleet listing and retention suite on every saver: in memory,
//! SQLite, PostgreSQL, and PostgreSQL through a transaction pooler.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sqlx::AssertSqlSafe;
use weaver::migrate::{self, Adapter};

use weaver::{InMemorySaver, Saver};
use weaver_tests::fleet::run_fleet_suite;

use crate::common::{PgDb, SqliteDb};
use crate::pooler::{PooledDb, pooler_pool};

#[tokio::test]
async fn fleet_in_memory() {
    run_fleet_suite(|| async { Arc::new(InMemorySaver::new()) as Arc<dyn Saver> }).await;
}

#[tokio::test]
async fn fleet_sqlite() {
    let dbs: Arc<std::sync::Mutex<Vec<SqliteDb>>> = Arc::default();
    run_fleet_suite(|| {
        let dbs = dbs.clone();
        async move {
            let db = SqliteDb::new().await;
            let saver = db.saver().await;
            dbs.lock().unwrap().push(db);
            Arc::new(saver) as Arc<dyn Saver>
        }
    })
    .await;
}

#[tokio::test]
async fn fleet_postgres() {
    let dbs: Arc<tokio::sync::Mutex<Vec<PgDb>>> = Arc::default();
    run_fleet_suite(|| {
        let dbs = dbs.clone();
        async move {
            let db = PgDb::new().await;
            let saver = db.saver().await;
            dbs.lock().await.push(db);
            Arc::new(saver) as Arc<dyn Saver>
        }
    })
    .await;
    for db in std::mem::take(&mut *dbs.lock().await) {
        db.drop_schema().await;
    }
}

#[tokio::test]
async fn fleet_through_a_transaction_pooler() {
    let pool = pooler_pool(6).await;
    let dbs: Arc<tokio::sync::Mutex<Vec<PooledDb>>> = Arc::default();
    run_fleet_suite(|| {
        let dbs = dbs.clone();
        let pool = pool.clone();
        async move {
            let db = PooledDb::new(&pool).await;
            let saver = db.saver();
            dbs.lock().await.push(db);
            Arc::new(saver) as Arc<dyn Saver>
        }
    })
    .await;
    for db in std::mem::take(&mut *dbs.lock().await) {
        db.drop_schema().await;
    }
}

/// Rows stored before version 5 read as stored when it ran; version 5
/// reverts and applies again; a time the database holds that is not one
/// (negative) is a typed error.
async fn times_across_version_5(
    saver: Arc<dyn Saver>,
    migrate_to: impl AsyncFn(Option<u32>),
    exec: impl AsyncFn(&str),
    payload: &str,
) {
    migrate_to(Some(4)).await;
    exec(&format!(
        "INSERT INTO {{p}}weaver_checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata, commit_order) VALUES ('old', '', 'c1', {payload}, '{{}}', 1)"
    ))
    .await;
    let before = SystemTime::now() - Duration::from_secs(1);
    migrate_to(None).await;
    let info = saver.thread_info("old").await.unwrap().unwrap();
    assert!(info.created_at.unwrap() >= before, "{info:?}");
    assert_eq!(info.created_at, info.updated_at);
    assert_eq!(info.checkpoints, 1);
    exec("UPDATE {p}weaver_checkpoints SET created_at = -5").await;
    let err = saver.thread_info("old").await.unwrap_err();
    assert!(matches!(err, weaver::Error::Decode { .. }), "{err:?}");
    let err = saver.list_threads(None, 0).await.unwrap_err();
    assert!(matches!(err, weaver::Error::Decode { .. }), "{err:?}");
}

#[tokio::test]
async fn times_across_version_5_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver = Arc::new(weaver::checkpoint::SqliteSaver::new(db.pool.clone()));
    let pool = db.pool.clone();
    times_across_version_5(
        saver,
        async |v| migrate::up(&pool, &[Adapter::Checkpoint], v).await.unwrap(),
        async |sql| {
            sqlx::raw_sql(AssertSqlSafe(sql.replace("{p}", "")))
                .execute(&pool)
                .await
                .unwrap();
        },
        "X'7B7D'",
    )
    .await;
    // Down from 5 keeps the rows.
    migrate::down(&db.pool, &[Adapter::Checkpoint], 5)
        .await
        .unwrap();
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM weaver_checkpoints")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn times_across_version_5_on_postgres() {
    let db = PgDb::new().await;
    let saver = Arc::new(
        weaver::checkpoint::PostgresSaver::new(db.pool.clone())
            .with_prefix(&db.schema)
            .unwrap(),
    );
    let prefix = format!("\"{}\".", db.schema);
    let (pool, target) = (db.pool.clone(), db.target());
    times_across_version_5(
        saver,
        async |v| {
            migrate::up(&target, &[Adapter::Checkpoint], v)
                .await
                .unwrap()
        },
        async |sql| {
            sqlx::raw_sql(AssertSqlSafe(sql.replace("{p}", &prefix)))
                .execute(&pool)
                .await
                .unwrap();
        },
        "decode('7b7d', 'hex')",
    )
    .await;
    migrate::down(&db.target(), &[Adapter::Checkpoint], 5)
        .await
        .unwrap();
    let n: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM \"{}\".weaver_checkpoints",
        db.schema
    )))
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(n, 1);
    db.drop_schema().await;
}

#[tokio::test]
async fn a_cut_off_idle_deletion_gives_the_thread_back_in_memory() {
    weaver_tests::fleet::a_cut_off_idle_deletion_gives_the_thread_back(Arc::new(
        InMemorySaver::new(),
    ))
    .await;
}

#[tokio::test]
async fn a_cut_off_idle_deletion_gives_the_thread_back_on_sqlite() {
    let db = SqliteDb::new().await;
    weaver_tests::fleet::a_cut_off_idle_deletion_gives_the_thread_back(Arc::new(db.saver().await))
        .await;
}
