//! The graph's cache of decoded checkpoints: typed values a read or a run
//! made, which the next read or run of the same checkpoint starts from.

use crate::checkpoint::delta::{self, DeltaBase};

/// Typed values (pending writes not applied) of checkpoints this graph
/// decoded from records that store delta channels: the oldest snapshot of
/// each recent history, and each checkpoint `get_state` read. The next
/// history of the same thread starts from them, and the next `get_state` of
/// the same checkpoint clones them, instead of rebuilding and decoding the
/// whole value again. A checkpoint's values never change while it exists;
/// an entry made before a deletion of its thread through the saver
/// ([`Checkpointer::deletions`]) is not used, since a deleted thread's ids may
/// be stored again. The cache holds [`SNAPSHOT_CACHE_ENTRIES`] at most, the
/// oldest entry leaving first.
///
/// A run remembers the state it last stored as well, with the checkpoint's
/// [`DeltaBase`], so that the next run on the thread from that checkpoint
/// starts from it without rebuilding and decoding the stored value.
pub(crate) struct SnapshotCache<S> {
    /// The entries, each with [`Checkpointer::deletions`] of its thread when made,
    /// and the checkpoint's delta base when a run made it.
    entries: std::sync::Mutex<std::collections::VecDeque<Entry<S>>>,
}

/// One [`SnapshotCache`] entry: the checkpoint, the deletions of its thread
/// when it was read, its values, and its delta base if a run stored it.
type Entry<S> = (delta::Key, u64, S, Option<DeltaBase>);

/// How many snapshots a [`SnapshotCache`] keeps.
const SNAPSHOT_CACHE_ENTRIES: usize = 8;

impl<S: Clone> SnapshotCache<S> {
    /// An empty cache.
    pub(crate) fn new() -> Self {
        SnapshotCache {
            entries: std::sync::Mutex::new(std::collections::VecDeque::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<Entry<S>>> {
        // Entries are whole values whatever panicked while it was held.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The values remembered for the checkpoint `key` when the deletions of
    /// its thread were `epoch` (what they are now): none if it was deleted
    /// since.
    pub(crate) fn get(&self, key: &delta::Key, epoch: u64) -> Option<S> {
        self.lock()
            .iter()
            .find(|(k, e, _, _)| k == key && *e == epoch)
            .map(|(_, _, v, _)| v.clone())
    }

    /// The values and delta base a run remembered for the checkpoint `key`
    /// ([`remember_stored`](Self::remember_stored)) when the deletions of
    /// its thread were `epoch` (what they are now).
    pub(crate) fn get_stored(&self, key: &delta::Key, epoch: u64) -> Option<(S, DeltaBase)> {
        self.lock().iter().find_map(|(k, e, v, base)| match base {
            Some(base) if k == key && *e == epoch => Some((v.clone(), base.clone())),
            _ => None,
        })
    }

    /// Remembers `values` of the checkpoint `key`, read when
    /// [`Checkpointer::deletions`] of its thread was `epoch`. An entry a run made
    /// for the same checkpoint (the same values) stays as it is.
    pub(crate) fn remember(&self, key: delta::Key, values: &S, epoch: u64) {
        self.insert((key, epoch, values.clone(), None));
    }

    /// Remembers the state a run stored as the checkpoint `key` (its values
    /// exactly), and that checkpoint's delta base, when
    /// [`Checkpointer::deletions`] of its thread was `epoch`.
    pub(crate) fn remember_stored(&self, key: delta::Key, values: &S, base: DeltaBase, epoch: u64) {
        self.insert((key, epoch, values.clone(), Some(base)));
    }

    /// Adds `entry` last, in place of any entry for the same checkpoint,
    /// unless that one was made by a run (it holds more) at the same epoch
    /// and `entry` was not.
    fn insert(&self, entry: Entry<S>) {
        let mut entries = self.lock();
        if let Some(i) = entries.iter().position(|(k, _, _, _)| *k == entry.0) {
            if entry.3.is_none() && entries[i].1 == entry.1 && entries[i].3.is_some() {
                return;
            }
            entries.remove(i);
        }
        entries.push_back(entry);
        while entries.len() > SNAPSHOT_CACHE_ENTRIES {
            entries.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_read_before_a_deletion_are_never_served_after_it() {
        let built: SnapshotCache<Vec<u32>> = SnapshotCache::new();
        let key: delta::Key = ("raced-snapshot".into(), String::new(), "c0".into());
        let deletions = delta::Deletions::default();
        let read_started = deletions.of(&key.0);
        deletions.note(&key.0);
        built.remember(key.clone(), &vec![1, 2], read_started);
        assert_eq!(built.get(&key, deletions.of(&key.0)), None);
        built.remember(key.clone(), &vec![3], deletions.of(&key.0));
        assert_eq!(built.get(&key, deletions.of(&key.0)), Some(vec![3]));
    }
}
