//! Group commit in one query: every checkpoint of a group in one multi-row
//! `INSERT`, every pending write in another, sent as one query
//! ([`GroupPlan::one_shot`]): on SQLite `BEGIN IMMEDIATE`, the inserts with
//! row-count guards and `COMMIT` reach the connection's worker thread in one
//! hand-off; on PostgreSQL one statement of data-modifying CTEs is one round
//! trip. A group too large for one query takes the statement-by-statement
//! path.
//!
//! This path never decides an error on its own: when the query fails (a
//! unique violation, or a guard finding fewer rows than the group holds: a
//! missing parent or checkpoint, a write already stored), the caller rolls
//! back and stores the group again statement by statement, which reports
//! the precise error (or, for idempotent writes, succeeds).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use super::{EncodedEntry, EncodedWrite, Queries};
use crate::checkpoint::CheckpointRef;
use crate::migrate::Dialect;

/// Whether a group is stored by one query: `false` stores every group
/// statement by statement in a transaction (for measuring what the one
/// query wins).
pub(crate) const ENABLED: bool = true;

/// Most parameters one SQLite query of several statements (whose parameter
/// numbers run on) may use, with headroom.
const SQLITE_MAX_PARAMS: usize = 30_000;
/// Rows per multi-row statement.
const ROWS_PER_STATEMENT: usize = 500;
/// Parameters per checkpoint row: thread, namespace, id, parent, payload,
/// metadata, commit order, "parent is in this statement".
const CP_PARAMS: usize = 8;
/// Parameters per write row: thread, namespace, checkpoint id, task id,
/// index, channel, task path, value.
const WRITE_PARAMS: usize = 8;

/// One thing a group stores.
pub(crate) enum GroupItem<'a> {
    /// A checkpoint with a commit order, and its writes.
    Entry(&'a EncodedEntry),
    /// Writes of a stored (or earlier in the group) checkpoint.
    Writes {
        target: &'a CheckpointRef,
        checkpoint_id: &'a str,
        writes: &'a [EncodedWrite],
    },
}

/// A bind argument, borrowed from the encoded records.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    Text(&'a str),
    OptText(Option<&'a str>),
    Int(i64),
    Bytes(&'a [u8]),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Checkpoints,
    Writes { replace: bool },
}

/// One multi-row statement, rendered once its first parameter number is known.
#[derive(Debug)]
struct Statement<'a> {
    kind: Kind,
    rows: usize,
    args: Vec<Arg<'a>>,
}

/// A group as a few multi-row statements, and how many rows they must insert.
#[derive(Debug)]
pub(crate) struct GroupPlan<'a> {
    statements: Vec<Statement<'a>>,
    /// Rows the statements insert (or replace) when nothing is amiss.
    pub(crate) expected_rows: u64,
}

type WriteKey<'a> = (&'a str, &'a str, &'a str, &'a str, i64);

