//! Durability: when the engine's checkpoint and write operations reach the saver.

use tokio::task::JoinHandle;

use crate::checkpoint::{CheckpointRef, Checkpointer, NewCheckpoint, PendingWrite};
use crate::config::Durability;
use crate::error::{Error, Result};

enum Op {
    Put(NewCheckpoint),
    PutWithWrites(NewCheckpoint, Vec<PendingWrite>),
    Writes(CheckpointRef, Vec<PendingWrite>),
}

impl Op {
    async fn apply(self, cp: &Checkpointer) -> Result<()> {
        match self {
            Op::Put(c) => cp.put(c).await.map(drop),
            Op::PutWithWrites(c, w) => cp.put_checkpoint_with_writes(c, w).await.map(drop),
            Op::Writes(target, w) => cp.put_writes(&target, w).await,
        }
    }
}

/// Sends saver operations in order: awaited at once (`sync`), chained in
/// background tasks (`async`), or not at all until the end (`exit`, where
/// the engine stores only the final checkpoint through [`Writer::put_final`]).
pub(crate) struct Writer {
    cp: Checkpointer,
    mode: Durability,
    /// The last background operation; each one awaits its predecessor, so
    /// operations reach the saver in the order issued.
    tail: Option<JoinHandle<Result<()>>>,
}

impl Writer {
    pub fn new(cp: Checkpointer, mode: Durability) -> Self {
        // Background writes need a tokio runtime, and pay off only when the
        // saver does I/O; otherwise write in line.
        let mode = match mode {
            Durability::Async
                if cp.saver().is_in_process() || tokio::runtime::Handle::try_current().is_err() =>
            {
                Durability::Sync
            }
            m => m,
        };
        Writer {
            cp,
            mode,
            tail: None,
        }
    }

    pub fn mode(&self) -> Durability {
        self.mode
    }

    async fn send(&mut self, op: Op) -> Result<()> {
        match self.mode {
            Durability::Async => {
                let prev = self.tail.take();
                let cp = self.cp.clone();
                self.tail = Some(tokio::spawn(async move {
                    if let Some(prev) = prev {
                        join(prev).await?;
                    }
                    op.apply(&cp).await
                }));
                Ok(())
            }
            _ => op.apply(&self.cp).await,
        }
    }

    /// Stores a checkpoint (not in `exit` mode).
    pub async fn put(&mut self, checkpoint: NewCheckpoint) -> Result<()> {
        self.send(Op::Put(checkpoint)).await
    }

    /// Stores pending writes of a stored checkpoint (not in `exit` mode).
    pub async fn put_writes(
        &mut self,
        target: CheckpointRef,
        writes: Vec<PendingWrite>,
    ) -> Result<()> {
        self.send(Op::Writes(target, writes)).await
    }

    /// Stores a checkpoint with its writes atomically (used by `exit` mode
    /// when the run stops).
    pub async fn put_final(
        &mut self,
        checkpoint: NewCheckpoint,
        writes: Vec<PendingWrite>,
    ) -> Result<()> {
        self.send(Op::PutWithWrites(checkpoint, writes)).await
    }

    /// Waits until every operation issued has reached the saver; returns the
    /// first failure.
    pub async fn flush(&mut self) -> Result<()> {
        match self.tail.take() {
            Some(h) => join(h).await,
            None => Ok(()),
        }
    }
}

async fn join(handle: JoinHandle<Result<()>>) -> Result<()> {
    match handle.await {
        Ok(r) => r,
        Err(e) => Err(Error::storage("background checkpoint write", e)),
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // A run dropped mid-way (its future cancelled) leaves queued writes
        // to finish in the background: they are complete records, and
        // aborting would only lose them.
        self.tail.take();
    }
}
