use weaver::prelude::*;

fn v1_to_v2(
    m: serde_json::Map<String, serde_json::Value>,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    Ok(m)
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Doc {
    #[graph_state(version = 2, upcast(1 => v1_to_v2))]
    title: String,
    words: u32,
}

fn main() {}
