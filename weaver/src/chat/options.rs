//! [`ChatOptions`]: where a conversation is stored and how its turns run.

use std::fmt;
use std::sync::Arc;

use crate::checkpoint::Saver;

/// The default bound on the node runs of one turn
/// ([`ChatOptions::max_nodes_per_turn`]).
pub const DEFAULT_MAX_NODES_PER_TURN: usize = 25;

/// Where a conversation is stored and how turns run: the conversation's
/// id (the engine's thread), the saver, auto-save, the bound on node runs
/// per turn.
#[derive(Clone)]
pub struct ChatOptions {
    pub(crate) id: String,
    pub(crate) saver: Arc<dyn Saver>,
    pub(crate) auto_save: bool,
    pub(crate) max_nodes_per_turn: usize,
}

impl fmt::Debug for ChatOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatOptions")
            .field("id", &self.id)
            .field("auto_save", &self.auto_save)
            .field("max_nodes_per_turn", &self.max_nodes_per_turn)
            .finish_non_exhaustive()
    }
}

impl ChatOptions {
    /// The conversation `id` stored in `saver`, with auto-save on and at
    /// most [`DEFAULT_MAX_NODES_PER_TURN`] node runs per turn.
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let flow = ChatFlowBuilder::<S>::new("f")
    ///     .add_node(ChatNode::new("inc").action(|_, _| Action::say("+1").update(SUpdate::default().n(1u64))))
    ///     .add_edge(START, "inc")
    ///     .add_edge("inc", END)
    ///     .compile(ChatOptions::new("conversation-1", InMemorySaver::new()))?;
    /// assert_eq!(flow.turn("").await?.messages, ["+1"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new(id: impl Into<String>, saver: impl Saver + 'static) -> Self {
        ChatOptions::shared(id, Arc::new(saver))
    }

    /// [`new`](Self::new) on a saver shared with other flows.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let saver = Arc::new(InMemorySaver::new());
    /// let build = |id: &str| {
    ///     ChatFlowBuilder::<S>::new("f")
    ///         .add_node(ChatNode::new("inc").action(|_, _| Action::say("+1").update(SUpdate::default().n(1u64))))
    ///         .add_edge(START, "inc")
    ///         .add_edge("inc", END)
    ///         .compile(ChatOptions::shared(id, saver.clone()))
    /// };
    /// // Two conversations in one saver, each its own thread.
    /// build("ann")?.turn("").await?;
    /// assert_eq!(build("bob")?.latest_version().await?, 0);
    /// assert_eq!(build("ann")?.latest_version().await?, 3);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn shared(id: impl Into<String>, saver: Arc<dyn Saver>) -> Self {
        ChatOptions {
            id: id.into(),
            saver,
            auto_save: true,
            max_nodes_per_turn: DEFAULT_MAX_NODES_PER_TURN,
        }
    }

    /// Whether a snapshot is stored after each action and each successful
    /// validation (the default), or only by [`ChatFlow::save`](super::ChatFlow::save).
    /// With auto-save off the unsaved progress lives in the flow object:
    /// take its turns one at a time (two calls overlapping on one flow
    /// object are not told apart by a version; the stored conversation's
    /// own races still are, at `save`).
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let flow = ChatFlowBuilder::<S>::new("f")
    ///     .add_node(ChatNode::new("inc").action(|_, _| Action::say("+1").update(SUpdate::default().n(1u64))))
    ///     .add_edge(START, "inc")
    ///     .add_edge("inc", END)
    ///     .compile(ChatOptions::new("c", InMemorySaver::new()).auto_save(false))?;
    /// flow.turn("").await?;
    /// assert!(flow.has_unsaved());
    /// assert_eq!(flow.latest_version().await?, 0); // nothing stored yet
    /// flow.save().await?;
    /// assert_eq!(flow.latest_version().await?, 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn auto_save(mut self, on: bool) -> Self {
        self.auto_save = on;
        self
    }

    /// The most node runs (actions and validations) one turn may make; the
    /// run past it fails the turn with [`Error::LimitExceeded`](crate::Error::LimitExceeded).
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// // Two nodes that hand over to each other, never waiting for a reply.
    /// let flow = ChatFlowBuilder::<S>::new("f")
    ///     .add_node(ChatNode::new("ping").action(|_, _| Action::say("ping")).auto_advance())
    ///     .add_node(ChatNode::new("pong").action(|_, _| Action::say("pong")).auto_advance())
    ///     .add_edge(START, "ping")
    ///     .add_edge("ping", "pong")
    ///     .add_conditional_edge("pong", |_: &S| "ping", ["ping", END])
    ///     .compile(ChatOptions::new("c", InMemorySaver::new()).max_nodes_per_turn(3))?;
    /// assert!(matches!(flow.turn("").await, Err(Error::LimitExceeded { .. })));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn max_nodes_per_turn(mut self, n: usize) -> Self {
        self.max_nodes_per_turn = n;
        self
    }
}
