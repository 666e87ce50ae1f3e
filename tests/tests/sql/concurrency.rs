//! Racing writers on one thread: each commit number is won exactly once,
//! the losers get `VersionConflict`, nothing is lost, history is one chain.

use std::collections::HashSet;
use std::str::FromStr;
use std::sync::Arc;

use serde_json::json;
use sqlx::AssertSqlSafe;
use weaver::checkpoint::{CheckpointRef, ListFilter, PendingWrite, PruneStrategy};
use weaver::{Error, Saver};

use crate::common::{Forwarding, PgDb, SqliteDb, assert_one_chain, cp};

/// `tasks` tokio tasks each run `turns` read-head/write-head+1 attempts.
pub async fn race(saver: Arc<dyn Saver>, tasks: usize, turns: usize) {
    saver.put(cp("chat", "root", None, Some(1))).await.unwrap();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let s = saver.clone();
        handles.push(tokio::spawn(async move {
            let mut won = Vec::new();
            let mut lost = 0usize;
            for turn in 0..turns {
                let head = s
                    .get_tuple(&CheckpointRef::latest("chat"))
                    .await
                    .unwrap()
                    .unwrap();
                let id = format!("w{t}-{turn}");
                let new = cp(
                    "chat",
                    &id,
                    Some(&head.checkpoint.id),
                    Some(head.commit_order + 1),
                );
                let writes = vec![PendingWrite {
                    task_id: id.clone(),
                    task_path: "n".into(),
                    idx: 0,
                    channel: "foo".into(),
                    value: serde_json::json!(turn),
                }];
                match s.put_checkpoint_with_writes(new, writes).await {
                    Ok(_) => won.push((id, head.commit_order + 1)),
                    Err(Error::VersionConflict { attempted, .. }) => {
                        assert_eq!(attempted, head.commit_order + 1);
                        lost += 1;
                    }
                    Err(other) => panic!("unexpected error under concurrency: {other}"),
                }
            }
            (won, lost)
        }));
    }
    let mut won = Vec::new();
    let mut lost = 0;
    for h in handles {
        let (w, l) = h.await.unwrap();
        won.extend(w);
        lost += l;
    }
    assert_eq!(won.len() + lost, tasks * turns);
    let hist = saver.list(&ListFilter::thread("chat")).await.unwrap();
    assert_eq!(
        hist.len(),
        won.len() + 1,
        "every win is stored, nothing else"
    );
    // Orders 1..=n without gaps, each parent the previous commit: one chain.
    let mut chain = hist.clone();
    chain.reverse();
    for (i, t) in chain.iter().enumerate() {
        assert_eq!(t.commit_order, i as u64 + 1);
        if i > 0 {
            assert_eq!(
                t.parent_config.as_ref().unwrap().checkpoint_id.as_deref(),
                Some(chain[i - 1].checkpoint.id.as_str())
            );
            assert_eq!(
                t.pending_writes.len(),
                1,
                "writes committed with their checkpoint"
            );
        }
    }
    let stored: HashSet<(String, u64)> = chain
        .iter()
        .map(|t| (t.checkpoint.id.clone(), t.commit_order))
        .collect();
    for w in &won {
        assert!(stored.contains(w), "win {w:?} lost");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_tasks_sqlite() {
    let db = SqliteDb::new().await;
    race(Arc::new(db.saver().await), 12, 15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_tasks_postgres() {
    let db = PgDb::new().await;
    race(Arc::new(db.saver().await), 12, 15).await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_next_free_number_never_conflicts() {
    // `commit_order: None` takes the next free number, even under races.
    let db = PgDb::new().await;
    let s = Arc::new(db.saver().await);
    let sq = SqliteDb::new().await;
    let s2 = Arc::new(sq.saver().await);
    for saver in [s as Arc<dyn Saver>, s2 as Arc<dyn Saver>] {
        let mut hs = Vec::new();
        for i in 0..40 {
            let saver = saver.clone();
            hs.push(tokio::spawn(async move {
                saver.put(cp("free", &format!("f{i}"), None, None)).await
            }));
        }
        for h in hs {
            h.await.unwrap().unwrap();
        }
        let orders: Vec<u64> = saver
            .list(&ListFilter::thread("free"))
            .await
            .unwrap()
            .iter()
            .map(|t| t.commit_order)
            .collect();
        assert_eq!(orders, (1..=40).rev().collect::<Vec<u64>>());
    }
    db.drop_schema().await;
}

/// Turns each process of [`one_conversation`] runs.
const TURNS_PER_PROCESS: usize = 40;

/// Runs `chat_turns` (the example binary) once per worker, all at once,
/// on thread `conv` of the database at `url` (`schema`: the PostgreSQL
/// schema, `-` for SQLite). Once they are done, it reads the thread through
/// the saver `open` yields and checks that every turn either committed
/// whole or failed with `VersionConflict`, that nothing is lost or merged,
/// and that the history is one chain.
pub(crate) async fn one_conversation(
    url: &str,
    schema: &str,
    workers: &[&str],
    open: impl std::future::Future<Output = Arc<dyn Saver>>,
) {
    let bin = env!("CARGO_BIN_EXE_weaver-chat-turns");
    let turns = TURNS_PER_PROCESS.to_string();
    let spawn = |worker: &str| {
        std::process::Command::new(bin)
            .args([url, schema, "conv", worker, turns.as_str()])
            .output()
    };
    let outputs: Vec<std::process::Output> = std::thread::scope(|s| {
        let running: Vec<_> = workers.iter().map(|w| s.spawn(move || spawn(w))).collect();
        running
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    });
    let mut commits: Vec<String> = Vec::new();
    let mut conflicts: Vec<String> = Vec::new();
    for out in &outputs {
        // A storage error ("database is locked", a failed migration) ends
        // the process with its message.
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), TURNS_PER_PROCESS, "every turn reports");
        for l in lines {
            match l.split_once(' ') {
                Some(("commit", label)) => commits.push(label.to_owned()),
                Some(("conflict", label)) => conflicts.push(label.to_owned()),
                _ => panic!("unexpected line {l}"),
            }
        }
    }
    assert_eq!(
        commits.len() + conflicts.len(),
        TURNS_PER_PROCESS * workers.len()
    );
    let saver = open.await;
    // The transcript is a delta channel: stored as each turn's messages...
    let stored = saver
        .list_stored(&ListFilter::thread("conv"))
        .await
        .unwrap();
    let full = stored
        .iter()
        .filter(|t| t.checkpoint.channel_values.contains_key("messages"))
        .count();
    let every = weaver::checkpoint::DELTA_SNAPSHOT_EVERY as usize;
    assert_eq!(full, stored.len().div_ceil(every));
    // ...and read back whole through a checkpointer.
    let mut hist = weaver::Checkpointer::from_arc(saver)
        .list_records(&ListFilter::thread("conv"))
        .await
        .unwrap();
    hist.reverse();
    assert_eq!(
        hist.len(),
        commits.len(),
        "one checkpoint per committed turn, nothing else"
    );
    assert_one_chain(&hist, "processes on one conversation");
    for (i, t) in hist.iter().enumerate() {
        // Each commit adds one user message and its reply: nothing merged.
        let messages = t.checkpoint.channel_values["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 2 * (i + 1));
    }
    let transcript: Vec<String> = hist.last().unwrap().checkpoint.channel_values["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_owned())
        .collect();
    for label in &commits {
        assert_eq!(
            transcript.iter().filter(|m| *m == label).count(),
            1,
            "turn {label} lost or doubled"
        );
        assert!(
            transcript.contains(&format!("echo: {label}")),
            "reply to {label} missing"
        );
    }
    for label in &conflicts {
        assert!(
            !transcript.contains(label),
            "conflicting turn {label} was merged"
        );
    }
}

/// The chat-graph promise on PostgreSQL: two OS processes run turns on one
/// conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_one_conversation() {
    let db = PgDb::new().await;
    // Migrate first so both processes only race on turns.
    let _ = db.saver().await;
    let open = async { Arc::new(db.saver().await) as Arc<dyn Saver> };
    one_conversation(
        &crate::common::pg_url(),
        &db.schema,
        &["alice", "bob"],
        open,
    )
    .await;
    db.drop_schema().await;
}

/// The chat-graph promise on one SQLite file: three OS processes start at
/// once on a file that does not exist yet (so they also race on creating,
/// switching to WAL and migrating it), then run turns on one conversation.
/// SQLite's writers take turns (`BEGIN IMMEDIATE`, the busy timeout): no
/// turn fails with "database is locked".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_one_conversation_on_one_sqlite_file() {
    let file = weaver_tests::TempSqlite::new("weaver-processes");
    let url = file.url();
    assert!(!file.path.exists());
    let open = async {
        let saver = weaver::checkpoint::SqliteSaver::connect(&url)
            .await
            .unwrap();
        Arc::new(saver) as Arc<dyn Saver>
    };
    one_conversation(&url, "-", &["alice", "bob", "carol"], open).await;
}

/// After how many milliseconds each round of [`killed_writers`] kills its
/// writer: the first ones within a few milliseconds of its start (a first
/// writer takes about 25 ms to create and migrate a SQLite file and commit
/// a turn), the later ones in the middle of its turns.
const KILL_AFTER_MS: [u64; 10] = [2, 5, 10, 20, 40, 60, 80, 100, 150, 200];

/// Starts `chat_turns` on thread `conv` of the database at `url` (`schema`
/// as in [`one_conversation`]) once per round and kills it (SIGKILL, no
/// cleanup) after the round's delay. After each round, what `saver` reads
/// must be whole: every record decodes, the history is one chain numbered
/// 1, 2, ..., every turn the writer reported committed is there once with
/// its reply, and no other turn but at most one per round (committed, killed
/// before it printed; such a late commit may make the next writer's first
/// turn lose the race, which it reports). A last writer then runs its turns
/// to the end.
///
/// `maintenance`'s SIGKILL tests kill runs in every durability mode on a
/// migrated database and check the next step; this one checks that a turn
/// acknowledged to the caller survives, including kills of writers that
/// were still creating or migrating the database.
async fn killed_writers(url: &str, schema: &str, saver: impl AsyncFn() -> Arc<dyn Saver>) {
    let bin = env!("CARGO_BIN_EXE_weaver-chat-turns");
    let mut reported: Vec<String> = Vec::new();
    let mut saver_now = None;
    for (round, after) in KILL_AFTER_MS.into_iter().enumerate() {
        let worker = format!("w{round}");
        let mut child = std::process::Command::new(bin)
            .args([url, schema, "conv", worker.as_str(), "100000"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(after)).await;
        child.kill().unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            !out.status.success(),
            "round {round}: the writer ended by itself: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let first = format!("{worker}:0");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            match line.split_once(' ') {
                Some(("commit", label)) => reported.push(label.to_owned()),
                // The previous writer, killed after it sent its last commit,
                // may have that commit land after this one read the head:
                // this writer's first turn then loses the race (the other
                // turn is the round's one unreported turn).
                Some(("conflict", label)) if label == first => {}
                _ => panic!("round {round}: unexpected line {line}"),
            }
        }
        // Opened once the first rounds have raced on creating the database.
        if round < 2 {
            continue;
        }
        if saver_now.is_none() {
            saver_now = Some(saver().await);
        }
        let saver = saver_now.clone().unwrap();
        let mut hist = weaver::Checkpointer::from_arc(saver)
            .list_records(&ListFilter::thread("conv"))
            .await
            .unwrap_or_else(|e| panic!("round {round}: the history does not read: {e}"));
        hist.reverse();
        assert_one_chain(&hist, &format!("round {round}"));
        let transcript: Vec<String> = hist
            .last()
            .map(|t| t.checkpoint.channel_values["messages"].clone())
            .map(|m| serde_json::from_value(m).unwrap())
            .unwrap_or_default();
        assert_eq!(
            transcript.len(),
            2 * hist.len(),
            "round {round}: whole turns"
        );
        for label in &reported {
            assert_eq!(
                transcript.iter().filter(|m| *m == label).count(),
                1,
                "round {round}: reported turn {label} lost or doubled"
            );
            assert!(transcript.contains(&format!("echo: {label}")));
        }
        assert!(
            hist.len() >= reported.len() && hist.len() <= reported.len() + round + 1,
            "round {round}: {} turns stored, {} reported",
            hist.len(),
            reported.len()
        );
    }
    assert!(
        reported.len() > 5,
        "the writers were killed before they ran enough turns to test: {reported:?}"
    );
    // The thread goes on.
    let out = std::process::Command::new(bin)
        .args([url, schema, "conv", "last", "3"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
}

/// Writers killed at any moment on one SQLite file, the first ones as they
/// start on a file that does not exist yet: nothing half-written, nothing
/// reported lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_writers_leave_whole_turns_on_sqlite() {
    let file = weaver_tests::TempSqlite::new("weaver-killed");
    let url = file.url();
    let open = async || {
        let saver = weaver::checkpoint::SqliteSaver::connect(&url)
            .await
            .unwrap();
        Arc::new(saver) as Arc<dyn Saver>
    };
    killed_writers(&url, "-", open).await;
}

/// The same on PostgreSQL, the first writers killed as they start on a
/// schema not migrated yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_writers_leave_whole_turns_on_postgres() {
    let db = PgDb::new().await;
    let open = async || Arc::new(db.saver().await) as Arc<dyn Saver>;
    killed_writers(&crate::common::pg_url(), &db.schema, open).await;
    db.drop_schema().await;
}

/// Which maintenance call [`cancelled_by_a_deadlock`] runs.
#[derive(Clone, Copy, Debug)]
enum Maintenance {
    KeepLast3,
    DeleteThread,
}

/// Runs `call` on a thread of six checkpoints while another session locks
/// its checkpoints in the opposite order, as a group insert of two children
/// does: that session share-locks order 2, the call locks order 1 and waits
/// for order 2, then the session asks for order 1. PostgreSQL cancels the
/// call to break the deadlock; the saver runs it again and it succeeds once
/// the session is done. Returns the saver's history left.
///
/// PostgreSQL looks for a deadlock once, `deadlock_timeout` after a session
/// starts waiting, and cancels the session that finds it: the saver's
/// sessions look after 3 s (the session has asked for order 1 by then, even
/// on a loaded machine), the other session only after a minute.
async fn cancelled_by_a_deadlock(call: Maintenance) -> Vec<u64> {
    let db = PgDb::new().await;
    let options = sqlx::postgres::PgConnectOptions::from_str(&crate::common::pg_url())
        .unwrap()
        .options([("deadlock_timeout", "3s")]);
    let saver: Arc<dyn Saver> = Arc::new(
        db.saver_on(sqlx::postgres::PgPoolOptions::new(), options)
            .await,
    );
    weaver_tests::conformance::chain(saver.as_ref(), "race", 6).await;
    let lock = |order: i64| {
        format!(
            "SELECT 1 FROM \"{}\".weaver_checkpoints WHERE thread_id = 'race' AND commit_order = {order} FOR KEY SHARE",
            db.schema
        )
    };
    let mut session = db.pool.begin().await.unwrap();
    sqlx::query("SET LOCAL deadlock_timeout = '60s'")
        .execute(&mut *session)
        .await
        .unwrap();
    sqlx::query(AssertSqlSafe(lock(2)))
        .execute(&mut *session)
        .await
        .unwrap();
    let running = {
        let saver = saver.clone();
        tokio::spawn(async move {
            match call {
                Maintenance::KeepLast3 => saver
                    .prune(&["race".to_owned()], PruneStrategy::KeepLast(3))
                    .await
                    .map(|_| ()),
                Maintenance::DeleteThread => saver.delete_thread("race").await,
            }
        })
    };
    db.lock_waits("weaver_checkpoints", 1).await;
    // Completes the cycle; returns once PostgreSQL has cancelled the call.
    sqlx::query(AssertSqlSafe(lock(1)))
        .execute(&mut *session)
        .await
        .expect("the other side of the deadlock is the one cancelled");
    session.rollback().await.unwrap();
    running
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{call:?} after a deadlock: {e}"));
    let left = saver
        .list(&ListFilter::thread("race"))
        .await
        .unwrap()
        .iter()
        .map(|t| t.commit_order)
        .collect();
    db.drop_schema().await;
    left
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_cancelled_by_a_deadlock_runs_again_on_postgres() {
    assert_eq!(
        cancelled_by_a_deadlock(Maintenance::KeepLast3).await,
        vec![6, 5, 4]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_delete_cancelled_by_a_deadlock_runs_again_on_postgres() {
    assert_eq!(
        cancelled_by_a_deadlock(Maintenance::DeleteThread).await,
        Vec::<u64>::new()
    );
}

/// Which copying call [`copied_while_the_source_is_deleted`] runs.
#[derive(Clone, Copy, Debug)]
enum Copying {
    CopyThread,
    ForkAt,
}

/// Starts `call` copying thread `src` (at `c3` for `fork_at`) to `dst`
/// while a session, returned open, holds the writes table: the copy runs
/// until it first touches that table, then waits for the session to end.
async fn copy_behind_locked_writes(
    db: &PgDb,
    saver: &Arc<dyn Saver>,
    call: Copying,
) -> (
    sqlx::Transaction<'static, sqlx::Postgres>,
    tokio::task::JoinHandle<weaver::Result<()>>,
) {
    let s = &db.schema;
    let mut session = db.pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "LOCK TABLE \"{s}\".weaver_checkpoint_writes IN ACCESS EXCLUSIVE MODE"
    )))
    .execute(&mut *session)
    .await
    .unwrap();
    let saver = saver.clone();
    let copying = tokio::spawn(async move {
        match call {
            Copying::CopyThread => saver.copy_thread("src", "dst").await,
            Copying::ForkAt => saver
                .fork_at(
                    &CheckpointRef::latest("src").at("c3"),
                    "dst",
                    weaver::checkpoint::ForkOptions::default(),
                )
                .await
                .map(drop),
        }
    });
    (session, copying)
}

/// `call` copies thread `src` (three checkpoints, each with a pending write)
/// while another session deletes `src` between the copy's read of the
/// checkpoints and its read of their writes (that session holds the writes
/// table until it has deleted and committed). The copy reads one snapshot:
/// every copied checkpoint keeps its write. At READ COMMITTED each read saw
/// its own snapshot, and the copy lost every write.
async fn copied_while_the_source_is_deleted(call: Copying) {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let mut parent = None;
    for order in 1..=3u64 {
        let id = format!("c{order}");
        let at = saver
            .put(cp("src", &id, parent.as_deref(), Some(order)))
            .await
            .unwrap();
        let write = PendingWrite::for_task("task", "n", [("foo".to_owned(), json!(order))]);
        saver.put_writes(&at, write).await.unwrap();
        parent = Some(id);
    }
    let s = &db.schema;
    let (mut session, copying) = copy_behind_locked_writes(&db, &saver, call).await;
    db.lock_waits("weaver_checkpoint_writes", 1).await;
    for table in ["weaver_checkpoint_writes", "weaver_checkpoints"] {
        sqlx::query(AssertSqlSafe(format!(
            "DELETE FROM \"{s}\".{table} WHERE thread_id = 'src'"
        )))
        .execute(&mut *session)
        .await
        .unwrap();
    }
    session.commit().await.unwrap();
    copying
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{call:?}: {e}"));
    let copied = saver.list(&ListFilter::thread("dst")).await.unwrap();
    assert_eq!(copied.len(), 3, "{call:?}");
    for t in &copied {
        assert_eq!(
            t.pending_writes.len(),
            1,
            "{call:?}: checkpoint {} lost its write",
            t.checkpoint.id
        );
    }
    assert!(
        saver
            .list(&ListFilter::thread("src"))
            .await
            .unwrap()
            .is_empty()
    );
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_copied_while_it_is_deleted_keeps_its_writes_on_postgres() {
    copied_while_the_source_is_deleted(Copying::CopyThread).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_made_while_its_source_is_deleted_keeps_its_writes_on_postgres() {
    copied_while_the_source_is_deleted(Copying::ForkAt).await;
}

/// `call` copies thread `src` onto the fresh thread `dst` while a first
/// write (commit order 1, no parent) lands on `dst`: the copy has found `dst`
/// empty and waits (another session holds the writes table) while the write
/// commits. The copy then fails with `ThreadExists` and `dst` holds the write
/// alone. With `pruned`, `src` keeps only its last checkpoint (commit order
/// 3); `copy_thread` used to copy it with that order, which no first write
/// takes, so both committed and `dst` held two roots.
async fn copy_racing_a_first_write(call: Copying, pruned: bool) {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let mut parent = None;
    for order in 1..=3u64 {
        let id = format!("c{order}");
        saver
            .put(cp("src", &id, parent.as_deref(), Some(order)))
            .await
            .unwrap();
        parent = Some(id);
    }
    if pruned {
        let deleted = saver
            .prune(&["src".to_owned()], PruneStrategy::KeepLatest)
            .await
            .unwrap();
        assert_eq!(deleted, 2, "pruned records");
    }
    let (session, copying) = copy_behind_locked_writes(&db, &saver, call).await;
    // The copy has checked `dst` and waits for the writes table.
    db.lock_waits("weaver_checkpoint_writes", 1).await;
    saver.put(cp("dst", "first", None, Some(1))).await.unwrap();
    session.commit().await.unwrap();
    let copied = copying.await.unwrap();
    assert!(
        matches!(copied, Err(Error::ThreadExists { ref thread_id }) if thread_id == "dst"),
        "{call:?}, pruned {pruned}: {copied:?}"
    );
    let dst = saver.list(&ListFilter::thread("dst")).await.unwrap();
    let ids: Vec<&str> = dst.iter().map(|t| t.checkpoint.id.as_str()).collect();
    assert_eq!(ids, ["first"], "{call:?}, pruned {pruned}");
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pruned_thread_copied_while_its_target_gets_a_first_write_conflicts_on_postgres() {
    copy_racing_a_first_write(Copying::CopyThread, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_or_fork_racing_a_first_write_conflicts_on_postgres() {
    copy_racing_a_first_write(Copying::CopyThread, false).await;
    copy_racing_a_first_write(Copying::ForkAt, false).await;
}

/// Two runs resume the same pause at once, each having read it before
/// either stores its answer: one goes on, the other gets `VersionConflict`
/// and stores nothing, whether the winner pauses again (a second
/// `interrupt` in the node) or completes, in every durability mode. Before
/// the answers were stored under a check, both returned `Ok` and the later
/// answer replaced the earlier.
async fn racing_resumes(saver: Arc<Forwarding>) {
    use weaver::prelude::*;
    use weaver_tests::states::{Steps, StepsUpdate};
    let graph = Graph::<Steps>::new("AskTwice")
        .add_node(
            "ask",
            |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
                let first = rt.interrupt("first?")?;
                let mut bar = vec![first.as_str().unwrap_or("?").to_owned()];
                if first == "again" {
                    let second = rt.interrupt("second?")?;
                    bar.push(second.as_str().unwrap_or("?").to_owned());
                }
                Ok(StepsUpdate::default().bar(bar))
            },
        )
        .add_sequence([START, "ask", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    for mode in [Durability::Sync, Durability::Async, Durability::Exit] {
        for (a, b) in [("again", "again"), ("again", "done"), ("done", "done")] {
            let config = RunConfig::thread(format!("{mode:?}-{a}-{b}")).durability(mode);
            let paused = graph.invoke(Steps::default(), &config).await.unwrap();
            assert_eq!(paused.interrupts().len(), 1);
            let count = || async {
                let h = graph.get_state_history(&config, History::default()).await;
                h.unwrap().len()
            };
            let before = count().await;
            saver.gate(2);
            let (ra, rb) = tokio::join!(
                graph.resume(serde_json::json!(a), &config),
                graph.resume(serde_json::json!(b), &config)
            );
            let case = format!("{mode:?}, {a} against {b}");
            let (won, lost) = match (ra, rb) {
                (Ok(o), Err(e)) => ((a, o), e),
                (Err(e), Ok(o)) => ((b, o), e),
                (ra, rb) => panic!("{case}: one resume must win, one lose: {ra:?} / {rb:?}"),
            };
            assert!(
                matches!(lost, Error::VersionConflict { .. }),
                "{case}: {lost}"
            );
            let snap = graph.get_state(&config).await.unwrap();
            match won {
                ("again", outcome) => {
                    assert_eq!(outcome.interrupts().len(), 1, "{case}");
                    assert_eq!(snap.interrupts, outcome.interrupts(), "{case}");
                    assert_eq!(count().await, before, "{case}: nothing of the loser stored");
                    let done = graph.resume(serde_json::json!("z"), &config).await.unwrap();
                    assert_eq!(done.complete().unwrap().bar, ["again", "z"], "{case}");
                }
                (_, outcome) => {
                    assert_eq!(outcome.complete().unwrap().bar, ["done"], "{case}");
                    assert!(snap.next.is_empty(), "{case}");
                    assert_eq!(count().await, before + 1, "{case}: only the winner's step");
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_resumes_in_memory() {
    racing_resumes(Arc::new(Forwarding::default())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_resumes_sqlite() {
    let db = SqliteDb::new().await;
    racing_resumes(Arc::new(Forwarding::on(Arc::new(db.saver().await)))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_resumes_postgres() {
    let db = PgDb::new().await;
    racing_resumes(Arc::new(Forwarding::on(Arc::new(db.saver().await)))).await;
    db.drop_schema().await;
}

/// A fork into a thread that another session fills meanwhile (its first
/// checkpoint inserted after the fork found the target empty, committed
/// while the fork's insert waits on it) fails with `ThreadExists`, as when
/// the target was taken before, not with the database's unique violation.
#[tokio::test]
async fn pg_fork_losing_the_target_to_another_writer_is_thread_exists() {
    let db = PgDb::new().await;
    let saver = Arc::new(db.saver().await);
    saver.put(cp("src", "a", None, Some(1))).await.unwrap();
    let s = &db.schema;
    let mut other = db.pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO \"{s}\".weaver_checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata, commit_order)
         VALUES ('dst', '', 'z', CAST('{{}}' AS BYTEA), CAST('{{}}' AS JSONB), 1)"
    )))
    .execute(&mut *other)
    .await
    .unwrap();
    let fork = tokio::spawn({
        let saver = saver.clone();
        async move {
            saver
                .fork_at(
                    &CheckpointRef::latest("src").at("a"),
                    "dst",
                    weaver::checkpoint::ForkOptions::default(),
                )
                .await
        }
    });
    db.lock_waits("weaver_checkpoints", 1).await;
    other.commit().await.unwrap();
    let r = fork.await.unwrap();
    assert!(
        matches!(&r, Err(Error::ThreadExists { thread_id }) if thread_id == "dst"),
        "{r:?}"
    );
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_turn_after_a_dropped_stream_waits_for_it_on_sqlite() {
    let db = crate::common::SqliteDb::new().await;
    let saver: std::sync::Arc<dyn weaver::Saver> = std::sync::Arc::new(db.saver().await);
    weaver_tests::dropped::the_next_turn_after_a_dropped_stream_waits_for_it(saver).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_turn_after_a_dropped_stream_waits_for_it_on_postgres() {
    let db = crate::common::PgDb::new().await;
    let saver: std::sync::Arc<dyn weaver::Saver> = std::sync::Arc::new(db.saver().await);
    weaver_tests::dropped::the_next_turn_after_a_dropped_stream_waits_for_it(saver).await;
    db.drop_schema().await;
}

/// A prune of a thread whose newest checkpoints another transaction is
/// removing (a lease rollback, not committed yet) keeps the newest of what
/// is left: it never picks what to keep from rows about to go, and so
/// never deletes the whole namespace (PostgreSQL: it locks the namespace's
/// rows before it picks; SQLite's writers take turns).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_racing_a_rollback_keeps_the_newest_left_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    weaver_tests::conformance::chain(saver.as_ref(), "race", 10).await;
    let mut rollback = db.pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "DELETE FROM \"{}\".weaver_checkpoints WHERE thread_id = 'race' AND commit_order > 7",
        db.schema
    )))
    .execute(&mut *rollback)
    .await
    .unwrap();
    let running = {
        let saver = saver.clone();
        tokio::spawn(async move {
            saver
                .prune(&["race".to_owned()], PruneStrategy::KeepLast(2))
                .await
        })
    };
    db.lock_waits("weaver_checkpoints", 1).await;
    rollback.commit().await.unwrap();
    running.await.unwrap().expect("prune");
    let left: Vec<u64> = saver
        .list(&ListFilter::thread("race"))
        .await
        .unwrap()
        .iter()
        .map(|t| t.commit_order)
        .collect();
    assert_eq!(left, vec![7, 6]);
    db.drop_schema().await;
}

/// A group that stores a checkpoint's pending writes before the
/// checkpoint itself fails as the in-memory saver and the
/// statement-by-statement path do (the writes find no checkpoint), not
/// only when the group is too large for one query: nothing is stored.
#[tokio::test]
async fn writes_before_their_checkpoint_in_a_group_fail_on_every_saver() {
    use weaver::checkpoint::WriteOp;
    let sqlite = SqliteDb::new().await;
    let pg = PgDb::new().await;
    let savers: Vec<(&str, Arc<dyn Saver>)> = vec![
        ("memory", Arc::new(weaver::InMemorySaver::new())),
        ("sqlite", Arc::new(sqlite.saver().await)),
        ("postgres", Arc::new(pg.saver().await)),
    ];
    for (name, saver) in savers {
        saver.put(cp("g", "c1", None, Some(1))).await.unwrap();
        let write = PendingWrite {
            task_id: "t".into(),
            task_path: "n".into(),
            idx: 0,
            channel: "foo".into(),
            value: json!(1),
        };
        let target = CheckpointRef::latest("g").at("c2");
        let ops = vec![
            WriteOp::Writes(target.clone(), vec![write]),
            WriteOp::Put(cp("g", "c2", Some("c1"), Some(2))),
        ];
        let out = saver.put_ops(ops).await;
        assert!(
            matches!(out, Err(Error::CheckpointNotFound { .. })),
            "{name}: {out:?}"
        );
        assert!(saver.get_tuple(&target).await.unwrap().is_none(), "{name}");
    }
    pg.drop_schema().await;
}
