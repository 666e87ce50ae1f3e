//! Pending writes after a failed fan-out, and durability modes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use weaver::checkpoint::ListFilter;
use weaver::prelude::*;
use weaver_tests::states::{Steps, StepsUpdate};

use crate::common::{Runs, two_step};

/// W7's shape: START → w0..w7 → join → END; `w3` fails on its first attempt
/// and `w5` succeeds without writing anything.
fn fan_out(runs: &Runs, saver: &InMemorySaver) -> CompiledGraph<Steps> {
    let failed_once = Arc::new(AtomicBool::new(false));
    let mut g = Graph::<Steps>::new("W7");
    for i in 0..8 {
        let runs = runs.clone();
        let failed_once = failed_once.clone();
        let name = format!("w{i}");
        g = g
            .add_node(
                name.clone(),
                move |_: &Steps| -> Result<StepsUpdate, NodeError> {
                    runs.hit(&format!("w{i}"));
                    if i == 3 && !failed_once.swap(true, Ordering::SeqCst) {
                        return Err(NodeError::msg("transient failure"));
                    }
                    if i == 5 {
                        return Ok(StepsUpdate::default());
                    }
                    Ok(StepsUpdate::default().bar([format!("w{i}")]))
                },
            )
            .add_edge(START, name.clone())
            .add_edge(name, "join");
    }
    let runs = runs.clone();
    g.add_node("join", move |_: &Steps| {
        runs.hit("join");
        StepsUpdate::default().foo("joined")
    })
    .add_edge("join", END)
    .compile(Compile::new().checkpointer(saver.clone()))
    .unwrap()
}

