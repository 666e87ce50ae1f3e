//! `impl GraphState for <State>`: the channel list and `apply`.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use super::channel::kind;
use super::update_ident;
use crate::ast::state::{Field, State};
use crate::attr::Reducer;

pub(super) fn expand(state: &State<'_>, versioning: &TokenStream) -> TokenStream {
    let ident = state.ident;
    let update = update_ident(ident);
    let specs = state.fields.iter().map(|f| {
        let name = &f.name;
        let kind = kind(&f.reducer);
        quote!(::weaver::channel::ChannelSpec::new(#name, #kind))
    });
    let flags = state
        .fields
        .iter()
        .filter(|f| matches!(f.reducer, Reducer::LastValue))
        .map(|f| {
            let flag = written_flag(f);
            quote!(let mut #flag = false;)
        });
    let folds = state.fields.iter().map(fold);
    let extends = state
        .fields
        .iter()
        .filter(|f| matches!(f.reducer, Reducer::Delta))
        .map(extend);
    // A field stored through its own serde code (`#[serde(with = ...)]`)
    // stores items its type cannot decode alone: rebuilt as JSON only.
    let extends_deltas = !state
        .fields
        .iter()
        .any(|f| matches!(f.reducer, Reducer::Delta) && f.serde_codec);
    quote! {
        const _: () = {
            #[automatically_derived]
            impl ::weaver::state::GraphState for #ident {
                type Update = #update;

                const CHANNELS: &'static [::weaver::channel::ChannelSpec] = &[#(#specs),*];

                fn apply(
                    &mut self,
                    updates: ::std::vec::Vec<#update>,
                ) -> ::weaver::Result<()> {
                    #(#flags)*
                    for update in updates {
                        #(#folds)*
                    }
                    ::core::result::Result::Ok(())
                }

                const EXTENDS_DELTAS: bool = #extends_deltas;

                #versioning

                fn extend_deltas(
                    &mut self,
                    parent: &Self,
                    appended: ::std::vec::Vec<(
                        ::std::string::String,
                        ::std::vec::Vec<::weaver::__private::serde_json::Value>,
                    )>,
                ) -> ::weaver::Result<()> {
                    let _ = parent;
                    for (channel, items) in appended {
                        let what = ::std::format!("state at `{}`", channel);
                        #[allow(clippy::match_single_binding)]
                        match channel.as_str() {
                            #(#extends)*
                            _ => {
                                return ::core::result::Result::Err(::weaver::Error::decode(
                                    what,
                                    "stored as deltas, but not a delta channel of this state",
                                ));
                            }
                        }
                    }
                    ::core::result::Result::Ok(())
                }
            }
        };
    }
}

/// Rebuilds one delta field from the parent's value and the appended items.
fn extend(field: &Field<'_>) -> TokenStream {
    let fident = field.ident;
    let name = &field.name;
    let ty = &field.ty;
    quote_spanned! {ty.span()=>
        #name => {
            let items: #ty = ::weaver::__private::serde_json::from_value(
                ::weaver::__private::serde_json::Value::Array(items),
            )
            .map_err(|e| ::weaver::Error::decode(what, e))?;
            let mut value = ::core::clone::Clone::clone(&parent.#fident);
            <#ty as ::weaver::__private::DeltaReducer>::reduce(&mut value, items);
            self.#fident = value;
        }
    }
}

fn written_flag(field: &Field<'_>) -> syn::Ident {
    format_ident!("__weaver_written_{}", field.name)
}

/// Folds one field of one update into the state, through the reducer in
/// `weaver::channel::reduce` (via a bound trait spanned at the field's type
/// where the type must fit).
fn fold(field: &Field<'_>) -> TokenStream {
    let fident = field.ident;
    let name = &field.name;
    let ty = &field.ty;
    let call = match &field.reducer {
        Reducer::LastValue => {
            let flag = written_flag(field);
            quote! {
                ::weaver::channel::reduce::last_value(&mut self.#fident, value, &mut #flag, #name)?;
            }
        }
        Reducer::Replace => quote! {
            ::weaver::channel::reduce::replace(&mut self.#fident, value);
        },
        Reducer::Append => quote_spanned! {ty.span()=>
            <#ty as ::weaver::__private::AppendReducer>::reduce(&mut self.#fident, value);
        },
        Reducer::Delta => quote_spanned! {ty.span()=>
            <#ty as ::weaver::__private::DeltaReducer>::reduce(&mut self.#fident, value);
        },
        Reducer::Add => quote_spanned! {ty.span()=>
            <#ty as ::weaver::__private::AddReducer>::reduce(&mut self.#fident, value, #name)?;
        },
        Reducer::Merge => quote_spanned! {ty.span()=>
            <#ty as ::weaver::__private::MergeReducer>::reduce(&mut self.#fident, value);
        },
        Reducer::Custom(path) => {
            let reducer = quote_spanned!(path.span()=> let reducer: fn(&mut #ty, #ty) = #path;);
            quote! {
                #reducer
                reducer(&mut self.#fident, value);
            }
        }
    };
    quote! {
        if let ::core::option::Option::Some(value) = update.#fident {
            #call
        }
    }
}
