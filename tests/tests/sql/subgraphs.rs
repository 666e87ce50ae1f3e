//! Subgraphs on a SQLite file and on PostgreSQL: namespaces, interrupts one
//! and two levels deep answered through a second saver handle, failures, a
//! finished subgraph, deletion.

use std::sync::Arc;

use weaver::Saver;
use weaver_tests::subgraphs::{self, Depth};

use crate::common::{PgDb, SqliteDb};

#[tokio::test]
async fn subgraph_checkpoints_live_under_the_task_namespace_on_sqlite() {
    let db = SqliteDb::new().await;
    subgraphs::subgraph_checkpoints_live_under_the_task_namespace(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn subgraph_checkpoints_live_under_the_task_namespace_on_postgres() {
    let db = PgDb::new().await;
    subgraphs::subgraph_checkpoints_live_under_the_task_namespace(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}

async fn deep_on_sqlite(depth: Depth) {
    let db = SqliteDb::new().await;
    let first: Arc<dyn Saver> = Arc::new(db.saver().await);
    // Another process: its own pool and saver on the same file.
    let second: Arc<dyn Saver> =
        Arc::new(db.saver_on(Default::default(), db.connect_options()).await);
    subgraphs::a_deep_interrupt_is_answered_from_a_fresh_graph(first, second, depth).await;
}

async fn deep_on_postgres(depth: Depth) {
    let db = PgDb::new().await;
    let first: Arc<dyn Saver> = Arc::new(db.saver().await);
    let second: Arc<dyn Saver> = Arc::new(db.saver().await);
    subgraphs::a_deep_interrupt_is_answered_from_a_fresh_graph(first, second, depth).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn an_interrupt_one_level_deep_is_answered_from_a_fresh_graph_on_sqlite() {
    deep_on_sqlite(Depth::One).await;
}

#[tokio::test]
async fn an_interrupt_two_levels_deep_is_answered_from_a_fresh_graph_on_sqlite() {
    deep_on_sqlite(Depth::Two).await;
}

#[tokio::test]
async fn an_interrupt_one_level_deep_is_answered_from_a_fresh_graph_on_postgres() {
    deep_on_postgres(Depth::One).await;
}

#[tokio::test]
async fn an_interrupt_two_levels_deep_is_answered_from_a_fresh_graph_on_postgres() {
    deep_on_postgres(Depth::Two).await;
}

#[tokio::test]
async fn a_failing_inner_node_fails_the_parent_until_continued_on_sqlite() {
    let db = SqliteDb::new().await;
    subgraphs::a_failing_inner_node_fails_the_parent_until_continued(Arc::new(db.saver().await))
        .await;
}

#[tokio::test]
async fn a_failing_inner_node_fails_the_parent_until_continued_on_postgres() {
    let db = PgDb::new().await;
    subgraphs::a_failing_inner_node_fails_the_parent_until_continued(Arc::new(db.saver().await))
        .await;
    db.drop_schema().await;
}

#[tokio::test]
async fn a_finished_subgraph_is_not_run_again_on_sqlite() {
    let db = SqliteDb::new().await;
    subgraphs::a_finished_subgraph_is_not_run_again(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn a_finished_subgraph_is_not_run_again_on_postgres() {
    let db = PgDb::new().await;
    subgraphs::a_finished_subgraph_is_not_run_again(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn deleting_a_thread_deletes_its_subgraphs_on_sqlite() {
    let db = SqliteDb::new().await;
    subgraphs::deleting_a_thread_deletes_its_subgraphs(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn deleting_a_thread_deletes_its_subgraphs_on_postgres() {
    let db = PgDb::new().await;
    subgraphs::deleting_a_thread_deletes_its_subgraphs(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn get_state_shows_the_paused_subgraphs_on_sqlite() {
    let db = SqliteDb::new().await;
    subgraphs::get_state_shows_the_paused_subgraphs(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn get_state_shows_the_paused_subgraphs_on_postgres() {
    let db = PgDb::new().await;
    subgraphs::get_state_shows_the_paused_subgraphs(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn a_fork_resumes_a_paused_subgraph_where_it_paused_on_sqlite_and_postgres() {
    let lite = SqliteDb::new().await;
    subgraphs::a_fork_resumes_a_paused_subgraph_where_it_paused(
        Arc::new(lite.saver().await),
        Depth::Two,
    )
    .await;
    let pg = PgDb::new().await;
    subgraphs::a_fork_resumes_a_paused_subgraph_where_it_paused(
        Arc::new(pg.saver().await),
        Depth::Two,
    )
    .await;
    pg.drop_schema().await;
}

async fn replay_on_sqlite(depth: Depth) {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    subgraphs::replaying_a_paused_parent_checkpoint_resumes_the_subgraph_at_its_pause(saver, depth)
        .await;
}

async fn replay_on_postgres(depth: Depth) {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    subgraphs::replaying_a_paused_parent_checkpoint_resumes_the_subgraph_at_its_pause(saver, depth)
        .await;
    db.drop_schema().await;
}

#[tokio::test]
async fn replaying_a_paused_parent_checkpoint_resumes_the_subgraph_one_level_deep_on_sqlite() {
    replay_on_sqlite(Depth::One).await;
}

#[tokio::test]
async fn replaying_a_paused_parent_checkpoint_resumes_the_subgraph_two_levels_deep_on_sqlite() {
    replay_on_sqlite(Depth::Two).await;
}

#[tokio::test]
async fn replaying_a_paused_parent_checkpoint_resumes_the_subgraph_one_level_deep_on_postgres() {
    replay_on_postgres(Depth::One).await;
}

#[tokio::test]
async fn replaying_a_paused_parent_checkpoint_resumes_the_subgraph_two_levels_deep_on_postgres() {
    replay_on_postgres(Depth::Two).await;
}

#[tokio::test]
async fn replaying_before_the_subgraph_ran_starts_it_over_on_sqlite() {
    let db = SqliteDb::new().await;
    subgraphs::replaying_before_the_subgraph_ran_starts_it_over(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn a_replay_that_failed_first_still_resumes_the_subgraph_at_its_pause_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    for depth in [Depth::One, Depth::Two] {
        subgraphs::a_replay_that_failed_first_still_resumes_the_subgraph_at_its_pause(
            saver.clone(),
            depth,
        )
        .await;
    }
}

#[tokio::test]
async fn a_replay_that_failed_first_still_resumes_the_subgraph_at_its_pause_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    for depth in [Depth::One, Depth::Two] {
        subgraphs::a_replay_that_failed_first_still_resumes_the_subgraph_at_its_pause(
            saver.clone(),
            depth,
        )
        .await;
    }
    db.drop_schema().await;
}
