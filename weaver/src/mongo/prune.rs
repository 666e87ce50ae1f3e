//! [`MongoSaver`]'s prune: which records go, the kept ones that lose their
//! parent rebuilt in full, all in one transaction.

use std::time::SystemTime;

use mongodb::ClientSession;
use mongodb::bson::doc;

use super::records::Head;
use super::{MongoSaver, storage};
use crate::checkpoint::{CheckpointTuple, DeletionNote, PruneStrategy, delta, text};
use crate::error::Result;

/// How many of `heads` (one namespace, oldest first) `keep` keeps at `now`.
fn kept(heads: &[&Head], keep: crate::checkpoint::Keep, now: SystemTime) -> usize {
    let young = keep.younger_than.map_or(0, |age| {
        let since = now.checked_sub(age).unwrap_or(std::time::UNIX_EPOCH);
        // Compared as milliseconds since the epoch: a stored time the
        // platform's clock cannot hold is no panic.
        let since = since
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        heads
            .iter()
            .position(|h| h.stored_at.timestamp_millis() > since)
            .map_or(0, |first| heads.len() - first)
    });
    keep.newest.max(young)
}

pub(crate) async fn prune(
    saver: &MongoSaver,
    thread_ids: &[String],
    strategy: PruneStrategy,
) -> Result<u64> {
    let keep = strategy.keep()?;
    for t in thread_ids {
        text::check_id("thread id", t)?;
    }
    saver.verify().await?;
    let Some(keep) = keep else {
        return saver.delete_threads(thread_ids).await;
    };
    let now = SystemTime::now();
    // What goes and what is rebuilt is read inside the transaction that
    // writes it, and read again when it runs again: a checkpoint stored on
    // a record this prune removes (a fork) meets it there (the put writes
    // its parent's document), so the prune runs again and sees the fork,
    // or the fork fails for want of its parent.
    in_txn_retrying!(saver, "prune", |s| {
        let mut n = 0;
        for t in thread_ids {
            n += saver.prune_thread(&mut s, t, keep, now).await?;
        }
        Ok(n)
    })
}

impl MongoSaver {
    /// For prune, inside `s`: documents of `thread`, heads only, by
    /// namespace then commit order.
    async fn heads_in(&self, s: &mut ClientSession, thread: &str) -> Result<Vec<Head>> {
        let cursor = self
            .checkpoints()
            .find(doc! { "thread_id": thread })
            .projection(doc! { "payload": 0, "meta": 0, "metadata": 0 })
            .sort(doc! { "ns": 1, "commit_order": 1 })
            .session(&mut *s)
            .await
            .map_err(storage("prune"))?;
        let docs = super::drain(&mut *s, cursor, "prune").await?;
        docs.iter().map(Head::of).collect()
    }

    /// For prune, inside `s`: the stored record `id` of `thread`/`ns`,
    /// decoded (a record that does not decode is [`Error::Decode`], so a
    /// prune never keeps a corrupt record), without its writes.
    async fn record_in(
        &self,
        s: &mut ClientSession,
        thread: &str,
        ns: &str,
        id: &str,
    ) -> Result<Option<CheckpointTuple>> {
        let found = self
            .checkpoints()
            .find_one(doc! { "thread_id": thread, "ns": ns, "checkpoint_id": id })
            .session(&mut *s)
            .await
            .map_err(storage("prune"))?;
        found.map(|d| self.decode_checkpoint(&d)).transpose()
    }

