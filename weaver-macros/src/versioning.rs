//! `#[graph_state(version = N, upcast(1 => v1_to_v2, ...))]` on the state
//! struct: its stored form's version and the upcasters to it.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, LitInt, Path, Token};

use crate::ctxt::{Errors, closest};
use crate::symbol::{GRAPH_STATE, GRAPH_STATE_KEYS, UPCAST, VERSION, list};

/// What `#[graph_state]` declares.
#[derive(Default)]
pub(crate) struct Versioning {
    /// `version = N`, with its span.
    pub version: Option<(u32, Span)>,
    /// `upcast(from => path, ...)`, in the order written.
    pub upcasts: Vec<Upcast>,
    /// The span of `upcast`, for the error of upcasters without a version.
    upcast_span: Option<Span>,
}

/// One `from => path` of `upcast(...)`.
pub(crate) struct Upcast {
    pub from: u32,
    pub from_span: Span,
    pub path: Path,
}

impl Parse for Upcast {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let lit: LitInt = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "expected `<version> => <upcaster>`, e.g. `1 => v1_to_v2`",
            )
        })?;
        let from = lit.base10_parse::<u32>()?;
        input.parse::<Token![=>]>()?;
        let path: Path = input.parse()?;
        Ok(Upcast {
            from,
            from_span: lit.span(),
            path,
        })
    }
}

/// Reads the struct's `#[graph_state(...)]` attributes; problems go to
/// `errors` (and the attribute's faulty part is left out).
pub(crate) fn read(attrs: &[Attribute], errors: &mut Errors) -> Versioning {
    let mut out = Versioning::default();
    let mut seen = false;
    for attr in attrs.iter().filter(|a| *a.path() == GRAPH_STATE) {
        if std::mem::replace(&mut seen, true) {
            errors.spanned(
                attr,
                "duplicate `#[graph_state]` attribute; put every option in one",
            );
            continue;
        }
        let parsed = attr.parse_nested_meta(|meta| {
            if meta.path == VERSION {
                if out.version.is_some() {
                    return Err(meta.error("duplicate `version`"));
                }
                let lit: LitInt = meta.value()?.parse()?;
                let v = lit.base10_parse::<u32>().map_err(|_| {
                    syn::Error::new(lit.span(), "a state version is a whole number from 1")
                })?;
                out.version = Some((v, lit.span()));
                Ok(())
            } else if meta.path == UPCAST {
                if out.upcast_span.is_some() {
                    return Err(meta.error("duplicate `upcast`; list every upcaster in one"));
                }
                out.upcast_span = Some(meta.path.span());
                let content;
                syn::parenthesized!(content in meta.input);
                let entries = Punctuated::<Upcast, Token![,]>::parse_terminated(&content)?;
                out.upcasts.extend(entries);
                Ok(())
            } else {
                let word = meta
                    .path
                    .get_ident()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                let hint = closest(&word, GRAPH_STATE_KEYS.iter().map(|s| s.0))
                    .map(|near| format!("; did you mean `{near}`?"))
                    .unwrap_or_default();
                Err(meta.error(format!(
                    "unknown `#[graph_state]` option `{word}`; expected {}{hint}",
                    list(&GRAPH_STATE_KEYS)
                )))
            }
        });
        if let Err(e) = parsed {
            errors.push(e);
        }
    }
    out
}

/// The rules: versions start at 1, upcasters need a version, and each goes
/// from a version below the state's, once.
pub(crate) fn check(v: &Versioning, errors: &mut Errors) {
    if let Some((0, span)) = v.version {
        errors.at(
            span,
            "state versions start at 1 (a state without `version` is version 1)",
        );
    }
    let Some((version, _)) = v.version else {
        if let Some(span) = v.upcast_span {
            errors.at(
                span,
                "upcasters need the state's `version`: `#[graph_state(version = 2, upcast(1 => v1_to_v2))]`",
            );
        }
        return;
    };
    let mut seen: Vec<u32> = Vec::new();
    for u in &v.upcasts {
        if u.from == 0 {
            errors.at(
                u.from_span,
                "state versions start at 1: there is no version 0 to upcast from",
            );
        } else if u.from >= version {
            errors.at(
                u.from_span,
                format!(
                    "an upcaster from version {} would go to version {}, but the state is version {version}",
                    u.from,
                    u.from + 1
                ),
            );
        }
        if seen.contains(&u.from) {
            errors.at(
                u.from_span,
                format!("two upcasters from version {}", u.from),
            );
        }
        seen.push(u.from);
    }
}

/// The trait items: `VERSION`, `UPCASTS`, `upcast` and `schema_fingerprint`.
pub(crate) fn expand(v: &Versioning) -> TokenStream {
    let version = v.version.map_or(1, |(n, _)| n.max(1));
    let mut froms: Vec<u32> = v.upcasts.iter().map(|u| u.from).collect();
    froms.sort_unstable();
    froms.dedup();
    let arms = v.upcasts.iter().map(|u| {
        let from = u.from;
        let path = &u.path;
        // Spanned at the path: a function of the wrong type is an error there.
        let call = quote_spanned! {path.span()=>
            ::weaver::__private::upcast_with(#path, values)
        };
        quote!(#from => ::core::option::Option::Some(#call),)
    });
    quote! {
        const VERSION: u32 = #version;

        const UPCASTS: &'static [u32] = &[#(#froms),*];

        #[allow(unreachable_patterns)]
        fn upcast(
            from: u32,
            values: ::weaver::__private::serde_json::Map<
                ::std::string::String,
                ::weaver::__private::serde_json::Value,
            >,
        ) -> ::core::option::Option<::weaver::state::UpcastResult> {
            match from {
                #(#arms)*
                _ => {
                    let _ = values;
                    ::core::option::Option::None
                }
            }
        }

        fn schema_fingerprint() -> ::core::option::Option<&'static str> {
            static FINGERPRINT: ::std::sync::OnceLock<
                ::core::option::Option<::std::string::String>,
            > = ::std::sync::OnceLock::new();
            FINGERPRINT
                .get_or_init(|| {
                    #[allow(unused_imports)]
                    use ::weaver::__private::{NoSchema as _, ViaSchema as _};
                    (&&::weaver::__private::Probe::<Self>::new()).fingerprint()
                })
                .as_deref()
        }
    }
}
