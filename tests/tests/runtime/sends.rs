//! `Send` fan-out on the in-memory saver and without one, and every way a
//! route or a goto is refused.

use std::sync::Arc;

use serde_json::json;
use weaver::checkpoint::{CheckpointRef, NewCheckpoint};
use weaver::prelude::*;
use weaver_tests::sends::{self, Calls, Corpus, CorpusUpdate};
use weaver_tests::states::{Steps, StepsUpdate};

fn memory() -> Arc<dyn Saver> {
    Arc::new(InMemorySaver::new())
}

#[tokio::test]
async fn a_fan_out_merges_in_send_order_in_memory() {
    sends::fan_out_merges_in_send_order(memory(), "t").await;
}

#[tokio::test]
async fn a_failed_send_is_the_only_task_run_again_in_memory() {
    sends::a_failed_send_is_the_only_task_run_again(memory(), "t").await;
}

#[tokio::test]
async fn new_input_discards_the_unfinished_sends_in_memory() {
    sends::new_input_discards_the_unfinished_sends(memory(), "t").await;
}

#[tokio::test]
async fn a_fan_out_runs_without_a_checkpointer() {
    let calls = Arc::new(Calls::default());
    let graph = sends::fan_out_graph(None, calls.clone());
    let out = graph
        .invoke(sends::sixteen(), &RunConfig::default())
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(out.summaries, sends::sixteen_summaries());
    assert_eq!(calls.total(), 16);
}

#[tokio::test]
async fn an_empty_fan_out_runs_no_task() {
    let calls = Arc::new(Calls::default());
    let graph = sends::fan_out_graph(Some(memory()), calls.clone());
    let out = graph
        .invoke(Corpus::default(), &RunConfig::thread("t"))
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(calls.total(), 0);
    assert!(out.summaries.is_empty());
    // Nothing was sent, so nothing leads to `reduce` either.
    assert_eq!(out.report, "");
}

/// A graph whose router (after `a`) returns what `route` gives, with
/// `summarize` (payload `u32`) and `plain` (the state) as its targets.
fn routed<R>(route: R) -> CompiledGraph<Steps>
where
    R: Fn(&Steps) -> weaver::Route + Send + Sync + 'static,
{
    Graph::<Steps>::new("routes")
        .add_node("a", |_: &Steps| StepsUpdate::default())
        .add_node("plain", |_: &Steps| StepsUpdate::default().bar(["plain"]))
        .add_send_node("summarize", |n: &u32| {
            StepsUpdate::default().bar([format!("sent {n}")])
        })
        .add_edge(START, "a")
        .add_conditional_edges("a", route, ["plain", "summarize", END])
        .add_edge("plain", END)
        .add_edge("summarize", END)
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap()
}

fn to_summarize(_: &Steps) -> weaver::Route {
    weaver::Route::sends([
        weaver::Send::new("summarize", 1u32),
        weaver::Send::new("summarize", 2u32),
    ])
}

#[tokio::test]
async fn a_router_may_send_the_same_node_several_payloads() {
    let out = routed(to_summarize)
        .invoke(Steps::default(), &RunConfig::thread("t"))
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(out.bar, ["sent 1", "sent 2"]);
}

async fn refused<R>(route: R) -> (String, String, String)
where
    R: Fn(&Steps) -> weaver::Route + Send + Sync + 'static,
{
    let err = routed(route)
        .invoke(Steps::default(), &RunConfig::thread("t"))
        .await
        .unwrap_err();
    match err {
        Error::InvalidRoute {
            router,
            from,
            target,
            reason,
        } => {
            assert_eq!(from, "a");
            (router, target, reason)
        }
        other => panic!("expected InvalidRoute, got {other}"),
    }
}

fn send_to_undeclared(_: &Steps) -> weaver::Route {
    weaver::Route::sends([weaver::Send::new("ghost", 1u32)])
}

fn send_to_a_state_node(_: &Steps) -> weaver::Route {
    weaver::Route::sends([weaver::Send::new("plain", 1u32)])
}

fn name_a_payload_node(_: &Steps) -> weaver::Route {
    weaver::Route::to(["summarize"])
}

