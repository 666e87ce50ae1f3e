//! Stored checkpoints upgraded in place on the in-memory saver (the shared
//! suite in `weaver_tests::upgrades`), and a saver that cannot rewrite.

use std::sync::Arc;

use weaver::checkpoint::{AdapterSaver, MemoryAdapter};
use weaver::evolution::{UpgradeOptions, upgrade_stored};
use weaver::{InMemorySaver, Saver};
use weaver_tests::evolution::TicketV3;
use weaver_tests::upgrades;

fn memory() -> Arc<dyn Saver> {
    Arc::new(InMemorySaver::new())
}

#[tokio::test]
async fn an_old_thread_is_upgraded_in_place_in_memory() {
    upgrades::an_old_thread_is_upgraded_in_place(memory(), "t").await;
}

#[tokio::test]
async fn pending_writes_are_upgraded_in_memory() {
    upgrades::pending_writes_are_upgraded(memory(), "t").await;
}

#[tokio::test]
async fn a_failed_batch_writes_nothing_in_memory() {
    upgrades::a_failed_batch_writes_nothing(memory(), "t").await;
}

#[tokio::test]
async fn an_interrupted_upgrade_resumes_from_its_cursor_in_memory() {
    upgrades::an_interrupted_upgrade_resumes_from_its_cursor(memory(), "t").await;
}

#[tokio::test]
async fn subgraph_namespaces_are_upgraded_only_when_named_in_memory() {
    upgrades::subgraph_namespaces_are_upgraded_only_when_named(memory(), "t").await;
}

#[tokio::test]
async fn scans_find_writes_of_a_newer_release_in_memory() {
    upgrades::scans_find_writes_of_a_newer_release(memory(), "t").await;
}

#[tokio::test]
async fn scans_find_bad_writes_and_subgraph_checkpoints_in_memory() {
    upgrades::scans_find_bad_writes_and_subgraph_checkpoints(memory(), "t").await;
}

#[tokio::test]
async fn a_saver_without_rewrites_is_refused() {
    let saver = AdapterSaver::new(MemoryAdapter::new());
    assert!(saver.rewrites().is_none());
    match upgrade_stored::<TicketV3>(&saver, &UpgradeOptions::new(), &mut |_| {}).await {
        Err(weaver::Error::InvalidArgument { reason }) => {
            assert!(reason.contains("Saver::rewrites"), "{reason}")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[tokio::test]
async fn scans_check_lengths_in_memory() {
    upgrades::scans_check_lengths(memory(), "t").await;
}

#[tokio::test]
async fn a_write_stored_during_an_upgrade_is_kept_in_memory() {
    upgrades::a_write_stored_during_an_upgrade_is_kept(memory(), "t").await;
}

#[tokio::test]
async fn a_thread_deleted_during_an_upgrade_skips_no_other_in_memory() {
    upgrades::a_thread_deleted_during_an_upgrade_skips_no_other(memory()).await;
}
