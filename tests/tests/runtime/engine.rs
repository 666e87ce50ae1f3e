//! Super-steps, reducers, routing, limits and the typed errors of running a graph.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use weaver::checkpoint::{CheckpointSource, ListFilter};
use weaver::prelude::*;
use weaver::{GraphError, StreamEvent, StreamItem};
use weaver_tests::states::{LastSteps, Steps, StepsUpdate};

use crate::common::{Runs, node_a, node_b, two_step};

#[tokio::test]
async fn checkpoint_example_runs_and_leaves_four_checkpoints() {
    let saver = InMemorySaver::new();
    let graph = two_step(&saver);
    let config = RunConfig::thread("thread-1");
    let state = graph
        .invoke(Steps::default(), &config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(state.foo, "b");
    assert_eq!(state.bar, ["a", "b"]);

    let history = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let shape: Vec<(Option<&str>, Option<i64>, Vec<String>)> = history
        .iter()
        .map(|s| (s.source(), s.step(), s.next.clone()))
        .collect();
    assert_eq!(
        shape,
        [
            (Some("loop"), Some(2), vec![]),
            (Some("loop"), Some(1), vec!["node_b".to_owned()]),
            (Some("loop"), Some(0), vec!["node_a".to_owned()]),
            (Some("input"), Some(-1), vec!["__start__".to_owned()]),
        ]
    );
    assert_eq!(
        history.iter().map(|s| s.commit_order).collect::<Vec<_>>(),
        [4, 3, 2, 1]
    );
    // Each parent link points at the previous checkpoint.
    for pair in history.windows(2) {
        assert_eq!(
            pair[0].parent_config.as_ref().unwrap().get_checkpoint_id(),
            pair[1].config.get_checkpoint_id()
        );
    }

    // A second invoke continues the numbering with its own input checkpoint.
    let again = graph
        .invoke(Steps::default(), &config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(
        again.bar,
        ["a", "b", "a", "b"],
        "append keeps the thread's earlier values"
    );
    let history = graph
        .get_state_history(&config, History::default().limit(4))
        .await
        .unwrap();
    assert_eq!(
        history
            .iter()
            .map(|s| s.step().unwrap())
            .collect::<Vec<_>>(),
        [6, 5, 4, 3]
    );
    assert_eq!(history[3].source(), Some("input"));
}

#[tokio::test]
async fn without_a_reducer_the_last_write_wins() {
    let graph = Graph::<LastSteps>::new("NoReducer")
        .add_node("node_a", |_: &LastSteps| {
            StepsUpdate::default().foo("a").bar(["a"])
        })
        .add_node("node_b", |_: &LastSteps| {
            StepsUpdate::default().foo("b").bar(["b"])
        })
        .add_sequence([START, "node_a", "node_b", END])
        .compile(Compile::new())
        .unwrap();
    let state = graph
        .invoke(LastSteps::default(), &RunConfig::default())
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(state.foo, "b");
    assert_eq!(state.bar, ["b"]);
}

#[tokio::test]
async fn two_writes_to_a_last_value_channel_in_one_step_fail() {
    let graph = Graph::<Steps>::new("Clash")
        .add_node("x", |_: &Steps| StepsUpdate::default().foo("x"))
        .add_node("y", |_: &Steps| StepsUpdate::default().foo("y"))
        .add_edge(START, "x")
        .add_edge(START, "y")
        .add_edge("x", END)
        .add_edge("y", END)
        .compile(Compile::new())
        .unwrap();
    let err = graph
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidUpdate { ref channel, .. } if channel == "foo"),
        "{err}"
    );
}

#[tokio::test]
async fn fan_out_applies_writes_in_node_order_and_joins_once() {
    let runs = Runs::default();
    let mut graph = Graph::<Steps>::new("FanOut");
    for i in 0..4u64 {
        let runs = runs.clone();
        // Later nodes finish first: the order of `bar` must not follow finishing order.
        graph = graph
            .add_node(format!("w{i}"), move |_: &Steps| {
                let runs = runs.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(20 - 5 * i)).await;
                    runs.hit(&format!("w{i}"));
                    StepsUpdate::default().bar([format!("w{i}")])
                }
            })
            .add_edge(START, format!("w{i}"))
            .add_edge(format!("w{i}"), "join");
    }
    let join_runs = runs.clone();
    let graph = graph
        .add_node("join", move |s: &Steps| {
            join_runs.hit("join");
            StepsUpdate::default().foo(format!("joined {}", s.bar.len()))
        })
        .add_edge("join", END)
        .compile(Compile::new())
        .unwrap();
    let state = graph
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(state.bar, ["w0", "w1", "w2", "w3"]);
    assert_eq!(state.foo, "joined 4", "join saw every branch's write");
    assert_eq!(runs.get("join"), 1);
    assert_eq!(runs.total(), 5);
}

