//! What a database error means to weaver: storage failures with their
//! operation, and the few error codes a caller acts on.

use crate::error::Error;

/// Wraps a database error as the [`Error::Storage`] of `op`.
pub(crate) fn storage(op: &'static str) -> impl FnOnce(sqlx::Error) -> Error {
    move |e| Error::storage(op, e)
}

/// The database's error code, if `e` is a database error that has one.
fn code(e: &sqlx::Error) -> Option<std::borrow::Cow<'_, str>> {
    e.as_database_error().and_then(|d| d.code())
}

/// A unique constraint refused the row.
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|d| d.is_unique_violation())
}

/// SQLite `SQLITE_BUSY`, any extended code: a lock was not granted.
#[cfg(feature = "sqlite")]
pub(crate) fn is_busy(e: &sqlx::Error) -> bool {
    code(e)
        .and_then(|c| c.parse::<i32>().ok())
        .is_some_and(|n| n & 0xff == 5)
}

/// SQLite `SQLITE_TOOBIG`: a string or blob longer than the connection
/// allows.
pub(crate) fn is_too_big(e: &sqlx::Error) -> bool {
    code(e).is_some_and(|c| c.as_ref() == "18")
}

/// The database gave up waiting for a lock: SQLite `SQLITE_BUSY` or
/// `SQLITE_LOCKED` (any extended code) after the busy timeout, PostgreSQL
/// `lock_not_available` or a statement timeout.
pub(crate) fn is_lock_timeout(e: &sqlx::Error) -> bool {
    let Some(code) = code(e) else {
        return false;
    };
    match code.as_ref() {
        "55P03" | "57014" => true,
        other => other
            .parse::<i32>()
            .is_ok_and(|n| matches!(n & 0xff, 5 | 6)),
    }
}

/// The database lacks a table or column a query names: PostgreSQL
/// `undefined_table` / `undefined_column`, SQLite's "no such table", "no
/// such column" and "has no column named" (SQLite gives these the generic
/// error code).
pub(crate) fn is_schema_missing(e: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    let Some(db) = e
        .downcast_ref::<sqlx::Error>()
        .and_then(|e| e.as_database_error())
    else {
        return false;
    };
    if db.code().is_some_and(|c| c == "42P01" || c == "42703") {
        return true;
    }
    let message = db.message();
    message.starts_with("no such table")
        || message.starts_with("no such column")
        || message.contains("has no column named")
}

/// Whether `e` is a PostgreSQL `deadlock_detected` (40P01) or
/// `serialization_failure` (40001): the database rolled the transaction
/// back, nothing of it was stored, and running it again can succeed.
pub(crate) fn is_transient(e: &Error) -> bool {
    let Error::Storage { source, .. } = e else {
        return false;
    };
    source
        .downcast_ref::<sqlx::Error>()
        .and_then(code)
        .is_some_and(|c| c == "40P01" || c == "40001")
}

/// Whether `e` says the connection itself is gone: an I/O or protocol
/// failure, or PostgreSQL's connection-exception (`08…`) or shutdown
/// (`57P01`–`57P03`) codes. What failed that way never reached the database
/// or was cut off with the session.
pub(crate) fn connection_lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("08") || matches!(&*c, "57P01" | "57P02" | "57P03")),
        _ => false,
    }
}
