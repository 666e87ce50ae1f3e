//! The store conformance suite: the behaviour every [`Store`] backend must
//! show, run unchanged against each one.

mod ttl;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use weaver::Error;
use weaver::store::{
    Filter, Item, ListNamespaces, Op, OpResult, PutOptions, Search, Store, StoreConfig, embed_fn,
    limits,
};

fn keys(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .map(|i| format!("{}/{}", i.namespace.join("."), i.key))
        .collect()
}

#[track_caller]
fn assert_invalid<T: std::fmt::Debug>(r: weaver::Result<T>, what: &str) {
    match r {
        Err(Error::InvalidArgument { .. }) => {}
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    }
}

#[track_caller]
fn assert_limit<T: std::fmt::Debug>(r: weaver::Result<T>, what: &str) {
    match r {
        Err(Error::LimitExceeded { .. }) => {}
        other => panic!("{what}: expected LimitExceeded, got {other:?}"),
    }
}

/// Runs every check on fresh stores from `make`.
pub async fn run_store_conformance<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    put_get_delete(make().await.as_ref()).await;
    namespace_validation(make().await.as_ref()).await;
    search_stays_in_prefix(make().await.as_ref()).await;
    bm25_ranking(make().await.as_ref()).await;
    filters(make().await.as_ref()).await;
    limits_are_typed(make().await.as_ref()).await;
    list_namespaces(make().await.as_ref()).await;
    batches(make().await.as_ref()).await;
    ttl::at_some_scale("ttl_and_sweep", async |scale| {
        ttl::ttl_and_sweep(make().await.as_ref(), scale).await
    })
    .await;
    ttl::at_some_scale("refresh_on_read", async |scale| {
        ttl::refresh_on_read(make().await.as_ref(), scale).await
    })
    .await;
}

/// Runs the checks that need a configured store (embedder, default TTL,
/// refresh on read) on stores from `make`.
pub async fn run_store_config_conformance<F, Fut>(make: F)
where
    F: Fn(StoreConfig) -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    embedding_ranking(&make).await;
    ttl::at_some_scale("configured TTL", async |scale| {
        ttl::configured(&make, scale).await
    })
    .await;
}

async fn put_get_delete(store: &dyn Store) {
    let ns = ["users", "u1", "memories"];
    assert!(store.get(&ns, "food").await.unwrap().is_none());
    let put = store
        .put(&ns, "food", json!({"memory": "User likes pizza"}))
        .await
        .unwrap();
    let first = store.get(&ns, "food").await.unwrap().expect("stored item");
    assert_eq!(first.namespace, ns);
    assert_eq!(first.key, "food");
    assert_eq!(first.value, json!({"memory": "User likes pizza"}));
    assert_eq!(first.score, None);
    assert_eq!(first.created_at, first.updated_at);
    assert_eq!(put, first, "a put returns the item a get then returns");

    tokio::time::sleep(Duration::from_millis(5)).await;
    let overwrite = store
        .put(&ns, "food", json!({"memory": "User likes sushi"}))
        .await
        .unwrap();
    let second = store
        .get(&ns, "food")
        .await
        .unwrap()
        .expect("overwritten item");
    assert_eq!(second.value["memory"], "User likes sushi");
    assert_eq!(
        second.created_at, first.created_at,
        "overwrite keeps created_at"
    );
    assert!(
        second.updated_at > first.updated_at,
        "overwrite moves updated_at"
    );
    assert_eq!(
        overwrite, second,
        "an overwriting put returns the kept created_at and its own updated_at"
    );
    let with = store
        .put_with(&ns, "food", json!(3), PutOptions::new().not_indexed())
        .await
        .unwrap();
    assert_eq!(with.created_at, first.created_at);
    assert_eq!(Some(with), store.get(&ns, "food").await.unwrap());

    // Values of every JSON kind come back as they went in.
    let odd = json!({"n": 1.5, "i": -7, "big": 9007199254740993u64, "s": "é\u{1F355}\"'\\%_", "a": [null, true], "o": {}});
    let put = store.put(&ns, "odd", odd.clone()).await.unwrap();
    assert_eq!(put.value, odd);
    assert_eq!(Some(put), store.get(&ns, "odd").await.unwrap());
    store.put(&ns, "scalar", json!(42)).await.unwrap();
    assert_eq!(
        store.get(&ns, "scalar").await.unwrap().unwrap().value,
        json!(42)
    );

    // Keys are per namespace.
    assert!(store.get(&["users", "u1"], "food").await.unwrap().is_none());

    store.delete(&ns, "food").await.unwrap();
    assert!(store.get(&ns, "food").await.unwrap().is_none());
    store.delete(&ns, "food").await.unwrap();
    store.delete(&["never", "there"], "x").await.unwrap();
    assert!(store.get(&ns, "odd").await.unwrap().is_some());
}

