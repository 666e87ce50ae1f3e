//! BeamWeaver's persistence guide: its Snapshot Fields, State History, Update State and Replay And Fork sections.

use weaver::prelude::*;
use weaver_tests::states::{Steps, StepsUpdate};

use crate::common::{Runs, two_step};

async fn ran(graph: &CompiledGraph<Steps>, thread: &str) -> RunConfig {
    let config = RunConfig::thread(thread);
    graph.invoke(Steps::default(), &config).await.unwrap();
    config
}

#[tokio::test]
async fn get_state_returns_the_latest_snapshot_fields() {
    let graph = two_step(&InMemorySaver::new());
    let config = ran(&graph, "thread-1").await;
    let snap = graph.get_state(&config).await.unwrap();
    assert_eq!(snap.values.foo, "b");
    assert_eq!(snap.values.bar, ["a", "b"]);
    assert!(snap.next.is_empty());
    assert!(snap.config.get_checkpoint_id().is_some());
    assert_eq!(snap.config.thread_id(), Some("thread-1"));
    assert_eq!(snap.source(), Some("loop"));
    assert_eq!(snap.step(), Some(2));
    assert!(snap.created_at.as_deref().unwrap().ends_with("+00:00"));
    assert!(snap.parent_config.is_some());
    assert!(snap.tasks.is_empty() && snap.interrupts.is_empty() && snap.pending_writes.is_empty());

    // An empty thread has an empty snapshot, not an error.
    let empty = graph.get_state(&RunConfig::thread("nobody")).await.unwrap();
    assert_eq!(empty.values, Steps::default());
    assert!(empty.metadata.is_none());
    // An unknown checkpoint id is an error.
    let err = graph
        .get_state(&RunConfig::thread("thread-1").checkpoint_id("ghost"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CheckpointNotFound { .. }), "{err}");
}

