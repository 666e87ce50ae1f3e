//! How a task's answers to its interrupts are stored in its resume write.

use serde_json::Value;

use crate::engine::runtime::{AnswersById, interrupt_id};

/// A task's answers so far, by interrupt id, as its resume write holds
/// them. An array answers the task's own `interrupt` calls by index (the
/// k-th value answers `interrupt_id(task_id, k)`); an object maps interrupt
/// ids to answers, which a task running a subgraph needs: the interrupts it
/// records are its subgraph's, under their own ids. A value of another
/// shape answers nothing (the node asks again).
pub(crate) fn stored_answers(task_id: &str, value: &Value) -> AnswersById {
    match value {
        Value::Array(values) => values
            .iter()
            .enumerate()
            .map(|(k, v)| (interrupt_id(task_id, k), v.clone()))
            .collect(),
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        _ => AnswersById::new(),
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