async fn namespace_validation(store: &dyn Store) {
    let v = json!({"x": 1});
    assert_invalid(store.put(&[], "k", v.clone()).await, "empty namespace");
    assert_invalid(
        store.put(&["users", ""], "k", v.clone()).await,
        "empty label",
    );
    assert_invalid(
        store.put(&["users", "a.b"], "k", v.clone()).await,
        "separator in label",
    );
    assert_invalid(
        store.put(&["users", "a\0b"], "k", v.clone()).await,
        "NUL in label",
    );
    assert_invalid(store.put(&["users"], "", v.clone()).await, "empty key");
    assert_invalid(store.get(&["a", ""], "k").await, "get with empty label");
    assert_invalid(store.get(&[], "k").await, "get with empty namespace");
    assert_invalid(store.delete(&["a."], "k").await, "delete with separator");
    assert_invalid(
        store.search(&["a", ""], Search::new()).await,
        "search prefix with empty label",
    );
    assert_invalid(
        store.search(&["a.b"], Search::new()).await,
        "search prefix with separator",
    );
    assert_invalid(
        store
            .list_namespaces(ListNamespaces::new().prefix(&["x", ""]))
            .await,
        "list prefix with empty label",
    );
    assert_invalid(
        store
            .list_namespaces(ListNamespaces::new().max_depth(0))
            .await,
        "max_depth 0",
    );
    let long = "l".repeat(limits::MAX_LABEL_BYTES + 1);
    assert_limit(
        store.put(&["users", &long], "k", v.clone()).await,
        "long label",
    );
    let long_key = "k".repeat(limits::MAX_KEY_BYTES + 1);
    assert_limit(
        store.put(&["users"], &long_key, v.clone()).await,
        "long key",
    );
    for (what, suffix) in [("dotted", &["a.b"][..]), ("empty", &["x", ""][..])] {
        assert_invalid(
            store
                .list_namespaces(ListNamespaces::new().suffix(suffix))
                .await,
            &format!("list suffix with a {what} label"),
        );
    }
    for (what, ns) in [
        ("a dot alone", &["."][..]),
        ("dots only", &["a", ".."][..]),
        ("a trailing dot", &["a."][..]),
        ("a leading empty label", &["", "a"][..]),
    ] {
        assert_invalid(
            store.batch(vec![Op::put(ns, "k", v.clone())]).await,
            &format!("batch put with {what}"),
        );
        assert_invalid(
            store.batch(vec![Op::search(ns, Search::new())]).await,
            &format!("batch search with {what}"),
        );
    }
    // Nothing was written by the failed calls.
    assert!(store.search(&[], Search::new()).await.unwrap().is_empty());
    // Labels next to the separator in byte order, and other punctuation,
    // come back exactly, alone in their prefix and listing.
    let odd = [["a/b", "c-d"], ["a", " "], ["a\\", ","], ["a", "-"]];
    for ns in &odd {
        store.put(ns, "k", v.clone()).await.unwrap();
    }
    for ns in &odd {
        let got = store.get(ns, "k").await.unwrap().expect("stored");
        assert_eq!(got.namespace, ns, "get");
        let found = store.search(ns, Search::new()).await.unwrap();
        assert_eq!(
            keys(&found),
            [format!("{}/k", ns.join("."))],
            "search {ns:?}"
        );
        let listed = store
            .list_namespaces(ListNamespaces::new().prefix(ns))
            .await
            .unwrap();
        assert_eq!(listed, [ns.map(str::to_owned).to_vec()], "list {ns:?}");
    }
    for ns in &odd {
        store.delete(ns, "k").await.unwrap();
    }
    // Labels may hold anything else, including LIKE wildcards.
    let ns = ["te%st", "a_b", "ü-1 2"];
    store.put(&ns, "k", v.clone()).await.unwrap();
    assert_eq!(store.get(&ns, "k").await.unwrap().unwrap().namespace, ns);
    assert!(
        store
            .search(&["te"], Search::new())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .search(&["t_%st"], Search::new())
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.search(&["te%st"], Search::new()).await.unwrap().len(),
        1
    );
}

