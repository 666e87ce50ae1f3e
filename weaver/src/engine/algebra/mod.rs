//! The step algebra: the rules of a super-step as plain functions over a
//! checkpoint, its pending writes and the typed state, with no I/O.
//!
//! Which tasks a checkpoint triggers ([`tasks`]); what a task's result
//! writes, and what stored writes say a task did ([`writes`]); applying one
//! step's writes through the reducers with the version bump ([`apply`]);
//! which interrupts wait for an answer, and how a resume answers them
//! ([`interrupts`]). The run loop, `get_state`, `update_state` and the
//! replay of finished tasks all go through these functions.

pub(crate) mod answers;
pub(crate) mod apply;
pub(crate) mod counters;
pub(crate) mod interrupts;
pub(crate) mod route;
pub(crate) mod tasks;
pub(crate) mod writes;

#[cfg(test)]
mod tests;

pub(crate) use apply::{Author, advance, apply_done, apply_finished, apply_writes, finished_tasks};
pub(crate) use counters::{has_successor, next_commit_order, next_step};
pub(crate) use interrupts::{Answer, answer, answered, raised_interrupts, static_stops};
pub(crate) use route::route;
pub(crate) use tasks::{
    TaskNode, next_tasks, prepare_tasks, push_task_id, task_id, trigger_of,
    triggered as triggered_tasks,
};
pub(crate) use writes::{
    Ending, Finished, TaskOutput, TaskRun, failure_message, finish_task, replay_task,
};
