//! The SQL store backends: [`SqliteStore`] and [`PostgresStore`], one
//! implementation ([`SqlStore`]) written once over a private [`Dialect`]
//! (the queries are the same text on both databases; how a batch's
//! transaction starts differs).
//!
//! The table comes from [`crate::migrate`] as [`Adapter::Store`](crate::migrate::Adapter::Store);
//! see `migrate/store.rs` for the schema. A batch runs in one transaction.
//! Writing batches hold the store's write lock (`BEGIN IMMEDIATE` on
//! SQLite, an advisory lock on PostgreSQL); a batch that only reads runs
//! without it, in one snapshot (`BEGIN DEFERRED` on SQLite, `REPEATABLE
//! READ, READ ONLY` on PostgreSQL).
//! Validation, ranking and ordering are the shared rules of every store, so
//! results agree with [`InMemoryStore`](super::InMemoryStore). Queries are
//! pushed down only where the database gives the same answer: the prefix
//! (an index range on the primary key), expiry, and, for a search without
//! query or filter, the order and page.

mod dialect;
#[cfg(feature = "postgres")]
mod postgres;
mod queries;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::Pool;
use tokio::sync::OnceCell;

use self::dialect::{Arg, Dialect, Driver, StoredRow, Tx};
use self::queries::{Queries, prefix_binds};
use super::contract::Store;
use super::plan::{
    ListPlan, Plan, PutPlan, Record, SearchPlan, finish_list, finish_read_page, found, now_micros,
    prepare,
};
use super::seal::Sealing;
use super::types::{Op, OpResult, StoreConfig};
use crate::error::{Error, Result};
use crate::sql::Pooling;
use crate::sql::error::storage;

#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;

/// The store on one SQL database: a user-supplied pool, the table's
/// queries, how items are indexed and sealed.
pub(crate) struct SqlStore<D: Dialect> {
    pool: Pool<D::Db>,
    /// The PostgreSQL schema of the table; `None`: where the connection
    /// finds it.
    schema: Option<String>,
    queries: Queries,
    config: StoreConfig,
    sealing: Sealing,
    verified: Arc<OnceCell<()>>,
    /// How statements reach the database (`pooler_safe` on PostgreSQL).
    pooling: Pooling,
    dialect: PhantomData<D>,
}

impl<D: Dialect> Clone for SqlStore<D> {
    fn clone(&self) -> Self {
        SqlStore {
            pool: self.pool.clone(),
            schema: self.schema.clone(),
            queries: self.queries.clone(),
            config: self.config.clone(),
            sealing: self.sealing.clone(),
            verified: self.verified.clone(),
            pooling: self.pooling,
            dialect: PhantomData,
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStore")
            .field("pool", &self.pool)
            .field("schema", &self.schema)
            .field("queries", &self.queries)
            .field("config", &self.config)
            .field("sealing", &self.sealing)
            .finish_non_exhaustive()
    }
}

/// Whether a batch's transaction may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Holds the store's write lock.
    Write,
    /// A snapshot without the lock: stops at the first write.
    ReadOnly,
}

impl<D: Dialect> SqlStore<D> {
    /// A store on `pool`, its table in the connection's default place.
    pub(crate) fn new(pool: Pool<D::Db>) -> Self {
        SqlStore {
            pool,
            schema: None,
            queries: Queries::new(""),
            config: StoreConfig::default(),
            sealing: Sealing::default(),
            verified: Arc::default(),
            pooling: Pooling::Session,
            dialect: PhantomData,
        }
    }

