//! [`MongoSaver`]'s [`Saver`] implementation: every multi-document write in
//! one multi-document transaction, commit orders unique by index.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use futures_util::TryStreamExt;
use mongodb::ClientSession;
use mongodb::bson::{Bson, DateTime, Document, doc};

use super::records::Head;
use super::{MongoSaver, is_duplicate_key, storage};
use crate::checkpoint::text;
use crate::checkpoint::{
    BatchEntry, CheckpointRef, CheckpointTuple, DeletionNote, ForkBudget, ForkOptions, ListFilter,
    NewCheckpoint, PendingWrite, PruneStrategy, Saver, SaverState, ThreadInfo, WriteCheck, WriteOp,
};
use crate::error::{Error, Result};

fn not_found(target: &CheckpointRef, id: &str) -> Error {
    Error::CheckpointNotFound {
        thread_id: target.thread_id.clone(),
        checkpoint_ns: target.checkpoint_ns.clone(),
        checkpoint_id: id.to_owned(),
    }
}

/// The commit order a checkpoint document holds.
fn stored_order(d: &Document) -> Result<u64> {
    let o = super::records::int(d, "commit_order")
        .map_err(|e| Error::decode("a stored commit_order", e))?;
    u64::try_from(o).map_err(|e| Error::decode("a stored commit_order", e))
}

/// `d` as a time of this machine; one the platform's clock cannot hold (a
/// damaged record: before 1601 or after 30828 on Windows) is
/// [`Error::Decode`], where bson's conversion panics.
fn time(d: DateTime) -> Result<SystemTime> {
    let ms = d.timestamp_millis();
    let at = std::time::Duration::from_millis(ms.unsigned_abs());
    let time = if ms >= 0 {
        std::time::UNIX_EPOCH.checked_add(at)
    } else {
        std::time::UNIX_EPOCH.checked_sub(at)
    };
    time.ok_or_else(|| Error::decode("a stored time", format!("{ms} ms is out of range")))
}

impl MongoSaver {
    /// The newest commit order stored on `thread`/`ns` (0 when none), read
    /// by operation `op`.
    pub(super) async fn head(
        &self,
        s: &mut ClientSession,
        thread: &str,
        ns: &str,
        op: &'static str,
    ) -> Result<u64> {
        let found = self
            .checkpoints()
            .find_one(doc! { "thread_id": thread, "ns": ns })
            .sort(doc! { "commit_order": -1 })
            .projection(doc! { "commit_order": 1 })
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        found.as_ref().map_or(Ok(0), stored_order)
    }

    /// The commit order of checkpoint `id` on `thread`/`ns`, if stored.
    async fn order_of(
        &self,
        s: Option<&mut ClientSession>,
        thread: &str,
        ns: &str,
        id: &str,
        op: &'static str,
    ) -> Result<Option<u64>> {
        let coll = self.checkpoints();
        let find = coll
            .find_one(doc! { "thread_id": thread, "ns": ns, "checkpoint_id": id })
            .projection(doc! { "commit_order": 1 });
        let found = match s {
            Some(s) => find.session(s).await,
            None => find.await,
        }
        .map_err(storage(op))?;
        found.as_ref().map(stored_order).transpose()
    }

