//! The adapter conformance suite: the checks every [`SnapshotAdapter`]
//! must pass (its seven operations, the two rules, bad input), and the
//! saver suite run on an [`AdapterSaver`] over it.
//!
//! ```no_run
//! # use weaver::checkpoint::MemoryAdapter;
//! # use weaver_conformance::adapter::run_adapter_conformance;
//! # async fn check() {
//! run_adapter_conformance(|| async { MemoryAdapter::new() }).await;
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;

use serde_json::{Value, json};
use weaver::Error;
use weaver::checkpoint::{
    AdapterSaver, CheckpointRef, ListFilter, PendingWrite, Saver, Snapshot, SnapshotAdapter,
};

use crate::saver::{chain, new_on, record, run_saver_conformance};

/// Runs every adapter check, each on a fresh adapter from `make`, then the
/// saver conformance suite on an [`AdapterSaver`] over fresh adapters.
pub async fn run_adapter_conformance<A, F, Fut>(make: F)
where
    A: SnapshotAdapter + 'static,
    F: Fn() -> Fut,
    Fut: Future<Output = A>,
{
    run_snapshot_checks(&make).await;
    bad_stored_snapshots_are_decode_errors(make().await).await;
    racing_writers_through_the_saver_lose_nothing(make().await).await;
    deleted_and_pruned_checkpoints_leave_nothing_stored(make().await).await;
    racing_commits_of_one_order_have_one_winner(make().await).await;
    run_saver_conformance(|| async { Arc::new(AdapterSaver::new(make().await)) as Arc<dyn Saver> })
        .await;
}

/// Runs the checks of the seven operations and the two rules alone.
pub async fn run_snapshot_checks<A, F, Fut>(make: &F)
where
    A: SnapshotAdapter,
    F: Fn() -> Fut,
    Fut: Future<Output = A>,
{
    save_and_load_latest_or_by_version(&make().await).await;
    duplicate_versions_are_rejected(&make().await).await;
    history_is_newest_first_with_a_limit(&make().await).await;
    delete_removes_only_its_flow(&make().await).await;
    prune_keeps_the_newest(&make().await).await;
    count_and_exists(&make().await).await;
    returned_snapshots_are_copies(&make().await).await;
    concurrent_saves_of_one_version_have_one_winner(&make().await).await;
    bad_input_is_rejected(&make().await).await;
    flows_with_similar_ids_stay_apart(&make().await).await;
}

fn snap(flow: &str, version: u64, data: Value) -> Snapshot {
    Snapshot::new(flow, version, data)
}

async fn save_and_load_latest_or_by_version(a: &dyn SnapshotAdapter) {
    assert!(a.load_snapshot("f", None).await.unwrap().is_none());
    a.save_snapshot(snap("f", 1, json!({"n": 1})))
        .await
        .unwrap();
    a.save_snapshot(snap("f", 3, json!({"n": 3})))
        .await
        .unwrap();
    a.save_snapshot(snap("f", 2, json!({"n": 2})))
        .await
        .unwrap();
    let latest = a.load_snapshot("f", None).await.unwrap().unwrap();
    assert_eq!(
        latest,
        snap("f", 3, json!({"n": 3})),
        "latest is the highest version"
    );
    let two = a.load_snapshot("f", Some(2)).await.unwrap().unwrap();
    assert_eq!(two, snap("f", 2, json!({"n": 2})));
    assert!(a.load_snapshot("f", Some(4)).await.unwrap().is_none());
    assert!(a.load_snapshot("other", None).await.unwrap().is_none());
    let nested = json!({"s": "é\u{1F600}\"'", "a": [1, 2.5, null, true], "o": {"k": {}}});
    a.save_snapshot(snap("g", 1, nested.clone())).await.unwrap();
    assert_eq!(
        a.load_snapshot("g", Some(1)).await.unwrap().unwrap().data,
        nested
    );
}

async fn duplicate_versions_are_rejected(a: &dyn SnapshotAdapter) {
    a.save_snapshot(snap("f", 1, json!("first"))).await.unwrap();
    let again = a.save_snapshot(snap("f", 1, json!("second"))).await;
    assert!(
        matches!(&again, Err(Error::VersionConflict { thread_id, attempted: 1, .. }) if thread_id == "f"),
        "{again:?}"
    );
    let kept = a.load_snapshot("f", Some(1)).await.unwrap().unwrap();
    assert_eq!(kept.data, "first", "a rejected save changes nothing");
    assert_eq!(a.snapshot_count("f").await.unwrap(), 1);
    a.save_snapshot(snap("other", 1, json!("x"))).await.unwrap();
}

