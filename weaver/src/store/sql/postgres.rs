//! [`PostgresStore`]: the memory store on PostgreSQL.

use async_trait::async_trait;
use sqlx::PgPool;

use super::SqlStore;
use super::dialect::PostgresDialect;
use crate::error::Result;
use crate::migrate::postgres::{checked_schema, table_prefix};
use crate::sql::Pooling;
use crate::store::Store;
use crate::store::layers::{Layered, backend, backend_mut, layered};
use crate::store::types::{Op, OpResult, StoreConfig};

/// A [`Store`] on PostgreSQL, through a user-supplied `sqlx` pool. Each
/// batch is one transaction.
///
/// The table must be migrated ([`crate::migrate::up`] with
/// [`Adapter::Store`](crate::migrate::Adapter::Store), with a
/// [`PgSchema`](crate::migrate::PgSchema) when using
/// [`with_prefix`](PostgresStore::with_prefix)); the first operation checks
/// it once and fails with [`Error::MigrationRequired`](crate::Error::MigrationRequired)
/// otherwise.
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
/// Behind a pooler in transaction mode (PgBouncer, Supabase, Neon, RDS
/// Proxy) build it with [`pooler_safe(true)`](PostgresStore::pooler_safe).
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
    inner: Layered<SqlStore<PostgresDialect>>,
}

impl PostgresStore {
    /// A store on `pool`, with its table in the connection's `search_path`:
    /// BM25 ranking, no expiry.
    ///
    /// ```no_run
    /// // Needs a PostgreSQL server, so it is only compiled here.
    /// # async fn demo() -> weaver::Result<()> {
    /// use weaver::migrate::{self, Adapter};
    /// use weaver::store::{PostgresStore, Store};
    ///
    /// let pool = sqlx::PgPool::connect("postgres://app@localhost/app").await.unwrap();
    /// migrate::up(&pool, &[Adapter::Store], None).await?;
    /// let store = PostgresStore::new(pool);
    /// store.put(&["users", "u1"], "food", serde_json::json!({"memory": "likes pizza"})).await?;
    /// # Ok(()) }
    /// ```
    pub fn new(pool: PgPool) -> Self {
        PostgresStore {
            inner: layered(SqlStore::new(pool)),
        }
    }

    /// Uses the table in PostgreSQL schema `schema` (one per tenant; migrate
    /// it with [`PgSchema`](crate::migrate::PgSchema)). `schema` must be a plain identifier, else
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// ```no_run
    /// // Needs a PostgreSQL server, so it is only compiled here.
    /// # async fn demo(pool: sqlx::PgPool) -> weaver::Result<()> {
    /// use weaver::migrate::{self, Adapter, PgSchema};
    /// use weaver::store::PostgresStore;
    ///
    /// migrate::up(&PgSchema::new(&pool, "tenant_a")?, &[Adapter::Store], None).await?;
    /// let store = PostgresStore::new(pool.clone()).with_prefix("tenant_a")?;
    /// assert!(PostgresStore::new(pool).with_prefix("not a name").is_err());
    /// # Ok(()) }
    /// ```
    pub fn with_prefix(mut self, schema: &str) -> Result<Self> {
        let schema = checked_schema(schema)?;
        let prefix = table_prefix(Some(&schema));
        backend_mut(&mut self.inner).set_schema(schema, &prefix);
        Ok(self)
    }

    /// Makes the store safe behind a pooler in transaction mode (PgBouncer
    /// with `pool_mode = transaction`, Supabase's and Neon's poolers, RDS
    /// Proxy): with `true` every statement is sent unnamed, never as a
    /// named prepared statement that the next server session would lack or
    /// already hold. Each batch is one transaction in either mode, and its
    /// write lock is transaction-scoped, so nothing else is kept on a
    /// session. `false` (the default) prepares each statement once per
    /// connection. A pooler drops the client's `search_path`: name the
    /// schema with [`with_prefix`](PostgresStore::with_prefix).
    ///
    /// ```no_run
    /// # async fn demo(pool: sqlx::PgPool) -> weaver::Result<()> {
    /// use weaver::store::{PostgresStore, Store};
    /// let store = PostgresStore::new(pool).with_prefix("tenant_a")?.pooler_safe(true);
    /// store.put(&["users"], "k", serde_json::json!({"a": 1})).await?;
    /// # Ok(()) }
    /// ```
    pub fn pooler_safe(mut self, on: bool) -> Self {
        let pooling = if on {
            Pooling::Transaction
        } else {
            Pooling::Session
        };
        backend_mut(&mut self.inner).set_pooling(pooling);
        self
    }

    /// Uses `config` (embedder, TTL).
    pub fn with_config(mut self, config: StoreConfig) -> Self {
        backend_mut(&mut self.inner).set_config(config);
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
    /// encryption is [`Error::Decrypt`](crate::Error::Decrypt) (a store
    /// without encryption meeting a sealed item says so too). To encrypt
    /// items stored before, read them through a store without encryption
    /// and put them through this one.
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub fn with_encryption(mut self, codec: crate::codec::EncryptedCodec) -> Self {
        backend_mut(&mut self.inner).set_sealing(crate::store::seal::Sealing::encrypted(codec));
        self
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        backend(&self.inner).pool()
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        self.inner.batch(ops).await
    }

    async fn sweep(&self) -> Result<u64> {
        self.inner.sweep().await
    }
}
