//! [`Checkpointer`]: the facade the engine and applications call, wrapping any
//! [`Saver`] in [`Traced`] spans, with explicit-error helpers, and waiting
//! for queued background writes before a read.

use std::sync::Arc;

use super::DeletionNote;
use super::delta::{self, Cached, ListedParents};
use super::fleet::{ThreadPage, ThreadQuery};
use super::limits::ForkOptions;
use super::saver::Saver;
use super::shared::SaverState;
use super::trace::Traced;
use super::types::{
    BatchEntry, CheckpointRef, CheckpointTuple, ListFilter, NewCheckpoint, PendingWrite,
    PruneStrategy, ThreadInfo, WriteOp,
};
use crate::error::{Error, Result};

/// A shared handle to a [`Saver`] whose every call runs in a `tracing` span
/// (`weaver.saver`, with the operation, thread id and duration; a lineage
/// read that rebuilds delta channels is one too).
///
/// [`fetch_tuple`](Checkpointer::fetch_tuple) turns "not found" into a typed
/// error; nothing here turns a storage failure into "not found" or an empty
/// list.
///
/// Reads rebuild delta channels (see [`Checkpoint`](super::Checkpoint)).
/// The saver's handles keep the full values of delta channels at the
/// checkpoints they rebuilt lately (a few hundred), and those
/// `update_state` stored on, so that a thread's next read starts from them
/// instead of reading back to the last full value; entries of a thread are
/// dropped when it is deleted. What a run stores is not kept there: the
/// next run starts from the typed state its graph keeps.
///
/// A read of a thread first waits for the background writes
/// ([`Durability::Async`](crate::Durability::Async)) any handle of the same
/// saver queued for it, so a run cut off while its last checkpoints were
/// still queued (a dropped stream) is seen whole by the next call, never
/// half, whichever graph makes it. The handles share this through the
/// saver's [`SaverState`] ([`Saver::shared_state`]); a saver that has none
/// gets one per facade (and its clones).
#[derive(Debug, Clone)]
pub struct Checkpointer {
    /// The saver, every call of it in a span.
    saver: Traced,
    state: Arc<SaverState>,
}

pub(crate) use super::shared::{Flight, FlightGuard};

impl Checkpointer {
    /// Wraps a saver.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::checkpoint::{Checkpointer, InMemorySaver};
    ///
    /// let cp = Checkpointer::new(InMemorySaver::new());
    /// assert!(cp.list_threads(None, 0).await?.is_empty());
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new(saver: impl Saver + 'static) -> Self {
        Checkpointer::from_arc(Arc::new(saver))
    }

    /// Wraps a shared saver.
    pub fn from_arc(saver: Arc<dyn Saver>) -> Self {
        let state = saver.shared_state().unwrap_or_default();
        Checkpointer {
            saver: Traced(saver),
            state,
        }
    }

    /// Registers a background writer of `thread` with the saver's handles;
    /// it stays registered until the guard is dropped.
    pub(crate) fn take_off(&self, thread: &str) -> FlightGuard {
        self.state.take_off(thread)
    }

    /// The background writers of `thread` registered with the saver's
    /// handles now.
    pub(crate) fn flights_of(&self, thread: &str) -> Vec<Arc<Flight>> {
        self.state.flights_of(thread)
    }

    /// Waits until no background writer of the saver has operations of
    /// `thread` queued.
    /// Returns whether there were any to wait for.
    pub(crate) async fn settle(&self, thread: &str) -> bool {
        self.state.settle(thread).await
    }

    /// How many deletions of `thread_id` (and of threads sharing its
    /// bucket) the saver's handles have seen: what a read caches is tagged
    /// with it, and served only while it stays the same.
    pub(crate) fn deletions(&self, thread_id: &str) -> u64 {
        self.state.deletions.of(thread_id)
    }

    /// Remembers the full values of delta channels at checkpoint `at`
    /// (what compacting its child cut off), known since the thread's
    /// [`deletions`](Checkpointer::deletions) were `epoch` (when the caller
    /// read the thread).
    pub(crate) fn remember_deltas(&self, at: &CheckpointRef, values: delta::Values, epoch: u64) {
        self.state.cache.remember(at, values, epoch);
    }

