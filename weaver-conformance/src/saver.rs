//! The saver conformance suite: one set of checks every [`Saver`] must pass,
//! run unchanged against each backend.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use weaver::{InMemorySaver, Saver};
//! # use weaver_conformance::saver::run_saver_conformance;
//! # async fn check() {
//! run_saver_conformance(|| async { Arc::new(InMemorySaver::new()) as Arc<dyn Saver> }).await;
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;

use serde_json::{Value, json};
use weaver::Error;
use weaver::checkpoint::{
    BatchEntry, ChannelDelta, Checkpoint, CheckpointMetadata, CheckpointRef, CheckpointSource,
    DELTA_CHECKPOINT_FORMAT, ERROR_CHANNEL, ForkOptions, ListFilter, NewCheckpoint, PendingWrite,
    PruneStrategy, RESUME_CHANNEL, Saver, WriteCheck, WriteOp, limits,
};

/// Runs every check, each on a fresh saver from `make`.
pub async fn run_saver_conformance<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Saver>>,
{
    get_tuple_latest_and_by_id(make().await).await;
    latest_is_highest_commit_order_not_newest_id(make().await).await;
    list_orders_newest_first_with_limit_and_before(make().await).await;
    list_filters_metadata_and_namespaces(make().await).await;
    list_limit_counts_what_the_filter_keeps(make().await).await;
    list_compares_object_values_as_values(make().await).await;
    list_across_threads(make().await).await;
    list_before_needs_thread(make().await).await;
    list_rejects_filter_keys_that_are_not_identifiers(make().await).await;
    put_rejects_taken_commit_order_and_writes_nothing(make().await).await;
    put_rejects_missing_parent(make().await).await;
    put_rejects_a_child_ordered_before_its_parent(make().await).await;
    put_without_commit_order_takes_next(make().await).await;
    put_writes_is_idempotent_per_task_and_index(make().await).await;
    put_writes_needs_existing_checkpoint(make().await).await;
    put_checkpoint_with_writes_is_atomic(make().await).await;
    put_many_is_one_atomic_batch(make().await).await;
    put_many_enforces_limits(make().await).await;
    fork_at_copies_only_the_lineage(make().await).await;
    lineage_follows_parents_nearest_first(make().await).await;
    fork_at_enforces_bounds(make().await).await;
    fork_at_rejects_missing_parent_and_existing_target(make().await).await;
    copy_delete_and_list_threads(make().await).await;
    copy_of_a_pruned_thread_is_renumbered(make().await).await;
    prune_keeps_latest_or_deletes(make().await).await;
    prune_keeps_the_last_n_per_namespace(make().await).await;
    thread_info_and_commit_order_lookup(make().await).await;
    keep_last_at_the_extremes(make().await).await;
    returned_values_are_copies(make().await).await;
    put_ops_applies_a_group_in_order(make().await).await;
    put_ops_group_fails_as_a_whole(make().await).await;
    put_ops_takes_large_groups(make().await).await;
    put_ops_limits_a_group_of_several_checkpoints(make().await).await;
    a_failed_put_leaves_no_trace_of_the_thread(make().await).await;
    extra_metadata_named_like_a_field_is_not_stored(make().await).await;
    put_ops_checks_a_write_before_storing(make().await).await;
    reads_return_delta_channels_whole(make().await).await;
    ids_up_to_their_limits_are_stored_and_longer_ones_refused(make().await).await;
}

/// A checkpoint whose single channel `v` holds `value`.
pub fn record(value: Value) -> Checkpoint {
    let mut c = Checkpoint::empty();
    c.channel_values.insert("v".into(), value);
    c.channel_versions.insert("v".into(), 1);
    c
}

/// A `NewCheckpoint` on `thread` (root namespace) with the given parent and commit order.
pub fn new_on(
    thread: &str,
    parent: Option<&str>,
    order: Option<u64>,
    step: i64,
    value: Value,
) -> NewCheckpoint {
    NewCheckpoint {
        thread_id: thread.into(),
        checkpoint_ns: String::new(),
        parent_id: parent.map(Into::into),
        checkpoint: record(value),
        metadata: CheckpointMetadata::new(CheckpointSource::Loop, step),
        commit_order: order,
    }
}

/// Writes `n` checkpoints in a chain on `thread`; returns their ids oldest first.
pub async fn chain(saver: &dyn Saver, thread: &str, n: usize) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for i in 0..n {
        let c = new_on(
            thread,
            ids.last().map(String::as_str),
            Some(i as u64 + 1),
            i as i64 - 1,
            json!(i),
        );
        ids.push(c.checkpoint.id.clone());
        saver.put(c).await.expect("put in chain");
    }
    ids
}

fn ids_of(tuples: &[weaver::checkpoint::CheckpointTuple]) -> Vec<String> {
    tuples.iter().map(|t| t.checkpoint.id.clone()).collect()
}

fn write(task: &str, idx_channel: &str, value: Value) -> PendingWrite {
    PendingWrite::for_task(task, "node", [(idx_channel.to_owned(), value)]).remove(0)
}