#[tokio::test]
async fn a_router_refused_is_an_error_naming_the_router() {
    let (router, target, reason) = refused(send_to_undeclared).await;
    // A router is named by its path (the crate's left out).
    assert_eq!(router, "sends::send_to_undeclared");
    assert_eq!(target, "ghost");
    assert!(reason.contains("not a declared target"), "{reason}");
    let (_, target, reason) = refused(send_to_a_state_node).await;
    assert_eq!(target, "plain");
    assert!(reason.contains("add_send_node"), "{reason}");
    let (_, target, reason) = refused(name_a_payload_node).await;
    assert_eq!(target, "summarize");
    assert!(reason.contains("return a `Send`"), "{reason}");
}

#[tokio::test]
async fn a_payload_json_cannot_hold_is_an_encode_error() {
    fn nan(_: &Steps) -> weaver::Route {
        weaver::Route::sends([weaver::Send::new("summarize", f64::NAN)])
    }
    let err = routed(nan)
        .invoke(Steps::default(), &RunConfig::thread("t"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Encode { .. }), "{err}");
}

#[tokio::test]
async fn a_payload_that_does_not_decode_fails_its_task() {
    fn text(_: &Steps) -> weaver::Route {
        weaver::Route::sends([weaver::Send::new("summarize", "not a number")])
    }
    let err = routed(text)
        .invoke(Steps::default(), &RunConfig::thread("t"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::NodeFailed { node, source } if node == "summarize" && source.to_string().contains("payload")),
        "{err}"
    );
}

#[tokio::test]
async fn stored_sends_to_a_node_the_graph_lacks_are_a_removed_node_error() {
    let saver = InMemorySaver::new();
    let graph = Graph::<Steps>::new("g")
        .add_node("a", |_: &Steps| StepsUpdate::default())
        .add_edge(START, "a")
        .add_edge("a", END)
        .compile(Compile::new().checkpointer(saver.clone()))
        .unwrap();
    let mut record = weaver::checkpoint::Checkpoint::empty();
    record.id = "c1".into();
    record
        .channel_values
        .insert("__sends__".into(), json!([{"node": "gone", "payload": 1}]));
    let root = NewCheckpoint {
        thread_id: "t".into(),
        checkpoint_ns: String::new(),
        parent_id: None,
        checkpoint: record,
        metadata: weaver::checkpoint::CheckpointMetadata::new(
            weaver::checkpoint::CheckpointSource::Loop,
            0,
        ),
        commit_order: None,
    };
    saver.put(root).await.unwrap();
    let config = RunConfig::thread("t");
    let removed = |e: &Error| matches!(e, Error::RemovedNode { node, checkpoint_id, .. } if node == "gone" && checkpoint_id == "c1");
    let err = graph.continue_run(&config).await.unwrap_err();
    assert!(removed(&err), "{err}");
    let err = graph.get_state(&config).await.unwrap_err();
    assert!(removed(&err), "{err}");
    assert!(
        saver
            .get_tuple(&CheckpointRef::latest("t"))
            .await
            .unwrap()
            .is_some()
    );
}

#[test]
fn an_edge_into_a_node_run_by_sends_is_refused() {
    let built = Graph::<Steps>::new("g")
        .add_send_node("summarize", |_: &u32| StepsUpdate::default())
        .add_edge(START, "summarize")
        .add_edge("summarize", END)
        .compile(Compile::new());
    assert!(
        matches!(&built, Err(Error::InvalidGraph(weaver::GraphError::InvalidEdge { to, .. })) if to == "summarize"),
        "{:?}",
        built.err()
    );
}

#[tokio::test]
async fn a_goto_outside_the_declared_destinations_is_refused() {
    let graph = Graph::<Steps>::new("goto")
        .add_node("a", |_: &Steps| {
            Command::update(StepsUpdate::default()).goto("c")
        })
        .add_node("b", |_: &Steps| StepsUpdate::default())
        .add_node("c", |_: &Steps| StepsUpdate::default())
        .add_edge(START, "a")
        .add_destinations("a", ["b", END])
        .add_edge("b", END)
        .add_edge(START, "c")
        .add_edge("c", END)
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("t");
    let err = graph.invoke(Steps::default(), &config).await.unwrap_err();
    match err {
        Error::InvalidGoto {
            node,
            target,
            declared,
        } => {
            assert_eq!(node, "a");
            assert_eq!(target, "c");
            assert_eq!(declared, ["b", END]);
        }
        other => panic!("expected InvalidGoto, got {other}"),
    }
    // The refusal is the task's stored error.
    let snapshot = graph.get_state(&config).await.unwrap();
    let a = snapshot.tasks.iter().find(|t| t.name == "a").unwrap();
    assert!(
        a.error
            .as_deref()
            .unwrap()
            .contains("declared destinations")
    );
}

