//! The SQL store backends: [`SqliteStore`] and [`PostgresStore`], one
//! implementation written once over `sqlx` (the queries are the same text on
//! both databases).
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

#[cfg(feature = "postgres")]
mod postgres;
mod seal;
#[cfg(feature = "sqlite")]
mod sqlite;

pub(crate) use seal::Sealing;

#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;

use super::namespace::descendants;

/// The SQL text of every store query, with the table prefix rendered.
#[derive(Clone)]
pub(crate) struct Queries {
    pub get: String,
    pub delete_expired_one: String,
    pub refresh: String,
    pub upsert: String,
    pub delete: String,
    pub sweep: String,
    /// Search/list queries by (prefix kind): everything, or under a prefix.
    pub scan_all: String,
    pub scan_prefix: String,
    pub page_all: String,
    pub page_prefix: String,
    pub namespaces_all: String,
    pub namespaces_prefix: String,
}

impl std::fmt::Debug for Queries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queries")
            .field("get", &self.get)
            .finish_non_exhaustive()
    }
}

const COLUMNS: &str =
    "namespace, key, value, index_text, embedding, created_at, updated_at, expires_at, ttl_micros";

impl Queries {
    pub(crate) fn new(prefix: &str) -> Self {
        let t = format!("{prefix}weaver_store_items");
        // $1 = now; $2..$4 = the prefix's exact namespace and descendant range.
        let live = "(expires_at IS NULL OR expires_at > $1)";
        let under = "(namespace = $2 OR (namespace >= $3 AND namespace < $4))";
        Queries {
            get: format!("SELECT {COLUMNS} FROM {t} WHERE namespace = $1 AND key = $2"),
            delete_expired_one: format!(
                "DELETE FROM {t} WHERE namespace = $1 AND key = $2 AND expires_at <= $3"
            ),
            // $1 = the new expiry, computed (saturating) as the record's.
            refresh: format!(
                "UPDATE {t} SET expires_at = $1
                  WHERE namespace = $2 AND key = $3 AND ttl_micros IS NOT NULL"
            ),
            upsert: format!(
                "INSERT INTO {t} ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8)
                 ON CONFLICT (namespace, key) DO UPDATE SET
                    value = excluded.value,
                    index_text = excluded.index_text,
                    embedding = excluded.embedding,
                    created_at = CASE WHEN weaver_store_items.expires_at <= excluded.updated_at
                                        OR weaver_store_items.created_at > excluded.updated_at
                                      THEN excluded.created_at
                                      ELSE weaver_store_items.created_at END,
                    updated_at = excluded.updated_at,
                    expires_at = excluded.expires_at,
                    ttl_micros = excluded.ttl_micros
                 RETURNING created_at, updated_at"
            ),
            delete: format!("DELETE FROM {t} WHERE namespace = $1 AND key = $2"),
            sweep: format!("DELETE FROM {t} WHERE expires_at IS NOT NULL AND expires_at <= $1"),
            scan_all: format!("SELECT {COLUMNS} FROM {t} WHERE {live}"),
            scan_prefix: format!("SELECT {COLUMNS} FROM {t} WHERE {under} AND {live}"),
            page_all: format!(
                "SELECT {COLUMNS} FROM {t} WHERE {live} ORDER BY namespace, key LIMIT $2 OFFSET $3"
            ),
            page_prefix: format!(
                "SELECT {COLUMNS} FROM {t} WHERE {under} AND {live}
                  ORDER BY namespace, key LIMIT $5 OFFSET $6"
            ),
            namespaces_all: format!("SELECT DISTINCT namespace FROM {t} WHERE {live}"),
            namespaces_prefix: format!(
                "SELECT DISTINCT namespace FROM {t} WHERE {under} AND {live}"
            ),
        }
    }
}

/// The three binds of a non-empty dotted prefix: itself and its
/// descendants' range.
pub(crate) fn prefix_binds(prefix: &str) -> (String, String, String) {
    let (lo, hi) = descendants(prefix);
    (prefix.to_owned(), lo, hi)
}

