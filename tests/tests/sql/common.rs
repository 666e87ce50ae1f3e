//! Fresh databases for each test.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, PgPool, SqlitePool};
use weaver::checkpoint::{
    Acquired, BatchEntry, Checkpoint, CheckpointMetadata, CheckpointRef, CheckpointSource,
    CheckpointTuple, ForkOptions, LeaseInfo, LeaseRequest, Leases, LineageRequest, ListFilter,
    NewCheckpoint, PendingWrite, PostgresSaver, PruneStrategy, Renewed, SqliteSaver, Stop,
    ThreadInfo, WriteOp,
};
use weaver::migrate::{self, Adapter, PgSchema};
use weaver::{InMemorySaver, Saver};
use weaver_tests::TempSqlite;

/// The PostgreSQL the tests use.
pub fn pg_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A fresh SQLite file, removed on drop.
pub struct SqliteDb {
    pub path: PathBuf,
    pub pool: SqlitePool,
    _file: TempSqlite,
}

impl SqliteDb {
    pub async fn new() -> Self {
        let file = TempSqlite::new("weaver-test");
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(SqliteSaver::connect_options(&file.url()).unwrap())
            .await
            .unwrap();
        SqliteDb {
            path: file.path.clone(),
            pool,
            _file: file,
        }
    }

    /// A saver on the migrated database.
    pub async fn saver(&self) -> SqliteSaver {
        migrate::up(&self.pool, &[Adapter::Checkpoint], None)
            .await
            .unwrap();
        SqliteSaver::new(self.pool.clone())
    }

    /// The connect options weaver recommends, for this file.
    pub fn connect_options(&self) -> SqliteConnectOptions {
        SqliteSaver::connect_options(&format!("sqlite://{}", self.path.display())).unwrap()
    }

    /// A saver on a pool of its own (built from `pool`, connecting with
    /// `options`) on the migrated database; `saver.pool()` reaches it.
    pub async fn saver_on(
        &self,
        pool: SqlitePoolOptions,
        options: SqliteConnectOptions,
    ) -> SqliteSaver {
        let pool = pool.connect_with(options).await.unwrap();
        migrate::up(&pool, &[Adapter::Checkpoint], None)
            .await
            .unwrap();
        SqliteSaver::new(pool)
    }
}

/// A fresh PostgreSQL schema, dropped by [`PgDb::drop_schema`].
pub struct PgDb {
    pub pool: PgPool,
    pub schema: String,
}

impl PgDb {
    pub async fn new() -> Self {
        let url = pg_url();
        // Idle connections close after a second: a test holding many of
        // these pools at once (the conformance suite keeps one per case
        // until its end) would otherwise keep their connections open
        // against the server's limit.
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .idle_timeout(std::time::Duration::from_secs(1))
            .connect(&url)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "PostgreSQL is unreachable at {url} ({e}): start it or set DATABASE_URL; SQL tests never skip"
                )
            });
        let schema = format!("weaver_t_{}", uuid::Uuid::now_v7().simple());
        PgDb { pool, schema }
    }

    pub fn target(&self) -> PgSchema<'_> {
        PgSchema::new(&self.pool, &self.schema).unwrap()
    }

    /// A saver on the migrated schema.
    pub async fn saver(&self) -> PostgresSaver {
        migrate::up(&self.target(), &[Adapter::Checkpoint], None)
            .await
            .unwrap();
        PostgresSaver::new(self.pool.clone())
            .with_prefix(&self.schema)
            .unwrap()
    }

    /// A saver on a pool of its own (built from `pool`, connecting with
    /// `options`) on the migrated schema; `saver.pool()` reaches it.
    /// How many tables this schema holds.
    pub async fn table_count(&self) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = $1")
            .bind(&self.schema)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// Waits (up to 5 s) until `n` sessions wait for a lock in a statement
    /// on this schema whose text contains `table`.
    pub async fn lock_waits(&self, table: &str, n: i64) {
        let sql = format!(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%{}%{table}%'",
            self.schema
        );
        for _ in 0..500 {
            let now: i64 = sqlx::query_scalar(AssertSqlSafe(sql.clone()))
                .fetch_one(&self.pool)
                .await
                .unwrap();
            if now >= n {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    pub async fn saver_on(&self, pool: PgPoolOptions, options: PgConnectOptions) -> PostgresSaver {
        migrate::up(&self.target(), &[Adapter::Checkpoint], None)
            .await
            .unwrap();
        let pool = pool.connect_with(options).await.unwrap();
        PostgresSaver::new(pool).with_prefix(&self.schema).unwrap()
    }

    pub async fn drop_schema(self) {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
            self.schema
        )))
        .execute(&self.pool)
        .await
        .unwrap();
        self.pool.close().await;
    }
}

