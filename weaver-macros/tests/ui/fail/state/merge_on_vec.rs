use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    #[reducer(merge)]
    items: Vec<(String, i64)>,
}

fn main() {}
