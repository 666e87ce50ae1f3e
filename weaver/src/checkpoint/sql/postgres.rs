//! [`PostgresSaver`]: the checkpointer on PostgreSQL, and what the generic
//! saver needs from PostgreSQL ([`Backend`] for `sqlx::Postgres`).

use std::future::Future;

use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{PgPool, Postgres, Transaction};

use super::Verified;
use super::backend::{Backend, Col, bound, column};
use super::group::Arg;
use super::saver::SqlSaver;
use crate::error::{Error, Result};
use crate::migrate::postgres::{checked_schema, table_prefix};
use crate::migrate::{self, Adapter, PgSchema};
use crate::sql::Dialect;
use crate::sql::error::storage;

/// A checkpointer on PostgreSQL, through a user-supplied `sqlx` pool.
///
/// Concurrent writers are serialized by the unique constraint on
/// `(thread_id, checkpoint_ns, commit_order)`: the loser of a race for the
/// same number gets [`Error::VersionConflict`]
/// and its transaction writes nothing. A write that PostgreSQL cancels to
/// break a deadlock (a prune or a thread delete locking rows a group insert
/// of the same thread share-locks in the other order) or as a serialization
/// failure wrote nothing either; the saver runs it again, up to four times
/// after short pauses, before returning that
/// [`Error::Storage`].
///
/// The saver keeps one connection of its own beside the pool (taken from it
/// once and detached), which serves calls one after another without the
/// check `sqlx` makes whenever a connection goes back to the pool; calls that
/// overlap it use the pool. So it may hold one connection more than the
/// pool's maximum. After 10 s unused it is pinged before it serves again,
/// and past the pool's `max_lifetime` it is closed; a read that finds it
/// gone all the same (a session the server ended within those 10 s) is read
/// again once through the pool, while a write that finds it gone fails with
/// [`Error::Storage`], since it may have committed;
/// dropping the saver (its
/// last clone) closes it too. Closing the pool stops the saver: its
/// connection is then closed and every call fails with
/// [`Error::Storage`].
///
/// The schema must be migrated ([`crate::migrate::up`], with a
/// [`PgSchema`] when using [`with_prefix`](PostgresSaver::with_prefix)); the
/// first operation checks it once and fails with
/// [`Error::MigrationRequired`] otherwise.
/// [`PostgresSaver::connect`] migrates for you. A call that later finds a
/// table or column missing (the schema was migrated down meanwhile) fails
/// with `MigrationRequired` too.
///
/// Metadata is stored as `JSONB`, which keeps a number's value but not its
/// spelling: a float written in exponent form that is a whole number, such
/// as `1e16`, reads back as the integer `10000000000000000`.
pub type PostgresSaver = SqlSaver<Postgres>;

impl SqlSaver<Postgres> {
    /// A saver on `pool`, with tables in the connection's `search_path`.
    pub fn new(pool: PgPool) -> Self {
        SqlSaver::on(pool, None, "")
    }

    /// Connects to `url`, migrates the checkpoint tables (in the
    /// `search_path`) and returns a saver on them.
    ///
    /// The pool pings a connection before handing it out (sqlx's default):
    /// a session the server ended while the connection sat in the pool (a
    /// restart, `pg_terminate_backend`) is replaced instead of failing the
    /// call. Calls one after another use the saver's own connection and do
    /// not pay that ping. Build the pool yourself ([`PostgresSaver::new`])
    /// to choose otherwise.
    pub async fn connect(url: &str) -> Result<Self> {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect(url)
            .await
            .map_err(|e| Error::storage("connect", e))?;
        migrate::up(&pool, &[Adapter::Checkpoint], None).await?;
        Ok(PostgresSaver::new(pool))
    }

    /// Uses the tables in PostgreSQL schema `schema` (one set per tenant;
    /// migrate it with [`PgSchema`]). `schema` must be a plain identifier.
    pub fn with_prefix(mut self, schema: &str) -> Result<Self> {
        let schema = checked_schema(schema)?;
        let prefix = table_prefix(Some(&schema));
        self.settings = self.settings.with_prefix(Dialect::Postgres, &prefix);
        self.schema = Some(schema);
        Ok(self)
    }
}

