//! `weaver-ecto-compat`: the Ecto migration modules it writes, their
//! statements run as Ecto would run them (one `execute/1` each, in one
//! transaction) on both databases.

use weaver::Error;
use weaver::checkpoint::{CheckpointRef, PostgresSaver, SqliteSaver};
use weaver::migrate::{self, PgSchema};
use weaver::{Saver, store::Store};
use weaver_ecto_compat::{Adapter, Dialect, EctoMigration};

use crate::common::{PgDb, SqliteDb, cp};
use crate::migrations::run_script;

const BOTH: &[Adapter] = &[Adapter::Checkpoint, Adapter::Store];

/// The statements of the module's `up` and of its `down`, read back from
/// its text: each `execute(~S"""…""")` body, less the indentation Elixir
/// strips (that of the closing delimiter).
fn executes(module: &str) -> (Vec<String>, Vec<String>) {
    let (up, down) = module
        .split_once("\n  def down do\n")
        .expect("a down function");
    let bodies = |text: &str| -> Vec<String> {
        text.split("execute(~S\"\"\"\n")
            .skip(1)
            .map(|rest| {
                let body = rest
                    .split_once("\n    \"\"\")")
                    .expect("a closed heredoc")
                    .0;
                body.lines()
                    .map(|l| l.strip_prefix("    ").unwrap_or(l))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect()
    };
    (bodies(up), bodies(down))
}

#[test]
fn the_module_text_is_the_scripts_weaver_runs() {
    let migration = EctoMigration::new("MyApp.Repo.Migrations.AddWeaver", Dialect::Postgres)
        .prefix("tenant_a")
        .adapter(Adapter::Checkpoint, 0)
        .adapter(Adapter::Store, 0);
    let module = migration.render().unwrap();
    assert_eq!(executes(&module), migration.statements().unwrap());
    insta::assert_snapshot!(module);
}

#[test]
fn bad_requests_are_refused() {
    let pg = || EctoMigration::new("MyApp.Repo.Migrations.AddWeaver", Dialect::Postgres);
    let refused = |m: EctoMigration| matches!(m.render(), Err(Error::InvalidArgument { .. }));
    assert!(refused(pg()), "no adapter");
    assert!(refused(
        pg().adapter(Adapter::Checkpoint, 0)
            .adapter(Adapter::Checkpoint, 1)
    ));
    assert!(refused(pg().adapter_to(Adapter::Checkpoint, 2, 2)));
    assert!(refused(pg().adapter_to(Adapter::Checkpoint, 0, 9)));
    assert!(refused(
        pg().adapter(Adapter::Checkpoint, 0).prefix("no-t ok")
    ));
    assert!(refused(
        EctoMigration::new("MyApp.Repo.Migrations.AddWeaver", Dialect::Sqlite)
            .prefix("tenant")
            .adapter(Adapter::Checkpoint, 0)
    ));
    assert!(refused(
        EctoMigration::new("MyApp do\n  end; System.halt", Dialect::Sqlite)
            .adapter(Adapter::Checkpoint, 0)
    ));
    assert!(matches!(
        pg().adapter(Adapter::Checkpoint, 9).render(),
        Err(Error::MigrationRequired { found: 9, .. })
    ));
}

#[tokio::test]
async fn modules_migrate_sqlite_up_in_steps_and_down() {
    let db = SqliteDb::new().await;
    let module = |m: EctoMigration| executes(&m.render().unwrap());
    let sqlite = || EctoMigration::new("MyApp.Repo.Migrations.Weaver", Dialect::Sqlite);
    let (first_up, first_down) = module(
        sqlite()
            .adapter_to(Adapter::Checkpoint, 0, 2)
            .adapter(Adapter::Store, 0),
    );
    let (second_up, second_down) = module(sqlite().adapter(Adapter::Checkpoint, 2));
    run_script(&db.pool, first_up.clone()).await.unwrap();
    assert_eq!(migrate::versions(&db.pool, BOTH).await.unwrap(), [2, 1]);
    // Run twice (a second database's migration history): refused.
    assert!(run_script(&db.pool, first_up).await.is_err());
    run_script(&db.pool, second_up).await.unwrap();
    migrate::verify_migrated(&db.pool, BOTH).await.unwrap();
    let saver = SqliteSaver::new(db.pool.clone());
    saver.put(cp("t", "c1", None, Some(1))).await.unwrap();
    let store = weaver::store::SqliteStore::new(db.pool.clone());
    store.put(&["a"], "k", serde_json::json!(1)).await.unwrap();
    // `mix ecto.rollback` twice.
    run_script(&db.pool, second_down).await.unwrap();
    assert_eq!(migrate::versions(&db.pool, BOTH).await.unwrap(), [2, 1]);
    run_script(&db.pool, first_down).await.unwrap();
    assert_eq!(migrate::versions(&db.pool, BOTH).await.unwrap(), [0, 0]);
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'weaver_%'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(tables, ["weaver_schema_versions"], "the empty marker stays");
}

#[tokio::test]
async fn a_module_migrates_a_postgres_schema_up_and_down() {
    let db = PgDb::new().await;
    let target = PgSchema::new(&db.pool, &db.schema).unwrap();
    let (up, down) = executes(
        &EctoMigration::new("MyApp.Repo.Migrations.AddWeaver", Dialect::Postgres)
            .prefix(&db.schema)
            .adapter(Adapter::Checkpoint, 0)
            .adapter(Adapter::Store, 0)
            .render()
            .unwrap(),
    );
    run_script(&db.pool, up).await.unwrap();
    migrate::verify_migrated(&target, BOTH).await.unwrap();
    let saver = PostgresSaver::new(db.pool.clone())
        .with_prefix(&db.schema)
        .unwrap();
    saver.put(cp("t", "c1", None, Some(1))).await.unwrap();
    let head = saver.get_tuple(&CheckpointRef::latest("t")).await.unwrap();
    assert_eq!(head.unwrap().checkpoint.id, "c1");
    let store = weaver::store::PostgresStore::new(db.pool.clone())
        .with_prefix(&db.schema)
        .unwrap();
    store.put(&["a"], "k", serde_json::json!(1)).await.unwrap();
    // weaver's own migrations take over from here: nothing left to do.
    migrate::up(&target, BOTH, None).await.unwrap();
    run_script(&db.pool, down).await.unwrap();
    assert_eq!(migrate::versions(&target, BOTH).await.unwrap(), [0, 0]);
    let left = db.table_count().await;
    assert_eq!(left, 0, "every table, the marker too, is gone");
    drop(saver);
    db.drop_schema().await;
}
