//! The SQL saver's writes: one checkpoint by one statement, a group by one
//! query ([`group`](super::group)), and the statement-by-statement path
//! that reports the precise error.

use super::backend::Backend;
use super::group::{Arg, GroupItem, GroupPlan};
use super::hot::Lease;
use super::saver::SqlSaver;
use super::{EncodedEntry, EncodedWrite, conflict, not_found, order_i64, retried, write_batches};
use crate::checkpoint::{CheckpointRef, WriteCheck};
use crate::error::{Error, Result};
use crate::sql::error::{is_lock_timeout, is_unique_violation, refused, storage};

/// Marks `lease` reusable when `r` succeeded or failed with an outcome the
/// database reported on a sound connection (a version conflict, a missing
/// checkpoint); after a storage error the connection may be broken, and is
/// closed.
pub(super) fn settle<DB: sqlx::Database, T>(lease: &mut Lease<'_, DB>, r: &Result<T>) {
    if !matches!(r, Err(Error::Storage { .. })) {
        lease.done();
    }
}

impl<D: Backend> SqlSaver<D> {
    /// The commit order of checkpoint `id` of `thread`/`ns` read by `sql`
    /// (`Queries::order_of`, or `Queries::lock_checked`, which also locks it
    /// on PostgreSQL); `None` when it is not stored.
    pub(super) async fn commit_order_of(
        &self,
        conn: &mut D::Connection,
        sql: String,
        (thread, ns, id): (&str, &str, &str),
        op: &'static str,
    ) -> Result<Option<i64>> {
        let args = [Arg::Text(thread), Arg::Text(ns), Arg::Text(id)];
        let row = D::fetch_optional(conn, self.settings.pooling, sql, args)
            .await
            .map_err(storage(op))?;
        row.map(|r| Self::get(&r, 0, op)).transpose()
    }

    /// The head commit order of `(thread, ns)`.
    async fn head_in(
        &self,
        conn: &mut D::Connection,
        thread: &str,
        ns: &str,
        op: &'static str,
    ) -> Result<i64> {
        let sql = self.settings.q.head.clone();
        let row = D::fetch_optional(
            conn,
            self.settings.pooling,
            sql,
            [Arg::Text(thread), Arg::Text(ns)],
        )
        .await
        .map_err(storage(op))?;
        match row {
            Some(row) => Self::get(&row, 0, op),
            None => Ok(0),
        }
    }

    /// Inserts writes of checkpoint `(thread, ns, id)` with multi-row
    /// statements that insert nothing unless the checkpoint exists; returns
    /// the rows inserted or replaced.
    pub(super) async fn insert_writes(
        &self,
        conn: &mut D::Connection,
        (thread, ns, id): (&str, &str, &str),
        writes: &[EncodedWrite],
        op: &'static str,
    ) -> Result<u64> {
        let q = &self.settings.q;
        let mut affected = 0;
        for (replace, rows) in write_batches(writes) {
            let head = [Arg::Text(thread), Arg::Text(ns), Arg::Text(id)];
            let args = head.into_iter().chain(rows.iter().flat_map(|w| {
                [
                    Arg::Text(&w.write.task_id),
                    Arg::Int(w.write.idx),
                    Arg::Text(&w.write.channel),
                    Arg::Text(&w.write.task_path),
                    Arg::Bytes(&w.value),
                ]
            }));
            let sql = q.insert_writes_multi(rows.len(), replace);
            affected += D::execute(conn, self.settings.pooling, sql, args)
                .await
                .map_err(storage(op))?;
        }
        Ok(affected)
    }

    /// Inserts encoded writes of checkpoint `target` on `conn`; fails with
    /// "not found", inserting nothing that matters, when the checkpoint does
    /// not exist.
    pub(super) async fn insert_writes_checked(
        &self,
        conn: &mut D::Connection,
        target: &CheckpointRef,
        (id, encoded): &(String, Vec<EncodedWrite>),
        op: &'static str,
    ) -> Result<()> {
        let (thread, ns) = (&target.thread_id, &target.checkpoint_ns);
        let expected = encoded.len() as u64;
        let affected = self
            .insert_writes(conn, (thread, ns, id), encoded, op)
            .await?;
        if affected < expected || expected == 0 {
            // Nothing inserted for some rows: either they were already
            // stored (idempotent) or the checkpoint is missing.
            let sql = self.settings.q.exists.clone();
            let found = self
                .commit_order_of(conn, sql, (thread, ns, id), op)
                .await?;
            if found.is_none() {
                return Err(not_found(target, id));
            }
        }
        Ok(())
    }

