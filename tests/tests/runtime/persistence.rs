//! Persistence as a user sees it: state updates and forks, interrupts resumed
//! and threads continued from another process, concurrent turns, pruning, the
//! per-run context, store search and the checkpointer facade.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use weaver::checkpoint::{CheckpointRef, ListFilter, PruneStrategy, SqliteSaver};
use weaver::prelude::*;
use weaver_tests::states::{Steps, StepsUpdate};

use crate::common::{node_a, node_b, two_step};

/// An SQLite file, removed on drop.
struct Db(String);
impl Db {
    fn new() -> Self {
        let p = std::env::temp_dir().join(format!("weaver-example-{}.db", uuid::Uuid::now_v7()));
        Db(p.display().to_string())
    }
    /// A new saver (its own connection pool): another "process".
    async fn saver(&self) -> SqliteSaver {
        SqliteSaver::connect(&format!("sqlite://{}", self.0))
            .await
            .unwrap()
    }
}
impl Drop for Db {
    fn drop(&mut self) {
        for s in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{s}", self.0));
        }
    }
}

fn example_graph(saver: impl Saver + 'static) -> CompiledGraph<Steps> {
    Graph::<Steps>::new("CheckpointExample")
        .add_node("node_a", node_a)
        .add_node("node_b", node_b)
        .add_sequence([START, "node_a", "node_b", END])
        .compile(Compile::new().checkpointer(saver))
        .unwrap()
}

fn review_graph(saver: impl Saver + 'static) -> CompiledGraph<Steps> {
    Graph::<Steps>::new("Review")
        .add_node(
            "review",
            |s: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
                let answer = rt.interrupt(json!({ "draft": s.foo }))?;
                Ok(StepsUpdate::default().bar([answer.as_str().unwrap_or("?").to_owned()]))
            },
        )
        .add_sequence([START, "review", END])
        .compile(Compile::new().checkpointer(saver))
        .unwrap()
}

async fn run(g: &CompiledGraph<Steps>, c: &RunConfig) -> Steps {
    g.invoke(Steps::default(), c)
        .await
        .unwrap()
        .complete()
        .unwrap()
}

async fn history(g: &CompiledGraph<Steps>, c: &RunConfig) -> Vec<StateSnapshot<Steps>> {
    g.get_state_history(c, History::default()).await.unwrap()
}

#[tokio::test]
async fn bulk_update_state_without_as_node() {
    // BeamWeaver's guide: bulk_update_state(graph, config, [[%{bar: ["manual-a"]}, %{bar: ["manual-b"]}],
    // [%{foo: "after-bulk"}]]) "creates a sequence of checkpoint updates with super-step merge semantics".
    let graph = two_step(&InMemorySaver::new());
    let config = RunConfig::thread("thread-1");
    run(&graph, &config).await;
    let last = graph
        .bulk_update_state(
            &config,
            vec![
                vec![
                    (StepsUpdate::default().bar(["manual-a"]), None),
                    (StepsUpdate::default().bar(["manual-b"]), None),
                ],
                vec![(StepsUpdate::default().foo("after-bulk"), None)],
            ],
        )
        .await
        .expect("the guide's bulk update, with no as_node, succeeds");
    let snap = graph.get_state(&last).await.unwrap();
    assert_eq!(snap.values.bar, ["a", "b", "manual-a", "manual-b"]);
    assert_eq!(snap.values.foo, "after-bulk");
    let h = history(&graph, &config).await;
    assert_eq!(h.len(), 6, "one checkpoint per super-step");
    assert_eq!(h[0].source(), Some("update"));
    assert_eq!(h[1].source(), Some("update"));
    assert_eq!(h[1].values.bar, ["a", "b", "manual-a", "manual-b"]);
    assert_eq!(h[1].values.foo, "b");
}

