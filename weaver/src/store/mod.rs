//! Memory stores: namespaced application data shared across threads.
//!
//! A checkpointer ([`Saver`](crate::Saver)) keeps one thread's execution
//! history; a [`Store`] keeps what should outlive a thread — user
//! preferences, extracted facts, profile data — under a *namespace* such as
//! `["users", "user-123", "memories"]`, one JSON value per key.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use serde_json::json;
//! use weaver::store::{InMemoryStore, Search, Store};
//!
//! let store = InMemoryStore::new();
//! let stored = store
//!     .put(&["users", "user-123", "memories"], "food", json!({"memory": "User likes pizza"}))
//!     .await?;
//! let items = store
//!     .search(&["users", "user-123"], Search::query("pizza").limit(3))
//!     .await?;
//! assert_eq!(items[0].key, "food");
//! assert_eq!(items[0].updated_at, stored.updated_at);
//! assert!(items[0].score.is_some());
//! # Ok::<(), weaver::Error>(()) }).unwrap();
//! ```
//!
//! # Namespaces
//!
//! A namespace is a non-empty list of labels. A label is non-empty and holds
//! no [`NAMESPACE_SEPARATOR`] (`.`) and no NUL character, or the call is
//! [`Error::InvalidArgument`](crate::Error::InvalidArgument); a label longer
//! than [`MAX_LABEL_BYTES`](limits::MAX_LABEL_BYTES) (or a namespace deeper
//! than [`MAX_NAMESPACE_DEPTH`](limits::MAX_NAMESPACE_DEPTH)) is
//! [`Error::LimitExceeded`](crate::Error::LimitExceeded). A search prefix
//! matches a namespace when it equals the namespace's first labels, label by
//! label: `["users", "u1"]` matches `["users", "u1", "memories"]` but never
//! `["users", "u10"]`. The empty prefix matches everything.
//!
//! # Ordering
//!
//! Every backend orders results the same way, so they agree on the
//! conformance suite:
//! * a search without a query: by namespace (its dotted form `a.b.c`,
//!   compared byte-wise), then key (byte-wise);
//! * a search with a query: by score, highest first, items without a score
//!   (not indexed) last, ties by namespace then key as above;
//! * namespaces (`list_namespaces`): by dotted form, byte-wise.
//!
//! # Ranking
//!
//! With an [`Embedder`] configured ([`StoreConfig::embedder`]), `put` embeds
//! the item's indexed text and stores the vector with the item; a query is
//! embedded and items are scored by cosine similarity. Without one, a query is
//! ranked by BM25 over the indexed text (see [`bm25`]), so search works out of
//! the box. [`PutOptions::index`] chooses the indexed fields.
//!
//! # Time to live
//!
//! An item put with a TTL ([`PutOptions::ttl`], or the store's
//! [`StoreConfig::default_ttl`]) expires that long after it was written:
//! expired items are invisible to every read, deleted lazily when a `get`
//! meets them (the in-memory store also deletes those a filtered or ranked
//! search or a listing meets; a plain page of a search only skips them),
//! and in bulk by [`Store::sweep`] (or [`spawn_sweeper`]). With
//! refresh-on-read ([`StoreConfig::refresh_on_read`], or per call), a read
//! restarts the item's TTL.
//!
//! # Layers
//!
//! What every store does the same way is a layer around its backend, not a
//! branch inside it: each batch and sweep runs in a `weaver.store` tracing
//! span (the op, its namespace, the op count, the time taken), and a batch
//! over a [`limits`] ceiling is refused before the backend sees it. A
//! backend only stores; [`InMemoryStore`], `SqliteStore`, `PostgresStore`
//! and `MongoStore` are each their backend inside the same layers.
//! Encryption cannot sit outside a backend (a search filters and ranks the
//! opened items inside the backend's transaction or lock), so every backend
//! keeps its items' payloads through one codec that seals them or not.
//!
//! # Encryption at rest
//!
//! With the `encryption` feature, `with_encryption` (on the SQL stores,
//! `MongoStore` and [`InMemoryStore`]) seals each item's value, indexed text and embedding
//! with an `EncryptedCodec`'s keys (AES-256-GCM, key rotation), bound to the
//! item's namespace, key and part. Reads decrypt before filtering and
//! ranking, so search works unchanged; namespaces, keys and times stay
//! plain. See `SqliteStore::with_encryption`.

pub mod bm25;
pub(crate) mod contract;
pub(crate) mod embed;
mod filter;
mod layers;
pub mod limits;
mod memory;
#[cfg(feature = "mongodb")]
mod mongo;
mod namespace;
pub(crate) mod plan;
mod seal;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
mod trace;
pub(crate) mod types;

pub use contract::{Store, spawn_sweeper};
pub use embed::{Embedder, embed_fn};
pub use filter::{Condition, Filter, FilterOp};
pub use memory::InMemoryStore;
#[cfg(feature = "mongodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "mongodb")))]
pub use mongo::MongoStore;
pub use namespace::NAMESPACE_SEPARATOR;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use sql::PostgresStore;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use sql::SqliteStore;
pub use types::{Item, ListNamespaces, Op, OpResult, PutOptions, Search, StoreConfig};