async fn search_stays_in_prefix(store: &dyn Store) {
    let put = |ns: &'static [&'static str], key: &'static str| async move {
        store.put(ns, key, json!({"text": "pizza"})).await.unwrap();
    };
    put(&["users", "u1"], "root").await;
    put(&["users", "u1", "memories"], "b").await;
    put(&["users", "u1", "memories"], "a").await;
    put(&["users", "u1", "prefs"], "theme").await;
    put(&["users", "u10", "memories"], "a").await;
    put(&["users", "u1-x"], "a").await;
    put(&["users", "u0"], "a").await;
    put(&["usersx"], "a").await;
    put(&["other"], "a").await;

    let all = store
        .search(&["users", "u1"], Search::new().limit(100))
        .await
        .unwrap();
    assert_eq!(
        keys(&all),
        [
            "users.u1/root",
            "users.u1.memories/a",
            "users.u1.memories/b",
            "users.u1.prefs/theme"
        ],
        "prefix is label-wise, order is dotted namespace then key"
    );
    assert!(all.iter().all(|i| i.score.is_none()));

    let ranked = store
        .search(&["users", "u1"], Search::query("pizza").limit(100))
        .await
        .unwrap();
    assert_eq!(
        keys(&ranked),
        keys(&all),
        "equal scores tie by namespace/key"
    );
    assert!(ranked.iter().all(|i| i.score.is_some()));

    let page = store
        .search(&["users", "u1"], Search::new().limit(2).offset(1))
        .await
        .unwrap();
    assert_eq!(keys(&page), ["users.u1.memories/a", "users.u1.memories/b"]);
    let past = store
        .search(&["users", "u1"], Search::new().offset(10))
        .await
        .unwrap();
    assert!(past.is_empty());
    let none = store
        .search(&["users", "u1"], Search::new().limit(0))
        .await
        .unwrap();
    assert!(none.is_empty());

    let users = store
        .search(&["users"], Search::new().limit(100))
        .await
        .unwrap();
    assert_eq!(users.len(), 7);
    let everything = store.search(&[], Search::new().limit(100)).await.unwrap();
    assert_eq!(everything.len(), 9);
    assert_eq!(
        keys(&everything).first().map(String::as_str),
        Some("other/a")
    );
    assert!(
        store
            .search(&["users", "u2"], Search::query("pizza"))
            .await
            .unwrap()
            .is_empty()
    );
}

