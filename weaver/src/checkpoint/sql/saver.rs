//! [`SqlSaver`]: the [`Saver`] contract over `sqlx`, written once for every
//! [`Backend`]; its public names are [`SqliteSaver`](super::SqliteSaver)
//! and [`PostgresSaver`](super::PostgresSaver).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::{Pool, Transaction};

use super::backend::{Backend, Col, Column};
use super::group::{Arg, GroupItem};
use super::hot::HotSlot;
use super::{
    EncodedEntry, EncodedWrite, KeyOrder, Param, Settings, list_where, not_found, retried,
    shallow_error, write_batches,
};
use crate::checkpoint::DeletionNote;
use crate::checkpoint::text;
use crate::checkpoint::{
    BatchEntry, CheckpointRef, CheckpointTuple, ForkOptions, LineageRequest, ListFilter,
    NewCheckpoint, PendingWrite, PruneStrategy, Saver, SaverState, ThreadInfo, WriteCheck, WriteOp,
};
use crate::codec::Codec;
use crate::error::{Error, Result};
use crate::sql::error::{is_schema_missing, storage};

/// A checkpointer on a SQL database, through a user-supplied `sqlx` pool:
/// the one implementation behind [`SqliteSaver`](super::SqliteSaver)
/// (`SqlSaver<sqlx::Sqlite>`) and [`PostgresSaver`](super::PostgresSaver)
/// (`SqlSaver<sqlx::Postgres>`), whose pages say what each database does.
///
/// The database parameter is sealed: weaver implements it for those two
/// only, as `sqlx`'s `Pool<DB>` is named through `SqlitePool` and `PgPool`.
pub struct SqlSaver<D: Backend> {
    pub(super) pool: Pool<D>,
    pub(super) hot: Arc<HotSlot<D>>,
    /// The PostgreSQL schema of the tables (`with_prefix`); `None`: where
    /// the connection looks (always on SQLite).
    pub(super) schema: Option<String>,
    pub(super) settings: Settings,
    /// What the saver's clones share ([`Saver::shared_state`]).
    pub(super) state: Arc<SaverState>,
}

impl<D: Backend> Clone for SqlSaver<D> {
    fn clone(&self) -> Self {
        SqlSaver {
            pool: self.pool.clone(),
            hot: self.hot.clone(),
            schema: self.schema.clone(),
            settings: self.settings.clone(),
            state: self.state.clone(),
        }
    }
}

impl<D: Backend> fmt::Debug for SqlSaver<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(D::SAVER)
            .field("pool", &self.pool)
            .field("hot", &self.hot)
            .field("schema", &self.schema)
            .field("settings", &self.settings)
            .finish()
    }
}

impl<D: Backend> SqlSaver<D> {
    /// A saver on `pool` with tables named after `prefix`.
    pub(super) fn on(pool: Pool<D>, schema: Option<String>, prefix: &str) -> Self {
        SqlSaver {
            pool,
            hot: Arc::new(HotSlot::new(D::close_on_drop)),
            schema,
            settings: Settings::new(D::DIALECT, prefix),
            state: Arc::default(),
        }
    }

    /// Passes payloads through `codec` (e.g. an
    /// `EncryptedCodec`, feature `encryption`).
    ///
    /// ```
    /// # #[cfg(all(feature = "encryption", feature = "sqlite"))]
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use weaver::checkpoint::{CheckpointRef, SqliteSaver};
    /// use weaver::codec::{EncryptedCodec, EncryptionKey};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { secret: String }
    ///
    /// let file = std::env::temp_dir().join(format!("weaver-doc-codec-{}.db", std::process::id()));
    /// let url = format!("sqlite://{}", file.display());
    /// let codec = EncryptedCodec::json([EncryptionKey::new("2026-01", [7; 32])?])?;
    /// let saver = SqliteSaver::connect(&url).await?.with_codec(codec);
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("a", |_: &S| SUpdate::default().secret("pizza"))
    ///     .add_sequence([START, "a", END])
    ///     .compile(Compile::new().checkpointer(saver))?;
    /// graph.invoke(S::default(), &RunConfig::thread("t")).await?;
    /// assert_eq!(graph.get_state(&RunConfig::thread("t")).await?.values.secret, "pizza");
    /// // Without the key the stored checkpoint does not decode.
    /// let plain = SqliteSaver::connect(&url).await?;
    /// assert!(plain.get_tuple(&CheckpointRef::latest("t")).await.is_err());
    /// # std::fs::remove_file(&file).ok();
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn with_codec(mut self, codec: impl Codec + 'static) -> Self {
        self.settings.codec = Arc::new(codec);
        self
    }

