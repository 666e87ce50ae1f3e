//! The [`Saver`](crate::checkpoint::Saver) implementation shared by the SQL
//! savers, written once as a macro over the `sqlx` database type: only DDL,
//! locking and a few casts differ, and those live in `Queries` and in each
//! backend's `begin_write` / `begin_write_snapshot` / `begin_snapshot` /
//! `lock_thread` / `ensure_migrated`.

/// Implements `Saver` for `$saver`, which has fields `pool: sqlx::Pool<$db>`,
/// `hot: Arc<HotSlot<$db>>` and `settings: Settings`, and inherent async methods
/// `ensure_migrated(&self)` (checks the schema once), `check_schema(&self)`
/// (checks it now), `begin_write(&self, op)`, `begin_write_snapshot(&self,
/// op)`, `begin_snapshot(&self, op)` and `lock_thread(&self, tx, thread_id,
/// ns, op)`.
macro_rules! impl_sql_saver {
    ($saver:ty, $db:ty) => {
        const _: () = {
            use ::async_trait::async_trait;
            use ::sqlx::{AssertSqlSafe, Row};

            use $crate::checkpoint::{delta, limits};
            use $crate::checkpoint::sql::group::{Arg, GroupItem, GroupPlan};
            use $crate::checkpoint::sql::hot::Lease;
            use $crate::checkpoint::sql::packed;
            use $crate::checkpoint::sql::{
                EncodedEntry, KeyOrder, LINEAGES_PER_QUERY, Param, RawCheckpoint, TupleAssembler, conflict, follow_line,
                list_where, merge_ranges, not_found, order_i64, retried, shallow_error, write_batches,
            };
            use $crate::checkpoint::{
                BatchEntry, CheckpointRef, CheckpointTuple, ForkOptions, LineageRequest,
                ListFilter, NewCheckpoint, PendingWrite, PruneStrategy, Saver, ThreadInfo,
            };
            use $crate::checkpoint::CheckpointCodec;
            use $crate::codec::RecordContext;
            use $crate::error::{Error, Result};
            use $crate::sql::error::{
                connection_lost, is_lock_timeout, is_schema_missing, is_too_big, is_unique_violation, storage,
            };

            type Tx = ::sqlx::Transaction<'static, $db>;
            type Conn = <$db as ::sqlx::Database>::Connection;

            fn get<'r, T>(row: &'r <$db as ::sqlx::Database>::Row, col: &str, op: &'static str) -> Result<T>
            where
                T: ::sqlx::Decode<'r, $db> + ::sqlx::Type<$db>,
            {
                row.try_get::<T, _>(col).map_err(storage(op))
            }

            /// The commit order of checkpoint `id` of `thread`/`ns` read by
            /// `sql` (`Queries::order_of`, or `Queries::lock_checked`, which
            /// also locks it on PostgreSQL); `None` when it is not stored.
            async fn commit_order_of<'e, E>(
                executor: E,
                sql: String,
                (thread, ns, id): (&str, &str, &str),
                op: &'static str,
            ) -> Result<Option<i64>>
            where
                E: ::sqlx::Executor<'e, Database = $db>,
            {
                ::sqlx::query_scalar(AssertSqlSafe(sql))
                    .bind(thread)
                    .bind(ns)
                    .bind(id)
                    .fetch_optional(executor)
                    .await
                    .map_err(storage(op))
            }

            /// What `fetch_packed_or_rows` read: the packed row, or the
            /// listing row by row.
            enum Fetched<R> {
                Packed(Vec<R>),
                Rows(Vec<R>),
            }

            /// A query of `sql` with `args` bound in order.
            fn with_args<'q>(
                sql: String,
                args: Vec<Arg<'q>>,
            ) -> ::sqlx::query::Query<'q, $db, <$db as ::sqlx::Database>::Arguments> {
                let mut query = ::sqlx::query(AssertSqlSafe(sql));
                for a in args {
                    query = match a {
                        Arg::Text(s) => query.bind(s),
                        Arg::OptText(s) => query.bind(s),
                        Arg::Int(i) => query.bind(i),
                        Arg::Bytes(b) => query.bind(b),
                    };
                }
                query
            }

            /// Marks `lease` reusable when `r` succeeded or failed with an
            /// outcome the database reported on a sound connection (a
            /// version conflict, a missing checkpoint); after a storage
            /// error the connection may be broken, and is closed.
            fn settle<T>(lease: &mut Lease<'_, $db>, r: &Result<T>) {
                if !matches!(r, Err(Error::Storage { .. })) {
                    lease.done();
                }
            }

            /// Notes a deletion of its threads ([`delta::note_deletion`])
            /// when dropped, however the deleting call ended.
            struct DeletionNote<'t>(&'t [String]);

            impl Drop for DeletionNote<'_> {
                fn drop(&mut self) {
                    self.0.iter().for_each(|t| delta::note_deletion(t));
                }
            }

            impl $saver {
                /// The outcome of `call` (one `Saver` operation), except that
                /// a failure because a table or column is missing becomes the
                /// [`Error::MigrationRequired`] a fresh check of the schema
                /// gives: the saver checks the schema once, on its first
                /// call, and the schema may be migrated down or dropped while
                /// the saver is in use.
                async fn rechecked<T: Send>(
                    &self,
                    call: impl ::std::future::Future<Output = Result<T>> + Send,
                ) -> Result<T> {
                    let r = call.await;
                    match &r {
                        Err(Error::Storage { source, .. }) if is_schema_missing(source.as_ref()) => {
                            match self.check_schema().await {
                                Err(e @ Error::MigrationRequired { .. }) => Err(e),
                                _ => r,
                            }
                        }
                        _ => r,
                    }
                }

                /// Runs a query built from text and parameters and returns its rows.
                async fn fetch_dynamic(
                    &self,
                    sql: String,
                    params: Vec<Param>,
                    op: &'static str,
                ) -> Result<Vec<<$db as ::sqlx::Database>::Row>> {
                    self.fetch_dynamic_raw(sql, params).await.map_err(storage(op))
                }

                /// [`fetch_dynamic`](Self::fetch_dynamic), with the database's error.
                ///
                /// A read that loses the saver's own connection (the server
                /// restarted, failed over or ended the session while the
                /// connection sat idle for less than the ping interval) is
                /// read again once, on a connection from the pool: a read is
                /// safe to repeat, and the pool's connection then becomes the
                /// saver's own.
                async fn fetch_dynamic_raw(
                    &self,
                    sql: String,
                    params: Vec<Param>,
                ) -> ::std::result::Result<Vec<<$db as ::sqlx::Database>::Row>, ::sqlx::Error> {
                    let bound = |sql: String| {
                        let mut query = ::sqlx::query(AssertSqlSafe(sql));
                        for p in &params {
                            query = match p {
                                Param::Text(s) => query.bind(s.as_str()),
                                Param::Int(i) => query.bind(*i),
                            };
                        }
                        query
                    };
                    let mut lease = self.hot.lease(&self.pool).await?;
                    let own = lease.is_own();
                    // A failed read may have lost its connection (a server
                    // shutting it down reports that as a database error too):
                    // only a successful one leaves it for the next call.
                    let again = own.then(|| sql.clone());
                    let rows = match self.settings.spin(bound(sql).fetch_all(&mut *lease)).await {
                        Ok(rows) => rows,
                        Err(e) => match again.filter(|_| connection_lost(&e)) {
                            Some(sql) => {
                                drop(lease);
                                lease = self.hot.lease(&self.pool).await?;
                                self.settings.spin(bound(sql).fetch_all(&mut *lease)).await?
                            }
                            None => return Err(e),
                        },
                    };
                    lease.done();
                    Ok(rows)
                }

                /// The checkpoints of `where_` (see [`Queries::tuples`](crate::checkpoint::sql::Queries::tuples)) with
                /// their pending writes: packed into one row where the
                /// database can ([`Queries::packed_tuples`](crate::checkpoint::sql::Queries::packed_tuples)), row by row when
                /// it cannot, or when the packed listing would be longer
                /// than the database's longest string.
                async fn fetch_tuples(
                    &self,
                    where_: &str,
                    params: Vec<Param>,
                    limit: i64,
                    order: KeyOrder,
                    op: &'static str,
                ) -> Result<Vec<CheckpointTuple>> {
                    let q = &self.settings.q;
                    let packed = q.packed_tuples(where_, limit, order);
                    let rows = || q.tuples(where_, limit, order);
                    match self.fetch_packed_or_rows(packed, rows, params, op).await? {
                        Fetched::Packed(rows) => {
                            let mut out = TupleAssembler::default();
                            for row in rows {
                                let packed: Option<&[u8]> = get(&row, "packed", op)?;
                                if let Some(packed) = packed {
                                    self.settings.unpack(packed, &mut out)?;
                                }
                            }
                            Ok(out.finish())
                        }
                        Fetched::Rows(rows) => self.assemble(rows, op),
                    }
                }

                /// Runs `packed` (a listing SQLite packs into one row) where
                /// the database can, else, or when the packed row would be
                /// longer than SQLite's longest string, `rows()` (the same
                /// listing row by row).
                async fn fetch_packed_or_rows(
                    &self,
                    packed: Option<String>,
                    rows: impl FnOnce() -> String,
                    params: Vec<Param>,
                    op: &'static str,
                ) -> Result<Fetched<<$db as ::sqlx::Database>::Row>> {
                    let can = self.settings.verified.get().is_some_and(|v| v.packed_listing);
                    if let Some(sql) = packed.filter(|_| can) {
                        match self.fetch_dynamic_raw(sql, params.clone()).await {
                            Ok(found) => return Ok(Fetched::Packed(found)),
                            Err(e) if !is_too_big(&e) => return Err(storage(op)(e)),
                            Err(_) => {}
                        }
                    }
                    self.fetch_dynamic(rows(), params, op).await.map(Fetched::Rows)
                }

                /// Checkpoint rows (kind 0) and write rows (kind 1) into tuples.
                fn assemble(
                    &self,
                    rows: Vec<<$db as ::sqlx::Database>::Row>,
                    op: &'static str,
                ) -> Result<Vec<CheckpointTuple>> {
                    let mut out = TupleAssembler::default();
                    for row in rows {
                        let kind: i64 = get::<i32>(&row, "kind", op).map(i64::from)
                            .or_else(|_| get::<i64>(&row, "kind", op))?;
                        let thread_id: String = get(&row, "thread_id", op)?;
                        let ns: String = get(&row, "checkpoint_ns", op)?;
                        let id: String = get(&row, "checkpoint_id", op)?;
                        let payload: &[u8] = get(&row, "payload", op)?;
                        if kind == 0 {
                            let parent: Option<String> = get(&row, "parent_checkpoint_id", op)?;
                            let metadata: &str = get(&row, "metadata", op)?;
                            let order: i64 = get(&row, "commit_order", op)?;
                            out.push_tuple(self.settings.decode_tuple(
                                thread_id, ns, id, parent, payload, metadata, order,
                            )?);
                        } else {
                            let task_id: String = get(&row, "task_id", op)?;
                            let idx: i64 = get(&row, "idx", op)?;
                            let channel: String = get(&row, "channel", op)?;
                            let task_path: String = get(&row, "task_path", op)?;
                            let w = self.settings.decode_write(
                                &thread_id, &ns, &id, task_id, idx, channel, task_path, payload,
                            )?;
                            out.push_write((thread_id, ns, id), w);
                        }
                    }
                    Ok(out.finish())
                }

                /// Lineage rows (`q.lineage`, nearest first) of `(thread, ns)` as records.
                fn decode_lineage(
                    &self,
                    rows: &[<$db as ::sqlx::Database>::Row],
                    thread: &str,
                    ns: &str,
                    op: &'static str,
                ) -> Result<Vec<CheckpointTuple>> {
                    rows.iter().map(|row| self.decode_record(row, thread, ns, op)).collect()
                }

                /// One checkpoint row (without its pending writes) of `(thread, ns)`.
                fn decode_record(
                    &self,
                    row: &<$db as ::sqlx::Database>::Row,
                    thread: &str,
                    ns: &str,
                    op: &'static str,
                ) -> Result<CheckpointTuple> {
                    let payload: &[u8] = get(row, "checkpoint", op)?;
                    let metadata: &str = get(row, "metadata", op)?;
                    self.settings.decode_tuple(
                        thread.to_owned(),
                        ns.to_owned(),
                        get(row, "checkpoint_id", op)?,
                        get(row, "parent_checkpoint_id", op)?,
                        payload,
                        metadata,
                        get(row, "commit_order", op)?,
                    )
                }

                /// The record of `t` (a stored checkpoint whose record has
                /// delta channels) with every delta channel rebuilt in full
                /// from its lineage, to be stored without its ancestors.
                async fn materialized(&self, conn: &mut Conn, t: &CheckpointTuple, op: &'static str) -> Result<$crate::checkpoint::Checkpoint> {
                    let (thread, ns) = (&t.config.thread_id, &t.config.checkpoint_ns);
                    let count = delta::lineage_len(&t.checkpoint);
                    let rows = ::sqlx::query(AssertSqlSafe(self.settings.q.lineage.clone()))
                        .bind(thread)
                        .bind(ns)
                        .bind(&t.checkpoint.id)
                        .bind(i64::try_from(count - 1).unwrap_or(i64::MAX))
                        .fetch_all(&mut *conn)
                        .await
                        .map_err(storage(op))?;
                    let chain = self.decode_lineage(&rows, thread, ns, op)?;
                    delta::materialize(chain, count)
                }

                /// Prunes `thread` to the `keep` newest checkpoints of each
                /// namespace, inside `tx`: a kept record whose parent goes is
                /// first stored with its delta channels in full. Returns how
                /// many checkpoints were deleted.
                async fn keep_last(&self, tx: &mut Tx, thread: &str, keep: usize, op: &'static str) -> Result<u64> {
                    let q = &self.settings.q;
                    let namespaces: Vec<String> = ::sqlx::query_scalar(AssertSqlSafe(q.namespaces_of_thread.clone()))
                        .bind(thread)
                        .fetch_all(&mut **tx)
                        .await
                        .map_err(storage(op))?;
                    let skip = i64::try_from(keep).unwrap_or(i64::MAX);
                    let mut deleted = 0;
                    for ns in &namespaces {
                        let newest_pruned: Option<i64> = ::sqlx::query_scalar(AssertSqlSafe(q.nth_newest.clone()))
                            .bind(thread)
                            .bind(ns)
                            .bind(skip)
                            .fetch_optional(&mut **tx)
                            .await
                            .map_err(storage(op))?;
                        let Some(cut) = newest_pruned.map(|o| o + 1) else {
                            continue;
                        };
                        // Before reading what to rebuild: a child stored
                        // concurrently on a record about to go has committed
                        // (and is read below), or waits and finds its parent
                        // gone (PostgreSQL; SQLite writers take turns).
                        if let Some(lock) = &q.lock_pruned {
                            Self::exec_below(&mut **tx, lock, thread, ns, cut, op).await?;
                        }
                        let orphans = ::sqlx::query(AssertSqlSafe(q.orphans_from.clone()))
                            .bind(thread)
                            .bind(ns)
                            .bind(cut)
                            .fetch_all(&mut **tx)
                            .await
                            .map_err(storage(op))?;
                        for row in &orphans {
                            let kept = self.decode_record(row, thread, ns, op)?;
                            if kept.checkpoint.deltas.is_empty() {
                                continue;
                            }
                            let full = self.materialized(&mut **tx, &kept, op).await?;
                            let parent = kept.parent_config.as_ref().and_then(|p| p.checkpoint_id.as_deref());
                            let ctx = RecordContext::checkpoint(thread, ns, &full.id).parent(parent);
                            let payload = self.settings.codec.encode_checkpoint(&full, &ctx)?;
                            $crate::codec::check_size("checkpoint record bytes", &payload, self.settings.max_record_bytes)?;
                            ::sqlx::query(AssertSqlSafe(q.set_payload.clone()))
                                .bind(thread)
                                .bind(ns)
                                .bind(&full.id)
                                .bind(payload)
                                .execute(&mut **tx)
                                .await
                                .map_err(storage(op))?;
                        }
                        deleted += self.delete_below(&mut **tx, thread, ns, cut, op).await?;
                    }
                    Ok(deleted)
                }

                /// Runs `sql` with the parameters thread, namespace and commit
                /// order; returns the rows it changed.
                async fn exec_below(
                    conn: &mut Conn,
                    sql: &str,
                    thread: &str,
                    ns: &str,
                    order: i64,
                    op: &'static str,
                ) -> Result<u64> {
                    ::sqlx::query(AssertSqlSafe(sql.to_owned()))
                        .bind(thread)
                        .bind(ns)
                        .bind(order)
                        .execute(&mut *conn)
                        .await
                        .map(|r| r.rows_affected())
                        .map_err(storage(op))
                }

                /// Deletes the checkpoints of `(thread, ns)` committed before
                /// `order`, with their pending writes; returns how many
                /// checkpoints went.
                async fn delete_below(&self, conn: &mut Conn, thread: &str, ns: &str, order: i64, op: &'static str) -> Result<u64> {
                    let q = &self.settings.q;
                    Self::exec_below(conn, &q.delete_writes_below, thread, ns, order, op).await?;
                    Self::exec_below(conn, &q.delete_cps_below, thread, ns, order, op).await
                }

                /// Deletes every checkpoint and write of `thread` inside `tx`,
                /// its rows locked first (see
                /// [`lock_thread_rows`](Self::lock_thread_rows)); returns how
                /// many checkpoints went.
                async fn delete_thread_in(&self, tx: &mut Tx, thread: &str, op: &'static str) -> Result<u64> {
                    let q = &self.settings.q;
                    self.lock_thread_rows(tx, thread, op).await?;
                    ::sqlx::query(AssertSqlSafe(q.delete_writes.clone()))
                        .bind(thread)
                        .execute(&mut **tx)
                        .await
                        .map_err(storage(op))?;
                    ::sqlx::query(AssertSqlSafe(q.delete_cps.clone()))
                        .bind(thread)
                        .execute(&mut **tx)
                        .await
                        .map(|r| r.rows_affected())
                        .map_err(storage(op))
                }

                /// Before deleting `thread` inside `tx`: locks its checkpoints
                /// (PostgreSQL), so that a child being stored on one of them
                /// commits first (and is deleted too) or waits and finds its
                /// parent gone. SQLite writers take turns already.
                async fn lock_thread_rows(&self, tx: &mut Tx, thread: &str, op: &'static str) -> Result<()> {
                    if let Some(lock) = &self.settings.q.lock_thread_rows {
                        ::sqlx::query(AssertSqlSafe(lock.clone()))
                            .bind(thread)
                            .execute(&mut **tx)
                            .await
                            .map_err(storage(op))?;
                    }
                    Ok(())
                }

                /// The head commit order of `(thread, ns)`.
                async fn head_in(conn: &mut Conn, q: &str, thread: &str, ns: &str, op: &'static str) -> Result<i64> {
                    ::sqlx::query_scalar::<_, i64>(AssertSqlSafe(q.to_owned()))
                        .bind(thread)
                        .bind(ns)
                        .fetch_one(&mut *conn)
                        .await
                        .map_err(storage(op))
                }

                /// Inserts writes of checkpoint `(thread, ns, id)` with
                /// multi-row statements that insert nothing unless the
                /// checkpoint exists; returns the rows inserted or replaced.
                async fn insert_writes(
                    &self,
                    conn: &mut Conn,
                    thread: &str,
                    ns: &str,
                    id: &str,
                    writes: &[$crate::checkpoint::sql::EncodedWrite],
                    op: &'static str,
                ) -> Result<u64> {
                    let q = &self.settings.q;
                    let mut affected = 0;
                    for (replace, rows) in write_batches(writes) {
                        let mut query = ::sqlx::query(AssertSqlSafe(q.insert_writes_multi(rows.len(), replace)))
                            .bind(thread)
                            .bind(ns)
                            .bind(id);
                        for w in rows {
                            query = query
                                .bind(&w.write.task_id)
                                .bind(w.write.idx)
                                .bind(&w.write.channel)
                                .bind(&w.write.task_path)
                                .bind(&w.value[..]);
                        }
                        affected += query
                            .execute(&mut *conn)
                            .await
                            .map_err(storage(op))?
                            .rows_affected();
                    }
                    Ok(affected)
                }

                /// Encodes writes of the checkpoint `target` names; returns its id with them.
                fn encode_target_writes(
                    &self,
                    target: &CheckpointRef,
                    writes: Vec<PendingWrite>,
                ) -> Result<(String, Vec<$crate::checkpoint::sql::EncodedWrite>)> {
                    let id = target
                        .checkpoint_id
                        .clone()
                        .ok_or_else(|| Error::invalid_argument("put_writes needs a checkpoint id"))?;
                    let ctx = RecordContext::checkpoint(&target.thread_id, &target.checkpoint_ns, &id);
                    let encoded = self.settings.encode_writes(&ctx, writes)?;
                    Ok((id, encoded))
                }

                /// Inserts encoded writes of checkpoint `target` on `conn`;
                /// fails with "not found", inserting nothing that matters,
                /// when the checkpoint does not exist.
                async fn insert_writes_checked(
                    &self,
                    conn: &mut Conn,
                    target: &CheckpointRef,
                    (id, encoded): &(String, Vec<$crate::checkpoint::sql::EncodedWrite>),
                    op: &'static str,
                ) -> Result<()> {
                    let (thread, ns) = (&target.thread_id, &target.checkpoint_ns);
                    let expected = encoded.len() as u64;
                    let affected = self.insert_writes(conn, thread, ns, id, encoded, op).await?;
                    if affected < expected || expected == 0 {
                        // Nothing inserted for some rows: either they were
                        // already stored (idempotent) or the checkpoint is missing.
                        let found: Option<i64> = ::sqlx::query_scalar(AssertSqlSafe(self.settings.q.exists.clone()))
                            .bind(thread)
                            .bind(ns)
                            .bind(id)
                            .fetch_optional(&mut *conn)
                            .await
                            .map_err(storage(op))?;
                        if found.is_none() {
                            return Err(not_found(target, id));
                        }
                    }
                    Ok(())
                }

                /// Applies a [`WriteCheck`]($crate::checkpoint::WriteCheck)
                /// on `conn`, a write transaction: on PostgreSQL the
                /// checkpoint stays locked against other checks until it ends.
                async fn check_write(
                    &self,
                    conn: &mut Conn,
                    check: &$crate::checkpoint::WriteCheck,
                    op: &'static str,
                ) -> Result<()> {
                    let q = &self.settings.q;
                    let id = check.checkpoint_id()?;
                    let (thread, ns) = (&check.target.thread_id, &check.target.checkpoint_ns);
                    let order = commit_order_of(&mut *conn, q.lock_checked.clone(), (thread, ns, id), op).await?;
                    let Some(order) = order else {
                        return Err(not_found(&check.target, id));
                    };
                    let row = ::sqlx::query(AssertSqlSafe(q.one_write.clone()))
                        .bind(thread)
                        .bind(ns)
                        .bind(id)
                        .bind(&check.task_id)
                        .bind(check.idx)
                        .fetch_optional(&mut *conn)
                        .await
                        .map_err(storage(op))?;
                    let stored = match &row {
                        Some(row) => Some(self.settings.decode_write(
                            thread,
                            ns,
                            id,
                            check.task_id.clone(),
                            check.idx,
                            get(row, "channel", op)?,
                            get(row, "task_path", op)?,
                            get(row, "value", op)?,
                        )?),
                        None => None,
                    };
                    if check.holds(stored.as_ref().map(|w| &w.value)) {
                        Ok(())
                    } else {
                        Err(check.conflict(u64::try_from(order).unwrap_or(0)))
                    }
                }

                /// Inserts one encoded checkpoint (and its writes) on `conn`
                /// (a transaction unless it is a single statement),
                /// enforcing the conflict and parent rules; returns its commit order.
                async fn insert_entry(
                    &self,
                    conn: &mut Conn,
                    e: &EncodedEntry,
                    op: &'static str,
                ) -> Result<u64> {
                    let q = &self.settings.q;
                    let new = &e.new;
                    let (thread, ns, id) = (&new.thread_id, &new.checkpoint_ns, &new.checkpoint.id);
                    let order = match new.commit_order {
                        Some(0) => return Err(conflict(new, 0)),
                        Some(n) => {
                            if self.settings.shallow {
                                // Shallow commits delete the rows whose
                                // commit orders they supersede, so the unique
                                // constraint alone cannot refuse a stale
                                // writer (its number may be free again):
                                // writers of one thread take turns, each
                                // reading the head once it holds the lock.
                                self.lock_thread(conn, thread, ns, op).await?;
                                let head = Self::head_in(conn, &q.head, thread, ns, op).await?;
                                if order_i64(n)? <= head {
                                    return Err(conflict(new, n));
                                }
                            }
                            n
                        }
                        None => {
                            self.lock_thread(conn, thread, ns, op).await?;
                            let head = Self::head_in(conn, &q.head, thread, ns, op).await?;
                            u64::try_from(head).unwrap_or(0) + 1
                        }
                    };
                    let order_db = order_i64(order)?;
                    // A taken commit order or checkpoint id is a unique
                    // violation; a missing parent inserts no row.
                    let sql = if new.parent_id.is_some() { &q.insert_cp_child } else { &q.insert_cp };
                    let inserted = ::sqlx::query(AssertSqlSafe(sql.clone()))
                        .bind(thread)
                        .bind(ns)
                        .bind(id)
                        .bind(new.parent_id.as_deref())
                        .bind(&e.payload[..])
                        .bind(&e.metadata)
                        .bind(order_db)
                        .execute(&mut *conn)
                        .await;
                    match inserted {
                        Ok(r) if r.rows_affected() > 0 => {}
                        Ok(_) => {
                            // No row: the parent is missing, or commits at or
                            // after this order. A taken number still reports
                            // as a conflict first.
                            let taken: Option<i64> = ::sqlx::query_scalar(AssertSqlSafe(q.taken.clone()))
                                .bind(thread)
                                .bind(ns)
                                .bind(order_db)
                                .bind(id)
                                .fetch_optional(&mut *conn)
                                .await
                                .map_err(storage(op))?;
                            if taken.is_some() {
                                return Err(conflict(new, order));
                            }
                            let parent = new.parent_id.as_deref().unwrap_or_default();
                            let parent_order =
                                commit_order_of(&mut *conn, q.order_of.clone(), (thread, ns, parent), op).await?;
                            return Err(match parent_order {
                                Some(p) => new.after_parent_error(order, u64::try_from(p).unwrap_or(0)),
                                None => not_found(&new.config(), parent),
                            });
                        }
                        Err(err) if is_unique_violation(&err) => return Err(conflict(new, order)),
                        Err(err) => return Err(Error::storage(op, err)),
                    }
                    if !e.writes.is_empty() {
                        self.insert_writes(conn, thread, ns, id, &e.writes, op).await?;
                    }
                    if self.settings.shallow {
                        // As in a prune: a write being stored on a
                        // superseded checkpoint has committed (and is
                        // deleted with it) or waits and finds it gone,
                        // never left pointing at no checkpoint.
                        if let Some(lock) = &q.lock_pruned {
                            Self::exec_below(conn, lock, thread, ns, order_db, op).await?;
                        }
                        self.delete_below(conn, thread, ns, order_db, op).await?;
                    }
                    Ok(order)
                }

                /// Runs a group's [one-shot](GroupPlan::one_shot) query:
                /// `Ok(false)` when it failed (nothing written; the caller
                /// takes the statement-by-statement path), except that a lock
                /// wait that timed out is returned as the error at once.
                async fn run_one_shot(&self, sql: String, args: Vec<Arg<'_>>, op: &'static str) -> Result<bool> {
                    // A lease not marked done is closed when dropped, so a
                    // query cut off mid-transaction never serves again.
                    let mut lease = self.hot.lease(&self.pool).await.map_err(storage(op))?;
                    let failed = match self.settings.spin(with_args(sql, args).execute(&mut *lease)).await {
                        Ok(_) => {
                            lease.done();
                            return Ok(true);
                        }
                        Err(e) => e,
                    };
                    // SQLite stops at the failing statement with its
                    // transaction open. A connection that cannot roll back
                    // is closed, never used again.
                    if ::sqlx::query("ROLLBACK").execute(&mut *lease).await.is_ok() {
                        lease.done();
                    }
                    // The statement-by-statement path would wait for the
                    // same lock a second time.
                    if is_lock_timeout(&failed) {
                        return Err(Error::storage(op, failed));
                    }
                    Ok(false)
                }

                /// Stores `items` atomically in one query. `Ok(false)`: the
                /// group needs the statement-by-statement path (shallow
                /// saver, no plan, too large for one query, a unique
                /// violation or a row not inserted); nothing was written.
                /// A lock wait that timed out is an error here.
                async fn try_group(&self, items: &[GroupItem<'_>], op: &'static str) -> Result<bool> {
                    if self.settings.shallow {
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

                /// Stores encoded entries atomically: one checkpoint without
                /// writes at a given commit order is one statement (atomic on
                /// its own, no transaction round trips); anything else runs
                /// in one transaction.
                async fn write_entries(&self, entries: Vec<EncodedEntry>, op: &'static str) -> Result<Vec<CheckpointRef>> {
                    self.ensure_migrated().await?;
                    retried(|| self.write_entries_once(&entries, op)).await
                }

                /// One attempt of [`write_entries`](Self::write_entries).
                async fn write_entries_once(&self, entries: &[EncodedEntry], op: &'static str) -> Result<Vec<CheckpointRef>> {
                    if let [e] = entries
                        && e.writes.is_empty()
                        && e.new.commit_order.is_some()
                        && !self.settings.shallow
                    {
                        let mut lease = self.hot.lease(&self.pool).await.map_err(storage(op))?;
                        let r = self.insert_entry(&mut *lease, e, op).await;
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
                        self.insert_entry(&mut *tx, e, op).await?;
                        out.push(e.new.config());
                    }
                    tx.commit().await.map_err(storage(op))?;
                    Ok(out)
                }

                /// Whether the thread (and namespace, if given) has a checkpoint.
                async fn has_head(&self, thread: &str, ns: &str, op: &'static str) -> Result<bool> {
                    let found: Option<i64> = ::sqlx::query_scalar(AssertSqlSafe(self.settings.q.thread_ns_has_any.clone()))
                        .bind(thread)
                        .bind(ns)
                        .fetch_optional(&self.pool)
                        .await
                        .map_err(storage(op))?;
                    Ok(found.is_some())
                }
            }

            #[async_trait]
            impl Saver for $saver {
                async fn get_tuple(&self, target: &CheckpointRef) -> Result<Option<CheckpointTuple>> {
                    self.rechecked(async {
                        let op = "get_tuple";
                        self.ensure_migrated().await?;
                        let mut params = vec![
                            Param::Text(target.thread_id.clone()),
                            Param::Text(target.checkpoint_ns.clone()),
                        ];
                        let mut where_ = "thread_id = $1 AND checkpoint_ns = $2".to_owned();
                        let mut order = KeyOrder::Newest;
                        if let Some(id) = &target.checkpoint_id {
                            params.push(Param::Text(id.clone()));
                            where_.push_str(" AND checkpoint_id = $3");
                            order = KeyOrder::Any;
                        }
                        let found = self
                            .fetch_tuples(&where_, params, 1, order, op)
                            .await?
                            .into_iter()
                            .next();
                        if found.is_none() && self.settings.shallow {
                            if let Some(id) = &target.checkpoint_id {
                                if self.has_head(&target.thread_id, &target.checkpoint_ns, op).await? {
                                    return Err(shallow_error(format!(
                                        "reading checkpoint `{id}` of thread `{}`, which is not the latest",
                                        target.thread_id
                                    )));
                                }
                            }
                        }
                        Ok(found)
                    })
                    .await
                }

                async fn list(&self, filter: &ListFilter) -> Result<Vec<CheckpointTuple>> {
                    self.rechecked(async {
                        let op = "list";
                        self.ensure_migrated().await?;
                        let before = match (&filter.before, &filter.thread_id) {
                            (Some(_), None) => {
                                return Err(Error::invalid_argument(
                                    "`before` needs a `thread_id` to order against",
                                ));
                            }
                            (Some(id), Some(thread)) => {
                                let ns = filter.checkpoint_ns.clone().unwrap_or_default();
                                let order = commit_order_of(
                                    &self.pool,
                                    self.settings.q.order_of.clone(),
                                    (thread, &ns, id),
                                    op,
                                )
                                .await?;
                                match order {
                                    Some(o) => Some(o),
                                    None if self.settings.shallow && self.has_head(thread, &ns, op).await? => {
                                        return Err(shallow_error(format!(
                                            "listing before checkpoint `{id}` of thread `{thread}`, which is not the latest"
                                        )));
                                    }
                                    None => {
                                        return Err(not_found(&CheckpointRef::latest(thread.clone()).ns(ns), id));
                                    }
                                }
                            }
                            (None, _) => None,
                        };
                        let (where_, params) = list_where(&self.settings.q, filter, before)?;
                        let limit = filter.limit.map_or(i64::MAX, |l| i64::try_from(l).unwrap_or(i64::MAX));
                        self.fetch_tuples(&where_, params, limit, KeyOrder::of(filter, limit), op).await
                    })
                    .await
                }

                async fn put(&self, checkpoint: NewCheckpoint) -> Result<CheckpointRef> {
                    self.rechecked(async {
                        let e = self.settings.encode_entry(checkpoint, Vec::new())?;
                        let mut out = self.write_entries(vec![e], "put").await?;
                        out.pop().ok_or_else(|| Error::storage("put", "no checkpoint stored"))
                    })
                    .await
                }

                async fn put_writes(&self, target: &CheckpointRef, writes: Vec<PendingWrite>) -> Result<()> {
                    self.rechecked(async {
                        let op = "put_writes";
                        let encoded = self.encode_target_writes(target, writes)?;
                        self.ensure_migrated().await?;
                        let encoded = &encoded;
                        retried(|| async move {
                            // One statement (the usual case: one task's ordinary
                            // writes) is atomic on its own; more run in a transaction.
                            if write_batches(&encoded.1).len() <= 1 {
                                let mut lease = self.hot.lease(&self.pool).await.map_err(storage(op))?;
                                let r = self.insert_writes_checked(&mut *lease, target, encoded, op).await;
                                settle(&mut lease, &r);
                                return r;
                            }
                            let mut tx = self.begin_write(op).await?;
                            self.insert_writes_checked(&mut *tx, target, encoded, op).await?;
                            tx.commit().await.map_err(storage(op))
                        })
                        .await
                    })
                    .await
                }

                async fn put_ops(&self, ops: Vec<$crate::checkpoint::WriteOp>) -> Result<()> {
                    self.rechecked(async {
                        use $crate::checkpoint::WriteOp;
                        let op = "put_ops";
                        limits::check_group(&ops)?;
                        // Encode everything first: a bad value fails the group before any write.
                        enum Encoded {
                            Put(Box<EncodedEntry>),
                            Writes(CheckpointRef, (String, Vec<$crate::checkpoint::sql::EncodedWrite>)),
                            Check($crate::checkpoint::WriteCheck),
                        }
                        let encoded = ops
                            .into_iter()
                            .map(|o| match o {
                                WriteOp::Put(c) => Ok(Encoded::Put(Box::new(self.settings.encode_entry(c, Vec::new())?))),
                                WriteOp::Writes(t, w) => {
                                    let e = self.encode_target_writes(&t, w)?;
                                    Ok(Encoded::Writes(t, e))
                                }
                                WriteOp::Check(c) => {
                                    c.checkpoint_id()?;
                                    Ok(Encoded::Check(c))
                                }
                            })
                            .collect::<Result<Vec<_>>>()?;
                        self.ensure_migrated().await?;
                        // A group with a check reads before it writes: it
                        // runs op by op in a transaction.
                        let items: Option<Vec<GroupItem<'_>>> = encoded
                            .iter()
                            .map(|e| match e {
                                Encoded::Put(e) => Some(GroupItem::Entry(e)),
                                Encoded::Writes(target, (checkpoint_id, writes)) => Some(GroupItem::Writes {
                                    target,
                                    checkpoint_id,
                                    writes,
                                }),
                                Encoded::Check(_) => None,
                            })
                            .collect();
                        let (items, encoded) = (&items, &encoded);
                        retried(|| async move {
                            if let Some(items) = items
                                && self.try_group(items, op).await?
                            {
                                return Ok(());
                            }
                            let mut tx = self.begin_write(op).await?;
                            for e in encoded {
                                match e {
                                    Encoded::Put(e) => {
                                        self.insert_entry(&mut *tx, e, op).await?;
                                    }
                                    Encoded::Writes(t, w) => self.insert_writes_checked(&mut *tx, t, w, op).await?,
                                    Encoded::Check(c) => self.check_write(&mut *tx, c, op).await?,
                                }
                            }
                            tx.commit().await.map_err(storage(op))
                        })
                        .await
                    })
                    .await
                }

                async fn put_checkpoint_with_writes(
                    &self,
                    checkpoint: NewCheckpoint,
                    writes: Vec<PendingWrite>,
                ) -> Result<CheckpointRef> {
                    self.rechecked(async {
                        let e = self.settings.encode_entry(checkpoint, writes)?;
                        let mut out = self.write_entries(vec![e], "put_checkpoint_with_writes").await?;
                        out.pop().ok_or_else(|| Error::storage("put_checkpoint_with_writes", "no checkpoint stored"))
                    })
                    .await
                }

                async fn put_many(&self, entries: Vec<BatchEntry>) -> Result<Vec<CheckpointRef>> {
                    self.rechecked(async {
                        limits::check_batch(&entries)?;
                        let encoded = entries
                            .into_iter()
                            .map(|e| self.settings.encode_entry(e.checkpoint, e.writes))
                            .collect::<Result<Vec<_>>>()?;
                        self.write_entries(encoded, "put_many").await
                    })
                    .await
                }

                async fn fork_at(
                    &self,
                    source: &CheckpointRef,
                    target_thread: &str,
                    options: ForkOptions,
                ) -> Result<CheckpointRef> {
                    self.rechecked(async {
                        let op = "fork_at";
                        limits::check_fork_options(options.max_checkpoints, options.max_bytes)?;
                        let id = source
                            .checkpoint_id
                            .as_deref()
                            .ok_or_else(|| Error::invalid_argument("fork_at needs a checkpoint id"))?;
                        self.ensure_migrated().await?;
                        let q = &self.settings.q;
                        let ns = &source.checkpoint_ns;
                        // Shallow: only the kept checkpoint can be forked, and only it is copied.
                        let depth = if self.settings.shallow { 0 } else { options.max_checkpoints };
                        // The lineage and its writes from one snapshot: a
                        // prune committing between the two reads would
                        // otherwise leave checkpoints without their writes.
                        let mut snapshot = self.begin_snapshot(op).await?;
                        let rows = ::sqlx::query(AssertSqlSafe(q.lineage.clone()))
                            .bind(&source.thread_id)
                            .bind(ns)
                            .bind(id)
                            .bind(i64::try_from(depth).unwrap_or(i64::MAX))
                            .fetch_all(&mut *snapshot)
                            .await
                            .map_err(storage(op))?;
                        if rows.is_empty() {
                            if self.settings.shallow && self.has_head(&source.thread_id, ns, op).await? {
                                return Err(shallow_error(format!(
                                    "forking from checkpoint `{id}` of thread `{}`, which is not the latest",
                                    source.thread_id
                                )));
                            }
                            return Err(not_found(source, id));
                        }
                        let mut lineage: Vec<CheckpointTuple> = Vec::new();
                        let mut bytes = 0usize;
                        for (i, row) in rows.iter().enumerate() {
                            if i == options.max_checkpoints {
                                return Err(Error::LimitExceeded {
                                    limit: "fork_at checkpoints",
                                    value: (i + 1) as u64,
                                    ceiling: options.max_checkpoints as u64,
                                });
                            }
                            let t = self.decode_record(row, &source.thread_id, ns, op)?;
                            bytes += limits::record_size(&t.checkpoint)?;
                            limits::check_fork_bytes(bytes, options.max_bytes)?;
                            // The oldest record read still has a parent: it is missing.
                            let oldest = i + 1 == rows.len() && !self.settings.shallow;
                            if let Some(p) = t.parent_config.as_ref().filter(|_| oldest) {
                                return Err(Error::MissingParent {
                                    thread_id: source.thread_id.clone(),
                                    checkpoint_id: t.config.checkpoint_id.clone().unwrap_or_default(),
                                    parent_id: p.checkpoint_id.clone().unwrap_or_default(),
                                });
                            }
                            lineage.push(t);
                        }
                        // A shallow fork copies one record: one that stores
                        // delta channels (written by a full saver on the same
                        // database) is copied with them rebuilt in full, as
                        // nothing it extends is copied.
                        if let Some(t) = lineage
                            .first_mut()
                            .filter(|t| self.settings.shallow && delta::unresolved(&t.checkpoint))
                        {
                            t.checkpoint = self.materialized(&mut *snapshot, t, op).await?;
                            // The copy is the record in full: the byte
                            // ceiling holds for what is written.
                            bytes = limits::record_size(&t.checkpoint)?;
                            limits::check_fork_bytes(bytes, options.max_bytes)?;
                        }
                        let write_rows = ::sqlx::query(AssertSqlSafe(q.lineage_writes.clone()))
                            .bind(&source.thread_id)
                            .bind(ns)
                            .bind(id)
                            .bind(i64::try_from(depth).unwrap_or(i64::MAX))
                            .fetch_all(&mut *snapshot)
                            .await
                            .map_err(storage(op))?;
                        snapshot.commit().await.map_err(storage(op))?;
                        let mut writes: std::collections::HashMap<String, Vec<PendingWrite>> = Default::default();
                        for row in &write_rows {
                            let cid: String = get(row, "checkpoint_id", op)?;
                            let w = self.settings.decode_write(
                                &source.thread_id, ns, &cid,
                                get(row, "task_id", op)?, get(row, "idx", op)?,
                                get(row, "channel", op)?, get(row, "task_path", op)?,
                                &get::<Vec<u8>>(row, "value", op)?,
                            )?;
                            bytes += limits::write_size(&w)?;
                            writes.entry(cid).or_default().push(w);
                        }
                        // The ceiling counts the writes copied too.
                        limits::check_fork_bytes(bytes, options.max_bytes)?;
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
                            encoded.push(self.settings.encode_entry(new, writes.remove(&cid).unwrap_or_default())?);
                        }
                        let encoded = &encoded;
                        retried(|| async move {
                            let mut tx = self.begin_write(op).await?;
                            let taken: Option<i64> = ::sqlx::query_scalar(AssertSqlSafe(q.thread_ns_has_any.clone()))
                                .bind(target_thread)
                                .bind(ns)
                                .fetch_optional(&mut *tx)
                                .await
                                .map_err(storage(op))?;
                            if taken.is_some() {
                                return Err(Error::ThreadExists { thread_id: target_thread.to_owned() });
                            }
                            // Write rows of the target that belong to no
                            // checkpoint (a deletion done by hand): copied
                            // writes keep a value stored first, so they
                            // would be read as the copy's.
                            ::sqlx::query(AssertSqlSafe(q.delete_orphan_ns_writes.clone()))
                                .bind(target_thread)
                                .bind(ns)
                                .execute(&mut *tx)
                                .await
                                .map_err(storage(op))?;
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
                    })
                    .await
                }

                async fn copy_thread(&self, source_thread: &str, target_thread: &str) -> Result<()> {
                    self.rechecked(async {
                        let op = "copy_thread";
                        self.ensure_migrated().await?;
                        let q = &self.settings.q;
                        retried(|| async move {
                            // One snapshot for every read (see fork_at).
                            let mut tx = self.begin_write_snapshot(op).await?;
                            let taken: Option<i64> = ::sqlx::query_scalar(AssertSqlSafe(q.thread_has_any.clone()))
                                .bind(target_thread)
                                .fetch_optional(&mut *tx)
                                .await
                                .map_err(storage(op))?;
                            if taken.is_some() {
                                return Err(Error::ThreadExists { thread_id: target_thread.to_owned() });
                            }
                            // As in fork_at: the target's write rows that belong to no checkpoint.
                            ::sqlx::query(AssertSqlSafe(q.delete_orphan_writes.clone()))
                                .bind(target_thread)
                                .execute(&mut *tx)
                                .await
                                .map_err(storage(op))?;
                            let rows = ::sqlx::query(AssertSqlSafe(q.thread_rows.clone()))
                                .bind(source_thread)
                                .fetch_all(&mut *tx)
                                .await
                                .map_err(storage(op))?;
                            if rows.is_empty() {
                                return Err(Error::ThreadNotFound { thread_id: source_thread.to_owned() });
                            }
                            let write_rows = ::sqlx::query(AssertSqlSafe(q.thread_writes.clone()))
                                .bind(source_thread)
                                .fetch_all(&mut *tx)
                                .await
                                .map_err(storage(op))?;
                            let mut writes: std::collections::HashMap<(String, String), Vec<PendingWrite>> = Default::default();
                            for row in &write_rows {
                                let ns: String = get(row, "checkpoint_ns", op)?;
                                let cid: String = get(row, "checkpoint_id", op)?;
                                let w = self.settings.decode_write(
                                    source_thread, &ns, &cid,
                                    get(row, "task_id", op)?, get(row, "idx", op)?,
                                    get(row, "channel", op)?, get(row, "task_path", op)?,
                                    &get::<Vec<u8>>(row, "value", op)?,
                                )?;
                                writes.entry((ns, cid)).or_default().push(w);
                            }
                            // Commit orders are renumbered 1, 2, … in each
                            // namespace (the rows come in namespace and commit
                            // order): a first write to the target takes 1 too,
                            // so one racing this copy conflicts with it on the
                            // unique key instead of mixing into it.
                            let mut next: Option<(String, u64)> = None;
                            for row in &rows {
                                let ns: String = get(row, "checkpoint_ns", op)?;
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
                                let e = self.settings.encode_entry(new, writes.remove(&(ns, cid)).unwrap_or_default())?;
                                self.insert_raw(&mut tx, &e, op).await?;
                            }
                            tx.commit().await.map_err(storage(op))
                        })
                        .await
                    })
                    .await
                }

                async fn delete_thread(&self, thread_id: &str) -> Result<()> {
                    // Cached values of this process no longer hold once the
                    // thread's ids may be stored again.
                    let thread = [thread_id.to_owned()];
                    let _deleted = DeletionNote(&thread);
                    self.rechecked(async {
                        let op = "delete_thread";
                        self.ensure_migrated().await?;
                        retried(|| async move {
                            let mut tx = self.begin_write(op).await?;
                            self.delete_thread_in(&mut tx, thread_id, op).await?;
                            tx.commit().await.map_err(storage(op))
                        })
                        .await
                    })
                    .await
                }

                async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<u64> {
                    let keep = strategy.keep()?;
                    let _deleted = keep.is_none().then_some(DeletionNote(thread_ids));
                    self.rechecked(async {
                        let op = "prune";
                        self.ensure_migrated().await?;
                        retried(|| async move {
                            let mut tx = self.begin_write(op).await?;
                            let mut deleted = 0u64;
                            for t in thread_ids {
                                deleted += match keep {
                                    Some(keep) => self.keep_last(&mut tx, t, keep, op).await?,
                                    None => self.delete_thread_in(&mut tx, t, op).await?,
                                };
                            }
                            tx.commit().await.map_err(storage(op))?;
                            Ok(deleted)
                        })
                        .await
                    })
                    .await
                }

                async fn lineage(
                    &self,
                    from: &CheckpointRef,
                    count: usize,
                    below: Option<u64>,
                ) -> Result<Vec<CheckpointTuple>> {
                    self.rechecked(async {
                        let mut lines = self.lineages(&[LineageRequest::new(from.clone(), count, below)]).await?;
                        Ok(lines.pop().unwrap_or_default())
                    })
                    .await
                }

                async fn lineages(&self, requests: &[LineageRequest]) -> Result<Vec<Vec<CheckpointTuple>>> {
                    self.rechecked(async {
                        let op = "lineage";
                        self.ensure_migrated().await?;
                        // A thread that was never forked is one line: a lineage
                        // under a known child is the `count` commit orders below
                        // it, one index range (which PostgreSQL plans well even
                        // before its tables have statistics), several per query.
                        // A line that leaves its range (a fork) follows the links.
                        // `below` is a hint: one past what SQL stores (above
                        // i64::MAX) is no commit order, and the links are followed.
                        let by_range = |q: &LineageRequest| {
                            q.below.is_some_and(|b| i64::try_from(b).is_ok())
                                && q.count > 0
                                && q.from.checkpoint_id.is_some()
                        };
                        let ranged: Vec<&LineageRequest> = requests.iter().filter(|q| by_range(q)).collect();
                        let mut found = Vec::with_capacity(ranged.len());
                        for chunk in ranged.chunks(LINEAGES_PER_QUERY) {
                            found.extend(self.lineages_by_range(chunk, op).await?);
                        }
                        let mut found = found.into_iter();
                        let mut lines = Vec::with_capacity(requests.len());
                        for q in requests {
                            let line = match by_range(q).then(|| found.next()).flatten().flatten() {
                                Some(line) => line,
                                None => self.lineage_by_links(&q.from, q.count, op).await?,
                            };
                            lines.push(line);
                        }
                        Ok(lines)
                    })
                    .await
                }

                fn supports_deltas(&self) -> bool {
                    !self.settings.shallow
                }

                async fn list_threads(&self, limit: Option<usize>, offset: usize) -> Result<Vec<ThreadInfo>> {
                    self.rechecked(async {
                        let op = "list_threads";
                        self.ensure_migrated().await?;
                        let rows = ::sqlx::query(AssertSqlSafe(self.settings.q.list_threads.clone()))
                            .bind(limit.map_or(i64::MAX, |l| i64::try_from(l).unwrap_or(i64::MAX)))
                            .bind(i64::try_from(offset).unwrap_or(i64::MAX))
                            .fetch_all(&self.pool)
                            .await
                            .map_err(storage(op))?;
                        rows.iter()
                            .map(|row| {
                                Ok(ThreadInfo {
                                    thread_id: get(row, "thread_id", op)?,
                                    checkpoints: u64::try_from(get::<i64>(row, "n", op)?).unwrap_or(0),
                                })
                            })
                            .collect()
                    })
                    .await
                }

                async fn thread_info(&self, thread_id: &str) -> Result<Option<ThreadInfo>> {
                    self.rechecked(async {
                        let op = "thread_info";
                        self.ensure_migrated().await?;
                        let n: i64 = ::sqlx::query_scalar(AssertSqlSafe(self.settings.q.thread_count.clone()))
                            .bind(thread_id)
                            .fetch_one(&self.pool)
                            .await
                            .map_err(storage(op))?;
                        Ok(ThreadInfo::counted(thread_id, u64::try_from(n).unwrap_or(0)))
                    })
                    .await
                }

                async fn at_commit_order(
                    &self,
                    thread_id: &str,
                    checkpoint_ns: &str,
                    commit_order: u64,
                ) -> Result<Option<CheckpointRef>> {
                    self.rechecked(async {
                        let op = "at_commit_order";
                        self.ensure_migrated().await?;
                        // SQL stores commit orders up to i64::MAX: none is above.
                        let Ok(order) = i64::try_from(commit_order) else {
                            return Ok(None);
                        };
                        let id: Option<String> = ::sqlx::query_scalar(AssertSqlSafe(self.settings.q.id_at_order.clone()))
                            .bind(thread_id)
                            .bind(checkpoint_ns)
                            .bind(order)
                            .fetch_optional(&self.pool)
                            .await
                            .map_err(storage(op))?;
                        Ok(id.map(|id| CheckpointRef {
                            thread_id: thread_id.to_owned(),
                            checkpoint_ns: checkpoint_ns.to_owned(),
                            checkpoint_id: Some(id),
                        }))
                    })
                    .await
                }
            }

            impl $saver {
                /// The lineages of `requests` (each under a known child) read
                /// as commit-order ranges (merged where they overlap) in one
                /// query: `None` for one whose line leaves its range.
                async fn lineages_by_range(
                    &self,
                    requests: &[&LineageRequest],
                    op: &'static str,
                ) -> Result<Vec<Option<Vec<CheckpointTuple>>>> {
                    let ranges = merge_ranges(
                        requests
                            .iter()
                            .map(|q| {
                                let end = q.below.unwrap_or_default();
                                let start = end.saturating_sub(q.count as u64);
                                (q.from.thread_id.as_str(), q.from.checkpoint_ns.as_str(), start, end)
                            })
                            .collect(),
                    );
                    let mut params = Vec::with_capacity(4 * ranges.len());
                    for &(thread, ns, start, end) in &ranges {
                        params.extend([
                            Param::Text(thread.to_owned()),
                            Param::Text(ns.to_owned()),
                            Param::Int(order_i64(end)?),
                            Param::Int(order_i64(start)?),
                        ]);
                    }
                    // SQLite: the records packed into one row (see `packed`),
                    // row by row where that cannot be.
                    let q = &self.settings.q;
                    let packed = q.packed_lineage_ranges(ranges.len());
                    let rows = || q.lineage_ranges(ranges.len());
                    let fetched = self.fetch_packed_or_rows(packed, rows, params, op).await?;
                    let raws: Vec<RawCheckpoint<'_>> = match &fetched {
                        Fetched::Packed(rows) => {
                            let blob = match rows.first() {
                                Some(row) => get::<Option<&[u8]>>(row, "packed", op)?,
                                None => None,
                            };
                            blob.map(packed::checkpoints).transpose()?.unwrap_or_default()
                        }
                        Fetched::Rows(rows) => rows
                            .iter()
                            .map(|row| {
                                Ok(RawCheckpoint {
                                    thread_id: get(row, "thread_id", op)?,
                                    checkpoint_ns: get(row, "checkpoint_ns", op)?,
                                    checkpoint_id: get(row, "checkpoint_id", op)?,
                                    parent_id: get(row, "parent_checkpoint_id", op)?,
                                    metadata: get(row, "metadata", op)?,
                                    commit_order: get(row, "commit_order", op)?,
                                    payload: get(row, "checkpoint", op)?,
                                })
                            })
                            .collect::<Result<_>>()?,
                    };
                    let index: ::std::collections::HashMap<(&str, &str, &str), usize> = raws
                        .iter()
                        .enumerate()
                        .map(|(ix, r)| ((r.thread_id, r.checkpoint_ns, r.checkpoint_id), ix))
                        .collect();
                    let mut out = Vec::with_capacity(requests.len());
                    for q in requests {
                        let (thread, ns) = (q.from.thread_id.as_str(), q.from.checkpoint_ns.as_str());
                        let from = q.from.checkpoint_id.as_deref().unwrap_or_default();
                        let line = follow_line(from, q.count, |id| index.get(&(thread, ns, id)).copied(), |ix| raws[ix].parent_id);
                        out.push(match line {
                            Some(line) => Some(
                                line.iter()
                                    .map(|&ix| self.settings.decode_raw(&raws[ix]))
                                    .collect::<Result<Vec<_>>>()?,
                            ),
                            None => None,
                        });
                    }
                    Ok(out)
                }

                /// The lineage of `from` by following its parent links.
                async fn lineage_by_links(
                    &self,
                    from: &CheckpointRef,
                    count: usize,
                    op: &'static str,
                ) -> Result<Vec<CheckpointTuple>> {
                    let (Some(id), Some(depth)) = (&from.checkpoint_id, count.checked_sub(1)) else {
                        return Ok(Vec::new());
                    };
                    let params = vec![
                        Param::Text(from.thread_id.clone()),
                        Param::Text(from.checkpoint_ns.clone()),
                        Param::Text(id.clone()),
                        Param::Int(i64::try_from(depth).unwrap_or(i64::MAX)),
                    ];
                    let rows = self.fetch_dynamic(self.settings.q.lineage.clone(), params, op).await?;
                    self.decode_lineage(&rows, &from.thread_id, &from.checkpoint_ns, op)
                }

                /// Inserts a copied checkpoint with its given commit order and
                /// writes, without the conflict rules (the target was checked
                /// empty; a row taken meanwhile is [`Error::ThreadExists`]).
                async fn insert_raw(&self, tx: &mut Tx, e: &EncodedEntry, op: &'static str) -> Result<()> {
                    let new = &e.new;
                    let order = order_i64(new.commit_order.unwrap_or(1))?;
                    ::sqlx::query(AssertSqlSafe(self.settings.q.insert_cp.clone()))
                        .bind(&new.thread_id)
                        .bind(&new.checkpoint_ns)
                        .bind(&new.checkpoint.id)
                        .bind(new.parent_id.as_deref())
                        .bind(&e.payload[..])
                        .bind(&e.metadata)
                        .bind(order)
                        .execute(&mut **tx)
                        .await
                        .map_err(|err| {
                            // The target was found empty: a taken id or
                            // commit order is another writer's, committed since.
                            if is_unique_violation(&err) {
                                Error::ThreadExists { thread_id: new.thread_id.clone() }
                            } else {
                                Error::storage(op, err)
                            }
                        })?;
                    self.insert_writes(&mut **tx, &new.thread_id, &new.checkpoint_ns, &new.checkpoint.id, &e.writes, op).await.map(drop)
                }
            }
        };
    };
}