async fn bm25_ranking(store: &dyn Store) {
    let ns = ["users", "u1", "memories"];
    store
        .put(
            &ns,
            "food",
            json!({"memory": "User likes pizza, especially PIZZA margherita"}),
        )
        .await
        .unwrap();
    store
        .put(&ns, "food2", json!({"memory": "User likes pizza"}))
        .await
        .unwrap();
    store
        .put(&ns, "music", json!({"memory": "User likes jazz"}))
        .await
        .unwrap();
    store
        .put_with(
            &ns,
            "hidden",
            json!({"memory": "pizza pizza pizza"}),
            PutOptions::new().not_indexed(),
        )
        .await
        .unwrap();
    store
        .put_with(
            &ns,
            "titled",
            json!({"title": "travel", "body": "pizza in Naples"}),
            PutOptions::new().index(["title"]),
        )
        .await
        .unwrap();
    store
        .put_with(
            &ns,
            "nested",
            json!({"profile": {"likes": ["pizza", "pasta"]}, "note": "jazz"}),
            PutOptions::new().index(["profile.likes.0"]),
        )
        .await
        .unwrap();

    let items = store
        .search(&["users", "u1"], Search::query("Pizza!").limit(10))
        .await
        .unwrap();
    let order = keys(&items);
    assert_eq!(
        order,
        [
            "users.u1.memories/nested",
            "users.u1.memories/food",
            "users.u1.memories/food2",
            "users.u1.memories/music",
            "users.u1.memories/titled",
            "users.u1.memories/hidden",
        ],
        "matches first (by BM25: term count, length), then non-matching by key, unindexed last"
    );
    let s: Vec<Option<f64>> = items.iter().map(|i| i.score).collect();
    assert!(s[0].unwrap() >= s[1].unwrap() && s[1].unwrap() > s[2].unwrap());
    assert!(s[2].unwrap() > 0.0);
    assert_eq!(s[3], Some(0.0));
    assert_eq!(s[4], Some(0.0), "only the indexed field counts");
    assert_eq!(s[5], None, "not indexed: no score");

    let top = store
        .search(&["users", "u1"], Search::query("jazz").limit(1))
        .await
        .unwrap();
    assert_eq!(keys(&top), ["users.u1.memories/music"]);
    // A query with no token still ranks (all scores 0), never errors.
    let blank = store
        .search(&["users", "u1"], Search::query("  !? ").limit(2))
        .await
        .unwrap();
    assert_eq!(blank.len(), 2);
}

