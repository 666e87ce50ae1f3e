//! Chat flows on a SQLite file and on PostgreSQL: the shared storage
//! suite, and concurrent turns on a multi-threaded runtime, where both
//! turns reach the database at once.

use std::sync::Arc;

use weaver::Saver;
use weaver_tests::chat_flows;

use crate::common::{PgDb, SqliteDb};

#[tokio::test]
async fn chat_auto_save_stores_each_action_and_valid_reply_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::auto_save_stores_each_action_and_valid_reply(saver).await;
}

#[tokio::test]
async fn chat_auto_save_stores_each_action_and_valid_reply_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::auto_save_stores_each_action_and_valid_reply(saver).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn chat_manual_save_stores_only_on_save_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::manual_save_stores_only_on_save(saver).await;
}

#[tokio::test]
async fn chat_manual_save_stores_only_on_save_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::manual_save_stores_only_on_save(saver).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn chat_a_fresh_flow_resumes_at_its_next_turn_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::a_fresh_flow_resumes_at_its_next_turn(saver).await;
}

#[tokio::test]
async fn chat_a_fresh_flow_resumes_at_its_next_turn_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::a_fresh_flow_resumes_at_its_next_turn(saver).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn chat_history_lists_numbered_versions_newest_first_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::history_lists_numbered_versions_newest_first(saver).await;
}

#[tokio::test]
async fn chat_history_lists_numbered_versions_newest_first_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::history_lists_numbered_versions_newest_first(saver).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn chat_restore_by_version_and_continue_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::restore_by_version_and_continue(saver).await;
}

#[tokio::test]
async fn chat_restore_by_version_and_continue_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::restore_by_version_and_continue(saver).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn chat_concurrent_turns_give_one_version_conflict_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::concurrent_turns_give_one_version_conflict(saver).await;
}

#[tokio::test]
async fn chat_concurrent_turns_give_one_version_conflict_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::concurrent_turns_give_one_version_conflict(saver).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn chat_emitted_messages_and_payloads_are_never_stored_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::emitted_messages_and_payloads_are_never_stored(saver).await;
}

#[tokio::test]
async fn chat_emitted_messages_and_payloads_are_never_stored_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::emitted_messages_and_payloads_are_never_stored(saver).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn chat_snapshots_grow_and_prune_keeps_the_last_n_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::snapshots_grow_and_prune_keeps_the_last_n(saver).await;
}

#[tokio::test]
async fn chat_snapshots_grow_and_prune_keeps_the_last_n_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::snapshots_grow_and_prune_keeps_the_last_n(saver).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn chat_the_node_bound_of_a_turn_is_a_typed_error_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::the_node_bound_of_a_turn_is_a_typed_error(saver).await;
}

#[tokio::test]
async fn chat_the_node_bound_of_a_turn_is_a_typed_error_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::the_node_bound_of_a_turn_is_a_typed_error(saver).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn chat_an_invalid_reply_re_asks_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::an_invalid_reply_re_asks(saver).await;
}

#[tokio::test]
async fn chat_an_invalid_reply_re_asks_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::an_invalid_reply_re_asks(saver).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn chat_auto_advance_chains_run_in_one_turn_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::auto_advance_chains_run_in_one_turn(saver).await;
}

#[tokio::test]
async fn chat_auto_advance_chains_run_in_one_turn_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::auto_advance_chains_run_in_one_turn(saver).await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_concurrent_turns_on_two_threads_give_one_version_conflict_on_sqlite() {
    for _ in 0..5 {
        let db = SqliteDb::new().await;
        let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
        chat_flows::concurrent_turns_give_one_version_conflict(saver).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_concurrent_turns_on_two_threads_give_one_version_conflict_on_postgres() {
    for _ in 0..5 {
        let db = PgDb::new().await;
        let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
        chat_flows::concurrent_turns_give_one_version_conflict(saver).await;
        db.drop_schema().await;
    }
}

#[tokio::test]
async fn chat_unsaved_progress_on_a_moved_conversation_conflicts_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::unsaved_progress_on_a_moved_conversation_conflicts(saver).await;
}

#[tokio::test]
async fn chat_unsaved_progress_on_a_moved_conversation_conflicts_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::unsaved_progress_on_a_moved_conversation_conflicts(saver).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn chat_a_failed_turn_resumes_in_the_middle_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::a_failed_turn_resumes_in_the_middle(saver).await;
}

#[tokio::test]
async fn chat_a_failed_turn_resumes_in_the_middle_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::a_failed_turn_resumes_in_the_middle(saver).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn a_turn_goes_on_from_stored_writes_without_their_snapshot_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::a_turn_goes_on_from_stored_writes_without_their_snapshot(saver).await;
}

#[tokio::test]
async fn a_turn_goes_on_from_stored_writes_without_their_snapshot_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    chat_flows::a_turn_goes_on_from_stored_writes_without_their_snapshot(saver).await;
    db.drop_schema().await;
}
