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

/// A SQLite result code (`"5"`, `"517"`: the extended code, in decimal);
/// `None` for a PostgreSQL SQLSTATE, five characters long, some of them
/// digits only (`42501`, `22021`), which are no SQLite codes.
fn sqlite_code(code: &str) -> Option<i32> {
    if code.len() >= 5 {
        return None;
    }
    code.parse().ok()
}

/// SQLite `SQLITE_BUSY`, any extended code: a lock was not granted.
#[cfg(feature = "sqlite")]
pub(crate) fn is_busy(e: &sqlx::Error) -> bool {
    code(e)
        .and_then(|c| sqlite_code(&c))
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
        other => sqlite_code(other).is_some_and(|n| matches!(n & 0xff, 5 | 6)),
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

/// The database refused a statement, so that its transaction wrote
/// nothing: a database error, not a lost connection. Any other failure
/// (the connection gone, an I/O error, a timeout) may have come after a
/// commit, so nothing may be assumed of what it wrote.
pub(crate) fn refused(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(_)) && !connection_lost(e)
}

/// Whether `e` says the connection itself is gone: an I/O or protocol
/// failure, or PostgreSQL's connection-exception (`08…`) or shutdown
/// (`57P01`–`57P03`) codes. The session is cut off with it: a transaction
/// it held is rolled back, but a commit it sent may have been applied.
pub(crate) fn connection_lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("08") || matches!(&*c, "57P01" | "57P02" | "57P03")),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::{is_lock_timeout, refused};

    /// A database error with the code `0`.
    #[derive(Debug)]
    struct Coded(&'static str);

    impl std::fmt::Display for Coded {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "error {}", self.0)
        }
    }

    impl std::error::Error for Coded {}

    impl sqlx::error::DatabaseError for Coded {
        fn message(&self) -> &str {
            self.0
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn coded(code: &'static str) -> sqlx::Error {
        sqlx::Error::Database(Box::new(Coded(code)))
    }

    /// SQLite's busy and locked codes (extended ones too) and PostgreSQL's
    /// lock and statement timeouts are lock timeouts; PostgreSQL codes made
    /// of digits that end like SQLite's (`42501`, `22021`, `22022`) are not.
    #[test]
    fn lock_timeouts_are_told_from_other_codes() {
        for code in ["5", "6", "261", "517", "262", "55P03", "57014"] {
            assert!(is_lock_timeout(&coded(code)), "{code}");
        }
        for code in ["42501", "22021", "22022", "19", "2067", "23505"] {
            assert!(!is_lock_timeout(&coded(code)), "{code}");
        }
    }

    /// Only a database's refusal says a statement wrote nothing: a lost
    /// connection (an I/O error, PostgreSQL's `08…` and shutdown codes)
    /// may have come after its commit.
    #[test]
    fn only_a_refusal_says_nothing_was_written() {
        for code in ["23505", "5", "40001", "23503"] {
            assert!(refused(&coded(code)), "{code}");
        }
        for code in ["08006", "57P01"] {
            assert!(!refused(&coded(code)), "{code}");
        }
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(!refused(&sqlx::Error::Io(reset)));
        assert!(!refused(&sqlx::Error::PoolTimedOut));
    }
}
