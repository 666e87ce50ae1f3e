//! Migrations: v1 → v2 upgrade with data, down/up round trips, concurrent `up`.

use sqlx::AssertSqlSafe;
use weaver::checkpoint::{CheckpointRef, ForkOptions, ListFilter};
use weaver::migrate::{self, Adapter, Change, Dialect};
use weaver::{Error, Saver};

use crate::common::{PgDb, SqliteDb, cp};

const CK: &[Adapter] = &[Adapter::Checkpoint];

/// Rows as a version-1 writer left them: ids deliberately not in insertion
/// order, so the backfill must follow insertion order, not ids.
const V1_ROWS: &[(&str, &str, Option<&str>)] = &[
    ("t1", "zz-first", None),
    ("t1", "aa-second", Some("zz-first")),
    ("t1", "mm-third", Some("aa-second")),
    ("t2", "only", None),
];

async fn check_upgraded(saver: &dyn Saver) {
    let hist = saver.list(&ListFilter::thread("t1")).await.unwrap();
    let ids: Vec<_> = hist.iter().map(|t| t.checkpoint.id.as_str()).collect();
    assert_eq!(ids, ["mm-third", "aa-second", "zz-first"]);
    let orders: Vec<_> = hist.iter().map(|t| t.commit_order).collect();
    assert_eq!(orders, [3, 2, 1]);
    let head = saver
        .get_tuple(&CheckpointRef::latest("t1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.checkpoint.id, "mm-third");
    assert_eq!(head.pending_writes.len(), 1);
    assert_eq!(
        saver
            .get_tuple(&CheckpointRef::latest("t2"))
            .await
            .unwrap()
            .unwrap()
            .commit_order,
        1
    );
    // Forks follow the preserved lineage; new commits continue the numbering.
    saver
        .fork_at(
            &CheckpointRef::latest("t1").at("aa-second"),
            "fork",
            ForkOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        saver.list(&ListFilter::thread("fork")).await.unwrap().len(),
        2
    );
    saver
        .put(cp("t1", "next", Some("mm-third"), Some(4)))
        .await
        .unwrap();
    assert!(matches!(
        saver.put(cp("t1", "dup", Some("mm-third"), Some(4))).await,
        Err(Error::VersionConflict { attempted: 4, .. })
    ));
}

/// [`V1_ROWS`] and a pending write of `mm-third`, as a version-1 SQLite
/// writer stored them.
async fn sqlite_v1_rows(db: &SqliteDb) {
    for (thread, id, parent) in V1_ROWS {
        let c = cp(thread, id, *parent, None);
        sqlx::query("INSERT INTO weaver_checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata) VALUES ($1, '', $2, $3, $4, $5)")
            .bind(thread).bind(id).bind(parent).bind(serde_json::to_vec(&c.checkpoint).unwrap())
            .bind(serde_json::to_string(&c.metadata).unwrap())
            .execute(&db.pool).await.unwrap();
    }
    sqlx::query("INSERT INTO weaver_checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, value) VALUES ('t1', '', 'mm-third', 'task', 0, 'foo', 'n', '1')")
        .execute(&db.pool).await.unwrap();
}

/// [`sqlite_v1_rows`] on PostgreSQL, in `db`'s schema.
async fn postgres_v1_rows(db: &PgDb) {
    let s = &db.schema;
    for (thread, id, parent) in V1_ROWS {
        let c = cp(thread, id, *parent, None);
        sqlx::query(AssertSqlSafe(format!("INSERT INTO \"{s}\".weaver_checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata) VALUES ($1, '', $2, $3, $4, CAST($5 AS JSONB))")))
            .bind(thread).bind(id).bind(parent).bind(serde_json::to_vec(&c.checkpoint).unwrap())
            .bind(serde_json::to_string(&c.metadata).unwrap())
            .execute(&db.pool).await.unwrap();
    }
    sqlx::query(AssertSqlSafe(format!("INSERT INTO \"{s}\".weaver_checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, value) VALUES ('t1', '', 'mm-third', 'task', 0, 'foo', 'n', '1')")))
        .execute(&db.pool).await.unwrap();
}

#[tokio::test]
async fn sqlite_v1_data_survives_upgrade() {
    let db = SqliteDb::new().await;
    migrate::up(&db.pool, CK, Some(1)).await.unwrap();
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [1]);
    let plain = weaver::checkpoint::SqliteSaver::new(db.pool.clone());
    assert!(matches!(
        plain.list(&ListFilter::all()).await,
        Err(Error::MigrationRequired {
            found: 1,
            required: 8,
            ..
        })
    ));
    sqlite_v1_rows(&db).await;
    migrate::up(&db.pool, CK, None).await.unwrap();
    migrate::up(&db.pool, CK, None).await.unwrap(); // idempotent
    migrate::verify_migrated(&db.pool, CK).await.unwrap();
    check_upgraded(&weaver::checkpoint::SqliteSaver::new(db.pool.clone())).await;
    // down 2 reverts only v2: rows stay, commit_order goes.
    migrate::down(&db.pool, CK, 2).await.unwrap();
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [1]);
    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM weaver_checkpoints")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 7);
    migrate::up(&db.pool, CK, None).await.unwrap();
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [8]);
    // down 3 reverts v4 (the table rebuilt, rows kept) and v3 (nothing on
    // SQLite).
    migrate::down(&db.pool, CK, 3).await.unwrap();
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [2]);
    migrate::up(&db.pool, CK, None).await.unwrap();
    // down 1 removes everything, marker included.
    migrate::down(&db.pool, CK, 1).await.unwrap();
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [0]);
    let tables: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'weaver_%'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(tables, 0);
    assert!(matches!(
        migrate::up(&db.pool, CK, Some(9)).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        migrate::down(&db.pool, CK, 0).await,
        Err(Error::InvalidArgument { .. })
    ));
}

