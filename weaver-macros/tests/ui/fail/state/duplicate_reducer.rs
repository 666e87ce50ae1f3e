use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    #[reducer(append)]
    #[reducer(append)]
    items: Vec<String>,
}

fn main() {}
