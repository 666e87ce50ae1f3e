//! What the SQL saver needs from a database, filled in by SQLite and
//! PostgreSQL: how a transaction starts, how a thread's writers take turns,
//! how the schema is checked, and the few typed calls into `sqlx` (a query
//! with its arguments, a column of a row), so that the saver is written
//! once as generic code over [`Backend`].
//!
//! Bounds such as "`&str` encodes for this database" cannot be implied by a
//! trait, so the generic code never names `sqlx`'s encode and decode
//! traits: the backends, written for one database each, do.

use std::future::Future;

use sqlx::{Database, Decode, Encode, Pool, Row, Transaction, Type};

use super::Verified;
use super::group::Arg;
use crate::error::Result;
use crate::sql::{Dialect, Pooling};

/// A column of a result row: by name, or by position (a scalar query's
/// unnamed column).
#[derive(Debug, Clone, Copy)]
pub enum Col {
    Named(&'static str),
    At(usize),
}

impl From<&'static str> for Col {
    fn from(name: &'static str) -> Self {
        Col::Named(name)
    }
}

impl From<usize> for Col {
    fn from(at: usize) -> Self {
        Col::At(at)
    }
}

/// A database the SQL saver runs on. Sealed: this module's private path
/// keeps it implemented by `sqlx::Sqlite` and `sqlx::Postgres` only.
pub trait Backend: Database {
    /// Which SQL the saver's queries are rendered in.
    const DIALECT: Dialect;
    /// The saver's public name, for `Debug`.
    const SAVER: &'static str;

    /// Starts a write transaction (SQLite: holding the database write lock).
    fn begin_write(
        pool: &Pool<Self>,
        op: &'static str,
    ) -> impl Future<Output = Result<Transaction<'static, Self>>> + Send;

    /// Starts a write transaction whose reads all see one snapshot.
    fn begin_write_snapshot(
        pool: &Pool<Self>,
        op: &'static str,
    ) -> impl Future<Output = Result<Transaction<'static, Self>>> + Send;

    /// Starts a transaction for reads that must see one snapshot.
    fn begin_snapshot(
        pool: &Pool<Self>,
        op: &'static str,
    ) -> impl Future<Output = Result<Transaction<'static, Self>>> + Send;

    /// Makes writers that take "the next free" commit order on one thread
    /// and namespace take turns, inside the transaction on `conn`.
    fn lock_thread(
        conn: &mut Self::Connection,
        pooling: Pooling,
        thread_id: &str,
        ns: &str,
        op: &'static str,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Checks now that the checkpoint schema (in PostgreSQL schema `schema`,
    /// else where the connection looks) is at the version this build needs.
    fn check_schema(
        pool: &Pool<Self>,
        schema: Option<&str>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// What the saver learns about the database once its schema is found
    /// migrated.
    fn inspect(pool: &Pool<Self>) -> impl Future<Output = Result<Verified>> + Send;

    /// Closes the saver's own connection when the saver goes away (a drop
    /// cannot await).
    fn close_on_drop(conn: Self::Connection);

    /// Runs `sql` with `args`; returns the rows it changed. With
    /// [`Pooling::Transaction`] the statement is unnamed, and one run
    /// outside a transaction runs inside one of its own (the `fetch`
    /// calls too).
    fn execute<'a>(
        conn: &mut Self::Connection,
        pooling: Pooling,
        sql: String,
        args: impl IntoIterator<Item = Arg<'a>>,
    ) -> impl Future<Output = std::result::Result<u64, sqlx::Error>> + Send;

    /// Runs `sql` with `args`; returns its rows.
    fn fetch_all<'a>(
        conn: &mut Self::Connection,
        pooling: Pooling,
        sql: String,
        args: impl IntoIterator<Item = Arg<'a>>,
    ) -> impl Future<Output = std::result::Result<Vec<Self::Row>, sqlx::Error>> + Send;

