//! [`Leases`] on the SQL savers: a lease row per thread and a ticket row
//! per waiting run (schema versions 6 and 7), each operation one short
//! transaction through the saver's query helpers, with times taken from
//! the database clock (every process sees the same one).
//!
//! On SQLite the lease's own commits do not wait for the disk: each call
//! sets `synchronous = NORMAL` on its pooled connection and restores the
//! connection's level after (a call cut off in between closes the
//! connection instead of returning it to the pool with `NORMAL` set). In
//! WAL mode a `NORMAL` commit is atomic and survives a crash of the
//! process; only a power cut or an OS crash can lose it, and only until the
//! next commit that waits for the disk (a checkpoint's, from any process),
//! since the log is synced in order. What such a loss leaves is the
//! thread as it was before the lost lease commits: a lost take, renewal or
//! release looks like a holder that died, whose lease runs out and whose
//! run the next holder finishes from its checkpoints (which waited for the
//! disk); a lost ticket is taken again; a lost takeover rollback is done
//! again by the next takeover. A power cut can so cost a lease time of
//! waiting, never a checkpoint; the lease saves two disk syncs per run
//! (figures in ARCHITECTURE.md). [`Leases::truncate`] (a dead holder's
//! paused turn removed) still waits. PostgreSQL commits them as any other.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::pool::PoolConnection;
use sqlx::{Pool, Transaction};

use super::backend::Backend;
use super::group::Arg;
use super::saver::SqlSaver;
use crate::checkpoint::DeletionNote;
use crate::checkpoint::lease::{self, BaseCopy, Decision, Row, decide, info_of, lost, ms};
use crate::checkpoint::text;
use crate::checkpoint::{Acquired, LeaseInfo, LeaseRequest, Leases, Renewed, Stop};
use crate::error::{Error, Result};
use crate::sql::Dialect;
use crate::sql::error::storage;

/// The lease SQL of one saver (table prefix and dialect applied).
struct Sql {
    leases: String,
    tickets: String,
    /// Which base checkpoints' writes are copied (see [`BaseCopy`]).
    bases: String,
    /// The copies of those writes.
    base_writes: String,
    cps: String,
    writes: String,
    now: &'static str,
    lock: &'static str,
    /// How statements are sent (pooler-safe or not).
    pooling: crate::sql::Pooling,
}

/// Whether lease calls on SQLite relax the disk sync of their own commits
/// (a mechanism kept for speed: ARCHITECTURE.md).
const RELAXED_SYNC: bool = true;

/// A pooled connection for one lease call. On SQLite its commits do not
/// wait for the disk (`synchronous = NORMAL` until [`done`](Self::done)
/// restores the connection's level). Dropped before `done` (the call
/// failed or was cut off), the connection is closed rather than returned
/// to the pool with `NORMAL` set or a transaction open.
struct LeaseConn<D: Backend> {
    conn: PoolConnection<D>,
    /// The `synchronous` level to restore, while `NORMAL` is set.
    restore: Option<i64>,
    /// `done` ran: the connection goes back to the pool.
    clean: bool,
}

/// Why [`LeaseConn::begin`] failed.
enum Begin {
    /// The connection was left inside a transaction (see
    /// [`begin_immediate`](crate::sql::sqlite::begin_immediate)); it is
    /// closed when dropped.
    Stuck(Error),
    Failed(Error),
}

