//! Graphs and helpers shared by the runtime tests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use weaver::graph::RunStream;
use weaver::prelude::*;
use weaver::{StreamEvent, StreamItem};
use weaver_tests::states::{Steps, StepsUpdate};

pub fn node_a(_: &Steps) -> StepsUpdate {
    StepsUpdate::default().foo("a").bar(["a"])
}

pub async fn node_b(_: &Steps) -> StepsUpdate {
    StepsUpdate::default().foo("b").bar(["b"])
}

/// BeamWeaver's `CheckpointExample`: START → node_a → node_b → END.
pub fn two_step(saver: &InMemorySaver) -> CompiledGraph<Steps> {
    Graph::<Steps>::new("CheckpointExample")
        .add_node("node_a", node_a)
        .add_node("node_b", node_b)
        .add_edge(START, "node_a")
        .add_edge("node_a", "node_b")
        .add_edge("node_b", END)
        .compile(Compile::new().checkpointer(saver.clone()))
        .expect("valid graph")
}

/// Counts how often each node ran.
#[derive(Clone, Default, Debug)]
pub struct Runs(Arc<Mutex<BTreeMap<String, usize>>>);

impl Runs {
    pub fn hit(&self, node: &str) {
        *self.0.lock().unwrap().entry(node.to_owned()).or_default() += 1;
    }
    pub fn get(&self, node: &str) -> usize {
        self.0.lock().unwrap().get(node).copied().unwrap_or(0)
    }
    pub fn total(&self) -> usize {
        self.0.lock().unwrap().values().sum()
    }
}

/// Every event as a short string, then the result; fails if the stream ends
/// without `Done` or yields anything after it.
pub async fn collect(mut s: RunStream<Steps>) -> (Vec<String>, weaver::Result<Outcome<Steps>>) {
    let mut seen = Vec::new();
    while let Some(item) = s.next().await {
        match item {
            StreamItem::Event(StreamEvent::Update { step, node, .. }) => {
                seen.push(format!("u{step}:{node}"))
            }
            StreamItem::Event(StreamEvent::Values { step, values }) => {
                seen.push(format!("v{step}:{}", values.bar.join(",")))
            }
            StreamItem::Event(StreamEvent::Interrupted(i)) => {
                let nodes: Vec<&str> = i.iter().map(|i| i.node.as_str()).collect();
                seen.push(format!("i:{}", nodes.join(",")))
            }
            // Only the values and updates modes are collected here.
            StreamItem::Event(other) => seen.push(format!("other:{other:?}")),
            StreamItem::Done(result) => {
                let rest = tokio::time::timeout(Duration::from_secs(5), s.next()).await;
                assert!(matches!(rest, Ok(None)), "after Done: {rest:?} ({seen:?})");
                return (seen, result);
            }
        }
    }
    panic!("the stream ended without Done after {seen:?}");
}
