//! Validation: [`Graph::compile`] checks the declared graph and resolves it
//! into the engine's [`Spec`].

use std::collections::{HashMap, VecDeque};

use super::builder::{Compile, Graph, RawNode};
use crate::engine::node_cache::NodeCache;
use crate::engine::spec::{Branch, Edges, NodeSpec, Spec, Target, trigger_channel};
use crate::engine::{CompiledGraph, END, START};
use crate::error::{Error, GraphError, Result};
use crate::state::GraphState;

impl<S: GraphState> Graph<S> {
    /// Validates the graph and builds it: unknown, duplicate, unreachable and
    /// dead-end nodes are [`Error::InvalidGraph`] naming the node.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: i64 }
    ///
    /// let ok = Graph::<S>::new("ok")
    ///     .add_node("a", |_: &S| SUpdate::default())
    ///     .add_sequence([START, "a", END])
    ///     .compile(Compile::new())?;
    /// assert_eq!(ok.node_names(), ["a"]);
    ///
    /// // An edge to a node that does not exist is refused, naming it.
    /// let bad = Graph::<S>::new("bad")
    ///     .add_node("a", |_: &S| SUpdate::default())
    ///     .add_sequence([START, "a", "b", END])
    ///     .compile(Compile::new());
    /// assert!(matches!(bad, Err(Error::InvalidGraph(_))));
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn compile(mut self, mut options: Compile) -> Result<CompiledGraph<S>> {
        let declared = std::mem::take(&mut self.interrupts);
        options.interrupt_before.extend(declared.interrupt_before);
        options.interrupt_after.extend(declared.interrupt_after);
        let spec = build(self, &options)?;
        Ok(CompiledGraph::new(
            spec,
            options.checkpointer,
            options.store,
        ))
    }
}

fn is_reserved(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("node names cannot be empty")
    } else if name == START || name == END {
        Some("START and END are reserved")
    } else if name.contains(['|', ':']) {
        // A subgraph's namespace is `node:task|node:task`: LangGraph
        // refuses the two separators in node names too.
        Some("node names cannot contain `|` or `:` (they separate a subgraph's namespace)")
    } else {
        None
    }
}

fn unknown(from: &str, to: &str, node: &str) -> GraphError {
    GraphError::UnknownNode {
        from: from.to_owned(),
        to: to.to_owned(),
        node: node.to_owned(),
    }
}

/// Nodes as declared: names, bodies and policies.
type Declared<S> = Vec<RawNode<S>>;

/// The declared nodes, sorted by name (task order), duplicates and reserved
/// names refused.
fn sorted_nodes<S: GraphState>(mut nodes: Declared<S>) -> Result<Declared<S>> {
    for (n, ..) in &nodes {
        if let Some(reason) = is_reserved(n) {
            return Err(GraphError::InvalidNodeName {
                node: n.clone(),
                reason,
            }
            .into());
        }
    }
    nodes.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = nodes.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(GraphError::DuplicateNode {
            node: w[0].0.clone(),
        }
        .into());
    }
    Ok(nodes)
}

/// Resolves edge ends by name against the node index.
struct Resolver<'a> {
    index: &'a HashMap<String, usize>,
}

impl Resolver<'_> {
    /// The source of an edge: `None` is START.
    fn source(&self, from: &str, to: &str) -> Result<Option<usize>> {
        if from == START {
            Ok(None)
        } else if from == END {
            Err(GraphError::InvalidEdge {
                from: from.to_owned(),
                to: to.to_owned(),
                reason: "END cannot be the source of an edge",
            }
            .into())
        } else {
            self.index
                .get(from)
                .copied()
                .map(Some)
                .ok_or_else(|| unknown(from, to, from).into())
        }
    }

    fn target(&self, from: &str, to: &str) -> Result<Target> {
        if to == START {
            Err(GraphError::InvalidEdge {
                from: from.to_owned(),
                to: to.to_owned(),
                reason: "START cannot be the target of an edge",
            }
            .into())
        } else if to == END {
            Ok(Target::End)
        } else {
            self.index
                .get(to)
                .copied()
                .map(Target::Node)
                .ok_or_else(|| unknown(from, to, to).into())
        }
    }
}

