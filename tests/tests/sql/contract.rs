//! The SQL savers behave exactly like `InMemorySaver`: one scenario runs on
//! all three and the logs of results (values and error messages) must match.

use std::sync::Arc;

use serde_json::json;
use weaver::checkpoint::{
    BatchEntry, CheckpointRef, ForkOptions, ListFilter, PendingWrite, PruneStrategy, limits,
};
use weaver::{Error, InMemorySaver, Saver};

use crate::common::{PgDb, SqliteDb, cp};

fn show<T: std::fmt::Debug>(r: &weaver::Result<T>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("err {e}"),
    }
}

fn w(task: &str, idx: i64, channel: &str, v: serde_json::Value) -> PendingWrite {
    PendingWrite {
        task_id: task.into(),
        task_path: format!("node_{task}"),
        idx,
        channel: channel.into(),
        value: v,
    }
}

/// Runs every contract operation and returns what each returned.
async fn scenario(s: Arc<dyn Saver>) -> Vec<String> {
    let mut log = Vec::new();
    let t1 = CheckpointRef::latest("t1");
    log.push(show(&s.get_tuple(&t1).await));
    log.push(show(&s.put(cp("t1", "a", None, Some(1))).await));
    log.push(show(
        &s.put_checkpoint_with_writes(
            cp("t1", "b", Some("a"), Some(2)),
            vec![w("x", 0, "foo", json!(1)), w("x", 1, "bar", json!([1, 2]))],
        )
        .await,
    ));
    // Taken number, taken id, missing parent, zero: nothing written.
    log.push(show(&s.put(cp("t1", "c", Some("b"), Some(2))).await));
    log.push(show(&s.put(cp("t1", "b", Some("a"), Some(9))).await));
    log.push(show(&s.put(cp("t1", "c", Some("nope"), Some(3))).await));
    log.push(show(&s.put(cp("t1", "c", None, Some(0))).await));
    // Next free number.
    log.push(show(&s.put(cp("t1", "c", Some("b"), None)).await));
    // Writes: idempotent for ordinary, replaced for special.
    let at_c = t1.at("c");
    log.push(show(
        &s.put_writes(
            &at_c,
            vec![
                w("z", 0, "foo", json!("first")),
                w("a", -1, "__error__", json!("e1")),
            ],
        )
        .await,
    ));
    log.push(show(
        &s.put_writes(
            &at_c,
            vec![
                w("z", 0, "foo", json!("second")),
                w("a", -1, "__error__", json!("e2")),
            ],
        )
        .await,
    ));
    log.push(show(
        &s.put_writes(&t1.at("missing"), vec![w("z", 0, "foo", json!(0))])
            .await,
    ));
    log.push(show(&s.get_tuple(&t1).await));
    log.push(show(&s.get_tuple(&t1.at("b")).await));
    log.push(show(&s.get_tuple(&t1.at("zzz")).await));
    // Listing.
    log.push(show(&s.list(&ListFilter::thread("t1")).await));
    log.push(show(&s.list(&ListFilter::thread("t1").limit(2)).await));
    log.push(show(&s.list(&ListFilter::thread("t1").before("c")).await));
    log.push(show(&s.list(&ListFilter::thread("t1").before("zzz")).await));
    log.push(show(&s.list(&ListFilter::all().before("c")).await));
    log.push(show(
        &s.list(&ListFilter::thread("t1").metadata("writer", "b"))
            .await,
    ));
    log.push(show(
        &s.list(
            &ListFilter::thread("t1")
                .metadata("source", "loop")
                .metadata("step", 0),
        )
        .await,
    ));
    log.push(show(
        &s.list(&ListFilter::thread("t1").metadata("source", "input"))
            .await,
    ));
    // Namespaces and other threads.
    let mut sub = cp("t1", "s1", None, Some(1));
    sub.checkpoint_ns = "child".into();
    log.push(show(&s.put(sub).await));
    log.push(show(&s.put(cp("t0", "o1", None, Some(1))).await));
    log.push(show(&s.list(&ListFilter::all()).await));
    log.push(show(&s.list(&ListFilter::all().ns("child")).await));
    log.push(show(&s.list(&ListFilter::all().limit(3)).await));
    // One thread across its namespaces ("", "a-sub", "child") under a
    // limit, which the SQL savers read one namespace after another.
    for (id, parent, order) in [("s2", None, 1), ("s3", Some("s2"), 2)] {
        let mut new = cp("t1", id, parent, Some(order));
        new.checkpoint_ns = "a-sub".into();
        log.push(show(&s.put(new).await));
    }
    for limit in [1, 3, 4, 5, 6, 10] {
        log.push(show(&s.list(&ListFilter::thread("t1").limit(limit)).await));
    }
    log.push(show(
        &s.list(&ListFilter::thread("t1").before("c").limit(4)).await,
    ));
    // A namespace with no match is passed over, not the end of the listing.
    for writer in ["s1", "s3"] {
        log.push(show(
            &s.list(&ListFilter::thread("t1").metadata("writer", writer).limit(5))
                .await,
        ));
    }
    log.push(show(&s.list(&ListFilter::thread("nobody").limit(5)).await));
    // put_many: atomic, parents within the batch, conflicts roll back all.
    let batch = vec![
        BatchEntry {
            checkpoint: cp("t2", "m1", None, Some(1)),
            writes: vec![w("q", 0, "foo", json!(5))],
        },
        BatchEntry {
            checkpoint: cp("t2", "m2", Some("m1"), Some(2)),
            writes: vec![],
        },
    ];
    log.push(show(&s.put_many(batch).await));
    let bad = vec![
        BatchEntry {
            checkpoint: cp("t2", "m3", Some("m2"), Some(3)),
            writes: vec![],
        },
        BatchEntry {
            checkpoint: cp("t2", "m4", Some("m3"), Some(2)),
            writes: vec![],
        },
    ];
    log.push(show(&s.put_many(bad).await));
    log.push(show(&s.list(&ListFilter::thread("t2")).await));
    let too_many: Vec<BatchEntry> = (0..1001)
        .map(|i| BatchEntry {
            checkpoint: cp("t3", &format!("x{i}"), None, Some(i + 1)),
            writes: vec![],
        })
        .collect();
    log.push(show(&s.put_many(too_many).await));
    // fork_at, copy_thread.
    log.push(show(
        &s.fork_at(&t1.at("c"), "f1", ForkOptions::default()).await,
    ));
    log.push(show(&s.list(&ListFilter::thread("f1")).await));
    log.push(show(
        &s.fork_at(&t1.at("c"), "f1", ForkOptions::default()).await,
    ));
    log.push(show(
        &s.fork_at(&t1.at("c"), "f2", ForkOptions::default().max_checkpoints(2))
            .await,
    ));
    log.push(show(
        &s.fork_at(&t1.at("c"), "f2", ForkOptions::default().max_bytes(10))
            .await,
    ));
    log.push(show(
        &s.fork_at(
            &t1.at("c"),
            "f2",
            ForkOptions::default().max_checkpoints(20_000),
        )
        .await,
    ));
    log.push(show(
        &s.fork_at(&t1.at("nope"), "f2", ForkOptions::default())
            .await,
    ));
    log.push(show(&s.copy_thread("t1", "c1").await));
    log.push(show(&s.list(&ListFilter::thread("c1")).await));
    log.push(show(&s.copy_thread("t1", "c1").await));
    log.push(show(&s.copy_thread("ghost", "c2").await));
    log.push(show(&crate::common::counts(s.list_threads(None, 0).await)));
    log.push(show(&crate::common::counts(
        s.list_threads(Some(2), 1).await,
    )));
    // prune and delete.
    log.push(show(
        &s.prune(&["t1".to_owned()], PruneStrategy::KeepLatest).await,
    ));
    log.push(show(&s.list(&ListFilter::thread("t1")).await));
    log.push(show(
        &s.prune(&["t2".to_owned()], PruneStrategy::Delete).await,
    ));
    log.push(show(&s.delete_thread("c1").await));
    log.push(show(&s.delete_thread("ghost").await));
    log.push(show(&crate::common::counts(s.list_threads(None, 0).await)));
    log
}

