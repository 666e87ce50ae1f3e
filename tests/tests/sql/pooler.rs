//! The PostgreSQL saver behind PgBouncer in transaction mode (`POOLER_URL`,
//! default `postgres://postgres@127.0.0.1:6432/test`; `.ci/pgbouncer.sh`
//! starts one): the conformance suite, migrations, many tasks sharing one
//! pool, and the default mode left as it was.

use std::sync::Arc;

use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool};
use weaver::Saver;
use weaver::checkpoint::{
    CheckpointRef, ListFilter, PendingWrite, PostgresSaver, PruneStrategy, WriteOp,
};
use weaver::migrate::{self, Adapter, PgSchema};
use weaver_tests::conformance::{chain, new_on, run_saver_conformance};

use crate::common::PgDb;

/// Where the pooler listens.
pub fn pooler_url() -> String {
    std::env::var("POOLER_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:6432/test".to_owned())
}

/// A pool of at most `max` connections through the pooler, or a failure
/// saying how to start one.
pub async fn pooler_pool(max: u32) -> PgPool {
    let url = pooler_url();
    PgPoolOptions::new()
        .max_connections(max)
        .connect(&url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "PgBouncer (transaction mode) is unreachable at {url} ({e}): pgbouncer is missing \
                 or not running; start it with `.ci/pgbouncer.sh` (installs pgbouncer, listens on \
                 127.0.0.1:6432 in front of 127.0.0.1:5432) or set POOLER_URL; pooler tests never skip"
            )
        })
}

/// A fresh schema migrated through the pooler, and a pooler-safe saver on
/// it sharing `pool`; dropped by [`PooledDb::drop_schema`] (directly).
pub struct PooledDb {
    pub pool: PgPool,
    pub direct: PgDb,
}

impl PooledDb {
    pub async fn new(pool: &PgPool) -> Self {
        let direct = PgDb::new().await;
        migrate::up(
            &PgSchema::new(pool, &direct.schema).unwrap(),
            &[Adapter::Checkpoint],
            None,
        )
        .await
        .expect("migrations run through the pooler");
        PooledDb {
            pool: pool.clone(),
            direct,
        }
    }

    pub fn saver(&self) -> PostgresSaver {
        PostgresSaver::new(self.pool.clone())
            .with_prefix(&self.direct.schema)
            .unwrap()
            .pooler_safe(true)
    }

    pub async fn drop_schema(self) {
        self.direct.drop_schema().await;
    }
}

