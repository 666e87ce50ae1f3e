//! The SQL savers ([`SqliteSaver`], [`PostgresSaver`]): one implementation of
//! the [`Saver`](super::Saver) contract over `sqlx`, rendered for each database.
//!
//! Both share the logical schema of [`crate::migrate`] (version 3), run every
//! multi-row write in one transaction, order by `commit_order` only, list
//! history with one query (checkpoints and their pending writes together,
//! `LIMIT` in SQL), and pass payloads through a [`Codec`].
//!
//! A group of writes (what [`put_ops`](super::Saver::put_ops) receives under
//! [`Durability::Async`](crate::Durability::Async), or a
//! [`put_many`](super::Saver::put_many) batch) is stored by one query: on
//! SQLite `BEGIN IMMEDIATE`, multi-row inserts checked by row-count guards,
//! `COMMIT`, sent to the connection's worker thread at once; on PostgreSQL
//! one statement of data-modifying CTEs, one round trip. If anything is
//! amiss (a taken commit order, a missing parent or checkpoint), that query
//! writes nothing and the group is stored again statement by statement in a
//! transaction, which reports the precise error. Only a lock wait that timed
//! out is reported at once, since the second path would wait again.

use std::collections::HashMap;
use std::sync::Arc;

use super::CheckpointCodec;
use super::types::{
    CheckpointMetadata, CheckpointRef, CheckpointTuple, ListFilter, NewCheckpoint, PendingWrite,
};
use crate::codec::{
    Codec, JsonCodec, MAX_RECORD_BYTES, RecordContext, check_json_depth, check_size,
};
use crate::error::{Error, Result};
use crate::sql::Dialect;
use crate::sql::error::is_transient;
pub(crate) use packed::RawCheckpoint;

mod backend;
mod copy;
mod group;
mod hot;
mod packed;
#[cfg(feature = "postgres")]
mod postgres;
mod prune;
mod read;
mod saver;
mod spin;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;
mod write;

#[cfg(feature = "postgres")]
pub use postgres::PostgresSaver;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteSaver;

/// Settings shared by both SQL savers.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) codec: Arc<dyn Codec>,
    pub(crate) shallow: bool,
    pub(crate) max_record_bytes: usize,
    /// How long a call polls its reply before letting its thread sleep
    /// (zero unless the user opts in with `with_spin`).
    pub(crate) spin: std::time::Duration,
    pub(crate) q: Arc<Queries>,
    /// Set by the first operation, once the schema is found migrated.
    pub(crate) verified: Arc<tokio::sync::OnceCell<Verified>>,
}

/// What a saver learned about its database when it first checked it.
#[derive(Debug, Clone, Copy)]
pub struct Verified {
    /// Listings may come back packed into one row ([`packed`]): SQLite with
    /// UTF-8 text. In a UTF-16 database SQLite's text functions work on
    /// UTF-16, so the frames' byte lengths and separators would not be what
    /// [`packed::unpack`] reads; such a database is listed row by row.
    pub packed_listing: bool,
}

impl Settings {
    pub(crate) fn new(dialect: Dialect, prefix: &str) -> Self {
        Settings {
            codec: Arc::new(JsonCodec),
            shallow: false,
            max_record_bytes: MAX_RECORD_BYTES,
            spin: std::time::Duration::ZERO,
            q: Arc::new(Queries::new(dialect, prefix)),
            verified: Arc::new(tokio::sync::OnceCell::new()),
        }
    }

    /// These settings for tables named after `prefix`, checked afresh.
    #[cfg(feature = "postgres")]
    pub(crate) fn with_prefix(self, dialect: Dialect, prefix: &str) -> Self {
        Settings {
            q: Arc::new(Queries::new(dialect, prefix)),
            verified: Arc::new(tokio::sync::OnceCell::new()),
            ..self
        }
    }
}

/// SQL text rendered once per saver (table prefix and dialect applied).
#[derive(Debug)]
pub(crate) struct Queries {
    pub(crate) dialect: Dialect,
    pub(crate) cps: String,
    pub(crate) writes: String,
    pub(crate) head: String,
    pub(crate) taken: String,
    pub(crate) exists: String,
    pub(crate) order_of: String,
    pub(crate) insert_cp: String,
    pub(crate) insert_cp_child: String,
    pub(crate) delete_writes_below: String,
    pub(crate) delete_cps_below: String,
    pub(crate) thread_has_any: String,
    pub(crate) thread_ns_has_any: String,
    pub(crate) thread_rows: String,
    pub(crate) thread_writes: String,
    pub(crate) delete_writes: String,
    /// Deletes the writes of a thread whose checkpoint is not stored.
    pub(crate) delete_orphan_writes: String,
    /// Deletes the writes of a thread's namespace whose checkpoint is not stored.
    pub(crate) delete_orphan_ns_writes: String,
    pub(crate) delete_cps: String,
    pub(crate) namespaces_of_thread: String,
    /// PostgreSQL: locks the checkpoints of `(thread, ns)` below a commit
    /// order, which a prune is about to delete (`None` on SQLite, whose
    /// writers take turns).
    pub(crate) lock_pruned: Option<String>,
    /// PostgreSQL: locks every checkpoint of a thread about to be deleted,
    /// so that a child inserted meanwhile has committed (and is deleted
    /// too) or waits and finds its parent gone (`None` on SQLite).
    pub(crate) lock_thread_rows: Option<String>,
    pub(crate) nth_newest: String,
    pub(crate) orphans_from: String,
    pub(crate) thread_count: String,
    pub(crate) id_at_order: String,
    pub(crate) list_threads: String,
    pub(crate) lineage: String,
    pub(crate) lineage_writes: String,
    pub(crate) set_payload: String,
    /// The commit order of a checkpoint, locking it on PostgreSQL against
    /// another [`WriteCheck`](crate::checkpoint::WriteCheck) of it until the
    /// transaction ends (SQLite's writers take turns).
    pub(crate) lock_checked: String,
    /// One pending write of a checkpoint, by task and index.
    pub(crate) one_write: String,
    pub(crate) meta_out: &'static str,
}