impl Backend for Postgres {
    const DIALECT: Dialect = Dialect::Postgres;
    const SAVER: &'static str = "PostgresSaver";

    async fn begin_write(
        pool: &PgPool,
        op: &'static str,
    ) -> Result<Transaction<'static, Postgres>> {
        pool.begin().await.map_err(storage(op))
    }

    /// `REPEATABLE READ`: READ COMMITTED gives each statement its own
    /// snapshot, so a prune committing between two reads would be seen by
    /// one only.
    async fn begin_write_snapshot(
        pool: &PgPool,
        op: &'static str,
    ) -> Result<Transaction<'static, Postgres>> {
        pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ")
            .await
            .map_err(storage(op))
    }

    async fn begin_snapshot(
        pool: &PgPool,
        op: &'static str,
    ) -> Result<Transaction<'static, Postgres>> {
        pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .await
            .map_err(storage(op))
    }

    /// A transaction-scoped advisory lock on the thread and namespace
    /// (explicit commit orders rely on the unique constraint instead).
    async fn lock_thread(
        conn: &mut PgConnection,
        thread_id: &str,
        ns: &str,
        op: &'static str,
    ) -> Result<()> {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))")
            .bind(thread_id)
            .bind(ns)
            .execute(&mut *conn)
            .await
            .map_err(storage(op))?;
        Ok(())
    }

    async fn check_schema(pool: &PgPool, schema: Option<&str>) -> Result<()> {
        let target = match schema {
            Some(s) => PgSchema::new(pool, s)?,
            None => PgSchema::search_path(pool),
        };
        migrate::verify_migrated(&target, &[Adapter::Checkpoint]).await
    }

    /// PostgreSQL lists row by row.
    async fn inspect(_pool: &PgPool) -> Result<Verified> {
        Ok(Verified {
            packed_listing: false,
        })
    }

    /// Closes the connection (a `Terminate` message, then the socket) on
    /// the current runtime if there is one; without one, dropping the
    /// connection closes its socket.
    fn close_on_drop(conn: PgConnection) {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = sqlx::Connection::close(conn).await;
            });
        }
    }

    fn execute<'a>(
        conn: &mut PgConnection,
        sql: String,
        args: impl IntoIterator<Item = Arg<'a>>,
    ) -> impl Future<Output = std::result::Result<u64, sqlx::Error>> + Send {
        let query = bound::<Postgres>(sql, args);
        async move { query.execute(conn).await.map(|r| r.rows_affected()) }
    }

    fn fetch_all<'a>(
        conn: &mut PgConnection,
        sql: String,
        args: impl IntoIterator<Item = Arg<'a>>,
    ) -> impl Future<Output = std::result::Result<Vec<PgRow>, sqlx::Error>> + Send {
        let query = bound::<Postgres>(sql, args);
        query.fetch_all(conn)
    }

    fn fetch_optional<'a>(
        conn: &mut PgConnection,
        sql: String,
        args: impl IntoIterator<Item = Arg<'a>>,
    ) -> impl Future<Output = std::result::Result<Option<PgRow>, sqlx::Error>> + Send {
        let query = bound::<Postgres>(sql, args);
        query.fetch_optional(conn)
    }

    fn text(row: &PgRow, col: Col) -> std::result::Result<&str, sqlx::Error> {
        column(row, col)
    }

    fn opt_text(row: &PgRow, col: Col) -> std::result::Result<Option<&str>, sqlx::Error> {
        column(row, col)
    }

    fn int(row: &PgRow, col: Col) -> std::result::Result<i64, sqlx::Error> {
        column(row, col)
    }

    fn int32(row: &PgRow, col: Col) -> std::result::Result<i32, sqlx::Error> {
        column(row, col)
    }

    fn bytes(row: &PgRow, col: Col) -> std::result::Result<&[u8], sqlx::Error> {
        column(row, col)
    }

    fn opt_bytes(row: &PgRow, col: Col) -> std::result::Result<Option<&[u8]>, sqlx::Error> {
        column(row, col)
    }
}
