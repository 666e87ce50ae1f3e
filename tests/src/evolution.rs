//! State and graph evolution, run against any saver: threads written by the
//! first release of a state (`TicketV1`) read by later ones on the same
//! saver. The in-memory saver runs it in the runtime tests, SQLite and
//! PostgreSQL in the SQL tests.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use weaver::evolution::{STATE_SCHEMA_KEY, STATE_VERSION_KEY};
use weaver::prelude::*;

/// The first release: a ticket with a title, a priority, a field later
/// removed, and a log stored as deltas.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct TicketV1 {
    /// The title.
    pub title: String,
    /// How urgent.
    pub priority: u32,
    /// Removed by the second release.
    pub legacy: String,
    /// What happened, stored as deltas.
    #[reducer(delta)]
    pub log: Vec<String>,
}

/// The second release, additive only (same version): `legacy` removed,
/// `count` added.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct TicketV2 {
    /// The title.
    pub title: String,
    /// How urgent.
    pub priority: u32,
    /// What happened.
    #[reducer(delta)]
    pub log: Vec<String>,
    /// Added: old checkpoints read it as 0.
    #[reducer(add)]
    pub count: u32,
}

/// Version 2: `title` renamed to `subject`, through an upcaster.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[graph_state(version = 2, upcast(1 => title_to_subject))]
pub struct TicketV3 {
    /// Was `title`.
    pub subject: String,
    /// How urgent.
    pub priority: u32,
    /// What happened.
    #[reducer(delta)]
    pub log: Vec<String>,
    /// Added.
    #[reducer(add)]
    pub count: u32,
}

/// The upcaster of [`TicketV3`]: moves `title` to `subject` (when present:
/// pending writes are upcast as partial maps).
pub fn title_to_subject(mut m: Map<String, Value>) -> Result<Map<String, Value>, String> {
    if let Some(title) = m.remove("title") {
        m.insert("subject".into(), title);
    }
    Ok(m)
}

/// `priority` changed type without a new version: old checkpoints do not
/// decode.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct TicketRetyped {
    /// The title.
    pub title: String,
    /// Was a number.
    pub priority: Vec<String>,
}

/// Version 3 with an upcaster from 2 only: version 1 has no path.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[graph_state(version = 3, upcast(2 => title_to_subject))]
pub struct TicketGap {
    /// The subject.
    pub subject: String,
}

fn write_v1(_s: &TicketV1) -> TicketV1Update {
    TicketV1Update::default()
        .title("printer on fire".to_owned())
        .priority(3u32)
        .legacy("old".to_owned())
        .log(vec!["opened".into()])
}

fn ask_v1(_s: &TicketV1, rt: &Runtime) -> Result<TicketV1Update, NodeError> {
    let answer = rt.interrupt("close it?")?;
    Ok(TicketV1Update::default().log(vec![format!("v1 answer {answer}")]))
}

