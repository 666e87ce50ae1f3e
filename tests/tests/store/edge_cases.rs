//! The memory store at its edges: edge cases, bad stored data, and the
//! three backends (memory, SQLite, PostgreSQL) agreeing on the same calls.
//! Each test collects its problems and asserts once at the end, so a run
//! shows every divergence.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, PgPool, SqlitePool};
use weaver::Error;
use weaver::migrate::{self, Adapter, PgSchema};
use weaver::store::{
    Filter, InMemoryStore, Item, ListNamespaces, Op, OpResult, PostgresStore, PutOptions, Search,
    SqliteStore, Store, StoreConfig, embed_fn, limits,
};

fn pg_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

fn unique() -> String {
    format!("weaver_store_edge_{}", uuid::Uuid::now_v7().simple())
}

/// One config on all three backends: a fresh SQLite file and a fresh
/// PostgreSQL schema, both removed on drop (also when the test panics).
struct Trio {
    stores: Vec<(&'static str, Arc<dyn Store>)>,
    lite: SqlitePool,
    pg: PgPool,
    _file: weaver_tests::TempSqlite,
    schema: String,
}

impl Trio {
    /// Runs `sql` on the items table (`{t}`) of the SQL store `name`.
    async fn items_sql(&self, name: &str, sql: &str) {
        let r = if name == "sqlite" {
            sqlx::raw_sql(AssertSqlSafe(sql.replace("{t}", "weaver_store_items")))
                .execute(&self.lite)
                .await
                .map(|_| ())
        } else {
            let table = format!("\"{}\".weaver_store_items", self.schema);
            sqlx::raw_sql(AssertSqlSafe(sql.replace("{t}", &table)))
                .execute(&self.pg)
                .await
                .map(|_| ())
        };
        r.unwrap_or_else(|e| panic!("{name}: {sql}: {e}"));
    }

    async fn new(config: StoreConfig) -> Trio {
        let file = weaver_tests::TempSqlite::new("weaver-store-edge");
        let opts = SqliteConnectOptions::new()
            .filename(&file.path)
            .create_if_missing(true);
        let lite = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts.busy_timeout(Duration::from_secs(30)))
            .await
            .unwrap();
        migrate::up(&lite, &[Adapter::Store], None).await.unwrap();
        let pg = PgPoolOptions::new()
            .max_connections(4)
            .connect(&pg_url())
            .await
            .expect("PostgreSQL");
        let schema = unique();
        migrate::up(
            &PgSchema::new(&pg, &schema).unwrap(),
            &[Adapter::Store],
            None,
        )
        .await
        .unwrap();
        let pg_store = PostgresStore::new(pg.clone()).with_prefix(&schema).unwrap();
        let stores: Vec<(&'static str, Arc<dyn Store>)> = vec![
            (
                "memory",
                Arc::new(InMemoryStore::with_config(config.clone())),
            ),
            (
                "sqlite",
                Arc::new(SqliteStore::new(lite.clone()).with_config(config.clone())),
            ),
            ("postgres", Arc::new(pg_store.with_config(config))),
        ];
        Trio {
            stores,
            lite,
            pg,
            _file: file,
            schema,
        }
    }

    fn all(&self) -> impl Iterator<Item = (&'static str, &dyn Store)> {
        self.stores.iter().map(|(n, s)| (*n, s.as_ref()))
    }
}

impl Drop for Trio {
    fn drop(&mut self) {
        let schema = self.schema.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                use sqlx::Connection;
                let Ok(mut c) = sqlx::PgConnection::connect(&pg_url()).await else { return };
                // Our own pooled connections may sit idle in an aborted
                // transaction holding locks in the schema: end them first.
                let sql = format!(
                    "SELECT pg_terminate_backend(l.pid) FROM pg_locks l
                       JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
                      WHERE n.nspname = '{schema}' AND l.pid <> pg_backend_pid();
                     SET lock_timeout = '20s'; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                );
                let _ = sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut c).await;
            });
        })
        .join();
    }
}

fn err_name(e: &Error) -> String {
    match e {
        Error::LimitExceeded { limit, .. } => format!("LimitExceeded({limit})"),
        other => format!("{other:?}")
            .split([' ', '(', '{'])
            .next()
            .unwrap_or("")
            .to_owned(),
    }
}

#[track_caller]
fn report(problems: Vec<String>) {
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Items as compared across backends: place, value, score bits.
fn show(items: &[Item]) -> Value {
    items
        .iter()
        .map(|i| json!([i.namespace, i.key, i.value, i.score.map(f64::to_bits)]))
        .collect()
}

fn outcome<T>(r: weaver::Result<T>, f: impl FnOnce(T) -> Value) -> Value {
    r.map_or_else(
        |e| json!({ "error": err_name(&e), "detail": e.to_string() }),
        f,
    )
}

/// The keys a search returns, or its error.
async fn keys(s: &dyn Store, ns: &[&str], search: Search) -> Result<Vec<String>, String> {
    s.search(ns, search)
        .await
        .map(|v| v.into_iter().map(|i| i.key).collect())
        .map_err(|e| e.to_string())
}

/// Asserts every backend gave memory's answer to each labelled read
/// (errors compared by kind only); returns memory's answers by label.
#[track_caller]
fn assert_agree(answers: &[(&str, Vec<(String, Value)>)]) -> HashMap<String, Value> {
    let strip = |v: &Value| match v {
        Value::Object(m) if m.contains_key("error") => m["error"].clone(),
        other => other.clone(),
    };
    let mut problems = Vec::new();
    for (name, got) in &answers[1..] {
        for ((what, want), (_, have)) in answers[0].1.iter().zip(got) {
            if strip(want) != strip(have) {
                problems.push(format!("{what}: memory {want} but {name} {have}"));
            }
        }
    }
    report(problems);
    answers[0].1.iter().cloned().collect()
}

/// Pseudo-random ASCII letters (incompressible enough for index tuples).
fn noise(len: usize, seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let abc = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            abc[(x % 62) as usize] as char
        })
        .collect()
}