    /// Keeps only the latest checkpoint per thread and namespace, with its
    /// pending writes. Older checkpoints are deleted as newer ones commit;
    /// asking for one is [`Error::ShallowSaver`].
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")]
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use weaver::checkpoint::SqliteSaver;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// let file = std::env::temp_dir().join(format!("weaver-doc-shallow-{}.db", std::process::id()));
    /// let saver = SqliteSaver::connect(&format!("sqlite://{}", file.display())).await?.shallow();
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(saver))?;
    /// let config = RunConfig::thread("t");
    /// graph.invoke(S::default(), &config).await?;
    /// graph.invoke(S::default(), &config).await?;
    /// assert_eq!(graph.get_state(&config).await?.values.n, 2);
    /// assert_eq!(graph.checkpointer().unwrap().thread_info("t").await?.unwrap().checkpoints, 1);
    /// # std::fs::remove_file(&file).ok();
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn shallow(mut self) -> Self {
        self.settings.history = super::History::Latest;
        self
    }

    /// Opts in to busy-polling: each call keeps polling for the database's
    /// reply for up to `budget` before it lets its thread sleep (off by
    /// default; `Duration::ZERO` turns it off again).
    ///
    /// A reply within the budget then costs no wake-up of the waiting
    /// thread. The price is a core kept busy while the call waits, whether
    /// or not the reply comes in time: other tasks on the runtime still run
    /// in between, and between two polls the thread yields its core
    /// (`sched_yield`) to any other thread the system has ready to run.
    pub fn with_spin(mut self, budget: std::time::Duration) -> Self {
        self.settings.spin = budget;
        self
    }

    /// Sets the ceiling of one encoded payload (default
    /// [`MAX_RECORD_BYTES`](crate::codec::MAX_RECORD_BYTES)).
    pub fn with_max_record_bytes(mut self, bytes: usize) -> Self {
        self.settings.max_record_bytes = bytes;
        self
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<D> {
        &self.pool
    }

    /// Checks now that the schema is at the version this build needs.
    async fn check_schema(&self) -> Result<()> {
        D::check_schema(&self.pool, self.schema.as_deref()).await
    }

    /// Checks once that the schema is at the version this build needs, and
    /// learns what the database can do ([`Backend::inspect`]).
    pub(super) async fn ensure_migrated(&self) -> Result<()> {
        self.settings
            .verified
            .get_or_try_init(|| async {
                self.check_schema().await?;
                D::inspect(&self.pool).await
            })
            .await
            .map(|_| ())
    }

    /// The outcome of `call` (one `Saver` operation), except that a failure
    /// because a table or column is missing becomes the
    /// [`Error::MigrationRequired`] a fresh check of the schema gives: the
    /// saver checks the schema once, on its first call, and the schema may
    /// be migrated down or dropped while the saver is in use.
    pub(super) async fn rechecked<T: Send>(
        &self,
        call: impl std::future::Future<Output = Result<T>> + Send,
    ) -> Result<T> {
        let r = call.await;
        match &r {
            Err(Error::Storage { source, .. }) if is_schema_missing(source.as_ref()) => {
                match self.check_schema().await {
                    Err(e @ Error::MigrationRequired { .. }) => Err(e),
                    _ => r,
                }
            }
            _ => r,
        }
    }

    /// A checkpoint of `(thread, ns)` that was asked for and is not stored:
    /// on a saver that keeps only the latest checkpoint and has one for the
    /// thread, it was superseded, and asking for it is
    /// [`Error::ShallowSaver`] naming `operation()`; otherwise `Ok` (the
    /// caller reports it missing).
    pub(super) async fn superseded(
        &self,
        thread: &str,
        ns: &str,
        op: &'static str,
        operation: impl FnOnce() -> String,
    ) -> Result<()> {
        if self.settings.history.keeps_all() || !self.has_head(thread, ns, op).await? {
            return Ok(());
        }
        Err(shallow_error(operation()))
    }

    /// Column `col` of `row`. A value the driver cannot read as `T` (text
    /// that is not UTF-8) is bad stored data: [`Error::Decode`].
    pub(super) fn get<'r, T: Column<'r, D>>(
        row: &'r D::Row,
        col: impl Into<Col>,
        op: &'static str,
    ) -> Result<T> {
        T::read(row, col.into()).map_err(|e| match e {
            sqlx::Error::ColumnDecode { index, source } => {
                Error::decode(format!("column {index} of a stored row ({op})"), source)
            }
            e => storage(op)(e),
        })
    }

    /// A write transaction.
    pub(super) async fn begin_write(&self, op: &'static str) -> Result<Transaction<'static, D>> {
        D::begin_write(&self.pool, op).await
    }

    /// Runs `sql` with `args` on a connection of the pool; returns its rows.
    pub(super) async fn pool_rows<'a>(
        &self,
        sql: String,
        args: impl IntoIterator<Item = Arg<'a>>,
        op: &'static str,
    ) -> Result<Vec<D::Row>> {
        let mut conn = self.pool.acquire().await.map_err(storage(op))?;
        D::fetch_all(&mut conn, self.settings.pooling, sql, args)
            .await
            .map_err(storage(op))
    }

    /// Runs `sql` with `args` on a connection of the pool; returns its first
    /// row, if any.
    pub(super) async fn pool_row<'a>(
        &self,
        sql: String,
        args: impl IntoIterator<Item = Arg<'a>>,
        op: &'static str,
    ) -> Result<Option<D::Row>> {
        let mut conn = self.pool.acquire().await.map_err(storage(op))?;
        D::fetch_optional(&mut conn, self.settings.pooling, sql, args)
            .await
            .map_err(storage(op))
    }

    /// A thread's row of counts and times (`n`, `created_at`, `updated_at`,
    /// milliseconds since the Unix epoch): `None` when it counts none.
    pub(super) fn thread_row(
        thread_id: &str,
        row: &D::Row,
        op: &'static str,
    ) -> Result<Option<ThreadInfo>> {
        let n: i64 = Self::get(row, "n", op)?;
        let Some(info) = ThreadInfo::counted(thread_id, u64::try_from(n).unwrap_or(0)) else {
            return Ok(None);
        };
        let time = |col: &'static str| -> Result<std::time::SystemTime> {
            let ms: i64 = Self::get(row, col, op)?;
            u64::try_from(ms)
                .ok()
                .and_then(|ms| {
                    std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_millis(ms))
                })
                .ok_or_else(|| {
                    Error::decode(
                        "checkpoint time",
                        format!("thread `{thread_id}`: `{col}` {ms} is not a time after 1970"),
                    )
                })
        };
        Ok(Some(info.at(time("created_at")?, time("updated_at")?)))
    }

    /// Encodes writes of the checkpoint `target` names; returns its id with them.
    pub(super) fn encode_target_writes(
        &self,
        target: &CheckpointRef,
        writes: Vec<PendingWrite>,
    ) -> Result<(String, Vec<EncodedWrite>)> {
        text::check_ref(target)?;
        text::check_writes(&writes)?;
        let id = target
            .checkpoint_id
            .clone()
            .ok_or_else(|| Error::invalid_argument("put_writes needs a checkpoint id"))?;
        let ctx =
            crate::codec::RecordContext::checkpoint(&target.thread_id, &target.checkpoint_ns, &id);
        let encoded = self.settings.encode_writes(&ctx, writes)?;
        Ok((id, encoded))
    }
}

