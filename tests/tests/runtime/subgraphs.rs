//! Subgraphs on the in-memory saver: namespaces, interrupts across levels,
//! failures, a finished subgraph, deletion; and what only a run in memory
//! shows (a subgraph's own checkpointer, two subgraphs in one task, the
//! parent's stream).

use std::sync::Arc;

use weaver::prelude::*;
use weaver_tests::subgraphs::{self, Counts, Depth, Draft, DraftUpdate, draft_graph};

fn memory() -> Arc<dyn Saver> {
    Arc::new(InMemorySaver::new())
}

#[tokio::test]
async fn subgraph_checkpoints_live_under_the_task_namespace_in_memory() {
    subgraphs::subgraph_checkpoints_live_under_the_task_namespace(memory()).await;
}

#[tokio::test]
async fn an_interrupt_one_level_deep_is_answered_from_a_fresh_graph_in_memory() {
    let saver = memory();
    subgraphs::a_deep_interrupt_is_answered_from_a_fresh_graph(saver.clone(), saver, Depth::One)
        .await;
}

#[tokio::test]
async fn an_interrupt_two_levels_deep_is_answered_from_a_fresh_graph_in_memory() {
    let saver = memory();
    subgraphs::a_deep_interrupt_is_answered_from_a_fresh_graph(saver.clone(), saver, Depth::Two)
        .await;
}

#[tokio::test]
async fn a_failing_inner_node_fails_the_parent_until_continued_in_memory() {
    subgraphs::a_failing_inner_node_fails_the_parent_until_continued(memory()).await;
}

#[tokio::test]
async fn a_finished_subgraph_is_not_run_again_in_memory() {
    subgraphs::a_finished_subgraph_is_not_run_again(memory()).await;
}

#[tokio::test]
async fn replaying_a_paused_parent_checkpoint_resumes_the_subgraph_one_level_deep_in_memory() {
    subgraphs::replaying_a_paused_parent_checkpoint_resumes_the_subgraph_at_its_pause(
        memory(),
        Depth::One,
    )
    .await;
}

#[tokio::test]
async fn replaying_a_paused_parent_checkpoint_resumes_the_subgraph_two_levels_deep_in_memory() {
    subgraphs::replaying_a_paused_parent_checkpoint_resumes_the_subgraph_at_its_pause(
        memory(),
        Depth::Two,
    )
    .await;
}

#[tokio::test]
async fn a_fork_resumes_a_paused_subgraph_where_it_paused_in_memory() {
    for depth in [Depth::One, Depth::Two] {
        subgraphs::a_fork_resumes_a_paused_subgraph_where_it_paused(memory(), depth).await;
    }
}

#[tokio::test]
async fn replaying_before_the_subgraph_ran_starts_it_over_in_memory() {
    subgraphs::replaying_before_the_subgraph_ran_starts_it_over(memory()).await;
}