    /// Inserts one checkpoint and its writes inside the transaction `s`.
    async fn insert(
        &self,
        s: &mut ClientSession,
        new: &NewCheckpoint,
        writes: &[PendingWrite],
    ) -> Result<CheckpointRef> {
        text::check_new(new)?;
        text::check_writes(writes)?;
        let mut metadata = new.metadata.clone();
        text::strip_nul(&mut metadata);
        let (thread, ns) = (new.thread_id.clone(), new.checkpoint_ns.clone());
        let order = match new.commit_order {
            Some(o) => o,
            None => self.head(s, &thread, &ns, "put").await? + 1,
        };
        if i64::try_from(order).is_err() {
            return Err(Error::invalid_argument(format!(
                "commit_order {order} is out of range"
            )));
        }
        let conflict = || Error::VersionConflict {
            thread_id: thread.clone(),
            checkpoint_ns: ns.clone(),
            attempted: order,
        };
        if order == 0 {
            return Err(conflict());
        }
        // A taken order or id is a conflict before anything else (the
        // unique indexes enforce it again at the insert, against racers).
        let coll = self.checkpoints();
        let by_order = coll
            .find_one(doc! { "thread_id": &thread, "ns": &ns, "commit_order": order as i64 })
            .projection(doc! { "_id": 1 })
            .session(&mut *s)
            .await
            .map_err(storage("put"))?;
        if by_order.is_some()
            || self
                .order_of(Some(s), &thread, &ns, &new.checkpoint.id, "put")
                .await?
                .is_some()
        {
            return Err(conflict());
        }
        if let Some(parent) = &new.parent_id {
            match self.claim_parent(s, &thread, &ns, parent).await? {
                None => return Err(not_found(&new.config(), parent)),
                Some(p) if p >= order => return Err(new.after_parent_error(order, p)),
                Some(_) => {}
            }
        }
        let d = self.checkpoint_doc(
            &thread,
            &ns,
            new.parent_id.as_deref(),
            &new.checkpoint,
            &metadata,
            order,
        )?;
        let docs = writes
            .iter()
            .map(|w| self.write_doc(&thread, &ns, &new.checkpoint.id, w))
            .collect::<Result<Vec<_>>>()?;
        match self.checkpoints().insert_one(d).session(&mut *s).await {
            Ok(_) => {}
            Err(e) if is_duplicate_key(&e) => return Err(conflict()),
            // A write conflict (112) with a transaction still open: it is
            // transient, and the caller runs the transaction again; by then
            // the other one has committed (the order is taken: a conflict)
            // or gone (a dead client's, aborted by the server).
            Err(e) => return Err(Error::storage("put", e)),
        }
        self.upsert_writes(s, writes, docs).await?;
        Ok(new.config())
    }

    /// The commit order of the parent checkpoint `id` a put inside `s`
    /// builds on, if stored; the parent's document is written (its
    /// `children` count goes up). A transaction conflicts only on documents
    /// both write: a delete or prune removing the parent meanwhile so meets
    /// this put, one of the two runs again, and the put then finds its
    /// parent gone instead of leaving a child under it. Only a new
    /// checkpoint pays (one per step); a task's writes do not, so parallel
    /// tasks never conflict with each other.
    async fn claim_parent(
        &self,
        s: &mut ClientSession,
        thread: &str,
        ns: &str,
        id: &str,
    ) -> Result<Option<u64>> {
        let found = self
            .checkpoints()
            .find_one_and_update(
                doc! { "thread_id": thread, "ns": ns, "checkpoint_id": id },
                doc! { "$inc": { "children": 1_i64 } },
            )
            .projection(doc! { "commit_order": 1 })
            .session(&mut *s)
            .await
            .map_err(storage("put"))?;
        found.as_ref().map(stored_order).transpose()
    }

    /// Stores write documents: an ordinary write already stored is kept, a
    /// special one replaces the earlier.
    async fn upsert_writes(
        &self,
        s: &mut ClientSession,
        writes: &[PendingWrite],
        docs: Vec<Document>,
    ) -> Result<()> {
        for (w, d) in writes.iter().zip(docs) {
            let key = doc! {
                "thread_id": d.get("thread_id").cloned().unwrap_or(Bson::Null),
                "ns": d.get("ns").cloned().unwrap_or(Bson::Null),
                "checkpoint_id": d.get("checkpoint_id").cloned().unwrap_or(Bson::Null),
                "task_id": &w.task_id,
                "idx": w.idx,
            };
            // An ordinary write already stored stays, a special one
            // replaces the earlier.
            let done = if w.is_special() {
                self.writes()
                    .replace_one(key, d)
                    .upsert(true)
                    .session(&mut *s)
                    .await
            } else {
                self.writes()
                    .update_one(key, doc! { "$setOnInsert": d })
                    .upsert(true)
                    .session(&mut *s)
                    .await
            };
            done.map_err(storage("put_writes"))?;
        }
        Ok(())
    }

