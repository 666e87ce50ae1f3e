//! The stores a row runs on: a fresh one per timed loop, removed after.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use mongodb::bson::doc;
use serde_json::{Value, json};
use weaver::checkpoint::{ListFilter, PostgresSaver, SqliteSaver};
use weaver::migrate::{self, Adapter, PgSchema};
use weaver::mongo::MongoSaver;
use weaver::prelude::*;

const DEFAULT_PG: &str = "postgres://postgres@127.0.0.1:5432/test";
const DEFAULT_MONGODB: &str = "mongodb://127.0.0.1:27017";

pub(crate) fn pg_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_PG.to_owned())
}

fn mongo_url() -> String {
    std::env::var("MONGODB_URL").unwrap_or_else(|_| DEFAULT_MONGODB.to_owned())
}

fn unique_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}_{}", std::process::id(), nanos)
}

/// One store, fresh and empty when opened; `close` removes it.
pub(crate) enum Store {
    None,
    Memory(InMemorySaver),
    Sqlite {
        saver: SqliteSaver,
        dir: PathBuf,
    },
    Postgres {
        saver: PostgresSaver,
        schema: String,
    },
    /// A database of its own on `$MONGODB_URL`, dropped on close.
    Mongo {
        saver: MongoSaver,
    },
}

/// A backend by name (`none`, `memory`, `sqlite`, `postgres`, `mongodb`)
/// and its store.
pub(crate) struct Backend {
    pub(crate) name: String,
    pub(crate) store: Store,
}

