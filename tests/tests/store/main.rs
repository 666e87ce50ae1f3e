//! Store tests: the conformance suite on every backend, and the store in graphs.

mod edge_cases;
mod encrypted;
mod mongo;
mod pooler;
mod slow;

use serde_json::Value;
use weaver::store::OpResult;

/// The value a get's result holds (`None`: absent); panics on another result.
fn got(result: &OpResult) -> Option<Value> {
    match result {
        OpResult::Got(item) => item.as_ref().map(|i| i.value.clone()),
        other => panic!("expected a get's result, got {other:?}"),
    }
}

mod memory {
    use std::sync::Arc;

    use weaver::store::{InMemoryStore, Store};
    use weaver_tests::store_conformance::{run_store_config_conformance, run_store_conformance};

    #[tokio::test]
    async fn conformance() {
        run_store_conformance(|| async { Arc::new(InMemoryStore::new()) as Arc<dyn Store> }).await;
    }

    #[tokio::test]
    async fn config_conformance() {
        run_store_config_conformance(|c| async move {
            Arc::new(InMemoryStore::with_config(c)) as Arc<dyn Store>
        })
        .await;
    }

    #[tokio::test]
    async fn cross_thread() {
        super::graph::cross_thread_memory(Arc::new(InMemoryStore::new())).await;
    }

    /// An item expiring after 30 ms, with a sweeper every `period` started;
    /// 200 ms later, nothing read the item, so only the sweeper can have
    /// deleted it.
    async fn swept_by(period: std::time::Duration) -> tokio::task::JoinHandle<()> {
        use std::time::Duration;
        use weaver::store::{PutOptions, spawn_sweeper};

        let store: Arc<dyn Store> = Arc::new(InMemoryStore::new());
        let ttl = PutOptions::new().ttl(Duration::from_millis(30));
        store
            .put_with(&["s"], "k", serde_json::json!(1), ttl)
            .await
            .unwrap();
        let sweeper = spawn_sweeper(store.clone(), period);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(store.sweep().await.unwrap(), 0, "the sweeper swept");
        sweeper
    }

    #[tokio::test]
    async fn background_sweeper_deletes_expired_items() {
        swept_by(std::time::Duration::from_millis(50)).await.abort();
    }

    /// A zero period sweeps (every millisecond) instead of killing the
    /// sweeper's task with a panic.
    #[tokio::test]
    async fn a_sweeper_with_a_zero_period_still_sweeps() {
        let sweeper = swept_by(std::time::Duration::ZERO).await;
        assert!(!sweeper.is_finished(), "the sweeper's task ended");
        sweeper.abort();
    }
}

mod graph {
    use std::sync::Arc;

    use serde_json::json;
    use weaver::prelude::*;
    use weaver::store::{Search, Store};
    use weaver_tests::states::{Steps, StepsUpdate};

    /// The per-run context: who the run is for.
    #[derive(Debug)]
    pub struct User {
        pub id: String,
    }

    fn user_namespace(rt: &Runtime) -> Result<(Arc<dyn Store>, String), NodeError> {
        let store = rt
            .store()
            .cloned()
            .ok_or_else(|| NodeError::msg("graph compiled without a store"))?;
        let user = rt
            .context::<User>()
            .ok_or_else(|| NodeError::msg("run without a user context"))?;
        Ok((store, user.id.clone()))
    }

    async fn remember(s: &Steps, rt: &Runtime) -> Result<StepsUpdate, NodeError> {
        let (store, user) = user_namespace(rt)?;
        store
            .put(
                &["users", &user, "memories"],
                "food",
                json!({ "memory": s.foo.clone() }),
            )
            .await?;
        Ok(StepsUpdate::default().bar(["stored"]))
    }

    async fn recall(s: &Steps, rt: &Runtime) -> Result<StepsUpdate, NodeError> {
        let (store, user) = user_namespace(rt)?;
        let items = store
            .search(&["users", &user], Search::query(s.foo.clone()).limit(3))
            .await?;
        Ok(StepsUpdate::default().bar(
            items
                .iter()
                .map(|i| i.value["memory"].as_str().unwrap_or_default().to_owned()),
        ))
    }