async fn get_tuple_latest_and_by_id(saver: Arc<dyn Saver>) {
    let t = CheckpointRef::latest("t1");
    assert!(
        saver.get_tuple(&t).await.unwrap().is_none(),
        "empty thread has no latest"
    );
    let ids = chain(saver.as_ref(), "t1", 3).await;
    let latest = saver.get_tuple(&t).await.unwrap().expect("latest");
    assert_eq!(latest.checkpoint.id, ids[2]);
    assert_eq!(latest.commit_order, 3);
    assert_eq!(
        latest
            .parent_config
            .as_ref()
            .and_then(|p| p.checkpoint_id.clone()),
        Some(ids[1].clone())
    );
    assert_eq!(latest.config, t.at(ids[2].clone()));
    assert_eq!(latest.checkpoint.channel_values["v"], json!(2));
    let first = saver
        .get_tuple(&t.at(ids[0].clone()))
        .await
        .unwrap()
        .expect("by id");
    assert_eq!(first.commit_order, 1);
    assert_eq!(first.parent_config, None);
    assert_eq!(first.metadata.step, -1);
    assert!(
        saver
            .get_tuple(&t.at("no-such-id"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        saver
            .get_tuple(&CheckpointRef::latest("t1").ns("other"))
            .await
            .unwrap()
            .is_none()
    );
}

async fn latest_is_highest_commit_order_not_newest_id(saver: Arc<dyn Saver>) {
    // Ids that sort backwards: the commit order alone decides "latest".
    let mut a = new_on("t", None, Some(1), 0, json!("a"));
    a.checkpoint.id = "zzz".into();
    let mut b = new_on("t", Some("zzz"), Some(2), 1, json!("b"));
    b.checkpoint.id = "aaa".into();
    b.checkpoint.ts = "1970-01-01T00:00:00.000000+00:00".into();
    saver.put(a).await.unwrap();
    saver.put(b).await.unwrap();
    let latest = saver
        .get_tuple(&CheckpointRef::latest("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.checkpoint.id, "aaa");
    let listed = saver.list(&ListFilter::thread("t")).await.unwrap();
    assert_eq!(ids_of(&listed), ["aaa", "zzz"]);
}

async fn list_orders_newest_first_with_limit_and_before(saver: Arc<dyn Saver>) {
    let ids = chain(saver.as_ref(), "t", 5).await;
    let all = saver.list(&ListFilter::thread("t")).await.unwrap();
    let mut expected = ids.clone();
    expected.reverse();
    assert_eq!(ids_of(&all), expected);
    assert_eq!(
        all.iter().map(|t| t.commit_order).collect::<Vec<_>>(),
        [5, 4, 3, 2, 1]
    );
    let two = saver.list(&ListFilter::thread("t").limit(2)).await.unwrap();
    assert_eq!(ids_of(&two), expected[..2]);
    let before = saver
        .list(&ListFilter::thread("t").before(ids[3].clone()))
        .await
        .unwrap();
    assert_eq!(
        ids_of(&before),
        [ids[2].clone(), ids[1].clone(), ids[0].clone()]
    );
    let before_limited = saver
        .list(&ListFilter::thread("t").before(ids[3].clone()).limit(1))
        .await
        .unwrap();
    assert_eq!(ids_of(&before_limited), [ids[2].clone()]);
    let err = saver
        .list(&ListFilter::thread("t").before("missing"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CheckpointNotFound { .. }), "{err}");
    assert!(
        saver
            .list(&ListFilter::thread("nobody"))
            .await
            .unwrap()
            .is_empty()
    );
}

async fn list_filters_metadata_and_namespaces(saver: Arc<dyn Saver>) {
    let mut parent = None;
    for (i, source) in [
        CheckpointSource::Input,
        CheckpointSource::Loop,
        CheckpointSource::Update,
        CheckpointSource::Loop,
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = new_on(
            "t",
            parent.as_deref(),
            Some(i as u64 + 1),
            i as i64,
            json!(i),
        );
        c.metadata.source = source;
        c.metadata
            .extra
            .insert("user".into(), json!(if i % 2 == 0 { "ann" } else { "bob" }));
        parent = Some(c.checkpoint.id.clone());
        saver.put(c).await.unwrap();
    }
    let mut sub = new_on("t", None, Some(1), 0, json!("sub"));
    sub.checkpoint_ns = "child".into();
    saver.put(sub).await.unwrap();

    let updates = saver
        .list(&ListFilter::thread("t").metadata("source", "update"))
        .await
        .unwrap();
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].metadata.step, 2);
    let loops = saver
        .list(&ListFilter::thread("t").ns("").metadata("source", "loop"))
        .await
        .unwrap();
    assert_eq!(
        loops.iter().map(|t| t.metadata.step).collect::<Vec<_>>(),
        [3, 1]
    );
    let ann_step0 = saver
        .list(
            &ListFilter::thread("t")
                .metadata("user", "ann")
                .metadata("step", 0),
        )
        .await
        .unwrap();
    assert_eq!(ann_step0.len(), 1);
    let limited = saver
        .list(
            &ListFilter::thread("t")
                .ns("")
                .metadata("user", "bob")
                .limit(1),
        )
        .await
        .unwrap();
    assert_eq!(limited.len(), 1);
    assert_eq!(
        limited[0].metadata.step, 3,
        "limit applies after filtering, newest first"
    );
    assert!(
        saver
            .list(&ListFilter::thread("t").metadata("user", "eve"))
            .await
            .unwrap()
            .is_empty()
    );
    let child = saver
        .list(&ListFilter::thread("t").ns("child"))
        .await
        .unwrap();
    assert_eq!(child.len(), 1);
    assert_eq!(child[0].config.checkpoint_ns, "child");
    assert_eq!(child[0].commit_order, 1, "commit order is per namespace");
    assert_eq!(
        saver.list(&ListFilter::thread("t")).await.unwrap().len(),
        5,
        "no namespace = all"
    );
}

/// A listing's limit counts the checkpoints the metadata filter keeps:
/// newer checkpoints whose value a looser comparison would take (an array
/// holding the value, `null` for a missing key) do not use it up.
async fn list_limit_counts_what_the_filter_keeps(saver: Arc<dyn Saver>) {
    let mut parent = None;
    for (i, tags) in [json!("a"), json!(null), json!(["a"]), json!(["a", "b"])]
        .into_iter()
        .enumerate()
    {
        let mut c = new_on(
            "t",
            parent.as_deref(),
            Some(i as u64 + 1),
            i as i64,
            json!(i),
        );
        c.metadata.extra.insert("tags".into(), tags);
        parent = Some(c.checkpoint.id.clone());
        saver.put(c).await.unwrap();
    }
    let mut c = new_on("t", parent.as_deref(), Some(5), 4, json!(4));
    c.metadata.extra.insert("other".into(), json!(1));
    saver.put(c).await.unwrap();
    let steps = |filter: ListFilter| {
        let saver = saver.clone();
        async move {
            let found = saver.list(&filter).await.unwrap();
            found.iter().map(|t| t.metadata.step).collect::<Vec<_>>()
        }
    };
    let tags = |v: Value| ListFilter::thread("t").metadata("tags", v);
    assert_eq!(steps(tags(json!("a")).limit(1)).await, [0]);
    assert_eq!(steps(tags(json!(null)).limit(1)).await, [1]);
    assert_eq!(steps(tags(json!(["a"])).limit(1)).await, [2]);
    assert_eq!(steps(tags(json!("b")).limit(1)).await, Vec::<i64>::new());
    assert_eq!(steps(ListFilter::thread("t").limit(2)).await, [4, 3]);
}

/// A metadata filter's value is a value, compared as JSON: an object
/// matches an equal object whatever its keys' order, and an object whose
/// key starts with `$` is a value like any other, never a query operator.
async fn list_compares_object_values_as_values(saver: Arc<dyn Saver>) {
    let mut parent = None;
    let docs = [
        json!({"a": 1, "b": [1, {"c": 2, "d": 3}]}),
        json!({"$gt": 0}),
        json!(5),
    ];
    for (i, doc) in docs.into_iter().enumerate() {
        let mut c = new_on(
            "t",
            parent.as_deref(),
            Some(i as u64 + 1),
            i as i64,
            json!(i),
        );
        c.metadata.extra.insert("doc".into(), doc);
        parent = Some(c.checkpoint.id.clone());
        saver.put(c).await.unwrap();
    }
    let steps = |v: Value| {
        let saver = saver.clone();
        async move {
            let filter = ListFilter::thread("t").metadata("doc", v);
            let found = saver.list(&filter).await.unwrap();
            found.iter().map(|t| t.metadata.step).collect::<Vec<_>>()
        }
    };
    assert_eq!(
        steps(json!({"b": [1, {"d": 3, "c": 2}], "a": 1})).await,
        [0]
    );
    assert_eq!(steps(json!({"$gt": 0})).await, [1]);
    assert_eq!(steps(json!({"$foo": 1})).await, Vec::<i64>::new());
    assert_eq!(steps(json!({"$regex": "."})).await, Vec::<i64>::new());
}

async fn list_across_threads(saver: Arc<dyn Saver>) {
    chain(saver.as_ref(), "b", 2).await;
    chain(saver.as_ref(), "a", 2).await;
    let all = saver.list(&ListFilter::all()).await.unwrap();
    let order: Vec<(String, u64)> = all
        .iter()
        .map(|t| (t.config.thread_id.clone(), t.commit_order))
        .collect();
    assert_eq!(
        order,
        [
            ("a".into(), 2),
            ("a".into(), 1),
            ("b".into(), 2),
            ("b".into(), 1)
        ]
    );
    assert_eq!(
        saver.list(&ListFilter::all().limit(3)).await.unwrap().len(),
        3
    );
    assert_eq!(
        saver
            .list(&ListFilter::all().metadata("step", 0))
            .await
            .unwrap()
            .len(),
        2
    );
}

async fn list_before_needs_thread(saver: Arc<dyn Saver>) {
    let err = saver
        .list(&ListFilter::all().before("x"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
}

async fn list_rejects_filter_keys_that_are_not_identifiers(saver: Arc<dyn Saver>) {
    chain(saver.as_ref(), "t", 1).await;
    for key in ["a'b", "source; DROP TABLE x", "", "1st", "a.b", "é"] {
        let err = saver
            .list(&ListFilter::thread("t").metadata(key, "x"))
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { .. }),
            "key {key:?}: {err}"
        );
    }
    assert_eq!(
        saver
            .list(&ListFilter::thread("t").metadata("_ok_1", "x"))
            .await
            .unwrap()
            .len(),
        0
    );
}

async fn put_rejects_taken_commit_order_and_writes_nothing(saver: Arc<dyn Saver>) {
    let ids = chain(saver.as_ref(), "t", 2).await;
    // Two writers both loaded head 2 and both write commit 3: one wins.
    let winner = new_on("t", Some(&ids[1]), Some(3), 2, json!("winner"));
    let loser = new_on("t", Some(&ids[1]), Some(3), 2, json!("loser"));
    let loser_id = loser.checkpoint.id.clone();
    saver.put(winner).await.unwrap();
    let err = saver.put(loser).await.unwrap_err();
    match err {
        Error::VersionConflict {
            thread_id,
            attempted,
            ..
        } => {
            assert_eq!(thread_id, "t");
            assert_eq!(attempted, 3);
        }
        other => panic!("expected a version conflict, got {other}"),
    }
    assert!(
        saver
            .get_tuple(&CheckpointRef::latest("t").at(loser_id))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(saver.list(&ListFilter::thread("t")).await.unwrap().len(), 3);
    // An older commit order is taken too.
    let stale = new_on("t", Some(&ids[0]), Some(2), 1, json!("stale"));
    assert!(matches!(
        saver.put(stale).await,
        Err(Error::VersionConflict { attempted: 2, .. })
    ));
    // A duplicate id is not a second checkpoint.
    let mut dup = new_on("t", Some(&ids[1]), Some(4), 3, json!("dup"));
    dup.checkpoint.id = ids[0].clone();
    assert!(matches!(
        saver.put(dup).await,
        Err(Error::VersionConflict { .. })
    ));
    assert_eq!(saver.list(&ListFilter::thread("t")).await.unwrap().len(), 3);
    // A fork (old parent, next commit order) is not a conflict.
    saver
        .put(new_on("t", Some(&ids[0]), Some(4), 1, json!("fork")))
        .await
        .unwrap();
    let head = saver
        .get_tuple(&CheckpointRef::latest("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.checkpoint.channel_values["v"], json!("fork"));
    assert_eq!(
        head.parent_config.unwrap().checkpoint_id.as_deref(),
        Some(ids[0].as_str())
    );
}

async fn put_rejects_missing_parent(saver: Arc<dyn Saver>) {
    let err = saver
        .put(new_on("t", Some("ghost"), Some(1), 0, json!(0)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::CheckpointNotFound { ref checkpoint_id, .. } if checkpoint_id == "ghost"),
        "{err}"
    );
    assert!(
        saver
            .list(&ListFilter::thread("t"))
            .await
            .unwrap()
            .is_empty()
    );
}

/// Parents commit before their children: an explicit commit order at or
/// below the parent's is refused by every write path, writing nothing.
async fn put_rejects_a_child_ordered_before_its_parent(saver: Arc<dyn Saver>) {
    let first = new_on("t", None, Some(1), 0, json!(0));
    let first_id = first.checkpoint.id.clone();
    saver.put(first).await.unwrap();
    let late = new_on("t", Some(&first_id), Some(5), 1, json!(5));
    let late_id = late.checkpoint.id.clone();
    saver.put(late).await.unwrap();
    let early = || new_on("t", Some(&late_id), Some(3), 2, json!(3));
    // The variant is the contract; the wording is the saver's own.
    let refused = |r: Result<(), Error>, how: &str| {
        assert!(
            matches!(&r, Err(Error::InvalidArgument { .. })),
            "{how}: a child ordered before its parent must be InvalidArgument: {r:?}"
        );
    };
    refused(saver.put(early()).await.map(drop), "put");
    refused(
        saver
            .put_checkpoint_with_writes(early(), vec![write("t", "v", json!(1))])
            .await
            .map(drop),
        "put_checkpoint_with_writes",
    );
    refused(
        saver
            .put_many(vec![BatchEntry {
                checkpoint: early(),
                writes: Vec::new(),
            }])
            .await
            .map(drop),
        "put_many",
    );
    refused(saver.put_ops(vec![WriteOp::Put(early())]).await, "put_ops");
    // A parent earlier in the same batch or group, committing later.
    let parent = new_on("t", Some(&late_id), Some(9), 2, json!(9));
    let child = new_on("t", Some(&parent.checkpoint.id), Some(8), 3, json!(8));
    let r = saver
        .put_many(vec![
            BatchEntry {
                checkpoint: parent.clone(),
                writes: Vec::new(),
            },
            BatchEntry {
                checkpoint: child.clone(),
                writes: Vec::new(),
            },
        ])
        .await;
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
    let r = saver
        .put_ops(vec![WriteOp::Put(parent), WriteOp::Put(child)])
        .await;
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
    let stored = saver.list(&ListFilter::thread("t")).await.unwrap();
    let orders: Vec<u64> = stored.iter().map(|t| t.commit_order).collect();
    assert_eq!(orders, [5, 1], "nothing written");
    assert!(stored.iter().all(|t| t.pending_writes.is_empty()));
}

async fn put_without_commit_order_takes_next(saver: Arc<dyn Saver>) {
    let ids = chain(saver.as_ref(), "t", 2).await;
    saver
        .put(new_on("t", Some(&ids[1]), None, 2, json!("next")))
        .await
        .unwrap();
    let head = saver
        .get_tuple(&CheckpointRef::latest("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.commit_order, 3);
    assert_eq!(head.checkpoint.channel_values["v"], json!("next"));
}

async fn put_writes_is_idempotent_per_task_and_index(saver: Arc<dyn Saver>) {
    let ids = chain(saver.as_ref(), "t", 1).await;
    let at = CheckpointRef::latest("t").at(ids[0].clone());
    let first = PendingWrite::for_task(
        "task-1",
        "a",
        [
            ("foo".to_owned(), json!("one")),
            ("bar".to_owned(), json!([1])),
        ],
    );
    saver.put_writes(&at, first).await.unwrap();
    // A retried task re-sends index 0 with another value: the first is kept.
    let retry = PendingWrite::for_task("task-1", "a", [("foo".to_owned(), json!("two"))]);
    saver.put_writes(&at, retry).await.unwrap();
    // Special writes replace.
    saver
        .put_writes(
            &at,
            vec![write("task-2", ERROR_CHANNEL, json!({"message": "boom"}))],
        )
        .await
        .unwrap();
    saver
        .put_writes(
            &at,
            vec![write("task-2", ERROR_CHANNEL, json!({"message": "again"}))],
        )
        .await
        .unwrap();
    let t = saver.get_tuple(&at).await.unwrap().unwrap();
    let got: Vec<(String, i64, String, Value)> = t
        .pending_writes
        .iter()
        .map(|w| (w.task_id.clone(), w.idx, w.channel.clone(), w.value.clone()))
        .collect();
    assert_eq!(
        got,
        [
            ("task-1".into(), 0, "foo".into(), json!("one")),
            ("task-1".into(), 1, "bar".into(), json!([1])),
            (
                "task-2".into(),
                -1,
                ERROR_CHANNEL.into(),
                json!({"message": "again"})
            ),
        ]
    );
    assert_eq!(t.pending_writes[0].task_path, "a");
    // Writes stay with their checkpoint.
    let other = chain(saver.as_ref(), "u", 1).await;
    let u = saver
        .get_tuple(&CheckpointRef::latest("u").at(other[0].clone()))
        .await
        .unwrap()
        .unwrap();
    assert!(u.pending_writes.is_empty());
}

async fn put_writes_needs_existing_checkpoint(saver: Arc<dyn Saver>) {
    let err = saver
        .put_writes(
            &CheckpointRef::latest("t").at("ghost"),
            vec![write("x", "foo", json!(1))],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CheckpointNotFound { .. }), "{err}");
}

async fn put_checkpoint_with_writes_is_atomic(saver: Arc<dyn Saver>) {
    let ids = chain(saver.as_ref(), "t", 1).await;
    let c = new_on("t", Some(&ids[0]), Some(2), 0, json!("with writes"));
    let id = c.checkpoint.id.clone();
    let writes = PendingWrite::for_task("task", "n", [("v".to_owned(), json!(7))]);
    let at = saver
        .put_checkpoint_with_writes(c, writes.clone())
        .await
        .unwrap();
    assert_eq!(at.checkpoint_id.as_deref(), Some(id.as_str()));
    let t = saver.get_tuple(&at).await.unwrap().unwrap();
    assert_eq!(t.pending_writes, writes);
    // A conflicting one leaves neither the checkpoint nor its writes.
    let c2 = new_on("t", Some(&ids[0]), Some(2), 0, json!("conflict"));
    let id2 = c2.checkpoint.id.clone();
    assert!(matches!(
        saver.put_checkpoint_with_writes(c2, writes).await,
        Err(Error::VersionConflict { .. })
    ));
    assert!(
        saver
            .get_tuple(&CheckpointRef::latest("t").at(id2))
            .await
            .unwrap()
            .is_none()
    );
    let t = saver.get_tuple(&at).await.unwrap().unwrap();
    assert_eq!(t.pending_writes.len(), 1);
}

async fn put_many_is_one_atomic_batch(saver: Arc<dyn Saver>) {
    // Explicit ids stay identities; an entry may name an earlier entry as parent.
    let a = new_on("t", None, None, -1, json!("a"));
    let mut b = new_on("t", None, None, 0, json!("b"));
    b.parent_id = Some(a.checkpoint.id.clone());
    let mut other = new_on("u", None, None, 0, json!("u"));
    other.checkpoint.id = "explicit-id".into();
    let entries = vec![
        BatchEntry {
            checkpoint: a.clone(),
            writes: vec![],
        },
        BatchEntry {
            checkpoint: b.clone(),
            writes: PendingWrite::for_task("task", "n", [("v".to_owned(), json!(1))]),
        },
        BatchEntry {
            checkpoint: other,
            writes: vec![],
        },
    ];
    let refs = saver.put_many(entries).await.unwrap();
    assert_eq!(refs.len(), 3);
    assert_eq!(refs[2].checkpoint_id.as_deref(), Some("explicit-id"));
    let head = saver
        .get_tuple(&CheckpointRef::latest("t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.checkpoint.id, b.checkpoint.id);
    assert_eq!(head.commit_order, 2);
    assert_eq!(head.pending_writes.len(), 1);

    // One bad entry (a taken commit order) and nothing of the batch stays.
    let fresh = new_on("v", None, None, 0, json!("v"));
    let fresh_id = fresh.checkpoint.id.clone();
    let clash = new_on("t", None, Some(1), 0, json!("clash"));
    let err = saver
        .put_many(vec![
            BatchEntry {
                checkpoint: fresh,
                writes: vec![],
            },
            BatchEntry {
                checkpoint: clash,
                writes: vec![],
            },
        ])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::VersionConflict { .. }), "{err}");
    assert!(
        saver
            .get_tuple(&CheckpointRef::latest("v").at(fresh_id))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        saver
            .list(&ListFilter::thread("v"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(saver.list(&ListFilter::thread("t")).await.unwrap().len(), 2);

    // A missing parent also fails the whole batch.
    let ok = new_on("w", None, None, 0, json!("w"));
    let orphan = new_on("w", Some("ghost"), None, 1, json!("orphan"));
    assert!(
        saver
            .put_many(vec![
                BatchEntry {
                    checkpoint: ok,
                    writes: vec![]
                },
                BatchEntry {
                    checkpoint: orphan,
                    writes: vec![]
                },
            ])
            .await
            .is_err()
    );
    assert!(
        saver
            .list(&ListFilter::thread("w"))
            .await
            .unwrap()
            .is_empty()
    );
}

async fn put_many_enforces_limits(saver: Arc<dyn Saver>) {
    let too_many: Vec<BatchEntry> = (0..=limits::BATCH_MAX_CHECKPOINTS)
        .map(|i| BatchEntry {
            checkpoint: new_on(&format!("t{i}"), None, None, 0, json!(i)),
            writes: vec![],
        })
        .collect();
    let err = saver.put_many(too_many).await.unwrap_err();
    assert!(
        matches!(err, Error::LimitExceeded { value, ceiling, .. } if value == 1001 && ceiling == 1000),
        "{err}"
    );
    let writes: Vec<PendingWrite> = PendingWrite::for_task(
        "task",
        "n",
        (0..=limits::BATCH_MAX_WRITES).map(|i| (format!("c{i}"), json!(i))),
    );
    let err = saver
        .put_many(vec![BatchEntry {
            checkpoint: new_on("t", None, None, 0, json!(0)),
            writes,
        }])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::LimitExceeded {
                ceiling: 10_000,
                ..
            }
        ),
        "{err}"
    );
    let big = "x".repeat(limits::BATCH_MAX_BYTES);
    let err = saver
        .put_many(vec![BatchEntry {
            checkpoint: new_on("t", None, None, 0, json!(big)),
            writes: vec![],
        }])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { .. }), "{err}");
    // The metadata counts too: two entries whose records are small and
    // whose metadata are each under a record's ceiling, but not together.
    let half = serde_json::Value::String("m".repeat(limits::BATCH_MAX_BYTES / 2 + 1));
    let entries = (0..2)
        .map(|i| {
            let mut c = new_on(&format!("meta{i}"), None, None, 0, json!(i));
            c.metadata.extra.insert("notes".into(), half.clone());
            BatchEntry {
                checkpoint: c,
                writes: vec![],
            }
        })
        .collect();
    let err = saver.put_many(entries).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::LimitExceeded {
                limit: "put_many bytes",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        saver.list(&ListFilter::all()).await.unwrap().is_empty(),
        "nothing written"
    );
}

async fn fork_at_copies_only_the_lineage(saver: Arc<dyn Saver>) {
    // 1 <- 2 <- 3 and a branch 1 <- 4 (a fork): forking at 3 copies 1, 2, 3.
    let ids = chain(saver.as_ref(), "src", 3).await;
    let branch = new_on("src", Some(&ids[0]), Some(4), 1, json!("branch"));
    let branch_id = branch.checkpoint.id.clone();
    saver.put(branch).await.unwrap();
    let at = CheckpointRef::latest("src").at(ids[2].clone());
    saver
        .put_writes(
            &at,
            PendingWrite::for_task("task", "n", [("v".to_owned(), json!("pending"))]),
        )
        .await
        .unwrap();
    let copy = saver
        .fork_at(&at, "dst", ForkOptions::default())
        .await
        .unwrap();
    assert_eq!(copy.thread_id, "dst");
    assert_eq!(copy.checkpoint_id.as_deref(), Some(ids[2].as_str()));
    let listed = saver.list(&ListFilter::thread("dst")).await.unwrap();
    assert_eq!(
        ids_of(&listed),
        [ids[2].clone(), ids[1].clone(), ids[0].clone()]
    );
    assert_eq!(
        listed.iter().map(|t| t.commit_order).collect::<Vec<_>>(),
        [3, 2, 1]
    );
    assert!(!ids_of(&listed).contains(&branch_id));
    assert_eq!(
        listed[0].pending_writes.len(),
        1,
        "pending writes come along"
    );
    assert_eq!(listed[0].checkpoint.channel_values["v"], json!(2));
    // The source is untouched.
    assert_eq!(
        saver.list(&ListFilter::thread("src")).await.unwrap().len(),
        4
    );
    // Forking from the branch copies 1 and the branch.
    saver
        .fork_at(
            &CheckpointRef::latest("src").at(branch_id.clone()),
            "dst2",
            ForkOptions::default(),
        )
        .await
        .unwrap();
    let listed = saver.list(&ListFilter::thread("dst2")).await.unwrap();
    assert_eq!(ids_of(&listed), [branch_id, ids[0].clone()]);
}

async fn lineage_follows_parents_nearest_first(saver: Arc<dyn Saver>) {
    // 1 <- 2 <- 3 <- 4, and a branch 2 <- 5 <- 6 (commit orders 5, 6).
    let ids = chain(saver.as_ref(), "t", 4).await;
    let five = new_on("t", Some(&ids[1]), Some(5), 2, json!("five"));
    let six = new_on("t", Some(&five.checkpoint.id), Some(6), 3, json!("six"));
    let (five_id, six_id) = (five.checkpoint.id.clone(), six.checkpoint.id.clone());
    saver.put(five).await.unwrap();
    saver.put(six).await.unwrap();
    let at = |id: &str| CheckpointRef::latest("t").at(id.to_owned());
    let target = at(&ids[3]);
    saver
        .put_writes(
            &target,
            PendingWrite::for_task("task", "n", [("v".to_owned(), json!("pending"))]),
        )
        .await
        .unwrap();
    // A straight line, with or without the child's commit order as a hint.
    for below in [None, Some(5)] {
        let line = saver.lineage(&target, 10, below).await.unwrap();
        let want: Vec<String> = ids.iter().rev().cloned().collect();
        assert_eq!(ids_of(&line), want, "{below:?}");
        assert!(line.iter().all(|t| t.pending_writes.is_empty()));
        assert_eq!(line[0].checkpoint.channel_values["v"], json!(3));
        assert_eq!(line[0].commit_order, 4);
        assert_eq!(line[1].parent_config, Some(at(&ids[1])));
        assert_eq!(
            ids_of(&saver.lineage(&target, 2, below).await.unwrap()),
            [ids[3].clone(), ids[2].clone()]
        );
    }
    // The branch: its lineage skips the commit orders of the other line,
    // and a hint that points past them still gives the branch.
    for below in [None, Some(7)] {
        let line = saver.lineage(&at(&six_id), 10, below).await.unwrap();
        assert_eq!(
            ids_of(&line),
            [
                six_id.clone(),
                five_id.clone(),
                ids[1].clone(),
                ids[0].clone()
            ],
            "{below:?}"
        );
    }
    // The `count` orders under the hint hold only part of the branch.
    assert_eq!(
        ids_of(&saver.lineage(&at(&six_id), 4, Some(7)).await.unwrap()),
        [
            six_id.clone(),
            five_id.clone(),
            ids[1].clone(),
            ids[0].clone()
        ]
    );
    assert!(saver.lineage(&target, 0, None).await.unwrap().is_empty());
    assert!(
        saver
            .lineage(&at("missing"), 5, Some(9))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        saver
            .lineage(&CheckpointRef::latest("t"), 5, None)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn fork_at_enforces_bounds(saver: Arc<dyn Saver>) {
    let ids = chain(saver.as_ref(), "src", 5).await;
    let at = CheckpointRef::latest("src").at(ids[4].clone());
    let err = saver
        .fork_at(&at, "dst", ForkOptions::default().max_checkpoints(3))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::LimitExceeded { ceiling: 3, .. }),
        "{err}"
    );
    let err = saver
        .fork_at(&at, "dst", ForkOptions::default().max_bytes(10))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::LimitExceeded { ceiling: 10, .. }),
        "{err}"
    );
    let err = saver
        .fork_at(
            &at,
            "dst",
            ForkOptions::default().max_checkpoints(limits::FORK_MAX_CHECKPOINTS + 1),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::LimitExceeded {
                ceiling: 10_000,
                ..
            }
        ),
        "{err}"
    );
    let err = saver
        .fork_at(
            &at,
            "dst",
            ForkOptions::default().max_bytes(limits::FORK_MAX_BYTES + 1),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { .. }), "{err}");
    assert!(
        saver
            .list(&ListFilter::thread("dst"))
            .await
            .unwrap()
            .is_empty(),
        "nothing copied"
    );
    saver
        .fork_at(&at, "dst", ForkOptions::default().max_checkpoints(5))
        .await
        .expect("exactly at the bound");
}

async fn fork_at_rejects_missing_parent_and_existing_target(saver: Arc<dyn Saver>) {
    let ids = chain(saver.as_ref(), "src", 3).await;
    chain(saver.as_ref(), "taken", 1).await;
    let at = CheckpointRef::latest("src").at(ids[2].clone());
    let err = saver
        .fork_at(&at, "taken", ForkOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ThreadExists { .. }), "{err}");
    let err = saver
        .fork_at(
            &CheckpointRef::latest("src").at("ghost"),
            "dst",
            ForkOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CheckpointNotFound { .. }), "{err}");
    // Pruning drops the ancestors; the recorded parent is now missing.
    saver
        .prune(&["src".to_owned()], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    let err = saver
        .fork_at(&at, "dst", ForkOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::MissingParent { ref parent_id, .. } if *parent_id == ids[1]),
        "{err}"
    );
    assert!(
        saver
            .list(&ListFilter::thread("dst"))
            .await
            .unwrap()
            .is_empty()
    );
}

