//! Cross-crate test suites: the saver and store conformance suites and shared fixtures.

pub mod conformance;
pub mod states;
pub mod store_conformance;

/// The id of the pending task `node` at the thread's latest checkpoint.
pub async fn task_id_of<S: weaver::GraphState>(
    graph: &weaver::CompiledGraph<S>,
    config: &weaver::RunConfig,
    node: &str,
) -> String {
    let snapshot = graph.get_state(config).await.expect("snapshot");
    snapshot
        .tasks
        .iter()
        .find(|t| t.name == node)
        .map(|t| t.id.clone())
        .unwrap_or_else(|| panic!("no pending task `{node}`"))
}