#[tokio::test]
async fn history_lookups_of_the_persistence_guide() {
    let graph = two_step(&InMemorySaver::new());
    let config = ran(&graph, "thread-1").await;
    graph
        .update_state(&config, StepsUpdate::default().foo("manual"), None)
        .await
        .unwrap();

    let history = graph
        .get_state_history(&config, History::default().limit(20))
        .await
        .unwrap();
    assert_eq!(history.len(), 5);
    let latest = &history[0];
    assert_eq!(latest.values.foo, "manual");
    let before_node_b = history
        .iter()
        .find(|s| s.next == ["node_b"])
        .expect("checkpoint before node_b");
    assert_eq!(before_node_b.values.foo, "a");
    let manual: Vec<_> = history
        .iter()
        .filter(|s| s.source() == Some("update"))
        .collect();
    assert_eq!(manual.len(), 1);
    let filtered = graph
        .get_state_history(&config, History::default().filter("source", "update"))
        .await
        .unwrap();
    assert_eq!(filtered.len(), 1);
    assert_eq!(
        filtered[0].config.get_checkpoint_id(),
        manual[0].config.get_checkpoint_id()
    );
    let older = graph
        .get_state_history(
            &config,
            History::default().before(before_node_b.config.get_checkpoint_id().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(
        older.iter().map(|s| s.step().unwrap()).collect::<Vec<_>>(),
        [0, -1]
    );
    let two = graph
        .get_state_history(&config, History::default().limit(2))
        .await
        .unwrap();
    assert_eq!(two.len(), 2);

    // Inspecting an old checkpoint shows that point.
    let old = graph.get_state(&before_node_b.config).await.unwrap();
    assert_eq!(old.values.bar, ["a"]);
    assert_eq!(old.next, ["node_b"]);
}

#[tokio::test]
async fn update_state_merges_through_reducers_and_never_mutates_old_checkpoints() {
    let graph = two_step(&InMemorySaver::new());
    let config = ran(&graph, "thread-1").await;
    let before = graph.get_state(&config).await.unwrap();
    let updated = graph
        .update_state(
            &config,
            StepsUpdate::default().foo("manual").bar(["manual"]),
            None,
        )
        .await
        .unwrap();
    let snap = graph.get_state(&updated).await.unwrap();
    assert_eq!(snap.values.foo, "manual", "no reducer: overwrite");
    assert_eq!(snap.values.bar, ["a", "b", "manual"], "reducer: accumulate");
    assert_eq!(snap.source(), Some("update"));
    assert_eq!(snap.step(), Some(3), "parent step + 1");
    assert_eq!(
        snap.parent_config.as_ref().unwrap().get_checkpoint_id(),
        before.config.get_checkpoint_id()
    );
    assert!(
        snap.next.is_empty(),
        "attributed to node_b, whose successor is END"
    );
    // The old checkpoint is unchanged.
    let old = graph.get_state(&before.config).await.unwrap();
    assert_eq!(old.values.foo, "b");
    assert_eq!(old.values.bar, ["a", "b"]);
}

#[tokio::test]
async fn update_state_on_an_old_checkpoint_forks_and_the_fork_runs_on() {
    let runs = Runs::default();
    let (ra, rb) = (runs.clone(), runs.clone());
    let graph = Graph::<Steps>::new("Fork")
        .add_node("node_a", move |_: &Steps| {
            ra.hit("node_a");
            StepsUpdate::default().foo("a").bar(["a"])
        })
        .add_node("node_b", move |_: &Steps| {
            rb.hit("node_b");
            StepsUpdate::default().foo("b").bar(["b"])
        })
        .add_sequence([START, "node_a", "node_b", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = ran(&graph, "thread-1").await;
    let history = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let before_node_b = history
        .iter()
        .find(|s| s.next == ["node_b"])
        .unwrap()
        .clone();

    let fork_config = graph
        .update_state(
            &before_node_b.config,
            StepsUpdate::default().foo("forked"),
            Some("node_a"),
        )
        .await
        .unwrap();
    let fork = graph.get_state(&fork_config).await.unwrap();
    assert_eq!(fork.values.foo, "forked");
    assert_eq!(fork.next, ["node_b"], "as node_a: node_b runs next");
    assert_eq!(
        fork.parent_config.unwrap().get_checkpoint_id(),
        before_node_b.config.get_checkpoint_id()
    );

    // The fork is the thread's head now; continuing runs node_b again.
    let state = graph
        .continue_run(&RunConfig::thread("thread-1"))
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(state.foo, "b");
    assert_eq!(
        state.bar,
        ["a", "b"],
        "the fork started from [a]; node_b appended b"
    );
    assert_eq!(runs.get("node_b"), 2);
    assert_eq!(runs.get("node_a"), 1);
    // The original branch is still readable and unchanged.
    let original = graph.get_state(&history[0].config).await.unwrap();
    assert_eq!(original.values.bar, ["a", "b"]);
    assert_eq!(original.values.foo, "b");
}

#[tokio::test]
async fn invoking_an_old_checkpoint_replays_from_a_fork_checkpoint() {
    let runs = Runs::default();
    let (ra, rb) = (runs.clone(), runs.clone());
    let graph = Graph::<Steps>::new("Replay")
        .add_node("node_a", move |_: &Steps| {
            ra.hit("node_a");
            StepsUpdate::default().foo("a").bar(["a"])
        })
        .add_node("node_b", move |_: &Steps| {
            rb.hit("node_b");
            StepsUpdate::default().foo("b").bar(["b"])
        })
        .add_sequence([START, "node_a", "node_b", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = ran(&graph, "t").await;
    let history = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let before_node_b = history.iter().find(|s| s.next == ["node_b"]).unwrap();
    let state = graph
        .continue_run(&before_node_b.config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(state.bar, ["a", "b"]);
    assert_eq!(
        (runs.get("node_a"), runs.get("node_b")),
        (1, 2),
        "only the later node ran again"
    );
    let after = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    assert_eq!(after.len(), 6);
    assert_eq!(after[1].source(), Some("fork"));
    assert_eq!(after[1].next, ["node_b"]);
    assert_eq!(
        after[1].parent_config.as_ref().unwrap().get_checkpoint_id(),
        before_node_b.config.get_checkpoint_id()
    );
    // The old branch stays as it was.
    assert_eq!(
        after[2].config.get_checkpoint_id(),
        history[0].config.get_checkpoint_id()
    );
    // An unknown checkpoint id is a typed error.
    let err = graph
        .continue_run(&RunConfig::thread("t").checkpoint_id("ghost"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CheckpointNotFound { .. }), "{err}");
}

#[tokio::test]
async fn as_node_is_inferred_or_rejected() {
    let saver = InMemorySaver::new();
    let graph = Graph::<Steps>::new("FanOut")
        .add_node("x", |_: &Steps| StepsUpdate::default().bar(["x"]))
        .add_node("y", |_: &Steps| StepsUpdate::default().bar(["y"]))
        .add_edge(START, "x")
        .add_edge(START, "y")
        .add_edge("x", END)
        .add_edge("y", END)
        .compile(Compile::new().checkpointer(saver))
        .unwrap();
    // Fresh thread: attributed to START, so START's successors run next.
    let first = graph
        .update_state(
            &RunConfig::thread("fresh"),
            StepsUpdate::default().foo("seed"),
            None,
        )
        .await
        .unwrap();
    let snap = graph.get_state(&first).await.unwrap();
    assert_eq!(snap.next, ["x", "y"]);
    // Step 0, as LangGraph numbers a fresh thread's first update.
    assert_eq!(snap.step(), Some(0));

    let config = ran(&graph, "t").await;
    let err = graph
        .update_state(&config, StepsUpdate::default().foo("?"), None)
        .await
        .unwrap_err();
    match err {
        Error::AmbiguousUpdate { candidates, .. } => assert_eq!(candidates, ["x", "y"]),
        other => panic!("expected AmbiguousUpdate, got {other}"),
    }
    let err = graph
        .update_state(&config, StepsUpdate::default(), Some("ghost"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::UnknownNode { ref node } if node == "ghost"),
        "{err}"
    );
    let ok = graph
        .update_state(&config, StepsUpdate::default().foo("as x"), Some("x"))
        .await
        .unwrap();
    assert!(graph.get_state(&ok).await.unwrap().next.is_empty());

    // As END: nothing runs next even where tasks were pending.
    let pending = graph
        .update_state(
            &RunConfig::thread("fresh"),
            StepsUpdate::default().foo("end"),
            Some(END),
        )
        .await
        .unwrap();
    assert!(graph.get_state(&pending).await.unwrap().next.is_empty());
}

#[tokio::test]
async fn bulk_update_state_writes_one_checkpoint_per_step() {
    let graph = two_step(&InMemorySaver::new());
    let config = ran(&graph, "t").await;
    let last = graph
        .bulk_update_state(
            &config,
            vec![
                vec![
                    (
                        StepsUpdate::default().bar(["manual-a"]),
                        Some("node_a".to_owned()),
                    ),
                    (
                        StepsUpdate::default().bar(["manual-b"]),
                        Some("node_b".to_owned()),
                    ),
                ],
                vec![(StepsUpdate::default().foo("after-bulk"), None)],
            ],
        )
        .await
        .unwrap();
    let snap = graph.get_state(&last).await.unwrap();
    assert_eq!(snap.values.foo, "after-bulk");
    assert_eq!(snap.values.bar, ["a", "b", "manual-a", "manual-b"]);
    let updates = graph
        .get_state_history(&config, History::default().filter("source", "update"))
        .await
        .unwrap();
    assert_eq!(updates.len(), 2);
    assert_eq!(
        updates
            .iter()
            .map(|s| s.step().unwrap())
            .collect::<Vec<_>>(),
        [4, 3]
    );

    let err = graph.bulk_update_state(&config, vec![]).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    let err = graph
        .bulk_update_state(&config, vec![vec![]])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
}

#[tokio::test]
async fn update_state_on_a_turns_input_checkpoint_keeps_the_input_for_start() {
    // Time travel to where turn two's input waits for START, edit the state,
    // run on: START still takes in that input, as LangGraph's fork keeps it.
    let graph = two_step(&InMemorySaver::new());
    let config = ran(&graph, "fork-input").await;
    let turn_two = StepsUpdate::default().bar(["turn2"]);
    graph.invoke(turn_two, &config).await.unwrap();
    let history = graph
        .get_state_history(&config, History::default().filter("source", "input"))
        .await
        .unwrap();
    let waiting = history.iter().find(|s| s.step() > Some(-1)).unwrap();
    assert_eq!(waiting.next, ["__start__"]);

    for (k, as_node) in [None, Some("node_b")].into_iter().enumerate() {
        let edit = StepsUpdate::default().foo(format!("edited{k}"));
        let fork = graph
            .update_state(&waiting.config, edit, as_node)
            .await
            .unwrap();
        let snap = graph.get_state(&fork).await.unwrap();
        assert_eq!(snap.next, ["__start__"], "{as_node:?}");
        assert_eq!(snap.values.foo, format!("edited{k}"));
        let state = graph.continue_run(&fork).await.unwrap().complete().unwrap();
        assert_eq!(state.bar, ["a", "b", "turn2", "a", "b"], "{as_node:?}");
    }

    // An update that takes START's place consumes the input instead.
    let fork = graph
        .update_state(&waiting.config, StepsUpdate::default(), Some(START))
        .await
        .unwrap();
    let state = graph.continue_run(&fork).await.unwrap().complete().unwrap();
    assert_eq!(state.bar, ["a", "b", "a", "b"]);
}

#[tokio::test]
async fn forks_and_first_updates_are_numbered_as_in_langgraph_in_memory() {
    let saver: std::sync::Arc<dyn weaver::Saver> = std::sync::Arc::new(InMemorySaver::new());
    weaver_tests::shapes::forks_and_first_updates_are_numbered_as_in_langgraph(saver).await;
}
