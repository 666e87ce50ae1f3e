//! Rules for `#[derive(GraphState)]` input.

use std::collections::HashMap;

use syn::meta::ParseNestedMeta;
use syn::{Data, DeriveInput, Fields};

use crate::ast::state::State;
use crate::ctxt::Errors;
use crate::symbol::{REDUCER, RESERVED_CHANNELS};

/// Checks that the input is a non-generic struct with named fields.
/// Returns `false` (with the error recorded) for any other shape.
pub(crate) fn shape(input: &DeriveInput, errors: &mut Errors) -> bool {
    let what = match &input.data {
        Data::Enum(e) => Some((e.enum_token.span, "an enum")),
        Data::Union(u) => Some((u.union_token.span, "a union")),
        Data::Struct(s) => match &s.fields {
            Fields::Named(_) => None,
            Fields::Unnamed(_) => Some((input.ident.span(), "a tuple struct")),
            Fields::Unit => Some((input.ident.span(), "a unit struct")),
        },
    };
    if let Some((span, what)) = what {
        errors.at(
            span,
            format!(
                "`#[derive(GraphState)]` cannot be used on {what}; a graph state is a struct \
                 with named fields, one per channel (`struct State {{ foo: String }}`)"
            ),
        );
        return false;
    }
    if !input.generics.params.is_empty() {
        errors.spanned(
            &input.generics,
            "generic graph states are not supported yet; use concrete field types \
             (a type alias can name a specific instance)",
        );
        return false;
    }
    true
}

/// Checks that two fields do not map to the same channel enum variant
/// (`foo_bar` and `foo__bar`), and that no field is named like a channel
/// of the runtime's own (`__start__`, `__error__`, ...).
pub(crate) fn channels(state: &State<'_>, errors: &mut Errors) {
    let mut seen: HashMap<String, &str> = HashMap::new();
    for field in &state.fields {
        if let Some((name, holds)) = RESERVED_CHANNELS.iter().find(|(n, _)| *n == field.name) {
            errors.spanned(
                field.ident,
                format!(
                    "a graph state cannot have a field named `{name}`: weaver stores {holds} \
                     in a checkpoint under that name, beside the state's channels; rename the field"
                ),
            );
        }
        let variant = field.variant().to_string();
        if let Some(first) = seen.insert(variant.clone(), &field.name) {
            errors.spanned(
                field.ident,
                format!(
                    "fields `{first}` and `{}` both name the channel variant `{variant}`; \
                     rename one of them",
                    field.name
                ),
            );
        }
    }
}

/// Rejects `#[reducer(...)]` on the struct itself: a reducer belongs to
/// one field, and the derive reads it only there, so the attribute would
/// otherwise be ignored without a word.
pub(crate) fn struct_reducer(input: &DeriveInput, errors: &mut Errors) {
    for attr in input.attrs.iter().filter(|a| *a.path() == REDUCER) {
        errors.spanned(
            attr,
            "`#[reducer]` goes on a field, not on the state struct: each channel has its own \
             reducer, and a field without one keeps the last value",
        );
    }
}

/// Serde attributes that change which key a field is stored under, or drop
/// it from the stored state, while the field stays a channel.
const FIELD_SERDE: &[(&str, &str)] = &[
    (
        "rename",
        "a channel is stored, updated and described under its field name; rename the field itself",
    ),
    (
        "flatten",
        "a channel is one field of the stored state; make the nested fields fields of the state",
    ),
    (
        "skip",
        "the field would be lost at every checkpoint (a resume, history, the next turn) while the \
         channel still runs; keep data that is not state out of the state struct",
    ),
    (
        "skip_serializing",
        "the field would be lost at every checkpoint (a resume, history, the next turn) while the \
         channel still runs; keep data that is not state out of the state struct",
    ),
    (
        "skip_deserializing",
        "the field would be lost at every checkpoint (a resume, history, the next turn) while the \
         channel still runs; keep data that is not state out of the state struct",
    ),
];

/// Rejects serde attributes that would make the state's stored JSON
/// disagree with its channels: container `rename_all` and `transparent`, field `rename`,
/// `flatten` and the `skip` family. The update type, the schemas and the
/// delta channels all key a channel by its field name. The same forms of
/// `#[schemars(...)]` are rejected too: they change the state's schema
/// alone, which then describes keys the stored state does not have.
pub(crate) fn serde_attrs(input: &DeriveInput, errors: &mut Errors) {
    let ours = |a: &&syn::Attribute| a.path().is_ident("serde") || a.path().is_ident("schemars");
    for attr in input.attrs.iter().filter(ours) {
        let tool = attr_name(attr);
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename_all") || meta.path.is_ident("rename_all_fields") {
                errors.spanned(
                    &meta.path,
                    format!(
                        "`#[{tool}(rename_all)]` cannot be used on a graph state: a channel is \
                         stored, updated and described under its field name; name the fields as \
                         they should be stored"
                    ),
                );
            } else if meta.path.is_ident("transparent") {
                errors.spanned(
                    &meta.path,
                    format!(
                        "`#[{tool}(transparent)]` cannot be used on a graph state: a state is \
                         stored as a JSON object keyed by its channels' names, and a transparent \
                         struct is stored as its one field's value"
                    ),
                );
            }
            skip_value(&meta)
        });
    }
    let Data::Struct(data) = &input.data else {
        return;
    };
    for field in &data.fields {
        for attr in field.attrs.iter().filter(ours) {
            let tool = attr_name(attr);
            let _ = attr.parse_nested_meta(|meta| {
                if let Some((name, why)) = FIELD_SERDE.iter().find(|(n, _)| meta.path.is_ident(n)) {
                    errors.spanned(
                        &meta.path,
                        format!("`#[{tool}({name})]` cannot be used on a graph state field: {why}"),
                    );
                }
                skip_value(&meta)
            });
        }
    }
}

/// The name of an attribute whose path is one identifier (`serde`).
fn attr_name(attr: &syn::Attribute) -> String {
    attr.path()
        .get_ident()
        .map(ToString::to_string)
        .unwrap_or_default()
}

/// Rejects `#[graph_state(...)]` on a field: it belongs on the struct, and
/// the derive reads it only there, so a version and upcasters given on a
/// field would otherwise be ignored without a word (the state staying at
/// version 1).
pub(crate) fn field_graph_state(input: &DeriveInput, errors: &mut Errors) {
    let Data::Struct(data) = &input.data else {
        return;
    };
    for field in &data.fields {
        for attr in field
            .attrs
            .iter()
            .filter(|a| a.path().is_ident("graph_state"))
        {
            errors.spanned(
                attr,
                "`#[graph_state(...)]` goes on the state struct, not on a field: the version and \
                 upcasters are the whole state's",
            );
        }
    }
}

/// Consumes the rest of one serde meta item (`= value` or `(...)`).
pub(crate) fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(syn::Token![=]) {
        meta.value()?.parse::<syn::Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.parse_nested_meta(|inner| skip_value(&inner))?;
    }
    Ok(())
}
