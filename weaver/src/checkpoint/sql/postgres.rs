//! [`PostgresSaver`]: the checkpointer on PostgreSQL.

use std::sync::Arc;

use sqlx::{PgPool, Postgres};

use super::hot::HotSlot;
use super::{Settings, Verified};
use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::migrate::postgres::{checked_schema, table_prefix};
use crate::migrate::{self, Adapter, Dialect, PgSchema};

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
#[derive(Debug, Clone)]
pub struct PostgresSaver {
    pool: PgPool,
    hot: Arc<HotSlot<Postgres>>,
    schema: Option<String>,
    settings: Settings,
}

impl PostgresSaver {
    /// A saver on `pool`, with tables in the connection's `search_path`.
    pub fn new(pool: PgPool) -> Self {
        PostgresSaver {
            pool,
            hot: Arc::new(HotSlot::new(close_soon)),
            schema: None,
            settings: Settings::new(Dialect::Postgres, ""),
        }
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
        let codec = self.settings.codec.clone();
        let (shallow, max) = (self.settings.shallow, self.settings.max_record_bytes);
        self.settings = Settings::new(Dialect::Postgres, &table_prefix(Some(&schema)));
        self.settings.codec = codec;
        self.settings.shallow = shallow;
        self.settings.max_record_bytes = max;
        self.schema = Some(schema);
        Ok(self)
    }

    /// Passes payloads through `codec` (e.g. an
    /// `EncryptedCodec`, feature `encryption`).
    pub fn with_codec(mut self, codec: impl Codec + 'static) -> Self {
        self.settings.codec = Arc::new(codec);
        self
    }

    /// Keeps only the latest checkpoint per thread and namespace, with its
    /// pending writes. Older checkpoints are deleted as newer ones commit;
    /// asking for one is [`Error::ShallowSaver`].
    pub fn shallow(mut self) -> Self {
        self.settings.shallow = true;
        self
    }

    /// Opts in to busy-polling: each call keeps polling for the database's
    /// reply for up to `budget` before it lets its thread sleep (off by
    /// default; `Duration::ZERO` turns it off again).
    ///
    /// A reply within the budget then costs no wake-up of the waiting
    /// thread. The price is a core kept busy while the call waits, whether
    /// or not the reply comes in time: other tasks on the runtime still run
    /// in between, and between two polls the thread yields its core
    /// (`sched_yield`) to any other thread the system has ready to run.
    pub fn with_spin(mut self, budget: std::time::Duration) -> Self {
        self.settings.spin = budget;
        self
    }

    /// Sets the ceiling of one encoded payload (default
    /// [`MAX_RECORD_BYTES`](crate::codec::MAX_RECORD_BYTES)).
    pub fn with_max_record_bytes(mut self, bytes: usize) -> Self {
        self.settings.max_record_bytes = bytes;
        self
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Checks now that the schema is at the version this build needs.
    async fn check_schema(&self) -> Result<()> {
        let target = match &self.schema {
            Some(s) => PgSchema::new(&self.pool, s)?,
            None => PgSchema::search_path(&self.pool),
        };
        migrate::verify_migrated(&target, &[Adapter::Checkpoint]).await
    }

    /// Checks once that the schema is at the version this build needs.
    async fn ensure_migrated(&self) -> Result<()> {
        self.settings
            .verified
            .get_or_try_init(|| async {
                self.check_schema().await?;
                Ok::<_, Error>(Verified {
                    packed_listing: false,
                })
            })
            .await
            .map(|_| ())
    }

    /// Starts a write transaction.
    async fn begin_write(&self, op: &'static str) -> Result<sqlx::Transaction<'static, Postgres>> {
        self.pool.begin().await.map_err(|e| Error::storage(op, e))
    }

    /// Starts a write transaction whose reads all see one snapshot
    /// (`REPEATABLE READ`; READ COMMITTED gives each statement its own, so a
    /// prune committing between two reads would be seen by one only).
    async fn begin_write_snapshot(
        &self,
        op: &'static str,
    ) -> Result<sqlx::Transaction<'static, Postgres>> {
        self.pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ")
            .await
            .map_err(|e| Error::storage(op, e))
    }

    /// Starts a read-only transaction whose reads all see one snapshot.
    async fn begin_snapshot(
        &self,
        op: &'static str,
    ) -> Result<sqlx::Transaction<'static, Postgres>> {
        self.pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .await
            .map_err(|e| Error::storage(op, e))
    }

    /// Serializes writers that take "the next free" commit order on one
    /// thread and namespace (explicit orders rely on the unique constraint).
    async fn lock_thread(
        &self,
        conn: &mut sqlx::PgConnection,
        thread_id: &str,
        ns: &str,
        op: &'static str,
    ) -> Result<()> {
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))")
            .bind(thread_id)
            .bind(ns)
            .execute(&mut *conn)
            .await
            .map_err(|e| Error::storage(op, e))?;
        Ok(())
    }
}

/// Closes the saver's own connection (a `Terminate` message, then the
/// socket) on the current runtime if there is one; without one, dropping
/// the connection closes its socket.
fn close_soon(conn: sqlx::PgConnection) {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            let _ = sqlx::Connection::close(conn).await;
        });
    }
}

impl_sql_saver!(PostgresSaver, Postgres);