impl<'a> GroupPlan<'a> {
    /// Plans `items`; `None` when the group must take the statement-by-statement
    /// path: a checkpoint without a commit order (its order is read from the
    /// database) or with order 0, an empty list of writes (whose checkpoint
    /// must still be checked), one pending write given twice, or writes
    /// given before their checkpoint (the one query stores every checkpoint
    /// first; in order, the writes find none).
    pub(crate) fn new(items: &[GroupItem<'a>]) -> Option<Self> {
        let mut cps: Vec<&'a EncodedEntry> = Vec::new();
        let later: HashSet<(&str, &str, &str)> = items
            .iter()
            .filter_map(|item| match item {
                GroupItem::Entry(e) => Some((
                    e.new.thread_id.as_str(),
                    e.new.checkpoint_ns.as_str(),
                    e.new.checkpoint.id.as_str(),
                )),
                GroupItem::Writes { .. } => None,
            })
            .collect();
        let mut stored_so_far: HashSet<(&str, &str, &str)> = HashSet::new();
        let mut writes: Vec<(&'a str, &'a str, &'a str, &'a EncodedWrite)> = Vec::new();
        for item in items {
            match item {
                GroupItem::Entry(e) => {
                    if !matches!(e.new.commit_order, Some(n) if n > 0 && i64::try_from(n).is_ok()) {
                        return None;
                    }
                    cps.push(e);
                    stored_so_far.insert((
                        e.new.thread_id.as_str(),
                        e.new.checkpoint_ns.as_str(),
                        e.new.checkpoint.id.as_str(),
                    ));
                    let n = &e.new;
                    for w in &e.writes {
                        writes.push((&n.thread_id, &n.checkpoint_ns, &n.checkpoint.id, w));
                    }
                }
                GroupItem::Writes {
                    target,
                    checkpoint_id,
                    writes: ws,
                } => {
                    let key = (
                        target.thread_id.as_str(),
                        target.checkpoint_ns.as_str(),
                        *checkpoint_id,
                    );
                    if ws.is_empty() || (later.contains(&key) && !stored_so_far.contains(&key)) {
                        return None;
                    }
                    for w in *ws {
                        writes.push((&target.thread_id, &target.checkpoint_ns, checkpoint_id, w));
                    }
                }
            }
        }
        let mut seen: HashSet<WriteKey<'a>> = HashSet::with_capacity(writes.len());
        for (t, ns, id, w) in &writes {
            if !seen.insert((t, ns, id, &w.write.task_id, w.write.idx)) {
                return None;
            }
        }
        let mut statements = Vec::new();
        for chunk in cps.chunks(ROWS_PER_STATEMENT) {
            statements.push(checkpoint_statement(chunk));
        }
        for replace in [false, true] {
            let rows: Vec<_> = writes
                .iter()
                .filter(|(.., w)| w.write.is_special() == replace)
                .collect();
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                let mut args = Vec::with_capacity(chunk.len() * WRITE_PARAMS);
                for (t, ns, id, w) in chunk {
                    args.extend([
                        Arg::Text(t),
                        Arg::Text(ns),
                        Arg::Text(id),
                        Arg::Text(&w.write.task_id),
                        Arg::Int(w.write.idx),
                        Arg::Text(&w.write.channel),
                        Arg::Text(&w.write.task_path),
                        Arg::Bytes(&w.value),
                    ]);
                }
                statements.push(Statement {
                    kind: Kind::Writes { replace },
                    rows: chunk.len(),
                    args,
                });
            }
        }
        Some(GroupPlan {
            statements,
            expected_rows: (cps.len() + writes.len()) as u64,
        })
    }

