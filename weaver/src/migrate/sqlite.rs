//! Migrations on SQLite: `BEGIN IMMEDIATE` takes the database write lock, so
//! concurrent migrators queue behind the busy timeout.

use async_trait::async_trait;
use sqlx::{AssertSqlSafe, SqlitePool};

use super::script::preamble;
use super::{
    Adapter, Change, Dialect, MARKER_TABLE, MigrationTarget, distinct, script, sealed,
    stored_version,
};
use crate::error::{Error, Result};
use crate::sql::error::storage;
use crate::sql::sqlite::begin_immediate;

impl sealed::Sealed for SqlitePool {}

#[async_trait]
impl MigrationTarget for SqlitePool {
    async fn migrate(&self, adapters: &[Adapter], change: Change) -> Result<()> {
        let op = "migrate";
        let mut tx = begin_immediate(self, op).await?;
        for statement in preamble(Dialect::Sqlite, None) {
            sqlx::raw_sql(AssertSqlSafe(statement))
                .execute(&mut *tx)
                .await
                .map_err(storage(op))?;
        }
        for adapter in &distinct(adapters) {
            let current: Option<i64> =
                sqlx::query_scalar("SELECT version FROM weaver_schema_versions WHERE adapter = $1")
                    .bind(adapter.name())
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(storage(op))?;
            let current = stored_version(*adapter, current)?;
            if *adapter == Adapter::Checkpoint {
                refuse_rows_without_order(&mut tx, current, change).await?;
            }
            for statement in script(Dialect::Sqlite, *adapter, current, change, None)? {
                sqlx::raw_sql(AssertSqlSafe(statement))
                    .execute(&mut *tx)
                    .await
                    .map_err(storage(op))?;
            }
        }
        let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM weaver_schema_versions")
            .fetch_one(&mut *tx)
            .await
            .map_err(storage(op))?;
        if left == 0 {
            sqlx::raw_sql("DROP TABLE weaver_schema_versions")
                .execute(&mut *tx)
                .await
                .map_err(storage(op))?;
        }
        tx.commit().await.map_err(storage(op))
    }

    async fn versions(&self, adapters: &[Adapter]) -> Result<Vec<u32>> {
        let op = "migrate versions";
        let exists: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = $1")
                .bind(MARKER_TABLE)
                .fetch_optional(self)
                .await
                .map_err(storage(op))?;
        let mut out = Vec::with_capacity(adapters.len());
        for adapter in adapters {
            let v: Option<i64> = match exists {
                None => None,
                Some(_) => sqlx::query_scalar(
                    "SELECT version FROM weaver_schema_versions WHERE adapter = $1",
                )
                .bind(adapter.name())
                .fetch_optional(self)
                .await
                .map_err(storage(op))?,
            };
            out.push(stored_version(*adapter, v)?);
        }
        Ok(out)
    }
}

/// [`Error::MigrationRefused`] naming the checkpoints that have no
/// `commit_order`, when `change` takes the checkpoint tables from `current`
/// to version 4 or above (which makes the column `NOT NULL`). Before
/// version 2 there is no such column, and version 2 gives every row one.
async fn refuse_rows_without_order(
    tx: &mut sqlx::SqliteConnection,
    current: u32,
    change: Change,
) -> Result<()> {
    let reaches = match change {
        Change::Up { target } => target.is_none_or(|t| t >= 4),
        Change::Down { .. } => false,
    };
    if !(2..4).contains(&current) || !reaches {
        return Ok(());
    }
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT thread_id, checkpoint_ns, checkpoint_id FROM weaver_checkpoints
          WHERE commit_order IS NULL ORDER BY rowid LIMIT 11",
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(storage("migrate"))?;
    if rows.is_empty() {
        return Ok(());
    }
    let mut named: Vec<String> = rows
        .iter()
        .take(10)
        .map(|(t, ns, id)| format!("thread `{t}` namespace `{ns}` checkpoint `{id}`"))
        .collect();
    if rows.len() > 10 {
        named.push("and more".to_owned());
    }
    Err(Error::MigrationRefused {
        adapter: Adapter::Checkpoint.name().to_owned(),
        version: 4,
        reason: format!(
            "these rows of weaver_checkpoints have no commit_order, which version 4 requires \
             (no read of a thread's latest checkpoint sees them): {}; give each a commit_order \
             or delete it, then migrate again",
            named.join(", ")
        ),
    })
}
