//! Maintenance operations (prune, copy, fork, delete, list_threads, lineage)
//! on the three savers, and crash safety: a child process running turns is
//! killed with SIGKILL at random moments.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use weaver::checkpoint::{
    CheckpointRef, CheckpointTuple, ForkOptions, LineageRequest, ListFilter, PendingWrite,
    PostgresSaver, PruneStrategy, SqliteSaver, limits,
};
use weaver::prelude::*;

use super::common::{
    Chat, ChatUpdate, PgDb, SqliteDb, assert_one_chain, chat, chat_counting, cp, pg_url,
    transcript, user,
};

fn cold(saver: &Arc<dyn Saver>) -> CompiledGraph<Chat> {
    chat(saver.clone())
}

fn show<T: std::fmt::Debug>(r: &weaver::Result<T>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("err {e}"),
    }
}

fn wr(task: &str, idx: i64, channel: &str) -> PendingWrite {
    let value = json!(format!("{task}/{idx}"));
    PendingWrite {
        task_id: task.into(),
        task_path: "side".into(),
        idx,
        channel: channel.into(),
        value,
    }
}

/// The bytes a `fork_at` of `from` copying at most `count` checkpoints
/// counts against its ceiling: the records and their pending writes.
async fn copied_bytes(s: &dyn Saver, from: &CheckpointRef, count: usize) -> usize {
    let mut bytes = 0;
    for r in s.lineage(from, count, None).await.unwrap() {
        bytes += limits::record_size(&r.checkpoint).unwrap();
        let t = s.get_tuple(&r.config).await.unwrap().unwrap();
        for w in &t.pending_writes {
            bytes += limits::write_size(w).unwrap();
        }
    }
    bytes
}