/// Implements [`Store`](crate::store::Store) for a SQL store type with
/// fields `pool`, `queries`, `config`, `sealing`, and methods `ensure_migrated`,
/// `begin_write` and `begin_read` (a read-only snapshot without the lock),
/// on database `$db`.
macro_rules! impl_sql_store {
    ($store:ty, $db:ty) => {
        const _: () = {
            use async_trait::async_trait;
            use sqlx::{AssertSqlSafe, Row};

            use crate::error::{Error, Result};
            use crate::store::Store;
            use crate::store::contract::traced;
            use crate::store::plan::{
                ListPlan, Plan, Record, SearchPlan, finish_list, finish_search, found, now_micros,
                prepare,
            };
            use crate::store::sql::prefix_binds;
            use crate::store::types::{Op, OpResult};

            type Tx = sqlx::Transaction<'static, $db>;
            type DbRow = <$db as sqlx::Database>::Row;

            /// Whether a batch's transaction may write.
            #[derive(Debug, Clone, Copy, PartialEq, Eq)]
            enum Mode {
                /// Holds the store's write lock.
                Write,
                /// A snapshot without the lock: stops at the first write.
                ReadOnly,
            }

            fn storage(op: &'static str) -> impl FnOnce(sqlx::Error) -> Error {
                move |e| Error::storage(op, e)
            }

            fn decode(row: &DbRow, sealing: &crate::store::sql::Sealing) -> Result<Record> {
                let col = |e: sqlx::Error| Error::decode("store row", e);
                let namespace: String = row.try_get(0).map_err(col)?;
                let key: String = row.try_get(1).map_err(col)?;
                let value = sealing.value_of(&namespace, &key, row.try_get(2).map_err(col)?)?;
                let index_text =
                    sealing.index_text_of(&namespace, &key, row.try_get(3).map_err(col)?)?;
                let embedding =
                    sealing.embedding_of(&namespace, &key, row.try_get(4).map_err(col)?)?;
                Ok(Record {
                    value,
                    index_text,
                    embedding,
                    created_at: row.try_get(5).map_err(col)?,
                    updated_at: row.try_get(6).map_err(col)?,
                    expires_at: row.try_get(7).map_err(col)?,
                    ttl: row.try_get(8).map_err(col)?,
                    namespace,
                    key,
                })
            }

            impl $store {
                async fn get_in(
                    &self,
                    tx: &mut Tx,
                    namespace: &str,
                    key: &str,
                    refresh: bool,
                    now: i64,
                    mode: Mode,
                ) -> Result<Option<OpResult>> {
                    let op = "store get";
                    let row = sqlx::query(AssertSqlSafe(self.queries.get.clone()))
                        .bind(namespace)
                        .bind(key)
                        .fetch_optional(&mut **tx)
                        .await
                        .map_err(storage(op))?;
                    let Some(row) = row else {
                        return Ok(Some(OpResult::Got(None)));
                    };
                    let mut record = decode(&row, &self.sealing)?;
                    if !record.is_live(now) {
                        if mode == Mode::ReadOnly {
                            // Deleting it is a write: the batch needs the lock.
                            return Ok(None);
                        }
                        sqlx::query(AssertSqlSafe(self.queries.delete_expired_one.clone()))
                            .bind(namespace)
                            .bind(key)
                            .bind(now)
                            .execute(&mut **tx)
                            .await
                            .map_err(storage(op))?;
                        return Ok(Some(OpResult::Got(None)));
                    }
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
                async fn refresh_in(&self, tx: &mut Tx, record: &Record) -> Result<()> {
                    sqlx::query(AssertSqlSafe(self.queries.refresh.clone()))
                        .bind(record.expires_at)
                        .bind(&record.namespace)
                        .bind(&record.key)
                        .execute(&mut **tx)
                        .await
                        .map_err(storage("store refresh ttl"))?;
                    Ok(())
                }

                async fn search_in(
                    &self,
                    tx: &mut Tx,
                    plan: &SearchPlan,
                    now: i64,
                ) -> Result<OpResult> {
                    let op = "store search";
                    let limit = i64::try_from(plan.limit).unwrap_or(i64::MAX);
                    let offset = i64::try_from(plan.offset).unwrap_or(i64::MAX);
                    let rows = match (plan.prefix.is_empty(), plan.is_plain()) {
                        (true, true) => {
                            sqlx::query(AssertSqlSafe(self.queries.page_all.clone()))
                                .bind(now)
                                .bind(limit)
                                .bind(offset)
                                .fetch_all(&mut **tx)
                                .await
                        }
                        (true, false) => {
                            sqlx::query(AssertSqlSafe(self.queries.scan_all.clone()))
                                .bind(now)
                                .fetch_all(&mut **tx)
                                .await
                        }
                        (false, plain) => {
                            let (exact, lo, hi) = prefix_binds(&plan.prefix);
                            let q = if plain {
                                &self.queries.page_prefix
                            } else {
                                &self.queries.scan_prefix
                            };
                            let mut q = sqlx::query(AssertSqlSafe(q.clone()))
                                .bind(now)
                                .bind(exact)
                                .bind(lo)
                                .bind(hi);
                            if plain {
                                q = q.bind(limit).bind(offset);
                            }
                            q.fetch_all(&mut **tx).await
                        }
                    }
                    .map_err(storage(op))?;
                    let candidates = rows
                        .iter()
                        .map(|row| decode(row, &self.sealing))
                        .collect::<Result<Vec<_>>>()?;
                    let mut page = if plan.is_plain() {
                        // The database already cut the page.
                        let mut whole = plan.clone();
                        whole.offset = 0;
                        finish_search(candidates, &whole)
                    } else {
                        finish_search(candidates, plan)
                    };
                    if plan.refresh {
                        for (record, _) in &mut page {
                            if record.refresh(now) {
                                self.refresh_in(tx, record).await?;
                            }
                        }
                    }
                    Ok(found(&page))
                }

                async fn list_in(
                    &self,
                    tx: &mut Tx,
                    plan: &ListPlan,
                    now: i64,
                ) -> Result<OpResult> {
                    let rows: Vec<String> = if plan.prefix.is_empty() {
                        sqlx::query_scalar(AssertSqlSafe(self.queries.namespaces_all.clone()))
                            .bind(now)
                            .fetch_all(&mut **tx)
                            .await
                    } else {
                        let (exact, lo, hi) = prefix_binds(&plan.prefix);
                        sqlx::query_scalar(AssertSqlSafe(self.queries.namespaces_prefix.clone()))
                            .bind(now)
                            .bind(exact)
                            .bind(lo)
                            .bind(hi)
                            .fetch_all(&mut **tx)
                            .await
                    }
                    .map_err(storage("store list_namespaces"))?;
                    Ok(OpResult::Namespaces(finish_list(
                        rows.iter().map(String::as_str),
                        plan,
                    )))
                }

                async fn run_batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
                    let plans = prepare(ops, &self.config).await?;
                    if plans.is_empty() {
                        return Ok(Vec::new());
                    }
                    self.ensure_migrated().await?;
                    if !plans.iter().any(Plan::writes) {
                        let mut tx = self.begin_read("store batch").await?;
                        let now = now_micros();
                        let results = self.apply(&mut tx, &plans, now, Mode::ReadOnly).await?;
                        tx.commit().await.map_err(storage("store batch"))?;
                        if let Some(results) = results {
                            return Ok(results);
                        }
                        // A get met an expired item: run the batch again as
                        // a write, which deletes it.
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
                    tx: &mut Tx,
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
                            } => {
                                let got = self.get_in(tx, namespace, key, *refresh, now, mode);
                                match got.await? {
                                    Some(result) => result,
                                    None => return Ok(None),
                                }
                            }
                            Plan::Put(put) => {
                                let mut record = put.record(now, None);
                                let (ns, key) = (&record.namespace, &record.key);
                                let value = self.sealing.value_text(ns, key, &put.value)?;
                                let index_text = self.sealing.index_text(
                                    ns,
                                    key,
                                    record.index_text.as_deref(),
                                )?;
                                let embedding =
                                    self.sealing
                                        .embedding(ns, key, record.embedding.as_deref())?;
                                // The times as written (`created_at` may be
                                // the overwritten item's), in the same round
                                // trip, so the put and a later get agree.
                                let row = sqlx::query(AssertSqlSafe(self.queries.upsert.clone()))
                                    .bind(&record.namespace)
                                    .bind(&record.key)
                                    .bind(value)
                                    .bind(index_text)
                                    .bind(embedding)
                                    .bind(now)
                                    .bind(record.expires_at)
                                    .bind(record.ttl)
                                    .fetch_one(&mut **tx)
                                    .await
                                    .map_err(storage("store put"))?;
                                let col = |e: sqlx::Error| Error::decode("stored item times", e);
                                record.created_at = row.try_get(0).map_err(col)?;
                                record.updated_at = row.try_get(1).map_err(col)?;
                                OpResult::Put(record.to_item(None))
                            }
                            Plan::Delete { namespace, key } => {
                                sqlx::query(AssertSqlSafe(self.queries.delete.clone()))
                                    .bind(namespace)
                                    .bind(key)
                                    .execute(&mut **tx)
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
            }

            #[async_trait]
            impl Store for $store {
                async fn batch(&self, ops: Vec<Op>) -> Result<Vec<OpResult>> {
                    traced("batch", ops.len(), self.run_batch(ops)).await
                }

                async fn sweep(&self) -> Result<u64> {
                    traced("sweep", 0, async {
                        self.ensure_migrated().await?;
                        // Under the store's write lock, as a writing batch:
                        // a batch never sees an item it read (and may be
                        // restarting the TTL of) swept halfway through.
                        let mut tx = self.begin_write("store sweep").await?;
                        let done = sqlx::query(AssertSqlSafe(self.queries.sweep.clone()))
                            .bind(now_micros())
                            .execute(&mut *tx)
                            .await
                            .map_err(storage("store sweep"))?;
                        tx.commit().await.map_err(storage("store sweep"))?;
                        Ok(done.rows_affected())
                    })
                    .await
                }
            }
        };
    };
}
pub(crate) use impl_sql_store;