#[tokio::test]
async fn graph_macro_gotos_are_enforced_at_run_time() {
    fn a(_: &Steps) -> Command<StepsUpdate> {
        Command::update(StepsUpdate::default()).goto("c")
    }
    fn b(_: &Steps) -> StepsUpdate {
        StepsUpdate::default()
    }
    fn c(_: &Steps) -> StepsUpdate {
        StepsUpdate::default()
    }
    let graph = graph! {
        state: Steps,
        nodes: [a, b, c],
        edges: [START -> a, START -> c -> END, b -> END],
        goto: [a -> [b, END]],
    }
    .compile(Compile::new())
    .unwrap();
    let err = graph
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidGoto { node, target, .. } if node == "a" && target == "c"),
        "{err}"
    );
}

/// The sends' summaries through `update_state`: an update as the node
/// before a fan-out routes like that node, so the sends are made.
#[tokio::test]
async fn an_update_as_a_node_makes_its_routers_sends() {
    let calls = Arc::new(Calls::default());
    let graph = sends::fan_out_graph(Some(memory()), calls.clone());
    let config = RunConfig::thread("t");
    // An update as START takes in docs and routes them as START would.
    let at = graph
        .update_state(
            &config,
            CorpusUpdate::default().docs(vec!["x".to_owned(), "y".to_owned()]),
            Some(START),
        )
        .await
        .unwrap();
    let snapshot = graph.get_state(&config).await.unwrap();
    assert_eq!(snapshot.next, ["summarize", "summarize"]);
    let out = graph.continue_run(&at).await.unwrap().complete().unwrap();
    assert_eq!(out.summaries, ["X", "Y"]);
    assert_eq!(calls.total(), 2);
}

/// A send's task starts with its payload in the task events; the other
/// tasks start with none.
#[tokio::test]
async fn a_send_task_starts_with_its_payload_in_the_task_events() {
    use futures_util::StreamExt;
    use weaver::{StreamEvent, StreamItem, StreamMode};
    let calls = Arc::new(Calls::default());
    let graph = sends::fan_out_graph(Some(memory()), calls);
    let input = Corpus {
        docs: vec!["x".into(), "y".into()],
        ..Corpus::default()
    };
    let mut stream = graph.stream_with_mode(input, &RunConfig::thread("t"), StreamMode::Tasks);
    let mut payloads = Vec::new();
    let mut others = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(StreamEvent::TaskStart { task, payload, .. }) => {
                if task.node == "summarize" {
                    payloads.push(payload.expect("a send's payload"));
                } else {
                    others.push((task.node, payload));
                }
            }
            StreamItem::Event(_) => {}
            StreamItem::Done(done) => {
                done.unwrap();
                break;
            }
        }
    }
    payloads.sort_by_key(|p| p.to_string());
    assert_eq!(payloads, [json!("x"), json!("y")]);
    assert!(!others.is_empty());
    assert!(others.iter().all(|(_, p)| p.is_none()), "{others:?}");
}