impl Queries {
    fn new(dialect: Dialect, p: &str) -> Self {
        let cps = format!("{p}weaver_checkpoints");
        let writes = format!("{p}weaver_checkpoint_writes");
        let (meta_in, meta_out) = match dialect {
            Dialect::Sqlite => ("$6", "metadata"),
            Dialect::Postgres => ("CAST($6 AS JSONB)", "CAST(metadata AS TEXT)"),
        };
        // PostgreSQL runs a child's insert and a prune side by side (READ
        // COMMITTED): the insert share-locks the parent it found, and a
        // prune locks what it deletes before it reads what it must rebuild,
        // so a child either waits for the prune and finds its parent gone,
        // or commits first and is seen (and rebuilt) by the prune. SQLite
        // serializes writers on its own.
        let key_share = match dialect {
            Dialect::Sqlite => "",
            Dialect::Postgres => " FOR KEY SHARE",
        };
        let order_of = format!(
            "SELECT commit_order FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3"
        );
        // A write row (`w`) whose checkpoint is not stored.
        let no_checkpoint = format!(
            "NOT EXISTS (SELECT 1 FROM {cps} AS c WHERE c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)"
        );
        let older = format!(
            "SELECT checkpoint_id FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2 AND commit_order < $3"
        );
        // A parent commits before its child, so each step goes to a lower
        // commit order: damaged parent links that loop end the line (its
        // last record then names a parent the line lacks) instead of
        // repeating it up to the depth.
        let lineage_cte = format!(
            "WITH RECURSIVE lineage (checkpoint_id, parent_checkpoint_id, commit_order, depth) AS (
                SELECT checkpoint_id, parent_checkpoint_id, commit_order, 0 FROM {cps}
                 WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3
                UNION ALL
                SELECT c.checkpoint_id, c.parent_checkpoint_id, c.commit_order, l.depth + 1
                  FROM {cps} AS c JOIN lineage AS l ON c.checkpoint_id = l.parent_checkpoint_id
                 WHERE c.thread_id = $1 AND c.checkpoint_ns = $2 AND l.depth < $4
                   AND c.commit_order < l.commit_order)"
        );
        Queries {
            dialect,
            head: format!(
                "SELECT COALESCE(MAX(commit_order), 0) FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2"
            ),
            taken: format!(
                "SELECT commit_order FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2 AND (commit_order = $3 OR checkpoint_id = $4) LIMIT 1"
            ),
            exists: format!(
                "SELECT commit_order FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3"
            ),
            order_of: order_of.clone(),
            insert_cp: format!(
                "INSERT INTO {cps} (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata, commit_order) VALUES ($1, $2, $3, $4, $5, {meta_in}, $7)"
            ),
            insert_cp_child: format!(
                "INSERT INTO {cps} (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata, commit_order) SELECT $1, $2, $3, $4, $5, {meta_in}, $7 WHERE EXISTS (SELECT 1 FROM {cps} AS p WHERE p.thread_id = $1 AND p.checkpoint_ns = $2 AND p.checkpoint_id = $4 AND p.commit_order < $7{key_share})"
            ),
            delete_writes_below: format!(
                "DELETE FROM {writes} WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id IN ({older})"
            ),
            delete_cps_below: format!(
                "DELETE FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2 AND commit_order < $3"
            ),
            thread_has_any: format!("SELECT CAST(1 AS BIGINT) FROM {cps} WHERE thread_id = $1 LIMIT 1"),
            thread_ns_has_any: format!(
                "SELECT CAST(1 AS BIGINT) FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2 LIMIT 1"
            ),
            thread_rows: format!(
                "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, {meta_out} AS metadata, commit_order FROM {cps} WHERE thread_id = $1 ORDER BY checkpoint_ns, commit_order"
            ),
            thread_writes: format!(
                "SELECT checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, value FROM {writes} WHERE thread_id = $1"
            ),
            delete_writes: format!("DELETE FROM {writes} WHERE thread_id = $1"),
            delete_orphan_writes: format!(
                "DELETE FROM {writes} AS w WHERE w.thread_id = $1 AND {no_checkpoint}"
            ),
            delete_orphan_ns_writes: format!(
                "DELETE FROM {writes} AS w WHERE w.thread_id = $1 AND w.checkpoint_ns = $2 AND {no_checkpoint}"
            ),
            delete_cps: format!("DELETE FROM {cps} WHERE thread_id = $1"),
            namespaces_of_thread: format!(
                "SELECT DISTINCT checkpoint_ns FROM {cps} WHERE thread_id = $1 ORDER BY checkpoint_ns"
            ),
            lock_thread_rows: match dialect {
                Dialect::Sqlite => None,
                Dialect::Postgres => Some(format!(
                    "SELECT 1 FROM {cps} WHERE thread_id = $1 ORDER BY checkpoint_ns, commit_order FOR UPDATE"
                )),
            },
            lock_pruned: match dialect {
                Dialect::Sqlite => None,
                Dialect::Postgres => Some(format!("{older} ORDER BY commit_order FOR UPDATE")),
            },
            nth_newest: format!(
                "SELECT commit_order FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2 ORDER BY commit_order DESC LIMIT 1 OFFSET $3"
            ),
            orphans_from: format!(
                "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, {meta_out} AS metadata, commit_order FROM {cps} AS c WHERE c.thread_id = $1 AND c.checkpoint_ns = $2 AND c.commit_order >= $3 AND NOT EXISTS (SELECT 1 FROM {cps} AS p WHERE p.thread_id = $1 AND p.checkpoint_ns = $2 AND p.checkpoint_id = c.parent_checkpoint_id AND p.commit_order >= $3) ORDER BY c.commit_order"
            ),
            thread_count: format!("SELECT COUNT(*) FROM {cps} WHERE thread_id = $1"),
            id_at_order: format!(
                "SELECT checkpoint_id FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2 AND commit_order = $3"
            ),
            list_threads: format!(
                "SELECT thread_id, COUNT(*) AS n FROM {cps} GROUP BY thread_id ORDER BY thread_id LIMIT $1 OFFSET $2"
            ),
            lineage: format!(
                "{lineage_cte}
                 SELECT c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint, {meta_out} AS metadata, c.commit_order, l.depth
                   FROM lineage AS l JOIN {cps} AS c
                     ON c.thread_id = $1 AND c.checkpoint_ns = $2 AND c.checkpoint_id = l.checkpoint_id
                  ORDER BY l.depth"
            ),
            lineage_writes: format!(
                "{lineage_cte}
                 SELECT w.checkpoint_id, w.task_id, w.idx, w.channel, w.task_path, w.value
                   FROM lineage AS l JOIN {writes} AS w
                     ON w.thread_id = $1 AND w.checkpoint_ns = $2 AND w.checkpoint_id = l.checkpoint_id"
            ),
            set_payload: format!(
                "UPDATE {cps} SET checkpoint = $4 WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3"
            ),
            lock_checked: match dialect {
                Dialect::Sqlite => order_of,
                Dialect::Postgres => format!("{order_of} FOR NO KEY UPDATE"),
            },
            one_write: format!(
                "SELECT channel, task_path, value FROM {writes} WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3 AND task_id = $4 AND idx = $5"
            ),
            meta_out,
            cps,
            writes,
        }
    }

    /// The condition that the metadata value at key `$key_param` equals the
    /// JSON text bound to `$value_param`, a number by its value (`1` matches
    /// `1.0`) as [`CheckpointMetadata::matches`](crate::checkpoint::CheckpointMetadata::matches) compares.
    fn metadata_clause(&self, key_param: usize, value_param: usize, value: FilterValue) -> String {
        match (self.dialect, value) {
            // SQL numbers compare by value; `->>` gives `true` as 1, hence
            // the type check.
            (Dialect::Sqlite, FilterValue::Integer) => format!(
                "(json_type(metadata -> ${key_param}) IN ('integer', 'real') AND (metadata ->> ${key_param}) = (${value_param} ->> '$'))"
            ),
            // `->>` reads a stored integer past i64 as the nearest float:
            // compared with a float that would be a match by rounding
            // (`u64::MAX` equal to 2^64), so such an integer matches a
            // float only by its exact text.
            (Dialect::Sqlite, FilterValue::Float { exact }) => {
                let exact = exact
                    .map(|e| format!(" OR (metadata -> ${key_param}) = json(${e})"))
                    .unwrap_or_default();
                format!(
                    "((json_type(metadata -> ${key_param}) IN ('integer', 'real') AND (metadata ->> ${key_param}) = (${value_param} ->> '$') AND NOT (json_type(metadata -> ${key_param}) = 'integer' AND typeof(metadata ->> ${key_param}) = 'real')){exact})"
                )
            }
            (Dialect::Sqlite, FilterValue::Json) => {
                format!("(metadata -> ${key_param}) = json(${value_param})")
            }
            // JSONB compares numbers by value, in decimal: a float is bound
            // as its shortest text, which for a whole float past 2^53 is not
            // its value (2^60 is `1.152921504606847e18`), so it also
            // matches the integer it equals exactly. (A float stored past
            // 2^53 is kept as that text, hence both.)
            (Dialect::Postgres, FilterValue::Float { exact: Some(e) }) => format!(
                "((metadata -> ${key_param}) = CAST(${value_param} AS JSONB) OR (metadata -> ${key_param}) = CAST(${e} AS JSONB))"
            ),
            (Dialect::Postgres, _) => {
                format!("(metadata -> ${key_param}) = CAST(${value_param} AS JSONB)")
            }
        }
    }

    /// A multi-row insert of `rows` pending writes of one checkpoint
    /// (`$1`..`$3` = thread, namespace, checkpoint id; then 5 parameters per
    /// row: task id, idx, channel, task path, value) that inserts nothing
    /// unless the checkpoint exists. `replace`: special writes overwrite,
    /// ordinary ones keep the first value (idempotent per task and index).
    pub(crate) fn insert_writes_multi(&self, rows: usize, replace: bool) -> String {
        let (cps, writes) = (&self.cps, &self.writes);
        let values = (0..rows)
            .map(|r| {
                let b = 4 + r * 5;
                format!(
                    "($1, $2, $3, ${}, ${}, ${}, ${}, ${})",
                    b,
                    b + 1,
                    b + 2,
                    b + 3,
                    b + 4
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let action = if replace {
            "DO UPDATE SET channel = excluded.channel, task_path = excluded.task_path, value = excluded.value"
        } else {
            "DO NOTHING"
        };
        // The checkpoint found is share-locked (PostgreSQL): a prune
        // deleting it concurrently deletes these writes with it, or they
        // wait for it and find the checkpoint gone.
        let key_share = match self.dialect {
            Dialect::Sqlite => "",
            Dialect::Postgres => " FOR KEY SHARE",
        };
        format!(
            "INSERT INTO {writes} (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, value)
             SELECT * FROM (VALUES {values}) AS v
              WHERE EXISTS (SELECT 1 FROM {cps} AS c WHERE c.thread_id = $1 AND c.checkpoint_ns = $2 AND c.checkpoint_id = $3{key_share})
             ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) {action}"
        )
    }

    /// The records in several commit-order ranges, unordered: one `UNION
    /// ALL` member per range, binding `$4k+1` its thread, `$4k+2` its
    /// namespace, `$4k+3` the end of the range (excluded) and `$4k+4` its
    /// start. Each member is one range of the commit-order index on both
    /// databases (an `OR` of the ranges is not: PostgreSQL without
    /// statistics scans every listed thread in full for it). The ranges must
    /// not overlap ([`merge_ranges`]), or rows come back twice.
    pub(crate) fn lineage_ranges(&self, ranges: usize) -> String {
        let members: Vec<String> = (0..ranges)
            .map(|k| {
                let p = 4 * k;
                format!(
                    "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, {} AS metadata, commit_order FROM {} WHERE thread_id = ${} AND checkpoint_ns = ${} AND commit_order < ${} AND commit_order >= ${}",
                    self.meta_out,
                    self.cps,
                    p + 1,
                    p + 2,
                    p + 3,
                    p + 4
                )
            })
            .collect();
        members.join(" UNION ALL ")
    }

    /// The listing of [`lineage_ranges`](Queries::lineage_ranges) as one row
    /// of checkpoint frames (column `packed`, see [`packed`]), where the
    /// database builds it (SQLite).
    pub(crate) fn packed_lineage_ranges(&self, ranges: usize) -> Option<String> {
        match self.dialect {
            Dialect::Sqlite => Some(packed::sqlite_lineage(&self.cps, ranges)),
            Dialect::Postgres => None,
        }
    }

    /// The common table expressions that select a listing's checkpoints:
    /// `c`, with `columns` of the checkpoint table (unqualified), at most
    /// `limit` rows of `where_` in `order` (and, for
    /// [`KeyOrder::NewestPerNamespace`], `ns` before it, the thread's
    /// namespaces). Starts with `WITH`.
    pub(crate) fn keys_ctes(
        &self,
        columns: &str,
        where_: &str,
        limit: i64,
        order: KeyOrder,
    ) -> String {
        let cps = &self.cps;
        match order {
            KeyOrder::Any | KeyOrder::Newest => {
                let order_by = if order == KeyOrder::Newest {
                    ORDER_NEWEST
                } else {
                    ""
                };
                format!(
                    "WITH c AS MATERIALIZED (
                        SELECT {columns} FROM {cps} WHERE {where_}
                         {order_by}
                         LIMIT {limit})"
                )
            }
            KeyOrder::NewestPerNamespace => {
                // Each step finds the next namespace with one index probe.
                let namespaces = format!(
                    "ns (n) AS (
                        SELECT MIN(checkpoint_ns) FROM {cps} WHERE thread_id = $1
                        UNION ALL
                        SELECT (SELECT MIN(checkpoint_ns) FROM {cps}
                                 WHERE thread_id = $1 AND checkpoint_ns > ns.n)
                          FROM ns WHERE ns.n IS NOT NULL)"
                );
                let per_namespace = match self.dialect {
                    // Read newest first through the index within each
                    // namespace; SQLite stops each once the limit is met.
                    Dialect::Sqlite => format!(
                        "SELECT {columns} FROM ns CROSS JOIN {cps}
                          WHERE checkpoint_ns = ns.n AND {where_}
                          {ORDER_NEWEST}
                          LIMIT {limit}"
                    ),
                    Dialect::Postgres => format!(
                        "SELECT k.* FROM ns CROSS JOIN LATERAL (
                            SELECT {columns} FROM {cps}
                             WHERE checkpoint_ns = ns.n AND {where_}
                             ORDER BY commit_order DESC
                             LIMIT {limit}) AS k
                          {ORDER_NEWEST}
                          LIMIT {limit}"
                    ),
                };
                format!("WITH RECURSIVE {namespaces}, c AS MATERIALIZED ({per_namespace})")
            }
        }
    }

    /// The listing of [`tuples`](Queries::tuples) as one row of frames
    /// (column `packed`, see [`packed`]), where the database builds it
    /// (SQLite).
    pub(crate) fn packed_tuples(
        &self,
        where_: &str,
        limit: i64,
        order: KeyOrder,
    ) -> Option<String> {
        match self.dialect {
            Dialect::Sqlite => Some(packed::sqlite_listing(
                &self.cps,
                &self.writes,
                &self.keys_ctes(
                    "thread_id, checkpoint_ns, checkpoint_id",
                    where_,
                    limit,
                    order,
                ),
            )),
            Dialect::Postgres => None,
        }
    }

    /// Builds the one-query listing: checkpoints matching `where_` (newest
    /// first per thread and namespace, at most `$limit`) and, in the same
    /// result, their pending writes. `kind` 0 rows are checkpoints, 1 writes.
    /// [`TupleAssembler::finish`] orders the rows.
    ///
    /// SQLite: only the keys are sorted (by the index, for the `LIMIT`); the
    /// rows, payloads included, come back unsorted, because SQLite's sorter
    /// copies (and spills to temporary files) every payload it sorts. The
    /// writes are looked up per listed checkpoint (`CROSS JOIN` fixes the
    /// loop order; the planner otherwise scans the whole writes table).
    /// PostgreSQL sorts TOAST pointers, not payloads, so there the whole
    /// result is sorted in SQL, which measured faster than the join back.
    ///
    /// `order` picks the checkpoints ([`keys_ctes`](Queries::keys_ctes)).
    /// The limit is written into the text, not bound: SQLite compiles a
    /// statement again whenever a bound `LIMIT` changes, and the listing is
    /// a long statement to compile.
    ///
    /// The SQLite saver reads this form only when the packed one
    /// ([`packed_tuples`](Queries::packed_tuples)) is longer than SQLite's
    /// longest string.
    pub(crate) fn tuples(&self, where_: &str, limit: i64, order: KeyOrder) -> String {
        let (cps, writes, meta_out) = (&self.cps, &self.writes, self.meta_out);
        match self.dialect {
            Dialect::Postgres => format!(
                "{keys}
                 SELECT 0 AS kind, thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
                        checkpoint AS payload, metadata, commit_order,
                        CAST(NULL AS TEXT) AS task_id, CAST(NULL AS BIGINT) AS idx,
                        CAST(NULL AS TEXT) AS channel, CAST(NULL AS TEXT) AS task_path
                   FROM c
                 UNION ALL
                 SELECT 1, w.thread_id, w.checkpoint_ns, w.checkpoint_id, CAST(NULL AS TEXT),
                        w.value, CAST(NULL AS TEXT), c.commit_order,
                        w.task_id, w.idx, w.channel, w.task_path
                   FROM {writes} AS w JOIN c
                     ON w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
                    AND w.checkpoint_id = c.checkpoint_id
                 ORDER BY 1, 2, 3, 8 DESC, 9, 10",
                keys = self.keys_ctes(
                    &format!(
                        "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, {meta_out} AS metadata, commit_order"
                    ),
                    where_,
                    limit,
                    order,
                ),
            ),
            Dialect::Sqlite => format!(
                "{keys}
                 SELECT 0 AS kind, x.thread_id, x.checkpoint_ns, x.checkpoint_id, parent_checkpoint_id,
                        checkpoint AS payload, {meta_out} AS metadata, x.commit_order,
                        CAST(NULL AS TEXT) AS task_id, CAST(NULL AS BIGINT) AS idx,
                        CAST(NULL AS TEXT) AS channel, CAST(NULL AS TEXT) AS task_path
                   FROM c JOIN {cps} AS x
                     ON x.thread_id = c.thread_id AND x.checkpoint_ns = c.checkpoint_ns
                    AND x.checkpoint_id = c.checkpoint_id
                 UNION ALL
                 SELECT 1, w.thread_id, w.checkpoint_ns, w.checkpoint_id, CAST(NULL AS TEXT),
                        w.value, CAST(NULL AS TEXT), c.commit_order,
                        w.task_id, w.idx, w.channel, w.task_path
                   FROM c CROSS JOIN {writes} AS w
                     ON w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
                    AND w.checkpoint_id = c.checkpoint_id",
                keys = self.keys_ctes(
                    "thread_id, checkpoint_ns, checkpoint_id, commit_order",
                    where_,
                    limit,
                    order
                ),
            ),
        }
    }
}

