//! A stream dropped in the middle of its run, on a multi-thread runtime:
//! the next call on the thread, made strictly after the drop returned,
//! waits for the run to stop and starts from what it left.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use weaver::prelude::*;

use crate::states::{Steps, StepsUpdate};

fn graph(saver: Arc<dyn Saver>, started: Arc<AtomicBool>) -> CompiledGraph<Steps> {
    Graph::<Steps>::new("dropped")
        // Blocks its worker: the drop lands while the run is running.
        .add_node("slow", move |_: &Steps| {
            started.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(40));
            StepsUpdate::default().bar(["slow"])
        })
        // Blocking too: a run that is not stopped goes on past the drop.
        .add_node("fast", |_: &Steps| {
            std::thread::sleep(Duration::from_millis(15));
            StepsUpdate::default().bar(["fast"])
        })
        .add_node("last", |_: &Steps| {
            std::thread::sleep(Duration::from_millis(15));
            StepsUpdate::default().bar(["last"])
        })
        .add_sequence([START, "slow", "fast", "last", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .expect("compiles")
}

/// Drops a stream of turn 1 while its slow node runs, then runs turn 2 at
/// once: it succeeds, with no `VersionConflict`, and the thread's history
/// is one line of commits.
pub async fn the_next_turn_after_a_dropped_stream_waits_for_it(saver: Arc<dyn Saver>) {
    for round in 0..3 {
        let thread = format!("dropped-{round}");
        let config = RunConfig::thread(&thread).durability(Durability::Async);
        let started = Arc::new(AtomicBool::new(false));
        let g = graph(saver.clone(), started.clone());
        let mut stream = g.stream(StepsUpdate::default().foo("turn 1"), &config);
        let first = stream.next().await.expect("an event");
        assert!(matches!(first, weaver::StreamItem::Event(_)), "{first:?}");
        // Dropped while `slow` blocks the run's worker.
        while !started.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(stream);
        let out = g
            .invoke(StepsUpdate::default().foo("turn 2"), &config)
            .await
            .unwrap_or_else(|e| panic!("round {round}: the next turn failed: {e}"));
        let state = out.complete().unwrap();
        assert_eq!(state.foo, "turn 2", "round {round}");
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
