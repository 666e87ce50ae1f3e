//! The MongoDB saver: the shared conformance suite, setup, conflicts
//! between writers, encrypted payloads, and writes cut off by their
//! caller, on the server at `MONGODB_URL`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use weaver::checkpoint::{CheckpointRef, ListFilter};
use weaver::mongo::MongoSaver;
use weaver::{Error, Saver};
use weaver_tests::conformance::{new_on, run_saver_conformance};
use weaver_tests::cut_off;
use weaver_tests::mongo::MongoDb;

use crate::common::cp;

/// A saver on `db`, set up.
async fn saver(db: &MongoDb) -> MongoSaver {
    let saver = MongoSaver::new(db.client.clone(), &db.name, "w_");
    saver.setup().await.unwrap();
    saver
}

/// The fleet listing and retention suite, as on the other savers.
#[tokio::test]
async fn fleet_mongo() {
    let dbs: Arc<tokio::sync::Mutex<Vec<MongoDb>>> = Arc::default();
    weaver_tests::fleet::run_fleet_suite(|| {
        let dbs = dbs.clone();
        async move {
            let db = MongoDb::new().await;
            let saver = saver(&db).await;
            dbs.lock().await.push(db);
            Arc::new(saver) as Arc<dyn Saver>
        }
    })
    .await;
    for db in std::mem::take(&mut *dbs.lock().await) {
        db.drop_db().await;
    }
}

#[tokio::test]
async fn conformance_mongo() {
    // Its largest records stall the test server: no lease test runs beside it.
    let _stalling = weaver_tests::mongo::stalling().await;
    let dbs: Arc<tokio::sync::Mutex<Vec<MongoDb>>> = Arc::default();
    run_saver_conformance(|| {
        let dbs = dbs.clone();
        async move {
            let db = MongoDb::new().await;
            let saver = saver(&db).await;
            dbs.lock().await.push(db);
            Arc::new(saver) as Arc<dyn Saver>
        }
    })
    .await;
    for db in std::mem::take(&mut *dbs.lock().await) {
        db.drop_db().await;
    }
}

#[tokio::test]
async fn a_saver_before_setup_fails_naming_the_setup_call() {
    let db = MongoDb::new().await;
    let saver = MongoSaver::new(db.client.clone(), &db.name, "w_");
    let err = saver
        .get_tuple(&CheckpointRef::latest("t"))
        .await
        .unwrap_err();
    match &err {
        Error::MigrationRequired { found, hint, .. } => {
            assert_eq!(*found, 0);
            assert!(hint.contains("MongoSaver::setup()"), "{hint}");
        }
        other => panic!("expected MigrationRequired, got {other:?}"),
    }
    // Setup is idempotent, and a saver built afterwards works.
    saver.setup().await.unwrap();
    saver.setup().await.unwrap();
    let fresh = MongoSaver::new(db.client.clone(), &db.name, "w_");
    fresh
        .put(new_on("t", None, None, 0, json!(1)))
        .await
        .unwrap();
    assert_eq!(fresh.list(&ListFilter::thread("t")).await.unwrap().len(), 1);
    // Another prefix is another set of collections, not set up.
    let other = MongoSaver::new(db.client.clone(), &db.name, "x_");
    assert!(matches!(
        other.list(&ListFilter::thread("t")).await,
        Err(Error::MigrationRequired { .. })
    ));
    db.drop_db().await;
}

