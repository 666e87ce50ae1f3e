use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
enum State {
    #[default]
    Idle,
    Busy,
}

fn main() {}