/// A [`WriteOp`] encoded: a bad value fails the group before any write.
enum Encoded {
    Put(Box<EncodedEntry>),
    Writes(CheckpointRef, (String, Vec<EncodedWrite>)),
    Check(WriteCheck),
}

#[async_trait]
impl<D: Backend> Saver for SqlSaver<D> {
    fn leases(&self) -> Option<&dyn crate::checkpoint::Leases> {
        Some(self)
    }

    fn rewrites(&self) -> Option<&dyn crate::checkpoint::Rewrites> {
        Some(self)
    }

    async fn get_stored(&self, target: &CheckpointRef) -> Result<Option<CheckpointTuple>> {
        text::check_ref(target)?;
        self.rechecked(async {
            let op = "get_tuple";
            self.ensure_migrated().await?;
            let mut params = vec![
                Param::Text(target.thread_id.clone()),
                Param::Text(target.checkpoint_ns.clone()),
            ];
            let mut where_ = "thread_id = $1 AND checkpoint_ns = $2".to_owned();
            let mut order = KeyOrder::Newest;
            if let Some(id) = &target.checkpoint_id {
                params.push(Param::Text(id.clone()));
                where_.push_str(" AND checkpoint_id = $3");
                order = KeyOrder::Any;
            }
            let found = self
                .fetch_tuples(&where_, params, 1, order, op)
                .await?
                .into_iter()
                .next();
            if found.is_none()
                && let Some(id) = &target.checkpoint_id
            {
                let (thread, ns) = (&target.thread_id, &target.checkpoint_ns);
                self.superseded(thread, ns, op, || {
                    format!(
                        "reading checkpoint `{id}` of thread `{thread}`, which is not the latest"
                    )
                })
                .await?;
            }
            Ok(found)
        })
        .await
    }

