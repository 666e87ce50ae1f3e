//! Where a streamed run sends its events: its own (states, updates, task
//! starts and results, checkpoints) and those its nodes send through their
//! [`StreamWriter`], all down one channel, so the consumer gets them in the
//! order they happened. An event no mode asks for is never built.

use std::sync::Arc;

use tokio::sync::mpsc::{UnboundedSender, WeakUnboundedSender};

use crate::checkpoint::{Checkpoint, CheckpointMetadata, CheckpointRef};
use crate::engine::algebra::{Finished, TaskNode, TaskOutput, next_tasks};
use crate::engine::spec::Spec;
use crate::engine::stream::{NodeEvent, NodeEvents};
use crate::engine::{
    CheckpointEvent, StreamEvent, StreamItem, StreamMode, StreamModes, StreamWriter, TaskOutcome,
    TaskRef,
};
use crate::error::Result;
use crate::state::GraphState;

/// Where a streamed run sends its events, and which ones it wants.
pub(crate) struct Sink<S: GraphState> {
    tx: UnboundedSender<StreamItem<S>>,
    modes: StreamModes,
    /// The run's checkpoint namespace, which tags task and node events.
    namespace: String,
    /// The way the nodes' writers send (made once per run, when the modes
    /// want node events).
    node_events: Option<Arc<dyn NodeEvents>>,
}

/// Whether the stream of the run a subgraph runs within was dropped: the
/// subgraph's run then stops at its next step boundary too, as the streamed
/// run does (its task was aborted, and stops at its next await).
#[derive(Clone)]
pub(crate) struct StreamDropped(Arc<dyn Fn() -> bool + Send + Sync>);

impl StreamDropped {
    /// Whether the stream was dropped.
    pub fn get(&self) -> bool {
        (self.0)()
    }
}

impl std::fmt::Debug for StreamDropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StreamDropped").field(&self.get()).finish()
    }
}

/// A node's events, made stream events on the run's channel. It holds the
/// channel weakly: a writer a node kept past its run must not keep the
/// stream from ending.
struct Forward<S: GraphState>(WeakUnboundedSender<StreamItem<S>>);

impl<S: GraphState> NodeEvents for Forward<S> {
    fn send(&self, task: TaskRef, event: NodeEvent) {
        let event = match event {
            NodeEvent::Custom(value) => StreamEvent::Custom { task, value },
            NodeEvent::Message(chunk) => StreamEvent::Message { task, chunk },
        };
        if let Some(tx) = self.0.upgrade() {
            let _ = tx.send(StreamItem::Event(event));
        }
    }
}

impl<S: GraphState> Sink<S> {
    /// Sends the events `modes` asks for to `tx`, tagging those of tasks
    /// with `namespace`.
    pub fn new(tx: UnboundedSender<StreamItem<S>>, modes: StreamModes, namespace: &str) -> Self {
        let node_events = (modes.contains(StreamMode::Custom)
            || modes.contains(StreamMode::Messages))
        .then(|| Arc::new(Forward(tx.downgrade())) as Arc<dyn NodeEvents>);
        Sink {
            tx,
            modes,
            namespace: namespace.to_owned(),
            node_events,
        }
    }

    /// Sends an event; a stream dropped meanwhile is no error (the run then
    /// stops at its next await, or at its next step boundary).
    pub fn send(&self, event: StreamEvent<S>) {
        let _ = self.tx.send(StreamItem::Event(event));
    }

    /// Whether the stream was dropped (no one receives the events).
    pub fn is_dropped(&self) -> bool {
        self.tx.is_closed()
    }

    /// [`is_dropped`](Self::is_dropped), for the subgraphs the run's tasks
    /// run (the channel held weakly: it says dropped once the run ended).
    pub fn dropped(&self) -> StreamDropped {
        let weak = self.tx.downgrade();
        StreamDropped(Arc::new(move || {
            weak.upgrade().is_none_or(|tx| tx.is_closed())
        }))
    }

    fn wants(&self, mode: StreamMode) -> bool {
        self.modes.contains(mode)
    }

    fn task(&self, node: &str, step: i64, id: &str) -> TaskRef {
        TaskRef {
            namespace: self.namespace.clone(),
            node: node.to_owned(),
            step,
            id: id.to_owned(),
        }
    }
}

/// The sink, if the run is streamed with `mode`.
fn wanting<S: GraphState>(sink: &Option<Sink<S>>, mode: StreamMode) -> Option<&Sink<S>> {
    sink.as_ref().filter(|s| s.wants(mode))
}