async fn failure_then_resume(durability: Durability) {
    let runs = Runs::default();
    let saver = InMemorySaver::new();
    let graph = fan_out(&runs, &saver);
    let config = RunConfig::thread("t").durability(durability);
    match graph.invoke(Steps::default(), &config).await.unwrap_err() {
        Error::NodeFailed { node, .. } => assert_eq!(node, "w3"),
        other => panic!("expected NodeFailed, got {other}"),
    }
    let snap = graph.get_state(&config).await.unwrap();
    assert_eq!(
        snap.next,
        ["w3"],
        "{durability:?}: only the failed node is left"
    );
    assert_eq!(
        snap.values.bar,
        ["w0", "w1", "w2", "w4", "w6", "w7"],
        "pending writes applied"
    );
    assert!(snap.pending_writes.iter().any(|w| w.channel == "bar"));
    let failed = snap.tasks.iter().find(|t| t.name == "w3").unwrap();
    assert_eq!(failed.error.as_deref(), Some("transient failure"));
    assert_eq!(snap.tasks.iter().filter(|t| t.succeeded).count(), 7);
    // The raw checkpoint, fetched by its id, is the state before them.
    let raw = graph.get_state(&snap.config).await.unwrap();
    assert!(raw.values.bar.is_empty());

    let state = graph
        .continue_run(&config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(state.bar, ["w0", "w1", "w2", "w3", "w4", "w6", "w7"]);
    assert_eq!(state.foo, "joined");
    let good: usize = [0, 1, 2, 4, 5, 6, 7]
        .iter()
        .map(|i| runs.get(&format!("w{i}")))
        .sum();
    assert_eq!(good, 7, "{durability:?}: each good node ran once");
    assert_eq!(runs.get("w3"), 2);
    assert_eq!(runs.get("join"), 1);
}

#[tokio::test]
async fn failed_fan_out_keeps_siblings_writes_sync() {
    failure_then_resume(Durability::Sync).await;
}

#[tokio::test]
async fn failed_fan_out_keeps_siblings_writes_async() {
    failure_then_resume(Durability::Async).await;
}

#[tokio::test]
async fn failed_fan_out_keeps_siblings_writes_exit() {
    failure_then_resume(Durability::Exit).await;
}

#[tokio::test]
async fn durability_modes_differ_in_checkpoints_written() {
    for (mode, expected) in [
        (Durability::Sync, 4),
        (Durability::Async, 4),
        (Durability::Exit, 1),
    ] {
        let saver = InMemorySaver::new();
        let graph = two_step(&saver);
        let config = RunConfig::thread("t").durability(mode);
        let state = graph
            .invoke(Steps::default(), &config)
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(state.bar, ["a", "b"]);
        let stored = saver.list(&ListFilter::thread("t")).await.unwrap();
        assert_eq!(stored.len(), expected, "{mode:?}");
        // Whatever the mode, the latest checkpoint is the final state.
        let snap = graph.get_state(&RunConfig::thread("t")).await.unwrap();
        assert_eq!(snap.values.bar, ["a", "b"], "{mode:?}");
        assert!(snap.next.is_empty());
    }
}

#[tokio::test]
async fn a_stale_writer_gets_a_version_conflict() {
    let saver = InMemorySaver::new();
    let graph = two_step(&saver);
    let config = RunConfig::thread("t");
    graph.invoke(Steps::default(), &config).await.unwrap();
    // Another process wrote the next commit while a slow writer still holds head 4.
    let head = graph.get_state(&config).await.unwrap();
    graph
        .update_state(&config, StepsUpdate::default().foo("other"), None)
        .await
        .unwrap();
    let stale = saver
        .put(weaver::checkpoint::NewCheckpoint {
            thread_id: "t".into(),
            checkpoint_ns: String::new(),
            parent_id: head.config.get_checkpoint_id().map(Into::into),
            checkpoint: weaver::checkpoint::Checkpoint::empty(),
            metadata: weaver::checkpoint::CheckpointMetadata::new(
                weaver::checkpoint::CheckpointSource::Update,
                3,
            ),
            commit_order: Some(head.commit_order + 1),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(stale, Error::VersionConflict { attempted: 5, .. }),
        "{stale}"
    );
}

#[tokio::test]
async fn two_runs_racing_on_one_thread_one_wins_the_other_conflicts() {
    use std::sync::Arc;
    use tokio::sync::Barrier;
    let saver = InMemorySaver::new();
    // Both runs load the same head, then meet inside the node: whoever
    // commits second finds its commit order taken.
    let barrier = Arc::new(Barrier::new(2));
    let b = barrier.clone();
    let graph = Graph::<Steps>::new("Race")
        .add_node("slow", move |s: &Steps| {
            let b = b.clone();
            let n = s.bar.len();
            async move {
                b.wait().await;
                StepsUpdate::default().bar([format!("after {n}")])
            }
        })
        .add_sequence([START, "slow", END])
        .compile(Compile::new().checkpointer(saver.clone()))
        .unwrap();
    // No lease: the two runs race on the commit orders.
    let config = RunConfig::thread("race")
        .durability(Durability::Exit)
        .multitask(weaver::config::Multitask::Race);
    let (a, b) = tokio::join!(
        graph.invoke(StepsUpdate::default().bar(["a"]), &config),
        graph.invoke(StepsUpdate::default().bar(["b"]), &config)
    );
    let results = [a, b];
    let wins = results.iter().filter(|r| r.is_ok()).count();
    let conflicts = results
        .iter()
        .filter(|r| matches!(r, Err(Error::VersionConflict { attempted: 1, .. })))
        .count();
    assert_eq!((wins, conflicts), (1, 1), "{results:?}");
    let history = saver.list(&ListFilter::thread("race")).await.unwrap();
    assert_eq!(history.len(), 1, "the loser wrote nothing");
    let state = graph
        .get_state(&RunConfig::thread("race"))
        .await
        .unwrap()
        .values;
    assert_eq!(
        state.bar.len(),
        2,
        "one input and its node's write, not both runs merged: {:?}",
        state.bar
    );
}

#[tokio::test]
async fn a_replay_that_stops_at_its_fork_stores_it_as_a_fork_in_every_mode() {
    // Replaying the checkpoint before node_b forks it; node_b then fails, so
    // the fork is where the replay stops. Under `exit` it is the one
    // checkpoint the replay stores: still a `fork`, as the other modes say.
    for mode in [Durability::Sync, Durability::Async, Durability::Exit] {
        let down = Arc::new(AtomicBool::new(false));
        let d = down.clone();
        let graph = Graph::<Steps>::new("Replay")
            .add_node("node_a", |_: &Steps| StepsUpdate::default().bar(["a"]))
            .add_node(
                "node_b",
                move |_: &Steps| -> Result<StepsUpdate, NodeError> {
                    if d.load(Ordering::SeqCst) {
                        return Err(NodeError::msg("down"));
                    }
                    Ok(StepsUpdate::default().bar(["b"]))
                },
            )
            .add_sequence([START, "node_a", "node_b", END])
            .compile(Compile::new().checkpointer(InMemorySaver::new()))
            .unwrap();
        let config = RunConfig::thread("replay");
        graph.invoke(Steps::default(), &config).await.unwrap();
        let history = graph
            .get_state_history(&config, History::default())
            .await
            .unwrap();
        let before_b = history.iter().find(|s| s.next == ["node_b"]).unwrap();
        down.store(true, Ordering::SeqCst);
        let replay = before_b.config.clone().durability(mode);
        let err = graph.continue_run(&replay).await.unwrap_err();
        assert!(matches!(err, Error::NodeFailed { .. }), "{mode:?}: {err}");

        let head = graph.get_state(&config).await.unwrap();
        assert_eq!(head.source(), Some("fork"), "{mode:?}");
        // At the replayed checkpoint's step + 1, as in LangGraph.
        assert_eq!(head.step(), before_b.step().map(|s| s + 1), "{mode:?}");
        assert_eq!(head.next, ["node_b"], "{mode:?}");
        let forks = graph
            .get_state_history(&config, History::default().filter("source", "fork"))
            .await
            .unwrap();
        assert_eq!(forks.len(), 1, "{mode:?}");
    }
}
