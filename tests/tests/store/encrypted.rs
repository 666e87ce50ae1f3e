//! The SQL stores with `with_encryption`: every store behaviour holds (the
//! conformance suites), nothing of an item's value, indexed text or
//! embedding is stored in the clear, and a sealed payload read anywhere but
//! where it was sealed, with a wrong key, tampered, or a plain payload where
//! encryption is required, is `Error::Decrypt`. On a real SQLite file, the
//! real PostgreSQL and the MongoDB test server.

use std::sync::Arc;

use serde_json::{Value, json};
use sqlx::SqlitePool;
use weaver::Error;
use weaver::codec::{EncryptedCodec, EncryptionKey};
use weaver::migrate::{self, Adapter};
use weaver::store::{
    InMemoryStore, MongoStore, PostgresStore, Search, SqliteStore, Store, StoreConfig, embed_fn,
};
use weaver_tests::TempSqlite;
use weaver_tests::store_conformance::{run_store_config_conformance, run_store_conformance};

/// Words the tests' toy embedder counts.
const TOPICS: [&str; 3] = ["saffron", "tango", "granite"];

fn embedder_config() -> StoreConfig {
    StoreConfig::new().embedder(embed_fn(|text: &str| {
        TOPICS
            .iter()
            .map(|w| text.matches(w).count() as f32)
            .collect()
    }))
}

fn codec(keys: &[(&str, u8)]) -> EncryptedCodec {
    EncryptedCodec::json(
        keys.iter()
            .map(|&(id, byte)| EncryptionKey::new(id, [byte; 32]).unwrap()),
    )
    .unwrap()
}

/// One store table on a fresh SQLite file or PostgreSQL schema, with stores
/// on it and raw access to its rows.
enum Table {
    /// The pool, and the file it removes when dropped.
    Sqlite(SqlitePool, #[allow(dead_code)] TempSqlite),
    /// The test server, and the schema it made for this table.
    Postgres(super::postgres::Server, String),
    /// A database of its own on the MongoDB test server, set up.
    Mongo(weaver_tests::mongo::MongoDb),
}

impl Table {
    async fn sqlite() -> Table {
        let file = TempSqlite::new("weaver-sealed-store");
        let pool = SqlitePool::connect(&format!("{}?mode=rwc", file.url()))
            .await
            .expect("open a SQLite temp file");
        migrate::up(&pool, &[Adapter::Store], None).await.unwrap();
        Table::Sqlite(pool, file)
    }

    async fn postgres() -> Table {
        let server = super::postgres::Server::connect().await;
        let schema = server.schema().await;
        Table::Postgres(server, schema)
    }

    async fn mongo() -> Table {
        let db = weaver_tests::mongo::MongoDb::new().await;
        MongoStore::new(db.client.clone(), &db.name, "w_")
            .setup()
            .await
            .unwrap();
        Table::Mongo(db)
    }

    /// A store on the table: plain (`None`) or sealing with `codec`.
    fn store(&self, codec: Option<EncryptedCodec>, config: StoreConfig) -> Arc<dyn Store> {
        fn sealed<S: Store + 'static>(
            store: S,
            codec: Option<EncryptedCodec>,
            seal: fn(S, EncryptedCodec) -> S,
        ) -> Arc<dyn Store> {
            Arc::new(match codec {
                Some(c) => seal(store, c),
                None => store,
            })
        }
        match self {
            Table::Sqlite(pool, _) => sealed(
                SqliteStore::new(pool.clone()).with_config(config),
                codec,
                SqliteStore::with_encryption,
            ),
            Table::Postgres(server, schema) => sealed(
                PostgresStore::new(server.pool().clone())
                    .with_prefix(schema)
                    .unwrap()
                    .with_config(config),
                codec,
                PostgresStore::with_encryption,
            ),
            Table::Mongo(db) => sealed(
                MongoStore::new(db.client.clone(), &db.name, "w_").with_config(config),
                codec,
                MongoStore::with_encryption,
            ),
        }
    }

    fn table(&self) -> String {
        match self {
            Table::Sqlite(..) => "weaver_store_items".into(),
            Table::Postgres(_, schema) => format!("\"{schema}\".weaver_store_items"),
            Table::Mongo(_) => panic!("a SQL statement on a MongoDB table"),
        }
    }