    /// Stores writes of the checkpoint `target` names (which must exist).
    async fn add_writes(
        &self,
        s: &mut ClientSession,
        target: &CheckpointRef,
        writes: &[PendingWrite],
    ) -> Result<()> {
        text::check_ref(target)?;
        text::check_writes(writes)?;
        let id = target
            .checkpoint_id
            .as_deref()
            .ok_or_else(|| Error::invalid_argument("put_writes needs a checkpoint id"))?;
        let (thread, ns) = (&target.thread_id, &target.checkpoint_ns);
        if self
            .order_of(Some(s), thread, ns, id, "put_writes")
            .await?
            .is_none()
        {
            return Err(not_found(target, id));
        }
        let docs = writes
            .iter()
            .map(|w| self.write_doc(thread, ns, id, w))
            .collect::<Result<Vec<_>>>()?;
        self.upsert_writes(s, writes, docs).await
    }

    /// Applies a [`WriteCheck`] inside the transaction `s`.
    async fn check(&self, s: &mut ClientSession, check: &WriteCheck) -> Result<()> {
        let id = check.checkpoint_id()?;
        let t = &check.target;
        let Some(order) = self
            .order_of(Some(s), &t.thread_id, &t.checkpoint_ns, id, "put_ops")
            .await?
        else {
            return Err(not_found(t, id));
        };
        let found = self
            .writes()
            .find_one(doc! {
                "thread_id": &t.thread_id, "ns": &t.checkpoint_ns, "checkpoint_id": id,
                "task_id": &check.task_id, "idx": check.idx,
            })
            .session(&mut *s)
            .await
            .map_err(storage("put_ops"))?;
        let value = found.map(|d| self.decode_write(&d)).transpose()?;
        if check.holds(value.as_ref().map(|w| &w.value)) {
            Ok(())
        } else {
            Err(check.conflict(order))
        }
    }

