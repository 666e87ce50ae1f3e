//! Rules for `graph!`: the graph must be well-formed before it is expanded,
//! and every problem points at the token the user wrote.

use std::collections::{HashMap, VecDeque};

use proc_macro2::Span;
use syn::Ident;
use syn::ext::IdentExt;

use crate::ast::graph::{Endpoint, GraphDecl};
use crate::ctxt::{Errors, closest};
use crate::symbol::{POLICY_KINDS, list};

/// Where an edge leads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Node(usize),
    End,
}

/// An endpoint as a source (`Some(None)` is START) and as a target.
type Resolved = (Option<Option<usize>>, Option<Target>);

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
        let name = node.name.unraw().to_string();
        // `__start__` and `__end__` are the names START and END stand for
        // (`weaver::START`, `weaver::END`): `Graph::compile` refuses them too.
        if matches!(name.as_str(), "START" | "END" | "__start__" | "__end__") {
            errors.spanned(
                &node.name,
                format!("`{name}` is reserved for the graph's {} and cannot name a node; rename it with `other_name = {name}`",
                    if name.to_ascii_uppercase().contains("START") { "entry" } else { "exit" }),
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
    let names: Vec<String> = decl
        .nodes
        .iter()
        .map(|n| n.name.unraw().to_string())
        .collect();

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
        // Resolve each endpoint once, in the roles its position gives it,
        // so a bad name in the middle of a chain is reported once.
        let last = chain.links.len() - 1;
        let resolved: Vec<Vec<Resolved>> = chain
            .links
            .iter()
            .enumerate()
            .map(|(i, group)| {
                group
                    .iter()
                    .map(|end| resolve(end, i < last, i > 0, "edge", &index, &names, errors))
                    .collect()
            })
            .collect();
        for pair in resolved.windows(2) {
            for (from, _) in &pair[0] {
                for (_, to) in &pair[1] {
                    if let (Some(s), Some(t)) = (from, to) {
                        add(*s, *t);
                    }
                }
            }
        }
    }
    for cond in &decl.conditionals {
        let (s, _) = resolve(&cond.from, true, false, "edge", &index, &names, errors);
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
            if let (Some(s), (_, Some(t))) =
                (s, resolve(to, false, true, "edge", &index, &names, errors))
            {
                add(s, t);
            }
        }
    }
    sent_nodes_only_by_sends(decl, errors);
    // Goto destinations count as edges: a node reached only through a
    // `Command` goto is reachable.
    for goto in &decl.gotos {
        if let Endpoint::Start(ident) = &goto.from {
            errors.spanned(
                ident,
                "START returns no `Command`, so it has no goto destinations; \
                 use an edge or a conditional edge from START",
            );
            continue;
        }
        let (s, _) = resolve(&goto.from, true, false, "goto", &index, &names, errors);
        if goto.targets.is_empty() {
            errors.at(
                goto.span,
                format!(
                    "goto from `{0}` has no targets; list every node its `Command` may go to, \
                     e.g. `{0} -> [next, END]`",
                    goto.from.ident()
                ),
            );
        }
        for to in &goto.targets {
            if let (Some(s), (_, Some(t))) =
                (s, resolve(to, false, true, "goto", &index, &names, errors))
            {
                add(s, t);
            }
        }
    }
    for (option, list) in [
        ("interrupt_before", &decl.interrupt_before),
        ("interrupt_after", &decl.interrupt_after),
    ] {
        for ident in list {
            if !index.contains_key(&ident.unraw().to_string()) {
                unknown_node(ident, &names, errors, &format!("`{option}` names"));
            }
        }
    }

    policies(decl, &index, &names, errors);

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

