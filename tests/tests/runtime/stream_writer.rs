//! Streaming from inside nodes (`Runtime::stream`: custom values, message
//! chunks) and the custom, messages, tasks and checkpoints modes, alone and
//! several at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use weaver::graph::RunStream;
use weaver::prelude::*;
use weaver::{
    MessageChunk, StreamEvent, StreamItem, StreamMode, StreamModes, StreamWriter, TaskOutcome,
};
use weaver_tests::states::{Steps, StepsUpdate};

/// Every event of `stream`, then the result; fails if the stream ends
/// without `Done` or yields anything after it.
async fn events(
    mut stream: RunStream<Steps>,
) -> (Vec<StreamEvent<Steps>>, weaver::Result<Outcome<Steps>>) {
    let mut seen = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(e) => seen.push(e),
            StreamItem::Done(result) => {
                let rest = tokio::time::timeout(Duration::from_secs(5), stream.next()).await;
                assert!(matches!(rest, Ok(None)), "after Done: {rest:?}");
                return (seen, result);
            }
        }
    }
    panic!("the stream ended without Done after {seen:?}");
}

/// An event as a short string: `c`ustom, `m`essage, `u`pdate, `v`alues,
/// task `s`tart and `r`esult, chec`k`point, `i`nterrupted; with the step
/// and node where it has them.
fn short(e: &StreamEvent<Steps>) -> String {
    match e {
        StreamEvent::Custom { task, value } => format!("c{}:{}:{value}", task.step, task.node),
        StreamEvent::Message { task, chunk } => {
            format!("m{}:{}:{}", task.step, task.node, chunk.content)
        }
        StreamEvent::Update { step, node, .. } => format!("u{step}:{node}"),
        StreamEvent::Values { step, .. } => format!("v{step}"),
        StreamEvent::TaskStart { task, .. } => format!("s{}:{}", task.step, task.node),
        StreamEvent::TaskResult { task, result } => {
            let how = match result {
                TaskOutcome::Update(_) => "ok",
                TaskOutcome::Error(_) => "err",
                TaskOutcome::Interrupted(_) => "paused",
                _ => "other",
            };
            format!("r{}:{}:{how}", task.step, task.node)
        }
        StreamEvent::Checkpoint(c) => format!("k{}", c.metadata.step),
        StreamEvent::Interrupted(_) => "i".to_owned(),
        other => format!("unknown:{other:?}"),
    }
}

fn shorts(seen: &[StreamEvent<Steps>]) -> Vec<String> {
    seen.iter().map(short).collect()
}

/// A fake model: streams `tokens` one by one, a few ms apart, as chunks of
/// one message, then appends the whole text to `bar`.
async fn model(_: &Steps, rt: &Runtime) -> StepsUpdate {
    let mut text = String::new();
    for token in ["The ", "answer ", "is ", "42."] {
        tokio::time::sleep(Duration::from_millis(2)).await;
        rt.stream().message_chunk(
            MessageChunk::new(token)
                .id("msg-1")
                .metadata("model", "fake"),
        );
        text.push_str(token);
    }
    StepsUpdate::default().bar([text])
}

/// START → prepare → model → END; `prepare` streams a custom value.
fn chat(compile: Compile) -> CompiledGraph<Steps> {
    let prepare = |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
        rt.stream().custom(json!({ "stage": "prepared" }))?;
        Ok(StepsUpdate::default().foo("ready"))
    };
    Graph::<Steps>::new("chat")
        .add_node("prepare", prepare)
        .add_node("model", model)
        .add_sequence([START, "prepare", "model", END])
        .compile(compile)
        .unwrap()
}