/// A listing's order: by thread and namespace, newest first.
const ORDER_NEWEST: &str = "ORDER BY thread_id, checkpoint_ns, commit_order DESC";

/// How a listing picks its checkpoints before the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyOrder {
    /// In no order: a lookup by id (at most one row).
    Any,
    /// By thread and namespace, newest first ([`ORDER_NEWEST`]).
    Newest,
    /// As [`Newest`](KeyOrder::Newest), for a `where_` that pins the thread
    /// as `$1` but not the namespace, under a limit. The commit-order index
    /// is ascending, so one sorted pass would read (and sort) every
    /// checkpoint of the thread's first namespace to return its newest few;
    /// instead the namespaces are found one index probe each and every one
    /// is read newest first, at most the limit.
    NewestPerNamespace,
}

impl KeyOrder {
    /// The order of a listing of `filter` under `limit` ([`i64::MAX`]: none).
    pub(crate) fn of(filter: &ListFilter, limit: i64) -> Self {
        if filter.thread_id.is_some() && filter.checkpoint_ns.is_none() && limit < i64::MAX {
            KeyOrder::NewestPerNamespace
        } else {
            KeyOrder::Newest
        }
    }
}

/// Lineages read by one query of [`Queries::lineage_ranges`]: at most one
/// member and 4 parameters each (SQLite allows 500 members).
pub(crate) const LINEAGES_PER_QUERY: usize = 64;

