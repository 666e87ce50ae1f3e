use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    #[reducer(delta)]
    messages: Vec<String>,
}

fn main() {}
