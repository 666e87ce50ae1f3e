//! [`AdapterSaver`]: a full [`Saver`] on any [`SnapshotAdapter`].
//!
//! Each thread is one flow, `weaver:thread:<thread id>`, whose latest
//! snapshot holds the whole thread: every namespace, checkpoint and pending
//! write. An operation reads the latest snapshot of each thread it touches,
//! applies the saver's rules to that copy (those of [`InMemorySaver`]), and
//! saves the result as the next version. The adapter's first rule makes
//! that save a compare-and-set: a writer that lost a race to the same
//! version reads again and applies its operation anew, where weaver's own
//! checks (a taken commit order, a write check) then decide. Older versions
//! are pruned after each save; since a pruned version is no longer stored,
//! a writer that read the thread long before could save it again beneath
//! the latest, so each save carries its lineage and is read back once to
//! check that it joined the thread's line (`lineage.rs`), else it is
//! applied again. The threads known are listed in one more flow,
//! `weaver:threads`.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::adapter::{Snapshot, SnapshotAdapter};
use super::limits::ForkOptions;
use super::lineage;
use super::memory::{InMemorySaver, Log, Stored, Threads};
use super::saver::Saver;
use super::shared::SaverState;
use super::types::{
    BatchEntry, Checkpoint, CheckpointMetadata, CheckpointRef, CheckpointTuple, ListFilter,
    NewCheckpoint, PendingWrite, PruneStrategy, ThreadInfo, WriteOp,
};
use crate::error::{Error, Result};

/// The flow listing the threads an [`AdapterSaver`] has written.
const CATALOG: &str = "weaver:threads";
/// How many times an operation that keeps losing races is tried.
const ATTEMPTS: usize = 64;

/// The error of an operation that lost [`ATTEMPTS`] races for the
/// adapter's records in a row: a storage error, not a
/// [`Error::VersionConflict`], which would name one of the adapter's own
/// records and versions as if it were a thread's.
fn contended() -> Error {
    Error::storage(
        "adapter",
        format!("lost {ATTEMPTS} races in a row for the adapter's records; try again"),
    )
}
/// How many versions of a flow stay after a save: the latest alone, so
/// nothing deleted or pruned stays behind in an older one.
const KEEP_VERSIONS: usize = 1;

/// The flow of thread `thread_id`.
fn flow(thread_id: &str) -> String {
    format!("weaver:thread:{thread_id}")
}

/// A [`Saver`] on a [`SnapshotAdapter`]: checkpoints, pending writes,
/// namespaces, history filters, forks, copies and prunes, all on the seven
/// operations of numbered snapshots.
///
/// Every operation on one thread is one snapshot saved, so it is atomic
/// and two racing writers are told apart by the adapter's version conflict.
/// An operation spanning several threads (a batch or prune over several,
/// a copy or fork into another) saves them one after the other; when one
/// of the saves loses a race, those already saved are written back as they
/// were and the whole operation is applied again. An adapter has no
/// transaction over several flows, so this is not atomic against every
/// race: a thread another writer saved again between this operation's save
/// and its write-back keeps both saves, and the operation, applied again,
/// finds its own change there. It has no [`Leases`](super::Leases) and no
/// [`Rewrites`](super::Rewrites) ([`Saver::leases`] and
/// [`Saver::rewrites`] are `None`): a run on it takes no lease, whatever
/// its [`Multitask`](crate::config::Multitask), and races as under
/// `Multitask::Race`; [`upgrade_stored`](crate::evolution::upgrade_stored)
/// refuses it. Reads of all threads (a
/// listing without `thread_id`, [`list_threads`](Saver::list_threads)) read
/// every thread. Cloning shares the adapter. A thread is the flow
/// `weaver:thread:<id>`, so its id keeps to the flow ids of
/// [`check_flow_id`](super::check_flow_id) (no control characters, at most
/// 1,010 bytes): another id is [`Error::InvalidArgument`](crate::Error::InvalidArgument)
/// on every call. A thread whose snapshot holds a record of a format newer
/// than this build reads (a newer release wrote it) is
/// [`Error::Decode`](crate::Error::Decode) on reads of it and on every
/// write that would save it again; it can still be deleted.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use weaver::checkpoint::{AdapterSaver, CheckpointRef, MemoryAdapter, Saver};
/// use weaver::prelude::*;
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
/// struct Count {
///     n: u32,
/// }
///
/// let saver = AdapterSaver::new(MemoryAdapter::new());
/// let graph = Graph::<Count>::new("count")
///     .add_node("add", |s: &Count| CountUpdate::default().n(s.n + 1))
///     .add_sequence([START, "add", END])
///     .compile(Compile::new().checkpointer(saver.clone()))
///     .unwrap();
/// let out = graph.invoke(Count::default(), &RunConfig::thread("t")).await.unwrap();
/// assert_eq!(out.complete().unwrap().n, 1);
/// let head = saver.get_tuple(&CheckpointRef::latest("t")).await.unwrap().unwrap();
/// assert_eq!(head.checkpoint.channel_values["n"], 1);
/// # });
/// ```
#[derive(Debug)]
pub struct AdapterSaver<A> {
    adapter: Arc<A>,
    state: Arc<SaverState>,
}

