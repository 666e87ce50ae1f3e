//! Stream modes (LangGraph's `stream_mode="values" | "updates"`): each mode
//! yields only its events, interrupts and the result come in every mode, and
//! taking in the input is not streamed as a `__start__` node update.

use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::StreamExt;
use serde_json::json;
use weaver::prelude::*;
use weaver::{StreamEvent, StreamItem, StreamMode};
use weaver_tests::states::{Steps, StepsUpdate};

use crate::common::{collect, node_a, two_step};

const MODES: [StreamMode; 3] = [
    StreamMode::Values,
    StreamMode::Updates,
    StreamMode::ValuesAndUpdates,
];

#[tokio::test]
async fn each_stream_mode_yields_exactly_its_events_for_a_two_node_graph() {
    let graph = two_step(&InMemorySaver::new());
    let want = |mode| match mode {
        StreamMode::Values => "v0: v1:a v2:a,b",
        StreamMode::Updates => "u1:node_a u2:node_b",
        _ => "v0: u1:node_a v1:a u2:node_b v2:a,b",
    };
    for mode in MODES {
        let config = RunConfig::thread(format!("{mode:?}"));
        let (seen, result) = collect(graph.stream_with_mode(Steps::default(), &config, mode)).await;
        assert_eq!(seen.join(" "), want(mode), "{mode:?}");
        let end = result.unwrap().complete().unwrap();
        assert_eq!(
            (end.foo.as_str(), end.bar),
            ("b", vec!["a".into(), "b".into()])
        );
    }
    // `stream` keeps yielding both.
    let config = RunConfig::thread("default");
    let (seen, _) = collect(graph.stream(Steps::default(), &config)).await;
    assert_eq!(seen.join(" "), want(StreamMode::ValuesAndUpdates));
    assert_eq!(StreamMode::default(), StreamMode::ValuesAndUpdates);
}

/// START → node_a → node_b → END, where `node_b` pauses: statically before
/// it runs (`"before"`), or by calling `Runtime::interrupt` (`"node"`). It
/// appends the answer, `"?"` when it did not ask.
fn pausing(how: &'static str) -> CompiledGraph<Steps> {
    let node_b = move |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
        let answer = match how {
            "node" => rt.interrupt("go on?")?,
            _ => json!("?"),
        };
        Ok(StepsUpdate::default().bar([answer.as_str().unwrap_or("?")]))
    };
    let graph = Graph::<Steps>::new("Pause")
        .add_node("node_a", node_a)
        .add_node("node_b", node_b)
        .add_sequence([START, "node_a", "node_b", END]);
    let compile = Compile::new().checkpointer(InMemorySaver::new());
    match how {
        "before" => graph.compile(compile.interrupt_before(["node_b"])),
        _ => graph.compile(compile),
    }
    .unwrap()
}

#[tokio::test]
async fn an_interrupted_run_yields_interrupted_then_done_in_every_mode() {
    for how in ["before", "node"] {
        let graph = pausing(how);
        for mode in MODES {
            let config = RunConfig::thread(format!("{how}-{mode:?}"));
            let (seen, result) =
                collect(graph.stream_with_mode(Steps::default(), &config, mode)).await;
            let want = match mode {
                StreamMode::Values => "v0: v1:a i:node_b",
                StreamMode::Updates => "u1:node_a i:node_b",
                _ => "v0: u1:node_a v1:a i:node_b",
            };
            // `collect` checks that `Done` is the last item.
            assert_eq!(seen.join(" "), want, "{how}/{mode:?}");
            let outcome = result.unwrap();
            assert_eq!(outcome.interrupts()[0].node, "node_b", "{how}/{mode:?}");

            // Resuming streams in the same mode.
            let input = match how {
                "before" => Input::Continue,
                _ => Input::Resume(json!("yes").into()),
            };
            let (seen, result) = collect(graph.stream_with_mode(input, &config, mode)).await;
            let bar = if how == "before" { "a,?" } else { "a,yes" };
            // A run that goes on from a checkpoint first streams the state
            // it starts from (LangGraph does the same on resume).
            let want = match mode {
                StreamMode::Values => format!("v1:a v2:{bar}"),
                StreamMode::Updates => "u2:node_b".to_owned(),
                _ => format!("v1:a u2:node_b v2:{bar}"),
            };
            assert_eq!(seen.join(" "), want, "{how}/{mode:?} resumed");
            assert!(!result.unwrap().is_interrupted(), "{how}/{mode:?}");
        }
    }
}

