//! Rules for `graph!`: the graph must be well-formed before it is expanded,
//! and every problem points at the token the user wrote.

use std::collections::{HashMap, VecDeque};

use proc_macro2::Span;
use syn::Ident;

use crate::ast::graph::{Endpoint, GraphDecl};
use crate::ctxt::{Errors, closest};

/// Where an edge leads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Node(usize),
    End,
}

/// Checks `decl`, recording every problem. Returns whether the graph can be
/// expanded.
pub(crate) fn graph(decl: &GraphDecl, errors: &mut Errors) -> bool {
    let before = errors.is_empty();
    if decl.state.is_none() {
        errors.at(
            Span::call_site(),
            "missing `state: YourState`; `graph!` needs the state type whose nodes it wires, \
             e.g. `graph! { state: State, nodes: [a], edges: [START -> a -> END] }`",
        );
    }
    if decl.nodes.is_empty() {
        let message = "empty graph: declare at least one node, e.g. `nodes: [my_node]`, \
                       and wire it with `edges: [START -> my_node -> END]`";
        match &decl.nodes_key {
            Some((_, bracket)) => errors.at(*bracket, message),
            None => errors.at(Span::call_site(), message),
        }
    }

    // Node names.
    let mut index: HashMap<String, usize> = HashMap::new();
    for (i, node) in decl.nodes.iter().enumerate() {
        let name = node.name.to_string();
        if name == "START" || name == "END" {
            errors.spanned(
                &node.name,
                format!("`{name}` is reserved for the graph's {} and cannot name a node; rename it with `other_name = {name}`",
                    if name == "START" { "entry" } else { "exit" }),
            );
        } else if let std::collections::hash_map::Entry::Vacant(slot) = index.entry(name.clone()) {
            slot.insert(i);
        } else {
            errors.spanned(
                &node.name,
                format!(
                    "node `{name}` is declared twice; node names must be unique \
                     (to use one function twice, rename it: `{name}_2 = {name}`)"
                ),
            );
        }
    }
    let names: Vec<String> = decl.nodes.iter().map(|n| n.name.to_string()).collect();

    // Edges: None = START as a source.
    let mut out: Vec<Vec<Target>> = vec![Vec::new(); decl.nodes.len()];
    let mut start: Vec<Target> = Vec::new();
    let mut add = |from: Option<usize>, to: Target| match from {
        Some(i) => out[i].push(to),
        None => start.push(to),
    };
    for chain in &decl.chains {
        if chain.links.len() < 2 {
            errors.at(
                chain.span,
                "an edge needs a source and a target: write `a -> b` (or a chain `START -> a -> b -> END`)",
            );
            continue;
        }
        for pair in chain.links.windows(2) {
            if pair[0].is_empty() || pair[1].is_empty() {
                continue;
            }
            for from in &pair[0] {
                let Some(s) = source(from, &index, &names, errors) else {
                    continue;
                };
                for to in &pair[1] {
                    if let Some(t) = target(to, &index, &names, errors) {
                        add(s, t);
                    }
                }
            }
        }
    }
    for cond in &decl.conditionals {
        let s = source(&cond.from, &index, &names, errors);
        if cond.targets.is_empty() {
            errors.at(
                cond.bracket,
                format!(
                    "conditional edge from `{}` has no targets; list every node the router may \
                     return, e.g. `{} => router ? [next, END]`",
                    cond.from.ident(),
                    cond.from.ident()
                ),
            );
        }
        for to in &cond.targets {
            if let (Some(s), Some(t)) = (s, target(to, &index, &names, errors)) {
                add(s, t);
            }
        }
    }
    for (option, list) in [
        ("interrupt_before", &decl.interrupt_before),
        ("interrupt_after", &decl.interrupt_after),
    ] {
        for ident in list {
            if !index.contains_key(&ident.to_string()) {
                unknown_node(ident, &names, errors, &format!("`{option}` names"));
            }
        }
    }

    // Shape rules only make sense on a graph whose names all resolve.
    if !(before && errors.is_empty()) || decl.nodes.is_empty() {
        return false;
    }
    if start.is_empty() {
        let message =
            "no edge leaves START; add one to the first node, e.g. `edges: [START -> first_node]`";
        match &decl.edges_key {
            Some(key) => errors.spanned(key, message),
            None => errors.at(Span::call_site(), message),
        }
        return false;
    }
    let mut reached = vec![false; decl.nodes.len()];
    let mut queue: VecDeque<Target> = start.iter().copied().collect();
    while let Some(t) = queue.pop_front() {
        if let Target::Node(i) = t
            && !std::mem::replace(&mut reached[i], true)
        {
            queue.extend(out[i].iter().copied());
        }
    }
    for (i, node) in decl.nodes.iter().enumerate() {
        if !reached[i] {
            errors.spanned(
                &node.name,
                format!(
                    "node `{0}` is unreachable from START; add an edge into it \
                     (e.g. `START -> {0}` or `some_node -> {0}`) or remove it",
                    node.name
                ),
            );
        }
    }
    let mut ends = vec![false; decl.nodes.len()];
    loop {
        let mut changed = false;
        for i in 0..decl.nodes.len() {
            if !ends[i]
                && out[i].iter().any(|t| match t {
                    Target::End => true,
                    Target::Node(j) => ends[*j],
                })
            {
                ends[i] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    for (i, node) in decl.nodes.iter().enumerate() {
        if reached[i] && !ends[i] {
            errors.spanned(
                &node.name,
                format!(
                    "node `{0}` has no path to END; add an edge out of it \
                     (e.g. `{0} -> END`), directly or through other nodes",
                    node.name
                ),
            );
        }
    }
    errors.is_empty()
}

fn unknown_node(ident: &Ident, names: &[String], errors: &mut Errors, context: &str) {
    let word = ident.to_string();
    let hint = closest(&word, names.iter().map(String::as_str))
        .map(|near| format!("; did you mean `{near}`?"))
        .unwrap_or_else(|| format!("; add it to `nodes: [..., {word}]`"));
    errors.spanned(
        ident,
        format!("{context} unknown node `{word}`: it is not declared in `nodes`{hint}"),
    );
}

/// Resolves an edge's source: `Some(None)` is START.
fn source(
    end: &Endpoint,
    index: &HashMap<String, usize>,
    names: &[String],
    errors: &mut Errors,
) -> Option<Option<usize>> {
    match end {
        Endpoint::Start(_) => Some(None),
        Endpoint::End(ident) => {
            errors.spanned(
                ident,
                "END cannot be the source of an edge: nothing runs after END; \
                 to loop, add an edge from the last node instead (`last -> first`)",
            );
            None
        }
        Endpoint::Node(ident) => match index.get(&ident.to_string()) {
            Some(i) => Some(Some(*i)),
            None => {
                unknown_node(ident, names, errors, "edge from");
                None
            }
        },
    }
}

fn target(
    end: &Endpoint,
    index: &HashMap<String, usize>,
    names: &[String],
    errors: &mut Errors,
) -> Option<Target> {
    match end {
        Endpoint::End(_) => Some(Target::End),
        Endpoint::Start(ident) => {
            errors.spanned(
                ident,
                "START cannot be the target of an edge: the graph enters START only when \
                 it is invoked; point the edge at the first node instead",
            );
            None
        }
        Endpoint::Node(ident) => match index.get(&ident.to_string()) {
            Some(i) => Some(Target::Node(*i)),
            None => {
                unknown_node(ident, names, errors, "edge to");
                None
            }
        },
    }
}
