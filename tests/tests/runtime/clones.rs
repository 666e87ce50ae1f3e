//! Graphs compiled on clones of one in-memory saver share what the saver's
//! handles share: a turn one graph runs after another graph's turn on the
//! same thread reads that turn whole.

use futures_util::StreamExt;
use weaver::prelude::*;
use weaver::{StreamEvent, StreamItem};
use weaver_tests::states::Steps;

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
        let mut stream = graphs[turn % 2].stream(Steps::default(), &config);
        let mut answered = false;
        while let Some(item) = stream.next().await {
            match item {
                StreamItem::Event(StreamEvent::Values { values, .. })
                    if values.bar.len() == 2 * (turn + 1) =>
                {
                    answered = true;
                    break;
                }
                StreamItem::Done(Err(e)) => {
                    failures.push(format!("turn {turn}: {e}"));
                    break;
                }
                _ => {}
            }
        }
        drop(stream);
        if !answered && failures.is_empty() {
            failures.push(format!("turn {turn}: no last state streamed"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    let whole: Vec<&str> = (0..TURNS).flat_map(|_| ["a", "b"]).collect();
    for (i, graph) in graphs.iter().enumerate() {
        let state = graph.get_state(&config).await.unwrap().values;
        assert_eq!(state.bar, whole, "graph {i}");
    }
}
