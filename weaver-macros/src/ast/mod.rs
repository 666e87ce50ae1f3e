//! Models of the macros' input: the state struct and the graph declaration.

pub(crate) mod graph;
pub(crate) mod state;