/// A memory, an SQLite and a PostgreSQL saver (the databases kept alive).
struct Three {
    savers: Vec<(&'static str, Arc<dyn Saver>)>,
    sqlite: SqliteDb,
    pg: PgDb,
}

impl Three {
    async fn new() -> Self {
        let (sqlite, pg) = (SqliteDb::new().await, PgDb::new().await);
        let savers: Vec<(&'static str, Arc<dyn Saver>)> = vec![
            ("memory", Arc::new(InMemorySaver::new())),
            ("sqlite", Arc::new(sqlite.saver().await)),
            ("postgres", Arc::new(pg.saver().await)),
        ];
        Three { savers, sqlite, pg }
    }
}

type Line = weaver::Result<Vec<CheckpointTuple>>;

fn ids(r: Line) -> weaver::Result<Vec<(String, u64)>> {
    r.map(|v| {
        v.into_iter()
            .map(|t| (t.checkpoint.id, t.commit_order))
            .collect()
    })
}

/// Every maintenance operation on fixed records (namespaces, an in-thread
/// fork, pending writes), logged; each saver must log what memory logs.
async fn scenario(s: &dyn Saver) -> Vec<String> {
    let mut log = Vec::new();
    macro_rules! step {
        ($label:expr, $e:expr) => {
            log.push(format!("{}: {}", $label, show(&$e)))
        };
    }
    let t = CheckpointRef::latest("t");
    let sub = |id: &str| t.at(id).ns("sub");
    let (e, opts) = (t.at("e"), ForkOptions::default());
    // t: a <- b <- c and a <- d <- e; t/sub: s1 <- s2; only-sub/sub: o1; u: u1.
    for (thread, ns, id, parent) in [
        ("t", "", "a", None),
        ("t", "", "b", Some("a")),
        ("t", "", "c", Some("b")),
        ("t", "", "d", Some("a")),
        ("t", "", "e", Some("d")),
        ("t", "sub", "s1", None),
        ("t", "sub", "s2", Some("s1")),
        ("only-sub", "sub", "o1", None),
        ("u", "", "u1", None),
    ] {
        let mut c = cp(thread, id, parent, None);
        c.checkpoint_ns = ns.into();
        s.put(c).await.unwrap();
    }
    for (at, w) in [
        (t.at("c"), vec![wr("x", 0, "foo")]),
        (e.clone(), vec![wr("y", 0, "foo"), wr("y", -1, "__error__")]),
        (sub("s2"), vec![wr("z", 0, "foo")]),
        (sub("s1"), vec![wr("w", 0, "foo")]),
    ] {
        s.put_writes(&at, w).await.unwrap();
    }
    let max = usize::MAX;
    for (limit, offset) in [
        (None, 0),
        (Some(0), 0),
        (Some(0), 2),
        (Some(1), 0),
        (Some(2), 1),
    ] {
        step!(
            format!("list_threads({limit:?}, {offset})"),
            crate::common::counts(s.list_threads(limit, offset).await)
        );
    }
    for (limit, offset) in [(None, 3), (None, 99), (Some(max), 1), (Some(1), max)] {
        step!(
            format!("list_threads({limit:?}, {offset})"),
            crate::common::counts(s.list_threads(limit, offset).await)
        );
    }
    // lineage: counts 0, 1, 2, 3, unbounded; hints right, wrong and absurd.
    for from in [e.clone(), t.at("c"), sub("s2"), t.at("ghost"), t.clone()] {
        for count in [0, 1, 2, 3, max] {
            for below in [
                None,
                Some(0),
                Some(1),
                Some(4),
                Some(5),
                Some(6),
                Some(1_000),
            ] {
                let r = ids(s.lineage(&from, count, below).await);
                step!(format!("lineage({from:?}, {count}, {below:?})"), r);
            }
        }
        step!(
            "lineage(i64::MAX)",
            ids(s.lineage(&from, 3, Some(i64::MAX as u64)).await)
        );
    }
    let requests: Vec<LineageRequest> = (0..150)
        .map(|i| {
            let from = [e.clone(), t.at("c"), sub("s2"), t.at("b")][i % 4].clone();
            LineageRequest::new(from, 1 + i % 4, Some(3 + (i % 5) as u64))
        })
        .collect();
    let lines = s.lineages(&requests).await;
    step!(
        "lineages(150)",
        lines.map(|v| v.into_iter().map(|l| l.len()).collect::<Vec<_>>())
    );
    // fork_at exactly at and just past each bound, onto taken targets.
    let bytes = copied_bytes(s, &e, max).await;
    for (target, o) in [
        ("f-n0", opts.max_checkpoints(0)),
        ("f-n2", opts.max_checkpoints(2)),
        ("f-n3", opts.max_checkpoints(3)),
        ("f-b-1", opts.max_bytes(bytes - 1)),
        ("f-b", opts.max_bytes(bytes)),
        ("f-both", opts.max_bytes(bytes).max_checkpoints(3)),
        ("f-zero", opts.max_bytes(0)),
        ("t", opts),
        ("only-sub", opts),
    ] {
        step!(
            format!("fork_at(e, {target}, {o:?})"),
            s.fork_at(&e, target, o).await
        );
    }
    step!("fork_at(s2, u)", s.fork_at(&sub("s2"), "u", opts).await);
    step!(
        "fork_at(s2, only-sub)",
        s.fork_at(&sub("s2"), "only-sub", opts).await
    );
    step!("fork_at(no id)", s.fork_at(&t, "f-x", opts).await);
    step!("list(f-n3)", s.list(&ListFilter::thread("f-n3")).await);
    step!("list(u)", s.list(&ListFilter::thread("u")).await);
    // copy_thread onto taken threads, from a missing one, then a copy.
    for (from, to) in [
        ("t", "only-sub"),
        ("ghost", "only-sub"),
        ("ghost", "new"),
        ("t", "t"),
    ] {
        step!(format!("copy({from}, {to})"), s.copy_thread(from, to).await);
    }
    step!("copy(t, t-copy)", s.copy_thread("t", "t-copy").await);
    step!("list(t-copy)", s.list(&ListFilter::thread("t-copy")).await);
    step!(
        "list_threads after copies",
        crate::common::counts(s.list_threads(None, 0).await)
    );
    // prune: unknown and repeated threads, both strategies.
    let twice = ["t".to_owned(), "ghost".to_owned(), "t".to_owned()];
    step!(
        "prune(t, ghost, t)",
        s.prune(&twice, PruneStrategy::KeepLatest).await
    );
    step!("list(t) pruned", s.list(&ListFilter::thread("t")).await);
    step!("get(t) pruned", s.get_tuple(&t).await);
    step!("get(t/sub) pruned", s.get_tuple(&sub("s2")).await);
    step!("lineage(e) pruned", ids(s.lineage(&e, 10, Some(6)).await));
    step!("fork_at(e) pruned", s.fork_at(&e, "f-p", opts).await);
    step!("prune(none)", s.prune(&[], PruneStrategy::KeepLatest).await);
    step!(
        "prune(ghost)",
        s.prune(&["ghost".into()], PruneStrategy::Delete).await
    );
    let copies = ["t-copy".to_owned(), "t-copy".to_owned()];
    step!(
        "prune(t-copy x2)",
        s.prune(&copies, PruneStrategy::Delete).await
    );
    step!(
        "put after prune",
        s.put(cp("t", "f", Some("e"), Some(6))).await
    );
    step!(
        "put stale after prune",
        s.put(cp("t", "g", Some("e"), Some(5))).await
    );
    // delete_thread, then the id again.
    step!("delete(t)", s.delete_thread("t").await);
    step!("get(t) deleted", s.get_tuple(&t).await);
    step!(
        "put_writes deleted",
        s.put_writes(&e, vec![wr("q", 0, "foo")]).await
    );
    step!(
        "put e/d deleted",
        s.put(cp("t", "e", Some("d"), None)).await
    );
    step!("put a again", s.put(cp("t", "a", None, None)).await);
    step!("put b again", s.put(cp("t", "b", Some("a"), None)).await);
    step!("list(t) reused", s.list(&ListFilter::thread("t")).await);
    step!(
        "lineage(b) reused",
        ids(s.lineage(&t.at("b"), 10, Some(3)).await)
    );
    step!(
        "fork_at(b) reused",
        s.fork_at(&t.at("b"), "f-r", opts).await
    );
    step!(
        "list_threads end",
        crate::common::counts(s.list_threads(None, 0).await)
    );
    log
}

#[tokio::test]
async fn maintenance_ops_match_memory() {
    let three = Three::new().await;
    let expected = scenario(three.savers[0].1.as_ref()).await;
    let mut diffs = Vec::new();
    for (name, s) in &three.savers[1..] {
        let got = scenario(s.as_ref()).await;
        assert_eq!(got.len(), expected.len());
        for (e, g) in expected.iter().zip(&got) {
            if e != g {
                diffs.push(format!("memory: {e}\n{name}: {g}"));
            }
        }
    }
    three.pg.drop_schema().await;
    assert!(
        diffs.is_empty(),
        "{} differences:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}

/// `below` is only a hint (a child's commit order): memory ignores it, so a
/// hint past `i64::MAX` must not turn a read into an error.
#[tokio::test]
async fn a_lineage_hint_past_i64_max_is_still_only_a_hint() {
    let three = Three::new().await;
    let mut bad = Vec::new();
    for (name, s) in &three.savers {
        s.put(cp("t", "a", None, Some(1))).await.unwrap();
        s.put(cp("t", "b", Some("a"), Some(2))).await.unwrap();
        let from = CheckpointRef::latest("t").at("b");
        for below in [i64::MAX as u64 + 1, u64::MAX] {
            let r = ids(s.lineage(&from, 3, Some(below)).await);
            if !matches!(&r, Ok(l) if l.len() == 2) {
                bad.push(format!(
                    "{name} lineage(b, 3, Some({below})) = {}",
                    show(&r)
                ));
            }
        }
    }
    three.pg.drop_schema().await;
    assert!(bad.is_empty(), "{bad:#?}");
}

/// What a user sees of a checkpoint, without ids and timestamps.
fn seen(s: &StateSnapshot<Chat>) -> String {
    let meta = s.metadata.as_ref().map(|m| (m.step, m.source));
    let (v, n, o, w) = (&s.values, &s.next, s.commit_order, &s.pending_writes);
    format!("{v:?} next={n:?} meta={meta:?} order={o} writes={w:?}")
}

async fn history(g: &CompiledGraph<Chat>, config: &RunConfig) -> Vec<String> {
    let h = g
        .get_state_history(config, History::default())
        .await
        .unwrap();
    h.iter().map(seen).collect()
}

/// A thread with delta channels in two namespaces, an in-thread fork and a
/// pending write on each head: copied, pruned, forked, continued, deleted
/// and reused, every checkpoint read back whole on every saver.
#[tokio::test]
async fn delta_threads_survive_copy_prune_fork_and_delete() {
    let three = Three::new().await;
    for (name, saver) in &three.savers {
        let g = cold(saver);
        let (root, sub) = (
            RunConfig::thread("t"),
            RunConfig::thread("t").checkpoint_ns("sub"),
        );
        for i in 0..40 {
            g.invoke(user(i), &root).await.unwrap();
        }
        for i in 0..5 {
            g.invoke(user(100 + i), &sub).await.unwrap();
        }
        let h = g
            .get_state_history(&root, History::default())
            .await
            .unwrap();
        let at = root
            .clone()
            .checkpoint_id(h[10].config.get_checkpoint_id().unwrap());
        let edit = ChatUpdate::default().messages(vec!["edited".into()]);
        g.update_state(&at, edit, Some("chat")).await.unwrap();
        g.invoke(user(200), &root).await.unwrap();
        let configs = [root.clone(), sub.clone()];
        let mut before = Vec::new();
        for (i, c) in configs.iter().enumerate() {
            let head = saver
                .get_tuple(&CheckpointRef::latest("t").ns(c.ns()))
                .await
                .unwrap();
            let w = vec![wr(&format!("side{i}"), 0, "note")];
            saver.put_writes(&head.unwrap().config, w).await.unwrap();
            before.push(history(&g, c).await);
        }
        // Copy, then prune the source: the copy keeps everything.
        saver.copy_thread("t", "c").await.unwrap();
        for (from, to) in [("t", "c"), ("ghost", "c"), ("ghost", "x")] {
            let r = saver.copy_thread(from, to).await;
            let ok = matches!(
                r,
                Err(Error::ThreadExists { .. } | Error::ThreadNotFound { .. })
            );
            assert!(ok, "{name} copy({from}, {to}): {r:?}");
        }
        let total = saver.list(&ListFilter::thread("t")).await.unwrap().len() as u64;
        let both = ["t".to_owned(), "ghost".to_owned()];
        let pruned = saver.prune(&both, PruneStrategy::KeepLatest).await.unwrap();
        assert_eq!(pruned, total - 2, "{name}: one head per namespace is kept");
        for k in saver.list(&ListFilter::thread("t")).await.unwrap() {
            assert!(
                k.checkpoint.deltas.is_empty(),
                "{name}: a head kept as deltas"
            );
            assert_eq!(
                k.pending_writes.len(),
                1,
                "{name}: the head's writes are kept"
            );
        }
        for reader in [&g, &cold(saver)] {
            for (c, want) in configs.iter().zip(&before) {
                assert_eq!(
                    history(reader, c).await,
                    want[..1],
                    "{name} pruned {}",
                    c.ns()
                );
                let copy = RunConfig::thread("c").checkpoint_ns(c.ns());
                assert_eq!(
                    &history(reader, &copy).await,
                    want,
                    "{name} copy {}",
                    c.ns()
                );
            }
        }
        // fork_at exactly at its bounds; the fork reads as its source.
        let head = saver
            .get_tuple(&CheckpointRef::latest("c"))
            .await
            .unwrap()
            .unwrap();
        let n = saver
            .lineage(&head.config, usize::MAX, None)
            .await
            .unwrap()
            .len();
        let bytes = copied_bytes(saver.as_ref(), &head.config, usize::MAX).await;
        let o = ForkOptions::default();
        for (opts, ok) in [
            (o.max_checkpoints(n - 1), false),
            (o.max_bytes(bytes - 1), false),
            (o.max_checkpoints(n).max_bytes(bytes), true),
        ] {
            let r = saver.fork_at(&head.config, "f", opts).await;
            let want = if ok { "ok" } else { "err limit" };
            assert!(
                show(&r).starts_with(want),
                "{name} {opts:?} (n={n}, {bytes} bytes): {r:?}"
            );
        }
        let fork = history(&cold(saver), &RunConfig::thread("f")).await;
        assert_eq!(fork.len(), n, "{name}");
        assert_eq!(
            fork[0].split(" next=").next(),
            before[0][0].split(" next=").next()
        );
        // Every namespace of every thread goes on, from a cold graph.
        for c in [
            &root,
            &sub,
            &RunConfig::thread("c"),
            &RunConfig::thread("f"),
        ] {
            let mut want = g.get_state(c).await.unwrap().values.messages;
            want.extend(["user 300".to_owned(), "ai re user 300".to_owned()]);
            let out = cold(saver).invoke(user(300), c).await.unwrap();
            assert_eq!(out.complete().unwrap().messages, want, "{name} {c:?}");
        }
        // Deleted (by the saver, then through the graph), the id starts afresh.
        for through_graph in [false, true] {
            match through_graph {
                true => g.checkpointer().unwrap().delete_thread("t").await.unwrap(),
                false => saver.delete_thread("t").await.unwrap(),
            }
            assert!(history(&g, &root).await.is_empty(), "{name}");
            assert!(matches!(
                g.continue_run(&root).await,
                Err(Error::ThreadNotFound { .. })
            ));
            let out = g.invoke(user(0), &root).await.unwrap().complete().unwrap();
            assert_eq!(out.messages, transcript(1), "{name}");
            assert_eq!(history(&g, &root).await.len(), 3, "{name}");
        }
        let threads = saver.list_threads(None, 0).await.unwrap();
        let threads: Vec<_> = threads
            .iter()
            .map(|t| (t.thread_id.as_str(), t.checkpoints))
            .collect();
        assert_eq!(
            threads,
            [
                ("c", before[0].len() as u64 + before[1].len() as u64 + 3),
                ("f", n as u64 + 3),
                ("t", 3)
            ]
        );
    }
    three.pg.drop_schema().await;
}

/// A turn cut off after its node's writes were stored but before the
/// checkpoint that commits them (what a kill under the default `async`
/// durability leaves): `get_state` shows the turn done (the reply in the
/// values, `next` empty), so the user sends the next message. The reply
/// must stay.
#[tokio::test]
async fn a_reply_that_get_state_shows_survives_the_next_message() {
    let three = Three::new().await;
    let drop_head = "DELETE FROM {p}weaver_checkpoints WHERE thread_id = 't' AND commit_order = 6";
    for (name, saver) in &three.savers[1..] {
        let g = cold(saver);
        let config = RunConfig::thread("t");
        for i in 0..2 {
            g.invoke(user(i), &config).await.unwrap();
        }
        // Drop the last checkpoint: the node's writes stay on its parent.
        if *name == "sqlite" {
            let sql = sqlx::AssertSqlSafe(drop_head.replace("{p}", ""));
            sqlx::query(sql).execute(&three.sqlite.pool).await.unwrap();
        } else {
            let sql = drop_head.replace("{p}", &format!("\"{}\".", three.pg.schema));
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&three.pg.pool)
                .await
                .unwrap();
        }
        let g = cold(saver);
        let shown = g.get_state(&config).await.unwrap();
        assert_eq!(shown.values.messages, transcript(2), "{name}");
        if !shown.next.is_empty() {
            g.continue_run(&config).await.unwrap();
        }
        let out = g
            .invoke(user(2), &config)
            .await
            .unwrap()
            .complete()
            .unwrap();
        let next = &shown.next;
        assert_eq!(
            out.messages,
            transcript(3),
            "{name}: get_state showed next = {next:?}"
        );
    }
    three.pg.drop_schema().await;
}

// ---- Crash safety ------------------------------------------------------------

const CHILD_ENV: &str = "WEAVER_MAINT_CRASH_CHILD";

async fn open(spec: &str) -> Arc<dyn Saver> {
    match spec.split_once('|').unwrap() {
        ("sqlite", path) => {
            let options = SqliteSaver::connect_options(&format!("sqlite://{path}")).unwrap();
            let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
            Arc::new(SqliteSaver::new(pool))
        }
        (_, schema) => {
            let options: sqlx::postgres::PgConnectOptions = pg_url().parse().unwrap();
            let options = options.application_name(&format!("wcc_{schema}"));
            let pool = sqlx::PgPool::connect_with(options).await.unwrap();
            Arc::new(PostgresSaver::new(pool).with_prefix(schema).unwrap())
        }
    }
}

/// Waits until a killed child's PostgreSQL sessions are gone: the server
/// may still finish (and commit) a statement the child sent before it died.
async fn child_sessions_gone(spec: &str) {
    let Some(schema) = spec.strip_prefix("pg|") else {
        return;
    };
    let pool = sqlx::PgPool::connect(&pg_url()).await.unwrap();
    let sql = "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = $1";
    for _ in 0..500 {
        let q = sqlx::query_scalar::<_, i64>(sql).bind(format!("wcc_{schema}"));
        if q.fetch_one(&pool).await.unwrap() == 0 {
            return pool.close().await;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the killed child's sessions on {schema} did not end");
}

/// One step of a conversation that may have been cut off: finish the turn
/// the last run left (its head has tasks, whether they ran or not), or start
/// the next. (Not by `next`: see the test above.)
async fn step(g: &CompiledGraph<Chat>, config: &RunConfig) -> Chat {
    let s = g.get_state(config).await.unwrap();
    let out = match s.tasks.is_empty() {
        true => g.invoke(user(s.values.turns as usize), config).await,
        false => g.continue_run(config).await,
    };
    out.unwrap().complete().unwrap()
}

/// The child: runs turns until killed (or 15 s pass).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mode = match std::env::var("WEAVER_MAINT_CRASH_MODE").as_deref() {
        Ok("async") => Durability::Async,
        Ok("exit") => Durability::Exit,
        _ => Durability::Sync,
    };
    let g = cold(&open(&spec).await);
    // No lease: the parent steps the thread as soon as the child is killed.
    let config = RunConfig::thread("crash")
        .durability(mode)
        .multitask(weaver::config::Multitask::Race);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(15) {
        step(&g, &config).await;
    }
}

/// Kills a child running turns at random moments; after each kill the
/// thread is one readable chain and the next step completes exactly one
/// turn, running the node only if its writes were not stored.
async fn crash_rounds(spec: &str, saver: Arc<dyn Saver>) {
    let config = RunConfig::thread("crash").multitask(weaver::config::Multitask::Race);
    let mut last = 0;
    for round in 0..9 {
        let mode = ["async", "sync", "exit"][round % 3];
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "maintenance::crash_child", "--nocapture"])
            .env(CHILD_ENV, spec)
            .env("WEAVER_MAINT_CRASH_MODE", mode)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        tokio::time::sleep(Duration::from_millis(250 + random % 600)).await;
        if let Some(status) = child.try_wait().unwrap() {
            let err = child.wait_with_output().unwrap().stderr;
            panic!(
                "round {round}: the child ended ({status}): {}",
                String::from_utf8_lossy(&err)
            );
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        child_sessions_gone(spec).await;
        let ctx = format!("{spec} round {round} ({mode})");
        // One chain: commit orders 1..n, each record's parent the one before.
        let mut raw = saver.list(&ListFilter::thread("crash")).await.unwrap();
        raw.reverse();
        assert_one_chain(&raw, &ctx);
        // Every checkpoint reads whole on a cold graph.
        let runs = Arc::new(AtomicUsize::new(0));
        let g = chat_counting(saver.clone(), runs.clone());
        let state = g
            .get_state(&config)
            .await
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let history = g.get_state_history(&config, History::default()).await;
        let history = history.unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(history.len(), raw.len(), "{ctx}");
        let done = state.tasks.iter().any(|t| t.name == "chat" && t.succeeded);
        let after = step(&g, &config).await;
        let turns = after.turns as usize;
        assert_eq!(
            runs.load(Ordering::SeqCst),
            usize::from(!done),
            "{ctx}: ran (done: {done})"
        );
        assert_eq!(
            after.messages,
            transcript(turns),
            "{ctx}: a turn lost or applied twice"
        );
        assert_eq!(
            turns,
            state.values.turns as usize + usize::from(!done),
            "{ctx}"
        );
        for s in history.iter().chain([&state]) {
            assert!(
                after.messages.starts_with(&s.values.messages),
                "{ctx}: shown, then lost"
            );
        }
        assert!(turns > last, "{ctx}");
        last = turns;
    }
    assert!(last > 20, "{spec}: the children ran only {last} turns");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_survives_sigkill_mid_turn() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    crash_rounds(&format!("sqlite|{}", db.path.display()), saver).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_survives_sigkill_mid_turn() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    crash_rounds(&format!("pg|{}", db.schema), saver).await;
    db.drop_schema().await;
}