    /// How many items of delta channels the saver's cache holds.
    #[cfg(test)]
    pub(crate) fn cached_delta_items(&self) -> usize {
        self.state.cache.items()
    }

    /// The saver behind the facade.
    pub fn saver(&self) -> &Arc<dyn Saver> {
        &self.saver.0
    }

    /// [`Saver::get_tuple`]: `Ok(None)` when absent. Delta channels come
    /// back rebuilt (see [`Checkpoint`](super::Checkpoint)).
    pub async fn get_tuple(&self, target: &CheckpointRef) -> Result<Option<CheckpointTuple>> {
        let Some(t) = self.get_stored(target).await? else {
            return Ok(None);
        };
        let mut one = [t];
        self.resolve_listed(&mut one, ListedParents::Rebuild)
            .await?;
        let [t] = one;
        Ok(Some(t))
    }

    /// [`Saver::get_stored`]: the record as stored, delta channels not
    /// rebuilt ([`resolve_listed`](Checkpointer::resolve_listed) does that).
    pub(crate) async fn get_stored(
        &self,
        target: &CheckpointRef,
    ) -> Result<Option<CheckpointTuple>> {
        self.settle(&target.thread_id).await;
        self.saver.get_stored(target).await
    }

    /// Like [`get_tuple`](Checkpointer::get_tuple), but a missing checkpoint is
    /// [`Error::CheckpointNotFound`] (or [`Error::ThreadNotFound`] for a latest lookup).
    pub async fn fetch_tuple(&self, target: &CheckpointRef) -> Result<CheckpointTuple> {
        self.get_tuple(target)
            .await?
            .ok_or_else(|| match &target.checkpoint_id {
                Some(id) => Error::CheckpointNotFound {
                    thread_id: target.thread_id.clone(),
                    checkpoint_ns: target.checkpoint_ns.clone(),
                    checkpoint_id: id.clone(),
                },
                None => Error::ThreadNotFound {
                    thread_id: target.thread_id.clone(),
                },
            })
    }

    /// [`Saver::list`]: typed records for adapter and exporter code, with
    /// delta channels rebuilt.
    pub async fn list_records(&self, filter: &ListFilter) -> Result<Vec<CheckpointTuple>> {
        let mut tuples = self.list_stored(filter).await?;
        self.resolve_listed(&mut tuples, ListedParents::Rebuild)
            .await?;
        Ok(tuples)
    }

    /// [`Saver::list_stored`]: the records as stored, delta channels not rebuilt
    /// ([`resolve_listed`](Checkpointer::resolve_listed) does that).
    pub(crate) async fn list_stored(&self, filter: &ListFilter) -> Result<Vec<CheckpointTuple>> {
        match &filter.thread_id {
            Some(thread) => {
                self.settle(thread).await;
            }
            None => self.state.settle_all().await,
        }
        self.saver.list_stored(filter).await
    }

    /// Rebuilds the delta channels of listed records, leaving those of a
    /// record whose parent is listed as stored when `listed_parents` says so
    /// (see [`delta::resolve`]).
    pub(crate) async fn resolve_listed(
        &self,
        tuples: &mut [CheckpointTuple],
        listed_parents: ListedParents,
    ) -> Result<()> {
        let cached = Cached {
            cache: &self.state.cache,
            deletions: &self.state.deletions,
        };
        delta::resolve(&self.saver, cached, tuples, listed_parents).await
    }

    /// [`Saver::put`].
    pub async fn put(&self, checkpoint: NewCheckpoint) -> Result<CheckpointRef> {
        self.saver.put(checkpoint).await
    }

    /// [`Saver::put_writes`].
    pub async fn put_writes(
        &self,
        target: &CheckpointRef,
        writes: Vec<PendingWrite>,
    ) -> Result<()> {
        self.saver.put_writes(target, writes).await
    }

    /// [`Saver::put_writes`], once the background writes queued for the
    /// thread have landed (the checkpoint written to may be among them).
    pub(crate) async fn put_writes_settled(
        &self,
        target: &CheckpointRef,
        writes: Vec<PendingWrite>,
    ) -> Result<()> {
        self.settle(&target.thread_id).await;
        self.saver.put_writes(target, writes).await
    }

