//! Streaming (fan-out, failures, interrupts, cancellation, recursion limit),
//! `Runtime::interrupt` called several times, interrupt values that do not
//! encode, the store from nodes across threads, and run metadata in
//! checkpoints.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use serde_json::json;
use weaver::checkpoint::SqliteSaver;
use weaver::prelude::*;
use weaver::{Saver, StreamEvent, StreamItem};
use weaver_tests::states::{Steps, StepsUpdate};

use crate::common::{Runs, collect, two_step};

/// An SQLite file, removed on drop.
struct Db(String);
impl Db {
    async fn new() -> (Self, SqliteSaver) {
        let path = std::env::temp_dir().join(format!("weaver-api-{}.db", uuid::Uuid::now_v7()));
        let db = Db(path.display().to_string());
        let saver = SqliteSaver::connect(&format!("sqlite://{}", db.0))
            .await
            .unwrap();
        (db, saver)
    }
}
impl Drop for Db {
    fn drop(&mut self) {
        for s in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{s}", self.0));
        }
    }
}

/// The in-memory saver and an SQLite file (async durability by default).
async fn savers() -> Vec<(&'static str, Arc<dyn Saver>, Option<Db>)> {
    let (db, sqlite) = Db::new().await;
    let memory: Arc<dyn Saver> = Arc::new(InMemorySaver::new());
    vec![
        ("memory", memory, None),
        ("sqlite", Arc::new(sqlite), Some(db)),
    ]
}

/// START → [p, q] → join → END. `q` waits 50 ms, then fails or interrupts
/// when told to; `p` finishes at once.
fn fan(q_mode: &'static str) -> CompiledGraph<Steps> {
    let q = move |_: &Steps, rt: &Runtime| {
        let asked = (q_mode == "interrupt").then(|| rt.interrupt("q?"));
        async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            match (q_mode, asked) {
                ("fail", _) => Err(NodeError::msg("q failed")),
                (_, Some(Err(signal))) => Err(signal.into()),
                _ => Ok(StepsUpdate::default().bar(["q"])),
            }
        }
    };
    Graph::<Steps>::new("Fan")
        .add_node("p", |_: &Steps| StepsUpdate::default().bar(["p"]))
        .add_node("q", q)
        .add_node("join", |_: &Steps| StepsUpdate::default().bar(["join"]))
        .add_edge(START, "p")
        .add_edge(START, "q")
        .add_edge("p", "join")
        .add_edge("q", "join")
        .add_edge("join", END)
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap()
}

#[tokio::test]
async fn stream_of_a_fan_out_orders_updates_values_and_ends_with_done() {
    let (seen, result) = collect(fan("ok").stream(Steps::default(), &RunConfig::thread("f"))).await;
    let want = "v0: u1:p u1:q v1:p,q u2:join v2:p,q,join";
    assert_eq!(seen.join(" "), want);
    assert_eq!(result.unwrap().complete().unwrap().bar, ["p", "q", "join"]);
}

#[tokio::test]
async fn stream_shows_a_finished_siblings_update_when_another_node_fails_or_interrupts() {
    // LangGraph streams each task's writes as the task finishes: `p`'s update
    // is seen even though `q`, in the same step, then fails or interrupts.
    let mut missing = Vec::new();
    for mode in ["fail", "interrupt"] {
        let (seen, result) =
            collect(fan(mode).stream(Steps::default(), &RunConfig::thread("f"))).await;
        match (mode, &result) {
            ("fail", Err(Error::NodeFailed { node, .. })) => assert_eq!(node, "q"),
            ("interrupt", Ok(Outcome::Interrupted(i))) => assert_eq!(i[0].node, "q"),
            _ => panic!("{mode}: {result:?}"),
        }
        assert!(!seen.iter().any(|e| e.starts_with("v1")), "{seen:?}");
        if !seen.iter().any(|e| e == "u1:p") {
            missing.push(format!("{mode}: events {seen:?}"));
        }
    }
    assert!(missing.is_empty(), "`p`'s update not streamed: {missing:?}");
}

