use std::collections::BTreeSet;

use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    #[reducer(delta)]
    tags: BTreeSet<String>,
}

fn main() {}