async fn history_is_newest_first_with_a_limit(a: &dyn SnapshotAdapter) {
    assert!(a.load_history("f", None).await.unwrap().is_empty());
    for v in 1..=5 {
        a.save_snapshot(snap("f", v, json!(v))).await.unwrap();
    }
    let all: Vec<u64> = a
        .load_history("f", None)
        .await
        .unwrap()
        .iter()
        .map(|s| s.version)
        .collect();
    assert_eq!(all, [5, 4, 3, 2, 1]);
    let two = a.load_history("f", Some(2)).await.unwrap();
    assert_eq!(two, [snap("f", 5, json!(5)), snap("f", 4, json!(4))]);
    assert!(a.load_history("f", Some(0)).await.unwrap().is_empty());
    assert_eq!(a.load_history("f", Some(99)).await.unwrap().len(), 5);
}

async fn delete_removes_only_its_flow(a: &dyn SnapshotAdapter) {
    a.save_snapshot(snap("f", 1, json!(1))).await.unwrap();
    a.save_snapshot(snap("f", 2, json!(2))).await.unwrap();
    a.save_snapshot(snap("g", 1, json!(1))).await.unwrap();
    a.delete_flow("f").await.unwrap();
    assert!(!a.flow_exists("f").await.unwrap());
    assert!(a.load_snapshot("f", None).await.unwrap().is_none());
    assert!(a.load_history("f", None).await.unwrap().is_empty());
    assert!(a.flow_exists("g").await.unwrap());
    a.delete_flow("never-written").await.unwrap();
    a.save_snapshot(snap("f", 1, json!("anew"))).await.unwrap();
    assert_eq!(
        a.load_snapshot("f", None).await.unwrap().unwrap().data,
        "anew"
    );
}

async fn prune_keeps_the_newest(a: &dyn SnapshotAdapter) {
    for v in 1..=5 {
        a.save_snapshot(snap("f", v, json!(v))).await.unwrap();
    }
    assert_eq!(a.prune_history("f", 2).await.unwrap(), 3);
    let left: Vec<u64> = a
        .load_history("f", None)
        .await
        .unwrap()
        .iter()
        .map(|s| s.version)
        .collect();
    assert_eq!(left, [5, 4]);
    assert!(a.load_snapshot("f", Some(1)).await.unwrap().is_none());
    assert_eq!(a.prune_history("f", 10).await.unwrap(), 0);
    let taken = a.save_snapshot(snap("f", 5, json!("again"))).await;
    assert!(
        matches!(taken, Err(Error::VersionConflict { .. })),
        "{taken:?}"
    );
    a.save_snapshot(snap("f", 6, json!(6))).await.unwrap();
    assert_eq!(a.prune_history("f", 0).await.unwrap(), 3, "0 deletes all");
    assert!(!a.flow_exists("f").await.unwrap());
    assert_eq!(a.prune_history("unknown", 1).await.unwrap(), 0);
}

async fn count_and_exists(a: &dyn SnapshotAdapter) {
    assert_eq!(a.snapshot_count("f").await.unwrap(), 0);
    assert!(!a.flow_exists("f").await.unwrap());
    a.save_snapshot(snap("f", 1, json!(null))).await.unwrap();
    a.save_snapshot(snap("f", 7, json!(null))).await.unwrap();
    assert_eq!(a.snapshot_count("f").await.unwrap(), 2);
    assert!(a.flow_exists("f").await.unwrap());
    assert_eq!(
        a.load_snapshot("f", None).await.unwrap().unwrap().data,
        Value::Null,
        "a null snapshot is still a snapshot"
    );
}

async fn returned_snapshots_are_copies(a: &dyn SnapshotAdapter) {
    let data = json!({"state": {"n": 1}, "tracker": {"node": "a"}});
    let mut saved = snap("f", 1, data.clone());
    a.save_snapshot(saved.clone()).await.unwrap();
    saved.data["state"]["n"] = json!(99);
    let mut latest = a.load_snapshot("f", None).await.unwrap().unwrap();
    assert_eq!(latest.data, data, "what was saved is a copy");
    latest.data["state"]["n"] = json!(2);
    latest.data["tracker"] = json!("moved");
    let mut by_version = a.load_snapshot("f", Some(1)).await.unwrap().unwrap();
    assert_eq!(by_version.data, data, "a loaded snapshot is a copy");
    by_version.data = json!(null);
    let mut history = a.load_history("f", None).await.unwrap();
    assert_eq!(history[0].data, data);
    history[0].data["state"] = json!([]);
    assert_eq!(a.load_history("f", None).await.unwrap()[0].data, data);
}

