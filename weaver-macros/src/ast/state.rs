//! The model of a `#[derive(GraphState)]` struct.

use proc_macro2::{Group, TokenStream, TokenTree};
use quote::{ToTokens, format_ident};
use syn::ext::IdentExt;
use syn::{Attribute, Data, DeriveInput, Fields, Ident, Type, Visibility};

use crate::attr::{self, Reducer};
use crate::ctxt::Errors;

/// Field names whose setter gets a trailing `_` ([`Field::setter`]).
const SHADOWING_SETTERS: &[&str] = &[
    "default", "from", "clone", "into", "try_from", "try_into", "to_owned",
];

/// A state struct: its name, visibility and channels.
pub(crate) struct State<'a> {
    pub ident: &'a Ident,
    pub vis: &'a Visibility,
    pub fields: Vec<Field<'a>>,
}

/// One field, i.e. one channel.
pub(crate) struct Field<'a> {
    pub ident: &'a Ident,
    /// The channel name: the field name without `r#`.
    pub name: String,
    pub vis: &'a Visibility,
    /// The field's type, with `Self` spelled as the state's name
    /// ([`own_self`]).
    pub ty: Type,
    /// `///` doc attributes, forwarded to generated items.
    pub docs: Vec<&'a Attribute>,
    pub reducer: Reducer,
    /// Whether a serde attribute (`with`, `serialize_with`,
    /// `deserialize_with`) stores the field otherwise than its type does.
    pub serde_codec: bool,
    /// The function that serializes the field in its place (from `with` or
    /// `serialize_with`), if one does.
    pub serialize_with: Option<syn::ExprPath>,
    /// The function that deserializes it (from `with` or
    /// `deserialize_with`), if one does.
    pub deserialize_with: Option<syn::ExprPath>,
    /// The field's own schema, if a `#[schemars(with = "T")]` or
    /// `#[schemars(schema_with = "f")]` gives it: `with = "T"` or
    /// `schema_with = "f"`, for the update's field.
    pub schema: Option<TokenStream>,
}

impl<'a> State<'a> {
    /// Builds the model of a struct with named fields (the shape is checked
    /// by [`crate::check::state::shape`] first; `None` for any other shape).
    pub(crate) fn from_syn(input: &'a DeriveInput, errors: &mut Errors) -> Option<Self> {
        let Data::Struct(data) = &input.data else {
            return None;
        };
        let Fields::Named(named) = &data.fields else {
            return None;
        };
        let fields = named
            .named
            .iter()
            .filter_map(|f| {
                let ident = f.ident.as_ref()?;
                let (serialize_with, deserialize_with) = serde_codec_paths(&f.attrs);
                Some(Field {
                    ident,
                    name: ident.unraw().to_string(),
                    vis: &f.vis,
                    ty: own_self(&f.ty, &input.ident),
                    docs: f
                        .attrs
                        .iter()
                        .filter(|a| a.path().is_ident("doc"))
                        .collect(),
                    reducer: attr::reducer(&f.attrs, errors),
                    serde_codec: serialize_with.is_some() || deserialize_with.is_some(),
                    serialize_with,
                    deserialize_with,
                    schema: schema_attr(&f.attrs),
                })
            })
            .collect();
        Some(State {
            ident: &input.ident,
            vis: &input.vis,
            fields,
        })
    }
}

/// The functions a field's serde attributes store it through, serializing
/// and deserializing: `with = "m"` gives `m::serialize` and
/// `m::deserialize`; `serialize_with` and `deserialize_with` give their own.
/// A path that does not parse is left to serde's own error.
fn serde_codec_paths(attrs: &[Attribute]) -> (Option<syn::ExprPath>, Option<syn::ExprPath>) {
    let (mut ser, mut de) = (None, None);
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = attr.parse_nested_meta(|meta| {
            let named = |n: &str| meta.path.is_ident(n);
            if !(named("with") || named("serialize_with") || named("deserialize_with")) {
                return crate::check::state::skip_value(&meta);
            }
            let text: syn::LitStr = meta.value()?.parse()?;
            let path = |suffix: &str| -> Option<syn::ExprPath> {
                syn::parse_str(&format!("{}{suffix}", text.value())).ok()
            };
            if named("with") {
                ser = path("::serialize");
                de = path("::deserialize");
            } else if named("serialize_with") {
                ser = path("");
            } else {
                de = path("");
            }
            Ok(())
        });
    }
    (ser, de)
}

