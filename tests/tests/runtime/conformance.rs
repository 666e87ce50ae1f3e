//! The saver conformance suite on the in-memory saver, and the adapter
//! suite on the in-memory snapshot adapter (with the saver suite over its
//! `AdapterSaver`).

use weaver::InMemorySaver;
use weaver::checkpoint::MemoryAdapter;

weaver_conformance::saver_suite!(in_memory_saver_conforms, async { InMemorySaver::new() });

weaver_conformance::adapter_suite!(memory_adapter_and_its_adapter_saver_conform, async {
    MemoryAdapter::new()
});

mod adapter_races {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use async_trait::async_trait;
    use serde_json::json;
    use tokio::sync::{Notify, Semaphore};
    use weaver::checkpoint::{
        AdapterSaver, MemoryAdapter, NewCheckpoint, Snapshot, SnapshotAdapter,
    };
    use weaver::{Result, Saver};
    use weaver_conformance::saver::new_on;

    /// A gate on one kind of save: armed, the next such save says it came
    /// and waits for a permit.
    #[derive(Debug)]
    struct Gate {
        armed: AtomicBool,
        entered: Notify,
        open: Semaphore,
    }

    impl Default for Gate {
        fn default() -> Self {
            Gate {
                armed: AtomicBool::new(false),
                entered: Notify::new(),
                open: Semaphore::new(0),
            }
        }
    }

    impl Gate {
        async fn pass(&self) {
            if self.armed.swap(false, Ordering::SeqCst) {
                self.entered.notify_one();
                let _ = self.open.acquire().await.unwrap();
            }
        }
    }

    /// The in-memory adapter, with a gate on saves of the thread catalog
    /// that remove a thread, and one on saves of a thread that hold data.
    #[derive(Debug, Clone, Default)]
    struct Gated {
        inner: MemoryAdapter,
        catalog: Arc<Gate>,
        thread: Arc<Gate>,
        pruned: Arc<Gate>,
        /// Once set, the next prune of a thread's flow fails.
        fail_prune: Arc<AtomicBool>,
    }

    #[async_trait]
    impl SnapshotAdapter for Gated {
        async fn save_snapshot(&self, snapshot: Snapshot) -> Result<()> {
            if snapshot.flow_id == "weaver:threads" {
                self.catalog.pass().await;
            } else if snapshot.flow_id.starts_with("weaver:thread:") && !snapshot.data.is_null() {
                self.thread.pass().await;
            }
            self.inner.save_snapshot(snapshot).await
        }
        async fn load_snapshot(
            &self,
            flow_id: &str,
            version: Option<u64>,
        ) -> Result<Option<Snapshot>> {
            self.inner.load_snapshot(flow_id, version).await
        }
        async fn load_history(&self, flow_id: &str, limit: Option<usize>) -> Result<Vec<Snapshot>> {
            self.inner.load_history(flow_id, limit).await
        }
        async fn delete_flow(&self, flow_id: &str) -> Result<()> {
            self.inner.delete_flow(flow_id).await
        }
        async fn prune_history(&self, flow_id: &str, keep_last: usize) -> Result<u64> {
            if flow_id.starts_with("weaver:thread:") {
                self.pruned.pass().await;
                if self.fail_prune.swap(false, Ordering::SeqCst) {
                    return Err(weaver::Error::storage(
                        "prune",
                        "the adapter is down (test)",
                    ));
                }
            }
            self.inner.prune_history(flow_id, keep_last).await
        }
        async fn snapshot_count(&self, flow_id: &str) -> Result<u64> {
            self.inner.snapshot_count(flow_id).await
        }
        async fn flow_exists(&self, flow_id: &str) -> Result<bool> {
            self.inner.flow_exists(flow_id).await
        }
    }

    fn root() -> NewCheckpoint {
        new_on("t", None, Some(1), -1, json!(1))
    }

    /// A save that is stored is reported as done even when the housekeeping
    /// after it (pruning older versions) fails: a caller told it failed
    /// would apply it again.
    #[tokio::test]
    async fn a_stored_save_is_done_when_its_housekeeping_fails() {
        let adapter = Gated::default();
        let saver = AdapterSaver::new(adapter.clone());
        let first = saver.put(root()).await.unwrap();
        adapter.fail_prune.store(true, Ordering::SeqCst);
        let second = new_on("t", first.checkpoint_id.as_deref(), Some(2), 0, json!(2));
        let stored = saver.put(second).await;
        assert!(stored.is_ok(), "{stored:?}");
        assert!(
            !adapter.fail_prune.load(Ordering::SeqCst),
            "the prune was tried"
        );
        let latest = weaver::checkpoint::CheckpointRef::latest("t");
        let head = saver.get_tuple(&latest).await.unwrap().unwrap();
        assert_eq!(head.commit_order, 2);
    }

