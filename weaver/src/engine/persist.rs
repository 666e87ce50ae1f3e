//! Durability: when the engine's checkpoint and write operations reach the saver.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::checkpoint::facade::Flight;
use crate::checkpoint::{
    CheckpointRef, Checkpointer, NewCheckpoint, PendingWrite, WriteCheck, WriteOp, limits,
};
use crate::config::Durability;
use crate::error::{Error, Result};

/// Writes answering interrupts of checkpoint `target`, and the checks that
/// the answers stored before them are what the run read
/// ([`WriteCheck`]): a run resuming a pause another run has answered
/// meanwhile stores nothing.
pub(crate) struct Answers {
    pub checks: Vec<WriteCheck>,
    pub target: CheckpointRef,
    pub writes: Vec<PendingWrite>,
}

impl Answers {
    /// The group storing the writes to `target` under the checks.
    pub fn into_group(self) -> Vec<WriteOp> {
        let mut ops: Vec<WriteOp> = self.checks.into_iter().map(WriteOp::Check).collect();
        ops.push(WriteOp::Writes(self.target, self.writes));
        ops
    }
}

/// Sends saver operations in order: awaited at once (`sync`), or queued to a
/// background task (`async`) that sends whatever has queued up as one
/// [`put_ops`](crate::Saver::put_ops) group (a group commit: a slow disk
/// costs one sync per group, not one per checkpoint). In `exit` mode the
/// engine stores only the final checkpoint, through [`Writer::put_final`].
///
/// In `sync` mode, on a saver that does I/O, the writes of a step's last
/// task are held ([`Writer::put_writes_with_next`]) and stored in one group
/// with the checkpoint the step ends with: nothing runs between the two, so
/// one commit does the work of two. If that group fails, the writes are
/// stored on their own before the error is returned, as they would have been,
/// unless it lost a race ([`Error::VersionConflict`](crate::Error::VersionConflict)):
/// the thread went on past their checkpoint without them. A run that must
/// not share its writes before its checkpoint lands (one expecting a head:
/// a chat turn) writes in line and holds them on every saver, in-process
/// ones too, so that a racing run never takes them in as its own.
/// Likewise a failed `async` group is stored op by op up to the failing one
/// ([`store_group`]).
pub(crate) struct Writer {
    cp: Checkpointer,
    mode: Durability,
    background: Option<Background>,
    held: Option<(CheckpointRef, Vec<PendingWrite>)>,
    /// Hold a step's last writes for its checkpoint on in-process savers too.
    hold_always: bool,
}

/// The `async` mode's queue and the task draining it, registered with the
/// checkpointer as a flight of the run's thread (reads of the thread wait
/// until what is queued has landed).
struct Background {
    queue: mpsc::UnboundedSender<WriteOp>,
    flight: Arc<Flight>,
    task: JoinHandle<Result<()>>,
}

impl Background {
    fn start(cp: Checkpointer, thread: &str) -> Self {
        let (queue, mut rx) = mpsc::unbounded_channel::<WriteOp>();
        let guard = cp.take_off(thread);
        let flight = guard.flight().clone();
        let thread = thread.to_owned();
        let task = tokio::spawn(async move {
            let _guard = guard;
            let mut failed: Option<Error> = None;
            // An op that would take a group past the saver's ceilings
            // (checkpoints, writes) starts the next group.
            let mut next: Option<WriteOp> = None;
            loop {
                let op = match next.take() {
                    Some(op) => op,
                    None => match rx.recv().await {
                        Some(op) => op,
                        None => break,
                    },
                };
                let mut counts = limits::GroupCounts::default();
                counts.add(&op);
                let mut group = vec![op];
                while let Ok(more) = rx.try_recv() {
                    if !counts.add(&more) {
                        next = Some(more);
                        break;
                    }
                    group.push(more);
                }
                let n = group.len();
                // After a failure nothing more is written: later ops build
                // on what failed. The first error is the run's.
                if failed.is_none() {
                    failed = store_group(&cp, group).await.err();
                    if let Some(e) = &failed {
                        // Told here too: a run dropped before its end (its
                        // stream) has no one to return it to.
                        tracing::warn!(
                            thread_id = %thread,
                            error = %e,
                            "a background checkpoint write failed: it and what the run queued after it are not stored"
                        );
                        _guard.flight().fail();
                    }
                }
                _guard.flight().landed(n);
            }
            failed.map_or(Ok(()), Err)
        });
        Background {
            queue,
            flight,
            task,
        }
    }
}