async fn concurrent_saves_of_one_version_have_one_winner(a: &dyn SnapshotAdapter) {
    let saves = (0..8).map(|i| a.save_snapshot(snap("race", 1, json!(i))));
    let results = futures_util::future::join_all(saves).await;
    let won: Vec<usize> = (0..8).filter(|i| results[*i].is_ok()).collect();
    assert_eq!(won.len(), 1, "{results:?}");
    for r in &results {
        if let Err(e) = r {
            assert!(matches!(e, Error::VersionConflict { .. }), "{e:?}");
        }
    }
    let stored = a.load_snapshot("race", None).await.unwrap().unwrap();
    assert_eq!(
        stored.data,
        json!(won[0]),
        "the winner's snapshot is the one stored"
    );
}

async fn bad_input_is_rejected(a: &dyn SnapshotAdapter) {
    let invalid = |r: Result<(), Error>| matches!(r, Err(Error::InvalidArgument { .. }));
    assert!(
        invalid(a.save_snapshot(snap("f", 0, json!(1))).await),
        "version 0"
    );
    assert!(
        invalid(a.save_snapshot(snap("", 1, json!(1))).await),
        "empty flow id"
    );
    assert!(
        invalid(a.save_snapshot(snap("a\0b", 1, json!(1))).await),
        "NUL"
    );
    let long = "x".repeat(2000);
    assert!(
        invalid(a.save_snapshot(snap(&long, 1, json!(1))).await),
        "long id"
    );
    for bad in ["", "a\0b", "line\nbreak"] {
        assert!(
            invalid(a.load_snapshot(bad, None).await.map(|_| ())),
            "{bad:?}"
        );
        assert!(
            invalid(a.load_history(bad, None).await.map(|_| ())),
            "{bad:?}"
        );
        assert!(invalid(a.delete_flow(bad).await), "{bad:?}");
        assert!(
            invalid(a.prune_history(bad, 1).await.map(|_| ())),
            "{bad:?}"
        );
        assert!(invalid(a.snapshot_count(bad).await.map(|_| ())), "{bad:?}");
        assert!(invalid(a.flow_exists(bad).await.map(|_| ())), "{bad:?}");
    }
    assert!(
        !a.flow_exists("f").await.unwrap(),
        "a rejected save writes nothing"
    );
}

async fn flows_with_similar_ids_stay_apart(a: &dyn SnapshotAdapter) {
    let ids = ["f", "f:1", "f*", "f?", "f:versions", "f[1]", "F", "f "];
    for (i, id) in ids.iter().enumerate() {
        a.save_snapshot(snap(id, 1, json!(i))).await.unwrap();
    }
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(a.snapshot_count(id).await.unwrap(), 1, "{id}");
        assert_eq!(
            a.load_snapshot(id, None).await.unwrap().unwrap().data,
            json!(i)
        );
    }
    a.delete_flow("f").await.unwrap();
    assert_eq!(a.prune_history("f*", 0).await.unwrap(), 1);
    for id in &ids[1..] {
        let left = a.flow_exists(id).await.unwrap();
        assert_eq!(left, *id != "f*", "{id}");
    }
}

async fn bad_stored_snapshots_are_decode_errors<A: SnapshotAdapter>(adapter: A) {
    let saver = AdapterSaver::new(adapter);
    chain(&saver, "good", 2).await;
    let a = saver.adapter();
    a.save_snapshot(snap("weaver:thread:bad", 1, json!("not a thread")))
        .await
        .unwrap();
    let read = saver.get_tuple(&CheckpointRef::latest("bad")).await;
    assert!(matches!(read, Err(Error::Decode { .. })), "{read:?}");
    let put = saver.put(new_on("bad", None, None, 0, json!(0))).await;
    assert!(matches!(put, Err(Error::Decode { .. })), "{put:?}");
    let twice = json!({"": [
        {"order": 1, "checkpoint": record(json!(1)), "metadata": {"source": "input", "step": 0},
         "parent_id": null, "writes": [], "stored_at": {"secs_since_epoch": 1, "nanos_since_epoch": 0}},
    ]});
    let mut repeated = twice.clone();
    let first = repeated[""][0].clone();
    repeated[""].as_array_mut().unwrap().push(first);
    a.save_snapshot(snap("weaver:thread:twice", 1, repeated))
        .await
        .unwrap();
    let read = saver.list(&ListFilter::thread("twice")).await;
    assert!(matches!(read, Err(Error::Decode { .. })), "{read:?}");
    a.save_snapshot(snap("weaver:thread:once", 1, twice))
        .await
        .unwrap();
    let once = saver
        .get_tuple(&CheckpointRef::latest("once"))
        .await
        .unwrap();
    assert_eq!(
        once.unwrap().checkpoint.channel_values["v"],
        1,
        "a well-formed snapshot reads"
    );
    let version = a
        .load_snapshot("weaver:threads", None)
        .await
        .unwrap()
        .unwrap()
        .version;
    a.save_snapshot(snap(
        "weaver:threads",
        version + 1,
        json!({"not": "a list"}),
    ))
    .await
    .unwrap();
    let listed = saver.list_threads(None, 0).await;
    assert!(matches!(listed, Err(Error::Decode { .. })), "{listed:?}");
    let good = saver
        .get_tuple(&CheckpointRef::latest("good"))
        .await
        .unwrap();
    assert!(good.is_some(), "other threads still read");
}