/// `fork_at`'s byte ceiling counts the pending writes it copies, not only
/// the checkpoints: a fork one byte short of both copies nothing.
async fn fork_ceiling_counts_writes(s: Arc<dyn Saver>) {
    s.put(cp("fw", "a", None, Some(1))).await.unwrap();
    let at = s.put(cp("fw", "b", Some("a"), Some(2))).await.unwrap();
    let big = w("x", 0, "foo", json!("y".repeat(4000)));
    s.put_writes(&at, vec![big.clone()]).await.unwrap();
    let line = s.lineage(&at, 2, None).await.unwrap();
    assert_eq!(line.len(), 2);
    let records: usize = line
        .iter()
        .map(|r| limits::record_size(&r.checkpoint).unwrap())
        .sum();
    let all = records + limits::write_size(&big).unwrap();
    let short = ForkOptions::default().max_bytes(all - 1);
    let r = s.fork_at(&at, "fw-short", short).await;
    assert!(
        matches!(r, Err(Error::LimitExceeded { limit: "fork_at bytes", value, .. }) if value == all as u64),
        "{r:?} (records {records} bytes, {all} with the write)"
    );
    let copied = s.list(&ListFilter::thread("fw-short")).await.unwrap();
    assert!(copied.is_empty());
    let roomy = ForkOptions::default().max_bytes(all);
    s.fork_at(&at, "fw-roomy", roomy).await.unwrap();
    let head = s
        .get_tuple(&CheckpointRef::latest("fw-roomy"))
        .await
        .unwrap();
    assert_eq!(head.map(|t| t.pending_writes), Some(vec![big]));
}

