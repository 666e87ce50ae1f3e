//! The SQL saver's copies: [`fork_at`](crate::checkpoint::Saver::fork_at)
//! (a lineage into a new thread) and
//! [`copy_thread`](crate::checkpoint::Saver::copy_thread).

use std::collections::HashMap;

use super::backend::Backend;
use super::group::Arg;
use super::saver::SqlSaver;
use super::{not_found, retried};
use crate::checkpoint::{
    CheckpointRef, CheckpointTuple, ForkBudget, ForkOptions, NewCheckpoint, PendingWrite, delta,
};
use crate::error::{Error, Result};
use crate::sql::Pooling;
use crate::sql::error::storage;

impl<D: Backend> SqlSaver<D> {
    /// [`fork_lineage`](crate::checkpoint::Saver::fork_lineage).
    pub(super) async fn fork(
        &self,
        source: &CheckpointRef,
        target_thread: &str,
        options: ForkOptions,
    ) -> Result<CheckpointRef> {
        let op = "fork_at";
        let id = source
            .checkpoint_id
            .as_deref()
            .ok_or_else(|| Error::invalid_argument("fork_at needs a checkpoint id"))?;
        self.ensure_migrated().await?;
        let q = &self.settings.q;
        let ns = &source.checkpoint_ns;
        // Shallow: only the kept checkpoint can be forked, and only it is copied.
        let history = self.settings.history;
        let depth = history.fork_depth(options.max_checkpoints);
        let depth = i64::try_from(depth).unwrap_or(i64::MAX);
        let lineage_args = [
            Arg::Text(&source.thread_id),
            Arg::Text(ns),
            Arg::Text(id),
            Arg::Int(depth),
        ];
        // The lineage and its writes from one snapshot: a prune committing
        // between the two reads would otherwise leave checkpoints without
        // their writes.
        let mut snapshot = D::begin_snapshot(&self.pool, op).await?;
        let rows = D::fetch_all(
            &mut snapshot,
            self.settings.pooling,
            q.lineage.clone(),
            lineage_args,
        )
        .await
        .map_err(storage(op))?;
        if rows.is_empty() {
            let thread = &source.thread_id;
            self.superseded(thread, ns, op, || {
                format!(
                    "forking from checkpoint `{id}` of thread `{thread}`, which is not the latest"
                )
            })
            .await?;
            return Err(not_found(source, id));
        }
        let mut lineage: Vec<CheckpointTuple> = Vec::new();
        let mut budget = ForkBudget::new(options);
        for (i, row) in rows.iter().enumerate() {
            let t = self.decode_record(row, &source.thread_id, ns, op)?;
            budget.checkpoint(&t.checkpoint)?;
            // The oldest record read still has a parent: it is missing.
            let oldest = i + 1 == rows.len() && history.keeps_all();
            if let Some(p) = t.parent_config.as_ref().filter(|_| oldest) {
                return Err(Error::MissingParent {
                    thread_id: source.thread_id.clone(),
                    checkpoint_id: t.config.checkpoint_id.clone().unwrap_or_default(),
                    parent_id: p.checkpoint_id.clone().unwrap_or_default(),
                });
            }
            lineage.push(t);
        }
        // A shallow fork copies one record: one that stores delta channels
        // (written by a full saver on the same database) is copied with them
        // rebuilt in full, as nothing it extends is copied.
        if let Some(t) = lineage
            .first_mut()
            .filter(|t| !history.keeps_all() && delta::unresolved(&t.checkpoint))
        {
            t.checkpoint = self.materialized(&mut snapshot, t, op).await?;
            // The copy is the record in full: the byte ceiling holds for
            // what is written.
            budget.only(&t.checkpoint)?;
        }
        let write_rows = D::fetch_all(
            &mut snapshot,
            self.settings.pooling,
            q.lineage_writes.clone(),
            lineage_args,
        )
        .await
        .map_err(storage(op))?;
        snapshot.commit().await.map_err(storage(op))?;
        let mut writes: HashMap<String, Vec<PendingWrite>> = HashMap::new();
        for row in &write_rows {
            let cid: String = Self::get(row, "checkpoint_id", op)?;
            let w = self.decode_write_row(row, &source.thread_id, ns, &cid, op)?;
            // The ceiling counts the writes copied too.
            budget.write(&w)?;
            writes.entry(cid).or_default().push(w);
        }
        let mut encoded = Vec::with_capacity(lineage.len());
        for (i, t) in lineage.into_iter().rev().enumerate() {
            let cid = t.checkpoint.id.clone();
            let new = NewCheckpoint {
                thread_id: target_thread.to_owned(),
                checkpoint_ns: ns.clone(),
                parent_id: t.parent_config.and_then(|p| p.checkpoint_id),
                checkpoint: t.checkpoint,
                metadata: t.metadata,
                commit_order: Some(i as u64 + 1),
            };
            let w = writes.remove(&cid).unwrap_or_default();
            encoded.push(self.settings.encode_entry(new, w)?);
        }
        let encoded = &encoded;
        retried(|| async move {
            let mut tx = self.begin_write(op).await?;
            let args = [Arg::Text(target_thread), Arg::Text(ns)];
            let (taken, orphans) = (&q.thread_ns_has_any, &q.delete_orphan_ns_writes);
            claim_target::<D, 2>(
                &mut tx,
                self.settings.pooling,
                taken,
                orphans,
                args,
                target_thread,
                op,
            )
            .await?;
            for e in encoded {
                self.insert_raw(&mut tx, e, op).await?;
            }
            tx.commit().await.map_err(storage(op))
        })
        .await?;
        Ok(CheckpointRef {
            thread_id: target_thread.to_owned(),
            checkpoint_ns: ns.clone(),
            checkpoint_id: Some(id.to_owned()),
        })
    }

