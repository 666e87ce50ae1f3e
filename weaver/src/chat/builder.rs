//! [`ChatFlowBuilder`] and [`ChatNode`]: declaring a chat flow, and
//! compiling it into an engine graph.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::flow::ChatFlow;
use super::node::{ActionFn, FlowNode, Next, NodeDef, RouterFn, ValidateFn};
use super::options::ChatOptions;
use super::state::Conversation;
use super::types::{Action, TurnInput, Validation};
use crate::checkpoint::InMemorySaver;
use crate::engine::{CompiledGraph, Runtime, START};
use crate::error::{GraphError, Result};
use crate::graph::{Compile, Graph};
use crate::state::GraphState;

/// One node of a chat flow: an action (what the bot says or does when the
/// flow enters the node), an optional validation of the user's reply, and
/// whether the flow runs on without waiting for the user (auto-advance).
///
/// A node that does not auto-advance waits for the user's next message
/// once its action ran; the message is then validated (accepted when the
/// node has no validation), and on a valid reply the flow moves on.
///
/// ```
/// use weaver::chat::{Action, ChatNode, Validation};
/// use weaver::prelude::*;
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
/// struct Form {
///     name: String,
/// }
///
/// let ask = ChatNode::<Form>::new("ask_name")
///     .action(|_, _| Action::say("What is your name?"))
///     .validate("Please tell me your name.", |_, reply| {
///         let name = reply.user_message.trim();
///         if name.is_empty() {
///             Validation::Invalid
///         } else {
///             Validation::valid_with(FormUpdate::default().name(name))
///         }
///     });
/// assert_eq!(ask.id(), "ask_name");
/// ```
pub struct ChatNode<S: GraphState> {
    def: NodeDef<S>,
}

impl<S: GraphState> fmt::Debug for ChatNode<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatNode")
            .field("id", &self.def.id)
            .field("action", &self.def.action.is_some())
            .field("validate", &self.def.validate.as_ref().map(|(_, r)| r))
            .field("auto_advance", &self.def.auto_advance)
            .finish()
    }
}