impl<D: Backend> LeaseConn<D> {
    async fn open(pool: &Pool<D>, pooling: crate::sql::Pooling, op: &'static str) -> Result<Self> {
        let mut conn = pool.acquire().await.map_err(storage(op))?;
        if D::DIALECT != Dialect::Sqlite || !RELAXED_SYNC {
            return Ok(LeaseConn {
                conn,
                restore: None,
                clean: false,
            });
        }
        let level = D::fetch_optional(&mut conn, pooling, "PRAGMA synchronous".into(), [])
            .await
            .map_err(storage(op))?
            .map(|r| SqlSaver::<D>::get::<i64>(&r, 0, op))
            .transpose()?
            .unwrap_or(0);
        let mut me = LeaseConn {
            conn,
            restore: None,
            clean: false,
        };
        if level > 1 {
            me.restore = Some(level);
            D::execute(
                &mut me.conn,
                pooling,
                "PRAGMA synchronous = NORMAL".into(),
                [],
            )
            .await
            .map_err(storage(op))?;
        }
        Ok(me)
    }

    /// Begins the call's write transaction (SQLite: holding the write lock).
    async fn begin(&mut self, op: &'static str) -> std::result::Result<Transaction<'_, D>, Begin> {
        let begin = match D::DIALECT {
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            Dialect::Postgres => "BEGIN",
        };
        let conn: &mut D::Connection = &mut self.conn;
        sqlx::Connection::begin_with(conn, begin)
            .await
            .map_err(|e| match e {
                sqlx::Error::InvalidSavePointStatement => Begin::Stuck(storage(op)(e)),
                e => Begin::Failed(storage(op)(e)),
            })
    }

    /// Restores the connection's `synchronous` level.
    async fn done(mut self, pooling: crate::sql::Pooling, op: &'static str) -> Result<()> {
        if let Some(level) = self.restore {
            let restore = format!("PRAGMA synchronous = {level}");
            D::execute(&mut self.conn, pooling, restore, [])
                .await
                .map_err(storage(op))?;
            self.restore = None;
        }
        self.clean = true;
        Ok(())
    }
}

impl<D: Backend> Drop for LeaseConn<D> {
    fn drop(&mut self) {
        if !self.clean {
            self.conn.close_on_drop();
        }
    }
}

impl<D: Backend> SqlSaver<D> {
    /// A connection for a lease call (see [`LeaseConn`]).
    async fn lease_conn(&self, op: &'static str) -> Result<LeaseConn<D>> {
        LeaseConn::open(&self.pool, self.settings.pooling, op).await
    }

    fn lease_sql(&self) -> Sql {
        let q = &self.settings.q;
        let p = &q.prefix;
        let (now, lock) = match q.dialect {
            Dialect::Sqlite => (
                "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
                "",
            ),
            Dialect::Postgres => (
                "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
                " FOR UPDATE",
            ),
        };
        Sql {
            pooling: self.settings.pooling,
            leases: format!("{p}weaver_thread_leases"),
            tickets: format!("{p}weaver_thread_tickets"),
            bases: format!("{p}weaver_lease_bases"),
            base_writes: format!("{p}weaver_lease_base_writes"),
            cps: q.cps.clone(),
            writes: q.writes.clone(),
            now,
            lock,
        }
    }

    /// The lease row of `thread_id`, locked (PostgreSQL) until `conn`'s
    /// transaction ends.
    async fn locked_row(
        conn: &mut D::Connection,
        sql: &Sql,
        thread_id: &str,
        op: &'static str,
    ) -> Result<Option<Row>> {
        let select = format!(
            "SELECT holder, expires_at, base_order, stop, \
             CASE WHEN owns_pause THEN 1 ELSE 0 END AS owns_pause FROM {} WHERE thread_id = $1{}",
            sql.leases, sql.lock
        );
        let row = D::fetch_optional(conn, sql.pooling, select, [Arg::Text(thread_id)])
            .await
            .map_err(storage(op))?;
        row.map(|r| {
            Ok(Row {
                holder: Self::get(&r, "holder", op)?,
                expires_at: Self::get(&r, "expires_at", op)?,
                base_order: Self::get(&r, "base_order", op)?,
                stop: Self::get(&r, "stop", op)?,
                owns_pause: Self::get::<i32>(&r, "owns_pause", op)? != 0,
            })
        })
        .transpose()
    }