/// `copy_thread` renumbers commit orders 1, 2, … per namespace in their
/// order, so a pruned thread's copy starts at 1 (where a first write to the
/// target would go) and is extended like any thread.
async fn copy_of_a_pruned_thread_is_renumbered(saver: Arc<dyn Saver>) {
    let ids = chain(saver.as_ref(), "p", 4).await;
    let mut sub = new_on("p", None, Some(5), 0, json!("sub"));
    sub.checkpoint_ns = "child".into();
    saver.put(sub).await.unwrap();
    saver
        .prune(&["p".to_owned()], PruneStrategy::KeepLast(2))
        .await
        .unwrap();
    saver.copy_thread("p", "q").await.unwrap();
    let orders = |thread: &'static str, ns: &'static str| {
        let saver = saver.clone();
        async move {
            let listed = saver
                .list(&ListFilter::thread(thread).ns(ns))
                .await
                .unwrap();
            listed
                .iter()
                .map(|t| (t.checkpoint.id.clone(), t.commit_order))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        orders("p", "").await,
        [(ids[3].clone(), 4), (ids[2].clone(), 3)]
    );
    assert_eq!(
        orders("q", "").await,
        [(ids[3].clone(), 2), (ids[2].clone(), 1)]
    );
    let child = orders("q", "child").await;
    assert_eq!(child.iter().map(|c| c.1).collect::<Vec<_>>(), [1]);
    // Extending the copy takes the next number after its head.
    let next = new_on("q", Some(&ids[3]), Some(3), 3, json!("next"));
    saver.put(next).await.unwrap();
    assert!(matches!(
        saver
            .put(new_on("q", Some(&ids[3]), Some(3), 3, json!("late")))
            .await,
        Err(Error::VersionConflict { .. })
    ));
    // The copy reads back whole.
    let head = saver
        .get_tuple(&CheckpointRef::latest("q").at(ids[2].clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.commit_order, 1);
    assert_eq!(head.checkpoint.channel_values["v"], json!(2));
}

async fn copy_delete_and_list_threads(saver: Arc<dyn Saver>) {
    let ids = chain(saver.as_ref(), "a", 3).await;
    let mut sub = new_on("a", None, Some(1), 0, json!("sub"));
    sub.checkpoint_ns = "child".into();
    saver.put(sub).await.unwrap();
    saver
        .put_writes(
            &CheckpointRef::latest("a").at(ids[2].clone()),
            vec![write("t", "v", json!(1))],
        )
        .await
        .unwrap();
    saver.copy_thread("a", "b").await.unwrap();
    let a = saver.list(&ListFilter::thread("a")).await.unwrap();
    let b = saver.list(&ListFilter::thread("b")).await.unwrap();
    assert_eq!(ids_of(&a), ids_of(&b));
    assert_eq!(
        a.iter()
            .map(|t| (t.commit_order, t.pending_writes.len()))
            .collect::<Vec<_>>(),
        b.iter()
            .map(|t| (t.commit_order, t.pending_writes.len()))
            .collect::<Vec<_>>()
    );
    assert!(matches!(
        saver.copy_thread("a", "b").await,
        Err(Error::ThreadExists { .. })
    ));
    assert!(matches!(
        saver.copy_thread("nobody", "c").await,
        Err(Error::ThreadNotFound { .. })
    ));
    // The target is checked first: a taken target is `ThreadExists`
    // whatever the source.
    assert!(matches!(
        saver.copy_thread("nobody", "b").await,
        Err(Error::ThreadExists { .. })
    ));
    let threads = saver.list_threads(None, 0).await.unwrap();
    assert_eq!(
        threads
            .iter()
            .map(|t| (t.thread_id.as_str(), t.checkpoints))
            .collect::<Vec<_>>(),
        [("a", 4), ("b", 4)]
    );
    let page = saver.list_threads(Some(1), 1).await.unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].thread_id, "b");
    saver.delete_thread("a").await.unwrap();
    saver.delete_thread("never-existed").await.unwrap();
    assert!(
        saver
            .list(&ListFilter::thread("a"))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        saver
            .get_tuple(&CheckpointRef::latest("a"))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        saver.list(&ListFilter::thread("b")).await.unwrap().len(),
        4,
        "the copy is independent"
    );
    assert_eq!(saver.list_threads(None, 0).await.unwrap().len(), 1);
}