async fn racing_writers_through_the_saver_lose_nothing<A: SnapshotAdapter + 'static>(adapter: A) {
    let saver = Arc::new(AdapterSaver::new(adapter));
    let ids = chain(saver.as_ref(), "t", 1).await;
    let target = CheckpointRef::latest("t").at(ids[0].clone());
    let tasks = (0..8).map(|i| {
        let (saver, target) = (saver.clone(), target.clone());
        tokio::spawn(async move {
            let w = PendingWrite::for_task(&format!("task{i}"), "n", [("v".into(), json!(i))]);
            saver.put_writes(&target, w).await
        })
    });
    for r in futures_util::future::join_all(tasks).await {
        r.unwrap().unwrap();
    }
    let head = saver.get_tuple(&target).await.unwrap().unwrap();
    assert_eq!(head.pending_writes.len(), 8, "every racing write is stored");
}

async fn racing_commits_of_one_order_have_one_winner<A: SnapshotAdapter + 'static>(adapter: A) {
    let saver = Arc::new(AdapterSaver::new(adapter));
    let ids = chain(saver.as_ref(), "t", 1).await;
    let tasks = (0..6).map(|i| {
        let saver = saver.clone();
        let c = new_on("t", Some(&ids[0]), Some(2), 1, json!(i));
        tokio::spawn(async move { saver.put(c).await })
    });
    let results: Vec<_> = futures_util::future::join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );
    for r in results.iter().filter(|r| r.is_err()) {
        assert!(
            matches!(r, Err(Error::VersionConflict { attempted: 2, .. })),
            "{r:?}"
        );
    }
    let listed = saver.list(&ListFilter::thread("t")).await.unwrap();
    assert_eq!(listed.len(), 2);
}

async fn deleted_and_pruned_checkpoints_leave_nothing_stored<A: SnapshotAdapter>(adapter: A) {
    let saver = AdapterSaver::new(adapter);
    let ids = chain(&saver, "t", 4).await;
    chain(&saver, "u", 1).await;
    saver
        .prune(
            &["t".to_owned()],
            weaver::checkpoint::PruneStrategy::KeepLast(1),
        )
        .await
        .unwrap();
    let a = saver.adapter();
    let history = a.load_history("weaver:thread:t", None).await.unwrap();
    assert!(!history.is_empty());
    for s in &history {
        let text = s.data.to_string();
        // The kept checkpoint still names its parent, ids[2].
        for gone in &ids[..2] {
            assert!(
                !text.contains(gone.as_str()),
                "pruned {gone} still stored: {text}"
            );
        }
        assert!(
            text.contains(ids[3].as_str()),
            "the kept checkpoint is stored"
        );
    }
    saver.delete_thread("t").await.unwrap();
    for s in a.load_history("weaver:thread:t", None).await.unwrap() {
        let text = s.data.to_string();
        for id in &ids {
            assert!(
                !text.contains(id.as_str()),
                "a deleted thread leaves no data: {text}"
            );
        }
    }
    let threads = saver.list_threads(None, 0).await.unwrap();
    let names: Vec<&str> = threads.iter().map(|t| t.thread_id.as_str()).collect();
    assert_eq!(names, ["u"]);
    let catalog = a
        .load_snapshot("weaver:threads", None)
        .await
        .unwrap()
        .unwrap();
    let listed = catalog.data.to_string();
    assert!(
        listed.contains("\"u\"") && !listed.contains("\"t\""),
        "the deleted thread is off the catalog: {listed}"
    );
    chain(&saver, "t", 1).await;
    assert_eq!(
        saver.list_threads(None, 0).await.unwrap().len(),
        2,
        "a thread written again is listed"
    );
}
