//! Where a streamed run sends its events.

use tokio::sync::mpsc::UnboundedSender;

use crate::engine::algebra::{TaskNode, TaskOutput};
use crate::engine::spec::Spec;
use crate::engine::{StreamEvent, StreamItem, StreamMode};
use crate::state::GraphState;

/// Where a streamed run sends its events, and which ones it wants.
pub(crate) struct Sink<S: GraphState> {
    tx: UnboundedSender<StreamItem<S>>,
    mode: StreamMode,
}

impl<S: GraphState> Sink<S> {
    /// Sends the events `mode` asks for to `tx`.
    pub fn new(tx: UnboundedSender<StreamItem<S>>, mode: StreamMode) -> Self {
        Sink { tx, mode }
    }

    /// Sends an event; a stream dropped meanwhile is no error (the run then
    /// stops at its next await).
    pub fn send(&self, event: StreamEvent<S>) {
        let _ = self.tx.send(StreamItem::Event(event));
    }
}

/// Streams `state` at `step`, when the run is streamed with a mode that
/// wants states (the state is cloned only then).
pub(crate) fn send_state<S: GraphState>(sink: &Option<Sink<S>>, step: i64, state: &S) {
    if let Some(sink) = sink.as_ref().filter(|s| s.mode.has_values()) {
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
    let Some(sink) = sink.as_ref().filter(|s| s.mode.has_updates()) else {
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