#[tokio::test]
async fn two_writers_of_one_version_one_conflicts() {
    let db = MongoDb::new().await;
    let first = saver(&db).await;
    let root = first
        .put(new_on("t", None, Some(1), 0, json!(0)))
        .await
        .unwrap();
    let parent = root.checkpoint_id.clone();
    // Two savers on their own clients write commit order 2 at once.
    let a = MongoSaver::connect(&weaver_tests::mongo::mongo_url(), &db.name, "w_")
        .await
        .unwrap();
    let b = MongoSaver::connect(&weaver_tests::mongo::mongo_url(), &db.name, "w_")
        .await
        .unwrap();
    let (ra, rb) = tokio::join!(
        a.put(new_on("t", parent.as_deref(), Some(2), 1, json!("a"))),
        b.put(new_on("t", parent.as_deref(), Some(2), 1, json!("b"))),
    );
    let results = [ra, rb];
    let won = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(won, 1, "{results:?}");
    let lost = results.into_iter().find_map(Result::err).unwrap();
    assert!(
        matches!(lost, Error::VersionConflict { attempted: 2, .. }),
        "{lost:?}"
    );
    assert_eq!(first.list(&ListFilter::thread("t")).await.unwrap().len(), 2);
    // Writers that take "the next free" order both land, one after the other.
    let (ra, rb) = tokio::join!(
        a.put(new_on("t", None, None, 2, json!("x"))),
        b.put(new_on("t", None, None, 2, json!("y"))),
    );
    ra.unwrap();
    rb.unwrap();
    let orders: Vec<u64> = first
        .list(&ListFilter::thread("t"))
        .await
        .unwrap()
        .iter()
        .map(|t| t.commit_order)
        .collect();
    assert_eq!(orders, [4, 3, 2, 1]);
    // Two writers of the same pending write: both succeed, the first
    // stored stays (ordinary writes are idempotent per task and index).
    let write = |v: i64| {
        vec![weaver::checkpoint::PendingWrite {
            task_id: "task".into(),
            task_path: "node".into(),
            idx: 0,
            channel: "v".into(),
            value: json!(v),
        }]
    };
    let (ra, rb) = tokio::join!(a.put_writes(&root, write(1)), b.put_writes(&root, write(2)));
    ra.unwrap();
    rb.unwrap();
    let stored = first
        .get_tuple(&root)
        .await
        .unwrap()
        .unwrap()
        .pending_writes;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(stored[0].value == json!(1) || stored[0].value == json!(2));
    db.drop_db().await;
}

#[tokio::test]
async fn encrypted_payloads_are_binary_and_bound_to_their_document() {
    use mongodb::bson::{Document, doc};
    use weaver::codec::{EncryptedCodec, EncryptionKey};
    let db = MongoDb::new().await;
    let codec = || EncryptedCodec::json([EncryptionKey::new("k1", [7; 32]).unwrap()]).unwrap();
    let saver = saver(&db).await.with_codec(codec());
    let one = saver
        .put(new_on("t", None, None, 0, json!("secret")))
        .await
        .unwrap();
    let two = saver
        .put(new_on(
            "t",
            one.checkpoint_id.as_deref(),
            None,
            1,
            json!("other"),
        ))
        .await
        .unwrap();
    let back = saver.get_tuple(&one).await.unwrap().unwrap();
    assert_eq!(back.checkpoint.channel_values["v"], json!("secret"));
    let coll = db
        .client
        .database(&db.name)
        .collection::<Document>("w_checkpoints");
    let raw = coll
        .find_one(doc! { "checkpoint_id": one.checkpoint_id.as_deref().unwrap() })
        .await
        .unwrap()
        .unwrap();
    let payload = raw.get_binary_generic("payload").unwrap().clone();
    assert!(!String::from_utf8_lossy(&payload).contains("secret"));
    // A payload moved into another checkpoint's document fails to open.
    coll.update_one(
        doc! { "checkpoint_id": two.checkpoint_id.as_deref().unwrap() },
        doc! { "$set": { "payload": mongodb::bson::Binary {
        subtype: mongodb::bson::spec::BinarySubtype::Generic, bytes: payload } } },
    )
    .await
    .unwrap();
    let err = saver.get_tuple(&two).await.unwrap_err();
    assert!(matches!(err, Error::Decrypt { .. }), "{err:?}");
    // Without the key, a plain saver cannot read it.
    let plain = MongoSaver::new(db.client.clone(), &db.name, "w_");
    assert!(plain.get_tuple(&one).await.is_err());
    db.drop_db().await;
}

