//! The model of a `graph! { ... }` declaration, and its parser.
//!
//! ```text
//! graph! {
//!     name: "Name",                              // optional, default: the state's name
//!     state: State,                              // required
//!     nodes: [a, b, renamed = path::to::f, c = |s: &State| ...],
//!     edges: [START -> a -> [b, c] -> d -> END, ...],
//!     conditional: [a => router ? [b, c, END], ...],
//!     send: [a => fan_out ? [summarize], ...],   // a router's `Send`s to payload nodes
//!     goto: [a -> [b, c], d -> END, ...],        // where a `Command` may go
//!     interrupt_before: [b],
//!     interrupt_after: [c],
//!     policies: [a => retry(expr), a => timeout(expr), b => cache(expr)],
//! }
//! ```

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::token::{Bracket, Comma};
use syn::{Expr, Ident, LitStr, Token, Type, bracketed, parenthesized};

use crate::ctxt::{Errors, closest};
use crate::symbol::{
    CONDITIONAL, EDGES, END, GOTO, GRAPH_KEYS, INTERRUPT_AFTER, INTERRUPT_BEFORE, NAME, NODES,
    POLICIES, SEND, START, STATE, list,
};

/// A whole `graph!` input. Options the user left out are `None` / empty.
pub(crate) struct GraphDecl {
    pub name: Option<LitStr>,
    pub state: Option<Type>,
    /// The `nodes` key and its bracket (for "empty graph" errors).
    pub nodes_key: Option<(Ident, Span)>,
    pub nodes: Vec<NodeDecl>,
    pub edges_key: Option<Ident>,
    pub chains: Vec<Chain>,
    pub conditionals: Vec<Conditional>,
    pub gotos: Vec<Goto>,
    pub interrupt_before: Vec<Ident>,
    pub interrupt_after: Vec<Ident>,
    pub policies: Vec<PolicyDecl>,
    /// Errors found while parsing that did not stop the parse (unknown or
    /// repeated keys).
    pub errors: Errors,
}

/// `a` (the function `a`, node name "a") or `name = expr`.
pub(crate) struct NodeDecl {
    pub name: Ident,
    pub func: Expr,
}

/// `node => kind(value)`: one policy of a node (`kind` is checked later).
pub(crate) struct PolicyDecl {
    pub node: Ident,
    pub kind: Ident,
    pub value: Expr,
}

/// A reference to START, END or a node in an edge.
#[derive(Clone)]
pub(crate) enum Endpoint {
    Start(Ident),
    End(Ident),
    Node(Ident),
}

impl Endpoint {
    pub(crate) fn ident(&self) -> &Ident {
        match self {
            Endpoint::Start(i) | Endpoint::End(i) | Endpoint::Node(i) => i,
        }
    }
}

/// `A -> B -> [C, D] -> E`: each link is one endpoint or a bracketed group.
pub(crate) struct Chain {
    pub links: Vec<Vec<Endpoint>>,
    /// The first token, for "an edge needs `->`".
    pub span: Span,
}

/// `from -> [targets]` (or `from -> target`): the nodes `from` may reach
/// through a `Command` goto.
pub(crate) struct Goto {
    pub from: Endpoint,
    pub targets: Vec<Endpoint>,
    /// The targets (the bracket, or the single target), for "no targets".
    pub span: Span,
}

/// `from => router ? [targets]`, in `conditional:` or `send:`.
pub(crate) struct Conditional {
    pub from: Endpoint,
    pub router: Expr,
    pub targets: Vec<Endpoint>,
    pub bracket: Span,
    /// Declared in `send:`: the router returns `Send`s, and its targets are
    /// nodes run by sends (they take the payload).
    pub sends: bool,
}

