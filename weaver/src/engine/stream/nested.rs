//! How a subgraph's run reaches the stream of the run it runs within:
//! whether that stream was dropped, and where its own events go when the
//! stream asks for subgraphs.

use std::sync::Arc;

use super::{StreamModes, SubgraphEvent};

/// How a subgraph's run streams into the stream of the run it runs within
/// (asked with [`StreamModes::with_subgraphs`]): each event made a
/// [`SubgraphEvent`] and sent at once, in order with the parent's own.
#[derive(Clone)]
pub(crate) struct NestedSink {
    pub(crate) emit: Arc<dyn Fn(SubgraphEvent) + Send + Sync>,
    pub(crate) modes: StreamModes,
    pub(crate) dropped: StreamDropped,
}

impl std::fmt::Debug for NestedSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NestedSink")
            .field("modes", &self.modes)
            .finish_non_exhaustive()
    }
}

/// Whether the stream of the run a subgraph runs within was dropped: the
/// subgraph's run then stops at its next step boundary too, as the streamed
/// run does (its task was aborted, and stops at its next await).
#[derive(Clone)]
pub(crate) struct StreamDropped(pub(crate) Arc<dyn Fn() -> bool + Send + Sync>);

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
