//! Batch and fork limits of the saver contract, checked before anything is written.

use super::types::{BatchEntry, WriteOp};
use crate::error::{Error, Result};

/// The most bytes of a thread id or a checkpoint namespace a saver stores:
/// a longer one is [`Error::LimitExceeded`] on
/// every saver, checked before anything is written (PostgreSQL's indexes
/// hold a key of at most about 2.7 KB, and a thread id, a namespace, a
/// checkpoint id and a task id make one key; an
/// [`AdapterSaver`](super::AdapterSaver)'s flow id, its thread id after a
/// 14-byte prefix, holds at most 1,024).
pub const MAX_ID_BYTES: usize = 1000;
/// The most bytes of a checkpoint id or a task id a saver stores (weaver
/// makes 36-byte ids), as [`MAX_ID_BYTES`].
pub const MAX_CHECKPOINT_ID_BYTES: usize = 128;

/// Most checkpoints one `put_many` batch may hold.
pub const BATCH_MAX_CHECKPOINTS: usize = 1_000;
/// Most pending writes one `put_many` batch may hold.
pub const BATCH_MAX_WRITES: usize = 10_000;
/// Most bytes (serialized JSON) one `put_many` batch may hold: its records,
/// their metadata and its pending writes.
pub const BATCH_MAX_BYTES: usize = 64 * 1024 * 1024;
/// Default bound of checkpoints copied by `fork_at`.
pub const FORK_DEFAULT_CHECKPOINTS: usize = 1_000;
/// Hard ceiling of checkpoints copied by `fork_at`.
pub const FORK_MAX_CHECKPOINTS: usize = 10_000;
/// Hard ceiling of bytes copied by `fork_at`.
pub const FORK_MAX_BYTES: usize = 64 * 1024 * 1024;

/// Bounds of a [`fork_at`](super::Saver::fork_at) copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForkOptions {
    /// At most this many checkpoints are copied in each namespace (the
    /// source's, and each subgraph's it copies) (default 1,000; ceiling
    /// 10,000).
    pub max_checkpoints: usize,
    /// At most this many bytes of serialized checkpoints and their pending
    /// writes are copied in each namespace, as [`record_size`] and
    /// [`write_size`] count them (ceiling 64 MiB).
    pub max_bytes: usize,
}

impl Default for ForkOptions {
    fn default() -> Self {
        ForkOptions {
            max_checkpoints: FORK_DEFAULT_CHECKPOINTS,
            max_bytes: FORK_MAX_BYTES,
        }
    }
}

impl ForkOptions {
    /// Sets the checkpoint count bound.
    pub fn max_checkpoints(mut self, n: usize) -> Self {
        self.max_checkpoints = n;
        self
    }

    /// Sets the byte bound.
    pub fn max_bytes(mut self, n: usize) -> Self {
        self.max_bytes = n;
        self
    }
}

fn exceeded(limit: &'static str, value: usize, ceiling: usize) -> Error {
    Error::LimitExceeded {
        limit,
        value: value as u64,
        ceiling: ceiling as u64,
    }
}

/// Checks a `put_many` batch against the contract's limits. The provided
/// [`put_many`](super::Saver::put_many) calls it before the backend sees the
/// batch, so an oversized batch writes nothing.
pub fn check_batch(entries: &[BatchEntry]) -> Result<()> {
    if entries.len() > BATCH_MAX_CHECKPOINTS {
        return Err(exceeded(
            "put_many checkpoints",
            entries.len(),
            BATCH_MAX_CHECKPOINTS,
        ));
    }
    let writes: usize = entries.iter().map(|e| e.writes.len()).sum();
    if writes > BATCH_MAX_WRITES {
        return Err(exceeded(
            "put_many pending writes",
            writes,
            BATCH_MAX_WRITES,
        ));
    }
    let mut bytes = 0usize;
    for e in entries {
        bytes += record_size(&e.checkpoint.checkpoint)?;
        bytes += json_size(&e.checkpoint.metadata)?;
        for w in &e.writes {
            bytes += write_size(w)?;
        }
        if bytes > BATCH_MAX_BYTES {
            return Err(exceeded("put_many bytes", bytes, BATCH_MAX_BYTES));
        }
    }
    Ok(())
}

