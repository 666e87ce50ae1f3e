//! The SQL text of the SQL saver, rendered once per saver (table prefix and
//! dialect applied), and the listing filters built per call.

use super::packed;
use crate::checkpoint::ListFilter;
use crate::error::Result;
use crate::sql::Dialect;

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
    /// order (all of them below `i64::MAX`), which a prune is about to
    /// pick from and delete (`None` on SQLite, whose writers take turns).
    pub(crate) lock_pruned: Option<String>,
    /// PostgreSQL: locks every checkpoint of a thread about to be deleted,
    /// so that a child inserted meanwhile has committed (and is deleted
    /// too) or waits and finds its parent gone (`None` on SQLite).
    pub(crate) lock_thread_rows: Option<String>,
    pub(crate) nth_newest: String,
    /// How many checkpoints of `($1, $2)` the first one stored less than
    /// `$3` milliseconds ago (by the database's clock) starts.
    pub(crate) young_in_ns: String,
    /// The records a prune keeps (commit order `$3` and above), oldest first.
    pub(crate) kept_from: String,
    pub(crate) thread_count: String,
    pub(crate) id_at_order: String,
    pub(crate) list_threads: String,
    pub(crate) lineage: String,
    pub(crate) lineage_writes: String,
    pub(crate) set_payload: String,
    /// A checkpoint's record and metadata, rewritten together (by a codec
    /// that binds one to the other).
    pub(crate) set_record: String,
    /// The commit order of a checkpoint, locking it on PostgreSQL against
    /// another [`WriteCheck`](crate::checkpoint::WriteCheck) of it until the
    /// transaction ends (SQLite's writers take turns).
    pub(crate) lock_checked: String,
    /// One pending write of a checkpoint, by task and index.
    pub(crate) one_write: String,
    /// The parent and commit order of a checkpoint, locked on PostgreSQL
    /// until the transaction ends (a checkpoint being replaced).
    pub(crate) identity: String,
    /// Deletes the pending writes of one checkpoint, returning their keys
    /// (task id, index).
    pub(crate) take_write_keys: String,
    pub(crate) meta_out: &'static str,
    /// The table prefix (empty, or a quoted PostgreSQL schema and a dot).
    pub(crate) prefix: String,
}

impl Queries {
    pub(crate) fn new(dialect: Dialect, p: &str) -> Self {
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
        // Milliseconds since the Unix epoch, by the database's clock (what
        // `created_at` defaults to).
        let now_ms = match dialect {
            Dialect::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
            Dialect::Postgres => "(floor(extract(epoch FROM clock_timestamp()) * 1000))::BIGINT",
        };
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
            young_in_ns: format!(
                "SELECT COUNT(*) FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2 AND commit_order >= (SELECT MIN(commit_order) FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2 AND created_at > {now_ms} - $3)"
            ),
            nth_newest: format!(
                "SELECT commit_order FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2 ORDER BY commit_order DESC LIMIT 1 OFFSET $3"
            ),
            kept_from: format!(
                "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, {meta_out} AS metadata, commit_order FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2 AND commit_order >= $3 ORDER BY commit_order"
            ),
            thread_count: format!(
                "SELECT COUNT(*) AS n, MIN(created_at) AS created_at, MAX(created_at) AS updated_at FROM {cps} WHERE thread_id = $1"
            ),
            id_at_order: format!(
                "SELECT checkpoint_id FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2 AND commit_order = $3"
            ),
            list_threads: format!(
                "SELECT thread_id, COUNT(*) AS n, MIN(created_at) AS created_at, MAX(created_at) AS updated_at FROM {cps} GROUP BY thread_id ORDER BY thread_id LIMIT $1 OFFSET $2"
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
            set_record: format!(
                "UPDATE {cps} SET checkpoint = $4, metadata = {} WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3",
                meta_in.replace("$6", "$5")
            ),
            lock_checked: match dialect {
                Dialect::Sqlite => order_of,
                Dialect::Postgres => format!("{order_of} FOR NO KEY UPDATE"),
            },
            one_write: format!(
                "SELECT channel, task_path, value FROM {writes} WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3 AND task_id = $4 AND idx = $5"
            ),
            identity: match dialect {
                Dialect::Sqlite => format!(
                    "SELECT parent_checkpoint_id, commit_order FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3"
                ),
                Dialect::Postgres => format!(
                    "SELECT parent_checkpoint_id, commit_order FROM {cps} WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3 FOR NO KEY UPDATE"
                ),
            },
            take_write_keys: format!(
                "DELETE FROM {writes} WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3 RETURNING task_id, idx"
            ),
            meta_out,
            prefix: p.to_owned(),
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
    let mut matches = Vec::new();
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
        matches.push(q.metadata_clause(k, v, kind));
    }
    if !matches.is_empty() {
        // A row whose metadata is no JSON object (not text, not JSON, an
        // array: stored behind the saver's back) is selected rather than
        // skipped, so that a filtered listing fails on it with the decode
        // error naming it, as an unfiltered one does. `CASE` evaluates the
        // JSON operators only on JSON.
        let matches = matches.join(" AND ");
        clauses.push(match q.dialect {
            Dialect::Sqlite => format!(
                "(CASE WHEN NOT (typeof(metadata) = 'text' AND json_valid(metadata)) THEN 1 \
                 WHEN json_type(metadata) <> 'object' THEN 1 ELSE ({matches}) END)"
            ),
            Dialect::Postgres => format!("(jsonb_typeof(metadata) <> 'object' OR ({matches}))"),
        });
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
