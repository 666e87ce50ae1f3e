//! Which tasks a checkpoint triggers, and what earlier attempts of them left.

use serde::Deserialize;
use serde_json::Value;

use super::writes::succeeded;
use crate::checkpoint::{Checkpoint, ERROR_CHANNEL, PendingWrite, RESUME_CHANNEL};
use crate::engine::spec::{START, START_TRIGGER, Spec};
use crate::state::GraphState;

/// A task of a step: `None` is the START pseudo-task that applies the input,
/// `Some(i)` the node at index `i` of the spec (nodes sorted by name, so the
/// order of `TaskNode`s is the task order of a step).
pub(crate) type TaskNode = Option<usize>;

/// Task id: deterministic per checkpoint and node, so a resumed step finds
/// the writes its tasks left.
pub(crate) fn task_id(checkpoint_id: &str, node: &str) -> String {
    crate::checkpoint::id::stable_id(&[checkpoint_id, node])
}

/// Nodes triggered in `checkpoint`: a trigger channel newer than what the
/// node last consumed. START first, then by name.
pub(crate) fn next_tasks<S: GraphState>(spec: &Spec<S>, checkpoint: &Checkpoint) -> Vec<TaskNode> {
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
        out.push(None);
    }
    for (i, n) in spec.nodes.iter().enumerate() {
        if version(&n.trigger) > seen(&n.name, &n.trigger) {
            out.push(Some(i));
        }
    }
    out
}

/// The channel whose new version triggers `node`.
pub(crate) fn trigger_of<S: GraphState>(spec: &Spec<S>, node: TaskNode) -> &str {
    match node {
        Some(i) => &spec.nodes[i].trigger,
        None => START_TRIGGER,
    }
}

/// Records that `node` consumed its trigger at the version `checkpoint`
/// holds, so the node is not triggered again by it.
pub(crate) fn mark_seen<S: GraphState>(
    spec: &Spec<S>,
    checkpoint: &mut Checkpoint,
    node: TaskNode,
) {
    let trigger = trigger_of(spec, node).to_owned();
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

    /// The answers its `interrupt` calls get, by order: what the resume
    /// writes hold (none when they do not decode: the node asks again).
    pub fn resume_values(&self) -> Vec<Value> {
        self.writes
            .iter()
            .find(|w| w.channel == RESUME_CHANNEL)
            .and_then(|w| Vec::<Value>::deserialize(&w.value).ok())
            .unwrap_or_default()
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
            None => u32::from(!self.writes.is_empty()),
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
) -> Vec<Prepared<'w>> {
    prepare(spec, &checkpoint.id, &next_tasks(spec, checkpoint), pending)
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
            let id = task_id(checkpoint_id, spec.name_of(node));
            let writes = pending.iter().filter(|w| w.task_id == id).collect();
            Prepared { node, id, writes }
        })
        .collect()
}
