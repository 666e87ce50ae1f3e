//! Configuring runs: `Compile` options at run time (static interrupts,
//! recursion limit, concurrency), `RunConfig` and its JSON form, checkpoint
//! namespaces, and `graph!` against the equivalent builder graph.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use weaver::InterruptWhen;
use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Flow {
    route: String,
    #[reducer(append)]
    log: Vec<String>,
    #[reducer(add)]
    hops: i64,
}

fn visit(name: &str) -> FlowUpdate {
    FlowUpdate::default().log(vec![name.to_owned()]).hops(1)
}
fn a(_: &Flow) -> FlowUpdate {
    visit("a")
}
async fn b(_: &Flow) -> FlowUpdate {
    visit("b")
}
fn c(_: &Flow, rt: &Runtime) -> FlowUpdate {
    visit(rt.node())
}
async fn d(_: &Flow, rt: &Runtime) -> Result<FlowUpdate, NodeError> {
    Ok(visit(rt.node()))
}
fn e(s: &Flow) -> Result<Command<FlowUpdate>, NodeError> {
    if s.route == "fail" {
        return Err(NodeError::msg("e refuses"));
    }
    Ok(Command::update(visit("e")))
}
fn jump(_: &Flow) -> Command<FlowUpdate> {
    Command::update(visit("jump")).goto("b").goto("c")
}
fn again(s: &Flow) -> &'static str {
    if s.hops < 6 { "a" } else { END }
}
fn pick(s: &Flow) -> String {
    s.route.replace("fail", "e")
}
fn spread(s: &Flow) -> Vec<&'static str> {
    if s.hops > 3 {
        vec!["finish"]
    } else {
        vec!["b", "c"]
    }
}
fn r#loop(_: &Flow, rt: &Runtime) -> FlowUpdate {
    visit(rt.node())
}

