//! The PostgreSQL store behind PgBouncer in transaction mode (`POOLER_URL`,
//! default `postgres://postgres@127.0.0.1:6432/test`; `.ci/pgbouncer.sh`
//! starts one): the conformance suites, many tasks sharing one pool, and
//! the default mode left as it was.

use std::sync::{Arc, Mutex};

use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool};
use weaver::migrate::{self, Adapter, PgSchema};
use weaver::store::{PostgresStore, Store, StoreConfig};
use weaver_tests::store_conformance::{run_store_config_conformance, run_store_conformance};

fn pooler_url() -> String {
    std::env::var("POOLER_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:6432/test".to_owned())
}

async fn pooler_pool(max: u32) -> PgPool {
    let url = pooler_url();
    PgPoolOptions::new()
        .max_connections(max)
        .connect(&url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "PgBouncer (transaction mode) is unreachable at {url} ({e}): pgbouncer is missing \
                 or not running; start it with `.ci/pgbouncer.sh` (installs pgbouncer, listens on \
                 127.0.0.1:6432 in front of 127.0.0.1:5432) or set POOLER_URL; pooler tests never skip"
            )
        })
}

/// Fresh schemas migrated through the pooler, dropped by [`Pooled::cleanup`].
struct Pooled {
    pool: PgPool,
    schemas: Mutex<Vec<String>>,
}

impl Pooled {
    async fn new(max: u32) -> Self {
        Pooled {
            pool: pooler_pool(max).await,
            schemas: Mutex::default(),
        }
    }

    async fn schema(&self) -> String {
        let schema = super::unique("weaver_store_pooled");
        migrate::up(
            &PgSchema::new(&self.pool, &schema).unwrap(),
            &[Adapter::Store],
            None,
        )
        .await
        .expect("migrations run through the pooler");
        self.schemas.lock().unwrap().push(schema.clone());
        schema
    }

    async fn fresh(&self, config: StoreConfig) -> Arc<dyn Store> {
        let schema = self.schema().await;
        Arc::new(
            PostgresStore::new(self.pool.clone())
                .with_prefix(&schema)
                .unwrap()
                .with_config(config)
                .pooler_safe(true),
        )
    }

    async fn cleanup(&self) {
        let schemas = std::mem::take(&mut *self.schemas.lock().unwrap());
        for s in schemas {
            sqlx::raw_sql(AssertSqlSafe(format!("DROP SCHEMA \"{s}\" CASCADE")))
                .execute(&self.pool)
                .await
                .unwrap();
        }
    }
}

#[tokio::test]
async fn conformance_through_a_transaction_pooler() {
    let pooled = Pooled::new(8).await;
    run_store_conformance(|| pooled.fresh(StoreConfig::new())).await;
    pooled.cleanup().await;
}

#[tokio::test]
async fn config_conformance_through_a_transaction_pooler() {
    let pooled = Pooled::new(8).await;
    run_store_config_conformance(|c| pooled.fresh(c)).await;
    pooled.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_share_one_pool_through_a_transaction_pooler() {
    let pooled = Pooled::new(40).await;
    let store = pooled.fresh(StoreConfig::new()).await;
    let mut tasks = Vec::new();
    for i in 0..48 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let ns = format!("user-{i}");
            for k in 0..5 {
                store
                    .put(&[ns.as_str()], &format!("k{k}"), json!({"i": i, "k": k}))
                    .await
                    .unwrap();
            }
            let got = store.get(&[ns.as_str()], "k3").await.unwrap().unwrap();
            assert_eq!(got.value, json!({"i": i, "k": 3}));
            store.delete(&[ns.as_str()], "k0").await.unwrap();
        }));
    }
    for t in tasks {
        t.await.expect("no task fails through the pooler");
    }
    let namespaces = store
        .list_namespaces(weaver::store::ListNamespaces::default())
        .await
        .unwrap();
    assert_eq!(namespaces.len(), 48);
    for i in [0, 47] {
        let ns = format!("user-{i}");
        assert!(store.get(&[ns.as_str()], "k0").await.unwrap().is_none());
        assert!(store.get(&[ns.as_str()], "k4").await.unwrap().is_some());
    }
    pooled.cleanup().await;
}

#[tokio::test]
async fn the_default_mode_still_prepares_named_statements() {
    use sqlx::Row;
    let direct = super::postgres::Server::connect().await;
    let schema = direct.schema().await;
    for (mode, named) in [(None, true), (Some(false), true), (Some(true), false)] {
        // One connection: the store's statements ran on the one inspected.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect(&super::database_url())
            .await
            .unwrap();
        let store = PostgresStore::new(pool.clone())
            .with_prefix(&schema)
            .unwrap();
        let store = match mode {
            Some(on) => store.pooler_safe(on),
            None => store,
        };
        store.put(&["a"], "k", json!(1)).await.unwrap();
        assert_eq!(
            store.get(&["a"], "k").await.unwrap().unwrap().value,
            json!(1)
        );
        let prepared: Vec<String> = sqlx::raw_sql("SELECT statement FROM pg_prepared_statements")
            .fetch_all(&pool)
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(
            prepared.iter().any(|s| s.contains("weaver_store_items")),
            named,
            "{mode:?}: {prepared:?}"
        );
        pool.close().await;
    }
    direct.cleanup().await;
}
