//! [`PostgresStore`]: the memory store on PostgreSQL.

use sqlx::{PgPool, Postgres};
use tokio::sync::OnceCell;

use super::{Queries, Sealing, impl_sql_store};
use crate::error::{Error, Result};
use crate::migrate::postgres::{checked_schema, table_prefix};
use crate::migrate::{self, Adapter, PgSchema};
use crate::store::types::StoreConfig;

/// A [`Store`](crate::store::Store) on PostgreSQL, through a user-supplied
/// `sqlx` pool. Each batch is one transaction.
///
/// The table must be migrated ([`crate::migrate::up`] with
/// [`Adapter::Store`], with a [`PgSchema`] when using
/// [`with_prefix`](PostgresStore::with_prefix)); the first operation checks
/// it once and fails with
/// [`Error::MigrationRequired`] otherwise.
///
/// Batches that write on one store table run one at a time (a
/// transaction-scoped advisory lock), as on SQLite: each is atomic, sees one
/// consistent state, and concurrent batches never deadlock. A batch made
/// only of reads — gets and searches that do not restart TTLs, namespace
/// listings — takes no lock: it runs in one `REPEATABLE READ, READ ONLY`
/// transaction, so it proceeds while a writing batch holds the lock and
/// still sees one snapshot, all of a concurrent batch or none of it. A get
/// that meets an expired item deletes it, which is a write: a read-only
/// batch that meets one runs again as a writing batch.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> weaver::Result<()> {
/// use weaver::migrate::{self, Adapter};
/// use weaver::store::{PostgresStore, Store};
/// migrate::up(&pool, &[Adapter::Store], None).await?;
/// let store = PostgresStore::new(pool);
/// store.put(&["users", "u1"], "k", serde_json::json!({"a": 1})).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    schema: Option<String>,
    queries: Queries,
    config: StoreConfig,
    sealing: Sealing,
    verified: std::sync::Arc<OnceCell<()>>,
}

impl PostgresStore {
    /// A store on `pool`, with its table in the connection's `search_path`:
    /// BM25 ranking, no expiry.
    pub fn new(pool: PgPool) -> Self {
        PostgresStore {
            pool,
            schema: None,
            queries: Queries::new(""),
            config: StoreConfig::default(),
            sealing: Sealing::default(),
            verified: Default::default(),
        }
    }

    /// Uses the table in PostgreSQL schema `schema` (one per tenant; migrate
    /// it with [`PgSchema`]). `schema` must be a plain identifier, else
    /// [`Error::InvalidArgument`].
    pub fn with_prefix(mut self, schema: &str) -> Result<Self> {
        let schema = checked_schema(schema)?;
        self.queries = Queries::new(&table_prefix(Some(&schema)));
        self.schema = Some(schema);
        self.verified = Default::default();
        Ok(self)
    }

    /// Uses `config` (embedder, TTL).
    pub fn with_config(mut self, config: StoreConfig) -> Self {
        self.config = config;
        self
    }

    /// Encrypts every item's value, indexed text and embedding with
    /// `codec`'s keys (its newest key seals; any of them opens), each bound
    /// to the item's namespace, key and part: a sealed payload copied to
    /// another item, or to another column, does not decrypt. Namespaces,
    /// keys and times stay plain, since the database indexes and expires
    /// items by them. Search, filters and ranking work as before: they run
    /// on the decrypted items. Only `codec`'s keys are used: an item's
    /// value is sealed as JSON whatever codec `codec` wraps for checkpoints.
    ///
    /// A wrong key, a tampered or moved payload, or an item stored without
    /// encryption is [`Error::Decrypt`] (a store
    /// without encryption meeting a sealed item says so too). To encrypt
    /// items stored before, read them through a store without encryption
    /// and put them through this one.
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub fn with_encryption(mut self, codec: crate::codec::EncryptedCodec) -> Self {
        self.sealing = Sealing::encrypted(codec);
        self
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Checks once that the table is at the version this build needs.
    async fn ensure_migrated(&self) -> Result<()> {
        self.verified
            .get_or_try_init(|| async {
                let target = match &self.schema {
                    Some(s) => PgSchema::new(&self.pool, s)?,
                    None => PgSchema::search_path(&self.pool),
                };
                migrate::verify_migrated(&target, &[Adapter::Store]).await
            })
            .await
            .map(|_| ())
    }

    /// Starts a writing batch's transaction, holding the store's lock:
    /// writing batches run one at a time, as SQLite's `BEGIN IMMEDIATE`
    /// makes them there. So two batches that write the same items in
    /// opposite orders never deadlock, and a batch's reads see one state,
    /// never half of another batch.
    async fn begin_write(&self, op: &'static str) -> Result<sqlx::Transaction<'static, Postgres>> {
        let mut tx = self.pool.begin().await.map_err(|e| Error::storage(op, e))?;
        sqlx::query(
            "SELECT pg_advisory_xact_lock(hashtext('weaver.store:' || COALESCE(CAST($1 AS TEXT), CAST(current_schema() AS TEXT), '')))",
        )
        .bind(self.schema.as_deref())
        .execute(&mut *tx)
        .await
        .map_err(|e| Error::storage(op, e))?;
        Ok(tx)
    }

    /// Starts a read-only batch's transaction without the store's lock: one
    /// snapshot (`REPEATABLE READ`) for all its statements, so it never sees
    /// half of a writing batch that commits meanwhile; `READ ONLY`, so the
    /// database refuses a write that slipped in.
    async fn begin_read(&self, op: &'static str) -> Result<sqlx::Transaction<'static, Postgres>> {
        let tx = self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .await
            .map_err(|e| Error::storage(op, e))?;
        Ok(tx)
    }
}

impl_sql_store!(PostgresStore, Postgres);