    /// One thread's node stores a fact under `["users", user_id,
    /// "memories"]`; a node in another thread (same user) finds it with
    /// `search`; another user's thread does not.
    pub async fn cross_thread_memory(store: Arc<dyn Store>) {
        let saver = InMemorySaver::new();
        let writer = Graph::<Steps>::new("remember")
            .add_node("remember", remember)
            .add_edge(START, "remember")
            .add_edge("remember", END)
            .compile(
                Compile::new()
                    .checkpointer(saver.clone())
                    .store_arc(store.clone()),
            )
            .unwrap();
        let reader = Graph::<Steps>::new("recall")
            .add_node("recall", recall)
            .add_edge(START, "recall")
            .add_edge("recall", END)
            .compile(Compile::new().checkpointer(saver).store_arc(store.clone()))
            .unwrap();
        assert!(reader.store().is_some());

        let ann = |thread: &str| {
            RunConfig::thread(thread).with_context(User {
                id: "user-123".into(),
            })
        };
        let input = Steps {
            foo: "User likes pizza".into(),
            bar: vec![],
        };
        let out = writer
            .invoke(input, &ann("thread-1"))
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(out.bar, ["stored"]);

        let query = Steps {
            foo: "pizza".into(),
            bar: vec![],
        };
        let found = reader
            .invoke(query.clone(), &ann("thread-2"))
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(found.bar, ["User likes pizza"]);

        let bob = RunConfig::thread("thread-3").with_context(User { id: "bob".into() });
        let other = reader
            .invoke(query, &bob)
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert!(other.bar.is_empty(), "another user's namespace is separate");

        // Without a store the node reports it, as a node failure.
        let bare = Graph::<Steps>::new("bare")
            .add_node("recall", recall)
            .add_edge(START, "recall")
            .add_edge("recall", END)
            .compile(Compile::new())
            .unwrap();
        assert!(bare.store().is_none());
        let err = bare
            .invoke(
                Steps::default(),
                &RunConfig::default().with_context(User { id: "x".into() }),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, weaver::Error::NodeFailed { .. }), "{err}");
    }
}

