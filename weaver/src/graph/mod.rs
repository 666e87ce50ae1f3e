//! Authoring graphs: the run-time builder, validation and Mermaid drawings.
//! Running a compiled graph is the [`engine`](crate::engine)'s; its types
//! are re-exported here, where a graph is built.

mod builder;
mod mermaid;
mod validate;

#[cfg(test)]
mod tests;

pub use crate::engine::IntoRoute;
pub use crate::engine::node;
pub use crate::engine::{
    Command, CompiledGraph, END, IntoNode, IntoNodeResult, Node, NodeError, ParentCommand,
    RunStream, START,
};
pub use builder::{Compile, Graph};
