//! The store's data types: items, options, batch operations, configuration.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::embed::Embedder;
use super::namespace::owned;

/// A stored value with its place and times; `score` is set by a search with
/// a query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// The namespace the item lives in.
    pub namespace: Vec<String>,
    /// The key, unique within the namespace.
    pub key: String,
    /// The stored JSON value.
    pub value: Value,
    /// When the key was first written (kept when it is overwritten).
    pub created_at: SystemTime,
    /// When the value was last written.
    pub updated_at: SystemTime,
    /// Relevance to the search query (cosine similarity, or BM25), higher is
    /// better; `None` outside a ranked search and for items that are not
    /// indexed.
    pub score: Option<f64>,
}

/// Options of [`Store::put_with`](super::Store::put_with).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PutOptions {
    /// Which fields of the value are indexed for a query: `None` indexes the
    /// whole value, `Some(vec![])` indexes nothing (a search with a query
    /// still lists the item, after the scored ones, with no score). A field is a dotted path
    /// (`"profile.name"`, `"tags.0"`); `"$"` is the whole value. At most
    /// [`MAX_INDEX_FIELDS`](super::limits::MAX_INDEX_FIELDS) paths and
    /// [`MAX_INDEX_TEXT_BYTES`](super::limits::MAX_INDEX_TEXT_BYTES) of
    /// indexed text (a part reached by two paths counts twice).
    pub index: Option<Vec<String>>,
    /// How long the item lives after this write; `None` uses the store's
    /// [`StoreConfig::default_ttl`] (no expiry when that is unset).
    pub ttl: Option<Duration>,
}

impl PutOptions {
    /// Whole value indexed, the store's default TTL.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, PutOptions, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// let item = store.put_with(&["a"], "k", json!({"x": 1}), PutOptions::new()).await?;
    /// assert_eq!(item.key, "k");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new() -> Self {
        PutOptions::default()
    }

    /// Indexes only these fields.
    ///
    /// ```
    /// use weaver::store::PutOptions;
    ///
    /// let options = PutOptions::new().index(["title", "body.text"]);
    /// assert_eq!(options.index.unwrap(), ["title", "body.text"]);
    /// ```
    pub fn index<I: IntoIterator<Item = T>, T: Into<String>>(mut self, fields: I) -> Self {
        self.index = Some(fields.into_iter().map(Into::into).collect());
        self
    }

    /// Does not index the item for queries.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, PutOptions, Search, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// store.put_with(&["a"], "secret", json!("pizza"), PutOptions::new().not_indexed()).await?;
    /// store.put(&["a"], "open", json!("pizza")).await?;
    /// let ranked = store.search(&["a"], Search::query("pizza")).await?;
    /// // The unindexed item comes last, with no score.
    /// assert_eq!(ranked[0].key, "open");
    /// assert_eq!((ranked[1].key.as_str(), ranked[1].score), ("secret", None));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn not_indexed(mut self) -> Self {
        self.index = Some(Vec::new());
        self
    }

    /// Expires the item `ttl` after this write.
    ///
    /// ```
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, PutOptions, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// let short = PutOptions::new().ttl(Duration::from_millis(10));
    /// store.put_with(&["sessions"], "s1", json!({"user": "ada"}), short).await?;
    /// tokio::time::sleep(Duration::from_millis(30)).await;
    /// assert!(store.get(&["sessions"], "s1").await?.is_none());
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
}

/// What [`Store::search`](super::Store::search) looks for: an optional text
/// query, a filter on value fields, a page.
///
/// ```
/// use serde_json::json;
/// use weaver::store::{Filter, Search};
///
/// let ranked = Search::query("pizza").limit(3);
/// let filtered = Search::new()
///     .filter(Filter::new().gte("age", 30).eq("city", "Paris"))
///     .offset(10);
/// // The same filter in its JSON form (operators `$eq $ne $gt $gte $lt $lte`):
/// let same = Search::new().filter(json!({"age": {"$gte": 30}, "city": "Paris"}));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Search {
    /// Text to rank by; `None` orders by namespace and key.
    pub query: Option<String>,
    /// A filter on value fields in the JSON form of [`Filter`](super::Filter); checked when
    /// the search runs (a bad operator is
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument)).
    pub filter: Option<Value>,
    /// Most items returned (default 10, at most
    /// [`MAX_RESULTS`](super::limits::MAX_RESULTS)).
    pub limit: usize,
    /// Items skipped first.
    pub offset: usize,
    /// Restart the TTL of returned items; `None` follows
    /// [`StoreConfig::refresh_on_read`].
    pub refresh_ttl: Option<bool>,
}

