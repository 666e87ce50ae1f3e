use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct State {
    #[serde(rename = "t")]
    topic: String,
    #[serde(skip)]
    scratch: String,
    #[serde(flatten)]
    extra: std::collections::BTreeMap<String, String>,
    // Fine: an absent `Option` reads back as `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

fn main() {}
