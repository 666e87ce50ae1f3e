//! Replaying a parent checkpoint taken while a subgraph was paused.
//!
//! A replay of checkpoint `C` starts from a fork `C'` of it, whose tasks
//! have new ids, so their subgraphs get new namespaces. A task of `C'`
//! whose counterpart at `C` was paused inside its subgraph does not start
//! that subgraph over: its first call copies the subgraph's checkpoint at
//! the pause (the one whose interrupts `C` records for the task) into the
//! new namespace and continues from there, so the subgraph's finished
//! nodes do not run again. The subgraph's own run is a replay of that
//! checkpoint, so a subgraph paused two levels deep is found the same way.

use super::algebra::tasks::task_id_of;
use super::algebra::{TaskNode, raised_interrupts};
use super::inspect_subgraphs::{older_tasks, task_ns};
use super::runtime::TaskOrigin;
use super::spec::Spec;
use crate::checkpoint::{CheckpointRef, Checkpointer, INTERRUPT_CHANNEL, ListFilter, PendingWrite};
use crate::error::Result;
use crate::state::GraphState;

/// The checkpoint a run replays, as its first step starts: the tasks of
/// that step are the replayed checkpoint's tasks again.
#[derive(Debug, Clone)]
pub(crate) struct Replayed {
    /// The replayed checkpoint's id.
    pub id: String,
    /// Its namespace.
    pub ns: String,
    /// Its pending writes (what its tasks recorded, interrupts among them).
    pub pending: Vec<PendingWrite>,
}

impl Replayed {
    /// The origin of the task of `node`, if its counterpart at the replayed
    /// checkpoint was paused (a record that does not decode is an
    /// [`Error::Decode`] naming the task, as everywhere else).
    pub fn origin_of<S: GraphState>(
        &self,
        spec: &Spec<S>,
        node: TaskNode,
    ) -> Result<Option<TaskOrigin>> {
        let task = task_id_of(spec, &self.id, node);
        let name = spec.name_of(node);
        let older = older_tasks(spec, &self.ns, &self.id, node);
        let mut interrupts = interrupt_ids(&self.id, &task, &self.pending)?;
        for old in &older {
            if !interrupts.is_empty() {
                break;
            }
            // Writes stored under an older name's task id.
            interrupts = interrupt_ids(&self.id, &old.id, &self.pending)?;
        }
        if interrupts.is_empty() {
            return Ok(None);
        }
        Ok(Some(TaskOrigin {
            ns: task_ns(&self.ns, name, &task),
            older_ns: older.into_iter().map(|o| o.ns).collect(),
            interrupts,
        }))
    }
}

/// The ids of the interrupts `pending` (writes at checkpoint
/// `checkpoint_id`) records for `task`.
fn interrupt_ids(checkpoint_id: &str, task: &str, pending: &[PendingWrite]) -> Result<Vec<String>> {
    let writes: Vec<&PendingWrite> = pending.iter().filter(|w| w.task_id == task).collect();
    Ok(raised_interrupts(checkpoint_id, &writes)?
        .into_iter()
        .map(|i| i.id)
        .collect())
}

/// The subgraph checkpoint in `origin`'s namespace of `thread` that paused
/// at the origin's interrupts (the newest such one), if it is still stored:
/// the one whose writes record them, or the one a static stop among them
/// names (`before:node:id`, `after:node:id`: a subgraph's own static stop
/// is recorded only in its parent's task).
pub(crate) async fn paused_at(
    cp: &Checkpointer,
    thread: &str,
    origin: &TaskOrigin,
) -> Result<Option<CheckpointRef>> {
    for ns in std::iter::once(&origin.ns).chain(&origin.older_ns) {
        let filter = ListFilter::thread(thread).ns(ns.clone());
        for tuple in cp.list_stored(&filter).await? {
            let id = &tuple.checkpoint.id;
            if origin.interrupts.iter().any(|i| is_static_stop_at(i, id)) {
                return Ok(Some(tuple.config.clone()));
            }
            let pending = &tuple.pending_writes;
            let tasks = pending
                .iter()
                .filter(|w| w.channel == INTERRUPT_CHANNEL)
                .map(|w| w.task_id.as_str());
            for task in tasks {
                let ids = interrupt_ids(id, task, pending)?;
                if ids.iter().any(|i| origin.interrupts.contains(i)) {
                    return Ok(Some(tuple.config.clone()));
                }
            }
        }
    }
    Ok(None)
}

/// Whether `interrupt` is the id of a static stop at the checkpoint `id`
/// (`before:node:id` or `after:node:id`; a node's name holds no `:`).
fn is_static_stop_at(interrupt: &str, id: &str) -> bool {
    let Some(rest) = interrupt
        .strip_prefix("before:")
        .or_else(|| interrupt.strip_prefix("after:"))
    else {
        return false;
    };
    rest.strip_suffix(id)
        .and_then(|node| node.strip_suffix(':'))
        .is_some_and(|node| !node.is_empty() && !node.contains(':'))
}