#[tokio::test]
async fn conformance_through_a_transaction_pooler() {
    let pool = pooler_pool(10).await;
    let dbs: Arc<tokio::sync::Mutex<Vec<PooledDb>>> = Arc::default();
    run_saver_conformance(|| {
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

#[tokio::test]
async fn migrations_run_up_and_down_through_a_transaction_pooler() {
    let pool = pooler_pool(4).await;
    let db = PgDb::new().await;
    let target = PgSchema::new(&pool, &db.schema).unwrap();
    let all = [Adapter::Checkpoint, Adapter::Store];
    migrate::up(&target, &all, None).await.unwrap();
    let latest: Vec<u32> = all.iter().map(|a| a.latest()).collect();
    assert_eq!(migrate::versions(&target, &all).await.unwrap(), latest);
    migrate::verify_migrated(&target, &all).await.unwrap();
    // Again: a no-op.
    migrate::up(&target, &all, None).await.unwrap();
    assert_eq!(
        db.table_count().await,
        8,
        "two checkpoint tables, the two lease tables, the two tables of lease bases, the store's, the marker"
    );
    migrate::down(&target, &all, 1).await.unwrap();
    assert_eq!(migrate::versions(&target, &all).await.unwrap(), [0, 0]);
    assert_eq!(db.table_count().await, 0);
    let err = migrate::verify_migrated(&target, &all).await.unwrap_err();
    assert!(
        matches!(err, weaver::Error::MigrationRequired { found: 0, .. }),
        "{err}"
    );
    db.drop_schema().await;
}

/// One task's work: a chain of checkpoints with writes, read back, listed,
/// pruned, with a group write in between.
async fn busy_thread(saver: PostgresSaver, thread: String) {
    let ids = chain(&saver, &thread, 6).await;
    let head = CheckpointRef::latest(thread.clone()).at(ids[5].clone());
    saver
        .put_writes(
            &head,
            PendingWrite::for_task("task", "", [("v".to_owned(), json!({"from": thread}))]),
        )
        .await
        .unwrap();
    let next = new_on(&thread, Some(&ids[5]), Some(7), 6, json!("group"));
    saver
        .put_ops(vec![WriteOp::Put(next.clone())])
        .await
        .unwrap();
    let tuple = saver
        .get_tuple(&CheckpointRef::latest(thread.clone()))
        .await
        .unwrap()
        .expect("the head is stored");
    assert_eq!(tuple.checkpoint.id, next.checkpoint.id, "{thread}");
    let listed = saver.list(&ListFilter::thread(&thread)).await.unwrap();
    assert_eq!(listed.len(), 7, "{thread}");
    let info = saver.thread_info(&thread).await.unwrap().unwrap();
    assert_eq!(info.checkpoints, 7, "{thread}");
    let pruned = saver
        .prune(std::slice::from_ref(&thread), PruneStrategy::KeepLast(2))
        .await
        .unwrap();
    assert_eq!(pruned, 5, "{thread}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_share_one_pool_through_a_transaction_pooler() {
    // More client connections than the pooler has server sessions (20),
    // and clones of one saver beside savers of their own.
    let pool = pooler_pool(40).await;
    let db = PooledDb::new(&pool).await;
    let shared = db.saver();
    let mut tasks = Vec::new();
    for i in 0..48 {
        let saver = if i % 2 == 0 {
            shared.clone()
        } else {
            db.saver()
        };
        tasks.push(tokio::spawn(busy_thread(saver, format!("thread-{i}"))));
    }
    for t in tasks {
        t.await.expect("no task fails through the pooler");
    }
    let threads = shared.list_threads(None, 0).await.unwrap();
    assert_eq!(threads.len(), 48);
    assert!(threads.iter().all(|t| t.checkpoints == 2), "{threads:?}");
    db.drop_schema().await;
}

/// The statements a session of `pool` holds prepared (read with the simple
/// protocol, which prepares nothing).
async fn prepared_on(pool: &PgPool) -> Vec<String> {
    use sqlx::Row;
    let mut conn = pool.acquire().await.unwrap();
    sqlx::raw_sql("SELECT statement FROM pg_prepared_statements")
        .fetch_all(&mut *conn)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<String, _>(0))
        .collect()
}

/// A saver on `db`'s schema, directly on PostgreSQL, over a pool of one
/// connection: the saver keeps the first as its own, so the pool's next
/// one serves `list_threads` and can be inspected after.
async fn direct_saver(db: &PgDb, pooler_safe: Option<bool>) -> PostgresSaver {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&crate::common::pg_url())
        .await
        .unwrap();
    let saver = PostgresSaver::new(pool).with_prefix(&db.schema).unwrap();
    let saver = match pooler_safe {
        Some(on) => saver.pooler_safe(on),
        None => saver,
    };
    chain(&saver, &format!("{pooler_safe:?}"), 2).await;
    assert!(!saver.list_threads(None, 0).await.unwrap().is_empty());
    saver
}

#[tokio::test]
async fn the_default_mode_still_prepares_named_statements() {
    let db = PgDb::new().await;
    db.saver().await;
    for mode in [None, Some(false)] {
        let saver = direct_saver(&db, mode).await;
        let prepared = prepared_on(saver.pool()).await;
        assert!(
            prepared.iter().any(|s| s.contains("weaver_checkpoints")),
            "{mode:?}: the listing is prepared and kept: {prepared:?}"
        );
    }
    let saver = direct_saver(&db, Some(true)).await;
    let prepared = prepared_on(saver.pool()).await;
    assert!(prepared.is_empty(), "pooler-safe: {prepared:?}");
    db.drop_schema().await;
}

/// Savers in the default mode through the pooler, one client connection
/// each: each names its first statement `sqlx_s_1`, and more clients than
/// the pooler has server sessions put two of those on one session. What
/// the concurrent test above guards against.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_default_mode_collides_through_a_transaction_pooler() {
    let setup = pooler_pool(2).await;
    let db = PooledDb::new(&setup).await;
    let mut tasks = Vec::new();
    for i in 0..30 {
        let schema = db.direct.schema.clone();
        tasks.push(tokio::spawn(async move {
            let pool = pooler_pool(1).await;
            let saver = PostgresSaver::new(pool).with_prefix(&schema).unwrap();
            let mut failures = Vec::new();
            for _ in 0..3 {
                if let Err(e) = saver.list_threads(None, 0).await {
                    failures.push(e.to_string());
                }
                if let Err(e) = saver.thread_info(&format!("t{i}")).await {
                    failures.push(e.to_string());
                }
            }
            failures
        }));
    }
    let mut failures = Vec::new();
    for t in tasks {
        failures.extend(t.await.unwrap());
    }
    assert!(
        failures.iter().any(|f| f.contains("prepared statement")),
        "{failures:?}"
    );
    // The sessions the pooler keeps now hold stray named statements; the
    // pooler-safe saver does not mind them.
    let saver = db.saver();
    chain(&saver, "after", 3).await;
    assert_eq!(saver.list_threads(None, 0).await.unwrap().len(), 1);
    // Directly, for the rows: nothing half-written.
    let n: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM \"{}\".weaver_checkpoints",
        db.direct.schema
    )))
    .fetch_one(&db.direct.pool)
    .await
    .unwrap();
    assert_eq!(n, 3);
    db.drop_schema().await;
}
