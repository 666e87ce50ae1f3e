//! The MongoDB store on the server at `MONGODB_URL`: the conformance suites
//! (sealed: `encrypted.rs`), its setup call, bad stored documents, filters pushed
//! into queries agreeing with the in-memory store, concurrent batches.

use std::sync::{Arc, Mutex};

use mongodb::bson::{Bson, Document, doc};
use serde_json::{Value, json};
use weaver::Error;
use weaver::codec::{EncryptedCodec, EncryptionKey};
use weaver::store::{InMemoryStore, ListNamespaces, MongoStore, Op, Search, Store, StoreConfig};
use weaver_tests::mongo::MongoDb;
use weaver_tests::store_conformance::{run_store_config_conformance, run_store_conformance};

const PREFIX: &str = "w_";

/// A set-up store on a fresh database.
async fn fresh(db: &MongoDb) -> MongoStore {
    let store = MongoStore::new(db.client.clone(), &db.name, PREFIX);
    store.setup().await.unwrap();
    store
}

/// The raw items collection of `db`.
fn items(db: &MongoDb) -> mongodb::Collection<Document> {
    db.client
        .database(&db.name)
        .collection(&format!("{PREFIX}store_items"))
}

fn codec() -> EncryptedCodec {
    EncryptedCodec::json([EncryptionKey::new("k1", [1; 32]).unwrap()]).unwrap()
}

/// Both conformance suites, each store on a database of its own, dropped at
/// the end (the sealed stores' run is in `encrypted.rs`).
#[tokio::test]
async fn conformance_mongo() {
    let dbs: Arc<Mutex<Vec<MongoDb>>> = Arc::default();
    let make = |config: StoreConfig| {
        let dbs = dbs.clone();
        async move {
            let db = MongoDb::new().await;
            let store = fresh(&db).await.with_config(config);
            dbs.lock().unwrap().push(db);
            Arc::new(store) as Arc<dyn Store>
        }
    };
    run_store_conformance(|| make(StoreConfig::new())).await;
    run_store_config_conformance(make).await;
    let made = std::mem::take(&mut *dbs.lock().unwrap());
    for db in made {
        db.drop_db().await;
    }
}

#[tokio::test]
async fn a_store_before_setup_fails_naming_the_setup_call() {
    let db = MongoDb::new().await;
    let store = MongoStore::new(db.client.clone(), &db.name, PREFIX);
    let err = store.get(&["a"], "k").await.unwrap_err();
    match &err {
        Error::MigrationRequired { found, hint, .. } => {
            assert_eq!(*found, 0);
            assert!(hint.contains("MongoStore::setup()"), "{hint}");
        }
        other => panic!("expected MigrationRequired, got {other:?}"),
    }
    assert!(matches!(
        store.sweep().await,
        Err(Error::MigrationRequired { .. })
    ));
    // The checkpointer's setup is not the store's.
    weaver::mongo::MongoSaver::new(db.client.clone(), &db.name, PREFIX)
        .setup()
        .await
        .unwrap();
    let again = MongoStore::new(db.client.clone(), &db.name, PREFIX);
    assert!(matches!(
        again.search(&["a"], Search::new()).await,
        Err(Error::MigrationRequired { .. })
    ));
    // Setup is idempotent and makes the unique and TTL indexes.
    store.setup().await.unwrap();
    store.setup().await.unwrap();
    let ready = MongoStore::new(db.client.clone(), &db.name, PREFIX);
    ready.put(&["a"], "k", json!(1)).await.unwrap();
    let indexes: Vec<Document> = {
        use futures_util::TryStreamExt;
        let cursor = items(&db).list_indexes().await.unwrap();
        cursor
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
            .into_iter()
            .map(|m| {
                let mut d = m.keys.clone();
                let o = m.options.unwrap_or_default();
                d.insert("unique", o.unique.unwrap_or(false));
                d.insert("ttl", o.expire_after.map(|t| t.as_secs() as i64));
                d
            })
            .collect()
    };
    assert!(
        indexes.iter().any(|d| d.get("ns").is_some()
            && d.get("key").is_some()
            && d.get_bool("unique").is_ok_and(|u| u)),
        "{indexes:?}"
    );
    assert!(
        indexes
            .iter()
            .any(|d| d.get("expire_at").is_some() && d.get("ttl") == Some(&Bson::Int64(60))),
        "{indexes:?}"
    );
    // A database set up by a newer build is refused, not downgraded.
    db.client
        .database(&db.name)
        .collection::<Document>(&format!("{PREFIX}setup"))
        .update_one(
            doc! { "_id": "store" },
            doc! { "$set": { "version": 99i64 } },
        )
        .await
        .unwrap();
    assert!(matches!(
        store.setup().await,
        Err(Error::MigrationRefused { .. })
    ));
    db.drop_db().await;
}