impl<S: GraphState> ChatNode<S> {
    /// A node named `id` with no action and no validation, waiting for a reply.
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions, Validation};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { name: String }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// // A node with no action says nothing; it waits for a reply, then moves on.
    /// let flow = ChatFlowBuilder::<S>::new("f")
    ///     .add_node(ChatNode::new("listen"))
    ///     .add_node(ChatNode::new("bye").action(|_, _| Action::say("bye")).auto_advance())
    ///     .add_edge(START, "listen")
    ///     .add_edge("listen", "bye")
    ///     .add_edge("bye", END)
    ///     .compile(ChatOptions::new("c", InMemorySaver::new()))?;
    /// assert!(flow.turn("").await?.messages.is_empty());
    /// assert_eq!(flow.turn("anything").await?.messages, ["bye"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new(id: impl Into<String>) -> Self {
        ChatNode {
            def: NodeDef {
                id: id.into(),
                action: None,
                validate: None,
                auto_advance: false,
            },
        }
    }

    /// The node's id.
    ///
    /// ```
    /// use weaver::chat::ChatNode;
    /// # use weaver::prelude::*;
    /// # #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// # struct S {}
    ///
    /// let node = ChatNode::<S>::new("ask_name");
    /// assert_eq!(node.id(), "ask_name");
    /// ```
    pub fn id(&self) -> &str {
        &self.def.id
    }

    /// What the node does when the flow enters it, given the state and the
    /// turn's input: messages to emit and a state update.
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] visits: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let greet = ChatNode::new("greet").action(|s: &S, input| {
    ///     Action::say(format!("visit {}: you said {:?}", s.visits + 1, input.user_message))
    ///         .update(SUpdate::default().visits(1u64))
    /// });
    /// let flow = ChatFlowBuilder::<S>::new("f")
    ///     .add_node(greet.auto_advance())
    ///     .add_edge(START, "greet")
    ///     .add_edge("greet", END)
    ///     .compile(ChatOptions::new("c", InMemorySaver::new()))?;
    /// let turn = flow.turn("hello").await?;
    /// assert_eq!(turn.messages, ["visit 1: you said \"hello\""]);
    /// assert_eq!(flow.state().visits, 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn action(
        mut self,
        action: impl Fn(&S, &TurnInput) -> Action<S::Update> + Send + Sync + 'static,
    ) -> Self {
        let action: ActionFn<S> = Arc::new(action);
        self.def.action = Some(action);
        self
    }

    /// Validates the user's reply: an invalid one emits `reask` and ends
    /// the turn (the node waits for another reply); a valid one may update
    /// the state, and the flow moves on.
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions, Validation};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { name: String }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let ask = ChatNode::new("ask")
    ///     .action(|_, _| Action::say("Your name?"))
    ///     .validate("A name, please.", |_, reply| match reply.user_message.trim() {
    ///         "" => Validation::Invalid,
    ///         name => Validation::valid_with(SUpdate::default().name(name)),
    ///     });
    /// let flow = ChatFlowBuilder::<S>::new("f")
    ///     .add_node(ask)
    ///     .add_edge(START, "ask")
    ///     .add_edge("ask", END)
    ///     .compile(ChatOptions::new("c", InMemorySaver::new()))?;
    /// assert_eq!(flow.turn("").await?.messages, ["Your name?"]);
    /// assert_eq!(flow.turn("  ").await?.messages, ["A name, please."]); // re-asks
    /// let done = flow.turn("Ada").await?;
    /// assert!(done.done);
    /// assert_eq!(flow.state().name, "Ada");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn validate(
        mut self,
        reask: impl Into<String>,
        validate: impl Fn(&S, &TurnInput) -> Validation<S::Update> + Send + Sync + 'static,
    ) -> Self {
        let validate: ValidateFn<S> = Arc::new(validate);
        self.def.validate = Some((validate, reask.into()));
        self
    }

    /// Runs on to the next node right after the action, without waiting for
    /// the user (a validation, if any, is then never used).
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S {}
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// // Two nodes that speak in one turn: the first runs on without a reply.
    /// let flow = ChatFlowBuilder::<S>::new("f")
    ///     .add_node(ChatNode::new("hello").action(|_, _| Action::say("Hello!")).auto_advance())
    ///     .add_node(ChatNode::new("ask").action(|_, _| Action::say("How are you?")))
    ///     .add_edge(START, "hello")
    ///     .add_edge("hello", "ask")
    ///     .add_edge("ask", END)
    ///     .compile(ChatOptions::new("c", InMemorySaver::new()))?;
    /// assert_eq!(flow.turn("").await?.messages, ["Hello!", "How are you?"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn auto_advance(mut self) -> Self {
        self.def.auto_advance = true;
        self
    }
}

/// A chat flow under construction: its nodes and edges (START, END,
/// conditional). Each node has one way out: an edge, or a conditional edge
/// whose router picks among its targets.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
/// use weaver::prelude::*;
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
/// struct Empty {}
///
/// let flow = ChatFlowBuilder::<Empty>::new("hello")
///     .add_node(ChatNode::new("hello").action(|_, _| Action::say("hi")).auto_advance())
///     .add_edge(START, "hello")
///     .add_edge("hello", END)
///     .compile(ChatOptions::new("conversation-1", InMemorySaver::new()))?;
/// let turn = flow.turn("").await?;
/// assert_eq!(turn.messages, ["hi"]);
/// assert!(turn.done);
/// # Ok::<(), weaver::Error>(()) }).unwrap();
/// ```
pub struct ChatFlowBuilder<S: GraphState> {
    name: String,
    nodes: Vec<Arc<NodeDef<S>>>,
    edges: Vec<(String, Next<S>)>,
}

