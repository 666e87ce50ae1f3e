//! [`Rewrites`]: replacing stored checkpoint records in place, keeping
//! their identity (what a state upgrade of stored data needs).

use std::fmt::Debug;

use async_trait::async_trait;

use super::types::CheckpointTuple;
use crate::error::{Error, Result};

/// In-place replacement of stored checkpoints, for tools that rewrite
/// stored data in a new form (`weaver::evolution::upgrade_stored`).
///
/// A replaced checkpoint keeps its identity: its thread, namespace and id,
/// its parent, its commit order, and the time it was stored. What changes
/// is its record (channel values, versions, delta channels), its metadata
/// and its pending writes. A successor checkpoint would not do: a new id
/// changes the ids of the tasks and interrupts derived from it, which
/// answers to a paused thread are keyed by.
///
/// Reached through [`Saver::rewrites`](super::Saver::rewrites); weaver's
/// savers (in memory, SQLite, PostgreSQL, MongoDB) have it.
#[async_trait]
pub trait Rewrites: Debug + Send + Sync {
    /// Replaces each stored checkpoint `records` name (by their record's
    /// `config.thread_id`, `config.checkpoint_ns` and `checkpoint.id`)
    /// with the record given: its `checkpoint` and `metadata` are stored as
    /// they are (through the saver's codec, so an encrypting saver seals
    /// them again), and its stored pending writes are replaced by
    /// `pending_writes`. All or nothing: a record whose checkpoint is not
    /// stored ([`Error::CheckpointNotFound`](crate::Error::CheckpointNotFound)),
    /// whose `parent_config` or `commit_order` differ from what is stored
    /// ([`Error::InvalidArgument`](crate::Error::InvalidArgument)), whose
    /// stored pending writes are no longer those it was read with (a run
    /// stored one since: [`Error::RewriteConflict`](crate::Error::RewriteConflict);
    /// read it again and redo the change), or any storage or encoding
    /// failure leaves every record of the call as it was. A call naming one
    /// checkpoint twice is [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    /// Returns how many checkpoints were replaced.
    ///
    /// Writes are told apart by their task id and index: a special write
    /// (an error, an interrupt, a resume value) stored again under the same
    /// task and index since the record was read is not noticed.
    ///
    /// Delta channels are stored as the record holds them: a record
    /// holding a channel in full (no entry in `checkpoint.deltas`) no
    /// longer depends on its ancestors for it. Values this process cached
    /// for the records' threads are dropped; other processes must open
    /// fresh savers to see the new records.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::checkpoint::{Checkpoint, CheckpointMetadata, CheckpointRef, CheckpointSource, NewCheckpoint, Replacement};
    /// use weaver::{InMemorySaver, Saver};
    ///
    /// let saver = InMemorySaver::new();
    /// let at = saver
    ///     .put(NewCheckpoint {
    ///         thread_id: "t".into(),
    ///         checkpoint_ns: String::new(),
    ///         parent_id: None,
    ///         checkpoint: Checkpoint::empty(),
    ///         metadata: CheckpointMetadata::new(CheckpointSource::Input, -1),
    ///         commit_order: None,
    ///     })
    ///     .await?;
    /// let mut change = Replacement::of(saver.get_tuple(&at).await?.unwrap());
    /// change.record.checkpoint.channel_values.insert("n".into(), 7.into());
    /// let rewrites = saver.rewrites().expect("the in-memory saver rewrites");
    /// assert_eq!(rewrites.replace(vec![change]).await?, 1);
    /// let read = saver.get_tuple(&at).await?.unwrap();
    /// assert_eq!(read.checkpoint.channel_values["n"], 7);
    /// assert_eq!(read.config, at);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    async fn replace(&self, records: Vec<Replacement>) -> Result<u64>;
}

/// A stored checkpoint to replace ([`Rewrites::replace`]): the record to
/// store, and the pending writes stored with it when it was read.
///
/// ```
/// use weaver::checkpoint::{Checkpoint, CheckpointMetadata, CheckpointRef, CheckpointSource, CheckpointTuple, PendingWrite, Replacement};
///
/// let read = CheckpointTuple {
///     config: CheckpointRef::latest("t").at("c1"),
///     checkpoint: Checkpoint { id: "c1".into(), ..Checkpoint::empty() },
///     metadata: CheckpointMetadata::new(CheckpointSource::Loop, 0),
///     parent_config: None,
///     commit_order: 1,
///     pending_writes: vec![PendingWrite {
///         task_id: "task".into(),
///         task_path: "~a".into(),
///         idx: 0,
///         channel: "n".into(),
///         value: 1.into(),
///     }],
/// };
/// let mut change = Replacement::of(read);
/// change.record.pending_writes.clear(); // the write is dropped by the replacement
/// assert_eq!(change.read_writes, vec![("task".to_owned(), 0)]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Replacement {
    /// The record to store, its identity (ids, parent, commit order) as
    /// stored.
    pub record: CheckpointTuple,
    /// The pending writes (task id, index) stored with the checkpoint when
    /// the record was read, sorted: the replacement is refused if others
    /// are stored by then.
    pub read_writes: Vec<(String, i64)>,
}

