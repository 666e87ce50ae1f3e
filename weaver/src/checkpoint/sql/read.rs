//! The SQL saver's reads: listings (packed into one row where the database
//! can), lineages by commit-order range or by parent links, and the
//! decoding of rows into records.

use std::collections::HashMap;

use super::backend::Backend;
use super::group::Arg;
use super::saver::SqlSaver;
use super::{
    KeyOrder, LINEAGES_PER_QUERY, Param, RawCheckpoint, TupleAssembler, follow_line, merge_ranges,
    order_i64, packed,
};
use crate::checkpoint::{Checkpoint, CheckpointRef, CheckpointTuple, LineageRequest, delta};
use crate::error::{Error, Result};
use crate::sql::error::{connection_lost, is_too_big, storage};

/// What [`SqlSaver::fetch_packed_or_rows`] read: the packed row, or the
/// listing row by row.
enum Fetched<R> {
    Packed(Vec<R>),
    Rows(Vec<R>),
}

impl<'a> From<&'a Param> for Arg<'a> {
    fn from(p: &'a Param) -> Self {
        match p {
            Param::Text(s) => Arg::Text(s),
            Param::Int(i) => Arg::Int(*i),
        }
    }
}

impl<D: Backend> SqlSaver<D> {
    /// Runs a query built from text and parameters and returns its rows.
    pub(super) async fn fetch_dynamic(
        &self,
        sql: String,
        params: Vec<Param>,
        op: &'static str,
    ) -> Result<Vec<D::Row>> {
        self.fetch_dynamic_raw(sql, &params)
            .await
            .map_err(storage(op))
    }

    /// [`fetch_dynamic`](Self::fetch_dynamic), with the database's error.
    ///
    /// A read that loses the saver's own connection (the server restarted,
    /// failed over or ended the session while the connection sat idle for
    /// less than the ping interval) is read again once, on a connection
    /// from the pool: a read is safe to repeat, and the pool's connection
    /// then becomes the saver's own.
    async fn fetch_dynamic_raw(
        &self,
        sql: String,
        params: &[Param],
    ) -> std::result::Result<Vec<D::Row>, sqlx::Error> {
        let mut lease = self.hot.lease(&self.pool).await?;
        let own = lease.is_own();
        // A failed read may have lost its connection (a server shutting it
        // down reports that as a database error too): only a successful one
        // leaves it for the next call.
        let again = own.then(|| sql.clone());
        let args = || params.iter().map(Arg::from);
        let rows = match self
            .settings
            .spin(D::fetch_all(&mut lease, self.settings.pooling, sql, args()))
            .await
        {
            Ok(rows) => rows,
            Err(e) => match again.filter(|_| connection_lost(&e)) {
                Some(sql) => {
                    drop(lease);
                    lease = self.hot.lease(&self.pool).await?;
                    self.settings
                        .spin(D::fetch_all(&mut lease, self.settings.pooling, sql, args()))
                        .await?
                }
                None => return Err(e),
            },
        };
        lease.done();
        Ok(rows)
    }

    /// The checkpoints of `where_` (see [`Queries::tuples`](super::Queries::tuples))
    /// with their pending writes: packed into one row where the database
    /// can ([`Queries::packed_tuples`](super::Queries::packed_tuples)), row
    /// by row when it cannot, or when the packed listing would be longer
    /// than the database's longest string.
    pub(super) async fn fetch_tuples(
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
        match self
            .fetch_packed_or_rows(packed, rows, params.clone(), op)
            .await?
        {
            Fetched::Packed(packed) => match self.unpack_all(&packed, op) {
                // A packed listing that does not decode (a row's text that
                // is not UTF-8 spoils the whole pack) names no row: listed
                // row by row, the bad one is named where its decoding can
                // tell (else the packed listing's error stands).
                Err(unnamed @ Error::Decode { .. }) => {
                    let listed = match self.fetch_dynamic(rows(), params, op).await {
                        Ok(rows) => self.assemble(rows, op),
                        Err(e) => Err(e),
                    };
                    match listed {
                        Err(Error::Decode { .. }) | Ok(_) => listed,
                        Err(_) => Err(unnamed),
                    }
                }
                done => done,
            },
            Fetched::Rows(rows) => self.assemble(rows, op),
        }
    }

    /// The tuples of packed listing rows.
    fn unpack_all(&self, rows: &[D::Row], op: &'static str) -> Result<Vec<CheckpointTuple>> {
        let mut out = TupleAssembler::default();
        for row in rows {
            let packed: Option<&[u8]> = Self::get(row, "packed", op)?;
            if let Some(packed) = packed {
                self.settings.unpack(packed, &mut out)?;
            }
        }
        Ok(out.finish())
    }