#[tokio::test]
async fn values_round_trip_exactly_and_filter_alike() {
    // Shortest round-trip floats; the first three and 1e-300/3 are parsed back
    // one ULP off by serde_json without its `float_roundtrip` feature.
    let floats = [
        30214.190301805782f64,
        104870.74213915899,
        120289.79656522289,
        0.1 + 0.2,
        -0.0,
        5e-324,
        f64::MAX,
        1e-300 / 3.0,
    ];
    let others = [
        json!(null),
        json!(true),
        json!(i64::MIN),
        json!(u64::MAX),
        json!("NUL \u{0} tab \t newline \n quote \" backslash \\ %_ 🍕 \u{FEFF}"),
        json!({"": "empty key", "\u{0}": 1, "a.b": {"$gt": 1}}),
        json!([[], {}, "", 0, -1, 1e300]),
        json!({ "big": "x".repeat(limits::MAX_VALUE_BYTES - 20) }),
    ];
    let t = Trio::new(StoreConfig::new()).await;
    let mut problems = Vec::new();
    for (name, s) in t.all() {
        for (i, v) in floats
            .iter()
            .map(|f| json!({ "x": f }))
            .chain(others.iter().cloned())
            .enumerate()
        {
            let key = format!("v{i}");
            let put = s.put(&["vals"], &key, v.clone()).await;
            match (put, s.get(&["vals"], &key).await) {
                (Ok(put), Ok(Some(item))) if item.value == v && put == item => {}
                (p, g) => problems.push(format!(
                    "{name}: put {v:.80}: {:?}, get returned {:?}",
                    p.map(|i| (i.value == v, i.created_at, i.updated_at)),
                    g.map(|o| o.map(|i| if i.value.to_string().len() > 80 {
                        json!("<long>")
                    } else {
                        i.value
                    }))
                )),
            }
            if v.get("x").is_some() {
                match keys(s, &["vals"], Search::new().filter(v.clone())).await {
                    Ok(k) if k == [key.clone()] => {}
                    other => problems.push(format!("{name}: filter {v} gives {other:?}")),
                }
            }
            s.delete(&["vals"], &key).await.unwrap();
        }
    }
    report(problems);
}

#[tokio::test]
async fn deeply_nested_value_is_stored_readably_or_rejected() {
    let t = Trio::new(StoreConfig::new()).await;
    let mut problems = Vec::new();
    for depth in [100, 127, 200] {
        let v = (0..depth).fold(json!("core"), |v, _| json!([v]));
        let mut seen = Vec::new();
        for (name, s) in t.all() {
            let ns = ["deep", &format!("d{depth}")[..]];
            s.put(&["deep", "neighbour"], "n", json!(1)).await.unwrap();
            let state = match s.put(&ns, "k", v.clone()).await {
                Err(e) => format!("put rejected: {}", err_name(&e)),
                Ok(_) => match s.get(&ns, "k").await {
                    Ok(Some(item)) if item.value == v => "round trip".to_owned(),
                    other => {
                        let search = keys(s, &["deep"], Search::new()).await;
                        problems.push(format!(
                            "{name}, depth {depth}: put succeeded but get gives {:?}; \
                            search of the parent gives {search:?}",
                            other.map(|o| o.is_some())
                        ));
                        "unreadable".to_owned()
                    }
                },
            };
            seen.push((name, state));
        }
        if seen.iter().any(|(_, s)| *s != seen[0].1) {
            problems.push(format!("depth {depth}: backends disagree: {seen:?}"));
        }
    }
    report(problems);
}

/// A value nested far past `limits::MAX_VALUE_NESTING` (a few thousand
/// levels: one the caller can build and drop) is `LimitExceeded` on every
/// backend, alone or in a batch, with nothing written. (The put measured
/// the value's serialized bytes before its nesting; serializing recurses
/// once per level, and overflowed the stack: the process aborted.)
#[tokio::test]
async fn far_too_deeply_nested_value_is_rejected_not_a_crash() {
    // Built and dropped without recursion deeper than the caller's own.
    let deep = || (0..3_000).fold(json!("core"), |v, _| Value::Array(vec![v]));
    let t = Trio::new(StoreConfig::new()).await;
    let mut problems = Vec::new();
    for (name, s) in t.all() {
        let alone = s.put(&["deep"], "k", deep()).await;
        if !matches!(&alone, Err(Error::LimitExceeded { limit, .. }) if *limit == "store value nesting")
        {
            problems.push(format!("{name}: put: {:?}", alone.map(|_| ())));
        }
        let batch = s
            .batch(vec![
                Op::put(&["deep"], "ok", json!(1)),
                Op::put(&["deep"], "k", deep()),
            ])
            .await;
        if !matches!(&batch, Err(Error::LimitExceeded { .. })) {
            problems.push(format!("{name}: batch: {:?}", batch.map(|_| ())));
        }
        let left = keys(s, &["deep"], Search::new()).await;
        if left != Ok(vec![]) {
            problems.push(format!("{name}: written anyway: {left:?}"));
        }
    }
    report(problems);
}

/// A filter nested thousands of levels deep (one the caller can build and
/// drop) is `LimitExceeded` on every backend, whatever its shape; a filter
/// whose operand is as deep as a storable value still matches, also inside
/// many `$and` levels. (Parsing it recursed once per level: through `$and`
/// lists, copying a deep operand, or quoting a bad operand or a non-object
/// filter in the error message. It overflowed the stack: the process
/// aborted.)
#[tokio::test]
async fn far_too_deeply_nested_filter_is_rejected_not_a_crash() {
    let deep = |depth: usize| (0..depth).fold(json!("core"), |v, _| Value::Array(vec![v]));
    let obj = |k: &str, v: Value| Value::Object([(k.to_owned(), v)].into_iter().collect());
    let and =
        |levels: usize, f: Value| (0..levels).fold(f, |f, _| obj("$and", Value::Array(vec![f])));
    let shapes = || {
        [
            ("not an object", deep(3_000)),
            ("bad $gt operand", obj("a", obj("$gt", deep(3_000)))),
            ("$and not a list", obj("$and", obj("x", deep(3_000)))),
            ("nested $and", and(1_500, json!({"a": 1}))),
            ("deep operand", obj("a", deep(6_000))),
        ]
    };
    let storable = deep(limits::MAX_VALUE_NESTING - 1);
    let t = Trio::new(StoreConfig::new()).await;
    let mut problems = Vec::new();
    for (name, s) in t.all() {
        s.put(&["f"], "k", obj("a", storable.clone()))
            .await
            .unwrap();
        for (what, filter) in shapes() {
            let r = s.search(&["f"], Search::new().filter(filter)).await;
            if !matches!(&r, Err(Error::LimitExceeded { limit, .. }) if *limit == "store filter nesting")
            {
                problems.push(format!("{name}, {what}: {:?}", r.map(|_| ())));
            }
        }
        let exact = obj("a", obj("$eq", storable.clone()));
        for (what, filter) in [
            ("deepest operand", exact.clone()),
            ("in 40 $and", and(40, exact)),
        ] {
            let found = keys(s, &["f"], Search::new().filter(filter)).await;
            if found != Ok(vec!["k".to_owned()]) {
                problems.push(format!("{name}, {what}: {found:?}"));
            }
        }
    }
    report(problems);
}