/// Asserts `records` (oldest first) are one chain: commit orders 1, 2, ...,
/// each record's parent the record before it. `ctx` names the case.
pub fn assert_one_chain(records: &[CheckpointTuple], ctx: &str) {
    for (i, t) in records.iter().enumerate() {
        assert_eq!(t.commit_order, i as u64 + 1, "{ctx}: commit orders");
        let parent = t
            .parent_config
            .as_ref()
            .and_then(|p| p.checkpoint_id.clone());
        assert_eq!(
            parent,
            (i > 0).then(|| records[i - 1].checkpoint.id.clone()),
            "{ctx}: one chain"
        );
    }
}

/// A checkpoint for `thread` with explicit id and commit order.
pub fn cp(thread: &str, id: &str, parent: Option<&str>, order: Option<u64>) -> NewCheckpoint {
    let mut checkpoint = Checkpoint::empty();
    checkpoint.id = id.to_owned();
    checkpoint.ts = "2026-01-01T00:00:00.000000+00:00".to_owned();
    checkpoint
        .channel_values
        .insert("foo".into(), serde_json::json!(format!("value of {id}")));
    checkpoint.channel_versions.insert("foo".into(), 1);
    let mut metadata = CheckpointMetadata::new(CheckpointSource::Loop, 0);
    metadata
        .extra
        .insert("writer".into(), serde_json::json!(id));
    NewCheckpoint {
        thread_id: thread.to_owned(),
        checkpoint_ns: String::new(),
        parent_id: parent.map(str::to_owned),
        checkpoint,
        metadata,
        commit_order: order,
    }
}

/// A saver as a third party would write one: the trait's default `lineage`
/// (one `get_tuple` per record), and deltas only when it opts in. Counts the
/// reads of stored records and the `lineages` calls, which go to the inner
/// saver's own when `inner_lineages` is set. Logs each write call (`put`,
/// `put_writes`, `put_ops` with its ops) in `writes`, and fails every
/// `put_ops` with a storage error while `fail_groups` is set. While
/// `intrude` is set, the next `put_many` is preceded by another writer's
/// commit at its first entry's commit order (as when another process's
/// turn lands between reading the head and writing), and `intrude` clears.
/// While `slow_final` is set, `put_checkpoint_with_writes` (the `exit`
/// durability's write when a run stops) first waits 50 ms, as a saver
/// waiting for a busy database does. After [`gate`](Forwarding::gate)`(n)`,
/// the next `n` reads of a thread's latest checkpoint wait until all `n`
/// have read it (runs racing on one thread, each having read the same
/// head before any of them writes). It takes no lease unless
/// `forward_leases` is set (then the inner saver's); after
/// [`gate_release`](Forwarding::gate_release) a lease's release first says
/// it was entered and waits until the gate is opened.
#[derive(Debug)]
pub struct Forwarding {
    pub inner: Arc<dyn Saver>,
    pub deltas: bool,
    pub inner_lineages: bool,
    pub reads: AtomicUsize,
    pub lineages_calls: AtomicUsize,
    pub writes: Mutex<Vec<String>>,
    pub fail_groups: AtomicBool,
    pub intrude: AtomicBool,
    pub slow_final: AtomicBool,
    pub latest_gate: Mutex<Option<(Arc<tokio::sync::Barrier>, usize)>>,
    pub forward_leases: bool,
    pub release_gate: Mutex<Option<ReleaseGate>>,
}

