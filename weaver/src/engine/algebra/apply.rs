//! Applying one step's writes: the updates through the reducers in task
//! order, the written channels to a new version, the consumed triggers
//! marked seen. Written once, for the loop, reads and updates alike.

use super::tasks::{TaskNode, mark_seen, prepare_tasks};
use super::writes::{TaskOutput, replay_task};
use crate::checkpoint::{Checkpoint, PendingWrite};
use crate::engine::send::StoredSend;
use crate::engine::spec::{END, Spec, Target};
use crate::error::{Error, Result};
use crate::panics::caught;
use crate::state::GraphState;

/// Who wrote an update of a step. The order is the task order the updates
/// merge in, whatever order the tasks finished in: START's input, the
/// nodes by name, then END (an `update_state` as END).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Author {
    /// A task of the step (START's or a node's).
    Task(TaskNode),
    /// `update_state` as END.
    End,
}

impl Author {
    /// The name the author goes by (the node, `__start__` or `__end__`).
    pub fn name<S: GraphState>(self, spec: &Spec<S>) -> &str {
        match self {
            Author::Task(node) => spec.name_of(node),
            Author::End => END,
        }
    }
}

/// Moves `checkpoint`'s versions one step on: each task in `consumed` is
/// marked as having seen its trigger at the version it holds, then every
/// channel in `written` gets one new version (above all the others). A
/// stored version at the top of its range is an error (nothing changes).
pub(crate) fn advance<S: GraphState>(
    spec: &Spec<S>,
    checkpoint: &mut Checkpoint,
    consumed: impl IntoIterator<Item = TaskNode>,
    written: impl IntoIterator<Item = String>,
) -> Result<()> {
    let version = super::counters::next_version(checkpoint)?;
    for node in consumed {
        mark_seen(spec, checkpoint, node);
    }
    for ch in written {
        checkpoint.channel_versions.insert(ch, version);
    }
    Ok(())
}

/// Applies one step's `writes` to `state` and `checkpoint`: the updates
/// merge through the reducers in task order (by [`Author`], not by the
/// order given), then [`advance`] marks the `consumed` tasks seen and gives
/// the channels the updates wrote, and the triggers of the nodes they
/// route to, a new version. Returns the sends the writes made, in task
/// order: the tasks of the next step besides the triggered ones. A reducer
/// that refuses or panics is [`Error::NodeFailed`] of the step's authors;
/// `checkpoint` is then as it was (`state` may be partly updated).
pub(crate) fn apply_writes<S: GraphState>(
    spec: &Spec<S>,
    checkpoint: &mut Checkpoint,
    state: &mut S,
    consumed: impl IntoIterator<Item = TaskNode>,
    mut writes: Vec<(Author, TaskOutput<S>)>,
) -> Result<Vec<StoredSend>> {
    writes.sort_by_key(|(author, _)| *author);
    // The updates move out (a default, empty update stays behind); the
    // channels and triggers stay for the version bump.
    let updates = writes
        .iter_mut()
        .map(|(_, output)| std::mem::take(&mut output.update))
        .collect();
    let names = || {
        writes
            .iter()
            .map(|(author, _)| author.name(spec))
            .collect::<Vec<_>>()
            .join(", ")
    };
    apply_updates(state, updates, names)?;
    let sends = writes
        .iter_mut()
        .flat_map(|(_, output)| std::mem::take(&mut output.sends))
        .collect();
    let channels = writes.into_iter().flat_map(|(_, output)| {
        let triggers = output.triggers.into_iter().filter_map(|t| match t {
            Target::Node(i) => Some(spec.nodes[i].trigger.clone()),
            Target::End => None,
        });
        output.channels.into_iter().chain(triggers)
    });
    advance(spec, checkpoint, consumed, channels)?;
    Ok(sends)
}

/// [`GraphState::apply`] of `updates` (in task order), a panicking reducer
/// reported as [`Error::NodeFailed`] of the tasks `names` gives.
fn apply_updates<S: GraphState>(
    state: &mut S,
    updates: Vec<S::Update>,
    names: impl FnOnce() -> String,
) -> Result<()> {
    match caught("a reducer", || state.apply(updates)) {
        Ok(applied) => applied,
        Err(msg) => Err(Error::NodeFailed {
            node: names(),
            source: msg.into(),
        }),
    }
}

/// The outputs of `checkpoint`'s tasks whose writes among `pending` show
/// they finished (a resume replays them instead of running them again), in
/// task order. START's task too: the input it took in is its output.
pub(crate) fn finished_tasks<S: GraphState>(
    spec: &Spec<S>,
    checkpoint: &Checkpoint,
    pending: &[PendingWrite],
) -> Result<Vec<(Author, TaskOutput<S>)>> {
    prepare_tasks(spec, checkpoint, pending)?
        .into_iter()
        .filter(|task| task.succeeded())
        .map(|task| {
            Ok((
                Author::Task(task.node),
                replay_task(spec, task.node, &task.writes)?,
            ))
        })
        .collect()
}

/// Applies to `checkpoint` and `state` the outputs of the checkpoint's tasks
/// that finished ([`finished_tasks`]), as their step would have: the state
/// a resume, a new input or `get_state` sees at a checkpoint whose step
/// stopped part way. Returns the sends those tasks made.
pub(crate) fn apply_finished<S: GraphState>(
    spec: &Spec<S>,
    checkpoint: &mut Checkpoint,
    state: &mut S,
    pending: &[PendingWrite],
) -> Result<Vec<StoredSend>> {
    let done = finished_tasks(spec, checkpoint, pending)?;
    apply_done(spec, checkpoint, state, done)
}

/// [`apply_finished`] of tasks already found ([`finished_tasks`]).
pub(crate) fn apply_done<S: GraphState>(
    spec: &Spec<S>,
    checkpoint: &mut Checkpoint,
    state: &mut S,
    done: Vec<(Author, TaskOutput<S>)>,
) -> Result<Vec<StoredSend>> {
    if done.is_empty() {
        return Ok(Vec::new());
    }
    let consumed: Vec<TaskNode> = done
        .iter()
        .filter_map(|(author, _)| match author {
            Author::Task(node) => Some(*node),
            Author::End => None,
        })
        .collect();
    apply_writes(spec, checkpoint, state, consumed, done)
}
