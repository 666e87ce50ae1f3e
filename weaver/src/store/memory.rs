//! [`InMemoryStore`]: the store in process memory (the ETS equivalent).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::contract::Store;
use super::layers::{Layered, backend_mut, layered};
use super::namespace::descendants;
use super::plan::{
    ListPlan, Plan, Record, SearchPlan, finish_list, finish_search, found, now_micros, prepare,
};
use super::seal::Sealing;
use super::types::{Op, OpResult, StoreConfig};
use crate::error::Result;

type Items = BTreeMap<(String, String), Record>;

/// A [`Store`] in process memory; clones share the same items. Items are
/// kept ordered by (dotted namespace, key), so a search visits only the
/// items under its prefix.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use serde_json::json;
/// use weaver::store::{InMemoryStore, Store};
///
/// let store = InMemoryStore::new();
/// store.put(&["users", "u1", "prefs"], "theme", json!({"dark": true})).await?;
/// let item = store.get(&["users", "u1", "prefs"], "theme").await?.unwrap();
/// assert_eq!(item.value["dark"], true);
/// # Ok::<(), weaver::Error>(()) }).unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct InMemoryStore {
    inner: Layered<MemoryItems>,
}

impl Default for InMemoryStore {
    fn default() -> Self {
        InMemoryStore::with_config(StoreConfig::default())
    }
}

/// The in-memory backend: the items, ordered, behind one lock.
#[derive(Clone, Default)]
struct MemoryItems {
    items: Arc<Mutex<Items>>,
    config: StoreConfig,
    sealing: Sealing,
}

impl std::fmt::Debug for MemoryItems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the items: a store can be large, and it is printed inside
        // every `Compile` and graph debug output.
        f.debug_struct("InMemoryStore")
            .field("items", &self.lock().len())
            .field("config", &self.config)
            .finish()
    }
}

impl InMemoryStore {
    /// An empty store: BM25 ranking, no expiry.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use serde_json::json;
    /// use weaver::store::{InMemoryStore, Store};
    ///
    /// let store = InMemoryStore::new();
    /// // Clones share the items.
    /// let handle = store.clone();
    /// handle.put(&["a"], "k", json!(1)).await?;
    /// assert_eq!(store.get(&["a"], "k").await?.unwrap().value, 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new() -> Self {
        InMemoryStore::default()
    }

    /// An empty store with `config` (embedder, TTL).
    pub fn with_config(config: StoreConfig) -> Self {
        let mut inner = layered(MemoryItems::default());
        backend_mut(&mut inner).config = config;
        InMemoryStore { inner }
    }

    /// Seals every item this store puts from now on, as
    /// [`SqliteStore::with_encryption`](super::SqliteStore::with_encryption)
    /// does: the value, indexed text and embedding, each with `codec`'s
    /// newest key and bound to the item's namespace, key and part, so what
    /// the process holds in memory (a core dump, a heap snapshot) shows none
    /// of them. Search, filters and ranking run on the opened items.
    ///
    /// Clones share their items: a store built `with_encryption` meeting an
    /// item a plain clone put, a plain clone meeting a sealed item, or a
    /// store without the key that sealed it, fails the batch with
    /// [`Error::Decrypt`](crate::Error::Decrypt), nothing of it written.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use serde_json::json;
    /// use weaver::codec::{EncryptedCodec, EncryptionKey};
    /// use weaver::store::{InMemoryStore, Search, Store};
    ///
    /// let codec = EncryptedCodec::json([EncryptionKey::new("2026-11", [7; 32])?])?;
    /// let plain = InMemoryStore::new();
    /// let sealed = plain.clone().with_encryption(codec);
    /// sealed.put(&["users", "u1"], "food", json!({"memory": "likes pizza"})).await?;
    /// let found = sealed.search(&["users"], Search::query("pizza")).await?;
    /// assert_eq!(found[0].value, json!({"memory": "likes pizza"}));
    /// // A handle without the key does not read it.
    /// assert!(matches!(plain.get(&["users", "u1"], "food").await, Err(weaver::Error::Decrypt { .. })));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    #[cfg(feature = "encryption")]
    #[cfg_attr(docsrs, doc(cfg(feature = "encryption")))]
    pub fn with_encryption(mut self, codec: crate::codec::EncryptedCodec) -> Self {
        backend_mut(&mut self.inner).sealing = Sealing::encrypted(codec);
        self
    }
}