#[tokio::test]
async fn near_infinite_ttl_survives_refresh_on_read() {
    let t = Trio::new(StoreConfig::new()).await;
    let mut problems = Vec::new();
    // The ceiling weaver accepts (`limits::MAX_TTL`, 100 years) and just under it.
    let max = limits::MAX_TTL.as_micros() as u64;
    for ttl in [max, max - 1_000_000] {
        let opts = PutOptions::new().ttl(Duration::from_micros(ttl));
        for (name, s) in t.all() {
            let key = format!("k{ttl}");
            s.put_with(&["ttl"], &key, json!({"t": "pizza"}), opts.clone())
                .await
                .unwrap();
            for round in 0..2 {
                let got = s.get_with(&["ttl"], &key, Some(true)).await;
                if !matches!(got, Ok(Some(_))) {
                    problems.push(format!(
                        "{name}: ttl {ttl}us, refreshing get #{round}: {got:?}"
                    ));
                }
            }
            let found = keys(s, &["ttl"], Search::query("pizza").refresh_ttl(true)).await;
            if !found.as_ref().is_ok_and(|f| f.contains(&key)) {
                problems.push(format!("{name}: ttl {ttl}us, refreshing search: {found:?}"));
            }
        }
    }
    for (name, s) in t.all() {
        // Longer TTLs ("forever") are capped to `MAX_TTL`: stored, readable,
        // refreshable.
        for (i, ttl) in [limits::MAX_TTL + Duration::from_micros(1), Duration::MAX]
            .into_iter()
            .enumerate()
        {
            let key = format!("long{i}");
            let opts = PutOptions::new().ttl(ttl);
            let put = s.put_with(&["ttl"], &key, json!(1), opts).await;
            let got = s.get_with(&["ttl"], &key, Some(true)).await;
            if put.is_err() || !matches!(got, Ok(Some(_))) {
                problems.push(format!("{name}: a {ttl:?} ttl: put {put:?}, get {got:?}"));
            }
        }
    }
    report(problems);
}

#[tokio::test]
async fn unrepresentable_default_ttl_does_not_break_reads() {
    // A default TTL applies to puts; a get or a search has no TTL to convert.
    let store = InMemoryStore::with_config(StoreConfig::new().default_ttl(Duration::MAX));
    let get = store.get(&["a"], "k").await;
    let search = store.search(&["a"], Search::new()).await;
    let ok = matches!(get, Ok(None)) && matches!(search, Ok(ref v) if v.is_empty());
    assert!(ok, "get {get:?}, search {search:?}");
}

/// Every label and the key within their own limits (256 and 1024 bytes):
/// stored alike on every backend while namespace and key together fit
/// `MAX_ITEM_ADDRESS_BYTES` (what PostgreSQL's primary key can index), and
/// past it refused alike, with nothing of the batch written.
#[tokio::test]
async fn namespace_and_key_within_documented_limits_are_storable() {
    let deep: Vec<String> = (0..limits::MAX_NAMESPACE_DEPTH as u64)
        .map(|i| noise(limits::MAX_LABEL_BYTES, i + 1))
        .collect();
    let modest: Vec<String> = (0..8)
        .map(|i| noise(limits::MAX_LABEL_BYTES, i + 100))
        .collect();
    let fitting: Vec<String> = (0..3)
        .map(|i| noise(limits::MAX_LABEL_BYTES, i + 200))
        .collect();
    let key = noise(limits::MAX_KEY_BYTES, 7);
    let t = Trio::new(StoreConfig::new()).await;
    let mut problems = Vec::new();
    for (name, s) in t.all() {
        let ns: Vec<&str> = fitting.iter().map(String::as_str).collect();
        if let Err(e) = s.put(&ns, &key, json!(1)).await {
            problems.push(format!("{name}: 3 labels x 256 B and a 1 KiB key: {e}"));
        }
        for (what, ns) in [("64 labels x 256 B", &deep), ("8 labels x 256 B", &modest)] {
            let ok_key = format!("ok-{what}");
            let ops = vec![
                Op::put(&["ok"], &ok_key, json!(1)),
                Op::put(&ns[..], &key, json!(1)),
            ];
            let batch = s.batch(ops).await;
            let ns: Vec<&str> = ns.iter().map(String::as_str).collect();
            let (got, first) = (s.get(&ns, &key).await, s.get(&["ok"], &ok_key).await);
            match batch {
                Err(Error::LimitExceeded { limit, .. }) if limit.contains("namespace and key") => {
                    if !matches!(first, Ok(None)) {
                        problems.push(format!(
                            "{name}, {what}: failed batch left its first put: {first:?}"
                        ));
                    }
                }
                Err(e) => problems.push(format!(
                    "{name}, {what}: put failed with {}: {e}",
                    err_name(&e)
                )),
                Ok(_) => problems.push(format!(
                    "{name}, {what}: stored past the address limit (get {got:?})"
                )),
            }
        }
    }
    report(problems);
}

