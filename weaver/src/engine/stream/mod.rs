//! What a streamed run yields: the stream modes, the events, and the
//! writer a node streams its own events through.

mod modes;
mod nested;
mod run;
mod writer;

use serde_json::Value;

use crate::checkpoint::CheckpointMetadata;
use crate::config::RunConfig;
use crate::engine::{Interrupt, Outcome};
use crate::error::Result;
use crate::state::GraphState;

pub use modes::{StreamMode, StreamModes};
pub use run::RunStream;
pub use writer::{MessageChunk, StreamWriter};

pub(crate) use nested::{NestedSink, StreamDropped};
pub(crate) use writer::{NodeEvent, NodeEvents};

/// The task an event came from.
///
/// `namespace` is the checkpoint namespace of the graph the task ran in:
/// `""` for the root graph, `"<node>:<task id>"` for a subgraph run by
/// that task (`|`-joined when nested deeper). A subgraph's nodes stream
/// their custom values and message chunks into the parent's stream, each
/// tagged with its own task.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct TaskRef {
    /// The graph's namespace (`""` at the root).
    pub namespace: String,
    /// The node the task runs.
    pub node: String,
    /// The step it runs in (as in checkpoint metadata).
    pub step: i64,
    /// The task id (stable across a resume of the same step; the one
    /// [`Runtime::task_id`](crate::Runtime::task_id) returns).
    pub id: String,
}

/// How a task ended, in a [`StreamEvent::TaskResult`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TaskOutcome<U> {
    /// It returned this update.
    Update(U),
    /// It failed; the error as the run reports it.
    Error(String),
    /// It paused for input.
    Interrupted(Vec<Interrupt>),
}

/// A checkpoint as the run stored it, in a [`StreamEvent::Checkpoint`]:
/// what [`get_state_history`](crate::CompiledGraph::get_state_history)
/// later lists for it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CheckpointEvent<S> {
    /// The graph's namespace (`""` at the root).
    pub namespace: String,
    /// Addresses the checkpoint (thread, namespace, checkpoint id).
    pub config: RunConfig,
    /// Its lineage parent, if it has one.
    pub parent_config: Option<RunConfig>,
    /// Its metadata, as stored.
    pub metadata: CheckpointMetadata,
    /// The state it holds.
    pub values: S,
    /// The nodes that run from it, in task order (`__start__` for a
    /// checkpoint that holds an input).
    pub next: Vec<String>,
    /// Its position in its namespace's commit order, as
    /// [`StateSnapshot::commit_order`](crate::engine::StateSnapshot::commit_order)
    /// later shows it.
    pub commit_order: u64,
}

impl<S> CheckpointEvent<S> {
    /// The checkpoint's id.
    pub fn checkpoint_id(&self) -> &str {
        self.config.get_checkpoint_id().unwrap_or_default()
    }
}

/// One event of [`CompiledGraph::stream`](crate::CompiledGraph::stream);
/// which ones come depends on the [`StreamModes`] asked for.
///
/// More kinds of events may come in later versions: match with a
/// wildcard arm.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StreamEvent<S: GraphState> {
    /// The full state after a step (`step` as in checkpoint metadata). The
    /// first one is the state once the input is taken in (step 0 of a new
    /// thread); a run that continues or resumes from a checkpoint
    /// (`Input::Continue`, `Input::Resume`) first yields the state it starts
    /// from, as LangGraph does (a resume that is refused, running nothing,
    /// yields only its error).
    Values {
        /// The step.
        step: i64,
        /// The state.
        values: S,
    },
    /// One node's update in a step, sent as soon as the node finishes (so a
    /// node that finished is streamed even if a sibling then fails or
    /// interrupts the step; a node whose output came from stored pending
    /// writes on resume is streamed too). Taking in the input is not a node:
    /// as in LangGraph, it has no update event (it shows in the first
    /// `Values`).
    Update {
        /// The step the node ran in.
        step: i64,
        /// The node.
        node: String,
        /// What it wrote.
        update: S::Update,
    },
    /// The run paused. Sent once what the run wrote is stored (under any
    /// durability), so a consumer may stop reading here and resume later.
    Interrupted(Vec<Interrupt>),
    /// A value a node streamed with
    /// [`StreamWriter::custom`] ([`StreamMode::Custom`]).
    Custom {
        /// The task that sent it.
        task: TaskRef,
        /// The value.
        value: Value,
    },
    /// A piece of a message a node streamed with
    /// [`StreamWriter::message_chunk`] ([`StreamMode::Messages`]), such as
    /// a model's token.
    Message {
        /// The task that sent it.
        task: TaskRef,
        /// The chunk.
        chunk: MessageChunk,
    },
    /// A task is about to run ([`StreamMode::Tasks`]): once each time a
    /// run runs it, so a task that runs again on resume starts again (the
    /// attempts of its [`RetryPolicy`](crate::RetryPolicy) run within one
    /// start, as in LangGraph, and its message chunks and custom events
    /// come under the same task). A task replayed from its stored writes
    /// does not run, and has no task events.
    TaskStart {
        /// The task.
        task: TaskRef,
        /// The state it runs on.
        input: S,
        /// The payload of the [`Send`](crate::Send) that made the task, for
        /// a node run by sends (it runs on this instead of the state);
        /// `None` for any other task.
        payload: Option<serde_json::Value>,
    },
    /// A task ended ([`StreamMode::Tasks`]), sent as it ends.
    TaskResult {
        /// The task.
        task: TaskRef,
        /// How it ended.
        result: TaskOutcome<S::Update>,
    },
    /// The run stored a checkpoint ([`StreamMode::Checkpoints`]): one event
    /// per checkpoint stored, none without a checkpointer, and under
    /// [`Durability::Exit`](crate::Durability::Exit) only the one stored
    /// when the run ends. Under [`Durability::Async`](crate::Durability::Async)
    /// the event comes when the checkpoint is queued for its background
    /// write: if that write then fails, the run fails with its error and
    /// the checkpoint is not stored. A step's checkpoint event comes before
    /// its state ([`StreamEvent::Values`]), where LangGraph sends the
    /// values first.
    Checkpoint(Box<CheckpointEvent<S>>),
    /// An event of a subgraph's run, when the stream asks for subgraphs
    /// ([`StreamModes::with_subgraphs`], LangGraph's `subgraphs=True`).
    Subgraph(Box<SubgraphEvent>),
}