/// The outgoing edges of START and of each node, from the declared edges,
/// conditional edges and goto destinations.
fn resolve_edges<S: GraphState>(
    graph: &mut Graph<S>,
    index: &HashMap<String, usize>,
    count: usize,
) -> Result<(Edges<S>, Vec<Edges<S>>)> {
    let names = Resolver { index };
    let mut outs: Vec<Edges<S>> = (0..count).map(|_| Edges::default()).collect();
    let mut start = Edges::default();
    for (from, to) in &graph.edges {
        let s = names.source(from, to)?;
        let t = names.target(from, to)?;
        let out = match s {
            Some(i) => &mut outs[i],
            None => &mut start,
        };
        if !out.fixed.contains(&t) {
            out.fixed.push(t);
        }
    }
    for b in std::mem::take(&mut graph.branches) {
        if b.targets.is_empty() {
            return Err(GraphError::EmptyConditionalTargets { from: b.from }.into());
        }
        let s = names.source(&b.from, &b.targets[0])?;
        let targets = b
            .targets
            .iter()
            .map(|t| Ok((t.clone(), names.target(&b.from, t)?)))
            .collect::<Result<Vec<_>>>()?;
        let out = match s {
            Some(i) => &mut outs[i],
            None => &mut start,
        };
        // A named function (or a name given) twice is one router added
        // twice; closures and function pointers share a generic name, and
        // two of them may be two routers.
        let generic = b.name.contains("{{closure}}") || b.name.starts_with("the router after");
        if !generic && out.branches.iter().any(|x| x.name == b.name) {
            return Err(GraphError::DuplicateRouter {
                from: b.from,
                router: b.name,
            }
            .into());
        }
        out.branches.push(Branch {
            name: b.name,
            router: b.router,
            targets,
        });
    }
    for (from, targets) in &graph.destinations {
        if targets.is_empty() {
            return Err(GraphError::EmptyDestinations { node: from.clone() }.into());
        }
        for to in targets {
            // START only takes in the input: it never returns a `Command`,
            // so a goto from it could never fire (and must not count as an
            // entry point).
            if from == START {
                return Err(GraphError::InvalidEdge {
                    from: from.to_owned(),
                    to: to.clone(),
                    reason: "START returns no `Command`, so it has no goto destinations; use an edge or a conditional edge from START",
                }
                .into());
            }
            let s = names.source(from, to)?;
            let t = names.target(from, to)?;
            match s {
                Some(i) => outs[i].destinations.push(t),
                None => start.destinations.push(t),
            }
        }
    }
    Ok((start, outs))
}

/// Every target an edge set may lead to.
fn successors<S>(e: &Edges<S>) -> Vec<Target> {
    e.fixed
        .iter()
        .chain(
            e.branches
                .iter()
                .flat_map(|b| b.targets.iter().map(|(_, t)| t)),
        )
        .chain(e.destinations.iter())
        .copied()
        .collect()
}

/// The first node (by index) START cannot reach, if any.
fn unreachable<S>(start: &Edges<S>, outs: &[Edges<S>]) -> Option<usize> {
    let mut seen = vec![false; outs.len()];
    let mut queue: VecDeque<Target> = successors(start).into();
    while let Some(t) = queue.pop_front() {
        if let Target::Node(i) = t
            && !std::mem::replace(&mut seen[i], true)
        {
            queue.extend(successors(&outs[i]));
        }
    }
    seen.iter().position(|s| !s)
}

