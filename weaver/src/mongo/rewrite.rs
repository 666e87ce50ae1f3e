//! [`Rewrites`] on [`MongoSaver`]: every record of a call encoded first,
//! then replaced in one multi-document transaction (record, metadata and
//! pending writes), retried on a transient write conflict.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures_util::TryStreamExt;
use mongodb::ClientSession;
use mongodb::bson::{Document, doc};

use super::{MongoSaver, storage};
use crate::checkpoint::rewrites::{
    Replacement, Rewrites, check_identity, check_writes_unchanged, checked_record,
};
use crate::checkpoint::{CheckpointTuple, PendingWrite};
use crate::error::{Error, Result};

/// How many times a replacement that lost a write conflict runs again.
const CONFLICT_RETRIES: u32 = 4;

/// A record to replace, encoded.
struct Encoded<'r> {
    r: &'r Replacement,
    t: &'r CheckpointTuple,
    record: Document,
    writes: Vec<Document>,
}

/// `writes` as they are stored: one per task and index, a special write
/// (negative index) the last given, an ordinary one the first.
fn stored_writes(writes: &[PendingWrite]) -> Vec<&PendingWrite> {
    let mut by: BTreeMap<(&str, i64), &PendingWrite> = BTreeMap::new();
    for w in writes {
        let key = (w.task_id.as_str(), w.idx);
        if w.is_special() {
            by.insert(key, w);
        } else {
            by.entry(key).or_insert(w);
        }
    }
    by.into_values().collect()
}

impl MongoSaver {
    /// Replaces one encoded record inside the transaction `s`.
    async fn replace_in(&self, s: &mut ClientSession, e: &Encoded<'_>) -> Result<()> {
        let op = "replace";
        let (thread, ns, id) = (
            e.t.config.thread_id.as_str(),
            e.t.config.checkpoint_ns.as_str(),
            e.t.checkpoint.id.as_str(),
        );
        let key = doc! { "thread_id": thread, "ns": ns, "checkpoint_id": id };
        let found = self
            .checkpoints()
            .find_one(key.clone())
            .projection(doc! { "parent_id": 1, "commit_order": 1 })
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        let Some(found) = found else {
            return Err(Error::CheckpointNotFound {
                thread_id: thread.to_owned(),
                checkpoint_ns: ns.to_owned(),
                checkpoint_id: id.to_owned(),
            });
        };
        let parent = found.get_str("parent_id").ok();
        let order = super::records::int(&found, "commit_order")
            .ok()
            .and_then(|o| u64::try_from(o).ok())
            .ok_or_else(|| Error::decode("a stored commit_order", "not a commit order"))?;
        check_identity(e.t, parent, order)?;
        let found: Vec<Document> = self
            .writes()
            .find(key.clone())
            .projection(doc! { "task_id": 1, "idx": 1 })
            .session(&mut *s)
            .await
            .map_err(storage(op))?
            .stream(&mut *s)
            .try_collect()
            .await
            .map_err(storage(op))?;
        let mut stored = Vec::with_capacity(found.len());
        for w in &found {
            let task = w
                .get_str("task_id")
                .map_err(|e| Error::decode("a stored MongoDB pending write (task_id)", e))?;
            let idx = super::records::int(w, "idx")
                .map_err(|e| Error::decode("a stored MongoDB pending write (idx)", e))?;
            stored.push((task.to_owned(), idx));
        }
        check_writes_unchanged(e.r, stored)?;
        self.checkpoints()
            .update_one(key.clone(), doc! { "$set": e.record.clone() })
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        self.writes()
            .delete_many(key)
            .session(&mut *s)
            .await
            .map_err(storage(op))?;
        if !e.writes.is_empty() {
            self.writes()
                .insert_many(e.writes.clone())
                .session(&mut *s)
                .await
                .map_err(storage(op))?;
        }
        // A copy of its writes taken for a lease holder's rollback holds
        // them as they were: it goes (a rollback would put them back).
        if ns.is_empty() {
            let copy = doc! { "thread_id": thread, "checkpoint_id": id };
            for coll in [self.base_writes_collection(), self.bases_collection()] {
                coll.delete_many(copy.clone())
                    .session(&mut *s)
                    .await
                    .map_err(storage(op))?;
            }
        }
        Ok(())
    }

    /// Replaces `encoded` in one transaction.
    async fn replace_txn(&self, encoded: &[Encoded<'_>]) -> Result<u64> {
        in_txn_retrying!(self, "replace", |s| {
            for e in encoded {
                self.replace_in(&mut s, e).await?;
            }
            Ok(encoded.len() as u64)
        })
    }
}

#[async_trait]
impl Rewrites for MongoSaver {
    async fn replace(&self, records: Vec<Replacement>) -> Result<u64> {
        // In a task of its own (its transaction: `detached`).
        self.detached("replace", move |me| async move {
            me.replace_records(records).await
        })
        .await
    }
}

impl MongoSaver {
    /// [`Rewrites::replace`], in the caller's task.
    async fn replace_records(&self, records: Vec<Replacement>) -> Result<u64> {
        crate::checkpoint::rewrites::check_distinct(&records)?;
        self.verify().await?;
        let mut encoded = Vec::with_capacity(records.len());
        for r in &records {
            let t = &r.record;
            let (id, metadata, parent) = checked_record(t)?;
            let (thread, ns) = (&t.config.thread_id, &t.config.checkpoint_ns);
            let mut record =
                self.checkpoint_doc(thread, ns, parent, &t.checkpoint, &metadata, t.commit_order)?;
            // The record keeps its place and the time it was stored.
            for k in ["stored_at", "commit_order", "parent_id"] {
                record.remove(k);
            }
            let writes = stored_writes(&t.pending_writes)
                .into_iter()
                .map(|w| self.write_doc(thread, ns, id, w))
                .collect::<Result<Vec<_>>>()?;
            encoded.push(Encoded {
                r,
                t,
                record,
                writes,
            });
        }
        let mut tries = 0;
        let out = loop {
            match self.replace_txn(&encoded).await {
                Err(e) if tries < CONFLICT_RETRIES && super::is_transient(&e) => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(u64::from(tries) * 10))
                        .await;
                }
                r => break r,
            }
        };
        for r in &records {
            self.state.note_deletion(&r.record.config.thread_id);
        }
        out
    }
}