/// `update_state` on a thread whose fan-out stopped part way takes in the
/// finished sends' writes, and the sends it leaves to run are the
/// unfinished ones only: continuing runs the failed send alone.
#[tokio::test]
async fn an_update_after_a_partial_fan_out_leaves_only_the_unfinished_sends() {
    let calls = Arc::new(Calls::default());
    calls.fail("doc07");
    let graph = sends::fan_out_graph(Some(memory()), calls.clone());
    let config = RunConfig::thread("t");
    graph.invoke(sends::sixteen(), &config).await.unwrap_err();
    assert_eq!(calls.total(), 16);
    graph
        .update_state(
            &config,
            CorpusUpdate::default().report("edited".to_owned()),
            Some("reduce"),
        )
        .await
        .unwrap();
    let snapshot = graph.get_state(&config).await.unwrap();
    assert_eq!(snapshot.next, ["summarize"], "only the failed send is left");
    assert_eq!(snapshot.values.summaries.len(), 15);
    calls.heal();
    let out = graph
        .continue_run(&config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(calls.of("doc07"), 2, "the failed task ran again");
    assert_eq!(calls.total(), 17, "and no other");
    let mut summaries = out.summaries.clone();
    summaries.sort();
    assert_eq!(summaries, sends::sixteen_summaries(), "each summary once");
}

/// The sends a finished send task made are tasks of the next step: an
/// update after the step stopped part way keeps them.
#[tokio::test]
async fn an_update_keeps_the_sends_finished_send_tasks_made() {
    let ran = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (first_ran, second_ran) = (ran.clone(), ran.clone());
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let fails = failing.clone();
    let graph = Graph::<Steps>::new("two-levels")
        .add_send_node("first", move |name: &String| {
            first_ran.lock().unwrap().push(format!("first {name}"));
            if name == "b" && fails.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(NodeError::msg("b is down"));
            }
            Ok(StepsUpdate::default().bar([format!("first {name}")]))
        })
        .add_send_node("second", move |n: &u32| {
            second_ran.lock().unwrap().push(format!("second {n}"));
            StepsUpdate::default().bar([format!("second {n}")])
        })
        .add_node("done", |_: &Steps| StepsUpdate::default().foo("done"))
        .add_conditional_edges(
            START,
            |_: &Steps| {
                weaver::Route::sends([
                    weaver::Send::new("first", "a".to_owned()),
                    weaver::Send::new("first", "b".to_owned()),
                ])
            },
            ["first"],
        )
        .add_conditional_edges(
            "first",
            |_: &Steps| weaver::Route::sends([weaver::Send::new("second", 1u32)]),
            ["second"],
        )
        .add_edge("second", "done")
        .add_edge("done", END)
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("t");
    graph.invoke(Steps::default(), &config).await.unwrap_err();
    graph
        .update_state(&config, StepsUpdate::default().foo("edited"), Some("done"))
        .await
        .unwrap();
    let snapshot = graph.get_state(&config).await.unwrap();
    let mut next = snapshot.next.clone();
    next.sort();
    assert_eq!(next, ["first", "second"], "b's retry and a's send");
    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    graph
        .continue_run(&config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    let mut ran = ran.lock().unwrap().clone();
    ran.sort();
    assert_eq!(
        ran,
        ["first a", "first b", "first b", "second 1", "second 1"],
        "a ran once; its send and b's each ran"
    );
}

/// `__copy__` of a thread whose fan-out stopped part way copies the
/// checkpoint as stored (LangGraph's copy): the finished sends' writes stay
/// with the original, and continuing the copy runs the fan-out again, each
/// summary once.
#[tokio::test]
async fn a_copy_after_a_partial_fan_out_copies_the_checkpoint_as_stored() {
    let calls = Arc::new(Calls::default());
    calls.fail("doc07");
    let graph = sends::fan_out_graph(Some(memory()), calls.clone());
    let config = RunConfig::thread("t");
    graph.invoke(sends::sixteen(), &config).await.unwrap_err();
    let copy = graph
        .update_state(&config, CorpusUpdate::default(), Some("__copy__"))
        .await
        .unwrap();
    let copied = graph.get_state(&copy).await.unwrap();
    assert!(copied.values.summaries.is_empty(), "{:?}", copied.values);
    assert_eq!(copied.next.len(), 16);
    calls.heal();
    let out = graph.continue_run(&copy).await.unwrap().complete().unwrap();
    let mut summaries = out.summaries.clone();
    summaries.sort();
    assert_eq!(summaries, sends::sixteen_summaries(), "each summary once");
}

/// The sends a finished ordinary node made (its router's) are tasks of the
/// next step too: an update after its sibling failed keeps them, and
/// continuing runs them.
#[tokio::test]
async fn an_update_keeps_the_sends_a_finished_node_made() {
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let fails = failing.clone();
    let graph = Graph::<Steps>::new("node-sends")
        .add_node("a", |_: &Steps| StepsUpdate::default().bar(["a"]))
        .add_node("b", move |_: &Steps| {
            if fails.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(NodeError::msg("b is down"));
            }
            Ok(StepsUpdate::default().bar(["b"]))
        })
        .add_send_node("w", |p: &String| {
            StepsUpdate::default().bar([format!("w {p}")])
        })
        .add_edge(START, "a")
        .add_edge(START, "b")
        .add_conditional_edges(
            "a",
            |_: &Steps| weaver::Route::sends([weaver::Send::new("w", "p".to_owned())]),
            ["w"],
        )
        .add_edge("b", END)
        .add_edge("w", END)
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("t");
    graph.invoke(Steps::default(), &config).await.unwrap_err();
    graph
        .update_state(&config, StepsUpdate::default().bar(["fixed b"]), Some("b"))
        .await
        .unwrap();
    let snapshot = graph.get_state(&config).await.unwrap();
    assert_eq!(snapshot.next, ["w"], "a's send is left to run");
    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    let out = graph
        .continue_run(&config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(out.bar, ["a", "fixed b", "w p"]);
}

/// A `goto` into a node run by sends (which has no payload to run with)
/// fails the node that returned it, not the node it named, and the thread
/// is not left with a task it cannot run.
#[tokio::test]
async fn a_goto_into_a_node_run_by_sends_fails_the_jumping_node() {
    let graph = Graph::<Steps>::new("goto-send")
        .add_node("a", |_: &Steps| {
            Command::update(StepsUpdate::default()).goto("summarize")
        })
        .add_send_node("summarize", |n: &u32| {
            StepsUpdate::default().bar([format!("sent {n}")])
        })
        .add_edge(START, "a")
        .add_edge("a", END)
        .add_conditional_edges(
            START,
            |_: &Steps| weaver::Route::sends([weaver::Send::new("summarize", 1u32)]),
            ["summarize"],
        )
        .add_edge("summarize", END)
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("t");
    let err = graph.invoke(Steps::default(), &config).await.unwrap_err();
    match &err {
        Error::NodeFailed { node, source } => {
            assert_eq!(node, "a");
            assert!(source.to_string().contains("run by sends"), "{source}");
        }
        other => panic!("expected NodeFailed of a, got {other}"),
    }
    let snapshot = graph.get_state(&config).await.unwrap();
    let a = snapshot.tasks.iter().find(|t| t.name == "a").unwrap();
    assert!(a.error.as_deref().unwrap().contains("run by sends"));
    let sent = snapshot
        .tasks
        .iter()
        .find(|t| t.name == "summarize")
        .unwrap();
    assert!(sent.error.is_none() && sent.succeeded, "{sent:?}");
}

/// History read by a graph that no longer has a node some past sends went
/// to: those sends are dropped, and the sends after them keep their own
/// writes (a send's task id follows its place, which moved up).
#[tokio::test]
async fn history_without_a_removed_send_keeps_each_sends_own_writes() {
    let saver: Arc<dyn Saver> = memory();
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let fails = failing.clone();
    let v1 = Graph::<Steps>::new("sends")
        .add_send_node("gone", |n: &u32| {
            StepsUpdate::default().bar([format!("gone {n}")])
        })
        .add_send_node("keep", move |n: &u32| {
            if *n == 1 && fails.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(NodeError::msg("keep 1 is down"));
            }
            Ok(StepsUpdate::default().bar([format!("keep {n}")]))
        })
        .add_conditional_edges(
            START,
            |_: &Steps| {
                weaver::Route::sends([
                    weaver::Send::new("gone", 0u32),
                    weaver::Send::new("keep", 1u32),
                    weaver::Send::new("keep", 2u32),
                ])
            },
            ["gone", "keep"],
        )
        .add_edge("gone", END)
        .add_edge("keep", END)
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let config = RunConfig::thread("t");
    v1.invoke(Steps::default(), &config).await.unwrap_err();
    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    v1.continue_run(&config).await.unwrap().complete().unwrap();
    // The next release: `gone` removed.
    let v2 = Graph::<Steps>::new("sends")
        .add_send_node("keep", |n: &u32| {
            StepsUpdate::default().bar([format!("keep {n}")])
        })
        .add_conditional_edges(
            START,
            |_: &Steps| weaver::Route::sends([weaver::Send::new("keep", 1u32)]),
            ["keep"],
        )
        .add_edge("keep", END)
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap();
    let history = v2
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let fan_out = history
        .iter()
        .find(|s| s.next.iter().any(|n| n == "keep"))
        .expect("the fan-out's checkpoint");
    assert_eq!(fan_out.next, ["keep", "keep"]);
    let (one, two) = (&fan_out.tasks[0], &fan_out.tasks[1]);
    assert!(
        one.error
            .as_deref()
            .is_some_and(|e| e.contains("keep 1 is down")),
        "keep 1 shows its own failure: {one:?}"
    );
    assert!(one.succeeded, "{one:?}");
    assert!(two.error.is_none() && two.succeeded, "keep 2: {two:?}");
}
