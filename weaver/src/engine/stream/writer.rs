//! [`StreamWriter`]: how a node streams its own events (custom values,
//! message chunks) to whoever consumes the run's stream.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{StreamMode, StreamModes, TaskRef};
use crate::engine::finite;
use crate::error::{Error, Result};

/// A piece of a message, such as the tokens a model streams: LangGraph's
/// `stream_mode="messages"` chunk. Build one with [`MessageChunk::new`]
/// (or from a `&str` or `String`, its content).
///
/// ```
/// use weaver::MessageChunk;
/// use serde_json::json;
///
/// let chunk = MessageChunk::new("Hel").id("msg-1").metadata("model", json!("fake"));
/// assert_eq!(chunk.content, "Hel");
/// assert_eq!(chunk.id.as_deref(), Some("msg-1"));
/// assert_eq!(chunk.metadata["model"], "fake");
/// assert_eq!(MessageChunk::from("lo").content, "lo");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MessageChunk {
    /// The text of this piece.
    pub content: String,
    /// The message it belongs to, so a consumer can join the chunks of
    /// each message (`None` when the node has one message at a time).
    pub id: Option<String>,
    /// Whatever else the node tells about it (the model, a role, …).
    pub metadata: Map<String, Value>,
}

impl MessageChunk {
    /// A chunk of `content`, with no message id or metadata.
    ///
    /// ```
    /// use weaver::MessageChunk;
    ///
    /// let chunk = MessageChunk::new("Hel");
    /// assert_eq!((chunk.content.as_str(), chunk.id), ("Hel", None));
    /// ```
    pub fn new(content: impl Into<String>) -> Self {
        MessageChunk {
            content: content.into(),
            ..MessageChunk::default()
        }
    }

    /// Sets the id of the message it belongs to.
    ///
    /// ```
    /// use weaver::MessageChunk;
    ///
    /// // Chunks of one message share its id, so a consumer can join them.
    /// let chunks = ["Hel", "lo"].map(|t| MessageChunk::new(t).id("reply-1"));
    /// assert!(chunks.iter().all(|c| c.id.as_deref() == Some("reply-1")));
    /// ```
    #[must_use]
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Adds `key: value` to its metadata.
    ///
    /// ```
    /// use weaver::MessageChunk;
    ///
    /// let chunk = MessageChunk::new("Hi").metadata("model", "small").metadata("role", "assistant");
    /// assert_eq!(chunk.metadata["model"], "small");
    /// assert_eq!(chunk.metadata.len(), 2);
    /// ```
    #[must_use]
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }
}

impl From<&str> for MessageChunk {
    fn from(content: &str) -> Self {
        MessageChunk::new(content)
    }
}

impl From<String> for MessageChunk {
    fn from(content: String) -> Self {
        MessageChunk::new(content)
    }
}

/// What a node streams, before the run makes it a stream event.
pub(crate) enum NodeEvent {
    Custom(Value),
    Message(MessageChunk),
}

/// Where a node's events go: the run's stream, which tags them with their
/// task and keeps them in the order they were sent.
pub(crate) trait NodeEvents: Send + Sync {
    fn send(&self, task: TaskRef, event: NodeEvent);
}

/// Streams a node's own events: values of its choosing
/// ([`custom`](Self::custom), LangGraph's `get_stream_writer()`) and message
/// chunks ([`message_chunk`](Self::message_chunk), a model's tokens). Reach
/// it with [`Runtime::stream`](crate::Runtime::stream).
///
/// The consumer receives them in the order the node sent them, before the
/// node's update, each tagged with the node, step, task id and namespace
/// it came from ([`TaskRef`]). When the run is not streamed, or its modes
/// have neither [`StreamMode::Custom`] nor [`StreamMode::Messages`], the
/// writer does nothing (it builds no event and reports no error).
///
/// What a node streams is never stored: no checkpoint, pending write or
/// metadata holds it. A task that finished before a failure or an interrupt
/// of a sibling is replayed from its stored writes when the run goes on,
/// without running again, so its events are not sent again; a task that
/// paused runs again from its start on resume, and sends its events again.
///
/// A clone sends as the task it came from; what it sends after the node
/// returned reaches the consumer after the node's update, or nowhere once
/// the run ended (a clone kept does not keep the stream open).
#[derive(Clone, Default)]
pub struct StreamWriter {
    to: Option<Arc<Target>>,
}

/// Where a streaming task's writer sends, and what the run wants.
struct Target {
    events: Arc<dyn NodeEvents>,
    task: TaskRef,
    custom: bool,
    messages: bool,
}

impl fmt::Debug for StreamWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("StreamWriter");
        match &self.to {
            Some(to) => d
                .field("task", &to.task)
                .field("custom", &to.custom)
                .field("messages", &to.messages),
            None => d.field("streaming", &false),
        }
        .finish()
    }
}

impl StreamWriter {
    /// The writer of `task`, sending what `modes` asks for to `events`; one
    /// that does nothing if the modes ask for no node event.
    pub(crate) fn new(events: Arc<dyn NodeEvents>, task: TaskRef, modes: StreamModes) -> Self {
        let custom = modes.contains(StreamMode::Custom);
        let messages = modes.contains(StreamMode::Messages);
        if !custom && !messages {
            return StreamWriter::default();
        }
        StreamWriter {
            to: Some(Arc::new(Target {
                events,
                task,
                custom,
                messages,
            })),
        }
    }

    /// Whether the writer sends anywhere.
    pub(crate) fn is_active(&self) -> bool {
        self.to.is_some()
    }

