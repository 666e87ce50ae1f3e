//! Fresh databases for each test.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, PgPool, SqlitePool};
use weaver::checkpoint::{
    Checkpoint, CheckpointMetadata, CheckpointSource, CheckpointTuple, NewCheckpoint,
    PostgresSaver, SqliteSaver,
};
use weaver::migrate::{self, Adapter, PgSchema};
use weaver::{InMemorySaver, Saver};
use weaver_tests::TempSqlite;
pub use weaver_tests::forwarding::Forwarding;

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
