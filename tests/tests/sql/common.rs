//! Fresh databases for each test.

use std::path::PathBuf;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, PgPool, SqlitePool};
use weaver::checkpoint::{
    Checkpoint, CheckpointMetadata, CheckpointSource, NewCheckpoint, PostgresSaver, SqliteSaver,
};
use weaver::migrate::{self, Adapter, PgSchema};

/// The PostgreSQL the tests use.
pub fn pg_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A fresh SQLite file, removed on drop.
pub struct SqliteDb {
    pub path: PathBuf,
    pub pool: SqlitePool,
}

impl SqliteDb {
    pub async fn new() -> Self {
        let path = std::env::temp_dir().join(format!("weaver-test-{}.db", uuid::Uuid::now_v7()));
        let url = format!("sqlite://{}", path.display());
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(SqliteSaver::connect_options(&url).unwrap())
            .await
            .unwrap();
        SqliteDb { path, pool }
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

impl Drop for SqliteDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = self.path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
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
        let pool = PgPoolOptions::new()
            .max_connections(10)
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