#[tokio::test]
async fn conditional_edges_route_on_the_state_with_the_nodes_own_update() {
    let graph = Graph::<Steps>::new("Router")
        .add_node("classify", |s: &Steps| {
            StepsUpdate::default().foo(if s.bar.is_empty() { "empty" } else { "full" })
        })
        .add_node("on_empty", |_: &Steps| {
            StepsUpdate::default().bar(["went empty"])
        })
        .add_node("on_full", |_: &Steps| {
            StepsUpdate::default().bar(["went full"])
        })
        .add_edge(START, "classify")
        .add_conditional_edges(
            "classify",
            |s: &Steps| {
                if s.foo == "empty" {
                    "on_empty"
                } else {
                    "on_full"
                }
            },
            ["on_empty", "on_full"],
        )
        .add_edge("on_empty", END)
        .add_edge("on_full", END)
        .compile(Compile::new())
        .unwrap();
    let empty = graph
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(empty.bar, ["went empty"]);
    let full = graph
        .invoke(
            Steps {
                bar: vec!["x".into()],
                ..Steps::default()
            },
            &RunConfig::default(),
        )
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(full.bar, ["x", "went full"]);
}

#[tokio::test]
async fn a_router_choosing_an_undeclared_target_is_an_error_naming_the_router() {
    let graph = Graph::<Steps>::new("BadRouter")
        .add_node("a", |_: &Steps| StepsUpdate::default())
        .add_node("b", |_: &Steps| StepsUpdate::default())
        .add_edge(START, "a")
        .add_conditional_edges("a", |_: &Steps| "nowhere", ["b", END])
        .add_edge("b", END)
        .compile(Compile::new())
        .unwrap();
    let err = graph
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap_err();
    match err {
        Error::InvalidRoute {
            router,
            from,
            target,
            reason,
        } => {
            // A closure's router is named by where it is written.
            assert!(
                router.contains("a_router_choosing_an_undeclared_target"),
                "{router}"
            );
            assert_eq!(from, "a");
            assert_eq!(target, "nowhere");
            assert!(reason.contains(r#"["b", "__end__"]"#), "{reason}");
        }
        other => panic!("expected InvalidRoute, got {other}"),
    }
}

#[tokio::test]
async fn commands_goto_other_nodes() {
    let graph = Graph::<Steps>::new("Goto")
        .add_node("a", |_: &Steps| {
            Command::update(StepsUpdate::default().bar(["a"])).goto("c")
        })
        .add_node("c", |_: &Steps| StepsUpdate::default().bar(["c"]))
        .add_edge(START, "a")
        .add_destinations("a", ["c"])
        .add_edge("c", END)
        .compile(Compile::new())
        .unwrap();
    let s = graph
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(s.bar, ["a", "c"]);

    let bad = Graph::<Steps>::new("BadGoto")
        .add_node("a", |_: &Steps| {
            Command::update(StepsUpdate::default()).goto("ghost")
        })
        .add_edge(START, "a")
        .add_edge("a", END)
        .compile(Compile::new())
        .unwrap();
    let err = bad
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::NodeFailed { ref node, .. } if node == "a"),
        "{err}"
    );
}

#[tokio::test]
async fn a_loop_stops_at_the_recursion_limit() {
    let graph = Graph::<Steps>::new("Loop")
        .add_node("spin", |_: &Steps| StepsUpdate::default().bar(["spin"]))
        .add_edge(START, "spin")
        .add_conditional_edges(
            "spin",
            |s: &Steps| if s.bar.len() > 1000 { END } else { "spin" },
            ["spin", END],
        )
        .compile(Compile::new())
        .unwrap();
    let err = graph
        .invoke(Steps::default(), &RunConfig::default().recursion_limit(5))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::RecursionLimit { limit: 5 }), "{err}");
    // Within the limit the same loop finishes.
    let graph = Graph::<Steps>::new("ShortLoop")
        .add_node("spin", |_: &Steps| StepsUpdate::default().bar(["spin"]))
        .add_edge(START, "spin")
        .add_conditional_edges(
            "spin",
            |s: &Steps| if s.bar.len() >= 3 { END } else { "spin" },
            ["spin", END],
        )
        .compile(Compile::new())
        .unwrap();
    let s = graph
        .invoke(Steps::default(), &RunConfig::default().recursion_limit(5))
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(s.bar.len(), 3);
}