    async fn list_stored(&self, filter: &ListFilter) -> Result<Vec<CheckpointTuple>> {
        filter.check()?;
        self.settings
            .codec
            .check_metadata_filter(&filter.metadata)?;
        self.rechecked(async {
            let op = "list";
            self.ensure_migrated().await?;
            let before = match (&filter.before, &filter.thread_id) {
                (Some(_), None) => {
                    return Err(Error::invalid_argument(
                        "`before` needs a `thread_id` to order against",
                    ));
                }
                (Some(id), Some(thread)) => {
                    let ns = filter.checkpoint_ns.clone().unwrap_or_default();
                    let mut conn = self.pool.acquire().await.map_err(storage(op))?;
                    let order = self
                        .commit_order_of(
                            &mut conn,
                            self.settings.q.order_of.clone(),
                            (thread, &ns, id),
                            op,
                        )
                        .await?;
                    drop(conn);
                    match order {
                        Some(o) => Some(o),
                        None => {
                            self.superseded(thread, &ns, op, || {
                                format!("listing before checkpoint `{id}` of thread `{thread}`, which is not the latest")
                            })
                            .await?;
                            return Err(not_found(
                                &CheckpointRef::latest(thread.clone()).ns(ns),
                                id,
                            ));
                        }
                    }
                }
                (None, _) => None,
            };
            let (where_, params) = list_where(&self.settings.q, filter, before)?;
            let limit = filter
                .limit
                .map_or(i64::MAX, |l| i64::try_from(l).unwrap_or(i64::MAX));
            self.fetch_tuples(&where_, params, limit, KeyOrder::of(filter, limit), op)
                .await
        })
        .await
    }

    async fn put(&self, checkpoint: NewCheckpoint) -> Result<CheckpointRef> {
        self.rechecked(async {
            let e = self.settings.encode_entry(checkpoint, Vec::new())?;
            let mut out = self.write_entries(vec![e], "put").await?;
            out.pop()
                .ok_or_else(|| Error::storage("put", "no checkpoint stored"))
        })
        .await
    }

    async fn put_writes(&self, target: &CheckpointRef, writes: Vec<PendingWrite>) -> Result<()> {
        self.rechecked(async {
            let op = "put_writes";
            let encoded = self.encode_target_writes(target, writes)?;
            self.ensure_migrated().await?;
            let encoded = &encoded;
            retried(|| async move {
                // One statement (the usual case: one task's ordinary
                // writes) is atomic on its own; more run in a transaction.
                if write_batches(&encoded.1).len() <= 1 {
                    let mut lease = self.hot.lease(&self.pool).await.map_err(storage(op))?;
                    let r = self
                        .insert_writes_checked(&mut lease, target, encoded, op)
                        .await;
                    super::write::settle(&mut lease, &r);
                    return r;
                }
                let mut tx = self.begin_write(op).await?;
                self.insert_writes_checked(&mut tx, target, encoded, op)
                    .await?;
                tx.commit().await.map_err(storage(op))
            })
            .await
        })
        .await
    }