    async fn now(conn: &mut D::Connection, sql: &Sql, op: &'static str) -> Result<i64> {
        let row = D::fetch_optional(conn, sql.pooling, format!("SELECT {}", sql.now), [])
            .await
            .map_err(storage(op))?;
        match row {
            Some(r) => Self::get(&r, 0, op),
            None => Ok(lease::now_ms()),
        }
    }

    /// The id of the thread's root checkpoint at commit order `order`.
    async fn root_id_at(
        conn: &mut D::Connection,
        sql: &Sql,
        thread_id: &str,
        order: u64,
        op: &'static str,
    ) -> Result<Option<String>> {
        let Ok(order) = i64::try_from(order) else {
            return Ok(None);
        };
        let select = format!(
            "SELECT checkpoint_id FROM {} WHERE thread_id = $1 AND checkpoint_ns = '' AND commit_order = $2",
            sql.cps
        );
        D::fetch_optional(
            conn,
            sql.pooling,
            select,
            [Arg::Text(thread_id), Arg::Int(order)],
        )
        .await
        .map_err(storage(op))?
        .map(|r| Self::get::<String>(&r, 0, op))
        .transpose()
    }

    /// Keeps the copies of base writes of `thread_id` as `copy` says, the
    /// new base at commit order `base`, in `conn`'s transaction: the other
    /// copies go, then the new base is marked and, when the mark is new,
    /// its writes copied.
    async fn copy_base_in(
        conn: &mut D::Connection,
        sql: &Sql,
        thread_id: &str,
        copy: BaseCopy,
        base: u64,
        op: &'static str,
    ) -> Result<()> {
        let BaseCopy::Retake { also_keep } = copy else {
            return Ok(());
        };
        let root = |param: &str| {
            format!(
                "SELECT checkpoint_id FROM {} WHERE thread_id = $1 AND checkpoint_ns = '' \
                 AND commit_order = {param}",
                sql.cps
            )
        };
        // No commit order is negative: -1 keeps nothing.
        let keep = also_keep.and_then(|o| i64::try_from(o).ok()).unwrap_or(-1);
        for table in [&sql.base_writes, &sql.bases] {
            let drop = format!(
                "DELETE FROM {table} WHERE thread_id = $1 AND checkpoint_id NOT IN ({})",
                root("$2")
            );
            D::execute(
                conn,
                sql.pooling,
                drop,
                [Arg::Text(thread_id), Arg::Int(keep)],
            )
            .await
            .map_err(storage(op))?;
        }
        let Ok(base) = i64::try_from(base) else {
            return Ok(());
        };
        let mark = format!(
            "INSERT INTO {} (thread_id, checkpoint_id) SELECT thread_id, checkpoint_id FROM {} \
             WHERE thread_id = $1 AND checkpoint_ns = '' AND commit_order = $2 ON CONFLICT DO NOTHING",
            sql.bases, sql.cps
        );
        let marked = D::execute(
            conn,
            sql.pooling,
            mark,
            [Arg::Text(thread_id), Arg::Int(base)],
        )
        .await
        .map_err(storage(op))?;
        if marked == 1 {
            // A join from the one checkpoint row (unique by commit order) to
            // its writes: with `checkpoint_id IN (..)`, PostgreSQL's plan for
            // the prepared statement read every write of the thread (half a
            // second a turn on a 500-turn thread).
            let copy = format!(
                "INSERT INTO {} (thread_id, checkpoint_id, task_id, idx, channel, task_path, value) \
                 SELECT w.thread_id, w.checkpoint_id, w.task_id, w.idx, w.channel, w.task_path, w.value \
                 FROM {} AS c JOIN {} AS w ON w.thread_id = c.thread_id \
                 AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id \
                 WHERE c.thread_id = $1 AND c.checkpoint_ns = '' AND c.commit_order = $2",
                sql.base_writes, sql.cps, sql.writes
            );
            D::execute(
                conn,
                sql.pooling,
                copy,
                [Arg::Text(thread_id), Arg::Int(base)],
            )
            .await
            .map_err(storage(op))?;
        }
        Ok(())
    }

