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
    check::state::serde_attrs(&input, &mut errors);
    check::state::struct_reducer(&input, &mut errors);
    check::state::field_graph_state(&input, &mut errors);
    let versioning = crate::versioning::read(&input.attrs, &mut errors);
    crate::versioning::check(&versioning, &mut errors);
    let update = update::expand(&state);
    let channels = channel::expand(&state);
    let state_impl = state::expand(&state, &crate::versioning::expand(&versioning));
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

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::derive_graph_state;
    use super::graph::graph;

    fn text(tokens: proc_macro2::TokenStream) -> String {
        tokens
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn derive_generates_the_impl_the_update_and_the_channels() {
        let out = text(derive_graph_state(quote! {
            pub struct State {
                /// Last value.
                foo: String,
                #[reducer(append)]
                bar: Vec<String>,
                #[reducer(self::max)]
                peak: u64,
            }
        }));
        assert!(out.contains("impl :: weaver :: state :: GraphState for State"));
        assert!(out.contains("pub struct StateUpdate"));
        assert!(out.contains("pub enum StateChannel"));
        assert!(out.contains(
            "ChannelSpec :: new (\"foo\" , :: weaver :: channel :: ChannelKind :: LastValue)"
        ));
        assert!(
            out.contains("< Vec < String > as :: weaver :: __private :: AppendReducer > :: reduce")
        );
        assert!(out.contains("let reducer : fn (& mut u64 , u64) = self :: max ;"));
        assert!(out.contains("reduce :: last_value (& mut self . foo , value , & mut __weaver_written_foo , \"foo\") ?"));
        assert!(out.contains("# [doc = r\" Last value.\"]"));
        assert!(!out.contains("compile_error"));
    }

    #[test]
    fn a_field_whose_variant_would_be_a_keyword_gets_a_trailing_underscore() {
        let out = text(derive_graph_state(quote! {
            struct State { self_: String, crate_: u8, super_: u8 }
        }));
        assert!(out.contains("enum StateChannel {"), "{out}");
        assert!(
            out.contains("Self_ , # [doc = \"Channel `crate_`.\"] Crate ,"),
            "{out}"
        );
        assert!(out.contains("StateChannel :: Self_ => \"self_\""), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
        // Two fields that both give `Self_` are named in one error.
        let out = text(derive_graph_state(quote! {
            struct State { self_: String, _self: String }
        }));
        assert_eq!(out.matches("compile_error").count(), 1, "{out}");
        assert!(
            out.contains("both name the channel variant `Self_`"),
            "{out}"
        );
    }

    #[test]
    fn a_field_named_like_an_updates_method_gets_a_setter_with_a_trailing_underscore() {
        let out = text(derive_graph_state(quote! {
            struct State {
                default: u8, from: u8, clone: u8, into: u8,
                try_from: u8, try_into: u8, to_owned: u8, fold: u8,
            }
        }));
        assert!(!out.contains("compile_error"), "{out}");
        for setter in [
            "default_",
            "from_",
            "clone_",
            "into_",
            "try_from_",
            "try_into_",
            "to_owned_",
            "fold",
        ] {
            assert!(
                out.contains(&format!("fn {setter} (mut self")),
                "{setter}: {out}"
            );
        }
        // A field `default_` beside `default` would get the same setter;
        // both name the variant `Default` too, the one error given.
        let out = text(derive_graph_state(quote! {
            struct State { default: u8, default_: u8 }
        }));
        assert_eq!(out.matches("compile_error").count(), 1, "{out}");
        assert!(
            out.contains("both name the channel variant `Default`"),
            "{out}"
        );
    }

    #[test]
    fn a_field_whose_variant_would_be_the_all_constant_gets_a_trailing_underscore() {
        let out = text(derive_graph_state(quote! {
            struct State { a_l_l: u8, all: u8 }
        }));
        assert!(!out.contains("compile_error"), "{out}");
        assert!(out.contains("StateChannel :: ALL_ => \"a_l_l\""), "{out}");
        assert!(out.contains("StateChannel :: All => \"all\""), "{out}");
    }

    #[test]
    fn a_field_going_on_with_a_non_ascii_digit_or_mark_gets_a_leading_c() {
        // `_٣` (an Arabic-Indic digit) and `_\u{301}` (a combining acute) are
        // field names: the upper-cased rest cannot start a variant. The derive
        // panicked ("\"٣_\" is not a valid Ident").
        let tokens: proc_macro2::TokenStream =
            "struct State { _\u{663}: u8, _\u{301}x: u8, über_größe: u8 }"
                .parse()
                .unwrap();
        let out = text(derive_graph_state(tokens));
        assert!(!out.contains("compile_error"), "{out}");
        assert!(
            out.contains("StateChannel :: C\u{663} => \"_\u{663}\""),
            "{out}"
        );
        assert!(out.contains("StateChannel :: C\u{301}x =>"), "{out}");
        assert!(
            out.contains("StateChannel :: ÜberGröße => \"über_größe\""),
            "{out}"
        );
    }

    #[test]
    fn a_field_named_like_a_runtime_channel_is_refused() {
        // `__start__` shared the pending input's channel: a run completed,
        // but its checkpoint no longer decoded ("missing field `__start__`").
        let out = text(derive_graph_state(quote! {
            struct State {
                __start__: String,
                __error__: Vec<String>,
                __started__: u8,
                __effect__: String,
                __state_version__: u32,
            }
        }));
        assert_eq!(out.matches("compile_error").count(), 4, "{out}");
        assert!(
            out.contains(
                "cannot have a field named `__start__`: weaver stores a run's pending input"
            ),
            "{out}"
        );
        assert!(out.contains("field named `__error__`"), "{out}");
        assert!(!out.contains("field named `__started__`"), "{out}");
    }

    #[test]
    fn a_reducer_on_the_struct_is_refused() {
        // It was ignored: every field kept its own reducer (here none, the
        // last value), silently.
        let out = text(derive_graph_state(quote! {
            #[reducer(append)]
            struct State { log: Vec<String> }
        }));
        assert_eq!(out.matches("compile_error").count(), 1, "{out}");
        assert!(
            out.contains("`#[reducer]` goes on a field, not on the state struct"),
            "{out}"
        );
    }

    #[test]
    fn a_transparent_state_is_refused() {
        // It ran without a checkpointer; with one, every run failed with
        // `Encode { what: "state", reason: "expected a JSON object, got []" }`.
        let out = text(derive_graph_state(quote! {
            #[serde(transparent)]
            struct State { #[reducer(append)] log: Vec<String> }
        }));
        assert_eq!(out.matches("compile_error").count(), 1, "{out}");
        assert!(
            out.contains("`#[serde(transparent)]` cannot be used on a graph state"),
            "{out}"
        );
    }

    #[test]
    fn the_reserved_channels_are_the_runtimes() {
        use weaver::checkpoint::{
            EFFECT_CHANNEL, ERROR_CHANNEL, INTERRUPT_CHANNEL, NO_WRITES_CHANNEL, RESUME_CHANNEL,
            SENDS_CHANNEL,
        };
        let names: Vec<&str> = crate::symbol::RESERVED_CHANNELS
            .iter()
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(
            names,
            [
                weaver::START,
                SENDS_CHANNEL,
                ERROR_CHANNEL,
                INTERRUPT_CHANNEL,
                RESUME_CHANNEL,
                NO_WRITES_CHANNEL,
                EFFECT_CHANNEL,
                // A task's finished subgraph, when its run stored none of it.
                "__subgraph__",
                // `weaver::evolution`'s marker of a task's state version.
                "__state_version__"
            ]
        );
    }

    #[test]
    fn derive_on_an_enum_is_one_error_and_a_stub() {
        let out = text(derive_graph_state(quote! { enum State { A, B } }));
        assert_eq!(out.matches("compile_error").count(), 1);
        assert!(out.contains("cannot be used on an enum"));
        assert!(out.contains("struct StateUpdate { }"));
        assert!(!out.contains("GraphState for"));
    }

    #[test]
    fn a_bad_reducer_still_expands_the_rest() {
        let out = text(derive_graph_state(quote! {
            struct State { #[reducer(apend)] bar: Vec<String> }
        }));
        assert_eq!(out.matches("compile_error").count(), 1);
        assert!(out.contains("unknown reducer `apend`"));
        assert!(out.contains("impl :: weaver :: state :: GraphState for State"));
    }

    #[test]
    fn graph_expands_to_builder_calls() {
        let out = text(graph(quote! {
            name: "G",
            state: State,
            nodes: [a, b, c = path::f],
            edges: [START -> a -> [b, c] -> END],
            conditional: [a => route ? [b, END]],
            interrupt_before: [b],
        }));
        assert!(out.starts_with(":: weaver :: Graph :: < State > :: new (\"G\")"));
        for call in [
            ". add_node (\"a\" , a)",
            ". add_node (\"c\" , path :: f)",
            ". add_edge (:: weaver :: START , \"a\")",
            ". add_edge (\"a\" , \"b\")",
            ". add_edge (\"a\" , \"c\")",
            ". add_edge (\"c\" , :: weaver :: END)",
            ". add_conditional_edges (\"a\" , route , [\"b\" , :: weaver :: END])",
            ". interrupt_before ([\"b\"])",
        ] {
            assert!(out.contains(call), "missing {call} in {out}");
        }
    }

    #[test]
    fn a_node_named_like_start_or_end_is_refused() {
        // `__start__` and `__end__` are what START and END stand for:
        // `Graph::compile` refused the expanded graph at run time
        // (`InvalidNodeName`) after `graph!` had accepted it.
        let out = text(graph(quote! {
            state: State,
            nodes: [a, __start__ = a, __end__ = a],
            edges: [START -> a -> __start__ -> __end__ -> END],
        }));
        assert!(
            out.contains("`__start__` is reserved for the graph's entry"),
            "{out}"
        );
        assert!(
            out.contains("`__end__` is reserved for the graph's exit"),
            "{out}"
        );
        assert!(!out.contains("add_node"), "{out}");
    }

    #[test]
    fn graph_errors_are_collected_and_the_stub_keeps_its_type() {
        let out = text(graph(quote! {
            state: State,
            nodes: [a, a],
            edges: [START -> a -> x -> END, END -> a],
            colour: "red",
        }));
        assert!(out.contains("unknown option `colour`"));
        assert!(out.contains("node `a` is declared twice"));
        assert!(out.contains("edge to unknown node `x`"));
        assert!(out.contains("END cannot be the source"));
        assert!(out.contains(":: weaver :: Graph :: < State > :: new"));
        let out = text(graph(quote! { nodes: [a], edges: [START -> a -> END] }));
        assert!(out.contains("missing `state"));
    }
}
