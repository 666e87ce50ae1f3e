//! Node policies (retry, timeout, cache) on the in-memory saver; the same
//! checks run on SQLite and PostgreSQL in the `sql` tests.

use std::sync::Arc;
use std::time::Duration;

use weaver::prelude::*;
use weaver::{GraphError, Saver};
use weaver_tests::policies;
use weaver_tests::states::{Steps, StepsUpdate};

fn saver() -> Arc<dyn Saver> {
    Arc::new(InMemorySaver::new())
}

#[tokio::test]
async fn a_flaky_node_succeeds_on_its_third_attempt() {
    policies::flaky_node_succeeds_on_its_third_attempt(saver()).await;
}

#[tokio::test]
async fn retries_exhausted_fail_with_the_attempts_recorded() {
    policies::retries_exhausted_fail_with_the_attempts_recorded(saver()).await;
}

#[tokio::test]
async fn the_predicate_refuses_a_retry() {
    policies::the_predicate_refuses_a_retry(saver()).await;
}

#[tokio::test]
async fn a_timeout_fails_the_attempt_and_is_retried() {
    policies::a_timeout_fails_the_attempt_and_is_retried(saver()).await;
}

#[tokio::test]
async fn a_cache_hit_skips_the_node() {
    policies::a_cache_hit_skips_the_node(saver()).await;
}

#[tokio::test]
async fn an_expired_cache_entry_runs_the_node_again() {
    policies::an_expired_cache_entry_runs_the_node_again(saver()).await;
}

#[tokio::test]
async fn an_interrupt_is_never_retried() {
    policies::an_interrupt_is_never_retried(saver()).await;
}

#[tokio::test]
async fn node_defaults_fill_what_a_node_leaves_unset() {
    policies::node_defaults_fill_what_a_node_leaves_unset(saver()).await;
}

#[test]
fn unusable_policies_are_refused_at_compile() {
    let zero_timeout = NodePolicy::new().timeout(Duration::ZERO);
    let cases: Vec<(NodePolicy<Steps>, NodePolicy<Steps>, &str)> = vec![
        (
            NodePolicy::new().retry(RetryPolicy::new().max_attempts(0)),
            NodePolicy::new(),
            "a retry policy needs max_attempts of at least 1",
        ),
        (
            NodePolicy::new().retry(RetryPolicy::new().backoff_factor(f64::NAN)),
            NodePolicy::new(),
            "a retry policy's backoff_factor must be finite and not negative",
        ),
        (
            zero_timeout.clone(),
            NodePolicy::new(),
            "a timeout must be longer than zero",
        ),
        // A bad default is refused on the node that takes it.
        (
            NodePolicy::new(),
            zero_timeout,
            "a timeout must be longer than zero",
        ),
    ];
    for (own, defaults, expected) in cases {
        let err = Graph::<Steps>::new("bad")
            .add_node_with("a", |_: &Steps| StepsUpdate::default(), own)
            .add_sequence([START, "a", END])
            .node_defaults(defaults)
            .compile(Compile::new())
            .unwrap_err();
        match err {
            Error::InvalidGraph(GraphError::InvalidPolicy { node, reason }) => {
                assert_eq!((node.as_str(), reason), ("a", expected));
            }
            other => panic!("expected InvalidPolicy, got {other:?}"),
        }
    }
}