/// An event of a subgraph's run ([`StreamEvent::Subgraph`]): those the
/// stream's modes ask for, from a subgraph a task runs at any depth, each
/// with the subgraph's namespace (`"<node>:<task id>"`, `|`-joined when
/// nested deeper). The subgraph's state and updates are JSON, as stored:
/// its state type may not be the parent's. Its interrupts reach the
/// parent's run, which pauses and streams them as its own.
///
/// More kinds of events may come in later versions: match with a
/// wildcard arm.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum SubgraphEvent {
    /// The subgraph's full state after a step ([`StreamMode::Values`]).
    Values {
        /// The subgraph's namespace.
        namespace: String,
        /// The step, in the subgraph's run.
        step: i64,
        /// The state.
        values: Value,
    },
    /// One of the subgraph's nodes' update ([`StreamMode::Updates`]).
    Update {
        /// The subgraph's namespace.
        namespace: String,
        /// The step, in the subgraph's run.
        step: i64,
        /// The node.
        node: String,
        /// What it wrote.
        update: Value,
    },
    /// A task of the subgraph is about to run ([`StreamMode::Tasks`]).
    TaskStart {
        /// The task (its namespace is the subgraph's).
        task: TaskRef,
        /// The state it runs on.
        input: Value,
        /// The payload of the send that made the task, if one did.
        payload: Option<Value>,
    },
    /// A task of the subgraph ended ([`StreamMode::Tasks`]).
    TaskResult {
        /// The task (its namespace is the subgraph's).
        task: TaskRef,
        /// How it ended.
        result: TaskOutcome<Value>,
    },
    /// The subgraph's run stored a checkpoint ([`StreamMode::Checkpoints`]).
    Checkpoint(Box<CheckpointEvent<Value>>),
}

impl SubgraphEvent {
    /// The namespace of the subgraph it came from.
    ///
    /// ```
    /// use weaver::SubgraphEvent;
    ///
    /// fn label(e: &SubgraphEvent) -> String {
    ///     // `research:<task id>`: the node that ran the subgraph, first.
    ///     let node = e.namespace().split(':').next().unwrap_or_default();
    ///     format!("[{node}]")
    /// }
    /// # let _ = label;
    /// ```
    pub fn namespace(&self) -> &str {
        match self {
            SubgraphEvent::Values { namespace, .. } | SubgraphEvent::Update { namespace, .. } => {
                namespace
            }
            SubgraphEvent::TaskStart { task, .. } | SubgraphEvent::TaskResult { task, .. } => {
                &task.namespace
            }
            SubgraphEvent::Checkpoint(c) => &c.namespace,
        }
    }
}

/// An item of [`RunStream`](crate::RunStream).
#[derive(Debug)]
pub enum StreamItem<S: GraphState> {
    /// An event of the run.
    Event(StreamEvent<S>),
    /// The run's result (the last item).
    Done(Result<Outcome<S>>),
}