    /// [`Saver::put_checkpoint_with_writes`].
    pub async fn put_checkpoint_with_writes(
        &self,
        checkpoint: NewCheckpoint,
        writes: Vec<PendingWrite>,
    ) -> Result<CheckpointRef> {
        self.saver
            .put_checkpoint_with_writes(checkpoint, writes)
            .await
    }

    /// [`Saver::put_ops`].
    pub async fn put_ops(&self, ops: Vec<WriteOp>) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        self.saver.put_ops(ops).await
    }

    /// [`Saver::put_many`].
    pub async fn put_many(&self, entries: Vec<BatchEntry>) -> Result<Vec<CheckpointRef>> {
        self.saver.put_many(entries).await
    }

    /// [`Saver::fork_at`]: copies the lineage of checkpoint `source` (up to
    /// it), with the namespaces of the subgraphs its tasks ran, into the new
    /// thread `target_thread`.
    ///
    /// ```
    /// use weaver::checkpoint::{CheckpointRef, ForkOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("main")).await?;
    /// let cp = graph.checkpointer().unwrap();
    /// let head = graph.get_state(&RunConfig::thread("main")).await?;
    /// let at = CheckpointRef::latest("main").at(head.config.get_checkpoint_id().unwrap());
    /// cp.fork_at(&at, "branch", ForkOptions::default()).await?;
    /// assert_eq!(graph.get_state(&RunConfig::thread("branch")).await?.values.n, 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn fork_at(
        &self,
        source: &CheckpointRef,
        target_thread: &str,
        options: ForkOptions,
    ) -> Result<CheckpointRef> {
        // Queued writes of either thread land first (the target's may
        // make it taken).
        self.settle(&source.thread_id).await;
        self.settle(target_thread).await;
        self.saver.fork_at(source, target_thread, options).await
    }

    /// [`Saver::copy_thread`]: every checkpoint and write of
    /// `source_thread`, ids and metadata kept, into the new thread
    /// `target_thread` ([`Error::ThreadExists`](crate::Error::ThreadExists)
    /// if it has checkpoints).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("main")).await?;
    /// let cp = graph.checkpointer().unwrap();
    /// cp.copy_thread("main", "copy").await?;
    /// assert_eq!(graph.get_state(&RunConfig::thread("copy")).await?.values.n, 1);
    /// assert!(cp.copy_thread("main", "copy").await.is_err());
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn copy_thread(&self, source_thread: &str, target_thread: &str) -> Result<()> {
        self.settle(source_thread).await;
        self.settle(target_thread).await;
        self.saver.copy_thread(source_thread, target_thread).await
    }

    /// [`Saver::delete_thread`]: every checkpoint and write of the thread,
    /// in every namespace.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("main")).await?;
    /// let cp = graph.checkpointer().unwrap();
    /// cp.delete_thread("main").await?;
    /// assert!(cp.thread_info("main").await?.is_none());
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        self.delete_thread_held(thread_id, None).await
    }

    /// [`delete_thread`](Self::delete_thread); with `held`, only while that
    /// holder holds the thread's lease ([`Leases::delete_held`](super::Leases::delete_held)).
    async fn delete_thread_held(&self, thread_id: &str, held: Option<String>) -> Result<()> {
        // Writes still queued for the thread would bring it back.
        self.settle(thread_id).await;
        self.state.cache.forget_thread(thread_id);
        let thread = [thread_id.to_owned()];
        let _deleted = DeletionNote(&self.state, &thread);
        match (held, self.saver.leases()) {
            (Some(holder), Some(leases)) => leases.delete_held(thread_id, &holder).await,
            _ => self.saver.delete_thread(thread_id).await,
        }
    }

    /// [`Saver::prune`]: thins or deletes the threads' history as `strategy`
    /// says; returns how many checkpoints were deleted.
    ///
    /// ```
    /// use weaver::checkpoint::PruneStrategy;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("main")).await?;
    /// let cp = graph.checkpointer().unwrap();
    /// graph.invoke(S::default(), &RunConfig::thread("main")).await?;
    /// assert_eq!(cp.thread_info("main").await?.unwrap().checkpoints, 6);
    /// let deleted = cp.prune(&["main".to_owned()], PruneStrategy::KeepLast(2)).await?;
    /// assert_eq!(deleted, 4);
    /// assert_eq!(graph.get_state(&RunConfig::thread("main")).await?.values.n, 2);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<u64> {
        for t in thread_ids {
            self.settle(t).await;
        }
        if strategy == PruneStrategy::Delete {
            for t in thread_ids {
                self.state.cache.forget_thread(t);
            }
        }
        let _deleted =
            (strategy == PruneStrategy::Delete).then_some(DeletionNote(&self.state, thread_ids));
        self.saver.prune(thread_ids, strategy).await
    }

    /// [`Saver::thread_info`]: how many checkpoints the thread holds, `None`
    /// when it holds none (writes still queued for it are stored first).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::checkpoint::{Checkpointer, InMemorySaver};
    /// let cp = Checkpointer::new(InMemorySaver::new());
    /// assert!(cp.thread_info("nobody").await.unwrap().is_none());
    /// # });
    /// ```
    pub async fn thread_info(&self, thread_id: &str) -> Result<Option<ThreadInfo>> {
        self.settle(thread_id).await;
        self.saver.thread_info(thread_id).await
    }

    /// [`Saver::at_commit_order`]: where the checkpoint numbered
    /// `commit_order` in `thread_id`'s namespace `checkpoint_ns` is, `None`
    /// when there is none. Its [`RunConfig`](crate::RunConfig) (`.into()`)
    /// restores that version with `get_state`, continues from it with
    /// `invoke`, or forks it with `update_state`.
    pub async fn at_commit_order(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        commit_order: u64,
    ) -> Result<Option<CheckpointRef>> {
        self.settle(thread_id).await;
        self.saver
            .at_commit_order(thread_id, checkpoint_ns, commit_order)
            .await
    }

    /// [`Saver::list_threads`]: at most `limit` threads from `offset` on,
    /// once what runs on this saver queued in the background (of any
    /// thread) has landed.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("main")).await?;
    /// let cp = graph.checkpointer().unwrap();
    /// let threads = cp.list_threads(Some(10), 0).await?;
    /// assert_eq!(threads[0].thread_id, "main");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn list_threads(
        &self,
        limit: Option<usize>,
        offset: usize,
    ) -> Result<Vec<ThreadInfo>> {
        self.state.settle_all().await;
        self.saver.list_threads(limit, offset).await
    }

    /// [`Saver::search_threads`]: a page of threads by metadata, idleness
    /// and time, with the cursor of the next (once what runs on this saver
    /// queued in the background has landed).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use weaver::checkpoint::{Checkpointer, InMemorySaver, ThreadQuery};
    /// let cp = Checkpointer::new(InMemorySaver::new());
    /// let page = cp.search_threads(&ThreadQuery::new()).await?;
    /// assert!(page.threads.is_empty() && page.next.is_none());
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn search_threads(&self, query: &ThreadQuery) -> Result<ThreadPage> {
        self.state.settle_all().await;
        self.saver.search_threads(query).await
    }

    /// [`Saver::delete_idle_threads`], each thread deleted as
    /// [`delete_thread`](Checkpointer::delete_thread) does (writes queued
    /// for it stored first, its cached values forgotten), calling
    /// `progress(deleted, found)` after each.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use std::time::Duration;
    /// use weaver::checkpoint::{Checkpointer, InMemorySaver};
    /// let cp = Checkpointer::new(InMemorySaver::new());
    /// assert_eq!(cp.delete_idle_threads(Duration::from_secs(3600), &mut |_, _| {}).await?, 0);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn delete_idle_threads(
        &self,
        idle_for: std::time::Duration,
        progress: &mut (dyn FnMut(u64, u64) + Send),
    ) -> Result<u64> {
        let query = ThreadQuery::new().idle_for(idle_for).limit(100);
        let (mut deleted, mut found) = (0, 0);
        let mut page = self.search_threads(&query).await?;
        loop {
            for t in &page.threads {
                found += 1;
                let read = || self.thread_info(&t.thread_id);
                let delete = |held: Option<String>| self.delete_thread_held(&t.thread_id, held);
                if super::fleet::delete_if_idle(t, self.saver.leases(), read, delete).await? {
                    deleted += 1;
                }
                progress(deleted, found);
            }
            match page.next.take() {
                Some(next) => page = self.search_threads(&query.clone().after(next)).await?,
                None => return Ok(deleted),
            }
        }
    }
}