    /// The whole group as one query that commits it or fails, writing
    /// nothing: SQLite, `BEGIN IMMEDIATE`, the statements each followed by a
    /// guard, `COMMIT` (one hand-off to the connection's worker thread);
    /// PostgreSQL, one statement of data-modifying CTEs with a guard (one
    /// round trip, atomic on its own). A guard fails the query when a
    /// statement inserted fewer rows than planned. After a failure the caller
    /// runs `ROLLBACK` (SQLite leaves the transaction open) and takes the
    /// statement-by-statement path. `None` when the group is too large.
    pub(crate) fn one_shot(&self, q: &Queries) -> Option<(String, Vec<Arg<'a>>)> {
        let params: usize = self.statements.iter().map(|s| s.args.len()).sum();
        match q.dialect {
            Dialect::Sqlite => {
                if params > SQLITE_MAX_PARAMS {
                    return None;
                }
                let mut sql = String::from("BEGIN IMMEDIATE;\n");
                let mut args = Vec::with_capacity(params);
                for s in &self.statements {
                    sql.push_str(&q.render_group_statement(s.kind, s.rows, args.len() + 1, None));
                    // `changes()`: rows the statement just before inserted
                    // or replaced. `json()` of text that is not JSON is an
                    // error, which stops the query before `COMMIT`; valid,
                    // the guard returns no row (nothing to send back).
                    sql.push_str(&format!(
                        ";\nSELECT 1 WHERE json(CASE WHEN changes() = {} THEN '0' ELSE 'weaver: a row was not inserted' END) IS NULL;\n",
                        s.rows
                    ));
                    args.extend_from_slice(&s.args);
                }
                sql.push_str("COMMIT");
                Some((sql, args))
            }
            Dialect::Postgres => {
                let mut kinds: Vec<Kind> = self.statements.iter().map(|s| s.kind).collect();
                kinds.dedup();
                if kinds.len() != self.statements.len() {
                    return None;
                }
                let mut ctes = Vec::new();
                let mut counts = Vec::new();
                let mut args = Vec::with_capacity(params);
                for (i, s) in self.statements.iter().enumerate() {
                    // A statement does not see rows the others insert: the
                    // writes also look for their checkpoint among `s0`'s.
                    let in_group =
                        (i > 0 && self.statements[0].kind == Kind::Checkpoints).then_some("s0");
                    let insert = q.render_group_statement(s.kind, s.rows, args.len() + 1, in_group);
                    let returning = match s.kind {
                        Kind::Checkpoints => "thread_id, checkpoint_ns, checkpoint_id",
                        Kind::Writes { .. } => "1",
                    };
                    ctes.push(format!("s{i} AS ({insert} RETURNING {returning})"));
                    counts.push(format!("(SELECT COUNT(*) FROM s{i})"));
                    args.extend_from_slice(&s.args);
                }
                let total = if counts.is_empty() {
                    "0".to_owned()
                } else {
                    counts.join(" + ")
                };
                // Casting text that is not a number is an error, which
                // aborts the statement (it depends on the counts, so the
                // planner cannot evaluate it ahead).
                let sql = format!(
                    "WITH {} SELECT CASE WHEN {total} = {expected} THEN 0 ELSE CAST('weaver: inserted ' || CAST({total} AS TEXT) || ' rows' AS BIGINT) END",
                    ctes.join(",\n"),
                    expected = self.expected_rows,
                );
                Some((sql, args))
            }
        }
    }
}

/// The multi-row insert of `entries`, marking rows whose parent is an
/// earlier row of the same statement (a statement does not see its own rows).
fn checkpoint_statement<'a>(entries: &[&'a EncodedEntry]) -> Statement<'a> {
    let mut args = Vec::with_capacity(entries.len() * CP_PARAMS);
    let mut earlier: HashMap<(&str, &str, &str), i64> = HashMap::with_capacity(entries.len());
    for e in entries {
        let n = &e.new;
        let order = n
            .commit_order
            .and_then(|o| i64::try_from(o).ok())
            .unwrap_or_default();
        // A parent earlier in the statement counts only when it commits
        // before its child: otherwise the row is not inserted, the guard
        // fails the group, and the statement path reports why.
        let parent_here = n.parent_id.as_deref().is_some_and(|p| {
            let key = (n.thread_id.as_str(), n.checkpoint_ns.as_str(), p);
            earlier.get(&key).is_some_and(|&parent| parent < order)
        });
        earlier.insert((&n.thread_id, &n.checkpoint_ns, &n.checkpoint.id), order);
        args.extend([
            Arg::Text(&n.thread_id),
            Arg::Text(&n.checkpoint_ns),
            Arg::Text(&n.checkpoint.id),
            Arg::OptText(n.parent_id.as_deref()),
            Arg::Bytes(&e.payload),
            Arg::Text(&e.metadata),
            Arg::Int(order),
            Arg::Int(i64::from(parent_here)),
        ]);
    }
    Statement {
        kind: Kind::Checkpoints,
        rows: entries.len(),
        args,
    }
}