    /// Attaches to `tuples` their pending writes, in `(task_id, idx)` order.
    async fn attach_writes(
        &self,
        mut s: Option<&mut ClientSession>,
        tuples: &mut [CheckpointTuple],
        op: &'static str,
    ) -> Result<()> {
        let mut by: HashMap<(String, String, String), Vec<PendingWrite>> = HashMap::new();
        // In chunks: a query is one document, 16 MB at most, and a long
        // thread's ids would not fit in one; each chunk names its own
        // threads only.
        for chunk in tuples.chunks(super::WRITES_PER_QUERY) {
            let wanted: std::collections::HashSet<(&str, &str, &str)> = chunk
                .iter()
                .filter_map(|t| {
                    let id = t.config.checkpoint_id.as_deref()?;
                    Some((
                        t.config.thread_id.as_str(),
                        t.config.checkpoint_ns.as_str(),
                        id,
                    ))
                })
                .collect();
            let ids: std::collections::BTreeSet<&str> = wanted.iter().map(|k| k.2).collect();
            let threads: std::collections::BTreeSet<&str> = wanted.iter().map(|k| k.0).collect();
            let filter = doc! {
                "checkpoint_id": { "$in": ids.into_iter().collect::<Vec<_>>() },
                "thread_id": { "$in": threads.into_iter().collect::<Vec<_>>() },
            };
            let coll = self.writes();
            let find = coll.find(filter);
            let docs: Vec<Document> = match s.as_deref_mut() {
                Some(s) => find
                    .session(&mut *s)
                    .await
                    .map_err(storage(op))?
                    .stream(s)
                    .try_collect()
                    .await
                    .map_err(storage(op))?,
                None => find
                    .await
                    .map_err(storage(op))?
                    .try_collect()
                    .await
                    .map_err(storage(op))?,
            };
            let pairs: std::collections::HashSet<(&str, &str)> =
                wanted.iter().map(|k| (k.0, k.2)).collect();
            for d in &docs {
                let key = |k: &str| d.get_str(k).unwrap_or_default();
                let (thread, id) = (key("thread_id"), key("checkpoint_id"));
                // A write whose namespace does not read, on a checkpoint
                // read here: damage, named, never a write gone missing.
                let named = |e: Error| match e {
                    Error::Decode { what, reason } => Error::Decode {
                        what: format!("{what}, of checkpoint `{id}` of thread `{thread}`"),
                        reason,
                    },
                    e => e,
                };
                let ns = match d.get_str("ns") {
                    Ok(ns) => ns,
                    Err(_) if !pairs.contains(&(thread, id)) => continue,
                    Err(e) => {
                        return Err(named(Error::decode(
                            "a stored MongoDB pending write (ns)",
                            e,
                        )));
                    }
                };
                let k = (thread, ns, id);
                // Another thread's write on a checkpoint id one of these
                // threads shares (a fork or copy keeps ids): not read.
                if !wanted.contains(&k) {
                    continue;
                }
                let write = self.decode_write(d).map_err(named)?;
                let k = (k.0.to_owned(), k.1.to_owned(), k.2.to_owned());
                by.entry(k).or_default().push(write);
            }
        }
        for t in tuples {
            let k = (
                t.config.thread_id.clone(),
                t.config.checkpoint_ns.clone(),
                t.config.checkpoint_id.clone().unwrap_or_default(),
            );
            let mut w = by.remove(&k).unwrap_or_default();
            w.sort_by(|a, b| (&a.task_id, a.idx).cmp(&(&b.task_id, b.idx)));
            t.pending_writes = w;
        }
        Ok(())
    }

    /// Decodes `docs` (checkpoints) with their writes.
    async fn tuples(&self, docs: &[Document], op: &'static str) -> Result<Vec<CheckpointTuple>> {
        let mut out = docs
            .iter()
            .map(|d| self.decode_checkpoint(d))
            .collect::<Result<Vec<_>>>()?;
        self.attach_writes(None, &mut out, op).await?;
        Ok(out)
    }

    /// Puts `new` with its writes in a transaction of its own (in a task of
    /// its own: [`MongoSaver::detached`]).
    async fn put_one(
        &self,
        new: NewCheckpoint,
        writes: Vec<PendingWrite>,
    ) -> Result<CheckpointRef> {
        self.detached("put", move |me| async move {
            in_txn_retrying!(me, "put", |s| me.insert(&mut s, &new, &writes).await)
        })
        .await
    }
}

#[async_trait]
impl Saver for MongoSaver {
    async fn get_stored(&self, target: &CheckpointRef) -> Result<Option<CheckpointTuple>> {
        text::check_ref(target)?;
        self.verify().await?;
        let mut filter = doc! { "thread_id": &target.thread_id, "ns": &target.checkpoint_ns };
        if let Some(id) = &target.checkpoint_id {
            filter.insert("checkpoint_id", id);
        }
        let found = self
            .checkpoints()
            .find_one(filter)
            .sort(doc! { "commit_order": -1 })
            .await
            .map_err(storage("get"))?;
        let Some(d) = found else { return Ok(None) };
        Ok(self.tuples(&[d], "get").await?.pop())
    }