    /// Runs `sql` with `args`; returns its first row, if any.
    fn fetch_optional<'a>(
        conn: &mut Self::Connection,
        pooling: Pooling,
        sql: String,
        args: impl IntoIterator<Item = Arg<'a>>,
    ) -> impl Future<Output = std::result::Result<Option<Self::Row>, sqlx::Error>> + Send;

    /// A text column.
    fn text(row: &Self::Row, col: Col) -> std::result::Result<&str, sqlx::Error>;
    /// A text column that may be NULL.
    fn opt_text(row: &Self::Row, col: Col) -> std::result::Result<Option<&str>, sqlx::Error>;
    /// A 64-bit integer column.
    fn int(row: &Self::Row, col: Col) -> std::result::Result<i64, sqlx::Error>;
    /// A 32-bit integer column (PostgreSQL types a literal `0` so).
    fn int32(row: &Self::Row, col: Col) -> std::result::Result<i32, sqlx::Error>;
    /// A bytes column.
    fn bytes(row: &Self::Row, col: Col) -> std::result::Result<&[u8], sqlx::Error>;
    /// A bytes column that may be NULL.
    fn opt_bytes(row: &Self::Row, col: Col) -> std::result::Result<Option<&[u8]>, sqlx::Error>;
}

/// A Rust type a column of a `D` row reads as.
pub(crate) trait Column<'r, D: Backend>: Sized {
    fn read(row: &'r D::Row, col: Col) -> std::result::Result<Self, sqlx::Error>;
}

impl<'r, D: Backend> Column<'r, D> for &'r str {
    fn read(row: &'r D::Row, col: Col) -> std::result::Result<Self, sqlx::Error> {
        D::text(row, col)
    }
}

impl<'r, D: Backend> Column<'r, D> for String {
    fn read(row: &'r D::Row, col: Col) -> std::result::Result<Self, sqlx::Error> {
        D::text(row, col).map(str::to_owned)
    }
}

impl<'r, D: Backend> Column<'r, D> for Option<&'r str> {
    fn read(row: &'r D::Row, col: Col) -> std::result::Result<Self, sqlx::Error> {
        D::opt_text(row, col)
    }
}

impl<'r, D: Backend> Column<'r, D> for Option<String> {
    fn read(row: &'r D::Row, col: Col) -> std::result::Result<Self, sqlx::Error> {
        D::opt_text(row, col).map(|t| t.map(str::to_owned))
    }
}

impl<'r, D: Backend> Column<'r, D> for i64 {
    fn read(row: &'r D::Row, col: Col) -> std::result::Result<Self, sqlx::Error> {
        D::int(row, col)
    }
}

impl<'r, D: Backend> Column<'r, D> for i32 {
    fn read(row: &'r D::Row, col: Col) -> std::result::Result<Self, sqlx::Error> {
        D::int32(row, col)
    }
}

impl<'r, D: Backend> Column<'r, D> for &'r [u8] {
    fn read(row: &'r D::Row, col: Col) -> std::result::Result<Self, sqlx::Error> {
        D::bytes(row, col)
    }
}

impl<'r, D: Backend> Column<'r, D> for Option<&'r [u8]> {
    fn read(row: &'r D::Row, col: Col) -> std::result::Result<Self, sqlx::Error> {
        D::opt_bytes(row, col)
    }
}

impl<'r, D: Backend> Column<'r, D> for Vec<u8> {
    fn read(row: &'r D::Row, col: Col) -> std::result::Result<Self, sqlx::Error> {
        D::bytes(row, col).map(<[u8]>::to_vec)
    }
}

/// A query of `sql` with `args` bound in order, for a database whose
/// encoders take the four argument kinds (the backends' own code, where
/// these bounds are checked for one database).
pub(crate) fn bound<'a, DB>(
    sql: String,
    args: impl IntoIterator<Item = Arg<'a>>,
) -> sqlx::query::Query<'static, DB, DB::Arguments>
where
    DB: Database,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> Option<&'t str>: Encode<'t, DB> + Type<DB>,
    for<'t> &'t [u8]: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
{
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
    for a in args {
        query = match a {
            Arg::Text(s) => query.bind(s),
            Arg::OptText(s) => query.bind(s),
            Arg::Int(i) => query.bind(i),
            Arg::Bytes(b) => query.bind(b),
        };
    }
    query
}

/// Column `col` of `row` as `T`, for a backend's own code.
pub(crate) fn column<'r, R, T>(row: &'r R, col: Col) -> std::result::Result<T, sqlx::Error>
where
    R: Row,
    T: Decode<'r, R::Database> + Type<R::Database>,
    usize: sqlx::ColumnIndex<R>,
    for<'n> &'n str: sqlx::ColumnIndex<R>,
{
    match col {
        Col::Named(name) => row.try_get(name),
        Col::At(at) => row.try_get(at),
    }
}