    /// Runs `sql`, with `{t}` standing for the table.
    async fn exec(&self, sql: &str) {
        let sql = sqlx::AssertSqlSafe(sql.replace("{t}", &self.table()));
        match self {
            Table::Sqlite(pool, _) => sqlx::query(sql).execute(pool).await.map(drop),
            Table::Postgres(server, _) => sqlx::query(sql).execute(server.pool()).await.map(drop),
            Table::Mongo(_) => panic!("a SQL statement on a MongoDB table"),
        }
        .unwrap();
    }

    /// The stored value, indexed text and embedding of the item `key` in
    /// the dotted `namespace`, as the database holds them.
    async fn raw(&self, namespace: &str, key: &str) -> (String, Option<String>, Option<Vec<u8>>) {
        let sql = || {
            sqlx::AssertSqlSafe(format!(
                "SELECT value, index_text, embedding FROM {} WHERE namespace = $1 AND key = $2",
                self.table()
            ))
        };
        match self {
            Table::Sqlite(pool, _) => {
                let q = sqlx::query_as(sql()).bind(namespace).bind(key);
                q.fetch_one(pool).await.unwrap()
            }
            Table::Postgres(server, _) => {
                let q = sqlx::query_as(sql()).bind(namespace).bind(key);
                q.fetch_one(server.pool()).await.unwrap()
            }
            Table::Mongo(db) => {
                let d = db
                    .client
                    .database(&db.name)
                    .collection::<mongodb::bson::Document>("w_store_items")
                    .find_one(mongodb::bson::doc! { "ns": namespace, "key": key })
                    .await
                    .unwrap()
                    .expect("the stored item");
                (
                    d.get_str("value").unwrap().to_owned(),
                    d.get_str("index_text").ok().map(str::to_owned),
                    d.get_binary_generic("embedding").ok().cloned(),
                )
            }
        }
    }

    /// Drops the PostgreSQL schema or the MongoDB database.
    async fn cleanup(self) {
        match self {
            Table::Postgres(server, _) => server.cleanup().await,
            Table::Mongo(db) => db.drop_db().await,
            Table::Sqlite(..) => {}
        }
    }
}

/// Whether `r` is `Error::Decrypt` whose reason contains `reason`.
fn decrypt_error<T: std::fmt::Debug>(r: weaver::Result<T>, reason: &str) -> bool {
    matches!(&r, Err(Error::Decrypt { reason: why, .. }) if why.contains(reason))
}

const SECRET: &str = "the saffron tango on granite street";

/// Every store behaviour, on sealed stores.
async fn conformance(make: impl AsyncFn() -> Table) {
    let tables = std::sync::Mutex::new(Vec::new());
    run_store_conformance(|| async {
        let table = make().await;
        let store = table.store(Some(codec(&[("k1", 1)])), StoreConfig::new());
        tables.lock().unwrap().push(table);
        store
    })
    .await;
    run_store_config_conformance(|config| async {
        let table = make().await;
        let store = table.store(Some(codec(&[("k1", 1)])), config);
        tables.lock().unwrap().push(table);
        store
    })
    .await;
    let made = std::mem::take(&mut *tables.lock().unwrap());
    for table in made {
        table.cleanup().await;
    }
}

/// Nothing of the item is in the clear, and every read still works:
/// get, query ranked by BM25 and by embedding, filters.
async fn sealed_at_rest(table: &Table) {
    let sealed = table.store(Some(codec(&[("k1", 1)])), embedder_config());
    let ns = ["users", "u1", "memories"];
    let value = json!({"memory": SECRET, "kind": "place"});
    sealed.put(&ns, "a", value.clone()).await.unwrap();
    sealed
        .put(
            &ns,
            "b",
            json!({"memory": "nothing of note", "kind": "other"}),
        )
        .await
        .unwrap();

    let (stored, index_text, embedding) = table.raw("users.u1.memories", "a").await;
    for word in ["saffron", "granite", "memory", "place"] {
        assert!(!stored.contains(word), "value in the clear: {stored}");
    }
    let index_text = index_text.expect("the item is indexed");
    assert!(!index_text.contains("saffron"), "{index_text}");
    assert!(
        stored.starts_with("V1ZTMQ"),
        "not a WVS1 envelope: {stored}"
    );
    let embedding = embedding.expect("the item is embedded");
    let plain: Vec<u8> = [1f32, 1., 1.]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    assert!(
        !embedding.windows(plain.len()).any(|w| w == plain),
        "embedding in the clear"
    );

    assert_eq!(sealed.get(&ns, "a").await.unwrap().unwrap().value, value);
    let found = sealed
        .search(&["users"], Search::query("granite saffron").limit(1))
        .await
        .unwrap();
    assert_eq!(found[0].key, "a");
    let found = sealed
        .search(&["users"], Search::new().filter(json!({"kind": "place"})))
        .await
        .unwrap();
    assert_eq!(found.iter().map(|i| &i.key).collect::<Vec<_>>(), ["a"]);
    // BM25 over the sealed index text, without an embedder.
    let bm25 = table.store(Some(codec(&[("k1", 1)])), StoreConfig::new());
    let found = bm25
        .search(&["users"], Search::query("tango").limit(1))
        .await
        .unwrap();
    assert_eq!(found[0].key, "a");
}