    async fn list_stored(&self, filter: &ListFilter) -> Result<Vec<CheckpointTuple>> {
        filter.check()?;
        // A key the codec seals is stored as ciphertext: the server could
        // not compare it, so the filter is refused, as on SQL.
        self.codec.check_metadata_filter(&filter.metadata)?;
        self.verify().await?;
        let mut q = Document::new();
        if let Some(t) = &filter.thread_id {
            q.insert("thread_id", t);
        }
        if let Some(ns) = &filter.checkpoint_ns {
            q.insert("ns", ns);
        }
        if let (Some(id), Some(thread)) = (&filter.before, &filter.thread_id) {
            let ns = filter.checkpoint_ns.clone().unwrap_or_default();
            let order = self.order_of(None, thread, &ns, id, "list").await?;
            let order = order
                .ok_or_else(|| not_found(&CheckpointRef::latest(thread.clone()).ns(ns), id))?;
            q.insert("commit_order", doc! { "$lt": order as i64 });
        }
        // Filter keys are identifiers (`filter.check`), so `meta.<key>`
        // names exactly that field. The server's match is wider than the
        // contract's (a string matches an array holding it, `null` a
        // missing key, numbers compare across types), so its answer is
        // filtered again here and a limit goes to the server only when no
        // metadata is filtered; otherwise the cursor is read until the
        // limit is met. An object or array value is not sent at all: the
        // server would read a `$` key in it as an operator (`$regex`,
        // `$where`) and compare embedded documents key order and all; it
        // is matched here only.
        for (k, v) in &filter.metadata {
            if !(v.is_object() || v.is_array()) {
                q.insert(format!("meta.{k}"), super::records::bson_of(v));
            }
        }
        let coll = self.checkpoints();
        let mut find = coll
            .find(q)
            .sort(doc! { "thread_id": 1, "ns": 1, "commit_order": -1 });
        if let (Some(limit), true) = (filter.limit, filter.metadata.is_empty()) {
            find = find.limit(i64::try_from(limit).unwrap_or(i64::MAX));
        }
        let mut cursor = find.await.map_err(storage("list"))?;
        let mut out = Vec::new();
        while filter.limit.is_none_or(|l| out.len() < l) {
            let Some(d) = cursor.try_next().await.map_err(storage("list"))? else {
                break;
            };
            let t = self.decode_checkpoint(&d)?;
            if t.metadata.matches(&filter.metadata) {
                out.push(t);
            }
        }
        self.attach_writes(None, &mut out, "list").await?;
        Ok(out)
    }

    async fn put_writes(&self, target: &CheckpointRef, writes: Vec<PendingWrite>) -> Result<()> {
        self.verify().await?;
        // Writes are idempotent per (task, index): a transaction that lost
        // a write conflict to another writer of the same keys runs again.
        let target = target.clone();
        self.detached("put_writes", move |me| async move {
            in_txn_retrying!(me, "put_writes", |s| me
                .add_writes(&mut s, &target, &writes)
                .await)
        })
        .await
    }

    async fn put_checkpoint_with_writes(
        &self,
        checkpoint: NewCheckpoint,
        writes: Vec<PendingWrite>,
    ) -> Result<CheckpointRef> {
        self.verify().await?;
        if checkpoint.commit_order.is_some() {
            return self.put_one(checkpoint, writes).await;
        }
        // "The next free" commit order: a writer that lost the race for it
        // takes the one after.
        let mut tries = 0;
        loop {
            match self.put_one(checkpoint.clone(), writes.clone()).await {
                Err(Error::VersionConflict { .. }) if tries < 16 => tries += 1,
                other => return other,
            }
        }
    }

    async fn put_group(&self, ops: Vec<WriteOp>) -> Result<()> {
        text::check_ops(&ops)?;
        self.verify().await?;
        self.detached("put_ops", move |me| async move {
            in_txn_retrying!(me, "put_ops", |s| {
                for op in &ops {
                    match op {
                        WriteOp::Put(c) => {
                            me.insert(&mut s, c, &[]).await?;
                        }
                        WriteOp::Writes(target, writes) => {
                            me.add_writes(&mut s, target, writes).await?
                        }
                        WriteOp::Check(c) => me.check(&mut s, c).await?,
                    }
                }
                Ok(())
            })
        })
        .await
    }

