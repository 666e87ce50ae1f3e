//! Which tasks a checkpoint triggers, and what earlier attempts of them left.

use serde::Deserialize;
use serde_json::Value;

use super::answers::stored_answers;
use super::writes::succeeded;
use crate::checkpoint::{
    Checkpoint, EFFECT_CHANNEL, ERROR_CHANNEL, PendingWrite, RESUME_CHANNEL, SUBGRAPH_CHANNEL,
};
use crate::engine::runtime::AnswersById;
use crate::engine::send::{SENDS_CHANNEL, StoredSend};
use crate::engine::spec::{START, START_TRIGGER, Spec};
use crate::error::{Error, Result};
use crate::state::GraphState;

pub(crate) use crate::engine::spec::TaskNode;

/// Task id of a triggered node (or START's): deterministic per checkpoint
/// and node, so a resumed step finds the writes its tasks left.
pub(crate) fn task_id(checkpoint_id: &str, node: &str) -> String {
    crate::checkpoint::id::stable_id(&[checkpoint_id, node])
}

/// [`task_id`] of any task: a send's is named by its place among the
/// checkpoint's sends too.
pub(crate) fn task_id_of<S: GraphState>(
    spec: &Spec<S>,
    checkpoint_id: &str,
    node: TaskNode,
) -> String {
    let name = spec.name_of(node);
    match node {
        TaskNode::Push { index, .. } => push_task_id(checkpoint_id, index, name),
        _ => task_id(checkpoint_id, name),
    }
}

/// Task id of the `index`-th send of checkpoint `checkpoint_id`, to `node`.
pub(crate) fn push_task_id(checkpoint_id: &str, index: usize, node: &str) -> String {
    crate::checkpoint::id::stable_id(&[checkpoint_id, "push", &index.to_string(), node])
}

/// The sends `checkpoint` holds for its next step, each resolved to its
/// node. A send to a node this graph does not have, or that does not take
/// a payload, is a decode error: the thread was written by another graph.
pub(crate) fn pending_sends<S: GraphState>(
    spec: &Spec<S>,
    checkpoint: &Checkpoint,
) -> Result<Vec<TaskNode>> {
    let Some(stored) = checkpoint.channel_values.get(SENDS_CHANNEL) else {
        return Ok(Vec::new());
    };
    let what = || format!("the sends of checkpoint `{}`", checkpoint.id);
    let sends = Vec::<StoredSend>::deserialize(stored).map_err(|e| Error::decode(what(), e))?;
    sends
        .iter()
        .enumerate()
        .map(|(index, send)| match spec.index.get(&send.node) {
            Some(&node) if spec.nodes[node].node.takes_payload() => {
                Ok(TaskNode::Push { index, node })
            }
            _ => Err(Error::decode(
                what(),
                format!("`{}` is not a node of this graph run by sends", send.node),
            )),
        })
        .collect()
}

/// The payload of the `index`-th send `checkpoint` holds.
pub(crate) fn send_payload(checkpoint: &Checkpoint, index: usize) -> Option<&Value> {
    checkpoint
        .channel_values
        .get(SENDS_CHANNEL)?
        .get(index)?
        .get("payload")
}

/// The tasks of `checkpoint`'s next step, in task order: START's when its
/// trigger is newer than what it consumed, then each node whose trigger
/// channel is newer than what the node last consumed (by name), then one
/// task per send the checkpoint holds.
pub(crate) fn next_tasks<S: GraphState>(
    spec: &Spec<S>,
    checkpoint: &Checkpoint,
) -> Result<Vec<TaskNode>> {
    let mut out = triggered(spec, checkpoint);
    out.extend(pending_sends(spec, checkpoint)?);
    Ok(out)
}

/// The tasks `checkpoint`'s channel versions trigger (its sends aside).
pub(crate) fn triggered<S: GraphState>(spec: &Spec<S>, checkpoint: &Checkpoint) -> Vec<TaskNode> {
    let version = |ch: &str| checkpoint.channel_versions.get(ch).copied().unwrap_or(0);
    let seen = |node: &str, ch: &str| {
        checkpoint
            .versions_seen
            .get(node)
            .and_then(|m| m.get(ch))
            .copied()
            .unwrap_or(0)
    };
    let mut out = Vec::new();
    if version(START_TRIGGER) > seen(START, START_TRIGGER) {
        out.push(TaskNode::Start);
    }
    for (i, n) in spec.nodes.iter().enumerate() {
        if version(&n.trigger) > seen(&n.name, &n.trigger) {
            out.push(TaskNode::Pull(i));
        }
    }
    out
}

