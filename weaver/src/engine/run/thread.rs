//! The run's side of the saver: what it stored of its thread, and storing
//! more (checkpoints compacted against the last one, task writes, answers).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::checkpoint::delta::{self, DeltaBase, compact};
use crate::checkpoint::{
    Checkpoint, CheckpointMetadata, CheckpointRef, NewCheckpoint, PendingWrite, WriteCheck,
};
use crate::config::Durability;
use crate::engine::cache::SnapshotCache;
use crate::engine::persist::{Answers, Writer};
use crate::engine::send::SENDS_CHANNEL;
use crate::engine::spec::INPUT_CHANNEL;
use crate::error::Result;
use crate::state::GraphState;

/// Where a run with a checkpointer stores its thread, and what it stored.
pub(crate) struct Thread<'g, S> {
    pub writer: Writer,
    /// The thread and namespace (no checkpoint id).
    pub at: CheckpointRef,
    /// The checkpoint the run stored last, or started from: the parent of
    /// the next one it stores. The run's current checkpoint is stored when
    /// it is this one.
    pub last_saved: Option<String>,
    /// The commit order the next checkpoint takes.
    pub next_order: u64,
    /// Writes not yet sent to the saver (`exit` durability, or writes to a
    /// checkpoint not stored yet).
    pub unsaved_writes: Vec<PendingWrite>,
    /// Under `exit` durability, the entries of effects run under explicit
    /// keys by tasks of checkpoints the run never stores: stored with the
    /// checkpoint the run stores at its end, so that a later task (of this
    /// run or another) finds them.
    pub keyed_effects: Vec<PendingWrite>,
    /// Under `exit` durability, the answers this run resumed with: stored,
    /// checked, with whatever the run stores at its end.
    pub unsaved_answers: Option<Answers>,
    /// The state's delta channels, when the saver stores them as deltas.
    pub delta_channels: Vec<&'static str>,
    /// The delta channels of the `last_saved` checkpoint, which the next
    /// stored checkpoint is compacted against.
    pub delta_base: Option<DeltaBase>,
    /// [`Checkpointer::deletions`] of the thread before it was read: the values
    /// this run caches are tagged with it, so none outlives a deletion of
    /// the thread during the run.
    pub epoch: u64,
    /// The graph's cache of decoded checkpoints: the run starts from the
    /// state it holds for the head, and leaves there the state it stored
    /// last.
    pub built: Option<&'g SnapshotCache<S>>,
}