impl Queries {
    /// Renders one planned statement whose first parameter is `$first`.
    /// `in_group`: a CTE (with thread, namespace and id columns) whose
    /// checkpoints count as stored for the writes' existence check.
    fn render_group_statement(
        &self,
        kind: Kind,
        rows: usize,
        first: usize,
        in_group: Option<&str>,
    ) -> String {
        let per_row = match kind {
            Kind::Checkpoints => CP_PARAMS,
            Kind::Writes { .. } => WRITE_PARAMS,
        };
        // `($1, $2, …), ($9, …)`, written into one string.
        let mut values = String::with_capacity(rows * per_row * 6);
        for r in 0..rows {
            let b = first + r * per_row;
            values.push_str(if r == 0 { "(" } else { ", (" });
            for p in b..b + per_row {
                if p > b {
                    values.push_str(", ");
                }
                // Writing to a `String` cannot fail.
                let _ = write!(values, "${p}");
            }
            values.push(')');
        }
        let (cps, writes) = (&self.cps, &self.writes);
        // PostgreSQL turns an `EXISTS` correlated with the `VALUES` rows into
        // a hash join (or, under `OR`, a hashed subplan) over the whole
        // checkpoint table when that table is small, and a prepared
        // statement may keep that generic plan as the table grows: every
        // call then scans the table (measured: a writes-only group took
        // 0.25 ms at 1,000 checkpoints, 0.66 ms at 6,000). `OFFSET 0` keeps
        // the subquery as it is, probed through an index per row (a flat
        // 0.18 ms). The parent (or, for writes, the checkpoint) found is
        // share-locked, as by the one-row inserts: a concurrent prune cannot
        // delete it unseen.
        let probe = match self.dialect {
            Dialect::Sqlite => "",
            Dialect::Postgres => " OFFSET 0 FOR KEY SHARE",
        };
        match kind {
            Kind::Checkpoints => {
                let metadata = match self.dialect {
                    Dialect::Sqlite => "column6",
                    Dialect::Postgres => "CAST(column6 AS JSONB)",
                };
                format!(
                    "INSERT INTO {cps} (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata, commit_order)
                     SELECT column1, column2, column3, column4, column5, {metadata}, column7
                       FROM (VALUES {values}) AS v
                      WHERE column4 IS NULL OR column8 = 1
                         OR EXISTS (SELECT 1 FROM {cps} AS p WHERE p.thread_id = v.column1
                                    AND p.checkpoint_ns = v.column2 AND p.checkpoint_id = v.column4
                                    AND p.commit_order < v.column7{probe})"
                )
            }
            Kind::Writes { replace } => {
                let action = if replace {
                    "DO UPDATE SET channel = excluded.channel, task_path = excluded.task_path, value = excluded.value"
                } else {
                    "DO NOTHING"
                };
                let also = in_group.map_or_else(String::new, |g| {
                    format!(
                        "EXISTS (SELECT 1 FROM {g} AS g WHERE g.thread_id = v.column1
                                 AND g.checkpoint_ns = v.column2 AND g.checkpoint_id = v.column3) OR "
                    )
                });
                format!(
                    "INSERT INTO {writes} (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, value)
                     SELECT column1, column2, column3, column4, column5, column6, column7, column8
                       FROM (VALUES {values}) AS v
                      WHERE {also}EXISTS (SELECT 1 FROM {cps} AS c WHERE c.thread_id = v.column1
                                    AND c.checkpoint_ns = v.column2 AND c.checkpoint_id = v.column3{probe})
                     ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) {action}"
                )
            }
        }
    }
}

#[cfg(all(test, feature = "postgres"))]
mod postgres_plan {
    use sqlx::{AssertSqlSafe, Row};

    use super::{Arg, GroupItem, GroupPlan};
    use crate::checkpoint::sql::{EncodedWrite, Queries};
    use crate::checkpoint::{CheckpointRef, PendingWrite};
    use crate::migrate::postgres::table_prefix;
    use crate::migrate::{self, Adapter, Dialect, PgSchema};