/// START → draft → ask → END; `ask` asks `questions` in turn and appends
/// the answers.
fn asking(questions: &'static [&str], saver: Arc<dyn Saver>, runs: &Runs) -> CompiledGraph<Steps> {
    let r = runs.clone();
    let ask = move |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
        r.hit("ask");
        let answers: Result<Vec<_>, _> = questions.iter().map(|q| rt.interrupt(q)).collect();
        let answers = answers?
            .into_iter()
            .map(|a| a.as_str().unwrap_or("?").to_owned());
        Ok(StepsUpdate::default().bar(answers))
    };
    Graph::<Steps>::new("Ask")
        .add_node("draft", |_: &Steps| StepsUpdate::default().bar(["draft"]))
        .add_node("ask", ask)
        .add_sequence([START, "draft", "ask", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

#[tokio::test]
async fn streamed_interrupt_then_streamed_resume() {
    let runs = Runs::default();
    let graph = asking(&["ok?"], Arc::new(InMemorySaver::new()), &runs);
    let config = RunConfig::thread("a");
    let (seen, result) = collect(graph.stream(Steps::default(), &config)).await;
    let want = "v0: u1:draft v1:draft i:ask";
    assert_eq!(seen.join(" "), want);
    let pending = result.unwrap().interrupts().to_vec();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].value, json!("ok?"));
    let (seen, result) = collect(graph.stream(Input::Resume(json!("yes").into()), &config)).await;
    // The state it resumes from first, as LangGraph streams it.
    assert_eq!(seen, ["v1:draft", "u2:ask", "v2:draft,yes"]);
    assert_eq!(result.unwrap().complete().unwrap().bar, ["draft", "yes"]);
    assert_eq!(runs.get("ask"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_on_sqlite_can_be_continued_at_once() {
    // START → a → b; `b` hangs on the first run. The stream is dropped as
    // soon as the state after `a` is seen, and the thread is continued
    // straight away, as an application would. Ten threads, one at a time.
    // Odd threads are continued by a second graph compiled over the same
    // saver (as a server compiling per request would).
    let (_db, saver) = Db::new().await;
    let saver: Arc<dyn Saver> = Arc::new(saver);
    let runs = Runs::default();
    let hang = Arc::new(AtomicBool::new(true));
    let build = |saver: Arc<dyn Saver>| {
        let (r1, h) = (runs.clone(), hang.clone());
        Graph::<Steps>::new("Drop")
            .add_node("a", move |_: &Steps, rt: &Runtime| {
                r1.hit(rt.config().thread_id().unwrap());
                StepsUpdate::default().bar(["a"])
            })
            .add_node("b", move |_: &Steps| {
                let hang = h.load(Ordering::SeqCst);
                async move {
                    if hang {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    StepsUpdate::default().bar(["b"])
                }
            })
            .add_sequence([START, "a", "b", END])
            .compile(Compile::new().checkpointer_arc(saver))
            .unwrap()
    };
    let (graph, other) = (build(saver.clone()), build(saver));
    let mut bad = Vec::new();
    for t in 0..10 {
        let config = RunConfig::thread(format!("d{t}"));
        hang.store(true, Ordering::SeqCst);
        let mut stream = graph.stream(Steps::default(), &config);
        while let Some(item) = stream.next().await {
            if let StreamItem::Event(StreamEvent::Values { step: 1, .. }) = item {
                break;
            }
        }
        drop(stream);
        hang.store(false, Ordering::SeqCst);
        let continuing = if t % 2 == 0 { &graph } else { &other };
        let end = continuing.continue_run(&config).await;
        let end = end.map(|o| o.complete().unwrap().bar);
        let runs_of_a = runs.get(&format!("d{t}"));
        if !matches!(&end, Ok(bar) if bar == &["a", "b"]) || runs_of_a != 1 {
            bad.push(format!("d{t}: {end:?}, `a` ran {runs_of_a} times"));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn stream_outside_a_tokio_runtime_is_not_a_panic() {
    let graph = two_step(&InMemorySaver::new());
    // `invoke` runs on any executor (the engine writes in line without tokio)...
    let out = graph
        .invoke(Steps::default(), &RunConfig::thread("x"))
        .now_or_never();
    assert_eq!(out.unwrap().unwrap().complete().unwrap().bar, ["a", "b"]);
    // ...but `stream` spawns onto tokio.
    let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        drop(graph.stream(Steps::default(), &RunConfig::thread("y")));
    }));
    assert!(
        made.is_ok(),
        "CompiledGraph::stream panicked outside a tokio runtime"
    );
}

#[tokio::test]
async fn three_interrupts_in_one_node_resumed_one_at_a_time() {
    for (label, saver, _db) in savers().await {
        let runs = Runs::default();
        let graph = asking(&["first?", "second?", "third?"], saver, &runs);
        let config = RunConfig::thread("t");
        let mut out = graph.invoke(Steps::default(), &config).await.unwrap();
        let mut ids = Vec::new();
        for (k, (question, answer)) in [("first?", "1"), ("second?", "2"), ("third?", "3")]
            .into_iter()
            .enumerate()
        {
            let pending = out.interrupts().to_vec();
            assert_eq!(pending.len(), 1, "{label} #{k}: {pending:?}");
            assert_eq!(pending[0].value, json!(question), "{label} #{k}");
            let snap = graph.get_state(&config).await.unwrap();
            assert_eq!(snap.interrupts, pending, "{label} #{k}: snapshot");
            assert!(!ids.contains(&pending[0].id), "{label} #{k}: id reused");
            if let Some(old) = ids.last() {
                // An answered interrupt cannot be answered again.
                let again = Resume::Map([(String::clone(old), json!(0))].into());
                let err = graph.resume(again, &config).await.unwrap_err();
                assert!(
                    matches!(err, Error::UnknownInterrupt { .. }),
                    "{label}: {err}"
                );
            }
            ids.push(pending[0].id.clone());
            out = graph.resume(json!(answer), &config).await.unwrap();
        }
        let bar = out.complete().unwrap().bar;
        assert_eq!(bar, ["draft", "1", "2", "3"], "{label}");
        assert_eq!(runs.get("ask"), 4, "{label}");
    }
}

#[tokio::test]
async fn interrupt_values_that_do_not_encode_are_typed_errors() {
    // A map with non-string keys cannot be JSON; NaN would be stored as null.
    // A state with either is refused with a typed error; an interrupt value
    // should be too, not replaced by a value the user never wrote.
    let graph = Graph::<Steps>::new("Bad")
        .add_node(
            "ask",
            |s: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
                match s.foo.as_str() {
                    "map" => rt.interrupt(HashMap::from([((1u8, 2u8), "x")]))?,
                    _ => rt.interrupt(vec![f64::NAN])?,
                };
                Ok(StepsUpdate::default())
            },
        )
        .add_sequence([START, "ask", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let mut wrong = Vec::new();
    for case in ["map", "nan"] {
        let input = StepsUpdate::default().foo(case);
        if let Ok(out) = graph.invoke(input, &RunConfig::thread(case)).await {
            wrong.push(format!("{case}: {:?}", out.interrupts()[0].value));
        }
    }
    assert!(
        wrong.is_empty(),
        "paused with a substituted value: {wrong:?}"
    );
}

/// One node: `remember <fact>` stores the fact for user `u`; anything else
/// searches the user's facts and appends the best one.
fn memory_graph(store: Option<Arc<dyn Store>>) -> CompiledGraph<Steps> {
    let node = |s: &Steps, rt: &Runtime| {
        let (msg, store, key) = (s.foo.clone(), rt.store().cloned(), rt.task_id().to_owned());
        async move {
            let Some(store) = store else {
                return Ok(StepsUpdate::default().bar(["no store"]));
            };
            if let Some(fact) = msg.strip_prefix("remember ") {
                let value = json!({ "memory": fact });
                store.put(&["users", "u", "memories"], &key, value).await?;
                return Ok(StepsUpdate::default().bar(["noted"]));
            }
            let hits = store
                .search(&["users", "u"], Search::query(msg).limit(1))
                .await?;
            let best = hits.first().and_then(|h| h.value["memory"].as_str());
            Ok::<_, NodeError>(StepsUpdate::default().bar([best.unwrap_or("nothing")]))
        }
    };
    let mut compile = Compile::new().checkpointer(InMemorySaver::new());
    if let Some(store) = store {
        compile = compile.store_arc(store);
    }
    let graph = Graph::<Steps>::new("Memory").add_node("mem", node);
    graph
        .add_sequence([START, "mem", END])
        .compile(compile)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_is_reachable_from_nodes_across_threads_and_tasks() {
    let store: Arc<dyn Store> = Arc::new(InMemoryStore::new());
    let graph = memory_graph(Some(store.clone()));
    let run = |g: CompiledGraph<Steps>, msg: String, thread: String| {
        tokio::spawn(async move {
            let config = RunConfig::thread(thread);
            let out = g.invoke(StepsUpdate::default().foo(msg), &config);
            out.await.unwrap().complete().unwrap().bar
        })
    };
    // Three conversations store facts at once, on tokio worker threads...
    let facts = ["pizza basil", "jazz piano", "otters swim"];
    let puts: Vec<_> = (facts.iter().enumerate())
        .map(|(i, f)| run(graph.clone(), format!("remember {f}"), format!("w{i}")))
        .collect();
    for p in puts {
        assert_eq!(p.await.unwrap(), ["noted"]);
    }
    // ...and a fourth finds one of them.
    let found = run(graph.clone(), "which piano".into(), "reader".into());
    assert_eq!(found.await.unwrap(), ["jazz piano"]);
    assert_eq!(
        store.search(&["users"], Search::new()).await.unwrap().len(),
        3
    );
    // Without a store, nodes see none.
    let none = run(memory_graph(None), "x".into(), "n".into());
    assert_eq!(none.await.unwrap(), ["no store"]);
}

#[tokio::test]
async fn run_metadata_reaches_every_checkpoint_the_run_writes() {
    for (label, saver, _db) in savers().await {
        let graph = asking(&["ok?"], saver, &Runs::default());
        let base = RunConfig::thread("m");
        graph
            .invoke(Steps::default(), &base.clone().metadata("run", "r1"))
            .await
            .unwrap();
        graph
            .resume(json!("yes"), &base.clone().metadata("run", "r2"))
            .await
            .unwrap();
        graph
            .update_state(
                &base.clone().metadata("run", "r3"),
                StepsUpdate::default().foo("x"),
                None,
            )
            .await
            .unwrap();
        let history = graph.get_state_history(&base, History::default());
        let got: Vec<String> = (history.await.unwrap().iter().rev())
            .map(|s| {
                format!(
                    "{}:{}:{}",
                    s.step().unwrap(),
                    s.source().unwrap(),
                    s.metadata.as_ref().unwrap().extra["run"]
                )
            })
            .collect();
        let want = r#"-1:input:"r1" 0:loop:"r1" 1:loop:"r1" 2:loop:"r2" 3:update:"r3""#;
        assert_eq!(got.join(" "), want, "{label}");
    }
}

#[tokio::test]
async fn metadata_keys_named_like_engine_fields_keep_the_thread_readable() {
    // LangGraph merges user metadata under the engine's own keys (`step`,
    // `source`, `parents` win). Either refuse such keys with a typed error or
    // keep the engine's values; a thread that can no longer be read or
    // continued is neither.
    let mut bad = Vec::new();
    for (label, saver, _db) in savers().await {
        let graph = Graph::<Steps>::new("Meta")
            .add_node("a", |_: &Steps| StepsUpdate::default().bar(["a"]))
            .add_sequence([START, "a", END])
            .compile(Compile::new().checkpointer_arc(saver))
            .unwrap();
        let config = RunConfig::thread("k")
            .metadata("step", "mine")
            .metadata("source", "me");
        match graph.invoke(Steps::default(), &config).await {
            Err(Error::InvalidConfig { .. } | Error::InvalidArgument { .. }) => continue,
            Err(e) => bad.push(format!("{label}: invoke: {e}")),
            Ok(out) => assert_eq!(out.complete().unwrap().bar, ["a"], "{label}"),
        }
        let latest = RunConfig::thread("k");
        let snap = graph
            .get_state(&latest)
            .await
            .map(|s| (s.step(), s.source()));
        let history = History::default().filter("step", 1);
        let history = graph
            .get_state_history(&latest, history)
            .await
            .map(|h| h.len());
        let again = graph
            .invoke(Steps::default(), &latest)
            .await
            .map(|o| o.complete().unwrap().bar.len());
        let got = format!("{snap:?} / {history:?} / {again:?}");
        if got != "Ok((Some(1), Some(\"loop\"))) / Ok(1) / Ok(2)" {
            bad.push(format!(
                "{label}: get_state / history(step=1) / next invoke: {got}"
            ));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[tokio::test]
async fn recursion_limit_while_streaming_ends_the_stream_and_the_thread_continues() {
    let graph = Graph::<Steps>::new("Loop")
        .add_node("spin", |_: &Steps| StepsUpdate::default().bar(["s"]))
        .add_edge(START, "spin")
        .add_conditional_edges(
            "spin",
            |s: &Steps| if s.bar.len() >= 5 { END } else { "spin" },
            ["spin", END],
        )
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("r").recursion_limit(3);
    let (seen, result) = collect(graph.stream(Steps::default(), &config)).await;
    // START's step and three of nodes; the error comes at the boundary
    // after the fourth, one past the limit, as LangGraph counts.
    let want = "v0: u1:spin v1:s u2:spin v2:s,s u3:spin v3:s,s,s";
    assert_eq!(seen.join(" "), want);
    assert!(
        matches!(result, Err(Error::RecursionLimit { limit: 3 })),
        "{result:?}"
    );
    let snap = graph.get_state(&config).await.unwrap();
    assert_eq!(
        (snap.step(), snap.next.clone()),
        (Some(3), vec!["spin".to_owned()])
    );
    let (seen, result) =
        collect(graph.stream(Input::Continue, &config.clone().recursion_limit(10))).await;
    // The state it goes on from, then two more steps.
    assert_eq!(
        seen,
        [
            "v3:s,s,s",
            "u4:spin",
            "v4:s,s,s,s",
            "u5:spin",
            "v5:s,s,s,s,s"
        ]
    );
    assert_eq!(result.unwrap().complete().unwrap().bar.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_turn_after_a_dropped_stream_waits_for_it_in_memory() {
    let saver: std::sync::Arc<dyn weaver::Saver> = std::sync::Arc::new(InMemorySaver::new());
    weaver_tests::dropped::the_next_turn_after_a_dropped_stream_waits_for_it(saver).await;
}

/// Reads across threads (every thread's checkpoints, the thread list, a
/// thread search) wait for what a dropped stream's run queued, as the
/// reads of its thread do. (They read the database at once, without it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_across_threads_wait_for_a_dropped_runs_writes() {
    use weaver::checkpoint::{ListFilter, ThreadQuery};
    use weaver_tests::forwarding::Forwarding;
    let watched = Arc::new(Forwarding::default());
    let saver: Arc<dyn Saver> = watched.clone();
    let g = Graph::<Steps>::new("g")
        .add_node("a", |_: &Steps| StepsUpdate::default().bar(["a"]))
        .add_sequence([START, "a", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap();
    let writes = watched.gate_writes();
    let config = RunConfig::thread("t").durability(Durability::Async);
    let stream = g.stream(StepsUpdate::default().foo("x"), &config);
    writes.entered.notified().await;
    drop(stream);
    let cp = g.checkpointer().unwrap().clone();
    let reads = tokio::spawn(async move {
        let threads = cp.list_threads(None, 0).await.unwrap();
        let records = cp.list_records(&ListFilter::all()).await.unwrap();
        let page = cp.search_threads(&ThreadQuery::new()).await.unwrap();
        (threads.len(), records.len(), page.threads.len())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !reads.is_finished(),
        "a read across threads did not wait for the queued writes"
    );
    writes.open.add_permits(1_000);
    let (threads, records, found) = reads.await.unwrap();
    assert_eq!((threads, found), (1, 1));
    assert!(records >= 1, "{records}");
}

/// A stream dropped on a thread outside any runtime's context (a UI
/// thread, say) still makes the next call on the run's thread wait until
/// the run stopped. (Its task was left running with nothing to wait for.)
#[test]
fn a_stream_dropped_outside_a_runtime_still_makes_the_next_call_wait() {
    use std::time::Instant;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (started, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let g = Graph::<Steps>::new("g")
        .add_node("slow", {
            let (started, release) = (started.clone(), release.clone());
            move |_: &Steps| {
                started.store(true, Ordering::SeqCst);
                // Blocks its worker: the run cannot be cancelled meanwhile.
                let start = Instant::now();
                while !release.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(20) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                StepsUpdate::default().bar(["slow"])
            }
        })
        .add_node("fast", |_: &Steps| StepsUpdate::default().bar(["fast"]))
        .add_sequence([START, "slow", "fast", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("t");
    let stream = {
        let _inside = rt.enter();
        g.stream(StepsUpdate::default().foo("x"), &config)
    };
    let start = Instant::now();
    while !started.load(Ordering::SeqCst) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "`slow` never began"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(stream);
    let read = rt.spawn({
        let (g, config) = (g.clone(), config.clone());
        async move { g.get_state(&config).await }
    });
    std::thread::sleep(Duration::from_millis(100));
    let early = read.is_finished();
    release.store(true, Ordering::SeqCst);
    let state = rt.block_on(read).unwrap().unwrap();
    assert!(!early, "the read did not wait for the dropped run to stop");
    assert_eq!(state.values.bar, ["slow"], "the run stopped after `slow`");
}

/// A state counting a subgraph's turns.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Turns {
    #[reducer(add)]
    n: u64,
}

/// A dropped stream stops a run whose current step runs a subgraph at the
/// subgraph's next step boundary, even when the subgraph's nodes block and
/// nothing it awaits suspends: the subgraph does not go on to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_stops_a_subgraph_at_its_next_step() {
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = ran.clone();
    let inner = Graph::<Turns>::new("inner")
        .add_node("think", move |_: &Turns| {
            counted.fetch_add(1, Ordering::SeqCst);
            // A blocking call (a synchronous HTTP client, say).
            std::thread::sleep(Duration::from_millis(10));
            TurnsUpdate::default().n(1u64)
        })
        .add_edge(START, "think")
        .add_conditional_edges(
            "think",
            |s: &Turns| if s.n >= 40 { END } else { "think" },
            ["think", END],
        )
        .compile(Compile::new())
        .unwrap();
    let outer = Graph::<Turns>::new("outer")
        .add_subgraph("agent", inner)
        .add_sequence([START, "agent", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("t").recursion_limit(100);
    let mut stream = outer.stream(Turns::default(), &config);
    let first = stream.next().await.unwrap();
    assert!(matches!(
        first,
        StreamItem::Event(StreamEvent::Values { .. })
    ));
    // Well inside the subgraph's forty steps.
    while ran.load(Ordering::SeqCst) < 3 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    drop(stream);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let steps = ran.load(Ordering::SeqCst);
    assert!(steps < 40, "the subgraph ran all its {steps} steps");
}

/// Copying or forking onto a thread waits for what a dropped stream's run
/// queued on it, as the source's queued writes are waited for: the copy
/// finds the thread taken (`ThreadExists`). (It found the target empty
/// and copied; the dropped run's checkpoint then failed to land.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_onto_a_thread_waits_for_a_dropped_runs_writes() {
    use weaver::checkpoint::{CheckpointRef, ForkOptions};
    use weaver_tests::forwarding::Forwarding;
    let watched = Arc::new(Forwarding::default());
    let saver: Arc<dyn Saver> = watched.clone();
    let g = Graph::<Steps>::new("g")
        .add_node("a", |_: &Steps| StepsUpdate::default().bar(["a"]))
        .add_sequence([START, "a", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap();
    g.invoke(
        StepsUpdate::default().foo("x"),
        &RunConfig::thread("source"),
    )
    .await
    .unwrap();
    let writes = watched.gate_writes();
    let config = RunConfig::thread("b").durability(Durability::Async);
    let stream = g.stream(StepsUpdate::default().foo("x"), &config);
    writes.entered.notified().await;
    drop(stream);
    let cp = g.checkpointer().unwrap().clone();
    let head = cp
        .get_tuple(&CheckpointRef::latest("source"))
        .await
        .unwrap()
        .unwrap()
        .config;
    let copies = tokio::spawn(async move {
        let copied = cp.copy_thread("source", "b").await;
        let forked = cp
            .fork_at(&head, "b", ForkOptions::default())
            .await
            .map(|_| ());
        (copied, forked)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    writes.open.add_permits(1_000);
    let (copied, forked) = copies.await.unwrap();
    assert!(
        matches!(copied, Err(Error::ThreadExists { .. })),
        "{copied:?}"
    );
    assert!(
        matches!(forked, Err(Error::ThreadExists { .. })),
        "{forked:?}"
    );
}
