//! The conformance suite on a store whose writes are slow (as a loaded
//! server's are): its TTL checks decide at a slower scale instead of
//! failing, and a store that really expires items early still fails them.

use std::sync::Arc;
use std::time::Duration;

use weaver::store::{InMemoryStore, Op, OpResult, Store, StoreConfig};
use weaver_tests::store_conformance::{run_store_config_conformance, run_store_conformance};

/// An in-memory store that answers every writing batch `delay` late (after
/// writing, so an item's TTL runs while its writer waits), and puts items
/// with their TTL divided by `shrink`.
#[derive(Debug)]
struct SlowWrites {
    inner: InMemoryStore,
    delay: Duration,
    shrink: u32,
}

#[async_trait::async_trait]
impl Store for SlowWrites {
    async fn batch(&self, mut ops: Vec<Op>) -> weaver::Result<Vec<OpResult>> {
        for op in &mut ops {
            if let Op::Put { options, .. } = op {
                options.ttl = options.ttl.map(|t| t / self.shrink);
            }
        }
        let writes = ops.iter().any(|op| matches!(op, Op::Put { .. }));
        let out = self.inner.batch(ops).await;
        if writes {
            tokio::time::sleep(self.delay).await;
        }
        out
    }

    async fn sweep(&self) -> weaver::Result<u64> {
        self.inner.sweep().await
    }
}

fn slow(config: StoreConfig) -> Arc<dyn Store> {
    Arc::new(SlowWrites {
        inner: InMemoryStore::with_config(config),
        delay: Duration::from_millis(80),
        shrink: 1,
    })
}

#[tokio::test]
async fn ttl_checks_decide_on_a_store_with_slow_writes() {
    run_store_conformance(|| async { slow(StoreConfig::new()) }).await;
    run_store_config_conformance(|c| async move { slow(c) }).await;
}

/// Items that expire ten times too early fail the checks, however slowly
/// they run.
#[tokio::test]
#[should_panic(expected = "the item expired before its TTL")]
async fn a_store_expiring_items_early_fails_the_ttl_checks() {
    let early = || async {
        Arc::new(SlowWrites {
            inner: InMemoryStore::new(),
            delay: Duration::ZERO,
            shrink: 10,
        }) as Arc<dyn Store>
    };
    run_store_conformance(early).await;
}