#[tokio::test]
async fn filter_json_form_keeps_every_condition() {
    let t = Trio::new(StoreConfig::new()).await;
    let cases = [
        (
            "n > 30 and n > 20",
            Filter::new().gt("n", 30).gt("n", 20),
            vec!["n35"],
        ),
        (
            "n > 20 and n > 30",
            Filter::new().gt("n", 20).gt("n", 30),
            vec!["n35"],
        ),
        (
            "n == 25 and n == 35",
            Filter::new().eq("n", 25).eq("n", 35),
            vec![],
        ),
    ];
    let mut problems = Vec::new();
    for (name, s) in t.all() {
        s.put(&["f"], "n25", json!({"n": 25})).await.unwrap();
        s.put(&["f"], "n35", json!({"n": 35})).await.unwrap();
        for (what, filter, want) in &cases {
            // The filter itself is right ...
            let direct: Vec<&str> = [("n25", 25), ("n35", 35)]
                .into_iter()
                .filter(|(_, n)| filter.matches(&json!({ "n": n })))
                .map(|(k, _)| k)
                .collect();
            assert_eq!(&direct, want, "Filter::matches {what}");
            // ... but a search takes its JSON form.
            let got = keys(s, &["f"], Search::new().filter(filter.clone())).await;
            if got.as_ref().ok() != Some(&want.iter().map(|k| k.to_string()).collect()) {
                problems.push(format!(
                    "{name}: {what}: search returns {got:?}, want {want:?} \
                    (JSON form {})",
                    Value::from(filter.clone())
                ));
            }
        }
    }
    report(problems);
}

#[tokio::test]
async fn filter_numbers_compare_by_exact_value() {
    let t = Trio::new(StoreConfig::new()).await;
    let cases = [
        (json!({"id": 9007199254740993u64}), vec!["b"]),
        (json!({"id": {"$gt": 9007199254740992u64}}), vec!["b"]),
        (json!({"id": {"$lte": 9007199254740992u64}}), vec!["a"]),
        (
            json!({"id": {"$ne": 9007199254740992u64}}),
            vec!["b", "c", "d"],
        ),
        (json!({"big": {"$lt": u64::MAX}}), vec!["a"]),
        // "numbers compare by value: 1 == 1.0", inside arrays and objects too.
        (json!({"v": [1]}), vec!["c"]),
        (json!({"w": {"x": 1}}), vec!["d"]),
    ];
    let mut problems = Vec::new();
    for (name, s) in t.all() {
        s.put(
            &["n"],
            "a",
            json!({"id": 9007199254740992u64, "big": u64::MAX - 1}),
        )
        .await
        .unwrap();
        s.put(
            &["n"],
            "b",
            json!({"id": 9007199254740993u64, "big": u64::MAX}),
        )
        .await
        .unwrap();
        s.put(&["n"], "c", json!({"v": [1.0]})).await.unwrap();
        s.put(&["n"], "d", json!({"w": {"x": 1.0}})).await.unwrap();
        for (filter, want) in &cases {
            let got = keys(s, &["n"], Search::new().filter(filter.clone())).await;
            if got.as_ref().ok() != Some(&want.iter().map(|k| k.to_string()).collect()) {
                problems.push(format!(
                    "{name}: filter {filter} returns {got:?}, want {want:?}"
                ));
            }
        }
    }
    report(problems);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_batches_never_fail_and_last_write_wins() {
    let t = Trio::new(StoreConfig::new()).await;
    let mut problems = Vec::new();
    for (name, store) in &t.stores {
        // Two writers put the same 8 keys, in opposite orders.
        let writers: Vec<_> = (0..2u32)
            .map(|w| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut errors = Vec::new();
                    for round in 0..15u32 {
                        let mut ks: Vec<u32> = (0..8).collect();
                        if w == 1 {
                            ks.reverse();
                        }
                        let ops = ks
                            .iter()
                            .map(|k| Op::put(&["c"], format!("k{k}"), json!([w, round])))
                            .collect();
                        if let Err(e) = store.batch(ops).await {
                            errors.push(e.to_string());
                        }
                    }
                    errors
                })
            })
            .collect();
        // And 16 single puts of one key at once.
        let puts: Vec<_> = (0..16)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { store.put(&["same"], "k", json!(i)).await })
            })
            .collect();
        for task in writers {
            let errors = task.await.unwrap();
            if !errors.is_empty() {
                problems.push(format!(
                    "{name}: {} of 15 opposite-order batches failed: {}",
                    errors.len(),
                    errors[0]
                ));
            }
        }
        for p in puts {
            if let Err(e) = p.await.unwrap() {
                problems.push(format!("{name}: concurrent put: {e}"));
            }
        }
        let same = store.search(&["same"], Search::new()).await.unwrap();
        if same.len() != 1 || same[0].created_at > same[0].updated_at {
            problems.push(format!(
                "{name}: one key written concurrently gives {same:?}"
            ));
        }
    }
    report(problems);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_reads_see_one_consistent_state() {
    // A batch's writes are "applied atomically"; a batch of two gets must
    // never see half of another batch.
    let t = Trio::new(StoreConfig::new()).await;
    let mut problems = Vec::new();
    for (name, store) in &t.stores {
        store
            .batch(vec![
                Op::put(&["snap"], "a", json!(0)),
                Op::put(&["snap"], "b", json!(0)),
            ])
            .await
            .unwrap();
        let writer = {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 1..=150 {
                    store
                        .batch(vec![
                            Op::put(&["snap"], "a", json!(i)),
                            Op::put(&["snap"], "b", json!(i)),
                        ])
                        .await
                        .unwrap();
                }
            })
        };
        let (mut reads, mut torn) = (0, Vec::new());
        while !writer.is_finished() {
            let r = store
                .batch(vec![Op::get(&["snap"], "a"), Op::get(&["snap"], "b")])
                .await
                .unwrap();
            let v: Vec<Value> = r
                .into_iter()
                .map(|r| match r {
                    OpResult::Got(Some(i)) => i.value,
                    other => json!(format!("{other:?}")),
                })
                .collect();
            reads += 1;
            if v[0] != v[1] {
                torn.push(v);
            }
        }
        writer.await.unwrap();
        if !torn.is_empty() {
            problems.push(format!(
                "{name}: {} of {reads} two-get batches torn, e.g. a, b = {:?}",
                torn.len(),
                torn[0]
            ));
        }
    }
    report(problems);
}