impl Parse for GraphDecl {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut decl = GraphDecl {
            name: None,
            state: None,
            nodes_key: None,
            nodes: Vec::new(),
            edges_key: None,
            chains: Vec::new(),
            conditionals: Vec::new(),
            gotos: Vec::new(),
            interrupt_before: Vec::new(),
            interrupt_after: Vec::new(),
            policies: Vec::new(),
            errors: Errors::new(),
        };
        let mut seen: Vec<Ident> = Vec::new();
        while !input.is_empty() {
            let key = Ident::parse_any(input)?;
            input.parse::<Token![:]>()?;
            if let Some(first) = seen.iter().find(|k| **k == key) {
                let _ = first;
                decl.errors.spanned(
                    &key,
                    format!("option `{key}` is given twice; merge the two lists into one"),
                );
            }
            seen.push(key.clone());
            if key == NAME {
                decl.name = Some(input.parse()?);
            } else if key == STATE {
                decl.state = Some(input.parse()?);
            } else if key == NODES {
                let content;
                let bracket = bracketed!(content in input);
                decl.nodes_key = Some((key, bracket.span.join()));
                let list = Punctuated::<NodeDecl, Comma>::parse_terminated(&content)?;
                decl.nodes.extend(list);
            } else if key == EDGES {
                let content;
                bracketed!(content in input);
                decl.edges_key = Some(key);
                let list = Punctuated::<Chain, Comma>::parse_terminated(&content)?;
                decl.chains.extend(list);
            } else if key == CONDITIONAL {
                let content;
                bracketed!(content in input);
                let list = Punctuated::<Conditional, Comma>::parse_terminated(&content)?;
                decl.conditionals.extend(list);
            } else if key == SEND {
                let content;
                bracketed!(content in input);
                let list = Punctuated::<Conditional, Comma>::parse_terminated(&content)?;
                decl.conditionals.extend(list.into_iter().map(|mut c| {
                    c.sends = true;
                    c
                }));
            } else if key == GOTO {
                let content;
                bracketed!(content in input);
                let list = Punctuated::<Goto, Comma>::parse_terminated(&content)?;
                decl.gotos.extend(list);
            } else if key == INTERRUPT_BEFORE {
                decl.interrupt_before.extend(ident_list(input)?);
            } else if key == INTERRUPT_AFTER {
                decl.interrupt_after.extend(ident_list(input)?);
            } else if key == POLICIES {
                let content;
                bracketed!(content in input);
                let list = Punctuated::<PolicyDecl, Comma>::parse_terminated(&content)?;
                decl.policies.extend(list);
            } else {
                let word = key.to_string();
                let hint = closest(&word, GRAPH_KEYS.iter().map(|s| s.0))
                    .map(|near| format!("; did you mean `{near}`?"))
                    .unwrap_or_default();
                decl.errors.spanned(
                    &key,
                    format!(
                        "unknown option `{word}`; expected one of {}{hint}",
                        list(&GRAPH_KEYS)
                    ),
                );
                skip_value(input)?;
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(decl)
    }
}

/// Skips an unknown option's value: every token up to the next top-level comma.
fn skip_value(input: ParseStream<'_>) -> syn::Result<()> {
    input.step(|cursor| {
        let mut rest = *cursor;
        while let Some((tt, next)) = rest.token_tree() {
            if matches!(&tt, TokenTree::Punct(p) if p.as_char() == ',') {
                return Ok(((), rest));
            }
            rest = next;
        }
        Ok(((), rest))
    })
}

fn ident_list(input: ParseStream<'_>) -> syn::Result<Vec<Ident>> {
    let content;
    bracketed!(content in input);
    Ok(Punctuated::<Ident, Comma>::parse_terminated(&content)?
        .into_iter()
        .collect())
}

impl Parse for NodeDecl {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        // `name = expr`
        if input.peek(Ident) && input.peek2(Token![=]) && !input.peek2(Token![==]) {
            let name: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            let func: Expr = input.parse()?;
            return Ok(NodeDecl { name, func });
        }
        // `path::to::f` or `f`: the node is named after the last segment.
        let path: syn::ExprPath = input.parse()?;
        let Some(last) = path.path.segments.last() else {
            return Err(syn::Error::new_spanned(&path, "expected a node function"));
        };
        Ok(NodeDecl {
            name: last.ident.clone(),
            func: Expr::Path(path),
        })
    }
}