/// A stored document of `key` in namespace `bad`, with `fields` set over a
/// well-formed one.
fn item(key: &str, fields: Document) -> Document {
    let mut d = doc! {
        "ns": "bad", "key": key, "value": "{\"a\":1}", "index_text": "a",
        "embedding": Bson::Null, "created_at": 1i64, "updated_at": 2i64,
        "expires_at": Bson::Null, "ttl": Bson::Null,
    };
    d.extend(fields);
    d
}

#[tokio::test]
async fn bad_stored_documents_are_decode_errors() {
    let db = MongoDb::new().await;
    let store = fresh(&db).await;
    let cases = [
        ("value_number", doc! { "value": 5 }),
        ("value_not_json", doc! { "value": "{not json" }),
        ("created_text", doc! { "created_at": "yesterday" }),
        ("created_after_update", doc! { "created_at": 9i64 }),
        ("index_number", doc! { "index_text": 3 }),
        ("embedding_text", doc! { "embedding": "x" }),
        (
            "embedding_odd",
            doc! { "embedding": Bson::Binary(mongodb::bson::Binary { subtype: mongodb::bson::spec::BinarySubtype::Generic, bytes: vec![1, 2, 3] }) },
        ),
        ("expires_text", doc! { "expires_at": "soon" }),
        ("ttl_negative", doc! { "ttl": -5i64 }),
    ];
    for (key, fields) in &cases {
        items(&db)
            .insert_one(item(key, fields.clone()))
            .await
            .unwrap();
        let got = store.get(&["bad"], key).await;
        assert!(
            matches!(got, Err(Error::Decode { .. })),
            "{key}: get gave {got:?}"
        );
        let found = store.search(&["bad"], Search::new()).await;
        assert!(
            matches!(found, Err(Error::Decode { .. })),
            "{key}: search gave {found:?}"
        );
        items(&db).delete_one(doc! { "key": key }).await.unwrap();
    }
    // A document without its namespace or key.
    items(&db)
        .insert_one(doc! { "key": 1, "value": "1", "created_at": 1i64, "updated_at": 1i64 })
        .await
        .unwrap();
    let found = store.search(&[], Search::new()).await;
    assert!(matches!(found, Err(Error::Decode { .. })), "{found:?}");
    // A namespace no put could have written (an empty label): a decode
    // error, listed or searched. (It came back as labels `get` refused.)
    items(&db).delete_many(doc! {}).await.unwrap();
    for ns in ["a..b", ""] {
        let mut bad_ns = item("k", doc! {});
        bad_ns.insert("ns", ns);
        items(&db).insert_one(bad_ns).await.unwrap();
        let found = store.search(&[], Search::new()).await;
        assert!(
            matches!(found, Err(Error::Decode { .. })),
            "{ns:?}: {found:?}"
        );
        let listed = store.list_namespaces(ListNamespaces::new()).await;
        assert!(
            matches!(listed, Err(Error::Decode { .. })),
            "{ns:?}: {listed:?}"
        );
        items(&db).delete_many(doc! {}).await.unwrap();
    }
    // A put over an item whose times do not read replaces it as new, as the
    // SQL stores do.
    items(&db).delete_many(doc! {}).await.unwrap();
    items(&db)
        .insert_one(item("times", doc! { "created_at": "x" }))
        .await
        .unwrap();
    store.put(&["bad"], "times", json!(1)).await.unwrap();
    let fresh = store.get(&["bad"], "times").await.unwrap().unwrap();
    assert_eq!(fresh.value, json!(1));
    assert_eq!(fresh.created_at, fresh.updated_at);
    // A well-formed one reads.
    items(&db).delete_many(doc! {}).await.unwrap();
    items(&db).insert_one(item("fine", doc! {})).await.unwrap();
    let fine = store.get(&["bad"], "fine").await.unwrap().unwrap();
    assert_eq!(fine.value, json!({"a": 1}));
    db.drop_db().await;
}