    /// Runs `packed` (a listing SQLite packs into one row) where the
    /// database can, else, or when the packed row would be longer than
    /// SQLite's longest string, `rows()` (the same listing row by row).
    async fn fetch_packed_or_rows(
        &self,
        packed: Option<String>,
        rows: impl FnOnce() -> String,
        params: Vec<Param>,
        op: &'static str,
    ) -> Result<Fetched<D::Row>> {
        let can = self
            .settings
            .verified
            .get()
            .is_some_and(|v| v.packed_listing);
        if let Some(sql) = packed.filter(|_| can) {
            match self.fetch_dynamic_raw(sql, &params).await {
                Ok(found) => return Ok(Fetched::Packed(found)),
                Err(e) if !is_too_big(&e) => return Err(storage(op)(e)),
                Err(_) => {}
            }
        }
        self.fetch_dynamic(rows(), params, op)
            .await
            .map(Fetched::Rows)
    }

    /// Checkpoint rows (kind 0) and write rows (kind 1) into tuples.
    fn assemble(&self, rows: Vec<D::Row>, op: &'static str) -> Result<Vec<CheckpointTuple>> {
        let mut out = TupleAssembler::default();
        for row in rows {
            let kind: i64 = Self::get::<i32>(&row, "kind", op)
                .map(i64::from)
                .or_else(|_| Self::get::<i64>(&row, "kind", op))?;
            let thread_id: String = Self::get(&row, "thread_id", op)?;
            let ns: String = Self::get(&row, "checkpoint_ns", op)?;
            let id: String = Self::get(&row, "checkpoint_id", op)?;
            let payload: &[u8] = Self::get(&row, "payload", op)?;
            if kind == 0 {
                let named = |what: &str, e: Error| {
                    let ctx = crate::codec::RecordContext::checkpoint(&thread_id, &ns, &id);
                    Error::decode(format!("{what} of {}", ctx.describe()), e)
                };
                let parent: Option<String> = Self::get(&row, "parent_checkpoint_id", op)
                    .map_err(|e| named("the parent id", e))?;
                let metadata: &str =
                    Self::get(&row, "metadata", op).map_err(|e| named("metadata", e))?;
                let order: i64 = Self::get(&row, "commit_order", op)?;
                out.push_tuple(
                    self.settings
                        .decode_tuple(thread_id, ns, id, parent, payload, metadata, order)?,
                );
            } else {
                let task_id: String = Self::get(&row, "task_id", op)?;
                let idx: i64 = Self::get(&row, "idx", op)?;
                let channel: String = Self::get(&row, "channel", op)?;
                let task_path: String = Self::get(&row, "task_path", op)?;
                let w = self.settings.decode_write(
                    &thread_id, &ns, &id, task_id, idx, channel, task_path, payload,
                )?;
                out.push_write((thread_id, ns, id), w);
            }
        }
        Ok(out.finish())
    }

    /// Lineage rows (`q.lineage`, nearest first) of `(thread, ns)` as records.
    pub(super) fn decode_lineage(
        &self,
        rows: &[D::Row],
        thread: &str,
        ns: &str,
        op: &'static str,
    ) -> Result<Vec<CheckpointTuple>> {
        rows.iter()
            .map(|row| self.decode_record(row, thread, ns, op))
            .collect()
    }

    /// One checkpoint row (without its pending writes) of `(thread, ns)`.
    pub(super) fn decode_record(
        &self,
        row: &D::Row,
        thread: &str,
        ns: &str,
        op: &'static str,
    ) -> Result<CheckpointTuple> {
        let id: String = Self::get(row, "checkpoint_id", op)?;
        // A column the driver cannot read as its type (text that is not
        // UTF-8) is bad data of this record, named as on the packed path.
        let bad = |col: &str, e: Error| match e {
            Error::Decode { reason, .. } => Error::decode(
                format!("column `{col}` of checkpoint `{id}` of thread `{thread}`"),
                reason,
            ),
            e => e,
        };
        let payload: &[u8] = Self::get(row, "checkpoint", op).map_err(|e| bad("checkpoint", e))?;
        let metadata: &str = Self::get(row, "metadata", op).map_err(|e| bad("metadata", e))?;
        let parent = Self::get(row, "parent_checkpoint_id", op)
            .map_err(|e| bad("parent_checkpoint_id", e))?;
        let t = self.settings.decode_tuple(
            thread.to_owned(),
            ns.to_owned(),
            id,
            parent,
            payload,
            metadata,
            Self::get(row, "commit_order", op)?,
        )?;
        // A newer build's record is refused before anything copies or keeps
        // it: decoded by this build, it would lose what it does not know.
        crate::checkpoint::delta::check_format(&t)?;
        Ok(t)
    }