/// Checks a [`put_ops`](super::Saver::put_ops) group holding more than one
/// checkpoint against `put_many`'s ceilings on checkpoints and pending
/// writes. Its bytes are limited per record, not as a whole: the engine
/// groups what queued up before anything is serialized, and cannot size a
/// group the way a caller of `put_many` can. A group with at most one
/// checkpoint (what the engine sends for a step: a task's writes and the
/// checkpoint after them) is a checkpoint and its writes, with the limits
/// of `put_checkpoint_with_writes`. The provided
/// [`put_ops`](super::Saver::put_ops) calls it before the backend sees the
/// group, so an oversized group writes nothing.
pub fn check_group(ops: &[WriteOp]) -> Result<()> {
    let (checkpoints, writes) = ops
        .iter()
        .map(op_counts)
        .fold((0, 0), |(c, w), (dc, dw)| (c + dc, w + dw));
    if checkpoints < 2 {
        return Ok(());
    }
    if checkpoints > BATCH_MAX_CHECKPOINTS {
        return Err(exceeded(
            "put_ops checkpoints",
            checkpoints,
            BATCH_MAX_CHECKPOINTS,
        ));
    }
    if writes > BATCH_MAX_WRITES {
        return Err(exceeded("put_ops pending writes", writes, BATCH_MAX_WRITES));
    }
    Ok(())
}

/// The checkpoints and pending writes `op` adds to a `put_ops` group.
fn op_counts(op: &WriteOp) -> (usize, usize) {
    match op {
        WriteOp::Put(_) => (1, 0),
        WriteOp::Writes(_, w) => (0, w.len()),
        WriteOp::Check(_) => (0, 0),
    }
}

/// The checkpoints and pending writes of a `put_ops` group being built, to
/// keep it within [`check_group`]'s ceilings.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct GroupCounts {
    checkpoints: usize,
    writes: usize,
}

impl GroupCounts {
    /// Counts `op` in, unless that would take the group past a ceiling
    /// (then returns `false` and counts nothing). The first op always fits.
    pub(crate) fn add(&mut self, op: &WriteOp) -> bool {
        let (checkpoints, writes) = op_counts(op);
        let next = GroupCounts {
            checkpoints: self.checkpoints + checkpoints,
            writes: self.writes + writes,
        };
        let empty = self.checkpoints == 0 && self.writes == 0;
        if !empty && (next.checkpoints > BATCH_MAX_CHECKPOINTS || next.writes > BATCH_MAX_WRITES) {
            return false;
        }
        *self = next;
        true
    }
}

/// What a [`fork_at`](super::Saver::fork_at) copy may still take: a saver
/// counts each checkpoint and write of the lineage in as it reads them, and
/// stops at the first that goes past its [`ForkOptions`]
/// ([`Error::LimitExceeded`]), before anything is written.
#[derive(Debug, Clone, Copy)]
pub struct ForkBudget {
    options: ForkOptions,
    checkpoints: usize,
    bytes: usize,
}

impl ForkBudget {
    /// An empty count against `options`.
    pub fn new(options: ForkOptions) -> Self {
        ForkBudget {
            options,
            checkpoints: 0,
            bytes: 0,
        }
    }

    /// Counts one more checkpoint of the lineage in.
    pub fn checkpoint(&mut self, record: &super::Checkpoint) -> Result<()> {
        if self.checkpoints == self.options.max_checkpoints {
            return Err(exceeded(
                "fork_at checkpoints",
                self.checkpoints + 1,
                self.options.max_checkpoints,
            ));
        }
        self.checkpoints += 1;
        self.add_bytes(record_size(record)?)
    }

    /// Counts `record` in again in place of what the checkpoints counted so
    /// far: a shallow copy writes one record, rebuilt in full.
    pub fn only(&mut self, record: &super::Checkpoint) -> Result<()> {
        self.checkpoints = 1;
        self.bytes = 0;
        self.add_bytes(record_size(record)?)
    }

    /// Counts one pending write of the lineage in.
    pub fn write(&mut self, write: &super::PendingWrite) -> Result<()> {
        self.add_bytes(write_size(write)?)
    }

    fn add_bytes(&mut self, n: usize) -> Result<()> {
        self.bytes = self.bytes.saturating_add(n);
        check_fork_bytes(self.bytes, self.options.max_bytes)
    }
}

