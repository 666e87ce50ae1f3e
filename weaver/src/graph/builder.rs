//! [`Graph`]: assembling a graph at run time, and [`Compile`] options.

use std::sync::Arc;

use crate::checkpoint::{Checkpointer, Saver};
use crate::engine::spec::{NodeBody, Router};
use crate::engine::{CompiledGraph, Input, IntoNode, IntoPayloadNode, IntoRoute, NodePolicy};
use crate::state::GraphState;

/// A conditional edge as declared: its source, router and target names.
/// A node as declared: its name, body and policies.
pub(crate) type RawNode<S> = (String, NodeBody<S>, NodePolicy<S>);

pub(crate) struct RawBranch<S> {
    pub from: String,
    /// The router's name, for errors.
    pub name: String,
    pub router: Router<S>,
    pub targets: Vec<String>,
}

/// A router's name for errors: its function's path, without the crate's
/// (`route`, or `tests::route::{{closure}}` for a closure); a function
/// pointer has no name of its own, so it is named by the edge's source.
fn router_name<R>(from: &str) -> String {
    let full = std::any::type_name::<R>();
    if full.starts_with("fn(") || full.contains("dyn ") {
        return format!("the router after `{from}`");
    }
    full.split_once("::")
        .map_or(full, |(_, rest)| rest)
        .to_owned()
}

/// A graph under construction: nodes, edges and conditional edges over state `S`.
///
/// ```
/// use weaver::prelude::*;
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// struct State {
///     foo: String,
///     #[reducer(append)]
///     bar: Vec<String>,
/// }
///
/// async fn node_a(_: &State) -> StateUpdate {
///     StateUpdate::default().foo("a").bar(vec!["a".into()])
/// }
/// fn node_b(_: &State) -> StateUpdate {
///     StateUpdate::default().foo("b").bar(vec!["b".into()])
/// }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let graph = Graph::<State>::new("CheckpointExample")
///     .add_node("node_a", node_a)
///     .add_node("node_b", node_b)
///     .add_edge(START, "node_a")
///     .add_edge("node_a", "node_b")
///     .add_edge("node_b", END)
///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
/// let state = graph.invoke(State::default(), &RunConfig::thread("thread-1")).await?.complete()?;
/// assert_eq!(state.bar, ["a", "b"]);
/// # Ok::<(), weaver::Error>(()) }).unwrap();
/// ```
pub struct Graph<S: GraphState> {
    pub(crate) name: String,
    pub(crate) nodes: Vec<RawNode<S>>,
    /// The policies of nodes that leave one unset.
    pub(crate) node_defaults: NodePolicy<S>,
    pub(crate) edges: Vec<(String, String)>,
    pub(crate) branches: Vec<RawBranch<S>>,
    pub(crate) destinations: Vec<(String, Vec<String>)>,
    /// Static interrupts declared on the graph (`graph!`'s `interrupt_before`
    /// / `interrupt_after`), merged into the [`Compile`] options.
    pub(crate) interrupts: Compile,
}

impl<S: GraphState> std::fmt::Debug for Graph<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("name", &self.name)
            .field(
                "nodes",
                &self.nodes.iter().map(|(n, ..)| n).collect::<Vec<_>>(),
            )
            .field("edges", &self.edges)
            .finish_non_exhaustive()
    }
}

impl<S: GraphState> Graph<S> {
    /// An empty graph named `name`.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(append)] log: Vec<String> }
    ///
    /// let graph = Graph::<S>::new("billing");
    /// // Nodes and edges come next; the name shows in errors, traces and drawings.
    /// let compiled = graph
    ///     .add_node("a", |_: &S| SUpdate::default())
    ///     .add_sequence([START, "a", END])
    ///     .compile(Compile::new())?;
    /// assert_eq!(compiled.name(), "billing");
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn new(name: impl Into<String>) -> Self {
        Graph {
            name: name.into(),
            nodes: Vec::new(),
            edges: Vec::new(),
            branches: Vec::new(),
            destinations: Vec::new(),
            node_defaults: NodePolicy::new(),
            interrupts: Compile::default(),
        }
    }

