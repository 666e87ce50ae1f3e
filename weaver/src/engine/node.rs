//! Nodes: what a node function may look like and what it may return.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;

use super::runtime::{InterruptSignal, Runtime};
use crate::error::BoxError;
use crate::state::{GraphState, Update};

/// The boxed future a type-erased node returns.
pub type NodeFuture<'a, U> =
    Pin<Box<dyn Future<Output = Result<Command<U>, NodeError>> + Send + 'a>>;

/// A type-erased node. Built from a function by [`IntoNode`]; implement it
/// directly for a node that is a struct.
pub trait Node<S: GraphState>: Send + Sync + 'static {
    /// Runs the node on the step's state.
    fn run<'a>(&'a self, state: &'a S, runtime: &'a Runtime) -> NodeFuture<'a, S::Update>;

    /// The shape of the graph this node runs as its subgraph, with that
    /// graph's own subgraph nodes `depth` levels deeper, for
    /// [`CompiledGraph::draw_mermaid_xray`](crate::CompiledGraph::draw_mermaid_xray).
    /// `None`, the default, for a node that is not a compiled graph (a
    /// function that calls one is drawn as one node).
    fn outline(&self, depth: usize) -> Option<super::GraphOutline> {
        let _ = depth;
        None
    }
}

/// What a node returns: an update, plus optional `goto` targets that are
/// triggered in addition to the node's static edges.
///
/// ```
/// # use weaver::Command;
/// # #[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)] struct U;
/// let cmd: Command<U> = Command::update(U).goto("review");
/// assert_eq!(cmd.goto, ["review"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Command<U> {
    /// The state update.
    pub update: U,
    /// Nodes to run next (by name), besides the static edges.
    pub goto: Vec<String>,
}

impl<U> Command<U> {
    /// A command carrying `update` and no goto.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: i64 }
    ///
    /// // An update and where to go next, in one return value.
    /// fn decide(s: &S) -> Command<SUpdate> {
    ///     Command::update(SUpdate::default().n(s.n + 1)).goto(if s.n > 0 { "big" } else { "small" })
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("decide", decide)
    ///     .add_node("big", |s: &S| SUpdate::default().n(s.n * 100))
    ///     .add_node("small", |s: &S| SUpdate::default().n(-s.n))
    ///     .add_edge(START, "decide")
    ///     .add_destinations("decide", ["big", "small"])
    ///     .add_edge("big", END)
    ///     .add_edge("small", END)
    ///     .compile(Compile::new())?;
    /// assert_eq!(graph.invoke(S { n: 1 }, &RunConfig::default()).await?.complete()?.n, 200);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn update(update: U) -> Self {
        Command {
            update,
            goto: Vec::new(),
        }
    }

    /// Adds a node to run next.
    ///
    /// ```
    /// use weaver::Command;
    ///
    /// let cmd = Command::update(()).goto("review").goto("log");
    /// assert_eq!(cmd.goto, ["review", "log"]);
    /// ```
    pub fn goto(mut self, node: impl Into<String>) -> Self {
        self.goto.push(node.into());
        self
    }
}

impl Command<()> {
    /// A command for the parent graph, from a node of a subgraph
    /// (LangGraph's `Command(graph=Command.PARENT, ...)`): `update` is an
    /// update of the parent's state (any value that serializes as one: the
    /// parent's update type, or JSON), and [`goto`](ParentCommand::goto)
    /// names the parent's nodes to run next. Return it as the node's error
    /// (`Err(Command::parent(..).into())`, or with `?`): the subgraph stops
    /// there, without the node's writes, and the parent node that runs the
    /// subgraph returns this update and goto as its own command. An update
    /// that does not decode as the parent's fails that parent node; at the
    /// top level, with no parent, the run fails with
    /// [`Error::ParentCommand`](crate::Error::ParentCommand).
    ///
    /// ```
    /// # use weaver::{Command, NodeError};
    /// # use serde_json::json;
    /// fn escalate() -> Result<(), NodeError> {
    ///     Err(Command::parent(json!({ "verdict": "escalated" })).goto("human").into())
    /// }
    /// assert!(escalate().is_err());
    /// ```
    pub fn parent(update: impl serde::Serialize) -> ParentCommand {
        // A value that does not encode is caught where the parent decodes
        // the update: `null` is no update of any state.
        let update = serde_json::to_value(update)
            .map_err(|e| e.to_string())
            .and_then(|v| match v {
                serde_json::Value::Object(_) => Ok(v),
                other => Err(format!("not an update (a map of channels): {other}")),
            });
        ParentCommand {
            update,
            goto: Vec::new(),
        }
    }
}

