//! The engine on the SQL savers, in every durability mode: what the runtime
//! tests show on the in-memory saver holds on a real database too (under
//! `async`, checkpoints and writes reach the database in group commits).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use weaver::Saver;
use weaver::checkpoint::ListFilter;
use weaver::prelude::*;
use weaver_tests::states::{Steps, StepsUpdate};

use crate::common::{Forwarding, PgDb, SqliteDb, two_step};

/// W7's shape: 8 branches, `w3` fails once; counts every good run.
fn fan_out(saver: Arc<dyn Saver>, good_runs: Arc<AtomicUsize>) -> CompiledGraph<Steps> {
    let failed_once = Arc::new(AtomicBool::new(false));
    let mut g = Graph::<Steps>::new("W7");
    for i in 0..8 {
        let (good_runs, failed_once) = (good_runs.clone(), failed_once.clone());
        let name = format!("w{i}");
        g = g
            .add_node(
                name.clone(),
                move |_: &Steps| -> Result<StepsUpdate, NodeError> {
                    if i == 3 && !failed_once.swap(true, Ordering::SeqCst) {
                        return Err(NodeError::msg("transient"));
                    }
                    if i != 3 {
                        good_runs.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(StepsUpdate::default().bar([format!("w{i}")]))
                },
            )
            .add_edge(START, name.clone())
            .add_edge(name, "join");
    }
    g.add_node("join", |_: &Steps| StepsUpdate::default().foo("joined"))
        .add_edge("join", END)
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

async fn engine_on(saver: Arc<dyn Saver>) {
    for (i, (mode, stored)) in [
        (Durability::Sync, 4),
        (Durability::Async, 4),
        (Durability::Exit, 1),
    ]
    .into_iter()
    .enumerate()
    {
        let graph = two_step(saver.clone());
        let thread = format!("two-step-{i}");
        let config = RunConfig::thread(thread.clone()).durability(mode);
        let state = graph
            .invoke(Steps::default(), &config)
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(state.bar, ["a", "b"]);
        let history = saver
            .list(&ListFilter::thread(thread.clone()))
            .await
            .unwrap();
        assert_eq!(history.len(), stored, "{mode:?}");
        // A second invoke continues the same thread from the database.
        let again = graph
            .invoke(Steps::default(), &config)
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(again.bar, ["a", "b", "a", "b"], "{mode:?}");

        let good = Arc::new(AtomicUsize::new(0));
        let graph = fan_out(saver.clone(), good.clone());
        let config = RunConfig::thread(format!("w7-{i}")).durability(mode);
        let err = graph.invoke(Steps::default(), &config).await.unwrap_err();
        assert!(
            matches!(err, Error::NodeFailed { ref node, .. } if node == "w3"),
            "{err}"
        );
        assert_eq!(
            graph.get_state(&config).await.unwrap().next,
            ["w3"],
            "{mode:?}"
        );
        let done = graph
            .continue_run(&config)
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(done.bar.len(), 8);
        assert_eq!(
            good.load(Ordering::SeqCst),
            7,
            "{mode:?}: each good node ran once"
        );
    }
}

#[tokio::test]
async fn engine_on_sqlite() {
    let db = SqliteDb::new().await;
    engine_on(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn engine_on_postgres() {
    let db = PgDb::new().await;
    engine_on(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}

/// What a thread stores, without the ids that differ between threads: each
/// checkpoint's step and its pending writes (task path, index, channel,
/// value), oldest first.
async fn stored_shape(saver: &dyn Saver, thread: &str) -> Vec<(i64, Vec<String>)> {
    let mut listed = saver.list(&ListFilter::thread(thread)).await.unwrap();
    listed.reverse();
    listed
        .iter()
        .map(|t| {
            let writes = t
                .pending_writes
                .iter()
                .map(|w| format!("{} {} {} {}", w.task_path, w.idx, w.channel, w.value))
                .collect();
            (t.metadata.step, writes)
        })
        .collect()
}

#[tokio::test]
async fn sync_durability_commits_a_steps_last_writes_with_its_checkpoint() {
    let db = SqliteDb::new().await;
    let saver = Arc::new(Forwarding::on(Arc::new(db.saver().await)));
    let graph = two_step(saver.clone());
    for (thread, mode) in [("sync", Durability::Sync), ("async", Durability::Async)] {
        let config = RunConfig::thread(thread).durability(mode);
        let done = graph.invoke(Steps::default(), &config).await.unwrap();
        assert_eq!(done.complete().unwrap().bar, ["a", "b"]);
        if mode == Durability::Sync {
            // The input checkpoint, then each step's task writes with the
            // checkpoint that step ends with: 4 commits, not 7.
            let calls = std::mem::take(&mut *saver.writes.lock().unwrap());
            assert_eq!(
                calls,
                [
                    "put",
                    "put_ops[writes, put]",
                    "put_ops[writes, put]",
                    "put_ops[writes, put]"
                ]
            );
        }
    }
    // The same checkpoints and writes as the group commits of `async`.
    let sync = stored_shape(saver.as_ref(), "sync").await;
    assert_eq!(sync.len(), 4);
    assert!(sync[..3].iter().all(|(_, writes)| !writes.is_empty()));
    assert_eq!(sync, stored_shape(saver.as_ref(), "async").await);
}

#[tokio::test]
async fn a_failed_sync_group_still_stores_the_tasks_writes() {
    let db = SqliteDb::new().await;
    let saver = Arc::new(Forwarding::on(Arc::new(db.saver().await)));
    saver.fail_groups.store(true, Ordering::SeqCst);
    let graph = two_step(saver.clone());
    let config = RunConfig::thread("t").durability(Durability::Sync);
    let err = graph.invoke(Steps::default(), &config).await.unwrap_err();
    assert!(err.to_string().contains("the group failed"), "{err}");
    // The group of the input task's writes and the next checkpoint failed:
    // the writes are stored on their own, as storing them first would have
    // left them, and the run stops at the input checkpoint.
    let calls = saver.writes.lock().unwrap().clone();
    assert_eq!(calls, ["put", "put_ops[writes, put]", "put_writes"]);
    let stored = stored_shape(saver.inner.as_ref(), "t").await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].0, -1);
    assert!(!stored[0].1.is_empty());
    // Continuing the thread once groups succeed again finishes the run.
    saver.fail_groups.store(false, Ordering::SeqCst);
    let done = graph.invoke(Input::Continue, &config).await.unwrap();
    assert_eq!(done.complete().unwrap().bar, ["a", "b"]);
}

/// The warnings logged on this thread, as text.
#[derive(Default, Clone)]
struct Warnings(Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::Subscriber for Warnings {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut text = Text(String::new());
        event.record(&mut text);
        self.0.lock().unwrap().push(text.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A background write that fails is logged, naming the thread: a run whose
/// stream was dropped has no caller to return the error to. (Nothing was
/// logged.)
#[tokio::test]
async fn a_failed_background_write_is_logged() {
    let warnings = Warnings::default();
    let _logging = tracing::subscriber::set_default(warnings.clone());
    let db = SqliteDb::new().await;
    let saver = Arc::new(Forwarding::on(Arc::new(db.saver().await)));
    saver.fail_checkpoints.store(true, Ordering::SeqCst);
    let graph = two_step(saver.clone());
    let config = RunConfig::thread("logged").durability(Durability::Async);
    assert!(graph.invoke(Steps::default(), &config).await.is_err());
    let logged = warnings.0.lock().unwrap().clone();
    assert!(
        logged
            .iter()
            .any(|w| w.contains("background checkpoint write failed") && w.contains("logged")),
        "{logged:?}"
    );
}

#[tokio::test]
async fn a_stream_dropped_at_its_interrupt_finds_the_pause_stored_under_exit() {
    // A consumer that stops reading at the pause (shows the question, ends
    // the request) drops the stream there: the run must have stored it.
    use futures_util::StreamExt;
    use weaver::{StreamEvent, StreamItem};
    let db = SqliteDb::new().await;
    let saver = Arc::new(Forwarding::on(Arc::new(db.saver().await)));
    saver.slow_final.store(true, Ordering::SeqCst);
    let graph = Graph::<Steps>::new("AskOnExit")
        .add_node("a", |_: &Steps| StepsUpdate::default().bar(["a"]))
        .add_node(
            "ask",
            |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
                let answer = rt.interrupt("go on?")?;
                Ok(StepsUpdate::default().bar([answer.as_str().unwrap_or("?").to_owned()]))
            },
        )
        .add_sequence([START, "a", "ask", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let config = RunConfig::thread("ask-on-exit").durability(Durability::Exit);
    let mut stream = graph.stream(Steps::default(), &config);
    let mut paused = Vec::new();
    while let Some(item) = stream.next().await {
        if let StreamItem::Event(StreamEvent::Interrupted(i)) = item {
            paused = i;
            break;
        }
    }
    drop(stream);
    assert_eq!(paused.len(), 1);
    let snap = graph.get_state(&config).await.unwrap();
    assert_eq!(snap.next, ["ask"]);
    assert_eq!(snap.interrupts, paused);
    let done = graph
        .resume(serde_json::json!("yes"), &config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.bar, ["a", "yes"]);
}

#[tokio::test]
async fn an_input_taken_in_before_its_step_failed_to_commit_is_kept() {
    // Sync durability stores START's writes with step 0's checkpoint in one
    // group; that group fails, so START's writes are stored on their own and
    // the thread's head is the input checkpoint with START succeeded. Its
    // output (the input) is applied as any succeeded task's is: by
    // get_state, by a new input, by update_state, by continue_run.
    let db = SqliteDb::new().await;
    let saver = Arc::new(Forwarding::on(Arc::new(db.saver().await)));
    let graph = two_step(saver.clone());
    for next in ["continue", "new input", "update_state"] {
        let config = RunConfig::thread(next).durability(Durability::Sync);
        saver.fail_groups.store(true, Ordering::SeqCst);
        let input = StepsUpdate::default().bar(["in"]);
        let err = graph.invoke(input, &config).await.unwrap_err();
        assert!(matches!(err, Error::Storage { .. }), "{next}: {err}");
        saver.fail_groups.store(false, Ordering::SeqCst);
        let snap = graph.get_state(&config).await.unwrap();
        assert_eq!(snap.source(), Some("input"), "{next}");
        assert!(snap.tasks[0].succeeded, "{next}");
        assert_eq!(snap.values.bar, ["in"], "{next}");

        let state = match next {
            "continue" => graph.continue_run(&config).await,
            "new input" => {
                let second = StepsUpdate::default().bar(["second"]);
                graph.invoke(second, &config).await
            }
            _ => {
                let edit = StepsUpdate::default().foo("edited");
                graph.update_state(&config, edit, None).await.unwrap();
                assert_eq!(graph.get_state(&config).await.unwrap().next, ["node_a"]);
                graph.continue_run(&config).await
            }
        };
        let bar = state.unwrap().complete().unwrap().bar;
        match next {
            "new input" => assert_eq!(bar, ["in", "second", "a", "b"]),
            _ => assert_eq!(bar, ["in", "a", "b"], "{next}"),
        }
    }
}

/// Under exit durability a resumed run stores once, at its end: the answer
/// (checked against what the run read) on the paused checkpoint, then the
/// checkpoint the run ends with and that checkpoint's own writes (here the
/// next node's interrupt), in one group.
async fn exit_run_stores_its_answers_with_its_last_checkpoint(inner: Arc<dyn Saver>) {
    let saver = Arc::new(Forwarding::on(inner));
    let ask = |question: &'static str| {
        move |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
            let answer = rt.interrupt(question)?;
            Ok(StepsUpdate::default().bar([answer.as_str().unwrap_or("?").to_owned()]))
        }
    };
    let graph = Graph::<Steps>::new("AskThenConfirm")
        .add_node("ask", ask("name?"))
        .add_node("confirm", ask("sure?"))
        .add_sequence([START, "ask", "confirm", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let config = RunConfig::thread("exit").durability(Durability::Exit);
    graph.invoke(Steps::default(), &config).await.unwrap();
    saver.writes.lock().unwrap().clear();
    let paused = graph
        .resume(serde_json::json!("ada"), &config)
        .await
        .unwrap();
    assert_eq!(paused.interrupts()[0].value, "sure?");
    let calls = std::mem::take(&mut *saver.writes.lock().unwrap());
    assert_eq!(calls, ["put_ops[check, writes, put, writes]"]);
    let stored = stored_shape(saver.as_ref(), "exit").await;
    assert_eq!(stored.len(), 2);
    let (asked, confirming) = (&stored[0].1, &stored[1].1);
    assert!(
        asked
            .iter()
            .any(|w| w.contains("__resume__") && w.contains("ada")),
        "{asked:?}"
    );
    assert!(
        confirming.iter().any(|w| w.contains("sure?")),
        "{confirming:?}"
    );
    let done = graph
        .resume(serde_json::json!("yes"), &config)
        .await
        .unwrap();
    assert_eq!(done.complete().unwrap().bar, ["ada", "yes"]);
}

#[tokio::test]
async fn exit_run_stores_its_answers_with_its_last_checkpoint_sqlite() {
    let db = SqliteDb::new().await;
    exit_run_stores_its_answers_with_its_last_checkpoint(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn exit_run_stores_its_answers_with_its_last_checkpoint_postgres() {
    let db = PgDb::new().await;
    exit_run_stores_its_answers_with_its_last_checkpoint(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}

/// A state of several megabytes under `async`: its checkpoints are stored
/// op by op rather than in group commits; a failed node after a large step
/// leaves that step stored, so continuing runs only the failed node.
async fn a_large_state_under_async_keeps_every_step(saver: Arc<dyn Saver>) {
    let grown = Arc::new(AtomicUsize::new(0));
    let failed_once = Arc::new(AtomicBool::new(false));
    let g = grown.clone();
    let f = failed_once.clone();
    let graph = Graph::<Steps>::new("large")
        .add_node("grow", move |_: &Steps| {
            g.fetch_add(1, Ordering::SeqCst);
            StepsUpdate::default().bar(["x".repeat(3 * 1024 * 1024), "y".repeat(3 * 1024 * 1024)])
        })
        .add_node(
            "after",
            move |_: &Steps| -> Result<StepsUpdate, NodeError> {
                if !f.swap(true, Ordering::SeqCst) {
                    return Err(NodeError::msg("transient"));
                }
                Ok(StepsUpdate::default().foo("done"))
            },
        )
        .add_sequence([START, "grow", "after", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let config = RunConfig::thread("large").durability(Durability::Async);
    let err = graph.invoke(Steps::default(), &config).await.unwrap_err();
    assert!(matches!(err, Error::NodeFailed { .. }), "{err:?}");
    let stopped = graph.get_state(&config).await.unwrap();
    assert_eq!(stopped.next, ["after"]);
    assert_eq!(stopped.values.bar.len(), 2);
    let done = graph.continue_run(&config).await.unwrap();
    let done = done.complete().unwrap();
    assert_eq!(done.foo, "done");
    assert_eq!(done.bar[0].len(), 3 * 1024 * 1024);
    assert_eq!(grown.load(Ordering::SeqCst), 1, "the large step was stored");
    let history = saver.list(&ListFilter::thread("large")).await.unwrap();
    assert!(
        history.len() >= 4,
        "input, start, grow, after: {}",
        history.len()
    );
}

#[tokio::test]
async fn a_large_state_under_async_keeps_every_step_on_sqlite() {
    let db = SqliteDb::new().await;
    a_large_state_under_async_keeps_every_step(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn a_large_state_under_async_keeps_every_step_on_postgres() {
    let db = PgDb::new().await;
    a_large_state_under_async_keeps_every_step(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}