/// Checks the bytes `fork_at` has counted so far (as [`record_size`] and
/// [`write_size`] count them) against its `max_bytes` option.
pub fn check_fork_bytes(bytes: usize, max_bytes: usize) -> Result<()> {
    if bytes > max_bytes {
        return Err(exceeded("fork_at bytes", bytes, max_bytes));
    }
    Ok(())
}

/// Checks `fork_at` options against the hard ceilings.
pub fn check_fork_options(max_checkpoints: usize, max_bytes: usize) -> Result<()> {
    if max_checkpoints > FORK_MAX_CHECKPOINTS {
        return Err(exceeded(
            "fork_at max_checkpoints",
            max_checkpoints,
            FORK_MAX_CHECKPOINTS,
        ));
    }
    if max_bytes > FORK_MAX_BYTES {
        return Err(exceeded("fork_at max_bytes", max_bytes, FORK_MAX_BYTES));
    }
    Ok(())
}

/// Serialized size of a checkpoint record, the unit the byte limits count.
pub fn record_size(record: &super::Checkpoint) -> Result<usize> {
    json_size(record)
}

/// Size of a pending write as the byte limits count it: its serialized
/// value, channel, task id and task path.
pub fn write_size(write: &super::PendingWrite) -> Result<usize> {
    Ok(
        json_size(&write.value)?
            + write.channel.len()
            + write.task_id.len()
            + write.task_path.len(),
    )
}

