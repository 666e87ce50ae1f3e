//! The connection a SQL saver keeps beside its pool: sequential calls reuse
//! it (no pool round trip), a busy pool does not stop the saver, and a
//! closed pool does.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::SqlitePoolOptions;
use weaver::checkpoint::{CheckpointRef, PostgresSaver, SqliteSaver};
use weaver::{Error, Saver};

use crate::common::{PgDb, SqliteDb, cp, pg_url};

/// Enough calls for a saver to adopt a connection of its own (it does
/// after its first dozen, made through the pool).
async fn settle_in(saver: &dyn Saver) {
    for _ in 0..16 {
        saver.get_tuple(&CheckpointRef::latest("t")).await.unwrap();
    }
}

/// Stores one checkpoint, then, while the test holds the pool's only
/// connection, reads and writes through the saver's own.
async fn works_beside_a_busy_pool<DB: sqlx::Database>(saver: &dyn Saver, pool: &sqlx::Pool<DB>) {
    saver.put(cp("t", "a", None, Some(1))).await.unwrap();
    settle_in(saver).await;
    let held = pool.acquire().await.unwrap();
    let head = tokio::time::timeout(
        Duration::from_secs(5),
        saver.get_tuple(&CheckpointRef::latest("t")),
    )
    .await
    .expect("the saver waited for the pool instead of using its own connection")
    .unwrap()
    .unwrap();
    assert_eq!(head.checkpoint.id, "a");
    tokio::time::timeout(
        Duration::from_secs(5),
        saver.put(cp("t", "b", Some("a"), Some(2))),
    )
    .await
    .expect("the saver waited for the pool instead of using its own connection")
    .unwrap();
    drop(held);
    assert_eq!(
        saver
            .get_tuple(&CheckpointRef::latest("t"))
            .await
            .unwrap()
            .unwrap()
            .commit_order,
        2
    );
}

/// After the pool is closed every call fails with a storage error, even
/// though the saver still held a connection of its own.
async fn stops_with_its_pool<DB: sqlx::Database>(saver: &dyn Saver, pool: &sqlx::Pool<DB>) {
    saver.put(cp("t", "a", None, Some(1))).await.unwrap();
    settle_in(saver).await;
    pool.close().await;
    let err = saver
        .get_tuple(&CheckpointRef::latest("t"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Storage { .. }), "{err}");
    let err = saver
        .put(cp("t", "b", Some("a"), Some(2)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Storage { .. }), "{err}");
}

async fn sqlite_one_connection(db: &SqliteDb) -> SqliteSaver {
    db.saver_on(
        SqlitePoolOptions::new().max_connections(1),
        db.connect_options(),
    )
    .await
}

async fn pg_one_connection(db: &PgDb) -> PostgresSaver {
    db.saver_on(
        PgPoolOptions::new().max_connections(1),
        pg_url().parse().unwrap(),
    )
    .await
}

#[tokio::test]
async fn sqlite_saver_works_beside_a_busy_pool() {
    let db = SqliteDb::new().await;
    let saver = sqlite_one_connection(&db).await;
    works_beside_a_busy_pool(&saver, saver.pool()).await;
}

#[tokio::test]
async fn postgres_saver_works_beside_a_busy_pool() {
    let db = PgDb::new().await;
    let saver = pg_one_connection(&db).await;
    works_beside_a_busy_pool(&saver, saver.pool()).await;
    drop(saver);
    db.drop_schema().await;
}

#[tokio::test]
async fn sqlite_saver_stops_with_its_pool() {
    let db = SqliteDb::new().await;
    let saver = sqlite_one_connection(&db).await;
    stops_with_its_pool(&saver, saver.pool()).await;
}

#[tokio::test]
async fn postgres_saver_stops_with_its_pool() {
    let db = PgDb::new().await;
    let saver = pg_one_connection(&db).await;
    stops_with_its_pool(&saver, saver.pool()).await;
    drop(saver);
    db.drop_schema().await;
}

