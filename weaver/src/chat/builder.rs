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
    pub fn id(&self) -> &str {
        &self.def.id
    }

    /// What the node does when the flow enters it, given the state and the
    /// turn's input: messages to emit and a state update.
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
    pub fn new(name: impl Into<String>) -> Self {
        ChatFlowBuilder {
            name: name.into(),
            nodes: Vec::new(),
            edges: Vec::new(),
        }
    }

    /// Adds a node (a duplicate or reserved id is reported by [`compile`](Self::compile)).
    pub fn add_node(mut self, node: ChatNode<S>) -> Self {
        self.nodes.push(Arc::new(node.def));
        self
    }

    /// After `from` (or START) is finished, the flow goes to `to` (or END).
    pub fn add_edge(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.edges.push((from.into(), Next::To(to.into())));
        self
    }

    /// After `from` (or START) is finished, `router`, given the state with
    /// the node's update applied, picks the next node (or END) among
    /// `targets`; a pick outside them fails the turn.
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
        Ok(ChatFlow::new(options, stored, scratch))
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
