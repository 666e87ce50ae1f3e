//! The SQL saver's deletions: pruning a thread to its newest checkpoints
//! (rebuilding a kept record whose parent goes) and deleting threads.

use super::backend::Backend;
use super::group::Arg;
use super::saver::SqlSaver;
use crate::checkpoint::CheckpointCodec;
use crate::checkpoint::Keep;
use crate::codec::{RecordContext, check_size};
use crate::error::Result;
use crate::sql::error::storage;

impl<D: Backend> SqlSaver<D> {
    /// Prunes `thread` to the `keep` newest checkpoints of each namespace,
    /// inside the transaction on `conn`: every kept record is decoded first
    /// (one that does not decode fails the call with its
    /// [`Error::Decode`](crate::Error::Decode), so the transaction deletes
    /// nothing: a prune never leaves a corrupt head without the good
    /// versions before it), and a kept record whose parent goes is stored
    /// with its delta channels in full. Returns how many checkpoints were
    /// deleted.
    pub(super) async fn keep_last(
        &self,
        conn: &mut D::Connection,
        thread: &str,
        keep: Keep,
        op: &'static str,
    ) -> Result<u64> {
        let q = &self.settings.q;
        let rows = D::fetch_all(
            conn,
            self.settings.pooling,
            q.namespaces_of_thread.clone(),
            [Arg::Text(thread)],
        )
        .await
        .map_err(storage(op))?;
        let namespaces = rows
            .iter()
            .map(|r| Self::get::<String>(r, 0, op))
            .collect::<Result<Vec<_>>>()?;
        let newest = i64::try_from(keep.newest).unwrap_or(i64::MAX);
        let mut deleted = 0;
        for ns in &namespaces {
            // Every record of the namespace is locked before what to keep
            // is picked (PostgreSQL; SQLite's writers take turns): a
            // transaction removing the newest ones (a lease rollback) or
            // rewriting one (`Rewrites::replace`) has committed, and the
            // picks below read what it left; a child stored concurrently on
            // a record about to go has committed too (and is read below),
            // or waits and finds its parent gone.
            if let Some(lock) = &q.lock_pruned {
                self.exec_below(conn, lock, (thread, ns, i64::MAX), op)
                    .await?;
            }
            let skip = match keep.younger_than {
                None => newest,
                Some(age) => {
                    let ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
                    let args = [Arg::Text(thread), Arg::Text(ns), Arg::Int(ms)];
                    let row =
                        D::fetch_optional(conn, self.settings.pooling, q.young_in_ns.clone(), args)
                            .await
                            .map_err(storage(op))?;
                    let young = row.map(|r| Self::get::<i64>(&r, 0, op)).transpose()?;
                    newest.max(young.unwrap_or(0))
                }
            };
            let args = [Arg::Text(thread), Arg::Text(ns), Arg::Int(skip)];
            let newest_pruned =
                D::fetch_optional(conn, self.settings.pooling, q.nth_newest.clone(), args)
                    .await
                    .map_err(storage(op))?;
            let Some(row) = newest_pruned else {
                continue;
            };
            let cut = Self::get::<i64>(&row, 0, op)? + 1;
            let args = [Arg::Text(thread), Arg::Text(ns), Arg::Int(cut)];
            let rows = D::fetch_all(conn, self.settings.pooling, q.kept_from.clone(), args)
                .await
                .map_err(storage(op))?;
            let kept = rows
                .iter()
                .map(|row| self.decode_record(row, thread, ns, op))
                .collect::<Result<Vec<_>>>()?;
            let kept_ids: std::collections::HashSet<&str> =
                kept.iter().map(|t| t.checkpoint.id.as_str()).collect();
            for kept in &kept {
                let parent_kept = kept
                    .parent_config
                    .as_ref()
                    .and_then(|p| p.checkpoint_id.as_deref())
                    .is_some_and(|p| kept_ids.contains(p));
                if parent_kept || kept.checkpoint.deltas.is_empty() {
                    continue;
                }
                let full = self.materialized(conn, kept, op).await?;
                let parent = kept
                    .parent_config
                    .as_ref()
                    .and_then(|p| p.checkpoint_id.as_deref());
                let ctx = RecordContext::checkpoint(thread, ns, &full.id).parent(parent);
                if self.settings.codec.binds_metadata() {
                    // The record is sealed with its metadata: both are
                    // rewritten, the metadata split as the codec says now.
                    let (payload, metadata) =
                        self.settings.encode_record(&full, &kept.metadata, ctx)?;
                    let args = [
                        Arg::Text(thread),
                        Arg::Text(ns),
                        Arg::Text(&full.id),
                        Arg::Bytes(&payload),
                        Arg::Text(&metadata),
                    ];
                    D::execute(conn, self.settings.pooling, q.set_record.clone(), args)
                        .await
                        .map_err(storage(op))?;
                    continue;
                }
                let payload = self.settings.codec.encode_checkpoint(&full, &ctx)?;
                check_size(
                    "checkpoint record bytes",
                    &payload,
                    self.settings.max_record_bytes,
                )?;
                let args = [
                    Arg::Text(thread),
                    Arg::Text(ns),
                    Arg::Text(&full.id),
                    Arg::Bytes(&payload),
                ];
                D::execute(conn, self.settings.pooling, q.set_payload.clone(), args)
                    .await
                    .map_err(storage(op))?;
            }
            deleted += self.delete_below(conn, (thread, ns, cut), op).await?;
        }
        Ok(deleted)
    }

