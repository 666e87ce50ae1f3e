use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    docs: Vec<String>,
}

fn fan_out(s: &State) -> Vec<weaver::Send<String>> {
    s.docs.iter().map(|d| weaver::Send::new("measure", d.clone())).collect()
}

fn start(_: &State) -> StateUpdate {
    StateUpdate::default()
}

fn measure(_: &String) -> StateUpdate {
    StateUpdate::default()
}

fn main() {
    let _ = graph! {
        state: State,
        nodes: [start, measure],
        edges: [START -> start -> measure -> END],
        send: [start => fan_out ? [r#measure]],
    };
}