/// Stores `group` as one [`put_ops`](crate::Saver::put_ops) group. If that
/// fails, the ops before the failing one are stored one by one: a task's
/// writes queued beside a checkpoint the saver refuses (too large, say) are
/// kept, so resuming does not run the task again. A group that lost the
/// race ([`Error::VersionConflict`]) keeps nothing, as in `sync` mode: the
/// thread went on past its checkpoints. Returns the failing op's error.
///
/// A group whose payload is large (a state of many megabytes) is stored
/// one op at a time from the start, as `sync` mode stores it: the copy the
/// fallback needs would double the memory the run holds (each checkpoint
/// of a large state is itself that large), for a commit saved that is
/// small beside writing the payload.
async fn store_group(cp: &Checkpointer, group: Vec<WriteOp>) -> Result<()> {
    if group.len() == 1 {
        return cp.put_ops(group).await;
    }
    let small = group
        .iter()
        .try_fold(0usize, |sum, op| {
            let sum = sum.saturating_add(op_bytes(op, LARGE_GROUP_BYTES));
            (sum < LARGE_GROUP_BYTES).then_some(sum)
        })
        .is_some();
    if small {
        match cp.put_ops(group.clone()).await {
            Ok(()) => return Ok(()),
            Err(e @ Error::VersionConflict { .. }) => return Err(e),
            Err(_) => {}
        }
    }
    // Each op alone: stops at the failing one. If none fails (the group's
    // failure went away), everything is stored and the run goes on.
    for op in group {
        let WriteOp::Put(c) = op else {
            cp.put_ops(vec![op]).await?;
            continue;
        };
        let at = CheckpointRef {
            thread_id: c.thread_id.clone(),
            checkpoint_ns: c.checkpoint_ns.clone(),
            checkpoint_id: Some(c.checkpoint.id.clone()),
        };
        match cp.put_ops(vec![WriteOp::Put(c)]).await {
            // The group may have been stored before its failure was told
            // (a reply lost after the commit): its own checkpoint found in
            // place is no conflict.
            Err(e @ Error::VersionConflict { .. }) if small => {
                if !matches!(cp.saver().get_stored(&at).await, Ok(Some(_))) {
                    return Err(e);
                }
            }
            r => r?,
        }
    }
    Ok(())
}

/// `Ok` when the checkpoint `at` a write failed with `error` to store is
/// stored all the same (a reply lost after the commit: the saver reported
/// a storage error); `error` otherwise. A conflict is never such a case.
async fn stored_anyway(cp: &Checkpointer, at: &CheckpointRef, error: Error) -> Result<()> {
    if matches!(error, Error::VersionConflict { .. }) {
        return Err(error);
    }
    match cp.saver().get_stored(at).await {
        Ok(Some(_)) => Ok(()),
        _ => Err(error),
    }
}

/// The payload size from which a background group is stored op by op.
const LARGE_GROUP_BYTES: usize = 4 * 1024 * 1024;

/// About how many bytes `op`'s payload takes as JSON (strings by their
/// length, every other value by a few bytes), counted up to `cap`.
fn op_bytes(op: &WriteOp, cap: usize) -> usize {
    match op {
        WriteOp::Put(c) => c
            .checkpoint
            .channel_values
            .values()
            .fold(0, |sum, v| sum.saturating_add(value_bytes(v, cap))),
        WriteOp::Writes(_, writes) => writes
            .iter()
            .fold(0, |sum, w| sum.saturating_add(value_bytes(&w.value, cap))),
        WriteOp::Check(_) => 0,
    }
}

/// About how many bytes `value` takes as JSON, counted up to `cap` (walked
/// without recursion, so any nesting is fine).
fn value_bytes(value: &serde_json::Value, cap: usize) -> usize {
    use serde_json::Value;
    let mut sum = 0usize;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        if sum >= cap {
            break;
        }
        sum = sum.saturating_add(match v {
            Value::String(s) => s.len() + 2,
            Value::Array(items) => {
                stack.extend(items);
                2
            }
            Value::Object(map) => {
                for (k, v) in map {
                    sum = sum.saturating_add(k.len() + 4);
                    stack.push(v);
                }
                2
            }
            _ => 8,
        });
    }
    sum
}