#[tokio::test]
async fn chunks_arrive_in_order_before_the_update_tagged_with_their_task() {
    let graph = chat(Compile::new().checkpointer(InMemorySaver::new()));
    let config = RunConfig::thread("chunks");
    let modes = [StreamMode::Messages, StreamMode::Updates, StreamMode::Tasks];
    let (seen, result) = events(graph.stream_with_modes(Steps::default(), &config, modes)).await;
    let end = result.unwrap().complete().unwrap();
    assert_eq!(end.bar, ["The answer is 42."]);
    assert_eq!(
        shorts(&seen),
        [
            "s1:prepare",
            "r1:prepare:ok",
            "u1:prepare",
            "s2:model",
            "m2:model:The ",
            "m2:model:answer ",
            "m2:model:is ",
            "m2:model:42.",
            "r2:model:ok",
            "u2:model",
        ]
    );
    // Each chunk names the task that sent it: the one its start names.
    let started = seen.iter().find_map(|e| match e {
        StreamEvent::TaskStart { task, .. } if task.node == "model" => Some(task.clone()),
        _ => None,
    });
    let started = started.unwrap();
    assert_eq!((started.namespace.as_str(), started.step), ("", 2));
    assert!(!started.id.is_empty());
    for e in &seen {
        if let StreamEvent::Message { task, chunk } = e {
            assert_eq!(task, &started);
            assert_eq!(chunk.id.as_deref(), Some("msg-1"));
            assert_eq!(chunk.metadata["model"], "fake");
        }
    }
}

#[tokio::test]
async fn several_modes_at_once_yield_exactly_their_events_in_order() {
    let graph = chat(Compile::new().checkpointer(InMemorySaver::new()));
    let cases: [(StreamModes, &str); 4] = [
        (
            StreamModes::from([StreamMode::Custom, StreamMode::Messages]),
            r#"c1:prepare:{"stage":"prepared"} m2:model:The  m2:model:answer  m2:model:is  m2:model:42."#,
        ),
        (
            StreamMode::Custom.into(),
            r#"c1:prepare:{"stage":"prepared"}"#,
        ),
        (
            StreamModes::from(&[StreamMode::Values, StreamMode::Custom][..]),
            r#"v0 c1:prepare:{"stage":"prepared"} v1 v2"#,
        ),
        (
            [StreamMode::ValuesAndUpdates, StreamMode::Checkpoints]
                .into_iter()
                .collect(),
            "k-1 k0 v0 u1:prepare k1 v1 u2:model k2 v2",
        ),
    ];
    for (i, (modes, want)) in cases.into_iter().enumerate() {
        let config = RunConfig::thread(format!("modes-{i}"));
        let (seen, result) =
            events(graph.stream_with_modes(Steps::default(), &config, modes)).await;
        assert_eq!(shorts(&seen).join(" "), want, "{modes:?}");
        assert_eq!(result.unwrap().complete().unwrap().foo, "ready");
    }
    // No mode at all: only the result.
    let config = RunConfig::thread("none");
    let (seen, result) =
        events(graph.stream_with_modes(Steps::default(), &config, StreamModes::none())).await;
    assert!(seen.is_empty(), "{seen:?}");
    result.unwrap();
}

/// START → [p, q, r] → END; each streams three custom values naming itself,
/// yielding between them so the three interleave.
fn fan_out() -> CompiledGraph<Steps> {
    async fn emit(rt: &Runtime, name: &str) -> Result<StepsUpdate, NodeError> {
        for i in 0..3 {
            rt.stream().custom(json!({ "from": name, "i": i }))?;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(StepsUpdate::default().bar([name]))
    }
    async fn p(_: &Steps, rt: &Runtime) -> Result<StepsUpdate, NodeError> {
        emit(rt, "p").await
    }
    async fn q(_: &Steps, rt: &Runtime) -> Result<StepsUpdate, NodeError> {
        emit(rt, "q").await
    }
    async fn r(_: &Steps, rt: &Runtime) -> Result<StepsUpdate, NodeError> {
        emit(rt, "r").await
    }
    let mut graph = Graph::<Steps>::new("fan")
        .add_node("p", p)
        .add_node("q", q)
        .add_node("r", r);
    for n in ["p", "q", "r"] {
        graph = graph.add_edge(START, n).add_edge(n, END);
    }
    graph
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap()
}

#[tokio::test]
async fn parallel_nodes_in_one_step_each_tag_their_own_events() {
    let graph = fan_out();
    let config = RunConfig::thread("fan");
    let modes = [StreamMode::Custom, StreamMode::Tasks];
    let (seen, result) = events(graph.stream_with_modes(Steps::default(), &config, modes)).await;
    assert_eq!(result.unwrap().complete().unwrap().bar, ["p", "q", "r"]);
    let mut ids = BTreeMap::new();
    let mut values: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for e in &seen {
        match e {
            StreamEvent::TaskStart { task, .. } => {
                ids.insert(task.node.clone(), task.id.clone());
            }
            StreamEvent::Custom { task, value } => {
                assert_eq!(value["from"], task.node.as_str(), "{value}");
                assert_eq!(ids.get(&task.node), Some(&task.id), "started first");
                assert_eq!(task.step, 1);
                values
                    .entry(task.node.clone())
                    .or_default()
                    .push(value["i"].as_i64().unwrap());
            }
            _ => {}
        }
    }
    let want: BTreeMap<String, Vec<i64>> = ["p", "q", "r"]
        .into_iter()
        .map(|n| (n.to_owned(), vec![0, 1, 2]))
        .collect();
    assert_eq!(values, want);
    let distinct: std::collections::BTreeSet<_> = ids.values().collect();
    assert_eq!(distinct.len(), 3, "{ids:?}");
    // The three ran at once: their values interleave.
    let order: Vec<&str> = seen
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Custom { task, .. } => Some(task.node.as_str()),
            _ => None,
        })
        .collect();
    assert_ne!(&order[..3], ["p", "p", "p"], "{order:?}");
}

