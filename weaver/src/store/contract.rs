//! The [`Store`] trait: the memory-store contract every backend implements.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::namespace::owned;
use super::types::{Item, ListNamespaces, Op, OpResult, PutOptions, Search};
use crate::error::{Error, Result};

/// A memory store: JSON values under namespaced keys, shared across threads.
///
/// Object-safe (`Arc<dyn Store>` works). A backend implements
/// [`batch`](Store::batch) and [`sweep`](Store::sweep); the other methods are
/// one-operation batches, so a batch and single calls behave alike. Every
/// value returned is the caller's own copy. A storage failure is
/// [`Error::Storage`], never "not found". Bad input (a namespace with an
/// empty label or a `.`, an empty key, a bad filter operator) is
/// [`Error::InvalidArgument`]; a value over
/// [`MAX_VALUE_BYTES`](super::limits::MAX_VALUE_BYTES) and other limits are
/// [`Error::LimitExceeded`]. See the [module docs](super) for ordering,
/// ranking and TTL rules; the same conformance suite (`weaver-tests`) runs
/// against every backend.
#[async_trait]
pub trait Store: Debug + Send + Sync {
    /// Runs `ops` in order and returns one result per op, in the same order.
    /// Every op is validated (and every embedding computed) before anything
    /// is written, so a bad op fails the batch with nothing written; the
    /// writes are applied atomically (one lock or one transaction), a later
    /// op sees an earlier op's writes, and the reads see one state, never
    /// half of a concurrent batch. At most
    /// [`MAX_BATCH_OPS`](super::limits::MAX_BATCH_OPS) operations.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Op, OpResult, Search, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// // One atomic batch: the get sees the put before it.
    /// let results = store
    ///     .batch(vec![
    ///         Op::put(&["users", "u1"], "food", json!("pizza")),
    ///         Op::get(&["users", "u1"], "food"),
    ///         Op::search(&["users"], Search::new()),
    ///         Op::delete(&["users", "u1"], "food"),
    ///     ])
    ///     .await?;
    /// assert!(matches!(&results[1], OpResult::Got(Some(item)) if item.value == "pizza"));
    /// assert!(matches!(&results[2], OpResult::Found(items) if items.len() == 1));
    /// assert!(matches!(results[3], OpResult::Deleted));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>>;

    /// Deletes every expired item now, as one writing batch would (a batch
    /// never sees a sweep halfway through); returns how many were deleted.
    ///
    /// ```
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, PutOptions, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// store.put_with(&["a"], "old", json!(1), PutOptions::new().ttl(Duration::from_millis(5))).await?;
    /// store.put(&["a"], "kept", json!(2)).await?;
    /// tokio::time::sleep(Duration::from_millis(20)).await;
    /// assert_eq!(store.sweep().await?, 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn sweep(&self) -> Result<u64>;

    /// The item at `namespace`/`key`; `None` when absent or expired (an
    /// expired item met here is deleted). Restarts the TTL when the store
    /// refreshes on read.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// store.put(&["users", "u1"], "food", json!({"likes": "pizza"})).await?;
    /// let item = store.get(&["users", "u1"], "food").await?.expect("stored");
    /// assert_eq!(item.value["likes"], "pizza");
    /// assert!(store.get(&["users", "u1"], "drink").await?.is_none());
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn get(&self, namespace: &[&str], key: &str) -> Result<Option<Item>> {
        self.get_with(namespace, key, None).await
    }