/// Holds lease releases back ([`Forwarding::gate_release`]).
#[derive(Debug, Clone)]
pub struct ReleaseGate {
    /// Notified when a release call is entered.
    pub entered: Arc<tokio::sync::Notify>,
    /// A release goes on once it takes a permit.
    pub open: Arc<tokio::sync::Semaphore>,
}

impl Default for Forwarding {
    fn default() -> Self {
        Forwarding::on(Arc::new(InMemorySaver::new()))
    }
}

impl Forwarding {
    /// Forwards to `inner`.
    pub fn on(inner: Arc<dyn Saver>) -> Self {
        Forwarding {
            inner,
            deltas: false,
            inner_lineages: false,
            reads: AtomicUsize::new(0),
            lineages_calls: AtomicUsize::new(0),
            writes: Mutex::new(Vec::new()),
            fail_groups: AtomicBool::new(false),
            intrude: AtomicBool::new(false),
            slow_final: AtomicBool::new(false),
            latest_gate: Mutex::new(None),
            forward_leases: false,
            release_gate: Mutex::new(None),
        }
    }

    /// Makes every lease release wait for a permit of the gate returned
    /// (none yet), after notifying it was entered.
    pub fn gate_release(&self) -> ReleaseGate {
        let gate = ReleaseGate {
            entered: Arc::new(tokio::sync::Notify::new()),
            open: Arc::new(tokio::sync::Semaphore::new(0)),
        };
        *self.release_gate.lock().unwrap_or_else(|e| e.into_inner()) = Some(gate.clone());
        gate
    }

    fn inner_leases(&self) -> weaver::Result<&dyn Leases> {
        self.inner
            .leases()
            .ok_or_else(|| weaver::Error::invalid_argument("the inner saver has no leases"))
    }

    /// Makes the next `n` reads of a latest checkpoint wait for each other.
    pub fn gate(&self, n: usize) {
        *self.latest_gate.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Arc::new(tokio::sync::Barrier::new(n)), n));
    }

    fn log(&self, call: String) {
        self.writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(call);
    }
}

