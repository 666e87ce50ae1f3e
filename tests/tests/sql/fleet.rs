//! The shared fleet listing and retention suite on every saver: in memory,
//! SQLite, PostgreSQL, and PostgreSQL through a transaction pooler.

use std::sync::Arc;

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