/// A field's `#[schemars(with = "T")]` or `#[schemars(schema_with = "f")]`,
/// as `with = "T"` or `schema_with = "f"`.
fn schema_attr(attrs: &[Attribute]) -> Option<TokenStream> {
    let mut found = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("schemars")) {
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("with") || meta.path.is_ident("schema_with") {
                let key = meta.path.clone();
                let text: syn::LitStr = meta.value()?.parse()?;
                found = Some(quote::quote!(#key = #text));
                return Ok(());
            }
            crate::check::state::skip_value(&meta)
        });
    }
    found
}

/// `ty` with every `Self` replaced by `state`. The field's type is also
/// written in the generated update (its fields, setters and schema), where
/// `Self` would name the update instead of the state: a field
/// `kids: Vec<Self>` became `Option<Vec<StateUpdate>>` there.
fn own_self(ty: &Type, state: &Ident) -> Type {
    fn walk(tokens: TokenStream, state: &Ident) -> TokenStream {
        tokens
            .into_iter()
            .map(|tt| match tt {
                TokenTree::Ident(i) if i == "Self" => {
                    let mut name = state.clone();
                    name.set_span(i.span());
                    TokenTree::Ident(name)
                }
                TokenTree::Group(g) => {
                    let mut inner = Group::new(g.delimiter(), walk(g.stream(), state));
                    inner.set_span(g.span());
                    TokenTree::Group(inner)
                }
                other => other,
            })
            .collect()
    }
    // An identifier replacing an identifier leaves a type a type.
    syn::parse2(walk(ty.to_token_stream(), state)).unwrap_or_else(|_| ty.clone())
}

impl Field<'_> {
    /// The update's setter for this field: the field's own name, except
    /// that `default`, `from`, `clone`, `into`, `try_from`, `try_into` and
    /// `to_owned` get a trailing `_`, since an inherent method of that name
    /// would hide the trait's (`Update::default()`, `Update::from(state)`,
    /// `update.clone()`, `update.into()`, …). (A field
    /// `default_` beside `default` is refused: both name the channel variant
    /// `Default`.)
    pub(crate) fn setter(&self) -> Ident {
        if SHADOWING_SETTERS.contains(&self.name.as_str()) {
            format_ident!("{}_", self.name, span = self.ident.span())
        } else {
            self.ident.clone()
        }
    }

    /// The channel enum's variant: the field name in UpperCamelCase, with a
    /// `C` before a leading digit, and a trailing `_` when it would be a
    /// keyword (`self_` gives `Self_`, not `Self`) or the enum's `ALL`
    /// constant (`a_l_l` gives `ALL_`).
    pub(crate) fn variant(&self) -> Ident {
        let mut out = String::new();
        let mut upper = true;
        for c in self.name.chars() {
            if c == '_' {
                upper = true;
            } else if upper {
                out.extend(c.to_uppercase());
                upper = false;
            } else {
                out.push(c);
            }
        }
        // After a leading `_`, a field name may go on with any character
        // that continues an identifier but cannot start one: a digit of any
        // script (`_٣`), a combining mark. Such a name gets the `C` too.
        let starts = out
            .chars()
            .next()
            .is_some_and(|c| syn::parse_str::<Ident>(c.encode_utf8(&mut [0; 4])).is_ok());
        if !starts {
            out.insert(0, 'C');
        }
        // `Self` is the one keyword in UpperCamelCase today; asking syn, which
        // knows them all, keeps this right if another one comes. No field
        // maps to the name with `_` otherwise (underscores are dropped above).
        // `ALL` is taken too: the channel enum's associated constant of that
        // name would clash with a variant (a field `a_l_l`).
        if syn::parse_str::<Ident>(&out).is_err() || out == "ALL" {
            out.push('_');
        }
        // Upper-casing a character that continues an identifier should give
        // one that does too; should it not, the variant spells the name's
        // code points in ASCII rather than make the derive panic.
        if syn::parse_str::<Ident>(&out).is_err() {
            out = ascii_variant(&out);
        }
        Ident::new(&out, self.ident.span())
    }
}

/// `name` in ASCII: letters and digits kept, any other character as `U`
/// and its code point in hex; always an identifier, never a keyword.
fn ascii_variant(name: &str) -> String {
    let mut out = String::from("C");
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else {
            out.push_str(&format!("U{:X}", u32::from(c)));
        }
    }
    out
}