type Row = (Flow, Vec<String>, Option<&'static str>, Option<i64>);

#[derive(Debug, PartialEq)]
struct Trace {
    names: Vec<String>,
    result: String,
    history: Vec<Row>,
    mermaid: String,
}

async fn trace(graph: Graph<Flow>, compile: Compile, input: Flow) -> Trace {
    let graph = graph
        .compile(compile.checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("t");
    let result = match graph.invoke(input, &config).await {
        Ok(Outcome::Complete(s)) => format!("{s:?}"),
        Ok(Outcome::Interrupted(i)) => {
            let at: Vec<_> = i.iter().map(|i| (&i.node, i.when)).collect();
            format!("interrupted {at:?}")
        }
        Err(e) => format!("error {e}"),
    };
    let history = graph.get_state_history(&config, History::default());
    let history = history.await.unwrap().into_iter();
    Trace {
        names: graph.node_names().iter().map(|n| n.to_string()).collect(),
        result,
        history: history
            .map(|s| (s.values.clone(), s.next.clone(), s.source(), s.step()))
            .collect(),
        mermaid: graph.draw_mermaid(),
    }
}

async fn same(macro_graph: Graph<Flow>, builder: Graph<Flow>, input: Flow) -> Trace {
    let m = trace(macro_graph, Compile::new(), input.clone()).await;
    assert_eq!(m, trace(builder, Compile::new(), input).await);
    m
}

fn final_log(t: &Trace) -> Vec<String> {
    t.history.first().map_or(vec![], |r| r.0.log.clone())
}

fn flow(route: &str) -> Flow {
    Flow {
        route: route.to_owned(),
        ..Flow::default()
    }
}

fn at(out: &Outcome<Flow>) -> Vec<(&str, InterruptWhen)> {
    out.interrupts()
        .iter()
        .map(|i| (i.node.as_str(), i.when))
        .collect()
}

#[tokio::test]
async fn macro_equals_builder_for_a_conditional_loop_of_sync_async_and_runtime_nodes() {
    let m = graph! {
        name: "Loop",
        state: Flow,
        nodes: [a, b, c, d],
        edges: [START -> a -> [b, c], [b, c] -> d],
        conditional: [d => again ? [a, END]],
    };
    let builder = Graph::new("Loop")
        .add_node("a", a)
        .add_node("b", b)
        .add_node("c", c)
        .add_node("d", d)
        .add_sequence([START, "a", "b", "d"])
        .add_sequence(["a", "c", "d"])
        .add_conditional_edges("d", again, ["a", END]);
    let t = same(m, builder, Flow::default()).await;
    assert_eq!(final_log(&t), ["a", "b", "c", "d", "a", "b", "c", "d"]);
    let steps: Vec<_> = t.history.iter().rev().map(|r| r.3.unwrap()).collect();
    assert_eq!(steps, (-1..=6).collect::<Vec<_>>());
}

#[tokio::test]
async fn macro_equals_builder_for_start_routers_list_routers_goto_and_failing_results() {
    for route in ["jump", "e", "fail", END] {
        let m = graph! {
            state: Flow,
            nodes: [jump, b, c, e, finish = |_: &Flow| visit("finish")],
            edges: [[b, c] -> e, finish -> END],
            conditional: [
                START => pick ? [jump, e, END],
                e => |s: &Flow| spread(s) ? [b, c, finish],
            ],
            goto: [jump -> [b, c]],
        };
        let builder = Graph::new("Flow")
            .add_node("jump", jump)
            .add_node("b", b)
            .add_node("c", c)
            .add_node("e", e)
            .add_node("finish", |_: &Flow| visit("finish"))
            .add_sequence(["b", "e"])
            .add_sequence(["c", "e"])
            .add_sequence(["finish", END])
            .add_conditional_edges(START, pick, ["jump", "e", END])
            .add_conditional_edges("e", spread, ["b", "c", "finish"])
            .add_destinations("jump", ["b", "c"]);
        let t = same(m, builder, flow(route)).await;
        let expected: &[&str] = match route {
            "jump" => &["jump", "b", "c", "e", "finish"],
            "e" => &["e", "b", "c", "e", "finish"],
            _ => &[],
        };
        assert_eq!(final_log(&t), expected, "route {route}");
        if route == "fail" {
            assert!(t.result.starts_with("error"), "{}", t.result);
        }
    }
}

#[tokio::test]
async fn macro_node_named_by_a_raw_identifier_is_named_like_the_function() {
    let m = graph! { state: Flow, nodes: [r#loop], edges: [START -> r#loop -> END] };
    let builder = Graph::new("Flow")
        .add_node("loop", r#loop)
        .add_sequence([START, "loop", END]);
    let t = same(m, builder, Flow::default()).await;
    assert_eq!(final_log(&t), ["loop"]);
}

#[tokio::test]
async fn a_goto_from_start_is_not_an_entry_that_silently_runs_nothing() {
    // `graph!` refuses `goto: [START -> a]` at compile time; the builder at
    // `compile()`.
    let compiled = Graph::<Flow>::new("Flow")
        .add_node("a", a)
        .add_edge("a", END)
        .add_destinations(START, ["a"])
        .compile(Compile::new());
    match compiled {
        Err(Error::InvalidGraph(_)) => {}
        Err(other) => panic!("expected InvalidGraph, got {other}"),
        Ok(graph) => {
            let out = graph.invoke(Flow::default(), &RunConfig::default()).await;
            let state = out.unwrap().complete().unwrap();
            assert_eq!(state.log, ["a"], "compiled, but `a` never ran");
        }
    }
}

fn fan() -> Graph<Flow> {
    graph! {
        state: Flow,
        nodes: [a, b, c, d],
        edges: [START -> a -> [b, c], [b, c] -> d -> END],
        interrupt_before: [c],
    }
}

#[tokio::test]
async fn interrupt_before_a_fan_out_member_named_three_times_pauses_once() {
    let twice = Compile::new().interrupt_before(["c", "c"]);
    let m = trace(fan(), twice, Flow::default()).await;
    let builder = Graph::new("Flow")
        .add_node("a", a)
        .add_node("b", b)
        .add_node("c", c)
        .add_node("d", d)
        .add_sequence([START, "a", "b", "d", END])
        .add_sequence(["a", "c", "d"]);
    let once = Compile::new().interrupt_before(["c"]);
    assert_eq!(m, trace(builder, once, Flow::default()).await);
    assert_eq!(m.result, r#"interrupted [("c", Before)]"#);

    let saver = InMemorySaver::new();
    let compile = Compile::new().checkpointer(saver).interrupt_before(["c"]);
    let graph = fan().compile(compile).unwrap();
    let config = RunConfig::thread("f");
    graph.invoke(Flow::default(), &config).await.unwrap();
    assert_eq!(graph.get_state(&config).await.unwrap().next, ["b", "c"]);
    let done = graph.continue_run(&config).await.unwrap().complete();
    assert_eq!(done.unwrap().log, ["a", "b", "c", "d"]);
}

#[tokio::test]
async fn interrupts_on_a_goto_target_and_after_a_fan_out_member() {
    let graph = graph! {
        state: Flow,
        nodes: [jump, b, c, d],
        edges: [START -> jump, [b, c] -> d -> END],
        goto: [jump -> [b, c]],
        interrupt_before: [c],
        interrupt_after: [b],
    }
    .compile(Compile::new().checkpointer(InMemorySaver::new()))
    .unwrap();
    let config = RunConfig::thread("g");
    let out = graph.invoke(Flow::default(), &config).await.unwrap();
    assert_eq!(at(&out), [("c", InterruptWhen::Before)]);
    let out = graph.continue_run(&config).await.unwrap();
    assert_eq!(at(&out), [("b", InterruptWhen::After)]);
    assert_eq!(graph.get_state(&config).await.unwrap().next, ["d"]);
    let done = graph.continue_run(&config).await.unwrap().complete();
    assert_eq!(done.unwrap().log, ["jump", "b", "c", "d"]);
}

fn chain(compile: Compile) -> CompiledGraph<Flow> {
    Graph::new("Chain")
        .add_node("a", a)
        .add_node("b", b)
        .add_node("c", c)
        .add_sequence([START, "a", "b", "c", END])
        .compile(compile.checkpointer(InMemorySaver::new()))
        .unwrap()
}

#[tokio::test]
async fn interrupt_after_the_last_node_before_end_pauses() {
    // LangGraph checks `interrupt_after` after every step, the last included.
    let graph = chain(Compile::new().interrupt_after(["c"]));
    let config = RunConfig::thread("last");
    let out = graph.invoke(Flow::default(), &config).await.unwrap();
    assert_eq!(at(&out), [("c", InterruptWhen::After)]);
}

#[tokio::test]
async fn a_static_interrupt_answered_by_its_own_id_resumes() {
    // `Interrupt::id` is documented as "key of the resume map", and the
    // README answers every interrupt by id.
    let graph = chain(Compile::new().interrupt_before(["b"]));
    let config = RunConfig::thread("ids");
    let out = graph.invoke(Flow::default(), &config).await.unwrap();
    let ids = out.interrupts().iter().map(|i| (i.id.clone(), Value::Null));
    let answers: Resume = ids.collect();
    let done = graph.resume(answers, &config).await;
    assert_eq!(done.unwrap().complete().unwrap().log, ["a", "b", "c"]);
}

#[tokio::test]
async fn recursion_limit_counts_steps_like_langgraph() {
    // LangGraph's recursion-limit how-to: a graph of three super-steps of
    // nodes fails at a limit of 3 and runs at 4, the step that takes in
    // the input being one of the count.
    let graph = chain(Compile::new());
    let three = RunConfig::thread("three").recursion_limit(3);
    let err = graph.invoke(Flow::default(), &three).await.unwrap_err();
    assert!(matches!(err, Error::RecursionLimit { limit: 3 }), "{err}");
    let four = RunConfig::thread("four").recursion_limit(4);
    let out = graph.invoke(Flow::default(), &four).await;
    assert_eq!(out.unwrap().complete().unwrap().log, ["a", "b", "c"]);
    // From a pause there is no input step: three node steps fit in 3.
    let paused = chain(Compile::new().interrupt_before(["a"]));
    let config = RunConfig::thread("resumed").recursion_limit(3);
    let out = paused.invoke(Flow::default(), &config).await.unwrap();
    assert_eq!(out.interrupts().len(), 1);
    let done = paused
        .continue_run(&config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.log, ["a", "b", "c"]);
}

#[tokio::test]
async fn recursion_limit_zero_is_refused_before_anything_is_written() {
    let graph = chain(Compile::new());
    let zero = RunConfig::thread("zero").recursion_limit(0);
    let err = graph.invoke(Flow::default(), &zero).await.unwrap_err();
    let typed = matches!(
        err,
        Error::RecursionLimit { .. } | Error::InvalidConfig { .. }
    );
    assert!(typed, "{err}");
    let written = graph.get_state_history(&zero, History::default()).await;
    let written = written.unwrap();
    let steps: Vec<_> = written.iter().map(|s| (s.source(), s.step())).collect();
    assert!(steps.is_empty(), "a refused run left checkpoints {steps:?}");
}

#[tokio::test]
async fn huge_recursion_limits_are_accepted() {
    let graph = chain(Compile::new());
    let v = json!({"configurable": {"thread_id": "j"}, "recursion_limit": u64::MAX});
    let max = RunConfig::thread("max").recursion_limit(usize::MAX);
    for config in [max, RunConfig::from_json(&v).unwrap()] {
        let out = graph.invoke(Flow::default(), &config).await.unwrap();
        assert_eq!(out.complete().unwrap().log, ["a", "b", "c"]);
    }
}

fn invalid(v: Value) {
    let r = RunConfig::from_json(&v);
    assert!(matches!(r, Err(Error::InvalidConfig { .. })), "{v}: {r:?}");
}

#[test]
fn from_json_wrong_types_and_numbers_as_strings_are_typed_errors() {
    for field in ["thread_id", "checkpoint_ns", "checkpoint_id"] {
        invalid(json!({"configurable": {field: 7}}));
        invalid(json!({"configurable": {field: ["x"]}}));
    }
    for limit in [json!("5"), json!(-1), json!(2.5), json!(0), json!(true)] {
        invalid(json!({"recursion_limit": limit}));
    }
    invalid(json!({"metadata": ["x"]}));
    invalid(json!({"configurable": "t"}));
    invalid(json!({"durability": 3}));
    invalid(json!("thread"));
}

#[test]
fn from_json_null_fields_mean_unset_as_in_langgraph() {
    // LangGraph's `ensure_config` skips `None` values, and a `None`
    // checkpoint_id addresses the latest checkpoint.
    let v = json!({
        "configurable": {"thread_id": "t", "checkpoint_id": null, "checkpoint_ns": null},
        "recursion_limit": null,
        "metadata": null,
    });
    let config = RunConfig::from_json(&v).unwrap();
    assert_eq!(config.get_checkpoint_id(), None);
    assert_eq!(config.ns(), "");
    assert_eq!(config.get_recursion_limit(), 25);
}

#[test]
fn to_json_round_trips_durability() {
    let config = RunConfig::thread("t").durability(Durability::Exit);
    let back = RunConfig::from_json(&config.to_json()).unwrap();
    assert_eq!(back.get_durability(), Durability::Exit);
}

#[tokio::test]
async fn configurable_extras_are_kept_like_langgraph() {
    let v = json!({"configurable": {"thread_id": "x", "user_id": "u1"}, "metadata": {"m": 1}});
    let config = RunConfig::from_json(&v).unwrap();
    let graph = chain(Compile::new());
    graph.invoke(Flow::default(), &config).await.unwrap();
    let latest = graph.get_state(&config).await.unwrap();
    let extra = &latest.metadata.as_ref().unwrap().extra;
    assert_eq!(extra.get("m"), Some(&json!(1)));
    // LangGraph copies scalar `configurable` entries into checkpoint metadata
    // (filterable in `get_state_history`) and keeps them in the config.
    assert_eq!(extra.get("user_id"), Some(&json!("u1")), "{extra:?}");
    assert_eq!(config.to_json()["configurable"]["user_id"], "u1");
}

static RUNNING: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

async fn slow(_: &Flow) -> FlowUpdate {
    PEAK.fetch_max(RUNNING.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(30)).await;
    RUNNING.fetch_sub(1, Ordering::SeqCst);
    visit("slow")
}

#[tokio::test]
async fn max_concurrency_is_honoured_or_refused() {
    let graph = graph! {
        state: Flow,
        nodes: [a, w1 = slow, w2 = slow, w3 = slow],
        edges: [START -> a -> [w1, w2, w3] -> END],
    }
    .compile(Compile::new())
    .unwrap();
    let Ok(config) = RunConfig::from_json(&json!({"max_concurrency": 1})) else {
        return; // refused: a typed error is fine
    };
    graph.invoke(Flow::default(), &config).await.unwrap();
    assert_eq!(PEAK.load(Ordering::SeqCst), 1, "max_concurrency dropped");
}

#[tokio::test]
async fn checkpoint_namespaces_keep_separate_threads() {
    let graph = chain(Compile::new());
    let root = RunConfig::thread("t");
    let v = json!({"configurable": {"thread_id": "t", "checkpoint_ns": "sub"}});
    let sub = RunConfig::from_json(&v).unwrap();
    for (config, route) in [(&root, "root"), (&sub, "sub")] {
        graph.invoke(flow(route), config).await.unwrap();
    }
    for (config, route) in [(&root, "root"), (&sub, "sub")] {
        let history = graph.get_state_history(config, History::default()).await;
        let history = history.unwrap();
        assert_eq!(history.len(), 5, "{route}");
        for s in history.iter().filter(|s| s.step() >= Some(0)) {
            let got = (s.values.route.as_str(), s.config.ns());
            assert_eq!(got, (route, config.ns()));
        }
        let state = graph.get_state(config).await.unwrap();
        assert_eq!((state.values.route.as_str(), state.values.hops), (route, 3));
    }
    // update_state in the namespace stays there.
    let edit = FlowUpdate::default().route("edited");
    let edited = graph.update_state(&sub, edit, None).await.unwrap();
    assert_eq!(edited.ns(), "sub");
    assert_eq!(graph.get_state(&sub).await.unwrap().values.route, "edited");
    assert_eq!(graph.get_state(&root).await.unwrap().values.route, "root");
    // A checkpoint id of one namespace is not found in the other.
    let root_id = graph.get_state(&root).await.unwrap().config;
    let root_id = root_id.get_checkpoint_id().unwrap().to_owned();
    let wrong = sub.clone().checkpoint_id(root_id);
    let err = graph.get_state(&wrong).await.unwrap_err();
    assert!(matches!(err, Error::CheckpointNotFound { .. }), "{err}");
    // A second run in the namespace continues that namespace only.
    graph.invoke(FlowUpdate::default(), &sub).await.unwrap();
    assert_eq!(graph.get_state(&sub).await.unwrap().values.hops, 6);
    assert_eq!(graph.get_state(&root).await.unwrap().values.hops, 3);
}

#[tokio::test]
async fn interrupt_options_naming_unknown_or_reserved_nodes_are_typed_errors() {
    for bad in [END, START, "*", "nope", ""] {
        for compile in [
            Compile::new().interrupt_before([bad]),
            Compile::new().interrupt_after([bad]),
        ] {
            let r = Graph::<Flow>::new("x")
                .add_node("a", a)
                .add_sequence([START, "a", END])
                .compile(compile.checkpointer(InMemorySaver::new()));
            assert!(matches!(r, Err(Error::InvalidGraph(_))), "{bad}: {r:?}");
        }
    }
}

/// LangGraph's handling of `configurable` keys and unknown top-level keys.
#[tokio::test]
async fn configurable_credentials_stay_out_of_metadata_and_unknown_keys_are_kept() {
    let config = RunConfig::from_json(&json!({
        "configurable": {"thread_id": "creds", "user_id": "u1", "openai_api_key": "sk-1", "Auth_Header": "x"},
        "tenant": "acme",
    }))
    .unwrap();
    let extras = config.get_configurable();
    assert_eq!(
        extras.get("tenant"),
        Some(&json!("acme")),
        "kept, as LangGraph's ensure_config"
    );
    assert_eq!(
        extras.get("openai_api_key"),
        Some(&json!("sk-1")),
        "nodes still read it"
    );
    let graph = Graph::<Flow>::new("Flow")
        .add_node("a", a)
        .add_sequence([START, "a", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    graph.invoke(Flow::default(), &config).await.unwrap();
    let meta = graph.get_state(&config).await.unwrap().metadata.unwrap();
    assert_eq!(meta.extra.get("user_id"), Some(&json!("u1")));
    assert_eq!(meta.extra.get("tenant"), Some(&json!("acme")));
    assert!(!meta.extra.contains_key("openai_api_key"), "{meta:?}");
    assert!(!meta.extra.contains_key("Auth_Header"), "{meta:?}");
    // The addressing keys set their fields, never application keys.
    let routed = RunConfig::default().configurable("thread_id", "t9");
    assert_eq!(routed.thread_id(), Some("t9"));
    assert!(routed.get_configurable().is_empty());
}

/// `configurable("thread_id", 5)` is not a thread: every graph call given
/// such a config fails with `InvalidConfig` (as `from_json` refuses the
/// same JSON) and reads or writes nothing, where it used to become an
/// application key and the call `MissingThreadId`, or, for a number as
/// `checkpoint_id`, a silent read of the latest checkpoint. `null` clears
/// an addressing key.
#[tokio::test]
async fn a_non_string_addressing_key_fails_every_call_before_it_touches_the_thread() {
    let saver = InMemorySaver::new();
    let graph = Graph::<Flow>::new("Flow")
        .add_node("a", a)
        .add_sequence([START, "a", END])
        .compile(Compile::new().checkpointer(saver.clone()))
        .unwrap();
    let good = RunConfig::thread("t");
    graph.invoke(Flow::default(), &good).await.unwrap();
    let stored = graph
        .get_state_history(&good, History::default())
        .await
        .unwrap()
        .len();
    let bad_configs = [
        RunConfig::default().configurable("thread_id", 5),
        good.clone().configurable("checkpoint_id", 7),
        good.clone().configurable("checkpoint_ns", json!(["x"])),
        good.clone().configurable("thread_id", true),
    ];
    for config in &bad_configs {
        let mut got = vec![
            graph.invoke(Flow::default(), config).await.map(drop),
            graph.continue_run(config).await.map(drop),
            graph.get_state(config).await.map(drop),
            graph
                .get_state_history(config, History::default())
                .await
                .map(drop),
            graph.at_version(config, 1).await.map(drop),
            graph
                .update_state(config, FlowUpdate::default().route("x"), Some("a"))
                .await
                .map(drop),
        ];
        let mut stream = graph.stream(Flow::default(), config);
        let mut last = None;
        while let Some(item) = futures_util::StreamExt::next(&mut stream).await {
            last = Some(item);
        }
        match last {
            Some(weaver::StreamItem::Done(r)) => got.push(r.map(drop)),
            other => panic!("the stream ended without `Done`: {other:?}"),
        }
        for (i, r) in got.iter().enumerate() {
            match r {
                Err(Error::InvalidConfig { reason }) => {
                    assert!(reason.contains("must be a string"), "call {i}: {reason}")
                }
                other => panic!("{config:?}, call {i}: {other:?}"),
            }
        }
        // The JSON form says the same.
        assert!(matches!(
            RunConfig::from_json(&config.to_json()),
            Err(Error::InvalidConfig { .. })
        ));
    }
    let after = graph
        .get_state_history(&good, History::default())
        .await
        .unwrap()
        .len();
    assert_eq!(after, stored, "a refused call wrote a checkpoint");
    // The last call for a key decides it: a string after a number, or null.
    let fixed = RunConfig::default()
        .configurable("thread_id", 5)
        .configurable("thread_id", "t");
    assert_eq!(fixed.thread_id(), Some("t"));
    assert!(fixed.get_configurable().is_empty());
    assert_eq!(graph.get_state(&fixed).await.unwrap().values.log, ["a"]);
    let cleared = good
        .clone()
        .checkpoint_id("c")
        .configurable("checkpoint_id", Value::Null);
    assert_eq!(cleared.get_checkpoint_id(), None);
    let unset = good.clone().configurable("thread_id", Value::Null);
    assert!(matches!(
        graph.get_state(&unset).await,
        Err(Error::MissingThreadId)
    ));
}

/// A stop after a node that leads to END is resumed by its id, as any
/// other static stop, and the run completes.
#[tokio::test]
async fn a_stop_after_the_last_node_resumes_by_its_id() {
    let graph = Graph::<Flow>::new("Flow")
        .add_node("a", a)
        .add_sequence([START, "a", END])
        .interrupt_after(["a"])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("end-stop");
    let Outcome::Interrupted(stops) = graph.invoke(Flow::default(), &config).await.unwrap() else {
        panic!("expected a stop after `a`");
    };
    let answers = stops.iter().map(|i| (i.id.clone(), Value::Null)).collect();
    let out = graph
        .invoke(Input::Resume(weaver::Resume::Map(answers)), &config)
        .await
        .unwrap();
    assert!(matches!(out, Outcome::Complete(_)), "{out:?}");
}

#[test]
fn from_json_top_level_addressing_keys_agree_with_to_json() {
    // LangGraph's `ensure_config` moves unknown top-level keys into
    // `configurable`, where they override its entries: a top-level
    // `thread_id` addresses the thread. Parsing and printing again must
    // not change which thread and checkpoint a config addresses.
    let v = json!({
        "configurable": {"thread_id": "inner", "checkpoint_id": "c1"},
        "thread_id": "outer",
        "checkpoint_ns": "ns",
    });
    let config = RunConfig::from_json(&v).unwrap();
    assert_eq!(config.thread_id(), Some("outer"));
    assert_eq!(config.ns(), "ns");
    assert_eq!(config.get_checkpoint_id(), Some("c1"));
    let back = RunConfig::from_json(&config.to_json()).unwrap();
    assert_eq!(
        (back.thread_id(), back.ns(), back.get_checkpoint_id()),
        (config.thread_id(), config.ns(), config.get_checkpoint_id())
    );
    let only_top = RunConfig::from_json(&json!({"thread_id": "t"})).unwrap();
    assert_eq!(only_top.thread_id(), Some("t"));
    assert!(only_top.get_configurable().get("thread_id").is_none());
}

/// A run on a thread id or a namespace longer than every saver stores is
/// refused before anything is written (no lease, no checkpoint), with the
/// error each saver gives for such a record; one at the limit runs.
#[tokio::test]
async fn a_thread_id_past_the_savers_limit_is_refused_before_the_run() {
    use weaver::checkpoint::limits::MAX_ID_BYTES;
    let saver = InMemorySaver::new();
    let g = Graph::<Flow>::new("g")
        .add_node("a", a)
        .add_sequence([START, "a", END])
        .compile(Compile::new().checkpointer(saver.clone()))
        .unwrap();
    let at_limit = "t".repeat(MAX_ID_BYTES);
    g.invoke(Flow::default(), &RunConfig::thread(at_limit.clone()))
        .await
        .unwrap();
    let long = "t".repeat(MAX_ID_BYTES + 1);
    for config in [
        RunConfig::thread(long.clone()),
        RunConfig::thread("t").checkpoint_ns(long.clone()),
    ] {
        let refused = g.invoke(Flow::default(), &config).await;
        assert!(
            matches!(refused, Err(Error::LimitExceeded { .. })),
            "{refused:?}"
        );
    }
    assert!(saver.thread_info(&long).await.unwrap().is_none());
    assert!(
        saver
            .leases()
            .unwrap()
            .lease_info(&long)
            .await
            .unwrap()
            .is_none()
    );
}

/// `update_state` under `expect_head` is refused when the thread's head is
/// another, as a run is, and stores nothing. (It wrote on top of the head
/// it was told not to act on.)
#[tokio::test]
async fn update_state_checks_the_expected_head() {
    let graph = chain(Compile::new());
    let config = RunConfig::thread("t");
    graph.invoke(Flow::default(), &config).await.unwrap();
    let head = graph.get_state(&config).await.unwrap().commit_order;
    let stale = graph
        .update_state(
            &config.clone().expect_head(0),
            FlowUpdate::default().route("x"),
            None,
        )
        .await;
    assert!(
        matches!(stale, Err(Error::VersionConflict { attempted: 1, .. })),
        "{stale:?}"
    );
    assert_eq!(graph.get_state(&config).await.unwrap().commit_order, head);
    graph
        .update_state(
            &config.clone().expect_head(head),
            FlowUpdate::default().route("x"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(graph.get_state(&config).await.unwrap().values.route, "x");
}
