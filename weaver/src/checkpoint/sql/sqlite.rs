//! [`SqliteSaver`]: the checkpointer on an SQLite file (WAL, `BEGIN IMMEDIATE`),
//! and what the generic saver needs from SQLite ([`Backend`] for `sqlx::Sqlite`).

use std::future::Future;

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteRow};
use sqlx::{Pool, Sqlite, SqlitePool, Transaction};

use super::Verified;
use super::backend::{Backend, Col, bound, column};
use super::group::Arg;
use super::saver::SqlSaver;
use crate::error::{Error, Result};
use crate::migrate::{self, Adapter};
use crate::sql::{self, Dialect, Pooling};

// The store's transactions start here too.
pub(crate) use crate::sql::sqlite::{begin_deferred, begin_immediate};

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
pub type SqliteSaver = SqlSaver<Sqlite>;

impl SqlSaver<Sqlite> {
    /// A saver on `pool` (JSON codec, full history).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use weaver::Saver;
    /// use weaver::checkpoint::SqliteSaver;
    /// use weaver::migrate::{self, Adapter};
    ///
    /// let file = std::env::temp_dir().join(format!("weaver-doc-new-{}.db", std::process::id()));
    /// let options = SqliteSaver::connect_options(&format!("sqlite://{}", file.display()))?;
    /// // Your own pool, shared with the rest of the application.
    /// let pool = sqlx::sqlite::SqlitePoolOptions::new().connect_with(options).await.unwrap();
    /// migrate::up(&pool, &[Adapter::Checkpoint], None).await?;
    /// let saver = SqliteSaver::new(pool);
    /// assert!(saver.thread_info("t").await?.is_none());
    /// # std::fs::remove_file(&file).ok();
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn new(pool: SqlitePool) -> Self {
        SqlSaver::on(pool, None, "")
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
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use weaver::checkpoint::SqliteSaver;
    /// use weaver::migrate::{self, Adapter};
    ///
    /// let file = std::env::temp_dir().join(format!("weaver-doc-options-{}.db", std::process::id()));
    /// let options = SqliteSaver::connect_options(&format!("sqlite://{}", file.display()))?;
    /// // Your own pool on the recommended options: here, at most four connections.
    /// let pool = sqlx::sqlite::SqlitePoolOptions::new()
    ///     .max_connections(4)
    ///     .connect_with(options)
    ///     .await
    ///     .unwrap();
    /// migrate::up(&pool, &[Adapter::Checkpoint], None).await?;
    /// let saver = SqliteSaver::new(pool);
    /// # let _ = saver;
    /// # std::fs::remove_file(&file).ok();
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
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
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use weaver::checkpoint::{CheckpointRef, SqliteSaver};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Count {
    ///     #[reducer(add)]
    ///     n: u64,
    /// }
    ///
    /// let dir = std::env::temp_dir().join(format!("weaver-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let url = format!("sqlite://{}", dir.join("count.db").display());
    /// let graph = Graph::<Count>::new("count")
    ///     .add_node("inc", |_: &Count| CountUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(SqliteSaver::connect(&url).await?))?;
    /// graph.invoke(Count::default(), &RunConfig::thread("t")).await?;
    /// // Another process (here: another saver on the same file) reads it.
    /// let other = SqliteSaver::connect(&url).await?;
    /// let head = other.get_tuple(&CheckpointRef::latest("t")).await?.unwrap();
    /// assert_eq!(head.checkpoint.channel_values["n"], 1);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn connect(url: &str) -> Result<Self> {
        let pool = sql::sqlite::connect(Self::connect_options(url)?).await?;
        migrate::up(&pool, &[Adapter::Checkpoint], None).await?;
        Ok(SqliteSaver::new(pool))
    }
}

impl Backend for Sqlite {
    const DIALECT: Dialect = Dialect::Sqlite;
    const SAVER: &'static str = "SqliteSaver";

