//! The SQL text of every store query: the same on SQLite and PostgreSQL,
//! with the table's schema prefix rendered once per store.

use crate::store::namespace::descendants;

/// The SQL text of every store query, with the table prefix rendered.
#[derive(Clone)]
pub(crate) struct Queries {
    pub get: String,
    pub delete_expired_one: String,
    pub refresh: String,
    pub upsert: String,
    pub delete: String,
    pub sweep: String,
    /// Search/list queries by (prefix kind): everything, or under a prefix.
    pub scan_all: String,
    pub scan_prefix: String,
    pub page_all: String,
    pub page_prefix: String,
    pub namespaces_all: String,
    pub namespaces_prefix: String,
}

impl std::fmt::Debug for Queries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queries")
            .field("get", &self.get)
            .finish_non_exhaustive()
    }
}

pub(crate) const COLUMNS: &str =
    "namespace, key, value, index_text, embedding, created_at, updated_at, expires_at, ttl_micros";

impl Queries {
    pub(crate) fn new(prefix: &str) -> Self {
        let t = format!("{prefix}weaver_store_items");
        // $1 = now; $2..$4 = the prefix's exact namespace and descendant range.
        let live = "(expires_at IS NULL OR expires_at > $1)";
        let under = "(namespace = $2 OR (namespace >= $3 AND namespace < $4))";
        Queries {
            get: format!("SELECT {COLUMNS} FROM {t} WHERE namespace = $1 AND key = $2"),
            delete_expired_one: format!(
                "DELETE FROM {t} WHERE namespace = $1 AND key = $2 AND expires_at <= $3"
            ),
            // $1 = the new expiry, computed (saturating) as the record's.
            refresh: format!(
                "UPDATE {t} SET expires_at = $1
                  WHERE namespace = $2 AND key = $3 AND ttl_micros IS NOT NULL"
            ),
            upsert: format!(
                "INSERT INTO {t} ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8)
                 ON CONFLICT (namespace, key) DO UPDATE SET
                    value = excluded.value,
                    index_text = excluded.index_text,
                    embedding = excluded.embedding,
                    created_at = CASE WHEN weaver_store_items.expires_at <= excluded.updated_at
                                        OR weaver_store_items.created_at > excluded.updated_at
                                      THEN excluded.created_at
                                      ELSE weaver_store_items.created_at END,
                    updated_at = excluded.updated_at,
                    expires_at = excluded.expires_at,
                    ttl_micros = excluded.ttl_micros
                 RETURNING created_at, updated_at"
            ),
            delete: format!("DELETE FROM {t} WHERE namespace = $1 AND key = $2"),
            sweep: format!("DELETE FROM {t} WHERE expires_at IS NOT NULL AND expires_at <= $1"),
            scan_all: format!("SELECT {COLUMNS} FROM {t} WHERE {live}"),
            scan_prefix: format!("SELECT {COLUMNS} FROM {t} WHERE {under} AND {live}"),
            page_all: format!(
                "SELECT {COLUMNS} FROM {t} WHERE {live} ORDER BY namespace, key LIMIT $2 OFFSET $3"
            ),
            page_prefix: format!(
                "SELECT {COLUMNS} FROM {t} WHERE {under} AND {live}
                  ORDER BY namespace, key LIMIT $5 OFFSET $6"
            ),
            namespaces_all: format!("SELECT DISTINCT namespace FROM {t} WHERE {live}"),
            namespaces_prefix: format!(
                "SELECT DISTINCT namespace FROM {t} WHERE {under} AND {live}"
            ),
        }
    }
}

/// The three binds of a non-empty dotted prefix: itself and its
/// descendants' range.
pub(crate) fn prefix_binds(prefix: &str) -> (String, String, String) {
    let (lo, hi) = descendants(prefix);
    (prefix.to_owned(), lo, hi)
}