/// A commit-order range `[start, end)` of one thread and namespace.
pub(crate) type OrderRange<'a> = (&'a str, &'a str, u64, u64);

/// `ranges` sorted, with the ranges of one thread and namespace that overlap
/// or touch merged into one, so that no row is read twice.
pub(crate) fn merge_ranges(mut ranges: Vec<OrderRange<'_>>) -> Vec<OrderRange<'_>> {
    ranges.sort_unstable();
    let mut out: Vec<OrderRange<'_>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if (last.0, last.1) == (r.0, r.1) && r.2 <= last.3 => {
                last.3 = last.3.max(r.3);
            }
            _ => out.push(r),
        }
    }
    out
}

/// The lineage of `from` within rows read by commit-order range, nearest
/// first, as row indices: `lookup` finds a checkpoint id's row, `parent`
/// gives a row's parent id. At most `count` rows; `None` when the line
/// leaves the rows before `count` records or its root (the rows were the
/// wrong range: the thread forked there).
pub(crate) fn follow_line<'r>(
    from: &'r str,
    count: usize,
    lookup: impl Fn(&str) -> Option<usize>,
    parent: impl Fn(usize) -> Option<&'r str>,
) -> Option<Vec<usize>> {
    // `count` may be `usize::MAX` (the whole line): grow as rows are found.
    let mut line = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut want = Some(from);
    while let Some(id) = want {
        if line.len() == count {
            return Some(line);
        }
        let ix = lookup(id)?;
        // Damaged parent links that loop: not a line (read it by links,
        // whose query stops at a loop and reports the missing parent).
        if !seen.insert(ix) {
            return None;
        }
        line.push(ix);
        want = parent(ix);
    }
    (!line.is_empty()).then_some(line)
}

