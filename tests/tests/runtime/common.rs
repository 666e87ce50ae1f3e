//! Graphs shared by the runtime tests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use weaver::prelude::*;
use weaver_tests::states::{Steps, StepsUpdate};

pub fn node_a(_: &Steps) -> StepsUpdate {
    StepsUpdate::default().foo("a").bar(["a"])
}

pub async fn node_b(_: &Steps) -> StepsUpdate {
    StepsUpdate::default().foo("b").bar(["b"])
}

/// The seed's `CheckpointExample`: START → node_a → node_b → END.
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