#[tokio::test]
async fn postgres_v1_data_survives_upgrade() {
    let db = PgDb::new().await;
    let target = db.target();
    migrate::up(&target, CK, Some(1)).await.unwrap();
    let s = &db.schema;
    postgres_v1_rows(&db).await;
    let err = migrate::verify_migrated(&target, CK).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::MigrationRequired {
                found: 1,
                required: 8,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("migrate::up"), "{err}");
    migrate::up(&target, CK, None).await.unwrap();
    migrate::up(&target, CK, None).await.unwrap();
    let saver = weaver::checkpoint::PostgresSaver::new(db.pool.clone())
        .with_prefix(s)
        .unwrap();
    check_upgraded(&saver).await;
    migrate::down(&target, CK, 2).await.unwrap();
    assert_eq!(migrate::versions(&target, CK).await.unwrap(), [1]);
    migrate::up(&target, CK, None).await.unwrap();
    migrate::down(&target, CK, 1).await.unwrap();
    assert_eq!(migrate::versions(&target, CK).await.unwrap(), [0]);
    let left = db.table_count().await;
    assert_eq!(left, 0);
    assert!(weaver::migrate::PgSchema::new(&db.pool, "bad-name; DROP").is_err());
    db.drop_schema().await;
}

#[tokio::test]
async fn concurrent_up_sqlite() {
    let db = SqliteDb::new().await;
    let (a, b) = tokio::join!(
        migrate::up(&db.pool, CK, None),
        migrate::up(&db.pool, CK, None)
    );
    a.unwrap();
    b.unwrap();
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [8]);
}

#[tokio::test]
async fn concurrent_up_postgres() {
    let db = PgDb::new().await;
    let t1 = db.target();
    let t2 = db.target();
    let (a, b, c) = tokio::join!(
        migrate::up(&t1, CK, None),
        migrate::up(&t2, CK, None),
        migrate::up(&t1, CK, Some(1))
    );
    a.unwrap();
    b.unwrap();
    c.unwrap();
    assert_eq!(migrate::versions(&t1, CK).await.unwrap(), [8]);
    db.drop_schema().await;
}