    /// Puts back the copy of the writes of the thread's root checkpoint at
    /// `order`, when one is kept, in `conn`'s transaction; whether it did.
    async fn restore_base_in(
        conn: &mut D::Connection,
        sql: &Sql,
        thread_id: &str,
        order: u64,
        op: &'static str,
    ) -> Result<bool> {
        let Some(id) = Self::root_id_at(conn, sql, thread_id, order, op).await? else {
            return Ok(false);
        };
        let args = || [Arg::Text(thread_id), Arg::Text(&id)];
        let copied = format!(
            "SELECT 1 FROM {} WHERE thread_id = $1 AND checkpoint_id = $2",
            sql.bases
        );
        if D::fetch_optional(conn, sql.pooling, copied, args())
            .await
            .map_err(storage(op))?
            .is_none()
        {
            return Ok(false);
        }
        let clear = format!(
            "DELETE FROM {} WHERE thread_id = $1 AND checkpoint_ns = '' AND checkpoint_id = $2",
            sql.writes
        );
        D::execute(conn, sql.pooling, clear, args())
            .await
            .map_err(storage(op))?;
        let put = format!(
            "INSERT INTO {} (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, value) \
             SELECT thread_id, '', checkpoint_id, task_id, idx, channel, task_path, value FROM {} \
             WHERE thread_id = $1 AND checkpoint_id = $2",
            sql.writes, sql.base_writes
        );
        D::execute(conn, sql.pooling, put, args())
            .await
            .map_err(storage(op))?;
        Ok(true)
    }

    /// Removes the root checkpoints of the thread above `above` (their
    /// rows and the base's locked first on PostgreSQL, so that a write being
    /// stored on one of them commits first and goes too, or finds it gone),
    /// and puts
    /// back the copy of the writes of the checkpoint at `above`, in
    /// `conn`'s transaction; returns how many checkpoints went, and whether
    /// writes were put back; `None` when the checkpoint at `above` is gone
    /// (a prune took the turn's base, and the turn stays).
    async fn truncate_in(
        conn: &mut D::Connection,
        sql: &Sql,
        thread_id: &str,
        above: u64,
        op: &'static str,
    ) -> Result<Option<(u64, bool)>> {
        let order = above;
        let above = i64::try_from(above).unwrap_or(i64::MAX);
        // The base's row too: a write being stored on it commits before the
        // copy is put back, or waits and lands after it.
        if !sql.lock.is_empty() {
            let lock = format!(
                "SELECT 1 FROM {} WHERE thread_id = $1 AND checkpoint_ns = '' AND commit_order >= $2 \
                 ORDER BY commit_order{}",
                sql.cps, sql.lock
            );
            D::fetch_all(
                conn,
                sql.pooling,
                lock,
                [Arg::Text(thread_id), Arg::Int(above)],
            )
            .await
            .map_err(storage(op))?;
        }
        // A base a prune removed meanwhile (read once the rows are locked,
        // so a prune that committed first is seen): nothing before the turn
        // is left to go back to, so the turn stays.
        if above > 0 {
            let base = format!(
                "SELECT 1 FROM {} WHERE thread_id = $1 AND checkpoint_ns = '' AND commit_order = $2",
                sql.cps
            );
            let found = D::fetch_optional(
                conn,
                sql.pooling,
                base,
                [Arg::Text(thread_id), Arg::Int(above)],
            )
            .await
            .map_err(storage(op))?;
            if found.is_none() {
                return Ok(None);
            }
        }
        let restored = Self::restore_base_in(conn, sql, thread_id, order, op).await?;
        let writes = format!(
            "DELETE FROM {} WHERE thread_id = $1 AND checkpoint_ns = '' AND checkpoint_id IN \
             (SELECT checkpoint_id FROM {} WHERE thread_id = $1 AND checkpoint_ns = '' AND commit_order > $2)",
            sql.writes, sql.cps
        );
        D::execute(
            conn,
            sql.pooling,
            writes,
            [Arg::Text(thread_id), Arg::Int(above)],
        )
        .await
        .map_err(storage(op))?;
        let cps = format!(
            "DELETE FROM {} WHERE thread_id = $1 AND checkpoint_ns = '' AND commit_order > $2",
            sql.cps
        );
        let gone = D::execute(
            conn,
            sql.pooling,
            cps,
            [Arg::Text(thread_id), Arg::Int(above)],
        )
        .await
        .map_err(storage(op))?;
        Ok(Some((gone, restored)))
    }