/// A command for the parent graph, made by [`Command::parent`].
#[derive(Debug, Clone)]
pub struct ParentCommand {
    /// The update, as JSON, or why it could not be encoded as one.
    pub(crate) update: Result<serde_json::Value, String>,
    pub(crate) goto: Vec<String>,
}

impl ParentCommand {
    /// Adds one of the parent's nodes to run next.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { verdict: String }
    ///
    /// // A node of the subgraph that hands the decision to the parent.
    /// fn escalate(_: &S) -> Result<SUpdate, NodeError> {
    ///     Err(Command::parent(SUpdate::default().verdict("escalated")).goto("human").into())
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let inner = Graph::<S>::new("inner")
    ///     .add_node("escalate", escalate)
    ///     .add_sequence([START, "escalate", END])
    ///     .compile(Compile::new())?;
    /// let outer = Graph::<S>::new("outer")
    ///     .add_node("inner", inner)
    ///     .add_node("human", |s: &S| SUpdate::default().verdict(format!("{} (seen)", s.verdict)))
    ///     .add_edge(START, "inner")
    ///     .add_destinations("inner", ["human"])
    ///     .add_edge("human", END)
    ///     .compile(Compile::new())?;
    /// let out = outer.invoke(S::default(), &RunConfig::default()).await?.complete()?;
    /// assert_eq!(out.verdict, "escalated (seen)");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn goto(mut self, node: impl Into<String>) -> Self {
        self.goto.push(node.into());
        self
    }
}

impl fmt::Display for ParentCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a command for the parent graph (goto {:?})", self.goto)
    }
}

impl StdError for ParentCommand {}

/// Why a node did not produce an output: it failed, or it asked for human
/// input (`Runtime::interrupt`).
///
/// Any `std::error::Error + Send + Sync` converts into it, so `?` works in
/// node bodies; a plain message converts with [`NodeError::msg`].
pub struct NodeError(pub(crate) NodeErrorKind);

pub(crate) enum NodeErrorKind {
    Failed(BoxError),
    Interrupt(InterruptSignal),
    /// A subgraph node's command for the graph above its own.
    Parent(ParentCommand),
    /// The command a subgraph sent up: this node's result.
    Command(ParentCommand),
    /// The effect journal refused or failed (a typed error of its own).
    Journal(crate::error::Error),
}

impl NodeError {
    /// A failure with a message.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: i64 }
    ///
    /// fn check(s: &S) -> Result<SUpdate, NodeError> {
    ///     if s.n < 0 {
    ///         return Err(NodeError::msg(format!("{} is negative", s.n)));
    ///     }
    ///     Ok(SUpdate::default())
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("check", check)
    ///     .add_sequence([START, "check", END])
    ///     .compile(Compile::new())?;
    /// let err = graph.invoke(S { n: -1 }, &RunConfig::default()).await.unwrap_err();
    /// assert!(matches!(err, Error::NodeFailed { ref node, .. } if node == "check"));
    /// assert!(err.to_string().contains("-1 is negative"));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn msg(message: impl fmt::Display) -> Self {
        NodeError(NodeErrorKind::Failed(message.to_string().into()))
    }

    /// Whether this is an interrupt rather than a failure.
    pub fn is_interrupt(&self) -> bool {
        matches!(self.0, NodeErrorKind::Interrupt(_))
    }
}

impl fmt::Debug for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            NodeErrorKind::Failed(e) => f.debug_tuple("NodeError::Failed").field(e).finish(),
            NodeErrorKind::Journal(e) => f.debug_tuple("NodeError::Journal").field(e).finish(),
            NodeErrorKind::Interrupt(i) => f.debug_tuple("NodeError::Interrupt").field(i).finish(),
            NodeErrorKind::Parent(c) | NodeErrorKind::Command(c) => {
                f.debug_tuple("NodeError::Parent").field(c).finish()
            }
        }
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            NodeErrorKind::Failed(e) => e.fmt(f),
            NodeErrorKind::Journal(e) => e.fmt(f),
            NodeErrorKind::Interrupt(i) => i.fmt(f),
            NodeErrorKind::Parent(c) | NodeErrorKind::Command(c) => c.fmt(f),
        }
    }
}