/// The first node (by index) with no path to END, if any: a fixed point
/// over the successor lists.
fn dead_end<S>(outs: &[Edges<S>]) -> Option<usize> {
    let succs: Vec<Vec<Target>> = outs.iter().map(successors).collect();
    let mut ends = vec![false; outs.len()];
    loop {
        let mut changed = false;
        for i in 0..outs.len() {
            if !ends[i]
                && succs[i].iter().any(|t| match t {
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
    ends.iter().position(|e| !e)
}

/// A node run by sends takes their payload: an edge or a `goto` into it
/// would run it with none, so only conditional edges (whose routers send)
/// may lead to it.
fn no_plain_edge_into_payload_nodes<S: GraphState>(
    nodes: &Declared<S>,
    start: &Edges<S>,
    outs: &[Edges<S>],
) -> Result<()> {
    let sources = std::iter::once((START, start)).chain(
        nodes
            .iter()
            .zip(outs)
            .map(|((name, _, _), out)| (name.as_str(), out)),
    );
    for (from, out) in sources {
        for t in out.fixed.iter().chain(&out.destinations) {
            if let Target::Node(i) = *t
                && nodes[i].1.takes_payload()
            {
                return Err(GraphError::InvalidEdge {
                    from: from.to_owned(),
                    to: nodes[i].0.clone(),
                    reason: "the target is run by sends (it takes a payload): reach it from a conditional edge whose router returns `Send`s",
                }
                .into());
            }
        }
    }
    Ok(())
}

/// Per node, whether `names` (the nodes an interrupt option lists) holds it.
fn interrupt_flags(
    option: &'static str,
    names: &[String],
    index: &HashMap<String, usize>,
    options: &Compile,
) -> Result<Vec<bool>> {
    let mut v = vec![false; index.len()];
    for n in names {
        let i = index
            .get(n)
            .ok_or_else(|| GraphError::UnknownInterruptNode {
                option,
                node: n.clone(),
            })?;
        v[*i] = true;
    }
    if !names.is_empty() && options.checkpointer.is_none() {
        return Err(Error::from(GraphError::InterruptWithoutCheckpointer {
            option,
        }));
    }
    Ok(v)
}

/// Checks `graph` and resolves it into the engine's [`Spec`].
pub(crate) fn build<S: GraphState>(mut graph: Graph<S>, options: &Compile) -> Result<Spec<S>> {
    let nodes = sorted_nodes(std::mem::take(&mut graph.nodes))?;
    let index: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, (n, ..))| (n.clone(), i))
        .collect();
    let (start, outs) = resolve_edges(&mut graph, &index, nodes.len())?;
    no_plain_edge_into_payload_nodes(&nodes, &start, &outs)?;
    if start.fixed.is_empty() && start.branches.is_empty() && start.destinations.is_empty() {
        return Err(GraphError::NoEntryPoint.into());
    }
    if let Some(i) = unreachable(&start, &outs) {
        return Err(GraphError::Unreachable {
            node: nodes[i].0.clone(),
        }
        .into());
    }
    if let Some(i) = dead_end(&outs) {
        return Err(GraphError::NoPathToEnd {
            node: nodes[i].0.clone(),
        }
        .into());
    }
    let interrupt_before = interrupt_flags(
        "interrupt_before",
        &options.interrupt_before,
        &index,
        options,
    )?;
    let interrupt_after =
        interrupt_flags("interrupt_after", &options.interrupt_after, &index, options)?;
    let nodes = nodes
        .into_iter()
        .zip(outs)
        .map(|((name, node, policy), out)| {
            let policy = policy.or(&graph.node_defaults);
            if let Some(reason) = policy.invalid() {
                return Err(GraphError::InvalidPolicy { node: name, reason }.into());
            }
            Ok(NodeSpec {
                trigger: trigger_channel(&name),
                name,
                node,
                out,
                policy,
                cache: NodeCache::new(),
            })
        })
        .collect::<Result<_>>()?;
    let renames = renames(&options.renames, &index)?;
    Ok(Spec {
        renames,
        name: graph.name,
        nodes,
        index,
        start,
        interrupt_before,
        interrupt_after,
    })
}

/// The old-name → new-name map of [`Compile::rename_node`], checked: the
/// new name is a node, the old one is not (nor START or END), each old
/// name is mapped once.
fn renames(
    given: &[(String, String)],
    index: &HashMap<String, usize>,
) -> Result<HashMap<String, String>> {
    let mut out = HashMap::new();
    for (old, new) in given {
        let refuse = |reason| GraphError::InvalidRename {
            old: old.clone(),
            new: new.clone(),
            reason,
        };
        let reason = if !index.contains_key(new) {
            Some("the new name is not a node of this graph")
        } else if index.contains_key(old) {
            Some("the old name is still a node of this graph")
        } else if old == START || old == END || old.is_empty() {
            Some("START, END and the empty name are never renamed")
        } else if out.contains_key(old) {
            Some("the old name is mapped twice")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(refuse(reason).into());
        }
        out.insert(old.clone(), new.clone());
    }
    Ok(out)
}
