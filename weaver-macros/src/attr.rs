//! Attribute parsing: `#[reducer(...)]` on state fields.

use syn::{Attribute, Meta, Path};

use crate::ctxt::{Errors, closest};
use crate::symbol::{ADD, APPEND, DELTA, MERGE, REDUCER, REDUCERS, REPLACE, list};

/// How a channel folds its writes, as written on the field.
#[derive(Clone)]
pub(crate) enum Reducer {
    /// No attribute: one write per step, the last value wins.
    LastValue,
    /// `#[reducer(replace)]`: several writes per step, the last wins.
    Replace,
    /// `#[reducer(append)]`.
    Append,
    /// `#[reducer(delta)]`: appends, and is checkpointed as deltas.
    Delta,
    /// `#[reducer(add)]`.
    Add,
    /// `#[reducer(merge)]`.
    Merge,
    /// `#[reducer(path::to::func)]`, a `fn(&mut T, T)`.
    Custom(Path),
}

/// Reads the field's `#[reducer(...)]`. Problems are recorded in `errors`
/// and the field falls back to `replace`, which accepts every type, so the
/// rest of the expansion stays valid and only the real error is shown.
pub(crate) fn reducer(attrs: &[Attribute], errors: &mut Errors) -> Reducer {
    let mut found: Option<Reducer> = None;
    for attr in attrs.iter().filter(|a| *a.path() == REDUCER) {
        let parsed = parse_one(attr);
        if found.is_some() {
            errors.spanned(
                attr,
                "duplicate `#[reducer]` attribute; a field has at most one reducer",
            );
            continue;
        }
        found = Some(match parsed {
            Ok(r) => r,
            Err(e) => {
                errors.push(e);
                Reducer::Replace
            }
        });
    }
    found.unwrap_or(Reducer::LastValue)
}

fn parse_one(attr: &Attribute) -> syn::Result<Reducer> {
    let meta = match &attr.meta {
        Meta::List(meta) => meta,
        other => {
            return Err(syn::Error::new_spanned(
                other,
                format!(
                    "expected `#[reducer(<name>)]` with one of {}, or a path to a `fn(&mut T, T)`",
                    list(&REDUCERS)
                ),
            ));
        }
    };
    let path: Path = meta.parse_args().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!(
                "expected one reducer: {}, or a path to a `fn(&mut T, T)`",
                list(&REDUCERS)
            ),
        )
    })?;
    let Some(ident) = path.get_ident() else {
        return Ok(Reducer::Custom(path));
    };
    if ident == APPEND {
        Ok(Reducer::Append)
    } else if ident == ADD {
        Ok(Reducer::Add)
    } else if ident == MERGE {
        Ok(Reducer::Merge)
    } else if ident == REPLACE {
        Ok(Reducer::Replace)
    } else if ident == DELTA {
        Ok(Reducer::Delta)
    } else {
        let word = ident.to_string();
        let hint = match closest(&word, REDUCERS.iter().map(|s| s.0)) {
            Some(near) => format!("; did you mean `{near}`?"),
            None => format!(
                "; for a reducer function in scope write a path, e.g. `#[reducer(self::{word})]`"
            ),
        };
        Err(syn::Error::new_spanned(
            ident,
            format!(
                "unknown reducer `{word}`; expected one of {}, or a path to a `fn(&mut T, T)`{hint}",
                list(&REDUCERS)
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn read(attrs: Vec<Attribute>) -> (Option<String>, Option<String>) {
        let mut errors = Errors::new();
        let r = reducer(&attrs, &mut errors);
        let kind = match r {
            Reducer::LastValue => "last_value".to_owned(),
            Reducer::Replace => "replace".to_owned(),
            Reducer::Append => "append".to_owned(),
            Reducer::Delta => "delta".to_owned(),
            Reducer::Add => "add".to_owned(),
            Reducer::Merge => "merge".to_owned(),
            Reducer::Custom(p) => quote::quote!(#p).to_string(),
        };
        (Some(kind), errors.combined().map(|e| e.to_string()))
    }

    #[test]
    fn reads_every_form() {
        assert_eq!(read(vec![]).0.as_deref(), Some("last_value"));
        assert_eq!(
            read(vec![parse_quote!(#[reducer(append)])]).0.as_deref(),
            Some("append")
        );
        assert_eq!(
            read(vec![parse_quote!(#[reducer(add)])]).0.as_deref(),
            Some("add")
        );
        assert_eq!(
            read(vec![parse_quote!(#[reducer(merge)])]).0.as_deref(),
            Some("merge")
        );
        assert_eq!(
            read(vec![parse_quote!(#[reducer(replace)])]).0.as_deref(),
            Some("replace")
        );
        assert_eq!(
            read(vec![parse_quote!(#[reducer(crate::max)])])
                .0
                .as_deref(),
            Some("crate :: max")
        );
    }

    #[test]
    fn rejects_unknown_duplicate_and_delta() {
        let (_, e) = read(vec![parse_quote!(#[reducer(apend)])]);
        assert!(e.unwrap().contains("unknown reducer `apend`"));
        let (_, e) = read(vec![
            parse_quote!(#[reducer(add)]),
            parse_quote!(#[reducer(add)]),
        ]);
        assert!(e.unwrap().contains("duplicate"));
        assert_eq!(
            read(vec![parse_quote!(#[reducer(delta)])]).0.as_deref(),
            Some("delta")
        );
        let (_, e) = read(vec![parse_quote!(#[reducer])]);
        assert!(e.unwrap().contains("expected"));
    }
}