/// Where the PostgreSQL tests connect: `DATABASE_URL`, or the local server.
fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A unique name for a fresh database object of this test process.
fn unique(tag: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{tag}_{}_{nanos}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

mod sqlite {
    use std::sync::Arc;
    use std::time::Duration;

    use sqlx::Connection;
    use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePoolOptions};
    use weaver::migrate::{self, Adapter};
    use weaver::store::{Op, OpResult, SqliteStore, Store, StoreConfig};
    use weaver_tests::TempSqlite;
    use weaver_tests::store_conformance::{run_store_config_conformance, run_store_conformance};

    /// A store on a fresh SQLite file in the temp directory.
    pub async fn fresh(config: StoreConfig) -> Arc<dyn Store> {
        fresh_file(config).await.0
    }

    /// A SQLite store whose file is removed when the store is dropped.
    #[derive(Debug)]
    struct FileStore {
        store: SqliteStore,
        _file: TempSqlite,
    }

    #[async_trait::async_trait]
    impl Store for FileStore {
        async fn batch(&self, ops: Vec<Op>) -> weaver::Result<Vec<OpResult>> {
            self.store.batch(ops).await
        }

        async fn sweep(&self) -> weaver::Result<u64> {
            self.store.sweep().await
        }
    }

    /// [`fresh`], with the file's path.
    async fn fresh_file(config: StoreConfig) -> (Arc<dyn Store>, std::path::PathBuf) {
        let file = TempSqlite::new("weaver-store");
        let pool = SqlitePoolOptions::new()
            .connect_with(
                SqliteConnectOptions::new()
                    .filename(&file.path)
                    .create_if_missing(true)
                    .busy_timeout(Duration::from_secs(10)),
            )
            .await
            .expect("open a SQLite temp file");
        migrate::up(&pool, &[Adapter::Store], None).await.unwrap();
        let path = file.path.clone();
        let store = FileStore {
            store: SqliteStore::new(pool).with_config(config),
            _file: file,
        };
        (Arc::new(store), path)
    }

    /// Another connection holds the database's write lock (`BEGIN
    /// IMMEDIATE`, with a write of its own not committed): reads go on
    /// (WAL), writes wait.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn read_only_batches_do_not_wait_for_the_write_lock() {
        let (store, path) = fresh_file(StoreConfig::new()).await;
        super::locking::reads_skip_the_write_lock(store, async || {
            let (held_tx, held_rx) = tokio::sync::oneshot::channel();
            let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
            tokio::spawn(async move {
                let options = SqliteConnectOptions::new().filename(&path);
                let mut holder = SqliteConnection::connect_with(&options).await.unwrap();
                let mut held = holder.begin_with("BEGIN IMMEDIATE").await.unwrap();
                sqlx::query("DELETE FROM weaver_store_items WHERE key = 'a'")
                    .execute(&mut *held)
                    .await
                    .unwrap();
                held_tx.send(()).unwrap();
                let _ = release_rx.await;
                held.rollback().await.unwrap();
            });
            held_rx.await.expect("the lock holder failed");
            release_tx
        })
        .await;
    }

    /// Read-only batches (no lock, `BEGIN DEFERRED`) beside writing ones on
    /// one pool, in every journal mode a user may choose: WAL, a rollback
    /// journal, and a shared-cache in-memory database. None fails.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn deferred_reads_beside_writes_never_fail_in_any_journal_mode() {
        use sqlx::sqlite::SqliteJournalMode;
        use weaver::store::{ListNamespaces, Op};
        for mode in ["wal", "delete", "shared-memory"] {
            let name = super::unique("weaver_store");
            let file = TempSqlite::new("weaver-store");
            let options = match mode {
                "wal" => SqliteConnectOptions::new()
                    .filename(&file.path)
                    .create_if_missing(true),
                "delete" => SqliteConnectOptions::new()
                    .filename(&file.path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Delete),
                _ => format!("sqlite:file:{name}?mode=memory&cache=shared")
                    .parse::<SqliteConnectOptions>()
                    .unwrap(),
            }
            .busy_timeout(Duration::from_secs(10));
            let pool = SqlitePoolOptions::new()
                .max_connections(6)
                .min_connections(1)
                .connect_with(options)
                .await
                .unwrap();
            migrate::up(&pool, &[Adapter::Store], None).await.unwrap();
            let store: Arc<dyn Store> = Arc::new(SqliteStore::new(pool));
            let mut tasks = Vec::new();
            for w in 0..6 {
                let store = store.clone();
                tasks.push(tokio::spawn(async move {
                    for i in 0..60 {
                        let key = format!("k{}", i % 5);
                        if w % 2 == 0 {
                            store
                                .put(&["ns", &format!("w{w}")], &key, serde_json::json!(i))
                                .await
                                .map(|_| ())?;
                        } else {
                            store
                                .batch(vec![
                                    Op::Get {
                                        namespace: vec!["ns".into(), "w0".into()],
                                        key,
                                        refresh_ttl: Some(false),
                                    },
                                    Op::ListNamespaces(ListNamespaces::default()),
                                ])
                                .await?;
                        }
                    }
                    Ok::<(), weaver::Error>(())
                }));
            }
            for t in tasks {
                t.await.unwrap().unwrap_or_else(|e| panic!("{mode}: {e:?}"));
            }
        }
    }

    #[tokio::test]
    async fn conformance() {
        run_store_conformance(|| fresh(StoreConfig::new())).await;
    }

    #[tokio::test]
    async fn config_conformance() {
        run_store_config_conformance(fresh).await;
    }

    #[tokio::test]
    async fn cross_thread() {
        super::graph::cross_thread_memory(fresh(StoreConfig::new()).await).await;
    }

    #[tokio::test]
    async fn store_schema_migrates_up_and_down() {
        let file = TempSqlite::new("weaver-store");
        let pool = SqlitePoolOptions::new()
            .connect_with(
                SqliteConnectOptions::new()
                    .filename(&file.path)
                    .create_if_missing(true),
            )
            .await
            .unwrap();
        migrate::up(&pool, &[Adapter::Store], None).await.unwrap();
        migrate::up(&pool, &[Adapter::Store], None).await.unwrap();
        assert_eq!(
            migrate::versions(&pool, &[Adapter::Store]).await.unwrap(),
            [1]
        );
        let store = SqliteStore::new(pool.clone());
        store.put(&["a"], "k", serde_json::json!(1)).await.unwrap();
        migrate::down(&pool, &[Adapter::Store], 1).await.unwrap();
        assert_eq!(
            migrate::versions(&pool, &[Adapter::Store]).await.unwrap(),
            [0]
        );
        let fresh = SqliteStore::new(pool.clone());
        assert!(matches!(
            fresh.get(&["a"], "k").await,
            Err(weaver::Error::MigrationRequired {
                found: 0,
                required: 1,
                ..
            })
        ));
        migrate::up(&pool, &[Adapter::Store], None).await.unwrap();
        assert!(
            fresh.get(&["a"], "k").await.unwrap().is_none(),
            "down dropped the items"
        );
    }

    #[tokio::test]
    async fn unmigrated_database_is_a_typed_error() {
        let file = TempSqlite::new("weaver-store");
        let pool = SqlitePoolOptions::new()
            .connect_with(
                SqliteConnectOptions::new()
                    .filename(&file.path)
                    .create_if_missing(true),
            )
            .await
            .unwrap();
        let store = SqliteStore::new(pool);
        let err = store.get(&["a"], "k").await.unwrap_err();
        assert!(
            matches!(err, weaver::Error::MigrationRequired { found: 0, .. }),
            "{err}"
        );
    }
}

