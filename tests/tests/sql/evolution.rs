//! State and graph evolution on a SQLite file and on PostgreSQL: threads
//! written by the first release of a state, read by later releases (the
//! shared suite in `weaver_tests::evolution`).

use std::sync::Arc;

use weaver::Saver;
use weaver_tests::evolution;

use crate::common::{PgDb, SqliteDb};

#[tokio::test]
async fn additive_changes_read_old_threads_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::additive_changes_read_old_threads(saver, "t").await;
}

#[tokio::test]
async fn additive_changes_read_old_threads_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::additive_changes_read_old_threads(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn upcasters_rename_a_field_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::upcasters_rename_a_field(saver, "t").await;
}

#[tokio::test]
async fn upcasters_rename_a_field_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::upcasters_rename_a_field(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn unreadable_changes_are_typed_errors_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::unreadable_changes_are_typed_errors(saver, "t").await;
}

#[tokio::test]
async fn unreadable_changes_are_typed_errors_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::unreadable_changes_are_typed_errors(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn pending_writes_are_upcast_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::pending_writes_are_upcast(saver, "t").await;
}

#[tokio::test]
async fn pending_writes_are_upcast_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::pending_writes_are_upcast(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn forks_read_old_checkpoints_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::forks_read_old_checkpoints(saver, "t").await;
}

#[tokio::test]
async fn forks_read_old_checkpoints_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::forks_read_old_checkpoints(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn renamed_nodes_map_to_new_names_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::renamed_nodes_map_to_new_names(saver, "t").await;
}

#[tokio::test]
async fn renamed_nodes_map_to_new_names_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::renamed_nodes_map_to_new_names(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn failing_upcasters_and_bad_versions_are_typed_errors_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::failing_upcasters_and_bad_versions_are_typed_errors(saver, "t").await;
}

#[tokio::test]
async fn failing_upcasters_and_bad_versions_are_typed_errors_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::failing_upcasters_and_bad_versions_are_typed_errors(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn newer_writes_on_an_older_checkpoint_are_not_upcast_again_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::newer_writes_on_an_older_checkpoint_are_not_upcast_again(saver, "t").await;
}

#[tokio::test]
async fn newer_writes_on_an_older_checkpoint_are_not_upcast_again_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    evolution::newer_writes_on_an_older_checkpoint_are_not_upcast_again(saver, "t").await;
    db.drop_schema().await;
}