    /// [`copy_thread`](crate::checkpoint::Saver::copy_thread).
    pub(super) async fn copy(&self, source_thread: &str, target_thread: &str) -> Result<()> {
        let op = "copy_thread";
        self.ensure_migrated().await?;
        let q = &self.settings.q;
        retried(|| async move {
            // One snapshot for every read (see fork_at).
            let mut tx = D::begin_write_snapshot(&self.pool, op).await?;
            let target = [Arg::Text(target_thread)];
            let (taken, orphans) = (&q.thread_has_any, &q.delete_orphan_writes);
            claim_target::<D, 1>(
                &mut tx,
                self.settings.pooling,
                taken,
                orphans,
                target,
                target_thread,
                op,
            )
            .await?;
            let source = [Arg::Text(source_thread)];
            let rows = D::fetch_all(
                &mut tx,
                self.settings.pooling,
                q.thread_rows.clone(),
                source,
            )
            .await
            .map_err(storage(op))?;
            if rows.is_empty() {
                return Err(Error::ThreadNotFound {
                    thread_id: source_thread.to_owned(),
                });
            }
            let write_rows = D::fetch_all(
                &mut tx,
                self.settings.pooling,
                q.thread_writes.clone(),
                source,
            )
            .await
            .map_err(storage(op))?;
            let mut writes: HashMap<(String, String), Vec<PendingWrite>> = HashMap::new();
            for row in &write_rows {
                let ns: String = Self::get(row, "checkpoint_ns", op)?;
                let cid: String = Self::get(row, "checkpoint_id", op)?;
                let w = self.decode_write_row(row, source_thread, &ns, &cid, op)?;
                writes.entry((ns, cid)).or_default().push(w);
            }
            // Commit orders are renumbered 1, 2, … in each namespace (the
            // rows come in namespace and commit order): a first write to the
            // target takes 1 too, so one racing this copy conflicts with it
            // on the unique key instead of mixing into it.
            let mut next: Option<(String, u64)> = None;
            for row in &rows {
                let ns: String = Self::get(row, "checkpoint_ns", op)?;
                let order = match &next {
                    Some((prev, n)) if *prev == ns => n + 1,
                    _ => 1,
                };
                next = Some((ns.clone(), order));
                let t = self.decode_record(row, source_thread, &ns, op)?;
                let cid = t.config.checkpoint_id.clone().unwrap_or_default();
                let new = NewCheckpoint {
                    thread_id: target_thread.to_owned(),
                    checkpoint_ns: ns.clone(),
                    parent_id: t.parent_config.and_then(|p| p.checkpoint_id),
                    checkpoint: t.checkpoint,
                    metadata: t.metadata,
                    commit_order: Some(order),
                };
                let w = writes.remove(&(ns, cid)).unwrap_or_default();
                let e = self.settings.encode_entry(new, w)?;
                self.insert_raw(&mut tx, &e, op).await?;
            }
            tx.commit().await.map_err(storage(op))
        })
        .await
    }

    /// A write row (task id, index, channel, task path, value) of
    /// checkpoint `(thread, ns, cid)`.
    fn decode_write_row(
        &self,
        row: &D::Row,
        thread: &str,
        ns: &str,
        cid: &str,
        op: &'static str,
    ) -> Result<PendingWrite> {
        let value: &[u8] = Self::get(row, "value", op)?;
        self.settings.decode_write(
            thread,
            ns,
            cid,
            Self::get(row, "task_id", op)?,
            Self::get(row, "idx", op)?,
            Self::get(row, "channel", op)?,
            Self::get(row, "task_path", op)?,
            value,
        )
    }
}

/// Claims `target_thread` for a copy, in `tx`: fails with
/// [`Error::ThreadExists`] when the query `taken` finds a row for `args`,
/// and deletes the target's write rows that belong to no checkpoint (the
/// query `orphans`; a deletion done by hand leaves them): copied writes keep
/// a value stored first, so those rows would be read as the copy's.
async fn claim_target<D: Backend, const N: usize>(
    tx: &mut sqlx::Transaction<'static, D>,
    pooling: Pooling,
    taken: &str,
    orphans: &str,
    args: [Arg<'_>; N],
    target_thread: &str,
    op: &'static str,
) -> Result<()> {
    let found = D::fetch_optional(tx, pooling, taken.to_owned(), args)
        .await
        .map_err(storage(op))?;
    if found.is_some() {
        return Err(Error::ThreadExists {
            thread_id: target_thread.to_owned(),
        });
    }
    D::execute(tx, pooling, orphans.to_owned(), args)
        .await
        .map_err(storage(op))?;
    Ok(())
}
