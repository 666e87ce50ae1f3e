//! The resolved graph: node indices, edges and branches, built and validated by `compile`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::builder::{Compile, Graph, is_reserved, unknown};
use super::node::Node;
use super::{END, START};
use crate::error::{Error, GraphError, Result};
use crate::state::GraphState;

pub(crate) type Router<S> = Arc<dyn Fn(&S) -> Vec<String> + Send + Sync>;

pub(crate) struct RawBranch<S> {
    pub from: String,
    pub router: Router<S>,
    pub targets: Vec<String>,
}

/// Where an edge leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    Node(usize),
    End,
}

pub(crate) struct Branch<S> {
    pub router: Router<S>,
    /// Allowed target names and where they lead.
    pub targets: Vec<(String, Target)>,
}

/// Outgoing edges of a node (or of START).
pub(crate) struct Edges<S> {
    pub fixed: Vec<Target>,
    pub branches: Vec<Branch<S>>,
    pub destinations: Vec<Target>,
}

impl<S> Default for Edges<S> {
    fn default() -> Self {
        Edges {
            fixed: Vec::new(),
            branches: Vec::new(),
            destinations: Vec::new(),
        }
    }
}

pub(crate) struct NodeSpec<S: GraphState> {
    pub name: String,
    /// `branch:to:<name>`, the channel whose version change triggers the node.
    pub trigger: String,
    pub node: Box<dyn Node<S>>,
    pub out: Edges<S>,
}

/// A validated graph.
pub(crate) struct Spec<S: GraphState> {
    pub name: String,
    /// Nodes sorted by name: task order within a step is this order.
    pub nodes: Vec<NodeSpec<S>>,
    pub index: HashMap<String, usize>,
    pub start: Edges<S>,
    pub interrupt_before: Vec<bool>,
    pub interrupt_after: Vec<bool>,
}

/// Trigger channel of the START pseudo-task (it applies the input).
pub(crate) const START_TRIGGER: &str = "branch:to:__start__";
/// Channel holding a pending input until the START task applies it.
pub(crate) const INPUT_CHANNEL: &str = "__start__";

pub(crate) fn trigger_channel(node: &str) -> String {
    format!("branch:to:{node}")
}

impl<S: GraphState> Spec<S> {
    pub fn resolve(&self, name: &str) -> Option<Target> {
        if name == END {
            Some(Target::End)
        } else {
            self.index.get(name).copied().map(Target::Node)
        }
    }

    pub fn edges_of(&self, node: Option<usize>) -> &Edges<S> {
        match node {
            Some(i) => &self.nodes[i].out,
            None => &self.start,
        }
    }

    pub fn name_of(&self, node: Option<usize>) -> &str {
        match node {
            Some(i) => &self.nodes[i].name,
            None => START,
        }
    }
}

pub(crate) fn build<S: GraphState>(graph: Graph<S>, options: &Compile) -> Result<Spec<S>> {
    let Graph {
        name,
        nodes,
        edges,
        branches,
        destinations,
        ..
    } = graph;
    let mut nodes: Vec<(String, Box<dyn Node<S>>)> = nodes;
    for (n, _) in &nodes {
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
    let index: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.clone(), i))
        .collect();
    let mut outs: Vec<Edges<S>> = nodes.iter().map(|_| Edges::default()).collect();
    let mut start = Edges::default();

    // Resolves the source of an edge: None = START.
    let source = |from: &str, to: &str| -> Result<Option<usize>> {
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
            index
                .get(from)
                .copied()
                .map(Some)
                .ok_or_else(|| unknown(from, to, from).into())
        }
    };
    let target = |from: &str, to: &str| -> Result<Target> {
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
            index
                .get(to)
                .copied()
                .map(Target::Node)
                .ok_or_else(|| unknown(from, to, to).into())
        }
    };

    for (from, to) in &edges {
        let s = source(from, to)?;
        let t = target(from, to)?;
        let out = match s {
            Some(i) => &mut outs[i],
            None => &mut start,
        };
        if !out.fixed.contains(&t) {
            out.fixed.push(t);
        }
    }
    for b in branches {
        if b.targets.is_empty() {
            return Err(GraphError::EmptyConditionalTargets { from: b.from }.into());
        }
        let s = source(&b.from, &b.targets[0])?;
        let targets = b
            .targets
            .iter()
            .map(|t| Ok((t.clone(), target(&b.from, t)?)))
            .collect::<Result<Vec<_>>>()?;
        let out = match s {
            Some(i) => &mut outs[i],
            None => &mut start,
        };
        out.branches.push(Branch {
            router: b.router,
            targets,
        });
    }
    for (from, targets) in &destinations {
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
            let s = source(from, to)?;
            let t = target(from, to)?;
            match s {
                Some(i) => outs[i].destinations.push(t),
                None => start.destinations.push(t),
            }
        }
    }

    if start.fixed.is_empty() && start.branches.is_empty() && start.destinations.is_empty() {
        return Err(GraphError::NoEntryPoint.into());
    }

    let succ = |e: &Edges<S>| -> Vec<Target> {
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
    };
    // Reachable from START.
    let mut seen = vec![false; nodes.len()];
    let mut queue: VecDeque<Target> = succ(&start).into();
    while let Some(t) = queue.pop_front() {
        if let Target::Node(i) = t
            && !std::mem::replace(&mut seen[i], true)
        {
            queue.extend(succ(&outs[i]));
        }
    }
    if let Some(i) = seen.iter().position(|s| !s) {
        return Err(GraphError::Unreachable {
            node: nodes[i].0.clone(),
        }
        .into());
    }
    // Reaches END: fixed point over successor lists.
    let succs: Vec<Vec<Target>> = outs.iter().map(succ).collect();
    let mut ends = vec![false; nodes.len()];
    loop {
        let mut changed = false;
        for i in 0..nodes.len() {
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
    if let Some(i) = ends.iter().position(|e| !e) {
        return Err(GraphError::NoPathToEnd {
            node: nodes[i].0.clone(),
        }
        .into());
    }

    let flags = |option: &'static str, names: &[String]| -> Result<Vec<bool>> {
        let mut v = vec![false; nodes.len()];
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
    };
    let interrupt_before = flags("interrupt_before", &options.interrupt_before)?;
    let interrupt_after = flags("interrupt_after", &options.interrupt_after)?;

    let nodes = nodes
        .into_iter()
        .zip(outs)
        .map(|((name, node), out)| NodeSpec {
            trigger: trigger_channel(&name),
            name,
            node,
            out,
        })
        .collect();
    Ok(Spec {
        name,
        nodes,
        index,
        start,
        interrupt_before,
        interrupt_after,
    })
}
