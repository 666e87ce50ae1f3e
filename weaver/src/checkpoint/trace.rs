//! [`Traced`]: a saver whose every call runs in a `tracing` span, the same
//! for every backend.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use tracing::Instrument;

use super::limits::ForkOptions;
use super::saver::Saver;
use super::shared::SaverState;
use super::types::{
    BatchEntry, CheckpointRef, CheckpointTuple, LineageRequest, ListFilter, NewCheckpoint,
    PendingWrite, PruneStrategy, ThreadInfo, WriteOp,
};
use crate::error::Result;

/// Wraps a saver: each operation runs in a `weaver.saver` span with the
/// operation, the thread id (`*` for several) and the time it took, and a
/// failure is logged at debug level inside it. Nothing else changes: every
/// call goes to the inner saver's own method, provided or not.
#[derive(Debug, Clone)]
pub(crate) struct Traced(pub(crate) Arc<dyn Saver>);

async fn traced<T>(
    op: &'static str,
    thread_id: &str,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    let span = tracing::debug_span!(
        "weaver.saver",
        op,
        thread_id,
        elapsed_us = tracing::field::Empty
    );
    let started = Instant::now();
    let out = fut.instrument(span.clone()).await;
    span.record("elapsed_us", started.elapsed().as_micros() as u64);
    if let Err(e) = &out {
        tracing::debug!(parent: &span, error = %e, "saver operation failed");
    }
    out
}

/// The thread a listing names, `*` when it spans threads.
fn listed_thread(filter: &ListFilter) -> &str {
    filter.thread_id.as_deref().unwrap_or("*")
}

#[async_trait]
impl Saver for Traced {
    async fn get_tuple(&self, target: &CheckpointRef) -> Result<Option<CheckpointTuple>> {
        traced("get_tuple", &target.thread_id, self.0.get_tuple(target)).await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<CheckpointTuple>> {
        traced("list", listed_thread(filter), self.0.list(filter)).await
    }

    async fn get_stored(&self, target: &CheckpointRef) -> Result<Option<CheckpointTuple>> {
        traced("get_stored", &target.thread_id, self.0.get_stored(target)).await
    }

    async fn list_stored(&self, filter: &ListFilter) -> Result<Vec<CheckpointTuple>> {
        traced(
            "list_stored",
            listed_thread(filter),
            self.0.list_stored(filter),
        )
        .await
    }

    async fn put(&self, checkpoint: NewCheckpoint) -> Result<CheckpointRef> {
        let thread = checkpoint.thread_id.clone();
        traced("put", &thread, self.0.put(checkpoint)).await
    }

    async fn put_writes(&self, target: &CheckpointRef, writes: Vec<PendingWrite>) -> Result<()> {
        let put = self.0.put_writes(target, writes);
        traced("put_writes", &target.thread_id, put).await
    }

    async fn put_checkpoint_with_writes(
        &self,
        checkpoint: NewCheckpoint,
        writes: Vec<PendingWrite>,
    ) -> Result<CheckpointRef> {
        let thread = checkpoint.thread_id.clone();
        let put = self.0.put_checkpoint_with_writes(checkpoint, writes);
        traced("put_checkpoint_with_writes", &thread, put).await
    }

    async fn put_many(&self, entries: Vec<BatchEntry>) -> Result<Vec<CheckpointRef>> {
        traced("put_many", "*", self.0.put_many(entries)).await
    }

    async fn put_batch(&self, entries: Vec<BatchEntry>) -> Result<Vec<CheckpointRef>> {
        traced("put_many", "*", self.0.put_batch(entries)).await
    }

    async fn fork_at(
        &self,
        source: &CheckpointRef,
        target_thread: &str,
        options: ForkOptions,
    ) -> Result<CheckpointRef> {
        let fork = self.0.fork_at(source, target_thread, options);
        traced("fork_at", &source.thread_id, fork).await
    }

    async fn fork_lineage(
        &self,
        source: &CheckpointRef,
        target_thread: &str,
        options: ForkOptions,
    ) -> Result<CheckpointRef> {
        let fork = self.0.fork_lineage(source, target_thread, options);
        traced("fork_at", &source.thread_id, fork).await
    }

    async fn copy_thread(&self, source_thread: &str, target_thread: &str) -> Result<()> {
        let copy = self.0.copy_thread(source_thread, target_thread);
        traced("copy_thread", source_thread, copy).await
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        traced("delete_thread", thread_id, self.0.delete_thread(thread_id)).await
    }

    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<u64> {
        traced("prune", "*", self.0.prune(thread_ids, strategy)).await
    }

    async fn list_threads(&self, limit: Option<usize>, offset: usize) -> Result<Vec<ThreadInfo>> {
        traced("list_threads", "*", self.0.list_threads(limit, offset)).await
    }

    async fn thread_info(&self, thread_id: &str) -> Result<Option<ThreadInfo>> {
        traced("thread_info", thread_id, self.0.thread_info(thread_id)).await
    }

    async fn search_threads(
        &self,
        query: &super::fleet::ThreadQuery,
    ) -> Result<super::fleet::ThreadPage> {
        traced("search_threads", "*", self.0.search_threads(query)).await
    }

    async fn at_commit_order(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        commit_order: u64,
    ) -> Result<Option<CheckpointRef>> {
        let found = self
            .0
            .at_commit_order(thread_id, checkpoint_ns, commit_order);
        traced("at_commit_order", thread_id, found).await
    }

    async fn put_ops(&self, ops: Vec<WriteOp>) -> Result<()> {
        let Some(thread) = ops.first().map(|op| op.thread_id().to_owned()) else {
            return self.0.put_ops(ops).await;
        };
        traced("put_ops", &thread, self.0.put_ops(ops)).await
    }

    async fn put_group(&self, ops: Vec<WriteOp>) -> Result<()> {
        let Some(thread) = ops.first().map(|op| op.thread_id().to_owned()) else {
            return self.0.put_group(ops).await;
        };
        traced("put_ops", &thread, self.0.put_group(ops)).await
    }

    async fn lineage(
        &self,
        from: &CheckpointRef,
        count: usize,
        below: Option<u64>,
    ) -> Result<Vec<CheckpointTuple>> {
        let read = self.0.lineage(from, count, below);
        traced("lineage", &from.thread_id, read).await
    }

    async fn lineages(&self, requests: &[LineageRequest]) -> Result<Vec<Vec<CheckpointTuple>>> {
        let thread = match requests {
            [one] => one.from.thread_id.as_str(),
            _ => "*",
        };
        traced("lineages", thread, self.0.lineages(requests)).await
    }

    fn supports_deltas(&self) -> bool {
        self.0.supports_deltas()
    }

    fn is_in_process(&self) -> bool {
        self.0.is_in_process()
    }

    fn shared_state(&self) -> Option<Arc<SaverState>> {
        self.0.shared_state()
    }

    fn leases(&self) -> Option<&dyn super::lease::Leases> {
        self.0.leases()
    }

    fn rewrites(&self) -> Option<&dyn super::rewrites::Rewrites> {
        self.0.rewrites()
    }
}