/// Values a BSON copy holds poorly or not at all (huge integers, rounded
/// floats, keys with dots, dollars or NUL, arrays where a scalar is
/// compared, sealed items): every filter gives the in-memory store's
/// answer, also one whose path BSON cannot hold.
#[tokio::test]
async fn pushed_down_filters_give_the_in_memory_answer() {
    let db = MongoDb::new().await;
    let mongo = fresh(&db).await;
    let memory = InMemoryStore::new();
    let values = [
        json!({"n": 18446744073709551615u64, "s": "b"}),
        json!({"n": 18446744073709551614u64, "s": "a"}),
        json!({"n": 9007199254740993u64}),
        json!({"n": 9007199254740992u64}),
        json!({"n": 2.5, "s": "é"}),
        json!({"n": [1, 5], "s": ["a", "z"]}),
        json!({"n": 1}),
        json!({"n": -0.0, "tags": ["x", "y"]}),
        json!({"a.b": 1, "a": {"b": 2}}),
        json!({"$gt": 1, "n": 3, "x": null}),
        json!({"deep": {"n": 4}, "n": "4"}),
        json!(7),
        json!({"x": {"y": 1}}),
        json!({"s": "nul\u{0}inside", "n": i64::MIN, "f": 5e-324}),
        json!({"x\u{0}y": 1}),
    ];
    for (i, v) in values.iter().enumerate() {
        let key = format!("k{i:02}");
        mongo.put(&["f"], &key, v.clone()).await.unwrap();
        memory.put(&["f"], &key, v.clone()).await.unwrap();
    }
    let filters = [
        json!({"n": {"$gt": 18446744073709551614u64}}),
        json!({"n": {"$gte": 18446744073709551615u64}}),
        json!({"n": {"$lt": 18446744073709551615u64}}),
        json!({"n": 9007199254740993u64}),
        json!({"n": {"$gt": 9007199254740992u64}}),
        json!({"n": {"$lte": 1.8446744073709552e19}}),
        json!({"n": {"$gt": 2}}),
        json!({"n": {"$lt": 2.5}}),
        json!({"n": 0}),
        json!({"n": 1}),
        json!({"n": [1, 5]}),
        json!({"n": {"$ne": 1}}),
        json!({"s": "a"}),
        json!({"s": {"$gte": "b"}}),
        json!({"tags.0": "x"}),
        json!({"tags.1": "y"}),
        json!({"tags.+1": "y"}),
        json!({"tags.01": "y"}),
        json!({"tags": "x"}),
        json!({"a.b": 2}),
        json!({"a.b": 1}),
        json!({"x": null}),
        json!({"x": {"y": 1}}),
        json!({"x.y": {"$gte": 1}}),
        json!({"deep.n": {"$gte": "4"}}),
        json!({"n": {"$gte": "4"}}),
        json!({"$": 7}),
        json!({"s": "nul\u{0}inside"}),
        json!({"s": {"$gt": "nul"}}),
        json!({"n": {"$lte": i64::MIN}}),
        json!({"f": {"$gt": 0}}),
        json!({"f": 5e-324}),
        json!({"x\u{0}y": 1}),
    ];
    let sealed = MongoStore::new(db.client.clone(), &db.name, "sealed_").with_encryption(codec());
    sealed.setup().await.unwrap();
    for (i, v) in values.iter().enumerate() {
        sealed
            .put(&["f"], &format!("k{i:02}"), v.clone())
            .await
            .unwrap();
    }
    let mut problems = Vec::new();
    for f in &filters {
        let keys = async |s: &dyn Store| -> Vec<String> {
            let search = Search::new().filter(f.clone()).limit(100);
            s.search(&["f"], search)
                .await
                .unwrap()
                .into_iter()
                .map(|i| i.key)
                .collect()
        };
        let want = keys(&memory).await;
        for (name, s) in [("mongo", &mongo), ("sealed", &sealed)] {
            let got = keys(s).await;
            if got != want {
                problems.push(format!("{f}: memory {want:?}, {name} {got:?}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    db.drop_db().await;
}

/// Batches racing on the same items all land, one after the other: a
/// transaction that lost a write conflict runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_batches_on_one_item_all_land() {
    let db = MongoDb::new().await;
    let store = Arc::new(fresh(&db).await);
    let mut tasks = Vec::new();
    for w in 0..4 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..5 {
                store
                    .batch(vec![
                        Op::put(&["race"], "shared", json!({"w": w, "i": i})),
                        Op::put(&["race"], format!("w{w}"), json!(i)),
                    ])
                    .await?;
            }
            Ok::<(), Error>(())
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let all = store.search(&["race"], Search::new()).await.unwrap();
    let keys: Vec<&str> = all.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, ["shared", "w0", "w1", "w2", "w3"]);
    for item in &all[1..] {
        assert_eq!(item.value, json!(4), "{}", item.key);
    }
    let shared: Value = all[0].value.clone();
    assert_eq!(shared["i"], json!(4), "{shared}");
    db.drop_db().await;
}

/// Batches cut off by their caller at any point (here every 100 µs up to
/// 15 ms into them) leave no transaction open on the server: another
/// process's batch on the same item, made right after each, answers at once
/// instead of meeting write conflicts until the server's transaction time
/// limit (60 s) ended a transaction left open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_cut_off_leave_no_transaction_open() {
    use std::time::Duration;

    let db = MongoDb::new().await;
    let store = fresh(&db).await;
    let url = weaver_tests::mongo::mongo_url();
    let client = mongodb::Client::with_uri_str(&url).await.unwrap();
    let other = MongoStore::new(client, &db.name, PREFIX);
    for step in 0..150u64 {
        let after = Duration::from_micros(step * 100);
        let key = format!("k{step}");
        let put = store.batch(vec![Op::put(&["cut"], key.as_str(), json!("a"))]);
        weaver_tests::cut_off(put, after).await;
        tokio::time::timeout(
            Duration::from_secs(10),
            other.batch(vec![Op::put(&["cut"], key.as_str(), json!("b"))]),
        )
        .await
        .unwrap_or_else(|_| panic!("a batch cut off at {after:?} left {key} locked"))
        .unwrap_or_else(|e| panic!("after a batch cut off at {after:?}: {e}"));
    }
    db.drop_db().await;
}

/// A sealed item's whole document (not only the payload fields
/// `encrypted.rs` checks) holds nothing of it in the clear: no BSON copy of
/// the value, so a plain store meeting it through a filter it would push
/// down says it cannot read it. A plain item keeps the copy filters are
/// pushed down to.
#[tokio::test]
async fn a_sealed_items_whole_document_holds_nothing_in_the_clear() {
    let db = MongoDb::new().await;
    let topics = weaver::store::embed_fn(|t: &str| vec![t.matches("saffron").count() as f32, 1.0]);
    let sealed = fresh(&db)
        .await
        .with_config(StoreConfig::new().embedder(topics))
        .with_encryption(codec());
    let secret = json!({"memory": "the saffron tango", "kind": "place"});
    sealed
        .put(&["users", "u1"], "a", secret.clone())
        .await
        .unwrap();
    let raw = items(&db)
        .find_one(doc! { "ns": "users.u1", "key": "a" })
        .await
        .unwrap()
        .unwrap();
    assert!(raw.get("doc").is_none(), "{raw}");
    let text = raw.to_string();
    for word in ["saffron", "tango", "place", "memory"] {
        assert!(!text.contains(word), "{word} in the clear: {text}");
    }
    let embedding = raw.get_binary_generic("embedding").unwrap();
    let plain: Vec<u8> = [1f32, 1.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    assert!(!embedding.windows(plain.len()).any(|w| w == plain));
    assert_eq!(
        sealed
            .get(&["users", "u1"], "a")
            .await
            .unwrap()
            .unwrap()
            .value,
        secret
    );
    let found = sealed
        .search(
            &["users"],
            Search::query("saffron").filter(json!({"kind": "place"})),
        )
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    // A plain store meeting the sealed item says so, even through a filter
    // it would push down.
    let plain = MongoStore::new(db.client.clone(), &db.name, PREFIX);
    let r = plain
        .search(&["users"], Search::new().filter(json!({"kind": "place"})))
        .await;
    assert!(matches!(r, Err(Error::Decrypt { .. })), "{r:?}");
    plain.put(&["p"], "k", json!({"kind": "x"})).await.unwrap();
    let raw = items(&db)
        .find_one(doc! { "ns": "p" })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(raw.get_document("doc").unwrap(), &doc! { "kind": "x" });
    db.drop_db().await;
}

/// A plain search with an offset past every item, however large, finds
/// nothing, as on the other stores (the driver refuses a skip over
/// `i64::MAX`).
#[tokio::test]
async fn a_huge_offset_finds_nothing() {
    let db = MongoDb::new().await;
    let store = MongoStore::new(db.client.clone(), &db.name, "w_");
    store.setup().await.unwrap();
    store.put(&["p"], "k", json!({"t": "x"})).await.unwrap();
    for offset in [usize::MAX, i64::MAX as usize] {
        let found = store
            .search(&["p"], Search::new().offset(offset))
            .await
            .unwrap_or_else(|e| panic!("offset {offset}: {e}"));
        assert!(found.is_empty(), "{found:?}");
    }
    db.drop_db().await;
}