async fn prune_keeps_latest_or_deletes(saver: Arc<dyn Saver>) {
    let a = chain(saver.as_ref(), "a", 4).await;
    chain(saver.as_ref(), "b", 2).await;
    chain(saver.as_ref(), "c", 2).await;
    saver
        .put_writes(
            &CheckpointRef::latest("a").at(a[3].clone()),
            vec![write("t", "v", json!(1))],
        )
        .await
        .unwrap();
    let deleted = saver
        .prune(&["a".to_owned(), "b".to_owned()], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    assert_eq!(deleted, 4);
    let kept = saver.list(&ListFilter::thread("a")).await.unwrap();
    assert_eq!(ids_of(&kept), [a[3].clone()]);
    assert_eq!(
        kept[0].commit_order, 4,
        "the kept checkpoint keeps its commit order"
    );
    assert_eq!(kept[0].pending_writes.len(), 1, "and its pending writes");
    assert_eq!(saver.list(&ListFilter::thread("b")).await.unwrap().len(), 1);
    assert_eq!(
        saver.list(&ListFilter::thread("c")).await.unwrap().len(),
        2,
        "other threads untouched"
    );
    // The next commit continues after the kept head.
    saver
        .put(new_on("a", Some(&a[3]), Some(5), 4, json!("after")))
        .await
        .unwrap();
    assert!(matches!(
        saver
            .put(new_on("a", Some(&a[3]), Some(4), 4, json!("stale")))
            .await,
        Err(Error::VersionConflict { .. })
    ));
    let deleted = saver
        .prune(&["c".to_owned()], PruneStrategy::Delete)
        .await
        .unwrap();
    assert_eq!(deleted, 2);
    assert!(
        saver
            .list(&ListFilter::thread("c"))
            .await
            .unwrap()
            .is_empty()
    );
}

async fn prune_keeps_the_last_n_per_namespace(saver: Arc<dyn Saver>) {
    // Thread "a": a chain of 6 (orders 1-6), then a branch off order 2 at 7;
    // namespace "sub" holds 2; thread "b" holds 4.
    let a = chain(saver.as_ref(), "a", 6).await;
    let branch = saver
        .put(new_on("a", Some(&a[1]), Some(7), 1, json!("branch")))
        .await
        .unwrap();
    let mut sub = Vec::new();
    for i in 0..2u64 {
        let mut c = new_on(
            "a",
            sub.last().map(String::as_str),
            Some(i + 1),
            0,
            json!(i),
        );
        c.checkpoint_ns = "sub".into();
        sub.push(c.checkpoint.id.clone());
        saver.put(c).await.unwrap();
    }
    chain(saver.as_ref(), "b", 4).await;
    let at = |id: &str| CheckpointRef::latest("a").at(id.to_owned());
    saver
        .put_writes(&at(&a[2]), vec![write("gone", "v", json!(1))])
        .await
        .unwrap();
    saver
        .put_writes(&at(&a[4]), vec![write("kept", "v", json!(2))])
        .await
        .unwrap();

    let untouched = || async {
        let mut all = saver.list(&ListFilter::thread("a")).await.unwrap();
        all.extend(saver.list(&ListFilter::thread("b")).await.unwrap());
        all.iter()
            .map(|t| (t.checkpoint.id.clone(), t.pending_writes.len()))
            .collect::<Vec<_>>()
    };
    let before = untouched().await;
    assert!(matches!(
        saver
            .prune(&["a".to_owned()], PruneStrategy::KeepLast(0))
            .await,
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(
        saver
            .prune(
                &["a".to_owned(), "b".to_owned()],
                PruneStrategy::KeepLast(7)
            )
            .await
            .unwrap(),
        0,
        "keeping more than a namespace holds deletes nothing"
    );
    assert_eq!(untouched().await, before, "nothing changed");

    let deleted = saver
        .prune(&["a".to_owned()], PruneStrategy::KeepLast(3))
        .await
        .unwrap();
    assert_eq!(deleted, 4, "orders 1-4 of the root namespace");
    let kept = saver.list(&ListFilter::thread("a").ns("")).await.unwrap();
    assert_eq!(
        ids_of(&kept),
        [
            branch.checkpoint_id.clone().unwrap(),
            a[5].clone(),
            a[4].clone()
        ],
        "the 3 highest commit orders, whichever branch"
    );
    let orders: Vec<u64> = kept.iter().map(|t| t.commit_order).collect();
    assert_eq!(orders, [7, 6, 5], "commit orders are kept");
    assert_eq!(kept[2].pending_writes.len(), 1, "kept writes stay");
    assert_eq!(kept[0].checkpoint.channel_values["v"], json!("branch"));
    assert!(saver.get_tuple(&at(&a[2])).await.unwrap().is_none());
    assert!(
        matches!(
            saver
                .put_writes(&at(&a[2]), vec![write("late", "v", json!(3))])
                .await,
            Err(Error::CheckpointNotFound { .. })
        ),
        "a pruned checkpoint takes no writes"
    );
    assert_eq!(
        saver
            .list(&ListFilter::thread("a").ns("sub"))
            .await
            .unwrap()
            .len(),
        2,
        "each namespace keeps its own 3"
    );
    assert_eq!(
        saver.list(&ListFilter::thread("b")).await.unwrap().len(),
        4,
        "threads not named are untouched"
    );
    // The thread goes on after the kept head; KeepLatest is KeepLast(1).
    saver
        .put(new_on("a", Some(&a[5]), None, 5, json!("next")))
        .await
        .unwrap();
    assert_eq!(
        saver
            .prune(&["a".to_owned()], PruneStrategy::KeepLatest)
            .await
            .unwrap(),
        4
    );
    let kept = saver.list(&ListFilter::thread("a")).await.unwrap();
    let orders: Vec<(String, u64)> = kept
        .iter()
        .map(|t| (t.config.checkpoint_ns.clone(), t.commit_order))
        .collect();
    assert_eq!(orders, [(String::new(), 8), ("sub".to_owned(), 2)]);
}

/// `KeepLast` with the largest `n` deletes nothing, and pruning a thread whose
/// commit orders end at `i64::MAX` (the highest every saver stores) keeps the
/// newest ones, which `at_commit_order` still finds.
async fn keep_last_at_the_extremes(saver: Arc<dyn Saver>) {
    let ids = chain(saver.as_ref(), "small", 3).await;
    assert_eq!(
        saver
            .prune(&["small".to_owned()], PruneStrategy::KeepLast(usize::MAX))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        ids_of(&saver.list(&ListFilter::thread("small")).await.unwrap()).len(),
        ids.len()
    );
    let top = i64::MAX as u64;
    let mut high: Vec<String> = Vec::new();
    for order in [top - 3, top - 2, top - 1, top] {
        let c = new_on(
            "high",
            high.last().map(String::as_str),
            Some(order),
            0,
            json!(order.to_string()),
        );
        high.push(c.checkpoint.id.clone());
        saver.put(c).await.unwrap();
    }
    assert_eq!(
        saver
            .prune(&["high".to_owned()], PruneStrategy::KeepLast(2))
            .await
            .unwrap(),
        2
    );
    let kept = saver.list(&ListFilter::thread("high")).await.unwrap();
    assert_eq!(ids_of(&kept), [high[3].clone(), high[2].clone()]);
    assert_eq!(
        saver.at_commit_order("high", "", top).await.unwrap(),
        Some(CheckpointRef::latest("high").at(high[3].clone()))
    );
    assert_eq!(
        saver.at_commit_order("high", "", top - 2).await.unwrap(),
        None
    );
    assert_eq!(
        saver
            .thread_info("high")
            .await
            .unwrap()
            .unwrap()
            .checkpoints,
        2
    );
    // Commit orders stop at i64::MAX on every saver (what SQL stores): one
    // past it, given or next after that head, is refused and writes nothing.
    let past = new_on("high", Some(&high[3]), Some(top + 1), 1, json!("past"));
    let next = new_on("high", Some(&high[3]), None, 1, json!("next"));
    for (what, c) in [("explicit", past), ("next", next)] {
        let r = saver.put(c).await;
        assert!(
            matches!(&r, Err(Error::InvalidArgument { .. })),
            "{what}: a commit order past i64::MAX must be InvalidArgument: {r:?}"
        );
    }
    assert_eq!(
        saver.list(&ListFilter::thread("high")).await.unwrap().len(),
        2
    );
}

async fn thread_info_and_commit_order_lookup(saver: Arc<dyn Saver>) {
    assert_eq!(saver.thread_info("a").await.unwrap(), None);
    assert_eq!(saver.at_commit_order("a", "", 1).await.unwrap(), None);
    let a = chain(saver.as_ref(), "a", 3).await;
    let mut c = new_on("a", None, Some(1), 0, json!("sub"));
    c.checkpoint_ns = "sub".into();
    let sub = c.checkpoint.id.clone();
    saver.put(c).await.unwrap();
    chain(saver.as_ref(), "b", 1).await;
    let info = saver.thread_info("a").await.unwrap().unwrap();
    assert_eq!(
        (info.thread_id.as_str(), info.checkpoints),
        ("a", 4),
        "every namespace counts"
    );
    // The times a saver records, if it records them, bound its history.
    if let (Some(created), Some(updated)) = (info.created_at, info.updated_at) {
        assert!(created <= updated, "{info:?}");
    }
    let found = saver.at_commit_order("a", "", 2).await.unwrap().unwrap();
    assert_eq!(found, CheckpointRef::latest("a").at(a[1].clone()));
    let found = saver.at_commit_order("a", "sub", 1).await.unwrap().unwrap();
    assert_eq!(found.checkpoint_ns, "sub");
    assert_eq!(found.checkpoint_id.as_deref(), Some(sub.as_str()));
    for (ns, order) in [("", 4), ("", 0), ("", u64::MAX), ("other", 1)] {
        assert_eq!(
            saver.at_commit_order("a", ns, order).await.unwrap(),
            None,
            "{ns:?} {order}"
        );
    }
    saver
        .prune(&["a".to_owned()], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    assert_eq!(saver.at_commit_order("a", "", 2).await.unwrap(), None);
    assert_eq!(
        saver.thread_info("a").await.unwrap().unwrap().checkpoints,
        2
    );
    saver.delete_thread("a").await.unwrap();
    assert_eq!(saver.thread_info("a").await.unwrap(), None);
    assert_eq!(
        saver.thread_info("b").await.unwrap().unwrap().checkpoints,
        1
    );
}

async fn returned_values_are_copies(saver: Arc<dyn Saver>) {
    let ids = chain(saver.as_ref(), "t", 1).await;
    let at = CheckpointRef::latest("t").at(ids[0].clone());
    let mut got = saver.get_tuple(&at).await.unwrap().unwrap();
    got.checkpoint
        .channel_values
        .insert("v".into(), json!("mutated"));
    got.metadata.step = 99;
    let mut listed = saver.list(&ListFilter::thread("t")).await.unwrap();
    listed[0].checkpoint.channel_values.clear();
    let again = saver.get_tuple(&at).await.unwrap().unwrap();
    assert_eq!(again.checkpoint.channel_values["v"], json!(0));
    assert_eq!(again.metadata.step, -1);
}

async fn put_ops_applies_a_group_in_order(saver: Arc<dyn Saver>) {
    let first = new_on("t", None, Some(1), -1, json!("first"));
    let first_ref = first.config();
    let second = new_on("t", Some(&first.checkpoint.id), Some(2), 0, json!("second"));
    let writes = PendingWrite::for_task("task", "n", [("v".to_owned(), json!(1))]);
    saver
        .put_ops(vec![
            WriteOp::Put(first.clone()),
            WriteOp::Writes(first_ref.clone(), writes.clone()),
            WriteOp::Put(second),
        ])
        .await
        .unwrap();
    let listed = saver.list(&ListFilter::thread("t")).await.unwrap();
    assert_eq!(
        listed.iter().map(|t| t.commit_order).collect::<Vec<_>>(),
        [2, 1]
    );
    assert_eq!(
        listed[1].pending_writes, writes,
        "writes of a checkpoint stored earlier in the group"
    );
    // The rules of each op hold inside a group.
    let clash = new_on("t", None, Some(2), 1, json!("clash"));
    let err = saver.put_ops(vec![WriteOp::Put(clash)]).await.unwrap_err();
    assert!(
        matches!(err, Error::VersionConflict { attempted: 2, .. }),
        "{err}"
    );
    let err = saver
        .put_ops(vec![WriteOp::Writes(first_ref.at("ghost"), writes)])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CheckpointNotFound { .. }), "{err}");
    saver.put_ops(Vec::new()).await.unwrap();
}

/// What a group leaves on `thread`: (commit order, writes) per checkpoint, newest first.
async fn stored(saver: &dyn Saver, thread: &str) -> Vec<(u64, usize)> {
    saver
        .list(&ListFilter::thread(thread))
        .await
        .unwrap()
        .iter()
        .map(|t| (t.commit_order, t.pending_writes.len()))
        .collect()
}

/// Groups as the engine sends them (explicit commit orders, chains, writes
/// of checkpoints earlier in the group): one bad op fails the whole group
/// with the error the op gives alone, nothing of it is stored, and the
/// saver goes on working.
async fn put_ops_group_fails_as_a_whole(saver: Arc<dyn Saver>) {
    let a = new_on("g", None, Some(1), -1, json!("a"));
    let b = new_on("g", Some(&a.checkpoint.id), Some(2), 0, json!("b"));
    let w = |task: &str, v: i64| PendingWrite::for_task(task, "n", [("v".to_owned(), json!(v))]);
    let group = |tail: WriteOp| {
        vec![
            WriteOp::Put(a.clone()),
            WriteOp::Writes(a.config(), w("ta", 1)),
            WriteOp::Put(b.clone()),
            tail,
        ]
    };

    // A missing parent, at the end of the group.
    let orphan = new_on("g", Some("ghost"), Some(3), 1, json!("orphan"));
    let err = saver
        .put_ops(group(WriteOp::Put(orphan)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CheckpointNotFound { .. }), "{err}");
    assert_eq!(stored(saver.as_ref(), "g").await, []);

    // A commit order taken inside the group.
    let twin = new_on("g", Some(&b.checkpoint.id), Some(2), 1, json!("twin"));
    let err = saver.put_ops(group(WriteOp::Put(twin))).await.unwrap_err();
    assert!(
        matches!(err, Error::VersionConflict { attempted: 2, .. }),
        "{err}"
    );
    assert_eq!(stored(saver.as_ref(), "g").await, []);

    // Writes of a checkpoint that does not exist.
    let err = saver
        .put_ops(group(WriteOp::Writes(a.config().at("ghost"), w("tg", 1))))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CheckpointNotFound { .. }), "{err}");
    assert_eq!(stored(saver.as_ref(), "g").await, []);

    // The same group with a good tail is stored whole.
    saver
        .put_ops(group(WriteOp::Writes(b.config(), w("tb", 2))))
        .await
        .unwrap();
    assert_eq!(stored(saver.as_ref(), "g").await, [(2, 1), (1, 1)]);

    // A commit order taken by a stored checkpoint.
    let late = new_on("g", Some(&b.checkpoint.id), Some(2), 1, json!("late"));
    let err = saver
        .put_ops(vec![
            WriteOp::Writes(b.config(), w("tc", 3)),
            WriteOp::Put(late),
        ])
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::VersionConflict { attempted: 2, .. }),
        "{err}"
    );
    assert_eq!(stored(saver.as_ref(), "g").await, [(2, 1), (1, 1)]);

    // Writes stored before are idempotent inside a group (the first value
    // stays); special writes replace, the last of a group winning.
    let again = PendingWrite::for_task("tb", "n", [("v".to_owned(), json!(99))]);
    let c = new_on("g", Some(&b.checkpoint.id), Some(3), 1, json!("c"));
    saver
        .put_ops(vec![
            WriteOp::Writes(b.config(), again),
            WriteOp::Writes(
                b.config(),
                vec![write("tb", ERROR_CHANNEL, json!({"message": "one"}))],
            ),
            WriteOp::Writes(
                b.config(),
                vec![write("tb", ERROR_CHANNEL, json!({"message": "two"}))],
            ),
            WriteOp::Put(c.clone()),
        ])
        .await
        .unwrap();
    let t = saver.get_tuple(&b.config()).await.unwrap().unwrap();
    let values: Vec<(i64, Value)> = t
        .pending_writes
        .iter()
        .map(|w| (w.idx, w.value.clone()))
        .collect();
    assert_eq!(values, [(-1, json!({"message": "two"})), (0, json!(2))]);
    assert_eq!(stored(saver.as_ref(), "g").await, [(3, 0), (2, 2), (1, 1)]);
}

