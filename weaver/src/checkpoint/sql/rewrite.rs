//! [`Rewrites`] on the SQL savers: every record of a call encoded first,
//! then replaced in one write transaction (record, metadata and pending
//! writes), the same code for SQLite and PostgreSQL.

use async_trait::async_trait;

use super::backend::Backend;
use super::group::Arg;
use super::saver::SqlSaver;
use super::{EncodedWrite, not_found, retried};
use crate::checkpoint::CheckpointTuple;
use crate::checkpoint::DeletionNote;
use crate::checkpoint::rewrites::{
    Replacement, Rewrites, check_identity, check_writes_unchanged, checked_record,
};
use crate::codec::RecordContext;
use crate::error::Result;
use crate::sql::error::storage;

/// A record to replace, encoded.
struct Encoded<'r> {
    r: &'r Replacement,
    t: &'r CheckpointTuple,
    payload: Vec<u8>,
    metadata: String,
    writes: Vec<EncodedWrite>,
}

impl<D: Backend> SqlSaver<D> {
    /// Replaces one encoded record inside the transaction on `conn`.
    async fn replace_in(
        &self,
        conn: &mut D::Connection,
        e: &Encoded<'_>,
        op: &'static str,
    ) -> Result<()> {
        let q = &self.settings.q;
        let (thread, ns, id) = (
            e.t.config.thread_id.as_str(),
            e.t.config.checkpoint_ns.as_str(),
            e.t.checkpoint.id.as_str(),
        );
        let key = [Arg::Text(thread), Arg::Text(ns), Arg::Text(id)];
        let row = D::fetch_optional(conn, self.settings.pooling, q.identity.clone(), key)
            .await
            .map_err(storage(op))?;
        let Some(row) = row else {
            return Err(not_found(&e.t.config, id));
        };
        let parent: Option<String> = Self::get(&row, 0, op)?;
        let order: i64 = Self::get(&row, 1, op)?;
        let order = u64::try_from(order).unwrap_or(0);
        check_identity(e.t, parent.as_deref(), order)?;
        // The writes are compared with those read by what their delete
        // removed: a write stored meanwhile (a run's, which does not wait
        // for this transaction's lock on the checkpoint row on PostgreSQL)
        // either is among them, and refuses the replacement, or lands after
        // the delete and stays.
        let key = [Arg::Text(thread), Arg::Text(ns), Arg::Text(id)];
        let rows = D::fetch_all(conn, self.settings.pooling, q.take_write_keys.clone(), key)
            .await
            .map_err(storage(op))?;
        let mut stored = Vec::with_capacity(rows.len());
        for row in &rows {
            let task: String = Self::get(row, 0, op)?;
            let idx: i64 = Self::get(row, 1, op)?;
            stored.push((task, idx));
        }
        check_writes_unchanged(e.r, stored)?;
        let args = [
            Arg::Text(thread),
            Arg::Text(ns),
            Arg::Text(id),
            Arg::Bytes(&e.payload),
            Arg::Text(&e.metadata),
        ];
        D::execute(conn, self.settings.pooling, q.set_record.clone(), args)
            .await
            .map_err(storage(op))?;
        self.insert_writes(conn, (thread, ns, id), &e.writes, op)
            .await?;
        // A copy of its writes taken for a lease holder's rollback holds
        // them as they were: it goes (a rollback would put them back).
        if ns.is_empty() {
            for table in ["weaver_lease_base_writes", "weaver_lease_bases"] {
                D::execute(
                    conn,
                    self.settings.pooling,
                    format!(
                        "DELETE FROM {}{table} WHERE thread_id = $1 AND checkpoint_id = $2",
                        q.prefix
                    ),
                    [Arg::Text(thread), Arg::Text(id)],
                )
                .await
                .map_err(storage(op))?;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl<D: Backend> Rewrites for SqlSaver<D> {
    async fn replace(&self, records: Vec<Replacement>) -> Result<u64> {
        crate::checkpoint::rewrites::check_distinct(&records)?;
        let mut encoded = Vec::with_capacity(records.len());
        for r in &records {
            let t = &r.record;
            let (id, metadata, parent) = checked_record(t)?;
            let ctx = RecordContext::checkpoint(&t.config.thread_id, &t.config.checkpoint_ns, id);
            let (payload, metadata) =
                self.settings
                    .encode_record(&t.checkpoint, &metadata, ctx.parent(parent))?;
            let writes = self
                .settings
                .encode_writes(&ctx, t.pending_writes.clone())?;
            encoded.push(Encoded {
                r,
                t,
                payload,
                metadata,
                writes,
            });
        }
        // Rows are locked in the order a prune and a lease rollback lock a
        // thread's (namespace, commit order, ascending), so that within a
        // thread they never wait on each other in a cycle (across threads,
        // PostgreSQL's deadlock error is retried).
        encoded.sort_by(|a, b| {
            let (a, b) = (a.t, b.t);
            (&a.config.thread_id, &a.config.checkpoint_ns, a.commit_order).cmp(&(
                &b.config.thread_id,
                &b.config.checkpoint_ns,
                b.commit_order,
            ))
        });
        let mut threads: Vec<String> = Vec::new();
        for t in records.iter().map(|r| &r.record) {
            if !threads.contains(&t.config.thread_id) {
                threads.push(t.config.thread_id.clone());
            }
        }
        // Values cached for these threads no longer hold, however the call ends.
        let _replaced = DeletionNote(&self.state, &threads);
        let encoded = &encoded;
        self.rechecked(async {
            let op = "replace";
            self.ensure_migrated().await?;
            retried(|| async move {
                let mut tx = self.begin_write(op).await?;
                for e in encoded {
                    self.replace_in(&mut tx, e, op).await?;
                }
                tx.commit().await.map_err(storage(op))?;
                Ok(encoded.len() as u64)
            })
            .await
        })
        .await
    }
}