#[async_trait]
impl Saver for Forwarding {
    async fn lineages(
        &self,
        requests: &[LineageRequest],
    ) -> weaver::Result<Vec<Vec<CheckpointTuple>>> {
        self.lineages_calls.fetch_add(1, Ordering::SeqCst);
        if self.inner_lineages {
            return self.inner.lineages(requests).await;
        }
        let mut out = Vec::new();
        for r in requests {
            out.push(self.lineage(&r.from, r.count, r.below).await?);
        }
        Ok(out)
    }
    async fn get_stored(&self, target: &CheckpointRef) -> weaver::Result<Option<CheckpointTuple>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let read = self.inner.get_stored(target).await;
        let barrier = match &mut *self.latest_gate.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((barrier, left)) if target.checkpoint_id.is_none() && *left > 0 => {
                *left -= 1;
                Some(barrier.clone())
            }
            _ => None,
        };
        if let Some(barrier) = barrier {
            barrier.wait().await;
        }
        read
    }
    async fn list_stored(&self, filter: &ListFilter) -> weaver::Result<Vec<CheckpointTuple>> {
        self.inner.list_stored(filter).await
    }
    async fn put(&self, checkpoint: NewCheckpoint) -> weaver::Result<CheckpointRef> {
        self.log("put".into());
        self.inner.put(checkpoint).await
    }
    async fn put_writes(
        &self,
        target: &CheckpointRef,
        writes: Vec<PendingWrite>,
    ) -> weaver::Result<()> {
        self.log("put_writes".into());
        self.inner.put_writes(target, writes).await
    }
    async fn put_checkpoint_with_writes(
        &self,
        checkpoint: NewCheckpoint,
        writes: Vec<PendingWrite>,
    ) -> weaver::Result<CheckpointRef> {
        if self.slow_final.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        self.inner
            .put_checkpoint_with_writes(checkpoint, writes)
            .await
    }
    async fn put_many(&self, entries: Vec<BatchEntry>) -> weaver::Result<Vec<CheckpointRef>> {
        if let Some(first) = entries.first().map(|b| &b.checkpoint)
            && self.intrude.swap(false, Ordering::SeqCst)
        {
            let mut other = first.clone();
            other.checkpoint.id = format!("intruder-{}", first.checkpoint.id);
            other.metadata.extra.clear();
            other.metadata.source = CheckpointSource::Loop;
            self.inner.put(other).await?;
        }
        self.inner.put_many(entries).await
    }
    async fn put_batch(&self, entries: Vec<BatchEntry>) -> weaver::Result<Vec<CheckpointRef>> {
        self.inner.put_batch(entries).await
    }
    async fn fork_lineage(
        &self,
        source: &CheckpointRef,
        target_thread: &str,
        options: ForkOptions,
    ) -> weaver::Result<CheckpointRef> {
        self.inner
            .fork_lineage(source, target_thread, options)
            .await
    }
    async fn fork_at(
        &self,
        source: &CheckpointRef,
        target_thread: &str,
        options: ForkOptions,
    ) -> weaver::Result<CheckpointRef> {
        self.inner.fork_at(source, target_thread, options).await
    }
    async fn copy_thread(&self, source_thread: &str, target_thread: &str) -> weaver::Result<()> {
        self.inner.copy_thread(source_thread, target_thread).await
    }
    async fn delete_thread(&self, thread_id: &str) -> weaver::Result<()> {
        self.inner.delete_thread(thread_id).await
    }
    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> weaver::Result<u64> {
        self.inner.prune(thread_ids, strategy).await
    }
    async fn list_threads(
        &self,
        limit: Option<usize>,
        offset: usize,
    ) -> weaver::Result<Vec<ThreadInfo>> {
        self.inner.list_threads(limit, offset).await
    }
    async fn put_ops(&self, ops: Vec<WriteOp>) -> weaver::Result<()> {
        let names: Vec<&str> = ops
            .iter()
            .map(|op| match op {
                WriteOp::Put(_) => "put",
                WriteOp::Writes(..) => "writes",
                WriteOp::Check(..) => "check",
            })
            .collect();
        self.log(format!("put_ops[{}]", names.join(", ")));
        if self.fail_groups.load(Ordering::SeqCst) {
            return Err(weaver::Error::storage("put_ops", "the group failed (test)"));
        }
        self.inner.put_ops(ops).await
    }
    fn supports_deltas(&self) -> bool {
        self.deltas
    }
    fn leases(&self) -> Option<&dyn Leases> {
        self.forward_leases.then_some(self as &dyn Leases)
    }
}

#[async_trait]
impl Leases for Forwarding {
    async fn acquire(&self, request: &LeaseRequest<'_>) -> weaver::Result<Acquired> {
        self.inner_leases()?.acquire(request).await
    }
    async fn renew(
        &self,
        thread_id: &str,
        holder: &str,
        lease: std::time::Duration,
    ) -> weaver::Result<Renewed> {
        self.inner_leases()?.renew(thread_id, holder, lease).await
    }
    async fn release(&self, thread_id: &str, holder: &str, stopped: bool) -> weaver::Result<()> {
        let gate = self
            .release_gate
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(gate) = gate {
            gate.entered.notify_one();
            let _permit = gate.open.acquire().await;
        }
        self.inner_leases()?
            .release(thread_id, holder, stopped)
            .await
    }
    async fn request_stop(&self, thread_id: &str, holder: &str, stop: Stop) -> weaver::Result<()> {
        self.inner_leases()?
            .request_stop(thread_id, holder, stop)
            .await
    }
    async fn leave_queue(&self, thread_id: &str, ticket: i64) -> weaver::Result<()> {
        self.inner_leases()?.leave_queue(thread_id, ticket).await
    }
    async fn lease_info(&self, thread_id: &str) -> weaver::Result<Option<LeaseInfo>> {
        self.inner_leases()?.lease_info(thread_id).await
    }
    async fn truncate(&self, thread_id: &str, holder: &str, above: u64) -> weaver::Result<u64> {
        self.inner_leases()?
            .truncate(thread_id, holder, above)
            .await
    }
}

