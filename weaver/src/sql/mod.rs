//! SQL plumbing owned once: the dialects, how a transaction starts and a
//! connection opens, and what a database's error codes mean. The savers,
//! the stores and the migrations use it; it uses none of them.

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod error;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

/// A database weaver's schema is written for: the SQL of
/// [`script()`](crate::migrate::script()).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// SQLite (3.35 or later: the savers write `RETURNING`).
    Sqlite,
    /// PostgreSQL (tested on version 15).
    Postgres,
}

/// Whether `name` is `[A-Za-z_][A-Za-z0-9_]*` and at most 63 bytes (the
/// PostgreSQL identifier limit): the only names weaver ever puts into SQL
/// text (metadata keys, schema names).
pub(crate) fn is_plain_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 63
}

/// How a saver or store sends its statements to the database.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Pooling {
    /// Straight to the database (or through a pooler in session mode):
    /// named prepared statements, cached on each connection.
    #[default]
    Session,
    /// Through a pooler in transaction mode (PgBouncer, Supavisor, RDS
    /// Proxy), which may give each transaction another server session:
    /// unnamed statements only, each inside a transaction, so nothing a
    /// statement needs is left on a session between two transactions.
    Transaction,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl Pooling {
    /// Whether statements are prepared under a name and kept (`sqlx`'s
    /// `persistent`).
    pub(crate) fn persistent(self) -> bool {
        self == Pooling::Session
    }
}
