//! [`MongoStore`]: the memory store on MongoDB (feature `mongodb`).
//!
//! One collection, `<prefix>store_items`, one document per item (see
//! `docs.rs` for its fields), a unique index on (namespace, key) and a TTL
//! index on the expiry date; the setup version is recorded in
//! `<prefix>setup`, beside the checkpointer's.

mod docs;
mod items;

use async_trait::async_trait;
use mongodb::bson::{Document, doc};
use mongodb::options::IndexOptions;
use mongodb::{Client, Collection, Database, IndexModel};

use super::contract::Store;
use super::layers::{Layered, backend, backend_mut, layered};
use super::seal::Sealing;
use super::types::{Op, OpResult, StoreConfig};
use crate::error::{Error, Result};
use crate::mongo::{record_setup_version, setup_version, storage};

/// How long past an item's expiry the server's TTL monitor may delete it.
/// Reads hide an expired item at once; the grace only keeps a server whose
/// clock runs ahead of the writers' from deleting live items.
const TTL_GRACE_SECS: i64 = 60;

/// A [`Store`] on MongoDB 7 or later, through the official `mongodb`
/// driver: each batch is one multi-document transaction.
///
/// Built from a [`mongodb::Client`], a database name and a collection
/// prefix ([`MongoStore::new`]), or from a URI ([`MongoStore::connect`]).
/// Run [`MongoStore::setup`] once per database and prefix; a store on a
/// database where it has not run fails with
/// [`Error::MigrationRequired`](crate::Error::MigrationRequired) naming it.
///
/// A batch whose transaction meets a write conflict with a concurrent one
/// (the server labels it transient) runs again, whole. Searches push the
/// namespace prefix, expiry and, for a search without query or filter, the
/// order and page into the query; equality and range conditions of a
/// filter are pushed down as a superset of the matches and checked again
/// on every item read, so the answer is the other stores' answer. Expired
/// items are hidden from every read at once and deleted lazily by a get,
/// by [`Store::sweep`], and by the server's TTL index a minute after their
/// expiry.
///
/// ```no_run
/// # async fn run() -> weaver::Result<()> {
/// use weaver::store::{MongoStore, Store};
/// let store = MongoStore::connect("mongodb://127.0.0.1:27017", "app", "weaver_").await?;
/// store.setup().await?;
/// store.put(&["users", "u1"], "k", serde_json::json!({"a": 1})).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MongoStore {
    inner: Layered<MongoItems>,
}

/// The MongoDB backend inside the store's layers.
#[derive(Clone)]
pub(crate) struct MongoItems {
    client: Client,
    db: Database,
    prefix: String,
    config: StoreConfig,
    sealing: Sealing,
    verified: std::sync::Arc<tokio::sync::OnceCell<()>>,
}

impl std::fmt::Debug for MongoItems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MongoStore")
            .field("database", &self.db.name())
            .field("prefix", &self.prefix)
            .field("config", &self.config)
            .field("sealing", &self.sealing)
            .finish_non_exhaustive()
    }
}

impl MongoItems {
    fn items(&self) -> Collection<Document> {
        self.db.collection(&format!("{}store_items", self.prefix))
    }

    fn setup_collection(&self) -> Collection<Document> {
        self.db.collection(&format!("{}setup", self.prefix))
    }

    /// Fails with [`Error::MigrationRequired`] unless the store's setup ran
    /// on this database and prefix (checked once per store).
    async fn verify(&self) -> Result<()> {
        self.verified
            .get_or_try_init(|| async {
                let found = setup_version(&self.setup_collection(), "store").await?;
                if found == MongoStore::SETUP_VERSION {
                    return Ok(());
                }
                Err(Error::MigrationRequired {
                    adapter: "mongo store".into(),
                    found,
                    required: MongoStore::SETUP_VERSION,
                    hint: format!(
                        "run MongoStore::setup() on database `{}` with prefix `{}`",
                        self.db.name(),
                        self.prefix
                    ),
                })
            })
            .await
            .map(|_| ())
    }
}

impl MongoStore {
    /// The setup version this build needs ([`MongoStore::setup`] records
    /// it).
    pub const SETUP_VERSION: u32 = 1;

    /// A store on database `database` of `client`, its items in the
    /// collection `<prefix>store_items`: BM25 ranking, no expiry.
    ///
    /// ```no_run
    /// # async fn run() -> weaver::Result<()> {
    /// let client = mongodb::Client::with_uri_str("mongodb://127.0.0.1:27017").await.unwrap();
    /// let store = weaver::store::MongoStore::new(client, "app", "weaver_");
    /// store.setup().await?;
    /// # Ok(()) }
    /// ```
    pub fn new(client: Client, database: &str, prefix: &str) -> Self {
        MongoStore {
            inner: layered(MongoItems {
                db: client.database(database),
                client,
                prefix: prefix.to_owned(),
                config: StoreConfig::default(),
                sealing: Sealing::default(),
                verified: Default::default(),
            }),
        }
    }