impl Default for Search {
    fn default() -> Self {
        Search {
            query: None,
            filter: None,
            limit: 10,
            offset: 0,
            refresh_ttl: None,
        }
    }
}

impl Search {
    /// No query, no filter, the first 10 items.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Search, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// for i in 0..12 {
    ///     store.put(&["logs"], &format!("{i:02}"), json!(i)).await?;
    /// }
    /// // Ordered by namespace and key, a page of 10.
    /// let page = store.search(&["logs"], Search::new()).await?;
    /// assert_eq!((page.len(), page[0].key.as_str()), (10, "00"));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new() -> Self {
        Search::default()
    }

    /// A ranked search for `text`. A text that is empty or only white
    /// space is no query: the search lists items by namespace, then key,
    /// unscored (an embedder is never asked for it). LangGraph treats only
    /// the empty text so, and ranks a query of white space.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Search, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// store.put(&["docs"], "a", json!({"text": "rust graphs"})).await?;
    /// store.put(&["docs"], "b", json!({"text": "pizza recipes"})).await?;
    /// let found = store.search(&["docs"], Search::query("pizza")).await?;
    /// assert_eq!(found[0].key, "b");
    /// assert!(found[0].score.is_some());
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn query(text: impl Into<String>) -> Self {
        Search::new().with_query(text)
    }

    /// Sets the query.
    pub fn with_query(mut self, text: impl Into<String>) -> Self {
        self.query = Some(text.into());
        self
    }

    /// Keeps only items matching `filter` (a [`Filter`](super::Filter) or its JSON form).
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Filter, Search, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// store.put(&["people"], "ann", json!({"age": 31, "city": "Paris"})).await?;
    /// store.put(&["people"], "bob", json!({"age": 25, "city": "Paris"})).await?;
    /// let typed = Search::new().filter(Filter::new().gte("age", 30).eq("city", "Paris"));
    /// let json = Search::new().filter(json!({"age": {"$gte": 30}, "city": "Paris"}));
    /// assert_eq!(store.search(&["people"], typed).await?[0].key, "ann");
    /// assert_eq!(store.search(&["people"], json).await?.len(), 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn filter(mut self, filter: impl Into<Value>) -> Self {
        self.filter = Some(filter.into());
        self
    }

    /// Returns at most `limit` items.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Search, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// for key in ["a", "b", "c"] {
    ///     store.put(&["x"], key, json!(key)).await?;
    /// }
    /// assert_eq!(store.search(&["x"], Search::new().limit(2)).await?.len(), 2);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Skips the first `offset` items.
    pub fn offset(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }

    /// Restarts (or not) the TTL of returned items.
    ///
    /// ```
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Search, Store, StoreConfig};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let config = StoreConfig::new().default_ttl(Duration::from_secs(60)).refresh_on_read(true);
    /// let store = InMemoryStore::with_config(config);
    /// store.put(&["a"], "k", json!(1)).await?;
    /// // A listing that leaves the items' TTLs as they are.
    /// let found = store.search(&["a"], Search::new().refresh_ttl(false)).await?;
    /// assert_eq!(found.len(), 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn refresh_ttl(mut self, refresh: bool) -> Self {
        self.refresh_ttl = Some(refresh);
        self
    }
}

/// Options of [`Store::list_namespaces`](super::Store::list_namespaces).
///
/// ```
/// use weaver::store::ListNamespaces;
/// // Distinct `["users", id]` pairs that hold anything:
/// let users = ListNamespaces::new().prefix(&["users"]).max_depth(2).limit(50);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ListNamespaces {
    /// Keep namespaces starting with these labels (empty: all); a label
    /// `*` matches any one label, as in LangGraph.
    pub prefix: Vec<String>,
    /// Keep namespaces ending with these labels (empty: all); a label `*`
    /// matches any one label.
    pub suffix: Vec<String>,
    /// Truncate namespaces to this many labels (then deduplicate).
    pub max_depth: Option<usize>,
    /// Most namespaces returned (default 100).
    pub limit: usize,
    /// Namespaces skipped first.
    pub offset: usize,
}

impl Default for ListNamespaces {
    fn default() -> Self {
        ListNamespaces {
            prefix: Vec::new(),
            suffix: Vec::new(),
            max_depth: None,
            limit: 100,
            offset: 0,
        }
    }
}