/// A delete, a prune and a fork meeting another client's open transaction
/// on the same documents (a transient write conflict) run again once it
/// ends, as writes do, instead of failing with `Storage`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_and_prunes_meeting_an_open_writer_run_again() {
    use mongodb::bson::{Document, doc};
    use weaver::checkpoint::PruneStrategy;
    let db = MongoDb::new().await;
    let saver = Arc::new(saver(&db).await);
    for thread in ["a", "b", "c"] {
        let one = saver
            .put(new_on(thread, None, None, 0, json!(1)))
            .await
            .unwrap();
        let parent = one.checkpoint_id.as_deref();
        saver
            .put(new_on(thread, parent, None, 1, json!(2)))
            .await
            .unwrap();
    }
    let coll = db
        .client
        .database(&db.name)
        .collection::<Document>("w_checkpoints");
    for thread in ["a", "b", "c"] {
        // Another client writes the thread's checkpoints in a transaction
        // it ends a moment later.
        let mut other = db.client.start_session().await.unwrap();
        other.start_transaction().await.unwrap();
        coll.update_many(
            doc! { "thread_id": thread },
            doc! { "$set": { "seen": true } },
        )
        .session(&mut other)
        .await
        .unwrap();
        let ender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            other.commit_transaction().await.unwrap();
        });
        match thread {
            "a" => saver.delete_thread(thread).await.unwrap(),
            "b" => {
                let ids = [thread.to_owned()];
                saver.prune(&ids, PruneStrategy::Delete).await.unwrap();
            }
            _ => {
                let ids = [thread.to_owned()];
                saver.prune(&ids, PruneStrategy::KeepLatest).await.unwrap();
            }
        }
        ender.await.unwrap();
        let left = saver.list(&ListFilter::thread(thread)).await.unwrap();
        let want = usize::from(thread == "c");
        assert_eq!(left.len(), want, "{thread}: {left:?}");
    }
    db.drop_db().await;
}

