//! Task results to pending writes and back: what a finished task stores,
//! and what a task's stored writes say it did.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::route::route;
use super::tasks::TaskNode;
use crate::checkpoint::{
    ERROR_CHANNEL, INTERRUPT_CHANNEL, NO_WRITES_CHANNEL, PendingWrite, STATE_VERSION_WRITE,
};
use crate::engine::Interrupt;
use crate::engine::node::{Command, ParentCommand};
use crate::engine::runtime::InterruptSignal;
use crate::engine::send::{SENDS_CHANNEL, StoredSend};
use crate::engine::spec::{Spec, Target};
use crate::engine::values::encode_object;
use crate::error::{BoxError, Error, Result};
use crate::state::GraphState;

/// What one finished task contributes to its step.
#[derive(Debug)]
pub(crate) struct TaskOutput<S: GraphState> {
    /// The node's update.
    pub update: S::Update,
    /// The channels the update writes.
    pub channels: Vec<String>,
    /// The targets the task triggers.
    pub triggers: Vec<Target>,
    /// The sends its routers made: tasks of the next step.
    pub sends: Vec<StoredSend>,
}

/// Whether a task's stored writes show it finished successfully: only a
/// successful attempt stores ordinary writes (or the no-writes marker), so
/// an error or interrupt an earlier attempt left beside them is history.
pub(crate) fn succeeded(writes: &[&PendingWrite]) -> bool {
    writes
        .iter()
        .any(|w| w.idx >= 0 || w.channel == NO_WRITES_CHANNEL)
}

/// Rebuilds a task's output from the ordinary writes it left before: channel
/// writes decode into the update, `branch:to:` writes into its triggers.
pub(crate) fn replay_task<S: GraphState>(
    spec: &Spec<S>,
    node: TaskNode,
    writes: &[&PendingWrite],
) -> Result<TaskOutput<S>> {
    let mut update = Map::new();
    let mut triggers = Vec::new();
    let mut sends = Vec::new();
    for w in writes.iter().filter(|w| w.idx >= 0) {
        if w.channel == STATE_VERSION_WRITE {
            // Which state version the other writes are in: read when they
            // were upgraded, no write of the state.
            continue;
        } else if w.channel == SENDS_CHANNEL {
            sends = Vec::<StoredSend>::deserialize(&w.value)
                .map_err(|e| Error::decode(format!("the sends of `{}`", spec.name_of(node)), e))?;
        } else if let Some(name) = w.channel.strip_prefix("branch:to:") {
            let t = spec.resolve(name).ok_or_else(|| {
                Error::decode(
                    format!("pending write of `{}`", spec.name_of(node)),
                    format!("unknown node `{name}`"),
                )
            })?;
            triggers.push(t);
        } else {
            update.insert(w.channel.clone(), w.value.clone());
        }
    }
    let channels = update.keys().cloned().collect();
    let update = serde_path_to_error::deserialize(Value::Object(update)).map_err(|e| {
        Error::decode(
            format!(
                "pending write of `{}` at `{}`",
                spec.name_of(node),
                e.path()
            ),
            e.inner(),
        )
    })?;
    Ok(TaskOutput {
        update,
        channels,
        triggers,
        sends,
    })
}

/// How a task's run ended, as the runner reports it.
#[derive(Debug)]
pub(crate) enum Ending<U> {
    /// The node returned (or its cached command was used).
    Returned(Command<U>),
    /// The node paused for input.
    Interrupted(InterruptSignal),
    /// The node sent a command to the parent graph.
    Parent(ParentCommand),
    /// The node failed: [`Error::NodeFailed`], [`Error::NodeTimeout`] or
    /// [`Error::RetriesExhausted`] of its node (or an error computing its
    /// cache key).
    Failed(Error),
}

/// A task's run: how it ended and the attempts it took.
#[derive(Debug)]
pub(crate) struct TaskRun<U> {
    pub end: Ending<U>,
    /// The attempts made (0 when a cached result was used).
    pub attempts: u32,
    /// The last failure a later attempt recovered from (its message).
    pub recovered: Option<String>,
}

impl<U> TaskRun<U> {
    /// A run of one attempt.
    pub fn once(end: Ending<U>) -> Self {
        TaskRun {
            end,
            attempts: 1,
            recovered: None,
        }
    }
}

/// How a task of a step ended.
#[derive(Debug)]
pub(crate) enum Finished<S: GraphState> {
    /// It returned; its output joins the step's writes.
    Succeeded(TaskOutput<S>),
    /// It failed (an error naming its node): the step fails.
    Failed(Error),
    /// It paused for input (at a subgraph's interrupts, maybe several).
    Interrupted(Vec<Interrupt>),
    /// It sent a command to the parent graph: the run stops, and the
    /// task leaves no writes.
    Parent(ParentCommand),
}