/// V1: `write` then `ask`, which pauses for a human.
pub fn graph_v1(saver: Arc<dyn Saver>) -> CompiledGraph<TicketV1> {
    Graph::<TicketV1>::new("tickets")
        .add_node("write", write_v1)
        .add_node("ask", ask_v1)
        .add_sequence([START, "write", "ask", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .expect("v1 graph")
}

/// V1 with `write` and `ask` in one step: `write` finishes (its writes wait
/// as pending writes) while `ask` pauses.
pub fn parallel_v1(saver: Arc<dyn Saver>) -> CompiledGraph<TicketV1> {
    Graph::<TicketV1>::new("tickets")
        .add_node("write", write_v1)
        .add_node("ask", ask_v1)
        .add_edge(START, "write")
        .add_edge(START, "ask")
        .add_edge("write", END)
        .add_edge("ask", END)
        .compile(Compile::new().checkpointer_arc(saver))
        .expect("parallel v1 graph")
}

fn write_v2(_s: &TicketV2) -> TicketV2Update {
    TicketV2Update::default().count(1u32)
}

fn ask_v2(s: &TicketV2, rt: &Runtime) -> Result<TicketV2Update, NodeError> {
    let answer = rt.interrupt("close it?")?;
    Ok(TicketV2Update::default()
        .log(vec![format!("v2 answer {answer} for {}", s.title)])
        .count(10u32))
}

/// V2, with `ask` named `node`.
pub fn graph_v2(saver: Arc<dyn Saver>, node: &str, options: Compile) -> CompiledGraph<TicketV2> {
    v2_named(node, options.checkpointer_arc(saver)).expect("v2 graph")
}

/// V2 with `ask` named `confirm`, compiled with `options` (no saver).
pub fn graph_v2_with(options: Compile) -> weaver::Result<CompiledGraph<TicketV2>> {
    v2_named("confirm", options)
}

fn v2_named(node: &str, options: Compile) -> weaver::Result<CompiledGraph<TicketV2>> {
    Graph::<TicketV2>::new("tickets")
        .add_node("write", write_v2)
        .add_node(node, ask_v2)
        .add_sequence([START, "write", node, END])
        .compile(options)
}

fn write_v3(_s: &TicketV3) -> TicketV3Update {
    TicketV3Update::default().count(1u32)
}

fn ask_v3(s: &TicketV3, rt: &Runtime) -> Result<TicketV3Update, NodeError> {
    let answer = rt.interrupt("close it?")?;
    Ok(TicketV3Update::default()
        .log(vec![format!("v3 answer {answer} for {}", s.subject)])
        .count(10u32))
}

/// V3 (state version 2), `write` and `ask` in sequence.
pub fn graph_v3(saver: Arc<dyn Saver>) -> CompiledGraph<TicketV3> {
    Graph::<TicketV3>::new("tickets")
        .add_node("write", write_v3)
        .add_node("ask", ask_v3)
        .add_sequence([START, "write", "ask", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .expect("v3 graph")
}

/// V3 with `write` and `ask` in one step, as [`parallel_v1`].
pub fn parallel_v3(saver: Arc<dyn Saver>) -> CompiledGraph<TicketV3> {
    Graph::<TicketV3>::new("tickets")
        .add_node("write", write_v3)
        .add_node("ask", ask_v3)
        .add_edge(START, "write")
        .add_edge(START, "ask")
        .add_edge("write", END)
        .add_edge("ask", END)
        .compile(Compile::new().checkpointer_arc(saver))
        .expect("parallel v3 graph")
}

fn noop<S: GraphState>(_s: &S) -> S::Update {
    S::Update::default()
}

/// A one-node graph of any state, to read threads with.
pub fn reader<S: GraphState>(saver: Arc<dyn Saver>) -> CompiledGraph<S> {
    Graph::<S>::new("tickets")
        .add_node("write", noop::<S>)
        .add_node("ask", noop::<S>)
        .add_sequence([START, "write", "ask", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .expect("reader graph")
}

/// Runs V1 on `thread` until `ask` pauses; returns the config.
pub async fn paused_v1(saver: Arc<dyn Saver>, thread: &str) -> RunConfig {
    let config = RunConfig::thread(thread);
    let out = graph_v1(saver)
        .invoke(TicketV1::default(), &config)
        .await
        .expect("v1 run");
    assert_eq!(out.interrupts().len(), 1, "v1 pauses at `ask`");
    config
}

/// V1 checkpoints carry version 1 and the schema's fingerprint; an
/// additive V2 reads them (`count` as its default, `legacy` ignored),
/// resumes the paused thread through the delta channel, and reads the
/// whole history.
pub async fn additive_changes_read_old_threads(saver: Arc<dyn Saver>, thread: &str) {
    let config = paused_v1(saver.clone(), thread).await;
    let v1 = graph_v1(saver.clone());
    let head = v1.get_state(&config).await.expect("v1 state");
    let meta = head.metadata.expect("metadata");
    assert_eq!(meta.extra[STATE_VERSION_KEY], json!(1));
    assert_eq!(
        meta.extra[STATE_SCHEMA_KEY].as_str(),
        weaver::evolution::schema_snapshot::<TicketV1>()
            .fingerprint
            .as_str()
            .into()
    );
    let v2 = graph_v2(saver.clone(), "ask", Compile::new());
    let state = v2.get_state(&config).await.expect("v2 reads v1");
    assert_eq!(state.values.title, "printer on fire");
    assert_eq!(state.values.priority, 3);
    assert_eq!(state.values.count, 0, "an added field reads as its default");
    assert_eq!(state.values.log, ["opened"]);
    assert_eq!(state.next, ["ask"]);
    let done = v2
        .resume(json!("yes"), &config)
        .await
        .expect("v2 resumes a v1 pause")
        .complete()
        .expect("complete");
    assert_eq!(
        done.log,
        ["opened", "v2 answer \"yes\" for printer on fire"]
    );
    assert_eq!(done.count, 10);
    let history = v2
        .get_state_history(&config, History::default())
        .await
        .expect("v2 reads the whole history");
    assert!(history.len() >= 4, "{}", history.len());
    assert_eq!(history[0].values.log.len(), 2);
    assert!(
        history
            .iter()
            .all(|s| s.values.title.is_empty() || s.values.title == "printer on fire")
    );
    // The next turn after that: a fresh input on the same thread.
    let again = v2
        .invoke(TicketV2::default(), &config)
        .await
        .expect("next turn");
    assert_eq!(again.interrupts().len(), 1);
}

/// V3 (version 2, `title` renamed `subject` by an upcaster) reads V1's
/// paused thread, resumes it, and writes version 2 from then on.
pub async fn upcasters_rename_a_field(saver: Arc<dyn Saver>, thread: &str) {
    let config = paused_v1(saver.clone(), thread).await;
    let v3 = graph_v3(saver.clone());
    let state = v3.get_state(&config).await.expect("v3 reads v1");
    assert_eq!(state.values.subject, "printer on fire");
    assert_eq!(state.values.log, ["opened"]);
    let done = v3
        .resume(json!("ok"), &config)
        .await
        .expect("v3 resumes")
        .complete()
        .expect("complete");
    assert_eq!(done.subject, "printer on fire");
    assert_eq!(done.log, ["opened", "v3 answer \"ok\" for printer on fire"]);
    let head = v3.get_state(&config).await.expect("head");
    assert_eq!(
        head.metadata.expect("metadata").extra[STATE_VERSION_KEY],
        json!(2)
    );
    let history = v3
        .get_state_history(&config, History::default())
        .await
        .expect("history across versions");
    for snap in &history[..history.len() - 1] {
        if snap.values.priority == 3 {
            assert_eq!(snap.values.subject, "printer on fire");
        }
    }
    // Version 1 code cannot read what version 2 wrote: a typed error.
    let v1 = reader::<TicketV1>(saver.clone());
    match v1.get_state(&config).await {
        Err(weaver::Error::StateVersion {
            found: 2,
            current: 1,
            ..
        }) => {}
        other => panic!("expected StateVersion 2 > 1, got {other:?}"),
    }
    match v1.invoke(TicketV1::default(), &config).await {
        Err(weaver::Error::StateVersion {
            found: 2,
            current: 1,
            ..
        }) => {}
        other => panic!("expected StateVersion on invoke, got {other:?}"),
    }
    // Version 3 has an upcaster from 2 (not from 1): it reads the head.
    let gap = reader::<TicketGap>(saver);
    let head = gap.get_state(&config).await.expect("2 -> 3");
    assert_eq!(head.values.subject, "printer on fire");
}

/// A version gap (no upcaster from 1) and a type change without an upcaster
/// are typed errors on get_state, history and invoke.
pub async fn unreadable_changes_are_typed_errors(saver: Arc<dyn Saver>, thread: &str) {
    let config = paused_v1(saver.clone(), thread).await;
    let gap = reader::<TicketGap>(saver.clone());
    match gap.get_state(&config).await {
        Err(weaver::Error::StateVersion {
            found: 1,
            current: 3,
            reason,
            ..
        }) => assert!(reason.contains("from version 1 to 2"), "{reason}"),
        other => panic!("expected StateVersion 1 -> 3, got {other:?}"),
    }
    let retyped = reader::<TicketRetyped>(saver);
    for result in [
        retyped.get_state(&config).await.map(|_| ()),
        retyped
            .get_state_history(&config, History::default())
            .await
            .map(|_| ()),
        retyped
            .invoke(TicketRetyped::default(), &config)
            .await
            .map(|_| ()),
    ] {
        match result {
            Err(weaver::Error::Decode { what, .. }) => {
                assert!(what.contains("priority"), "{what}")
            }
            other => panic!("expected a decode error at `priority`, got {other:?}"),
        }
    }
}

/// A pending write of a finished task (V1's `write`, beside the paused
/// `ask`) is upcast with the checkpoint: V3 resumes and applies it as
/// `subject`.
pub async fn pending_writes_are_upcast(saver: Arc<dyn Saver>, thread: &str) {
    let config = RunConfig::thread(thread);
    let out = parallel_v1(saver.clone())
        .invoke(TicketV1::default(), &config)
        .await
        .expect("v1 run");
    assert_eq!(out.interrupts().len(), 1);
    let v3 = parallel_v3(saver);
    let state = v3.get_state(&config).await.expect("v3 reads the pause");
    assert_eq!(
        state.values.subject, "printer on fire",
        "the finished task's write, upcast"
    );
    let done = v3
        .resume(json!("fine"), &config)
        .await
        .expect("resume")
        .complete()
        .expect("complete");
    assert_eq!(done.subject, "printer on fire");
    assert_eq!(done.priority, 3);
    // `ask` ran in the step that wrote the subject (it read the state
    // before it), and merges first (task order is by name).
    assert_eq!(done.log, ["v3 answer \"fine\" for ", "opened"]);
}

/// An update of an old V1 checkpoint (a fork of history) reads through the
/// new state, and the fork resumes.
pub async fn forks_read_old_checkpoints(saver: Arc<dyn Saver>, thread: &str) {
    let config = paused_v1(saver.clone(), thread).await;
    let v3 = graph_v3(saver.clone());
    let history = v3
        .get_state_history(&config, History::default())
        .await
        .expect("history");
    let paused = &history[0];
    let at = paused.config.clone();
    let forked = v3
        .update_state(&at, TicketV3Update::default().priority(9u32), None)
        .await
        .expect("fork of a v1 checkpoint");
    let state = v3.get_state(&forked).await.expect("fork state");
    assert_eq!(state.values.subject, "printer on fire");
    assert_eq!(state.values.priority, 9);
    assert_eq!(state.next, ["ask"]);
    // The fork runs `ask` again, which pauses; the answer finishes it.
    let paused = v3.continue_run(&forked).await.expect("run the fork");
    assert_eq!(paused.interrupts().len(), 1);
    let done = v3
        .resume(json!("later"), &config)
        .await
        .expect("resume the fork")
        .complete()
        .expect("complete");
    assert_eq!(done.priority, 9);
    assert_eq!(
        done.log,
        ["opened", "v3 answer \"later\" for printer on fire"]
    );
}

/// A thread paused at `ask` read by a graph that renamed `ask` to
/// `confirm`: a typed error naming the node and the remedy, then, with
/// `rename_node`, the pause under the new name (its interrupt too: it
/// named `ask`) and a resume that answers it.
pub async fn renamed_nodes_map_to_new_names(saver: Arc<dyn Saver>, thread: &str) {
    let config = paused_v1(saver.clone(), thread).await;
    let plain = graph_v2(saver.clone(), "confirm", Compile::new());
    for result in [
        plain.get_state(&config).await.map(|_| ()),
        plain.resume(json!("yes"), &config).await.map(|_| ()),
    ] {
        match result {
            Err(e @ weaver::Error::RemovedNode { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains("`ask`") && text.contains("rename_node"),
                    "{text}"
                );
            }
            other => panic!("expected RemovedNode `ask`, got {other:?}"),
        }
    }
    // The history lists the past: it reads, without the removed node's work.
    let history = plain
        .get_state_history(&config, History::default())
        .await
        .expect("history reads without the removed node");
    assert!(history.iter().all(|s| !s.next.iter().any(|n| n == "ask")));
    assert_eq!(history[0].values.title, "printer on fire");
    let mapped = graph_v2(
        saver,
        "confirm",
        Compile::new().rename_node("ask", "confirm"),
    );
    // Every read gives the same answer: the second (its state from the
    // graph's cache of decoded states) and a history too.
    for read in 0..2 {
        let state = mapped.get_state(&config).await.expect("mapped state");
        assert_eq!(state.next, ["confirm"], "read {read}");
        assert_eq!(state.interrupts.len(), 1, "read {read}");
        // The pause names the node by its new name too.
        assert_eq!(state.interrupts[0].node, "confirm", "read {read}");
    }
    for read in 0..2 {
        let history = mapped
            .get_state_history(&config, History::default())
            .await
            .expect("mapped history");
        assert_eq!(history[0].next, ["confirm"], "history read {read}");
    }
    let done = mapped
        .resume(json!("yes"), &config)
        .await
        .expect("resume under the new name")
        .complete()
        .expect("complete");
    assert_eq!(
        done.log,
        ["opened", "v2 answer \"yes\" for printer on fire"]
    );
}

/// Version 2 whose upcaster refuses every record.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[graph_state(version = 2, upcast(1 => refuse))]
pub struct TicketRefused {
    /// The subject.
    pub subject: String,
}

/// An upcaster that fails.
pub fn refuse(_m: Map<String, Value>) -> Result<Map<String, Value>, String> {
    Err("tickets before version 2 are archived".into())
}

/// Version 2 whose upcaster panics.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[graph_state(version = 2, upcast(1 => panics))]
pub struct TicketPanicked {
    /// The subject.
    pub subject: String,
}

/// An upcaster that panics (as one unwrapping a field it expected would).
pub fn panics(_m: Map<String, Value>) -> Result<Map<String, Value>, String> {
    panic!("no subject to move")
}

/// An upcaster's error is an `Error::Upcast` naming both versions and the
/// reason, and so is its panic (it unwound through the read); a record
/// whose `state_version` is not a version is a decode error of that
/// metadata key, never read as version 1.
pub async fn failing_upcasters_and_bad_versions_are_typed_errors(
    saver: Arc<dyn Saver>,
    thread: &str,
) {
    let config = paused_v1(saver.clone(), thread).await;
    let refused = reader::<TicketRefused>(saver.clone());
    match refused.get_state(&config).await {
        Err(weaver::Error::Upcast {
            from: 1,
            to: 2,
            reason,
            ..
        }) => assert!(reason.contains("archived"), "{reason}"),
        other => panic!("expected Upcast 1 -> 2, got {other:?}"),
    }
    match refused.resume(json!("yes"), &config).await {
        Err(weaver::Error::Upcast { .. }) => {}
        other => panic!("expected Upcast on resume, got {other:?}"),
    }
    let panicked = reader::<TicketPanicked>(saver.clone());
    match panicked.get_state(&config).await {
        Err(weaver::Error::Upcast {
            from: 1,
            to: 2,
            reason,
            ..
        }) => assert!(
            reason.contains("panicked") && reason.contains("no subject"),
            "{reason}"
        ),
        other => panic!("expected Upcast 1 -> 2 from the panic, got {other:?}"),
    }
    let bad = format!("{thread}-bad");
    let mut record = weaver::checkpoint::Checkpoint::empty();
    record
        .channel_values
        .insert("title".into(), json!("stored by hand"));
    let mut metadata =
        weaver::checkpoint::CheckpointMetadata::new(weaver::checkpoint::CheckpointSource::Loop, 0);
    metadata
        .extra
        .insert(STATE_VERSION_KEY.into(), json!("two"));
    saver
        .put(weaver::checkpoint::NewCheckpoint {
            thread_id: bad.clone(),
            checkpoint_ns: String::new(),
            parent_id: None,
            checkpoint: record,
            metadata,
            commit_order: None,
        })
        .await
        .expect("put");
    let v1 = reader::<TicketV1>(saver);
    match v1.get_state(&RunConfig::thread(&bad)).await {
        Err(weaver::Error::Decode { what, .. }) => {
            assert!(what.contains(STATE_VERSION_KEY), "{what}")
        }
        other => panic!("expected a decode error of the version, got {other:?}"),
    }
}

/// A meter whose first release stored tens.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct MeterV1 {
    /// In tens.
    pub n: u32,
}

/// The second release stores units: its upcaster multiplies by ten, so
/// upcasting a value twice is visible.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[graph_state(version = 2, upcast(1 => tens_to_units))]
pub struct MeterV2 {
    /// In units.
    pub n: u32,
}

/// The upcaster of [`MeterV2`].
pub fn tens_to_units(mut m: Map<String, Value>) -> Result<Map<String, Value>, String> {
    if let Some(n) = m.get("n").and_then(Value::as_u64) {
        m.insert("n".into(), json!(n * 10));
    }
    Ok(m)
}

/// The third release stores hundredths: its upcaster from version 2
/// multiplies by a hundred.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[graph_state(version = 3, upcast(1 => tens_to_units, 2 => units_to_hundredths))]
pub struct MeterV3 {
    /// In hundredths.
    pub n: u32,
}

/// The upcaster of [`MeterV3`] from version 2.
pub fn units_to_hundredths(mut m: Map<String, Value>) -> Result<Map<String, Value>, String> {
    if let Some(n) = m.get("n").and_then(Value::as_u64) {
        m.insert("n".into(), json!(n * 100));
    }
    Ok(m)
}

/// Writes a newer release stored with a checkpoint of an older state
/// version are read as they are, not upcast from the checkpoint's version
/// again: version 1's step pauses at `ask` and fails at `late`; version 2
/// goes on from that checkpoint, `late` writes 7 (in units) and `ask`
/// pauses again, so its writes stay pending on the version 1 checkpoint.
pub async fn newer_writes_on_an_older_checkpoint_are_not_upcast_again(
    saver: Arc<dyn Saver>,
    thread: &str,
) {
    let v1 = Graph::<MeterV1>::new("meter")
        .add_node("ask", |_: &MeterV1, rt: &Runtime| {
            rt.interrupt("go on?")?;
            Ok::<_, NodeError>(MeterV1Update::default())
        })
        .add_node("late", |_: &MeterV1| {
            Err::<MeterV1Update, _>(NodeError::msg("late is down"))
        })
        .add_edge(START, "ask")
        .add_edge(START, "late")
        .add_edge("ask", END)
        .add_edge("late", END)
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .expect("v1 graph");
    let config = RunConfig::thread(thread);
    v1.invoke(MeterV1 { n: 2 }, &config).await.unwrap_err();
    let v2 = Graph::<MeterV2>::new("meter")
        .add_node("ask", |_: &MeterV2, rt: &Runtime| {
            rt.interrupt("go on?")?;
            Ok::<_, NodeError>(MeterV2Update::default())
        })
        .add_node("late", |_: &MeterV2| MeterV2Update::default().n(7u32))
        .add_edge(START, "ask")
        .add_edge(START, "late")
        .add_edge("ask", END)
        .add_edge("late", END)
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .expect("v2 graph");
    // The stored value, upcast once.
    assert_eq!(v2.get_state(&config).await.unwrap().values.n, 20);
    let paused = v2.continue_run(&config).await.expect("v2 goes on");
    assert_eq!(paused.interrupts().len(), 1);
    let state = v2.get_state(&config).await.unwrap();
    assert_eq!(state.values.n, 7, "late's write, in units, read as it is");
    // A rollback to the first release cannot read a write in units: it
    // refuses, as it refuses a newer checkpoint, rather than read 7 tens.
    match v1.get_state(&config).await {
        Err(Error::StateVersion {
            found: 2,
            current: 1,
            ..
        }) => {}
        other => panic!("a rollback read a newer release's write: {other:?}"),
    }
    let done = v2
        .resume(json!("yes"), &config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.n, 7);
    // The marker of `late`'s version is no state write: the step that took
    // `late`'s write in has no channel of that name.
    let head = saver
        .get_tuple(&weaver::checkpoint::CheckpointRef::latest(thread))
        .await
        .unwrap()
        .unwrap();
    let marked = head
        .checkpoint
        .channel_versions
        .keys()
        .any(|k| k.starts_with("__state"));
    assert!(!marked, "{:?}", head.checkpoint.channel_versions);
    // The same pause on a second thread, rewritten by the third release as
    // its own: `late`'s write is upcast once (7 units, 700 hundredths), and
    // read so again.
    let second = RunConfig::thread(format!("{thread}-rewritten"));
    v1.invoke(MeterV1 { n: 2 }, &second).await.unwrap_err();
    v2.continue_run(&second).await.expect("v2 goes on");
    let rewritten = weaver::evolution::upgrade_stored::<MeterV3>(
        saver.as_ref(),
        &weaver::evolution::UpgradeOptions::default(),
        &mut |_| {},
    )
    .await
    .unwrap();
    assert!(rewritten.upgraded > 0, "{rewritten:?}");
    let v3 = Graph::<MeterV3>::new("meter")
        .add_node("ask", |_: &MeterV3, rt: &Runtime| {
            rt.interrupt("go on?")?;
            Ok::<_, NodeError>(MeterV3Update::default())
        })
        .add_node("late", |_: &MeterV3| MeterV3Update::default().n(700u32))
        .add_edge(START, "ask")
        .add_edge(START, "late")
        .add_edge("ask", END)
        .add_edge("late", END)
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .expect("v3 graph");
    assert_eq!(v3.get_state(&second).await.unwrap().values.n, 700);
}

/// A replay of a thread's first checkpoint (the input, not yet taken in)
/// by a newer release takes the input through the upcasters too: version
/// 1's `title` in the input reaches version 2's `subject`.
pub async fn a_replayed_input_is_upcast(saver: Arc<dyn Saver>, thread: &str) {
    let config = RunConfig::thread(thread);
    graph_v1(saver.clone())
        .invoke(
            TicketV1Update::default().title("printer".to_owned()),
            &config,
        )
        .await
        .expect("v1 pauses");
    let v3 = graph_v3(saver);
    let history = v3
        .get_state_history(&config, History::default())
        .await
        .expect("history");
    let input = history.last().expect("the input checkpoint");
    assert_eq!(input.next, ["__start__"]);
    let paused = v3
        .continue_run(&input.config)
        .await
        .expect("the replay pauses at ask");
    assert_eq!(paused.interrupts().len(), 1);
    let state = v3.get_state(&config).await.unwrap();
    assert_eq!(state.values.subject, "printer", "the input's title, upcast");
}