/// The server drops the saver's idle connection (a restart, an idle-session
/// timeout); after the idle limit the saver pings it before use, finds it
/// gone and goes through the pool: the call succeeds.
#[tokio::test]
async fn postgres_saver_survives_a_dropped_idle_connection() {
    let db = PgDb::new().await;
    let app = format!("weaver-hot-{}", db.schema);
    let options = pg_url()
        .parse::<sqlx::postgres::PgConnectOptions>()
        .unwrap()
        .application_name(&app);
    let saver = db.saver_on(PgPoolOptions::new(), options).await;
    saver.put(cp("t", "a", None, Some(1))).await.unwrap();
    settle_in(&saver).await;
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
    )
    .bind(&app)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(!killed.is_empty() && killed.iter().all(|k| *k));
    tokio::time::sleep(Duration::from_secs(11)).await;
    let head = saver
        .get_tuple(&CheckpointRef::latest("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.checkpoint.id, "a");
    drop(saver);
    db.drop_schema().await;
}

/// Options of a SQLite pool of four connections, and the count of the
/// connections it opens.
fn counting_pool() -> (SqlitePoolOptions, Arc<AtomicUsize>) {
    let opened = Arc::new(AtomicUsize::new(0));
    let counter = opened.clone();
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .after_connect(move |_, _| {
            let counter = counter.clone();
            Box::pin(async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
        });
    (pool, opened)
}

/// Overlapping calls use the pool and give their connections back to it:
/// the saver adopts a pooled connection only when it has none of its own,
/// so a busy saver does not keep opening connections.
#[tokio::test]
async fn overlapping_calls_do_not_churn_connections() {
    let db = SqliteDb::new().await;
    let (pool, opened) = counting_pool();
    let saver = Arc::new(db.saver_on(pool, db.connect_options()).await);
    saver.put(cp("t", "a", None, Some(1))).await.unwrap();
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let saver = saver.clone();
            tokio::spawn(async move {
                for _ in 0..100 {
                    saver
                        .get_tuple(&CheckpointRef::latest("t"))
                        .await
                        .unwrap()
                        .unwrap();
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    // The pool's four and the saver's own, give or take one replaced.
    let n = opened.load(Ordering::SeqCst);
    assert!(n <= 6, "{n} connections opened for 600 overlapping reads");
}

/// Dropping the saver closes its own connection before the drop returns:
/// when it is the last one open, its close merges the WAL into the database
/// file at once, so a process that exits right after keeps its writes in the
/// `.db` file alone.
#[tokio::test]
async fn dropping_the_saver_closes_its_connection() {
    let dir = std::env::temp_dir().join(format!("weaver-hot-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("checkpoints.db");
    let saver = SqliteSaver::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    saver.put(cp("t", "a", None, Some(1))).await.unwrap();
    settle_in(&saver).await;
    saver.pool().close().await;
    let wal = dir.join("checkpoints.db-wal");
    assert!(
        wal.exists(),
        "the saver's own connection should still be open"
    );
    drop(saver);
    assert!(
        !wal.exists(),
        "the WAL was left behind: the saver's connection is still open"
    );
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM weaver_checkpoints")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 1);
    pool.close().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A saver made for a few calls (a stateless worker building one per
/// request on its process's pool) gives its connections back to the pool:
/// thirty of them, one after another, open no more connections than the
/// pool holds (four). (One that took a connection out of the pool for
/// itself at once would close it when dropped, and each next saver would
/// open a new one: about thirty.) The pool may open a second or third one
/// while a connection given back is still on its way (sqlx returns it from
/// a task of its own, which a loaded machine runs late).
#[tokio::test]
async fn short_lived_savers_leave_the_pools_connections_in_it() {
    let db = SqliteDb::new().await;
    let (pool, opened) = counting_pool();
    let first = db.saver_on(pool, db.connect_options()).await;
    let pool = first.pool().clone();
    first.put(cp("t", "a", None, Some(1))).await.unwrap();
    drop(first);
    let before = opened.load(Ordering::SeqCst);
    for _ in 0..30 {
        let saver = SqliteSaver::new(pool.clone());
        saver
            .get_tuple(&CheckpointRef::latest("t"))
            .await
            .unwrap()
            .unwrap();
        saver.thread_info("t").await.unwrap().unwrap();
    }
    let n = opened.load(Ordering::SeqCst) - before;
    assert!(n <= 3, "{n} connections opened for 30 short-lived savers");
}
