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
    // A `send:` router and the nodes it leads to are bound once, before the
    // builder, so the payload check and the builder share one value: an
    // expression written twice would move what a `move` closure captures
    // into the check, and use it again in the builder.
    let mut bindings = Vec::new();
    let node_var = |name: &syn::Ident| quote::format_ident!("__weaver_send_node_{}", name.unraw());
    for node in decl
        .nodes
        .iter()
        .filter(|n| sent.contains(&n.name.unraw().to_string()))
    {
        let (var, func) = (node_var(&node.name), &node.func);
        bindings.push(quote_spanned!(node.name.span()=>
            let #var = ::weaver::__private::payload_node::<#state, _, _, _>(#func);
        ));
    }
    let router_var = |i: usize| quote::format_ident!("__weaver_send_router_{}", i);
    for (i, c) in decl
        .conditionals
        .iter()
        .enumerate()
        .filter(|(_, c)| c.sends)
    {
        let (var, router) = (router_var(i), &c.router);
        bindings.push(quote!(
            let #var = ::weaver::__private::send_router::<#state, _, _>(#router);
        ));
    }
    let nodes = decl.nodes.iter().map(|node| {
        let lit = node.name.unraw().to_string();
        let sent = sent.contains(&lit);
        let func = if sent {
            let var = node_var(&node.name);
            quote!(#var)
        } else {
            let func = &node.func;
            quote!(#func)
        };
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
    for (i, c) in decl
        .conditionals
        .iter()
        .enumerate()
        .filter(|(_, c)| c.sends)
    {
        let router = router_var(i);
        for t in &c.targets {
            let Some(node) = decl
                .nodes
                .iter()
                .find(|n| n.name.unraw() == t.ident().unraw())
            else {
                continue;
            };
            let func = node_var(&node.name);
            send_checks.push(quote_spanned!(t.ident().span()=>
                ::weaver::__private::check_send::<#state, _, _, _, _, _>(&#router, &#func);
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
    let conditionals = decl.conditionals.iter().enumerate().map(|(i, c)| {
        let from = endpoint(&c.from);
        let router = if c.sends {
            let var = router_var(i);
            quote!(#var)
        } else {
            let router = &c.router;
            quote!(#router)
        };
        let targets = c.targets.iter().map(endpoint);
        // A router written as a path is named as written in errors.
        let named = match &c.router {
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
    if bindings.is_empty() {
        return graph;
    }
    quote!({
        #(#bindings)*
        #(#send_checks)*
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
