//! Code generation: one file per output. Each expander works on
//! `proc_macro2`, so unit tests can call it.

mod channel;
mod fallback;
pub(crate) mod graph;
mod state;
mod update;

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};
use syn::DeriveInput;

use crate::ast::state::State;
use crate::check;
use crate::ctxt::Errors;

/// `#[derive(GraphState)]`: the state impl, the update type, the channel
/// enum, and any errors. On a shape error only a stub is emitted, so the
/// user sees that one error instead of a cascade.
pub(crate) fn derive_graph_state(input: TokenStream) -> TokenStream {
    let input: DeriveInput = match syn::parse2(input) {
        Ok(input) => input,
        Err(e) => return e.to_compile_error(),
    };
    let mut errors = Errors::new();
    if !check::state::shape(&input, &mut errors) {
        let stub = fallback::expand(&input);
        let errors = errors.into_compile_errors();
        return quote! { #errors #stub };
    }
    let Some(state) = State::from_syn(&input, &mut errors) else {
        return errors.into_compile_errors();
    };
    check::state::channels(&state, &mut errors);
    let update = update::expand(&state);
    let channels = channel::expand(&state);
    let state_impl = state::expand(&state);
    let errors = errors.into_compile_errors();
    quote! {
        #errors
        #update
        #channels
        #state_impl
    }
}

/// The generated update type's name: `<State>Update`.
fn update_ident(state: &Ident) -> Ident {
    format_ident!("{}Update", state)
}

/// The generated channel enum's name: `<State>Channel`.
fn channel_ident(state: &Ident) -> Ident {
    format_ident!("{}Channel", state)
}