#[tokio::test]
async fn deleting_a_thread_deletes_its_subgraphs_in_memory() {
    subgraphs::deleting_a_thread_deletes_its_subgraphs(memory()).await;
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Outer {
    topic: String,
    text: String,
}

/// A parent running `draft` in its node `call`, twice when `twice`.
fn outer(
    saver: Option<Arc<dyn Saver>>,
    draft: CompiledGraph<Draft>,
    twice: bool,
) -> CompiledGraph<Outer> {
    let compile = match saver {
        Some(s) => Compile::new().checkpointer_arc(s),
        None => Compile::new(),
    };
    Graph::<Outer>::new("outer")
        .add_node("call", move |s: &Outer, rt: &Runtime| {
            let first = rt.subgraph(&draft);
            let second = twice.then(|| rt.subgraph(&draft));
            let topic = s.topic.clone();
            async move {
                let input = Draft {
                    topic,
                    ..Draft::default()
                };
                let done = first.invoke(input.clone()).await?;
                if let Some(second) = second {
                    second.invoke(input).await?;
                }
                Ok::<_, NodeError>(OuterUpdate::default().text(done.text))
            }
        })
        .add_sequence([START, "call", END])
        .compile(compile)
        .unwrap()
}

/// A draft that only outlines (no approval).
fn outline_only(saver: Option<Arc<dyn Saver>>) -> CompiledGraph<Draft> {
    let compile = match saver {
        Some(s) => Compile::new().checkpointer_arc(s),
        None => Compile::new(),
    };
    Graph::<Draft>::new("outline")
        .add_node("outline", |s: &Draft| {
            DraftUpdate::default().text(format!("all about {}", s.topic))
        })
        .add_sequence([START, "outline", END])
        .compile(compile)
        .unwrap()
}

fn topic() -> Outer {
    Outer {
        topic: "rust".into(),
        ..Outer::default()
    }
}

#[tokio::test]
async fn a_subgraph_with_its_own_checkpointer_runs_on_the_parents() {
    let (parent, own) = (memory(), memory());
    let graph = outer(Some(parent.clone()), outline_only(Some(own.clone())), false);
    let out = graph
        .invoke(topic(), &RunConfig::thread("t"))
        .await
        .unwrap();
    assert_eq!(out.complete().unwrap().text, "all about rust");
    assert_eq!(subgraphs::namespaces(&parent, "t").await.len(), 2);
    assert!(subgraphs::namespaces(&own, "t").await.is_empty());
}

#[tokio::test]
async fn a_subgraph_runs_without_a_checkpointer_when_the_parent_has_none() {
    let graph = outer(None, outline_only(None), true);
    let out = graph.invoke(topic(), &RunConfig::default()).await.unwrap();
    assert_eq!(out.complete().unwrap().text, "all about rust");
    // Pausing needs a checkpointer, at any depth.
    let asks = draft_graph(None, Arc::new(Counts::default()), Depth::One);
    let err = outer(None, asks, false)
        .invoke(topic(), &RunConfig::default())
        .await
        .unwrap_err();
    let Error::NodeFailed { node, source } = &err else {
        panic!("not a node failure: {err:?}");
    };
    assert_eq!(node, "call");
    let inner = source.downcast_ref::<Error>();
    assert!(
        matches!(inner, Some(Error::CheckpointerRequired { .. })),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_second_subgraph_in_one_task_is_refused() {
    let graph = outer(Some(memory()), outline_only(None), true);
    let err = graph
        .invoke(topic(), &RunConfig::thread("t"))
        .await
        .unwrap_err();
    let Error::NodeFailed { node, source } = &err else {
        panic!("not a node failure: {err:?}");
    };
    assert_eq!(node, "call");
    let inner = source.downcast_ref::<Error>();
    assert!(
        matches!(inner, Some(Error::InvalidArgument { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("second subgraph"), "{err}");
}

#[tokio::test]
async fn a_subgraphs_nodes_stream_through_the_parents_stream() {
    use futures_util::StreamExt;
    use weaver::{StreamEvent, StreamItem, StreamMode};

    let inner = Graph::<Draft>::new("inner")
        .add_node("say", |_: &Draft, rt: &Runtime| {
            rt.stream().custom(serde_json::json!("from inside"))?;
            Ok::<_, NodeError>(DraftUpdate::default().text("said".to_owned()))
        })
        .add_sequence([START, "say", END])
        .compile(Compile::new())
        .unwrap();
    let graph = outer(Some(memory()), inner, false);
    let mut stream = graph.stream_with_mode(topic(), &RunConfig::thread("t"), StreamMode::Custom);
    let mut seen = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(StreamEvent::Custom { task, value, .. }) => {
                seen.push((task.namespace.clone(), task.node.clone(), task.step, value))
            }
            StreamItem::Event(_) => {}
            StreamItem::Done(result) => {
                assert_eq!(result.unwrap().complete().unwrap().text, "said")
            }
        }
    }
    // Tagged with the subgraph's own task: its namespace (`call:<task
    // id>`), node and step.
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (namespace, node, step, value) = &seen[0];
    assert!(namespace.starts_with("call:"), "{namespace}");
    assert_eq!((node.as_str(), *step), ("say", 1));
    assert_eq!(value, &serde_json::json!("from inside"));
}

/// What a stream yields of updates, checkpoints and interrupts, top level
/// and subgraphs': `(namespace, what)` in order.
async fn streamed_updates(
    graph: &CompiledGraph<Notes>,
    input: Notes,
    config: &RunConfig,
    modes: weaver::StreamModes,
) -> Vec<(String, String)> {
    use futures_util::StreamExt;
    use weaver::{StreamEvent, StreamItem, SubgraphEvent};

    let mut stream = graph.stream_with_modes(input, config, modes);
    let mut seen = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(StreamEvent::Update { node, .. }) => {
                seen.push((String::new(), format!("update {node}")))
            }
            StreamItem::Event(StreamEvent::Checkpoint(c)) => {
                seen.push((c.namespace.clone(), "checkpoint".to_owned()))
            }
            StreamItem::Event(StreamEvent::Interrupted(i)) => {
                seen.push((String::new(), format!("interrupted {}", i.len())))
            }
            StreamItem::Event(StreamEvent::Subgraph(e)) => {
                let what = match e.as_ref() {
                    SubgraphEvent::Update { node, update, .. } => {
                        assert!(update.is_object(), "{update}");
                        format!("update {node}")
                    }
                    SubgraphEvent::Checkpoint(c) => {
                        assert!(c.values.is_object(), "{:?}", c.values);
                        "checkpoint".to_owned()
                    }
                    other => format!("{other:?}"),
                };
                seen.push((e.namespace().to_owned(), what))
            }
            StreamItem::Event(_) => {}
            StreamItem::Done(result) => {
                result.unwrap();
            }
        }
    }
    seen
}

/// Streamed with subgraphs (LangGraph's `subgraphs=True`), a run yields
/// its subgraphs' updates and checkpoints, two levels deep, each with the
/// subgraph's namespace, in order with its own; without, none of them. A
/// pause inside a subgraph is yielded once, by the parent.
#[tokio::test]
async fn subgraphs_events_are_streamed_with_their_namespaces_when_asked() {
    use weaver::{StreamMode, StreamModes};

    let deep = Graph::<Notes>::new("deep")
        .add_node("leaf", |_: &Notes| note("leaf"))
        .add_sequence([START, "leaf", END])
        .compile(Compile::new())
        .unwrap();
    let mid = Graph::<Notes>::new("mid")
        .add_node("m1", |_: &Notes| note("m1"))
        .add_subgraph("deep", deep)
        .add_sequence([START, "m1", "deep", END])
        .compile(Compile::new())
        .unwrap();
    let graph = Graph::<Notes>::new("top")
        .add_node("o1", |_: &Notes| note("o1"))
        .add_subgraph("mid", mid)
        .add_sequence([START, "o1", "mid", END])
        .compile(Compile::new().checkpointer_arc(memory()))
        .unwrap();
    let updates = StreamModes::from(StreamMode::Updates);
    let plain = streamed_updates(&graph, Notes::default(), &RunConfig::thread("a"), updates).await;
    assert_eq!(
        plain,
        [
            (String::new(), "update o1".to_owned()),
            (String::new(), "update mid".to_owned())
        ]
    );
    let modes = updates.with(StreamMode::Checkpoints).with_subgraphs();
    let seen = streamed_updates(&graph, Notes::default(), &RunConfig::thread("b"), modes).await;
    let updates: Vec<(String, &str)> = seen
        .iter()
        .filter(|(_, what)| what.starts_with("update"))
        .map(|(ns, what)| (subgraph_path(ns), what.as_str()))
        .collect();
    assert_eq!(
        updates,
        [
            (String::new(), "update o1"),
            ("mid".to_owned(), "update m1"),
            ("mid|deep".to_owned(), "update leaf"),
            ("mid".to_owned(), "update deep"),
            (String::new(), "update mid"),
        ]
    );
    for path in ["", "mid", "mid|deep"] {
        assert!(
            seen.iter()
                .any(|(ns, what)| what == "checkpoint" && subgraph_path(ns) == path),
            "no checkpoint of `{path}`: {seen:?}"
        );
    }
    // A pause inside a subgraph: yielded once, by the parent.
    let desk = notes_desk(memory(), false);
    let modes = StreamModes::from(StreamMode::Updates).with_subgraphs();
    let seen = streamed_updates(&desk, Notes::default(), &RunConfig::thread("c"), modes).await;
    assert!(
        seen.iter()
            .any(|(ns, what)| ns.starts_with("research:") && what == "update search"),
        "{seen:?}"
    );
    let paused: Vec<_> = seen
        .iter()
        .filter(|(_, what)| what.starts_with("interrupted"))
        .collect();
    assert_eq!(paused, [&(String::new(), "interrupted 1".to_owned())]);
}

/// A namespace's node names (`"mid:id|deep:id"` is `"mid|deep"`).
fn subgraph_path(ns: &str) -> String {
    weaver::evolution::subgraph_path(ns)
}

/// A state shared by a parent and its subgraph: an append, an add and a
/// last-value channel.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Notes {
    #[reducer(append)]
    lines: Vec<String>,
    #[reducer(add)]
    steps: u64,
    last: String,
}

fn note(line: &str) -> NotesUpdate {
    NotesUpdate::default()
        .lines(vec![line.to_owned()])
        .steps(1u64)
        .last(line.to_owned())
}

/// `research` (search, then ask) as a subgraph of plan → research → write.
fn notes_desk(saver: Arc<dyn Saver>, through_macro: bool) -> CompiledGraph<Notes> {
    let research = Graph::<Notes>::new("research")
        .add_node("search", |_: &Notes| note("found"))
        .add_node("ask", |_: &Notes, rt: &Runtime| {
            let answer = rt.interrupt("keep it?")?;
            Ok::<_, NodeError>(note(answer.as_str().unwrap_or_default()))
        })
        .add_sequence([START, "search", "ask", END])
        .compile(Compile::new())
        .unwrap();
    let graph = if through_macro {
        graph! {
            state: Notes,
            nodes: [
                plan = |_: &Notes| note("planned"),
                research = research,
                write = |_: &Notes| note("written"),
            ],
            edges: [START -> plan -> research -> write -> END],
        }
    } else {
        Graph::<Notes>::new("notes")
            .add_node("plan", |_: &Notes| note("planned"))
            .add_subgraph("research", research)
            .add_node("write", |_: &Notes| note("written"))
            .add_sequence([START, "plan", "research", "write", END])
    };
    graph
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

async fn net_change_of_the_notes_desk(through_macro: bool) {
    let saver = memory();
    let graph = notes_desk(saver.clone(), through_macro);
    let config = RunConfig::thread("notes");
    let out = graph.invoke(Notes::default(), &config).await.unwrap();
    assert_eq!(out.interrupts().len(), 1, "{out:?}");
    assert_eq!(out.interrupts()[0].node, "ask");
    // Another graph on the same saver answers.
    let again = notes_desk(saver, through_macro);
    let done = again
        .resume(serde_json::json!("kept"), &config)
        .await
        .unwrap();
    let done = done.complete().unwrap();
    // Each line once: the subgraph's update is what it appended, added and
    // set, not its whole final state.
    assert_eq!(done.lines, ["planned", "found", "kept", "written"]);
    assert_eq!(done.steps, 4);
    assert_eq!(done.last, "written");
    let history = again
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let after_research = history
        .iter()
        .find(|s| s.next == ["write"])
        .expect("a checkpoint after research");
    assert_eq!(after_research.values.last, "kept");
    assert_eq!(after_research.values.steps, 3);
}

/// A graph over the same state whose one node, `inner`, is `inner`, on an
/// in-memory saver.
fn outer_of<S: GraphState>(inner: CompiledGraph<S>) -> CompiledGraph<S> {
    Graph::<S>::new("outer")
        .add_subgraph("inner", inner)
        .add_sequence([START, "inner", END])
        .compile(Compile::new().checkpointer_arc(memory()))
        .unwrap()
}

#[tokio::test]
async fn a_shared_state_subgraph_updates_by_its_net_change() {
    net_change_of_the_notes_desk(false).await;
}

#[tokio::test]
async fn graph_macro_takes_a_compiled_graph_as_a_node() {
    net_change_of_the_notes_desk(true).await;
}

/// A shared state whose serde form is not one list in insertion order: a
/// set and a map appended to, an option left out while `None`, and a
/// counter left out while zero.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Tags {
    #[reducer(append)]
    tags: std::collections::BTreeSet<String>,
    #[reducer(append)]
    seen: std::collections::BTreeMap<String, u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gone: Option<String>,
    #[reducer(add)]
    #[serde(default, skip_serializing_if = "is_zero")]
    hits: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[tokio::test]
async fn a_shared_state_subgraph_adds_to_sets_maps_and_left_out_fields() {
    let inner = Graph::<Tags>::new("inner")
        .add_node("tag", |_: &Tags| {
            TagsUpdate::default()
                .tags(std::collections::BTreeSet::from(["a".to_owned()]))
                .seen(std::collections::BTreeMap::from([
                    ("a".to_owned(), 1),
                    ("b".to_owned(), 5),
                ]))
                .note(Some("from the subgraph".to_owned()))
                .gone(None::<String>)
                .hits(2u64)
        })
        .add_sequence([START, "tag", END])
        .compile(Compile::new())
        .unwrap();
    let graph = outer_of(inner);
    let input = Tags {
        tags: ["b".to_owned()].into(),
        seen: [("b".to_owned(), 1)].into(),
        gone: Some("before".to_owned()),
        ..Tags::default()
    };
    let done = graph
        .invoke(input, &RunConfig::thread("t"))
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.tags, ["a".to_owned(), "b".to_owned()].into());
    assert_eq!(done.seen, [("a".to_owned(), 1), ("b".to_owned(), 5)].into());
    assert_eq!(done.note.as_deref(), Some("from the subgraph"));
    assert_eq!(done.gone, None);
    assert_eq!(done.hits, 2);
}

/// A number stored as a string in the state's serde form.
mod as_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(n: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&n.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Ticketed {
    #[serde(with = "as_text")]
    #[schemars(with = "String")]
    id: u64,
    #[reducer(append)]
    log: Vec<String>,
}

#[tokio::test]
async fn a_shared_state_subgraph_sets_a_field_stored_through_serde_with() {
    let inner = Graph::<Ticketed>::new("inner")
        .add_node("assign", |_: &Ticketed| {
            TicketedUpdate::default()
                .id(42u64)
                .log(vec!["assigned".to_owned()])
        })
        .add_sequence([START, "assign", END])
        .compile(Compile::new())
        .unwrap();
    let graph = outer_of(inner);
    let done = graph
        .invoke(Ticketed::default(), &RunConfig::thread("t"))
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.id, 42);
    assert_eq!(done.log, ["assigned"]);
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Timed {
    #[reducer(add)]
    spent: std::time::Duration,
}

/// A shared-state subgraph adds to a `Duration` add channel: the parent
/// gets the time added. (The net update took only JSON numbers, so the
/// node failed with `InvalidUpdate`.)
#[tokio::test]
async fn a_shared_state_subgraph_adds_to_a_duration() {
    use std::time::Duration;
    let inner = Graph::<Timed>::new("inner")
        .add_node("work", |_: &Timed| {
            TimedUpdate::default().spent(Duration::from_millis(1500))
        })
        .add_sequence([START, "work", END])
        .compile(Compile::new())
        .unwrap();
    let graph = outer_of(inner);
    let start = Timed {
        spent: Duration::from_secs(2),
    };
    let done = graph
        .invoke(start, &RunConfig::thread("t"))
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.spent, Duration::from_millis(3500));
}

#[tokio::test]
async fn a_completed_subgraph_stores_nothing_under_exit_durability() {
    // Under `exit` only the run's last checkpoint is stored: a subgraph
    // that completes leaves nothing under a namespace that hangs off a
    // parent checkpoint never stored.
    let inner = Graph::<Notes>::new("inner")
        .add_node("search", |_: &Notes| note("found"))
        .add_node("sum_up", |_: &Notes| note("summed"))
        .add_sequence([START, "search", "sum_up", END])
        .compile(Compile::new())
        .unwrap();
    let saver = memory();
    let graph = Graph::<Notes>::new("outer")
        .add_node("plan", |_: &Notes| note("planned"))
        .add_subgraph("research", inner)
        .add_node("write", |_: &Notes| note("written"))
        .add_sequence([START, "plan", "research", "write", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let config = RunConfig::thread("exit").durability(Durability::Exit);
    let done = graph
        .invoke(Notes::default(), &config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.lines, ["planned", "found", "summed", "written"]);
    let stored = weaver_tests::subgraphs::namespaces(&saver, "exit").await;
    assert_eq!(stored, [String::new()].into(), "only the root namespace");
    // Under `sync` the subgraph's checkpoints stay, under its task's
    // namespace, which a stored parent checkpoint reaches.
    let sync = RunConfig::thread("sync").durability(Durability::Sync);
    graph.invoke(Notes::default(), &sync).await.unwrap();
    let stored = weaver_tests::subgraphs::namespaces(&saver, "sync").await;
    assert_eq!(stored.len(), 2, "{stored:?}");
}

fn keep_max(current: &mut u64, new: u64) {
    *current = (*current).max(new);
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Peak {
    #[reducer(self::keep_max)]
    top: u64,
}

#[tokio::test]
async fn a_shared_state_subgraph_that_changes_a_custom_channel_is_refused() {
    let inner = Graph::<Peak>::new("inner")
        .add_node("raise", |_: &Peak| PeakUpdate::default().top(9u64))
        .add_sequence([START, "raise", END])
        .compile(Compile::new())
        .unwrap();
    let graph = outer_of(inner);
    let err = graph
        .invoke(Peak::default(), &RunConfig::thread("t"))
        .await
        .unwrap_err();
    let Error::NodeFailed { node, source } = &err else {
        panic!("not a node failure: {err:?}");
    };
    assert_eq!(node, "inner");
    match source.downcast_ref::<Error>() {
        Some(Error::InvalidUpdate { channel, reason }) => {
            assert_eq!(channel, "top");
            assert!(reason.contains("add_subgraph_with"), "{reason}");
        }
        other => panic!("not an invalid update: {other:?}"),
    }
}

#[tokio::test]
async fn a_subgraph_over_another_state_is_mapped_both_ways() {
    let inner = outline_only(None);
    let graph = Graph::<Outer>::new("outer")
        .add_subgraph_with(
            "draft",
            inner,
            |s: &Outer| Draft {
                topic: s.topic.clone(),
                ..Draft::default()
            },
            |done: Draft| OuterUpdate::default().text(done.text),
        )
        .add_sequence([START, "draft", END])
        .compile(Compile::new().checkpointer_arc(memory()))
        .unwrap();
    let out = graph
        .invoke(topic(), &RunConfig::thread("t"))
        .await
        .unwrap();
    assert_eq!(out.complete().unwrap().text, "all about rust");
}

#[tokio::test]
async fn get_state_shows_the_paused_subgraphs_in_memory() {
    subgraphs::get_state_shows_the_paused_subgraphs(memory()).await;
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Ticket {
    urgent: bool,
    #[reducer(append)]
    log: Vec<String>,
    route: String,
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Case {
    urgent: bool,
    label: String,
}

/// A case graph whose `decide` sends urgent cases to the parent's `human`
/// with `update`.
fn case_graph(update: serde_json::Value) -> CompiledGraph<Case> {
    Graph::<Case>::new("case")
        .add_node("classify", |s: &Case| {
            CaseUpdate::default().label(if s.urgent { "urgent" } else { "routine" }.to_owned())
        })
        .add_node("decide", move |s: &Case| {
            if s.urgent {
                return Err(Command::parent(update.clone()).goto("human").into());
            }
            Ok::<_, NodeError>(CaseUpdate::default())
        })
        .add_sequence([START, "classify", "decide", END])
        .compile(Compile::new())
        .unwrap()
}

fn help_desk(case: CompiledGraph<Case>) -> CompiledGraph<Ticket> {
    Graph::<Ticket>::new("help_desk")
        .add_subgraph_with(
            "triage",
            case,
            |t: &Ticket| Case {
                urgent: t.urgent,
                ..Case::default()
            },
            |done: Case| TicketUpdate::default().route(done.label),
        )
        .add_node("human", |_: &Ticket| {
            TicketUpdate::default().log(vec!["human".to_owned()])
        })
        .add_node("auto", |_: &Ticket| {
            TicketUpdate::default().log(vec!["auto".to_owned()])
        })
        .add_edge(START, "triage")
        .add_edge("triage", "auto")
        .add_destinations("triage", ["human"])
        .add_edge("human", END)
        .add_edge("auto", END)
        .compile(Compile::new().checkpointer_arc(memory()))
        .unwrap()
}

#[tokio::test]
async fn a_subgraph_node_updates_the_parent_and_goes_to_its_node() {
    let update = serde_json::json!({ "route": "escalated", "log": ["triaged"] });
    let graph = help_desk(case_graph(update));
    let urgent = Ticket {
        urgent: true,
        ..Ticket::default()
    };
    let done = graph
        .invoke(urgent, &RunConfig::thread("urgent"))
        .await
        .unwrap();
    let done = done.complete().unwrap();
    // The parent command is the triage node's result: its update, and its
    // goto beside the static edge.
    assert_eq!(done.route, "escalated");
    assert_eq!(done.log, ["triaged", "auto", "human"]);
    // Without a parent command, the mapped output is the update.
    let routine = graph
        .invoke(Ticket::default(), &RunConfig::thread("routine"))
        .await
        .unwrap();
    let routine = routine.complete().unwrap();
    assert_eq!(routine.route, "routine");
    assert_eq!(routine.log, ["auto"]);
}

#[tokio::test]
async fn a_parent_command_with_no_parent_or_a_wrong_update_is_an_error() {
    let case = case_graph(serde_json::json!({ "route": 5 }));
    let urgent = Case {
        urgent: true,
        ..Case::default()
    };
    let err = case
        .invoke(urgent, &RunConfig::default())
        .await
        .unwrap_err();
    match &err {
        Error::ParentCommand { node, goto, update } => {
            assert_eq!(node, "decide");
            assert_eq!(goto, &["human"]);
            assert_eq!(update, &serde_json::json!({ "route": 5 }));
        }
        other => panic!("not a parent command: {other:?}"),
    }
    // The parent cannot decode the update: its node fails.
    let graph = help_desk(case);
    let ticket = Ticket {
        urgent: true,
        ..Ticket::default()
    };
    let err = graph
        .invoke(ticket, &RunConfig::thread("t"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::NodeFailed { node, .. } if node == "triage"),
        "{err:?}"
    );
    assert!(err.to_string().contains("cannot decode"), "{err}");
    // An update that is not a map of channels fails the node that sent it,
    // with the reason, whether or not the graph has a parent.
    let not_a_map = Graph::<Case>::new("case")
        .add_node("decide", |_: &Case| -> Result<CaseUpdate, NodeError> {
            Err(Command::parent(42).goto("human").into())
        })
        .add_sequence([START, "decide", END])
        .compile(Compile::new())
        .unwrap();
    let err = not_a_map
        .invoke(Case::default(), &RunConfig::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::NodeFailed { node, .. } if node == "decide"),
        "{err:?}"
    );
    assert!(err.to_string().contains("not an update"), "{err}");
    let err = help_desk(not_a_map)
        .invoke(Ticket::default(), &RunConfig::thread("t2"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not an update"), "{err}");
}

#[tokio::test]
async fn two_paused_subgraphs_are_answered_one_at_a_time_by_id() {
    let saver = memory();
    let line = |text: String| NotesUpdate::default().lines(vec![text]);
    let ask = |name: &'static str| {
        Graph::<Notes>::new(name)
            .add_node("work", move |_: &Notes| line("worked".to_owned()))
            .add_node("ask", move |_: &Notes, rt: &Runtime| {
                let answer = rt.interrupt(name)?;
                let answer = answer.as_str().unwrap_or_default();
                Ok::<_, NodeError>(line(format!("{name}: {answer}")))
            })
            .add_sequence([START, "work", "ask", END])
            .compile(Compile::new())
            .unwrap()
    };
    let graph = Graph::<Notes>::new("pair")
        .add_subgraph("left", ask("left"))
        .add_subgraph("right", ask("right"))
        .add_edge(START, "left")
        .add_edge(START, "right")
        .add_edge("left", END)
        .add_edge("right", END)
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap();
    let config = RunConfig::thread("pair");
    let out = graph.invoke(Notes::default(), &config).await.unwrap();
    let asked = out.interrupts().to_vec();
    assert_eq!(asked.len(), 2, "{out:?}");
    let id_of = |value: &str| {
        asked
            .iter()
            .find(|i| i.value == value)
            .map(|i| i.id.clone())
            .unwrap()
    };
    // One value for two pauses is ambiguous.
    let err = graph
        .resume(serde_json::json!("x"), &config)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::AmbiguousResume { pending: 2, .. }),
        "{err:?}"
    );
    // The right one first: the left subgraph pauses again, unanswered.
    let right = Resume::Map([(id_of("right"), serde_json::json!("r"))].into());
    let out = graph.resume(right, &config).await.unwrap();
    assert_eq!(out.interrupts().len(), 1, "{out:?}");
    assert_eq!(out.interrupts()[0].id, id_of("left"));
    let done = graph.resume(serde_json::json!("l"), &config).await.unwrap();
    let mut lines = done.complete().unwrap().lines;
    lines.sort();
    assert_eq!(lines, ["left: l", "right: r", "worked", "worked"]);
}

/// One subgraph paused at two interrupts (two of its nodes in one step)
/// is answered by one map holding both ids: the two answers land in the
/// parent task's one resume write, stored once, and the subgraph ends.
#[tokio::test]
async fn two_pauses_of_one_subgraph_are_answered_together() {
    let saver = memory();
    let line = |text: String| NotesUpdate::default().lines(vec![text]);
    let ask = |name: &'static str| {
        move |_: &Notes, rt: &Runtime| {
            let answer = rt.interrupt(name)?;
            let answer = answer.as_str().unwrap_or_default();
            Ok::<_, NodeError>(line(format!("{name}: {answer}")))
        }
    };
    let inner = Graph::<Notes>::new("inner")
        .add_node("left", ask("left"))
        .add_node("right", ask("right"))
        .add_edge(START, "left")
        .add_edge(START, "right")
        .add_edge("left", END)
        .add_edge("right", END)
        .compile(Compile::new())
        .unwrap();
    let graph = Graph::<Notes>::new("outer")
        .add_subgraph("sub", inner)
        .add_sequence([START, "sub", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap();
    let config = RunConfig::thread("both");
    let out = graph.invoke(Notes::default(), &config).await.unwrap();
    let asked = out.interrupts().to_vec();
    assert_eq!(asked.len(), 2, "{out:?}");
    let answers = Resume::Map(
        asked
            .iter()
            .map(|i| {
                (
                    i.id.clone(),
                    serde_json::json!(format!("{}!", i.value.as_str().unwrap())),
                )
            })
            .collect(),
    );
    let done = graph
        .resume(answers, &config)
        .await
        .unwrap_or_else(|e| panic!("both answers at once: {e}"));
    let mut lines = done.complete().unwrap().lines;
    lines.sort();
    assert_eq!(lines, ["left: left!", "right: right!"]);
}

/// A subgraph that runs `work` (counted in `worked`), then pauses at `ask`
/// and notes the answer.
fn work_then_ask(worked: Arc<std::sync::atomic::AtomicUsize>) -> CompiledGraph<Notes> {
    Graph::<Notes>::new("inner")
        .add_node("work", move |_: &Notes| {
            worked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            note("worked")
        })
        .add_node("ask", |_: &Notes, rt: &Runtime| {
            let answer = rt.interrupt("ok?")?;
            Ok::<_, NodeError>(note(&format!(
                "ask: {}",
                answer.as_str().unwrap_or_default()
            )))
        })
        .add_sequence([START, "work", "ask", END])
        .compile(Compile::new())
        .unwrap()
}

/// A thread paused inside a subgraph, then resumed by a release that
/// renamed the subgraph's node (`rename_node`): the subgraph goes on from
/// its pause (its finished node does not run again) and the answer
/// reaches it; `get_state_subgraphs` shows it, and a replay of the paused
/// checkpoint goes on from the pause too (both looked under the new name).
#[tokio::test]
async fn a_renamed_subgraph_node_resumes_its_paused_subgraph() {
    let saver = memory();
    let worked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let inner = work_then_ask(worked.clone());
    let before = Graph::<Notes>::new("outer")
        .add_subgraph("check", inner.clone())
        .add_sequence([START, "check", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let config = RunConfig::thread("renamed");
    let paused = before.invoke(Notes::default(), &config).await.unwrap();
    assert_eq!(paused.interrupts().len(), 1);
    let after = Graph::<Notes>::new("outer")
        .add_subgraph("review", inner)
        .add_sequence([START, "review", END])
        .compile(
            Compile::new()
                .checkpointer_arc(saver)
                .rename_node("check", "review"),
        )
        .unwrap();
    // The paused subgraph shows under the node's new name.
    the_paused_subgraph_goes_on(&after, &config, &worked).await;
}

/// A thread paused in [`work_then_ask`] as a subgraph, read and resumed by
/// `after` (a release that renamed the node running it): the paused
/// subgraph shows in `get_state_subgraphs`, the answer reaches it, its
/// finished node (counted in `worked`) does not run again, and replaying
/// the checkpoint taken at the pause pauses there again, running nothing.
async fn the_paused_subgraph_goes_on(
    after: &CompiledGraph<Notes>,
    config: &RunConfig,
    worked: &std::sync::atomic::AtomicUsize,
) {
    let shown = after.get_state_subgraphs(config).await.unwrap();
    let inner_state = shown.tasks[0]
        .subgraph
        .as_ref()
        .expect("the paused subgraph");
    assert_eq!(inner_state.interrupts[0].value, "ok?");
    let done = after
        .resume(serde_json::json!("yes"), config)
        .await
        .unwrap();
    let lines = done.complete().unwrap().lines;
    assert!(lines.contains(&"ask: yes".to_owned()), "{lines:?}");
    assert_eq!(
        worked.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "work ran again"
    );
    let history = after
        .get_state_history(config, History::default())
        .await
        .unwrap();
    let at_pause = history
        .iter()
        .find(|s| !s.interrupts.is_empty())
        .expect("the paused checkpoint");
    let replay = after.continue_run(&at_pause.config).await.unwrap();
    assert_eq!(replay.interrupts().len(), 1, "{replay:?}");
    assert_eq!(
        worked.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "work ran again in the replay"
    );
}

/// The outer graph of [`a_renamed_send_node_resumes_its_paused_subgraph`]:
/// a send to `name`, a send node running `inner` as its subgraph.
fn sending_to_subgraph(
    name: &'static str,
    inner: CompiledGraph<Notes>,
    compile: Compile,
) -> CompiledGraph<Notes> {
    Graph::<Notes>::new("outer")
        .add_send_node(name, move |p: &String, rt: &Runtime| {
            let call = rt.subgraph(&inner);
            let input = Notes {
                lines: vec![p.clone()],
                ..Notes::default()
            };
            async move { Ok::<_, NodeError>(NotesUpdate::from(call.invoke(input).await?)) }
        })
        .add_conditional_edges(
            START,
            move |_: &Notes| vec![weaver::Send::new(name, "sent".to_owned())],
            [name],
        )
        .add_edge(name, END)
        .compile(compile)
        .unwrap()
}

/// A thread paused inside the subgraph of a send's task, then resumed by a
/// release that renamed the send node: the subgraph goes on from its pause
/// (its finished node does not run again), `get_state_subgraphs` shows
/// it, and a replay of the paused checkpoint goes on from the pause too.
#[tokio::test]
async fn a_renamed_send_node_resumes_its_paused_subgraph() {
    let saver = memory();
    let worked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let inner = work_then_ask(worked.clone());
    let before = sending_to_subgraph(
        "check",
        inner.clone(),
        Compile::new().checkpointer_arc(saver.clone()),
    );
    let config = RunConfig::thread("renamed-send");
    let paused = before.invoke(Notes::default(), &config).await.unwrap();
    assert_eq!(paused.interrupts().len(), 1, "{paused:?}");
    let after = sending_to_subgraph(
        "review",
        inner,
        Compile::new()
            .checkpointer_arc(saver)
            .rename_node("check", "review"),
    );
    the_paused_subgraph_goes_on(&after, &config, &worked).await;
}

/// `outer` running, at `depth` 1 or 2, a subgraph that runs `a` (counted
/// in `ran_a`), stops before `b` (`interrupt_before`), then runs `b`.
fn stopping_before_b(
    depth: u32,
    ran_a: Arc<std::sync::atomic::AtomicUsize>,
) -> CompiledGraph<Notes> {
    let inner = Graph::<Notes>::new("inner")
        .add_node("a", move |_: &Notes| {
            ran_a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            note("a")
        })
        .add_node("b", |_: &Notes| note("b"))
        .add_sequence([START, "a", "b", END])
        .compile(
            Compile::new()
                .checkpointer_arc(memory())
                .interrupt_before(["b"]),
        )
        .unwrap();
    let mid = if depth == 2 {
        Graph::<Notes>::new("mid")
            .add_subgraph("deep", inner)
            .add_sequence([START, "deep", END])
            .compile(Compile::new())
            .unwrap()
    } else {
        inner
    };
    Graph::<Notes>::new("outer")
        .add_subgraph("mid", mid)
        .add_sequence([START, "mid", END])
        .compile(Compile::new().checkpointer_arc(memory()))
        .unwrap()
}

/// A static stop inside a subgraph is passed by `continue_run` at any
/// depth, as at the top level: two levels deep, the stop is stored one
/// level up as the pause of the task that runs the inner subgraph.
#[tokio::test]
async fn a_static_stop_at_any_depth_is_passed_by_continue_run() {
    for depth in [1, 2] {
        let outer = stopping_before_b(depth, Arc::default());
        let config = RunConfig::thread("t");
        let out = outer.invoke(Notes::default(), &config).await.unwrap();
        assert!(out.is_interrupted(), "depth {depth}: {out:?}");
        let done = outer.continue_run(&config).await.unwrap();
        let done = done
            .complete()
            .unwrap_or_else(|e| panic!("depth {depth}: continue_run passes the stop: {e}"));
        assert_eq!(done.lines, ["a", "b"], "depth {depth}");
    }
}

/// A shared-state subgraph's merge map is written by its net change (the
/// entries it added or changed), so a sibling's write to another entry in
/// the same step stands, whichever merges last.
#[tokio::test]
async fn a_shared_state_subgraph_merges_only_the_entries_it_changed() {
    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Map {
        #[reducer(merge)]
        m: std::collections::BTreeMap<String, String>,
    }
    let set = |k: &str, v: &str| {
        MapUpdate::default().m(std::collections::BTreeMap::from([(
            k.to_owned(),
            v.to_owned(),
        )]))
    };
    let inner = Graph::<Map>::new("inner")
        .add_node("adds", move |_: &Map| set("x", "1"))
        .add_sequence([START, "adds", END])
        .compile(Compile::new())
        .unwrap();
    let g = Graph::<Map>::new("outer")
        .add_node("a_sibling", move |_: &Map| set("k", "new"))
        .add_subgraph("z_sub", inner)
        .add_edge(START, "a_sibling")
        .add_edge(START, "z_sub")
        .add_edge("a_sibling", END)
        .add_edge("z_sub", END)
        .compile(Compile::new().checkpointer_arc(memory()))
        .unwrap();
    let start = Map {
        m: [("k".to_owned(), "old".to_owned())].into(),
    };
    let done = g
        .invoke(start, &RunConfig::thread("t"))
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.m.get("k").map(String::as_str), Some("new"));
    assert_eq!(done.m.get("x").map(String::as_str), Some("1"));
}

/// Thread `t` of a graph whose one node is a subgraph of six steps, run
/// (paused at the subgraph's last node `ask` when `pause`); with the saver,
/// the graph and how many checkpoints the root namespace holds.
async fn run_long_subgraph(pause: bool) -> (Arc<dyn Saver>, CompiledGraph<Draft>, usize) {
    use weaver::checkpoint::ListFilter;
    let mut inner = Graph::<Draft>::new("long");
    let mut sequence = vec![START];
    for s in ["s1", "s2", "s3", "s4", "s5", "s6"] {
        inner = inner.add_node(s, move |_: &Draft| DraftUpdate::default().text(s));
        sequence.push(s);
    }
    if pause {
        inner = inner.add_node("ask", |_: &Draft, rt: &Runtime| {
            let answer = rt.interrupt("go on?")?;
            Ok::<_, NodeError>(DraftUpdate::default().verdict(answer.to_string()))
        });
        sequence.push("ask");
    }
    sequence.push(END);
    let inner = inner
        .add_sequence(sequence)
        .compile(Compile::new())
        .unwrap();
    let saver = memory();
    let outer = Graph::<Draft>::new("outer")
        .add_subgraph("long", inner)
        .add_sequence([START, "long", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let out = outer
        .invoke(Draft::default(), &RunConfig::thread("t"))
        .await
        .unwrap();
    assert_eq!(out.interrupts().len(), usize::from(pause));
    let root = saver
        .list(&ListFilter::thread("t").ns(""))
        .await
        .unwrap()
        .len();
    (saver, outer, root)
}

/// A fork whose subgraph namespace is past its limits fails and leaves no
/// part of the fork behind (the root namespace, copied first, is removed).
#[tokio::test]
async fn a_fork_whose_subgraph_is_too_long_leaves_nothing() {
    use weaver::checkpoint::{CheckpointRef, ForkOptions, ListFilter};
    let (saver, outer, root) = run_long_subgraph(true).await;
    let config = RunConfig::thread("t");
    let all = saver.list(&ListFilter::thread("t")).await.unwrap().len();
    assert!(all - root > root, "the subgraph's namespace is the longer");
    let head = outer.get_state(&config).await.unwrap();
    let at = CheckpointRef::latest("t").at(head.config.get_checkpoint_id().unwrap());
    let options = ForkOptions::default().max_checkpoints(root);
    let forked = saver.fork_at(&at, "branch", options).await;
    assert!(
        matches!(forked, Err(Error::LimitExceeded { .. })),
        "{forked:?}"
    );
    assert!(saver.thread_info("branch").await.unwrap().is_none());
}

/// A fork copies only the subgraphs of the forked checkpoint's tasks: a
/// subgraph that finished in an earlier step is history, and its length
/// does not count against the fork's bounds.
#[tokio::test]
async fn a_fork_leaves_finished_subgraphs_behind() {
    use weaver::checkpoint::{CheckpointRef, ForkOptions, ListFilter};
    let (saver, outer, root) = run_long_subgraph(false).await;
    let config = RunConfig::thread("t");
    let head = outer.get_state(&config).await.unwrap();
    let at = CheckpointRef::latest("t").at(head.config.get_checkpoint_id().unwrap());
    let options = ForkOptions::default().max_checkpoints(root);
    saver.fork_at(&at, "branch", options).await.unwrap();
    let copied = saver.list(&ListFilter::thread("branch")).await.unwrap();
    assert_eq!(copied.len(), root, "only the root namespace: {copied:?}");
}

/// A node renamed by two releases (`check` to `verify` to `review`, both
/// mapped): a subgraph paused under the first name goes on from its pause
/// whichever of the renames is looked at first. (One older name was picked,
/// in the renames map's order, and the pause under the other was missed.)
#[tokio::test]
async fn a_node_renamed_twice_resumes_its_paused_subgraph() {
    let worked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let inner = work_then_ask(worked.clone());
    for round in 0..8 {
        let saver = memory();
        let before = Graph::<Notes>::new("outer")
            .add_subgraph("check", inner.clone())
            .add_sequence([START, "check", END])
            .compile(Compile::new().checkpointer_arc(saver.clone()))
            .unwrap();
        let config = RunConfig::thread("renamed");
        worked.store(0, std::sync::atomic::Ordering::SeqCst);
        before.invoke(Notes::default(), &config).await.unwrap();
        let after = Graph::<Notes>::new("outer")
            .add_subgraph("review", inner.clone())
            .add_sequence([START, "review", END])
            .compile(
                Compile::new()
                    .checkpointer_arc(saver)
                    .rename_node("verify", "review")
                    .rename_node("check", "review"),
            )
            .unwrap();
        let done = after
            .resume(serde_json::json!("yes"), &config)
            .await
            .unwrap();
        assert!(done.complete().is_ok(), "round {round}");
        assert_eq!(
            worked.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "round {round}: work ran again"
        );
    }
}

/// Replaying a parent checkpoint taken while its subgraph was paused at the
/// subgraph's own static stop (`interrupt_before`), at any depth: the
/// subgraph goes on from its checkpoint at the stop (its finished node does
/// not run again) and passes the stop, as `continue_run` does. (The stop
/// is recorded only in the parent's task, so the replay did not find where
/// the subgraph stopped and ran it from its start.)
#[tokio::test]
async fn replaying_a_static_stop_in_a_subgraph_goes_on_from_it() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    for depth in [1, 2] {
        let ran_a = Arc::new(AtomicUsize::new(0));
        let outer = stopping_before_b(depth, ran_a.clone());
        let config = RunConfig::thread("t");
        let out = outer.invoke(Notes::default(), &config).await.unwrap();
        assert!(out.is_interrupted(), "depth {depth}: {out:?}");
        let done = outer.continue_run(&config).await.unwrap();
        assert_eq!(done.complete().unwrap().lines, ["a", "b"]);
        assert_eq!(ran_a.load(Ordering::SeqCst), 1);

        let history = outer
            .get_state_history(&config, History::default())
            .await
            .unwrap();
        let paused = history
            .iter()
            .find(|s| !s.interrupts.is_empty())
            .expect("the checkpoint the subgraph stopped at");
        let replay = outer.continue_run(&paused.config).await.unwrap();
        assert_eq!(
            ran_a.load(Ordering::SeqCst),
            1,
            "depth {depth}: the subgraph's finished node ran again"
        );
        let replay = replay
            .complete()
            .unwrap_or_else(|e| panic!("depth {depth}: the replay passes the stop: {e}"));
        assert_eq!(replay.lines, ["a", "b"], "depth {depth}");
    }
}

/// A subgraph's own static stop asks nothing, at any depth, as one at the
/// top level: a resume with a value is refused (`NoPendingInterrupt`) and
/// nothing runs; a `null` resume goes on. (The value was taken and
/// dropped.)
#[tokio::test]
async fn a_value_for_a_static_stop_in_a_subgraph_is_refused() {
    for depth in [1, 2] {
        let outer = stopping_before_b(depth, Arc::default());
        let config = RunConfig::thread("t");
        let out = outer.invoke(Notes::default(), &config).await.unwrap();
        let stop = out.interrupts()[0].id.clone();
        let refused = outer.resume(serde_json::json!("x"), &config).await;
        assert!(
            matches!(refused, Err(Error::NoPendingInterrupt { .. })),
            "depth {depth}: {refused:?}"
        );
        let by_id = Resume::Map([(stop, serde_json::json!("x"))].into_iter().collect());
        let refused = outer.resume(by_id, &config).await;
        assert!(
            matches!(refused, Err(Error::NoPendingInterrupt { .. })),
            "depth {depth}: {refused:?}"
        );
        let done = outer
            .resume(serde_json::Value::Null, &config)
            .await
            .unwrap();
        assert_eq!(done.complete().unwrap().lines, ["a", "b"], "depth {depth}");
    }
}

#[tokio::test]
async fn a_replay_that_failed_first_still_resumes_the_subgraph_at_its_pause_in_memory() {
    for depth in [subgraphs::Depth::One, subgraphs::Depth::Two] {
        subgraphs::a_replay_that_failed_first_still_resumes_the_subgraph_at_its_pause(
            memory(),
            depth,
        )
        .await;
    }
}

/// A subgraph's checkpoints record, as `metadata.parents`, the checkpoint
/// of each namespace above theirs its task started from (LangGraph's
/// `parents`), at any depth. (The map was always empty.)
#[tokio::test]
async fn subgraph_checkpoints_name_their_parents() {
    use weaver::checkpoint::ListFilter;
    let saver: Arc<dyn weaver::Saver> = Arc::new(InMemorySaver::new());
    let innermost = Graph::<Draft>::new("innermost")
        .add_node("write", |_: &Draft| DraftUpdate::default())
        .add_sequence([START, "write", END])
        .compile(Compile::new())
        .unwrap();
    let inner = Graph::<Draft>::new("inner")
        .add_node("deeper", move |s: &Draft, rt: &Runtime| {
            let call = rt.subgraph(&innermost);
            let input = s.clone();
            async move {
                call.invoke(input).await?;
                Ok::<_, NodeError>(DraftUpdate::default())
            }
        })
        .add_sequence([START, "deeper", END])
        .compile(Compile::new())
        .unwrap();
    let outer = Graph::<Draft>::new("outer")
        .add_node("call", move |s: &Draft, rt: &Runtime| {
            let call = rt.subgraph(&inner);
            let input = s.clone();
            async move {
                call.invoke(input).await?;
                Ok::<_, NodeError>(DraftUpdate::default())
            }
        })
        .add_sequence([START, "call", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let config = RunConfig::thread("t");
    outer.invoke(Draft::default(), &config).await.unwrap();
    let root = saver.list(&ListFilter::thread("t").ns("")).await.unwrap();
    let started = root
        .iter()
        .find(|t| t.metadata.step == 0)
        .expect("the checkpoint the task started from");
    assert!(root.iter().all(|t| t.metadata.parents.is_empty()));
    let all = saver.list(&ListFilter::thread("t")).await.unwrap();
    let (mut one, mut two) = (0, 0);
    for t in all.iter().filter(|t| !t.config.checkpoint_ns.is_empty()) {
        let parents = &t.metadata.parents;
        assert_eq!(
            parents.get(""),
            Some(&started.checkpoint.id),
            "{:?}",
            t.config
        );
        match t.config.checkpoint_ns.matches('|').count() {
            0 => {
                one += 1;
                assert_eq!(parents.len(), 1, "{parents:?}");
            }
            _ => {
                two += 1;
                let outer_ns = t.config.checkpoint_ns.split('|').next().unwrap();
                assert!(parents.contains_key(outer_ns), "{parents:?}");
                assert_eq!(parents.len(), 2, "{parents:?}");
            }
        }
    }
    assert!(one > 0 && two > 0, "{one} {two}");
}
