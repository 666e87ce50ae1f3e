//! [`SqliteSaver`]: the checkpointer on an SQLite file (WAL, `BEGIN IMMEDIATE`).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool};

use super::hot::HotSlot;
use super::{Settings, Verified};
use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::migrate::{self, Adapter, Dialect};

/// How long [`SqliteSaver::connect`] keeps opening a file another process
/// is switching to WAL: the busy timeout of
/// [`connect_options`](SqliteSaver::connect_options).
const CONNECT_BUSY_WAIT: Duration = Duration::from_secs(30);

/// SQLite `SQLITE_BUSY`, any extended code: a lock was not granted.
fn is_busy(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .and_then(|c| c.parse::<i32>().ok())
        .is_some_and(|n| n & 0xff == 5)
}

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
    /// What the saver's clones share ([`Saver::shared_state`](crate::Saver::shared_state)).
    pub(super) state: Arc<crate::checkpoint::SaverState>,
    settings: Settings,
}

impl SqliteSaver {
    /// A saver on `pool` (JSON codec, full history).
    ///
    /// The first saver built in a process allocates and frees one 1 MiB
    /// block: under glibc's `malloc` that keeps the memory of records read
    /// (up to 1 MiB) mapped between reads instead of faulting it in again on
    /// each one. Thresholds the application set (`mallopt`,
    /// `GLIBC_TUNABLES`) are left as they are.
    pub fn new(pool: SqlitePool) -> Self {
        SqliteSaver {
            pool,
            hot: Arc::new(HotSlot::new(close_now)),
            state: Arc::default(),
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
        Ok(SqliteConnectOptions::from_str(url)
            .map_err(|e| Error::invalid_argument(format!("bad SQLite url `{url}`: {e}")))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(CONNECT_BUSY_WAIT))
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
        let options = Self::connect_options(url)?;
        let deadline = std::time::Instant::now() + CONNECT_BUSY_WAIT;
        let mut pause = Duration::from_millis(1);
        let pool = loop {
            // No liveness ping before each checkout: the database is a local
            // file, and the ping is a round trip to the connection's worker
            // thread.
            let opened = SqlitePoolOptions::new()
                .test_before_acquire(false)
                .connect_with(options.clone())
                .await;
            match opened {
                Ok(pool) => break pool,
                Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(e) => return Err(Error::storage("connect", e)),
            }
        };
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

    /// Sets how long a call keeps polling for the database's reply before
    /// it lets its thread sleep (default 1 ms; `Duration::ZERO`: never).
    /// Replies within the budget then cost no wake-up of the waiting thread;
    /// the price is that thread's CPU while it waits (other tasks on the
    /// runtime still run in between, and between two polls the thread
    /// yields its core to any other thread the system has ready to run).
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

/// Closes the saver's own connection before the drop returns: the close
/// runs on the connection's worker thread (no async runtime needed), and
/// merges the WAL into the database file if no other connection is open.
/// Left to a background close, a process that exits right after dropping
/// the saver would leave its last writes in the `-wal` file only.
fn close_now(conn: sqlx::SqliteConnection) {
    let _ = futures_executor::block_on(sqlx::Connection::close(conn));
}

impl_sql_saver!(SqliteSaver, Sqlite);

/// `BEGIN IMMEDIATE` on a connection of `pool`, as a transaction: it holds
/// the database's write lock from the start.
///
/// SQLite rolls a transaction back on its own after some errors (a full
/// disk, an I/O error); sqlx's rollback on drop then fails, and the
/// connection goes back to the pool still counted as inside a transaction:
/// every later `BEGIN` on it is refused (`InvalidSavePointStatement`). When
/// that happens, the pool's idle connections are checked, the stuck ones
/// closed, and the `BEGIN` tried once more.
pub(crate) async fn begin_immediate(
    pool: &SqlitePool,
    op: &'static str,
) -> Result<sqlx::Transaction<'static, Sqlite>> {
    begin_healing(pool, "BEGIN IMMEDIATE", op).await
}

/// `BEGIN DEFERRED` on a connection of `pool`, as [`begin_immediate`] does:
/// a transaction that takes no lock until it reads, and then reads one
/// snapshot (in WAL mode, while a writer holds the write lock).
pub(crate) async fn begin_deferred(
    pool: &SqlitePool,
    op: &'static str,
) -> Result<sqlx::Transaction<'static, Sqlite>> {
    begin_healing(pool, "BEGIN DEFERRED", op).await
}

/// `begin` on a connection of `pool`, healing stuck connections once (see
/// [`begin_immediate`]).
async fn begin_healing(
    pool: &SqlitePool,
    begin: &'static str,
    op: &'static str,
) -> Result<sqlx::Transaction<'static, Sqlite>> {
    match pool.begin_with(begin).await {
        Err(sqlx::Error::InvalidSavePointStatement) => {
            close_stuck_connections(pool).await;
            pool.begin_with(begin)
                .await
                .map_err(|e| Error::storage(op, e))
        }
        r => r.map_err(|e| Error::storage(op, e)),
    }
}

/// Closes the idle connections of `pool` that refuse to begin a
/// transaction (see [`begin_immediate`]).
async fn close_stuck_connections(pool: &SqlitePool) {
    let mut healthy = Vec::new();
    while let Some(mut conn) = pool.try_acquire() {
        let stuck = match sqlx::Connection::begin_with(&mut *conn, "BEGIN DEFERRED").await {
            Ok(tx) => {
                let _ = tx.rollback().await;
                false
            }
            Err(e) => matches!(e, sqlx::Error::InvalidSavePointStatement),
        };
        if stuck {
            let _ = conn.close().await;
        } else {
            healthy.push(conn);
        }
    }
    drop(healthy);
}
