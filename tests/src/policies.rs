//! Node policies (retry, timeout, cache) run on a saver: each check takes
//! the saver it runs on, so the in-memory, SQLite and PostgreSQL tests run
//! the same checks. Each check uses threads of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use weaver::checkpoint::{CheckpointRef, ERROR_CHANNEL};
use weaver::engine::History;
use weaver::{
    CachePolicy, Compile, CompiledGraph, END, Error, Graph, NodeError, NodePolicy, Outcome,
    RetryPolicy, RunConfig, Runtime, START, Saver, StreamEvent, StreamItem,
};

use crate::states::{Steps, StepsUpdate};

/// Counts a node's calls.
#[derive(Clone, Default)]
struct Calls(Arc<AtomicUsize>);

impl Calls {
    fn hit(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A retry policy with waits of a millisecond, so checks stay fast.
fn quick(attempts: u32) -> RetryPolicy {
    RetryPolicy::new()
        .max_attempts(attempts)
        .initial_interval(Duration::from_millis(1))
        .max_interval(Duration::from_millis(4))
}

/// START → [`node` (with `policy`), `sibling`] → END; `sibling` counts its
/// calls in `sibling_calls`.
fn with_sibling<M>(
    saver: &Arc<dyn Saver>,
    node: impl weaver::IntoNode<Steps, M>,
    policy: NodePolicy<Steps>,
    sibling_calls: &Calls,
) -> CompiledGraph<Steps> {
    let calls = sibling_calls.clone();
    Graph::<Steps>::new("policies")
        .add_node_with("node", node, policy)
        .add_node("sibling", move |_: &Steps| {
            calls.hit();
            StepsUpdate::default().bar(["sibling"])
        })
        .add_edge(START, "node")
        .add_edge(START, "sibling")
        .add_edge("node", END)
        .add_edge("sibling", END)
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .expect("valid graph")
}

/// The stored error write of `node`'s task at the thread's latest checkpoint.
async fn error_write(saver: &Arc<dyn Saver>, thread: &str, node: &str) -> serde_json::Value {
    let tuple = saver
        .get_tuple(&CheckpointRef::latest(thread))
        .await
        .unwrap()
        .expect("the thread has a checkpoint");
    tuple
        .pending_writes
        .iter()
        .find(|w| w.task_path == node && w.channel == ERROR_CHANNEL)
        .unwrap_or_else(|| panic!("no error write of `{node}` in {:?}", tuple.pending_writes))
        .value
        .clone()
}

/// The failure message of an error the run reported.
fn source_of(e: &Error) -> String {
    match e {
        Error::NodeFailed { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

/// A node failing twice then succeeding under 3 attempts succeeds, only it
/// is retried (not its sibling), and history shows its 3 attempts and the
/// failure it recovered from.
pub async fn flaky_node_succeeds_on_its_third_attempt(saver: Arc<dyn Saver>) {
    let (calls, sibling) = (Calls::default(), Calls::default());
    let counted = calls.clone();
    let flaky = move |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
        assert_eq!(counted.hit() as u32, rt.attempt(), "attempts count from 1");
        if rt.attempt() < 3 {
            return Err(NodeError::msg(format!("flaky {}", rt.attempt())));
        }
        Ok(StepsUpdate::default().bar(["node"]))
    };
    let graph = with_sibling(&saver, flaky, NodePolicy::new().retry(quick(3)), &sibling);
    let config = RunConfig::thread("flaky");
    let mut stream = graph.stream(Steps::default(), &config);
    let mut updates = Vec::new();
    let mut done = None;
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(StreamEvent::Update { node, .. }) => updates.push(node),
            StreamItem::Done(result) => done = Some(result),
            _ => {}
        }
    }
    let Some(Ok(Outcome::Complete(state))) = done else {
        panic!("the run did not complete: {done:?}");
    };
    let mut bar = state.bar.clone();
    bar.sort();
    assert_eq!(bar, ["node", "sibling"]);
    assert_eq!((calls.get(), sibling.get()), (3, 1));
    updates.sort();
    assert_eq!(updates, ["node", "sibling"], "each task streamed once");

    let history = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let task = history
        .iter()
        .flat_map(|s| &s.tasks)
        .find(|t| t.name == "node")
        .expect("the node's task in history");
    assert!(task.succeeded);
    assert_eq!(task.attempts, 3);
    assert_eq!(task.error.as_deref(), Some("flaky 2"));
    let sibling_task = history
        .iter()
        .flat_map(|s| &s.tasks)
        .find(|t| t.name == "sibling")
        .unwrap();
    assert_eq!(
        (sibling_task.attempts, sibling_task.error.clone()),
        (1, None)
    );
}

/// A node failing on every attempt fails the run with
/// [`Error::RetriesExhausted`]; the stored error write and `get_state`
/// hold its attempts; the sibling's writes stay; once the node works,
/// continuing runs it alone.
pub async fn retries_exhausted_fail_with_the_attempts_recorded(saver: Arc<dyn Saver>) {
    let (calls, sibling) = (Calls::default(), Calls::default());
    let fixed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (counted, works) = (calls.clone(), fixed.clone());
    let down = move |_: &Steps| -> Result<StepsUpdate, NodeError> {
        counted.hit();
        if works.load(Ordering::SeqCst) {
            return Ok(StepsUpdate::default().bar(["node"]));
        }
        Err(NodeError::msg("service down"))
    };
    let graph = with_sibling(&saver, down, NodePolicy::new().retry(quick(3)), &sibling);
    let config = RunConfig::thread("exhausted");
    let err = graph.invoke(Steps::default(), &config).await.unwrap_err();
    match &err {
        Error::RetriesExhausted {
            node,
            attempts,
            last,
        } => {
            assert_eq!((node.as_str(), *attempts), ("node", 3));
            assert!(
                matches!(&**last, Error::NodeFailed { node, source }
                    if node == "node" && source.to_string() == "service down"),
                "{last:?}"
            );
        }
        other => panic!("expected RetriesExhausted, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "node `node` failed after 3 attempts: node `node` failed: service down"
    );
    assert_eq!((calls.get(), sibling.get()), (3, 1));
    assert_eq!(
        error_write(&saver, "exhausted", "node").await,
        json!({"message": "service down", "attempts": 3})
    );
    let snapshot = graph.get_state(&config).await.unwrap();
    assert_eq!(snapshot.next, ["node"]);
    let task = snapshot.tasks.iter().find(|t| t.name == "node").unwrap();
    assert_eq!(
        (task.attempts, task.error.as_deref(), task.succeeded),
        (3, Some("service down"), false)
    );

    fixed.store(true, Ordering::SeqCst);
    let state = graph
        .continue_run(&config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    let mut bar = state.bar;
    bar.sort();
    assert_eq!(bar, ["node", "sibling"]);
    assert_eq!((calls.get(), sibling.get()), (4, 1), "the sibling replayed");
}

/// A failure the predicate refuses ends the task at once, as the plain
/// node failure; one it accepts is retried, until a refused one comes.
pub async fn the_predicate_refuses_a_retry(saver: Arc<dyn Saver>) {
    // (thread, failures by attempt, attempts made, the run's error)
    let cases: &[(&str, &[&str], u32, &str)] = &[
        ("refused-first", &["fatal"], 1, "fatal"),
        ("refused-second", &["transient", "fatal"], 2, "fatal"),
    ];
    for &(thread, failures, attempts, message) in cases {
        let (calls, sibling) = (Calls::default(), Calls::default());
        let counted = calls.clone();
        let failing = move |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
            counted.hit();
            let i = (rt.attempt() as usize - 1).min(failures.len() - 1);
            Err(NodeError::msg(failures[i]))
        };
        let retry = quick(5).retry_on(|e| source_of(e) != "fatal");
        let graph = with_sibling(&saver, failing, NodePolicy::new().retry(retry), &sibling);
        let config = RunConfig::thread(thread);
        let err = graph.invoke(Steps::default(), &config).await.unwrap_err();
        assert!(
            matches!(&err, Error::NodeFailed { node, source }
                if node == "node" && source.to_string() == message),
            "{thread}: {err:?}"
        );
        assert_eq!(calls.get(), attempts as usize, "{thread}");
        assert_eq!(
            error_write(&saver, thread, "node").await,
            json!({"message": message, "attempts": attempts}),
            "{thread}"
        );
        let snapshot = graph.get_state(&config).await.unwrap();
        let task = snapshot.tasks.iter().find(|t| t.name == "node").unwrap();
        assert_eq!(task.attempts, attempts, "{thread}");
    }
}

/// [`with_sibling`] whose node is async and sleeps through any timeout on
/// the attempts `sleeps` picks (by number), counting its calls in `calls`.
fn sleepy(
    saver: &Arc<dyn Saver>,
    calls: &Calls,
    sleeps: fn(u32) -> bool,
    policy: NodePolicy<Steps>,
    sibling: &Calls,
) -> CompiledGraph<Steps> {
    let calls = calls.clone();
    let node = move |_: &Steps, rt: &Runtime| {
        calls.hit();
        let asleep = sleeps(rt.attempt());
        async move {
            if asleep {
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            Ok::<_, NodeError>(StepsUpdate::default().bar(["node"]))
        }
    };
    with_sibling(saver, node, policy, sibling)
}

/// An attempt longer than the node's timeout ends with
/// [`Error::NodeTimeout`]; under a retry policy it is a failed attempt like
/// any other: retried, and reported as the last failure when attempts run
/// out.
pub async fn a_timeout_fails_the_attempt_and_is_retried(saver: Arc<dyn Saver>) {
    let limit = Duration::from_millis(10);
    let sibling = Calls::default();

    // No retry policy: one attempt, then the typed time-out.
    let calls = Calls::default();
    let policy = NodePolicy::new().timeout(limit);
    let graph = sleepy(&saver, &calls, |_| true, policy, &sibling);
    let config = RunConfig::thread("timeout-once");
    let started = std::time::Instant::now();
    let err = graph.invoke(Steps::default(), &config).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the node was cut short"
    );
    assert!(
        matches!(&err, Error::NodeTimeout { node, timeout } if node == "node" && *timeout == limit),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "node `node` timed out after 10ms");
    assert_eq!(calls.get(), 1);
    assert_eq!(
        error_write(&saver, "timeout-once", "node").await,
        json!({"message": "node `node` timed out after 10ms", "attempts": 1})
    );

    // Retried: the third attempt is quick.
    let calls = Calls::default();
    let policy = NodePolicy::new().timeout(limit).retry(quick(3));
    let graph = sleepy(&saver, &calls, |n| n < 3, policy, &sibling);
    let config = RunConfig::thread("timeout-retried");
    let outcome = graph.invoke(Steps::default(), &config).await.unwrap();
    assert!(matches!(outcome, Outcome::Complete(_)));
    assert_eq!(calls.get(), 3);

    // Every attempt times out.
    let calls = Calls::default();
    let policy = NodePolicy::new().timeout(limit).retry(quick(2));
    let graph = sleepy(&saver, &calls, |_| true, policy, &sibling);
    let config = RunConfig::thread("timeout-exhausted");
    let err = graph.invoke(Steps::default(), &config).await.unwrap_err();
    let Error::RetriesExhausted { attempts, last, .. } = &err else {
        panic!("expected RetriesExhausted, got {err:?}");
    };
    assert_eq!(*attempts, 2);
    assert!(matches!(&**last, Error::NodeTimeout { .. }), "{last:?}");
    assert_eq!(calls.get(), 2);
    let snapshot = graph.get_state(&config).await.unwrap();
    let task = snapshot.tasks.iter().find(|t| t.name == "node").unwrap();
    assert_eq!(
        (task.attempts, task.error.as_deref()),
        (2, Some("node `node` timed out after 10ms"))
    );

    // A predicate that refuses time-outs: one attempt.
    let calls = Calls::default();
    let retry = quick(3).retry_on(|e| !matches!(e, Error::NodeTimeout { .. }));
    let policy = NodePolicy::new().timeout(limit).retry(retry);
    let graph = sleepy(&saver, &calls, |_| true, policy, &sibling);
    let config = RunConfig::thread("timeout-refused");
    let err = graph.invoke(Steps::default(), &config).await.unwrap_err();
    assert!(matches!(err, Error::NodeTimeout { .. }), "{err:?}");
    assert_eq!(calls.get(), 1);
}

/// START → `cached` → END, `cached` counting its calls.
fn cached_graph(
    saver: &Arc<dyn Saver>,
    calls: &Calls,
    policy: CachePolicy<Steps>,
) -> CompiledGraph<Steps> {
    let calls = calls.clone();
    Graph::<Steps>::new("cached")
        .add_node_with(
            "cached",
            move |s: &Steps| {
                let n = calls.hit();
                StepsUpdate::default().bar([format!("{}:{n}", s.foo)])
            },
            NodePolicy::new().cache(policy),
        )
        .add_sequence([START, "cached", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .expect("valid graph")
}

fn input(key: &str) -> Steps {
    Steps {
        foo: key.into(),
        bar: Vec::new(),
    }
}

/// A cache hit does not run the node: its cached update is streamed,
/// stored and applied as if it had run. Another input misses; a key
/// function decides what counts as the same input; `clear_cache` forgets.
pub async fn a_cache_hit_skips_the_node(saver: Arc<dyn Saver>) {
    let calls = Calls::default();
    let graph = cached_graph(&saver, &calls, CachePolicy::new());
    let run = |thread: &str, key: &str| {
        let (graph, config) = (graph.clone(), RunConfig::thread(thread));
        let key = key.to_owned();
        async move {
            let state = graph
                .invoke(input(&key), &config)
                .await
                .unwrap()
                .complete()
                .unwrap();
            state.bar
        }
    };
    assert_eq!(run("cache-1", "x").await, ["x:1"]);
    assert_eq!(run("cache-2", "x").await, ["x:1"], "a hit");
    assert_eq!(calls.get(), 1);
    assert_eq!(run("cache-3", "y").await, ["y:2"], "another input misses");

    // The hit is streamed and stored like the node's own result.
    let mut stream = graph.stream(input("x"), &RunConfig::thread("cache-4"));
    let mut updates = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            StreamItem::Event(StreamEvent::Update { node, update, .. }) => {
                updates.push((node, update.bar))
            }
            StreamItem::Done(result) => {
                result.unwrap();
            }
            _ => {}
        }
    }
    assert_eq!(
        updates,
        [("cached".to_owned(), Some(vec!["x:1".to_owned()]))]
    );
    let history = graph
        .get_state_history(&RunConfig::thread("cache-4"), History::default())
        .await
        .unwrap();
    let stored: Vec<_> = history
        .iter()
        .flat_map(|s| &s.pending_writes)
        .filter(|w| w.task_path == "cached" && w.channel == "bar")
        .map(|w| w.value.clone())
        .collect();
    assert_eq!(stored, [json!(["x:1"])]);
    assert_eq!(calls.get(), 2);

    graph.clear_cache(Some("cached")).unwrap();
    assert_eq!(run("cache-5", "x").await, ["x:3"], "cleared");
    assert!(matches!(
        graph.clear_cache(Some("missing")),
        Err(Error::UnknownNode { .. })
    ));

    // Keyed by `foo` alone: a different `bar` is the same input.
    let calls = Calls::default();
    let graph = cached_graph(
        &saver,
        &calls,
        CachePolicy::new().key(|s: &Steps| s.foo.clone()),
    );
    let config = RunConfig::thread("cache-key-1");
    graph.invoke(input("k"), &config).await.unwrap();
    let other = Steps {
        foo: "k".into(),
        bar: vec!["different".into()],
    };
    let state = graph
        .invoke(other, &RunConfig::thread("cache-key-2"))
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(state.bar, ["different", "k:1"]);
    assert_eq!(calls.get(), 1);
}

/// Once its time to live passes, an entry is gone: the node runs again.
pub async fn an_expired_cache_entry_runs_the_node_again(saver: Arc<dyn Saver>) {
    let calls = Calls::default();
    let ttl = Duration::from_millis(20);
    let graph = cached_graph(&saver, &calls, CachePolicy::new().ttl(ttl));
    let first = graph
        .invoke(input("t"), &RunConfig::thread("ttl-1"))
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(first.bar, ["t:1"]);
    tokio::time::sleep(ttl + Duration::from_millis(10)).await;
    let second = graph
        .invoke(input("t"), &RunConfig::thread("ttl-2"))
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(second.bar, ["t:2"]);
    assert_eq!(calls.get(), 2);
}

/// An interrupt is never retried, whatever the predicate says; each retry
/// meets the resume values from the first `interrupt` call again.
pub async fn an_interrupt_is_never_retried(saver: Arc<dyn Saver>) {
    let (calls, sibling) = (Calls::default(), Calls::default());
    let counted = calls.clone();
    // Asks, then fails the first attempt after the answer.
    let asks = move |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
        counted.hit();
        let answer = rt.interrupt("approve?")?;
        if rt.attempt() == 1 {
            return Err(NodeError::msg("lost the answer"));
        }
        Ok(StepsUpdate::default().foo(answer.as_str().unwrap_or_default()))
    };
    let retry = quick(3).retry_on(|_| true);
    let graph = with_sibling(&saver, asks, NodePolicy::new().retry(retry), &sibling);
    let config = RunConfig::thread("interrupt");
    let outcome = graph.invoke(Steps::default(), &config).await.unwrap();
    assert!(outcome.is_interrupted(), "{outcome:?}");
    assert_eq!(calls.get(), 1, "the interrupt was not retried");

    let state = graph
        .resume(json!("yes"), &config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(state.foo, "yes");
    // The resumed run: attempt 1 got the answer and failed, attempt 2 got
    // the same answer.
    assert_eq!(calls.get(), 3);
    assert_eq!(sibling.get(), 1);
}

/// Graph-wide defaults apply to every node that sets no policy of its own;
/// a node's own policy wins.
pub async fn node_defaults_fill_what_a_node_leaves_unset(saver: Arc<dyn Saver>) {
    let (own, defaulted) = (Calls::default(), Calls::default());
    let (a, b) = (own.clone(), defaulted.clone());
    let graph = Graph::<Steps>::new("defaults")
        .add_node_with(
            "own",
            move |_: &Steps| -> Result<StepsUpdate, NodeError> {
                a.hit();
                Err(NodeError::msg("no"))
            },
            NodePolicy::new().retry(quick(2)),
        )
        .add_node(
            "defaulted",
            move |_: &Steps| -> Result<StepsUpdate, NodeError> {
                b.hit();
                Err(NodeError::msg("no"))
            },
        )
        .add_edge(START, "own")
        .add_edge(START, "defaulted")
        .add_edge("own", END)
        .add_edge("defaulted", END)
        .node_defaults(NodePolicy::new().retry(quick(4)))
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let config = RunConfig::thread("defaults");
    let err = graph.invoke(Steps::default(), &config).await.unwrap_err();
    // The first failure in task order: `defaulted` sorts before `own`.
    assert!(
        matches!(&err, Error::RetriesExhausted { node, attempts: 4, .. } if node == "defaulted"),
        "{err:?}"
    );
    assert_eq!((own.get(), defaulted.get()), (2, 4));
    let snapshot = graph.get_state(&config).await.unwrap();
    let attempts: Vec<(String, u32)> = snapshot
        .tasks
        .iter()
        .map(|t| (t.name.clone(), t.attempts))
        .collect();
    assert_eq!(
        attempts,
        [("defaulted".to_owned(), 4), ("own".to_owned(), 2)]
    );
}

/// Every check above, each on its own threads of `saver`.
pub async fn run_policy_checks(saver: Arc<dyn Saver>) {
    flaky_node_succeeds_on_its_third_attempt(saver.clone()).await;
    retries_exhausted_fail_with_the_attempts_recorded(saver.clone()).await;
    the_predicate_refuses_a_retry(saver.clone()).await;
    a_timeout_fails_the_attempt_and_is_retried(saver.clone()).await;
    a_cache_hit_skips_the_node(saver.clone()).await;
    an_expired_cache_entry_runs_the_node_again(saver.clone()).await;
    an_interrupt_is_never_retried(saver.clone()).await;
    node_defaults_fill_what_a_node_leaves_unset(saver).await;
}

/// A cached node that pauses for an answer is never served from the cache
/// when resumed, nor caches what it returned with an answer: two threads
/// at the same pause, answered differently, each get their own answer.
pub async fn a_resumed_node_does_not_use_the_cache(saver: Arc<dyn Saver>) {
    let graph = Graph::<Steps>::new("approvals")
        .add_node_with(
            "approve",
            |_: &Steps, rt: &Runtime| {
                let answer = rt.interrupt(serde_json::json!("approve?"))?;
                let answer = answer.as_str().unwrap_or_default().to_owned();
                Ok::<_, NodeError>(StepsUpdate::default().foo(answer))
            },
            NodePolicy::new().cache(CachePolicy::new()),
        )
        .add_sequence([START, "approve", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap();
    for thread in ["t1", "t2"] {
        let paused = graph
            .invoke(Steps::default(), &RunConfig::thread(thread))
            .await
            .unwrap();
        assert_eq!(paused.interrupts().len(), 1);
    }
    for (thread, answer) in [("t1", "yes"), ("t2", "no")] {
        let done = graph
            .resume(serde_json::json!(answer), &RunConfig::thread(thread))
            .await
            .unwrap();
        assert_eq!(done.complete().unwrap().foo, answer, "{thread}");
    }
    // A third thread pauses too: nothing cached stands in for the question.
    let third = graph
        .invoke(Steps::default(), &RunConfig::thread("t3"))
        .await
        .unwrap();
    assert_eq!(third.interrupts().len(), 1);
}