    async fn put_batch(&self, entries: Vec<BatchEntry>) -> Result<Vec<CheckpointRef>> {
        self.verify().await?;
        self.detached("put_many", move |me| async move {
            in_txn_retrying!(me, "put_many", |s| {
                let mut out = Vec::with_capacity(entries.len());
                for e in &entries {
                    out.push(me.insert(&mut s, &e.checkpoint, &e.writes).await?);
                }
                Ok(out)
            })
        })
        .await
    }

    async fn fork_lineage(
        &self,
        source: &CheckpointRef,
        target_thread: &str,
        options: ForkOptions,
    ) -> Result<CheckpointRef> {
        text::check_ref(source)?;
        text::check_new_thread(target_thread)?;
        self.verify().await?;
        let id = source
            .checkpoint_id
            .as_deref()
            .ok_or_else(|| Error::invalid_argument("fork_at needs a checkpoint id"))?;
        let ns = &source.checkpoint_ns;
        let forked = CheckpointRef {
            thread_id: target_thread.to_owned(),
            checkpoint_ns: ns.clone(),
            checkpoint_id: Some(id.to_owned()),
        };
        let (source, id) = (source.clone(), id.to_owned());
        let target = target_thread.to_owned();
        self.detached("fork_at", move |me| async move {
            in_txn_retrying!(me, "fork_at", |s| {
                // The lineage and its writes are read in the transaction's
                // snapshot: as of one moment, however a prune of the source
                // goes meanwhile (its writes are never read after the
                // prune took them).
                let mut budget = ForkBudget::new(options);
                let mut lineage: Vec<CheckpointTuple> = Vec::new();
                let mut next = Some(id.clone());
                while let Some(cur) = next.take() {
                    let found = me
                        .checkpoints()
                        .find_one(doc! { "thread_id": &source.thread_id, "ns": &source.checkpoint_ns, "checkpoint_id": &cur })
                        .session(&mut s)
                        .await
                        .map_err(storage("fork_at"))?;
                    let Some(d) = found else {
                        return Err(match lineage.last() {
                            None => not_found(&source, &id),
                            Some(child) => Error::MissingParent {
                                thread_id: source.thread_id.clone(),
                                checkpoint_id: child.checkpoint.id.clone(),
                                parent_id: cur,
                            },
                        });
                    };
                    let t = me.decode_checkpoint(&d)?;
                    budget.checkpoint(&t.checkpoint)?;
                    next = t
                        .parent_config
                        .as_ref()
                        .and_then(|p| p.checkpoint_id.clone());
                    lineage.push(t);
                }
                me.attach_writes(Some(&mut s), &mut lineage, "fork_at")
                    .await?;
                for w in lineage.iter().flat_map(|t| &t.pending_writes) {
                    budget.write(w)?;
                }
                me.claim_target(&mut s, &target, Some(&source.checkpoint_ns), "fork_at")
                    .await?;
                for (i, t) in lineage.iter().rev().enumerate() {
                    me.copy_in(&mut s, t.clone(), &target, i as u64 + 1).await?;
                }
                Ok(())
            })
        })
        .await?;
        Ok(forked)
    }

