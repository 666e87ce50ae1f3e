use weaver::prelude::*;

fn longest(current: &mut String, update: &str) {
    if update.len() > current.len() {
        *current = update.to_owned();
    }
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    #[reducer(self::longest)]
    name: String,
}

fn main() {}
