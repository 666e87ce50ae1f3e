//! [`MongoSaver`]'s prune: which records go, the kept ones that lose their
//! parent rebuilt in full, all in one transaction.

use std::time::SystemTime;

use futures_util::TryStreamExt;
use mongodb::ClientSession;
use mongodb::bson::{Document, doc};

use super::records::Head;
use super::{MongoSaver, storage};
use crate::checkpoint::{CheckpointRef, CheckpointTuple, PruneStrategy, Saver, delta, text};
use crate::error::Result;

/// How many of `heads` (one namespace, oldest first) `keep` keeps at `now`.
fn kept(heads: &[&Head], keep: crate::checkpoint::Keep, now: SystemTime) -> usize {
    let young = keep.younger_than.map_or(0, |age| {
        let since = now.checked_sub(age).unwrap_or(std::time::UNIX_EPOCH);
        heads
            .iter()
            .position(|h| h.stored_at.to_system_time() > since)
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
    let mut rebuilt = Vec::new();
    let mut gone = Vec::new();
    for t in thread_ids {
        let heads = saver.heads(t).await?;
        let mut start = 0;
        while start < heads.len() {
            let ns = &heads[start].ns;
            let end = start + heads[start..].iter().take_while(|h| &h.ns == ns).count();
            let group: Vec<&Head> = heads[start..end].iter().collect();
            start = end;
            let n = kept(&group, keep, now);
            if group.len() <= n {
                continue;
            }
            let cut = group.len() - n;
            let (old, young) = group.split_at(cut);
            for h in young {
                let parent_kept = h
                    .parent_id
                    .as_ref()
                    .is_some_and(|p| young.iter().any(|y| &y.checkpoint_id == p));
                if parent_kept {
                    continue;
                }
                let target = CheckpointRef::latest(t.clone())
                    .ns(ns.clone())
                    .at(h.checkpoint_id.clone());
                if let Some(full) = saver.materialized(&target).await? {
                    rebuilt.push(full);
                }
            }
            let ids = old.iter().map(|h| h.checkpoint_id.clone()).collect();
            gone.push((t.clone(), ns.clone(), ids));
        }
    }
    saver.prune_txn(&rebuilt, &gone).await
}

impl MongoSaver {
    /// For prune: documents of `thread`, heads only, by namespace then
    /// commit order.
    pub(crate) async fn heads(&self, thread: &str) -> Result<Vec<Head>> {
        let docs = self
            .checkpoints()
            .find(doc! { "thread_id": thread })
            .projection(doc! { "payload": 0, "meta": 0, "metadata": 0 })
            .sort(doc! { "ns": 1, "commit_order": 1 })
            .await
            .map_err(storage("prune"))?
            .try_collect::<Vec<Document>>()
            .await
            .map_err(storage("prune"))?;
        docs.iter().map(Head::of).collect()
    }

    /// For prune: the stored record of `target`, rebuilt in full.
    pub(crate) async fn materialized(
        &self,
        target: &CheckpointRef,
    ) -> Result<Option<CheckpointTuple>> {
        let Some(t) = self.get_stored(target).await? else {
            return Ok(None);
        };
        if t.checkpoint.deltas.is_empty() {
            return Ok(None);
        }
        let count = delta::lineage_len(&t.checkpoint);
        let chain = self.lineage(target, count, None).await?;
        let full = delta::materialize(chain, count)?;
        Ok(Some(CheckpointTuple {
            checkpoint: full,
            ..t
        }))
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
        let filter = doc! { "thread_id": thread, "ns": ns, "checkpoint_id": { "$in": ids } };
        let gone = self
            .checkpoints()
            .delete_many(filter.clone())
            .session(&mut *s)
            .await
            .map_err(storage("prune"))?;
        self.writes()
            .delete_many(filter)
            .session(&mut *s)
            .await
            .map_err(storage("prune"))?;
        Ok(gone.deleted_count)
    }

    /// Runs prune's writes in one transaction.
    pub(crate) async fn prune_txn(
        &self,
        rebuilt: &[CheckpointTuple],
        gone: &[(String, String, Vec<String>)],
    ) -> Result<u64> {
        in_txn_retrying!(self, "prune", |s| {
            for t in rebuilt {
                self.rewrite(&mut s, t).await?;
            }
            let mut n = 0;
            for (thread, ns, ids) in gone {
                n += self.remove(&mut s, thread, ns, ids).await?;
            }
            Ok(n)
        })
    }

    /// For prune with [`PruneStrategy::Delete`]: deletes whole threads in
    /// one transaction; returns how many checkpoints went.
    pub(crate) async fn delete_threads(&self, thread_ids: &[String]) -> Result<u64> {
        let n = in_txn_retrying!(self, "prune", |s| {
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
        })?;
        for t in thread_ids {
            self.state.note_deletion(t);
        }
        Ok(n)
    }
}