/// A group larger than one statement can carry (thousands of rows).
async fn put_ops_takes_large_groups(saver: Arc<dyn Saver>) {
    let mut ops = Vec::new();
    let mut parent: Option<String> = None;
    for i in 0..600u64 {
        let c = new_on(
            "big",
            parent.as_deref(),
            Some(i + 1),
            i as i64 - 1,
            json!(i),
        );
        parent = Some(c.checkpoint.id.clone());
        let at = c.config();
        ops.push(WriteOp::Put(c));
        let writes = (0..7)
            .map(|k| write(&format!("task-{k}"), "v", json!(k)))
            .collect();
        ops.push(WriteOp::Writes(at, writes));
    }
    saver.put_ops(ops).await.unwrap();
    let listed = stored(saver.as_ref(), "big").await;
    assert_eq!(listed.len(), 600);
    assert!(listed.iter().all(|(_, w)| *w == 7), "{listed:?}");
    assert_eq!(listed[0].0, 600);
}

/// A group holding more than one checkpoint has `put_many`'s ceilings on
/// checkpoints and pending writes, and an oversized one stores nothing; a
/// group with one checkpoint (a step's writes and the checkpoint after
/// them) is not held to them.
async fn put_ops_limits_a_group_of_several_checkpoints(saver: Arc<dyn Saver>) {
    let exceeded = |r: weaver::Result<()>, limit: &str, ceiling: u64| match r {
        Err(Error::LimitExceeded {
            limit: l,
            ceiling: c,
            ..
        }) if l == limit && c == ceiling => {}
        other => panic!("{limit}: {other:?}"),
    };
    let puts: Vec<WriteOp> = (0..=limits::BATCH_MAX_CHECKPOINTS)
        .map(|i| WriteOp::Put(new_on(&format!("g{i}"), None, Some(1), 0, json!(i))))
        .collect();
    exceeded(saver.put_ops(puts).await, "put_ops checkpoints", 1_000);
    let many_writes = || -> Vec<PendingWrite> {
        PendingWrite::for_task(
            "task",
            "n",
            (0..=limits::BATCH_MAX_WRITES).map(|i| (format!("c{i}"), json!(i))),
        )
    };
    let (a, b) = (
        new_on("g-a", None, Some(1), 0, json!(0)),
        new_on("g-b", None, Some(1), 0, json!(0)),
    );
    let at_a = a.config();
    exceeded(
        saver
            .put_ops(vec![
                WriteOp::Put(a.clone()),
                WriteOp::Put(b.clone()),
                WriteOp::Writes(at_a.clone(), many_writes()),
            ])
            .await,
        "put_ops pending writes",
        10_000,
    );
    assert!(
        saver.list(&ListFilter::all()).await.unwrap().is_empty(),
        "nothing written"
    );
    // One checkpoint: its writes may pass the batch ceilings.
    saver
        .put_ops(vec![
            WriteOp::Put(a),
            WriteOp::Writes(at_a.clone(), many_writes()),
        ])
        .await
        .unwrap();
    let stored = saver.get_tuple(&at_a).await.unwrap().unwrap();
    assert_eq!(stored.pending_writes.len(), limits::BATCH_MAX_WRITES + 1);
}