    async fn copy_thread(&self, source_thread: &str, target_thread: &str) -> Result<()> {
        text::check_id("thread id", source_thread)?;
        text::check_new_thread(target_thread)?;
        self.verify().await?;
        let (source, target) = (source_thread.to_owned(), target_thread.to_owned());
        self.detached("copy_thread", move |me| async move {
            in_txn_retrying!(me, "copy_thread", |s| {
                // The source is read in the transaction's snapshot: its
                // checkpoints and their writes as of one moment, however a
                // delete or prune of it goes meanwhile.
                // The target first, as the other savers check it.
                me.claim_target(&mut s, &target, None, "copy_thread")
                    .await?;
                let cursor = me
                    .checkpoints()
                    .find(doc! { "thread_id": &source })
                    .sort(doc! { "ns": 1, "commit_order": 1 })
                    .session(&mut s)
                    .await
                    .map_err(storage("copy_thread"))?;
                let docs = super::drain(&mut s, cursor, "copy_thread").await?;
                if docs.is_empty() {
                    return Err(Error::ThreadNotFound {
                        thread_id: source.clone(),
                    });
                }
                let mut tuples = docs
                    .iter()
                    .map(|d| me.decode_checkpoint(d))
                    .collect::<Result<Vec<_>>>()?;
                me.attach_writes(Some(&mut s), &mut tuples, "copy_thread")
                    .await?;
                let mut orders: HashMap<String, u64> = HashMap::new();
                for t in &tuples {
                    let o = orders.entry(t.config.checkpoint_ns.clone()).or_default();
                    *o += 1;
                    let order = *o;
                    me.copy_in(&mut s, t.clone(), &target, order).await?;
                }
                Ok(())
            })
        })
        .await
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        text::check_id("thread id", thread_id)?;
        self.verify().await?;
        let thread = thread_id.to_owned();
        let threads = [thread.clone()];
        let _deleted = DeletionNote(&self.state, &threads);
        self.detached("delete_thread", move |me| async move {
            in_txn_retrying!(me, "delete_thread", |s| {
                me.forget_holders(&mut s, std::slice::from_ref(&thread), "delete_thread")
                    .await?;
                me.checkpoints()
                    .delete_many(doc! { "thread_id": &thread })
                    .session(&mut s)
                    .await
                    .map_err(storage("delete_thread"))?;
                me.writes()
                    .delete_many(doc! { "thread_id": &thread })
                    .session(&mut s)
                    .await
                    .map_err(storage("delete_thread"))?;
                Ok(())
            })
        })
        .await
    }

    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<u64> {
        // In a task of its own (its transactions: `detached`).
        let ids = thread_ids.to_vec();
        self.detached("prune", move |me| async move {
            super::prune::prune(&me, &ids, strategy).await
        })
        .await
    }

    async fn list_threads(&self, limit: Option<usize>, offset: usize) -> Result<Vec<ThreadInfo>> {
        self.verify().await?;
        let docs: Vec<Document> = self
            .checkpoints()
            .find(doc! {})
            .projection(doc! { "thread_id": 1, "stored_at": 1 })
            .sort(doc! { "thread_id": 1 })
            .await
            .map_err(storage("list_threads"))?
            .try_collect()
            .await
            .map_err(storage("list_threads"))?;
        let mut by: BTreeMap<String, (u64, DateTime, DateTime)> = BTreeMap::new();
        for d in &docs {
            let t = d
                .get_str("thread_id")
                .map_err(|e| Error::decode("a stored thread id", e))?;
            let at = *d
                .get_datetime("stored_at")
                .map_err(|e| Error::decode("a stored time", e))?;
            let e = by.entry(t.to_owned()).or_insert((0, at, at));
            e.0 += 1;
            e.1 = e.1.min(at);
            e.2 = e.2.max(at);
        }
        let mut out = Vec::new();
        for (t, (n, a, b)) in by
            .into_iter()
            .skip(offset)
            .take(limit.unwrap_or(usize::MAX))
        {
            if let Some(i) = ThreadInfo::counted(&t, n) {
                out.push(i.at(time(a)?, time(b)?));
            }
        }
        Ok(out)
    }

    async fn thread_info(&self, thread_id: &str) -> Result<Option<ThreadInfo>> {
        text::check_id("thread id", thread_id)?;
        self.verify().await?;
        let docs: Vec<Document> = self
            .checkpoints()
            .find(doc! { "thread_id": thread_id })
            .projection(doc! { "stored_at": 1 })
            .await
            .map_err(storage("thread_info"))?
            .try_collect()
            .await
            .map_err(storage("thread_info"))?;
        let mut times = Vec::with_capacity(docs.len());
        for d in &docs {
            times.push(
                *d.get_datetime("stored_at")
                    .map_err(|e| Error::decode("a stored time", e))?,
            );
        }
        let (Some(a), Some(b)) = (times.iter().min(), times.iter().max()) else {
            return Ok(None);
        };
        let (a, b) = (time(*a)?, time(*b)?);
        Ok(ThreadInfo::counted(thread_id, times.len() as u64).map(|i| i.at(a, b)))
    }