    /// The thread's head commit order on its root namespace (0: none).
    async fn head(
        conn: &mut D::Connection,
        sql: &Sql,
        thread_id: &str,
        op: &'static str,
    ) -> Result<i64> {
        let head = format!(
            "SELECT COALESCE(MAX(commit_order), 0) FROM {} WHERE thread_id = $1 AND checkpoint_ns = ''",
            sql.cps
        );
        match D::fetch_optional(conn, sql.pooling, head, [Arg::Text(thread_id)])
            .await
            .map_err(storage(op))?
        {
            Some(r) => Self::get::<i64>(&r, 0, op),
            None => Ok(0),
        }
    }

    async fn acquire_in(
        &self,
        conn: &mut D::Connection,
        request: &LeaseRequest<'_>,
        op: &'static str,
    ) -> Result<(Acquired, bool)> {
        let sql = self.lease_sql();
        let thread = request.thread_id;
        let insert = format!(
            "INSERT INTO {} (thread_id, holder, expires_at, base_order) VALUES ($1, '', 0, 0) \
             ON CONFLICT (thread_id) DO NOTHING",
            sql.leases
        );
        // The row exists, locked (PostgreSQL): a row given back (deleted)
        // between the insert and the lock is inserted again.
        let row = loop {
            D::execute(conn, sql.pooling, insert.clone(), [Arg::Text(thread)])
                .await
                .map_err(storage(op))?;
            if let Some(row) = Self::locked_row(conn, &sql, thread, op).await? {
                break Some(row);
            }
        };
        let now = Self::now(conn, &sql, op).await?;
        let lease_ms = ms(request.lease);
        let stale_at = now.saturating_add(lease_ms);
        // A ticket goes stale at its own `stale_at`; one taken by a build
        // before tickets kept it, a lease time of the caller's after it
        // was last seen.
        let stale = format!(
            "DELETE FROM {} WHERE thread_id = $1 AND COALESCE(stale_at, seen_at + $3) < $2",
            sql.tickets
        );
        D::execute(
            conn,
            sql.pooling,
            stale,
            [Arg::Text(thread), Arg::Int(now), Arg::Int(lease_ms)],
        )
        .await
        .map_err(storage(op))?;
        let mut mine = None;
        if let Some(k) = request.ticket {
            let seen = format!(
                "UPDATE {} SET seen_at = $1, stale_at = $4 WHERE seq = $2 AND thread_id = $3",
                sql.tickets
            );
            let n = D::execute(
                conn,
                sql.pooling,
                seen,
                [
                    Arg::Int(now),
                    Arg::Int(k),
                    Arg::Text(thread),
                    Arg::Int(stale_at),
                ],
            )
            .await
            .map_err(storage(op))?;
            mine = (n == 1).then_some(k);
        }
        let first_sql = format!(
            "SELECT seq FROM {} WHERE thread_id = $1 ORDER BY seq LIMIT 1",
            sql.tickets
        );
        let first = D::fetch_optional(conn, sql.pooling, first_sql, [Arg::Text(thread)])
            .await
            .map_err(storage(op))?
            .map(|r| Self::get::<i64>(&r, 0, op))
            .transpose()?;
        match decide(thread, row.as_ref(), request, now, first, mine)? {
            Decision::Busy(holder) => {
                if request.queue && mine.is_none() {
                    let take = format!(
                        "INSERT INTO {} (thread_id, holder, seen_at, stale_at) VALUES ($1, $2, $3, $4) \
                         RETURNING seq",
                        sql.tickets
                    );
                    let args = [
                        Arg::Text(thread),
                        Arg::Text(request.holder),
                        Arg::Int(now),
                        Arg::Int(stale_at),
                    ];
                    let r = D::fetch_optional(conn, sql.pooling, take, args)
                        .await
                        .map_err(storage(op))?;
                    mine = r.map(|r| Self::get::<i64>(&r, 0, op)).transpose()?;
                }
                Ok((
                    Acquired::Busy {
                        holder,
                        ticket: mine,
                    },
                    false,
                ))
            }
            Decision::Take(take) => {
                let (rolled_back, restored) = match take.rollback {
                    Some(above) => Self::truncate_in(conn, &sql, thread, above, op)
                        .await?
                        .unwrap_or((0, false)),
                    None => (0, false),
                };
                let base = match take.keep_base {
                    Some(b) => b,
                    None => Self::head(conn, &sql, thread, op).await?,
                };
                let copy = take.base_copy();
                Self::copy_base_in(
                    conn,
                    &sql,
                    thread,
                    copy,
                    u64::try_from(base).unwrap_or(0),
                    op,
                )
                .await?;
                // The row's stop request stays only when the caller takes
                // its own live hold back (`Take::stop`, read from the row).
                let hold = format!(
                    "UPDATE {} SET holder = $2, expires_at = $3, base_order = $4, stop = {}, \
                     owns_pause = {} WHERE thread_id = $1",
                    sql.leases,
                    if take.stop.is_some() { "stop" } else { "NULL" },
                    if request.owns_pause { "TRUE" } else { "FALSE" }
                );
                let args = [
                    Arg::Text(thread),
                    Arg::Text(request.holder),
                    Arg::Int(now.saturating_add(lease_ms)),
                    Arg::Int(base),
                ];
                D::execute(conn, sql.pooling, hold, args)
                    .await
                    .map_err(storage(op))?;
                if let Some(k) = mine {
                    let leave = format!("DELETE FROM {} WHERE seq = $1", sql.tickets);
                    D::execute(conn, sql.pooling, leave, [Arg::Int(k)])
                        .await
                        .map_err(storage(op))?;
                }
                Ok((take.held(rolled_back), rolled_back > 0 || restored))
            }
        }
    }

