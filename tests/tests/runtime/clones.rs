//! Graphs compiled on clones of one in-memory saver share what the saver's
//! handles share: a turn one graph runs after another graph's turn on the
//! same thread reads that turn whole.

use weaver::prelude::*;
use weaver_tests::states::Steps;
use weaver_tests::stream_until_answered;

use crate::common::two_step;

const TURNS: usize = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphs_on_clones_of_a_saver_see_each_others_writes() {
    // Each graph is compiled on its own clone of the saver; they take turns
    // on one thread under the default durability, each turn streamed until
    // its last state is seen and the stream then dropped.
    let saver = InMemorySaver::new();
    let graphs = [two_step(&saver.clone()), two_step(&saver.clone())];
    let config = RunConfig::thread("clones");
    let mut failures = Vec::new();
    for turn in 0..TURNS {
        let stream = graphs[turn % 2].stream(Steps::default(), &config);
        let done = |values: &Steps| values.bar.len() == 2 * (turn + 1);
        if let Err(e) = stream_until_answered(stream, done).await {
            failures.push(format!("turn {turn}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    let whole: Vec<&str> = (0..TURNS).flat_map(|_| ["a", "b"]).collect();
    for (i, graph) in graphs.iter().enumerate() {
        let state = graph.get_state(&config).await.unwrap().values;
        assert_eq!(state.bar, whole, "graph {i}");
    }
}
