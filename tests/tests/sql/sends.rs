//! `Send` fan-out on a SQLite file and on PostgreSQL: the sends wait in the
//! stored checkpoint, and a failed send is the only task run again.

use std::sync::Arc;

use weaver::Saver;
use weaver_tests::sends;

use crate::common::{PgDb, SqliteDb};

#[tokio::test]
async fn a_fan_out_merges_in_send_order_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    sends::fan_out_merges_in_send_order(saver, "t").await;
}

#[tokio::test]
async fn a_fan_out_merges_in_send_order_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    sends::fan_out_merges_in_send_order(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn a_failed_send_is_the_only_task_run_again_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    sends::a_failed_send_is_the_only_task_run_again(saver, "t").await;
}

#[tokio::test]
async fn a_failed_send_is_the_only_task_run_again_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    sends::a_failed_send_is_the_only_task_run_again(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn new_input_discards_the_unfinished_sends_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    sends::new_input_discards_the_unfinished_sends(saver, "t").await;
}

#[tokio::test]
async fn new_input_discards_the_unfinished_sends_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    sends::new_input_discards_the_unfinished_sends(saver, "t").await;
    db.drop_schema().await;
}
