//! What nodes stream (custom values, message chunks) is never stored, on
//! SQLite and PostgreSQL: no checkpoint, pending write or metadata holds it,
//! and a task replayed from its stored writes does not stream it again.

use std::sync::Arc;

use weaver::Saver;
use weaver_tests::streamed::streamed_events_are_never_stored;

use crate::common::{PgDb, SqliteDb};

#[tokio::test]
async fn streamed_events_are_never_stored_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    streamed_events_are_never_stored(saver).await;
}

#[tokio::test]
async fn streamed_events_are_never_stored_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    streamed_events_are_never_stored(saver).await;
    db.drop_schema().await;
}