/// A bind parameter of a dynamically built query.
#[derive(Debug, Clone)]
pub(crate) enum Param {
    Text(String),
    Int(i64),
}

/// The WHERE clause and parameters of a [`ListFilter`] (after `before` was
/// resolved to a commit order). Metadata keys must be plain identifiers.
pub(crate) fn list_where(
    q: &Queries,
    filter: &ListFilter,
    before_order: Option<i64>,
) -> Result<(String, Vec<Param>)> {
    let mut clauses: Vec<String> = Vec::new();
    let mut params: Vec<Param> = Vec::new();
    let push = |params: &mut Vec<Param>, p: Param| {
        params.push(p);
        params.len()
    };
    // The thread first: `$1`, as `KeyOrder::NewestPerNamespace` reads it.
    if let Some(t) = &filter.thread_id {
        let i = push(&mut params, Param::Text(t.clone()));
        clauses.push(format!("thread_id = ${i}"));
    }
    if let Some(ns) = &filter.checkpoint_ns {
        let i = push(&mut params, Param::Text(ns.clone()));
        clauses.push(format!("checkpoint_ns = ${i}"));
    }
    if let Some(o) = before_order {
        let i = push(&mut params, Param::Int(o));
        clauses.push(format!("commit_order < ${i}"));
    }
    filter.check()?;
    for (key, value) in &filter.metadata {
        let k = push(&mut params, Param::Text(key.clone()));
        let v = push(&mut params, Param::Text(value.to_string()));
        let kind = match value {
            // An integer past i64 is a float to SQLite's JSON functions, which
            // would round it: compared as written, it is exact.
            serde_json::Value::Number(n) if n.is_u64() && n.as_i64().is_none() => FilterValue::Json,
            serde_json::Value::Number(n) if n.is_i64() => FilterValue::Integer,
            serde_json::Value::Number(n) => {
                // A whole float within the integers JSON holds (|f| < 2^64)
                // also as the integer it equals exactly.
                let exact = n
                    .as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 18_446_744_073_709_551_616.0)
                    .map(|f| push(&mut params, Param::Text((f as i128).to_string())));
                FilterValue::Float { exact }
            }
            _ => FilterValue::Json,
        };
        clauses.push(q.metadata_clause(k, v, kind));
    }
    if clauses.is_empty() {
        clauses.push("1 = 1".to_owned());
    }
    Ok((clauses.join(" AND "), params))
}

