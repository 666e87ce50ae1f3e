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
use super::types::{Op, OpResult, StoreConfig};
use crate::error::Result;

type Items = BTreeMap<(String, String), Record>;

/// A [`Store`] in process memory; clones share the same items. Items are
/// kept ordered by (dotted namespace, key), so a search visits only the
/// items under its prefix.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> weaver::Result<()> {
/// use serde_json::json;
/// use weaver::store::{InMemoryStore, Store};
///
/// let store = InMemoryStore::new();
/// store.put(&["users", "u1", "prefs"], "theme", json!({"dark": true})).await?;
/// let item = store.get(&["users", "u1", "prefs"], "theme").await?.unwrap();
/// assert_eq!(item.value["dark"], true);
/// # Ok(())
/// # }
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
    pub fn new() -> Self {
        InMemoryStore::default()
    }

    /// An empty store with `config` (embedder, TTL).
    pub fn with_config(config: StoreConfig) -> Self {
        let mut inner = layered(MemoryItems::default());
        backend_mut(&mut inner).config = config;
        InMemoryStore { inner }
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

fn search(items: &mut Items, plan: &SearchPlan, now: i64) -> OpResult {
    let mut page = if plan.is_plain() {
        // Already in namespace/key order: read only the page.
        let page: Vec<(Record, Option<f64>)> = under(items, &plan.prefix)
            .map(|(_, r)| r)
            .filter(|r| r.is_live(now))
            .skip(plan.offset)
            .take(plan.limit)
            .map(|r| (r.clone(), None))
            .collect();
        page
    } else {
        let keys = live_under(items, &plan.prefix, now);
        let candidates = keys.iter().filter_map(|k| items.get(k).cloned()).collect();
        finish_search(candidates, plan)
    };
    if plan.refresh {
        for (r, _) in &mut page {
            if r.refresh(now)
                && let Some(stored) = items.get_mut(&(r.namespace.clone(), r.key.clone()))
            {
                stored.expires_at = r.expires_at;
            }
        }
    }
    found(&page)
}

fn list(items: &mut Items, plan: &ListPlan, now: i64) -> OpResult {
    let keys = live_under(items, &plan.prefix, now);
    OpResult::Namespaces(finish_list(keys.iter().map(|(ns, _)| ns.as_str()), plan))
}

#[async_trait]
impl Store for MemoryItems {
    async fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        let plans = prepare(ops, &self.config).await?;
        let mut items = self.lock();
        // Read under the lock: batches apply in the order of their
        // times, so an item is never updated before it was created.
        let now = now_micros();
        let results = plans
            .into_iter()
            .map(|plan| match plan {
                Plan::Get {
                    namespace,
                    key,
                    refresh,
                } => {
                    let k = (namespace, key);
                    match items.get_mut(&k) {
                        Some(r) if r.is_live(now) => {
                            if refresh {
                                r.refresh(now);
                            }
                            OpResult::Got(Some(r.to_item(None)))
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
                    items.insert(k, record);
                    OpResult::Put(item)
                }
                Plan::Delete { namespace, key } => {
                    items.remove(&(namespace, key));
                    OpResult::Deleted
                }
                Plan::Search(plan) => search(&mut items, &plan, now),
                Plan::List(plan) => list(&mut items, &plan, now),
            })
            .collect();
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
