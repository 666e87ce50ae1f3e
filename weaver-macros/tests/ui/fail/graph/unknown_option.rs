use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    #[reducer(append)]
    log: Vec<String>,
}

fn a(_: &State) -> StateUpdate {
    StateUpdate::default().log(vec!["a".to_owned()])
}

fn b(_: &State) -> StateUpdate {
    StateUpdate::default().log(vec!["b".to_owned()])
}

fn main() {
    let _ = graph! {
        state: State,
        nodes: [a, b],
        egdes: [START -> a -> b -> END],
    };
}