impl Parse for PolicyDecl {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let node: Ident = input.parse()?;
        input.parse::<Token![=>]>().map_err(|e| {
            syn::Error::new(
                e.span(),
                format!(
                    "expected `=>` after `{node}`; a policy is written \
                     `{node} => retry(...)`, `{node} => timeout(...)` or `{node} => cache(...)`"
                ),
            )
        })?;
        let kind: Ident = input.parse()?;
        let content;
        parenthesized!(content in input);
        let value: Expr = content.parse()?;
        if !content.is_empty() {
            return Err(content.error("a policy takes one value: `retry(RetryPolicy::new())`"));
        }
        Ok(PolicyDecl { node, kind, value })
    }
}

impl Parse for Endpoint {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let ident: Ident = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "expected a node name, `START` or `END` (edges name nodes as declared in `nodes: [...]`)",
            )
        })?;
        Ok(if ident == START {
            Endpoint::Start(ident)
        } else if ident == END {
            Endpoint::End(ident)
        } else {
            Endpoint::Node(ident)
        })
    }
}

fn link(input: ParseStream<'_>) -> syn::Result<Vec<Endpoint>> {
    if input.peek(Bracket) {
        let content;
        bracketed!(content in input);
        Ok(Punctuated::<Endpoint, Comma>::parse_terminated(&content)?
            .into_iter()
            .collect())
    } else {
        Ok(vec![input.parse()?])
    }
}

impl Parse for Chain {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let span = input.span();
        let mut links = vec![link(input)?];
        while input.peek(Token![->]) {
            input.parse::<Token![->]>()?;
            links.push(link(input)?);
        }
        Ok(Chain { links, span })
    }
}

impl Parse for Goto {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let from: Endpoint = input.parse()?;
        if !input.peek(Token![->]) {
            return Err(input.error(format!(
                "expected `->` after `{0}`; a goto declaration lists where a node's `Command` \
                 may go, e.g. `goto: [{0} -> [b, c]]`",
                from.ident()
            )));
        }
        input.parse::<Token![->]>()?;
        let span = input.span();
        let targets = link(input)?;
        if input.peek(Token![->]) {
            return Err(input.error(
                "a goto declaration has one source and its targets, not a chain: \
                 write `a -> [b, c], b -> d`",
            ));
        }
        Ok(Goto {
            from,
            targets,
            span,
        })
    }
}

/// Whether `after` (what follows a `?`) is a bracketed list and then the
/// end of the declaration (nothing, or a `,`).
fn ends_with_targets(after: syn::buffer::Cursor<'_>) -> bool {
    let Some((_, _, rest)) = after.group(proc_macro2::Delimiter::Bracket) else {
        return false;
    };
    match rest.token_tree() {
        None => true,
        Some((TokenTree::Punct(p), _)) => p.as_char() == ',',
        Some(_) => false,
    }
}

impl Parse for Conditional {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let from: Endpoint = input.parse()?;
        input.parse::<Token![=>]>()?;
        // The router is every token up to the top-level `?` before the
        // targets: the one followed by a bracketed list that ends the
        // declaration (a `?` inside the router, as in `s.next.as_ref()?`,
        // is the router's own).
        let router_tokens: TokenStream = input.step(|cursor| {
            let mut rest = *cursor;
            let mut tokens = Vec::new();
            while let Some((tt, next)) = rest.token_tree() {
                if matches!(&tt, TokenTree::Punct(p) if p.as_char() == '?')
                    && ends_with_targets(next)
                {
                    return Ok((tokens.into_iter().collect(), rest));
                }
                tokens.push(tt);
                rest = next;
            }
            Err(cursor
                .error("expected `from => router ? [targets]`; the possible targets are required"))
        })?;
        let router: Expr = syn::parse2(router_tokens)?;
        input.parse::<Token![?]>()?;
        let content;
        let bracket = bracketed!(content in input);
        let targets = Punctuated::<Endpoint, Comma>::parse_terminated(&content)?
            .into_iter()
            .collect();
        Ok(Conditional {
            from,
            router,
            targets,
            bracket: bracket.span.join(),
            sends: false,
        })
    }
}