impl ListNamespaces {
    /// Every namespace, the first 100.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, ListNamespaces, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// store.put(&["a", "b"], "k", json!(1)).await?;
    /// store.put(&["c"], "k", json!(2)).await?;
    /// let all = store.list_namespaces(ListNamespaces::new()).await?;
    /// assert_eq!(all, [vec!["a", "b"], vec!["c"]]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new() -> Self {
        ListNamespaces::default()
    }

    /// Keeps namespaces starting with `labels`.
    ///
    /// ```
    /// use weaver::store::ListNamespaces;
    ///
    /// let options = ListNamespaces::new().prefix(&["users"]);
    /// assert_eq!(options.prefix, ["users"]);
    /// ```
    pub fn prefix<S: AsRef<str>>(mut self, labels: &[S]) -> Self {
        self.prefix = owned(labels);
        self
    }

    /// Keeps namespaces ending with `labels`.
    pub fn suffix<S: AsRef<str>>(mut self, labels: &[S]) -> Self {
        self.suffix = owned(labels);
        self
    }

    /// Truncates namespaces to `depth` labels.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, ListNamespaces, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// store.put(&["users", "u1", "memories"], "k", json!(1)).await?;
    /// store.put(&["users", "u1", "prefs"], "k", json!(2)).await?;
    /// // Both truncate to `users.u1`, listed once.
    /// let users = store.list_namespaces(ListNamespaces::new().max_depth(2)).await?;
    /// assert_eq!(users, [vec!["users", "u1"]]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn max_depth(mut self, depth: usize) -> Self {
        self.max_depth = Some(depth);
        self
    }

    /// Returns at most `limit` namespaces.
    ///
    /// ```
    /// use weaver::store::ListNamespaces;
    ///
    /// assert_eq!(ListNamespaces::new().limit(5).limit, 5);
    /// assert_eq!(ListNamespaces::new().limit, 100);
    /// ```
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Skips the first `offset` namespaces.
    pub fn offset(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }
}

/// One operation of a [`Store::batch`](super::Store::batch); each has the
/// semantics of the store method of the same name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Op {
    /// [`Store::get_with`](super::Store::get_with).
    Get {
        /// The namespace.
        namespace: Vec<String>,
        /// The key.
        key: String,
        /// Restart the item's TTL; `None` follows the store's config.
        refresh_ttl: Option<bool>,
    },
    /// [`Store::put_with`](super::Store::put_with).
    Put {
        /// The namespace.
        namespace: Vec<String>,
        /// The key.
        key: String,
        /// The value.
        value: Value,
        /// Index and TTL options.
        options: PutOptions,
    },
    /// [`Store::delete`](super::Store::delete).
    Delete {
        /// The namespace.
        namespace: Vec<String>,
        /// The key.
        key: String,
    },
    /// [`Store::search`](super::Store::search).
    Search {
        /// The namespace prefix searched.
        namespace_prefix: Vec<String>,
        /// Query, filter and page.
        options: Search,
    },
    /// [`Store::list_namespaces`](super::Store::list_namespaces).
    ListNamespaces(ListNamespaces),
}

impl Op {
    /// A get.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Op, OpResult, Search, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// store.put(&["a"], "k", json!(1)).await?;
    /// let results = store.batch(vec![Op::get(&["a"], "k"), Op::get(&["a"], "missing")]).await?;
    /// assert!(matches!(&results[0], OpResult::Got(Some(item)) if item.value == 1));
    /// assert!(matches!(results[1], OpResult::Got(None)));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn get<S: AsRef<str>>(namespace: &[S], key: impl Into<String>) -> Self {
        Op::Get {
            namespace: owned(namespace),
            key: key.into(),
            refresh_ttl: None,
        }
    }

    /// A put with default options.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Op, OpResult, Search, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// // Two puts that land together or not at all.
    /// store.batch(vec![Op::put(&["a"], "x", json!(1)), Op::put(&["a"], "y", json!(2))]).await?;
    /// assert_eq!(store.search(&["a"], Search::new()).await?.len(), 2);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn put<S: AsRef<str>>(namespace: &[S], key: impl Into<String>, value: Value) -> Self {
        Op::put_with(namespace, key, value, PutOptions::default())
    }

    /// A put with options.
    ///
    /// ```
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Op, OpResult, PutOptions, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// let short = PutOptions::new().ttl(Duration::from_secs(60)).not_indexed();
    /// store.batch(vec![Op::put_with(&["sessions"], "s1", json!({"user": "ada"}), short)]).await?;
    /// assert!(store.get(&["sessions"], "s1").await?.is_some());
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn put_with<S: AsRef<str>>(
        namespace: &[S],
        key: impl Into<String>,
        value: Value,
        options: PutOptions,
    ) -> Self {
        Op::Put {
            namespace: owned(namespace),
            key: key.into(),
            value,
            options,
        }
    }

    /// A delete.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Op, OpResult, Search, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// store.put(&["a"], "k", json!(1)).await?;
    /// store.batch(vec![Op::delete(&["a"], "k")]).await?;
    /// assert!(store.get(&["a"], "k").await?.is_none());
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn delete<S: AsRef<str>>(namespace: &[S], key: impl Into<String>) -> Self {
        Op::Delete {
            namespace: owned(namespace),
            key: key.into(),
        }
    }

    /// A search.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Op, OpResult, Search, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// store.put(&["docs"], "a", json!({"text": "pizza"})).await?;
    /// let results = store.batch(vec![Op::search(&["docs"], Search::query("pizza"))]).await?;
    /// assert!(matches!(&results[0], OpResult::Found(items) if items[0].key == "a"));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn search<S: AsRef<str>>(namespace_prefix: &[S], options: Search) -> Self {
        Op::Search {
            namespace_prefix: owned(namespace_prefix),
            options,
        }
    }
}