#[tokio::test]
async fn corrupted_rows_are_typed_errors_and_deletable() {
    let t = Trio::new(StoreConfig::new().embedder(embed_fn(|s| vec![s.len() as f32, 1.0]))).await;
    let both = [
        "UPDATE {t} SET value = 'not json' WHERE key = 'k'",
        "UPDATE {t} SET value = '' WHERE key = 'k'",
        "UPDATE {t} SET embedding = decode('010203', 'hex') WHERE key = 'k'",
        "UPDATE {t} SET created_at = -1, updated_at = -5 WHERE key = 'k'",
    ];
    let sqlite_only = [
        "UPDATE {t} SET value = X'FF00' WHERE key = 'k'",
        "UPDATE {t} SET created_at = 'yesterday' WHERE key = 'k'",
        "UPDATE {t} SET expires_at = 1.5e300 WHERE key = 'k'",
        "UPDATE {t} SET embedding = 'text' WHERE key = 'k'",
    ];
    let typed = |e: &Error| matches!(e, Error::Decode { .. } | Error::Storage { .. });
    let mut problems = Vec::new();
    for (i, sql) in both.iter().chain(&sqlite_only).enumerate() {
        for (name, s) in t.all().skip(1) {
            if name == "postgres" && i >= both.len() {
                continue;
            }
            let ns = ["c", &format!("n{i}")[..]];
            s.put(&ns, "k", json!({"t": "pizza"})).await.unwrap();
            s.put(&ns, "fine", json!({"t": "pizza"})).await.unwrap();
            let r = if name == "sqlite" {
                let sql = sql
                    .replace("{t}", "weaver_store_items")
                    .replace("decode('010203', 'hex')", "X'010203'");
                sqlx::raw_sql(AssertSqlSafe(sql))
                    .execute(&t.lite)
                    .await
                    .map(|_| ())
            } else {
                let sql = sql.replace("{t}", &format!("\"{}\".weaver_store_items", t.schema));
                sqlx::raw_sql(AssertSqlSafe(sql))
                    .execute(&t.pg)
                    .await
                    .map(|_| ())
            };
            r.unwrap_or_else(|e| panic!("{name}: corrupting with {sql}: {e}"));
            let get = s.get(&ns, "k").await;
            let search = s.search(&ns, Search::query("pizza")).await;
            // A batch that fails on the bad row writes nothing.
            let batch = s
                .batch(vec![Op::put(&ns, "new", json!(1)), Op::get(&ns, "k")])
                .await;
            let new = s.get(&ns, "new").await;
            let bad = match (&get, &search) {
                (Err(a), Err(b)) => !(typed(a) && typed(b)),
                (Ok(Some(item)), Ok(_)) => {
                    item.created_at > item.updated_at || item.value != json!({"t": "pizza"})
                }
                _ => true,
            };
            if bad {
                problems.push(format!(
                    "{name}: after `{sql}`: get {get:?}, search {:?}",
                    search.map(|v| v.len())
                ));
            }
            if batch.is_err() && !matches!(new, Ok(None)) {
                problems.push(format!(
                    "{name}: after `{sql}`: failed batch left its put: {new:?}"
                ));
            }
            if let Err(e) = s.delete(&ns, "k").await {
                problems.push(format!(
                    "{name}: after `{sql}`: cannot delete the bad row: {e}"
                ));
            }
        }
    }
    report(problems);
}

/// A stored namespace that is not UTF-8 text (SQLite) is a decode error for
/// `list_namespaces`, as it is for `get` and `search` (it was `Storage`).
#[tokio::test]
async fn a_corrupt_stored_namespace_is_a_decode_error_when_listed() {
    let t = Trio::new(StoreConfig::new()).await;
    let lite = t.all().find(|(n, _)| *n == "sqlite").unwrap().1;
    lite.put(&["ok"], "k", json!(1)).await.unwrap();
    lite.put(&["bad"], "k", json!(1)).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(
        "UPDATE weaver_store_items SET namespace = CAST(X'FF00' AS TEXT) WHERE namespace = 'bad'",
    ))
    .execute(&t.lite)
    .await
    .unwrap();
    let listed = lite.list_namespaces(ListNamespaces::new()).await;
    assert!(matches!(listed, Err(Error::Decode { .. })), "{listed:?}");
}

/// A stored namespace no put could have written (an empty label, none at
/// all) is a decode error when searched or listed, on SQLite and
/// PostgreSQL. (It came back as labels that `get` and `delete` refuse.)
#[tokio::test]
async fn a_stored_namespace_with_an_empty_label_is_a_decode_error() {
    let t = Trio::new(StoreConfig::new()).await;
    for bad in ["a..b", ""] {
        for (name, s) in t.all().skip(1) {
            s.put(&["good"], "k", json!(1)).await.unwrap();
            let sql = format!("UPDATE {{t}} SET namespace = '{bad}' WHERE namespace = 'good'");
            t.items_sql(name, &sql).await;
            let found = s.search(&[], Search::new()).await;
            assert!(
                matches!(found, Err(Error::Decode { .. })),
                "{name} {bad:?}: {found:?}"
            );
            let listed = s.list_namespaces(ListNamespaces::new()).await;
            assert!(
                matches!(listed, Err(Error::Decode { .. })),
                "{name} {bad:?}: {listed:?}"
            );
            let sql = format!("DELETE FROM {{t}} WHERE namespace = '{bad}'");
            t.items_sql(name, &sql).await;
        }
    }
}

/// A negative stored TTL is bad data on every backend (a refresh would expire
/// the item as it is read), and a put over an item whose times do not read
/// replaces it as new: the answers the MongoDB store gives.
#[tokio::test]
async fn negative_ttls_refuse_and_bad_times_are_overwritten() {
    let t = Trio::new(StoreConfig::new().refresh_on_read(true)).await;
    let mut problems = Vec::new();
    for (name, s) in t.all().skip(1) {
        let ns = ["ttl"];
        s.put_with(
            &ns,
            "k",
            json!(1),
            PutOptions::new().ttl(Duration::from_secs(60)),
        )
        .await
        .unwrap();
        let sql = "UPDATE {t} SET ttl_micros = -5 WHERE key = 'k'";
        let r = if name == "sqlite" {
            sqlx::raw_sql(AssertSqlSafe(sql.replace("{t}", "weaver_store_items")))
                .execute(&t.lite)
                .await
                .map(|_| ())
        } else {
            let table = format!("\"{}\".weaver_store_items", t.schema);
            sqlx::raw_sql(AssertSqlSafe(sql.replace("{t}", &table)))
                .execute(&t.pg)
                .await
                .map(|_| ())
        };
        r.unwrap_or_else(|e| panic!("{name}: {e}"));
        let get = s.get(&ns, "k").await;
        let search = s.search(&ns, Search::new()).await;
        if !matches!(get, Err(Error::Decode { .. })) || !matches!(search, Err(Error::Decode { .. }))
        {
            problems.push(format!(
                "{name}: a negative TTL read as get {get:?}, search {:?}",
                search.map(|v| v.len())
            ));
        }
        s.delete(&ns, "k").await.unwrap();
    }
    // SQLite alone can hold a time that is not a number.
    let (_, lite) = t.all().nth(1).unwrap();
    lite.put(&["times"], "k", json!(1)).await.unwrap();
    sqlx::raw_sql("UPDATE weaver_store_items SET created_at = 'x' WHERE key = 'k'")
        .execute(&t.lite)
        .await
        .unwrap();
    lite.put(&["times"], "k", json!(2)).await.unwrap();
    let again = lite.get(&["times"], "k").await.unwrap().unwrap();
    if again.value != json!(2) || again.created_at != again.updated_at {
        problems.push(format!("sqlite: a put over bad times gave {again:?}"));
    }
    report(problems);
}