mod postgres {
    use std::sync::{Arc, Mutex};

    use serde_json::json;
    use sqlx::postgres::PgPoolOptions;
    use sqlx::{Connection, PgConnection, PgPool};
    use weaver::migrate::{self, Adapter, PgSchema};
    use weaver::store::{ListNamespaces, Op, OpResult, PostgresStore, Search, Store, StoreConfig};
    use weaver_tests::store_conformance::{run_store_config_conformance, run_store_conformance};

    /// The store's write lock of the table in schema `$1`, as another
    /// session takes it.
    const STORE_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('weaver.store:' || CAST(CAST(to_regclass(quote_ident($1) || '.weaver_store_items') AS oid) AS TEXT)))";

    /// A store that names its table through the search path, whose first
    /// schema exists but holds no table (so `current_schema()` is not the
    /// table's), takes the same write lock as one naming the schema: its
    /// write waits while another session holds that lock.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_write_lock_is_the_tables_whatever_the_search_path() {
        use std::str::FromStr;
        let server = Server::connect().await;
        let schema = server.schema().await;
        let empty = super::unique("weaver_empty");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{empty}\"")))
            .execute(&server.pool)
            .await
            .unwrap();
        server.schemas.lock().unwrap().push(empty.clone());
        let options = sqlx::postgres::PgConnectOptions::from_str(&super::database_url())
            .unwrap()
            .options([("search_path", format!("\"{empty}\", \"{schema}\""))]);
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await
            .unwrap();
        let store = PostgresStore::new(pool.clone());
        let mut holder = PgConnection::connect(&super::database_url()).await.unwrap();
        let mut held = holder.begin().await.unwrap();
        sqlx::query(STORE_LOCK)
            .bind(&schema)
            .execute(&mut *held)
            .await
            .unwrap();
        let put = tokio::spawn(async move { store.put(&["a"], "k", json!(1)).await });
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(
            !put.is_finished(),
            "the write did not wait for the table's lock"
        );
        held.commit().await.unwrap();
        put.await.unwrap().unwrap();
        pool.close().await;
        server.cleanup().await;
    }

    /// Fresh schemas on the test server, dropped by [`Server::cleanup`].
    pub struct Server {
        pool: PgPool,
        schemas: Mutex<Vec<String>>,
    }

    impl Server {
        /// Connects, or fails the test saying the server is unreachable.
        pub async fn connect() -> Server {
            let url = super::database_url();
            let pool = PgPoolOptions::new()
                .max_connections(4)
                .connect(&url)
                .await
                .unwrap_or_else(|e| {
                    panic!("PostgreSQL is unreachable at {url} (set DATABASE_URL): {e}")
                });
            Server {
                pool,
                schemas: Mutex::new(Vec::new()),
            }
        }

        /// A store in a fresh, migrated schema.
        pub async fn fresh(&self, config: StoreConfig) -> Arc<dyn Store> {
            let schema = self.schema().await;
            Arc::new(
                PostgresStore::new(self.pool.clone())
                    .with_prefix(&schema)
                    .unwrap()
                    .with_config(config),
            )
        }

        /// The name of a fresh schema with the store's table migrated.
        pub async fn schema(&self) -> String {
            let schema = super::unique("weaver_store");
            migrate::up(
                &PgSchema::new(&self.pool, &schema).unwrap(),
                &[Adapter::Store],
                None,
            )
            .await
            .unwrap();
            self.schemas.lock().unwrap().push(schema.clone());
            schema
        }

        /// The pool on the test server.
        pub fn pool(&self) -> &PgPool {
            &self.pool
        }

        /// Drops the schemas this server handed out.
        pub async fn cleanup(&self) {
            let schemas = std::mem::take(&mut *self.schemas.lock().unwrap());
            for s in schemas {
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA \"{s}\" CASCADE")))
                    .execute(&self.pool)
                    .await
                    .unwrap();
            }
        }
    }

    #[tokio::test]
    async fn conformance() {
        let server = Server::connect().await;
        run_store_conformance(|| server.fresh(StoreConfig::new())).await;
        server.cleanup().await;
    }

    #[tokio::test]
    async fn config_conformance() {
        let server = Server::connect().await;
        run_store_config_conformance(|c| server.fresh(c)).await;
        server.cleanup().await;
    }

    #[tokio::test]
    async fn cross_thread() {
        let server = Server::connect().await;
        super::graph::cross_thread_memory(server.fresh(StoreConfig::new()).await).await;
        server.cleanup().await;
    }

    #[tokio::test]
    async fn store_schema_migrates_up_and_down() {
        let server = Server::connect().await;
        let schema = super::unique("weaver_store_mig");
        let target = PgSchema::new(&server.pool, &schema).unwrap();
        migrate::up(&target, &[Adapter::Store], None).await.unwrap();
        server.schemas.lock().unwrap().push(schema.clone());
        assert_eq!(
            migrate::versions(&target, &[Adapter::Store]).await.unwrap(),
            [1]
        );
        let store = PostgresStore::new(server.pool.clone())
            .with_prefix(&schema)
            .unwrap();
        store.put(&["a"], "k", serde_json::json!(1)).await.unwrap();
        migrate::down(&target, &[Adapter::Store], 1).await.unwrap();
        assert_eq!(
            migrate::versions(&target, &[Adapter::Store]).await.unwrap(),
            [0]
        );
        migrate::up(&target, &[Adapter::Store], None).await.unwrap();
        assert!(
            store.get(&["a"], "k").await.unwrap().is_none(),
            "down dropped the items"
        );
        server.cleanup().await;
    }

    /// [`super::locking::reads_skip_the_write_lock`] with the store's
    /// advisory lock held by another session.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn read_only_batches_do_not_wait_for_the_write_lock() {
        let server = Server::connect().await;
        let schema = server.schema().await;
        // Enough connections for every batch below to wait at once.
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .connect(&super::database_url())
            .await
            .unwrap();
        let store: Arc<dyn Store> = Arc::new(
            PostgresStore::new(pool.clone())
                .with_prefix(&schema)
                .unwrap(),
        );
        super::locking::reads_skip_the_write_lock(store, async || {
            let (held_tx, held_rx) = tokio::sync::oneshot::channel();
            let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
            let (url, schema) = (super::database_url(), schema.clone());
            tokio::spawn(async move {
                let mut holder = PgConnection::connect(&url).await.unwrap();
                let mut held = holder.begin().await.unwrap();
                sqlx::query(STORE_LOCK)
                    .bind(&schema)
                    .execute(&mut *held)
                    .await
                    .unwrap();
                held_tx.send(()).unwrap();
                let _ = release_rx.await;
                held.commit().await.unwrap();
            });
            held_rx.await.expect("the lock holder failed");
            release_tx
        })
        .await;
        pool.close().await;
        server.cleanup().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn read_only_batches_never_see_half_of_a_writing_batch() {
        let server = Server::connect().await;
        let store = server.fresh(StoreConfig::new()).await;
        let pair = ["snap", "pair"];
        store
            .batch(vec![
                Op::put(&pair, "a", json!({"v": 0})),
                Op::put(&pair, "b", json!({"v": 0})),
            ])
            .await
            .unwrap();
        // Batch `i` writes `a`, a new namespace, then `b`: state `i` has
        // a = b = i, i + 1 namespaces and i + 2 items.
        let writer = {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 1..=150 {
                    let fresh = ["snap".to_owned(), format!("n{i:03}")];
                    store
                        .batch(vec![
                            Op::put(&pair, "a", json!({ "v": i })),
                            Op::put(&fresh, "k", json!({ "v": i })),
                            Op::put(&pair, "b", json!({ "v": i })),
                        ])
                        .await
                        .unwrap();
                }
            })
        };
        let (mut reads, mut torn) = (0, Vec::new());
        while !writer.is_finished() {
            let r = store
                .batch(vec![
                    Op::get(&pair, "a"),
                    Op::ListNamespaces(ListNamespaces::new().prefix(&["snap"]).limit(1000)),
                    Op::search(
                        &["snap"],
                        Search::new().filter(json!({"v": {"$gte": 0}})).limit(1000),
                    ),
                    Op::get(&pair, "b"),
                ])
                .await
                .unwrap();
            let version = |r: &OpResult| super::got(r).and_then(|v| v["v"].as_u64());
            let (a, b) = (version(&r[0]), version(&r[3]));
            let namespaces = match &r[1] {
                OpResult::Namespaces(ns) => ns.len() as u64,
                other => panic!("listing: {other:?}"),
            };
            let items = match &r[2] {
                OpResult::Found(items) => items.len() as u64,
                other => panic!("search: {other:?}"),
            };
            reads += 1;
            let state = a.unwrap_or(u64::MAX);
            if b != a || namespaces != state + 1 || items != state + 2 {
                torn.push((a, namespaces, items, b));
            }
        }
        writer.await.unwrap();
        assert!(reads > 0);
        assert!(
            torn.is_empty(),
            "{} of {reads} read-only batches saw half of a batch, e.g. (a, namespaces, items, b) = {:?}",
            torn.len(),
            torn[0]
        );
        server.cleanup().await;
    }

    #[tokio::test]
    async fn unmigrated_schema_is_a_typed_error() {
        let server = Server::connect().await;
        let store = PostgresStore::new(server.pool.clone())
            .with_prefix(&super::unique("weaver_store_missing"))
            .unwrap();
        let err = store.search(&["a"], Default::default()).await.unwrap_err();
        assert!(
            matches!(err, weaver::Error::MigrationRequired { found: 0, .. }),
            "{err}"
        );
        assert!(matches!(
            PostgresStore::new(server.pool.clone()).with_prefix("bad-name;"),
            Err(weaver::Error::InvalidArgument { .. })
        ));
    }
}

