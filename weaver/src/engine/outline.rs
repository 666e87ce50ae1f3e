//! [`GraphOutline`]: the shape of a compiled graph, which
//! [`CompiledGraph::draw_mermaid_xray`] draws with its subgraphs nested.

use super::compiled::CompiledGraph;
use super::spec::{Edges, Target};
use crate::state::GraphState;

/// The shape of a compiled graph as drawn: its nodes (a subgraph node with
/// its own graph's shape, when drawn nested) and edges. A subgraph node
/// hands it to the drawing of its parent through
/// [`Node::outline`](super::Node::outline).
#[derive(Debug, Clone)]
pub struct GraphOutline {
    pub(crate) name: String,
    pub(crate) nodes: Vec<OutlineNode>,
    /// The edges of START.
    pub(crate) start: Vec<(Target, bool)>,
}

#[derive(Debug, Clone)]
pub(crate) struct OutlineNode {
    pub(crate) name: String,
    /// `(target, conditional)` for each edge out of the node.
    pub(crate) out: Vec<(Target, bool)>,
    pub(crate) subgraph: Option<GraphOutline>,
}

fn edges_of<S>(e: &Edges<S>) -> Vec<(Target, bool)> {
    let mut out: Vec<(Target, bool)> = e.fixed.iter().map(|t| (*t, false)).collect();
    for b in &e.branches {
        out.extend(b.targets.iter().map(|(_, t)| (*t, true)));
    }
    out.extend(e.destinations.iter().map(|t| (*t, true)));
    out
}

impl<S: GraphState> CompiledGraph<S> {
    /// The graph's shape, its subgraph nodes drawn `depth` levels deep.
    pub(crate) fn outline(&self, depth: usize) -> GraphOutline {
        let spec = &self.inner.spec;
        let nodes = spec
            .nodes
            .iter()
            .map(|n| OutlineNode {
                name: n.name.clone(),
                out: edges_of(&n.out),
                subgraph: match depth {
                    0 => None,
                    d => n.node.outline(d - 1),
                },
            })
            .collect();
        GraphOutline {
            name: spec.name.clone(),
            nodes,
            start: edges_of(&spec.start),
        }
    }
}