    /// A writer sending where this one does, as the task `task`: what a
    /// subgraph's task streams goes into its parent's stream, tagged with
    /// the subgraph's own task (its namespace, node, step and id).
    pub(crate) fn for_task(&self, task: TaskRef) -> StreamWriter {
        StreamWriter {
            to: self.to.as_ref().map(|to| {
                Arc::new(Target {
                    events: to.events.clone(),
                    task,
                    custom: to.custom,
                    messages: to.messages,
                })
            }),
        }
    }

    /// Whether [`custom`](Self::custom) reaches a consumer (the run is
    /// streamed with [`StreamMode::Custom`]); a node may skip building a
    /// costly value when it does not.
    pub fn streams_custom(&self) -> bool {
        self.to.as_ref().is_some_and(|to| to.custom)
    }

    /// Whether [`message_chunk`](Self::message_chunk) reaches a consumer
    /// (the run is streamed with [`StreamMode::Messages`]).
    pub fn streams_messages(&self) -> bool {
        self.to.as_ref().is_some_and(|to| to.messages)
    }

    /// Streams `value` as a [`StreamEvent::Custom`](crate::StreamEvent::Custom)
    /// (LangGraph's `get_stream_writer()(value)`); does nothing unless the
    /// run is streamed with [`StreamMode::Custom`].
    ///
    /// # Errors
    ///
    /// [`Error::Encode`] when the run streams custom events and `value` is
    /// not one JSON can hold (a map with non-string keys, a NaN); `?` in a
    /// node turns it into the node's failure.
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use futures_util::StreamExt;
    /// use serde_json::json;
    /// use weaver::prelude::*;
    /// use weaver::{StreamEvent, StreamItem, StreamMode};
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Job {
    ///     done: bool,
    /// }
    ///
    /// let work = |_: &Job, rt: &Runtime| -> Result<JobUpdate, NodeError> {
    ///     for percent in [50, 100] {
    ///         rt.stream().custom(json!({ "progress": percent }))?;
    ///     }
    ///     Ok(JobUpdate::default().done(true))
    /// };
    /// let graph = Graph::<Job>::new("job")
    ///     .add_node("work", work)
    ///     .add_sequence([START, "work", END])
    ///     .compile(Compile::new())
    ///     .unwrap();
    /// let mut stream = graph.stream_with_mode(Job::default(), &RunConfig::default(), StreamMode::Custom);
    /// let mut progress = Vec::new();
    /// while let Some(item) = stream.next().await {
    ///     match item {
    ///         StreamItem::Event(StreamEvent::Custom { task, value }) => {
    ///             assert_eq!(task.node, "work");
    ///             progress.push(value["progress"].as_u64().unwrap());
    ///         }
    ///         StreamItem::Event(other) => panic!("not asked for: {other:?}"),
    ///         StreamItem::Done(result) => assert!(result.unwrap().complete().unwrap().done),
    ///     }
    /// }
    /// assert_eq!(progress, [50, 100]);
    /// # });
    /// ```
    pub fn custom(&self, value: impl Serialize) -> Result<()> {
        let Some(to) = self.to.as_ref().filter(|to| to.custom) else {
            return Ok(());
        };
        let what = || format!("a custom stream value of node `{}`", to.task.node);
        finite::check(&value).map_err(|e| Error::encode(what(), e))?;
        let value = serde_json::to_value(&value).map_err(|e| Error::encode(what(), e))?;
        to.events.send(to.task.clone(), NodeEvent::Custom(value));
        Ok(())
    }

    /// Streams `chunk` as a [`StreamEvent::Message`](crate::StreamEvent::Message)
    /// (a model's token, say: LangGraph's `stream_mode="messages"`); does
    /// nothing unless the run is streamed with [`StreamMode::Messages`]. A
    /// `&str` or `String` is converted only then.
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use futures_util::StreamExt;
    /// use weaver::prelude::*;
    /// use weaver::{MessageChunk, StreamEvent, StreamItem, StreamMode};
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Chat {
    ///     answer: String,
    /// }
    ///
    /// let model = |_: &Chat, rt: &Runtime| {
    ///     let mut answer = String::new();
    ///     for token in ["Hel", "lo"] {
    ///         rt.stream().message_chunk(MessageChunk::new(token).id("m1"));
    ///         answer.push_str(token);
    ///     }
    ///     ChatUpdate::default().answer(answer)
    /// };
    /// let graph = Graph::<Chat>::new("chat")
    ///     .add_node("model", model)
    ///     .add_sequence([START, "model", END])
    ///     .compile(Compile::new())
    ///     .unwrap();
    /// let config = RunConfig::default();
    /// let mut stream = graph.stream_with_mode(Chat::default(), &config, StreamMode::Messages);
    /// let mut tokens = Vec::new();
    /// while let Some(item) = stream.next().await {
    ///     if let StreamItem::Event(StreamEvent::Message { chunk, .. }) = item {
    ///         tokens.push(chunk.content);
    ///     }
    /// }
    /// assert_eq!(tokens, ["Hel", "lo"]);
    /// // Not streamed: the same node runs, and its chunks go nowhere.
    /// let end = graph.invoke(Chat::default(), &config).await.unwrap();
    /// assert_eq!(end.complete().unwrap().answer, "Hello");
    /// # });
    /// ```
    pub fn message_chunk(&self, chunk: impl Into<MessageChunk>) {
        if let Some(to) = self.to.as_ref().filter(|to| to.messages) {
            to.events
                .send(to.task.clone(), NodeEvent::Message(chunk.into()));
        }
    }
}