    /// [`get`](Store::get), choosing whether to restart the item's TTL
    /// (`None`: the store's [`refresh_on_read`](super::StoreConfig::refresh_on_read)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Search, Store, StoreConfig};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = InMemoryStore::with_config(StoreConfig::new().default_ttl(Duration::from_secs(60)));
    /// store.put(&["a"], "k", json!(1)).await?;
    /// // Peek without restarting the item's TTL.
    /// let item = store.get_with(&["a"], "k", Some(false)).await?.unwrap();
    /// assert_eq!(item.value, 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn get_with(
        &self,
        namespace: &[&str],
        key: &str,
        refresh_ttl: Option<bool>,
    ) -> Result<Option<Item>> {
        let op = Op::Get {
            namespace: owned(namespace),
            key: key.to_owned(),
            refresh_ttl,
        };
        match single(self.batch(vec![op]).await?)? {
            OpResult::Got(item) => Ok(item),
            other => Err(mismatch("get", &other)),
        }
    }

    /// Stores `value` at `namespace`/`key`, indexing the whole value, with
    /// the store's default TTL, and returns the stored item.
    ///
    /// Overwriting a live item keeps its `created_at`; overwriting an
    /// expired one starts a new item. The returned `created_at` and
    /// `updated_at` (the time of this write) are exactly those a later
    /// [`get`](Store::get) returns while the item lives; `score` is `None`.
    /// A TTL under a microsecond expires the item as it is written: the put
    /// returns it, later reads do not.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Store};
    ///
    /// let store = InMemoryStore::new();
    /// let ns = ["users", "u1", "memories"];
    /// let first = store.put(&ns, "food", json!({"memory": "likes pizza"})).await?;
    /// let second = store.put(&ns, "food", json!({"memory": "likes sushi"})).await?;
    /// assert_eq!(second.created_at, first.created_at);
    /// assert_eq!(store.get(&ns, "food").await?, Some(second));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn put(&self, namespace: &[&str], key: &str, value: Value) -> Result<Item> {
        self.put_with(namespace, key, value, PutOptions::default())
            .await
    }

    /// [`put`](Store::put) with index fields and a TTL; returns the stored
    /// item.
    ///
    /// ```
    /// use std::time::Duration;
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, PutOptions, Search, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// // Only `text` is ranked; the items expire in an hour.
    /// let options = PutOptions::new().index(["text"]).ttl(Duration::from_secs(3600));
    /// store.put_with(&["notes"], "n1", json!({"text": "call mom", "tag": "milk"}), options.clone()).await?;
    /// store.put_with(&["notes"], "n2", json!({"text": "buy milk"}), options).await?;
    /// assert_eq!(store.search(&["notes"], Search::query("milk")).await?[0].key, "n2");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn put_with(
        &self,
        namespace: &[&str],
        key: &str,
        value: Value,
        options: PutOptions,
    ) -> Result<Item> {
        let op = Op::put_with(namespace, key, value, options);
        match single(self.batch(vec![op]).await?)? {
            OpResult::Put(item) => Ok(item),
            other => Err(mismatch("put", &other)),
        }
    }

    /// Deletes the item; deleting an absent item is not an error.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// store.put(&["users", "u1"], "food", json!("pizza")).await?;
    /// store.delete(&["users", "u1"], "food").await?;
    /// assert!(store.get(&["users", "u1"], "food").await?.is_none());
    /// store.delete(&["users", "u1"], "food").await?; // already gone: fine
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn delete(&self, namespace: &[&str], key: &str) -> Result<()> {
        match single(self.batch(vec![Op::delete(namespace, key)]).await?)? {
            OpResult::Deleted => Ok(()),
            other => Err(mismatch("delete", &other)),
        }
    }

    /// Live items at or under `namespace_prefix` (label-wise; `&[]` is
    /// everything) that match the filter, ranked by the query if there is
    /// one, then paged. Never returns an item outside the prefix.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{Filter, InMemoryStore, Search, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// store.put(&["users", "u1"], "a", json!({"text": "likes pizza", "age": 31})).await?;
    /// store.put(&["users", "u2"], "a", json!({"text": "likes sushi", "age": 25})).await?;
    /// store.put(&["teams", "t1"], "a", json!({"text": "pizza fridays"})).await?;
    /// // Under `users` only, ranked by the query.
    /// let found = store.search(&["users"], Search::query("pizza")).await?;
    /// assert_eq!(found[0].namespace, ["users", "u1"]);
    /// // Filtered on a value field.
    /// let older = store.search(&["users"], Search::new().filter(Filter::new().gte("age", 30))).await?;
    /// assert_eq!(older.len(), 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn search(&self, namespace_prefix: &[&str], options: Search) -> Result<Vec<Item>> {
        match single(
            self.batch(vec![Op::search(namespace_prefix, options)])
                .await?,
        )? {
            OpResult::Found(items) => Ok(items),
            other => Err(mismatch("search", &other)),
        }
    }

    /// Distinct namespaces holding live items, filtered by prefix and suffix,
    /// truncated to `max_depth` labels, ordered by dotted form, paged.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, ListNamespaces, Store};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// store.put(&["users", "u1", "memories"], "a", json!(1)).await?;
    /// store.put(&["users", "u2", "prefs"], "b", json!(2)).await?;
    /// store.put(&["teams", "t1"], "c", json!(3)).await?;
    /// let users = store.list_namespaces(ListNamespaces::new().prefix(&["users"]).max_depth(2)).await?;
    /// assert_eq!(users, [vec!["users", "u1"], vec!["users", "u2"]]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn list_namespaces(&self, options: ListNamespaces) -> Result<Vec<Vec<String>>> {
        match single(self.batch(vec![Op::ListNamespaces(options)]).await?)? {
            OpResult::Namespaces(ns) => Ok(ns),
            other => Err(mismatch("list_namespaces", &other)),
        }
    }
}

fn single(results: Vec<OpResult>) -> Result<OpResult> {
    let n = results.len();
    results
        .into_iter()
        .next()
        .filter(|_| n == 1)
        .ok_or_else(|| {
            Error::storage(
                "store batch",
                format!("backend returned {n} results for 1 operation"),
            )
        })
}

fn mismatch(op: &'static str, got: &OpResult) -> Error {
    Error::storage(op, format!("backend returned a mismatched result: {got:?}"))
}

/// Sweeps `store` every `every` (at least every millisecond: a zero period
/// is taken as 1 ms) in a background task until the handle is aborted; a
/// failed sweep is logged (`tracing` warning) and retried at the next tick.
/// Needs a tokio runtime.
pub fn spawn_sweeper(store: Arc<dyn Store>, every: Duration) -> tokio::task::JoinHandle<()> {
    // `tokio::time::interval` panics on a zero period, which would end the
    // task before its first sweep, unnoticed.
    let every = every.max(Duration::from_millis(1));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            if let Err(e) = store.sweep().await {
                tracing::warn!(error = %e, "store sweep failed");
            }
        }
    })
}