    async fn put_group(&self, ops: Vec<WriteOp>) -> Result<()> {
        self.rechecked(async {
            let op = "put_ops";
            let encoded = ops
                .into_iter()
                .map(|o| match o {
                    WriteOp::Put(c) => Ok(Encoded::Put(Box::new(
                        self.settings.encode_entry(c, Vec::new())?,
                    ))),
                    WriteOp::Writes(t, w) => {
                        let e = self.encode_target_writes(&t, w)?;
                        Ok(Encoded::Writes(t, e))
                    }
                    WriteOp::Check(c) => {
                        c.checkpoint_id()?;
                        text::check_ref(&c.target)?;
                        text::check_id("task id", &c.task_id)?;
                        Ok(Encoded::Check(c))
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            self.ensure_migrated().await?;
            // A group with a check reads before it writes: it runs op by op
            // in a transaction.
            let items: Option<Vec<GroupItem<'_>>> = encoded
                .iter()
                .map(|e| match e {
                    Encoded::Put(e) => Some(GroupItem::Entry(e)),
                    Encoded::Writes(target, (checkpoint_id, writes)) => Some(GroupItem::Writes {
                        target,
                        checkpoint_id,
                        writes,
                    }),
                    Encoded::Check(_) => None,
                })
                .collect();
            let (items, encoded) = (&items, &encoded);
            retried(|| async move {
                if let Some(items) = items
                    && self.try_group(items, op).await?
                {
                    return Ok(());
                }
                let mut tx = self.begin_write(op).await?;
                for e in encoded {
                    match e {
                        Encoded::Put(e) => {
                            self.insert_entry(&mut tx, e, op).await?;
                        }
                        Encoded::Writes(t, w) => {
                            self.insert_writes_checked(&mut tx, t, w, op).await?
                        }
                        Encoded::Check(c) => self.check_write(&mut tx, c, op).await?,
                    }
                }
                tx.commit().await.map_err(storage(op))
            })
            .await
        })
        .await
    }

    async fn put_checkpoint_with_writes(
        &self,
        checkpoint: NewCheckpoint,
        writes: Vec<PendingWrite>,
    ) -> Result<CheckpointRef> {
        self.rechecked(async {
            let op = "put_checkpoint_with_writes";
            let e = self.settings.encode_entry(checkpoint, writes)?;
            let mut out = self.write_entries(vec![e], op).await?;
            out.pop()
                .ok_or_else(|| Error::storage(op, "no checkpoint stored"))
        })
        .await
    }

    async fn put_batch(&self, entries: Vec<BatchEntry>) -> Result<Vec<CheckpointRef>> {
        self.rechecked(async {
            let encoded = entries
                .into_iter()
                .map(|e| self.settings.encode_entry(e.checkpoint, e.writes))
                .collect::<Result<Vec<_>>>()?;
            self.write_entries(encoded, "put_many").await
        })
        .await
    }

    async fn fork_lineage(
        &self,
        source: &CheckpointRef,
        target_thread: &str,
        options: ForkOptions,
    ) -> Result<CheckpointRef> {
        text::check_ref(source)?;
        text::check_new_thread(target_thread)?;
        self.rechecked(self.fork(source, target_thread, options))
            .await
    }

    async fn copy_thread(&self, source_thread: &str, target_thread: &str) -> Result<()> {
        text::check_id("thread id", source_thread)?;
        text::check_new_thread(target_thread)?;
        self.rechecked(self.copy(source_thread, target_thread))
            .await
    }

    async fn delete_thread(&self, thread_id: &str) -> Result<()> {
        text::check_id("thread id", thread_id)?;
        // Cached values of this process no longer hold once the thread's
        // ids may be stored again.
        let thread = [thread_id.to_owned()];
        let _deleted = DeletionNote(&self.state, &thread);
        self.rechecked(async {
            let op = "delete_thread";
            self.ensure_migrated().await?;
            retried(|| async move {
                let mut tx = self.begin_write(op).await?;
                self.delete_thread_in(&mut tx, thread_id, op).await?;
                tx.commit().await.map_err(storage(op))
            })
            .await
        })
        .await
    }

    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> Result<u64> {
        let keep = strategy.keep()?;
        for t in thread_ids {
            text::check_id("thread id", t)?;
        }
        let _deleted = keep
            .is_none()
            .then_some(DeletionNote(&self.state, thread_ids));
        self.rechecked(async {
            let op = "prune";
            self.ensure_migrated().await?;
            retried(|| async move {
                let mut tx = self.begin_write(op).await?;
                let mut deleted = 0u64;
                for t in thread_ids {
                    deleted += match keep {
                        Some(keep) => self.keep_last(&mut tx, t, keep, op).await?,
                        None => self.delete_thread_in(&mut tx, t, op).await?,
                    };
                }
                tx.commit().await.map_err(storage(op))?;
                Ok(deleted)
            })
            .await
        })
        .await
    }

    async fn lineage(
        &self,
        from: &CheckpointRef,
        count: usize,
        below: Option<u64>,
    ) -> Result<Vec<CheckpointTuple>> {
        self.rechecked(async {
            let mut lines = self
                .lineages(&[LineageRequest::new(from.clone(), count, below)])
                .await?;
            Ok(lines.pop().unwrap_or_default())
        })
        .await
    }

    async fn lineages(&self, requests: &[LineageRequest]) -> Result<Vec<Vec<CheckpointTuple>>> {
        for r in requests {
            text::check_ref(&r.from)?;
        }
        self.rechecked(self.read_lineages(requests)).await
    }

    fn supports_deltas(&self) -> bool {
        self.settings.history.keeps_all()
    }

    fn shared_state(&self) -> Option<Arc<SaverState>> {
        Some(self.state.clone())
    }

    async fn list_threads(&self, limit: Option<usize>, offset: usize) -> Result<Vec<ThreadInfo>> {
        self.rechecked(async {
            let op = "list_threads";
            self.ensure_migrated().await?;
            let limit = limit.map_or(i64::MAX, |l| i64::try_from(l).unwrap_or(i64::MAX));
            let offset = i64::try_from(offset).unwrap_or(i64::MAX);
            let rows = self
                .pool_rows(
                    self.settings.q.list_threads.clone(),
                    [Arg::Int(limit), Arg::Int(offset)],
                    op,
                )
                .await?;
            rows.iter()
                .map(|row| {
                    let thread: String = Self::get(row, "thread_id", op)?;
                    Self::thread_row(&thread, row, op)?
                        .ok_or_else(|| Error::storage(op, "a listed thread without checkpoints"))
                })
                .collect()
        })
        .await
    }

    async fn thread_info(&self, thread_id: &str) -> Result<Option<ThreadInfo>> {
        text::check_id("thread id", thread_id)?;
        self.rechecked(async {
            let op = "thread_info";
            self.ensure_migrated().await?;
            let row = self
                .pool_row(
                    self.settings.q.thread_count.clone(),
                    [Arg::Text(thread_id)],
                    op,
                )
                .await?;
            match &row {
                Some(row) => Self::thread_row(thread_id, row, op),
                None => Ok(None),
            }
        })
        .await
    }

    async fn at_commit_order(
        &self,
        thread_id: &str,
        checkpoint_ns: &str,
        commit_order: u64,
    ) -> Result<Option<CheckpointRef>> {
        text::check_id("thread id", thread_id)?;
        text::check_id("checkpoint namespace", checkpoint_ns)?;
        self.rechecked(async {
            let op = "at_commit_order";
            self.ensure_migrated().await?;
            // SQL stores commit orders up to i64::MAX: none is above.
            let Ok(order) = i64::try_from(commit_order) else {
                return Ok(None);
            };
            let row = self
                .pool_row(
                    self.settings.q.id_at_order.clone(),
                    [
                        Arg::Text(thread_id),
                        Arg::Text(checkpoint_ns),
                        Arg::Int(order),
                    ],
                    op,
                )
                .await?;
            let id: Option<String> = row.map(|r| Self::get(&r, 0, op)).transpose()?;
            Ok(id.map(|id| CheckpointRef {
                thread_id: thread_id.to_owned(),
                checkpoint_ns: checkpoint_ns.to_owned(),
                checkpoint_id: Some(id),
            }))
        })
        .await
    }
}