async fn a_failed_put_leaves_no_trace_of_the_thread(saver: Arc<dyn Saver>) {
    chain(saver.as_ref(), "src", 1).await;
    let err = saver
        .put(new_on("ghost-thread", Some("ghost"), Some(1), 0, json!(0)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CheckpointNotFound { .. }), "{err}");
    assert!(
        saver
            .list_threads(None, 0)
            .await
            .unwrap()
            .iter()
            .all(|t| t.thread_id != "ghost-thread")
    );
    // The thread is still free: copying into it works.
    saver.copy_thread("src", "ghost-thread").await.unwrap();
    assert_eq!(
        saver
            .list(&ListFilter::thread("ghost-thread"))
            .await
            .unwrap()
            .len(),
        1
    );
}

/// An `extra` metadata key named like a field (`source`, `step`,
/// `parents`) is not stored: the checkpoint reads back (by `get_tuple`,
/// `list`, `put_many` and `copy_thread` alike) with the engine's fields
/// only, as its JSON form has them, and a filter on such a key matches the
/// field.
async fn extra_metadata_named_like_a_field_is_not_stored(saver: Arc<dyn Saver>) {
    let with_reserved = |thread: &str| {
        let mut new = new_on(thread, None, None, 3, json!(0));
        new.metadata.parents.insert("outer".into(), "p1".into());
        for (k, v) in [
            ("source", json!("mine")),
            ("step", json!(99)),
            ("parents", json!({"x": "y"})),
            ("user", json!("ann")),
        ] {
            new.metadata.extra.insert(k.into(), v);
        }
        new
    };
    saver.put(with_reserved("r")).await.unwrap();
    saver
        .put_many(vec![BatchEntry {
            checkpoint: with_reserved("b"),
            writes: Vec::new(),
        }])
        .await
        .unwrap();
    saver.copy_thread("r", "c").await.unwrap();
    for thread in ["r", "b", "c"] {
        let got = saver
            .get_tuple(&CheckpointRef::latest(thread))
            .await
            .unwrap()
            .unwrap();
        let listed = saver.list(&ListFilter::thread(thread)).await.unwrap();
        for m in [&got.metadata, &listed[0].metadata] {
            assert_eq!(
                m.extra.keys().collect::<Vec<_>>(),
                ["user"],
                "thread {thread}: {m:?}"
            );
            assert_eq!(m.step, 3);
            assert_eq!(m.source, CheckpointSource::Loop);
            assert_eq!(m.parents.len(), 1);
        }
    }
    let count = |filter: ListFilter| {
        let saver = saver.clone();
        async move { saver.list(&filter).await.unwrap().len() }
    };
    assert_eq!(count(ListFilter::thread("r").metadata("step", 3)).await, 1);
    assert_eq!(count(ListFilter::thread("r").metadata("step", 99)).await, 0);
    assert_eq!(
        count(ListFilter::thread("r").metadata("user", "ann")).await,
        1
    );
}

