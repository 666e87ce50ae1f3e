//! A run on a thread starts from the state the same graph's last run there
//! stored, without rebuilding and decoding the stored value again, and only
//! when that state is exactly the values of the thread's head.

use std::sync::Arc;

use weaver::checkpoint::{CheckpointRef, Saver};
use weaver::prelude::*;
use weaver_tests::decodes::{Lines, decoded, line, lines_graph, turns_decoding_nothing};

#[tokio::test]
async fn the_next_turn_on_the_same_graph_does_not_decode_the_conversation_again() {
    let saver = InMemorySaver::new();
    let shared: Arc<dyn Saver> = Arc::new(saver.clone());
    let graph = lines_graph(shared.clone());
    let config = RunConfig::thread("talk");
    for _ in 0..5 {
        graph.invoke(Lines::default(), &config).await.unwrap();
    }
    let cached_turns = turns_decoding_nothing(&graph, shared.as_ref(), "talk", 6, 35).await;
    assert!(
        cached_turns > 20,
        "only {cached_turns} turns started at a delta head"
    );

    // A graph compiled anew has nothing cached: it rebuilds and decodes.
    let fresh = lines_graph(shared.clone());
    let before = decoded();
    let out = fresh.invoke(Lines::default(), &config).await.unwrap();
    assert_eq!(out.complete().unwrap().lines.len(), 41);
    assert!(decoded() - before >= 40);

    // The first graph's cache names the head it stored, which is no longer
    // the head: it reads the other graph's turn instead of reusing its own.
    let out = graph.invoke(Lines::default(), &config).await.unwrap();
    let lines = out.complete().unwrap().lines;
    assert_eq!(lines.len(), 42);
    assert_eq!(lines[40], line(41));

    // A deleted thread starts over, on the same graph.
    saver.delete_thread("talk").await.unwrap();
    let out = graph.invoke(Lines::default(), &config).await.unwrap();
    assert_eq!(out.complete().unwrap().lines, [line(1)]);
}

/// A step whose updates fail to merge leaves the run's state half updated;
/// that state is not the head's, so the next run must not start from it.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Clash {
    #[reducer(delta)]
    items: Vec<String>,
    /// Input: `"clash"` makes `b` write `last` beside `a`.
    mode: String,
    last: String,
}

#[tokio::test]
async fn a_state_left_half_merged_by_a_failed_step_is_not_reused() {
    let saver = InMemorySaver::new();
    let graph = Graph::<Clash>::new("clash")
        .add_node("a", |_: &Clash| {
            ClashUpdate::default().items(vec!["a".to_owned()]).last("a")
        })
        .add_node("b", |s: &Clash| {
            if s.mode == "clash" {
                ClashUpdate::default().last("b")
            } else {
                ClashUpdate::default()
            }
        })
        .add_edge(START, "a")
        .add_edge(START, "b")
        .add_edge("a", END)
        .add_edge("b", END)
        .compile(Compile::new().checkpointer(saver.clone()))
        .unwrap();
    let config = RunConfig::thread("clash");
    let input = |mode: &str| ClashUpdate::default().mode(mode);
    for _ in 0..3 {
        graph.invoke(input("ok"), &config).await.unwrap();
    }
    // `a`'s items are merged into the run's state before `b`'s `last`
    // clashes with `a`'s: the step fails and is not stored.
    let failed = graph.invoke(input("clash"), &config).await;
    assert!(failed.is_err(), "{failed:?}");
    assert!(head_is_delta_clash(&saver).await);
    // The next run starts from what is stored (`get_state` cannot merge the
    // failed step's writes either): one more item, not two.
    let out = graph.invoke(input("ok"), &config).await.unwrap();
    assert_eq!(out.complete().unwrap().items, ["a", "a", "a", "a"]);
}

async fn head_is_delta_clash(saver: &InMemorySaver) -> bool {
    let head = saver
        .get_stored(&CheckpointRef::latest("clash"))
        .await
        .unwrap()
        .unwrap();
    !head.checkpoint.deltas.is_empty() && !head.checkpoint.channel_values.contains_key("items")
}

/// Pauses and resumes through one graph, under every durability: each run
/// starts from the state the previous one stored (the pause, then the
/// answered turn), and the conversation comes out whole and in order.
#[tokio::test]
async fn pauses_resumed_through_the_same_graph_keep_the_whole_conversation() {
    for durability in [Durability::Sync, Durability::Async, Durability::Exit] {
        let saver = InMemorySaver::new();
        let graph = Graph::<Clash>::new("ask")
            .add_node(
                "ask",
                |s: &Clash, rt: &Runtime| -> Result<ClashUpdate, NodeError> {
                    let answer = rt.interrupt(format!("after {} items?", s.items.len()))?;
                    Ok(ClashUpdate::default()
                        .items(vec![format!("answer {}", answer.as_str().unwrap_or("?"))]))
                },
            )
            .add_sequence([START, "ask", END])
            .compile(Compile::new().checkpointer(saver.clone()))
            .unwrap();
        let config = RunConfig::thread("ask").durability(durability);
        for i in 0..40 {
            let paused = graph.invoke(ClashUpdate::default(), &config).await.unwrap();
            assert!(
                matches!(paused, Outcome::Interrupted(_)),
                "{durability:?} turn {i}"
            );
            let done = graph
                .resume(serde_json::json!(i.to_string()), &config)
                .await
                .unwrap();
            let items = done.complete().unwrap().items;
            let expected: Vec<String> = (0..=i).map(|k| format!("answer {k}")).collect();
            assert_eq!(items, expected, "{durability:?} turn {i}");
        }
        // What is stored reads the same through a graph that ran nothing.
        let fresh = Graph::<Clash>::new("ask")
            .add_node("ask", |_: &Clash| ClashUpdate::default())
            .add_sequence([START, "ask", END])
            .compile(Compile::new().checkpointer(saver.clone()))
            .unwrap();
        assert_eq!(
            fresh.get_state(&config).await.unwrap().values.items.len(),
            40
        );
    }
}