/// How [`list_where`] compares a metadata filter value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FilterValue {
    /// Not a number, or an integer past i64: compared as JSON.
    Json,
    /// An integer within i64, by its value.
    Integer,
    /// A float, by its value; `exact` is the parameter holding the integer
    /// it equals, when it is whole and within the integers JSON holds.
    Float { exact: Option<usize> },
}

/// A checkpoint ready to insert: payloads encoded, sizes checked.
#[derive(Debug)]
pub(crate) struct EncodedEntry {
    pub(crate) new: NewCheckpoint,
    pub(crate) payload: Vec<u8>,
    pub(crate) metadata: String,
    pub(crate) writes: Vec<EncodedWrite>,
}

/// A pending write ready to insert.
#[derive(Debug)]
pub(crate) struct EncodedWrite {
    pub(crate) write: PendingWrite,
    pub(crate) value: Vec<u8>,
}

/// Rows per multi-row write statement (SQLite allows 32,766 parameters).
pub(crate) const WRITE_ROWS_PER_STATEMENT: usize = 500;

/// Pending writes grouped for multi-row statements: `(replace, rows)`, at
/// most [`WRITE_ROWS_PER_STATEMENT`] rows each. Special writes (negative
/// index) replace, keeping the last of duplicates as sequential upserts did;
/// ordinary writes keep the first stored value.
pub(crate) fn write_batches(writes: &[EncodedWrite]) -> Vec<(bool, Vec<&EncodedWrite>)> {
    let keep: Vec<&EncodedWrite> = writes.iter().filter(|w| !w.write.is_special()).collect();
    let mut replace: Vec<&EncodedWrite> = Vec::new();
    for w in writes.iter().filter(|w| w.write.is_special()) {
        replace.retain(|r| !(r.write.task_id == w.write.task_id && r.write.idx == w.write.idx));
        replace.push(w);
    }
    let mut out = Vec::new();
    for (flag, rows) in [(false, keep), (true, replace)] {
        for chunk in rows.chunks(WRITE_ROWS_PER_STATEMENT) {
            out.push((flag, chunk.to_vec()));
        }
    }
    out
}

impl Settings {
    /// Encodes a checkpoint and its writes, checking sizes before anything is written.
    pub(crate) fn encode_entry(
        &self,
        new: NewCheckpoint,
        writes: Vec<PendingWrite>,
    ) -> Result<EncodedEntry> {
        let ctx = RecordContext::checkpoint(&new.thread_id, &new.checkpoint_ns, &new.checkpoint.id);
        let record = ctx.parent(new.parent_id.as_deref());
        let payload = self.codec.encode_checkpoint(&new.checkpoint, &record)?;
        check_size("checkpoint record bytes", &payload, self.max_record_bytes)?;
        let metadata = serde_json::to_string(&new.metadata)
            .map_err(|e| Error::encode(format!("metadata of {ctx}"), e))?;
        check_size(
            "checkpoint metadata bytes",
            metadata.as_bytes(),
            self.max_record_bytes,
        )?;
        // Read back through serde_json, which refuses deeper documents.
        check_json_depth(metadata.as_bytes())?;
        let writes = self.encode_writes(&ctx, writes)?;
        Ok(EncodedEntry {
            new,
            payload,
            metadata,
            writes,
        })
    }

    /// Encodes pending writes of the checkpoint `ctx` names.
    pub(crate) fn encode_writes(
        &self,
        ctx: &RecordContext<'_>,
        writes: Vec<PendingWrite>,
    ) -> Result<Vec<EncodedWrite>> {
        writes
            .into_iter()
            .map(|w| {
                let value = self.codec.encode_value(
                    &w.value,
                    &ctx.write(&w.task_id, w.idx)
                        .channel(&w.channel, &w.task_path),
                )?;
                check_size("pending write bytes", &value, self.max_record_bytes)?;
                Ok(EncodedWrite { write: w, value })
            })
            .collect()
    }