    /// Applies a [`WriteCheck`] on `conn`, a write transaction: on
    /// PostgreSQL the checkpoint stays locked against other checks until it
    /// ends.
    pub(super) async fn check_write(
        &self,
        conn: &mut D::Connection,
        check: &WriteCheck,
        op: &'static str,
    ) -> Result<()> {
        let q = &self.settings.q;
        let id = check.checkpoint_id()?;
        let (thread, ns) = (&check.target.thread_id, &check.target.checkpoint_ns);
        let order = self
            .commit_order_of(conn, q.lock_checked.clone(), (thread, ns, id), op)
            .await?;
        let Some(order) = order else {
            return Err(not_found(&check.target, id));
        };
        let args = [
            Arg::Text(thread),
            Arg::Text(ns),
            Arg::Text(id),
            Arg::Text(&check.task_id),
            Arg::Int(check.idx),
        ];
        let row = D::fetch_optional(conn, self.settings.pooling, q.one_write.clone(), args)
            .await
            .map_err(storage(op))?;
        let stored = match &row {
            Some(row) => Some(self.settings.decode_write(
                thread,
                ns,
                id,
                check.task_id.clone(),
                check.idx,
                Self::get(row, "channel", op)?,
                Self::get(row, "task_path", op)?,
                Self::get(row, "value", op)?,
            )?),
            None => None,
        };
        if check.holds(stored.as_ref().map(|w| &w.value)) {
            Ok(())
        } else {
            Err(check.conflict(u64::try_from(order).unwrap_or(0)))
        }
    }

    /// Inserts one encoded checkpoint (and its writes) on `conn` (a
    /// transaction unless it is a single statement), enforcing the conflict
    /// and parent rules; returns its commit order.
    pub(super) async fn insert_entry(
        &self,
        conn: &mut D::Connection,
        e: &EncodedEntry,
        op: &'static str,
    ) -> Result<u64> {
        let q = &self.settings.q;
        let new = &e.new;
        let (thread, ns, id) = (&new.thread_id, &new.checkpoint_ns, &new.checkpoint.id);
        let order = match new.commit_order {
            Some(0) => return Err(conflict(new, 0)),
            Some(n) => {
                if self.settings.history.supersedes() {
                    // Shallow commits delete the rows whose commit orders
                    // they supersede, so the unique constraint alone cannot
                    // refuse a stale writer (its number may be free again):
                    // writers of one thread take turns, each reading the
                    // head once it holds the lock.
                    D::lock_thread(conn, self.settings.pooling, thread, ns, op).await?;
                    let head = self.head_in(conn, thread, ns, op).await?;
                    if order_i64(n)? <= head {
                        return Err(conflict(new, n));
                    }
                }
                n
            }
            None => {
                D::lock_thread(conn, self.settings.pooling, thread, ns, op).await?;
                let head = self.head_in(conn, thread, ns, op).await?;
                u64::try_from(head).unwrap_or(0) + 1
            }
        };
        let order_db = order_i64(order)?;
        // A taken commit order or checkpoint id is a unique violation; a
        // missing parent inserts no row.
        let sql = if new.parent_id.is_some() {
            &q.insert_cp_child
        } else {
            &q.insert_cp
        };
        match D::execute(
            conn,
            self.settings.pooling,
            sql.clone(),
            row_args(e, order_db),
        )
        .await
        {
            Ok(n) if n > 0 => {}
            Ok(_) => {
                // No row: the parent is missing, or commits at or after this
                // order. A taken number still reports as a conflict first.
                let args = [
                    Arg::Text(thread),
                    Arg::Text(ns),
                    Arg::Int(order_db),
                    Arg::Text(id),
                ];
                let taken = D::fetch_optional(conn, self.settings.pooling, q.taken.clone(), args)
                    .await
                    .map_err(storage(op))?;
                if taken.is_some() {
                    return Err(conflict(new, order));
                }
                let parent = new.parent_id.as_deref().unwrap_or_default();
                let parent_order = self
                    .commit_order_of(conn, q.order_of.clone(), (thread, ns, parent), op)
                    .await?;
                return Err(match parent_order {
                    Some(p) => new.after_parent_error(order, u64::try_from(p).unwrap_or(0)),
                    None => not_found(&new.config(), parent),
                });
            }
            Err(err) if is_unique_violation(&err) => return Err(conflict(new, order)),
            Err(err) => return Err(Error::storage(op, err)),
        }
        if !e.writes.is_empty() {
            self.insert_writes(conn, (thread, ns, id), &e.writes, op)
                .await?;
        }
        if self.settings.history.supersedes() {
            // As in a prune: a write being stored on a superseded checkpoint
            // has committed (and is deleted with it) or waits and finds it
            // gone, never left pointing at no checkpoint.
            if let Some(lock) = &q.lock_pruned {
                self.exec_below(conn, lock, (thread, ns, order_db), op)
                    .await?;
            }
            self.delete_below(conn, (thread, ns, order_db), op).await?;
        }
        Ok(order)
    }