/// A [`WriteCheck`] holds the group to what the writer read: a special
/// write absent or holding exactly the value it read. When it does not hold,
/// the group fails with `VersionConflict` (the checked checkpoint's commit
/// order plus one) and nothing of it is stored; a check reads what the ops
/// before it in the group stored.
async fn put_ops_checks_a_write_before_storing(saver: Arc<dyn Saver>) {
    let root = new_on("c", None, Some(1), -1, json!("root"));
    let at = root.config();
    saver.put(root).await.unwrap();
    let answer =
        |values: Value| PendingWrite::for_task("task", "n", [(RESUME_CHANNEL.to_owned(), values)]);
    let idx = answer(json!([])).remove(0).idx;
    let check =
        |value: Option<Value>| WriteOp::Check(WriteCheck::new(at.clone(), "task", idx, value));
    let resume_values = |saver: Arc<dyn Saver>| {
        let at = at.clone();
        async move {
            let t = saver.get_tuple(&at).await.unwrap().unwrap();
            t.pending_writes
                .iter()
                .find(|w| w.task_id == "task" && w.channel == RESUME_CHANNEL)
                .map(|w| w.value.clone())
        }
    };
    // Nothing stored yet: a check for nothing holds.
    saver
        .put_ops(vec![
            check(None),
            WriteOp::Writes(at.clone(), answer(json!(["a"]))),
        ])
        .await
        .unwrap();
    assert_eq!(resume_values(saver.clone()).await, Some(json!(["a"])));
    // A second writer that read nothing, as the first did, is refused.
    let late = vec![
        check(None),
        WriteOp::Writes(at.clone(), answer(json!(["b"]))),
        WriteOp::Put(new_on(
            "c",
            Some(&at.checkpoint_id.clone().unwrap()),
            Some(2),
            0,
            json!("late"),
        )),
    ];
    let err = saver.put_ops(late).await.unwrap_err();
    assert!(
        matches!(&err, Error::VersionConflict { attempted: 2, thread_id, .. } if thread_id == "c"),
        "{err}"
    );
    assert_eq!(
        resume_values(saver.clone()).await,
        Some(json!(["a"])),
        "nothing of the group"
    );
    assert_eq!(stored(saver.as_ref(), "c").await, [(1, 1)]);
    // A value that differs in any way is refused.
    for read in [json!(["b"]), json!("a"), json!(["a", null])] {
        let err = saver
            .put_ops(vec![
                check(Some(read.clone())),
                WriteOp::Writes(at.clone(), answer(json!(["x"]))),
            ])
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::VersionConflict { .. }),
            "{read}: {err}"
        );
    }
    // What was read holds: the next answer is stored.
    saver
        .put_ops(vec![
            check(Some(json!(["a"]))),
            WriteOp::Writes(at.clone(), answer(json!(["a", "b"]))),
        ])
        .await
        .unwrap();
    assert_eq!(resume_values(saver.clone()).await, Some(json!(["a", "b"])));
    // Another task's write, or another index, is not the one checked.
    let other = PendingWrite::for_task("other", "n", [(RESUME_CHANNEL.to_owned(), json!(["z"]))]);
    saver.put_writes(&at, other).await.unwrap();
    saver
        .put_ops(vec![WriteOp::Check(WriteCheck::new(
            at.clone(),
            "task",
            0,
            None,
        ))])
        .await
        .unwrap();
    // A check sees the ops before it in its group.
    saver
        .put_ops(vec![
            WriteOp::Writes(at.clone(), answer(json!(["a", "b", "c"]))),
            check(Some(json!(["a", "b", "c"]))),
        ])
        .await
        .unwrap();
    // A missing checkpoint, or a check without a checkpoint id.
    let err = saver
        .put_ops(vec![WriteOp::Check(WriteCheck::new(
            at.at("ghost"),
            "task",
            idx,
            None,
        ))])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CheckpointNotFound { .. }), "{err}");
    let err = saver
        .put_ops(vec![WriteOp::Check(WriteCheck::new(
            CheckpointRef::latest("c"),
            "task",
            idx,
            None,
        ))])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert_eq!(
        resume_values(saver.clone()).await,
        Some(json!(["a", "b", "c"]))
    );
}