impl<A> Clone for AdapterSaver<A> {
    fn clone(&self) -> Self {
        AdapterSaver {
            adapter: self.adapter.clone(),
            state: self.state.clone(),
        }
    }
}

/// One stored checkpoint in a thread's snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Record {
    order: u64,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    parent_id: Option<String>,
    writes: Vec<PendingWrite>,
    stored_at: SystemTime,
}

/// What a thread's snapshot holds: its records by namespace, oldest first.
type Image = BTreeMap<String, Vec<Record>>;

fn image_of(nss: &BTreeMap<String, Log>) -> Image {
    nss.iter()
        .filter(|(_, log)| !log.by_order.is_empty())
        .map(|(ns, log)| {
            let records = log.by_order.iter().map(|(order, s)| Record {
                order: *order,
                checkpoint: s.checkpoint.clone(),
                metadata: s.metadata.clone(),
                parent_id: s.parent_id.clone(),
                writes: s.writes.values().cloned().collect(),
                stored_at: s.stored_at,
            });
            (ns.clone(), records.collect())
        })
        .collect()
}

/// The version after `version` of the adapter's flow `flow_id`; a stored
/// version with none after it is bad data, not a wrapped number.
fn next(flow_id: &str, version: u64) -> Result<u64> {
    version.checked_add(1).ok_or_else(|| {
        Error::decode(
            format!("snapshot `{flow_id}`"),
            format_args!("version {version} has no version after it"),
        )
    })
}

