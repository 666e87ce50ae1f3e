//! SQLite connections and transactions: the options weaver recommends,
//! opening a file other processes are switching to WAL, and `BEGIN` that
//! heals connections SQLite left inside a transaction.

use std::str::FromStr;
use std::time::{Duration, Instant};

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool};

use super::error::{is_busy, storage};
use crate::error::{Error, Result};

/// How long [`connect`] keeps opening a file another process is switching
/// to WAL: the busy timeout of [`connect_options`].
pub(crate) const CONNECT_BUSY_WAIT: Duration = Duration::from_secs(30);

/// Create the file if missing, WAL journal, `synchronous=FULL`, a 30 s busy
/// timeout.
pub(crate) fn connect_options(url: &str) -> Result<SqliteConnectOptions> {
    Ok(SqliteConnectOptions::from_str(url)
        .map_err(|e| Error::invalid_argument(format!("bad SQLite url `{url}`: {e}")))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(CONNECT_BUSY_WAIT))
}

/// A pool on `options`, opened again while another process holds the lock
/// that switching a file to WAL takes (SQLite does not wait for it: the
/// connection fails with `SQLITE_BUSY`), for up to [`CONNECT_BUSY_WAIT`].
pub(crate) async fn connect(options: SqliteConnectOptions) -> Result<SqlitePool> {
    let deadline = Instant::now() + CONNECT_BUSY_WAIT;
    let mut pause = Duration::from_millis(1);
    loop {
        // No liveness ping before each checkout: the database is a local
        // file, and the ping is a round trip to the connection's worker
        // thread.
        let opened = SqlitePoolOptions::new()
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await;
        match opened {
            Ok(pool) => return Ok(pool),
            Err(e) if is_busy(&e) && Instant::now() < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(Error::storage("connect", e)),
        }
    }
}

/// Closes `conn` before returning: the close runs on the connection's
/// worker thread (no async runtime needed), and merges the WAL into the
/// database file if no other connection is open. Left to a background
/// close, a process that exits right after dropping the connection would
/// leave its last writes in the `-wal` file only.
pub(crate) fn close_now(conn: sqlx::SqliteConnection) {
    let _ = futures_executor::block_on(sqlx::Connection::close(conn));
}

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
            pool.begin_with(begin).await.map_err(storage(op))
        }
        r => r.map_err(storage(op)),
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