/// Turns how task `id` (of `node`, run on `state`) ran into how it ended
/// and the pending writes that record it. A success's writes are built only
/// when `persisting` (nothing reads them without a checkpointer). A failure
/// is recorded with the attempts made; so is a success that took several
/// (with the failure it recovered from).
pub(crate) fn finish_task<S: GraphState>(
    spec: &Spec<S>,
    state: &S,
    node: TaskNode,
    id: &str,
    run: TaskRun<S::Update>,
    persisting: bool,
) -> (Finished<S>, Vec<PendingWrite>) {
    let name = spec.name_of(node);
    let attempts = run.attempts;
    let failed = |error: Error| {
        let writes = error_writes(id, name, &failure_message(&error), attempts);
        (Finished::Failed(error), writes)
    };
    let node_failed = |e: BoxError| {
        failed(Error::NodeFailed {
            node: name.to_owned(),
            source: e,
        })
    };
    match run.end {
        Ending::Returned(cmd) => match output_of(spec, state, node, cmd) {
            Ok((output, update)) => {
                let mut writes = Vec::new();
                if persisting {
                    writes = success_writes(spec, id, node, &output, update);
                    if let Some(message) = &run.recovered {
                        writes.extend(error_writes(id, name, message, attempts));
                    }
                }
                (Finished::Succeeded(output), writes)
            }
            Err(e) => failed(e),
        },
        Ending::Interrupted(signal) => match signal.unencodable {
            Some(reason) => node_failed(Error::encode("interrupt value", reason).into()),
            None => {
                let interrupts = signal.into_interrupts(name);
                let writes = PendingWrite::for_task(
                    id,
                    name,
                    [(INTERRUPT_CHANNEL.to_owned(), json!(interrupts))],
                );
                (Finished::Interrupted(interrupts), writes)
            }
        },
        Ending::Parent(command) => (Finished::Parent(command), Vec::new()),
        // The run stopped inside the task's subgraph: the task is left to
        // run again, as one not started at a step boundary.
        Ending::Failed(e) if e.stops_run() => (Finished::Failed(e), Vec::new()),
        Ending::Failed(e) => failed(e),
    }
}

/// What a task's error write says of `error`: the node's own message for a
/// node's failure (not the run's "node `x` failed: ..."), the last
/// attempt's for exhausted retries.
pub(crate) fn failure_message(error: &Error) -> String {
    match error {
        Error::NodeFailed { source, .. } => source.to_string(),
        Error::RetriesExhausted { last, .. } => failure_message(last),
        other => other.to_string(),
    }
}

/// The error write a failed task leaves: its message and the attempts made.
fn error_writes(id: &str, name: &str, message: &str, attempts: u32) -> Vec<PendingWrite> {
    PendingWrite::for_task(
        id,
        name,
        [(
            ERROR_CHANNEL.to_owned(),
            json!({"message": message, "attempts": attempts}),
        )],
    )
}

/// Turns a node's command into its step output and the update's JSON form.
fn output_of<S: GraphState>(
    spec: &Spec<S>,
    state: &S,
    node: TaskNode,
    cmd: Command<S::Update>,
) -> Result<(TaskOutput<S>, Map<String, Value>)> {
    let routed = route(spec, state, node, &cmd)?;
    // The update's `Serialize` is user code too: a panic there fails the
    // task (`encode_object` catches it), as a router's does.
    let update = encode_object("node update", &cmd.update).map_err(|e| Error::NodeFailed {
        node: spec.name_of(node).to_owned(),
        source: e.into(),
    })?;
    let channels = update.keys().cloned().collect();
    Ok((
        TaskOutput {
            update: cmd.update,
            channels,
            triggers: routed.targets,
            sends: routed.sends,
        },
        update,
    ))
}

/// The writes a successful task leaves: one per channel, one per triggered node.
fn success_writes<S: GraphState>(
    spec: &Spec<S>,
    task: &str,
    node: TaskNode,
    output: &TaskOutput<S>,
    update: Map<String, Value>,
) -> Vec<PendingWrite> {
    let mut writes: Vec<(String, Value)> = update.into_iter().collect();
    for t in &output.triggers {
        if let Target::Node(i) = t {
            writes.push((spec.nodes[*i].trigger.clone(), Value::Null));
        }
    }
    if !output.sends.is_empty() {
        writes.push((SENDS_CHANNEL.to_owned(), json!(output.sends)));
    }
    if writes.is_empty() {
        writes.push((NO_WRITES_CHANNEL.to_owned(), Value::Null));
    }
    PendingWrite::for_task(task, spec.name_of(node), writes)
}
