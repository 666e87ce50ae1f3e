//! Adversarial runtime tests: retries, partial resumes, cancellation, panics
//! in user callbacks, unencodable state, storage limits, edge-case inputs.
//! Tests with several expectations record every mismatch (`Bad`) and fail
//! once at the end, so one run shows the whole behaviour.

use std::fmt::Debug;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use serde_json::json;
use weaver::checkpoint::{ListFilter, SqliteSaver};
use weaver::prelude::*;
use weaver::{Saver, StreamEvent, StreamItem};
use weaver_tests::states::{Steps, StepsUpdate};

use crate::common::{Runs, two_step};

/// Mismatches recorded so far; `verdict` fails with all of them.
#[derive(Default)]
struct Bad(Vec<String>);
impl Bad {
    fn eq<T: PartialEq<U> + Debug, U: Debug>(&mut self, what: &str, got: T, want: U) {
        if got != want {
            let msg = format!("{what}: got {got:?}, expected {want:?}");
            self.0.push(msg);
        }
    }
    fn push(&mut self, msg: String) {
        self.0.push(msg);
    }
}

fn verdict(bad: Bad) {
    assert!(bad.0.is_empty(), "{:#?}", bad.0);
}

/// The final state of a run that must complete.
fn done<S: GraphState>(r: weaver::Result<Outcome<S>>) -> S {
    r.unwrap().complete().unwrap()
}

async fn hist(g: &CompiledGraph<Steps>, c: &RunConfig, o: History) -> Vec<StateSnapshot<Steps>> {
    g.get_state_history(c, o).await.unwrap()
}

fn ids(s: &[StateSnapshot<Steps>]) -> Vec<Option<&str>> {
    s.iter().map(|s| s.config.get_checkpoint_id()).collect()
}

/// A fresh SQLite file, removed on drop.
struct Db(PathBuf);
impl Db {
    fn new() -> Self {
        let name = format!("weaver-adv-{}.db", uuid::Uuid::now_v7());
        Db(std::env::temp_dir().join(name))
    }
    async fn saver(&self) -> SqliteSaver {
        let url = format!("sqlite://{}", self.0.display());
        SqliteSaver::connect(&url).await.unwrap()
    }
}
impl Drop for Db {
    fn drop(&mut self) {
        for s in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{s}", self.0.display()));
        }
    }
}

/// (label, saver, file guard): the in-memory saver and an SQLite file.
async fn savers() -> Vec<(&'static str, Arc<dyn Saver>, Option<Db>)> {
    let db = Db::new();
    let sqlite: Arc<dyn Saver> = Arc::new(db.saver().await);
    let memory: Arc<dyn Saver> = Arc::new(InMemorySaver::new());
    vec![("memory", memory, None), ("sqlite", sqlite, Some(db))]
}

