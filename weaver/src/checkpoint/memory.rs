//! [`InMemorySaver`]: the process-local checkpointer (BeamWeaver's ETS adapter).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::SystemTime;

use async_trait::async_trait;

use super::delta;
use super::lease::{self, Leases};
use super::limits::{ForkBudget, ForkOptions};
use super::rewrites::Rewrites;
use super::saver::Saver;
use super::shared::SaverState;
use super::text;
use super::types::Keep;
use super::types::{
    BatchEntry, Checkpoint, CheckpointMetadata, CheckpointRef, CheckpointTuple, ListFilter,
    NewCheckpoint, PendingWrite, PruneStrategy, ThreadInfo, WriteCheck, WriteOp,
};
use crate::error::{Error, Result};

mod leasing;
mod rewrite;

/// A checkpointer that keeps everything in process memory.
///
/// Cloning is cheap and shares the storage, so a test can keep a handle to
/// what a compiled graph writes. Every read returns copies: nothing a caller
/// does to a returned value reaches the stored one.
///
/// It keeps values as they are, never encoded: it has no limit on a
/// record's bytes or nesting depth, where the SQL and MongoDB savers refuse
/// a record past theirs ([`Error::LimitExceeded`](crate::Error::LimitExceeded);
/// see [`limits`](crate::checkpoint::limits)). Try very large or deeply
/// nested states on the saver you deploy.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use weaver::checkpoint::{CheckpointRef, InMemorySaver, Saver};
/// let saver = InMemorySaver::new();
/// assert!(saver.get_tuple(&CheckpointRef::latest("t1")).await.unwrap().is_none());
/// # });
/// ```
#[derive(Debug, Clone, Default)]
pub struct InMemorySaver {
    threads: Arc<RwLock<Threads>>,
    state: Arc<SaverState>,
    /// Its threads' leases (held in process: clones share them).
    leases: Arc<lease::Table>,
    /// Copies of lease holders' base checkpoints' writes, by thread and
    /// checkpoint id ([`lease::BaseCopy`]).
    bases: Arc<std::sync::Mutex<BaseCopies>>,
}

/// Copies of base checkpoints' pending writes, by thread and checkpoint id.
pub(super) type BaseCopies =
    HashMap<String, HashMap<String, BTreeMap<(String, i64), PendingWrite>>>;

pub(super) type Threads = BTreeMap<String, BTreeMap<String, Log>>;

/// One (thread, namespace): checkpoints by commit order, and an id index.
#[derive(Debug, Clone, Default)]
pub(super) struct Log {
    pub(super) by_order: BTreeMap<u64, Stored>,
    pub(super) by_id: HashMap<String, u64>,
}

#[derive(Debug, Clone)]
pub(super) struct Stored {
    pub(super) checkpoint: Checkpoint,
    pub(super) metadata: CheckpointMetadata,
    pub(super) parent_id: Option<String>,
    pub(super) writes: BTreeMap<(String, i64), PendingWrite>,
    /// When it was stored.
    pub(super) stored_at: std::time::SystemTime,
}

impl Log {
    fn head(&self) -> u64 {
        self.by_order.keys().next_back().copied().unwrap_or(0)
    }

    /// A copy of this log with its commit orders renumbered 1, 2, … in
    /// their order ([`Saver::copy_thread`]), stored now (as the SQL savers
    /// store a copy).
    fn renumbered(&self) -> Log {
        let mut copy = Log::default();
        let now = SystemTime::now();
        for (n, stored) in (1u64..).zip(self.by_order.values()) {
            copy.by_id.insert(stored.checkpoint.id.clone(), n);
            let mut stored = stored.clone();
            stored.stored_at = now;
            copy.by_order.insert(n, stored);
        }
        copy
    }

    fn find(&self, id: &str) -> Option<&Stored> {
        self.by_order.get(self.by_id.get(id)?)
    }

