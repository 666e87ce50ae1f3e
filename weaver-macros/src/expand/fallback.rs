//! The stub emitted when the input has the wrong shape: an empty update
//! type, so code naming `<State>Update` does not add errors of its own.

use proc_macro2::TokenStream;
use quote::quote;
use syn::DeriveInput;

use super::update_ident;

pub(super) fn expand(input: &DeriveInput) -> TokenStream {
    let vis = &input.vis;
    let update = update_ident(&input.ident);
    quote! {
        #[doc(hidden)]
        #[allow(dead_code)]
        #[derive(::core::clone::Clone, ::core::fmt::Debug, ::core::default::Default)]
        #vis struct #update {}
    }
}
