//! The [`Saver`] trait: the checkpointer contract every backend implements.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;

use super::delta::{self, Cached, LineageSource, ListedParents};
use super::fleet::{Cursor, ThreadPage, ThreadQuery};
use super::lease::Leases;
use super::limits::{self, ForkOptions};
use super::rewrites::Rewrites;
use super::shared::SaverState;
use super::types::{
    BatchEntry, CheckpointRef, CheckpointTuple, LineageRequest, ListFilter, NewCheckpoint,
    PendingWrite, PruneStrategy, ThreadInfo, WriteOp,
};
use crate::error::Result;

/// How many idle threads [`Saver::delete_idle_threads`] lists at a time.
const IDLE_BATCH: usize = 100;

/// A checkpointer: per-thread execution history.
///
/// Object-safe (`Arc<dyn Saver>` works). Ordering is always by
/// `commit_order`, unique per `(thread_id, checkpoint_ns)`: "latest" means
/// the highest `commit_order`, never the newest timestamp or id. A saver
/// never hands out references to what it stores: every value returned is the
/// caller's own copy. A storage failure is [`Error::Storage`](crate::Error::Storage),
/// never "not found".
///
/// # Reading
///
/// [`get_tuple`](Saver::get_tuple) and [`list`](Saver::list) return
/// records a caller can use as they are: a delta channel (see
/// [`Checkpoint`](super::Checkpoint)) holds its full value. They are
/// provided: a saver stores records compacted and answers
/// [`get_stored`](Saver::get_stored) and [`list_stored`](Saver::list_stored)
/// with them as stored, and the provided methods rebuild what those leave
/// as deltas (reading ancestors with [`lineages`](Saver::lineages)).
///
/// # Implementing a saver
///
/// Required: the two stored reads, `put_writes`,
/// `put_checkpoint_with_writes`, `put_batch`, `fork_lineage`, `copy_thread`,
/// `delete_thread`, `prune` and `list_threads`. The contract's batch and
/// fork limits are checked once, by the provided methods in front of those
/// (`put_many`, `fork_at`, `put_ops`), never by a backend; id lengths
/// ([`limits::MAX_ID_BYTES`](super::limits::MAX_ID_BYTES) for threads and
/// namespaces, [`limits::MAX_CHECKPOINT_ID_BYTES`](super::limits::MAX_CHECKPOINT_ID_BYTES)
/// for checkpoint and task ids) are the backend's to refuse, with
/// [`Error::LimitExceeded`](crate::Error::LimitExceeded), where it stores
/// them (`put_checkpoint_with_writes`, `put_writes`, `copy_thread`), as
/// the conformance suite checks. A saver meant to pass that suite applies a
/// group ([`put_group`](Saver::put_group)) all or nothing: the default does
/// not. Everything else has a
/// default written on those, which a saver overrides when it can do better
/// (one query instead of several, a group in one transaction), and
/// [`shared_state`](Saver::shared_state) when its clones share storage.
/// The `weaver-conformance` crate's saver suite (its `saver_suite!` macro)
/// runs against every backend; run it against yours.
///
/// A saver that counts the writes of another, written against the
/// required methods alone:
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
///
/// use async_trait::async_trait;
/// use weaver::Result;
/// use weaver::checkpoint::{
///     BatchEntry, CheckpointRef, CheckpointTuple, ForkOptions, InMemorySaver, ListFilter,
///     NewCheckpoint, PendingWrite, PruneStrategy, Saver, SaverState, ThreadInfo,
/// };
///
/// #[derive(Debug, Clone, Default)]
/// struct Counting {
///     inner: InMemorySaver,
///     writes: Arc<AtomicUsize>,
/// }
///
/// #[async_trait]
/// impl Saver for Counting {
///     async fn get_stored(&self, target: &CheckpointRef) -> Result<Option<CheckpointTuple>> {
///         self.inner.get_stored(target).await
///     }
///     async fn list_stored(&self, filter: &ListFilter) -> Result<Vec<CheckpointTuple>> {
///         self.inner.list_stored(filter).await
///     }
///     async fn put_writes(&self, target: &CheckpointRef, writes: Vec<PendingWrite>) -> Result<()> {
///         self.writes.fetch_add(1, Ordering::SeqCst);
///         self.inner.put_writes(target, writes).await
///     }
///     async fn put_checkpoint_with_writes(
///         &self,
///         checkpoint: NewCheckpoint,
///         writes: Vec<PendingWrite>,
///     ) -> Result<CheckpointRef> {
///         self.writes.fetch_add(1, Ordering::SeqCst);
///         self.inner.put_checkpoint_with_writes(checkpoint, writes).await
///     }
///     async fn put_batch(&self, entries: Vec<BatchEntry>) -> Result<Vec<CheckpointRef>> {
///         self.inner.put_batch(entries).await
///     }
///     async fn fork_lineage(
///         &self,
///         source: &CheckpointRef,
///         target_thread: &str,
///         options: ForkOptions,
///     ) -> Result<CheckpointRef> {
///         self.inner.fork_lineage(source, target_thread, options).await
///     }
///     async fn copy_thread(&self, source_thread: &str, target_thread: &str) -> Result<()> {
///         self.inner.copy_thread(source_thread, target_thread).await
///     }
///     async fn delete_thread(&self, thread_id: &str) -> Result<()> {
///         self.inner.delete_thread(thread_id).await
///     }
///     async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<u64> {
///         self.inner.prune(thread_ids, strategy).await
///     }
///     async fn list_threads(&self, limit: Option<usize>, offset: usize) -> Result<Vec<ThreadInfo>> {
///         self.inner.list_threads(limit, offset).await
///     }
///     // Its clones share the inner saver's storage, so they share its state too.
///     fn shared_state(&self) -> Option<Arc<SaverState>> {
///         self.inner.shared_state()
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use weaver::prelude::*;
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
/// struct Count {
///     n: u32,
/// }
///
/// let saver = Counting::default();
/// let graph = Graph::<Count>::new("count")
///     .add_node("add", |s: &Count| CountUpdate::default().n(s.n + 1))
///     .add_sequence([START, "add", END])
///     .compile(Compile::new().checkpointer(saver.clone()))
///     .unwrap();
/// let out = graph.invoke(Count::default(), &RunConfig::thread("t")).await.unwrap();
/// assert_eq!(out.complete().unwrap().n, 1);
/// assert!(saver.writes.load(Ordering::SeqCst) > 0);
/// let head = saver.get_tuple(&CheckpointRef::latest("t")).await.unwrap().unwrap();
/// assert_eq!(head.checkpoint.channel_values["n"], 1);
/// # });
/// ```
#[async_trait]
pub trait Saver: Debug + Send + Sync {
    /// The checkpoint `target` names, or the latest of its thread and
    /// namespace (the highest commit order) when `target.checkpoint_id` is
    /// `None`, with its pending writes in `(task_id, idx)` order, and its
    /// delta channels rebuilt. `Ok(None)` when there is none; a delta
    /// channel whose ancestors are missing or damaged is an error
    /// ([`Error::MissingParent`](crate::Error::MissingParent),
    /// [`Error::Decode`](crate::Error::Decode)), never a partial value.
    ///
    /// Provided: [`get_stored`](Saver::get_stored), then the rebuild.
    async fn get_tuple(&self, target: &CheckpointRef) -> Result<Option<CheckpointTuple>> {
        let Some(t) = self.get_stored(target).await? else {
            return Ok(None);
        };
        let mut one = [t];
        rebuild(self, &mut one).await?;
        let [t] = one;
        Ok(Some(t))
    }