/// START → ok → [bad] → END where `bad` fails, or pauses.
fn failing(how: &'static str) -> CompiledGraph<Steps> {
    let bad = move |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
        rt.stream().custom("before")?;
        match how {
            "fail" => Err(NodeError::msg("the model is down")),
            _ => {
                rt.interrupt("retry?")?;
                Ok(StepsUpdate::default().foo("resumed"))
            }
        }
    };
    Graph::<Steps>::new("failing")
        .add_node("ok", |_: &Steps| StepsUpdate::default().foo("ok"))
        .add_node("bad", bad)
        .add_sequence([START, "ok", "bad", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap()
}

#[tokio::test]
async fn tasks_mode_streams_starts_results_errors_and_pauses() {
    let graph = failing("fail");
    let config = RunConfig::thread("fail");
    let modes = [StreamMode::Tasks, StreamMode::Custom];
    let (seen, result) = events(graph.stream_with_modes(Steps::default(), &config, modes)).await;
    assert!(
        matches!(&result, Err(Error::NodeFailed { node, .. }) if node == "bad"),
        "{result:?}"
    );
    assert_eq!(
        shorts(&seen),
        [
            "s1:ok",
            "r1:ok:ok",
            "s2:bad",
            r#"c2:bad:"before""#,
            "r2:bad:err"
        ]
    );
    let (start, end) = (&seen[2], &seen[4]);
    let (
        StreamEvent::TaskStart {
            task: started,
            input,
            payload,
        },
        StreamEvent::TaskResult { task, result },
    ) = (start, end)
    else {
        panic!("{seen:?}");
    };
    assert_eq!(input.foo, "ok", "the state the task ran on");
    assert_eq!(payload, &None, "not a send's task");
    assert_eq!(task, started);
    let TaskOutcome::Error(message) = result else {
        panic!("{result:?}")
    };
    assert!(message.contains("the model is down"), "{message}");
    // The task that succeeded carries its update.
    let StreamEvent::TaskResult {
        result: TaskOutcome::Update(update),
        ..
    } = &seen[1]
    else {
        panic!("{seen:?}");
    };
    assert_eq!(update.foo.as_deref(), Some("ok"));

    // A pause: its interrupt is the task's result; on resume the task
    // starts again (it runs from its start) and its value is streamed again.
    let graph = failing("pause");
    let config = RunConfig::thread("pause");
    let (seen, result) = events(graph.stream_with_modes(Steps::default(), &config, modes)).await;
    let interrupt = result.unwrap().interrupts()[0].clone();
    assert_eq!(
        shorts(&seen),
        [
            "s1:ok",
            "r1:ok:ok",
            "s2:bad",
            r#"c2:bad:"before""#,
            "r2:bad:paused",
            "i"
        ]
    );
    let StreamEvent::TaskResult {
        result: TaskOutcome::Interrupted(i),
        ..
    } = &seen[4]
    else {
        panic!("{seen:?}");
    };
    assert_eq!(i, &[interrupt]);
    let resume = Input::Resume(json!("go").into());
    let (seen, result) = events(graph.stream_with_modes(resume, &config, modes)).await;
    assert_eq!(result.unwrap().complete().unwrap().foo, "resumed");
    assert_eq!(shorts(&seen), ["s2:bad", r#"c2:bad:"before""#, "r2:bad:ok"]);
}

#[tokio::test]
async fn checkpoints_mode_streams_each_stored_checkpoint_as_history_lists_it() {
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        let graph = chat(Compile::new().checkpointer(InMemorySaver::new()));
        let config = RunConfig::thread("k").durability(durability);
        let (seen, result) =
            events(graph.stream_with_mode(Steps::default(), &config, StreamMode::Checkpoints))
                .await;
        result.unwrap();
        let streamed: Vec<_> = seen
            .iter()
            .map(|e| match e {
                StreamEvent::Checkpoint(c) => (**c).clone(),
                other => panic!("not asked for: {other:?}"),
            })
            .collect();
        let history = graph
            .get_state_history(&config, History::default())
            .await
            .unwrap();
        // Newest first in history; as stored in the stream.
        let stored_ids: Vec<_> = history
            .iter()
            .rev()
            .map(|s| s.config.get_checkpoint_id().unwrap().to_owned())
            .collect();
        let streamed_ids: Vec<_> = streamed
            .iter()
            .map(|c| c.checkpoint_id().to_owned())
            .collect();
        assert_eq!(streamed_ids, stored_ids, "{durability:?}");
        let want = if durability == Durability::Exit { 1 } else { 4 };
        assert_eq!(streamed.len(), want, "{durability:?}");
        for (c, s) in streamed.iter().zip(history.iter().rev()) {
            assert_eq!(c.namespace, "");
            assert_eq!(Some(&c.metadata), s.metadata.as_ref(), "{durability:?}");
            assert_eq!(c.next, s.next, "{durability:?}");
            assert_eq!(c.values, s.values, "{durability:?}");
            assert_eq!(c.commit_order, s.commit_order, "{durability:?}");
            let parent = |p: &Option<RunConfig>| {
                p.as_ref()
                    .and_then(|p| p.get_checkpoint_id().map(str::to_owned))
            };
            assert_eq!(parent(&c.parent_config), parent(&s.parent_config));
        }
        let last = streamed.last().unwrap();
        assert_eq!(last.values.bar, ["The answer is 42."]);
        assert!(last.next.is_empty());
    }
    // Without a checkpointer nothing is stored, and nothing streamed.
    let graph = chat(Compile::new());
    let (seen, result) = events(graph.stream_with_mode(
        Steps::default(),
        &RunConfig::default(),
        StreamMode::Checkpoints,
    ))
    .await;
    result.unwrap();
    assert!(seen.is_empty(), "{seen:?}");
}

/// How many times a [`Watched`] was serialized.
static SERIALIZED: AtomicUsize = AtomicUsize::new(0);

/// A custom value that counts its serializations.
struct Watched;

impl Serialize for Watched {
    fn serialize<Se: serde::Serializer>(&self, s: Se) -> Result<Se::Ok, Se::Error> {
        SERIALIZED.fetch_add(1, Ordering::SeqCst);
        s.serialize_str("watched")
    }
}

#[tokio::test]
async fn a_writer_nobody_listens_to_does_nothing() {
    let streaming = Arc::new(Mutex::new(Vec::new()));
    let seen_by_node = streaming.clone();
    let node = move |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
        let w = rt.stream();
        seen_by_node
            .lock()
            .unwrap()
            .push((w.streams_custom(), w.streams_messages()));
        w.custom(Watched)?;
        // Not streamed, a value JSON cannot hold is not looked at either.
        w.custom(f64::NAN)?;
        w.message_chunk("token");
        Ok(StepsUpdate::default().foo("done"))
    };
    let graph = Graph::<Steps>::new("quiet")
        .add_node("node", node)
        .add_sequence([START, "node", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let out = graph
        .invoke(Steps::default(), &RunConfig::thread("invoke"))
        .await;
    assert_eq!(out.unwrap().complete().unwrap().foo, "done");
    for (i, mode) in [
        StreamMode::ValuesAndUpdates,
        StreamMode::Tasks,
        StreamMode::Checkpoints,
    ]
    .into_iter()
    .enumerate()
    {
        let config = RunConfig::thread(format!("quiet-{i}"));
        let (seen, result) = events(graph.stream_with_mode(Steps::default(), &config, mode)).await;
        result.unwrap();
        let node_events = seen
            .iter()
            .filter(|e| matches!(e, StreamEvent::Custom { .. } | StreamEvent::Message { .. }));
        assert_eq!(node_events.count(), 0, "{mode:?}");
    }
    assert_eq!(SERIALIZED.load(Ordering::SeqCst), 0, "never encoded");
    assert_eq!(*streaming.lock().unwrap(), [(false, false); 4]);
    assert_eq!(
        format!("{:?}", StreamWriter::default()),
        "StreamWriter { streaming: false }"
    );
}

/// What a node streams, by hand.
type Emit = fn(&Runtime) -> weaver::Result<()>;

#[tokio::test]
async fn a_custom_value_json_cannot_hold_fails_the_node_with_an_encode_error() {
    let cases: [(&str, Emit); 3] = [
        ("nan", |rt| {
            rt.stream()
                .custom(json!({ "ok": 1 }))
                .and(rt.stream().custom(f64::NAN))
        }),
        ("infinite", |rt| {
            rt.stream().custom(vec![1.0, f64::INFINITY])
        }),
        ("map keys", |rt| {
            let mut map = HashMap::new();
            map.insert((1, 2), "tuple keys");
            rt.stream().custom(map)
        }),
    ];
    for (name, emit) in cases {
        let node = move |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
            emit(rt)?;
            Ok(StepsUpdate::default().foo("unreachable"))
        };
        let graph = Graph::<Steps>::new("bad-value")
            .add_node("emit", node)
            .add_sequence([START, "emit", END])
            .compile(Compile::new().checkpointer(InMemorySaver::new()))
            .unwrap();
        let config = RunConfig::thread(name);
        let (seen, result) =
            events(graph.stream_with_mode(Steps::default(), &config, StreamMode::Custom)).await;
        let Err(Error::NodeFailed { node, source }) = &result else {
            panic!("{name}: {result:?}");
        };
        assert_eq!(node, "emit", "{name}");
        let encode = source.downcast_ref::<Error>();
        assert!(
            matches!(encode, Some(Error::Encode { what, .. }) if what.contains("`emit`")),
            "{name}: {source:?}"
        );
        // What was sent before the bad value still arrived.
        let sent: Vec<_> = shorts(&seen);
        let want: &[&str] = if name == "nan" {
            &[r#"c1:emit:{"ok":1}"#]
        } else {
            &[]
        };
        assert_eq!(sent, want, "{name}");
        // The node failed: its update was not applied.
        let state = graph.get_state(&config).await.unwrap();
        assert_eq!(state.values.foo, "", "{name}");
    }
}

#[tokio::test]
async fn a_writer_kept_past_its_run_does_not_hold_the_stream_open() {
    let kept: Arc<Mutex<Option<StreamWriter>>> = Arc::default();
    let slot = kept.clone();
    let node = move |_: &Steps, rt: &Runtime| {
        *slot.lock().unwrap() = Some(rt.stream().clone());
        StepsUpdate::default().foo("kept")
    };
    let graph = Graph::<Steps>::new("keeper")
        .add_node("keep", node)
        .add_sequence([START, "keep", END])
        .compile(Compile::new())
        .unwrap();
    // `events` fails unless the stream ends right after `Done`.
    let (_, result) =
        events(graph.stream_with_mode(Steps::default(), &RunConfig::default(), StreamMode::Custom))
            .await;
    result.unwrap();
    let writer = kept.lock().unwrap().take().unwrap();
    assert!(writer.streams_custom());
    // Sending after the run ended reaches nobody, and is no error.
    writer.custom("late").unwrap();
}

#[tokio::test]
async fn streamed_events_are_never_stored_in_memory() {
    let saver: Arc<dyn Saver> = Arc::new(InMemorySaver::new());
    weaver_tests::streamed::streamed_events_are_never_stored(saver).await;
}