    /// `arg` as a PostgreSQL literal, with its type.
    fn literal(arg: &Arg<'_>) -> (&'static str, String) {
        let text = |s: &str| format!("'{}'", s.replace('\'', "''"));
        match arg {
            Arg::Text(s) => ("text", text(s)),
            Arg::OptText(Some(s)) => ("text", text(s)),
            Arg::OptText(None) => ("text", "NULL".to_owned()),
            Arg::Int(i) => ("bigint", i.to_string()),
            Arg::Bytes(b) => {
                let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
                ("bytea", format!("'\\x{hex}'"))
            }
        }
    }

    /// A prepared group statement is planned per call a few times, then
    /// PostgreSQL may keep one generic plan, made while the table was small,
    /// for as long as the connection lives. That plan must look each row's
    /// checkpoint up through an index: a join that scans and hashes the
    /// checkpoint table costs as much as the table is large, on every call.
    #[tokio::test]
    async fn a_group_of_writes_keeps_an_index_probe_as_the_table_grows_on_postgres() {
        let url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(&url)
            .await
            .unwrap_or_else(|e| panic!("this test needs PostgreSQL at {url}: {e}"));
        let schema = format!("weaver_plan_{}", uuid::Uuid::now_v7().simple());
        migrate::up(
            &PgSchema::new(&pool, &schema).unwrap(),
            &[Adapter::Checkpoint],
            None,
        )
        .await
        .unwrap();
        let prefix = table_prefix(Some(&schema));
        let q = Queries::new(Dialect::Postgres, &prefix);
        let target = CheckpointRef::latest("t").at("c1");
        let writes: Vec<EncodedWrite> = PendingWrite::for_task(
            "task",
            "node",
            ["a", "b", "c"].map(|ch| (ch.to_owned(), serde_json::json!(1))),
        )
        .into_iter()
        .map(|write| EncodedWrite {
            write,
            value: b"1".to_vec(),
        })
        .collect();
        let items = [GroupItem::Writes {
            target: &target,
            checkpoint_id: "c1",
            writes: &writes,
        }];
        let plan = GroupPlan::new(&items).unwrap();
        let (sql, args) = plan.one_shot(&q).unwrap();
        let (types, values): (Vec<_>, Vec<_>) = args.iter().map(literal).unzip();
        // Each call writes for a checkpoint of its own thread (the first
        // parameter of every row).
        let call = |i: usize| {
            let mut v = values.clone();
            for k in (0..v.len()).step_by(8) {
                v[k] = format!("'t{i}'");
            }
            v.join(", ")
        };
        let mut conn = pool.acquire().await.unwrap();
        let run = |statement: String| sqlx::query(AssertSqlSafe(statement));
        run(format!("PREPARE grp ({}) AS {sql}", types.join(", ")))
            .execute(&mut *conn)
            .await
            .unwrap();
        let insert = |from: usize, to: usize| {
            format!(
                "INSERT INTO {prefix}weaver_checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata, commit_order)
                 SELECT 't' || i, '', 'c1', '\\x00', '{{}}', 1 FROM generate_series({from}, {to}) AS i"
            )
        };
        for i in 0..30 {
            run(insert(i, i)).execute(&mut *conn).await.unwrap();
            run(format!("EXECUTE grp ({})", call(i)))
                .execute(&mut *conn)
                .await
                .unwrap();
        }
        run(insert(30, 20_000)).execute(&mut *conn).await.unwrap();
        let rows = run(format!("EXPLAIN EXECUTE grp ({})", call(20_000)))
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        let explained: Vec<String> = rows.iter().map(|r| r.get::<String, _>(0)).collect();
        drop(conn);
        run(format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .execute(&pool)
            .await
            .unwrap();
        let explained = explained.join("\n");
        assert!(!explained.contains("Seq Scan"), "{explained}");
        assert!(!explained.contains("hashed SubPlan"), "{explained}");
        assert!(explained.contains("Index"), "{explained}");
    }
}