    /// Decodes a checkpoint row read as [`RawCheckpoint`].
    pub(crate) fn decode_raw(&self, raw: &RawCheckpoint<'_>) -> Result<CheckpointTuple> {
        self.decode_tuple(
            raw.thread_id.to_owned(),
            raw.checkpoint_ns.to_owned(),
            raw.checkpoint_id.to_owned(),
            raw.parent_id.map(str::to_owned),
            raw.payload,
            raw.metadata,
            raw.commit_order,
        )
    }

    /// Decodes a stored checkpoint row.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn decode_tuple(
        &self,
        thread_id: String,
        checkpoint_ns: String,
        checkpoint_id: String,
        parent_id: Option<String>,
        payload: &[u8],
        metadata: &str,
        commit_order: i64,
    ) -> Result<CheckpointTuple> {
        let ctx = RecordContext::checkpoint(&thread_id, &checkpoint_ns, &checkpoint_id)
            .parent(parent_id.as_deref());
        let checkpoint = self.codec.decode_checkpoint(payload, &ctx)?;
        // The payload names its checkpoint: one copied from another row
        // (the encrypting codec's associated data catches that, plain JSON
        // does not) would otherwise be read as this one.
        if checkpoint.id != checkpoint_id {
            return Err(Error::decode(
                ctx.describe(),
                format_args!(
                    "the record is of checkpoint `{}`, stored in the row of `{checkpoint_id}`",
                    checkpoint.id
                ),
            ));
        }
        let metadata = decode_metadata(metadata, &ctx)?;
        let commit_order = u64::try_from(commit_order)
            .map_err(|_| Error::decode(ctx.describe(), "negative commit_order"))?;
        // The identifiers move into the config; only the parent's copies.
        let parent_config = parent_id.map(|p| CheckpointRef {
            thread_id: thread_id.clone(),
            checkpoint_ns: checkpoint_ns.clone(),
            checkpoint_id: Some(p),
        });
        let config = CheckpointRef {
            thread_id,
            checkpoint_ns,
            checkpoint_id: Some(checkpoint_id),
        };
        Ok(CheckpointTuple {
            parent_config,
            config,
            checkpoint,
            metadata,
            commit_order,
            pending_writes: Vec::new(),
        })
    }

    /// Waits for `fut`, busy-polling it as [`spin::spin`] does when the
    /// user opted in with `with_spin`.
    pub(crate) async fn spin<F: std::future::Future>(&self, fut: F) -> F::Output {
        if self.spin.is_zero() {
            fut.await
        } else {
            spin::spin(self.spin, fut).await
        }
    }

    /// Decodes one packed listing ([`Queries::packed_tuples`]) into `out`.
    pub(crate) fn unpack(&self, packed: &[u8], out: &mut TupleAssembler) -> Result<()> {
        packed::unpack(self, packed, out)
    }

    /// Decodes a stored pending write.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn decode_write(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        checkpoint_id: &str,
        task_id: String,
        idx: i64,
        channel: String,
        task_path: String,
        value: &[u8],
    ) -> Result<PendingWrite> {
        let ctx = RecordContext::checkpoint(thread_id, checkpoint_ns, checkpoint_id)
            .write(&task_id, idx)
            .channel(&channel, &task_path);
        let value = self.codec.decode_value(value, &ctx)?;
        Ok(PendingWrite {
            task_id,
            task_path,
            idx,
            channel,
            value,
        })
    }
}

fn decode_metadata(text: &str, ctx: &RecordContext<'_>) -> Result<CheckpointMetadata> {
    // The plain decoder first; only bad data is decoded again, for the
    // error's field path.
    if let Ok(metadata) = serde_json::from_str(text) {
        return Ok(metadata);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let metadata = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        Error::decode(
            format!("metadata of {ctx} at field `{path}`"),
            e.into_inner(),
        )
    })?;
    de.end()
        .map_err(|e| Error::decode(format!("metadata of {ctx}"), format!("trailing data: {e}")))?;
    Ok(metadata)
}

/// Collects tuples (kind 0 rows) and writes (kind 1 rows), in any order;
/// [`finish`](TupleAssembler::finish) attaches the writes and orders both.
#[derive(Debug, Default)]
pub(crate) struct TupleAssembler {
    tuples: Vec<CheckpointTuple>,
    writes: HashMap<(String, String, String), Vec<PendingWrite>>,
}

impl TupleAssembler {
    pub(crate) fn push_tuple(&mut self, t: CheckpointTuple) {
        self.tuples.push(t);
    }

    pub(crate) fn push_write(&mut self, key: (String, String, String), w: PendingWrite) {
        self.writes.entry(key).or_default().push(w);
    }

    /// The tuples by thread, namespace and newest first (byte order, as
    /// the databases' `C`/`BINARY` collation), each with its writes in
    /// (task id, index) order.
    pub(crate) fn finish(mut self) -> Vec<CheckpointTuple> {
        self.tuples.sort_by(|a, b| {
            (&a.config.thread_id, &a.config.checkpoint_ns)
                .cmp(&(&b.config.thread_id, &b.config.checkpoint_ns))
                .then(b.commit_order.cmp(&a.commit_order))
        });
        if self.writes.is_empty() {
            return self.tuples;
        }
        // Each checkpoint's writes, found by borrowed keys (no copies).
        let at: HashMap<(&str, &str, &str), usize> = self
            .tuples
            .iter()
            .enumerate()
            .map(|(i, t)| (super::delta::borrowed_key(&t.config), i))
            .collect();
        let placed: Vec<(usize, Vec<PendingWrite>)> = self
            .writes
            .into_iter()
            .filter_map(|((thread, ns, id), w)| {
                at.get(&(thread.as_str(), ns.as_str(), id.as_str()))
                    .map(|&i| (i, w))
            })
            .collect();
        for (i, mut w) in placed {
            w.sort_by(|a, b| (&a.task_id, a.idx).cmp(&(&b.task_id, b.idx)));
            self.tuples[i].pending_writes = w;
        }
        self.tuples
    }
}