    fn find_mut(&mut self, id: &str) -> Option<&mut Stored> {
        self.by_order.get_mut(self.by_id.get(id)?)
    }

    /// [`Saver::lineage`] within this log: records without pending writes.
    fn lineage(&self, thread_id: &str, ns: &str, id: &str, count: usize) -> Vec<CheckpointTuple> {
        let mut out = Vec::new();
        let mut next = Some(id);
        while let Some(id) = next.take() {
            let Some((&order, s)) = self
                .by_id
                .get(id)
                .and_then(|o| self.by_order.get_key_value(o))
            else {
                break;
            };
            if out.len() == count {
                break;
            }
            out.push(s.record(thread_id, ns, order));
            next = s.parent_id.as_deref();
        }
        out
    }

    /// How many of the newest records `keep` keeps at `now`: at least
    /// `keep.newest`, and every record stored within `keep.younger_than`
    /// with every record after it.
    fn kept(&self, keep: Keep, now: SystemTime) -> usize {
        let young = keep.younger_than.map_or(0, |age| {
            let since = now.checked_sub(age).unwrap_or(std::time::UNIX_EPOCH);
            self.by_order
                .values()
                .position(|s| s.stored_at > since)
                .map_or(0, |first| self.by_order.len() - first)
        });
        keep.newest.max(young)
    }

    /// The lowest commit order kept when only the `keep` newest records
    /// stay; `None` when there are no more than `keep`.
    fn cutoff(&self, keep: usize) -> Option<u64> {
        self.by_order.keys().rev().nth(keep).map(|o| o + 1)
    }

    /// What pruning to the `keep` newest records must rewrite first: each
    /// kept record that stores delta channels and whose parent goes, with
    /// its channels rebuilt in full, by commit order.
    fn materialized_boundary(
        &self,
        thread_id: &str,
        ns: &str,
        keep: usize,
    ) -> Result<Vec<(u64, Checkpoint)>> {
        let Some(cut) = self.cutoff(keep) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (&order, s) in self.by_order.range(cut..) {
            let parent_kept = s
                .parent_id
                .as_ref()
                .and_then(|p| self.by_id.get(p))
                .is_some_and(|&p| p >= cut);
            if s.checkpoint.deltas.is_empty() || parent_kept {
                continue;
            }
            let count = delta::lineage_len(&s.checkpoint);
            let chain = self.lineage(thread_id, ns, &s.checkpoint.id, count);
            out.push((order, delta::materialize(chain, count)?));
        }
        Ok(out)
    }
}

impl Stored {
    /// The stored record as a tuple, without its pending writes.
    fn record(&self, thread_id: &str, ns: &str, order: u64) -> CheckpointTuple {
        let config = CheckpointRef {
            thread_id: thread_id.to_owned(),
            checkpoint_ns: ns.to_owned(),
            checkpoint_id: Some(self.checkpoint.id.clone()),
        };
        CheckpointTuple {
            parent_config: self.parent_id.as_ref().map(|p| config.at(p.clone())),
            config,
            checkpoint: self.checkpoint.clone(),
            metadata: self.metadata.clone(),
            commit_order: order,
            pending_writes: Vec::new(),
        }
    }

    /// The stored record as a tuple, with its pending writes.
    fn tuple(&self, thread_id: &str, ns: &str, order: u64) -> CheckpointTuple {
        let mut t = self.record(thread_id, ns, order);
        t.pending_writes = self.writes.values().cloned().collect();
        t
    }

    fn add_writes(&mut self, writes: Vec<PendingWrite>) {
        for w in writes {
            let key = (w.task_id.clone(), w.idx);
            if w.is_special() {
                self.writes.insert(key, w);
            } else {
                self.writes.entry(key).or_insert(w);
            }
        }
    }
}