/// A sealed payload copied to another item, another namespace or another
/// column does not decrypt, and neither does a tampered one.
async fn moved_or_tampered_payloads_fail(table: &Table) {
    let sealed = table.store(Some(codec(&[("k1", 1)])), embedder_config());
    for (ns, key) in [("n1", "a"), ("n1", "b"), ("n2", "a")] {
        sealed
            .put(&[ns], key, json!({"memory": SECRET}))
            .await
            .unwrap();
    }
    // Each case rewrites item n2/a (or n1/b) by hand, then reads it: a
    // typed error, never another item's data.
    let from_n1_a = "(SELECT {col} FROM {t} WHERE namespace = 'n1' AND key = 'a')";
    let cases = [
        (
            "value",
            from_n1_a,
            ("n1", "b"),
            "value moved to another key",
        ),
        (
            "value",
            from_n1_a,
            ("n2", "a"),
            "value moved across namespaces",
        ),
        (
            "value",
            "index_text",
            ("n2", "a"),
            "indexed text as the value",
        ),
        ("embedding", from_n1_a, ("n2", "a"), "embedding moved"),
    ];
    for (col, source, (ns, key), what) in cases {
        sealed
            .put(&[ns], key, json!({"memory": "tango"}))
            .await
            .unwrap();
        let set =
            format!("UPDATE {{t}} SET {col} = {source} WHERE namespace = '{ns}' AND key = '{key}'");
        table.exec(&set.replace("{col}", col)).await;
        // A search reads every part of the item, the embedding included.
        let r = sealed.search(&[ns], Search::query("tango")).await;
        assert!(decrypt_error(r, "authentication failed"), "{what}");
    }
    // A flipped character of the base64 text.
    sealed
        .put(&["n2"], "a", json!({"memory": SECRET}))
        .await
        .unwrap();
    let (stored, ..) = table.raw("n2", "a").await;
    let mut chars: Vec<char> = stored.chars().collect();
    let i = chars.len() / 2;
    chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
    let tampered: String = chars.into_iter().collect();
    table
        .exec(&format!(
            "UPDATE {{t}} SET value = '{tampered}' WHERE namespace = 'n2' AND key = 'a'"
        ))
        .await;
    let r = sealed.get(&["n2"], "a").await;
    assert!(decrypt_error(r, "authentication failed"), "tampered value");
    // Nothing was lost beside the rows changed by hand.
    let untouched = sealed.get(&["n1"], "a").await.unwrap().unwrap();
    assert_eq!(untouched.value, json!({"memory": SECRET}));
}