pub(crate) fn not_found(target: &CheckpointRef, id: &str) -> Error {
    Error::CheckpointNotFound {
        thread_id: target.thread_id.clone(),
        checkpoint_ns: target.checkpoint_ns.clone(),
        checkpoint_id: id.to_owned(),
    }
}

pub(crate) fn conflict(new: &NewCheckpoint, order: u64) -> Error {
    Error::VersionConflict {
        thread_id: new.thread_id.clone(),
        checkpoint_ns: new.checkpoint_ns.clone(),
        attempted: order,
    }
}

pub(crate) fn shallow_error(operation: impl Into<String>) -> Error {
    Error::ShallowSaver {
        operation: operation.into(),
    }
}

/// How many times a write transaction the database cancelled to break a
/// deadlock, or as a serialization failure, runs again before the error is
/// returned.
const TRANSIENT_RETRIES: u32 = 4;

/// Runs `attempt` (one whole write transaction) and, while it fails with a
/// [transient](is_transient) error, runs it again after a short pause, at
/// most [`TRANSIENT_RETRIES`] more times.
pub(crate) async fn retried<T, F, Fut>(mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(e) if tries < TRANSIENT_RETRIES && is_transient(&e) => {
                tries += 1;
                // Spread the retries of the two sides of a deadlock apart.
                let jitter = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::from(d.subsec_nanos()) % 7);
                let pause = std::time::Duration::from_millis(u64::from(tries) * 5 + jitter);
                tracing::debug!(tries, ?pause, error = %e, "retrying a cancelled transaction");
                tokio::time::sleep(pause).await;
            }
            r => return r,
        }
    }
}

/// Converts a commit order to the database's integer type.
pub(crate) fn order_i64(order: u64) -> Result<i64> {
    i64::try_from(order)
        .map_err(|_| Error::invalid_argument(format!("commit_order {order} is out of range")))
}

#[cfg(test)]
mod tests {
    use super::{Settings, decode_metadata, follow_line, merge_ranges};
    use crate::codec::RecordContext;
    use crate::error::Error;
    use crate::sql::Dialect;

    #[test]
    fn a_saver_busy_polls_only_when_asked() {
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            assert!(Settings::new(dialect, "").spin.is_zero(), "{dialect:?}");
        }
    }

    #[test]
    fn bad_metadata_is_a_decode_error_naming_the_field_or_the_trailing_data() {
        let ctx = RecordContext::checkpoint("t", "", "c1");
        let good = decode_metadata(r#"{"source":"loop","step":3,"parents":{}}"#, &ctx).unwrap();
        assert_eq!(good.step, 3);
        match decode_metadata(r#"{"source":"loop","step":"x","parents":{}}"#, &ctx) {
            Err(Error::Decode { what, .. }) => assert!(what.contains("field `step`"), "{what}"),
            other => panic!("expected a decode error, got {other:?}"),
        }
        match decode_metadata(r#"{"source":"loop","step":3,"parents":{}} extra"#, &ctx) {
            Err(Error::Decode { what, reason }) => {
                assert!(what.starts_with("metadata of"), "{what}");
                assert!(reason.contains("trailing"), "{reason}");
            }
            other => panic!("expected a decode error, got {other:?}"),
        }
    }

    #[test]
    fn ranges_of_one_thread_that_overlap_or_touch_merge() {
        let ranges = vec![
            ("t", "", 50, 60),
            ("t", "", 10, 20),
            ("u", "", 15, 25),
            ("t", "", 15, 30),
            ("t", "", 30, 31),
            ("t", "x", 10, 20),
            ("t", "", 40, 45),
        ];
        assert_eq!(
            merge_ranges(ranges),
            vec![
                ("t", "", 10, 31),
                ("t", "", 40, 45),
                ("t", "", 50, 60),
                ("t", "x", 10, 20),
                ("u", "", 15, 25),
            ]
        );
    }

    /// Follows `(id, parent)` rows, given in any order.
    fn line(
        rows: &[(&'static str, Option<&'static str>)],
        from: &str,
        count: usize,
    ) -> Option<Vec<&'static str>> {
        let got = follow_line(
            from,
            count,
            |id| rows.iter().position(|r| r.0 == id),
            |ix| rows[ix].1,
        )?;
        Some(got.into_iter().map(|ix| rows[ix].0).collect())
    }

    #[test]
    fn a_line_is_followed_through_its_parents_up_to_count() {
        let rows = [
            ("c", Some("b")),
            ("a", None),
            ("d", Some("c")),
            ("b", Some("a")),
        ];
        assert_eq!(line(&rows, "d", 2), Some(vec!["d", "c"]));
        assert_eq!(line(&rows, "d", 4), Some(vec!["d", "c", "b", "a"]));
        // The root ends a line before `count`: that is the whole lineage.
        assert_eq!(line(&rows, "c", 10), Some(vec!["c", "b", "a"]));
    }

    #[test]
    fn a_line_that_leaves_the_rows_is_none() {
        // `e` forked from a record outside the range read.
        let rows = [("e", Some("x")), ("d", Some("c")), ("c", None)];
        assert_eq!(line(&rows, "e", 2), None);
        assert_eq!(line(&rows, "missing", 1), None);
        assert_eq!(line(&rows, "e", 1), Some(vec!["e"]));
    }

    #[test]
    fn parent_links_that_loop_are_not_a_line_even_for_the_whole_line() {
        // Damaged rows: `a` and `b` name each other as parent.
        let rows = [("a", Some("b")), ("b", Some("a"))];
        assert_eq!(line(&rows, "a", usize::MAX), None);
        assert_eq!(line(&rows, "a", 5), None);
        assert_eq!(line(&rows, "a", 2), Some(vec!["a", "b"]));
    }
}