/// The SQL savers' busy-poll budget: off, as a user gets it, unless
/// `WEAVER_BENCH_SPIN_US` opts in (to measure what the opt-in buys).
fn spin_budget() -> std::time::Duration {
    let micros = std::env::var("WEAVER_BENCH_SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    std::time::Duration::from_micros(micros)
}

impl Backend {
    pub(crate) async fn open(name: &str) -> weaver::Result<Backend> {
        let store = match name {
            "none" => Store::None,
            "memory" => Store::Memory(InMemorySaver::new()),
            "sqlite" => {
                let dir = std::env::temp_dir().join(format!("weaver-bench-{}", unique_suffix()));
                std::fs::create_dir_all(&dir)
                    .map_err(|e| Error::invalid_argument(format!("temp dir: {e}")))?;
                let url = format!("sqlite://{}", dir.join("checkpoints.db").display());
                Store::Sqlite {
                    saver: SqliteSaver::connect(&url).await?.with_spin(spin_budget()),
                    dir,
                }
            }
            "postgres" => {
                let schema = format!("bench_{}", unique_suffix());
                let pool = pg_pool().await?;
                migrate::up(
                    &PgSchema::new(&pool, &schema)?,
                    &[Adapter::Checkpoint],
                    None,
                )
                .await?;
                Store::Postgres {
                    saver: PostgresSaver::new(pool)
                        .with_prefix(&schema)?
                        .with_spin(spin_budget()),
                    schema,
                }
            }
            "mongodb" => {
                let saver = MongoSaver::connect(
                    &mongo_url(),
                    &format!("weaver_bench_{}", unique_suffix()),
                    "weaver_",
                )
                .await?;
                saver.setup().await?;
                Store::Mongo { saver }
            }
            other => return Err(Error::invalid_argument(format!("unknown backend {other}"))),
        };
        Ok(Backend {
            name: name.to_owned(),
            store,
        })
    }

    /// A fresh, empty store of the same kind (the old one is removed).
    pub(crate) async fn reset(self) -> weaver::Result<Backend> {
        let name = self.name.clone();
        self.close().await?;
        Backend::open(&name).await
    }

    pub(crate) async fn close(self) -> weaver::Result<()> {
        match self.store {
            Store::Sqlite { saver, dir } => {
                saver.pool().close().await;
                let _ = std::fs::remove_dir_all(dir);
            }
            Store::Postgres { saver, schema } => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                )))
                .execute(saver.pool())
                .await
                .map_err(|e| Error::storage("drop schema", e))?;
                saver.pool().close().await;
            }
            Store::Mongo { saver } => {
                saver
                    .database()
                    .drop()
                    .await
                    .map_err(|e| Error::storage("drop database", e))?;
            }
            Store::None | Store::Memory(_) => {}
        }
        Ok(())
    }

    pub(crate) fn saver(&self) -> Option<Arc<dyn Saver>> {
        match &self.store {
            Store::None => None,
            Store::Memory(s) => Some(Arc::new(s.clone())),
            Store::Sqlite { saver, .. } => Some(Arc::new(saver.clone())),
            Store::Postgres { saver, .. } => Some(Arc::new(saver.clone())),
            Store::Mongo { saver } => Some(Arc::new(saver.clone())),
        }
    }

    /// A new saver handle on the same store that shares nothing a handle
    /// caches with the others (what a freshly started worker has): on the
    /// same connection pool for the SQL savers (a worker keeps its pool),
    /// on the same client for MongoDB; the in-memory saver is its store, so
    /// it is the same one.
    pub(crate) fn fresh_saver(&self) -> weaver::Result<Option<Arc<dyn Saver>>> {
        Ok(match &self.store {
            Store::None => None,
            Store::Memory(s) => Some(Arc::new(s.clone())),
            Store::Sqlite { saver, .. } => Some(Arc::new(SqliteSaver::new(saver.pool().clone()))),
            Store::Postgres { saver, schema } => Some(Arc::new(
                PostgresSaver::new(saver.pool().clone()).with_prefix(schema)?,
            )),
            Store::Mongo { saver } => {
                let db = saver.database();
                Some(Arc::new(MongoSaver::new(
                    db.client().clone(),
                    db.name(),
                    "weaver_",
                )))
            }
        })
    }

    /// Bytes the store holds, measured as WORKLOADS.md says.
    pub(crate) async fn storage(&self, thread: &str) -> weaver::Result<Value> {
        let storage = |e| Error::storage("storage", e);
        Ok(match &self.store {
            Store::None => json!({}),
            Store::Memory(s) => {
                let (mut cp, mut meta, mut writes) = (0usize, 0usize, 0usize);
                let tuples = s.list_stored(&ListFilter::thread(thread)).await?;
                for t in &tuples {
                    cp += serde_json::to_vec(&t.checkpoint).map_or(0, |v| v.len());
                    meta += serde_json::to_vec(&t.metadata).map_or(0, |v| v.len());
                    writes += t
                        .pending_writes
                        .iter()
                        .map(|w| serde_json::to_vec(&w.value).map_or(0, |v| v.len()))
                        .sum::<usize>();
                }
                json!({"measure": "sum of JSON-serialized checkpoints, metadata and pending-write values held by InMemorySaver",
                       "stored_bytes": cp + meta + writes, "checkpoint_rows": tuples.len(),
                       "checkpoint_bytes": cp, "metadata_bytes": meta, "write_bytes": writes})
            }
            Store::Sqlite { saver, dir } => {
                sqlx::raw_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                    .execute(saver.pool())
                    .await
                    .map_err(storage)?;
                let size = |p: PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
                let main = size(dir.join("checkpoints.db"));
                let wal = size(dir.join("checkpoints.db-wal"));
                let (rows, cp_bytes): (i64, i64) = sqlx::query_as(
                    "SELECT COUNT(*), COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM weaver_checkpoints",
                )
                .fetch_one(saver.pool())
                .await
                .map_err(storage)?;
                let (wrows, wbytes): (i64, i64) = sqlx::query_as(
                    "SELECT COUNT(*), COALESCE(SUM(LENGTH(value)), 0) FROM weaver_checkpoint_writes",
                )
                .fetch_one(saver.pool())
                .await
                .map_err(storage)?;
                json!({"measure": "db file size + WAL after wal_checkpoint(TRUNCATE), no VACUUM",
                       "stored_bytes": main + wal, "file_bytes": main, "wal_bytes": wal,
                       "sql_blob_bytes": cp_bytes + wbytes, "checkpoint_rows": rows, "write_rows": wrows})
            }
            Store::Postgres { saver, schema } => {
                let (total, rows): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT (SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::BIGINT
                               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                              WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname LIKE 'weaver%'),
                            (SELECT COUNT(*) FROM \"{schema}\".weaver_checkpoints)"
                )))
                .bind(schema)
                .fetch_one(saver.pool())
                .await
                .map_err(storage)?;
                json!({"measure": "sum of pg_total_relation_size over weaver's tables in the schema",
                       "stored_bytes": total, "checkpoint_rows": rows})
            }
            Store::Mongo { saver } => {
                let db = saver.database();
                let stats = db
                    .run_command(doc! { "dbStats": 1 })
                    .await
                    .map_err(|e| Error::storage("dbStats", e))?;
                let number = |key: &str| {
                    stats
                        .get(key)
                        .and_then(|v| {
                            v.as_f64()
                                .or(v.as_i64().map(|n| n as f64))
                                .or(v.as_i32().map(f64::from))
                        })
                        .unwrap_or(0.0) as u64
                };
                let (data, index) = (number("dataSize"), number("indexSize"));
                let mut rows = Vec::new();
                for collection in ["weaver_checkpoints", "weaver_writes"] {
                    rows.push(
                        db.collection::<mongodb::bson::Document>(collection)
                            .count_documents(doc! {})
                            .await
                            .map_err(|e| Error::storage("count", e))?,
                    );
                }
                let (rows, writes) = (rows[0], rows[1]);
                json!({"measure": "dbStats of the run's own database: dataSize (BSON bytes) + indexSize",
                       "stored_bytes": data + index, "data_bytes": data, "index_bytes": index,
                       "checkpoint_rows": rows, "write_rows": writes})
            }
        })
    }
}

/// A pool as `PostgresSaver::connect` builds it (no ping at checkout; sqlx
/// pings each connection when it returns to the pool).
/// `WEAVER_BENCH_PG_PING=1` adds the checkout ping, to measure what it costs.
pub(crate) async fn pg_pool() -> weaver::Result<sqlx::PgPool> {
    let ping = std::env::var("WEAVER_BENCH_PG_PING").is_ok_and(|v| v == "1");
    sqlx::postgres::PgPoolOptions::new()
        .test_before_acquire(ping)
        .connect(&pg_url())
        .await
        .map_err(|e| Error::storage("connect", e))
}

pub(crate) fn compile<S: GraphState>(graph: Graph<S>, be: &Backend) -> CompiledGraph<S> {
    let options = match be.saver() {
        Some(s) => Compile::new().checkpointer_arc(s),
        None => Compile::new(),
    };
    graph.compile(options).expect("valid graph")
}
