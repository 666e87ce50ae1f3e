//! Batch and fork limits of the saver contract, checked before anything is written.

use super::types::BatchEntry;
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
