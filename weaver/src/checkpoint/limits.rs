//! Batch and fork limits of the saver contract, checked before anything is written.

use super::types::{BatchEntry, WriteOp};
use crate::error::{Error, Result};

/// Most checkpoints one `put_many` batch may hold.
pub const BATCH_MAX_CHECKPOINTS: usize = 1_000;
/// Most pending writes one `put_many` batch may hold.
pub const BATCH_MAX_WRITES: usize = 10_000;
/// Most bytes (serialized JSON) one `put_many` batch may hold.
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
    /// At most this many checkpoints are copied (default 1,000; ceiling 10,000).
    pub max_checkpoints: usize,
    /// At most this many bytes of serialized checkpoints and their pending
    /// writes are copied, as [`record_size`] and
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

/// Checks a `put_many` batch against the contract's limits. Savers call it
/// first, so an oversized batch writes nothing.
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
/// of `put_checkpoint_with_writes`. Savers call it first, so an oversized
/// group writes nothing.
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
/// value, channel and task id.
pub fn write_size(write: &super::PendingWrite) -> Result<usize> {
    Ok(json_size(&write.value)? + write.channel.len() + write.task_id.len())
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
        let put = || {
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
        };
        let mut c = GroupCounts::default();
        for _ in 0..BATCH_MAX_CHECKPOINTS {
            assert!(c.add(&put()));
        }
        assert!(!c.add(&put()), "past the checkpoints ceiling");
        assert!(c.add(&writes(3)), "writes still fit");
    }
}