#[derive(Debug, thiserror::Error)]
#[error("the model is down")]
struct ModelDown;

#[tokio::test]
async fn node_failures_and_panics_are_typed_errors_naming_the_node() {
    let graph = Graph::<Steps>::new("Fails")
        .add_node("flaky", |_: &Steps| -> Result<StepsUpdate, ModelDown> {
            Err(ModelDown)
        })
        .add_edge(START, "flaky")
        .add_edge("flaky", END)
        .compile(Compile::new())
        .unwrap();
    match graph
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap_err()
    {
        Error::NodeFailed { node, source } => {
            assert_eq!(node, "flaky");
            assert_eq!(source.to_string(), "the model is down");
        }
        other => panic!("expected NodeFailed, got {other}"),
    }
    let graph = Graph::<Steps>::new("Panics")
        .add_node("boom", |_: &Steps| -> StepsUpdate { panic!("kaboom") })
        .add_edge(START, "boom")
        .add_edge("boom", END)
        .compile(Compile::new())
        .unwrap();
    match graph
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap_err()
    {
        Error::NodeFailed { node, source } => {
            assert_eq!(node, "boom");
            assert!(source.to_string().contains("kaboom"));
        }
        other => panic!("expected NodeFailed, got {other}"),
    }
}

#[tokio::test]
async fn a_checkpointed_graph_needs_a_thread_id() {
    let graph = two_step(&InMemorySaver::new());
    let err = graph
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::MissingThreadId), "{err}");
    let err = graph.get_state(&RunConfig::default()).await.unwrap_err();
    assert!(matches!(err, Error::MissingThreadId), "{err}");
}

#[tokio::test]
async fn inspection_needs_a_checkpointer() {
    let graph = Graph::<Steps>::new("Plain")
        .add_node("node_a", node_a)
        .add_sequence([START, "node_a", END])
        .compile(Compile::new())
        .unwrap();
    let err = graph.get_state(&RunConfig::thread("t")).await.unwrap_err();
    assert!(matches!(err, Error::CheckpointerRequired { .. }), "{err}");
    let err = graph
        .continue_run(&RunConfig::thread("t"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CheckpointerRequired { .. }), "{err}");
}

