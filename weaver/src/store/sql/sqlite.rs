//! [`SqliteStore`]: the memory store on SQLite.

use async_trait::async_trait;
use sqlx::SqlitePool;

use super::SqlStore;
use super::dialect::SqliteDialect;
use crate::error::Result;
use crate::store::Store;
use crate::store::layers::{Layered, backend, backend_mut, layered};
use crate::store::types::{Op, OpResult, StoreConfig};

/// A [`Store`] on SQLite, through a user-supplied `sqlx` pool. Each batch
/// is one transaction: `BEGIN IMMEDIATE` (the database's write lock, so
/// writing batches run one at a time) for a batch that writes, `BEGIN DEFERRED` (one snapshot, no lock: in WAL mode it reads
/// while a writing batch holds the lock) for one that only reads (gets and
/// searches that restart no TTL, namespace listings); a read-only batch
/// whose get meets an expired item runs again as a writing batch, which
/// deletes it.
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
    inner: Layered<SqlStore<SqliteDialect>>,
}

impl SqliteStore {
    /// A store on `pool`: BM25 ranking, no expiry.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use serde_json::json;
    /// use weaver::migrate::{self, Adapter};
    /// use weaver::store::{Search, SqliteStore, Store};
    ///
    /// let file = std::env::temp_dir().join(format!("weaver-doc-store-{}.db", std::process::id()));
    /// let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=rwc", file.display())).await.unwrap();
    /// migrate::up(&pool, &[Adapter::Store], None).await?;
    /// let store = SqliteStore::new(pool.clone());
    /// store.put(&["users", "u1"], "food", json!({"memory": "likes pizza"})).await?;
    /// // Another store on the same database sees the item.
    /// let other = SqliteStore::new(pool);
    /// assert_eq!(other.search(&["users"], Search::query("pizza")).await?.len(), 1);
    /// # std::fs::remove_file(&file).ok();
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new(pool: SqlitePool) -> Self {
        SqliteStore {
            inner: layered(SqlStore::new(pool)),
        }
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
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use serde_json::json;
    /// use weaver::codec::{EncryptedCodec, EncryptionKey};
    /// use weaver::migrate::{self, Adapter};
    /// use weaver::store::{Search, SqliteStore, Store};
    ///
    /// let pool = sqlx::sqlite::SqlitePoolOptions::new()
    ///     .max_connections(1)
    ///     .connect("sqlite::memory:")
    ///     .await
    ///     .unwrap();
    /// migrate::up(&pool, &[Adapter::Store], None).await?;
    /// let codec = EncryptedCodec::json([EncryptionKey::new("2026-11", [7; 32])?])?;
    /// let store = SqliteStore::new(pool.clone()).with_encryption(codec);
    /// store.put(&["users", "u1"], "food", json!({"memory": "likes pizza"})).await?;
    /// let found = store.search(&["users"], Search::query("pizza")).await?;
    /// assert_eq!(found[0].value, json!({"memory": "likes pizza"}));
    ///
    /// let stored: String = sqlx::query_scalar("SELECT value FROM weaver_store_items")
    ///     .fetch_one(&pool)
    ///     .await
    ///     .unwrap();
    /// assert!(!stored.contains("pizza"));
    /// // Without the key, the item does not decode.
    /// let plain = SqliteStore::new(pool);
    /// assert!(matches!(plain.get(&["users", "u1"], "food").await, Err(weaver::Error::Decrypt { .. })));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub fn with_encryption(mut self, codec: crate::codec::EncryptedCodec) -> Self {
        backend_mut(&mut self.inner).set_sealing(crate::store::seal::Sealing::encrypted(codec));
        self
    }

    /// The pool.
    pub fn pool(&self) -> &SqlitePool {
        backend(&self.inner).pool()
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        self.inner.batch(ops).await
    }

    async fn sweep(&self) -> Result<u64> {
        self.inner.sweep().await
    }
}