    /// Runs `sql` with `args` on a pooled connection, one statement in its
    /// own transaction; returns the rows it changed.
    async fn lease_execute(
        &self,
        sql: String,
        args: Vec<Arg<'_>>,
        op: &'static str,
    ) -> Result<u64> {
        self.rechecked(async {
            self.ensure_migrated().await?;
            let mut lc = self.lease_conn(op).await?;
            let n = D::execute(&mut lc.conn, self.settings.pooling, sql, args)
                .await
                .map_err(storage(op))?;
            lc.done(self.settings.pooling, op).await?;
            Ok(n)
        })
        .await
    }
}

#[async_trait]
impl<D: Backend> Leases for SqlSaver<D> {
    async fn acquire(&self, request: &LeaseRequest<'_>) -> Result<Acquired> {
        text::check_id("thread id", request.thread_id)?;
        lease::check_holder(request.holder)?;
        let op = "lease_acquire";
        let thread = [request.thread_id.to_owned()];
        let out = self
            .rechecked(async {
                self.ensure_migrated().await?;
                let mut healed = false;
                loop {
                    let mut lc = self.lease_conn(op).await?;
                    let mut tx = match lc.begin(op).await {
                        Ok(tx) => tx,
                        Err(Begin::Stuck(_)) if !healed => {
                            healed = true;
                            continue;
                        }
                        Err(Begin::Stuck(e) | Begin::Failed(e)) => return Err(e),
                    };
                    let out = self.acquire_in(&mut tx, request, op).await?;
                    tx.commit().await.map_err(storage(op))?;
                    lc.done(self.settings.pooling, op).await?;
                    return Ok(out);
                }
            })
            .await?;
        let (out, changed) = out;
        if changed {
            // What this process cached of the removed checkpoints, and of
            // the writes put back, goes.
            drop(DeletionNote(&self.state, &thread));
        }
        Ok(out)
    }

