//! Migrations on PostgreSQL: one transaction holding
//! `pg_advisory_xact_lock`, so concurrent migrators run one after the other.
//! Every statement is unnamed and inside a transaction, so migrations run
//! through a pooler in transaction mode (PgBouncer) as they do directly.

use async_trait::async_trait;
use sqlx::{AssertSqlSafe, PgPool};

use super::script::preamble;
use super::{Adapter, Change, Dialect, MigrationTarget, distinct, script, sealed, stored_version};
use crate::error::{Error, Result};
use crate::sql::error::storage;
use crate::sql::is_plain_identifier;

/// A PostgreSQL pool with a schema `prefix`: weaver's tables (and their
/// version marker) live in that schema, one set per tenant. Created on the
/// first `up`.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> weaver::Result<()> {
/// use weaver::migrate::{self, Adapter, PgSchema};
/// migrate::up(&PgSchema::new(&pool, "tenant_a")?, &[Adapter::Checkpoint], None).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PgSchema<'a> {
    pool: &'a PgPool,
    schema: Option<String>,
}

impl<'a> PgSchema<'a> {
    /// Tables in schema `schema`, which must be a plain identifier
    /// (`[A-Za-z_][A-Za-z0-9_]*`), else [`Error::InvalidArgument`].
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use weaver::migrate::PgSchema;
    ///
    /// // A pool that connects on first use: naming a schema touches no server.
    /// let pool = sqlx::PgPool::connect_lazy("postgres://app@localhost/app").unwrap();
    /// assert!(PgSchema::new(&pool, "tenant_a").is_ok());
    /// assert!(PgSchema::new(&pool, "tenant-a; DROP").is_err());
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new(pool: &'a PgPool, schema: &str) -> Result<Self> {
        Ok(PgSchema {
            pool,
            schema: Some(checked_schema(schema)?),
        })
    }

    /// Tables in the connection's `search_path` (unqualified names).
    pub fn search_path(pool: &'a PgPool) -> Self {
        PgSchema { pool, schema: None }
    }
}

/// Validates a schema name for use in SQL text.
pub(crate) fn checked_schema(schema: &str) -> Result<String> {
    if is_plain_identifier(schema) {
        Ok(schema.to_owned())
    } else {
        Err(Error::invalid_argument(format!(
            "PostgreSQL schema prefix `{schema}` is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)"
        )))
    }
}

/// The text put before table names: `"schema".` or nothing.
pub(crate) fn table_prefix(schema: Option<&str>) -> String {
    schema.map_or_else(String::new, |s| format!("\"{s}\"."))
}

impl sealed::Sealed for PgPool {}
impl sealed::Sealed for PgSchema<'_> {
    fn hint_expr(&self) -> String {
        match &self.schema {
            Some(s) => format!("&PgSchema::new(&pool, \"{s}\")?"),
            None => "&pool".to_owned(),
        }
    }
}

#[async_trait]
impl MigrationTarget for PgPool {
    async fn migrate(&self, adapters: &[Adapter], change: Change) -> Result<()> {
        PgSchema::search_path(self).migrate(adapters, change).await
    }

    async fn versions(&self, adapters: &[Adapter]) -> Result<Vec<u32>> {
        PgSchema::search_path(self).versions(adapters).await
    }
}

#[async_trait]
impl MigrationTarget for PgSchema<'_> {
    async fn migrate(&self, adapters: &[Adapter], change: Change) -> Result<()> {
        let op = "migrate";
        let schema = self.schema.as_deref();
        let p = table_prefix(schema);
        let mut tx = self.pool.begin().await.map_err(storage(op))?;
        for statement in preamble(Dialect::Postgres, schema) {
            sqlx::raw_sql(AssertSqlSafe(statement))
                .execute(&mut *tx)
                .await
                .map_err(storage(op))?;
        }
        // Every adapter's version first: a script that reverts the last
        // adapter in the marker drops it.
        let adapters = distinct(adapters);
        let mut current = Vec::with_capacity(adapters.len());
        for adapter in &adapters {
            let found: Option<i32> = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT version FROM {p}weaver_schema_versions WHERE adapter = $1"
            )))
            .persistent(false)
            .bind(adapter.name())
            .fetch_optional(&mut *tx)
            .await
            .map_err(storage(op))?;
            current.push(stored_version(*adapter, found.map(i64::from))?);
        }
        for (adapter, current) in adapters.iter().zip(current) {
            for statement in script(Dialect::Postgres, *adapter, current, change, schema)? {
                sqlx::raw_sql(AssertSqlSafe(statement))
                    .execute(&mut *tx)
                    .await
                    .map_err(storage(op))?;
            }
        }
        // A call that changed nothing leaves no empty marker behind.
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DO $$ BEGIN IF to_regclass('{p}weaver_schema_versions') IS NOT NULL THEN \
             IF NOT EXISTS (SELECT 1 FROM {p}weaver_schema_versions) \
             THEN DROP TABLE {p}weaver_schema_versions; END IF; END IF; END $$"
        )))
        .execute(&mut *tx)
        .await
        .map_err(storage(op))?;
        tx.commit().await.map_err(storage(op))
    }

    async fn versions(&self, adapters: &[Adapter]) -> Result<Vec<u32>> {
        let op = "migrate versions";
        let p = table_prefix(self.schema.as_deref());
        // One transaction of unnamed statements: through a pooler in
        // transaction mode each transaction may run on another server
        // session, which would not hold a named statement, and a statement
        // outside a transaction may even be parsed on one and run on
        // another.
        let mut tx = self.pool.begin().await.map_err(storage(op))?;
        let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
            .persistent(false)
            .bind(format!("{p}weaver_schema_versions"))
            .fetch_one(&mut *tx)
            .await
            .map_err(storage(op))?;
        let mut out = Vec::with_capacity(adapters.len());
        for adapter in adapters {
            let v: Option<i32> = match exists {
                None => None,
                Some(_) => sqlx::query_scalar(AssertSqlSafe(format!(
                    "SELECT version FROM {p}weaver_schema_versions WHERE adapter = $1"
                )))
                .persistent(false)
                .bind(adapter.name())
                .fetch_optional(&mut *tx)
                .await
                .map_err(storage(op))?,
            };
            out.push(stored_version(*adapter, v.map(i64::from))?);
        }
        tx.commit().await.map_err(storage(op))?;
        Ok(out)
    }
}
