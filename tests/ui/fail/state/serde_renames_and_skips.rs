use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct State {
    #[serde(rename = "t")]
    topic: String,
    #[serde(skip)]
    scratch: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[reducer(append)]
    log: Vec<String>,
}

fn main() {}