    /// What [`list_stored`](Saver::list_stored) lists, in its order, with
    /// delta channels rebuilt (as [`get_tuple`](Saver::get_tuple) does).
    ///
    /// Provided: [`list_stored`](Saver::list_stored), then one rebuild of
    /// all the records listed.
    async fn list(&self, filter: &ListFilter) -> Result<Vec<CheckpointTuple>> {
        let mut tuples = self.list_stored(filter).await?;
        rebuild(self, &mut tuples).await?;
        Ok(tuples)
    }

    /// Like [`get_tuple`](Saver::get_tuple), but the record as stored: a
    /// delta channel stored as what its checkpoint appended is in
    /// `checkpoint.deltas`, and missing from `channel_values`. What a saver
    /// implements; callers read with `get_tuple`.
    async fn get_stored(&self, target: &CheckpointRef) -> Result<Option<CheckpointTuple>>;

    /// Lists checkpoints as stored (see [`get_stored`](Saver::get_stored))
    /// newest first (by `commit_order`) within a thread and
    /// namespace; across threads (no `thread_id`) grouped by thread id then
    /// namespace, ascending, each group newest first. `before` keeps those
    /// committed before that checkpoint and needs `thread_id`
    /// ([`Error::InvalidArgument`](crate::Error::InvalidArgument) otherwise;
    /// [`Error::CheckpointNotFound`](crate::Error::CheckpointNotFound) if it
    /// does not exist). `limit` applies after filtering. What a saver
    /// implements; callers read with [`list`](Saver::list).
    async fn list_stored(&self, filter: &ListFilter) -> Result<Vec<CheckpointTuple>>;