/// `get_tuple` and `list` return a delta channel whole, rebuilt from the
/// ancestors; `get_stored` and `list_stored` return the records as stored.
async fn reads_return_delta_channels_whole(saver: Arc<dyn Saver>) {
    let full = new_on("d", None, Some(1), 0, json!(["a"]));
    let mut ids = vec![full.checkpoint.id.clone()];
    saver.put(full).await.unwrap();
    for (depth, item) in [(1, "b"), (2, "c")] {
        let mut c = new_on(
            "d",
            ids.last().map(String::as_str),
            None,
            depth,
            json!(null),
        );
        c.checkpoint.channel_values.remove("v");
        c.checkpoint.v = DELTA_CHECKPOINT_FORMAT;
        c.checkpoint.deltas.insert(
            "v".into(),
            ChannelDelta {
                depth: depth as u32,
                items: vec![json!(item)],
            },
        );
        ids.push(c.checkpoint.id.clone());
        saver.put(c).await.unwrap();
    }
    let latest = CheckpointRef::latest("d");
    let head = saver.get_tuple(&latest).await.unwrap().unwrap();
    assert_eq!(head.checkpoint.channel_values["v"], json!(["a", "b", "c"]));
    let middle = saver.get_tuple(&latest.at(&ids[1])).await.unwrap().unwrap();
    assert_eq!(middle.checkpoint.channel_values["v"], json!(["a", "b"]));
    let listed: Vec<Value> = saver
        .list(&ListFilter::thread("d"))
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.checkpoint.channel_values["v"].clone())
        .collect();
    assert_eq!(
        listed,
        [json!(["a", "b", "c"]), json!(["a", "b"]), json!(["a"])]
    );
    let stored = saver.get_stored(&latest).await.unwrap().unwrap();
    assert!(!stored.checkpoint.channel_values.contains_key("v"));
    assert_eq!(stored.checkpoint.deltas["v"].items, [json!("c")]);
    let stored = saver.list_stored(&ListFilter::thread("d")).await.unwrap();
    assert_eq!(stored.len(), 3);
    assert!(
        stored[..2]
            .iter()
            .all(|t| !t.checkpoint.channel_values.contains_key("v"))
    );
}

/// `n` bytes of printable text no index can compress (a linear
/// congruential sequence over the letters and digits).
fn incompressible(n: usize, seed: u64) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ALPHABET[((x >> 33) % ALPHABET.len() as u64) as usize] as char
        })
        .collect()
}

/// A thread id and a namespace of `limits::MAX_ID_BYTES` bytes, a task id
/// of `limits::MAX_CHECKPOINT_ID_BYTES`, are stored, written to, read,
/// copied and deleted on every saver; one byte more is `LimitExceeded`,
/// with nothing stored (PostgreSQL's indexes cannot hold much longer
/// keys: a saver that took them would fail there with a `Storage` error).
async fn ids_up_to_their_limits_are_stored_and_longer_ones_refused(saver: Arc<dyn Saver>) {
    let limited = |r: weaver::Result<CheckpointRef>, what: &str| match r {
        Err(Error::LimitExceeded { .. }) => {}
        other => panic!("{what}: {other:?}"),
    };
    let thread = incompressible(limits::MAX_ID_BYTES, 1);
    let ns = incompressible(limits::MAX_ID_BYTES, 2);
    let task = incompressible(limits::MAX_CHECKPOINT_ID_BYTES, 3);
    let mut c = new_on(&thread, None, Some(1), 0, json!(1));
    c.checkpoint_ns = ns.clone();
    let at = saver.put(c).await.expect("ids at their limits");
    saver
        .put_writes(&at, vec![write(&task, "v", json!(2))])
        .await
        .expect("a task id at its limit");
    let read = saver.get_tuple(&at).await.unwrap().expect("stored");
    assert_eq!(read.pending_writes.len(), 1);
    assert_eq!(read.pending_writes[0].task_id, task);
    let copy = incompressible(limits::MAX_ID_BYTES, 4);
    saver.copy_thread(&thread, &copy).await.unwrap();
    saver.delete_thread(&thread).await.unwrap();
    saver.delete_thread(&copy).await.unwrap();

    let long = incompressible(limits::MAX_ID_BYTES + 1, 5);
    limited(
        saver.put(new_on(&long, None, Some(1), 0, json!(1))).await,
        "thread id",
    );
    let mut c = new_on("t", None, Some(1), 0, json!(1));
    c.checkpoint_ns = long.clone();
    limited(saver.put(c).await, "namespace");
    let mut c = new_on("t", None, Some(1), 0, json!(1));
    c.checkpoint.id = incompressible(limits::MAX_CHECKPOINT_ID_BYTES + 1, 6);
    limited(saver.put(c).await, "checkpoint id");
    let at = saver
        .put(new_on("t", None, Some(1), 0, json!(1)))
        .await
        .unwrap();
    let long_task = incompressible(limits::MAX_CHECKPOINT_ID_BYTES + 1, 7);
    let refused = saver
        .put_writes(&at, vec![write(&long_task, "v", json!(2))])
        .await;
    assert!(
        matches!(refused, Err(Error::LimitExceeded { .. })),
        "task id: {refused:?}"
    );
    let refused = saver.copy_thread("t", &long).await;
    assert!(
        matches!(refused, Err(Error::LimitExceeded { .. })),
        "copy target: {refused:?}"
    );
    assert!(saver.thread_info(&long).await.unwrap().is_none());
    assert!(
        saver
            .get_tuple(&at)
            .await
            .unwrap()
            .unwrap()
            .pending_writes
            .is_empty()
    );
    assert_eq!(saver.list_threads(None, 0).await.unwrap().len(), 1);
}
