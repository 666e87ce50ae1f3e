//! [`SqliteStore`]: the memory store on SQLite.

use sqlx::{Sqlite, SqlitePool};
use tokio::sync::OnceCell;

use super::{Queries, impl_sql_store};
use crate::error::Result;
use crate::migrate::{self, Adapter};
use crate::store::types::StoreConfig;

/// A [`Store`](crate::store::Store) on SQLite, through a user-supplied `sqlx`
/// pool. Each batch is one `BEGIN IMMEDIATE` transaction.
///
/// The table must be migrated (`migrate::up(&pool, &[Adapter::Store], None)`);
/// the first operation checks it once and fails with
/// [`Error::MigrationRequired`](crate::Error::MigrationRequired) otherwise.
///
/// ```no_run
/// # async fn demo() -> weaver::Result<()> {
/// use weaver::migrate::{self, Adapter};
/// use weaver::store::{SqliteStore, Store};
/// let pool = sqlx::SqlitePool::connect("sqlite:weaver.db?mode=rwc").await.unwrap();
/// migrate::up(&pool, &[Adapter::Checkpoint, Adapter::Store], None).await?;
/// let store = SqliteStore::new(pool);
/// store.put(&["users", "u1"], "k", serde_json::json!({"a": 1})).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    queries: Queries,
    config: StoreConfig,
    verified: std::sync::Arc<OnceCell<()>>,
}

impl SqliteStore {
    /// A store on `pool`: BM25 ranking, no expiry.
    pub fn new(pool: SqlitePool) -> Self {
        SqliteStore {
            pool,
            queries: Queries::new(""),
            config: StoreConfig::default(),
            verified: Default::default(),
        }
    }

    /// Uses `config` (embedder, TTL).
    pub fn with_config(mut self, config: StoreConfig) -> Self {
        self.config = config;
        self
    }

    /// The pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Checks once that the table is at the version this build needs.
    async fn ensure_migrated(&self) -> Result<()> {
        self.verified
            .get_or_try_init(|| migrate::verify_migrated(&self.pool, &[Adapter::Store]))
            .await
            .map(|_| ())
    }

    /// Starts a transaction holding the database write lock.
    async fn begin_write(&self, op: &'static str) -> Result<sqlx::Transaction<'static, Sqlite>> {
        crate::checkpoint::sql::sqlite::begin_immediate(&self.pool, op).await
    }

    /// `None`: a read-only batch takes the write lock like any other.
    async fn begin_read(
        &self,
        _op: &'static str,
    ) -> Result<Option<sqlx::Transaction<'static, Sqlite>>> {
        Ok(None)
    }
}

impl_sql_store!(SqliteStore, Sqlite);