/// The result of one [`Op`], at the same position in the batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum OpResult {
    /// Of a get: the item, or `None` when absent or expired.
    Got(Option<Item>),
    /// Of a put: the item as stored, with its `created_at` (kept from the
    /// live item it overwrote) and `updated_at` (this write) exactly as a
    /// later get returns them; `score` is `None`.
    Put(Item),
    /// Of a delete.
    Deleted,
    /// Of a search: the page of items.
    Found(Vec<Item>),
    /// Of a namespace listing.
    Namespaces(Vec<Vec<String>>),
}

/// How a store indexes and expires items; every backend takes one.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct StoreConfig {
    /// Embeds indexed text for ranked search (cosine similarity); without
    /// one, queries are ranked by BM25.
    pub embedder: Option<Arc<dyn Embedder>>,
    /// TTL of items put without one; `None`: they never expire.
    pub default_ttl: Option<Duration>,
    /// Whether reads restart the TTL of what they return (overridable per
    /// call).
    pub refresh_on_read: bool,
}

impl StoreConfig {
    /// No embedder (BM25 ranking), no expiry, no refresh.
    ///
    /// ```
    /// use weaver::store::{InMemoryStore, StoreConfig};
    ///
    /// let config = StoreConfig::new();
    /// assert!(config.embedder.is_none() && config.default_ttl.is_none() && !config.refresh_on_read);
    /// let store = InMemoryStore::with_config(config);
    /// # let _ = store;
    /// ```
    pub fn new() -> Self {
        StoreConfig::default()
    }

    /// Ranks queries by cosine similarity of `embedder`'s vectors.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Search, Store, StoreConfig, embed_fn};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// // A toy embedding: does the text mention food, does it mention pets?
    /// let embedder = embed_fn(|text| {
    ///     let has = |words: &[&str]| words.iter().any(|w| text.contains(w)) as u8 as f32;
    ///     vec![has(&["pizza", "sushi"]), has(&["cat", "dog"])]
    /// });
    /// let store = InMemoryStore::with_config(StoreConfig::new().embedder(embedder));
    /// store.put(&["u1"], "food", json!({"text": "likes sushi"})).await?;
    /// store.put(&["u1"], "pet", json!({"text": "has a cat"})).await?;
    /// let found = store.search(&["u1"], Search::query("a dog")).await?;
    /// assert_eq!(found[0].key, "pet");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
        self
    }

    /// Expires items put without a TTL `ttl` after their write.
    ///
    /// ```
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Search, Store, StoreConfig};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = InMemoryStore::with_config(StoreConfig::new().default_ttl(Duration::from_millis(10)));
    /// store.put(&["cache"], "k", json!(1)).await?;
    /// tokio::time::sleep(Duration::from_millis(30)).await;
    /// assert!(store.get(&["cache"], "k").await?.is_none());
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = Some(ttl);
        self
    }

    /// Makes reads restart the TTL of what they return.
    ///
    /// ```
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Search, Store, StoreConfig};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let config = StoreConfig::new().default_ttl(Duration::from_secs(1)).refresh_on_read(true);
    /// let store = InMemoryStore::with_config(config);
    /// store.put(&["sessions"], "s1", json!("ada")).await?;
    /// // Each read gives the item another second: it outlives its first TTL.
    /// for _ in 0..2 {
    ///     tokio::time::sleep(Duration::from_millis(600)).await;
    ///     assert!(store.get(&["sessions"], "s1").await?.is_some());
    /// }
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn refresh_on_read(mut self, refresh: bool) -> Self {
        self.refresh_on_read = refresh;
        self
    }
}
