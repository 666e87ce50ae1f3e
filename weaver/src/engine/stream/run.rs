//! [`RunStream`]: a streamed run's events and result, and what dropping it
//! before its end does.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::checkpoint::Checkpointer;
use crate::engine::StreamItem;
use crate::state::GraphState;

/// The stream returned by [`CompiledGraph::stream`](crate::CompiledGraph::stream),
/// [`CompiledGraph::stream_with_mode`](crate::CompiledGraph::stream_with_mode) and
/// [`CompiledGraph::stream_with_modes`](crate::CompiledGraph::stream_with_modes): events, then the result.
///
/// User code the run calls panics into a typed error where it can be
/// caught (nodes, routers, reducers, `Serialize`); a panic elsewhere (a
/// state's `Clone`, say) ends the run's task, and polling the stream then
/// resumes that panic, as [`invoke`](crate::CompiledGraph::invoke) would panic,
/// instead of ending the stream without its [`StreamItem::Done`](crate::StreamItem::Done).
///
/// Dropping the stream before its end stops the run: it is cancelled at
/// its next await (a step's tasks, a write), and at its next step boundary
/// at the latest (a run whose writes are queued to the background, or whose
/// nodes block their thread, may reach no await before), and keeps what it
/// stored or queued before (under [`Durability::Exit`](crate::Durability::Exit),
/// which stores only when the run returns, nothing: unlike a run that
/// fails, a dropped one never returns). On a
/// multi-thread runtime the run may still be in a node or in the middle of
/// a write when the drop returns; the next call on the same thread, on
/// this graph or on any graph compiled on a clone of the saver, first
/// waits for the run to have stopped, so it starts from what the run left
/// (never a `VersionConflict` or a busy thread with it).
#[derive(Debug)]
pub struct RunStream<S: GraphState> {
    rx: mpsc::UnboundedReceiver<StreamItem<S>>,
    /// The run's task (none when there was no runtime to run it on).
    handle: Option<JoinHandle<()>>,
    /// The checkpointer and thread the run writes to, if any.
    thread: Option<(Checkpointer, String)>,
    /// The runtime the run's task runs on: a drop outside its context
    /// still waits there for the task to stop.
    runtime: Option<tokio::runtime::Handle>,
    /// `Done` was yielded: nothing comes after it (a writer a node kept may
    /// still send in the moment before the run's task lets the channel go).
    done: bool,
}

impl<S: GraphState> RunStream<S> {
    /// The stream of the run whose events arrive on `rx`, run by the task
    /// `handle` on `runtime` (neither without a runtime) on `thread` (the
    /// checkpointer and thread it writes to, if any).
    pub(crate) fn new(
        rx: mpsc::UnboundedReceiver<StreamItem<S>>,
        handle: Option<(JoinHandle<()>, tokio::runtime::Handle)>,
        thread: Option<(Checkpointer, String)>,
    ) -> Self {
        let (handle, runtime) = handle.unzip();
        RunStream {
            rx,
            handle,
            thread,
            runtime,
            done: false,
        }
    }

    /// The end of the stream, once the run's task has ended: its panic (one
    /// that ended it before it sent `Done`) is passed on.
    fn ended(&mut self, cx: &mut Context<'_>) -> Poll<Option<StreamItem<S>>> {
        let Some(handle) = self.handle.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(handle).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) if e.is_panic() => {
                self.handle = None;
                std::panic::resume_unwind(e.into_panic())
            }
            Poll::Ready(_) => {
                self.handle = None;
                Poll::Ready(None)
            }
        }
    }
}

impl<S: GraphState> futures_core::Stream for RunStream<S> {
    type Item = StreamItem<S>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            // The channel closed: the task has ended, or is ending.
            Poll::Ready(None) => self.ended(cx),
            Poll::Ready(Some(done @ StreamItem::Done(_))) => {
                self.done = true;
                Poll::Ready(Some(done))
            }
            other => other,
        }
    }
}

impl<S: GraphState> Drop for RunStream<S> {
    fn drop(&mut self) {
        let Some(handle) = self.handle.take() else {
            return;
        };
        if handle.is_finished() {
            return;
        }
        handle.abort();
        // Registered before the drop returns, landed once the task has
        // stopped (cancelled at its next await, or finished meanwhile):
        // a read of the thread waits for it.
        let Some((cp, thread)) = self.thread.take() else {
            return;
        };
        let guard = cp.take_off(&thread);
        guard.flight().queued(1);
        // On the run's runtime, whatever thread drops the stream (one
        // outside any runtime's context included).
        if let Some(runtime) = self.runtime.take() {
            runtime.spawn(async move {
                let _ = handle.await;
                drop(guard);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;
    use crate::engine::{Outcome, StreamEvent, TaskRef};

    #[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    struct S {
        n: u32,
    }

    #[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    struct SUpdate {
        n: Option<u32>,
    }

    impl crate::state::Update for SUpdate {}

    impl From<S> for SUpdate {
        fn from(s: S) -> Self {
            SUpdate { n: Some(s.n) }
        }
    }

    impl GraphState for S {
        type Update = SUpdate;
        const CHANNELS: &'static [crate::channel::ChannelSpec] = &[];
        fn apply(&mut self, _: Vec<SUpdate>) -> crate::error::Result<()> {
            Ok(())
        }
    }

    /// `Done` is the last item: an event sent after it (by a writer a node
    /// kept, in the moment before the run's task lets the channel go) is
    /// not yielded.
    #[tokio::test]
    async fn nothing_is_yielded_after_done() {
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(StreamItem::Done(Ok(Outcome::Complete(S::default()))))
            .unwrap();
        let late = StreamEvent::Custom {
            task: TaskRef {
                namespace: String::new(),
                node: "n".into(),
                step: 1,
                id: "t".into(),
            },
            value: serde_json::json!("late"),
        };
        tx.send(StreamItem::Event(late)).unwrap();
        drop(tx);
        let items: Vec<StreamItem<S>> = RunStream::new(rx, None, None).collect().await;
        assert_eq!(items.len(), 1, "{items:?}");
        assert!(matches!(items[0], StreamItem::Done(Ok(_))));
    }
}
