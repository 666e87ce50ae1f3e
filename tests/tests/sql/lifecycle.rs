//! Migrations, shallow mode, encryption/key rotation and concurrency
//! at the edges the other suites leave out. Each test uses its own SQLite
//! file or PostgreSQL schema.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use sqlx::{AssertSqlSafe, Connection};
use weaver::checkpoint::{
    BatchEntry, CheckpointRef, CheckpointTuple, ForkOptions, ListFilter, PendingWrite,
    PostgresSaver, PruneStrategy, SqliteSaver,
};
use weaver::codec::{EncryptedCodec, EncryptionKey};
use weaver::migrate::{self, Adapter, PgSchema};
use weaver::prelude::*;
use weaver_tests::states::{Steps, StepsUpdate};

use super::common::{Forwarding, PgDb, SqliteDb, cp, two_step};

const CK: &[Adapter] = &[Adapter::Checkpoint];

// ---------------------------------------------------------------- migrations

/// Runs SQL against either database (PostgreSQL: `{s}` is the schema).
enum Db {
    Lite(SqliteDb),
    Pg(PgDb),
}

impl Db {
    async fn both() -> [Db; 2] {
        [Db::Lite(SqliteDb::new().await), Db::Pg(PgDb::new().await)]
    }
    async fn up(&self, adapters: &[Adapter], target: Option<u32>) -> weaver::Result<()> {
        match self {
            Db::Lite(d) => migrate::up(&d.pool, adapters, target).await,
            Db::Pg(d) => migrate::up(&d.target(), adapters, target).await,
        }
    }
    async fn down(&self, adapters: &[Adapter], v: u32) -> weaver::Result<()> {
        match self {
            Db::Lite(d) => migrate::down(&d.pool, adapters, v).await,
            Db::Pg(d) => migrate::down(&d.target(), adapters, v).await,
        }
    }
    async fn versions(&self, adapters: &[Adapter]) -> Vec<u32> {
        match self {
            Db::Lite(d) => migrate::versions(&d.pool, adapters).await.unwrap(),
            Db::Pg(d) => migrate::versions(&d.target(), adapters).await.unwrap(),
        }
    }
    async fn verify(&self, adapters: &[Adapter]) -> weaver::Result<()> {
        match self {
            Db::Lite(d) => migrate::verify_migrated(&d.pool, adapters).await,
            Db::Pg(d) => migrate::verify_migrated(&d.target(), adapters).await,
        }
    }
    async fn exec(&self, sql: &str) {
        match self {
            Db::Lite(d) => {
                sqlx::raw_sql(AssertSqlSafe(sql.replace("{s}.", "")))
                    .execute(&d.pool)
                    .await
                    .unwrap();
            }
            Db::Pg(d) => {
                sqlx::raw_sql(AssertSqlSafe(
                    sql.replace("{s}", &format!("\"{}\"", d.schema)),
                ))
                .execute(&d.pool)
                .await
                .unwrap();
            }
        }
    }
    /// A fresh (never used) saver, not migrating.
    fn saver(&self) -> Arc<dyn Saver> {
        match self {
            Db::Lite(d) => Arc::new(SqliteSaver::new(d.pool.clone())),
            Db::Pg(d) => Arc::new(
                PostgresSaver::new(d.pool.clone())
                    .with_prefix(&d.schema)
                    .unwrap(),
            ),
        }
    }
    fn name(&self) -> &'static str {
        match self {
            Db::Lite(_) => "sqlite",
            Db::Pg(_) => "postgres",
        }
    }
    async fn close(self) {
        if let Db::Pg(d) = self {
            d.drop_schema().await;
        }
    }
}

