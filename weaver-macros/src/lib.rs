//! Procedural macros for weaver: `#[derive(GraphState)]` and `graph!`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use proc_macro::TokenStream;

/// Derives `weaver::GraphState` for a struct with named fields.
#[proc_macro_derive(GraphState, attributes(reducer))]
pub fn derive_graph_state(input: TokenStream) -> TokenStream {
    let _ = input;
    TokenStream::new()
}
