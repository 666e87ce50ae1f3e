//! `graph!`: the wiring, expanded to the run-time `weaver::Graph` builder so
//! a macro graph and the equivalent builder graph are the same graph.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;

use crate::ast::graph::{Endpoint, GraphDecl};
use crate::check;

/// Parses, checks and expands a `graph!` input.
pub(crate) fn graph(input: TokenStream) -> TokenStream {
    let mut decl: GraphDecl = match syn::parse2(input) {
        Ok(decl) => decl,
        Err(e) => return e.to_compile_error(),
    };
    let mut errors = std::mem::take(&mut decl.errors);
    let ok = check::graph::graph(&decl, &mut errors);
    let name = graph_name(&decl);
    let Some(state) = &decl.state else {
        let errors = errors.into_compile_errors();
        return quote!({ #errors loop {} });
    };
    if !ok || !errors.is_empty() {
        // A stub of the right type, so the caller's `.compile(...)` adds no error.
        let errors = errors.into_compile_errors();
        return quote!({ #errors ::weaver::Graph::<#state>::new(#name) });
    }
    // Nodes a `send:` router leads to take the payload, not the state.
    let sent: Vec<String> = decl
        .conditionals
        .iter()
        .filter(|c| c.sends)
        .flat_map(|c| &c.targets)
        .map(|t| t.ident().unraw().to_string())
        .collect();
    let nodes = decl.nodes.iter().map(|node| {
        let lit = node.name.unraw().to_string();
        let func = &node.func;
        // Each policy is the `NodePolicy` method of its kind, its value the
        // user's expression (so a value of the wrong type is reported there).
        let policies: Vec<TokenStream> = decl
            .policies
            .iter()
            .filter(|p| p.node.unraw() == node.name.unraw())
            .map(|p| {
                let (kind, value) = (&p.kind, &p.value);
                quote!(.#kind(#value))
            })
            .collect();
        // Spanned at the node's name: a function that does not fit the state
        // is reported there, through `IntoNode`'s `on_unimplemented`.
        let sent = sent.contains(&lit);
        if policies.is_empty() {
            if sent {
                quote_spanned!(node.name.span()=> .add_send_node(#lit, #func))
            } else {
                quote_spanned!(node.name.span()=> .add_node(#lit, #func))
            }
        } else {
            let policy = quote!(::weaver::NodePolicy::<#state>::new() #(#policies)*);
            if sent {
                quote_spanned!(node.name.span()=> .add_send_node_with(#lit, #func, #policy))
            } else {
                quote_spanned!(node.name.span()=> .add_node_with(#lit, #func, #policy))
            }
        }
    });
    // Each `send:` router's payload must be what each of its targets
    // takes: checked by the types, in a closure that never runs.
    let mut send_checks = Vec::new();
    for c in decl.conditionals.iter().filter(|c| c.sends) {
        let router = &c.router;
        for t in &c.targets {
            let Some(node) = decl.nodes.iter().find(|n| n.name == *t.ident()) else {
                continue;
            };
            let func = &node.func;
            send_checks.push(quote_spanned!(t.ident().span()=>
                ::weaver::__private::check_send::<#state, _, _, _, _, _>(&(#router), &(#func));
            ));
        }
    }
    let mut edges = Vec::new();
    for chain in &decl.chains {
        for pair in chain.links.windows(2) {
            for from in &pair[0] {
                for to in &pair[1] {
                    let (from, to) = (endpoint(from), endpoint(to));
                    edges.push(quote!(.add_edge(#from, #to)));
                }
            }
        }
    }
    let conditionals = decl.conditionals.iter().map(|c| {
        let from = endpoint(&c.from);
        let router = &c.router;
        let targets = c.targets.iter().map(endpoint);
        // A router written as a path is named as written in errors.
        let named = match router {
            syn::Expr::Path(p) => {
                let name = quote!(#p).to_string().replace(' ', "");
                quote!(.router_named(#name))
            }
            _ => quote!(),
        };
        quote!(.add_conditional_edges(#from, #router, [#(#targets),*]) #named)
    });
    let gotos = decl.gotos.iter().map(|g| {
        let from = endpoint(&g.from);
        let targets = g.targets.iter().map(endpoint);
        quote!(.add_destinations(#from, [#(#targets),*]))
    });
    let mut interrupts = Vec::new();
    for (method, list) in [
        (quote!(interrupt_before), &decl.interrupt_before),
        (quote!(interrupt_after), &decl.interrupt_after),
    ] {
        if !list.is_empty() {
            let names = list.iter().map(|i| i.unraw().to_string());
            interrupts.push(quote!(.#method([#(#names),*])));
        }
    }
    let graph = quote! {
        ::weaver::Graph::<#state>::new(#name)
            #(#nodes)*
            #(#edges)*
            #(#conditionals)*
            #(#gotos)*
            #(#interrupts)*
    };
    if send_checks.is_empty() {
        return graph;
    }
    quote!({
        let _payloads_fit = || { #(#send_checks)* };
        #graph
    })
}

fn graph_name(decl: &GraphDecl) -> TokenStream {
    if let Some(name) = &decl.name {
        return quote!(#name);
    }
    let fallback = match &decl.state {
        Some(syn::Type::Path(p)) => p
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default(),
        _ => String::new(),
    };
    quote!(#fallback)
}

fn endpoint(end: &Endpoint) -> TokenStream {
    match end {
        Endpoint::Start(_) => quote!(::weaver::START),
        Endpoint::End(_) => quote!(::weaver::END),
        Endpoint::Node(ident) => {
            let lit = ident.unraw().to_string();
            quote!(#lit)
        }
    }
}
