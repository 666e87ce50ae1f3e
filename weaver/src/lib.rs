//! # weaver
//!
//! Durable, typed graph workflows: LangGraph's execution and persistence
//! model, with the graph and its state checked by the Rust compiler.
//!
//! A graph's state is a struct whose fields are *channels*
//! ([`GraphState`], usually derived). Nodes read the state and return a
//! typed partial update; nodes triggered together run concurrently in a
//! *super-step*, and their updates merge through each channel's reducer in a
//! deterministic order. With a checkpointer ([`Saver`]), every super-step is
//! checkpointed per *thread*, which gives history, time travel, forks,
//! human-in-the-loop pauses and recovery after a failed node.
//!
//! See the README for the quick start.
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
pub mod graph;
pub mod guide;
pub mod migrate;
mod sql;
pub mod state;
pub mod store;

pub use checkpoint::{Checkpointer, InMemorySaver, Saver};
pub use config::{Durability, RunConfig};
pub use engine::{
    CachePolicy, CheckpointEvent, GraphOutline, Input, Interrupt, InterruptSignal, InterruptWhen,
    IntoPayloadNode, MappedSubgraph, MessageChunk, NodePolicy, Outcome, PayloadNode, Resume,
    RetryPolicy, Route, Runtime, Send, StreamEvent, StreamItem, StreamMode, StreamModes,
    StreamWriter, SubgraphCall, SubgraphState, TaskOutcome, TaskRef,
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
    pub use crate::engine::{IntoSends, check_send};
    pub use crate::state::reducer::{AddReducer, AppendReducer, DeltaReducer, MergeReducer};
    pub use schemars;
    pub use serde;
    pub use serde_json;
}
