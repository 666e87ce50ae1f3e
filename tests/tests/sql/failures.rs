//! Failure injection: the database fails underneath the saver or store
//! (server sessions terminated, locks held past a timeout, a full
//! disk). Every call returns a typed error in bounded time, nothing is
//! half-written, and the next call after the failure works.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::{AssertSqlSafe, PgPool};
use weaver::checkpoint::{BatchEntry, CheckpointRef, ListFilter, PostgresSaver};
use weaver::migrate::{self, Adapter, PgSchema};
use weaver::prelude::*;
use weaver::store::{PostgresStore, SqliteStore, Store};
use weaver_tests::states::{Steps, StepsUpdate};

use crate::common::{PgDb, SqliteDb, cp, pg_url, two_step};

const MODES: [Durability; 3] = [Durability::Sync, Durability::Async, Durability::Exit];

/// `f`, or a panic if it takes longer than 30 s (a hang).
async fn t<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("the call hung")
}

/// Terminates this test's server sessions (those named `app`).
async fn kill(admin: &PgPool, app: &str) -> usize {
    let sql = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1";
    let killed: Vec<bool> = sqlx::query_scalar(sql)
        .bind(app)
        .fetch_all(admin)
        .await
        .unwrap();
    assert!(killed.iter().all(|k| *k));
    killed.len()
}

fn app_options(db: &PgDb) -> (String, PgConnectOptions) {
    let app = format!("wf_{}", db.schema);
    let options = pg_url().parse::<PgConnectOptions>().unwrap();
    (app.clone(), options.application_name(&app))
}

/// The thread's history is one chain: newest first, each checkpoint's
/// parent the one stored before it, commit orders 1, 2, 3 …
async fn one_chain(saver: &dyn Saver, thread: &str) -> usize {
    let h = t(saver.list(&ListFilter::thread(thread))).await.unwrap();
    for (i, w) in h.windows(2).enumerate() {
        let parent = w[0]
            .parent_config
            .as_ref()
            .and_then(|p| p.checkpoint_id.clone());
        assert_eq!(
            parent.as_deref(),
            Some(&*w[1].checkpoint.id),
            "{thread} #{i}"
        );
    }
    let orders: Vec<u64> = h.iter().rev().map(|c| c.commit_order).collect();
    assert_eq!(orders, (1..=h.len() as u64).collect::<Vec<_>>(), "{thread}");
    h.len()
}

fn storage<T: std::fmt::Debug>(r: &weaver::Result<T>, what: &str) {
    if let Err(e) = r {
        assert!(matches!(e, Error::Storage { .. }), "{what}: {e:?}");
    }
}

