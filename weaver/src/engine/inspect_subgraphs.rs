//! Reading the subgraphs of a thread's pending tasks
//! ([`CompiledGraph::get_state_subgraphs`](crate::CompiledGraph::get_state_subgraphs)):
//! the latest checkpoint in each task's namespace, untyped, since the
//! parent does not know its subgraphs' state types.

use std::future::Future;
use std::pin::Pin;

use serde_json::{Map, Value};

use super::Interrupt;
use super::algebra::interrupts::pending_interrupts;
use super::algebra::writes::succeeded;
use super::spec::{Spec, TaskNode};
use crate::checkpoint::{CheckpointMetadata, CheckpointRef, Checkpointer, PendingWrite};
use crate::error::Result;
use crate::state::GraphState;

/// The state of a subgraph a pending task ran, at its latest checkpoint.
/// Its values are the channel values as stored; read it typed with the
/// subgraph's own graph: `subgraph.get_state(&state.config.clone().into())`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SubgraphState {
    /// Addresses the checkpoint (thread, the subgraph's namespace, id).
    pub config: CheckpointRef,
    /// Its channel values, as JSON.
    pub values: Map<String, Value>,
    /// Its metadata.
    pub metadata: CheckpointMetadata,
    /// The interrupts it waits at.
    pub interrupts: Vec<Interrupt>,
    /// The subgraphs its own unfinished tasks ran, by task: (node, task
    /// id, state).
    pub subgraphs: Vec<(String, String, SubgraphState)>,
}

pub(crate) use crate::checkpoint::id::task_ns;

/// A task's id and its subgraph's namespace under an older name of its node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct OlderTask {
    /// The older name.
    pub name: String,
    /// The task's id under it.
    pub id: String,
    /// Its subgraph's namespace under it.
    pub ns: String,
}

/// For the task `node` (pulled, or the `index`-th send) at checkpoint
/// `checkpoint_id` in namespace `ns`, when its node was renamed since
/// ([`Compile::rename_node`](crate::Compile::rename_node)): its id and its
/// subgraph's namespace under each older name (in name order: several
/// releases may have renamed it).
pub(crate) fn older_tasks<S: GraphState>(
    spec: &Spec<S>,
    ns: &str,
    checkpoint_id: &str,
    node: TaskNode,
) -> Vec<OlderTask> {
    if spec.renames.is_empty() || matches!(node, TaskNode::Start) {
        return Vec::new();
    }
    let name = spec.name_of(node);
    let mut older: Vec<OlderTask> = spec
        .renames
        .iter()
        .filter(|(_, new)| *new == name)
        .map(|(old, _)| {
            let id = match node {
                TaskNode::Push { index, .. } => {
                    super::algebra::push_task_id(checkpoint_id, index, old)
                }
                _ => super::algebra::task_id(checkpoint_id, old),
            };
            OlderTask {
                ns: task_ns(ns, old, &id),
                name: old.clone(),
                id,
            }
        })
        .collect();
    older.sort();
    older
}

/// [`older_tasks`] of the task `id` of node `name` at checkpoint
/// `checkpoint_id`, one of `tasks` tasks there: a send's place is found
/// from its id (a send's place is below the number of tasks).
pub(crate) fn older_tasks_of_id<S: GraphState>(
    spec: &Spec<S>,
    ns: &str,
    checkpoint_id: &str,
    (name, id): (&str, &str),
    tasks: usize,
) -> Vec<OlderTask> {
    let Some(&node) = spec.index.get(name).filter(|_| !spec.renames.is_empty()) else {
        return Vec::new();
    };
    let task = (0..tasks)
        .find(|&index| super::algebra::push_task_id(checkpoint_id, index, name) == id)
        .map_or(TaskNode::Pull(node), |index| TaskNode::Push { index, node });
    older_tasks(spec, ns, checkpoint_id, task)
}

/// The state of the subgraph task `id` of `node` ran, if it ran one.
pub(crate) fn subgraph_state<'a>(
    cp: &'a Checkpointer,
    thread: &'a str,
    ns: &'a str,
    node: &'a str,
    id: &'a str,
) -> Pin<Box<dyn Future<Output = Result<Option<SubgraphState>>> + Send + 'a>> {
    subgraph_state_at(cp, thread, task_ns(ns, node, id))
}

/// The state of the subgraph stored under namespace `sub_ns`, if any.
pub(crate) fn subgraph_state_at<'a>(
    cp: &'a Checkpointer,
    thread: &'a str,
    sub_ns: String,
) -> Pin<Box<dyn Future<Output = Result<Option<SubgraphState>>> + Send + 'a>> {
    Box::pin(async move {
        let at = CheckpointRef {
            thread_id: thread.to_owned(),
            checkpoint_ns: sub_ns,
            checkpoint_id: None,
        };
        let Some(tuple) = cp.get_tuple(&at).await? else {
            return Ok(None);
        };
        let pending = tuple.pending_writes;
        let mut subgraphs = Vec::new();
        for (task, path) in unfinished_tasks(&pending) {
            if let Some(state) = subgraph_state(cp, thread, &at.checkpoint_ns, &path, &task).await?
            {
                subgraphs.push((path, task, state));
            }
        }
        Ok(Some(SubgraphState {
            config: tuple.config,
            values: tuple.checkpoint.channel_values,
            metadata: tuple.metadata,
            interrupts: pending_interrupts(&tuple.checkpoint.id, &pending)?
                .into_iter()
                .map(|w| w.interrupt)
                .collect(),
            subgraphs,
        }))
    })
}

/// The tasks among `pending` that did not finish: (task id, node), in the
/// order their writes were stored.
fn unfinished_tasks(pending: &[PendingWrite]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for w in pending {
        if out.iter().any(|(id, _)| *id == w.task_id) {
            continue;
        }
        let writes: Vec<&PendingWrite> =
            pending.iter().filter(|x| x.task_id == w.task_id).collect();
        if !succeeded(&writes) {
            out.push((w.task_id.clone(), w.task_path.clone()));
        }
    }
    out
}