/// How PostgreSQL stores the two payload columns (`attstorage`: `e`
/// external, uncompressed; `x` extended, compressed when it pays).
async fn payload_storage(db: &PgDb) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT a.attstorage::text FROM pg_attribute a
           JOIN pg_class c ON c.oid = a.attrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = $1
            AND ((c.relname = 'weaver_checkpoints' AND a.attname = 'checkpoint')
              OR (c.relname = 'weaver_checkpoint_writes' AND a.attname = 'value'))
          ORDER BY c.relname",
    )
    .bind(&db.schema)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn postgres_v3_stores_payloads_uncompressed() {
    let db = PgDb::new().await;
    let target = db.target();
    migrate::up(&target, CK, Some(2)).await.unwrap();
    assert_eq!(payload_storage(&db).await, ["x", "x"]);
    migrate::up(&target, CK, None).await.unwrap();
    assert_eq!(migrate::versions(&target, CK).await.unwrap(), [8]);
    assert_eq!(payload_storage(&db).await, ["e", "e"]);
    // A large, very compressible payload is stored at full size.
    let saver = db.saver().await;
    let mut big = cp("t", "big", None, Some(1));
    big.checkpoint
        .channel_values
        .insert("text".into(), serde_json::json!("a".repeat(256 * 1024)));
    saver.put(big).await.unwrap();
    let size: i32 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT pg_column_size(checkpoint) FROM \"{}\".weaver_checkpoints",
        db.schema
    )))
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(size > 256 * 1024, "payload was compressed to {size} bytes");
    migrate::down(&target, CK, 3).await.unwrap();
    assert_eq!(migrate::versions(&target, CK).await.unwrap(), [2]);
    assert_eq!(payload_storage(&db).await, ["x", "x"]);
    drop(saver);
    db.drop_schema().await;
}

/// Runs `statements` in one transaction, as a foreign migration tool would
/// (an Ecto migration's `execute/1` calls); the first failure is returned.
pub(crate) async fn run_script<DB>(
    pool: &sqlx::Pool<DB>,
    statements: Vec<String>,
) -> Result<(), sqlx::Error>
where
    DB: sqlx::Database,
    for<'e> &'e mut <DB as sqlx::Database>::Connection: sqlx::Executor<'e, Database = DB>,
{
    let mut tx = pool.begin().await?;
    for statement in statements {
        sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await
}

const UP: Change = Change::Up { target: None };

#[tokio::test]
async fn a_script_run_by_another_tool_migrates_as_weaver_does_on_sqlite() {
    let db = SqliteDb::new().await;
    let script = |current, change| {
        migrate::script(Dialect::Sqlite, Adapter::Checkpoint, current, change, None).unwrap()
    };
    run_script(&db.pool, script(0, Change::Up { target: Some(1) }))
        .await
        .unwrap();
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [1]);
    sqlite_v1_rows(&db).await;
    run_script(&db.pool, script(1, UP)).await.unwrap();
    migrate::verify_migrated(&db.pool, CK).await.unwrap();
    check_upgraded(&weaver::checkpoint::SqliteSaver::new(db.pool.clone())).await;
    // The same script again finds version 8, not 1: refused, nothing changed.
    let err = run_script(&db.pool, script(1, UP)).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("weaver_checkpoint_schema_is_at_version_1"),
        "{err}"
    );
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [8]);
    // weaver's own `up` sees the script's marker: nothing left to do.
    migrate::up(&db.pool, CK, None).await.unwrap();
    // A stale script run statement by statement, outside a transaction,
    // stops at its check and leaves the check's table on the connection;
    // the next script on that connection runs all the same.
    let mut conn = db.pool.acquire().await.unwrap();
    let mut failed = false;
    for statement in script(2, UP) {
        if sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(&mut *conn)
            .await
            .is_err()
        {
            failed = true;
            break;
        }
    }
    assert!(failed, "the check let a stale script through");
    for statement in script(8, Change::Down { version: 3 }) {
        sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(&mut *conn)
            .await
            .unwrap();
    }
    drop(conn);
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [2]);
    migrate::up(&db.pool, CK, None).await.unwrap();
    // Down to nothing: the tables go; the empty marker reads as version 0,
    // and weaver migrates up from there.
    run_script(&db.pool, script(8, Change::Down { version: 1 }))
        .await
        .unwrap();
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [0]);
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE name LIKE 'weaver_%'")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(tables, ["weaver_schema_versions"]);
    migrate::up(&db.pool, CK, None).await.unwrap();
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [8]);
}

