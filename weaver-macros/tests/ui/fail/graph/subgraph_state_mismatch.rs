use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    #[reducer(append)]
    log: Vec<String>,
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct Other {
    text: String,
}

fn a(_: &State) -> StateUpdate {
    StateUpdate::default().log(vec!["a".to_owned()])
}

fn main() {
    let research = Graph::<Other>::new("research")
        .add_node("b", |_: &Other| OtherUpdate::default().text("b".to_owned()))
        .add_sequence([START, "b", END])
        .compile(Compile::new())
        .unwrap();
    let _ = graph! {
        state: State,
        nodes: [a, research = research],
        edges: [START -> a -> research -> END],
    };
}