impl InMemorySaver {
    /// An empty saver.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// // Checkpoints live as long as the saver: for tests and single-process tools.
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("t")).await?;
    /// graph.invoke(S::default(), &RunConfig::thread("t")).await?;
    /// assert_eq!(graph.get_state(&RunConfig::thread("t")).await?.values.n, 2);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new() -> Self {
        InMemorySaver::default()
    }

    /// A saver holding `threads` (the working copy of an
    /// [`AdapterSaver`](super::AdapterSaver) operation).
    pub(super) fn holding(threads: Threads) -> Self {
        InMemorySaver {
            threads: Arc::new(RwLock::new(threads)),
            state: Arc::default(),
            leases: Arc::default(),
            bases: Arc::default(),
        }
    }

    /// A copy of what it holds of thread `thread_id`.
    pub(super) fn thread_copy(&self, thread_id: &str) -> BTreeMap<String, Log> {
        self.read().get(thread_id).cloned().unwrap_or_default()
    }

    fn read(&self) -> RwLockReadGuard<'_, Threads> {
        // No code path panics while holding the lock, and every mutation is
        // validated before it starts, so a poisoned lock still guards
        // consistent data.
        self.threads.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Threads> {
        self.threads.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// Inserts one checkpoint after validating it; on error nothing changed.
fn insert(
    threads: &mut Threads,
    mut new: NewCheckpoint,
    writes: Vec<PendingWrite>,
) -> Result<(CheckpointRef, u64)> {
    text::check_new(&new)?;
    text::check_writes(&writes)?;
    text::strip_nul(&mut new.metadata);
    // Validate against what exists before creating anything, so a failed
    // insert leaves no empty thread behind.
    let existing = threads
        .get(&new.thread_id)
        .and_then(|n| n.get(&new.checkpoint_ns));
    // Commit orders stop at i64::MAX, as in the SQL savers (so `head + 1`
    // cannot overflow either).
    let order = new
        .commit_order
        .unwrap_or_else(|| existing.map_or(0, Log::head) + 1);
    if i64::try_from(order).is_err() {
        return Err(Error::invalid_argument(format!(
            "commit_order {order} is out of range"
        )));
    }
    let taken = existing.is_some_and(|l| {
        l.by_order.contains_key(&order) || l.by_id.contains_key(&new.checkpoint.id)
    });
    if order == 0 || taken {
        return Err(Error::VersionConflict {
            thread_id: new.thread_id,
            checkpoint_ns: new.checkpoint_ns,
            attempted: order,
        });
    }
    if let Some(parent) = &new.parent_id {
        match existing.and_then(|l| l.by_id.get(parent)) {
            None => {
                return Err(Error::CheckpointNotFound {
                    thread_id: new.thread_id,
                    checkpoint_ns: new.checkpoint_ns,
                    checkpoint_id: parent.clone(),
                });
            }
            Some(&p) if p >= order => return Err(new.after_parent_error(order, p)),
            Some(_) => {}
        }
    }
    let config = new.config();
    // What the SQL savers store, the metadata's JSON form, leaves out an
    // `extra` key named like a field: so does this one.
    let mut metadata = new.metadata;
    metadata
        .extra
        .retain(|k, _| !CheckpointMetadata::RESERVED.contains(&k.as_str()));
    let log = threads
        .entry(new.thread_id)
        .or_default()
        .entry(new.checkpoint_ns)
        .or_default();
    let mut stored = Stored {
        checkpoint: new.checkpoint,
        metadata,
        parent_id: new.parent_id,
        writes: BTreeMap::new(),
        stored_at: SystemTime::now(),
    };
    stored.add_writes(writes);
    log.by_id.insert(stored.checkpoint.id.clone(), order);
    log.by_order.insert(order, stored);
    Ok((config, order))
}

/// Removes what `insert` added (used to roll a failed batch back).
fn remove(threads: &mut Threads, thread_id: &str, ns: &str, order: u64) {
    if let Some(nss) = threads.get_mut(thread_id) {
        if let Some(log) = nss.get_mut(ns) {
            if let Some(s) = log.by_order.remove(&order) {
                log.by_id.remove(&s.checkpoint.id);
            }
            if log.by_order.is_empty() {
                nss.remove(ns);
            }
        }
        if nss.is_empty() {
            threads.remove(thread_id);
        }
    }
}

/// The stored checkpoint `target` names.
fn find_mut<'t>(threads: &'t mut Threads, target: &CheckpointRef) -> Option<&'t mut Stored> {
    threads
        .get_mut(&target.thread_id)?
        .get_mut(&target.checkpoint_ns)?
        .find_mut(target.checkpoint_id.as_deref()?)
}

