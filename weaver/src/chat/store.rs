//! A conversation's stored snapshots: reading the head, copying a
//! snapshot as a new version, and what a snapshot holds for the caller.

use serde_json::json;

use super::state::Conversation;
use super::types::Tracker;
use crate::checkpoint::{
    CheckpointRef, CheckpointTuple, Checkpointer, NewCheckpoint, new_checkpoint_id, now_rfc3339,
};
use crate::engine::{CompiledGraph, StateSnapshot};
use crate::error::{Error, Result};
use crate::state::GraphState;

/// One stored snapshot of a conversation: its version, when it was
/// stored, the state and the tracker. Emitted messages are not part of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatSnapshot<S> {
    /// The conversation's id.
    pub flow_id: String,
    /// Its version (1, 2, … per conversation).
    pub version: u64,
    /// When it was stored (RFC 3339, UTC).
    pub created_at: String,
    /// The flow's state.
    pub state: S,
    /// How far the conversation was.
    pub tracker: Tracker,
}

impl<S: GraphState> ChatSnapshot<S> {
    pub(crate) fn of(flow_id: &str, s: StateSnapshot<Conversation<S>>) -> Self {
        let mut tracker = s.values.tracker;
        // START's router went straight to END: no node ran to mark the
        // flow done, and it is.
        if ended_at_start(
            s.commit_order,
            &tracker,
            s.next.is_empty(),
            s.interrupts.is_empty(),
        ) {
            tracker.done = true;
        }
        ChatSnapshot {
            flow_id: flow_id.to_owned(),
            version: s.commit_order,
            created_at: s.created_at.unwrap_or_default(),
            state: s.values.state,
            tracker,
        }
    }
}

/// Whether a stored conversation at version `version`, tracked by
/// `tracker`, with nothing next (`no_next`) and no pause (`no_pause`),
/// ended at START: its router chose END before any node ran.
pub(crate) fn ended_at_start(
    version: u64,
    tracker: &Tracker,
    no_next: bool,
    no_pause: bool,
) -> bool {
    version > 0 && tracker.node.is_none() && no_next && no_pause
}

/// The checkpointer `graph` was compiled with (a chat flow's always is).
pub(crate) fn checkpointer<S: GraphState>(graph: &CompiledGraph<S>) -> Result<&Checkpointer> {
    graph.checkpointer().ok_or(Error::CheckpointerRequired {
        feature: "chat flows",
    })
}

fn latest(id: &str) -> CheckpointRef {
    CheckpointRef {
        thread_id: id.to_owned(),
        checkpoint_ns: String::new(),
        checkpoint_id: None,
    }
}

/// The conversation's latest version (0: none stored).
pub(crate) async fn head(cp: &Checkpointer, id: &str) -> Result<u64> {
    Ok(cp
        .get_tuple(&latest(id))
        .await?
        .map_or(0, |t| t.commit_order))
}

/// The stored snapshot numbered `version`.
pub(crate) async fn at(cp: &Checkpointer, id: &str, version: u64) -> Result<CheckpointTuple> {
    let missing = || Error::CheckpointNotFound {
        thread_id: id.to_owned(),
        checkpoint_ns: String::new(),
        checkpoint_id: format!("version {version}"),
    };
    if version == 0 {
        return Err(missing());
    }
    let found = cp
        .at_commit_order(id, "", version)
        .await?
        .ok_or_else(missing)?;
    cp.fetch_tuple(&found).await
}

/// The latest snapshot of `cp`'s conversation `id`, if any.
pub(crate) async fn latest_tuple(cp: &Checkpointer, id: &str) -> Result<Option<CheckpointTuple>> {
    cp.get_tuple(&latest(id)).await
}

/// Stores the checkpoint of `source` as version `head + 1` of `id` in
/// `cp` (a new id and time, no pending writes: what runs next follows from
/// its channel versions). [`Error::VersionConflict`] if that version is
/// taken.
pub(crate) async fn copy_as_next(
    cp: &Checkpointer,
    id: &str,
    source: CheckpointTuple,
    head: u64,
) -> Result<u64> {
    let next = head.checked_add(1).ok_or(Error::LimitExceeded {
        limit: "conversation version",
        value: head,
        ceiling: u64::MAX - 1,
    })?;
    // The head the copy goes after is gone (pruned, or the conversation
    // deleted): another writer moved the conversation on.
    let gone = || Error::VersionConflict {
        thread_id: id.to_owned(),
        checkpoint_ns: String::new(),
        attempted: next,
    };
    let parent_id = if head == 0 {
        // A first version, unless another writer stored (and pruned) some.
        if self::head(cp, id).await? != 0 {
            return Err(gone());
        }
        None
    } else {
        let parent = cp.at_commit_order(id, "", head).await?;
        Some(parent.and_then(|r| r.checkpoint_id).ok_or_else(gone)?)
    };
    let mut checkpoint = source.checkpoint;
    checkpoint.id = new_checkpoint_id();
    checkpoint.ts = now_rfc3339();
    let mut metadata = source.metadata;
    metadata
        .extra
        .insert("chat_saved_from".into(), json!(source.commit_order));
    cp.put(NewCheckpoint {
        thread_id: id.to_owned(),
        checkpoint_ns: String::new(),
        parent_id,
        checkpoint,
        metadata,
        commit_order: Some(next),
    })
    .await?;
    Ok(next)
}

/// Makes `scratch`'s conversation `id` a copy of version `version` of the
/// stored one (empty for version 0).
pub(crate) async fn seed(
    stored: &Checkpointer,
    scratch: &Checkpointer,
    id: &str,
    version: u64,
) -> Result<()> {
    // Read first: a read that fails leaves the scratch (a manual flow's
    // unsaved progress) as it was.
    let source = match version {
        0 => None,
        v => Some(at(stored, id, v).await?),
    };
    scratch.delete_thread(id).await?;
    match source {
        Some(source) => copy_as_next(scratch, id, source, 0).await.map(drop),
        None => Ok(()),
    }
}