    /// A thread written again while its delete takes it off the catalog
    /// stays listed: the write that lands after the delete's last look at
    /// the thread puts it back itself.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_thread_written_while_it_is_deleted_stays_listed() {
        let adapter = Gated::default();
        let saver = Arc::new(AdapterSaver::new(adapter.clone()));
        saver.put(root()).await.unwrap();
        // The delete stops before it takes the thread off the catalog.
        adapter.catalog.armed.store(true, Ordering::SeqCst);
        let catalog_entered = adapter.catalog.entered.notified();
        let deleting = tokio::spawn({
            let saver = saver.clone();
            async move { saver.delete_thread("t").await }
        });
        catalog_entered.await;
        // A new first checkpoint: it reads the emptied thread, finds it
        // listed, and stops before its save.
        adapter.thread.armed.store(true, Ordering::SeqCst);
        let thread_entered = adapter.thread.entered.notified();
        let writing = tokio::spawn({
            let saver = saver.clone();
            async move { saver.put(root()).await }
        });
        thread_entered.await;
        // The delete takes the thread off and finds it still empty.
        adapter.catalog.open.add_permits(1);
        deleting.await.unwrap().unwrap();
        // Then the write lands.
        adapter.thread.open.add_permits(1);
        writing.await.unwrap().unwrap();
        let listed: Vec<String> = saver
            .list_threads(None, 0)
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.thread_id)
            .collect();
        assert_eq!(
            listed,
            ["t"],
            "the thread holds a checkpoint, so it is listed"
        );
    }

    /// A thread deleted right after its first write was saved, before that
    /// write listed it again, is not listed: the write finds it emptied and
    /// takes it off again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_thread_deleted_right_after_its_first_write_is_not_listed() {
        let adapter = Gated::default();
        let saver = Arc::new(AdapterSaver::new(adapter.clone()));
        // The write stops between its save and listing the thread again.
        adapter.pruned.armed.store(true, Ordering::SeqCst);
        let pruned_entered = adapter.pruned.entered.notified();
        let writing = tokio::spawn({
            let saver = saver.clone();
            async move { saver.put(root()).await }
        });
        pruned_entered.await;
        saver.delete_thread("t").await.unwrap();
        adapter.pruned.open.add_permits(1);
        writing.await.unwrap().unwrap();
        // The catalog (the flow listing the threads) no longer names it.
        let catalog = adapter
            .inner
            .load_snapshot("weaver:threads", None)
            .await
            .unwrap()
            .map(|s| s.data.to_string())
            .unwrap_or_default();
        assert!(
            !catalog.contains("\"t\""),
            "the deleted thread is off the catalog: {catalog}"
        );
    }

    /// A stored adapter version with no version after it (`u64::MAX`, in
    /// a thread's snapshot or the thread catalog) is bad data: a typed
    /// error, not an overflow.
    #[tokio::test]
    async fn a_last_possible_version_is_a_typed_error() {
        for flow_id in ["weaver:thread:t", "weaver:threads"] {
            let adapter = MemoryAdapter::new();
            let data = if flow_id == "weaver:threads" {
                json!([])
            } else {
                json!(null)
            };
            adapter
                .save_snapshot(Snapshot::new(flow_id, u64::MAX, data))
                .await
                .unwrap();
            let saver = AdapterSaver::new(adapter);
            let put = saver.put(new_on("t", None, None, 0, json!(1))).await;
            assert!(
                matches!(put, Err(weaver::Error::Decode { .. })),
                "{flow_id}: {put:?}"
            );
        }
    }

    /// Marks every checkpoint record in `v` as written in record format 99,
    /// with a field this build does not know.
    fn from_the_future(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(serde_json::Value::Object(c)) = m.get_mut("checkpoint") {
                    c.insert("v".into(), json!(99));
                    c.insert("future".into(), json!("kept"));
                }
                m.values_mut().for_each(from_the_future);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(from_the_future),
            _ => {}
        }
    }

    /// A thread whose snapshot a newer release wrote (a record format this
    /// build does not read) is refused with a typed error naming it, on
    /// reads and on writes, and a write leaves the snapshot as it was
    /// (nothing of the newer record dropped); deleting the thread works.
    #[tokio::test]
    async fn a_newer_record_format_is_refused_and_never_written_back() {
        let adapter = MemoryAdapter::new();
        let saver = AdapterSaver::new(adapter.clone());
        let at = saver
            .put(new_on("t", None, None, 0, json!(1)))
            .await
            .unwrap();
        let mut snap = adapter
            .load_snapshot("weaver:thread:t", None)
            .await
            .unwrap()
            .unwrap();
        from_the_future(&mut snap.data);
        assert!(
            snap.data.to_string().contains("\"future\""),
            "{}",
            snap.data
        );
        snap.version += 1;
        adapter.save_snapshot(snap.clone()).await.unwrap();
        let newer = |r: &weaver::Result<_>| match r {
            Err(weaver::Error::Decode { what, reason }) => {
                what.contains(at.checkpoint_id.as_deref().unwrap()) && reason.contains("99")
            }
            _ => false,
        };
        let read = saver.get_stored(&at).await.map(|_| ());
        assert!(newer(&read), "{read:?}");
        let listed = saver
            .list_stored(&weaver::checkpoint::ListFilter::thread("t"))
            .await
            .map(|_| ());
        assert!(newer(&listed), "{listed:?}");
        let wrote = saver
            .put_writes(
                &at,
                vec![weaver::checkpoint::PendingWrite {
                    task_id: "task".into(),
                    task_path: "~a".into(),
                    idx: 0,
                    channel: "x".into(),
                    value: json!(1),
                }],
            )
            .await;
        assert!(newer(&wrote), "{wrote:?}");
        let now = adapter
            .load_snapshot("weaver:thread:t", None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(now, snap, "the newer snapshot is left as it was");
        saver.delete_thread("t").await.unwrap();
        assert!(saver.get_stored(&at).await.unwrap().is_none());
    }
}