/// Refuses an image to save holding a record of a format newer than this
/// build reads: read into this build's types, it has lost what the newer
/// format added, and saving it would store it so.
fn refuse_newer(thread_id: &str, image: &Image) -> Result<()> {
    for r in image.values().flatten() {
        if r.checkpoint.v > super::types::DELTA_CHECKPOINT_FORMAT {
            return Err(Error::decode(
                format!(
                    "checkpoint `{}` of thread `{thread_id}` in its snapshot",
                    r.checkpoint.id
                ),
                format!(
                    "record format {} is newer than this build reads ({}); upgrade weaver (the thread is not saved again by this one)",
                    r.checkpoint.v,
                    super::types::DELTA_CHECKPOINT_FORMAT
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses records read of a format newer than this build reads, as the
/// other savers' reads do.
fn checked(tuples: Vec<CheckpointTuple>) -> Result<Vec<CheckpointTuple>> {
    for t in &tuples {
        super::delta::check_format(t)?;
    }
    Ok(tuples)
}

/// The logs of a decoded image; a repeated commit order or id is bad data.
fn logs_of(thread_id: &str, image: Image) -> Result<BTreeMap<String, Log>> {
    let bad = |why: String| Error::decode(format!("snapshot of thread `{thread_id}`"), why);
    let mut nss = BTreeMap::new();
    for (ns, records) in image {
        let mut log = Log::default();
        for r in records {
            if log.by_order.contains_key(&r.order) || r.order == 0 {
                return Err(bad(format!("commit order {} repeated or zero", r.order)));
            }
            // Commit orders stop at i64::MAX, as in every saver (so that
            // `head + 1` cannot overflow).
            if i64::try_from(r.order).is_err() {
                return Err(bad(format!("commit order {} out of range", r.order)));
            }
            if log.by_id.insert(r.checkpoint.id.clone(), r.order).is_some() {
                return Err(bad(format!("checkpoint id `{}` repeated", r.checkpoint.id)));
            }
            let writes = r
                .writes
                .into_iter()
                .map(|w| ((w.task_id.clone(), w.idx), w))
                .collect();
            let stored = Stored {
                checkpoint: r.checkpoint,
                metadata: r.metadata,
                parent_id: r.parent_id,
                writes,
                stored_at: r.stored_at,
            };
            log.by_order.insert(r.order, stored);
        }
        nss.insert(ns, log);
    }
    Ok(nss)
}

/// A thread as read: the version its image is at (0: none saved), the
/// image's data and the lineage of the save that stored it.
struct Loaded {
    thread: String,
    version: u64,
    data: Value,
    lineage: Vec<u64>,
    image: Image,
    logs: BTreeMap<String, Log>,
}

/// An operation on the working copy of the threads it touches.
type Op<'o, T> = dyn Fn(InMemorySaver) -> Pin<Box<dyn Future<Output = Result<T>> + Send + 'o>>
    + Send
    + Sync
    + 'o;

impl<A: SnapshotAdapter> AdapterSaver<A> {
    /// A saver storing through `adapter`.
    ///
    /// ```
    /// use weaver::checkpoint::{AdapterSaver, MemoryAdapter};
    /// let saver = AdapterSaver::new(MemoryAdapter::new());
    /// # let _ = saver;
    /// ```
    pub fn new(adapter: A) -> Self {
        AdapterSaver {
            adapter: Arc::new(adapter),
            state: Arc::default(),
        }
    }

    /// The adapter it stores through.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::checkpoint::{AdapterSaver, MemoryAdapter, SnapshotAdapter};
    /// let saver = AdapterSaver::new(MemoryAdapter::new());
    /// assert!(!saver.adapter().flow_exists("weaver:threads").await.unwrap());
    /// # });
    /// ```
    pub fn adapter(&self) -> &A {
        &self.adapter
    }

    async fn load(&self, thread: &str) -> Result<Loaded> {
        super::text::check_id("thread id", thread)?;
        let flow_id = flow(thread);
        let snap = self.adapter.load_snapshot(&flow_id, None).await?;
        let Some(snap) = snap else {
            return Ok(Loaded {
                thread: thread.to_owned(),
                version: 0,
                data: Value::Null,
                lineage: Vec::new(),
                image: Image::new(),
                logs: BTreeMap::new(),
            });
        };
        if snap.flow_id != flow_id || snap.version == 0 {
            return Err(Error::decode(
                format!("snapshot of thread `{thread}`"),
                format!(
                    "the adapter returned version {} of flow `{}`",
                    snap.version, snap.flow_id
                ),
            ));
        }
        let (data, lineage) = lineage::open(snap.data);
        let image: Image = if data.is_null() {
            Image::new()
        } else {
            serde_json::from_value(data.clone())
                .map_err(|e| Error::decode(format!("snapshot of thread `{thread}`"), e))?
        };
        let logs = logs_of(thread, image.clone())?;
        Ok(Loaded {
            thread: thread.to_owned(),
            version: snap.version,
            data,
            lineage,
            image,
            logs,
        })
    }

    /// Reads `threads` into one working copy.
    async fn working(&self, threads: &[String]) -> Result<(InMemorySaver, Vec<Loaded>)> {
        let names: BTreeSet<&String> = threads.iter().collect();
        let mut loaded = Vec::with_capacity(names.len());
        let mut all = Threads::new();
        for t in names {
            let l = self.load(t).await?;
            if !l.logs.is_empty() {
                all.insert(t.clone(), l.logs.clone());
            }
            loaded.push(l);
        }
        Ok((InMemorySaver::holding(all), loaded))
    }

    async fn read<T>(&self, threads: &[String], op: &Op<'_, T>) -> Result<T> {
        let (mem, _) = self.working(threads).await?;
        op(mem.clone()).await
    }

    /// The thread ids the catalog lists, its version and its lineage.
    async fn catalog(&self) -> Result<(u64, BTreeSet<String>, Vec<u64>)> {
        let Some(snap) = self.adapter.load_snapshot(CATALOG, None).await? else {
            return Ok((0, BTreeSet::new(), Vec::new()));
        };
        let (data, line) = lineage::open(snap.data);
        let ids = serde_json::from_value(data)
            .map_err(|e| Error::decode("the thread catalog snapshot", e))?;
        Ok((snap.version, ids, line))
    }

    /// Saves `data` as `version` of `flow_id`, descending from the save
    /// whose lineage is `parent`: the new lineage, or a version conflict
    /// when another writer holds the version or the save landed beside the
    /// flow's line, below newer versions (see [`lineage`]).
    async fn save_in_line(
        &self,
        flow_id: &str,
        version: u64,
        data: Value,
        parent: &[u64],
    ) -> Result<Vec<u64>> {
        let (data, line) = lineage::seal(data, parent);
        let snapshot = Snapshot::new(flow_id, version, data);
        self.adapter.save_snapshot(snapshot.clone()).await?;
        let latest = self.adapter.load_snapshot(flow_id, None).await?;
        if lineage::in_line(latest, version, line[0])? {
            Ok(line)
        } else {
            Err(snapshot.conflict())
        }
    }

    /// Adds (`add`) or removes a thread id from the catalog.
    async fn catalog_set(&self, thread: &str, add: bool) -> Result<()> {
        for _ in 0..ATTEMPTS {
            let (version, mut ids, line) = self.catalog().await?;
            let changed = if add {
                ids.insert(thread.to_owned())
            } else {
                ids.remove(thread)
            };
            if !changed {
                return Ok(());
            }
            let data =
                serde_json::to_value(&ids).map_err(|e| Error::encode("thread catalog", e))?;
            match self
                .save_in_line(CATALOG, next(CATALOG, version)?, data, &line)
                .await
            {
                Ok(_) => {
                    self.adapter.prune_history(CATALOG, KEEP_VERSIONS).await?;
                    return Ok(());
                }
                Err(Error::VersionConflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(contended())
    }

    /// Every thread the catalog lists.
    async fn all_threads(&self) -> Result<Vec<String>> {
        Ok(self.catalog().await?.1.into_iter().collect())
    }

    /// Applies `op` to a working copy of `threads` and saves what changed,
    /// again on a fresh copy whenever a save loses a race.
    async fn write<T>(&self, threads: &[String], op: &Op<'_, T>) -> Result<T> {
        for _ in 0..ATTEMPTS {
            let (mem, loaded) = self.working(threads).await?;
            let out = op(mem.clone()).await?;
            match self.commit(&mem, &loaded).await {
                Ok(()) => return Ok(out),
                // The adapter's own records' race (the engine's conflicts
                // are returned at once, by `op`): tried again.
                Err(Error::VersionConflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Err(contended())
    }

    /// Saves each thread of `loaded` the working copy changed; on a lost
    /// race writes back those already saved and returns the conflict.
    async fn commit(&self, mem: &InMemorySaver, loaded: &[Loaded]) -> Result<()> {
        let images: Vec<Image> = loaded
            .iter()
            .map(|l| image_of(&mem.thread_copy(&l.thread)))
            .collect();
        // Nothing is saved if one thread cannot be: a record of a newer
        // format is never saved again (an emptied thread is, deleted).
        for (l, image) in loaded.iter().zip(&images) {
            if *image != l.image {
                refuse_newer(&l.thread, image)?;
            }
        }
        let mut saved: Vec<(&Loaded, u64, Vec<u64>)> = Vec::new();
        for (l, image) in loaded.iter().zip(images) {
            if image == l.image {
                continue;
            }
            if l.image.is_empty() {
                self.catalog_set(&l.thread, true).await?;
            }
            let data = if image.is_empty() {
                Value::Null
            } else {
                serde_json::to_value(&image)
                    .map_err(|e| Error::encode(format!("snapshot of thread `{}`", l.thread), e))?
            };
            let flow_id = flow(&l.thread);
            let version = next(&flow_id, l.version)?;
            let line = match self.save_in_line(&flow_id, version, data, &l.lineage).await {
                Ok(line) => line,
                Err(e) => {
                    self.undo(&saved).await?;
                    return Err(e);
                }
            };
            saved.push((l, version, line));
            // The save is stored: what follows is housekeeping, which may
            // fail without the operation failing (a caller told it failed
            // would apply it again). A version left unpruned or a catalog
            // entry left behind is put right by a later save.
            if let Err(e) = self
                .tidy(&l.thread, &flow_id, image.is_empty(), l.image.is_empty())
                .await
            {
                tracing::warn!(thread = %l.thread, error = %e, "housekeeping after a stored snapshot failed");
            }
        }
        Ok(())
    }

    /// After a save of `thread`: older versions of its flow pruned, and the
    /// catalog brought in line (`emptied`: the save left it empty; `new`: it
    /// was empty before).
    async fn tidy(&self, thread: &str, flow_id: &str, emptied: bool, new: bool) -> Result<()> {
        self.adapter.prune_history(flow_id, KEEP_VERSIONS).await?;
        if emptied {
            self.forget(thread).await?;
        } else if new {
            // Listed again once saved: a delete of the thread that took
            // it off the catalog between the listing above and this
            // save found it still empty and left it off. Unless a delete
            // emptied it since: then it comes off again.
            self.catalog_set(thread, true).await?;
            if self.load(thread).await?.image.is_empty() {
                self.forget(thread).await?;
            }
        }
        Ok(())
    }

    /// Writes back the threads `saved` as they were before this operation.
    async fn undo(&self, saved: &[(&Loaded, u64, Vec<u64>)]) -> Result<()> {
        for (l, version, line) in saved {
            let flow_id = flow(&l.thread);
            let version = next(&flow_id, *version)?;
            self.save_in_line(&flow_id, version, l.data.clone(), line)
                .await?;
        }
        Ok(())
    }

    /// Takes an emptied thread off the catalog, unless another writer has
    /// written it again meanwhile.
    async fn forget(&self, thread: &str) -> Result<()> {
        self.catalog_set(thread, false).await?;
        if !self.load(thread).await?.image.is_empty() {
            self.catalog_set(thread, true).await?;
        }
        Ok(())
    }
}

/// Boxes an operation on the working copy.
macro_rules! op {
    (|$m:ident| $body:expr) => {
        &move |$m: InMemorySaver| Box::pin(async move { $body })
    };
}

#[async_trait]
impl<A: SnapshotAdapter> Saver for AdapterSaver<A> {
    async fn get_stored(&self, target: &CheckpointRef) -> Result<Option<CheckpointTuple>> {
        super::text::check_ref(target)?;
        let threads = [target.thread_id.clone()];
        let found = self
            .read(&threads, op!(|m| m.get_stored(target).await))
            .await?;
        Ok(checked(found.into_iter().collect())?.pop())
    }

    async fn list_stored(&self, filter: &ListFilter) -> Result<Vec<CheckpointTuple>> {
        filter.check()?;
        let threads = match &filter.thread_id {
            Some(t) => vec![t.clone()],
            None => self.all_threads().await?,
        };
        checked(
            self.read(&threads, op!(|m| m.list_stored(filter).await))
                .await?,
        )
    }

    async fn put_writes(&self, target: &CheckpointRef, writes: Vec<PendingWrite>) -> Result<()> {
        let threads = [target.thread_id.clone()];
        let writes = &writes;
        self.write(
            &threads,
            op!(|m| m.put_writes(target, writes.clone()).await),
        )
        .await
    }

    async fn put_group(&self, ops: Vec<WriteOp>) -> Result<()> {
        let threads: Vec<String> = ops.iter().map(|o| o.thread_id().to_owned()).collect();
        let ops = &ops;
        self.write(&threads, op!(|m| m.put_group(ops.clone()).await))
            .await
    }

    async fn put_checkpoint_with_writes(
        &self,
        checkpoint: NewCheckpoint,
        writes: Vec<PendingWrite>,
    ) -> Result<CheckpointRef> {
        let threads = [checkpoint.thread_id.clone()];
        let (checkpoint, writes) = (&checkpoint, &writes);
        self.write(
            &threads,
            op!(|m| m
                .put_checkpoint_with_writes(checkpoint.clone(), writes.clone())
                .await),
        )
        .await
    }

    async fn put_batch(&self, entries: Vec<BatchEntry>) -> Result<Vec<CheckpointRef>> {
        let threads: Vec<String> = entries
            .iter()
            .map(|e| e.checkpoint.thread_id.clone())
            .collect();
        let entries = &entries;
        self.write(&threads, op!(|m| m.put_batch(entries.clone()).await))
            .await
    }

    async fn fork_lineage(
        &self,
        source: &CheckpointRef,
        target_thread: &str,
        options: ForkOptions,
    ) -> Result<CheckpointRef> {
        let threads = [source.thread_id.clone(), target_thread.to_owned()];
        self.write(
            &threads,
            op!(|m| m.fork_lineage(source, target_thread, options).await),
        )
        .await
    }

    async fn copy_thread(&self, source_thread: &str, target_thread: &str) -> Result<()> {
        let threads = [source_thread.to_owned(), target_thread.to_owned()];
        self.write(
            &threads,
            op!(|m| m.copy_thread(source_thread, target_thread).await),
        )
        .await
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        let threads = [thread_id.to_owned()];
        self.write(&threads, op!(|m| m.delete_thread(thread_id).await))
            .await?;
        self.state.note_deletion(thread_id);
        Ok(())
    }

    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<u64> {
        strategy.keep()?;
        let deleted = self
            .write(thread_ids, op!(|m| m.prune(thread_ids, strategy).await))
            .await?;
        if strategy == PruneStrategy::Delete {
            for t in thread_ids {
                self.state.note_deletion(t);
            }
        }
        Ok(deleted)
    }

    async fn list_threads(&self, limit: Option<usize>, offset: usize) -> Result<Vec<ThreadInfo>> {
        let threads = self.all_threads().await?;
        self.read(&threads, op!(|m| m.list_threads(limit, offset).await))
            .await
    }

    async fn thread_info(&self, thread_id: &str) -> Result<Option<ThreadInfo>> {
        let threads = [thread_id.to_owned()];
        self.read(&threads, op!(|m| m.thread_info(thread_id).await))
            .await
    }

    async fn at_commit_order(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        commit_order: u64,
    ) -> Result<Option<CheckpointRef>> {
        let threads = [thread_id.to_owned()];
        self.read(
            &threads,
            op!(|m| m
                .at_commit_order(thread_id, checkpoint_ns, commit_order)
                .await),
        )
        .await
    }

    async fn lineage(
        &self,
        from: &CheckpointRef,
        count: usize,
        below: Option<u64>,
    ) -> Result<Vec<CheckpointTuple>> {
        super::text::check_ref(from)?;
        let threads = [from.thread_id.clone()];
        checked(
            self.read(&threads, op!(|m| m.lineage(from, count, below).await))
                .await?,
        )
    }

    fn supports_deltas(&self) -> bool {
        true
    }

    fn shared_state(&self) -> Option<Arc<SaverState>> {
        Some(self.state.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::MemoryAdapter;
    use serde_json::json;

    /// A writer that read version 1 of a thread, while two more saves
    /// pruned it and version 2 away, saves version 2 again: the adapter
    /// takes it (version 2 is no longer stored), and the saver must see it
    /// landed beside the line instead of reporting its operation done.
    #[tokio::test]
    async fn a_save_into_a_pruned_version_is_a_conflict() {
        let saver = AdapterSaver::new(MemoryAdapter::new());
        let flow_id = flow("t");
        let first = saver
            .save_in_line(&flow_id, 1, json!({}), &[])
            .await
            .unwrap();
        let second = saver
            .save_in_line(&flow_id, 2, json!({}), &first)
            .await
            .unwrap();
        saver
            .save_in_line(&flow_id, 3, json!({}), &second)
            .await
            .unwrap();
        saver.adapter.prune_history(&flow_id, 1).await.unwrap();
        let stale = saver.save_in_line(&flow_id, 2, json!({}), &first).await;
        assert!(
            matches!(stale, Err(Error::VersionConflict { attempted: 2, .. })),
            "{stale:?}"
        );
        let latest = saver.load("t").await.unwrap();
        assert_eq!(latest.version, 3, "the line goes on from version 3");
    }

    /// An adapter whose every save loses its race.
    #[derive(Debug, Default)]
    struct AlwaysLosing(MemoryAdapter);

    #[async_trait]
    impl SnapshotAdapter for AlwaysLosing {
        async fn save_snapshot(&self, snapshot: Snapshot) -> Result<()> {
            Err(snapshot.conflict())
        }
        async fn load_snapshot(
            &self,
            flow_id: &str,
            version: Option<u64>,
        ) -> Result<Option<Snapshot>> {
            self.0.load_snapshot(flow_id, version).await
        }
        async fn load_history(&self, flow_id: &str, limit: Option<usize>) -> Result<Vec<Snapshot>> {
            self.0.load_history(flow_id, limit).await
        }
        async fn delete_flow(&self, flow_id: &str) -> Result<()> {
            self.0.delete_flow(flow_id).await
        }
        async fn prune_history(&self, flow_id: &str, keep_last: usize) -> Result<u64> {
            self.0.prune_history(flow_id, keep_last).await
        }
        async fn snapshot_count(&self, flow_id: &str) -> Result<u64> {
            self.0.snapshot_count(flow_id).await
        }
        async fn flow_exists(&self, flow_id: &str) -> Result<bool> {
            self.0.flow_exists(flow_id).await
        }
    }

    /// An operation that keeps losing races for the adapter's records is a
    /// storage error, not a version conflict naming one of those records
    /// as a thread. (It was `VersionConflict` on `weaver:thread:t`.)
    #[tokio::test]
    async fn endless_lost_races_are_a_storage_error() {
        let saver = AdapterSaver::new(AlwaysLosing::default());
        let first = NewCheckpoint {
            thread_id: "t".into(),
            checkpoint_ns: String::new(),
            parent_id: None,
            checkpoint: crate::checkpoint::Checkpoint::empty(),
            metadata: crate::checkpoint::CheckpointMetadata::new(
                crate::checkpoint::CheckpointSource::Input,
                -1,
            ),
            commit_order: None,
        };
        let put = saver.put(first).await;
        assert!(matches!(put, Err(Error::Storage { .. })), "{put:?}");
    }
}
