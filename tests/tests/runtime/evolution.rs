//! State and graph evolution on the in-memory saver: threads written by
//! the first release of a state, read by later releases (the shared suite
//! in `weaver_tests::evolution`).

use std::sync::Arc;

use weaver::{InMemorySaver, Saver};
use weaver_tests::evolution;

fn memory() -> Arc<dyn Saver> {
    Arc::new(InMemorySaver::new())
}

#[tokio::test]
async fn additive_changes_read_old_threads_in_memory() {
    evolution::additive_changes_read_old_threads(memory(), "t").await;
}

#[tokio::test]
async fn upcasters_rename_a_field_in_memory() {
    evolution::upcasters_rename_a_field(memory(), "t").await;
}

#[tokio::test]
async fn unreadable_changes_are_typed_errors_in_memory() {
    evolution::unreadable_changes_are_typed_errors(memory(), "t").await;
}

#[tokio::test]
async fn pending_writes_are_upcast_in_memory() {
    evolution::pending_writes_are_upcast(memory(), "t").await;
}

#[tokio::test]
async fn forks_read_old_checkpoints_in_memory() {
    evolution::forks_read_old_checkpoints(memory(), "t").await;
}

#[tokio::test]
async fn renamed_nodes_map_to_new_names_in_memory() {
    evolution::renamed_nodes_map_to_new_names(memory(), "t").await;
}
