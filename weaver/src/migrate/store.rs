//! Schema versions of the memory-store adapter (`weaver_store_items`), one
//! static list per database.
//!
//! `{p}` in a statement is replaced by the table prefix (empty, or a quoted
//! PostgreSQL schema followed by a dot).
//!
//! Version 1: one row per item, primary key `(namespace, key)` where
//! `namespace` is the dotted form (`users.u1.memories`). The primary-key
//! index serves get, and prefix search as an index range (`namespace = p`
//! or `p.` ≤ `namespace` < `p/`), so a search never reads rows outside its
//! prefix. Both columns compare byte-wise (SQLite `BINARY`, PostgreSQL
//! `COLLATE "C"`), the order every store backend uses. Times are
//! microseconds since the Unix epoch; `value` is JSON text (exact round
//! trip); `index_text` is the text indexed for queries (`NULL`: not
//! searchable); `embedding` is little-endian `f32`s; `ttl_micros` is kept
//! for refresh-on-read, and `expires_at` has a partial index for sweeps.

use super::Migration;

pub(crate) static SQLITE: &[Migration] = &[Migration {
    version: 1,
    up: &[
        "CREATE TABLE {p}weaver_store_items (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            index_text TEXT,
            embedding BLOB,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            expires_at INTEGER,
            ttl_micros INTEGER,
            PRIMARY KEY (namespace, key)
        )",
        "CREATE INDEX {p}weaver_store_items_expires_at
            ON weaver_store_items (expires_at) WHERE expires_at IS NOT NULL",
    ],
    down: &["DROP TABLE {p}weaver_store_items"],
}];

pub(crate) static POSTGRES: &[Migration] = &[Migration {
    version: 1,
    up: &[
        "CREATE TABLE {p}weaver_store_items (
            namespace TEXT COLLATE \"C\" NOT NULL,
            key TEXT COLLATE \"C\" NOT NULL,
            value TEXT NOT NULL,
            index_text TEXT,
            embedding BYTEA,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            expires_at BIGINT,
            ttl_micros BIGINT,
            PRIMARY KEY (namespace, key)
        )",
        "CREATE INDEX weaver_store_items_expires_at
            ON {p}weaver_store_items (expires_at) WHERE expires_at IS NOT NULL",
    ],
    down: &["DROP TABLE {p}weaver_store_items"],
}];
