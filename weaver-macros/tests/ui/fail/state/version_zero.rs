use serde_json::{Map, Value};
use weaver::prelude::*;

fn up(m: Map<String, Value>) -> Result<Map<String, Value>, String> {
    Ok(m)
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
#[graph_state(version = 0)]
struct State {
    title: String,
}

fn main() {
    let _ = up;
}
