//! Node policies (retry, timeout, cache) on a SQLite file and on
//! PostgreSQL: the checks the runtime tests run on the in-memory saver.

use std::sync::Arc;

use weaver_tests::policies::run_policy_checks;

use crate::common::{PgDb, SqliteDb};

#[tokio::test]
async fn policies_on_sqlite() {
    let db = SqliteDb::new().await;
    run_policy_checks(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn policies_on_postgres() {
    let db = PgDb::new().await;
    run_policy_checks(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}
