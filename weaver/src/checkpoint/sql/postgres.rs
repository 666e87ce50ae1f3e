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
use crate::sql::error::storage;
use crate::sql::{Dialect, Pooling};

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
/// Behind a pooler in transaction mode (PgBouncer, Supabase, Neon, RDS
/// Proxy) build it with [`pooler_safe(true)`](PostgresSaver::pooler_safe).
///
/// Metadata is stored as `JSONB`, which keeps a number's value but not its
/// spelling: a float written in exponent form that is a whole number, such
/// as `1e16`, reads back as the integer `10000000000000000`.
pub type PostgresSaver = SqlSaver<Postgres>;

impl SqlSaver<Postgres> {
    /// A saver on `pool`, with tables in the connection's `search_path`.
    ///
    /// ```no_run
    /// // Needs a PostgreSQL server, so it is only compiled here.
    /// # async fn demo() -> weaver::Result<()> {
    /// use weaver::checkpoint::PostgresSaver;
    /// use weaver::migrate::{self, Adapter};
    ///
    /// let pool = sqlx::PgPool::connect("postgres://app@localhost/app").await.unwrap();
    /// migrate::up(&pool, &[Adapter::Checkpoint], None).await?;
    /// let saver = PostgresSaver::new(pool);
    /// # Ok(()) }
    /// ```
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
    ///
    /// ```no_run
    /// // Needs a PostgreSQL server, so it is only compiled here.
    /// # async fn demo() -> weaver::Result<()> {
    /// use weaver::checkpoint::PostgresSaver;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: u64 }
    ///
    /// let saver = PostgresSaver::connect("postgres://app@localhost/app").await?;
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("a", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "a", END])
    ///     .compile(Compile::new().checkpointer(saver))?;
    /// graph.invoke(S::default(), &RunConfig::thread("t")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self> {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .connect(url)
            .await
            .map_err(|e| Error::storage("connect", e))?;
        migrate::up(&pool, &[Adapter::Checkpoint], None).await?;
        Ok(PostgresSaver::new(pool))
    }

    /// Makes the saver safe behind a pooler in transaction mode (PgBouncer
    /// with `pool_mode = transaction`, Supabase's and Neon's poolers, RDS
    /// Proxy), which may run each transaction on another server session:
    /// with `true` every statement is sent unnamed (never a named prepared
    /// statement, which would be missing or taken on the next session),
    /// and one that is not part of a transaction runs in a transaction of
    /// its own, so nothing is left on a session between two transactions.
    /// The locks the saver takes are transaction-scoped in either mode.
    /// `false` (the default) prepares each statement once per connection.
    ///
    /// A pooler drops the `search_path` a client sends: give the schema
    /// with [`with_prefix`](PostgresSaver::with_prefix), which names it in
    /// every statement, or leave the tables in the database's default
    /// `search_path`. [`crate::migrate::up`] runs through such a pooler as
    /// it is.
    ///
    /// ```no_run
    /// # async fn demo() -> weaver::Result<()> {
    /// use weaver::checkpoint::PostgresSaver;
    /// // PgBouncer in transaction mode in front of the database.
    /// let saver = PostgresSaver::connect("postgres://app@pooler:6432/app")
    ///     .await?
    ///     .pooler_safe(true);
    /// # Ok(()) }
    /// ```
    pub fn pooler_safe(mut self, on: bool) -> Self {
        self.settings.pooling = if on {
            Pooling::Transaction
        } else {
            Pooling::Session
        };
        self
    }

    /// Uses the tables in PostgreSQL schema `schema` (one set per tenant;
    /// migrate it with [`PgSchema`]). `schema` must be a plain identifier.
    ///
    /// ```no_run
    /// // Needs a PostgreSQL server, so it is only compiled here.
    /// # async fn demo(pool: sqlx::PgPool) -> weaver::Result<()> {
    /// use weaver::checkpoint::PostgresSaver;
    /// use weaver::migrate::{self, Adapter, PgSchema};
    ///
    /// // One schema per tenant, migrated once.
    /// migrate::up(&PgSchema::new(&pool, "tenant_a")?, &[Adapter::Checkpoint], None).await?;
    /// let saver = PostgresSaver::new(pool.clone()).with_prefix("tenant_a")?;
    /// assert!(PostgresSaver::new(pool).with_prefix("a; DROP TABLE x").is_err());
    /// # Ok(()) }
    /// ```
    pub fn with_prefix(mut self, schema: &str) -> Result<Self> {
        let schema = checked_schema(schema)?;
        let prefix = table_prefix(Some(&schema));
        self.settings = self.settings.with_prefix(Dialect::Postgres, &prefix);
        self.schema = Some(schema);
        // Other tables: another saver, which shares nothing with this one.
        self.state = std::sync::Arc::default();
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
        pooling: Pooling,
        thread_id: &str,
        ns: &str,
        op: &'static str,
    ) -> Result<()> {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))")
            .persistent(pooling.persistent())
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
        pooling: Pooling,
        sql: String,
        args: impl IntoIterator<Item = Arg<'a>>,
    ) -> impl Future<Output = std::result::Result<u64, sqlx::Error>> + Send {
        let args: Vec<Arg<'a>> = args.into_iter().collect();
        let simple = pooling == Pooling::Transaction && args.is_empty();
        let query = bound::<Postgres>(sql.clone(), args).persistent(pooling.persistent());
        async move {
            if simple {
                // No parameters (`ROLLBACK`): one simple-protocol message,
                // which a pooler runs on one session.
                return sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                    .execute(conn)
                    .await
                    .map(|r| r.rows_affected());
            }
            match run(conn, pooling, query, Want::Execute).await? {
                Got::Changed(n) => Ok(n),
                _ => unreachable!("an execute returns a count"),
            }
        }
    }

    fn fetch_all<'a>(
        conn: &mut PgConnection,
        pooling: Pooling,
        sql: String,
        args: impl IntoIterator<Item = Arg<'a>>,
    ) -> impl Future<Output = std::result::Result<Vec<PgRow>, sqlx::Error>> + Send {
        let query = bound::<Postgres>(sql, args).persistent(pooling.persistent());
        async move {
            match run(conn, pooling, query, Want::All).await? {
                Got::All(rows) => Ok(rows),
                _ => unreachable!("fetch_all returns rows"),
            }
        }
    }

    fn fetch_optional<'a>(
        conn: &mut PgConnection,
        pooling: Pooling,
        sql: String,
        args: impl IntoIterator<Item = Arg<'a>>,
    ) -> impl Future<Output = std::result::Result<Option<PgRow>, sqlx::Error>> + Send {
        let query = bound::<Postgres>(sql, args).persistent(pooling.persistent());
        async move {
            match run(conn, pooling, query, Want::Optional).await? {
                Got::Optional(row) => Ok(row),
                _ => unreachable!("fetch_optional returns at most a row"),
            }
        }
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

/// What a statement is run for.
enum Want {
    Execute,
    All,
    Optional,
}

/// What it returned.
enum Got {
    Changed(u64),
    All(Vec<PgRow>),
    Optional(Option<PgRow>),
}

/// Runs `query` on `conn` for `want`. Through a transaction-mode pooler a
/// statement outside a transaction runs inside one of its own: `sqlx`
/// parses a statement and binds it in two exchanges, and between them the
/// pooler may hand the server session to another client (whose statement
/// the bind would then run). A single statement in a transaction of its
/// own behaves as it does on its own under `READ COMMITTED`.
async fn run(
    conn: &mut PgConnection,
    pooling: Pooling,
    query: sqlx::query::Query<'static, Postgres, sqlx::postgres::PgArguments>,
    want: Want,
) -> std::result::Result<Got, sqlx::Error> {
    use sqlx::Connection;
    if pooling == Pooling::Session || conn.is_in_transaction() {
        return once(&mut *conn, query, want).await;
    }
    let mut tx = conn.begin().await?;
    match once(&mut tx, query, want).await {
        Ok(got) => {
            tx.commit().await?;
            Ok(got)
        }
        Err(e) => {
            // The statement's error is the one to report; a connection that
            // cannot roll back fails its next use.
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

/// Runs `query` once on `conn`.
async fn once(
    conn: &mut PgConnection,
    query: sqlx::query::Query<'static, Postgres, sqlx::postgres::PgArguments>,
    want: Want,
) -> std::result::Result<Got, sqlx::Error> {
    Ok(match want {
        Want::Execute => Got::Changed(query.execute(conn).await?.rows_affected()),
        Want::All => Got::All(query.fetch_all(conn).await?),
        Want::Optional => Got::Optional(query.fetch_optional(conn).await?),
    })
}
