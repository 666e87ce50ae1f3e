//! Interrupt bookkeeping: which interrupts of a checkpoint wait for an
//! answer, the static stops, and the writes a resume answers with.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::answers::{encode_answers, stored_answers, task_record};
use super::tasks::TaskNode;
use super::writes::succeeded;
use crate::checkpoint::{INTERRUPT_CHANNEL, PendingWrite, RESUME_CHANNEL};
use crate::engine::runtime::AnswersById;
use crate::engine::spec::Spec;
use crate::engine::{Interrupt, InterruptWhen, Resume};
use crate::error::{Error, Result};
use crate::state::GraphState;

/// Whether the interrupt `id` of task `task_id` is answered already: the
/// task's stored resume values hold an answer for it. An interrupt write
/// outlives its answer when the attempt that took the answer failed
/// instead of finishing; that interrupt is history, not pending. Stored
/// answers that do not decode are an [`Error::Decode`] naming the task at
/// checkpoint `checkpoint_id`.
pub(crate) fn answered(
    checkpoint_id: &str,
    task_id: &str,
    writes: &[&PendingWrite],
    id: &str,
) -> Result<bool> {
    match writes.iter().find(|w| w.channel == RESUME_CHANNEL) {
        Some(w) => Ok(stored_answers(checkpoint_id, task_id, &w.value)?.contains_key(id)),
        None => Ok(false),
    }
}

/// The interrupts a task's `writes` at checkpoint `checkpoint_id` record
/// (answered or not); a record that does not decode is an
/// [`Error::Decode`] naming the task.
pub(crate) fn raised_interrupts(
    checkpoint_id: &str,
    writes: &[&PendingWrite],
) -> Result<Vec<Interrupt>> {
    let mut out = Vec::new();
    for w in writes.iter().filter(|w| w.channel == INTERRUPT_CHANNEL) {
        out.extend(decode_interrupts(checkpoint_id, w)?);
    }
    Ok(out)
}

/// The interrupts the interrupt write `w` at checkpoint `checkpoint_id`
/// records.
fn decode_interrupts(checkpoint_id: &str, w: &PendingWrite) -> Result<Vec<Interrupt>> {
    Vec::<Interrupt>::deserialize(&w.value).map_err(|e| {
        let what = task_record("the interrupts", checkpoint_id, &w.task_id);
        Error::decode(format!("{what} (node `{}`)", w.task_path), e)
    })
}

/// An interrupt waiting for an answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Waiting {
    /// The task that raised it.
    pub task: String,
    /// The task's node.
    pub node: String,
    /// The interrupt.
    pub interrupt: Interrupt,
}

/// Interrupts recorded among `pending` (the pending writes of checkpoint
/// `checkpoint_id`) and not answered yet, in the order stored. A task that
/// ran to the end on a later attempt waits for nothing; a record of
/// interrupts or answers that does not decode is an [`Error::Decode`]
/// naming its task (never a thread left waiting for nothing).
pub(crate) fn pending_interrupts(
    checkpoint_id: &str,
    pending: &[PendingWrite],
) -> Result<Vec<Waiting>> {
    let mut out = Vec::new();
    for w in pending.iter().filter(|w| w.channel == INTERRUPT_CHANNEL) {
        let task: Vec<&PendingWrite> = pending.iter().filter(|x| x.task_id == w.task_id).collect();
        if succeeded(&task) {
            continue;
        }
        for i in decode_interrupts(checkpoint_id, w)? {
            if !answered(checkpoint_id, &w.task_id, &task, &i.id)? {
                out.push(Waiting {
                    task: w.task_id.clone(),
                    node: w.task_path.clone(),
                    interrupt: i,
                });
            }
        }
    }
    Ok(out)
}

/// The static stops (`interrupt_before` / `interrupt_after`, by `when`) of
/// `tasks` at the checkpoint `checkpoint_id`.
pub(crate) fn static_stops<S: GraphState>(
    spec: &Spec<S>,
    checkpoint_id: &str,
    tasks: &[TaskNode],
    when: InterruptWhen,
) -> Vec<Interrupt> {
    let (flags, label) = match when {
        InterruptWhen::Before => (&spec.interrupt_before, "before"),
        _ => (&spec.interrupt_after, "after"),
    };
    let mut nodes: Vec<usize> = tasks
        .iter()
        .filter_map(|t| t.node())
        .filter(|i| flags[*i])
        .collect();
    // A node run by several sends stops once.
    nodes.sort_unstable();
    nodes.dedup();
    nodes
        .into_iter()
        .map(|i| {
            let node = &spec.nodes[i].name;
            Interrupt {
                id: format!("{label}:{node}:{checkpoint_id}"),
                value: Value::Null,
                node: node.clone(),
                when,
            }
        })
        .collect()
}

/// Whether `id` is the id of a static stop at the checkpoint `checkpoint_id`.
fn is_static_stop<S: GraphState>(spec: &Spec<S>, checkpoint_id: &str, id: &str) -> bool {
    let Some(stop) = id
        .strip_suffix(checkpoint_id)
        .and_then(|s| s.strip_suffix(':'))
    else {
        return false;
    };
    let (flags, node) = match stop.split_once(':') {
        Some(("before", node)) => (&spec.interrupt_before, node),
        Some(("after", node)) => (&spec.interrupt_after, node),
        _ => return false,
    };
    spec.index.get(node).is_some_and(|i| flags[*i])
}