#[tokio::test]
async fn in_memory_fork_ceiling_counts_writes() {
    fork_ceiling_counts_writes(Arc::new(InMemorySaver::new())).await;
}

async fn assert_like_memory(s: Arc<dyn Saver>) {
    // Filter keys reach SQL only as bound parameters, and only plain identifiers.
    for key in ["bad key'--", "a.b", "", "1x", "k\"); DROP TABLE x; --"] {
        assert!(
            matches!(
                s.list(&ListFilter::thread("t1").metadata(key, 1)).await,
                Err(Error::InvalidArgument { .. })
            ),
            "{key}"
        );
    }
    let expected = scenario(Arc::new(InMemorySaver::new())).await;
    let got = scenario(s.clone()).await;
    for (i, (e, g)) in expected.iter().zip(&got).enumerate() {
        assert_eq!(g, e, "step {i} differs from InMemorySaver");
    }
    assert_eq!(got.len(), expected.len());
    fork_ceiling_counts_writes(s).await;
}

#[tokio::test]
async fn sqlite_behaves_like_memory() {
    let db = SqliteDb::new().await;
    assert_like_memory(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn postgres_behaves_like_memory() {
    let db = PgDb::new().await;
    assert_like_memory(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}

#[tokio::test]
async fn unmigrated_database_is_a_typed_error() {
    let db = SqliteDb::new().await;
    let s = weaver::checkpoint::SqliteSaver::new(db.pool.clone());
    let err = s.get_tuple(&CheckpointRef::latest("t")).await.unwrap_err();
    match err {
        Error::MigrationRequired {
            found: 0,
            required: 8,
            ref hint,
            ..
        } => {
            assert!(hint.contains("migrate::up"), "{hint}")
        }
        other => panic!("expected MigrationRequired, got {other:?}"),
    }
    let pg = PgDb::new().await;
    let s = weaver::checkpoint::PostgresSaver::new(pg.pool.clone())
        .with_prefix(&pg.schema)
        .unwrap();
    assert!(matches!(
        s.list(&ListFilter::all()).await,
        Err(Error::MigrationRequired { found: 0, .. })
    ));
    pg.drop_schema().await;
}

async fn shallow_checks(s: Arc<dyn Saver>) {
    let t = CheckpointRef::latest("t");
    s.put(cp("t", "a", None, Some(1))).await.unwrap();
    s.put_writes(&t.at("a"), vec![w("x", 0, "foo", json!(1))])
        .await
        .unwrap();
    s.put_checkpoint_with_writes(
        cp("t", "b", Some("a"), Some(2)),
        vec![w("y", 0, "foo", json!(2))],
    )
    .await
    .unwrap();
    let hist = s.list(&ListFilter::thread("t")).await.unwrap();
    assert_eq!(hist.len(), 1);
    assert_eq!(hist[0].checkpoint.checkpoint_id_for_test(), "b");
    assert_eq!(hist[0].pending_writes.len(), 1);
    assert_eq!(hist[0].commit_order, 2);
    // The latest, with its writes, is what a resume needs.
    let head = s.get_tuple(&t).await.unwrap().unwrap();
    assert_eq!(head.pending_writes[0].value, json!(2));
    assert!(matches!(
        s.get_tuple(&t.at("a")).await,
        Err(Error::ShallowSaver { .. })
    ));
    assert!(matches!(
        s.list(&ListFilter::thread("t").before("a")).await,
        Err(Error::ShallowSaver { .. })
    ));
    assert!(matches!(
        s.fork_at(&t.at("a"), "f", ForkOptions::default()).await,
        Err(Error::ShallowSaver { .. })
    ));
    // A stale writer cannot sneak below the head.
    assert!(matches!(
        s.put(cp("t", "old", None, Some(1))).await,
        Err(Error::VersionConflict { attempted: 1, .. })
    ));
    assert!(matches!(
        s.put(cp("t", "c", Some("b"), Some(2))).await,
        Err(Error::VersionConflict { attempted: 2, .. })
    ));
    let f = s
        .fork_at(&t.at("b"), "f", ForkOptions::default())
        .await
        .unwrap();
    assert_eq!(f.checkpoint_id.as_deref(), Some("b"));
    assert_eq!(s.list(&ListFilter::thread("f")).await.unwrap().len(), 1);
    // Unknown thread: nothing to be shallow about.
    assert!(
        s.get_tuple(&CheckpointRef::latest("none").at("x"))
            .await
            .unwrap()
            .is_none()
    );
}

trait IdForTest {
    fn checkpoint_id_for_test(&self) -> &str;
}
impl IdForTest for weaver::checkpoint::Checkpoint {
    fn checkpoint_id_for_test(&self) -> &str {
        &self.id
    }
}

#[tokio::test]
async fn shallow_sqlite() {
    let db = SqliteDb::new().await;
    shallow_checks(Arc::new(db.saver().await.shallow())).await;
}

#[tokio::test]
async fn shallow_postgres() {
    let db = PgDb::new().await;
    shallow_checks(Arc::new(db.saver().await.shallow())).await;
    db.drop_schema().await;
}

/// On a saver keeping only the latest checkpoint, `resume(null)` at a stop
/// after the last node cannot see the step before (not stored): it is
/// `NoPendingInterrupt`, as on a finished thread, not the saver's refusal
/// to read an older checkpoint.
#[tokio::test]
async fn a_stop_after_the_last_node_on_a_shallow_saver_has_nothing_to_resume() {
    use weaver::prelude::*;
    use weaver_tests::states::{Steps, StepsUpdate};
    let db = SqliteDb::new().await;
    let graph = Graph::<Steps>::new("last")
        .add_node("a", |_: &Steps| StepsUpdate::default().foo("done"))
        .add_sequence([START, "a", END])
        .compile(
            Compile::new()
                .checkpointer(db.saver().await.shallow())
                .interrupt_after(["a"]),
        )
        .unwrap();
    let config = RunConfig::thread("t");
    assert!(
        graph
            .invoke(Steps::default(), &config)
            .await
            .unwrap()
            .is_interrupted()
    );
    let resumed = graph.resume(serde_json::Value::Null, &config).await;
    assert!(
        matches!(resumed, Err(Error::NoPendingInterrupt { .. })),
        "{resumed:?}"
    );
}