    /// Prunes one thread inside `s`: each namespace's oldest records go,
    /// every kept one is read (and must decode), and a kept one whose
    /// parent goes is rebuilt in full. Returns how many went.
    async fn prune_thread(
        &self,
        s: &mut ClientSession,
        thread: &str,
        keep: crate::checkpoint::Keep,
        now: SystemTime,
    ) -> Result<u64> {
        let heads = self.heads_in(s, thread).await?;
        let mut n = 0;
        let mut start = 0;
        while start < heads.len() {
            let ns = &heads[start].ns;
            let end = start + heads[start..].iter().take_while(|h| &h.ns == ns).count();
            let group: Vec<&Head> = heads[start..end].iter().collect();
            start = end;
            let kept_n = kept(&group, keep, now);
            if group.len() <= kept_n {
                continue;
            }
            let (old, young) = group.split_at(group.len() - kept_n);
            for h in young {
                let Some(t) = self.record_in(s, thread, ns, &h.checkpoint_id).await? else {
                    continue;
                };
                let parent_kept = h
                    .parent_id
                    .as_ref()
                    .is_some_and(|p| young.iter().any(|y| &y.checkpoint_id == p));
                if parent_kept || t.checkpoint.deltas.is_empty() {
                    continue;
                }
                let count = delta::lineage_len(&t.checkpoint);
                let mut chain = Vec::with_capacity(count);
                let mut parent = t
                    .parent_config
                    .as_ref()
                    .and_then(|p| p.checkpoint_id.clone());
                chain.push(t);
                while chain.len() < count {
                    let Some(id) = parent else { break };
                    let Some(p) = self.record_in(s, thread, ns, &id).await? else {
                        break;
                    };
                    parent = p
                        .parent_config
                        .as_ref()
                        .and_then(|p| p.checkpoint_id.clone());
                    chain.push(p);
                }
                let full = delta::materialize(chain.clone(), count)?;
                let Some(first) = chain.into_iter().next() else {
                    continue;
                };
                let rebuilt = CheckpointTuple {
                    checkpoint: full,
                    ..first
                };
                self.rewrite(s, &rebuilt).await?;
            }
            let ids: Vec<String> = old.iter().map(|h| h.checkpoint_id.clone()).collect();
            n += self.remove(s, thread, ns, &ids).await?;
        }
        Ok(n)
    }

    /// For prune, in its transaction: rewrites `t` in place (same commit
    /// order and time) and deletes `gone` of `thread`/`ns`.
    pub(crate) async fn rewrite(&self, s: &mut ClientSession, t: &CheckpointTuple) -> Result<()> {
        let thread = &t.config.thread_id;
        let ns = &t.config.checkpoint_ns;
        let parent = t
            .parent_config
            .as_ref()
            .and_then(|p| p.checkpoint_id.as_deref());
        let mut d = self.checkpoint_doc(
            thread,
            ns,
            parent,
            &t.checkpoint,
            &t.metadata,
            t.commit_order,
        )?;
        // The record keeps the time it was stored.
        d.remove("stored_at");
        self.checkpoints()
            .update_one(
                doc! { "thread_id": thread, "ns": ns, "checkpoint_id": &t.checkpoint.id },
                doc! { "$set": d },
            )
            .session(&mut *s)
            .await
            .map_err(storage("prune"))?;
        Ok(())
    }

    /// For prune, in its transaction: deletes checkpoints `ids` of
    /// `thread`/`ns` and their writes; returns how many went.
    pub(crate) async fn remove(
        &self,
        s: &mut ClientSession,
        thread: &str,
        ns: &str,
        ids: &[String],
    ) -> Result<u64> {
        let mut gone = 0;
        // In chunks: a filter is one document, 16 MB at most, and a long
        // thread's ids would not fit in one.
        for chunk in ids.chunks(super::WRITES_PER_QUERY) {
            let filter = doc! { "thread_id": thread, "ns": ns, "checkpoint_id": { "$in": chunk } };
            gone += self
                .checkpoints()
                .delete_many(filter.clone())
                .session(&mut *s)
                .await
                .map_err(storage("prune"))?
                .deleted_count;
            self.writes()
                .delete_many(filter)
                .session(&mut *s)
                .await
                .map_err(storage("prune"))?;
        }
        Ok(gone)
    }

    /// For prune with [`PruneStrategy::Delete`]: deletes whole threads in
    /// one transaction; returns how many checkpoints went.
    pub(crate) async fn delete_threads(&self, thread_ids: &[String]) -> Result<u64> {
        let _deleted = DeletionNote(&self.state, thread_ids);
        in_txn_retrying!(self, "prune", |s| {
            self.forget_holders(&mut s, thread_ids, "prune").await?;
            let gone = self
                .checkpoints()
                .delete_many(doc! { "thread_id": { "$in": thread_ids } })
                .session(&mut s)
                .await
                .map_err(storage("prune"))?;
            self.writes()
                .delete_many(doc! { "thread_id": { "$in": thread_ids } })
                .session(&mut s)
                .await
                .map_err(storage("prune"))?;
            Ok(gone.deleted_count)
        })
    }
}