    async fn begin_write(
        pool: &SqlitePool,
        op: &'static str,
    ) -> Result<Transaction<'static, Sqlite>> {
        begin_immediate(pool, op).await
    }

    /// Any SQLite write transaction reads one snapshot.
    async fn begin_write_snapshot(
        pool: &SqlitePool,
        op: &'static str,
    ) -> Result<Transaction<'static, Sqlite>> {
        begin_immediate(pool, op).await
    }

    /// WAL: no lock until it reads, then one snapshot while writers go on.
    async fn begin_snapshot(
        pool: &SqlitePool,
        op: &'static str,
    ) -> Result<Transaction<'static, Sqlite>> {
        begin_deferred(pool, op).await
    }

    /// `BEGIN IMMEDIATE` already serializes writers.
    async fn lock_thread(
        _conn: &mut SqliteConnection,
        _pooling: Pooling,
        _thread_id: &str,
        _ns: &str,
        _op: &'static str,
    ) -> Result<()> {
        Ok(())
    }

    async fn check_schema(pool: &SqlitePool, _schema: Option<&str>) -> Result<()> {
        migrate::verify_migrated(pool, &[Adapter::Checkpoint]).await
    }

    /// Reads the database's text encoding: listings are packed into one row
    /// only in a UTF-8 database.
    async fn inspect(pool: &Pool<Sqlite>) -> Result<Verified> {
        let encoding: String = sqlx::query_scalar("PRAGMA encoding")
            .fetch_one(pool)
            .await
            .map_err(|e| Error::storage("read the database encoding", e))?;
        Ok(Verified {
            packed_listing: super::packed::ENABLED && encoding.eq_ignore_ascii_case("UTF-8"),
        })
    }

    /// Closes before the drop returns, so the WAL is merged into the file
    /// (see [`sql::sqlite::close_now`]).
    fn close_on_drop(conn: SqliteConnection) {
        sql::sqlite::close_now(conn);
    }

    fn execute<'a>(
        conn: &mut SqliteConnection,
        _pooling: Pooling,
        sql: String,
        args: impl IntoIterator<Item = Arg<'a>>,
    ) -> impl Future<Output = std::result::Result<u64, sqlx::Error>> + Send {
        let query = bound::<Sqlite>(sql, args);
        async move { query.execute(conn).await.map(|r| r.rows_affected()) }
    }

    fn fetch_all<'a>(
        conn: &mut SqliteConnection,
        _pooling: Pooling,
        sql: String,
        args: impl IntoIterator<Item = Arg<'a>>,
    ) -> impl Future<Output = std::result::Result<Vec<SqliteRow>, sqlx::Error>> + Send {
        let query = bound::<Sqlite>(sql, args);
        query.fetch_all(conn)
    }

    fn fetch_optional<'a>(
        conn: &mut SqliteConnection,
        _pooling: Pooling,
        sql: String,
        args: impl IntoIterator<Item = Arg<'a>>,
    ) -> impl Future<Output = std::result::Result<Option<SqliteRow>, sqlx::Error>> + Send {
        let query = bound::<Sqlite>(sql, args);
        query.fetch_optional(conn)
    }

    fn text(row: &SqliteRow, col: Col) -> std::result::Result<&str, sqlx::Error> {
        column(row, col)
    }

    fn opt_text(row: &SqliteRow, col: Col) -> std::result::Result<Option<&str>, sqlx::Error> {
        column(row, col)
    }

    fn int(row: &SqliteRow, col: Col) -> std::result::Result<i64, sqlx::Error> {
        column(row, col)
    }

    fn int32(row: &SqliteRow, col: Col) -> std::result::Result<i32, sqlx::Error> {
        column(row, col)
    }

    fn bytes(row: &SqliteRow, col: Col) -> std::result::Result<&[u8], sqlx::Error> {
        column(row, col)
    }

    fn opt_bytes(row: &SqliteRow, col: Col) -> std::result::Result<Option<&[u8]>, sqlx::Error> {
        column(row, col)
    }
}