/// What a resume does at a checkpoint.
#[derive(Debug, PartialEq)]
pub(crate) enum Answer {
    /// Nothing to answer (a static stop): the run goes on.
    Nothing,
    /// The resume writes answering interrupts: one per task answered, with
    /// all its answers so far. `earlier` is each such task's resume write
    /// as stored before (its id and index, and its value if there was one):
    /// the answers hold only if that is still what is stored.
    Writes {
        writes: Vec<PendingWrite>,
        earlier: Vec<((String, i64), Option<Value>)>,
    },
}

/// AnswersById the interrupts waiting at the checkpoint `checkpoint_id`, whose
/// pending writes are `pending`, with `resume`; `has_tasks`: whether the
/// checkpoint triggers any task. `pending` takes the new resume writes in
/// place of the ones they extend. A resume that answers what is not asked
/// is refused: [`Error::NoPendingInterrupt`], [`Error::AmbiguousResume`],
/// [`Error::UnknownInterrupt`] (of thread `thread_id`).
pub(crate) fn answer<S: GraphState>(
    spec: &Spec<S>,
    checkpoint_id: &str,
    has_tasks: bool,
    pending: &mut Vec<PendingWrite>,
    resume: Resume,
    thread_id: &str,
) -> Result<Answer> {
    let waiting = pending_interrupts(checkpoint_id, pending)?;
    if waiting.is_empty() {
        return answer_static(spec, checkpoint_id, has_tasks, &resume, thread_id);
    }
    let answers: BTreeMap<String, Value> = match resume {
        Resume::Value(v) if waiting.len() == 1 => {
            BTreeMap::from([(waiting[0].interrupt.id.clone(), v)])
        }
        Resume::Value(_) => {
            return Err(Error::AmbiguousResume {
                thread_id: thread_id.to_owned(),
                pending: waiting.len(),
            });
        }
        Resume::Map(m) => m,
    };
    if let Some(id) = answers
        .keys()
        .find(|id| !waiting.iter().any(|w| &w.interrupt.id == *id))
    {
        return Err(Error::UnknownInterrupt {
            thread_id: thread_id.to_owned(),
            interrupt_id: id.clone(),
        });
    }
    // A subgraph's static stop (recorded as its parent task's pause) asks
    // nothing, as one at the top level: a value for it is refused rather
    // than dropped.
    let answers_a_stop = waiting.iter().any(|w| {
        w.interrupt.when != InterruptWhen::Node
            && answers.get(&w.interrupt.id).is_some_and(|v| !v.is_null())
    });
    if answers_a_stop {
        return Err(Error::NoPendingInterrupt {
            thread_id: thread_id.to_owned(),
        });
    }
    // One resume write per task, holding every answer it gets (a subgraph
    // task can wait at several interrupts), checked against the write
    // stored before this resume.
    let mut by_task: Vec<(&str, &str, Option<Value>, AnswersById)> = Vec::new();
    for w in &waiting {
        let Some(answer) = answers.get(&w.interrupt.id) else {
            continue;
        };
        let at = match by_task.iter().position(|(task, ..)| *task == w.task) {
            Some(at) => at,
            None => {
                let stored = pending
                    .iter()
                    .find(|p| p.task_id == w.task && p.channel == RESUME_CHANNEL)
                    .map(|p| p.value.clone());
                let values = match &stored {
                    Some(v) => stored_answers(checkpoint_id, &w.task, v)?,
                    None => AnswersById::new(),
                };
                by_task.push((&w.task, &w.node, stored, values));
                by_task.len() - 1
            }
        };
        by_task[at].3.insert(w.interrupt.id.clone(), answer.clone());
    }
    let mut writes = Vec::new();
    let mut earlier = Vec::new();
    for (task, node, stored, values) in by_task {
        let write = PendingWrite::for_task(
            task,
            node,
            [(RESUME_CHANNEL.to_owned(), encode_answers(task, &values))],
        );
        if let Some(first) = write.first() {
            earlier.push(((first.task_id.clone(), first.idx), stored));
        }
        pending.retain(|p| !(p.task_id == task && p.channel == RESUME_CHANNEL));
        pending.extend(write.iter().cloned());
        writes.extend(write);
    }
    Ok(Answer::Writes { writes, earlier })
}

/// A resume where no interrupt waits: a static stop asks nothing, so it
/// resumes with no value (`null`, or a map from its id to `null`); a value
/// no `interrupt` asked for is refused rather than dropped.
fn answer_static<S: GraphState>(
    spec: &Spec<S>,
    checkpoint_id: &str,
    has_tasks: bool,
    resume: &Resume,
    thread_id: &str,
) -> Result<Answer> {
    let (answers_nothing, names_a_stop) = match resume {
        Resume::Value(v) => (v.is_null(), false),
        Resume::Map(m) => {
            if let Some(id) = m.keys().find(|id| !is_static_stop(spec, checkpoint_id, id)) {
                return Err(Error::UnknownInterrupt {
                    thread_id: thread_id.to_owned(),
                    interrupt_id: id.clone(),
                });
            }
            (m.values().all(Value::is_null), !m.is_empty())
        }
    };
    // A stop after a node that leads to END leaves no task: resumed by its
    // id, the run completes.
    let nothing_left = !has_tasks && !names_a_stop;
    if nothing_left || !answers_nothing {
        return Err(Error::NoPendingInterrupt {
            thread_id: thread_id.to_owned(),
        });
    }
    Ok(Answer::Nothing)
}