/// Keys rotate by appending; a store without the sealing key, a plain store
/// meeting a sealed item and a sealed store meeting a plain one all fail
/// with `Error::Decrypt`; plain items are encrypted by reading them through
/// a plain store and putting them through a sealed one.
async fn keys_rotation_and_plain_items(table: &Table) {
    let ns = ["users"];
    let old = table.store(Some(codec(&[("k1", 1)])), StoreConfig::new());
    old.put(&ns, "old", json!({"n": 1})).await.unwrap();
    let rotated = table.store(Some(codec(&[("k1", 1), ("k2", 2)])), StoreConfig::new());
    assert_eq!(
        rotated.get(&ns, "old").await.unwrap().unwrap().value,
        json!({"n": 1})
    );
    rotated.put(&ns, "new", json!({"n": 2})).await.unwrap();
    let only_new = table.store(Some(codec(&[("k2", 2)])), StoreConfig::new());
    assert_eq!(
        only_new.get(&ns, "new").await.unwrap().unwrap().value,
        json!({"n": 2})
    );
    let r = only_new.get(&ns, "old").await;
    assert!(decrypt_error(r, "unknown key id `k1`"), "old key dropped");
    // An expired item is gone for every read, whatever its payload: it is
    // not opened, so a key dropped since is no error.
    let brief = weaver::store::PutOptions::new().ttl(std::time::Duration::from_millis(1));
    old.put_with(&ns, "brief", json!({"n": 0}), brief)
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let r = only_new.get(&ns, "brief").await;
    assert!(matches!(r, Ok(None)), "an expired item: {r:?}");
    let wrong = table.store(Some(codec(&[("k1", 9)])), StoreConfig::new());
    let r = wrong.get(&ns, "old").await;
    assert!(
        decrypt_error(r, "authentication failed"),
        "wrong key material"
    );

    let plain = table.store(None, StoreConfig::new());
    let r = plain.get(&ns, "new").await;
    assert!(
        decrypt_error(r, "it is encrypted"),
        "plain store, sealed item"
    );
    plain.put(&["legacy"], "p", json!({"n": 3})).await.unwrap();
    let r = rotated.get(&["legacy"], "p").await;
    assert!(
        decrypt_error(r, "not encrypted"),
        "sealed store, plain item"
    );
    // A search that meets the plain item fails rather than skipping it.
    let r = rotated.search(&["legacy"], Search::new()).await;
    assert!(
        decrypt_error(r, "not encrypted"),
        "search over a plain item"
    );

    // Encrypting what was stored plain.
    let item = plain.get(&["legacy"], "p").await.unwrap().unwrap();
    rotated.put(&["legacy"], "p", item.value).await.unwrap();
    assert_eq!(
        rotated.get(&["legacy"], "p").await.unwrap().unwrap().value,
        json!({"n": 3})
    );
    let (stored, ..) = table.raw("legacy", "p").await;
    assert!(serde_json::from_str::<Value>(&stored).is_err(), "{stored}");
}

mod sqlite {
    use super::*;

    #[tokio::test]
    async fn sealed_stores_pass_the_store_conformance_suites() {
        conformance(Table::sqlite).await;
    }

    #[tokio::test]
    async fn nothing_of_a_sealed_item_is_stored_in_the_clear() {
        sealed_at_rest(&Table::sqlite().await).await;
    }

    #[tokio::test]
    async fn moved_or_tampered_sealed_payloads_are_decrypt_errors() {
        moved_or_tampered_payloads_fail(&Table::sqlite().await).await;
    }

    #[tokio::test]
    async fn store_keys_rotate_and_plain_items_are_refused() {
        keys_rotation_and_plain_items(&Table::sqlite().await).await;
    }
}

mod postgres {
    use super::*;

    #[tokio::test]
    async fn sealed_stores_pass_the_store_conformance_suites() {
        conformance(Table::postgres).await;
    }

    #[tokio::test]
    async fn nothing_of_a_sealed_item_is_stored_in_the_clear() {
        let table = Table::postgres().await;
        sealed_at_rest(&table).await;
        table.cleanup().await;
    }

    #[tokio::test]
    async fn moved_or_tampered_sealed_payloads_are_decrypt_errors() {
        let table = Table::postgres().await;
        moved_or_tampered_payloads_fail(&table).await;
        table.cleanup().await;
    }

    #[tokio::test]
    async fn store_keys_rotate_and_plain_items_are_refused() {
        let table = Table::postgres().await;
        keys_rotation_and_plain_items(&table).await;
        table.cleanup().await;
    }
}

mod mongo {
    use super::*;

    #[tokio::test]
    async fn sealed_stores_pass_the_store_conformance_suites() {
        conformance(Table::mongo).await;
    }

    #[tokio::test]
    async fn nothing_of_a_sealed_item_is_stored_in_the_clear() {
        let table = Table::mongo().await;
        sealed_at_rest(&table).await;
        table.cleanup().await;
    }

    #[tokio::test]
    async fn store_keys_rotate_and_plain_items_are_refused() {
        let table = Table::mongo().await;
        keys_rotation_and_plain_items(&table).await;
        table.cleanup().await;
    }
}

mod memory {
    use super::*;

    #[tokio::test]
    async fn sealed_in_memory_stores_pass_the_store_conformance_suites() {
        run_store_conformance(|| async {
            Arc::new(InMemoryStore::new().with_encryption(codec(&[("k1", 1)]))) as Arc<dyn Store>
        })
        .await;
        run_store_config_conformance(|config| async move {
            let store = InMemoryStore::with_config(config).with_encryption(codec(&[("k1", 1)]));
            Arc::new(store) as Arc<dyn Store>
        })
        .await;
    }
}
