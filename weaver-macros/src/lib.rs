//! Procedural macros for weaver: `#[derive(GraphState)]` and `graph!`.
//!
//! Use them through the `weaver` crate (`weaver::GraphState`,
//! `weaver::graph!`), whose documentation shows every supported form; the
//! generated code names only `::weaver::...` paths.
//!
//! Layout: `ast` models the input, `attr` reads attributes, `check` holds
//! every rule the input must satisfy, `expand` generates code (one file per
//! output). Errors are collected and spanned on the user's tokens.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use proc_macro::TokenStream;

mod ast;
mod attr;
mod check;
mod ctxt;
mod expand;
mod symbol;

/// Derives `weaver::GraphState` for a struct with named fields; see
/// `weaver::GraphState` for the attributes and what is generated.
#[proc_macro_derive(GraphState, attributes(reducer))]
pub fn derive_graph_state(input: TokenStream) -> TokenStream {
    expand::derive_graph_state(input.into()).into()
}

/// Declares a graph over a state type, checked at compile time; see
/// `weaver::graph!` for the syntax.
#[proc_macro]
pub fn graph(input: TokenStream) -> TokenStream {
    expand::graph::graph(input.into()).into()
}
