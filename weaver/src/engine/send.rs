//! [`Send`]: a router's map step. A router returns sends, each naming a node
//! and carrying its own payload; each send is one task of the next step,
//! run on its payload instead of the state. The sends wait in the
//! checkpoint's `__sends__` channel, so a run stopped in the middle of a
//! fan-out is finished from the checkpoint by any process.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::node::{AsyncStateFn, AsyncStateRuntimeFn, IntoNodeResult, NodeError, NodeFuture};
use super::runtime::Runtime;
use crate::state::GraphState;

pub(crate) use crate::checkpoint::SENDS_CHANNEL;

/// A task for the next step: run `node` on `payload` (LangGraph's `Send`).
///
/// A router of a conditional edge returns a `Vec<Send<P>>` to fan out: each
/// send is its own task of the next step, with its own payload (a private
/// input, not the graph state), and the tasks run concurrently under
/// [`RunConfig::max_concurrency`](crate::RunConfig::max_concurrency). Their
/// updates merge in the order the router sent them, whatever order they
/// finish in. The target is a node added with
/// [`Graph::add_send_node`](crate::Graph::add_send_node), whose function
/// takes `&P`, and it must be among the conditional edge's targets.
///
/// Not in the prelude, as it would shadow the `Send` marker trait: write
/// `weaver::Send`.
///
/// ```
/// use weaver::prelude::*;
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// struct Docs {
///     docs: Vec<String>,
///     #[reducer(append)]
///     summaries: Vec<String>,
/// }
///
/// fn fan_out(s: &Docs) -> Vec<weaver::Send<String>> {
///     s.docs.iter().map(|d| weaver::Send::new("summarize", d.clone())).collect()
/// }
///
/// fn summarize(doc: &String) -> DocsUpdate {
///     DocsUpdate::default().summaries(vec![doc.to_uppercase()])
/// }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let graph = Graph::<Docs>::new("map")
///     .add_send_node("summarize", summarize)
///     .add_conditional_edges(START, fan_out, ["summarize"])
///     .add_edge("summarize", END)
///     .compile(Compile::new())?;
/// let input = Docs { docs: vec!["a".into(), "b".into(), "c".into()], ..Docs::default() };
/// let out = graph.invoke(input, &RunConfig::default()).await?.complete()?;
/// assert_eq!(out.summaries, ["A", "B", "C"]);
/// # Ok::<(), weaver::Error>(()) }).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Send<P> {
    /// The node to run.
    pub node: String,
    /// Its input.
    pub payload: P,
}

impl<P> Send<P> {
    /// A task running `node` on `payload`.
    ///
    /// ```
    /// use weaver::Send;
    ///
    /// let send = Send::new("summarize", "chapter 1".to_owned());
    /// assert_eq!((send.node.as_str(), send.payload.as_str()), ("summarize", "chapter 1"));
    /// ```
    pub fn new(node: impl Into<String>, payload: P) -> Self {
        Send {
            node: node.into(),
            payload,
        }
    }
}

/// A send as the checkpoint stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredSend {
    pub node: String,
    pub payload: Value,
}

/// Where a router sends the run: node names (or [`END`](crate::END)) and
/// sends. Made by [`IntoRoute`] from what a router returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Route {
    pub(crate) names: Vec<String>,
    pub(crate) sends: Vec<StoredSend>,
    /// Why a payload could not be encoded, if one could not.
    pub(crate) unencodable: Option<String>,
}

impl Route {
    /// A route to the nodes `names`.
    pub fn to<I: IntoIterator<Item = T>, T: Into<String>>(names: I) -> Self {
        Route {
            names: names.into_iter().map(Into::into).collect(),
            ..Route::default()
        }
    }

    /// A route of `sends`.
    pub fn sends<P: Serialize>(sends: impl IntoIterator<Item = Send<P>>) -> Self {
        let mut route = Route::default();
        for s in sends {
            let encoded = super::finite::check(&s.payload)
                .map_err(|e| e.to_string())
                .and_then(|()| serde_json::to_value(&s.payload).map_err(|e| e.to_string()));
            match encoded {
                Ok(payload) => route.sends.push(StoredSend {
                    node: s.node,
                    payload,
                }),
                Err(e) => {
                    route.unencodable = Some(format!("the payload of a send to `{}`: {e}", s.node));
                    break;
                }
            }
        }
        route
    }
}

/// What a router of a conditional edge may return: one node name, several,
/// none (`Option`), or [`Send`]s.
pub trait IntoRoute {
    /// The route.
    fn into_route(self) -> Route;
}

