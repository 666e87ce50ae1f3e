//! Journaled side effects on a SQLite file and on PostgreSQL: a second
//! saver on its own pool stands for another process, and a worker killed
//! with SIGKILL after its effect was journaled is a real child process.

use std::sync::Arc;

use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::SqlitePoolOptions;
use weaver::{Durability, Saver};
use weaver_tests::effects;

use crate::common::{PgDb, SqliteDb, pg_url};

async fn sqlite_pair(db: &SqliteDb) -> (Arc<dyn Saver>, Arc<dyn Saver>) {
    let a = db.saver().await;
    let b = db
        .saver_on(
            SqlitePoolOptions::new().max_connections(4),
            db.connect_options(),
        )
        .await;
    (Arc::new(a), Arc::new(b))
}

async fn pg_pair(db: &PgDb) -> (Arc<dyn Saver>, Arc<dyn Saver>) {
    let a = db.saver().await;
    let options = pg_url().parse().unwrap();
    let b = db
        .saver_on(PgPoolOptions::new().max_connections(4), options)
        .await;
    (Arc::new(a), Arc::new(b))
}

const DURABILITIES: [Durability; 3] = [Durability::Sync, Durability::Async, Durability::Exit];

#[tokio::test]
async fn an_effect_before_an_interrupt_runs_once_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, b) = sqlite_pair(&db).await;
    for (i, durability) in DURABILITIES.into_iter().enumerate() {
        let thread = format!("t{i}");
        effects::an_effect_before_an_interrupt_runs_once(a.clone(), b.clone(), &thread, durability)
            .await;
    }
}

#[tokio::test]
async fn an_effect_before_an_interrupt_runs_once_on_postgres() {
    let db = PgDb::new().await;
    let (a, b) = pg_pair(&db).await;
    for (i, durability) in DURABILITIES.into_iter().enumerate() {
        let thread = format!("t{i}");
        effects::an_effect_before_an_interrupt_runs_once(a.clone(), b.clone(), &thread, durability)
            .await;
    }
    db.drop_schema().await;
}

#[tokio::test]
async fn a_retried_node_runs_its_effect_once_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, b) = sqlite_pair(&db).await;
    effects::a_retried_node_runs_its_effect_once(a, b, "t").await;
}

#[tokio::test]
async fn a_retried_node_runs_its_effect_once_on_postgres() {
    let db = PgDb::new().await;
    let (a, b) = pg_pair(&db).await;
    effects::a_retried_node_runs_its_effect_once(a, b, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn a_run_cut_off_after_its_effect_is_finished_without_it_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, b) = sqlite_pair(&db).await;
    effects::a_run_cut_off_after_its_effect_is_finished_without_it(a, b, "t").await;
}

#[tokio::test]
async fn a_run_cut_off_after_its_effect_is_finished_without_it_on_postgres() {
    let db = PgDb::new().await;
    let (a, b) = pg_pair(&db).await;
    effects::a_run_cut_off_after_its_effect_is_finished_without_it(a, b, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn a_killed_worker_is_finished_by_another_process_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let url = format!("sqlite://{}", db.path.display());
    let bin = env!("CARGO_BIN_EXE_weaver-effects");
    effects::a_killed_worker_is_finished_by_another_process(bin, &url, "-", saver).await;
}

#[tokio::test]
async fn a_killed_worker_is_finished_by_another_process_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let bin = env!("CARGO_BIN_EXE_weaver-effects");
    effects::a_killed_worker_is_finished_by_another_process(bin, &pg_url(), &db.schema, saver)
        .await;
    db.drop_schema().await;
}

#[tokio::test]
async fn forks_run_the_effect_again_unless_it_has_an_explicit_key_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, _) = sqlite_pair(&db).await;
    effects::a_fork_from_before_the_node_runs_the_effect_again(a.clone(), "plain").await;
    effects::with_an_explicit_key_a_fork_does_not(a, "keyed").await;
}

#[tokio::test]
async fn forks_run_the_effect_again_unless_it_has_an_explicit_key_on_postgres() {
    let db = PgDb::new().await;
    let (a, _) = pg_pair(&db).await;
    effects::a_fork_from_before_the_node_runs_the_effect_again(a.clone(), "plain").await;
    effects::with_an_explicit_key_a_fork_does_not(a, "keyed").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn effect_errors_are_typed_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, _) = sqlite_pair(&db).await;
    effects::effects_in_another_order_are_a_typed_error(a.clone(), "order").await;
    effects::unstorable_and_undecodable_results_are_typed_errors(a, "results").await;
}

#[tokio::test]
async fn effect_errors_are_typed_on_postgres() {
    let db = PgDb::new().await;
    let (a, _) = pg_pair(&db).await;
    effects::effects_in_another_order_are_a_typed_error(a.clone(), "order").await;
    effects::unstorable_and_undecodable_results_are_typed_errors(a, "results").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn the_journal_is_copied_and_deleted_with_its_thread_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, _) = sqlite_pair(&db).await;
    effects::the_journal_is_copied_and_deleted_with_its_thread(a, "t").await;
}

#[tokio::test]
async fn the_journal_is_copied_and_deleted_with_its_thread_on_postgres() {
    let db = PgDb::new().await;
    let (a, _) = pg_pair(&db).await;
    effects::the_journal_is_copied_and_deleted_with_its_thread(a, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn an_effect_in_a_subgraph_runs_once_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, _) = sqlite_pair(&db).await;
    effects::an_effect_in_a_subgraph_runs_once(a, "t").await;
}

#[tokio::test]
async fn an_effect_in_a_subgraph_runs_once_on_postgres() {
    let db = PgDb::new().await;
    let (a, _) = pg_pair(&db).await;
    effects::an_effect_in_a_subgraph_runs_once(a, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn a_damaged_journal_entry_is_a_decode_error_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, _) = sqlite_pair(&db).await;
    effects::a_damaged_journal_entry_is_a_decode_error(a, "t").await;
}

#[tokio::test]
async fn a_damaged_journal_entry_is_a_decode_error_on_postgres() {
    let db = PgDb::new().await;
    let (a, _) = pg_pair(&db).await;
    effects::a_damaged_journal_entry_is_a_decode_error(a, "t").await;
    db.drop_schema().await;
}