#[tokio::test]
async fn a_script_run_by_another_tool_migrates_as_weaver_does_on_postgres() {
    let db = PgDb::new().await;
    let target = db.target();
    let schema = db.schema.clone();
    let script = |current, change| {
        migrate::script(
            Dialect::Postgres,
            Adapter::Checkpoint,
            current,
            change,
            Some(&schema),
        )
        .unwrap()
    };
    run_script(&db.pool, script(0, Change::Up { target: Some(1) }))
        .await
        .unwrap();
    assert_eq!(migrate::versions(&target, CK).await.unwrap(), [1]);
    postgres_v1_rows(&db).await;
    run_script(&db.pool, script(1, UP)).await.unwrap();
    migrate::verify_migrated(&target, CK).await.unwrap();
    let saver = weaver::checkpoint::PostgresSaver::new(db.pool.clone())
        .with_prefix(&db.schema)
        .unwrap();
    check_upgraded(&saver).await;
    let err = run_script(&db.pool, script(1, UP)).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("weaver schema `checkpoint` is at version 8, not 1"),
        "{err}"
    );
    assert_eq!(migrate::versions(&target, CK).await.unwrap(), [8]);
    migrate::up(&target, CK, None).await.unwrap();
    // Down to nothing removes every table, the marker with the last adapter.
    run_script(&db.pool, script(8, Change::Down { version: 1 }))
        .await
        .unwrap();
    assert_eq!(migrate::versions(&target, CK).await.unwrap(), [0]);
    let left = db.table_count().await;
    assert_eq!(left, 0);
    // With the store still installed, the marker stays for it.
    migrate::up(&target, &[Adapter::Checkpoint, Adapter::Store], None)
        .await
        .unwrap();
    run_script(&db.pool, script(8, Change::Down { version: 1 }))
        .await
        .unwrap();
    assert_eq!(
        migrate::versions(&target, &[Adapter::Checkpoint, Adapter::Store])
            .await
            .unwrap(),
        [0, 1]
    );
    drop(saver);
    db.drop_schema().await;
}

#[test]
fn scripts_refuse_what_weaver_refuses() {
    let sqlite = |current, change, schema| {
        migrate::script(
            Dialect::Sqlite,
            Adapter::Checkpoint,
            current,
            change,
            schema,
        )
    };
    let postgres = |current, change, schema| {
        migrate::script(
            Dialect::Postgres,
            Adapter::Checkpoint,
            current,
            change,
            schema,
        )
    };
    assert!(matches!(
        sqlite(0, UP, Some("tenant")),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        postgres(0, UP, Some("bad-name\"; DROP")),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        postgres(0, Change::Up { target: Some(9) }, None),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        sqlite(3, Change::Down { version: 0 }, None),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        postgres(9, UP, None),
        Err(Error::MigrationRequired { found: 9, .. })
    ));
    // Nothing to change: no statements, not even the version check.
    assert_eq!(sqlite(8, UP, None).unwrap(), Vec::<String>::new());
    assert_eq!(
        postgres(1, Change::Up { target: Some(1) }, None).unwrap(),
        Vec::<String>::new()
    );
    // Named schemas are quoted; the search path leaves names bare.
    let named = postgres(0, UP, Some("tenant_a")).unwrap();
    assert!(
        named
            .iter()
            .any(|s| s.contains("CREATE TABLE \"tenant_a\".weaver_checkpoints"))
    );
    assert!(
        named[0].contains("'weaver.migrate:' || 'tenant_a'"),
        "{}",
        named[0]
    );
    let bare = postgres(0, UP, None).unwrap();
    assert!(
        bare.iter()
            .any(|s| s.contains("CREATE TABLE weaver_checkpoints"))
    );
    assert!(!bare.iter().any(|s| s.contains("\"tenant_a\"")));
}