    /// Stores one checkpoint. Fails with
    /// [`Error::VersionConflict`](crate::Error::VersionConflict) when its
    /// explicit `commit_order` is taken (or the id already exists on the
    /// thread), and [`Error::CheckpointNotFound`](crate::Error::CheckpointNotFound)
    /// when the parent is missing, and
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when its
    /// explicit `commit_order` is not above its parent's (parents commit
    /// before their children); nothing is written then. Returns where it is.
    ///
    /// Provided: [`put_checkpoint_with_writes`](Saver::put_checkpoint_with_writes)
    /// with no writes.
    async fn put(&self, checkpoint: NewCheckpoint) -> Result<CheckpointRef> {
        self.put_checkpoint_with_writes(checkpoint, Vec::new())
            .await
    }

    /// Stores pending writes of tasks started from checkpoint `target` (which
    /// must exist). Idempotent per `(task_id, idx)`: an ordinary write already
    /// stored is kept as it was; a special write (negative `idx`) replaces the
    /// earlier one. All writes of the call are stored, or none.
    async fn put_writes(&self, target: &CheckpointRef, writes: Vec<PendingWrite>) -> Result<()>;

    /// Stores a checkpoint and writes attached to it in one atomic step: both
    /// or neither. Same conflict rules as [`put`](Saver::put).
    async fn put_checkpoint_with_writes(
        &self,
        checkpoint: NewCheckpoint,
        writes: Vec<PendingWrite>,
    ) -> Result<CheckpointRef>;

    /// Stores a batch in one atomic step, in order (an entry may name an
    /// earlier entry as parent). Explicit checkpoint ids stay identities. At
    /// most 1,000 checkpoints, 10,000 writes and 64 MiB
    /// ([`Error::LimitExceeded`](crate::Error::LimitExceeded)); any failure
    /// leaves nothing behind. Never falls back to sequential writes.
    ///
    /// Provided: checks the limits, then calls
    /// [`put_batch`](Saver::put_batch). Only a saver that wraps another
    /// overrides it, to call the inner saver's `put_many`.
    async fn put_many(&self, entries: Vec<BatchEntry>) -> Result<Vec<CheckpointRef>> {
        limits::check_batch(&entries)?;
        self.put_batch(entries).await
    }

    /// Stores a batch [`put_many`](Saver::put_many) has checked against the
    /// limits, under `put_many`'s rules: in order, in one atomic step, any
    /// failure leaving nothing behind.
    async fn put_batch(&self, entries: Vec<BatchEntry>) -> Result<Vec<CheckpointRef>>;