/// The three backends give identical answers (items, order, scores) to the
/// same workload.
mod agreement {
    use std::sync::Arc;

    use serde_json::{Value, json};
    use weaver::store::{
        InMemoryStore, ListNamespaces, Op, OpResult, PutOptions, Search, Store, StoreConfig,
    };

    const WORDS: [&str; 10] = [
        "pizza", "pasta", "jazz", "rock", "piano", "paris", "rome", "tea", "chess", "cats",
    ];

    fn workload() -> Vec<Op> {
        let mut ops = Vec::new();
        for i in 0..60usize {
            let ns = [
                "users".to_owned(),
                format!("u{}", i % 4),
                ["memories", "prefs"][i % 2].to_owned(),
            ];
            let text: Vec<&str> = (0..1 + i % 5)
                .map(|j| WORDS[(i * 7 + j * 3) % 10])
                .collect();
            let value = json!({"text": text.join(" "), "n": i, "tag": WORDS[i % 10]});
            let options = match i % 6 {
                0 => PutOptions::new().not_indexed(),
                1 => PutOptions::new().index(["tag"]),
                _ => PutOptions::new(),
            };
            ops.push(Op::put_with(&ns, format!("k{i:02}"), value, options));
        }
        ops
    }

    fn reads() -> Vec<Op> {
        let mut ops = Vec::new();
        for prefix in [
            &[][..],
            &["users"],
            &["users", "u1"],
            &["users", "u2", "prefs"],
        ] {
            for q in ["pizza", "jazz piano", "rome rome tea", "nothing"] {
                ops.push(Op::search(prefix, Search::query(q).limit(7)));
                ops.push(Op::search(prefix, Search::query(q).limit(5).offset(3)));
            }
            ops.push(Op::search(prefix, Search::new().limit(9).offset(2)));
            ops.push(Op::search(
                prefix,
                Search::query("pizza").filter(json!({"n": {"$gte": 20, "$lt": 50}})),
            ));
            ops.push(Op::search(
                prefix,
                Search::new().filter(json!({"tag": {"$ne": "rock"}})),
            ));
            ops.push(Op::ListNamespaces(ListNamespaces::new().prefix(prefix)));
            ops.push(Op::ListNamespaces(
                ListNamespaces::new().prefix(prefix).max_depth(2),
            ));
        }
        ops.push(Op::ListNamespaces(
            ListNamespaces::new().suffix(&["prefs"]).offset(1),
        ));
        ops
    }