/// An adapter listed twice in one call (two components' lists joined) is
/// migrated once, on both databases: `up` stays a no-op for what is done,
/// and `down` does not trip over the version its first run left.
#[tokio::test]
async fn an_adapter_listed_twice_migrates_once() {
    let both = &[Adapter::Checkpoint, Adapter::Store];
    let up_twice = &[Adapter::Checkpoint, Adapter::Store, Adapter::Checkpoint];
    let down_twice = &[Adapter::Store, Adapter::Checkpoint, Adapter::Store];
    let db = PgDb::new().await;
    let target = db.target();
    migrate::up(&target, up_twice, None).await.unwrap();
    assert_eq!(migrate::versions(&target, both).await.unwrap(), [8, 1]);
    migrate::up(&target, up_twice, None).await.unwrap();
    migrate::down(&target, down_twice, 1).await.unwrap();
    assert_eq!(migrate::versions(&target, both).await.unwrap(), [0, 0]);
    assert_eq!(db.table_count().await, 0);
    db.drop_schema().await;
    let lite = SqliteDb::new().await;
    migrate::up(&lite.pool, up_twice, None).await.unwrap();
    assert_eq!(migrate::versions(&lite.pool, both).await.unwrap(), [8, 1]);
    migrate::down(&lite.pool, down_twice, 1).await.unwrap();
    assert_eq!(migrate::versions(&lite.pool, both).await.unwrap(), [0, 0]);
}

/// A marker row holding no schema version (written by hand or another tool)
/// is a decode error naming it, not a version 0 that asks for `up`; `up`
/// itself changes nothing then.
#[tokio::test]
async fn a_marker_holding_no_version_is_a_decode_error() {
    let db = SqliteDb::new().await;
    migrate::up(&db.pool, CK, None).await.unwrap();
    for bad in [-3i64, 1 << 33] {
        sqlx::query("UPDATE weaver_schema_versions SET version = $1 WHERE adapter = 'checkpoint'")
            .bind(bad)
            .execute(&db.pool)
            .await
            .unwrap();
        for err in [
            migrate::versions(&db.pool, CK).await.unwrap_err(),
            migrate::verify_migrated(&db.pool, CK).await.unwrap_err(),
            migrate::up(&db.pool, CK, None).await.unwrap_err(),
        ] {
            assert!(
                matches!(&err, Error::Decode { .. }) && err.to_string().contains(&bad.to_string()),
                "{err}"
            );
        }
    }
    let pg = PgDb::new().await;
    let target = pg.target();
    migrate::up(&target, CK, None).await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE \"{}\".weaver_schema_versions SET version = -1",
        pg.schema
    )))
    .execute(&pg.pool)
    .await
    .unwrap();
    assert!(matches!(
        migrate::versions(&target, CK).await,
        Err(Error::Decode { .. })
    ));
    assert!(matches!(
        migrate::down(&target, CK, 1).await,
        Err(Error::Decode { .. })
    ));
    assert_eq!(pg.table_count().await, 7, "nothing was dropped");
    pg.drop_schema().await;
}

/// The "what to run" of an unmigrated PostgreSQL schema names that schema:
/// `up(&pool, …)` would migrate the search path instead, and the saver on
/// the schema would still find no tables.
#[tokio::test]
async fn the_hint_for_an_unmigrated_schema_names_the_schema() {
    let db = PgDb::new().await;
    let err = migrate::verify_migrated(&db.target(), CK)
        .await
        .unwrap_err();
    let Error::MigrationRequired { ref hint, .. } = err else {
        panic!("{err:?}");
    };
    let expected = format!("PgSchema::new(&pool, \"{}\")", db.schema);
    assert!(hint.contains(&expected), "{hint}");
    // Without a schema the pool itself is the target, on both databases.
    let lite = SqliteDb::new().await;
    let err = migrate::verify_migrated(&lite.pool, CK).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("weaver::migrate::up(&pool, &[Adapter::Checkpoint], None)"),
        "{err}"
    );
    db.drop_schema().await;
}