#[tokio::test]
async fn the_input_is_not_streamed_as_a_start_update() {
    let graph = two_step(&InMemorySaver::new());
    let config = RunConfig::thread("s");
    // A fresh thread, a full state as input; then a thread with history, a
    // partial update as input.
    let inputs: [Input<Steps>; 2] = [
        Steps::default().into(),
        Input::update(StepsUpdate::default().foo("again")),
    ];
    for input in inputs {
        let mut stream = graph.stream(input, &config);
        let mut updates = Vec::new();
        while let Some(item) = futures_util::StreamExt::next(&mut stream).await {
            match item {
                StreamItem::Event(StreamEvent::Update { node, .. }) => updates.push(node),
                StreamItem::Event(_) => {}
                StreamItem::Done(result) => {
                    result.unwrap().complete().unwrap();
                }
            }
        }
        assert_eq!(updates, ["node_a", "node_b"]);
        assert!(!updates.iter().any(|n| n == START));
    }
}

/// How many times a [`Counted`] was cloned (only the [`Tally`] test uses it).
static TALLY_CLONES: AtomicUsize = AtomicUsize::new(0);

/// A channel value that counts its clones, to see when the engine copies
/// the state.
#[derive(Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Counted(u64);

impl Clone for Counted {
    fn clone(&self) -> Self {
        TALLY_CLONES.fetch_add(1, Ordering::SeqCst);
        Counted(self.0)
    }
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Tally {
    count: Counted,
}

#[tokio::test]
async fn an_updates_stream_does_not_copy_the_state_for_values_nobody_asked_for() {
    let graph = Graph::<Tally>::new("Tally")
        .add_node("one", |_: &Tally| TallyUpdate::default().count(Counted(1)))
        .add_node("two", |_: &Tally| TallyUpdate::default().count(Counted(2)))
        .add_sequence([START, "one", "two", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let clones = async |mode: Option<StreamMode>, thread: &str| {
        let config = RunConfig::thread(thread);
        let before = TALLY_CLONES.load(Ordering::SeqCst);
        let end = match mode {
            None => graph.invoke(Tally::default(), &config).await,
            Some(mode) => {
                let mut stream = graph.stream_with_mode(Tally::default(), &config, mode);
                let mut end = None;
                while let Some(item) = futures_util::StreamExt::next(&mut stream).await {
                    if let StreamItem::Done(result) = item {
                        end = Some(result);
                    }
                }
                end.unwrap()
            }
        };
        assert_eq!(end.unwrap().complete().unwrap().count, Counted(2));
        TALLY_CLONES.load(Ordering::SeqCst) - before
    };
    let invoked = clones(None, "invoke").await;
    // An update event copies its node's update (`one`'s, `two`'s), a values
    // event the state (after the input, `one`, `two`); a mode copies only
    // for the events it yields.
    let updates = clones(Some(StreamMode::Updates), "updates").await;
    assert_eq!(updates, invoked + 2, "updates");
    let values = clones(Some(StreamMode::Values), "values").await;
    assert_eq!(values, invoked + 3, "values");
    let both = clones(Some(StreamMode::ValuesAndUpdates), "both").await;
    assert_eq!(both, invoked + 5, "both");
}

#[tokio::test]
async fn a_refused_resume_streams_no_state() {
    // A resume the run refuses before it starts (nothing to answer, an
    // interrupt id nobody asked for, a resume of an older checkpoint) runs
    // nothing: the stream is its error alone, as when it was not streamed.
    let graph = pausing("node");
    let config = RunConfig::thread("refused");
    let (_, result) = collect(graph.stream(Steps::default(), &config)).await;
    assert!(result.unwrap().is_interrupted());
    let older = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap()[1]
        .config
        .clone();
    let refusals: [(Input<Steps>, &RunConfig); 3] = [
        (
            Input::Resume(
                [("nobody-asked".to_owned(), json!("x"))]
                    .into_iter()
                    .collect(),
            ),
            &config,
        ),
        (Input::Resume(json!("x").into()), &older),
        (Input::Resume(json!("x").into()), &config),
    ];
    for (i, (input, at)) in refusals.into_iter().enumerate() {
        if i == 2 {
            // Answered: nothing is left to resume.
            let (_, done) = collect(graph.stream(Input::Resume(json!("y").into()), &config)).await;
            assert!(!done.unwrap().is_interrupted());
        }
        for mode in MODES {
            let (seen, result) = collect(graph.stream_with_mode(input.clone(), at, mode)).await;
            assert!(result.is_err(), "{i}/{mode:?}: {result:?}");
            assert!(seen.is_empty(), "{i}/{mode:?}: {seen:?}");
        }
    }
}

#[tokio::test]
async fn a_replay_streams_the_replayed_checkpoints_state_first() {
    // Continue from an older checkpoint (after node_a, step 1): the stream
    // starts with that checkpoint's state and step, not the head's.
    let graph = two_step(&InMemorySaver::new());
    let config = RunConfig::thread("replay");
    let (_, result) = collect(graph.stream(Steps::default(), &config)).await;
    assert!(!result.unwrap().is_interrupted());
    let history = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let after_a = history
        .iter()
        .find(|s| s.metadata.as_ref().is_some_and(|m| m.step == 1))
        .unwrap()
        .config
        .clone();
    for mode in MODES {
        let (seen, result) = collect(graph.stream_with_mode(Input::Continue, &after_a, mode)).await;
        // The replay's fork is at step 2 (the replayed step + 1), node_b
        // runs at step 3.
        let want = match mode {
            StreamMode::Values => "v2:a v3:a,b",
            StreamMode::Updates => "u3:node_b",
            _ => "v2:a u3:node_b v3:a,b",
        };
        assert_eq!(seen.join(" "), want, "{mode:?}");
        assert!(!result.unwrap().is_interrupted());
    }
}

/// A value whose `Serialize` panics: user code the engine calls outside a
/// node body, when it stores a node's update.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
struct Fragile(u8);

impl Serialize for Fragile {
    fn serialize<Se: serde::Serializer>(&self, s: Se) -> Result<Se::Ok, Se::Error> {
        assert!(self.0 != 13, "Fragile(13) does not serialize");
        s.serialize_u8(self.0)
    }
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Brittle {
    v: Fragile,
}

#[tokio::test]
async fn a_stream_whose_run_panics_still_ends_with_done() {
    let graph = Graph::<Brittle>::new("brittle")
        .add_node("boom", |_: &Brittle| {
            BrittleUpdate::default().v(Fragile(13))
        })
        .add_sequence([START, "boom", END])
        .compile(Compile::new())
        .unwrap();
    let mut stream = graph.stream(Brittle::default(), &RunConfig::default());
    let mut done = None;
    while let Some(item) = stream.next().await {
        if let StreamItem::Done(result) = item {
            done = Some(result);
        }
    }
    let done = done.expect("the stream ended without Done");
    let failed = matches!(&done, Err(Error::NodeFailed { node, .. }) if node == "boom");
    assert!(failed, "{done:?}");
    // `invoke` reports the same typed error instead of panicking.
    let out = graph
        .invoke(Brittle::default(), &RunConfig::default())
        .await;
    assert!(matches!(out, Err(Error::NodeFailed { .. })), "{out:?}");
}

/// A value whose `Clone` panics: the engine clones the state outside any
/// node, router, reducer or `Serialize` it can catch.
#[derive(Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Touchy(u8);

impl Clone for Touchy {
    fn clone(&self) -> Self {
        assert!(self.0 != 13, "Touchy(13) does not clone");
        Touchy(self.0)
    }
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Fickle {
    v: Touchy,
}

#[tokio::test]
async fn a_stream_whose_task_panics_passes_the_panic_on() {
    use futures_util::FutureExt;
    let graph = Graph::<Fickle>::new("fickle")
        .add_node("touch", |_: &Fickle| FickleUpdate::default().v(Touchy(13)))
        .add_sequence([START, "touch", END])
        .compile(Compile::new())
        .unwrap();
    // `invoke` panics in its caller...
    let invoked =
        std::panic::AssertUnwindSafe(graph.invoke(Fickle::default(), &RunConfig::default()))
            .catch_unwind()
            .await;
    assert!(invoked.is_err(), "the state's Clone panics: {invoked:?}");
    // ...and a stream passes the run's panic on to its consumer, instead of
    // ending without `Done`.
    let streamed = std::panic::AssertUnwindSafe(async {
        let mut stream = graph.stream(Fickle::default(), &RunConfig::default());
        while let Some(item) = stream.next().await {
            if let StreamItem::Done(result) = item {
                return format!("Done({result:?})");
            }
        }
        "ended without Done".to_owned()
    })
    .catch_unwind()
    .await;
    let panic = streamed.expect_err("the run's panic reaches the consumer");
    let message = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(message.contains("Touchy(13) does not clone"), "{message}");
}

#[tokio::test]
async fn an_input_whose_serialize_panics_is_an_encode_error() {
    let graph = Graph::<Brittle>::new("brittle-input")
        .add_node("noop", |_: &Brittle| BrittleUpdate::default())
        .add_sequence([START, "noop", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("t");
    let out = graph.invoke(Brittle { v: Fragile(13) }, &config).await;
    assert!(matches!(out, Err(Error::Encode { .. })), "{out:?}");
    // Nothing was stored, and the thread takes a good input afterwards.
    let history = graph.get_state_history(&config, History::default()).await;
    assert!(history.unwrap().is_empty());
    graph.invoke(Brittle::default(), &config).await.unwrap();
}