impl<S: GraphState> fmt::Debug for ChatFlowBuilder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatFlowBuilder")
            .field("name", &self.name)
            .field(
                "nodes",
                &self.nodes.iter().map(|n| &n.id).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl<S: GraphState> ChatFlowBuilder<S> {
    /// An empty flow named `name`.
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions, Validation};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { name: String }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let ask = ChatNode::new("ask")
    ///     .action(|_, _| Action::say("Your name?"))
    ///     .validate("A name, please.", |_, reply| match reply.user_message.trim() {
    ///         "" => Validation::Invalid,
    ///         name => Validation::valid_with(SUpdate::default().name(name)),
    ///     });
    /// let flow = ChatFlowBuilder::<S>::new("signup")
    ///     .add_node(ask)
    ///     .add_edge(START, "ask")
    ///     .add_edge("ask", END)
    ///     .compile(ChatOptions::new("conversation-1", InMemorySaver::new()))?;
    /// assert_eq!(flow.id(), "conversation-1");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new(name: impl Into<String>) -> Self {
        ChatFlowBuilder {
            name: name.into(),
            nodes: Vec::new(),
            edges: Vec::new(),
        }
    }

    /// Adds a node (a duplicate or reserved id is reported by [`compile`](Self::compile)).
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S {}
    ///
    /// let twice = ChatFlowBuilder::<S>::new("f")
    ///     .add_node(ChatNode::new("a").action(|_, _| Action::say("one")))
    ///     .add_node(ChatNode::new("a").action(|_, _| Action::say("two")))
    ///     .add_edge(START, "a")
    ///     .add_edge("a", END)
    ///     .compile(ChatOptions::new("c", InMemorySaver::new()));
    /// assert!(matches!(twice, Err(Error::InvalidGraph(_))));
    /// ```
    pub fn add_node(mut self, node: ChatNode<S>) -> Self {
        self.nodes.push(Arc::new(node.def));
        self
    }

    /// After `from` (or START) is finished, the flow goes to `to` (or END).
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S {}
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let flow = ChatFlowBuilder::<S>::new("f")
    ///     .add_node(ChatNode::new("first").action(|_, _| Action::say("1")))
    ///     .add_node(ChatNode::new("second").action(|_, _| Action::say("2")))
    ///     .add_edge(START, "first")
    ///     .add_edge("first", "second")
    ///     .add_edge("second", END)
    ///     .compile(ChatOptions::new("c", InMemorySaver::new()))?;
    /// assert_eq!(flow.turn("").await?.messages, ["1"]);
    /// assert_eq!(flow.turn("ok").await?.messages, ["2"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn add_edge(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.edges.push((from.into(), Next::To(to.into())));
        self
    }

    /// After `from` (or START) is finished, `router`, given the state with
    /// the node's update applied, picks the next node (or END) among
    /// `targets`; a pick outside them fails the turn.
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions, Validation};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { yes: bool }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let ask = ChatNode::new("ask")
    ///     .action(|_, _| Action::say("Subscribe?"))
    ///     .validate("yes or no?", |_, reply| match reply.user_message.as_str() {
    ///         "yes" => Validation::valid_with(SUpdate::default().yes(true)),
    ///         "no" => Validation::valid(),
    ///         _ => Validation::Invalid,
    ///     });
    /// let flow = ChatFlowBuilder::<S>::new("f")
    ///     .add_node(ask)
    ///     .add_node(ChatNode::new("thanks").action(|_, _| Action::say("Subscribed.")).auto_advance())
    ///     .add_edge(START, "ask")
    ///     // The router sees the state with the reply's update applied.
    ///     .add_conditional_edge("ask", |s: &S| if s.yes { "thanks" } else { END }, ["thanks", END])
    ///     .add_edge("thanks", END)
    ///     .compile(ChatOptions::new("c", InMemorySaver::new()))?;
    /// flow.turn("").await?;
    /// assert_eq!(flow.turn("yes").await?.messages, ["Subscribed."]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn add_conditional_edge<R, T, I>(
        mut self,
        from: impl Into<String>,
        router: R,
        targets: I,
    ) -> Self
    where
        R: Fn(&S) -> T + Send + Sync + 'static,
        T: Into<String>,
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let router: RouterFn<S> = Arc::new(move |s: &S| router(s).into());
        let targets = targets.into_iter().map(Into::into).collect();
        self.edges
            .push((from.into(), Next::Choose { router, targets }));
        self
    }

    /// Checks the flow and binds it to one conversation. Nothing is read
    /// from the saver here: each turn loads the conversation's latest
    /// snapshot when it starts.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidGraph`](crate::Error::InvalidGraph) for a flow the
    /// engine would refuse (duplicate or reserved node ids, unknown nodes,
    /// no edge from START, a node with no way to END), or a node with two
    /// ways out; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// for an empty conversation id or a bound of zero node runs per turn.
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S {}
    ///
    /// let build = || {
    ///     ChatFlowBuilder::<S>::new("f")
    ///         .add_node(ChatNode::new("hi").action(|_, _| Action::say("hi")))
    ///         .add_edge(START, "hi")
    ///         .add_edge("hi", END)
    /// };
    /// assert!(build().compile(ChatOptions::new("c", InMemorySaver::new())).is_ok());
    /// let unnamed = build().compile(ChatOptions::new("", InMemorySaver::new()));
    /// assert!(matches!(unnamed, Err(Error::InvalidArgument { .. })));
    /// ```
    pub fn compile(self, options: ChatOptions) -> Result<ChatFlow<S>> {
        if options.id.is_empty() {
            return Err(crate::Error::invalid_argument(
                "a conversation id cannot be empty",
            ));
        }
        if options.max_nodes_per_turn == 0 {
            return Err(crate::Error::invalid_argument(
                "max_nodes_per_turn must be at least 1",
            ));
        }
        let mut outs: BTreeMap<String, Next<S>> = BTreeMap::new();
        for (from, next) in &self.edges {
            if let Some(before) = outs.insert(from.clone(), next.clone()) {
                let to = next.targets().join(", ");
                let _ = before;
                return Err(GraphError::InvalidEdge {
                    from: from.clone(),
                    to,
                    reason: "a chat node has one way out: choose among targets with one conditional edge",
                }
                .into());
            }
        }
        let stored = self.engine_graph(
            &outs,
            Compile::new().checkpointer_arc(options.saver.clone()),
        )?;
        let scratch = if options.auto_save {
            None
        } else {
            Some(self.engine_graph(&outs, Compile::new().checkpointer(InMemorySaver::new()))?)
        };
        let auto = self
            .nodes
            .iter()
            .filter(|d| d.auto_advance)
            .map(|d| d.id.clone())
            .collect();
        Ok(ChatFlow::new(options, stored, scratch, auto))
    }

    /// The engine graph: one engine node per chat node, each routing itself
    /// (a `goto` to itself while it waits, to its successor when done).
    fn engine_graph(
        &self,
        outs: &BTreeMap<String, Next<S>>,
        compile: Compile,
    ) -> Result<CompiledGraph<Conversation<S>>> {
        let mut graph = Graph::<Conversation<S>>::new(self.name.clone());
        for def in &self.nodes {
            let next = outs.get(&def.id).cloned();
            let mut destinations = vec![def.id.clone()];
            destinations.extend(next.iter().flat_map(Next::targets));
            let node = FlowNode {
                def: def.clone(),
                next,
            };
            graph = graph
                .add_node(def.id.clone(), move |c: &Conversation<S>, rt: &Runtime| {
                    node.step(c, rt)
                })
                .add_destinations(def.id.clone(), destinations);
        }
        graph = match outs.get(START) {
            Some(Next::To(to)) => graph.add_edge(START, to.clone()),
            Some(Next::Choose { router, targets }) => {
                let router = router.clone();
                graph.add_conditional_edges(
                    START,
                    move |c: &Conversation<S>| router(&c.state),
                    targets.clone(),
                )
            }
            None => graph,
        };
        // Edges from nodes that do not exist: the engine names them.
        for (from, next) in outs {
            if from != START && !self.nodes.iter().any(|n| &n.id == from) {
                for to in next.targets() {
                    graph = graph.add_edge(from.clone(), to);
                }
            }
        }
        graph.compile(compile)
    }
}