impl Writer {
    /// The checkpointer written to.
    pub fn checkpointer(&self) -> &Checkpointer {
        &self.cp
    }

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
            background: None,
            held: None,
            hold_always: false,
        }
    }

    /// Holds a step's last writes for their checkpoint's group whatever the
    /// saver, writing in line (`async` taken as `sync`): see the type's docs.
    pub fn holding_always(mut self, hold: bool) -> Self {
        self.hold_always = hold;
        if hold && self.mode == Durability::Async {
            self.mode = Durability::Sync;
        }
        self
    }

    /// The `async` mode's flight, once anything was queued: what a task
    /// waits on before an effect, whose key comes from a checkpoint that
    /// may still be queued.
    pub fn flight(&self) -> Option<Arc<Flight>> {
        self.background.as_ref().map(|b| b.flight.clone())
    }

    /// Whether the `async` mode's writer gave up after a failed write.
    pub fn failed(&self) -> bool {
        self.background
            .as_ref()
            .is_some_and(|b| b.flight.has_failed())
    }

    pub fn mode(&self) -> Durability {
        self.mode
    }

    async fn send(&mut self, op: WriteOp) -> Result<()> {
        if self.mode == Durability::Async {
            let cp = &self.cp;
            let background = self
                .background
                .get_or_insert_with(|| Background::start(cp.clone(), op.thread_id()));
            // A send fails only if the task is gone (it panicked); `flush`
            // reports that from its join handle.
            background.flight.queued(1);
            if background.queue.send(op).is_err() {
                background.flight.landed(1);
            }
            return Ok(());
        }
        match op {
            WriteOp::Put(c) => {
                let at = c.config();
                match self.held.take() {
                    None => match self.cp.put(c).await {
                        Ok(_) => Ok(()),
                        Err(e) => stored_anyway(&self.cp, &at, e).await,
                    },
                    Some((target, writes)) => {
                        let group = vec![
                            WriteOp::Writes(target.clone(), writes.clone()),
                            WriteOp::Put(c),
                        ];
                        match self.cp.put_ops(group).await {
                            Ok(()) => Ok(()),
                            Err(e @ Error::VersionConflict { .. }) => Err(e),
                            Err(e) => {
                                // Keep the task's writes, as storing them
                                // first would have; the run reports the
                                // group's error, unless the group was
                                // stored after all.
                                let _ = self.cp.put_writes(&target, writes).await;
                                stored_anyway(&self.cp, &at, e).await
                            }
                        }
                    }
                }
            }
            WriteOp::Writes(target, w) => {
                self.release().await?;
                self.cp.put_writes(&target, w).await
            }
            check @ WriteOp::Check(_) => self.put_ops_now(vec![check]).await,
        }
    }

    /// Stores `ops` as one group, now, after everything issued before it,
    /// in any mode: a group with a [`WriteCheck`]
    /// must be known to hold before the run goes on.
    pub async fn put_ops_now(&mut self, ops: Vec<WriteOp>) -> Result<()> {
        self.flush().await?;
        self.cp.put_ops(ops).await
    }

    /// Stores the held writes, if any, on their own.
    async fn release(&mut self) -> Result<()> {
        match self.held.take() {
            Some((target, writes)) => self.cp.put_writes(&target, writes).await,
            None => Ok(()),
        }
    }

    /// Stores a checkpoint (not in `exit` mode).
    pub async fn put(&mut self, checkpoint: NewCheckpoint) -> Result<()> {
        self.send(WriteOp::Put(checkpoint)).await
    }

    /// Stores the writes of a step's last task, when the step is to end with
    /// a checkpoint: `sync` mode on a saver that does I/O holds them for that
    /// checkpoint's commit (any later operation, or [`flush`](Writer::flush),
    /// stores them); otherwise as [`put_writes`](Writer::put_writes). An
    /// in-process saver has no commit to save, and holding would cost a copy
    /// of the writes (kept in case the group fails).
    pub async fn put_writes_with_next(
        &mut self,
        target: CheckpointRef,
        writes: Vec<PendingWrite>,
    ) -> Result<()> {
        if self.mode != Durability::Sync || (self.cp.saver().is_in_process() && !self.hold_always) {
            return self.put_writes(target, writes).await;
        }
        self.release().await?;
        self.held = Some((target, writes));
        Ok(())
    }

    /// Stores pending writes of a stored checkpoint (not in `exit` mode).
    pub async fn put_writes(
        &mut self,
        target: CheckpointRef,
        writes: Vec<PendingWrite>,
    ) -> Result<()> {
        self.send(WriteOp::Writes(target, writes)).await
    }

    /// Stores a checkpoint with its writes atomically, after everything
    /// queued before it (used when the run stops with a checkpoint not yet
    /// stored: `exit` mode). `answers`: the checks and writes of the answers
    /// the run resumed with, stored to their checkpoint in the same group.
    pub async fn put_final(
        &mut self,
        answers: Option<Answers>,
        checkpoint: NewCheckpoint,
        writes: Vec<PendingWrite>,
    ) -> Result<()> {
        self.flush().await?;
        let stored_at = checkpoint.config();
        let kept = writes.clone();
        let stored = match answers {
            None => self
                .cp
                .put_checkpoint_with_writes(checkpoint, writes)
                .await
                .map(drop),
            Some(answers) => {
                let mut ops = answers.into_group();
                ops.push(WriteOp::Put(checkpoint));
                if !writes.is_empty() {
                    ops.push(WriteOp::Writes(stored_at.clone(), writes));
                }
                self.cp.put_ops(ops).await
            }
        };
        match stored {
            Ok(()) => Ok(()),
            Err(e) => {
                stored_anyway(&self.cp, &stored_at, e).await?;
                // Stored after all: its writes too (again, for a saver that
                // stores a group op by op; a write stored twice is one).
                self.cp.put_writes(&stored_at, kept).await
            }
        }
    }

    /// Waits until every operation issued has reached the saver; returns the
    /// first failure.
    pub async fn flush(&mut self) -> Result<()> {
        self.release().await?;
        let Some(Background { queue, task, .. }) = self.background.take() else {
            return Ok(());
        };
        drop(queue);
        match task.await {
            Ok(r) => r,
            Err(e) => Err(Error::storage("background checkpoint write", e)),
        }
    }
}
