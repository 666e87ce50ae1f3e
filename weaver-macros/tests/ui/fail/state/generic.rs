use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct State<T> {
    value: T,
}

fn main() {}