impl<E: StdError + Send + Sync + 'static> From<E> for NodeError {
    fn from(e: E) -> Self {
        let boxed: BoxError = Box::new(e);
        let boxed = match boxed.downcast::<InterruptSignal>() {
            Ok(signal) => return NodeError(NodeErrorKind::Interrupt(*signal)),
            Err(other) => other,
        };
        match boxed.downcast::<ParentCommand>() {
            Ok(command) => NodeError(NodeErrorKind::Parent(*command)),
            Err(other) => NodeError(NodeErrorKind::Failed(other)),
        }
    }
}

impl From<super::effect::EffectError> for NodeError {
    fn from(e: super::effect::EffectError) -> Self {
        match e {
            super::effect::EffectError::Failed(e) => NodeError(NodeErrorKind::Failed(e)),
            super::effect::EffectError::Journal(e) => NodeError(NodeErrorKind::Journal(e)),
        }
    }
}

/// What a node function may return: an update, a [`Command`], or a `Result`
/// of either whose error converts into [`NodeError`].
#[diagnostic::on_unimplemented(
    message = "a node of this graph cannot return `{Self}`",
    label = "node returns `{Self}`",
    note = "a node returns the state's update type (`<State>Update`), a `Command<Update>`, or a `Result` of either"
)]
pub trait IntoNodeResult<U> {
    /// Converts into the engine's form.
    fn into_node_result(self) -> Result<Command<U>, NodeError>;
}

impl<U: Update> IntoNodeResult<U> for U {
    fn into_node_result(self) -> Result<Command<U>, NodeError> {
        Ok(Command::update(self))
    }
}

impl<U: Update> IntoNodeResult<U> for Command<U> {
    fn into_node_result(self) -> Result<Command<U>, NodeError> {
        Ok(self)
    }
}

impl<U: Update, T: IntoNodeResult<U>, E: Into<NodeError>> IntoNodeResult<U> for Result<T, E> {
    fn into_node_result(self) -> Result<Command<U>, NodeError> {
        self.map_err(Into::into)
            .and_then(IntoNodeResult::into_node_result)
    }
}

/// A function usable as a node of a graph over `S`.
///
/// Implemented for sync and async functions and closures taking `&S`, or
/// `&S` and `&Runtime`, and returning anything [`IntoNodeResult`]; for a
/// [`CompiledGraph`](crate::CompiledGraph) over `S`, and one over another
/// state with its maps ([`CompiledGraph::mapped`](crate::CompiledGraph::mapped)),
/// which run as subgraphs. `M` is an
/// inference marker; callers never name it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be used as a node of a graph over `{S}`",
    label = "not a node function for this state",
    note = "a node is `fn(&State) -> R`, `fn(&State, &Runtime) -> R`, or the `async fn` forms, where R is the update, a `Command`, or a `Result` of either; or a `CompiledGraph` over the same state (a subgraph over another state needs `CompiledGraph::mapped`)"
)]
pub trait IntoNode<S: GraphState, M>: Send + Sync + 'static {
    /// Erases the function into a [`Node`].
    fn into_node(self) -> Box<dyn Node<S>>;
}

/// Call adapter for async functions of `&S`, so one bound covers every lifetime.
pub trait AsyncStateFn<'a, S: 'a>: Send + Sync + 'static {
    /// The future returned.
    type Fut: Future<Output = Self::Output> + Send + 'a;
    /// Its output.
    type Output;
    /// Calls the function.
    fn call(&self, state: &'a S) -> Self::Fut;
}

impl<'a, S: 'a, F, Fut> AsyncStateFn<'a, S> for F
where
    F: Fn(&'a S) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'a,
{
    type Fut = Fut;
    type Output = Fut::Output;
    fn call(&self, state: &'a S) -> Fut {
        self(state)
    }
}

/// Call adapter for async functions of `&S` and `&Runtime`.
pub trait AsyncStateRuntimeFn<'a, S: 'a>: Send + Sync + 'static {
    /// The future returned.
    type Fut: Future<Output = Self::Output> + Send + 'a;
    /// Its output.
    type Output;
    /// Calls the function.
    fn call(&self, state: &'a S, runtime: &'a Runtime) -> Self::Fut;
}