    async fn renew(&self, thread_id: &str, holder: &str, lease: Duration) -> Result<Renewed> {
        let op = "lease_renew";
        let sql = self.lease_sql();
        let renew = format!(
            "UPDATE {} SET expires_at = {now} + $3 WHERE thread_id = $1 AND holder = $2 AND expires_at > {now} RETURNING stop",
            sql.leases,
            now = sql.now
        );
        let row = self
            .rechecked(async {
                self.ensure_migrated().await?;
                let mut lc = self.lease_conn(op).await?;
                let args = [Arg::Text(thread_id), Arg::Text(holder), Arg::Int(ms(lease))];
                let row = D::fetch_optional(&mut lc.conn, self.settings.pooling, renew, args)
                    .await
                    .map_err(storage(op))?;
                lc.done(self.settings.pooling, op).await?;
                Ok(row)
            })
            .await?;
        let Some(row) = row else {
            return Err(lost(thread_id));
        };
        let stop: Option<String> = Self::get(&row, 0, op)?;
        let stop = stop.map(|s| Stop::parse(thread_id, &s)).transpose()?;
        Ok(Renewed { stop })
    }

    async fn release(&self, thread_id: &str, holder: &str, stopped: Option<Stop>) -> Result<()> {
        let sql = self.lease_sql();
        let mut args = vec![Arg::Text(thread_id), Arg::Text(holder)];
        let release = match stopped {
            Some(stop) => {
                args.push(Arg::Text(stop.as_str()));
                format!(
                    "UPDATE {} SET expires_at = 0, stop = $3 WHERE thread_id = $1 AND holder = $2",
                    sql.leases
                )
            }
            None => format!(
                "DELETE FROM {} WHERE thread_id = $1 AND holder = $2",
                sql.leases
            ),
        };
        self.lease_execute(release, args, "lease_release")
            .await
            .map(|_| ())
    }

    async fn request_stop(&self, thread_id: &str, holder: &str, stop: Stop) -> Result<()> {
        let sql = self.lease_sql();
        let ask = format!(
            "UPDATE {} SET stop = $3 WHERE thread_id = $1 AND holder = $2 AND expires_at > {} \
             AND (stop IS NULL OR stop <> 'rollback')",
            sql.leases, sql.now
        );
        let args = vec![
            Arg::Text(thread_id),
            Arg::Text(holder),
            Arg::Text(stop.as_str()),
        ];
        self.lease_execute(ask, args, "lease_request_stop")
            .await
            .map(|_| ())
    }

    async fn withdraw_stop(&self, thread_id: &str, holder: &str, stop: Stop) -> Result<()> {
        let sql = self.lease_sql();
        let withdraw = format!(
            "UPDATE {} SET stop = NULL WHERE thread_id = $1 AND holder = $2 AND stop = $3 \
             AND expires_at > {}",
            sql.leases, sql.now
        );
        let args = vec![
            Arg::Text(thread_id),
            Arg::Text(holder),
            Arg::Text(stop.as_str()),
        ];
        self.lease_execute(withdraw, args, "lease_withdraw_stop")
            .await
            .map(|_| ())
    }