    async fn at_commit_order(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        commit_order: u64,
    ) -> Result<Option<CheckpointRef>> {
        text::check_id("thread id", thread_id)?;
        text::check_id("checkpoint namespace", checkpoint_ns)?;
        self.verify().await?;
        let Ok(order) = i64::try_from(commit_order) else {
            return Ok(None);
        };
        let found = self
            .checkpoints()
            .find_one(doc! { "thread_id": thread_id, "ns": checkpoint_ns, "commit_order": order })
            .projection(doc! { "thread_id": 1, "ns": 1, "checkpoint_id": 1, "commit_order": 1, "stored_at": 1 })
            .await
            .map_err(storage("at_commit_order"))?;
        found
            .map(|d| {
                let h = Head::of(&d)?;
                Ok(CheckpointRef {
                    thread_id: h.thread_id,
                    checkpoint_ns: h.ns,
                    checkpoint_id: Some(h.checkpoint_id),
                })
            })
            .transpose()
    }

    fn supports_deltas(&self) -> bool {
        true
    }

    fn shared_state(&self) -> Option<Arc<SaverState>> {
        Some(self.state.clone())
    }

    fn rewrites(&self) -> Option<&dyn crate::checkpoint::Rewrites> {
        Some(self)
    }

    fn leases(&self) -> Option<&dyn crate::checkpoint::Leases> {
        Some(self)
    }
}

impl MongoSaver {
    /// Stores `t` (with its writes) on `thread` at `order`, encoded afresh
    /// for its new place.
    async fn copy_in(
        &self,
        s: &mut ClientSession,
        t: CheckpointTuple,
        thread: &str,
        order: u64,
    ) -> Result<()> {
        let ns = &t.config.checkpoint_ns;
        let parent = t
            .parent_config
            .as_ref()
            .and_then(|p| p.checkpoint_id.as_deref());
        let d = self.checkpoint_doc(thread, ns, parent, &t.checkpoint, &t.metadata, order)?;
        let docs = t
            .pending_writes
            .iter()
            .map(|w| self.write_doc(thread, ns, &t.checkpoint.id, w))
            .collect::<Result<Vec<_>>>()?;
        match self.checkpoints().insert_one(d).session(&mut *s).await {
            Ok(_) => {}
            // The target, found empty in this transaction's snapshot, got
            // a checkpoint from a writer that committed since.
            Err(e) if is_duplicate_key(&e) => {
                return Err(Error::ThreadExists {
                    thread_id: thread.to_owned(),
                });
            }
            // A write conflict with a transaction still open is transient:
            // the transaction runs again, and finds the target taken or not.
            Err(e) => return Err(Error::storage("copy", e)),
        }
        self.upsert_writes(s, &t.pending_writes, docs).await
    }

    /// For a fork or copy into `thread` (namespace `ns`, or all), inside
    /// `s`: [`Error::ThreadExists`] when it holds a checkpoint; otherwise
    /// write documents left there without a checkpoint (a task's writes
    /// that outlived a delete) go, so that none wins over (an ordinary
    /// write keeps the value stored first) or joins the copied ones.
    async fn claim_target(
        &self,
        s: &mut ClientSession,
        thread: &str,
        ns: Option<&str>,
        op: &'static str,
    ) -> Result<()> {
        let mut filter = doc! { "thread_id": thread };
        if let Some(ns) = ns {
            filter.insert("ns", ns);
        }
        let taken = self
            .checkpoints()
            .find_one(filter.clone())
            .projection(doc! { "_id": 1 })
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        if taken.is_some() {
            return Err(Error::ThreadExists {
                thread_id: thread.to_owned(),
            });
        }
        self.writes()
            .delete_many(filter)
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        Ok(())
    }
}
