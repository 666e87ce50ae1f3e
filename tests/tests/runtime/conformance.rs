//! The saver conformance suite on the in-memory saver.

use std::sync::Arc;

use weaver::{InMemorySaver, Saver};
use weaver_tests::conformance::run_saver_conformance;

#[tokio::test]
async fn in_memory_saver_conforms() {
    run_saver_conformance(|| async { Arc::new(InMemorySaver::new()) as Arc<dyn Saver> }).await;
}

#[tokio::test]
async fn memory_adapter_and_its_adapter_saver_conform() {
    weaver_tests::adapter_conformance::run_adapter_conformance(|| async {
        weaver::checkpoint::MemoryAdapter::new()
    })
    .await;
}