    async fn leave_queue(&self, thread_id: &str, ticket: i64) -> Result<()> {
        let sql = self.lease_sql();
        let leave = format!(
            "DELETE FROM {} WHERE seq = $1 AND thread_id = $2",
            sql.tickets
        );
        let args = vec![Arg::Int(ticket), Arg::Text(thread_id)];
        self.lease_execute(leave, args, "lease_leave_queue")
            .await
            .map(|_| ())
    }

    async fn lease_info(&self, thread_id: &str) -> Result<Option<LeaseInfo>> {
        let op = "lease_info";
        let sql = self.lease_sql();
        let (row, now, queued) = self
            .rechecked(async {
                self.ensure_migrated().await?;
                let mut conn = self.pool.acquire().await.map_err(storage(op))?;
                let row =
                    Self::locked_row(&mut conn, &Sql { lock: "", ..sql }, thread_id, op).await?;
                let sql = self.lease_sql();
                let now = Self::now(&mut conn, &sql, op).await?;
                let count = format!("SELECT COUNT(*) FROM {} WHERE thread_id = $1", sql.tickets);
                let queued = match D::fetch_optional(
                    &mut conn,
                    self.settings.pooling,
                    count,
                    [Arg::Text(thread_id)],
                )
                .await
                .map_err(storage(op))?
                {
                    Some(r) => Self::get::<i64>(&r, 0, op)?,
                    None => 0,
                };
                Ok((row, now, queued))
            })
            .await?;
        let queued = usize::try_from(queued).unwrap_or(0);
        row.filter(|r| !r.holder.is_empty())
            .map(|r| info_of(thread_id, &r, now, queued))
            .transpose()
    }

    async fn truncate(&self, thread_id: &str, holder: &str, above: u64) -> Result<u64> {
        let op = "lease_truncate";
        let sql = self.lease_sql();
        let thread = [thread_id.to_owned()];
        let _deleted = DeletionNote(&self.state, &thread);
        self.rechecked(async {
            self.ensure_migrated().await?;
            let mut tx = self.begin_write(op).await?;
            let row = Self::locked_row(&mut tx, &sql, thread_id, op).await?;
            let now = Self::now(&mut tx, &sql, op).await?;
            if !row.is_some_and(|r| r.holder == holder && r.expires_at > now) {
                return Err(lost(thread_id));
            }
            // The base comes down only to a checkpoint that is there.
            let Some((n, _)) = Self::truncate_in(&mut tx, &sql, thread_id, above, op).await? else {
                tx.commit().await.map_err(storage(op))?;
                return Ok(0);
            };
            let lower = format!(
                "UPDATE {} SET base_order = $2 WHERE thread_id = $1 AND base_order > $2",
                sql.leases
            );
            D::execute(
                &mut tx,
                sql.pooling,
                lower,
                [
                    Arg::Text(thread_id),
                    Arg::Int(i64::try_from(above).unwrap_or(i64::MAX)),
                ],
            )
            .await
            .map_err(storage(op))?;
            tx.commit().await.map_err(storage(op))?;
            Ok(n)
        })
        .await
    }

    async fn delete_held(&self, thread_id: &str, holder: &str) -> Result<()> {
        text::check_id("thread id", thread_id)?;
        let op = "lease_delete_held";
        let sql = self.lease_sql();
        let thread = [thread_id.to_owned()];
        let _deleted = DeletionNote(&self.state, &thread);
        self.rechecked(async {
            self.ensure_migrated().await?;
            let mut tx = self.begin_write(op).await?;
            // Locked first, as an acquire locks it: an acquire waits until
            // the thread is gone, or this call sees the row it wrote.
            let row = Self::locked_row(&mut tx, &sql, thread_id, op).await?;
            if row.is_none_or(|r| r.holder != holder) {
                return Err(lost(thread_id));
            }
            self.delete_thread_in(&mut tx, thread_id, op).await?;
            tx.commit().await.map_err(storage(op))
        })
        .await
    }
}