/// Version 4 makes SQLite's `commit_order` `NOT NULL`: a row without one
/// (invisible to every read of a thread's latest checkpoint) is refused by
/// name, by weaver's `up` and by the script another tool runs, and nothing
/// changes; once the row has a commit order the table is rebuilt with its
/// rows, and refuses such a row from then on.
#[tokio::test]
async fn sqlite_v4_refuses_rows_without_commit_order_then_forbids_them() {
    let db = SqliteDb::new().await;
    migrate::up(&db.pool, CK, Some(3)).await.unwrap();
    sqlite_v1_rows(&db).await; // commit_order NULL: written as version 1 did
    sqlx::query("UPDATE weaver_checkpoints SET commit_order = 1 WHERE checkpoint_id = 'zz-first'")
        .execute(&db.pool)
        .await
        .unwrap();
    match migrate::up(&db.pool, CK, None).await {
        Err(Error::MigrationRefused {
            adapter,
            version: 4,
            reason,
        }) => {
            assert_eq!(adapter, "checkpoint");
            for id in ["aa-second", "mm-third", "only"] {
                assert!(reason.contains(&format!("checkpoint `{id}`")), "{reason}");
            }
            assert!(!reason.contains("zz-first"), "{reason}");
        }
        other => panic!("up over rows without commit_order: {other:?}"),
    }
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [3]);
    let script = migrate::script(Dialect::Sqlite, Adapter::Checkpoint, 3, UP, None).unwrap();
    let err = run_script(&db.pool, script).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("weaver_checkpoints_has_rows_without_commit_order"),
        "{err}"
    );
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [3]);
    let nulls: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM weaver_checkpoints WHERE commit_order IS NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(nulls, 3, "nothing changed");
    // Repaired by hand, in insertion order.
    for (id, order) in [("aa-second", 2), ("mm-third", 3), ("only", 1)] {
        sqlx::query("UPDATE weaver_checkpoints SET commit_order = $1 WHERE checkpoint_id = $2")
            .bind(order)
            .bind(id)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    migrate::up(&db.pool, CK, None).await.unwrap();
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [8]);
    check_upgraded(&weaver::checkpoint::SqliteSaver::new(db.pool.clone())).await;
    let null_row = sqlx::query("INSERT INTO weaver_checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata) VALUES ('t9', '', 'c', x'00', '{}')")
        .execute(&db.pool)
        .await;
    assert!(
        null_row
            .as_ref()
            .is_err_and(|e| e.to_string().contains("NOT NULL")),
        "{null_row:?}"
    );
    // Down to 3 keeps the rows (and allows NULL again, as version 3 did).
    migrate::down(&db.pool, CK, 4).await.unwrap();
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [3]);
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM weaver_checkpoints")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(rows >= 4, "{rows} rows after down");
    migrate::up(&db.pool, CK, None).await.unwrap();
    migrate::verify_migrated(&db.pool, CK).await.unwrap();
}

/// Migrating through a search path whose first schema is new and whose
/// second holds weaver's tables creates them in the first, as every
/// unqualified statement does: the version table is looked for in the
/// current schema only. (It was found in the second, and nothing was
/// created in the first.)
#[tokio::test]
async fn an_unqualified_migration_looks_for_its_version_table_in_the_current_schema() {
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
    let (a, b) = (PgDb::new().await, PgDb::new().await);
    let adapters = [Adapter::Checkpoint];
    migrate::up(
        &weaver::migrate::PgSchema::new(&a.pool, &a.schema).unwrap(),
        &adapters,
        None,
    )
    .await
    .unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE SCHEMA IF NOT EXISTS \"{}\"",
        b.schema
    )))
    .execute(&b.pool)
    .await
    .unwrap();
    let options: PgConnectOptions = crate::common::pg_url().parse().unwrap();
    let path = format!("\"{}\",\"{}\"", b.schema, a.schema);
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.options([("search_path", path.as_str())]))
        .await
        .unwrap();
    migrate::up(&pool, &adapters, None).await.unwrap();
    let created: Option<String> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT CAST(to_regclass('\"{}\".weaver_checkpoints') AS TEXT)",
        b.schema
    )))
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    a.drop_schema().await;
    b.drop_schema().await;
    assert!(created.is_some(), "the tables went to another schema");
}