    /// Uses the table in `schema`, whose queries name it with `prefix`.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn set_schema(&mut self, schema: String, prefix: &str) {
        self.queries = Queries::new(prefix);
        self.schema = Some(schema);
        self.verified = Arc::default();
    }

    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn set_pooling(&mut self, pooling: Pooling) {
        self.pooling = pooling;
    }

    pub(crate) fn set_config(&mut self, config: StoreConfig) {
        self.config = config;
    }

    #[cfg_attr(not(feature = "encryption"), allow(dead_code))]
    pub(crate) fn set_sealing(&mut self, sealing: Sealing) {
        self.sealing = sealing;
    }

    pub(crate) fn pool(&self) -> &Pool<D::Db> {
        &self.pool
    }

    /// Checks once that the table is at the version this build needs.
    async fn ensure_migrated(&self) -> Result<()> {
        self.verified
            .get_or_try_init(|| D::verify_migrated(&self.pool, self.schema.as_deref()))
            .await
            .map(|_| ())
    }

    async fn begin_write(&self, op: &'static str) -> Result<Tx<D::Db>> {
        D::begin_write(&self.pool, self.pooling, self.schema.as_deref(), op).await
    }

    /// The record a row holds, its payloads opened.
    fn record(&self, row: &<D::Db as sqlx::Database>::Row) -> Result<Record> {
        let row = D::Db::stored_row(row).map_err(|e| Error::decode("store row", e))?;
        let StoredRow {
            namespace,
            key,
            value,
            index_text,
            embedding,
            created_at,
            updated_at,
            expires_at,
            ttl,
        } = row;
        crate::store::namespace::check_stored(&namespace)?;
        if created_at > updated_at {
            return Err(Error::decode(
                format!("store item `{key}` in `{namespace}`"),
                format_args!(
                    "created at {created_at} µs, after its last update at {updated_at} µs"
                ),
            ));
        }
        if let Some(ttl) = ttl.filter(|t| *t < 0) {
            // A refresh would expire the item the moment it is read.
            return Err(Error::decode(
                format!("store item `{key}` in `{namespace}`"),
                format_args!("a negative TTL: {ttl} µs"),
            ));
        }
        Ok(Record {
            value: self.sealing.value_of(&namespace, &key, value)?,
            index_text: self.sealing.index_text_of(&namespace, &key, index_text)?,
            embedding: self.sealing.embedding_of(&namespace, &key, embedding)?,
            created_at,
            updated_at,
            expires_at,
            ttl,
            namespace,
            key,
            sealed: None,
        })
    }

    async fn get_in(
        &self,
        tx: &mut Tx<D::Db>,
        namespace: &str,
        key: &str,
        refresh: bool,
        now: i64,
        mode: Mode,
    ) -> Result<Option<OpResult>> {
        let op = "store get";
        let args = [Arg::Text(namespace), Arg::Text(key)];
        let row = D::Db::fetch_optional(tx, self.pooling, &self.queries.get, &args)
            .await
            .map_err(storage(op))?;
        let Some(row) = row else {
            return Ok(Some(OpResult::Got(None)));
        };
        // Expired is judged on the plain columns, before anything is opened:
        // an expired item is gone for every read, whatever its payload.
        let expires_at = D::Db::stored_row(&row)
            .map_err(|e| Error::decode("store row", e))?
            .expires_at;
        let live = expires_at.is_none_or(|e| e > now);
        if !live {
            if mode == Mode::ReadOnly {
                // Deleting it is a write: the batch needs the lock.
                return Ok(None);
            }
            let args = [Arg::Text(namespace), Arg::Text(key), Arg::Int(now)];
            D::Db::execute(tx, self.pooling, &self.queries.delete_expired_one, &args)
                .await
                .map_err(storage(op))?;
            return Ok(Some(OpResult::Got(None)));
        }
        let mut record = self.record(&row)?;
        if refresh && record.refresh(now) {
            self.refresh_in(tx, &record).await?;
        }
        Ok(Some(OpResult::Got(Some(record.to_item(None)))))
    }

    /// Stores the expiry [`Record::refresh`] computed, not
    /// `now + ttl_micros` in SQL: a stored TTL past
    /// [`MAX_TTL`](crate::store::limits::MAX_TTL) (another
    /// writer's) would overflow there (PostgreSQL fails the
    /// read; SQLite stores a `REAL` that no read decodes again).
    async fn refresh_in(&self, tx: &mut Tx<D::Db>, record: &Record) -> Result<()> {
        let args = [
            Arg::OptInt(record.expires_at),
            Arg::Text(&record.namespace),
            Arg::Text(&record.key),
        ];
        D::Db::execute(tx, self.pooling, &self.queries.refresh, &args)
            .await
            .map_err(storage("store refresh ttl"))?;
        Ok(())
    }

    async fn search_in(&self, tx: &mut Tx<D::Db>, plan: &SearchPlan, now: i64) -> Result<OpResult> {
        let limit = i64::try_from(plan.limit).unwrap_or(i64::MAX);
        let offset = i64::try_from(plan.offset).unwrap_or(i64::MAX);
        let plain = plan.is_plain();
        let (exact, lo, hi) = prefix_binds(&plan.prefix);
        let mut args = vec![Arg::Int(now)];
        let sql = if plan.prefix.is_empty() {
            if plain {
                args.extend([Arg::Int(limit), Arg::Int(offset)]);
                &self.queries.page_all
            } else {
                &self.queries.scan_all
            }
        } else {
            args.extend([Arg::Text(&exact), Arg::Text(&lo), Arg::Text(&hi)]);
            if plain {
                args.extend([Arg::Int(limit), Arg::Int(offset)]);
                &self.queries.page_prefix
            } else {
                &self.queries.scan_prefix
            }
        };
        let rows = D::Db::fetch_all(tx, self.pooling, sql, &args)
            .await
            .map_err(storage("store search"))?;
        let candidates = rows
            .iter()
            .map(|row| self.record(row))
            .collect::<Result<Vec<_>>>()?;
        // When plain, the query already cut the page.
        let mut page = finish_read_page(candidates, plan, plain);
        if plan.refresh {
            for (record, _) in &mut page {
                if record.refresh(now) {
                    self.refresh_in(tx, record).await?;
                }
            }
        }
        Ok(found(&page))
    }

    async fn list_in(&self, tx: &mut Tx<D::Db>, plan: &ListPlan, now: i64) -> Result<OpResult> {
        let (exact, lo, hi) = prefix_binds(&plan.prefix);
        let (sql, args) = if plan.prefix.is_empty() {
            (&self.queries.namespaces_all, vec![Arg::Int(now)])
        } else {
            let args = vec![
                Arg::Int(now),
                Arg::Text(&exact),
                Arg::Text(&lo),
                Arg::Text(&hi),
            ];
            (&self.queries.namespaces_prefix, args)
        };
        let op = "store list_namespaces";
        let rows = D::Db::fetch_all(tx, self.pooling, sql, &args)
            .await
            .map_err(storage(op))?;
        let namespaces = rows
            .iter()
            .map(D::Db::text)
            .collect::<sqlx::Result<Vec<String>>>()
            .map_err(|e| Error::decode("a stored namespace", e))?;
        for ns in &namespaces {
            crate::store::namespace::check_stored(ns)?;
        }
        Ok(OpResult::Namespaces(finish_list(
            namespaces.iter().map(String::as_str),
            plan,
        )))
    }

    async fn put_in(&self, tx: &mut Tx<D::Db>, put: &PutPlan, now: i64) -> Result<OpResult> {
        let mut record = put.record(now, None);
        let (ns, key) = (&record.namespace, &record.key);
        let value = self.sealing.value_text(ns, key, &put.value)?;
        let index_text = self
            .sealing
            .index_text(ns, key, record.index_text.as_deref())?;
        let embedding = self
            .sealing
            .embedding(ns, key, record.embedding.as_deref())?;
        // The times as written (`created_at` may be the overwritten item's),
        // in the same round trip, so the put and a later get agree.
        let args = [
            Arg::Text(ns),
            Arg::Text(key),
            Arg::Text(&value),
            Arg::OptText(index_text.as_deref()),
            Arg::OptBytes(embedding.as_deref()),
            Arg::Int(now),
            Arg::OptInt(record.expires_at),
            Arg::OptInt(record.ttl),
        ];
        let row = D::Db::fetch_optional(tx, self.pooling, &self.queries.upsert, &args)
            .await
            .map_err(storage("store put"))?
            .ok_or_else(|| Error::storage("store put", "the upsert returned no row"))?;
        let (created_at, updated_at) =
            D::Db::times(&row).map_err(|e| Error::decode("stored item times", e))?;
        record.created_at = created_at;
        record.updated_at = updated_at;
        Ok(OpResult::Put(record.to_item(None)))
    }

    async fn run_batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        let plans = prepare(ops, &self.config).await?;
        if plans.is_empty() {
            return Ok(Vec::new());
        }
        self.ensure_migrated().await?;
        if !plans.iter().any(Plan::writes) {
            let mut tx = D::begin_read(&self.pool, "store batch").await?;
            let now = now_micros();
            let results = self.apply(&mut tx, &plans, now, Mode::ReadOnly).await?;
            tx.commit().await.map_err(storage("store batch"))?;
            if let Some(results) = results {
                return Ok(results);
            }
            // A get met an expired item: run the batch again as a write,
            // which deletes it.
        }
        let mut tx = self.begin_write("store batch").await?;
        let now = now_micros();
        let results = self.apply(&mut tx, &plans, now, Mode::Write).await?;
        tx.commit().await.map_err(storage("store batch"))?;
        // Only a read-only batch stops for a write.
        results.ok_or_else(|| {
            Error::storage("store batch", "stopped for a write under the write lock")
        })
    }

    /// Runs `plans` in `tx` at time `now`; `None` when a
    /// [`Mode::ReadOnly`] batch meets something it must write.
    async fn apply(
        &self,
        tx: &mut Tx<D::Db>,
        plans: &[Plan],
        now: i64,
        mode: Mode,
    ) -> Result<Option<Vec<OpResult>>> {
        let mut results = Vec::with_capacity(plans.len());
        for plan in plans {
            results.push(match plan {
                Plan::Get {
                    namespace,
                    key,
                    refresh,
                } => match self.get_in(tx, namespace, key, *refresh, now, mode).await? {
                    Some(result) => result,
                    None => return Ok(None),
                },
                Plan::Put(put) => self.put_in(tx, put, now).await?,
                Plan::Delete { namespace, key } => {
                    let args = [Arg::Text(namespace), Arg::Text(key)];
                    D::Db::execute(tx, self.pooling, &self.queries.delete, &args)
                        .await
                        .map_err(storage("store delete"))?;
                    OpResult::Deleted
                }
                Plan::Search(plan) => self.search_in(tx, plan, now).await?,
                Plan::List(plan) => self.list_in(tx, plan, now).await?,
            });
        }
        Ok(Some(results))
    }

    async fn run_sweep(&self) -> Result<u64> {
        self.ensure_migrated().await?;
        // Under the store's write lock, as a writing batch: a batch never
        // sees an item it read (and may be restarting the TTL of) swept
        // halfway through.
        let mut tx = self.begin_write("store sweep").await?;
        let args = [Arg::Int(now_micros())];
        let done = D::Db::execute(&mut tx, self.pooling, &self.queries.sweep, &args)
            .await
            .map_err(storage("store sweep"))?;
        tx.commit().await.map_err(storage("store sweep"))?;
        Ok(done)
    }
}

#[async_trait]
impl<D: Dialect> Store for SqlStore<D> {
    async fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
        self.run_batch(ops).await
    }

    async fn sweep(&self) -> Result<u64> {
        self.run_sweep().await
    }
}
