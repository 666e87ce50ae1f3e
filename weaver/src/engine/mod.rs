//! Running graphs: the compiled graph, its nodes and their runtime handle,
//! the step algebra, the runner, the loop (runs tasks, applies their
//! writes, checkpoints, stops at END, at an interrupt or at the recursion
//! limit), reads of a thread, `update_state` and what a streamed run
//! yields.

mod algebra;
mod cache;
mod compiled;
mod effect;
mod finite;
mod inspect;
mod inspect_subgraphs;
mod lease;
pub mod node;
pub(crate) mod node_cache;
pub(crate) mod outline;
mod persist;
mod policy;
mod renames;
mod run;
mod runner;
mod runtime;
mod send;
pub(crate) mod spec;
mod stream;
mod subgraph;
mod subgraph_node;
mod subgraph_replay;
mod update;
mod values;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::state::GraphState;

pub use compiled::CompiledGraph;
pub use effect::{EffectError, EffectInfo};
pub use inspect::{History, StateSnapshot, TaskInfo};
pub use inspect_subgraphs::SubgraphState;
pub use node::{Command, IntoNode, IntoNodeResult, Node, NodeError, ParentCommand};
pub use outline::GraphOutline;
pub use policy::{CachePolicy, NodePolicy, RetryPolicy};
pub use runtime::{InterruptSignal, Runtime};
pub use send::{IntoPayloadNode, IntoRoute, PayloadNode, Route, Send};
#[doc(hidden)]
pub use send::{IntoSends, check_send, payload_node, send_router};
pub use spec::{END, START};
pub use stream::{
    CheckpointEvent, MessageChunk, RunStream, StreamEvent, StreamItem, StreamMode, StreamModes,
    StreamWriter, SubgraphEvent, TaskOutcome, TaskRef,
};
pub use subgraph::SubgraphCall;
pub use subgraph_node::MappedSubgraph;
pub use update::StepUpdate;

/// How a run ended when it did not fail.
#[derive(Debug, Clone)]
pub enum Outcome<S> {
    /// The run reached END; the final state.
    Complete(S),
    /// The run paused for input; resume with
    /// [`CompiledGraph::resume`](crate::CompiledGraph::resume).
    Interrupted(Vec<Interrupt>),
}

impl<S> Outcome<S> {
    /// The final state, or [`Error::Interrupted`] if the run paused.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |s: &S| SUpdate::default().n(s.n + 1))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new())?;
    /// let state = graph.invoke(S { n: 1 }, &RunConfig::default()).await?.complete()?;
    /// assert_eq!(state.n, 2);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn complete(self) -> Result<S> {
        match self {
            Outcome::Complete(s) => Ok(s),
            Outcome::Interrupted(i) => Err(Error::Interrupted { count: i.len() }),
        }
    }

    /// The pending interrupts (empty when complete).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { name: String }
    ///
    /// fn ask(_: &S, rt: &Runtime) -> Result<SUpdate, NodeError> {
    ///     let name = rt.interrupt("what is your name?")?;
    ///     Ok(SUpdate::default().name(name.as_str().unwrap_or_default()))
    /// }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("ask", ask)
    ///     .add_sequence([START, "ask", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t");
    /// let out = graph.invoke(S::default(), &config).await?;
    /// assert!(out.is_interrupted());
    /// assert_eq!(out.interrupts()[0].value, "what is your name?");
    /// let done = graph.resume(serde_json::json!("Ada"), &config).await?;
    /// assert!(done.interrupts().is_empty());
    /// assert_eq!(done.complete()?.name, "Ada");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn interrupts(&self) -> &[Interrupt] {
        match self {
            Outcome::Complete(_) => &[],
            Outcome::Interrupted(i) => i,
        }
    }

    /// Whether the run paused.
    pub fn is_interrupted(&self) -> bool {
        matches!(self, Outcome::Interrupted(_))
    }
}

/// Where an interrupt came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterruptWhen {
    /// A node called `Runtime::interrupt`.
    Node,
    /// A static `interrupt_before` stop.
    Before,
    /// A static `interrupt_after` stop.
    After,
}

/// A pause waiting for human input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interrupt {
    /// Stable id: key of the resume map.
    pub id: String,
    /// The value the node passed to `interrupt` (null for static stops).
    pub value: Value,
    /// The node that paused.
    pub node: String,
    /// Where it came from.
    pub when: InterruptWhen,
}

/// What to resume an interrupted run with.
#[derive(Debug, Clone, PartialEq)]
pub enum Resume {
    /// One value, for a run with exactly one pending interrupt.
    Value(Value),
    /// Values keyed by interrupt id.
    Map(BTreeMap<String, Value>),
}

impl From<Value> for Resume {
    fn from(v: Value) -> Self {
        Resume::Value(v)
    }
}

impl From<BTreeMap<String, Value>> for Resume {
    fn from(m: BTreeMap<String, Value>) -> Self {
        Resume::Map(m)
    }
}

impl FromIterator<(String, Value)> for Resume {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        Resume::Map(iter.into_iter().collect())
    }
}

/// What starts a run.
#[derive(Debug, Clone)]
pub enum Input<S: GraphState> {
    /// New input, merged into the state through the reducers (a step `-1`
    /// `input` checkpoint); unfinished tasks of the thread are discarded.
    Update(S::Update),
    /// No input: continue the thread's pending tasks (after a failure, or a
    /// static interrupt), or replay from an older `checkpoint_id`.
    Continue,
    /// Answers to pending interrupts.
    Resume(Resume),
}

impl<S: GraphState> Input<S> {
    /// New input from a full state (every channel written).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(append)] log: Vec<String> }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("a", |_: &S| SUpdate::default().log(vec!["a".into()]))
    ///     .add_sequence([START, "a", END])
    ///     .compile(Compile::new())?;
    /// let input = Input::state(S { log: vec!["start".into()] });
    /// assert_eq!(graph.invoke(input, &RunConfig::default()).await?.complete()?.log, ["start", "a"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn state(state: S) -> Self {
        Input::Update(state.into())
    }

    /// New input from a partial update.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { topic: String, #[reducer(add)] turns: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("turn", |_: &S| SUpdate::default().turns(1u64))
    ///     .add_sequence([START, "turn", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t");
    /// graph.invoke(Input::update(SUpdate::default().topic("cats")), &config).await?;
    /// // Only `turns` is written: the topic set by the first run stays.
    /// let out = graph.invoke(Input::update(SUpdate::default()), &config).await?.complete()?;
    /// assert_eq!((out.topic.as_str(), out.turns), ("cats", 2));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn update(update: S::Update) -> Self {
        Input::Update(update)
    }
}
