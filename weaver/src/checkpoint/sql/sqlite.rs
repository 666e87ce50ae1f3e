//! [`SqliteSaver`]: the checkpointer on an SQLite file (WAL, `BEGIN IMMEDIATE`).

use std::sync::Arc;

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Sqlite, SqlitePool};

use super::hot::HotSlot;
use super::{Settings, Verified};
use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::migrate::{self, Adapter};
use crate::sql::{self, Dialect};

/// A checkpointer on SQLite, through a user-supplied `sqlx` pool.
///
/// Writers are serialized by `BEGIN IMMEDIATE` (the database write lock,
/// waited for up to the pool's busy timeout), so two writers racing for the
/// same `commit_order` get one success and one
/// [`Error::VersionConflict`]. Use WAL and a
/// busy timeout ([`SqliteSaver::connect_options`] sets both).
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
/// The schema must be migrated ([`crate::migrate::up`]); the first operation
/// checks it once and fails with
/// [`Error::MigrationRequired`] otherwise.
/// [`SqliteSaver::connect`] migrates for you. A call that later finds a
/// table or column missing (the schema was migrated down meanwhile) fails
/// with `MigrationRequired` too.
///
/// ```no_run
/// # async fn demo() -> weaver::Result<()> {
/// use weaver::checkpoint::SqliteSaver;
/// let saver = SqliteSaver::connect("sqlite://weaver.db").await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteSaver {
    pool: SqlitePool,
    hot: Arc<HotSlot<Sqlite>>,
    settings: Settings,
}

impl SqliteSaver {
    /// A saver on `pool` (JSON codec, full history).
    pub fn new(pool: SqlitePool) -> Self {
        SqliteSaver {
            pool,
            hot: Arc::new(HotSlot::new(sql::sqlite::close_now)),
            settings: Settings::new(Dialect::Sqlite, ""),
        }
    }

    /// The connect options weaver recommends for `url`: create the file if
    /// missing, WAL journal, `synchronous=FULL`, a 30 s busy timeout.
    ///
    /// SQLite reads a record longer than a page (4 KiB) from its overflow
    /// pages one system call per page, unless the application turns on
    /// memory-mapped reads, for instance with
    /// `.pragma("mmap_size", "268435456")` on these options. That made cold
    /// reads of W2's chat (127 KB records) about 5% faster here
    /// (`W4_MMAP=268435456 cargo run --release -p weaver-bench --bin
    /// w4_fresh`), but it is left off: under memory-mapped reads an I/O error
    /// (or a file cut short by another program) stops the process with
    /// `SIGBUS` instead of failing the call with [`Error::Storage`].
    pub fn connect_options(url: &str) -> Result<SqliteConnectOptions> {
        sql::sqlite::connect_options(url)
    }

    /// Opens (creating if needed) the database at `url` with
    /// [`connect_options`](SqliteSaver::connect_options), migrates the
    /// checkpoint tables to the latest version and returns a saver on it.
    ///
    /// Processes may call it at once on a file that does not exist yet.
    /// Switching a file to WAL takes a lock SQLite does not wait for, so a
    /// connection opened meanwhile fails with `SQLITE_BUSY` ("database is
    /// locked"); `connect` opens it again, for up to the busy timeout (30 s).
    /// A pool built by hand on these options meets the same error in that
    /// case, and can open it again likewise.
    pub async fn connect(url: &str) -> Result<Self> {
        let pool = sql::sqlite::connect(Self::connect_options(url)?).await?;
        migrate::up(&pool, &[Adapter::Checkpoint], None).await?;
        Ok(SqliteSaver::new(pool))
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
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Checks now that the schema is at the version this build needs.
    async fn check_schema(&self) -> Result<()> {
        migrate::verify_migrated(&self.pool, &[Adapter::Checkpoint]).await
    }

    /// Checks once that the schema is at the version this build needs, and
    /// reads the database's text encoding (listings are packed into one row
    /// only in a UTF-8 database).
    async fn ensure_migrated(&self) -> Result<()> {
        self.settings
            .verified
            .get_or_try_init(|| async {
                self.check_schema().await?;
                let encoding: String = sqlx::query_scalar("PRAGMA encoding")
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|e| Error::storage("read the database encoding", e))?;
                Ok::<_, Error>(Verified {
                    packed_listing: encoding.eq_ignore_ascii_case("UTF-8"),
                })
            })
            .await
            .map(|_| ())
    }

    /// Starts a write transaction holding the database write lock.
    async fn begin_write(&self, op: &'static str) -> Result<sqlx::Transaction<'static, Sqlite>> {
        begin_immediate(&self.pool, op).await
    }

    /// Starts a write transaction whose reads all see one snapshot: on
    /// SQLite, any write transaction.
    async fn begin_write_snapshot(
        &self,
        op: &'static str,
    ) -> Result<sqlx::Transaction<'static, Sqlite>> {
        begin_immediate(&self.pool, op).await
    }

    /// Starts a transaction for reads that must see one snapshot (WAL: no
    /// lock until it reads, then one snapshot while writers go on).
    async fn begin_snapshot(&self, op: &'static str) -> Result<sqlx::Transaction<'static, Sqlite>> {
        begin_deferred(&self.pool, op).await
    }

    /// `BEGIN IMMEDIATE` already serializes writers.
    async fn lock_thread(
        &self,
        _conn: &mut sqlx::SqliteConnection,
        _thread_id: &str,
        _ns: &str,
        _op: &'static str,
    ) -> Result<()> {
        Ok(())
    }
}

impl_sql_saver!(SqliteSaver, Sqlite);

// The store's transactions start here too.
pub(crate) use crate::sql::sqlite::{begin_deferred, begin_immediate};