    /// Copies checkpoint `source` (its id must be set) and its ancestors,
    /// following parent links, into `target_thread` (same namespace), keeping
    /// ids, metadata and pending writes; commit orders are renumbered 1… from
    /// the oldest ancestor. The target must have no checkpoints in that
    /// namespace ([`Error::ThreadExists`](crate::Error::ThreadExists)). Fails,
    /// writing nothing, when a parent is missing
    /// ([`Error::MissingParent`](crate::Error::MissingParent)) or the lineage
    /// exceeds `options` ([`Error::LimitExceeded`](crate::Error::LimitExceeded)).
    /// Returns the copy of `source`.
    ///
    /// The subgraphs `source`'s tasks ran come along: in the namespace of
    /// each of its tasks that left pending writes (`node:task_id`; and so on
    /// for the tasks of each subgraph's latest checkpoint, at any depth),
    /// the lineage of the latest checkpoint is copied, so a pause inside a
    /// subgraph resumes on the copy where it paused. `options` bound each namespace's copy;
    /// when one of them fails, the target thread is deleted again (if it
    /// had no checkpoint before).
    ///
    /// Provided: checks `options` against the hard ceilings, then calls
    /// [`fork_lineage`](Saver::fork_lineage) for `source` and for each
    /// subgraph's namespace. Only a saver that wraps another overrides it.
    ///
    /// ```
    /// use weaver::checkpoint::{CheckpointRef, ForkOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("main")).await?;
    /// // The saver behind the graph's checkpointer.
    /// let saver = graph.checkpointer().unwrap().saver().clone();
    /// let head = graph.get_state(&RunConfig::thread("main")).await?;
    /// let at = CheckpointRef::latest("main").at(head.config.get_checkpoint_id().unwrap());
    /// let copy = saver.fork_at(&at, "branch", ForkOptions::default()).await?;
    /// assert_eq!(copy.thread_id, "branch");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn fork_at(
        &self,
        source: &CheckpointRef,
        target_thread: &str,
        options: ForkOptions,
    ) -> Result<CheckpointRef> {
        limits::check_fork_options(options.max_checkpoints, options.max_bytes)?;
        let was_empty = self.thread_info(target_thread).await?.is_none();
        let copy = self.fork_lineage(source, target_thread, options).await?;
        let subgraphs = fork_subgraphs(
            self,
            &source.thread_id,
            copy.clone(),
            target_thread,
            options,
        );
        if let Err(e) = subgraphs.await {
            // Nothing of the fork stays: the thread was empty before. The
            // caller gets the fork's error, whatever the clean-up meets.
            if was_empty && let Err(clean) = self.delete_thread(target_thread).await {
                tracing::warn!(thread = target_thread, error = %clean, "a failed fork was not removed");
            }
            return Err(e);
        }
        Ok(copy)
    }

    /// The copy of [`fork_at`](Saver::fork_at), under its rules, once
    /// `options` are known to be within the ceilings. The lineage is counted
    /// against them with a [`ForkBudget`](super::ForkBudget) as it is read, so an oversized
    /// one writes nothing.
    async fn fork_lineage(
        &self,
        source: &CheckpointRef,
        target_thread: &str,
        options: ForkOptions,
    ) -> Result<CheckpointRef>;

    /// Copies every checkpoint and write of `source_thread` (all namespaces)
    /// to `target_thread`, keeping ids, metadata and pending writes; commit
    /// orders keep their order and are renumbered 1, 2, … in each namespace
    /// (the same numbers unless the source was pruned). The target must be
    /// empty ([`Error::ThreadExists`](crate::Error::ThreadExists), checked
    /// first), and the source must have a checkpoint
    /// ([`Error::ThreadNotFound`](crate::Error::ThreadNotFound)); a first
    /// write to the target, in a namespace the copy writes, racing the copy
    /// takes commit order 1 too, so one of the two fails instead of the
    /// namespace mixing both.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("main")).await?;
    /// // The saver behind the graph's checkpointer.
    /// let saver = graph.checkpointer().unwrap().saver().clone();
    /// saver.copy_thread("main", "copy").await?;
    /// assert_eq!(saver.thread_info("copy").await?.unwrap().checkpoints, 3);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn copy_thread(&self, source_thread: &str, target_thread: &str) -> Result<()>;

    /// Deletes every checkpoint and write of the thread. Deleting an unknown
    /// thread is not an error.
    async fn delete_thread(&self, thread_id: &str) -> Result<()>;

    /// Applies `strategy` to each thread; returns how many checkpoints were
    /// deleted. A kept checkpoint whose parent goes is first stored with
    /// its delta channels in full, and one that cannot be rebuilt fails the
    /// call with nothing deleted. [`InMemorySaver`](super::InMemorySaver),
    /// the SQL savers and `MongoSaver` prune all the threads named in one
    /// atomic step; a saver may not:
    /// [`AdapterSaver`](super::AdapterSaver) saves each thread in turn, so
    /// a prune over several threads is not atomic against a writer racing
    /// it.
    ///
    /// ```
    /// use weaver::checkpoint::PruneStrategy;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("main")).await?;
    /// // The saver behind the graph's checkpointer.
    /// let saver = graph.checkpointer().unwrap().saver().clone();
    /// assert_eq!(saver.prune(&["main".to_owned()], PruneStrategy::KeepLast(1)).await?, 2);
    /// assert_eq!(saver.thread_info("main").await?.unwrap().checkpoints, 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<u64>;

    /// Lists threads with at least one checkpoint, ordered by thread id,
    /// skipping `offset` and returning at most `limit`.
    async fn list_threads(&self, limit: Option<usize>, offset: usize) -> Result<Vec<ThreadInfo>>;

    /// How many checkpoints `thread_id` holds (all namespaces); `None` when
    /// it holds none (chat-graph's `flowExists` and `getSnapshotCount`).
    ///
    /// The default lists the whole thread; weaver's savers count instead.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("main")).await?;
    /// // The saver behind the graph's checkpointer.
    /// let saver = graph.checkpointer().unwrap().saver().clone();
    /// assert_eq!(saver.thread_info("main").await?.unwrap().checkpoints, 3);
    /// assert!(saver.thread_info("nobody").await?.is_none());
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn thread_info(&self, thread_id: &str) -> Result<Option<ThreadInfo>> {
        let listed = self.list_stored(&ListFilter::thread(thread_id)).await?;
        let checkpoints = listed.len() as u64;
        Ok(ThreadInfo::counted(thread_id, checkpoints))
    }

    /// One page of the threads `query` asks for: those whose latest root
    /// checkpoint has its metadata values and that have been idle for its
    /// `idle_for`, the most recent first by last activity or creation, and
    /// the cursor of the next page (LangGraph Platform's thread search).
    ///
    /// A zero limit or `idle_for`, or a cursor that is not one of this
    /// order's, is [`Error::InvalidArgument`](crate::Error::InvalidArgument),
    /// and so is a listing by time on a saver whose
    /// [`ThreadInfo`]s carry no times. Times are those the saver recorded
    /// (the database's clock on SQL savers); idleness is measured against
    /// this process's clock.
    ///
    /// A page starts after the time and thread id its cursor names, so
    /// pages read while threads run are consistent per thread, not as one
    /// snapshot: a thread whose last activity moves past the cursor (a new
    /// checkpoint, or an older one after a rollback or prune) may be listed
    /// on two pages or on none. Listing by creation is stable unless a
    /// thread's oldest checkpoints are pruned.
    ///
    /// The default reads every thread's [`ThreadInfo`] through
    /// [`list_threads`](Saver::list_threads), then the latest root
    /// checkpoint of each candidate when the query filters on metadata.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use weaver::checkpoint::{Checkpoint, CheckpointMetadata, CheckpointSource, NewCheckpoint, ThreadQuery};
    /// use weaver::{InMemorySaver, Saver};
    /// let saver = InMemorySaver::new();
    /// for (thread, user) in [("a", "ann"), ("b", "bob"), ("c", "ann")] {
    ///     let mut metadata = CheckpointMetadata::new(CheckpointSource::Input, -1);
    ///     metadata.extra.insert("user".into(), user.into());
    ///     let checkpoint = NewCheckpoint {
    ///         thread_id: thread.into(),
    ///         checkpoint_ns: String::new(),
    ///         parent_id: None,
    ///         checkpoint: Checkpoint::empty(),
    ///         metadata,
    ///         commit_order: None,
    ///     };
    ///     saver.put(checkpoint).await?;
    ///     // Times are kept to the millisecond.
    ///     tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    /// }
    /// let page = saver.search_threads(&ThreadQuery::new().metadata("user", "ann").limit(1)).await?;
    /// assert_eq!(page.threads[0].thread_id, "c"); // the most recently active
    /// let rest = saver
    ///     .search_threads(&ThreadQuery::new().metadata("user", "ann").after(page.next.unwrap()))
    ///     .await?;
    /// assert_eq!(rest.threads[0].thread_id, "a");
    /// assert_eq!(rest.next, None);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn search_threads(&self, query: &ThreadQuery) -> Result<ThreadPage> {
        let after = query.check()?;
        let threads = self.list_threads(None, 0).await?;
        let candidates = query.candidates(threads, after.as_ref(), SystemTime::now())?;
        let mut out: Vec<(u64, ThreadInfo)> = Vec::new();
        let mut more = false;
        for (ms, info) in candidates {
            if !query.metadata.is_empty() {
                let head = ListFilter {
                    checkpoint_ns: Some(String::new()),
                    limit: Some(1),
                    ..ListFilter::thread(info.thread_id.clone())
                };
                let head = self.list_stored(&head).await?;
                if !head
                    .first()
                    .is_some_and(|h| h.metadata.matches(&query.metadata))
                {
                    continue;
                }
            }
            if out.len() == query.limit {
                more = true;
                break;
            }
            out.push((ms, info));
        }
        let next = match out.last() {
            Some((ms, last)) if more => Some(Cursor::after(query.order, *ms, last)),
            _ => None,
        };
        Ok(ThreadPage::new(
            out.into_iter().map(|(_, t)| t).collect(),
            next,
        ))
    }

    /// Deletes every thread idle for at least `idle_for` (as
    /// [`delete_thread`](Saver::delete_thread) does, one thread per
    /// transaction, so a long run never holds one transaction open), calling
    /// `progress(deleted so far, found so far)` after each; returns how many
    /// threads went. A thread found idle that stores a checkpoint before its
    /// turn, or that a run holds (its lease, [`Saver::leases`]), is kept.
    /// With leases, each deletion holds the thread's lease (five seconds at
    /// most, so that a deletion cut off by a caller's timeout leaves the
    /// thread busy no longer) from its last check to the end, so a run
    /// arriving meanwhile finds the thread busy
    /// (as under another run: its [`Multitask`](crate::config::Multitask)
    /// strategy applies) and never loses the thread mid-turn, and deletes
    /// it only while that lease still names it ([`Leases::delete_held`]:
    /// a deletion stalled past its lease keeps a thread a run took); a run under
    /// `Multitask::Race` takes no lease and is not covered. An
    /// `idle_for` that is not whole milliseconds, at least one, is
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use std::time::Duration;
    /// use weaver::{InMemorySaver, Saver};
    /// let saver = InMemorySaver::new();
    /// let gone = saver
    ///     .delete_idle_threads(Duration::from_secs(30 * 24 * 3600), &mut |_, _| {})
    ///     .await?;
    /// assert_eq!(gone, 0);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn delete_idle_threads(
        &self,
        idle_for: std::time::Duration,
        progress: &mut (dyn FnMut(u64, u64) + Send),
    ) -> Result<u64> {
        let query = ThreadQuery::new().idle_for(idle_for).limit(IDLE_BATCH);
        let mut deleted = 0;
        let mut found = 0;
        let mut page = self.search_threads(&query).await?;
        loop {
            for t in &page.threads {
                found += 1;
                let read = || self.thread_info(&t.thread_id);
                let delete = |held: Option<String>| async move {
                    match (held, self.leases()) {
                        (Some(holder), Some(leases)) => {
                            leases.delete_held(&t.thread_id, &holder).await
                        }
                        _ => self.delete_thread(&t.thread_id).await,
                    }
                };
                if super::fleet::delete_if_idle(t, self.leases(), read, delete).await? {
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

    /// Where the checkpoint of `thread_id` and `checkpoint_ns` whose commit
    /// order is `commit_order` is (chat-graph's numbered snapshot versions), or `None`
    /// when there is none (never committed, or pruned).
    ///
    /// The default lists the namespace; weaver's savers look it up.
    async fn at_commit_order(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        commit_order: u64,
    ) -> Result<Option<CheckpointRef>> {
        let listed = self
            .list_stored(&ListFilter::thread(thread_id).ns(checkpoint_ns))
            .await?;
        Ok(listed
            .into_iter()
            .find(|t| t.commit_order == commit_order)
            .map(|t| t.config))
    }

    /// Stores `ops` in the order given, as one group commit: each op follows
    /// the rules of [`put`](Saver::put) or [`put_writes`](Saver::put_writes),
    /// or is a [`WriteCheck`](super::WriteCheck) on what is stored.
    /// weaver's savers apply a group all or nothing (the SQL savers in one
    /// transaction: one sync to disk instead of one per op), a check and the
    /// ops after it atomically: a failed op fails the group with that op's
    /// error and nothing of it is stored.
    /// The default, for savers that cannot do better, applies the ops one by
    /// one and stops at the first failure, keeping the ops before it (its
    /// checks read with [`get_stored`](Saver::get_stored), so another writer
    /// can slip in between a check and the ops after it). The
    /// engine sends what queued up while the backend was busy, under
    /// [`Durability::Async`](crate::Durability::Async).
    ///
    /// A group holding more than one checkpoint holds at most 1,000
    /// checkpoints and 10,000 pending writes, as a
    /// [`put_many`](Saver::put_many) batch
    /// ([`Error::LimitExceeded`](crate::Error::LimitExceeded), nothing
    /// stored); its bytes are limited per record. A group with at most one
    /// checkpoint (a step's writes and the checkpoint after them) has the
    /// limits of [`put_checkpoint_with_writes`](Saver::put_checkpoint_with_writes).
    ///
    /// Provided: checks the limits, then calls
    /// [`put_group`](Saver::put_group). Only a saver that wraps another
    /// overrides it.
    async fn put_ops(&self, ops: Vec<WriteOp>) -> Result<()> {
        limits::check_group(&ops)?;
        self.put_group(ops).await
    }

    /// Stores a group [`put_ops`](Saver::put_ops) has checked against the
    /// limits, under `put_ops`'s rules. The default applies the ops one by
    /// one, as `put_ops` describes; weaver's savers apply the group all or
    /// nothing.
    async fn put_group(&self, ops: Vec<WriteOp>) -> Result<()> {
        for op in ops {
            match op {
                WriteOp::Put(checkpoint) => {
                    self.put(checkpoint).await?;
                }
                WriteOp::Writes(target, writes) => self.put_writes(&target, writes).await?,
                WriteOp::Check(check) => {
                    let id = check.checkpoint_id()?;
                    let target = check.target.at(id.to_owned());
                    let found = self.get_stored(&target).await?.ok_or_else(|| {
                        crate::Error::CheckpointNotFound {
                            thread_id: target.thread_id.clone(),
                            checkpoint_ns: target.checkpoint_ns.clone(),
                            checkpoint_id: id.to_owned(),
                        }
                    })?;
                    let stored = found
                        .pending_writes
                        .iter()
                        .find(|w| w.task_id == check.task_id && w.idx == check.idx)
                        .map(|w| &w.value);
                    if !check.holds(stored) {
                        return Err(check.conflict(found.commit_order));
                    }
                }
            }
        }
        Ok(())
    }

    /// The checkpoint `from` names (its id must be set) and its ancestors,
    /// following parent links, nearest first: at most `count` records in
    /// all, fewer when the lineage ends (or a parent is missing). Pending
    /// writes are not loaded. Records are returned as stored: delta channels
    /// are not rebuilt. An unknown `from` gives an empty list.
    ///
    /// `below`, when given, is the commit order of a child of `from`: the
    /// lineage then lies below it, and a saver may read the `count` commit
    /// orders under it first (a thread that was never forked is one line).
    ///
    /// This is what a delta channel is rebuilt from; the default follows the
    /// links with [`get_stored`](Saver::get_stored), one call per record.
    async fn lineage(
        &self,
        from: &CheckpointRef,
        count: usize,
        below: Option<u64>,
    ) -> Result<Vec<CheckpointTuple>> {
        let _ = below;
        let mut out: Vec<CheckpointTuple> = Vec::new();
        let mut next = from.checkpoint_id.clone().map(|id| from.at(id));
        while let Some(target) = next.take() {
            if out.len() == count {
                break;
            }
            let Some(mut t) = self.get_stored(&target).await? else {
                break;
            };
            t.pending_writes.clear();
            next = t
                .parent_config
                .as_ref()
                .and_then(|p| p.checkpoint_id.clone())
                .map(|id| target.at(id));
            out.push(t);
        }
        Ok(out)
    }

    /// Several [`lineage`](Saver::lineage) reads at once: one list per
    /// request, in the order of `requests`, each what `lineage` would return
    /// for it. Reads that list records of several lineages (a filtered
    /// history, a listing across threads) rebuild their delta channels from
    /// one call of this instead of one `lineage` call per record. The
    /// default calls `lineage` for each request in turn.
    async fn lineages(&self, requests: &[LineageRequest]) -> Result<Vec<Vec<CheckpointTuple>>> {
        let mut out = Vec::with_capacity(requests.len());
        for r in requests {
            out.push(self.lineage(&r.from, r.count, r.below).await?);
        }
        Ok(out)
    }

    /// Whether the engine may store delta channels as deltas here: the saver
    /// keeps every checkpoint's ancestors (until pruned, and then rebuilds
    /// what it keeps in full) and answers [`lineage`](Saver::lineage).
    /// `false` by default, and for shallow savers, which keep only the latest
    /// checkpoint: delta channels are then stored in full.
    ///
    /// ```
    /// use weaver::{InMemorySaver, Saver};
    ///
    /// // The in-memory saver keeps every ancestor: delta channels are stored as deltas.
    /// assert!(InMemorySaver::new().supports_deltas());
    /// ```
    fn supports_deltas(&self) -> bool {
        false
    }

    /// Whether writes complete in process memory, with no I/O to wait for.
    /// The engine then stores checkpoints in line even under
    /// [`Durability::Async`](crate::Durability::Async): there is nothing to
    /// overlap, and a background task would only add latency.
    fn is_in_process(&self) -> bool {
        false
    }

    /// The state every handle of this saver shares ([`SaverState`]): its
    /// clones return the same one, another saver never does. Graphs
    /// compiled on clones of a saver wait for each other's queued
    /// background writes through it, and share the values they rebuilt.
    ///
    /// `None` by default: each [`Checkpointer`](super::Checkpointer) (each
    /// compiled graph) then keeps its own, which is right for one graph
    /// but does not coordinate two. A saver whose clones share storage
    /// keeps an `Arc<SaverState>` beside it and returns it here; a saver
    /// wrapping another returns the inner saver's.
    fn shared_state(&self) -> Option<Arc<SaverState>> {
        None
    }

    /// The saver's [`Leases`]: what keeps one run per thread at a time
    /// across the processes sharing its storage
    /// ([`Multitask`](crate::config::Multitask)). `None` by default: runs
    /// on such a saver take no lease and race, as under
    /// [`Multitask::Race`](crate::config::Multitask::Race), whatever the
    /// run's strategy. [`InMemorySaver`](super::InMemorySaver), the SQL
    /// savers and `MongoSaver` have them;
    /// [`AdapterSaver`](super::AdapterSaver) has none. A saver wrapping
    /// another returns the inner saver's.
    fn leases(&self) -> Option<&dyn Leases> {
        None
    }

    /// The saver's [`Rewrites`]: replacing stored checkpoints in place,
    /// keeping their ids, parents and commit orders (what
    /// [`upgrade_stored`](crate::evolution::upgrade_stored) rewrites an
    /// older state version's checkpoints with). `None` by default: stored
    /// checkpoints are then never rewritten.
    /// [`InMemorySaver`](super::InMemorySaver), the SQL savers and
    /// `MongoSaver` have them; [`AdapterSaver`](super::AdapterSaver) has
    /// none. A saver wrapping another returns the inner saver's.
    fn rewrites(&self) -> Option<&dyn Rewrites> {
        None
    }
}

/// Rebuilds the delta channels of `tuples` (records as `saver` stores
/// them), starting from what the saver's handles cached.
async fn rebuild<S: Saver + ?Sized>(saver: &S, tuples: &mut [CheckpointTuple]) -> Result<()> {
    let state = saver.shared_state().unwrap_or_default();
    let cached = Cached {
        cache: &state.cache,
        deletions: &state.deletions,
    };
    delta::resolve(saver, cached, tuples, ListedParents::Rebuild).await
}

#[async_trait]
impl<S: Saver + ?Sized> LineageSource for S {
    async fn read_lineage(
        &self,
        from: &CheckpointRef,
        count: usize,
        below: Option<u64>,
    ) -> Result<Vec<CheckpointTuple>> {
        self.lineage(from, count, below).await
    }

    async fn read_lineages(
        &self,
        requests: &[LineageRequest],
    ) -> Result<Vec<Vec<CheckpointTuple>>> {
        self.lineages(requests).await
    }
}

/// Copies into `target_thread` the namespaces of the subgraphs run by the
/// tasks of `copy` (the copy [`Saver::fork_at`] made of a checkpoint of
/// `source_thread`): for each task that left pending writes there, the
/// lineage of its subgraph's latest checkpoint, and so on for the tasks of
/// each subgraph's copied head, at any depth.
async fn fork_subgraphs<S: Saver + ?Sized>(
    saver: &S,
    source_thread: &str,
    copy: CheckpointRef,
    target_thread: &str,
    options: ForkOptions,
) -> Result<()> {
    let mut heads = vec![copy];
    while let Some(at) = heads.pop() {
        let Some(head) = saver.get_tuple(&at).await? else {
            continue;
        };
        let mut tasks = std::collections::HashSet::new();
        for w in &head.pending_writes {
            if !tasks.insert(w.task_id.as_str()) {
                continue;
            }
            let sub = super::id::task_ns(&at.checkpoint_ns, &w.task_path, &w.task_id);
            let latest = CheckpointRef::latest(source_thread).ns(sub);
            let Some(sub_head) = saver.get_tuple(&latest).await? else {
                continue;
            };
            heads.push(
                saver
                    .fork_lineage(&sub_head.config, target_thread, options)
                    .await?,
            );
        }
    }
    Ok(())
}
