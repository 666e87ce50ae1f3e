//! The database a command runs on: opened from its URL, with the
//! checkpointer (and encryption keys) the commands read through.

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, PgConnection, PgPool, SqlitePool};
use weaver::checkpoint::{PostgresSaver, SqliteSaver};
use weaver::codec::{EncryptedCodec, EncryptionKey, JsonCodec};
use weaver::migrate::{Adapter, Dialect, MigrationTarget, PgSchema};
use weaver::{Checkpointer, Error, Result};

use super::CONNECT_TIMEOUT;

pub(crate) fn adapter(name: &str) -> std::result::Result<Adapter, String> {
    match name {
        "checkpoint" => Ok(Adapter::Checkpoint),
        "store" => Ok(Adapter::Store),
        other => Err(format!("unknown adapter `{other}` (checkpoint or store)")),
    }
}

/// How an encrypted database is read and written: its keys, and the
/// metadata keys its application stores in the clear (what a rewritten
/// record keeps in the clear).
pub(crate) struct Sealing {
    pub keys: Vec<EncryptionKey>,
    pub plaintext: Vec<String>,
}

/// An open database.
pub(crate) enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool, Option<String>),
}

impl Db {
    pub(crate) async fn open(url: &str, schema: Option<String>) -> Result<Db> {
        if url.starts_with("sqlite:") {
            if schema.is_some() {
                return Err(Error::invalid_argument("--schema is for PostgreSQL only"));
            }
            // Never creates a file (inspecting a mistyped path fails) nor
            // changes the journal mode; waits for a busy writer as the
            // saver does.
            let options = SqliteConnectOptions::from_str(url)
                .map_err(|e| Error::invalid_argument(format!("bad SQLite url `{url}`: {e}")))?
                .create_if_missing(false)
                .busy_timeout(std::time::Duration::from_secs(30));
            let pool = SqlitePool::connect_with(options)
                .await
                .map_err(|e| Error::storage("open the SQLite database", e))?;
            Ok(Db::Sqlite(pool))
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            let op = "connect to PostgreSQL";
            let options = PgConnectOptions::from_str(url)
                .map_err(|_| Error::invalid_argument("bad PostgreSQL url `postgres://…`"))?;
            // One attempt first, so that a refused connection (a server
            // down, a wrong port) is reported as such at once, rather than
            // retried until the pool's timeout says only that it timed out.
            let first = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options))
                .await
                .map_err(|_| Error::storage(op, format!("no answer within {CONNECT_TIMEOUT:?}")))?
                .map_err(|e| Error::storage(op, e))?;
            let _ = first.close().await;
            let pool = PgPoolOptions::new()
                .acquire_timeout(CONNECT_TIMEOUT)
                .connect_with(options)
                .await
                .map_err(|e| Error::storage(op, e))?;
            Ok(Db::Postgres(pool, schema))
        } else {
            // Only the scheme: the rest may hold a password.
            // A scheme mistyped without `://` may still be followed by
            // `user:password@`: only what follows the `@` is shown.
            let shown = match (url.split_once("://"), url.rsplit_once('@')) {
                (Some((scheme, _)), _) => format!("{scheme}://…"),
                (None, Some((_, host))) => format!("…@{host}"),
                (None, None) => url.to_owned(),
            };
            Err(Error::invalid_argument(format!(
                "`{shown}` is neither a sqlite:// nor a postgres:// URL"
            )))
        }
    }

    pub(crate) fn dialect(&self) -> Dialect {
        match self {
            Db::Sqlite(_) => Dialect::Sqlite,
            Db::Postgres(..) => Dialect::Postgres,
        }
    }

    /// A checkpointer on this database, sealing as `sealing` says if given.
    pub(crate) fn checkpointer(&self, sealing: Option<Sealing>) -> Result<Checkpointer> {
        let codec = sealing
            .map(|s| EncryptedCodec::new(JsonCodec, s.keys)?.with_plaintext_metadata(s.plaintext))
            .transpose()?;
        Ok(match self {
            Db::Sqlite(pool) => {
                let saver = SqliteSaver::new(pool.clone());
                match codec {
                    Some(c) => Checkpointer::new(saver.with_codec(c)),
                    None => Checkpointer::new(saver),
                }
            }
            Db::Postgres(pool, schema) => {
                let mut saver = PostgresSaver::new(pool.clone());
                if let Some(s) = schema {
                    saver = saver.with_prefix(s)?;
                }
                match codec {
                    Some(c) => Checkpointer::new(saver.with_codec(c)),
                    None => Checkpointer::new(saver),
                }
            }
        })
    }

    pub(crate) async fn with_target<T>(
        &self,
        f: impl AsyncFnOnce(&dyn MigrationTarget) -> Result<T>,
    ) -> Result<T> {
        match self {
            Db::Sqlite(pool) => f(pool).await,
            Db::Postgres(pool, None) => f(pool).await,
            Db::Postgres(pool, Some(s)) => f(&PgSchema::new(pool, s)?).await,
        }
    }

    pub(crate) async fn close(self) {
        match self {
            Db::Sqlite(pool) => pool.close().await,
            Db::Postgres(pool, _) => pool.close().await,
        }
    }
}

/// Parses `id=<64 hex digits>,…` (oldest first). An error names the entry
/// by its position, and by its id only when that cannot be key material:
/// a key pasted without its id, or with id and key swapped, never reaches
/// the message (which ends up on a terminal or in a log).
pub(crate) fn parse_keys(var: &str, text: &str) -> Result<Vec<EncryptionKey>> {
    let entries: Vec<&str> = text.split(',').map(str::trim).collect();
    let n = entries.len();
    entries
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let split = entry.split_once('=');
            let bad = |why: &str| {
                let named = match split {
                    Some((id, _)) if !hex_like(id) => format!(" (`{id}`)"),
                    _ => String::new(),
                };
                Error::invalid_argument(format!("{var}: key {} of {n}{named}: {why}", i + 1))
            };
            let (id, hex) = split.ok_or_else(|| bad("expected id=<64 hex digits>"))?;
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad("the key must be 64 hex digits (32 bytes)"));
            }
            let mut key = [0u8; 32];
            for (i, byte) in key.iter_mut().enumerate() {
                *byte =
                    u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad("not hex"))?;
            }
            EncryptionKey::new(id, key)
        })
        .collect()
}

/// Whether `text` could be (part of) a key written in hex: 16 or more hex
/// digits.
fn hex_like(text: &str) -> bool {
    text.len() >= 16 && text.bytes().all(|b| b.is_ascii_hexdigit())
}
