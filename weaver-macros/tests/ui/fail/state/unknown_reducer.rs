use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    #[reducer(apend)]
    items: Vec<String>,
}

fn main() {}