#[async_trait]
impl Store for InMemoryStore {
    async fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        self.inner.batch(ops).await
    }

    async fn sweep(&self) -> Result<u64> {
        self.inner.sweep().await
    }
}

impl MemoryItems {
    fn lock(&self) -> MutexGuard<'_, Items> {
        // A panic elsewhere while holding the lock cannot leave a half-made
        // write (every write is one insert or remove), so keep going.
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The entries under dotted `prefix`, in order: the namespace itself, then
/// its descendants (two index ranges; nothing outside is visited).
fn under<'a>(
    items: &'a Items,
    prefix: &str,
) -> Box<dyn Iterator<Item = (&'a (String, String), &'a Record)> + 'a> {
    if prefix.is_empty() {
        return Box::new(items.iter());
    }
    let exact_end = format!("{prefix}\0");
    let exact = items.range((
        Bound::Included((prefix.to_owned(), String::new())),
        Bound::Excluded((exact_end, String::new())),
    ));
    let (lo, hi) = descendants(prefix);
    let below = items.range((
        Bound::Included((lo, String::new())),
        Bound::Excluded((hi, String::new())),
    ));
    Box::new(exact.chain(below))
}

/// The keys under dotted `prefix`.
fn keys_under(items: &Items, prefix: &str) -> Vec<(String, String)> {
    under(items, prefix).map(|(k, _)| k.clone()).collect()
}

/// Live records under the prefix; expired ones met are deleted.
fn live_under(items: &mut Items, prefix: &str, now: i64) -> Vec<(String, String)> {
    let mut live = Vec::new();
    for k in keys_under(items, prefix) {
        match items.get(&k) {
            Some(r) if r.is_live(now) => live.push(k),
            Some(_) => {
                items.remove(&k);
            }
            None => {}
        }
    }
    live
}

/// What a batch changed, to put back when a later op of it fails, so a
/// batch writes all or nothing (an expired item it deleted stays deleted:
/// no read could see it).
#[derive(Default)]
struct Undo(Vec<Change>);

enum Change {
    /// The entry at the key before a put or a delete.
    Replaced((String, String), Option<Record>),
    /// The expiry of the entry at the key before a refresh.
    Expiry((String, String), Option<i64>),
}

impl Undo {
    fn restore(self, items: &mut Items) {
        for change in self.0.into_iter().rev() {
            match change {
                Change::Replaced(k, Some(before)) => {
                    items.insert(k, before);
                }
                Change::Replaced(k, None) => {
                    items.remove(&k);
                }
                Change::Expiry(k, before) => {
                    if let Some(r) = items.get_mut(&k) {
                        r.expires_at = before;
                    }
                }
            }
        }
    }
}

fn search(
    items: &mut Items,
    plan: &SearchPlan,
    now: i64,
    sealing: &Sealing,
    undo: &mut Undo,
) -> Result<OpResult> {
    let mut page = if plan.is_plain() {
        // Already in namespace/key order: read only the page.
        under(items, &plan.prefix)
            .map(|(_, r)| r)
            .filter(|r| r.is_live(now))
            .skip(plan.offset)
            .take(plan.limit)
            .map(|r| Ok((sealing.open_kept(r)?, None)))
            .collect::<Result<Vec<_>>>()?
    } else {
        let keys = live_under(items, &plan.prefix, now);
        let candidates = keys
            .iter()
            .filter_map(|k| items.get(k))
            .map(|r| sealing.open_kept(r))
            .collect::<Result<Vec<_>>>()?;
        finish_search(candidates, plan)
    };
    if plan.refresh {
        for (r, _) in &mut page {
            let before = r.expires_at;
            let k = (r.namespace.clone(), r.key.clone());
            if r.refresh(now)
                && let Some(stored) = items.get_mut(&k)
            {
                stored.expires_at = r.expires_at;
                undo.0.push(Change::Expiry(k, before));
            }
        }
    }
    Ok(found(&page))
}