    /// A store connecting to `uri` (see [`MongoStore::new`]).
    ///
    /// ```no_run
    /// # async fn run() -> weaver::Result<()> {
    /// let store = weaver::store::MongoStore::connect("mongodb://127.0.0.1:27017", "app", "w_").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(uri: &str, database: &str, prefix: &str) -> Result<Self> {
        let client = Client::with_uri_str(uri)
            .await
            .map_err(storage("connect"))?;
        Ok(MongoStore::new(client, database, prefix))
    }

    /// Uses `config` (embedder, TTL).
    ///
    /// ```no_run
    /// # async fn run() -> weaver::Result<()> {
    /// use std::time::Duration;
    /// use weaver::store::{MongoStore, StoreConfig};
    /// let store = MongoStore::connect("mongodb://127.0.0.1:27017", "app", "w_")
    ///     .await?
    ///     .with_config(StoreConfig::new().default_ttl(Duration::from_secs(3600)));
    /// # Ok(()) }
    /// ```
    pub fn with_config(mut self, config: StoreConfig) -> Self {
        backend_mut(&mut self.inner).config = config;
        self
    }

    /// Encrypts every item's value, indexed text and embedding with
    /// `codec`'s keys, bound to the item's namespace, key and part, as
    /// `SqliteStore::with_encryption` does. Namespaces, keys and times stay
    /// plain; a sealed item keeps no BSON copy of its value, so its
    /// filters are checked on the opened items only.
    ///
    /// ```no_run
    /// # async fn run() -> weaver::Result<()> {
    /// use weaver::codec::{EncryptedCodec, EncryptionKey};
    /// let codec = EncryptedCodec::json([EncryptionKey::new("2026-11", [7; 32])?])?;
    /// let store = weaver::store::MongoStore::connect("mongodb://127.0.0.1:27017", "app", "w_")
    ///     .await?
    ///     .with_encryption(codec);
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub fn with_encryption(mut self, codec: crate::codec::EncryptedCodec) -> Self {
        backend_mut(&mut self.inner).sealing = Sealing::encrypted(codec);
        self
    }

    /// The database this store writes to.
    ///
    /// ```no_run
    /// # async fn run() -> weaver::Result<()> {
    /// let store = weaver::store::MongoStore::connect("mongodb://127.0.0.1:27017", "app", "w_").await?;
    /// assert_eq!(store.database().name(), "app");
    /// # Ok(()) }
    /// ```
    pub fn database(&self) -> &Database {
        &backend(&self.inner).db
    }

    /// Creates the items collection's indexes — unique on (namespace, key),
    /// and the TTL index on the expiry date — and records
    /// [`SETUP_VERSION`](MongoStore::SETUP_VERSION) in `<prefix>setup`.
    /// Idempotent: running it again changes nothing. A database set up by
    /// a newer build is
    /// [`Error::MigrationRefused`](crate::Error::MigrationRefused).
    ///
    /// ```no_run
    /// # async fn run() -> weaver::Result<()> {
    /// let store = weaver::store::MongoStore::connect("mongodb://127.0.0.1:27017", "app", "w_").await?;
    /// store.setup().await?;
    /// store.setup().await?; // again: nothing to do
    /// # Ok(()) }
    /// ```
    pub async fn setup(&self) -> Result<()> {
        let items = backend(&self.inner);
        let found = setup_version(&items.setup_collection(), "store").await?;
        if found > MongoStore::SETUP_VERSION {
            return Err(Error::MigrationRefused {
                adapter: "mongo store".into(),
                version: MongoStore::SETUP_VERSION,
                reason: format!("the database is at setup version {found}, newer than this build"),
            });
        }
        let unique = IndexModel::builder()
            .keys(doc! { "ns": 1, "key": 1 })
            .options(IndexOptions::builder().unique(true).build())
            .build();
        let ttl = IndexModel::builder()
            .keys(doc! { "expire_at": 1 })
            .options(
                IndexOptions::builder()
                    .expire_after(std::time::Duration::from_secs(TTL_GRACE_SECS as u64))
                    .build(),
            )
            .build();
        items
            .items()
            .create_indexes([unique, ttl])
            .await
            .map_err(storage("store setup"))?;
        record_setup_version(
            &items.setup_collection(),
            "store",
            MongoStore::SETUP_VERSION,
        )
        .await
    }
}

#[async_trait]
impl Store for MongoStore {
    async fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        self.inner.batch(ops).await
    }

    async fn sweep(&self) -> Result<u64> {
        self.inner.sweep().await
    }
}