/// START → kill → b → END; `kill` terminates the sessions named `app` when
/// `armed` is set (once).
fn killer(
    saver: Arc<dyn Saver>,
    admin: PgPool,
    app: String,
    armed: Arc<AtomicBool>,
) -> CompiledGraph<Steps> {
    Graph::<Steps>::new("killer")
        .add_node("kill", move |_: &Steps| {
            let (admin, app, armed) = (admin.clone(), app.clone(), armed.clone());
            async move {
                if armed.swap(false, Ordering::SeqCst) {
                    kill(&admin, &app).await;
                }
                StepsUpdate::default().foo("k").bar(["k"])
            }
        })
        .add_node("b", |_: &Steps| StepsUpdate::default().foo("b").bar(["b"]))
        .add_sequence([START, "kill", "b", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

/// A pool whose connections may grow the file by 40 pages only (a disk
/// that fills up).
async fn capped(db: &SqliteDb) -> SqlitePoolOptions {
    let pages: i64 = sqlx::query_scalar("PRAGMA page_count")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let cap = format!("PRAGMA max_page_count = {}", pages + 40);
    SqlitePoolOptions::new().after_connect(move |c, _| {
        let cap = cap.clone();
        Box::pin(async move { sqlx::raw_sql(AssertSqlSafe(cap)).execute(c).await.map(drop) })
    })
}

fn noise() -> String {
    (0..400)
        .map(|_| uuid::Uuid::now_v7().simple().to_string())
        .collect()
}

/// Runs `graph` on `config` to completion after a possibly failed run:
/// `continue_run` if the last run stopped part way, else `invoke`.
async fn finish(graph: &CompiledGraph<Steps>, config: &RunConfig, failed: bool) -> Steps {
    let r = if failed {
        t(graph.continue_run(config)).await
    } else {
        t(graph.invoke(Steps::default(), config)).await
    };
    r.expect("the call after the failure should work")
        .complete()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_sessions_killed_between_invokes() {
    let db = PgDb::new().await;
    let (app, options) = app_options(&db);
    let saver: Arc<dyn Saver> = Arc::new(db.saver_on(PgPoolOptions::new(), options).await);
    let graph = two_step(saver.clone());
    for mode in MODES {
        let config = RunConfig::thread(format!("between-{mode:?}")).durability(mode);
        t(graph.invoke(Steps::default(), &config)).await.unwrap();
        assert!(kill(&db.pool, &app).await > 0);
        // The run starts with a read, which finds the saver's connection
        // gone and reads again through the pool: the run goes through.
        let r = t(graph.invoke(Steps::default(), &config)).await;
        assert!(r.is_ok(), "{mode:?}: invoke after the kill: {r:?}");
        let again = t(graph.invoke(Steps::default(), &config)).await;
        let state = again
            .expect("the second invoke after the kill failed")
            .complete()
            .unwrap();
        assert_eq!(state.bar.len(), 6, "{mode:?}: {:?}", state.bar);
        one_chain(&*saver, &format!("between-{mode:?}")).await;
    }
    drop((graph, saver));
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_sessions_killed_inside_a_node() {
    let db = PgDb::new().await;
    let (app, options) = app_options(&db);
    let saver: Arc<dyn Saver> = Arc::new(db.saver_on(PgPoolOptions::new(), options).await);
    let armed = Arc::new(AtomicBool::new(false));
    let graph = killer(saver.clone(), db.pool.clone(), app, armed.clone());
    for mode in MODES {
        let thread = format!("inside-{mode:?}");
        let config = RunConfig::thread(thread.clone()).durability(mode);
        t(graph.invoke(Steps::default(), &config)).await.unwrap();
        armed.store(true, Ordering::SeqCst);
        let r = t(graph.invoke(Steps::default(), &config)).await;
        assert!(!armed.load(Ordering::SeqCst));
        storage(&r, "the run whose sessions were killed");
        let state = match &r {
            Ok(o) => o.clone().complete().unwrap(),
            // `exit` stores nothing before the run ends: run it again.
            Err(e) => {
                eprintln!("{mode:?} run whose sessions were killed: {e}");
                finish(&graph, &config, mode != Durability::Exit).await
            }
        };
        assert_eq!(state.bar, ["k", "b", "k", "b"], "{mode:?}: {r:?}");
        one_chain(&*saver, &thread).await;
        let state = finish(&graph, &config, false).await;
        assert_eq!(state.bar.len(), 6, "{mode:?}");
        one_chain(&*saver, &thread).await;
    }
    drop((graph, saver));
    db.drop_schema().await;
}

/// `PostgresSaver::connect` builds its own pool: after the server drops
/// its sessions (a restart, a failover), reads work again at once (one that
/// finds the saver's own connection gone reads again through the pool).
#[tokio::test]
async fn pg_connect_saver_recovers_after_sessions_are_killed() {
    let db = PgDb::new().await;
    let app = format!("wf_{}", db.schema);
    let create = format!("CREATE SCHEMA \"{}\"", db.schema);
    sqlx::raw_sql(AssertSqlSafe(create))
        .execute(&db.pool)
        .await
        .unwrap();
    let url = format!(
        "{}?application_name={app}&options[search_path]={}",
        pg_url(),
        db.schema
    );
    let saver = t(PostgresSaver::connect(&url)).await.unwrap();
    // Some concurrent reads, so the pool holds idle connections too.
    let head = CheckpointRef::latest("t");
    let reads = (0..4).map(|_| saver.get_tuple(&head));
    for r in futures_util::future::join_all(reads).await {
        r.unwrap();
    }
    t(saver.put(cp("t", "a", None, Some(1)))).await.unwrap();
    let killed = kill(&db.pool, &app).await;
    assert!(killed > 1);
    let mut outcomes = Vec::new();
    for _ in 0..4 {
        let r = t(saver.get_tuple(&CheckpointRef::latest("t"))).await;
        storage(&r, "get_tuple after the kill");
        outcomes.push(
            r.map(|c| c.unwrap().checkpoint.id)
                .map_err(|e| e.to_string()),
        );
    }
    assert!(
        outcomes.iter().all(|o| o.is_ok()),
        "{killed} sessions killed; calls after: {outcomes:#?}"
    );
    drop(saver);
    db.drop_schema().await;
}

/// Another transaction locks a table (`SHARE`: writes wait, reads go on;
/// `ACCESS EXCLUSIVE`: everything waits): with `lock_timeout` and
/// `statement_timeout` set, runs fail typed within about two timeouts, the
/// history stays one chain, and after the release the run resumes (`exit`:
/// runs again) and completes.
#[tokio::test]
async fn pg_write_locks_time_out_mid_run() {
    let db = PgDb::new().await;
    let (_, options) = app_options(&db);
    let options = options.options([("lock_timeout", "500"), ("statement_timeout", "1000")]);
    let saver: Arc<dyn Saver> = Arc::new(db.saver_on(PgPoolOptions::new(), options).await);
    let graph = two_step(saver.clone());
    let cps = "weaver_checkpoints";
    let locks = [
        (cps, "SHARE"),
        ("weaver_checkpoint_writes", "SHARE"),
        (cps, "ACCESS EXCLUSIVE"),
    ];
    for (i, (table, lock)) in locks.into_iter().enumerate() {
        for mode in MODES {
            let thread = format!("{i}-{mode:?}");
            let config = RunConfig::thread(thread.clone()).durability(mode);
            let mut holder = db.pool.begin().await.unwrap();
            let lock = format!("LOCK TABLE \"{}\".{table} IN {lock} MODE", db.schema);
            sqlx::raw_sql(AssertSqlSafe(lock))
                .execute(&mut *holder)
                .await
                .unwrap();
            let started = Instant::now();
            let r = t(graph.invoke(Steps::default(), &config)).await;
            let took = started.elapsed();
            storage(&r, &thread);
            assert!(took < Duration::from_secs(3), "{thread}: {took:?}");
            holder.rollback().await.unwrap();
            one_chain(&*saver, &thread).await;
            let state = match r {
                Ok(o) => o.complete().unwrap(),
                Err(_) => {
                    let stored = one_chain(&*saver, &thread).await;
                    finish(&graph, &config, mode != Durability::Exit && stored > 0).await
                }
            };
            assert_eq!(state.bar, ["a", "b"], "{thread}");
            one_chain(&*saver, &thread).await;
        }
    }
    drop((graph, saver));
    db.drop_schema().await;
}

/// The disk fills up (SQLite `max_page_count`): groups and batches fail
/// typed and write nothing, and once space is freed writes work again.
#[tokio::test]
async fn sqlite_full_database() {
    let db = SqliteDb::new().await;
    db.saver().await;
    let pool = capped(&db).await;
    let saver = db.saver_on(pool, db.connect_options()).await;
    let big = |thread: &str, id: &str, parent: Option<&str>, order: u64| {
        let mut c = cp(thread, id, parent, Some(order));
        c.checkpoint
            .channel_values
            .insert("foo".into(), serde_json::json!(noise()));
        c
    };
    let mut stored = 0;
    let err = loop {
        let thread = format!("fill-{stored}");
        let entries = (1..=3u64)
            .map(|i| BatchEntry {
                checkpoint: big(&thread, &format!("c{i}"), (i > 1).then_some("c1"), i),
                writes: Vec::new(),
            })
            .collect();
        match t(saver.put_many(entries)).await {
            Ok(_) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored < 100, "the page cap was not reached");
    };
    assert!(matches!(err, Error::Storage { .. }), "{err:?}");
    assert!(stored > 0);
    let failed = format!("fill-{stored}");
    let left = t(saver.list(&ListFilter::thread(failed.as_str())))
        .await
        .unwrap();
    assert!(left.is_empty(), "half a batch stored: {}", left.len());
    let head = t(saver.get_tuple(&CheckpointRef::latest("fill-0")))
        .await
        .unwrap();
    assert_eq!(head.unwrap().commit_order, 3);
    // Space is freed, then writes go on; the calls run one after another.
    let mut outcomes = Vec::new();
    for i in 0..stored.min(4) {
        let r = t(saver.delete_thread(&format!("fill-{i}"))).await;
        outcomes.push(r.map_err(|e| e.to_string()));
    }
    assert!(outcomes.iter().all(|r| r.is_ok()), "{outcomes:#?}");
    t(saver.put(big(&failed, "c1", None, 1))).await.unwrap();
    assert_eq!(one_chain(&saver, &failed).await, 1);
}

/// A shallow saver's writers take the thread's advisory lock: held by
/// another session past `lock_timeout`, the write fails typed, writes
/// nothing, and the next one works once it is released.
#[tokio::test]
async fn pg_shallow_write_times_out_on_the_thread_lock() {
    let db = PgDb::new().await;
    let (_, options) = app_options(&db);
    let options = options.options([("lock_timeout", "500")]);
    let saver = db.saver_on(PgPoolOptions::new(), options).await.shallow();
    t(saver.put(cp("t", "a", None, Some(1)))).await.unwrap();
    let mut holder = db.pool.acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock(hashtext('t'), hashtext(''))")
        .execute(&mut *holder)
        .await
        .unwrap();
    let started = Instant::now();
    let r = t(saver.put(cp("t", "b", Some("a"), Some(2)))).await;
    assert!(matches!(r, Err(Error::Storage { .. })), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let head = t(saver.get_tuple(&CheckpointRef::latest("t")))
        .await
        .unwrap();
    assert_eq!(head.unwrap().checkpoint.id, "a");
    sqlx::query("SELECT pg_advisory_unlock_all()")
        .execute(&mut *holder)
        .await
        .unwrap();
    t(saver.put(cp("t", "b", Some("a"), Some(2))))
        .await
        .unwrap();
    let head = t(saver.get_tuple(&CheckpointRef::latest("t")))
        .await
        .unwrap();
    assert_eq!(head.unwrap().checkpoint.id, "b");
    drop((holder, saver));
    db.drop_schema().await;
}

/// Another connection holds `BEGIN EXCLUSIVE` past the busy timeout: runs
/// fail typed after about one timeout, reads still work (WAL), nothing is
/// written, and after the release the next run works.
#[tokio::test]
async fn sqlite_exclusive_lock_beyond_the_busy_timeout() {
    let db = SqliteDb::new().await;
    let timeout = Duration::from_millis(500);
    let options = db.connect_options().busy_timeout(timeout);
    let saver: Arc<dyn Saver> = Arc::new(db.saver_on(SqlitePoolOptions::new(), options).await);
    let graph = two_step(saver.clone());
    for mode in MODES {
        let config = RunConfig::thread(format!("busy-{mode:?}")).durability(mode);
        t(graph.invoke(Steps::default(), &config)).await.unwrap();
    }
    let mut holder = db.pool.acquire().await.unwrap();
    sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut *holder)
        .await
        .unwrap();
    for mode in MODES {
        let thread = format!("busy-{mode:?}");
        let config = RunConfig::thread(thread.clone()).durability(mode);
        let before = one_chain(&*saver, &thread).await;
        let started = Instant::now();
        let r = t(graph.invoke(Steps::default(), &config)).await;
        assert!(matches!(r, Err(Error::Storage { .. })), "{mode:?}: {r:?}");
        let took = started.elapsed();
        assert!(took < timeout * 6, "{mode:?}: {took:?}");
        let state = t(graph.get_state(&config)).await.unwrap();
        assert_eq!(state.values.bar, ["a", "b"], "{mode:?}");
        assert_eq!(one_chain(&*saver, &thread).await, before, "{mode:?}");
    }
    sqlx::query("ROLLBACK").execute(&mut *holder).await.unwrap();
    drop(holder);
    for mode in MODES {
        let thread = format!("busy-{mode:?}");
        let config = RunConfig::thread(thread.clone()).durability(mode);
        let state = finish(&graph, &config, false).await;
        assert_eq!(state.bar, ["a", "b", "a", "b"], "{mode:?}");
        one_chain(&*saver, &thread).await;
    }
}

#[tokio::test]
async fn pg_store_sessions_killed_between_batches() {
    let db = PgDb::new().await;
    let (app, options) = app_options(&db);
    migrate::up(
        &PgSchema::new(&db.pool, &db.schema).unwrap(),
        &[Adapter::Store],
        None,
    )
    .await
    .unwrap();
    let pool = PgPoolOptions::new().connect_with(options).await.unwrap();
    let store = PostgresStore::new(pool).with_prefix(&db.schema).unwrap();
    t(store.put(&["u"], "k0", serde_json::json!(0)))
        .await
        .unwrap();
    for i in 1..4 {
        assert!(kill(&db.pool, &app).await > 0);
        let r = t(store.put(&["u"], &format!("k{i}"), serde_json::json!(i))).await;
        assert!(r.is_ok(), "put after a kill: {r:?}");
        let got = t(store.get(&["u"], &format!("k{i}"))).await.unwrap();
        assert_eq!(got.unwrap().value, serde_json::json!(i));
    }
    drop(store);
    db.drop_schema().await;
}

/// The store: a write lock held past the busy timeout, then a full disk.
/// Each fails typed, and once the lock is gone or space is freed, every
/// next call works.
#[tokio::test]
async fn sqlite_store_locked_then_full() {
    let db = SqliteDb::new().await;
    migrate::up(&db.pool, &[Adapter::Store], None)
        .await
        .unwrap();
    let pool = capped(&db).await;
    let options = db
        .connect_options()
        .busy_timeout(Duration::from_millis(500));
    let store = SqliteStore::new(pool.connect_with(options).await.unwrap());
    t(store.put(&["u"], "a", serde_json::json!(1)))
        .await
        .unwrap();
    let mut holder = db.pool.acquire().await.unwrap();
    sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut *holder)
        .await
        .unwrap();
    let r = t(store.put(&["u"], "b", serde_json::json!(2))).await;
    assert!(matches!(r, Err(Error::Storage { .. })), "{r:?}");
    sqlx::query("ROLLBACK").execute(&mut *holder).await.unwrap();
    drop(holder);
    assert!(t(store.get(&["u"], "b")).await.unwrap().is_none());
    t(store.put(&["u"], "b", serde_json::json!(2)))
        .await
        .unwrap();
    let noise = noise();
    let mut n = 0;
    let err = loop {
        match t(store.put(&["big"], &format!("k{n}"), serde_json::json!(noise))).await {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 100, "the page cap was not reached");
    };
    assert!(matches!(err, Error::Storage { .. }), "{err:?}");
    let mut outcomes = Vec::new();
    for i in 0..n.min(4) {
        let r = t(store.delete(&["big"], &format!("k{i}"))).await;
        outcomes.push(r.map_err(|e| e.to_string()));
    }
    assert!(outcomes.iter().all(|r| r.is_ok()), "{outcomes:#?}");
}

/// Under `Async` durability a background write that fails stops the run
/// at its next step boundary with that write's error: no later node runs
/// while nothing it builds on is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_background_write_stops_the_run_at_the_next_step() {
    use std::sync::atomic::AtomicUsize;
    use weaver_tests::forwarding::Forwarding;
    let db = SqliteDb::new().await;
    let failing = Arc::new(Forwarding::leasing(Arc::new(db.saver().await)));
    let ran = Arc::new(AtomicUsize::new(0));
    // `a` breaks the database as it starts: the checkpoint its step ends
    // with is the first write that fails.
    let step = |name: &'static str| {
        let (ran, failing) = (ran.clone(), failing.clone());
        move |_: &Steps| {
            let (ran, failing) = (ran.clone(), failing.clone());
            async move {
                if name == "a" {
                    failing.fail_groups.store(true, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
                if name == "c" {
                    ran.fetch_add(1, Ordering::SeqCst);
                }
                StepsUpdate::default().bar([name])
            }
        }
    };
    let graph = Graph::<Steps>::new("abc")
        .add_node("a", step("a"))
        .add_node("b", step("b"))
        .add_node("c", step("c"))
        .add_sequence([START, "a", "b", "c", END])
        .compile(Compile::new().checkpointer_arc(failing.clone()))
        .unwrap();
    let config = RunConfig::thread("t")
        .durability(Durability::Async)
        .multitask(weaver::config::Multitask::Race);
    let r = t(graph.invoke(Steps::default(), &config)).await;
    storage(&r, "the run");
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "c ran after the write failed"
    );
}

/// Under `Sync` durability a task's writes are stored as it finishes;
/// while they are (a slow database), its siblings go on: a sibling's
/// timeout counts its own time, not the store's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_store_of_one_tasks_writes_does_not_time_its_sibling_out() {
    use weaver_tests::forwarding::Forwarding;
    let db = SqliteDb::new().await;
    let slow_db = Arc::new(Forwarding::leasing(Arc::new(db.saver().await)));
    *slow_db.slow_writes.lock().unwrap() = Some(Duration::from_millis(800));
    let graph = Graph::<Steps>::new("siblings")
        .add_node("fast", |_: &Steps| async {
            // Both tasks have started before this one ends.
            tokio::time::sleep(Duration::from_millis(20)).await;
            StepsUpdate::default().bar(["fast"])
        })
        .add_node_with(
            "slow",
            |_: &Steps| async {
                for _ in 0..3 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                StepsUpdate::default().bar(["slow"])
            },
            NodePolicy::new().timeout(Duration::from_millis(500)),
        )
        .add_edge(START, "fast")
        .add_edge(START, "slow")
        .add_edge("fast", END)
        .add_edge("slow", END)
        .compile(Compile::new().checkpointer_arc(slow_db))
        .unwrap();
    let config = RunConfig::thread("t")
        .durability(Durability::Sync)
        .multitask(weaver::config::Multitask::Race);
    let done = t(graph.invoke(Steps::default(), &config))
        .await
        .unwrap_or_else(|e| panic!("the sibling was timed out by the store: {e}"))
        .complete()
        .unwrap();
    let mut bar = done.bar;
    bar.sort();
    assert_eq!(bar, ["fast", "slow"]);
}