    /// Results without timestamps (which differ between runs).
    fn comparable(results: Vec<OpResult>) -> Vec<Value> {
        results
            .into_iter()
            .map(|r| match r {
                OpResult::Found(items) => Value::Array(
                    items
                        .into_iter()
                        .map(|i| json!([i.namespace, i.key, i.value, i.score.map(f64::to_bits)]))
                        .collect(),
                ),
                OpResult::Namespaces(ns) => json!(ns),
                other => json!(format!("{other:?}")),
            })
            .collect()
    }

    async fn answers(store: Arc<dyn Store>) -> Vec<Value> {
        store.batch(workload()).await.unwrap();
        comparable(store.batch(reads()).await.unwrap())
    }

    #[tokio::test]
    async fn backends_agree() {
        let memory = answers(Arc::new(InMemoryStore::new())).await;
        assert!(
            memory
                .iter()
                .any(|v| v.as_array().is_some_and(|a| !a.is_empty()))
        );
        let sqlite = answers(super::sqlite::fresh(StoreConfig::new()).await).await;
        assert_eq!(memory, sqlite, "SQLite disagrees with memory");
        let server = super::postgres::Server::connect().await;
        let postgres = answers(server.fresh(StoreConfig::new()).await).await;
        server.cleanup().await;
        assert_eq!(memory, postgres, "PostgreSQL disagrees with memory");
    }
}