/// Streams `state` at `step`, when the run is streamed with a mode that
/// wants states (the state is cloned only then).
pub(crate) fn send_state<S: GraphState>(sink: &Option<Sink<S>>, step: i64, state: &S) {
    if let Some(sink) = wanting(sink, StreamMode::Values) {
        sink.send(StreamEvent::Values {
            step,
            values: state.clone(),
        });
    }
}

/// Streams a finished task's update, when the run is streamed with a mode
/// that wants updates. The START pseudo-task only takes in the input, which
/// LangGraph does not stream as a node's update: it is skipped.
pub(crate) fn send_update<S: GraphState>(
    sink: &Option<Sink<S>>,
    step: i64,
    spec: &Spec<S>,
    node: TaskNode,
    output: &TaskOutput<S>,
) {
    let Some(sink) = wanting(sink, StreamMode::Updates) else {
        return;
    };
    if node.node().is_none() {
        return;
    }
    sink.send(StreamEvent::Update {
        step,
        node: spec.name_of(node).to_owned(),
        update: output.update.clone(),
    });
}

/// The writer task `id` of `node` streams its own events through: one that
/// does nothing unless the run wants custom events or message chunks.
pub(crate) fn stream_writer<S: GraphState>(
    sink: &Option<Sink<S>>,
    spec: &Spec<S>,
    node: TaskNode,
    step: i64,
    id: &str,
) -> StreamWriter {
    let Some(sink) = sink.as_ref() else {
        return StreamWriter::default();
    };
    match &sink.node_events {
        Some(events) if node.node().is_some() => {
            let task = sink.task(spec.name_of(node), step, id);
            StreamWriter::new(events.clone(), task, sink.modes)
        }
        _ => StreamWriter::default(),
    }
}

/// Streams that task `id` of `node` starts on `state`, when the run wants
/// task events (the state is cloned only then). The START pseudo-task is
/// not a node, and LangGraph hides it: skipped.
pub(crate) fn send_task_start<S: GraphState>(
    sink: &Option<Sink<S>>,
    spec: &Spec<S>,
    node: TaskNode,
    step: i64,
    id: &str,
    state: &S,
    payload: Option<&serde_json::Value>,
) {
    if let Some(sink) = wanting(sink, StreamMode::Tasks).filter(|_| node.node().is_some()) {
        sink.send(StreamEvent::TaskStart {
            task: sink.task(spec.name_of(node), step, id),
            input: state.clone(),
            payload: payload.cloned(),
        });
    }
}

/// Streams how task `id` of `node` ended, when the run wants task events.
pub(crate) fn send_task_result<S: GraphState>(
    sink: &Option<Sink<S>>,
    spec: &Spec<S>,
    node: TaskNode,
    step: i64,
    id: &str,
    finished: &Finished<S>,
) {
    let Some(sink) = wanting(sink, StreamMode::Tasks).filter(|_| node.node().is_some()) else {
        return;
    };
    let result = match finished {
        Finished::Succeeded(output) => TaskOutcome::Update(output.update.clone()),
        Finished::Failed(e) => TaskOutcome::Error(e.to_string()),
        Finished::Interrupted(i) => TaskOutcome::Interrupted(i.clone()),
        // Not this graph's result: the parent's node reports it.
        Finished::Parent(_) => return,
    };
    sink.send(StreamEvent::TaskResult {
        task: sink.task(spec.name_of(node), step, id),
        result,
    });
}

/// Streams the checkpoint the run just stored at `at` (its lineage parent
/// `parent`) as commit `order`, when the run wants checkpoints; `metadata`
/// and `values` (the state it holds) are called only then.
#[allow(clippy::too_many_arguments)]
pub(crate) fn send_checkpoint<S: GraphState>(
    sink: &Option<Sink<S>>,
    spec: &Spec<S>,
    at: &CheckpointRef,
    parent: Option<&str>,
    checkpoint: &Checkpoint,
    order: u64,
    metadata: impl FnOnce() -> CheckpointMetadata,
    values: impl FnOnce() -> Result<S>,
) -> Result<()> {
    let Some(sink) = wanting(sink, StreamMode::Checkpoints) else {
        return Ok(());
    };
    let next = next_tasks(spec, checkpoint)?
        .into_iter()
        .map(|node| spec.name_of(node).to_owned())
        .collect();
    sink.send(StreamEvent::Checkpoint(Box::new(CheckpointEvent {
        namespace: sink.namespace.clone(),
        config: at.at(checkpoint.id.clone()).into(),
        parent_config: parent.map(|id| at.at(id.to_owned()).into()),
        metadata: metadata(),
        values: values()?,
        next,
        commit_order: order,
    })));
    Ok(())
}
