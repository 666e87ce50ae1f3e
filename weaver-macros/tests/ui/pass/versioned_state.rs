use serde_json::{Map, Value};
use weaver::prelude::*;

fn v1_to_v2(m: Map<String, Value>) -> Result<Map<String, Value>, String> {
    Ok(m)
}

mod upcasters {
    pub fn v2_to_v3(
        m: serde_json::Map<String, serde_json::Value>,
    ) -> Result<serde_json::Map<String, serde_json::Value>, std::io::Error> {
        Ok(m)
    }
}

/// With a schema: checkpoints record its fingerprint.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[graph_state(version = 3, upcast(1 => v1_to_v2, 2 => upcasters::v2_to_v3))]
struct State {
    title: String,
}

/// Without `JsonSchema`: no fingerprint, still versioned.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
#[graph_state(version = 2)]
struct Plain {
    title: String,
}

fn main() {
    assert_eq!(<State as GraphState>::VERSION, 3);
    assert_eq!(<State as GraphState>::UPCASTS, &[1, 2]);
    assert!(<State as GraphState>::schema_fingerprint().is_some());
    assert!(<Plain as GraphState>::schema_fingerprint().is_none());
    assert_eq!(<Plain as GraphState>::VERSION, 2);
}