/// A database migrated by a newer weaver (marker above what this build
/// knows) must be refused by `up`, `down` and `verify_migrated`, and the
/// hint must not recommend a call this build rejects.
#[tokio::test]
async fn newer_schema_is_refused_not_corrupted() {
    let mut problems = Vec::new();
    let latest = Adapter::Checkpoint.latest();
    let newer = latest + 1;
    for db in Db::both().await {
        let n = db.name();
        let make_newer = async || {
            if db.versions(CK).await != [newer] {
                db.up(CK, None).await.unwrap();
            }
            db.exec(&format!(
                "UPDATE {{s}}.weaver_schema_versions SET version = {newer} WHERE adapter = 'checkpoint'"
            ))
            .await;
        };
        make_newer().await;
        let err = db.verify(CK).await.unwrap_err();
        let Error::MigrationRequired {
            found,
            required,
            ref hint,
            ..
        } = err
        else {
            panic!("{n}: {err:?}")
        };
        assert_eq!((found, required), (newer, latest), "{n}");
        // Following the hint with this build must not be an argument error.
        if hint.contains(&format!(
            "migrate::down(&pool, &[Adapter::Checkpoint], {newer})"
        )) {
            let r = db.down(CK, newer).await;
            if matches!(r, Err(Error::InvalidArgument { .. })) {
                problems.push(format!(
                    "{n}: the hint `{hint}` recommends a call this build rejects: {r:?}"
                ));
            }
        }
        // down below the newer version cannot revert what it does not know:
        // it must fail and leave the marker and tables alone.
        for v in [2, 1] {
            make_newer().await;
            let r = db.down(CK, v).await;
            let after = db.versions(CK).await;
            if r.is_ok() || after != [newer] {
                problems.push(format!("{n}: down({v}) on a version-{newer} database returned {r:?}, marker now {after:?}"));
            }
        }
        // up is refused too (it must not report the database as migrated).
        make_newer().await;
        let r = db.up(CK, None).await;
        if r.is_ok() {
            problems.push(format!(
                "{n}: up(None) on a version-{newer} database returned Ok"
            ));
        }
        db.close().await;
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Out-of-range but harmless requests are no-ops; bad ones are typed.
#[tokio::test]
async fn down_above_current_and_up_below_current_are_no_ops() {
    for db in Db::both().await {
        let n = db.name();
        db.up(CK, Some(1)).await.unwrap();
        for v in [2, 3, 4] {
            db.down(CK, v).await.unwrap();
            assert_eq!(db.versions(CK).await, [1], "{n}: down({v}) at 1");
        }
        db.up(CK, None).await.unwrap();
        db.up(CK, Some(1)).await.unwrap();
        db.up(CK, Some(2)).await.unwrap();
        assert_eq!(db.versions(CK).await, [8], "{n}: up(target below current)");
        assert!(matches!(
            db.down(CK, 9).await,
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            db.down(CK, 0).await,
            Err(Error::InvalidArgument { .. })
        ));
        db.verify(CK).await.unwrap();
        db.close().await;
    }
}

/// After `down`, a saver reports `MigrationRequired`, never a raw SQL error:
/// a fresh saver, and one that already checked the schema before `down`.
#[tokio::test]
async fn saver_after_down_is_migration_required() {
    let mut problems = Vec::new();
    for db in Db::both().await {
        let n = db.name();
        db.up(CK, None).await.unwrap();
        let used = db.saver();
        used.put(cp("t", "a", None, Some(1))).await.unwrap();
        db.down(CK, 2).await.unwrap();
        let fresh = db.saver();
        let r = fresh.get_tuple(&CheckpointRef::latest("t")).await;
        assert!(
            matches!(
                r,
                Err(Error::MigrationRequired {
                    found: 1,
                    required: 8,
                    ..
                })
            ),
            "{n}: fresh saver after down(2): {r:?}"
        );
        let r = used.get_tuple(&CheckpointRef::latest("t")).await;
        if !matches!(r, Err(Error::MigrationRequired { found: 1, .. })) {
            problems.push(format!(
                "{n}: saver verified before down(2), then get_tuple: {r:?}"
            ));
        }
        let r = used.put(cp("t", "b", Some("a"), Some(2))).await;
        if !matches!(r, Err(Error::MigrationRequired { .. })) {
            problems.push(format!(
                "{n}: saver verified before down(2), then put: {r:?}"
            ));
        }
        db.down(CK, 1).await.unwrap();
        let r = used.list(&ListFilter::all()).await;
        if !matches!(r, Err(Error::MigrationRequired { found: 0, .. })) {
            problems.push(format!(
                "{n}: saver verified before down(1), then list: {r:?}"
            ));
        }
        db.close().await;
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The checkpoint and store adapters migrate independently, in either order,
/// and one's `down` leaves the other (and the marker table) in place.
#[tokio::test]
async fn checkpoint_and_store_adapters_are_independent() {
    const BOTH: &[Adapter] = &[Adapter::Checkpoint, Adapter::Store];
    const ST: &[Adapter] = &[Adapter::Store];
    for db in Db::both().await {
        let n = db.name();
        db.up(ST, None).await.unwrap();
        assert_eq!(db.versions(BOTH).await, [0, 1], "{n}");
        db.up(CK, Some(1)).await.unwrap();
        assert_eq!(db.versions(BOTH).await, [1, 1], "{n}");
        assert!(db.verify(BOTH).await.is_err());
        db.up(CK, None).await.unwrap();
        db.verify(BOTH).await.unwrap();
        db.down(ST, 1).await.unwrap();
        assert_eq!(db.versions(BOTH).await, [8, 0], "{n}");
        db.verify(CK).await.unwrap();
        db.saver().put(cp("t", "a", None, Some(1))).await.unwrap();
        db.down(CK, 1).await.unwrap();
        assert_eq!(db.versions(BOTH).await, [0, 0], "{n}");
        // Other order, and both at once.
        db.up(CK, None).await.unwrap();
        db.up(ST, None).await.unwrap();
        db.down(CK, 1).await.unwrap();
        assert_eq!(db.versions(BOTH).await, [0, 1], "{n}");
        db.up(BOTH, None).await.unwrap();
        db.down(BOTH, 1).await.unwrap();
        assert_eq!(db.versions(BOTH).await, [0, 0], "{n}");
        db.up(BOTH, None).await.unwrap();
        db.verify(BOTH).await.unwrap();
        db.close().await;
    }
}

/// `up` waits for another connection's write transaction (busy timeout)
/// instead of failing with "database is locked"; two pools migrating one
/// file at once both succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_up_waits_for_a_writer_and_races_another_pool() {
    let db = SqliteDb::new().await;
    migrate::up(&db.pool, CK, Some(1)).await.unwrap();
    let mut other = sqlx::SqliteConnection::connect_with(&db.connect_options())
        .await
        .unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE; INSERT INTO weaver_checkpoints (thread_id, checkpoint_id, checkpoint, metadata) VALUES ('t', 'x', X'7B7D', '{}')")
        .execute(&mut other)
        .await
        .unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        sqlx::raw_sql("COMMIT").execute(&mut other).await.unwrap();
        other
    });
    migrate::up(&db.pool, CK, None).await.unwrap();
    release.await.unwrap().close().await.unwrap();
    assert_eq!(migrate::versions(&db.pool, CK).await.unwrap(), [8]);
    let n: i64 = sqlx::query_scalar("SELECT commit_order FROM weaver_checkpoints")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 1, "the held row was backfilled");

    let fresh = SqliteDb::new().await;
    let pool2 = sqlx::SqlitePool::connect_with(fresh.connect_options())
        .await
        .unwrap();
    let (a, b, c) = tokio::join!(
        migrate::up(&fresh.pool, &[Adapter::Checkpoint, Adapter::Store], None),
        migrate::up(&pool2, &[Adapter::Store, Adapter::Checkpoint], None),
        migrate::up(&pool2, CK, Some(2)),
    );
    a.unwrap();
    b.unwrap();
    c.unwrap();
    assert_eq!(
        migrate::versions(&pool2, &[Adapter::Checkpoint, Adapter::Store])
            .await
            .unwrap(),
        [8, 1]
    );
}