impl Replacement {
    /// A replacement of `read`, a record as a saver returned it: change
    /// its `record`, then pass it to [`Rewrites::replace`].
    pub fn of(read: CheckpointTuple) -> Self {
        let read_writes = write_keys(
            read.pending_writes
                .iter()
                .map(|w| (w.task_id.clone(), w.idx))
                .collect(),
        );
        Self {
            record: read,
            read_writes,
        }
    }
}

/// Pending-write keys (task id, index), sorted and without repeats.
fn write_keys(mut keys: Vec<(String, i64)>) -> Vec<(String, i64)> {
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Checks that the keys of the pending writes stored with `r`'s
/// checkpoint (`stored`, in any order) are those it was read with.
pub(crate) fn check_writes_unchanged(r: &Replacement, stored: Vec<(String, i64)>) -> Result<()> {
    if write_keys(r.read_writes.clone()) != write_keys(stored) {
        let t = &r.record;
        return Err(Error::RewriteConflict {
            thread_id: t.config.thread_id.clone(),
            checkpoint_ns: t.config.checkpoint_ns.clone(),
            checkpoint_id: t.checkpoint.id.clone(),
        });
    }
    Ok(())
}

/// A record to replace, checked as a write is (its ids, its writes): its
/// checkpoint id, its metadata with NULs stripped, and its parent's id.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mongodb"))]
pub(crate) fn checked_record(
    t: &CheckpointTuple,
) -> Result<(&str, super::types::CheckpointMetadata, Option<&str>)> {
    use super::text;
    text::check_ref(&t.config)?;
    text::check_writes(&t.pending_writes)?;
    let id = record_id(t)?;
    let mut metadata = t.metadata.clone();
    text::strip_nul(&mut metadata);
    let parent = t
        .parent_config
        .as_ref()
        .and_then(|p| p.checkpoint_id.as_deref());
    Ok((id, metadata, parent))
}

/// Refuses a call naming one checkpoint twice ([`Error::InvalidArgument`]):
/// which of the two records would stand is no answer a saver should pick.
pub(crate) fn check_distinct(records: &[Replacement]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for r in records {
        let t = &r.record;
        let key = (
            t.config.thread_id.as_str(),
            t.config.checkpoint_ns.as_str(),
            t.checkpoint.id.as_str(),
        );
        if !seen.insert(key) {
            return Err(Error::invalid_argument(format!(
                "checkpoint `{}` of thread `{}` is named twice in one replacement",
                t.checkpoint.id, t.config.thread_id
            )));
        }
    }
    Ok(())
}

/// The checkpoint id a record to replace names: its config's, which must
/// agree with its record's.
pub(crate) fn record_id(t: &CheckpointTuple) -> Result<&str> {
    match t.config.checkpoint_id.as_deref() {
        Some(id) if id == t.checkpoint.id => Ok(id),
        Some(id) => Err(Error::invalid_argument(format!(
            "a record to replace names checkpoint `{id}` in its config and `{}` in its record",
            t.checkpoint.id
        ))),
        None => Ok(&t.checkpoint.id),
    }
}

/// Checks that what is stored of a checkpoint (its parent and commit
/// order) is what the record to replace says.
pub(crate) fn check_identity(
    t: &CheckpointTuple,
    stored_parent: Option<&str>,
    stored_order: u64,
) -> Result<()> {
    let parent = t
        .parent_config
        .as_ref()
        .and_then(|p| p.checkpoint_id.as_deref());
    if parent != stored_parent || t.commit_order != stored_order {
        return Err(Error::invalid_argument(format!(
            "checkpoint `{}` of thread `{}` is stored with parent {:?} at commit order {stored_order}; the record to replace it says parent {:?} at {}: a replacement keeps both",
            t.checkpoint.id, t.config.thread_id, stored_parent, parent, t.commit_order
        )));
    }
    Ok(())
}
