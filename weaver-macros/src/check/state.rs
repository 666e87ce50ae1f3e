//! Rules for `#[derive(GraphState)]` input.

use std::collections::HashMap;

use syn::{Data, DeriveInput, Fields};

use crate::ast::state::State;
use crate::ctxt::Errors;

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
/// (`foo_bar` and `foo__bar`).
pub(crate) fn channels(state: &State<'_>, errors: &mut Errors) {
    let mut seen: HashMap<String, &str> = HashMap::new();
    for field in &state.fields {
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