/// The stored checkpoint `target` names, or the error `put_writes` gives.
fn stored_mut<'t>(threads: &'t mut Threads, target: &CheckpointRef) -> Result<&'t mut Stored> {
    let id = target
        .checkpoint_id
        .as_deref()
        .ok_or_else(|| Error::invalid_argument("put_writes needs a checkpoint id"))?;
    find_mut(threads, target).ok_or_else(|| not_found(target, id))
}

/// Applies a [`WriteCheck`] to what `threads` holds.
fn check(threads: &Threads, check: &WriteCheck) -> Result<()> {
    let id = check.checkpoint_id()?;
    let target = &check.target;
    let log = threads
        .get(&target.thread_id)
        .and_then(|n| n.get(&target.checkpoint_ns));
    let Some((order, stored)) = log.and_then(|l| {
        let order = *l.by_id.get(id)?;
        Some((order, l.by_order.get(&order)?))
    }) else {
        return Err(not_found(target, id));
    };
    let found = stored.writes.get(&(check.task_id.clone(), check.idx));
    if check.holds(found.map(|w| &w.value)) {
        Ok(())
    } else {
        Err(check.conflict(order))
    }
}

fn not_found(target: &CheckpointRef, id: &str) -> Error {
    Error::CheckpointNotFound {
        thread_id: target.thread_id.clone(),
        checkpoint_ns: target.checkpoint_ns.clone(),
        checkpoint_id: id.to_owned(),
    }
}

#[async_trait]
impl Saver for InMemorySaver {
    fn leases(&self) -> Option<&dyn Leases> {
        Some(self)
    }

    fn rewrites(&self) -> Option<&dyn Rewrites> {
        Some(self)
    }

    async fn get_stored(&self, target: &CheckpointRef) -> Result<Option<CheckpointTuple>> {
        text::check_ref(target)?;
        let threads = self.read();
        let Some(log) = threads
            .get(&target.thread_id)
            .and_then(|n| n.get(&target.checkpoint_ns))
        else {
            return Ok(None);
        };
        let found = match &target.checkpoint_id {
            Some(id) => log
                .by_id
                .get(id)
                .and_then(|o| log.by_order.get_key_value(o)),
            None => log.by_order.iter().next_back(),
        };
        Ok(found.map(|(order, s)| s.tuple(&target.thread_id, &target.checkpoint_ns, *order)))
    }

    async fn list_stored(&self, filter: &ListFilter) -> Result<Vec<CheckpointTuple>> {
        filter.check()?;
        let threads = self.read();
        let limit = filter.limit.unwrap_or(usize::MAX);
        let mut out = Vec::new();
        let before =
            match (&filter.before, &filter.thread_id) {
                (Some(id), Some(thread)) => {
                    let ns = filter.checkpoint_ns.clone().unwrap_or_default();
                    let log = threads.get(thread).and_then(|n| n.get(&ns));
                    let order = log.and_then(|l| l.by_id.get(id).copied());
                    Some(order.ok_or_else(|| {
                        not_found(&CheckpointRef::latest(thread.clone()).ns(ns), id)
                    })?)
                }
                _ => None,
            };
        let selected: Box<dyn Iterator<Item = (&String, &BTreeMap<String, Log>)>> =
            match &filter.thread_id {
                Some(t) => Box::new(threads.get_key_value(t).into_iter()),
                None => Box::new(threads.iter()),
            };
        for (thread_id, nss) in selected {
            for (ns, log) in nss {
                if filter.checkpoint_ns.as_ref().is_some_and(|want| want != ns) {
                    continue;
                }
                let upper = before.unwrap_or(u64::MAX);
                for (order, s) in log.by_order.range(..upper).rev() {
                    if out.len() >= limit {
                        return Ok(out);
                    }
                    if s.metadata.matches(&filter.metadata) {
                        out.push(s.tuple(thread_id, ns, *order));
                    }
                }
            }
        }
        Ok(out)
    }