    /// Runs `sql` with the parameters thread, namespace and commit order;
    /// returns the rows it changed.
    pub(super) async fn exec_below(
        &self,
        conn: &mut D::Connection,
        sql: &str,
        (thread, ns, order): (&str, &str, i64),
        op: &'static str,
    ) -> Result<u64> {
        let args = [Arg::Text(thread), Arg::Text(ns), Arg::Int(order)];
        D::execute(conn, self.settings.pooling, sql.to_owned(), args)
            .await
            .map_err(storage(op))
    }

    /// Deletes the checkpoints of `(thread, ns)` committed before `order`,
    /// with their pending writes; returns how many checkpoints went.
    pub(super) async fn delete_below(
        &self,
        conn: &mut D::Connection,
        below: (&str, &str, i64),
        op: &'static str,
    ) -> Result<u64> {
        let q = &self.settings.q;
        self.exec_below(conn, &q.delete_writes_below, below, op)
            .await?;
        self.exec_below(conn, &q.delete_cps_below, below, op).await
    }

    /// Deletes every checkpoint and write of `thread` inside the transaction
    /// on `conn`, its rows locked first (PostgreSQL), so that a child being
    /// stored on one of them commits first (and is deleted too) or waits and
    /// finds its parent gone (SQLite writers take turns already); returns
    /// how many checkpoints went.
    ///
    /// The thread's lease row goes first (the order in which a lease call
    /// locks them), with the copies of its holders' base writes: a thread
    /// deleted and written again starts with no holder, not with the old
    /// one's turn to finish or roll back. A thread no lease row names gets
    /// one for the length of the transaction: an acquire racing the delete
    /// waits on it (PostgreSQL), instead of taking the head being deleted
    /// as its base.
    pub(super) async fn delete_thread_in(
        &self,
        conn: &mut D::Connection,
        thread: &str,
        op: &'static str,
    ) -> Result<u64> {
        let q = &self.settings.q;
        D::execute(
            conn,
            self.settings.pooling,
            format!(
                "INSERT INTO {}weaver_thread_leases (thread_id, holder, expires_at, base_order) \
                 VALUES ($1, '', 0, 0) ON CONFLICT (thread_id) DO NOTHING",
                q.prefix
            ),
            [Arg::Text(thread)],
        )
        .await
        .map_err(storage(op))?;
        for table in [
            "weaver_thread_leases",
            "weaver_lease_base_writes",
            "weaver_lease_bases",
        ] {
            D::execute(
                conn,
                self.settings.pooling,
                format!("DELETE FROM {}{table} WHERE thread_id = $1", q.prefix),
                [Arg::Text(thread)],
            )
            .await
            .map_err(storage(op))?;
        }
        if let Some(lock) = &q.lock_thread_rows {
            D::execute(
                conn,
                self.settings.pooling,
                lock.clone(),
                [Arg::Text(thread)],
            )
            .await
            .map_err(storage(op))?;
        }
        D::execute(
            conn,
            self.settings.pooling,
            q.delete_writes.clone(),
            [Arg::Text(thread)],
        )
        .await
        .map_err(storage(op))?;
        D::execute(
            conn,
            self.settings.pooling,
            q.delete_cps.clone(),
            [Arg::Text(thread)],
        )
        .await
        .map_err(storage(op))
    }
}