#[tokio::test]
async fn odd_labels_keys_and_listings_agree() {
    let namespaces: Vec<Vec<&str>> = vec![
        vec!["a"],
        vec!["a", "b"],
        vec!["a", "bc"],
        vec!["ab"],
        vec!["a-"],
        vec!["a", "b", "c"],
        vec!["a/b"],
        vec!["a", "b/"],
        vec!["%"],
        vec!["_"],
        vec!["\\"],
        vec!["'"],
        vec!["\""],
        vec!["ü"],
        vec!["🍕", "x"],
        vec![" "],
        vec!["a", "b'"],
        vec!["A"],
        vec!["a", "%"],
        vec!["d"; limits::MAX_NAMESPACE_DEPTH],
    ];
    let ks = [
        "k", "k.x", "%", "_", "'", "\\", "ü", " ", "🍕", "a/b", "K", "k\u{7f}",
    ];
    let prefixes: Vec<Vec<&str>> = vec![
        vec![],
        vec!["a"],
        vec!["a", "b"],
        vec!["ab"],
        vec!["%"],
        vec!["_"],
        vec!["\\"],
        vec!["🍕"],
        vec!["a", "%"],
        vec!["d"; 3],
    ];
    let t = Trio::new(StoreConfig::new()).await;
    let mut answers = Vec::new();
    for (name, s) in t.all() {
        let mut ops: Vec<Op> = namespaces
            .iter()
            .enumerate()
            .map(|(i, ns)| Op::put(ns, ks[i % ks.len()], json!({"i": i, "t": "x y"})))
            .collect();
        ops.extend(
            ks.iter()
                .map(|k| Op::put(&["a", "b"], *k, json!({"k": k, "t": "x"}))),
        );
        s.batch(ops).await.unwrap();
        let mut got = Vec::new();
        for p in &prefixes {
            for (what, q) in [
                ("plain", Search::new().limit(100)),
                ("page", Search::new().limit(3).offset(2)),
                ("query", Search::query("x").limit(100)),
                (
                    "filter",
                    Search::new().filter(json!({"t": {"$gte": "x"}})).limit(100),
                ),
            ] {
                got.push((
                    format!("search {p:?} {what}"),
                    outcome(s.search(p, q).await, |v| show(&v)),
                ));
            }
            let l = || ListNamespaces::new().prefix(p);
            for (what, l) in [
                ("all", l()),
                ("depth 1", l().max_depth(1)),
                ("depth 2 page", l().max_depth(2).limit(2).offset(1)),
                ("suffix b", l().suffix(&["b"])),
                ("suffix d d", l().suffix(&["d", "d"]).max_depth(70)),
            ] {
                got.push((
                    format!("list {p:?} {what}"),
                    outcome(s.list_namespaces(l).await, |v| json!(v)),
                ));
            }
        }
        answers.push((name, got));
    }
    let reference = assert_agree(&answers);
    // a.%, a.b, a.bc after skipping [a]: label-wise, byte-wise dotted order.
    assert_eq!(
        reference["list [\"a\"] depth 2 page"],
        json!([["a", "%"], ["a", "b"]])
    );
    let under_ab = reference["search [\"a\", \"b\"] plain"].as_array().unwrap();
    assert_eq!(
        under_ab.len(),
        ks.len() + 1,
        "a.b's keys and a.b.c (not a.b/ nor a.b')"
    );
    assert!(under_ab.iter().all(|i| i[0][0] == "a" && i[0][1] == "b"));
}

#[tokio::test]
async fn bm25_queries_agree_and_ignore_repetition() {
    let docs = [
        "User likes pizza",
        "PIZZA pizza margherita",
        "Straße in München",
        "naïve café",
        "İstanbul trip",
        "the the the",
        "a.b c-d e_f",
        "",
        "12 1.5 true",
    ];
    let queries = [
        "",
        "   ",
        "!!!",
        "pizza",
        "PIZZA pizza pizza",
        "the",
        "straße",
        "STRASSE",
        "İstanbul",
        "istanbul",
        "a.b",
        "e_f",
        "1.5",
        "true",
        "naïve café café",
        "🍕",
    ];
    let t = Trio::new(StoreConfig::new()).await;
    let mut answers = Vec::new();
    for (name, s) in t.all() {
        for (i, d) in docs.iter().enumerate() {
            s.put(&["docs"], &format!("d{i}"), json!({ "text": d }))
                .await
                .unwrap();
        }
        let hidden = PutOptions::new().not_indexed();
        s.put_with(&["docs"], "hidden", json!({"text": "pizza"}), hidden)
            .await
            .unwrap();
        let other_field = PutOptions::new().index(["text"]);
        s.put_with(&["docs"], "nofield", json!({"x": "pizza"}), other_field)
            .await
            .unwrap();
        let mut got = Vec::new();
        for q in queries {
            let r = s.search(&["docs"], Search::query(q).limit(20)).await;
            got.push((format!("query {q:?}"), outcome(r, |v| show(&v))));
        }
        answers.push((name, got));
    }
    let reference = assert_agree(&answers);
    assert_eq!(
        reference["query \"pizza\""],
        reference["query \"PIZZA pizza pizza\""]
    );
}

