//! The resolved graph the engine runs: node indices, edges and branches
//! (built and validated by the `graph` builder's `compile`).

use std::collections::HashMap;
use std::sync::Arc;

use super::node::Node;
use super::node_cache::NodeCache;
use super::policy::NodePolicy;
use crate::state::GraphState;

/// The virtual entry node: edges from `START` pick the first nodes.
pub const START: &str = "__start__";
/// The virtual exit node: an edge to `END` finishes a branch.
pub const END: &str = "__end__";

pub(crate) type Router<S> = Arc<dyn Fn(&S) -> Vec<String> + Send + Sync>;

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
    /// Its retry, timeout and cache policies (the graph's defaults filled in).
    pub policy: NodePolicy<S>,
    /// The results its cache policy keeps.
    pub cache: NodeCache<S>,
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