/// START → every (name, failures-before-success) in parallel → join → END.
fn flaky_fan(
    runs: &Runs,
    nodes: &[(&'static str, usize)],
    saver: Arc<dyn Saver>,
) -> CompiledGraph<Steps> {
    let mut g = Graph::<Steps>::new("Flaky");
    for &(name, fails) in nodes {
        let runs = runs.clone();
        let node = move |_: &Steps| -> Result<StepsUpdate, NodeError> {
            runs.hit(name);
            if runs.get(name) <= fails {
                return Err(NodeError::msg(format!("{name} failed")));
            }
            Ok(StepsUpdate::default().bar([name]))
        };
        g = g.add_node(name, node).add_edge(START, name);
        g = g.add_edge(name, "join");
    }
    let runs = runs.clone();
    g.add_node("join", move |s: &Steps| {
        runs.hit("join");
        StepsUpdate::default().foo(format!("joined {}", s.bar.len()))
    })
    .add_edge("join", END)
    .compile(Compile::new().checkpointer_arc(saver))
    .unwrap()
}

#[tokio::test]
async fn a_task_that_failed_once_then_succeeded_is_not_rerun() {
    // `a` fails on attempt 1 only, `b` on attempts 1 and 2. After the second
    // run `a` has succeeded: the third run must reuse its write.
    let mut bad = Bad::default();
    for (label, saver, _db) in savers().await {
        let runs = Runs::default();
        let graph = flaky_fan(&runs, &[("a", 1), ("b", 2), ("c", 0)], saver);
        let l = |what: &str| format!("{label}: {what}");
        let config = RunConfig::thread("t");
        graph.invoke(Steps::default(), &config).await.unwrap_err();
        let err = graph.continue_run(&config).await.unwrap_err();
        assert!(
            matches!(&err, Error::NodeFailed { node, .. } if node == "b"),
            "{err}"
        );
        let snap = graph.get_state(&config).await.unwrap();
        bad.eq(&l("next"), snap.next.clone(), ["b"]);
        let a = snap.tasks.iter().find(|t| t.name == "a").unwrap();
        let a_state = (a.succeeded, a.error.as_deref());
        bad.eq(&l("a (succeeded, error)"), a_state, (true, None));
        let end = done(graph.continue_run(&config).await);
        assert_eq!(end.bar, ["a", "b", "c"], "{label}");
        let n = (runs.get("a"), runs.get("b"), runs.get("c"));
        bad.eq(&l("runs of (a, b, c)"), n, (2, 3, 1));
    }
    verdict(bad);
}

type Asker = dyn Fn(&Steps, &Runtime) -> Result<StepsUpdate, NodeError> + Send + Sync;

/// A node that asks `q` and appends `q=<answer>`.
fn ask(runs: &Runs, q: &'static str) -> Box<Asker> {
    let runs = runs.clone();
    Box::new(move |_: &Steps, rt: &Runtime| {
        runs.hit(q);
        let a = rt.interrupt(q)?;
        Ok(StepsUpdate::default().bar([format!("{q}={}", a.as_str().unwrap_or("?"))]))
    })
}

#[tokio::test]
async fn parallel_interrupts_resumed_one_at_a_time() {
    let runs = Runs::default();
    let graph = Graph::<Steps>::new("Parallel")
        .add_node("p", ask(&runs, "p"))
        .add_node("q", ask(&runs, "q"))
        .add_edge(START, "p")
        .add_edge(START, "q")
        .add_edge("p", END)
        .add_edge("q", END)
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("par");
    let out = graph.invoke(Steps::default(), &config).await.unwrap();
    let (p, q) = (out.interrupts()[0].clone(), out.interrupts()[1].clone());
    let nodes = |i: &[Interrupt]| i.iter().map(|i| i.node.clone()).collect::<Vec<_>>();
    // Answer only `p`: `q` stays paused.
    let mut bad = Bad::default();
    let answer_p = Resume::Map([(p.id.clone(), json!("yes"))].into());
    let out = graph.resume(answer_p, &config).await.unwrap();
    bad.eq("outcome interrupts", nodes(out.interrupts()), ["q"]);
    let snap = graph.get_state(&config).await.unwrap();
    bad.eq("snapshot interrupts", nodes(&snap.interrupts), ["q"]);
    bad.eq("snapshot next", snap.next.clone(), ["q"]);
    // One interrupt pending: a single value answers it.
    let end = match graph.resume(json!("no"), &config).await {
        Ok(Outcome::Complete(end)) => end,
        other => {
            bad.push(format!("single value, one pending interrupt: {other:?}"));
            let answer_q = Resume::Map([(q.id.clone(), json!("no"))].into());
            done(graph.resume(answer_q, &config).await)
        }
    };
    bad.eq("final bar", end.bar, ["p=yes", "q=no"]);
    bad.eq("runs of (p, q)", (runs.get("p"), runs.get("q")), (2, 3));
    verdict(bad);
}

/// z's output supplied by hand with `update_state` after x and y succeeded
/// and z failed, through the thread's config or (`naming_head`) the config
/// `get_state` returned, which names the latest checkpoint.
async fn update_after_a_partial_step(naming_head: bool) {
    let runs = Runs::default();
    let nodes = [("x", 0), ("y", 0), ("z", 1)];
    let graph = flaky_fan(&runs, &nodes, Arc::new(InMemorySaver::new()));
    let config = RunConfig::thread("t");
    graph.invoke(Steps::default(), &config).await.unwrap_err();
    let before = graph.get_state(&config).await.unwrap();
    assert_eq!(before.values.bar, ["x", "y"]);
    let target = if naming_head { &before.config } else { &config };
    let fix = StepsUpdate::default().bar(["z-by-hand"]);
    graph.update_state(target, fix, Some("z")).await.unwrap();
    let after = graph.get_state(&config).await.unwrap();
    let mut bad = Bad::default();
    let mut bar = after.values.bar.clone();
    bar.sort();
    bad.eq("state after update_state", bar, ["x", "y", "z-by-hand"]);
    bad.eq("next after update_state", after.next.clone(), ["join"]);
    let end = done(graph.continue_run(&config).await);
    bad.eq("final foo", end.foo.as_str(), "joined 3");
    let n = (runs.get("x"), runs.get("y"), runs.get("join"));
    bad.eq("runs of (x, y, join)", n, (1, 1, 1));
    verdict(bad);
}

#[tokio::test]
async fn update_state_on_the_latest_checkpoint_keeps_succeeded_pending_writes() {
    // LangGraph's update_state on the latest checkpoint applies the writes of
    // tasks that already succeeded; get_state shows them as the state.
    update_after_a_partial_step(false).await;
}

/// The same through the config `get_state` returned, which names the head:
/// naming the latest checkpoint is the latest (the finished tasks' writes
/// were dropped, and `x` and `y` ran again).
#[tokio::test]
async fn update_state_naming_the_head_keeps_succeeded_pending_writes() {
    update_after_a_partial_step(true).await;
}

fn review_graph(runs: &Runs) -> CompiledGraph<Steps> {
    Graph::<Steps>::new("Review")
        .add_node("draft", |_: &Steps| StepsUpdate::default().foo("draft"))
        .add_node("review", ask(runs, "review"))
        .add_sequence([START, "draft", "review", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap()
}

#[tokio::test]
async fn resume_after_update_state_on_an_interrupted_thread_is_not_silently_dropped() {
    let graph = review_graph(&Runs::default());
    let config = RunConfig::thread("r");
    let out = graph.invoke(Steps::default(), &config).await.unwrap();
    assert!(out.is_interrupted());
    let edit = StepsUpdate::default().foo("edited");
    graph.update_state(&config, edit, None).await.unwrap();
    assert_eq!(graph.get_state(&config).await.unwrap().next, ["review"]);
    // The pause belongs to the checkpoint before the edit: the answer is
    // refused with a typed error, never dropped (the guide's "resume after
    // an edit"). Going on asks again, and that question takes the answer.
    let refused = graph.resume(json!("approved"), &config).await;
    assert!(
        matches!(refused, Err(Error::NoPendingInterrupt { .. })),
        "{refused:?}"
    );
    let asked = graph.continue_run(&config).await.unwrap();
    assert!(asked.is_interrupted(), "{asked:?}");
    let done = graph.resume(json!("approved"), &config).await.unwrap();
    let done = done.complete().unwrap();
    assert_eq!(done.bar, ["review=approved"]);
    assert_eq!(done.foo, "edited");
}

#[tokio::test]
async fn exit_durability_stores_only_the_final_steps_writes() {
    let saver = InMemorySaver::new();
    let graph = two_step(&saver);
    let config = RunConfig::thread("t").durability(Durability::Exit);
    done(graph.invoke(Steps::default(), &config).await);
    let stored = saver.list(&ListFilter::thread("t")).await.unwrap();
    assert_eq!((stored.len(), stored[0].metadata.step), (1, 2));
    let writes = &stored[0].pending_writes;
    let writes: Vec<_> = writes.iter().map(|w| (&w.task_path, &w.channel)).collect();
    assert!(writes.is_empty(), "a finished run left writes {writes:?}");
}

mod callbacks {
    use super::*;

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct Scored {
        pub score: f64,
        #[reducer(self::touchy)]
        pub log: Vec<String>,
    }

    /// A user reducer that panics on a bad item.
    fn touchy(current: &mut Vec<String>, update: Vec<String>) {
        assert!(!update.iter().any(|u| u == "bad"), "reducer rejects `bad`");
        current.extend(update);
    }

    /// A panic in the future, or a result that is not `Error::NodeFailed`, is recorded.
    async fn expect_typed<T: Debug>(
        bad: &mut Bad,
        what: &str,
        f: impl Future<Output = weaver::Result<T>>,
    ) {
        match AssertUnwindSafe(f).catch_unwind().await {
            Err(_) => bad.push(format!("{what}: panicked instead of a typed weaver::Error")),
            Ok(Ok(v)) => bad.push(format!("{what}: expected an error, got {v:?}")),
            Ok(Err(Error::NodeFailed { .. })) => {}
            Ok(Err(e)) => bad.push(format!("{what}: {e}")),
        }
    }

    fn router(s: &Scored) -> &'static str {
        if s.score > 0.0 {
            panic!("router bug")
        } else {
            "b"
        }
    }

    #[tokio::test]
    async fn panicking_router_and_reducer_are_typed_errors() {
        let graph = Graph::<Scored>::new("Routes")
            .add_node("a", |_: &Scored| ScoredUpdate::default().score(1.0))
            .add_node("b", |_: &Scored| ScoredUpdate::default())
            .add_edge(START, "a")
            .add_conditional_edges("a", router, ["b"])
            .add_edge("b", END)
            .compile(Compile::new().checkpointer(InMemorySaver::new()))
            .unwrap();
        let config = RunConfig::thread("r");
        let mut bad = Bad::default();
        let run = graph.invoke(Scored::default(), &config);
        expect_typed(&mut bad, "router panic in invoke", run).await;
        let update = graph.update_state(&config, ScoredUpdate::default().score(2.0), Some("a"));
        expect_typed(&mut bad, "router panic in update_state", update).await;

        let graph = Graph::<Scored>::new("Reduces")
            .add_node("a", |_: &Scored| {
                ScoredUpdate::default().log(vec!["bad".into()])
            })
            .add_sequence([START, "a", END])
            .compile(Compile::new().checkpointer(InMemorySaver::new()))
            .unwrap();
        let run = graph.invoke(Scored::default(), &config);
        expect_typed(&mut bad, "reducer panic in invoke", run).await;
        verdict(bad);
        // The thread can still be inspected and updated: the failed step's
        // writes are not applied again. (Both failed with the reducer's
        // panic.)
        let state = graph.get_state(&config).await.unwrap();
        assert_eq!(state.next, ["a"]);
        assert!(state.tasks[0].error.is_some(), "{:?}", state.tasks);
        graph
            .update_state(&config, ScoredUpdate::default().score(3.0), Some("a"))
            .await
            .unwrap();
        assert_eq!(graph.get_state(&config).await.unwrap().values.score, 3.0);
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Sum {
        #[reducer(add)]
        total: f64,
    }

    #[tokio::test]
    async fn a_state_that_overflows_to_infinity_under_exit_is_stored_as_before_its_step() {
        // Each write is finite; their sum is not, so the step's state does
        // not encode. Under `exit` the run stores the checkpoint it stopped
        // at: as it was, its two tasks still to apply, their writes kept.
        let big = |_: &Sum| SumUpdate::default().total(1e308);
        let graph = Graph::<Sum>::new("Overflow")
            .add_node("x", big)
            .add_node("y", big)
            .add_edge(START, "x")
            .add_edge(START, "y")
            .add_edge("x", END)
            .add_edge("y", END)
            .compile(Compile::new().checkpointer(InMemorySaver::new()))
            .unwrap();
        let config = RunConfig::thread("inf").durability(Durability::Exit);
        let err = graph.invoke(Sum::default(), &config).await.unwrap_err();
        assert!(
            err.to_string().to_lowercase().contains("inf") || matches!(err, Error::Encode { .. }),
            "{err}"
        );
        let history = graph
            .get_state_history(&config, History::default())
            .await
            .unwrap();
        assert_eq!(history.len(), 1, "one checkpoint, at the step that failed");
        assert_eq!(
            history[0].next,
            ["x", "y"],
            "the failed step is still to run"
        );
        assert_eq!(history[0].tasks.iter().filter(|t| t.succeeded).count(), 2);
        assert_eq!(history[0].values.total, 0.0);
        // Going on meets the same failure, never a run that ends with the
        // writes dropped.
        let again = graph.continue_run(&config).await;
        assert!(matches!(again, Err(Error::Encode { .. })), "{again:?}");
    }

    #[tokio::test]
    async fn a_non_finite_float_never_leaves_an_unreadable_thread() {
        let graph = Graph::<Scored>::new("Nan")
            .add_node("a", |_: &Scored| ScoredUpdate::default().score(f64::NAN))
            .add_sequence([START, "a", END])
            .compile(Compile::new().checkpointer(InMemorySaver::new()))
            .unwrap();
        let config = RunConfig::thread("n");
        let ran = graph.invoke(Scored::default(), &config).await.err();
        // The node's NaN is its failure (an encode error), and the thread
        // stays readable: a new input runs the node again, which fails the
        // same way, never with a decode error of what was stored.
        let read = graph.get_state(&config).await.err();
        let next = ScoredUpdate::default().score(1.0);
        let again = graph.invoke(next, &config).await.err();
        let report = format!("run: {ran:?}; get_state: {read:?}; new input: {again:?}");
        let encode_failure = |e: &Option<Error>| matches!(e, Some(Error::NodeFailed { source, .. }) if source.to_string().contains("NaN"));
        assert!(
            encode_failure(&ran) && read.is_none() && encode_failure(&again),
            "{report}"
        );
    }
}

#[tokio::test]
async fn an_oversized_checkpoint_is_a_typed_error_and_keeps_node_writes() {
    // Each write fits the saver's record limit; the state with both does not.
    let mut bad = Bad::default();
    for mode in [Durability::Sync, Durability::Async] {
        let db = Db::new();
        let saver = db.saver().await.with_max_record_bytes(2_000);
        let runs = Runs::default();
        let mut g = Graph::<Steps>::new("Big");
        for name in ["x", "y"] {
            let runs = runs.clone();
            let node = move |_: &Steps| {
                runs.hit(name);
                StepsUpdate::default().bar([name.repeat(1_200)])
            };
            g = g.add_node(name, node).add_edge(START, name);
            g = g.add_edge(name, END);
        }
        let graph = g.compile(Compile::new().checkpointer(saver)).unwrap();
        let config = RunConfig::thread("big").durability(mode);
        let l = |what: &str| format!("{mode:?}: {what}");
        let err = graph.invoke(Steps::default(), &config).await.unwrap_err();
        assert!(
            matches!(err, Error::LimitExceeded { .. }),
            "{mode:?}: {err}"
        );
        let stored = hist(&graph, &config, History::default()).await.len();
        bad.eq(&l("checkpoints stored"), stored, 2);
        let snap = graph.get_state(&config).await.unwrap();
        let kept = snap.tasks.iter().filter(|t| t.succeeded).count();
        bad.eq(&l("tasks whose writes were kept"), kept, 2);
    }
    verdict(bad);
}

/// START → fast, slow in parallel → after → END; `slow` hangs while `hang` is set.
fn hanging(runs: &Runs, hang: Arc<AtomicBool>, saver: Arc<dyn Saver>) -> CompiledGraph<Steps> {
    let (r1, r2, r3) = (runs.clone(), runs.clone(), runs.clone());
    let slow = move |_: &Steps| {
        r2.hit("slow");
        let hang = hang.load(Ordering::SeqCst);
        async move {
            if hang {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            StepsUpdate::default().bar(["slow"])
        }
    };
    Graph::<Steps>::new("Hang")
        .add_node("fast", move |_: &Steps| {
            r1.hit("fast");
            StepsUpdate::default().bar(["fast"])
        })
        .add_node("slow", slow)
        .add_node("after", move |_: &Steps| {
            r3.hit("after");
            StepsUpdate::default().foo("after")
        })
        .add_edge(START, "fast")
        .add_edge(START, "slow")
        .add_edge("fast", "after")
        .add_edge("slow", "after")
        .add_edge("after", END)
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

#[tokio::test]
async fn a_cancelled_invoke_resumes_without_reruns_or_duplicates() {
    for (label, saver, _db) in savers().await {
        for mode in [Durability::Sync, Durability::Async] {
            let runs = Runs::default();
            let hang = Arc::new(AtomicBool::new(true));
            let graph = hanging(&runs, hang.clone(), saver.clone());
            let config = RunConfig::thread(format!("cancel-{mode:?}")).durability(mode);
            let run = graph.invoke(Steps::default(), &config);
            let r = tokio::time::timeout(Duration::from_millis(300), run).await;
            assert!(r.is_err(), "{label}/{mode:?}: should time out");
            hang.store(false, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(50)).await;
            let end = done(graph.continue_run(&config).await);
            assert_eq!(end.bar, ["fast", "slow"], "{label}/{mode:?}");
            let n = (runs.get("fast"), runs.get("slow"), runs.get("after"));
            assert_eq!(n, (1, 2, 1), "{label}/{mode:?}");
            // The thread is usable afterwards.
            let again = done(graph.invoke(StepsUpdate::default(), &config).await);
            assert_eq!(again.bar.len(), 4, "{label}/{mode:?}");
        }
    }
}

#[tokio::test]
async fn a_dropped_stream_stops_the_run_and_the_thread_resumes() {
    let runs = Runs::default();
    let hang = Arc::new(AtomicBool::new(true));
    let graph = hanging(&runs, hang.clone(), Arc::new(InMemorySaver::new()));
    let config = RunConfig::thread("s");
    let mut stream = graph.stream(Steps::default(), &config);
    // The run has started: the state after taking in the input comes first.
    let first = stream.next().await.unwrap();
    assert!(matches!(
        first,
        StreamItem::Event(StreamEvent::Values { step: 0, .. })
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(stream);
    hang.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(runs.get("after"), 0, "the run stopped");
    let end = done(graph.continue_run(&config).await);
    assert_eq!(end.bar, ["fast", "slow"]);
    assert_eq!((runs.get("fast"), runs.get("after")), (1, 1));
}

#[tokio::test]
async fn recursion_limit_at_the_boundary_and_resume_after_it() {
    // The two-step graph takes three super-steps from a new input (START's,
    // node_a's, node_b's), as LangGraph counts them.
    let graph = two_step(&InMemorySaver::new());
    let ok = RunConfig::thread("ok").recursion_limit(3);
    let end = done(graph.invoke(Steps::default(), &ok).await);
    assert_eq!(end.bar, ["a", "b"]);
    let short = RunConfig::thread("short").recursion_limit(1);
    let err = graph.invoke(Steps::default(), &short).await.unwrap_err();
    assert!(matches!(err, Error::RecursionLimit { limit: 1 }), "{err}");
    let snap = graph.get_state(&short).await.unwrap();
    assert_eq!(
        (&snap.next, &snap.values.bar),
        (&vec!["node_b".into()], &vec!["a".into()])
    );
    // Going on, with no input: node_b's step alone, within a limit of 1.
    let end = done(graph.continue_run(&short).await);
    assert_eq!(end.bar, ["a", "b"]);
    // Limit 0 is refused before anything is written.
    let zero = RunConfig::thread("zero").recursion_limit(0);
    let err = graph.invoke(Steps::default(), &zero).await.unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    assert!(graph.get_state(&zero).await.unwrap().metadata.is_none());
}

#[tokio::test]
async fn edge_case_inputs_are_typed_errors_and_write_nothing() {
    let graph = review_graph(&Runs::default());
    let fresh = graph.continue_run(&RunConfig::thread("fresh")).await;
    assert!(matches!(fresh, Err(Error::ThreadNotFound { .. })));
    let config = RunConfig::thread("r");
    let out = graph.invoke(Steps::default(), &config).await.unwrap();
    let id = out.interrupts()[0].id.clone();
    let count = async |g: &CompiledGraph<Steps>| hist(g, &config, History::default()).await.len();
    let n = count(&graph).await;
    // Unknown as_node and unknown interrupt ids write nothing.
    let ghost = graph.update_state(&config, StepsUpdate::default(), Some("ghost"));
    assert!(matches!(ghost.await, Err(Error::UnknownNode { .. })));
    let ghost = Resume::Map([("ghost".to_owned(), json!(1))].into());
    let e = graph.resume(ghost, &config).await.unwrap_err();
    assert!(matches!(e, Error::UnknownInterrupt { .. }), "{e}");
    assert_eq!(count(&graph).await, n);
    // Continue without answering: the node asks again with the same id.
    let again = graph.continue_run(&config).await.unwrap();
    assert_eq!(again.interrupts()[0].id, id);
    // As END: nothing left to run or to answer.
    let end = StepsUpdate::default().foo("ended");
    graph.update_state(&config, end, Some(END)).await.unwrap();
    let e = graph.resume(json!("late"), &config).await.unwrap_err();
    assert!(matches!(e, Error::NoPendingInterrupt { .. }), "{e}");
    let n = count(&graph).await;
    assert_eq!(done(graph.continue_run(&config).await).foo, "ended");
    assert_eq!(count(&graph).await, n, "continuing a finished thread");
    // As START: the graph runs again from the top.
    let restart = graph.update_state(&config, StepsUpdate::default(), Some(START));
    restart.await.unwrap();
    assert_eq!(graph.get_state(&config).await.unwrap().next, ["draft"]);
}

#[tokio::test]
async fn replays_fork_new_branches_and_history_filters_see_them() {
    for (label, saver, _db) in savers().await {
        let runs = Runs::default();
        let graph = flaky_fan(&runs, &[("x", 0), ("y", 0)], saver);
        let config = RunConfig::thread("t");
        graph.invoke(Steps::default(), &config).await.unwrap();
        let history = hist(&graph, &config, History::default()).await;
        let head = history[0].config.clone();
        let fan = history.iter().find(|s| s.next == ["x", "y"]).unwrap();
        let fan = fan.config.clone();
        for _ in 0..2 {
            assert_eq!(done(graph.continue_run(&fan).await).bar, ["x", "y"]);
        }
        let forks = History::default().filter("source", "fork");
        let forks = hist(&graph, &config, forks).await;
        assert_eq!(forks.len(), 2, "{label}");
        assert_ne!(ids(&forks)[0], ids(&forks)[1], "{label}: two branches");
        for f in &forks {
            let parent = f.parent_config.as_ref().unwrap().get_checkpoint_id();
            assert_eq!(parent, fan.get_checkpoint_id(), "{label}");
        }
        let old_head = graph.get_state(&head).await.unwrap();
        assert_eq!(old_head.values.bar, ["x", "y"], "{label}: old branch");
        let all = hist(&graph, &config, History::default()).await;
        let newest_fork = ids(&forks)[0].unwrap();
        let page = History::default().before(newest_fork).limit(2);
        let page = hist(&graph, &config, page).await;
        let at = ids(&all).iter().position(|id| *id == Some(newest_fork));
        let at = at.unwrap();
        assert_eq!(ids(&page), ids(&all[at + 1..at + 3]), "{label}");
        // Replay reruns the later nodes only; the head is the latest fork's end.
        assert_eq!((runs.get("x"), runs.get("join")), (3, 3), "{label}");
        let latest = graph.get_state(&config).await.unwrap();
        assert!(latest.next.is_empty(), "{label}");
        assert_eq!(latest.commit_order as usize, all.len(), "{label}");
    }
}

mod overflow {
    use super::*;

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct Tally {
        #[reducer(add)]
        pub small: u8,
        #[reducer(add)]
        pub wraps: std::num::Wrapping<u8>,
        pub calm: bool,
    }

    /// `p` and `q` in parallel, adding 200 and 100 to a `u8` (1 each once
    /// `calm`), on an in-memory saver.
    fn overflowing() -> CompiledGraph<Tally> {
        Graph::<Tally>::new("Tally")
            .add_node("p", |s: &Tally| {
                TallyUpdate::default().small(if s.calm { 1u8 } else { 200 })
            })
            .add_node("q", |s: &Tally| {
                TallyUpdate::default().small(if s.calm { 1u8 } else { 100 })
            })
            .add_edge(START, "p")
            .add_edge(START, "q")
            .add_edge("p", END)
            .add_edge("q", END)
            .compile(Compile::new().checkpointer(InMemorySaver::new()))
            .unwrap()
    }

    /// Two parallel writes whose sum overflows fail the step; both tasks'
    /// writes stay stored and fail again on every replay. A new input
    /// discards them (as it discards unfinished tasks), so the thread goes
    /// on instead of failing forever.
    #[tokio::test]
    async fn a_step_that_cannot_merge_does_not_lock_the_thread() {
        let graph = overflowing();
        let config = RunConfig::thread("t");
        let err = graph.invoke(Tally::default(), &config).await.unwrap_err();
        assert!(matches!(err, Error::InvalidUpdate { .. }), "{err}");
        assert!(
            graph.continue_run(&config).await.is_err(),
            "the same merge fails again"
        );
        let out = graph
            .invoke(TallyUpdate::default().calm(true), &config)
            .await
            .unwrap();
        assert_eq!(out.complete().unwrap().small, 2);
    }

    /// After a step whose writes cannot merge, the thread can still be
    /// inspected (the state as stored, the step's tasks pending with why)
    /// and updated (the update goes on the stored state, the unmergeable
    /// writes discarded). (Both failed with the merge's `InvalidUpdate`.)
    #[tokio::test]
    async fn a_step_that_cannot_merge_can_be_inspected_and_updated() {
        let graph = overflowing();
        let config = RunConfig::thread("t");
        let err = graph.invoke(Tally::default(), &config).await.unwrap_err();
        assert!(matches!(err, Error::InvalidUpdate { .. }), "{err}");
        let state = graph.get_state(&config).await.unwrap();
        assert_eq!(state.values.small, 0);
        assert_eq!(state.next, ["p", "q"]);
        assert!(
            state.tasks.iter().all(|t| t
                .error
                .as_deref()
                .is_some_and(|e| e.contains("do not merge"))),
            "{:?}",
            state.tasks
        );
        graph
            .update_state(&config, TallyUpdate::default().small(7u8), Some("p"))
            .await
            .unwrap();
        assert_eq!(graph.get_state(&config).await.unwrap().values.small, 7);
    }

    #[test]
    fn wrapping_fields_wrap() {
        let mut t = Tally::default();
        t.apply(vec![
            TallyUpdate::default().wraps(std::num::Wrapping(200u8)),
            TallyUpdate::default().wraps(std::num::Wrapping(100u8)),
        ])
        .unwrap();
        assert_eq!(t.wraps.0, 44);
    }
}

/// A background group whose commit landed but whose reply was lost (the
/// saver reports a storage error after storing it): storing its ops one by
/// one finds its own checkpoint stored, which is no conflict, and the run
/// goes on to its end, its history one chain.
#[tokio::test]
async fn a_group_stored_before_its_reply_was_lost_is_not_a_conflict() {
    use weaver_tests::forwarding::Forwarding;
    let watched = Arc::new(Forwarding::default());
    let saver: Arc<dyn Saver> = watched.clone();
    let g = Graph::<Steps>::new("g")
        .add_node("a", |_: &Steps| StepsUpdate::default().bar(["a"]))
        .add_node("b", |_: &Steps| StepsUpdate::default().bar(["b"]))
        .add_node("c", |_: &Steps| StepsUpdate::default().bar(["c"]))
        .add_sequence([START, "a", "b", "c", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap();
    // Under `sync` the group is a step's last writes with its checkpoint.
    // (It reported the lost reply as the run's failure, with all stored.)
    for durability in [Durability::Async, Durability::Sync] {
        watched.lose_reply_to_group.store(true, Ordering::SeqCst);
        let thread = format!("lost-{durability:?}");
        let config = RunConfig::thread(thread).durability(durability);
        let end = done(g.invoke(Steps::default(), &config).await);
        assert_eq!(end.bar, ["a", "b", "c"], "{durability:?}");
        assert!(
            !watched.lose_reply_to_group.load(Ordering::SeqCst),
            "{durability:?}: no group stored a checkpoint with other ops"
        );
        one_chain_of(&g, &config, durability).await;
    }
}

/// An `exit` run resumed with an answer stores its answer, its last
/// checkpoint and that checkpoint's writes as one group at its end: a reply
/// lost after that commit is no failure of the run. (It was reported as
/// one, with all stored.)
#[tokio::test]
async fn an_exit_runs_last_group_stored_before_its_reply_was_lost_is_no_failure() {
    use weaver_tests::forwarding::Forwarding;
    let watched = Arc::new(Forwarding::default());
    let saver: Arc<dyn Saver> = watched.clone();
    let g = Graph::<Steps>::new("g")
        .add_node("ask", |_: &Steps, rt: &Runtime| {
            let answer = rt.interrupt("ok?")?;
            Ok::<_, NodeError>(StepsUpdate::default().bar([answer.as_str().unwrap_or("?")]))
        })
        .add_node("b", |_: &Steps| StepsUpdate::default().bar(["b"]))
        .add_sequence([START, "ask", "b", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap();
    let config = RunConfig::thread("exit").durability(Durability::Exit);
    let paused = g.invoke(Steps::default(), &config).await.unwrap();
    assert!(paused.is_interrupted());
    watched.lose_reply_to_group.store(true, Ordering::SeqCst);
    let end = done(g.resume(serde_json::json!("yes"), &config).await);
    assert_eq!(end.bar, ["yes", "b"]);
    assert!(
        !watched.lose_reply_to_group.load(Ordering::SeqCst),
        "no group stored a checkpoint with other ops"
    );
    let state = g.get_state(&config).await.unwrap();
    assert_eq!(state.values.bar, ["yes", "b"]);
    assert!(state.next.is_empty());
}

/// Checks that the thread of `config` is one chain of checkpoints.
async fn one_chain_of(g: &CompiledGraph<Steps>, config: &RunConfig, durability: Durability) {
    let history = hist(g, config, History::default()).await;
    assert_eq!(history.len(), 5, "{durability:?}: {:?}", ids(&history));
    for pair in history.windows(2) {
        assert_eq!(
            pair[0]
                .parent_config
                .as_ref()
                .map(|p| p.get_checkpoint_id()),
            Some(pair[1].config.get_checkpoint_id()),
            "one chain"
        );
    }
}
