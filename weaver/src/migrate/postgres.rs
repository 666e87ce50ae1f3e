//! Migrations on PostgreSQL: one transaction holding
//! `pg_advisory_xact_lock`, so concurrent migrators run one after the other.

use async_trait::async_trait;
use sqlx::{AssertSqlSafe, PgPool};

use super::{Adapter, Change, Dialect, MigrationTarget, is_plain_identifier, plan, render, sealed};
use crate::error::{Error, Result};

fn storage(op: &'static str) -> impl FnOnce(sqlx::Error) -> Error {
    move |e| Error::storage(op, e)
}

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
impl sealed::Sealed for PgSchema<'_> {}

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
        let p = table_prefix(self.schema.as_deref());
        let mut tx = self.pool.begin().await.map_err(storage(op))?;
        // Keyed on the schema the tables land in, whether it was named or
        // comes from the search path: two migrations of the same tables
        // take the same lock however each caller reached them.
        sqlx::query(
            "SELECT pg_advisory_xact_lock(hashtext('weaver.migrate:' || COALESCE(CAST($1 AS TEXT), CAST(current_schema() AS TEXT), ''))::bigint)",
        )
        .bind(self.schema.as_deref())
        .execute(&mut *tx)
            .await
            .map_err(storage(op))?;
        if let Some(schema) = &self.schema {
            sqlx::raw_sql(AssertSqlSafe(format!(
                "CREATE SCHEMA IF NOT EXISTS \"{schema}\""
            )))
            .execute(&mut *tx)
            .await
            .map_err(storage(op))?;
        }
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE TABLE IF NOT EXISTS {p}weaver_schema_versions (
                adapter TEXT PRIMARY KEY,
                version INTEGER NOT NULL
            )"
        )))
        .execute(&mut *tx)
        .await
        .map_err(storage(op))?;
        for adapter in adapters {
            let current: Option<i32> = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT version FROM {p}weaver_schema_versions WHERE adapter = $1"
            )))
            .bind(adapter.name())
            .fetch_optional(&mut *tx)
            .await
            .map_err(storage(op))?;
            let current = u32::try_from(current.unwrap_or(0)).unwrap_or(0);
            let steps = plan(*adapter, Dialect::Postgres, current, change)?;
            let Some(last) = steps.last().map(|s| s.version_after) else {
                continue;
            };
            for step in &steps {
                for statement in step.statements {
                    sqlx::raw_sql(AssertSqlSafe(render(statement, &p)))
                        .execute(&mut *tx)
                        .await
                        .map_err(storage(op))?;
                }
            }
            if last == 0 {
                sqlx::query(AssertSqlSafe(format!(
                    "DELETE FROM {p}weaver_schema_versions WHERE adapter = $1"
                )))
                .bind(adapter.name())
                .execute(&mut *tx)
                .await
                .map_err(storage(op))?;
            } else {
                sqlx::query(AssertSqlSafe(format!(
                    "INSERT INTO {p}weaver_schema_versions (adapter, version) VALUES ($1, $2)
                     ON CONFLICT (adapter) DO UPDATE SET version = excluded.version"
                )))
                .bind(adapter.name())
                .bind(i32::try_from(last).unwrap_or(i32::MAX))
                .execute(&mut *tx)
                .await
                .map_err(storage(op))?;
            }
        }
        let left: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM {p}weaver_schema_versions"
        )))
        .fetch_one(&mut *tx)
        .await
        .map_err(storage(op))?;
        if left == 0 {
            sqlx::raw_sql(AssertSqlSafe(format!(
                "DROP TABLE {p}weaver_schema_versions"
            )))
            .execute(&mut *tx)
            .await
            .map_err(storage(op))?;
        }
        tx.commit().await.map_err(storage(op))
    }

    async fn versions(&self, adapters: &[Adapter]) -> Result<Vec<u32>> {
        let op = "migrate versions";
        let p = table_prefix(self.schema.as_deref());
        let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
            .bind(format!("{p}weaver_schema_versions"))
            .fetch_one(self.pool)
            .await
            .map_err(storage(op))?;
        let mut out = Vec::with_capacity(adapters.len());
        for adapter in adapters {
            let v: Option<i32> = match exists {
                None => None,
                Some(_) => sqlx::query_scalar(AssertSqlSafe(format!(
                    "SELECT version FROM {p}weaver_schema_versions WHERE adapter = $1"
                )))
                .bind(adapter.name())
                .fetch_optional(self.pool)
                .await
                .map_err(storage(op))?,
            };
            out.push(u32::try_from(v.unwrap_or(0)).unwrap_or(0));
        }
        Ok(out)
    }
}