#[tokio::test]
async fn expired_items_are_invisible_everywhere() {
    let t = Trio::new(StoreConfig::new()).await;
    let short = PutOptions::new().ttl(Duration::from_millis(300));
    for (_, s) in t.all() {
        s.put_with(
            &["e", "gone"],
            "a",
            json!({"t": "pizza", "n": 1}),
            short.clone(),
        )
        .await
        .unwrap();
        s.put_with(&["e"], "b", json!({"t": "pizza", "n": 1}), short.clone())
            .await
            .unwrap();
        s.put(&["e"], "c", json!({"t": "pizza", "n": 1}))
            .await
            .unwrap();
        s.put(&["e"], "d", json!({"t": "pasta", "n": 2}))
            .await
            .unwrap();
        s.put_with(
            &["e", "zero"],
            "z",
            json!(1),
            PutOptions::new().ttl(Duration::ZERO),
        )
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(450)).await;
    let mut answers = Vec::new();
    for (name, s) in t.all() {
        let mut got = Vec::new();
        for (what, q) in [
            ("plain", Search::new()),
            ("offset", Search::new().offset(1)),
            ("query", Search::query("pizza")),
            ("filter", Search::new().filter(json!({"n": 1}))),
        ] {
            got.push((
                what.to_owned(),
                outcome(s.search(&["e"], q).await, |v| show(&v)),
            ));
        }
        for (what, l) in [
            ("list", ListNamespaces::new()),
            (
                "list depth",
                ListNamespaces::new().prefix(&["e"]).max_depth(2),
            ),
        ] {
            got.push((
                what.to_owned(),
                outcome(s.list_namespaces(l).await, |v| json!(v)),
            ));
        }
        for (ns, k) in [
            (&["e", "gone"][..], "a"),
            (&["e"], "b"),
            (&["e", "zero"], "z"),
        ] {
            got.push((
                format!("get {k}"),
                outcome(s.get(ns, k).await, |v| json!(v.map(|i| i.key))),
            ));
        }
        answers.push((name, got));
    }
    let reference = assert_agree(&answers);
    assert_eq!(reference["list"], json!([["e"]]));
    assert_eq!(
        reference["get z"],
        json!(null),
        "a zero TTL expires at once"
    );
    assert_eq!(reference["offset"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn paging_extremes_agree() {
    let t = Trio::new(StoreConfig::new()).await;
    let mut answers = Vec::new();
    for (name, s) in t.all() {
        for i in 0..5 {
            s.put(
                &["p", &format!("n{}", i % 2)[..]],
                &format!("k{i}"),
                json!({"t": "x", "i": i}),
            )
            .await
            .unwrap();
        }
        let mut got = Vec::new();
        for prefix in [&[][..], &["p"]] {
            for (what, q) in [
                ("limit 0", Search::new().limit(0)),
                ("huge offset", Search::new().offset(usize::MAX)),
                ("i64 offset", Search::new().offset(i64::MAX as usize)),
                ("query huge offset", Search::query("x").offset(usize::MAX)),
                ("max limit", Search::new().limit(limits::MAX_RESULTS)),
                ("over limit", Search::new().limit(limits::MAX_RESULTS + 1)),
                ("query limit 0", Search::query("x").limit(0)),
                (
                    "query at its ceiling",
                    Search::query("x ".repeat(limits::MAX_QUERY_BYTES / 2)),
                ),
                (
                    "query over its ceiling",
                    Search::query("x".repeat(limits::MAX_QUERY_BYTES + 1)),
                ),
            ] {
                got.push((
                    format!("{prefix:?} {what}"),
                    outcome(s.search(prefix, q).await, |v| show(&v)),
                ));
            }
            for (what, l) in [
                ("list limit 0", ListNamespaces::new().limit(0)),
                ("list huge offset", ListNamespaces::new().offset(usize::MAX)),
                (
                    "list deep suffix",
                    ListNamespaces::new()
                        .suffix(&["p", "n1"])
                        .max_depth(usize::MAX),
                ),
            ] {
                let r = s.list_namespaces(l.prefix(prefix)).await;
                got.push((format!("{prefix:?} {what}"), outcome(r, |v| json!(v))));
            }
        }
        got.push((
            "delete missing".into(),
            outcome(s.delete(&["nope"], "nope").await, |_| json!("ok")),
        ));
        answers.push((name, got));
    }
    let reference = assert_agree(&answers);
    assert_eq!(reference["[\"p\"] huge offset"], json!([]));
    assert_eq!(reference["[] list deep suffix"], json!([["p", "n1"]]));
    assert_eq!(
        reference["[] over limit"]["error"],
        json!("LimitExceeded(store search limit)")
    );
    assert_eq!(
        reference["[\"p\"] query over its ceiling"]["error"],
        json!("LimitExceeded(store search query bytes)")
    );
    assert!(reference["[\"p\"] query at its ceiling"].is_array());
}

/// A stored TTL past `limits::MAX_TTL` (written by another writer: weaver
/// caps its own) is bad data a refreshing read must survive without making
/// things worse: the item stays readable, refreshed or not, and its
/// namespace searchable. (The refresh used to compute `now + ttl_micros` in
/// SQL: PostgreSQL failed the read with "bigint out of range", and SQLite
/// stored a `REAL` expiry that every later get and search of the namespace
/// then failed to decode.)
#[tokio::test]
async fn a_stored_ttl_past_the_cap_survives_refreshing_reads() {
    let t = Trio::new(StoreConfig::new()).await;
    let mut problems = Vec::new();
    for (name, s) in t.all().skip(1) {
        let ns = ["huge_ttl"];
        let opts = PutOptions::new().ttl(Duration::from_secs(60));
        s.put_with(&ns, "k", json!(1), opts).await.unwrap();
        let corrupt = "UPDATE {t} SET ttl_micros = 9223372036854775807";
        let done = if name == "sqlite" {
            let sql = corrupt.replace("{t}", "weaver_store_items");
            sqlx::raw_sql(AssertSqlSafe(sql))
                .execute(&t.lite)
                .await
                .map(|r| r.rows_affected())
        } else {
            let sql = corrupt.replace("{t}", &format!("\"{}\".weaver_store_items", t.schema));
            sqlx::raw_sql(AssertSqlSafe(sql))
                .execute(&t.pg)
                .await
                .map(|r| r.rows_affected())
        };
        assert_eq!(done.unwrap(), 1, "{name}");
        for round in 0..2 {
            let refreshed = s.get_with(&ns, "k", Some(true)).await;
            if !matches!(&refreshed, Ok(Some(i)) if i.value == json!(1)) {
                problems.push(format!("{name}: refreshing get #{round}: {refreshed:?}"));
            }
            let found = keys(s, &ns, Search::new().refresh_ttl(true)).await;
            if found != Ok(vec!["k".to_owned()]) {
                problems.push(format!("{name}: refreshing search #{round}: {found:?}"));
            }
        }
        let plain = s.get_with(&ns, "k", Some(false)).await;
        if !matches!(&plain, Ok(Some(i)) if i.value == json!(1)) {
            problems.push(format!("{name}: get after the refreshes: {plain:?}"));
        }
        let found = keys(s, &ns, Search::new()).await;
        if found != Ok(vec!["k".to_owned()]) {
            problems.push(format!("{name}: search after the refreshes: {found:?}"));
        }
    }
    report(problems);
}

/// A stored time before the Unix epoch reads back exactly (not clamped to
/// the epoch), through get, search and listing; an overwrite keeps it as
/// the item's creation. A row created after its last update is corrupt: a
/// typed error, and deletable. (The in-memory store takes its times from
/// the clock only; it shares the conversion these rows go through.)
#[tokio::test]
async fn times_before_the_epoch_round_trip_exactly() {
    let t = Trio::new(StoreConfig::new()).await;
    let mut problems = Vec::new();
    let day = Duration::from_secs(86_400);
    for (name, s) in t.all().skip(1) {
        let ns = ["old"];
        s.put(&ns, "k", json!({"t": "pizza"})).await.unwrap();
        s.put(&ns, "bad", json!({"t": "pizza"})).await.unwrap();
        let sql = [
            "UPDATE {t} SET created_at = -86400000000, updated_at = -1000 WHERE key = 'k'",
            "UPDATE {t} SET created_at = -1, updated_at = -5 WHERE key = 'bad'",
        ];
        for sql in sql {
            if name == "sqlite" {
                let sql = sql.replace("{t}", "weaver_store_items");
                sqlx::raw_sql(AssertSqlSafe(sql))
                    .execute(&t.lite)
                    .await
                    .unwrap();
            } else {
                let sql = sql.replace("{t}", &format!("\"{}\".weaver_store_items", t.schema));
                sqlx::raw_sql(AssertSqlSafe(sql))
                    .execute(&t.pg)
                    .await
                    .unwrap();
            }
        }
        let created = UNIX_EPOCH - day;
        let updated = UNIX_EPOCH - Duration::from_millis(1);
        let got = s.get(&ns, "k").await.unwrap().unwrap();
        if (got.created_at, got.updated_at) != (created, updated) {
            problems.push(format!(
                "{name}: get read {:?} / {:?}",
                got.created_at, got.updated_at
            ));
        }
        let bad = s.get(&ns, "bad").await;
        if !matches!(bad, Err(Error::Decode { .. })) {
            problems.push(format!("{name}: created after updated read as {bad:?}"));
        }
        s.delete(&ns, "bad").await.unwrap();
        let found = s.search(&ns, Search::new()).await.unwrap();
        if found.len() != 1 || found[0].created_at != created {
            problems.push(format!("{name}: search read {found:?}"));
        }
        let again = s.put(&ns, "k", json!({"t": "pasta"})).await.unwrap();
        if again.created_at != created || again.updated_at <= UNIX_EPOCH {
            problems.push(format!(
                "{name}: overwrite gave {:?} / {:?}",
                again.created_at, again.updated_at
            ));
        }
    }
    report(problems);
}

/// An embedder that refuses an empty text, as hosted ones do.
#[derive(Debug)]
struct RefusesEmpty;

#[async_trait::async_trait]
impl weaver::store::Embedder for RefusesEmpty {
    async fn embed(
        &self,
        texts: &[String],
    ) -> std::result::Result<Vec<Vec<f32>>, weaver::BoxError> {
        if texts.iter().any(|t| t.trim().is_empty()) {
            return Err("an empty input cannot be embedded".into());
        }
        Ok(texts.iter().map(|t| vec![t.len() as f32, 1.0]).collect())
    }
}

#[tokio::test]
async fn an_item_with_no_text_to_index_is_not_indexed() {
    // As in LangGraph: a value with no text leaves (or none at the paths to
    // index) is stored unindexed, never embedded as an empty text.
    let t = Trio::new(StoreConfig::new().embedder(Arc::new(RefusesEmpty))).await;
    let mut problems = Vec::new();
    for (name, s) in t.all() {
        let ns = ["e"];
        let puts = [
            ("empty", json!({}), PutOptions::new()),
            ("nulls", json!({"a": null}), PutOptions::new()),
            ("missing", json!({"a": "x"}), PutOptions::new().index(["b"])),
            ("blank", json!({"a": "", "b": [" \n"]}), PutOptions::new()),
            ("text", json!({"t": "pizza"}), PutOptions::new()),
        ];
        for (key, value, options) in puts {
            if let Err(e) = s.put_with(&ns, key, value, options).await {
                problems.push(format!("{name}: put {key}: {e}"));
            }
        }
        match s.search(&ns, Search::query("pizza")).await {
            Ok(found) => {
                let scored: Vec<&str> = found
                    .iter()
                    .filter(|i| i.score.is_some())
                    .map(|i| i.key.as_str())
                    .collect();
                if scored != ["text"] {
                    problems.push(format!("{name}: scored {scored:?}"));
                }
            }
            Err(e) => problems.push(format!("{name}: search: {e}")),
        }
        // A blank query is none: items in key order, unscored.
        match s.search(&ns, Search::query(" ")).await {
            Ok(found) => {
                let keys: Vec<(&str, bool)> = found
                    .iter()
                    .map(|i| (i.key.as_str(), i.score.is_some()))
                    .collect();
                let want = ["blank", "empty", "missing", "nulls", "text"].map(|k| (k, false));
                if keys != want {
                    problems.push(format!("{name}: blank query found {keys:?}"));
                }
            }
            Err(e) => problems.push(format!("{name}: blank query: {e}")),
        }
    }
    report(problems);
}