/// Each policy names a declared node and a known kind, once per node.
fn policies(
    decl: &GraphDecl,
    index: &HashMap<String, usize>,
    names: &[String],
    errors: &mut Errors,
) {
    let mut seen: Vec<(String, String)> = Vec::new();
    for policy in &decl.policies {
        let node = policy.node.unraw().to_string();
        if !index.contains_key(&node) {
            unknown_node(&policy.node, names, errors, "`policies` names");
            continue;
        }
        let kind = policy.kind.to_string();
        if !POLICY_KINDS.iter().any(|k| policy.kind == *k) {
            let hint = closest(&kind, POLICY_KINDS.iter().map(|s| s.0))
                .map(|near| format!("; did you mean `{near}`?"))
                .unwrap_or_default();
            errors.spanned(
                &policy.kind,
                format!(
                    "unknown policy `{kind}`; expected one of {}{hint}",
                    list(&POLICY_KINDS)
                ),
            );
            continue;
        }
        let key = (node, kind);
        if seen.contains(&key) {
            errors.spanned(
                &policy.kind,
                format!(
                    "node `{}` is given a `{}` policy twice; keep one",
                    key.0, key.1
                ),
            );
        } else {
            seen.push(key);
        }
    }
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

/// Resolves an endpoint used as a source (`Some(None)` is START) and/or as a
/// target, recording at most one error for it.
fn resolve(
    end: &Endpoint,
    as_source: bool,
    as_target: bool,
    // "edge" or "goto", for error messages.
    what: &str,
    index: &HashMap<String, usize>,
    names: &[String],
    errors: &mut Errors,
) -> Resolved {
    match end {
        Endpoint::Start(ident) => {
            if as_target {
                errors.spanned(
                    ident,
                    "START cannot be the target of an edge: the graph enters START only when \
                     it is invoked; point the edge at the first node instead",
                );
                return (None, None);
            }
            (Some(None), None)
        }
        Endpoint::End(ident) => {
            if as_source {
                errors.spanned(
                    ident,
                    "END cannot be the source of an edge: nothing runs after END; \
                     to loop, add an edge from the last node instead (`last -> first`)",
                );
                return (None, None);
            }
            (None, Some(Target::End))
        }
        Endpoint::Node(ident) => match index.get(&ident.unraw().to_string()) {
            Some(i) => (Some(Some(*i)), Some(Target::Node(*i))),
            None => {
                let context = if as_target { "to" } else { "from" };
                unknown_node(ident, names, errors, &format!("{what} {context}"));
                (None, None)
            }
        },
    }
}

/// A `send:` router's targets are nodes run by sends: not END, and not the
/// target of an edge, a plain conditional edge or a goto (which would run
/// them with no payload).
fn sent_nodes_only_by_sends(decl: &GraphDecl, errors: &mut Errors) {
    // By name: `r#measure` and `measure` are one node.
    let sent: Vec<String> = decl
        .conditionals
        .iter()
        .filter(|c| c.sends)
        .flat_map(|c| &c.targets)
        .filter_map(|t| match t {
            Endpoint::End(i) => {
                errors.spanned(
                    i,
                    "a `send:` router sends to nodes that take its payload; END takes none: \
                     route to END with a `conditional:` edge",
                );
                None
            }
            other => Some(other.ident().unraw().to_string()),
        })
        .collect();
    let is_sent =
        |t: &Endpoint| matches!(t, Endpoint::Node(i) if sent.contains(&i.unraw().to_string()));
    let plain = decl
        .chains
        .iter()
        .flat_map(|c| c.links.iter().skip(1).flatten())
        .chain(
            decl.conditionals
                .iter()
                .filter(|c| !c.sends)
                .flat_map(|c| &c.targets),
        )
        .chain(decl.gotos.iter().flat_map(|g| &g.targets));
    for t in plain.filter(|t| is_sent(t)) {
        errors.spanned(
            t.ident(),
            format!(
                "`{}` is run by sends (a `send:` router leads to it) and takes their payload; \
                 it cannot also be reached by an edge, a plain conditional edge or a goto",
                t.ident()
            ),
        );
    }
}