async fn filters(store: &dyn Store) {
    let ns = ["people"];
    for (key, age, city) in [
        ("ann", 31, "Paris"),
        ("bob", 25, "Rome"),
        ("cid", 40, "Paris"),
        ("dee", 30, "Oslo"),
    ] {
        store
            .put(
                &ns,
                key,
                json!({"age": age, "city": city, "home": {"city": city}}),
            )
            .await
            .unwrap();
    }
    store
        .put(&ns, "eve", json!({"city": "Paris"}))
        .await
        .unwrap();
    let run = |f: Value| async move {
        keys(&store.search(&ns, Search::new().filter(f)).await.unwrap())
            .into_iter()
            .map(|k| k.trim_start_matches("people/").to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(run(json!({"city": "Paris"})).await, ["ann", "cid", "eve"]);
    assert_eq!(run(json!({"home.city": "Paris"})).await, ["ann", "cid"]);
    assert_eq!(run(json!({"city": {"$ne": "Paris"}})).await, ["bob", "dee"]);
    assert_eq!(
        run(json!({"age": {"$ne": 30}})).await,
        ["ann", "bob", "cid", "eve"]
    );
    assert_eq!(run(json!({"age": {"$gt": 30}})).await, ["ann", "cid"]);
    assert_eq!(
        run(json!({"age": {"$gte": 30}})).await,
        ["ann", "cid", "dee"]
    );
    assert_eq!(run(json!({"age": {"$lt": 30.5}})).await, ["bob", "dee"]);
    assert_eq!(run(json!({"age": {"$lte": 30, "$gt": 25}})).await, ["dee"]);
    assert_eq!(run(json!({"age": 30.0})).await, ["dee"]);
    assert_eq!(
        run(json!({"city": {"$gte": "P"}})).await,
        ["ann", "bob", "cid", "eve"]
    );
    assert_eq!(
        run(json!({"age": {"$gt": "30"}})).await,
        Vec::<String>::new()
    );
    assert_eq!(
        run(Filter::new().eq("city", "Paris").gte("age", 35).into()).await,
        ["cid"]
    );
    // Filter and query together: filter first, then rank.
    let ranked = store
        .search(
            &ns,
            Search::query("Oslo").filter(json!({"age": {"$gte": 30}})),
        )
        .await
        .unwrap();
    assert_eq!(keys(&ranked)[0], "people/dee");
    assert_eq!(ranked.len(), 3);

    for bad in [
        json!({"age": {"$like": 3}}),
        json!({"age": {"$gt": 1, "plain": 2}}),
        json!({"age": {"$gt": [1]}}),
        json!({"age": {"$lte": null}}),
        json!(["age"]),
        json!("age > 3"),
        json!({"": 1}),
        // Logical operators other than `$and` are refused, not read as a
        // field named `$or` (which would silently match nothing).
        json!({"$or": [{"age": 30}, {"age": 40}]}),
        json!({"$nor": [{"age": 30}]}),
        json!({"$not": {"age": 30}}),
        json!({"$and": [{"$or": [{"age": 30}]}]}),
        // So is every other `$` key: not a field named `$where`.
        json!({"$where": "this.age > 30"}),
        json!({"$in": [30, 40]}),
        json!({"$expr": {"$gt": ["$age", 30]}}),
        json!({"city": "Paris", "$exists": true}),
        json!({"$and": [{"$nin": [1]}]}),
        json!({"$$": 1}),
        json!({"age": {"$in": [30]}}),
    ] {
        assert_invalid(
            store.search(&ns, Search::new().filter(bad.clone())).await,
            &bad.to_string(),
        );
    }
}

async fn limits_are_typed(store: &dyn Store) {
    let big = "x".repeat(limits::MAX_VALUE_BYTES);
    assert_limit(
        store.put(&["big"], "k", json!({ "s": big })).await,
        "oversized value",
    );
    assert!(store.get(&["big"], "k").await.unwrap().is_none());
    let fits = "x".repeat(limits::MAX_VALUE_BYTES - 100);
    store
        .put(&["big"], "k", json!({ "s": fits }))
        .await
        .unwrap();
    assert_limit(
        store
            .search(&["big"], Search::new().limit(limits::MAX_RESULTS + 1))
            .await,
        "search limit",
    );
    assert_limit(
        store
            .list_namespaces(ListNamespaces::new().limit(limits::MAX_RESULTS + 1))
            .await,
        "list limit",
    );
    let ops: Vec<Op> = (0..=limits::MAX_BATCH_OPS)
        .map(|i| Op::put(&["many"], format!("k{i}"), json!(i)))
        .collect();
    assert_limit(store.batch(ops).await, "batch size");
    // Index paths that reach one string again and again: the text would
    // be 100 times the value (`a.0`, `a.00`, … all name element 0).
    let paths: Vec<String> = (1..=100).map(|n| format!("a.{}", "0".repeat(n))).collect();
    let long = json!({ "a": ["x".repeat(limits::MAX_VALUE_BYTES / 2)] });
    let put = |index: Vec<String>| {
        store.put_with(
            &["indexed"],
            "k",
            long.clone(),
            PutOptions::new().index(index),
        )
    };
    assert_limit(put(paths.clone()).await.map(drop), "index text");
    assert_limit(
        put(vec!["a".to_owned(); limits::MAX_INDEX_FIELDS + 1])
            .await
            .map(drop),
        "index fields",
    );
    assert!(store.get(&["indexed"], "k").await.unwrap().is_none());
    // Within the limits the same paths index the text each time.
    put(paths[..4].to_vec()).await.unwrap();
    assert_limit(
        put(vec!["a".to_owned(); limits::MAX_INDEX_FIELDS])
            .await
            .map(drop),
        "index fields that fit, text that does not",
    );
    store
        .put_with(
            &["indexed"],
            "k",
            json!({"a": ["pizza"]}),
            PutOptions::new().index(vec!["a".to_owned(); limits::MAX_INDEX_FIELDS]),
        )
        .await
        .unwrap();
    let found = store
        .search(&["indexed"], Search::query("pizza"))
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert!(
        store
            .search(&["many"], Search::new())
            .await
            .unwrap()
            .is_empty()
    );
}

async fn list_namespaces(store: &dyn Store) {
    for ns in [
        &["users", "u1", "memories"][..],
        &["users", "u1", "prefs"],
        &["users", "u2", "memories"],
        &["users", "u10"],
        &["teams", "t1", "memories"],
        &["a"],
    ] {
        store.put(ns, "k", json!({})).await.unwrap();
    }
    store
        .put(&["users", "u1", "memories"], "k2", json!({}))
        .await
        .unwrap();
    let list = |o: ListNamespaces| async move { store.list_namespaces(o).await.unwrap() };
    assert_eq!(
        list(ListNamespaces::new()).await,
        vec![
            vec!["a"],
            vec!["teams", "t1", "memories"],
            vec!["users", "u1", "memories"],
            vec!["users", "u1", "prefs"],
            vec!["users", "u10"],
            vec!["users", "u2", "memories"],
        ]
    );
    assert_eq!(
        list(ListNamespaces::new().prefix(&["users", "u1"])).await,
        vec![
            vec!["users", "u1", "memories"],
            vec!["users", "u1", "prefs"]
        ]
    );
    assert_eq!(
        list(ListNamespaces::new().suffix(&["memories"])).await,
        vec![
            vec!["teams", "t1", "memories"],
            vec!["users", "u1", "memories"],
            vec!["users", "u2", "memories"],
        ]
    );
    assert_eq!(
        list(ListNamespaces::new().prefix(&["users"]).max_depth(2)).await,
        vec![
            vec!["users", "u1"],
            vec!["users", "u10"],
            vec!["users", "u2"]
        ]
    );
    assert_eq!(
        list(ListNamespaces::new().max_depth(1).limit(2).offset(1)).await,
        vec![vec!["teams"], vec!["users"]]
    );
    assert!(
        list(ListNamespaces::new().prefix(&["nope"]))
            .await
            .is_empty()
    );
    // `*` matches any one label, as in LangGraph. (It was a literal label,
    // and these listed nothing.)
    assert_eq!(
        list(ListNamespaces::new().prefix(&["users", "*", "memories"])).await,
        vec![
            vec!["users", "u1", "memories"],
            vec!["users", "u2", "memories"]
        ]
    );
    assert_eq!(
        list(ListNamespaces::new().suffix(&["*", "memories"])).await,
        vec![
            vec!["teams", "t1", "memories"],
            vec!["users", "u1", "memories"],
            vec!["users", "u2", "memories"],
        ]
    );
    assert_eq!(
        list(ListNamespaces::new().prefix(&["*", "t1"])).await,
        vec![vec!["teams", "t1", "memories"]]
    );
}

async fn batches(store: &dyn Store) {
    let ns = ["b"];
    let results = store
        .batch(vec![
            Op::put(&ns, "x", json!({"v": 1})),
            Op::get(&ns, "x"),
            Op::put(&ns, "y", json!({"v": 2})),
            Op::search(&ns, Search::new()),
            Op::delete(&ns, "x"),
            Op::get(&ns, "x"),
            Op::ListNamespaces(ListNamespaces::new()),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 7);
    let OpResult::Put(put_x) = &results[0] else {
        panic!("put in a batch: {:?}", results[0]);
    };
    assert_eq!(put_x.namespace, ns);
    assert_eq!(put_x.key, "x");
    assert_eq!(put_x.value, json!({"v": 1}));
    assert_eq!(put_x.created_at, put_x.updated_at);
    match &results[1] {
        OpResult::Got(Some(item)) => assert_eq!(item, put_x, "get after put in the same batch"),
        other => panic!("get after put in the same batch: {other:?}"),
    }
    let OpResult::Put(put_y) = &results[2] else {
        panic!("put after a get in a batch: {:?}", results[2]);
    };
    assert_eq!(put_y.key, "y");
    match &results[3] {
        OpResult::Found(items) => {
            assert_eq!(keys(items), ["b/x", "b/y"]);
            assert_eq!(&items[1], put_y, "search sees the put's item");
        }
        other => panic!("search: {other:?}"),
    }
    assert_eq!(Some(put_y.clone()), store.get(&ns, "y").await.unwrap());
    assert_eq!(results[4], OpResult::Deleted);
    assert_eq!(results[5], OpResult::Got(None));
    assert_eq!(results[6], OpResult::Namespaces(vec![vec!["b".to_owned()]]));

    // A put overwriting inside a later batch keeps created_at.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let later = store
        .batch(vec![
            Op::get(&ns, "nothing"),
            Op::put(&ns, "y", json!({"v": 3})),
            Op::delete(&ns, "nothing"),
        ])
        .await
        .unwrap();
    match &later[1] {
        OpResult::Put(item) => {
            assert_eq!(item.created_at, put_y.created_at, "overwrite in a batch");
            assert!(item.updated_at > put_y.updated_at);
            assert_eq!(Some(item.clone()), store.get(&ns, "y").await.unwrap());
        }
        other => panic!("overwriting put in a batch: {other:?}"),
    }

    // One bad op fails the batch before anything is written.
    let err = store
        .batch(vec![
            Op::put(&ns, "z", json!(1)),
            Op::search(&ns, Search::new().filter(json!({"v": {"$nope": 1}}))),
        ])
        .await;
    assert_invalid(err, "batch with a bad filter");
    let err = store
        .batch(vec![
            Op::put(&ns, "z", json!(1)),
            Op::delete(&["b", ""], "x"),
        ])
        .await;
    assert_invalid(err, "batch with a bad namespace");
    assert!(store.get(&ns, "z").await.unwrap().is_none());
    assert!(store.batch(Vec::new()).await.unwrap().is_empty());
}

/// A deterministic toy embedding: which of a few topics the text mentions.
fn topics(text: &str) -> Vec<f32> {
    let t = text.to_lowercase();
    ["pizza", "pasta", "jazz", "rock"]
        .iter()
        .map(|w| t.matches(w).count() as f32)
        .collect()
}

async fn embedding_ranking<F, Fut>(make: &F)
where
    F: Fn(StoreConfig) -> Fut,
    Fut: Future<Output = Arc<dyn Store>>,
{
    let store = make(StoreConfig::new().embedder(embed_fn(topics))).await;
    let ns = ["users", "u1", "memories"];
    store
        .put(&ns, "food", json!({"memory": "likes pizza and pasta"}))
        .await
        .unwrap();
    store
        .put(&ns, "pizza", json!({"memory": "pizza pizza"}))
        .await
        .unwrap();
    store
        .put(&ns, "music", json!({"memory": "likes jazz"}))
        .await
        .unwrap();
    store
        .put_with(
            &ns,
            "hidden",
            json!({"memory": "pizza"}),
            PutOptions::new().not_indexed(),
        )
        .await
        .unwrap();
    store
        .put(&["users", "u2"], "other", json!({"memory": "pizza"}))
        .await
        .unwrap();
    let items = store
        .search(&["users", "u1"], Search::query("PIZZA"))
        .await
        .unwrap();
    assert_eq!(
        keys(&items),
        [
            "users.u1.memories/pizza",
            "users.u1.memories/food",
            "users.u1.memories/music",
            "users.u1.memories/hidden"
        ]
    );
    let s: Vec<Option<f64>> = items.iter().map(|i| i.score).collect();
    assert!(
        (s[0].unwrap() - 1.0).abs() < 1e-9,
        "same direction: cosine 1"
    );
    assert!((s[1].unwrap() - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-6);
    assert_eq!(s[2], Some(0.0));
    assert_eq!(s[3], None);
}