#[tokio::test]
async fn fork_before_node_b_as_node_a_runs_node_b_again() {
    let graph = two_step(&InMemorySaver::new());
    let config = RunConfig::thread("thread-1");
    run(&graph, &config).await;
    let h = history(&graph, &config).await;
    let before_b = h.iter().find(|s| s.next == ["node_b"]).unwrap();
    assert_eq!(
        graph.get_state(&before_b.config).await.unwrap().values.foo,
        "a"
    );
    let fork = graph
        .update_state(
            &before_b.config,
            StepsUpdate::default().bar(["fork"]),
            Some("node_a"),
        )
        .await
        .unwrap();
    let snap = graph.get_state(&fork).await.unwrap();
    assert_eq!(snap.values.bar, ["a", "fork"]);
    assert_eq!(snap.next, ["node_b"]);
    assert_eq!(snap.source(), Some("update"));
    let done = graph.continue_run(&fork).await.unwrap().complete().unwrap();
    assert_eq!(
        (done.foo.as_str(), &done.bar[..]),
        ("b", &["a", "fork", "b"].map(String::from)[..])
    );
    // The old branch is as it was; "latest" is the fork's branch.
    assert_eq!(
        graph.get_state(&h[0].config).await.unwrap().values.bar,
        ["a", "b"]
    );
    assert_eq!(
        graph.get_state(&config).await.unwrap().values.bar,
        ["a", "fork", "b"]
    );
}

#[tokio::test]
async fn an_interrupt_is_resumed_by_id_from_another_process() {
    let db = Db::new();
    let config = RunConfig::thread("review-thread-1");
    let first = review_graph(db.saver().await);
    let input = Steps {
        foo: "Approve this?".into(),
        bar: vec![],
    };
    let out = first.invoke(input, &config).await.unwrap();
    let interrupt = out.interrupts()[0].clone();
    assert_eq!(interrupt.value, json!({"draft": "Approve this?"}));
    let paused = first.get_state(&config).await.unwrap();
    assert_eq!(paused.next, ["review"]);
    assert_eq!(paused.interrupts.len(), 1);
    drop(first);

    // Another process: a fresh connection, the graph rebuilt.
    let second = review_graph(db.saver().await);
    let answers: Resume = [(interrupt.id.clone(), json!("approved"))]
        .into_iter()
        .collect();
    let state = second
        .resume(answers, &config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(state.bar, ["approved"]);
}

#[tokio::test]
async fn history_finds_the_interrupted_checkpoint_before_and_after_resume() {
    // BeamWeaver's guide: interrupted = Enum.find(history, fn snapshot -> snapshot.interrupts != [] end)
    let graph = review_graph(InMemorySaver::new());
    let config = RunConfig::thread("t");
    let out = graph.invoke(Steps::default(), &config).await.unwrap();
    let id = out.interrupts()[0].id.clone();
    let h = history(&graph, &config).await;
    let found = h.iter().find(|s| !s.interrupts.is_empty()).unwrap();
    assert_eq!(found.interrupts[0].id, id);
    let at = found.config.get_checkpoint_id().unwrap().to_owned();
    graph.resume(json!("approved"), &config).await.unwrap();
    let h = history(&graph, &config).await;
    let found = h.iter().find(|s| !s.interrupts.is_empty());
    let found = found.expect("after resume, history still shows where the run was interrupted");
    assert_eq!(found.config.get_checkpoint_id(), Some(at.as_str()));
}

#[tokio::test]
async fn store_search_for_food_preferences_finds_the_memory() {
    let store = InMemoryStore::new();
    let ns = ["users", "user-123", "memories"];
    store
        .put(&ns, "food", json!({"memory": "User likes pizza"}))
        .await
        .unwrap();
    store
        .put(
            &["users", "user-456", "memories"],
            "food",
            json!({"memory": "likes soup"}),
        )
        .await
        .unwrap();
    let items = store
        .search(
            &["users", "user-123"],
            Search::query("food preferences").limit(3),
        )
        .await
        .unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].key, "food");
    assert_eq!(items[0].namespace, ns);
    assert_eq!(items[0].value["memory"], "User likes pizza");
}

