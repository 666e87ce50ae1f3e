use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    #[reducer(add)]
    items: Vec<i64>,
}

fn main() {}
