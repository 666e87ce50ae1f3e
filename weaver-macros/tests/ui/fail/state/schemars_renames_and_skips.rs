use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[schemars(rename_all = "camelCase")]
struct State {
    #[schemars(rename = "t")]
    topic: String,
    #[schemars(skip)]
    scratch: String,
    // Fine: a description changes no key.
    #[schemars(description = "the note")]
    note: Option<String>,
}

fn main() {}
