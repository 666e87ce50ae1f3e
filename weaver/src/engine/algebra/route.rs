//! Where a task leads: its static edges, its routers and its `goto`s.

use super::tasks::TaskNode;
use crate::engine::node::Command;
use crate::engine::panics::caught;
use crate::engine::spec::{Spec, Target};
use crate::error::BoxError;
use crate::state::GraphState;

/// The targets a task triggers: static edges, routers (given the state with
/// the task's own update applied) and `goto`. A router or reducer that
/// panics is an error of the task.
pub(crate) fn route<S: GraphState>(
    spec: &Spec<S>,
    state: &S,
    node: TaskNode,
    cmd: &Command<S::Update>,
) -> std::result::Result<Vec<Target>, BoxError> {
    caught("a router or reducer", || {
        route_unguarded(spec, state, node, cmd)
    })?
}

fn route_unguarded<S: GraphState>(
    spec: &Spec<S>,
    state: &S,
    node: TaskNode,
    cmd: &Command<S::Update>,
) -> std::result::Result<Vec<Target>, BoxError> {
    let edges = spec.edges_of(node);
    let mut targets: Vec<Target> = edges.fixed.clone();
    if !edges.branches.is_empty() {
        let mut view = state.clone();
        view.apply(vec![cmd.update.clone()])
            .map_err(|e| -> BoxError { Box::new(e) })?;
        for b in &edges.branches {
            for chosen in (b.router)(&view) {
                let t = b
                    .targets
                    .iter()
                    .find(|(n, _)| *n == chosen)
                    .map(|(_, t)| *t)
                    .ok_or_else(|| {
                        format!(
                            "router chose `{chosen}`, which is not among its declared targets {:?}",
                            b.targets.iter().map(|(n, _)| n).collect::<Vec<_>>()
                        )
                    })?;
                targets.push(t);
            }
        }
    }
    for g in &cmd.goto {
        targets.push(
            spec.resolve(g)
                .ok_or_else(|| format!("goto names unknown node `{g}`"))?,
        );
    }
    let mut unique = Vec::with_capacity(targets.len());
    for t in targets {
        if !unique.contains(&t) {
            unique.push(t);
        }
    }
    Ok(unique)
}