fn json_size<T: serde::Serialize + ?Sized>(value: &T) -> Result<usize> {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Counter(0);
    serde_json::to_writer(&mut c, value).map_err(|e| Error::encode("checkpoint", e))?;
    Ok(c.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{CheckpointRef, PendingWrite};

    fn writes(n: usize) -> WriteOp {
        let w = PendingWrite::for_task("t", "n", (0..n).map(|i| (format!("c{i}"), 0.into())));
        WriteOp::Writes(CheckpointRef::latest("t").at("c"), w)
    }

    fn put_op() -> WriteOp {
        let mut checkpoint = crate::checkpoint::Checkpoint::empty();
        checkpoint.id = "c".into();
        WriteOp::Put(crate::checkpoint::NewCheckpoint {
            thread_id: "t".into(),
            checkpoint_ns: String::new(),
            parent_id: None,
            checkpoint,
            metadata: crate::checkpoint::CheckpointMetadata::new(
                crate::checkpoint::CheckpointSource::Loop,
                0,
            ),
            commit_order: None,
        })
    }

    /// A saver whose writes check nothing: every call that reaches it is
    /// refused with a storage error, so a limit the provided methods did
    /// not check shows as that error instead of `LimitExceeded`.
    #[derive(Debug)]
    struct Unchecked;

    #[async_trait::async_trait]
    impl crate::checkpoint::Saver for Unchecked {
        async fn get_stored(
            &self,
            _: &CheckpointRef,
        ) -> Result<Option<crate::checkpoint::CheckpointTuple>> {
            Ok(None)
        }
        async fn list_stored(
            &self,
            _: &crate::checkpoint::ListFilter,
        ) -> Result<Vec<crate::checkpoint::CheckpointTuple>> {
            Ok(Vec::new())
        }
        async fn put_writes(&self, _: &CheckpointRef, _: Vec<PendingWrite>) -> Result<()> {
            Err(Error::storage("put_writes", "reached the backend"))
        }
        async fn put_checkpoint_with_writes(
            &self,
            _: crate::checkpoint::NewCheckpoint,
            _: Vec<PendingWrite>,
        ) -> Result<CheckpointRef> {
            Err(Error::storage("put", "reached the backend"))
        }
        async fn put_batch(&self, _: Vec<BatchEntry>) -> Result<Vec<CheckpointRef>> {
            Err(Error::storage("put_batch", "reached the backend"))
        }
        async fn fork_lineage(
            &self,
            _: &CheckpointRef,
            _: &str,
            _: ForkOptions,
        ) -> Result<CheckpointRef> {
            Err(Error::storage("fork_lineage", "reached the backend"))
        }
        async fn copy_thread(&self, _: &str, _: &str) -> Result<()> {
            Ok(())
        }
        async fn delete_thread(&self, _: &str) -> Result<()> {
            Ok(())
        }
        async fn prune(&self, _: &[String], _: crate::checkpoint::PruneStrategy) -> Result<u64> {
            Ok(0)
        }
        async fn list_threads(
            &self,
            _: Option<usize>,
            _: usize,
        ) -> Result<Vec<crate::checkpoint::ThreadInfo>> {
            Ok(Vec::new())
        }
    }

    fn exceeded_limit<T: std::fmt::Debug>(r: Result<T>) -> &'static str {
        match r {
            Err(Error::LimitExceeded { limit, .. }) => limit,
            other => panic!("expected LimitExceeded, got {other:?}"),
        }
    }

    /// The limits hold for a saver that implements only the required
    /// methods and checks nothing itself: the provided methods check them.
    #[test]
    fn the_provided_methods_check_the_limits_for_every_saver() {
        use crate::checkpoint::Saver;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let entries: Vec<BatchEntry> = (0..=BATCH_MAX_CHECKPOINTS)
                .map(|_| match put_op() {
                    WriteOp::Put(checkpoint) => BatchEntry {
                        checkpoint,
                        writes: Vec::new(),
                    },
                    _ => unreachable!(),
                })
                .collect();
            let r = Unchecked.put_many(entries).await;
            assert_eq!(exceeded_limit(r), "put_many checkpoints");
            let ops: Vec<WriteOp> = (0..=BATCH_MAX_CHECKPOINTS).map(|_| put_op()).collect();
            let r = Unchecked.put_ops(ops).await;
            assert_eq!(exceeded_limit(r), "put_ops checkpoints");
            let source = CheckpointRef::latest("t").at("c");
            let options = ForkOptions::default().max_checkpoints(FORK_MAX_CHECKPOINTS + 1);
            let r = Unchecked.fork_at(&source, "u", options).await;
            assert_eq!(exceeded_limit(r), "fork_at max_checkpoints");
            // Within the limits, each call reaches the backend.
            let r = Unchecked.put_many(vec![]).await;
            assert!(matches!(r, Err(Error::Storage { .. })), "{r:?}");
        });
    }

    #[test]
    fn a_fork_budget_counts_checkpoints_and_bytes() {
        let record = crate::checkpoint::Checkpoint::empty();
        let size = record_size(&record).unwrap();
        let mut b = ForkBudget::new(ForkOptions::default().max_checkpoints(2));
        b.checkpoint(&record).unwrap();
        b.checkpoint(&record).unwrap();
        let r = b.checkpoint(&record);
        assert!(
            matches!(
                r,
                Err(Error::LimitExceeded {
                    limit: "fork_at checkpoints",
                    value: 3,
                    ceiling: 2
                })
            ),
            "{r:?}"
        );
        let mut b = ForkBudget::new(ForkOptions::default().max_bytes(2 * size));
        b.checkpoint(&record).unwrap();
        b.checkpoint(&record).unwrap();
        // A shallow copy counts the one record it writes, not the lineage.
        b.only(&record).unwrap();
        b.checkpoint(&record).unwrap();
        let w = PendingWrite::for_task("t", "n", [("c".to_owned(), 0.into())]);
        let r = b.write(&w[0]);
        assert!(
            matches!(
                r,
                Err(Error::LimitExceeded {
                    limit: "fork_at bytes",
                    ..
                })
            ),
            "{r:?}"
        );
    }

    #[test]
    fn group_counts_stop_at_the_ceilings() {
        let mut c = GroupCounts::default();
        // The first op fits whatever it holds.
        assert!(c.add(&writes(BATCH_MAX_WRITES + 5)));
        assert!(!c.add(&writes(1)), "past the writes ceiling");
        let mut c = GroupCounts::default();
        assert!(c.add(&writes(BATCH_MAX_WRITES - 1)));
        assert!(c.add(&writes(1)), "at the ceiling");
        assert!(!c.add(&writes(1)));
        let put = put_op;
        let mut c = GroupCounts::default();
        for _ in 0..BATCH_MAX_CHECKPOINTS {
            assert!(c.add(&put()));
        }
        assert!(!c.add(&put()), "past the checkpoints ceiling");
        assert!(c.add(&writes(3)), "writes still fit");
    }
}
