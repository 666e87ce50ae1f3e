//! The shared saver conformance suite, unchanged, on SQLite and PostgreSQL.

use std::sync::{Arc, Mutex};

use weaver::Saver;
use weaver_tests::conformance::run_saver_conformance;

use crate::common::{PgDb, SqliteDb};

#[tokio::test]
async fn conformance_sqlite() {
    let dbs: Arc<Mutex<Vec<SqliteDb>>> = Arc::default();
    run_saver_conformance(|| {
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
async fn conformance_postgres() {
    let dbs: Arc<tokio::sync::Mutex<Vec<PgDb>>> = Arc::default();
    run_saver_conformance(|| {
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

/// A saver over the in-memory one that leaves `lineage`, `thread_info` and
/// `at_commit_order` to the trait's defaults.
#[tokio::test]
async fn the_saver_trait_defaults_conform() {
    run_saver_conformance(|| async {
        Arc::new(crate::common::Forwarding::default()) as Arc<dyn Saver>
    })
    .await;
}