    /// Adds a node. Duplicate or reserved names are reported by [`compile`](Graph::compile).
    ///
    /// A node is a function of the state (sync or async, optionally taking
    /// the [`Runtime`](crate::Runtime)) that returns an update, a
    /// [`Command`](crate::Command), or a `Result` of either.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: i64 }
    ///
    /// fn double(s: &S) -> SUpdate { SUpdate::default().n(s.n * 2) }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("double", double)
    ///     .add_node("inc", |s: &S| SUpdate::default().n(s.n + 1))
    ///     .add_sequence([START, "double", "inc", END])
    ///     .compile(Compile::new())?;
    /// let out = graph.invoke(S { n: 5 }, &RunConfig::default()).await?;
    /// assert_eq!(out.complete()?.n, 11);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn add_node<M>(self, name: impl Into<String>, node: impl IntoNode<S, M>) -> Self {
        self.add_node_with(name, node, NodePolicy::new())
    }

    /// Adds a node with its retry, timeout and cache policies (LangGraph's
    /// `add_node(..., retry_policy=..., cache_policy=...)`); what `policy`
    /// leaves unset comes from [`node_defaults`](Graph::node_defaults). An
    /// unusable policy (no attempts, a zero timeout, a backoff factor that is
    /// not a finite number of at least 0) is reported by
    /// [`compile`](Graph::compile).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// struct State {
    ///     answer: String,
    /// }
    ///
    /// // Fails on its first two attempts.
    /// fn flaky(_: &State, rt: &Runtime) -> Result<StateUpdate, NodeError> {
    ///     if rt.attempt() < 3 {
    ///         return Err(NodeError::msg("service unavailable"));
    ///     }
    ///     Ok(StateUpdate::default().answer("ok"))
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let retry = RetryPolicy::new()
    ///     .max_attempts(3)
    ///     .initial_interval(Duration::from_millis(1));
    /// let graph = Graph::<State>::new("retries")
    ///     .add_node_with("flaky", flaky, NodePolicy::new().retry(retry))
    ///     .add_sequence([START, "flaky", END])
    ///     .compile(Compile::new())?;
    /// let state = graph.invoke(State::default(), &RunConfig::default()).await?.complete()?;
    /// assert_eq!(state.answer, "ok");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn add_node_with<M>(
        mut self,
        name: impl Into<String>,
        node: impl IntoNode<S, M>,
        policy: NodePolicy<S>,
    ) -> Self {
        self.nodes
            .push((name.into(), NodeBody::State(node.into_node()), policy));
        self
    }

    /// Adds `graph`, a compiled graph over the same state, as the node
    /// `name` (the same as [`add_node`](Self::add_node) with the graph,
    /// which is how `graph!` takes it: `nodes: [research = research_graph]`):
    /// the node runs it as its task's subgraph (see
    /// [`Runtime::invoke_subgraph`](crate::Runtime::invoke_subgraph): the
    /// parent's checkpointer, the namespace `name:task_id`, interrupts that
    /// pause the parent) on the parent's state.
    ///
    /// The node's update is the subgraph's net change, not its final state
    /// (which, applied through the reducers, would append every item of an
    /// append channel a second time): a last-value, replace or merge
    /// channel the subgraph changed is written with its final value; an
    /// append or delta channel with the items the subgraph appended (for a
    /// set or a map, the items or entries it did not hold before); an add
    /// channel with the difference (of numbers, or of `Duration`s). A
    /// changed channel with a custom reducer, an add channel of another
    /// type (or a `Duration` that shrank), or an append channel that lost
    /// items in the subgraph, fails the node with [`Error::InvalidUpdate`](crate::Error::InvalidUpdate):
    /// use [`add_subgraph_with`](Self::add_subgraph_with) to say what the
    /// update is.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Notes {
    ///     #[reducer(append)]
    ///     lines: Vec<String>,
    /// }
    ///
    /// let research = Graph::<Notes>::new("research")
    ///     .add_node("search", |_: &Notes| NotesUpdate::default().lines(vec!["found".into()]))
    ///     .add_sequence([START, "search", END])
    ///     .compile(Compile::new())
    ///     .unwrap();
    /// let graph = Graph::<Notes>::new("desk")
    ///     .add_node("plan", |_: &Notes| NotesUpdate::default().lines(vec!["planned".into()]))
    ///     .add_subgraph("research", research)
    ///     .add_sequence([START, "plan", "research", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))
    ///     .unwrap();
    /// let done = graph.invoke(Notes::default(), &RunConfig::thread("t")).await.unwrap();
    /// // "planned" once: the subgraph's update is what it appended.
    /// assert_eq!(done.complete().unwrap().lines, ["planned", "found"]);
    /// # });
    /// ```
    pub fn add_subgraph(self, name: impl Into<String>, graph: CompiledGraph<S>) -> Self {
        self.add_node(name, graph)
    }

    /// Adds `graph`, a compiled graph over another state `T`, as the node
    /// `name`: `input` makes the subgraph's input (a `T` or a `T::Update`)
    /// from the parent's state, and `output` the node's update from the
    /// subgraph's final state. The subgraph runs as
    /// [`add_subgraph`](Self::add_subgraph)'s does; a map whose types do
    /// not fit the two states does not compile.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Inner {
    ///     query: String,
    ///     hits: u64,
    /// }
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Outer {
    ///     topic: String,
    ///     found: u64,
    /// }
    ///
    /// let search = Graph::<Inner>::new("search")
    ///     .add_node("count", |s: &Inner| InnerUpdate::default().hits(s.query.len() as u64))
    ///     .add_sequence([START, "count", END])
    ///     .compile(Compile::new())
    ///     .unwrap();
    /// let graph = Graph::<Outer>::new("desk")
    ///     .add_subgraph_with(
    ///         "search",
    ///         search,
    ///         |s: &Outer| Inner { query: s.topic.clone(), ..Inner::default() },
    ///         |done: Inner| OuterUpdate::default().found(done.hits),
    ///     )
    ///     .add_sequence([START, "search", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))
    ///     .unwrap();
    /// let input = Outer { topic: "rust".into(), ..Outer::default() };
    /// let done = graph.invoke(input, &RunConfig::thread("t")).await.unwrap();
    /// assert_eq!(done.complete().unwrap().found, 4);
    /// # });
    /// ```
    pub fn add_subgraph_with<T, I>(
        self,
        name: impl Into<String>,
        graph: CompiledGraph<T>,
        input: impl Fn(&S) -> I + Send + Sync + 'static,
        output: impl Fn(T) -> S::Update + Send + Sync + 'static,
    ) -> Self
    where
        T: GraphState,
        I: Into<Input<T>>,
    {
        self.add_node(name, graph.mapped(input, output))
    }

    /// Adds a node run by [`Send`](crate::Send)s: it takes a send's payload
    /// `P` instead of the state, and runs once per send that names it. It
    /// is reached only by sends (a router's, listed among its conditional
    /// edge's targets); an edge or a `goto` into it is refused by
    /// [`compile`](Graph::compile), as it would carry no payload. Its own
    /// edges lead on as any node's do.
    ///
    /// See [`Send`](crate::Send) for an example.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(append)] log: Vec<String> }
    ///
    /// fn fan_out(_: &S) -> Vec<weaver::Send<u32>> {
    ///     (1..=3).map(|n| weaver::Send::new("square", n)).collect()
    /// }
    ///
    /// // A send node takes its send's payload, not the state.
    /// fn square(n: &u32) -> SUpdate { SUpdate::default().log(vec![(n * n).to_string()]) }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("squares")
    ///     .add_send_node("square", square)
    ///     .add_conditional_edges(START, fan_out, ["square"])
    ///     .add_edge("square", END)
    ///     .compile(Compile::new())?;
    /// let out = graph.invoke(S::default(), &RunConfig::default()).await?.complete()?;
    /// assert_eq!(out.log, ["1", "4", "9"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn add_send_node<P, M>(
        self,
        name: impl Into<String>,
        node: impl IntoPayloadNode<S, P, M>,
    ) -> Self {
        self.add_send_node_with(name, node, NodePolicy::new())
    }

    /// [`add_send_node`](Graph::add_send_node) with the node's policies, as
    /// [`add_node_with`](Graph::add_node_with) takes them; a cache policy
    /// keys a send's result by its payload (its key function, which reads
    /// the state, is not used).
    pub fn add_send_node_with<P, M>(
        mut self,
        name: impl Into<String>,
        node: impl IntoPayloadNode<S, P, M>,
        policy: NodePolicy<S>,
    ) -> Self {
        self.nodes.push((
            name.into(),
            NodeBody::Payload(node.into_payload_node()),
            policy,
        ));
        self
    }

    /// The policies of every node that does not set its own (each part,
    /// retry, timeout and cache, apart): LangGraph JS's `setNodeDefaults`.
    /// The START task that takes in the input has none.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// struct State {
    ///     n: i64,
    /// }
    ///
    /// async fn slow(_: &State) -> StateUpdate {
    ///     tokio::time::sleep(Duration::from_secs(5)).await;
    ///     StateUpdate::default().n(1)
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
    /// let graph = Graph::<State>::new("defaults")
    ///     .add_node("slow", slow)
    ///     .add_sequence([START, "slow", END])
    ///     .node_defaults(NodePolicy::new().timeout(Duration::from_millis(5)))
    ///     .compile(Compile::new())?;
    /// let err = graph.invoke(State::default(), &RunConfig::default()).await.unwrap_err();
    /// assert!(matches!(err, Error::NodeTimeout { node, .. } if node == "slow"));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn node_defaults(mut self, policy: NodePolicy<S>) -> Self {
        self.node_defaults = policy;
        self
    }

    /// Adds an edge: after `from` runs, `to` runs in the next step. Several
    /// edges out of one node fan out; several into one node fan in (it runs
    /// once, after all its predecessors of that step).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(append)] seen: Vec<String> }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// // a fans out to b and c; d runs once after both.
    /// let graph = Graph::<S>::new("diamond")
    ///     .add_node("a", |_: &S| SUpdate::default().seen(vec!["a".into()]))
    ///     .add_node("b", |_: &S| SUpdate::default().seen(vec!["b".into()]))
    ///     .add_node("c", |_: &S| SUpdate::default().seen(vec!["c".into()]))
    ///     .add_node("d", |_: &S| SUpdate::default().seen(vec!["d".into()]))
    ///     .add_edge(START, "a")
    ///     .add_edge("a", "b")
    ///     .add_edge("a", "c")
    ///     .add_edge("b", "d")
    ///     .add_edge("c", "d")
    ///     .add_edge("d", END)
    ///     .compile(Compile::new())?;
    /// let seen = graph.invoke(S::default(), &RunConfig::default()).await?.complete()?.seen;
    /// assert_eq!(seen, ["a", "b", "c", "d"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn add_edge(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.edges.push((from.into(), to.into()));
        self
    }

    /// Adds edges along a chain: `add_sequence([START, "a", "b", END])`.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(append)] seen: Vec<String> }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("chain")
    ///     .add_node("a", |_: &S| SUpdate::default().seen(vec!["a".into()]))
    ///     .add_node("b", |_: &S| SUpdate::default().seen(vec!["b".into()]))
    ///     .add_sequence([START, "a", "b", END])
    ///     .compile(Compile::new())?;
    /// let seen = graph.invoke(S::default(), &RunConfig::default()).await?.complete()?.seen;
    /// assert_eq!(seen, ["a", "b"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn add_sequence<I: IntoIterator<Item = T>, T: Into<String>>(mut self, chain: I) -> Self {
        let names: Vec<String> = chain.into_iter().map(Into::into).collect();
        for pair in names.windows(2) {
            self.edges.push((pair[0].clone(), pair[1].clone()));
        }
        self
    }

    /// Adds a conditional edge: after `from` runs, `router` (given the state
    /// with `from`'s own update applied) picks the next nodes among `targets`,
    /// by name or with [`Send`](crate::Send)s (each a task of the next step
    /// with its own payload; see there). Returning a name outside `targets`
    /// fails the run with [`Error::InvalidRoute`](crate::Error::InvalidRoute)
    /// naming the router.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: i64, verdict: String }
    ///
    /// fn route(s: &S) -> &'static str { if s.n > 0 { "positive" } else { "other" } }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("router")
    ///     .add_node("check", |_: &S| SUpdate::default())
    ///     .add_node("positive", |_: &S| SUpdate::default().verdict("positive"))
    ///     .add_node("other", |_: &S| SUpdate::default().verdict("other"))
    ///     .add_edge(START, "check")
    ///     .add_conditional_edges("check", route, ["positive", "other"])
    ///     .add_edge("positive", END)
    ///     .add_edge("other", END)
    ///     .compile(Compile::new())?;
    /// let out = graph.invoke(S { n: 3, ..S::default() }, &RunConfig::default()).await?;
    /// assert_eq!(out.complete()?.verdict, "positive");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn add_conditional_edges<R, I, T>(
        mut self,
        from: impl Into<String>,
        router: R,
        targets: I,
    ) -> Self
    where
        R: Fn(&S) -> T + Send + Sync + 'static,
        T: IntoRoute,
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let from = from.into();
        self.branches.push(RawBranch {
            name: router_name::<R>(&from),
            from,
            router: Arc::new(move |s: &S| router(s).into_route()),
            targets: targets.into_iter().map(Into::into).collect(),
        });
        self
    }

    /// Names the router of the conditional edge added last, for errors
    /// (`graph!` passes the router's path as written).
    #[doc(hidden)]
    pub fn router_named(mut self, name: impl Into<String>) -> Self {
        if let Some(b) = self.branches.last_mut() {
            b.name = name.into();
        }
        self
    }

    /// Declares the nodes a node may `goto` through a [`Command`](crate::Command),
    /// so validation and drawings know those paths. A node with declared
    /// destinations may go only there: a `Command` to another node fails
    /// the run with [`Error::InvalidGoto`](crate::Error::InvalidGoto). A
    /// node with none declared may go to any node.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { done: bool }
    ///
    /// fn decide(_: &S) -> Command<SUpdate> { Command::update(SUpdate::default()).goto("finish") }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("goto")
    ///     .add_node("decide", decide)
    ///     .add_node("finish", |_: &S| SUpdate::default().done(true))
    ///     .add_edge(START, "decide")
    ///     .add_destinations("decide", ["finish"])
    ///     .add_edge("finish", END)
    ///     .compile(Compile::new())?;
    /// assert!(graph.invoke(S::default(), &RunConfig::default()).await?.complete()?.done);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn add_destinations<I>(mut self, node: impl Into<String>, targets: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.destinations
            .push((node.into(), targets.into_iter().map(Into::into).collect()));
        self
    }

    /// Pauses before these nodes run, whatever the [`Compile`] options say
    /// (they add to [`Compile::interrupt_before`]; needs a checkpointer).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(append)] log: Vec<String> }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("draft", |_: &S| SUpdate::default().log(vec!["draft".into()]))
    ///     .add_node("send", |_: &S| SUpdate::default().log(vec!["send".into()]))
    ///     .add_sequence([START, "draft", "send", END])
    ///     .interrupt_before(["send"])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t");
    /// assert!(graph.invoke(S::default(), &config).await?.is_interrupted());
    /// assert_eq!(graph.get_state(&config).await?.next, ["send"]);
    /// // Continue once approved.
    /// let done = graph.continue_run(&config).await?.complete()?;
    /// assert_eq!(done.log, ["draft", "send"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn interrupt_before<I: IntoIterator<Item = T>, T: Into<String>>(
        mut self,
        nodes: I,
    ) -> Self {
        self.interrupts = self.interrupts.interrupt_before(nodes);
        self
    }

    /// Pauses after these nodes run (adds to [`Compile::interrupt_after`];
    /// needs a checkpointer).
    pub fn interrupt_after<I: IntoIterator<Item = T>, T: Into<String>>(mut self, nodes: I) -> Self {
        self.interrupts = self.interrupts.interrupt_after(nodes);
        self
    }
}

