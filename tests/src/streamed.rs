//! What nodes stream is never stored: one check, run on every saver.

use std::sync::Arc;

use futures_util::StreamExt;
use serde_json::json;
use weaver::checkpoint::ListFilter;
use weaver::{
    Compile, CompiledGraph, Durability, END, Graph, Input, MessageChunk, NodeError, Outcome,
    RunConfig, RunStream, Runtime, START, Saver, StreamEvent, StreamItem, StreamMode,
};

use crate::states::{Steps, StepsUpdate};

/// Strings only streamed events hold: none may reach the saver.
const MARKS: [&str; 3] = ["custom-mark-7f3a", "chunk-mark-91c2", "asking-mark-44d0"];

/// The modes every run of the check streams.
const ALL: [StreamMode; 6] = [
    StreamMode::Values,
    StreamMode::Updates,
    StreamMode::Custom,
    StreamMode::Messages,
    StreamMode::Tasks,
    StreamMode::Checkpoints,
];

/// START → [speak, ask] → END. `speak` streams a custom value and a message
/// chunk, then appends `said`; `ask` streams a custom value, then pauses
/// and sets `foo` to the answer.
fn graph(saver: Arc<dyn Saver>) -> CompiledGraph<Steps> {
    let speak = |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
        rt.stream().custom(json!({ "secret": MARKS[0] }))?;
        let chunk = MessageChunk::new(MARKS[1])
            .id(MARKS[1])
            .metadata(MARKS[1], MARKS[1]);
        rt.stream().message_chunk(chunk);
        Ok(StepsUpdate::default().bar(["said"]))
    };
    let ask = |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
        rt.stream().custom(MARKS[2])?;
        let answer = rt.interrupt("go on?")?;
        Ok(StepsUpdate::default().foo(answer.as_str().unwrap_or_default()))
    };
    Graph::<Steps>::new("streamed")
        .add_node("speak", speak)
        .add_node("ask", ask)
        .add_edge(START, "speak")
        .add_edge(START, "ask")
        .add_edge("speak", END)
        .add_edge("ask", END)
        .compile(Compile::new().checkpointer_arc(saver))
        .expect("valid graph")
}

/// The node events, updates and interrupts of `stream`, per node (`c` a
/// custom value, `m` a chunk, `u` an update, `i` a pause), and the result.
async fn by_node(
    mut stream: RunStream<Steps>,
) -> (Vec<(String, String)>, weaver::Result<Outcome<Steps>>) {
    let mut seen = Vec::new();
    while let Some(item) = stream.next().await {
        let (node, what) = match item {
            StreamItem::Event(StreamEvent::Custom { task, value }) => {
                (task.node, format!("c:{value}"))
            }
            StreamItem::Event(StreamEvent::Message { task, chunk }) => {
                (task.node, format!("m:{}", chunk.content))
            }
            StreamItem::Event(StreamEvent::Update { node, .. }) => (node, "u".to_owned()),
            StreamItem::Event(StreamEvent::Interrupted(i)) => (i[0].node.clone(), "i".to_owned()),
            StreamItem::Event(_) => continue,
            StreamItem::Done(result) => return (seen, result),
        };
        seen.push((node, what));
    }
    panic!("the stream ended without Done after {seen:?}");
}

/// What `seen` holds of `node`, in order.
fn of(seen: &[(String, String)], node: &str) -> Vec<String> {
    seen.iter()
        .filter(|(n, _)| n == node)
        .map(|(_, what)| what.clone())
        .collect()
}

/// Runs the graph streamed in every mode under each durability, pausing in
/// `ask` and resuming, then reads every checkpoint, metadata and pending
/// write of the thread back from `saver`: none holds what was streamed. On
/// resume `speak`, finished before the pause, is replayed from its stored
/// writes without running: its update is streamed again, its custom value
/// and chunk are not (they were never stored); `ask` runs again from its
/// start and streams its value again.
pub async fn streamed_events_are_never_stored(saver: Arc<dyn Saver>) {
    let graph = graph(saver.clone());
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        let thread = format!("streamed-{durability:?}");
        let config = RunConfig::thread(&thread).durability(durability);
        let (seen, result) = by_node(graph.stream_with_modes(Steps::default(), &config, ALL)).await;
        assert!(result.unwrap().is_interrupted(), "{durability:?}");
        let custom = format!("c:{}", json!({ "secret": MARKS[0] }));
        let chunk = format!("m:{}", MARKS[1]);
        assert_eq!(
            of(&seen, "speak"),
            [custom, chunk, "u".into()],
            "{durability:?}"
        );
        let asking = format!("c:{}", json!(MARKS[2]));
        assert_eq!(
            of(&seen, "ask"),
            [asking.clone(), "i".into()],
            "{durability:?}"
        );

        let resume = Input::Resume(json!("yes").into());
        let (seen, result) = by_node(graph.stream_with_modes(resume, &config, ALL)).await;
        let end = result.unwrap().complete().unwrap();
        assert_eq!(
            (end.foo.as_str(), end.bar),
            ("yes", vec!["said".to_owned()])
        );
        assert_eq!(of(&seen, "speak"), ["u"], "{durability:?}: replayed");
        assert_eq!(of(&seen, "ask"), [asking, "u".into()], "{durability:?}");

        let stored = saver.list(&ListFilter::thread(&thread)).await.unwrap();
        assert!(!stored.is_empty(), "{durability:?}");
        let dump = format!("{stored:?}");
        // The dump holds what the thread stored: the values, the pending
        // writes (the pause) and the metadata.
        for kept in ["said", "yes", "go on?", "source"] {
            assert!(
                dump.contains(kept),
                "{durability:?}: `{kept}` not in {dump}"
            );
        }
        for mark in MARKS {
            assert!(
                !dump.contains(mark),
                "{durability:?}: `{mark}` stored: {dump}"
            );
        }
    }
}
