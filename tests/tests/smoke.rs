use weaver::checkpoint::ListFilter;
use weaver::prelude::*;
use weaver_tests::states::{Steps, StepsUpdate};

fn node_a(_: &Steps) -> StepsUpdate {
    StepsUpdate::default().foo("a").bar(["a"])
}
async fn node_b(_: &Steps) -> StepsUpdate {
    StepsUpdate::default().foo("b").bar(["b"])
}

#[tokio::test]
async fn two_step() {
    let saver = InMemorySaver::new();
    let g = Graph::<Steps>::new("CheckpointExample")
        .add_node("node_a", node_a)
        .add_node("node_b", node_b)
        .add_edge(START, "node_a")
        .add_edge("node_a", "node_b")
        .add_edge("node_b", END)
        .compile(Compile::new().checkpointer(saver.clone()))
        .unwrap();
    let s = g
        .invoke(Steps::default(), &RunConfig::thread("t1"))
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(s.foo, "b");
    assert_eq!(s.bar, ["a", "b"]);
    let h = saver.list(&ListFilter::thread("t1")).await.unwrap();
    for t in &h {
        println!(
            "{} {:?} {} {:?}",
            t.commit_order, t.metadata.source, t.metadata.step, t.checkpoint.channel_values
        );
    }
    assert_eq!(h.len(), 4);
}
