//! Stored checkpoints upgraded in place on a SQLite file, on PostgreSQL
//! (plain and encrypted) and on MongoDB (the shared suite in
//! `weaver_tests::upgrades`).

use std::sync::Arc;

use weaver::Saver;
use weaver::codec::{EncryptedCodec, EncryptionKey};
use weaver::mongo::MongoSaver;
use weaver_tests::mongo::MongoDb;
use weaver_tests::upgrades;

use crate::common::{PgDb, SqliteDb};

fn codec() -> EncryptedCodec {
    EncryptedCodec::json([EncryptionKey::new("k1", [5; 32]).unwrap()]).unwrap()
}

async fn mongo(db: &MongoDb) -> Arc<dyn Saver> {
    let saver = MongoSaver::new(db.client.clone(), &db.name, "w_");
    saver.setup().await.unwrap();
    Arc::new(saver)
}

#[tokio::test]
async fn an_old_thread_is_upgraded_in_place_on_sqlite() {
    let db = SqliteDb::new().await;
    upgrades::an_old_thread_is_upgraded_in_place(Arc::new(db.saver().await), "t").await;
}

#[tokio::test]
async fn an_old_thread_is_upgraded_in_place_on_postgres() {
    let db = PgDb::new().await;
    upgrades::an_old_thread_is_upgraded_in_place(Arc::new(db.saver().await), "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn pending_writes_are_upgraded_on_sqlite() {
    let db = SqliteDb::new().await;
    upgrades::pending_writes_are_upgraded(Arc::new(db.saver().await), "t").await;
}

#[tokio::test]
async fn pending_writes_are_upgraded_on_postgres() {
    let db = PgDb::new().await;
    upgrades::pending_writes_are_upgraded(Arc::new(db.saver().await), "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn a_failed_batch_writes_nothing_on_sqlite() {
    let db = SqliteDb::new().await;
    upgrades::a_failed_batch_writes_nothing(Arc::new(db.saver().await), "t").await;
}

#[tokio::test]
async fn a_failed_batch_writes_nothing_on_postgres() {
    let db = PgDb::new().await;
    upgrades::a_failed_batch_writes_nothing(Arc::new(db.saver().await), "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn an_interrupted_upgrade_resumes_from_its_cursor_on_sqlite() {
    let db = SqliteDb::new().await;
    upgrades::an_interrupted_upgrade_resumes_from_its_cursor(Arc::new(db.saver().await), "t").await;
}

#[tokio::test]
async fn an_interrupted_upgrade_resumes_from_its_cursor_on_postgres() {
    let db = PgDb::new().await;
    upgrades::an_interrupted_upgrade_resumes_from_its_cursor(Arc::new(db.saver().await), "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn subgraph_namespaces_are_upgraded_only_when_named_on_sqlite() {
    let db = SqliteDb::new().await;
    upgrades::subgraph_namespaces_are_upgraded_only_when_named(Arc::new(db.saver().await), "t")
        .await;
}

#[tokio::test]
async fn subgraph_namespaces_are_upgraded_only_when_named_on_postgres() {
    let db = PgDb::new().await;
    upgrades::subgraph_namespaces_are_upgraded_only_when_named(Arc::new(db.saver().await), "t")
        .await;
    db.drop_schema().await;
}

#[tokio::test]
async fn scans_find_bad_writes_and_subgraph_checkpoints_on_sqlite() {
    let db = SqliteDb::new().await;
    upgrades::scans_find_bad_writes_and_subgraph_checkpoints(Arc::new(db.saver().await), "t").await;
}

#[tokio::test]
async fn scans_find_bad_writes_and_subgraph_checkpoints_on_postgres() {
    let db = PgDb::new().await;
    upgrades::scans_find_bad_writes_and_subgraph_checkpoints(Arc::new(db.saver().await), "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn an_encrypted_thread_is_upgraded_in_place_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver = db.saver().await.with_codec(codec());
    upgrades::an_old_thread_is_upgraded_in_place(Arc::new(saver), "t").await;
}

#[tokio::test]
async fn an_encrypted_thread_is_upgraded_in_place_on_postgres() {
    let db = PgDb::new().await;
    let saver = db.saver().await.with_codec(codec());
    upgrades::an_old_thread_is_upgraded_in_place(Arc::new(saver), "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn an_old_thread_is_upgraded_in_place_on_mongodb() {
    let db = MongoDb::new().await;
    upgrades::an_old_thread_is_upgraded_in_place(mongo(&db).await, "t").await;
    db.drop_db().await;
}

#[tokio::test]
async fn pending_writes_are_upgraded_on_mongodb() {
    let db = MongoDb::new().await;
    upgrades::pending_writes_are_upgraded(mongo(&db).await, "t").await;
    db.drop_db().await;
}

#[tokio::test]
async fn a_failed_batch_writes_nothing_on_mongodb() {
    let db = MongoDb::new().await;
    upgrades::a_failed_batch_writes_nothing(mongo(&db).await, "t").await;
    db.drop_db().await;
}

#[tokio::test]
async fn a_write_stored_during_an_upgrade_is_kept_on_every_database() {
    let sqlite = SqliteDb::new().await;
    upgrades::a_write_stored_during_an_upgrade_is_kept(Arc::new(sqlite.saver().await), "t").await;
    let pg = PgDb::new().await;
    upgrades::a_write_stored_during_an_upgrade_is_kept(Arc::new(pg.saver().await), "t").await;
    pg.drop_schema().await;
    let mongo_db = MongoDb::new().await;
    upgrades::a_write_stored_during_an_upgrade_is_kept(mongo(&mongo_db).await, "t").await;
    mongo_db.drop_db().await;
}