/// The channel whose new version triggers `node` (none for a send's task).
pub(crate) fn trigger_of<S: GraphState>(spec: &Spec<S>, node: TaskNode) -> Option<&str> {
    match node {
        TaskNode::Pull(i) => Some(&spec.nodes[i].trigger),
        TaskNode::Start => Some(START_TRIGGER),
        TaskNode::Push { .. } => None,
    }
}

/// Records that `node` consumed its trigger at the version `checkpoint`
/// holds, so the node is not triggered again by it. A send's task has no
/// trigger: its send is consumed by the step's checkpoint, which holds only
/// the sends the step made.
pub(crate) fn mark_seen<S: GraphState>(
    spec: &Spec<S>,
    checkpoint: &mut Checkpoint,
    node: TaskNode,
) {
    let Some(trigger) = trigger_of(spec, node).map(str::to_owned) else {
        return;
    };
    let seen = checkpoint
        .channel_versions
        .get(&trigger)
        .copied()
        .unwrap_or(0);
    checkpoint
        .versions_seen
        .entry(spec.name_of(node).to_owned())
        .or_default()
        .insert(trigger, seen);
}

/// A task a checkpoint triggers, with the writes earlier attempts of it
/// left among the checkpoint's pending writes.
#[derive(Debug)]
pub(crate) struct Prepared<'w> {
    /// The task's node.
    pub node: TaskNode,
    /// Its id.
    pub id: String,
    /// Its stored writes, in the order stored.
    pub writes: Vec<&'w PendingWrite>,
}

impl Prepared<'_> {
    /// Whether the task finished on an earlier attempt: a resume replays it
    /// from its writes instead of running it again.
    pub fn succeeded(&self) -> bool {
        succeeded(&self.writes)
    }

    /// The answers its interrupts get, by interrupt id: what the resume
    /// writes hold. Answers that do not decode are an [`Error::Decode`]
    /// naming the task at its checkpoint `checkpoint_id` (never dropped,
    /// which would ask again).
    pub fn resume_values(&self, checkpoint_id: &str) -> Result<AnswersById> {
        match self.writes.iter().find(|w| w.channel == RESUME_CHANNEL) {
            Some(w) => stored_answers(checkpoint_id, &self.id, &w.value),
            None => Ok(AnswersById::new()),
        }
    }

    /// The message of the error an earlier attempt left, if any.
    pub fn error(&self) -> Option<String> {
        self.error_write().map(|w| {
            w.value
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        })
    }

    /// The attempts the run that left the task's error write made (the
    /// write of a failure, or of the failure a later attempt recovered
    /// from); 1 for a task that left writes and no error, 0 for one that
    /// left none. An error write stored before attempts were counted says
    /// 1.
    pub fn attempts(&self) -> u32 {
        match self.error_write() {
            Some(w) => w
                .value
                .get("attempts")
                .and_then(Value::as_u64)
                .map_or(1, |n| u32::try_from(n).unwrap_or(u32::MAX)),
            // Effects journaled (and a subgraph finished) by a run that then
            // stopped are not a run's ending.
            None => u32::from(
                self.writes
                    .iter()
                    .any(|w| w.channel != EFFECT_CHANNEL && w.channel != SUBGRAPH_CHANNEL),
            ),
        }
    }

    fn error_write(&self) -> Option<&PendingWrite> {
        self.writes
            .iter()
            .find(|w| w.channel == ERROR_CHANNEL)
            .copied()
    }
}

/// The tasks `checkpoint` triggers, in task order, each with its writes
/// among `pending` (the checkpoint's pending writes).
pub(crate) fn prepare_tasks<'w, S: GraphState>(
    spec: &Spec<S>,
    checkpoint: &Checkpoint,
    pending: &'w [PendingWrite],
) -> Result<Vec<Prepared<'w>>> {
    Ok(prepare(
        spec,
        &checkpoint.id,
        &next_tasks(spec, checkpoint)?,
        pending,
    ))
}

/// [`prepare_tasks`] of the tasks `nodes` of the checkpoint `checkpoint_id`.
pub(crate) fn prepare<'w, S: GraphState>(
    spec: &Spec<S>,
    checkpoint_id: &str,
    nodes: &[TaskNode],
    pending: &'w [PendingWrite],
) -> Vec<Prepared<'w>> {
    nodes
        .iter()
        .map(|&node| {
            let id = task_id_of(spec, checkpoint_id, node);
            let writes = pending.iter().filter(|w| w.task_id == id).collect();
            Prepared { node, id, writes }
        })
        .collect()
}
