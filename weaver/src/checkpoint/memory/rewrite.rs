//! [`Rewrites`] on the in-memory saver: records replaced under the write
//! lock, after every one of them was checked.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::super::rewrites::{
    Replacement, Rewrites, check_identity, check_writes_unchanged, record_id,
};
use super::super::text;
use super::super::types::{CheckpointMetadata, CheckpointTuple};
use super::{InMemorySaver, not_found};
use crate::error::Result;

#[async_trait]
impl Rewrites for InMemorySaver {
    async fn replace(&self, records: Vec<Replacement>) -> Result<u64> {
        crate::checkpoint::rewrites::check_distinct(&records)?;
        for t in records.iter().map(|r| &r.record) {
            text::check_ref(&t.config)?;
            text::check_writes(&t.pending_writes)?;
            record_id(t)?;
        }
        let mut threads = self.write();
        // Every record is checked before the first is replaced.
        for r in &records {
            let t = &r.record;
            let id = record_id(t)?;
            let log = threads
                .get(&t.config.thread_id)
                .and_then(|n| n.get(&t.config.checkpoint_ns));
            let Some((&order, stored)) =
                log.and_then(|l| l.by_id.get(id).and_then(|o| l.by_order.get_key_value(o)))
            else {
                return Err(not_found(&t.config, id));
            };
            check_identity(t, stored.parent_id.as_deref(), order)?;
            check_writes_unchanged(r, stored.writes.keys().cloned().collect())?;
        }
        let mut threads_done: Vec<String> = Vec::new();
        let count = records.len() as u64;
        for Replacement { record: t, .. } in records {
            let CheckpointTuple {
                config,
                checkpoint,
                mut metadata,
                pending_writes,
                ..
            } = t;
            text::strip_nul(&mut metadata);
            metadata
                .extra
                .retain(|k, _| !CheckpointMetadata::RESERVED.contains(&k.as_str()));
            let Some(stored) = threads
                .get_mut(&config.thread_id)
                .and_then(|n| n.get_mut(&config.checkpoint_ns))
                .and_then(|l| l.find_mut(&checkpoint.id))
            else {
                // Checked above, under the same lock.
                continue;
            };
            // A copy of its writes taken for a lease holder's rollback holds
            // them as they were: it goes (a rollback would put them back).
            if config.checkpoint_ns.is_empty()
                && let Some(c) = self.base_copies().get_mut(&config.thread_id)
            {
                c.remove(&checkpoint.id);
            }
            stored.checkpoint = checkpoint;
            stored.metadata = metadata;
            stored.writes = BTreeMap::new();
            stored.add_writes(pending_writes);
            if !threads_done.contains(&config.thread_id) {
                threads_done.push(config.thread_id);
            }
        }
        drop(threads);
        for thread in &threads_done {
            self.state.note_deletion(thread);
        }
        Ok(count)
    }
}
