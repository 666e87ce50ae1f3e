//! # weaver
//!
//! Durable, typed graph workflows: LangGraph's execution and persistence
//! model, with the graph and its state checked by the Rust compiler.
//!
//! A graph's state is a struct whose fields are *channels*
//! ([`GraphState`], usually derived); each channel has a reducer that says
//! how writes to it combine. Nodes are functions that read the state and
//! return a typed partial update, or a [`Command`] that also says where to
//! go. Nodes triggered together run concurrently in a *super-step*, and
//! their updates merge in a deterministic order. With a checkpointer
//! ([`Saver`]: [`InMemorySaver`], SQLite, PostgreSQL, MongoDB) every super-step is
//! stored per *thread*, which gives history, time travel, forks,
//! human-in-the-loop pauses answered from any process, and recovery after
//! a failed node.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use weaver::prelude::*;
//!
//! #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
//! struct State {
//!     topic: String,
//!     #[reducer(append)]
//!     notes: Vec<String>,
//! }
//!
//! fn research(s: &State) -> StateUpdate {
//!     StateUpdate::default().notes(vec![format!("facts about {}", s.topic)])
//! }
//! async fn write(s: &State) -> StateUpdate {
//!     StateUpdate::default().notes(vec![format!("essay from {} note(s)", s.notes.len())])
//! }
//!
//! let graph = graph! {
//!     state: State,
//!     nodes: [research, write],
//!     edges: [START -> research -> write -> END],
//! }
//! .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
//!
//! let config = RunConfig::thread("essay-1");
//! let input = State { topic: "owls".into(), ..State::default() };
//! let done = graph.invoke(input, &config).await?.complete()?;
//! assert_eq!(done.notes, ["facts about owls", "essay from 1 note(s)"]);
//! // Every step is a checkpoint of the thread, newest first.
//! assert_eq!(graph.get_state_history(&config, History::default()).await?.len(), 4);
//! # Ok::<(), weaver::Error>(()) }).unwrap();
//! ```
//!
//! # The guide
//!
//! The [`guide`] has a chapter per task, each with runnable examples:
//! [quick start](guide::quick_start), [state and reducers](guide::state),
//! [building graphs](guide::graphs), [running them](guide::running),
//! [persistence](guide::persistence),
//! [human in the loop](guide::human_in_the_loop),
//! [time travel](guide::time_travel), [the memory store](guide::memory_store),
//! [limits and errors](guide::limits_and_errors),
//! [coming from LangGraph](guide::coming_from_langgraph),
//! [side effects](guide::side_effects),
//! [releasing a new version](guide::releasing),
//! [encryption](guide::encryption), [deploying](guide::deploying),
//! [several workers on one conversation](guide::workers) and
//! [chat flows](guide::chat_flows).
//!
//! # The main types
//!
//! - Authoring: [`GraphState`] (derive) and its update, [`Graph`] and
//!   [`graph!`], [`Compile`], [`Command`], [`Send`], [`NodePolicy`]
//!   ([`RetryPolicy`], [`CachePolicy`]).
//! - Running: [`CompiledGraph`] ([`invoke`](CompiledGraph::invoke),
//!   [`resume`](CompiledGraph::resume), [`stream`](CompiledGraph::stream),
//!   [`get_state`](CompiledGraph::get_state),
//!   [`update_state`](CompiledGraph::update_state)), [`RunConfig`],
//!   [`Durability`], [`Runtime`] (what a node is handed), [`Outcome`],
//!   [`StreamMode`] and [`StreamEvent`].
//! - Storing: [`Saver`] and the [`Checkpointer`] facade, [`InMemorySaver`],
//!   [`checkpoint::SqliteSaver`] (feature `sqlite`),
//!   [`checkpoint::PostgresSaver`] (feature `postgres`),
//!   [`mongo::MongoSaver`] (feature `mongodb`), [`checkpoint::AdapterSaver`]
//!   (a saver over any [`checkpoint::SnapshotAdapter`]), [`migrate`].
//! - Memory: [`Store`], [`InMemoryStore`], [`store::SqliteStore`],
//!   [`store::PostgresStore`], [`store::MongoStore`] (feature `mongodb`).
//! - Chat flows: [`chat`]; releases: [`evolution`].
//! - Errors: [`Error`], one enum for every fallible call.
//!
//! Features: `sqlite`, `postgres` (the SQL savers, stores and migrations),
//! `mongodb` (the MongoDB saver and store), `encryption`
//! ([`codec::EncryptedCodec`]). `use weaver::prelude::*;`
//! brings the names most programs need.
#![forbid(unsafe_code)]
#![deny(missing_docs, missing_debug_implementations)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod channel;
pub mod chat;
pub mod checkpoint;
pub mod codec;
pub mod config;
pub mod engine;
mod error;
pub mod evolution;
pub mod graph;
pub mod guide;
pub mod migrate;
#[cfg(feature = "mongodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "mongodb")))]
pub mod mongo;
mod panics;
mod sql;
pub mod state;
pub mod store;

pub use checkpoint::{Checkpointer, InMemorySaver, Saver};
pub use config::{Durability, RunConfig};
pub use engine::{
    CachePolicy, CheckpointEvent, GraphOutline, Input, Interrupt, InterruptSignal, InterruptWhen,
    IntoPayloadNode, MappedSubgraph, MessageChunk, NodePolicy, Outcome, PayloadNode, Resume,
    RetryPolicy, Route, Runtime, Send, StreamEvent, StreamItem, StreamMode, StreamModes,
    StreamWriter, SubgraphCall, SubgraphEvent, SubgraphState, TaskOutcome, TaskRef,
};
pub use engine::{EffectError, EffectInfo};
pub use error::{BoxError, Error, GraphError, Result};
pub use graph::{
    Command, Compile, CompiledGraph, END, Graph, IntoNode, Node, NodeError, ParentCommand,
    RunStream, START,
};
pub use schemars::JsonSchema;
pub use state::{GraphState, StateSchema, Update};
pub use store::{InMemoryStore, Store};
pub use weaver_macros::{GraphState, graph};

/// The names most programs need: `use weaver::prelude::*;`.
pub mod prelude {
    pub use crate::checkpoint::{InMemorySaver, Saver};
    pub use crate::config::{Durability, RunConfig};
    pub use crate::engine::{
        CachePolicy, History, Input, Interrupt, NodePolicy, Outcome, Resume, RetryPolicy, Runtime,
        StateSnapshot,
    };
    pub use crate::error::{Error, Result};
    pub use crate::graph::{
        Command, Compile, CompiledGraph, END, Graph, IntoNode, NodeError, START,
    };
    pub use crate::state::{GraphState, StateSchema, Update};
    pub use crate::store::{InMemoryStore, Search, Store};
    pub use schemars::JsonSchema;
    pub use serde::{Deserialize, Serialize};
    pub use weaver_macros::{GraphState, graph};
}

/// The README's examples, compiled as doctests so they stay true (its tour
/// uses the SQLite saver).
#[cfg(all(doctest, feature = "sqlite"))]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

#[doc(hidden)]
pub mod __private {
    //! Re-exports for generated code; not a public API.
    pub use crate::engine::{IntoSends, check_send, payload_node, send_router};
    pub use crate::evolution::probe::{NoSchema, Probe, ViaSchema, upcast_with};
    pub use crate::state::reducer::{AddReducer, AppendReducer, DeltaReducer, MergeReducer};
    pub use schemars;
    pub use serde;
    pub use serde_json;
}
