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
mod versioning;

#[doc = include_str!("../doc/graph_state.md")]
#[proc_macro_derive(GraphState, attributes(reducer, graph_state))]
pub fn derive_graph_state(input: TokenStream) -> TokenStream {
    expand::derive_graph_state(input.into()).into()
}

#[doc = include_str!("../doc/graph.md")]
#[proc_macro]
pub fn graph(input: TokenStream) -> TokenStream {
    expand::graph::graph(input.into()).into()
}