fn list(items: &mut Items, plan: &ListPlan, now: i64) -> OpResult {
    let keys = live_under(items, &plan.prefix, now);
    OpResult::Namespaces(finish_list(keys.iter().map(|(ns, _)| ns.as_str()), plan))
}

impl MemoryItems {
    /// Applies one validated op to `items` at `now`, noting in `undo` what
    /// it changed.
    fn apply(&self, items: &mut Items, plan: Plan, now: i64, undo: &mut Undo) -> Result<OpResult> {
        Ok(match plan {
            Plan::Get {
                namespace,
                key,
                refresh,
            } => {
                let k = (namespace, key);
                match items.get_mut(&k) {
                    Some(r) if r.is_live(now) => {
                        let before = r.expires_at;
                        if refresh && r.refresh(now) {
                            undo.0.push(Change::Expiry(k.clone(), before));
                        }
                        OpResult::Got(Some(self.sealing.item_of(r, None)?))
                    }
                    Some(_) => {
                        items.remove(&k);
                        OpResult::Got(None)
                    }
                    None => OpResult::Got(None),
                }
            }
            Plan::Put(put) => {
                let k = (put.namespace.clone(), put.key.clone());
                let created = items
                    .get(&k)
                    .filter(|r| r.is_live(now))
                    .map(|r| r.created_at);
                let record = put.record(now, created);
                let item = record.to_item(None);
                let before = items.insert(k.clone(), self.sealing.keep(record)?);
                undo.0.push(Change::Replaced(k, before));
                OpResult::Put(item)
            }
            Plan::Delete { namespace, key } => {
                let k = (namespace, key);
                if let Some(before) = items.remove(&k) {
                    undo.0.push(Change::Replaced(k, Some(before)));
                }
                OpResult::Deleted
            }
            Plan::Search(plan) => search(items, &plan, now, &self.sealing, undo)?,
            Plan::List(plan) => list(items, &plan, now),
        })
    }
}

#[async_trait]
impl Store for MemoryItems {
    async fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        let plans = prepare(ops, &self.config).await?;
        let mut items = self.lock();
        // Read under the lock: batches apply in the order of their
        // times, so an item is never updated before it was created.
        let now = now_micros();
        let mut undo = Undo::default();
        let mut results = Vec::with_capacity(plans.len());
        for plan in plans {
            match self.apply(&mut items, plan, now, &mut undo) {
                Ok(result) => results.push(result),
                Err(e) => {
                    undo.restore(&mut items);
                    return Err(e);
                }
            }
        }
        Ok(results)
    }

    async fn sweep(&self) -> Result<u64> {
        let mut items = self.lock();
        let now = now_micros();
        let before = items.len();
        items.retain(|_, r| r.is_live(now));
        Ok((before - items.len()) as u64)
    }
}