#[tokio::test]
async fn a_fresh_process_continues_the_thread_with_numbered_versions() {
    let db = Db::new();
    let session = RunConfig::thread("session-1");
    let first = example_graph(db.saver().await);
    run(&first, &session).await;
    drop(first);
    let again = example_graph(db.saver().await);
    let state = run(&again, &session).await;
    assert_eq!(state.bar, ["a", "b", "a", "b"], "loaded, then advanced");
    let h = history(&again, &session).await;
    let orders: Vec<u64> = h.iter().map(|s| s.commit_order).collect();
    assert_eq!(
        orders,
        [8, 7, 6, 5, 4, 3, 2, 1],
        "every save is a new version, newest first"
    );
    // Restore a specific version: version 4 is the end of the first turn.
    let v4 = again.at_version(&session, 4).await.unwrap().unwrap();
    assert_eq!(
        v4.get_checkpoint_id(),
        h.iter()
            .find(|s| s.commit_order == 4)
            .unwrap()
            .config
            .get_checkpoint_id()
    );
    assert_eq!(again.get_state(&v4).await.unwrap().values.bar, ["a", "b"]);
    assert!(again.at_version(&session, 9).await.unwrap().is_none());
    // getSnapshotCount and flowExists.
    let cp = again.checkpointer().unwrap();
    assert_eq!(
        cp.thread_info("session-1")
            .await
            .unwrap()
            .unwrap()
            .checkpoints,
        8
    );
    assert!(cp.thread_info("session-2").await.unwrap().is_none());
    // A new thread id is a separate conversation.
    let other = RunConfig::thread("session-2");
    let fresh = run(&again, &other).await;
    assert_eq!(fresh.bar, ["a", "b"]);
}

fn racing(saver: SqliteSaver, barrier: Arc<tokio::sync::Barrier>) -> CompiledGraph<Steps> {
    Graph::<Steps>::new("Race")
        .add_node("slow", move |s: &Steps| {
            let b = barrier.clone();
            let n = s.bar.len();
            async move {
                if n > 1 {
                    // Not on the first turn: both racers meet here.
                    let _ = tokio::time::timeout(Duration::from_secs(3), b.wait()).await;
                }
                StepsUpdate::default().bar([format!("after {n}")])
            }
        })
        .add_sequence([START, "slow", END])
        .compile(Compile::new().checkpointer(saver))
        .unwrap()
}

async fn race(durability: Durability) {
    let db = Db::new();
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let (p1, p2) = (
        racing(db.saver().await, barrier.clone()),
        racing(db.saver().await, barrier.clone()),
    );
    // No lease: the two runs race on the commit orders.
    let config = RunConfig::thread("chat")
        .durability(durability)
        .multitask(weaver::config::Multitask::Race);
    p1.invoke(StepsUpdate::default().bar(["x"]), &config)
        .await
        .unwrap();
    let head = p1.get_state(&config).await.unwrap().commit_order;
    let (a, b) = tokio::join!(
        p1.invoke(StepsUpdate::default().bar(["a"]), &config),
        p2.invoke(StepsUpdate::default().bar(["b"]), &config)
    );
    let results = [a, b];
    let wins = results.iter().filter(|r| r.is_ok()).count();
    let conflicts = results
        .iter()
        .filter(|r| matches!(r, Err(Error::VersionConflict { thread_id, attempted, .. }) if thread_id == "chat" && *attempted > head))
        .count();
    assert_eq!((wins, conflicts), (1, 1), "{durability:?}: {results:?}");
    let state = p2
        .get_state(&RunConfig::thread("chat"))
        .await
        .unwrap()
        .values;
    if durability == Durability::Exit {
        // A whole turn is one commit: the loser left nothing behind.
        let (a, b) = (
            state.bar.contains(&"a".into()),
            state.bar.contains(&"b".into()),
        );
        assert!(a ^ b, "one turn, never both: {:?}", state.bar);
        assert_eq!(state.bar.len(), 4, "{:?}", state.bar);
    }
    // History is one chain: each checkpoint's parent is the one before it.
    let h = history(&p2, &RunConfig::thread("chat")).await;
    for w in h.windows(2) {
        assert_eq!(w[0].commit_order, w[1].commit_order + 1, "{durability:?}");
        let parent = w[0]
            .parent_config
            .as_ref()
            .and_then(|p| p.get_checkpoint_id());
        assert_eq!(parent, w[1].config.get_checkpoint_id(), "{durability:?}");
    }
}

#[tokio::test]
async fn concurrent_turns_from_two_processes_exit_durability() {
    race(Durability::Exit).await;
}

#[tokio::test]
async fn concurrent_turns_from_two_processes_default_durability() {
    race(Durability::default()).await;
}

