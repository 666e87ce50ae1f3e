//! The resolved graph the engine runs: node indices, edges and branches
//! (built and validated by the `graph` builder's `compile`).

use std::collections::HashMap;
use std::sync::Arc;

use super::node::Node;
use super::node_cache::NodeCache;
use super::policy::NodePolicy;
use super::send::PayloadNode;
use crate::state::GraphState;

/// The virtual entry node: edges from `START` pick the first nodes.
pub const START: &str = "__start__";
/// The virtual exit node: an edge to `END` finishes a branch.
pub const END: &str = "__end__";

pub(crate) type Router<S> = Arc<dyn Fn(&S) -> super::send::Route + Send + Sync>;

/// A task of a step. The derived order is the task order of a step, the
/// order its writes merge in: START's, then the triggered nodes by name
/// (the spec sorts nodes by name), then the [`Send`](crate::Send)s in the
/// order they were sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum TaskNode {
    /// The START pseudo-task: it applies the input.
    Start,
    /// The node at this index, triggered by its channel.
    Pull(usize),
    /// The `index`-th send of the checkpoint, to the node at `node`.
    Push {
        /// Its place among the checkpoint's sends.
        index: usize,
        /// The node it runs.
        node: usize,
    },
}

impl TaskNode {
    /// The node the task runs (`None` for START's).
    pub fn node(self) -> Option<usize> {
        match self {
            TaskNode::Start => None,
            TaskNode::Pull(i) | TaskNode::Push { node: i, .. } => Some(i),
        }
    }
}

/// Where an edge leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    Node(usize),
    End,
}

pub(crate) struct Branch<S> {
    /// The router's name, for errors.
    pub name: String,
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
    pub node: NodeBody<S>,
    pub out: Edges<S>,
    /// Its retry, timeout and cache policies (the graph's defaults filled in).
    pub policy: NodePolicy<S>,
    /// The results its cache policy keeps.
    pub cache: NodeCache<S>,
}

/// What a node runs on: the state (triggered by edges), or the payload of
/// a [`Send`](crate::Send) (run by sends only).
pub(crate) enum NodeBody<S: GraphState> {
    State(Box<dyn Node<S>>),
    Payload(Box<dyn PayloadNode<S>>),
}

impl<S: GraphState> NodeBody<S> {
    /// The shape of the subgraph the node runs, if it is a compiled graph.
    pub fn outline(&self, depth: usize) -> Option<super::GraphOutline> {
        match self {
            NodeBody::State(n) => n.outline(depth),
            NodeBody::Payload(_) => None,
        }
    }

    /// Whether the node takes a send's payload instead of the state.
    pub fn takes_payload(&self) -> bool {
        matches!(self, NodeBody::Payload(_))
    }

    /// Runs the node on `state`, or on `payload` when it takes a send's.
    pub fn run<'a>(
        &'a self,
        state: &'a S,
        payload: Option<&'a serde_json::Value>,
        runtime: &'a super::runtime::Runtime,
    ) -> super::node::NodeFuture<'a, S::Update> {
        match (self, payload) {
            (NodeBody::State(n), _) => n.run(state, runtime),
            (NodeBody::Payload(n), Some(payload)) => n.run(payload, runtime),
            (NodeBody::Payload(_), None) => Box::pin(std::future::ready(Err(
                super::node::NodeError::msg("a node run by sends ran with no payload"),
            ))),
        }
    }
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
    /// Old node name → the node's name now, for stored checkpoints.
    pub renames: HashMap<String, String>,
}

/// Trigger channel of the START pseudo-task (it applies the input).
pub(crate) const START_TRIGGER: &str = "branch:to:__start__";
pub(crate) use crate::checkpoint::INPUT_CHANNEL;

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

    pub fn edges_of(&self, node: TaskNode) -> &Edges<S> {
        match node.node() {
            Some(i) => &self.nodes[i].out,
            None => &self.start,
        }
    }

    pub fn name_of(&self, node: TaskNode) -> &str {
        match node.node() {
            Some(i) => &self.nodes[i].name,
            None => START,
        }
    }
}