#[cfg(all(test, feature = "encryption"))]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::codec::{EncryptedCodec, EncryptionKey};
    use crate::error::Error;
    use crate::store::embed_fn;
    use crate::store::layers::backend;
    use crate::store::types::Search;

    const SECRET: &str = "the saffron tango on granite street";

    fn codec() -> EncryptedCodec {
        EncryptedCodec::json([EncryptionKey::new("k1", [1; 32]).unwrap()]).unwrap()
    }

    fn sealed(config: StoreConfig) -> InMemoryStore {
        InMemoryStore::with_config(config).with_encryption(codec())
    }

    /// The record the store keeps at `ns`/`key`.
    fn kept(store: &InMemoryStore, ns: &str, key: &str) -> Record {
        let items = backend(&store.inner).lock();
        items[&(ns.to_owned(), key.to_owned())].clone()
    }

    fn decrypt_error<T: std::fmt::Debug>(r: Result<T>, reason: &str) -> bool {
        matches!(&r, Err(Error::Decrypt { reason: why, .. }) if why.contains(reason))
    }

    #[tokio::test]
    async fn nothing_of_a_sealed_item_is_kept_in_the_clear_and_reads_still_work() {
        let topics = ["saffron", "tango", "granite"];
        let embedder = embed_fn(move |text: &str| {
            topics
                .iter()
                .map(|w| text.matches(w).count() as f32)
                .collect()
        });
        let store = sealed(StoreConfig::new().embedder(embedder));
        let value = json!({"memory": SECRET, "kind": "place"});
        store
            .put(&["users", "u1"], "a", value.clone())
            .await
            .unwrap();
        let other = json!({"memory": "nothing of note", "kind": "other"});
        store.put(&["users", "u1"], "b", other).await.unwrap();

        let record = kept(&store, "users.u1", "a");
        assert_eq!(
            (record.value.clone(), &record.index_text, &record.embedding),
            (Value::Null, &None, &None)
        );
        let parts = record.sealed.expect("sealed parts");
        let embedding: Vec<u8> = [1f32, 1., 1.]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let clear: [&[u8]; 3] = [b"saffron", b"place", &embedding];
        let payloads = [
            Some(&parts.value),
            parts.index_text.as_ref(),
            parts.embedding.as_ref(),
        ];
        for payload in payloads {
            let payload = payload.expect("every part is kept");
            for word in clear {
                assert!(!payload.windows(word.len()).any(|w| w == word));
            }
        }

        assert_eq!(
            store
                .get(&["users", "u1"], "a")
                .await
                .unwrap()
                .unwrap()
                .value,
            value
        );
        let ranked = Search::query("granite saffron").limit(1);
        assert_eq!(store.search(&["users"], ranked).await.unwrap()[0].key, "a");
        let filtered = Search::new().filter(json!({"kind": "place"}));
        let found = store.search(&["users"], filtered).await.unwrap();
        assert_eq!(found.iter().map(|i| &i.key).collect::<Vec<_>>(), ["a"]);
        let bm25 = sealed(StoreConfig::new());
        bm25.put(&["n"], "a", json!({"memory": SECRET}))
            .await
            .unwrap();
        bm25.put(&["n"], "b", json!({"memory": "other"}))
            .await
            .unwrap();
        let found = bm25
            .search(&["n"], Search::query("tango").limit(1))
            .await
            .unwrap();
        assert_eq!(found[0].key, "a");
    }

    #[tokio::test]
    async fn tampered_moved_or_mismatched_items_are_decrypt_errors_and_write_nothing() {
        let plain = InMemoryStore::new();
        let store = plain.clone().with_encryption(codec());
        for key in ["a", "b"] {
            store
                .put(&["n"], key, json!({"memory": SECRET}))
                .await
                .unwrap();
        }
        let items = &backend(&store.inner).items;
        // One flipped bit of the sealed value.
        let k = ("n".to_owned(), "a".to_owned());
        {
            let mut items = items.lock().unwrap();
            let parts = items.get_mut(&k).unwrap().sealed.as_mut().unwrap();
            let i = parts.value.len() / 2;
            parts.value[i] ^= 1;
        }
        let r = store.get(&["n"], "a").await;
        assert!(decrypt_error(r, "authentication failed"), "tampered value");
        // A failing read fails its batch, and the batch's writes with it.
        let r = store
            .batch(vec![
                Op::put(&["n"], "c", json!(1)),
                Op::delete(&["n"], "b"),
                Op::search(&["n"], Search::new()),
            ])
            .await;
        assert!(decrypt_error(r, "authentication failed"), "batch over it");
        assert_eq!(store.get(&["n"], "c").await.unwrap(), None);
        assert!(store.get(&["n"], "b").await.unwrap().is_some());
        // Another item's sealed value, moved here.
        {
            let mut items = items.lock().unwrap();
            let b = items[&("n".to_owned(), "b".to_owned())].sealed.clone();
            items.get_mut(&k).unwrap().sealed = b;
        }
        let r = store.get(&["n"], "a").await;
        assert!(decrypt_error(r, "authentication failed"), "moved value");

        // Clones share the items: a plain handle does not read sealed
        // ones, a sealing one does not read plain ones.
        let r = plain.get(&["n"], "b").await;
        assert!(
            decrypt_error(r, "it is encrypted"),
            "plain handle, sealed item"
        );
        plain.put(&["legacy"], "p", json!({"n": 3})).await.unwrap();
        let r = store.get(&["legacy"], "p").await;
        assert!(
            decrypt_error(r, "not encrypted"),
            "sealed handle, plain item"
        );
    }
}