#[tokio::test]
async fn prune_is_never_automatic_and_keeps_the_thread_resumable() {
    let db = Db::new();
    let graph = example_graph(db.saver().await);
    let t = RunConfig::thread("thread-1");
    for _ in 0..3 {
        run(&graph, &t).await;
    }
    assert_eq!(
        history(&graph, &t).await.len(),
        12,
        "nothing prunes for you"
    );
    let cp = graph.checkpointer().unwrap();
    // pruneHistory(flowId, keepLast: 5): the five newest versions stay.
    let deleted = cp
        .prune(&["thread-1".into()], PruneStrategy::KeepLast(5))
        .await
        .unwrap();
    assert_eq!(deleted, 7);
    let h = history(&graph, &t).await;
    let orders: Vec<u64> = h.iter().map(|s| s.commit_order).collect();
    assert_eq!(orders, [12, 11, 10, 9, 8]);
    assert_eq!(
        cp.thread_info("thread-1")
            .await
            .unwrap()
            .unwrap()
            .checkpoints,
        5
    );
    let deleted = cp
        .prune(&["thread-1".into()], PruneStrategy::default())
        .await
        .unwrap();
    assert_eq!(deleted, 4);
    let h = history(&graph, &t).await;
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].values.bar.len(), 6);
    let state = run(&graph, &t).await;
    assert_eq!(state.bar.len(), 8, "the pruned thread continues");

    cp.prune(&["thread-1".into()], PruneStrategy::Delete)
        .await
        .unwrap();
    assert!(history(&graph, &t).await.is_empty());
    assert!(graph.get_state(&t).await.unwrap().metadata.is_none());

    // delete_thread drops the conversation; a new turn starts fresh.
    run(&graph, &t).await;
    cp.delete_thread("thread-1").await.unwrap();
    assert!(history(&graph, &t).await.is_empty());
    let state = run(&graph, &t).await;
    assert_eq!(state.bar, ["a", "b"]);
    assert_eq!(history(&graph, &t).await.len(), 4);
}

#[derive(Debug)]
struct UserId(String);

#[tokio::test]
async fn context_is_per_run_and_never_persisted() {
    let graph = Graph::<Steps>::new("Ctx")
        .add_node("who", |_: &Steps, rt: &Runtime| {
            let who = rt
                .context::<UserId>()
                .map_or("none".to_owned(), |u| u.0.clone());
            StepsUpdate::default().bar([who])
        })
        .add_sequence([START, "who", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let with = RunConfig::thread("t").with_context(UserId("user-secret-7".into()));
    run(&graph, &with).await;
    let state = run(&graph, &RunConfig::thread("t")).await;
    assert_eq!(
        state.bar,
        ["user-secret-7", "none"],
        "context is not restored"
    );
    let records = graph
        .checkpointer()
        .unwrap()
        .list_records(&ListFilter::thread("t"))
        .await
        .unwrap();
    for r in &records {
        let meta = serde_json::to_string(&r.metadata.to_json()).unwrap();
        assert!(!meta.contains("user-secret-7"), "{meta}");
    }
}

#[tokio::test]
async fn checkpointer_facade_returns_typed_records_and_typed_misses() {
    let graph = two_step(&InMemorySaver::new());
    let config = RunConfig::thread("thread-1");
    run(&graph, &config).await;
    let cp = graph.checkpointer().unwrap();
    let records = cp
        .list_records(&ListFilter::thread("thread-1").limit(20))
        .await
        .unwrap();
    let orders: Vec<u64> = records.iter().map(|r| r.commit_order).collect();
    assert_eq!(orders, [4, 3, 2, 1]);
    let sources: Vec<(&str, i64)> = records
        .iter()
        .map(|r| (r.metadata.source.as_str(), r.metadata.step))
        .collect();
    assert_eq!(
        sources,
        [("loop", 2), ("loop", 1), ("loop", 0), ("input", -1)]
    );
    let latest = cp
        .fetch_tuple(&CheckpointRef::latest("thread-1"))
        .await
        .unwrap();
    assert_eq!(latest.config, records[0].config);
    let err = cp
        .fetch_tuple(&CheckpointRef::latest("nobody"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ThreadNotFound { .. }), "{err}");
    let err = cp
        .fetch_tuple(&CheckpointRef::latest("thread-1").at("ghost"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CheckpointNotFound { .. }), "{err}");
    let none = cp.get_tuple(&CheckpointRef::latest("nobody")).await;
    assert!(none.unwrap().is_none());
}
