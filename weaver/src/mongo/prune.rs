//! [`MongoSaver`]'s prune: which records go, the kept ones that lose their
//! parent rebuilt in full, all in one transaction.

use std::time::SystemTime;

use super::MongoSaver;
use super::records::Head;
use crate::checkpoint::{CheckpointRef, PruneStrategy, text};
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