impl IntoRoute for Route {
    fn into_route(self) -> Route {
        self
    }
}

impl IntoRoute for &str {
    fn into_route(self) -> Route {
        Route::to([self])
    }
}

impl IntoRoute for String {
    fn into_route(self) -> Route {
        Route::to([self])
    }
}

impl<T: Into<String>> IntoRoute for Vec<T> {
    fn into_route(self) -> Route {
        Route::to(self)
    }
}

impl<T: Into<String>> IntoRoute for Option<T> {
    fn into_route(self) -> Route {
        Route::to(self)
    }
}

impl<P: Serialize> IntoRoute for Vec<Send<P>> {
    fn into_route(self) -> Route {
        Route::sends(self)
    }
}

impl<P: Serialize> IntoRoute for Send<P> {
    fn into_route(self) -> Route {
        Route::sends([self])
    }
}

/// A type-erased node run by sends: it takes a send's payload (as stored)
/// instead of the state. Built from a function by [`IntoPayloadNode`].
pub trait PayloadNode<S: GraphState>: std::marker::Send + Sync + 'static {
    /// Runs the node on a send's payload.
    fn run<'a>(&'a self, payload: &'a Value, runtime: &'a Runtime) -> NodeFuture<'a, S::Update>;
}

/// A function usable as a node run by [`Send`]s with payload `P`, in a
/// graph over `S`: `fn(&P) -> R`, `fn(&P, &Runtime) -> R` or their `async`
/// forms, where `R` is the state's update, a `Command` or a `Result` of
/// either. `M` is an inference marker; callers never name it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be used as a node run by sends of payload `{P}` in a graph over `{S}`",
    label = "not a payload node for this payload and state",
    note = "a send's node is `fn(&Payload) -> R`, `fn(&Payload, &Runtime) -> R`, or the `async fn` forms, where R is the state's update, a `Command`, or a `Result` of either"
)]
pub trait IntoPayloadNode<S: GraphState, P, M>: std::marker::Send + Sync + 'static {
    /// Erases the function into a [`PayloadNode`].
    fn into_payload_node(self) -> Box<dyn PayloadNode<S>>;
}

/// Decodes a stored payload into `P`: a payload that does not decode fails
/// the task.
fn decode<P: DeserializeOwned>(payload: &Value) -> Result<P, NodeError> {
    P::deserialize(payload)
        .map_err(|e| NodeError::msg(format!("cannot decode the send's payload: {e}")))
}

#[doc(hidden)]
pub mod markers {
    /// `fn(&P) -> R`.
    #[derive(Debug)]
    pub struct Sync<R>(std::marker::PhantomData<R>);
    /// `fn(&P, &Runtime) -> R`.
    #[derive(Debug)]
    pub struct SyncRt<R>(std::marker::PhantomData<R>);
    /// `async fn(&P) -> R`.
    #[derive(Debug)]
    pub struct Async<R>(std::marker::PhantomData<R>);
    /// `async fn(&P, &Runtime) -> R`.
    #[derive(Debug)]
    pub struct AsyncRt<R>(std::marker::PhantomData<R>);
}

struct FnPayloadNode<F, P, M>(F, PhantomData<fn() -> (P, M)>);

impl<F, P, M> FnPayloadNode<F, P, M> {
    fn boxed<S: GraphState>(f: F) -> Box<dyn PayloadNode<S>>
    where
        Self: PayloadNode<S>,
    {
        Box::new(FnPayloadNode(f, PhantomData))
    }
}

impl<S, P, F, R> PayloadNode<S> for FnPayloadNode<F, P, markers::Sync<R>>
where
    S: GraphState,
    P: DeserializeOwned + 'static,
    F: Fn(&P) -> R + std::marker::Send + Sync + 'static,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn run<'a>(&'a self, payload: &'a Value, _: &'a Runtime) -> NodeFuture<'a, S::Update> {
        let out = decode(payload).and_then(|p: P| (self.0)(&p).into_node_result());
        Box::pin(std::future::ready(out))
    }
}

impl<S, P, F, R> IntoPayloadNode<S, P, markers::Sync<R>> for F
where
    S: GraphState,
    P: DeserializeOwned + 'static,
    F: Fn(&P) -> R + std::marker::Send + Sync + 'static,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn into_payload_node(self) -> Box<dyn PayloadNode<S>> {
        FnPayloadNode::<F, P, markers::Sync<R>>::boxed(self)
    }
}

