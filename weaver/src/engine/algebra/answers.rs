//! How a task's answers to its interrupts are stored in its resume write.

use serde_json::Value;

use crate::engine::runtime::{AnswersById, interrupt_id};
use crate::error::{Error, Result};

/// A task's answers so far, by interrupt id, as its resume write holds
/// them. An array answers the task's own `interrupt` calls by index (the
/// k-th value answers `interrupt_id(task_id, k)`); an object maps interrupt
/// ids to answers, which a task running a subgraph needs: the interrupts it
/// records are its subgraph's, under their own ids. A value of another
/// shape is an [`Error::Decode`] naming the task and its checkpoint
/// `checkpoint_id` (never answers silently dropped, which would ask again).
pub(crate) fn stored_answers(
    checkpoint_id: &str,
    task_id: &str,
    value: &Value,
) -> Result<AnswersById> {
    match value {
        Value::Array(values) => Ok(values
            .iter()
            .enumerate()
            .map(|(k, v)| (interrupt_id(task_id, k), v.clone()))
            .collect()),
        Value::Object(map) => Ok(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
        other => Err(Error::decode(
            task_record("the resume answers", checkpoint_id, task_id),
            format!("expected an array or an object, found {}", shape(other)),
        )),
    }
}

/// Names `what` of task `task_id` at checkpoint `checkpoint_id`, for an
/// error about its stored records.
pub(crate) fn task_record(what: &str, checkpoint_id: &str, task_id: &str) -> String {
    format!("{what} of task `{task_id}` at checkpoint `{checkpoint_id}`")
}

/// The JSON kind of `value`, for an error message.
fn shape(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The stored form of a task's `answers`: an array when they answer the
/// task's own first `interrupt` calls, in order (the form a task without a
/// subgraph always has), an object by id otherwise.
pub(crate) fn encode_answers(task_id: &str, answers: &AnswersById) -> Value {
    let by_index: Option<Vec<Value>> = (0..answers.len())
        .map(|k| answers.get(&interrupt_id(task_id, k)).cloned())
        .collect();
    match by_index {
        Some(values) => Value::Array(values),
        None => Value::Object(answers.clone().into_iter().collect()),
    }
}
