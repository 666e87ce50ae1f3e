//! Graphs: the run-time builder, validation, and the compiled graph API.

mod builder;
mod compiled;
mod mermaid;
pub mod node;
pub(crate) mod spec;

pub use builder::{Compile, Graph, IntoRoute};
pub use compiled::{CompiledGraph, RunStream};
pub use node::{Command, IntoNode, IntoNodeResult, Node, NodeError};

/// The virtual entry node: edges from `START` pick the first nodes.
pub const START: &str = "__start__";
/// The virtual exit node: an edge to `END` finishes a branch.
pub const END: &str = "__end__";
