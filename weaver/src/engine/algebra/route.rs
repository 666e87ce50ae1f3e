//! Where a task leads: its static edges, its routers (node names and
//! sends) and its `goto`s, each checked against what the graph declares.

use super::tasks::TaskNode;
use crate::engine::node::Command;
use crate::engine::send::{Route, StoredSend};
use crate::engine::spec::{Branch, END, Spec, Target};
use crate::error::{Error, Result};
use crate::panics::caught;
use crate::state::GraphState;

/// Where a task leads: the nodes it triggers and the sends it makes.
#[derive(Debug, Default)]
pub(crate) struct Routed {
    /// Static edges, routers' names and gotos, each once.
    pub targets: Vec<Target>,
    /// The routers' sends, in the order made.
    pub sends: Vec<StoredSend>,
}

/// Where the task of `node` leads once it returned `cmd`: static edges,
/// routers (given the state with the task's own update applied) and
/// `goto`. A router that panics, or a reducer applying the update for it,
/// is [`Error::NodeFailed`] of the task; a router's choice outside its
/// declared targets is [`Error::InvalidRoute`], a `goto` outside the
/// node's declared destinations [`Error::InvalidGoto`].
pub(crate) fn route<S: GraphState>(
    spec: &Spec<S>,
    state: &S,
    node: TaskNode,
    cmd: &Command<S::Update>,
) -> Result<Routed> {
    let failed = |source| Error::NodeFailed {
        node: spec.name_of(node).to_owned(),
        source,
    };
    let edges = spec.edges_of(node);
    let mut routed = Routed {
        targets: edges.fixed.clone(),
        sends: Vec::new(),
    };
    if !edges.branches.is_empty() {
        let routes = caught("a router or reducer", || {
            let mut view = state.clone();
            view.apply(vec![cmd.update.clone()])?;
            Ok::<_, Error>(edges.branches.iter().map(|b| (b.router)(&view)).collect())
        });
        let routes: Vec<Route> = routes
            .map_err(|msg| failed(msg.into()))?
            .map_err(|e| failed(e.into()))?;
        for (b, r) in edges.branches.iter().zip(routes) {
            chosen(spec, node, b, r, &mut routed)?;
        }
    }
    for g in &cmd.goto {
        let t = spec
            .resolve(g)
            .ok_or_else(|| failed(format!("goto names unknown node `{g}`").into()))?;
        // A node run by sends has no payload to run with from a goto (and
        // no declared destinations of the jumping node may have caught it).
        if let Target::Node(i) = t
            && spec.nodes[i].node.takes_payload()
        {
            return Err(failed(
                format!(
                    "goto names `{g}`, a node run by sends: route a `Send` with its payload to it"
                )
                .into(),
            ));
        }
        if !edges.destinations.is_empty() && !edges.destinations.contains(&t) {
            return Err(Error::InvalidGoto {
                node: spec.name_of(node).to_owned(),
                target: g.clone(),
                declared: edges
                    .destinations
                    .iter()
                    .map(|d| target_name(spec, *d))
                    .collect(),
            });
        }
        routed.targets.push(t);
    }
    let mut unique = Vec::with_capacity(routed.targets.len());
    for t in routed.targets.drain(..) {
        if !unique.contains(&t) {
            unique.push(t);
        }
    }
    routed.targets = unique;
    Ok(routed)
}

fn target_name<S: GraphState>(spec: &Spec<S>, t: Target) -> String {
    match t {
        Target::End => END.to_owned(),
        Target::Node(i) => spec.nodes[i].name.clone(),
    }
}

/// Checks what router `b` (of `node`'s conditional edge) returned against
/// its declared targets and adds it to `routed`.
fn chosen<S: GraphState>(
    spec: &Spec<S>,
    node: TaskNode,
    b: &Branch<S>,
    route: Route,
    routed: &mut Routed,
) -> Result<()> {
    let refused = |target: &str, reason: String| Error::InvalidRoute {
        router: b.name.clone(),
        from: spec.name_of(node).to_owned(),
        target: target.to_owned(),
        reason,
    };
    let declared = || {
        let names: Vec<&String> = b.targets.iter().map(|(n, _)| n).collect();
        format!("its declared targets are {names:?}")
    };
    if let Some(reason) = route.unencodable {
        return Err(Error::encode(
            format!("a send of router `{}`", b.name),
            reason,
        ));
    }
    let find = |name: &str| b.targets.iter().find(|(n, _)| n == name).map(|(_, t)| *t);
    for name in &route.names {
        let t = find(name)
            .ok_or_else(|| refused(name, format!("not a declared target; {}", declared())))?;
        if let Target::Node(i) = t
            && spec.nodes[i].node.takes_payload()
        {
            return Err(refused(
                name,
                "the node is run by sends: return a `Send` with its payload".into(),
            ));
        }
        routed.targets.push(t);
    }
    for send in route.sends {
        let t = find(&send.node).ok_or_else(|| {
            refused(
                &send.node,
                format!(
                    "a send to a node that is not a declared target; {}",
                    declared()
                ),
            )
        })?;
        match t {
            Target::Node(i) if spec.nodes[i].node.takes_payload() => routed.sends.push(send),
            _ => {
                return Err(refused(
                    &send.node,
                    "a send goes to a node added with `add_send_node` (it takes the payload), not one that takes the state".into(),
                ));
            }
        }
    }
    Ok(())
}
