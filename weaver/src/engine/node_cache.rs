//! The results a node with a [`CachePolicy`] returned lately, by key, kept
//! in memory by the compiled graph (one per such node).
//!
//! Not the graph's memory [`Store`](crate::Store): that is the user's
//! long-term memory (namespaced, searchable, often in a database, with no
//! expiry), which cached node results would crowd and slow down; LangGraph
//! keeps its node cache apart from its store too.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::time::Instant;

use super::node::Command;
use super::policy::CachePolicy;
use crate::error::{Error, Result};
use crate::panics::panic_message;
use crate::state::GraphState;

/// A cache key: 128 bits of two hashers keyed at random per cache, so keys
/// that differ collide only by chance, never by design.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key(u64, u64);

struct Entry<U> {
    command: Command<U>,
    expires: Option<Instant>,
}

/// The entries of one node.
pub(crate) struct NodeCache<S: GraphState> {
    hashers: (RandomState, RandomState),
    entries: Mutex<Entries<S::Update>>,
}

struct Entries<U> {
    map: HashMap<Key, Entry<U>>,
    /// The size at which expired entries are swept out next.
    sweep_at: usize,
}

/// The fewest entries at which a sweep of expired ones starts.
const FIRST_SWEEP: usize = 64;

impl<S: GraphState> NodeCache<S> {
    pub fn new() -> Self {
        NodeCache {
            hashers: (RandomState::new(), RandomState::new()),
            entries: Mutex::new(Entries {
                map: HashMap::new(),
                sweep_at: FIRST_SWEEP,
            }),
        }
    }

    /// The key of a node run by sends: its payload serialized, the
    /// policy's key function (which reads the state) left aside.
    fn key_of_payload(&self, payload: &serde_json::Value) -> Result<Key> {
        let bytes = serde_json::to_vec(payload).map_err(|e| Error::encode("cache key", e))?;
        Ok(self.hashed(false, &bytes))
    }

    /// The key of `state` under `policy` (its key function's result, or the
    /// state serialized), or of `payload` when given (a node run by sends).
    /// A key function that panics, or a state that does not serialize, is
    /// an error (the task fails with it).
    pub fn key_for(
        &self,
        policy: &CachePolicy<S>,
        state: &S,
        payload: Option<&serde_json::Value>,
    ) -> Result<Key> {
        if let Some(payload) = payload {
            return self.key_of_payload(payload);
        }
        let bytes = match &policy.key {
            Some(f) => std::panic::catch_unwind(AssertUnwindSafe(|| f(state)))
                .map(String::into_bytes)
                .map_err(|panic| {
                    Error::encode(
                        "cache key",
                        format!("the key function panicked: {}", panic_message(&*panic)),
                    )
                })?,
            // Through a JSON value: its maps are ordered by key, so equal
            // states with `HashMap` fields built apart give one key; a
            // non-finite float (which JSON writes as `null`) or a panicking
            // `Serialize` is an error, not a key shared with other states.
            None => {
                let value = super::finite::encode_value("cache key", state)?;
                serde_json::to_vec(&value).map_err(|e| Error::encode("cache key", e))?
            }
        };
        Ok(self.hashed(policy.key.is_some(), &bytes))
    }

    /// The key of `bytes` (from a key function's result or not).
    fn hashed(&self, from_key_fn: bool, bytes: &[u8]) -> Key {
        let hash = |h: &RandomState| {
            let mut hasher = h.build_hasher();
            from_key_fn.hash(&mut hasher);
            bytes.hash(&mut hasher);
            hasher.finish()
        };
        Key(hash(&self.hashers.0), hash(&self.hashers.1))
    }

    /// The command cached under `key`, unless it expired.
    pub fn get(&self, key: Key) -> Option<Command<S::Update>> {
        let mut entries = self.lock();
        let entry = entries.map.get(&key)?;
        if entry.expires.is_some_and(|t| t <= Instant::now()) {
            entries.map.remove(&key);
            return None;
        }
        Some(entry.command.clone())
    }

    /// Caches `command` under `key` for `policy`'s time to live.
    pub fn put(&self, policy: &CachePolicy<S>, key: Key, command: Command<S::Update>) {
        let now = Instant::now();
        let expires = policy.ttl.and_then(|ttl| now.checked_add(ttl));
        let mut entries = self.lock();
        entries.map.insert(key, Entry { command, expires });
        if entries.map.len() >= entries.sweep_at {
            entries.map.retain(|_, e| e.expires.is_none_or(|t| t > now));
            entries.sweep_at = (entries.map.len() * 2).max(FIRST_SWEEP);
        }
    }

    /// Drops every entry.
    pub fn clear(&self) {
        let mut entries = self.lock();
        entries.map.clear();
        entries.sweep_at = FIRST_SWEEP;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries<S::Update>> {
        // An entry is written whole under the lock: a panic elsewhere while
        // it was held leaves nothing half-done.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