    async fn put(&self, checkpoint: NewCheckpoint) -> Result<CheckpointRef> {
        insert(&mut self.write(), checkpoint, Vec::new()).map(|(c, _)| c)
    }

    async fn put_writes(&self, target: &CheckpointRef, writes: Vec<PendingWrite>) -> Result<()> {
        text::check_ref(target)?;
        text::check_writes(&writes)?;
        stored_mut(&mut self.write(), target)?.add_writes(writes);
        Ok(())
    }

    /// All or nothing, like the SQL savers: a failed op undoes the ops
    /// before it.
    async fn put_group(&self, ops: Vec<WriteOp>) -> Result<()> {
        enum Undo {
            Insert(CheckpointRef, u64),
            Writes(CheckpointRef, BTreeMap<(String, i64), PendingWrite>),
        }
        text::check_ops(&ops)?;
        let mut threads = self.write();
        let mut undo: Vec<Undo> = Vec::new();
        for op in ops {
            let done = match op {
                WriteOp::Put(c) => {
                    insert(&mut threads, c, Vec::new()).map(|(c, order)| Undo::Insert(c, order))
                }
                WriteOp::Writes(target, writes) => {
                    stored_mut(&mut threads, &target).map(|stored| {
                        let before = stored.writes.clone();
                        stored.add_writes(writes);
                        Undo::Writes(target, before)
                    })
                }
                WriteOp::Check(c) => match check(&threads, &c) {
                    Ok(()) => continue,
                    Err(e) => Err(e),
                },
            };
            match done {
                Ok(u) => undo.push(u),
                Err(e) => {
                    for u in undo.into_iter().rev() {
                        match u {
                            Undo::Insert(c, order) => {
                                remove(&mut threads, &c.thread_id, &c.checkpoint_ns, order);
                            }
                            Undo::Writes(target, before) => {
                                if let Some(s) = find_mut(&mut threads, &target) {
                                    s.writes = before;
                                }
                            }
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    async fn put_checkpoint_with_writes(
        &self,
        checkpoint: NewCheckpoint,
        writes: Vec<PendingWrite>,
    ) -> Result<CheckpointRef> {
        insert(&mut self.write(), checkpoint, writes).map(|(c, _)| c)
    }

    async fn put_batch(&self, entries: Vec<BatchEntry>) -> Result<Vec<CheckpointRef>> {
        let mut threads = self.write();
        let mut done: Vec<(CheckpointRef, u64)> = Vec::with_capacity(entries.len());
        for entry in entries {
            match insert(&mut threads, entry.checkpoint, entry.writes) {
                Ok(r) => done.push(r),
                Err(e) => {
                    for (c, order) in done.iter().rev() {
                        remove(&mut threads, &c.thread_id, &c.checkpoint_ns, *order);
                    }
                    return Err(e);
                }
            }
        }
        Ok(done.into_iter().map(|(c, _)| c).collect())
    }

    async fn fork_lineage(
        &self,
        source: &CheckpointRef,
        target_thread: &str,
        options: ForkOptions,
    ) -> Result<CheckpointRef> {
        text::check_ref(source)?;
        text::check_new_thread(target_thread)?;
        let id = source
            .checkpoint_id
            .as_deref()
            .ok_or_else(|| Error::invalid_argument("fork_at needs a checkpoint id"))?;
        let mut threads = self.write();
        let ns = &source.checkpoint_ns;
        let log = threads
            .get(&source.thread_id)
            .and_then(|n| n.get(ns))
            .ok_or_else(|| not_found(source, id))?;
        let mut lineage: Vec<Stored> = Vec::new();
        let mut budget = ForkBudget::new(options);
        let mut cursor = Some(log.find(id).ok_or_else(|| not_found(source, id))?);
        while let Some(s) = cursor {
            budget.checkpoint(&s.checkpoint)?;
            lineage.push(s.clone());
            cursor = match &s.parent_id {
                None => None,
                Some(p) => Some(log.find(p).ok_or_else(|| Error::MissingParent {
                    thread_id: source.thread_id.clone(),
                    checkpoint_id: s.checkpoint.id.clone(),
                    parent_id: p.clone(),
                })?),
            };
        }
        // The ceiling counts the writes copied too (after the checkpoints,
        // as the SQL savers read them).
        for w in lineage.iter().flat_map(|s| s.writes.values()) {
            budget.write(w)?;
        }
        let target = threads.entry(target_thread.to_owned()).or_default();
        if target.get(ns).is_some_and(|l| !l.by_order.is_empty()) {
            return Err(Error::ThreadExists {
                thread_id: target_thread.to_owned(),
            });
        }
        let mut copy = Log::default();
        let now = SystemTime::now();
        for (i, mut s) in lineage.into_iter().rev().enumerate() {
            let order = i as u64 + 1;
            s.stored_at = now;
            copy.by_id.insert(s.checkpoint.id.clone(), order);
            copy.by_order.insert(order, s);
        }
        target.insert(ns.clone(), copy);
        Ok(CheckpointRef {
            thread_id: target_thread.to_owned(),
            checkpoint_ns: ns.clone(),
            checkpoint_id: Some(id.to_owned()),
        })
    }

    async fn copy_thread(&self, source_thread: &str, target_thread: &str) -> Result<()> {
        text::check_id("thread id", source_thread)?;
        text::check_new_thread(target_thread)?;
        let mut threads = self.write();
        if threads.get(target_thread).is_some_and(|n| !n.is_empty()) {
            return Err(Error::ThreadExists {
                thread_id: target_thread.to_owned(),
            });
        }
        let Some(source) = threads.get(source_thread) else {
            return Err(Error::ThreadNotFound {
                thread_id: source_thread.to_owned(),
            });
        };
        let copy = source
            .iter()
            .map(|(ns, log)| (ns.clone(), log.renumbered()))
            .collect();
        threads.insert(target_thread.to_owned(), copy);
        Ok(())
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        text::check_id("thread id", thread_id)?;
        self.leases.deleting(&[thread_id], || {
            self.write().remove(thread_id);
            self.base_copies().remove(thread_id);
        });
        self.state.note_deletion(thread_id);
        Ok(())
    }

    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<u64> {
        let keep = strategy.keep()?;
        for t in thread_ids {
            text::check_id("thread id", t)?;
        }
        let Some(keep) = keep else {
            let ids: Vec<&str> = thread_ids.iter().map(String::as_str).collect();
            return Ok(self.leases.deleting(&ids, || {
                let mut threads = self.write();
                let mut deleted = 0u64;
                for t in thread_ids {
                    self.base_copies().remove(t);
                    if let Some(nss) = threads.remove(t) {
                        deleted += nss.values().map(|l| l.by_order.len() as u64).sum::<u64>();
                    }
                    self.state.note_deletion(t);
                }
                deleted
            }));
        };
        let mut threads = self.write();
        // Kept records that lose their parent are rebuilt in full before
        // anything is removed, so that a bad record fails the call with
        // nothing changed.
        let mut rebuilt = Vec::new();
        let now = SystemTime::now();
        for t in thread_ids {
            for (ns, log) in threads.get(t).into_iter().flatten() {
                let keep = log.kept(keep, now);
                for (order, full) in log.materialized_boundary(t, ns, keep)? {
                    rebuilt.push((t.clone(), ns.clone(), order, full));
                }
            }
        }
        for (t, ns, order, full) in rebuilt {
            let kept = threads
                .get_mut(&t)
                .and_then(|n| n.get_mut(&ns))
                .and_then(|l| l.by_order.get_mut(&order));
            if let Some(kept) = kept {
                kept.checkpoint = full;
            }
        }
        let mut deleted = 0u64;
        for t in thread_ids {
            for log in threads.get_mut(t).into_iter().flat_map(|n| n.values_mut()) {
                let Some(cut) = log.cutoff(log.kept(keep, now)) else {
                    continue;
                };
                let old: Vec<u64> = log.by_order.range(..cut).map(|(o, _)| *o).collect();
                for o in old {
                    if let Some(s) = log.by_order.remove(&o) {
                        log.by_id.remove(&s.checkpoint.id);
                        deleted += 1;
                    }
                }
            }
        }
        Ok(deleted)
    }

    async fn list_threads(&self, limit: Option<usize>, offset: usize) -> Result<Vec<ThreadInfo>> {
        Ok(self
            .read()
            .iter()
            .filter(|(_, nss)| nss.values().any(|l| !l.by_order.is_empty()))
            .skip(offset)
            .take(limit.unwrap_or(usize::MAX))
            .filter_map(|(t, nss)| info_of(t, nss))
            .collect())
    }

    async fn thread_info(&self, thread_id: &str) -> Result<Option<ThreadInfo>> {
        text::check_id("thread id", thread_id)?;
        let threads = self.read();
        Ok(threads
            .get(thread_id)
            .and_then(|nss| info_of(thread_id, nss)))
    }

    async fn at_commit_order(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        commit_order: u64,
    ) -> Result<Option<CheckpointRef>> {
        text::check_id("thread id", thread_id)?;
        text::check_id("checkpoint namespace", checkpoint_ns)?;
        let threads = self.read();
        let found = threads
            .get(thread_id)
            .and_then(|n| n.get(checkpoint_ns))
            .and_then(|l| l.by_order.get(&commit_order));
        Ok(found.map(|s| CheckpointRef {
            thread_id: thread_id.to_owned(),
            checkpoint_ns: checkpoint_ns.to_owned(),
            checkpoint_id: Some(s.checkpoint.id.clone()),
        }))
    }

    async fn lineage(
        &self,
        from: &CheckpointRef,
        count: usize,
        _below: Option<u64>,
    ) -> Result<Vec<CheckpointTuple>> {
        text::check_ref(from)?;
        let Some(id) = &from.checkpoint_id else {
            return Ok(Vec::new());
        };
        let threads = self.read();
        Ok(threads
            .get(&from.thread_id)
            .and_then(|n| n.get(&from.checkpoint_ns))
            .map(|log| log.lineage(&from.thread_id, &from.checkpoint_ns, id, count))
            .unwrap_or_default())
    }

    fn supports_deltas(&self) -> bool {
        true
    }

    fn is_in_process(&self) -> bool {
        true
    }

    fn shared_state(&self) -> Option<Arc<SaverState>> {
        Some(self.state.clone())
    }
}

/// What [`Saver::thread_info`] says of thread `thread_id` whose namespaces
/// are `nss`: `None` when it holds no checkpoint.
fn info_of(thread_id: &str, nss: &BTreeMap<String, Log>) -> Option<ThreadInfo> {
    let times = nss
        .values()
        .flat_map(|l| l.by_order.values().map(|s| s.stored_at));
    let (first, last) = times.fold(None, |acc: Option<(SystemTime, SystemTime)>, t| {
        Some(acc.map_or((t, t), |(a, b)| (a.min(t), b.max(t))))
    })?;
    let checkpoints = nss.values().map(|l| l.by_order.len() as u64).sum();
    ThreadInfo::counted(thread_id, checkpoints).map(|i| i.at(first, last))
}