    /// The record of `t` (a stored checkpoint whose record has delta
    /// channels) with every delta channel rebuilt in full from its lineage,
    /// to be stored without its ancestors.
    pub(super) async fn materialized(
        &self,
        conn: &mut D::Connection,
        t: &CheckpointTuple,
        op: &'static str,
    ) -> Result<Checkpoint> {
        let (thread, ns) = (&t.config.thread_id, &t.config.checkpoint_ns);
        let count = delta::lineage_len(&t.checkpoint);
        let depth = i64::try_from(count - 1).unwrap_or(i64::MAX);
        let args = [
            Arg::Text(thread),
            Arg::Text(ns),
            Arg::Text(&t.checkpoint.id),
            Arg::Int(depth),
        ];
        let rows = D::fetch_all(
            conn,
            self.settings.pooling,
            self.settings.q.lineage.clone(),
            args,
        )
        .await
        .map_err(storage(op))?;
        let chain = self.decode_lineage(&rows, thread, ns, op)?;
        delta::materialize(chain, count)
    }

    /// Whether the thread (and namespace) has a checkpoint.
    pub(super) async fn has_head(&self, thread: &str, ns: &str, op: &'static str) -> Result<bool> {
        let sql = self.settings.q.thread_ns_has_any.clone();
        let found = self
            .pool_row(sql, [Arg::Text(thread), Arg::Text(ns)], op)
            .await?;
        Ok(found.is_some())
    }

    /// The lineages of `requests` ([`Saver::lineages`](crate::checkpoint::Saver::lineages)).
    pub(super) async fn read_lineages(
        &self,
        requests: &[LineageRequest],
    ) -> Result<Vec<Vec<CheckpointTuple>>> {
        let op = "lineage";
        self.ensure_migrated().await?;
        // A thread that was never forked is one line: a lineage under a
        // known child is the `count` commit orders below it, one index range
        // (which PostgreSQL plans well even before its tables have
        // statistics), several per query. A line that leaves its range (a
        // fork) follows the links. `below` is a hint: one past what SQL
        // stores (above i64::MAX) is no commit order, and the links are
        // followed.
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
    }

    /// The lineages of `requests` (each under a known child) read as
    /// commit-order ranges (merged where they overlap) in one query: `None`
    /// for one whose line leaves its range.
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
                    (
                        q.from.thread_id.as_str(),
                        q.from.checkpoint_ns.as_str(),
                        start,
                        end,
                    )
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
        // SQLite: the records packed into one row (see `packed`), row by row
        // where that cannot be.
        let q = &self.settings.q;
        let packed = q.packed_lineage_ranges(ranges.len());
        let rows = || q.lineage_ranges(ranges.len());
        let fetched = self.fetch_packed_or_rows(packed, rows, params, op).await?;
        let raws: Vec<RawCheckpoint<'_>> = match &fetched {
            Fetched::Packed(rows) => {
                let blob = match rows.first() {
                    Some(row) => Self::get::<Option<&[u8]>>(row, "packed", op)?,
                    None => None,
                };
                blob.map(packed::checkpoints)
                    .transpose()?
                    .unwrap_or_default()
            }
            Fetched::Rows(rows) => rows
                .iter()
                .map(|row| {
                    Ok(RawCheckpoint {
                        thread_id: Self::get(row, "thread_id", op)?,
                        checkpoint_ns: Self::get(row, "checkpoint_ns", op)?,
                        checkpoint_id: Self::get(row, "checkpoint_id", op)?,
                        parent_id: Self::get(row, "parent_checkpoint_id", op)?,
                        metadata: Self::get(row, "metadata", op)?,
                        commit_order: Self::get(row, "commit_order", op)?,
                        payload: Self::get(row, "checkpoint", op)?,
                    })
                })
                .collect::<Result<_>>()?,
        };
        let index: HashMap<(&str, &str, &str), usize> = raws
            .iter()
            .enumerate()
            .map(|(ix, r)| ((r.thread_id, r.checkpoint_ns, r.checkpoint_id), ix))
            .collect();
        let mut out = Vec::with_capacity(requests.len());
        for q in requests {
            let (thread, ns) = (q.from.thread_id.as_str(), q.from.checkpoint_ns.as_str());
            let from = q.from.checkpoint_id.as_deref().unwrap_or_default();
            let line = follow_line(
                from,
                q.count,
                |id| index.get(&(thread, ns, id)).copied(),
                |ix| raws[ix].parent_id,
            );
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
        let rows = self
            .fetch_dynamic(self.settings.q.lineage.clone(), params, op)
            .await?;
        self.decode_lineage(&rows, &from.thread_id, &from.checkpoint_ns, op)
    }
}