/// The write lock of SQL stores: batches that only read take a snapshot
/// instead, on both databases.
mod locking {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;
    use tokio::sync::oneshot;
    use weaver::store::{ListNamespaces, Op, OpResult, PutOptions, Search, Store};

    /// While another session holds `store`'s write lock (`hold` takes it and
    /// returns what releases it), read-only batches go through, from one
    /// snapshot; batches that write (a put, a delete, reads that restart a
    /// TTL or delete an expired item) wait, and go through once it is
    /// released.
    pub async fn reads_skip_the_write_lock(
        store: Arc<dyn Store>,
        hold: impl AsyncFnOnce() -> oneshot::Sender<()>,
    ) {
        let ns = ["locked"];
        let long = PutOptions::new().ttl(Duration::from_secs(600));
        store.put(&ns, "a", json!(1)).await.unwrap();
        store.put(&ns, "gone", json!(0)).await.unwrap();
        store.put_with(&ns, "ttl", json!(2), long).await.unwrap();
        let short = PutOptions::new().ttl(Duration::from_millis(1));
        store
            .put_with(&ns, "expired", json!(3), short)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;

        // Another session holds the store's write lock, as a writing batch
        // does while it runs.
        let release = hold().await;

        let reads = || {
            vec![
                Op::get(&ns, "a"),
                Op::get(&ns, "missing"),
                Op::search(&ns, Search::query("x").limit(20)),
                Op::search(&ns, Search::new().filter(json!({"v": {"$ne": 5}}))),
                Op::ListNamespaces(ListNamespaces::new()),
            ]
        };
        let done = tokio::time::timeout(Duration::from_secs(5), store.batch(reads()))
            .await
            .expect("a read-only batch waited for the write lock")
            .unwrap();
        assert_eq!(super::got(&done[0]), Some(json!(1)));
        assert_eq!(super::got(&done[1]), None);
        assert_eq!(
            done[4],
            OpResult::Namespaces(vec![vec!["locked".to_owned()]])
        );

        // Batches that write wait for the lock, reads that write included.
        let writes = [
            ("a put", vec![Op::put(&ns, "b", json!(4))]),
            ("a delete", vec![Op::delete(&ns, "gone")]),
            (
                "a get restarting a TTL",
                vec![Op::Get {
                    namespace: vec!["locked".to_owned()],
                    key: "ttl".to_owned(),
                    refresh_ttl: Some(true),
                }],
            ),
            (
                "a search restarting TTLs",
                vec![Op::search(&ns, Search::new().refresh_ttl(true))],
            ),
            (
                "a get meeting an expired item",
                vec![Op::get(&ns, "a"), Op::get(&ns, "expired")],
            ),
        ];
        let waiting: Vec<_> = writes
            .into_iter()
            .map(|(what, ops)| {
                let store = store.clone();
                (what, tokio::spawn(async move { store.batch(ops).await }))
            })
            .collect();
        let sweeping = {
            let store = store.clone();
            tokio::spawn(async move { store.sweep().await })
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        for (what, task) in &waiting {
            assert!(!task.is_finished(), "{what} did not wait for the lock");
        }
        assert!(!sweeping.is_finished(), "a sweep did not wait for the lock");
        // Nor do reads queue behind the waiting writers.
        tokio::time::timeout(Duration::from_secs(5), store.batch(reads()))
            .await
            .expect("a read-only batch waited behind writing batches")
            .unwrap();

        release.send(()).expect("the lock holder is gone");
        for (what, task) in waiting {
            let results = tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .unwrap_or_else(|_| panic!("{what} still waits after the lock's release"))
                .unwrap()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            if what == "a get meeting an expired item" {
                assert_eq!(super::got(&results[0]), Some(json!(1)));
                assert_eq!(
                    super::got(&results[1]),
                    None,
                    "an expired item is not returned"
                );
            }
        }
        // It deleted the expired item, or the get above had.
        let swept = tokio::time::timeout(Duration::from_secs(10), sweeping)
            .await
            .expect("a sweep still waits after the lock's release")
            .unwrap()
            .unwrap();
        assert!(swept <= 1, "{swept} items swept");
        assert_eq!(
            super::got(&store.batch(vec![Op::get(&ns, "b")]).await.unwrap()[0]),
            Some(json!(4))
        );
        assert!(store.get(&ns, "gone").await.unwrap().is_none());
        assert_eq!(
            store.sweep().await.unwrap(),
            0,
            "the get that met the expired item deleted it"
        );
    }
}
