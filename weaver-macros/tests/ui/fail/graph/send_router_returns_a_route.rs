use weaver::prelude::*;

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    docs: Vec<String>,
    #[reducer(append)]
    sizes: Vec<u64>,
}

// A `Route` of sends: fine for `conditional:`, but `send:` checks payloads.
fn fan_out(s: &State) -> weaver::Route {
    weaver::Route::sends(s.docs.iter().map(|d| weaver::Send::new("measure", d.clone())))
}

fn measure(d: &String) -> StateUpdate {
    StateUpdate::default().sizes(vec![d.len() as u64])
}

fn main() {
    let _ = graph! {
        state: State,
        nodes: [measure],
        edges: [measure -> END],
        send: [START => fan_out ? [measure]],
    };
}