/// A checkpoint put while a delete of its thread is in flight (another
/// client's transaction that removed the thread's documents, not yet
/// committed) never lands under the deleted parent: the put meets the
/// delete on the parent's document, waits for it, and then finds its
/// parent gone, leaving the thread empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_racing_a_thread_delete_leaves_no_orphan() {
    use mongodb::bson::{Document, doc};
    let db = MongoDb::new().await;
    let saver = Arc::new(saver(&db).await);
    let one = saver
        .put(new_on("t", None, None, 0, json!(1)))
        .await
        .unwrap();
    let mut other = db.client.start_session().await.unwrap();
    other.start_transaction().await.unwrap();
    for coll in ["w_checkpoints", "w_writes"] {
        db.client
            .database(&db.name)
            .collection::<Document>(coll)
            .delete_many(doc! { "thread_id": "t" })
            .session(&mut other)
            .await
            .unwrap();
    }
    let put = tokio::spawn({
        let saver = saver.clone();
        let parent = one.checkpoint_id.clone();
        async move {
            saver
                .put(new_on("t", parent.as_deref(), None, 1, json!(2)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    other.commit_transaction().await.unwrap();
    let put = put.await.unwrap();
    let left = saver.list(&ListFilter::thread("t")).await.unwrap();
    assert!(left.is_empty(), "put {put:?} left {left:?}");
    assert!(
        matches!(put, Err(Error::CheckpointNotFound { .. })),
        "{put:?}"
    );
    db.drop_db().await;
}

/// A prune never keeps a record it cannot read: a corrupt kept record
/// (here the newest, whose parent stays, so nothing needs rebuilding) fails
/// the prune with `Decode` naming it, and nothing is deleted; deleting the
/// thread is the way out. As on SQL.
#[tokio::test]
async fn prune_refuses_to_keep_a_corrupt_checkpoint_and_deletes_nothing() {
    use mongodb::bson::{Document, doc};
    use weaver::checkpoint::PruneStrategy;
    let db = MongoDb::new().await;
    let saver = saver(&db).await;
    let ids = ["c1", "c2", "c3", "c4"];
    for (i, id) in ids.iter().enumerate() {
        let parent = i.checked_sub(1).map(|p| ids[p]);
        saver
            .put(crate::common::cp("t", id, parent, None))
            .await
            .unwrap();
    }
    db.client
        .database(&db.name)
        .collection::<Document>("w_checkpoints")
        .update_one(
            doc! { "checkpoint_id": "c4" },
            doc! { "$set": { "payload": "not binary" } },
        )
        .await
        .unwrap();
    for keep in [PruneStrategy::KeepLatest, PruneStrategy::KeepLast(2)] {
        let r = saver.prune(&["t".to_owned()], keep).await;
        assert!(
            matches!(&r, Err(Error::Decode { .. }) if format!("{r:?}").contains("payload")),
            "{keep:?}: {r:?}"
        );
        let n = saver.thread_info("t").await.unwrap().map(|t| t.checkpoints);
        assert_eq!(n, Some(4), "{keep:?} deleted records");
    }
    let r = saver.prune(&["t".to_owned()], PruneStrategy::Delete).await;
    assert!(matches!(r, Ok(4)), "{r:?}");
    db.drop_db().await;
}

/// A fork stored on a record a `KeepLast` prune removes, while the prune
/// is under way (held by another client's open transaction on a record it
/// rebuilds), is refused for want of its parent, or kept and read back
/// whole: never left stored as deltas on a deleted parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_stored_during_a_prune_is_refused_or_kept_whole() {
    use mongodb::bson::{Document, doc};
    use weaver::checkpoint::PruneStrategy;
    use weaver::prelude::*;
    let db = MongoDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(saver(&db).await);
    let graph = crate::common::chat(saver.clone());
    let config = RunConfig::thread("race");
    for i in 0..4 {
        graph.invoke(crate::common::user(i), &config).await.unwrap(); // orders 1-12
    }
    let history = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let forked = history
        .iter()
        .find(|s| s.commit_order == 5)
        .unwrap()
        .clone();
    // Another client holds the first kept record (order 10, rebuilt by
    // the prune since its parent goes): the prune runs again until it ends.
    let mut other = db.client.start_session().await.unwrap();
    other.start_transaction().await.unwrap();
    db.client
        .database(&db.name)
        .collection::<Document>("w_checkpoints")
        .update_one(
            doc! { "thread_id": "race", "commit_order": 10_i64 },
            doc! { "$set": { "seen": true } },
        )
        .session(&mut other)
        .await
        .unwrap();
    let pruning = tokio::spawn({
        let saver = saver.clone();
        async move {
            saver
                .prune(&["race".to_owned()], PruneStrategy::KeepLast(3))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fork = graph
        .update_state(
            &forked.config,
            crate::common::ChatUpdate::default().messages(vec!["edited".to_owned()]),
            Some("chat"),
        )
        .await;
    other.commit_transaction().await.unwrap();
    pruning.await.unwrap().unwrap();
    match fork {
        Ok(fork) => {
            let mut want = forked.values.messages.clone();
            want.push("edited".to_owned());
            // A saver of its own: nothing this process cached of the
            // removed records helps the read.
            let elsewhere: Arc<dyn Saver> = Arc::new(crate::mongo::saver(&db).await);
            let fresh = crate::common::chat(elsewhere);
            let got = fresh.get_state(&fork).await;
            assert_eq!(got.unwrap().values.messages, want);
        }
        Err(e) => assert!(matches!(e, Error::CheckpointNotFound { .. }), "{e:?}"),
    }
    db.drop_db().await;
}

/// A fork or copy into a thread holding write documents whose checkpoint
/// is gone (a task's writes that outlived a delete of their thread) stores
/// the source's writes, not those documents, which would otherwise win (an
/// ordinary write keeps the value stored first) or come along.
#[tokio::test]
async fn fork_and_copy_ignore_orphan_writes() {
    use mongodb::bson::{Document, doc};
    use weaver::checkpoint::{ForkOptions, PendingWrite};
    let w = |task: &str, v: serde_json::Value| PendingWrite {
        task_id: task.into(),
        task_path: format!("node_{task}"),
        idx: 0,
        channel: "foo".into(),
        value: v,
    };
    let db = MongoDb::new().await;
    let saver = saver(&db).await;
    let cps = db
        .client
        .database(&db.name)
        .collection::<Document>("w_checkpoints");
    saver
        .put_checkpoint_with_writes(cp("src", "a", None, Some(1)), vec![w("x", json!("fresh"))])
        .await
        .unwrap();
    for thread in ["forked", "copied"] {
        saver
            .put_checkpoint_with_writes(
                cp(thread, "a", None, Some(1)),
                vec![w("x", json!("stale")), w("y", json!("extra"))],
            )
            .await
            .unwrap();
        cps.delete_one(doc! { "thread_id": thread, "checkpoint_id": "a" })
            .await
            .unwrap();
    }
    let want = vec![w("x", json!("fresh"))];
    saver
        .fork_at(
            &CheckpointRef::latest("src").at("a"),
            "forked",
            ForkOptions::default(),
        )
        .await
        .unwrap();
    let t = saver
        .get_tuple(&CheckpointRef::latest("forked"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.pending_writes, want, "fork_at");
    saver.copy_thread("src", "copied").await.unwrap();
    let t = saver
        .get_tuple(&CheckpointRef::latest("copied"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.pending_writes, want, "copy_thread");
    db.drop_db().await;
}

/// A copy meeting a first write of its target thread (another client's
/// transaction, open when the copy starts, committed a moment later) waits
/// for it and says the target exists, instead of a version conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_racing_a_first_write_of_its_target_is_thread_exists() {
    use mongodb::bson::{Document, doc};
    let db = MongoDb::new().await;
    let saver = Arc::new(saver(&db).await);
    saver.put(cp("src", "a", None, Some(1))).await.unwrap();
    let stored = db
        .client
        .database(&db.name)
        .collection::<Document>("w_checkpoints")
        .find_one(doc! { "thread_id": "src" })
        .await
        .unwrap()
        .unwrap();
    let mut first = stored.clone();
    first.remove("_id");
    first.insert("thread_id", "dst");
    let mut other = db.client.start_session().await.unwrap();
    other.start_transaction().await.unwrap();
    db.client
        .database(&db.name)
        .collection::<Document>("w_checkpoints")
        .insert_one(first)
        .session(&mut other)
        .await
        .unwrap();
    let copy = tokio::spawn({
        let saver = saver.clone();
        async move { saver.copy_thread("src", "dst").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    other.commit_transaction().await.unwrap();
    let r = copy.await.unwrap();
    assert!(matches!(r, Err(Error::ThreadExists { .. })), "{r:?}");
    db.drop_db().await;
}

/// A listing of more checkpoints than one query for their writes names
/// (ids go to the server in chunks: a query is one document, 16 MB at
/// most) attaches every checkpoint's writes, the first's and the last's.
#[tokio::test]
async fn a_long_listing_attaches_every_checkpoints_writes() {
    use weaver::checkpoint::PendingWrite;
    let db = MongoDb::new().await;
    let saver = saver(&db).await;
    let w = |task: &str| PendingWrite {
        task_id: task.into(),
        task_path: format!("node_{task}"),
        idx: 0,
        channel: "foo".into(),
        value: json!(task),
    };
    saver
        .put_checkpoint_with_writes(cp("t", "c0000", None, Some(1)), vec![w("first")])
        .await
        .unwrap();
    const N: i64 = 1_050;
    for batch in (2..N).collect::<Vec<_>>().chunks(1_000) {
        let entries = batch
            .iter()
            .map(|&o| weaver::checkpoint::BatchEntry {
                checkpoint: cp("t", &format!("c{o:04}"), None, Some(o as u64)),
                writes: Vec::new(),
            })
            .collect();
        saver.put_many(entries).await.unwrap();
    }
    saver
        .put_checkpoint_with_writes(
            cp("t", &format!("c{N:04}"), None, Some(N as u64)),
            vec![w("last")],
        )
        .await
        .unwrap();
    let all = saver.list(&ListFilter::thread("t")).await.unwrap();
    assert_eq!(all.len(), N as usize);
    let writes: Vec<&str> = all
        .iter()
        .flat_map(|t| &t.pending_writes)
        .map(|w| w.task_id.as_str())
        .collect();
    assert_eq!(writes, ["last", "first"]);
    db.drop_db().await;
}

/// Metadata nested deeper than a MongoDB document holds is refused with a
/// typed `LimitExceeded` before anything is sent; the deepest it holds is
/// stored and read back.
#[tokio::test]
async fn metadata_nested_deeper_than_a_document_holds_is_refused() {
    use weaver::mongo::MAX_METADATA_DEPTH;
    let db = MongoDb::new().await;
    let saver = saver(&db).await;
    // A `deep` value that makes the metadata `depth` deep: the metadata
    // object, then arrays.
    let nested = |depth: usize| {
        let mut v = json!(1);
        for _ in 0..depth - 1 {
            v = json!([v]);
        }
        v
    };
    let mut fits = new_on("fits", None, None, 0, json!(1));
    fits.metadata
        .extra
        .insert("deep".into(), nested(MAX_METADATA_DEPTH));
    let at = saver.put(fits.clone()).await.unwrap();
    let back = saver.get_tuple(&at).await.unwrap().unwrap();
    assert_eq!(back.metadata.extra["deep"], fits.metadata.extra["deep"]);
    let mut deeper = new_on("deeper", None, None, 0, json!(1));
    deeper
        .metadata
        .extra
        .insert("deep".into(), nested(MAX_METADATA_DEPTH + 1));
    match saver.put(deeper).await {
        Err(Error::LimitExceeded { value, ceiling, .. }) => {
            assert_eq!(
                (value, ceiling),
                (MAX_METADATA_DEPTH as u64 + 1, MAX_METADATA_DEPTH as u64)
            );
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
    assert!(
        saver
            .list(&ListFilter::thread("deeper"))
            .await
            .unwrap()
            .is_empty()
    );
    db.drop_db().await;
}

/// Under an encrypting codec a metadata key stored sealed cannot be
/// matched by the server: a filter on it is refused, as on SQL; a key
/// listed as plaintext filters.
#[tokio::test]
async fn a_filter_on_a_sealed_metadata_key_is_refused() {
    use weaver::codec::{EncryptedCodec, EncryptionKey};
    let db = MongoDb::new().await;
    let codec = EncryptedCodec::json([EncryptionKey::new("k1", [7; 32]).unwrap()])
        .unwrap()
        .with_plaintext_metadata(["tenant"])
        .unwrap();
    let saver = saver(&db).await.with_codec(codec);
    let mut c = new_on("t", None, None, 0, json!(1));
    c.metadata.extra.insert("tenant".into(), json!("acme"));
    c.metadata
        .extra
        .insert("email".into(), json!("ann@example.com"));
    saver.put(c).await.unwrap();
    let by = |k: &str, v: &str| ListFilter::thread("t").metadata(k, v);
    assert_eq!(saver.list(&by("tenant", "acme")).await.unwrap().len(), 1);
    match saver.list(&by("email", "ann@example.com")).await {
        Err(Error::InvalidArgument { reason }) => assert!(reason.contains("`email`"), "{reason}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    db.drop_db().await;
}

#[tokio::test]
async fn bad_stored_documents_are_typed_errors() {
    use mongodb::bson::{Document, doc};
    let db = MongoDb::new().await;
    let saver = saver(&db).await;
    let one = saver
        .put(new_on("t", None, None, 0, json!(1)))
        .await
        .unwrap();
    let coll = db
        .client
        .database(&db.name)
        .collection::<Document>("w_checkpoints");
    for bad in [
        doc! { "$set": { "payload": "not binary" } },
        doc! { "$set": { "metadata": "{not json" } },
        doc! { "$set": { "commit_order": "one" } },
    ] {
        let saved = coll.find_one(doc! {}).await.unwrap().unwrap();
        coll.update_one(doc! {}, bad).await.unwrap();
        let err = saver.get_tuple(&one).await.unwrap_err();
        assert!(matches!(err, Error::Decode { .. }), "{err:?}");
        coll.replace_one(doc! {}, saved).await.unwrap();
    }
    assert!(saver.get_tuple(&one).await.unwrap().is_some());
    // A pending write whose namespace was damaged is an error naming its
    // checkpoint, not a write that quietly goes missing.
    let write = || weaver::checkpoint::PendingWrite {
        task_id: "task".into(),
        task_path: "node".into(),
        idx: 0,
        channel: "c".into(),
        value: json!(1),
    };
    saver.put_writes(&one, vec![write()]).await.unwrap();
    let writes = db
        .client
        .database(&db.name)
        .collection::<Document>("w_writes");
    writes
        .update_one(doc! {}, doc! { "$set": { "ns": 5 } })
        .await
        .unwrap();
    match saver.get_tuple(&one).await {
        Err(Error::Decode { what, .. }) => {
            assert!(
                what.contains(one.checkpoint_id.as_deref().unwrap()),
                "{what}"
            )
        }
        other => panic!("expected Decode, got {other:?}"),
    }
    // The same in a subgraph's namespace (whose writes were skipped).
    writes.delete_many(doc! {}).await.unwrap();
    let mut inner = new_on("t", None, None, 0, json!(2));
    inner.checkpoint_ns = "sub:1".into();
    inner.checkpoint.id = "inner-1".into();
    let at = saver.put(inner).await.unwrap();
    saver.put_writes(&at, vec![write()]).await.unwrap();
    writes
        .update_one(doc! {}, doc! { "$set": { "ns": 5 } })
        .await
        .unwrap();
    match saver.get_tuple(&at).await {
        Err(Error::Decode { what, .. }) => assert!(what.contains("inner-1"), "{what}"),
        other => panic!("expected Decode, got {other:?}"),
    }
    db.drop_db().await;
}

/// The chat-graph promise on MongoDB: two OS processes (the `chat_turns`
/// example) run turns on one conversation; each turn commits whole or fails
/// with `VersionConflict`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_one_conversation_on_mongo() {
    let db = MongoDb::new().await;
    // Set up first so both processes only race on turns.
    MongoSaver::new(db.client.clone(), &db.name, "weaver_")
        .setup()
        .await
        .unwrap();
    let open = async {
        Arc::new(MongoSaver::new(db.client.clone(), &db.name, "weaver_")) as Arc<dyn Saver>
    };
    crate::concurrency::one_conversation(
        &weaver_tests::mongo::mongo_url(),
        &db.name,
        &["alice", "bob"],
        open,
    )
    .await;
    db.drop_db().await;
}

/// A saver on `db`, set up, and one on a client of its own (as another
/// process's: no server session shared).
async fn two_processes(db: &MongoDb) -> (MongoSaver, MongoSaver) {
    let url = weaver_tests::mongo::mongo_url();
    let other = MongoSaver::connect(&url, &db.name, "w_").await.unwrap();
    (saver(db).await, other)
}

/// Checkpoint writes cut off at any point (here every 100 µs up to 15 ms
/// into them, as when a web server drops the `invoke` of a client that went
/// away) leave nothing locked on the server: another process's write at the
/// same commit order, made right after each, answers at once (stored, or a
/// version conflict when the cut-off write had already committed) instead
/// of meeting write conflicts until the server's transaction time limit
/// (60 s) ends a transaction left open; and the thread holds one
/// checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_cut_off_leave_no_transaction_open_on_mongo() {
    let db = MongoDb::new().await;
    let (saver, other) = two_processes(&db).await;
    for step in 0..150u64 {
        let after = Duration::from_micros(step * 100);
        let thread = format!("t{step}");
        cut_off(saver.put(cp(&thread, "a", None, Some(1))), after).await;
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            other.put(cp(&thread, "b", None, Some(1))),
        )
        .await
        .unwrap_or_else(|_| panic!("a write cut off at {after:?} left {thread} locked"));
        match answer {
            Ok(_) | Err(Error::VersionConflict { .. }) => {}
            Err(e) => panic!("after a write cut off at {after:?}: {e}"),
        }
        let stored = other.list(&ListFilter::thread(&thread)).await.unwrap();
        assert_eq!(stored.len(), 1, "{thread} after a cut at {after:?}");
    }
    db.drop_db().await;
}

/// A checkpoint write whose caller went away before it committed is
/// aborted, not committed behind the caller's back (as a SQL transaction
/// whose future is dropped is rolled back): another process's write at the
/// same commit order, half a second later, is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_caller_went_away_is_not_committed_on_mongo() {
    let db = MongoDb::new().await;
    let (saver, other) = two_processes(&db).await;
    // Large enough that encoding and sending it takes far longer than 1 ms.
    let large = |thread: &str| {
        let mut c = cp(thread, "a", None, Some(1));
        c.checkpoint
            .channel_values
            .insert("foo".into(), json!("x".repeat(4 << 20)));
        c
    };
    // A whole one first: the saver has checked its setup, so the cut-off
    // write below starts its transaction at its first poll.
    let started = std::time::Instant::now();
    saver.put(large("whole")).await.unwrap();
    let took = started.elapsed();
    assert!(
        took > Duration::from_millis(5),
        "a large write took {took:?}"
    );
    cut_off(saver.put(large("t")), Duration::from_millis(1)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::time::timeout(
        Duration::from_secs(20),
        other.put(cp("t", "b", None, Some(1))),
    )
    .await
    .expect("the thread stayed locked")
    .expect("the write whose caller went away was committed");
    let stored = other.list(&ListFilter::thread("t")).await.unwrap();
    let ids: Vec<_> = stored.iter().map(|t| t.checkpoint.id.as_str()).collect();
    assert_eq!(ids, ["b"]);
    db.drop_db().await;
}

/// A record under the saver's own ceiling that would not fit in one MongoDB
/// document (16 MiB) is refused with a typed `LimitExceeded` before
/// anything is sent: a checkpoint, a pending write, and a checkpoint whose
/// metadata (stored twice) takes it past the limit.
#[tokio::test]
async fn a_record_past_a_mongodb_document_is_refused() {
    use weaver::checkpoint::PendingWrite;
    let db = MongoDb::new().await;
    let saver = saver(&db).await;
    let big = "x".repeat(17 << 20);
    let limit = |r: &weaver::Result<()>| matches!(r, Err(Error::LimitExceeded { .. }));
    let put = saver
        .put(new_on("big", None, None, 0, json!(big)))
        .await
        .map(drop);
    assert!(limit(&put), "{put:?}");
    let mut metadata_heavy = new_on("meta", None, None, 0, json!("x".repeat(9 << 20)));
    metadata_heavy
        .metadata
        .extra
        .insert("notes".into(), json!("y".repeat(4 << 20)));
    let put = saver.put(metadata_heavy).await.map(drop);
    assert!(limit(&put), "{put:?}");
    // Metadata whose document takes nine times its text (an array of
    // small numbers: each `0,` is an index key, a type and eight bytes).
    let mut zeros = new_on("zeros", None, None, 0, json!("x".repeat(900 << 10)));
    zeros
        .metadata
        .extra
        .insert("zeros".into(), json!(vec![0; 900_000]));
    let put = saver.put(zeros).await.map(drop);
    assert!(limit(&put), "{put:?}");
    let at = saver
        .put(new_on("w", None, None, 0, json!(1)))
        .await
        .unwrap();
    let write = PendingWrite {
        task_id: "t".into(),
        idx: 0,
        channel: "c".into(),
        task_path: String::new(),
        value: json!(big),
    };
    let put = saver.put_writes(&at, vec![write]).await;
    assert!(limit(&put), "{put:?}");
    for thread in ["big", "meta", "zeros"] {
        assert!(
            saver
                .list(&ListFilter::thread(thread))
                .await
                .unwrap()
                .is_empty()
        );
    }
    let stored = saver.get_tuple(&at).await.unwrap().unwrap();
    assert!(stored.pending_writes.is_empty());
    db.drop_db().await;
}