/// Options of [`Graph::compile`]: the checkpointer, static interrupts.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Compile {
    pub(crate) checkpointer: Option<Checkpointer>,
    pub(crate) interrupt_before: Vec<String>,
    pub(crate) interrupt_after: Vec<String>,
    // store: begin
    pub(crate) store: Option<Arc<dyn crate::store::Store>>,
    // store: end
    pub(crate) renames: Vec<(String, String)>,
}

impl Compile {
    /// No checkpointer, no interrupts.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: i64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("plain")
    ///     .add_node("inc", |s: &S| SUpdate::default().n(s.n + 1))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new())?;
    /// // Without a checkpointer a run needs no thread.
    /// assert_eq!(graph.invoke(S::default(), &RunConfig::default()).await?.complete()?.n, 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new() -> Self {
        Compile::default()
    }

    /// Checkpoints every super-step into `saver`.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: i64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("saved")
    ///     .add_node("inc", |s: &S| SUpdate::default().n(s.n + 1))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t1");
    /// graph.invoke(S::default(), &config).await?;
    /// assert_eq!(graph.get_state(&config).await?.values.n, 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn checkpointer(mut self, saver: impl Saver + 'static) -> Self {
        self.checkpointer = Some(Checkpointer::new(saver));
        self
    }

    /// Reads stored checkpoints that name node `old` (a name the graph no
    /// longer has) as naming node `new`: their pending work, finished
    /// tasks' writes, interrupts and answers move to `new`, so a thread
    /// paused before a rename resumes after it; a subgraph of the node
    /// paused under its old name goes on in the namespace it ran in
    /// (`old:<task id>`), its finished nodes not run again. Without it such
    /// a checkpoint is an [`Error::RemovedNode`](crate::Error::RemovedNode).
    /// `new` must be a node of the graph and `old` not, each `old` mapped
    /// once ([`GraphError::InvalidRename`](crate::GraphError::InvalidRename)
    /// otherwise, from `compile`). Stored records are not rewritten.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: u32 }
    /// async fn review(_s: &S) -> SUpdate { SUpdate::default().n(1u32) }
    ///
    /// // `review` was called `check` in the previous release.
    /// let graph = graph! { state: S, nodes: [review], edges: [START -> review, review -> END] }
    ///     .compile(Compile::new().rename_node("check", "review"));
    /// assert!(graph.is_ok());
    /// let wrong = graph! { state: S, nodes: [review], edges: [START -> review, review -> END] }
    ///     .compile(Compile::new().rename_node("check", "nowhere"));
    /// assert!(matches!(
    ///     wrong,
    ///     Err(weaver::Error::InvalidGraph(weaver::GraphError::InvalidRename { .. }))
    /// ));
    /// ```
    pub fn rename_node(mut self, old: impl Into<String>, new: impl Into<String>) -> Self {
        self.renames.push((old.into(), new.into()));
        self
    }

    /// Checkpoints into a shared saver.
    pub fn checkpointer_arc(mut self, saver: Arc<dyn Saver>) -> Self {
        self.checkpointer = Some(Checkpointer::from_arc(saver));
        self
    }

    /// Pauses before these nodes run (needs a checkpointer).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(append)] log: Vec<String> }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("draft", |_: &S| SUpdate::default().log(vec!["draft".into()]))
    ///     .add_node("send", |_: &S| SUpdate::default().log(vec!["send".into()]))
    ///     .add_sequence([START, "draft", "send", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()).interrupt_before(["send"]))?;
    /// let config = RunConfig::thread("t");
    /// graph.invoke(S::default(), &config).await?;
    /// assert_eq!(graph.get_state(&config).await?.values.log, ["draft"]);
    /// assert_eq!(graph.continue_run(&config).await?.complete()?.log, ["draft", "send"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn interrupt_before<I: IntoIterator<Item = T>, T: Into<String>>(
        mut self,
        nodes: I,
    ) -> Self {
        self.interrupt_before
            .extend(nodes.into_iter().map(Into::into));
        self
    }

    /// Pauses after these nodes run (needs a checkpointer).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(append)] log: Vec<String> }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("draft", |_: &S| SUpdate::default().log(vec!["draft".into()]))
    ///     .add_node("send", |_: &S| SUpdate::default().log(vec!["send".into()]))
    ///     .add_sequence([START, "draft", "send", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()).interrupt_after(["draft"]))?;
    /// let config = RunConfig::thread("t");
    /// let paused = graph.invoke(S::default(), &config).await?;
    /// assert!(paused.is_interrupted());
    /// // The draft is there to review (or edit with `update_state`) before `send` runs.
    /// assert_eq!(graph.get_state(&config).await?.values.log, ["draft"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn interrupt_after<I: IntoIterator<Item = T>, T: Into<String>>(mut self, nodes: I) -> Self {
        self.interrupt_after
            .extend(nodes.into_iter().map(Into::into));
        self
    }

    // store: begin
    /// Gives every node the memory store `store` (through
    /// [`Runtime::store`](crate::Runtime::store)), shared across threads.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { name: String }
    ///
    /// async fn remember(s: &S, rt: &Runtime) -> Result<SUpdate, NodeError> {
    ///     let store = rt.store().expect("compiled with a store");
    ///     store.put(&["users"], "me", serde_json::json!({ "name": s.name })).await?;
    ///     Ok(SUpdate::default())
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let store = InMemoryStore::new();
    /// let graph = Graph::<S>::new("memory")
    ///     .add_node("remember", remember)
    ///     .add_sequence([START, "remember", END])
    ///     .compile(Compile::new().store(store.clone()))?;
    /// graph.invoke(S { name: "Ada".into() }, &RunConfig::default()).await?;
    /// let item = store.get(&["users"], "me").await?.expect("stored");
    /// assert_eq!(item.value["name"], "Ada");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn store(mut self, store: impl crate::store::Store + 'static) -> Self {
        self.store = Some(Arc::new(store));
        self
    }

    /// Gives every node a shared memory store.
    pub fn store_arc(mut self, store: Arc<dyn crate::store::Store>) -> Self {
        self.store = Some(store);
        self
    }
    // store: end
}
