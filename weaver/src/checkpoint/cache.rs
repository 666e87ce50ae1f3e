//! [`DeltaCache`]: full values of delta channels a saver's handles rebuilt
//! lately, and the [`Deletions`] that say which of them still hold.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::types::CheckpointRef;

/// Full values of delta channels at one checkpoint, by channel name.
pub(crate) type Values = BTreeMap<String, Arc<Vec<Value>>>;

/// At most this many checkpoints' values are cached...
const CACHE_ENTRIES: usize = 256;
/// ...holding at most this many items in all.
const CACHE_ITEMS: usize = 1 << 20;

/// How many thread deletions (and deleting prunes) one saver's handles
/// have made, in 64 buckets by a hash of the thread id. A checkpoint's
/// record changes only when a tool rewrites it in place
/// ([`Rewrites`](super::Rewrites), which notes it here as a deletion), and
/// a deleted thread's ids may be stored again with other records (a
/// restore, a redaction): a cached value of a thread is trusted only while
/// its bucket saw no deletion since it was cached. Deletions of other
/// threads rarely touch it. Deletions made by another process are not
/// seen; a tool there that rewrites records under existing ids must be
/// followed by fresh savers and graphs here.
#[derive(Debug)]
pub(crate) struct Deletions([AtomicU64; 64]);

impl Default for Deletions {
    fn default() -> Self {
        Deletions([const { AtomicU64::new(0) }; 64])
    }
}

impl Deletions {
    fn bucket(&self, thread_id: &str) -> &AtomicU64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        thread_id.hash(&mut h);
        &self.0[(h.finish() % 64) as usize]
    }

    /// Records a deletion of `thread_id`: cache entries of its bucket made
    /// before it are dropped on use.
    pub(crate) fn note(&self, thread_id: &str) {
        self.bucket(thread_id).fetch_add(1, Ordering::SeqCst);
    }

    /// The deletion count of `thread_id`'s bucket, stored with each cache
    /// entry.
    pub(crate) fn of(&self, thread_id: &str) -> u64 {
        self.bucket(thread_id).load(Ordering::SeqCst)
    }
}

/// Full values of delta channels at checkpoints one saver's handles rebuilt
/// lately (or `update_state` stored on), by (thread, namespace, checkpoint
/// id), so that a thread's next read rebuilds from them instead of reading
/// its lineage again. A stored checkpoint never changes, so an entry stays
/// true until a deletion of its thread ([`Deletions::note`]) lets its ids
/// be reused.
#[derive(Default)]
pub(crate) struct DeltaCache {
    inner: Mutex<CacheInner>,
}

impl std::fmt::Debug for DeltaCache {
    // The values may be large: show how much is kept, not what.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = self.lock();
        f.debug_struct("DeltaCache")
            .field("checkpoints", &c.map.len())
            .field("items", &c.items)
            .finish()
    }
}

#[derive(Default)]
struct CacheInner {
    /// The values, and [`Deletions::of`] their thread when they were cached.
    map: HashMap<Key, (u64, Values)>,
    order: VecDeque<Key>,
    items: usize,
}

impl DeltaCache {
    /// How many items the cache holds.
    #[cfg(test)]
    pub(crate) fn items(&self) -> usize {
        self.lock().items
    }
}

fn items_of(values: &Values) -> usize {
    values.values().map(|v| v.len()).sum()
}

impl DeltaCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        // The map stays consistent whatever panicked while it was held.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers the full values of delta channels at checkpoint `at`, read
    /// (or written) when [`Deletions::of`] its thread was `epoch`: values read
    /// before a deletion are never served after it, however late they
    /// arrive.
    pub(crate) fn remember(&self, at: &CheckpointRef, values: Values, epoch: u64) {
        let size = items_of(&values);
        if values.is_empty() || at.checkpoint_id.is_none() || size > CACHE_ITEMS {
            return;
        }
        let mut c = self.lock();
        let k = key(at);
        if let Some((_, old)) = c.map.insert(k.clone(), (epoch, values)) {
            c.items -= items_of(&old);
        } else {
            c.order.push_back(k);
        }
        c.items += size;
        while c.order.len() > CACHE_ENTRIES || c.items > CACHE_ITEMS {
            let Some(old) = c.order.pop_front() else {
                break;
            };
            if let Some((_, v)) = c.map.remove(&old) {
                c.items -= items_of(&v);
            }
        }
    }

    /// The values cached at `at`, if cached when [`Deletions::of`] its
    /// thread was `epoch` (what it is now).
    pub(crate) fn get(&self, at: &CheckpointRef, epoch: u64) -> Option<Values> {
        self.lock()
            .map
            .get(&key(at))
            .filter(|(e, _)| *e == epoch)
            .map(|(_, v)| v.clone())
    }

    /// Drops every entry of `thread_id`.
    pub(crate) fn forget_thread(&self, thread_id: &str) {
        let mut c = self.lock();
        let CacheInner { map, order, items } = &mut *c;
        map.retain(|k, (_, v)| {
            let keep = k.0 != thread_id;
            if !keep {
                *items -= items_of(v);
            }
            keep
        });
        order.retain(|k| k.0 != thread_id);
    }
}

/// A checkpoint's address: thread, namespace, id.
pub(crate) type Key = (String, String, String);

/// The [`Key`] of `r`.
pub(crate) fn key(r: &CheckpointRef) -> Key {
    (
        r.thread_id.clone(),
        r.checkpoint_ns.clone(),
        r.checkpoint_id.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn values(n: usize) -> Values {
        let items = (0..n).map(|i| json!(i)).collect();
        Values::from([("messages".to_owned(), Arc::new(items))])
    }

    #[test]
    fn the_cache_is_bounded_and_forgets_deleted_threads() {
        let cache = DeltaCache::default();
        let at = |t: &str, i: usize| CheckpointRef::latest(t).at(format!("c{i}"));
        for i in 0..CACHE_ENTRIES + 10 {
            cache.remember(&at("a", i), values(1), 0);
        }
        assert!(cache.get(&at("a", 0), 0).is_none());
        assert!(cache.get(&at("a", CACHE_ENTRIES + 9), 0).is_some());
        assert_eq!(cache.lock().items, CACHE_ENTRIES);
        // Too many items in all: the oldest go first.
        cache.remember(&at("b", 0), values(CACHE_ITEMS - 5), 0);
        assert!(cache.get(&at("b", 0), 0).is_some());
        assert!(cache.lock().items <= CACHE_ITEMS);
        // A value larger than the whole cache is not kept.
        cache.remember(&at("b", 1), values(CACHE_ITEMS + 1), 0);
        assert!(cache.get(&at("b", 1), 0).is_none());
        cache.forget_thread("b");
        assert!(cache.get(&at("b", 0), 0).is_none());
        {
            let c = cache.lock();
            assert_eq!(
                c.items,
                c.map.values().map(|(_, v)| items_of(v)).sum::<usize>()
            );
            assert_eq!(c.order.len(), c.map.len());
        }
        assert!(format!("{cache:?}").starts_with("DeltaCache { checkpoints: "));
    }
}