/// A role that may only read and write weaver's tables (an application's,
/// the schema migrated by another role) runs `up` with nothing to do, as
/// `PostgresSaver::connect` does, and uses the saver. (`CREATE TABLE IF NOT
/// EXISTS` of the version table needed the schema's CREATE privilege even
/// when the table existed.)
#[tokio::test]
async fn a_role_with_only_table_privileges_finds_nothing_to_migrate() {
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
    let db = PgDb::new().await;
    let schema = db.schema.clone();
    let role = format!("{schema}_app");
    let adapters = [Adapter::Checkpoint, Adapter::Store];
    let owner = weaver::migrate::PgSchema::new(&db.pool, &schema).unwrap();
    migrate::up(&owner, &adapters, None).await.unwrap();
    for sql in [
        format!("CREATE ROLE \"{role}\" LOGIN"),
        format!("GRANT USAGE ON SCHEMA \"{schema}\" TO \"{role}\""),
        format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA \"{schema}\" TO \"{role}\""
        ),
    ] {
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&db.pool)
            .await
            .unwrap();
    }
    let options: PgConnectOptions = crate::common::pg_url().parse().unwrap();
    let app = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options.username(&role))
        .await
        .unwrap();
    let target = weaver::migrate::PgSchema::new(&app, &schema).unwrap();
    let result = migrate::up(&target, &adapters, None).await;
    let saver = weaver::checkpoint::PostgresSaver::new(app.clone())
        .with_prefix(&schema)
        .unwrap();
    let listed = saver.list(&ListFilter::thread("t")).await;
    app.close().await;
    db.drop_schema().await;
    let pool = sqlx::PgPool::connect(&crate::common::pg_url())
        .await
        .unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!("DROP ROLE \"{role}\"")))
        .execute(&pool)
        .await
        .unwrap();
    result.expect("a migrated schema has nothing to migrate");
    assert!(listed.unwrap().is_empty());
}

/// A role that owns its schema and holds no CREATE on the database (a
/// least-privilege tenant) migrates its schema, and migrating it again is
/// the no-op it is documented to be: the schema is only created when it is
/// missing, since `CREATE SCHEMA IF NOT EXISTS` needs that privilege even
/// when the schema exists.
#[tokio::test]
async fn a_role_that_owns_only_its_schema_migrates_it() {
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
    let db = PgDb::new().await;
    let role = db.schema.clone();
    for sql in [
        format!("CREATE ROLE \"{role}\" LOGIN"),
        format!("CREATE SCHEMA \"{}\" AUTHORIZATION \"{role}\"", db.schema),
    ] {
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&db.pool)
            .await
            .unwrap();
    }
    let options: PgConnectOptions = crate::common::pg_url().parse().unwrap();
    let tenant = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options.username(&role))
        .await
        .unwrap();
    let target = weaver::migrate::PgSchema::new(&tenant, &db.schema).unwrap();
    let adapters = [Adapter::Checkpoint, Adapter::Store];
    for round in ["the first migration", "a second, with nothing to do"] {
        migrate::up(&target, &adapters, None)
            .await
            .unwrap_or_else(|e| panic!("{round}: {e}"));
    }
    let saver = weaver::checkpoint::PostgresSaver::new(tenant.clone())
        .with_prefix(&db.schema)
        .unwrap();
    assert!(
        saver
            .list(&ListFilter::thread("t"))
            .await
            .unwrap()
            .is_empty()
    );
    tenant.close().await;
    db.drop_schema().await;
    let pool = sqlx::PgPool::connect(&crate::common::pg_url())
        .await
        .unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!("DROP ROLE \"{role}\"")))
        .execute(&pool)
        .await
        .unwrap();
}