/// Without a checkpointer, retries and the cache work the same.
#[tokio::test]
async fn policies_need_no_checkpointer() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let flaky = move |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if rt.attempt() < 2 {
            return Err(NodeError::msg("once"));
        }
        Ok(StepsUpdate::default().bar(["ok"]))
    };
    let policy = NodePolicy::new()
        .retry(
            RetryPolicy::new()
                .max_attempts(2)
                .initial_interval(Duration::from_millis(1)),
        )
        .cache(CachePolicy::new());
    let graph = Graph::<Steps>::new("plain")
        .add_node_with("flaky", flaky, policy)
        .add_sequence([START, "flaky", END])
        .compile(Compile::new())
        .unwrap();
    for _ in 0..2 {
        let state = graph
            .invoke(Steps::default(), &RunConfig::default())
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(state.bar, ["ok"]);
    }
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// In a runtime without tokio's timer, a timeout or a wait between
/// attempts fails the node with a typed error instead of panicking.
#[test]
fn a_runtime_without_time_fails_the_node_instead_of_panicking() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let failing = |_: &Steps| -> Result<StepsUpdate, NodeError> { Err(NodeError::msg("no")) };
    let cases: Vec<(NodePolicy<Steps>, &str)> = vec![
        (
            NodePolicy::new().timeout(Duration::from_secs(1)),
            "panicked: ",
        ),
        (
            NodePolicy::new().retry(RetryPolicy::new().max_attempts(2)),
            "cannot wait between attempts: ",
        ),
    ];
    for (policy, expected) in cases {
        let graph = Graph::<Steps>::new("no-timer")
            .add_node_with("a", failing, policy)
            .add_sequence([START, "a", END])
            .compile(Compile::new())
            .unwrap();
        let err = rt
            .block_on(graph.invoke(Steps::default(), &RunConfig::default()))
            .unwrap_err();
        match err {
            Error::NodeFailed { node, source } => {
                assert_eq!(node, "a");
                assert!(source.to_string().starts_with(expected), "{source}");
            }
            other => panic!("expected NodeFailed, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_resumed_node_does_not_use_the_cache() {
    policies::a_resumed_node_does_not_use_the_cache(saver()).await;
}

/// A retry predicate that panics fails the task with its panic, a typed
/// error, instead of unwinding out of the run.
#[tokio::test]
async fn a_panicking_retry_predicate_fails_the_node() {
    let policy = NodePolicy::new().retry(
        RetryPolicy::new()
            .max_attempts(3)
            .initial_interval(Duration::from_millis(1))
            .retry_on(|_| panic!("the predicate broke")),
    );
    let graph = Graph::<Steps>::new("plain")
        .add_node_with(
            "flaky",
            |_: &Steps| -> Result<StepsUpdate, NodeError> { Err(NodeError::msg("down")) },
            policy,
        )
        .add_sequence([START, "flaky", END])
        .compile(Compile::new())
        .unwrap();
    let out = graph.invoke(Steps::default(), &RunConfig::default()).await;
    match out {
        Err(Error::NodeFailed { node, source }) => {
            assert_eq!(node, "flaky");
            assert!(
                source.to_string().contains("the predicate broke"),
                "{source}"
            );
        }
        other => panic!("expected NodeFailed, got {other:?}"),
    }
}

/// The default cache key does not depend on a `HashMap`'s order: equal
/// states built apart hit one entry; a state with a float JSON cannot
/// write (NaN) is an error rather than a key shared with other states.
#[tokio::test]
async fn the_default_cache_key_is_the_same_for_equal_maps() {
    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Tagged {
        #[reducer(merge)]
        tags: std::collections::HashMap<String, u32>,
        score: f64,
        #[reducer(add)]
        runs: u64,
    }
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let graph = Graph::<Tagged>::new("cached")
        .add_node_with(
            "count",
            move |_: &Tagged| {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                TaggedUpdate::default().runs(1u64)
            },
            NodePolicy::new().cache(CachePolicy::new()),
        )
        .add_sequence([START, "count", END])
        .compile(Compile::new())
        .unwrap();
    let tags = || (0..32).map(|i| (format!("tag{i}"), i)).collect();
    for _ in 0..3 {
        let input = Tagged {
            tags: tags(),
            ..Tagged::default()
        };
        graph.invoke(input, &RunConfig::default()).await.unwrap();
    }
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    let nan = Tagged {
        score: f64::NAN,
        ..Tagged::default()
    };
    let out = graph.invoke(nan, &RunConfig::default()).await;
    assert!(out.is_err(), "{out:?}");
}

/// A cache key that cannot be made (its key function panics) fails the
/// node, named, and is not retried. (It was a bare encode error naming no
/// node.)
#[tokio::test]
async fn a_cache_key_that_cannot_be_made_fails_its_node() {
    let graph = Graph::<Steps>::new("cached")
        .add_node_with(
            "count",
            |_: &Steps| StepsUpdate::default().foo("ran"),
            NodePolicy::new().cache(CachePolicy::new().key(|_: &Steps| panic!("no key today"))),
        )
        .add_sequence([START, "count", END])
        .compile(Compile::new())
        .unwrap();
    let out = graph.invoke(Steps::default(), &RunConfig::default()).await;
    match out {
        Err(Error::NodeFailed { node, source }) => {
            assert_eq!(node, "count");
            assert!(source.to_string().contains("no key today"), "{source}");
        }
        other => panic!("expected the node's failure, got {other:?}"),
    }
}

/// A cached node's result whose routing then fails the task (a goto to a
/// node it may not reach) is not cached: the next run calls the node again
/// and succeeds. (It was cached as the node returned it, and every later
/// run with the same key failed the same way.)
#[tokio::test]
async fn a_result_that_fails_its_task_is_not_cached() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let graph = Graph::<Steps>::new("cached")
        .add_node_with(
            "pick",
            move |_: &Steps| -> Command<StepsUpdate> {
                let first = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
                let to = if first { "nowhere" } else { "done" };
                Command::update(StepsUpdate::default()).goto(to)
            },
            NodePolicy::new().cache(CachePolicy::new()),
        )
        .add_node("done", |_: &Steps| StepsUpdate::default().foo("done"))
        .add_edge(START, "pick")
        .add_destinations("pick", ["done"])
        .add_edge("done", END)
        .compile(Compile::new())
        .unwrap();
    let first = graph.invoke(Steps::default(), &RunConfig::default()).await;
    assert!(first.is_err(), "{first:?}");
    let second = graph
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(second.foo, "done");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    // A result that succeeded is cached.
    graph
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap();
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// A sync node cannot be cut short, but an attempt of it that took longer
/// than its timeout still ends with `NodeTimeout`, and is retried as one.
/// (The run succeeded: the timer started once the node had returned.)
#[tokio::test]
async fn a_sync_node_that_overran_its_timeout_timed_out() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let graph = Graph::<Steps>::new("g")
        .add_node_with(
            "slow",
            move |_: &Steps| {
                counted.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(50));
                StepsUpdate::default().foo("late")
            },
            NodePolicy::new().timeout(Duration::from_millis(10)),
        )
        .add_sequence([START, "slow", END])
        .compile(Compile::new())
        .unwrap();
    let err = graph
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::NodeTimeout { node, .. } if node == "slow"),
        "{err:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A node's timeout counts its own time: an async node that finished in
/// time is not timed out because a sync sibling blocked the step meanwhile.
#[tokio::test]
async fn a_siblings_blocking_does_not_time_a_node_out() {
    let graph = Graph::<Steps>::new("g")
        .add_node_with(
            "fast",
            |_: &Steps| async {
                tokio::task::yield_now().await;
                StepsUpdate::default().foo("fast")
            },
            NodePolicy::new().timeout(Duration::from_millis(40)),
        )
        .add_node("slow", |_: &Steps| {
            std::thread::sleep(Duration::from_millis(120));
            StepsUpdate::default().bar(["slow"])
        })
        .add_edge(START, "fast")
        .add_edge(START, "slow")
        .add_edge("fast", END)
        .add_edge("slow", END)
        .compile(Compile::new())
        .unwrap();
    let done = graph
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.foo, "fast");
}