impl<S, P, F, R> PayloadNode<S> for FnPayloadNode<F, P, markers::SyncRt<R>>
where
    S: GraphState,
    P: DeserializeOwned + 'static,
    F: Fn(&P, &Runtime) -> R + std::marker::Send + Sync + 'static,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn run<'a>(&'a self, payload: &'a Value, runtime: &'a Runtime) -> NodeFuture<'a, S::Update> {
        let out = decode(payload).and_then(|p: P| (self.0)(&p, runtime).into_node_result());
        Box::pin(std::future::ready(out))
    }
}

impl<S, P, F, R> IntoPayloadNode<S, P, markers::SyncRt<R>> for F
where
    S: GraphState,
    P: DeserializeOwned + 'static,
    F: Fn(&P, &Runtime) -> R + std::marker::Send + Sync + 'static,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn into_payload_node(self) -> Box<dyn PayloadNode<S>> {
        FnPayloadNode::<F, P, markers::SyncRt<R>>::boxed(self)
    }
}

impl<S, P, F, R> PayloadNode<S> for FnPayloadNode<F, P, markers::Async<R>>
where
    S: GraphState,
    P: DeserializeOwned + std::marker::Send + Sync + 'static,
    F: for<'a> AsyncStateFn<'a, P, Output = R>,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn run<'a>(&'a self, payload: &'a Value, _: &'a Runtime) -> NodeFuture<'a, S::Update> {
        Box::pin(async move {
            let p: P = decode(payload)?;
            self.0.call(&p).await.into_node_result()
        })
    }
}

impl<S, P, F, R> IntoPayloadNode<S, P, markers::Async<R>> for F
where
    S: GraphState,
    P: DeserializeOwned + std::marker::Send + Sync + 'static,
    F: for<'a> AsyncStateFn<'a, P, Output = R>,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn into_payload_node(self) -> Box<dyn PayloadNode<S>> {
        FnPayloadNode::<F, P, markers::Async<R>>::boxed(self)
    }
}

impl<S, P, F, R> PayloadNode<S> for FnPayloadNode<F, P, markers::AsyncRt<R>>
where
    S: GraphState,
    P: DeserializeOwned + std::marker::Send + Sync + 'static,
    F: for<'a> AsyncStateRuntimeFn<'a, P, Output = R>,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn run<'a>(&'a self, payload: &'a Value, runtime: &'a Runtime) -> NodeFuture<'a, S::Update> {
        Box::pin(async move {
            let p: P = decode(payload)?;
            self.0.call(&p, runtime).await.into_node_result()
        })
    }
}

impl<S, P, F, R> IntoPayloadNode<S, P, markers::AsyncRt<R>> for F
where
    S: GraphState,
    P: DeserializeOwned + std::marker::Send + Sync + 'static,
    F: for<'a> AsyncStateRuntimeFn<'a, P, Output = R>,
    R: IntoNodeResult<S::Update> + 'static,
{
    fn into_payload_node(self) -> Box<dyn PayloadNode<S>> {
        FnPayloadNode::<F, P, markers::AsyncRt<R>>::boxed(self)
    }
}

/// A compile-time check that `router`'s sends carry the payload `node`
/// takes: `graph!` calls it for each of its `send:` declarations.
#[doc(hidden)]
pub fn check_send<S, P, T, R, N, M>(_router: &R, _node: &N)
where
    S: GraphState,
    R: Fn(&S) -> T,
    T: IntoSends<P>,
    N: IntoPayloadNode<S, P, M>,
{
}

/// `router`, unchanged: `graph!` passes a `send:` router through it once,
/// so that its closure's signature is inferred as the builder infers it, and
/// then hands the same value to [`check_send`] and to the builder (a
/// router's expression is never written twice, which would move what a
/// `move` closure captures into the check).
#[doc(hidden)]
pub fn send_router<S, T, R>(router: R) -> R
where
    S: GraphState,
    R: Fn(&S) -> T,
{
    router
}

/// `node`, unchanged: as [`send_router`], for a node a `send:` router leads
/// to.
#[doc(hidden)]
pub fn payload_node<S, P, M, N>(node: N) -> N
where
    S: GraphState,
    N: IntoPayloadNode<S, P, M>,
{
    node
}

/// Router outputs made of sends of payload `P` (for [`check_send`]).
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "a `send:` router returns `Vec<Send<P>>` or `Send<P>`, not `{Self}`",
    label = "the router's output",
    note = "`graph!` checks that each target takes the payload `P`; a `Route` (which may mix names and sends) carries no payload type: route it with `conditional:` instead"
)]
pub trait IntoSends<P> {}

impl<P> IntoSends<P> for Vec<Send<P>> {}
impl<P> IntoSends<P> for Send<P> {}