/// Version-1 rows in several threads, namespaces and a fork (two children of
/// one parent) upgrade with commit orders in insertion order per (thread,
/// namespace); the latest is the last inserted, each branch keeps its line.
#[tokio::test]
async fn v1_rows_with_namespaces_and_forks_upgrade() {
    // (thread, ns, id, parent), in insertion order.
    const ROWS: &[(&str, &str, &str, Option<&str>)] = &[
        ("t", "", "p", None),
        ("t", "sub", "s1", None),
        ("t", "", "c-b", Some("p")),
        ("u", "", "u1", None),
        ("t", "", "c-a", Some("p")), // second child of `p`: the latest
        ("t", "sub", "s2", Some("s1")),
        ("t", "", "a-child", Some("c-a")),
    ];
    for db in Db::both().await {
        let n = db.name();
        db.up(CK, Some(1)).await.unwrap();
        for (t, ns, id, parent) in ROWS {
            let c = cp(t, id, *parent, None);
            let payload = String::from_utf8(serde_json::to_vec(&c.checkpoint).unwrap()).unwrap();
            let meta = serde_json::to_string(&c.metadata).unwrap();
            let parent = parent.map_or("NULL".to_owned(), |p| format!("'{p}'"));
            let (blob, m) = match &db {
                Db::Lite(_) => (format!("CAST('{payload}' AS BLOB)"), format!("'{meta}'")),
                Db::Pg(_) => (
                    format!("convert_to('{payload}', 'UTF8')"),
                    format!("CAST('{meta}' AS JSONB)"),
                ),
            };
            db.exec(&format!("INSERT INTO {{s}}.weaver_checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata) VALUES ('{t}', '{ns}', '{id}', {parent}, {blob}, {m})")).await;
        }
        db.up(CK, None).await.unwrap();
        let s = db.saver();
        let orders = |hist: Vec<CheckpointTuple>| -> Vec<(String, u64)> {
            hist.into_iter()
                .map(|t| (t.checkpoint.id, t.commit_order))
                .collect()
        };
        let main = orders(s.list(&ListFilter::thread("t").ns("")).await.unwrap());
        let want: Vec<(String, u64)> = [("a-child", 4), ("c-a", 3), ("c-b", 2), ("p", 1)]
            .iter()
            .map(|(i, o)| (i.to_string(), *o))
            .collect();
        assert_eq!(main, want, "{n}");
        let sub = orders(s.list(&ListFilter::thread("t").ns("sub")).await.unwrap());
        assert_eq!(sub, [("s2".to_owned(), 2), ("s1".to_owned(), 1)], "{n}");
        let latest = s
            .get_tuple(&CheckpointRef::latest("t"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(latest.checkpoint.id, "a-child", "{n}");
        let b = s
            .get_tuple(&CheckpointRef::latest("t").at("c-b"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(b.parent_config.unwrap().checkpoint_id.as_deref(), Some("p"));
        let line = s
            .lineage(&CheckpointRef::latest("t").at("a-child"), 10, None)
            .await
            .unwrap();
        let ids: Vec<_> = line.iter().map(|t| t.checkpoint.id.as_str()).collect();
        assert_eq!(
            ids,
            ["a-child", "c-a", "p"],
            "{n}: the fork keeps its own line"
        );
        s.fork_at(
            &CheckpointRef::latest("t").at("c-b"),
            "f",
            ForkOptions::default(),
        )
        .await
        .unwrap();
        assert_eq!(
            s.list(&ListFilter::thread("f")).await.unwrap().len(),
            2,
            "{n}"
        );
        // The next commit continues the numbering of each (thread, ns).
        s.put(cp("t", "next", Some("a-child"), None)).await.unwrap();
        let head = s
            .get_tuple(&CheckpointRef::latest("t"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (head.checkpoint.id.as_str(), head.commit_order),
            ("next", 5),
            "{n}"
        );
        db.close().await;
    }
}

/// Schema names: mixed case and the longest allowed work end to end; names
/// that would need quoting (spaces, quotes, dots) or are too long are typed
/// errors, never SQL errors.
#[tokio::test]
async fn postgres_schema_names() {
    let base = PgDb::new().await;
    let suffix = &base.schema["weaver_t_".len()..][..12];
    for name in [
        format!("Tenant_{suffix}_MiXed"),
        format!("t{suffix}{}", "x".repeat(63 - 13)),
    ] {
        assert_eq!(name.len().min(63), name.len());
        let target = PgSchema::new(&base.pool, &name).unwrap();
        migrate::up(&target, CK, None).await.unwrap();
        migrate::verify_migrated(&target, CK).await.unwrap();
        let saver = PostgresSaver::new(base.pool.clone())
            .with_prefix(&name)
            .unwrap();
        saver.put(cp("t", "a", None, None)).await.unwrap();
        assert_eq!(
            saver.list(&ListFilter::all()).await.unwrap().len(),
            1,
            "{name}"
        );
        // The lower-case twin is another schema, still unmigrated.
        let lower = name.to_lowercase();
        if lower != name {
            let other = PgSchema::new(&base.pool, &lower).unwrap();
            assert_eq!(migrate::versions(&other, CK).await.unwrap(), [0]);
        }
        migrate::down(&target, CK, 1).await.unwrap();
        sqlx::raw_sql(AssertSqlSafe(format!("DROP SCHEMA \"{name}\" CASCADE")))
            .execute(&base.pool)
            .await
            .unwrap();
    }
    for bad in [
        "",
        "two words",
        "quo\"te",
        "a.b",
        "semi;colon",
        "9starts_with_digit",
        "ünïcode",
        &"x".repeat(64),
    ] {
        assert!(
            matches!(
                PgSchema::new(&base.pool, bad),
                Err(Error::InvalidArgument { .. })
            ),
            "PgSchema::new({bad:?})"
        );
        assert!(
            matches!(
                PostgresSaver::new(base.pool.clone()).with_prefix(bad),
                Err(Error::InvalidArgument { .. })
            ),
            "with_prefix({bad:?})"
        );
    }
    base.drop_schema().await;
}

/// A pool whose `search_path` is the schema and a `PgSchema` naming the same
/// schema migrate the same tables: run at once, both must succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_search_path_and_named_schema_migrate_together() {
    for round in 0..4 {
        let db = PgDb::new().await;
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA \"{}\"", db.schema)))
            .execute(&db.pool)
            .await
            .unwrap();
        let opts: sqlx::postgres::PgConnectOptions = super::common::pg_url().parse().unwrap();
        let sp_pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect_with(opts.options([("search_path", db.schema.as_str())]))
            .await
            .unwrap();
        let named = db.target();
        let (a, b) = tokio::join!(
            migrate::up(&sp_pool, CK, None),
            migrate::up(&named, CK, None)
        );
        let versions = migrate::versions(&named, CK).await.unwrap();
        sp_pool.close().await;
        db.drop_schema().await;
        assert!(
            a.is_ok() && b.is_ok(),
            "round {round}: search_path {a:?}, named {b:?}"
        );
        assert_eq!(versions, [8]);
    }
}

// ---------------------------------------------------------------- shallow mode

fn approval(saver: Arc<dyn Saver>) -> CompiledGraph<Steps> {
    Graph::<Steps>::new("Approval")
        .add_node("draft", |_: &Steps| StepsUpdate::default().foo("draft"))
        .add_node(
            "review",
            |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
                let answer = rt.interrupt("ok?")?;
                Ok(StepsUpdate::default().bar([answer.as_str().unwrap_or("?").to_owned()]))
            },
        )
        .add_sequence([START, "draft", "review", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

/// 4 parallel branches, `w2` fails once; counts good runs.
fn flaky(saver: Arc<dyn Saver>, good: Arc<AtomicUsize>) -> CompiledGraph<Steps> {
    let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut g = Graph::<Steps>::new("Flaky");
    for i in 0..4 {
        let (good, failed) = (good.clone(), failed.clone());
        let name = format!("w{i}");
        g = g
            .add_node(
                name.clone(),
                move |_: &Steps| -> Result<StepsUpdate, NodeError> {
                    if i == 2 && !failed.swap(true, Ordering::SeqCst) {
                        return Err(NodeError::msg("transient"));
                    }
                    if i != 2 {
                        good.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(StepsUpdate::default().bar([format!("w{i}")]))
                },
            )
            .add_edge(START, name.clone())
            .add_edge(name, END);
    }
    g.compile(Compile::new().checkpointer_arc(saver)).unwrap()
}

fn is_shallow<T: std::fmt::Debug>(r: &weaver::Result<T>) -> bool {
    matches!(r, Err(Error::ShallowSaver { .. }))
}

/// The engine on a shallow saver: interrupt/resume, failure/continue,
/// update_state, history options, forking from the latest vs an older id.
async fn shallow_engine(saver: Arc<dyn Saver>, n: &str) {
    let graph = approval(saver.clone());
    let config = RunConfig::thread("s");
    let out = graph.invoke(Steps::default(), &config).await.unwrap();
    assert!(out.is_interrupted(), "{n}");
    let paused = graph.get_state(&config).await.unwrap();
    assert_eq!(paused.next, ["review"], "{n}");
    let old = paused.config.get_checkpoint_id().unwrap().to_owned();
    let hist = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    assert_eq!(hist.len(), 1, "{n}: history lists the one checkpoint kept");
    assert_eq!(hist[0].interrupts.len(), 1, "{n}");
    let done = graph
        .resume(json!("yes"), &config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.bar, ["yes"], "{n}");
    let head = graph.get_state(&config).await.unwrap();
    let head_id = head.config.get_checkpoint_id().unwrap().to_owned();
    assert_ne!(head_id, old);
    let at_old = config.clone().checkpoint_id(old.clone());
    assert!(
        is_shallow(&graph.get_state(&at_old).await),
        "{n}: get_state(old)"
    );
    assert!(
        is_shallow(
            &graph
                .update_state(&at_old, StepsUpdate::default().foo("x"), Some("review"))
                .await
        ),
        "{n}: update_state(old)"
    );
    assert!(
        is_shallow(&graph.continue_run(&at_old).await),
        "{n}: replay from old"
    );
    assert!(
        is_shallow(
            &graph
                .get_state_history(&config, History::default().before(old.clone()))
                .await
        ),
        "{n}: history before old"
    );
    let h = graph
        .get_state_history(&config, History::default().before(head_id.clone()))
        .await;
    assert!(h.unwrap().is_empty(), "{n}: history before the head");
    let h = graph
        .get_state_history(
            &config,
            History::default().limit(5).filter("source", "loop"),
        )
        .await;
    assert_eq!(h.unwrap().len(), 1, "{n}");
    let h = graph
        .get_state_history(&config, History::default().filter("source", "update"))
        .await;
    assert!(h.unwrap().is_empty(), "{n}");
    // Forking from the latest works and is again the one kept checkpoint.
    let at_head = config.clone().checkpoint_id(head_id.clone());
    let forked = graph
        .update_state(
            &at_head,
            StepsUpdate::default().bar(["edit"]),
            Some("review"),
        )
        .await
        .unwrap();
    assert_eq!(
        graph.get_state(&forked).await.unwrap().values.bar,
        ["yes", "edit"],
        "{n}"
    );
    assert_eq!(
        graph
            .get_state_history(&config, History::default())
            .await
            .unwrap()
            .len(),
        1,
        "{n}"
    );
    assert!(
        is_shallow(&graph.get_state(&at_head).await),
        "{n}: the replaced head is gone"
    );
    // A failed branch continues with its siblings' writes kept on the head.
    let good = Arc::new(AtomicUsize::new(0));
    let graph = flaky(saver.clone(), good.clone());
    let config = RunConfig::thread("flaky");
    assert!(
        matches!(
            graph.invoke(Steps::default(), &config).await,
            Err(Error::NodeFailed { .. })
        ),
        "{n}"
    );
    assert_eq!(graph.get_state(&config).await.unwrap().next, ["w2"], "{n}");
    let done = graph
        .continue_run(&config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.bar.len(), 4, "{n}");
    assert_eq!(
        good.load(Ordering::SeqCst),
        3,
        "{n}: siblings did not run again"
    );
    assert_eq!(
        saver
            .list(&ListFilter::thread("flaky"))
            .await
            .unwrap()
            .len(),
        1,
        "{n}"
    );
}

#[tokio::test]
async fn shallow_engine_lifecycle() {
    let db = SqliteDb::new().await;
    shallow_engine(Arc::new(db.saver().await.shallow()), "sqlite").await;
    let pg = PgDb::new().await;
    shallow_engine(Arc::new(pg.saver().await.shallow()), "postgres").await;
    pg.drop_schema().await;
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Chat {
    #[reducer(delta)]
    messages: weaver::state::SharedVec<String>,
}

fn chat(saver: Arc<dyn Saver>) -> CompiledGraph<Chat> {
    Graph::<Chat>::new("chat")
        .add_node("reply", |s: &Chat| {
            let last = s.messages.last().cloned().unwrap_or_default();
            ChatUpdate::default().messages(vec![format!("re {last}")])
        })
        .add_sequence([START, "reply", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

async fn turns(g: &CompiledGraph<Chat>, thread: &str, from: usize, to: usize) {
    for i in from..to {
        let input = ChatUpdate::default().messages(vec![format!("u{i}")]);
        g.invoke(input, &RunConfig::thread(thread)).await.unwrap();
    }
}

async fn messages(g: &CompiledGraph<Chat>, thread: &str) -> weaver::Result<Vec<String>> {
    let s = g.get_state(&RunConfig::thread(thread)).await?;
    Ok(s.values.messages.iter().cloned().collect())
}

/// One database used by a full saver (delta-encoded history), then a
/// shallow one, then a full one again: every state stays whole, and what
/// the shallow saver forks or continues is readable.
#[tokio::test]
async fn switching_between_full_and_shallow_savers() {
    let db = SqliteDb::new().await;
    let full: Arc<dyn Saver> = Arc::new(db.saver().await);
    let shallow: Arc<dyn Saver> = Arc::new(db.saver().await.shallow());
    let (gf, gs) = (chat(full.clone()), chat(shallow.clone()));
    turns(&gf, "t", 0, 5).await;
    let head = full
        .get_tuple(&CheckpointRef::latest("t"))
        .await
        .unwrap()
        .unwrap();
    assert!(
        !head.checkpoint.deltas.is_empty(),
        "the head is stored as a delta"
    );
    assert_eq!(
        messages(&gs, "t").await.unwrap().len(),
        10,
        "shallow reads a delta head"
    );
    // The shallow saver forks the kept (delta-encoded) checkpoint.
    let mut problems = Vec::new();
    let f = shallow
        .fork_at(
            &CheckpointRef::latest("t").at(head.checkpoint.id.clone()),
            "fork",
            ForkOptions::default(),
        )
        .await;
    match f {
        Ok(_) => match messages(&gs, "fork").await {
            Ok(m) if m.len() == 10 => {}
            other => problems.push(format!(
                "state of a thread forked by the shallow saver from a delta head: {other:?}"
            )),
        },
        Err(e) => problems.push(format!("shallow fork of the latest failed: {e:?}")),
    }
    turns(&gs, "t", 5, 6).await;
    assert_eq!(messages(&gs, "t").await.unwrap().len(), 12);
    assert_eq!(full.list(&ListFilter::thread("t")).await.unwrap().len(), 1);
    turns(&gf, "t", 6, 8).await;
    assert_eq!(messages(&gf, "t").await.unwrap().len(), 16);
    let hist = gf
        .get_state_history(&RunConfig::thread("t"), History::default())
        .await
        .unwrap();
    assert_eq!(hist.len(), 7);
    assert!(problems.is_empty(), "{problems:#?}");
}

// ---------------------------------------------------------------- encryption

fn key(id: &str, b: u8) -> EncryptionKey {
    EncryptionKey::new(id, [b; 32]).unwrap()
}

/// Key ids of the stored checkpoint envelopes (`WVE3 | len | id | ...`).
fn key_ids(payloads: Vec<Vec<u8>>) -> Vec<String> {
    payloads
        .into_iter()
        .map(|p| {
            assert_eq!(&p[..4], b"WVE3", "stored in the clear");
            String::from_utf8(p[5..5 + p[4] as usize].to_vec()).unwrap()
        })
        .collect()
}

/// Rotation across a delta-encoded thread (`SharedVec` transcript): old
/// checkpoints under k1, new under k2; a saver with both keys reads all; one
/// missing k1 fails typed, naming k1; after `prune(KeepLatest)` re-seals the
/// head under k2, the k2-only saver reads it.
async fn rotation(
    make: impl Fn(Vec<EncryptionKey>) -> Arc<dyn Saver>,
    payloads: impl AsyncFn() -> Vec<Vec<u8>>,
    n: &str,
) {
    let (old, both, new) = (
        make(vec![key("k1", 1)]),
        make(vec![key("k1", 1), key("k2", 2)]),
        make(vec![key("k2", 2)]),
    );
    turns(&chat(old), "t", 0, 4).await;
    let gb = chat(both.clone());
    turns(&gb, "t", 4, 8).await;
    let ids = key_ids(payloads().await);
    assert_eq!(
        ids.iter().filter(|k| *k == "k1").count(),
        12,
        "{n}: {ids:?}"
    );
    assert_eq!(
        ids.iter().filter(|k| *k == "k2").count(),
        12,
        "{n}: {ids:?}"
    );
    let hist = gb
        .get_state_history(&RunConfig::thread("t"), History::default())
        .await
        .unwrap();
    assert_eq!(hist.len(), 24, "{n}");
    assert_eq!(hist[0].values.messages.len(), 16, "{n}");
    assert!(hist.iter().all(|s| s.values.messages.len() <= 16), "{n}");
    let gn = chat(new.clone());
    for r in [
        gn.get_state_history(&RunConfig::thread("t"), History::default())
            .await
            .map(|h| h.len()),
        messages(&gn, "t").await.map(|m| m.len()),
    ] {
        match r {
            Err(Error::Decrypt { reason, .. }) => assert!(reason.contains("k1"), "{n}: {reason}"),
            other => panic!("{n}: a saver without k1 read k1 records: {other:?}"),
        }
    }
    both.prune(&["t".to_owned()], PruneStrategy::KeepLatest)
        .await
        .unwrap();
    assert_eq!(key_ids(payloads().await), ["k2"], "{n}");
    assert_eq!(messages(&gn, "t").await.unwrap().len(), 16, "{n}");
    turns(&gn, "t", 8, 9).await;
    assert_eq!(messages(&gb, "t").await.unwrap().len(), 18, "{n}");
}

#[tokio::test]
async fn key_rotation_across_a_delta_thread() {
    let db = SqliteDb::new().await;
    let base = db.saver().await;
    let pool = db.pool.clone();
    rotation(
        |keys| Arc::new(base.clone().with_codec(EncryptedCodec::json(keys).unwrap())),
        async || {
            sqlx::query_scalar("SELECT checkpoint FROM weaver_checkpoints")
                .fetch_all(&pool)
                .await
                .unwrap()
        },
        "sqlite",
    )
    .await;
    let pg = PgDb::new().await;
    let base = pg.saver().await;
    let (pool, s) = (pg.pool.clone(), pg.schema.clone());
    rotation(
        |keys| Arc::new(base.clone().with_codec(EncryptedCodec::json(keys).unwrap())),
        async || {
            sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT checkpoint FROM \"{s}\".weaver_checkpoints"
            )))
            .fetch_all(&pool)
            .await
            .unwrap()
        },
        "postgres",
    )
    .await;
    pg.drop_schema().await;
}

/// Pending writes of a failed step are stored encrypted and resume; a
/// tampered write and a plaintext row are typed decrypt errors.
#[tokio::test]
async fn encrypted_pending_writes_and_plaintext_rows() {
    let db = SqliteDb::new().await;
    let base = db.saver().await;
    let enc: Arc<dyn Saver> = Arc::new(
        base.clone()
            .with_codec(EncryptedCodec::json([key("k1", 1)]).unwrap()),
    );
    let good = Arc::new(AtomicUsize::new(0));
    let graph = flaky(enc.clone(), good.clone());
    let config = RunConfig::thread("f");
    assert!(graph.invoke(Steps::default(), &config).await.is_err());
    let values: Vec<Vec<u8>> = sqlx::query_scalar("SELECT value FROM weaver_checkpoint_writes")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert!(!values.is_empty());
    assert!(
        values.iter().all(|v| v.starts_with(b"WVE2")),
        "a pending write stored in the clear"
    );
    // Tampering one write makes the thread unreadable, typed.
    let (rowid, original): (i64, Vec<u8>) =
        sqlx::query_as("SELECT rowid, value FROM weaver_checkpoint_writes WHERE task_path = 'w0'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let set = async |v: &[u8]| {
        sqlx::query("UPDATE weaver_checkpoint_writes SET value = $1 WHERE rowid = $2")
            .bind(v)
            .bind(rowid)
            .execute(&db.pool)
            .await
            .unwrap();
    };
    let mut bad = original.clone();
    *bad.last_mut().unwrap() ^= 1;
    set(&bad).await;
    let r = graph.get_state(&config).await;
    assert!(matches!(r, Err(Error::Decrypt { .. })), "{r:?}");
    set(&original).await;
    // The sealed value stays, its row's channel or task path is changed:
    // refused too (both are bound as associated data).
    for (column, relinked) in [("channel", "foo"), ("task_path", "w1")] {
        let update = async |v: String| {
            let sql = format!("UPDATE weaver_checkpoint_writes SET {column} = $1 WHERE rowid = $2");
            sqlx::query(AssertSqlSafe(sql))
                .bind(v)
                .bind(rowid)
                .execute(&db.pool)
                .await
                .unwrap();
        };
        let sql = format!("SELECT {column} FROM weaver_checkpoint_writes WHERE rowid = $1");
        let was: String = sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(rowid)
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_ne!(was, relinked);
        update(relinked.to_owned()).await;
        let r = graph.get_state(&config).await;
        assert!(matches!(r, Err(Error::Decrypt { .. })), "{column}: {r:?}");
        update(was).await;
    }
    let done = graph
        .continue_run(&config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.bar.len(), 4);
    assert_eq!(good.load(Ordering::SeqCst), 3);
    // A record relinked to another parent (its grandparent) is refused.
    let (id, parent): (String, String) = sqlx::query_as(
        "SELECT checkpoint_id, parent_checkpoint_id FROM weaver_checkpoints
          WHERE thread_id = 'f' ORDER BY commit_order DESC LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let grandparent: String = sqlx::query_scalar(
        "SELECT parent_checkpoint_id FROM weaver_checkpoints WHERE thread_id = 'f' AND checkpoint_id = $1",
    )
    .bind(&parent)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let relink = async |to: &str| {
        sqlx::query(
            "UPDATE weaver_checkpoints SET parent_checkpoint_id = $1 WHERE checkpoint_id = $2",
        )
        .bind(to)
        .bind(&id)
        .execute(&db.pool)
        .await
        .unwrap();
    };
    relink(&grandparent).await;
    let head = CheckpointRef::latest("f").at(id.clone());
    let r = enc.get_tuple(&head).await;
    assert!(matches!(r, Err(Error::Decrypt { .. })), "{r:?}");
    relink(&parent).await;
    assert!(enc.get_tuple(&head).await.unwrap().is_some());
    // A thread written in the clear is refused by the encrypted saver.
    base.put(cp("plain", "a", None, Some(1))).await.unwrap();
    for r in [
        enc.get_tuple(&CheckpointRef::latest("plain"))
            .await
            .map(|_| ()),
        enc.list(&ListFilter::all()).await.map(|_| ()),
        enc.fork_at(
            &CheckpointRef::latest("plain").at("a"),
            "g",
            ForkOptions::default(),
        )
        .await
        .map(|_| ()),
        enc.copy_thread("plain", "h").await,
    ] {
        assert!(matches!(r, Err(Error::Decrypt { .. })), "{r:?}");
    }
    assert!(
        enc.get_tuple(&CheckpointRef::latest("g"))
            .await
            .unwrap()
            .is_none(),
        "half-written fork"
    );
    assert!(
        enc.get_tuple(&CheckpointRef::latest("h"))
            .await
            .unwrap()
            .is_none(),
        "half-written copy"
    );
}

// ---------------------------------------------------------------- concurrency

/// Two savers on separate pools race `update_state` on the head and forks
/// (`update_state` on the first checkpoint) of one thread: each call commits
/// or fails with `VersionConflict`; commit orders stay 1..n without gaps;
/// every win is stored once with its label, no loser's label is stored.
async fn racing_updates(a: Arc<dyn Saver>, b: Arc<dyn Saver>, n: &str) {
    let graphs = [two_step(a.clone()), two_step(b)];
    let config = RunConfig::thread("r").durability(Durability::Exit);
    graphs[0].invoke(Steps::default(), &config).await.unwrap();
    let root = a
        .list(&ListFilter::thread("r"))
        .await
        .unwrap()
        .pop()
        .unwrap();
    let root_id = root.checkpoint.id.clone();
    let mut tasks = Vec::new();
    for t in 0..6 {
        let g = graphs[t % 2].clone();
        let (config, root_id) = (config.clone(), root_id.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in 0..8 {
                let label = format!("{t}-{i}");
                let target = if (t + i) % 3 == 0 {
                    config.clone().checkpoint_id(root_id.clone())
                } else {
                    config.clone()
                };
                let r = g
                    .update_state(
                        &target,
                        StepsUpdate::default().bar([label.clone()]),
                        Some("node_b"),
                    )
                    .await;
                out.push((label, r.map(|c| c.get_checkpoint_id().unwrap().to_owned())));
            }
            out
        }));
    }
    let mut wins = Vec::new();
    let mut losses = Vec::new();
    for h in tasks {
        for (label, r) in h.await.unwrap() {
            match r {
                Ok(id) => wins.push((label, id)),
                Err(Error::VersionConflict { .. }) => losses.push(label),
                Err(e) => panic!("{n}: unexpected error under concurrency: {e:?}"),
            }
        }
    }
    eprintln!(
        "{n}: racing updates: {} wins, {} conflicts",
        wins.len(),
        losses.len()
    );
    let hist = a.list(&ListFilter::thread("r")).await.unwrap();
    let orders: Vec<u64> = hist.iter().rev().map(|t| t.commit_order).collect();
    assert_eq!(orders, (1..=hist.len() as u64).collect::<Vec<_>>(), "{n}");
    let seed = hist.len() - wins.len();
    assert_eq!(seed, 1, "{n}: one seed checkpoint (Exit) plus one per win");
    let last_bar = |t: &CheckpointTuple| {
        t.checkpoint.channel_values["bar"]
            .as_array()
            .unwrap()
            .last()
            .cloned()
    };
    for (label, id) in &wins {
        let t = hist
            .iter()
            .find(|t| &t.checkpoint.id == id)
            .unwrap_or_else(|| panic!("{n}: win {label} lost"));
        assert_eq!(last_bar(t), Some(json!(label)), "{n}");
    }
    for label in &losses {
        assert!(
            hist.iter().all(|t| last_bar(t) != Some(json!(label))),
            "{n}: loser {label} stored"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_update_state_on_separate_pools() {
    let db = SqliteDb::new().await;
    let a = db.saver().await;
    let b = db
        .saver_on(
            sqlx::sqlite::SqlitePoolOptions::new().max_connections(3),
            db.connect_options(),
        )
        .await;
    racing_updates(Arc::new(a), Arc::new(b), "sqlite").await;
    let pg = PgDb::new().await;
    let a = pg.saver().await;
    let b = pg
        .saver_on(
            sqlx::postgres::PgPoolOptions::new().max_connections(3),
            super::common::pg_url().parse().unwrap(),
        )
        .await;
    racing_updates(Arc::new(a), Arc::new(b), "postgres").await;
    pg.drop_schema().await;
}

/// `bulk_update_state` that loses a race must leave nothing behind: a
/// failed call that kept some of its steps is a half-written edit.
#[tokio::test]
async fn bulk_update_state_that_conflicts_writes_nothing() {
    let db = SqliteDb::new().await;
    let inner: Arc<dyn Saver> = Arc::new(db.saver().await);
    let saver = Arc::new(Forwarding {
        deltas: inner.supports_deltas(),
        ..Forwarding::on(inner.clone())
    });
    let graph = two_step(saver.clone());
    let config = RunConfig::thread("b").durability(Durability::Exit);
    graph.invoke(Steps::default(), &config).await.unwrap();
    saver.intrude.store(true, Ordering::SeqCst);
    let steps = (0..3)
        .map(|i| {
            vec![(
                StepsUpdate::default().bar([format!("bulk-{i}")]),
                Some("node_b".to_owned()),
            )]
        })
        .collect();
    let r = graph
        .bulk_update_state(&config.clone().metadata("edit", "bulk"), steps)
        .await;
    assert!(matches!(r, Err(Error::VersionConflict { .. })), "{r:?}");
    let kept = inner
        .list(&ListFilter::thread("b").metadata("edit", "bulk"))
        .await
        .unwrap();
    assert!(
        kept.is_empty(),
        "bulk_update_state failed with a conflict but kept {} of its 3 steps: {:?}",
        kept.len(),
        kept.iter()
            .map(|t| &t.checkpoint.channel_values["bar"])
            .collect::<Vec<_>>()
    );
}

/// `put_many` batches race one-checkpoint turns (`Durability::Exit`) on one
/// thread: each batch lands whole or not at all, each turn commits or
/// conflicts, and the final transcript has every winner once, no loser.
async fn put_many_vs_turns(saver: Arc<dyn Saver>, n: &str) {
    let graph = two_step(saver.clone());
    let config = RunConfig::thread("m").durability(Durability::Exit);
    graph.invoke(Steps::default(), &config).await.unwrap();
    let turns = {
        let (graph, config) = (graph.clone(), config.clone());
        tokio::spawn(async move {
            let mut out = Vec::new();
            for i in 0..25 {
                let label = format!("turn-{i}");
                let r = graph
                    .invoke(StepsUpdate::default().bar([label.clone()]), &config)
                    .await;
                out.push((label, r.map(|_| ())));
            }
            out
        })
    };
    let batches = {
        let saver = saver.clone();
        tokio::spawn(async move {
            let mut out = Vec::new();
            for i in 0..25 {
                let head = saver
                    .get_tuple(&CheckpointRef::latest("m"))
                    .await
                    .unwrap()
                    .unwrap();
                let mut entries = Vec::new();
                let mut parent = head.checkpoint.id.clone();
                let mut values = head.checkpoint.clone();
                for k in 0..3u64 {
                    let label = format!("batch-{i}-{k}");
                    values.id = format!("{label}-id");
                    values.channel_values["bar"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!(label));
                    let mut c = cp(
                        "m",
                        &values.id,
                        Some(&parent),
                        Some(head.commit_order + 1 + k),
                    );
                    c.checkpoint = values.clone();
                    entries.push(BatchEntry {
                        checkpoint: c,
                        writes: Vec::new(),
                    });
                    parent = values.id.clone();
                }
                out.push((i, saver.put_many(entries).await.map(|_| ())));
                tokio::task::yield_now().await;
            }
            out
        })
    };
    let (turns, batches) = (turns.await.unwrap(), batches.await.unwrap());
    eprintln!(
        "{n}: put_many vs turns: {} of 25 batches, {} of 25 turns conflicted",
        batches.iter().filter(|b| b.1.is_err()).count(),
        turns.iter().filter(|t| t.1.is_err()).count()
    );
    let hist = saver.list(&ListFilter::thread("m")).await.unwrap();
    let ids: std::collections::HashSet<&str> =
        hist.iter().map(|t| t.checkpoint.id.as_str()).collect();
    for (i, r) in &batches {
        let stored = (0..3)
            .filter(|k| ids.contains(format!("batch-{i}-{k}-id").as_str()))
            .count();
        match r {
            Ok(()) => assert_eq!(stored, 3, "{n}: batch {i}"),
            Err(Error::VersionConflict { .. }) => {
                assert_eq!(stored, 0, "{n}: batch {i} half-written")
            }
            Err(e) => panic!("{n}: batch {i}: {e:?}"),
        }
    }
    let bar: Vec<String> =
        serde_json::from_value(hist[0].checkpoint.channel_values["bar"].clone()).unwrap();
    for (label, r) in &turns {
        let count = bar.iter().filter(|b| *b == label).count();
        match r {
            Ok(()) => assert_eq!(count, 1, "{n}: turn {label}"),
            Err(Error::VersionConflict { .. }) => {
                assert_eq!(count, 0, "{n}: lost turn {label} merged")
            }
            Err(e) => panic!("{n}: turn {label}: {e:?}"),
        }
    }
    let orders: Vec<u64> = hist.iter().rev().map(|t| t.commit_order).collect();
    assert_eq!(orders, (1..=hist.len() as u64).collect::<Vec<_>>(), "{n}");
    for w in hist.windows(2) {
        assert_eq!(
            w[0].parent_config
                .as_ref()
                .unwrap()
                .checkpoint_id
                .as_deref(),
            Some(w[1].checkpoint.id.as_str()),
            "{n}: one chain"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_many_racing_turns() {
    let db = SqliteDb::new().await;
    put_many_vs_turns(Arc::new(db.saver().await), "sqlite").await;
    let pg = PgDb::new().await;
    put_many_vs_turns(Arc::new(pg.saver().await), "postgres").await;
    pg.drop_schema().await;
}

/// Shallow savers on two pools race head+1 commits with writes: each commit
/// wins or conflicts, and one checkpoint (the last win, with its writes) is kept.
async fn shallow_race(a: Arc<dyn Saver>, b: Arc<dyn Saver>, n: &str) {
    a.put(cp("sh", "root", None, Some(1))).await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..6 {
        let s = if t % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            let mut wins = 0u64;
            for i in 0..40 {
                let head = s
                    .get_tuple(&CheckpointRef::latest("sh"))
                    .await
                    .unwrap()
                    .unwrap();
                let id = format!("s{t}-{i}");
                let w = PendingWrite {
                    task_id: id.clone(),
                    task_path: "n".into(),
                    idx: 0,
                    channel: "foo".into(),
                    value: json!(id),
                };
                let c = cp(
                    "sh",
                    &id,
                    Some(&head.checkpoint.id),
                    Some(head.commit_order + 1),
                );
                match s.put_checkpoint_with_writes(c, vec![w]).await {
                    Ok(_) => wins += 1,
                    Err(Error::VersionConflict { .. }) => {}
                    Err(e) => panic!("unexpected error under concurrency: {e:?}"),
                }
            }
            wins
        }));
    }
    let mut wins = 0;
    for h in tasks {
        wins += h.await.unwrap();
    }
    let kept = a.list(&ListFilter::thread("sh")).await.unwrap();
    assert_eq!(kept.len(), 1, "{n}: a shallow thread keeps one checkpoint");
    assert_eq!(
        kept[0].commit_order,
        1 + wins,
        "{n}: every win took one commit order"
    );
    assert_eq!(kept[0].pending_writes.len(), 1, "{n}");
    assert_eq!(
        kept[0].pending_writes[0].value,
        json!(kept[0].checkpoint.id),
        "{n}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shallow_savers_race() {
    let db = SqliteDb::new().await;
    let a = db.saver().await.shallow();
    let b = db
        .saver_on(
            sqlx::sqlite::SqlitePoolOptions::new().max_connections(3),
            db.connect_options(),
        )
        .await
        .shallow();
    shallow_race(Arc::new(a), Arc::new(b), "sqlite").await;
    let pg = PgDb::new().await;
    let a = pg.saver().await.shallow();
    let b = pg
        .saver_on(
            sqlx::postgres::PgPoolOptions::new().max_connections(3),
            super::common::pg_url().parse().unwrap(),
        )
        .await
        .shallow();
    shallow_race(Arc::new(a), Arc::new(b), "postgres").await;
    pg.drop_schema().await;
}

/// Processes that open one SQLite file at once, while one of them creates
/// it, switches it to WAL and migrates it, all get a saver: the switch to
/// WAL takes a lock SQLite does not wait for, so a connection opened
/// meanwhile failed with "database is locked" instead of waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn savers_opened_while_another_creates_the_file_all_connect() {
    for round in 0..60 {
        let file = weaver_tests::TempSqlite::new("weaver-open-race");
        let url = file.url();
        let opens: Vec<_> = (0..6)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move { weaver::checkpoint::SqliteSaver::connect(&url).await })
            })
            .collect();
        for open in opens {
            match open.await.unwrap() {
                Ok(saver) => saver.pool().close().await,
                Err(e) => panic!("round {round}: {e}"),
            }
        }
    }
}
