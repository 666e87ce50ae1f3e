//! Graphs compiled on clones of one SQL saver: the clones share the saver's
//! queued background writes, so a turn one graph runs after another graph's
//! turn reads that turn whole, never a stale head.

use std::sync::Arc;

use weaver::Saver;
use weaver::prelude::*;
use weaver_tests::stream_until_answered;

use crate::common::{Chat, PgDb, SqliteDb, chat, transcript, user};

const TURNS: usize = 12;

/// Two chat graphs, each compiled on its own clone of `saver`, take turns on
/// one thread under the default durability. Each turn is streamed until its
/// answer is seen and the stream is then dropped, as a server answering a
/// chat does: the turn's last checkpoint may still be queued in the
/// background when the other graph starts the next turn.
async fn turns_on_clones<S: Saver + Clone + 'static>(label: &str, saver: S) {
    let graphs = [chat(Arc::new(saver.clone())), chat(Arc::new(saver.clone()))];
    let config = RunConfig::thread("clones");
    let mut failures = Vec::new();
    for turn in 0..TURNS {
        let stream = graphs[turn % 2].stream(Input::update(user(turn)), &config);
        let done = |values: &Chat| values.turns as usize == turn + 1;
        if let Err(e) = stream_until_answered(stream, done).await {
            failures.push(format!("turn {turn}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{label}: {failures:#?}");
    for (i, graph) in graphs.iter().enumerate() {
        let state: Chat = graph.get_state(&config).await.unwrap().values;
        assert_eq!(state.messages, transcript(TURNS), "{label}: graph {i}");
        assert_eq!(state.turns as usize, TURNS, "{label}: graph {i}");
    }
    // Every turn's checkpoints are there, the input, the step that runs `chat` and the step after it.
    let stored = saver
        .list(&weaver::checkpoint::ListFilter::thread("clones"))
        .await
        .unwrap();
    assert_eq!(stored.len(), 3 * TURNS, "{label}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphs_on_clones_of_a_sqlite_saver_see_each_others_queued_writes() {
    let db = SqliteDb::new().await;
    turns_on_clones("sqlite", db.saver().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphs_on_clones_of_a_postgres_saver_see_each_others_queued_writes() {
    let db = PgDb::new().await;
    turns_on_clones("postgres", db.saver().await).await;
    db.drop_schema().await;
}
