//! A stream dropped in the middle of its run, on a multi-thread runtime:
//! the run stops at its next step boundary, and the next call on the
//! thread, made strictly after the drop returned, waits for it to stop and
//! starts from what it left.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use weaver::prelude::*;

use crate::states::{Steps, StepsUpdate};

/// What the test and the run's nodes tell each other.
#[derive(Default)]
struct Gates {
    /// `slow` has begun.
    started: AtomicBool,
    /// `slow` may go on to block its worker.
    go: AtomicBool,
    /// `slow` blocks its worker (the run is running).
    blocking: AtomicBool,
    /// `slow` may return.
    release: AtomicBool,
    /// `slow` gave up waiting for `release` (the test is broken).
    stuck: AtomicBool,
    /// How often `fast` ran on the first turn's state.
    fast_on_turn_1: AtomicUsize,
}

/// How long `slow` blocks at most when no one releases it: far longer
/// than any run here, so that reaching it means the test is broken.
const STUCK: Duration = Duration::from_secs(20);

/// Waits on the test's own thread until `done`. Not on tokio's timer: a
/// worker blocked by `slow` can hold the timer up, and the test waits
/// precisely while `slow` blocks.
fn until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < STUCK, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn graph(saver: Arc<dyn Saver>, gates: Arc<Gates>) -> CompiledGraph<Steps> {
    let slow_gates = gates.clone();
    Graph::<Steps>::new("dropped")
        .add_node("slow", move |_: &Steps| {
            let g = slow_gates.clone();
            async move {
                g.started.store(true, Ordering::SeqCst);
                // Parked: what the run queued before lands meanwhile.
                while !g.go.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                // Then blocking its worker, so that the drop lands while
                // the run is running, not parked at an await.
                g.blocking.store(true, Ordering::SeqCst);
                let start = Instant::now();
                while !g.release.load(Ordering::SeqCst) {
                    if start.elapsed() > STUCK {
                        g.stuck.store(true, Ordering::SeqCst);
                        return Err(NodeError::msg("`slow` was never released"));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(StepsUpdate::default().bar(["slow"]))
            }
        })
        .add_node("fast", move |s: &Steps| {
            if s.foo == "turn 1" {
                gates.fast_on_turn_1.fetch_add(1, Ordering::SeqCst);
            }
            StepsUpdate::default().bar(["fast"])
        })
        .add_node("last", |_: &Steps| StepsUpdate::default().bar(["last"]))
        .add_sequence([START, "slow", "fast", "last", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .expect("compiles")
}

/// Drops a stream of turn 1 while its `slow` node blocks the run's worker,
/// the run's earlier writes stored, then starts turn 2 at once: turn 2
/// waits until turn 1 stopped (which `slow` lets it do only afterwards),
/// then succeeds, with no lease error or `VersionConflict`; turn 1 stopped
/// at the step boundary after `slow` (its `fast` never ran) and kept that
/// step, and the thread's history is one line of commits.
pub async fn the_next_turn_after_a_dropped_stream_waits_for_it(saver: Arc<dyn Saver>) {
    for round in 0..3 {
        let thread = format!("dropped-{round}");
        let config = RunConfig::thread(&thread).durability(Durability::Async);
        let gates = Arc::new(Gates::default());
        let g = graph(saver.clone(), gates.clone());
        let stream = g.stream(StepsUpdate::default().foo("turn 1"), &config);
        until("`slow` began", || gates.started.load(Ordering::SeqCst));
        // Waits for the writes turn 1 queued so far: from here on nothing
        // of turn 1 is queued, only its stream's drop can hold turn 2.
        g.get_state(&config).await.expect("the state of turn 1");
        gates.go.store(true, Ordering::SeqCst);
        until("`slow` blocks", || gates.blocking.load(Ordering::SeqCst));
        drop(stream);
        let turn_2 = tokio::spawn({
            let (g, config) = (g.clone(), config.clone());
            async move {
                g.invoke(StepsUpdate::default().foo("turn 2"), &config)
                    .await
            }
        });
        // Turn 1 cannot stop before `slow` is released: turn 2 is still
        // waiting then, or has failed.
        let start = Instant::now();
        while !turn_2.is_finished() && start.elapsed() < Duration::from_millis(100) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let finished_early = turn_2.is_finished();
        gates.release.store(true, Ordering::SeqCst);
        let out = turn_2
            .await
            .expect("turn 2 ran")
            .unwrap_or_else(|e| panic!("round {round}: the next turn failed: {e}"));
        assert!(!finished_early, "round {round}: turn 2 did not wait");
        assert!(!gates.stuck.load(Ordering::SeqCst), "round {round}: stuck");
        let state = out.complete().unwrap();
        assert_eq!(state.foo, "turn 2", "round {round}");
        // Turn 1 kept its `slow` step (queued before it stopped), then turn
        // 2 ran whole on top of it.
        assert_eq!(state.bar, ["slow", "slow", "fast", "last"], "round {round}");
        assert_eq!(
            gates.fast_on_turn_1.load(Ordering::SeqCst),
            0,
            "round {round}: the dropped run went on past its step boundary"
        );
        let history = g
            .get_state_history(&config, History::default())
            .await
            .unwrap();
        let orders: Vec<u64> = history.iter().map(|s| s.commit_order).collect();
        let mut expected: Vec<u64> = (1..=orders.len() as u64).collect();
        expected.reverse();
        assert_eq!(orders, expected, "round {round}: one line of commits");
    }
}