impl<S: GraphState> Thread<'_, S> {
    /// Whether the checkpoint `id` is stored (the last one the run stored).
    pub fn is_saved(&self, id: &str) -> bool {
        self.last_saved.as_deref() == Some(id)
    }

    /// The next checkpoint of the thread, `checkpoint` compacted against
    /// the last one stored.
    fn record(
        &self,
        mut checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
    ) -> (NewCheckpoint, DeltaBase) {
        // The parent's values that compaction cuts off are dropped, not
        // cached: the next run on the thread starts from the typed state
        // the graph keeps (`remember`), and a cache entry per checkpoint
        // held a whole copy of each delta channel.
        let (base, _) = compact(
            &mut checkpoint,
            &self.delta_channels,
            self.delta_base.as_ref(),
        );
        let record = NewCheckpoint {
            thread_id: self.at.thread_id.clone(),
            checkpoint_ns: self.at.checkpoint_ns.clone(),
            parent_id: self.last_saved.clone(),
            checkpoint,
            metadata,
            commit_order: Some(self.next_order),
        };
        (record, base)
    }

    /// Notes that the checkpoint `id`, compacted against `base`, is stored.
    fn stored(&mut self, id: String, base: DeltaBase) {
        // Checked when loaded; a run that stored `u64::MAX` (a head tampered
        // to just below it) tries it again, which the saver refuses as taken.
        self.next_order = self.next_order.saturating_add(1);
        self.last_saved = Some(id);
        self.delta_base = Some(base);
    }

    /// Stores `checkpoint` as the thread's next commit, unless durability is
    /// `exit`; returns what the run keeps of it: once stored, its versions
    /// and any pending input, which is all the next step reads of it.
    pub async fn commit(
        &mut self,
        checkpoint: Checkpoint,
        metadata: impl FnOnce() -> CheckpointMetadata,
    ) -> Result<Checkpoint> {
        // Writes held for the checkpoint this one supersedes (never stored:
        // `exit` durability) are no one's pending writes any more.
        if self.writer.mode() == Durability::Exit {
            self.keyed_effects.extend(
                self.unsaved_writes
                    .drain(..)
                    .filter(crate::engine::effect::is_keyed_entry),
            );
            return Ok(checkpoint);
        }
        let mut kept = Checkpoint {
            v: checkpoint.v,
            id: checkpoint.id.clone(),
            ts: checkpoint.ts.clone(),
            channel_values: Map::new(),
            channel_versions: checkpoint.channel_versions.clone(),
            versions_seen: checkpoint.versions_seen.clone(),
            deltas: BTreeMap::new(),
        };
        // What the next step takes besides the state: a pending input, the
        // sends it runs.
        for channel in [INPUT_CHANNEL, SENDS_CHANNEL] {
            if let Some(v) = checkpoint.channel_values.get(channel) {
                kept.channel_values.insert(channel.to_owned(), v.clone());
            }
        }
        let (record, base) = self.record(checkpoint, metadata());
        self.writer.put(record).await?;
        self.stored(kept.id.clone(), base);
        self.unsaved_writes.clear();
        Ok(kept)
    }

    /// Stores whatever the run has not stored yet (`current`, if it is not
    /// stored, with `metadata`; held writes and answers), and waits for the
    /// saver.
    pub async fn finish(
        &mut self,
        current: &Checkpoint,
        metadata: impl FnOnce() -> CheckpointMetadata,
    ) -> Result<()> {
        let mut writes = std::mem::take(&mut self.unsaved_writes);
        writes.append(&mut self.keyed_effects);
        if !self.is_saved(&current.id) {
            let (record, base) = self.record(current.clone(), metadata());
            let answers = self.unsaved_answers.take();
            self.writer.put_final(answers, record, writes).await?;
            self.stored(current.id.clone(), base);
        } else if !writes.is_empty() {
            match self.unsaved_answers.take() {
                // The answers are among `writes`: they are stored together,
                // under the answers' checks.
                Some(answers) => {
                    let group = Answers { writes, ..answers }.into_group();
                    self.writer.put_ops_now(group).await?;
                }
                None => {
                    let target = self.at.at(current.id.clone());
                    self.writer.put_writes(target, writes).await?;
                }
            }
        }
        self.writer.flush().await
    }

    /// Leaves `state`, the values of the checkpoint `id`, in the graph's
    /// cache for the next run on the thread, once [`finish`](Self::finish)
    /// has stored everything: only when `id` is the checkpoint stored last,
    /// and the state has delta channels the saver stores as deltas (the next
    /// run reads any other head whole anyway, so it would not look).
    pub fn remember(&self, id: &str, state: &S) {
        if self.delta_channels.is_empty() || !self.is_saved(id) {
            return;
        }
        if let (Some(built), Some(base)) = (self.built, &self.delta_base) {
            let key = delta::key(&self.at.at(id.to_owned()));
            built.remember_stored(key, state, base.clone(), self.epoch);
        }
    }

    /// Stores writes of a task started from the checkpoint `current`, or
    /// keeps them for the end of the run (`exit` durability, or a checkpoint
    /// not stored yet). `with_next`: the step's last task, the step about
    /// to end with a checkpoint ([`Writer::put_writes_with_next`]).
    pub async fn store_writes(
        &mut self,
        current: &str,
        writes: Vec<PendingWrite>,
        with_next: bool,
    ) -> Result<()> {
        if self.writer.mode() == Durability::Exit || !self.is_saved(current) {
            self.unsaved_writes.extend(writes);
            return Ok(());
        }
        let target = self.at.at(current.to_owned());
        if with_next {
            self.writer.put_writes_with_next(target, writes).await
        } else {
            self.writer.put_writes(target, writes).await
        }
    }

    /// Stores the writes answering interrupts of the checkpoint `current`,
    /// provided the answers stored (`earlier`: each task's resume write as
    /// the run read it) are still what the run read: two runs resuming one
    /// pause both read it, and the second to store its answers gets
    /// [`Error::VersionConflict`](crate::Error::VersionConflict) instead of
    /// replacing the first's. Under `exit` durability they are stored, so
    /// checked, at the end of the run (with its last checkpoint, if it ends
    /// with one).
    pub async fn save_answers(
        &mut self,
        current: &str,
        earlier: Vec<((String, i64), Option<Value>)>,
        writes: Vec<PendingWrite>,
    ) -> Result<()> {
        let target = self.at.at(current.to_owned());
        let checks = earlier
            .into_iter()
            .map(|((task, idx), value)| WriteCheck::new(target.clone(), task, idx, value))
            .collect();
        let answers = Answers {
            checks,
            target,
            writes,
        };
        if self.writer.mode() == Durability::Exit {
            self.unsaved_writes.extend(answers.writes.iter().cloned());
            self.unsaved_answers = Some(answers);
            return Ok(());
        }
        self.writer.put_ops_now(answers.into_group()).await
    }
}