#[tokio::test]
async fn nodes_see_the_run_config_and_context() {
    #[derive(Debug)]
    struct UserId(String);
    let graph = Graph::<Steps>::new("Context")
        .add_node("who", |_: &Steps, rt: &Runtime| {
            let user = rt
                .context::<UserId>()
                .map(|u| u.0.clone())
                .unwrap_or_default();
            StepsUpdate::default().foo(format!("{user}@{}", rt.config().thread_id().unwrap_or("-")))
        })
        .add_sequence([START, "who", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("t9").with_context(UserId("user-123".into()));
    let s = graph
        .invoke(Steps::default(), &config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(s.foo, "user-123@t9");
    // The context is not persisted: the stored state has only what the node wrote.
    let snap = graph.get_state(&RunConfig::thread("t9")).await.unwrap();
    assert_eq!(snap.values.foo, "user-123@t9");
}

#[tokio::test]
async fn langgraph_shaped_config_and_user_metadata() {
    let saver = InMemorySaver::new();
    let graph = two_step(&saver);
    let config = RunConfig::from_json(
        &json!({"configurable": {"thread_id": "json-thread"}, "metadata": {"run": "r1"}}),
    )
    .unwrap();
    graph.invoke(Steps::default(), &config).await.unwrap();
    let tuples = saver
        .list(&ListFilter::thread("json-thread").metadata("run", "r1"))
        .await
        .unwrap();
    assert_eq!(tuples.len(), 4);
    assert_eq!(tuples[3].metadata.source, CheckpointSource::Input);
}

#[tokio::test]
async fn a_shared_dyn_saver_works() {
    let saver: Arc<dyn Saver> = Arc::new(InMemorySaver::new());
    let graph = Graph::<Steps>::new("Dyn")
        .add_node("node_a", node_a)
        .add_node("node_b", node_b)
        .add_sequence([START, "node_a", "node_b", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    graph
        .invoke(Steps::default(), &RunConfig::thread("t"))
        .await
        .unwrap();
    assert_eq!(saver.list(&ListFilter::thread("t")).await.unwrap().len(), 4);
}

#[tokio::test]
async fn stream_yields_updates_then_values_then_the_result() {
    let graph = two_step(&InMemorySaver::new());
    let mut stream = graph.stream(Steps::default(), &RunConfig::thread("s"));
    let mut seen = Vec::new();
    let mut done = None;
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(StreamEvent::Update { node, .. }) => {
                seen.push(format!("update:{node}"))
            }
            StreamItem::Event(StreamEvent::Values { step, values }) => {
                seen.push(format!("values:{step}:{}", values.foo))
            }
            StreamItem::Event(StreamEvent::Interrupted(_)) => seen.push("interrupted".into()),
            // The default modes yield no other event.
            StreamItem::Event(other) => seen.push(format!("other:{other:?}")),
            StreamItem::Done(result) => done = Some(result),
        }
    }
    assert_eq!(
        seen,
        [
            "values:0:",
            "update:node_a",
            "values:1:a",
            "update:node_b",
            "values:2:b"
        ]
    );
    assert_eq!(done.unwrap().unwrap().complete().unwrap().bar, ["a", "b"]);
}

fn compile_err(graph: Graph<Steps>) -> GraphError {
    match graph.compile(Compile::new()) {
        Err(Error::InvalidGraph(e)) => e,
        Err(other) => panic!("expected InvalidGraph, got {other}"),
        Ok(_) => panic!("expected InvalidGraph, got a compiled graph"),
    }
}

#[test]
fn compile_rejects_malformed_graphs_naming_the_node() {
    let base = || Graph::<Steps>::new("g").add_node("a", node_a);
    assert!(matches!(
        compile_err(base().add_edge(START, "a").add_edge("a", "ghost")),
        GraphError::UnknownNode { node, .. } if node == "ghost"
    ));
    assert!(matches!(
        compile_err(base().add_node("a", node_b).add_sequence([START, "a", END])),
        GraphError::DuplicateNode { node } if node == "a"
    ));
    assert!(matches!(
        compile_err(base().add_node("island", node_b).add_sequence([START, "a", END]).add_edge("island", END)),
        GraphError::Unreachable { node } if node == "island"
    ));
    assert!(matches!(
        compile_err(base().add_node("dead", node_b).add_sequence([START, "a", END]).add_edge("a", "dead")),
        GraphError::NoPathToEnd { node } if node == "dead"
    ));
    assert!(matches!(
        compile_err(base().add_edge("a", END)),
        GraphError::NoEntryPoint
    ));
    assert!(matches!(
        compile_err(base().add_sequence([START, "a", END]).add_edge("a", START)),
        GraphError::InvalidEdge { .. }
    ));
    assert!(matches!(
        compile_err(base().add_sequence([START, "a", END]).add_edge(END, "a")),
        GraphError::InvalidEdge { .. }
    ));
    assert!(matches!(
        compile_err(base().add_edge(START, "a").add_conditional_edges("a", |_: &Steps| END, Vec::<String>::new())),
        GraphError::EmptyConditionalTargets { from } if from == "a"
    ));
    assert!(matches!(
        compile_err(
            Graph::<Steps>::new("g")
                .add_node(END, node_a)
                .add_sequence([START, END])
        ),
        GraphError::InvalidNodeName { .. }
    ));
    let with_interrupt = base()
        .add_sequence([START, "a", END])
        .compile(Compile::new().interrupt_before(["a"]))
        .unwrap_err();
    assert!(matches!(
        with_interrupt,
        Error::InvalidGraph(GraphError::InterruptWithoutCheckpointer { .. })
    ));
    let unknown_interrupt = base()
        .add_sequence([START, "a", END])
        .compile(
            Compile::new()
                .checkpointer(InMemorySaver::new())
                .interrupt_after(["nope"]),
        )
        .unwrap_err();
    assert!(matches!(
        unknown_interrupt,
        Error::InvalidGraph(GraphError::UnknownInterruptNode { .. })
    ));
}

/// Stores, on thread `t`, a successor of the head whose `bar` channel holds
/// `bar` (as `update_state` would, one step later).
async fn put_with_bar(saver: &InMemorySaver, bar: serde_json::Value) {
    use weaver::checkpoint::{CheckpointMetadata, CheckpointRef, NewCheckpoint};
    let head = saver
        .get_tuple(&CheckpointRef::latest("t"))
        .await
        .unwrap()
        .unwrap();
    let mut corrupt = head.checkpoint.successor();
    corrupt.channel_values.insert("bar".into(), bar);
    saver
        .put(NewCheckpoint {
            thread_id: "t".into(),
            checkpoint_ns: String::new(),
            parent_id: Some(head.checkpoint.id.clone()),
            checkpoint: corrupt,
            metadata: CheckpointMetadata::new(CheckpointSource::Update, head.metadata.step + 1),
            commit_order: Some(head.commit_order + 1),
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn bad_stored_data_is_a_decode_error_naming_the_field() {
    use weaver::checkpoint::{CheckpointRef, PendingWrite};
    let saver = InMemorySaver::new();
    let graph = two_step(&saver);
    let config = RunConfig::thread("t");
    graph.invoke(Steps::default(), &config).await.unwrap();
    // A checkpoint whose `bar` channel holds a number instead of a list.
    put_with_bar(&saver, json!(5)).await;
    for err in [
        graph.get_state(&config).await.unwrap_err(),
        graph.invoke(Steps::default(), &config).await.unwrap_err(),
        graph
            .get_state_history(&config, History::default())
            .await
            .unwrap_err(),
    ] {
        match err {
            Error::Decode { what, .. } => assert!(what.contains("bar"), "{what}"),
            other => panic!("expected a decode error, got {other}"),
        }
    }
    // A bad element deep in a channel's value names that channel too.
    put_with_bar(&saver, json!(["a", 5])).await;
    match graph.get_state(&config).await.unwrap_err() {
        Error::Decode { what, reason } => {
            assert!(what.contains("`bar`"), "{what}");
            assert!(reason.contains("expected a string"), "{reason}");
        }
        other => panic!("expected a decode error, got {other}"),
    }

    // A pending write of a task that does not decode into the update type.
    let saver = InMemorySaver::new();
    let graph = two_step(&saver);
    let config = RunConfig::thread("u").durability(Durability::Exit);
    graph
        .update_state(&config, StepsUpdate::default().foo("seed"), None)
        .await
        .unwrap();
    let head = saver
        .get_tuple(&CheckpointRef::latest("u"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(graph.get_state(&config).await.unwrap().next, ["node_a"]);
    let task = weaver_tests::task_id_of(&graph, &config, "node_a").await;
    let writes = PendingWrite::for_task(
        &task,
        "node_a",
        [("bar".to_owned(), json!({"not": "a list"}))],
    );
    saver.put_writes(&head.config, writes).await.unwrap();
    match graph.continue_run(&config).await.unwrap_err() {
        Error::Decode { what, .. } => {
            assert!(what.contains("node_a") && what.contains("bar"), "{what}")
        }
        other => panic!("expected a decode error, got {other}"),
    }
}

/// A send router that fans each `bar` item out to `echo`, by its length.
fn fan_out_bars(s: &Steps) -> Vec<weaver::Send<usize>> {
    s.bar
        .iter()
        .map(|b| weaver::Send::new("echo", b.len()))
        .collect()
}

fn echo(payload: &usize) -> StepsUpdate {
    StepsUpdate::default().foo(payload.to_string())
}

/// One router added twice from one node is refused, as LangGraph refuses
/// it: both branches ran, every send twice. An empty list of goto
/// destinations is refused too: it let the node go anywhere. (Both
/// compiled.)
#[test]
fn a_router_added_twice_and_an_empty_goto_list_are_refused() {
    let twice = Graph::<Steps>::new("g")
        .add_send_node("echo", echo)
        .add_conditional_edges(START, fan_out_bars, ["echo"])
        .add_conditional_edges(START, fan_out_bars, ["echo"])
        .add_edge("echo", END)
        .compile(Compile::new());
    assert!(
        matches!(
            twice,
            Err(Error::InvalidGraph(GraphError::DuplicateRouter { .. }))
        ),
        "{:?}",
        twice.err()
    );
    let empty = Graph::<Steps>::new("g")
        .add_node("a", |_: &Steps| StepsUpdate::default())
        .add_node("b", |_: &Steps| StepsUpdate::default())
        .add_sequence([START, "a", "b", END])
        .add_destinations("a", Vec::<String>::new())
        .compile(Compile::new());
    assert!(
        matches!(
            empty,
            Err(Error::InvalidGraph(GraphError::EmptyDestinations { .. }))
        ),
        "{:?}",
        empty.err()
    );
    // Two closures from one node are two routers.
    let two = Graph::<Steps>::new("g")
        .add_node("a", |_: &Steps| StepsUpdate::default())
        .add_node("b", |_: &Steps| StepsUpdate::default())
        .add_conditional_edges(START, |_: &Steps| "a", ["a"])
        .add_conditional_edges(START, |_: &Steps| "b", ["b"])
        .add_edge("a", END)
        .add_edge("b", END)
        .compile(Compile::new());
    assert!(two.is_ok(), "{:?}", two.err());
}
