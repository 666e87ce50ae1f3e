//! Where a streamed run sends its events: its own (states, updates, task
//! starts and results, checkpoints) and those its nodes send through their
//! [`StreamWriter`], all down one channel, so the consumer gets them in the
//! order they happened. An event no mode asks for is never built.

use std::sync::Arc;

use tokio::sync::mpsc::{UnboundedSender, WeakUnboundedSender};

use crate::checkpoint::{Checkpoint, CheckpointMetadata, CheckpointRef};
use crate::engine::algebra::{Finished, TaskNode, TaskOutput, next_tasks};
use crate::engine::spec::Spec;
use crate::engine::stream::{NestedSink, NodeEvent, NodeEvents, StreamDropped};
use crate::engine::{
    CheckpointEvent, StreamEvent, StreamItem, StreamMode, StreamModes, StreamWriter, SubgraphEvent,
    TaskOutcome, TaskRef,
};
use crate::error::Result;
use crate::state::GraphState;

/// Where a streamed run sends its events, and which ones it wants.
pub(crate) struct Sink<S: GraphState> {
    to: To<S>,
    modes: StreamModes,
    /// The run's checkpoint namespace, which tags task and node events.
    namespace: String,
    /// The way the nodes' writers send (made once per run, when the modes
    /// want node events).
    node_events: Option<Arc<dyn NodeEvents>>,
}

/// Where a sink's events go.
enum To<S: GraphState> {
    /// The run's own stream.
    Stream(UnboundedSender<StreamItem<S>>),
    /// A subgraph's run, streamed into the stream of the run it runs
    /// within, as [`SubgraphEvent`]s.
    Parent(NestedSink),
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
            to: To::Stream(tx),
            modes,
            namespace: namespace.to_owned(),
            node_events,
        }
    }

    /// A subgraph's sink, at `namespace`, sending into the stream of the run
    /// it runs within. Its nodes' own events go through their writers.
    pub fn nested(parent: NestedSink, namespace: &str) -> Self {
        Sink {
            modes: parent.modes,
            to: To::Parent(parent),
            namespace: namespace.to_owned(),
            node_events: None,
        }
    }

    /// Whether this is the run's own stream (not a subgraph's, sent into
    /// its parent's).
    pub fn is_own(&self) -> bool {
        matches!(self.to, To::Stream(_))
    }

    /// Sends an event; a stream dropped meanwhile is no error (the run then
    /// stops at its next await, or at its next step boundary).
    pub fn send(&self, event: StreamEvent<S>) {
        match &self.to {
            To::Stream(tx) => {
                let _ = tx.send(StreamItem::Event(event));
            }
            To::Parent(parent) => {
                if let Some(event) = self.as_subgraph_event(event) {
                    (parent.emit)(event);
                }
            }
        }
    }

    /// `event` of a subgraph's run, its state and updates as JSON; `None`
    /// for what the parent's run reports itself (an interrupt) or its
    /// nodes' writers send, and, with a warning, for a value JSON cannot
    /// hold (it would not have been stored either).
    fn as_subgraph_event(&self, event: StreamEvent<S>) -> Option<SubgraphEvent> {
        fn json<T: serde::Serialize>(what: &str, value: &T) -> Option<serde_json::Value> {
            serde_json::to_value(value)
                .map_err(
                    |e| tracing::warn!(error = %e, "a subgraph's {what} is not JSON: not streamed"),
                )
                .ok()
        }
        let namespace = self.namespace.clone();
        Some(match event {
            StreamEvent::Values { step, values } => SubgraphEvent::Values {
                namespace,
                step,
                values: json("state", &values)?,
            },
            StreamEvent::Update { step, node, update } => SubgraphEvent::Update {
                namespace,
                step,
                node,
                update: json("update", &update)?,
            },
            StreamEvent::TaskStart {
                task,
                input,
                payload,
            } => SubgraphEvent::TaskStart {
                task,
                input: json("state", &input)?,
                payload,
            },
            StreamEvent::TaskResult { task, result } => SubgraphEvent::TaskResult {
                task,
                result: match result {
                    TaskOutcome::Update(u) => TaskOutcome::Update(json("update", &u)?),
                    TaskOutcome::Error(e) => TaskOutcome::Error(e),
                    TaskOutcome::Interrupted(i) => TaskOutcome::Interrupted(i),
                },
            },
            StreamEvent::Checkpoint(c) => {
                let c = *c;
                SubgraphEvent::Checkpoint(Box::new(CheckpointEvent {
                    namespace: c.namespace,
                    config: c.config,
                    parent_config: c.parent_config,
                    metadata: c.metadata,
                    values: json("state", &c.values)?,
                    next: c.next,
                    commit_order: c.commit_order,
                }))
            }
            StreamEvent::Subgraph(event) => *event,
            StreamEvent::Interrupted(_)
            | StreamEvent::Custom { .. }
            | StreamEvent::Message { .. } => return None,
        })
    }

    /// How the subgraphs this run's tasks run stream into this stream, if
    /// it asks for subgraphs: as this run's own events do (a subgraph of a
    /// subgraph, into the same stream).
    pub fn nested_sink(&self) -> Option<NestedSink> {
        if !self.modes.subgraphs() {
            return None;
        }
        match &self.to {
            To::Stream(tx) => {
                let weak = tx.downgrade();
                Some(NestedSink {
                    emit: Arc::new(move |event| {
                        if let Some(tx) = weak.upgrade() {
                            let event = StreamEvent::Subgraph(Box::new(event));
                            let _ = tx.send(StreamItem::Event(event));
                        }
                    }),
                    modes: self.modes,
                    dropped: self.dropped(),
                })
            }
            To::Parent(parent) => Some(parent.clone()),
        }
    }

    /// Whether the stream was dropped (no one receives the events).
    pub fn is_dropped(&self) -> bool {
        match &self.to {
            To::Stream(tx) => tx.is_closed(),
            To::Parent(parent) => parent.dropped.get(),
        }
    }

    /// [`is_dropped`](Self::is_dropped), for the subgraphs the run's tasks
    /// run (the channel held weakly: it says dropped once the run ended).
    pub fn dropped(&self) -> StreamDropped {
        match &self.to {
            To::Stream(tx) => {
                let weak = tx.downgrade();
                StreamDropped(Arc::new(move || {
                    weak.upgrade().is_none_or(|tx| tx.is_closed())
                }))
            }
            To::Parent(parent) => parent.dropped.clone(),
        }
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
