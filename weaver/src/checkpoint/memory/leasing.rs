//! [`Leases`] on the in-memory saver: a table in process memory, the
//! root namespace's head read and truncated under the saver's lock.

use async_trait::async_trait;

use super::super::lease::{
    self, Acquired, BaseCopy, LeaseInfo, LeaseRequest, Leases, Renewed, Stop,
};
use super::super::text;
use super::{BaseCopies, InMemorySaver, Log};
use crate::error::Result;

impl InMemorySaver {
    /// The head commit order of the thread's root namespace.
    pub(super) fn root_head(&self, thread_id: &str) -> u64 {
        self.read()
            .get(thread_id)
            .and_then(|n| n.get(""))
            .map_or(0, Log::head)
    }

    /// The copies of base writes, locked (after the threads, when both are).
    pub(super) fn base_copies(&self) -> std::sync::MutexGuard<'_, BaseCopies> {
        // Nothing panics while holding the lock.
        self.bases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Removes the root checkpoints of the thread above commit order
    /// `above`, with their writes, and puts back the copy of the writes of
    /// the checkpoint at `above` when one is kept; returns how many
    /// checkpoints went; `None` when the checkpoint at `above` is gone (a
    /// prune removed the turn's base: nothing before the turn is left to
    /// go back to, so the turn stays).
    pub(super) fn truncate_root(&self, thread_id: &str, above: u64) -> Option<u64> {
        let mut threads = self.write();
        let Some(log) = threads.get_mut(thread_id).and_then(|n| n.get_mut("")) else {
            return Some(0);
        };
        if above > 0 && !log.by_order.contains_key(&above) {
            return None;
        }
        let gone = log.by_order.split_off(&above.saturating_add(1));
        for stored in gone.values() {
            log.by_id.remove(&stored.checkpoint.id);
        }
        let mut restored = false;
        if let Some(base) = log.by_order.get_mut(&above)
            && let Some(copy) = self
                .base_copies()
                .get(thread_id)
                .and_then(|c| c.get(&base.checkpoint.id))
            && base.writes != *copy
        {
            base.writes = copy.clone();
            restored = true;
        }
        // A thread rolled back to nothing is no thread (as in SQL, where its
        // rows are gone): no empty namespace is left to count as one.
        if log.by_order.is_empty()
            && let Some(nss) = threads.get_mut(thread_id)
        {
            nss.remove("");
            if nss.is_empty() {
                threads.remove(thread_id);
            }
        }
        drop(threads);
        if !gone.is_empty() || restored {
            self.state.note_deletion(thread_id);
        }
        Some(gone.len() as u64)
    }

    /// Keeps the copies of base writes of `thread_id` as `copy` says, the
    /// new base at commit order `base`.
    fn copy_base(&self, thread_id: &str, copy: BaseCopy, base: u64) {
        let BaseCopy::Retake { also_keep } = copy else {
            return;
        };
        let threads = self.read();
        let log = threads.get(thread_id).and_then(|n| n.get(""));
        let at = |order: u64| log.and_then(|l| l.by_order.get(&order));
        let keep = also_keep.and_then(at).map(|s| s.checkpoint.id.clone());
        let mut copies = self.base_copies();
        let kept = copies.entry(thread_id.to_owned()).or_default();
        kept.retain(|id, _| keep.as_ref() == Some(id));
        if let Some(b) = at(base) {
            kept.entry(b.checkpoint.id.clone())
                .or_insert_with(|| b.writes.clone());
        }
        if kept.is_empty() {
            copies.remove(thread_id);
        }
    }
}

#[async_trait]
impl Leases for InMemorySaver {
    async fn acquire(&self, request: &LeaseRequest<'_>) -> Result<Acquired> {
        text::check_id("thread id", request.thread_id)?;
        lease::check_holder(request.holder)?;
        let thread = request.thread_id;
        self.leases.acquire(
            request,
            || self.root_head(thread),
            |above| self.truncate_root(thread, above).unwrap_or(0),
            |copy, base| self.copy_base(thread, copy, base),
        )
    }

    async fn renew(
        &self,
        thread_id: &str,
        holder: &str,
        lease: std::time::Duration,
    ) -> Result<Renewed> {
        self.leases.renew(thread_id, holder, lease)
    }

    async fn release(&self, thread_id: &str, holder: &str, stopped: Option<Stop>) -> Result<()> {
        self.leases.release(thread_id, holder, stopped);
        Ok(())
    }

    async fn request_stop(&self, thread_id: &str, holder: &str, stop: Stop) -> Result<()> {
        self.leases.request_stop(thread_id, holder, stop);
        Ok(())
    }

    async fn withdraw_stop(&self, thread_id: &str, holder: &str, stop: Stop) -> Result<()> {
        self.leases.withdraw_stop(thread_id, holder, stop);
        Ok(())
    }

    async fn leave_queue(&self, _thread_id: &str, ticket: i64) -> Result<()> {
        self.leases.leave_queue(ticket);
        Ok(())
    }

    async fn lease_info(&self, thread_id: &str) -> Result<Option<LeaseInfo>> {
        self.leases.info(thread_id)
    }

    async fn truncate(&self, thread_id: &str, holder: &str, above: u64) -> Result<u64> {
        self.leases
            .truncate_held(thread_id, holder, above, |above| {
                self.truncate_root(thread_id, above)
            })
    }

    async fn delete_held(&self, thread_id: &str, holder: &str) -> Result<()> {
        text::check_id("thread id", thread_id)?;
        self.leases.deleting_held(thread_id, holder, || {
            self.write().remove(thread_id);
            self.base_copies().remove(thread_id);
        })?;
        self.state.note_deletion(thread_id);
        Ok(())
    }
}