/// W1's graph (START → node_a → node_b → END) on `saver`.
pub fn two_step(saver: Arc<dyn Saver>) -> weaver::CompiledGraph<weaver_tests::states::Steps> {
    use weaver::prelude::*;
    use weaver_tests::states::{Steps, StepsUpdate};
    Graph::<Steps>::new("two_step")
        .add_node("node_a", |_: &Steps| {
            StepsUpdate::default().foo("a").bar(["a"])
        })
        .add_node("node_b", |_: &Steps| {
            StepsUpdate::default().foo("b").bar(["b"])
        })
        .add_sequence([START, "node_a", "node_b", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

/// A chat state whose messages are a delta channel, and a turn count.
#[derive(
    weaver::GraphState, Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize,
)]
pub struct Chat {
    #[reducer(delta)]
    pub messages: Vec<String>,
    pub turns: u32,
}

/// One `chat` node that answers the last message (`ai re <it>`) and counts
/// the turn, on `saver`.
pub fn chat(saver: Arc<dyn Saver>) -> weaver::CompiledGraph<Chat> {
    chat_counting(saver, Arc::default())
}

/// [`chat`], with `runs` counting the runs of its node.
pub fn chat_counting(saver: Arc<dyn Saver>, runs: Arc<AtomicUsize>) -> weaver::CompiledGraph<Chat> {
    use weaver::prelude::*;
    Graph::<Chat>::new("chat")
        .add_node("chat", move |s: &Chat| {
            runs.fetch_add(1, Ordering::SeqCst);
            let last = s.messages.last().cloned().unwrap_or_default();
            ChatUpdate::default()
                .messages(vec![format!("ai re {last}")])
                .turns(s.turns + 1)
        })
        .add_sequence([START, "chat", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

/// A user turn of [`chat`]: the message `user <i>`.
pub fn user(i: usize) -> ChatUpdate {
    ChatUpdate::default().messages(vec![format!("user {i}")])
}

/// [`chat`]'s messages after `turns` turns of [`user`] messages.
pub fn transcript(turns: usize) -> Vec<String> {
    (0..turns)
        .flat_map(|i| [format!("user {i}"), format!("ai re user {i}")])
        .collect()
}

/// A saver of each kind: in memory, on a fresh SQLite file, on a fresh
/// PostgreSQL schema (dropped by [`EverySaver::done`]).
pub struct EverySaver {
    pub savers: Vec<(&'static str, Arc<dyn Saver>)>,
    pub _sqlite: SqliteDb,
    pub pg: PgDb,
}

impl EverySaver {
    pub async fn new() -> Self {
        let sqlite = SqliteDb::new().await;
        let pg = PgDb::new().await;
        let savers: Vec<(&'static str, Arc<dyn Saver>)> = vec![
            ("memory", Arc::new(InMemorySaver::new())),
            ("sqlite", Arc::new(sqlite.saver().await)),
            ("postgres", Arc::new(pg.saver().await)),
        ];
        EverySaver {
            savers,
            _sqlite: sqlite,
            pg,
        }
    }

    pub async fn done(self) {
        drop(self.savers);
        self.pg.drop_schema().await;
    }
}

/// Threads and their counts: the times a saver recorded differ between
/// savers, but every one of weaver's records them, the oldest first.
pub fn counts(
    listed: weaver::Result<Vec<weaver::checkpoint::ThreadInfo>>,
) -> weaver::Result<Vec<(String, u64)>> {
    listed.map(|threads| {
        threads
            .into_iter()
            .map(|t| {
                let (created, updated) = (t.created_at.unwrap(), t.updated_at.unwrap());
                assert!(created <= updated, "{t:?}");
                (t.thread_id, t.checkpoints)
            })
            .collect()
    })
}
