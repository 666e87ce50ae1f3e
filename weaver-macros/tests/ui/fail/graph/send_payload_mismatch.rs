use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    docs: Vec<String>,
    #[reducer(append)]
    sizes: Vec<u64>,
}

fn fan_out(s: &State) -> Vec<weaver::Send<String>> {
    s.docs.iter().map(|d| weaver::Send::new("measure", d.clone())).collect()
}

// Takes a number, but the router sends strings.
fn measure(n: &u64) -> StateUpdate {
    StateUpdate::default().sizes(vec![*n])
}

fn main() {
    let _ = graph! {
        state: State,
        // Spelled raw here and plain below: still the same node.
        nodes: [r#measure],
        edges: [measure -> END],
        send: [START => fan_out ? [measure]],
    };
}