    /// Runs a group's [one-shot](GroupPlan::one_shot) query: `Ok(false)`
    /// when the database refused it (nothing written; the caller takes the
    /// statement-by-statement path), except that a lock wait that timed out
    /// is returned as the error at once, as is any failure that may have
    /// come after the commit.
    async fn run_one_shot(
        &self,
        sql: String,
        args: Vec<Arg<'_>>,
        op: &'static str,
    ) -> Result<bool> {
        // A lease not marked done is closed when dropped, so a query cut off
        // mid-transaction never serves again.
        let mut lease = self.hot.lease(&self.pool).await.map_err(storage(op))?;
        let failed = match self
            .settings
            .spin(D::execute(&mut lease, self.settings.pooling, sql, args))
            .await
        {
            Ok(_) => {
                lease.done();
                return Ok(true);
            }
            Err(e) => e,
        };
        // SQLite stops at the failing statement with its transaction open. A
        // connection that cannot roll back is closed, never used again.
        if D::execute(&mut lease, self.settings.pooling, "ROLLBACK".to_owned(), [])
            .await
            .is_ok()
        {
            lease.done();
        }
        // The statement-by-statement path would wait for the same lock a
        // second time; and after a failure that may have come after the
        // commit (the connection lost), it would find the group stored and
        // report a conflict with itself.
        if is_lock_timeout(&failed) || !refused(&failed) {
            return Err(Error::storage(op, failed));
        }
        Ok(false)
    }

    /// Stores `items` atomically in one query. `Ok(false)`: the group needs
    /// the statement-by-statement path (shallow saver, no plan, too large
    /// for one query, a unique violation or a row not inserted); nothing was
    /// written. A lock wait that timed out is an error here.
    pub(super) async fn try_group(
        &self,
        items: &[GroupItem<'_>],
        op: &'static str,
    ) -> Result<bool> {
        if self.settings.history.supersedes() || !super::group::ENABLED {
            return Ok(false);
        }
        let Some(plan) = GroupPlan::new(items) else {
            return Ok(false);
        };
        if plan.expected_rows == 0 {
            return Ok(true);
        }
        match plan.one_shot(&self.settings.q) {
            Some((sql, args)) => self.run_one_shot(sql, args, op).await,
            None => Ok(false),
        }
    }

    /// Stores encoded entries atomically: one checkpoint without writes at a
    /// given commit order is one statement (atomic on its own, no
    /// transaction round trips); anything else runs in one transaction.
    pub(super) async fn write_entries(
        &self,
        entries: Vec<EncodedEntry>,
        op: &'static str,
    ) -> Result<Vec<CheckpointRef>> {
        self.ensure_migrated().await?;
        retried(|| self.write_entries_once(&entries, op)).await
    }

    /// One attempt of [`write_entries`](Self::write_entries).
    async fn write_entries_once(
        &self,
        entries: &[EncodedEntry],
        op: &'static str,
    ) -> Result<Vec<CheckpointRef>> {
        if let [e] = entries
            && e.writes.is_empty()
            && e.new.commit_order.is_some()
            && !self.settings.history.supersedes()
        {
            let mut lease = self.hot.lease(&self.pool).await.map_err(storage(op))?;
            let r = self.insert_entry(&mut lease, e, op).await;
            settle(&mut lease, &r);
            r?;
            return Ok(vec![e.new.config()]);
        }
        let items: Vec<GroupItem<'_>> = entries.iter().map(GroupItem::Entry).collect();
        if self.try_group(&items, op).await? {
            return Ok(entries.iter().map(|e| e.new.config()).collect());
        }
        let mut tx = self.begin_write(op).await?;
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            self.insert_entry(&mut tx, e, op).await?;
            out.push(e.new.config());
        }
        tx.commit().await.map_err(storage(op))?;
        Ok(out)
    }

    /// Inserts a copied checkpoint with its given commit order and writes,
    /// without the conflict rules (the target was checked empty; a row taken
    /// meanwhile is [`Error::ThreadExists`]).
    pub(super) async fn insert_raw(
        &self,
        conn: &mut D::Connection,
        e: &EncodedEntry,
        op: &'static str,
    ) -> Result<()> {
        let new = &e.new;
        let order = order_i64(new.commit_order.unwrap_or(1))?;
        let (thread, ns, id) = (&new.thread_id, &new.checkpoint_ns, &new.checkpoint.id);
        D::execute(
            conn,
            self.settings.pooling,
            self.settings.q.insert_cp.clone(),
            row_args(e, order),
        )
        .await
        .map_err(|err| {
            // The target was found empty: a taken id or commit order is
            // another writer's, committed since.
            if is_unique_violation(&err) {
                Error::ThreadExists {
                    thread_id: new.thread_id.clone(),
                }
            } else {
                Error::storage(op, err)
            }
        })?;
        self.insert_writes(conn, (thread, ns, id), &e.writes, op)
            .await
            .map(drop)
    }
}

/// The binds of `e`'s checkpoint row, in the order of the checkpoint
/// inserts' placeholders, with `order` as its commit order.
fn row_args(e: &EncodedEntry, order: i64) -> [Arg<'_>; 7] {
    let new = &e.new;
    [
        Arg::Text(&new.thread_id),
        Arg::Text(&new.checkpoint_ns),
        Arg::Text(&new.checkpoint.id),
        Arg::OptText(new.parent_id.as_deref()),
        Arg::Bytes(&e.payload),
        Arg::Text(&e.metadata),
        Arg::Int(order),
    ]
}