impl<'a, S: 'a, F, Fut> AsyncStateRuntimeFn<'a, S> for F
where
    F: Fn(&'a S, &'a Runtime) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'a,
{
    type Fut = Fut;
    type Output = Fut::Output;
    fn call(&self, state: &'a S, runtime: &'a Runtime) -> Fut {
        self(state, runtime)
    }
}

#[doc(hidden)]
pub mod markers {
    /// `fn(&S) -> R`.
    #[derive(Debug)]
    pub struct Sync<R>(std::marker::PhantomData<R>);
    /// `fn(&S, &Runtime) -> R`.
    #[derive(Debug)]
    pub struct SyncRt<R>(std::marker::PhantomData<R>);
    /// `async fn(&S) -> R`.
    #[derive(Debug)]
    pub struct Async<R>(std::marker::PhantomData<R>);
    /// `async fn(&S, &Runtime) -> R`.
    #[derive(Debug)]
    pub struct AsyncRt<R>(std::marker::PhantomData<R>);
    /// A `CompiledGraph` over the parent's state.
    #[derive(Debug)]
    pub struct Subgraph;
    /// A `CompiledGraph` over another state, with its maps.
    #[derive(Debug)]
    pub struct MappedSubgraph;
}

struct FnNode<F, M>(F, std::marker::PhantomData<fn() -> M>);

impl<S, F, R> Node<S> for FnNode<F, markers::Sync<R>>
where
    S: GraphState,
    F: Fn(&S) -> R + Send + Sync + 'static,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn run<'a>(&'a self, state: &'a S, _: &'a Runtime) -> NodeFuture<'a, S::Update> {
        let out = (self.0)(state).into_node_result();
        Box::pin(std::future::ready(out))
    }
}

impl<S, F, R> IntoNode<S, markers::Sync<R>> for F
where
    S: GraphState,
    F: Fn(&S) -> R + Send + Sync + 'static,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn into_node(self) -> Box<dyn Node<S>> {
        Box::new(FnNode(
            self,
            std::marker::PhantomData::<fn() -> markers::Sync<R>>,
        ))
    }
}

impl<S, F, R> Node<S> for FnNode<F, markers::SyncRt<R>>
where
    S: GraphState,
    F: Fn(&S, &Runtime) -> R + Send + Sync + 'static,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn run<'a>(&'a self, state: &'a S, runtime: &'a Runtime) -> NodeFuture<'a, S::Update> {
        let out = (self.0)(state, runtime).into_node_result();
        Box::pin(std::future::ready(out))
    }
}

impl<S, F, R> IntoNode<S, markers::SyncRt<R>> for F
where
    S: GraphState,
    F: Fn(&S, &Runtime) -> R + Send + Sync + 'static,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn into_node(self) -> Box<dyn Node<S>> {
        Box::new(FnNode(
            self,
            std::marker::PhantomData::<fn() -> markers::SyncRt<R>>,
        ))
    }
}

impl<S, F, R> Node<S> for FnNode<F, markers::Async<R>>
where
    S: GraphState,
    F: for<'a> AsyncStateFn<'a, S, Output = R>,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn run<'a>(&'a self, state: &'a S, _: &'a Runtime) -> NodeFuture<'a, S::Update> {
        let fut = self.0.call(state);
        Box::pin(async move { fut.await.into_node_result() })
    }
}

impl<S, F, R> IntoNode<S, markers::Async<R>> for F
where
    S: GraphState,
    F: for<'a> AsyncStateFn<'a, S, Output = R>,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn into_node(self) -> Box<dyn Node<S>> {
        Box::new(FnNode(
            self,
            std::marker::PhantomData::<fn() -> markers::Async<R>>,
        ))
    }
}

impl<S, F, R> Node<S> for FnNode<F, markers::AsyncRt<R>>
where
    S: GraphState,
    F: for<'a> AsyncStateRuntimeFn<'a, S, Output = R>,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn run<'a>(&'a self, state: &'a S, runtime: &'a Runtime) -> NodeFuture<'a, S::Update> {
        let fut = self.0.call(state, runtime);
        Box::pin(async move { fut.await.into_node_result() })
    }
}

impl<S, F, R> IntoNode<S, markers::AsyncRt<R>> for F
where
    S: GraphState,
    F: for<'a> AsyncStateRuntimeFn<'a, S, Output = R>,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn into_node(self) -> Box<dyn Node<S>> {
        Box::new(FnNode(
            self,
            std::marker::PhantomData::<fn() -> markers::AsyncRt<R>>,
        ))
    }
}
