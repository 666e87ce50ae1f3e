//! [`CompiledGraph`]: running a validated graph.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::builder::Compile;
use super::spec::Spec;
use crate::checkpoint::Checkpointer;
use crate::config::RunConfig;
use crate::engine::{Input, Loop, Outcome, Resume, StreamItem};
use crate::error::Result;
use crate::state::GraphState;

/// A validated graph, ready to run. Cheap to clone; share it across tasks.
pub struct CompiledGraph<S: GraphState> {
    pub(crate) inner: Arc<Inner<S>>,
}

pub(crate) struct Inner<S: GraphState> {
    pub spec: Spec<S>,
    pub checkpointer: Option<Checkpointer>,
    pub store: Option<Arc<dyn crate::store::Store>>, // store
}

impl<S: GraphState> Clone for CompiledGraph<S> {
    fn clone(&self) -> Self {
        CompiledGraph {
            inner: self.inner.clone(),
        }
    }
}

impl<S: GraphState> fmt::Debug for CompiledGraph<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledGraph")
            .field("name", &self.inner.spec.name)
            .field("nodes", &self.node_names())
            .field("checkpointer", &self.inner.checkpointer)
            .finish()
    }
}

impl<S: GraphState> CompiledGraph<S> {
    pub(crate) fn new(spec: Spec<S>, options: Compile) -> Self {
        CompiledGraph {
            inner: Arc::new(Inner {
                spec,
                checkpointer: options.checkpointer,
                store: options.store, // store
            }),
        }
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.inner.spec.name
    }

    /// Node names, sorted.
    pub fn node_names(&self) -> Vec<&str> {
        self.inner
            .spec
            .nodes
            .iter()
            .map(|n| n.name.as_str())
            .collect()
    }

    /// The checkpointer the graph was compiled with.
    pub fn checkpointer(&self) -> Option<&Checkpointer> {
        self.inner.checkpointer.as_ref()
    }

    /// The memory store the graph was compiled with (see [`Compile::store`]).
    pub fn store(&self) -> Option<&Arc<dyn crate::store::Store>> {
        self.inner.store.as_ref()
    }

    /// Runs the graph on `input` (a full state, an update, or an [`Input`])
    /// until END or an interrupt.
    ///
    /// With a checkpointer, the config must name a thread; the thread's
    /// latest checkpoint (or the one `checkpoint_id` names, which is then
    /// replayed from a `fork`) is the starting point, and every super-step is
    /// checkpointed.
    pub async fn invoke(
        &self,
        input: impl Into<Input<S>>,
        config: &RunConfig,
    ) -> Result<Outcome<S>> {
        let span = tracing::debug_span!("weaver.invoke", graph = %self.inner.spec.name, thread_id = config.thread_id().unwrap_or(""));
        let _guard = span.enter();
        drop(_guard);
        Loop::run(
            &self.inner.spec,
            self.inner.checkpointer.as_ref(),
            config.clone(),
            input.into(),
            None,
            self.inner.store.clone(), // store
        )
        .await
    }

    /// Continues the thread without new input: runs the tasks left by a
    /// failure or a static interrupt (reusing the writes of tasks that
    /// succeeded), or replays from `checkpoint_id`.
    pub async fn continue_run(&self, config: &RunConfig) -> Result<Outcome<S>> {
        self.invoke(Input::Continue, config).await
    }

    /// Answers pending interrupts and continues; the interrupted nodes run
    /// again from their start. A single value needs exactly one pending
    /// interrupt ([`Error::AmbiguousResume`] otherwise); a map is keyed by
    /// interrupt id.
    pub async fn resume(
        &self,
        resume: impl Into<Resume>,
        config: &RunConfig,
    ) -> Result<Outcome<S>> {
        self.invoke(Input::Resume(resume.into()), config).await
    }

    /// Runs like [`invoke`](CompiledGraph::invoke) in a background task and
    /// yields each node's update and the state after each step; the last item
    /// is the run's result. Dropping the stream stops the run after its
    /// current operation.
    pub fn stream(&self, input: impl Into<Input<S>>, config: &RunConfig) -> RunStream<S> {
        let (tx, rx) = mpsc::unbounded_channel();
        let graph = self.clone();
        let config = config.clone();
        let input = input.into();
        let handle = tokio::spawn(async move {
            let result = Loop::run(
                &graph.inner.spec,
                graph.inner.checkpointer.as_ref(),
                config,
                input,
                Some(tx.clone()),
                graph.inner.store.clone(), // store
            )
            .await;
            let _ = tx.send(StreamItem::Done(result));
        });
        RunStream { rx, handle }
    }
}

impl<S: GraphState> From<S> for Input<S> {
    fn from(state: S) -> Self {
        Input::state(state)
    }
}

/// The stream returned by [`CompiledGraph::stream`]: events, then the result.
#[derive(Debug)]
pub struct RunStream<S: GraphState> {
    rx: mpsc::UnboundedReceiver<StreamItem<S>>,
    handle: JoinHandle<()>,
}

impl<S: GraphState> futures_core::Stream for RunStream<S> {
    type Item = StreamItem<S>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl<S: GraphState> Drop for RunStream<S> {
    fn drop(&mut self) {
        self.handle.abort();
    }
}
